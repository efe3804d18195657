//! The executor escalation ladder end to end with the builtin executor and scripted
//! models: a verified failure on the cheap rung hands the next attempt to the rung above
//! (from the base, with a distilled account of the failure and no transcript), the pull
//! request says which rung produced the result and what each cost, a climb the budget
//! cannot cover stops with the work kept, and a ladder the deployment cannot climb is a
//! settings error on the issue with its line.

use planwright::event::ForgeKind;
use planwright::store::model_usage;
use serde_json::{Value, json};

use crate::support::calc::UNITTEST;
use crate::support::model_server::{ScriptUsage, Step};
use crate::support::world::{World, submit_calc, verdict};

const CHEAP: &str = "openai:gpt-5-mini";
const DEAR: &str = "anthropic:claude-sonnet-4-5";

/// Settings whose ladder climbs from `CHEAP` to `DEAR`, with `extra` after it.
fn ladder_settings(extra: &str) -> String {
    format!(
        "test: {UNITTEST}\nescalation:\n  - executor: builtin\n    model: \"{CHEAP}\"\n  - executor: builtin\n    model: \"{DEAR}\"\n{extra}"
    )
}

/// The builtin executor replaces `old` with `new` in `calc.py`.
fn edit(id: &str, old: &str, new: &str) -> Step {
    Step::tool_call(
        id,
        "edit_file",
        json!({"path": "calc.py", "old": old, "new": new}),
    )
    .when_tools(&["finish", "edit_file"])
}

/// The builtin executor finishes, claiming `summary`.
fn finish_saying(id: &str, summary: &str) -> Step {
    Step::tool_call(id, "finish", json!({"summary": summary})).when_tools(&["finish"])
}

/// What the cheap rung gets wrong: `add` multiplies, and its own account says otherwise.
const CLAIM: &str = "CLAIMED-FIXED: add is correct now";

/// The executor requests the model server received, in order, with the model each named.
fn executor_requests(world: &World) -> Vec<(String, Value)> {
    world
        .models
        .requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains("\"edit_file\""))
        .map(|r| {
            (
                r.body["model"].as_str().unwrap_or_default().to_owned(),
                r.body,
            )
        })
        .collect()
}

#[tokio::test]
async fn a_verified_failure_on_the_cheap_rung_is_fixed_one_rung_up() {
    let world = World::calc(
        ForgeKind::Github,
        vec![
            submit_calc(3),
            edit("e1", "return a - b", "return a * b"),
            finish_saying("e2", CLAIM),
            verdict(false, "REVIEWED: add multiplies instead of adding."),
            edit("e3", "return a - b", "return a + b"),
            finish_saying("e4", "add adds."),
            verdict(true, "The change the contract asks for."),
        ],
        &ladder_settings(""),
    )
    .await;
    world.label(&world.maintainer, "ladder-label").await;
    world.wait_for_state("awaiting_approval").await;
    // The contract shows the ladder before approval.
    let contract = world.contract_comments().pop().unwrap();
    assert!(contract.contains("**Escalation ladder**"), "{contract}");
    assert!(
        contract.contains(&format!(
            "| 1 (starts here) | `builtin` | `{CHEAP}` | 0.25 / 2.00 |"
        )),
        "{contract}"
    );
    assert!(
        contract.contains(&format!("| 2 | `builtin` | `{DEAR}` | 3.00 / 15.00 |")),
        "{contract}"
    );
    world
        .comment(&world.maintainer, "/approve", "ladder-approve")
        .await;
    world.wait_for_state("pr_opened").await;

    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let body = &pulls[0].body;
    assert!(!pulls[0].draft, "{body}");
    assert!(body.contains("### Escalation ladder"), "{body}");
    assert!(
        body.contains(&format!("produced on rung 2 (`builtin` · `{DEAR}`)")),
        "{body}"
    );
    assert!(
        body.contains(&format!("| 1 | `builtin` | `{CHEAP}` | 1 |")),
        "{body}"
    );
    assert!(
        body.contains(&format!("| 2 | `builtin` | `{DEAR}` | 1 |")),
        "{body}"
    );
    let head = world.upstream(&["rev-parse", &pulls[0].head]);
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(calc.contains("return a + b"), "{calc}");
    // The cheap rung's work is kept on a branch of its own.
    let kept = world.upstream(&["show", "planwright/7-partial-1:calc.py"]);
    assert!(kept.contains("return a * b"), "{kept}");

    // Each attempt used one model: the cheap one, then the dear one, never mixed.
    let requests = executor_requests(&world);
    let models: Vec<&str> = requests.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        models,
        [
            "gpt-5-mini",
            "gpt-5-mini",
            "claude-sonnet-4-5",
            "claude-sonnet-4-5"
        ]
    );
    let runs = world.runs().await;
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let calls = model_usage::list_by_session(&world.server.db, &world.session().await.id)
        .await
        .unwrap();
    for (run, model) in runs.iter().zip(["gpt-5-mini", "claude-sonnet-4-5"]) {
        let used: Vec<&str> = calls
            .iter()
            .filter(|c| c.run_id.as_deref() == Some(run.id.as_str()))
            .map(|c| c.model.as_str())
            .collect();
        assert!(
            !used.is_empty() && used.iter().all(|m| *m == model),
            "{used:?}"
        );
    }

    // The second rung was told what failed, not what the first one said or did.
    let second = requests[2].1.to_string();
    assert!(second.contains("An earlier attempt failed"), "{second}");
    assert!(second.contains("REVIEWED: add multiplies"), "{second}");
    assert!(second.contains("`calc.py` (modified)"), "{second}");
    assert!(
        second.contains("1 lines added, 1 removed, in 1 files"),
        "{second}"
    );
    assert!(second.contains("planwright/7-partial-1"), "{second}");
    assert!(!second.contains("CLAIMED-FIXED"), "{second}");
    assert!(!second.contains("return a * b"), "{second}");
    // The status comment names the rung that produced the result.
    let status = world
        .wait_for_comment("the status naming the rung", |b| {
            b.contains("produced on rung 2")
        })
        .await;
    assert!(status.contains("### Escalation ladder"), "{status}");
    world.server.stop().await;
}

