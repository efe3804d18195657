//! GitLab's transport: one REST call through the retry policy, counted against the
//! rate-limit budget, its failures classified and the token scrubbed from them; pages,
//! job logs read in bounded memory, and paths encoded.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use secrecy::ExposeSecret;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::forge::GitlabForge;
use super::wire::*;
use crate::forge::{CI_LOG_MAX, Comment, ForgeError, header};
use crate::ids::RepoName;

/// Notes fetched per page: GitLab's maximum, so long threads take few requests.
pub(super) const PER_PAGE: usize = 100;

/// A thread longer than this many pages is not a thread planwright can act on anyway;
/// the bound keeps a misbehaving server from looping us forever.
pub(super) const MAX_PAGES: usize = 100;

impl GitlabForge {
    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ForgeError> {
        self.request(Method::GET, path, None).await
    }

    /// One forge call through the retry policy, decoded as `T`.
    pub(super) async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let (_, text) = self.send(method.clone(), path, body).await?;
        decode(&what(&method, path), &text)
    }

    /// One forge call through the retry policy; the answer's headers and text.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(HeaderMap, String), ForgeError> {
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let route = crate::forge::route(method.as_str(), path);
        self.retry
            .run(|| async {
                self.attempt(&method, &url, &route, body, &what)
                    .await
                    .map_err(|e| self.scrub(e))
            })
            .await
    }

    pub(super) async fn attempt(
        &self,
        method: &Method,
        url: &str,
        route: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<(HeaderMap, String), ForgeError> {
        let response = self.answered(method, url, route, body, what).await?;
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| transport(what, e))?;
        Ok((headers, text))
    }

    /// One request, counted; a successful answer, or the failure classified.
    pub(super) async fn answered(
        &self,
        method: &Method,
        url: &str,
        route: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<reqwest::Response, ForgeError> {
        // Down to its reserve: the call waits for the reset instead of spending the rest.
        crate::forge::budget::check("gitlab", &self.api, what)?;
        tracing::debug!(call = what, "forge request");
        let mut request = self.http.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            crate::metrics::record_forge_request("gitlab", route, "error");
            transport(what, e)
        })?;
        let status = response.status();
        // Kept from every answer, a refusal too: a 429 says most about what is left.
        crate::forge::budget::record("gitlab", &self.api, response.headers());
        crate::metrics::record_forge_request("gitlab", route, status.as_str());
        if status == reqwest::StatusCode::NOT_MODIFIED {
            // Nothing planwright sends to GitLab is conditional.
            return Err(crate::forge::conditional::unasked("GitLab", what));
        }
        if !status.is_success() {
            let headers = response.headers().clone();
            let text = response.text().await.map_err(|e| transport(what, e))?;
            return Err(classify_status(
                what.to_owned(),
                status,
                &headers,
                error_message(&text),
            ));
        }
        Ok(response)
    }

    /// The end of a text answer (a job's log), at most [`CI_LOG_MAX`] bytes, read in
    /// bounded memory however long the log is.
    pub(super) async fn log_tail(&self, path: &str) -> Result<String, ForgeError> {
        let method = Method::GET;
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let route = crate::forge::route(method.as_str(), path);
        self.retry
            .run(|| async {
                let mut response = self
                    .answered(&method, &url, &route, None, &what)
                    .await
                    .map_err(|e| self.scrub(e))?;
                let mut kept: Vec<u8> = Vec::new();
                let mut before = 0usize;
                while let Some(chunk) = response.chunk().await.map_err(|e| transport(&what, e))? {
                    kept.extend_from_slice(&chunk);
                    // Drained in halves, so each byte moves at most twice.
                    if kept.len() > 2 * CI_LOG_MAX {
                        let cut = kept.len() - CI_LOG_MAX;
                        kept.drain(..cut);
                        before += cut;
                    }
                }
                if kept.len() > CI_LOG_MAX {
                    let cut = kept.len() - CI_LOG_MAX;
                    kept.drain(..cut);
                    before += cut;
                }
                let text = String::from_utf8_lossy(&kept);
                Ok(if before > 0 {
                    format!("[… the first {before} bytes of the log are not shown]\n{text}")
                } else {
                    text.into_owned()
                })
            })
            .await
    }

    /// Posts a note at `path` (an issue's, a merge request's or a discussion's notes).
    /// Not repeated after a failure GitLab may have stored anyway (a 502, a timeout): the
    /// session layer posts with a marker and looks for it before posting again.
    pub(super) async fn create_note(&self, path: &str, body: &str) -> Result<Comment, ForgeError> {
        let method = Method::POST;
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let payload = json!({ "body": body });
        let route = crate::forge::route(method.as_str(), path);
        let (_, text) = self
            .retry
            .run_create(|| async {
                self.attempt(&method, &url, &route, Some(&payload), &what)
                    .await
                    .map_err(|e| self.scrub(e))
            })
            .await?;
        let created: GlNote = decode(&what, &text)?;
        Ok(created.into())
    }

    /// Removes the token from error text, in case a proxy or the server echoes a header.
    pub(super) fn scrub(&self, error: ForgeError) -> ForgeError {
        let token = self.token.expose_secret();
        if token.is_empty() {
            return error;
        }
        let clean = |s: String| s.replace(token, "[redacted]");
        match error {
            ForgeError::Refused {
                what,
                status,
                message,
            } => ForgeError::Refused {
                what,
                status,
                message: clean(message),
            },
            ForgeError::Unavailable {
                what,
                status,
                message,
            } => ForgeError::Unavailable {
                what,
                status,
                message: clean(message),
            },
            ForgeError::Transport { what, message } => ForgeError::Transport {
                what,
                message: clean(message),
            },
            other => other,
        }
    }
}

