//! GitHub as a forge: the App's identity (JWT from the app id and private key), one client
//! per installation whose token octocrab mints and refreshes, and the REST calls behind
//! the `Forge` trait. The app and its installations are in `app.rs`, the transport in
//! `client.rs`, the wire shapes in `wire.rs`.

mod app;
mod client;
mod person;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, StatusCode};
use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{
    CI_CHECKS_MAX, CheckState, Comment, CommitCheck, FailedCheck, Forge, ForgeError,
    GITHUB_TEXT_LIMIT, GitRemote, Issue, LabelChange, NewPullRequest, Permission, PullRequest,
    PullState, REVIEW_COMMENTS_MAX, Reaction, Repository, Review, ReviewComment, ReviewState,
    truncate_with_note,
};
use crate::contract::SourceLinks;
use crate::event::{Actor, CiSource, Thread};
use crate::ids::{CommentId, CommitSha, InstallationId, IssueNumber, PullNumber, RepoName};
use client::{
    MAX_PAGES, PER_PAGE, Shared, attempt, check_answer, classify_octocrab, encode_path,
    rate_limit_wait, repo_path,
};
use wire::*;

pub use app::{GithubApp, InstallationGrant};
pub use person::readable_repositories;

/// A token handed to git has at least this long left: enough for the fetch or push it is
/// for (installation tokens live an hour).
const GIT_TOKEN_MARGIN: Duration = Duration::from_secs(10 * 60);

/// One installation's view of GitHub.
pub struct GithubForge {
    shared: Arc<Shared>,
    client: Arc<Octocrab>,
    installation: InstallationId,
}

impl GithubForge {
    /// The repository as this installation reaches it: what its id is kept under.
    fn reached_as(&self, repo: &RepoName) -> String {
        format!("{}/{repo}", self.installation.0)
    }

    /// A POST that creates something, not repeated after a failure GitHub may have
    /// carried out anyway (`RetryPolicy::run_create`).
    async fn create<T: DeserializeOwned>(
        &self,
        path: &str,
        payload: &Value,
        what: &str,
    ) -> Result<T, ForgeError> {
        let budget = self.shared.budget_scope(Some(self.installation));
        self.shared
            .retry
            .run_create(|| {
                attempt(
                    &self.client,
                    &self.shared.answers,
                    &budget,
                    &Method::POST,
                    path,
                    Some(payload),
                    what,
                )
            })
            .await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ForgeError> {
        self.shared
            .request(
                &self.client,
                Some(self.installation),
                Method::GET,
                path,
                None,
            )
            .await
    }
}

#[async_trait]
impl Forge for GithubForge {
    fn web_links(&self, repo: &RepoName) -> SourceLinks {
        SourceLinks::GitHub {
            repo_url: format!("{}/{repo}", self.shared.web_url),
        }
    }

    fn commit_email(&self, login: &str) -> String {
        format!("{login}@users.noreply.github.com")
    }

    fn pull_body_limit(&self) -> usize {
        GITHUB_TEXT_LIMIT
    }

    fn check_carries_report(&self) -> bool {
        true
    }

    fn config_paths(&self) -> &'static [&'static str] {
        &[".github/planwright.yml", ".planwright.yml"]
    }

    fn has_labels(&self) -> bool {
        true
    }

    async fn is_own(&self, actor: &Actor) -> Result<bool, ForgeError> {
        let app = GithubApp {
            shared: Arc::clone(&self.shared),
        };
        let login = app.bot_login().await?;
        Ok(actor.login.eq_ignore_ascii_case(&login))
    }

