//! The model proxy against the scripted model server and the real database: capability
//! tokens, the keys swapped on the way, JSON and streamed answers on every route metered
//! exactly as the server reported them, budgets, cut streams, the Unix socket the
//! sandbox uses, `serve` running it, and logs free of keys and tokens.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use planwright::config::ModelSettings;
use planwright::config::ProxyListen;
use planwright::config::prices::PriceTable;
use planwright::ids::ModelName;
use planwright::ids::{RunId, SessionId};
use planwright::llm::Usage;
use planwright::metering::proxy::{self, Capabilities, ProxyState};
use planwright::server::Role;
use planwright::store::model_usage::Budget;
use planwright::store::model_usage::{self, UsageRow};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use support::model_server::{ModelServer, ScriptUsage, Step};
use support::{TestDb, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const ANTHROPIC_KEY: &str = "sk-ant-real-key-0123456789abcdef";
const OPENAI_KEY: &str = "sk-openai-real-key-fedcba9876543210";
const CLIENT_KEY: &str = "sk-client-own-key-5555";
const QUESTION: &str = "Where does the program start?";
const WAIT: Duration = Duration::from_secs(20);

struct Harness {
    db: TestDb,
    upstream: ModelServer,
    caps: Arc<Capabilities>,
    base: String,
    http: reqwest::Client,
    run: RunId,
    session: SessionId,
    stop: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn model_settings(upstream: &ModelServer) -> ModelSettings {
    ModelSettings {
        anthropic_api_key: Some(SecretString::from(ANTHROPIC_KEY)),
        anthropic_base_url: upstream.anthropic_base(),
        openai_api_key: Some(SecretString::from(OPENAI_KEY)),
        openai_base_url: upstream.openai_base(),
        planner: None,
        scout: None,
        executor: None,
        prices: PriceTable::default(),
    }
}

async fn start_on(script: Vec<Step>, listen: impl FnOnce(&Path) -> ProxyListen) -> Harness {
    let db = TestDb::new().await;
    let upstream = ModelServer::start(script).await;
    let caps = Arc::new(Capabilities::generate());
    let state = ProxyState::new(db.db.clone(), &model_settings(&upstream), caps.clone()).unwrap();
    let stop = CancellationToken::new();
    let (proxy, _task) = proxy::serve(&listen(db.dir.path()), state, stop.clone())
        .await
        .unwrap();
    let base = match &proxy.listen {
        ProxyListen::Tcp(addr) => format!("http://{addr}"),
        ProxyListen::Unix(path) => format!("unix:{}", path.display()),
    };
    Harness {
        db,
        upstream,
        caps,
        base,
        http: reqwest::Client::new(),
        run: RunId::generate(),
        session: SessionId::generate(),
        stop,
    }
}

async fn start(script: Vec<Step>) -> Harness {
    start_on(script, |_| ProxyListen::Tcp("127.0.0.1:0".parse().unwrap())).await
}

impl Harness {
    fn token(&self, budget: Budget) -> SecretString {
        self.caps
            .issue(&self.run, &self.session, budget, Duration::from_secs(600))
    }

    /// A request the way Claude Code sends one: the token as `x-api-key`.
    fn anthropic(&self, path: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .header("x-api-key", token)
            .header("anthropic-version", "2023-06-01")
            .json(body)
    }

    /// A request the way Codex sends one: the token as a bearer.
    fn openai(&self, path: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
    }

    async fn rows(&self) -> Vec<UsageRow> {
        model_usage::list_by_session(&self.db.db, &self.session)
            .await
            .unwrap()
    }
}

fn anthropic_body(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": stream,
        "tools": [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": QUESTION}],
    })
}

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "gpt-5-mini",
        "stream": stream,
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": QUESTION}],
    })
}

