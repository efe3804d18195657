//! The append-only audit log: who decided and who did what. This module only inserts and
//! reads; nothing in planwright updates or deletes a row.

use anyhow::Result;
use sqlx::AnyConnection;

use super::now_ms;

#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// `github:<login>`, `gitlab:<username>`, or `planwright` for the bot's own steps.
    pub actor: &'a str,
    pub action: &'a str,
    pub session: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub detail: serde_json::Value,
}

/// Appends an entry; call it inside the transaction of the change it records.
pub async fn append(conn: &mut AnyConnection, entry: &Entry<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (id, at, actor, action, session_id, delivery_id, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(now_ms())
    .bind(entry.actor)
    .bind(entry.action)
    .bind(entry.session)
    .bind(entry.delivery)
    .bind(entry.detail.to_string())
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `delivery` already recorded `action`: a retried job's first attempt may have
/// committed before it failed.
pub async fn delivery_did(conn: &mut AnyConnection, delivery: &str, action: &str) -> Result<bool> {
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT 1 FROM audit_log WHERE delivery_id = $1 AND action = $2 LIMIT 1")
            .bind(delivery)
            .bind(action)
            .fetch_optional(conn)
            .await?;
    Ok(row.is_some())
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct AuditRow {
    pub id: String,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub session_id: Option<String>,
    pub delivery_id: Option<String>,
    pub detail: String,
}

/// Entries oldest first.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<AuditRow>> {
    Ok(sqlx::query_as::<_, AuditRow>(
        "SELECT id, at, actor, action, session_id, delivery_id, detail FROM audit_log \
         ORDER BY at, id",
    )
    .fetch_all(conn)
    .await?)
}

/// One session's entries, oldest first.
pub async fn for_session(
    conn: &mut AnyConnection,
    session: &crate::ids::SessionId,
) -> Result<Vec<AuditRow>> {
    Ok(sqlx::query_as::<_, AuditRow>(
        "SELECT id, at, actor, action, session_id, delivery_id, detail FROM audit_log \
         WHERE session_id = $1 ORDER BY at, id",
    )
    .bind(session.as_str())
    .fetch_all(conn)
    .await?)
}

impl super::Db {
    /// [`delivery_did`], read on a pooled connection.
    pub async fn delivery_did(&self, delivery: &str, action: &str) -> Result<bool> {
        delivery_did(&mut *self.pool.acquire().await?, delivery, action).await
    }
}
