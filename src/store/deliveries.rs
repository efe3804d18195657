//! The webhook inbox: every verified delivery is recorded once, keyed by the forge's
//! delivery id, together with the jobs it causes, in one transaction.

use anyhow::Result;
use sqlx::AnyConnection;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Db, jobs, now_ms};
use crate::event::ForgeKind;
use crate::ids::{CommentId, DeliveryId, InstallationId, RepoName};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Acted on: jobs were enqueued.
    Queued,
    /// Accepted; planwright has nothing to do for it.
    Ignored,
    /// The signature was valid but the body could not be read.
    Rejected,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Ignored => "ignored",
            Status::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a delivery status")]
pub struct UnknownStatus(String);

impl std::str::FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Status::Queued, Status::Ignored, Status::Rejected]
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

crate::ids::stored_as_text!(Status);

#[derive(Debug)]
pub struct NewDelivery {
    pub forge: ForgeKind,
    /// The forge's id for this delivery; `None` when it sent none (no deduplication).
    pub delivery_key: Option<String>,
    pub event: String,
    pub action: Option<String>,
    pub repo: Option<RepoName>,
    pub installation: Option<InstallationId>,
    pub status: Status,
    pub error: Option<String>,
    pub payload: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Recorded {
    New {
        id: DeliveryId,
        jobs: usize,
    },
    /// The forge sent this delivery before; nothing was written.
    Duplicate,
}

/// Records the delivery and enqueues `jobs` (each linked to it), unless a delivery with
/// the same key was already recorded.
pub async fn record(db: &Db, delivery: &NewDelivery, jobs: &[jobs::NewJob]) -> Result<Recorded> {
    let mut tx = db.writer.begin().await?;
    let recorded = insert(&mut tx, delivery, jobs).await?;
    tx.commit().await?;
    Ok(recorded)
}

/// Writes one delivery and its jobs inside the caller's transaction.
async fn insert(
    conn: &mut AnyConnection,
    delivery: &NewDelivery,
    jobs: &[jobs::NewJob],
) -> Result<Recorded> {
    let id = DeliveryId::generate();
    let key = delivery.delivery_key.as_deref().unwrap_or(id.as_str());
    let inserted = sqlx::query(
        "INSERT INTO deliveries (id, forge, delivery_key, event, action, repo, installation_id, \
         status, error, payload, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (forge, delivery_key) DO NOTHING",
    )
    .bind(&id)
    .bind(delivery.forge)
    .bind(key)
    .bind(&delivery.event)
    .bind(delivery.action.as_deref())
    .bind(delivery.repo.as_ref().map(RepoName::as_str))
    .bind(delivery.installation)
    .bind(delivery.status.as_str())
    .bind(delivery.error.as_deref())
    .bind(&delivery.payload)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 0 {
        return Ok(Recorded::Duplicate);
    }
    for job in jobs {
        let mut job = job.clone();
        job.delivery = Some(id.clone());
        jobs::enqueue(&mut *conn, &job).await?;
    }
    Ok(Recorded::New {
        id,
        jobs: jobs.len(),
    })
}

/// Most deliveries written in one transaction.
const BATCH_MAX: usize = 128;
/// Batches written at once on PostgreSQL.
const POSTGRES_WRITERS: usize = 4;

/// The webhook path's writer: deliveries that arrive together are written in one
/// transaction (group commit), and each is answered only after that transaction
/// committed, so nothing acknowledged is ever lost and a busy forge costs one commit per
/// batch instead of one per delivery. A delivery whose batch fails is written alone, so
/// one bad row fails only its own request.
#[derive(Debug, Clone)]
pub struct Inbox {
    arrivals: mpsc::Sender<Arrival>,
}

struct Arrival {
    delivery: NewDelivery,
    jobs: Vec<jobs::NewJob>,
    answer: oneshot::Sender<Result<Recorded>>,
}

impl Inbox {
    /// Starts the writers; they end when every `Inbox` handle is dropped. SQLite takes
    /// one writer at a time, so it gets one; PostgreSQL writes several batches at once.
    pub fn start(db: Db) -> Inbox {
        let (arrivals, waiting) = mpsc::channel(4 * BATCH_MAX);
        let waiting = Arc::new(Mutex::new(waiting));
        let writers = match db.backend {
            super::Backend::Sqlite => 1,
            super::Backend::Postgres => POSTGRES_WRITERS,
        };
        for _ in 0..writers {
            tokio::spawn(write_batches(db.clone(), waiting.clone()));
        }
        Inbox { arrivals }
    }

    /// Records the delivery with its jobs, as [`record`] does, once its batch committed.
    pub async fn record(&self, delivery: NewDelivery, jobs: Vec<jobs::NewJob>) -> Result<Recorded> {
        let (answer, answered) = oneshot::channel();
        let arrival = Arrival {
            delivery,
            jobs,
            answer,
        };
        self.arrivals
            .send(arrival)
            .await
            .map_err(|_| anyhow::anyhow!("The inbox writer has stopped"))?;
        answered.await.map_err(|_| {
            anyhow::anyhow!("The inbox writer stopped before the delivery was written")
        })?
    }
}

async fn write_batches(db: Db, waiting: Arc<Mutex<mpsc::Receiver<Arrival>>>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    // What arrived while the last batch was written is the next batch: no delivery waits
    // for company. One writer takes at a time; the others write meanwhile.
    loop {
        let taken = waiting.lock().await.recv_many(&mut batch, BATCH_MAX).await;
        if taken == 0 {
            return;
        }
        let results = match write_batch(&db, &batch).await {
            Ok(recorded) => recorded.into_iter().map(Ok).collect(),
            Err(e) if batch.len() == 1 => vec![Err(e)],
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), deliveries = batch.len(), "Could not write a batch of deliveries; writing them one by one");
                let mut results = Vec::with_capacity(batch.len());
                for arrival in &batch {
                    results.push(record(&db, &arrival.delivery, &arrival.jobs).await);
                }
                results
            }
        };
        for (arrival, result) in batch.drain(..).zip(results) {
            // The request may have gone (the forge gave up waiting): it redelivers, and
            // the key makes that a duplicate.
            let _ = arrival.answer.send(result);
        }
    }
}

