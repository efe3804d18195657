//! Planner sessions as stored: one row per issue's way from label to pull request.

use anyhow::Result;

use super::Db;

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct SessionRow {
    pub id: String,
    pub forge: String,
    pub repo: String,
    pub issue_number: i64,
    pub state: String,
    pub active: i64,
    pub triggered_by: String,
    pub failure: Option<String>,
    pub cost_microusd: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The newest sessions first.
pub async fn list(db: &Db, limit: i64) -> Result<Vec<SessionRow>> {
    Ok(sqlx::query_as::<_, SessionRow>(
        "SELECT id, forge, repo, issue_number, state, active, triggered_by, failure, \
         cost_microusd, created_at, updated_at FROM sessions \
         ORDER BY created_at DESC, id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(&db.pool)
    .await?)
}
