//! A stateful fake of GitHub's REST API on a loopback port: repositories, issues,
//! comments (with edit history), reactions, permissions, files, App installations, pull
//! requests, check runs, GraphQL's `minimizeComment` and git over smart HTTP, answered
//! with GitHub's JSON shapes and credentials checked the way GitHub does. Every request
//! is recorded, and the next N requests can be made to fail on purpose. Paths under
//! `/api/v3` and `/api/graphql` are GitHub Enterprise Server's and answered alike.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use octocrab::jsonwebtoken::{self, Algorithm, DecodingKey, Validation};
use planwright::config::GithubSettings;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Value, json};

use super::fake_http::{self, Fault, Faults, Metered, Oauth, RateLimits, RequestLog};
use super::git_http::{self, GitHttp};

pub const APP_ID: u64 = 4242;
pub const APP_SLUG: &str = "planwright-test";

/// A throwaway RSA key pair for the fake App, made once per test binary with openssl
/// (so no key is ever committed). GitHub hands out PKCS#1 PEM, so the private key is too.
pub struct AppKey {
    pub private_pem: String,
    pub public_pem: String,
}

pub fn app_key() -> &'static AppKey {
    static KEY: OnceLock<AppKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let private = std::process::Command::new("openssl")
            .args(["genrsa", "-traditional", "2048"])
            .output()
            .expect("openssl is installed");
        assert!(private.status.success(), "openssl genrsa failed");
        let mut child = std::process::Command::new("openssl")
            .args(["rsa", "-pubout"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl runs");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&private.stdout)
            .unwrap();
        let public = child.wait_with_output().unwrap();
        assert!(public.status.success(), "openssl rsa -pubout failed");
        AppKey {
            private_pem: String::from_utf8(private.stdout).unwrap(),
            public_pem: String::from_utf8(public.stdout).unwrap(),
        }
    })
}

/// Who sent a recorded request, as the fake understood its `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    /// A valid App JWT.
    Jwt,
    /// An installation token the fake issued (valid or not).
    Token(String),
    Invalid(String),
}

pub type Recorded = fake_http::Recorded<Credential>;

/// The App's OAuth client, as GitHub shows it on the App's settings page.
pub const OAUTH_CLIENT_ID: &str = "Iv23liFakeClient0001";
pub const OAUTH_CLIENT_SECRET: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4";

/// The longest output text GitHub takes in a check run, in characters.
pub const CHECK_TEXT_LIMIT: usize = 65_535;

#[derive(Debug, Clone)]
pub struct FakeUser {
    pub login: String,
    pub id: i64,
    pub bot: bool,
}

impl FakeUser {
    pub fn new(login: &str, id: i64) -> Self {
        FakeUser {
            login: login.into(),
            id,
            bot: false,
        }
    }

    fn json(&self) -> Value {
        json!({
            "login": self.login,
            "id": self.id,
            "node_id": format!("U_{}", self.id),
            "avatar_url": format!("https://avatars.githubusercontent.com/u/{}?v=4", self.id),
            "url": format!("https://api.github.com/users/{}", self.login),
            "html_url": format!("https://github.com/{}", self.login),
            "type": if self.bot { "Bot" } else { "User" },
            "site_admin": false,
        })
    }
}

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: i64,
    pub repo: String,
    pub issue: i64,
    pub body: String,
    pub author: FakeUser,
    /// Earlier bodies, oldest first.
    pub history: Vec<String>,
    /// `(content, login)` pairs.
    pub reactions: Vec<(String, String)>,
    /// The classifier it was minimized with through GraphQL (`OUTDATED`, …).
    pub minimized: Option<String>,
    /// Seconds since the epoch.
    pub created_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePull {
    pub number: i64,
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: Option<String>,
    /// `open` or `closed`.
    pub state: String,
    pub draft: bool,
    /// The fork the head branch lives in (`owner/name`); `None` for the repository itself.
    pub head_repo: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeCheckRun {
    pub id: i64,
    pub repo: String,
    pub head_sha: String,
    pub name: String,
    pub app_id: u64,
    pub status: String,
    pub conclusion: Option<String>,
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
    pub details_url: Option<String>,
    /// How many times it was changed after its creation.
    pub updates: usize,
}

/// A failed check run to add: its name, output text, and annotations as
/// `(path, line, message)`.
pub type FailedRun<'a> = (&'a str, &'a str, &'a [(&'a str, i64, &'a str)]);

/// Another app's check suite on a commit, with its runs (ids into the check runs).
#[derive(Debug, Clone)]
pub struct FakeCheckSuite {
    pub id: i64,
    pub repo: String,
    pub head_sha: String,
    pub app_id: u64,
    pub conclusion: String,
    pub runs: Vec<i64>,
}

/// A commit status another service set.
#[derive(Debug, Clone)]
pub struct FakeStatus {
    pub repo: String,
    pub sha: String,
    pub context: String,
    pub state: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
}

/// A submitted pull request review.
#[derive(Debug, Clone)]
pub struct FakeReview {
    pub id: i64,
    pub repo: String,
    pub pull: i64,
    /// As GitHub's REST API spells it: `CHANGES_REQUESTED`, `COMMENTED`, `APPROVED`.
    pub state: String,
    pub body: Option<String>,
    pub author: FakeUser,
}

/// A comment on a line of a pull request's diff, or a reply in its thread.
#[derive(Debug, Clone)]
pub struct FakeReviewComment {
    pub id: i64,
    pub repo: String,
    pub pull: i64,
    pub review: Option<i64>,
    pub path: String,
    pub line: Option<i64>,
    pub diff_hunk: String,
    pub body: String,
    pub author: FakeUser,
    pub in_reply_to: Option<i64>,
}

struct FakeIssue {
    title: String,
    body: Option<String>,
    labels: Vec<String>,
    author: FakeUser,
}

struct FakeRepo {
    id: i64,
    full_name: String,
    default_branch: String,
    head_sha: String,
    issues: BTreeMap<i64, FakeIssue>,
    files: HashMap<String, Vec<u8>>,
    /// login (lower-cased) → (permission, role_name)
    permissions: HashMap<String, (String, String)>,
    pulls: BTreeMap<i64, FakePull>,
}

struct IssuedToken {
    installation: i64,
    expires_at: u64,
    /// Repository names (without owner, lower-cased) the token is limited to, if any.
    repositories: Option<Vec<String>>,
}

#[derive(Default)]
struct GithubState {
    url: String,
    /// Added before every API answer (not git's), as a distant forge takes.
    latency: std::time::Duration,
    git_root: PathBuf,
    installations: HashMap<i64, Vec<String>>,
    tokens: HashMap<String, IssuedToken>,
    repos: HashMap<String, FakeRepo>,
    comments: BTreeMap<i64, FakeComment>,
    check_runs: BTreeMap<i64, FakeCheckRun>,
    reviews: BTreeMap<i64, FakeReview>,
    review_comments: BTreeMap<i64, FakeReviewComment>,
    /// Check suites of other apps: suite id → (repo, head sha, app id, conclusion, runs).
    check_suites: BTreeMap<i64, FakeCheckSuite>,
    /// What an installation accepted, where it is not everything the app asks for:
    /// installation → (permissions, events).
    grants: HashMap<i64, (Value, Vec<String>)>,
    /// Annotations of check runs, in GitHub's shape.
    annotations: HashMap<i64, Vec<Value>>,
    /// Commit statuses, oldest first.
    statuses: Vec<FakeStatus>,
    next_id: i64,
    log: RequestLog<Credential>,
    faults: Faults,
    /// The installation's window for REST calls (`core`).
    rate_limits: RateLimits,
    /// Its own window for GraphQL, counted apart as GitHub does.
    graphql_limits: RateLimits,
    /// `(method, path prefix)`: every token is revoked just before the next such request.
    revoke_before: Option<(String, String, bool)>,
    /// The `head` filter of the pull request list is ignored, as GitHub does with one it
    /// cannot apply: every open pull request is listed.
    ignore_head_filter: bool,
    /// `(type, message)` errors the next GraphQL calls answer with.
    graphql_errors: VecDeque<(String, String)>,
    /// Sign-in through the App's user authorization.
    oauth: Oauth,
    /// Manifest-flow codes not yet exchanged: code → (organisation, manifest).
    manifest_codes: HashMap<String, (Option<String>, Value)>,
    /// Every manifest an app was registered from, with its organisation.
    registered_manifests: Vec<(Option<String>, Value)>,
}

