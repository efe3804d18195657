//! Running the plan in the sandbox: the setup phase behind the egress allowlist, then
//! each command on the base and on the result, its output distilled into a test report,
//! and the failing tests of each re-run to tell flaky ones apart.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};

use super::classify::{Class, Runs, classify_runs, ran_nothing};
use super::judge::{Judging, Saved};
use super::plan::Plan;
use super::proof::{ProofReport, copy_tests, prove, support_changes, test_changes};
use super::report::{Rules, Verdict, VerificationReport};
use super::rerun;
use super::runs::{CommandRun, Phase, RunSet, RunSummary};
use super::scope::{check_scope, links_in};
use super::setup_phase::SetupCaching;
use super::weaken;
use super::{EXCERPT_CHARS, VerifyError};

use crate::config::environment::EnvironmentConfig;
use crate::contract::Contract;
use crate::distill::{self, Failure, TestReport};
use crate::environment::setup_cache::SetupCache;
use crate::git::{ChangedFile, Workspace};
use crate::ids::RepoScope;
use crate::sandbox::egress::{Allowlist, EgressProxy};
use crate::sandbox::{Exit, Limits, Output, Root, Sandbox};
use crate::text::clip;

/// Tests that failed on the base run alone, one by one, when a run of them together did
/// not settle them.
const CONFIRMED_ALONE: usize = 20;

/// Runs verification in the sandbox. `scratch` holds the setup phase's egress sockets and
/// output beyond the in-memory cap; the sandbox's host user must be able to reach it.
#[derive(Clone)]
pub struct Verifier {
    sandbox: Arc<dyn Sandbox>,
    scratch: PathBuf,
    limits: Limits,
    /// The environment's root every command runs in; `None`: the host's own tools.
    root: Option<Root>,
    setup_cache: Option<SetupCaching>,
}

impl Verifier {
    pub fn new(sandbox: Arc<dyn Sandbox>, scratch: impl Into<PathBuf>) -> Self {
        Verifier {
            sandbox,
            scratch: scratch.into(),
            limits: Limits::default(),
            root: None,
            setup_cache: None,
        }
    }

