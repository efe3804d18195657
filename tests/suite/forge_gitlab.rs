//! The GitLab forge client (reqwest, `PRIVATE-TOKEN`, the retry helper) against the
//! stateful fake GitLab, beyond what `forge_conformance` holds every forge to: pagination,
//! access levels, label events, merge requests and commit statuses across retries, the
//! git remote.

use crate::support;

use std::time::Duration;

use planwright::event::Actor;
use planwright::forge::gitlab::GitlabForge;
use planwright::forge::{
    CheckState, CommitCheck, Forge, ForgeError, LabelChange, NewPullRequest, PullRequest, Reaction,
    RetryPolicy,
};
use planwright::ids::Permission;
use planwright::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};
use secrecy::ExposeSecret;
use support::fake_gitlab::{BOT_ID, BOT_USERNAME, FakeGitlab, FakeUser, TOKEN};

pub(super) const PROJECT: &str = "Acme/Platform/Widgets";
/// How the project appears in API paths: the lower-cased full path, slashes encoded.
pub(super) const API: &str = "/api/v4/projects/acme%2Fplatform%2Fwidgets";
pub(super) const HEAD: &str = "b83d6e391c22777fca1ed3012fce84f633d7fed0";
/// The head of the branch planwright pushes its work to.
pub(super) const WORK: &str = "9f1c0c6d1e2b3a4f5e6d7c8b9a0f1e2d3c4b5a69";
const BRANCH: &str = "planwright/issue-3";

pub(super) fn repo() -> RepoName {
    RepoName::parse(PROJECT).unwrap()
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

pub(super) async fn world() -> (FakeGitlab, GitlabForge) {
    let fake = FakeGitlab::start().await;
    fake.add_project(PROJECT, "main", HEAD);
    let author = fake.add_user("alice", 11);
    fake.add_issue(
        PROJECT,
        3,
        "Crash on empty config",
        Some("Steps:\n1. run it"),
        &["bug", "planwright"],
        author,
    );
    let forge = GitlabForge::from_settings(&fake.settings())
        .unwrap()
        .with_retry(quick_retries());
    (fake, forge)
}

#[tokio::test]
async fn reads_an_issue_with_its_authors_id_in_one_request() {
    let (fake, forge) = world().await;
    let issue = forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(issue.author.id, 11);
    assert_eq!(fake.statuses("GET", &format!("{API}/issues/3")), [200]);
}

#[tokio::test]
async fn lists_notes_across_pages_oldest_first_without_system_notes() {
    let (fake, forge) = world().await;
    let bob = fake.add_user("bob", 12);
    for i in 0..60 {
        fake.add_note(PROJECT, 3, &format!("note {i}"), bob.clone());
    }
    fake.add_system_note(PROJECT, 3, "added ~bug label", bob.clone());
    for i in 60..105 {
        fake.add_note(PROJECT, 3, &format!("note {i}"), bob.clone());
    }

    let comments = forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    let bodies: Vec<&str> = comments.iter().map(|c| c.body.as_str()).collect();
    let expected: Vec<String> = (0..105).map(|i| format!("note {i}")).collect();
    assert_eq!(bodies, expected);
    assert_eq!(comments[0].author.login, "bob");
    // 106 notes at 100 a page: two requests, both asking oldest first.
    let pages: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&format!("{API}/issues/3/notes")))
        .map(|r| r.path)
        .collect();
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(pages.iter().all(|p| p.contains("sort=asc")), "{pages:?}");
    assert!(pages[1].contains("page=2"), "{pages:?}");
}

#[tokio::test]
async fn follows_the_link_header_when_the_page_headers_are_gone() {
    let (fake, forge) = world().await;
    fake.paginate_with_link_only();
    let bob = fake.add_user("bob", 12);
    for i in 0..150 {
        fake.add_note(PROJECT, 3, &format!("note {i}"), bob.clone());
    }
    let comments = forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    assert_eq!(comments.len(), 150);
    assert_eq!(comments[149].body, "note 149");
    assert_eq!(fake.count("GET", &format!("{API}/issues/3/notes")), 2);
}

