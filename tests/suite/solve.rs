//! `planwright solve` as a maintainer runs it: the real binary on a repository on disk,
//! with the scripted models and the real sandbox, from the issue text to a branch and
//! its report; and what it refuses before spending anything.

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use support::calc::{CALC, TEST_CALC, UNITTEST};
use support::git_http::git;
use support::model_server::{ModelServer, Step};
use support::planwright_command;

/// A tiny Python project whose `add` subtracts: its own test fails on the base commit.
const ISSUE: &str = "# add subtracts\n\n`add(2, 3)` gives -1 instead of 5.\n";

/// The calc project committed on `main` in `dir/calc`, with its planwright settings.
fn calc_repo(dir: &Path) -> std::path::PathBuf {
    calc_repo_with(dir, &format!("test: {UNITTEST}\n"))
}

/// The same, with `settings` as its planwright settings.
fn calc_repo_with(dir: &Path, settings: &str) -> std::path::PathBuf {
    let repo = dir.join("calc");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(repo.join("calc.py"), CALC).unwrap();
    std::fs::write(repo.join("test_calc.py"), TEST_CALC).unwrap();
    std::fs::write(repo.join(".planwright.yml"), settings).unwrap();
    git(&repo, &["add", "--all"]);
    git(&repo, &["commit", "--quiet", "-m", "calc"]);
    repo
}

fn script() -> Vec<Step> {
    support::calc::fixing_script(1)
}

/// Runs `planwright solve ARGS` in `cwd` with standard input not a terminal, the models
/// pointed at `models` when given.
async fn solve(cwd: &Path, args: &[&str], models: Option<&ModelServer>) -> Output {
    let mut cmd = planwright_command();
    cmd.current_dir(cwd)
        .arg("solve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(models) = models {
        cmd.env("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-sonnet-4-5")
            .env("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5")
            .env("PLANWRIGHT_ANTHROPIC_API_KEY", "sk-ant-solve-test")
            .env("PLANWRIGHT_ANTHROPIC_BASE_URL", models.anthropic_base());
    }
    // A guard against a hang, not a measure of speed.
    tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::from(cmd).output(),
    )
    .await
    .expect("solve finishes")
    .expect("solve runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn an_approved_solve_leaves_the_fix_on_a_branch_with_the_real_test_results() {
    let dir = tempfile::tempdir().unwrap();
    let repo = calc_repo(dir.path());
    let base = git(&repo, &["rev-parse", "HEAD"]);
    let issue_file = dir.path().join("issue.md");
    std::fs::write(&issue_file, ISSUE).unwrap();
    let models = ModelServer::start(script()).await;

    let out = solve(
        dir.path(),
        &[
            "--repo",
            repo.to_str().unwrap(),
            "--issue-file",
            issue_file.to_str().unwrap(),
            "--approve",
        ],
        Some(&models),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // Progress: the stages with the time, tokens and cost so far (the short ones between
    // two looks at the session may pass unseen).
    for stage in ["planning", "awaiting approval", "executing"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("s] {stage} · ")) && l.contains(" tokens · $")),
            "no progress line for {stage}:\n{stderr}"
        );
    }
    let last = stderr
        .lines()
        .rfind(|l| l.contains("s] pull request opened · "))
        .unwrap_or_else(|| panic!("no final progress line:\n{stderr}"));
    assert!(!last.contains("· 0 tokens"), "{last}");
    // The contract was shown before it ran.
    assert!(
        stdout.contains("add subtracts instead of adding."),
        "{stdout}"
    );

    let branch = stdout
        .lines()
        .find_map(|l| l.strip_prefix("branch: "))
        .unwrap_or_else(|| panic!("no branch in:\n{stdout}"));
    assert!(branch.starts_with("planwright/1-add-subtracts"), "{branch}");
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report in:\n{stdout}"));

    // One commit on the base holding the fix; the checkout itself is untouched.
    assert_eq!(
        git(
            &repo,
            &["rev-list", "--count", &format!("{base}..{branch}")]
        ),
        "1"
    );
    assert!(git(&repo, &["show", &format!("{branch}:calc.py")]).contains("return a + b"));
    let tree = git(&repo, &["ls-tree", "-r", "--name-only", branch]);
    assert!(!tree.contains("__pycache__"), "{tree}");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), base);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(repo.join("calc.py")).unwrap(), CALC);

    // The report holds what the real tests printed on both trees.
    let body = std::fs::read_to_string(report).unwrap();
    assert!(
        Path::new(report).starts_with(repo.join(".git/planwright")),
        "{report}"
    );
    let row = body
        .lines()
        .find(|l| l.starts_with(&format!("| `{UNITTEST}` |")))
        .unwrap_or_else(|| panic!("no verification row in:\n{body}"));
    let cells: Vec<&str> = row.split(" | ").collect();
    assert!(
        cells[1].contains("❌") && cells[1].contains("1 passed, 1 failed"),
        "{row}"
    );
    assert!(
        cells[2].contains("✅") && cells[2].contains("2 passed, 0 failed"),
        "{row}"
    );
    assert!(
        body.contains(&format!("Branch `{branch}` into `main`")),
        "{body}"
    );
    assert_eq!(models.unused_steps(), 0);
}

