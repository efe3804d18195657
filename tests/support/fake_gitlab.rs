//! A stateful fake of GitLab's REST v4 API on a loopback port: users, projects addressed
//! by id or URL-encoded path, issues, notes (system notes and edit history included),
//! award emoji, members with access levels, files and branches, merge requests and commit
//! statuses (with GitLab's state machine), answered with GitLab's JSON shapes and
//! pagination headers, and the `PRIVATE-TOKEN` checked. Every request is recorded, and the
//! next N requests can be made to fail on purpose, before or after doing their work.
//! Git over smart HTTP is served at each project's `http_url_to_repo`, taking the token
//! as GitLab does for git: Basic auth with user `oauth2`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use planwright::config::GitlabSettings;
use secrecy::SecretString;
use serde_json::{Value, json};

use super::fake_forge::{now, rfc3339};
use super::fake_http::{self, Faults, Metered, Oauth, RateLimits, RequestLog, unix_now};
use super::git_http::{self, GitHttp};

/// The token the fake accepts; shaped like a real personal access token.
pub const TOKEN: &str = "glpat-fAkEtOkEn0123456789";
/// The OAuth application planwright signs people in with, as GitLab shows it.
pub const OAUTH_CLIENT_ID: &str =
    "a8f0c61b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a";
pub const OAUTH_CLIENT_SECRET: &str =
    "gloas-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";
/// The user behind `TOKEN`: planwright itself.
pub const BOT_USERNAME: &str = "planwright-bot";
pub const BOT_ID: i64 = 4000;

/// A recorded request; its credential is the `PRIVATE-TOKEN` header, if any, and for git
/// the Basic auth password.
pub type Recorded = fake_http::Recorded<Option<String>>;

#[derive(Debug, Clone)]
pub struct FakeUser {
    pub username: String,
    pub id: i64,
}

impl FakeUser {
    pub fn new(username: &str, id: i64) -> Self {
        FakeUser {
            username: username.into(),
            id,
        }
    }

    /// GitLab's `UserBasic`, as embedded in issues, notes and awards.
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "username": self.username,
            "name": self.username,
            "state": "active",
            "locked": false,
            "avatar_url": format!("https://secure.gravatar.com/avatar/{}?s=80&d=identicon", self.id),
            "web_url": format!("https://gitlab.example.com/{}", self.username),
        })
    }
}

#[derive(Debug, Clone)]
pub struct FakeNote {
    pub id: i64,
    pub project: String,
    pub issue: i64,
    pub body: String,
    pub author: FakeUser,
    pub system: bool,
    /// Earlier bodies, oldest first.
    pub history: Vec<String>,
    /// `(emoji name, username)` pairs.
    pub awards: Vec<(String, String)>,
    /// Seconds since the epoch.
    pub created_at: u64,
}

/// A note on a merge request: in a discussion of its own, or a reply in one; a note on a
/// diff line carries its position.
#[derive(Debug, Clone)]
pub struct FakeMrNote {
    pub id: i64,
    pub project: String,
    pub merge_request: i64,
    pub discussion: String,
    pub body: String,
    pub author: FakeUser,
    /// `(new_path, new_line)` of a note on the diff.
    pub position: Option<(String, i64)>,
    pub resolved: bool,
}

/// A CI pipeline on a commit, with its jobs.
#[derive(Debug, Clone)]
pub struct FakePipeline {
    pub id: i64,
    pub project: String,
    pub sha: String,
    pub status: String,
    pub jobs: Vec<FakeJob>,
}

#[derive(Debug, Clone)]
pub struct FakeJob {
    pub id: i64,
    pub name: String,
    pub status: String,
    pub allow_failure: bool,
    pub trace: String,
}

struct FakeIssue {
    id: i64,
    title: String,
    description: Option<String>,
    labels: Vec<String>,
    author: FakeUser,
    /// GitLab's record of who added and removed which label, oldest first.
    label_events: Vec<FakeLabelEvent>,
}

struct FakeLabelEvent {
    id: i64,
    user: FakeUser,
    /// Seconds since the epoch.
    created_at: u64,
    label: String,
    label_id: i64,
    /// `add` or `remove`.
    action: &'static str,
}

struct FakeMember {
    access_level: i64,
    state: String,
    membership_state: String,
}

#[derive(Debug, Clone)]
pub struct FakeMergeRequest {
    pub id: i64,
    pub iid: i64,
    pub title: String,
    pub description: String,
    pub source_branch: String,
    pub target_branch: String,
    /// `opened`, `closed`, `merged` or `locked`.
    pub state: String,
    /// Another project's id when the branch lives in a fork.
    pub source_project_id: i64,
    /// Earlier descriptions, oldest first.
    pub history: Vec<String>,
}

