//! Planner sessions end to end on GitLab: real webhook payloads moved to a project on the
//! fake GitLab (with git over smart HTTP), the real router and worker, scripted models.

use crate::support;

use planwright::contract::ContractMarker;
use planwright::event::ForgeKind;
use planwright::ids::{IssueNumber, RepoName};
use planwright::server::Role;
use planwright::session::dispatch;
use planwright::store::jobs::JobState;
use planwright::store::{jobs, sessions};
use serde_json::{Value, json};
use support::fake_gitlab::{BOT_USERNAME, FakeGitlab, FakeUser, TOKEN};
use support::model_server::{ModelServer, Step};
use support::{TestDb, TestServer, eventually};

const PROJECT: &str = "acme/tools/widgets";
const ISSUE: i64 = 12;

fn contract() -> Value {
    json!({
        "summary": "parse_array panics on a trailing comma.",
        "diagnosis": {
            "hypothesis": "The empty last element is parsed with unwrap.",
            "evidence": [{"path": "src/parse.rs", "lines": "1-3", "note": "unwrap on every element"}]
        },
        "change": {
            "goal": "Skip empty elements.",
            "files": [{"path": "src/parse.rs", "action": "modify", "why": "filter empties"}]
        },
        "verification": {"commands": ["cargo test"]},
        "routing": {"risk": "low"}
    })
}

struct World {
    gitlab: FakeGitlab,
    models: ModelServer,
    server: TestServer,
    _db: TestDb,
    developer: FakeUser,
    reporter: FakeUser,
}

impl World {
    async fn start(script: Vec<Step>) -> World {
        let files = [(
            "src/parse.rs",
            "pub fn parse_array(s: &str) -> Vec<i64> {\n    s.split(',').map(|x| x.parse().unwrap()).collect()\n}\n",
        )];
        Self::start_with(script, &files, &[]).await
    }

