//! OpenAI Chat Completions (`POST {base}/chat/completions`, the base ending in `/v1`),
//! which OpenAI-compatible local servers (vLLM, llama.cpp, Ollama) speak too. Tool calls
//! carry their arguments as a JSON string; tool results are `role: "tool"` messages.
//! Streamed answers send tool calls in pieces by index, assembled here.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::endpoint::{ChatStream, Endpoint, decode_error};
use super::sse;
use super::types::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, FinishReason, HttpOptions, ModelError,
    Role, Usage,
};
use crate::ids::{ModelName, Provider};

const OPENAI_URL: &str = "https://api.openai.com/v1";

#[derive(Debug)]
pub struct OpenAiClient {
    name: ModelName,
    endpoint: Endpoint,
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
                    super::endpoint::secret_header(
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
            endpoint: Endpoint::new(
                Provider::OpenAi,
                format!("{base}/chat/completions"),
                headers,
                key,
                options,
            )?,
        })
    }

    async fn send(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut body = request_body(&self.name.model, request);
        if self.endpoint.stream.is_some() {
            body["stream"] = json!(true);
            // Without it a stream reports no usage at all.
            body["stream_options"] = json!({"include_usage": true});
        }
        self.endpoint
            .chat::<CompletionStream>(&body, parse_response)
            .await
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    fn name(&self) -> &ModelName {
        &self.name
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.send(request).await
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
fn push_message(out: &mut Vec<Value>, m: &super::types::Message) {
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

fn parse_response(answer: &Value) -> Result<ChatResponse, ModelError> {
    let choice = answer["choices"]
        .get(0)
        .ok_or_else(|| decode_error(Provider::OpenAi, "no `choices`"))?;
    let message = &choice["message"];
    let calls = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|call| WireCall {
            id: call["id"].as_str().map(str::to_owned),
            name: call["function"]["name"].as_str().map(str::to_owned),
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
    response(
        message["content"].as_str().unwrap_or_default(),
        calls,
        choice["finish_reason"].as_str(),
        parse_usage(&answer["usage"]),
    )
}

/// A tool call as the wire has it, whole or assembled from a stream's pieces.
#[derive(Debug, Default)]
struct WireCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Our answer from an assistant message's parts, whole or streamed alike.
fn response(
    text: &str,
    calls: impl IntoIterator<Item = WireCall>,
    finish_reason: Option<&str>,
    usage: Usage,
) -> Result<ChatResponse, ModelError> {
    let bad = |what: &str| decode_error(Provider::OpenAi, what);
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(ContentBlock::Text(text.to_owned()));
    }
    for call in calls {
        let raw = if call.arguments.is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        content.push(ContentBlock::ToolUse {
            id: call.id.ok_or_else(|| bad("a tool call without an id"))?,
            name: call
                .name
                .ok_or_else(|| bad("a tool call without a function name"))?,
            input: serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())),
        });
    }
    let stop_reason = match finish_reason {
        Some("stop") => FinishReason::EndTurn,
        Some("tool_calls" | "function_call") => FinishReason::ToolUse,
        Some("length") => FinishReason::MaxTokens,
        Some(other) => FinishReason::Other(other.to_owned()),
        // Some local servers leave it out; tool calls still mean the model waits on them.
        None if content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. })) =>
        {
            FinishReason::ToolUse
        }
        None => FinishReason::EndTurn,
    };
    Ok(ChatResponse {
        content,
        stop_reason,
        usage,
    })
}

/// A streamed Chat Completions answer: chunks whose first choice carries a delta of
/// text or of tool calls (by index; the id and name come first, the arguments in
/// pieces), a chunk with the finish reason, the usage-only chunk `include_usage` asks
/// for, then `data: [DONE]`.
#[derive(Debug, Default)]
struct CompletionStream {
    text: String,
    calls: BTreeMap<u64, WireCall>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl ChatStream for CompletionStream {
    fn event(&mut self, raw: &[u8]) -> Result<bool, ModelError> {
        if sse::is_done(raw) {
            return Ok(true);
        }
        let Some(data) = sse::event_data(raw) else {
            return Ok(false);
        };
        if data["error"].is_object() {
            return Err(ModelError::Interrupted {
                provider: Provider::OpenAi,
                message: data["error"]["message"]
                    .as_str()
                    .unwrap_or("an error event without a message")
                    .to_owned(),
                usage: self.usage,
            });
        }
        if data["usage"].is_object() {
            self.usage = parse_usage(&data["usage"]);
        }
        let Some(choice) = data["choices"].get(0) else {
            return Ok(false);
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            self.text.push_str(text);
        }
        for piece in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = piece["index"].as_u64().ok_or_else(|| {
                decode_error(Provider::OpenAi, "a streamed tool call without an index")
            })?;
            let call = self.calls.entry(index).or_default();
            if let Some(id) = piece["id"].as_str().filter(|id| !id.is_empty()) {
                call.id = Some(id.to_owned());
            }
            let function = &piece["function"];
            if let Some(name) = function["name"].as_str() {
                call.name.get_or_insert_default().push_str(name);
            }
            if let Some(arguments) = function["arguments"].as_str() {
                call.arguments.push_str(arguments);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(false)
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn finish(self) -> Result<ChatResponse, ModelError> {
        response(
            &self.text,
            self.calls.into_values(),
            self.finish_reason.as_deref(),
            self.usage,
        )
    }
}

/// A Chat Completions `usage` object (answers and the final stream chunk alike).
pub(crate) fn parse_usage(usage: &Value) -> Usage {
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
pub(crate) fn parse_responses_usage(usage: &Value) -> Usage {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_are_assembled_by_index_whatever_the_order_of_their_pieces() {
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "b", "type": "function", "function": {"name": "grep", "arguments": ""}},
                {"index": 0, "id": "a", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "th\": 1}"}},
                {"index": 1, "function": {"arguments": "{\"q\": \"x"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ];
        let mut stream = CompletionStream::default();
        for chunk in &chunks {
            assert!(
                !stream
                    .event(format!("data: {chunk}\n\n").as_bytes())
                    .unwrap()
            );
        }
        assert!(stream.event(b"data: [DONE]\n\n").unwrap());
        let answer = stream.finish().unwrap();
        assert_eq!(
            answer.content,
            vec![
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "read".into(),
                    input: json!({"path": 1}),
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "grep".into(),
                    input: json!("{\"q\": \"x"),
                },
            ]
        );
        assert_eq!(answer.stop_reason, FinishReason::ToolUse);
    }

    #[test]
    fn an_error_chunk_interrupts_the_stream() {
        let mut stream = CompletionStream::default();
        let err = stream
            .event(b"data: {\"error\": {\"message\": \"The server had an error\"}}\n\n")
            .unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        assert!(err.to_string().contains("The server had an error"), "{err}");
    }
}