#[tokio::test]
async fn a_climb_the_budget_cannot_cover_stops_with_the_work_kept() {
    // The cheap rung's calls are large: the same tokens on the dear rung cost more than
    // the budget has left.
    let large = ScriptUsage {
        input: 1_000_000,
        output: 100_000,
        ..ScriptUsage::default()
    };
    let world = World::calc(
        ForgeKind::Github,
        vec![
            submit_calc(3),
            edit("e1", "return a - b", "return a * b").usage(large),
            finish_saying("e2", CLAIM).usage(large),
            verdict(false, "add multiplies."),
        ],
        &ladder_settings("budget_usd: 2\n"),
    )
    .await;
    world.approve_calc().await;
    let session = world.wait_for_state("failed").await;
    let failure = session.failure.unwrap_or_default();
    // The estimate is the cheap attempt's tokens, as recorded, at the dear rung's prices.
    let calls = model_usage::list_by_session(&world.server.db, &session.id)
        .await
        .unwrap();
    let run = &world.runs().await[0];
    let (input, output) = calls
        .iter()
        .filter(|c| c.run_id.as_deref() == Some(run.id.as_str()))
        .fold((0, 0), |(i, o), c| {
            (i + c.input_tokens, o + c.output_tokens)
        });
    assert!(input >= 2_000_000, "{input}");
    let usd = (input as f64 * 3.0 + output as f64 * 15.0) / 1_000_000.0;
    assert!(
        failure.contains(&format!(
            "rung 2 (`builtin` · `{DEAR}`), would cost about ${usd:.4}"
        )),
        "{failure}"
    );
    assert!(failure.contains("the ladder stops here"), "{failure}");
    // The work is kept as a draft, and the dear model was never asked.
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(pulls[0].draft);
    let head = world.upstream(&["rev-parse", &pulls[0].head]);
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(calc.contains("return a * b"), "{calc}");
    let models: Vec<String> = executor_requests(&world)
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(models, ["gpt-5-mini", "gpt-5-mini"]);
    world.server.stop().await;
}

/// The failure the status comment shows for a session whose settings are refused.
async fn settings_failure(settings: &str) -> String {
    let world = World::calc(ForgeKind::Github, vec![submit_calc(3)], settings).await;
    world.label(&world.maintainer, "ladder-label").await;
    let session = world.wait_for_state("failed").await;
    // Refused before any model was paid.
    assert!(world.models.requests().is_empty());
    world.server.stop().await;
    session.failure.unwrap_or_default()
}

#[tokio::test]
async fn a_ladder_the_deployment_cannot_climb_is_a_settings_error_with_its_line() {
    let cheaper = format!(
        "test: {UNITTEST}\nescalation:\n  - executor: builtin\n    model: \"{DEAR}\"\n  - executor: builtin\n    model: \"{CHEAP}\"\n"
    );
    let failure = settings_failure(&cheaper).await;
    assert!(
        failure.contains("`.github/planwright.yml` line 5: `escalation`: rung 2 (`openai:gpt-5-mini`): costs less than rung 1"),
        "{failure}"
    );
    let unpriced = format!(
        "test: {UNITTEST}\nescalation:\n  - executor: builtin\n    model: \"openai:gpt-4o-mini\"\n  - executor: builtin\n    model: \"{DEAR}\"\n"
    );
    let failure = settings_failure(&unpriced).await;
    assert!(
        failure.contains("`.github/planwright.yml` line 3: `escalation`: rung 1 (`openai:gpt-4o-mini`): has no price"),
        "{failure}"
    );
}

