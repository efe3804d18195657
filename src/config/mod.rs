//! Deployment settings: an optional TOML file overridden by `PLANWRIGHT_<KEY>` environment
//! variables (DESIGN §10). Every value is checked here, once, with the key named in the
//! error, so the rest of the program reads typed settings only.

pub mod checkout_file;
pub mod environment;
pub mod github_app;
pub mod images;
pub mod prices;
pub mod repo;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use secrecy::{ExposeSecret, SecretString};

pub const ENV_PREFIX: &str = "PLANWRIGHT_";
const DEFAULT_CONFIG_FILE: &str = "planwright.toml";
/// The shortest token an operator may choose for a page planwright guards.
const MIN_TOKEN_CHARS: usize = 16;

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
const EXECUTOR_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// Keys that may also be given without the `PLANWRIGHT_` prefix, as model tools expect.
const UNPREFIXED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
];

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

/// Every key the environment may set, in file spelling (upper-cased for the environment).
const KEYS: &[&str] = &[
    "listen",
    "port",
    "data_dir",
    "database_url",
    "public_url",
    "github_app_id",
    "github_private_key",
    "github_webhook_secret",
    "github_api_url",
    "github_url",
    "github_client_id",
    "github_client_secret",
    "gitlab_url",
    "gitlab_token",
    "gitlab_client_id",
    "gitlab_client_secret",
    "gitlab_webhook_secret",
    "gitlab_webhook_secrets",
    "anthropic_api_key",
    "anthropic_base_url",
    "openai_api_key",
    "openai_base_url",
    "planner_model",
    "scout_model",
    "executor_model",
    "model_prices",
    "model_proxy_listen",
    "model_proxy_socket",
    "sandbox",
    "unsafe_no_sandbox",
    "sandbox_relay",
    "log_format",
    "webhook_body_limit",
    "webhook_body_reads",
    "workers",
    "max_runs",
    "max_runs_per_installation",
    "job_lease_secs",
    "job_max_attempts",
    "job_retry_base_ms",
    "job_retry_max_secs",
    "job_poll_ms",
    "shutdown_grace_secs",
    "rate_limit_wait_secs",
    "workspace_keep_failed_secs",
    "mirror_unused_days",
    "mirror_partial",
    "mirror_partial_above",
    "executor_timeout_secs",
    "setup_token",
    "admin_token",
    "access_check_secs",
    "map_tokens",
    "sparse_checkout_files",
    "metrics_token",
    "metrics_listen",
    "environment_image",
    "registry_auth",
    "registry_insecure",
    "registry_private",
    "environment_cache_max",
    "setup_cache_max",
    "environment_pull_timeout",
];

impl Settings {
    /// Reads `--config FILE` (which must exist) or `planwright.toml` when present, then the
    /// process environment.
    pub fn load(config_file: Option<&Path>) -> Result<Self> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let default = Path::new(DEFAULT_CONFIG_FILE);
        let file = config_file.or_else(|| default.exists().then_some(default));
        Self::from_sources(file, &env)
    }

    /// As [`Settings::load`], with `data_dir` as DATA_DIR where neither the file nor the
    /// environment sets one (`solve` keeps its data beside the repository it works on).
    pub fn load_with_data_dir(config_file: Option<&Path>, data_dir: &Path) -> Result<Self> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let default = Path::new(DEFAULT_CONFIG_FILE);
        let file = config_file.or_else(|| default.exists().then_some(default));
        Self::from_sources_with(file, &env, Some(data_dir))
    }

    /// Settings from exactly this file (if any) and this environment.
    pub fn from_sources(config_file: Option<&Path>, env: &[(String, String)]) -> Result<Self> {
        Self::from_sources_with(config_file, env, None)
    }

    fn from_sources_with(
        config_file: Option<&Path>,
        env: &[(String, String)],
        data_dir: Option<&Path>,
    ) -> Result<Self> {
        let mut raw = match config_file {
            Some(path) => Raw::from_file(read_file(path)?, path)?,
            None => Raw {
                values: std::collections::BTreeMap::new(),
                warnings: Vec::new(),
            },
        };
        raw.apply_env(env);
        if let Some(dir) = data_dir {
            raw.values
                .entry("data_dir")
                .or_insert_with(|| (dir.display().to_string(), Source::File));
        }
        let mut settings = raw.finish()?;
        settings
            .secret_files
            .extend(config_file.map(Path::to_path_buf));
        if let Some(app) = github_app::RegisteredApp::load(&settings.data_dir)? {
            settings.github = settings.github.with_registered(&app);
        }
        Ok(settings)
    }

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

fn read_file(path: &Path) -> Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("Could not read the settings file {}", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("Could not parse the settings file {}", path.display()))
}

