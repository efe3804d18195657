//! `planwright doctor`: whether this deployment can work — settings, database and
//! migrations, forge credentials, model provider keys, git, executors, disk — plus the
//! sandbox's own checks (`doctor::sandbox`) and the default environment image
//! (`doctor::environment`), one line each saying what to do about it.

mod check;
mod image;
pub mod sandbox;

pub use check::{Check, Status};

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::ExposeSecret;

use crate::config::Settings;
use crate::forge::{ForgeError, RetryPolicy, github::GithubApp, gitlab::GitlabForge};
use crate::ids::{ModelName, Provider};
use crate::store::{self, Db};

/// How long one network check may take before it counts as unreachable.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(15);
/// Below this much free space in DATA_DIR, mirrors and workspaces cannot be made.
const DISK_FAIL_BYTES: u64 = 1 << 30;
/// Below this, a few large repositories fill the disk.
const DISK_WARN_BYTES: u64 = 5 << 30;

/// The settings line, and a warning for each problem that did not stop them loading.
pub fn settings(settings: &Settings) -> Vec<Check> {
    let mut out = vec![Check::ok(
        "settings",
        format!(
            "loaded: LISTEN {}, DATA_DIR {}, DATABASE_URL {}",
            settings.listen,
            settings.data_dir.display(),
            store::redact(&settings.database_url)
        ),
    )];
    out.extend(
        settings
            .warnings
            .iter()
            .map(|w| Check::warn("settings", w.clone())),
    );
    out.push(operator_pages(settings));
    out
}

/// Which of the operator's pages can be reached, and how; none is shown without a token.
fn operator_pages(settings: &Settings) -> Check {
    const NAME: &str = "operator pages";
    let status = if settings.admin_token.is_some() {
        "the operator signs in to the session pages with ADMIN_TOKEN"
    } else {
        "the operator cannot sign in to the session pages (no ADMIN_TOKEN)"
    };
    let metrics = match (
        settings.metrics_listen,
        settings.admin_token.is_some() || settings.metrics_token.is_some(),
    ) {
        (Some(at), _) => format!("/metrics on {at} only (METRICS_LISTEN; keep it private)"),
        (None, true) => "/metrics for METRICS_TOKEN or ADMIN_TOKEN".to_owned(),
        (None, false) => {
            "/metrics refused (no METRICS_TOKEN, ADMIN_TOKEN or METRICS_LISTEN)".to_owned()
        }
    };
    let detail = format!("{status}; {metrics}");
    if settings.admin_token.is_none()
        && settings.metrics_token.is_none()
        && settings.metrics_listen.is_none()
    {
        Check::warn(NAME, detail)
    } else {
        Check::ok(NAME, detail)
    }
}

/// The settings could not be loaded: nothing else can be checked.
pub fn settings_failed(error: &anyhow::Error) -> Check {
    Check::fail(
        "settings",
        format!("{error:#}: fix the setting named above (planwright.toml or PLANWRIGHT_<KEY>)"),
    )
}

/// Every check after the settings. `relay` is the planwright executable that serves
/// bridges inside sandboxes.
pub async fn run(settings: &Settings, relay: Option<PathBuf>) -> Vec<Check> {
    let mut out = vec![
        database(&settings.database_url).await,
        github(settings).await,
        github_installations(settings).await,
        gitlab(settings).await,
        anthropic(settings).await,
        openai(settings).await,
        git().await,
    ];
    for (name, program) in [("executor claude", "claude"), ("executor codex", "codex")] {
        out.push(executor(name, program).await);
    }
    out.extend(
        crate::doctor::sandbox::checks(settings, relay)
            .await
            .into_iter()
            .map(|c| Check {
                name: c.name,
                status: match (c.ok, c.required) {
                    (true, _) => Status::Ok,
                    (false, true) => Status::Fail,
                    (false, false) => Status::Warn,
                },
                detail: c.detail,
            }),
    );
    out.extend(image::checks(settings).await);
    out.push(disk(&settings.data_dir));
    out
}

