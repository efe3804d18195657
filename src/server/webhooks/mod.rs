//! Webhook ingress shared by both forges: the rejection type, reading a body within the
//! limit, and recording a verified delivery with its jobs. Handlers here do nothing slow:
//! verify, record, enqueue, answer.

pub mod github;
pub mod gitlab;

use axum::Json;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::{error, info};

use super::AppState;
use crate::event::{Event, ForgeKind};
use crate::ids::{InstallationId, RepoName};
use crate::session::jobs::JobKind;
use crate::store::deliveries::{NewDelivery, Recorded, Status};

/// A webhook request refused before anything is stored.
#[derive(Debug)]
pub enum Refusal {
    /// No secret is configured for this forge.
    NotConfigured(&'static str),
    Unauthorized(&'static str),
    MissingHeader(&'static str),
    TooLarge(usize),
    BadBody(String),
    /// The client did not send the whole body in time.
    Timeout,
    /// As many unverified bodies as allowed are being read; the sender should retry.
    Busy,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Refusal::NotConfigured(what) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{what} webhooks are not configured on this planwright"),
            ),
            Refusal::Unauthorized(why) => (StatusCode::UNAUTHORIZED, why.to_owned()),
            Refusal::MissingHeader(name) => (
                StatusCode::BAD_REQUEST,
                format!("The request has no {name} header"),
            ),
            Refusal::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("The body is larger than the limit of {limit} bytes"),
            ),
            Refusal::BadBody(why) => (StatusCode::BAD_REQUEST, why),
            Refusal::Timeout => (
                StatusCode::REQUEST_TIMEOUT,
                "The body did not arrive in time".to_owned(),
            ),
            Refusal::Busy => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())],
                    Json(json!({ "error": format!(
                        "Cannot read the body now: too many deliveries are being read at once; redeliver it in {RETRY_AFTER_SECS} seconds"
                    ) })),
                )
                    .into_response();
            }
        };
        (status, Json(json!({ "error": message }))).into_response()
    }
}

/// How long a client may take to send a body: a slow sender cannot hold a buffer (or
/// shutdown) for ever.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a GitHub delivery waits for its turn when WEBHOOK_BODY_READS unverified bodies
/// are being read already, before it is answered 503.
const READ_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// The Retry-After of that answer.
const RETRY_AFTER_SECS: u64 = 10;

/// Reads the whole body, within the router's body limit and [`BODY_TIMEOUT`].
async fn read_body(req: Request, state: &AppState) -> Result<Bytes, Refusal> {
    read_streamed(req, state.settings.webhook_body_limit, |_| {}).await
}

/// Reads the whole body within `limit` bytes and [`BODY_TIMEOUT`], handing each piece to
/// `feed` as it arrives. A declared length over the limit is refused before any is read.
async fn read_streamed(
    req: Request,
    limit: usize,
    mut feed: impl FnMut(&[u8]),
) -> Result<Bytes, Refusal> {
    let declared = header(req.headers(), "content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(Refusal::TooLarge(limit));
    }
    // A declared length is the sender's word: memory grows with what actually arrives.
    let capacity = declared.map_or(0, |length| length.min(64 * 1024) as usize);
    let mut stream = req.into_body().into_data_stream();
    let read = async move {
        let mut body = Vec::with_capacity(capacity);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| Refusal::BadBody(format!("Could not read the request body: {e}")))?;
            if body.len() + chunk.len() > limit {
                return Err(Refusal::TooLarge(limit));
            }
            feed(&chunk);
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| Refusal::Timeout)?
}

fn header<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Constant-time comparison of a presented token against the configured ones; comparing
/// digests keeps the time independent of the tokens' lengths too.
fn token_matches<'a>(presented: &[u8], accepted: impl Iterator<Item = &'a [u8]>) -> bool {
    let presented = Sha256::digest(presented);
    let mut matched = subtle::Choice::from(0);
    for secret in accepted {
        matched |= Sha256::digest(secret).ct_eq(&presented);
    }
    matched.into()
}

/// What a verified body turned out to be.
pub struct Parsed {
    pub action: Option<String>,
    pub repo: Option<RepoName>,
    pub installation: Option<InstallationId>,
    /// Empty when planwright does not act on this event.
    pub events: Vec<Event>,
}

