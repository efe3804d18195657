//! The model layer against the scripted model server: both real clients over HTTP (tool
//! round trips, retries, errors), and the metered model's accounting and budgets against
//! the real database (SQLite, or PostgreSQL when PLANWRIGHT_TEST_DATABASE_URL is set).

mod support;

use std::sync::Arc;
use std::time::Duration;

use planwright::config::ModelSettings;
use planwright::ids::{RunId, SessionId};
use planwright::llm::usage::{Budget, Metered, ModelRole, PriceTable};
use planwright::llm::{
    ChatModel, ChatRequest, ContentBlock, HttpOptions, Message, ModelError, ModelName, RetryPolicy,
    Role, StopReason, Tool,
};
use planwright::store::model_usage;
use secrecy::SecretString;
use serde_json::json;
use support::TestDb;
use support::model_server::{ModelServer, Recorded, ScriptUsage, Step};

const ANTHROPIC_KEY: &str = "sk-ant-test-key-0123456789";
const OPENAI_KEY: &str = "sk-openai-test-key-9876543210";
const SYSTEM: &str = "You are the planner. Answer from the files you read.";

fn settings(server: &ModelServer) -> ModelSettings {
    ModelSettings {
        anthropic_api_key: Some(SecretString::from(ANTHROPIC_KEY)),
        anthropic_base_url: server.anthropic_base(),
        openai_api_key: Some(SecretString::from(OPENAI_KEY)),
        openai_base_url: server.openai_base(),
        planner: None,
        scout: None,
        executor: None,
        prices: PriceTable::default(),
    }
}

/// Quick retries, so tests that retry take milliseconds.
fn options() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
        },
    }
}

fn model(server: &ModelServer, name: &str, options: &HttpOptions) -> Arc<dyn ChatModel> {
    planwright::llm::client(&ModelName::parse(name).unwrap(), &settings(server), options).unwrap()
}

fn read_file_tool() -> Tool {
    Tool {
        name: "read_file".into(),
        description: "Read lines of a file in the repository".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
            },
            "required": ["path"],
        }),
    }
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        system: SYSTEM.into(),
        messages,
        tools: vec![read_file_tool()],
        max_tokens: 1024,
        temperature: Some(0.0),
    }
}

/// The script both providers' round trips run: a tool call, then an answer that needs
/// the tool's result.
fn round_trip_script() -> Vec<Step> {
    vec![
        Step::tool_call("call_1", "read_file", json!({"path": "src/main.rs"}))
            .when_tools(&["read_file"])
            .when_last_contains("Where does the program start?"),
        Step::text("It starts in `main` in src/main.rs.").when_last_contains("fn main()"),
    ]
}

/// Runs the two-turn conversation and returns the final answer.
async fn converse(model: &dyn ChatModel) -> String {
    let mut messages = vec![Message::user("Where does the program start?")];
    let first = model.chat(&request(messages.clone())).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    let [ContentBlock::ToolUse { id, name, input }] = first.content.as_slice() else {
        panic!("expected one tool call, got {:?}", first.content);
    };
    assert_eq!((id.as_str(), name.as_str()), ("call_1", "read_file"));
    assert_eq!(input, &json!({"path": "src/main.rs"}));
    messages.push(Message {
        role: Role::Assistant,
        content: first.content.clone(),
    });
    messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: id.clone(),
            content: "1: fn main() {".into(),
            is_error: false,
        }],
    });
    let second = model.chat(&request(messages)).await.unwrap();
    assert_eq!(second.stop_reason, StopReason::EndTurn);
    second.text()
}

/// The key travels in its header only: no other header or body field carries it.
fn assert_key_only_in(request: &Recorded, header: &str, key: &str) {
    for (name, value) in &request.headers {
        if name != header {
            assert!(!value.contains(key), "the key leaked into header {name}");
        }
    }
    assert!(
        !request.body.to_string().contains(key),
        "the key is in the body"
    );
}

#[tokio::test]
async fn anthropic_round_trips_a_tool_call_with_a_cached_prefix() {
    let server = ModelServer::start(round_trip_script()).await;
    let model = model(&server, "anthropic:claude-sonnet-4-5", &options());
    assert!(!format!("{model:?}").contains(ANTHROPIC_KEY));
    assert_eq!(
        converse(model.as_ref()).await,
        "It starts in `main` in src/main.rs."
    );

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("x-api-key"), Some(ANTHROPIC_KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.header("authorization"), None);
        assert_key_only_in(r, "x-api-key", ANTHROPIC_KEY);
        assert_eq!(r.body["model"], "claude-sonnet-4-5");
        assert_eq!(r.body["max_tokens"], 1024);
        assert_eq!(
            r.body["system"],
            json!([{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            r.body["tools"],
            json!([{
                "name": "read_file",
                "description": "Read lines of a file in the repository",
                "input_schema": read_file_tool().input_schema,
            }])
        );
    }
    let messages = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "src/main.rs"}}
        ]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "1: fn main() {", "is_error": false}
        ]})
    );
    assert_eq!(server.unused_steps(), 0);
}