fn responses_body(stream: bool) -> Value {
    json!({
        "model": "gpt-5",
        "stream": stream,
        "input": QUESTION,
        "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}],
    })
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> ScriptUsage {
    ScriptUsage {
        input,
        output,
        cache_read,
        cache_write,
    }
}

/// The row a call should have left, in planwright's terms (input excludes cached input).
fn assert_row(row: &UsageRow, h: &Harness, model: &str, expected: Usage) {
    assert_eq!(row.role, "executor");
    assert_eq!(row.model, model);
    assert_eq!(row.run_id.as_deref(), Some(h.run.as_str()));
    assert_eq!(row.session_id.as_deref(), Some(h.session.as_str()));
    let got = (
        row.input_tokens,
        row.output_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
    );
    let want = (
        expected.input_tokens as i64,
        expected.output_tokens as i64,
        expected.cache_read_tokens as i64,
        expected.cache_write_tokens as i64,
    );
    assert_eq!(got, want, "tokens of the {model} call");
    let provider = if model.starts_with("claude") {
        "anthropic"
    } else {
        "openai"
    };
    let price = PriceTable::default()
        .get(&ModelName::parse(&format!("{provider}:{model}")).unwrap())
        .unwrap();
    assert_eq!(row.cost_microusd, price.cost_microusd(&expected));
}

/// The whole body, failing rather than hanging if it never ends.
async fn read_all(response: reqwest::Response) -> String {
    tokio::time::timeout(WAIT, response.text())
        .await
        .expect("the stream ended")
        .expect("the stream read cleanly")
}

/// The JSON of every event's data, `[DONE]` left out.
fn event_data(stream: &str) -> Vec<Value> {
    stream
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

#[tokio::test]
async fn missing_expired_forged_and_revoked_tokens_are_refused_and_nothing_is_forwarded() {
    let h = start(vec![]).await;
    let expired = h
        .caps
        .issue(&h.run, &h.session, Budget::usd(1.0), Duration::ZERO);
    let forged = Capabilities::generate().issue(
        &h.run,
        &h.session,
        Budget::usd(1.0),
        Duration::from_secs(600),
    );
    let ended = RunId::generate();
    let revoked = h.caps.issue(
        &ended,
        &h.session,
        Budget::usd(1.0),
        Duration::from_secs(600),
    );
    h.caps.revoke(&ended);
    let cases: Vec<(Option<&str>, &str)> = vec![
        (None, "without a capability token"),
        (Some(expired.expose_secret()), "expired"),
        (Some(forged.expose_secret()), "not one planwright issued"),
        (Some(revoked.expose_secret()), "revoked"),
        (Some(CLIENT_KEY), "not one planwright issued"),
    ];
    for (token, reason) in cases {
        let mut request = h
            .http
            .post(format!("{}/v1/messages", h.base))
            .json(&anthropic_body(false));
        if let Some(token) = token {
            request = request.header("x-api-key", token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "anthropic, {reason}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "authentication_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");

        for path in ["/v1/chat/completions", "/v1/responses"] {
            let mut request = h
                .http
                .post(format!("{}{path}", h.base))
                .json(&chat_body(false));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{path}, {reason}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(reason), "{message}");
        }
    }
    assert!(
        h.upstream.requests().is_empty(),
        "a refused call was forwarded"
    );
    assert!(h.rows().await.is_empty());
}

#[tokio::test]
async fn client_keys_never_reach_upstream_and_the_real_key_does() {
    let h = start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let token = token.expose_secret();
    // The token as x-api-key, with a key of the client's own, a cookie and a proxy
    // credential beside it.
    let response = h
        .http
        .post(format!("{}/v1/messages?beta=true", h.base))
        .header("x-api-key", token)
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .header("cookie", "session=client-cookie")
        .header("proxy-authorization", "Basic Y2xpZW50OnNlY3JldA==")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "prompt-caching-2024-07-31")
        .json(&anthropic_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // The token as a bearer, as Claude Code sends ANTHROPIC_AUTH_TOKEN.
    let response = h
        .http
        .post(format!("{}/v1/messages", h.base))
        .bearer_auth(token)
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // OpenAI: the token as a bearer, a client key as x-api-key.
    let response = h
        .openai("/v1/chat/completions", token, &chat_body(false))
        .header("x-api-key", CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let requests = h.upstream.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    assert_eq!(first.header("x-api-key"), Some(ANTHROPIC_KEY));
    assert_eq!(first.header("authorization"), None);
    assert_eq!(first.header("cookie"), None);
    assert_eq!(first.header("proxy-authorization"), None);
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        first.header("anthropic-beta"),
        Some("prompt-caching-2024-07-31")
    );
    assert_eq!(first.query.as_deref(), Some("beta=true"));
    assert_eq!(first.body, anthropic_body(false));
    assert_eq!(requests[1].header("x-api-key"), Some(ANTHROPIC_KEY));
    assert_eq!(requests[1].header("authorization"), None);
    assert_eq!(
        requests[2].header("authorization"),
        Some(format!("Bearer {OPENAI_KEY}").as_str())
    );
    assert_eq!(requests[2].header("x-api-key"), None);
    for request in &requests {
        for (name, value) in &request.headers {
            for secret in [token, CLIENT_KEY, "client-cookie", "Y2xpZW50OnNlY3JldA=="] {
                assert!(!value.contains(secret), "{name} leaked upstream");
            }
        }
    }
}

#[tokio::test]
async fn json_answers_on_every_route_pass_through_and_are_metered_as_reported() {
    let h = start(vec![
        Step::text("It starts in main.").usage(usage(120, 30, 1000, 50)),
        Step::tool_call("call_1", "read_file", json!({"path": "src/main.rs"}))
            .usage(usage(200, 40, 100, 0)),
        Step::text("In src/main.rs.").usage(usage(70, 9, 30, 0)),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let token = token.expose_secret();

    let response = h
        .anthropic("/v1/messages", token, &anthropic_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["content"][0]["text"], "It starts in main.");
    assert_eq!(answer["usage"]["cache_read_input_tokens"], 1000);

    let response = h
        .openai("/v1/chat/completions", token, &chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let call = &answer["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read_file");
    assert_eq!(call["function"]["arguments"], r#"{"path":"src/main.rs"}"#);

    let response = h
        .openai("/v1/responses", token, &responses_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["output"][0]["content"][0]["text"], "In src/main.rs.");

    // Counting tokens is forwarded and free.
    let response = h
        .anthropic("/v1/messages/count_tokens", token, &anthropic_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let counted: Value = response.json().await.unwrap();
    assert!(counted["input_tokens"].as_u64().unwrap() > 0, "{counted}");

    let paths: Vec<String> = h
        .upstream
        .requests()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        paths,
        [
            "/v1/messages",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/messages/count_tokens"
        ]
    );
    let rows = h.rows().await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let anthropic = Usage {
        input_tokens: 120,
        output_tokens: 30,
        cache_read_tokens: 1000,
        cache_write_tokens: 50,
    };
    let chat = Usage {
        input_tokens: 200,
        output_tokens: 40,
        cache_read_tokens: 100,
        cache_write_tokens: 0,
    };
    let responses = Usage {
        input_tokens: 70,
        output_tokens: 9,
        cache_read_tokens: 30,
        cache_write_tokens: 0,
    };
    assert_row(&rows[0], &h, "claude-sonnet-4-5", anthropic);
    assert_row(&rows[1], &h, "gpt-5-mini", chat);
    assert_row(&rows[2], &h, "gpt-5", responses);
    let spent = model_usage::spent_by_run(&h.db.db, &h.run).await.unwrap();
    assert_eq!(
        spent.tokens,
        (anthropic.total() + chat.total() + responses.total()) as i64
    );
    assert_eq!(
        spent.cost_microusd,
        rows.iter().map(|r| r.cost_microusd).sum::<i64>()
    );
}

#[tokio::test]
async fn streams_on_every_route_pass_through_whole_and_are_metered_as_reported() {
    let input = json!({"path": "src/main.rs", "start_line": 1});
    let h = start(vec![
        Step::tool_call("toolu_1", "read_file", input.clone()).usage(usage(300, 25, 2000, 10)),
        Step::tool_call("call_1", "read_file", input.clone()).usage(usage(150, 20, 50, 0)),
        Step::text("It starts in main.").usage(usage(80, 12, 0, 0)),
        Step::text("It starts in main.").usage(usage(90, 14, 10, 0)),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let token = token.expose_secret();

    // Anthropic: the tool call's input arrives as input_json_delta pieces.
    let response = h
        .anthropic("/v1/messages", token, &anthropic_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let stream = read_all(response).await;
    let events = event_data(&stream);
    let partial: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), input);
    assert_eq!(events.last().unwrap()["type"], "message_stop");

    // Chat Completions: the client did not ask for usage; the proxy did, and keeps the
    // usage-only chunk from it.
    let response = h
        .openai("/v1/chat/completions", token, &chat_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stream = read_all(response).await;
    let chunks = event_data(&stream);
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), input);
    assert!(
        chunks
            .iter()
            .all(|c| !c["choices"].as_array().unwrap().is_empty()),
        "the usage-only chunk reached a client that did not ask for it: {stream}"
    );
    assert!(stream.trim_end().ends_with("data: [DONE]"), "{stream}");
    let upstream_body = &h.upstream.requests()[1].body;
    assert_eq!(upstream_body["stream_options"]["include_usage"], true);

    // A client that asks for usage gets the chunk.
    let mut asked = chat_body(true);
    asked["stream_options"] = json!({"include_usage": true});
    let response = h
        .openai("/v1/chat/completions", token, &asked)
        .send()
        .await
        .unwrap();
    let stream = read_all(response).await;
    let last = event_data(&stream).pop().unwrap();
    assert_eq!(last["usage"]["completion_tokens"], 12, "{stream}");

    // Responses API: text deltas, ending in response.completed.
    let response = h
        .openai("/v1/responses", token, &responses_body(true))
        .send()
        .await
        .unwrap();
    let stream = read_all(response).await;
    let events = event_data(&stream);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "It starts in main.");
    assert_eq!(events.last().unwrap()["type"], "response.completed");

    let rows = h.rows().await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_row(
        &rows[0],
        &h,
        "claude-sonnet-4-5",
        Usage {
            input_tokens: 300,
            output_tokens: 25,
            cache_read_tokens: 2000,
            cache_write_tokens: 10,
        },
    );
    assert_row(
        &rows[1],
        &h,
        "gpt-5-mini",
        Usage {
            input_tokens: 150,
            output_tokens: 20,
            cache_read_tokens: 50,
            cache_write_tokens: 0,
        },
    );
    assert_row(
        &rows[2],
        &h,
        "gpt-5-mini",
        Usage {
            input_tokens: 80,
            output_tokens: 12,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
    );
    assert_row(
        &rows[3],
        &h,
        "gpt-5",
        Usage {
            input_tokens: 90,
            output_tokens: 14,
            cache_read_tokens: 10,
            cache_write_tokens: 0,
        },
    );
}

#[tokio::test]
async fn a_stream_reaches_the_client_while_the_server_is_still_sending() {
    let gate = Arc::new(Notify::new());
    let h = start(vec![
        Step::text("It starts in main.").hold_after(1, gate.clone()),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let mut response = h
        .anthropic("/v1/messages", token.expose_secret(), &anthropic_body(true))
        .send()
        .await
        .unwrap();
    // The server sends message_start, then waits for the gate: the client can only
    // see it now if the proxy passed it on without waiting for the rest.
    let mut seen = String::new();
    tokio::time::timeout(WAIT, async {
        while !seen.contains("\n\n") {
            let chunk = response.chunk().await.unwrap().expect("more of the stream");
            seen.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .expect("the first event arrived while the server held back the rest");
    assert!(seen.starts_with("event: message_start"), "{seen}");
    assert!(!seen.contains("message_stop"), "{seen}");
    gate.notify_one();
    let rest = read_all(response).await;
    assert!(rest.contains("event: message_stop"), "{rest}");
    assert_eq!(h.rows().await.len(), 1);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_still_metered() {
    let gate = Arc::new(Notify::new());
    let h = start(vec![
        Step::text("It starts in main.")
            .usage(usage(640, 77, 0, 0))
            .hold_after(1, gate.clone()),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let mut response = h
        .anthropic("/v1/messages", token.expose_secret(), &anthropic_body(true))
        .send()
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, response.chunk())
        .await
        .expect("the first event arrived")
        .unwrap()
        .expect("a first chunk");
    assert!(first.starts_with(b"event: message_start"));
    drop(response);
    gate.notify_one();
    let rows = support::eventually("the abandoned call to be recorded", || async {
        let rows = h.rows().await;
        (!rows.is_empty()).then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 1);
    // At least message_start was seen; the rest only if it was read before the proxy
    // noticed the client had gone.
    assert_eq!(rows[0].input_tokens, 640);
    assert!(
        rows[0].output_tokens == 1 || rows[0].output_tokens == 77,
        "{rows:?}"
    );
}

#[tokio::test]
async fn runs_are_stopped_at_their_budget_with_an_error_agents_can_read() {
    // Anthropic, in dollars: a stream that goes past the budget finishes; the next call
    // is refused.
    let h = start(vec![
        Step::text("a long answer").usage(usage(1000, 2000, 0, 0)),
        Step::text("never sent"),
    ])
    .await;
    let token = h.token(Budget::usd(0.01));
    let response = h
        .anthropic("/v1/messages", token.expose_secret(), &anthropic_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stream = read_all(response).await;
    assert!(stream.contains("event: message_stop"), "{stream}");
    let response = h
        .anthropic(
            "/v1/messages",
            token.expose_secret(),
            &anthropic_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 402);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "billing_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("budget")
            && message.contains(h.run.as_str())
            && message.contains("$0.0100"),
        "{message}"
    );
    assert_eq!(h.upstream.requests().len(), 1);
    assert_eq!(h.upstream.unused_steps(), 1);

    // OpenAI, in tokens, on both routes.
    let h = start(vec![Step::text("enough").usage(usage(100, 60, 0, 0))]).await;
    let token = h.token(Budget::tokens(150));
    let response = h
        .openai(
            "/v1/chat/completions",
            token.expose_secret(),
            &chat_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for (path, body) in [
        ("/v1/chat/completions", chat_body(true)),
        ("/v1/responses", responses_body(true)),
    ] {
        let response = h
            .openai(path, token.expose_secret(), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 429, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "insufficient_quota", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("160 tokens of 150 tokens") && message.contains("budget"),
            "{message}"
        );
    }
    assert_eq!(h.upstream.requests().len(), 1);
}

#[tokio::test]
async fn parallel_calls_from_two_processes_overshoot_the_budget_by_at_most_one_call() {
    const CALLS: usize = 10;
    const MAX_TOKENS: u64 = 20_000;
    let logs = captured_logs();
    let gates: Vec<Arc<Notify>> = (0..CALLS).map(|_| Arc::new(Notify::new())).collect();
    // Each call reports what its request could cost at most, near enough: 50 tokens in,
    // its whole output limit out ($0.30 on Sonnet).
    let script = gates
        .iter()
        .map(|gate| {
            Step::text("a long answer")
                .usage(usage(50, MAX_TOKENS, 0, 0))
                .hold_after(1, gate.clone())
        })
        .collect();
    let h = start(script).await;
    // A second process on the same database: its own pool and its own proxy, with a
    // token for the same run.
    let second_db = planwright::store::Db::open(&h.db.url).await.unwrap();
    let second_caps = Arc::new(Capabilities::generate());
    let state =
        ProxyState::new(second_db, &model_settings(&h.upstream), second_caps.clone()).unwrap();
    let (second, _task) = proxy::serve(
        &ProxyListen::Tcp("127.0.0.1:0".parse().unwrap()),
        state,
        h.stop.clone(),
    )
    .await
    .unwrap();
    let ProxyListen::Tcp(second_addr) = second.listen else {
        unreachable!("bound on TCP")
    };
    let budget = Budget::usd(1.0);
    let tokens = [
        h.token(budget),
        second_caps.issue(&h.run, &h.session, budget, Duration::from_secs(600)),
    ];
    let bases = [h.base.clone(), format!("http://{second_addr}")];
    let body = with(anthropic_body(true), |b| {
        b["max_tokens"] = json!(MAX_TOKENS)
    });
    let mut calls = Vec::new();
    for i in 0..CALLS {
        let request = h
            .http
            .post(format!("{}/v1/messages", bases[i % 2]))
            .header("x-api-key", tokens[i % 2].expose_secret())
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        calls.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, read_all(response).await)
        }));
    }
    // Every call is either at the provider (held there) or waiting for the budget.
    let run = h.run.as_str().to_owned();
    support::eventually("every call to be sent or waiting", || {
        let forwarded = h.upstream.requests().len();
        let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
        let waiting = logged
            .lines()
            .filter(|l| l.contains("waits: its budget is held") && l.contains(&run))
            .count();
        std::future::ready((forwarded + waiting == CALLS).then_some(()))
    })
    .await;
    let forwarded = h.upstream.requests().len();
    for gate in &gates {
        gate.notify_one();
    }
    let mut answered = Vec::new();
    for call in calls {
        answered.push(
            tokio::time::timeout(WAIT, call)
                .await
                .expect("every call ends")
                .unwrap(),
        );
    }
    let price = PriceTable::default()
        .get(&ModelName::parse("anthropic:claude-sonnet-4-5").unwrap())
        .unwrap();
    let worst = price.worst_case(
        planwright::metering::input_estimate(body.to_string().len(), 0),
        MAX_TOKENS,
    );
    let spent = model_usage::spent_by_run(&h.db.db, &h.run).await.unwrap();
    assert!(
        spent.cost_microusd <= 1_000_000 + worst.cost_microusd,
        "spent {} µUSD against a $1 budget with {forwarded} of {CALLS} calls forwarded; one call's worst case is {}",
        spent.cost_microusd,
        worst.cost_microusd
    );
    let ok = answered.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(ok, h.upstream.requests().len(), "{answered:?}");
    assert!(ok >= 1);
    for (status, text) in &answered {
        if *status != 200 {
            assert_eq!(*status, 402, "{text}");
            assert!(text.contains("has spent its budget"), "{text}");
        }
    }
    // Every hold went with its call.
    let (holds,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM model_holds")
        .fetch_one(&h.db.db.pool)
        .await
        .unwrap();
    assert_eq!(holds, 0);
}

/// Text dressed as an image: a message that starts like a data URL, and image-shaped
/// objects inside a tool's schema and a tool call's input. The provider bills all of it
/// as text, so it must be held as text.
#[tokio::test]
async fn text_dressed_as_images_is_held_at_its_real_worst_case() {
    const CALLS: usize = 10;
    const INPUT_TOKENS: u64 = 190_000;
    let logs = captured_logs();
    let text = "lorem ".repeat(INPUT_TOKENS as usize / 2);
    let disguised = [
        with(anthropic_body(true), |b| {
            b["messages"][0]["content"] = json!(format!("data:image/png;base64,{text}"));
        }),
        with(anthropic_body(true), |b| {
            b["tools"][0]["input_schema"] =
                json!({"type": "object", "media_type": "image/png", "data": text});
        }),
        with(anthropic_body(true), |b| {
            b["messages"] = json!([
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                    "input": {"media_type": "image/png", "data": text}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ]);
        }),
    ]
    .map(|body| with(body, |b| b["max_tokens"] = json!(1)));
    let gates: Vec<Arc<Notify>> = (0..CALLS).map(|_| Arc::new(Notify::new())).collect();
    // Each call is billed what the provider counts: the whole text as input.
    let script = gates
        .iter()
        .map(|gate| {
            Step::text("ok")
                .usage(usage(INPUT_TOKENS, 1, 0, 0))
                .hold_after(1, gate.clone())
        })
        .collect();
    let h = start(script).await;
    let token = h.token(Budget::usd(1.0));
    let mut calls = Vec::new();
    for i in 0..CALLS {
        let request = h.anthropic("/v1/messages", token.expose_secret(), &disguised[i % 3]);
        calls.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, read_all(response).await)
        }));
    }
    let run = h.run.as_str().to_owned();
    // A run has 8 calls in flight at most; the rest wait for a slot before any hold.
    support::eventually("every call in flight to be sent or waiting", || {
        let forwarded = h.upstream.requests().len();
        let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
        let waiting = logged
            .lines()
            .filter(|l| l.contains("waits: its budget is held") && l.contains(&run))
            .count();
        std::future::ready((forwarded + waiting == CALLS.min(8)).then_some(()))
    })
    .await;
    let forwarded = h.upstream.requests().len();
    for gate in &gates {
        gate.notify_one();
    }
    for call in calls {
        let (status, text) = tokio::time::timeout(WAIT, call)
            .await
            .expect("every call ends")
            .unwrap();
        assert!(status == 200 || status == 402, "{status}: {text}");
    }
    let price = PriceTable::default()
        .get(&ModelName::parse("anthropic:claude-sonnet-4-5").unwrap())
        .unwrap();
    let worst = disguised
        .iter()
        .map(|body| {
            let input = planwright::metering::input_estimate(body.to_string().len(), 0);
            price.worst_case(input, 1).cost_microusd
        })
        .max()
        .unwrap();
    let spent = model_usage::spent_by_run(&h.db.db, &h.run).await.unwrap();
    assert!(
        spent.cost_microusd <= 1_000_000 + worst,
        "spent {} µUSD against a $1 budget with {forwarded} of {CALLS} calls forwarded; one call's worst case is {worst}",
        spent.cost_microusd,
    );
}

#[tokio::test]
async fn responses_are_kept_at_the_provider_only_when_the_client_says_so() {
    let h = start(vec![Step::text("ok"), Step::text("ok")]).await;
    let token = h.token(Budget::usd(1.0));
    for body in [
        responses_body(false),
        with(responses_body(false), |b| b["store"] = json!(false)),
    ] {
        let response = h
            .openai("/v1/responses", token.expose_secret(), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", read_all(response).await);
    }
    for sent in h.upstream.requests() {
        assert_eq!(sent.body["store"], json!(false), "{:?}", sent.body);
    }
}

#[tokio::test]
async fn only_known_query_parameters_reach_the_provider() {
    let h = start(vec![Step::text("ok"), Step::text("ok"), Step::text("ok")]).await;
    let token = h.token(Budget::usd(1.0));
    for (path, body) in [
        (
            "/v1/messages?beta=true&container=c1&foo=bar",
            anthropic_body(false),
        ),
        ("/v1/messages?include=web_search", anthropic_body(false)),
        (
            "/v1/chat/completions?api-version=2025&beta=true",
            chat_body(false),
        ),
    ] {
        let request = if path.starts_with("/v1/messages") {
            h.anthropic(path, token.expose_secret(), &body)
        } else {
            h.openai(path, token.expose_secret(), &body)
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{}", read_all(response).await);
    }
    let queries: Vec<Option<String>> = h.upstream.requests().into_iter().map(|r| r.query).collect();
    assert_eq!(queries, [Some("beta=true".to_owned()), None, None]);
}

/// A key given twice: the check reads the last, another parser may read the first. The
/// provider must get the request that was checked, not the client's bytes.
#[tokio::test]
async fn a_key_given_twice_reaches_the_provider_as_it_was_checked() {
    let h = start(vec![Step::text("ok")]).await;
    let token = h.token(Budget::usd(1.0));
    let raw = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{{"role":"user","content":"{QUESTION}"}}],"tools":[{{"type":"web_fetch_20250910","name":"web_fetch"}}],"tools":[{{"name":"read_file","input_schema":{{"type":"object"}}}}]}}"#
    );
    let response = h
        .http
        .post(format!("{}/v1/messages", h.base))
        .header("x-api-key", token.expose_secret())
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", read_all(response).await);
    let sent = &h.upstream.requests()[0];
    let text = String::from_utf8_lossy(&sent.raw);
    assert!(!text.contains("web_fetch"), "{text}");
    assert_eq!(text.matches("\"tools\"").count(), 1, "{text}");
    assert_eq!(sent.body["tools"][0]["name"], "read_file");
}

/// A call may ask for more output than the run's budget can pay: its hold, and what it
/// can overspend, is then bounded by what the budget has left, not by what it asked.
#[tokio::test]
async fn an_output_limit_the_budget_cannot_pay_is_lowered_to_what_it_can() {
    let h = start(vec![
        Step::text("ok").usage(usage(50, 10, 0, 0)),
        Step::text("ok").usage(usage(50, 10, 0, 0)),
    ])
    .await;
    // $0.10 pays for about 6,600 output tokens of Sonnet ($15 a million); the calls ask
    // for 100,000 ($1.50).
    let token = h.token(Budget::usd(0.10));
    let plain = with(anthropic_body(false), |b| b["max_tokens"] = json!(100_000));
    let thinking = with(plain.clone(), |b| {
        b["thinking"] = json!({"type": "enabled", "budget_tokens": 60_000});
    });
    for body in [&plain, &thinking] {
        let response = h
            .anthropic("/v1/messages", token.expose_secret(), body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", read_all(response).await);
    }
    let price = PriceTable::default()
        .get(&ModelName::parse("anthropic:claude-sonnet-4-5").unwrap())
        .unwrap();
    for sent in h.upstream.requests() {
        let max_tokens = sent.body["max_tokens"].as_u64().unwrap();
        let held_output = price.worst_case(0, max_tokens).cost_microusd;
        assert!(
            (2_048..=6_667).contains(&max_tokens) && held_output <= 100_000,
            "forwarded max_tokens {max_tokens}"
        );
        if let Some(budget) = sent.body["thinking"]["budget_tokens"].as_u64() {
            assert!(budget < max_tokens, "{:?}", sent.body);
        }
    }
    // A call the budget can pay for is sent as asked.
    let h = start(vec![Step::text("ok")]).await;
    let token = h.token(Budget::usd(1.0));
    let response = h
        .anthropic(
            "/v1/messages",
            token.expose_secret(),
            &anthropic_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(h.upstream.requests()[0].body["max_tokens"], 1024);
}

#[tokio::test]
async fn a_stream_cut_mid_way_ends_cleanly_and_meters_what_was_seen() {
    let h = start(vec![
        // message_start, ping, content_block_start, one text delta, then the cut.
        Step::text("It starts in main.")
            .usage(usage(400, 99, 40, 4))
            .cut_after(4),
        Step::text("It starts in main.").cut_after(2),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let response = h
        .anthropic("/v1/messages", token.expose_secret(), &anthropic_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stream = read_all(response).await;
    let events = event_data(&stream);
    assert_eq!(events.len(), 5, "{stream}");
    assert_eq!(events[3]["delta"]["type"], "text_delta");
    assert_eq!(events[4]["type"], "error", "{stream}");
    assert!(
        events[4]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cut"),
        "{stream}"
    );

    let response = h
        .openai(
            "/v1/chat/completions",
            token.expose_secret(),
            &chat_body(true),
        )
        .send()
        .await
        .unwrap();
    let stream = read_all(response).await;
    let chunks = event_data(&stream);
    assert_eq!(chunks.len(), 3, "{stream}");
    assert!(chunks[2]["error"]["message"].is_string(), "{stream}");
    assert!(!stream.contains("[DONE]"));

    let rows = h.rows().await;
    assert_eq!(rows.len(), 2);
    // What message_start reported: the input side, and its first output token.
    assert_row(
        &rows[0],
        &h,
        "claude-sonnet-4-5",
        Usage {
            input_tokens: 400,
            output_tokens: 1,
            cache_read_tokens: 40,
            cache_write_tokens: 4,
        },
    );
    // Chat Completions reports usage only at the end: the call is on record, at nothing.
    assert_row(&rows[1], &h, "gpt-5-mini", Usage::default());
}

/// `base` with `change` applied to its JSON.
fn with(base: Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut body = base;
    change(&mut body);
    body
}

const ATTACKER: &str = "https://attacker.example/collect";

#[tokio::test]
async fn provider_side_tools_fields_and_fetches_are_refused_and_nothing_is_forwarded() {
    let h = start(vec![]).await;
    let token = h.token(Budget::usd(1.0));
    let token = token.expose_secret();
    let user = |content: Value| json!([{"role": "user", "content": content}]);
    // (route, body, what the refusal names)
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["mcp_servers"] = json!([{"type": "url", "url": ATTACKER, "name": "x"}]);
            }),
            "`mcp_servers`",
        ),
        (
            "/v1/messages/count_tokens",
            with(anthropic_body(false), |b| {
                b["mcp_servers"] = json!([{"type": "url", "url": ATTACKER, "name": "x"}]);
            }),
            "`mcp_servers`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["container"] = json!("container_011")
            }),
            "`container`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| b["service_tier"] = json!("auto")),
            "`service_tier`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["tools"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"type": "web_fetch_20250910", "name": "web_fetch"}));
            }),
            "`tools[1]` is a `web_fetch_20250910` tool",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["tools"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"type": "web_search_20250305", "name": "web_search"}));
            }),
            "`tools[1]` is a `web_search_20250305` tool",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["tools"][0] =
                    json!({"type": "code_execution_20250825", "name": "code_execution"});
            }),
            "`tools[0]` is a `code_execution_20250825` tool",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["messages"] =
                    user(json!([{"type": "image", "source": {"type": "url", "url": ATTACKER}}]));
            }),
            "`messages[0].content[0].source.type` is `url`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["messages"] = user(
                    json!([{"type": "document", "source": {"type": "file", "file_id": "file_011"}}]),
                );
            }),
            "`messages[0].content[0].source.type` is `file`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["messages"] = user(
                    json!([{"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "image", "source": {"type": "url", "url": ATTACKER}}]}]),
                );
            }),
            "`messages[0].content[0].content[0].source.type` is `url`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["messages"] = json!([
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_fetch", "input": {"url": ATTACKER}}]},
                ]);
            }),
            "`messages[1].content[0].type` is `server_tool_use`",
        ),
        (
            "/v1/chat/completions",
            with(chat_body(false), |b| b["web_search_options"] = json!({})),
            "`web_search_options`",
        ),
        (
            "/v1/chat/completions",
            with(chat_body(false), |b| {
                b["messages"] =
                    user(json!([{"type": "image_url", "image_url": {"url": ATTACKER}}]));
            }),
            "`messages[0].content[0].image_url.url` is not inline data",
        ),
        (
            "/v1/chat/completions",
            with(chat_body(false), |b| {
                b["messages"] = user(json!([{"type": "file", "file": {"file_id": "file-abc"}}]));
            }),
            "`messages[0].content[0].type` is `file`",
        ),
        (
            "/v1/chat/completions",
            with(chat_body(false), |b| b["n"] = json!(8)),
            "`n`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "mcp", "server_label": "x", "server_url": ATTACKER, "require_approval": "never"});
            }),
            "`tools[0]` is a `mcp` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "web_search_preview"})
            }),
            "`tools[0]` is a `web_search_preview` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "web_search"})
            }),
            "`tools[0]` is a `web_search` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "file_search", "vector_store_ids": ["vs_1"]});
            }),
            "`tools[0]` is a `file_search` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "browser"});
            }),
            "`tools[0]` is a `computer_use_preview` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] = json!({"type": "code_interpreter", "container": {"type": "auto"}});
            }),
            "`tools[0]` is a `code_interpreter` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["tools"][0] =
                    json!({"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]});
            }),
            "`tools[0].tools[0]` is a `web_search` tool",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["input"] = user(json!([{"type": "input_image", "image_url": ATTACKER}]));
            }),
            "`input[0].content[0].image_url` is not inline data",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["input"] = user(json!([{"type": "input_image", "file_id": "file-abc"}]));
            }),
            "`input[0].content[0].file_id`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["input"] = user(json!([{"type": "input_file", "file_url": ATTACKER}]));
            }),
            "`input[0].content[0].type` is `input_file`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["input"] = json!([{"type": "item_reference", "id": "msg_1"}]);
            }),
            "`input[0].type` is `item_reference`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["previous_response_id"] = json!("resp_1")
            }),
            "`previous_response_id`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["conversation"] = json!("conv_1")
            }),
            "`conversation`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["prompt"] = json!({"id": "pmpt_1"})
            }),
            "`prompt`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| b["background"] = json!(true)),
            "`background`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| b["store"] = json!(true)),
            "`store`",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["include"] = json!(["web_search_call.action.sources"]);
            }),
            "`include[0]`",
        ),
        (
            "/v1/messages",
            with(anthropic_body(false), |b| {
                b["max_tokens"] = json!(1_000_000)
            }),
            "`max_tokens` is 1000000",
        ),
        (
            "/v1/responses",
            with(responses_body(false), |b| {
                b["max_output_tokens"] = json!("lots")
            }),
            "`max_output_tokens` must be a whole number",
        ),
    ];
    for (path, body, named) in &cases {
        let request = if path.starts_with("/v1/messages") {
            h.anthropic(path, token, body)
        } else {
            h.openai(path, token, body)
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 400, "{path}: {named}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        if path.starts_with("/v1/messages") {
            assert_eq!(answer["type"], "error", "{answer}");
        }
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Cannot forward the request") && message.contains(named),
            "{path}: expected {named} in {message}"
        );
    }
    // Betas that switch on provider-side reach are refused, named.
    for beta in [
        "mcp-client-2025-04-04",
        "files-api-2025-04-14",
        "code-execution-2025-08-25",
        "web-fetch-2025-09-10",
    ] {
        let response = h
            .anthropic("/v1/messages", token, &anthropic_body(false))
            .header("anthropic-beta", format!("claude-code-20250219,{beta}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{beta}");
        let answer: Value = response.json().await.unwrap();
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(beta), "{message}");
    }
    assert!(
        h.upstream.requests().is_empty(),
        "a refused request was forwarded: {:?}",
        h.upstream
            .requests()
            .iter()
            .map(|r| &r.body)
            .collect::<Vec<_>>()
    );
    assert!(h.rows().await.is_empty());
}

