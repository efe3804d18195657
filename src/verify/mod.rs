//! Verification: planwright runs the checks itself, in the sandbox, on the base commit and on
//! the result, and compares them test by test (introduced, pre-existing, fixed, flaky); it
//! also checks the result's files against the contract's scope. What an executor claims
//! never enters: the [`VerificationReport`] comes from the runs alone.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};
use serde::{Deserialize, Serialize};

use crate::config::repo::{RepoConfig, candidate_paths};
use crate::contract::{Contract, FileAction};
use crate::distill::{self, Failure, TestReport, clip};
use crate::forge::{GITHUB_TEXT_LIMIT, truncate_with_note};
use crate::git::{Change as FileChange, ChangedFile, Workspace, WorkspaceError};
use crate::repo_tools::glob_matches;
use crate::sandbox::egress::{Allowlist, EgressProxy};
use crate::sandbox::{Exit, Limits, Output, Sandbox, SandboxError};

/// Failures of one class kept in a report (the counts go on past it).
const LISTED_PER_CLASS: usize = 50;
/// Characters kept of a failure's message in a report.
const MESSAGE_CHARS: usize = 1_000;
/// Characters of the generic output summary kept per run.
const EXCERPT_CHARS: usize = 4_000;
/// Scope findings kept in a report.
const MAX_FINDINGS: usize = 200;
/// Failures per class the reviewer's text shows with their message; the rest by id only.
const COMPACT_DETAILED: usize = 12;
const COMPACT_LISTED: usize = 60;

/// Failures a caller branches on: no sandbox is the operator's to fix, a broken workspace
/// is the run's; the rest is internal.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// What verification runs, from the contract and the repository's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The repository's `setup` commands: the only ones with network, through the egress
    /// proxy and `network_allow`.
    pub setup: Vec<String>,
    /// The contract's verification commands, then the repository's `test` commands, each
    /// once.
    pub checks: Vec<String>,
    pub network_allow: Vec<String>,
    /// Globs no result may touch: the repository's `protected_paths` and planwright's own
    /// settings files, which are protected whatever `protected_paths` says.
    pub protected: Vec<String>,
}

impl Plan {
    pub fn new(contract: &Contract, config: &RepoConfig) -> Plan {
        let mut checks: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for command in contract
            .verification
            .commands
            .iter()
            .chain(config.test.iter())
        {
            // Commands that differ only in spacing run the same thing.
            let key = command.split_whitespace().collect::<Vec<_>>().join(" ");
            if !key.is_empty() && seen.insert(key) {
                checks.push(command.trim().to_owned());
            }
        }
        let mut protected = config.protected_paths.clone();
        for path in candidate_paths(None) {
            if !protected.iter().any(|p| p == path) {
                protected.push((*path).to_owned());
            }
        }
        Plan {
            setup: config
                .setup
                .iter()
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect(),
            checks,
            network_allow: config.network_allow.clone(),
            protected,
        }
    }
}

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
}

impl RunSummary {
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    fn recognised(&self) -> bool {
        self.runner != distill::Format::Generic.runner()
    }

