//! How a client reaches its provider ([`Endpoint`]): the HTTP client, its secret headers,
//! the one retry loop both providers share, and the reading of error answers.

use std::time::Duration;

use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tracing::warn;

use crate::ids::Provider;

use super::sse;
use super::types::*;

/// The HTTP client both providers use; redirects are refused so a key header is never
/// replayed to another host.
pub(super) fn http_client(options: &HttpOptions) -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder();
    let builder = if options.stream {
        builder
    } else {
        builder.timeout(options.timeout)
    };
    builder
        .connect_timeout(options.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("Could not set up the HTTP client for model calls")
}

/// A header value holding a secret, marked so it is never printed.
pub(crate) fn secret_header(value: &str, what: &str) -> anyhow::Result<HeaderValue> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| anyhow::anyhow!("Cannot use the {what}: it is not a valid header value"))?;
    header.set_sensitive(true);
    Ok(header)
}

/// How a client reaches its provider: one endpoint, its headers, and how to call it.
#[derive(Debug)]
pub(super) struct Endpoint {
    provider: Provider,
    url: String,
    headers: HeaderMap,
    /// Kept to scrub it from error messages; it is sent only through `headers`.
    secret: Option<SecretString>,
    http: reqwest::Client,
    retry: ModelRetry,
    /// `Some(idle timeout)` when answers are streamed.
    pub(super) stream: Option<Duration>,
}

impl Endpoint {
    pub(super) fn new(
        provider: Provider,
        url: String,
        headers: HeaderMap,
        secret: Option<SecretString>,
        options: &HttpOptions,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            provider,
            url,
            headers,
            secret,
            http: http_client(options)?,
            retry: options.retry.clone(),
            stream: options.stream.then_some(options.idle_timeout),
        })
    }

    /// POSTs `body` until an answer comes back whole, the call fails for good, or the
    /// policy's attempts run out. Whole answers are read by `parse`, streams by a fresh
    /// `S` per attempt (the caller has put the provider's stream flag in `body`).
    ///
    /// Tokens an interrupted stream reported are not dropped: they are added to the
    /// usage of the answer that finally comes back, or carried by the last error, so a
    /// metered caller pays for every attempt.
    pub(super) async fn chat<S: ChatStream>(
        &self,
        body: &Value,
        parse: fn(&Value) -> Result<ChatResponse, ModelError>,
    ) -> Result<ChatResponse, ModelError> {
        let mut attempt = 1;
        let mut earlier = Usage::default();
        loop {
            let result = match self.stream {
                Some(idle) => self.stream_once::<S>(body, idle).await,
                None => match self.post_once(body).await {
                    Ok(answer) => parse(&answer),
                    Err(e) => Err(e),
                },
            };
            let result = result.map_err(|e| redact(e, self.secret.as_ref()));
            match result {
                Ok(mut response) => {
                    response.usage += earlier;
                    return Ok(response);
                }
                Err(mut e) => {
                    if let ModelError::Interrupted { usage, .. } = &mut e {
                        earlier += *usage;
                        *usage = earlier;
                    }
                    if e.is_retryable() && attempt < self.retry.max_attempts {
                        let delay = self.retry.delay(attempt, e.retry_after());
                        warn!(provider = %self.provider, attempt, ?delay, error = %e, "model call failed; retrying");
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                        continue;
                    }
                    if earlier.total() > 0 && !matches!(e, ModelError::Interrupted { .. }) {
                        warn!(provider = %self.provider, ?earlier, error = %e,
                            "a model call failed for good after interrupted attempts that used tokens");
                    }
                    return Err(e);
                }
            }
        }
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, ModelError> {
        self.http
            .post(&self.url)
            .headers(self.headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| transport(self.provider, &e))
    }

    async fn post_once(&self, body: &Value) -> Result<Value, ModelError> {
        let provider = self.provider;
        let response = self.send(body).await?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport(provider, &e))?;
        if !status.is_success() {
            return Err(ModelError::Status {
                provider,
                status: status.as_u16(),
                message: error_message(&bytes),
                retry_after,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ModelError::Decode {
            provider,
            message: format!("the body is not JSON ({e})"),
        })
    }

    /// One streamed attempt: events are fed to `S` as they arrive, and the answer is
    /// whole only once the stream's last event came.
    async fn stream_once<S: ChatStream>(
        &self,
        body: &Value,
        idle: Duration,
    ) -> Result<ChatResponse, ModelError> {
        let provider = self.provider;
        let stalled = || ModelError::Timeout {
            provider,
            message: format!("nothing arrived for {}s", idle.as_secs_f64()),
        };
        let mut response = tokio::time::timeout(idle, self.send(body))
            .await
            .map_err(|_| stalled())??;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let bytes = tokio::time::timeout(idle, response.bytes())
                .await
                .map_err(|_| stalled())?
                .map_err(|e| transport(provider, &e))?;
            return Err(ModelError::Status {
                provider,
                status: status.as_u16(),
                message: error_message(&bytes),
                retry_after,
            });
        }
        let mut stream = S::default();
        let mut splitter = sse::SseSplitter::default();
        let cut = |stream: &S, message: String| ModelError::Interrupted {
            provider,
            message,
            usage: stream.usage(),
        };
        loop {
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => {
                    return Err(cut(
                        &stream,
                        format!("nothing arrived for {}s", idle.as_secs_f64()),
                    ));
                }
                Ok(Err(e)) => return Err(cut(&stream, error_chain(&e))),
                Ok(Ok(None)) => {
                    return Err(cut(
                        &stream,
                        "the stream ended before its last event".to_owned(),
                    ));
                }
                Ok(Ok(Some(chunk))) => chunk,
            };
            for event in splitter.push(&chunk) {
                if stream.event(&event)? {
                    return stream.finish();
                }
            }
        }
    }
}

