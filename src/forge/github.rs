//! GitHub as a forge: the App's identity (JWT from the app id and private key), one client
//! per installation whose token octocrab mints and refreshes, and the REST calls behind
//! the `Forge` trait. Wire shapes stay in this file as small local structs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use async_trait::async_trait;
use http::{HeaderMap, Method, StatusCode};
use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId as OctoInstallationId};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::conditional::Answers;
use super::{
    CI_CHECKS_MAX, CI_LOG_MAX, Check, CheckState, Comment, FailedCheck, Forge, ForgeError,
    GITHUB_TEXT_LIMIT, GitRemote, Issue, LabelChange, NewPullRequest, Permission, PullRequest,
    PullState, REVIEW_COMMENTS_MAX, Reaction, Repository, RetryPolicy, Review, ReviewComment,
    ReviewState, header, tail, truncate_with_note,
};
use crate::config::GithubSettings;
use crate::contract::SourceLinks;
use crate::event::{Actor, CiSource, Thread};
use crate::ids::{CommentId, CommitSha, InstallationId, IssueNumber, PullNumber, RepoName};

/// A token handed to git has at least this long left: enough for the fetch or push it is
/// for (installation tokens live an hour).
const GIT_TOKEN_MARGIN: Duration = Duration::from_secs(10 * 60);
/// Comments fetched per page: GitHub's maximum, so long threads take few requests.
const PER_PAGE: usize = 100;
/// A thread longer than this many pages is not a thread planwright can act on anyway;
/// the bound keeps a misbehaving server from looping us forever.
const MAX_PAGES: usize = 100;

/// The GitHub App: signs JWTs as the app and hands out per-installation forges.
#[derive(Clone)]
pub struct GithubApp {
    shared: Arc<Shared>,
}

struct Shared {
    app: Octocrab,
    app_id: u64,
    /// Where GraphQL lives, which on GitHub Enterprise Server is not under the REST base.
    graphql_url: String,
    /// The web view's root: `https://github.com`, or an Enterprise Server's host.
    web_url: String,
    /// For GraphQL only: octocrab puts its base path in front of every URL, which on
    /// Enterprise Server turns `/api/graphql` into `/api/v3/api/graphql`.
    http: reqwest::Client,
    retry: RetryPolicy,
    /// GET answers kept for conditional requests, per installation.
    answers: Answers,
    slug: OnceCell<String>,
    /// One client per installation, kept for the process's life: octocrab caches the
    /// installation token inside the client, and a clone of an `Octocrab` copies that
    /// cache rather than sharing it, so the client itself must be shared.
    installations: Mutex<HashMap<InstallationId, Arc<Octocrab>>>,
    /// Repository ids as last read, whichever installation read them.
    repo_ids: super::RepoIds,
}