/// The call named for errors and logs: method and path without the query.
pub(super) fn what(method: &Method, path: &str) -> String {
    format!("{method} {}", path.split('?').next().unwrap_or(path))
}

pub(super) fn decode<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, ForgeError> {
    serde_json::from_str(text).map_err(|e| ForgeError::Malformed {
        what: what.to_owned(),
        message: e.to_string(),
    })
}

pub(super) fn transport(what: &str, e: reqwest::Error) -> ForgeError {
    ForgeError::Transport {
        what: what.to_owned(),
        message: error_chain(&e.without_url()),
    }
}

/// The page after this one: GitLab's `x-next-page` (empty on the last page), else a
/// `Link: <…page=N…>; rel="next"`, else — when a proxy stripped both — another page
/// exactly when this one was full.
pub(super) fn next_page(headers: &HeaderMap, page: usize, count: usize) -> Option<usize> {
    if let Some(next) = header(headers, "x-next-page") {
        return next.trim().parse().ok();
    }
    if let Some(link) = header(headers, "link") {
        return link
            .split(',')
            .find(|part| part.contains("rel=\"next\""))
            .and_then(|part| {
                let url = part.split(['<', '>']).nth(1)?;
                let query = url.split_once('?')?.1;
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("page="))
                    .and_then(|n| n.parse().ok())
            });
    }
    (count >= PER_PAGE).then_some(page + 1)
}

/// Classifies an answer that was not a success. GitLab signals rate limits with 429 and
/// `Retry-After` (seconds) or `RateLimit-Reset` (a Unix time).
pub(super) fn classify_status(
    what: String,
    status: StatusCode,
    headers: &HeaderMap,
    message: String,
) -> ForgeError {
    let code = status.as_u16();
    if code == 429 {
        return ForgeError::RateLimited {
            what,
            retry_after: rate_limit_wait(headers),
        };
    }
    ForgeError::from_status(what, code, message)
}