/// A verified delivery, ready to be recorded.
pub struct Verified {
    pub forge: ForgeKind,
    pub event: String,
    pub delivery_key: Option<String>,
    pub body: String,
    pub parsed: Result<Parsed, String>,
}

/// Records the delivery (once) with one job per domain event, and answers the forge.
pub async fn accept(state: &AppState, verified: Verified) -> Response {
    let max_attempts = state.settings.queue.max_attempts;
    let (status, error, action, repo, installation, events) = match &verified.parsed {
        Ok(p) if p.events.is_empty() => (
            Status::Ignored,
            None,
            p.action.as_deref(),
            p.repo.as_ref(),
            p.installation,
            &[][..],
        ),
        Ok(p) => (
            Status::Queued,
            None,
            p.action.as_deref(),
            p.repo.as_ref(),
            p.installation,
            &p.events[..],
        ),
        Err(e) => (
            Status::Rejected,
            Some(e.as_str()),
            None,
            None,
            None,
            &[][..],
        ),
    };
    let mut jobs = Vec::with_capacity(events.len());
    for event in events {
        match JobKind::Event(event.clone()).to_new_job(max_attempts) {
            Ok(job) => jobs.push(job),
            Err(e) => {
                error!(error = %e, "Could not serialise a domain event");
                return internal_error();
            }
        }
    }
    let delivery = NewDelivery {
        forge: verified.forge,
        delivery_key: verified.delivery_key.clone(),
        event: verified.event.clone(),
        action: action.map(str::to_owned),
        repo: repo.cloned(),
        installation,
        status,
        error: error.map(str::to_owned),
        payload: verified.body,
    };
    match state.inbox.record(delivery, jobs).await {
        Ok(Recorded::Duplicate) => {
            info!(forge = %verified.forge, event = %verified.event, key = ?verified.delivery_key, "duplicate delivery ignored");
            (StatusCode::OK, Json(json!({ "status": "duplicate" }))).into_response()
        }
        Ok(Recorded::New { id, jobs }) => {
            info!(forge = %verified.forge, event = %verified.event, action = ?action, delivery = %id, status = status.as_str(), jobs, "delivery recorded");
            if jobs > 0 {
                state.waker.wake();
            }
            match status {
                Status::Rejected => (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "delivery": id, "status": "rejected", "error": error })),
                )
                    .into_response(),
                Status::Queued => (
                    StatusCode::ACCEPTED,
                    Json(json!({ "delivery": id, "status": "queued", "jobs": jobs })),
                )
                    .into_response(),
                Status::Ignored => (
                    StatusCode::OK,
                    Json(json!({ "delivery": id, "status": "ignored" })),
                )
                    .into_response(),
            }
        }
        Err(e) => {
            error!(error = %format!("{e:#}"), "Could not record a delivery");
            internal_error()
        }
    }
}

fn internal_error() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "error": "Could not record the delivery; please redeliver it" })),
    )
        .into_response()
}

/// Reads a payload that must be a JSON object (serde would also take an array as a
/// struct, field by field).
fn parse_object<T: DeserializeOwned>(body: &str) -> Result<T, String> {
    if !body.trim_start().starts_with('{') {
        return Err("The body is not a JSON object".to_owned());
    }
    serde_json::from_str(body).map_err(|e| format!("The body is not a JSON object: {e}"))
}

/// A payload field read when it has the expected shape and treated as absent otherwise,
/// so that an unusual payload of an event planwright ignores is never refused.
#[derive(Debug)]
pub struct Lenient<T>(pub Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(Lenient(serde_json::from_value(value).ok()))
    }
}

impl<T> Lenient<T> {
    pub fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn tokens_match_only_exactly() {
        let accepted: Vec<&[u8]> = vec![b"first", b"second"];
        assert!(token_matches(b"second", accepted.iter().copied()));
        assert!(!token_matches(b"secon", accepted.iter().copied()));
        assert!(!token_matches(b"", accepted.iter().copied()));
        assert!(!token_matches(b"first", std::iter::empty()));
    }
}
