//! The GitHub forge client (octocrab, App auth, the retry helper) against the stateful
//! fake GitHub, beyond what `forge_conformance` holds every forge to: paging, token
//! caching and renewal, GraphQL, check runs, and git cloning and pushing with the
//! credentials the forge hands out.

use crate::support;

use std::time::Duration;

use planwright::event::Actor;
use planwright::forge::github::{GithubApp, GithubForge};
use planwright::forge::{
    CheckState, CommitCheck, Forge, ForgeError, GitRemote, NewPullRequest, PullRequest, RetryPolicy,
};
use planwright::git::{
    MirrorCache, MirrorKey, Outcome, WorkspaceError, WorkspaceRequest, Workspaces,
};
use planwright::ids::Permission;
use planwright::ids::{CommentId, CommitSha, InstallationId, IssueNumber, PullNumber, RepoName};
use planwright::markdown::GITHUB_TEXT_LIMIT;
use secrecy::ExposeSecret;
use support::fake_forge::{APP_ID, APP_SLUG, CHECK_TEXT_LIMIT, Credential, FakeGithub, FakeUser};
use support::git_http::{git, git_command};

pub(super) const REPO: &str = "Octo-Org/Hello-World";
const INSTALLATION: i64 = 77;

pub(super) fn repo() -> RepoName {
    RepoName::parse(REPO).unwrap()
}

/// Backoffs short enough for tests; rate-limit waits are still honoured as asked.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_rate_limit_wait: Duration::from_secs(5),
    }
}

pub(super) async fn world() -> (FakeGithub, GithubApp, GithubForge) {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO, "main", "6dcb09b5b57875f334f61aebed695e2e4193db5e");
    fake.add_installation(INSTALLATION, &[REPO]);
    fake.add_issue(
        REPO,
        3,
        "Crash on empty config",
        Some("Steps:\n1. run it"),
        &["bug", "planwright"],
        FakeUser::new("octocat", 1),
    );
    let app = GithubApp::from_settings(&fake.settings())
        .unwrap()
        .with_retry(quick_retries());
    let forge = app.installation(InstallationId(INSTALLATION)).unwrap();
    (fake, app, forge)
}

#[tokio::test]
async fn reads_comments_in_pages_of_a_hundred() {
    let (fake, _app, forge) = world().await;
    for i in 0..105 {
        fake.add_comment(REPO, 3, &format!("comment {i}"), FakeUser::new("hubot", 5));
    }
    let comments = forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(comments.len(), 105);
    assert_eq!(
        fake.count("GET", "/repos/octo-org/hello-world/issues/3/comments"),
        2
    );
}

#[tokio::test]
async fn the_bot_is_the_apps_slug_asked_once() {
    let (fake, app, forge) = world().await;
    let created = forge
        .create_comment(&repo(), IssueNumber(3), "planning…")
        .await
        .unwrap();
    assert_eq!(created.author.login, format!("{APP_SLUG}[bot]"));
    assert!(created.author.bot);
    assert!(forge.is_own(&created.author).await.unwrap());
    assert_eq!(app.bot_login().await.unwrap(), format!("{APP_SLUG}[bot]"));
    let someone = Actor {
        login: "octocat".into(),
        id: 1,
        bot: false,
    };
    assert!(!forge.is_own(&someone).await.unwrap());
    // The app's slug is fetched once, however often identity is asked.
    assert_eq!(fake.count("GET", "/app"), 1);
}

#[tokio::test]
async fn reads_permissions_including_the_ones_octocrab_cannot_parse() {
    let (fake, _app, forge) = world().await;
    // (login, GitHub's legacy `permission`, `role_name`, expected)
    let cases = [
        ("reader", "read", "read", Permission::Read),
        ("triager", "read", "triage", Permission::Triage),
        ("writer", "write", "write", Permission::Write),
        ("maintainer", "write", "maintain", Permission::Maintain),
        ("owner", "admin", "admin", Permission::Admin),
        ("outsider", "none", "none", Permission::None),
        // An organisation's custom role: fall back to the legacy field.
        ("custom", "write", "release-manager", Permission::Write),
    ];
    for (login, permission, role, _) in cases {
        fake.set_permission(REPO, login, permission, role);
    }
    for (login, _, _, expected) in cases {
        assert_eq!(
            forge.permission(&repo(), login).await.unwrap(),
            expected,
            "{login}"
        );
    }
    assert!(forge.permission(&repo(), "writer").await.unwrap() >= Permission::Write);
    assert!(forge.permission(&repo(), "triager").await.unwrap() < Permission::Write);
}

#[tokio::test]
async fn a_missing_file_is_asked_for_once() {
    let (fake, _app, forge) = world().await;
    assert_eq!(
        forge.read_file(&repo(), ".planwright.yml").await.unwrap(),
        None
    );
    assert_eq!(
        fake.count(
            "GET",
            "/repos/octo-org/hello-world/contents/.planwright.yml"
        ),
        1
    );
}

