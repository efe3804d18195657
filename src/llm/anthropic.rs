//! The Anthropic Messages API (`POST {base}/v1/messages`): our request in its wire format,
//! its answer back into ours. The stable prefix (tools, then the system prompt) is marked
//! for prompt caching, since every turn of a tool loop resends it.

use anyhow::Result;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::{
    ChatFuture, ChatModel, ChatRequest, ChatResponse, ContentBlock, HttpOptions, ModelName,
    Provider, RetryPolicy, Role, StopReason, Usage, decode_error,
};

pub(crate) const API_VERSION: &str = "2023-06-01";

#[derive(Debug)]
pub struct AnthropicClient {
    name: ModelName,
    url: String,
    /// Kept to scrub it from error messages; it is sent only through `headers`.
    key: SecretString,
    headers: HeaderMap,
    http: reqwest::Client,
    retry: RetryPolicy,
}

impl AnthropicClient {
    pub fn new(
        model: String,
        base_url: &str,
        key: SecretString,
        options: &HttpOptions,
    ) -> Result<Self> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-api-key",
            super::secret_header(key.expose_secret(), "Anthropic API key")?,
        );
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        Ok(Self {
            name: ModelName {
                provider: Provider::Anthropic,
                model,
            },
            url: format!("{}/v1/messages", base_url.trim_end_matches('/')),
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
            Provider::Anthropic,
            &self.url,
            &self.headers,
            &body,
            &self.retry,
            Some(&self.key),
        )
        .await?;
        parse_response(&answer)
    }
}

impl ChatModel for AnthropicClient {
    fn name(&self) -> &ModelName {
        &self.name
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        Box::pin(self.send(request))
    }
}

fn request_body(model: &str, request: &ChatRequest) -> Value {
    let cache = json!({"type": "ephemeral"});
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
    });
    // The cache breakpoint goes at the end of the stable prefix: the system prompt when
    // there is one (it comes after the tools), else the last tool.
    if !request.system.is_empty() {
        body["system"] = json!([{"type": "text", "text": request.system, "cache_control": cache}]);
    } else if let Some(last) = tools.last_mut() {
        last["cache_control"] = cache;
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body
}

fn message(m: &super::Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = m
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => json!({"type": "text", "text": text}),
            ContentBlock::ToolUse { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => json!({
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": content,
                "is_error": is_error,
            }),
        })
        .collect();
    json!({"role": role, "content": content})
}

fn parse_response(answer: &Value) -> Result<ChatResponse, super::ModelError> {
    let bad = |what: &str| decode_error(Provider::Anthropic, what);
    let blocks = answer["content"]
        .as_array()
        .ok_or_else(|| bad("no `content` array"))?;
    let mut content = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => content.push(ContentBlock::Text(
                block["text"].as_str().unwrap_or_default().to_owned(),
            )),
            Some("tool_use") => content.push(ContentBlock::ToolUse {
                id: block["id"]
                    .as_str()
                    .ok_or_else(|| bad("a tool_use block without an id"))?
                    .to_owned(),
                name: block["name"]
                    .as_str()
                    .ok_or_else(|| bad("a tool_use block without a name"))?
                    .to_owned(),
                input: block["input"].clone(),
            }),
            // Thinking and other block kinds carry nothing the caller acts on.
            _ => {}
        }
    }
    let stop_reason = match answer["stop_reason"].as_str() {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some(other) => StopReason::Other(other.to_owned()),
        None => return Err(bad("no `stop_reason`")),
    };
    Ok(ChatResponse {
        content,
        stop_reason,
        usage: parse_usage(&answer["usage"]),
    })
}

/// A `usage` object of the Messages API (answers and stream events alike).
pub(super) fn parse_usage(usage: &Value) -> Usage {
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    Usage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cache_read_tokens: count("cache_read_input_tokens"),
        cache_write_tokens: count("cache_creation_input_tokens"),
    }
}