impl GithubState {
    fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether `token` is a live installation token that may use repository `key`.
    fn token_sees(&self, token: &str, key: &str) -> bool {
        let Some(issued) = self.tokens.get(token) else {
            return false;
        };
        let name = key.rsplit('/').next().unwrap_or(key);
        issued.expires_at > now()
            && self
                .installations
                .get(&issued.installation)
                .is_some_and(|repos| repos.iter().any(|r| r == key))
            && issued
                .repositories
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == name))
    }

    fn git_dir(&self, key: &str) -> PathBuf {
        self.git_root.join(format!("{key}.git"))
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeGithub {
    pub url: String,
    world: Arc<Mutex<GithubState>>,
    task: tokio::task::JoinHandle<()>,
    /// Holds the bare repositories served over git smart HTTP.
    _git_root: tempfile::TempDir,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeGithub {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let git_root = tempfile::tempdir().unwrap();
        let world = Arc::new(Mutex::new(GithubState {
            url: url.clone(),
            git_root: git_root.path().to_owned(),
            next_id: 1000,
            ..GithubState::default()
        }));
        let app = Router::new()
            .fallback(handle)
            // Git pushes run to megabytes, beyond axum's default 2 MB limit.
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(Arc::clone(&world));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeGithub {
            url,
            world,
            task,
            _git_root: git_root,
        }
    }

    /// Settings for a GitHub Enterprise Server-style base URL (`…/api/v3`) on this fake.
    pub fn enterprise_settings(&self) -> GithubSettings {
        GithubSettings {
            api_url: format!("{}/api/v3", self.url),
            ..self.settings()
        }
    }

    /// Settings that point planwright's GitHub client at this fake.
    pub fn settings(&self) -> GithubSettings {
        GithubSettings {
            app_id: Some(APP_ID),
            private_key: Some(SecretString::from(app_key().private_pem.clone())),
            webhook_secrets: Vec::new(),
            api_url: self.url.clone(),
            web_url: self.url.clone(),
            rate_limit_wait: planwright::forge::RetryPolicy::default().max_rate_limit_wait,
            client_id: None,
            client_secret: None,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut GithubState) -> T) -> T {
        f(&mut self.world.lock().unwrap())
    }

    pub fn add_repo(&self, full_name: &str, default_branch: &str, head_sha: &str) {
        self.with(|w| {
            let id = w.next_id();
            w.repos.insert(
                full_name.to_ascii_lowercase(),
                FakeRepo {
                    id,
                    full_name: full_name.into(),
                    default_branch: default_branch.into(),
                    head_sha: head_sha.into(),
                    issues: BTreeMap::new(),
                    files: HashMap::new(),
                    permissions: HashMap::new(),
                    pulls: BTreeMap::new(),
                },
            );
        });
    }

    /// Gives the repository a new id, as GitHub does to a repository deleted and made
    /// again under the same name.
    pub fn recreate_repo(&self, full_name: &str) {
        self.with(|w| {
            let id = w.next_id();
            let repo = w.repos.get_mut(&full_name.to_ascii_lowercase());
            repo.expect("the repository exists").id = id;
        });
    }

    pub fn add_installation(&self, id: i64, repos: &[&str]) {
        self.with(|w| {
            w.installations
                .insert(id, repos.iter().map(|r| r.to_ascii_lowercase()).collect());
        });
    }

    pub fn add_issue(
        &self,
        repo: &str,
        number: i64,
        title: &str,
        body: Option<&str>,
        labels: &[&str],
        author: FakeUser,
    ) {
        self.with(|w| {
            let repo = w.repos.get_mut(&repo.to_ascii_lowercase()).unwrap();
            repo.issues.insert(
                number,
                FakeIssue {
                    title: title.into(),
                    body: body.map(str::to_owned),
                    labels: labels.iter().map(|l| l.to_string()).collect(),
                    author,
                },
            );
        });
    }

    /// Replaces the issue's labels, as someone editing them on GitHub.
    pub fn set_labels(&self, repo: &str, number: i64, labels: &[&str]) {
        self.with(|w| {
            let issue = w
                .repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .issues
                .get_mut(&number)
                .unwrap();
            issue.labels = labels.iter().map(|l| l.to_string()).collect();
        });
    }

    /// Replaces the issue's body, as its author editing it.
    pub fn set_issue_body(&self, repo: &str, number: i64, body: &str) {
        self.with(|w| {
            let issue = w
                .repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .issues
                .get_mut(&number)
                .unwrap();
            issue.body = Some(body.to_owned());
        });
    }

    pub fn add_comment(&self, repo: &str, issue: i64, body: &str, author: FakeUser) -> i64 {
        self.add_comment_at(repo, issue, body, author, now())
    }

    /// A comment written at `created_at` (seconds since the epoch).
    pub fn add_comment_at(
        &self,
        repo: &str,
        issue: i64,
        body: &str,
        author: FakeUser,
        created_at: u64,
    ) -> i64 {
        self.with(|w| {
            let id = w.next_id();
            w.comments.insert(
                id,
                FakeComment {
                    id,
                    repo: repo.to_ascii_lowercase(),
                    issue,
                    body: body.into(),
                    author,
                    history: Vec::new(),
                    reactions: Vec::new(),
                    minimized: None,
                    created_at,
                },
            );
            id
        })
    }

    /// Gives the repository a bare git repository, served at its `clone_url`, with one
    /// commit holding `files` on the default branch; that commit becomes the branch's
    /// head. Returns its SHA.
    pub fn create_git_repo(&self, repo: &str, files: &[(&str, &str)]) -> String {
        let key = repo.to_ascii_lowercase();
        let (dir, branch) = self.with(|w| (w.git_dir(&key), w.repos[&key].default_branch.clone()));
        let sha = git_http::init_bare_repo(&dir, &branch, files);
        self.with(|w| w.repos.get_mut(&key).unwrap().head_sha = sha.clone());
        sha
    }

    /// The bare repository behind `repo`'s `clone_url`.
    pub fn git_dir(&self, repo: &str) -> PathBuf {
        self.with(|w| w.git_dir(&repo.to_ascii_lowercase()))
    }

    /// An open pull request from branch `head` of the fork `fork` (`owner/name`).
    pub fn add_fork_pull(&self, repo: &str, fork: &str, head: &str, base: &str) -> i64 {
        self.with(|w| {
            let pulls = &mut w.repos.get_mut(&repo.to_ascii_lowercase()).unwrap().pulls;
            let number = pulls.keys().max().map_or(1, |n| n + 1);
            pulls.insert(
                number,
                FakePull {
                    number,
                    head: head.to_owned(),
                    base: base.to_owned(),
                    title: "From a fork".to_owned(),
                    body: Some("fork body".to_owned()),
                    state: "open".into(),
                    draft: false,
                    head_repo: Some(fork.to_owned()),
                },
            );
            number
        })
    }

    /// A review of pull request `pull` by `author`, in `state` (REST spelling), with inline
    /// comments `(path, line, diff hunk, text)`. Returns the review's id and its comments'.
    pub fn add_review(
        &self,
        repo: &str,
        pull: i64,
        author: FakeUser,
        state: &str,
        body: Option<&str>,
        comments: &[(&str, i64, &str, &str)],
    ) -> (i64, Vec<i64>) {
        let repo = repo.to_ascii_lowercase();
        self.with(|w| {
            let id = w.next_id();
            w.reviews.insert(
                id,
                FakeReview {
                    id,
                    repo: repo.clone(),
                    pull,
                    state: state.to_owned(),
                    body: body.map(str::to_owned),
                    author: author.clone(),
                },
            );
            let ids = comments
                .iter()
                .map(|(path, line, hunk, text)| {
                    let comment = w.next_id();
                    w.review_comments.insert(
                        comment,
                        FakeReviewComment {
                            id: comment,
                            repo: repo.clone(),
                            pull,
                            review: Some(id),
                            path: (*path).to_owned(),
                            line: Some(*line),
                            diff_hunk: (*hunk).to_owned(),
                            body: (*text).to_owned(),
                            author: author.clone(),
                            in_reply_to: None,
                        },
                    );
                    comment
                })
                .collect();
            (id, ids)
        })
    }

    /// Every review comment (replies included) on pull request `pull`, oldest first.
    pub fn review_comments(&self, repo: &str, pull: i64) -> Vec<FakeReviewComment> {
        let repo = repo.to_ascii_lowercase();
        self.with(|w| {
            w.review_comments
                .values()
                .filter(|c| c.repo == repo && c.pull == pull)
                .cloned()
                .collect()
        })
    }

    /// Closes pull request `number`, merged or not.
    pub fn close_pull(&self, repo: &str, number: i64, merged: bool) {
        self.with(|w| {
            let pull = w
                .repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .pulls
                .get_mut(&number)
                .unwrap();
            pull.state = if merged { "merged" } else { "closed" }.into();
        });
    }

    pub fn ignore_head_filter(&self) {
        self.with(|w| w.ignore_head_filter = true);
    }

    pub fn pulls(&self, repo: &str) -> Vec<FakePull> {
        self.with(|w| {
            w.repos[&repo.to_ascii_lowercase()]
                .pulls
                .values()
                .cloned()
                .collect()
        })
    }

    pub fn check_runs(&self, repo: &str) -> Vec<FakeCheckRun> {
        let key = repo.to_ascii_lowercase();
        self.with(|w| {
            w.check_runs
                .values()
                .filter(|r| r.repo == key)
                .cloned()
                .collect()
        })
    }

    /// A check run another app made on `head_sha`, which planwright must leave alone.
    pub fn add_foreign_check_run(
        &self,
        repo: &str,
        head_sha: &str,
        name: &str,
        app_id: u64,
    ) -> i64 {
        self.with(|w| {
            let id = w.next_id();
            w.check_runs.insert(
                id,
                FakeCheckRun {
                    id,
                    repo: repo.to_ascii_lowercase(),
                    head_sha: head_sha.into(),
                    name: name.into(),
                    app_id,
                    status: "completed".into(),
                    conclusion: Some("success".into()),
                    title: Some("theirs".into()),
                    summary: Some("theirs".into()),
                    text: None,
                    details_url: None,
                    updates: 0,
                },
            );
            id
        })
    }

    /// A finished check suite of app `app_id` on `head_sha` whose runs `(name, output
    /// text, annotations as (path, line, message))` all failed. Returns the suite's id.
    pub fn add_failed_suite(
        &self,
        repo: &str,
        head_sha: &str,
        app_id: u64,
        runs: &[FailedRun<'_>],
    ) -> i64 {
        let repo = repo.to_ascii_lowercase();
        self.with(|w| {
            let suite = w.next_id();
            let mut ids = Vec::new();
            for (name, text, annotations) in runs {
                let id = w.next_id();
                w.check_runs.insert(
                    id,
                    FakeCheckRun {
                        id,
                        repo: repo.clone(),
                        head_sha: head_sha.into(),
                        name: (*name).into(),
                        app_id,
                        status: "completed".into(),
                        conclusion: Some("failure".into()),
                        title: Some(format!("{name} failed")),
                        summary: Some("Some tests failed.".into()),
                        text: Some((*text).into()),
                        details_url: Some(format!("https://ci.example.com/runs/{id}")),
                        updates: 0,
                    },
                );
                let found: Vec<Value> = annotations
                    .iter()
                    .map(|(path, line, message)| {
                        json!({
                            "path": path, "blob_href": "", "start_line": line, "end_line": line,
                            "start_column": null, "end_column": null,
                            "annotation_level": "failure", "title": "", "message": message,
                            "raw_details": null,
                        })
                    })
                    .collect();
                w.annotations.insert(id, found);
                ids.push(id);
            }
            w.check_suites.insert(
                suite,
                FakeCheckSuite {
                    id: suite,
                    repo: repo.clone(),
                    head_sha: head_sha.into(),
                    app_id,
                    conclusion: "failure".into(),
                    runs: ids,
                },
            );
            suite
        })
    }

    /// A commit status `context` in `state` on `sha`.
    pub fn add_status(&self, repo: &str, sha: &str, context: &str, state: &str, description: &str) {
        let repo = repo.to_ascii_lowercase();
        self.with(|w| {
            w.statuses.push(FakeStatus {
                repo,
                sha: sha.into(),
                context: context.into(),
                state: state.into(),
                description: Some(description.into()),
                target_url: Some(format!("https://ci.example.com/{context}")),
            })
        });
    }

    /// Installation `id` accepted only `permissions` and `events` (one made before the app
    /// asked for more).
    pub fn set_grant(&self, id: i64, permissions: &[(&str, &str)], events: &[&str]) {
        let permissions: serde_json::Map<String, Value> = permissions
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let events = events.iter().map(|e| (*e).to_owned()).collect();
        self.with(|w| w.grants.insert(id, (Value::Object(permissions), events)));
    }

    /// `permission` is GitHub's legacy field (admin/write/read/none), `role_name` the
    /// fine-grained role; GitHub reports both.
    pub fn set_permission(&self, repo: &str, login: &str, permission: &str, role_name: &str) {
        self.with(|w| {
            w.repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .permissions
                .insert(
                    login.to_ascii_lowercase(),
                    (permission.into(), role_name.into()),
                );
        });
    }

    pub fn put_file(&self, repo: &str, path: &str, content: &str) {
        self.with(|w| {
            w.repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .files
                .insert(path.into(), content.as_bytes().to_vec());
        });
    }

    /// The comments on one issue, oldest first.
    pub fn issue_comments(&self, repo: &str, issue: i64) -> Vec<FakeComment> {
        let repo = repo.to_ascii_lowercase();
        self.with(|w| {
            w.comments
                .values()
                .filter(|c| c.repo == repo && c.issue == issue)
                .cloned()
                .collect()
        })
    }

    pub fn comment(&self, id: i64) -> Option<FakeComment> {
        self.with(|w| w.comments.get(&id).cloned())
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.with(|w| w.log.all())
    }

    /// Recorded requests with this method whose path starts with `prefix`.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.with(|w| w.log.count(method, prefix))
    }

    /// Waits until `check` finds something in the fake's state, looking again after each
    /// request the fake answers.
    pub async fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let added = self.with(|w| w.log.subscribe());
        fake_http::wait_for(what, added, || check(self)).await
    }

    /// The manifests apps were registered from (through `/settings/apps/new`), with the
    /// organisation each was registered for.
    pub fn registered_manifests(&self) -> Vec<(Option<String>, Value)> {
        self.with(|w| w.registered_manifests.clone())
    }

    pub fn issued_tokens(&self) -> Vec<String> {
        self.with(|w| w.tokens.keys().cloned().collect())
    }

    /// The person the browser is signed in to GitHub as, who agrees to sign in to the App;
    /// `None`: whoever comes declines.
    pub fn sign_in_as(&self, person: Option<&FakeUser>) {
        self.with(|w| w.oauth.person = person.map(|p| (p.login.clone(), p.id)));
    }

    /// How many user tokens the App holds that GitHub still takes.
    pub fn user_tokens(&self) -> usize {
        self.with(|w| w.oauth.tokens.len())
    }

    /// Revokes every user token the App was given, as when people revoke it.
    pub fn revoke_user_tokens(&self) {
        self.with(|w| w.oauth.tokens.clear());
    }

    /// Forgets every issued installation token, as when GitHub revokes them.
    pub fn revoke_tokens(&self) {
        self.with(|w| w.tokens.clear());
    }

    /// From the next `method` request whose body contains `text` on, the installation has
    /// `remaining` of `limit` calls until `reset_in` from then, told in `x-ratelimit-*`
    /// headers; a spent window is refused with GitHub's 403.
    pub fn rate_limit_from(
        &self,
        method: &str,
        text: &str,
        limit: u64,
        remaining: u64,
        reset_in: std::time::Duration,
    ) {
        self.with(|w| w.rate_limits.arm(method, text, limit, remaining, reset_in));
    }

    /// The same for GraphQL's own window (`x-ratelimit-resource: graphql`), which GitHub
    /// keeps apart from the REST calls': the first GraphQL call on spends from it.
    pub fn graphql_rate_limit(&self, limit: u64, remaining: u64, reset_in: std::time::Duration) {
        self.with(|w| w.graphql_limits.arm("POST", "", limit, remaining, reset_in));
    }

    /// The next `n` requests, whatever they are, answer `status` with `headers` and a
    /// GitHub-shaped error body.
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.with(|w| w.latency = latency);
    }

    pub fn fail_next(&self, n: usize, status: u16, headers: &[(&str, &str)]) {
        self.with(|w| w.faults.next(n, status, headers));
    }

    /// The next `method` request whose body contains `text` fails with `status` and is not
    /// carried out (as when the process dies before its call gets through).
    pub fn refuse_next_body(&self, method: &str, text: &str, status: u16) {
        self.with(|w| w.faults.refused_body(method, text, status));
    }

    /// Drops every failure queued and not yet answered: GitHub is back.
    pub fn clear_faults(&self) {
        self.with(|w| w.faults = super::fake_http::Faults::default());
    }

    /// The next request with `method` whose path (after any `/api/v3`) starts with
    /// `prefix` is carried out, then answered `status` as if a proxy had lost the answer:
    /// what a retry must not do twice.
    pub fn perform_then_fail_on(&self, method: &str, prefix: &str, status: u16) {
        self.with(|w| w.faults.performed_on_prefix(method, prefix, status));
    }

    /// Revokes every token just before the next request with `method` whose path starts
    /// with `prefix`, so that request meets a token the client believes valid.
    pub fn revoke_tokens_before(&self, method: &str, prefix: &str) {
        self.with(|w| w.revoke_before = Some((method.to_owned(), prefix.to_owned(), false)));
    }

    /// As [`FakeGithub::revoke_tokens_before`], before every such request.
    pub fn revoke_tokens_before_each(&self, method: &str, prefix: &str) {
        self.with(|w| w.revoke_before = Some((method.to_owned(), prefix.to_owned(), true)));
    }

    /// The next GraphQL call answers 200 with this error, as GitHub reports failures; an
    /// empty `kind` sends the error without a type, as GitHub reports its own.
    pub fn graphql_error_next(&self, kind: &str, message: &str) {
        self.with(|w| {
            w.graphql_errors
                .push_back((kind.to_owned(), message.to_owned()))
        });
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// RFC 3339 in UTC, as GitHub writes timestamps.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": status.as_str(),
        })),
    )
        .into_response()
}

fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "Not Found")
}

#[derive(Deserialize)]
struct JwtClaims {
    iss: Value,
    iat: u64,
    exp: u64,
}

/// Checks an App JWT as GitHub does: signed by the app's key, `iss` the app id, expiring
/// within ten minutes; and, stricter than GitHub, issued at least a minute in the past,
/// as GitHub advises against clock drift.
fn valid_jwt(token: &str) -> bool {
    let Ok(key) = DecodingKey::from_rsa_pem(app_key().public_pem.as_bytes()) else {
        return false;
    };
    let mut validation = Validation::new(Algorithm::RS256);
    // `iss` is checked below: octocrab sends the app id as a number, which
    // jsonwebtoken's own issuer check only reads as a string.
    validation.set_required_spec_claims(&["exp", "iat"]);
    let Ok(data) = jsonwebtoken::decode::<JwtClaims>(token, &key, &validation) else {
        return false;
    };
    let claims = data.claims;
    let iss_ok = claims.iss == json!(APP_ID) || claims.iss == json!(APP_ID.to_string());
    let now = now();
    iss_ok && claims.iat + 60 <= now && claims.exp > now && claims.exp <= now + 600
}

fn credential(world: &GithubState, headers: &HeaderMap) -> Credential {
    let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Credential::None;
    };
    let Some(secret) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("token "))
    else {
        return Credential::Invalid(value.to_owned());
    };
    if world.tokens.contains_key(secret) {
        Credential::Token(secret.to_owned())
    } else if valid_jwt(secret) {
        Credential::Jwt
    } else {
        Credential::Invalid(secret.to_owned())
    }
}

fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

async fn handle(
    State(world): State<Arc<Mutex<GithubState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some((key, path_info)) = git_route(uri.path()) {
        {
            let mut w = world.lock().unwrap();
            // GitHub's paths take names in any case.
            if let Some((m, prefix, always)) = &w.revoke_before
                && m == method.as_str()
                && uri
                    .path()
                    .to_ascii_lowercase()
                    .starts_with(&prefix.to_ascii_lowercase())
            {
                if !always {
                    w.revoke_before = None;
                }
                w.tokens.clear();
            }
        }
        return serve_git(world, key, path_info, &method, &uri, &headers, body).await;
    }
    let latency = world.lock().unwrap().latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    // GitHub Enterprise Server serves the same API under `/api/v3`, GraphQL at `/api/graphql`.
    let path = match uri.path() {
        "/api/graphql" => "/graphql",
        p => p.strip_prefix("/api/v3").unwrap_or(p),
    };
    let (credential, response) = {
        let mut w = world.lock().unwrap();
        if let Some((m, prefix, always)) = &w.revoke_before
            && m == method.as_str()
            && path.starts_with(prefix.as_str())
        {
            if !always {
                w.revoke_before = None;
            }
            w.tokens.clear();
        }
        let credential = credential(&w, &headers);
        let response = answer(&mut w, &method, path, &uri, &credential, &body);
        (credential, response)
    };
    let response = fake_http::conditional(&method, &headers, response).await;
    let mut w = world.lock().unwrap();
    let status = response.status();
    let mut response = response;
    if status == StatusCode::NOT_MODIFIED
        && matches!(credential, Credential::Token(_))
        && let Some(window) = limits(&mut w, path).refund()
    {
        // GitHub does not count a 304 against the rate limit.
        window.add_headers(response.headers_mut(), "x-ratelimit-", "used");
    }
    w.log
        .record(&method, &uri, credential, &body, status.as_u16());
    response
}

/// The rate-limit window a call on `path` spends from.
fn limits<'a>(w: &'a mut GithubState, path: &str) -> &'a mut RateLimits {
    if path == "/graphql" {
        &mut w.graphql_limits
    } else {
        &mut w.rate_limits
    }
}

