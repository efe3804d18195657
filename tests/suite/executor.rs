//! Executors on real workspaces (checked out by `Workspaces` from a local bare repository)
//! with the real bubblewrap sandbox: the builtin tool loop against the scripted model
//! server, and a shell script standing in for a command-line coding agent. bubblewrap
//! must be installed (CI installs it); without it these tests fail rather than skip.

use crate::support;
use crate::support::roots::{self, IMAGE_ONLY_FILE, IMAGE_ONLY_TOOL, IMAGE_RELEASE};

use support::git_http::git;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use planwright::config::ModelSettings;
use planwright::config::ProxyListen;
use planwright::config::prices::PriceTable;
use planwright::contract::Contract;
use planwright::executor::{
    AttemptLimits, Builtin, CommandExecutor, Executor, ExecutorReport, ExecutorTask, Feedback,
    ProxyAccess, StopReason,
};
use planwright::forge::GitRemote;
use planwright::git::{
    ChangeKind, ChangedFile, MirrorCache, MirrorKey, Outcome, Workspace, WorkspaceRequest,
    Workspaces,
};
use planwright::ids::{CommitSha, IssueNumber, RepoName, RunId, SessionId};
use planwright::metering::proxy::{self, Capabilities, ProxyState, TokenError};
use planwright::metering::{Metered, ModelRole};
use planwright::sandbox::{Bwrap, Sandbox};
use planwright::store::model_usage;
use planwright::store::model_usage::Budget;
use secrecy::SecretString;
use serde_json::{Value, json};
use support::model_server::{ModelServer, ScriptUsage, Step};
use tokio_util::sync::CancellationToken;

/// Words of the issue (its title and body) and of the planner's account of it. None of
/// them may reach an executor's model.
const ISSUE_TITLE: &str = "Greeting is wrong issue-title-words";
const SUMMARY: &str = "The reporter says summary-only-words the greeting is wrong.";
const HYPOTHESIS: &str = "hypothesis-only-words: the text was never updated.";
/// Words only the contract's change section has.
const GOAL: &str = "Greet planwright instead of the world (goal-words).";
const CONSTRAINT: &str = "Keep check.sh unchanged (constraint-words).";
const AGENTS_MD: &str = "Run ./check.sh before finishing (agents-md-words).";

fn contract() -> Contract {
    Contract::from_value(json!({
        "summary": SUMMARY,
        "diagnosis": {
            "hypothesis": HYPOTHESIS,
            "evidence": [{"path": "greeting.txt", "lines": "1", "note": "evidence-only-words"}]
        },
        "change": {
            "goal": GOAL,
            "expected_behaviour": ["check.sh passes (behaviour-words)"],
            "files": [{"path": "greeting.txt", "action": "modify", "why": "holds the greeting (why-words)"}]
        },
        "constraints": [CONSTRAINT],
        "out_of_scope": ["Translations (out-of-scope-words)"],
        "verification": {"commands": ["sh check.sh"], "new_tests": ["none needed (new-test-words)"]},
        "routing": {"risk": "low"}
    }))
    .expect("the test contract is valid")
}

/// An upstream repository, the data folder with its mirror and one run's workspace, and
/// a folder outside everything that escapes would reach. It lives under the target folder
/// (the sandbox has a private `/tmp`) and is readable by the sandbox's user.
struct RunDirs {
    dir: tempfile::TempDir,
    outside: PathBuf,
    records: PathBuf,
    ws: Workspace,
}

