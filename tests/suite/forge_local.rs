//! The local forge on real temporary git repositories built with the git CLI, beyond what
//! `forge_conformance` holds every forge to: comments as files, what is echoed, who may
//! command, the pull request report, checks, and refusals of bad input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use planwright::event::Actor;
use planwright::forge::local::{BOT_LOGIN, ISSUE, LocalForge, LocalIssue, PULL};
use planwright::forge::{CheckState, CommitCheck, Forge, ForgeError, NewPullRequest, Reaction};
use planwright::ids::Permission;
use planwright::ids::{CommentId, CommitSha, RepoName};
use secrecy::ExposeSecret;

pub(super) const USER: &str = "ada";
const ISSUE_TEXT: &str = "# Crash on empty config\n\nSteps:\n1. run it\n";

/// What the forge echoed, as a terminal would show it.
#[derive(Clone, Default)]
pub(super) struct Echo(Arc<Mutex<Vec<u8>>>);

impl Write for Echo {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Echo {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Runs git in `dir` with a fixed identity, failing the test if git fails.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

pub(super) fn commit_file(dir: &Path, path: &str, content: &str, message: &str) -> String {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, content).unwrap();
    git(dir, &["add", path]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A repository folder `widgets` on `main` with one commit.
pub(super) struct Repo {
    _tmp: tempfile::TempDir,
    pub(super) path: PathBuf,
}

pub(super) fn repo() -> Repo {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("Widgets");
    std::fs::create_dir(&path).unwrap();
    git(&path, &["init", "-q", "-b", "main"]);
    commit_file(&path, "README.md", "# Widgets\n", "Initial commit");
    commit_file(
        &path,
        ".planwright.yml",
        "label: planwright\n",
        "Configure planwright",
    );
    Repo { _tmp: tmp, path }
}

pub(super) async fn open(repo: &Repo) -> (LocalForge, Echo) {
    let echo = Echo::default();
    let forge = LocalForge::open(
        &repo.path,
        LocalIssue::parse(ISSUE_TEXT).unwrap(),
        None,
        USER,
        Box::new(echo.clone()),
    )
    .await
    .unwrap();
    (forge, echo)
}

pub(super) fn name() -> RepoName {
    RepoName::parse("local/widgets").unwrap()
}

#[tokio::test]
async fn names_the_repository_and_reads_its_branch_and_head() {
    let repo = repo();
    let (forge, _) = open(&repo).await;
    assert_eq!(forge.name(), &name());
    let info = forge.repository(&name()).await.unwrap();
    assert_eq!(info.default_branch, "main");
    assert!(info.size.is_some_and(|bytes| bytes > 0), "{:?}", info.size);
    assert_eq!(
        info.head_sha.as_str(),
        git(&repo.path, &["rev-parse", "HEAD"])
    );

    let next = commit_file(&repo.path, "src/lib.rs", "fn main() {}\n", "Add code");
    assert_eq!(
        forge.repository(&name()).await.unwrap().head_sha.as_str(),
        next
    );
    // The output folder defaults to the git folder, where nothing is committed.
    assert_eq!(
        forge.output_dir(),
        repo.path.canonicalize().unwrap().join(".git/planwright")
    );
    assert!(git(&repo.path, &["status", "--porcelain"]).is_empty());

    let other = RepoName::parse("acme/widgets").unwrap();
    let error = forge.repository(&other).await.unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn the_base_is_the_branch_checked_out_when_opened() {
    let repo = repo();
    git(&repo.path, &["checkout", "-q", "-b", "develop"]);
    let develop = commit_file(&repo.path, "dev.txt", "dev\n", "Develop work");
    let (forge, _) = open(&repo).await;
    git(&repo.path, &["checkout", "-q", "main"]);
    let info = forge.repository(&name()).await.unwrap();
    assert_eq!(info.default_branch, "develop");
    assert_eq!(info.head_sha.as_str(), develop);
    assert_eq!(
        forge
            .read_file(&name(), "dev.txt")
            .await
            .unwrap()
            .as_deref(),
        Some("dev\n")
    );
}

#[tokio::test]
async fn comments_are_files_and_what_planwright_posts_is_echoed() {
    let repo = repo();
    let (forge, echo) = open(&repo).await;
    let status = forge
        .create_comment(&name(), ISSUE, "**Planning…**")
        .await
        .unwrap();
    assert_eq!(status.id, CommentId(1));
    assert_eq!(status.author.login, BOT_LOGIN);
    assert!(forge.is_own(&status.author).await.unwrap());
    let approve = forge.add_comment(USER, "/approve").unwrap();
    assert_eq!(approve.id, CommentId(2));
    assert!(!forge.is_own(&approve.author).await.unwrap());

    let dir = forge.output_dir().join("comments");
    assert_eq!(
        std::fs::read_to_string(dir.join("0001-planwright.md")).unwrap(),
        "**Planning…**"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("0002-ada.md")).unwrap(),
        "/approve"
    );
    let shown = echo.text();
    assert!(shown.contains("planwright commented (#1)"), "{shown}");
    assert!(shown.contains("**Planning…**"), "{shown}");
    assert!(
        !shown.contains("/approve"),
        "the user's own words are not echoed: {shown}"
    );

    let all = forge.comments(&name(), ISSUE).await.unwrap();
    let seen: Vec<(i64, &str, &str)> = all
        .iter()
        .map(|c| (c.id.0, c.author.login.as_str(), c.body.as_str()))
        .collect();
    assert_eq!(
        seen,
        [(1, BOT_LOGIN, "**Planning…**"), (2, USER, "/approve")]
    );
}

#[tokio::test]
async fn edits_rewrite_the_comment_and_keep_each_previous_text() {
    let repo = repo();
    let (forge, echo) = open(&repo).await;
    let status = forge
        .create_comment(&name(), ISSUE, "planning")
        .await
        .unwrap();
    for body in ["awaiting approval", "executing"] {
        let edited = forge
            .edit_comment(&name(), ISSUE, status.id, body)
            .await
            .unwrap();
        assert_eq!(edited.body, body);
        assert_eq!(edited.id, status.id);
    }
    let dir = forge.output_dir().join("comments");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("0001-planwright.md"), "executing");
    assert_eq!(read("0001-planwright.v1.md"), "planning");
    assert_eq!(read("0001-planwright.v2.md"), "awaiting approval");
    // Earlier texts are not comments of their own.
    let all = forge.comments(&name(), ISSUE).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].body, "executing");
    assert!(echo.text().contains("edited its comment #1 ──\nexecuting"));

