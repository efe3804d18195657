//! Verification of small real projects, one per test runner (`support::projects`), in real
//! workspaces and the real bubblewrap sandbox with the host's toolchains: each runner's
//! output is read, flaky tests are told apart by re-running only them, and a run that
//! finds no tests is not a pass.

use crate::support;

use std::path::Path;

use planwright::config::repo::{RepoConfig, RootFiles};
use planwright::contract::{Contract, FileAction, FileChange};
use planwright::git::{ChangeKind, Outcome};
use planwright::verify::{Class, Plan, RunSet, RunSummary, Verdict, VerificationReport};
use support::projects::{self, Kind, Upstream};

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

/// The baseline (beside the "executor") and the verification of what `edit` leaves in
/// the result's checkout.
async fn verify(
    up: &Upstream,
    plan: &Plan,
    edit: impl FnOnce(&Path),
) -> (RunSet, VerificationReport) {
    let result = up.workspace().await;
    let (base, ()) = tokio::join!(baseline(up, plan), async { edit(&result.repo()) });
    // The contract names every file the edit changed: these tests are about the runners,
    // so the result's test files are judged as it left them.
    let mut contract = contract(&plan.checks[0]);
    for changed in result.changed_files().await.unwrap() {
        let action = match changed.change {
            ChangeKind::Added => FileAction::Create,
            ChangeKind::Deleted => FileAction::Delete,
            ChangeKind::Modified | ChangeKind::TypeChanged => FileAction::Modify,
        };
        contract.change.files.push(FileChange {
            path: changed.path,
            action,
            why: "the runner's tests".into(),
        });
    }
    let report = up
        .verifier
        .verify(plan, &contract, &base, &result, "run-7")
        .await
        .expect("verification runs");
    result.finish(Outcome::Succeeded).await.unwrap();
    let json = serde_json::to_string(&report).unwrap();
    assert_eq!(
        serde_json::from_str::<VerificationReport>(&json).unwrap(),
        report
    );
    (base, report)
}

