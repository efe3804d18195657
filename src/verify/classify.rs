//! Test by test, what the result did: a failure introduced, one already there, one
//! fixed, one that flips between runs (flaky, on the base or on the result), or one the
//! repository quarantined; and a run that found no tests where tests were expected.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::MESSAGE_CHARS;
use super::proof::test_matches;
use super::runs::{CommandRun, Phase};

use crate::distill::Failure;
use crate::text::clip;

/// How a failure compares between the base and the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The result's run of the command says nothing about its tests (see
    /// `RunSummary::no_result`): blocking, as an introduced failure is.
    NoResult,
    /// Passes (or is absent) on the base, fails on the result.
    Introduced,
    /// Failed on the base, and the result's run does not report it while no run of it
    /// alone was seen passing: dropped from the suite, or still failing where the run
    /// does not look. Blocking, as a removed test is.
    NoLongerRuns,
    /// Its outcome changed between runs of the same tree (the base's or the result's):
    /// neither blocking nor counted as fixed.
    Flaky,
    /// Named in the repository's `quarantine`: neither blocking nor counted as fixed.
    Quarantined,
    /// Failed on the base and no longer runs, as the contract's `test_changes` allow:
    /// neither blocking nor counted as fixed.
    Removed,
    /// Fails on both.
    PreExisting,
    /// Fails on the base, and the result's runs show it passing.
    Fixed,
}

impl Class {
    pub(super) const ALL: [Class; 8] = [
        Class::NoResult,
        Class::Introduced,
        Class::NoLongerRuns,
        Class::Flaky,
        Class::Quarantined,
        Class::Removed,
        Class::PreExisting,
        Class::Fixed,
    ];

    pub(super) fn title(self) -> &'static str {
        match self {
            Class::NoResult => "Could not run",
            Class::Introduced => "Introduced failures",
            Class::NoLongerRuns => "No longer run",
            Class::Flaky => "Flaky",
            Class::Quarantined => "Quarantined",
            Class::Removed => "Removed as the contract allows",
            Class::PreExisting => "Pre-existing failures",
            Class::Fixed => "Fixed",
        }
    }

    pub(super) fn meaning(self) -> &'static str {
        match self {
            Class::NoResult => "could not start, or a limit ended them: no result either way",
            Class::Introduced => "pass or are absent on the base, fail now",
            Class::NoLongerRuns => {
                "failed on the base; the result's run does not report them and no run of \
                 them alone passed"
            }
            Class::Flaky => {
                "passed and failed in runs of the same tree; neither blocking nor counted as fixed"
            }
            Class::Quarantined => {
                "in the repository's `quarantine`; neither blocking nor counted as fixed"
            }
            Class::Removed => {
                "failed on the base and no longer run, as the contract's `test_changes` allow; \
                 neither blocking nor counted as fixed"
            }
            Class::PreExisting => "fail on the base too",
            Class::Fixed => "failed on the base, seen passing now",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Class::NoResult => "could not run",
            Class::Introduced => "introduced",
            Class::NoLongerRuns => "no longer run",
            Class::Flaky => "flaky",
            Class::Quarantined => "quarantined",
            Class::Removed => "removed",
            Class::PreExisting => "pre-existing",
            Class::Fixed => "fixed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassifiedFailure {
    pub class: Class,
    pub command: String,
    /// The test's id as its runner prints it; `None` when the command as a whole is what
    /// failed (its output named no test).
    pub test: Option<String>,
    pub message: String,
    pub location: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCounts {
    /// Absent from reports kept before it was counted.
    #[serde(default)]
    pub no_result: u64,
    pub introduced: u64,
    /// Absent from reports kept before a fix had to be seen passing.
    #[serde(default)]
    pub no_longer_runs: u64,
    pub flaky: u64,
    /// Absent from reports kept before quarantines.
    #[serde(default)]
    pub quarantined: u64,
    /// Absent from reports kept before removals were declared.
    #[serde(default)]
    pub removed: u64,
    pub pre_existing: u64,
    pub fixed: u64,
}

impl ClassCounts {
    pub(super) fn get(&self, class: Class) -> u64 {
        match class {
            Class::NoResult => self.no_result,
            Class::Introduced => self.introduced,
            Class::NoLongerRuns => self.no_longer_runs,
            Class::Flaky => self.flaky,
            Class::Quarantined => self.quarantined,
            Class::Removed => self.removed,
            Class::PreExisting => self.pre_existing,
            Class::Fixed => self.fixed,
        }
    }

    pub(super) fn add(&mut self, class: Class) {
        match class {
            Class::NoResult => self.no_result += 1,
            Class::Introduced => self.introduced += 1,
            Class::NoLongerRuns => self.no_longer_runs += 1,
            Class::Flaky => self.flaky += 1,
            Class::Quarantined => self.quarantined += 1,
            Class::Removed => self.removed += 1,
            Class::PreExisting => self.pre_existing += 1,
            Class::Fixed => self.fixed += 1,
        }
    }
}

/// Everything known of one command: its runs on both trees, each with the re-runs of its
/// failing tests, and what the repository and the contract say about its tests.
pub(super) struct Runs<'a> {
    pub base: Option<&'a CommandRun>,
    pub base_reruns: Vec<&'a CommandRun>,
    pub after: &'a CommandRun,
    pub reruns: Vec<&'a CommandRun>,
    pub quarantine: &'a [String],
    /// The contract names new tests, so every test runner has tests to run.
    pub expects_tests: bool,
    /// Tests the contract's `test_changes` allow removing.
    pub removable: &'a [String],
}