#[tokio::test]
async fn exchanges_the_installation_token_once_and_never_puts_it_in_a_url() {
    let (fake, app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    forge.read_file(&repo(), "README.md").await.unwrap();
    // A second handle on the same installation shares the cached token.
    let again = app.installation(InstallationId(INSTALLATION)).unwrap();
    again.issue(&repo(), IssueNumber(3)).await.unwrap();

    assert_eq!(
        fake.count(
            "POST",
            &format!("/app/installations/{INSTALLATION}/access_tokens")
        ),
        1
    );
    let tokens = fake.issued_tokens();
    assert_eq!(tokens.len(), 1);
    let requests = fake.requests();
    let token_exchange = &requests[0];
    assert_eq!(token_exchange.credential, Credential::Jwt);
    for r in &requests[1..] {
        assert_eq!(r.credential, Credential::Token(tokens[0].clone()), "{r:?}");
    }
    for r in &requests {
        assert!(!r.path.contains(&tokens[0]), "token in a URL: {}", r.path);
    }
}

#[tokio::test]
async fn a_failing_token_exchange_is_retried_too() {
    let (fake, _app, forge) = world().await;
    fake.fail_next(1, 503, &[]);
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let exchanges: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/access_tokens"))
        .map(|r| r.status)
        .collect();
    assert_eq!(exchanges, [503, 201]);
}

#[tokio::test]
async fn a_rate_limit_longer_than_we_wait_goes_back_to_the_queue() {
    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    fake.fail_next(
        1,
        403,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset.to_string()),
        ],
    );
    let error = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    assert!(matches!(error, ForgeError::RateLimited { .. }), "{error:?}");
    assert!(matches!(
        planwright::jobs::JobError::from(error),
        planwright::jobs::JobError::Retryable(_)
    ));
    assert_eq!(fake.count("GET", "/repos/octo-org/hello-world/issues/3"), 2);

    // The budget is spent until the reset: later calls wait without being sent, for
    // about as long as GitHub said.
    let held = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    let ForgeError::RateLimited {
        retry_after: Some(wait),
        ..
    } = held
    else {
        panic!("expected a held call, got {held:?}");
    };
    assert!(wait > Duration::from_secs(3500) && wait <= Duration::from_secs(3600));
    assert_eq!(fake.count("GET", "/repos/octo-org/hello-world/issues/3"), 2);
    let mut exposition = planwright::metrics::Exposition::default();
    planwright::metrics::render_process(&mut exposition);
    let text = exposition.into_text();
    assert!(
        text.contains("planwright_forge_requests_held_total{forge=\"github\"} 1"),
        "{text}"
    );
}

/// What the last answer said is left of `scope`'s window on this fake.
fn remaining(fake: &FakeGithub, scope: &str) -> u64 {
    let scope = format!("{} {scope}", fake.url);
    planwright::forge::budget::all()
        .into_iter()
        .find(|(forge, s, _)| *forge == "github" && *s == scope)
        .map(|(_, _, limit)| limit.remaining)
        .unwrap_or_else(|| panic!("no limit kept for {scope}"))
}

#[tokio::test]
async fn a_repeated_read_is_conditional_and_its_304_spends_nothing() {
    let (fake, _app, forge) = world().await;
    fake.rate_limit_from("GET", "", 5000, 4000, Duration::from_secs(3600));
    let first = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(remaining(&fake, "installation 77"), 3999);
    let again = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(again, first);
    // Unchanged: GitHub answered 304, which it does not count.
    assert_eq!(remaining(&fake, "installation 77"), 3999);
    fake.set_issue_body(REPO, 3, "Steps, rewritten");
    let changed = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(changed.body, "Steps, rewritten");
    assert_eq!(remaining(&fake, "installation 77"), 3998);
    let statuses: Vec<u16> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/repos/octo-org/hello-world/issues/3")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [200, 304, 200]);
}

#[tokio::test]
async fn a_304_to_a_request_that_was_not_conditional_is_a_clear_error() {
    let (fake, _app, forge) = world().await;
    // The installation token first, so the 304 meets the read.
    forge.repository(&repo()).await.unwrap();
    fake.fail_next(1, 304, &[]);
    let error = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    assert!(matches!(error, ForgeError::Malformed { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("answered 304 Not Modified to a request that was not conditional"),
        "{error}"
    );
    // Not retried: a proxy that does this once does it again.
    assert_eq!(fake.count("GET", "/repos/octo-org/hello-world/issues/3"), 1);
}

#[tokio::test]
async fn graphql_points_are_a_budget_of_their_own() {
    // GraphQL nearly spent: GraphQL waits for its reset, REST goes on.
    let (fake, _app, forge) = world().await;
    fake.graphql_rate_limit(5000, 40, Duration::from_secs(3600));
    forge.repository(&repo()).await.unwrap();
    assert_eq!(remaining(&fake, "installation 77 (graphql)"), 39);
    let held = forge.repository(&repo()).await.unwrap_err();
    let ForgeError::RateLimited {
        retry_after: Some(wait),
        ..
    } = held
    else {
        panic!("expected a held call, got {held:?}");
    };
    assert!(wait > Duration::from_secs(3500), "{wait:?}");
    assert_eq!(fake.count("POST", "/graphql"), 1);
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();

    // REST nearly spent: REST waits, GraphQL goes on.
    let (fake, _app, forge) = world().await;
    fake.rate_limit_from("GET", "", 5000, 40, Duration::from_secs(3600));
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let held = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    assert!(matches!(held, ForgeError::RateLimited { .. }), "{held:?}");
    forge.repository(&repo()).await.unwrap();
    forge.repository(&repo()).await.unwrap();
    assert_eq!(fake.count("POST", "/graphql"), 2);
}

#[tokio::test]
async fn a_missing_issue_is_asked_for_once_and_says_what_was_missing() {
    let (fake, _app, forge) = world().await;
    for _ in 0..2 {
        let error = forge.issue(&repo(), IssueNumber(99)).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "Could not GET /repos/octo-org/hello-world/issues/99: not found (404)"
        );
    }
    assert_eq!(
        fake.count("GET", "/repos/octo-org/hello-world/issues/99"),
        2
    );
}

#[tokio::test]
async fn a_key_that_does_not_parse_names_the_setting() {
    let fake = FakeGithub::start().await;
    let mut settings = fake.settings();
    settings.private_key = Some("-----BEGIN RSA PRIVATE KEY-----\nnope\n".to_owned().into());
    let error = GithubApp::from_settings(&settings).err().unwrap();
    assert!(
        format!("{error:#}").contains("GITHUB_PRIVATE_KEY"),
        "{error:#}"
    );
}

#[tokio::test]
async fn a_revoked_token_is_replaced_by_a_fresh_one() {
    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    fake.revoke_tokens();

    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let statuses: Vec<(String, u16)> = fake
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.status))
        .collect();
    let exchange = format!("/app/installations/{INSTALLATION}/access_tokens");
    let issue = "/repos/octo-org/hello-world/issues/3".to_owned();
    assert_eq!(
        statuses,
        [
            (exchange.clone(), 201),
            (issue.clone(), 200),
            (issue.clone(), 401),
            (exchange, 201),
            // Asked again conditionally: the issue is unchanged.
            (issue, 304),
        ]
    );
}

