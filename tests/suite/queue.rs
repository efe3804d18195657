//! The durable job queue and its workers, against the real database (SQLite, or
//! PostgreSQL when PLANWRIGHT_TEST_DATABASE_URL is set).

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use planwright::config::QueueSettings;
use planwright::jobs::{Handler, Job, JobError, Waker, Worker};
use planwright::session::jobs::JobKind;
use planwright::store::jobs::JobState;
use planwright::store::{Db, jobs, now_ms};
use support::{TestDb, eventually};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn queue_settings() -> QueueSettings {
    QueueSettings {
        workers: 4,
        max_runs: 2,
        max_runs_per_installation: None,
        lease: Duration::from_secs(5),
        max_attempts: 3,
        retry_base: Duration::from_millis(100),
        retry_max: Duration::from_secs(2),
        poll_interval: Duration::from_millis(20),
        shutdown_grace: Duration::from_secs(10),
    }
}

fn spawn_worker(
    db: &Db,
    handler: Handler,
    settings: QueueSettings,
    owner: &str,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let worker = Worker {
        db: db.clone(),
        handler,
        settings,
        owner: owner.to_owned(),
        waker: Waker::default(),
        runs: planwright::jobs::RunGate::open(),
    };
    let handle = tokio::spawn(worker.run(stop.clone()));
    (stop, handle)
}

async fn enqueue(db: &Db, kind: &str, payload: &str, max_attempts: i64) -> String {
    let mut conn = db.pool.acquire().await.unwrap();
    jobs::enqueue(&mut conn, &jobs::NewJob::new(kind, payload, max_attempts))
        .await
        .unwrap()
        .0
}

async fn job_in_state(db: &Db, id: &str, state: JobState) -> jobs::JobRow {
    eventually(&format!("job {id} to be {state}"), || async {
        jobs::get(db, id)
            .await
            .unwrap()
            .filter(|j| j.state == state)
    })
    .await
}

#[tokio::test]
async fn retryable_failures_back_off_then_dead_letter_keeping_the_error() {
    let t = TestDb::new().await;
    let starts: Arc<Mutex<Vec<i64>>> = Arc::default();
    let seen = starts.clone();
    let handlers = Handler::new(move |job: Job| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(now_ms());
            Err(JobError::Retryable(anyhow::anyhow!(
                "upstream timed out on attempt {}",
                job.attempt
            )))
        }
    });
    let id = enqueue(&t.db, "flaky", "{}", 3).await;
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    let dead = job_in_state(&t.db, &id, JobState::Dead).await;
    stop.cancel();
    handle.await.unwrap();
    assert_eq!(dead.attempts, 3);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("upstream timed out on attempt 3")
    );
    assert!(dead.finished_at.is_some());
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 3);
    // Attempt n waits at least half of base * 2^(n-1): 50 ms, then 100 ms.
    assert!(starts[1] - starts[0] >= 50, "{starts:?}");
    assert!(starts[2] - starts[1] >= 100, "{starts:?}");
}

#[tokio::test]
async fn a_rate_limited_job_waits_for_the_reset_without_spending_its_attempts() {
    let t = TestDb::new().await;
    let starts: Arc<Mutex<Vec<i64>>> = Arc::default();
    let seen = starts.clone();
    let handlers = Handler::new(move |_job: Job| {
        let seen = seen.clone();
        async move {
            let runs = {
                let mut seen = seen.lock().unwrap();
                seen.push(now_ms());
                seen.len()
            };
            if runs <= 3 {
                // As the forge layer answers a call held for the budget's reset; a wait of
                // nothing still waits the shortest time.
                let wait = if runs == 1 { 1_000 } else { 0 };
                return Err(JobError::from(planwright::forge::ForgeError::RateLimited {
                    what: "GET /repos/acme/widgets/issues/7".into(),
                    retry_after: Some(Duration::from_millis(wait)),
                }));
            }
            Ok(())
        }
    });
    // Two attempts only: three rate limits in a row would end it if they counted.
    let id = enqueue(&t.db, "limited", "{}", 2).await;
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    let done = job_in_state(&t.db, &id, JobState::Done).await;
    stop.cancel();
    handle.await.unwrap();
    assert_eq!(done.attempts, 1, "the waits were not attempts");
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 4);
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= 1_000,
            "ran before the reset: {starts:?}"
        );
    }
}