/// Compares one command's runs with nothing quarantined or expected; `rerun` is a second
/// run of the result.
#[cfg(test)]
pub(super) fn classify(
    base: Option<&CommandRun>,
    after: &CommandRun,
    rerun: Option<&CommandRun>,
) -> Vec<ClassifiedFailure> {
    classify_runs(&Runs {
        base,
        base_reruns: Vec::new(),
        after,
        reruns: rerun.into_iter().collect(),
        quarantine: &[],
        expects_tests: false,
        removable: &[],
    })
}

/// Why `after` fails for running no tests: its runner's output says it ran none while
/// the contract expects tests or the base ran some with the same command.
pub(super) fn ran_nothing(runs: &Runs) -> Option<String> {
    let after = runs.after;
    let nothing = after.phase == Phase::Check
        && after.summary.recognised()
        && after.summary.no_result.is_none()
        && after.tests_counted() == 0
        && after.failures.is_empty()
        // A build that failed is its own account of why nothing ran.
        && after.build_errors.is_empty()
        && after.summary.errors == 0;
    if !nothing {
        return None;
    }
    let base_ran = runs.base.map_or(0, CommandRun::tests_counted);
    let expected = if base_ran > 0 {
        format!("the base ran {base_ran} with it")
    } else if runs.expects_tests {
        "the contract expects new tests".to_owned()
    } else {
        return None;
    };
    Some(format!(
        "`{}` ran no tests ({} found none); {expected}",
        after.command, after.summary.runner
    ))
}

/// Compares one command's runs: per test when the output names tests, by exit code when
/// it does not.
pub(super) fn classify_runs(runs: &Runs) -> Vec<ClassifiedFailure> {
    let mut comparison = Comparison::new(runs);
    comparison.failed_on_result();
    comparison.failed_on_whole_rerun();
    comparison.absent_from_result();
    comparison.by_exit_code();
    comparison.out
}

/// One command's runs being classified: what the base's runs say, asked once, and the
/// failures classified so far.
struct Comparison<'r> {
    runs: &'r Runs<'r>,
    base_ids: HashSet<&'r str>,
    base_failed: bool,
    /// Failed on the base, then passed on one of its re-runs.
    base_flaky: HashSet<&'r str>,
    /// The base failed naming no test, then passed on a re-run.
    base_whole_flaky: bool,
    after_ids: HashSet<&'r str>,
    /// Tests already classified from the result's run or a re-run of it.
    seen: HashSet<&'r str>,
    out: Vec<ClassifiedFailure>,
}

impl<'r> Comparison<'r> {
    fn new(runs: &'r Runs<'r>) -> Self {
        let base = runs.base;
        let base_ids = base.map(CommandRun::failing_ids).unwrap_or_default();
        let base_failed = base.is_some_and(|b| !b.summary.succeeded());
        let base_flaky: HashSet<&str> = base_ids
            .iter()
            .copied()
            .filter(|id| runs.base_reruns.iter().any(|r| r.passed(id)))
            .collect();
        let base_whole_flaky = base_failed
            && base_ids.is_empty()
            && runs.base_reruns.iter().any(|r| r.summary.succeeded());
        Comparison {
            runs,
            base_ids,
            base_failed,
            base_flaky,
            base_whole_flaky,
            after_ids: runs.after.failing_ids(),
            seen: HashSet::new(),
            out: Vec::new(),
        }
    }

    fn push(&mut self, class: Class, test: Option<&str>, message: String, location: Option<&str>) {
        self.out.push(ClassifiedFailure {
            class,
            command: self.runs.after.command.clone(),
            test: test.map(str::to_owned),
            message: clip(message.trim(), MESSAGE_CHARS),
            location: location.map(str::to_owned),
        })
    }

    fn quarantined(&self, id: &str) -> bool {
        self.runs.quarantine.iter().any(|q| q == id)
    }

    /// Each test failing in the result's run: quarantined, flaky, failing on the base
    /// already, or introduced.
    fn failed_on_result(&mut self) {
        let runs = self.runs;
        for f in &runs.after.failures {
            if !self.seen.insert(f.id.as_str()) {
                continue;
            }
            let class = if self.quarantined(&f.id) {
                Class::Quarantined
            } else if self.base_flaky.contains(f.id.as_str()) {
                Class::Flaky
            } else if self.base_ids.contains(f.id.as_str()) {
                Class::PreExisting
            } else if runs.reruns.iter().any(|r| r.passed(&f.id)) {
                Class::Flaky
            } else {
                Class::Introduced
            };
            self.push(class, Some(&f.id), f.message.clone(), f.location.as_deref());
        }
    }

