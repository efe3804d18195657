//! The verification report and its renderings: the pull request's table, the check run,
//! the text the reviewer reads, and the line a status comment shows.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::classify::{Class, ClassCounts, ClassifiedFailure, Runs, classify_runs};
use super::plan::Plan;
use super::proof::ProofReport;
use super::runs::{CommandRun, Phase, RunSet, RunSummary};
use super::scope::{ScopeFinding, Severity};
use super::spans::{code, fence};
use super::weaken::Weakening;
use super::{COMPACT_DETAILED, COMPACT_LISTED, LISTED_PER_CLASS, MAX_FINDINGS};

use crate::config::repo::PathTests;
use crate::forge::truncate_with_note;
use crate::markdown::GITHUB_TEXT_LIMIT;
use crate::text::clip;

/// Bytes of the proof table a pull request body holds; the check run has all of it.
const PROOF_CHARS: usize = 16_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing introduced and nothing refused.
    Passed,
    /// A failure was introduced, or a test weakened to pass.
    Failed,
    /// The result touches what it may not; its tests do not matter.
    Refused,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Refused => "refused",
        }
    }
}

/// One command on both trees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandComparison {
    pub command: String,
    pub phase: Phase,
    /// `None` when the baseline did not run this command.
    pub baseline: Option<RunSummary>,
    pub after: RunSummary,
    /// The first re-run of the result's failures (as reports kept before there could be
    /// more hold it).
    pub rerun: Option<RunSummary>,
    /// Every re-run of the result's failing tests, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<Rerun>,
    /// The base's re-runs of its failing tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_reruns: Vec<Rerun>,
}

/// One re-run of a command's failing tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rerun {
    pub summary: RunSummary,
    /// The command line that ran only the failing tests; `None`: the runner could not
    /// select single tests, so the whole command ran again.
    pub selected: Option<String>,
    /// The run named its failing tests but the runner could not select them.
    #[serde(default)]
    pub could_not_select: bool,
    /// A run of the base's failing tests on the result, to see them pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirms: bool,
}

impl Rerun {
    fn of(run: &CommandRun) -> Rerun {
        Rerun {
            summary: run.summary.clone(),
            selected: run.selected.clone(),
            could_not_select: run.could_not_select,
            confirms: run.confirms,
        }
    }

    fn how(&self) -> &'static str {
        if self.confirms {
            "run of the tests that failed on the base"
        } else if self.selected.is_some() {
            "re-run of the failing tests"
        } else if self.could_not_select {
            "re-run of the whole command (the runner could not select single tests)"
        } else {
            "re-run"
        }
    }
}

impl CommandComparison {
    /// The result's re-runs, also from a report kept when there was one at most.
    fn result_reruns(&self) -> Vec<Rerun> {
        if self.reruns.is_empty() {
            self.rerun
                .iter()
                .map(|summary| Rerun {
                    summary: summary.clone(),
                    selected: None,
                    could_not_select: false,
                    confirms: false,
                })
                .collect()
        } else {
            self.reruns.clone()
        }
    }
}

/// What the repository and the contract say about the tests, beside the runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Test ids whose failures neither block nor count as fixed.
    pub quarantine: Vec<String>,
    /// The contract names new tests: a test runner that finds none fails.
    pub expects_tests: bool,
    /// Tests the contract allows removing (see [`Plan::removable`]).
    pub removable: Vec<String>,
}

impl Rules {
    pub fn of(plan: &Plan) -> Rules {
        Rules {
            quarantine: plan.quarantine.clone(),
            expects_tests: plan.expects_tests,
            removable: plan.removable.clone(),
        }
    }
}

/// What verification found, stored as JSON with the session and rendered for the pull
/// request, the check run and the reviewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationReport {
    pub verdict: Verdict,
    pub commands: Vec<CommandComparison>,
    /// Every classified failure counted, including those not listed.
    pub counts: ClassCounts,
    /// At most [`LISTED_PER_CLASS`] of each class, messages clipped.
    pub failures: Vec<ClassifiedFailure>,
    pub scope: Vec<ScopeFinding>,
    /// Scope findings beyond those listed.
    pub scope_omitted: u64,
    /// The globs of the repository's `test` whose commands ran because the result
    /// changed files under them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen: Vec<PathTests>,
    /// What the added and changed tests prove, run on the base code (absent from reports
    /// kept before it was made).
    #[serde(default, skip_serializing_if = "ProofReport::is_empty")]
    pub proof: ProofReport,
    /// Tests the result skips, empties, removes or deselects; absent from reports kept
    /// before they were read.
    #[serde(default, skip_serializing_if = "Weakening::is_empty")]
    pub weakening: Weakening,
    /// How the base's tests judged the result: test files run in their base form, new
    /// ones run apart, and what could not be done so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judged: Vec<String>,
}