/// One commit status: GitLab's `GenericCommitStatus`, a job in an external pipeline.
#[derive(Debug, Clone)]
pub struct FakeStatus {
    pub id: i64,
    pub sha: String,
    pub name: String,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled` or `skipped`.
    pub state: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
}

struct FakeProject {
    id: i64,
    path_with_namespace: String,
    default_branch: Option<String>,
    /// Where git clones from; by default beside the API, as GitLab derives both from its
    /// external URL.
    http_url_to_repo: Option<String>,
    merge_requests: BTreeMap<i64, FakeMergeRequest>,
    next_mr_iid: i64,
    /// Every status ever posted, oldest first.
    statuses: Vec<FakeStatus>,
    /// branch → head commit
    branches: HashMap<String, String>,
    issues: BTreeMap<i64, FakeIssue>,
    files: HashMap<String, Vec<u8>>,
    /// user id → membership (direct or inherited: `members/all` shows both)
    members: HashMap<i64, FakeMember>,
}

#[derive(Default)]
struct GitlabState {
    /// The fake's own address, for URLs GitLab builds from its external URL.
    base_url: String,
    users: Vec<FakeUser>,
    projects: HashMap<String, FakeProject>,
    /// Sign-in through the OAuth application.
    oauth: Oauth,
    notes: BTreeMap<i64, FakeNote>,
    mr_notes: BTreeMap<i64, FakeMrNote>,
    pipelines: BTreeMap<i64, FakePipeline>,
    next_id: i64,
    log: RequestLog<Option<String>>,
    faults: Faults,
    rate_limits: RateLimits,
    /// Answer lists with a `Link` header only, as behind a proxy that drops `x-*` headers.
    link_only: bool,
    /// Holds the bare repositories served over git smart HTTP (`<path>.git`).
    git_root: PathBuf,
    /// The token may read the repositories but not push, as one without
    /// `write_repository` or held by a reporter.
    git_read_only: bool,
}

impl GitlabState {
    fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn project_key(&self, id: &str) -> Option<String> {
        match id.parse::<i64>() {
            Ok(n) => self
                .projects
                .iter()
                .find(|(_, p)| p.id == n)
                .map(|(k, _)| k.clone()),
            Err(_) => Some(id.to_ascii_lowercase()).filter(|k| self.projects.contains_key(k)),
        }
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeGitlab {
    pub url: String,
    world: Arc<Mutex<GitlabState>>,
    task: tokio::task::JoinHandle<()>,
    _git_root: tempfile::TempDir,
}

impl Drop for FakeGitlab {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeGitlab {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let git_root = tempfile::tempdir().unwrap();
        let world = Arc::new(Mutex::new(GitlabState {
            base_url: url.clone(),
            next_id: 100,
            users: vec![FakeUser::new(BOT_USERNAME, BOT_ID)],
            git_root: git_root.path().to_owned(),
            ..GitlabState::default()
        }));
        let app = Router::new()
            .fallback(handle)
            // Git pushes run to megabytes, beyond axum's default 2 MB limit.
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(Arc::clone(&world));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeGitlab {
            url,
            world,
            task,
            _git_root: git_root,
        }
    }

    /// Settings that point planwright's GitLab client at this fake.
    pub fn settings(&self) -> GitlabSettings {
        GitlabSettings {
            url: Some(self.url.clone()),
            token: Some(SecretString::from(TOKEN.to_owned())),
            webhook_secrets: Vec::new(),
            project_secrets: Vec::new(),
            rate_limit_wait: planwright::forge::RetryPolicy::default().max_rate_limit_wait,
            client_id: None,
            client_secret: None,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut GitlabState) -> T) -> T {
        f(&mut self.world.lock().unwrap())
    }

    /// The person the browser is signed in to GitLab as, who authorizes the OAuth
    /// application; `None`: whoever comes denies it.
    pub fn sign_in_as(&self, person: Option<&FakeUser>) {
        self.with(|w| w.oauth.person = person.map(|p| (p.username.clone(), p.id)));
    }

    /// How many tokens of the OAuth application GitLab still takes.
    pub fn user_tokens(&self) -> usize {
        self.with(|w| w.oauth.tokens.len())
    }

    /// Revokes every token the OAuth application was given.
    pub fn revoke_user_tokens(&self) {
        self.with(|w| w.oauth.tokens.clear());
    }

    pub fn add_user(&self, username: &str, id: i64) -> FakeUser {
        let user = FakeUser::new(username, id);
        self.with(|w| w.users.push(user.clone()));
        user
    }

    /// A project whose default branch `default_branch` points at `head_sha`.
    pub fn add_project(&self, path: &str, default_branch: &str, head_sha: &str) {
        self.with(|w| {
            let id = w.next_id();
            w.projects.insert(
                path.to_ascii_lowercase(),
                FakeProject {
                    id,
                    path_with_namespace: path.into(),
                    default_branch: Some(default_branch.into()),
                    http_url_to_repo: None,
                    merge_requests: BTreeMap::new(),
                    next_mr_iid: 1,
                    statuses: Vec::new(),
                    branches: HashMap::from([(default_branch.to_owned(), head_sha.to_owned())]),
                    issues: BTreeMap::new(),
                    files: HashMap::new(),
                    members: HashMap::new(),
                },
            );
        });
    }

    pub fn add_issue(
        &self,
        project: &str,
        iid: i64,
        title: &str,
        description: Option<&str>,
        labels: &[&str],
        author: FakeUser,
    ) {
        self.with(|w| {
            let id = w.next_id();
            let project = w.projects.get_mut(&project.to_ascii_lowercase()).unwrap();
            project.issues.insert(
                iid,
                FakeIssue {
                    id,
                    title: title.into(),
                    description: description.map(str::to_owned),
                    labels: labels.iter().map(|l| l.to_string()).collect(),
                    author,
                    label_events: Vec::new(),
                },
            );
        });
    }

    /// Replaces the issue's labels, as `by` editing them on GitLab, which records a label
    /// event for each label added or removed.
    pub fn set_labels(&self, project: &str, iid: i64, labels: &[&str], by: &FakeUser) {
        self.with(|w| {
            let key = project.to_ascii_lowercase();
            let old = w.projects[&key].issues[&iid].labels.clone();
            let new: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
            let changes: Vec<(String, &'static str)> = new
                .iter()
                .filter(|l| !old.contains(l))
                .map(|l| (l.clone(), "add"))
                .chain(
                    old.iter()
                        .filter(|l| !new.contains(l))
                        .map(|l| (l.clone(), "remove")),
                )
                .collect();
            let mut events = Vec::new();
            for (label, action) in changes {
                let id = w.next_id();
                // GitLab's labels have ids of their own, the same for every event.
                let label_id = 1000 + label.bytes().map(i64::from).sum::<i64>();
                events.push(FakeLabelEvent {
                    id,
                    user: by.clone(),
                    created_at: now(),
                    label,
                    label_id,
                    action,
                });
            }
            let issue = w
                .projects
                .get_mut(&key)
                .unwrap()
                .issues
                .get_mut(&iid)
                .unwrap();
            issue.labels = new;
            issue.label_events.extend(events);
        });
    }

    pub fn add_note(&self, project: &str, issue: i64, body: &str, author: FakeUser) -> i64 {
        self.insert_note(project, issue, body, author, false)
    }

    /// A note GitLab writes itself ("added ~bug label").
    pub fn add_system_note(&self, project: &str, issue: i64, body: &str, author: FakeUser) -> i64 {
        self.insert_note(project, issue, body, author, true)
    }

    fn insert_note(
        &self,
        project: &str,
        issue: i64,
        body: &str,
        author: FakeUser,
        system: bool,
    ) -> i64 {
        self.with(|w| {
            let id = w.next_id();
            w.notes.insert(
                id,
                FakeNote {
                    id,
                    project: project.to_ascii_lowercase(),
                    issue,
                    body: body.into(),
                    author,
                    system,
                    history: Vec::new(),
                    awards: Vec::new(),
                    created_at: now(),
                },
            );
            id
        })
    }

    /// A membership with GitLab's numeric access level (10 guest … 50 owner).
    pub fn add_member(&self, project: &str, user: &FakeUser, access_level: i64) {
        self.set_member(project, user, access_level, "active", "active");
    }

    pub fn set_member(
        &self,
        project: &str,
        user: &FakeUser,
        access_level: i64,
        state: &str,
        membership_state: &str,
    ) {
        self.with(|w| {
            w.projects
                .get_mut(&project.to_ascii_lowercase())
                .unwrap()
                .members
                .insert(
                    user.id,
                    FakeMember {
                        access_level,
                        state: state.into(),
                        membership_state: membership_state.into(),
                    },
                );
        });
    }

    /// A file on the default branch.
    pub fn put_file(&self, project: &str, path: &str, content: &str) {
        self.with(|w| {
            w.projects
                .get_mut(&project.to_ascii_lowercase())
                .unwrap()
                .files
                .insert(path.into(), content.as_bytes().to_vec());
        });
    }

    /// Creates or moves a branch.
    pub fn set_branch(&self, project: &str, branch: &str, sha: &str) {
        self.with(|w| {
            project_mut(w, project)
                .branches
                .insert(branch.into(), sha.into());
        });
    }

    /// Gives the project a bare git repository, served at its default `http_url_to_repo`,
    /// with one commit holding `files` on the default branch, which then points at it.
    /// Returns its SHA. Branches pushed over git show up in the API.
    pub fn create_git_repo(&self, project: &str, files: &[(&str, &str)]) -> String {
        let key = project.to_ascii_lowercase();
        let (dir, branch) = self.with(|w| {
            let branch = w.projects[&key].default_branch.clone().unwrap();
            (git_dir(w, &key), branch)
        });
        let sha = git_http::init_bare_repo(&dir, &branch, files);
        self.set_branch(project, &branch, &sha);
        sha
    }

    /// The bare repository behind `project`'s `http_url_to_repo`.
    pub fn git_dir(&self, project: &str) -> PathBuf {
        self.with(|w| git_dir(w, &project.to_ascii_lowercase()))
    }

    /// From now on the token may fetch but not push: GitLab answers 403.
    pub fn make_git_read_only(&self) {
        self.with(|w| w.git_read_only = true);
    }

    /// Points the project's `http_url_to_repo` somewhere else (a git server, another host).
    pub fn set_http_url_to_repo(&self, project: &str, url: &str) {
        self.with(|w| project_mut(w, project).http_url_to_repo = Some(url.into()));
    }

    /// A merge request made by someone else; `state` is `opened`, `closed` or `merged`.
    pub fn add_merge_request(
        &self,
        project: &str,
        source_branch: &str,
        target_branch: &str,
        title: &str,
        state: &str,
    ) -> i64 {
        self.with(|w| {
            let own = project_mut(w, project).id;
            insert_merge_request(
                w,
                &project.to_ascii_lowercase(),
                own,
                source_branch,
                target_branch,
                title,
                "",
                state,
            )
        })
    }

    /// An open merge request from a fork whose branch has the same name as one of ours.
    pub fn add_fork_merge_request(
        &self,
        project: &str,
        source_branch: &str,
        target_branch: &str,
        title: &str,
    ) -> i64 {
        self.with(|w| {
            let fork = w.next_id();
            insert_merge_request(
                w,
                &project.to_ascii_lowercase(),
                fork,
                source_branch,
                target_branch,
                title,
                "",
                "opened",
            )
        })
    }

    pub fn merge_request(&self, project: &str, iid: i64) -> Option<FakeMergeRequest> {
        self.with(|w| project_mut(w, project).merge_requests.get(&iid).cloned())
    }

    pub fn merge_requests(&self, project: &str) -> Vec<FakeMergeRequest> {
        self.with(|w| {
            project_mut(w, project)
                .merge_requests
                .values()
                .cloned()
                .collect()
        })
    }

    /// Every status posted on `sha` under `name`, oldest first.
    pub fn commit_statuses(&self, project: &str, sha: &str, name: &str) -> Vec<FakeStatus> {
        self.with(|w| {
            project_mut(w, project)
                .statuses
                .iter()
                .filter(|s| s.sha == sha && s.name == name)
                .cloned()
                .collect()
        })
    }

    /// The notes on one issue, oldest first.
    /// A note on merge request `iid`, in a discussion of its own; `position`:
    /// `(path, line)` of the diff line it is on. Returns the note's id.
    pub fn add_mr_note(
        &self,
        project: &str,
        iid: i64,
        body: &str,
        author: FakeUser,
        position: Option<(&str, i64)>,
    ) -> i64 {
        let project = project.to_ascii_lowercase();
        self.with(|w| {
            let id = w.next_id();
            let note = FakeMrNote {
                id,
                project,
                merge_request: iid,
                discussion: format!("{:040x}", id),
                body: body.into(),
                author,
                position: position.map(|(path, line)| (path.to_owned(), line)),
                resolved: false,
            };
            w.mr_notes.insert(id, note);
            id
        })
    }

    /// A pipeline on `sha` in `status`, with jobs `(name, status, allowed to fail, log)`.
    /// Returns its id.
    pub fn add_pipeline(
        &self,
        project: &str,
        sha: &str,
        status: &str,
        jobs: &[(&str, &str, bool, &str)],
    ) -> i64 {
        let project = project.to_ascii_lowercase();
        self.with(|w| {
            let id = w.next_id();
            let jobs = jobs
                .iter()
                .map(|(name, status, allow_failure, trace)| FakeJob {
                    id: w.next_id(),
                    name: (*name).into(),
                    status: (*status).into(),
                    allow_failure: *allow_failure,
                    trace: (*trace).into(),
                })
                .collect();
            w.pipelines.insert(
                id,
                FakePipeline {
                    id,
                    project,
                    sha: sha.into(),
                    status: status.into(),
                    jobs,
                },
            );
            id
        })
    }

    /// Marks the discussion of note `id` resolved.
    pub fn resolve(&self, id: i64) {
        self.with(|w| w.mr_notes.get_mut(&id).unwrap().resolved = true);
    }

    /// Every note on merge request `iid`, oldest first.
    pub fn mr_notes(&self, project: &str, iid: i64) -> Vec<FakeMrNote> {
        let project = project.to_ascii_lowercase();
        self.with(|w| {
            w.mr_notes
                .values()
                .filter(|n| n.project == project && n.merge_request == iid)
                .cloned()
                .collect()
        })
    }

    pub fn issue_notes(&self, project: &str, issue: i64) -> Vec<FakeNote> {
        let project = project.to_ascii_lowercase();
        self.with(|w| {
            w.notes
                .values()
                .filter(|n| n.project.to_ascii_lowercase() == project && n.issue == issue)
                .cloned()
                .collect()
        })
    }

    pub fn note(&self, id: i64) -> Option<FakeNote> {
        self.with(|w| w.notes.get(&id).cloned())
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

    /// Statuses answered to `method` requests whose path without the query is `path`.
    pub fn statuses(&self, method: &str, path: &str) -> Vec<u16> {
        self.requests()
            .iter()
            .filter(|r| r.method == method && r.path.split('?').next() == Some(path))
            .map(|r| r.status)
            .collect()
    }

    /// From now on, paginate with the `Link` header alone.
    pub fn paginate_with_link_only(&self) {
        self.with(|w| w.link_only = true);
    }

    /// From the next `method` request whose body contains `text` on, the token has
    /// `remaining` of `limit` calls until `reset_in` from then, told in `RateLimit-*`
    /// headers; a spent window is refused with GitLab's 429.
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

    /// The next `n` requests, whatever they are, answer `status` with `headers`.
    pub fn fail_next(&self, n: usize, status: u16, headers: &[(&str, &str)]) {
        self.with(|w| w.faults.next(n, status, headers));
    }

    /// The next `method` request to `path` (e.g. `/api/v4/projects/a%2Fb/merge_requests`,
    /// no query) is carried out, then answered with `status` all the same.
    pub fn fail_after_performing(&self, method: &str, path: &str, status: u16) {
        self.with(|w| w.faults.performed_on_path(method, path, status));
    }
}

fn git_dir(w: &GitlabState, key: &str) -> PathBuf {
    w.git_root.join(format!("{key}.git"))
}

/// `/{path}.git/...` of a known project → its key and the path below the git root.
fn git_route(w: &GitlabState, path: &str) -> Option<(String, String)> {
    let trimmed = path.trim_start_matches('/');
    let (project, rest) = match trimmed.split_once(".git/") {
        Some((project, rest)) => (project, rest),
        None => (trimmed.strip_suffix(".git")?, ""),
    };
    let key = decode_segment(project).to_ascii_lowercase();
    w.projects
        .contains_key(&key)
        .then(|| (key.clone(), format!("/{key}.git/{rest}")))
}

/// Git over smart HTTP with the token as the `oauth2` user's password. Failures queued
/// with `fail_next` are for the API and do not apply here. After each request the
/// project's branches are read back from the repository, so a push shows in the API.
async fn serve_git(
    world: Arc<Mutex<GitlabState>>,
    key: String,
    path_info: String,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let (root, read_only) = {
        let w = world.lock().unwrap();
        (w.git_root.clone(), w.git_read_only)
    };
    let seen = Arc::new(Mutex::new(None::<String>));
    let auth = {
        let seen = Arc::clone(&seen);
        move |user: &str, password: &str| {
            *seen.lock().unwrap() = Some(password.to_owned());
            user == "oauth2" && password == TOKEN
        }
    };
    let pushing = path_info.ends_with("/git-receive-pack")
        || uri
            .query()
            .unwrap_or("")
            .contains("service=git-receive-pack");
    let authenticated = headers.contains_key("authorization");
    let response = if read_only && pushing && authenticated {
        // As GitLab answers a push the token's owner may not make.
        (
            StatusCode::FORBIDDEN,
            "You are not allowed to push code to this project.\n",
        )
            .into_response()
    } else {
        GitHttp::new(root, auth)
            .serve(&path_info, method, uri.query().unwrap_or(""), headers, body)
            .await
    };
    let token = seen.lock().unwrap().clone();
    let mut w = world.lock().unwrap();
    let dir = git_dir(&w, &key);
    let output = git_http::git_command(&dir)
        .args([
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            "refs/heads",
        ])
        .output();
    if let Ok(output) = output
        && output.status.success()
    {
        let branches = &mut project_mut(&mut w, &key).branches;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some((branch, sha)) = line.split_once(' ') {
                branches.insert(branch.to_owned(), sha.to_owned());
            }
        }
    }
    let status = response.status().as_u16();
    w.log.record(method, uri, token, b"", status);
    response
}

fn project_mut<'w>(w: &'w mut GitlabState, project: &str) -> &'w mut FakeProject {
    w.projects.get_mut(&project.to_ascii_lowercase()).unwrap()
}

#[allow(clippy::too_many_arguments)]
fn insert_merge_request(
    w: &mut GitlabState,
    key: &str,
    source_project_id: i64,
    source_branch: &str,
    target_branch: &str,
    title: &str,
    description: &str,
    state: &str,
) -> i64 {
    let id = w.next_id();
    let project = w.projects.get_mut(key).unwrap();
    let iid = project.next_mr_iid;
    project.next_mr_iid += 1;
    project.merge_requests.insert(
        iid,
        FakeMergeRequest {
            id,
            iid,
            title: title.into(),
            description: description.into(),
            source_branch: source_branch.into(),
            target_branch: target_branch.into(),
            state: state.into(),
            source_project_id,
            history: Vec::new(),
        },
    );
    iid
}

/// The OAuth application: the authorization page, the token exchange, and what a
/// person's token reads (the person, a project they are a member of). `None` for every
/// other request.
fn oauth(
    w: &mut GitlabState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    match (method.clone(), uri.path()) {
        (Method::GET, "/oauth/authorize") => {
            let query = fake_http::fields(uri.query().unwrap_or(""));
            let field = |k: &str| query.get(k).map_or("", String::as_str);
            if field("client_id") != OAUTH_CLIENT_ID || field("response_type") != "code" {
                return Some(
                    (
                        StatusCode::BAD_REQUEST,
                        "The client identifier provided is invalid.",
                    )
                        .into_response(),
                );
            }
            let location = w.oauth.authorize(
                field("redirect_uri"),
                field("state"),
                query.get("code_challenge").map(String::as_str),
            );
            return Some((StatusCode::FOUND, [("location", location)]).into_response());
        }
        (Method::POST, "/oauth/token") => {
            let form = fake_http::fields(&String::from_utf8_lossy(body));
            let field = |k: &str| form.get(k).map_or("", String::as_str);
            let refused = |status: StatusCode, error: &str, description: &str| {
                (
                    status,
                    axum::Json(json!({"error": error, "error_description": description})),
                )
                    .into_response()
            };
            if field("client_id") != OAUTH_CLIENT_ID
                || field("client_secret") != OAUTH_CLIENT_SECRET
            {
                return Some(refused(
                    StatusCode::UNAUTHORIZED,
                    "invalid_client",
                    "Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.",
                ));
            }
            if field("grant_type") != "authorization_code" {
                return Some(refused(
                    StatusCode::BAD_REQUEST,
                    "unsupported_grant_type",
                    "The authorization grant type is not supported by the authorization server.",
                ));
            }
            let verifier = form.get("code_verifier").map(String::as_str);
            return Some(
                match w
                    .oauth
                    .exchange(field("code"), field("redirect_uri"), verifier, "")
                {
                    Ok(token) => axum::Json(json!({
                        "access_token": token,
                        "token_type": "Bearer",
                        "expires_in": 7200,
                        "refresh_token": format!("{:064x}", rand::random::<u128>()),
                        "scope": "read_api",
                        "created_at": unix_now(),
                    }))
                    .into_response(),
                    Err(_) => refused(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client.",
                    ),
                },
            );
        }
        (Method::POST, "/oauth/revoke") => {
            let form = fake_http::fields(&String::from_utf8_lossy(body));
            let field = |k: &str| form.get(k).map_or("", String::as_str);
            if field("client_id") != OAUTH_CLIENT_ID
                || field("client_secret") != OAUTH_CLIENT_SECRET
            {
                return Some(
                    (
                        StatusCode::FORBIDDEN,
                        axum::Json(json!({"error": "unauthorized_client", "error_description": "You are not authorized to revoke this token"})),
                    )
                        .into_response(),
                );
            }
            // GitLab answers 200 whether or not the token existed.
            w.oauth.tokens.remove(field("token"));
            return Some(axum::Json(json!({})).into_response());
        }
        _ => {}
    }
    let bearer = fake_http::bearer(headers)?;
    let Some((username, id)) = w.oauth.tokens.get(&bearer).cloned() else {
        return Some(error(StatusCode::UNAUTHORIZED, "401 Unauthorized"));
    };
    let rest = uri.path().strip_prefix("/api/v4/")?;
    let segments: Vec<String> = rest.split('/').map(decode_segment).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    Some(match (method.clone(), segs.as_slice()) {
        (Method::GET, ["user"]) => axum::Json(json!({
            "id": id,
            "username": username,
            "name": username,
            "state": "active",
            "locked": false,
            "bot": false,
        }))
        .into_response(),
        (Method::GET, ["projects", project, "members", "all", user]) => {
            // Every project is public here: anyone may see it, only members are members.
            let Some(p) = w.project_key(project).and_then(|key| w.projects.get(&key)) else {
                return Some(error(StatusCode::NOT_FOUND, "404 Project Not Found"));
            };
            match user
                .parse::<i64>()
                .ok()
                .and_then(|u| Some((u, p.members.get(&u)?)))
            {
                Some((user, member)) => axum::Json(json!({
                    "id": user,
                    "username": if user == id { username.clone() } else { format!("user{user}") },
                    "access_level": member.access_level,
                    "state": member.state,
                    "membership_state": member.membership_state,
                }))
                .into_response(),
                None => error(StatusCode::NOT_FOUND, "404 Not found"),
            }
        }
        _ => error(StatusCode::FORBIDDEN, "403 Forbidden"),
    })
}

/// GitLab's error body: `{"message": "404 Issue Not Found"}`.
fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "message": message }))).into_response()
}

fn not_found(what: &str) -> Response {
    error(StatusCode::NOT_FOUND, &format!("404 {what} Not Found"))
}

fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

async fn handle(
    State(world): State<Arc<Mutex<GitlabState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let git = git_route(&world.lock().unwrap(), uri.path());
    if let Some((key, path_info)) = git {
        return serve_git(world, key, path_info, &method, &uri, &headers, body).await;
    }
    let mut w = world.lock().unwrap();
    let token = headers
        .get("private-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let response = answer(&mut w, &method, &uri, token.as_deref(), &headers, &body);
    let status = response.status().as_u16();
    w.log.record(&method, &uri, token, &body, status);
    response
}

/// A parameter from the query or, as GitLab accepts both, the JSON or form body.
fn param(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
    name: &str,
) -> Option<String> {
    if let Some(v) = query.get(name) {
        return Some(v.clone());
    }
    let json_body = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if json_body {
        let value: Value = serde_json::from_slice(body).ok()?;
        return value.get(name)?.as_str().map(str::to_owned);
    }
    let form: HashMap<String, String> = serde_urlencoded::from_bytes(body).ok()?;
    form.get(name).cloned()
}

fn answer(
    w: &mut GitlabState,
    method: &Method,
    uri: &Uri,
    token: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if let Some(failure) = w.faults.take(method, uri.path(), body) {
        if failure.performed {
            route(w, method, uri, token, headers, body);
        }
        let status = StatusCode::from_u16(failure.status).unwrap();
        // GitLab's throttle answers in plain text; other failures come from a proxy.
        let text = if failure.status == 429 {
            "Retry later\n".to_owned()
        } else {
            format!("{status}")
        };
        let mut response = (status, text).into_response();
        failure.add_headers(response.headers_mut());
        return response;
    }
    let metered = w.rate_limits.meter(method, uri.path(), body);
    let mut response = match &metered {
        Some(Metered::Spent(window)) => {
            let mut spent = (StatusCode::TOO_MANY_REQUESTS, "Retry later\n").into_response();
            let wait = window.reset.saturating_sub(unix_now());
            spent.headers_mut().insert("retry-after", wait.into());
            spent
        }
        _ => route(w, method, uri, token, headers, body),
    };
    if let Some(Metered::Answered(window) | Metered::Spent(window)) = metered {
        window.add_headers(response.headers_mut(), "ratelimit-", "observed");
    }
    response
}

fn route(
    w: &mut GitlabState,
    method: &Method,
    uri: &Uri,
    token: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if let Some(response) = oauth(w, method, uri, headers, body) {
        return response;
    }
    if token != Some(TOKEN) {
        return error(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    // Split before decoding: `group%2Fproject` is one segment.
    let Some(rest) = uri.path().strip_prefix("/api/v4/") else {
        return not_found("");
    };
    let segments: Vec<String> = rest.split('/').map(decode_segment).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let query: HashMap<String, String> =
        serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap_or_default();
    let bot = FakeUser::new(BOT_USERNAME, BOT_ID);

    match (method.clone(), segs.as_slice()) {
        (Method::GET, ["user"]) => {
            let mut me = bot.json();
            me["bot"] = json!(false);
            me["email"] = json!("planwright@example.com");
            me["is_admin"] = json!(false);
            return axum::Json(me).into_response();
        }
        (Method::GET, ["users"]) => {
            let wanted = query.get("username").map(|u| u.to_ascii_lowercase());
            let found: Vec<Value> = w
                .users
                .iter()
                .filter(|u| {
                    wanted
                        .as_deref()
                        .is_none_or(|n| u.username.to_ascii_lowercase() == n)
                })
                .map(FakeUser::json)
                .collect();
            return axum::Json(found).into_response();
        }
        _ => {}
    }

    let ["projects", id, rest @ ..] = segs.as_slice() else {
        return not_found("");
    };
    let Some(key) = w.project_key(id) else {
        return not_found("Project");
    };

    match (method.clone(), rest) {
        (Method::GET, []) => {
            let p = &w.projects[&key];
            let path = p.path_with_namespace.rsplit('/').next().unwrap_or_default();
            let mut project = json!({
                "id": p.id,
                "name": path,
                "path": path,
                "path_with_namespace": p.path_with_namespace,
                "name_with_namespace": p.path_with_namespace.replace('/', " / "),
                "default_branch": p.default_branch,
                "visibility": "private",
                "web_url": format!("https://gitlab.example.com/{}", p.path_with_namespace),
                "http_url_to_repo": p.http_url_to_repo.clone().unwrap_or_else(|| format!("{}/{}.git", w.base_url, p.path_with_namespace)),
                "ssh_url_to_repo": format!("git@gitlab.example.com:{}.git", p.path_with_namespace),
                "created_at": rfc3339(0),
                "last_activity_at": rfc3339(0),
            });
            // GitLab sends statistics when asked, to members who may see them.
            if query.get("statistics").map(String::as_str) == Some("true") {
                let size = git_http::repo_size(&git_dir(w, &key));
                project["statistics"] = json!({
                    "commit_count": 1,
                    "storage_size": size,
                    "repository_size": size,
                    "wiki_size": 0,
                    "lfs_objects_size": 0,
                    "job_artifacts_size": 0,
                    "pipeline_artifacts_size": 0,
                    "packages_size": 0,
                    "snippets_size": 0,
                    "uploads_size": 0,
                    "container_registry_size": 0,
                });
            }
            axum::Json(project).into_response()
        }
        (Method::GET, ["repository", "branches", branch]) => {
            let p = &w.projects[&key];
            let Some(sha) = p.branches.get(*branch) else {
                return not_found("Branch");
            };
            axum::Json(json!({
                "name": branch,
                "merged": false,
                "protected": true,
                "default": p.default_branch.as_deref() == Some(*branch),
                "developers_can_push": false,
                "developers_can_merge": false,
                "can_push": true,
                "web_url": format!("https://gitlab.example.com/{}/-/tree/{branch}", p.path_with_namespace),
                "commit": {
                    "id": sha,
                    "short_id": &sha[..8.min(sha.len())],
                    "title": "Initial commit",
                    "message": "Initial commit\n",
                    "parent_ids": [],
                    "author_name": "Example",
                    "author_email": "example@example.com",
                    "created_at": rfc3339(0),
                },
            }))
            .into_response()
        }
        (Method::GET, ["repository", "files", path]) => {
            let p = &w.projects[&key];
            let Some(reference) = query.get("ref") else {
                return error(StatusCode::BAD_REQUEST, "ref is missing");
            };
            // `HEAD` is the default branch, as GitLab documents for `ref`.
            let branch = match reference.as_str() {
                "HEAD" => p.default_branch.as_deref().unwrap_or_default(),
                other => other,
            };
            let Some(sha) = p.branches.get(branch) else {
                return not_found("Commit");
            };
            let Some(bytes) = p.files.get(*path) else {
                return not_found("File");
            };
            axum::Json(json!({
                "file_name": path.rsplit('/').next().unwrap_or(path),
                "file_path": path,
                "size": bytes.len(),
                "encoding": "base64",
                "content": base64::engine::general_purpose::STANDARD.encode(bytes),
                "content_sha256": "4c294617b60715c1d218e61164a3abd4808a4284cbc30e6728a01ad9aada4481",
                "ref": reference,
                "blob_id": "79f7bbd25901e8334750839545a9bd021f0e4c83",
                "commit_id": sha,
                "last_commit_id": sha,
                "execute_filemode": false,
            }))
            .into_response()
        }
        (Method::GET, ["members", "all", user_id]) => {
            let p = &w.projects[&key];
            let Some((user, member)) = user_id
                .parse::<i64>()
                .ok()
                .and_then(|id| Some((w.users.iter().find(|u| u.id == id)?, p.members.get(&id)?)))
            else {
                return not_found("");
            };
            let mut answer = user.json();
            answer["state"] = json!(member.state);
            answer["access_level"] = json!(member.access_level);
            answer["membership_state"] = json!(member.membership_state);
            answer["created_at"] = json!(rfc3339(0));
            answer["expires_at"] = Value::Null;
            axum::Json(answer).into_response()
        }
        (Method::GET, ["issues", iid]) => {
            let p = &w.projects[&key];
            let Some((iid, issue)) = iid
                .parse::<i64>()
                .ok()
                .and_then(|n| Some((n, p.issues.get(&n)?)))
            else {
                return not_found("");
            };
            let notes = w
                .notes
                .values()
                .filter(|n| n.project == key && n.issue == iid && !n.system)
                .count();
            axum::Json(json!({
                "id": issue.id,
                "iid": iid,
                "project_id": p.id,
                "title": issue.title,
                "description": issue.description,
                "state": "opened",
                "created_at": rfc3339(0),
                "updated_at": rfc3339(0),
                "closed_at": null,
                "closed_by": null,
                "labels": issue.labels,
                "milestone": null,
                "assignees": [],
                "author": issue.author.json(),
                "type": "ISSUE",
                "assignee": null,
                "user_notes_count": notes,
                "upvotes": 0,
                "downvotes": 0,
                "confidential": false,
                "web_url": format!("https://gitlab.example.com/{}/-/issues/{iid}", p.path_with_namespace),
            }))
            .into_response()
        }
        (Method::GET, ["issues", iid, "resource_label_events"]) => {
            let p = &w.projects[&key];
            let Some(issue) = iid.parse::<i64>().ok().and_then(|n| p.issues.get(&n)) else {
                return not_found("");
            };
            let items: Vec<Value> = issue
                .label_events
                .iter()
                .map(|e| {
                    json!({
                        "id": e.id,
                        "user": e.user.json(),
                        "created_at": rfc3339(e.created_at),
                        "resource_type": "Issue",
                        "resource_id": issue.id,
                        "label": {
                            "id": e.label_id,
                            "name": e.label,
                            "color": "#6699cc",
                            "description": null,
                        },
                        "action": e.action,
                    })
                })
                .collect();
            paged(items, &query)
        }
        (Method::GET, ["issues", iid, "notes"]) => {
            let Some(iid) = issue_of(w, &key, iid) else {
                return not_found("");
            };
            let per_page: usize = query
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(20)
                .clamp(1, 100);
            let page: usize = query
                .get("page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1)
                .max(1);
            let mut all: Vec<&FakeNote> = w
                .notes
                .values()
                .filter(|n| n.project == key && n.issue == iid)
                .collect();
            // GitLab's default is newest first.
            if query.get("sort").map(String::as_str) != Some("asc") {
                all.reverse();
            }
            let total = all.len();
            let pages = total.div_ceil(per_page).max(1);
            let items: Vec<Value> = all
                .into_iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(|n| note_json(w, n))
                .collect();
            let mut response = axum::Json(items).into_response();
            let next = if page < pages {
                (page + 1).to_string()
            } else {
                String::new()
            };
            let prev = if page > 1 {
                (page - 1).to_string()
            } else {
                String::new()
            };
            let base = format!("http://gitlab.example.com{}", uri.path());
            let link = |n: usize, rel: &str| {
                format!("<{base}?page={n}&per_page={per_page}&sort=asc>; rel=\"{rel}\"")
            };
            let mut links = Vec::new();
            if page < pages {
                links.push(link(page + 1, "next"));
            }
            links.push(link(1, "first"));
            links.push(link(pages, "last"));
            let link_only = w.link_only;
            let h = response.headers_mut();
            for (name, value) in [
                ("x-page", page.to_string()),
                ("x-per-page", per_page.to_string()),
                ("x-next-page", next),
                ("x-prev-page", prev),
                ("x-total", total.to_string()),
                ("x-total-pages", pages.to_string()),
                ("link", links.join(", ")),
            ] {
                if link_only && name != "link" {
                    continue;
                }
                h.insert(name, HeaderValue::from_str(&value).unwrap());
            }
            response
        }
        (Method::POST, ["issues", iid, "notes"]) => {
            let Some(iid) = issue_of(w, &key, iid) else {
                return not_found("");
            };
            let Some(text) = param(&query, headers, body, "body") else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - body is missing");
            };
            let id = w.next_id();
            let note = FakeNote {
                id,
                project: key.clone(),
                issue: iid,
                body: text,
                author: bot,
                system: false,
                history: Vec::new(),
                awards: Vec::new(),
                created_at: now(),
            };
            let answer = note_json(w, &note);
            w.notes.insert(id, note);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["issues", iid, "notes", note_id]) => {
            let Some(id) = note_of(w, &key, iid, note_id) else {
                return not_found("Note");
            };
            axum::Json(note_json(w, &w.notes[&id])).into_response()
        }
        (Method::PUT, ["issues", iid, "notes", note_id]) => {
            let Some(id) = note_of(w, &key, iid, note_id) else {
                return not_found("Note");
            };
            let Some(text) = param(&query, headers, body, "body") else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - body is missing");
            };
            if w.notes[&id].author.id != BOT_ID {
                return error(StatusCode::FORBIDDEN, "403 Forbidden");
            }
            let note = w.notes.get_mut(&id).unwrap();
            let old = std::mem::replace(&mut note.body, text);
            note.history.push(old);
            let note = note.clone();
            axum::Json(note_json(w, &note)).into_response()
        }
        (Method::GET, ["issues", iid, "notes", note_id, "award_emoji"]) => {
            let Some(id) = note_of(w, &key, iid, note_id) else {
                return not_found("");
            };
            let awards: Vec<Value> = w.notes[&id]
                .awards
                .iter()
                .enumerate()
                .map(|(i, (name, username))| award_json(w, id, i as i64, name, username))
                .collect();
            axum::Json(awards).into_response()
        }
        (Method::POST, ["issues", iid, "notes", note_id, "award_emoji"]) => {
            let Some(id) = note_of(w, &key, iid, note_id) else {
                return not_found("");
            };
            let Some(name) = param(&query, headers, body, "name") else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - name is missing");
            };
            const KNOWN: [&str; 8] = [
                "thumbsup",
                "thumbsdown",
                "smile",
                "confused",
                "heart",
                "tada",
                "rocket",
                "eyes",
            ];
            if !KNOWN.contains(&name.as_str()) {
                return not_found("Award Emoji Name is not a valid emoji name");
            }
            let pair = (name.clone(), BOT_USERNAME.to_owned());
            let note = w.notes.get_mut(&id).unwrap();
            if note.awards.contains(&pair) {
                return not_found("Award Emoji Name has already been taken");
            }
            note.awards.push(pair);
            let index = note.awards.len() as i64 - 1;
            (
                StatusCode::CREATED,
                axum::Json(award_json(w, id, index, &name, BOT_USERNAME)),
            )
                .into_response()
        }
        (Method::GET, ["pipelines", id]) => {
            match id
                .parse::<i64>()
                .ok()
                .and_then(|id| w.pipelines.get(&id))
                .filter(|p| p.project == key)
            {
                Some(p) => axum::Json(json!({
                    "id": p.id, "iid": p.id, "project_id": w.projects[&key].id,
                    "sha": p.sha, "ref": "planwright", "status": p.status,
                    "source": "merge_request_event",
                    "web_url": format!("https://gitlab.example.com/{key}/-/pipelines/{}", p.id),
                }))
                .into_response(),
                None => not_found("404 Not found"),
            }
        }
        (Method::GET, ["pipelines", id, "jobs"]) => {
            let Some(p) = id
                .parse::<i64>()
                .ok()
                .and_then(|id| w.pipelines.get(&id))
                .filter(|p| p.project == key)
            else {
                return not_found("404 Not found");
            };
            let scope = query.get("scope[]").or_else(|| query.get("scope"));
            let jobs: Vec<Value> = p
                .jobs
                .iter()
                .filter(|j| scope.is_none_or(|s| *s == j.status))
                .map(|j| json!({
                    "id": j.id, "name": j.name, "status": j.status, "stage": "test",
                    "allow_failure": j.allow_failure,
                    "failure_reason": if j.status == "failed" { json!("script_failure") } else { json!(null) },
                    "web_url": format!("https://gitlab.example.com/{key}/-/jobs/{}", j.id),
                    "pipeline": {"id": p.id, "sha": p.sha, "status": p.status},
                }))
                .collect();
            paged(jobs, &query)
        }
        (Method::GET, ["jobs", id, "trace"]) => {
            let trace = id.parse::<i64>().ok().and_then(|id| {
                w.pipelines
                    .values()
                    .filter(|p| p.project == key)
                    .flat_map(|p| &p.jobs)
                    .find(|j| j.id == id)
            });
            match trace {
                Some(j) => (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; charset=utf-8",
                    )],
                    j.trace.clone(),
                )
                    .into_response(),
                None => not_found("404 Not found"),
            }
        }
        (Method::GET, ["merge_requests", iid, "notes", note_id]) => {
            match mr_note_of(w, &key, iid, note_id) {
                Some(n) => axum::Json(mr_note_json(w, n)).into_response(),
                None => not_found("Note"),
            }
        }
        (Method::POST, ["merge_requests", iid, "notes"]) => {
            let Some(iid) = mr_of(w, &key, iid) else {
                return not_found("Merge Request");
            };
            let Some(text) = param(&query, headers, body, "body") else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - body is missing");
            };
            let id = w.next_id();
            let note = FakeMrNote {
                id,
                project: key.clone(),
                merge_request: iid,
                discussion: format!("{:040x}", id),
                body: text,
                author: bot,
                position: None,
                resolved: false,
            };
            let answer = mr_note_json(w, &note);
            w.mr_notes.insert(id, note);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["merge_requests", iid, "discussions"]) => {
            let Some(iid) = mr_of(w, &key, iid) else {
                return not_found("Merge Request");
            };
            let notes: Vec<&FakeMrNote> = w
                .mr_notes
                .values()
                .filter(|n| n.project == key && n.merge_request == iid)
                .collect();
            let mut order: Vec<&str> = Vec::new();
            for n in &notes {
                if !order.contains(&n.discussion.as_str()) {
                    order.push(&n.discussion);
                }
            }
            let items: Vec<Value> = order
                .iter()
                .map(|d| {
                    let thread: Vec<Value> = notes
                        .iter()
                        .filter(|n| n.discussion == *d)
                        .map(|n| mr_note_json(w, n))
                        .collect();
                    json!({
                        "id": d,
                        "individual_note": thread.len() == 1 && thread[0]["position"].is_null(),
                        "notes": thread,
                    })
                })
                .collect();
            paged(items, &query)
        }
        (Method::POST, ["merge_requests", iid, "discussions", discussion, "notes"]) => {
            let Some(iid) = mr_of(w, &key, iid) else {
                return not_found("Merge Request");
            };
            let Some(first) = w
                .mr_notes
                .values()
                .find(|n| n.project == key && n.merge_request == iid && n.discussion == *discussion)
                .cloned()
            else {
                return not_found("Discussion");
            };
            let Some(text) = param(&query, headers, body, "body") else {
                return error(StatusCode::BAD_REQUEST, "400 Bad request - body is missing");
            };
            let id = w.next_id();
            let note = FakeMrNote {
                id,
                body: text,
                author: bot,
                ..first
            };
            let answer = mr_note_json(w, &note);
            w.mr_notes.insert(id, note);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["merge_requests"]) => {
            let p = &w.projects[&key];
            let state = query.get("state").map_or("all", String::as_str);
            if !["opened", "closed", "locked", "merged", "all"].contains(&state) {
                return invalid("state does not have a valid value");
            }
            let wanted = |name: &str, value: &str| query.get(name).is_none_or(|v| v == value);
            // Newest first, as GitLab lists them by default.
            let found: Vec<Value> = p
                .merge_requests
                .values()
                .rev()
                .filter(|m| state == "all" || m.state == state)
                .filter(|m| wanted("source_branch", &m.source_branch))
                .filter(|m| wanted("target_branch", &m.target_branch))
                .map(|m| merge_request_json(p, m))
                .collect();
            paged(found, &query)
        }
        (Method::POST, ["merge_requests"]) => {
            let field = |name: &str| param(&query, headers, body, name);
            let (Some(source), Some(target), Some(title)) = (
                field("source_branch"),
                field("target_branch"),
                field("title"),
            ) else {
                return invalid(
                    "source_branch is missing, target_branch is missing, title is missing",
                );
            };
            let description = field("description").unwrap_or_default();
            let p = &w.projects[&key];
            // GitLab reports every branch problem under `validate_branches`, answered 409.
            let conflict = |message: String| {
                (
                    StatusCode::CONFLICT,
                    axum::Json(json!({ "message": [message] })),
                )
                    .into_response()
            };
            if !p.branches.contains_key(&source) {
                return conflict(format!("Source branch \"{source}\" does not exist"));
            }
            if !p.branches.contains_key(&target) {
                return conflict(format!("Target branch \"{target}\" does not exist"));
            }
            if source == target {
                return conflict("You can't use same project/branch for source and target".into());
            }
            if let Some(open) = p.merge_requests.values().find(|m| {
                m.state == "opened"
                    && m.source_project_id == p.id
                    && m.source_branch == source
                    && m.target_branch == target
            }) {
                return conflict(format!(
                    "Another open merge request already exists for this source branch: !{}",
                    open.iid
                ));
            }
            if let Some(refused) = too_long("title", &title, 255)
                .or_else(|| too_long("description", &description, 1_048_576))
            {
                return refused;
            }
            let own = p.id;
            let iid = insert_merge_request(
                w,
                &key,
                own,
                &source,
                &target,
                &title,
                &description,
                "opened",
            );
            let p = &w.projects[&key];
            let answer = merge_request_json(p, &p.merge_requests[&iid]);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["merge_requests", iid]) => {
            let p = &w.projects[&key];
            match iid
                .parse::<i64>()
                .ok()
                .and_then(|n| p.merge_requests.get(&n))
            {
                Some(mr) => axum::Json(merge_request_json(p, mr)).into_response(),
                None => not_found("Merge Request"),
            }
        }
        (Method::PUT, ["merge_requests", iid]) => {
            let description = param(&query, headers, body, "description");
            let title = param(&query, headers, body, "title");
            if let Some(refused) = description
                .as_deref()
                .and_then(|d| too_long("description", d, 1_048_576))
                .or_else(|| title.as_deref().and_then(|t| too_long("title", t, 255)))
            {
                return refused;
            }
            let p = w.projects.get_mut(&key).unwrap();
            let Some(mr) = iid
                .parse::<i64>()
                .ok()
                .and_then(|n| p.merge_requests.get_mut(&n))
            else {
                return not_found("Merge Request");
            };
            if let Some(description) = description {
                let old = std::mem::replace(&mut mr.description, description);
                mr.history.push(old);
            }
            if let Some(title) = title {
                mr.title = title;
            }
            let mr = mr.clone();
            axum::Json(merge_request_json(&w.projects[&key], &mr)).into_response()
        }
        (Method::POST, ["statuses", sha]) => {
            let field = |name: &str| param(&query, headers, body, name);
            let Some(state) = field("state") else {
                return invalid("state is missing");
            };
            const STATES: [&str; 6] = [
                "pending", "running", "success", "failed", "canceled", "skipped",
            ];
            if !STATES.contains(&state.as_str()) {
                return invalid("state does not have a valid value");
            }
            let name = field("name")
                .or_else(|| field("context"))
                .unwrap_or_else(|| "default".into());
            let description = field("description");
            if let Some(refused) = description
                .as_deref()
                .and_then(|d| too_long("description", d, 255))
            {
                return refused;
            }
            let target_url = field("target_url");
            let new_id = w.next_id();
            let p = w.projects.get_mut(&key).unwrap();
            if !p.branches.values().any(|head| head == sha) {
                return not_found("Commit");
            }
            // GitLab moves the newest status of that name that is still pending or
            // running, else starts a new one; a finished one is history.
            let index = p
                .statuses
                .iter()
                .rposition(|s| {
                    s.sha == *sha
                        && s.name == name
                        && matches!(s.state.as_str(), "pending" | "running")
                })
                .unwrap_or_else(|| {
                    p.statuses.push(FakeStatus {
                        id: new_id,
                        sha: (*sha).to_owned(),
                        name: name.clone(),
                        state: "created".into(),
                        description: None,
                        target_url: None,
                    });
                    p.statuses.len() - 1
                });
            let status = &mut p.statuses[index];
            // Saved before the transition is tried, so they stick even when it is refused.
            if description.is_some() {
                status.description = description;
            }
            if target_url.is_some() {
                status.target_url = target_url;
            }
            let (event, allowed): (&str, &[&str]) = match state.as_str() {
                "pending" => ("enqueue", &["created"]),
                "running" => ("run", &["created", "pending"]),
                "success" => ("success", &["created", "pending", "running"]),
                "failed" => ("drop", &["created", "pending", "running"]),
                "canceled" => ("cancel", &["created", "pending", "running"]),
                _ => ("skip", &["created", "pending"]),
            };
            if !allowed.contains(&status.state.as_str()) {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "Cannot transition status via :{event} from :{} (Reason(s): Status cannot transition via \"{event}\")",
                        status.state
                    ),
                );
            }
            status.state = state;
            let status = status.clone();
            (StatusCode::CREATED, axum::Json(status_json(&status))).into_response()
        }
        _ => not_found(""),
    }
}

fn issue_of(w: &GitlabState, key: &str, iid: &str) -> Option<i64> {
    let iid = iid.parse::<i64>().ok()?;
    w.projects[key].issues.contains_key(&iid).then_some(iid)
}

fn mr_of(w: &GitlabState, key: &str, iid: &str) -> Option<i64> {
    let iid = iid.parse::<i64>().ok()?;
    w.projects[key]
        .merge_requests
        .contains_key(&iid)
        .then_some(iid)
}

fn mr_note_of<'w>(w: &'w GitlabState, key: &str, iid: &str, id: &str) -> Option<&'w FakeMrNote> {
    let (iid, id) = (iid.parse::<i64>().ok()?, id.parse::<i64>().ok()?);
    w.mr_notes
        .get(&id)
        .filter(|n| n.project == key && n.merge_request == iid)
}

fn mr_note_json(w: &GitlabState, n: &FakeMrNote) -> Value {
    let p = &w.projects[&n.project];
    let position = n.position.as_ref().map(|(path, line)| {
        json!({
            "base_sha": "0000000000000000000000000000000000000000",
            "start_sha": "0000000000000000000000000000000000000000",
            "head_sha": "0000000000000000000000000000000000000000",
            "old_path": path,
            "new_path": path,
            "position_type": "text",
            "old_line": null,
            "new_line": line,
            "line_range": {
                "start": {"line_code": format!("x_{line}_{line}"), "type": "new", "old_line": null, "new_line": line},
                "end": {"line_code": format!("x_{line}_{line}"), "type": "new", "old_line": null, "new_line": line},
            },
        })
    });
    json!({
        "id": n.id,
        "type": if position.is_some() { json!("DiffNote") } else { json!(null) },
        "body": n.body,
        "attachment": null,
        "author": n.author.json(),
        "created_at": rfc3339(now()),
        "updated_at": rfc3339(now()),
        "system": false,
        "noteable_id": p.merge_requests.get(&n.merge_request).map_or(0, |m| m.id),
        "noteable_type": "MergeRequest",
        "project_id": p.id,
        "noteable_iid": n.merge_request,
        "commit_id": null,
        "position": position,
        "resolvable": n.position.is_some(),
        "resolved": n.resolved,
        "resolved_by": null,
        "confidential": false,
        "internal": false,
        "imported": false,
        "imported_from": "none",
    })
}

fn note_of(w: &GitlabState, key: &str, iid: &str, id: &str) -> Option<i64> {
    let iid = iid.parse::<i64>().ok()?;
    let id = id.parse::<i64>().ok()?;
    w.notes
        .get(&id)
        .filter(|n| n.project == key && n.issue == iid)
        .map(|n| n.id)
}

fn note_json(w: &GitlabState, n: &FakeNote) -> Value {
    let p = &w.projects[&n.project];
    json!({
        "id": n.id,
        "type": null,
        "body": n.body,
        "attachment": null,
        "author": n.author.json(),
        "created_at": rfc3339(n.created_at),
        "updated_at": rfc3339(n.created_at),
        "system": n.system,
        "noteable_id": p.issues.get(&n.issue).map_or(0, |i| i.id),
        "noteable_type": "Issue",
        "project_id": p.id,
        "noteable_iid": n.issue,
        "resolvable": false,
        "confidential": false,
        "internal": false,
        "imported": false,
        "imported_from": "none",
        "commands_changes": {},
    })
}

fn award_json(w: &GitlabState, note: i64, index: i64, name: &str, username: &str) -> Value {
    let user = w
        .users
        .iter()
        .find(|u| u.username == username)
        .cloned()
        .unwrap_or_else(|| FakeUser::new(username, 0));
    json!({
        "id": note * 100 + index,
        "name": name,
        "user": user.json(),
        "created_at": rfc3339(0),
        "updated_at": rfc3339(0),
        "awardable_id": note,
        "awardable_type": "Note",
    })
}

/// Grape's answer to a missing or invalid parameter.
fn invalid(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({ "error": message })),
    )
        .into_response()
}

/// A model validation failure when `text` is longer than GitLab keeps, in characters.
fn too_long(field: &str, text: &str, limit: usize) -> Option<Response> {
    (text.chars().count() > limit).then(|| {
        let message = format!("is too long (maximum is {limit} characters)");
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "message": { field: [message] } })),
        )
            .into_response()
    })
}

/// One page of a list, with GitLab's offset pagination headers.
fn paged(items: Vec<Value>, query: &HashMap<String, String>) -> Response {
    let per_page: usize = query
        .get("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .clamp(1, 100);
    let page: usize = query
        .get("page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let total = items.len();
    let pages = total.div_ceil(per_page).max(1);
    let shown: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let mut response = axum::Json(shown).into_response();
    let next = if page < pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let h = response.headers_mut();
    for (name, value) in [
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-next-page", next),
        ("x-total", total.to_string()),
        ("x-total-pages", pages.to_string()),
    ] {
        h.insert(name, HeaderValue::from_str(&value).unwrap());
    }
    response
}

fn merge_request_json(p: &FakeProject, m: &FakeMergeRequest) -> Value {
    let bot = FakeUser::new(BOT_USERNAME, BOT_ID);
    let head = p.branches.get(&m.source_branch).cloned();
    let short = format!("!{}", m.iid);
    let full = format!("{}!{}", p.path_with_namespace, m.iid);
    let web_url = format!(
        "https://gitlab.example.com/{}/-/merge_requests/{}",
        p.path_with_namespace, m.iid
    );
    let mut answer = json!({
        "id": m.id,
        "iid": m.iid,
        "project_id": p.id,
        "title": m.title,
        "description": m.description,
        "state": m.state,
        "created_at": rfc3339(0),
        "updated_at": rfc3339(0),
        "merged_by": null,
        "merged_at": null,
        "closed_by": null,
        "closed_at": null,
        "target_branch": m.target_branch,
        "source_branch": m.source_branch,
        "user_notes_count": 0,
        "upvotes": 0,
        "downvotes": 0,
        "author": bot.json(),
        "assignees": [],
        "assignee": null,
        "reviewers": [],
        "source_project_id": m.source_project_id,
        "target_project_id": p.id,
        "labels": [],
        "draft": m.title.starts_with("Draft:"),
        "work_in_progress": m.title.starts_with("Draft:"),
        "milestone": null,
    });
    // In two parts: one `json!` this long exceeds the macro recursion limit.
    let rest = json!({
        "merge_when_pipeline_succeeds": false,
        "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable",
        "sha": head,
        "merge_commit_sha": null,
        "squash_commit_sha": null,
        "discussion_locked": null,
        "should_remove_source_branch": null,
        "force_remove_source_branch": true,
        "reference": short,
        "references": { "short": short, "relative": short, "full": full },
        "web_url": web_url,
        "time_stats": {
            "time_estimate": 0,
            "total_time_spent": 0,
            "human_time_estimate": null,
            "human_total_time_spent": null,
        },
        "squash": false,
        "task_completion_status": { "count": 0, "completed_count": 0 },
        "has_conflicts": false,
        "blocking_discussions_resolved": true,
    });
    if let (Some(answer), Value::Object(rest)) = (answer.as_object_mut(), rest) {
        answer.extend(rest);
    }
    answer
}

fn status_json(s: &FakeStatus) -> Value {
    let bot = FakeUser::new(BOT_USERNAME, BOT_ID);
    let finished = matches!(
        s.state.as_str(),
        "success" | "failed" | "canceled" | "skipped"
    );
    json!({
        "id": s.id,
        "sha": s.sha,
        "ref": "main",
        "status": s.state,
        "name": s.name,
        "target_url": s.target_url,
        "description": s.description,
        "created_at": rfc3339(0),
        "started_at": null,
        "finished_at": if finished { Some(rfc3339(0)) } else { None },
        "allow_failure": false,
        "coverage": null,
        "pipeline_id": 1,
        "author": bot.json(),
    })
}