    /// A world whose project holds `files` (a `.gitlab/planwright.yml` among them is also
    /// served as the project's settings), with `extra` settings.
    async fn start_with(
        script: Vec<Step>,
        files: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> World {
        let db = TestDb::new().await;
        let gitlab = FakeGitlab::start().await;
        gitlab.add_project(PROJECT, "main", "0000000000000000000000000000000000000000");
        gitlab.create_git_repo(PROJECT, files);
        for (path, text) in files {
            if *path == ".gitlab/planwright.yml" {
                gitlab.put_file(PROJECT, path, text);
            }
        }
        let developer = gitlab.add_user("dora", 301);
        let reporter = gitlab.add_user("rex", 302);
        gitlab.add_member(PROJECT, &developer, 30);
        gitlab.add_member(PROJECT, &reporter, 20);
        gitlab.add_issue(
            PROJECT,
            ISSUE,
            "Trailing comma panics",
            Some("Parsing `[1,2,]` panics."),
            &[],
            reporter.clone(),
        );
        let models = ModelServer::start(script).await;
        let anthropic = models.anthropic_base();
        let openai = models.openai_base();
        let mut env = vec![
            ("PLANWRIGHT_GITLAB_URL", gitlab.url.as_str()),
            ("PLANWRIGHT_GITLAB_TOKEN", TOKEN),
            ("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-sonnet-4-5"),
            ("PLANWRIGHT_ANTHROPIC_API_KEY", "sk-ant-session-test"),
            ("PLANWRIGHT_ANTHROPIC_BASE_URL", anthropic.as_str()),
            ("PLANWRIGHT_OPENAI_API_KEY", "sk-openai-session-test"),
            ("PLANWRIGHT_OPENAI_BASE_URL", openai.as_str()),
        ];
        env.extend_from_slice(extra);
        let settings = support::settings(&db, &env);
        let server = TestServer::start(settings, Role::All, dispatch::handler).await;
        World {
            gitlab,
            models,
            server,
            _db: db,
            developer,
            reporter,
        }
    }

    fn fixture(name: &str) -> Value {
        let path = support::fixtures().join("gitlab-webhooks").join(name);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn retarget(mut payload: Value, by: &FakeUser) -> Value {
        payload["project"]["path_with_namespace"] = json!(PROJECT);
        payload["user"]["username"] = json!(by.username);
        payload["user"]["id"] = json!(by.id);
        payload
    }

    async fn label(&self, by: &FakeUser) {
        self.gitlab.set_labels(PROJECT, ISSUE, &["planwright"], by);
        self.deliver_label(by).await;
    }

    /// Delivers a label event for the issue, whatever labels the issue has.
    async fn deliver_label(&self, by: &FakeUser) {
        let mut payload = Self::retarget(Self::fixture("issue-hook.1.json"), by);
        payload["object_attributes"]["iid"] = json!(ISSUE);
        payload["changes"]["labels"] = json!({
            "previous": [],
            "current": [{"id": 1, "title": "planwright"}]
        });
        self.send("Issue Hook", &payload).await;
    }

    /// Delivers an event for the label's removal, whatever labels the issue has.
    async fn deliver_unlabel(&self, by: &FakeUser) {
        let mut payload = Self::retarget(Self::fixture("issue-hook.1.json"), by);
        payload["object_attributes"]["iid"] = json!(ISSUE);
        payload["changes"]["labels"] = json!({
            "previous": [{"id": 1, "title": "planwright"}],
            "current": []
        });
        self.send("Issue Hook", &payload).await;
    }

    async fn note(&self, by: &FakeUser, body: &str) {
        let id = self.gitlab.add_note(PROJECT, ISSUE, body, by.clone());
        let mut payload = Self::retarget(Self::fixture("note-hook.issue.json"), by);
        payload["object_attributes"]["id"] = json!(id);
        payload["object_attributes"]["note"] = json!(body);
        payload["issue"]["iid"] = json!(ISSUE);
        self.send("Note Hook", &payload).await;
    }

    async fn send(&self, event: &str, payload: &Value) {
        let body = serde_json::to_vec(payload).unwrap();
        let response = self.server.gitlab(event, &body).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{event}: {}",
            response.status()
        );
    }

    fn bot_notes(&self) -> Vec<String> {
        self.gitlab
            .issue_notes(PROJECT, ISSUE)
            .into_iter()
            .filter(|n| n.author.username == BOT_USERNAME)
            .map(|n| n.body)
            .collect()
    }

    async fn wait_for_note(&self, what: &str, test: impl Fn(&str) -> bool) -> String {
        self.gitlab
            .wait_for(what, |_| self.bot_notes().into_iter().find(|b| test(b)))
            .await
    }

    async fn wait_for_state(&self, state: &str) -> sessions::SessionRow {
        eventually(&format!("the session to be {state}"), || async {
            let mut conn = self.server.db.pool.acquire().await.unwrap();
            sessions::latest_for_issue(
                &mut conn,
                ForgeKind::Gitlab,
                &RepoName::parse(PROJECT).unwrap(),
                IssueNumber(ISSUE),
            )
            .await
            .unwrap()
            .filter(|s| s.state.as_str() == state)
        })
        .await
    }
}

#[tokio::test]
async fn a_label_event_for_a_label_the_issue_does_not_carry_starts_nothing() {
    let world = World::start(vec![]).await;
    // Signed, and naming a developer, but nobody put the label on the issue.
    world.deliver_label(&world.developer).await;
    eventually("the event job to settle", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        (!all.is_empty() && all.iter().all(|j| j.state == JobState::Done)).then_some(())
    })
    .await;
    let mut conn = world.server.db.pool.acquire().await.unwrap();
    let session = sessions::latest_for_issue(
        &mut conn,
        ForgeKind::Gitlab,
        &RepoName::parse(PROJECT).unwrap(),
        IssueNumber(ISSUE),
    )
    .await
    .unwrap();
    assert!(session.is_none(), "{session:?}");
    assert!(world.bot_notes().is_empty(), "{:?}", world.bot_notes());
    world.server.stop().await;
}

