//! Loading the settings: the file and the environment (`keys`), each value checked, once,
//! with its source named in the error, into typed [`Settings`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use secrecy::SecretString;

use super::images::{self, ImageSettings};
use super::keys::Raw;
use super::settings::{
    ACCESS_CHECK, EXECUTOR_TIMEOUT, GithubSettings, GitlabSettings, LogFormat, MAP_TOKENS,
    MAP_TOKENS_MIN, ModelSettings, ProxyListen, QueueSettings, RATE_LIMIT_WAIT,
    SPARSE_CHECKOUT_FILES, Settings, WorkspaceSettings,
};
use super::{github_app, prices};

const DEFAULT_CONFIG_FILE: &str = "planwright.toml";

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
            Some(path) => Raw::from_file(path)?,
            None => Raw::empty(),
        };
        raw.apply_env(env);
        if let Some(dir) = data_dir {
            raw.data_dir.default_to(dir.display().to_string());
        }
        let mut settings = finish(raw)?;
        settings
            .secret_files
            .extend(config_file.map(Path::to_path_buf));
        if let Some(app) = github_app::RegisteredApp::load(&settings.data_dir)? {
            settings.github = settings.github.with_registered(&app);
        }
        Ok(settings)
    }
}

/// Every setting checked and typed. The steps run in this order so that, of several
/// bad values, the same one is always reported first.
fn finish(raw: Raw) -> Result<Settings> {
    let listen = listen(&raw)?;
    let data_dir = PathBuf::from(raw.data_dir.text().unwrap_or("./data"));
    let database_url = database_url(&raw, &data_dir)?;
    let log_format = log_format(&raw)?;
    let (sandbox, unsafe_no_sandbox) = sandbox(&raw)?;
    let private_key = github_private_key(&raw)?;
    let models = models(&raw)?;
    let model_proxy = model_proxy(&raw, &data_dir)?;
    let queue = queue(&raw)?;
    let workspaces = workspaces(&raw)?;
    let github = github(&raw, private_key)?;
    let gitlab = gitlab(&raw)?;
    let images = ImageSettings::from_raw(&raw)?;
    Ok(Settings {
        listen,
        database_url,
        data_dir,
        github_url: github.web_url.clone(),
        public_url: raw
            .public_url
            .text()
            .unwrap_or("http://localhost:3000")
            .trim_end_matches('/')
            .to_owned(),
        github,
        gitlab,
        models,
        sandbox,
        unsafe_no_sandbox,
        escalate: match raw.escalate.text() {
            None | Some("0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(other) => bail!(
                "Cannot use {}: expected 1 or 0, got `{other}`",
                raw.escalate.source()
            ),
        },
        sandbox_relay: raw.sandbox_relay.text().map(PathBuf::from),
        secret_files: [
            &raw.github_private_key,
            &raw.model_prices,
            &raw.registry_auth,
        ]
        .into_iter()
        .filter_map(|setting| setting.text())
        // Inline values (a PEM, TOML with `=`) are no file.
        .filter(|v| !v.starts_with("-----BEGIN") && !v.contains('='))
        .map(PathBuf::from)
        .collect(),
        log_format,
        webhook_body_limit: raw
            .webhook_body_limit
            .positive()?
            .map_or(25 * 1024 * 1024, |v| v as usize),
        webhook_body_reads: raw.webhook_body_reads.positive()?.map_or(8, |v| v as usize),
        queue,
        model_proxy,
        workspaces,
        executor_timeout: raw
            .executor_timeout_secs
            .positive()?
            .map_or(EXECUTOR_TIMEOUT, Duration::from_secs),
        setup_token: raw.setup_token.token()?,
        admin_token: raw.admin_token.token()?,
        access_check: raw
            .access_check_secs
            .parsed::<u64>("a number of seconds")?
            .map_or(ACCESS_CHECK, Duration::from_secs),
        map_tokens: match raw.map_tokens.positive()? {
            None => MAP_TOKENS,
            Some(n) if n >= MAP_TOKENS_MIN as u64 => n as usize,
            Some(n) => anyhow::bail!(
                "Cannot use {} = {n}: the repository map needs at least {MAP_TOKENS_MIN} tokens to say what the repository holds",
                raw.map_tokens.source()
            ),
        },
        sparse_checkout_files: raw
            .sparse_checkout_files
            .parsed::<u64>("a number of files")?
            .map_or(SPARSE_CHECKOUT_FILES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
        routing_groups: routing_groups(&raw)?,
        metrics_token: raw.metrics_token.token()?,
        metrics_listen: match raw.metrics_listen.text() {
            None => None,
            Some(addr) => Some(addr.parse::<SocketAddr>().map_err(|_| {
                anyhow::anyhow!(
                    "Cannot use {}: expected an address such as 0.0.0.0:9091, got `{addr}`",
                    raw.metrics_listen.source()
                )
            })?),
        },
        images,
        warnings: raw.warnings,
    })
}

/// `ROUTING_GROUPS`: comma-separated repository globs, each checked.
fn routing_groups(raw: &Raw) -> Result<Vec<String>> {
    let groups = raw.routing_groups.list();
    for pattern in &groups {
        if globset::Glob::new(pattern).is_err() {
            anyhow::bail!(
                "Cannot use {}: `{pattern}` is not a repository pattern such as `acme/*`",
                raw.routing_groups.source()
            );
        }
    }
    Ok(groups)
}

fn listen(raw: &Raw) -> Result<SocketAddr> {
    Ok(
        match (raw.listen.text(), raw.port.parsed::<u16>("a port number")?) {
            (Some(addr), _) => addr.parse::<SocketAddr>().map_err(|_| {
                anyhow::anyhow!(
                    "Cannot use {}: expected an address such as 0.0.0.0:3000, got `{addr}`",
                    raw.listen.source()
                )
            })?,
            (None, Some(port)) => SocketAddr::from(([0, 0, 0, 0], port)),
            (None, None) => SocketAddr::from(([0, 0, 0, 0], 3000)),
        },
    )
}

fn database_url(raw: &Raw, data_dir: &Path) -> Result<String> {
    Ok(match raw.database_url.text() {
        Some(url) => {
            if !(url.starts_with("sqlite:")
                || url.starts_with("postgres://")
                || url.starts_with("postgresql://"))
            {
                bail!(
                    "Cannot use {}: planwright stores its data in SQLite (sqlite://FILE) or PostgreSQL (postgres://…)",
                    raw.database_url.source()
                );
            }
            url.to_owned()
        }
        None => format!("sqlite://{}/planwright.db", data_dir.display()),
    })
}

fn log_format(raw: &Raw) -> Result<LogFormat> {
    Ok(match raw.log_format.text().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => bail!(
            "Cannot use {}: expected `text` or `json`, got `{other}`",
            raw.log_format.source()
        ),
    })
}

