//! Routing learned from each repository's own outcomes. Every attempt that ends is kept
//! as an outcome of its repository ([`record_attempt`], what [`attempt_end`] reads from
//! how the run was finished); with `routing: auto` a contract starts on the cheapest rung
//! of the executor ladder whose record at the contract's risk *here* clears the bar
//! ([`learned_start`], deciding with the pure [`choose_start`]), and says why.
//!
//! The bar: the lower bound of the Wilson score interval of the rung's verified rate, at
//! [`CONFIDENCE`] one-sided, at least the repository's `routing_target`, over at least
//! `routing_min_runs` attempts. Wilson's bound stays honest on a handful of runs, where
//! the plain rate (5 of 5 is 100%) says more about luck than about the rung.

use std::path::Path;

use anyhow::Result;

use crate::config::repo::RoutingPolicy;
use crate::contract::{Risk, Rung};
use crate::event::ForgeKind;
use crate::ids::{CommitSha, RepoName, RunId};
use crate::store::outcomes::{NewOutcome, OutcomeSource, OutcomeStats, ReviewerVerdict};
use crate::store::runs::{self, RunState};
use crate::store::{Db, now_ms};
use crate::verify::{RunOutcome, Verdict, VerificationReport};

/// The one-sided confidence of the lower bound a rung's verified rate is judged by.
pub const CONFIDENCE: f64 = 0.90;
/// The standard normal quantile of [`CONFIDENCE`] (one-sided 90%).
const Z: f64 = 1.281_551_565_545;
/// An executor reads far more than it writes: prices are blended at this many input
/// tokens to one output token when no verified cost is on record to compare.
const INPUT_PER_OUTPUT: f64 = 4.0;

/// How routing weighs a rung of the contract's ladder.
trait Weighed {
    /// The rung as the contract names it: `anthropic:claude-haiku-4-5 (builtin)`.
    fn label(&self) -> String;
    /// USD per million tokens at the blend an executor uses them in.
    fn blended(&self) -> f64;
}

impl Weighed for Rung {
    fn label(&self) -> String {
        format!("{} ({})", self.model, self.executor)
    }

    fn blended(&self) -> f64 {
        (INPUT_PER_OUTPUT * self.input_usd_per_mtok + self.output_usd_per_mtok)
            / (INPUT_PER_OUTPUT + 1.0)
    }
}

/// One rung's record on this repository at one risk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Attempts that came to a judgement of the model's work.
    pub runs: u64,
    pub verified: u64,
    pub median_verified_microusd: Option<i64>,
}

/// Where a contract starts and why, as the contract says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// An index into the ladder's rungs.
    pub rung: usize,
    pub reason: String,
    /// The outcomes chose it (`false`: the default, for want of a rung that qualifies).
    pub learned: bool,
}

/// The lower bound of the Wilson score interval of `verified` out of `runs`, at
/// [`CONFIDENCE`] one-sided; 0 with no runs.
pub fn wilson_lower(verified: u64, runs: u64) -> f64 {
    if runs == 0 {
        return 0.0;
    }
    let n = runs as f64;
    let p = verified.min(runs) as f64 / n;
    let z2 = Z * Z;
    let centre = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - spread) / (1.0 + z2 / n)).max(0.0)
}

/// Each rung's record among a repository's outcomes at one risk, in the ladder's order.
pub fn records_for(rungs: &[Rung], stats: &[OutcomeStats]) -> Vec<Record> {
    rungs
        .iter()
        .map(|rung| {
            stats
                .iter()
                .find(|s| {
                    s.executor == rung.executor && s.model.as_deref() == Some(rung.model.as_str())
                })
                .map_or_else(Record::default, |s| Record {
                    runs: u64::try_from(s.runs).unwrap_or_default(),
                    verified: u64::try_from(s.verified).unwrap_or_default(),
                    median_verified_microusd: s.median_verified_microusd,
                })
        })
        .collect()
}