#[tokio::test]
async fn a_jwt_signed_with_another_key_is_refused_and_not_retried() {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO, "main", "6dcb09b5b57875f334f61aebed695e2e4193db5e");
    fake.add_installation(INSTALLATION, &[REPO]);
    let other = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .output()
        .unwrap();
    assert!(other.status.success());
    let mut settings = fake.settings();
    settings.private_key = Some(String::from_utf8(other.stdout).unwrap().into());
    let app = GithubApp::from_settings(&settings)
        .unwrap()
        .with_retry(quick_retries());

    let error = app.bot_login().await.unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 401, .. }),
        "{error:?}"
    );
    let forge = app.installation(InstallationId(INSTALLATION)).unwrap();
    let error = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 401, .. }),
        "{error:?}"
    );
    assert_eq!(fake.count("GET", "/app"), 1);
    assert_eq!(fake.count("POST", "/app/installations/"), 1);
    assert!(fake.issued_tokens().is_empty());
}

/// Collects every log line (all levels) of the test process.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

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
async fn no_log_line_carries_the_token() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    // Global rather than scoped: tracing caches per call site whether anyone listens, and
    // a call site first reached by a parallel test without a scoped subscriber would stay
    // silent here. Other tests' lines land in the capture too, which does no harm.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    fake.fail_next(1, 502, &[]);
    forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    forge
        .create_comment(&repo(), IssueNumber(3), "hello")
        .await
        .unwrap();
    forge.issue(&repo(), IssueNumber(404)).await.unwrap_err();
    // The newer calls too: GraphQL sets its header itself, git gets tokens of its own.
    let old = fake.add_comment(REPO, 3, "contract v1", FakeUser::new("hubot", 5));
    fake.graphql_error_next("FORBIDDEN", "Resource not accessible by integration");
    forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
        .await
        .unwrap_err();
    // Revoking forgets them, so the ones issued so far are kept aside.
    let mut tokens = fake.issued_tokens();
    fake.revoke_tokens_before("POST", "/graphql");
    forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
        .await
        .unwrap();
    let remote = forge.git_remote(&repo()).await.unwrap();
    tracing::info!(?remote, "git remote");
    forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "body"))
        .await
        .unwrap();
    let sha = CommitSha(HEAD_SHA.into());
    forge
        .set_check(&repo(), &check(&sha, CheckState::Running, "s", ""))
        .await
        .unwrap();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("forge call failed; retrying"),
        "the capture works: {logs}"
    );
    assert!(logs.contains("git remote"), "the capture works: {logs}");
    tokens.extend(fake.issued_tokens());
    assert!(tokens.len() >= 3, "{tokens:?}");
    for token in tokens {
        assert!(!logs.contains(&token), "token in the logs:\n{logs}");
    }
}

pub(super) const HEAD_SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

fn new_pull<'a>(head: &'a str, body: &'a str) -> NewPullRequest<'a> {
    NewPullRequest {
        head_branch: head,
        base_branch: "main",
        title: "Fix the crash on empty config",
        body,
        draft: false,
    }
}

#[tokio::test]
async fn a_draft_is_marked_ready_and_back_through_graphql() {
    let (fake, _app, forge) = world().await;
    let created = forge
        .find_or_create_pull(
            &repo(),
            &NewPullRequest {
                draft: true,
                ..new_pull("planwright/issue-3", "failed")
            },
        )
        .await
        .unwrap();
    assert!(created.draft && fake.pulls(REPO)[0].draft);

    let ready = forge.set_draft(&repo(), &created, false).await.unwrap();
    assert!(!ready.draft);
    assert!(!fake.pulls(REPO)[0].draft, "GitHub has it ready");
    let again = forge.set_draft(&repo(), &ready, true).await.unwrap();
    assert!(again.draft);
    assert!(fake.pulls(REPO)[0].draft, "and a draft again");

    // A pull request GitHub does not have is a failure that names it.
    let missing = PullRequest {
        number: PullNumber(99),
        ..created
    };
    let error = forge.set_draft(&repo(), &missing, false).await.unwrap_err();
    assert!(error.to_string().contains("#99"), "{error}");
}

#[tokio::test]
async fn a_forks_pull_request_with_the_same_branch_name_is_not_taken_for_ours() {
    let (fake, _app, forge) = world().await;
    let fork = fake.add_fork_pull(REPO, "mallory/widgets", "planwright/issue-3", "main");
    fake.ignore_head_filter();
    let ours = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "ours"))
        .await
        .unwrap();
    assert_ne!(ours.number.0, fork);
    let pulls = fake.pulls(REPO);
    assert_eq!(pulls.len(), 2, "{pulls:#?}");
    let theirs = pulls.iter().find(|p| p.number == fork).unwrap();
    assert_eq!(theirs.body.as_deref(), Some("fork body"));
    // Found again as ours, not theirs.
    let again = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "ours"))
        .await
        .unwrap();
    assert_eq!(again.number, ours.number);
}

#[tokio::test]
async fn pull_requests_are_numbered_beside_issues_and_looked_up_by_branch() {
    let (fake, _app, forge) = world().await;

    let created = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "first"))
        .await
        .unwrap();
    // Numbers are shared with issues: issue 3 exists.
    assert_eq!(created.number, PullNumber(4));
    assert_eq!(
        created.url,
        "https://github.com/Octo-Org/Hello-World/pull/4"
    );
    forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "second"))
        .await
        .unwrap();
    // Created at once; the second is refused as a duplicate and only then looked up.
    let creates: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/repos/octo-org/hello-world/pulls")
        .map(|r| r.status)
        .collect();
    assert_eq!(creates, [201, 422]);
    assert_eq!(fake.pulls(REPO).len(), 1);
    let lookups: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/pulls?"))
        .map(|r| r.path)
        .collect();
    assert_eq!(lookups.len(), 1);
    assert!(
        lookups[0].contains("head=octo-org%3Aplanwright%2Fissue-3")
            && lookups[0].contains("state=open"),
        "{}",
        lookups[0]
    );

    // Another branch gets its own.
    let other = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-9", "other"))
        .await
        .unwrap();
    assert_eq!(other.number, PullNumber(5));

    forge
        .update_pull_body(&repo(), created.number, "with the verification table")
        .await
        .unwrap();
    let stored = fake.pulls(REPO);
    assert_eq!(stored.len(), 2);
    assert_eq!(
        stored[0].body.as_deref(),
        Some("with the verification table")
    );
    assert_eq!(stored[1].body.as_deref(), Some("other"));
}

