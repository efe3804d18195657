//! What every `Forge` must do, written once and run against each implementation: GitHub
//! over the fake GitHub, GitLab over the fake GitLab, the local forge on a real git folder.
//! Wire details only one forge has stay in `forge_github`, `forge_gitlab` and `forge_local`.

use std::sync::Arc;

use planwright::forge::local::LocalForge;
use planwright::forge::{Forge, ForgeError, NewPullRequest, Reaction};
use planwright::ids::{CommentId, IssueNumber, PullNumber, RepoName};

use super::{forge_github, forge_gitlab, forge_local};
use crate::support::{fake_forge, fake_gitlab};

/// The outside world behind one forge, as a test arranges and inspects it.
enum Backend {
    Github(fake_forge::FakeGithub),
    Gitlab(fake_gitlab::FakeGitlab),
    Local(forge_local::Repo, Arc<LocalForge>),
}

/// A forge under test, the world it talks to, and what that world was set up with.
struct Subject {
    forge: Arc<dyn Forge>,
    backend: Backend,
    repo: RepoName,
    issue: IssueNumber,
    /// The issue's author, who is not planwright.
    author: &'static str,
    labels: &'static [&'static str],
    /// The login planwright's own comments are written under.
    bot: String,
}

impl Subject {
    async fn github() -> Subject {
        let (fake, _app, forge) = forge_github::world().await;
        Subject {
            forge: Arc::new(forge),
            backend: Backend::Github(fake),
            repo: forge_github::repo(),
            issue: IssueNumber(3),
            author: "octocat",
            labels: &["bug", "planwright"],
            bot: format!("{}[bot]", fake_forge::APP_SLUG),
        }
    }

    async fn gitlab() -> Subject {
        let (fake, forge) = forge_gitlab::world().await;
        Subject {
            forge: Arc::new(forge),
            backend: Backend::Gitlab(fake),
            repo: forge_gitlab::repo(),
            issue: IssueNumber(3),
            author: "alice",
            labels: &["bug", "planwright"],
            bot: fake_gitlab::BOT_USERNAME.to_owned(),
        }
    }

    async fn local() -> Subject {
        let repo = forge_local::repo();
        let (forge, _) = forge_local::open(&repo).await;
        let forge = Arc::new(forge);
        Subject {
            forge: forge.clone(),
            backend: Backend::Local(repo, forge),
            repo: forge_local::name(),
            issue: planwright::forge::local::ISSUE,
            author: forge_local::USER,
            labels: &[],
            bot: planwright::forge::local::BOT_LOGIN.to_owned(),
        }
    }

    /// The issue's author writes a comment.
    fn someone_comments(&self, body: &str) -> CommentId {
        let issue = self.issue.0;
        match &self.backend {
            Backend::Github(fake) => CommentId(fake.add_comment(
                forge_github::REPO,
                issue,
                body,
                fake_forge::FakeUser::new(self.author, 1),
            )),
            Backend::Gitlab(fake) => CommentId(fake.add_note(
                forge_gitlab::PROJECT,
                issue,
                body,
                fake_gitlab::FakeUser::new(self.author, 11),
            )),
            Backend::Local(_, forge) => forge.add_comment(self.author, body).unwrap().id,
        }
    }

    /// A comment's text as the forge holds it, and each text it had before, oldest first.
    fn stored(&self, id: CommentId) -> (String, Vec<String>) {
        match &self.backend {
            Backend::Github(fake) => {
                let c = fake.comment(id.0).unwrap();
                (c.body, c.history)
            }
            Backend::Gitlab(fake) => {
                let n = fake.note(id.0).unwrap();
                (n.body, n.history)
            }
            Backend::Local(_, forge) => {
                let dir = forge.output_dir().join("comments");
                let base = format!("{:04}-{}", id.0, self.bot);
                let read = |name: String| std::fs::read_to_string(dir.join(name)).unwrap();
                let versions = std::fs::read_dir(&dir)
                    .unwrap()
                    .filter(|e| {
                        let name = e.as_ref().unwrap().file_name();
                        name.to_string_lossy().starts_with(&format!("{base}.v"))
                    })
                    .count();
                let history = (1..=versions)
                    .map(|v| read(format!("{base}.v{v}.md")))
                    .collect();
                (read(format!("{base}.md")), history)
            }
        }
    }