impl VerificationReport {
    /// Builds the report from the runs (also from stored ones), with nothing quarantined
    /// or expected.
    pub fn compare(
        baseline: &RunSet,
        after: &RunSet,
        reruns: &[CommandRun],
        scope: Vec<ScopeFinding>,
    ) -> VerificationReport {
        Self::judge(baseline, after, reruns, scope, &Rules::default())
    }

    /// Builds the report from the runs and the re-runs of failing tests on both trees,
    /// under `rules`.
    pub fn judge(
        baseline: &RunSet,
        after: &RunSet,
        reruns: &[CommandRun],
        mut scope: Vec<ScopeFinding>,
        rules: &Rules,
    ) -> VerificationReport {
        let mut commands = Vec::new();
        let mut counts = ClassCounts::default();
        let mut all = Vec::new();
        for run in &after.runs {
            let base = baseline.find(run.phase, &run.command);
            // Setup commands are not re-run: they change the workspace.
            let check = run.phase == Phase::Check;
            let of = |r: &&CommandRun| check && r.phase == run.phase && r.command == run.command;
            let reruns: Vec<&CommandRun> = reruns.iter().filter(of).collect();
            let base_reruns: Vec<&CommandRun> = baseline.reruns.iter().filter(of).collect();
            let runs = Runs {
                base,
                base_reruns: base_reruns.clone(),
                after: run,
                reruns: reruns.clone(),
                quarantine: &rules.quarantine,
                expects_tests: rules.expects_tests,
                removable: &rules.removable,
            };
            for failure in classify_runs(&runs) {
                counts.add(failure.class);
                all.push(failure);
            }
            commands.push(CommandComparison {
                command: run.command.clone(),
                phase: run.phase,
                baseline: base.map(|b| b.summary.clone()),
                after: run.summary.clone(),
                rerun: reruns.first().map(|r| r.summary.clone()),
                reruns: reruns.iter().map(|r| Rerun::of(r)).collect(),
                base_reruns: base_reruns.iter().map(|r| Rerun::of(r)).collect(),
            });
        }
        let mut failures = Vec::new();
        for class in Class::ALL {
            failures.extend(
                all.iter()
                    .filter(|f| f.class == class)
                    .take(LISTED_PER_CLASS)
                    .cloned(),
            );
        }
        // Refusals first, so the bound never hides one.
        scope.sort_by_key(|f| f.severity != Severity::Refused);
        let scope_omitted = scope.len().saturating_sub(MAX_FINDINGS) as u64;
        scope.truncate(MAX_FINDINGS);
        let verdict = if scope.iter().any(|f| f.severity == Severity::Refused) {
            Verdict::Refused
        } else if counts.introduced > 0 || counts.no_result > 0 || counts.no_longer_runs > 0 {
            Verdict::Failed
        } else {
            Verdict::Passed
        };
        VerificationReport {
            verdict,
            commands,
            counts,
            failures,
            scope,
            scope_omitted,
            chosen: Vec::new(),
            proof: ProofReport::default(),
            weakening: Weakening::default(),
            judged: Vec::new(),
        }
    }

    /// Adds the fail-to-pass proof: a contract whose new tests all pass on the base code
    /// too does not pass.
    pub fn with_proof(mut self, proof: ProofReport) -> VerificationReport {
        if self.verdict == Verdict::Passed && proof.blocking().is_some() {
            self.verdict = Verdict::Failed;
        }
        self.proof = proof;
        self
    }

    /// One line for a check run's title or a status comment.
    pub fn headline(&self) -> String {
        let c = &self.counts;
        let mut parts = Vec::new();
        for class in Class::ALL {
            let n = c.get(class);
            if n > 0 {
                parts.push(format!("{n} {}", class.label()));
            }
        }
        let refused = self
            .scope
            .iter()
            .filter(|f| f.severity == Severity::Refused)
            .count();
        if let Some(weakened) = self.weakening.headline_part() {
            parts.insert(0, weakened);
        }
        if refused > 0 {
            parts.insert(0, format!("{refused} refused path(s)"));
        }
        if let Some(why) = self.proof.blocking() {
            parts.push(why);
        }
        if self.commands.is_empty() {
            parts.push("no verification commands".into());
        }
        if parts.is_empty() {
            format!("Verification {}", self.verdict.as_str())
        } else {
            format!(
                "Verification {}: {}",
                self.verdict.as_str(),
                parts.join(", ")
            )
        }
    }

