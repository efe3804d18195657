//! No work is lost: an executor stopped at its time limit leaves its change in a draft pull
//! request (or, with `on_failure: comment`, on a branch of its own linked from the
//! failure), `/retry continue` carries on from that change and `/retry` starts again from
//! the base, on GitHub and on GitLab alike.

use planwright::event::ForgeKind;
use planwright::store::jobs;

use crate::support::calc::{ASKS_THEN_FIXES, UNITTEST};
use crate::support::eventually;
use crate::support::model_server::Step;
use crate::support::world::{Pull, World, submit_calc, verdict};

/// How long an attempt may run here: the unfinished command sleeps far longer.
const WALL: &str = "5";

/// Settings running `line` as the `command` executor, with `extra` settings after it.
fn settings(line: &str, extra: &str) -> String {
    format!("test: {UNITTEST}\nexecutor: command\nexecutor_command: >-\n  {line}\n{extra}")
}

/// Starts the change and hangs until the time limit stops it, unless the contract says it
/// continues earlier work and the checkout holds it: then it finishes the change.
const CONTINUES_OR_HANGS: &str = "if grep -q 'continues earlier unfinished work' \"$PLANWRIGHT_CONTRACT\" && grep -q started calc.py; then sed -i 's/a - b/a + b/' calc.py; else echo '# started' >> calc.py; sleep 600; fi";

/// The calc world with `settings` and a tiny executor time limit, approved.
async fn approved(on: ForgeKind, script: Vec<Step>, settings: &str) -> World {
    let limit = [("PLANWRIGHT_EXECUTOR_TIMEOUT_SECS", WALL)];
    let world = World::calc_with(on, script, settings, &limit).await;
    world.approve_calc().await;
    world
}

/// The session's only pull request.
fn only_pull(world: &World) -> Pull {
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    pulls.into_iter().next().unwrap()
}

/// The failure written into the status comment.
async fn failure_status(world: &World) -> String {
    world
        .wait_for_comment("the failure in the status", |b| {
            b.contains("**planwright** · failed")
        })
        .await
}

async fn an_executor_stopped_at_its_time_limit_leaves_a_draft_with_its_change(on: ForgeKind) {
    let world = approved(on, vec![submit_calc(1)], &settings(CONTINUES_OR_HANGS, "")).await;
    let session = world.wait_for_state("failed").await;
    let failure = session.failure.unwrap_or_default();
    assert!(
        failure.contains("did not finish within 5 seconds"),
        "{failure}"
    );
    let pull = only_pull(&world);
    assert!(pull.draft, "{pull:#?}");
    assert!(
        pull.body.contains("This is unfinished work")
            && pull.body.contains("did not finish within 5 seconds"),
        "{}",
        pull.body
    );
    assert!(failure.contains(&format!("#{}", pull.number)), "{failure}");
    // The partial diff is what the branch holds: one commit on the base.
    let head = world.upstream(&["rev-parse", &pull.head]);
    assert_eq!(
        world.upstream(&["rev-list", "--count", &format!("main..{head}")]),
        "1"
    );
    let diff = world.upstream(&["diff", "main", &head]);
    assert!(diff.contains("+# started"), "{diff}");
    // Never green: the check says it did not finish.
    assert_eq!(world.checks(&head), ["failure"]);
    let status = failure_status(&world).await;
    assert!(
        status.contains("`/retry continue`") && status.contains("draft pull request"),
        "{status}"
    );
    let runs = world.runs().await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].head_sha.as_deref(), Some(head.as_str()));
    world.server.stop().await;
}

async fn retry_continue_finishes_the_draft_from_its_unfinished_change(on: ForgeKind) {
    let world = approved(
        on,
        vec![submit_calc(1), verdict(true, "Finished.")],
        &settings(CONTINUES_OR_HANGS, ""),
    )
    .await;
    world.wait_for_state("failed").await;
    let partial_head = world.upstream(&["rev-parse", &only_pull(&world).head]);
    world
        .comment(&world.maintainer, "/retry continue", "retry-continue")
        .await;
    world.wait_for_state("pr_opened").await;
    // The same pull request now holds the unfinished change and the one finishing it.
    let pull = only_pull(&world);
    let head = world.upstream(&["rev-parse", &pull.head]);
    assert_eq!(
        world.upstream(&["rev-parse", &format!("{head}^")]),
        partial_head
    );
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(
        calc.contains("# started") && calc.contains("a + b"),
        "{calc}"
    );
    assert!(
        !pull.draft,
        "the passing round marks the draft ready: {pull:#?}"
    );
    assert!(pull.body.contains("Verification"), "{}", pull.body);
    assert!(
        !pull.body.contains("This is unfinished work"),
        "{}",
        pull.body
    );
    assert_eq!(
        world.checks(&head).last().map(String::as_str),
        Some("success")
    );
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["failed", "published"], "{runs:#?}");
    world.server.stop().await;
}

