//! Runs queued jobs: claims them with a lease, keeps the lease alive while the handler
//! works, and records the outcome (done, retry later with backoff, or dead-lettered).
//! On shutdown it stops claiming, lets running jobs finish for a grace period, then hands
//! the rest back to the queue.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::config::QueueSettings;
use crate::forge::ForgeError;
use crate::ids::JobId;
use crate::llm::ModelError;
use crate::metrics::{RequestTally, counting_forge_requests};
use crate::store::jobs::Room;
use crate::store::{self, Db, jobs, now_ms};

/// The longest a rate limit holds a job back at once (GitHub's and GitLab's windows are
/// an hour or less; a longer answer is checked again then).
const RATE_LIMIT_WAIT_MAX: Duration = Duration::from_secs(2 * 3600);
/// The shortest: a `Retry-After: 0` must not turn a held job into a loop on the forge.
const RATE_LIMIT_WAIT_MIN: Duration = Duration::from_secs(1);
/// How long after it was queued a job may still wait for rate limits without spending
/// attempts: past it, a forge that keeps refusing is a failure like any other, so a job
/// cannot be put off for ever.
const RATE_LIMIT_PATIENCE: Duration = Duration::from_secs(3 * 24 * 3600);

/// Why a job did not finish, and whether trying again can help.
#[derive(Debug)]
pub enum JobError {
    /// A passing condition (network, a busy database, a forge outage): try again later.
    Retryable(anyhow::Error),
    /// Trying again gives the same answer (a malformed payload, a refused request).
    Permanent(anyhow::Error),
}

impl JobError {
    pub fn is_retryable(&self) -> bool {
        match self {
            JobError::Retryable(_) => true,
            JobError::Permanent(_) => false,
        }
    }

    /// How long the forge asked to wait, when the job stopped at a rate limit: the job
    /// waits that long without the wait counting as an attempt, so a reset hours away
    /// delays the work but never ends it.
    pub fn rate_limit_wait(&self) -> Option<Duration> {
        let JobError::Retryable(e) = self else {
            return None;
        };
        e.chain()
            .find_map(|cause| match cause.downcast_ref::<ForgeError>() {
                Some(ForgeError::RateLimited {
                    retry_after: Some(wait),
                    ..
                }) => Some((*wait).clamp(RATE_LIMIT_WAIT_MIN, RATE_LIMIT_WAIT_MAX)),
                _ => None,
            })
    }

    pub fn message(&self) -> String {
        match self {
            JobError::Retryable(e) | JobError::Permanent(e) => format!("{e:#}"),
        }
    }
}

/// Only an error known to pass is retried: the first database, forge or model error in
/// its chain decides, and anything else is permanent, since trying a bug or a refused
/// request again only repeats it and delays the dead letter the operator sees.
impl From<anyhow::Error> for JobError {
    fn from(e: anyhow::Error) -> Self {
        let transient = e.chain().find_map(|cause| {
            if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
                Some(store::is_transient(e))
            } else if let Some(e) = cause.downcast_ref::<ForgeError>() {
                Some(e.is_retryable())
            } else {
                cause
                    .downcast_ref::<ModelError>()
                    .map(ModelError::is_retryable)
            }
        });
        if transient == Some(true) {
            JobError::Retryable(e)
        } else {
            JobError::Permanent(e)
        }
    }
}

impl From<sqlx::Error> for JobError {
    fn from(e: sqlx::Error) -> Self {
        if store::is_transient(&e) {
            JobError::Retryable(e.into())
        } else {
            JobError::Permanent(e.into())
        }
    }
}

impl From<ForgeError> for JobError {
    fn from(e: ForgeError) -> Self {
        if e.is_retryable() {
            JobError::Retryable(e.into())
        } else {
            JobError::Permanent(e.into())
        }
    }
}

/// Our own values that do not serialise will not on the next attempt either.
impl From<serde_json::Error> for JobError {
    fn from(e: serde_json::Error) -> Self {
        JobError::Permanent(e.into())
    }
}

/// What a handler gets: the job and the database.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: JobId,
    pub kind: String,
    pub payload: String,
    /// This attempt's number, starting at 1.
    pub attempt: i64,
    /// The delivery that caused it, for a job enqueued by a webhook.
    pub delivery: Option<crate::ids::DeliveryId>,
    pub db: Db,
}

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

/// Runs every job a worker claims: the queue knows no kinds, the handler (the session
/// layer's dispatch) reads the kind and payload and refuses one it does not know.
#[derive(Clone)]
pub struct Handler(Arc<dyn Fn(Job) -> HandlerFuture + Send + Sync>);

impl Handler {
    pub fn new<F, Fut>(handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        Self(Arc::new(move |job| Box::pin(handler(job))))
    }

    pub fn run(&self, job: Job) -> HandlerFuture {
        (self.0)(job)
    }
}

/// Wakes idle workers of this process as soon as a job is enqueued here; jobs enqueued by
/// other processes are found by polling.
#[derive(Debug, Clone, Default)]
pub struct Waker(Arc<Notify>);