#[tokio::test]
async fn openai_round_trips_a_tool_call_with_tool_messages() {
    let server = ModelServer::start(round_trip_script()).await;
    let model = model(&server, "openai:gpt-5", &options());
    assert!(!format!("{model:?}").contains(OPENAI_KEY));
    assert_eq!(
        converse(model.as_ref()).await,
        "It starts in `main` in src/main.rs."
    );

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {OPENAI_KEY}").as_str())
        );
        assert_eq!(r.header("x-api-key"), None);
        assert_key_only_in(r, "authorization", OPENAI_KEY);
        assert_eq!(r.body["model"], "gpt-5");
        assert_eq!(r.body["max_completion_tokens"], 1024);
        assert_eq!(
            r.body["messages"][0],
            json!({"role": "system", "content": SYSTEM})
        );
        assert_eq!(
            r.body["tools"],
            json!([{"type": "function", "function": {
                "name": "read_file",
                "description": "Read lines of a file in the repository",
                "parameters": read_file_tool().input_schema,
            }}])
        );
    }
    let messages = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    let call = &messages[2]["tool_calls"][0];
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(call["id"], "call_1");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "read_file");
    // Arguments travel as a JSON string.
    let arguments: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"path": "src/main.rs"}));
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "1: fn main() {"})
    );
    assert_eq!(server.unused_steps(), 0);
}

#[tokio::test]
async fn malformed_tool_arguments_reach_the_caller_as_raw_text() {
    let server = ModelServer::start(vec![Step::tool_call(
        "call_9",
        "read_file",
        json!("{\"path\": \"src/ma"),
    )])
    .await;
    let model = model(&server, "openai:gpt-5", &options());
    let answer = model
        .chat(&request(vec![Message::user("Read it")]))
        .await
        .unwrap();
    assert_eq!(
        answer.content,
        vec![ContentBlock::ToolUse {
            id: "call_9".into(),
            name: "read_file".into(),
            input: json!("{\"path\": \"src/ma"),
        }]
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_time_the_provider_asks() {
    let server = ModelServer::start(vec![
        Step::error(429, "rate limited", Some(0)),
        Step::text("done"),
    ])
    .await;
    // A backoff far beyond the test's deadline: only honouring `retry-after: 0` finishes.
    let mut slow = options();
    slow.retry.base_delay = Duration::from_secs(300);
    slow.retry.max_delay = Duration::from_secs(300);
    let model = model(&server, "anthropic:claude-haiku-4-5", &slow);
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        model.chat(&request(vec![Message::user("hello")])),
    )
    .await
    .expect("the retry waited for retry-after, not the backoff")
    .unwrap();
    assert_eq!(answer.text(), "done");
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.requests()[0].body, server.requests()[1].body);
}

#[tokio::test]
async fn server_errors_are_retried_until_the_attempts_run_out() {
    let server = ModelServer::start(vec![
        Step::error(500, "internal", None),
        Step::error(503, "unavailable", None),
        Step::text("third time"),
    ])
    .await;
    let model = model(&server, "openai:gpt-5", &options());
    let answer = model
        .chat(&request(vec![Message::user("hello")]))
        .await
        .unwrap();
    assert_eq!(answer.text(), "third time");
    assert_eq!(server.requests().len(), 3);

    // Three attempts allowed, three failures: the last error is returned, still marked
    // retryable so the job queue may try later.
    let server = ModelServer::start(vec![
        Step::error(500, "internal", None),
        Step::error(529, "overloaded", None),
        Step::error(502, "bad gateway", None),
        Step::text("never reached"),
    ])
    .await;
    let model = self::model(&server, "anthropic:claude-sonnet-4-5", &options());
    let err = model
        .chat(&request(vec![Message::user("hello")]))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("bad gateway"), "{err}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.unused_steps(), 1);
}

#[tokio::test]
async fn a_400_is_not_retried_and_its_message_is_surfaced_without_the_key() {
    for (name, key) in [
        ("anthropic:claude-sonnet-4-5", ANTHROPIC_KEY),
        ("openai:gpt-5", OPENAI_KEY),
    ] {
        let message = format!("max_tokens: too large for this model (key {key})");
        let server = ModelServer::start(vec![
            Step::error(400, &message, None),
            Step::text("never reached"),
        ])
        .await;
        let model = model(&server, name, &options());
        let err = model
            .chat(&request(vec![Message::user("hello")]))
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err}");
        assert!(
            matches!(err, ModelError::Status { status: 400, .. }),
            "{err:?}"
        );
        let text = format!("{err} {err:?}");
        assert!(
            text.contains("max_tokens: too large for this model"),
            "{text}"
        );
        assert!(!text.contains(key), "{text}");
        assert_eq!(server.requests().len(), 1, "{name}");
    }
}