    /// The reactions on a comment in GitHub's names, with who gave them, oldest first.
    fn reactions(&self, id: CommentId) -> Vec<(String, String)> {
        match &self.backend {
            Backend::Github(fake) => fake.comment(id.0).unwrap().reactions,
            Backend::Gitlab(fake) => {
                let awards = fake.note(id.0).unwrap().awards;
                awards
                    .into_iter()
                    .map(|(name, by)| match name.as_str() {
                        "thumbsup" => ("+1".to_owned(), by),
                        _ => (name, by),
                    })
                    .collect()
            }
            Backend::Local(_, forge) => {
                let recorded =
                    std::fs::read_to_string(forge.output_dir().join("reactions.txt")).unwrap();
                recorded
                    .lines()
                    .filter_map(|l| l.split_once(' '))
                    .filter(|(on, _)| *on == id.0.to_string())
                    .map(|(_, name)| (name.to_owned(), self.bot.clone()))
                    .collect()
            }
        }
    }

    /// Puts a file on the default branch.
    fn put_file(&self, path: &str, content: &str) {
        match &self.backend {
            Backend::Github(fake) => fake.put_file(forge_github::REPO, path, content),
            Backend::Gitlab(fake) => fake.put_file(forge_gitlab::PROJECT, path, content),
            Backend::Local(repo, _) => {
                forge_local::commit_file(&repo.path, path, content, "Add a file");
            }
        }
    }

    /// The commit the default branch points at.
    fn head(&self) -> String {
        match &self.backend {
            Backend::Github(_) => forge_github::HEAD_SHA.to_owned(),
            Backend::Gitlab(_) => forge_gitlab::HEAD.to_owned(),
            Backend::Local(repo, _) => forge_local::git(&repo.path, &["rev-parse", "HEAD"]),
        }
    }

    /// Makes the forge hold branches in git, so that a pull request's branch must exist.
    fn hold_branches(&self) {
        if let Backend::Github(fake) = &self.backend {
            fake.create_git_repo(forge_github::REPO, &[("README.md", "hello\n")]);
        }
    }

    /// Pushes `branch`, one commit ahead of the default branch.
    fn push_branch(&self, branch: &str) {
        match &self.backend {
            Backend::Github(fake) => {
                fake.create_git_repo(forge_github::REPO, &[("README.md", "hello\n")]);
                let dir = fake.git_dir(forge_github::REPO);
                crate::support::git_http::git(&dir, &["branch", branch, "main"]);
            }
            Backend::Gitlab(fake) => {
                fake.set_branch(forge_gitlab::PROJECT, branch, forge_gitlab::WORK);
            }
            Backend::Local(repo, _) => {
                forge_local::git(&repo.path, &["branch", branch]);
            }
        }
    }

    /// The forge's API path of `suffix` within the repository, as its fake records it.
    fn api(&self, suffix: &str) -> String {
        match &self.backend {
            Backend::Github(_) => format!("/repos/octo-org/hello-world{suffix}"),
            Backend::Gitlab(_) => format!("{}{suffix}", forge_gitlab::API),
            Backend::Local(..) => unreachable!("the local forge has no API"),
        }
    }

    /// Statuses the fake answered to `method` requests to exactly `path` (no query).
    fn statuses(&self, method: &str, path: &str) -> Vec<u16> {
        let requests: Vec<(String, String, u16)> = match &self.backend {
            Backend::Github(fake) => fake
                .requests()
                .into_iter()
                .map(|r| (r.method, r.path, r.status))
                .collect(),
            Backend::Gitlab(fake) => fake
                .requests()
                .into_iter()
                .map(|r| (r.method, r.path, r.status))
                .collect(),
            Backend::Local(..) => unreachable!("the local forge has no API"),
        };
        requests
            .into_iter()
            .filter(|(m, p, _)| m == method && p.split('?').next() == Some(path))
            .map(|(_, _, status)| status)
            .collect()
    }

    /// The next `n` requests fail with `status`.
    fn fail_next(&self, n: usize, status: u16) {
        match &self.backend {
            Backend::Github(fake) => fake.fail_next(n, status, &[]),
            Backend::Gitlab(fake) => fake.fail_next(n, status, &[]),
            Backend::Local(..) => unreachable!("the local forge has no API"),
        }
    }

