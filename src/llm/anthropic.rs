//! The Anthropic Messages API (`POST {base}/v1/messages`): our request in its wire format,
//! its answer back into ours. The stable prefix (tools, then the system prompt) is marked
//! for prompt caching, since every turn of a tool loop resends it. Answers come whole or,
//! when the options ask for streaming, as events assembled here.

use std::collections::BTreeMap;

use anyhow::Result;
use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::endpoint::{ChatStream, Endpoint, decode_error};
use super::sse;
use super::types::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, FinishReason, HttpOptions, ModelError,
    Role, Usage,
};
use crate::ids::{ModelName, Provider};

pub(crate) const API_VERSION: &str = "2023-06-01";

#[derive(Debug)]
pub struct AnthropicClient {
    name: ModelName,
    endpoint: Endpoint,
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
            super::endpoint::secret_header(key.expose_secret(), "Anthropic API key")?,
        );
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        Ok(Self {
            name: ModelName {
                provider: Provider::Anthropic,
                model,
            },
            endpoint: Endpoint::new(
                Provider::Anthropic,
                format!("{}/v1/messages", base_url.trim_end_matches('/')),
                headers,
                Some(key),
                options,
            )?,
        })
    }

    async fn send(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut body = request_body(&self.name.model, request);
        if self.endpoint.stream.is_some() {
            body["stream"] = json!(true);
        }
        self.endpoint
            .chat::<MessageStream>(&body, parse_response)
            .await
    }
}

