//! The GitHub forge client (octocrab, App auth, the retry helper) against the stateful
//! fake GitHub: each operation, token caching, retries and what is not retried.

mod support;

use std::time::Duration;

use planwright::event::Actor;
use planwright::forge::github::{GithubApp, GithubForge};
use planwright::forge::{Forge, ForgeError, Permission, Reaction, RetryPolicy};
use planwright::ids::{CommentId, InstallationId, IssueNumber, RepoName};
use support::fake_forge::{APP_SLUG, Credential, FakeGithub, FakeUser};

const REPO: &str = "Octo-Org/Hello-World";
const INSTALLATION: i64 = 77;

fn repo() -> RepoName {
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

async fn world() -> (FakeGithub, GithubApp, GithubForge) {
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
async fn reads_an_issue_and_all_its_comments() {
    let (fake, _app, forge) = world().await;
    // More than one page (GitHub's maximum is 100 a page).
    for i in 0..105 {
        fake.add_comment(REPO, 3, &format!("comment {i}"), FakeUser::new("hubot", 5));
    }

    let issue = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(issue.title, "Crash on empty config");
    assert_eq!(issue.body, "Steps:\n1. run it");
    assert_eq!(issue.labels, ["bug", "planwright"]);
    assert_eq!(issue.author.login, "octocat");
    assert!(!issue.author.bot);

    let comments = forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(comments.len(), 105);
    assert_eq!(comments[0].body, "comment 0");
    assert_eq!(comments[104].body, "comment 104");
    assert_eq!(comments[0].author.login, "hubot");
    assert_eq!(
        fake.count("GET", "/repos/octo-org/hello-world/issues/3/comments"),
        2
    );
}

#[tokio::test]
async fn creates_then_edits_a_comment_and_reacts() {
    let (fake, app, forge) = world().await;

    let created = forge
        .create_comment(&repo(), IssueNumber(3), "planning…")
        .await
        .unwrap();
    assert_eq!(created.body, "planning…");
    assert_eq!(created.author.login, format!("{APP_SLUG}[bot]"));
    assert!(created.author.bot);
    assert!(forge.is_own(&created.author).await.unwrap());
    assert_eq!(app.bot_login().await.unwrap(), format!("{APP_SLUG}[bot]"));

    let edited = forge
        .edit_comment(&repo(), IssueNumber(3), created.id, "awaiting approval")
        .await
        .unwrap();
    assert_eq!(edited.id, created.id);
    let stored = fake.comment(created.id.0).unwrap();
    assert_eq!(stored.body, "awaiting approval");
    assert_eq!(stored.history, ["planning…"]);

    let theirs = fake.add_comment(REPO, 3, "/approve", FakeUser::new("octocat", 1));
    forge
        .react(
            &repo(),
            IssueNumber(3),
            CommentId(theirs),
            Reaction::PlusOne,
        )
        .await
        .unwrap();
    // Reacting twice is not an error (GitHub answers 200 for an existing reaction).
    forge
        .react(
            &repo(),
            IssueNumber(3),
            CommentId(theirs),
            Reaction::PlusOne,
        )
        .await
        .unwrap();
    assert_eq!(
        fake.comment(theirs).unwrap().reactions,
        [("+1".to_owned(), format!("{APP_SLUG}[bot]"))]
    );

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
async fn reads_files_and_the_default_branch() {
    let (fake, _app, forge) = world().await;
    let config = "label: planwright\nmin_permission: write\n# ünïcode and a long line: ".to_owned()
        + &"x".repeat(200);
    fake.put_file(REPO, ".github/planwright.yml", &config);

    assert_eq!(
        forge
            .read_file(&repo(), ".github/planwright.yml")
            .await
            .unwrap(),
        Some(config)
    );
    assert_eq!(
        forge.read_file(&repo(), ".planwright.yml").await.unwrap(),
        None
    );
    // A missing file is an answer, not a failure: asked once.
    assert_eq!(
        fake.count(
            "GET",
            "/repos/octo-org/hello-world/contents/.planwright.yml"
        ),
        1
    );

    let info = forge.repository(&repo()).await.unwrap();
    assert_eq!(info.default_branch, "main");
    assert_eq!(
        info.head_sha.as_str(),
        "6dcb09b5b57875f334f61aebed695e2e4193db5e"
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
async fn retries_a_bad_gateway() {
    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap(); // token in hand
    fake.fail_next(1, 502, &[]);

    let issue = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(issue.number, IssueNumber(3));
    let attempts: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/repos/octo-org/hello-world/issues/3")
        .map(|r| r.status)
        .collect();
    assert_eq!(attempts, [200, 502, 200]);
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
async fn waits_out_a_secondary_rate_limit() {
    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    fake.fail_next(1, 403, &[("retry-after", "1")]);

    let created = forge
        .create_comment(&repo(), IssueNumber(3), "hello")
        .await
        .unwrap();
    let attempts: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/repos/octo-org/hello-world/issues/3/comments")
        .map(|r| r.status)
        .collect();
    assert_eq!(attempts, [403, 201]);
    assert_eq!(fake.comment(created.id.0).unwrap().body, "hello");
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
        planwright::worker::JobError::from(error),
        planwright::worker::JobError::Retryable(_)
    ));
    assert_eq!(fake.count("GET", "/repos/octo-org/hello-world/issues/3"), 2);
}

#[tokio::test]
async fn a_missing_issue_is_not_retried_and_says_what_was_missing() {
    let (fake, _app, forge) = world().await;
    let error = forge.issue(&repo(), IssueNumber(99)).await.unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
    assert!(!error.is_retryable());
    assert!(matches!(
        planwright::worker::JobError::from(error),
        planwright::worker::JobError::Permanent(_)
    ));
    let error = forge.issue(&repo(), IssueNumber(99)).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Could not GET /repos/octo-org/hello-world/issues/99: not found (404)"
    );
    assert_eq!(
        fake.count("GET", "/repos/octo-org/hello-world/issues/99"),
        2
    );
}

#[tokio::test]
async fn no_error_carries_the_token() {
    let (fake, _app, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let token = fake.issued_tokens().pop().unwrap();

    let mut errors = vec![
        forge.issue(&repo(), IssueNumber(99)).await.unwrap_err(),
        forge
            .edit_comment(&repo(), IssueNumber(3), CommentId(1), "x")
            .await
            .unwrap_err(),
    ];
    fake.fail_next(3, 500, &[]);
    errors.push(forge.issue(&repo(), IssueNumber(3)).await.unwrap_err());
    fake.fail_next(1, 422, &[]);
    errors.push(
        forge
            .create_comment(&repo(), IssueNumber(3), "x")
            .await
            .unwrap_err(),
    );
    assert!(matches!(
        errors[2],
        ForgeError::Unavailable { status: 500, .. }
    ));
    assert!(matches!(errors[3], ForgeError::Refused { status: 422, .. }));
    for error in &errors {
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(&token), "token leaked: {shown}");
        assert!(!shown.contains("ghs_"), "token-like text leaked: {shown}");
    }
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
            (issue, 200),
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
    forge
        .create_comment(&repo(), IssueNumber(3), "hello")
        .await
        .unwrap();
    forge.issue(&repo(), IssueNumber(404)).await.unwrap_err();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("forge call failed; retrying"),
        "the capture works: {logs}"
    );
    let token = fake.issued_tokens().pop().unwrap();
    assert!(!logs.contains(&token), "token in the logs:\n{logs}");
}
