//! GitLab (gitlab.com or self-managed) as a forge: REST v4 over reqwest with the token in
//! the `PRIVATE-TOKEN` header, projects addressed by their URL-encoded full path, and the
//! calls behind the `Forge` trait — issues and notes, merge requests, commit statuses as
//! checks, the git remote. Wire shapes stay in this file as small local structs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use async_trait::async_trait;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::{
    CI_CHECKS_MAX, CI_LOG_MAX, Check, CheckState, Comment, FailedCheck, Forge, ForgeError,
    GitRemote, Issue, LabelChange, NewPullRequest, Permission, PullRequest, PullState,
    REVIEW_COMMENTS_MAX, Reaction, Repository, RetryPolicy, ReviewComment, header,
    truncate_with_note,
};
use crate::config::GitlabSettings;
use crate::contract::SourceLinks;
use crate::event::{Actor, CiSource, Thread};
use crate::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};

/// The longest merge request title GitLab accepts, in characters.
const TITLE_LIMIT: usize = 255;
/// The longest merge request description GitLab accepts (1 MiB of characters); bytes are
/// counted, which is never more than characters.
const DESCRIPTION_LIMIT: usize = 1_048_576;
/// The longest commit status description GitLab keeps, in characters.
const STATUS_DESCRIPTION_LIMIT: usize = 255;
/// Notes fetched per page: GitLab's maximum, so long threads take few requests.
const PER_PAGE: usize = 100;
/// A thread longer than this many pages is not a thread planwright can act on anyway;
/// the bound keeps a misbehaving server from looping us forever.
const MAX_PAGES: usize = 100;
/// Pages of a merge request's discussions read for `/revise`.
const DISCUSSION_PAGES: usize = 10;

/// The longest merge request description GitLab keeps, in characters.
pub const BODY_LIMIT: usize = 1_048_576;