async fn plain_retry_starts_again_from_the_base_on_the_same_draft(on: ForgeKind) {
    // The first run is told to wait, makes a start and hangs; the retry is told to proceed.
    let world = approved(
        on,
        vec![
            submit_calc(1),
            Step::text("wait").when_last_contains("go on?"),
            Step::text("proceed").when_last_contains("go on?"),
            verdict(true, "Fixed."),
        ],
        &settings(ASKS_THEN_FIXES, ""),
    )
    .await;
    world.wait_for_state("failed").await;
    let partial_head = world.upstream(&["rev-parse", &only_pull(&world).head]);
    world
        .comment(&world.maintainer, "/retry", "retry-clean")
        .await;
    world.wait_for_state("pr_opened").await;
    let pull = only_pull(&world);
    let head = world.upstream(&["rev-parse", &pull.head]);
    // Started from the base: the unfinished start is not in the result, yet the branch
    // moved forward over it rather than being overwritten.
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(
        calc.contains("a + b") && !calc.contains("# started"),
        "{calc}"
    );
    assert_eq!(
        world.upstream(&["rev-parse", &format!("{head}^")]),
        partial_head
    );
    let diff = world.upstream(&["diff", "main", &head]);
    assert!(!diff.contains("started"), "{diff}");
    world.server.stop().await;
}

async fn a_restart_tries_the_interrupted_attempt_again_and_publishes_nothing_of_it(on: ForgeKind) {
    let script = vec![
        submit_calc(2),
        Step::text("wait").when_last_contains("go on?"),
        Step::text("proceed").when_last_contains("go on?"),
        verdict(true, "Fixed."),
    ];
    let settings = settings(ASKS_THEN_FIXES, "");
    let grace = [("PLANWRIGHT_SHUTDOWN_GRACE_SECS", "0")];
    let world = World::calc_with(on, script, &settings, &grace).await;
    world.approve_calc().await;
    eventually("the first attempt to make a start", || async {
        let runs = world.runs().await;
        let run = runs.iter().find(|r| r.state.as_str() == "running")?;
        let calc = std::path::Path::new(run.workspace.as_deref()?).join("run/repo/calc.py");
        std::fs::read_to_string(calc)
            .ok()
            .filter(|c| c.contains("# started"))
    })
    .await;
    let main = world.upstream(&["rev-parse", "main"]);
    let world = world.restarted().await;
    world.wait_for_state("pr_opened").await;
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["abandoned", "published"], "{runs:#?}");
    // The restart was not the executor's failure: the same attempt ran again, and nothing
    // of the interrupted one was committed, pushed or reported.
    assert_eq!(runs[1].attempt, 1);
    assert_eq!(runs[0].head_sha, None, "{runs:#?}");
    assert_eq!(runs[0].outcome, None, "{runs:#?}");
    let pull = only_pull(&world);
    assert!(!pull.draft);
    let head = world.upstream(&["rev-parse", &pull.head]);
    // One commit for the round, on the base: no older commit with a failure check.
    assert_eq!(world.upstream(&["rev-parse", &format!("{head}^")]), main);
    assert_eq!(
        world.upstream(&["rev-list", "--count", "--all", &format!("^{main}")]),
        "1"
    );
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(
        calc.contains("a + b") && !calc.contains("# started"),
        "{calc}"
    );
    assert!(
        world
            .bot_comments()
            .iter()
            .all(|c| !c.contains("Did not finish")),
        "{:#?}",
        world.bot_comments()
    );
    world.server.stop().await;
}

async fn with_on_failure_comment_the_change_is_kept_on_a_branch_of_its_own(on: ForgeKind) {
    let limit = [("PLANWRIGHT_EXECUTOR_TIMEOUT_SECS", WALL)];
    let script = vec![submit_calc(1), verdict(true, "Finished.")];
    let settings = settings(CONTINUES_OR_HANGS, "on_failure: comment\n");
    let world = World::calc_with(on, script, &settings, &limit).await;
    // Someone else's branch holds the first name: it is never moved.
    let taken = format!("planwright/{}-partial-1", world.issue);
    world.upstream(&["branch", &taken, "main"]);
    let main = world.upstream(&["rev-parse", "main"]);
    world.approve_calc().await;
    world.wait_for_state("failed").await;
    assert!(world.pulls().is_empty());
    assert_eq!(world.upstream(&["rev-parse", &taken]), main);
    let branch = format!("planwright/{}-partial-2", world.issue);
    let kept = world.upstream(&["rev-parse", &branch]);
    assert_eq!(
        world.upstream(&["rev-list", "--count", &format!("main..{kept}")]),
        "1"
    );
    let diff = world.upstream(&["diff", "main", &kept]);
    assert!(diff.contains("+# started"), "{diff}");
    let status = failure_status(&world).await;
    assert!(
        status.contains(&format!("`{branch}`"))
            && status.contains(&format!("compare/main...{branch}"))
            && status.contains("`/retry continue`"),
        "{status}"
    );
    // Carried on from the kept branch, the result opens a pull request on the session's
    // own branch holding both changes; the kept branch stays as it was.
    world
        .comment(&world.maintainer, "/retry continue", "retry-continue")
        .await;
    world.wait_for_state("pr_opened").await;
    let pull = only_pull(&world);
    assert_ne!(pull.head, branch);
    let head = world.upstream(&["rev-parse", &pull.head]);
    assert_eq!(world.upstream(&["rev-parse", &format!("{head}^")]), kept);
    assert_eq!(world.upstream(&["rev-parse", &branch]), kept);
    world.server.stop().await;
}

