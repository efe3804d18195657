//! Who is asking. A signed-in browser carries one cookie, encrypted and authenticated
//! with a key every process of the deployment shares (kept in the database): what it
//! holds cannot be read or altered on the way, and its expiry is inside it, so an old
//! cookie replayed after its time is refused whatever its `Max-Age` said. Scripts send
//! `Authorization: Bearer <ADMIN_TOKEN>` instead; a browser never adds that header on its
//! own, so such a request cannot be forged by another site, and needs no CSRF token.
//!
//! A person signed in through their forge carries their own forge token in the cookie
//! (encrypted like the rest), which the pages use to see what they may read.
//!
//! Chosen over a server-side session store: nothing to keep or clean on SQLite and
//! PostgreSQL alike, and a sign-in works on every process at once.

use axum::http::{HeaderMap, header};
use axum_extra::extract::cookie::{Cookie, Key, PrivateCookieJar, SameSite};
use rand::RngCore as _;
use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::event::ForgeKind;
use crate::store::{Db, secrets};

/// The signed-in browser's cookie.
pub const SESSION_COOKIE: &str = "planwright_session";
/// Holds the sign-in form's CSRF token until the form comes back.
pub const SIGN_IN_COOKIE: &str = "planwright_sign_in";
/// How long a sign-in lasts.
pub const SESSION_TTL_SECS: i64 = 12 * 3600;
/// How long a sign-in form may take to come back.
const SIGN_IN_TTL_SECS: i64 = 30 * 60;
/// The database's name for the cookie key.
const KEY_NAME: &str = "cookie_key";

/// Who a request comes from.
#[derive(Debug, Clone)]
pub enum Viewer {
    /// The holder of ADMIN_TOKEN: sees every session.
    Operator,
    /// Someone signed in through their forge: sees the sessions of repositories their
    /// own token can read there.
    Person(Person),
}

/// Someone signed in through their forge.
#[derive(Debug, Clone)]
pub struct Person {
    pub forge: ForgeKind,
    pub login: String,
    pub id: i64,
    pub token: SecretString,
}

impl Viewer {
    pub fn is_operator(&self) -> bool {
        matches!(self, Viewer::Operator)
    }

    /// How the pages name the viewer.
    pub fn name(&self) -> String {
        match self {
            Viewer::Operator => "the operator".to_owned(),
            Viewer::Person(p) => p.login.clone(),
        }
    }
}

/// What the session cookie holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Signed {
    who: Who,
    /// The token every form of this sign-in carries back.
    csrf: String,
    /// Unix seconds after which the cookie is refused.
    expires: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Who {
    Operator,
    Person {
        forge: ForgeKind,
        login: String,
        id: i64,
        token: String,
    },
}

/// A request's viewer, and how it proved itself.
#[derive(Debug, Clone)]
pub struct Visit {
    pub viewer: Viewer,
    /// The CSRF token a form must carry: `None` for a bearer token, which needs none.
    pub csrf: Option<String>,
}

/// The deployment's cookie key, made once and shared through the database.
pub async fn cookie_key(db: &Db) -> anyhow::Result<Key> {
    let stored = secrets::get_or_insert(db, KEY_NAME, || {
        let mut bytes = [0u8; 64];
        rand::rng().fill_bytes(&mut bytes);
        hex::encode(bytes)
    })
    .await?;
    let bytes = hex::decode(stored.trim())
        .ok()
        .filter(|b| b.len() >= 64)
        .ok_or_else(|| anyhow::anyhow!("The stored cookie key is not 64 bytes of hex"))?;
    Ok(Key::from(&bytes))
}

fn now() -> i64 {
    crate::store::now_ms() / 1000
}

/// A fresh random token (CSRF values).
fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Whether `presented` is the operator's token, compared by digest in constant time.
pub fn is_admin_token(presented: &str, admin: Option<&SecretString>) -> bool {
    let Some(admin) = admin else { return false };
    if presented.is_empty() {
        return false;
    }
    Sha256::digest(presented.as_bytes())
        .ct_eq(&Sha256::digest(admin.expose_secret().as_bytes()))
        .into()
}

/// Whether two CSRF tokens are equal, in constant time.
pub fn same_token(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes())
        .ct_eq(&Sha256::digest(b.as_bytes()))
        .into()
}

