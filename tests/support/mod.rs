//! Test harness: a fresh database per test (SQLite by default, PostgreSQL when
//! `PLANWRIGHT_TEST_DATABASE_URL` names a server), the real server started in-process on
//! a loopback port, signed webhook requests, waiting on state with a timeout, a scripted
//! model server (`model_server`), a stateful fake GitHub (`fake_forge`), a stateful
//! fake GitLab (`fake_gitlab`), the request log and failure injection both share
//! (`fake_http`), git over smart HTTP for both (`git_http`), markdown read as a forge
//! renders it (`markdown`), a session world on either forge (`world`), small real
//! projects per test runner (`projects`), the texts it posts
//! with what varies replaced, for snapshots (`redact`), root folders shaped like
//! images (`roots`), and a Debian image with Python and pytest (`python_image`).
#![allow(dead_code)]

pub mod browser;
pub mod calc;
pub mod fake_forge;
pub mod fake_gitlab;
pub mod fake_http;
pub mod git_http;
pub mod markdown;
pub mod model_server;
pub mod monorepo;
pub mod projects;
pub mod python_image;
pub mod redact;
pub mod registry;
pub mod roots;
pub mod world;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use planwright::config::Settings;
use planwright::jobs::Handler;
use planwright::server::{self, Role, Running};
use planwright::store::{Backend, Db};
use sha2::Sha256;
use sqlx::Connection;

pub const GITHUB_SECRET: &str = "github-test-secret";
pub const GITLAB_SECRET: &str = "gitlab-test-token";
/// The operator's ADMIN_TOKEN in test settings: the session pages and `/metrics` need it.
pub const ADMIN_TOKEN: &str = "admin-test-token-7f3e2b";

/// `path` as one word of a shell script, whatever it holds (a checkout in a folder whose
/// name has a space, say).
pub fn sh_word(path: impl AsRef<std::path::Path>) -> String {
    let text = path.as_ref().display().to_string();
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shared fixtures (real payloads and logs), beside the repository.
pub fn fixtures() -> PathBuf {
    let dir = std::env::var_os("PLANWRIGHT_TEST_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    assert!(
        dir.is_dir(),
        "the shared fixtures are missing at {} (set PLANWRIGHT_TEST_FIXTURES)",
        dir.display()
    );
    dir
}

/// One test's own database; the SQLite file lives in `dir`.
pub struct TestDb {
    pub url: String,
    pub db: Db,
    pub dir: tempfile::TempDir,
}

impl TestDb {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let url = match std::env::var("PLANWRIGHT_TEST_DATABASE_URL") {
            Ok(admin) if !admin.is_empty() => fresh_postgres_database(&admin).await,
            _ => format!("sqlite://{}/planwright.db", dir.path().display()),
        };
        let db = Db::open(&url)
            .await
            .expect("the test database opens and migrates");
        TestDb { url, db, dir }
    }

    pub fn backend(&self) -> Backend {
        self.db.backend
    }
}

