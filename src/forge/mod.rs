//! The forge layer: the `Forge` trait every other layer talks to, the normalized types it
//! speaks in (so no octocrab or GitLab model leaks out), the one error classification and
//! the one retry helper every forge call goes through.

pub mod budget;
mod conditional;
pub mod github;
pub mod gitlab;
mod links;
pub mod local;
pub mod oauth;
pub mod person;
mod registry;
pub mod repo_config;
mod route;

pub use links::WebLinks;
pub use registry::Forges;
pub use route::route;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

pub use crate::event::ReviewState;
use crate::event::{Actor, CiSource, Thread};
use secrecy::SecretString;

use crate::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};

/// A repository's default branch and where it points now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    pub name: RepoName,
    pub default_branch: String,
    pub head_sha: CommitSha,
    /// The repository's size in bytes as the forge reports it (GitHub's disk usage,
    /// GitLab's repository statistics); `None` where the forge does not say.
    pub size: Option<u64>,
    /// What the forge calls the repository by for as long as it exists (GitHub's and
    /// GitLab's numeric id; a local repository's folder): unlike its name, a rename keeps
    /// it and a repository deleted and made again under the same name gets a new one.
    /// `None` where the forge does not say.
    pub id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub number: IssueNumber,
    pub title: String,
    /// Empty when the author left it empty (GitHub sends `null`).
    pub body: String,
    pub labels: Vec<String>,
    pub author: Actor,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: CommentId,
    pub body: String,
    pub author: Actor,
    /// When the forge says it was written (seconds since the epoch); `None` where the
    /// forge keeps no such time.
    pub created_at: Option<i64>,
}

use crate::ids::Permission;

/// The reactions both forges offer; planwright uses them to acknowledge a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reaction {
    PlusOne,
    MinusOne,
    Laugh,
    Confused,
    Heart,
    Hooray,
    Rocket,
    Eyes,
}

impl Reaction {
    /// GitHub's `content` value.
    pub fn github_name(self) -> &'static str {
        match self {
            Reaction::PlusOne => "+1",
            Reaction::MinusOne => "-1",
            Reaction::Laugh => "laugh",
            Reaction::Confused => "confused",
            Reaction::Heart => "heart",
            Reaction::Hooray => "hooray",
            Reaction::Rocket => "rocket",
            Reaction::Eyes => "eyes",
        }
    }

    /// GitLab's award emoji name for the same picture.
    pub fn gitlab_name(self) -> &'static str {
        match self {
            Reaction::PlusOne => "thumbsup",
            Reaction::MinusOne => "thumbsdown",
            Reaction::Laugh => "smile",
            Reaction::Confused => "confused",
            Reaction::Heart => "heart",
            Reaction::Hooray => "tada",
            Reaction::Rocket => "rocket",
            Reaction::Eyes => "eyes",
        }
    }
}

/// A pull request (GitHub) or merge request (GitLab).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: PullNumber,
    /// The page a person opens to review it.
    pub url: String,
    pub head_branch: String,
    pub base_branch: String,
    pub title: String,
    pub body: String,
    /// A draft cannot be merged until someone (or planwright, for a passing round) marks
    /// it ready.
    pub draft: bool,
}

/// Whether a pull request can still take another round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullState {
    Open,
    Closed,
    Merged,
}

/// What `find_or_create_pull` opens when no open pull request has `head_branch` yet.
#[derive(Debug, Clone, Copy)]
pub struct NewPullRequest<'a> {
    pub head_branch: &'a str,
    pub base_branch: &'a str,
    pub title: &'a str,
    pub body: &'a str,
    /// Opened as a draft (GitHub's draft pull request, GitLab's `Draft: ` title), so it
    /// cannot be merged before someone marks it ready. Only applies when it is created.
    pub draft: bool,
}

/// Where a check stands. GitHub shows it as a check run, GitLab as a commit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckState {
    Pending,
    Running,
    Success,
    Failure,
    /// Finished without a verdict (e.g. verification could not run the baseline).
    Neutral,
    Cancelled,
}

/// A check on a commit, identified by `name` + `head_sha`: setting it again updates it.
#[derive(Debug, Clone, Copy)]
pub struct CommitCheck<'a> {
    pub name: &'a str,
    pub head_sha: &'a CommitSha,
    pub state: CheckState,
    /// One line.
    pub title: &'a str,
    /// Markdown; truncated with a note where the forge limits its length.
    pub summary: &'a str,
    /// Markdown details (test report); truncated likewise.
    pub text: &'a str,
    pub details_url: Option<&'a str>,
    /// The caller has just pushed `head_sha` to a branch that did not hold it, so no
    /// check of this name can be on it yet: the forge may create one without looking
    /// for one to update.
    pub new_commit: bool,
}