/// The SQLite file a `sqlite:` URL names (`None` for other databases and in-memory ones).
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

async fn database(url: &str) -> Check {
    const NAME: &str = "database";
    let shown = store::redact(url);
    // Connecting would create the file; the doctor only looks.
    if let Some(file) = sqlite_file(url)
        && !file.exists()
    {
        return Check::warn(
            NAME,
            format!(
                "{} does not exist yet: `planwright migrate` (or `serve`) creates it",
                file.display()
            ),
        );
    }
    let db = match tokio::time::timeout(NETWORK_TIMEOUT, Db::connect(url)).await {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => {
            return Check::fail(
                NAME,
                format!("{e:#}: check DATABASE_URL and that the database server is running"),
            );
        }
        Err(_) => {
            return Check::fail(
                NAME,
                format!(
                    "Could not connect to {shown} within {}s: check DATABASE_URL and the network",
                    NETWORK_TIMEOUT.as_secs()
                ),
            );
        }
    };
    if let Err(e) = db.ping().await {
        return Check::fail(
            NAME,
            format!("{shown} does not answer queries: {e:#}; check DATABASE_URL"),
        );
    }
    let check = migrations(&db, &shown).await;
    db.pool.close().await;
    db.writer.close().await;
    check
}

/// Compares the migrations this binary carries with those the database records, as
/// `serve` would before starting.
async fn migrations(db: &Db, shown: &str) -> Check {
    const NAME: &str = "database";
    let applied = match db.applied_migrations().await {
        Ok(rows) => rows,
        // Without the table nothing was ever applied: all are pending.
        Err(e) if e.to_string().contains("_sqlx_migrations") => Vec::new(),
        Err(e) => {
            return Check::fail(
                NAME,
                format!("Could not read the applied migrations from {shown}: {e}"),
            );
        }
    };
    let known: Vec<_> = store::MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    if let Some((version, ..)) = applied.iter().find(|(_, success, _)| *success == 0) {
        return Check::fail(
            NAME,
            format!(
                "migration {version} failed part-way on {shown}: repair the database by hand, \
                 then run `planwright migrate`"
            ),
        );
    }
    if let Some((version, ..)) = applied
        .iter()
        .find(|(v, ..)| !known.iter().any(|m| m.version == *v))
    {
        return Check::fail(
            NAME,
            format!(
                "{shown} has migration {version}, which this planwright does not know: run the \
                 planwright version that applied it, or a newer one"
            ),
        );
    }
    if let Some(m) = known.iter().find(|m| {
        applied
            .iter()
            .any(|(v, _, sum)| *v == m.version && sum.as_slice() != &*m.checksum)
    }) {
        return Check::fail(
            NAME,
            format!(
                "migration {} ({}) on {shown} differs from this planwright's: the migration \
                 files were changed after it was applied",
                m.version, m.description
            ),
        );
    }
    let pending: Vec<String> = known
        .iter()
        .filter(|m| !applied.iter().any(|(v, ..)| *v == m.version))
        .map(|m| m.version.to_string())
        .collect();
    if pending.is_empty() {
        Check::ok(
            NAME,
            format!("{shown} answers; all {} migrations applied", known.len()),
        )
    } else {
        Check::warn(
            NAME,
            format!(
                "{shown} answers; {} of {} migrations pending ({}): run `planwright migrate` \
                 (`serve` applies them when it starts)",
                pending.len(),
                known.len(),
                pending.join(", ")
            ),
        )
    }
}

