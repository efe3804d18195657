//! A scripted model server on a loopback port speaking the vendors' wire formats
//! (Anthropic `/v1/messages` and `/v1/messages/count_tokens`, OpenAI
//! `/v1/chat/completions` and `/v1/responses`; both vendors' `GET /v1/models`), as whole
//! JSON answers or, when a request
//! asks `"stream": true`, as server-sent events that can be held or cut mid-way. It
//! answers from a script of steps and records every request, so tests can assert on
//! exactly what a client sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

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
    /// Streams only: the connection drops after this many events.
    pub cut_after: Option<usize>,
    /// Streams only: after this many events, wait until the `Notify` is notified.
    pub hold: Option<(usize, Arc<Notify>)>,
    /// Streams only: after this many events, an error event in the provider's shape
    /// with this message ends the stream (Anthropic's type is `overloaded_error`).
    pub error_after: Option<(usize, String)>,
    /// Streams only: each text and each tool call's arguments arrive in this many deltas.
    pub pieces: usize,
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
            cut_after: None,
            hold: None,
            error_after: None,
            pieces: 2,
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

    /// A streamed reply drops its connection after `events` events, as a provider's
    /// does when its side fails mid-answer.
    pub fn cut_after(mut self, events: usize) -> Self {
        self.cut_after = Some(events);
        self
    }

    /// A streamed reply sends `events` events, then an error event, and ends there.
    pub fn error_after(mut self, events: usize, message: &str) -> Self {
        self.error_after = Some((events, message.to_owned()));
        self
    }

    /// A streamed reply sends its text (or arguments) in `pieces` deltas.
    pub fn in_pieces(mut self, pieces: usize) -> Self {
        self.pieces = pieces.max(1);
        self
    }

    /// A streamed reply sends `events` events, then waits for `gate` before the rest.
    pub fn hold_after(mut self, events: usize, gate: Arc<Notify>) -> Self {
        self.hold = Some((events, gate));
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub query: Option<String>,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The body's bytes as they arrived (empty where the route takes none).
    pub raw: Vec<u8>,
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
    /// OpenAI's Responses API.
    Responses,
}