/// `/{owner}/{repo}.git/...` → the repository's key and the path below the git root.
fn git_route(path: &str) -> Option<(String, String)> {
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let owner = parts.next()?;
    let repo = parts.next()?.strip_suffix(".git")?;
    let rest = parts.next().unwrap_or("");
    if matches!(owner, "repos" | "app" | "api" | "graphql") || repo.is_empty() {
        return None;
    }
    let key = format!("{}/{}", decode_segment(owner), decode_segment(repo)).to_ascii_lowercase();
    let path_info = format!("/{key}.git/{rest}");
    Some((key, path_info))
}

/// Git over smart HTTP, as GitHub takes it from an App: username `x-access-token`, an
/// installation token that may see the repository as password. Failures queued with
/// `fail_next` are for the API and do not apply here.
async fn serve_git(
    world: Arc<Mutex<GithubState>>,
    key: String,
    path_info: String,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let root = world.lock().unwrap().git_root.clone();
    let seen = Arc::new(Mutex::new(Credential::None));
    let auth = {
        let world = Arc::clone(&world);
        let seen = Arc::clone(&seen);
        let key = key.clone();
        move |user: &str, password: &str| {
            let w = world.lock().unwrap();
            *seen.lock().unwrap() = if w.tokens.contains_key(password) {
                Credential::Token(password.to_owned())
            } else {
                Credential::Invalid(password.to_owned())
            };
            user == "x-access-token" && w.token_sees(password, &key)
        }
    };
    let response = GitHttp::new(root, auth)
        .serve(&path_info, method, uri.query().unwrap_or(""), headers, body)
        .await;
    let credential = seen.lock().unwrap().clone();
    let status = response.status().as_u16();
    // Pack data is not text worth keeping: git requests are recorded without a body.
    world
        .lock()
        .unwrap()
        .log
        .record(method, uri, credential, b"", status);
    response
}

fn answer(
    w: &mut GithubState,
    method: &Method,
    path: &str,
    uri: &Uri,
    credential: &Credential,
    body: &[u8],
) -> Response {
    if let Some(failure) = w.faults.take(method, path, body) {
        if failure.performed {
            // Carried out, and the answer lost on the way back.
            let _ = answer_now(w, method, path, uri, credential, body);
        }
        return failure_response(failure);
    }
    // An installation's own window; the app's JWT calls have theirs, not kept here.
    let metered = match credential {
        Credential::Token(_) => limits(w, path).meter(method, path, body),
        _ => None,
    };
    let mut response = match &metered {
        Some(Metered::Spent(_)) => error(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.",
        ),
        _ => answer_now(w, method, path, uri, credential, body),
    };
    if let Some(Metered::Answered(window) | Metered::Spent(window)) = metered {
        let headers = response.headers_mut();
        window.add_headers(headers, "x-ratelimit-", "used");
        let resource = if path == "/graphql" {
            "graphql"
        } else {
            "core"
        };
        headers.insert("x-ratelimit-resource", resource.parse().unwrap());
    }
    response
}

/// A failure as GitHub words it: a JSON error, rate limits with their own message.
fn failure_response(failure: Fault) -> Response {
    let status = StatusCode::from_u16(failure.status).unwrap();
    let message = if failure.status == 403 || failure.status == 429 {
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    } else {
        status.canonical_reason().unwrap_or("error")
    };
    let mut response = error(status, message);
    failure.add_headers(response.headers_mut());
    response
}