#[tokio::test]
async fn a_note_is_edited_in_one_request() {
    let (fake, forge) = world().await;
    let created = forge
        .create_comment(&repo(), IssueNumber(3), "planning…")
        .await
        .unwrap();
    forge
        .edit_comment(&repo(), IssueNumber(3), created.id, "awaiting approval")
        .await
        .unwrap();
    assert_eq!(
        fake.statuses("PUT", &format!("{API}/issues/3/notes/{}", created.id)),
        [200]
    );
}

#[tokio::test]
async fn an_award_already_given_is_recognised_rather_than_retried() {
    let (fake, forge) = world().await;
    let alice = FakeUser::new("alice", 11);
    let theirs = fake.add_note(PROJECT, 3, "/approve", alice);
    for reaction in [Reaction::PlusOne, Reaction::PlusOne, Reaction::Eyes] {
        forge
            .react(&repo(), IssueNumber(3), CommentId(theirs), reaction)
            .await
            .unwrap();
    }
    assert_eq!(
        fake.note(theirs).unwrap().awards,
        [
            ("thumbsup".to_owned(), BOT_USERNAME.to_owned()),
            ("eyes".to_owned(), BOT_USERNAME.to_owned()),
        ]
    );
    // The second award was GitLab's "already taken" 404.
    assert_eq!(
        fake.statuses(
            "POST",
            &format!("{API}/issues/3/notes/{theirs}/award_emoji")
        ),
        [201, 404, 201]
    );
}

#[tokio::test]
async fn maps_access_levels_onto_permissions() {
    let (fake, forge) = world().await;
    // (username, access level, expected)
    let cases = [
        ("guest", 10, Permission::Read),
        ("planner", 15, Permission::Triage),
        ("reporter", 20, Permission::Triage),
        ("developer", 30, Permission::Write),
        ("maintainer", 40, Permission::Maintain),
        ("owner", 50, Permission::Admin),
    ];
    for (i, (username, level, _)) in cases.iter().enumerate() {
        let user = fake.add_user(username, 100 + i as i64);
        fake.add_member(PROJECT, &user, *level);
    }
    fake.add_user("outsider", 200);
    let blocked = fake.add_user("blocked", 201);
    fake.set_member(PROJECT, &blocked, 40, "blocked", "active");
    let awaiting = fake.add_user("awaiting", 202);
    fake.set_member(PROJECT, &awaiting, 30, "active", "awaiting");

    for (username, _, expected) in cases {
        assert_eq!(
            forge.permission(&repo(), username).await.unwrap(),
            expected,
            "{username}"
        );
    }
    assert!(forge.permission(&repo(), "Developer").await.unwrap() >= Permission::Write);
    assert!(forge.permission(&repo(), "reporter").await.unwrap() < Permission::Write);
    for nobody in ["outsider", "no-such-user", "blocked", "awaiting"] {
        assert_eq!(
            forge.permission(&repo(), nobody).await.unwrap(),
            Permission::None,
            "{nobody}"
        );
    }
    // The non-member was looked up and answered 404, which is an answer, not retried.
    assert_eq!(
        fake.statuses("GET", &format!("{API}/members/all/200")),
        [404]
    );
}