#[tokio::test]
async fn a_create_carried_out_then_lost_to_a_bad_gateway_opens_one_pull_request() {
    let (fake, _app, forge) = world().await;
    fake.perform_then_fail_on("POST", "/repos/octo-org/hello-world/pulls", 502);

    let pull = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "body"))
        .await
        .unwrap();

    let stored = fake.pulls(REPO);
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(pull.number.0, stored[0].number);
    assert_eq!(pull.body, "body");
    let creates: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/repos/octo-org/hello-world/pulls")
        .map(|r| r.status)
        .collect();
    assert_eq!(creates, [502, 422], "retried once, refused as a duplicate");

    // And a later call (a retried job) finds the same one: its create is refused as a
    // duplicate, nothing new is opened.
    let again = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "body"))
        .await
        .unwrap();
    assert_eq!(again, pull);
    assert_eq!(fake.pulls(REPO).len(), 1);
    assert_eq!(fake.count("POST", "/repos/octo-org/hello-world/pulls"), 3);
}

#[tokio::test]
async fn a_closed_pull_request_does_not_count_as_open() {
    let (fake, _app, forge) = world().await;
    let first = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "one"))
        .await
        .unwrap();
    // Closed on GitHub by someone (POST, as clients without PATCH send it).
    let token = fake.issued_tokens().pop().unwrap();
    let closed = reqwest::Client::new()
        .post(format!("{}/repos/{REPO}/pulls/{}", fake.url, first.number))
        .bearer_auth(&token)
        .json(&serde_json::json!({"state": "closed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);

    let second = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "two"))
        .await
        .unwrap();
    assert_ne!(second.number, first.number);
    assert_eq!(fake.pulls(REPO).len(), 2);
}

fn check<'a>(
    sha: &'a CommitSha,
    state: CheckState,
    summary: &'a str,
    text: &'a str,
) -> CommitCheck<'a> {
    CommitCheck {
        name: "planwright",
        head_sha: sha,
        state,
        title: "Verification",
        summary,
        text,
        details_url: Some("https://planwright.example.com/sessions/1"),
        new_commit: false,
    }
}

#[tokio::test]
async fn a_check_run_is_created_then_updated_in_place() {
    let (fake, _app, forge) = world().await;
    let sha = CommitSha(HEAD_SHA.into());
    // Another app's check of the same name stays untouched.
    let theirs = fake.add_foreign_check_run(REPO, HEAD_SHA, "planwright", 99);

    forge
        .set_check(
            &repo(),
            &check(&sha, CheckState::Running, "running the tests", ""),
        )
        .await
        .unwrap();
    let runs = fake.check_runs(REPO);
    let ours: Vec<_> = runs.iter().filter(|r| r.app_id == APP_ID).collect();
    assert_eq!(ours.len(), 1, "{runs:?}");
    assert_eq!(ours[0].status, "in_progress");
    assert_eq!(ours[0].conclusion, None);
    assert_eq!(ours[0].head_sha, HEAD_SHA);
    assert_eq!(ours[0].title.as_deref(), Some("Verification"));
    assert_eq!(ours[0].summary.as_deref(), Some("running the tests"));
    assert_eq!(ours[0].text, None);
    assert_eq!(
        ours[0].details_url.as_deref(),
        Some("https://planwright.example.com/sessions/1")
    );
    let id = ours[0].id;

    // A report longer than GitHub takes: 70,000 characters, more in bytes.
    let report = "é".repeat(70_000);
    forge
        .set_check(
            &repo(),
            &check(&sha, CheckState::Success, "all passed", &report),
        )
        .await
        .unwrap();
    let runs = fake.check_runs(REPO);
    let ours: Vec<_> = runs.iter().filter(|r| r.app_id == APP_ID).collect();
    assert_eq!(ours.len(), 1, "updated, not created again: {runs:?}");
    assert_eq!(ours[0].id, id);
    assert_eq!(ours[0].updates, 1);
    assert_eq!(ours[0].status, "completed");
    assert_eq!(ours[0].conclusion.as_deref(), Some("success"));
    let text = ours[0].text.as_deref().unwrap();
    assert!(text.len() <= GITHUB_TEXT_LIMIT, "{}", text.len());
    assert!(text.starts_with("éé"));
    assert!(
        text.ends_with("more bytes not shown."),
        "{}",
        &text[text.len() - 80..]
    );

    let foreign = fake
        .check_runs(REPO)
        .into_iter()
        .find(|r| r.id == theirs)
        .unwrap();
    assert_eq!(foreign.updates, 0);
    assert_eq!(foreign.summary.as_deref(), Some("theirs"));

    // Every state maps to what GitHub expects, on the same run.
    for (state, status, conclusion) in [
        (CheckState::Pending, "queued", None),
        (CheckState::Failure, "completed", Some("failure")),
        (CheckState::Neutral, "completed", Some("neutral")),
        (CheckState::Cancelled, "completed", Some("cancelled")),
        (CheckState::Running, "in_progress", None),
    ] {
        forge
            .set_check(&repo(), &check(&sha, state, "s", "t"))
            .await
            .unwrap();
        let run = fake
            .check_runs(REPO)
            .into_iter()
            .find(|r| r.id == id)
            .unwrap();
        assert_eq!(
            (run.status.as_str(), run.conclusion.as_deref()),
            (status, conclusion),
            "{state:?}"
        );
    }
    assert_eq!(
        fake.count("POST", "/repos/octo-org/hello-world/check-runs"),
        1
    );
}