impl RunDirs {
    async fn new(extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "outside\n").unwrap();

        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", "up.git"],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        let mut files = vec![
            ("greeting.txt", "Hello, world\n"),
            (
                "check.sh",
                "grep -q 'Hello, planwright' greeting.txt && echo 'check passed' || { echo 'check failed'; exit 1; }\n",
            ),
            ("AGENTS.md", AGENTS_MD),
        ];
        files.extend_from_slice(extra);
        for (path, content) in files {
            let full = work.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        // A committed symlink out of the repository, as a hostile repository may hold.
        std::os::unix::fs::symlink(&outside, work.join("link-out")).unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "start"]);
        let bare = dir.path().join("up.git");
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        let base = git(&work, &["rev-parse", "HEAD"]);

        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cache = Arc::new(MirrorCache::new(&data));
        let workspaces = Workspaces::new(&data, cache, Workspaces::default_owner());
        let ws = workspaces
            .create(&WorkspaceRequest {
                mirror: MirrorKey::new("github", RepoName::parse("octo/greeter").unwrap()).unwrap(),
                remote: GitRemote {
                    url: bare.display().to_string(),
                    username: "x-access-token".into(),
                    password: SecretString::from("unused-for-a-local-path"),
                },
                base: CommitSha(base),
                issue: IssueNumber(7),
                title: ISSUE_TITLE.into(),
                size: None,
            })
            .await
            .expect("the workspace is checked out");
        let records = data.join("runs").join(RunId::generate().as_str());
        RunDirs {
            dir,
            outside,
            records,
            ws,
        }
    }

    fn task(&self, limits: AttemptLimits) -> ExecutorTask {
        // The instruction files as planning lists them, from the base commit's tree.
        let mut contract = contract();
        let repo = self.dir.path().join("work");
        let base = git(&repo, &["rev-parse", "HEAD"]);
        contract.instructions = planwright::repo_tools::RepoTools::in_tree(&repo, &repo, &base)
            .unwrap()
            .instruction_files(&["greeting.txt"]);
        ExecutorTask::new(&self.ws, &contract, self.records.clone(), limits)
    }

    /// Every file outside the workspace with its content: any write there shows.
    fn outside_state(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.outside.clone(), self.dir.path().join("work")];
        while let Some(p) = stack.pop() {
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
        out.sort();
        out
    }

    async fn changed(&self) -> Vec<ChangedFile> {
        self.ws.changed_files().await.unwrap()
    }

    async fn done(self) {
        self.ws.finish(Outcome::Succeeded).await.unwrap();
    }
}

fn sandbox() -> Arc<dyn Sandbox> {
    Arc::new(Bwrap::new(Vec::new()).expect("bubblewrap is installed (CI installs it)"))
}

/// The tool results of a recorded Anthropic request's last message: (content, is_error).
fn tool_results(body: &Value) -> Vec<(String, bool)> {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            (
                b["content"].as_str().unwrap_or_default().to_owned(),
                b["is_error"] == true,
            )
        })
        .collect()
}