fn answer_now(
    w: &mut GithubState,
    method: &Method,
    path: &str,
    uri: &Uri,
    credential: &Credential,
    body: &[u8],
) -> Response {
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(decode_segment)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let json_body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);

    if let Some(response) = user_authorization(w, method, &segs, uri, body, credential) {
        return response;
    }
    match (method.clone(), segs.as_slice()) {
        (Method::POST, ["settings", "apps", "new"]) => {
            return register_from_manifest(w, None, uri, body);
        }
        (Method::POST, ["organizations", org, "settings", "apps", "new"]) => {
            return register_from_manifest(w, Some(org.to_string()), uri, body);
        }
        (Method::POST, ["app-manifests", code, "conversions"]) => {
            return convert_manifest(w, code);
        }
        _ => {}
    }

    if segs.first() == Some(&"app") {
        if *credential != Credential::Jwt {
            return error(
                StatusCode::UNAUTHORIZED,
                "A JSON web token could not be decoded",
            );
        }
        return match (method.clone(), segs.as_slice()) {
            (Method::GET, ["app"]) => axum::Json(json!({
                "id": APP_ID,
                "slug": APP_SLUG,
                "node_id": "A_kwHOAAAAAA",
                "name": "planwright (test)",
                "owner": FakeUser::new("planwright-org", 1).json(),
                "description": "",
                "external_url": "https://example.com",
                "html_url": format!("https://github.com/apps/{APP_SLUG}"),
                "created_at": rfc3339(0),
                "updated_at": rfc3339(0),
                "permissions": {"issues": "write", "contents": "write", "metadata": "read"},
                "events": ["issues", "issue_comment"],
            }))
            .into_response(),
            (Method::GET, ["app", "installations"]) => {
                let manifest: Value =
                    serde_norway::from_str(planwright::onboarding::MANIFEST_YAML).unwrap();
                let mut ids: Vec<&i64> = w.installations.keys().collect();
                ids.sort();
                let items: Vec<Value> = ids
                    .into_iter()
                    .map(|id| {
                        // An installation accepted everything the app asks for, unless told.
                        let (permissions, events) =
                            w.grants.get(id).cloned().unwrap_or_else(|| {
                                let events = manifest["default_events"]
                                    .as_array()
                                    .unwrap()
                                    .iter()
                                    .map(|e| e.as_str().unwrap().to_owned())
                                    .collect();
                                (manifest["default_permissions"].clone(), events)
                            });
                        json!({
                            "id": id,
                            "account": FakeUser::new(&format!("org-{id}"), *id).json(),
                            "app_id": APP_ID,
                            "app_slug": APP_SLUG,
                            "target_type": "Organization",
                            "permissions": permissions,
                            "events": events,
                            "repository_selection": "selected",
                        })
                    })
                    .collect();
                axum::Json(items).into_response()
            }
            (Method::POST, ["app", "installations", id, "access_tokens"]) => {
                let Ok(id) = id.parse::<i64>() else {
                    return not_found();
                };
                let Some(visible) = w.installations.get(&id) else {
                    return not_found();
                };
                // `repositories` limits the token to some of the installation's repositories.
                let repositories: Option<Vec<String>> = json_body
                    .get("repositories")
                    .and_then(Value::as_array)
                    .map(|names| {
                        names
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_ascii_lowercase)
                            .collect()
                    });
                if let Some(names) = &repositories
                    && !names.iter().all(|n| {
                        visible
                            .iter()
                            .any(|r| r.rsplit('/').next() == Some(n.as_str()))
                    })
                {
                    return error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "There is at least one repository that does not exist or is not accessible to the parent installation.",
                    );
                }
                let token = format!("ghs_{}", uuid::Uuid::new_v4().simple());
                let expires_at = now() + 3600;
                w.tokens.insert(
                    token.clone(),
                    IssuedToken {
                        installation: id,
                        expires_at,
                        repositories,
                    },
                );
                (
                    StatusCode::CREATED,
                    axum::Json(json!({
                        "token": token,
                        "expires_at": rfc3339(expires_at),
                        "permissions": {"issues": "write", "contents": "write"},
                        "repository_selection": "selected",
                    })),
                )
                    .into_response()
            }
            _ => not_found(),
        };
    }

    let token = match credential {
        Credential::Token(t) => match w.tokens.get(t) {
            Some(issued) if issued.expires_at > now() => t.clone(),
            _ => return error(StatusCode::UNAUTHORIZED, "Bad credentials"),
        },
        _ => return error(StatusCode::UNAUTHORIZED, "Bad credentials"),
    };
    if let (Method::POST, ["graphql"]) = (method.clone(), segs.as_slice()) {
        return graphql(w, &token, &json_body);
    }
    let ["repos", owner, name, rest @ ..] = segs.as_slice() else {
        return not_found();
    };
    let key = format!("{owner}/{name}").to_ascii_lowercase();
    if !w.token_sees(&token, &key) || !w.repos.contains_key(&key) {
        return not_found();
    }
    let bot = FakeUser {
        login: format!("{APP_SLUG}[bot]"),
        id: 9_000_000,
        bot: true,
    };
    let query: HashMap<String, String> =
        serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap_or_default();

    match (method.clone(), rest) {
        (Method::GET, []) => {
            let repo = &w.repos[&key];
            let (owner_login, repo_name) = repo.full_name.split_once('/').unwrap();
            axum::Json(json!({
                "id": repo.id,
                "node_id": format!("R_{}", repo.id),
                "name": repo_name,
                "full_name": repo.full_name,
                "owner": FakeUser::new(owner_login, 2).json(),
                "private": true,
                "html_url": format!("https://github.com/{}", repo.full_name),
                "clone_url": format!("{}/{}.git", w.url, repo.full_name),
                "url": format!("https://api.github.com/repos/{}", repo.full_name),
                "default_branch": repo.default_branch,
            }))
            .into_response()
        }
        (Method::GET, ["branches", branch @ ..]) => {
            let repo = &w.repos[&key];
            if branch.join("/") != repo.default_branch {
                return error(StatusCode::NOT_FOUND, "Branch not found");
            }
            axum::Json(json!({
                "name": repo.default_branch,
                "commit": {
                    "sha": repo.head_sha,
                    "url": format!("https://api.github.com/repos/{}/commits/{}", repo.full_name, repo.head_sha),
                },
                "protected": false,
            }))
            .into_response()
        }
        (Method::GET, ["issues", "comments", id]) => match comment_of(w, &key, id) {
            Some(c) => axum::Json(comment_json(c)).into_response(),
            None => not_found(),
        },
        // octocrab's typed edit sends POST; GitHub accepts POST on PATCH routes.
        (Method::PATCH | Method::POST, ["issues", "comments", id]) => {
            let Some(new_body) = json_body.get("body").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            let Some(id) = comment_of(w, &key, id).map(|c| c.id) else {
                return not_found();
            };
            let comment = w.comments.get_mut(&id).unwrap();
            let old = std::mem::replace(&mut comment.body, new_body.to_owned());
            comment.history.push(old);
            axum::Json(comment_json(comment)).into_response()
        }
        (Method::POST, ["issues", "comments", id, "reactions"]) => {
            let Some(content) = json_body.get("content").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            const CONTENTS: [&str; 8] = [
                "+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes",
            ];
            if !CONTENTS.contains(&content) {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            }
            let Some(id) = comment_of(w, &key, id).map(|c| c.id) else {
                return not_found();
            };
            let comment = w.comments.get_mut(&id).unwrap();
            let pair = (content.to_owned(), bot.login.clone());
            let status = if comment.reactions.contains(&pair) {
                StatusCode::OK
            } else {
                comment.reactions.push(pair);
                StatusCode::CREATED
            };
            let reaction_id = w.next_id();
            (
                status,
                axum::Json(json!({
                    "id": reaction_id,
                    "node_id": format!("REA_{reaction_id}"),
                    "user": bot.json(),
                    "content": content,
                    "created_at": rfc3339(now()),
                })),
            )
                .into_response()
        }
        (Method::GET, ["issues", number]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            let comments = w
                .comments
                .values()
                .filter(|c| c.repo == key && c.issue == number)
                .count();
            let repo = &w.repos[&key];
            let Some(issue) = repo.issues.get(&number) else {
                return not_found();
            };
            axum::Json(json!({
                "id": repo.id * 10_000 + number,
                "node_id": format!("I_{number}"),
                "number": number,
                "title": issue.title,
                "body": issue.body,
                "user": issue.author.json(),
                "labels": issue.labels.iter().enumerate().map(|(i, l)| json!({
                    "id": i + 1, "node_id": format!("LA_{i}"), "name": l,
                    "color": "ededed", "default": false, "description": null,
                })).collect::<Vec<_>>(),
                "state": "open",
                "locked": false,
                "comments": comments,
                "author_association": "CONTRIBUTOR",
                "created_at": rfc3339(0),
                "updated_at": rfc3339(0),
                "html_url": format!("https://github.com/{}/issues/{number}", repo.full_name),
                "url": format!("https://api.github.com/repos/{}/issues/{number}", repo.full_name),
            }))
            .into_response()
        }
        (Method::GET, ["issues", number, "comments"]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            if !has_thread(&w.repos[&key], number) {
                return not_found();
            }
            let per_page: usize = query
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30)
                .min(100);
            let page: usize = query
                .get("page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1)
                .max(1);
            let items: Vec<Value> = w
                .comments
                .values()
                .filter(|c| c.repo == key && c.issue == number)
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(comment_json)
                .collect();
            axum::Json(items).into_response()
        }
        (Method::POST, ["issues", number, "comments"]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            if !has_thread(&w.repos[&key], number) {
                return not_found();
            }
            let Some(text) = json_body.get("body").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            let id = w.next_id();
            let comment = FakeComment {
                id,
                repo: key.clone(),
                issue: number,
                body: text.to_owned(),
                author: bot,
                history: Vec::new(),
                reactions: Vec::new(),
                minimized: None,
                created_at: now(),
            };
            let answer = comment_json(&comment);
            w.comments.insert(id, comment);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["pulls"]) => {
            let repo = &w.repos[&key];
            let state = query.get("state").map_or("open", String::as_str);
            let head = query.get("head").map(|h| match h.split_once(':') {
                Some((owner, branch)) => (owner.to_ascii_lowercase(), branch.to_owned()),
                None => (String::new(), h.clone()),
            });
            let owner = key.split('/').next().unwrap_or_default();
            let items: Vec<Value> = repo
                .pulls
                .values()
                .filter(|p| state == "all" || p.state.replace("merged", "closed") == state)
                // GitHub wants `user:ref`; a bare ref matches nothing.
                .filter(|p| {
                    let head_owner = p
                        .head_repo
                        .as_deref()
                        .map_or(owner, |f| f.split('/').next().unwrap_or_default())
                        .to_ascii_lowercase();
                    w.ignore_head_filter
                        || head
                            .as_ref()
                            .is_none_or(|(o, b)| *o == head_owner && *b == p.head)
                })
                .filter(|p| query.get("base").is_none_or(|b| *b == p.base))
                .map(|p| pull_json(w, &key, p))
                .collect();
            axum::Json(items).into_response()
        }
        (Method::POST, ["pulls"]) => {
            let field = |name: &str| json_body.get(name).and_then(Value::as_str);
            let (Some(title), Some(head), Some(base)) =
                (field("title"), field("head"), field("base"))
            else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            };
            let owner = key.split('/').next().unwrap_or_default().to_owned();
            let head = match head.split_once(':') {
                Some((o, branch)) if o.eq_ignore_ascii_case(&owner) => branch.to_owned(),
                Some(_) => {
                    return validation_failed(
                        json!({"resource": "PullRequest", "field": "head", "code": "invalid"}),
                    );
                }
                None => head.to_owned(),
            };
            let dir = w.git_dir(&key);
            if dir.exists() {
                for (field, branch) in [("head", &head), ("base", &base.to_owned())] {
                    if branch_sha(&dir, branch).is_none() {
                        return validation_failed(
                            json!({"resource": "PullRequest", "field": field, "code": "invalid"}),
                        );
                    }
                }
            }
            let repo = &w.repos[&key];
            if repo
                .pulls
                .values()
                .any(|p| p.state == "open" && p.head == head && p.head_repo.is_none())
            {
                return validation_failed(json!({
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": format!("A pull request already exists for {owner}:{head}."),
                }));
            }
            let number = repo
                .issues
                .keys()
                .chain(repo.pulls.keys())
                .max()
                .map_or(1, |n| n + 1);
            let pull = FakePull {
                number,
                head,
                base: base.to_owned(),
                title: title.to_owned(),
                body: field("body").map(str::to_owned),
                state: "open".into(),
                draft: json_body.get("draft").and_then(Value::as_bool) == Some(true),
                head_repo: None,
            };
            let answer = pull_json(w, &key, &pull);
            w.repos.get_mut(&key).unwrap().pulls.insert(number, pull);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["pulls", number, "reviews", id]) => match review_of(w, &key, number, id) {
            Some(r) => axum::Json(review_json(w, r)).into_response(),
            None => not_found(),
        },
        (Method::GET, ["pulls", number, "reviews", id, "comments"]) => {
            let Some(review) = review_of(w, &key, number, id) else {
                return not_found();
            };
            let (per_page, page) = paging(&query);
            let items: Vec<Value> = w
                .review_comments
                .values()
                .filter(|c| c.review == Some(review.id))
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(|c| review_comment_json(w, c))
                .collect();
            axum::Json(items).into_response()
        }
        (Method::POST, ["pulls", number, "comments"]) => {
            let Some(pull) = number
                .parse::<i64>()
                .ok()
                .filter(|n| w.repos[&key].pulls.contains_key(n))
            else {
                return not_found();
            };
            let Some(text) = json_body.get("body").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            // This fake takes only replies; a new comment needs a commit, path and line.
            let Some(parent) = json_body.get("in_reply_to").and_then(Value::as_i64) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            let Some(parent) = w
                .review_comments
                .get(&parent)
                .filter(|c| c.repo == key && c.pull == pull)
                .cloned()
            else {
                return not_found();
            };
            if parent.in_reply_to.is_some() {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Replies to replies are not supported.",
                );
            }
            let id = w.next_id();
            let reply = FakeReviewComment {
                id,
                review: None,
                body: text.to_owned(),
                author: bot,
                in_reply_to: Some(parent.id),
                ..parent
            };
            let answer = review_comment_json(w, &reply);
            w.review_comments.insert(id, reply);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["pulls", number]) => {
            let Some(pull) = number
                .parse::<i64>()
                .ok()
                .and_then(|n| w.repos[&key].pulls.get(&n))
            else {
                return not_found();
            };
            axum::Json(pull_json(w, &key, pull)).into_response()
        }
        // Clients that cannot send PATCH use POST; GitHub takes both.
        (Method::PATCH | Method::POST, ["pulls", number]) => {
            let Some(number) = number
                .parse::<i64>()
                .ok()
                .filter(|n| w.repos[&key].pulls.contains_key(n))
            else {
                return not_found();
            };
            let pull = w
                .repos
                .get_mut(&key)
                .unwrap()
                .pulls
                .get_mut(&number)
                .unwrap();
            for (name, slot) in [("title", &mut pull.title), ("base", &mut pull.base)] {
                if let Some(v) = json_body.get(name).and_then(Value::as_str) {
                    *slot = v.to_owned();
                }
            }
            if let Some(v) = json_body.get("body") {
                pull.body = v.as_str().map(str::to_owned);
            }
            if let Some(v) = json_body.get("state").and_then(Value::as_str) {
                pull.state = v.to_owned();
            }
            let pull = pull.clone();
            axum::Json(pull_json(w, &key, &pull)).into_response()
        }
        (Method::GET, ["check-suites", id]) => {
            match id.parse::<i64>().ok().and_then(|id| w.check_suites.get(&id)).filter(|c| c.repo == key) {
                Some(suite) => axum::Json(json!({
                    "id": suite.id,
                    "node_id": format!("CS_{}", suite.id),
                    "head_branch": "planwright",
                    "head_sha": suite.head_sha,
                    "status": "completed",
                    "conclusion": suite.conclusion,
                    "app": {"id": suite.app_id, "slug": format!("app-{}", suite.app_id), "name": "an app"},
                    "pull_requests": [],
                    "latest_check_runs_count": suite.runs.len(),
                }))
                .into_response(),
                None => not_found(),
            }
        }
        (Method::GET, ["check-suites", id, "check-runs"]) => {
            let Some(suite) = id
                .parse::<i64>()
                .ok()
                .and_then(|id| w.check_suites.get(&id))
                .filter(|c| c.repo == key)
            else {
                return not_found();
            };
            let runs: Vec<Value> = suite
                .runs
                .iter()
                .filter_map(|r| w.check_runs.get(r))
                .map(check_run_json)
                .collect();
            axum::Json(json!({ "total_count": runs.len(), "check_runs": runs })).into_response()
        }
        (Method::GET, ["check-runs", id, "annotations"]) => {
            match id
                .parse::<i64>()
                .ok()
                .filter(|id| w.check_runs.get(id).is_some_and(|r| r.repo == key))
            {
                Some(id) => {
                    axum::Json(w.annotations.get(&id).cloned().unwrap_or_default()).into_response()
                }
                None => not_found(),
            }
        }
        (Method::GET, ["commits", sha, "status"]) => {
            // The newest status of each context, as GitHub combines them.
            let mut latest: Vec<&FakeStatus> = Vec::new();
            for st in w
                .statuses
                .iter()
                .rev()
                .filter(|st| st.repo == key && st.sha == *sha)
            {
                if !latest.iter().any(|l| l.context == st.context) {
                    latest.push(st);
                }
            }
            let statuses: Vec<Value> = latest
                .iter()
                .map(|st| {
                    json!({
                        "context": st.context, "state": st.state, "description": st.description,
                        "target_url": st.target_url, "id": 1, "node_id": "SC_1",
                        "created_at": rfc3339(now()), "updated_at": rfc3339(now()),
                    })
                })
                .collect();
            let state = if latest.iter().any(|st| st.state != "success") {
                "failure"
            } else {
                "success"
            };
            axum::Json(json!({
                "state": state, "sha": sha, "total_count": statuses.len(), "statuses": statuses,
            }))
            .into_response()
        }
        (Method::GET, ["commits", sha, "check-runs"]) => {
            let runs: Vec<Value> = w
                .check_runs
                .values()
                .filter(|r| r.repo == key && r.head_sha == *sha)
                .filter(|r| query.get("check_name").is_none_or(|n| *n == r.name))
                .filter(|r| query.get("status").is_none_or(|s| *s == r.status))
                .filter(|r| {
                    query
                        .get("app_id")
                        .is_none_or(|a| *a == r.app_id.to_string())
                })
                .map(check_run_json)
                .collect();
            axum::Json(json!({ "total_count": runs.len(), "check_runs": runs })).into_response()
        }
        (Method::POST, ["check-runs"]) => {
            let (Some(name), Some(head_sha)) = (
                json_body.get("name").and_then(Value::as_str),
                json_body.get("head_sha").and_then(Value::as_str),
            ) else {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid request.\n\n\"name\", \"head_sha\" weren't supplied.",
                );
            };
            let id = w.next_id();
            let mut run = FakeCheckRun {
                id,
                repo: key.clone(),
                head_sha: head_sha.to_owned(),
                name: name.to_owned(),
                app_id: APP_ID,
                status: "queued".into(),
                conclusion: None,
                title: None,
                summary: None,
                text: None,
                details_url: None,
                updates: 0,
            };
            if let Err(message) = apply_check_run(&mut run, &json_body) {
                return error(StatusCode::UNPROCESSABLE_ENTITY, &message);
            }
            let answer = check_run_json(&run);
            w.check_runs.insert(id, run);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::PATCH, ["check-runs", id]) => {
            let Some(run) = id
                .parse::<i64>()
                .ok()
                .and_then(|id| w.check_runs.get(&id))
                .filter(|r| r.repo == key)
            else {
                return not_found();
            };
            // Only the app that made a check run may change it.
            if run.app_id != APP_ID {
                return error(
                    StatusCode::FORBIDDEN,
                    "Invalid app_id `4242` - check run can only be modified by the GitHub App that created it.",
                );
            }
            let mut run = run.clone();
            if let Err(message) = apply_check_run(&mut run, &json_body) {
                return error(StatusCode::UNPROCESSABLE_ENTITY, &message);
            }
            run.updates += 1;
            let answer = check_run_json(&run);
            w.check_runs.insert(run.id, run);
            axum::Json(answer).into_response()
        }
        (Method::GET, ["collaborators", login, "permission"]) => {
            let repo = &w.repos[&key];
            let Some((permission, role)) = repo.permissions.get(&login.to_ascii_lowercase()) else {
                return not_found();
            };
            axum::Json(json!({
                "permission": permission,
                "role_name": role,
                "user": FakeUser::new(login, 77).json(),
            }))
            .into_response()
        }
        (Method::GET, ["contents", path @ ..]) => {
            let repo = &w.repos[&key];
            let path = path.join("/");
            if let Some(r) = query.get("ref")
                && *r != repo.default_branch
            {
                return not_found();
            }
            let Some(bytes) = repo.files.get(&path) else {
                return not_found();
            };
            // GitHub wraps the base64 at 60 characters a line.
            let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
            let wrapped: String = encoded
                .as_bytes()
                .chunks(60)
                .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
                .collect();
            let name = path.rsplit('/').next().unwrap_or(&path);
            axum::Json(json!({
                "type": "file",
                "encoding": "base64",
                "size": bytes.len(),
                "name": name,
                "path": path,
                "content": wrapped,
                "sha": "3d21ec53a331a6f037a91c368710b99387d012c1",
                "url": format!("https://api.github.com/repos/{}/contents/{path}", repo.full_name),
                "html_url": format!("https://github.com/{}/blob/{}/{path}", repo.full_name, repo.default_branch),
                "git_url": null,
                "download_url": null,
                "_links": {},
            }))
            .into_response()
        }
        _ => not_found(),
    }
}