/// How git reaches a repository: the URL holds no credentials, they are handed to git
/// through its credential callback only.
#[derive(Debug, Clone)]
pub struct GitRemote {
    pub url: String,
    pub username: String,
    pub password: SecretString,
}

use crate::markdown::GITHUB_TEXT_LIMIT;

/// The last `max` bytes of `text` (on a character boundary), saying how much came before.
pub fn tail(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    std::borrow::Cow::Owned(format!(
        "[… the first {start} bytes of the log are not shown]\n{}",
        &text[start..]
    ))
}

/// `text` cut to at most `limit` bytes on a character boundary, ending with a note that
/// says how much was left out, so a reader never mistakes a cut report for a whole one.
pub fn truncate_with_note(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= limit {
        return std::borrow::Cow::Borrowed(text);
    }
    let note_for = |dropped: usize| format!("\n\n… truncated: {dropped} more bytes not shown.");
    // The note's length depends on the number it carries; the longest it can be is for
    // dropping the whole text.
    let room = limit.saturating_sub(note_for(text.len()).len());
    let mut cut = room.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text[..cut].to_owned();
    out.push_str(&note_for(text.len() - cut));
    std::borrow::Cow::Owned(out)
}

/// One failed check of another app or service on a commit, with what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCheck {
    /// The check run's name, the status's context, the pipeline job's name.
    pub name: String,
    /// `failure`, `timed_out`, `error`, `failed`, … as the forge says.
    pub conclusion: String,
    /// Where a person reads all of it.
    pub url: Option<String>,
    /// Its output to distill: a check run's title, summary, text and annotations, a
    /// status's description, the end of a job's log (at most [`CI_LOG_MAX`] bytes).
    pub log: String,
}

/// The most of one failed check's output planwright reads, in bytes (the end is kept:
/// logs end with the summary).
pub const CI_LOG_MAX: usize = 1 << 20;
/// The most failed checks of one report planwright reads.
pub const CI_CHECKS_MAX: usize = 10;

/// A comment on a line range of a pull request's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewComment {
    pub id: CommentId,
    /// The thread it sits in where the forge addresses replies by thread (a GitLab
    /// discussion); `None` on GitHub, which replies to the comment itself.
    pub thread: Option<String>,
    pub path: String,
    /// First and last line of the new file it is on; `None` for a comment on a removed
    /// line or a whole file.
    pub lines: Option<(i64, i64)>,
    /// The diff hunk it was written on, as the forge shows it.
    pub diff_hunk: String,
    pub body: String,
    pub author: Actor,
}

/// A submitted review as the forge has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub id: i64,
    pub author: Actor,
    pub state: ReviewState,
    pub body: String,
    /// Its inline comments, at most [`REVIEW_COMMENTS_MAX`] of them.
    pub comments: Vec<ReviewComment>,
    /// The review had more inline comments than were read.
    pub more_comments: bool,
}

/// The most inline comments of one review planwright reads.
pub const REVIEW_COMMENTS_MAX: usize = 500;

/// A label put on an issue or taken off it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelChange {
    Added,
    Removed,
}

/// What planwright needs from the place an issue lives. Later layers see only this.
#[async_trait]
pub trait Forge: Send + Sync {
    /// Where evidence links point: the forge's web view of the repository.
    fn web_links(&self, repo: &RepoName) -> crate::contract::SourceLinks;

    /// The address planwright's commits carry for `login`: the forge's no-reply domain.
    fn commit_email(&self, login: &str) -> String;

    /// The most bytes a pull request's body may hold.
    fn pull_body_limit(&self) -> usize;

    /// Whether a check on the commit carries the full verification report (GitHub's
    /// check runs do), so the pull request's body can leave it out.
    fn check_carries_report(&self) -> bool;

