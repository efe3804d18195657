//! Model usage as stored: one row per call, appended after the call returns; budgets and
//! the cost shown on sessions and runs are sums over these rows. Before a call is sent,
//! its worst case is held against its budgets (`hold`), and the hold goes when its usage
//! is recorded (`record_held`) or the call fails or is given up (`release`); one left
//! by a process that died stops counting after `STALE_HOLD`.

use anyhow::Result;

use super::{Db, now_ms};
use crate::contract::ContractVersion;
use crate::ids::{RunId, SessionId};
use crate::llm::Usage;

/// Woken whenever this process releases a hold, for calls waiting on a full budget.
pub(crate) static RELEASED: tokio::sync::Notify = tokio::sync::Notify::const_new();

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
    record_held(db, call, None).await
}

/// `record`, and the call's hold released in the same transaction, so the budget never
/// sees the call twice or not at all.
pub async fn record_held(db: &Db, call: &NewUsage<'_>, hold: Option<&HoldId>) -> Result<()> {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut tx = db.writer.begin().await?;
    if let Some(hold) = hold {
        sqlx::query("DELETE FROM model_holds WHERE id = $1")
            .bind(&hold.0)
            .execute(&mut *tx)
            .await?;
    }
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
            .bind(session)
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
        .bind(run)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    if hold.is_some() {
        RELEASED.notify_waiters();
    }
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
const SPENT_BY_SESSION: &str = "SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) AS cost_microusd, \
     CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) AS tokens \
     FROM model_usage WHERE session_id = $1";
const SPENT_BY_RUN: &str = "SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) AS cost_microusd, \
     CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) AS tokens \
     FROM model_usage WHERE run_id = $1";
const COMMITTED_BY_SESSION: &str = "SELECT \
     (SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) FROM model_usage WHERE session_id = $1), \
     (SELECT CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) FROM model_usage WHERE session_id = $1), \
     (SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) FROM model_holds WHERE session_id = $1 AND at >= $2), \
     (SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM model_holds WHERE session_id = $1 AND at >= $2)";
const COMMITTED_BY_RUN: &str = "SELECT \
     (SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) FROM model_usage WHERE run_id = $1), \
     (SELECT CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) FROM model_usage WHERE run_id = $1), \
     (SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) FROM model_holds WHERE run_id = $1 AND at >= $2), \
     (SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM model_holds WHERE run_id = $1 AND at >= $2)";

pub async fn spent_by_session(db: &Db, session: &SessionId) -> Result<Spent> {
    Ok(sqlx::query_as::<_, Spent>(SPENT_BY_SESSION)
        .bind(session)
        .fetch_one(&db.pool)
        .await?)
}

pub async fn spent_by_run(db: &Db, run: &RunId) -> Result<Spent> {
    Ok(sqlx::query_as::<_, Spent>(SPENT_BY_RUN)
        .bind(run)
        .fetch_one(&db.pool)
        .await?)
}

/// What `scope` has spent plus what live calls hold against it, read outside any hold:
/// what a new call could use at most, give or take calls starting meanwhile.
pub async fn committed(db: &Db, scope: Scope<'_>) -> Result<Spent> {
    let stale_before = now_ms().saturating_sub(STALE_HOLD.as_millis() as i64);
    let (sql, id) = match scope {
        Scope::Session(id) => (COMMITTED_BY_SESSION, id.as_str()),
        Scope::Run(id) => (COMMITTED_BY_RUN, id.as_str()),
    };
    let (spent_cost, spent_tokens, held_cost, held_tokens): (i64, i64, i64, i64) =
        sqlx::query_as(sql)
            .bind(id)
            .bind(stale_before)
            .fetch_one(&db.pool)
            .await?;
    Ok(Spent {
        cost_microusd: spent_cost.saturating_add(held_cost),
        tokens: spent_tokens.saturating_add(held_tokens),
    })
}

/// A budget a hold is checked against.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    Session(&'a SessionId),
    Run(&'a RunId),
}

impl Scope<'_> {
    fn key(&self) -> String {
        match self {
            Scope::Session(id) => format!("session:{}", id.as_str()),
            Scope::Run(id) => format!("run:{}", id.as_str()),
        }
    }
}

impl std::fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Session(id) => write!(f, "session {id}"),
            Scope::Run(id) => write!(f, "run {id}"),
        }
    }
}

/// A held worst case, until it is recorded or released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldId(String);

