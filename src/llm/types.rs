//! The provider-neutral chat vocabulary: messages, tools, requests and responses, how a
//! turn finished, usage, the errors a model call ends with, and the retry and HTTP options.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use serde_json::Value;

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

    pub(super) fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Rate limits (429), server errors and Anthropic's "overloaded" (529) pass; other 4xx
/// give the same answer every time.
pub(super) fn is_retryable_status(status: u16) -> bool {
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
    pub(super) fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
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