#[tokio::test]
async fn says_who_added_or_removed_a_label_last_across_pages() {
    let (fake, forge) = world().await;
    let bob = fake.add_user("bob", 12);
    let carol = fake.add_user("carol", 13);
    let claimed = Actor {
        login: "mallory".into(),
        id: 66,
        bot: false,
    };
    let by = |label: &'static str| {
        let (forge, claimed) = (&forge, &claimed);
        async move {
            forge
                .label_changed_by(&repo(), IssueNumber(3), label, LabelChange::Added, claimed)
                .await
                .unwrap()
                .map(|a| a.login)
        }
    };
    // Created with its labels: GitLab has no event for those.
    assert_eq!(by("planwright").await, None);
    // Enough churn to spill over a page of 100 events before the last add.
    for _ in 0..60 {
        fake.set_labels(PROJECT, 3, &["bug", "Planwright"], &bob);
        fake.set_labels(PROJECT, 3, &["bug"], &bob);
    }
    fake.set_labels(PROJECT, 3, &["bug", "PlanWright"], &carol);
    fake.set_labels(PROJECT, 3, &["bug", "PlanWright", "docs"], &bob);
    assert_eq!(by("planwright").await.as_deref(), Some("carol"));
    assert_eq!(by("docs").await.as_deref(), Some("bob"));
    assert_eq!(by("feature").await, None);
    let removed = forge
        .label_changed_by(
            &repo(),
            IssueNumber(3),
            "planwright",
            LabelChange::Removed,
            &claimed,
        )
        .await
        .unwrap();
    assert_eq!(removed.map(|a| a.login).as_deref(), Some("bob"));
    let path = format!("{API}/issues/3/resource_label_events");
    // One page while there were no events, then two pages for each question.
    assert_eq!(fake.statuses("GET", &path).len(), 9);
}

#[tokio::test]
async fn files_are_asked_for_at_the_default_branch() {
    let (fake, forge) = world().await;
    fake.put_file(PROJECT, ".gitlab/planwright.yml", "label: planwright\n");
    forge
        .read_file(&repo(), ".gitlab/planwright.yml")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        forge.read_file(&repo(), ".planwright.yml").await.unwrap(),
        None
    );
    let asked: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/repository/files/"))
        .map(|r| r.path)
        .collect();
    // `HEAD` is GitLab's name for the default branch: no request to learn what it is.
    assert_eq!(
        asked,
        [
            format!("{API}/repository/files/.gitlab%2Fplanwright.yml?ref=HEAD"),
            // A missing file is an answer, not a failure: asked once.
            format!("{API}/repository/files/.planwright.yml?ref=HEAD"),
        ]
    );
    assert_eq!(fake.requests().len(), 2, "nothing but the files");
}

#[tokio::test]
async fn the_default_branch_and_its_head_are_one_request() {
    let (fake, forge) = world().await;
    forge.repository(&repo()).await.unwrap();
    assert_eq!(
        fake.statuses("GET", &format!("{API}/repository/branches/main")),
        [200]
    );
}

#[tokio::test]
async fn recognises_its_own_user_and_asks_once() {
    let (fake, forge) = world().await;
    let me = forge.bot_user().await.unwrap();
    assert_eq!(me.login, BOT_USERNAME);
    assert_eq!(me.id, BOT_ID);

    let created = forge
        .create_comment(&repo(), IssueNumber(3), "hello")
        .await
        .unwrap();
    assert!(forge.is_own(&created.author).await.unwrap());
    let by_login = Actor {
        login: BOT_USERNAME.to_uppercase(),
        id: 0,
        bot: false,
    };
    assert!(forge.is_own(&by_login).await.unwrap());
    let someone = Actor {
        login: "alice".into(),
        id: 11,
        bot: false,
    };
    assert!(!forge.is_own(&someone).await.unwrap());
    // A user who took the bot's old name is not the bot.
    let namesake = Actor {
        login: BOT_USERNAME.into(),
        id: 77,
        bot: false,
    };
    assert!(!forge.is_own(&namesake).await.unwrap());
    assert_eq!(fake.count("GET", "/api/v4/user"), 1);
}

#[tokio::test]
async fn a_304_to_a_request_that_was_not_conditional_is_a_clear_error() {
    let (fake, forge) = world().await;
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
    assert_eq!(fake.count("GET", &format!("{API}/issues/3")), 1);
}

#[tokio::test]
async fn a_missing_issue_is_asked_for_once_and_says_what_was_missing() {
    let (fake, forge) = world().await;
    for _ in 0..2 {
        let error = forge.issue(&repo(), IssueNumber(99)).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "Could not GET {}/issues/99: not found (404)",
                API.trim_start_matches("/api/v4")
            )
        );
    }
    assert_eq!(
        fake.statuses("GET", &format!("{API}/issues/99")),
        [404, 404]
    );
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_not_retried() {
    let fake = FakeGitlab::start().await;
    fake.add_project(PROJECT, "main", HEAD);
    let mut settings = fake.settings();
    settings.token = Some("glpat-wrong".to_owned().into());
    let forge = GitlabForge::from_settings(&settings)
        .unwrap()
        .with_retry(quick_retries());
    let error = forge.repository(&repo()).await.unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 401, .. }),
        "{error:?}"
    );
    assert_eq!(fake.statuses("GET", API), [401]);
}