fn transcript(report: &ExecutorReport) -> Vec<Value> {
    std::fs::read_to_string(&report.transcript)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn builtin_reads_edits_runs_in_the_sandbox_and_finishes() {
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        Step::tool_call("t1", "read_file", json!({"path": "greeting.txt"}))
            .when_tools(&["write_file", "edit_file", "run", "finish"]),
        Step::tool_call(
            "t2",
            "edit_file",
            json!({"path": "greeting.txt", "old": "world", "new": "planwright"}),
        )
        .when_last_contains("Hello, world"),
        Step::tool_call(
            "t3",
            "run",
            json!({"command": "sh check.sh && echo \"uid=$(id -u) home=$HOME\" && ls /run", "timeout_s": 60}),
        )
        .when_last_contains("edited `greeting.txt`"),
        Step::tool_call(
            "t4",
            "finish",
            json!({"summary": "Greeting now says planwright; check.sh passes."}),
        )
        .when_last_contains("check passed"),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();

    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    assert_eq!(
        report.summary,
        "Greeting now says planwright; check.sh passes."
    );
    assert_eq!((report.turns, report.steps), (4, 4));
    assert_eq!(server.unused_steps(), 0);
    let diff = world.ws.diff().await.unwrap();
    assert!(
        diff.contains("-Hello, world\n+Hello, planwright\n"),
        "{diff}"
    );
    assert_eq!(
        world.changed().await,
        vec![ChangedFile {
            path: "greeting.txt".into(),
            change: ChangeKind::Modified
        }]
    );

    // The command ran inside the sandbox as its user, with the run's HOME outside the
    // checkout; the model read its distilled output.
    let requests = server.requests();
    let (run_result, run_error) = &tool_results(&requests[3].body)[0];
    assert!(!run_error, "{run_result}");
    assert!(run_result.starts_with("exit code 0\n"), "{run_result}");
    assert!(run_result.contains("uid=1000"), "{run_result}");
    let home = world.ws.home().display().to_string();
    assert!(run_result.contains(&format!("home={home}")), "{run_result}");

    // The transcript holds every call and the raw output, outside the sandbox's reach.
    assert!(report.transcript.starts_with(&world.records));
    assert!(!report.transcript.starts_with(world.ws.root()));
    let entries = transcript(&report);
    assert_eq!(entries.first().unwrap()["kind"], "start");
    assert_eq!(entries.last().unwrap()["reason"], "finished");
    let raw_run = entries
        .iter()
        .find(|e| e["kind"] == "tool" && e["name"] == "run")
        .unwrap();
    assert!(
        raw_run["raw"]["stdout"]
            .as_str()
            .unwrap()
            .contains("check passed")
    );

    // The model got the contract's change, the repository's instructions and nothing of
    // the issue or the planner's account of it.
    let first = requests[0].body.to_string();
    for words in [
        "goal-words",
        "behaviour-words",
        "why-words",
        "constraint-words",
        "out-of-scope-words",
        "new-test-words",
        "sh check.sh",
        "agents-md-words",
    ] {
        assert!(first.contains(words), "{words} missing from {first}");
    }
    for request in &requests {
        let body = request.body.to_string();
        for words in [
            "issue-title-words",
            "summary-only-words",
            "hypothesis-only-words",
            "evidence-only-words",
        ] {
            assert!(!body.contains(words), "{words} reached the model: {body}");
        }
    }
    world.done().await;
}

#[tokio::test]
async fn escapes_through_the_tools_are_tool_errors_and_change_nothing() {
    let world = RunDirs::new(&[]).await;
    let before = world.outside_state();
    let git_config = std::fs::read(world.ws.repo().join(".git/config")).unwrap();
    let absolute = world.outside.join("absolute.txt").display().to_string();
    let calls = vec![
        (
            "e1",
            "write_file",
            json!({"path": "../escaped.txt", "content": "x"}),
        ),
        (
            "e2",
            "write_file",
            json!({"path": absolute, "content": "x"}),
        ),
        (
            "e3",
            "write_file",
            json!({"path": "link-out/through.txt", "content": "x"}),
        ),
        (
            "e4",
            "write_file",
            json!({"path": "link-out", "content": "x"}),
        ),
        (
            "e5",
            "edit_file",
            json!({"path": "link-out/keep.txt", "old": "outside", "new": "x"}),
        ),
        (
            "e6",
            "write_file",
            json!({"path": ".git/config", "content": "[core]\n"}),
        ),
        (
            "e7",
            "edit_file",
            json!({"path": ".git/HEAD", "old": "ref", "new": "x"}),
        ),
        (
            "e8",
            "write_file",
            json!({"path": "src/../../up.txt", "content": "x"}),
        ),
        ("e9", "read_file", json!({"path": "link-out/keep.txt"})),
        ("e10", "read_file", json!({"path": ".git/config"})),
    ];
    let count = calls.len();
    let server = ModelServer::start(vec![
        Step::reply(support::model_server::Reply::ToolCalls(
            calls
                .into_iter()
                .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input))
                .collect(),
        )),
        Step::tool_call("f", "finish", json!({"summary": "tried"})).when_last_contains("symlink"),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");

    let results = tool_results(&server.requests()[1].body);
    assert_eq!(results.len(), count);
    for (content, is_error) in &results {
        assert!(is_error, "not refused: {content}");
    }
    let texts: Vec<&str> = results.iter().map(|(c, _)| c.as_str()).collect();
    assert!(texts[0].contains("`..`"), "{}", texts[0]);
    assert!(texts[1].contains("absolute"), "{}", texts[1]);
    assert!(texts[2].contains("symlink"), "{}", texts[2]);
    assert!(texts[5].contains(".git"), "{}", texts[5]);
    assert_eq!(world.outside_state(), before);
    assert_eq!(
        std::fs::read(world.ws.repo().join(".git/config")).unwrap(),
        git_config
    );
    assert!(!world.dir.path().join("escaped.txt").exists());
    assert!(!world.ws.root().join("escaped.txt").exists());
    assert!(world.changed().await.is_empty());
    world.done().await;
}

#[tokio::test]
async fn the_turn_limit_stops_the_loop() {
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        Step::tool_call("r1", "list_files", json!({})),
        Step::tool_call("r2", "read_file", json!({"path": "check.sh"})),
        Step::tool_call("r3", "finish", json!({"summary": "never asked for"})),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let limits = AttemptLimits {
        max_turns: 2,
        ..AttemptLimits::default()
    };
    let report = executor.run(&world.task(limits)).await.unwrap();
    assert_eq!(report.stop, StopReason::TurnLimit, "{report:?}");
    assert_eq!(report.turns, 2);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.unused_steps(), 1);
    assert_eq!(transcript(&report).last().unwrap()["reason"], "turn limit");
    world.done().await;
}

