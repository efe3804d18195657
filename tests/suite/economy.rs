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
    world.server.stop().await;
}

crate::on_both_forges!(a_whole_flow_stays_within_its_call_budget);