#[tokio::test]
async fn missing_settings_are_named() {
    let fake = FakeGitlab::start().await;
    let mut settings = fake.settings();
    settings.token = None;
    let error = GitlabForge::from_settings(&settings).err().unwrap();
    assert!(format!("{error:#}").contains("GITLAB_TOKEN"), "{error:#}");
    let mut settings = fake.settings();
    settings.url = None;
    let error = GitlabForge::from_settings(&settings).err().unwrap();
    assert!(format!("{error:#}").contains("GITLAB_URL"), "{error:#}");
}

#[tokio::test]
async fn the_token_travels_only_in_its_header() {
    let (fake, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    forge.comments(&repo(), IssueNumber(3)).await.unwrap();
    forge.read_file(&repo(), "README.md").await.unwrap();
    forge.permission(&repo(), "alice").await.unwrap();

    // Failures too (what their errors show is held to in `forge_conformance`).
    forge.issue(&repo(), IssueNumber(99)).await.unwrap_err();
    forge
        .edit_comment(&repo(), IssueNumber(3), CommentId(1), "x")
        .await
        .unwrap_err();
    fake.fail_next(3, 500, &[]);
    forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    fake.fail_next(1, 422, &[]);
    forge
        .create_comment(&repo(), IssueNumber(3), "x")
        .await
        .unwrap_err();

    let requests = fake.requests();
    assert!(requests.len() > 8);
    for r in &requests {
        assert_eq!(r.credential.as_deref(), Some(TOKEN), "{r:?}");
        assert!(!r.path.contains(TOKEN), "token in a URL: {}", r.path);
        assert!(!r.body.contains(TOKEN), "token in a body: {}", r.body);
    }
}

#[tokio::test]
async fn a_spent_rate_limit_holds_later_calls_until_its_reset() {
    let (fake, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    let reset = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600)
        .to_string();
    // GitLab's answer when the token's window is spent.
    fake.fail_next(
        1,
        429,
        &[
            ("ratelimit-limit", "2000"),
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", &reset),
            ("retry-after", "3600"),
        ],
    );
    let error = forge.issue(&repo(), IssueNumber(3)).await.unwrap_err();
    assert!(matches!(error, ForgeError::RateLimited { .. }), "{error:?}");
    let sent = fake.requests().len();

    let held = forge
        .create_comment(&repo(), IssueNumber(3), "later")
        .await
        .unwrap_err();
    let ForgeError::RateLimited {
        retry_after: Some(wait),
        ..
    } = held
    else {
        panic!("expected a held call, got {held:?}");
    };
    assert!(wait > Duration::from_secs(3500) && wait <= Duration::from_secs(3600));
    assert_eq!(fake.requests().len(), sent, "nothing was sent");
    assert!(matches!(
        planwright::jobs::JobError::from(held).rate_limit_wait(),
        Some(w) if w == wait
    ));
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
    // reqwest and hyper log from tasks a scoped subscriber would not see.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let (fake, forge) = world().await;
    forge.issue(&repo(), IssueNumber(3)).await.unwrap();
    fake.fail_next(1, 502, &[]);
    forge.comments(&repo(), IssueNumber(3)).await.unwrap();
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
    assert!(!logs.contains(TOKEN), "token in the logs:\n{logs}");
}

fn new_pull<'a>(title: &'a str, body: &'a str) -> NewPullRequest<'a> {
    NewPullRequest {
        head_branch: BRANCH,
        base_branch: "main",
        title,
        body,
        draft: false,
    }
}

fn check<'a>(sha: &'a CommitSha, state: CheckState, title: &'a str) -> CommitCheck<'a> {
    CommitCheck {
        name: "planwright",
        head_sha: sha,
        state,
        title,
        summary: "## Verification\n\n12 passed",
        text: "full report",
        details_url: Some("https://planwright.example.com/sessions/1"),
        new_commit: false,
    }
}

#[tokio::test]
async fn a_draft_is_marked_ready_and_back_by_its_title() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);
    let created = forge
        .find_or_create_pull(
            &repo(),
            &NewPullRequest {
                draft: true,
                ..new_pull("Fix the crash", "failed")
            },
        )
        .await
        .unwrap();
    assert!(created.draft, "{created:?}");

    let ready = forge.set_draft(&repo(), &created, false).await.unwrap();
    assert!(!ready.draft);
    assert_eq!(fake.merge_requests(PROJECT)[0].title, "Fix the crash");
    let again = forge.set_draft(&repo(), &ready, true).await.unwrap();
    assert!(again.draft);
    assert_eq!(
        fake.merge_requests(PROJECT)[0].title,
        "Draft: Fix the crash"
    );
    // Any of GitLab's draft prefixes is taken off, not stacked.
    let marked = PullRequest {
        title: "[Draft] (draft) Fix the crash".into(),
        ..again
    };
    forge.set_draft(&repo(), &marked, false).await.unwrap();
    assert_eq!(fake.merge_requests(PROJECT)[0].title, "Fix the crash");
}