impl ModelServer {
    pub async fn start(script: Vec<Step>) -> Self {
        let shared = Shared::default();
        shared.0.lock().unwrap().steps = script.into_iter().map(|s| (s, false)).collect();
        let app = axum::Router::new()
            .route(
                "/v1/messages",
                post(|state, uri, headers, body| {
                    answer(state, Wire::Anthropic, uri, headers, body)
                }),
            )
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/models", get(list_models))
            .route(
                "/v1/chat/completions",
                post(|state, uri, headers, body| answer(state, Wire::OpenAi, uri, headers, body)),
            )
            .route(
                "/v1/responses",
                post(|state, uri, headers, body| {
                    answer(state, Wire::Responses, uri, headers, body)
                }),
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

    /// A client of planwright's for `name` (`anthropic:…`, `openai:…`) that talks to this
    /// server, with retries short enough for tests.
    pub fn client(&self, name: &str) -> std::sync::Arc<dyn planwright::llm::ChatModel> {
        use planwright::llm::{HttpOptions, ModelRetry};
        let settings = planwright::config::ModelSettings {
            anthropic_api_key: Some(secrecy::SecretString::from("sk-ant-test")),
            anthropic_base_url: self.anthropic_base(),
            openai_api_key: Some(secrecy::SecretString::from("sk-openai-test")),
            openai_base_url: self.openai_base(),
            planner: None,
            scout: None,
            executor: None,
            prices: planwright::config::prices::PriceTable::default(),
        };
        let options = HttpOptions {
            timeout: std::time::Duration::from_secs(20),
            connect_timeout: std::time::Duration::from_secs(5),
            retry: ModelRetry {
                max_attempts: 2,
                base_delay: std::time::Duration::from_millis(5),
                max_delay: std::time::Duration::from_millis(20),
            },
            ..HttpOptions::default()
        };
        let name = planwright::ids::ModelName::parse(name).expect("a provider:model name");
        planwright::llm::client(&name, &settings, &options).expect("a client for the server")
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

fn record(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: &Value, raw: &[u8]) {
    shared.0.lock().unwrap().requests.push(Recorded {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
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
        raw: raw.to_vec(),
    });
}

/// Counting is free and unscripted: a quarter of the body's length, as a stand-in.
async fn count_tokens(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(&shared, &uri, &headers, &body, &[]);
    Json(json!({"input_tokens": body.to_string().len() / 4})).into_response()
}

/// The model list, unscripted, in the shape of whichever vendor the headers say.
async fn list_models(State(shared): State<Shared>, uri: Uri, headers: HeaderMap) -> Response {
    record(&shared, &uri, &headers, &Value::Null, &[]);
    if headers.contains_key("x-api-key") {
        Json(json!({
            "data": [{"type": "model", "id": "claude-test", "display_name": "Claude (test)",
                      "created_at": "2025-01-01T00:00:00Z"}],
            "has_more": false, "first_id": "claude-test", "last_id": "claude-test",
        }))
        .into_response()
    } else {
        Json(json!({
            "object": "list",
            "data": [{"id": "gpt-test", "object": "model", "created": 1735689600,
                      "owned_by": "test"}],
        }))
        .into_response()
    }
}

async fn answer(
    State(shared): State<Shared>,
    wire: Wire,
    uri: Uri,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&raw) else {
        return (axum::http::StatusCode::BAD_REQUEST, "the body is not JSON").into_response();
    };
    record(&shared, &uri, &headers, &body, &raw);
    let step = {
        let mut inner = shared.0.lock().unwrap();
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
    if let Reply::Error {
        status,
        message,
        retry_after,
    } = &step.reply
    {
        return error_response(wire, *status, message, *retry_after);
    }
    // A provider never writes more than the request's output limit: the usage it reports
    // is capped there, whatever the script says.
    let mut usage = step.usage;
    if let Some(limit) = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|key| body[*key].as_u64())
    {
        usage.output = usage.output.min(limit);
    }
    let step = Step { usage, ..step };
    if body["stream"] == true {
        let pieces = step.pieces;
        let mut events = match wire {
            Wire::Anthropic => anthropic_events(&step.reply, &step.usage, pieces),
            Wire::OpenAi => openai_chunks(
                &step.reply,
                &step.usage,
                body["stream_options"]["include_usage"] == true,
                pieces,
            ),
            Wire::Responses => responses_events(&step.reply, &step.usage, pieces),
        };
        if let Some((at, message)) = &step.error_after {
            events.truncate(*at);
            events.push(error_event(wire, message));
        }
        return event_stream(events, step.hold.clone(), step.cut_after);
    }
    Json(match wire {
        Wire::Anthropic => anthropic_reply(&step.reply, &step.usage),
        Wire::OpenAi => openai_reply(&step.reply, &step.usage),
        Wire::Responses => responses_object(&step.reply, &step.usage, "completed"),
    })
    .into_response()
}

/// Sends `events` one by one, waiting at the hold and dropping the connection at the cut.
fn event_stream(
    events: Vec<String>,
    hold: Option<(usize, Arc<Notify>)>,
    cut_after: Option<usize>,
) -> Response {
    struct Feed {
        events: VecDeque<String>,
        sent: usize,
        hold: Option<(usize, Arc<Notify>)>,
        cut_after: Option<usize>,
    }
    let feed = Feed {
        events: events.into(),
        sent: 0,
        hold,
        cut_after,
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        if let Some((at, gate)) = feed.hold.clone()
            && feed.sent == at
        {
            gate.notified().await;
            feed.hold = None;
        }
        if feed.cut_after == Some(feed.sent) {
            // One pending poll lets hyper flush what was sent before the body fails,
            // and a failed body drops the connection without ending the chunked body.
            tokio::task::yield_now().await;
            feed.cut_after = None;
            feed.events.clear();
            return Some((Err(std::io::Error::other("scripted cut")), feed));
        }
        let event = feed.events.pop_front()?;
        feed.sent += 1;
        Some((Ok::<_, std::io::Error>(Bytes::from(event)), feed))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// Text in `n` pieces (two by default), so clients must join deltas.
fn split(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| i * chars.len() / n;
    (0..n)
        .map(|i| chars[at(i)..at(i + 1)].iter().collect())
        .collect()
}

/// The error event a provider sends when it fails mid-stream.
fn error_event(wire: Wire, message: &str) -> String {
    match wire {
        Wire::Anthropic => sse(
            Some("error"),
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
        ),
        Wire::OpenAi => sse(
            None,
            &json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
        ),
        Wire::Responses => sse(
            Some("error"),
            &json!({"type": "error", "code": "server_error", "message": message, "param": null}),
        ),
    }
}

fn arguments(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn anthropic_events(reply: &Reply, usage: &ScriptUsage, pieces: usize) -> Vec<String> {
    let event = |data: Value| sse(data["type"].as_str(), &data);
    let mut events = vec![
        event(json!({
            "type": "message_start",
            "message": {
                "id": "msg_scripted",
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": usage.input,
                    "cache_creation_input_tokens": usage.cache_write,
                    "cache_read_input_tokens": usage.cache_read,
                    "output_tokens": 1,
                },
            },
        })),
        event(json!({"type": "ping"})),
    ];
    let stop = match reply {
        Reply::Text(text) => {
            events.push(event(json!({
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            })));
            for piece in split(text, pieces) {
                events.push(event(json!({
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                })));
            }
            events.push(event(json!({"type": "content_block_stop", "index": 0})));
            "end_turn"
        }
        Reply::ToolCalls(calls) => {
            for (index, (id, name, input)) in calls.iter().enumerate() {
                events.push(event(json!({
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
                })));
                for piece in split(&arguments(input), pieces) {
                    events.push(event(json!({
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    })));
                }
                events.push(event(json!({"type": "content_block_stop", "index": index})));
            }
            "tool_use"
        }
        Reply::Error { .. } => unreachable!("errors are answered before"),
    };
    events.push(event(json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": usage.output},
    })));
    events.push(event(json!({"type": "message_stop"})));
    events
}

fn openai_usage(usage: &ScriptUsage) -> Value {
    json!({
        "prompt_tokens": usage.input + usage.cache_read,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.cache_read + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    })
}

/// Chat Completions chunks; with `include_usage` every chunk carries `"usage": null`
/// and a last chunk without choices carries the usage, as OpenAI sends them.
fn openai_chunks(
    reply: &Reply,
    usage: &ScriptUsage,
    include_usage: bool,
    pieces: usize,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        let mut data = json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if include_usage {
            data["usage"] = Value::Null;
        }
        sse(None, &data)
    };
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let finish = match reply {
        Reply::Text(text) => {
            for piece in split(text, pieces) {
                chunks.push(chunk(json!({"content": piece}), Value::Null));
            }
            "stop"
        }
        Reply::ToolCalls(calls) => {
            for (index, (id, name, input)) in calls.iter().enumerate() {
                chunks.push(chunk(
                    json!({"tool_calls": [{
                        "index": index,
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]}),
                    Value::Null,
                ));
                for piece in split(&arguments(input), pieces) {
                    chunks.push(chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                        Value::Null,
                    ));
                }
            }
            "tool_calls"
        }
        Reply::Error { .. } => unreachable!("errors are answered before"),
    };
    chunks.push(chunk(json!({}), json!(finish)));
    if include_usage {
        chunks.push(sse(
            None,
            &json!({
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "scripted",
                "choices": [],
                "usage": openai_usage(usage),
            }),
        ));
    }
    chunks.push("data: [DONE]\n\n".to_owned());
    chunks
}

fn responses_usage(usage: &ScriptUsage) -> Value {
    json!({
        "input_tokens": usage.input + usage.cache_read,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input + usage.cache_read + usage.output,
    })
}

/// The output items a finished Responses answer holds.
fn responses_output(reply: &Reply) -> Vec<Value> {
    match reply {
        Reply::Text(text) => vec![json!({
            "id": "msg_scripted",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })],
        Reply::ToolCalls(calls) => calls
            .iter()
            .enumerate()
            .map(|(index, (id, name, input))| {
                json!({
                    "id": format!("fc_{index}"),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": id,
                    "name": name,
                    "arguments": arguments(input),
                })
            })
            .collect(),
        Reply::Error { .. } => unreachable!("errors are answered before"),
    }
}

fn responses_object(reply: &Reply, usage: &ScriptUsage, status: &str) -> Value {
    let done = status == "completed";
    json!({
        "id": "resp_scripted",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": "scripted",
        "output": if done { responses_output(reply) } else { Vec::new() },
        "usage": if done { responses_usage(usage) } else { Value::Null },
    })
}

fn responses_events(reply: &Reply, usage: &ScriptUsage, pieces: usize) -> Vec<String> {
    let mut sequence = 0;
    let mut events = Vec::new();
    let mut push = |mut data: Value| {
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        events.push(sse(data["type"].as_str(), &data));
    };
    push(
        json!({"type": "response.created", "response": responses_object(reply, usage, "in_progress")}),
    );
    push(
        json!({"type": "response.in_progress", "response": responses_object(reply, usage, "in_progress")}),
    );
    for (index, item) in responses_output(reply).into_iter().enumerate() {
        let id = item["id"].clone();
        match reply {
            Reply::Text(text) => {
                let mut open = item.clone();
                open["status"] = json!("in_progress");
                open["content"] = json!([]);
                push(
                    json!({"type": "response.output_item.added", "output_index": index, "item": open}),
                );
                push(json!({
                    "type": "response.content_part.added",
                    "item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }));
                for piece in split(text, pieces) {
                    push(json!({
                        "type": "response.output_text.delta",
                        "item_id": id, "output_index": index, "content_index": 0, "delta": piece,
                    }));
                }
                push(json!({
                    "type": "response.output_text.done",
                    "item_id": id, "output_index": index, "content_index": 0, "text": text,
                }));
                push(json!({
                    "type": "response.content_part.done",
                    "item_id": id, "output_index": index, "content_index": 0,
                    "part": item["content"][0].clone(),
                }));
            }
            Reply::ToolCalls(_) => {
                let mut open = item.clone();
                open["status"] = json!("in_progress");
                open["arguments"] = json!("");
                push(
                    json!({"type": "response.output_item.added", "output_index": index, "item": open}),
                );
                let full = item["arguments"].as_str().unwrap_or_default().to_owned();
                for piece in split(&full, pieces) {
                    push(json!({
                        "type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": index, "delta": piece,
                    }));
                }
                push(json!({
                    "type": "response.function_call_arguments.done",
                    "item_id": id, "output_index": index, "arguments": full,
                }));
            }
            Reply::Error { .. } => unreachable!("errors are answered before"),
        }
        push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    push(
        json!({"type": "response.completed", "response": responses_object(reply, usage, "completed")}),
    );
    events
}

fn offered_tools(wire: Wire, body: &Value) -> Vec<String> {
    let name = |t: &Value| match wire {
        Wire::Anthropic | Wire::Responses => t["name"].as_str().map(str::to_owned),
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
    if wire == Wire::Responses {
        return last_responses_input(&body["input"]);
    }
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
        "usage": openai_usage(usage),
    })
}

fn error_response(wire: Wire, status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let body = match wire {
        Wire::Anthropic => json!({
            "type": "error",
            "error": {"type": "scripted_error", "message": message},
        }),
        Wire::OpenAi | Wire::Responses => json!({
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

/// The Responses API's `input`: a string, or items of which the last user message or
/// function call output counts.
fn last_responses_input(input: &Value) -> String {
    let items = match input {
        Value::String(s) => return s.clone(),
        Value::Array(items) => items,
        _ => return String::new(),
    };
    let Some(last) = items
        .iter()
        .rev()
        .find(|i| i["role"] == "user" || i["type"] == "function_call_output")
    else {
        return String::new();
    };
    if last["type"] == "function_call_output" {
        return last["output"].as_str().unwrap_or_default().to_owned();
    }
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