#[tokio::test]
async fn what_the_agents_send_passes_and_unknown_betas_are_dropped() {
    let h = start(vec![
        Step::text("seen").usage(usage(10, 5, 0, 0)),
        Step::text("seen too").usage(usage(10, 5, 0, 0)),
        Step::text("and this").usage(usage(10, 5, 0, 0)),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let token = token.expose_secret();
    let png = "iVBORw0KGgo=";
    // Claude Code: thinking, cached system blocks, tool use and results with an image,
    // a PDF as data, context management.
    let claude = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": false,
        "metadata": {"user_id": "{\"session_id\":\"s\"}"},
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "updates"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "system": [{"type": "text", "text": "You are Claude Code."},
                   {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": QUESTION, "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look at main.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "cmVk"},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/repo/a.png"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": false, "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                    {"type": "text", "text": "an image"}]},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]},
        ],
    });
    let response = h
        .anthropic("/v1/messages", token, &claude)
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14,some-future-beta-2027-01-01",
        )
        .header("openai-beta", "assistants=v2")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // Codex: developer and user messages, reasoning, function calls and their output
    // with an image as data, a namespace of functions.
    let codex = json!({
        "model": "gpt-5",
        "stream": false,
        "store": false,
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "client_metadata": {"session_id": "s"},
        "instructions": "You are Codex.",
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Run", "parameters": {"type": "object"}, "strict": false},
            {"type": "custom", "name": "apply_patch", "description": "Patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Agents", "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}, "strict": false}]},
        ],
        "input": [
            {"type": "message", "role": "developer", "id": "msg_0", "content": [{"type": "input_text", "text": "Rules."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}], "encrypted_content": "ZW5j"},
            {"type": "function_call", "id": "fc_0", "call_id": "call_1", "name": "exec_command", "arguments": "{}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_text", "text": "done"},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{png}")}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]},
        ],
    });
    let response = h
        .openai("/v1/responses", token, &codex)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    // planwright's own client, as the builtin executor sends it.
    let chat = with(chat_body(true), |b| {
        b["max_completion_tokens"] = json!(4096);
        b["stream_options"] = json!({"include_usage": true});
        b["messages"] = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}"), "detail": "low"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"},
        ]);
    });
    let response = h
        .openai("/v1/chat/completions", token, &chat)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    read_all(response).await;

    let requests = h.upstream.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].body, claude);
    assert_eq!(
        requests[0].header("anthropic-beta"),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14")
    );
    assert_eq!(requests[0].header("openai-beta"), None);
    // A call without an output limit is given one, so its worst case is known.
    assert_eq!(requests[1].body["max_output_tokens"], 32000);
    assert_eq!(requests[1].body["input"], codex["input"]);
    assert_eq!(requests[1].body["tools"], codex["tools"]);
}