    /// The next request is refused for a rate limit that lifts in a second, in the
    /// forge's own words; the status it is answered with.
    fn rate_limit_next(&self) -> u16 {
        match &self.backend {
            // GitHub's secondary rate limit.
            Backend::Github(fake) => {
                fake.fail_next(1, 403, &[("retry-after", "1")]);
                403
            }
            Backend::Gitlab(fake) => {
                let headers = [("retry-after", "1"), ("ratelimit-remaining", "0")];
                fake.fail_next(1, 429, &headers);
                429
            }
            Backend::Local(..) => unreachable!("the local forge has no API"),
        }
    }

    /// The next `method` request to `path` is carried out, then answered with `status`.
    fn perform_then_fail(&self, method: &str, path: &str, status: u16) {
        match &self.backend {
            Backend::Github(fake) => fake.perform_then_fail_on(method, path, status),
            Backend::Gitlab(fake) => fake.fail_after_performing(method, path, status),
            Backend::Local(..) => unreachable!("the local forge has no API"),
        }
    }

    /// The secret the forge sends, once it has one, and how such secrets start.
    fn token(&self) -> (String, &'static str) {
        match &self.backend {
            Backend::Github(fake) => (fake.issued_tokens().pop().unwrap(), "ghs_"),
            Backend::Gitlab(_) => (fake_gitlab::TOKEN.to_owned(), "glpat-"),
            Backend::Local(..) => unreachable!("the local forge has no secret"),
        }
    }
}

fn new_pull<'a>(head: &'a str, body: &'a str) -> NewPullRequest<'a> {
    NewPullRequest {
        head_branch: head,
        base_branch: "main",
        title: "Fix the crash on empty config",
        body,
        draft: false,
    }
}

const BRANCH: &str = "planwright/issue-3";

async fn reads_the_issue_and_a_missing_one_is_not_found(s: Subject) {
    let issue = s.forge.issue(&s.repo, s.issue).await.unwrap();
    assert_eq!(issue.number, s.issue);
    assert_eq!(issue.title, "Crash on empty config");
    assert_eq!(issue.body, "Steps:\n1. run it");
    assert_eq!(issue.labels, s.labels);
    assert_eq!(issue.author.login, s.author);
    assert!(!issue.author.bot);
    assert!(!s.forge.is_own(&issue.author).await.unwrap());

    let error = s.forge.issue(&s.repo, IssueNumber(99)).await.unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
    assert!(!error.is_retryable());
    assert!(matches!(
        planwright::jobs::JobError::from(error),
        planwright::jobs::JobError::Permanent(_)
    ));
}

async fn reads_every_comment_oldest_first(s: Subject) {
    // More than one page on the forges that page (at most 100 a page).
    for i in 0..105 {
        s.someone_comments(&format!("comment {i}"));
    }
    let comments = s.forge.comments(&s.repo, s.issue).await.unwrap();
    let bodies: Vec<&str> = comments.iter().map(|c| c.body.as_str()).collect();
    let expected: Vec<String> = (0..105).map(|i| format!("comment {i}")).collect();
    assert_eq!(bodies, expected);
    assert_eq!(comments[0].author.login, s.author);
    assert_eq!(comments[104].author.login, s.author);
}

async fn creates_then_edits_a_comment_keeping_what_it_said(s: Subject) {
    let created = s
        .forge
        .create_comment(&s.repo, s.issue, "planning…")
        .await
        .unwrap();
    assert_eq!(created.body, "planning…");
    assert_eq!(created.author.login, s.bot);
    assert!(s.forge.is_own(&created.author).await.unwrap());
    assert_eq!(s.stored(created.id), ("planning…".to_owned(), Vec::new()));

    let edited = s
        .forge
        .edit_comment(&s.repo, s.issue, created.id, "awaiting approval")
        .await
        .unwrap();
    assert_eq!(edited.id, created.id);
    assert_eq!(edited.body, "awaiting approval");
    assert_eq!(
        s.stored(created.id),
        ("awaiting approval".to_owned(), vec!["planning…".to_owned()])
    );
    // Earlier texts are not comments of their own.
    let all = s.forge.comments(&s.repo, s.issue).await.unwrap();
    let seen: Vec<(CommentId, &str)> = all.iter().map(|c| (c.id, c.body.as_str())).collect();
    assert_eq!(seen, [(created.id, "awaiting approval")]);

    let theirs = s.someone_comments("/approve");
    let all = s.forge.comments(&s.repo, s.issue).await.unwrap();
    assert_eq!(all[1].id, theirs);
    assert!(!s.forge.is_own(&all[1].author).await.unwrap());
}