    let theirs = forge.add_comment(USER, "/revise shorter").unwrap();
    let error = forge
        .edit_comment(&name(), ISSUE, theirs.id, "tampered")
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 403, .. }),
        "{error:?}"
    );
    assert_eq!(read("0002-ada.md"), "/revise shorter");
    let error = forge
        .edit_comment(&name(), ISSUE, CommentId(99), "x")
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn a_second_run_continues_the_same_thread() {
    let repo = repo();
    let (first, _) = open(&repo).await;
    first
        .create_comment(&name(), ISSUE, "contract v1")
        .await
        .unwrap();
    first.add_comment(USER, "/approve").unwrap();
    drop(first);

    let (second, _) = open(&repo).await;
    let all = second.comments(&name(), ISSUE).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].body, "/approve");
    assert_eq!(all[1].author.login, USER);
    let next = second
        .create_comment(&name(), ISSUE, "executing")
        .await
        .unwrap();
    assert_eq!(next.id, CommentId(3));
}

#[tokio::test]
async fn reactions_are_recorded_once_and_echoed() {
    let repo = repo();
    let (forge, echo) = open(&repo).await;
    let approve = forge.add_comment(USER, "/approve").unwrap();
    for _ in 0..2 {
        forge
            .react(&name(), ISSUE, approve.id, Reaction::PlusOne)
            .await
            .unwrap();
    }
    forge
        .react(&name(), ISSUE, approve.id, Reaction::Eyes)
        .await
        .unwrap();
    let recorded = std::fs::read_to_string(forge.output_dir().join("reactions.txt")).unwrap();
    assert_eq!(recorded, "1 +1\n1 eyes\n");
    assert_eq!(echo.text().matches("reacted +1 to comment #1").count(), 1);
}

#[tokio::test]
async fn only_the_local_user_may_command() {
    let repo = repo();
    let (forge, _) = open(&repo).await;
    assert_eq!(
        forge.permission(&name(), USER).await.unwrap(),
        Permission::Admin
    );
    assert_eq!(
        forge.permission(&name(), "ADA").await.unwrap(),
        Permission::Admin
    );
    for nobody in ["mallory", BOT_LOGIN] {
        assert_eq!(
            forge.permission(&name(), nobody).await.unwrap(),
            Permission::None,
            "{nobody}"
        );
    }
    let bot_by_name = Actor {
        login: "Planwright".into(),
        id: 0,
        bot: false,
    };
    assert!(forge.is_own(&bot_by_name).await.unwrap());
}

