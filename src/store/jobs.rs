//! The durable job queue. A job is enqueued in the same transaction as the state change
//! that needs it; a worker claims it with a lease carrying a fresh token, keeps the lease
//! alive with heartbeats, and finishes it only while it still holds that token. A lease
//! that runs out (a crashed or partitioned worker) makes the job claimable again.

use std::time::Duration;

use anyhow::Result;
use sqlx::AnyConnection;

use super::{Backend, Db, now_ms};
use crate::ids::{DeliveryId, JobId, SessionId};

/// Where a job is: waiting (also between retries), held by a worker's lease, or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    /// Dead-lettered: out of attempts, or an error trying again would only repeat.
    Dead,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Dead => "dead",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a job state")]
pub struct UnknownJobState(String);

impl std::str::FromStr for JobState {
    type Err = UnknownJobState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use JobState::*;
        [Queued, Running, Done, Dead]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownJobState(s.to_owned()))
    }
}

crate::ids::stored_as_text!(JobState);

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub kind: String,
    pub payload: String,
    pub max_attempts: i64,
    /// Earliest start, in epoch milliseconds; `None` means now.
    pub run_at: Option<i64>,
    pub delivery: Option<DeliveryId>,
    pub session: Option<SessionId>,
    /// For a run (an execution): whose it is, the installation or group, so that runs
    /// take turns by lane and are bounded per lane. `None` for every other job.
    pub lane: Option<String>,
}

impl NewJob {
    pub fn new(kind: impl Into<String>, payload: impl Into<String>, max_attempts: i64) -> Self {
        Self {
            kind: kind.into(),
            payload: payload.into(),
            max_attempts,
            run_at: None,
            delivery: None,
            session: None,
            lane: None,
        }
    }
}

/// A job this worker holds the lease of.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub id: String,
    pub kind: String,
    pub payload: String,
    /// This attempt's number, starting at 1.
    pub attempts: i64,
    pub max_attempts: i64,
    pub lease_token: String,
    pub last_error: Option<String>,
    /// When it was enqueued, epoch milliseconds.
    pub created_at: i64,
    pub lane: Option<String>,
    pub delivery_id: Option<DeliveryId>,
}

/// A job as stored, for listings and tests.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct JobRow {
    pub id: JobId,
    pub kind: String,
    pub payload: String,
    pub state: JobState,
    pub attempts: i64,
    pub max_attempts: i64,
    pub run_at: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_error: Option<String>,
    pub delivery_id: Option<DeliveryId>,
    pub session_id: Option<SessionId>,
    pub lane: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

macro_rules! job_columns {
    () => {
        "id, kind, payload, state, attempts, max_attempts, run_at, lease_owner, \
         lease_expires_at, last_error, delivery_id, session_id, lane, created_at, updated_at, \
         finished_at"
    };
}

/// Claims one job: `$pick` is the query that finds its id (with `$1` now, `$2`/`$3` 1 when
/// the worker has room for other jobs / runs, `$4` the bound per lane or -1).
macro_rules! claim_sql {
    ($pick:expr) => {
        concat!(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_token = $5, ",
            "lease_owner = $6, lease_expires_at = $7, updated_at = $1 WHERE id = (",
            $pick,
            ") RETURNING id, kind, payload, attempts, max_attempts, lease_token, last_error, ",
            "created_at, lane, delivery_id"
        )
    };
}

/// A run's lane is below its bound (every process's live leases counted).
macro_rules! lane_has_room {
    () => {
        "($4 < 0 OR (SELECT COUNT(*) FROM jobs r WHERE r.lane = j.lane \
         AND r.state = 'running' AND r.lease_expires_at >= $1) < $4)"
    };
}

