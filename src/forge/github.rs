//! GitHub as a forge: the App's identity (JWT from the app id and private key), one client
//! per installation whose token octocrab mints and refreshes, and the REST calls behind
//! the `Forge` trait. Wire shapes stay in this file as small local structs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use async_trait::async_trait;
use base64::Engine;
use http::{HeaderMap, Method, StatusCode};
use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId as OctoInstallationId};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::{
    Comment, Forge, ForgeError, Issue, Permission, Reaction, Repository, RetryPolicy, header,
};
use crate::config::GithubSettings;
use crate::event::Actor;
use crate::ids::{CommentId, CommitSha, InstallationId, IssueNumber, RepoName};

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
    retry: RetryPolicy,
    slug: OnceCell<String>,
    /// One client per installation, kept for the process's life: octocrab caches the
    /// installation token inside the client, and a clone of an `Octocrab` copies that
    /// cache rather than sharing it, so the client itself must be shared.
    installations: Mutex<HashMap<InstallationId, Arc<Octocrab>>>,
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
                retry: RetryPolicy::default(),
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The same app with another retry policy (tests use short backoffs). Call it before
    /// handing out installations: they share the policy of the app they came from.
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        GithubApp {
            shared: Arc::new(Shared {
                app: self.shared.app.clone(),
                retry,
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
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
        })
    }

    /// The app's bot login (`<slug>[bot]`), fetched once.
    pub async fn bot_login(&self) -> Result<String, ForgeError> {
        let slug = self
            .shared
            .slug
            .get_or_try_init(|| async {
                let app: GhApp = self
                    .shared
                    .request(&self.shared.app, Method::GET, "/app", None)
                    .await?;
                Ok::<_, ForgeError>(app.slug)
            })
            .await?;
        Ok(format!("{slug}[bot]"))
    }
}

/// One installation's view of GitHub.
pub struct GithubForge {
    shared: Arc<Shared>,
    client: Arc<Octocrab>,
}

impl GithubForge {
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ForgeError> {
        self.shared
            .request(&self.client, Method::GET, path, None)
            .await
    }
}

#[async_trait]
impl Forge for GithubForge {
    async fn is_own(&self, actor: &Actor) -> Result<bool, ForgeError> {
        let app = GithubApp {
            shared: Arc::clone(&self.shared),
        };
        let login = app.bot_login().await?;
        Ok(actor.login.eq_ignore_ascii_case(&login))
    }

    async fn repository(&self, repo: &RepoName) -> Result<Repository, ForgeError> {
        let base = repo_path(repo);
        let info: GhRepo = self.get(&base).await?;
        let branch: GhBranch = self
            .get(&format!(
                "{base}/branches/{}",
                encode_path(&info.default_branch)
            ))
            .await?;
        Ok(Repository {
            name: repo.clone(),
            default_branch: info.default_branch,
            head_sha: CommitSha(branch.commit.sha),
        })
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

    async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        // Retried like every call, so a create that GitHub stored before failing (a 502
        // from a proxy, a timeout) can appear twice; the session layer posts with a marker
        // and looks for it first, which is where duplicates are prevented.
        let created: GhComment = self
            .shared
            .request(
                &self.client,
                Method::POST,
                &format!("{}/issues/{issue}/comments", repo_path(repo)),
                Some(&json!({ "body": body })),
            )
            .await?;
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
        let packed: String = file
            .content
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(packed)
            .map_err(|e| malformed(&format!("bad base64: {e}")))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| malformed(&format!("`{path}` is not UTF-8 text")))
    }
    async fn find_or_create_pull(
        &self,
        _repo: &RepoName,
        _new: &crate::forge::NewPullRequest<'_>,
    ) -> Result<crate::forge::PullRequest, ForgeError> {
        Err(not_yet("open a pull request"))
    }

    async fn update_pull_body(
        &self,
        _repo: &RepoName,
        _pull: crate::ids::PullNumber,
        _body: &str,
    ) -> Result<crate::forge::PullRequest, ForgeError> {
        Err(not_yet("update a pull request"))
    }

    async fn set_check(
        &self,
        _repo: &RepoName,
        _check: &crate::forge::Check<'_>,
    ) -> Result<(), ForgeError> {
        Err(not_yet("set a check"))
    }

    async fn minimize_comment(
        &self,
        _repo: &RepoName,
        _issue: IssueNumber,
        _comment: CommentId,
    ) -> Result<bool, ForgeError> {
        Err(not_yet("minimize a comment"))
    }

    async fn git_remote(&self, _repo: &RepoName) -> Result<crate::forge::GitRemote, ForgeError> {
        Err(not_yet("give git credentials"))
    }
}

impl Shared {
    /// One forge call through the retry policy. Paths are relative so octocrab attaches
    /// the credentials as a header (never in the URL) and only towards its base URI.
    async fn request<T: DeserializeOwned>(
        &self,
        client: &Octocrab,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
        self.retry
            .run(|| attempt(client, &method, path, body, &what))
            .await
    }
}

async fn attempt<T: DeserializeOwned>(
    client: &Octocrab,
    method: &Method,
    path: &str,
    body: Option<&Value>,
    what: &str,
) -> Result<T, ForgeError> {
    tracing::debug!(call = what, "forge request");
    let response = match *method {
        Method::GET => client._get(path).await,
        Method::POST => client._post(path, body).await,
        Method::PATCH => client._patch(path, body).await,
        _ => {
            return Err(ForgeError::Client {
                what: what.to_owned(),
                message: format!("unsupported method {method}"),
            });
        }
    }
    .map_err(|e| classify_octocrab(what.to_owned(), e))?;
    let status = response.status();
    let headers = response.headers().clone();
    let text = client
        .body_to_string(response)
        .await
        .map_err(|e| classify_octocrab(what.to_owned(), e))?;
    if !status.is_success() {
        let message = serde_json::from_str::<GhErrorBody>(&text)
            .ok()
            .and_then(|b| b.message)
            .unwrap_or_else(|| text.chars().take(200).collect());
        return Err(classify_status(what.to_owned(), status, &headers, message));
    }
    serde_json::from_str(&text).map_err(|e| ForgeError::Malformed {
        what: what.to_owned(),
        message: e.to_string(),
    })
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
}

impl From<GhComment> for Comment {
    fn from(c: GhComment) -> Self {
        Comment {
            id: CommentId(c.id),
            body: c.body.unwrap_or_default(),
            author: c.user.map_or_else(ghost, Actor::from),
        }
    }
}

#[derive(Deserialize)]
struct GhRepo {
    default_branch: String,
}

#[derive(Deserialize)]
struct GhBranch {
    commit: GhCommitRef,
}

#[derive(Deserialize)]
struct GhCommitRef {
    sha: String,
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

fn not_yet(what: &str) -> ForgeError {
    ForgeError::Client {
        what: what.to_owned(),
        message: "not supported yet".to_owned(),
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
    fn paths_are_escaped_per_segment() {
        assert_eq!(
            encode_path(".github/planwright.yml"),
            ".github/planwright.yml"
        );
        assert_eq!(encode_path("docs/a b#c?.md"), "docs/a%20b%23c%3F.md");
    }
}
