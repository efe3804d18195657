//! Verification: planwright runs the checks itself, in the sandbox, on the base commit and on
//! the result, and compares them test by test (introduced, pre-existing, fixed, flaky); it
//! also checks the result's files against the contract's scope and reads them for tests
//! weakened to pass (skipped, emptied, removed, deselected). What an executor claims
//! never enters: the [`VerificationReport`] comes from the runs alone.

use crate::git::WorkspaceError;
use crate::sandbox::SandboxError;

mod classify;
mod judge;
mod outcome;
mod plan;
mod proof;
mod report;
mod rerun;
mod run;
mod runs;
mod scope;
mod setup_phase;
mod spans;
mod weaken;

pub use classify::{Class, ClassCounts, ClassifiedFailure};
pub use outcome::{RunOutcome, StoredOutcome};
pub use plan::Plan;
pub use proof::{Proof, ProofReport, ProvenTest, test_changes};
pub use report::{CommandComparison, Rerun, Rules, Verdict, VerificationReport};
pub use run::Verifier;
pub use runs::{CommandRun, Phase, RunSet, RunSummary};
pub use scope::{Link, RUN_BY_CI, ScopeFinding, Severity, check_scope, is_test_path, links_in};
pub use weaken::{
    ChangedExpectation, Ruling, UnreadFile, Weakening, WeakeningFinding, WeakeningKind,
};

/// Failures of one class kept in a report (the counts go on past it).
const LISTED_PER_CLASS: usize = 50;

/// Characters kept of a failure's message in a report.
const MESSAGE_CHARS: usize = 1_000;

/// Characters of the generic output summary kept per run.
const EXCERPT_CHARS: usize = 4_000;

/// Scope findings kept in a report.
const MAX_FINDINGS: usize = 200;

/// Failures per class the reviewer's text shows with their message; the rest by id only.
const COMPACT_DETAILED: usize = 12;

const COMPACT_LISTED: usize = 60;