impl GithubApp {
    /// Builds the app client from the settings; a key that does not parse is an error
    /// naming the setting, so a misconfigured deployment stops at startup.
    pub fn from_settings(settings: &GithubSettings) -> anyhow::Result<Self> {
        let app_id = settings
            .app_id
            .context("Cannot use GitHub: GITHUB_APP_ID is not set")?;
        let key = settings
            .private_key
            .as_ref()
            .context("Cannot use GitHub: GITHUB_PRIVATE_KEY is not set")?;
        let key = octocrab::EncodingKey::from_rsa_pem(key.expose_secret().as_bytes())
            .context("Cannot use GITHUB_PRIVATE_KEY: it is not an RSA private key in PEM form")?;
        let app = Octocrab::builder()
            .base_uri(settings.api_url.as_str())
            .with_context(|| {
                format!(
                    "Cannot use GITHUB_API_URL `{}` as a base URL",
                    settings.api_url
                )
            })?
            .app(AppId(app_id), key)
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)))
            .build()
            .context("Could not build the GitHub client")?;
        Ok(GithubApp {
            shared: Arc::new(Shared {
                app,
                app_id,
                graphql_url: graphql_url(&settings.api_url),
                web_url: settings.web_url.clone(),
                http: reqwest::Client::builder()
                    // A redirect could carry the token to another host.
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(Duration::from_secs(10))
                    .timeout(Duration::from_secs(30))
                    .build()
                    .context("Could not build the GitHub GraphQL client")?,
                retry: RetryPolicy {
                    max_rate_limit_wait: settings.rate_limit_wait,
                    ..RetryPolicy::default()
                },
                answers: Answers::default(),
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
                repo_ids: super::RepoIds::default(),
            }),
        })
    }

    /// The same app with another retry policy (tests use short backoffs). Call it before
    /// handing out installations: they share the policy of the app they came from.
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        GithubApp {
            shared: Arc::new(Shared {
                app: self.shared.app.clone(),
                app_id: self.shared.app_id,
                graphql_url: self.shared.graphql_url.clone(),
                web_url: self.shared.web_url.clone(),
                http: self.shared.http.clone(),
                retry,
                answers: Answers::default(),
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
                repo_ids: super::RepoIds::default(),
            }),
        }
    }

    /// The forge as seen by one installation.
    pub fn installation(&self, id: InstallationId) -> Result<GithubForge, ForgeError> {
        let what = || format!("use installation {id}");
        let mut clients = self
            .shared
            .installations
            .lock()
            .map_err(|_| ForgeError::Client {
                what: what(),
                message: "the client cache was poisoned by a panic".into(),
            })?;
        let client = match clients.get(&id) {
            Some(client) => Arc::clone(client),
            None => {
                let client = Arc::new(
                    self.shared
                        .app
                        .installation(OctoInstallationId(id.0 as u64))
                        .map_err(|e| classify_octocrab(what(), e))?,
                );
                clients.insert(id, Arc::clone(&client));
                client
            }
        };
        Ok(GithubForge {
            shared: Arc::clone(&self.shared),
            client,
            installation: id,
        })
    }

    /// Every installation of the app, with the permissions and events it has accepted
    /// (an installation made before the app asked for more keeps its old grant until an
    /// owner accepts the new one).
    pub async fn installations(&self) -> Result<Vec<InstallationGrant>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let batch: Vec<GhInstallation> = self
                .shared
                .request(
                    &self.shared.app,
                    None,
                    Method::GET,
                    &format!("/app/installations?per_page={PER_PAGE}&page={page}"),
                    None,
                )
                .await?;
            let last = batch.len() < PER_PAGE;
            all.extend(batch.into_iter().map(|i| InstallationGrant {
                id: InstallationId(i.id),
                account: i.account.map(|a| a.login).unwrap_or_default(),
                permissions: i.permissions,
                events: i.events,
            }));
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// The app's bot login (`<slug>[bot]`), fetched once.
    pub async fn bot_login(&self) -> Result<String, ForgeError> {
        let slug = self
            .shared
            .slug
            .get_or_try_init(|| async {
                let app: GhApp = self
                    .shared
                    .request(&self.shared.app, None, Method::GET, "/app", None)
                    .await?;
                Ok::<_, ForgeError>(app.slug)
            })
            .await?;
        Ok(format!("{slug}[bot]"))
    }
}

/// What one installation of the app has accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationGrant {
    pub id: InstallationId,
    /// The user or organisation it is installed on.
    pub account: String,
    /// Permission name → `read`, `write` or `admin`.
    pub permissions: std::collections::BTreeMap<String, String>,
    pub events: Vec<String>,
}

#[derive(Deserialize)]
struct GhInstallation {
    id: i64,
    #[serde(default)]
    account: Option<GhAccount>,
    #[serde(default)]
    permissions: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    events: Vec<String>,
}