/// The starting rung for a contract of `risk`: with `routing: auto`, the cheapest rung
/// whose record (`records`, one per rung) has at least `min_runs` attempts and a lower
/// bound of its verified rate of at least `target`; otherwise `default`, the rung the
/// risk picks. The reason says which, with the figures that decided it and `place`,
/// where they come from (`here`, or `in acme/*` for a group of repositories).
pub fn choose_start(
    rungs: &[Rung],
    records: &[Record],
    risk: Risk,
    place: &str,
    policy: &RoutingPolicy,
    default: usize,
) -> Start {
    let default = default.min(rungs.len().saturating_sub(1));
    let label = |i: usize| rungs.get(i).map_or_else(String::new, Weighed::label);
    let record = |i: usize| records.get(i).copied().unwrap_or_default();
    let risk = risk.as_str();
    let min_runs = u64::from(policy.min_runs);
    let fallback = |why: String| Start {
        rung: default,
        reason: format!("{why}: starts on the default, {}", label(default)),
        learned: false,
    };
    if !policy.auto {
        return fallback("routing is static".to_owned());
    }
    let tried: Vec<usize> = (0..rungs.len())
        .filter(|&i| record(i).runs >= min_runs)
        .collect();
    let chosen = tried
        .iter()
        .copied()
        .filter(|&i| wilson_lower(record(i).verified, record(i).runs) >= policy.target)
        .min_by(|&a, &b| {
            rungs[a]
                .blended()
                .total_cmp(&rungs[b].blended())
                .then(a.cmp(&b))
        });
    let Some(chosen) = chosen else {
        if tried.is_empty() {
            return fallback(format!(
                "no rung has {min_runs} runs at {risk} risk {place} yet"
            ));
        }
        let target = (policy.target * 100.0).round();
        return fallback(format!(
            "no rung is verified often enough at {risk} risk {place} (at least {target}% at {:.0}% confidence)",
            CONFIDENCE * 100.0
        ));
    };
    let won = record(chosen);
    let mut reason = format!(
        "{} of {} verified at {risk} risk {place}",
        won.verified, won.runs
    );
    // Against the default, or (when it is the default) the rung above it.
    let other = if chosen != default {
        Some(default)
    } else {
        (chosen + 1 < rungs.len()).then_some(chosen + 1)
    };
    if let Some(other) = other {
        let ratio = match (
            won.median_verified_microusd,
            record(other).median_verified_microusd,
        ) {
            (Some(mine), Some(theirs)) if mine > 0 => theirs as f64 / mine as f64,
            _ if rungs[chosen].blended() > 0.0 => rungs[other].blended() / rungs[chosen].blended(),
            _ => 0.0,
        };
        if ratio > 1.0 {
            reason.push_str(&format!("; {} would cost {ratio:.1}× more", label(other)));
        } else if other == default {
            let theirs = record(other);
            reason.push_str(&format!(
                "; the default, {}, has {} of {} verified",
                label(other),
                theirs.verified,
                theirs.runs
            ));
        }
    }
    Start {
        rung: chosen,
        reason,
        learned: true,
    }
}

/// Whose outcomes route a contract: its repository's own, or those of the group of
/// repositories the operator opted it in to (`ROUTING_GROUPS`).
#[derive(Debug, Clone, Copy)]
pub struct Whose<'a> {
    pub forge: ForgeKind,
    pub repo: &'a RepoName,
    /// The deployment's `routing_groups`: repository globs, each a group.
    pub groups: &'a [String],
}

/// The first of `groups` (repository globs) that takes `repo`; `None`: it reads only its
/// own outcomes. `*` crosses `/`, so `acme/*` takes GitLab's subgroups too.
pub fn group_of<'a>(groups: &'a [String], repo: &RepoName) -> Option<&'a str> {
    groups
        .iter()
        .find(|g| globset::Glob::new(g).is_ok_and(|g| g.compile_matcher().is_match(repo.as_str())))
        .map(String::as_str)
}

/// The starting rung for a contract of `risk`: [`choose_start`] over the outcomes at
/// that risk of the repository, or of its group when the operator made one (none are
/// read unless `policy.auto`). `default` is the rung the risk picks.
pub async fn learned_start(
    db: &Db,
    whose: &Whose<'_>,
    risk: Risk,
    rungs: &[Rung],
    default: usize,
    policy: &RoutingPolicy,
) -> Result<Start> {
    let group = group_of(whose.groups, whose.repo);
    let place = group.map_or_else(|| "here".to_owned(), |g| format!("in {g}"));
    let records = match (policy.auto, group) {
        (false, _) => Vec::new(),
        (true, None) => {
            let stats = db
                .outcome_stats(whose.forge, whose.repo, Some(risk))
                .await?;
            records_for(rungs, &stats)
        }
        (true, Some(group)) => {
            let stats = db
                .group_outcome_stats(whose.forge, group, Some(risk))
                .await?;
            records_for(rungs, &stats)
        }
    };
    Ok(choose_start(rungs, &records, risk, &place, policy, default))
}

/// How an attempt ended, as its outcome records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEnd {
    pub verified: bool,
    /// It came to a judgement of the model's work (not cancelled, not an executor that
    /// failed to run).
    pub judged: bool,
    pub why_not: Option<String>,
    pub verdict: ReviewerVerdict,
}