fn tests_run(s: &RunSummary) -> u64 {
    s.passed + s.failed
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_failing_every_other_run_is_flaky_and_re_runs_alone_on_every_runner() {
    for kind in Kind::ALL {
        let (a, b) = (kind.name("adds"), kind.name("subtracts"));
        let (old, new) = (kind.name("flaky_old"), kind.name("flaky_new"));
        let (old_body, new_body) = (kind.flaky("old.count"), kind.flaky("new.count"));
        let base_tests = [
            (a.as_str(), kind.passing()),
            (b.as_str(), kind.passing()),
            (old.as_str(), old_body.as_str()),
        ];
        let up = Upstream::new(kind, &base_tests);
        let plan = plan(kind.check(), "");
        let (base, report) = verify(&up, &plan, |repo| {
            let mut tests = base_tests.to_vec();
            tests.push((new.as_str(), new_body.as_str()));
            projects::write(kind, repo, &tests);
        })
        .await;

        // The base's flaky test failed, then passed when run alone.
        assert!(base.met_flaky(), "{kind:?}: {base:?}");
        let c = &report.commands[0];
        let base_rerun = &c.base_reruns[0];
        assert!(base_rerun.selected.is_some(), "{kind:?}: {c:?}");
        assert_eq!(tests_run(&base_rerun.summary), 1, "{kind:?}: {c:?}");
        assert_eq!(c.base_reruns.len(), 1, "{kind:?}: passed the first time");
        // The result's new one the same: re-run alone, passed, flaky.
        let rerun = &c.reruns[0];
        let line = rerun.selected.as_deref().expect("a selected re-run");
        assert_eq!(tests_run(&rerun.summary), 1, "{kind:?}: {line}: {c:?}");
        assert_eq!(
            report.verdict,
            Verdict::Passed,
            "{kind:?}: {}",
            report.compact()
        );
        let mut flaky: Vec<String> = report
            .failures
            .iter()
            .filter(|f| f.class == Class::Flaky)
            .filter_map(|f| f.test.clone())
            .collect();
        flaky.sort();
        let mut expected = vec![kind.id(&new), kind.id(&old)];
        expected.sort();
        assert_eq!(flaky, expected, "{kind:?}: {}", report.compact());
        assert_eq!(
            report.counts.fixed + report.counts.introduced,
            0,
            "{kind:?}"
        );
        let table = report.pr_markdown();
        assert!(table.contains("\nFlaky: "), "{table}");
        assert!(table.contains("re-run of the failing tests: ✅"), "{table}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn running_no_tests_where_the_base_ran_some_fails_on_every_runner() {
    for kind in Kind::ALL {
        let (a, b) = (kind.name("adds"), kind.name("subtracts"));
        let up = Upstream::new(kind, &[(&a, kind.passing()), (&b, kind.passing())]);
        let plan = plan(kind.check(), "");
        let (_, report) = verify(&up, &plan, |repo| {
            projects::write(kind, repo, &[]);
        })
        .await;
        let c = &report.commands[0];
        assert_ne!(c.after.runner, "generic", "{kind:?}: {c:?}");
        assert_eq!(tests_run(&c.after), 0, "{kind:?}: {c:?}");
        assert!(
            c.reruns.is_empty(),
            "{kind:?}: running again finds none either"
        );
        assert_eq!(
            report.verdict,
            Verdict::Failed,
            "{kind:?}: {}",
            report.compact()
        );
        let failure = report
            .failures
            .iter()
            .find(|f| f.class == Class::Introduced)
            .unwrap_or_else(|| panic!("{kind:?}: {}", report.compact()));
        assert_eq!(
            failure.message,
            format!(
                "`{}` ran no tests ({} found none); the base ran 2 with it",
                kind.check(),
                c.after.runner
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn new_tests_the_runner_never_finds_fail_and_a_quarantined_failure_does_not() {
    let kind = Kind::Pytest;
    let up = Upstream::new(kind, &[]);
    let mut plan = plan(
        kind.check(),
        "quarantine: [\"test_project.py::test_net\"]\n",
    );
    plan.expects_tests = true;
    // The new tests went where pytest does not look.
    let (_, report) = verify(&up, &plan, |repo| {
        std::fs::write(repo.join("check_new.py"), "def test_x():\n    pass\n").unwrap();
    })
    .await;
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert_eq!(
        report.failures[0].message,
        "`python3 -m pytest -v` ran no tests (pytest found none); the contract expects new tests"
    );
    // A quarantined test failing on the result blocks nothing and is not re-run.
    let (_, report) = verify(&up, &plan, |repo| {
        projects::write(
            kind,
            repo,
            &[("test_x", kind.passing()), ("test_net", kind.failing())],
        );
    })
    .await;
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(report.counts.quarantined, 1);
    assert!(report.commands[0].reruns.is_empty());
    assert!(
        report
            .pr_markdown()
            .contains("Quarantined by the repository's settings: `test_project.py::test_net`"),
        "{}",
        report.pr_markdown()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_cannot_select_tests_re_runs_whole_and_says_so() {
    let kind = Kind::Pytest;
    let up = Upstream::new(kind, &[("test_a", kind.passing())]);
    // A compound command: only `sh` knows what it runs.
    let plan = plan("true && python3 -m pytest -v", "flaky_reruns: 1\n");
    let (_, report) = verify(&up, &plan, |repo| {
        projects::write(
            kind,
            repo,
            &[("test_a", kind.passing()), ("test_b", kind.failing())],
        );
    })
    .await;
    let c = &report.commands[0];
    assert_eq!(c.reruns.len(), 1, "{c:?}");
    assert!(c.reruns[0].selected.is_none() && c.reruns[0].could_not_select);
    assert_eq!(tests_run(&c.reruns[0].summary), 2);
    assert_eq!(report.verdict, Verdict::Failed);
    assert!(
        report
            .pr_markdown()
            .contains("re-run of the whole command (the runner could not select single tests): ❌"),
        "{}",
        report.pr_markdown()
    );
}