/// GitHub's "new app from a manifest" page, as the browser's form post reaches it. GitHub
/// shows a confirmation first; the fake confirms at once and sends the browser back to the
/// manifest's `redirect_url` with a one-time code and the `state` it was given.
fn register_from_manifest(
    w: &mut GithubState,
    org: Option<String>,
    uri: &Uri,
    body: &[u8],
) -> Response {
    #[derive(Deserialize)]
    struct Form {
        manifest: String,
    }
    let invalid = |why: &str| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid GitHub App configuration: {why}"),
        )
            .into_response()
    };
    let Ok(form) = serde_urlencoded::from_bytes::<Form>(body) else {
        return invalid("the request has no manifest field");
    };
    let Ok(manifest) = serde_json::from_str::<Value>(&form.manifest) else {
        return invalid("the manifest is not JSON");
    };
    if manifest["url"].as_str().is_none_or(str::is_empty) {
        return invalid("url can't be blank");
    }
    if let Some(hook) = manifest.get("hook_attributes")
        && hook["url"].as_str().is_none_or(str::is_empty)
    {
        return invalid("hook_attributes.url can't be blank");
    }
    let Some(redirect) = manifest["redirect_url"].as_str().map(str::to_owned) else {
        return invalid("redirect_url can't be blank");
    };
    let permissions = &manifest["default_permissions"];
    for event in manifest["default_events"].as_array().into_iter().flatten() {
        let event = event.as_str().unwrap_or_default();
        // Which permission each event needs; the two installation events are delivered to
        // every app and GitHub refuses them here.
        let needs: &[&str] = match event {
            "issues" => &["issues"],
            "issue_comment" => &["issues", "pull_requests"],
            "pull_request" | "pull_request_review" | "pull_request_review_comment" => {
                &["pull_requests"]
            }
            "check_run" | "check_suite" => &["checks"],
            "status" => &["statuses"],
            "push" => &["contents"],
            _ => return invalid(&format!("Default events unsupported: {event}")),
        };
        if !needs.iter().any(|p| permissions.get(*p).is_some()) {
            return invalid(&format!(
                "Default events are not supported by permissions: {event}"
            ));
        }
    }
    let state = uri
        .query()
        .and_then(|q| serde_urlencoded::from_str::<HashMap<String, String>>(q).ok())
        .and_then(|q| q.get("state").cloned())
        .unwrap_or_default();
    let code = format!("{:032x}", rand_u128());
    w.manifest_codes
        .insert(code.clone(), (org.clone(), manifest.clone()));
    w.registered_manifests.push((org, manifest));
    let location = format!(
        "{redirect}?{}",
        serde_urlencoded::to_string([("code", code.as_str()), ("state", state.as_str())]).unwrap()
    );
    (StatusCode::FOUND, [("location", location)]).into_response()
}

/// `POST /app-manifests/{code}/conversions`: a code works once, without authentication.
fn convert_manifest(w: &mut GithubState, code: &str) -> Response {
    let Some((org, manifest)) = w.manifest_codes.remove(code) else {
        return not_found();
    };
    let owner = match &org {
        Some(org) => {
            let mut user = FakeUser::new(org, 77).json();
            user["type"] = json!("Organization");
            user
        }
        None => FakeUser::new("octocat", 1).json(),
    };
    let name = manifest["name"].as_str().unwrap_or(APP_SLUG).to_owned();
    (
        StatusCode::CREATED,
        axum::Json(json!({
            "id": APP_ID,
            "slug": APP_SLUG,
            "node_id": "MDxOkludGVncmF0aW9uMQ==",
            "owner": owner,
            "name": name,
            "description": manifest["description"],
            "external_url": manifest["url"],
            "html_url": format!("{}/apps/{APP_SLUG}", w.url),
            "created_at": rfc3339(now()),
            "updated_at": rfc3339(now()),
            "permissions": manifest["default_permissions"],
            "events": manifest["default_events"],
            "client_id": "Iv1.8a61f9b3a7aba766",
            "client_secret": format!("{:040x}", rand_u128()),
            "webhook_secret": format!("{:040x}", rand_u128()),
            "pem": app_key().private_pem,
        })),
    )
        .into_response()
}

fn rand_u128() -> u128 {
    rand::random()
}