    /// Where the repository's settings file is looked for, first found wins.
    fn config_paths(&self) -> &'static [&'static str];

    /// Whether the forge keeps labels on issues. A local issue has none: `solve` itself
    /// stands for adding the trigger label.
    fn has_labels(&self) -> bool;

    /// Whether `actor` is planwright itself, so its own comments never trigger anything.
    async fn is_own(&self, actor: &Actor) -> Result<bool, ForgeError>;

    async fn repository(&self, repo: &RepoName) -> Result<Repository, ForgeError>;

    /// The repository's [`Repository::id`], where the forge has a cheaper way to it.
    async fn repository_id(&self, repo: &RepoName) -> Result<Option<String>, ForgeError> {
        Ok(self.repository(repo).await?.id)
    }

    async fn issue(&self, repo: &RepoName, issue: IssueNumber) -> Result<Issue, ForgeError>;

    /// Every comment on the issue, oldest first.
    async fn comments(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Vec<Comment>, ForgeError>;

    /// One comment on `thread` as the forge has it now: a webhook's copy is only what its
    /// sender claims. `NotFound` when there is no such comment on that thread.
    async fn comment(
        &self,
        repo: &RepoName,
        thread: Thread,
        comment: CommentId,
    ) -> Result<Comment, ForgeError>;

    async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Comment, ForgeError>;

    /// `issue` is the thread the comment is on: GitLab addresses notes through it.
    async fn edit_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        body: &str,
    ) -> Result<Comment, ForgeError>;

    /// Adding a reaction that is already there is not an error.
    async fn react(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        reaction: Reaction,
    ) -> Result<(), ForgeError>;

    async fn permission(&self, repo: &RepoName, login: &str) -> Result<Permission, ForgeError>;

    /// [`Forge::permission`] of someone the forge described (a comment's author, a label
    /// event's user): a forge that keys permissions by user id uses the id it gave.
    async fn permission_of(&self, repo: &RepoName, who: &Actor) -> Result<Permission, ForgeError> {
        self.permission(repo, &who.login).await
    }

    /// Who last made `change` to `label` on the issue, as the forge records it: a
    /// webhook's actor is only what its sender claims. `claimed` is that actor, the answer
    /// where the forge alone signs its webhooks. `None` when the forge has no record of
    /// such a change.
    async fn label_changed_by(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        label: &str,
        change: LabelChange,
        claimed: &Actor,
    ) -> Result<Option<Actor>, ForgeError>;

    /// A file's text on the default branch; `None` when there is no such file.
    async fn read_file(&self, repo: &RepoName, path: &str) -> Result<Option<String>, ForgeError>;

    /// The open pull request whose head is `new.head_branch`, or a new one. Safe to call
    /// again after a failure: it never opens a second one for the same branch.
    async fn find_or_create_pull(
        &self,
        repo: &RepoName,
        new: &NewPullRequest<'_>,
    ) -> Result<PullRequest, ForgeError>;

    /// Marks an open pull request ready for review (`draft: false`) or back to draft.
    /// A forge without drafts leaves it as it is.
    async fn set_draft(
        &self,
        _repo: &RepoName,
        pull: &PullRequest,
        _draft: bool,
    ) -> Result<PullRequest, ForgeError> {
        Ok(pull.clone())
    }

    async fn update_pull_body(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<PullRequest, ForgeError>;

    /// Creates the check `check.name` on `check.head_sha`, or updates it if it exists.
    async fn set_check(&self, repo: &RepoName, check: &CommitCheck<'_>) -> Result<(), ForgeError>;

    /// Folds a comment away as outdated. `Ok(false)` when the forge has no such thing
    /// (the caller then edits the body to say it is superseded).
    async fn minimize_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
    ) -> Result<bool, ForgeError>;

    /// Where to fetch and push the repository, with credentials valid for about an hour.
    async fn git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError>;

    /// [`Forge::git_remote`] with credentials renewed: for one more try after git refused
    /// the ones it was given (a token revoked since it was handed out).
    async fn renewed_git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError> {
        self.git_remote(repo).await
    }

    /// Review `review` of pull request `pull` as the forge has it, with its inline
    /// comments. `NotFound` when the pull request has no such review, or the forge has no
    /// reviews to address.
    async fn review(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        review: i64,
    ) -> Result<Review, ForgeError> {
        let _ = (repo, review);
        Err(ForgeError::NotFound {
            what: format!("find a review of pull request {pull}: this forge has none"),
        })
    }

    /// The inline comments `author` opened on the pull request's diff that are still
    /// unresolved, oldest first, at most [`REVIEW_COMMENTS_MAX`] (the flag: there were
    /// more). Where a forge gathers them into reviews (GitHub), the review is read
    /// instead and this finds none.
    async fn open_review_comments(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        author: &Actor,
    ) -> Result<(Vec<ReviewComment>, bool), ForgeError> {
        let _ = (repo, pull, author);
        Ok((Vec::new(), false))
    }

    /// The failed checks `source` reported on commit `sha`, as the forge has them now
    /// (none when it reports none there, or only planwright's own), at most
    /// [`CI_CHECKS_MAX`].
    async fn failed_checks(
        &self,
        repo: &RepoName,
        sha: &CommitSha,
        source: &CiSource,
    ) -> Result<Vec<FailedCheck>, ForgeError> {
        let _ = (repo, sha, source);
        Ok(Vec::new())
    }

    /// Whether pull request `pull` is open, closed or merged, as the forge says now.
    async fn pull_state(&self, repo: &RepoName, pull: PullNumber) -> Result<PullState, ForgeError> {
        let _ = (repo, pull);
        Ok(PullState::Open)
    }

    /// Writes `body` in the pull request's conversation.
    async fn comment_on_pull(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let _ = (repo, body);
        Err(ForgeError::Client {
            what: format!("comment on pull request {pull}"),
            message: "this forge has no pull request conversations".into(),
        })
    }

    /// Answers inline comment `comment` in its own thread (`thread`: the comment's
    /// [`ReviewComment::thread`]).
    async fn reply_to_review_comment(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        comment: CommentId,
        thread: Option<&str>,
        body: &str,
    ) -> Result<(), ForgeError> {
        let _ = (repo, thread, body);
        Err(ForgeError::Client {
            what: format!("reply to comment {comment} on pull request {pull}"),
            message: "this forge has no review threads".into(),
        })
    }
}

