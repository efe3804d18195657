//! What both fake forges share: the log of every request they answered, whose every new
//! entry wakes a test waiting on the fake's state, and failures queued on purpose. Each
//! fake still answers a failure in its own forge's wire format.

use std::time::Duration;

use axum::http::{HeaderMap, Method, Uri};
use tokio::sync::watch;

/// How long a test waits on a fake before it fails.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Recorded<C> {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// Who sent it, as the fake understood the request's credentials.
    pub credential: C,
    pub body: String,
    /// The status the fake answered with.
    pub status: u16,
}

/// Every request a fake answered, oldest first. Each entry is added after the fake's
/// state changed for it, so a waiter woken by it sees the change.
pub struct RequestLog<C> {
    entries: Vec<Recorded<C>>,
    added: watch::Sender<usize>,
}

impl<C> Default for RequestLog<C> {
    fn default() -> Self {
        RequestLog {
            entries: Vec::new(),
            added: watch::Sender::new(0),
        }
    }
}

impl<C: Clone> RequestLog<C> {
    pub fn record(&mut self, method: &Method, uri: &Uri, credential: C, body: &[u8], status: u16) {
        self.entries.push(Recorded {
            method: method.to_string(),
            path: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |p| p.to_string()),
            credential,
            body: String::from_utf8_lossy(body).into_owned(),
            status,
        });
        self.added.send_replace(self.entries.len());
    }

    pub fn all(&self) -> Vec<Recorded<C>> {
        self.entries.clone()
    }

    /// Requests with this method whose path starts with `prefix`.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.entries
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .count()
    }

    /// Wakes its holder each time a request is recorded.
    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.added.subscribe()
    }
}

/// Waits until `check` finds what a test waits for in a fake's state, looking again each
/// time the fake records a request (nothing else changes it while the test waits).
pub async fn wait_for<T>(
    what: &str,
    mut added: watch::Receiver<usize>,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let waiting = async {
        loop {
            added.borrow_and_update();
            if let Some(found) = check() {
                return found;
            }
            added
                .changed()
                .await
                .expect("the fake runs while the test waits on it");
        }
    };
    tokio::time::timeout(WAIT, waiting)
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
}

/// Which requests a queued failure applies to.
enum Applies {
    Any,
    /// This method, and exactly this path (without the query).
    Path(String, String),
    /// This method, and a path starting with this.
    Prefix(String, String),
    /// This method, and a body containing this text.
    Body(String, String),
}

/// A failure a fake answers instead of its usual answer.
pub struct Fault {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The request is carried out before the failure is answered, as when a proxy loses
    /// the answer to a request the forge went on to finish: what a retry must not repeat.
    pub performed: bool,
    applies: Applies,
}

/// An identity's rate limit window as a forge keeps it: every answer spends one call and
/// says what is left; a spent window is refused until its reset, then starts full again.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    pub limit: u64,
    pub remaining: u64,
    /// Unix seconds.
    pub reset: u64,
}

impl RateLimit {
    /// Says what is left in `headers`, named as the forge names them: `{prefix}limit`,
    /// `{prefix}remaining`, `{prefix}reset`, and the calls spent as `{prefix}{used}`.
    pub fn add_headers(&self, headers: &mut HeaderMap, prefix: &str, used: &str) {
        for (name, value) in [
            ("limit", self.limit),
            ("remaining", self.remaining),
            ("reset", self.reset),
            (used, self.limit - self.remaining),
        ] {
            let name =
                axum::http::HeaderName::from_bytes(format!("{prefix}{name}").as_bytes()).unwrap();
            headers.insert(name, value.into());
        }
    }
}

/// What a request meets under a rate limit: answered (its headers say what is left), or
/// refused because the window is spent.
pub enum Metered {
    Answered(RateLimit),
    Spent(RateLimit),
}

/// A rate limit a test set, from the first request it applies to on.
#[derive(Default)]
pub struct RateLimits {
    armed: Option<(Applies, RateLimit, Duration)>,
    active: Option<RateLimit>,
}

