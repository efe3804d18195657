//! GitLab (gitlab.com or self-managed) as a forge: REST v4 over reqwest with the token in
//! the `PRIVATE-TOKEN` header, projects addressed by their URL-encoded full path, and the
//! calls behind the `Forge` trait — issues and notes, merge requests, commit statuses as
//! checks, the git remote. The transport is in `client.rs`, the wire shapes in
//! `wire.rs`.

mod client;
mod forge;
mod person;
mod wire;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::{
    CI_CHECKS_MAX, CheckState, Comment, CommitCheck, FailedCheck, Forge, ForgeError, GitRemote,
    Issue, LabelChange, NewPullRequest, Permission, PullRequest, PullState, REVIEW_COMMENTS_MAX,
    Reaction, Repository, RetryPolicy, ReviewComment, truncate_with_note,
};
use crate::config::GitlabSettings;
use crate::contract::SourceLinks;
use crate::event::{Actor, CiSource, Thread};
use crate::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};
use wire::*;

use client::{MAX_PAGES, PER_PAGE, decode, encode, next_page, project_path, what};
pub use forge::GitlabForge;
pub use person::reads_project;
pub(crate) use wire::is_token_bot;

/// The longest merge request title GitLab accepts, in characters.
const TITLE_LIMIT: usize = 255;

/// The longest merge request description GitLab accepts (1 MiB of characters); bytes are
/// counted, which is never more than characters.
const DESCRIPTION_LIMIT: usize = 1_048_576;

/// The longest commit status description GitLab keeps, in characters.
const STATUS_DESCRIPTION_LIMIT: usize = 255;

/// Pages of a merge request's discussions read for `/revise`.
const DISCUSSION_PAGES: usize = 10;

/// The longest merge request description GitLab keeps, in characters.
pub const BODY_LIMIT: usize = 1_048_576;

/// How long a project's clone URL is reused before it is read again (it changes only
/// when the project moves, and GitLab redirects git from the old path meanwhile).
const CLONE_URL_KEPT: Duration = Duration::from_secs(10 * 60);