#[tokio::test]
async fn malformed_arguments_are_fed_back_as_tool_errors() {
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        // Arguments that are not JSON at all, as a model cut off mid-call sends them.
        Step::tool_call(
            "m1",
            "write_file",
            Value::String("{\"path\": \"new.txt\", \"content\": \"unfinished".into()),
        ),
        Step::tool_call("m2", "write_file", json!({"path": 7, "content": "x"}))
            .when_last_contains("must be a JSON object"),
        Step::tool_call("m3", "edit_file", json!({"path": "greeting.txt"}))
            .when_last_contains("invalid type"),
        Step::tool_call("m4", "finish", json!({"summary": "gave up"}))
            .when_last_contains("missing field `old`"),
    ])
    .await;
    let executor = Builtin::new(server.client("openai:gpt-executor-test"), sandbox());
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    assert_eq!(server.unused_steps(), 0);
    let requests = server.requests();
    let last_tool = |i: usize| {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = last_tool(1);
    assert!(first.starts_with("Error: "), "{first}");
    assert!(first.contains("unfinished"), "{first}");
    assert!(last_tool(2).contains("`path`") || last_tool(2).contains("invalid type"));
    assert!(!world.ws.repo().join("new.txt").exists());
    assert!(world.changed().await.is_empty());
    world.done().await;
}

#[tokio::test]
async fn a_spent_budget_stops_the_builtin_executor() {
    let db = support::TestDb::new().await;
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        Step::tool_call("b1", "read_file", json!({"path": "greeting.txt"})).usage(ScriptUsage {
            input: 900,
            output: 200,
            ..ScriptUsage::default()
        }),
        Step::tool_call("b2", "finish", json!({"summary": "never sent"})),
    ])
    .await;
    let metered = Metered::new(
        server.client("anthropic:claude-sonnet-4-5"),
        &PriceTable::default(),
        db.db.clone(),
        ModelRole::Executor,
    )
    .unwrap()
    .for_run(RunId::generate(), Budget::tokens(1_000));
    let executor = Builtin::new(Arc::new(metered), sandbox());
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();
    assert_eq!(report.stop, StopReason::Budget, "{report:?}");
    assert_eq!(server.requests().len(), 1);
    world.done().await;
}

