//! Talking to models: the provider-neutral `ChatModel` interface (messages, tools, tool
//! calls, stop reasons, usage), `provider:model` names, error classification, and the one
//! retry loop both provider clients share. Wire formats stay in `anthropic.rs` and
//! `openai.rs`; accounting and budgets live in `usage.rs`; `proxy` serves executors.

pub mod anthropic;
pub mod openai;
pub(crate) mod sse;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use rand::Rng;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tracing::warn;

use crate::config::ModelSettings;

use crate::ids::{ModelName, Provider};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One piece of a message. Tool results travel in user messages, as on Anthropic's wire;
/// the OpenAI client splits them into `role: "tool"` messages.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    Text(String),
    /// A tool call by the model. `input` is the arguments as JSON; when a model sends
    /// arguments that are not JSON, `input` is the raw text as a JSON string, so the tool
    /// loop can answer with a tool error instead of the call failing.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::Text(text.into())],
        }
    }
}

/// A tool the model may call; `input_schema` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    /// Refusals, content filters and reasons a provider adds later, by their wire name.
    Other(String),
}

/// Tokens one call used. `input_tokens` excludes cached input on both providers (OpenAI
/// counts cached tokens inside `prompt_tokens`; the client subtracts them) so that each
/// count has one price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub content: Vec<ContentBlock>,
    pub stop_reason: FinishReason,
    pub usage: Usage,
}

impl ChatResponse {
    /// The text blocks joined, for answers that carry no tool calls.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }
}

/// Why a model call failed. Classified once, here; the retry loop and callers branch on
/// `is_retryable`.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{provider} answered {status}: {message}")]
    Status {
        provider: Provider,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("Could not reach {provider}: {message}")]
    Network { provider: Provider, message: String },
    #[error("{provider} did not answer in time: {message}")]
    Timeout { provider: Provider, message: String },
    #[error("Could not read {provider}'s answer: {message}")]
    Decode { provider: Provider, message: String },
    /// A streamed answer that stopped before its end: the connection dropped, nothing
    /// arrived for the idle timeout, or the provider sent an error event (Anthropic's
    /// `overloaded_error`). `usage` is what the provider had reported so far, summed over
    /// the attempts the retry loop made; the tokens were likely paid for.
    #[error("{provider} broke off its answer: {message}")]
    Interrupted {
        provider: Provider,
        message: String,
        usage: Usage,
    },
    #[error(
        "Cannot start a {role} call to {model}: {scope} has used {spent} of its budget of {limit}"
    )]
    BudgetExceeded {
        role: String,
        model: String,
        scope: String,
        spent: String,
        limit: String,
    },
    #[error("Could not account for a model call: {0:#}")]
    Accounting(anyhow::Error),
}

impl ModelError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => is_retryable_status(*status),
            ModelError::Network { .. }
            | ModelError::Timeout { .. }
            | ModelError::Interrupted { .. } => true,
            ModelError::Decode { .. } | ModelError::BudgetExceeded { .. } => false,
            // The call may already have been paid for; repeating it blindly would pay
            // twice, so the caller decides.
            ModelError::Accounting(_) => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Rate limits (429), server errors and Anthropic's "overloaded" (529) pass; other 4xx
/// give the same answer every time.
fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
}

/// One model behind one provider's wire format, usable as `dyn ChatModel` so roles pick
/// a provider at run time.
#[async_trait]
pub trait ChatModel: Send + Sync + fmt::Debug {
    fn name(&self) -> &ModelName;
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError>;
}

#[derive(Debug, Clone)]
pub struct ModelRetry {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// First backoff; doubled each attempt, with jitter, up to `max_delay`.
    pub base_delay: Duration,
    /// Also caps a provider's `retry-after`, so one answer cannot park a job for hours.
    pub max_delay: Duration,
}

impl ModelRetry {
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(self.max_delay);
        }
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.max_delay);
        let jitter_ms = (exp.as_millis() / 4) as u64;
        let jitter = if jitter_ms > 0 {
            Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
        } else {
            Duration::ZERO
        };
        (exp + jitter).min(self.max_delay)
    }
}