/// The three places a claim looks, in order, each an indexed search that stays cheap
/// however long the queue: a job whose worker vanished (its lease ran out); the oldest
/// due job that is not a run; the due run of the lane served longest ago, so lanes take
/// turns (runs are few, so sorting them is cheap). `$lock` is the backend's row-locking
/// clause for the candidate row.
macro_rules! claims {
    ($lock:literal) => {
        [
            claim_sql!(concat!(
                "SELECT j.id FROM jobs j WHERE j.state = 'running' AND j.lease_expires_at < $1 ",
                "AND ((j.lane IS NULL AND $2 = 1) OR (j.lane IS NOT NULL AND $3 = 1 AND ",
                lane_has_room!(),
                ")) ORDER BY j.lease_expires_at LIMIT 1 ",
                $lock
            )),
            claim_sql!(concat!(
                "SELECT j.id FROM jobs j WHERE $2 = 1 AND j.state = 'queued' ",
                "AND j.run_at <= $1 AND j.lane IS NULL ORDER BY j.run_at, j.id LIMIT 1 ",
                $lock
            )),
            claim_sql!(concat!(
                "SELECT j.id FROM jobs j LEFT JOIN lanes l ON l.lane = j.lane ",
                "WHERE $3 = 1 AND j.state = 'queued' AND j.lane IS NOT NULL AND j.run_at <= $1 ",
                "AND ",
                lane_has_room!(),
                " ORDER BY COALESCE(l.turn, 0), j.run_at, j.id LIMIT 1 ",
                $lock
            )),
        ]
    };
}

const CLAIMS_POSTGRES: [&str; 3] = claims!("FOR UPDATE OF j SKIP LOCKED");
const CLAIMS_SQLITE: [&str; 3] = claims!("");

/// What a worker has room for when it claims.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// A job that is not a run.
    pub other: bool,
    /// A run.
    pub run: bool,
    /// Runs of one lane at once, across every process; `None` for no bound.
    pub per_lane: Option<usize>,
}

impl Room {
    /// Room for any one job, with no bound per lane.
    pub const ANY: Room = Room {
        other: true,
        run: true,
        per_lane: None,
    };
}

/// Adds a job; call it inside the transaction that makes the job necessary.
pub async fn enqueue(conn: &mut AnyConnection, job: &NewJob) -> Result<JobId> {
    let id = JobId::generate();
    let now = now_ms();
    sqlx::query(
        "INSERT INTO jobs (id, kind, payload, state, attempts, max_attempts, run_at, \
         delivery_id, session_id, lane, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $9, $10, $10)",
    )
    .bind(&id)
    .bind(&job.kind)
    .bind(&job.payload)
    .bind(JobState::Queued.as_str())
    .bind(job.max_attempts)
    .bind(job.run_at.unwrap_or(now))
    .bind(job.delivery.as_ref().map(|d| d.0.clone()))
    .bind(job.session.as_ref().map(|s| s.0.clone()))
    .bind(job.lane.as_deref())
    .bind(now)
    .execute(conn)
    .await?;
    Ok(id)
}

/// Takes the next due job (or one whose lease ran out) that fits `room` for `owner`,
/// holding it for `lease`.
pub async fn claim(db: &Db, owner: &str, lease: Duration, room: Room) -> Result<Option<Claimed>> {
    // A claimer that lost the race for a lane's last slot looks again: by then the lane
    // shows full.
    for _ in 0..4 {
        if let Some(claimed) = try_claim(db, owner, lease, room).await? {
            return Ok(claimed);
        }
    }
    Ok(None)
}