#[tokio::test]
async fn later_attempts_get_the_reviewers_instructions_and_the_verification() {
    let world = RunDirs::new(&[]).await;
    let mut task = world.task(AttemptLimits::default());
    task.feedback = Some(Feedback {
        instructions: "Also keep the trailing newline (reviewer-words).".into(),
        verification: "1 failed: check.sh (verification-words)".into(),
    });
    let server = ModelServer::start(vec![Step::tool_call(
        "f1",
        "finish",
        json!({"summary": "ok"}),
    )])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    executor.run(&task).await.unwrap();
    let body = server.requests()[0].body.to_string();
    assert!(body.contains("reviewer-words"), "{body}");
    assert!(body.contains("verification-words"), "{body}");
    world.done().await;
}

#[tokio::test]
async fn the_command_executor_runs_an_agent_script_with_the_contract_in_a_file() {
    // The "agent": reads the contract it is pointed at, edits the file the goal names,
    // and says what it did.
    let agent = r#"set -e
grep -q 'goal-words' "$PLANWRIGHT_CONTRACT"
grep -q 'agents-md-words' "$PLANWRIGHT_CONTRACT"
sed -i 's/world/planwright/' greeting.txt
echo "contract at $PLANWRIGHT_CONTRACT"
echo "edited greeting.txt as $(id -u)"
"#;
    let world = RunDirs::new(&[]).await;
    let executor = CommandExecutor::new(agent, sandbox(), None).unwrap();
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    assert!(
        report.summary.ends_with("edited greeting.txt as 1000"),
        "{}",
        report.summary
    );
    let contract_file = world.ws.root().join(".planwright/contract.md");
    assert!(
        report
            .summary
            .contains(&format!("contract at {}", contract_file.display())),
        "{}",
        report.summary
    );
    let written = std::fs::read_to_string(&contract_file).unwrap();
    assert!(written.contains("goal-words") && !written.contains("summary-only-words"));
    // Only the checkout is the change: the contract file is beside it, not in it.
    assert_eq!(
        world.changed().await,
        vec![ChangedFile {
            path: "greeting.txt".into(),
            change: ChangeKind::Modified
        }]
    );
    let transcript = std::fs::read_to_string(&report.transcript).unwrap();
    assert!(transcript.contains("edited greeting.txt"), "{transcript}");
    assert!(
        transcript.ends_with("--- exit code 0 ---\n"),
        "{transcript}"
    );
    world.done().await;
}

#[tokio::test]
async fn a_failing_agent_command_is_reported_as_crashed() {
    let world = RunDirs::new(&[]).await;
    // An earlier attempt left a symlink where the contract goes; it must not be followed.
    std::os::unix::fs::symlink(&world.outside, world.ws.root().join(".planwright")).unwrap();
    let before = world.outside_state();
    let executor = CommandExecutor::new(
        "echo working; echo 'model refused' >&2; exit 3",
        sandbox(),
        None,
    )
    .unwrap();
    let report = executor
        .run(&world.task(AttemptLimits::default()))
        .await
        .unwrap();
    assert_eq!(report.stop, StopReason::Crashed, "{report:?}");
    assert!(report.summary.contains("exit code 3"), "{}", report.summary);
    assert_eq!(world.outside_state(), before);
    let transcript = std::fs::read_to_string(&report.transcript).unwrap();
    assert!(transcript.contains("model refused"), "{transcript}");
    assert!(CommandExecutor::new("  ", sandbox(), None).is_err());
    world.done().await;
}

#[tokio::test]
async fn the_wall_clock_ends_an_attempt_inside_a_command() {
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        Step::tool_call(
            "w1",
            "run",
            json!({"command": "sleep 600", "timeout_s": 1800}),
        ),
        Step::tool_call("w2", "finish", json!({"summary": "never asked for"})),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let limits = AttemptLimits {
        wall: Duration::from_secs(3),
        ..AttemptLimits::default()
    };
    let report = executor.run(&world.task(limits)).await.unwrap();
    assert_eq!(report.stop, StopReason::Timeout, "{report:?}");
    assert_eq!(server.requests().len(), 1);
    let entries = transcript(&report);
    let run = entries.iter().find(|e| e["name"] == "run").unwrap();
    assert!(
        run["output"].as_str().unwrap().starts_with("timed out"),
        "{run}"
    );
    world.done().await;
}

