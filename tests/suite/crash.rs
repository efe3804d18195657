//! A `serve` process killed with SIGKILL in the middle of a job loses nothing: after a
//! restart the job's lease runs out, it is claimed again and finishes exactly once.

use crate::support;

use std::process::{Child, Command, Stdio};

use planwright::config::Settings;
use planwright::jobs::{Handler, Job, JobError};
use planwright::server::{self, Role};
use planwright::session::dispatch;
use planwright::store::jobs;
use planwright::store::jobs::JobState;
use support::{TestDb, eventually};

const CHILD: &str = "PLANWRIGHT_TEST_CHILD_SERVE";
const EFFECTS: &str = "PLANWRIGHT_TEST_EFFECTS";
const TEST_NAME: &str = "a_server_killed_mid_job_finishes_it_once_after_restart";

/// The test's full name in the test binary (its module path without the crate's name),
/// so that the child runs only this test.
fn full_test_name() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{module}::{TEST_NAME}")
}

/// In the child: the real server (router and workers) with the real handlers plus one
/// whose first attempt never ends, so that the parent can kill the process mid-job.
async fn serve_as_child() {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let settings = Settings::from_sources(None, &env).expect("child settings");
    let effects = std::env::var(EFFECTS).expect("effects file");
    let handlers = move |app| {
        let real = dispatch::handler(app);
        Handler::new(move |job: Job| {
            let (real, effects) = (real.clone(), effects.clone());
            async move {
                if job.kind != "crash-probe" {
                    return real.run(job).await;
                }
                if job.attempt == 1 {
                    std::future::pending::<()>().await;
                }
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&effects)
                    .map_err(|e| JobError::Retryable(e.into()))?;
                writeln!(f, "{} finished on attempt {}", job.id, job.attempt)
                    .map_err(|e| JobError::Retryable(e.into()))?;
                Ok(())
            }
        })
    };
    let running = server::start(settings, Role::All, handlers)
        .await
        .expect("child serves");
    running.wait().await.expect("child runs until killed");
}