/// How long GitLab asks us to wait; `None` leaves it to the policy's backoff.
pub(super) fn rate_limit_wait(headers: &HeaderMap) -> Option<Duration> {
    if let Some(seconds) = header(headers, "retry-after").and_then(|v| v.trim().parse().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    let reset = header(headers, "ratelimit-reset").and_then(|v| v.trim().parse::<u64>().ok())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(Duration::from_secs(reset.saturating_sub(now) + 1))
}

/// GitLab puts the reason in `message` (a string, or field → errors for validation
/// failures) or, for OAuth-style refusals, in `error` / `error_description`.
pub(super) fn error_message(text: &str) -> String {
    let short = || text.chars().take(200).collect::<String>();
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return short();
    };
    let field = |name: &str| match body.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    field("message")
        .or_else(|| field("error_description"))
        .or_else(|| field("error"))
        .unwrap_or_else(short)
}

pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One path segment: GitLab wants project paths, file paths and branch names with their
/// slashes encoded (`group%2Fproject`, `docs%2Fa.md`).
pub(super) const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub(super) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

pub(super) fn project_path(repo: &RepoName) -> String {
    format!("/projects/{}", encode(repo.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn statuses_are_classified() {
        let s = |code: u16, h: &[(&'static str, &str)]| {
            classify_status(
                "GET /x".into(),
                StatusCode::from_u16(code).unwrap(),
                &headers(h),
                "m".into(),
            )
        };
        assert!(matches!(s(404, &[]), ForgeError::NotFound { .. }));
        assert!(matches!(
            s(502, &[]),
            ForgeError::Unavailable { status: 502, .. }
        ));
        assert!(matches!(
            s(403, &[]),
            ForgeError::Refused { status: 403, .. }
        ));
        assert!(matches!(
            s(401, &[]),
            ForgeError::Refused { status: 401, .. }
        ));
        assert!(matches!(
            s(429, &[("retry-after", "7")]),
            ForgeError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        match s(429, &[("ratelimit-reset", &reset.to_string())]) {
            ForgeError::RateLimited {
                retry_after: Some(d),
                ..
            } => assert!(d <= Duration::from_secs(31) && d >= Duration::from_secs(29)),
            other => panic!("not a rate limit: {other:?}"),
        }
        assert!(matches!(
            s(429, &[]),
            ForgeError::RateLimited {
                retry_after: None,
                ..
            }
        ));
    }

    #[test]
    fn the_next_page_comes_from_whichever_header_is_there() {
        assert_eq!(
            next_page(&headers(&[("x-next-page", "3")]), 2, 100),
            Some(3)
        );
        assert_eq!(next_page(&headers(&[("x-next-page", "")]), 2, 100), None);
        let link = "<https://gitlab.example.com/api/v4/projects/1/issues/3/notes?page=2&per_page=100&sort=asc>; rel=\"next\", \
                    <https://gitlab.example.com/api/v4/projects/1/issues/3/notes?page=1&per_page=100&sort=asc>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", link)]), 1, 100), Some(2));
        let last = "<https://gitlab.example.com/api/v4/x?page=1&per_page=100>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", last)]), 1, 100), None);
        assert_eq!(next_page(&headers(&[]), 1, 100), Some(2));
        assert_eq!(next_page(&headers(&[]), 1, 99), None);
    }

    #[test]
    fn paths_are_encoded_whole() {
        let repo = RepoName::parse("Group/Sub/Project").unwrap();
        assert_eq!(project_path(&repo), "/projects/group%2Fsub%2Fproject");
        assert_eq!(encode(".gitlab/planwright.yml"), ".gitlab%2Fplanwright.yml");
        assert_eq!(encode("docs/a b#c?.md"), "docs%2Fa%20b%23c%3F.md");
    }

    #[test]
    fn error_messages_are_read_from_any_shape() {
        assert_eq!(
            error_message(r#"{"message":"404 Not found"}"#),
            "404 Not found"
        );
        assert_eq!(
            error_message(r#"{"message":{"body":["is too long"]}}"#),
            r#"{"body":["is too long"]}"#
        );
        assert_eq!(
            error_message(r#"{"error":"insufficient_scope","error_description":"needs api"}"#),
            "needs api"
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
    }
}