    /// The table for the pull request body: each command on the base and on the result.
    pub fn pr_markdown(&self) -> String {
        let mut out = format!("**{}**\n\n", self.headline());
        if self.commands.is_empty() {
            out.push_str(
                "Neither the contract nor the repository names a verification command: \
                 nothing was run.\n",
            );
            return out;
        }
        out.push_str("| command | baseline | after |\n|---|---|---|\n");
        for c in &self.commands {
            let name = match c.phase {
                Phase::Setup => format!("setup: {}", code(&c.command)),
                Phase::Check => code(&c.command),
            };
            let base = base_cell(c);
            let after = after_cell(c);
            let _ = writeln!(out, "| {name} | {base} | {after} |");
        }
        for note in &self.judged {
            let _ = writeln!(out, "\n{note}");
        }
        let proof = self.proof.markdown();
        if !proof.is_empty() {
            let _ = write!(out, "\n{proof}");
        }
        let named = |class: Class| -> Vec<String> {
            self.of_class(class)
                .map(|f| code(f.test.as_deref().unwrap_or(&f.command)))
                .collect()
        };
        let flaky = named(Class::Flaky);
        if !flaky.is_empty() {
            let _ = writeln!(
                out,
                "\nFlaky: {} passed and failed in runs of the same tree; neither blocking \
                 nor counted as fixed.",
                flaky.join(", ")
            );
        }
        let quarantined = named(Class::Quarantined);
        if !quarantined.is_empty() {
            let _ = writeln!(
                out,
                "\nQuarantined by the repository's settings: {}; neither blocking nor \
                 counted as fixed.",
                quarantined.join(", ")
            );
        }
        out
    }

    /// The listed failures of one class.
    pub(super) fn of_class(&self, class: Class) -> impl Iterator<Item = &ClassifiedFailure> {
        self.failures.iter().filter(move |f| f.class == class)
    }

    /// The longer account for a check run: the table, every listed failure with its
    /// message and location, and the scope findings; cut to what GitHub accepts.
    pub fn check_markdown(&self) -> String {
        let mut out = self.pr_markdown();
        if !self.weakening.is_empty() {
            out.push('\n');
            out.push_str(&self.weakening.markdown());
        }
        for class in Class::ALL {
            let total = self.counts.get(class);
            if total == 0 {
                continue;
            }
            let _ = writeln!(
                out,
                "\n### {} ({total})\n\n_{}._\n",
                class.title(),
                class.meaning()
            );
            let listed: Vec<&ClassifiedFailure> = self.of_class(class).collect();
            for f in &listed {
                let name = match &f.test {
                    Some(test) => code(test),
                    None => "the command failed".to_owned(),
                };
                let _ = write!(out, "- {name} in {}", code(&f.command));
                if let Some(location) = &f.location {
                    let _ = write!(out, " at {}", code(location));
                }
                out.push('\n');
                if !f.message.trim().is_empty() {
                    // Markdown ends a line at a lone `\r` too: every line of the message
                    // is indented under its item, or one that is not would end the item
                    // and the fence with it.
                    let message = f.message.replace("\r\n", "\n").replace('\r', "\n");
                    let ticks = fence(&message);
                    let _ = writeln!(
                        out,
                        "\n  {ticks}text\n  {}\n  {ticks}\n",
                        message.replace('\n', "\n  ")
                    );
                }
            }
            let more = total.saturating_sub(listed.len() as u64);
            if more > 0 {
                let _ = writeln!(out, "\n… and {more} more not listed.");
            }
        }
        if !self.scope.is_empty() {
            out.push_str("\n### Scope\n\n");
            for f in &self.scope {
                let what = match f.severity {
                    Severity::Refused => "**refused**",
                    Severity::Flagged => "flagged",
                };
                let _ = writeln!(
                    out,
                    "- {what}: {} ({}): {}",
                    code(&f.path),
                    f.change,
                    f.reason
                );
            }
            if self.scope_omitted > 0 {
                let _ = writeln!(out, "- … and {} more not listed.", self.scope_omitted);
            }
        }
        truncate_with_note(&out, GITHUB_TEXT_LIMIT).into_owned()
    }