#[tokio::test]
async fn the_fake_refuses_check_texts_longer_than_github_takes() {
    let (fake, _app, forge) = world().await;
    let sha = CommitSha(HEAD_SHA.into());
    forge
        .set_check(&repo(), &check(&sha, CheckState::Running, "s", ""))
        .await
        .unwrap();
    let id = fake.check_runs(REPO)[0].id;
    let token = fake.issued_tokens().pop().unwrap();
    let send = |text: String| {
        reqwest::Client::new()
            .patch(format!("{}/repos/{REPO}/check-runs/{id}", fake.url))
            .bearer_auth(&token)
            .json(&serde_json::json!({
                "output": {"title": "t", "summary": "s", "text": text},
            }))
            .send()
    };
    // GitHub counts characters, not bytes.
    let at_limit = send("é".repeat(CHECK_TEXT_LIMIT)).await.unwrap();
    assert_eq!(at_limit.status(), 200);
    let over = send("x".repeat(CHECK_TEXT_LIMIT + 1)).await.unwrap();
    assert_eq!(over.status(), 422);
}

#[tokio::test]
async fn minimizes_a_comment_as_outdated_through_graphql() {
    let (fake, _app, forge) = world().await;
    let old = fake.add_comment(REPO, 3, "contract v1", FakeUser::new("hubot", 5));

    assert!(
        forge
            .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
            .await
            .unwrap()
    );
    assert_eq!(
        fake.comment(old).unwrap().minimized.as_deref(),
        Some("OUTDATED")
    );
    let token = fake.issued_tokens().pop().unwrap();
    let graphql: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/graphql")
        .collect();
    assert_eq!(graphql.len(), 1);
    assert_eq!(graphql[0].method, "POST");
    assert_eq!(graphql[0].credential, Credential::Token(token));
    assert!(
        graphql[0].body.contains(&format!("IC_{old}")),
        "{}",
        graphql[0].body
    );

    let error = forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(999_999))
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");

    // GitHub's own answer for a node it does not know: 200, with `errors`.
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/graphql", fake.url))
        .bearer_auth(fake.issued_tokens().pop().unwrap())
        .json(&serde_json::json!({
            "query": "mutation($id: ID!) { minimizeComment(input: {subjectId: $id, classifier: OUTDATED}) { minimizedComment { isMinimized } } }",
            "variables": {"id": "IC_nope"},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["errors"][0]["type"], "NOT_FOUND", "{answer}");
    assert!(answer["data"].is_null(), "{answer}");
}

#[tokio::test]
async fn a_graphql_error_in_a_200_answer_is_a_failure_with_its_message() {
    let (fake, _app, forge) = world().await;
    let old = fake.add_comment(REPO, 3, "contract v1", FakeUser::new("hubot", 5));
    fake.graphql_error_next("FORBIDDEN", "Resource not accessible by integration");

    let error = forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ForgeError::Refused { message, .. } if message == "Resource not accessible by integration"),
        "{error:?}"
    );
    assert!(error.to_string().contains("minimize comment"), "{error}");
    assert_eq!(
        fake.count("POST", "/graphql"),
        1,
        "a refusal is not retried"
    );
    assert_eq!(fake.comment(old).unwrap().minimized, None);

    fake.graphql_error_next("RATE_LIMITED", "API rate limit exceeded");
    let error = forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::RateLimited { .. }), "{error:?}");
    assert!(error.is_retryable());

    // GitHub failing on its side answers 200 with an untyped error: that is tried again.
    let before = fake.count("POST", "/graphql");
    fake.graphql_error_next(
        "",
        "Something went wrong while executing your query. This may be the result of a timeout, or it could be a GitHub bug.",
    );
    assert!(
        forge
            .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
            .await
            .unwrap()
    );
    assert_eq!(
        fake.count("POST", "/graphql") - before,
        2,
        "the failed call, then its retry"
    );
    assert!(fake.comment(old).unwrap().minimized.is_some());
}

#[tokio::test]
async fn enterprise_server_urls_reach_rest_under_api_v3_and_graphql_beside_it() {
    let fake = FakeGithub::start().await;
    fake.add_repo(REPO, "main", HEAD_SHA);
    fake.add_installation(INSTALLATION, &[REPO]);
    fake.add_issue(REPO, 3, "t", None, &[], FakeUser::new("octocat", 1));
    let old = fake.add_comment(REPO, 3, "contract v1", FakeUser::new("hubot", 5));
    let app = GithubApp::from_settings(&fake.enterprise_settings())
        .unwrap()
        .with_retry(quick_retries());
    let forge = app.installation(InstallationId(INSTALLATION)).unwrap();

    assert!(
        forge
            .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
            .await
            .unwrap()
    );
    assert_eq!(
        fake.comment(old).unwrap().minimized.as_deref(),
        Some("OUTDATED")
    );
    let paths: Vec<(String, u16)> = fake
        .requests()
        .into_iter()
        .map(|r| (r.path, r.status))
        .collect();
    assert_eq!(
        paths,
        [
            (
                format!("/api/v3/app/installations/{INSTALLATION}/access_tokens"),
                201
            ),
            (
                format!("/api/v3/repos/octo-org/hello-world/issues/comments/{old}"),
                200
            ),
            ("/api/graphql".to_owned(), 200),
        ]
    );
}

#[tokio::test]
async fn a_revoked_token_is_replaced_for_graphql_too() {
    let (fake, _app, forge) = world().await;
    let old = fake.add_comment(REPO, 3, "contract v1", FakeUser::new("hubot", 5));
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    fake.revoke_tokens_before("POST", "/graphql");
    forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(old))
        .await
        .unwrap();
    assert_eq!(
        fake.comment(old).unwrap().minimized.as_deref(),
        Some("OUTDATED")
    );
    let graphql: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/graphql")
        .map(|r| r.status)
        .collect();
    assert_eq!(graphql, [401, 200]);
    assert_eq!(fake.issued_tokens().len(), 1, "a fresh token was minted");
}