#[derive(Deserialize)]
struct GhAccount {
    login: String,
}

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

    async fn set_check(&self, repo: &RepoName, check: &Check<'_>) -> Result<(), ForgeError> {
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

impl Shared {
    /// One forge call through the retry policy. Paths are relative so octocrab attaches
    /// the credentials as a header (never in the URL) and only towards its base URI.
    /// One call through the retry policy; `scope` is the installation whose rate limit
    /// it spends (`None`: the app's own, as its JWT).
    async fn request<T: DeserializeOwned>(
        &self,
        client: &Octocrab,
        scope: Option<InstallationId>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let budget = self.budget_scope(scope);
        self.retry
            .run(|| attempt(client, &self.answers, &budget, &method, path, body, &what))
            .await
    }

    /// The rate-limit budget an installation (or the app itself, as its JWT) spends on
    /// this GitHub.
    fn budget_scope(&self, scope: Option<InstallationId>) -> String {
        match scope {
            Some(id) => format!("{} installation {id}", self.web_url),
            None => format!("{} app", self.web_url),
        }
    }
}

/// GitHub's GraphQL endpoint for a REST base URL: `{api}/graphql` on github.com-style
/// bases, `https://HOST/api/graphql` for GitHub Enterprise Server's `https://HOST/api/v3`.
fn graphql_url(api_url: &str) -> String {
    let base = api_url.trim_end_matches('/');
    match base.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{base}/graphql"),
    }
}

async fn attempt<T: DeserializeOwned>(
    client: &Octocrab,
    answers: &Answers,
    budget: &str,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    what: &str,
) -> Result<T, ForgeError> {
    // Down to its reserve: the call waits for the reset instead of spending the rest.
    super::budget::check("github", budget, what)?;
    tracing::debug!(call = what, "forge request");
    // A GET asked before goes conditional: a 304 is answered from what was kept.
    let sent = (*method == Method::GET)
        .then(|| answers.lookup(budget, path))
        .flatten();
    let response = match *method {
        Method::GET => {
            let mut headers = HeaderMap::new();
            if let Some(sent) = &sent {
                headers.insert(http::header::IF_NONE_MATCH, sent.etag.clone());
            }
            client._get_with_headers(path, Some(headers)).await
        }
        Method::POST => client._post(path, body).await,
        Method::PATCH => client._patch(path, body).await,
        _ => {
            return Err(ForgeError::Client {
                what: what.to_owned(),
                message: format!("unsupported method {method}"),
            });
        }
    };
    let route = super::route(method.as_str(), path);
    let response = response.map_err(|e| {
        crate::metrics::record_forge_request("github", &route, "error");
        classify_octocrab(what.to_owned(), e)
    })?;
    let status = response.status();
    crate::metrics::record_forge_request("github", &route, status.as_str());
    let headers = response.headers().clone();
    super::budget::record("github", budget, &headers);
    let text = client
        .body_to_string(response)
        .await
        .map_err(|e| classify_octocrab(what.to_owned(), e))?;
    let text = if status == StatusCode::NOT_MODIFIED {
        super::conditional::not_modified(sent.as_ref(), "GitHub", what)?
    } else {
        let text = check_answer(status, &headers, text, what)?;
        if *method == Method::GET
            && let Some(etag) = headers.get(http::header::ETAG)
        {
            answers.keep(budget, path, etag, &text);
        }
        text
    };
    serde_json::from_str(&text).map_err(|e| ForgeError::Malformed {
        what: what.to_owned(),
        message: e.to_string(),
    })
}

/// A successful answer's body, or the failure classified with GitHub's message.
fn check_answer(
    status: StatusCode,
    headers: &HeaderMap,
    text: String,
    what: &str,
) -> Result<String, ForgeError> {
    if !status.is_success() {
        let message = serde_json::from_str::<GhErrorBody>(&text)
            .ok()
            .and_then(GhErrorBody::into_message)
            .unwrap_or_else(|| text.chars().take(200).collect());
        return Err(classify_status(what.to_owned(), status, headers, message));
    }
    Ok(text)
}

/// Classifies an answer that was not a success. GitHub signals rate limits with 429, or
/// with 403 plus `retry-after` or an exhausted `x-ratelimit-remaining`.
fn classify_status(
    what: String,
    status: StatusCode,
    headers: &HeaderMap,
    message: String,
) -> ForgeError {
    let code = status.as_u16();
    let rate_limited = code == 429
        || (code == 403
            && (headers.contains_key("retry-after")
                || header(headers, "x-ratelimit-remaining") == Some("0")
                || message.to_ascii_lowercase().contains("rate limit")));
    if rate_limited {
        return ForgeError::RateLimited {
            what,
            retry_after: rate_limit_wait(headers),
        };
    }
    ForgeError::from_status(what, code, message)
}

