//! A scripted model server on a loopback port speaking both wire formats (Anthropic
//! `/v1/messages`, OpenAI `/v1/chat/completions`). It answers from a script of steps and
//! records every request, so tests can assert on exactly what a client sent.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// What a step replies.
#[derive(Debug, Clone)]
pub enum Reply {
    Text(String),
    /// `(id, name, input)` for each call.
    ToolCalls(Vec<(String, String, Value)>),
    /// An error answer in the provider's shape, with an optional `retry-after` (seconds).
    Error {
        status: u16,
        message: String,
        retry_after: Option<u64>,
    },
}

/// Token counts the reply reports, in Anthropic's terms (input excludes cached input);
/// the OpenAI form folds cache reads into `prompt_tokens` as OpenAI does.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// One scripted answer. A request takes the first unused step that matches it.
#[derive(Debug, Clone)]
pub struct Step {
    /// Every one of these tool names must be offered.
    pub tools: Vec<String>,
    /// The last user or tool message must contain this.
    pub last_contains: Option<String>,
    pub reply: Reply,
    pub usage: ScriptUsage,
}

impl Step {
    pub fn reply(reply: Reply) -> Self {
        Self {
            tools: Vec::new(),
            last_contains: None,
            reply,
            usage: ScriptUsage {
                input: 10,
                output: 5,
                ..ScriptUsage::default()
            },
        }
    }

    pub fn text(text: &str) -> Self {
        Self::reply(Reply::Text(text.to_owned()))
    }

    pub fn tool_call(id: &str, name: &str, input: Value) -> Self {
        Self::reply(Reply::ToolCalls(vec![(
            id.to_owned(),
            name.to_owned(),
            input,
        )]))
    }

    pub fn error(status: u16, message: &str, retry_after: Option<u64>) -> Self {
        Self::reply(Reply::Error {
            status,
            message: message.to_owned(),
            retry_after,
        })
    }

    pub fn when_tools(mut self, tools: &[&str]) -> Self {
        self.tools = tools.iter().map(|t| (*t).to_owned()).collect();
        self
    }

    pub fn when_last_contains(mut self, text: &str) -> Self {
        self.last_contains = Some(text.to_owned());
        self
    }

    pub fn usage(mut self, usage: ScriptUsage) -> Self {
        self.usage = usage;
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    steps: Vec<(Step, bool)>,
    requests: Vec<Recorded>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

pub struct ModelServer {
    pub base: String,
    shared: Shared,
    stop: tokio_util::sync::CancellationToken,
}

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Anthropic,
    OpenAi,
}

impl ModelServer {
    pub async fn start(script: Vec<Step>) -> Self {
        let shared = Shared::default();
        shared.0.lock().unwrap().steps = script.into_iter().map(|s| (s, false)).collect();
        let app = axum::Router::new()
            .route(
                "/v1/messages",
                post(|state, headers, body| answer(state, Wire::Anthropic, headers, body)),
            )
            .route(
                "/v1/chat/completions",
                post(|state, headers, body| answer(state, Wire::OpenAi, headers, body)),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await
                .expect("the model server runs");
        });
        Self {
            base: format!("http://{addr}"),
            shared,
            stop,
        }
    }

    /// The base URL for `ANTHROPIC_BASE_URL`.
    pub fn anthropic_base(&self) -> String {
        self.base.clone()
    }

    /// The base URL for `OPENAI_BASE_URL` (it ends in `/v1`, as OpenAI's does).
    pub fn openai_base(&self) -> String {
        format!("{}/v1", self.base)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.0.lock().unwrap().requests.clone()
    }