/// A repository eight folders deep under a 60-character path: its `DATA_DIR`
/// (`.git/planwright`) puts a run's sockets far past the 107 bytes a socket address holds.
/// The setup phase's egress proxy still starts and answers through the bridge (a host it
/// does not allow gets its 403), on both trees.
#[tokio::test]
async fn a_repository_deep_under_a_long_path_runs_its_setup_phase_through_the_egress_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let padding = 60 - dir.path().as_os_str().len() - 1;
    let long = dir.path().join("p".repeat(padding));
    assert_eq!(long.as_os_str().len(), 60);
    let deep = (1..=8).fold(long, |path, i| path.join(format!("folder-{i}")));
    let check = "grep -qx 403 ../home/proxy";
    let repo = calc_repo_with(
        &deep,
        &format!(
            "setup:\n  - \"curl -s -o /dev/null -w '%{{http_code}}' http://not-allowed.example/ \
             > ../home/proxy\"\n\
             test:\n  - {check}\n  - {UNITTEST}\n"
        ),
    );
    let models = ModelServer::start(script()).await;
    let out = solve(
        &repo,
        &[
            "--repo",
            repo.to_str().unwrap(),
            "--issue",
            ISSUE,
            "--approve",
        ],
        Some(&models),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report in:\n{stdout}"));
    let body = std::fs::read_to_string(report).unwrap();
    for command in ["setup: `curl", &format!("`{check}`")] {
        let row = body
            .lines()
            .find(|l| l.starts_with(&format!("| {command}")))
            .unwrap_or_else(|| panic!("no row for {command} in:\n{body}"));
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(
            cells[1].contains("✅") && cells[2].contains("✅"),
            "{row}\n{body}"
        );
    }
}

#[tokio::test]
async fn without_a_terminal_or_approve_nothing_is_planned_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let repo = calc_repo(dir.path());
    let models = ModelServer::start(script()).await;
    let out = solve(
        dir.path(),
        &["--repo", repo.to_str().unwrap(), "--issue", ISSUE],
        Some(&models),
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Cannot ask for approval: standard input is not a terminal")
            && stderr.contains("--approve"),
        "{stderr}"
    );
    assert!(models.requests().is_empty());
    assert!(!repo.join(".git/planwright").exists());
    assert_eq!(git(&repo, &["branch", "--list"]), "* main");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn bad_input_is_refused_with_exit_2_and_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let repo = calc_repo(dir.path());
    let repo_arg = repo.to_str().unwrap();
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let empty_file = dir.path().join("empty.md");
    std::fs::write(&empty_file, " \n\n").unwrap();
    let missing = dir.path().join("missing");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--repo", missing.to_str().unwrap(), "--issue", ISSUE],
            "there is no such folder",
        ),
        (
            vec!["--repo", plain.to_str().unwrap(), "--issue", ISSUE],
            "it is not a git repository",
        ),
        (
            vec!["--repo", repo_arg, "--issue", "  \n"],
            "Cannot use the issue: it is empty",
        ),
        (
            vec![
                "--repo",
                repo_arg,
                "--issue-file",
                empty_file.to_str().unwrap(),
            ],
            "it is empty",
        ),
        (
            vec![
                "--repo",
                repo_arg,
                "--issue",
                ISSUE,
                "--issue-file",
                empty_file.to_str().unwrap(),
            ],
            "cannot be used with",
        ),
        (vec!["--repo", repo_arg], "--issue"),
    ];
    for (args, expected) in cases {
        let mut args = args.clone();
        args.push("--approve");
        let out = solve(dir.path(), &args, None).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }

    // No planner model in the settings: nothing to plan with.
    let out = solve(
        dir.path(),
        &["--repo", repo_arg, "--issue", ISSUE, "--approve"],
        None,
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Cannot plan: PLANNER_MODEL is not set"),
        "{stderr}"
    );

    // A branch an earlier run left is never overwritten.
    git(&repo, &["branch", "planwright/1-add-subtracts"]);
    let out = solve(
        dir.path(),
        &["--repo", repo_arg, "--issue", ISSUE, "--approve"],
        None,
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the branch `planwright/1-add-subtracts` is there from an earlier run"),
        "{stderr}"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn publishing_into_a_local_checkout_never_moves_a_branch_holding_other_commits() {
    use planwright::forge::Forge;
    use planwright::forge::local::{LocalForge, LocalIssue};
    use planwright::git::push::{self, PushFailure};

    let dir = tempfile::tempdir().unwrap();
    let repo = calc_repo(dir.path());
    let forge = LocalForge::open(
        &repo,
        LocalIssue::parse(ISSUE).unwrap(),
        Some(&dir.path().join("out")),
        "maria",
        Box::new(std::io::sink()),
    )
    .await
    .unwrap();
    let remote = forge.git_remote(forge.name()).await.unwrap();
    // A bare repository standing in for a run's workspace, with a result on the branch.
    let source = dir.path().join("source.git");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            repo.to_str().unwrap(),
            source.to_str().unwrap(),
        ],
    );
    let work = dir.path().join("work");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            source.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let branch = "planwright/1-add-subtracts";
    let commit = |message: &str| {
        std::fs::write(work.join("calc.py"), message).unwrap();
        git(&work, &["commit", "--quiet", "-am", message]);
        git(
            &work,
            &[
                "push",
                "--quiet",
                "--force",
                "origin",
                &format!("HEAD:refs/heads/{branch}"),
            ],
        );
        git(&work, &["rev-parse", "HEAD"])
    };

    let first = commit("first result");
    push::push(&source, &remote, branch).await.unwrap();
    assert_eq!(git(&repo, &["rev-parse", branch]), first);
    // The same commit again (a lost answer repeated) is a success.
    push::push(&source, &remote, branch).await.unwrap();

    let other = commit("another result");
    let error = push::push(&source, &remote, branch).await.unwrap_err();
    assert_eq!(error.failure, PushFailure::Rejected, "{error}");
    assert_ne!(other, first);
    assert_eq!(git(&repo, &["rev-parse", branch]), first);
    // The checkout itself is untouched.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(repo.join("calc.py")).unwrap(), CALC);
}