/// One forge call given [`NETWORK_TIMEOUT`]; `Err(None)` when it ran out.
async fn once<T>(
    call: impl Future<Output = Result<T, ForgeError>>,
) -> Result<T, Option<ForgeError>> {
    match tokio::time::timeout(NETWORK_TIMEOUT, call).await {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

fn single_attempt() -> RetryPolicy {
    RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    }
}

async fn github(settings: &Settings) -> Check {
    const NAME: &str = "github app";
    let github = &settings.github;
    if github.app_id.is_none() && github.private_key.is_none() {
        return Check::warn(
            NAME,
            "not configured: set GITHUB_APP_ID, GITHUB_PRIVATE_KEY and GITHUB_WEBHOOK_SECRET \
             to serve a GitHub App",
        );
    }
    let app = match GithubApp::from_settings(github) {
        Ok(app) => app.with_retry(single_attempt()),
        Err(e) => return Check::fail(NAME, format!("{e:#}")),
    };
    let login = match once(app.bot_login()).await {
        Ok(login) => login,
        Err(Some(e @ (ForgeError::Refused { .. } | ForgeError::NotFound { .. }))) => {
            return Check::fail(
                NAME,
                format!(
                    "{e}: GitHub does not accept a JWT signed with GITHUB_PRIVATE_KEY for app \
                     GITHUB_APP_ID {}; check both against the app's settings page",
                    github.app_id.unwrap_or_default()
                ),
            );
        }
        Err(Some(e)) => {
            return Check::fail(
                NAME,
                format!("{e}: check GITHUB_API_URL ({})", github.api_url),
            );
        }
        Err(None) => {
            return Check::fail(
                NAME,
                format!(
                    "GET /app on {} did not answer within {}s: check GITHUB_API_URL",
                    github.api_url,
                    NETWORK_TIMEOUT.as_secs()
                ),
            );
        }
    };
    if github.webhook_secrets.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "the app is {login}, but GITHUB_WEBHOOK_SECRET is not set: every GitHub \
                 delivery is refused until it is"
            ),
        );
    }
    Check::ok(
        NAME,
        format!(
            "GET /app on {} answered: the app is {login}",
            github.api_url
        ),
    )
}

/// Whether every installation accepted what the app asks for now: one made before the app
/// asked for more (check suites and statuses, say) keeps its old grant, and the events it
/// lacks never arrive.
async fn github_installations(settings: &Settings) -> Check {
    const NAME: &str = "github installations";
    let github = &settings.github;
    if github.app_id.is_none() || github.private_key.is_none() {
        return Check::ok(NAME, "no GitHub App configured");
    }
    let Ok(app) = GithubApp::from_settings(github) else {
        return Check::warn(NAME, "not checked: the GitHub App settings are not usable");
    };
    let app = app.with_retry(single_attempt());
    let installations = match once(app.installations()).await {
        Ok(found) => found,
        Err(Some(e)) => return Check::warn(NAME, format!("not checked: {e}")),
        Err(None) => return Check::warn(NAME, "not checked: GitHub did not answer in time"),
    };
    let wanted = match crate::onboarding::manifest("http://localhost", "http://localhost") {
        Ok(manifest) => manifest,
        Err(e) => return Check::fail(NAME, format!("{e:#}")),
    };
    let lacking: Vec<String> = installations
        .iter()
        .filter_map(|i| {
            let missing = missing_grants(&wanted, &i.permissions, &i.events);
            (!missing.is_empty()).then(|| {
                format!(
                    "installation {} ({}) has not accepted {}",
                    i.id,
                    i.account,
                    missing.join(", ")
                )
            })
        })
        .collect();
    if lacking.is_empty() {
        return Check::ok(
            NAME,
            format!(
                "{} installation(s), each with every permission and event the app asks for",
                installations.len()
            ),
        );
    }
    Check::warn(
        NAME,
        format!(
            "{}: an owner of each accepts the app's new permissions on GitHub (Settings →              Applications → planwright → review the request); until then those events never              arrive",
            lacking.join("; ")
        ),
    )
}