impl RateLimits {
    /// From the next `method` request whose body contains `text` on (that one included),
    /// `remaining` of `limit` calls are left until `reset_in` from then.
    pub fn arm(
        &mut self,
        method: &str,
        text: &str,
        limit: u64,
        remaining: u64,
        reset_in: Duration,
    ) {
        let applies = Applies::Body(method.to_owned(), text.to_owned());
        let window = RateLimit {
            limit,
            remaining,
            reset: 0,
        };
        self.armed = Some((applies, window, reset_in));
    }

    /// Spends one call of the window, when one is set.
    pub fn meter(&mut self, method: &Method, path: &str, body: &[u8]) -> Option<Metered> {
        let now = unix_now();
        if let Some((applies, _, _)) = &self.armed
            && applies.matches(method.as_str(), path, body)
        {
            let (_, mut window, reset_in) = self.armed.take().unwrap();
            window.reset = now + reset_in.as_secs().max(1);
            self.active = Some(window);
        }
        let window = self.active.as_mut()?;
        if now >= window.reset {
            window.remaining = window.limit;
            window.reset = now + 3600;
        }
        if window.remaining == 0 {
            return Some(Metered::Spent(*window));
        }
        window.remaining -= 1;
        Some(Metered::Answered(*window))
    }

    /// Gives back the call the last request spent (a `304`, which GitHub does not count),
    /// saying what is left now.
    pub fn refund(&mut self) -> Option<RateLimit> {
        let window = self.active.as_mut()?;
        window.remaining = (window.remaining + 1).min(window.limit);
        Some(*window)
    }
}