/// One try: `Some(None)` when nothing fits, `None` when the lane filled meanwhile.
async fn try_claim(
    db: &Db,
    owner: &str,
    lease: Duration,
    room: Room,
) -> Result<Option<Option<Claimed>>> {
    let now = now_ms();
    // PostgreSQL: concurrent claimers skip each other's locked candidate rows instead of
    // waiting on them. SQLite: the single writer lock makes each statement atomic, its
    // count of the lane's runs included.
    let claims = match db.backend {
        Backend::Postgres => &CLAIMS_POSTGRES,
        Backend::Sqlite => &CLAIMS_SQLITE,
    };
    let per_lane = room.per_lane.map_or(-1, |n| n as i64);
    let token = uuid::Uuid::new_v4().to_string();
    let mut claimed = None;
    for sql in claims.iter().copied() {
        claimed = sqlx::query_as::<_, Claimed>(sql)
            .bind(now)
            .bind(i64::from(room.other))
            .bind(i64::from(room.run))
            .bind(per_lane)
            .bind(&token)
            .bind(owner)
            .bind(now + lease.as_millis() as i64)
            .fetch_optional(&db.writer)
            .await?;
        if claimed.is_some() {
            break;
        }
    }
    let Some(claimed) = claimed else {
        return Ok(Some(None));
    };
    let Some(lane) = &claimed.lane else {
        return Ok(Some(Some(claimed)));
    };
    // The lane was served now: it goes behind every lane that waits.
    sqlx::query(
        "INSERT INTO lanes (lane, turn) \
         SELECT $1, COALESCE(MAX(turn), 0) + 1 FROM lanes WHERE TRUE \
         ON CONFLICT (lane) DO UPDATE SET turn = excluded.turn",
    )
    .bind(lane)
    .execute(&db.writer)
    .await?;
    if db.backend == Backend::Postgres && per_lane >= 0 {
        // Claimers in other transactions may have counted the lane at the same moment:
        // one past the bound hands its run back before starting it.
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE lane = $1 AND state = 'running' \
             AND lease_expires_at >= $2",
        )
        .bind(lane)
        .bind(now)
        .fetch_one(&db.writer)
        .await?;
        if running > per_lane {
            release(db, &claimed).await?;
            return Ok(None);
        }
    }
    Ok(Some(Some(claimed)))
}

/// Runs waiting in the queue that would start before the run `job`, as it stands now:
/// those queued earlier, whatever their lane. For telling a waiting run its place.
pub async fn runs_ahead(conn: &mut AnyConnection, job: &JobId) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs w, jobs me WHERE me.id = $1 AND w.lane IS NOT NULL \
         AND w.state = 'queued' AND w.id <> me.id \
         AND (w.run_at < me.run_at OR (w.run_at = me.run_at AND w.id < me.id))",
    )
    .bind(job)
    .fetch_one(conn)
    .await?)
}

/// Runs holding a live lease now, in every process.
pub async fn runs_running(conn: &mut AnyConnection) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE lane IS NOT NULL AND state = 'running' \
         AND lease_expires_at >= $1",
    )
    .bind(now_ms())
    .fetch_one(conn)
    .await?)
}