#[tokio::test]
async fn opens_a_merge_request_once_and_finds_it_after() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);

    let opened = forge
        .find_or_create_pull(&repo(), &new_pull("Fix the crash", "Closes #3"))
        .await
        .unwrap();
    assert_eq!(opened.number, PullNumber(1));
    assert_eq!(
        opened.url,
        "https://gitlab.example.com/Acme/Platform/Widgets/-/merge_requests/1"
    );

    // Found again whatever the title and body asked for now.
    let again = forge
        .find_or_create_pull(&repo(), &new_pull("Other title", "Other body"))
        .await
        .unwrap();
    assert_eq!(again, opened, "the open one is returned as it is");
    assert_eq!(fake.merge_requests(PROJECT).len(), 1);
    // Created at once; the second create is refused as a duplicate, then looked up.
    assert_eq!(
        fake.statuses("POST", &format!("{API}/merge_requests")),
        [201, 409]
    );
    let lookups: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.starts_with(&format!("{API}/merge_requests")))
        .map(|r| r.path)
        .collect();
    assert_eq!(lookups.len(), 1);
    assert!(
        lookups[0].contains("state=opened")
            && lookups[0].contains("source_branch=planwright%2Fissue-3"),
        "{lookups:?}"
    );
}

#[tokio::test]
async fn a_merge_request_created_behind_a_bad_gateway_is_not_opened_twice() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);
    let create = format!("{API}/merge_requests");
    fake.fail_after_performing("POST", &create, 502);

    let opened = forge
        .find_or_create_pull(&repo(), &new_pull("Fix the crash", "Closes #3"))
        .await
        .unwrap();
    // Created, answered 502, retried into GitLab's 409, then found.
    assert_eq!(fake.statuses("POST", &create), [502, 409]);
    let all = fake.merge_requests(PROJECT);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(opened.number, PullNumber(all[0].iid));
    assert_eq!(opened.body, "Closes #3");
}

#[tokio::test]
async fn closed_and_forked_merge_requests_are_not_taken_for_ours() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);
    let closed = fake.add_merge_request(PROJECT, BRANCH, "main", "Old attempt", "closed");
    let forked = fake.add_fork_merge_request(PROJECT, BRANCH, "main", "Someone's fork");

    let opened = forge
        .find_or_create_pull(&repo(), &new_pull("Fix the crash", "Closes #3"))
        .await
        .unwrap();
    assert_ne!(opened.number, PullNumber(closed));
    assert_ne!(opened.number, PullNumber(forked));
    let ours = fake.merge_request(PROJECT, opened.number.0).unwrap();
    assert_eq!(ours.title, "Fix the crash");
    assert_eq!(ours.state, "opened");
    assert_eq!(fake.merge_requests(PROJECT).len(), 3);
}