impl Waker {
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

pub struct Worker {
    pub db: Db,
    pub handler: Handler,
    pub settings: QueueSettings,
    /// Names this process in leases, for the operator.
    pub owner: String,
    pub waker: Waker,
    /// Whether this process takes runs now: a worker whose sandbox cannot start leaves
    /// them to the workers whose can, rather than failing each.
    pub runs: RunGate,
}

/// Whether a worker takes runs, and if not why: closed by a sandbox that cannot start,
/// opened once it does. Shared by the worker's loop and its `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct RunGate(Arc<std::sync::RwLock<Option<Arc<str>>>>);

impl RunGate {
    /// Runs are taken.
    pub fn open() -> Self {
        Self::default()
    }

    /// Runs are not taken, for `reason`.
    pub fn closed(reason: &str) -> Self {
        Self(Arc::new(std::sync::RwLock::new(Some(Arc::from(reason)))))
    }

    /// Whether runs are taken: what the claim loop asks each turn, without a copy of the
    /// reason.
    pub fn is_open(&self) -> bool {
        self.0.read().is_ok_and(|r| r.is_none())
    }

    /// Why runs are not taken; `None` when they are.
    pub fn refusal(&self) -> Option<Arc<str>> {
        self.0.read().map_or(None, |r| r.clone())
    }

    pub fn set(&self, refusal: Option<&str>) {
        if let Ok(mut r) = self.0.write() {
            *r = refusal.map(Arc::from);
        }
    }
}

impl Worker {
    /// Runs until `stop` is cancelled, then drains as described in the module comment.
    pub async fn run(self, stop: CancellationToken) {
        let Worker {
            db,
            handler,
            settings,
            owner,
            waker,
            runs: gate,
        } = self;
        // Runs have their own slots, so hours of executions never hold up webhooks and
        // planning; only this loop takes permits, so what it sees free stays free.
        let others = Arc::new(Semaphore::new(settings.workers.max(1)));
        let runs = Arc::new(Semaphore::new(settings.max_runs.max(1)));
        let abort = CancellationToken::new();
        let mut running = JoinSet::new();
        loop {
            while running.try_join_next().is_some() {}
            if stop.is_cancelled() {
                break;
            }
            let room = Room {
                other: others.available_permits() > 0,
                run: gate.is_open() && runs.available_permits() > 0,
                per_lane: settings.max_runs_per_installation,
            };
            if !room.other && !room.run {
                // Every job that ends wakes this loop.
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    _ = waker.0.notified() => continue,
                }
            }
            match jobs::claim(&db, &owner, settings.lease, room).await {
                Ok(Some(job)) => {
                    let slots = if job.lane.is_some() { &runs } else { &others };
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        // Not reachable while this loop alone takes permits; the job goes
                        // back rather than running beyond its bound.
                        if let Err(e) = jobs::release(&db, &job).await {
                            warn!(error = %format!("{e:#}"), "Could not hand a job back; its lease will expire");
                        }
                        continue;
                    };
                    let span =
                        info_span!("job", id = %job.id, kind = %job.kind, attempt = job.attempts);
                    let run = run_one(
                        db.clone(),
                        handler.clone(),
                        settings.clone(),
                        job,
                        abort.clone(),
                    );
                    let waker = waker.clone();
                    running.spawn(
                        async move {
                            run.await;
                            drop(permit);
                            // Jobs enqueue the next step (an event its session's plan, an
                            // approval the execution), and a slot is free: look now, not
                            // a poll later.
                            waker.wake();
                        }
                        .instrument(span),
                    );
                }
                Ok(None) => {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = waker.0.notified() => {}
                        _ = tokio::time::sleep(settings.poll_interval) => {}
                    }
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "Could not claim a job");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(settings.poll_interval) => {}
                    }
                }
            }
        }
        while running.try_join_next().is_some() {}
        if !running.is_empty() {
            info!(
                jobs = running.len(),
                "waiting for running jobs before stopping"
            );
        }
        let grace = tokio::time::sleep(settings.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                next = running.join_next() => if next.is_none() { break },
                _ = &mut grace, if !abort.is_cancelled() => {
                    warn!(jobs = running.len(), "handing unfinished jobs back to the queue");
                    abort.cancel();
                }
            }
        }
    }
}

