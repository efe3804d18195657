//! An evaluation's finished runs in the database: one row per (evaluation, task, arm,
//! repeat), written once the run is graded. What is there is never run again.

use serde::{Deserialize, Serialize};

use super::grade::{Grade, Graded};
use crate::store::{Db, now_ms};

/// What planwright itself said of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Verification passed and the reviewer accepted: a ready pull request.
    Ready,
    /// Anything less: a draft, or no result at all.
    Draft,
    /// No verdict of planwright's to compare: the monolithic arm, or a run that stopped.
    None,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Draft => "draft",
            Verdict::None => "none",
        }
    }
}

/// The tokens and cost of one role's model calls in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RoleUsage {
    pub role: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_microusd: i64,
}

/// One graded run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub task: String,
    pub arm: String,
    pub repeat: u32,
    pub graded: Graded,
    pub verdict: Verdict,
    /// Why planwright's run did not pass, in its words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default)]
    pub usage: Vec<RoleUsage>,
    /// The run and its grading, from checkout to grade.
    pub wall_ms: u64,
    /// The part of it the flow itself took (what `solve` takes on the task).
    #[serde(default)]
    pub solve_ms: u64,
}

impl RunRecord {
    pub fn cost_microusd(&self) -> i64 {
        self.usage.iter().map(|u| u.cost_microusd).sum()
    }
}

/// Keeps a graded run; a second record of the same run leaves the first.
pub async fn insert(db: &Db, evaluation: &str, record: &RunRecord) -> anyhow::Result<()> {
    let grade = match record.graded.grade {
        Grade::Resolved => "resolved",
        Grade::Unresolved => "unresolved",
        Grade::NoVerdict => "no_verdict",
    };
    sqlx::query(
        "INSERT INTO eval_results (evaluation, task, arm, repeat_no, at, grade, cost_microusd, record) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (evaluation, task, arm, repeat_no) DO NOTHING",
    )
    .bind(evaluation)
    .bind(&record.task)
    .bind(&record.arm)
    .bind(i64::from(record.repeat))
    .bind(now_ms())
    .bind(grade)
    .bind(record.cost_microusd())
    .bind(serde_json::to_string(record)?)
    .execute(&db.writer)
    .await?;
    Ok(())
}

/// Every graded run of `evaluation`, in the order they finished.
pub async fn list(db: &Db, evaluation: &str) -> anyhow::Result<Vec<RunRecord>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT record FROM eval_results WHERE evaluation = $1 ORDER BY at, task, arm, repeat_no",
    )
    .bind(evaluation)
    .fetch_all(&db.pool)
    .await?;
    rows.into_iter()
        .map(|(text,)| Ok(serde_json::from_str(&text)?))
        .collect()
}

/// What one run's own database says each role used.
pub async fn usage_by_role(db: &Db) -> anyhow::Result<Vec<RoleUsage>> {
    // SUM is NUMERIC on PostgreSQL, which the Any driver cannot read: cast it back.
    Ok(sqlx::query_as(
        "SELECT role, \
         CAST(SUM(input_tokens) AS BIGINT) AS input_tokens, \
         CAST(SUM(output_tokens) AS BIGINT) AS output_tokens, \
         CAST(SUM(cache_read_tokens) AS BIGINT) AS cache_read_tokens, \
         CAST(SUM(cache_write_tokens) AS BIGINT) AS cache_write_tokens, \
         CAST(SUM(cost_microusd) AS BIGINT) AS cost_microusd \
         FROM model_usage GROUP BY role ORDER BY role",
    )
    .fetch_all(&db.pool)
    .await?)
}