async fn write_batch(db: &Db, batch: &[Arrival]) -> Result<Vec<Recorded>> {
    let mut tx = db.writer.begin().await?;
    let mut recorded = Vec::with_capacity(batch.len());
    for arrival in batch {
        recorded.push(insert(&mut tx, &arrival.delivery, &arrival.jobs).await?);
    }
    tx.commit().await?;
    Ok(recorded)
}

/// A delivery as listed for the operator (without its payload).
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct DeliveryRow {
    pub id: DeliveryId,
    pub forge: ForgeKind,
    pub delivery_key: String,
    pub event: String,
    pub action: Option<String>,
    pub repo: Option<RepoName>,
    pub installation_id: Option<InstallationId>,
    pub status: Status,
    pub error: Option<String>,
    pub received_at: i64,
    pub jobs: i64,
}

/// The newest deliveries first.
pub async fn list(db: &Db, limit: i64) -> Result<Vec<DeliveryRow>> {
    Ok(sqlx::query_as::<_, DeliveryRow>(
        "SELECT d.id, d.forge, d.delivery_key, d.event, d.action, d.repo, d.installation_id, \
         d.status, d.error, d.received_at, \
         (SELECT COUNT(*) FROM jobs j WHERE j.delivery_id = d.id) AS jobs \
         FROM deliveries d ORDER BY d.received_at DESC, d.id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(&db.pool)
    .await?)
}

/// The stored body of one delivery.
pub async fn payload(db: &Db, id: &str) -> Result<Option<String>> {
    Ok(
        sqlx::query_scalar::<_, String>("SELECT payload FROM deliveries WHERE id = $1")
            .bind(id)
            .fetch_optional(&db.pool)
            .await?,
    )
}

pub async fn count(db: &Db) -> Result<i64> {
    Ok(
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM deliveries")
            .fetch_one(&db.pool)
            .await?,
    )
}

/// How many deliveries there are of each forge, event and outcome, for `/metrics`.
pub async fn counts(db: &Db) -> Result<Vec<(String, String, String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT forge, event, status, COUNT(*) FROM deliveries \
         GROUP BY forge, event, status ORDER BY forge, event, status",
    )
    .fetch_all(&db.pool)
    .await?)
}

impl Db {
    /// [`claim_command`], on the writer's connection.
    pub async fn claim_command(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        comment: CommentId,
        delivery: Option<&str>,
    ) -> Result<bool> {
        claim_command(
            &mut *self.writer.acquire().await?,
            forge,
            repo,
            comment,
            delivery,
        )
        .await
    }
}

/// Claims the command in comment `comment` for `delivery`. `false` when another delivery
/// (a replay under a new delivery id) claimed it first; the claiming delivery's own
/// retries get `true` again. A claim whose delivery gave up without carrying the command
/// out (its jobs dead-lettered, nothing done) passes to the next delivery, so that a
/// redelivery after an outage is not dropped.
pub async fn claim_command(
    conn: &mut sqlx::AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    comment: CommentId,
    delivery: Option<&str>,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO command_comments (forge, repo, comment_id, delivery_id, claimed_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (forge, repo, comment_id) DO NOTHING",
    )
    .bind(forge)
    .bind(repo)
    .bind(comment)
    .bind(delivery)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 1 {
        return Ok(true);
    }
    let Some(delivery) = delivery else {
        return Ok(false);
    };
    let taken_over = sqlx::query(
        "UPDATE command_comments SET delivery_id = $4, claimed_at = $5 \
         WHERE forge = $1 AND repo = $2 AND comment_id = $3 AND delivery_id IS NOT NULL \
         AND EXISTS (SELECT 1 FROM jobs j WHERE j.delivery_id = command_comments.delivery_id \
                     AND j.state = $6) \
         AND NOT EXISTS (SELECT 1 FROM jobs j \
                         WHERE j.delivery_id = command_comments.delivery_id AND j.state <> $6) \
         AND NOT EXISTS (SELECT 1 FROM audit_log a \
                         WHERE a.delivery_id = command_comments.delivery_id \
                         AND a.action IN ('command.handled', 'session.started'))",
    )
    .bind(forge)
    .bind(repo)
    .bind(comment)
    .bind(delivery)
    .bind(now_ms())
    .bind(jobs::JobState::Dead.as_str())
    .execute(&mut *conn)
    .await?;
    if taken_over.rows_affected() == 1 {
        return Ok(true);
    }
    let claimed_by: Option<Option<String>> = sqlx::query_scalar(
        "SELECT delivery_id FROM command_comments \
         WHERE forge = $1 AND repo = $2 AND comment_id = $3",
    )
    .bind(forge)
    .bind(repo)
    .bind(comment)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(claimed_by.flatten().as_deref() == Some(delivery))
}
