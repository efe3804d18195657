//! The model layer against the scripted model server: both real clients over HTTP (tool
//! round trips, retries, errors; answers whole and streamed, streams cut mid-way), and
//! the metered model's accounting and budgets against
//! the real database (SQLite, or PostgreSQL when PLANWRIGHT_TEST_DATABASE_URL is set).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use planwright::config::ModelSettings;
use planwright::config::prices::PriceTable;
use planwright::ids::ModelName;
use planwright::ids::{RunId, SessionId};
use planwright::llm::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, FinishReason, HttpOptions, Message,
    ModelError, ModelRetry, Role, Tool, Usage,
};
use planwright::metering::{Metered, ModelRole};
use planwright::store::model_usage;
use planwright::store::model_usage::Budget;
use secrecy::SecretString;
use serde_json::json;
use support::TestDb;
use support::model_server::{ModelServer, Recorded, Reply, ScriptUsage, Step};

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
        retry: ModelRetry {
            max_attempts: 3,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
        },
        ..HttpOptions::default()
    }
}

/// The same, with answers streamed.
fn streaming() -> HttpOptions {
    HttpOptions {
        stream: true,
        idle_timeout: Duration::from_secs(20),
        ..options()
    }
}

const PROVIDERS: [&str; 2] = ["anthropic:claude-sonnet-4-5", "openai:gpt-5"];

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
    assert_eq!(first.stop_reason, FinishReason::ToolUse);
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
    assert_eq!(second.stop_reason, FinishReason::EndTurn);
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

/// Plays a tool conversation to its end, answering every tool call with the first line
/// of the file, and returns each answer.
async fn play(model: &dyn ChatModel, question: &str) -> Vec<ChatResponse> {
    let mut messages = vec![Message::user(question)];
    let mut answers = Vec::new();
    loop {
        let answer = model.chat(&request(messages.clone())).await.unwrap();
        answers.push(answer.clone());
        if answer.stop_reason != FinishReason::ToolUse {
            return answers;
        }
        assert!(answers.len() < 5, "the conversation does not end");
        let results = answer
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolUse { id, .. } => Some(ContentBlock::ToolResult {
                    tool_use_id: id.clone(),
                    content: format!("1: fn main() {{ // {id}"),
                    is_error: false,
                }),
                _ => None,
            })
            .collect();
        messages.push(Message {
            role: Role::Assistant,
            content: answer.content,
        });
        messages.push(Message {
            role: Role::User,
            content: results,
        });
    }
}

/// Two parallel tool calls, one of them with arguments that are not JSON, then a
/// second call, then an answer; every turn with its own usage, cache tokens included.
fn conversation_script() -> Vec<Step> {
    let usage = |n: u64| ScriptUsage {
        input: 100 * n,
        output: 10 * n + 3,
        cache_read: 2000 + n,
        cache_write: 50 * n,
    };
    vec![
        Step::reply(Reply::ToolCalls(vec![
            (
                "call_1".into(),
                "read_file".into(),
                json!({"path": "src/main.rs", "start_line": 1, "end_line": 40}),
            ),
            (
                "call_2".into(),
                "read_file".into(),
                json!("{\"path\": \"src/li"),
            ),
        ]))
        .when_tools(&["read_file"])
        .when_last_contains("Where does the program start?")
        .usage(usage(1)),
        Step::tool_call("call_3", "read_file", json!({"path": "src/cli.rs"}))
            .when_last_contains("// call_2")
            .usage(usage(2)),
        Step::text("It starts in `main` — src/main.rs, line 1. «Fertig».")
            .when_last_contains("// call_3")
            .usage(usage(3)),
    ]
}

