//! What a run of the plan's commands leaves: each command's run distilled (its summary,
//! failing tests and excerpt), and every command's run on one tree, base or result.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{EXCERPT_CHARS, MESSAGE_CHARS};
use crate::distill::{self, Failure};
use crate::environment::setup_cache::SetupCache;
use crate::ids::RepoScope;
use crate::text::clip;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Setup,
    Check,
}

/// How one run of a command ended, with the counts its output gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// The test runner recognised in the output (`generic`: none).
    pub runner: String,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub errors: u64,
    /// A setup command not run: the setup cache held what it leaves.
    #[serde(default)]
    pub restored: bool,
    /// Why this run says nothing about the tests, when it does not: the command could
    /// not start, or a limit or signal ended it. Such a run is never a pass and never
    /// "pre-existing".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_result: Option<String>,
    /// Failures and errors the runner's summary counted that its output did not name:
    /// the run is incomplete, and a test it does not list may still have failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unnamed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RunSummary {
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// The run names every failure and error its summary counted.
    pub fn complete(&self) -> bool {
        self.unnamed == 0
    }

    pub(super) fn recognised(&self) -> bool {
        self.runner != distill::Format::Generic.runner()
    }

    pub(super) fn ending(&self) -> String {
        if self.restored {
            "restored from the setup cache".to_owned()
        } else if self.timed_out {
            "timed out".to_owned()
        } else if let Some(code) = self.exit_code {
            format!("exit {code}")
        } else {
            format!("killed by signal {}", self.signal.unwrap_or(0))
        }
    }
}

/// One command's run, distilled: the summary, its failing tests, the errors that kept
/// tests from running, and an account of the output. Paths of the workspace are written
/// relative to the checkout, so runs in different workspaces compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRun {
    pub command: String,
    pub phase: Phase,
    pub summary: RunSummary,
    pub failures: Vec<Failure>,
    pub build_errors: Vec<distill::Problem>,
    pub excerpt: String,
    /// For a re-run that selected the failing tests, the command line that did; `None`
    /// for a run of the command as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<String>,
    /// A re-run of the whole command although the run named its failing tests: the
    /// runner (or the command's shape) allows no selecting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub could_not_select: bool,
    /// For a re-run that selected tests, the ids it was asked to run: it says nothing of
    /// any other test. Empty in runs kept before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// A run of the result made to see the base's failures pass, not a re-run of the
    /// result's own failures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirms: bool,
    /// Tests the output names passing, where the runner lists them: seen passing as
    /// surely as in a run of their own. Not kept with stored runs.
    #[serde(skip)]
    pub passing: Vec<String>,
}

impl CommandRun {
    pub(super) fn failing_ids(&self) -> HashSet<&str> {
        self.failures.iter().map(|f| f.id.as_str()).collect()
    }

    /// Tests ran at all: a failed build, a crash before the first test or a run that
    /// found no tests says nothing about whether a test that failed before passes now.
    pub(super) fn ran_tests(&self) -> bool {
        !self.failures.is_empty() || self.summary.passed > 0
    }

    pub(super) fn tests_counted(&self) -> u64 {
        self.summary.passed + self.summary.failed + self.summary.skipped
    }

    /// `id` passed in this run (a re-run): tests ran, to the end, and the list of failures
    /// is whole (it names every failure the summary counted) and does not hold it. A run
    /// that selected tests speaks only of those it selected, and only when it counted at
    /// least as many tests as it was asked for: a test dropped from the run did not pass.
    pub(super) fn passed(&self, id: &str) -> bool {
        let whole = self.ran_tests()
            && !self.summary.timed_out
            && self.summary.no_result.is_none()
            && self.summary.complete()
            && self.failures.len() < distill::MAX_FAILURES
            && !self.failures.iter().any(|f| f.id == id);
        if !whole {
            return false;
        }
        if self.ids.is_empty() {
            return true;
        }
        self.ids.iter().any(|i| i == id) && self.selected_all_counted()
    }

    /// The output names `id` passing (and not also failing, as a retried test may be).
    pub(super) fn named_passing(&self, id: &str) -> bool {
        self.passing.iter().any(|p| p == id) && !self.failures.iter().any(|f| f.id == id)
    }

    /// `id` failed when this run selected it alone or among others.
    pub(super) fn failed_when_selected(&self, id: &str) -> bool {
        self.ids.iter().any(|i| i == id) && self.failures.iter().any(|f| f.id == id)
    }

    /// Every selected test is counted: as many tests passed or failed by name as were
    /// selected, and nothing errored outside the tests.
    fn selected_all_counted(&self) -> bool {
        let failing_selected = self
            .ids
            .iter()
            .filter(|id| self.failures.iter().any(|f| f.id == **id))
            .count() as u64;
        self.summary.errors == 0 && self.summary.passed + failing_selected >= self.ids.len() as u64
    }

