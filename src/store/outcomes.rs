//! Attempt outcomes as stored: one row per attempt that ended, verified or not, with why
//! not, the reviewer's verdict and what each role spent on it. Routing learns from them
//! and a repository's page and `/metrics` show them. Every read is scoped to one
//! repository: one repository's record never speaks for another's.

use std::collections::BTreeMap;

use anyhow::Result;

use super::model_usage::Spent;
use super::{Db, now_ms};
use crate::contract::{ContractVersion, Risk};
use crate::event::ForgeKind;
use crate::ids::{RepoName, RunId, SessionId};

/// Where an outcome comes from: a maintainer's session, or an evaluation's task set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeSource {
    Run,
    Eval,
}

impl OutcomeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeSource::Run => "run",
            OutcomeSource::Eval => "eval",
        }
    }
}

/// What the reviewer said of the attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewerVerdict {
    Accepted,
    Rejected,
    /// The attempt ended before a review.
    None,
}

impl ReviewerVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewerVerdict::Accepted => "accepted",
            ReviewerVerdict::Rejected => "rejected",
            ReviewerVerdict::None => "none",
        }
    }
}

/// What each role spent on one attempt. Planning (planner and scouts) is counted with
/// the first attempt of the contract version it led to, so summing rows counts it once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleSpend {
    pub planner: Spent,
    pub scout: Spent,
    pub executor: Spent,
    pub reviewer: Spent,
}

/// One attempt's outcome, as [`Db::record_outcome`] writes it.
#[derive(Debug, Clone)]
pub struct NewOutcome<'a> {
    pub run: &'a RunId,
    pub forge: ForgeKind,
    pub repo: &'a RepoName,
    /// `None` for an evaluation's attempt made outside any session.
    pub session: Option<&'a SessionId>,
    pub version: Option<ContractVersion>,
    pub risk: Risk,
    pub executor: &'a str,
    pub model: Option<&'a str>,
    pub rung: i64,
    /// Verification passed and the reviewer accepted.
    pub verified: bool,
    /// The attempt came to a judgement of the model's work; `false` when it was
    /// cancelled or the infrastructure failed it, which says nothing of the model.
    pub judged: bool,
    /// Why it was not verified, in a few words.
    pub why_not: Option<&'a str>,
    pub verdict: ReviewerVerdict,
    pub attempt: i64,
    pub spend: RoleSpend,
    pub wall_ms: i64,
    pub files_changed: Option<i64>,
    pub source: OutcomeSource,
}

/// An outcome's `why_not` is cut to this many characters: a few words, not a report.
pub const WHY_NOT_MAX: usize = 200;