    async fn repository(&self, repo: &RepoName) -> Result<Repository, ForgeError> {
        // One GraphQL query for what REST answers in two (the repository, then its
        // default branch).
        let (owner, name) = repo.as_str().split_once('/').unwrap_or((repo.as_str(), ""));
        let payload = json!({
            "query": "query($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { databaseId diskUsage defaultBranchRef { name target { oid } } } }",
            "variables": { "owner": owner, "name": name },
        });
        let what = format!(
            "read {repo}'s default branch (POST {})",
            self.shared.graphql_url
        );
        let data = match self.graphql(&what, &payload).await {
            Ok(data) => data,
            Err(ForgeError::Refused { message, .. }) if message.contains("Could not resolve") => {
                return Err(ForgeError::NotFound { what });
            }
            Err(e) => return Err(e),
        };
        let found: GhRepoQuery =
            serde_json::from_value(data).map_err(|e| ForgeError::Malformed {
                what: what.clone(),
                message: e.to_string(),
            })?;
        let node = found
            .repository
            .ok_or_else(|| ForgeError::NotFound { what: what.clone() })?;
        // In KiB; GitHub may leave it out (`null`) for a repository it is still moving.
        let size = node.disk_usage.map(|kib| kib.saturating_mul(1024));
        let branch = node.default_branch_ref.ok_or_else(|| ForgeError::Refused {
            what,
            status: 409,
            message: "the repository is empty: it has no default branch".into(),
        })?;
        let id = node.database_id.map(|id| id.to_string());
        if let Some(id) = &id {
            self.shared.repo_ids.keep(&self.reached_as(repo), id);
        }
        Ok(Repository {
            name: repo.clone(),
            default_branch: branch.name,
            head_sha: CommitSha(branch.target.oid),
            size,
            id,
        })
    }

    async fn repository_id(&self, repo: &RepoName) -> Result<Option<String>, ForgeError> {
        match self.shared.repo_ids.fresh(&self.reached_as(repo)) {
            Some(id) => Ok(Some(id)),
            None => Ok(self.repository(repo).await?.id),
        }
    }

    async fn issue(&self, repo: &RepoName, issue: IssueNumber) -> Result<Issue, ForgeError> {
        let found: GhIssue = self
            .get(&format!("{}/issues/{issue}", repo_path(repo)))
            .await?;
        Ok(Issue {
            number: IssueNumber(found.number),
            title: found.title,
            body: found.body.unwrap_or_default(),
            labels: found.labels.into_iter().map(|l| l.name).collect(),
            author: found.user.into(),
        })
    }