    /// Runs every command in `root` (an image's), as the executor and scouts do.
    pub fn with_root(mut self, root: Option<Root>) -> Self {
        self.root = root;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Restores setup phases from `scope`'s entries in `cache` when they hold their key,
    /// and keeps those the base's checkout ran; `environment` is the image digest runs
    /// use, or `host`, and `config` names the paths kept and the files keying them.
    pub fn with_setup_cache(
        mut self,
        cache: Arc<SetupCache>,
        scope: RepoScope,
        environment: &str,
        config: &EnvironmentConfig,
    ) -> Self {
        self.setup_cache = Some(SetupCaching {
            cache,
            scope,
            environment: environment.to_owned(),
            config: config.clone(),
        });
        self
    }

    /// Runs on the base the checks of `plan` that `baseline` lacks (chosen by the paths the
    /// result changed, which the contract did not declare) and adds them to it.
    /// `set_up`: whether `workspace` already ran the setup phase; a new checkout runs it.
    pub async fn complete_baseline(
        &self,
        plan: &Plan,
        baseline: &mut RunSet,
        workspace: &Workspace,
        set_up: bool,
        run: &str,
    ) -> Result<(), VerifyError> {
        let missing = plan.missing_from(baseline);
        if missing.is_empty() {
            return Ok(());
        }
        let mut more = plan.with_checks(missing);
        if set_up {
            more.setup.clear();
        }
        let runs = self
            .run_plan(&more, workspace, &format!("{run}-more-baseline"), true)
            .await?;
        baseline.extend_checks(runs);
        Ok(())
    }

    /// Runs the plan on a checkout of the base commit, re-running the tests that fail
    /// there. It needs no result, so it can run while the executor works in its own
    /// workspace.
    pub async fn baseline(
        &self,
        plan: &Plan,
        workspace: &Workspace,
        run: &str,
    ) -> Result<RunSet, VerifyError> {
        let name = format!("{run}-baseline");
        let mut set = self.run_plan(plan, workspace, &name, true).await?;
        let mut reruns = Vec::new();
        for (i, base) in set.runs.iter().enumerate() {
            if base.phase != Phase::Check {
                continue;
            }
            let mut ids: Vec<String> = Vec::new();
            for f in &base.failures {
                if !plan.quarantine.contains(&f.id) && !ids.contains(&f.id) {
                    ids.push(f.id.clone());
                }
            }
            // A command that failed naming no test runs again whole, unless a limit ended
            // it: that would only repeat.
            let whole = base.failures.is_empty()
                && !base.summary.succeeded()
                && base.summary.no_result.is_none();
            let spill = format!("{name}-rerun-{i}");
            reruns.extend(
                self.rerun_failures(workspace, base, ids, whole, plan.flaky_reruns, &spill)
                    .await?,
            );
        }
        set.reruns = reruns;
        Ok(set)
    }

    /// Runs `run`'s failing tests `ids` again, at most `rounds` times and until each has
    /// passed once; only those tests where the runner can select them, the whole command
    /// otherwise. `whole`: the command failed naming no test, so it runs again whole until
    /// it passes. Fail-to-pass and flaky checks alike call this on their own runs.
    pub async fn rerun_failures(
        &self,
        workspace: &Workspace,
        run: &CommandRun,
        mut ids: Vec<String>,
        whole: bool,
        rounds: u32,
        name: &str,
    ) -> Result<Vec<CommandRun>, VerifyError> {
        let mut reruns = Vec::new();
        for round in 0..rounds {
            if ids.is_empty() && !whole {
                break;
            }
            let wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
            let selected = rerun::select(&run.command, &wanted);
            let line = selected.as_deref().unwrap_or(&run.command);
            let spill = self.scratch.join(format!("{}-{round}", safe_name(name)));
            let mut again = self
                .run_one(workspace, line, Phase::Check, None, spill)
                .await?;
            again.command = run.command.clone();
            again.could_not_select = selected.is_none() && !ids.is_empty();
            if selected.is_some() {
                again.ids = ids.clone();
            }
            again.selected = selected;
            ids.retain(|id| !again.passed(id));
            let passed_whole = whole && again.summary.succeeded();
            reruns.push(again);
            if passed_whole {
                break;
            }
        }
        Ok(reruns)
    }

    /// Runs `ids` (tests that failed on the base and that `run`, on the result, does not
    /// report) on their own, to see them pass: all together, then each not settled by
    /// that alone, at most [`CONFIRMED_ALONE`] of them. Nothing runs when the runner
    /// cannot select tests, and then none of them is seen passing.
    async fn confirm(
        &self,
        workspace: &Workspace,
        run: &CommandRun,
        ids: Vec<String>,
        name: &str,
    ) -> Result<Vec<CommandRun>, VerifyError> {
        let mut out = Vec::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let Some(together) = self.run_selected(workspace, run, &ids, name, 0).await? else {
            return Ok(out);
        };
        let unsettled: Vec<String> = ids
            .iter()
            .filter(|id| !together.passed(id) && !together.failed_when_selected(id))
            .cloned()
            .collect();
        out.push(together);
        if ids.len() > 1 {
            for (k, id) in unsettled.into_iter().take(CONFIRMED_ALONE).enumerate() {
                if let Some(alone) = self
                    .run_selected(workspace, run, &[id], name, k + 1)
                    .await?
                {
                    out.push(alone);
                }
            }
        }
        Ok(out)
    }

    /// `run`'s command narrowed to `ids`, run on `workspace` as a confirmation; `None`
    /// when its runner cannot select them.
    async fn run_selected(
        &self,
        workspace: &Workspace,
        run: &CommandRun,
        ids: &[String],
        name: &str,
        round: usize,
    ) -> Result<Option<CommandRun>, VerifyError> {
        let wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
        let Some(line) = rerun::select(&run.command, &wanted) else {
            return Ok(None);
        };
        let spill = self.scratch.join(format!("{}-{round}", safe_name(name)));
        let mut again = self
            .run_one(workspace, &line, Phase::Check, None, spill)
            .await?;
        again.command = run.command.clone();
        again.selected = Some(line);
        again.ids = ids.to_vec();
        again.confirms = true;
        Ok(Some(again))
    }

    /// Verifies the result left in `workspace` against `baseline`: the scope of its
    /// changes and the tests it weakens, then the plan's commands, re-running the
    /// failures each introduced. Without a checkout for the proof, the result's test files
    /// are not run on the base code (see [`Verifier::verify_proving`]).
    pub async fn verify(
        &self,
        plan: &Plan,
        contract: &Contract,
        baseline: &RunSet,
        workspace: &Workspace,
        run: &str,
    ) -> Result<VerificationReport, VerifyError> {
        self.verify_proving(plan, contract, baseline, workspace, None, run)
            .await
    }

    /// [`Verifier::verify`], with the fail-to-pass proof: the result's test files are put
    /// into `proof` (a checkout of the base commit) and the plan runs there beside the
    /// result's run, so each added or changed test is seen on the base code and on the
    /// result. A result that changed no test file needs no checkout: the baseline is the
    /// base code's run.
    pub async fn verify_proving(
        &self,
        plan: &Plan,
        contract: &Contract,
        baseline: &RunSet,
        workspace: &Workspace,
        proof: Option<&Workspace>,
        run: &str,
    ) -> Result<VerificationReport, VerifyError> {
        // The result's checks run with a `HOME` of their own, as the base's did.
        let _home = FreshHome::take(workspace)?;
        // Read before anything runs: what the checks write (caches, bytecode) is not the
        // result's.
        let changed = workspace.changed_files().await?;
        let links = links_in(&workspace.repo(), &changed);
        let scope = check_scope(contract, &plan.protected, &changed, &links, baseline);
        let weakening = weaken::read(workspace, contract, &changed).await?;
        let tests = test_changes(contract, &changed);
        let support = support_changes(&changed, &tests);
        let proof = put_in_proof(
            workspace,
            proof.filter(|_| !tests.is_empty()),
            &tests,
            &support,
        )
        .await;
        let (judging, saved, not_judged) = self
            .judge_by_base_tests(contract, &changed, plan, workspace)
            .await;
        let (after, proof_run) = self.run_result_and_proof(plan, workspace, proof, run).await;
        // Re-runs and confirmations see the tree the judged run saw: on the result's own,
        // a failure the base's tests found could pass and count as flaky or fixed.
        let judged_runs = self
            .judged_runs(
                &AfterRun {
                    plan,
                    baseline,
                    workspace,
                    saved: saved.as_ref(),
                    proof: proof_run.before.as_ref().map(|(runs, _)| runs),
                    run,
                },
                &judging,
                after,
            )
            .await;
        if let Some(saved) = saved {
            saved.put_back(workspace)?;
        }
        let (after, reruns, apart_lines) = judged_runs?;
        let mut judged = judging.describe(&apart_lines);
        judged.extend(not_judged.clone());
        let proof = proof_report(contract, &tests, &support, baseline, &after, proof_run);
        let mut report =
            VerificationReport::judge(baseline, &after, &reruns, scope, &Rules::of(plan))
                .with_proof(proof)
                .with_weakening(weakening);
        report.chosen = plan.chosen.clone();
        report.judged = judged;
        // Not judged by the base's tests is not passed on the result's own account.
        if not_judged.is_some() && report.verdict == Verdict::Passed {
            report.verdict = Verdict::Failed;
        }
        Ok(report)
    }

    /// Puts the judged tree in place when the base's tests judge the result: old test
    /// files the contract does not name run in their base form, and the test files the
    /// result adds run apart. Answers the judging, the result's files set aside, and why
    /// the result could not be judged so, if it could not.
    async fn judge_by_base_tests(
        &self,
        contract: &Contract,
        changed: &[ChangedFile],
        plan: &Plan,
        workspace: &Workspace,
    ) -> (Judging, Option<Saved>, Option<String>) {
        let mut judging = Judging::plan(contract, changed, &plan.checks);
        if judging.is_empty() {
            return (judging, None, None);
        }
        match judging.prepare(workspace, &self.scratch).await {
            Ok(saved) => (judging, Some(saved), None),
            Err(e) => (
                Judging::default(),
                None,
                Some(format!(
                    "The result could not be judged by the base's tests: {e:#}."
                )),
            ),
        }
    }

    /// Runs the plan on the result and, when the proof's checkout is ready, on the base
    /// code with the result's tests beside it.
    async fn run_result_and_proof(
        &self,
        plan: &Plan,
        workspace: &Workspace,
        proof: Result<Option<(&Workspace, Vec<String>)>, String>,
        run: &str,
    ) -> (Result<RunSet, VerifyError>, ProofRun) {
        let after_name = format!("{run}-after");
        match proof {
            Ok(Some((ws, notes))) => {
                let proof_name = format!("{run}-proof");
                let (after, before) = tokio::join!(
                    self.run_plan(plan, workspace, &after_name, false),
                    self.run_plan(plan, ws, &proof_name, false)
                );
                let proof_run = match before {
                    Ok(runs) => ProofRun {
                        before: Some((runs, notes)),
                        failed: None,
                    },
                    Err(e) => ProofRun {
                        before: None,
                        failed: Some(format!("its run failed: {e}")),
                    },
                };
                (after, proof_run)
            }
            Ok(None) => (
                self.run_plan(plan, workspace, &after_name, false).await,
                ProofRun::default(),
            ),
            Err(why) => (
                self.run_plan(plan, workspace, &after_name, false).await,
                ProofRun {
                    before: None,
                    failed: Some(why),
                },
            ),
        }
    }

    /// The result's run completed on the judged tree: the added test files run apart,
    /// the base's failures it does not report confirmed, and the failures it introduced
    /// run again. Answers the run, all re-runs, and the command lines run apart.
    async fn judged_runs(
        &self,
        at: &AfterRun<'_>,
        judging: &Judging,
        after: Result<RunSet, VerifyError>,
    ) -> Result<(RunSet, Vec<CommandRun>, Vec<String>), VerifyError> {
        let mut after = after?;
        let apart_lines = self.run_apart(at, judging, &mut after).await?;
        self.confirm_absent(at, &mut after).await?;
        let mut reruns = self.rerun_introduced(at, &after).await?;
        reruns.extend(after.reruns.iter().cloned());
        Ok((after, reruns, apart_lines))
    }

    /// Runs the test files the result adds apart from the judged run, on the result's
    /// own tree, and folds each into its command's run.
    async fn run_apart(
        &self,
        at: &AfterRun<'_>,
        judging: &Judging,
        after: &mut RunSet,
    ) -> Result<Vec<String>, VerifyError> {
        let mut apart_lines = Vec::new();
        if judging.apart.is_empty() {
            return Ok(apart_lines);
        }
        for (i, run_after) in after.runs.iter_mut().enumerate() {
            if run_after.phase != Phase::Check {
                continue;
            }
            let Some(line) = judging.apart_line(&run_after.command) else {
                continue;
            };
            let spill = self
                .scratch
                .join(format!("{}-apart-{i}", safe_name(at.run)));
            at.result_tree()?;
            let apart = self
                .run_one(at.workspace, &line, Phase::Check, None, spill)
                .await;
            at.judged_tree()?;
            let apart = apart?;
            run_after.take_apart(apart);
            apart_lines.push(line);
        }
        Ok(apart_lines)
    }

    /// A test that failed on the base counts as fixed only when seen passing: the
    /// result's run does not list passing tests, so each absent failure runs alone, on
    /// the judged tree. The result's own tests that failed on the base code (the
    /// proof's) run on the result's tree, where they are.
    async fn confirm_absent(
        &self,
        at: &AfterRun<'_>,
        after: &mut RunSet,
    ) -> Result<(), VerifyError> {
        let (plan, baseline, workspace, run) = (at.plan, at.baseline, at.workspace, at.run);
        for (i, run_after) in after.runs.iter().enumerate() {
            if run_after.phase != Phase::Check || !run_after.ran_tests() {
                continue;
            }
            let proof_run = at
                .proof
                .and_then(|runs| runs.find(Phase::Check, &run_after.command));
            let base_reruns = baseline.reruns_of(&run_after.command);
            let wanted = |runs: Option<&CommandRun>, but: &[String]| {
                let mut ids: Vec<String> = Vec::new();
                for f in runs.into_iter().flat_map(|r| r.failures.iter()) {
                    let absent = !run_after.failures.iter().any(|a| a.id == f.id)
                        && !run_after.named_passing(&f.id);
                    let flaky = base_reruns.iter().any(|r| r.passed(&f.id));
                    if absent
                        && !flaky
                        && !plan.quarantine.contains(&f.id)
                        && !ids.contains(&f.id)
                        && !but.contains(&f.id)
                    {
                        ids.push(f.id.clone());
                    }
                }
                ids
            };
            let judged_ids = wanted(baseline.find(Phase::Check, &run_after.command), &[]);
            let own_ids = wanted(proof_run, &judged_ids);
            let name = format!("{run}-confirm-{i}");
            let confirmed = self
                .confirm(workspace, run_after, judged_ids, &name)
                .await?;
            after.reruns.extend(confirmed);
            if !own_ids.is_empty() {
                at.result_tree()?;
                let name = format!("{run}-confirm-own-{i}");
                let confirmed = self.confirm(workspace, run_after, own_ids, &name).await;
                at.judged_tree()?;
                after.reruns.extend(confirmed?);
            }
        }
        Ok(())
    }

    /// Runs again the failures each check introduced (or the whole command, when it
    /// failed naming no test), to tell a flaky failure from a real one.
    async fn rerun_introduced(
        &self,
        at: &AfterRun<'_>,
        after: &RunSet,
    ) -> Result<Vec<CommandRun>, VerifyError> {
        let (plan, baseline) = (at.plan, at.baseline);
        let mut reruns = Vec::new();
        for (i, run_after) in after.runs.iter().enumerate() {
            if run_after.phase != Phase::Check {
                continue;
            }
            let runs = Runs {
                base: baseline.find(run_after.phase, &run_after.command),
                base_reruns: baseline.reruns_of(&run_after.command),
                after: run_after,
                reruns: Vec::new(),
                quarantine: &plan.quarantine,
                expects_tests: plan.expects_tests,
                removable: &plan.removable,
            };
            let found = classify_runs(&runs);
            let introduced = |f: &&super::ClassifiedFailure| {
                matches!(f.class, Class::Introduced | Class::NoResult)
            };
            let ids: Vec<String> = found
                .iter()
                .filter(introduced)
                .filter_map(|f| f.test.clone())
                .collect();
            // Running no tests is not a matter of luck: running again would find none.
            let whole = ran_nothing(&runs).is_none()
                && found.iter().filter(introduced).any(|f| f.test.is_none());
            let spill = format!("{}-rerun-{i}", at.run);
            reruns.extend(
                self.rerun_failures(
                    at.workspace,
                    run_after,
                    ids,
                    whole,
                    plan.flaky_reruns,
                    &spill,
                )
                .await?,
            );
        }
        Ok(reruns)
    }

    /// `keep_setup`: whether a setup phase that succeeded goes into the setup cache. Only
    /// the base's checkout qualifies: the result's was in the executor's hands, and what
    /// it left in a cached path would be restored into later runs.
    async fn run_plan(
        &self,
        plan: &Plan,
        workspace: &Workspace,
        run: &str,
        keep_setup: bool,
    ) -> Result<RunSet, VerifyError> {
        let name = safe_name(run);
        std::fs::create_dir_all(&self.scratch)
            .with_context(|| format!("Could not create {}", self.scratch.display()))?;
        let mut runs = Vec::new();
        let cached = match &self.setup_cache {
            Some(caching) => caching.look_up(plan, workspace).await,
            None => None,
        };
        let mut setup_entry = None;
        if let Some(restored) = cached.as_ref().and_then(|c| c.restored_runs(plan)) {
            runs.extend(restored);
            setup_entry = cached.as_ref().map(|c| c.key.clone());
        } else if !plan.setup.is_empty() {
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
            if let Some(lookup) = cached.filter(|_| keep_setup) {
                lookup.keep(&runs).await;
            }
        }
        for (i, command) in plan.checks.iter().enumerate() {
            let spill = self.scratch.join(format!("{name}-check-{i}"));
            runs.push(
                self.run_one(workspace, command, Phase::Check, None, spill)
                    .await?,
            );
        }
        Ok(RunSet {
            runs,
            reruns: Vec::new(),
            setup_entry,
        })
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
        cmd.root = self.root.clone();
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

/// What the runs after the result's own work from: the plan, the base's runs, the
/// result's workspace with the result's files set aside while the base's tests judge,
/// and the base code's run of the result's tests when the proof ran.
struct AfterRun<'a> {
    plan: &'a Plan,
    baseline: &'a RunSet,
    workspace: &'a Workspace,
    saved: Option<&'a Saved>,
    proof: Option<&'a RunSet>,
    /// The run's name, which names its spill files.
    run: &'a str,
}

impl AfterRun<'_> {
    /// Puts the result's own files back for a run that needs them, when they were set
    /// aside.
    fn result_tree(&self) -> anyhow::Result<()> {
        match self.saved {
            Some(saved) => saved.result_tree(self.workspace),
            None => Ok(()),
        }
    }

    /// Puts the judged tree in place again, after [`AfterRun::result_tree`].
    fn judged_tree(&self) -> anyhow::Result<()> {
        match self.saved {
            Some(saved) => saved.judged_tree(self.workspace),
            None => Ok(()),
        }
    }
}

/// The result's test files run on the base code: its runs with the notes from putting
/// the files in, or why that was not done.
#[derive(Default)]
struct ProofRun {
    before: Option<(RunSet, Vec<String>)>,
    failed: Option<String>,
}

/// Copies the result's test files, and the files they may read, into the proof's
/// checkout of the base commit. Answers the checkout with the copy's notes, none when
/// no proof is wanted, or why the files could not be put in.
async fn put_in_proof<'a>(
    workspace: &Workspace,
    proof: Option<&'a Workspace>,
    tests: &[ChangedFile],
    support: &[ChangedFile],
) -> Result<Option<(&'a Workspace, Vec<String>)>, String> {
    let Some(ws) = proof else {
        return Ok(None);
    };
    let (from, to) = (workspace.repo(), ws.repo());
    let files: Vec<_> = tests.iter().chain(support).cloned().collect();
    match tokio::task::spawn_blocking(move || copy_tests(&from, &to, &files)).await {
        Ok(Ok(notes)) => Ok(Some((ws, notes))),
        Ok(Err(e)) => Err(format!("the test files could not be put in: {e:#}")),
        Err(e) => Err(format!("copying the test files failed: {e}")),
    }
}