/// Extends the lease; `false` means it was lost (another worker took the job over).
pub async fn heartbeat(db: &Db, job: &Claimed, lease: Duration) -> Result<bool> {
    let now = now_ms();
    let done = sqlx::query(
        "UPDATE jobs SET lease_expires_at = $1, updated_at = $2 \
         WHERE id = $3 AND lease_token = $4 AND state = 'running'",
    )
    .bind(now + lease.as_millis() as i64)
    .bind(now)
    .bind(&job.id)
    .bind(&job.lease_token)
    .execute(&db.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks the job done; `false` means the lease had been lost and nothing was changed.
pub async fn complete(db: &Db, job: &Claimed) -> Result<bool> {
    finish(db, job, JobState::Done, None, None).await
}

/// Puts the job back for another attempt at `run_at`, keeping the error.
pub async fn retry_at(db: &Db, job: &Claimed, run_at: i64, error: &str) -> Result<bool> {
    finish(db, job, JobState::Queued, Some(run_at), Some(error)).await
}

/// Runs the job again at `run_at` without counting this attempt: it was held back (a
/// forge's rate limit), not failed.
pub async fn defer(db: &Db, job: &Claimed, run_at: i64, error: &str) -> Result<bool> {
    hand_back(db, job, Some(run_at), Some(error)).await
}

/// Gives up on the job, keeping the error for the operator.
pub async fn dead_letter(db: &Db, job: &Claimed, error: &str) -> Result<bool> {
    finish(db, job, JobState::Dead, None, Some(error)).await
}

/// Hands an unfinished job back without counting the attempt (a worker shutting down);
/// it keeps its place in the queue.
pub async fn release(db: &Db, job: &Claimed) -> Result<bool> {
    hand_back(db, job, None, None).await
}

/// Queues a running job again without counting its attempt, at `run_at` (else where it
/// was) and with `error` (else the last one kept).
async fn hand_back(
    db: &Db,
    job: &Claimed,
    run_at: Option<i64>,
    error: Option<&str>,
) -> Result<bool> {
    let now = now_ms();
    let done = sqlx::query(
        "UPDATE jobs SET state = 'queued', attempts = attempts - 1, \
         run_at = COALESCE($1, run_at), last_error = COALESCE($2, last_error), \
         lease_token = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = $3 \
         WHERE id = $4 AND lease_token = $5 AND state = 'running'",
    )
    .bind(run_at)
    .bind(error)
    .bind(now)
    .bind(&job.id)
    .bind(&job.lease_token)
    .execute(&db.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn finish(
    db: &Db,
    job: &Claimed,
    state: JobState,
    run_at: Option<i64>,
    error: Option<&str>,
) -> Result<bool> {
    let now = now_ms();
    let finished_at = matches!(state, JobState::Done | JobState::Dead).then_some(now);
    let done = sqlx::query(
        "UPDATE jobs SET state = $1, run_at = COALESCE($2, run_at), \
         last_error = COALESCE($3, last_error), finished_at = $4, lease_token = NULL, \
         lease_owner = NULL, lease_expires_at = NULL, updated_at = $5 \
         WHERE id = $6 AND lease_token = $7 AND state = 'running'",
    )
    .bind(state.as_str())
    .bind(run_at)
    .bind(error)
    .bind(finished_at)
    .bind(now)
    .bind(&job.id)
    .bind(&job.lease_token)
    .execute(&db.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn get(db: &Db, id: &str) -> Result<Option<JobRow>> {
    let sql = concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = $1");
    Ok(sqlx::query_as::<_, JobRow>(sql)
        .bind(id)
        .fetch_optional(&db.pool)
        .await?)
}

/// Jobs in creation order, optionally only those of one delivery.
pub async fn list(db: &Db, delivery: Option<&str>) -> Result<Vec<JobRow>> {
    let rows = match delivery {
        Some(d) => {
            let sql = concat!(
                "SELECT ",
                job_columns!(),
                " FROM jobs WHERE delivery_id = $1 ORDER BY created_at, id"
            );
            sqlx::query_as::<_, JobRow>(sql)
                .bind(d)
                .fetch_all(&db.pool)
                .await?
        }
        None => {
            let sql = concat!(
                "SELECT ",
                job_columns!(),
                " FROM jobs ORDER BY created_at, id"
            );
            sqlx::query_as::<_, JobRow>(sql).fetch_all(&db.pool).await?
        }
    };
    Ok(rows)
}

/// How many jobs there are of each kind and state, for `/metrics`.
pub async fn counts(db: &Db) -> Result<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT kind, state, COUNT(*) FROM jobs GROUP BY kind, state ORDER BY kind, state",
    )
    .fetch_all(&db.pool)
    .await?)
}

/// The work waiting for a worker and the work running, as the stable view
/// `planwright_work_waiting` gives it to autoscalers: runs (executions) and other jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct WorkWaiting {
    pub runs_waiting: i64,
    pub runs_running: i64,
    pub jobs_waiting: i64,
    pub jobs_running: i64,
}

/// The view `planwright_work_waiting`, read as an autoscaler reads it.
pub async fn work_waiting(db: &Db) -> Result<WorkWaiting> {
    Ok(sqlx::query_as(
        "SELECT runs_waiting, runs_running, jobs_waiting, jobs_running FROM planwright_work_waiting",
    )
    .fetch_one(&db.pool)
    .await?)
}

/// When the longest-waiting job that is due by `now` became due; `None` when none waits.
pub async fn oldest_due(db: &Db, now: i64) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar("SELECT MIN(run_at) FROM jobs WHERE state = $1 AND run_at <= $2")
            .bind(JobState::Queued.as_str())
            .bind(now)
            .fetch_one(&db.pool)
            .await?,
    )
}
