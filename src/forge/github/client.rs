//! GitHub's transport: the clients an app shares, one REST call through the retry
//! policy with its rate-limit budget and conditional answers, GitHub's failures
//! classified, and paths encoded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, Method, StatusCode};
use octocrab::Octocrab;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OnceCell;

use super::wire::*;
use crate::forge::conditional::Answers;
use crate::forge::{ForgeError, RetryPolicy, header};
use crate::ids::{InstallationId, RepoName};

/// Comments fetched per page: GitHub's maximum, so long threads take few requests.
pub(super) const PER_PAGE: usize = 100;

/// A thread longer than this many pages is not a thread planwright can act on anyway;
/// the bound keeps a misbehaving server from looping us forever.
pub(super) const MAX_PAGES: usize = 100;

pub(super) struct Shared {
    pub(super) app: Octocrab,
    pub(super) app_id: u64,
    /// Where GraphQL lives, which on GitHub Enterprise Server is not under the REST base.
    pub(super) graphql_url: String,
    /// The web view's root: `https://github.com`, or an Enterprise Server's host.
    pub(super) web_url: String,
    /// For GraphQL only: octocrab puts its base path in front of every URL, which on
    /// Enterprise Server turns `/api/graphql` into `/api/v3/api/graphql`.
    pub(super) http: reqwest::Client,
    pub(super) retry: RetryPolicy,
    /// GET answers kept for conditional requests, per installation.
    pub(super) answers: Answers,
    pub(super) slug: OnceCell<String>,
    /// One client per installation, kept for the process's life: octocrab caches the
    /// installation token inside the client, and a clone of an `Octocrab` copies that
    /// cache rather than sharing it, so the client itself must be shared.
    pub(super) installations: Mutex<HashMap<InstallationId, Arc<Octocrab>>>,
    /// Repository ids as last read, whichever installation read them.
    pub(super) repo_ids: crate::forge::RepoIds,
}

impl Shared {
    /// One forge call through the retry policy. Paths are relative so octocrab attaches
    /// the credentials as a header (never in the URL) and only towards its base URI.
    /// One call through the retry policy; `scope` is the installation whose rate limit
    /// it spends (`None`: the app's own, as its JWT).
    pub(super) async fn request<T: DeserializeOwned>(
        &self,
        client: &Octocrab,
        scope: Option<InstallationId>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let budget = self.budget_scope(scope);
        self.retry
            .run(|| attempt(client, &self.answers, &budget, &method, path, body, &what))
            .await
    }

    /// The rate-limit budget an installation (or the app itself, as its JWT) spends on
    /// this GitHub.
    pub(super) fn budget_scope(&self, scope: Option<InstallationId>) -> String {
        match scope {
            Some(id) => format!("{} installation {id}", self.web_url),
            None => format!("{} app", self.web_url),
        }
    }
}

/// GitHub's GraphQL endpoint for a REST base URL: `{api}/graphql` on github.com-style
/// bases, `https://HOST/api/graphql` for GitHub Enterprise Server's `https://HOST/api/v3`.
pub(super) fn graphql_url(api_url: &str) -> String {
    let base = api_url.trim_end_matches('/');
    match base.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{base}/graphql"),
    }
}

pub(super) async fn attempt<T: DeserializeOwned>(
    client: &Octocrab,
    answers: &Answers,
    budget: &str,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    what: &str,
) -> Result<T, ForgeError> {
    // Down to its reserve: the call waits for the reset instead of spending the rest.
    crate::forge::budget::check("github", budget, what)?;
    tracing::debug!(call = what, "forge request");
    // A GET asked before goes conditional: a 304 is answered from what was kept.
    let sent = (*method == Method::GET)
        .then(|| answers.lookup(budget, path))
        .flatten();
    let response = match *method {
        Method::GET => {
            let mut headers = HeaderMap::new();
            if let Some(sent) = &sent {
                headers.insert(http::header::IF_NONE_MATCH, sent.etag.clone());
            }
            client._get_with_headers(path, Some(headers)).await
        }
        Method::POST => client._post(path, body).await,
        Method::PATCH => client._patch(path, body).await,
        _ => {
            return Err(ForgeError::Client {
                what: what.to_owned(),
                message: format!("unsupported method {method}"),
            });
        }
    };
    let route = crate::forge::route(method.as_str(), path);
    let response = response.map_err(|e| {
        crate::metrics::record_forge_request("github", &route, "error");
        classify_octocrab(what.to_owned(), e)
    })?;
    let status = response.status();
    crate::metrics::record_forge_request("github", &route, status.as_str());
    let headers = response.headers().clone();
    crate::forge::budget::record("github", budget, &headers);
    let text = client
        .body_to_string(response)
        .await
        .map_err(|e| classify_octocrab(what.to_owned(), e))?;
    let text = if status == StatusCode::NOT_MODIFIED {
        crate::forge::conditional::not_modified(sent.as_ref(), "GitHub", what)?
    } else {
        let text = check_answer(status, &headers, text, what)?;
        if *method == Method::GET
            && let Some(etag) = headers.get(http::header::ETAG)
        {
            answers.keep(budget, path, etag, &text);
        }
        text
    };
    serde_json::from_str(&text).map_err(|e| ForgeError::Malformed {
        what: what.to_owned(),
        message: e.to_string(),
    })
}