#[tokio::test]
async fn files_are_read_as_committed_on_the_default_branch() {
    let repo = repo();
    commit_file(&repo.path, "docs/guide.md", "ünïcode guide\n", "Docs");
    git(&repo.path, &["checkout", "-q", "-b", "elsewhere"]);
    commit_file(&repo.path, "other.txt", "only on a branch\n", "Other");
    git(&repo.path, &["checkout", "-q", "main"]);
    std::fs::write(repo.path.join("draft.txt"), "not committed\n").unwrap();
    std::fs::write(repo.path.join(".planwright.yml"), "label: edited\n").unwrap();
    let (forge, _) = open(&repo).await;

    let read = |path: &'static str| {
        let forge = &forge;
        async move { forge.read_file(&name(), path).await.unwrap() }
    };
    assert_eq!(
        read("docs/guide.md").await.as_deref(),
        Some("ünïcode guide\n")
    );
    assert_eq!(
        read("/docs/guide.md").await.as_deref(),
        Some("ünïcode guide\n")
    );
    assert_eq!(
        read(".planwright.yml").await.as_deref(),
        Some("label: planwright\n"),
        "the committed text, not the working copy"
    );
    assert_eq!(read("draft.txt").await, None);
    assert_eq!(read("other.txt").await, None);
    assert_eq!(read("docs").await, None);
    assert_eq!(read("missing.md").await, None);

    std::fs::write(repo.path.join("bytes.bin"), [0xff, 0xfe, 0x00]).unwrap();
    git(&repo.path, &["add", "bytes.bin"]);
    git(&repo.path, &["commit", "-q", "-m", "Binary"]);
    let error = forge.read_file(&name(), "bytes.bin").await.unwrap_err();
    assert!(matches!(error, ForgeError::Malformed { .. }), "{error:?}");
}

fn new_pull<'a>(head: &'a str, body: &'a str) -> NewPullRequest<'a> {
    NewPullRequest {
        head_branch: head,
        base_branch: "main",
        title: "Fix the crash on an empty config",
        body,
        draft: false,
    }
}

#[tokio::test]
async fn the_pull_request_is_the_branch_and_a_report_file() {
    let repo = repo();
    let (forge, echo) = open(&repo).await;
    git(&repo.path, &["branch", "planwright/issue-1"]);

    let opened = forge
        .find_or_create_pull(
            &name(),
            &new_pull("planwright/issue-1", "## Contract\n\nv1"),
        )
        .await
        .unwrap();
    let file = forge.output_dir().join("pull-request.md");
    assert_eq!(opened.number, PULL);
    assert_eq!(opened.url, format!("file://{}", file.display()));
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("# Fix the crash on an empty config\n"),
        "{written}"
    );
    assert!(
        written.contains("git diff main...planwright/issue-1"),
        "{written}"
    );
    assert!(written.ends_with("## Contract\n\nv1"), "{written}");

    forge
        .find_or_create_pull(&name(), &new_pull("planwright/issue-1", "ignored"))
        .await
        .unwrap();
    assert_eq!(echo.text().matches("opened a pull request").count(), 1);
    forge
        .update_pull_body(&name(), PULL, "## Report\n\n12 passed")
        .await
        .unwrap();
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .ends_with("## Report\n\n12 passed")
    );
    assert!(echo.text().contains("updated the pull request"));

    git(&repo.path, &["branch", "planwright/other"]);
    let error = forge
        .find_or_create_pull(&name(), &new_pull("planwright/other", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 422, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("planwright/issue-1"), "{error}");
}

