//! OpenAI Chat Completions (`POST {base}/chat/completions`, the base ending in `/v1`),
//! which OpenAI-compatible local servers (vLLM, llama.cpp, Ollama) speak too. Tool calls
//! carry their arguments as a JSON string; tool results are `role: "tool"` messages.

use anyhow::{Result, bail};
use reqwest::header::{AUTHORIZATION, HeaderMap};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::{
    ChatFuture, ChatModel, ChatRequest, ChatResponse, ContentBlock, HttpOptions, ModelName,
    Provider, RetryPolicy, Role, StopReason, Usage, decode_error,
};

const OPENAI_URL: &str = "https://api.openai.com/v1";

#[derive(Debug)]
pub struct OpenAiClient {
    name: ModelName,
    url: String,
    /// Kept to scrub it from error messages; it is sent only through `headers`.
    key: Option<SecretString>,
    headers: HeaderMap,
    http: reqwest::Client,
    retry: RetryPolicy,
}

impl OpenAiClient {
    /// `key` may be absent only for a local server: OpenAI itself always needs one.
    pub fn new(
        model: String,
        base_url: &str,
        key: Option<SecretString>,
        options: &HttpOptions,
    ) -> Result<Self> {
        let base = base_url.trim_end_matches('/');
        let mut headers = HeaderMap::new();
        match &key {
            Some(key) => {
                headers.insert(
                    AUTHORIZATION,
                    super::secret_header(
                        &format!("Bearer {}", key.expose_secret()),
                        "OpenAI API key",
                    )?,
                );
            }
            None if base == OPENAI_URL => {
                bail!("Cannot use openai:{model}: OPENAI_API_KEY is not set")
            }
            None => {}
        }
        Ok(Self {
            name: ModelName {
                provider: Provider::OpenAi,
                model,
            },
            url: format!("{base}/chat/completions"),
            key,
            headers,
            http: super::http_client(options)?,
            retry: options.retry.clone(),
        })
    }

    async fn send(&self, request: &ChatRequest) -> Result<ChatResponse, super::ModelError> {
        let body = request_body(&self.name.model, request);
        let answer = super::post_json(
            &self.http,
            Provider::OpenAi,
            &self.url,
            &self.headers,
            &body,
            &self.retry,
            self.key.as_ref(),
        )
        .await?;
        parse_response(&answer)
    }
}

impl ChatModel for OpenAiClient {
    fn name(&self) -> &ModelName {
        &self.name
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        Box::pin(self.send(request))
    }
}

fn request_body(model: &str, request: &ChatRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for m in &request.messages {
        push_message(&mut messages, m);
    }
    let mut body = json!({
        "model": model,
        // OpenAI's current models refuse the older `max_tokens`.
        "max_completion_tokens": request.max_tokens,
        "messages": messages,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                }})
            })
            .collect();
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// One of our messages as one or more wire messages: each tool result becomes its own
/// `tool` message, ahead of any text the user message also carries.
fn push_message(out: &mut Vec<Value>, m: &super::Message) {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in &m.content {
        match block {
            ContentBlock::Text(t) => text.push_str(t),
            ContentBlock::ToolUse { id, name, input } => {
                // Unparseable arguments are kept as the model sent them.
                let arguments = match input {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                tool_calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                // The wire has no error flag; say it in the content so the model sees it.
                let content = if *is_error {
                    format!("Error: {content}")
                } else {
                    content.clone()
                };
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
            }
        }
    }
    match m.role {
        Role::User if !text.is_empty() => out.push(json!({"role": "user", "content": text})),
        Role::User => {}
        Role::Assistant => {
            let mut message = json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::String(text) },
            });
            if !tool_calls.is_empty() {
                message["tool_calls"] = Value::Array(tool_calls);
            }
            out.push(message);
        }
    }
}

fn parse_response(answer: &Value) -> Result<ChatResponse, super::ModelError> {
    let bad = |what: &str| decode_error(Provider::OpenAi, what);
    let choice = answer["choices"]
        .get(0)
        .ok_or_else(|| bad("no `choices`"))?;
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(ContentBlock::Text(text.to_owned()));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        let raw = function["arguments"].as_str().unwrap_or("{}");
        content.push(ContentBlock::ToolUse {
            id: call["id"]
                .as_str()
                .ok_or_else(|| bad("a tool call without an id"))?
                .to_owned(),
            name: function["name"]
                .as_str()
                .ok_or_else(|| bad("a tool call without a function name"))?
                .to_owned(),
            input: serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
        });
    }
    let stop_reason = match choice["finish_reason"].as_str() {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_owned()),
        // Some local servers leave it out; tool calls still mean the model waits on them.
        None if content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. })) =>
        {
            StopReason::ToolUse
        }
        None => StopReason::EndTurn,
    };
    Ok(ChatResponse {
        content,
        stop_reason,
        usage: parse_usage(&answer["usage"]),
    })
}

/// A Chat Completions `usage` object (answers and the final stream chunk alike).
pub(super) fn parse_usage(usage: &Value) -> Usage {
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
        .min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// A Responses API `usage` object, which names the same counts differently.
pub(super) fn parse_responses_usage(usage: &Value) -> Usage {
    let input = usage["input_tokens"].as_u64().unwrap_or(0);
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
        .min(input);
    Usage {
        input_tokens: input - cached,
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}