/// The sandbox's name and whether running without one was allowed.
fn sandbox(raw: &Raw) -> Result<(String, bool)> {
    let sandbox = raw.sandbox.text().unwrap_or("bwrap").to_owned();
    let unsafe_no_sandbox = match raw.unsafe_no_sandbox.text() {
        None => false,
        Some("1" | "true" | "yes") => true,
        Some("0" | "false" | "no") => false,
        Some(other) => bail!(
            "Cannot use {}: expected 1 or 0, got `{other}`",
            raw.unsafe_no_sandbox.source()
        ),
    };
    match sandbox.as_str() {
        "bwrap" => {}
        "none" if unsafe_no_sandbox => {}
        "none" => bail!(
            "Cannot run executors without a sandbox unless UNSAFE_NO_SANDBOX=1 is set as well ({})",
            raw.sandbox.source()
        ),
        other => bail!(
            "Cannot use {}: expected `bwrap` or `none`, got `{other}`",
            raw.sandbox.source()
        ),
    }
    Ok((sandbox, unsafe_no_sandbox))
}

fn github_private_key(raw: &Raw) -> Result<Option<SecretString>> {
    Ok(match raw.github_private_key.text() {
        None => None,
        Some(pem) if pem.starts_with("-----BEGIN") => Some(SecretString::from(pem.to_owned())),
        Some(path) => Some(SecretString::from(
            std::fs::read_to_string(path).with_context(|| {
                format!(
                    "Could not read the GitHub App private key named by {}",
                    raw.github_private_key.source()
                )
            })?,
        )),
    })
}