/// Creates an empty database on the server `admin_url` points at and returns its URL.
async fn fresh_postgres_database(admin_url: &str) -> String {
    sqlx::any::install_default_drivers();
    let name = format!("pw_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::AnyConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at PLANWRIGHT_TEST_DATABASE_URL answers: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("a test database can be created");
    conn.close().await.ok();
    let (base, query) = match admin_url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (admin_url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{name}{query}", &base[..host_end])
}

/// Settings for a server on a loopback port over `db`, with both forges' secrets and the
/// test's running registries listed in REGISTRY_INSECURE.
pub fn settings(db: &TestDb, extra: &[(&str, &str)]) -> Settings {
    Settings::from_sources(None, &settings_env(db, extra)).expect("test settings are valid")
}

/// The environment [`settings`] reads: what a `planwright serve` process of the same
/// deployment is started with.
pub fn settings_env(db: &TestDb, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PLANWRIGHT_LISTEN".into(), "127.0.0.1:0".into()),
        (
            "PLANWRIGHT_DATA_DIR".into(),
            db.dir.path().display().to_string(),
        ),
        ("PLANWRIGHT_DATABASE_URL".into(), db.url.clone()),
        (
            "PLANWRIGHT_GITHUB_WEBHOOK_SECRET".into(),
            GITHUB_SECRET.into(),
        ),
        (
            "PLANWRIGHT_GITLAB_WEBHOOK_SECRET".into(),
            GITLAB_SECRET.into(),
        ),
        ("PLANWRIGHT_JOB_POLL_MS".into(), "50".into()),
        ("PLANWRIGHT_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()),
    ];
    // The test's own registries, listed as their operator would (an `extra` entry wins).
    env.extend(registry::operator_listing().map(|(k, v)| (k.into(), v)));
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push(((*k).into(), (*v).into()));
    }
    env
}

/// The real server (router and workers) running in this process.
pub struct TestServer {
    pub base: String,
    /// `http://` and the address of the METRICS_LISTEN listener, when there is one.
    pub metrics_base: Option<String>,
    pub db: Db,
    pub client: reqwest::Client,
    running: Option<Running>,
}

impl TestServer {
    pub async fn start(
        settings: Settings,
        role: Role,
        handlers: impl FnOnce(std::sync::Arc<planwright::app::App>) -> Handler,
    ) -> Self {
        let running = server::start(settings, role, handlers)
            .await
            .expect("the server starts");
        TestServer {
            base: format!("http://{}", running.addr),
            metrics_base: running.metrics_addr.map(|a| format!("http://{a}")),
            db: running.db.clone(),
            client: reqwest::Client::new(),
            running: Some(running),
        }
    }

    /// Web only: deliveries are recorded and jobs stay queued for the test to inspect.
    pub async fn web(db: &TestDb) -> Self {
        Self::web_with(db, &[]).await
    }

    /// Web only, with settings changed by `extra` environment variables.
    pub async fn web_with(db: &TestDb, extra: &[(&str, &str)]) -> Self {
        Self::start(
            settings(db, extra),
            Role::Web,
            planwright::session::dispatch::handler,
        )
        .await
    }

    /// Checks that the forge was answered 2xx and returns the delivery's status and the
    /// domain events of the jobs it made.
    pub async fn accepted(
        &self,
        response: reqwest::Response,
        what: &str,
    ) -> (String, Vec<planwright::event::Event>) {
        let status = response.status();
        let answer: serde_json::Value = response.json().await.expect("a JSON answer");
        assert!(status.is_success(), "{what}: {status} {answer}");
        let delivery = answer["delivery"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no delivery in {answer}"));
        let events = planwright::store::jobs::list(&self.db, Some(delivery))
            .await
            .expect("jobs can be listed")
            .iter()
            .map(|j| serde_json::from_str(&j.payload).expect("a job payload is an event"))
            .collect();
        let state = answer["status"].as_str().unwrap_or_default().to_owned();
        (state, events)
    }

    /// The model proxy the server runs (roles that run executors only).
    pub fn model_proxy(&self) -> Option<&planwright::metering::proxy::ModelProxy> {
        self.running.as_ref().and_then(|r| r.model_proxy.as_ref())
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await.expect("the server stops cleanly");
        }
    }

    pub fn github(&self, event: &str, delivery: &str, body: &[u8]) -> reqwest::RequestBuilder {
        self.github_signed(event, delivery, body, Some(&sign(GITHUB_SECRET, body)))
    }

    /// A GitHub delivery with this `X-Hub-Signature-256` (or none).
    pub fn github_signed(
        &self,
        event: &str,
        delivery: &str,
        body: &[u8],
        signature: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(format!("{}/webhooks/github", self.base))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery);
        if let Some(signature) = signature {
            request = request.header("x-hub-signature-256", signature);
        }
        request.body(body.to_vec())
    }

    pub fn gitlab(&self, event: &str, body: &[u8]) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/webhooks/gitlab", self.base))
            .header("content-type", "application/json")
            .header("x-gitlab-event", event)
            .header("x-gitlab-token", GITLAB_SECRET)
            .body(body.to_vec())
    }
}

/// `X-Hub-Signature-256` for `body` under `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Polls `check` until it returns `Some`, failing the test after 30 seconds. For state
/// that lives in the database or the server (no event says it changed); a wait on a fake
/// forge's state is woken by its requests instead (`FakeGithub::wait_for`).
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, Duration::from_secs(30), check).await
}

/// [`eventually`] with its own limit, for work that takes minutes (a real project's test
/// suite, run several times by a session).
pub async fn eventually_within<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A database URL nothing has been written to yet (not even migrations).
pub async fn empty_database_url(dir: &std::path::Path) -> String {
    match std::env::var("PLANWRIGHT_TEST_DATABASE_URL") {
        Ok(admin) if !admin.is_empty() => fresh_postgres_database(&admin).await,
        _ => format!("sqlite://{}/empty/planwright.db", dir.display()),
    }
}

/// The `planwright` binary with no PLANWRIGHT_* settings inherited from the environment,
/// and the test's running registries listed in REGISTRY_INSECURE.
pub fn planwright_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"));
    for (name, _) in std::env::vars() {
        if name.starts_with("PLANWRIGHT_")
            || name == "PORT"
            || name.ends_with("_API_KEY")
            || name.ends_with("_BASE_URL")
        {
            cmd.env_remove(name);
        }
    }
    cmd.envs(registry::operator_listing());
    cmd
}

/// Reads the JSON log lines of a starting `serve` until it says where it listens; the
/// rest of its log is drained so that it never blocks on a full pipe.
pub fn listening_address(child: &mut std::process::Child) -> String {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines
            .next()
            .expect("serve logs that it listens before its output ends")
            .expect("log lines are text");
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && v["fields"]["message"] == "listening"
        {
            let addr = v["fields"]["addr"].as_str().expect("an address").to_owned();
            std::thread::spawn(move || for _ in lines {});
            return addr;
        }
    }
}

/// Sends SIGTERM (or another signal) to a child process.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}