/// What `manifest` asks for that an installation lacks: `permission: level` and `event`
/// entries.
fn missing_grants(
    manifest: &serde_json::Value,
    permissions: &std::collections::BTreeMap<String, String>,
    events: &[String],
) -> Vec<String> {
    let rank = |level: &str| match level {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 0,
    };
    let mut missing = Vec::new();
    if let Some(wanted) = manifest["default_permissions"].as_object() {
        for (name, level) in wanted {
            let level = level.as_str().unwrap_or_default();
            let granted = permissions.get(name).map_or(0, |g| rank(g));
            if granted < rank(level) {
                missing.push(format!("the permission {name}: {level}"));
            }
        }
    }
    for event in manifest["default_events"].as_array().into_iter().flatten() {
        let event = event.as_str().unwrap_or_default();
        if !events.iter().any(|e| e == event) {
            missing.push(format!("the event {event}"));
        }
    }
    missing
}

async fn gitlab(settings: &Settings) -> Check {
    const NAME: &str = "gitlab token";
    let gitlab = &settings.gitlab;
    if gitlab.url.is_none() && gitlab.token.is_none() {
        return Check::warn(
            NAME,
            "not configured: set GITLAB_URL, GITLAB_TOKEN and GITLAB_WEBHOOK_SECRET to serve \
             GitLab",
        );
    }
    let forge = match GitlabForge::from_settings(gitlab) {
        Ok(forge) => forge.with_retry(single_attempt()),
        Err(e) => return Check::fail(NAME, format!("{e:#}")),
    };
    let url = gitlab.url.as_deref().unwrap_or_default();
    let user = match once(forge.bot_user()).await {
        Ok(user) => user,
        Err(Some(e @ ForgeError::Refused { .. })) => {
            return Check::fail(
                NAME,
                format!(
                    "{e}: {url} does not accept GITLAB_TOKEN; make a token with the `api` scope"
                ),
            );
        }
        Err(Some(e)) => return Check::fail(NAME, format!("{e}: check GITLAB_URL ({url})")),
        Err(None) => {
            return Check::fail(
                NAME,
                format!(
                    "GET /user on {url} did not answer within {}s: check GITLAB_URL",
                    NETWORK_TIMEOUT.as_secs()
                ),
            );
        }
    };
    if gitlab.webhook_secrets.is_empty() && gitlab.project_secrets.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "the token is @{}'s, but neither GITLAB_WEBHOOK_SECRET nor GITLAB_WEBHOOK_SECRETS \
                 is set: every GitLab delivery is refused until one is",
                user.login
            ),
        );
    }
    Check::ok(
        NAME,
        format!(
            "GET /user on {url} answered: the token is @{}'s",
            user.login
        ),
    )
}

/// The role settings (`PLANNER_MODEL`, …) that name a model of `provider`.
fn roles_using(settings: &Settings, provider: Provider) -> Vec<&'static str> {
    let models = &settings.models;
    [
        ("PLANNER_MODEL", &models.planner),
        ("SCOUT_MODEL", &models.scout),
        ("EXECUTOR_MODEL", &models.executor),
    ]
    .into_iter()
    .filter(|(_, name)| {
        name.as_deref()
            .and_then(|n| ModelName::parse(n).ok())
            .is_some_and(|n| n.provider == provider)
    })
    .map(|(key, _)| key)
    .collect()
}

async fn anthropic(settings: &Settings) -> Check {
    const NAME: &str = "anthropic";
    let models = &settings.models;
    let Some(key) = &models.anthropic_api_key else {
        return missing_key(
            NAME,
            "ANTHROPIC_API_KEY",
            &roles_using(settings, Provider::Anthropic),
            models.openai_api_key.is_some(),
        );
    };
    let base = models.anthropic_base_url.trim_end_matches('/');
    // Listing models is free and needs a valid key, unlike a message.
    let request = |http: &reqwest::Client| {
        http.get(format!("{base}/v1/models?limit=1"))
            .header("anthropic-version", crate::llm::anthropic::API_VERSION)
    };
    probe(
        NAME,
        "ANTHROPIC_API_KEY",
        base,
        request,
        Some(("x-api-key", key.expose_secret().to_owned())),
    )
    .await
}