#[tokio::test]
async fn a_merge_request_from_a_missing_branch_is_refused_once() {
    let (fake, forge) = world().await;
    let error = forge
        .find_or_create_pull(&repo(), &new_pull("Fix the crash", "Closes #3"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ForgeError::Refused { status: 409, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("planwright/issue-3")
            && error.to_string().contains("does not exist"),
        "{error}"
    );
    assert_eq!(
        fake.statuses("POST", &format!("{API}/merge_requests")),
        [409]
    );
    assert!(fake.merge_requests(PROJECT).is_empty());
}

#[tokio::test]
async fn updates_the_description_and_cuts_what_gitlab_would_refuse() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);
    let long_title = "t".repeat(300);
    let opened = forge
        .find_or_create_pull(&repo(), &new_pull(&long_title, "draft"))
        .await
        .unwrap();
    assert_eq!(opened.title.chars().count(), 255);
    assert!(opened.title.ends_with('…'));

    let updated = forge
        .update_pull_body(&repo(), opened.number, "## Report\n\nall green")
        .await
        .unwrap();
    assert_eq!(updated.number, opened.number);
    assert_eq!(updated.body, "## Report\n\nall green");
    let stored = fake.merge_request(PROJECT, opened.number.0).unwrap();
    assert_eq!(stored.description, "## Report\n\nall green");
    assert_eq!(stored.history, ["draft"]);

    let huge = "x".repeat(1_100_000);
    let updated = forge
        .update_pull_body(&repo(), opened.number, &huge)
        .await
        .unwrap();
    assert!(updated.body.len() <= 1_048_576, "{}", updated.body.len());
    assert!(updated.body.starts_with("xxxx"));
    assert!(updated.body.ends_with("more bytes not shown."));

    let error = forge
        .update_pull_body(&repo(), PullNumber(99), "x")
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn a_check_moves_through_its_states_as_one_commit_status() {
    let (fake, forge) = world().await;
    fake.set_branch(PROJECT, BRANCH, WORK);
    let sha = CommitSha(WORK.into());
    let path = format!("{API}/statuses/{WORK}");

    forge
        .set_check(&repo(), &check(&sha, CheckState::Pending, "Queued"))
        .await
        .unwrap();
    forge
        .set_check(&repo(), &check(&sha, CheckState::Running, "Verifying"))
        .await
        .unwrap();
    // Running again: GitLab refuses the transition; the status is already there.
    forge
        .set_check(
            &repo(),
            &check(&sha, CheckState::Running, "Verifying (2/3)"),
        )
        .await
        .unwrap();
    forge
        .set_check(&repo(), &check(&sha, CheckState::Success, "12 passed"))
        .await
        .unwrap();
    assert_eq!(fake.statuses("POST", &path), [201, 201, 400, 201]);

    let history = fake.commit_statuses(PROJECT, WORK, "planwright");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].state, "success");
    assert_eq!(history[0].description.as_deref(), Some("12 passed"));
    assert_eq!(
        history[0].target_url.as_deref(),
        Some("https://planwright.example.com/sessions/1")
    );

    // A finished status is history: the next result is a new one.
    forge
        .set_check(&repo(), &check(&sha, CheckState::Failure, "2 failed"))
        .await
        .unwrap();
    forge
        .set_check(
            &repo(),
            &check(&sha, CheckState::Neutral, "baseline did not run"),
        )
        .await
        .unwrap();
    forge
        .set_check(&repo(), &check(&sha, CheckState::Cancelled, "cancelled"))
        .await
        .unwrap();
    let shown: Vec<(String, String)> = fake
        .commit_statuses(PROJECT, WORK, "planwright")
        .into_iter()
        .map(|s| (s.state, s.description.unwrap_or_default()))
        .collect();
    let expected = [
        ("success", "12 passed"),
        ("failed", "2 failed"),
        ("success", "Neutral: baseline did not run"),
        ("canceled", "cancelled"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(shown, expected);
}

#[tokio::test]
async fn a_status_description_is_cut_to_what_gitlab_keeps() {
    let (fake, forge) = world().await;
    let sha = CommitSha(HEAD.into());
    let title = format!("{}{}", "a".repeat(250), "b".repeat(50));
    assert_eq!(title.len(), 300);
    forge
        .set_check(&repo(), &check(&sha, CheckState::Success, &title))
        .await
        .unwrap();
    let stored = fake.commit_statuses(PROJECT, HEAD, "planwright");
    let description = stored[0].description.clone().unwrap();
    assert_eq!(description.chars().count(), 255);
    assert_eq!(description, format!("{}bbbb…", "a".repeat(250)));
    assert_eq!(
        fake.statuses("POST", &format!("{API}/statuses/{HEAD}")),
        [201]
    );
}

#[tokio::test]
async fn a_status_set_behind_a_bad_gateway_is_retried_into_place() {
    let (fake, forge) = world().await;
    let sha = CommitSha(HEAD.into());
    let path = format!("{API}/statuses/{HEAD}");
    fake.fail_after_performing("POST", &path, 502);
    forge
        .set_check(&repo(), &check(&sha, CheckState::Running, "Verifying"))
        .await
        .unwrap();
    assert_eq!(fake.statuses("POST", &path), [502, 400]);
    let stored = fake.commit_statuses(PROJECT, HEAD, "planwright");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].state, "running");
}

