//! Executor runs as stored: one row per attempt at carrying out a contract version, with
//! its workspace while it may still be published and what verification and the reviewer
//! found. A run left `running` by a process that died is abandoned by the next attempt.

use std::fmt;
use std::str::FromStr;

use anyhow::Result;
use sqlx::AnyConnection;

use super::{Db, now_ms};
use crate::contract::ContractVersion;
use crate::ids::{RunId, SessionId, stored_as_text};

/// Where an attempt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    Running,
    /// Verified and accepted, waiting to be published.
    Verified,
    Published,
    Failed,
    /// Left running by a process that stopped; it does not count as an attempt.
    Abandoned,
}

impl RunState {
    pub const ALL: [RunState; 5] = [
        RunState::Running,
        RunState::Verified,
        RunState::Published,
        RunState::Failed,
        RunState::Abandoned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Verified => "verified",
            RunState::Published => "published",
            RunState::Failed => "failed",
            RunState::Abandoned => "abandoned",
        }
    }

    /// A finished run has its `finished_at`; a verified one still waits to be published.
    pub fn is_finished(self) -> bool {
        match self {
            RunState::Running | RunState::Verified => false,
            RunState::Published | RunState::Failed | RunState::Abandoned => true,
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a run state")]
pub struct UnknownRunState(String);

impl FromStr for RunState {
    type Err = UnknownRunState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownRunState(s.to_owned()))
    }
}

stored_as_text!(RunState);

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub id: RunId,
    pub session_id: SessionId,
    pub contract_version: ContractVersion,
    pub attempt: i64,
    pub executor: String,
    pub state: RunState,
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
    /// `reference@digest` of the image the run used, or `host`; `None` for runs from
    /// before it was recorded.
    pub environment: Option<String>,
    /// 1 once `/retry` granted fresh attempts: it no longer counts against the limit.
    pub retired: i64,
    /// The executor model the attempt ran on (`provider:model`); `None` for the command
    /// executor and for runs from before it was recorded.
    pub model: Option<String>,
    /// The rung of the executor ladder it ran on (0: the first).
    pub rung: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

const COLUMNS: &str = "id, session_id, contract_version, attempt, executor, state, branch, \
    head_sha, input_tokens, output_tokens, cost_microusd, report, workspace, outcome, \
    environment, retired, model, rung, started_at, finished_at";

pub struct NewRun<'a> {
    pub id: &'a RunId,
    pub session: &'a SessionId,
    pub version: ContractVersion,
    pub attempt: i64,
    pub executor: &'a str,
    pub branch: &'a str,
    pub workspace: &'a str,
    /// `reference@digest` of the run's image, or `host`.
    pub environment: &'a str,
    /// The executor model the attempt runs on, when it names one.
    pub model: Option<&'a str>,
    /// The rung of the executor ladder it runs on (0: the first).
    pub rung: i64,
}

pub async fn insert(conn: &mut AnyConnection, new: &NewRun<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO runs (id, session_id, contract_version, attempt, executor, state, \
         branch, workspace, environment, model, rung, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(new.id)
    .bind(new.session)
    .bind(new.version)
    .bind(new.attempt)
    .bind(new.executor)
    .bind(RunState::Running)
    .bind(new.branch)
    .bind(new.workspace)
    .bind(new.environment)
    .bind(new.model)
    .bind(new.rung)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}

/// The run `id`, if there is one.
pub async fn get(conn: &mut AnyConnection, id: &RunId) -> Result<Option<RunRow>> {
    let sql = format!("SELECT {COLUMNS} FROM runs WHERE id = $1");
    Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(conn)
        .await?)
}

/// Every run of a session, by contract version then attempt.
pub async fn for_session(conn: &mut AnyConnection, session: &SessionId) -> Result<Vec<RunRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM runs WHERE session_id = $1 \
         ORDER BY contract_version, attempt, started_at"
    );
    Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .fetch_all(conn)
        .await?)
}

/// The runs of one contract version, oldest first.
pub async fn for_version(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<Vec<RunRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM runs WHERE session_id = $1 AND contract_version = $2 \
         ORDER BY attempt, started_at"
    );
    Ok(sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .bind(version)
        .fetch_all(conn)
        .await?)
}

/// Records what the attempt came to; `finished_at` stays unset while the run is not
/// finished (a verified one still waits to be published).
pub async fn update(
    conn: &mut AnyConnection,
    run: &RunId,
    state: RunState,
    report: Option<&str>,
    outcome: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE runs SET state = $1, report = COALESCE($2, report), \
         outcome = COALESCE($3, outcome), finished_at = $4 WHERE id = $5",
    )
    .bind(state)
    .bind(report)
    .bind(outcome)
    .bind(state.is_finished().then(now_ms))
    .bind(run)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_head(conn: &mut AnyConnection, run: &RunId, head: &str) -> Result<()> {
    sqlx::query("UPDATE runs SET head_sha = $1 WHERE id = $2")
        .bind(head)
        .bind(run)
        .execute(conn)
        .await?;
    Ok(())
}

/// Marks the session's runs a dead process left `running` as abandoned; returns how many.
pub async fn abandon_running(conn: &mut AnyConnection, session: &SessionId) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE runs SET state = $1, finished_at = $2 WHERE session_id = $3 AND state = $4",
    )
    .bind(RunState::Abandoned)
    .bind(now_ms())
    .bind(session)
    .bind(RunState::Running)
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
    .bind(session)
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(b,)| b))
}

/// `/retry`: the version's runs so far stop counting against its attempts.
pub async fn retire(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<()> {
    sqlx::query("UPDATE runs SET retired = 1 WHERE session_id = $1 AND contract_version = $2")
        .bind(session)
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
        "SELECT head_sha FROM runs WHERE session_id = $1 AND state = $2 \
         AND head_sha IS NOT NULL ORDER BY started_at DESC LIMIT 1",
    )
    .bind(session)
    .bind(RunState::Published)
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(h,)| h))
}

/// The commit planwright last pushed to the session's branch, of any run and contract
/// version: a published result, or unfinished work kept there as a draft. A later result
/// goes on top of it, so its push moves the branch forward.
pub async fn branch_head(conn: &mut AnyConnection, session: &SessionId) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> = sqlx::query_as(
        "SELECT head_sha FROM runs WHERE session_id = $1 AND head_sha IS NOT NULL \
         ORDER BY started_at DESC LIMIT 1",
    )
    .bind(session)
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|(h,)| h))
}

/// How many runs there are of each executor and state, for `/metrics`.
pub async fn counts(db: &Db) -> Result<Vec<(String, String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT executor, state, COUNT(*) FROM runs GROUP BY executor, state \
         ORDER BY executor, state",
    )
    .fetch_all(&db.pool)
    .await?)
}