#[tokio::test]
async fn a_pull_request_needs_its_branch() {
    let repo = repo();
    let (forge, _) = open(&repo).await;
    let error = forge
        .find_or_create_pull(&name(), &new_pull("planwright/issue-1", "x"))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the branch `planwright/issue-1` does not exist"),
        "{error}"
    );
    assert!(!forge.output_dir().join("pull-request.md").exists());
    let error = forge
        .update_pull_body(&name(), PULL, "x")
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn checks_are_written_whole_and_echoed() {
    let repo = repo();
    let (forge, echo) = open(&repo).await;
    let head = CommitSha(git(&repo.path, &["rev-parse", "HEAD"]));
    let long_text = "line\n".repeat(20_000);
    for (state, title) in [
        (CheckState::Running, "Verifying"),
        (CheckState::Failure, "2 tests failed"),
    ] {
        forge
            .set_check(
                &name(),
                &CommitCheck {
                    name: "planwright/verify",
                    head_sha: &head,
                    state,
                    title,
                    summary: "| test | before | after |",
                    text: &long_text,
                    details_url: None,
                    new_commit: false,
                },
            )
            .await
            .unwrap();
    }
    let written =
        std::fs::read_to_string(forge.output_dir().join("checks/planwright-verify.md")).unwrap();
    assert!(
        written.starts_with("# planwright/verify: failure\n\n2 tests failed\n"),
        "{}",
        &written[..100]
    );
    assert!(written.contains(head.as_str()));
    assert!(written.contains("| test | before | after |"));
    assert!(written.contains(&long_text), "the text is kept whole");
    let shown = echo.text();
    assert!(
        shown.contains(&format!(
            "check planwright/verify on {}: running — Verifying",
            &head.as_str()[..8]
        )),
        "{shown}"
    );
    assert!(shown.contains(": failure — 2 tests failed"), "{shown}");

    let unknown = CommitSha("0123456789abcdef0123456789abcdef01234567".into());
    let error = forge
        .set_check(
            &name(),
            &CommitCheck {
                name: "planwright/verify",
                head_sha: &unknown,
                state: CheckState::Success,
                title: "ok",
                summary: "",
                text: "",
                details_url: None,
                new_commit: false,
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn nothing_to_minimize_and_the_remote_is_the_folder() {
    let repo = repo();
    let (forge, _) = open(&repo).await;
    let comment = forge.create_comment(&name(), ISSUE, "v1").await.unwrap();
    assert!(
        !forge
            .minimize_comment(&name(), ISSUE, comment.id)
            .await
            .unwrap()
    );
    let remote = forge.git_remote(&name()).await.unwrap();
    assert_eq!(
        PathBuf::from(&remote.url),
        repo.path.canonicalize().unwrap()
    );
    assert_eq!(remote.username, "");
    assert_eq!(remote.password.expose_secret(), "");
    // It is a remote git can use.
    let listed = git(&repo.path, &["ls-remote", &remote.url, "refs/heads/main"]);
    assert!(listed.ends_with("refs/heads/main"), "{listed}");
}

#[tokio::test]
async fn a_given_output_folder_is_used_and_created() {
    let repo = repo();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("run/1");
    let forge = LocalForge::open(
        &repo.path,
        LocalIssue::parse("Typo").unwrap(),
        Some(&target),
        USER,
        Box::new(std::io::sink()),
    )
    .await
    .unwrap();
    forge.create_comment(&name(), ISSUE, "hi").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(target.join("comments/0001-planwright.md")).unwrap(),
        "hi"
    );
    assert!(!repo.path.join(".git/planwright").exists());
}

async fn open_error(path: &Path, user: &str) -> String {
    match LocalForge::open(
        path,
        LocalIssue::parse("Typo").unwrap(),
        None,
        user,
        Box::new(std::io::sink()),
    )
    .await
    {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_the_reason() {
    let repo = repo();
    let tmp = tempfile::tempdir().unwrap();

    let missing = tmp.path().join("nope");
    let error = open_error(&missing, USER).await;
    assert!(
        error.contains(&missing.display().to_string()) && error.contains("no such folder"),
        "{error}"
    );

    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let error = open_error(&plain, USER).await;
    assert!(error.contains("it is not a git repository"), "{error}");

    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let error = open_error(&file, USER).await;
    assert!(error.contains("it is not a folder"), "{error}");

    let inside = repo.path.join("docs");
    std::fs::create_dir(&inside).unwrap();
    let error = open_error(&inside, USER).await;
    assert!(error.contains("inside the git repository"), "{error}");

    let error = open_error(&repo.path, "Ada Lovelace").await;
    assert!(
        error.contains("`Ada Lovelace` as the local user name"),
        "{error}"
    );
    let error = open_error(&repo.path, "planwright").await;
    assert!(error.contains("planwright's own"), "{error}");
    let error = forge_add_comment_error(&repo).await;
    assert!(error.contains("Cannot comment as `../x`"), "{error}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    git(&empty, &["init", "-q", "-b", "main"]);
    let error = open_error(&empty, USER).await;
    assert!(error.contains("`main` has no commits yet"), "{error}");

    git(&repo.path, &["checkout", "-q", "--detach"]);
    let error = open_error(&repo.path, USER).await;
    assert!(error.contains("HEAD is detached"), "{error}");
}

async fn forge_add_comment_error(repo: &Repo) -> String {
    let (forge, _) = open(repo).await;
    let impostor = format!(
        "{:#}",
        forge.add_comment("Planwright", "/approve").unwrap_err()
    );
    assert!(impostor.contains("only planwright itself"), "{impostor}");
    format!("{:#}", forge.add_comment("../x", "hi").unwrap_err())
}

#[test]
fn issue_files_are_read_and_an_empty_one_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("issue.md");
    std::fs::write(&path, ISSUE_TEXT).unwrap();
    let issue = LocalIssue::from_file(&path).unwrap();
    assert_eq!(issue.title, "Crash on empty config");

    std::fs::write(&path, "\n  \n").unwrap();
    let error = format!("{:#}", LocalIssue::from_file(&path).unwrap_err());
    assert_eq!(
        error,
        format!(
            "Cannot use the issue file `{}`: it is empty",
            path.display()
        )
    );

    let missing = tmp.path().join("missing.md");
    let error = format!("{:#}", LocalIssue::from_file(&missing).unwrap_err());
    assert!(
        error.starts_with(&format!(
            "Could not read the issue file `{}`",
            missing.display()
        )),
        "{error}"
    );
}
