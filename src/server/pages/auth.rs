//! Who is asking. A signed-in browser carries one cookie, encrypted and authenticated
//! with a key every process of the deployment shares (kept in the database): what it
//! holds cannot be read or altered on the way, and its expiry is inside it, so an old
//! cookie replayed after its time is refused whatever its `Max-Age` said. Signing out
//! also records the cookie's id, so a copy kept elsewhere is refused too. An operator's
//! cookie names the ADMIN_TOKEN it was signed in with (by a digest): a new token ends
//! every operator sign-in made with the old one. Scripts send `Authorization: Bearer
//! <ADMIN_TOKEN>` instead; a browser never adds that header on its own, so such a request
//! cannot be forged by another site, and needs no CSRF token.
//!
//! A person signed in through their forge carries their own forge token in the cookie
//! (encrypted like the rest), which the pages use to see what they may read.
//!
//! Over https the cookies are `Secure` and named `__Host-…`, which a browser accepts
//! only from this host itself (no sibling subdomain can plant one).
//!
//! Chosen over a server-side session store: nothing to keep but the sign-outs, on SQLite
//! and PostgreSQL alike, and a sign-in works on every process at once.

use axum::http::{HeaderMap, header};
use axum_extra::extract::cookie::{Cookie, Key, PrivateCookieJar, SameSite};
use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::event::ForgeKind;
use crate::store::{Db, secrets};

