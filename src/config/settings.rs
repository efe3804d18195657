//! The deployment's settings as the rest of planwright reads them: typed, every value
//! already checked (`load` makes them), with the defaults of those that have one.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::{github_app, images, prices};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub public_url: String,
    /// GitHub's web address (GitHub Enterprise Server: the instance), where the app is
    /// registered from its manifest.
    pub github_url: String,
    pub github: GithubSettings,
    pub gitlab: GitlabSettings,
    pub models: ModelSettings,
    pub sandbox: String,
    pub unsafe_no_sandbox: bool,
    /// Repositories whose settings name no ladder climb the executor tiers (`ESCALATE`).
    pub escalate: bool,
    /// The planwright executable the sandbox runs as its model relay; by default this
    /// very program. planwright reads it and hands the sandbox a copy.
    pub sandbox_relay: Option<PathBuf>,
    /// Files these settings were read from that hold secrets (the settings file, the
    /// private key, the price file): covered in every sandbox wherever they are.
    pub secret_files: Vec<PathBuf>,
    pub log_format: LogFormat,
    /// Largest webhook body accepted (GitHub caps payloads at 25 MB).
    pub webhook_body_limit: usize,
    /// GitHub bodies read at once before their signature is checked: each may be as large
    /// as the limit, and anyone can send one.
    pub webhook_body_reads: usize,
    pub queue: QueueSettings,
    /// Where the model proxy for executors listens.
    pub model_proxy: ProxyListen,
    pub workspaces: WorkspaceSettings,
    /// How long one executor attempt may run, its commands included, before it is
    /// stopped (its unfinished change is kept).
    pub executor_timeout: Duration,
    /// The operator's secret for registering the GitHub App; without it, one is made at
    /// every start while no app is configured, and printed in the log.
    pub setup_token: Option<SecretString>,
    /// Signs the operator in to the session pages, and reads `/metrics`.
    pub admin_token: Option<SecretString>,
    /// How long the session pages trust a forge's answer about what a signed-in person
    /// may read (`ACCESS_CHECK_SECS`).
    pub access_check: Duration,
    /// The repository map's budget in tokens, for the planner and each scout (`MAP_TOKENS`).
    pub map_tokens: usize,
    /// A planning checkout of a commit with more files than this is sparse
    /// (`SPARSE_CHECKOUT_FILES`).
    pub sparse_checkout_files: usize,
    /// Groups of repositories whose outcomes `routing: auto` reads together, one glob
    /// each (`ROUTING_GROUPS`); a repository in none reads only its own.
    pub routing_groups: Vec<String>,
    /// Shows `/metrics` only, for a scraper.
    pub metrics_token: Option<SecretString>,
    /// A listener of its own for `/metrics`, which the main one then does not serve.
    pub metrics_listen: Option<SocketAddr>,
    /// Environment images: the default one, registry access, the cache's cap.
    pub images: images::ImageSettings,
    /// Problems that did not stop loading (unknown environment variables), to be logged
    /// once logging is set up.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct GithubSettings {
    pub app_id: Option<u64>,
    pub private_key: Option<SecretString>,
    /// Every secret that is accepted; more than one while a secret is being rotated.
    pub webhook_secrets: Vec<SecretString>,
    pub api_url: String,
    /// Where people and git see repositories (`GITHUB_URL`): github.com for its API, the
    /// API host without `api.` on GHE.com, the instance for Enterprise Server's `/api/v3`.
    pub web_url: String,
    /// The longest rate-limit wait a job waits out in place (`RATE_LIMIT_WAIT_SECS`);
    /// longer ones hand the job back to the queue until the reset.
    pub rate_limit_wait: Duration,
    /// The App's OAuth client, which signs people in to the session pages
    /// (`GITHUB_CLIENT_ID`, `GITHUB_CLIENT_SECRET`; else the registered app's).
    pub client_id: Option<String>,
    pub client_secret: Option<SecretString>,
}

impl GithubSettings {
    /// These settings with what they leave unset taken from the app registered through the
    /// manifest flow: settings given explicitly always win. The app id and its key go
    /// together, so a key set without an id is replaced as well.
    pub fn with_registered(&self, app: &github_app::RegisteredApp) -> GithubSettings {
        let mut merged = self.clone();
        if merged.app_id.is_none() {
            merged.app_id = Some(app.id);
            merged.private_key = Some(app.pem.clone());
        }
        if merged.webhook_secrets.is_empty() {
            merged.webhook_secrets = vec![app.webhook_secret.clone()];
        }
        // The client id and its secret go together too.
        if merged.client_id.is_none() || merged.client_secret.is_none() {
            merged.client_id = Some(app.client_id.clone());
            merged.client_secret = Some(app.client_secret.clone());
        }
        merged
    }
}