async fn a_result_refused_for_a_deleted_test_is_kept_as_a_draft(on: ForgeKind) {
    // Deleting the test the contract is meant to make pass is refused, but pushing the
    // deletion sets nothing off: the change is kept for a maintainer to see.
    let world = approved(
        on,
        vec![submit_calc(1)],
        &settings("rm test_calc.py; sed -i 's/a - b/a + b/' calc.py", ""),
    )
    .await;
    let session = world.wait_for_state("failed").await;
    let failure = session.failure.unwrap_or_default();
    assert!(
        failure.contains("refused")
            && failure.contains("test_calc.py")
            && failure.contains("draft pull request"),
        "{failure}"
    );
    let pull = only_pull(&world);
    assert!(pull.draft, "{pull:#?}");
    assert!(
        pull.body.contains("This is unfinished work") && pull.body.contains("test_calc.py"),
        "{}",
        pull.body
    );
    let head = world.upstream(&["rev-parse", &pull.head]);
    let changed = world.upstream(&["diff", "--name-status", "main", &head]);
    assert!(
        changed.contains("D\ttest_calc.py") && changed.contains("M\tcalc.py"),
        "{changed}"
    );
    assert_eq!(world.checks(&head), ["failure"]);
    world.server.stop().await;
}

async fn retry_continue_without_unfinished_work_is_refused(on: ForgeKind) {
    // The executor finishes without changing anything: there is nothing to carry on from.
    let world = approved(
        on,
        vec![submit_calc(1)],
        &settings("echo 'nothing to do'", ""),
    )
    .await;
    world.wait_for_state("failed").await;
    world
        .comment(&world.maintainer, "/retry continue", "retry-continue")
        .await;
    let refusal = world
        .wait_for_comment("the refusal", |b| b.contains("no unfinished change"))
        .await;
    assert!(refusal.contains("`/retry`"), "{refusal}");
    world
        .comment(&world.maintainer, "/retry again", "retry-again")
        .await;
    world
        .wait_for_comment("the unknown argument", |b| b.contains("not `again`"))
        .await;
    assert_eq!(world.session().await.state.as_str(), "failed");
    world.server.stop().await;
}

#[tokio::test]
async fn keeping_the_change_again_after_a_lost_answer_pushes_and_opens_it_once() {
    let limit = [
        ("PLANWRIGHT_EXECUTOR_TIMEOUT_SECS", WALL),
        ("PLANWRIGHT_JOB_RETRY_BASE_MS", "50"),
    ];
    let settings = settings(CONTINUES_OR_HANGS, "");
    let world = World::calc_with(ForgeKind::Github, vec![submit_calc(2)], &settings, &limit).await;
    // The check is made but its answer lost: the job goes back to the queue, and its next
    // try keeps the same commit from the same workspace without running the executor again.
    world
        .github()
        .perform_then_fail_on("POST", "/repos/acme/widgets/check-runs", 502);
    world.approve_calc().await;
    let session = world.wait_for_state("failed").await;
    let failure = session.failure.unwrap_or_default();
    assert!(failure.contains("draft pull request"), "{failure}");
    let runs = world.runs().await;
    assert_eq!(runs.len(), 1, "the executor ran once: {runs:#?}");
    let pull = only_pull(&world);
    let head = world.upstream(&["rev-parse", &pull.head]);
    assert_eq!(runs[0].head_sha.as_deref(), Some(head.as_str()));
    assert_eq!(
        world.upstream(&["rev-list", "--count", &format!("main..{head}")]),
        "1"
    );
    let checks = world.github().check_runs(world.repo);
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0].conclusion.as_deref(), Some("failure"));
    let execute = jobs::list(&world.server.db, None)
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.kind == "execute")
        .unwrap();
    assert_eq!(execute.attempts, 2, "the job ran again");
    world.server.stop().await;
}

crate::on_both_forges!(
    an_executor_stopped_at_its_time_limit_leaves_a_draft_with_its_change,
    retry_continue_finishes_the_draft_from_its_unfinished_change,
    plain_retry_starts_again_from_the_base_on_the_same_draft,
    with_on_failure_comment_the_change_is_kept_on_a_branch_of_its_own,
    retry_continue_without_unfinished_work_is_refused,
    a_restart_tries_the_interrupted_attempt_again_and_publishes_nothing_of_it,
    a_result_refused_for_a_deleted_test_is_kept_as_a_draft,
);