/// The fail-to-pass proof's account: each of the result's tests on the base code and
/// on the result, or why it was not run.
fn proof_report(
    contract: &Contract,
    tests: &[ChangedFile],
    support: &[ChangedFile],
    baseline: &RunSet,
    after: &RunSet,
    proof_run: ProofRun,
) -> ProofReport {
    match (proof_run.before, proof_run.failed) {
        (Some((before, notes)), _) => {
            let mut proof = prove(contract, tests, baseline, &before, after, true, notes);
            let declared = contract.declared_paths();
            let undeclared: Vec<String> = support
                .iter()
                .filter(|c| !declared.iter().any(|d| d == &c.path))
                .map(|c| format!("`{}`", c.path))
                .collect();
            if !undeclared.is_empty() {
                proof.notes.push(format!(
                    "The base code ran with files the result changed that its tests may \
                     read and the contract does not name: {}. A test that passes only \
                     with them proves nothing about the code.",
                    undeclared.join(", ")
                ));
            }
            proof
        }
        (None, Some(why)) => ProofReport::not_run(&format!(
            "The result's test files were not run on the base code: {why}."
        )),
        (None, None) if tests.is_empty() => prove(
            contract,
            tests,
            baseline,
            baseline,
            after,
            false,
            Vec::new(),
        ),
        (None, None) => ProofReport::not_run(
            "The result's test files were not run on the base code: no proof was made.",
        ),
    }
}