    /// Steps no request has matched yet.
    pub fn unused_steps(&self) -> usize {
        self.shared
            .0
            .lock()
            .unwrap()
            .steps
            .iter()
            .filter(|(_, used)| !used)
            .count()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn answer(
    State(shared): State<Shared>,
    wire: Wire,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let step = {
        let mut inner = shared.0.lock().unwrap();
        inner.requests.push(Recorded {
            path: match wire {
                Wire::Anthropic => "/v1/messages".to_owned(),
                Wire::OpenAi => "/v1/chat/completions".to_owned(),
            },
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.clone(),
        });
        let offered = offered_tools(wire, &body);
        let last = last_input(wire, &body);
        let found = inner.steps.iter_mut().find(|(step, used)| {
            !*used
                && step.tools.iter().all(|t| offered.contains(t))
                && step
                    .last_contains
                    .as_ref()
                    .is_none_or(|needle| last.contains(needle.as_str()))
        });
        match found {
            Some((step, used)) => {
                *used = true;
                step.clone()
            }
            // A 4xx the clients do not retry, so a script mismatch fails the test fast.
            None => {
                return error_response(
                    wire,
                    418,
                    &format!(
                        "the script has no step for this request (tools {offered:?}, last message {last:?})"
                    ),
                    None,
                );
            }
        }
    };
    match &step.reply {
        Reply::Error {
            status,
            message,
            retry_after,
        } => error_response(wire, *status, message, *retry_after),
        reply => Json(match wire {
            Wire::Anthropic => anthropic_reply(reply, &step.usage),
            Wire::OpenAi => openai_reply(reply, &step.usage),
        })
        .into_response(),
    }
}

fn offered_tools(wire: Wire, body: &Value) -> Vec<String> {
    let name = |t: &Value| match wire {
        Wire::Anthropic => t["name"].as_str().map(str::to_owned),
        Wire::OpenAi => t["function"]["name"].as_str().map(str::to_owned),
    };
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(name)
        .collect()
}

/// The text of the last user or tool message, tool results included.
fn last_input(wire: Wire, body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| matches!(m["role"].as_str(), Some("user" | "tool")))
    else {
        return String::new();
    };
    match (&last["content"], wire) {
        (Value::String(s), _) => s.clone(),
        (Value::Array(blocks), Wire::Anthropic) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                Some("tool_result") => match &b["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        (other, _) => other.to_string(),
    }
}

fn anthropic_reply(reply: &Reply, usage: &ScriptUsage) -> Value {
    let (content, stop) = match reply {
        Reply::Text(text) => (vec![json!({"type": "text", "text": text})], "end_turn"),
        Reply::ToolCalls(calls) => (
            calls
                .iter()
                .map(|(id, name, input)| {
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                })
                .collect(),
            "tool_use",
        ),
        Reply::Error { .. } => unreachable!("errors are answered before"),
    };
    json!({
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": "scripted",
        "content": content,
        "stop_reason": stop,
        "usage": {
            "input_tokens": usage.input,
            "output_tokens": usage.output,
            "cache_read_input_tokens": usage.cache_read,
            "cache_creation_input_tokens": usage.cache_write,
        },
    })
}

fn openai_reply(reply: &Reply, usage: &ScriptUsage) -> Value {
    let (message, finish) = match reply {
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::ToolCalls(calls) => (
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": calls.iter().map(|(id, name, input)| json!({
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": name,
                        // A string input is sent as is, to script malformed arguments.
                        "arguments": match input {
                            Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        },
                    },
                })).collect::<Vec<_>>(),
            }),
            "tool_calls",
        ),
        Reply::Error { .. } => unreachable!("errors are answered before"),
    };
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.input + usage.cache_read,
            "completion_tokens": usage.output,
            "total_tokens": usage.input + usage.cache_read + usage.output,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        },
    })
}

fn error_response(wire: Wire, status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let body = match wire {
        Wire::Anthropic => json!({
            "type": "error",
            "error": {"type": "scripted_error", "message": message},
        }),
        Wire::OpenAi => json!({
            "error": {"message": message, "type": "scripted_error", "code": null},
        }),
    };
    let status = StatusCode::from_u16(status).expect("a valid status");
    let mut response = (status, Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", seconds.to_string().parse().expect("digits"));
    }
    response
}