#[tokio::test]
async fn counting_tokens_is_capped_per_run() {
    let h = start(vec![]).await;
    let token = h.token(Budget::usd(1.0));
    let count = || {
        h.anthropic(
            "/v1/messages/count_tokens",
            token.expose_secret(),
            &anthropic_body(false),
        )
        .send()
    };
    for _ in 0..200 {
        assert_eq!(count().await.unwrap().status(), 200);
    }
    let response = count().await.unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("200 count_tokens calls"), "{message}");
    assert_eq!(h.upstream.requests().len(), 200);
    // Another run counts on its own.
    let other = h.caps.issue(
        &RunId::generate(),
        &h.session,
        Budget::usd(1.0),
        Duration::from_secs(60),
    );
    let response = h
        .anthropic(
            "/v1/messages/count_tokens",
            other.expose_secret(),
            &anthropic_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn provider_errors_pass_back_as_they_are() {
    let h = start(vec![
        Step::error(529, "Overloaded", Some(7)),
        Step::error(400, "messages: field required", None),
    ])
    .await;
    let token = h.token(Budget::usd(1.0));
    let response = h
        .anthropic("/v1/messages", token.expose_secret(), &anthropic_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 529);
    assert_eq!(response.headers()["retry-after"], "7");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "Overloaded");
    let response = h
        .openai(
            "/v1/responses",
            token.expose_secret(),
            &responses_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "messages: field required");
    assert!(
        h.rows().await.is_empty(),
        "an error without usage was metered"
    );
}