    async fn comments(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Vec<Comment>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let batch: Vec<GhComment> = self
                .get(&format!(
                    "{}/issues/{issue}/comments?per_page={PER_PAGE}&page={page}",
                    repo_path(repo)
                ))
                .await?;
            let last = batch.len() < PER_PAGE;
            all.extend(batch.into_iter().map(Comment::from));
            if last {
                break;
            }
        }
        Ok(all)
    }

    async fn comment(
        &self,
        repo: &RepoName,
        thread: Thread,
        comment: CommentId,
    ) -> Result<Comment, ForgeError> {
        let number = match thread {
            Thread::Issue(issue) => issue.0,
            Thread::PullRequest(pull) => pull.0,
        };
        // A pull request's conversation comments are issue comments; comments on a diff
        // line are review comments, kept apart.
        let mut places = vec![format!("{}/issues/comments/{comment}", repo_path(repo))];
        if matches!(thread, Thread::PullRequest(_)) {
            places.push(format!("{}/pulls/comments/{comment}", repo_path(repo)));
        }
        for path in &places {
            match self.get::<GhComment>(path).await {
                Ok(found) if found.is_on(number) => return Ok(found.into()),
                Ok(_) | Err(ForgeError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(ForgeError::NotFound {
            what: format!("find comment {comment} on #{number} of {repo}"),
        })
    }

    async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        // Not repeated after a failure GitHub may have stored anyway (a 502, a timeout):
        // the session layer posts with a marker and looks for it before posting again.
        let path = format!("{}/issues/{issue}/comments", repo_path(repo));
        let what = format!("POST {path}");
        let payload = json!({ "body": body });
        let created: GhComment = self.create(&path, &payload, &what).await?;
        Ok(created.into())
    }

    async fn edit_comment(
        &self,
        repo: &RepoName,
        _issue: IssueNumber,
        comment: CommentId,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let edited: GhComment = self
            .shared
            .request(
                &self.client,
                Some(self.installation),
                Method::PATCH,
                &format!("{}/issues/comments/{comment}", repo_path(repo)),
                Some(&json!({ "body": body })),
            )
            .await?;
        Ok(edited.into())
    }

    async fn react(
        &self,
        repo: &RepoName,
        _issue: IssueNumber,
        comment: CommentId,
        reaction: Reaction,
    ) -> Result<(), ForgeError> {
        // GitHub answers 200 instead of 201 when the reaction exists: both are success.
        let _: Value = self
            .shared
            .request(
                &self.client,
                Some(self.installation),
                Method::POST,
                &format!("{}/issues/comments/{comment}/reactions", repo_path(repo)),
                Some(&json!({ "content": reaction.github_name() })),
            )
            .await?;
        Ok(())
    }

    async fn permission(&self, repo: &RepoName, login: &str) -> Result<Permission, ForgeError> {
        let path = format!(
            "{}/collaborators/{}/permission",
            repo_path(repo),
            encode_path(login)
        );
        let found: GhPermission = self.get(&path).await?;
        // `permission` folds maintain into write and triage into read; `role_name` keeps
        // them apart but is a custom role's name on organisations that define roles.
        let level = found
            .role_name
            .as_deref()
            .and_then(|r| r.parse().ok())
            .or_else(|| found.permission.parse().ok());
        level.ok_or_else(|| ForgeError::Malformed {
            what: format!("GET {path}"),
            message: format!("unknown permission `{}`", found.permission),
        })
    }

    /// GitHub signs each webhook with the app's own secret, which only GitHub and
    /// planwright hold: the payload's sender is GitHub's word.
    async fn label_changed_by(
        &self,
        _repo: &RepoName,
        _issue: IssueNumber,
        _label: &str,
        _change: LabelChange,
        claimed: &Actor,
    ) -> Result<Option<Actor>, ForgeError> {
        Ok(Some(claimed.clone()))
    }

    async fn read_file(&self, repo: &RepoName, path: &str) -> Result<Option<String>, ForgeError> {
        // No `ref`: the contents API reads the default branch, which is the only branch
        // repository configuration may come from.
        let route = format!("{}/contents/{}", repo_path(repo), encode_path(path));
        let found: Value = match self.get(&route).await {
            Ok(found) => found,
            Err(ForgeError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let malformed = |message: &str| ForgeError::Malformed {
            what: format!("GET {route}"),
            message: message.to_owned(),
        };
        let file: GhContent = serde_json::from_value(found)
            .map_err(|_| malformed("not a file (a directory listing?)"))?;
        if file.kind != "file" {
            return Err(malformed(&format!(
                "`{path}` is a {}, not a file",
                file.kind
            )));
        }
        if file.encoding.as_deref() != Some("base64") {
            return Err(malformed(&format!(
                "`{path}` is too large to read through the contents API"
            )));
        }
        super::base64_text(path, &file.content.unwrap_or_default())
            .map(Some)
            .map_err(|m| malformed(&m))
    }

    async fn find_or_create_pull(
        &self,
        repo: &RepoName,
        new: &NewPullRequest<'_>,
    ) -> Result<PullRequest, ForgeError> {
        // Created first and looked up only when GitHub says one is open already: a
        // session's first publication takes one request, a repeated one two.
        let created: Result<GhPull, _> = self
            .shared
            .request(
                &self.client,
                Some(self.installation),
                Method::POST,
                &format!("{}/pulls", repo_path(repo)),
                Some(&json!({
                    "title": new.title,
                    "head": new.head_branch,
                    "base": new.base_branch,
                    "body": new.body,
                    "draft": new.draft,
                })),
            )
            .await;
        match created {
            Ok(pull) => Ok(pull.into()),
            // A create GitHub performed before failing (a 502 from a proxy) is retried and
            // then refused as a duplicate: the pull request asked for exists, so use it.
            Err(ForgeError::Refused {
                status: 422,
                message,
                what,
            }) if message.contains("already exists") => self
                .open_pull(repo, new.head_branch)
                .await?
                .ok_or(ForgeError::Refused {
                    what,
                    status: 422,
                    message,
                }),
            Err(e) => Err(e),
        }
    }

    async fn set_draft(
        &self,
        repo: &RepoName,
        pull: &PullRequest,
        draft: bool,
    ) -> Result<PullRequest, ForgeError> {
        // REST cannot change it: GraphQL, by the pull request's node id.
        let (owner, name) = repo.as_str().split_once('/').unwrap_or((repo.as_str(), ""));
        let find = json!({
            "query": "query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, name: $name) { pullRequest(number: $number) { id } } }",
            "variables": { "owner": owner, "name": name, "number": pull.number.0 },
        });
        let what = format!(
            "find pull request #{} (POST {})",
            pull.number, self.shared.graphql_url
        );
        let data = self.graphql(&what, &find).await?;
        let id = data["repository"]["pullRequest"]["id"]
            .as_str()
            .ok_or_else(|| ForgeError::NotFound { what: what.clone() })?
            .to_owned();
        let mutation = match draft {
            true => {
                "mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) { pullRequest { isDraft } } }"
            }
            false => {
                "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }"
            }
        };
        let change = json!({ "query": mutation, "variables": { "id": id } });
        let what = format!(
            "mark pull request #{} {} (POST {})",
            pull.number,
            if draft { "as a draft" } else { "ready" },
            self.shared.graphql_url
        );
        self.graphql(&what, &change).await?;
        Ok(PullRequest {
            draft,
            ..pull.clone()
        })
    }

    async fn update_pull_body(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        let updated: GhPull = self
            .shared
            .request(
                &self.client,
                Some(self.installation),
                Method::PATCH,
                &format!("{}/pulls/{pull}", repo_path(repo)),
                Some(&json!({ "body": body })),
            )
            .await?;
        Ok(updated.into())
    }

    async fn set_check(&self, repo: &RepoName, check: &CommitCheck<'_>) -> Result<(), ForgeError> {
        let base = repo_path(repo);
        let app_id = self.shared.app_id.to_string();
        let query = serde_urlencoded::to_string([
            ("check_name", check.name),
            ("app_id", app_id.as_str()),
            ("filter", "latest"),
        ])
        .map_err(|e| ForgeError::Client {
            what: format!("find check `{}`", check.name),
            message: e.to_string(),
        })?;
        let found: GhCheckRuns = if check.new_commit {
            GhCheckRuns::default()
        } else {
            self.get(&format!(
                "{base}/commits/{}/check-runs?{query}",
                encode_path(check.head_sha.as_str())
            ))
            .await?
        };
        // Another app's check of the same name is not ours to overwrite.
        let ours = found.check_runs.into_iter().find(|run| {
            run.name == check.name && run.app.as_ref().is_some_and(|a| a.id == self.shared.app_id)
        });

        let (status, conclusion) = match check.state {
            CheckState::Pending => ("queued", None),
            CheckState::Running => ("in_progress", None),
            CheckState::Success => ("completed", Some("success")),
            CheckState::Failure => ("completed", Some("failure")),
            CheckState::Neutral => ("completed", Some("neutral")),
            CheckState::Cancelled => ("completed", Some("cancelled")),
        };
        let mut output = json!({
            "title": truncate_with_note(check.title, GITHUB_TEXT_LIMIT),
            "summary": truncate_with_note(check.summary, GITHUB_TEXT_LIMIT),
        });
        if !check.text.is_empty() {
            output["text"] = json!(truncate_with_note(check.text, GITHUB_TEXT_LIMIT));
        }
        let mut payload = json!({ "name": check.name, "status": status, "output": output });
        if let Some(conclusion) = conclusion {
            payload["conclusion"] = json!(conclusion);
        }
        if let Some(url) = check.details_url {
            payload["details_url"] = json!(url);
        }
        let _: Value = match ours {
            Some(run) => {
                self.shared
                    .request(
                        &self.client,
                        Some(self.installation),
                        Method::PATCH,
                        &format!("{base}/check-runs/{}", run.id),
                        Some(&payload),
                    )
                    .await?
            }
            None => {
                // Not repeated after a failure GitHub may have stored anyway: the caller's
                // next attempt finds the run by name and updates it instead.
                payload["head_sha"] = json!(check.head_sha.as_str());
                let path = format!("{base}/check-runs");
                let what = format!("POST {path}");
                self.create(&path, &payload, &what).await?
            }
        };
        Ok(())
    }

    async fn minimize_comment(
        &self,
        repo: &RepoName,
        _issue: IssueNumber,
        comment: CommentId,
    ) -> Result<bool, ForgeError> {
        let found: GhNode = self
            .get(&format!("{}/issues/comments/{comment}", repo_path(repo)))
            .await?;
        let payload = json!({
            "query": "mutation($id: ID!) { minimizeComment(input: {subjectId: $id, classifier: OUTDATED}) { minimizedComment { isMinimized } } }",
            "variables": { "id": found.node_id },
        });
        let what = format!(
            "minimize comment {comment} (POST {})",
            self.shared.graphql_url
        );
        self.graphql(&what, &payload).await?;
        Ok(true)
    }

    async fn git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError> {
        // GitHub serves every repository's git at `{web}/{owner}/{repo}.git` (renamed ones
        // redirect), so no request is needed to learn where.
        let url = format!("{}/{repo}.git", self.shared.web_url);
        // The installation's one token, shared with the REST client: minted again only
        // when it has less than `GIT_TOKEN_MARGIN` left, so a fetch or push started now
        // does not outlive it. octocrab drops it at a 401, so a revoked one is renewed.
        let what = || format!("use installation {}'s token for git", self.installation);
        let margin = chrono::Duration::from_std(GIT_TOKEN_MARGIN).unwrap_or_default();
        let password = self
            .client
            .installation_token_with_buffer(margin)
            .await
            .map_err(|e| classify_octocrab(what(), e))?;
        Ok(GitRemote {
            url,
            username: "x-access-token".to_owned(),
            password,
        })
    }

    async fn renewed_git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError> {
        // A margin longer than any token lives: octocrab mints a new one and keeps it,
        // so REST renews with it too.
        let what = || format!("renew installation {}'s token", self.installation);
        let longer = chrono::Duration::hours(2);
        let password = self
            .client
            .installation_token_with_buffer(longer)
            .await
            .map_err(|e| classify_octocrab(what(), e))?;
        Ok(GitRemote {
            password,
            ..self.git_remote(repo).await?
        })
    }

    async fn review(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        review: i64,
    ) -> Result<Review, ForgeError> {
        let base = format!("{}/pulls/{pull}/reviews/{review}", repo_path(repo));
        let found: GhReview = self.get(&base).await?;
        let mut comments = Vec::new();
        let mut more_comments = false;
        for page in 1..=REVIEW_COMMENTS_MAX.div_ceil(PER_PAGE) {
            let batch: Vec<GhReviewComment> = self
                .get(&format!("{base}/comments?per_page={PER_PAGE}&page={page}"))
                .await?;
            let full = batch.len() == PER_PAGE;
            comments.extend(batch.into_iter().map(ReviewComment::from));
            if !full {
                break;
            }
            more_comments = comments.len() >= REVIEW_COMMENTS_MAX;
        }
        comments.truncate(REVIEW_COMMENTS_MAX);
        Ok(Review {
            id: found.id,
            author: found.user.map_or_else(ghost, Actor::from),
            state: ReviewState::parse(&found.state),
            body: found.body.unwrap_or_default(),
            comments,
            more_comments,
        })
    }

    async fn failed_checks(
        &self,
        repo: &RepoName,
        sha: &CommitSha,
        source: &CiSource,
    ) -> Result<Vec<FailedCheck>, ForgeError> {
        let base = repo_path(repo);
        match source {
            CiSource::CheckSuite { id } => {
                let suite: GhCheckSuite = self.get(&format!("{base}/check-suites/{id}")).await?;
                let own = suite.app.is_some_and(|a| a.id == self.shared.app_id);
                if suite.head_sha != sha.as_str() || own {
                    return Ok(Vec::new());
                }
                let runs: GhCheckRuns = self
                    .get(&format!(
                        "{base}/check-suites/{id}/check-runs?filter=latest&per_page={PER_PAGE}"
                    ))
                    .await?;
                let mut failed = Vec::new();
                for run in runs
                    .check_runs
                    .into_iter()
                    .filter(|r| r.conclusion.as_deref().is_some_and(failed_conclusion))
                    .take(CI_CHECKS_MAX)
                {
                    let annotations: Vec<GhAnnotation> = self
                        .get(&format!(
                            "{base}/check-runs/{}/annotations?per_page=50",
                            run.id
                        ))
                        .await?;
                    failed.push(run.into_failed(&annotations));
                }
                Ok(failed)
            }
            CiSource::Status { context } => {
                let combined: GhCombinedStatus =
                    self.get(&format!("{base}/commits/{sha}/status")).await?;
                Ok(combined
                    .statuses
                    .into_iter()
                    .filter(|s| {
                        s.context == *context && matches!(s.state.as_str(), "failure" | "error")
                    })
                    .take(1)
                    .map(|s| FailedCheck {
                        name: s.context,
                        conclusion: s.state,
                        url: s.target_url,
                        log: s.description.unwrap_or_default(),
                    })
                    .collect())
            }
            CiSource::Pipeline { .. } => Ok(Vec::new()),
        }
    }

    async fn pull_state(&self, repo: &RepoName, pull: PullNumber) -> Result<PullState, ForgeError> {
        let found: GhPullState = self
            .get(&format!("{}/pulls/{pull}", repo_path(repo)))
            .await?;
        Ok(match (found.state.as_str(), found.merged) {
            (_, true) => PullState::Merged,
            ("open", _) => PullState::Open,
            _ => PullState::Closed,
        })
    }

    async fn comment_on_pull(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        // A pull request's conversation is its issue's.
        self.create_comment(repo, IssueNumber(pull.0), body).await
    }

    async fn reply_to_review_comment(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        comment: CommentId,
        _thread: Option<&str>,
        body: &str,
    ) -> Result<(), ForgeError> {
        // GitHub offers apps no `/replies` route: a reply is a review comment `in_reply_to`.
        let path = format!("{}/pulls/{pull}/comments", repo_path(repo));
        let what = format!("POST {path}");
        let payload = json!({ "body": body, "in_reply_to": comment.0 });
        let _: GhReviewComment = self.create(&path, &payload, &what).await?;
        Ok(())
    }
}

impl GithubForge {
    /// A new installation token, limited as `scope` asks (`repositories`, `permissions`).
    async fn mint_token(&self, scope: &Value) -> Result<SecretString, ForgeError> {
        let minted: GhToken = self
            .shared
            .request(
                &self.shared.app,
                None,
                Method::POST,
                &format!("/app/installations/{}/access_tokens", self.installation),
                Some(scope),
            )
            .await?;
        Ok(minted.token)
    }

    /// A GraphQL call through the retry policy.
    async fn graphql(&self, what: &str, payload: &Value) -> Result<Value, ForgeError> {
        self.shared
            .retry
            .run(|| self.graphql_attempt(what, payload))
            .await
    }

    /// One GraphQL call; its data, or its errors as a failure.
    async fn graphql_attempt(&self, what: &str, payload: &Value) -> Result<Value, ForgeError> {
        // GraphQL's points are a window of their own, apart from the REST calls'.
        let budget = format!(
            "{} (graphql)",
            self.shared.budget_scope(Some(self.installation))
        );
        super::budget::check("github", &budget, what)?;
        tracing::debug!(call = what, "forge request");
        let token = self
            .client
            .installation_token()
            .await
            .map_err(|e| classify_octocrab(what.to_owned(), e))?;
        let mut response = self.post_graphql(&token, payload, what).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            // The cached token was revoked; octocrab renews its own at its next 401.
            let fresh = self.mint_token(&json!({})).await?;
            response = self.post_graphql(&fresh, payload, what).await?;
        }
        let status = response.status();
        let headers = response.headers().clone();
        super::budget::record("github", &budget, &headers);
        let text = response.text().await.map_err(|e| ForgeError::Transport {
            what: what.to_owned(),
            message: e.without_url().to_string(),
        })?;
        let text = check_answer(status, &headers, text, what)?;
        let answer: GhGraphql = serde_json::from_str(&text).map_err(|e| ForgeError::Malformed {
            what: what.to_owned(),
            message: e.to_string(),
        })?;
        // GraphQL reports failures in a 200 answer.
        if let Some(errors) = answer.errors.filter(|e| !e.is_empty()) {
            if errors
                .iter()
                .any(|e| e.kind.as_deref() == Some("RATE_LIMITED"))
            {
                // Points spent: the headers say when they come back.
                return Err(ForgeError::RateLimited {
                    what: what.to_owned(),
                    retry_after: rate_limit_wait(&headers),
                });
            }
            // An error without a type is GitHub failing on its side ("Something went
            // wrong while executing your query", a timeout): that passes. A typed one
            // (NOT_FOUND, FORBIDDEN, UNPROCESSABLE, …) is an answer about the request.
            let passing = errors.iter().all(|e| e.kind.is_none());
            let message = errors
                .into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(if passing {
                ForgeError::Unavailable {
                    what: what.to_owned(),
                    status: status.as_u16(),
                    message,
                }
            } else {
                ForgeError::Refused {
                    what: what.to_owned(),
                    status: status.as_u16(),
                    message,
                }
            });
        }
        answer.data.ok_or_else(|| ForgeError::Malformed {
            what: what.to_owned(),
            message: "neither data nor errors in the answer".into(),
        })
    }

    async fn post_graphql(
        &self,
        token: &SecretString,
        payload: &Value,
        what: &str,
    ) -> Result<reqwest::Response, ForgeError> {
        let sent = self
            .shared
            .http
            .post(&self.shared.graphql_url)
            .bearer_auth(token.expose_secret())
            .header("accept", "application/vnd.github+json")
            .header("user-agent", "planwright")
            .json(payload)
            .send()
            .await;
        let status = sent
            .as_ref()
            .map_or_else(|_| "error".to_owned(), |r| r.status().as_str().to_owned());
        crate::metrics::record_forge_request("github", "POST /graphql", &status);
        sent.map_err(|e| ForgeError::Transport {
            what: what.to_owned(),
            message: e.without_url().to_string(),
        })
    }

    /// The open pull request whose head is `branch` in `repo` itself (not a fork).
    async fn open_pull(
        &self,
        repo: &RepoName,
        branch: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        let owner = repo.as_str().split('/').next().unwrap_or_default();
        let head = format!("{owner}:{branch}");
        let query = serde_urlencoded::to_string([
            ("state", "open"),
            ("head", head.as_str()),
            ("per_page", "100"),
        ])
        .map_err(|e| ForgeError::Client {
            what: format!("find the pull request of `{branch}`"),
            message: e.to_string(),
        })?;
        let found: Vec<GhPull> = self
            .get(&format!("{}/pulls?{query}", repo_path(repo)))
            .await?;
        // A `head` filter GitHub cannot apply is ignored rather than refused, which
        // lists every open pull request, so the branch is checked here too — and where it
        // lives: a fork's branch of the same name is someone else's pull request.
        Ok(found
            .into_iter()
            .find(|p| {
                p.head.branch == branch
                    && p.head
                        .repo
                        .as_ref()
                        .is_some_and(|r| r.full_name.eq_ignore_ascii_case(repo.as_str()))
            })
            .map(PullRequest::from))
    }
}