#[tokio::test]
async fn usage_is_recorded_per_call_with_its_cost() {
    let t = TestDb::new().await;
    let usage = ScriptUsage {
        input: 1000,
        output: 500,
        cache_read: 2000,
        cache_write: 100,
    };
    let server = ModelServer::start(vec![
        Step::text("one").usage(usage),
        Step::text("two").usage(usage),
    ])
    .await;
    let session = SessionId::generate();
    let run = RunId::generate();
    for name in ["anthropic:claude-sonnet-4-5", "openai:gpt-5"] {
        let metered = Metered::new(
            model(&server, name, &options()),
            &PriceTable::default(),
            t.db.clone(),
            ModelRole::Scout,
        )
        .unwrap()
        .for_session(session.clone(), Budget::usd(5.0))
        .for_run(run.clone(), Budget::default());
        metered
            .chat(&request(vec![Message::user("hello")]))
            .await
            .unwrap();
    }
    let rows = model_usage::list_by_session(&t.db, &session).await.unwrap();
    assert_eq!(rows.len(), 2);
    let sonnet = &rows[0];
    assert_eq!(
        (
            sonnet.provider.as_str(),
            sonnet.model.as_str(),
            sonnet.role.as_str()
        ),
        ("anthropic", "claude-sonnet-4-5", "scout")
    );
    assert_eq!(sonnet.run_id.as_deref(), Some(run.as_str()));
    assert_eq!(
        (
            sonnet.input_tokens,
            sonnet.output_tokens,
            sonnet.cache_read_tokens,
            sonnet.cache_write_tokens
        ),
        (1000, 500, 2000, 100)
    );
    // $3 / $15 / $0.30 / $3.75 per million tokens.
    assert_eq!(sonnet.cost_microusd, 3000 + 7500 + 600 + 375);
    // OpenAI reports cached tokens inside prompt_tokens; they are priced apart.
    let gpt = &rows[1];
    assert_eq!(
        (gpt.provider.as_str(), gpt.model.as_str()),
        ("openai", "gpt-5")
    );
    assert_eq!(
        (
            gpt.input_tokens,
            gpt.output_tokens,
            gpt.cache_read_tokens,
            gpt.cache_write_tokens
        ),
        (1000, 500, 2000, 0)
    );
    assert_eq!(gpt.cost_microusd, 1250 + 5000 + 250);
    let spent = model_usage::spent_by_run(&t.db, &run).await.unwrap();
    assert_eq!(spent.cost_microusd, 11_475 + 6_500);
    assert_eq!(spent.tokens, 3600 + 3500);
}

#[tokio::test]
async fn a_call_past_the_budget_is_refused_before_anything_is_sent() {
    let t = TestDb::new().await;
    let server = ModelServer::start(vec![
        Step::text("first").usage(ScriptUsage {
            input: 4000,
            output: 0,
            ..ScriptUsage::default()
        }),
        Step::text("never reached"),
    ])
    .await;
    let session = SessionId::generate();
    // $0.01 of Sonnet input is 3334 tokens: the first call starts under it and ends over.
    let metered = Metered::new(
        model(&server, "anthropic:claude-sonnet-4-5", &options()),
        &PriceTable::default(),
        t.db.clone(),
        ModelRole::Planner,
    )
    .unwrap()
    .for_session(session.clone(), Budget::usd(0.01));
    metered
        .chat(&request(vec![Message::user("hello")]))
        .await
        .unwrap();
    let err = metered
        .chat(&request(vec![Message::user("again")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::BudgetExceeded { .. }), "{err:?}");
    assert!(!err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains(session.as_str()) && text.contains("$0.0120") && text.contains("$0.0100"),
        "{text}"
    );
    assert_eq!(server.requests().len(), 1);

    // A run with a token budget of zero never sends its first call.
    let run_model = Metered::new(
        model(&server, "anthropic:claude-sonnet-4-5", &options()),
        &PriceTable::default(),
        t.db.clone(),
        ModelRole::Executor,
    )
    .unwrap()
    .for_run(RunId::generate(), Budget::tokens(0));
    let err = run_model
        .chat(&request(vec![Message::user("go")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0 tokens"), "{err}");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        model_usage::list_by_session(&t.db, &session)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn models_without_a_price_or_a_key_are_refused_up_front() {
    let server = ModelServer::start(Vec::new()).await;
    let t = TestDb::new().await;
    let unpriced = model(&server, "openai:llama-local", &options());
    let err = Metered::new(
        unpriced,
        &PriceTable::default(),
        t.db.clone(),
        ModelRole::Scout,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("openai:llama-local") && err.contains("MODEL_PRICES"),
        "{err}"
    );
    let mut no_key = settings(&server);
    no_key.anthropic_api_key = None;
    let err = planwright::llm::client(
        &ModelName::parse("anthropic:claude-sonnet-4-5").unwrap(),
        &no_key,
        &options(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    assert!(server.requests().is_empty());
}
