//! Webhook ingest: signed GitHub deliveries (`issues.labeled`, so each one is verified,
//! stored in the inbox and turns into a job that the same process runs) sent at a fixed
//! concurrency to the release `planwright serve`, on SQLite and on PostgreSQL, beside a
//! Probot app (the baseline) receiving the same requests on the same machine.
//!
//! Prints latency (p50, p99), throughput, idle and peak RSS per target, and the ratios
//! against each baseline: Probot storing nothing, and Probot storing each delivery in
//! SQLite (better-sqlite3, WAL and synchronous=NORMAL as planwright has it) before it
//! answers, as planwright does. `scripts/bench` prepares PostgreSQL and Probot and runs
//! this.
//!
//! Environment: `BENCH_REQUESTS` (default 20000), `BENCH_CONCURRENCY` (32), `BENCH_ROLE`
//! (`all`: the process also runs the jobs; `web` measures ingest alone),
//! `PLANWRIGHT_BENCH_DATABASE_URL` (a PostgreSQL server URL whose user may create
//! databases; without it PostgreSQL is left out), `PLANWRIGHT_BENCH_PROBOT_DIR` (a folder
//! with `node_modules/probot`, and `better-sqlite3` for the storing baseline; without it
//! the baselines are left out).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

const SECRET: &str = "bench-secret";

struct Target {
    name: String,
    child: Child,
    addr: String,
}

struct Measured {
    name: String,
    p50_ms: f64,
    p99_ms: f64,
    per_sec: f64,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    errors: usize,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Reads the child's output until a line names the address it listens on.
fn wait_listening(child: &mut Child, from_stderr: bool) -> String {
    let reader: Box<dyn std::io::Read + Send> = if from_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let mut lines = BufReader::new(reader).lines();
    loop {
        let line = lines
            .next()
            .expect("the server says where it listens")
            .unwrap();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let addr = v["fields"]["addr"].as_str().or(v["listening"].as_str());
        if let Some(addr) = addr {
            let addr = addr.to_owned();
            std::thread::spawn(move || for _ in lines {});
            return addr;
        }
    }
}

fn start_planwright(name: &str, database_url: &str, data_dir: &std::path::Path) -> Target {
    let role = std::env::var("BENCH_ROLE").unwrap_or_else(|_| "all".to_owned());
    let mut child = Command::new(env!("CARGO_BIN_EXE_planwright"))
        .args(["serve", "--role", &role])
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_DATA_DIR", data_dir)
        .env("PLANWRIGHT_DATABASE_URL", database_url)
        .env("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", SECRET)
        .env("PLANWRIGHT_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the release binary starts");
    let addr = wait_listening(&mut child, true);
    Target {
        name: name.to_owned(),
        child,
        addr,
    }
}

/// A Probot baseline: `app` is `app.mjs` (stores nothing) or `app-sqlite.mjs` (stores
/// each delivery in SQLite at `database`).
fn start_probot(dir: &PathBuf, app: &str, name: &str, database: &std::path::Path) -> Target {
    for file in [app, "serve.mjs"] {
        std::fs::copy(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("benches/probot")
                .join(file),
            dir.join(file),
        )
        .expect("the baseline app is copied beside its node_modules");
    }
    let key = Command::new("openssl")
        .args(["genrsa", "2048"])
        .stderr(Stdio::null())
        .output()
        .expect("openssl makes a throwaway app key");
    let mut child = Command::new("node")
        .arg(app)
        .current_dir(dir)
        .env("DATABASE_PATH", database)
        .env(
            "PRIVATE_KEY",
            String::from_utf8_lossy(&key.stdout).into_owned(),
        )
        .env("WEBHOOK_SECRET", SECRET)
        .env("NODE_ENV", "production")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node starts the Probot baseline");
    let addr = wait_listening(&mut child, false);
    Target {
        name: name.to_owned(),
        child,
        addr,
    }
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

async fn load(
    target: &Target,
    body: Arc<Vec<u8>>,
    requests: usize,
    concurrency: usize,
) -> (Vec<f64>, f64, usize) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let url = format!("http://{}/webhooks/github", target.addr);
    let signature = sign(&body);
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let run = uuid::Uuid::new_v4().simple().to_string();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body, signature, next, errors, run) = (
            client.clone(),
            url.clone(),
            body.clone(),
            signature.clone(),
            next.clone(),
            errors.clone(),
            run.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    return latencies;
                }
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-github-event", "issues")
                    .header("x-github-delivery", format!("{run}-{n}"))
                    .header("x-hub-signature-256", &signature)
                    .body(body.as_ref().clone())
                    .send()
                    .await;
                match response {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut all = Vec::with_capacity(requests);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (all, elapsed, errors.load(Ordering::Relaxed))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize)
        .saturating_sub(1)
        .min(sorted.len() - 1)]
}