async fn reacts_once_however_often_asked(s: Subject) {
    let theirs = s.someone_comments("/approve");
    for _ in 0..2 {
        s.forge
            .react(&s.repo, s.issue, theirs, Reaction::PlusOne)
            .await
            .unwrap();
    }
    s.forge
        .react(&s.repo, s.issue, theirs, Reaction::Eyes)
        .await
        .unwrap();
    assert_eq!(
        s.reactions(theirs),
        [
            ("+1".to_owned(), s.bot.clone()),
            ("eyes".to_owned(), s.bot.clone())
        ]
    );

    let error = s
        .forge
        .react(&s.repo, s.issue, CommentId(999_999), Reaction::Rocket)
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

async fn reads_files_and_the_default_branch(s: Subject) {
    let config = "label: planwright\nmin_permission: write\n# ünïcode and a long line: ".to_owned()
        + &"x".repeat(200);
    s.put_file("docs/planwright.yml", &config);
    assert_eq!(
        s.forge
            .read_file(&s.repo, "docs/planwright.yml")
            .await
            .unwrap(),
        Some(config)
    );
    // A missing file is an answer, not a failure.
    assert_eq!(
        s.forge.read_file(&s.repo, "missing.yml").await.unwrap(),
        None
    );

    let info = s.forge.repository(&s.repo).await.unwrap();
    assert_eq!(info.name, s.repo);
    assert_eq!(info.default_branch, "main");
    assert_eq!(info.head_sha.as_str(), s.head());
    // What `MIRROR_PARTIAL_ABOVE` compares: the repository's bytes, as the forge says
    // (the fakes here hold no git repository: 0 bytes, as GitHub says of an empty one).
    assert!(info.size.is_some(), "{:?}", info.size);
    // What keeps one repository's setup cache and baselines from another's: an id of the
    // forge's, not the name, found the same both ways.
    let id = info
        .id
        .clone()
        .expect("the forge gives the repository's id");
    assert_ne!(id, s.repo.as_str());
    assert_eq!(
        s.forge.repository_id(&s.repo).await.unwrap(),
        Some(id),
        "{:?}",
        info.id
    );
}

async fn opens_one_pull_request_then_finds_and_updates_it(s: Subject) {
    s.push_branch(BRANCH);
    let opened = s
        .forge
        .find_or_create_pull(&s.repo, &new_pull(BRANCH, "first"))
        .await
        .unwrap();
    assert_eq!(opened.head_branch, BRANCH);
    assert_eq!(opened.base_branch, "main");
    assert_eq!(opened.title, "Fix the crash on empty config");
    assert_eq!(opened.body, "first");

    let again = s
        .forge
        .find_or_create_pull(&s.repo, &new_pull(BRANCH, "second"))
        .await
        .unwrap();
    assert_eq!(again, opened, "the open one is returned as it is");

    let updated = s
        .forge
        .update_pull_body(&s.repo, opened.number, "## Report\n\n12 passed")
        .await
        .unwrap();
    assert_eq!(updated.number, opened.number);
    assert_eq!(updated.head_branch, BRANCH);
    assert_eq!(updated.body, "## Report\n\n12 passed");
    let reread = s
        .forge
        .find_or_create_pull(&s.repo, &new_pull(BRANCH, "ignored"))
        .await
        .unwrap();
    assert_eq!(reread.body, "## Report\n\n12 passed");

    let error = s
        .forge
        .update_pull_body(&s.repo, PullNumber(99), "x")
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

async fn a_pull_request_needs_its_branch(s: Subject) {
    s.hold_branches();
    let error = s
        .forge
        .find_or_create_pull(&s.repo, &new_pull(BRANCH, "x"))
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::Refused { .. }), "{error:?}");
    assert!(!error.is_retryable());
}