#[tokio::test]
async fn the_command_executor_reaches_the_model_proxy_with_a_token_revoked_afterwards() {
    const REAL_KEY: &str = "sk-ant-real-key-host-only-0123";
    let db = support::TestDb::new().await;
    let world = RunDirs::new(&[]).await;
    let upstream = ModelServer::start(vec![Step::text("proxied-answer-words")]).await;
    let capabilities = Arc::new(Capabilities::generate());
    let settings = ModelSettings {
        anthropic_api_key: Some(SecretString::from(REAL_KEY)),
        anthropic_base_url: upstream.anthropic_base(),
        openai_api_key: None,
        openai_base_url: upstream.openai_base(),
        planner: None,
        scout: None,
        executor: None,
        prices: PriceTable::default(),
    };
    let state = ProxyState::new(db.db.clone(), &settings, capabilities.clone()).unwrap();
    let stop = CancellationToken::new();
    // Beside the workspace, where the sandbox's user can reach it.
    let socket = world.dir.path().join("proxy.sock");
    let (_proxy, _served) = proxy::serve(&ProxyListen::Unix(socket.clone()), state, stop.clone())
        .await
        .unwrap();
    let sandbox: Arc<dyn Sandbox> = Arc::new(
        Bwrap::new(Vec::new())
            .expect("bubblewrap is installed")
            .with_relay_program(env!("CARGO_BIN_EXE_planwright")),
    );
    let run = RunId::generate();
    let access = ProxyAccess {
        socket,
        capabilities: capabilities.clone(),
        run: run.clone(),
        session: SessionId::generate(),
    };
    let agent = r#"set -e
printf %s "$ANTHROPIC_API_KEY" > "$HOME/token"
curl -sS --max-time 20 -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' \
  -d '{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}' \
  "$ANTHROPIC_BASE_URL/v1/messages"
echo"#;
    let executor = CommandExecutor::new(agent, sandbox, Some(access)).unwrap();
    let limits = AttemptLimits {
        budget: Budget::usd(0.5),
        ..AttemptLimits::default()
    };
    let report = executor.run(&world.task(limits)).await.unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    assert!(
        report.summary.contains("proxied-answer-words"),
        "{}",
        report.summary
    );

    // The command held a capability token, never the provider key; the proxy put the key
    // on the upstream request; the token died with the run.
    let token = std::fs::read_to_string(world.ws.home().join("token")).unwrap();
    assert!(token.starts_with("pwcap_"), "{token}");
    assert_eq!(upstream.requests()[0].header("x-api-key"), Some(REAL_KEY));
    assert_eq!(capabilities.verify(&token), Err(TokenError::Revoked));
    let spent = model_usage::spent_by_run(&db.db, &run).await.unwrap();
    assert!(spent.tokens > 0);
    let transcript = std::fs::read_to_string(&report.transcript).unwrap();
    assert!(!transcript.contains(REAL_KEY));
    stop.cancel();
    world.done().await;
}