async fn measure(
    mut target: Target,
    body: Arc<Vec<u8>>,
    requests: usize,
    concurrency: usize,
) -> Measured {
    let client = reqwest::Client::new();
    let health = format!("http://{}/healthz", target.addr);
    while client.get(&health).send().await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Idle: after start-up work has settled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = target.child.id();
    let idle = rss_kib(pid, "VmRSS:");
    // Warm-up outside the measurement (connections, caches, the first jobs).
    load(&target, body.clone(), 500.min(requests), concurrency).await;
    let (latencies, elapsed, errors) = load(&target, body, requests, concurrency).await;
    let peak = rss_kib(pid, "VmHWM:");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = target.child.wait();
    Measured {
        name: target.name,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        per_sec: latencies.len() as f64 / elapsed,
        idle_rss_mib: idle / 1024.0,
        peak_rss_mib: peak / 1024.0,
        errors,
    }
}

async fn fresh_postgres(admin: &str) -> String {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let name = format!("pw_bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::AnyConnection::connect(admin)
        .await
        .expect("PostgreSQL answers");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = admin.split('?').next().unwrap();
    let cut = base.rfind('/').unwrap();
    format!("{}/{name}", &base[..cut])
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let requests = env_usize("BENCH_REQUESTS", 20_000);
    let concurrency = env_usize("BENCH_CONCURRENCY", 32);
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/github-webhooks/issues.labeled.1.json");
    let body = Arc::new(std::fs::read(&fixture).expect("the issues.labeled fixture"));
    let data = tempfile::tempdir().unwrap();
    println!(
        "ingest: {requests} signed issues.labeled deliveries ({} bytes) at concurrency {concurrency}",
        body.len()
    );

    let mut results = Vec::new();
    if let Ok(dir) = std::env::var("PLANWRIGHT_BENCH_PROBOT_DIR")
        && !dir.is_empty()
    {
        let dir = PathBuf::from(dir);
        let none = data.path().join("unused.db");
        let target = start_probot(&dir, "app.mjs", "probot", &none);
        results.push(measure(target, body.clone(), requests, concurrency).await);
        if dir.join("node_modules/better-sqlite3").is_dir() {
            let db = data.path().join("probot.db");
            let target = start_probot(&dir, "app-sqlite.mjs", "probot+sqlite", &db);
            results.push(measure(target, body.clone(), requests, concurrency).await);
        }
    }
    let sqlite = format!("sqlite://{}/planwright.db", data.path().display());
    let target = start_planwright("planwright sqlite", &sqlite, data.path());
    results.push(measure(target, body.clone(), requests, concurrency).await);
    if let Ok(admin) = std::env::var("PLANWRIGHT_BENCH_DATABASE_URL") {
        let url = fresh_postgres(&admin).await;
        let target = start_planwright("planwright postgres", &url, data.path());
        results.push(measure(target, body.clone(), requests, concurrency).await);
    }

    println!(
        "{:<22} {:>9} {:>9} {:>10} {:>10} {:>10} {:>7}",
        "target", "p50 ms", "p99 ms", "req/s", "idle MiB", "peak MiB", "errors"
    );
    for m in &results {
        println!(
            "{:<22} {:>9.2} {:>9.2} {:>10.0} {:>10.1} {:>10.1} {:>7}",
            m.name, m.p50_ms, m.p99_ms, m.per_sec, m.idle_rss_mib, m.peak_rss_mib, m.errors
        );
    }
    for base in results.iter().filter(|m| m.name.starts_with("probot")) {
        println!(
            "ratios against {} (below 1 is better for latency and memory, above 1 for req/s):",
            base.name
        );
        for m in results.iter().filter(|m| !m.name.starts_with("probot")) {
            println!(
                "{:<22} p50 {:.2}x  p99 {:.2}x  req/s {:.2}x  idle RSS {:.2}x  peak RSS {:.2}x",
                m.name,
                m.p50_ms / base.p50_ms,
                m.p99_ms / base.p99_ms,
                m.per_sec / base.per_sec,
                m.idle_rss_mib / base.idle_rss_mib,
                m.peak_rss_mib / base.peak_rss_mib
            );
        }
    }
}