impl Db {
    /// Writes the attempt's outcome; the same run written again (its record completed
    /// after it ended, as when its unfinished work is kept) replaces the row, so an
    /// attempt is one row whatever path it ended by.
    pub async fn record_outcome(&self, new: &NewOutcome<'_>) -> Result<()> {
        let why_not = new
            .why_not
            .map(|w| w.chars().take(WHY_NOT_MAX).collect::<String>());
        let s = &new.spend;
        sqlx::query(
            "INSERT INTO attempt_outcomes (run_id, forge, repo, session_id, contract_version, \
             risk, executor, model, rung, verified, judged, why_not, verdict, attempt, \
             planner_tokens, planner_microusd, scout_tokens, scout_microusd, \
             executor_tokens, executor_microusd, reviewer_tokens, reviewer_microusd, \
             wall_ms, files_changed, source, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $17, $18, $19, $20, $21, $22, $23, $24, $25, $26) \
             ON CONFLICT (run_id) DO UPDATE SET verified = excluded.verified, \
             judged = excluded.judged, why_not = excluded.why_not, verdict = excluded.verdict, \
             planner_tokens = excluded.planner_tokens, \
             planner_microusd = excluded.planner_microusd, \
             scout_tokens = excluded.scout_tokens, scout_microusd = excluded.scout_microusd, \
             executor_tokens = excluded.executor_tokens, \
             executor_microusd = excluded.executor_microusd, \
             reviewer_tokens = excluded.reviewer_tokens, \
             reviewer_microusd = excluded.reviewer_microusd, wall_ms = excluded.wall_ms, \
             files_changed = COALESCE(excluded.files_changed, attempt_outcomes.files_changed)",
        )
        .bind(new.run)
        .bind(new.forge)
        .bind(new.repo)
        .bind(new.session.map(SessionId::as_str))
        .bind(new.version)
        .bind(new.risk.as_str())
        .bind(new.executor)
        .bind(new.model)
        .bind(new.rung)
        .bind(i64::from(new.verified))
        .bind(i64::from(new.judged))
        .bind(why_not)
        .bind(new.verdict.as_str())
        .bind(new.attempt)
        .bind(s.planner.tokens)
        .bind(s.planner.cost_microusd)
        .bind(s.scout.tokens)
        .bind(s.scout.cost_microusd)
        .bind(s.executor.tokens)
        .bind(s.executor.cost_microusd)
        .bind(s.reviewer.tokens)
        .bind(s.reviewer.cost_microusd)
        .bind(new.wall_ms)
        .bind(new.files_changed)
        .bind(new.source.as_str())
        .bind(now_ms())
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// What each role spent on the attempt `run` of `session`'s contract `version`,
    /// which started at `started_at` (ms) and ended at `ended_at`: the executor's calls
    /// are the run's own, the reviewer's those of the session in that time, and planning
    /// the calls that led to the version, counted only when no other attempt of the
    /// version has an outcome yet.
    pub async fn attempt_spend(
        &self,
        session: &SessionId,
        version: ContractVersion,
        run: &RunId,
        started_at: i64,
        ended_at: i64,
    ) -> Result<RoleSpend> {
        let executor = sqlx::query_as::<_, Spent>(sqlx::AssertSqlSafe(format!(
            "{SPENT} WHERE run_id = $1 AND role = 'executor'"
        )))
        .bind(run)
        .fetch_one(&self.pool)
        .await?;
        let reviewer = sqlx::query_as::<_, Spent>(sqlx::AssertSqlSafe(format!(
            "{SPENT} WHERE session_id = $1 AND run_id IS NULL AND role = 'reviewer' \
             AND at >= $2 AND at <= $3"
        )))
        .bind(session)
        .bind(started_at)
        .bind(ended_at)
        .fetch_one(&self.pool)
        .await?;
        let (others,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM attempt_outcomes WHERE session_id = $1 \
             AND contract_version = $2 AND run_id <> $3",
        )
        .bind(session)
        .bind(version)
        .bind(run)
        .fetch_one(&self.pool)
        .await?;
        let mut spend = RoleSpend {
            executor,
            reviewer,
            ..RoleSpend::default()
        };
        if others > 0 {
            return Ok(spend);
        }
        for role in ["planner", "scout"] {
            let planning = sqlx::query_as::<_, Spent>(sqlx::AssertSqlSafe(format!(
                "{SPENT} WHERE session_id = $1 AND run_id IS NULL AND role = $2 \
                 AND at <= (SELECT created_at FROM contracts WHERE session_id = $1 \
                 AND version = $3) \
                 AND at > COALESCE((SELECT MAX(created_at) FROM contracts \
                 WHERE session_id = $1 AND version < $3), -1)"
            )))
            .bind(session)
            .bind(role)
            .bind(version)
            .fetch_one(&self.pool)
            .await?;
            match role {
                "planner" => spend.planner = planning,
                _ => spend.scout = planning,
            }
        }
        Ok(spend)
    }

    /// The record of one repository's attempts from its sessions, per risk, executor and
    /// model; only `risk` when one is given. Evaluations' attempts are left out: a task
    /// set is not the repository's own issues.
    pub async fn outcome_stats(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        risk: Option<Risk>,
    ) -> Result<Vec<OutcomeStats>> {
        let rows: Vec<StatsRow> = sqlx::query_as(
            "SELECT risk, executor, model, judged, verified, \
             executor_microusd + reviewer_microusd FROM attempt_outcomes \
             WHERE forge = $1 AND repo = $2 AND source = 'run' \
             AND ($3 IS NULL OR risk = $3) ORDER BY created_at",
        )
        .bind(forge)
        .bind(repo)
        .bind(risk.map(Risk::as_str))
        .fetch_all(&self.pool)
        .await?;
        Ok(OutcomeStats::gather(rows))
    }

    /// [`Db::outcome_stats`] over every repository of `forge` that the glob `group`
    /// matches (`*` crosses `/`, so `acme/*` takes GitLab's subgroups too): a group of
    /// repositories the operator opted in to reading each other's record.
    pub async fn group_outcome_stats(
        &self,
        forge: ForgeKind,
        group: &str,
        risk: Option<Risk>,
    ) -> Result<Vec<OutcomeStats>> {
        let matcher = globset::Glob::new(group)
            .map_err(|e| anyhow::anyhow!("`{group}` is not a repository pattern: {e}"))?
            .compile_matcher();
        let found: Vec<GroupRow> = sqlx::query_as(
            "SELECT repo, risk, executor, model, judged, verified, \
             executor_microusd + reviewer_microusd FROM attempt_outcomes \
             WHERE forge = $1 AND source = 'run' AND ($2 IS NULL OR risk = $2) \
             ORDER BY created_at",
        )
        .bind(forge)
        .bind(risk.map(Risk::as_str))
        .fetch_all(&self.pool)
        .await?;
        let rows = found
            .into_iter()
            .filter(|row| matcher.is_match(&row.0))
            .map(|(_, risk, executor, model, judged, verified, cost)| {
                (risk, executor, model, judged, verified, cost)
            })
            .collect();
        Ok(OutcomeStats::gather(rows))
    }

    /// Attempts by source, executor, model and outcome (`verified`, `failed`: judged and
    /// not verified, `stopped`: cancelled or failed by the infrastructure), for `/metrics`.
    pub async fn attempt_counts(&self) -> Result<Vec<AttemptCount>> {
        Ok(sqlx::query_as(
            "SELECT source, executor, COALESCE(model, 'none') AS model, \
             CASE WHEN verified = 1 THEN 'verified' WHEN judged = 1 THEN 'failed' \
             ELSE 'stopped' END AS outcome, COUNT(*) AS attempts FROM attempt_outcomes \
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

/// (risk, executor, model, judged, verified, cost): one outcome as the stats read it.
type StatsRow = (String, String, Option<String>, i64, i64, i64);
/// A [`StatsRow`] with its repository first.
type GroupRow = (String, String, String, Option<String>, i64, i64, i64);

// PostgreSQL sums BIGINTs into NUMERIC, which the Any driver cannot read: hence the casts.
const SPENT: &str = "SELECT CAST(COALESCE(SUM(cost_microusd), 0) AS BIGINT) AS cost_microusd, \
     CAST(COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens), 0) AS BIGINT) AS tokens \
     FROM model_usage";

/// One series of `planwright_attempts_total`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AttemptCount {
    pub source: String,
    pub executor: String,
    /// `none` for an executor that names no model.
    pub model: String,
    pub outcome: String,
    pub attempts: i64,
}

/// A repository's record with one executor and model at one risk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutcomeStats {
    pub risk: String,
    pub executor: String,
    pub model: Option<String>,
    /// Attempts that came to a judgement of the model's work.
    pub runs: i64,
    pub verified: i64,
    /// The median of what the verified attempts cost (executor and reviewer), in
    /// micro-USD; `None` before any was verified.
    pub median_verified_microusd: Option<i64>,
}

impl OutcomeStats {
    /// Rows of (risk, executor, model, judged, verified, cost) summed per risk, executor
    /// and model, in that order.
    fn gather(rows: Vec<StatsRow>) -> Vec<OutcomeStats> {
        type Key = (String, String, Option<String>);
        let mut groups: BTreeMap<Key, (i64, Vec<i64>)> = BTreeMap::new();
        for (risk, executor, model, judged, verified, cost) in rows {
            let group = groups.entry((risk, executor, model)).or_default();
            if judged == 1 || verified == 1 {
                group.0 += 1;
            }
            if verified == 1 {
                group.1.push(cost);
            }
        }
        groups
            .into_iter()
            .filter(|(_, (runs, _))| *runs > 0)
            .map(
                |((risk, executor, model), (runs, mut costs))| OutcomeStats {
                    risk,
                    executor,
                    model,
                    runs,
                    verified: costs.len() as i64,
                    median_verified_microusd: median(&mut costs),
                },
            )
            .collect()
    }
}

/// The middle value (the lower middle's and upper middle's mean, rounded down, of an
/// even count); `None` of nothing.
pub fn median(values: &mut [i64]) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [7]), Some(7));
        assert_eq!(median(&mut [9, 1, 5]), Some(5));
        assert_eq!(median(&mut [4, 1, 10, 2]), Some(3));
    }

    #[test]
    fn stats_count_judged_attempts_and_the_verified_ones_cost() {
        let row = |risk: &str, model: &str, judged, verified, cost| {
            (
                risk.to_owned(),
                "builtin".to_owned(),
                Some(model.to_owned()),
                judged,
                verified,
                cost,
            )
        };
        let stats = OutcomeStats::gather(vec![
            row("medium", "a:cheap", 1, 1, 100),
            row("medium", "a:cheap", 1, 0, 900),
            row("medium", "a:cheap", 0, 0, 50),
            row("medium", "a:cheap", 1, 1, 300),
            row("low", "a:cheap", 0, 0, 10),
            row("high", "a:dear", 1, 0, 10),
        ]);
        assert_eq!(
            stats,
            vec![
                OutcomeStats {
                    risk: "high".into(),
                    executor: "builtin".into(),
                    model: Some("a:dear".into()),
                    runs: 1,
                    verified: 0,
                    median_verified_microusd: None,
                },
                OutcomeStats {
                    risk: "medium".into(),
                    executor: "builtin".into(),
                    model: Some("a:cheap".into()),
                    runs: 3,
                    verified: 2,
                    median_verified_microusd: Some(200),
                },
            ]
        );
    }
}