#[tokio::test]
async fn a_note_whose_payload_names_another_author_acts_as_its_real_author() {
    let world = World::start(vec![
        Step::tool_call("p1", "submit_contract", contract()).when_tools(&["submit_contract"]),
    ])
    .await;
    world.label(&world.developer).await;
    world.wait_for_state("awaiting_approval").await;
    // The reporter writes `/approve`; the payload says the developer did.
    let id = world
        .gitlab
        .add_note(PROJECT, ISSUE, "/approve", world.reporter.clone());
    let mut payload = World::retarget(World::fixture("note-hook.issue.json"), &world.developer);
    payload["object_attributes"]["id"] = json!(id);
    payload["object_attributes"]["note"] = json!("/approve");
    payload["issue"]["iid"] = json!(ISSUE);
    world.send("Note Hook", &payload).await;
    world
        .wait_for_note("the refusal of the reporter", |b| {
            b.starts_with("@rex") && b.contains("can use `/approve`")
        })
        .await;
    assert_eq!(
        world
            .wait_for_state("awaiting_approval")
            .await
            .state
            .as_str(),
        "awaiting_approval"
    );
    assert!(
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .iter()
            .all(|j| j.kind != "execute")
    );
    world.server.stop().await;
}

#[tokio::test]
async fn an_approve_without_an_event_uuid_whose_first_handling_fails_is_carried_out_on_retry() {
    let world = World::start(vec![
        Step::tool_call("p1", "submit_contract", contract()).when_tools(&["submit_contract"]),
    ])
    .await;
    world.label(&world.developer).await;
    world.wait_for_state("awaiting_approval").await;
    // The permission check comes after the comment is claimed: the first handling fails
    // there once the forge client's own four tries are spent, and the job's retry must
    // still act. The test server sends no event UUID.
    let members = format!(
        "/api/v4/projects/{}/members/all/{}",
        PROJECT.replace('/', "%2F"),
        world.developer.id
    );
    for _ in 0..4 {
        world.gitlab.fail_after_performing("GET", &members, 500);
    }
    world.note(&world.developer, "/approve").await;
    eventually("the execute job", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "execute")
    })
    .await;
    eventually("the event jobs to settle", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        all.iter()
            .filter(|j| j.kind == "event")
            .all(|j| j.state == JobState::Done)
            .then_some(())
    })
    .await;
    let statuses = world.gitlab.statuses("GET", &members);
    // The label's check, then the command's failed first handling and its retry.
    assert_eq!(statuses, [200, 500, 500, 500, 500, 200]);
    let executes = jobs::list(&world.server.db, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.kind == "execute")
        .count();
    assert_eq!(executes, 1);
    world.server.stop().await;
}