    /// Adds the run of the result's new test files, made apart from this one, as if one
    /// run had held both: their counts and failures join this run's, and a failure there
    /// fails it.
    pub(super) fn take_apart(&mut self, apart: CommandRun) {
        let (s, a) = (&mut self.summary, &apart.summary);
        s.passed += a.passed;
        s.failed += a.failed;
        s.skipped += a.skipped;
        s.errors += a.errors;
        s.unnamed += a.unnamed;
        s.duration_ms += a.duration_ms;
        s.timed_out |= a.timed_out;
        if s.no_result.is_none() {
            s.no_result.clone_from(&a.no_result);
        }
        // Files that hold no test fail nothing, though pytest (and unittest from 3.12)
        // exit 5 when they collect none.
        let python = [distill::Format::Pytest, distill::Format::Unittest]
            .iter()
            .any(|f| f.runner() == a.runner);
        let ran_none = python
            && a.exit_code == Some(5)
            && a.passed + a.failed + a.skipped + a.errors == 0
            && apart.failures.is_empty()
            && apart.build_errors.is_empty()
            && a.no_result.is_none();
        if s.exit_code == Some(0) && a.exit_code != Some(0) && !ran_none {
            s.exit_code = a.exit_code;
            s.signal = a.signal;
        }
        self.failures.extend(apart.failures);
        self.passing.extend(apart.passing);
        self.build_errors.extend(apart.build_errors);
        let more = format!(
            "{}\n--- the result's new test files, run apart ---\n{}",
            self.excerpt, apart.excerpt
        );
        self.excerpt = clip(&more, EXCERPT_CHARS);
    }

    /// What to say when the command as a whole failed.
    pub(super) fn failure_message(&self) -> String {
        let mut message = match self.build_errors.first() {
            Some(problem) => problem.message.clone(),
            None => tail(&self.excerpt, 12),
        };
        if message.trim().is_empty() {
            message = format!("{} with no output", self.summary.ending());
        } else {
            message = format!("{}:\n{message}", self.summary.ending());
        }
        clip(&message, MESSAGE_CHARS)
    }
}

/// Every command's run on one tree: the base (the baseline) or the result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSet {
    pub runs: Vec<CommandRun>,
    /// The re-runs of failing tests, each under its command's name (absent from
    /// baselines kept before there were any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<CommandRun>,
    /// The setup cache entry (its key) the setup phase was restored from, when it was:
    /// these runs are worth keeping only as long as that entry is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_entry: Option<String>,
}

impl RunSet {
    pub(super) fn find(&self, phase: Phase, command: &str) -> Option<&CommandRun> {
        self.runs
            .iter()
            .find(|r| r.phase == phase && r.command == command)
    }

    /// The re-runs of `command`'s failing tests, in order.
    pub(super) fn reruns_of(&self, command: &str) -> Vec<&CommandRun> {
        self.reruns
            .iter()
            .filter(|r| r.command == command)
            .collect()
    }

    /// These runs' setup was restored from a setup cache entry that `cache` no longer
    /// holds for `scope` (emptied, evicted, or no cache at all): kept runs that rest on
    /// it are not to be reused.
    pub fn rests_on_a_gone_setup(&self, cache: Option<&SetupCache>, scope: &RepoScope) -> bool {
        self.setup_entry
            .as_ref()
            .is_some_and(|entry| !cache.is_some_and(|cache| cache.holds(scope, entry)))
    }

    /// A test (or a command named no test) changed its outcome between this tree's runs:
    /// the runs are not to be reused as they are.
    pub fn met_flaky(&self) -> bool {
        self.runs.iter().any(|run| {
            let reruns = self.reruns_of(&run.command);
            let ids = run.failing_ids();
            ids.iter().any(|id| reruns.iter().any(|r| r.passed(id)))
                || (ids.is_empty()
                    && !run.summary.succeeded()
                    && reruns.iter().any(|r| r.summary.succeeded()))
                || reruns
                    .iter()
                    .filter(|r| r.selected.is_none())
                    .any(|r| r.failures.iter().any(|f| !ids.contains(f.id.as_str())))
        })
    }

    /// Adds the check runs of `more` (the base's runs of commands chosen after it first
    /// ran) that this set does not hold yet.
    pub fn extend_checks(&mut self, more: RunSet) {
        for run in more.runs {
            if run.phase == Phase::Check && self.find(Phase::Check, &run.command).is_none() {
                self.runs.push(run);
            }
        }
    }

    /// The check commands this set holds runs of, in the order they ran.
    pub fn checks(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter(|r| r.phase == Phase::Check)
            .map(|r| r.command.clone())
            .collect()
    }
}

/// The last `lines` non-empty lines of `text`.
pub(super) fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}