/// Runs git with the remote's credentials handed over by a credential helper that reads
/// them from the environment: never in argv or the URL.
async fn git_with(
    remote: &GitRemote,
    dir: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    let mut command = git_command(dir);
    command
        .args([
            "-c",
            "credential.helper=",
            "-c",
            "credential.helper=!f() { test \"$1\" = get && echo username=\"$PW_GIT_USER\" && echo password=\"$PW_GIT_PASSWORD\"; }; f",
        ])
        .args(args)
        .env("PW_GIT_USER", &remote.username)
        .env("PW_GIT_PASSWORD", remote.password.expose_secret());
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn output_text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A mirror of a 20k-file monorepo is built and then updated over smart HTTP through the
/// mirror cache, as a session does, and holds exactly what `git clone --mirror` of the
/// same repository holds: the same branches at the same commits and the same objects,
/// a branch deleted upstream pruned. The token is nowhere in it.
#[tokio::test]
async fn a_mirror_over_smart_http_holds_what_git_clone_mirror_holds() {
    let (fake, _app, forge) = world().await;
    fake.create_git_repo(REPO, &[("README.md", "hello\n")]);
    let upstream = fake.git_dir(REPO);
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("tree");
    git(
        work.path(),
        &["clone", "--quiet", upstream.to_str().unwrap(), "tree"],
    );
    support::monorepo::monorepo(&tree, 2000);
    git(&tree, &["add", "--all"]);
    git(
        &tree,
        &["commit", "--quiet", "-m", "Crates and the library"],
    );
    git(
        &tree,
        &[
            "push",
            "--quiet",
            "origin",
            "HEAD:main",
            "HEAD:refs/heads/old",
        ],
    );
    let remote = forge.git_remote(&repo()).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let cache = MirrorCache::new(data.path());
    let key = MirrorKey::new("github", repo()).unwrap();

    cache.update(&key, &remote).await.unwrap();
    let mirror = cache.path(&key);
    let cloned = clone_mirror(&remote, work.path(), "first").await;
    assert_same_history(&mirror, &cloned);
    assert!(refs(&mirror).contains("refs/heads/old"));

    // A new commit on main and a deleted branch: the update brings one, prunes the other.
    std::fs::write(tree.join("inventory/stock.py"), "class Stock:\n    pass\n").unwrap();
    git(&tree, &["commit", "--quiet", "-am", "Shorter"]);
    git(
        &tree,
        &["push", "--quiet", "origin", "HEAD:main", ":refs/heads/old"],
    );
    cache.update(&key, &remote).await.unwrap();
    assert_eq!(cache.fetch_count(), 2);
    let cloned = clone_mirror(&remote, work.path(), "second").await;
    assert_same_history(&mirror, &cloned);
    assert!(!refs(&mirror).contains("refs/heads/old"));
    let fsck = git_command(&mirror)
        .args(["fsck", "--connectivity-only", "--no-dangling"])
        .output()
        .unwrap();
    assert!(fsck.status.success(), "{}", output_text(&fsck));

    let token = remote.password.expose_secret().as_bytes().to_vec();
    let mut stack = vec![mirror.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(token.len()).any(|w| w == token),
                    "the token is in {}",
                    path.display()
                );
            }
        }
    }
}

/// A partial mirror over smart HTTP: history without contents, and a workspace's files
/// fetched with the installation's token when the workspace is made.
#[tokio::test]
async fn a_partial_mirror_fetches_a_workspaces_files_over_smart_http() {
    let (fake, _app, forge) = world().await;
    fake.create_git_repo(REPO, &[("README.md", "hello\n"), ("old.txt", "old\n")]);
    let work = tempfile::tempdir().unwrap();
    let upstream = fake.git_dir(REPO);
    git(
        work.path(),
        &["clone", "--quiet", upstream.to_str().unwrap(), "tree"],
    );
    let tree = work.path().join("tree");
    std::fs::write(tree.join("README.md"), "hello again\n").unwrap();
    git(&tree, &["commit", "--quiet", "-am", "Again"]);
    git(&tree, &["push", "--quiet", "origin", "HEAD:main"]);
    let head = git(&tree, &["rev-parse", "HEAD"]);

    let data = tempfile::tempdir().unwrap();
    let cache = std::sync::Arc::new(
        MirrorCache::new(data.path())
            .with_partial(&["*".to_owned()])
            .unwrap(),
    );
    let workspaces = Workspaces::new(data.path(), cache.clone(), None);
    let key = MirrorKey::new("github", repo()).unwrap();
    let ws = workspaces
        .create(&WorkspaceRequest {
            mirror: key.clone(),
            remote: forge.git_remote(&repo()).await.unwrap(),
            base: CommitSha(head),
            issue: IssueNumber(3),
            title: "partial".into(),
            size: None,
        })
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.repo().join("README.md")).unwrap(),
        "hello again\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.repo().join("old.txt")).unwrap(),
        "old\n"
    );
    // The first README is history the workspace does not need: not fetched.
    let missing = git(
        &cache.path(&key),
        &["rev-list", "--objects", "--missing=print", "--all"],
    );
    assert_eq!(
        missing.lines().filter(|l| l.starts_with('?')).count(),
        1,
        "{missing}"
    );
    ws.finish(Outcome::Succeeded).await.unwrap();
}

/// A token the forge refuses fails the mirror's fetch as refused (so the session renews
/// it rather than retrying), without repeating the token, and leaves no mirror behind.
#[tokio::test]
async fn a_refused_token_fails_the_mirror_fetch_as_refused() {
    let (fake, _app, forge) = world().await;
    fake.create_git_repo(REPO, &[("README.md", "hello\n")]);
    let remote = GitRemote {
        password: "ghs_not_a_token".to_owned().into(),
        ..forge.git_remote(&repo()).await.unwrap()
    };
    let data = tempfile::tempdir().unwrap();
    let cache = MirrorCache::new(data.path());
    let key = MirrorKey::new("github", repo()).unwrap();
    let err = cache.update(&key, &remote).await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        matches!(err, WorkspaceError::Fetch { refused: true, .. }),
        "{text}"
    );
    assert!(text.contains("Authentication failed"), "{text}");
    assert!(!text.contains("ghs_not_a_token"), "{text}");
    assert!(!cache.path(&key).exists());
}