/// What `hold` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Held(HoldId),
    /// Budget `scope` (an index into the limits) is spent: what was spent, holds aside.
    Spent(usize, Spent),
    /// Budget `scope` is not spent, but with calls in flight it is fully held.
    Busy(usize, Spent),
}

/// How old a hold may get before it is taken for one left by a process that died. A
/// streamed answer has no whole-call limit, only an idle one, so this is well past the
/// longest answer a model gives (128,000 output tokens at a slow 50 a second is 43
/// minutes); a live call older than this only loses its hold, it is still recorded.
pub const STALE_HOLD: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// Holds `worst` against each of `limits` if every one has room: what is spent plus what
/// other calls hold is under the limit. The check and the hold are one transaction that
/// first writes each budget's lock row, so concurrent holds, from any process, see each
/// other. The call may then end at most its own worst case past a limit.
pub async fn hold(
    db: &Db,
    session: Option<&SessionId>,
    run: Option<&RunId>,
    limits: &[(Scope<'_>, Budget)],
    worst: Spent,
) -> Result<Held> {
    let mut order: Vec<usize> = (0..limits.len()).collect();
    // One order for everyone, so two holds on the same pair of budgets cannot deadlock.
    order.sort_by_key(|&i| limits[i].0.key());
    // Holds no live call can still own are not counted, so a crash never leaves a
    // budget held for good; they are cleared on their own, outside the hold, so the
    // sweep takes no lock a hold could wait on.
    let stale_before = now_ms().saturating_sub(STALE_HOLD.as_millis() as i64);
    sqlx::query("DELETE FROM model_holds WHERE at < $1")
        .bind(stale_before)
        .execute(&db.writer)
        .await?;
    let mut tx = db.writer.begin().await?;
    for i in order {
        let (scope, budget) = &limits[i];
        let key = scope.key();
        sqlx::query(
            "INSERT INTO model_budget_locks (scope, holds) VALUES ($1, 0) ON CONFLICT (scope) DO NOTHING",
        )
        .bind(&key)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE model_budget_locks SET holds = holds + 1 WHERE scope = $1")
            .bind(&key)
            .execute(&mut *tx)
            .await?;
        // Static text per scope: the SQL never takes part of an id. One statement, so
        // one snapshot: a call recorded meanwhile is seen as spent or as held, never as
        // neither (PostgreSQL gives each statement its own snapshot).
        let (sql, id) = match scope {
            Scope::Session(id) => (COMMITTED_BY_SESSION, id.as_str()),
            Scope::Run(id) => (COMMITTED_BY_RUN, id.as_str()),
        };
        let (spent_cost, spent_tokens, held_cost, held_tokens): (i64, i64, i64, i64) =
            sqlx::query_as(sql)
                .bind(id)
                .bind(stale_before)
                .fetch_one(&mut *tx)
                .await?;
        let spent = Spent {
            cost_microusd: spent_cost,
            tokens: spent_tokens,
        };
        if budget.check(&spent).is_some() {
            tx.rollback().await?;
            return Ok(Held::Spent(i, spent));
        }
        let committed = Spent {
            cost_microusd: spent_cost.saturating_add(held_cost),
            tokens: spent_tokens.saturating_add(held_tokens),
        };
        if budget.check(&committed).is_some() {
            tx.rollback().await?;
            return Ok(Held::Busy(i, spent));
        }
    }
    let id = HoldId(uuid::Uuid::now_v7().to_string());
    sqlx::query(
        "INSERT INTO model_holds (id, at, session_id, run_id, cost_microusd, tokens) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&id.0)
    .bind(now_ms())
    .bind(session.map(SessionId::as_str))
    .bind(run.map(RunId::as_str))
    .bind(worst.cost_microusd)
    .bind(worst.tokens)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Held::Held(id))
}

/// Ends a hold whose call cost nothing on record (it failed before any usage).
pub async fn release(db: &Db, hold: &HoldId) -> Result<()> {
    sqlx::query("DELETE FROM model_holds WHERE id = $1")
        .bind(&hold.0)
        .execute(&db.writer)
        .await?;
    RELEASED.notify_waiters();
    Ok(())
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

/// One call's cost with the contract version it belongs to: a run's calls (and the
/// reviewer's) to the version being carried out, planning's to the version it led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundCost {
    /// `None` for planning that has not led to a contract yet.
    pub version: Option<ContractVersion>,
    /// Planning (planner and scouts) rather than carrying out and reviewing.
    pub planning: bool,
    pub cost_microusd: i64,
}

/// A call's role, its run's version, the versions stored before and after it, its cost.
type CallRound = (
    String,
    Option<ContractVersion>,
    Option<ContractVersion>,
    Option<ContractVersion>,
    i64,
);

/// A session's calls by the round they belong to.
pub async fn cost_by_round(db: &Db, session: &SessionId) -> Result<Vec<RoundCost>> {
    let rows: Vec<CallRound> = sqlx::query_as(
        "SELECT u.role, \
         (SELECT r.contract_version FROM runs r WHERE r.id = u.run_id), \
         (SELECT MAX(c.version) FROM contracts c WHERE c.session_id = u.session_id \
          AND c.created_at <= u.at), \
         (SELECT MIN(c.version) FROM contracts c WHERE c.session_id = u.session_id \
          AND c.created_at >= u.at), \
         u.cost_microusd FROM model_usage u WHERE u.session_id = $1 ORDER BY u.at, u.id",
    )
    .bind(session)
    .fetch_all(&db.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(role, run, before, after, cost_microusd)| {
            let planning = run.is_none() && role != "reviewer";
            let version = match (run, planning) {
                (Some(v), _) => Some(v),
                (None, true) => after,
                (None, false) => before,
            };
            RoundCost {
                version,
                planning,
                cost_microusd,
            }
        })
        .collect())
}

/// A session's calls, oldest first.
pub async fn list_by_session(db: &Db, session: &SessionId) -> Result<Vec<UsageRow>> {
    Ok(sqlx::query_as::<_, UsageRow>(
        "SELECT id, at, session_id, run_id, role, provider, model, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, cost_microusd FROM model_usage \
         WHERE session_id = $1 ORDER BY at, id",
    )
    .bind(session)
    .fetch_all(&db.pool)
    .await?)
}

/// Model usage summed per role, provider and model.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Totals {
    pub role: String,
    pub provider: String,
    pub model: String,
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    pub cost_microusd: i64,
}