/// Who sent the request: the operator's bearer token first, then the session cookie. A
/// cookie that does not decrypt, does not parse or has expired counts as none.
pub fn visit(headers: &HeaderMap, key: &Key, admin: Option<&SecretString>) -> Option<Visit> {
    if let Some(token) = bearer(headers) {
        // A wrong bearer token is no one, whatever cookie comes with it.
        return is_admin_token(token, admin).then_some(Visit {
            viewer: Viewer::Operator,
            csrf: None,
        });
    }
    let jar = PrivateCookieJar::from_headers(headers, key.clone());
    let cookie = jar.get(SESSION_COOKIE)?;
    let signed: Signed = serde_json::from_str(cookie.value()).ok()?;
    if signed.expires <= now() {
        return None;
    }
    let viewer = match signed.who {
        // Signed in with a token that is no longer the operator's: no longer the operator.
        Who::Operator if admin.is_some() => Viewer::Operator,
        Who::Operator => return None,
        Who::Person {
            forge,
            login,
            id,
            token,
        } => Viewer::Person(Person {
            forge,
            login,
            id,
            token: SecretString::from(token),
        }),
    };
    Some(Visit {
        viewer,
        csrf: Some(signed.csrf),
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The jar that signs `viewer` in for `ttl` seconds at most (and drops the sign-in
/// cookies the request carried), for the response.
pub fn sign_in(
    headers: &HeaderMap,
    key: &Key,
    viewer: &Viewer,
    ttl: i64,
    secure: bool,
) -> PrivateCookieJar {
    let who = match viewer {
        Viewer::Operator => Who::Operator,
        Viewer::Person(p) => Who::Person {
            forge: p.forge,
            login: p.login.clone(),
            id: p.id,
            token: p.token.expose_secret().to_owned(),
        },
    };
    let ttl = ttl.clamp(60, SESSION_TTL_SECS);
    let signed = Signed {
        who,
        csrf: random_token(),
        expires: now() + ttl,
    };
    let value = serde_json::to_string(&signed).unwrap_or_default();
    PrivateCookieJar::from_headers(headers, key.clone())
        .remove(Cookie::build(SIGN_IN_COOKIE).path("/"))
        .remove(Cookie::build(FLOW_COOKIE).path("/"))
        .add(cookie(SESSION_COOKIE, value, ttl, secure))
}

/// A sign-in through a forge under way: the `state` and PKCE verifier only this browser
/// can show when the forge sends it back.
#[derive(Serialize, Deserialize)]
pub struct Flow {
    pub forge: ForgeKind,
    pub state: String,
    pub verifier: String,
    expires: i64,
}

/// Holds a sign-in through a forge until the forge sends the browser back.
pub const FLOW_COOKIE: &str = "planwright_oauth";

/// The jar that keeps `flow` for the forge's answer.
pub fn start_flow(
    key: &Key,
    forge: ForgeKind,
    state: String,
    verifier: String,
    ttl: i64,
    secure: bool,
) -> PrivateCookieJar {
    let flow = Flow {
        forge,
        state,
        verifier,
        expires: now() + ttl,
    };
    let value = serde_json::to_string(&flow).unwrap_or_default();
    PrivateCookieJar::new(key.clone()).add(cookie(FLOW_COOKIE, value, ttl, secure))
}

/// The sign-in this browser started with `forge`, if it is the one the forge's `state`
/// names and it has not expired.
pub fn flow(headers: &HeaderMap, key: &Key, forge: ForgeKind, state: &str) -> Option<Flow> {
    let jar = PrivateCookieJar::from_headers(headers, key.clone());
    let flow: Flow = serde_json::from_str(jar.get(FLOW_COOKIE)?.value()).ok()?;
    (flow.forge == forge && flow.expires > now() && same_token(&flow.state, state)).then_some(flow)
}

/// The jar that signs the browser out: the session cookie it sent is removed.
pub fn sign_out(headers: &HeaderMap, key: &Key) -> PrivateCookieJar {
    PrivateCookieJar::from_headers(headers, key.clone())
        .remove(Cookie::build(SESSION_COOKIE).path("/"))
}

/// A sign-in form's CSRF token, and the jar that keeps it for the form's return.
pub fn sign_in_form(key: &Key, secure: bool) -> (String, PrivateCookieJar) {
    let token = random_token();
    let value = format!("{}:{token}", now() + SIGN_IN_TTL_SECS);
    let jar = PrivateCookieJar::new(key.clone()).add(cookie(
        SIGN_IN_COOKIE,
        value,
        SIGN_IN_TTL_SECS,
        secure,
    ));
    (token, jar)
}

/// Whether a returning sign-in form carries the token this browser was given, in time.
pub fn sign_in_form_matches(headers: &HeaderMap, key: &Key, presented: &str) -> bool {
    let jar = PrivateCookieJar::from_headers(headers, key.clone());
    let Some(cookie) = jar.get(SIGN_IN_COOKIE) else {
        return false;
    };
    let Some((expires, token)) = cookie.value().split_once(':') else {
        return false;
    };
    expires.parse::<i64>().is_ok_and(|e| e > now()) && same_token(token, presented)
}

fn cookie(name: &'static str, value: String, ttl: i64, secure: bool) -> Cookie<'static> {
    Cookie::build((name, value))
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(ttl))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn cookie_header(jar: PrivateCookieJar) -> HeaderMap {
        use axum::response::IntoResponse as _;
        let response = jar.into_response();
        let mut headers = HeaderMap::new();
        let pairs: Vec<String> = response
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
            .collect();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&pairs.join("; ")).unwrap(),
        );
        headers
    }

    #[test]
    fn a_cookie_signs_in_only_under_its_own_key_and_only_while_an_admin_token_is_set() {
        let key = Key::generate();
        let admin = SecretString::from("0123456789abcdef0123");
        let headers = cookie_header(sign_in(
            &HeaderMap::new(),
            &key,
            &Viewer::Operator,
            SESSION_TTL_SECS,
            false,
        ));
        let visit = visit(&headers, &key, Some(&admin)).unwrap();
        assert!(visit.viewer.is_operator());
        assert!(visit.csrf.is_some());
        assert!(super::visit(&headers, &Key::generate(), Some(&admin)).is_none());
        assert!(super::visit(&headers, &key, None).is_none());
    }

    #[test]
    fn a_bearer_token_is_the_operator_only_when_it_is_the_admin_token() {
        let key = Key::generate();
        let admin = SecretString::from("0123456789abcdef0123");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef0123"),
        );
        assert!(
            visit(&headers, &key, Some(&admin))
                .unwrap()
                .viewer
                .is_operator()
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef012"),
        );
        assert!(visit(&headers, &key, Some(&admin)).is_none());
        assert!(!is_admin_token("", Some(&admin)));
    }
}