#[tokio::test]
async fn unpriced_models_are_refused_before_anything_is_sent() {
    let h = start(vec![Step::text("unused")]).await;
    let token = h.token(Budget::usd(1.0));
    let mut body = chat_body(false);
    body["model"] = json!("mystery-model");
    let response = h
        .openai("/v1/chat/completions", token.expose_secret(), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("openai:mystery-model") && message.contains("MODEL_PRICES"),
        "{message}"
    );
    assert!(h.upstream.requests().is_empty());
}

/// One HTTP/1.1 exchange over a Unix socket, as the sandbox's relay makes it.
async fn over_socket(socket: &Path, path: &str, token: &str, body: &Value) -> String {
    let mut stream = planwright::unix_socket::connect(socket).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: planwright\r\nx-api-key: {token}\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
        .await
        .expect("the proxy answered and closed")
        .unwrap();
    String::from_utf8(answer).unwrap()
}

#[tokio::test]
async fn the_proxy_serves_over_a_unix_socket() {
    let h = start_on(
        vec![
            Step::text("over the socket").usage(usage(11, 3, 0, 0)),
            Step::text("streamed over the socket"),
        ],
        |dir| ProxyListen::Unix(dir.join("proxy.sock")),
    )
    .await;
    let socket = h.db.dir.path().join("proxy.sock");
    assert_eq!(h.base, format!("unix:{}", socket.display()));
    let token = h.token(Budget::usd(1.0));
    let answer = over_socket(
        &socket,
        "/v1/messages",
        token.expose_secret(),
        &anthropic_body(false),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("over the socket"), "{answer}");
    let answer = over_socket(
        &socket,
        "/v1/messages",
        token.expose_secret(),
        &anthropic_body(true),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("text/event-stream"), "{answer}");
    assert!(answer.contains("event: message_stop"), "{answer}");
    let answer = over_socket(
        &socket,
        "/v1/messages",
        "pwcap_forged.x",
        &anthropic_body(false),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert_eq!(h.rows().await.len(), 2);
    assert_eq!(h.upstream.requests().len(), 2);
}

/// Sends the head of a request declaring `length` bytes of body and only `sent` of them,
/// then reads the answer: one that arrives means the proxy decided without the rest.
async fn answer_to_a_partial_body(
    base: &str,
    token: Option<&str>,
    length: usize,
    sent: usize,
) -> String {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or(String::new(), |t| format!("x-api-key: {t}\r\n"));
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: planwright\r\n{auth}anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; sent]).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, stream.read(&mut answer))
        .await
        .expect("the proxy answered before the body was complete")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn a_body_without_a_token_is_refused_unread_and_an_oversized_one_is_refused() {
    let h = start(vec![]).await;
    // No token, a body of 20 MB of which 1 MB is sent: the refusal comes first.
    let answer = answer_to_a_partial_body(&h.base, None, 20 << 20, 1 << 20).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("without a capability token"), "{answer}");
    let answer = answer_to_a_partial_body(&h.base, Some("pwcap_forged.x"), 20 << 20, 1 << 20).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // With a token, a body declared past the limit is refused before it is read.
    let token = h.token(Budget::usd(1.0));
    let answer =
        answer_to_a_partial_body(&h.base, Some(token.expose_secret()), 64 << 20, 1 << 20).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("limit of 32 MB"), "{answer}");
    // Sent without a length (chunked), it is cut off at the limit as it arrives.
    let addr = h.base.strip_prefix("http://").unwrap().to_owned();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: planwright\r\nx-api-key: {}\r\ntransfer-encoding: chunked\r\n\r\n",
        token.expose_secret()
    );
    let sender = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let chunk = format!("100000\r\n{}\r\n", " ".repeat(1 << 20));
        for _ in 0..40 {
            write.write_all(chunk.as_bytes()).await?;
        }
        std::io::Result::Ok(())
    });
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, read.read(&mut answer))
        .await
        .expect("the proxy answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("request_too_large"), "{answer}");
    sender.abort();
    assert!(
        h.upstream.requests().is_empty(),
        "a refused call was forwarded"
    );
    assert!(h.rows().await.is_empty());
}