async fn clone_mirror(remote: &GitRemote, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let cloned = git_with(
        remote,
        dir,
        &["clone", "--mirror", "--quiet", &remote.url, name],
    )
    .await;
    assert!(cloned.status.success(), "{}", output_text(&cloned));
    dir.join(name)
}

fn refs(git_dir: &std::path::Path) -> String {
    git(
        git_dir,
        &[
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            "refs/heads",
        ],
    )
}

/// The same branches at the same commits, and the same objects reachable from them.
fn assert_same_history(ours: &std::path::Path, theirs: &std::path::Path) {
    assert_eq!(refs(ours), refs(theirs));
    let objects = |dir: &std::path::Path| {
        let mut all: Vec<String> = git(dir, &["rev-list", "--objects", "--all"])
            .lines()
            .map(str::to_owned)
            .collect();
        all.sort();
        all
    };
    let ours = objects(ours);
    assert!(ours.len() > 20_000, "{} objects", ours.len());
    assert!(ours == objects(theirs), "the objects differ");
}

#[tokio::test]
async fn git_clones_and_pushes_with_the_remote_credentials() {
    let (fake, _app, forge) = world().await;
    let first = fake.create_git_repo(REPO, &[("README.md", "hello\n")]);
    assert_eq!(
        forge.repository(&repo()).await.unwrap().head_sha.as_str(),
        first
    );

    let remote = forge.git_remote(&repo()).await.unwrap();
    // GitHub serves git at the web address, names in any case: nothing is asked for it.
    assert_eq!(remote.url, format!("{}/octo-org/hello-world.git", fake.url));
    assert_eq!(remote.username, "x-access-token");
    let token = remote.password.expose_secret().to_owned();
    assert!(token.starts_with("ghs_"));
    assert!(!remote.url.contains(&token));
    assert!(
        !format!("{remote:?}").contains(&token),
        "Debug shows the secret"
    );

    let work = tempfile::tempdir().unwrap();
    let cloned = git_with(
        &remote,
        work.path(),
        &["clone", "--quiet", &remote.url, "clone"],
    )
    .await;
    assert!(cloned.status.success(), "{}", output_text(&cloned));
    let clone = work.path().join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "hello\n"
    );

    // A push large enough that git streams it with chunked transfer encoding.
    // Random, so compression cannot shrink it below git's 1 MiB post buffer.
    let noise: Vec<u8> = (0..3_000_000).map(|_| rand::random::<u8>()).collect();
    std::fs::write(clone.join("data.bin"), &noise).unwrap();
    std::fs::write(clone.join("README.md"), "hello, fixed\n").unwrap();
    git(&clone, &["checkout", "--quiet", "-b", "planwright/issue-3"]);
    git(&clone, &["add", "--all"]);
    git(&clone, &["commit", "--quiet", "-m", "Fix the crash"]);
    let pushed_sha = git(&clone, &["rev-parse", "HEAD"]);
    let pushed = git_with(
        &remote,
        &clone,
        &[
            "push",
            "--quiet",
            "origin",
            "HEAD:refs/heads/planwright/issue-3",
        ],
    )
    .await;
    assert!(pushed.status.success(), "{}", output_text(&pushed));
    assert_eq!(
        git(
            &fake.git_dir(REPO),
            &["rev-parse", "refs/heads/planwright/issue-3"]
        ),
        pushed_sha
    );

    // The fake checks that both ends of a pull request exist in git.
    let pull = forge
        .find_or_create_pull(&repo(), &new_pull("planwright/issue-3", "body"))
        .await
        .unwrap();
    assert_eq!(pull.head_branch, "planwright/issue-3");
    let error = forge
        .find_or_create_pull(&repo(), &new_pull("no-such-branch", "body"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 422, .. }),
        "{error:?}"
    );

    // The installation's one token serves every remote and the REST calls until it is
    // near its end: nothing more was minted.
    let second = forge.git_remote(&repo()).await.unwrap();
    assert_eq!(second.password.expose_secret(), token);
    assert_eq!(fake.count("POST", "/app/installations/"), 1);

    for r in fake.requests() {
        assert!(!r.path.contains(&token), "token in a URL: {}", r.path);
    }
    let git_requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.path
                .to_ascii_lowercase()
                .starts_with("/octo-org/hello-world.git/")
        })
        .collect();
    assert!(
        git_requests
            .iter()
            .any(|r| r.status == 200 && r.credential == Credential::Token(token.clone())),
        "{git_requests:?}"
    );
}