impl GitlabForge {
    /// Builds the client from the settings; a missing URL or token, or a token that cannot
    /// be a header, is an error naming the setting, so a misconfigured deployment stops at
    /// startup.
    pub fn from_settings(settings: &GitlabSettings) -> anyhow::Result<Self> {
        let url = settings
            .url
            .as_deref()
            .context("Cannot use GitLab: GITLAB_URL is not set")?;
        let token = settings
            .token
            .clone()
            .context("Cannot use GitLab: GITLAB_TOKEN is not set")?;
        let parsed = reqwest::Url::parse(url)
            .with_context(|| format!("Cannot use GITLAB_URL `{url}` as a base URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            anyhow::bail!("Cannot use GITLAB_URL `{url}`: it is not an http(s) URL");
        }
        // Operators paste either the instance URL or its API root; both mean the same.
        let base = url.trim_end_matches('/');
        let base = base.strip_suffix("/api/v4").unwrap_or(base);

        let mut value = HeaderValue::from_str(token.expose_secret())
            .map_err(|_| anyhow::anyhow!("Cannot use GITLAB_TOKEN: it is not a valid header"))?;
        // Sensitive values are left out of reqwest's and hyper's debug output.
        value.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert("private-token", value);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            // reqwest drops `Authorization` on a redirect to another host but not a custom
            // header like `PRIVATE-TOKEN`, so redirects are not followed at all.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .context("Could not build the GitLab client")?;
        Ok(GitlabForge {
            http,
            api: format!("{base}/api/v4"),
            token,
            retry: RetryPolicy {
                max_rate_limit_wait: settings.rate_limit_wait,
                ..RetryPolicy::default()
            },
            me: Arc::new(OnceCell::new()),
            clone_urls: Arc::default(),
            repo_ids: super::RepoIds::default(),
        })
    }

    /// The same forge with another retry policy (tests use short backoffs).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The token's user, i.e. planwright on this GitLab; fetched once.
    pub async fn bot_user(&self) -> Result<Actor, ForgeError> {
        self.me
            .get_or_try_init(|| async {
                let user: GlUser = self.get("/user").await?;
                Ok::<_, ForgeError>(Actor::from(user))
            })
            .await
            .cloned()
    }

    /// The open merge request from `branch` of this project itself: a fork's branch of
    /// the same name is someone else's work.
    async fn open_merge_request(
        &self,
        repo: &RepoName,
        branch: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        let path = format!(
            "{}/merge_requests?state=opened&source_branch={}&per_page={PER_PAGE}",
            project_path(repo),
            encode(branch)
        );
        let found: Vec<GlMergeRequest> = self.get(&path).await?;
        Ok(found
            .into_iter()
            .find(|m| m.source_branch == branch && m.source_project_id == m.target_project_id)
            .map(PullRequest::from))
    }

    /// The access a user (by id) has to the project, direct or inherited.
    async fn member_permission(
        &self,
        repo: &RepoName,
        user: i64,
    ) -> Result<Permission, ForgeError> {
        // `members/all` includes memberships inherited from parent groups and shared groups.
        let path = format!("{}/members/all/{user}", project_path(repo));
        let member: GlMember = match self.get(&path).await {
            Ok(member) => member,
            Err(ForgeError::NotFound { .. }) => return Ok(Permission::None),
            Err(e) => return Err(e),
        };
        let active = |state: &Option<String>| state.as_deref().is_none_or(|s| s == "active");
        if !active(&member.state) || !active(&member.membership_state) {
            return Ok(Permission::None);
        }
        Ok(access_level_permission(member.access_level))
    }

    /// The project as GitLab has it now; its clone URL, if the token may go there, is
    /// kept for `git_remote`.
    async fn project(&self, repo: &RepoName) -> Result<GlProject, ForgeError> {
        let path = project_path(repo);
        let project: GlProject = self.get(&format!("{path}?statistics=true")).await?;
        if let Some(id) = project.id {
            self.repo_ids.keep(repo.as_str(), &id.to_string());
        }
        if let Some(url) = &project.http_url_to_repo
            && self.check_clone_url(url, &path).is_ok()
            && let Ok(mut kept) = self.clone_urls.lock()
        {
            kept.insert(repo.clone(), (url.clone(), Instant::now()));
        }
        Ok(project)
    }

    /// Whether the token may be handed to git at `url` (read from `path`): the URL must
    /// be on the host the token was configured for, over https if the API is, since the
    /// token goes to whatever host the project reports.
    fn check_clone_url(&self, url: &str, path: &str) -> Result<(), ForgeError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| ForgeError::Malformed {
            what: format!("GET {path}"),
            message: format!("http_url_to_repo `{url}` is not a URL: {e}"),
        })?;
        let api = reqwest::Url::parse(&self.api).map_err(|e| ForgeError::Client {
            what: "read the GitLab URL".into(),
            message: e.to_string(),
        })?;
        let same_host = parsed.host_str() == api.host_str();
        let downgraded = api.scheme() == "https" && parsed.scheme() != "https";
        if !same_host || downgraded || !parsed.username().is_empty() {
            return Err(ForgeError::Client {
                what: format!("push to `{}`", parsed.as_str()),
                message: format!(
                    "it is not on {}://{}, where the GitLab token belongs (check GitLab's external_url)",
                    api.scheme(),
                    api.host_str().unwrap_or_default()
                ),
            });
        }
        Ok(())
    }

    /// The project's clone URL: as read within `CLONE_URL_KEPT`, or read now.
    async fn clone_url(&self, repo: &RepoName) -> Result<Option<String>, ForgeError> {
        let kept = self.clone_urls.lock().ok().and_then(|kept| {
            kept.get(repo)
                .filter(|(_, at)| at.elapsed() < CLONE_URL_KEPT)
                .map(|(url, _)| url.clone())
        });
        match kept {
            Some(url) => Ok(Some(url)),
            None => Ok(self.project(repo).await?.http_url_to_repo),
        }
    }
}

#[async_trait]
impl Forge for GitlabForge {
    fn web_links(&self, repo: &RepoName) -> SourceLinks {
        let base = self.api.strip_suffix("/api/v4").unwrap_or(&self.api);
        SourceLinks::GitLab {
            project_url: format!("{base}/{repo}"),
        }
    }