/// A forge that keeps answering "rate limited" for days is a failure like any other:
/// the job does not wait for ever.
#[tokio::test]
async fn a_job_held_by_rate_limits_for_days_spends_its_attempts() {
    let t = TestDb::new().await;
    let handlers = Handler::new(|_job: Job| async move {
        Err(JobError::from(planwright::forge::ForgeError::RateLimited {
            what: "GET /repos/acme/widgets/issues/7".into(),
            retry_after: Some(Duration::ZERO),
        }))
    });
    let id = enqueue(&t.db, "limited", "{}", 2).await;
    let four_days_ago = now_ms() - 4 * 24 * 3600 * 1000;
    sqlx::query("UPDATE jobs SET created_at = $1 WHERE id = $2")
        .bind(four_days_ago)
        .bind(&id)
        .execute(&t.db.writer)
        .await
        .unwrap();
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    let dead = job_in_state(&t.db, &id, JobState::Dead).await;
    stop.cancel();
    handle.await.unwrap();
    assert_eq!(dead.attempts, 2);
    assert!(dead.last_error.unwrap().contains("rate limited"));
}

#[tokio::test]
async fn a_job_that_succeeds_on_retry_is_done() {
    let t = TestDb::new().await;
    let handlers = Handler::new(|job: Job| async move {
        if job.attempt == 1 {
            Err(JobError::Retryable(anyhow::anyhow!("not yet")))
        } else {
            Ok(())
        }
    });
    let id = enqueue(&t.db, "second-time", "{}", 5).await;
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    let done = job_in_state(&t.db, &id, JobState::Done).await;
    stop.cancel();
    handle.await.unwrap();
    assert_eq!(done.attempts, 2);
    assert_eq!(done.last_error.as_deref(), Some("not yet"));
}

#[tokio::test]
async fn permanent_failures_and_unknown_kinds_are_dead_lettered_at_once() {
    let t = TestDb::new().await;
    // Other kinds go to the session layer's reading of them, which knows no such kind.
    let handlers = Handler::new(|job: Job| async move {
        if job.kind == "broken" {
            return Err(JobError::Permanent(anyhow::anyhow!(
                "the payload names no issue"
            )));
        }
        JobKind::parse(&job.kind, &job.payload).map(drop)
    });
    let broken = enqueue(&t.db, "broken", "{}", 5).await;
    let unknown = enqueue(&t.db, "no-such-kind", "{}", 5).await;
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    let broken = job_in_state(&t.db, &broken, JobState::Dead).await;
    let unknown = job_in_state(&t.db, &unknown, JobState::Dead).await;
    stop.cancel();
    handle.await.unwrap();
    assert_eq!(broken.attempts, 1);
    assert_eq!(
        broken.last_error.as_deref(),
        Some("the payload names no issue")
    );
    assert_eq!(unknown.attempts, 1);
    assert!(unknown.last_error.unwrap().contains("no-such-kind"));
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_the_old_holder_is_fenced_off() {
    let t = TestDb::new().await;
    let id = enqueue(&t.db, "any", "{}", 5).await;
    let lease = Duration::from_secs(2);
    let first = jobs::claim(&t.db, "a", lease, jobs::Room::ANY)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.id, id);
    assert_eq!(first.attempts, 1);
    // While the lease holds, nobody else gets the job.
    assert!(
        jobs::claim(&t.db, "b", lease, jobs::Room::ANY)
            .await
            .unwrap()
            .is_none()
    );
    let second = eventually("the expired lease to be reclaimed", || async {
        jobs::claim(&t.db, "b", lease, jobs::Room::ANY)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(second.id, id);
    assert_eq!(second.attempts, 2);
    assert_ne!(second.lease_token, first.lease_token);
    // The first holder can no longer renew or finish it.
    assert!(!jobs::heartbeat(&t.db, &first, lease).await.unwrap());
    assert!(!jobs::complete(&t.db, &first).await.unwrap());
    assert!(jobs::complete(&t.db, &second).await.unwrap());
    let row = jobs::get(&t.db, &id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Done);
    assert_eq!(row.lease_owner, None);
}

#[tokio::test]
async fn heartbeats_keep_a_long_job_from_being_reclaimed() {
    let t = TestDb::new().await;
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let handlers = Handler::new(move |_job: Job| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            Ok(())
        }
    });
    let id = enqueue(&t.db, "long", "{}", 5).await;
    let settings = QueueSettings {
        lease: Duration::from_secs(1),
        ..queue_settings()
    };
    let (stop, handle) = spawn_worker(&t.db, handlers, settings, "w1");
    job_in_state(&t.db, &id, JobState::Running).await;
    // Three lease lengths pass; the job stays with its worker throughout.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(
            jobs::claim(&t.db, "thief", Duration::from_secs(5), jobs::Room::ANY)
                .await
                .unwrap()
                .is_none()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    release.notify_one();
    let done = job_in_state(&t.db, &id, JobState::Done).await;
    assert_eq!(done.attempts, 1);
    stop.cancel();
    handle.await.unwrap();
}