fn models(raw: &Raw) -> Result<ModelSettings> {
    for setting in [&raw.planner_model, &raw.scout_model, &raw.executor_model] {
        if let Some(name) = setting.text() {
            crate::ids::ModelName::parse(name)
                .with_context(|| format!("Cannot use {}", setting.source()))?;
        }
    }
    let prices = match raw.model_prices.text() {
        None => prices::PriceTable::default(),
        Some(value) => {
            // Inline TOML always has a `=`; a path never needs one.
            let text = if value.contains('=') {
                value.to_owned()
            } else {
                std::fs::read_to_string(value).with_context(|| {
                    format!(
                        "Could not read the price file named by {}",
                        raw.model_prices.source()
                    )
                })?
            };
            prices::PriceTable::with_overrides(&text)
                .with_context(|| format!("Cannot use {}", raw.model_prices.source()))?
        }
    };
    Ok(ModelSettings {
        anthropic_api_key: raw.anthropic_api_key.secret(),
        anthropic_base_url: raw
            .anthropic_base_url
            .text()
            .unwrap_or("https://api.anthropic.com")
            .to_owned(),
        openai_api_key: raw.openai_api_key.secret(),
        openai_base_url: raw
            .openai_base_url
            .text()
            .unwrap_or("https://api.openai.com/v1")
            .to_owned(),
        planner: raw.planner_model.text().map(str::to_owned),
        scout: raw.scout_model.text().map(str::to_owned),
        executor: raw.executor_model.text().map(str::to_owned),
        prices,
    })
}