    /// The report as a pull request, its check and a failure report show it: one row per
    /// command, the tests still failing, and the check's full account.
    pub fn for_publication(&self) -> crate::publish::VerificationSummary {
        let rows = self
            .commands
            .iter()
            .map(|c| {
                let after = after_cell(c);
                crate::publish::VerificationRow {
                    command: match c.phase {
                        Phase::Setup => format!("setup: {}", c.command),
                        Phase::Check => c.command.clone(),
                    },
                    baseline: c.baseline.as_ref().map(|_| base_cell(c)),
                    after,
                }
            })
            .collect();
        // Weakened tests first: they explain a pass that is not one.
        let mut failing = self.weakening.markdown();
        for class in [
            Class::NoResult,
            Class::Introduced,
            Class::NoLongerRuns,
            Class::PreExisting,
        ] {
            let total = self.counts.get(class);
            if total == 0 {
                continue;
            }
            let _ = writeln!(
                failing,
                "**{} ({total})**: {}.\n",
                class.title(),
                class.meaning()
            );
            let listed: Vec<&ClassifiedFailure> = self.of_class(class).collect();
            for f in &listed {
                let name = match &f.test {
                    Some(test) => code(test),
                    None => "the command".to_owned(),
                };
                let first = f.message.lines().find(|l| !l.trim().is_empty());
                let _ = write!(failing, "- {name} in {}", code(&f.command));
                if let Some(line) = first {
                    let _ = write!(failing, ": {}", code(&clip(line.trim(), 200)));
                }
                failing.push('\n');
            }
            let more = total.saturating_sub(listed.len() as u64);
            if more > 0 {
                let _ = writeln!(failing, "- … and {more} more");
            }
            failing.push('\n');
        }
        let refused: Vec<&ScopeFinding> = self
            .scope
            .iter()
            .filter(|f| f.severity == Severity::Refused)
            .collect();
        if !refused.is_empty() {
            failing.push_str("**Refused changes**:\n\n");
            for f in refused {
                let _ = writeln!(failing, "- {} ({}): {}", code(&f.path), f.change, f.reason);
            }
        }
        // How the base's tests judged the result, next to the table it explains.
        let mut proof = String::new();
        for note in &self.judged {
            let _ = writeln!(proof, "{note}\n");
        }
        proof.push_str(&self.proof.markdown());
        crate::publish::VerificationSummary {
            rows,
            proof: truncate_with_note(&proof, PROOF_CHARS).into_owned(),
            failing: failing.trim_end().to_owned(),
            details: self.check_markdown(),
            chosen: self.chosen_markdown(),
        }
    }

    /// Which of the repository's path globs chose which commands; empty without globs.
    fn chosen_markdown(&self) -> String {
        if self.chosen.is_empty() {
            return String::new();
        }
        let globs: Vec<String> = self
            .chosen
            .iter()
            .map(|p| {
                let commands: Vec<String> = p.commands.iter().map(|c| code(c)).collect();
                format!("{} chose {}", code(&p.glob), commands.join(", "))
            })
            .collect();
        format!(
            "Chosen by the paths the result changed: {}.",
            globs.join("; ")
        )
    }

    /// Plain text for the reviewer model: the verdict, each command's two runs, the
    /// classified failures (the first of each class with their messages) and the scope.
    pub fn compact(&self) -> String {
        let mut out = format!("{}\n", self.headline());
        for note in &self.judged {
            let _ = writeln!(out, "{note}");
        }
        out.push_str(&self.weakening.compact());
        if !self.commands.is_empty() {
            out.push_str("commands:\n");
        }
        for c in &self.commands {
            let phase = match c.phase {
                Phase::Setup => "setup ",
                Phase::Check => "",
            };
            let mut base = c
                .baseline
                .as_ref()
                .map_or_else(|| "not run".to_owned(), plain);
            for rerun in &c.base_reruns {
                let _ = write!(base, "; {} {}", rerun.how(), plain(&rerun.summary));
            }
            let _ = write!(
                out,
                "- {phase}`{}`: baseline {base}; after {}",
                c.command,
                plain(&c.after)
            );
            for rerun in c.result_reruns() {
                let _ = write!(out, "; {} {}", rerun.how(), plain(&rerun.summary));
            }
            if c.phase == Phase::Check && !c.after.recognised() {
                out.push_str("; judged by exit code: no test output recognised");
            }
            out.push('\n');
        }
        out.push_str(&self.proof.compact());
        for class in Class::ALL {
            let total = self.counts.get(class);
            if total == 0 {
                continue;
            }
            let _ = writeln!(out, "{} ({total}; {}):", class.title(), class.meaning());
            let listed: Vec<&ClassifiedFailure> =
                self.of_class(class).take(COMPACT_LISTED).collect();
            for (i, f) in listed.iter().enumerate() {
                let name = f.test.as_deref().unwrap_or("(the whole command)");
                let _ = write!(out, "- {name} [{}]", f.command);
                if let Some(location) = &f.location {
                    let _ = write!(out, " at {location}");
                }
                out.push('\n');
                if i < COMPACT_DETAILED {
                    let message: Vec<&str> = f
                        .message
                        .lines()
                        .filter(|l| !l.trim().is_empty())
                        .take(4)
                        .collect();
                    for line in message {
                        let _ = writeln!(out, "    {}", clip(line.trim_end(), 200));
                    }
                }
            }
            let more = total.saturating_sub(listed.len() as u64);
            if more > 0 {
                let _ = writeln!(out, "- … {more} more");
            }
        }
        if !self.scope.is_empty() {
            out.push_str("scope:\n");
            for f in &self.scope {
                let what = match f.severity {
                    Severity::Refused => "REFUSED",
                    Severity::Flagged => "flagged",
                };
                let _ = writeln!(out, "- {what} {} ({}): {}", f.path, f.change, f.reason);
            }
            if self.scope_omitted > 0 {
                let _ = writeln!(out, "- … {} more", self.scope_omitted);
            }
        }
        out
    }
}