/// The App's user authorization: the consent page, the code exchange, and what a user
/// token reads (the user, the installations and repositories they can see through the
/// App). `None` for every other request.
fn user_authorization(
    w: &mut GithubState,
    method: &Method,
    segs: &[&str],
    uri: &Uri,
    body: &[u8],
    credential: &Credential,
) -> Option<Response> {
    match (method.clone(), segs) {
        (Method::GET, ["login", "oauth", "authorize"]) => {
            let query = fake_http::fields(uri.query().unwrap_or(""));
            if query.get("client_id").map(String::as_str) != Some(OAUTH_CLIENT_ID) {
                return Some((StatusCode::NOT_FOUND, "Not Found").into_response());
            }
            let location = w.oauth.authorize(
                query.get("redirect_uri").map_or("", String::as_str),
                query.get("state").map_or("", String::as_str),
                query.get("code_challenge").map(String::as_str),
            );
            return Some((StatusCode::FOUND, [("location", location)]).into_response());
        }
        (Method::POST, ["login", "oauth", "access_token"]) => {
            let form = fake_http::fields(&String::from_utf8_lossy(body));
            let field = |k: &str| form.get(k).map_or("", String::as_str);
            let refused = |error: &str, description: &str| {
                // GitHub answers a refused exchange with 200.
                axum::Json(json!({
                    "error": error,
                    "error_description": description,
                    "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors",
                }))
                .into_response()
            };
            if field("client_id") != OAUTH_CLIENT_ID
                || field("client_secret") != OAUTH_CLIENT_SECRET
            {
                return Some(refused(
                    "incorrect_client_credentials",
                    "The client_id and/or client_secret passed are incorrect.",
                ));
            }
            let verifier = form.get("code_verifier").map(String::as_str);
            return Some(
                match w
                    .oauth
                    .exchange(field("code"), field("redirect_uri"), verifier, "ghu_")
                {
                    Ok(token) => axum::Json(json!({
                        "access_token": token,
                        "expires_in": 28800,
                        "refresh_token": format!("ghr_{:032x}", rand_u128()),
                        "refresh_token_expires_in": 15_811_200,
                        "token_type": "bearer",
                        "scope": "",
                    }))
                    .into_response(),
                    Err(fake_http::Refusal::BadCode) => refused(
                        "bad_verification_code",
                        "The code passed is incorrect or expired.",
                    ),
                    Err(fake_http::Refusal::BadVerifier) => refused(
                        "invalid_grant",
                        "The code_verifier does not match the code_challenge supplied in the authorization request for PKCE.",
                    ),
                },
            );
        }
        (Method::DELETE, ["applications", client, "token"]) => {
            // Authenticated as the App's client, with HTTP Basic.
            use base64::Engine as _;
            let basic = match credential {
                Credential::Invalid(value) => value
                    .strip_prefix("Basic ")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok()),
                _ => None,
            };
            let expected = format!("{OAUTH_CLIENT_ID}:{OAUTH_CLIENT_SECRET}");
            if *client != OAUTH_CLIENT_ID || basic.as_deref() != Some(expected.as_bytes()) {
                return Some(error(StatusCode::NOT_FOUND, "Not Found"));
            }
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let token = body["access_token"].as_str().unwrap_or_default();
            return Some(if w.oauth.tokens.remove(token).is_some() {
                StatusCode::NO_CONTENT.into_response()
            } else {
                error(StatusCode::NOT_FOUND, "Not Found")
            });
        }
        _ => {}
    }
    if segs.first() != Some(&"user") {
        return None;
    }
    let Credential::Invalid(secret) = credential else {
        return None;
    };
    let Some((login, id)) = w.oauth.tokens.get(secret).cloned() else {
        return Some(error(StatusCode::UNAUTHORIZED, "Bad credentials"));
    };
    let key_login = login.to_ascii_lowercase();
    // A repository is the person's when the fake gives them any permission on it.
    let sees = |w: &GithubState, repo: &str| {
        w.repos
            .get(repo)
            .and_then(|r| r.permissions.get(&key_login))
            .is_some_and(|(permission, _)| permission != "none")
    };
    let page = |query: Option<&str>| -> usize {
        fake_http::fields(query.unwrap_or(""))
            .get("page")
            .and_then(|p| p.parse().ok())
            .unwrap_or(1)
    };
    Some(match (method.clone(), segs) {
        (Method::GET, ["user"]) => axum::Json(json!({
            "login": login,
            "id": id,
            "node_id": format!("U_kgDO{id:08}"),
            "type": "User",
            "site_admin": false,
            "name": null,
        }))
        .into_response(),
        (Method::GET, ["user", "installations"]) => {
            let mut ids: Vec<i64> = w
                .installations
                .iter()
                .filter(|(_, repos)| repos.iter().any(|r| sees(w, r)))
                .map(|(id, _)| *id)
                .collect();
            ids.sort_unstable();
            let listed: Vec<Value> = if page(uri.query()) == 1 {
                ids.iter()
                    .map(|id| json!({"id": id, "app_id": APP_ID, "target_type": "Organization"}))
                    .collect()
            } else {
                Vec::new()
            };
            axum::Json(json!({"total_count": ids.len(), "installations": listed})).into_response()
        }
        (Method::GET, ["user", "installations", installation, "repositories"]) => {
            let Some(repos) = installation
                .parse::<i64>()
                .ok()
                .and_then(|i| w.installations.get(&i))
            else {
                return Some(error(StatusCode::NOT_FOUND, "Not Found"));
            };
            let visible: Vec<Value> = repos
                .iter()
                .filter(|r| sees(w, r))
                .filter_map(|r| w.repos.get(r))
                .map(|r| json!({"id": r.id, "full_name": r.full_name, "private": true}))
                .collect();
            let listed = if page(uri.query()) == 1 {
                visible.clone()
            } else {
                Vec::new()
            };
            axum::Json(json!({"total_count": visible.len(), "repositories": listed}))
                .into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "Not Found"),
    })
}

fn validation_failed(detail: Value) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(json!({
            "message": "Validation Failed",
            "errors": [detail],
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "422",
        })),
    )
        .into_response()
}