/// Why a forge call failed, classified once so callers and the retry helper only branch on
/// the kind. `what` names the call ("GET /repos/o/r/issues/3"); it never holds a token.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("Could not {what}: not found (404)")]
    NotFound { what: String },
    #[error("Could not {what}: the forge refused it ({status}): {message}")]
    Refused {
        what: String,
        status: u16,
        message: String,
    },
    #[error("Could not {what}: rate limited (retry after {retry_after:?})")]
    RateLimited {
        what: String,
        retry_after: Option<Duration>,
    },
    #[error("Could not {what}: the forge answered {status}: {message}")]
    Unavailable {
        what: String,
        status: u16,
        message: String,
    },
    #[error("Could not {what}: {message}")]
    Transport { what: String, message: String },
    #[error("Could not {what}: unexpected answer: {message}")]
    Malformed { what: String, message: String },
    /// Our side is misconfigured (a key that does not sign, a bad base URL).
    #[error("Could not {what}: {message}")]
    Client { what: String, message: String },
}

impl ForgeError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ForgeError::RateLimited { .. }
            | ForgeError::Unavailable { .. }
            | ForgeError::Transport { .. } => true,
            ForgeError::NotFound { .. }
            | ForgeError::Refused { .. }
            | ForgeError::Malformed { .. }
            | ForgeError::Client { .. } => false,
        }
    }

    /// A failed answer that is not a rate limit (each forge recognises its own rate
    /// limits first): gone, the forge's fault (retryable), or a refusal.
    pub(crate) fn from_status(what: String, status: u16, message: String) -> Self {
        match status {
            404 | 410 => ForgeError::NotFound { what },
            500..=599 => ForgeError::Unavailable {
                what,
                status,
                message,
            },
            _ => ForgeError::Refused {
                what,
                status,
                message,
            },
        }
    }

    /// How long the forge asked us to wait, when it said.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            ForgeError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Repository ids as last read, and when, by what the client reached the repository as
/// (GitHub: the installation and the name, so a repository made again under an old name
/// in another account's installation is read anew): a session asks for its repository's
/// id when it plans and again when it runs, and the id changes only when a repository is
/// deleted and made again, so it is read again after [`REPO_ID_KEPT`] rather than on
/// every run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RepoIds(Arc<std::sync::Mutex<HashMap<String, (String, Instant)>>>);

/// How long a repository's id is reused before it is read again.
pub(crate) const REPO_ID_KEPT: Duration = Duration::from_secs(10 * 60);

impl RepoIds {
    pub(crate) fn keep(&self, reached_as: &str, id: &str) {
        if let Ok(mut kept) = self.0.lock() {
            kept.insert(reached_as.to_owned(), (id.to_owned(), Instant::now()));
        }
    }

    /// The id read for `reached_as` less than [`REPO_ID_KEPT`] ago.
    pub(crate) fn fresh(&self, reached_as: &str) -> Option<String> {
        let kept = self.0.lock().ok()?;
        let (id, at) = kept.get(reached_as)?;
        (at.elapsed() < REPO_ID_KEPT).then(|| id.clone())
    }
}