async fn openai(settings: &Settings) -> Check {
    const NAME: &str = "openai";
    let models = &settings.models;
    let roles = roles_using(settings, Provider::OpenAi);
    let base = models.openai_base_url.trim_end_matches('/');
    let auth = match &models.openai_api_key {
        Some(key) => Some(("authorization", format!("Bearer {}", key.expose_secret()))),
        // A local OpenAI-compatible server may need no key; only one in use is probed.
        None if !roles.is_empty() && !base.starts_with("https://api.openai.com") => None,
        None => {
            return missing_key(
                NAME,
                "OPENAI_API_KEY",
                &roles,
                models.anthropic_api_key.is_some(),
            );
        }
    };
    let request = |http: &reqwest::Client| http.get(format!("{base}/models"));
    probe(NAME, "OPENAI_API_KEY", base, request, auth).await
}

fn missing_key(
    name: &'static str,
    key: &str,
    roles: &[&'static str],
    other_provider: bool,
) -> Check {
    if !roles.is_empty() {
        Check::fail(
            name,
            format!(
                "{} name a {name} model, but {key} is not set: set it",
                roles.join(", ")
            ),
        )
    } else if other_provider {
        Check::ok(
            name,
            format!("not configured ({key} is not set; no role uses it)"),
        )
    } else {
        Check::warn(
            name,
            format!(
                "{key} is not set, nor any other provider's key: nothing can be planned until \
                 one is"
            ),
        )
    }
}

/// Sends one authenticated GET and reads only its status: the key works, is refused, or
/// the provider cannot be reached.
async fn probe(
    name: &'static str,
    key_name: &str,
    base: &str,
    request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    auth: Option<(&str, String)>,
) -> Check {
    let http = match reqwest::Client::builder()
        .timeout(NETWORK_TIMEOUT)
        // A redirect would replay the key to another host.
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(e) => return Check::fail(name, format!("Could not build an HTTP client: {e}")),
    };
    let mut builder = request(&http);
    if let Some((header, value)) = auth {
        let Ok(mut value) = reqwest::header::HeaderValue::from_str(&value) else {
            return Check::fail(
                name,
                format!("Cannot use {key_name}: it is not a valid header"),
            );
        };
        value.set_sensitive(true);
        builder = builder.header(header, value);
    }
    let response = match builder.send().await {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                name,
                format!(
                    "Could not reach {base}: {}; check the network and the provider's base URL",
                    e.without_url()
                ),
            );
        }
    };
    let status = response.status();
    if status.is_success() {
        return Check::ok(name, format!("{base} accepts {key_name}"));
    }
    let body = response.text().await.unwrap_or_default();
    let message: String = body.chars().take(200).collect();
    match status.as_u16() {
        401 | 403 => Check::fail(
            name,
            format!(
                "{base} refused {key_name} ({status}): {message}; set a valid key",
                message = message.trim()
            ),
        ),
        _ => Check::fail(
            name,
            format!(
                "{base} answered {status}: {}; check the provider's base URL",
                message.trim()
            ),
        ),
    }
}

/// Runs `program --version`, given a few seconds; the first line of what it printed.
async fn version(program: &Path) -> Result<String, String> {
    let run = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(10), run).await {
        Ok(Ok(out)) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()),
        Ok(Ok(out)) => Err(format!(
            "`{} --version` failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Err(e)) => Err(format!("Could not run {}: {e}", program.display())),
        Err(_) => Err(format!(
            "`{} --version` did not finish within 10s",
            program.display()
        )),
    }
}

async fn git() -> Check {
    const NAME: &str = "git";
    let Some(program) = crate::sandbox::bwrap::find_on_path("git") else {
        return Check::fail(
            NAME,
            "`git` is not on PATH: install the `git` package (mirrors, checkouts and pushes \
             need it)",
        );
    };
    match version(&program).await {
        Ok(v) => Check::ok(NAME, format!("{} ({v})", program.display())),
        Err(e) => Check::fail(NAME, e),
    }
}