/// The commit `branch` points at in the bare repository `dir`.
fn branch_sha(dir: &std::path::Path, branch: &str) -> Option<String> {
    let output = git_http::git_command(dir)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("refs/heads/{branch}^{{commit}}"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn pull_json(w: &GithubState, key: &str, p: &FakePull) -> Value {
    let repo = &w.repos[key];
    let owner = repo.full_name.split('/').next().unwrap_or_default();
    let dir = w.git_dir(key);
    let sha = |branch: &str| branch_sha(&dir, branch).unwrap_or_else(|| repo.head_sha.clone());
    let end = |branch: &str, fork: Option<&str>| {
        let full_name = fork.unwrap_or(&repo.full_name);
        let owner = fork.map_or(owner, |f| f.split('/').next().unwrap_or_default());
        let id = if fork.is_some() {
            repo.id + 1_000
        } else {
            repo.id
        };
        json!({
            "label": format!("{owner}:{branch}"),
            "ref": branch,
            "sha": sha(branch),
            "user": FakeUser::new(owner, 2).json(),
            "repo": { "id": id, "full_name": full_name, "name": full_name.split('/').nth(1) },
        })
    };
    json!({
        "id": repo.id * 100_000 + p.number,
        "node_id": format!("PR_{}_{}", repo.id, p.number),
        "number": p.number,
        // A merged pull request is closed, with `merged` set.
        "state": if p.state == "merged" { "closed" } else { p.state.as_str() },
        "locked": false,
        "title": p.title,
        "body": p.body,
        "user": FakeUser { login: format!("{APP_SLUG}[bot]"), id: 9_000_000, bot: true }.json(),
        "head": end(&p.head, p.head_repo.as_deref()),
        "base": end(&p.base, None),
        "draft": p.draft,
        "merged": p.state == "merged",
        "html_url": format!("https://github.com/{}/pull/{}", repo.full_name, p.number),
        "url": format!("https://api.github.com/repos/{}/pulls/{}", repo.full_name, p.number),
        "created_at": rfc3339(0),
        "updated_at": rfc3339(0),
    })
}

/// Applies a create or update request's fields to `run`, refusing what GitHub refuses.
/// Applies a create or update request's fields to `run`; `Err` is GitHub's 422 message.
fn apply_check_run(run: &mut FakeCheckRun, body: &Value) -> Result<(), String> {
    const STATUSES: [&str; 6] = [
        "queued",
        "in_progress",
        "completed",
        "waiting",
        "requested",
        "pending",
    ];
    const CONCLUSIONS: [&str; 8] = [
        "action_required",
        "cancelled",
        "failure",
        "neutral",
        "success",
        "skipped",
        "stale",
        "timed_out",
    ];
    let text = |name: &str| body.get(name).and_then(Value::as_str);
    if let Some(status) = text("status") {
        if !STATUSES.contains(&status) {
            return Err(String::from(
                "Invalid request.\n\nstatus is not a member of the allowed values.",
            ));
        }
        run.status = status.to_owned();
        if status != "completed" {
            run.conclusion = None;
        }
    }
    if let Some(conclusion) = text("conclusion") {
        if !CONCLUSIONS.contains(&conclusion) {
            return Err(String::from(
                "Invalid request.\n\nconclusion is not a member of the allowed values.",
            ));
        }
        // A conclusion completes the run.
        run.status = "completed".into();
        run.conclusion = Some(conclusion.to_owned());
    }
    if run.status == "completed" && run.conclusion.is_none() {
        return Err(String::from(
            "Invalid request.\n\nconclusion is required when status is completed.",
        ));
    }
    if let Some(output) = body.get("output") {
        let field = |name: &str| output.get(name).and_then(Value::as_str);
        let (Some(title), Some(summary)) = (field("title"), field("summary")) else {
            return Err(String::from(
                "Invalid request.\n\n\"title\", \"summary\" weren't supplied.",
            ));
        };
        for value in [Some(title), Some(summary), field("text")]
            .into_iter()
            .flatten()
        {
            let length = value.chars().count();
            if length > CHECK_TEXT_LIMIT {
                return Err(format!(
                    "Invalid request.\n\nOnly {CHECK_TEXT_LIMIT} characters are allowed; {length} were supplied."
                ));
            }
        }
        run.title = Some(title.to_owned());
        run.summary = Some(summary.to_owned());
        if let Some(text) = field("text") {
            run.text = Some(text.to_owned());
        }
    }
    if let Some(url) = text("details_url") {
        run.details_url = Some(url.to_owned());
    }
    Ok(())
}

fn check_run_json(r: &FakeCheckRun) -> Value {
    let completed = r.status == "completed";
    json!({
        "id": r.id,
        "node_id": format!("CR_{}", r.id),
        "head_sha": r.head_sha,
        "external_id": "",
        "url": format!("https://api.github.com/repos/{}/check-runs/{}", r.repo, r.id),
        "html_url": format!("https://github.com/{}/runs/{}", r.repo, r.id),
        "details_url": r.details_url,
        "status": r.status,
        "conclusion": r.conclusion,
        "started_at": rfc3339(now()),
        "completed_at": if completed { json!(rfc3339(now())) } else { Value::Null },
        "output": {
            "title": r.title,
            "summary": r.summary,
            "text": r.text,
            "annotations_count": 0,
            "annotations_url": format!("https://api.github.com/repos/{}/check-runs/{}/annotations", r.repo, r.id),
        },
        "name": r.name,
        "check_suite": { "id": 5 },
        "app": {
            "id": r.app_id,
            "slug": if r.app_id == APP_ID { APP_SLUG.to_owned() } else { format!("app-{}", r.app_id) },
            "node_id": format!("A_{}", r.app_id),
            "name": "an app",
        },
        "pull_requests": [],
    })
}

/// GraphQL's `minimizeComment` mutation, the only GraphQL planwright uses. Failures come
/// back as GitHub sends them: 200 with an `errors` array.
fn graphql(w: &mut GithubState, token: &str, body: &Value) -> Response {
    // An empty kind leaves `type` out, as GitHub does for its own failures (timeouts).
    let graphql_error = |kind: &str, message: String| {
        let mut error = json!({ "path": ["minimizeComment"], "locations": [{"line": 1, "column": 2}], "message": message });
        if !kind.is_empty() {
            error["type"] = json!(kind);
        }
        axum::Json(json!({ "data": null, "errors": [error] })).into_response()
    };
    if let Some((kind, message)) = w.graphql_errors.pop_front() {
        return graphql_error(&kind, message);
    }
    let query = body
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if query.contains("defaultBranchRef") {
        return graphql_repository(w, token, body);
    }
    if query.contains("pullRequest(number") {
        return graphql_pull_id(w, token, body);
    }
    for (mutation, draft) in [
        ("markPullRequestReadyForReview", false),
        ("convertPullRequestToDraft", true),
    ] {
        if query.contains(mutation) {
            return graphql_set_draft(w, token, body, mutation, draft);
        }
    }
    if !query.contains("minimizeComment") {
        return graphql_error("UNSUPPORTED", "the fake does not know this query".into());
    }
    // `name: value` in the mutation's input, a `$variable` looked up in `variables`.
    let argument = |name: &str| -> Option<String> {
        let start = query.find(&format!("{name}:"))? + name.len() + 1;
        let raw: String = query[start..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '"' | '-' | '='))
            .collect();
        match raw.strip_prefix('$') {
            Some(var) => body["variables"][var].as_str().map(str::to_owned),
            None => Some(raw.trim_matches('"').to_owned()),
        }
    };
    let classifier = argument("classifier").unwrap_or_default();
    const CLASSIFIERS: [&str; 6] = [
        "SPAM",
        "ABUSE",
        "OFF_TOPIC",
        "OUTDATED",
        "DUPLICATE",
        "RESOLVED",
    ];
    if !CLASSIFIERS.contains(&classifier.as_str()) {
        return graphql_error(
            "INVALID",
            format!("Argument 'classifier' has an invalid value ({classifier})."),
        );
    }
    let subject = argument("subjectId").unwrap_or_default();
    let found = w
        .comments
        .values()
        .find(|c| format!("IC_{}", c.id) == subject && w.token_sees(token, &c.repo))
        .map(|c| c.id);
    let Some(id) = found else {
        return graphql_error(
            "NOT_FOUND",
            format!("Could not resolve to a node with the global id of '{subject}'"),
        );
    };
    w.comments.get_mut(&id).unwrap().minimized = Some(classifier.clone());
    axum::Json(json!({
        "data": { "minimizeComment": { "minimizedComment": {
            "isMinimized": true,
            "minimizedReason": classifier.to_ascii_lowercase(),
        } } },
    }))
    .into_response()
}

/// `repository(owner:, name:) { databaseId diskUsage defaultBranchRef { name target { oid } } }`, answered
/// as GitHub does: `null` with a NOT_FOUND error for a repository the token cannot see.
fn graphql_repository(w: &GithubState, token: &str, body: &Value) -> Response {
    let variable = |name: &str| body["variables"][name].as_str().unwrap_or_default();
    let key = format!("{}/{}", variable("owner"), variable("name"));
    match w.repos.get(&key).filter(|_| w.token_sees(token, &key)) {
        Some(repo) => axum::Json(json!({
            "data": { "repository": {
                "databaseId": repo.id,
                "diskUsage": git_http::repo_size(&w.git_dir(&key)) / 1024,
                "defaultBranchRef": {
                    "name": repo.default_branch,
                    "target": { "oid": repo.head_sha },
                },
            } },
        }))
        .into_response(),
        None => axum::Json(json!({
            "data": { "repository": null },
            "errors": [{
                "type": "NOT_FOUND",
                "path": ["repository"],
                "locations": [{ "line": 1, "column": 47 }],
                "message": format!("Could not resolve to a Repository with the name '{key}'."),
            }],
        }))
        .into_response(),
    }
}

fn graphql_not_found(path: &str, message: String) -> Response {
    axum::Json(json!({
        "data": { path: null },
        "errors": [{
            "type": "NOT_FOUND",
            "path": [path],
            "locations": [{ "line": 1, "column": 2 }],
            "message": message,
        }],
    }))
    .into_response()
}

/// `repository(owner:, name:) { pullRequest(number:) { id } }`.
fn graphql_pull_id(w: &GithubState, token: &str, body: &Value) -> Response {
    let variables = &body["variables"];
    let key = format!(
        "{}/{}",
        variables["owner"].as_str().unwrap_or_default(),
        variables["name"].as_str().unwrap_or_default()
    )
    .to_ascii_lowercase();
    let number = variables["number"].as_i64().unwrap_or_default();
    match w
        .repos
        .get(&key)
        .filter(|_| w.token_sees(token, &key))
        .and_then(|repo| repo.pulls.get(&number).map(|_| repo.id))
    {
        Some(id) => axum::Json(json!({
            "data": { "repository": { "pullRequest": { "id": format!("PR_{id}_{number}") } } },
        }))
        .into_response(),
        None => graphql_not_found(
            "repository",
            format!("Could not resolve to a PullRequest with the number of {number}."),
        ),
    }
}

/// `markPullRequestReadyForReview` / `convertPullRequestToDraft` by node id.
fn graphql_set_draft(
    w: &mut GithubState,
    token: &str,
    body: &Value,
    mutation: &str,
    draft: bool,
) -> Response {
    let id = body["variables"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let found = w.repos.iter().find_map(|(key, repo)| {
        let number = id
            .strip_prefix(&format!("PR_{}_", repo.id))?
            .parse::<i64>()
            .ok()?;
        (repo.pulls.contains_key(&number) && w.token_sees(token, key))
            .then(|| (key.clone(), number))
    });
    let Some((key, number)) = found else {
        return graphql_not_found(
            mutation,
            format!("Could not resolve to a node with the global id of '{id}'"),
        );
    };
    let pull = w
        .repos
        .get_mut(&key)
        .unwrap()
        .pulls
        .get_mut(&number)
        .unwrap();
    pull.draft = draft;
    axum::Json(json!({
        "data": { mutation: { "pullRequest": { "isDraft": draft } } },
    }))
    .into_response()
}

fn has_thread(repo: &FakeRepo, number: i64) -> bool {
    // Every pull request is an issue too, with the issue's conversation.
    repo.issues.contains_key(&number) || repo.pulls.contains_key(&number)
}

fn paging(query: &HashMap<String, String>) -> (usize, usize) {
    let per_page = query
        .get("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30usize)
        .clamp(1, 100);
    let page = query
        .get("page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize)
        .max(1);
    (per_page, page)
}

fn review_of<'w>(w: &'w GithubState, repo: &str, pull: &str, id: &str) -> Option<&'w FakeReview> {
    let (pull, id) = (pull.parse::<i64>().ok()?, id.parse::<i64>().ok()?);
    w.reviews
        .get(&id)
        .filter(|r| r.repo == repo && r.pull == pull)
}

fn review_json(w: &GithubState, r: &FakeReview) -> Value {
    let full_name = &w.repos[&r.repo].full_name;
    json!({
        "id": r.id,
        "node_id": format!("PRR_{}", r.id),
        "user": r.author.json(),
        "body": r.body,
        "state": r.state,
        "html_url": format!("https://github.com/{full_name}/pull/{}#pullrequestreview-{}", r.pull, r.id),
        "pull_request_url": format!("https://api.github.com/repos/{full_name}/pulls/{}", r.pull),
        "submitted_at": rfc3339(now()),
        "commit_id": "0000000000000000000000000000000000000000",
        "author_association": "MEMBER",
    })
}

fn review_comment_json(w: &GithubState, c: &FakeReviewComment) -> Value {
    let full_name = &w.repos[&c.repo].full_name;
    json!({
        "id": c.id,
        "node_id": format!("PRRC_{}", c.id),
        "pull_request_review_id": c.review,
        "diff_hunk": c.diff_hunk,
        "path": c.path,
        "position": 1,
        "original_position": 1,
        "commit_id": "0000000000000000000000000000000000000000",
        "original_commit_id": "0000000000000000000000000000000000000000",
        "in_reply_to_id": c.in_reply_to,
        "user": c.author.json(),
        "body": c.body,
        "created_at": rfc3339(now()),
        "updated_at": rfc3339(now()),
        "html_url": format!("https://github.com/{full_name}/pull/{}#discussion_r{}", c.pull, c.id),
        "pull_request_url": format!("https://api.github.com/repos/{full_name}/pulls/{}", c.pull),
        "author_association": "MEMBER",
        "start_line": null,
        "original_start_line": null,
        "start_side": null,
        "line": c.line,
        "original_line": c.line,
        "side": "RIGHT",
    })
}

fn comment_of<'w>(w: &'w GithubState, repo: &str, id: &str) -> Option<&'w FakeComment> {
    let id = id.parse::<i64>().ok()?;
    w.comments.get(&id).filter(|c| c.repo == repo)
}

fn comment_json(c: &FakeComment) -> Value {
    json!({
        "id": c.id,
        "node_id": format!("IC_{}", c.id),
        "url": format!("https://api.github.com/repos/{}/issues/comments/{}", c.repo, c.id),
        "html_url": format!("https://github.com/{}/issues/{}#issuecomment-{}", c.repo, c.issue, c.id),
        "issue_url": format!("https://api.github.com/repos/{}/issues/{}", c.repo, c.issue),
        "body": c.body,
        "user": c.author.json(),
        "created_at": rfc3339(c.created_at),
        "updated_at": rfc3339(c.created_at),
        "author_association": "NONE",
    })
}
