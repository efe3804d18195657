//! Test by test, what the result did: a failure introduced, one already there, one
//! fixed, or one that flips between runs (flaky).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::MESSAGE_CHARS;
use super::run::CommandRun;

use crate::distill::clip;

/// How a failure compares between the base and the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The result's run of the command says nothing about its tests (see
    /// `RunSummary::no_result`): blocking, as an introduced failure is.
    NoResult,
    /// Passes (or is absent) on the base, fails on the result.
    Introduced,
    /// Failed on one run of the result and passed on the other: not counted as introduced.
    Flaky,
    /// Fails on both.
    PreExisting,
    /// Fails on the base, passes on the result.
    Fixed,
}

impl Class {
    pub(super) const ALL: [Class; 5] = [
        Class::NoResult,
        Class::Introduced,
        Class::Flaky,
        Class::PreExisting,
        Class::Fixed,
    ];

    pub(super) fn title(self) -> &'static str {
        match self {
            Class::NoResult => "Could not run",
            Class::Introduced => "Introduced failures",
            Class::Flaky => "Flaky",
            Class::PreExisting => "Pre-existing failures",
            Class::Fixed => "Fixed",
        }
    }

    pub(super) fn meaning(self) -> &'static str {
        match self {
            Class::NoResult => "could not start, or a limit ended them: no result either way",
            Class::Introduced => "pass or are absent on the base, fail now",
            Class::Flaky => "failed, then passed on a re-run; not counted as introduced",
            Class::PreExisting => "fail on the base too",
            Class::Fixed => "failed on the base, pass now",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Class::NoResult => "could not run",
            Class::Introduced => "introduced",
            Class::Flaky => "flaky",
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
    pub flaky: u64,
    pub pre_existing: u64,
    pub fixed: u64,
}

impl ClassCounts {
    pub(super) fn get(&self, class: Class) -> u64 {
        match class {
            Class::NoResult => self.no_result,
            Class::Introduced => self.introduced,
            Class::Flaky => self.flaky,
            Class::PreExisting => self.pre_existing,
            Class::Fixed => self.fixed,
        }
    }

    pub(super) fn add(&mut self, class: Class) {
        match class {
            Class::NoResult => self.no_result += 1,
            Class::Introduced => self.introduced += 1,
            Class::Flaky => self.flaky += 1,
            Class::PreExisting => self.pre_existing += 1,
            Class::Fixed => self.fixed += 1,
        }
    }
}

/// Compares one command's runs: per test when the output names tests, by exit code when
/// it does not. `rerun` is the second run of the result, when there was one.
pub(super) fn classify(
    base: Option<&CommandRun>,
    after: &CommandRun,
    rerun: Option<&CommandRun>,
) -> Vec<ClassifiedFailure> {
    let mut out = Vec::new();
    let mut push = |class: Class, test: Option<&str>, message: String, location: Option<&str>| {
        out.push(ClassifiedFailure {
            class,
            command: after.command.clone(),
            test: test.map(str::to_owned),
            message: clip(message.trim(), MESSAGE_CHARS),
            location: location.map(str::to_owned),
        })
    };
    let base_ids = base.map(CommandRun::failing_ids).unwrap_or_default();
    let base_failed = base.is_some_and(|b| !b.summary.succeeded());
    let after_ids = after.failing_ids();

    let mut seen = HashSet::new();
    for f in &after.failures {
        if !seen.insert(f.id.as_str()) {
            continue;
        }
        let class = if base_ids.contains(f.id.as_str()) {
            Class::PreExisting
        } else if rerun.is_some_and(|r| r.passed(&f.id)) {
            Class::Flaky
        } else {
            Class::Introduced
        };
        push(class, Some(&f.id), f.message.clone(), f.location.as_deref());
    }
    if let Some(rerun) = rerun {
        // Passed the first time, failed on the re-run: flaky the other way round.
        for f in &rerun.failures {
            if !after_ids.contains(f.id.as_str())
                && !base_ids.contains(f.id.as_str())
                && seen.insert(f.id.as_str())
            {
                push(
                    Class::Flaky,
                    Some(&f.id),
                    f.message.clone(),
                    f.location.as_deref(),
                );
            }
        }
    }
    if let Some(base) = base
        && after.ran_tests()
    {
        let mut fixed = HashSet::new();
        for f in &base.failures {
            if !after_ids.contains(f.id.as_str()) && fixed.insert(f.id.as_str()) {
                push(
                    Class::Fixed,
                    Some(&f.id),
                    f.message.clone(),
                    f.location.as_deref(),
                );
            }
        }
    }

    // Without test ids, the exit code is all there is, unless the run is no result at
    // all: a base that could not run either does not make it "pre-existing".
    if !after.summary.succeeded() && after_ids.is_empty() {
        let base_judged = base.is_some_and(|b| b.summary.no_result.is_none());
        let class = if after.summary.no_result.is_some() {
            Class::NoResult
        } else if base_failed && base_ids.is_empty() && base_judged {
            Class::PreExisting
        } else if rerun.is_some_and(|r| r.summary.succeeded()) {
            Class::Flaky
        } else {
            Class::Introduced
        };
        let message = match &after.summary.no_result {
            Some(why) => format!("{why}: {}", after.failure_message()),
            None => after.failure_message(),
        };
        push(class, None, message, None);
    } else if let Some(base) = base
        && after.summary.succeeded()
        && after.tests_counted() == 0
        && base.tests_counted() > 0
    {
        // Passing by running nothing: the tests were deleted or are no longer found.
        push(
            Class::Introduced,
            None,
            format!(
                "ran no tests; the base ran {}",
                base.summary.passed + base.summary.failed
            ),
            None,
        );
    } else if after.summary.succeeded()
        && base_failed
        && base_ids.is_empty()
        && let Some(base) = base
    {
        push(Class::Fixed, None, base.failure_message(), None);
    }
    out
}