#[tokio::test]
async fn an_approve_redelivered_after_its_first_delivery_gave_up_is_carried_out() {
    let files = [("src/parse.rs", "pub fn parse_array() {}\n")];
    let world = World::start_with(
        vec![Step::tool_call("p1", "submit_contract", contract()).when_tools(&["submit_contract"])],
        &files,
        &[("PLANWRIGHT_JOB_MAX_ATTEMPTS", "1")],
    )
    .await;
    world.label(&world.developer).await;
    world.wait_for_state("awaiting_approval").await;
    // GitLab is down for the permission check until the first delivery's job gives up.
    let members = format!(
        "/api/v4/projects/{}/members/all/{}",
        PROJECT.replace('/', "%2F"),
        world.developer.id
    );
    for _ in 0..4 {
        world.gitlab.fail_after_performing("GET", &members, 500);
    }
    let id = world
        .gitlab
        .add_note(PROJECT, ISSUE, "/approve", world.developer.clone());
    let mut payload = World::retarget(World::fixture("note-hook.issue.json"), &world.developer);
    payload["object_attributes"]["id"] = json!(id);
    payload["object_attributes"]["note"] = json!("/approve");
    payload["issue"]["iid"] = json!(ISSUE);
    world.send("Note Hook", &payload).await;
    eventually("the first delivery's job to give up", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "event" && j.state == JobState::Dead)
    })
    .await;
    // GitLab sends the hook again, as it does after a failed delivery.
    world.send("Note Hook", &payload).await;
    eventually("the execute job", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "execute")
    })
    .await;
    // A third delivery of the same comment, after the command was carried out, does nothing.
    world.send("Note Hook", &payload).await;
    eventually("the event jobs to settle", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        let events: Vec<_> = all.iter().filter(|j| j.kind == "event").collect();
        (events.len() == 4
            && events
                .iter()
                .all(|j| matches!(j.state, JobState::Done | JobState::Dead)))
        .then_some(())
    })
    .await;
    let executes = jobs::list(&world.server.db, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.kind == "execute")
        .count();
    assert_eq!(executes, 1);
    world.server.stop().await;
}

#[tokio::test]
async fn a_developer_labels_gets_a_contract_and_approves_it() {
    let world = World::start(vec![
        Step::tool_call("p1", "read_file", json!({"path": "src/parse.rs"}))
            .when_tools(&["submit_contract"]),
        Step::tool_call("p2", "submit_contract", contract()).when_tools(&["submit_contract"]),
    ])
    .await;
    world.label(&world.developer).await;
    let note = world
        .wait_for_note("the contract note", |b| ContractMarker::find(b).is_some())
        .await;
    world.wait_for_state("awaiting_approval").await;
    // Evidence links use GitLab's blob URLs and line anchors.
    assert!(
        note.contains("/acme/tools/widgets/-/blob/") && note.contains("/src/parse.rs#L1-3"),
        "{note}"
    );
    // The planner read the file through a checkout cloned over git with the token.
    let read = world
        .models
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .nth(1)
        .unwrap();
    assert!(read.body.to_string().contains("x.parse().unwrap()"));

    // A reporter may not approve; the developer may.
    world.note(&world.reporter, "/approve").await;
    world
        .wait_for_note("the refusal", |b| {
            b.contains("@rex") && b.contains("can use `/approve`")
        })
        .await;
    world.note(&world.developer, "/approve").await;
    eventually("the execute job", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "execute")
    })
    .await;
    world.server.stop().await;
}

#[tokio::test]
async fn a_reporter_cannot_start_planning() {
    let world = World::start(Vec::new()).await;
    world.label(&world.reporter).await;
    let refusal = world
        .wait_for_note("the refusal", |b| b.contains("only people with"))
        .await;
    assert!(
        refusal.contains("@rex") && refusal.contains("**write**"),
        "{refusal}"
    );
    assert!(world.models.requests().is_empty());
    world.server.stop().await;
}

#[tokio::test]
async fn a_label_event_naming_a_developer_for_a_label_a_reporter_added_is_answered_as_the_reporter()
{
    let world = World::start(Vec::new()).await;
    // The reporter puts the label on; a holder of the webhook secret sends the hook with
    // the developer's name in it.
    world
        .gitlab
        .set_labels(PROJECT, ISSUE, &["planwright"], &world.reporter);
    world.deliver_label(&world.developer).await;
    let refusal = world
        .wait_for_note("the refusal", |b| b.contains("only people with"))
        .await;
    assert!(
        refusal.starts_with("@rex,") && refusal.contains("**write**"),
        "{refusal}"
    );
    let mut conn = world.server.db.pool.acquire().await.unwrap();
    let session = sessions::latest_for_issue(
        &mut conn,
        ForgeKind::Gitlab,
        &RepoName::parse(PROJECT).unwrap(),
        IssueNumber(ISSUE),
    )
    .await
    .unwrap();
    assert!(session.is_none(), "{session:?}");
    assert!(world.models.requests().is_empty());
    world.server.stop().await;
}

