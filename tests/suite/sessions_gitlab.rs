//! Session scenarios only GitLab has: label and note hooks whose payload names someone
//! else, hooks without an event UUID retried or sent again, its blob links, a failure
//! reported on the issue, and the Codex executor. The scenarios both forges share are in
//! `sessions`.

use insta::assert_snapshot;
use planwright::contract::ContractMarker;
use planwright::event::ForgeKind;
use planwright::store::jobs::{self, JobState};
use serde_json::json;

use crate::support::calc::UNITTEST;
use crate::support::eventually;
use crate::support::fake_gitlab::FakeUser;
use crate::support::model_server::Step;
use crate::support::redact::redact;
use crate::support::world::{
    GITLAB_ISSUE as ISSUE, GITLAB_PROJECT as PROJECT, Person, World, contract, submit_calc,
};

const GITLAB: ForgeKind = ForgeKind::Gitlab;

fn as_gitlab(person: &Person) -> FakeUser {
    FakeUser::new(&person.login, person.id)
}

/// The calc project with `settings`, its contract allowing one attempt.
async fn calc(script: Vec<Step>, settings: &str) -> World {
    calc_on(script, settings, "anthropic:claude-sonnet-4-5").await
}

async fn calc_on(script: Vec<Step>, settings: &str, executor_model: &str) -> World {
    let mut script = script;
    script.insert(0, submit_calc(1));
    let extra = [("PLANWRIGHT_EXECUTOR_MODEL", executor_model)];
    World::calc_with(GITLAB, script, settings, &extra).await
}

#[tokio::test]
async fn a_label_event_for_a_label_the_issue_does_not_carry_starts_nothing() {
    let world = World::start(GITLAB, vec![]).await;
    // Signed, and naming a developer, but nobody put the label on the issue.
    world
        .deliver_label(&world.maintainer, "label-hook", true)
        .await;
    eventually("the event job to settle", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        (!all.is_empty() && all.iter().all(|j| j.state == JobState::Done)).then_some(())
    })
    .await;
    let session = world.find_session().await;
    assert!(session.is_none(), "{session:?}");
    assert!(
        world.bot_comments().is_empty(),
        "{:?}",
        world.bot_comments()
    );
    world.server.stop().await;
}