/// The executor's `HOME`, kept aside while the result's checks run with an empty one: what
/// it left there (a `usercustomize.py` or `.pth` file in Python's user site, a tool's
/// settings) would run with every check, outside the diff verification reads. Put back
/// when dropped.
struct FreshHome {
    home: PathBuf,
    aside: PathBuf,
}

impl FreshHome {
    fn take(workspace: &Workspace) -> anyhow::Result<Option<FreshHome>> {
        let home = workspace.home();
        let aside = home.with_file_name("home-aside");
        // A verification that ended before putting it back left the executor's there.
        if aside.symlink_metadata().is_ok() {
            let _ = std::fs::remove_dir_all(&home);
            std::fs::rename(&aside, &home)
                .with_context(|| format!("Could not put back {}", home.display()))?;
        }
        let Ok(meta) = home.symlink_metadata() else {
            return Ok(None);
        };
        std::fs::rename(&home, &aside)
            .with_context(|| format!("Could not set {} aside", home.display()))?;
        let fresh = FreshHome { home, aside };
        std::fs::create_dir(&fresh.home)
            .with_context(|| format!("Could not create {}", fresh.home.display()))?;
        std::fs::set_permissions(&fresh.home, meta.permissions())?;
        std::os::unix::fs::lchown(&fresh.home, Some(meta.uid()), Some(meta.gid()))
            .with_context(|| format!("Could not hand {} over", fresh.home.display()))?;
        Ok(Some(fresh))
    }
}

impl Drop for FreshHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        if let Err(e) = std::fs::rename(&self.aside, &self.home) {
            tracing::warn!(error = %e, home = %self.home.display(), "could not put the executor's HOME back");
        }
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
    // Paths under the checkout lose it; the checkout itself (pytest's `rootdir: …`)
    // becomes `.`.
    let relative = |text: &str| {
        workspace_prefixes
            .iter()
            .fold(text.to_owned(), |t, prefix| {
                let bare = prefix.trim_end_matches('/');
                let t = t.replace(prefix.as_str(), "");
                if bare.is_empty() {
                    t
                } else {
                    t.replace(bare, ".")
                }
            })
    };
    let (exit_code, signal) = match output.exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    // A command ended from outside says nothing about the tests it did not get to.
    let no_result = output.not_started().or_else(|| {
        if output.timed_out {
            Some("the wall-clock limit ended it".to_owned())
        } else {
            signal.map(|s| format!("it was killed by signal {s}"))
        }
    });
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
            restored: false,
            no_result,
            unnamed: report.unnamed,
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
        selected: None,
        could_not_select: false,
        ids: Vec::new(),
        confirms: false,
        passing: report.passing,
    }
}