#[tokio::test]
async fn a_streamed_tool_conversation_equals_the_whole_one_on_both_providers() {
    for name in PROVIDERS {
        let whole_server = ModelServer::start(conversation_script()).await;
        let whole = play(
            model(&whole_server, name, &options()).as_ref(),
            "Where does the program start?",
        )
        .await;
        let streamed_server = ModelServer::start(conversation_script()).await;
        let streamed = play(
            model(&streamed_server, name, &streaming()).as_ref(),
            "Where does the program start?",
        )
        .await;

        assert_eq!(streamed, whole, "{name}");
        assert_eq!(whole.len(), 3, "{name}");
        assert_eq!(
            whole[0].content[1],
            ContentBlock::ToolUse {
                id: "call_2".into(),
                name: "read_file".into(),
                input: json!("{\"path\": \"src/li"),
            },
            "{name}: malformed arguments stay raw text"
        );
        assert_eq!(
            whole[2].text(),
            "It starts in `main` — src/main.rs, line 1. «Fertig».",
            "{name}"
        );
        // The scripted counts, as each provider reports them.
        let cache_write = if name.starts_with("anthropic") {
            150
        } else {
            0
        };
        assert_eq!(
            whole[2].usage,
            Usage {
                input_tokens: 300,
                output_tokens: 33,
                cache_read_tokens: 2003,
                cache_write_tokens: cache_write,
            },
            "{name}"
        );
        assert_eq!(whole_server.unused_steps(), 0, "{name}");
        assert_eq!(streamed_server.unused_steps(), 0, "{name}");

        // The streamed requests differ from the whole ones only in asking for a stream.
        let (whole_sent, streamed_sent) = (whole_server.requests(), streamed_server.requests());
        assert_eq!(streamed_sent.len(), 3, "{name}");
        for (w, s) in whole_sent.iter().zip(&streamed_sent) {
            let mut s = s.body.clone();
            let asked = s.as_object_mut().unwrap();
            assert_eq!(asked.remove("stream"), Some(json!(true)), "{name}");
            if name.starts_with("openai") {
                assert_eq!(
                    asked.remove("stream_options"),
                    Some(json!({"include_usage": true})),
                    "{name}"
                );
            }
            assert_eq!(s, w.body, "{name}");
            assert_eq!(w.body.get("stream"), None, "{name}");
        }
    }
}