#[tokio::test]
async fn several_workers_run_every_job_exactly_once_and_never_at_the_same_time() {
    let t = TestDb::new().await;
    const JOBS: usize = 150;
    let mut ids = Vec::new();
    for n in 0..JOBS {
        ids.push(enqueue(&t.db, "count", &n.to_string(), 3).await);
    }
    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let in_flight: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let overlaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..3 {
        // Each worker has its own pool, as separate `serve` processes would.
        let db = Db::connect(&t.url).await.unwrap();
        let (runs, in_flight, overlaps) = (runs.clone(), in_flight.clone(), overlaps.clone());
        let handlers = Handler::new(move |job: Job| {
            let (runs, in_flight, overlaps) = (runs.clone(), in_flight.clone(), overlaps.clone());
            async move {
                if !in_flight.lock().unwrap().insert(job.id.0.clone()) {
                    overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                *runs.lock().unwrap().entry(job.id.0.clone()).or_default() += 1;
                tokio::task::yield_now().await;
                in_flight.lock().unwrap().remove(&job.id.0);
                Ok(())
            }
        });
        workers.push(spawn_worker(
            &db,
            handlers,
            queue_settings(),
            &format!("worker-{w}"),
        ));
    }
    eventually("every job to be done", || async {
        let all = jobs::list(&t.db, None).await.unwrap();
        all.iter().all(|j| j.state == JobState::Done).then_some(())
    })
    .await;
    for (stop, handle) in workers {
        stop.cancel();
        handle.await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS);
    assert!(
        runs.values().all(|&n| n == 1),
        "some job ran twice: {runs:?}"
    );
    assert_eq!(overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
    for j in jobs::list(&t.db, None).await.unwrap() {
        assert_eq!(j.attempts, 1, "{}", j.id);
    }
}

#[tokio::test]
async fn racing_claimers_never_take_the_same_job() {
    let t = TestDb::new().await;
    for n in 0..60 {
        enqueue(&t.db, "race", &n.to_string(), 3).await;
    }
    let mut tasks = Vec::new();
    for c in 0..6 {
        let db = Db::connect(&t.url).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(job) = jobs::claim(
                &db,
                &format!("c{c}"),
                Duration::from_secs(30),
                jobs::Room::ANY,
            )
            .await
            .unwrap()
            {
                mine.push(job.id);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 60);
    assert_eq!(unique.len(), 60);
}

#[tokio::test]
async fn shutdown_lets_running_jobs_finish_within_the_grace_period() {
    let t = TestDb::new().await;
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let (s, f) = (started.clone(), finish.clone());
    let handlers = Handler::new(move |_job: Job| {
        let (s, f) = (s.clone(), f.clone());
        async move {
            s.notify_one();
            f.notified().await;
            Ok(())
        }
    });
    let id = enqueue(&t.db, "slow", "{}", 3).await;
    let (stop, handle) = spawn_worker(&t.db, handlers, queue_settings(), "w1");
    started.notified().await;
    stop.cancel();
    // Stopping does not abandon the running job.
    finish.notify_one();
    handle.await.unwrap();
    let row = jobs::get(&t.db, &id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Done);
}

#[tokio::test]
async fn shutdown_hands_back_jobs_that_outlast_the_grace_period() {
    let t = TestDb::new().await;
    let started = Arc::new(Notify::new());
    let s = started.clone();
    let handlers = Handler::new(move |_job: Job| {
        let s = s.clone();
        async move {
            s.notify_one();
            std::future::pending::<()>().await;
            Ok(())
        }
    });
    let id = enqueue(&t.db, "stuck", "{}", 3).await;
    let queued_later = enqueue(&t.db, "stuck", "{}", 3).await;
    let settings = QueueSettings {
        workers: 1,
        max_runs: 2,
        max_runs_per_installation: None,
        shutdown_grace: Duration::from_millis(100),
        ..queue_settings()
    };
    let (stop, handle) = spawn_worker(&t.db, handlers, settings, "w1");
    started.notified().await;
    stop.cancel();
    handle.await.unwrap();
    let row = jobs::get(&t.db, &id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Queued);
    assert_eq!(row.attempts, 0, "a handed-back attempt does not count");
    assert_eq!(row.lease_owner, None);
    // The job no worker had started was never claimed.
    let later = jobs::get(&t.db, &queued_later).await.unwrap().unwrap();
    assert_eq!((later.state, later.attempts), (JobState::Queued, 0));
    // Another worker can take the handed-back job straight away.
    let next = jobs::claim(&t.db, "w2", Duration::from_secs(5), jobs::Room::ANY)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.id, id);
}

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_does_not_exist() {
    let t = TestDb::new().await;
    let mut tx = t.db.pool.begin().await.unwrap();
    jobs::enqueue(&mut tx, &jobs::NewJob::new("any", "{}", 3))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(jobs::list(&t.db, None).await.unwrap().is_empty());
    let mut tx = t.db.pool.begin().await.unwrap();
    jobs::enqueue(&mut tx, &jobs::NewJob::new("any", "{}", 3))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(jobs::list(&t.db, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_job_enqueued_by_a_running_job_is_taken_without_waiting_for_the_poll() {
    let t = TestDb::new().await;
    let gate = Arc::new(Notify::new());
    let (db, open) = (t.db.clone(), gate.clone());
    let handlers = Handler::new(move |job: Job| {
        let (db, open) = (db.clone(), open.clone());
        async move {
            if job.kind == "first" {
                // Held until the worker has looked for more work and gone idle, so only
                // being woken can make it find the job enqueued here.
                open.notified().await;
                enqueue(&db, "second", "{}", 3).await;
            }
            Ok(())
        }
    });
    let first = enqueue(&t.db, "first", "{}", 3).await;
    // Far beyond the wait below: a worker relying on its poll would never see "second".
    let settings = QueueSettings {
        poll_interval: Duration::from_secs(3600),
        ..queue_settings()
    };
    let (stop, handle) = spawn_worker(&t.db, handlers, settings, "w1");
    job_in_state(&t.db, &first, JobState::Running).await;
    gate.notify_one();
    eventually("the job enqueued by the first to be done", || async {
        jobs::list(&t.db, None)
            .await
            .unwrap()
            .into_iter()
            .find(|j| j.kind == "second" && j.state == JobState::Done)
    })
    .await;
    stop.cancel();
    handle.await.unwrap();
}

async fn enqueue_run(db: &Db, lane: &str, n: usize) -> String {
    let mut conn = db.pool.acquire().await.unwrap();
    let mut job = jobs::NewJob::new("run", format!("{lane} {n}"), 3);
    job.lane = Some(lane.to_owned());
    jobs::enqueue(&mut conn, &job).await.unwrap().0
}

/// Two installations with five runs waiting each, one run at a time: they alternate,
/// though all of the first one's were queued before any of the second's.
#[tokio::test]
async fn installations_take_turns_for_run_slots() {
    let t = TestDb::new().await;
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = order.clone();
    let handlers = Handler::new(move |job: Job| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(job.payload.clone());
            Ok(())
        }
    });
    let mut ids = Vec::new();
    for lane in ["github:1", "github:2"] {
        for n in 0..5 {
            ids.push(enqueue_run(&t.db, lane, n).await);
        }
    }
    // The place a waiting run is told: every run queued before it, whatever its lane.
    let mut conn = t.db.pool.acquire().await.unwrap();
    let last = planwright::ids::JobId(ids[9].clone());
    assert_eq!(jobs::runs_ahead(&mut conn, &last).await.unwrap(), 9);
    drop(conn);
    let settings = QueueSettings {
        max_runs: 1,
        max_runs_per_installation: Some(1),
        ..queue_settings()
    };
    let (stop, handle) = spawn_worker(&t.db, handlers, settings, "w1");
    for id in &ids {
        job_in_state(&t.db, id, JobState::Done).await;
    }
    stop.cancel();
    handle.await.unwrap();
    let order = order.lock().unwrap().clone();
    let expected: Vec<String> = (0..5)
        .flat_map(|n| [format!("github:1 {n}"), format!("github:2 {n}")])
        .collect();
    assert_eq!(order, expected);
}

/// Runs of one installation stay within MAX_RUNS_PER_INSTALLATION across two workers
/// (two processes, as far as the queue knows), and full run slots hold up no other job.
#[tokio::test]
async fn an_installation_runs_no_more_than_its_bound_and_full_run_slots_block_nothing_else() {
    let t = TestDb::new().await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let open = gate.clone();
    let handlers = Handler::new(move |job: Job| {
        let gate = open.clone();
        async move {
            if job.kind == "run" {
                gate.acquire().await.unwrap().forget();
            }
            Ok(())
        }
    });
    let mut runs = Vec::new();
    for n in 0..3 {
        runs.push(enqueue_run(&t.db, "gitlab:acme", n).await);
    }
    runs.push(enqueue_run(&t.db, "gitlab:other", 0).await);
    let settings = QueueSettings {
        max_runs: 4,
        max_runs_per_installation: Some(2),
        ..queue_settings()
    };
    let (stop1, handle1) = spawn_worker(&t.db, handlers.clone(), settings.clone(), "w1");
    let (stop2, handle2) = spawn_worker(&t.db, handlers, settings, "w2");
    let running_of = |lane: &'static str| {
        let db = t.db.clone();
        async move {
            jobs::list(&db, None)
                .await
                .unwrap()
                .into_iter()
                .filter(|j| j.lane.as_deref() == Some(lane) && j.state == JobState::Running)
                .count()
        }
    };
    // The other installation's run starts although acme's waiting runs were queued first.
    job_in_state(&t.db, &runs[3], JobState::Running).await;
    eventually("acme's two runs to start", || async {
        (running_of("gitlab:acme").await == 2).then_some(())
    })
    .await;
    // An ordinary job is taken while runs hold their slots.
    let event = enqueue(&t.db, "event", "{}", 3).await;
    job_in_state(&t.db, &event, JobState::Done).await;
    assert_eq!(running_of("gitlab:acme").await, 2, "the bound holds");
    assert_eq!(
        jobs::get(&t.db, &runs[2]).await.unwrap().unwrap().state,
        JobState::Queued
    );
    gate.add_permits(4);
    for id in &runs {
        job_in_state(&t.db, id, JobState::Done).await;
    }
    stop1.cancel();
    stop2.cancel();
    handle1.await.unwrap();
    handle2.await.unwrap();
}