#[tokio::test]
async fn an_approve_without_an_event_uuid_whose_first_handling_fails_is_carried_out_on_retry() {
    let world = World::start(
        GITLAB,
        vec![
            Step::tool_call(
                "p1",
                "submit_contract",
                contract("parse_array panics on a trailing comma."),
            )
            .when_tools(&["submit_contract"]),
        ],
    )
    .await;
    world.label(&world.maintainer, "label").await;
    world.wait_for_state("awaiting_approval").await;
    // The permission check comes after the comment is claimed: the first handling fails
    // there once the forge client's own four tries are spent, and the job's retry must
    // still act. The test server sends no event UUID.
    let members = format!(
        "/api/v4/projects/{}/members/all/{}",
        PROJECT.replace('/', "%2F"),
        world.maintainer.id
    );
    for _ in 0..4 {
        world.gitlab().fail_after_performing("GET", &members, 500);
    }
    world
        .comment(&world.maintainer, "/approve", "approve")
        .await;
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
    let statuses = world.gitlab().statuses("GET", &members);
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
        GITLAB,
        vec![
            Step::tool_call(
                "p1",
                "submit_contract",
                contract("parse_array panics on a trailing comma."),
            )
            .when_tools(&["submit_contract"]),
        ],
        &files,
        &[("PLANWRIGHT_JOB_MAX_ATTEMPTS", "1")],
    )
    .await;
    world.label(&world.maintainer, "label").await;
    world.wait_for_state("awaiting_approval").await;
    // GitLab is down for the permission check until the first delivery's job gives up.
    let members = format!(
        "/api/v4/projects/{}/members/all/{}",
        PROJECT.replace('/', "%2F"),
        world.maintainer.id
    );
    for _ in 0..4 {
        world.gitlab().fail_after_performing("GET", &members, 500);
    }
    let id = world
        .gitlab()
        .add_note(PROJECT, ISSUE, "/approve", as_gitlab(&world.maintainer));
    let mut payload = world.payload("note-hook.issue.json", &world.maintainer);
    payload["object_attributes"]["id"] = json!(id);
    payload["object_attributes"]["note"] = json!("/approve");
    payload["issue"]["iid"] = json!(ISSUE);
    world.send_gitlab("Note Hook", &payload).await;
    eventually("the first delivery's job to give up", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "event" && j.state == JobState::Dead)
    })
    .await;
    // GitLab sends the hook again, as it does after a failed delivery.
    world.send_gitlab("Note Hook", &payload).await;
    eventually("the execute job", || async {
        jobs::list(&world.server.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "execute")
    })
    .await;
    // A third delivery of the same comment, after the command was carried out, does nothing.
    world.send_gitlab("Note Hook", &payload).await;
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
async fn a_contract_links_its_evidence_with_gitlabs_blob_urls() {
    let world = World::start(
        GITLAB,
        vec![
            Step::tool_call("p1", "read_file", json!({"path": "src/parse.rs"}))
                .when_tools(&["submit_contract"]),
            Step::tool_call(
                "p2",
                "submit_contract",
                contract("parse_array panics on a trailing comma."),
            )
            .when_tools(&["submit_contract"]),
        ],
    )
    .await;
    world.label(&world.maintainer, "label").await;
    let note = world
        .wait_for_comment("the contract note", |b| ContractMarker::find(b).is_some())
        .await;
    world.wait_for_state("awaiting_approval").await;
    // Evidence links use GitLab's blob URLs and line anchors.
    assert_snapshot!(redact(&note), @r#"
    ## Build contract v1 · `[hash]`

    parse\_array panics on a trailing comma.

    ### Diagnosis
    parse\_array unwraps every element, including the empty last one.

    **Evidence**
    - [`src/parse.rs:1-3`](http://[loopback]/acme/tools/widgets/-/blob/[sha]/src/parse.rs#L1-3) — unwrap on every element

    ### Change
    Skip empty elements.

    | file | action | why |
    |---|---|---|
    | `src/parse.rs` | modify | filter empties |

    ### Verification
    planwright runs these itself, before and after the change (with the repository's test commands):
    - `cargo test`

    **New tests**
    - trailing\_comma

    ### Routing
    risk **low** · budget $5.00

    Planned by `anthropic:claude-sonnet-4-5`; reviewed by `anthropic:claude-sonnet-4-5`.
    Planned against `main` at `[hash]`.

    ### Repository settings
    As the base commit holds them (`defaults`, settings `[hash]`); approving binds these too.

    - executor: `builtin`
    - network allowed during setup: `crates.io`, `static.crates.io`, `index.crates.io`
    - protected paths: `.github/workflows/**`, `.gitlab-ci.yml`
    - setup: `cargo fetch`
    - tests: `cargo test`
    - re-runs of a failing test: 2
    - quarantined tests: none
    - environment: the planwright host's tools (no image named)

    ---
    Reply `/approve` to build exactly this version, `/revise <what to change>` for a new version, or `/cancel` to stop. (`@planwright-bot approve` works too.) Only the version shown here is approved; edits to this comment change nothing.

    <!-- planwright:contract {"session":"[uuid]","version":1,"sha256":"[sha256]"} -->
    "#);
    // The planner read the file through a checkout cloned over git with the token.
    let read = world
        .models
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .nth(1)
        .unwrap();
    assert!(read.body.to_string().contains("x.parse().unwrap()"));

    world.server.stop().await;
}

#[tokio::test]
async fn a_label_event_naming_a_developer_for_a_label_a_reporter_added_is_answered_as_the_reporter()
{
    let world = World::start(GITLAB, Vec::new()).await;
    // The reporter puts the label on; a holder of the webhook secret sends the hook with
    // the developer's name in it.
    world
        .gitlab()
        .set_labels(PROJECT, ISSUE, &["planwright"], &as_gitlab(&world.reader));
    world
        .deliver_label(&world.maintainer, "label-hook", true)
        .await;
    let refusal = world
        .wait_for_comment("the refusal", |b| b.contains("only people with"))
        .await;
    assert!(
        refusal.starts_with("@rita,") && refusal.contains("**write**"),
        "{refusal}"
    );
    let session = world.find_session().await;
    assert!(session.is_none(), "{session:?}");
    assert!(world.models.requests().is_empty());
    world.server.stop().await;
}

#[tokio::test]
async fn an_unlabel_event_naming_a_developer_for_a_label_a_reporter_removed_cancels_nothing() {
    let world = World::start(
        GITLAB,
        vec![
            Step::tool_call(
                "p1",
                "submit_contract",
                contract("parse_array panics on a trailing comma."),
            )
            .when_tools(&["submit_contract"]),
        ],
    )
    .await;
    world.label(&world.maintainer, "label").await;
    world.wait_for_state("awaiting_approval").await;
    world
        .gitlab()
        .set_labels(PROJECT, ISSUE, &[], &as_gitlab(&world.reader));
    world
        .deliver_label(&world.maintainer, "unlabel-hook", false)
        .await;
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
    let session = world.find_session().await.unwrap();
    assert_eq!(session.state.as_str(), "awaiting_approval");
    // The developer's own removal does cancel.
    world.gitlab().set_labels(
        PROJECT,
        ISSUE,
        &["planwright"],
        &as_gitlab(&world.maintainer),
    );
    world
        .gitlab()
        .set_labels(PROJECT, ISSUE, &[], &as_gitlab(&world.maintainer));
    world
        .deliver_label(&world.maintainer, "unlabel-hook", false)
        .await;
    world.wait_for_state("cancelled").await;
    world.server.stop().await;
}

#[tokio::test]
async fn a_failed_run_with_on_failure_comment_reports_on_the_issue_and_pushes_nothing() {
    let settings = format!(
        "test: {UNITTEST}\non_failure: comment\nexecutor: command\nexecutor_command: \"echo '# tidied' >> calc.py; echo 'All tests pass.'\"\n"
    );
    let world = calc(
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
    assert!(world.gitlab().merge_requests(PROJECT).is_empty());
    let branches = world.upstream(&["branch", "--list"]);
    assert!(!branches.contains("planwright/"), "{branches}");
    let report = world
        .wait_for_comment("the report", |b| b.contains("Nothing was pushed"))
        .await;
    assert_snapshot!(redact(&report), @r#"
    <!-- planwright:report {"session":"[uuid]","sha256":"[sha256]","version":1} -->
    The run did not pass: Contract check still fails: `python3 -m unittest -v`. Nothing was pushed.

    ### What and why

    add subtracts instead of adding.

    **Goal:** Make add return the sum.

    Implements the approved [build contract v1 (`[hash]`)](http://[loopback]/acme/tools/widgets/-/issues/12#note_[id]), approved by @maria.

    ### Verification

    Ran on the planwright host's tools: no image is named by the repository's `environment.image`, a devcontainer, or the deployment's ENVIRONMENT_IMAGE.

    | command | baseline | after |
    |---|---|---|
    | `python3 -m unittest -v` | ❌ 1 passed, 1 failed · exit 1 · [duration]; re-run of the failing tests: ❌ 0 passed, 1 failed, then ❌ 0 passed, 1 failed | ❌ 1 passed, 1 failed · exit 1 · [duration] |

    **Pre-existing failures (1)**: fail on the base too.

    - `test_calc.TestCalc.test_add` in `python3 -m unittest -v`: `AssertionError: -1 != 5`

    <details><summary>Full test report</summary>

    **Verification passed: 1 pre-existing**

    | command | baseline | after |
    |---|---|---|
    | `python3 -m unittest -v` | ❌ 1 passed, 1 failed · exit 1 · [duration]; re-run of the failing tests: ❌ 0 passed, 1 failed, then ❌ 0 passed, 1 failed | ❌ 1 passed, 1 failed · exit 1 · [duration] |

    ### Pre-existing failures (1)

    _fail on the base too._

    - `test_calc.TestCalc.test_add` in `python3 -m unittest -v` at `test_calc.py:8`

      ```text
      AssertionError: -1 != 5
      ```



    </details>

    ### Review

    **Accepted** by the reviewer.

    ~~~text
    Fine.
    ~~~

    ### Cost

    | role | model | calls | input tokens | output tokens | cost |
    |---|---|---:|---:|---:|---:|
    | planner | `anthropic:claude-sonnet-4-5` | 1 | 10 | 5 | $0.0001 |
    | reviewer | `anthropic:claude-sonnet-4-5` | 1 | 10 | 5 | $0.0001 |
    | **total** | | | | | **$0.0002** |

    Attempts: 1 of 1.
    "#);
    world.server.stop().await;
}

/// The real Codex CLI (installed by `scripts/install-agents`) as the executor: in the
/// sandbox, reaching the scripted model only through the model proxy and relay.
#[tokio::test(flavor = "multi_thread")]
async fn the_codex_executor_carries_out_the_contract_through_the_proxy() {
    let world = calc_on(
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
    let mrs = world.gitlab().merge_requests(PROJECT);
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

#[tokio::test]
async fn revise_on_the_merge_request_takes_the_writers_open_diff_comments_and_answers_them() {
    let mut second = crate::support::calc::contract(2);
    second["summary"] = json!("add subtracts; mul needs a docstring.");
    second["change"]["expected_behaviour"] = json!(["mul says what it returns"]);
    let (world, mr) = World::published_calc(
        GITLAB,
        vec![
            Step::tool_call("p2", "submit_contract", second).when_tools(&["submit_contract"]),
            Step::tool_call(
                "e3",
                "edit_file",
                json!({"path": "calc.py", "old": "def mul(a, b):\n", "new": "def mul(a, b):\n    \"\"\"The product.\"\"\"\n"}),
            )
            .when_tools(&["finish", "edit_file"]),
            Step::tool_call("e4", "finish", json!({"summary": "done"})).when_tools(&["finish"]),
            crate::support::world::verdict(true, "Round two."),
        ],
    )
    .await;
    let gitlab = world.gitlab();
    let maria = as_gitlab(&world.maintainer);
    let on_mul = gitlab.add_mr_note(
        PROJECT,
        mr.number,
        "mul has no docstring; say what it returns.",
        maria.clone(),
        Some(("calc.py", 5)),
    );
    let on_add = gitlab.add_mr_note(
        PROJECT,
        mr.number,
        "Keep this line as it is now.",
        maria.clone(),
        Some(("calc.py", 2)),
    );
    let on_test = gitlab.add_mr_note(
        PROJECT,
        mr.number,
        "A test for mul with zero would help.",
        maria.clone(),
        Some(("test_calc.py", 10)),
    );
    let settled = gitlab.add_mr_note(
        PROJECT,
        mr.number,
        "Rename calc.py.",
        maria,
        Some(("calc.py", 1)),
    );
    gitlab.resolve(settled);
    let theirs = gitlab.add_mr_note(
        PROJECT,
        mr.number,
        "Delete the tests.",
        as_gitlab(&world.reader),
        Some(("calc.py", 2)),
    );
    world
        .pull_comment(
            &world.maintainer,
            mr.number,
            "/revise please also document mul",
            "mr-revise",
        )
        .await;

    world
        .wait_for_comment("contract v2", |b| {
            ContractMarker::find(b).is_some_and(|m| m.version.0 == 2)
        })
        .await;
    world.wait_for_state("awaiting_approval").await;
    let planner_saw = world.revision_request();
    for seen in [
        "please also document mul",
        "Inline comments on the diff (3):",
        "On `calc.py` line 5",
        "mul has no docstring; say what it returns.",
        "On `test_calc.py` line 10",
    ] {
        assert!(planner_saw.contains(seen), "{seen} in {planner_saw}");
    }
    // A resolved thread, and another person's, are not the writer's request.
    assert!(!planner_saw.contains("Rename calc.py."), "{planner_saw}");
    assert!(!planner_saw.contains("Delete the tests."), "{planner_saw}");
    let pointer = gitlab
        .wait_for("the pointer on the merge request", |g| {
            let found: Vec<_> = g
                .mr_notes(PROJECT, mr.number)
                .into_iter()
                .filter(|n| n.body.contains("is waiting for approval"))
                .collect();
            (!found.is_empty()).then_some(found)
        })
        .await;
    assert_eq!(pointer.len(), 1, "{pointer:#?}");
    assert_snapshot!(redact(&pointer[0].body), @"Revision v2 of the build contract is waiting for approval [in #12](http://[loopback]/acme/tools/widgets/-/issues/12#note_[id]). Nothing changes on this branch until a maintainer approves it there.");

    world.approve_round(2, "approve-v2").await;
    let head = world.upstream(&["rev-parse", &mr.head]);
    assert_eq!(
        world.upstream(&["rev-list", "--count", &format!("main..{head}")]),
        "2"
    );
    // Answered in their own discussions: the two on calc.py, which the round changed.
    let replies = eventually("the discussions to be answered", || async {
        let notes = gitlab.mr_notes(PROJECT, mr.number);
        let replies: Vec<_> = notes
            .iter()
            .filter(|n| n.author.username == crate::support::fake_gitlab::BOT_USERNAME)
            .filter(|n| n.body.starts_with("Addressed in"))
            .cloned()
            .collect();
        (replies.len() >= 2).then_some(replies)
    })
    .await;
    let of = |id: i64| {
        gitlab
            .mr_notes(PROJECT, mr.number)
            .into_iter()
            .find(|n| n.id == id)
            .unwrap()
            .discussion
    };
    let threads: Vec<String> = replies.iter().map(|r| r.discussion.clone()).collect();
    assert_eq!(threads, [of(on_mul), of(on_add)], "{replies:#?}");
    assert!(!threads.contains(&of(on_test)) && !threads.contains(&of(theirs)));
    for reply in &replies {
        assert_eq!(
            reply.body,
            format!("Addressed in {} (build contract v2).", &head[..12])
        );
    }
    world.server.stop().await;
}

#[tokio::test]
async fn a_failed_pipeline_on_the_merge_request_is_reported_once_and_the_next_round_gets_it() {
    let fixtures = crate::support::fixtures().join("test-logs");
    let log = std::fs::read_to_string(fixtures.join("go_test_v_mixed.log")).unwrap();
    let truth: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures.join("go_test_v_mixed.truth.json")).unwrap(),
    )
    .unwrap();
    let failing: Vec<&str> = truth["failing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut second = crate::support::calc::contract(2);
    second["summary"] = json!("add subtracts; the Go tests fail in the pipeline.");
    let (world, mr) = World::published_calc(
        GITLAB,
        vec![Step::tool_call("p2", "submit_contract", second).when_tools(&["submit_contract"])],
    )
    .await;
    let gitlab = world.gitlab();
    let head = world.upstream(&["rev-parse", &mr.head]);
    // A long log: only its end is read, and that is where the runner's summary is.
    let long = format!("{}{log}", "downloading dependencies…\n".repeat(60_000));
    let pipeline = gitlab.add_pipeline(
        PROJECT,
        &head,
        "failed",
        &[
            ("build", "success", false, "ok"),
            ("go-test", "failed", false, long.as_str()),
            ("lint", "failed", true, "golint: 99 warnings"),
        ],
    );
    let deliver = async |id: i64, sha: &str| {
        let mut payload = world.payload("pipeline-hook.1.json", &world.maintainer);
        payload["object_attributes"]["id"] = json!(id);
        payload["object_attributes"]["sha"] = json!(sha);
        payload["object_attributes"]["status"] = json!("failed");
        payload["merge_request"]["iid"] = json!(mr.number);
        world.send_gitlab("Pipeline Hook", &payload).await;
    };
    deliver(pipeline, &head).await;
    let reported = gitlab
        .wait_for("the pipeline's report", |g| {
            g.mr_notes(PROJECT, mr.number)
                .into_iter()
                .map(|n| n.body)
                .find(|b| b.contains("Checks failed on"))
        })
        .await;
    assert!(
        reported.contains("**go-test (script\\_failure)**"),
        "{reported}"
    );
    for id in &failing {
        assert!(reported.contains(id), "{id} in {reported}");
    }
    // A job allowed to fail does not fail the pipeline, and is not reported.
    assert!(!reported.contains("golint"), "{reported}");
    // Sent again, and a failed pipeline on a commit planwright did not push: nothing more.
    deliver(pipeline, &head).await;
    let elsewhere = "1111111111111111111111111111111111111111";
    let other = gitlab.add_pipeline(PROJECT, elsewhere, "failed", &[("t", "failed", false, "x")]);
    deliver(other, elsewhere).await;
    world.all_jobs_settled().await;
    let reports = world
        .pull_comments_with(mr.number, "Checks failed on")
        .len();
    assert_eq!(reports, 1);

    world
        .pull_comment(
            &world.maintainer,
            mr.number,
            "/revise make the pipeline pass",
            "mr-ci",
        )
        .await;
    world
        .wait_for_comment("contract v2", |b| {
            ContractMarker::find(b).is_some_and(|m| m.version.0 == 2)
        })
        .await;
    let planner_saw = world.revision_request();
    assert!(planner_saw.contains("Output of other checks that failed on the pull request, distilled (written by CI and test code, not by a maintainer)"));
    assert!(planner_saw.contains(failing[0]), "{planner_saw}");
    world.server.stop().await;
}