fn counts_text(s: &RunSummary) -> String {
    if !s.recognised() {
        return String::new();
    }
    let mut parts = vec![
        format!("{} passed", s.passed),
        format!("{} failed", s.failed),
    ];
    if s.skipped > 0 {
        parts.push(format!("{} skipped", s.skipped));
    }
    if s.errors > 0 {
        parts.push(format!("{} errors", s.errors));
    }
    let counts = parts.join(", ");
    if s.complete() {
        counts
    } else {
        // An incomplete run: a test it does not list may still have failed.
        let noun = if s.unnamed == 1 {
            "failure"
        } else {
            "failures"
        };
        format!("{counts} · {} {noun} not named", s.unnamed)
    }
}

/// The "after" cell of a command: its run on the result, its re-runs, and how it was
/// judged when its output named no tests.
fn after_cell(c: &CommandComparison) -> String {
    let mut after = cell(&c.after);
    after.push_str(&reruns_text(&c.result_reruns()));
    if c.phase == Phase::Check && !c.after.recognised() {
        after.push_str(" · judged by exit code: no test output recognised");
    }
    after
}

/// The "baseline" cell: its run on the base and its re-runs.
fn base_cell(c: &CommandComparison) -> String {
    match &c.baseline {
        Some(base) => format!("{}{}", cell(base), reruns_text(&c.base_reruns)),
        None => "—".to_owned(),
    }
}

/// The re-runs after a run's cell, each by its mark and counts (a cell stays short).
fn reruns_text(reruns: &[Rerun]) -> String {
    let Some(first) = reruns.first() else {
        return String::new();
    };
    let outcomes: Vec<String> = reruns
        .iter()
        .map(|r| {
            let s = &r.summary;
            let counts = counts_text(s);
            let what = if counts.is_empty() {
                s.ending()
            } else {
                counts
            };
            format!("{} {what}", mark(s))
        })
        .collect();
    format!("; {}: {}", first.how(), outcomes.join(", then "))
}

fn mark(s: &RunSummary) -> &'static str {
    if s.succeeded() {
        "✅"
    } else if s.timed_out {
        "⏱️"
    } else {
        "❌"
    }
}

/// A table cell: a mark, the counts when a runner was recognised, how it ended, how long.
fn cell(s: &RunSummary) -> String {
    let mark = mark(s);
    let counts = counts_text(s);
    let seconds = s.duration_ms as f64 / 1000.0;
    if counts.is_empty() {
        format!("{mark} {} · {seconds:.1} s", s.ending())
    } else {
        format!("{mark} {counts} · {} · {seconds:.1} s", s.ending())
    }
}

pub(super) fn plain(s: &RunSummary) -> String {
    let counts = counts_text(s);
    if counts.is_empty() {
        s.ending()
    } else {
        format!("{} ({}: {counts})", s.ending(), s.runner)
    }
}

impl VerificationReport {
    /// The report with what the result's files showed of weakened tests: a refused
    /// finding fails a result that passed, and a refused scope stays refused.
    pub fn with_weakening(mut self, weakening: Weakening) -> Self {
        if self.verdict == Verdict::Passed && weakening.refused().next().is_some() {
            self.verdict = Verdict::Failed;
        }
        self.weakening = weakening;
        self
    }
}
