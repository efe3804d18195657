//! Executor runs as stored: one row per attempt at carrying out a contract version, with
//! its workspace while it may still be published and what verification and the reviewer
//! found. A run left `running` by a process that died is abandoned by the next attempt.

use anyhow::Result;
use sqlx::AnyConnection;

use super::now_ms;
use crate::ids::{RunId, SessionId};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub id: String,
    pub session_id: String,
    pub contract_version: i64,
    pub attempt: i64,
    pub executor: String,
    /// `running`, `verified` (waiting to be published), `published`, `failed` or
    /// `abandoned`.
    pub state: String,
    pub branch: Option<String>,
    pub head_sha: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_microusd: i64,
    /// The executor's own account (a claim, kept for the operator).
    pub report: Option<String>,
    pub workspace: Option<String>,
    /// Verification and review as JSON, once the run got that far.
    pub outcome: Option<String>,
    /// 1 once `/retry` granted fresh attempts: it no longer counts against the limit.
    pub retired: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

impl RunRow {
    pub fn run_id(&self) -> RunId {
        RunId(self.id.clone())
    }
}

const COLUMNS: &str = "id, session_id, contract_version, attempt, executor, state, branch, \
    head_sha, input_tokens, output_tokens, cost_microusd, report, workspace, outcome, \
    retired, started_at, finished_at";

pub struct NewRun<'a> {
    pub id: &'a RunId,
    pub session: &'a SessionId,
    pub version: i64,
    pub attempt: i64,
    pub executor: &'a str,
    pub branch: &'a str,
    pub workspace: &'a str,
}

pub async fn insert(conn: &mut AnyConnection, new: &NewRun<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO runs (id, session_id, contract_version, attempt, executor, state, \
         branch, workspace, started_at) VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8)",
    )
    .bind(new.id.as_str())
    .bind(new.session.as_str())
    .bind(new.version)
    .bind(new.attempt)
    .bind(new.executor)
    .bind(new.branch)
    .bind(new.workspace)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}

/// The runs of one contract version, oldest first.
pub async fn for_version(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: i64,
) -> Result<Vec<RunRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM runs WHERE session_id = $1 AND contract_version = $2 \
         ORDER BY attempt, started_at"
    );
    Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(sql))
        .bind(session.as_str())
        .bind(version)
        .fetch_all(conn)
        .await?)
}

/// Records what the attempt came to. `finished` leaves `finished_at` unset for a run that
/// still waits to be published.
pub async fn update(
    conn: &mut AnyConnection,
    run: &RunId,
    state: &str,
    report: Option<&str>,
    outcome: Option<&str>,
    finished: bool,
) -> Result<()> {
    sqlx::query(
        "UPDATE runs SET state = $1, report = COALESCE($2, report), \
         outcome = COALESCE($3, outcome), finished_at = $4 WHERE id = $5",
    )
    .bind(state)
    .bind(report)
    .bind(outcome)
    .bind(finished.then(now_ms))
    .bind(run.as_str())
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_head(conn: &mut AnyConnection, run: &RunId, head: &str) -> Result<()> {
    sqlx::query("UPDATE runs SET head_sha = $1 WHERE id = $2")
        .bind(head)
        .bind(run.as_str())
        .execute(conn)
        .await?;
    Ok(())
}

/// Marks the session's runs a dead process left `running` as abandoned; returns how many.
pub async fn abandon_running(conn: &mut AnyConnection, session: &SessionId) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE runs SET state = 'abandoned', finished_at = $1 \
         WHERE session_id = $2 AND state = 'running'",
    )
    .bind(now_ms())
    .bind(session.as_str())
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The branch the session's first run was given: every later run, of any contract
/// version, works on the same branch and so the same pull request.
pub async fn branch_of_session(
    conn: &mut AnyConnection,
    session: &SessionId,
) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> = sqlx::query_as(
        "SELECT branch FROM runs WHERE session_id = $1 AND branch IS NOT NULL \
         ORDER BY started_at LIMIT 1",
    )
    .bind(session.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(b,)| b))
}

/// `/retry`: the version's runs so far stop counting against its attempts.
pub async fn retire(conn: &mut AnyConnection, session: &SessionId, version: i64) -> Result<()> {
    sqlx::query("UPDATE runs SET retired = 1 WHERE session_id = $1 AND contract_version = $2")
        .bind(session.as_str())
        .bind(version)
        .execute(conn)
        .await?;
    Ok(())
}

/// The commit the session last pushed, of any contract version: a later round starts
/// from it, so its push fast-forwards the pull request's branch.
pub async fn published_head(
    conn: &mut AnyConnection,
    session: &SessionId,
) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> = sqlx::query_as(
        "SELECT head_sha FROM runs WHERE session_id = $1 AND state = 'published' \
         AND head_sha IS NOT NULL ORDER BY started_at DESC LIMIT 1",
    )
    .bind(session.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(h,)| h))
}