    fn ending(&self) -> String {
        if self.timed_out {
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
}

impl CommandRun {
    fn failing_ids(&self) -> HashSet<&str> {
        self.failures.iter().map(|f| f.id.as_str()).collect()
    }

    /// Tests ran at all: a failed build, a crash before the first test or a run that
    /// found no tests says nothing about whether a test that failed before passes now.
    fn ran_tests(&self) -> bool {
        !self.failures.is_empty() || self.summary.passed > 0
    }

    fn tests_counted(&self) -> u64 {
        self.summary.passed + self.summary.failed + self.summary.skipped
    }

    /// `id` passed in this run (a re-run): tests ran, to the end, and the list of failures
    /// is whole and does not hold it.
    fn passed(&self, id: &str) -> bool {
        self.ran_tests()
            && !self.summary.timed_out
            && self.failures.len() < distill::MAX_FAILURES
            && !self.failures.iter().any(|f| f.id == id)
    }

    /// What to say when the command as a whole failed.
    fn failure_message(&self) -> String {
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
}

impl RunSet {
    fn find(&self, phase: Phase, command: &str) -> Option<&CommandRun> {
        self.runs
            .iter()
            .find(|r| r.phase == phase && r.command == command)
    }
}

/// How a failure compares between the base and the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
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
    const ALL: [Class; 4] = [
        Class::Introduced,
        Class::Flaky,
        Class::PreExisting,
        Class::Fixed,
    ];

    fn title(self) -> &'static str {
        match self {
            Class::Introduced => "Introduced failures",
            Class::Flaky => "Flaky",
            Class::PreExisting => "Pre-existing failures",
            Class::Fixed => "Fixed",
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            Class::Introduced => "pass or are absent on the base, fail now",
            Class::Flaky => "failed, then passed on a re-run; not counted as introduced",
            Class::PreExisting => "fail on the base too",
            Class::Fixed => "failed on the base, pass now",
        }
    }

    fn label(self) -> &'static str {
        match self {
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
    pub introduced: u64,
    pub flaky: u64,
    pub pre_existing: u64,
    pub fixed: u64,
}

impl ClassCounts {
    fn get(&self, class: Class) -> u64 {
        match class {
            Class::Introduced => self.introduced,
            Class::Flaky => self.flaky,
            Class::PreExisting => self.pre_existing,
            Class::Fixed => self.fixed,
        }
    }

    fn add(&mut self, class: Class) {
        match class {
            Class::Introduced => self.introduced += 1,
            Class::Flaky => self.flaky += 1,
            Class::PreExisting => self.pre_existing += 1,
            Class::Fixed => self.fixed += 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Outside what the contract declared: a reviewer looks at it.
    Flagged,
    /// Never accepted: the result is refused.
    Refused,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeFinding {
    pub path: String,
    /// `added`, `modified`, `deleted` or `type changed`.
    pub change: String,
    pub severity: Severity,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing introduced and nothing refused.
    Passed,
    /// A failure was introduced.
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
    /// The re-run that tells an introduced failure from a flaky one.
    pub rerun: Option<RunSummary>,
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
}

/// Runs verification in the sandbox. `scratch` holds the setup phase's egress sockets and
/// output beyond the in-memory cap; the sandbox's host user must be able to reach it.
#[derive(Clone)]
pub struct Verifier {
    sandbox: Arc<dyn Sandbox>,
    scratch: PathBuf,
    limits: Limits,
}

impl Verifier {
    pub fn new(sandbox: Arc<dyn Sandbox>, scratch: impl Into<PathBuf>) -> Self {
        Verifier {
            sandbox,
            scratch: scratch.into(),
            limits: Limits::default(),
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Runs the plan on a checkout of the base commit. It needs no result, so it can run
    /// while the executor works in its own workspace.
    pub async fn baseline(
        &self,
        plan: &Plan,
        workspace: &Workspace,
        run: &str,
    ) -> Result<RunSet, VerifyError> {
        self.run_plan(plan, workspace, &format!("{run}-baseline"))
            .await
    }

    /// Verifies the result left in `workspace` against `baseline`: the scope of its
    /// changes, then the plan's commands, re-running once each command with an introduced
    /// failure.
    pub async fn verify(
        &self,
        plan: &Plan,
        contract: &Contract,
        baseline: &RunSet,
        workspace: &Workspace,
        run: &str,
    ) -> Result<VerificationReport, VerifyError> {
        // Read before anything runs: what the checks write (caches, bytecode) is not the
        // result's.
        let changed = workspace.changed_files().await?;
        let links = links_in(&workspace.repo(), &changed);
        let scope = check_scope(contract, &plan.protected, &changed, &links, baseline);
        let after = self
            .run_plan(plan, workspace, &format!("{run}-after"))
            .await?;
        let mut reruns = Vec::new();
        for (i, run_after) in after.runs.iter().enumerate() {
            if run_after.phase != Phase::Check {
                continue;
            }
            let base = baseline.find(run_after.phase, &run_after.command);
            if classify(base, run_after, None)
                .iter()
                .any(|f| f.class == Class::Introduced)
            {
                let spill = self.scratch.join(format!("{}-rerun-{i}", safe_name(run)));
                reruns.push(
                    self.run_one(workspace, &run_after.command, Phase::Check, None, spill)
                        .await?,
                );
            }
        }
        Ok(VerificationReport::compare(
            baseline, &after, &reruns, scope,
        ))
    }

    async fn run_plan(
        &self,
        plan: &Plan,
        workspace: &Workspace,
        run: &str,
    ) -> Result<RunSet, VerifyError> {
        let name = safe_name(run);
        std::fs::create_dir_all(&self.scratch)
            .with_context(|| format!("Could not create {}", self.scratch.display()))?;
        let mut runs = Vec::new();
        if !plan.setup.is_empty() {
            let allowlist = Allowlist::parse(&plan.network_allow)
                .context("Cannot use the repository's network_allow for the setup commands")?;
            let id = uuid::Uuid::new_v4().simple().to_string();
            let socket = self.scratch.join(format!("egress-{}.sock", &id[..12]));
            let proxy = EgressProxy::start(&socket, allowlist, run)
                .await
                .context("Could not start the setup phase's egress proxy")?;
            for (i, command) in plan.setup.iter().enumerate() {
                let spill = self.scratch.join(format!("{name}-setup-{i}"));
                runs.push(
                    self.run_one(
                        workspace,
                        command,
                        Phase::Setup,
                        Some(proxy.socket()),
                        spill,
                    )
                    .await?,
                );
            }
        }
        for (i, command) in plan.checks.iter().enumerate() {
            let spill = self.scratch.join(format!("{name}-check-{i}"));
            runs.push(
                self.run_one(workspace, command, Phase::Check, None, spill)
                    .await?,
            );
        }
        Ok(RunSet { runs })
    }

    async fn run_one(
        &self,
        workspace: &Workspace,
        command: &str,
        phase: Phase,
        egress: Option<&Path>,
        spill_dir: PathBuf,
    ) -> Result<CommandRun, VerifyError> {
        let mut cmd = workspace.command(vec!["sh".into(), "-c".into(), command.to_owned()]);
        cmd.limits = self.limits;
        cmd.spill_dir = Some(spill_dir);
        if let Some(socket) = egress {
            cmd.bridge_egress_proxy(socket);
        }
        let output = self.sandbox.run(&cmd).await?;
        let hint = command.to_owned();
        let (stdout, stderr) = (output.stdout.clone(), output.stderr.clone());
        let report = tokio::task::spawn_blocking(move || -> anyhow::Result<TestReport> {
            let text = |c: &crate::sandbox::Captured| -> anyhow::Result<Box<dyn Read + Send>> {
                Ok(match &c.spilled {
                    Some(path) => Box::new(
                        std::fs::File::open(path)
                            .with_context(|| format!("Could not read {}", path.display()))?,
                    ),
                    None => Box::new(std::io::Cursor::new(c.bytes.clone())),
                })
            };
            let input = text(&stdout)?
                .chain(std::io::Cursor::new(b"\n".to_vec()))
                .chain(text(&stderr)?);
            distill::distill(input, None, Some(&hint))
                .context("Could not read the command's output")
        })
        .await
        .map_err(|e| anyhow!("The distilling task failed: {e}"))??;
        let mut prefixes = vec![format!("{}/", workspace.repo().display())];
        if let Ok(real) = workspace.repo().canonicalize() {
            prefixes.push(format!("{}/", real.display()));
        }
        Ok(command_run(command, phase, &output, report, &prefixes))
    }
}

/// Keeps a run's name usable in file names.
fn safe_name(run: &str) -> String {
    run.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect()
}

fn command_run(
    command: &str,
    phase: Phase,
    output: &Output,
    report: TestReport,
    workspace_prefixes: &[String],
) -> CommandRun {
    let relative = |text: &str| {
        workspace_prefixes
            .iter()
            .fold(text.to_owned(), |t, prefix| t.replace(prefix.as_str(), ""))
    };
    let (exit_code, signal) = match output.exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    CommandRun {
        command: command.to_owned(),
        phase,
        summary: RunSummary {
            exit_code,
            signal,
            timed_out: output.timed_out,
            duration_ms: u64::try_from(output.duration.as_millis()).unwrap_or(u64::MAX),
            runner: report.runner.clone(),
            passed: report.passed,
            failed: report.failed,
            skipped: report.skipped,
            errors: report.errors,
        },
        failures: report
            .failures
            .iter()
            .map(|f| Failure {
                id: f.id.clone(),
                message: relative(&f.message),
                location: f.location.as_deref().map(relative),
            })
            .collect(),
        build_errors: report
            .build_errors
            .iter()
            .map(|p| distill::Problem {
                message: relative(&p.message),
                location: p.location.as_deref().map(relative),
            })
            .collect(),
        excerpt: clip(&relative(&report.excerpt), EXCERPT_CHARS),
    }
}

/// The last `lines` non-empty lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

/// Compares one command's runs: per test when the output names tests, by exit code when
/// it does not. `rerun` is the second run of the result, when there was one.
fn classify(
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

    // Without test ids, the exit code is all there is.
    if !after.summary.succeeded() && after_ids.is_empty() {
        let class = if base_failed && base_ids.is_empty() {
            Class::PreExisting
        } else if rerun.is_some_and(|r| r.summary.succeeded()) {
            Class::Flaky
        } else {
            Class::Introduced
        };
        push(class, None, after.failure_message(), None);
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

impl VerificationReport {
    /// Builds the report from the runs (also from stored ones).
    pub fn compare(
        baseline: &RunSet,
        after: &RunSet,
        reruns: &[CommandRun],
        mut scope: Vec<ScopeFinding>,
    ) -> VerificationReport {
        let mut commands = Vec::new();
        let mut counts = ClassCounts::default();
        let mut all = Vec::new();
        for run in &after.runs {
            let base = baseline.find(run.phase, &run.command);
            let rerun = reruns
                .iter()
                .find(|r| r.phase == run.phase && r.command == run.command);
            // Setup commands are not re-run: they change the workspace.
            let rerun = rerun.filter(|_| run.phase == Phase::Check);
            for failure in classify(base, run, rerun) {
                counts.add(failure.class);
                all.push(failure);
            }
            commands.push(CommandComparison {
                command: run.command.clone(),
                phase: run.phase,
                baseline: base.map(|b| b.summary.clone()),
                after: run.summary.clone(),
                rerun: rerun.map(|r| r.summary.clone()),
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
        } else if counts.introduced > 0 {
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
        }
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
        if refused > 0 {
            parts.insert(0, format!("{refused} refused path(s)"));
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
            let base = c.baseline.as_ref().map_or_else(|| "—".to_owned(), cell);
            let after = after_cell(c);
            let _ = writeln!(out, "| {name} | {base} | {after} |");
        }
        let flaky: Vec<String> = self
            .failures
            .iter()
            .filter(|f| f.class == Class::Flaky)
            .map(|f| code(f.test.as_deref().unwrap_or(&f.command)))
            .collect();
        if !flaky.is_empty() {
            let _ = writeln!(
                out,
                "\nFlaky: {} failed on one run and passed on a re-run; not counted as \
                 introduced.",
                flaky.join(", ")
            );
        }
        out
    }

    /// The listed failures of one class.
    fn of_class(&self, class: Class) -> impl Iterator<Item = &ClassifiedFailure> {
        self.failures.iter().filter(move |f| f.class == class)
    }

    /// The longer account for a check run: the table, every listed failure with its
    /// message and location, and the scope findings; cut to what GitHub accepts.
    pub fn check_markdown(&self) -> String {
        let mut out = self.pr_markdown();
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
                    let ticks = fence(&f.message);
                    let _ = writeln!(
                        out,
                        "\n  {ticks}text\n  {}\n  {ticks}\n",
                        f.message.replace('\n', "\n  ")
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
    pub fn for_publication(&self) -> crate::publish::VerificationReport {
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
                    baseline: c.baseline.as_ref().map(cell),
                    after,
                }
            })
            .collect();
        let mut failing = String::new();
        for class in [Class::Introduced, Class::PreExisting] {
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
        crate::publish::VerificationReport {
            rows,
            failing: failing.trim_end().to_owned(),
            details: self.check_markdown(),
        }
    }

    /// Plain text for the reviewer model: the verdict, each command's two runs, the
    /// classified failures (the first of each class with their messages) and the scope.
    pub fn compact(&self) -> String {
        let mut out = format!("{}\n", self.headline());
        if !self.commands.is_empty() {
            out.push_str("commands:\n");
        }
        for c in &self.commands {
            let phase = match c.phase {
                Phase::Setup => "setup ",
                Phase::Check => "",
            };
            let base = c
                .baseline
                .as_ref()
                .map_or_else(|| "not run".to_owned(), plain);
            let _ = write!(
                out,
                "- {phase}`{}`: baseline {base}; after {}",
                c.command,
                plain(&c.after)
            );
            if let Some(rerun) = &c.rerun {
                let _ = write!(out, "; re-run {}", plain(rerun));
            }
            out.push('\n');
        }
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
    parts.join(", ")
}

/// The "after" cell of a command: its run on the result, and the re-run when there was one.
fn after_cell(c: &CommandComparison) -> String {
    let mut after = cell(&c.after);
    if let Some(rerun) = &c.rerun {
        let _ = write!(after, "; re-run: {}", cell(rerun));
    }
    after
}

/// A table cell: a mark, the counts when a runner was recognised, how it ended, how long.
fn cell(s: &RunSummary) -> String {
    let mark = if s.succeeded() {
        "✅"
    } else if s.timed_out {
        "⏱️"
    } else {
        "❌"
    };
    let counts = counts_text(s);
    let seconds = s.duration_ms as f64 / 1000.0;
    if counts.is_empty() {
        format!("{mark} {} · {seconds:.1} s", s.ending())
    } else {
        format!("{mark} {counts} · {} · {seconds:.1} s", s.ending())
    }
}

fn plain(s: &RunSummary) -> String {
    let counts = counts_text(s);
    if counts.is_empty() {
        s.ending()
    } else {
        format!("{} ({}: {counts})", s.ending(), s.runner)
    }
}

/// `text` as inline code that survives a table cell: pipes escaped, no line breaks, and
/// fenced by more backticks than it holds.
fn code(text: &str) -> String {
    let text = text.replace('\n', " ").replace('|', "\\|");
    let longest = longest_backtick_run(&text);
    let ticks = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn fence(text: &str) -> String {
    "`".repeat((longest_backtick_run(text) + 1).max(3))
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// A path under a test folder or named like a test file.
pub fn is_test_path(path: &str) -> bool {
    let path = normalise(path);
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    parts.iter().any(|d| *d == "tests" || *d == "test")
        || ["*_test.*", "test_*.*", "*.test.*", "*.spec.*"]
            .iter()
            .any(|p| glob_matches(p, name))
}

fn normalise(path: &str) -> String {
    path.trim()
        .trim_start_matches("./")
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// A `new_tests` entry names this file: it holds the path (`tests/test_x.py::test_y`),
/// its dotted module (`tests.test_x.TestY`), or is the file name or a glob matching it.
fn names_file(entry: &str, path: &str) -> bool {
    let entry = entry.trim();
    if entry.contains(path) {
        return true;
    }
    if let Some((stem, _)) = path.rsplit_once('.') {
        let dotted = stem.replace('/', ".");
        if dotted.len() >= 3 && entry.contains(&dotted) {
            return true;
        }
    }
    let first = entry
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default()
        .split("::")
        .next()
        .unwrap_or_default();
    let name = path.rsplit('/').next().unwrap_or(path);
    !first.is_empty() && (first == name || glob_matches(first, path))
}

fn change_name(change: FileChange) -> &'static str {
    match change {
        FileChange::Added => "added",
        FileChange::Modified => "modified",
        FileChange::Deleted => "deleted",
        FileChange::TypeChanged => "type changed",
    }
}

/// A changed path that is not a plain file or folder in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Pushed as a link, it shows readers and CI whatever its target holds.
    Symlink,
    /// A folder holding its own repository, committed as a gitlink: a pin to any commit
    /// of any repository.
    Gitlink,
}

impl Link {
    fn describe(self) -> &'static str {
        match self {
            Link::Symlink => "a symbolic link",
            Link::Gitlink => "a nested repository (a gitlink)",
        }
    }
}

/// The result's changed paths that are, or lie under, a symbolic link or a nested
/// repository, as the checkout holds them: what the result commit takes in.
pub fn links_in(repo: &Path, changed: &[ChangedFile]) -> HashMap<String, Link> {
    let mut links = HashMap::new();
    for file in changed {
        if file.change == FileChange::Deleted {
            continue;
        }
        let path = normalise(&file.path);
        let mut at = repo.to_path_buf();
        for part in path.split('/') {
            at.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                break;
            };
            let link = if meta.file_type().is_symlink() {
                Some(Link::Symlink)
            } else if meta.is_dir() && std::fs::symlink_metadata(at.join(".git")).is_ok() {
                Some(Link::Gitlink)
            } else {
                None
            };
            if let Some(link) = link {
                links.insert(path.clone(), link);
                break;
            }
        }
    }
    links
}

/// Files that CI services or build tools run on push, with the repository's secrets in
/// reach: a result may change one only when the approved contract names it, since a
/// change there runs before any maintainer reviews the pull request. A pattern without
/// `/` matches the file name in any folder.
pub const RUN_BY_CI: &[&str] = &[
    ".github/workflows/**",
    ".github/actions/**",
    "action.yml",
    "action.yaml",
    ".gitlab-ci.yml",
    ".gitlab/ci/**",
    ".circleci/**",
    ".buildkite/**",
    ".travis.yml",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    "Jenkinsfile",
    ".pre-commit-config.yaml",
    ".husky/**",
    "Makefile",
    "makefile",
    "GNUmakefile",
    "*.mk",
    "justfile",
    "Rakefile",
    "package.json",
    "build.rs",
    ".cargo/config",
    ".cargo/config.toml",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "conftest.py",
    "Cargo.toml",
    "Gemfile",
    "noxfile.py",
    "tox.ini",
    "build.gradle",
    "build.gradle.kts",
    "gradlew",
];

/// Checks the result's changed files against the contract: protected paths, files CI runs
/// that the contract does not name, and the deletion of a test the contract means to make
/// pass are refused; anything else outside the declared files and test files is flagged.
pub fn check_scope(
    contract: &Contract,
    protected: &[String],
    changed: &[ChangedFile],
    links: &HashMap<String, Link>,
    baseline: &RunSet,
) -> Vec<ScopeFinding> {
    let declared: Vec<(String, FileAction)> = contract
        .change
        .files
        .iter()
        .map(|f| (normalise(&f.path), f.action))
        .collect();
    // Files holding tests that fail on the base: the ones a fix is meant to turn green.
    let failing_files: HashSet<String> = baseline
        .runs
        .iter()
        .flat_map(|r| r.failures.iter())
        .filter_map(|f| f.location.as_deref())
        .filter_map(|l| l.split(':').next())
        .map(normalise)
        .collect();
    let evidence: HashSet<String> = contract
        .diagnosis
        .evidence
        .iter()
        .map(|e| normalise(&e.path))
        .collect();
    let names_test = |path: &str| {
        contract
            .verification
            .new_tests
            .iter()
            .any(|t| names_file(t, path))
    };

    let mut findings = Vec::new();
    for file in changed {
        let path = normalise(&file.path);
        let deleted = file.change == FileChange::Deleted;
        let mut finding = |severity: Severity, reason: String| {
            findings.push(ScopeFinding {
                path: path.clone(),
                change: change_name(file.change).to_owned(),
                severity,
                reason,
            })
        };
        if let Some(glob) = protected.iter().find(|g| glob_matches(g, &path)) {
            finding(Severity::Refused, format!("protected by `{glob}`"));
            continue;
        }
        let declaration = declared
            .iter()
            .find(|(d, _)| path == *d || path.starts_with(&format!("{d}/")))
            .map(|(_, action)| *action);
        if declaration.is_none()
            && let Some(glob) = RUN_BY_CI.iter().find(|g| glob_matches(g, &path))
        {
            finding(
                Severity::Refused,
                format!(
                    "CI runs files like `{glob}` on push; the contract must name the file to change it"
                ),
            );
            continue;
        }
        if declaration.is_none()
            && let Some(link) = links.get(&path)
        {
            finding(
                Severity::Refused,
                format!(
                    "{}; the contract must name the path to add one",
                    link.describe()
                ),
            );
            continue;
        }
        let test = is_test_path(&path) || names_test(&path);
        if deleted && test && declaration != Some(FileAction::Delete) {
            let targeted = declaration.is_some()
                || failing_files.contains(&path)
                || evidence.contains(&path)
                || names_test(&path);
            if targeted {
                finding(
                    Severity::Refused,
                    "a test file the contract is meant to make pass was deleted".into(),
                );
            } else {
                finding(
                    Severity::Flagged,
                    "a test file was deleted; the contract does not say to".into(),
                );
            }
            continue;
        }
        match declaration {
            Some(action) if deleted && action != FileAction::Delete => finding(
                Severity::Flagged,
                format!("deleted, but the contract says to {} it", action.as_str()),
            ),
            Some(_) => {}
            None if test => {}
            None => finding(Severity::Flagged, "not among the contract's files".into()),
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(exit: i32, runner: &str, passed: u64, failed: u64) -> RunSummary {
        RunSummary {
            exit_code: Some(exit),
            signal: None,
            timed_out: false,
            duration_ms: 120,
            runner: runner.into(),
            passed,
            failed,
            skipped: 0,
            errors: 0,
        }
    }

    fn run(command: &str, exit: i32, passed: u64, failing: &[&str]) -> CommandRun {
        CommandRun {
            command: command.into(),
            phase: Phase::Check,
            summary: summary(exit, "unittest", passed, failing.len() as u64),
            failures: failing
                .iter()
                .map(|id| Failure {
                    id: (*id).into(),
                    message: format!("AssertionError in {id}"),
                    location: Some("test_a.py:3".into()),
                })
                .collect(),
            build_errors: Vec::new(),
            excerpt: String::new(),
        }
    }

    fn generic(command: &str, exit: i32, excerpt: &str) -> CommandRun {
        CommandRun {
            command: command.into(),
            phase: Phase::Check,
            summary: summary(exit, "generic", 0, 0),
            failures: Vec::new(),
            build_errors: Vec::new(),
            excerpt: excerpt.into(),
        }
    }

    fn classes(found: &[ClassifiedFailure]) -> Vec<(Class, Option<&str>)> {
        let mut v: Vec<_> = found.iter().map(|f| (f.class, f.test.as_deref())).collect();
        v.sort_by_key(|(c, t)| (format!("{c:?}"), t.map(str::to_owned)));
        v
    }

    #[test]
    fn tests_compare_by_id() {
        let base = run("t", 1, 1, &["a", "b"]);
        let after = run("t", 1, 1, &["b", "c"]);
        assert_eq!(
            classes(&classify(Some(&base), &after, None)),
            vec![
                (Class::Fixed, Some("a")),
                (Class::Introduced, Some("c")),
                (Class::PreExisting, Some("b")),
            ]
        );
    }

    #[test]
    fn a_build_that_broke_fixes_nothing_and_is_introduced() {
        let base = run("t", 1, 3, &["a"]);
        let mut after = generic(
            "t",
            101,
            "error[E0308]: mismatched types\n --> src/lib.rs:3",
        );
        after.summary.runner = "cargo test".into();
        let found = classify(Some(&base), &after, None);
        assert_eq!(classes(&found), vec![(Class::Introduced, None)]);
        assert!(found[0].message.starts_with("exit 101:\n"), "{found:?}");
        assert!(found[0].message.contains("mismatched types"));
    }

    #[test]
    fn a_rerun_tells_flaky_from_introduced() {
        let base = run("t", 0, 2, &[]);
        let after = run("t", 1, 2, &["x", "y"]);
        let rerun = run("t", 1, 3, &["y", "z"]);
        assert_eq!(
            classes(&classify(Some(&base), &after, Some(&rerun))),
            vec![
                (Class::Flaky, Some("x")),
                (Class::Flaky, Some("z")),
                (Class::Introduced, Some("y")),
            ]
        );
        // A re-run that did not get to run tests proves nothing.
        let crashed = generic("t", 2, "Segmentation fault");
        assert_eq!(
            classes(&classify(Some(&base), &after, Some(&crashed))),
            vec![
                (Class::Introduced, Some("x")),
                (Class::Introduced, Some("y"))
            ]
        );
    }

    #[test]
    fn passing_by_running_no_tests_fixes_nothing() {
        let base = run("t", 1, 1, &["a"]);
        let after = run("t", 0, 0, &[]);
        let found = classify(Some(&base), &after, None);
        assert_eq!(classes(&found), vec![(Class::Introduced, None)]);
        assert_eq!(found[0].message, "ran no tests; the base ran 2");
    }

    #[test]
    fn without_ids_exit_codes_decide() {
        let ok = generic("lint", 0, "");
        let bad = generic("lint", 1, "src/a.py:3: E501 line too long");
        assert_eq!(
            classes(&classify(Some(&ok), &bad, None)),
            vec![(Class::Introduced, None)]
        );
        assert_eq!(
            classes(&classify(Some(&bad), &bad, None)),
            vec![(Class::PreExisting, None)]
        );
        assert_eq!(
            classes(&classify(Some(&bad), &ok, None)),
            vec![(Class::Fixed, None)]
        );
        assert_eq!(
            classes(&classify(None, &bad, None)),
            vec![(Class::Introduced, None)]
        );
        assert_eq!(
            classes(&classify(Some(&ok), &bad, Some(&ok))),
            vec![(Class::Flaky, None)]
        );
        assert!(classify(Some(&ok), &ok, None).is_empty());
    }

    #[test]
    fn reports_are_bounded_and_count_everything() {
        let ids: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut after = run("t", 1, 0, &refs);
        for f in &mut after.failures {
            f.message = "x".repeat(50_000);
        }
        let base = RunSet {
            runs: vec![run("t", 0, 300, &[])],
        };
        let after = RunSet { runs: vec![after] };
        let report = VerificationReport::compare(&base, &after, &[], Vec::new());
        assert_eq!(report.counts.introduced, 300);
        assert_eq!(report.failures.len(), LISTED_PER_CLASS);
        assert!(
            report
                .failures
                .iter()
                .all(|f| f.message.chars().count() <= MESSAGE_CHARS + 1)
        );
        assert_eq!(report.verdict, Verdict::Failed);
        let check = report.check_markdown();
        assert!(check.len() <= GITHUB_TEXT_LIMIT);
        assert!(check.contains("… and 250 more not listed."), "{check}");
        let compact = report.compact();
        assert!(compact.len() < 20_000, "{}", compact.len());
        assert!(compact.contains("- … 250 more"), "{compact}");
    }

    fn changed(path: &str, change: FileChange) -> ChangedFile {
        ChangedFile {
            path: path.into(),
            change,
        }
    }

    #[test]
    fn scope_follows_the_contract() {
        let contract = Contract::from_json(
            r#"{
              "summary": "s",
              "diagnosis": {"hypothesis": "h"},
              "change": {"goal": "g", "files": [
                {"path": "src/parse.rs", "action": "modify", "why": "w"},
                {"path": "src/old.rs", "action": "delete", "why": "w"},
                {"path": "tests/old_test.rs", "action": "delete", "why": "w"},
                {"path": "src/gen/", "action": "create", "why": "w"}
              ]},
              "verification": {"commands": ["cargo test"], "new_tests": ["checks/parse_empty.rs::empty"]},
              "routing": {"risk": "low"}
            }"#,
        )
        .unwrap();
        let baseline = RunSet {
            runs: vec![CommandRun {
                failures: vec![Failure {
                    id: "parse::empty".into(),
                    message: String::new(),
                    location: Some("tests/parse.rs:12:5".into()),
                }],
                ..run("cargo test", 101, 3, &[])
            }],
        };
        let protected = vec![
            ".github/workflows/**".to_owned(),
            ".planwright.yml".to_owned(),
        ];
        let files = [
            changed("src/parse.rs", FileChange::Modified),
            changed("src/old.rs", FileChange::Deleted),
            changed("tests/old_test.rs", FileChange::Deleted),
            changed("src/gen/table.rs", FileChange::Added),
            changed("tests/new.rs", FileChange::Added),
            changed("checks/parse_empty.rs", FileChange::Added),
            changed("src/lexer.rs", FileChange::Modified),
            changed(".github/workflows/ci.yml", FileChange::Modified),
            changed(".planwright.yml", FileChange::Modified),
            changed("tests/parse.rs", FileChange::Deleted),
            changed("tests/other.rs", FileChange::Deleted),
        ];
        let found: Vec<(&str, Severity)> =
            check_scope(&contract, &protected, &files, &HashMap::new(), &baseline)
                .iter()
                .map(|f| {
                    (
                        files
                            .iter()
                            .find(|c| c.path == f.path)
                            .unwrap()
                            .path
                            .as_str(),
                        f.severity,
                    )
                })
                .collect();
        assert_eq!(
            found,
            vec![
                ("src/lexer.rs", Severity::Flagged),
                (".github/workflows/ci.yml", Severity::Refused),
                (".planwright.yml", Severity::Refused),
                ("tests/parse.rs", Severity::Refused),
                ("tests/other.rs", Severity::Flagged),
            ]
        );
        let deleted_declared = check_scope(
            &contract,
            &protected,
            &[changed("src/parse.rs", FileChange::Deleted)],
            &HashMap::new(),
            &RunSet::default(),
        );
        assert_eq!(
            deleted_declared[0].reason,
            "deleted, but the contract says to modify it"
        );
    }

    #[test]
    fn code_spans_survive_tables() {
        assert_eq!(code("a | b"), "`a \\| b`");
        assert_eq!(code("echo `x`"), "`` echo `x` ``");
        assert_eq!(fence("```"), "````");
    }

    #[test]
    fn test_paths() {
        for p in [
            "tests/a.rs",
            "pkg/test/x.py",
            "a_test.go",
            "test_a.py",
            "src/a.test.ts",
            "src/a.spec.js",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in ["src/a.rs", "testing/x.py", "contest.py", "src/latest.rs"] {
            assert!(!is_test_path(p), "{p}");
        }
        assert!(names_file("tests/test_x.py::test_y", "tests/test_x.py"));
        assert!(names_file("tests.test_x.TestY.test_y", "tests/test_x.py"));
        assert!(names_file("spec/parser_spec.rb", "spec/parser_spec.rb"));
        assert!(!names_file("test_other", "spec/parser_spec.rb"));
    }
}