async fn retries_a_bad_gateway(s: Subject) {
    s.forge.issue(&s.repo, s.issue).await.unwrap(); // credentials in hand
    s.fail_next(1, 502);
    let issue = s.forge.issue(&s.repo, s.issue).await.unwrap();
    assert_eq!(issue.number, s.issue);
    // The retry is answered; a forge that answers conditional reads says 304, unchanged.
    let statuses = s.statuses("GET", &s.api("/issues/3"));
    assert_eq!(statuses[..2], [200, 502]);
    assert!(matches!(statuses[2..], [200] | [304]), "{statuses:?}");
}

async fn waits_out_a_rate_limit(s: Subject) {
    s.forge.issue(&s.repo, s.issue).await.unwrap();
    let limited = s.rate_limit_next();
    let created = s
        .forge
        .create_comment(&s.repo, s.issue, "hello")
        .await
        .unwrap();
    let path = s.api(&comments_path(&s));
    assert_eq!(s.statuses("POST", &path), [limited, 201]);
    assert_eq!(s.stored(created.id).0, "hello");
}

/// Where a forge takes an issue's new comments.
fn comments_path(s: &Subject) -> String {
    match &s.backend {
        Backend::Github(_) => "/issues/3/comments".to_owned(),
        _ => "/issues/3/notes".to_owned(),
    }
}

async fn a_comment_created_behind_a_bad_gateway_is_not_posted_twice(s: Subject) {
    let path = s.api(&comments_path(&s));
    s.forge.issue(&s.repo, s.issue).await.unwrap();
    s.perform_then_fail("POST", &path, 502);
    let error = s
        .forge
        .create_comment(&s.repo, s.issue, "the contract")
        .await
        .unwrap_err();
    // Handed back (the job queue retries, after looking for the comment) rather than
    // repeated here, where it would post a second copy.
    assert!(error.is_retryable(), "{error}");
    assert_eq!(s.statuses("POST", &path), [502]);
    let posted = s.forge.comments(&s.repo, s.issue).await.unwrap();
    assert_eq!(
        posted.iter().filter(|c| c.body == "the contract").count(),
        1
    );
}

async fn no_error_carries_the_token(s: Subject) {
    s.forge.issue(&s.repo, s.issue).await.unwrap();
    let (token, prefix) = s.token();

    let mut errors = vec![
        s.forge.issue(&s.repo, IssueNumber(99)).await.unwrap_err(),
        s.forge
            .edit_comment(&s.repo, s.issue, CommentId(1), "x")
            .await
            .unwrap_err(),
    ];
    s.fail_next(3, 500);
    errors.push(s.forge.issue(&s.repo, s.issue).await.unwrap_err());
    s.fail_next(1, 422);
    errors.push(
        s.forge
            .create_comment(&s.repo, s.issue, "x")
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
        assert!(!shown.contains(prefix), "token-like text leaked: {shown}");
    }
}

/// One test per behaviour and forge, `behaviour::github` and so on, so that each shows
/// by name and none can be skipped by a loop that ran zero times.
macro_rules! conformance {
    ($($behaviour:ident),* $(,)?) => {$(
        mod $behaviour {
            use super::Subject;

            #[tokio::test]
            async fn github() {
                super::$behaviour(Subject::github().await).await;
            }

            #[tokio::test]
            async fn gitlab() {
                super::$behaviour(Subject::gitlab().await).await;
            }

            #[tokio::test]
            async fn local() {
                super::$behaviour(Subject::local().await).await;
            }
        }
    )*};
}

/// The same for what only forges behind an API do: retries, and secrets kept to themselves.
macro_rules! remote_conformance {
    ($($behaviour:ident),* $(,)?) => {$(
        mod $behaviour {
            use super::Subject;

            #[tokio::test]
            async fn github() {
                super::$behaviour(Subject::github().await).await;
            }

            #[tokio::test]
            async fn gitlab() {
                super::$behaviour(Subject::gitlab().await).await;
            }
        }
    )*};
}

conformance!(
    reads_the_issue_and_a_missing_one_is_not_found,
    reads_every_comment_oldest_first,
    creates_then_edits_a_comment_keeping_what_it_said,
    reacts_once_however_often_asked,
    reads_files_and_the_default_branch,
    opens_one_pull_request_then_finds_and_updates_it,
    a_pull_request_needs_its_branch,
);

remote_conformance!(
    retries_a_bad_gateway,
    waits_out_a_rate_limit,
    a_comment_created_behind_a_bad_gateway_is_not_posted_twice,
    no_error_carries_the_token,
);