/// Settings as strings and options, before validation; the file fills it, the
/// environment overrides it.
struct Raw {
    values: std::collections::BTreeMap<&'static str, (String, Source)>,
    warnings: Vec<String>,
}

#[derive(Clone)]
enum Source {
    File,
    Env(String),
}

impl Source {
    fn describe(&self, key: &str) -> String {
        match self {
            Source::File => format!("`{key}` in the settings file"),
            Source::Env(var) => format!("the environment variable {var}"),
        }
    }
}

impl Raw {
    /// The file's values, each checked against the known keys.
    fn from_file(table: toml::Table, path: &Path) -> Result<Self> {
        let mut values = std::collections::BTreeMap::new();
        for (key, value) in table {
            let Some(known) = KEYS.iter().find(|k| **k == key) else {
                bail!(
                    "Cannot use the settings file {}: unknown key `{key}` (known keys: {})",
                    path.display(),
                    KEYS.join(", ")
                );
            };
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => bail!(
                    "Cannot use `{key}` in the settings file {}: expected a string, number or boolean, got {}",
                    path.display(),
                    other.type_str()
                ),
            };
            values.insert(*known, (text, Source::File));
        }
        Ok(Self {
            values,
            warnings: Vec::new(),
        })
    }

    fn apply_env(&mut self, env: &[(String, String)]) {
        let mut listen_from_env = false;
        for (name, value) in env {
            let Some(key) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let lower = key.to_ascii_lowercase();
            match KEYS.iter().find(|k| **k == lower) {
                Some(k) => {
                    listen_from_env |= *k == "listen" || *k == "port";
                    self.values
                        .insert(k, (value.clone(), Source::Env(name.clone())));
                }
                None if key.starts_with("TEST_") || key == "LOG" => {}
                None => self
                    .warnings
                    .push(format!("ignoring {name}: planwright has no such setting")),
            }
        }
        // The environment overrides the file: a PORT given by the platform (and no
        // PLANWRIGHT_LISTEN/PORT) replaces the file's address.
        if !listen_from_env && let Some((_, port)) = env.iter().find(|(n, _)| n == "PORT") {
            self.values.remove("listen");
            self.values
                .insert("port", (port.clone(), Source::Env("PORT".to_owned())));
        }
        // Unprefixed model keys apply only where the prefixed form is absent.
        for unprefixed in UNPREFIXED {
            let key = unprefixed.to_ascii_lowercase();
            let prefixed = format!("{ENV_PREFIX}{unprefixed}");
            if env.iter().any(|(n, _)| *n == prefixed) {
                continue;
            }
            if let Some((_, v)) = env.iter().find(|(n, _)| n == unprefixed)
                && let Some(k) = KEYS.iter().find(|k| **k == key)
                && !self.values.contains_key(k)
            {
                self.values
                    .insert(k, (v.clone(), Source::Env((*unprefixed).to_owned())));
            }
        }
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(|(v, _)| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn parsed<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<Option<T>> {
        let Some((value, source)) = self.values.get(key) else {
            return Ok(None);
        };
        let value = value.trim();
        if value.is_empty() {
            return Ok(None);
        }
        match value.parse::<T>() {
            Ok(v) => Ok(Some(v)),
            Err(_) => bail!(
                "Cannot use {}: expected {what}, got `{value}`",
                source.describe(key)
            ),
        }
    }

    fn secret(&self, key: &str) -> Option<SecretString> {
        self.text(key).map(|v| SecretString::from(v.to_owned()))
    }

    fn secrets(&self, key: &str) -> Vec<SecretString> {
        self.text(key)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| SecretString::from(s.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An operator's secret that guards a page: long enough that guessing it online is
    /// hopeless.
    fn token(&self, key: &str) -> Result<Option<SecretString>> {
        let token = self.secret(key);
        if let Some(token) = &token
            && token.expose_secret().chars().count() < MIN_TOKEN_CHARS
        {
            bail!(
                "Cannot use {}: a token must be at least {MIN_TOKEN_CHARS} characters long, so that it cannot be guessed (`openssl rand -hex 16` makes one)",
                self.source(key)
            );
        }
        Ok(token)
    }

    /// `group/project=secret` pairs, comma-separated. The error never repeats an entry:
    /// it holds a secret.
    fn project_secrets(&self, key: &str) -> Result<Vec<(crate::ids::RepoName, SecretString)>> {
        let Some(text) = self.text(key) else {
            return Ok(Vec::new());
        };
        let mut pairs = Vec::new();
        for (n, entry) in text.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let pair = entry.split_once('=').and_then(|(path, secret)| {
                let secret = secret.trim();
                let path = crate::ids::RepoName::parse(path).ok()?;
                (!secret.is_empty()).then(|| (path, SecretString::from(secret.to_owned())))
            });
            match pair {
                Some(pair) => pairs.push(pair),
                None => bail!(
                    "Cannot use {}: entry {} is not `group/project=secret`; list each project's path and its webhook secret, comma-separated",
                    self.source(key),
                    n + 1
                ),
            }
        }
        Ok(pairs)
    }

    fn positive(&self, key: &str) -> Result<Option<u64>> {
        match self.parsed::<u64>(key, "a positive integer")? {
            Some(0) => bail!(
                "Cannot use {}: expected a positive integer, got `0`",
                self.source(key)
            ),
            other => Ok(other),
        }
    }

    fn source(&self, key: &str) -> String {
        self.values
            .get(key)
            .map(|(_, s)| s.describe(key))
            .unwrap_or_else(|| format!("`{key}`"))
    }

    /// Every setting checked and typed. The steps run in this order so that, of several
    /// bad values, the same one is always reported first.
    fn finish(self) -> Result<Settings> {
        let listen = self.listen()?;
        let data_dir = PathBuf::from(self.text("data_dir").unwrap_or("./data"));
        let database_url = self.database_url(&data_dir)?;
        let log_format = self.log_format()?;
        let (sandbox, unsafe_no_sandbox) = self.sandbox()?;
        let private_key = self.github_private_key()?;
        let models = self.models()?;
        let model_proxy = self.model_proxy(&data_dir)?;
        let queue = self.queue()?;
        let workspaces = self.workspaces()?;
        let github = self.github(private_key)?;
        let gitlab = self.gitlab()?;
        let images = self.images()?;
        Ok(Settings {
            listen,
            database_url,
            data_dir,
            github_url: github.web_url.clone(),
            public_url: self
                .text("public_url")
                .unwrap_or("http://localhost:3000")
                .trim_end_matches('/')
                .to_owned(),
            github,
            gitlab,
            models,
            sandbox,
            unsafe_no_sandbox,
            sandbox_relay: self.text("sandbox_relay").map(PathBuf::from),
            secret_files: ["github_private_key", "model_prices", "registry_auth"]
                .into_iter()
                .filter_map(|key| self.text(key))
                // Inline values (a PEM, TOML with `=`) are no file.
                .filter(|v| !v.starts_with("-----BEGIN") && !v.contains('='))
                .map(PathBuf::from)
                .collect(),
            log_format,
            webhook_body_limit: self
                .positive("webhook_body_limit")?
                .map_or(25 * 1024 * 1024, |v| v as usize),
            webhook_body_reads: self
                .positive("webhook_body_reads")?
                .map_or(8, |v| v as usize),
            queue,
            model_proxy,
            workspaces,
            executor_timeout: self
                .positive("executor_timeout_secs")?
                .map_or(EXECUTOR_TIMEOUT, Duration::from_secs),
            setup_token: self.token("setup_token")?,
            admin_token: self.token("admin_token")?,
            access_check: self
                .parsed::<u64>("access_check_secs", "a number of seconds")?
                .map_or(ACCESS_CHECK, Duration::from_secs),
            map_tokens: match self.positive("map_tokens")? {
                None => MAP_TOKENS,
                Some(n) if n >= MAP_TOKENS_MIN as u64 => n as usize,
                Some(n) => anyhow::bail!(
                    "Cannot use {} = {n}: the repository map needs at least {MAP_TOKENS_MIN} tokens to say what the repository holds",
                    self.source("map_tokens")
                ),
            },
            sparse_checkout_files: self
                .parsed::<u64>("sparse_checkout_files", "a number of files")?
                .map_or(SPARSE_CHECKOUT_FILES, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            metrics_token: self.token("metrics_token")?,
            metrics_listen: match self.text("metrics_listen") {
                None => None,
                Some(addr) => Some(addr.parse::<SocketAddr>().map_err(|_| {
                    anyhow::anyhow!(
                        "Cannot use {}: expected an address such as 0.0.0.0:9091, got `{addr}`",
                        self.source("metrics_listen")
                    )
                })?),
            },
            images,
            warnings: self.warnings,
        })
    }

    fn listen(&self) -> Result<SocketAddr> {
        Ok(
            match (
                self.text("listen"),
                self.parsed::<u16>("port", "a port number")?,
            ) {
                (Some(addr), _) => addr.parse::<SocketAddr>().map_err(|_| {
                    anyhow::anyhow!(
                        "Cannot use {}: expected an address such as 0.0.0.0:3000, got `{addr}`",
                        self.source("listen")
                    )
                })?,
                (None, Some(port)) => SocketAddr::from(([0, 0, 0, 0], port)),
                (None, None) => SocketAddr::from(([0, 0, 0, 0], 3000)),
            },
        )
    }

    fn database_url(&self, data_dir: &Path) -> Result<String> {
        Ok(match self.text("database_url") {
            Some(url) => {
                if !(url.starts_with("sqlite:")
                    || url.starts_with("postgres://")
                    || url.starts_with("postgresql://"))
                {
                    bail!(
                        "Cannot use {}: planwright stores its data in SQLite (sqlite://FILE) or PostgreSQL (postgres://…)",
                        self.source("database_url")
                    );
                }
                url.to_owned()
            }
            None => format!("sqlite://{}/planwright.db", data_dir.display()),
        })
    }

    fn log_format(&self) -> Result<LogFormat> {
        Ok(match self.text("log_format").unwrap_or("text") {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => bail!(
                "Cannot use {}: expected `text` or `json`, got `{other}`",
                self.source("log_format")
            ),
        })
    }

    /// The sandbox's name and whether running without one was allowed.
    fn sandbox(&self) -> Result<(String, bool)> {
        let sandbox = self.text("sandbox").unwrap_or("bwrap").to_owned();
        let unsafe_no_sandbox = match self.text("unsafe_no_sandbox") {
            None => false,
            Some("1" | "true" | "yes") => true,
            Some("0" | "false" | "no") => false,
            Some(other) => bail!(
                "Cannot use {}: expected 1 or 0, got `{other}`",
                self.source("unsafe_no_sandbox")
            ),
        };
        match sandbox.as_str() {
            "bwrap" => {}
            "none" if unsafe_no_sandbox => {}
            "none" => bail!(
                "Cannot run executors without a sandbox unless UNSAFE_NO_SANDBOX=1 is set as well ({})",
                self.source("sandbox")
            ),
            other => bail!(
                "Cannot use {}: expected `bwrap` or `none`, got `{other}`",
                self.source("sandbox")
            ),
        }
        Ok((sandbox, unsafe_no_sandbox))
    }

    fn github_private_key(&self) -> Result<Option<SecretString>> {
        Ok(match self.text("github_private_key") {
            None => None,
            Some(pem) if pem.starts_with("-----BEGIN") => Some(SecretString::from(pem.to_owned())),
            Some(path) => Some(SecretString::from(
                std::fs::read_to_string(path).with_context(|| {
                    format!(
                        "Could not read the GitHub App private key named by {}",
                        self.source("github_private_key")
                    )
                })?,
            )),
        })
    }

    fn models(&self) -> Result<ModelSettings> {
        for key in ["planner_model", "scout_model", "executor_model"] {
            if let Some(name) = self.text(key) {
                crate::ids::ModelName::parse(name)
                    .with_context(|| format!("Cannot use {}", self.source(key)))?;
            }
        }
        let prices = match self.text("model_prices") {
            None => prices::PriceTable::default(),
            Some(value) => {
                // Inline TOML always has a `=`; a path never needs one.
                let text = if value.contains('=') {
                    value.to_owned()
                } else {
                    std::fs::read_to_string(value).with_context(|| {
                        format!(
                            "Could not read the price file named by {}",
                            self.source("model_prices")
                        )
                    })?
                };
                prices::PriceTable::with_overrides(&text)
                    .with_context(|| format!("Cannot use {}", self.source("model_prices")))?
            }
        };
        Ok(ModelSettings {
            anthropic_api_key: self.secret("anthropic_api_key"),
            anthropic_base_url: self
                .text("anthropic_base_url")
                .unwrap_or("https://api.anthropic.com")
                .to_owned(),
            openai_api_key: self.secret("openai_api_key"),
            openai_base_url: self
                .text("openai_base_url")
                .unwrap_or("https://api.openai.com/v1")
                .to_owned(),
            planner: self.text("planner_model").map(str::to_owned),
            scout: self.text("scout_model").map(str::to_owned),
            executor: self.text("executor_model").map(str::to_owned),
            prices,
        })
    }

    fn model_proxy(&self, data_dir: &Path) -> Result<ProxyListen> {
        Ok(
            match (
                self.text("model_proxy_listen"),
                self.text("model_proxy_socket"),
            ) {
                (Some(_), Some(_)) => bail!(
                    "Cannot use both {} and {}: the model proxy listens on one of them",
                    self.source("model_proxy_listen"),
                    self.source("model_proxy_socket")
                ),
                (Some(addr), None) => {
                    let parsed = addr.parse::<SocketAddr>().map_err(|_| {
                        anyhow::anyhow!(
                            "Cannot use {}: expected a loopback address such as 127.0.0.1:3001, got `{addr}`",
                            self.source("model_proxy_listen")
                        )
                    })?;
                    // Anyone who can reach the proxy can try tokens against it.
                    if !parsed.ip().is_loopback() {
                        bail!(
                            "Cannot use {}: the model proxy listens on loopback only (127.0.0.1 or [::1]), not `{addr}`",
                            self.source("model_proxy_listen")
                        );
                    }
                    ProxyListen::Tcp(parsed)
                }
                // Only planwright's own sockets are bound through their folder when long:
                // one the operator names is reached by that name by whatever they point
                // at it.
                (None, Some(path)) if !crate::unix_socket::fits(Path::new(path)) => bail!(
                    "Cannot use {} as the model proxy socket: a Unix socket path holds at \
                     most {} bytes, and `{path}` has {}; choose a shorter path, or leave it \
                     unset for the socket in DATA_DIR (of any length)",
                    self.source("model_proxy_socket"),
                    crate::unix_socket::MAX_PATH_BYTES,
                    path.len()
                ),
                (None, Some(path)) => ProxyListen::Unix(PathBuf::from(path)),
                (None, None) => ProxyListen::Unix(data_dir.join("model-proxy.sock")),
            },
        )
    }

    fn queue(&self) -> Result<QueueSettings> {
        let defaults = QueueSettings::default();
        Ok(QueueSettings {
            workers: self
                .positive("workers")?
                .map_or(defaults.workers, |v| v as usize),
            max_runs: self
                .positive("max_runs")?
                .map_or(defaults.max_runs, |v| v as usize),
            max_runs_per_installation: self
                .positive("max_runs_per_installation")?
                .map(|v| v as usize),
            lease: self
                .positive("job_lease_secs")?
                .map_or(defaults.lease, Duration::from_secs),
            max_attempts: self
                .positive("job_max_attempts")?
                .map_or(defaults.max_attempts, |v| v as i64),
            retry_base: self
                .positive("job_retry_base_ms")?
                .map_or(defaults.retry_base, Duration::from_millis),
            retry_max: self
                .positive("job_retry_max_secs")?
                .map_or(defaults.retry_max, Duration::from_secs),
            poll_interval: self
                .positive("job_poll_ms")?
                .map_or(defaults.poll_interval, Duration::from_millis),
            shutdown_grace: self
                .parsed::<u64>("shutdown_grace_secs", "a number of seconds")?
                .map_or(defaults.shutdown_grace, Duration::from_secs),
        })
    }

    fn workspaces(&self) -> Result<WorkspaceSettings> {
        let defaults = WorkspaceSettings::default();
        let workspaces = WorkspaceSettings {
            keep_failed: self
                .parsed::<u64>("workspace_keep_failed_secs", "a number of seconds")?
                .map_or(defaults.keep_failed, Duration::from_secs),
            // Workspaces read their history from the mirror: it must outlive the failed
            // ones kept for inspection.
            mirror_unused: match self.positive("mirror_unused_days")? {
                None => defaults.mirror_unused,
                Some(days) => Duration::from_secs(days.saturating_mul(24 * 3600)),
            },
            mirror_partial: self
                .text("mirror_partial")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            mirror_partial_above: match self.text("mirror_partial_above") {
                None => None,
                Some(text) => match images::parse_size(text) {
                    Some(size) if size > 0 => Some(size),
                    _ => bail!(
                        "Cannot use {}: expected a size such as `2G`, `500M` or a number of bytes, got `{text}`",
                        self.source("mirror_partial_above")
                    ),
                },
            },
        };
        for pattern in &workspaces.mirror_partial {
            if globset::Glob::new(pattern).is_err() {
                bail!(
                    "Cannot use {}: `{pattern}` is not a repository pattern such as `acme/monorepo`, `acme/*` or `*`",
                    self.source("mirror_partial")
                );
            }
        }
        if workspaces.mirror_unused <= workspaces.keep_failed {
            bail!(
                "Cannot use {}: mirrors must be kept longer than failed workspaces ({} seconds), which read their history from them",
                self.source("mirror_unused_days"),
                workspaces.keep_failed.as_secs()
            );
        }
        Ok(workspaces)
    }

    fn github(&self, private_key: Option<SecretString>) -> Result<GithubSettings> {
        let api_url = self
            .text("github_api_url")
            .unwrap_or("https://api.github.com")
            .trim_end_matches('/')
            .to_owned();
        Ok(GithubSettings {
            app_id: self.parsed("github_app_id", "a numeric app id")?,
            private_key,
            webhook_secrets: self.secrets("github_webhook_secret"),
            web_url: self.github_url(&api_url),
            api_url,
            rate_limit_wait: self.rate_limit_wait()?,
            client_id: self.text("github_client_id").map(str::to_owned),
            client_secret: self.secret("github_client_secret"),
        })
    }

    /// GitHub.com's web side is not its API host, nor is a GHE.com subdomain's
    /// (`api.SUB.ghe.com` serves `SUB.ghe.com`); Enterprise Server's API lives under the
    /// instance at /api/v3. Any other layout is named with `GITHUB_URL`.
    fn github_url(&self, api_url: &str) -> String {
        if let Some(url) = self.text("github_url") {
            return url.trim_end_matches('/').to_owned();
        }
        if let Some(host) = api_url.strip_prefix("https://api.")
            && (host == "github.com" || host.ends_with(".ghe.com"))
        {
            return format!("https://{host}");
        }
        api_url
            .strip_suffix("/api/v3")
            .unwrap_or(api_url)
            .to_owned()
    }

    fn rate_limit_wait(&self) -> Result<Duration> {
        Ok(self
            .parsed::<u64>("rate_limit_wait_secs", "a number of seconds")?
            .map_or(RATE_LIMIT_WAIT, Duration::from_secs))
    }

    fn gitlab(&self) -> Result<GitlabSettings> {
        Ok(GitlabSettings {
            url: self
                .text("gitlab_url")
                .map(|u| u.trim_end_matches('/').to_owned()),
            token: self.secret("gitlab_token"),
            webhook_secrets: self.secrets("gitlab_webhook_secret"),
            project_secrets: self.project_secrets("gitlab_webhook_secrets")?,
            rate_limit_wait: self.rate_limit_wait()?,
            client_id: self.text("gitlab_client_id").map(str::to_owned),
            client_secret: self.secret("gitlab_client_secret"),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_put_sqlite_under_the_data_dir() {
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_DATA_DIR", "/srv/pw")])).unwrap();
        assert_eq!(s.database_url, "sqlite:///srv/pw/planwright.db");
        assert_eq!(s.listen.to_string(), "0.0.0.0:3000");
        assert_eq!(s.webhook_body_limit, 25 * 1024 * 1024);
    }

    #[test]
    fn gitlab_project_secrets_pair_a_path_with_a_secret_and_errors_never_show_one() {
        let s = Settings::from_sources(
            None,
            &env(&[(
                "PLANWRIGHT_GITLAB_WEBHOOK_SECRETS",
                " Grp/Sub/Proj = s1 ,other/proj=s2=x,",
            )]),
        )
        .unwrap();
        let pairs: Vec<(String, String)> = s
            .gitlab_project_secrets()
            .map(|(p, secret)| (p.to_string(), String::from_utf8_lossy(secret).into_owned()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("grp/sub/proj".to_owned(), "s1".to_owned()),
                ("other/proj".to_owned(), "s2=x".to_owned())
            ]
        );
        for bad in ["grp/proj=s1,hunter2", "noslash=hunter2", "grp/proj="] {
            let e =
                Settings::from_sources(None, &env(&[("PLANWRIGHT_GITLAB_WEBHOOK_SECRETS", bad)]))
                    .unwrap_err()
                    .to_string();
            assert!(e.contains("GITLAB_WEBHOOK_SECRETS"), "{e}");
            assert!(e.contains("group/project=secret"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn environment_overrides_the_file_and_secrets_rotate() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:4000\"\ngithub_webhook_secret = \"old\"\nworkers = 2\n",
        )
        .unwrap();
        let s = Settings::from_sources(
            Some(&file),
            &env(&[("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "new, old ,")]),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:4000");
        assert_eq!(s.queue.workers, 2);
        let secrets: Vec<&[u8]> = s.github_secrets().collect();
        assert_eq!(secrets, vec![b"new".as_slice(), b"old".as_slice()]);
    }

    #[test]
    fn port_and_unprefixed_model_keys_are_read() {
        let s =
            Settings::from_sources(None, &env(&[("PORT", "8080"), ("ANTHROPIC_API_KEY", "k1")]))
                .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(s.models.anthropic_api_key.unwrap().expose_secret(), "k1");
    }

    #[test]
    fn the_environment_overrides_the_file_address_and_unknown_variables_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:4000\"\n").unwrap();
        let s = Settings::from_sources(
            Some(&file),
            &env(&[("PORT", "8080"), ("PLANWRIGHT_WORKRES", "2")]),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("PLANWRIGHT_WORKRES"));
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_LISTEN", "127.0.0.1:9"), ("PORT", "8080")]),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:9");
        // An empty value means unset, for numbers as for text.
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_WORKERS", "")])).unwrap();
        assert_eq!(s.queue.workers, QueueSettings::default().workers);
    }

    #[test]
    fn bad_values_name_their_source() {
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_WORKERS", "many")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("PLANWRIGHT_WORKERS"), "{err}");
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_SANDBOX", "none")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("UNSAFE_NO_SANDBOX"), "{err}");
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_DATABASE_URL", "mysql://x")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("PostgreSQL"), "{err}");
    }

    #[test]
    fn tokens_that_guard_pages_must_be_long_enough() {
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_SETUP_TOKEN", "hunter2")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PLANWRIGHT_SETUP_TOKEN") && err.contains("at least 16"),
            "{err}"
        );
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_SETUP_TOKEN", "0123456789abcdef")]),
        )
        .unwrap();
        assert_eq!(s.setup_token.unwrap().expose_secret(), "0123456789abcdef");
    }

    #[test]
    fn model_names_and_prices_are_checked_with_their_source() {
        let err = format!(
            "{:#}",
            Settings::from_sources(None, &env(&[("PLANWRIGHT_PLANNER_MODEL", "gemini:pro")]))
                .unwrap_err()
        );
        assert!(
            err.contains("PLANWRIGHT_PLANNER_MODEL") && err.contains("gemini"),
            "{err}"
        );
        let s = Settings::from_sources(
            None,
            &env(&[(
                "PLANWRIGHT_MODEL_PRICES",
                "[\"openai:local\"]\ninput = 0.5\noutput = 1.5",
            )]),
        )
        .unwrap();
        let local = crate::ids::ModelName::parse("openai:local").unwrap();
        assert_eq!(s.models.prices.get(&local).unwrap().output, 1.5);
        let err = format!(
            "{:#}",
            Settings::from_sources(None, &env(&[("PLANWRIGHT_MODEL_PRICES", "/no/such.toml")]))
                .unwrap_err()
        );
        assert!(err.contains("PLANWRIGHT_MODEL_PRICES"), "{err}");
    }

    #[test]
    fn the_model_proxy_listens_on_a_socket_or_loopback_only() {
        use ProxyListen;
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_DATA_DIR", "/srv/pw")])).unwrap();
        assert_eq!(
            s.model_proxy,
            ProxyListen::Unix(PathBuf::from("/srv/pw/model-proxy.sock"))
        );
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_MODEL_PROXY_LISTEN", "127.0.0.1:0")]),
        )
        .unwrap();
        assert_eq!(
            s.model_proxy,
            ProxyListen::Tcp("127.0.0.1:0".parse().unwrap())
        );
        let err = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_MODEL_PROXY_LISTEN", "0.0.0.0:3001")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("PLANWRIGHT_MODEL_PROXY_LISTEN") && err.contains("loopback"),
            "{err}"
        );
        let err = Settings::from_sources(
            None,
            &env(&[
                ("PLANWRIGHT_MODEL_PROXY_LISTEN", "127.0.0.1:3001"),
                ("PLANWRIGHT_MODEL_PROXY_SOCKET", "/run/pw.sock"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("PLANWRIGHT_MODEL_PROXY_SOCKET"), "{err}");
        // A socket the operator names must fit in a socket address; DATA_DIR's need not.
        let long = format!("/srv/{}/model-proxy.sock", "p".repeat(90));
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_MODEL_PROXY_SOCKET", &long)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PLANWRIGHT_MODEL_PROXY_SOCKET") && err.contains("at most 107 bytes"),
            "{err}"
        );
        let fits = format!("/srv/{}/model-proxy.sock", "p".repeat(80));
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_MODEL_PROXY_SOCKET", &fits)]))
            .unwrap();
        assert_eq!(s.model_proxy, ProxyListen::Unix(PathBuf::from(fits)));
        let data = format!("/srv/{}", "p".repeat(120));
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_DATA_DIR", &data)])).unwrap();
        assert_eq!(
            s.model_proxy,
            ProxyListen::Unix(Path::new(&data).join("model-proxy.sock"))
        );
    }

    #[test]
    fn a_registered_app_fills_only_what_the_settings_leave_unset() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().display().to_string();
        github_app::RegisteredApp {
            id: 99,
            slug: "pw".into(),
            html_url: "https://github.com/apps/pw".into(),
            pem: SecretString::from("-----BEGIN RSA PRIVATE KEY-----\nstored\n"),
            webhook_secret: SecretString::from("stored-hook"),
            client_id: "Iv1.x".into(),
            client_secret: SecretString::from("c"),
        }
        .save(dir.path())
        .unwrap();
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_DATA_DIR", &data)])).unwrap();
        assert_eq!(s.github.app_id, Some(99));
        let secrets: Vec<&[u8]> = s.github_secrets().collect();
        assert_eq!(secrets, vec![b"stored-hook".as_slice()]);
        let s = Settings::from_sources(
            None,
            &env(&[
                ("PLANWRIGHT_DATA_DIR", &data),
                ("PLANWRIGHT_GITHUB_APP_ID", "5"),
                ("PLANWRIGHT_GITHUB_PRIVATE_KEY", "-----BEGIN explicit"),
                ("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "explicit-hook"),
            ]),
        )
        .unwrap();
        assert_eq!(s.github.app_id, Some(5));
        assert_eq!(
            s.github.private_key.as_ref().unwrap().expose_secret(),
            "-----BEGIN explicit"
        );
        let secrets: Vec<&[u8]> = s.github_secrets().collect();
        assert_eq!(secrets, vec![b"explicit-hook".as_slice()]);
    }

    #[test]
    fn the_github_web_address_follows_the_api_address() {
        let s = Settings::from_sources(None, &[]).unwrap();
        assert_eq!(s.github_url, "https://github.com");
        let s = Settings::from_sources(
            None,
            &env(&[(
                "PLANWRIGHT_GITHUB_API_URL",
                "https://ghe.example.com/api/v3/",
            )]),
        )
        .unwrap();
        assert_eq!(s.github_url, "https://ghe.example.com");
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_GITHUB_URL", "https://git.example.com/")]),
        )
        .unwrap();
        assert_eq!(s.github_url, "https://git.example.com");
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_GITHUB_API_URL", "https://api.octo.ghe.com")]),
        )
        .unwrap();
        assert_eq!(s.github_url, "https://octo.ghe.com");
        assert_eq!(s.github.web_url, s.github_url, "git is served there too");
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw.toml");
        std::fs::write(&file, "listne = \"127.0.0.1:4000\"\n").unwrap();
        let err = format!(
            "{:#}",
            Settings::from_sources(Some(&file), &[]).unwrap_err()
        );
        assert!(err.contains("listne"), "{err}");
    }

    #[test]
    fn partial_mirrors_are_named_by_repository_patterns() {
        let s = Settings::from_sources(None, &[]).unwrap();
        assert!(s.workspaces.mirror_partial.is_empty());
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_MIRROR_PARTIAL", "acme/*, big/monorepo ,")]),
        )
        .unwrap();
        assert_eq!(s.workspaces.mirror_partial, ["acme/*", "big/monorepo"]);
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_MIRROR_PARTIAL", "acme/[")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("Cannot use the environment variable PLANWRIGHT_MIRROR_PARTIAL: `acme/[` is not a repository pattern"),
            "{err}"
        );
    }

    #[test]
    fn partial_mirrors_above_a_size() {
        let s = Settings::from_sources(None, &[]).unwrap();
        assert_eq!(s.workspaces.mirror_partial_above, None);
        let s = Settings::from_sources(None, &env(&[("PLANWRIGHT_MIRROR_PARTIAL_ABOVE", "2G")]))
            .unwrap();
        assert_eq!(s.workspaces.mirror_partial_above, Some(2 << 30));
        for bad in ["0", "big", "-1"] {
            let err =
                Settings::from_sources(None, &env(&[("PLANWRIGHT_MIRROR_PARTIAL_ABOVE", bad)]))
                    .unwrap_err()
                    .to_string();
            assert!(
                err.starts_with("Cannot use the environment variable PLANWRIGHT_MIRROR_PARTIAL_ABOVE: expected a size"),
                "{err}"
            );
        }
    }

    #[test]
    fn workspace_keeping_times_are_read_and_checked_against_each_other() {
        let s = Settings::from_sources(None, &[]).unwrap();
        assert_eq!(s.workspaces.keep_failed, Duration::from_secs(86400));
        assert_eq!(s.workspaces.mirror_unused, Duration::from_secs(30 * 86400));
        let s = Settings::from_sources(
            None,
            &env(&[
                ("PLANWRIGHT_WORKSPACE_KEEP_FAILED_SECS", "600"),
                ("PLANWRIGHT_MIRROR_UNUSED_DAYS", "2"),
            ]),
        )
        .unwrap();
        assert_eq!(s.workspaces.keep_failed, Duration::from_secs(600));
        assert_eq!(s.workspaces.mirror_unused, Duration::from_secs(2 * 86400));
        let err = Settings::from_sources(
            None,
            &env(&[
                ("PLANWRIGHT_WORKSPACE_KEEP_FAILED_SECS", "864000"),
                ("PLANWRIGHT_MIRROR_UNUSED_DAYS", "3"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("Cannot use the environment variable PLANWRIGHT_MIRROR_UNUSED_DAYS: mirrors must be kept longer"),
            "{err}"
        );
    }
}
