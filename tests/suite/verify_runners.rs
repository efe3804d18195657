//! Verification of small real projects, one per test runner (`support::projects`), in real
//! workspaces and the real bubblewrap sandbox with the host's toolchains: each runner's
//! output is read, flaky tests are told apart by re-running only them, and a run that
//! finds no tests is not a pass.

use crate::support;

use planwright::config::repo::{RepoConfig, RootFiles};
use planwright::contract::Contract;
use planwright::git::Outcome;
use planwright::verify::{Plan, RunSet};
use support::projects::{Kind, Upstream};

fn contract(command: &str) -> Contract {
    Contract::from_json(&format!(
        r#"{{
          "summary": "s",
          "diagnosis": {{"hypothesis": "h"}},
          "change": {{"goal": "g", "files": [{{"path": "src/lib.rs", "action": "modify", "why": "w"}}]}},
          "verification": {{"commands": [{}], "new_tests": []}},
          "routing": {{"risk": "low"}}
        }}"#,
        serde_json::to_string(command).unwrap()
    ))
    .expect("a valid contract")
}

fn plan(command: &str, settings: &str) -> Plan {
    let config = RepoConfig::parse(
        &format!("test: []\n{settings}"),
        ".planwright.yml",
        &RootFiles::default(),
    )
    .expect("valid settings");
    Plan::new(&contract(command), &config)
}

async fn baseline(up: &Upstream, plan: &Plan) -> RunSet {
    let ws = up.workspace().await;
    let runs = up
        .verifier
        .baseline(plan, &ws, "run-7")
        .await
        .expect("the baseline runs");
    ws.finish(Outcome::Succeeded).await.unwrap();
    runs
}

#[tokio::test(flavor = "multi_thread")]
async fn every_runners_project_runs_in_the_sandbox_and_is_read() {
    for kind in Kind::ALL {
        let (a, b) = (kind.name("adds"), kind.name("subtracts"));
        let up = Upstream::new(kind, &[(&a, kind.passing()), (&b, kind.failing())]);
        let plan = plan(kind.check(), "");
        let runs = baseline(&up, &plan).await;
        let run = &runs.runs[0];
        let s = &run.summary;
        assert_ne!(s.runner, "generic", "{kind:?}: {}", run.excerpt);
        assert_eq!((s.passed, s.failed), (1, 1), "{kind:?}: {}", run.excerpt);
        let failing: Vec<&str> = run.failures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(failing, vec![kind.id(&b)], "{kind:?}");
    }
}