#[tokio::test]
async fn the_socket_is_open_to_sandboxes_only() {
    use std::os::unix::fs::MetadataExt;
    let h = start_on(vec![], |dir| ProxyListen::Unix(dir.join("proxy.sock"))).await;
    let meta = std::fs::metadata(h.db.dir.path().join("proxy.sock")).unwrap();
    assert_eq!(
        meta.mode() & 0o007,
        0,
        "other users may connect: {:o}",
        meta.mode()
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // As root, sandboxes run as an unprivileged user whose group gets the socket.
        let (_, gid) = planwright::sandbox::Bwrap::DEFAULT_HOST_USER;
        assert_eq!(meta.gid(), gid);
        assert_eq!(meta.mode() & 0o777, 0o660);
    } else {
        assert_eq!(meta.mode() & 0o777, 0o600);
    }
}

#[tokio::test]
async fn serve_runs_the_proxy_where_executors_run() {
    let db = TestDb::new().await;
    let upstream = ModelServer::start(vec![Step::text("served").usage(usage(5, 2, 0, 0))]).await;
    let socket = db.dir.path().join("executors.sock");
    let socket_text = socket.display().to_string();
    let anthropic_base = upstream.anthropic_base();
    let settings = support::settings(
        &db,
        &[
            ("PLANWRIGHT_MODEL_PROXY_SOCKET", socket_text.as_str()),
            ("PLANWRIGHT_ANTHROPIC_API_KEY", ANTHROPIC_KEY),
            ("PLANWRIGHT_ANTHROPIC_BASE_URL", anthropic_base.as_str()),
        ],
    );
    let server =
        TestServer::start(settings, Role::All, planwright::session::dispatch::handler).await;
    let proxy = server.model_proxy().expect("serve runs the model proxy");
    assert_eq!(proxy.listen, ProxyListen::Unix(socket.clone()));
    let (run, session) = (RunId::generate(), SessionId::generate());
    let token = proxy
        .capabilities
        .issue(&run, &session, Budget::usd(1.0), Duration::from_secs(60));
    let answer = over_socket(
        &socket,
        "/v1/messages",
        token.expose_secret(),
        &anthropic_body(false),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let spent = model_usage::spent_by_run(&server.db, &run).await.unwrap();
    assert_eq!(spent.tokens, 7);
    assert_eq!(
        upstream.requests()[0].header("x-api-key"),
        Some(ANTHROPIC_KEY)
    );
    server.stop().await;
    assert!(!socket.exists(), "the socket outlived the server");

    // A web-only process runs no executors, so no proxy.
    let web_db = TestDb::new().await;
    let web = TestServer::web(&web_db).await;
    assert!(web.model_proxy().is_none());
    web.stop().await;
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything logged in this test process, at every level.
fn captured_logs() -> Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        logs
    })
    .clone()
}

