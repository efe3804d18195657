//! What a whole session costs the forge: API calls per flow (label → contract → `/approve`
//! → pull request), by route, against a bound a real organisation's rate limit can carry.

use std::collections::BTreeMap;

use planwright::event::ForgeKind;

use crate::support;
use support::world::{Fake, World};

/// API requests of a flow by route (git's own transport left out), as the fake saw them.
fn api_calls(world: &World) -> BTreeMap<String, u64> {
    let requests: Vec<(String, String)> = match &world.fake {
        Fake::Github(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path))
            .collect(),
        Fake::Gitlab(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path))
            .collect(),
    };
    let mut routes = BTreeMap::new();
    for (method, path) in requests {
        if path.contains(".git/") {
            continue;
        }
        let path = path.strip_prefix("/api/v4").unwrap_or(&path);
        *routes
            .entry(planwright::forge::route(&method, path))
            .or_default() += 1;
    }
    routes
}

/// Most API calls one flow may make, from a process that has made none: GitLab's is one
/// more, for the label events that say who added the label (a GitLab webhook's user is
/// only what a holder of its secret claims).
fn max_calls(on: ForgeKind) -> u64 {
    match on {
        ForgeKind::Gitlab => 21,
        _ => 20,
    }
}

async fn a_whole_flow_stays_within_its_call_budget(on: ForgeKind) {
    let world = World::calc(
        on,
        support::calc::fixing_script(2),
        &format!("test: {}\n", support::calc::UNITTEST),
    )
    .await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    world.all_jobs_settled().await;
    let calls = api_calls(&world);
    let total: u64 = calls.values().sum();
    let max = max_calls(on);
    assert!(
        total <= max,
        "{total} API calls in one flow, at most {max} expected: {calls:#?}"
    );
    if let Fake::Github(f) = &world.fake {
        // The reads a flow repeats are conditional the second time, and GitHub does not
        // count a 304: the settings file and the approver's permission are unchanged (the
        // issue is not: its thread has grown meanwhile).
        let unchanged: BTreeMap<String, u64> = f
            .requests()
            .into_iter()
            .filter(|r| r.status == 304)
            .fold(BTreeMap::new(), |mut routes, r| {
                *routes
                    .entry(planwright::forge::route(&r.method, &r.path))
                    .or_default() += 1;
                routes
            });
        let counted = total - unchanged.values().sum::<u64>();
        assert!(
            counted <= max - 2,
            "{counted} API calls counted against the rate limit, at most {} expected; answered 304: {unchanged:#?}; all: {calls:#?}",
            max - 2
        );
    }
    world.server.stop().await;
}

crate::on_both_forges!(a_whole_flow_stays_within_its_call_budget);

/// The status comment's edits, oldest first, as the fake received them.
fn status_edits(world: &World) -> Vec<String> {
    let requests: Vec<(String, String, String)> = match &world.fake {
        Fake::Github(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path, r.body))
            .collect(),
        Fake::Gitlab(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path, r.body))
            .collect(),
    };
    requests
        .into_iter()
        .filter(|(method, path, body)| {
            matches!(method.as_str(), "PATCH" | "PUT" | "POST")
                && (path.contains("/comments") || path.contains("/notes"))
                && body.contains("planwright:status")
        })
        .map(|(_, _, body)| body)
        .collect()
}

/// An identity with less left than the reserve pauses the session at the reset, says so
/// on the status comment (from the reserve), and goes on afterwards: one contract, one
/// status comment, one pull request, and the forge never had to refuse a call.
async fn a_nearly_spent_rate_limit_pauses_the_session_until_its_reset(on: ForgeKind) {
    let world = World::calc_with(
        on,
        support::calc::fixing_script(2),
        &format!("test: {}\n", support::calc::UNITTEST),
        // Every wait goes back to the queue, as a reset an hour away would.
        &[("PLANWRIGHT_RATE_LIMIT_WAIT_SECS", "0")],
    )
    .await;
    // From the contract's post on, the identity is below its reserve (a hundredth of
    // the window) until the reset.
    let reset_in = std::time::Duration::from_secs(3);
    match &world.fake {
        Fake::Github(f) => f.rate_limit_from("POST", "planwright:contract", 5000, 45, reset_in),
        Fake::Gitlab(f) => f.rate_limit_from("POST", "planwright:contract", 2000, 15, reset_in),
    }
    world.label(&world.maintainer, "limited-label").await;
    world.wait_for_state("awaiting_approval").await;
    // The contract was posted; what followed waited for the reset.
    world.all_jobs_settled().await;
    let edits = status_edits(&world);
    let waiting: Vec<&String> = edits
        .iter()
        .filter(|b| b.contains("rate limit, which is nearly spent"))
        .collect();
    assert_eq!(waiting.len(), 1, "{edits:#?}");
    let forge = match on {
        ForgeKind::Gitlab => "GitLab",
        _ => "GitHub",
    };
    assert!(
        waiting[0].contains(&format!("Waiting for {forge}'s rate limit")),
        "{}",
        waiting[0]
    );
    assert!(
        waiting[0].contains(" UTC (in about 1 minute)"),
        "{}",
        waiting[0]
    );
    let last = edits.last().unwrap();
    assert!(!last.contains("rate limit"), "the session went on: {last}");

    world
        .comment(&world.maintainer, "/approve", "limited-approve")
        .await;
    world.wait_for_state("pr_opened").await;
    world.all_jobs_settled().await;
    assert_eq!(world.contract_comments().len(), 1);
    let statuses = world
        .bot_comments()
        .into_iter()
        .filter(|b| b.contains("planwright:status"))
        .count();
    assert_eq!(statuses, 1);
    assert_eq!(world.pulls().len(), 1);
    let refused = match &world.fake {
        Fake::Github(f) => f.requests().iter().filter(|r| r.status == 403).count(),
        Fake::Gitlab(f) => f.requests().iter().filter(|r| r.status == 429).count(),
    };
    assert_eq!(
        refused, 0,
        "planwright held its calls before the forge refused any"
    );
    world.server.stop().await;
}

crate::on_both_forges!(a_nearly_spent_rate_limit_pauses_the_session_until_its_reset);
