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