#[tokio::test]
async fn a_checkout_swapped_for_a_symlink_by_a_command_receives_no_writes() {
    let world = RunDirs::new(&[]).await;
    let before = world.outside_state();
    let swap = format!(
        "cd .. && mv repo repo-moved && ln -s {} repo && echo swapped",
        support::sh_word(&world.outside)
    );
    let server = ModelServer::start(vec![
        Step::tool_call("s1", "run", json!({"command": swap})),
        Step::tool_call(
            "s2",
            "write_file",
            json!({"path": "planted.txt", "content": "x"}),
        )
        .when_last_contains("swapped"),
        Step::tool_call(
            "s3",
            "edit_file",
            json!({"path": "keep.txt", "old": "outside", "new": "x"}),
        )
        .when_last_contains("replaced"),
        Step::tool_call("s4", "read_file", json!({"path": "keep.txt"}))
            .when_last_contains("replaced"),
        Step::tool_call("s5", "finish", json!({"summary": "done"})),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let task = world.task(AttemptLimits::default());
    let report = executor.run(&task).await.unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    assert_eq!(server.unused_steps(), 0);
    let requests = server.requests();
    for i in [2, 3, 4] {
        let results = tool_results(&requests[i].body);
        assert!(results[0].1, "not refused: {}", results[0].0);
    }
    assert_eq!(world.outside_state(), before);

    // A later attempt in the same workspace refuses to start rather than aim at the link.
    let again = ModelServer::start(Vec::new()).await;
    let executor = Builtin::new(again.client("anthropic:claude-executor-test"), sandbox());
    let err = executor.run(&task).await.unwrap_err();
    assert!(err.to_string().contains("not a folder"), "{err}");
    assert!(!err.is_retryable());
    assert!(again.requests().is_empty());
    world.done().await;
}

impl RunDirs {
    /// The task with a busybox root as every command's `/`: no git, no libc, no
    /// python; a tool and a file of the image's own.
    fn task_in_busybox_image(&self) -> ExecutorTask {
        let dir = self.dir.path().join("image");
        std::fs::create_dir(&dir).unwrap();
        let mut task = self.task(AttemptLimits::default());
        task.environment = Some(roots::busybox(&dir));
        task
    }
}

#[tokio::test]
async fn the_command_executor_runs_in_the_environment_image() {
    let agent = format!(
        "set -e
grep -q 'goal-words' \"$PLANWRIGHT_CONTRACT\"
sed -i 's/world/planwright/' greeting.txt
test ! -e /usr/bin/git
cat {IMAGE_ONLY_FILE}
{IMAGE_ONLY_TOOL}"
    );
    let world = RunDirs::new(&[]).await;
    let executor = CommandExecutor::new(&agent, sandbox(), None).unwrap();
    let report = executor.run(&world.task_in_busybox_image()).await.unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    let transcript = std::fs::read_to_string(&report.transcript).unwrap();
    assert!(transcript.contains(IMAGE_RELEASE), "{transcript}");
    assert!(transcript.contains("image tool in busybox"), "{transcript}");
    assert_eq!(
        world.changed().await,
        vec![ChangedFile {
            path: "greeting.txt".into(),
            change: ChangeKind::Modified
        }]
    );
    world.done().await;
}

#[tokio::test]
async fn the_builtin_executors_run_tool_runs_in_the_environment_image() {
    let world = RunDirs::new(&[]).await;
    let server = ModelServer::start(vec![
        Step::tool_call(
            "t1",
            "edit_file",
            json!({"path": "greeting.txt", "old": "world", "new": "planwright"}),
        )
        .when_tools(&["write_file", "edit_file", "run", "finish"]),
        Step::tool_call(
            "t2",
            "run",
            json!({"command": format!("sh check.sh && {IMAGE_ONLY_TOOL} && test ! -e /usr/bin/git && echo no host git"), "timeout_s": 60}),
        )
        .when_last_contains("edited `greeting.txt`"),
        Step::tool_call("t3", "finish", json!({"summary": "Done in the image."}))
            .when_last_contains("check passed"),
    ])
    .await;
    let executor = Builtin::new(server.client("anthropic:claude-executor-test"), sandbox());
    let report = executor.run(&world.task_in_busybox_image()).await.unwrap();
    assert_eq!(report.stop, StopReason::Finished, "{report:?}");
    let requests = server.requests();
    let (run_result, run_error) = &tool_results(&requests[2].body)[0];
    assert!(!run_error, "{run_result}");
    for line in ["check passed", "image tool in busybox", "no host git"] {
        assert!(run_result.contains(line), "{line}: {run_result}");
    }
    world.done().await;
}