async fn run_one(
    db: Db,
    handler: Handler,
    settings: QueueSettings,
    job: jobs::Claimed,
    abort: CancellationToken,
) {
    let outcome = if job.attempts > job.max_attempts {
        // Only a job whose lease ran out gets here: its worker died mid-run every time.
        let last = job.last_error.clone().unwrap_or_default();
        Some(Err(JobError::Permanent(anyhow::anyhow!(
            "gave up after {} attempts whose worker stopped before finishing{}{last}",
            job.max_attempts,
            if last.is_empty() {
                ""
            } else {
                "; last error: "
            }
        ))))
    } else {
        let task = handler.run(Job {
            id: JobId(job.id.clone()),
            kind: job.kind.clone(),
            payload: job.payload.clone(),
            attempt: job.attempts,
            delivery: job.delivery_id.clone(),
            db: db.clone(),
        });
        let tally = Arc::new(RequestTally::default());
        let task = Box::pin(counting_forge_requests(tally.clone(), task));
        let outcome = supervise(&db, &settings, &job, task, &abort).await;
        // What each job costs in forge calls, for the operator weighing rate limits.
        let calls = tally.total();
        if calls > 0 {
            info!(
                job = %job.id,
                kind = %job.kind,
                forge_requests = calls,
                routes = %tally.summary(),
                "the job's forge requests"
            );
        }
        outcome
    };
    let Some(result) = outcome else { return };
    let recorded = match &result {
        Ok(()) => jobs::complete(&db, &job).await,
        Err(e)
            if let Some(wait) = e.rate_limit_wait()
                && now_ms() - job.created_at < RATE_LIMIT_PATIENCE.as_millis() as i64 =>
        {
            warn!(error = %e.message(), wait_s = wait.as_secs(), "job waits for the forge's rate limit");
            jobs::defer(&db, &job, now_ms() + wait.as_millis() as i64, &e.message()).await
        }
        Err(e) if e.is_retryable() && job.attempts < job.max_attempts => {
            let delay = backoff(job.attempts, settings.retry_base, settings.retry_max);
            warn!(error = %e.message(), retry_in_ms = delay.as_millis() as u64, "job failed; will retry");
            jobs::retry_at(&db, &job, now_ms() + delay.as_millis() as i64, &e.message()).await
        }
        Err(e) => {
            warn!(error = %e.message(), "job failed for good; dead-lettered");
            jobs::dead_letter(&db, &job, &e.message()).await
        }
    };
    match recorded {
        Ok(true) => {}
        Ok(false) => warn!("the job's lease was taken over before its outcome was recorded"),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "Could not record the job's outcome; its lease will expire")
        }
    }
}

/// Drives the handler while heartbeating. `None`: the job is no longer ours (lease lost,
/// or handed back at shutdown).
async fn supervise(
    db: &Db,
    settings: &QueueSettings,
    job: &jobs::Claimed,
    task: HandlerFuture,
    abort: &CancellationToken,
) -> Option<Result<(), JobError>> {
    tokio::pin!(task);
    let mut beat = tokio::time::interval(settings.lease / 3);
    beat.tick().await;
    // Without a renewal for this long the lease may have run out and another worker may
    // hold the job: stop rather than run it twice.
    let give_up_after = settings.lease.saturating_sub(settings.lease / 6);
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::select! {
            result = &mut task => return Some(result),
            _ = beat.tick() => match jobs::heartbeat(db, job, settings.lease).await {
                Ok(true) => renewed = tokio::time::Instant::now(),
                Ok(false) => {
                    warn!("lost the job's lease; stopping it");
                    return None;
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "Could not renew the job's lease");
                    if renewed.elapsed() >= give_up_after {
                        warn!("the job's lease could not be renewed in time; stopping it");
                        return None;
                    }
                }
            },
            _ = abort.cancelled() => {
                if let Err(e) = jobs::release(db, job).await {
                    warn!(error = %format!("{e:#}"), "Could not hand the job back; its lease will expire");
                }
                return None;
            }
        }
    }
}

/// Exponential backoff with jitter: attempt n waits between half and all of
/// `base * 2^(n-1)`, capped at `max`.
pub fn backoff(attempt: i64, base: Duration, max: Duration) -> Duration {
    let exponent = attempt.clamp(1, 32) as u32 - 1;
    let full = base.saturating_mul(2u32.saturating_pow(exponent)).min(max);
    let half = full / 2;
    let jitter_ms = rand::rng().random_range(0..=half.as_millis() as u64);
    half + Duration::from_millis(jitter_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_known_to_pass_are_retried() {
        let rate_limited = ForgeError::RateLimited {
            what: "GET /x".into(),
            retry_after: Some(Duration::from_secs(3600)),
        };
        assert!(matches!(
            JobError::from(rate_limited),
            JobError::Retryable(_)
        ));
        let missing = ForgeError::NotFound {
            what: "GET /x".into(),
        };
        assert!(matches!(JobError::from(missing), JobError::Permanent(_)));
        // Wrapped in context, the forge's error still decides.
        let wrapped = anyhow::Error::from(ForgeError::RateLimited {
            what: "GET /x".into(),
            retry_after: None,
        })
        .context("Could not read the issue");
        assert!(JobError::from(wrapped).is_retryable());
        assert!(JobError::from(anyhow::Error::from(sqlx::Error::PoolTimedOut)).is_retryable());
        assert!(!JobError::from(sqlx::Error::RowNotFound).is_retryable());
        assert!(!JobError::from(anyhow::anyhow!("the contract has no tasks")).is_retryable());
    }

    #[test]
    fn backoff_grows_and_is_capped_with_jitter() {
        let base = Duration::from_secs(2);
        let max = Duration::from_secs(60);
        for _ in 0..200 {
            let first = backoff(1, base, max);
            assert!(first >= Duration::from_secs(1) && first <= Duration::from_secs(2));
            let third = backoff(3, base, max);
            assert!(third >= Duration::from_secs(4) && third <= Duration::from_secs(8));
            let late = backoff(30, base, max);
            assert!(late >= Duration::from_secs(30) && late <= max);
        }
    }
}