#[tokio::test]
async fn a_status_on_an_unknown_commit_is_an_error() {
    let (fake, forge) = world().await;
    let sha = CommitSha("0000000000000000000000000000000000000000".into());
    let error = forge
        .set_check(&repo(), &check(&sha, CheckState::Success, "ok"))
        .await
        .unwrap_err();
    assert!(matches!(error, ForgeError::NotFound { .. }), "{error:?}");
    assert!(
        fake.commit_statuses(PROJECT, sha.as_str(), "planwright")
            .is_empty()
    );
}

#[tokio::test]
async fn notes_cannot_be_minimized() {
    let (fake, forge) = world().await;
    let alice = FakeUser::new("alice", 11);
    let note = fake.add_note(PROJECT, 3, "old contract", alice);
    let folded = forge
        .minimize_comment(&repo(), IssueNumber(3), CommentId(note))
        .await
        .unwrap();
    assert!(!folded);
    assert!(fake.requests().is_empty(), "nothing to ask GitLab");
}

#[tokio::test]
async fn the_git_remote_is_the_clone_url_with_the_token_as_password() {
    let (fake, forge) = world().await;
    let remote = forge.git_remote(&repo()).await.unwrap();
    assert_eq!(
        remote.url,
        format!("{}/Acme/Platform/Widgets.git", fake.url)
    );
    assert_eq!(remote.username, "oauth2");
    assert_eq!(remote.password.expose_secret(), TOKEN);
    assert!(!remote.url.contains(TOKEN));
    assert!(!format!("{remote:?}").contains(TOKEN), "{remote:?}");
}

#[tokio::test]
async fn the_token_is_not_handed_to_a_clone_url_elsewhere() {
    let (fake, forge) = world().await;
    for elsewhere in [
        "https://git.attacker.example/acme/platform/widgets.git".to_owned(),
        format!("{}/Acme/Platform/Widgets.git", fake.url).replace("127.0.0.1", "localhost"),
    ] {
        fake.set_http_url_to_repo(PROJECT, &elsewhere);
        let error = forge.git_remote(&repo()).await.unwrap_err();
        assert!(matches!(error, ForgeError::Client { .. }), "{error:?}");
        let shown = error.to_string();
        assert!(
            shown.contains(&elsewhere) || shown.contains("localhost"),
            "{shown}"
        );
        assert!(!shown.contains(TOKEN));
    }
    // Another port on the same host is the same GitLab (a separate git HTTP endpoint).
    assert!(fake.url.starts_with("http://127.0.0.1:"));
    let git_server = "http://127.0.0.1:9/acme/widgets.git";
    fake.set_http_url_to_repo(PROJECT, git_server);
    let remote = forge.git_remote(&repo()).await.unwrap();
    assert_eq!(remote.url, git_server);
}