/// How a run finished with `state`, the executor's `report` or error and the `outcome`
/// JSON says the attempt ended; `None` when it has not ended yet, or when this only
/// completes the record of one that ended before (its unfinished work kept).
pub fn attempt_end(
    state: RunState,
    report: Option<&str>,
    outcome: Option<&str>,
) -> Option<AttemptEnd> {
    let ended = |judged: bool, why: String, verdict| AttemptEnd {
        verified: false,
        judged,
        why_not: Some(why),
        verdict,
    };
    match (state, report, outcome) {
        (RunState::Verified, _, Some(text)) => {
            let outcome: RunOutcome = serde_json::from_str(text).ok()?;
            let verdict = if outcome.accepted {
                ReviewerVerdict::Accepted
            } else {
                ReviewerVerdict::Rejected
            };
            Some(AttemptEnd {
                verified: outcome.failure.is_none(),
                judged: true,
                why_not: outcome.failure.as_deref().map(first_line),
                verdict,
            })
        }
        (RunState::Failed, _, Some(text)) => {
            let report: VerificationReport = serde_json::from_str(text).ok()?;
            let why = match report.verdict {
                Verdict::Refused => format!("refused: {}", report.headline()),
                Verdict::Failed => format!("verification failed: {}", report.headline()),
                Verdict::Passed => "sent back after passing verification".to_owned(),
            };
            Some(ended(true, why, ReviewerVerdict::None))
        }
        (RunState::Failed, Some("cancelled"), None) => {
            Some(ended(false, "cancelled".to_owned(), ReviewerVerdict::None))
        }
        (RunState::Failed, Some(error), None) => Some(ended(
            false,
            format!("executor failed: {}", first_line(error)),
            ReviewerVerdict::None,
        )),
        (RunState::Failed, None, None) => Some(ended(
            true,
            "stopped without a result to verify".to_owned(),
            ReviewerVerdict::None,
        )),
        _ => None,
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Whose attempt it was: the repository, the contract's risk, the base its change is
/// read against (for the files it changed) and where it comes from.
#[derive(Debug, Clone)]
pub struct AttemptScope<'a> {
    pub forge: ForgeKind,
    pub repo: &'a RepoName,
    pub risk: Risk,
    pub base: Option<&'a CommitSha>,
    pub source: OutcomeSource,
}

/// Records the outcome of the attempt `run` that ended as `end`: its executor, model,
/// rung and attempt from the run's row, what each role spent from the model usage, its
/// wall time, and the files it changed from its checkout while that is there. An
/// evaluation calls it with [`OutcomeSource::Eval`] for the runs it makes.
pub async fn record_attempt(
    db: &Db,
    scope: &AttemptScope<'_>,
    run: &RunId,
    end: &AttemptEnd,
) -> Result<()> {
    let mut conn = db.pool.acquire().await?;
    let Some(row) = runs::get(&mut conn, run).await? else {
        anyhow::bail!("There is no run {run} to record the outcome of");
    };
    drop(conn);
    let ended = now_ms();
    let spend = db
        .attempt_spend(
            &row.session_id,
            row.contract_version,
            run,
            row.started_at,
            ended,
        )
        .await?;
    let files_changed = match (row.workspace.as_deref(), scope.base) {
        (Some(dir), Some(base)) if !dir.is_empty() => {
            crate::git::changed_file_count(Path::new(dir), base)
                .await
                .ok()
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
        }
        _ => None,
    };
    db.record_outcome(&NewOutcome {
        run,
        forge: scope.forge,
        repo: scope.repo,
        session: Some(&row.session_id),
        version: Some(row.contract_version),
        risk: scope.risk,
        executor: &row.executor,
        model: row.model.as_deref(),
        rung: row.rung,
        verified: end.verified,
        judged: end.judged,
        why_not: end.why_not.as_deref(),
        verdict: end.verdict,
        attempt: row.attempt,
        spend,
        wall_ms: ended.saturating_sub(row.started_at),
        files_changed,
        source: scope.source,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rung(model: &str, input: f64, output: f64) -> Rung {
        Rung {
            executor: "builtin".into(),
            model: model.into(),
            input_usd_per_mtok: input,
            output_usd_per_mtok: output,
        }
    }

    fn ladder() -> Vec<Rung> {
        vec![
            rung("anthropic:claude-haiku-4-5", 1.0, 5.0),
            rung("anthropic:claude-sonnet-4-5", 3.0, 15.0),
            rung("anthropic:claude-opus-4-5", 5.0, 25.0),
        ]
    }

    fn record(verified: u64, runs: u64, median: Option<i64>) -> Record {
        Record {
            runs,
            verified,
            median_verified_microusd: median,
        }
    }

    fn auto() -> RoutingPolicy {
        RoutingPolicy {
            auto: true,
            ..RoutingPolicy::default()
        }
    }

    #[test]
    fn the_wilson_bound_is_below_the_rate_and_tightens_with_runs() {
        assert_eq!(wilson_lower(0, 0), 0.0);
        let close = |a: f64, b: f64| (a - b).abs() < 0.001;
        // 5 of 5 at 90% one-sided: n / (n + z²).
        assert!(
            close(wilson_lower(5, 5), 5.0 / (5.0 + Z * Z)),
            "{}",
            wilson_lower(5, 5)
        );
        assert!(close(wilson_lower(9, 11), 0.632), "{}", wilson_lower(9, 11));
        assert!(wilson_lower(80, 100) > wilson_lower(8, 10));
        assert!(wilson_lower(8, 10) < 0.8);
    }

    #[test]
    fn the_cheapest_qualifying_rung_starts_and_says_why() {
        let records = [
            record(2, 6, Some(40_000)),
            record(9, 11, Some(100_000)),
            record(12, 12, Some(310_000)),
        ];
        let start = choose_start(&ladder(), &records, Risk::Medium, "here", &auto(), 2);
        assert_eq!(
            start,
            Start {
                rung: 1,
                reason: "9 of 11 verified at \
                         medium risk here; anthropic:claude-opus-4-5 (builtin) would cost 3.1× more"
                    .into(),
                learned: true,
            }
        );
        // Without verified costs on record for both, the list prices compare.
        let records = [record(7, 7, None), record(0, 0, None), record(0, 0, None)];
        let start = choose_start(&ladder(), &records, Risk::Low, "here", &auto(), 1);
        assert_eq!(start.rung, 0);
        assert_eq!(
            start.reason,
            "7 of 7 verified at low risk here; \
             anthropic:claude-sonnet-4-5 (builtin) would cost 3.0× more"
        );
    }

    #[test]
    fn the_price_not_the_ladders_order_decides_the_cheapest() {
        let mut rungs = ladder();
        rungs.swap(0, 2);
        let records = [
            record(10, 10, None),
            record(0, 0, None),
            record(10, 10, None),
        ];
        let start = choose_start(&rungs, &records, Risk::High, "here", &auto(), 1);
        assert_eq!(start.rung, 2, "{start:?}");
    }

    #[test]
    fn too_few_runs_or_too_few_verified_start_on_the_default() {
        let records = [
            record(4, 4, Some(1)),
            record(3, 3, Some(2)),
            record(0, 0, None),
        ];
        let start = choose_start(&ladder(), &records, Risk::Medium, "here", &auto(), 1);
        assert_eq!(
            start,
            Start {
                rung: 1,
                reason: "no rung has 5 runs at medium risk here yet: starts on the default, \
                         anthropic:claude-sonnet-4-5 (builtin)"
                    .into(),
                learned: false,
            }
        );
        // 4 of 5 is a rate of 80% but a bound of 51%: not enough yet.
        let records = [
            record(4, 5, Some(1)),
            record(0, 0, None),
            record(0, 0, None),
        ];
        let start = choose_start(&ladder(), &records, Risk::Medium, "here", &auto(), 1);
        assert_eq!(start.rung, 1);
        assert_eq!(
            start.reason,
            "no rung is verified often enough at medium risk here (at least 60% at 90% \
             confidence): starts on the default, anthropic:claude-sonnet-4-5 (builtin)"
        );
        let records = [record(7, 7, None), record(0, 0, None), record(0, 0, None)];
        let start = choose_start(
            &ladder(),
            &records,
            Risk::Medium,
            "here",
            &RoutingPolicy::default(),
            1,
        );
        assert_eq!((start.rung, start.learned), (1, false));
    }

    #[test]
    fn records_are_matched_by_executor_and_model() {
        let stats = |executor: &str, model: &str, runs, verified| OutcomeStats {
            risk: "medium".into(),
            executor: executor.into(),
            model: Some(model.into()),
            runs,
            verified,
            median_verified_microusd: None,
        };
        let found = records_for(
            &ladder(),
            &[
                stats("claude-code", "anthropic:claude-haiku-4-5", 9, 9),
                stats("builtin", "anthropic:claude-sonnet-4-5", 6, 5),
            ],
        );
        assert_eq!(
            found,
            vec![record(0, 0, None), record(5, 6, None), record(0, 0, None)]
        );
    }

    #[test]
    fn a_finished_run_says_how_the_attempt_ended() {
        assert_eq!(attempt_end(RunState::Running, Some("did it"), None), None);
        let cancelled = attempt_end(RunState::Failed, Some("cancelled"), None).unwrap();
        assert!(!cancelled.judged && !cancelled.verified);
        let error = attempt_end(RunState::Failed, Some("provider answered 529\nmore"), None);
        assert_eq!(
            error.unwrap().why_not.as_deref(),
            Some("executor failed: provider answered 529")
        );
        let stopped = attempt_end(RunState::Failed, None, None).unwrap();
        assert!(stopped.judged && !stopped.verified);
        // Unfinished work kept after the attempt ended adds nothing to its outcome.
        let kept = r#"{"partial":{"reason":"out of budget","commit":"abc"}}"#;
        assert_eq!(attempt_end(RunState::Failed, None, Some(kept)), None);
    }
}