fn model_proxy(raw: &Raw, data_dir: &Path) -> Result<ProxyListen> {
    Ok(
        match (raw.model_proxy_listen.text(), raw.model_proxy_socket.text()) {
            (Some(_), Some(_)) => bail!(
                "Cannot use both {} and {}: the model proxy listens on one of them",
                raw.model_proxy_listen.source(),
                raw.model_proxy_socket.source()
            ),
            (Some(addr), None) => {
                let parsed = addr.parse::<SocketAddr>().map_err(|_| {
                    anyhow::anyhow!(
                        "Cannot use {}: expected a loopback address such as 127.0.0.1:3001, got `{addr}`",
                        raw.model_proxy_listen.source()
                    )
                })?;
                // Anyone who can reach the proxy can try tokens against it.
                if !parsed.ip().is_loopback() {
                    bail!(
                        "Cannot use {}: the model proxy listens on loopback only (127.0.0.1 or [::1]), not `{addr}`",
                        raw.model_proxy_listen.source()
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
                raw.model_proxy_socket.source(),
                crate::unix_socket::MAX_PATH_BYTES,
                path.len()
            ),
            (None, Some(path)) => ProxyListen::Unix(PathBuf::from(path)),
            (None, None) => ProxyListen::Unix(data_dir.join("model-proxy.sock")),
        },
    )
}

fn queue(raw: &Raw) -> Result<QueueSettings> {
    let defaults = QueueSettings::default();
    Ok(QueueSettings {
        workers: raw
            .workers
            .positive()?
            .map_or(defaults.workers, |v| v as usize),
        max_runs: raw
            .max_runs
            .positive()?
            .map_or(defaults.max_runs, |v| v as usize),
        max_runs_per_installation: raw
            .max_runs_per_installation
            .positive()?
            .map(|v| v as usize),
        lease: raw
            .job_lease_secs
            .positive()?
            .map_or(defaults.lease, Duration::from_secs),
        max_attempts: raw
            .job_max_attempts
            .positive()?
            .map_or(defaults.max_attempts, |v| v as i64),
        retry_base: raw
            .job_retry_base_ms
            .positive()?
            .map_or(defaults.retry_base, Duration::from_millis),
        retry_max: raw
            .job_retry_max_secs
            .positive()?
            .map_or(defaults.retry_max, Duration::from_secs),
        poll_interval: raw
            .job_poll_ms
            .positive()?
            .map_or(defaults.poll_interval, Duration::from_millis),
        shutdown_grace: raw
            .shutdown_grace_secs
            .parsed::<u64>("a number of seconds")?
            .map_or(defaults.shutdown_grace, Duration::from_secs),
    })
}

fn workspaces(raw: &Raw) -> Result<WorkspaceSettings> {
    let defaults = WorkspaceSettings::default();
    let workspaces = WorkspaceSettings {
        keep_failed: raw
            .workspace_keep_failed_secs
            .parsed::<u64>("a number of seconds")?
            .map_or(defaults.keep_failed, Duration::from_secs),
        // Workspaces read their history from the mirror: it must outlive the failed
        // ones kept for inspection.
        mirror_unused: match raw.mirror_unused_days.positive()? {
            None => defaults.mirror_unused,
            Some(days) => Duration::from_secs(days.saturating_mul(24 * 3600)),
        },
        mirror_partial: raw.mirror_partial.list(),
        mirror_partial_above: match raw.mirror_partial_above.text() {
            None => None,
            Some(text) => match images::parse_size(text) {
                Some(size) if size > 0 => Some(size),
                _ => bail!(
                    "Cannot use {}: expected a size such as `2G`, `500M` or a number of bytes, got `{text}`",
                    raw.mirror_partial_above.source()
                ),
            },
        },
    };
    for pattern in &workspaces.mirror_partial {
        if globset::Glob::new(pattern).is_err() {
            bail!(
                "Cannot use {}: `{pattern}` is not a repository pattern such as `acme/monorepo`, `acme/*` or `*`",
                raw.mirror_partial.source()
            );
        }
    }
    if workspaces.mirror_unused <= workspaces.keep_failed {
        bail!(
            "Cannot use {}: mirrors must be kept longer than failed workspaces ({} seconds), which read their history from them",
            raw.mirror_unused_days.source(),
            workspaces.keep_failed.as_secs()
        );
    }
    Ok(workspaces)
}

fn github(raw: &Raw, private_key: Option<SecretString>) -> Result<GithubSettings> {
    let api_url = raw
        .github_api_url
        .text()
        .unwrap_or("https://api.github.com")
        .trim_end_matches('/')
        .to_owned();
    Ok(GithubSettings {
        app_id: raw.github_app_id.parsed("a numeric app id")?,
        private_key,
        webhook_secrets: raw.github_webhook_secret.secrets(),
        web_url: github_url(raw, &api_url),
        api_url,
        rate_limit_wait: rate_limit_wait(raw)?,
        client_id: raw.github_client_id.text().map(str::to_owned),
        client_secret: raw.github_client_secret.secret(),
    })
}

/// GitHub.com's web side is not its API host, nor is a GHE.com subdomain's
/// (`api.SUB.ghe.com` serves `SUB.ghe.com`); Enterprise Server's API lives under the
/// instance at /api/v3. Any other layout is named with `GITHUB_URL`.
fn github_url(raw: &Raw, api_url: &str) -> String {
    if let Some(url) = raw.github_url.text() {
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

fn rate_limit_wait(raw: &Raw) -> Result<Duration> {
    Ok(raw
        .rate_limit_wait_secs
        .parsed::<u64>("a number of seconds")?
        .map_or(RATE_LIMIT_WAIT, Duration::from_secs))
}

fn gitlab(raw: &Raw) -> Result<GitlabSettings> {
    Ok(GitlabSettings {
        url: raw
            .gitlab_url
            .text()
            .map(|u| u.trim_end_matches('/').to_owned()),
        token: raw.gitlab_token.secret(),
        webhook_secrets: raw.gitlab_webhook_secret.secrets(),
        project_secrets: raw.gitlab_webhook_secrets.project_secrets()?,
        rate_limit_wait: rate_limit_wait(raw)?,
        client_id: raw.gitlab_client_id.text().map(str::to_owned),
        client_secret: raw.gitlab_client_secret.secret(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::KEYS;
    use secrecy::ExposeSecret;

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
    fn every_listed_default_is_what_an_unset_key_gives() {
        let unset = format!("{:?}", Settings::from_sources(None, &[]).unwrap());
        let mut checked = 0;
        // Defaults described in words (`this program`, `<DATA_DIR>/…`) are not values.
        for key in KEYS.iter().filter(|k| {
            !k.default.is_empty() && !k.default.contains(' ') && !k.default.contains('<')
        }) {
            let given = Settings::from_sources(None, &env(&[(&key.env(), key.default)]))
                .unwrap_or_else(|e| panic!("{} = {}: {e:#}", key.key, key.default));
            assert_eq!(format!("{given:?}"), unset, "{}", key.key);
            checked += 1;
        }
        assert!(checked >= 30, "{checked}");
    }

    #[test]
    fn a_mistyped_key_in_the_file_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw.toml");
        std::fs::write(
            &file,
            "workers = 2
max_run = 3
",
        )
        .unwrap();
        let err = format!(
            "{:#}",
            Settings::from_sources(Some(&file), &env(&[("PLANWRIGHT_MAX_RUNS", "3")])).unwrap_err()
        );
        assert!(
            err.starts_with(&format!(
                "Cannot use the settings file {}: unknown key `max_run` at line 2 (known keys: ",
                file.display()
            )) && err.contains(", max_runs, "),
            "{err}"
        );
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
    fn routing_groups_are_repository_globs() {
        let s = Settings::from_sources(None, &[]).unwrap();
        assert!(s.routing_groups.is_empty());
        let s = Settings::from_sources(
            None,
            &env(&[("PLANWRIGHT_ROUTING_GROUPS", "acme/*, ,big/*")]),
        )
        .unwrap();
        assert_eq!(s.routing_groups, ["acme/*", "big/*"]);
        let err = Settings::from_sources(None, &env(&[("PLANWRIGHT_ROUTING_GROUPS", "acme/[")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("Cannot use the environment variable PLANWRIGHT_ROUTING_GROUPS: `acme/[` is not a repository pattern"),
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

    fn load_images(vars: &[(&str, &str)]) -> Result<Settings> {
        let env: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (format!("PLANWRIGHT_{k}"), (*v).to_owned()))
            .chain([(
                "PLANWRIGHT_DATA_DIR".to_owned(),
                "/nonexistent-planwright".to_owned(),
            )])
            .collect();
        Settings::from_sources(None, &env)
    }

    #[test]
    fn settings_check_every_image_key_when_they_load() {
        let dir = tempfile::tempdir().unwrap();
        let auth = dir.path().join("config.json");
        std::fs::write(
            &auth,
            r#"{"auths":{"ghcr.io":{"username":"u","password":"p"}}}"#,
        )
        .unwrap();
        let auth_path = auth.display().to_string();
        let settings = load_images(&[
            ("ENVIRONMENT_IMAGE", "ghcr.io/acme/ci:1.4"),
            ("REGISTRY_AUTH", &auth_path),
            ("REGISTRY_INSECURE", "registry.lan:5000, lab"),
            ("REGISTRY_PRIVATE", "Registry.Corp"),
            ("ENVIRONMENT_CACHE_MAX", "512M"),
            ("SETUP_CACHE_MAX", "2G"),
            ("ENVIRONMENT_PULL_TIMEOUT", "600"),
        ])
        .unwrap();
        let images = &settings.images;
        assert_eq!(
            images.default_image.as_ref().unwrap().to_string(),
            "ghcr.io/acme/ci:1.4"
        );
        let ci = crate::ids::image::ImageRef::parse("ghcr.io/acme/ci:1").unwrap();
        assert!(images.credentials.for_image(&ci).is_some());
        assert_eq!(images.insecure, ["registry.lan:5000", "lab"]);
        assert_eq!(images.private, ["registry.corp"]);
        assert_eq!(images.cache_max, 512 << 20);
        assert_eq!(images.setup_cache_max, 2 << 30);
        assert_eq!(images.pull_timeout, Duration::from_secs(600));
        assert!(
            settings.secret_files.contains(&auth),
            "hidden from sandboxes"
        );
        let defaults = load_images(&[]).unwrap().images;
        assert_eq!(defaults.cache_max, 20 << 30);
        assert_eq!(defaults.setup_cache_max, 10 << 30);
        assert_eq!(defaults.pull_timeout, Duration::from_secs(1800));

        let missing = dir.path().join("absent.json").display().to_string();
        for (key, value, needle) in [
            (
                "ENVIRONMENT_IMAGE",
                "Not An Image",
                "PLANWRIGHT_ENVIRONMENT_IMAGE",
            ),
            ("REGISTRY_INSECURE", "http://lab", "without `http://`"),
            (
                "REGISTRY_PRIVATE",
                "https://corp/",
                "PLANWRIGHT_REGISTRY_PRIVATE",
            ),
            ("ENVIRONMENT_CACHE_MAX", "big", "such as `20G`"),
            ("ENVIRONMENT_CACHE_MAX", "0", "such as `20G`"),
            ("SETUP_CACHE_MAX", "ten", "PLANWRIGHT_SETUP_CACHE_MAX"),
            ("ENVIRONMENT_PULL_TIMEOUT", "0", "positive integer"),
            (
                "ENVIRONMENT_PULL_TIMEOUT",
                "soon",
                "PLANWRIGHT_ENVIRONMENT_PULL_TIMEOUT",
            ),
            ("REGISTRY_AUTH", &missing, "docker login"),
        ] {
            let error = format!("{:#}", load_images(&[(key, value)]).unwrap_err());
            assert!(error.contains(needle), "{key}={value}: {error}");
        }
    }
}