#[tokio::test]
async fn an_unlabel_event_naming_a_developer_for_a_label_a_reporter_removed_cancels_nothing() {
    let world = World::start(vec![
        Step::tool_call("p1", "submit_contract", contract()).when_tools(&["submit_contract"]),
    ])
    .await;
    world.label(&world.developer).await;
    world.wait_for_state("awaiting_approval").await;
    world
        .gitlab
        .set_labels(PROJECT, ISSUE, &[], &world.reporter);
    world.deliver_unlabel(&world.developer).await;
    eventually("the event jobs to settle", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        let events = all.iter().filter(|j| j.kind == "event").count();
        (events == 2
            && all
                .iter()
                .all(|j| j.kind != "event" || j.state == JobState::Done))
        .then_some(())
    })
    .await;
    let mut conn = world.server.db.pool.acquire().await.unwrap();
    let session = sessions::latest_for_issue(
        &mut conn,
        ForgeKind::Gitlab,
        &RepoName::parse(PROJECT).unwrap(),
        IssueNumber(ISSUE),
    )
    .await
    .unwrap()
    .unwrap();
    drop(conn);
    assert_eq!(session.state.as_str(), "awaiting_approval");
    // The developer's own removal does cancel.
    world
        .gitlab
        .set_labels(PROJECT, ISSUE, &["planwright"], &world.developer);
    world
        .gitlab
        .set_labels(PROJECT, ISSUE, &[], &world.developer);
    world.deliver_unlabel(&world.developer).await;
    world.wait_for_state("cancelled").await;
    world.server.stop().await;
}

use support::calc::{CALC, TEST_CALC, UNITTEST};

async fn calc_world(script: Vec<Step>, settings: &str) -> World {
    calc_world_on(script, settings, "anthropic:claude-sonnet-4-5").await
}

async fn calc_world_on(script: Vec<Step>, settings: &str, executor_model: &str) -> World {
    let mut script = script;
    script.insert(
        0,
        Step::tool_call("p1", "submit_contract", support::calc::contract(1))
            .when_tools(&["submit_contract"]),
    );
    let files = [
        ("calc.py", CALC),
        ("test_calc.py", TEST_CALC),
        (".gitlab/planwright.yml", settings),
    ];
    World::start_with(
        script,
        &files,
        &[
            ("PLANWRIGHT_EXECUTOR_MODEL", executor_model),
            ("PLANWRIGHT_SANDBOX_RELAY", env!("CARGO_BIN_EXE_planwright")),
        ],
    )
    .await
}

impl World {
    async fn approve_calc(&self) {
        self.label(&self.developer).await;
        self.wait_for_state("awaiting_approval").await;
        self.note(&self.developer, "/approve").await;
    }

    fn upstream(&self, args: &[&str]) -> String {
        support::git_http::git(&self.gitlab.git_dir(PROJECT), args)
    }
}