#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Whole-request limit; long answers from strong models take minutes. Streamed calls
    /// have none: `idle_timeout` bounds them instead.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: ModelRetry,
    /// Ask for answers as server-sent events and assemble them as they arrive, so an
    /// answer may take as long as it needs while a stalled one is still noticed.
    pub stream: bool,
    /// Streams only: the longest wait for the answer's headers or between two chunks.
    /// Anthropic pings every few seconds, but OpenAI may send nothing while a reasoning
    /// model thinks before its first token, so this is minutes, not seconds.
    pub idle_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            stream: false,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            retry: ModelRetry {
                max_attempts: 4,
                base_delay: Duration::from_secs(1),
                max_delay: Duration::from_secs(60),
            },
        }
    }
}

/// The client for `name`, with the key and base URL the settings give its provider.
pub fn client(
    name: &ModelName,
    settings: &ModelSettings,
    options: &HttpOptions,
) -> anyhow::Result<Arc<dyn ChatModel>> {
    Ok(match name.provider {
        Provider::Anthropic => {
            let Some(key) = settings.anthropic_api_key.clone() else {
                bail!("Cannot use {name}: ANTHROPIC_API_KEY is not set");
            };
            Arc::new(anthropic::AnthropicClient::new(
                name.model.clone(),
                &settings.anthropic_base_url,
                key,
                options,
            )?)
        }
        Provider::OpenAi => Arc::new(openai::OpenAiClient::new(
            name.model.clone(),
            &settings.openai_base_url,
            settings.openai_api_key.clone(),
            options,
        )?),
    })
}

/// The HTTP client both providers use; redirects are refused so a key header is never
/// replayed to another host.
fn http_client(options: &HttpOptions) -> anyhow::Result<reqwest::Client> {
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
struct Endpoint {
    provider: Provider,
    url: String,
    headers: HeaderMap,
    /// Kept to scrub it from error messages; it is sent only through `headers`.
    secret: Option<SecretString>,
    http: reqwest::Client,
    retry: ModelRetry,
    /// `Some(idle timeout)` when answers are streamed.
    stream: Option<Duration>,
}

impl Endpoint {
    fn new(
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
    async fn chat<S: ChatStream>(
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
trait ChatStream: Default {
    /// Takes one raw event; `Ok(true)` once it was the stream's last. An error event
    /// from the provider is an `Interrupted` error carrying the usage so far.
    fn event(&mut self, raw: &[u8]) -> Result<bool, ModelError>;
    /// The tokens the provider has reported so far.
    fn usage(&self) -> Usage;
    fn finish(self) -> Result<ChatResponse, ModelError>;
}

fn transport(provider: Provider, e: &reqwest::Error) -> ModelError {
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
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
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
fn error_message(body: &[u8]) -> String {
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
fn redact(error: ModelError, secret: Option<&SecretString>) -> ModelError {
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

fn decode_error(provider: Provider, what: impl Into<String>) -> ModelError {
    ModelError::Decode {
        provider,
        message: what.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_parse_and_errors_name_the_culprit() {
        let name = ModelName::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(name.provider, Provider::Anthropic);
        assert_eq!(name.model, "claude-sonnet-4-5");
        // Local servers' model names may contain colons (Ollama tags).
        let name = ModelName::parse("openai:qwen2.5-coder:7b").unwrap();
        assert_eq!(name.provider, Provider::OpenAi);
        assert_eq!(name.model, "qwen2.5-coder:7b");
        let err = ModelName::parse("gemini:pro").unwrap_err().to_string();
        assert!(err.contains("gemini"), "{err}");
        for bad in ["claude-sonnet", "anthropic:", "openai:gpt 5", ""] {
            let err = ModelName::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn retry_after_wins_over_backoff_and_both_are_capped() {
        let policy = ModelRetry {
            max_attempts: 5,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(10),
        };
        assert_eq!(
            policy.delay(3, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(10)
        );
        let first = policy.delay(1, None);
        assert!(first >= Duration::from_secs(2) && first <= Duration::from_millis(2500));
        assert_eq!(policy.delay(10, None), Duration::from_secs(10));
    }

    #[test]
    fn retryable_statuses_are_the_passing_ones() {
        for status in [429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn errors_lose_the_key() {
        let key = SecretString::from("sk-very-secret");
        let error = ModelError::Status {
            provider: Provider::OpenAi,
            status: 401,
            message: "Incorrect API key provided: sk-very-secret".into(),
            retry_after: None,
        };
        let text = redact(error, Some(&key)).to_string();
        assert!(!text.contains("sk-very-secret"), "{text}");
        assert!(text.contains("401"), "{text}");
    }
}