/// Every call's usage summed per role, provider and model, for `/metrics`.
pub async fn totals(db: &Db) -> Result<Vec<Totals>> {
    // SUM is NUMERIC on PostgreSQL, which the Any driver cannot read: cast it back.
    Ok(sqlx::query_as(
        "SELECT role, provider, model, \
         CAST(SUM(input_tokens) AS BIGINT) AS input, \
         CAST(SUM(output_tokens) AS BIGINT) AS output, \
         CAST(SUM(cache_read_tokens) AS BIGINT) AS cache_read, \
         CAST(SUM(cache_write_tokens) AS BIGINT) AS cache_write, \
         CAST(SUM(cost_microusd) AS BIGINT) AS cost_microusd \
         FROM model_usage GROUP BY role, provider, model ORDER BY role, provider, model",
    )
    .fetch_all(&db.pool)
    .await?)
}
/// Limits on what a session or a run may use; `None` is no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    pub max_microusd: Option<i64>,
    pub max_tokens: Option<u64>,
}

impl Budget {
    pub fn usd(usd: f64) -> Self {
        Self {
            max_microusd: Some((usd * 1_000_000.0).round() as i64),
            max_tokens: None,
        }
    }

    pub fn tokens(tokens: u64) -> Self {
        Self {
            max_microusd: None,
            max_tokens: Some(tokens),
        }
    }

    /// The refusal, if `spent` has reached either limit: what was spent and the limit.
    pub fn check(&self, spent: &Spent) -> Option<(String, String)> {
        if let Some(limit) = self.max_microusd
            && spent.cost_microusd >= limit
        {
            return Some((usd(spent.cost_microusd), usd(limit)));
        }
        if let Some(limit) = self.max_tokens
            && spent.tokens >= limit as i64
        {
            return Some((
                format!("{} tokens", spent.tokens),
                format!("{limit} tokens"),
            ));
        }
        None
    }
}

/// Micro-USD as the dollars a person reads.
/// What the models cost for a repository's sessions, call by call: (when, microdollars).
pub async fn spent_on_repository(
    db: &Db,
    forge: crate::event::ForgeKind,
    repo: &crate::ids::RepoName,
) -> Result<Vec<(i64, i64)>> {
    Ok(sqlx::query_as::<_, (i64, i64)>(
        "SELECT u.at, u.cost_microusd FROM model_usage u JOIN sessions s ON s.id = u.session_id \
         WHERE s.forge = $1 AND s.repo = $2 ORDER BY u.at",
    )
    .bind(forge)
    .bind(repo)
    .fetch_all(&db.pool)
    .await?)
}

pub fn usd(microusd: i64) -> String {
    format!("${:.4}", microusd as f64 / 1_000_000.0)
}