#[async_trait]
impl ChatModel for AnthropicClient {
    fn name(&self) -> &ModelName {
        &self.name
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.send(request).await
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

fn message(m: &super::types::Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = m.content.iter().map(block_json).collect();
    json!({"role": role, "content": content})
}

/// One content block in Anthropic's wire form, which is also the form transcripts keep.
pub fn block_json(block: &ContentBlock) -> Value {
    match block {
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
    }
}

fn parse_response(answer: &Value) -> Result<ChatResponse, ModelError> {
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
    Ok(ChatResponse {
        content,
        stop_reason: stop_reason(answer["stop_reason"].as_str())?,
        usage: parse_usage(&answer["usage"]),
    })
}

fn stop_reason(wire: Option<&str>) -> Result<FinishReason, ModelError> {
    Ok(match wire {
        Some("end_turn") => FinishReason::EndTurn,
        Some("tool_use") => FinishReason::ToolUse,
        Some("max_tokens") => FinishReason::MaxTokens,
        Some("stop_sequence") => FinishReason::StopSequence,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => return Err(decode_error(Provider::Anthropic, "no `stop_reason`")),
    })
}

/// A streamed Messages answer: `message_start` (input usage), content blocks opened,
/// filled by deltas and closed, `message_delta` (stop reason, output usage), then
/// `message_stop`.
#[derive(Debug, Default)]
struct MessageStream {
    /// By the index the events name, which is the block's place in the answer.
    blocks: BTreeMap<u64, StreamedBlock>,
    stop_reason: Option<String>,
    usage: Usage,
}

#[derive(Debug)]
enum StreamedBlock {
    Text(String),
    /// `start_input` is the input the block opened with; `json` the deltas joined.
    ToolUse {
        id: String,
        name: String,
        start_input: Value,
        json: String,
    },
    /// Thinking and other block kinds carry nothing the caller acts on.
    Other,
}

impl ChatStream for MessageStream {
    fn event(&mut self, raw: &[u8]) -> Result<bool, ModelError> {
        let Some(data) = sse::event_data(raw) else {
            return Ok(false);
        };
        let bad = |what: &str| decode_error(Provider::Anthropic, what);
        let index = data["index"].as_u64();
        match data["type"].as_str() {
            Some("message_start") => self.usage = parse_usage(&data["message"]["usage"]),
            Some("content_block_start") => {
                let index = index.ok_or_else(|| bad("a content block without an index"))?;
                let block = &data["content_block"];
                let streamed = match block["type"].as_str() {
                    Some("text") => {
                        StreamedBlock::Text(block["text"].as_str().unwrap_or_default().to_owned())
                    }
                    Some("tool_use") => StreamedBlock::ToolUse {
                        id: block["id"]
                            .as_str()
                            .ok_or_else(|| bad("a tool_use block without an id"))?
                            .to_owned(),
                        name: block["name"]
                            .as_str()
                            .ok_or_else(|| bad("a tool_use block without a name"))?
                            .to_owned(),
                        start_input: block["input"].clone(),
                        json: String::new(),
                    },
                    _ => StreamedBlock::Other,
                };
                self.blocks.insert(index, streamed);
            }
            Some("content_block_delta") => {
                let index = index.ok_or_else(|| bad("a content delta without an index"))?;
                let delta = &data["delta"];
                match (self.blocks.get_mut(&index), delta["type"].as_str()) {
                    (Some(StreamedBlock::Text(text)), Some("text_delta")) => {
                        text.push_str(delta["text"].as_str().unwrap_or_default());
                    }
                    (Some(StreamedBlock::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    (None, _) => return Err(bad("a content delta for a block never opened")),
                    // Thinking, signatures and citations.
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                apply_usage_delta(&mut self.usage, &data["usage"]);
            }
            Some("message_stop") => return Ok(true),
            Some("error") => {
                let error = &data["error"];
                return Err(ModelError::Interrupted {
                    provider: Provider::Anthropic,
                    message: format!(
                        "{}: {}",
                        error["type"].as_str().unwrap_or("error"),
                        error["message"].as_str().unwrap_or("(no message)")
                    ),
                    usage: self.usage,
                });
            }
            // `ping`, `content_block_stop`, and event kinds added later.
            _ => {}
        }
        Ok(false)
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn finish(self) -> Result<ChatResponse, ModelError> {
        let content = self
            .blocks
            .into_values()
            .filter_map(|block| match block {
                StreamedBlock::Text(text) => Some(ContentBlock::Text(text)),
                StreamedBlock::ToolUse {
                    id,
                    name,
                    start_input,
                    json,
                } => {
                    // A call without arguments sends no deltas; unparseable arguments
                    // stay the raw text, so the tool loop can answer with a tool error.
                    let input = if json.is_empty() {
                        start_input
                    } else {
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    Some(ContentBlock::ToolUse { id, name, input })
                }
                StreamedBlock::Other => None,
            })
            .collect();
        Ok(ChatResponse {
            content,
            stop_reason: stop_reason(self.stop_reason.as_deref())?,
            usage: self.usage,
        })
    }
}

/// A `usage` object of the Messages API (answers and stream events alike).
pub(crate) fn parse_usage(usage: &Value) -> Usage {
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    Usage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cache_read_tokens: count("cache_read_input_tokens"),
        cache_write_tokens: count("cache_creation_input_tokens"),
    }
}

/// A stream's `message_delta` usage: running totals for output and, on newer API
/// versions, final input counts; a count it leaves out keeps its earlier value.
pub(crate) fn apply_usage_delta(usage: &mut Usage, delta: &Value) {
    let set = |slot: &mut u64, key: &str| {
        if let Some(n) = delta[key].as_u64() {
            *slot = n;
        }
    };
    set(&mut usage.output_tokens, "output_tokens");
    set(&mut usage.input_tokens, "input_tokens");
    set(&mut usage.cache_read_tokens, "cache_read_input_tokens");
    set(&mut usage.cache_write_tokens, "cache_creation_input_tokens");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(events: &[Value]) -> Result<ChatResponse, ModelError> {
        let mut stream = MessageStream::default();
        for data in events {
            let raw = format!(
                "event: {}\ndata: {data}\n\n",
                data["type"].as_str().unwrap()
            );
            if stream.event(raw.as_bytes())? {
                return stream.finish();
            }
        }
        panic!("the stream did not end");
    }

    #[test]
    fn thinking_is_dropped_and_a_call_without_deltas_keeps_its_opening_input() {
        let answer = feed(&[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "list", "input": {}}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            answer.content,
            vec![ContentBlock::ToolUse {
                id: "t1".into(),
                name: "list".into(),
                input: json!({}),
            }]
        );
        assert_eq!(answer.stop_reason, FinishReason::ToolUse);
        assert_eq!(
            (answer.usage.input_tokens, answer.usage.output_tokens),
            (3, 7)
        );
    }

    #[test]
    fn an_error_event_interrupts_with_the_usage_so_far() {
        let err = feed(&[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 40, "output_tokens": 1}}}),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ])
        .unwrap_err();
        let ModelError::Interrupted { message, usage, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(message, "overloaded_error: Overloaded");
        assert_eq!(usage.input_tokens, 40);
        assert!(err.is_retryable());
        let err = feed(&[json!({"type": "content_block_delta", "index": 4, "delta": {"type": "text_delta", "text": "x"}})])
            .unwrap_err();
        assert!(matches!(err, ModelError::Decode { .. }), "{err:?}");
    }
}