/// GitLab as seen through one token (a bot user's, or a project or group access token).
#[derive(Clone)]
pub struct GitlabForge {
    http: reqwest::Client,
    /// `https://gitlab.example.com/api/v4`, without a trailing slash.
    api: String,
    /// Kept only to scrub it out of error text the server might echo back.
    token: SecretString,
    retry: RetryPolicy,
    /// The token's own user: never changes for a token, so it is fetched once.
    me: Arc<OnceCell<Actor>>,
    /// Each project's `http_url_to_repo` as last read, and when: reused by `git_remote`
    /// for `CLONE_URL_KEPT`, so a session's fetches and pushes ask for it once.
    clone_urls: Arc<Mutex<HashMap<RepoName, (String, Instant)>>>,
    /// Each project's id as last read.
    repo_ids: super::RepoIds,
}

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

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ForgeError> {
        self.request(Method::GET, path, None).await
    }

    /// One forge call through the retry policy, decoded as `T`.
    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let (_, text) = self.send(method.clone(), path, body).await?;
        decode(&what(&method, path), &text)
    }

    /// One forge call through the retry policy; the answer's headers and text.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(HeaderMap, String), ForgeError> {
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let route = super::route(method.as_str(), path);
        self.retry
            .run(|| async {
                self.attempt(&method, &url, &route, body, &what)
                    .await
                    .map_err(|e| self.scrub(e))
            })
            .await
    }

    async fn attempt(
        &self,
        method: &Method,
        url: &str,
        route: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<(HeaderMap, String), ForgeError> {
        let response = self.answered(method, url, route, body, what).await?;
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| transport(what, e))?;
        Ok((headers, text))
    }

    /// One request, counted; a successful answer, or the failure classified.
    async fn answered(
        &self,
        method: &Method,
        url: &str,
        route: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<reqwest::Response, ForgeError> {
        // Down to its reserve: the call waits for the reset instead of spending the rest.
        super::budget::check("gitlab", &self.api, what)?;
        tracing::debug!(call = what, "forge request");
        let mut request = self.http.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            crate::metrics::record_forge_request("gitlab", route, "error");
            transport(what, e)
        })?;
        let status = response.status();
        // Kept from every answer, a refusal too: a 429 says most about what is left.
        super::budget::record("gitlab", &self.api, response.headers());
        crate::metrics::record_forge_request("gitlab", route, status.as_str());
        if status == reqwest::StatusCode::NOT_MODIFIED {
            // Nothing planwright sends to GitLab is conditional.
            return Err(super::conditional::unasked("GitLab", what));
        }
        if !status.is_success() {
            let headers = response.headers().clone();
            let text = response.text().await.map_err(|e| transport(what, e))?;
            return Err(classify_status(
                what.to_owned(),
                status,
                &headers,
                error_message(&text),
            ));
        }
        Ok(response)
    }

    /// The end of a text answer (a job's log), at most [`CI_LOG_MAX`] bytes, read in
    /// bounded memory however long the log is.
    async fn log_tail(&self, path: &str) -> Result<String, ForgeError> {
        let method = Method::GET;
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let route = super::route(method.as_str(), path);
        self.retry
            .run(|| async {
                let mut response = self
                    .answered(&method, &url, &route, None, &what)
                    .await
                    .map_err(|e| self.scrub(e))?;
                let mut kept: Vec<u8> = Vec::new();
                let mut before = 0usize;
                while let Some(chunk) = response.chunk().await.map_err(|e| transport(&what, e))? {
                    kept.extend_from_slice(&chunk);
                    // Drained in halves, so each byte moves at most twice.
                    if kept.len() > 2 * CI_LOG_MAX {
                        let cut = kept.len() - CI_LOG_MAX;
                        kept.drain(..cut);
                        before += cut;
                    }
                }
                if kept.len() > CI_LOG_MAX {
                    let cut = kept.len() - CI_LOG_MAX;
                    kept.drain(..cut);
                    before += cut;
                }
                let text = String::from_utf8_lossy(&kept);
                Ok(if before > 0 {
                    format!("[… the first {before} bytes of the log are not shown]\n{text}")
                } else {
                    text.into_owned()
                })
            })
            .await
    }

    /// Posts a note at `path` (an issue's, a merge request's or a discussion's notes).
    /// Not repeated after a failure GitLab may have stored anyway (a 502, a timeout): the
    /// session layer posts with a marker and looks for it before posting again.
    async fn create_note(&self, path: &str, body: &str) -> Result<Comment, ForgeError> {
        let method = Method::POST;
        let what = what(&method, path);
        let url = format!("{}{path}", self.api);
        let payload = json!({ "body": body });
        let route = super::route(method.as_str(), path);
        let (_, text) = self
            .retry
            .run_create(|| async {
                self.attempt(&method, &url, &route, Some(&payload), &what)
                    .await
                    .map_err(|e| self.scrub(e))
            })
            .await?;
        let created: GlNote = decode(&what, &text)?;
        Ok(created.into())
    }

    /// Removes the token from error text, in case a proxy or the server echoes a header.
    fn scrub(&self, error: ForgeError) -> ForgeError {
        let token = self.token.expose_secret();
        if token.is_empty() {
            return error;
        }
        let clean = |s: String| s.replace(token, "[redacted]");
        match error {
            ForgeError::Refused {
                what,
                status,
                message,
            } => ForgeError::Refused {
                what,
                status,
                message: clean(message),
            },
            ForgeError::Unavailable {
                what,
                status,
                message,
            } => ForgeError::Unavailable {
                what,
                status,
                message: clean(message),
            },
            ForgeError::Transport { what, message } => ForgeError::Transport {
                what,
                message: clean(message),
            },
            other => other,
        }
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
    async fn set_check(&self, repo: &RepoName, check: &Check<'_>) -> Result<(), ForgeError> {
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

/// Project and group access tokens act as `project_<id>_bot…` / `group_<id>_bot…` users.
pub(crate) fn is_token_bot(username: &str) -> bool {
    (username.starts_with("project_") || username.starts_with("group_"))
        && username.contains("_bot")
}

/// The call named for errors and logs: method and path without the query.
fn what(method: &Method, path: &str) -> String {
    format!("{method} {}", path.split('?').next().unwrap_or(path))
}

fn decode<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, ForgeError> {
    serde_json::from_str(text).map_err(|e| ForgeError::Malformed {
        what: what.to_owned(),
        message: e.to_string(),
    })
}

fn transport(what: &str, e: reqwest::Error) -> ForgeError {
    ForgeError::Transport {
        what: what.to_owned(),
        message: error_chain(&e.without_url()),
    }
}

/// The page after this one: GitLab's `x-next-page` (empty on the last page), else a
/// `Link: <…page=N…>; rel="next"`, else — when a proxy stripped both — another page
/// exactly when this one was full.
fn next_page(headers: &HeaderMap, page: usize, count: usize) -> Option<usize> {
    if let Some(next) = header(headers, "x-next-page") {
        return next.trim().parse().ok();
    }
    if let Some(link) = header(headers, "link") {
        return link
            .split(',')
            .find(|part| part.contains("rel=\"next\""))
            .and_then(|part| {
                let url = part.split(['<', '>']).nth(1)?;
                let query = url.split_once('?')?.1;
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("page="))
                    .and_then(|n| n.parse().ok())
            });
    }
    (count >= PER_PAGE).then_some(page + 1)
}

/// Classifies an answer that was not a success. GitLab signals rate limits with 429 and
/// `Retry-After` (seconds) or `RateLimit-Reset` (a Unix time).
fn classify_status(
    what: String,
    status: StatusCode,
    headers: &HeaderMap,
    message: String,
) -> ForgeError {
    let code = status.as_u16();
    if code == 429 {
        return ForgeError::RateLimited {
            what,
            retry_after: rate_limit_wait(headers),
        };
    }
    ForgeError::from_status(what, code, message)
}

/// How long GitLab asks us to wait; `None` leaves it to the policy's backoff.
fn rate_limit_wait(headers: &HeaderMap) -> Option<Duration> {
    if let Some(seconds) = header(headers, "retry-after").and_then(|v| v.trim().parse().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    let reset = header(headers, "ratelimit-reset").and_then(|v| v.trim().parse::<u64>().ok())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(Duration::from_secs(reset.saturating_sub(now) + 1))
}

/// GitLab puts the reason in `message` (a string, or field → errors for validation
/// failures) or, for OAuth-style refusals, in `error` / `error_description`.
fn error_message(text: &str) -> String {
    let short = || text.chars().take(200).collect::<String>();
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return short();
    };
    let field = |name: &str| match body.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    field("message")
        .or_else(|| field("error_description"))
        .or_else(|| field("error"))
        .unwrap_or_else(short)
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One path segment: GitLab wants project paths, file paths and branch names with their
/// slashes encoded (`group%2Fproject`, `docs%2Fa.md`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

fn project_path(repo: &RepoName) -> String {
    format!("/projects/{}", encode(repo.as_str()))
}

/// One entry of `resource_label_events`.
#[derive(Deserialize)]
struct GlLabelEvent {
    id: i64,
    user: Option<GlUser>,
    label: Option<GlLabelRef>,
    /// `add` or `remove`.
    action: String,
}

#[derive(Deserialize)]
struct GlLabelRef {
    name: String,
}

#[derive(Deserialize)]
struct GlUser {
    id: i64,
    username: String,
    /// Only some endpoints (`/user`, `/users/:id`) say it.
    #[serde(default)]
    bot: bool,
}

impl From<GlUser> for Actor {
    fn from(user: GlUser) -> Self {
        let bot = user.bot || is_token_bot(&user.username);
        Actor {
            login: user.username,
            id: user.id,
            bot,
        }
    }
}

#[derive(Deserialize)]
struct GlIssue {
    iid: i64,
    title: String,
    description: Option<String>,
    /// Plain names unless `with_labels_details` is asked for.
    #[serde(default)]
    labels: Vec<String>,
    author: GlUser,
}

#[derive(Deserialize)]
struct GlNote {
    id: i64,
    body: Option<String>,
    author: GlUser,
    #[serde(default)]
    system: bool,
    #[serde(default)]
    created_at: Option<String>,
}

impl From<GlNote> for Comment {
    fn from(n: GlNote) -> Self {
        Comment {
            id: CommentId(n.id),
            body: n.body.unwrap_or_default(),
            author: n.author.into(),
            created_at: n.created_at.as_deref().and_then(super::unix_seconds),
        }
    }
}

#[derive(Deserialize)]
struct GlMergeRequestState {
    state: String,
}

#[derive(Deserialize)]
struct GlPipeline {
    sha: String,
    status: String,
}

#[derive(Deserialize)]
struct GlJob {
    id: i64,
    name: String,
    status: String,
    #[serde(default)]
    allow_failure: bool,
    #[serde(default)]
    failure_reason: Option<String>,
    #[serde(default)]
    web_url: Option<String>,
}

/// A merge request discussion; one that starts with a note on a diff line is an inline
/// comment's thread.
#[derive(Deserialize)]
struct GlDiscussion {
    id: String,
    #[serde(default)]
    notes: Vec<GlDiffNote>,
}

#[derive(Deserialize)]
struct GlDiffNote {
    id: i64,
    body: Option<String>,
    author: GlUser,
    #[serde(default)]
    system: bool,
    #[serde(default)]
    resolvable: bool,
    #[serde(default)]
    resolved: bool,
    #[serde(default)]
    position: Option<GlPosition>,
}

#[derive(Deserialize)]
struct GlPosition {
    #[serde(default)]
    new_path: Option<String>,
    #[serde(default)]
    old_path: Option<String>,
    #[serde(default)]
    new_line: Option<i64>,
    #[serde(default)]
    line_range: Option<GlLineRange>,
}

#[derive(Deserialize)]
struct GlLineRange {
    start: GlLine,
    end: GlLine,
}

#[derive(Deserialize)]
struct GlLine {
    #[serde(default)]
    new_line: Option<i64>,
}

impl GlDiscussion {
    /// The discussion's first note, when it is an unresolved note on a diff line.
    fn open_diff_comment(self) -> Option<ReviewComment> {
        let first = self.notes.into_iter().next()?;
        let position = first.position?;
        if first.system || (first.resolvable && first.resolved) {
            return None;
        }
        let path = position.new_path.or(position.old_path)?;
        let lines = match position.line_range {
            Some(GlLineRange {
                start: GlLine { new_line: Some(a) },
                end: GlLine { new_line: Some(b) },
            }) => Some((a, b)),
            _ => position.new_line.map(|n| (n, n)),
        };
        Some(ReviewComment {
            id: CommentId(first.id),
            thread: Some(self.id),
            path,
            lines,
            // GitLab keeps the diff beside the note, not in it; the planner reads the file.
            diff_hunk: String::new(),
            body: first.body.unwrap_or_default(),
            author: first.author.into(),
        })
    }
}

#[derive(Deserialize)]
struct GlProject {
    #[serde(default)]
    id: Option<i64>,
    /// `null` while the repository is empty.
    default_branch: Option<String>,
    #[serde(default)]
    http_url_to_repo: Option<String>,
    /// Sent when asked for (`statistics=true`) and the token may see them.
    #[serde(default)]
    statistics: Option<GlStatistics>,
}

#[derive(Deserialize)]
struct GlStatistics {
    /// Bytes.
    #[serde(default)]
    repository_size: Option<u64>,
}

#[derive(Deserialize)]
struct GlBranch {
    commit: GlCommit,
}

#[derive(Deserialize)]
struct GlCommit {
    id: String,
}

#[derive(Deserialize)]
struct GlMember {
    access_level: i64,
    /// The user's state (`active`, `blocked`, …).
    state: Option<String>,
    /// `awaiting` while a seat or an invitation is pending.
    membership_state: Option<String>,
}

#[derive(Deserialize)]
struct GlAward {
    name: String,
    user: GlUser,
}

#[derive(Deserialize)]
struct GlFile {
    encoding: String,
    content: String,
}

#[derive(Deserialize)]
struct GlMergeRequest {
    iid: i64,
    title: String,
    description: Option<String>,
    source_branch: String,
    target_branch: String,
    source_project_id: i64,
    target_project_id: i64,
    web_url: String,
    /// Missing before GitLab 13.2, whose `work_in_progress` came from the title alone.
    #[serde(default)]
    draft: Option<bool>,
}

impl From<GlMergeRequest> for PullRequest {
    fn from(m: GlMergeRequest) -> Self {
        let draft = m
            .draft
            .unwrap_or_else(|| undrafted(&m.title).len() < m.title.len());
        PullRequest {
            number: PullNumber(m.iid),
            url: m.web_url,
            head_branch: m.source_branch,
            base_branch: m.target_branch,
            title: m.title,
            body: m.description.unwrap_or_default(),
            draft,
        }
    }
}

/// `title` without the prefixes that make GitLab treat a merge request as a draft
/// (`Draft:`, `[Draft]`, `(Draft)`, in any case, repeated or not).
fn undrafted(title: &str) -> &str {
    let mut rest = title.trim_start();
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(len) = ["draft:", "[draft]", "(draft)"]
            .iter()
            .find(|p| lower.starts_with(*p))
            .map(|p| p.len())
        else {
            return rest;
        };
        rest = rest[len..].trim_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn gitlabs_draft_prefixes_come_off_and_nothing_else() {
        assert_eq!(undrafted("Draft: Fix it"), "Fix it");
        assert_eq!(undrafted("[draft] (Draft)  DRAFT:Fix it"), "Fix it");
        assert_eq!(undrafted("Drafting the fix"), "Drafting the fix");
        assert_eq!(undrafted("Fix the draft: parser"), "Fix the draft: parser");
    }

    #[test]
    fn statuses_are_classified() {
        let s = |code: u16, h: &[(&'static str, &str)]| {
            classify_status(
                "GET /x".into(),
                StatusCode::from_u16(code).unwrap(),
                &headers(h),
                "m".into(),
            )
        };
        assert!(matches!(s(404, &[]), ForgeError::NotFound { .. }));
        assert!(matches!(
            s(502, &[]),
            ForgeError::Unavailable { status: 502, .. }
        ));
        assert!(matches!(
            s(403, &[]),
            ForgeError::Refused { status: 403, .. }
        ));
        assert!(matches!(
            s(401, &[]),
            ForgeError::Refused { status: 401, .. }
        ));
        assert!(matches!(
            s(429, &[("retry-after", "7")]),
            ForgeError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        match s(429, &[("ratelimit-reset", &reset.to_string())]) {
            ForgeError::RateLimited {
                retry_after: Some(d),
                ..
            } => assert!(d <= Duration::from_secs(31) && d >= Duration::from_secs(29)),
            other => panic!("not a rate limit: {other:?}"),
        }
        assert!(matches!(
            s(429, &[]),
            ForgeError::RateLimited {
                retry_after: None,
                ..
            }
        ));
    }

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
    fn the_next_page_comes_from_whichever_header_is_there() {
        assert_eq!(
            next_page(&headers(&[("x-next-page", "3")]), 2, 100),
            Some(3)
        );
        assert_eq!(next_page(&headers(&[("x-next-page", "")]), 2, 100), None);
        let link = "<https://gitlab.example.com/api/v4/projects/1/issues/3/notes?page=2&per_page=100&sort=asc>; rel=\"next\", \
                    <https://gitlab.example.com/api/v4/projects/1/issues/3/notes?page=1&per_page=100&sort=asc>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", link)]), 1, 100), Some(2));
        let last = "<https://gitlab.example.com/api/v4/x?page=1&per_page=100>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", last)]), 1, 100), None);
        assert_eq!(next_page(&headers(&[]), 1, 100), Some(2));
        assert_eq!(next_page(&headers(&[]), 1, 99), None);
    }

    #[test]
    fn paths_are_encoded_whole() {
        let repo = RepoName::parse("Group/Sub/Project").unwrap();
        assert_eq!(project_path(&repo), "/projects/group%2Fsub%2Fproject");
        assert_eq!(encode(".gitlab/planwright.yml"), ".gitlab%2Fplanwright.yml");
        assert_eq!(encode("docs/a b#c?.md"), "docs%2Fa%20b%23c%3F.md");
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

    #[test]
    fn error_messages_are_read_from_any_shape() {
        assert_eq!(
            error_message(r#"{"message":"404 Not found"}"#),
            "404 Not found"
        );
        assert_eq!(
            error_message(r#"{"message":{"body":["is too long"]}}"#),
            r#"{"body":["is too long"]}"#
        );
        assert_eq!(
            error_message(r#"{"error":"insufficient_scope","error_description":"needs api"}"#),
            "needs api"
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
    }
}