/// A GET's successful answer with an `ETag` (a hash of its body), or `304 Not Modified`
/// without a body when the request's `If-None-Match` names that tag, as GitHub answers.
pub async fn conditional(
    method: &Method,
    headers: &HeaderMap,
    response: axum::response::Response,
) -> axum::response::Response {
    use std::hash::{Hash, Hasher};
    if method != Method::GET || response.status() != axum::http::StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    let etag = format!("W/\"{:016x}\"", hasher.finish());
    let asked = headers
        .get_all(axum::http::header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    parts
        .headers
        .insert(axum::http::header::ETAG, etag.parse().unwrap());
    if asked {
        parts.status = axum::http::StatusCode::NOT_MODIFIED;
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        parts.headers.remove(axum::http::header::CONTENT_TYPE);
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// OAuth as both fakes keep it: who the browser is signed in to the forge as, the codes
/// handed out and the tokens they were exchanged for, each code once.
#[derive(Default)]
pub struct Oauth {
    /// The person the forge's consent page sees: `None` declines.
    pub person: Option<(String, i64)>,
    /// code → what it was handed out for
    codes: std::collections::HashMap<String, Grant>,
    /// token → person
    pub tokens: std::collections::HashMap<String, (String, i64)>,
    issued: u64,
}

/// What a code was handed out for: the person, the redirect it must come back with, and
/// the PKCE challenge its verifier must answer.
struct Grant {
    person: (String, i64),
    redirect_uri: String,
    challenge: Option<String>,
}

/// Why an exchange was refused.
pub enum Refusal {
    /// The code is unknown, used, or for another redirect.
    BadCode,
    /// The PKCE verifier does not answer the challenge.
    BadVerifier,
}

impl Oauth {
    /// The consent page's answer to `redirect_uri`: a code, or `access_denied`.
    pub fn authorize(
        &mut self,
        redirect_uri: &str,
        state: &str,
        challenge: Option<&str>,
    ) -> String {
        let sep = if redirect_uri.contains('?') { '&' } else { '?' };
        let state =
            percent_encoding::utf8_percent_encode(state, percent_encoding::NON_ALPHANUMERIC);
        match self.person.clone() {
            Some(person) => {
                self.issued += 1;
                let code = format!("code{:04}{:032x}", self.issued, rand_u128());
                self.codes.insert(
                    code.clone(),
                    Grant {
                        person,
                        redirect_uri: redirect_uri.to_owned(),
                        challenge: challenge.map(str::to_owned),
                    },
                );
                format!("{redirect_uri}{sep}code={code}&state={state}")
            }
            None => format!(
                "{redirect_uri}{sep}error=access_denied&error_description=The+user+has+denied+your+application+access.&state={state}"
            ),
        }
    }

    /// Exchanges a code (once) for a token, as `prefix…`.
    pub fn exchange(
        &mut self,
        code: &str,
        redirect_uri: &str,
        verifier: Option<&str>,
        prefix: &str,
    ) -> Result<String, Refusal> {
        let Grant {
            person,
            redirect_uri: wanted_redirect,
            challenge,
        } = self.codes.remove(code).ok_or(Refusal::BadCode)?;
        if wanted_redirect != redirect_uri {
            return Err(Refusal::BadCode);
        }
        if let Some(challenge) = challenge {
            use base64::Engine as _;
            use sha2::Digest as _;
            let answered = verifier.is_some_and(|v| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(sha2::Sha256::digest(v.as_bytes()))
                    == challenge
            });
            if !answered {
                return Err(Refusal::BadVerifier);
            }
        }
        self.issued += 1;
        let token = format!("{prefix}{:04}{:032x}", self.issued, rand_u128());
        self.tokens.insert(token.clone(), person);
        Ok(token)
    }
}

fn rand_u128() -> u128 {
    rand::random()
}

/// The bearer token of a request, if it sends one.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::to_owned)
}

/// A form body's or query's fields.
pub fn fields(text: &str) -> std::collections::HashMap<String, String> {
    serde_urlencoded::from_str(text).unwrap_or_default()
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Failures queued by a test; each is answered once, to the first request it applies to.
#[derive(Default)]
pub struct Faults(Vec<Fault>);

impl Faults {
    /// The next `n` requests, whatever they are, fail with `status` and `headers`.
    pub fn next(&mut self, n: usize, status: u16, headers: &[(&str, &str)]) {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for _ in 0..n {
            self.push(status, headers.clone(), false, Applies::Any);
        }
    }

    /// The next `method` request to exactly `path` is carried out, then fails.
    pub fn performed_on_path(&mut self, method: &str, path: &str, status: u16) {
        let applies = Applies::Path(method.to_owned(), path.to_owned());
        self.push(status, Vec::new(), true, applies);
    }

    /// The next `method` request whose path starts with `prefix` is carried out, then
    /// fails.
    pub fn performed_on_prefix(&mut self, method: &str, prefix: &str, status: u16) {
        let applies = Applies::Prefix(method.to_owned(), prefix.to_owned());
        self.push(status, Vec::new(), true, applies);
    }

    /// The next `method` request whose body contains `text` fails, not carried out.
    pub fn refused_body(&mut self, method: &str, text: &str, status: u16) {
        let applies = Applies::Body(method.to_owned(), text.to_owned());
        self.push(status, Vec::new(), false, applies);
    }

    fn push(
        &mut self,
        status: u16,
        headers: Vec<(String, String)>,
        performed: bool,
        applies: Applies,
    ) {
        self.0.push(Fault {
            status,
            headers,
            performed,
            applies,
        });
    }

    /// The first queued failure that applies to this request, taken off the queue. `path`
    /// is the one the fake routes on (without the query).
    pub fn take(&mut self, method: &Method, path: &str, body: &[u8]) -> Option<Fault> {
        let method = method.as_str();
        let i = self
            .0
            .iter()
            .position(|f| f.applies.matches(method, path, body))?;
        Some(self.0.remove(i))
    }
}

impl Applies {
    fn matches(&self, method: &str, path: &str, body: &[u8]) -> bool {
        match self {
            Applies::Any => true,
            Applies::Path(m, p) => m == method && p == path,
            Applies::Prefix(m, p) => m == method && path.starts_with(p.as_str()),
            Applies::Body(m, text) => {
                m == method && String::from_utf8_lossy(body).contains(text.as_str())
            }
        }
    }
}

impl Fault {
    /// Puts the failure's headers on a fake's response.
    pub fn add_headers(&self, headers: &mut HeaderMap) {
        for (k, v) in &self.headers {
            headers.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_str(v).unwrap(),
            );
        }
    }
}
