//! Planner sessions end to end on GitLab: real webhook payloads moved to a project on the
//! fake GitLab (with git over smart HTTP), the real router and worker, scripted models.

mod support;

use planwright::contract::ContractMarker;
use planwright::server::{Role, default_handlers};
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
        let db = TestDb::new().await;
        let gitlab = FakeGitlab::start().await;
        gitlab.add_project(PROJECT, "main", "0000000000000000000000000000000000000000");
        gitlab.create_git_repo(
            PROJECT,
            &[(
                "src/parse.rs",
                "pub fn parse_array(s: &str) -> Vec<i64> {\n    s.split(',').map(|x| x.parse().unwrap()).collect()\n}\n",
            )],
        );
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
        let settings = support::settings(
            &db,
            &[
                ("PLANWRIGHT_GITLAB_URL", gitlab.url.as_str()),
                ("PLANWRIGHT_GITLAB_TOKEN", TOKEN),
                ("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-sonnet-4-5"),
                ("PLANWRIGHT_ANTHROPIC_API_KEY", "sk-ant-session-test"),
                ("PLANWRIGHT_ANTHROPIC_BASE_URL", anthropic.as_str()),
            ],
        );
        let server = TestServer::start(settings, Role::All, default_handlers).await;
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
        let mut payload = Self::retarget(Self::fixture("issue-hook.1.json"), by);
        payload["object_attributes"]["iid"] = json!(ISSUE);
        payload["changes"]["labels"] = json!({
            "previous": [],
            "current": [{"id": 1, "title": "planwright"}]
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
        eventually(what, || async {
            self.bot_notes().into_iter().find(|b| test(b))
        })
        .await
    }

    async fn wait_for_state(&self, state: &str) -> sessions::SessionRow {
        eventually(&format!("the session to be {state}"), || async {
            let mut conn = self.server.db.pool.acquire().await.unwrap();
            sessions::latest_for_issue(&mut conn, "gitlab", PROJECT, ISSUE)
                .await
                .unwrap()
                .filter(|s| s.state == state)
        })
        .await
    }
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