#[tokio::test]
async fn no_key_token_or_prompt_reaches_the_logs() {
    let logs = captured_logs();
    let h = start(vec![
        Step::text("fine"),
        // Within the request's 1024 output tokens, past the $0.05 budget.
        Step::text("streamed").usage(usage(15_000, 1_000, 0, 0)),
        Step::text("cut").cut_after(3),
    ])
    .await;
    let token = h.token(Budget::usd(0.05));
    let token = token.expose_secret();
    let forged = Capabilities::generate().issue(
        &h.run,
        &h.session,
        Budget::usd(1.0),
        Duration::from_secs(60),
    );
    let response = h
        .openai("/v1/chat/completions", token, &chat_body(false))
        .header("x-api-key", CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = h
        .anthropic(
            "/v1/messages",
            forged.expose_secret(),
            &anthropic_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let stream = read_all(
        h.anthropic("/v1/messages", token, &anthropic_body(true))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(stream.contains("message_stop"));
    let response = h
        .openai("/v1/responses", token, &responses_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let text = {
        let bytes = logs.0.lock().unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    assert!(text.contains("proxied model call"), "{text}");
    assert!(text.contains("refused"), "{text}");
    for secret in [
        ANTHROPIC_KEY,
        OPENAI_KEY,
        CLIENT_KEY,
        token,
        forged.expose_secret(),
        QUESTION,
    ] {
        assert!(!text.contains(secret), "the logs hold a secret or a prompt");
    }
    // The token's signature alone must not be there either.
    let signature = token.rsplit('.').next().unwrap();
    assert!(!text.contains(signature));
}

/// A rung's token calls its own model only: an executor on a cheap rung cannot buy a
/// dearer model's answer through the proxy and have it credited to the cheap rung.
#[tokio::test]
async fn a_rungs_token_is_refused_another_model() {
    let h = start(vec![Step::text("Fine.")]).await;
    let token = h.caps.issue_for(
        &h.run,
        &h.session,
        Budget::usd(1.0),
        Duration::from_secs(600),
        &["claude-haiku-4-5".to_owned()],
    );
    let response = h
        .anthropic(
            "/v1/messages",
            token.expose_secret(),
            &anthropic_body(false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("claude-sonnet-4-5") && message.contains("only claude-haiku-4-5"),
        "{message}"
    );
    assert!(h.upstream.requests().is_empty());
    let mut own = anthropic_body(false);
    own["model"] = json!("claude-haiku-4-5");
    let response = h
        .anthropic("/v1/messages", token.expose_secret(), &own)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(h.upstream.requests().len(), 1);
}