/// A file's text from the base64 both forges send it in (wrapped over lines); the error
/// says what is wrong with it.
pub(crate) fn base64_text(path: &str, content: &str) -> Result<String, String> {
    use base64::Engine as _;
    let packed: String = content.split_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(packed)
        .map_err(|e| format!("bad base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))
}

/// Seconds since the epoch of an RFC 3339 time, as both forges write them.
pub(crate) fn unix_seconds(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp())
}

/// A response header as text, when it is text.
pub(crate) fn header<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// How hard one forge call is retried in-process before the failure goes back to the job
/// queue (which has its own, longer backoff).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub attempts: u32,
    /// Backoff before the second attempt; doubled each time up to `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// The longest wait a rate limit may ask for and still be waited out here; longer
    /// waits are handed back to the queue rather than holding a worker.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_rate_limit_wait: crate::config::RATE_LIMIT_WAIT,
        }
    }
}

impl RetryPolicy {
    /// Runs `call` until it succeeds, fails for good, or the attempts are spent.
    pub async fn run<T, F, Fut>(&self, call: F) -> Result<T, ForgeError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ForgeError>>,
    {
        self.run_while(call, ForgeError::is_retryable).await
    }

    /// For a call that creates something: a failure after which the forge may have done
    /// it anyway (a 5xx from a proxy, a timeout) is handed back rather than repeated, so
    /// the caller can look for what it created before trying again. Only a rate limit,
    /// which certainly did nothing, is waited out here.
    pub async fn run_create<T, F, Fut>(&self, call: F) -> Result<T, ForgeError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ForgeError>>,
    {
        self.run_while(call, |e| matches!(e, ForgeError::RateLimited { .. }))
            .await
    }

    async fn run_while<T, F, Fut>(
        &self,
        mut call: F,
        repeat: impl Fn(&ForgeError) -> bool,
    ) -> Result<T, ForgeError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ForgeError>>,
    {
        let mut delay = self.base_delay;
        let mut attempt = 1;
        loop {
            let error = match call().await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            if !repeat(&error) || attempt >= self.attempts.max(1) {
                return Err(error);
            }
            let wait = match error.retry_after() {
                Some(asked) if asked > self.max_rate_limit_wait => return Err(error),
                Some(asked) => asked,
                None => delay,
            };
            tracing::warn!(attempt, wait_ms = wait.as_millis() as u64, error = %error, "forge call failed; retrying");
            tokio::time::sleep(wait).await;
            delay = (delay * 2).min(self.max_delay);
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn quick() -> RetryPolicy {
        RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            max_rate_limit_wait: Duration::from_secs(5),
        }
    }

    fn unavailable() -> ForgeError {
        ForgeError::Unavailable {
            what: "GET /x".into(),
            status: 502,
            message: "Bad Gateway".into(),
        }
    }

    #[test]
    fn truncation_keeps_the_limit_and_says_what_was_cut() {
        assert_eq!(truncate_with_note("short", 10), "short");
        let long = "é".repeat(40_000); // 80,000 bytes
        let cut = truncate_with_note(&long, GITHUB_TEXT_LIMIT);
        assert!(cut.len() <= GITHUB_TEXT_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("more bytes not shown."));
        let kept = cut.split("\n\n… truncated").next().unwrap();
        let dropped: usize = cut
            .rsplit("truncated: ")
            .next()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(kept.len() + dropped, long.len());
    }

    #[test]
    fn permissions_are_ordered_and_parsed() {
        assert!(Permission::None < Permission::Read);
        assert!(Permission::Read < Permission::Triage);
        assert!(Permission::Triage < Permission::Write);
        assert!(Permission::Write < Permission::Maintain);
        assert!(Permission::Maintain < Permission::Admin);
        for p in [
            Permission::None,
            Permission::Read,
            Permission::Triage,
            Permission::Write,
            Permission::Maintain,
            Permission::Admin,
        ] {
            assert_eq!(p.as_str().parse::<Permission>().unwrap(), p);
        }
        assert!("owner".parse::<Permission>().is_err());
    }

    #[tokio::test]
    async fn retries_retryable_errors_until_attempts_are_spent() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = quick()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(unavailable())
            })
            .await;
        assert!(matches!(result, Err(ForgeError::Unavailable { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn does_not_retry_a_refusal_nor_an_overlong_rate_limit() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = quick()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ForgeError::NotFound {
                    what: "GET /x".into(),
                })
            })
            .await;
        assert!(matches!(result, Err(ForgeError::NotFound { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let calls = AtomicU32::new(0);
        let result: Result<(), _> = quick()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ForgeError::RateLimited {
                    what: "GET /x".into(),
                    retry_after: Some(Duration::from_secs(3600)),
                })
            })
            .await;
        let error = result.unwrap_err();
        assert!(error.is_retryable(), "the queue may still retry it later");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn succeeds_after_a_passing_failure() {
        let calls = AtomicU32::new(0);
        let result = quick()
            .run(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(unavailable())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
