//! Pull request reviews planwright acted on (claimed once each) and the inline comments a
//! revision round owes an answer.

use anyhow::Result;

use super::now_ms;
use crate::contract::ContractVersion;
use crate::event::ForgeKind;
use crate::ids::{CommentId, RepoName, SessionId};

/// Claims review `review` of `repo` for `session`, starting the round for `version` (or
/// none): a new review, or one that waited in the queue. `false` when it was claimed
/// before: a redelivery, which must do nothing.
pub async fn claim(
    conn: &mut sqlx::AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    review: i64,
    session: &SessionId,
    version: Option<ContractVersion>,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO reviews (forge, repo, review_id, session_id, version, claimed_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (forge, repo, review_id) DO NOTHING",
    )
    .bind(forge)
    .bind(repo)
    .bind(review)
    .bind(session)
    .bind(version)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    if inserted.rows_affected() == 1 {
        return Ok(true);
    }
    let Some(version) = version else {
        return Ok(false);
    };
    let dequeued = sqlx::query(
        "UPDATE reviews SET version = $4, queued = NULL \
         WHERE forge = $1 AND repo = $2 AND review_id = $3 AND queued IS NOT NULL",
    )
    .bind(forge)
    .bind(repo)
    .bind(review)
    .bind(version)
    .execute(&mut *conn)
    .await?;
    Ok(dequeued.rows_affected() == 1)
}

/// Queues review `review` for the end of `session`'s running round, with `round` (JSON)
/// to start then. `false` when it was claimed before.
pub async fn queue(
    conn: &mut sqlx::AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    review: i64,
    session: &SessionId,
    round: &str,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO reviews (forge, repo, review_id, session_id, queued, claimed_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (forge, repo, review_id) DO NOTHING",
    )
    .bind(forge)
    .bind(repo)
    .bind(review)
    .bind(session)
    .bind(round)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Takes review `review` out of the queue, starting nothing.
pub async fn unqueue(
    conn: &mut sqlx::AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    review: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE reviews SET queued = NULL WHERE forge = $1 AND repo = $2 AND review_id = $3",
    )
    .bind(forge)
    .bind(repo)
    .bind(review)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The review that has waited longest for `session`'s round to end: its id and round.
pub async fn oldest_queued(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
) -> Result<Option<(i64, String)>> {
    Ok(sqlx::query_as(
        "SELECT review_id, queued FROM reviews WHERE session_id = $1 AND queued IS NOT NULL \
         ORDER BY claimed_at, review_id LIMIT 1",
    )
    .bind(session)
    .fetch_optional(&mut *conn)
    .await?)
}

/// One statement each, on the writer's connection, for a step that holds no transaction.
impl super::Db {
    /// [`claim`] review `review` for `session`.
    pub async fn claim_review(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        review: i64,
        session: &SessionId,
        version: Option<ContractVersion>,
    ) -> Result<bool> {
        let mut conn = self.writer.acquire().await?;
        claim(&mut conn, forge, repo, review, session, version).await
    }

    /// [`unqueue`] review `review`.
    pub async fn unqueue_review(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        review: i64,
    ) -> Result<()> {
        unqueue(&mut *self.writer.acquire().await?, forge, repo, review).await
    }

    /// [`oldest_queued`] for `session`, read on a pooled connection.
    pub async fn oldest_queued_review(&self, session: &SessionId) -> Result<Option<(i64, String)>> {
        oldest_queued(&mut *self.pool.acquire().await?, session).await
    }
}

/// An inline comment a round was asked to address.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize, serde::Deserialize)]
pub struct Owed {
    pub comment_id: CommentId,
    pub thread: Option<String>,
    pub path: String,
}

/// Records the inline comments the round for `version` is asked to address.
pub async fn owe_answers(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: ContractVersion,
    comments: &[Owed],
) -> Result<()> {
    for c in comments {
        sqlx::query(
            "INSERT INTO review_comments (session_id, version, comment_id, thread, path) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (session_id, version, comment_id) DO NOTHING",
        )
        .bind(session)
        .bind(version)
        .bind(c.comment_id)
        .bind(c.thread.as_deref())
        .bind(&c.path)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The inline comments the round for `version` has not answered yet, oldest first.
pub async fn unanswered(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<Vec<Owed>> {
    Ok(sqlx::query_as::<_, Owed>(
        "SELECT comment_id, thread, path FROM review_comments \
         WHERE session_id = $1 AND version = $2 AND answered_at IS NULL ORDER BY comment_id",
    )
    .bind(session)
    .bind(version)
    .fetch_all(&mut *conn)
    .await?)
}

/// Marks an inline comment answered (or given up on), so it is answered once.
pub async fn answered(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: ContractVersion,
    comment: CommentId,
) -> Result<()> {
    sqlx::query(
        "UPDATE review_comments SET answered_at = $4 \
         WHERE session_id = $1 AND version = $2 AND comment_id = $3",
    )
    .bind(session)
    .bind(version)
    .bind(comment)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