/// How long GitHub asks us to wait: `retry-after` seconds, else until
/// `x-ratelimit-reset` when the budget is spent, else the minute GitHub's documentation
/// asks for after a secondary rate limit without either header.
fn rate_limit_wait(headers: &HeaderMap) -> Option<Duration> {
    if let Some(seconds) = header(headers, "retry-after").and_then(|v| v.trim().parse().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    if header(headers, "x-ratelimit-remaining") == Some("0")
        && let Some(reset) =
            header(headers, "x-ratelimit-reset").and_then(|v| v.trim().parse::<u64>().ok())
    {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    Some(Duration::from_secs(60))
}

fn classify_octocrab(what: String, error: octocrab::Error) -> ForgeError {
    match error {
        octocrab::Error::GitHub { source, .. } => {
            let headers = source.headers.clone().unwrap_or_default();
            classify_status(what, source.status_code, &headers, source.message.clone())
        }
        // Connection failures and timeouts surface as service or hyper errors.
        octocrab::Error::Service { .. } | octocrab::Error::Hyper { .. } => ForgeError::Transport {
            what,
            message: error.to_string(),
        },
        octocrab::Error::Serde { .. }
        | octocrab::Error::Json { .. }
        | octocrab::Error::InvalidUtf8 { .. }
        | octocrab::Error::Other { .. } => ForgeError::Malformed {
            what,
            message: error.to_string(),
        },
        other => ForgeError::Client {
            what,
            message: other.to_string(),
        },
    }
}

/// Path segments of user-supplied text (file paths keep their slashes).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn encode_path(path: &str) -> String {
    path.trim_matches('/')
        .split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

fn repo_path(repo: &RepoName) -> String {
    format!("/repos/{}", encode_path(repo.as_str()))
}

#[derive(Deserialize)]
struct GhErrorBody {
    message: Option<String>,
    /// A 422's details: "Validation Failed" alone does not say what failed.
    #[serde(default)]
    errors: Vec<Value>,
}

impl GhErrorBody {
    fn into_message(self) -> Option<String> {
        let details: Vec<String> = self
            .errors
            .iter()
            .filter_map(|e| match e {
                Value::String(text) => Some(text.clone()),
                other => other.get("message")?.as_str().map(str::to_owned),
            })
            .collect();
        match (self.message, details.is_empty()) {
            (Some(message), true) => Some(message),
            (Some(message), false) => Some(format!("{message}: {}", details.join("; "))),
            (None, false) => Some(details.join("; ")),
            (None, true) => None,
        }
    }
}

#[derive(Deserialize)]
struct GhGraphql {
    data: Option<Value>,
    errors: Option<Vec<GhGraphqlError>>,
}

#[derive(Deserialize)]
struct GhGraphqlError {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct GhNode {
    node_id: String,
}

#[derive(Deserialize)]
struct GhToken {
    token: SecretString,
}

#[derive(Deserialize)]
struct GhPull {
    number: i64,
    html_url: String,
    title: String,
    body: Option<String>,
    #[serde(default)]
    draft: bool,
    head: GhPullEnd,
    base: GhPullEnd,
}

#[derive(Deserialize)]
struct GhPullState {
    state: String,
    #[serde(default)]
    merged: bool,
}

#[derive(Deserialize)]
struct GhPullEnd {
    #[serde(rename = "ref")]
    branch: String,
    /// `null` when the fork the branch lived in was deleted.
    #[serde(default)]
    repo: Option<GhPullRepo>,
}

#[derive(Deserialize)]
struct GhPullRepo {
    full_name: String,
}

impl From<GhPull> for PullRequest {
    fn from(p: GhPull) -> Self {
        PullRequest {
            number: PullNumber(p.number),
            url: p.html_url,
            head_branch: p.head.branch,
            base_branch: p.base.branch,
            title: p.title,
            body: p.body.unwrap_or_default(),
            draft: p.draft,
        }
    }
}

#[derive(Deserialize, Default)]
struct GhCheckRuns {
    check_runs: Vec<GhCheckRun>,
}

#[derive(Deserialize)]
struct GhCheckRun {
    id: i64,
    name: String,
    app: Option<GhCheckApp>,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    details_url: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    output: Option<GhCheckOutput>,
}

#[derive(Deserialize)]
struct GhCheckApp {
    id: u64,
}

#[derive(Deserialize)]
struct GhApp {
    slug: String,
}

#[derive(Deserialize)]
struct GhUser {
    login: String,
    id: i64,
    #[serde(rename = "type", default)]
    kind: String,
}

impl From<GhUser> for Actor {
    fn from(user: GhUser) -> Self {
        let bot = user.kind == "Bot" || user.login.ends_with("[bot]");
        Actor {
            login: user.login,
            id: user.id,
            bot,
        }
    }
}

/// Conclusions of a finished check run that mean it failed.
fn failed_conclusion(conclusion: &str) -> bool {
    matches!(
        conclusion,
        "failure" | "timed_out" | "action_required" | "startup_failure"
    )
}

#[derive(Deserialize)]
struct GhCheckSuite {
    head_sha: String,
    #[serde(default)]
    app: Option<GhCheckApp>,
}

#[derive(Deserialize)]
struct GhCheckOutput {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct GhAnnotation {
    path: String,
    #[serde(default)]
    start_line: Option<i64>,
    #[serde(default)]
    annotation_level: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl GhCheckRun {
    /// The run as a failed check: its output's parts one after another, then its
    /// annotations as `path:line: level: message` lines.
    fn into_failed(self, annotations: &[GhAnnotation]) -> FailedCheck {
        let mut log = String::new();
        if let Some(output) = self.output {
            for part in [output.title, output.summary, output.text]
                .into_iter()
                .flatten()
            {
                log.push_str(part.trim_end());
                log.push('\n');
            }
        }
        for a in annotations {
            let line = a.start_line.map(|l| format!(":{l}")).unwrap_or_default();
            log.push_str(&format!(
                "{}{line}: {}: {}\n",
                a.path,
                a.annotation_level.as_deref().unwrap_or("failure"),
                a.message.as_deref().unwrap_or_default().trim()
            ));
        }
        FailedCheck {
            name: self.name,
            conclusion: self.conclusion.unwrap_or_default(),
            url: self.details_url.or(self.html_url),
            log: tail(&log, CI_LOG_MAX).into_owned(),
        }
    }
}

#[derive(Deserialize)]
struct GhCombinedStatus {
    #[serde(default)]
    statuses: Vec<GhStatus>,
}

#[derive(Deserialize)]
struct GhStatus {
    context: String,
    state: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
}

#[derive(Deserialize)]
struct GhReview {
    id: i64,
    user: Option<GhUser>,
    body: Option<String>,
    state: String,
}

#[derive(Deserialize)]
struct GhReviewComment {
    id: i64,
    path: String,
    #[serde(default)]
    line: Option<i64>,
    #[serde(default)]
    start_line: Option<i64>,
    #[serde(default)]
    diff_hunk: Option<String>,
    #[serde(default)]
    body: Option<String>,
    user: Option<GhUser>,
}

impl From<GhReviewComment> for ReviewComment {
    fn from(c: GhReviewComment) -> Self {
        ReviewComment {
            id: CommentId(c.id),
            thread: None,
            path: c.path,
            lines: c.line.map(|end| (c.start_line.unwrap_or(end), end)),
            diff_hunk: c.diff_hunk.unwrap_or_default(),
            body: c.body.unwrap_or_default(),
            author: c.user.map_or_else(ghost, Actor::from),
        }
    }
}

/// GitHub shows a deleted account as `null`; it acts as nobody.
fn ghost() -> Actor {
    Actor {
        login: "ghost".into(),
        id: 0,
        bot: false,
    }
}

#[derive(Deserialize)]
struct GhLabel {
    name: String,
}

#[derive(Deserialize)]
struct GhIssue {
    number: i64,
    title: String,
    body: Option<String>,
    #[serde(default)]
    labels: Vec<GhLabel>,
    user: GhUser,
}

#[derive(Deserialize)]
struct GhComment {
    id: i64,
    body: Option<String>,
    user: Option<GhUser>,
    #[serde(default)]
    created_at: Option<String>,
    /// The issue (or pull request) the comment is on; a review comment names its pull
    /// request in `pull_request_url` instead.
    #[serde(default)]
    issue_url: Option<String>,
    #[serde(default)]
    pull_request_url: Option<String>,
}

impl GhComment {
    /// Whether the comment's API address says it is on `#number`.
    fn is_on(&self, number: i64) -> bool {
        let suffix_issue = format!("/issues/{number}");
        let suffix_pull = format!("/pulls/{number}");
        self.issue_url
            .as_deref()
            .is_some_and(|u| u.ends_with(&suffix_issue))
            || self
                .pull_request_url
                .as_deref()
                .is_some_and(|u| u.ends_with(&suffix_pull))
    }
}

impl From<GhComment> for Comment {
    fn from(c: GhComment) -> Self {
        Comment {
            id: CommentId(c.id),
            body: c.body.unwrap_or_default(),
            author: c.user.map_or_else(ghost, Actor::from),
            created_at: c.created_at.as_deref().and_then(super::unix_seconds),
        }
    }
}

#[derive(Deserialize)]
struct GhRepoQuery {
    repository: Option<GhRepoNode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GhRepoNode {
    #[serde(default)]
    database_id: Option<i64>,
    #[serde(default)]
    disk_usage: Option<u64>,
    default_branch_ref: Option<GhRefNode>,
}

#[derive(Deserialize)]
struct GhRefNode {
    name: String,
    target: GhOid,
}

#[derive(Deserialize)]
struct GhOid {
    oid: String,
}

#[derive(Deserialize)]
struct GhPermission {
    permission: String,
    role_name: Option<String>,
}

#[derive(Deserialize)]
struct GhContent {
    #[serde(rename = "type")]
    kind: String,
    encoding: Option<String>,
    content: Option<String>,
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
    fn statuses_are_classified() {
        let s = |code: u16, h: &[(&'static str, &str)], msg: &str| {
            classify_status(
                "GET /x".into(),
                StatusCode::from_u16(code).unwrap(),
                &headers(h),
                msg.into(),
            )
        };
        assert!(matches!(
            s(404, &[], "Not Found"),
            ForgeError::NotFound { .. }
        ));
        assert!(matches!(
            s(502, &[], "Bad Gateway"),
            ForgeError::Unavailable { status: 502, .. }
        ));
        assert!(matches!(
            s(403, &[], "Resource not accessible by integration"),
            ForgeError::Refused { status: 403, .. }
        ));
        assert!(matches!(
            s(403, &[("retry-after", "7")], "slow down"),
            ForgeError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        match s(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset.to_string()),
            ],
            "API rate limit exceeded",
        ) {
            ForgeError::RateLimited {
                retry_after: Some(d),
                ..
            } => assert!(d <= Duration::from_secs(31) && d >= Duration::from_secs(29)),
            other => panic!("not a rate limit: {other:?}"),
        }
        assert!(matches!(
            s(429, &[], "Too Many Requests"),
            ForgeError::RateLimited { .. }
        ));
        assert!(matches!(
            s(422, &[], "Validation Failed"),
            ForgeError::Refused { status: 422, .. }
        ));
    }

    #[test]
    fn graphql_lives_beside_the_rest_api() {
        assert_eq!(
            graphql_url("https://api.github.com"),
            "https://api.github.com/graphql"
        );
        assert_eq!(
            graphql_url("https://ghe.example.com/api/v3/"),
            "https://ghe.example.com/api/graphql"
        );
        assert_eq!(
            graphql_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/graphql"
        );
    }

    #[test]
    fn a_validation_failure_says_what_failed() {
        let body: GhErrorBody = serde_json::from_value(json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom",
                        "message": "A pull request already exists for o:b."}],
        }))
        .unwrap();
        assert_eq!(
            body.into_message().unwrap(),
            "Validation Failed: A pull request already exists for o:b."
        );
    }

    #[test]
    fn paths_are_escaped_per_segment() {
        assert_eq!(
            encode_path(".github/planwright.yml"),
            ".github/planwright.yml"
        );
        assert_eq!(encode_path("docs/a b#c?.md"), "docs/a%20b%23c%3F.md");
    }
}