async fn executor(name: &'static str, program: &str) -> Check {
    let Some(path) = crate::sandbox::bwrap::find_on_path(program) else {
        return Check::warn(
            name,
            format!(
                "`{program}` is not on PATH: contracts routed to it cannot run; install it \
                 (the Docker image does with WITH_AGENTS=1)"
            ),
        );
    };
    match version(&path).await {
        Ok(v) => Check::ok(name, format!("{} ({v})", path.display())),
        Err(e) => Check::warn(name, e),
    }
}

/// Free space for planwright in `dir` (or the nearest folder above it that exists).
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let existing = dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or_else(|| Path::new("/"));
    let path = std::ffi::CString::new(existing.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes only into the zeroed struct it is given; the path is a valid
    // NUL-terminated string that outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The field types are narrower than u64 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let free = u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize));
    Ok(free)
}

fn disk(dir: &Path) -> Check {
    const NAME: &str = "disk space";
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match free_bytes(dir) {
        Ok(free) if free < DISK_FAIL_BYTES => Check::fail(
            NAME,
            format!(
                "{:.1} GiB free in {}: free space or move DATA_DIR to a larger disk",
                gib(free),
                dir.display()
            ),
        ),
        Ok(free) if free < DISK_WARN_BYTES => Check::warn(
            NAME,
            format!(
                "{:.1} GiB free in {}: mirrors and workspaces of large repositories may not fit",
                gib(free),
                dir.display()
            ),
        ),
        Ok(free) => Check::ok(
            NAME,
            format!("{:.1} GiB free in {}", gib(free), dir.display()),
        ),
        Err(e) => Check::warn(
            NAME,
            format!("Could not measure the free space in {}: {e}", dir.display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(
            sqlite_file("sqlite:///srv/pw/planwright.db?mode=rwc"),
            Some(PathBuf::from("/srv/pw/planwright.db"))
        );
        assert_eq!(
            sqlite_file("sqlite:data/p.db"),
            Some(PathBuf::from("data/p.db"))
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://db/planwright"), None);
    }

    #[test]
    fn operator_pages_are_a_warning_only_when_nothing_can_show_them() {
        let with = |env: &[(&str, &str)]| {
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            operator_pages(&Settings::from_sources(None, &env).unwrap())
        };
        let none = with(&[]);
        assert_eq!(none.status, Status::Warn);
        let admin = with(&[("PLANWRIGHT_ADMIN_TOKEN", "0123456789abcdef-admin")]);
        assert_eq!(admin.status, Status::Ok);
        assert!(
            !admin.line().contains("0123456789abcdef"),
            "{}",
            admin.line()
        );
        let listener = with(&[("PLANWRIGHT_METRICS_LISTEN", "0.0.0.0:9091")]);
        assert_eq!(listener.status, Status::Ok);
        assert!(
            listener.line().contains("0.0.0.0:9091"),
            "{}",
            listener.line()
        );
    }

    #[test]
    fn an_installation_lacking_new_permissions_or_events_is_told_which() {
        let manifest = crate::onboarding::manifest("http://x", "http://x").unwrap();
        let granted: std::collections::BTreeMap<String, String> = [
            ("issues", "write"),
            ("pull_requests", "write"),
            ("contents", "write"),
            ("checks", "read"),
            ("metadata", "read"),
            ("members", "read"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let events: Vec<String> = [
            "issues",
            "issue_comment",
            "pull_request_review",
            "pull_request_review_comment",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(
            missing_grants(&manifest, &granted, &events),
            [
                "the permission checks: write",
                "the permission statuses: read",
                "the event check_suite",
                "the event status"
            ]
        );
        let mut all = granted.clone();
        all.insert("checks".into(), "write".into());
        all.insert("statuses".into(), "write".into());
        let mut every = events.clone();
        every.extend(["check_suite".to_owned(), "status".to_owned()]);
        assert!(missing_grants(&manifest, &all, &every).is_empty());
    }

    #[test]
    fn lines_show_status_name_and_detail() {
        assert_eq!(
            Check::fail("git", "missing").line(),
            "FAIL git              missing"
        );
        assert_eq!(Check::warn("x", "y").line(), format!("warn {:<16} y", "x"));
    }
}