#[tokio::test]
async fn git_refuses_a_wrong_a_revoked_or_another_repositorys_token() {
    let (fake, _app, forge) = world().await;
    const OTHER: &str = "Octo-Org/Other";
    fake.add_repo(OTHER, "main", HEAD_SHA);
    fake.add_installation(INSTALLATION, &[REPO, OTHER]);
    fake.create_git_repo(REPO, &[("README.md", "hello\n")]);
    fake.create_git_repo(OTHER, &[("README.md", "other\n")]);
    let remote = forge.git_remote(&repo()).await.unwrap();
    let work = tempfile::tempdir().unwrap();

    let cloned = git_with(
        &remote,
        work.path(),
        &["clone", "--quiet", &remote.url, "ok"],
    )
    .await;
    assert!(cloned.status.success(), "{}", output_text(&cloned));

    let wrong = GitRemote {
        password: "ghs_not_a_token".to_owned().into(),
        ..remote.clone()
    };
    let refused = git_with(
        &wrong,
        work.path(),
        &["clone", "--quiet", &remote.url, "wrong"],
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        output_text(&refused).contains("Authentication failed"),
        "{}",
        output_text(&refused)
    );

    let wrong_user = GitRemote {
        username: "someone".into(),
        ..remote.clone()
    };
    let refused = git_with(
        &wrong_user,
        work.path(),
        &["clone", "--quiet", &remote.url, "user"],
    )
    .await;
    assert!(!refused.status.success(), "{}", output_text(&refused));

    // The token is the installation's (shared with its REST calls): a repository outside
    // the installation is refused.
    const OUTSIDE: &str = "Octo-Org/Outside";
    fake.add_repo(OUTSIDE, "main", HEAD_SHA);
    fake.create_git_repo(OUTSIDE, &[("README.md", "outside\n")]);
    let outside_url = format!("{}/Octo-Org/Outside.git", fake.url);
    let refused = git_with(
        &remote,
        work.path(),
        &["clone", "--quiet", &outside_url, "outside"],
    )
    .await;
    assert!(!refused.status.success(), "{}", output_text(&refused));
    let other_url = format!("{}/Octo-Org/Other.git", fake.url);
    let other_remote = forge
        .git_remote(&RepoName::parse(OTHER).unwrap())
        .await
        .unwrap();
    let allowed = git_with(
        &other_remote,
        work.path(),
        &["clone", "--quiet", &other_url, "other"],
    )
    .await;
    assert!(allowed.status.success(), "{}", output_text(&allowed));

    // Once revoked, even the right token pushes nothing.
    fake.revoke_tokens();
    let clone = work.path().join("ok");
    git(
        &clone,
        &["commit", "--quiet", "--allow-empty", "-m", "late"],
    );
    let refused = git_with(
        &remote,
        &clone,
        &["push", "--quiet", "origin", "HEAD:refs/heads/late"],
    )
    .await;
    assert!(!refused.status.success(), "{}", output_text(&refused));
    let late = git_command(&fake.git_dir(REPO))
        .args(["rev-parse", "--verify", "--quiet", "refs/heads/late"])
        .output()
        .unwrap();
    assert!(!late.status.success(), "the refused push left a branch");
}

#[tokio::test]
async fn git_over_http_takes_compressed_requests() {
    let (fake, _app, forge) = world().await;
    fake.create_git_repo(REPO, &[("README.md", "hello\n")]);
    let remote = forge.git_remote(&repo()).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    let cloned = git_with(
        &remote,
        work.path(),
        &["clone", "--quiet", &remote.url, "a"],
    )
    .await;
    assert!(cloned.status.success(), "{}", output_text(&cloned));
    let a = work.path().join("a");
    // Forty branches on forty commits: a fresh clone then wants more than 1 KiB of
    // object ids, which git sends gzip-compressed.
    for i in 0..40 {
        git(
            &a,
            &["commit", "--quiet", "--allow-empty", "-m", &format!("c{i}")],
        );
        git(&a, &["branch", &format!("b{i}")]);
    }
    let pushed = git_with(
        &remote,
        &a,
        &["push", "--quiet", "origin", "refs/heads/*:refs/heads/*"],
    )
    .await;
    assert!(pushed.status.success(), "{}", output_text(&pushed));

    let b = work.path().join("b");
    std::fs::create_dir(&b).unwrap();
    git(&b, &["init", "--quiet"]);
    let fetched = git_with(
        &remote,
        &b,
        &[
            "fetch",
            "--quiet",
            &remote.url,
            "refs/heads/*:refs/remotes/origin/*",
        ],
    )
    .await;
    assert!(fetched.status.success(), "{}", output_text(&fetched));
    let branches = git(&b, &["branch", "--remotes"]);
    assert_eq!(branches.lines().count(), 41, "{branches}");
}

#[tokio::test]
async fn the_fake_holds_app_jwts_to_githubs_claims() {
    use octocrab::jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let fake = FakeGithub::start().await;
    let key =
        EncodingKey::from_rsa_pem(support::fake_forge::app_key().private_pem.as_bytes()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let status = |claims: serde_json::Value| {
        let jwt = encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap();
        let url = format!("{}/app", fake.url);
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(jwt)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let claims =
        |iss: u64, iat: u64, exp: u64| serde_json::json!({"iss": iss, "iat": iat, "exp": exp});

    // What octocrab sends: backdated a minute, nine minutes to live.
    assert_eq!(status(claims(APP_ID, now - 60, now + 540)).await, 200);
    assert_eq!(
        status(claims(APP_ID, now, now + 540)).await,
        401,
        "not backdated"
    );
    assert_eq!(
        status(claims(APP_ID, now - 60, now + 660)).await,
        401,
        "lives past ten minutes"
    );
    assert_eq!(
        status(claims(APP_ID, now - 600, now - 1)).await,
        401,
        "expired"
    );
    assert_eq!(
        status(claims(APP_ID + 1, now - 60, now + 540)).await,
        401,
        "another app"
    );
}

#[tokio::test]
async fn git_http_serves_on_its_own_behind_the_callers_check() {
    let root = tempfile::tempdir().unwrap();
    let sha = support::git_http::init_bare_repo(
        &root.path().join("group/project.git"),
        "trunk",
        &[("a.txt", "a\n")],
    );
    let server = support::git_http::GitHttp::new(root.path(), |user, password| {
        user == "oauth2" && password == "right"
    });
    let (url, task) = server.start().await;
    let remote = GitRemote {
        url: format!("{url}/group/project.git"),
        username: "oauth2".into(),
        password: "right".to_owned().into(),
    };

    let challenge = reqwest::get(format!("{}/info/refs?service=git-upload-pack", remote.url))
        .await
        .unwrap();
    assert_eq!(challenge.status(), 401);
    assert!(
        challenge.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic realm="),
    );

    let work = tempfile::tempdir().unwrap();
    let cloned = git_with(
        &remote,
        work.path(),
        &["clone", "--quiet", &remote.url, "c"],
    )
    .await;
    assert!(cloned.status.success(), "{}", output_text(&cloned));
    assert_eq!(git(&work.path().join("c"), &["rev-parse", "HEAD"]), sha);

    let wrong = GitRemote {
        password: "wrong".to_owned().into(),
        ..remote.clone()
    };
    let refused = git_with(&wrong, work.path(), &["clone", "--quiet", &remote.url, "d"]).await;
    assert!(!refused.status.success());
    task.abort();
}