#[tokio::test]
async fn an_overloaded_provider_on_the_cheap_rung_is_tried_again_on_the_same_rung() {
    // Every call of the client's own retries is answered overloaded: the attempt fails
    // for the infrastructure, not for its work.
    let overloaded =
        || Step::error(529, "Overloaded", Some(0)).when_tools(&["finish", "edit_file"]);
    let mut script = vec![submit_calc(3)];
    script.extend((0..4).map(|_| overloaded()));
    script.extend([
        edit("e1", "return a - b", "return a + b"),
        finish_saying("e2", "add adds."),
        verdict(true, "The change the contract asks for."),
    ]);
    let retry_soon = [("PLANWRIGHT_JOB_RETRY_BASE_MS", "50")];
    let world =
        World::calc_with(ForgeKind::Github, script, &ladder_settings(""), &retry_soon).await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    assert_eq!(world.models.unused_steps(), 0);
    // Only the cheap model was asked to execute, before and after the failure.
    let models: Vec<String> = executor_requests(&world)
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(models, ["gpt-5-mini"; 6]);
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["failed", "published"], "{runs:#?}");
    let body = &world.pulls()[0].body;
    assert!(
        body.contains(&format!("produced on rung 1 (`builtin` · `{CHEAP}`)")),
        "{body}"
    );
    assert!(!body.contains("| 2 | `builtin`"), "{body}");
    world.server.stop().await;
}

#[tokio::test]
async fn the_deployments_default_climbs_the_tiers_of_a_repository_that_names_no_ladder() {
    let settings = format!(
        "test: {UNITTEST}\nmodels:\n  executor:\n    low: \"{CHEAP}\"\n    high: \"{DEAR}\"\n"
    );
    let escalate = [("PLANWRIGHT_ESCALATE", "1")];
    let world = World::calc_with(
        ForgeKind::Github,
        vec![submit_calc(3)],
        &settings,
        &escalate,
    )
    .await;
    world.label(&world.maintainer, "ladder-label").await;
    world.wait_for_state("awaiting_approval").await;
    let contract = world.contract_comments().pop().unwrap();
    // low, then medium (the deployment's executor model, the same as high here), then
    // high, which adds no rung.
    for row in [
        format!("| 1 (starts here) | `builtin` | `{CHEAP}` |"),
        format!("| 2 | `builtin` | `{DEAR}` |"),
    ] {
        assert!(contract.contains(&row), "{contract}");
    }
    assert!(!contract.contains("| 3 |"), "{contract}");
    world.server.stop().await;
}

/// Writes `n` judged outcomes of `model` at low risk on the world's repository, the first
/// `verified` of them verified.
async fn seed_outcomes(world: &World, model: &str, n: usize, verified: usize) {
    use planwright::contract::Risk;
    use planwright::ids::{RepoName, RunId};
    use planwright::store::outcomes::{NewOutcome, OutcomeSource, ReviewerVerdict, RoleSpend};
    let repo = RepoName::parse(world.repo).unwrap();
    for i in 0..n {
        let run = RunId::generate();
        let ok = i < verified;
        world
            .server
            .db
            .record_outcome(&NewOutcome {
                run: &run,
                forge: ForgeKind::Github,
                repo: &repo,
                session: None,
                version: None,
                risk: Risk::Low,
                executor: "builtin",
                model: Some(model),
                rung: 0,
                verified: ok,
                judged: true,
                why_not: (!ok).then_some("verification failed"),
                verdict: ReviewerVerdict::None,
                attempt: 1,
                spend: RoleSpend::default(),
                wall_ms: 1_000,
                files_changed: Some(1),
                source: OutcomeSource::Run,
            })
            .await
            .unwrap();
    }
}

/// The contract comment a `routing: auto` repository gets after `seeded` verified
/// outcomes of the cheap rung (out of as many), its risk's tier being the dear rung.
async fn auto_routed_contract(seeded: usize) -> String {
    let settings = ladder_settings(&format!(
        "models:\n  executor:\n    low: \"{DEAR}\"\nrouting: auto\nrouting_min_runs: 4\n"
    ));
    let world = World::calc(ForgeKind::Github, vec![submit_calc(3)], &settings).await;
    seed_outcomes(&world, CHEAP, seeded, seeded).await;
    world.label(&world.maintainer, "auto-label").await;
    world.wait_for_state("awaiting_approval").await;
    world.contract_comments().pop().unwrap()
}

#[tokio::test]
async fn routing_auto_starts_on_the_cheapest_rung_with_a_record_here_and_says_why() {
    // Six of six verified clears the bar: the cheap rung starts, and the contract says why.
    let contract = auto_routed_contract(6).await;
    assert!(
        contract.contains(&format!(
            "| 1 (starts here) | `builtin` | `{CHEAP}` | 0.25 / 2.00 |"
        )),
        "{contract}"
    );
    assert!(
        contract.contains("Starts on rung 1: 6 of 6 verified at low risk here; "),
        "{contract}"
    );
    // Two runs are too few to trust: the rung the risk picks starts, and it says so.
    let contract = auto_routed_contract(2).await;
    assert!(
        contract.contains(&format!("| 2 (starts here) | `builtin` | `{DEAR}` |")),
        "{contract}"
    );
    assert!(
        contract.contains(&format!(
            "Starts on rung 2: no rung has 4 runs at low risk here yet: starts on the default, {DEAR} (builtin)"
        )),
        "{contract}"
    );
}