#[tokio::test]
async fn an_approved_contract_becomes_a_merge_request_with_the_real_test_results() {
    let world = calc_world(
        vec![
            Step::tool_call(
                "e1",
                "edit_file",
                json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}),
            )
            .when_tools(&["finish", "edit_file"]),
            Step::tool_call("e2", "finish", json!({"summary": "add now adds."}))
                .when_tools(&["finish"]),
            Step::tool_call(
                "r1",
                "verdict",
                json!({"accept": true, "findings": "As the contract asks."}),
            )
            .when_tools(&["verdict"]),
        ],
        &format!("test: {UNITTEST}\n"),
    )
    .await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    let mrs = world.gitlab.merge_requests(PROJECT);
    assert_eq!(mrs.len(), 1, "{mrs:#?}");
    let mr = &mrs[0];
    assert!(
        mr.source_branch.starts_with("planwright/12-"),
        "{}",
        mr.source_branch
    );
    assert_eq!(mr.target_branch, "main");
    let row = mr
        .description
        .lines()
        .find(|l| l.starts_with(&format!("| `{UNITTEST}` |")))
        .unwrap_or_else(|| panic!("no verification row in:\n{}", mr.description));
    let cells: Vec<&str> = row.split(" | ").collect();
    assert!(cells[1].contains("1 passed, 1 failed"), "{row}");
    assert!(
        cells[2].contains("✅") && cells[2].contains("2 passed, 0 failed"),
        "{row}"
    );
    assert!(mr.description.contains("Closes #12"), "{}", mr.description);
    let head = world.upstream(&["rev-parse", &mr.source_branch]);
    assert!(
        world
            .upstream(&["show", &format!("{head}:calc.py")])
            .contains("a + b")
    );
    let statuses = world.gitlab.commit_statuses(PROJECT, &head, "planwright");
    assert_eq!(
        statuses.last().map(|s| s.state.as_str()),
        Some("success"),
        "{statuses:#?}"
    );
    world
        .wait_for_note("the final status", |b| {
            b.contains("pull request opened") && b.contains(&format!("#{}", mr.iid))
        })
        .await;
    world.server.stop().await;
}

#[tokio::test]
async fn a_failed_run_with_on_failure_comment_reports_on_the_issue_and_pushes_nothing() {
    let settings = format!(
        "test: {UNITTEST}\non_failure: comment\nexecutor: command\nexecutor_command: \"echo '# tidied' >> calc.py; echo 'All tests pass.'\"\n"
    );
    let world = calc_world(
        vec![
            Step::tool_call(
                "r1",
                "verdict",
                json!({"accept": true, "findings": "Fine."}),
            )
            .when_tools(&["verdict"]),
        ],
        &settings,
    )
    .await;
    world.approve_calc().await;
    world.wait_for_state("failed").await;
    assert!(world.gitlab.merge_requests(PROJECT).is_empty());
    let branches = world.upstream(&["branch", "--list"]);
    assert!(!branches.contains("planwright/"), "{branches}");
    let report = world
        .wait_for_note("the report", |b| b.contains("Nothing was pushed"))
        .await;
    assert!(report.contains("1 passed, 1 failed"), "{report}");
    assert!(report.contains("test_add"), "{report}");
    world.server.stop().await;
}

/// The real Codex CLI (installed by `scripts/install-agents`) as the executor: in the
/// sandbox, reaching the scripted model only through the model proxy and relay.
#[tokio::test(flavor = "multi_thread")]
async fn the_codex_executor_carries_out_the_contract_through_the_proxy() {
    let world = calc_world_on(
        vec![
            Step::tool_call(
                "call_fix",
                "exec_command",
                json!({"cmd": "sed -i 's/a - b/a + b/' calc.py"}),
            )
            .when_tools(&["exec_command"])
            .when_last_contains("Make add return the sum"),
            Step::text("Fixed add in calc.py.").when_tools(&["exec_command"]),
            Step::tool_call(
                "r1",
                "verdict",
                json!({"accept": true, "findings": "As the contract asks."}),
            )
            .when_tools(&["verdict"]),
        ],
        &format!("test: {UNITTEST}\nexecutor: codex\n"),
        "openai:gpt-5",
    )
    .await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    let mrs = world.gitlab.merge_requests(PROJECT);
    assert_eq!(mrs.len(), 1, "{mrs:#?}");
    let head = world.upstream(&["rev-parse", &mrs[0].source_branch]);
    assert!(
        world
            .upstream(&["show", &format!("{head}:calc.py")])
            .contains("a + b")
    );
    let cli_calls: Vec<_> = world
        .models
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/responses")
        .collect();
    assert!(cli_calls.len() >= 2, "{}", cli_calls.len());
    for call in &cli_calls {
        assert_eq!(
            call.header("authorization"),
            Some("Bearer sk-openai-session-test")
        );
    }
    world.server.stop().await;
}