/// The signed-in browser's cookie.
const SESSION_COOKIE: &str = "planwright_session";
/// Holds the sign-in form's CSRF token until the form comes back.
const SIGN_IN_COOKIE: &str = "planwright_sign_in";
/// Holds a sign-in through a forge until the forge sends the browser back.
const FLOW_COOKIE: &str = "planwright_oauth";
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
    /// This sign-in's id, recorded when it ends.
    id: String,
    who: Who,
    /// The token every form of this sign-in carries back.
    csrf: String,
    /// Unix seconds after which the cookie is refused.
    expires: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Who {
    Operator {
        /// A digest of the ADMIN_TOKEN signed in with.
        admin: String,
    },
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
    /// The cookie's sign-in id and expiry: `None` for a bearer token.
    pub sign_in: Option<(String, i64)>,
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

/// The deployment's cookie key, made once and shared through the database.
pub async fn cookie_key(db: &Db) -> anyhow::Result<Key> {
    let stored =
        secrets::get_or_insert(db, KEY_NAME, || hex::encode(rand::random::<[u8; 64]>())).await?;
    let bytes = hex::decode(stored.trim())
        .ok()
        .filter(|b| b.len() >= 64)
        .ok_or_else(|| anyhow::anyhow!("The stored cookie key is not 64 bytes of hex"))?;
    Ok(Key::from(&bytes))
}

fn now() -> i64 {
    crate::store::now_ms() / 1000
}

/// A fresh random token: CSRF values, sign-in ids, a forge sign-in's `state` and PKCE
/// verifier (64 hex characters, within PKCE's 43 to 128).
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Whether `presented` is the operator's token, compared by digest in constant time.
pub fn is_admin_token(presented: &str, admin: Option<&SecretString>) -> bool {
    admin.is_some_and(|admin| !presented.is_empty() && same_token(presented, admin.expose_secret()))
}

/// What an operator's cookie keeps of the ADMIN_TOKEN it was signed in with.
fn admin_digest(admin: &SecretString) -> String {
    let mut digest = Sha256::new();
    digest.update(b"planwright operator sign-in\0");
    digest.update(admin.expose_secret().as_bytes());
    hex::encode(digest.finalize())
}

/// Whether two tokens are equal, in constant time.
pub fn same_token(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes())
        .ct_eq(&Sha256::digest(b.as_bytes()))
        .into()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The pages' cookies: sealed with the deployment's key, `Secure` and `__Host-` named
/// over https.
#[derive(Clone)]
pub struct Cookies {
    key: Key,
    secure: bool,
}

impl Cookies {
    pub fn new(key: Key, secure: bool) -> Cookies {
        Cookies { key, secure }
    }

    fn name(&self, base: &str) -> String {
        if self.secure {
            format!("__Host-{base}")
        } else {
            base.to_owned()
        }
    }

    fn jar(&self, headers: &HeaderMap) -> PrivateCookieJar {
        PrivateCookieJar::from_headers(headers, self.key.clone())
    }

    fn cookie(&self, base: &str, value: String, ttl: i64) -> Cookie<'static> {
        Cookie::build((self.name(base), value))
            .path("/")
            .http_only(true)
            .secure(self.secure)
            .same_site(SameSite::Lax)
            .max_age(cookie::time::Duration::seconds(ttl))
            .build()
    }

    fn removal(&self, base: &str) -> Cookie<'static> {
        Cookie::build(self.name(base)).path("/").build()
    }

    /// Who sent the request: the operator's bearer token first, then the session
    /// cookie. A cookie that does not decrypt, does not parse, has expired, or names an
    /// ADMIN_TOKEN that is no longer the one set counts as none. Whether it was signed
    /// out is for the caller to ask the database ([`Visit::sign_in`]).
    pub fn visit(&self, headers: &HeaderMap, admin: Option<&SecretString>) -> Option<Visit> {
        if let Some(token) = bearer(headers) {
            // A wrong bearer token is no one, whatever cookie comes with it.
            return is_admin_token(token, admin).then_some(Visit {
                viewer: Viewer::Operator,
                csrf: None,
                sign_in: None,
            });
        }
        let cookie = self.jar(headers).get(&self.name(SESSION_COOKIE))?;
        let signed: Signed = serde_json::from_str(cookie.value()).ok()?;
        if signed.expires <= now() {
            return None;
        }
        let viewer = match signed.who {
            Who::Operator { admin: signed_with } => {
                let current = admin.map(admin_digest)?;
                if !same_token(&current, &signed_with) {
                    return None;
                }
                Viewer::Operator
            }
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
            sign_in: Some((signed.id, signed.expires)),
        })
    }

    /// The jar that signs `viewer` in for `ttl` seconds at most (and drops the sign-in
    /// cookies the request carried), for the response. An operator is signed in with
    /// `admin`, the ADMIN_TOKEN now set.
    pub fn sign_in(
        &self,
        headers: &HeaderMap,
        viewer: &Viewer,
        admin: Option<&SecretString>,
        ttl: i64,
    ) -> PrivateCookieJar {
        let who = match viewer {
            Viewer::Operator => Who::Operator {
                admin: admin.map(admin_digest).unwrap_or_default(),
            },
            Viewer::Person(p) => Who::Person {
                forge: p.forge,
                login: p.login.clone(),
                id: p.id,
                token: p.token.expose_secret().to_owned(),
            },
        };
        let ttl = ttl.clamp(60, SESSION_TTL_SECS);
        let signed = Signed {
            id: random_token(),
            who,
            csrf: random_token(),
            expires: now() + ttl,
        };
        let value = serde_json::to_string(&signed).unwrap_or_default();
        self.jar(headers)
            .remove(self.removal(SIGN_IN_COOKIE))
            .remove(self.removal(FLOW_COOKIE))
            .add(self.cookie(SESSION_COOKIE, value, ttl))
    }

    /// The jar that signs the browser out: the session cookie it sent is removed.
    pub fn sign_out(&self, headers: &HeaderMap) -> PrivateCookieJar {
        self.jar(headers).remove(self.removal(SESSION_COOKIE))
    }

    /// A sign-in form's CSRF token, and the jar that keeps it for the form's return.
    pub fn sign_in_form(&self) -> (String, PrivateCookieJar) {
        let token = random_token();
        let value = format!("{}:{token}", now() + SIGN_IN_TTL_SECS);
        let jar = PrivateCookieJar::new(self.key.clone()).add(self.cookie(
            SIGN_IN_COOKIE,
            value,
            SIGN_IN_TTL_SECS,
        ));
        (token, jar)
    }

    /// Whether a returning sign-in form carries the token this browser was given, in
    /// time.
    pub fn sign_in_form_matches(&self, headers: &HeaderMap, presented: &str) -> bool {
        let Some(cookie) = self.jar(headers).get(&self.name(SIGN_IN_COOKIE)) else {
            return false;
        };
        let Some((expires, token)) = cookie.value().split_once(':') else {
            return false;
        };
        expires.parse::<i64>().is_ok_and(|e| e > now()) && same_token(token, presented)
    }

    /// The jar that keeps a sign-in through `forge` for the forge's answer.
    pub fn start_flow(
        &self,
        forge: ForgeKind,
        state: String,
        verifier: String,
        ttl: i64,
    ) -> PrivateCookieJar {
        let flow = Flow {
            forge,
            state,
            verifier,
            expires: now() + ttl,
        };
        let value = serde_json::to_string(&flow).unwrap_or_default();
        PrivateCookieJar::new(self.key.clone()).add(self.cookie(FLOW_COOKIE, value, ttl))
    }

    /// The sign-in this browser started with `forge`, if it is the one the forge's
    /// `state` names and it has not expired.
    pub fn flow(&self, headers: &HeaderMap, forge: ForgeKind, state: &str) -> Option<Flow> {
        let cookie = self.jar(headers).get(&self.name(FLOW_COOKIE))?;
        let flow: Flow = serde_json::from_str(cookie.value()).ok()?;
        (flow.forge == forge && flow.expires > now() && same_token(&flow.state, state))
            .then_some(flow)
    }

    /// The jar that drops a sign-in through a forge, whatever came of it: each is tried
    /// once.
    pub fn end_flow(&self, headers: &HeaderMap) -> PrivateCookieJar {
        self.jar(headers).remove(self.removal(FLOW_COOKIE))
    }
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
    fn an_operator_cookie_holds_only_under_its_key_and_the_admin_token_it_was_made_with() {
        let cookies = Cookies::new(Key::generate(), false);
        let admin = SecretString::from("0123456789abcdef0123");
        let headers = cookie_header(cookies.sign_in(
            &HeaderMap::new(),
            &Viewer::Operator,
            Some(&admin),
            SESSION_TTL_SECS,
        ));
        let visit = cookies.visit(&headers, Some(&admin)).unwrap();
        assert!(visit.viewer.is_operator());
        assert!(visit.csrf.is_some() && visit.sign_in.is_some());
        let elsewhere = Cookies::new(Key::generate(), false);
        assert!(elsewhere.visit(&headers, Some(&admin)).is_none());
        assert!(cookies.visit(&headers, None).is_none());
        let rotated = SecretString::from("fedcba9876543210fedcba");
        assert!(cookies.visit(&headers, Some(&rotated)).is_none());
        // Over https the cookie has another name: a plain one is not taken for it.
        let secure = Cookies::new(cookies.key.clone(), true);
        assert!(secure.visit(&headers, Some(&admin)).is_none());
    }

    #[test]
    fn a_bearer_token_is_the_operator_only_when_it_is_the_admin_token() {
        let cookies = Cookies::new(Key::generate(), false);
        let admin = SecretString::from("0123456789abcdef0123");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef0123"),
        );
        assert!(
            cookies
                .visit(&headers, Some(&admin))
                .unwrap()
                .viewer
                .is_operator()
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0123456789abcdef012"),
        );
        assert!(cookies.visit(&headers, Some(&admin)).is_none());
        assert!(!is_admin_token("", Some(&admin)));
    }
}
