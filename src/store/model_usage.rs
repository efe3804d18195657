//! Model usage as stored: one row per call, appended after the call returns; budgets and
//! the cost shown on sessions and runs are sums over these rows.

use anyhow::Result;

use super::{Db, now_ms};
use crate::ids::{RunId, SessionId};
use crate::llm::Usage;

#[derive(Debug, Clone)]
pub struct NewUsage<'a> {
    pub session: Option<&'a SessionId>,
    pub run: Option<&'a RunId>,
    pub role: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub usage: Usage,
    pub cost_microusd: i64,
}

/// Appends the call and adds it to its session's and run's running totals, together.
pub async fn record(db: &Db, call: &NewUsage<'_>) -> Result<()> {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut tx = db.writer.begin().await?;
    sqlx::query(
        "INSERT INTO model_usage (id, at, session_id, run_id, role, provider, model, \
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_microusd) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(now_ms())
    .bind(call.session.map(SessionId::as_str))
    .bind(call.run.map(RunId::as_str))
    .bind(call.role)
    .bind(call.provider)
    .bind(call.model)
    .bind(tokens(call.usage.input_tokens))
    .bind(tokens(call.usage.output_tokens))
    .bind(tokens(call.usage.cache_read_tokens))
    .bind(tokens(call.usage.cache_write_tokens))
    .bind(call.cost_microusd)
    .execute(&mut *tx)
    .await?;
    if let Some(session) = call.session {
        sqlx::query("UPDATE sessions SET cost_microusd = cost_microusd + $1 WHERE id = $2")
            .bind(call.cost_microusd)
            .bind(session.as_str())
            .execute(&mut *tx)
            .await?;
    }
    if let Some(run) = call.run {
        sqlx::query(
            "UPDATE runs SET input_tokens = input_tokens + $1, output_tokens = output_tokens + $2, \
             cost_microusd = cost_microusd + $3 WHERE id = $4",
        )
        .bind(tokens(
            call.usage.input_tokens + call.usage.cache_read_tokens + call.usage.cache_write_tokens,
        ))
        .bind(tokens(call.usage.output_tokens))
        .bind(call.cost_microusd)
        .bind(run.as_str())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// What a session or a run has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Spent {
    pub cost_microusd: i64,
    /// Every kind of token together.
    pub tokens: i64,
}

// PostgreSQL sums BIGINTs into NUMERIC, which the Any driver cannot read: hence the casts.
pub async fn spent_by_session(db: &Db, session: &SessionId) -> Result<Spent> {
    Ok(sqlx::query_as::<_, Spent>(
        "SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) AS cost_microusd, \
         CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) AS tokens \
         FROM model_usage WHERE session_id = $1",
    )
    .bind(session.as_str())
    .fetch_one(&db.pool)
    .await?)
}

pub async fn spent_by_run(db: &Db, run: &RunId) -> Result<Spent> {
    Ok(sqlx::query_as::<_, Spent>(
        "SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) AS cost_microusd, \
         CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) AS tokens \
         FROM model_usage WHERE run_id = $1",
    )
    .bind(run.as_str())
    .fetch_one(&db.pool)
    .await?)
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct UsageRow {
    pub id: String,
    pub at: i64,
    pub session_id: Option<String>,
    pub run_id: Option<String>,
    pub role: String,
    pub provider: String,
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_microusd: i64,
}

/// A session's calls, oldest first.
pub async fn list_by_session(db: &Db, session: &SessionId) -> Result<Vec<UsageRow>> {
    Ok(sqlx::query_as::<_, UsageRow>(
        "SELECT id, at, session_id, run_id, role, provider, model, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, cost_microusd FROM model_usage \
         WHERE session_id = $1 ORDER BY at, id",
    )
    .bind(session.as_str())
    .fetch_all(&db.pool)
    .await?)
}