#[derive(Debug, Clone)]
pub struct GitlabSettings {
    pub url: Option<String>,
    pub token: Option<SecretString>,
    /// Accepted for every project; more than one while a secret is being rotated.
    pub webhook_secrets: Vec<SecretString>,
    /// Each accepted only for the project it is paired with, so that whoever holds one
    /// project's secret cannot speak for another.
    pub project_secrets: Vec<(crate::ids::RepoName, SecretString)>,
    /// As [`GithubSettings::rate_limit_wait`].
    pub rate_limit_wait: Duration,
    /// The OAuth application that signs people in to the session pages
    /// (`GITLAB_CLIENT_ID`, `GITLAB_CLIENT_SECRET`).
    pub client_id: Option<String>,
    pub client_secret: Option<SecretString>,
}

#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub anthropic_api_key: Option<SecretString>,
    pub anthropic_base_url: String,
    pub openai_api_key: Option<SecretString>,
    pub openai_base_url: String,
    /// `provider:model` names, checked to parse when the settings load.
    pub planner: Option<String>,
    pub scout: Option<String>,
    pub executor: Option<String>,
    /// The default prices with `MODEL_PRICES` (inline TOML, or a path to a TOML file) applied.
    pub prices: prices::PriceTable,
}

/// How the durable job queue behaves.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// Jobs other than runs at once in one process.
    pub workers: usize,
    /// Runs (executions: sandboxes, executors, verification) at once in one process, on
    /// top of `workers`, so long runs never hold up webhooks and planning.
    pub max_runs: usize,
    /// Runs of one installation (a GitHub installation, a GitLab top-level group) at once,
    /// across every process; `None` for no bound. Installations take turns either way.
    pub max_runs_per_installation: Option<usize>,
    /// How long a claimed job is held without a heartbeat before any worker may take it.
    pub lease: Duration,
    /// Attempts before a job is dead-lettered.
    pub max_attempts: i64,
    /// First retry delay; doubled each attempt, with jitter, up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How often an idle worker looks for jobs enqueued by other processes.
    pub poll_interval: Duration,
    /// How long a stopping worker waits for running jobs before releasing them.
    pub shutdown_grace: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            workers: 4,
            max_runs: 2,
            max_runs_per_installation: None,
            lease: Duration::from_secs(60),
            max_attempts: 5,
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(15 * 60),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(20),
        }
    }
}

/// How long repositories on disk are kept (see `git`).
#[derive(Debug, Clone)]
pub struct WorkspaceSettings {
    /// A failed run's workspace is kept this long for inspection, then swept.
    pub keep_failed: Duration,
    /// A mirror nothing was fetched into or checked out from for this long is removed.
    pub mirror_unused: Duration,
    /// Repositories (`owner/name` globs) whose mirrors are partial clones
    /// (`MIRROR_PARTIAL`).
    pub mirror_partial: Vec<String>,
    /// Repositories the forge reports larger than this many bytes get partial mirrors
    /// too (`MIRROR_PARTIAL_ABOVE`).
    pub mirror_partial_above: Option<u64>,
}

impl Default for WorkspaceSettings {
    fn default() -> Self {
        Self {
            keep_failed: Duration::from_secs(24 * 3600),
            mirror_unused: Duration::from_secs(30 * 24 * 3600),
            mirror_partial: Vec::new(),
            mirror_partial_above: None,
        }
    }
}

/// How long an executor attempt runs at most, unless `EXECUTOR_TIMEOUT_SECS` says otherwise.
pub(super) const EXECUTOR_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// How long an answer about what a signed-in person may read is trusted, unless
/// `ACCESS_CHECK_SECS` says.
pub const ACCESS_CHECK: Duration = Duration::from_secs(5 * 60);

/// The repository map's budget unless `MAP_TOKENS` says: a few thousand tokens, whatever
/// the repository's size.
pub const MAP_TOKENS: usize = 3_000;
pub const MAP_TOKENS_MIN: usize = 300;
/// Files a commit may have for its planning checkout to be written whole at the start,
/// unless `SPARSE_CHECKOUT_FILES` says: past it, the rest waits for a scout's first
/// command.
pub const SPARSE_CHECKOUT_FILES: usize = 20_000;

/// The longest rate-limit wait a job sits out in place unless `RATE_LIMIT_WAIT_SECS` says.
pub const RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

impl Settings {
    /// The accepted GitHub webhook secrets, exposed for verification only.
    pub fn github_secrets(&self) -> impl Iterator<Item = &[u8]> {
        self.github
            .webhook_secrets
            .iter()
            .map(|s| s.expose_secret().as_bytes())
    }

    pub fn gitlab_secrets(&self) -> impl Iterator<Item = &[u8]> {
        self.gitlab
            .webhook_secrets
            .iter()
            .map(|s| s.expose_secret().as_bytes())
    }

    /// The per-project GitLab webhook secrets, exposed for verification only.
    pub fn gitlab_project_secrets(&self) -> impl Iterator<Item = (&crate::ids::RepoName, &[u8])> {
        self.gitlab
            .project_secrets
            .iter()
            .map(|(project, s)| (project, s.expose_secret().as_bytes()))
    }
}

/// Where the proxy listens. The sandbox reaches it only through a Unix socket mounted
/// into it (its network namespace has no route to the host's loopback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for ProxyListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyListen::Tcp(addr) => write!(f, "http://{addr}"),
            ProxyListen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