#[tokio::test]
async fn streamed_text_in_many_small_deltas_is_joined() {
    let text = "Plan: read src/main.rs, then src/lib.rs; change `parse` — «done» ✓. ".repeat(12);
    for name in PROVIDERS {
        let server =
            ModelServer::start(vec![Step::text(&text).in_pieces(text.chars().count())]).await;
        let answer = model(&server, name, &streaming())
            .chat(&request(vec![Message::user("Plan it")]))
            .await
            .unwrap();
        assert_eq!(
            answer.content,
            vec![ContentBlock::Text(text.clone())],
            "{name}"
        );
        assert_eq!(answer.stop_reason, FinishReason::EndTurn, "{name}");
        assert_eq!(
            (answer.usage.input_tokens, answer.usage.output_tokens),
            (10, 5),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_cut_stream_is_retried_and_the_cut_attempts_tokens_are_recorded() {
    let t = TestDb::new().await;
    let first = ScriptUsage {
        input: 700,
        output: 90,
        cache_read: 4000,
        cache_write: 300,
    };
    let second = ScriptUsage {
        input: 800,
        output: 60,
        cache_read: 4100,
        cache_write: 0,
    };
    for name in PROVIDERS {
        // Cut after message_start, ping and the text block's start (Anthropic), or after
        // the role chunk and both halves of the text (OpenAI): before the end either way.
        let server = ModelServer::start(vec![
            Step::text("the first try").usage(first).cut_after(3),
            Step::text("the second try").usage(second),
        ])
        .await;
        let session = SessionId::generate();
        let metered = Metered::new(
            model(&server, name, &streaming()),
            &PriceTable::default(),
            t.db.clone(),
            ModelRole::Planner,
        )
        .unwrap()
        .for_session(session.clone(), Budget::usd(5.0));
        let answer = metered
            .chat(&request(vec![Message::user("hello")]))
            .await
            .unwrap();
        assert_eq!(answer.text(), "the second try", "{name}");
        let sent = server.requests();
        assert_eq!(sent.len(), 2, "{name}");
        assert_eq!(sent[0].body, sent[1].body, "{name}");

        // Anthropic reports the input side when the stream starts, so the cut attempt's
        // input (and its first output token) is paid on top of the second attempt.
        // OpenAI reports usage only at the end: a cut attempt's tokens are unknown.
        let expected = if name.starts_with("anthropic") {
            Usage {
                input_tokens: 700 + 800,
                output_tokens: 1 + 60,
                cache_read_tokens: 4000 + 4100,
                cache_write_tokens: 300,
            }
        } else {
            Usage {
                input_tokens: 800,
                output_tokens: 60,
                cache_read_tokens: 4100,
                cache_write_tokens: 0,
            }
        };
        assert_eq!(answer.usage, expected, "{name}");
        let rows = model_usage::list_by_session(&t.db, &session).await.unwrap();
        assert_eq!(rows.len(), 1, "{name}");
        assert_eq!(
            (
                rows[0].input_tokens,
                rows[0].output_tokens,
                rows[0].cache_read_tokens,
                rows[0].cache_write_tokens
            ),
            (
                expected.input_tokens as i64,
                expected.output_tokens as i64,
                expected.cache_read_tokens as i64,
                expected.cache_write_tokens as i64
            ),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_stream_that_always_breaks_off_fails_cleanly_and_retryably() {
    let t = TestDb::new().await;
    for name in PROVIDERS {
        for how in ["cut", "error event"] {
            let breaking = |step: Step| match how {
                "cut" => step.cut_after(4),
                _ => step.error_after(4, "Overloaded"),
            };
            let usage = ScriptUsage {
                input: 50,
                output: 9,
                cache_read: 0,
                cache_write: 0,
            };
            let server = ModelServer::start(vec![
                breaking(Step::text("one").usage(usage)),
                breaking(Step::text("two").usage(usage)),
                breaking(Step::text("three").usage(usage)),
                Step::text("never reached"),
            ])
            .await;
            let session = SessionId::generate();
            let model = Metered::new(
                model(&server, name, &streaming()),
                &PriceTable::default(),
                t.db.clone(),
                ModelRole::Scout,
            )
            .unwrap()
            .for_session(session.clone(), Budget::usd(5.0));
            let err = tokio::time::timeout(
                Duration::from_secs(20),
                model.chat(&request(vec![Message::user("hello")])),
            )
            .await
            .expect("the call ends instead of hanging on a broken stream")
            .unwrap_err();
            let ModelError::Interrupted { usage, message, .. } = &err else {
                panic!("{name}, {how}: expected an interrupted stream, got {err:?}");
            };
            assert!(err.is_retryable(), "{name}, {how}: {err}");
            if how == "error event" {
                assert!(message.contains("Overloaded"), "{name}: {message}");
            }
            // The tokens the three attempts reported are summed on the error.
            let expected_input = if name.starts_with("anthropic") {
                150
            } else {
                0
            };
            assert_eq!(usage.input_tokens, expected_input, "{name}, {how}");
            // The metered model records them even though the call failed; a call that
            // reported nothing leaves no row.
            let rows = model_usage::list_by_session(&t.db, &session).await.unwrap();
            let recorded: Vec<i64> = rows.iter().map(|r| r.input_tokens).collect();
            let expected_rows = if expected_input > 0 {
                vec![expected_input as i64]
            } else {
                Vec::new()
            };
            assert_eq!(recorded, expected_rows, "{name}, {how}");
            assert!(!err.to_string().contains(ANTHROPIC_KEY), "{err}");
            assert_eq!(server.requests().len(), 3, "{name}, {how}");
            assert_eq!(server.unused_steps(), 1, "{name}, {how}");
        }
    }
}

#[tokio::test]
async fn a_stream_that_stalls_is_given_up_after_the_idle_timeout_and_retried() {
    for name in PROVIDERS {
        // Never opened: both attempts stall after their first events.
        let gate = Arc::new(tokio::sync::Notify::new());
        let server = ModelServer::start(vec![
            Step::text("stalled").hold_after(2, gate.clone()),
            Step::text("stalled again").hold_after(2, gate.clone()),
            Step::text("never reached"),
        ])
        .await;
        let mut options = streaming();
        options.retry.max_attempts = 2;
        options.idle_timeout = Duration::from_millis(300);
        let err = tokio::time::timeout(
            Duration::from_secs(20),
            model(&server, name, &options).chat(&request(vec![Message::user("hello")])),
        )
        .await
        .expect("the idle timeout ends a stalled stream")
        .unwrap_err();
        assert!(
            matches!(&err, ModelError::Interrupted { message, .. } if message.contains("nothing arrived")),
            "{name}: {err:?}"
        );
        assert!(err.is_retryable(), "{name}");
        assert_eq!(server.requests().len(), 2, "{name}");
    }
}

/// Everything logged in this test process, for waiting on what the code under test says.
fn captured_logs() -> Arc<std::sync::Mutex<Vec<u8>>> {
    #[derive(Clone)]
    struct Writer(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = Writer(logs.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        logs
    })
    .clone()
}

#[tokio::test]
async fn parallel_calls_overshoot_a_session_budget_by_at_most_one_call() {
    const CALLS: usize = 10;
    const MAX_TOKENS: u32 = 20_000;
    let logs = captured_logs();
    let t = TestDb::new().await;
    let gates: Vec<Arc<tokio::sync::Notify>> = (0..CALLS)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    // Each call spends about its worst case: its whole output limit ($0.30 on Sonnet).
    let server = ModelServer::start(
        gates
            .iter()
            .map(|gate| {
                Step::text("a long answer")
                    .usage(ScriptUsage {
                        input: 50,
                        output: u64::from(MAX_TOKENS),
                        ..ScriptUsage::default()
                    })
                    .hold_after(1, gate.clone())
            })
            .collect(),
    )
    .await;
    let session = SessionId::generate();
    let metered = Arc::new(
        Metered::new(
            model(&server, "anthropic:claude-sonnet-4-5", &streaming()),
            &PriceTable::default(),
            t.db.clone(),
            ModelRole::Scout,
        )
        .unwrap()
        .for_session(session.clone(), Budget::usd(1.0)),
    );
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let metered = metered.clone();
            tokio::spawn(async move {
                let mut request = request(vec![Message::user("hello")]);
                request.max_tokens = MAX_TOKENS;
                metered.chat(&request).await
            })
        })
        .collect();
    // Every call is either at the provider (held there) or waiting for the budget.
    support::eventually("every call to be sent or waiting", || {
        let sent = server.requests().len();
        let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
        let waiting = logged
            .lines()
            .filter(|l| l.contains("waits: its budget is held") && l.contains(session.as_str()))
            .count();
        std::future::ready((sent + waiting == CALLS).then_some(()))
    })
    .await;
    let sent = server.requests().len();
    for gate in &gates {
        gate.notify_one();
    }
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.unwrap());
    }
    let price = PriceTable::default()
        .get(&ModelName::parse("anthropic:claude-sonnet-4-5").unwrap())
        .unwrap();
    // The request's text is well under 2000 bytes.
    let worst = price.worst_case(
        planwright::metering::input_estimate(2000, 0),
        u64::from(MAX_TOKENS),
    );
    let spent = model_usage::spent_by_session(&t.db, &session)
        .await
        .unwrap();
    assert!(
        spent.cost_microusd <= 1_000_000 + worst.cost_microusd,
        "spent {} µUSD against a $1 budget with {sent} of {CALLS} calls sent; one call's worst case is {}",
        spent.cost_microusd,
        worst.cost_microusd
    );
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, server.requests().len());
    for result in &results {
        if let Err(e) = result {
            assert!(matches!(e, ModelError::BudgetExceeded { .. }), "{e:?}");
        }
    }
}

/// A session budget that one held call fills: $0.30 of worst case against $0.25.
fn filling_call() -> ChatRequest {
    let mut request = request(vec![Message::user("hello")]);
    request.max_tokens = 20_000;
    request
}

async fn holds(t: &TestDb) -> i64 {
    let (holds,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM model_holds")
        .fetch_one(&t.db.pool)
        .await
        .unwrap();
    holds
}

#[tokio::test]
async fn a_call_given_up_mid_way_releases_its_hold() {
    let t = TestDb::new().await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let server = ModelServer::start(vec![
        Step::text("never finished").hold_after(1, gate.clone()),
        Step::text("the next answer"),
    ])
    .await;
    let session = SessionId::generate();
    let metered = Arc::new(
        Metered::new(
            model(&server, "anthropic:claude-sonnet-4-5", &streaming()),
            &PriceTable::default(),
            t.db.clone(),
            ModelRole::Planner,
        )
        .unwrap()
        .for_session(session.clone(), Budget::usd(0.25)),
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let first = {
        let (metered, cancel) = (metered.clone(), cancel.clone());
        // As a cancelled session gives up its call: the call's future is dropped.
        tokio::spawn(async move {
            let request = filling_call();
            tokio::select! {
                _ = cancel.cancelled() => None,
                result = metered.chat(&request) => Some(result),
            }
        })
    };
    support::eventually("the first call to reach the provider", || {
        std::future::ready((server.requests().len() == 1).then_some(()))
    })
    .await;
    assert_eq!(holds(&t).await, 1);
    cancel.cancel();
    assert!(first.await.unwrap().is_none());
    support::eventually("the given-up call's hold to be released", || async {
        (holds(&t).await == 0).then_some(())
    })
    .await;
    let next = tokio::time::timeout(Duration::from_secs(20), metered.chat(&filling_call()))
        .await
        .expect("the next call is not kept waiting by a given-up call")
        .unwrap();
    assert_eq!(next.text(), "the next answer");
}

#[tokio::test]
async fn a_hold_left_by_a_process_that_died_stops_counting() {
    let t = TestDb::new().await;
    let server = ModelServer::start(vec![Step::text("answered")]).await;
    let session = SessionId::generate();
    let budget = Budget::usd(0.25);
    // A hold that fills the budget, written long ago by a process that never recorded it.
    let held = model_usage::hold(
        &t.db,
        Some(&session),
        None,
        &[(model_usage::Scope::Session(&session), budget)],
        model_usage::Spent {
            cost_microusd: 250_000,
            tokens: 20_000,
        },
    )
    .await
    .unwrap();
    assert!(matches!(held, model_usage::Held::Held(_)), "{held:?}");
    let long_ago = i64::try_from(model_usage::STALE_HOLD.as_millis()).unwrap() + 60_000;
    sqlx::query("UPDATE model_holds SET at = at - $1")
        .bind(long_ago)
        .execute(&t.db.writer)
        .await
        .unwrap();
    let metered = Metered::new(
        model(&server, "anthropic:claude-sonnet-4-5", &streaming()),
        &PriceTable::default(),
        t.db.clone(),
        ModelRole::Planner,
    )
    .unwrap()
    .for_session(session.clone(), budget);
    let answer = tokio::time::timeout(Duration::from_secs(20), metered.chat(&filling_call()))
        .await
        .expect("a stale hold does not keep the call waiting")
        .unwrap();
    assert_eq!(answer.text(), "answered");
    assert_eq!(holds(&t).await, 0);
}