    /// Passed the first time, failed on a re-run of the whole command: flaky the other way
    /// round (a re-run of selected tests runs none that passed).
    fn failed_on_whole_rerun(&mut self) {
        let runs = self.runs;
        for rerun in runs.reruns.iter().filter(|r| r.selected.is_none()) {
            for f in &rerun.failures {
                if !self.after_ids.contains(f.id.as_str())
                    && !self.base_ids.contains(f.id.as_str())
                    && self.seen.insert(f.id.as_str())
                {
                    let class = if self.quarantined(&f.id) {
                        Class::Quarantined
                    } else {
                        Class::Flaky
                    };
                    self.push(class, Some(&f.id), f.message.clone(), f.location.as_deref());
                }
            }
        }
    }

    /// Each test failing on the base that the result's run does not report failing:
    /// fixed only when seen passing.
    fn absent_from_result(&mut self) {
        let runs = self.runs;
        let Some(base) = runs.base else {
            return;
        };
        if !runs.after.ran_tests() {
            return;
        }
        let mut fixed = HashSet::new();
        for f in &base.failures {
            if !self.after_ids.contains(f.id.as_str()) && fixed.insert(f.id.as_str()) {
                let (class, message) = self.absent_class(f);
                self.push(class, Some(&f.id), message, f.location.as_deref());
            }
        }
    }

    /// What became of a base failure absent from the result's run, and the message that
    /// says so.
    fn absent_class(&self, f: &Failure) -> (Class, String) {
        let (runs, after) = (self.runs, self.runs.after);
        let confirmations = || runs.reruns.iter().filter(|r| r.confirms);
        if self.quarantined(&f.id) {
            (Class::Quarantined, f.message.clone())
        } else if self.base_flaky.contains(f.id.as_str()) {
            (Class::Flaky, f.message.clone())
        } else if after.named_passing(&f.id) || confirmations().any(|r| r.passed(&f.id)) {
            (Class::Fixed, f.message.clone())
        } else if runs
            .removable
            .iter()
            .any(|entry| test_matches(entry, &f.id, f.location.as_deref()))
        {
            (
                Class::Removed,
                format!(
                    "no longer in the result's run of `{}`; the contract allows removing it",
                    after.command
                ),
            )
        } else if let Some(r) = confirmations().find(|r| r.failed_when_selected(&f.id)) {
            let now = r.failures.iter().find(|x| x.id == f.id);
            (
                Class::NoLongerRuns,
                format!(
                    "absent from the result's run of `{}`, and still failing when run \
                     alone: {}",
                    after.command,
                    now.map_or(f.message.as_str(), |x| x.message.as_str())
                ),
            )
        } else {
            let alone = if confirmations().any(|r| r.ids.contains(&f.id)) {
                "a run of it alone did not show it passing"
            } else {
                "the runner could not run it alone"
            };
            (
                Class::NoLongerRuns,
                format!(
                    "absent from the result's run of `{}`, and not seen passing: {alone}",
                    after.command
                ),
            )
        }
    }

    /// The command as a whole: running nothing, or failing or passing with no test named.
    fn by_exit_code(&mut self) {
        let (runs, base, after) = (self.runs, self.runs.base, self.runs.after);
        if let Some(why) = ran_nothing(runs) {
            // Passing (or failing) by running nothing: the tests were deleted, are no longer
            // found, or the new ones were never written where the runner looks.
            self.push(Class::Introduced, None, why, None);
        } else if !after.summary.succeeded() && self.after_ids.is_empty() {
            // Without test ids, the exit code is all there is, unless the run is no result at
            // all: a base that could not run either does not make it "pre-existing".
            let base_judged = base.is_some_and(|b| b.summary.no_result.is_none());
            let class = if after.summary.no_result.is_some() {
                Class::NoResult
            } else if self.base_failed && self.base_ids.is_empty() && base_judged {
                if self.base_whole_flaky {
                    Class::Flaky
                } else {
                    Class::PreExisting
                }
            } else if runs.reruns.iter().any(|r| r.summary.succeeded()) {
                Class::Flaky
            } else {
                Class::Introduced
            };
            let message = match &after.summary.no_result {
                Some(why) => format!("{why}: {}", after.failure_message()),
                None => after.failure_message(),
            };
            self.push(class, None, message, None);
        } else if after.summary.succeeded()
            && self.base_failed
            && self.base_ids.is_empty()
            && let Some(base) = base
        {
            let class = if self.base_whole_flaky {
                Class::Flaky
            } else {
                Class::Fixed
            };
            self.push(class, None, base.failure_message(), None);
        }
    }
}