fn spawn_child(url: &str, effects: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &full_test_name(), "--nocapture"])
        .env(CHILD, "1")
        .env(EFFECTS, effects)
        .env("PLANWRIGHT_DATABASE_URL", url)
        // Its own data folder: the default one is shared with every other test's server.
        .env("PLANWRIGHT_DATA_DIR", effects.with_extension("data"))
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_JOB_LEASE_SECS", "3")
        .env("PLANWRIGHT_JOB_POLL_MS", "50")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn a_server_killed_mid_job_finishes_it_once_after_restart() {
    if std::env::var_os(CHILD).is_some() {
        serve_as_child().await;
        return;
    }
    let t = TestDb::new().await;
    let effects = t.dir.path().join("effects.log");
    let id = {
        let mut conn = t.db.pool.acquire().await.unwrap();
        jobs::enqueue(&mut conn, &jobs::NewJob::new("crash-probe", "{}", 5))
            .await
            .unwrap()
            .0
    };

    let mut first = spawn_child(&t.url, &effects);
    let running = eventually("the first server to take the job", || async {
        jobs::get(&t.db, &id)
            .await
            .unwrap()
            .filter(|j| j.state == JobState::Running)
    })
    .await;
    assert_eq!(running.attempts, 1);
    first.kill().unwrap(); // SIGKILL: no shutdown code runs.
    first.wait().unwrap();
    let orphaned = jobs::get(&t.db, &id).await.unwrap().unwrap();
    assert_eq!(
        orphaned.state,
        JobState::Running,
        "nobody finished or released it"
    );
    assert!(!effects.exists());

    let mut second = spawn_child(&t.url, &effects);
    let done = eventually("the restarted server to finish the job", || async {
        jobs::get(&t.db, &id)
            .await
            .unwrap()
            .filter(|j| j.state == JobState::Done)
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
    assert_eq!(done.attempts, 2);
    let log = std::fs::read_to_string(&effects).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("finished on attempt 2"), "{log}");
    assert_ne!(running.lease_owner, None);
}

fn spawn_serve(url: &str, data: &std::path::Path) -> (Child, String) {
    let mut child = support::planwright_command()
        .arg("serve")
        .env("PLANWRIGHT_DATA_DIR", data)
        .env("PLANWRIGHT_DATABASE_URL", url)
        .env("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", support::GITHUB_SECRET)
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = support::listening_address(&mut child);
    (child, addr)
}

/// Sends every delivery of `keys` at concurrency 32; the keys answered 2xx, with the
/// status each was answered. `after` runs once `at` deliveries were acknowledged.
async fn deliver_all(
    addr: &str,
    body: &[u8],
    keys: &[String],
    at: usize,
    after: impl FnOnce() + Send + 'static,
) -> Vec<(String, String)> {
    use std::sync::{Arc, Mutex};
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/webhooks/github");
    let signature = support::sign(support::GITHUB_SECRET, body);
    let queue = Arc::new(Mutex::new(keys.to_vec()));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let after = Arc::new(Mutex::new(Some(after)));
    let mut senders = Vec::new();
    for _ in 0..32 {
        let (client, url, signature, queue, acknowledged, after) = (
            client.clone(),
            url.clone(),
            signature.clone(),
            queue.clone(),
            acknowledged.clone(),
            after.clone(),
        );
        let body = body.to_vec();
        senders.push(tokio::spawn(async move {
            loop {
                let Some(key) = queue.lock().unwrap().pop() else {
                    return;
                };
                let answer = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-github-event", "issues")
                    .header("x-github-delivery", &key)
                    .header("x-hub-signature-256", &signature)
                    .body(body.clone())
                    .send()
                    .await;
                let Ok(answer) = answer else { continue };
                if !answer.status().is_success() {
                    continue;
                }
                let Ok(json) = answer.json::<serde_json::Value>().await else {
                    continue;
                };
                let status = json["status"].as_str().unwrap_or_default().to_owned();
                let count = {
                    let mut acknowledged = acknowledged.lock().unwrap();
                    acknowledged.push((key, status));
                    acknowledged.len()
                };
                if count >= at
                    && let Some(after) = after.lock().unwrap().take()
                {
                    after();
                }
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }
    Arc::try_unwrap(acknowledged).unwrap().into_inner().unwrap()
}

/// Deliveries arriving together are written in one transaction and answered after its
/// commit: a server killed with SIGKILL while batches are in flight has kept every
/// delivery it acknowledged, and the forge's redelivery of the rest stores each once.
#[tokio::test]
async fn a_server_killed_mid_batch_keeps_every_delivery_it_acknowledged() {
    let t = TestDb::new().await;
    let body =
        std::fs::read(support::fixtures().join("github-webhooks/issues.labeled.1.json")).unwrap();
    let keys: Vec<String> = (0..600).map(|n| format!("kill-{n}")).collect();
    let (child, addr) = spawn_serve(&t.url, &t.dir.path().join("data"));
    let pid = child.id();
    let acknowledged = deliver_all(&addr, &body, &keys, 150, move || {
        support::signal(pid, "KILL");
    })
    .await;
    let mut child = child;
    child.wait().unwrap();
    assert!(
        acknowledged.len() >= 150 && acknowledged.len() < keys.len(),
        "the server was killed mid-stream: {} acknowledged",
        acknowledged.len()
    );
    let stored = || async {
        let rows: Vec<String> = sqlx::query_scalar("SELECT delivery_key FROM deliveries")
            .fetch_all(&t.db.pool)
            .await
            .unwrap();
        rows
    };
    let kept: std::collections::HashSet<String> = stored().await.into_iter().collect();
    for (key, status) in &acknowledged {
        assert_eq!(status, "queued");
        assert!(kept.contains(key), "{key} was acknowledged and lost");
    }

    // The forge redelivers everything it has no answer for, and more.
    let (mut again, addr) = spawn_serve(&t.url, &t.dir.path().join("data"));
    let answers = deliver_all(&addr, &body, &keys, usize::MAX, || {}).await;
    support::signal(again.id(), "KILL");
    again.wait().unwrap();
    assert_eq!(answers.len(), keys.len());
    for (key, status) in &answers {
        let expected = if kept.contains(key) {
            "duplicate"
        } else {
            "queued"
        };
        assert_eq!(status, expected, "{key}");
    }
    let mut all = stored().await;
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "no delivery is stored twice");
    assert_eq!(all.len(), keys.len());
}