/// Failures a caller branches on: no sandbox is the operator's to fix, a broken workspace
/// is the run's; the rest is internal.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::classify::classify;
    use super::scope::names_file;
    use super::spans::{code, fence};
    use super::*;
    use crate::contract::Contract;
    use crate::distill::Failure;
    use crate::git::{ChangeKind, ChangedFile};
    use crate::markdown::GITHUB_TEXT_LIMIT;

    fn summary(exit: i32, runner: &str, passed: u64, failed: u64) -> RunSummary {
        RunSummary {
            exit_code: Some(exit),
            signal: None,
            timed_out: false,
            duration_ms: 120,
            runner: runner.into(),
            passed,
            failed,
            skipped: 0,
            errors: 0,
            restored: false,
            no_result: None,
            unnamed: 0,
        }
    }

    fn run(command: &str, exit: i32, passed: u64, failing: &[&str]) -> CommandRun {
        CommandRun {
            command: command.into(),
            phase: Phase::Check,
            summary: summary(exit, "unittest", passed, failing.len() as u64),
            failures: failing
                .iter()
                .map(|id| Failure {
                    id: (*id).into(),
                    message: format!("AssertionError in {id}"),
                    location: Some("test_a.py:3".into()),
                })
                .collect(),
            build_errors: Vec::new(),
            excerpt: String::new(),
            selected: None,
            could_not_select: false,
            ids: Vec::new(),
            confirms: false,
            passing: Vec::new(),
        }
    }

    fn generic(command: &str, exit: i32, excerpt: &str) -> CommandRun {
        CommandRun {
            command: command.into(),
            phase: Phase::Check,
            summary: summary(exit, "generic", 0, 0),
            failures: Vec::new(),
            build_errors: Vec::new(),
            excerpt: excerpt.into(),
            selected: None,
            could_not_select: false,
            ids: Vec::new(),
            confirms: false,
            passing: Vec::new(),
        }
    }

    fn classes(found: &[ClassifiedFailure]) -> Vec<(Class, Option<&str>)> {
        let mut v: Vec<_> = found.iter().map(|f| (f.class, f.test.as_deref())).collect();
        v.sort_by_key(|(c, t)| (format!("{c:?}"), t.map(str::to_owned)));
        v
    }

    /// A run of `ids` alone on the result, as verification makes to see the base's
    /// failures pass: `passed` tests passed and `failing` failed.
    fn confirmation(ids: &[&str], passed: u64, failing: &[&str]) -> CommandRun {
        let mut r = run("t", i32::from(!failing.is_empty()), passed, failing);
        r.selected = Some(format!("t {}", ids.join(" ")));
        r.ids = ids.iter().map(|id| (*id).to_owned()).collect();
        r.confirms = true;
        r
    }

    #[test]
    fn new_test_files_run_apart_join_the_commands_row() {
        let mut judged = run("t", 0, 3, &[]);
        judged.take_apart(run("t apart", 1, 1, &["new"]));
        assert_eq!(
            (
                judged.summary.exit_code,
                judged.summary.passed,
                judged.summary.failed
            ),
            (Some(1), 4, 1)
        );
        assert_eq!(judged.failures[0].id, "new");
        // Files that hold no test fail nothing, though pytest exits 5 for them.
        let mut judged = run("t", 0, 3, &[]);
        judged.take_apart(run("t apart", 5, 0, &[]));
        assert_eq!(judged.summary.exit_code, Some(0));
        // A crash of the files apart is no pass.
        let mut judged = run("t", 0, 3, &[]);
        judged.take_apart(generic("t apart", 2, "ImportError: no module named x"));
        assert_eq!(judged.summary.exit_code, Some(2));
    }

    #[test]
    fn tests_compare_by_id() {
        let base = run("t", 1, 1, &["a", "b"]);
        let after = run("t", 1, 1, &["b", "c"]);
        let seen = confirmation(&["a"], 1, &[]);
        assert_eq!(
            classes(&classify(Some(&base), &after, Some(&seen))),
            vec![
                (Class::Fixed, Some("a")),
                (Class::Introduced, Some("c")),
                (Class::PreExisting, Some("b")),
            ]
        );
    }

    #[test]
    fn a_base_failure_missing_from_the_result_is_fixed_only_when_seen_passing() {
        let base = run("t", 1, 2, &["a", "b"]);
        // The result's run reports neither: dropped from the suite, or fixed.
        let after = run("t", 0, 2, &[]);
        let of = |confirmation: Option<&CommandRun>| {
            let found = classify(Some(&base), &after, confirmation);
            let mut v: Vec<(Class, String, String)> = found
                .into_iter()
                .map(|f| (f.class, f.test.unwrap_or_default(), f.message))
                .collect();
            v.sort_by(|x, y| x.1.cmp(&y.1));
            v
        };
        // No run of them alone (the runner cannot select tests): neither is fixed.
        let none = of(None);
        assert_eq!(
            none.iter()
                .map(|(c, t, _)| (*c, t.as_str()))
                .collect::<Vec<_>>(),
            vec![(Class::NoLongerRuns, "a"), (Class::NoLongerRuns, "b")]
        );
        assert!(
            none[0].2.contains("absent from the result's run of `t`"),
            "{none:?}"
        );
        // Both seen passing together.
        let both = confirmation(&["a", "b"], 2, &[]);
        assert!(of(Some(&both)).iter().all(|(c, _, _)| *c == Class::Fixed));
        // Run alone, `a` still fails: a hook kept it out of the whole run.
        let still = confirmation(&["a", "b"], 1, &["a"]);
        let found = of(Some(&still));
        assert_eq!(
            (found[0].0, found[1].0),
            (Class::NoLongerRuns, Class::Fixed)
        );
        assert!(
            found[0].2.contains("still failing when run alone"),
            "{found:?}"
        );
        // The selection ran fewer tests than it named: which one ran is not known.
        let short = confirmation(&["a", "b"], 1, &[]);
        assert!(
            of(Some(&short))
                .iter()
                .all(|(c, _, _)| *c == Class::NoLongerRuns)
        );
        // A selection that ran nothing (the test no longer exists) shows nothing passing.
        let nothing = confirmation(&["a", "b"], 0, &[]);
        assert!(
            of(Some(&nothing))
                .iter()
                .all(|(c, _, _)| *c == Class::NoLongerRuns)
        );
        // A runner that names its passing tests shows them passing in the run itself.
        let mut listed = after.clone();
        listed.passing = vec!["a".to_owned(), "b".to_owned()];
        let found = classify(Some(&base), &listed, None);
        assert!(found.iter().all(|f| f.class == Class::Fixed), "{found:?}");
        // A run of other tests says nothing of these.
        let other = confirmation(&["z"], 1, &[]);
        assert!(
            of(Some(&other))
                .iter()
                .all(|(c, _, _)| *c == Class::NoLongerRuns)
        );
        // Not seen passing blocks the result, as an introduced failure does.
        let report = VerificationReport::compare(
            &set(vec![base.clone()], Vec::new()),
            &set(vec![after.clone()], Vec::new()),
            &[],
            Vec::new(),
        );
        assert_eq!(report.verdict, Verdict::Failed);
        assert_eq!(report.headline(), "Verification failed: 2 no longer run");
        // Removing one is what the contract allows: that one neither blocks nor is fixed.
        let report = VerificationReport::judge(
            &set(vec![base.clone()], Vec::new()),
            &set(vec![after.clone()], Vec::new()),
            &[],
            Vec::new(),
            &Rules {
                removable: vec!["a".to_owned()],
                ..Rules::default()
            },
        );
        assert_eq!(
            classes(&report.failures),
            vec![
                (Class::NoLongerRuns, Some("b")),
                (Class::Removed, Some("a"))
            ]
        );
        assert_eq!(report.verdict, Verdict::Failed);
    }

    #[test]
    fn a_build_that_broke_fixes_nothing_and_is_introduced() {
        let base = run("t", 1, 3, &["a"]);
        let mut after = generic(
            "t",
            101,
            "error[E0308]: mismatched types\n --> src/lib.rs:3",
        );
        after.summary.runner = "cargo test".into();
        after.build_errors.push(crate::distill::Problem {
            message: "error[E0308]: mismatched types".into(),
            location: Some("src/lib.rs:3".into()),
        });
        let found = classify(Some(&base), &after, None);
        assert_eq!(classes(&found), vec![(Class::Introduced, None)]);
        assert!(found[0].message.starts_with("exit 101:\n"), "{found:?}");
        assert!(found[0].message.contains("mismatched types"));
    }

    #[test]
    fn a_rerun_tells_flaky_from_introduced() {
        let base = run("t", 0, 2, &[]);
        let after = run("t", 1, 2, &["x", "y"]);
        let rerun = run("t", 1, 3, &["y", "z"]);
        assert_eq!(
            classes(&classify(Some(&base), &after, Some(&rerun))),
            vec![
                (Class::Flaky, Some("x")),
                (Class::Flaky, Some("z")),
                (Class::Introduced, Some("y")),
            ]
        );
        // A re-run that did not get to run tests proves nothing.
        let crashed = generic("t", 2, "Segmentation fault");
        assert_eq!(
            classes(&classify(Some(&base), &after, Some(&crashed))),
            vec![
                (Class::Introduced, Some("x")),
                (Class::Introduced, Some("y"))
            ]
        );
    }

    #[test]
    fn passing_by_running_no_tests_fixes_nothing() {
        let base = run("t", 1, 1, &["a"]);
        let after = run("t", 0, 0, &[]);
        let found = classify(Some(&base), &after, None);
        assert_eq!(classes(&found), vec![(Class::Introduced, None)]);
        assert_eq!(
            found[0].message,
            "`t` ran no tests (unittest found none); the base ran 2 with it"
        );
    }

    fn no_result(command: &str, exit: i32, why: &str) -> CommandRun {
        let mut r = generic(command, exit, "");
        r.summary.no_result = Some(why.into());
        r
    }

    #[test]
    fn a_command_that_could_not_run_is_no_result_on_either_side() {
        // The sandbox failed to start both runs: not "pre-existing", and not a pass.
        let broken = no_result(
            "t",
            1,
            "the sandbox could not start it (bwrap: Can't find source path)",
        );
        let found = classify(Some(&broken), &broken, None);
        assert_eq!(classes(&found), vec![(Class::NoResult, None)]);
        assert!(
            found[0]
                .message
                .starts_with("the sandbox could not start it"),
            "{:?}",
            found[0]
        );
        let empty = RunSet::default();
        let set = RunSet {
            runs: vec![broken.clone()],
            ..RunSet::default()
        };
        let report = VerificationReport::compare(&set, &set, &[], Vec::new());
        assert_eq!(report.verdict, Verdict::Failed);
        assert_eq!(report.headline(), "Verification failed: 1 could not run");
        assert!(
            report
                .for_publication()
                .failing
                .contains("**Could not run (1)**")
        );
        drop(empty);
        // A base that could not run makes the result's failure its own.
        let bad = generic("t", 1, "E501");
        assert_eq!(
            classes(&classify(Some(&broken), &bad, None)),
            vec![(Class::Introduced, None)]
        );
    }

    #[test]
    fn without_ids_exit_codes_decide() {
        let ok = generic("lint", 0, "");
        let bad = generic("lint", 1, "src/a.py:3: E501 line too long");
        assert_eq!(
            classes(&classify(Some(&ok), &bad, None)),
            vec![(Class::Introduced, None)]
        );
        assert_eq!(
            classes(&classify(Some(&bad), &bad, None)),
            vec![(Class::PreExisting, None)]
        );
        assert_eq!(
            classes(&classify(Some(&bad), &ok, None)),
            vec![(Class::Fixed, None)]
        );
        assert_eq!(
            classes(&classify(None, &bad, None)),
            vec![(Class::Introduced, None)]
        );
        assert_eq!(
            classes(&classify(Some(&ok), &bad, Some(&ok))),
            vec![(Class::Flaky, None)]
        );
        assert!(classify(Some(&ok), &ok, None).is_empty());
    }

    fn rules(quarantine: &[&str], expects_tests: bool) -> Rules {
        Rules {
            quarantine: quarantine.iter().map(|q| (*q).to_owned()).collect(),
            expects_tests,
            removable: Vec::new(),
        }
    }

    fn set(runs: Vec<CommandRun>, reruns: Vec<CommandRun>) -> RunSet {
        RunSet {
            runs,
            reruns,
            ..RunSet::default()
        }
    }

    fn selected(mut r: CommandRun, line: &str) -> CommandRun {
        r.selected = Some(line.into());
        r
    }

    #[test]
    fn a_test_flaky_on_the_base_neither_blocks_nor_counts_as_fixed() {
        // `a` failed on the base and passed on its re-run; `b` failed on every base run.
        let base = set(
            vec![run("t", 1, 1, &["a", "b"])],
            vec![selected(run("t", 1, 1, &["b"]), "t a b")],
        );
        assert!(base.met_flaky());
        let fixed_both = set(vec![run("t", 0, 3, &[])], Vec::new());
        let seen = [confirmation(&["b"], 1, &[])];
        let report = VerificationReport::compare(&base, &fixed_both, &seen, Vec::new());
        assert_eq!(
            report
                .failures
                .iter()
                .map(|f| (f.class, f.test.as_deref().unwrap()))
                .collect::<Vec<_>>(),
            vec![(Class::Flaky, "a"), (Class::Fixed, "b")]
        );
        assert_eq!(report.verdict, Verdict::Passed);
        let failing_a = set(vec![run("t", 1, 2, &["a"])], Vec::new());
        let report = VerificationReport::compare(&base, &failing_a, &seen, Vec::new());
        assert_eq!((report.counts.flaky, report.counts.fixed), (1, 1));
        assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
        let table = report.pr_markdown();
        assert!(
            table.contains("❌ 1 passed, 2 failed · exit 1 · 0.1 s; re-run of the failing tests: ❌ 1 passed, 1 failed"),
            "{table}"
        );
        assert!(
            table.contains("Flaky: `a` passed and failed in runs of the same tree"),
            "{table}"
        );
        // A base whose failures failed again met no flakes.
        let steady = set(
            vec![run("t", 1, 1, &["b"])],
            vec![selected(run("t", 1, 0, &["b"]), "t b")],
        );
        assert!(!steady.met_flaky());
        // A whole command that failed, then passed.
        assert!(
            set(
                vec![generic("lint", 1, "E501")],
                vec![generic("lint", 0, "")]
            )
            .met_flaky()
        );
    }

    #[test]
    fn a_result_failure_that_passes_on_a_selected_re_run_is_flaky() {
        let base = set(vec![run("t", 0, 3, &[])], Vec::new());
        let after = set(vec![run("t", 1, 2, &["x", "y"])], Vec::new());
        let reruns = vec![
            selected(run("t", 1, 1, &["y"]), "t x y"),
            selected(run("t", 1, 0, &["y"]), "t y"),
        ];
        let report = VerificationReport::compare(&base, &after, &reruns, Vec::new());
        assert_eq!((report.counts.flaky, report.counts.introduced), (1, 1));
        assert_eq!(report.commands[0].reruns.len(), 2);
        let compact = report.compact();
        assert!(
            compact.contains("; re-run of the failing tests exit 1 (unittest: 1 passed, 1 failed); re-run of the failing tests exit 1"),
            "{compact}"
        );
        // A whole re-run of a runner that could not select says so.
        let mut whole = run("t", 0, 3, &[]);
        whole.could_not_select = true;
        let report = VerificationReport::compare(&base, &after, &[whole], Vec::new());
        assert_eq!(report.counts.flaky, 2);
        assert!(
            report
                .pr_markdown()
                .contains("re-run of the whole command (the runner could not select single tests): ✅ 3 passed"),
            "{}",
            report.pr_markdown()
        );
    }

    #[test]
    fn quarantined_tests_neither_block_nor_count_as_fixed() {
        let base = set(vec![run("t", 1, 1, &["q1", "a"])], Vec::new());
        let after = set(vec![run("t", 1, 1, &["q2"])], Vec::new());
        let report = VerificationReport::judge(
            &base,
            &after,
            &[confirmation(&["a"], 1, &[])],
            Vec::new(),
            &rules(&["q1", "q2"], false),
        );
        assert_eq!(
            classes(&report.failures),
            vec![
                (Class::Fixed, Some("a")),
                (Class::Quarantined, Some("q1")),
                (Class::Quarantined, Some("q2")),
            ]
        );
        assert_eq!(report.verdict, Verdict::Passed);
        assert_eq!(
            report.headline(),
            "Verification passed: 2 quarantined, 1 fixed"
        );
        assert!(
            report
                .pr_markdown()
                .contains("Quarantined by the repository's settings: `q2`, `q1`; neither blocking"),
            "{}",
            report.pr_markdown()
        );
    }

    #[test]
    fn zero_tests_where_tests_are_expected_fails_naming_the_command() {
        let after = set(vec![run("pytest -q", 5, 0, &[])], Vec::new());
        // The base ran none either, but the contract names new tests.
        let base = set(vec![run("pytest -q", 5, 0, &[])], Vec::new());
        let report = VerificationReport::judge(&base, &after, &[], Vec::new(), &rules(&[], true));
        assert_eq!(report.verdict, Verdict::Failed);
        assert_eq!(
            report.failures[0].message,
            "`pytest -q` ran no tests (unittest found none); the contract expects new tests"
        );
        // Nothing expected and nothing ran on either side: the exit codes decide.
        let report = VerificationReport::compare(&base, &after, &[], Vec::new());
        assert_eq!(classes(&report.failures), vec![(Class::PreExisting, None)]);
        // Output no runner recognised is judged by its exit code, and the table says so.
        let lint = set(vec![generic("make lint", 0, "")], Vec::new());
        let report = VerificationReport::judge(&lint, &lint, &[], Vec::new(), &rules(&[], true));
        assert_eq!(report.verdict, Verdict::Passed);
        assert!(
            report
                .pr_markdown()
                .contains("✅ exit 0 · 0.1 s · judged by exit code: no test output recognised |"),
            "{}",
            report.pr_markdown()
        );
        let row = &report.for_publication().rows[0];
        assert!(
            row.after
                .ends_with("judged by exit code: no test output recognised")
        );
    }

    #[test]
    fn runs_kept_before_re_runs_read_back() {
        let old = r#"{"runs":[{"command":"t","phase":"check","summary":{"exit_code":0,"signal":null,"timed_out":false,"duration_ms":5,"runner":"unittest","passed":1,"failed":0,"skipped":0,"errors":0},"failures":[],"build_errors":[],"excerpt":""}]}"#;
        let set: RunSet = serde_json::from_str(old).unwrap();
        assert!(set.reruns.is_empty() && set.runs[0].selected.is_none());
        assert!(!set.met_flaky());
    }

    #[test]
    fn reports_are_bounded_and_count_everything() {
        let ids: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut after = run("t", 1, 0, &refs);
        for f in &mut after.failures {
            f.message = "x".repeat(50_000);
        }
        let base = RunSet {
            runs: vec![run("t", 0, 300, &[])],
            ..RunSet::default()
        };
        let after = RunSet {
            runs: vec![after],
            ..RunSet::default()
        };
        let report = VerificationReport::compare(&base, &after, &[], Vec::new());
        assert_eq!(report.counts.introduced, 300);
        assert_eq!(report.failures.len(), LISTED_PER_CLASS);
        assert!(
            report
                .failures
                .iter()
                .all(|f| f.message.chars().count() <= MESSAGE_CHARS + 1)
        );
        assert_eq!(report.verdict, Verdict::Failed);
        let check = report.check_markdown();
        assert!(check.len() <= GITHUB_TEXT_LIMIT);
        assert!(check.contains("… and 250 more not listed."), "{check}");
        let compact = report.compact();
        assert!(compact.len() < 20_000, "{}", compact.len());
        assert!(compact.contains("- … 250 more"), "{compact}");
    }

    fn changed(path: &str, change: ChangeKind) -> ChangedFile {
        ChangedFile {
            path: path.into(),
            change,
        }
    }

    #[test]
    fn scope_follows_the_contract() {
        let contract = Contract::from_json(
            r#"{
              "summary": "s",
              "diagnosis": {"hypothesis": "h"},
              "change": {"goal": "g", "files": [
                {"path": "src/parse.rs", "action": "modify", "why": "w"},
                {"path": "src/old.rs", "action": "delete", "why": "w"},
                {"path": "tests/old_test.rs", "action": "delete", "why": "w"},
                {"path": "src/gen/", "action": "create", "why": "w"}
              ]},
              "verification": {"commands": ["cargo test"], "new_tests": ["checks/parse_empty.rs::empty"]},
              "routing": {"risk": "low"}
            }"#,
        )
        .unwrap();
        let baseline = RunSet {
            runs: vec![CommandRun {
                failures: vec![Failure {
                    id: "parse::empty".into(),
                    message: String::new(),
                    location: Some("tests/parse.rs:12:5".into()),
                }],
                ..run("cargo test", 101, 3, &[])
            }],
            ..RunSet::default()
        };
        let protected = vec![
            ".github/workflows/**".to_owned(),
            ".planwright.yml".to_owned(),
        ];
        let files = [
            changed("src/parse.rs", ChangeKind::Modified),
            changed("src/old.rs", ChangeKind::Deleted),
            changed("tests/old_test.rs", ChangeKind::Deleted),
            changed("src/gen/table.rs", ChangeKind::Added),
            changed("tests/new.rs", ChangeKind::Added),
            changed("checks/parse_empty.rs", ChangeKind::Added),
            changed("src/lexer.rs", ChangeKind::Modified),
            changed(".github/workflows/ci.yml", ChangeKind::Modified),
            changed(".planwright.yml", ChangeKind::Modified),
            changed("tests/parse.rs", ChangeKind::Deleted),
            changed("tests/other.rs", ChangeKind::Deleted),
        ];
        let found: Vec<(&str, Severity)> =
            check_scope(&contract, &protected, &files, &HashMap::new(), &baseline)
                .iter()
                .map(|f| {
                    (
                        files
                            .iter()
                            .find(|c| c.path == f.path)
                            .unwrap()
                            .path
                            .as_str(),
                        f.severity,
                    )
                })
                .collect();
        assert_eq!(
            found,
            vec![
                ("src/lexer.rs", Severity::Flagged),
                (".github/workflows/ci.yml", Severity::Refused),
                (".planwright.yml", Severity::Refused),
                ("tests/parse.rs", Severity::Refused),
                ("tests/other.rs", Severity::Flagged),
            ]
        );
        let deleted_declared = check_scope(
            &contract,
            &protected,
            &[changed("src/parse.rs", ChangeKind::Deleted)],
            &HashMap::new(),
            &RunSet::default(),
        );
        assert_eq!(
            deleted_declared[0].reason,
            "deleted, but the contract says to modify it"
        );
    }

    #[test]
    fn code_spans_survive_tables() {
        assert_eq!(code("a | b"), "`a \\| b`");
        assert_eq!(code("echo `x`"), "`` echo `x` ``");
        assert_eq!(fence("```"), "````");
    }

    #[test]
    fn test_paths() {
        for p in [
            "tests/a.rs",
            "pkg/test/x.py",
            "a_test.go",
            "test_a.py",
            "src/a.test.ts",
            "src/a.spec.js",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in ["src/a.rs", "testing/x.py", "contest.py", "src/latest.rs"] {
            assert!(!is_test_path(p), "{p}");
        }
        assert!(names_file("tests/test_x.py::test_y", "tests/test_x.py"));
        assert!(names_file("tests.test_x.TestY.test_y", "tests/test_x.py"));
        assert!(names_file("spec/parser_spec.rb", "spec/parser_spec.rb"));
        assert!(!names_file("test_other", "spec/parser_spec.rb"));
        assert!(!names_file("test_calc.py::TestCalc::test_add", "calc.py"));
        assert!(!names_file("tests.test_calc.TestCalc", "calc.py"));
        assert!(names_file("calc.py::test_add", "calc.py"));
        assert!(names_file("`tests/x.py::t`", "tests/x.py"));
        assert!(names_file(
            "test_sum (tests.test_calc.TestCalc)",
            "tests/test_calc.py"
        ));
    }
}