#[tokio::test]
async fn at_a_terminal_the_contract_is_shown_and_no_cancels_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let repo = calc_repo(dir.path());
    let issue_file = dir.path().join("issue.md");
    std::fs::write(&issue_file, ISSUE).unwrap();
    let models = ModelServer::start(script()).await;
    // `script` gives solve a terminal; its output comes back through it.
    let line = format!(
        "{} solve --repo {} --issue-file {}",
        support::sh_word(env!("CARGO_BIN_EXE_planwright")),
        support::sh_word(&repo),
        support::sh_word(&issue_file)
    );
    let mut cmd = tokio::process::Command::new("script");
    cmd.current_dir(dir.path())
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-sonnet-4-5")
        .env("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5")
        .env("PLANWRIGHT_ANTHROPIC_API_KEY", "sk-ant-solve-test")
        .env("PLANWRIGHT_ANTHROPIC_BASE_URL", models.anthropic_base())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("PLANWRIGHT_") && !name.contains("MODEL") && !name.contains("ANTHROPIC")
        {
            cmd.env_remove(name);
        }
    }
    let mut child = cmd.spawn().expect("script runs");
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    // A guard against a hang, not a measure of speed.
    tokio::time::timeout(Duration::from_secs(600), async {
        while !seen.contains("[y/N]") {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "solve ended without asking:\n{seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .expect("solve asks");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"n\n").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(600), stdout.read_to_end(&mut rest))
        .await
        .expect("solve ends")
        .unwrap();
    seen.push_str(&String::from_utf8_lossy(&rest));
    let status = child.wait().await.unwrap();
    drop(stdin);

    assert_eq!(status.code(), Some(1), "{seen}");
    let asked = seen.find("Approve build contract v1? [y/N]").unwrap();
    let shown = seen.find("add subtracts instead of adding.").unwrap();
    assert!(
        shown < asked,
        "the contract comes before the question:\n{seen}"
    );
    assert!(
        seen.contains("not approved; the session is cancelled"),
        "{seen}"
    );
    // Nothing was carried out: no executor or reviewer call, no branch.
    assert_eq!(models.unused_steps(), 3, "{seen}");
    assert_eq!(git(&repo, &["branch", "--list"]), "* main");
    let comments = repo.join(".git/planwright/solve-1/comments");
    let cancel = std::fs::read_dir(&comments)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .any(|body| body == "/cancel");
    assert!(cancel, "no /cancel in {}", comments.display());
}