/// Assembles one streamed answer from its server-sent events, in a provider's wire
/// format; one implementation per provider.
pub(super) trait ChatStream: Default {
    /// Takes one raw event; `Ok(true)` once it was the stream's last. An error event
    /// from the provider is an `Interrupted` error carrying the usage so far.
    fn event(&mut self, raw: &[u8]) -> Result<bool, ModelError>;
    /// The tokens the provider has reported so far.
    fn usage(&self) -> Usage;
    fn finish(self) -> Result<ChatResponse, ModelError>;
}

pub(super) fn transport(provider: Provider, e: &reqwest::Error) -> ModelError {
    let message = error_chain(e);
    if e.is_timeout() {
        ModelError::Timeout { provider, message }
    } else {
        ModelError::Network { provider, message }
    }
}

pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds; HTTP dates fall back to backoff.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let read = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let valid = |v: f64| v.is_finite() && v >= 0.0;
    if let Some(ms) = read("retry-after-ms").filter(|v| valid(*v)) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    read("retry-after")
        .filter(|v| valid(*v))
        .map(Duration::from_secs_f64)
}

/// Both providers put the reason in `error.message`; anything else is shown as text.
pub(super) fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body)
        && let Some(message) = value["error"]["message"].as_str()
    {
        return message.to_owned();
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(no message)".to_owned();
    }
    text.chars().take(500).collect()
}

/// Providers sometimes quote the key they were sent (a wrong key's 401); it must not
/// reach logs or comments through an error message.
pub(super) fn redact(error: ModelError, secret: Option<&SecretString>) -> ModelError {
    let Some(secret) = secret.map(|s| s.expose_secret()).filter(|s| !s.is_empty()) else {
        return error;
    };
    let clean = |m: String| m.replace(secret, "[redacted]");
    match error {
        ModelError::Status {
            provider,
            status,
            message,
            retry_after,
        } => ModelError::Status {
            provider,
            status,
            message: clean(message),
            retry_after,
        },
        ModelError::Network { provider, message } => ModelError::Network {
            provider,
            message: clean(message),
        },
        ModelError::Timeout { provider, message } => ModelError::Timeout {
            provider,
            message: clean(message),
        },
        ModelError::Decode { provider, message } => ModelError::Decode {
            provider,
            message: clean(message),
        },
        ModelError::Interrupted {
            provider,
            message,
            usage,
        } => ModelError::Interrupted {
            provider,
            message: clean(message),
            usage,
        },
        other @ (ModelError::BudgetExceeded { .. } | ModelError::Accounting(_)) => other,
    }
}

pub(super) fn decode_error(provider: Provider, what: impl Into<String>) -> ModelError {
    ModelError::Decode {
        provider,
        message: what.into(),
    }
}