    fn commit_email(&self, login: &str) -> String {
        let host = reqwest::Url::parse(&self.api)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "gitlab.com".to_owned());
        format!("{login}@noreply.{host}")
    }

    fn pull_body_limit(&self) -> usize {
        BODY_LIMIT
    }

    fn check_carries_report(&self) -> bool {
        false
    }

    fn config_paths(&self) -> &'static [&'static str] {
        &[".gitlab/planwright.yml", ".planwright.yml"]
    }

    fn has_labels(&self) -> bool {
        true
    }

    async fn is_own(&self, actor: &Actor) -> Result<bool, ForgeError> {
        let me = self.bot_user().await?;
        // Ids survive renames and are never reused; a login alone (id 0) is all some
        // callers have, so it is compared only then.
        Ok(if actor.id != 0 {
            actor.id == me.id
        } else {
            actor.login.eq_ignore_ascii_case(&me.login)
        })
    }

    async fn repository(&self, repo: &RepoName) -> Result<Repository, ForgeError> {
        let base = project_path(repo);
        let project = self.project(repo).await?;
        // Only members who may see the project's statistics get them; others get none.
        let size = project.statistics.and_then(|s| s.repository_size);
        let Some(default_branch) = project.default_branch else {
            return Err(ForgeError::Malformed {
                what: format!("GET {base}"),
                message: "the project has no default branch (is its repository empty?)".into(),
            });
        };
        let branch: GlBranch = self
            .get(&format!(
                "{base}/repository/branches/{}",
                encode(&default_branch)
            ))
            .await?;
        Ok(Repository {
            name: repo.clone(),
            default_branch,
            head_sha: CommitSha(branch.commit.id),
            size,
            id: project.id.map(|id| id.to_string()),
        })
    }

    async fn repository_id(&self, repo: &RepoName) -> Result<Option<String>, ForgeError> {
        match self.repo_ids.fresh(repo.as_str()) {
            Some(id) => Ok(Some(id)),
            None => Ok(self.project(repo).await?.id.map(|id| id.to_string())),
        }
    }

    async fn issue(&self, repo: &RepoName, issue: IssueNumber) -> Result<Issue, ForgeError> {
        let found: GlIssue = self
            .get(&format!("{}/issues/{issue}", project_path(repo)))
            .await?;
        Ok(Issue {
            number: IssueNumber(found.iid),
            title: found.title,
            body: found.description.unwrap_or_default(),
            labels: found.labels,
            author: found.author.into(),
        })
    }

    async fn comments(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Vec<Comment>, ForgeError> {
        let mut all = Vec::new();
        let mut page = 1;
        for _ in 0..MAX_PAGES {
            let path = format!(
                "{}/issues/{issue}/notes?sort=asc&order_by=created_at&per_page={PER_PAGE}&page={page}",
                project_path(repo)
            );
            let (headers, text) = self.send(Method::GET, &path, None).await?;
            let batch: Vec<GlNote> = decode(&what(&Method::GET, &path), &text)?;
            let count = batch.len();
            // System notes ("added label ~bug", "changed the description") are GitLab's
            // own record of events, not anyone's comment.
            all.extend(batch.into_iter().filter(|n| !n.system).map(Comment::from));
            match next_page(&headers, page, count) {
                Some(next) if next > page => page = next,
                _ => break,
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
        let path = match thread {
            Thread::Issue(issue) => {
                format!("{}/issues/{issue}/notes/{comment}", project_path(repo))
            }
            Thread::PullRequest(pull) => {
                format!(
                    "{}/merge_requests/{pull}/notes/{comment}",
                    project_path(repo)
                )
            }
        };
        let (_, text) = self.send(Method::GET, &path, None).await?;
        let note: GlNote = decode(&what(&Method::GET, &path), &text)?;
        // A system note is GitLab's own record of an event, never anyone's command.
        if note.system {
            return Err(ForgeError::NotFound {
                what: format!("find note {comment} of {repo}: it is a system note"),
            });
        }
        Ok(note.into())
    }

    async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let path = format!("{}/issues/{issue}/notes", project_path(repo));
        self.create_note(&path, body).await
    }

    async fn open_review_comments(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        author: &Actor,
    ) -> Result<(Vec<ReviewComment>, bool), ForgeError> {
        let mut found = Vec::new();
        let mut page = 1;
        // Anyone who may comment adds discussions: a thousand is past any real review.
        for _ in 0..DISCUSSION_PAGES {
            let path = format!(
                "{}/merge_requests/{pull}/discussions?per_page={PER_PAGE}&page={page}",
                project_path(repo)
            );
            let (headers, text) = self.send(Method::GET, &path, None).await?;
            let batch: Vec<GlDiscussion> = decode(&what(&Method::GET, &path), &text)?;
            let count = batch.len();
            found.extend(
                batch
                    .into_iter()
                    .filter_map(GlDiscussion::open_diff_comment)
                    .filter(|c| c.author.id == author.id),
            );
            if found.len() > REVIEW_COMMENTS_MAX {
                found.truncate(REVIEW_COMMENTS_MAX);
                return Ok((found, true));
            }
            match next_page(&headers, page, count) {
                Some(next) if next > page => page = next,
                _ => break,
            }
        }
        Ok((found, false))
    }

    async fn failed_checks(
        &self,
        repo: &RepoName,
        sha: &CommitSha,
        source: &CiSource,
    ) -> Result<Vec<FailedCheck>, ForgeError> {
        let CiSource::Pipeline { id } = source else {
            return Ok(Vec::new());
        };
        let base = project_path(repo);
        let pipeline: GlPipeline = self.get(&format!("{base}/pipelines/{id}")).await?;
        if pipeline.sha != sha.as_str() || pipeline.status != "failed" {
            return Ok(Vec::new());
        }
        let jobs: Vec<GlJob> = self
            .get(&format!(
                "{base}/pipelines/{id}/jobs?scope[]=failed&per_page={PER_PAGE}"
            ))
            .await?;
        let mut failed = Vec::new();
        // A job allowed to fail does not fail the pipeline.
        for job in jobs
            .into_iter()
            .filter(|j| j.status == "failed" && !j.allow_failure)
            .take(CI_CHECKS_MAX)
        {
            let log = self
                .log_tail(&format!("{base}/jobs/{}/trace", job.id))
                .await?;
            failed.push(FailedCheck {
                name: job.name,
                conclusion: job.failure_reason.unwrap_or(job.status),
                url: job.web_url,
                log,
            });
        }
        Ok(failed)
    }

    async fn pull_state(&self, repo: &RepoName, pull: PullNumber) -> Result<PullState, ForgeError> {
        let found: GlMergeRequestState = self
            .get(&format!("{}/merge_requests/{pull}", project_path(repo)))
            .await?;
        Ok(match found.state.as_str() {
            "merged" => PullState::Merged,
            "opened" => PullState::Open,
            // `closed`, and `locked` (a merge request GitLab keeps from changing).
            _ => PullState::Closed,
        })
    }

    async fn comment_on_pull(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let path = format!("{}/merge_requests/{pull}/notes", project_path(repo));
        self.create_note(&path, body).await
    }

    async fn reply_to_review_comment(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        comment: CommentId,
        thread: Option<&str>,
        body: &str,
    ) -> Result<(), ForgeError> {
        let Some(discussion) = thread else {
            return Err(ForgeError::Client {
                what: format!("reply to note {comment} of merge request {pull}"),
                message: "the note's discussion is not known".into(),
            });
        };
        let path = format!(
            "{}/merge_requests/{pull}/discussions/{}/notes",
            project_path(repo),
            utf8_percent_encode(discussion, NON_ALPHANUMERIC)
        );
        self.create_note(&path, body).await.map(drop)
    }

    async fn edit_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let edited: GlNote = self
            .request(
                Method::PUT,
                &format!("{}/issues/{issue}/notes/{comment}", project_path(repo)),
                Some(&json!({ "body": body })),
            )
            .await?;
        Ok(edited.into())
    }

    async fn react(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        reaction: Reaction,
    ) -> Result<(), ForgeError> {
        let path = format!(
            "{}/issues/{issue}/notes/{comment}/award_emoji?name={}",
            project_path(repo),
            reaction.gitlab_name()
        );
        match self.request::<Value>(Method::POST, &path, None).await {
            Ok(_) => Ok(()),
            // GitLab answers an emoji this user already awarded with a 404 ("Award Emoji
            // Name has already been taken"), the same status as a missing note; the
            // note's awards tell the two apart.
            Err(missing @ ForgeError::NotFound { .. }) => {
                let me = self.bot_user().await?;
                let awards: Vec<GlAward> = match self
                    .get(&format!(
                        "{}/issues/{issue}/notes/{comment}/award_emoji?per_page={PER_PAGE}",
                        project_path(repo)
                    ))
                    .await
                {
                    Ok(awards) => awards,
                    Err(ForgeError::NotFound { .. }) => return Err(missing),
                    Err(e) => return Err(e),
                };
                let ours = awards
                    .iter()
                    .any(|a| a.name == reaction.gitlab_name() && a.user.id == me.id);
                if ours { Ok(()) } else { Err(missing) }
            }
            Err(e) => Err(e),
        }
    }

    /// GitLab access levels onto the ordered permission, by the nearest GitHub role:
    /// guest (10) → read, planner (15) and reporter (20) → triage (issues and labels, no
    /// pushes), developer (30) → write, maintainer (40) → maintain, owner (50) and
    /// instance admin (60) → admin; minimal access (5), no membership, an unknown user,
    /// a blocked user or a membership awaiting approval → none. Custom roles report
    /// their base level, so thresholds rather than exact values are used.
    async fn permission(&self, repo: &RepoName, login: &str) -> Result<Permission, ForgeError> {
        let users: Vec<GlUser> = self
            .get(&format!("/users?username={}", encode(login)))
            .await?;
        let Some(user) = users
            .into_iter()
            .find(|u| u.username.eq_ignore_ascii_case(login))
        else {
            return Ok(Permission::None);
        };
        self.member_permission(repo, user.id).await
    }

    /// By the id GitLab gave the user: no lookup of the name (and a renamed user is
    /// still the same one).
    async fn permission_of(&self, repo: &RepoName, who: &Actor) -> Result<Permission, ForgeError> {
        match who.id {
            0 => self.permission(repo, &who.login).await,
            id => self.member_permission(repo, id).await,
        }
    }

    /// From the issue's label events: one webhook secret may serve many projects, so a
    /// label hook's `user` is only what a holder of that secret claims.
    async fn label_changed_by(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        label: &str,
        change: LabelChange,
        _claimed: &Actor,
    ) -> Result<Option<Actor>, ForgeError> {
        let action = match change {
            LabelChange::Added => "add",
            LabelChange::Removed => "remove",
        };
        let mut newest: Option<GlLabelEvent> = None;
        let mut page = 1;
        for _ in 0..MAX_PAGES {
            let path = format!(
                "{}/issues/{issue}/resource_label_events?per_page={PER_PAGE}&page={page}",
                project_path(repo)
            );
            let (headers, text) = self.send(Method::GET, &path, None).await?;
            let batch: Vec<GlLabelEvent> = decode(&what(&Method::GET, &path), &text)?;
            let count = batch.len();
            for event in batch {
                // A deleted label's events keep no label; a deleted user's keep no user.
                let matches = event.action == action
                    && event
                        .label
                        .as_ref()
                        .is_some_and(|l| l.name.eq_ignore_ascii_case(label));
                if matches && newest.as_ref().is_none_or(|n| event.id > n.id) {
                    newest = Some(event);
                }
            }
            match next_page(&headers, page, count) {
                Some(next) if next > page => page = next,
                _ => break,
            }
        }
        Ok(newest.and_then(|e| e.user).map(Actor::from))
    }

    async fn read_file(&self, repo: &RepoName, path: &str) -> Result<Option<String>, ForgeError> {
        // Repository configuration may only come from the default branch: `HEAD` names
        // it, without a request to learn its name. An empty repository has no `HEAD`
        // and so no file.
        let route = format!(
            "{}/repository/files/{}?ref=HEAD",
            project_path(repo),
            encode(path.trim_matches('/')),
        );
        let file: GlFile = match self.get(&route).await {
            Ok(file) => file,
            Err(ForgeError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let malformed = |message: &str| ForgeError::Malformed {
            what: what(&Method::GET, &route),
            message: message.to_owned(),
        };
        if file.encoding != "base64" {
            return Err(malformed(&format!(
                "`{path}` came in an unknown encoding `{}`",
                file.encoding
            )));
        }
        super::base64_text(path, &file.content)
            .map(Some)
            .map_err(|m| malformed(&m))
    }
    async fn find_or_create_pull(
        &self,
        repo: &RepoName,
        new: &NewPullRequest<'_>,
    ) -> Result<PullRequest, ForgeError> {
        // Created first and looked up only when GitLab says one is open already: a
        // session's first publication takes one request, a repeated one two.
        // GitLab has no draft flag on create: the title prefix is how it is asked for.
        let title = match new.draft {
            true if !new.title.starts_with("Draft:") => Cow::Owned(format!("Draft: {}", new.title)),
            _ => Cow::Borrowed(new.title),
        };
        let body = json!({
            "source_branch": new.head_branch,
            "target_branch": new.base_branch,
            "title": one_line(&title, TITLE_LIMIT),
            "description": truncate_with_note(new.body, DESCRIPTION_LIMIT),
        });
        let path = format!("{}/merge_requests", project_path(repo));
        match self
            .request::<GlMergeRequest>(Method::POST, &path, Some(&body))
            .await
        {
            Ok(created) => Ok(created.into()),
            // "Another open merge request already exists for this source branch": from an
            // earlier attempt, or a create GitLab stored but answered with a 502 or a
            // timeout, whose retry lands here; the stored one is the answer. GitLab gives the same status to a
            // missing branch, so with nothing to find the refusal stands.
            Err(conflict @ ForgeError::Refused { status: 409, .. }) => {
                match self.open_merge_request(repo, new.head_branch).await? {
                    Some(found) => Ok(found),
                    None => Err(conflict),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// GitLab keeps a merge request's draft state in its title: `Draft: ` in front of it,
    /// or not.
    async fn set_draft(
        &self,
        repo: &RepoName,
        pull: &PullRequest,
        draft: bool,
    ) -> Result<PullRequest, ForgeError> {
        let plain = undrafted(&pull.title);
        let title = match draft {
            true => format!("Draft: {plain}"),
            false => plain.to_owned(),
        };
        let updated: GlMergeRequest = self
            .request(
                Method::PUT,
                &format!("{}/merge_requests/{}", project_path(repo), pull.number),
                Some(&json!({ "title": one_line(&title, TITLE_LIMIT) })),
            )
            .await?;
        Ok(updated.into())
    }

    async fn update_pull_body(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        let updated: GlMergeRequest = self
            .request(
                Method::PUT,
                &format!("{}/merge_requests/{pull}", project_path(repo)),
                Some(&json!({ "description": truncate_with_note(body, DESCRIPTION_LIMIT) })),
            )
            .await?;
        Ok(updated.into())
    }

    /// A commit status named `check.name`. A status holds one line, so only the title
    /// goes in (prefixed "Neutral:" for a neutral result, which is posted as `success`:
    /// like GitHub's neutral it must not block a merge, and `skipped` is refused by
    /// GitLab before 17.5); the summary and text are not kept here — the caller puts the
    /// report in the merge request description, and `details_url` becomes the status
    /// link. GitLab refuses to move a status that is pending or running to the state it
    /// is already in (or back from running to pending); that refusal means the status is
    /// already where it should be, and is an `Ok`.
    async fn set_check(&self, repo: &RepoName, check: &CommitCheck<'_>) -> Result<(), ForgeError> {
        let (state, description) = match check.state {
            CheckState::Pending => ("pending", Cow::Borrowed(check.title)),
            CheckState::Running => ("running", Cow::Borrowed(check.title)),
            CheckState::Success => ("success", Cow::Borrowed(check.title)),
            CheckState::Failure => ("failed", Cow::Borrowed(check.title)),
            CheckState::Cancelled => ("canceled", Cow::Borrowed(check.title)),
            CheckState::Neutral => ("success", Cow::Owned(format!("Neutral: {}", check.title))),
        };
        let mut body = json!({
            "state": state,
            "name": check.name,
            "description": one_line(&description, STATUS_DESCRIPTION_LIMIT),
        });
        if let Some(url) = check.details_url {
            body["target_url"] = json!(url);
        }
        let path = format!(
            "{}/statuses/{}",
            project_path(repo),
            encode(check.head_sha.as_str())
        );
        match self
            .request::<Value>(Method::POST, &path, Some(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(ForgeError::Refused {
                status: 400,
                ref message,
                ..
            }) if already_in_progress(message, state) => {
                tracing::debug!(
                    check = check.name,
                    state,
                    "commit status already in progress"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// GitLab cannot fold a note away.
    async fn minimize_comment(
        &self,
        _repo: &RepoName,
        _issue: IssueNumber,
        _comment: CommentId,
    ) -> Result<bool, ForgeError> {
        Ok(false)
    }

    /// The project's HTTP clone URL with the token as an OAuth2 password, which git over
    /// HTTPS accepts for personal, project and group access tokens alike. The URL must be
    /// on the host the token was configured for, over https if the API is: the token is
    /// handed to whatever host the project reports.
    async fn git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError> {
        let path = project_path(repo);
        let malformed = |message: String| ForgeError::Malformed {
            what: format!("GET {path}"),
            message,
        };
        let url = self
            .clone_url(repo)
            .await?
            .ok_or_else(|| malformed("the project has no http_url_to_repo".into()))?;
        self.check_clone_url(&url, &path)?;
        Ok(GitRemote {
            url,
            username: "oauth2".into(),
            password: self.token.clone(),
        })
    }
}

/// Whether GitLab refused a status change because the status is already pending or
/// running and `asked` is one of those too: "Cannot transition status via :run from
/// :running". The text comes as a plain message or inside a field's list of errors.
fn already_in_progress(message: &str, asked: &str) -> bool {
    let Some((_, rest)) = message.split_once("Cannot transition status via :") else {
        return false;
    };
    let Some((_, from)) = rest.split_once(" from :") else {
        return false;
    };
    let from: String = from
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    matches!(asked, "pending" | "running") && matches!(from.as_str(), "pending" | "running")
}

/// `text` on one line and at most `limit` characters (GitLab counts characters), ending
/// with "…" when cut.
fn one_line(text: &str, limit: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= limit {
        return flat;
    }
    let mut cut: String = flat.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// See `GitlabForge::permission` for why each level lands where it does.
fn access_level_permission(level: i64) -> Permission {
    match level {
        50.. => Permission::Admin,
        40..50 => Permission::Maintain,
        30..40 => Permission::Write,
        15..30 => Permission::Triage,
        10..15 => Permission::Read,
        _ => Permission::None,
    }
}

#[cfg(test)]
mod tests {
    use super::client::error_message;
    use super::*;

    #[test]
    fn access_levels_map_onto_the_ordered_permission() {
        let cases = [
            (0, Permission::None),
            (5, Permission::None),
            (10, Permission::Read),
            (15, Permission::Triage),
            (20, Permission::Triage),
            (30, Permission::Write),
            (40, Permission::Maintain),
            (50, Permission::Admin),
            (60, Permission::Admin),
        ];
        for (level, expected) in cases {
            assert_eq!(access_level_permission(level), expected, "{level}");
        }
    }

    #[test]
    fn a_refused_transition_between_in_progress_states_is_recognised() {
        let plain = "Cannot transition status via :run from :running (Reason(s): Status cannot transition via \"run\")";
        assert!(already_in_progress(plain, "running"));
        let listed = error_message(
            r#"{"message":{"state":["Cannot transition status via :enqueue from :pending"]}}"#,
        );
        assert!(already_in_progress(&listed, "pending"));
        // A running status is not moved back to pending; it is further along already.
        assert!(already_in_progress(
            "Cannot transition status via :enqueue from :running",
            "pending"
        ));
        // A finished status is never reused by GitLab, so this would be something else.
        assert!(!already_in_progress(
            "Cannot transition status via :run from :success",
            "running"
        ));
        assert!(!already_in_progress(
            "Cannot transition status via :drop from :pending",
            "failed"
        ));
        assert!(!already_in_progress(
            "state does not have a valid value",
            "pending"
        ));
    }

    #[test]
    fn one_line_texts_are_flattened_and_cut_by_characters() {
        assert_eq!(one_line("tests\n  pass", 255), "tests pass");
        let cut = one_line(&"é".repeat(300), 255);
        assert_eq!(cut.chars().count(), 255);
        assert!(cut.ends_with("é…"));
        assert_eq!(one_line(&"a".repeat(255), 255), "a".repeat(255));
    }
}