/// A successful answer's body, or the failure classified with GitHub's message.
pub(super) fn check_answer(
    status: StatusCode,
    headers: &HeaderMap,
    text: String,
    what: &str,
) -> Result<String, ForgeError> {
    if !status.is_success() {
        let message = serde_json::from_str::<GhErrorBody>(&text)
            .ok()
            .and_then(GhErrorBody::into_message)
            .unwrap_or_else(|| text.chars().take(200).collect());
        return Err(classify_status(what.to_owned(), status, headers, message));
    }
    Ok(text)
}

/// Classifies an answer that was not a success. GitHub signals rate limits with 429, or
/// with 403 plus `retry-after` or an exhausted `x-ratelimit-remaining`.
pub(super) fn classify_status(
    what: String,
    status: StatusCode,
    headers: &HeaderMap,
    message: String,
) -> ForgeError {
    let code = status.as_u16();
    let rate_limited = code == 429
        || (code == 403
            && (headers.contains_key("retry-after")
                || header(headers, "x-ratelimit-remaining") == Some("0")
                || message.to_ascii_lowercase().contains("rate limit")));
    if rate_limited {
        return ForgeError::RateLimited {
            what,
            retry_after: rate_limit_wait(headers),
        };
    }
    ForgeError::from_status(what, code, message)
}

/// How long GitHub asks us to wait: `retry-after` seconds, else until
/// `x-ratelimit-reset` when the budget is spent, else the minute GitHub's documentation
/// asks for after a secondary rate limit without either header.
pub(super) fn rate_limit_wait(headers: &HeaderMap) -> Option<Duration> {
    if let Some(seconds) = header(headers, "retry-after").and_then(|v| v.trim().parse().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    if header(headers, "x-ratelimit-remaining") == Some("0")
        && let Some(reset) =
            header(headers, "x-ratelimit-reset").and_then(|v| v.trim().parse::<u64>().ok())
    {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    Some(Duration::from_secs(60))
}

pub(super) fn classify_octocrab(what: String, error: octocrab::Error) -> ForgeError {
    match error {
        octocrab::Error::GitHub { source, .. } => {
            let headers = source.headers.clone().unwrap_or_default();
            classify_status(what, source.status_code, &headers, source.message.clone())
        }
        // Connection failures and timeouts surface as service or hyper errors.
        octocrab::Error::Service { .. } | octocrab::Error::Hyper { .. } => ForgeError::Transport {
            what,
            message: error.to_string(),
        },
        octocrab::Error::Serde { .. }
        | octocrab::Error::Json { .. }
        | octocrab::Error::InvalidUtf8 { .. }
        | octocrab::Error::Other { .. } => ForgeError::Malformed {
            what,
            message: error.to_string(),
        },
        other => ForgeError::Client {
            what,
            message: other.to_string(),
        },
    }
}

/// Path segments of user-supplied text (file paths keep their slashes).
pub(super) const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub(super) fn encode_path(path: &str) -> String {
    path.trim_matches('/')
        .split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

pub(super) fn repo_path(repo: &RepoName) -> String {
    format!("/repos/{}", encode_path(repo.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    pub(super) fn statuses_are_classified() {
        let s = |code: u16, h: &[(&'static str, &str)], msg: &str| {
            classify_status(
                "GET /x".into(),
                StatusCode::from_u16(code).unwrap(),
                &headers(h),
                msg.into(),
            )
        };
        assert!(matches!(
            s(404, &[], "Not Found"),
            ForgeError::NotFound { .. }
        ));
        assert!(matches!(
            s(502, &[], "Bad Gateway"),
            ForgeError::Unavailable { status: 502, .. }
        ));
        assert!(matches!(
            s(403, &[], "Resource not accessible by integration"),
            ForgeError::Refused { status: 403, .. }
        ));
        assert!(matches!(
            s(403, &[("retry-after", "7")], "slow down"),
            ForgeError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        match s(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset.to_string()),
            ],
            "API rate limit exceeded",
        ) {
            ForgeError::RateLimited {
                retry_after: Some(d),
                ..
            } => assert!(d <= Duration::from_secs(31) && d >= Duration::from_secs(29)),
            other => panic!("not a rate limit: {other:?}"),
        }
        assert!(matches!(
            s(429, &[], "Too Many Requests"),
            ForgeError::RateLimited { .. }
        ));
        assert!(matches!(
            s(422, &[], "Validation Failed"),
            ForgeError::Refused { status: 422, .. }
        ));
    }

    #[test]
    pub(super) fn graphql_lives_beside_the_rest_api() {
        assert_eq!(
            graphql_url("https://api.github.com"),
            "https://api.github.com/graphql"
        );
        assert_eq!(
            graphql_url("https://ghe.example.com/api/v3/"),
            "https://ghe.example.com/api/graphql"
        );
        assert_eq!(
            graphql_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/graphql"
        );
    }

    #[test]
    pub(super) fn paths_are_escaped_per_segment() {
        assert_eq!(
            encode_path(".github/planwright.yml"),
            ".github/planwright.yml"
        );
        assert_eq!(encode_path("docs/a b#c?.md"), "docs/a%20b%23c%3F.md");
    }
}
