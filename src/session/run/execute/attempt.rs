//! The attempts loop as named steps: `prepare` (workspaces, budget, executor kind) once,
//! then for each attempt `start` (its run row and what budget is left), `execute` (beside
//! the baseline on the first), `verify` (scope and checks), `review`, and `judge`, a pure
//! decision: publish the result, or send it back with instructions while attempts remain.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use super::execution::{Execution, Timings, create_open_dir};
use super::ladder;
use super::partial;
use crate::config::environment::Choice;
use crate::config::repo::{ExecutorKind, OnFailure, RepoConfig};
use crate::contract::{Contract, Ladder, Rung};
use crate::environment::setup_cache::SetupCache;
use crate::executor::{self, Executor, ExecutorError, ExecutorTask, Feedback, StopReason};
use crate::git::{Artifacts, Author, Outcome, RESULT_MAX_BYTES, Workspace};
use crate::ids::{CommitSha, RepoScope, RunId};
use crate::llm::ModelError;
use crate::metering::ModelRole;
use crate::planner::reviewer::{self as review, ReviewRequest};
use crate::publish::{self, RungSpend};
use crate::sandbox::{Root, Sandbox};
use crate::session::error::Stop;
use crate::session::{comments, image};
use crate::store::audit::AuditAction;
use crate::store::baselines;
use crate::store::model_usage::Budget;
use crate::store::runs::{self, RunState};
use crate::store::state::SessionState;
use crate::verify::{self, RunOutcome, Verifier, VerifyError};

/// What every attempt of one execution shares.
struct Prepared {
    branch: String,
    result: Workspace,
    /// The base's checkout; `None` when a kept baseline stands for running it.
    baseline_ws: Option<Workspace>,
    plan: verify::Plan,
    /// The environment chosen at planning, and its root for every command of the run
    /// (`None`: the host's own tools).
    choice: Choice,
    root: Option<Root>,
    /// `reference@digest` of the image, or `host`, as the run's records keep it.
    environment: String,
    /// The image's digest, or `host`: what keys the base's runs and the setup cache.
    environment_id: String,
    /// The repository as its forge knows it: whose setup cache entries and kept
    /// baselines these runs use. `None` (the forge did not say): neither is used.
    scope: Option<RepoScope>,
    /// The contract's whole budget; each attempt gets what is left of it.
    budget: Budget,
    limits: executor::AttemptLimits,
    kind: ExecutorKind,
    author: Author,
    message: String,
    max_attempts: u32,
    on_failure: OnFailure,
    /// The contract's executor ladder, if it has one.
    ladder: Option<Ladder>,
    /// The commit the result's checkout starts from, and the branch head it is stacked
    /// on: what a checkout made afresh for a higher rung starts from too.
    start: String,
    stacked_on: Option<String>,
}

/// What the run's environment decides for every attempt.
struct RunEnvironment {
    choice: Choice,
    root: Option<Root>,
    recorded: String,
    /// The image's digest, or `host`: the base's runs are kept per environment, since
    /// another image may give other results.
    id: String,
    scope: Option<RepoScope>,
}

/// What one attempt hands to the next.
#[derive(Default)]
struct Carried {
    baseline: Option<verify::RunSet>,
    /// The key of the commands `baseline` holds runs of (`verify::Plan::baseline_key`):
    /// it grows when a result's diff chooses commands the contract did not declare.
    /// `None` without a repository scope: nothing is kept.
    baseline_key: Option<String>,
    /// The keys `baseline`, or the part of it run first, is kept under.
    kept_under: Vec<String>,
    /// A verification met flaky tests: this execution keeps no baseline.
    met_flaky: bool,
    /// The base's checkout made after a kept baseline stood for running it, when a
    /// result's diff chose commands the kept runs do not hold.
    late_base: Option<Workspace>,
    feedback: Option<Feedback>,
    /// What verification created in the checkout: never part of a later result while
    /// it holds what the checks left.
    artifacts: Artifacts,
    /// The ladder's rung the next attempt runs on (an index into its rungs).
    rung: Option<usize>,
    /// The distilled account of a failed attempt on a lower rung, for the next one.
    hint: Option<String>,
    /// What each rung climbed has spent so far, in order.
    spend: Vec<RungSpend>,
}

/// One attempt under way.
struct Attempt {
    number: u32,
    run: RunId,
    records: PathBuf,
    verifier: Verifier,
    executor: Box<dyn Executor>,
    /// The execution's limits with the budget that is left.
    limits: executor::AttemptLimits,
    /// The ladder's rung it runs on.
    rung: Option<usize>,
}

/// A verified attempt, before its review.
struct Checked {
    verification: verify::VerificationReport,
    /// The verification distilled for the reviewer and a next attempt.
    compact: String,
    diff: String,
    /// The executor's own account: a claim the reviewer weighs against the evidence.
    claim: String,
}

/// What an attempt's judgement came to.
#[derive(Debug, PartialEq)]
enum Judgement {
    /// The executor tries again with these instructions.
    Again { instructions: String },
    /// The result is published; `failure` says why it did not pass, if it did not.
    Final { failure: Option<String> },
}

impl Execution<'_> {
    pub(super) async fn attempts(
        &self,
        config: &RepoConfig,
        choice: &Choice,
        sandbox: Arc<dyn Sandbox>,
        used: u32,
        max_attempts: u32,
        climbed: usize,
    ) -> Result<(), Stop> {
        let mut timings = Timings::default();
        // Resolved and pulled once for the whole run, before any executor model is paid;
        // the lease keeps the cache from evicting it until the run is published.
        let stage = Instant::now();
        let image = image::pull(&self.app, choice, self.last_try).await?;
        timings.record("environment", stage);
        let recorded = image::recorded(choice, image.as_ref());
        let plan = verify::Plan::new(&self.contract, config);
        let env_id = image
            .as_ref()
            .map_or("host".to_owned(), |l| l.digest.to_string());
        let scope = self.scope().await;
        let baseline_key = scope
            .as_ref()
            .map(|s| plan.baseline_key(s.as_str(), &self.row.base_sha, &env_id));
        let mut carried = Carried {
            baseline_key: baseline_key.clone(),
            ..Carried::default()
        };
        if let (Some(key), Some(scope)) = (&baseline_key, &scope)
            && let Some(kept) = self.kept_baseline(key, scope).await?
        {
            carried.baseline = Some(kept);
            carried.kept_under.push(key.clone());
        }
        let environment = RunEnvironment {
            choice: choice.clone(),
            root: image.as_ref().map(|lease| lease.sandbox_root()),
            recorded,
            id: env_id,
            scope,
        };
        let mut ready = self
            .prepare(
                config,
                plan,
                environment,
                &carried,
                max_attempts,
                &mut timings,
            )
            .await?;
        // Each verified failure before this execution climbed one rung.
        carried.rung = ready
            .ladder
            .as_ref()
            .map(|l| (l.start + climbed).min(l.rungs.len().saturating_sub(1)));
        let mut number = used + 1;
        loop {
            let attempt = self
                .start(&ready, config, &sandbox, number, &carried)
                .await?;
            let claim = self
                .execute(&ready, &attempt, &mut carried, &mut timings)
                .await?;
            let checked = self
                .verify(&ready, &attempt, &mut carried, claim, &mut timings)
                .await?;
            self.keep_baseline(&mut carried, &checked).await?;
            let verdict = self.review(config, &ready, &checked, &mut timings).await?;
            self.count_spend(&ready, &attempt, &mut carried).await?;
            let unmet = unmet_commands(&self.contract, &checked.verification);
            match judge(
                &checked.verification,
                &unmet,
                &verdict,
                number,
                max_attempts,
            ) {
                Judgement::Again { instructions } => {
                    let failed = Failed {
                        checked,
                        verdict: &verdict,
                        unmet: &unmet,
                        instructions,
                    };
                    self.try_again(&mut ready, &attempt, failed, &mut carried)
                        .await?;
                    number += 1;
                }
                Judgement::Final { failure } => {
                    if let Some(ws) = carried.late_base.take()
                        && let Err(e) = ws.finish(Outcome::Succeeded).await
                    {
                        warn!(error = %e, "could not remove the base's late workspace");
                    }
                    let outcome = RunOutcome {
                        verification: checked.verification,
                        accepted: verdict.accept,
                        findings: verdict.findings,
                        failure,
                        attempts: number,
                        max_attempts,
                        environment: Some(ready.environment.clone()),
                        commit: None,
                        rungs: std::mem::take(&mut carried.spend),
                    };
                    return self
                        .record(config, ready, &attempt.run, outcome, timings)
                        .await;
                }
            }
        }
    }

    /// The two checkouts (the result's and the baseline's), the budget and the executor.
    async fn prepare(
        &self,
        config: &RepoConfig,
        plan: verify::Plan,
        environment: RunEnvironment,
        carried: &Carried,
        max_attempts: u32,
        timings: &mut Timings,
    ) -> Result<Prepared, Stop> {
        let started = Instant::now();
        let branch = self.branch().await?;
        // A later round (`/revise` on the pull request) continues from what the session
        // pushed, and `/retry continue` from the unfinished work it kept, so the branch
        // only moves forward; the baseline is always the base.
        let mut conn = self.reader().await?;
        let published = runs::published_head(&mut conn, &self.id).await?;
        let branch_head = runs::branch_head(&mut conn, &self.id).await?;
        drop(conn);
        let start = match &self.continues {
            Some(from) => from.commit.0.clone(),
            None => published.unwrap_or_else(|| self.row.base_sha.clone()),
        };
        let base = async {
            match carried.baseline {
                Some(_) => Ok(None),
                None => self.workspace(&branch, &self.row.base_sha).await.map(Some),
            }
        };
        let (result, baseline_ws) = tokio::join!(self.workspace(&branch, &start), base);
        let (mut result, baseline_ws) = (result?, baseline_ws?);
        // Starting clean after unfinished work was kept on the branch as a draft: the
        // result goes on top of it, so the same pull request moves forward.
        let stacked_on = branch_head.filter(|h| self.continues.is_none() && *h != start);
        if let Some(head) = &stacked_on {
            self.stack_on(&mut result, head).await?;
        }
        // Whatever it starts from, the result is checked as the whole change from the
        // base: scope, weakened tests and the proof see what earlier work did too.
        if start.as_str() != self.row.base_sha {
            result
                .compare_from(&CommitSha(self.row.base_sha.clone()))
                .map_err(Stop::permanent)?;
        }
        timings.record("workspaces", started);
        let routing = &self.contract.routing;
        // The planner writes the contract: its budget may lower the repository's, never
        // raise it.
        let usd = routing
            .budget_usd
            .map_or(config.budget_usd, |usd| usd.min(config.budget_usd));
        let budget = Budget {
            max_microusd: Budget::usd(usd).max_microusd,
            max_tokens: routing.budget_tokens,
        };
        let kind = match routing.executor.as_deref() {
            None => config.executor,
            Some(name) => super::choose::parse_executor(name)
                .ok_or_else(|| Stop::fail(comments::unknown_executor(name)))?,
        };
        let names = self.app.forges.bot_names(self.forge_kind).await?;
        let author = self.author(names.first().map_or("planwright", String::as_str));
        let approved_by = self.row.approved_by.clone().unwrap_or_default();
        let (issue, version) = (self.issue, self.version());
        let message =
            publish::result_message(issue, &self.contract, version, &self.hash, &approved_by);
        Ok(Prepared {
            branch,
            result,
            baseline_ws,
            plan,
            choice: environment.choice,
            root: environment.root,
            environment: environment.recorded,
            environment_id: environment.id,
            scope: environment.scope,
            budget,
            limits: executor::AttemptLimits {
                budget,
                wall: self.app.settings.executor_timeout,
                ..executor::AttemptLimits::default()
            },
            kind,
            author,
            message,
            max_attempts,
            on_failure: config.on_failure,
            ladder: routing.ladder.clone(),
            start,
            stacked_on,
        })
    }

    /// The attempt's run row, its executor and what is left of the budget for it.
    async fn start(
        &self,
        ready: &Prepared,
        config: &RepoConfig,
        sandbox: &Arc<dyn Sandbox>,
        number: u32,
        carried: &Carried,
    ) -> Result<Attempt, Stop> {
        let run = RunId::generate();
        let records = self.app.settings.data_dir.join("runs").join(run.as_str());
        let scratch = records.join("verify");
        create_open_dir(&scratch)?;
        // What the session has left: a coding agent's token is held to it, so planning,
        // reviews and earlier attempts count against the contract's budget.
        let spent = crate::store::model_usage::spent_by_session(&self.app.db, &self.id).await?;
        let Some(left) = budget_left(ready.budget, spent.cost_microusd, spent.tokens) else {
            let text = comments::budget_used_before_attempt(ready.budget, number);
            return Err(Stop::fail(text));
        };
        let rung = carried
            .rung
            .and_then(|i| ready.ladder.as_ref().and_then(|l| l.rung(i)));
        let kind = match rung {
            Some(r) => super::choose::parse_executor(&r.executor)
                .ok_or_else(|| Stop::fail(comments::unknown_executor(&r.executor)))?,
            None => ready.kind,
        };
        let model = rung.map(|r| r.model.as_str());
        let executor = self.executor(kind, model, config, sandbox, &run, (ready.budget, left))?;
        let recorded = match model {
            Some(m) => Some(m.to_owned()),
            None => self.attempt_model(kind, config),
        };
        let mut conn = self.writer().await?;
        let new = runs::NewRun {
            id: &run,
            session: &self.id,
            version: self.row.version,
            attempt: i64::from(number),
            executor: executor.name(),
            branch: &ready.branch,
            workspace: &ready.result.location().display().to_string(),
            environment: &ready.environment,
            model: recorded.as_deref(),
            rung: carried.rung.map_or(0, |i| i as i64),
        };
        runs::insert(&mut conn, &new).await?;
        drop(conn);
        let mut text = comments::executing(
            self.row.version,
            executor.name(),
            number,
            ready.max_attempts,
        );
        text.push_str(&comments::environment_notes(&ready.choice.notes));
        if let (Some(i), Some(ladder)) = (carried.rung, &ready.ladder) {
            text.push_str(&on_rung(ladder, i));
        }
        self.status(SessionState::Executing, &text).await?;
        Ok(Attempt {
            number,
            run,
            records,
            verifier: setup_cached(
                Verifier::new(sandbox.clone(), scratch).with_root(ready.root.clone()),
                self,
                ready,
                config,
            ),
            executor,
            limits: executor::AttemptLimits {
                budget: left,
                ..ready.limits
            },
            rung: carried.rung,
        })
    }

    /// Runs the executor (beside the baseline on the first attempt) and commits what it
    /// changed; returns the executor's claim of what it did.
    async fn execute(
        &self,
        ready: &Prepared,
        attempt: &Attempt,
        carried: &mut Carried,
        timings: &mut Timings,
    ) -> Result<String, Stop> {
        let run = &attempt.run;
        let records = attempt.records.join("executor");
        let mut task = ExecutorTask::new(&ready.result, &self.contract, records, attempt.limits);
        task.feedback = carried.feedback.take();
        task.hint = carried.hint.take();
        task.environment = ready.root.clone();
        task.continues = self.continues.as_ref().map(|from| from.reason.clone());
        let stage = Instant::now();
        let base = match (carried.baseline.take(), &ready.baseline_ws) {
            (Some(b), _) => Ok(b),
            (None, Some(ws)) => Err(ws),
            (None, None) => {
                return Err(Stop::permanent(anyhow::anyhow!(
                    "Neither a kept baseline nor the base's checkout is there"
                )));
            }
        };
        let work = async {
            match base {
                Ok(b) => (attempt.executor.run(&task).await, Ok(b)),
                // The base's checks need no result: they run beside the executor.
                Err(ws) => tokio::join!(
                    attempt.executor.run(&task),
                    attempt.verifier.baseline(&ready.plan, ws, run.as_str())
                ),
            }
        };
        // A session cancelled meanwhile stops the executor: its sandbox dies with the
        // dropped future, and nothing is pushed.
        let (report, base) = tokio::select! {
            done = work => done,
            () = self.until_cancelled() => {
                self.finish_run(run, RunState::Failed, Some("cancelled"), None).await?;
                return Err(Stop::Gone);
            }
        };
        carried.baseline = Some(base.map_err(|e| verify_stop(e, "the base commit"))?);
        timings.record("executor+baseline", stage);
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                self.finish_run(run, RunState::Failed, Some(&e.to_string()), None)
                    .await?;
                // The job runs again with a fresh attempt; on its last try the change is
                // kept like any other failure's.
                if e.is_retryable() && !self.last_try {
                    return Err(Stop::retryable(e));
                }
                let reason = executor_failure(&e);
                let text = self.keep(ready, attempt, carried, reason, None).await?;
                return Err(executor_stop(e, text));
            }
        };
        self.finish_run(run, RunState::Running, Some(&report.summary), None)
            .await?;
        let limits = &attempt.limits;
        if let Some(reason) = unfinished(report.stop, ready.budget, limits, &report.summary) {
            self.finish_run(run, RunState::Failed, None, None).await?;
            let text = self.keep(ready, attempt, carried, reason, None).await?;
            return Err(Stop::fail(text));
        }
        let result = &ready.result;
        let size = result.changed_bytes().await.map_err(Stop::permanent)?;
        if size > RESULT_MAX_BYTES {
            self.finish_run(run, RunState::Failed, None, None).await?;
            return Err(Stop::fail(comments::result_too_large(
                size,
                RESULT_MAX_BYTES,
            )));
        }
        let committed = result
            .commit_result(&ready.message, &ready.author, &carried.artifacts)
            .await
            .map_err(Stop::permanent)?;
        if committed == result.base() {
            self.finish_run(run, RunState::Failed, None, None).await?;
            return Err(Stop::fail(comments::nothing_changed()));
        }
        Ok(report.summary)
    }

    /// Runs the checks on the result against the baseline; a result that touches what it
    /// may not is refused here, whatever its tests say.
    async fn verify(
        &self,
        ready: &Prepared,
        attempt: &Attempt,
        carried: &mut Carried,
        claim: String,
        timings: &mut Timings,
    ) -> Result<Checked, Stop> {
        self.move_to(SessionState::Executing, SessionState::Verifying, None)
            .await?;
        let result = &ready.result;
        // The repository's path-keyed commands are chosen again by what the result changed.
        let changed = result.changed_files().await.map_err(Stop::permanent)?;
        let plan = ready.plan.for_result(&changed);
        let commands = plan.checks.len() + plan.setup.len();
        let text = comments::verifying(attempt.number, commands);
        self.status(SessionState::Verifying, &text).await?;
        let diff = result.diff().await.map_err(Stop::permanent)?;
        let stage = Instant::now();
        self.complete_baseline(ready, attempt, carried, &plan)
            .await?;
        let Some(base_runs) = carried.baseline.as_ref() else {
            return Err(Stop::permanent(anyhow::anyhow!(
                "The baseline was not run with the first attempt"
            )));
        };
        let run = attempt.run.as_str();
        let proof = self.proof_workspace(ready, result).await?;
        let verification = attempt
            .verifier
            .verify_proving(
                &plan,
                &self.contract,
                base_runs,
                result,
                proof.as_ref(),
                run,
            )
            .await
            .map_err(|e| verify_stop(e, "the result"))?;
        if let Some(ws) = proof
            && let Err(e) = ws.finish(Outcome::Succeeded).await
        {
            warn!(error = %e, "could not remove the proof's workspace");
        }
        timings.record("verify", stage);
        // What the checks wrote is theirs: a rewrite of the result is undone before the
        // executor sees the checkout again, and what they created stays out of its commits.
        let written = result.undo_checks_writes().await.map_err(Stop::permanent)?;
        carried.artifacts.extend(written);
        if verification.verdict == verify::Verdict::Refused {
            let outcome = serde_json::to_string(&verification)?;
            self.finish_run(&attempt.run, RunState::Failed, None, Some(&outcome))
                .await?;
            let refused: Vec<String> = verification
                .scope
                .iter()
                .filter(|f| f.severity == verify::Severity::Refused)
                .map(|f| comments::refused_path(&f.path, &f.change, &f.reason))
                .collect();
            // A protected path or a file CI runs is never pushed; other refusals keep
            // the change, as committed before the checks ran.
            if partial::unpushable(&verification.scope, &ready.plan.protected).is_some() {
                return Err(Stop::fail(comments::result_refused(&refused)));
            }
            let reason = comments::result_refused_kept(&refused);
            let committed = Some(result.tip().await.map_err(Stop::permanent)?);
            let text = self
                .keep(ready, attempt, carried, reason, committed)
                .await?;
            return Err(Stop::fail(text));
        }
        Ok(Checked {
            compact: verification.compact(),
            verification,
            diff,
            claim,
        })
    }

    /// Keeps what the attempt changed before it ended without a result to publish.
    async fn keep(
        &self,
        ready: &Prepared,
        attempt: &Attempt,
        carried: &Carried,
        reason: String,
        committed: Option<CommitSha>,
    ) -> Result<String, Stop> {
        let unfinished = partial::Unfinished {
            run: &attempt.run,
            state: RunState::Failed,
            workspace: &ready.result,
            reason,
            committed,
            message: &ready.message,
            author: &ready.author,
            artifacts: &carried.artifacts,
            protected: &ready.plan.protected,
            choice: &ready.choice,
            on_failure: ready.on_failure,
            environment: &ready.environment,
            attempts: attempt.number,
            max_attempts: ready.max_attempts,
        };
        self.keep_unfinished(unfinished).await
    }

    /// Runs on the base the commands the result's diff chose that the baseline lacks, in
    /// the base's checkout (made now when a kept baseline stood for it), and keys the
    /// baseline by every command it then holds.
    async fn complete_baseline(
        &self,
        ready: &Prepared,
        attempt: &Attempt,
        carried: &mut Carried,
        plan: &verify::Plan,
    ) -> Result<(), Stop> {
        let Some(base) = carried.baseline.as_mut() else {
            return Err(Stop::permanent(anyhow::anyhow!(
                "The baseline was not run with the first attempt"
            )));
        };
        if plan.missing_from(base).is_empty() {
            return Ok(());
        }
        let (ws, set_up) = match (&ready.baseline_ws, &carried.late_base) {
            (Some(ws), _) | (None, Some(ws)) => (ws, true),
            (None, None) => {
                let ws = self.workspace(&ready.branch, &self.row.base_sha).await?;
                (&*carried.late_base.insert(ws), false)
            }
        };
        attempt
            .verifier
            .complete_baseline(plan, base, ws, set_up, attempt.run.as_str())
            .await
            .map_err(|e| verify_stop(e, "the base commit"))?;
        let plan = ready.plan.with_checks(base.checks());
        carried.baseline_key = ready.scope.as_ref().map(|scope| {
            plan.baseline_key(scope.as_str(), &self.row.base_sha, &ready.environment_id)
        });
        Ok(())
    }

    /// A fresh checkout of the base commit for the fail-to-pass proof, when the result
    /// changed test files to run there.
    async fn proof_workspace(
        &self,
        ready: &Prepared,
        result: &Workspace,
    ) -> Result<Option<Workspace>, Stop> {
        let changed = result.changed_files().await.map_err(Stop::permanent)?;
        if verify::test_changes(&self.contract, &changed).is_empty() {
            return Ok(None);
        }
        let branch = format!("{}-proof", ready.branch);
        // Without it the report says no proof was made; the result is still verified.
        match self.workspace(&branch, &self.row.base_sha).await {
            Ok(ws) => Ok(Some(ws)),
            Err(e) => {
                warn!(error = ?e, "no checkout for the proof; verifying without it");
                Ok(None)
            }
        }
    }

    /// The reviewer's verdict on the verified result.
    async fn review(
        &self,
        config: &RepoConfig,
        ready: &Prepared,
        checked: &Checked,
        timings: &mut Timings,
    ) -> Result<review::ReviewVerdict, Stop> {
        let stage = Instant::now();
        let budget = Budget {
            max_microusd: ready.budget.max_microusd,
            max_tokens: None,
        };
        // The reviewer the approved contract names; a contract recorded without one gets
        // the repository's.
        let recorded = (self.contract.models.reviewer.as_deref())
            .and_then(|name| crate::ids::ModelName::parse(name).ok());
        let reviewer = self
            .app
            .model(
                ModelRole::Reviewer,
                &self.id,
                budget,
                recorded.as_ref().or(config.models.planner.as_ref()),
            )
            .map_err(|e| Stop::fail(format!("{e:#}")))?;
        let request = ReviewRequest {
            contract: &self.contract,
            diff: &checked.diff,
            verification: &checked.compact,
            claim: &checked.claim,
        };
        let verdict = review::review(reviewer.as_ref(), &request)
            .await
            .map_err(|e| match e {
                review::ReviewError::Model(ModelError::BudgetExceeded { spent, limit, .. }) => {
                    Stop::fail(comments::review_over_budget(&spent, &limit))
                }
                e => Stop::hidden(comments::reviewer_model_failed(), e),
            })?;
        timings.record("review", stage);
        Ok(verdict)
    }

    /// What the attempt's model calls spent, counted to its rung of the ladder.
    async fn count_spend(
        &self,
        ready: &Prepared,
        attempt: &Attempt,
        carried: &mut Carried,
    ) -> Result<(), Stop> {
        let Some((i, rung)) = attempt
            .rung
            .and_then(|i| Some((i, ready.ladder.as_ref()?.rung(i)?)))
        else {
            return Ok(());
        };
        let spent = crate::store::model_usage::spent_by_run(&self.app.db, &attempt.run).await?;
        match carried.spend.last_mut().filter(|s| s.rung == i + 1) {
            Some(s) => {
                s.attempts += 1;
                s.tokens += spent.tokens;
                s.cost_microusd += spent.cost_microusd;
            }
            None => carried.spend.push(RungSpend {
                rung: i + 1,
                executor: rung.executor.clone(),
                model: rung.model.clone(),
                attempts: 1,
                tokens: spent.tokens,
                cost_microusd: spent.cost_microusd,
            }),
        }
        Ok(())
    }

    /// The input (cache included) and output tokens of the attempt's model calls.
    async fn attempt_tokens(&self, run: &RunId) -> Result<(u64, u64), Stop> {
        let calls = crate::store::model_usage::list_by_session(&self.app.db, &self.id).await?;
        let ours = calls
            .iter()
            .filter(|c| c.run_id.as_deref() == Some(run.as_str()));
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(ours.fold((0, 0), |(i, o), c| {
            let input = c.input_tokens + c.cache_read_tokens + c.cache_write_tokens;
            (i + count(input), o + count(c.output_tokens))
        }))
    }

    /// After a verified failure with attempts left: one rung up the ladder when there is
    /// one above, else back to the same executor with instructions, as without a ladder.
    async fn try_again(
        &self,
        ready: &mut Prepared,
        attempt: &Attempt,
        failed: Failed<'_>,
        carried: &mut Carried,
    ) -> Result<(), Stop> {
        match next_rung(ready.ladder.as_ref(), attempt.rung) {
            Some(next) => self.climb(ready, attempt, failed, next, carried).await,
            None => {
                let Failed {
                    checked,
                    instructions,
                    ..
                } = failed;
                self.send_back(attempt, checked, instructions, carried)
                    .await
            }
        }
    }

    /// Hands the next attempt to rung `next` after a verified failure: the failed
    /// attempt's work is kept on a branch of its own, and a fresh executor starts again
    /// from where the run started, with a distilled account of the failure. When what is
    /// left of the budget cannot cover the climb, the work is kept and the run stops,
    /// saying what the next rung would have cost.
    async fn climb(
        &self,
        ready: &mut Prepared,
        attempt: &Attempt,
        failed: Failed<'_>,
        next: usize,
        carried: &mut Carried,
    ) -> Result<(), Stop> {
        let Some(ladder) = ready.ladder.clone() else {
            return Err(Stop::permanent(anyhow::anyhow!(
                "Climbing without a ladder"
            )));
        };
        let (Some(from), Some(to)) = (attempt.rung.and_then(|i| ladder.rung(i)), ladder.rung(next))
        else {
            return Err(Stop::permanent(anyhow::anyhow!("Climbing past the ladder")));
        };
        let failure = failure_of(&failed.checked.verification, failed.unmet, failed.verdict)
            .unwrap_or_default();
        let (input, output) = self.attempt_tokens(&attempt.run).await?;
        let estimate = ladder::estimate(to, input, output);
        let spent = crate::store::model_usage::spent_by_session(&self.app.db, &self.id).await?;
        if let Some(left) = ready.budget.max_microusd.map(|m| m - spent.cost_microusd)
            && estimate > left
        {
            let reason = climb_unaffordable(attempt.number, &failure, (next, to), estimate, left);
            let committed = Some(ready.result.tip().await.map_err(Stop::permanent)?);
            let text = self
                .keep(ready, attempt, carried, reason, committed)
                .await?;
            return Err(Stop::fail(text));
        }
        let outcome = serde_json::to_string(&failed.checked.verification)?;
        self.finish_run(&attempt.run, RunState::Failed, None, Some(&outcome))
            .await?;
        let kept = publish::keep_on_partial_branch(
            self.forge,
            &ready.result,
            &self.repo,
            self.issue,
            &self.row.base_branch,
        )
        .await;
        let kept = match kept {
            Ok(publish::Published::Branch { branch, .. }) => Some(branch),
            Ok(_) => None,
            Err(e) if e.is_retryable() => return Err(Stop::retryable(e)),
            Err(e) => {
                warn!(error = %e, "could not keep the failed attempt's work on a branch");
                None
            }
        };
        let changed = ready
            .result
            .changed_files()
            .await
            .map_err(Stop::permanent)?;
        let account = Account {
            number: attempt.number,
            from,
            failure: &failure,
            failed: &failed,
            changed: &changed,
            kept: kept.as_deref(),
        };
        let hint = hint_of(&account);
        let mut fresh = self.workspace(&ready.branch, &ready.start).await?;
        if let Some(head) = &ready.stacked_on {
            self.stack_on(&mut fresh, head).await?;
        }
        if ready.start.as_str() != self.row.base_sha {
            fresh
                .compare_from(&CommitSha(self.row.base_sha.clone()))
                .map_err(Stop::permanent)?;
        }
        let old = std::mem::replace(&mut ready.result, fresh);
        if let Err(e) = old.finish(Outcome::Failed).await {
            warn!(error = %e, "could not put the failed attempt's checkout aside");
        }
        info!(from = %from.label(), to = %to.label(), kept = ?kept, "climbing the executor ladder");
        carried.artifacts = Artifacts::default();
        carried.feedback = None;
        carried.hint = Some(hint);
        carried.rung = Some(next);
        self.move_to(SessionState::Verifying, SessionState::Executing, None)
            .await
    }

    /// Records the failed attempt and hands the executor its next instructions.
    async fn send_back(
        &self,
        attempt: &Attempt,
        checked: Checked,
        instructions: String,
        carried: &mut Carried,
    ) -> Result<(), Stop> {
        let outcome = serde_json::to_string(&checked.verification)?;
        self.finish_run(&attempt.run, RunState::Failed, None, Some(&outcome))
            .await?;
        carried.feedback = Some(Feedback {
            instructions,
            verification: checked.compact,
        });
        self.move_to(SessionState::Verifying, SessionState::Executing, None)
            .await
    }

    /// The repository as its forge knows it, for the setup cache and kept baselines;
    /// `None` when the forge does not say (or cannot be asked now): the run goes on
    /// without either rather than under a scope that is not the repository's own.
    async fn scope(&self) -> Option<RepoScope> {
        match self.forge.repository_id(&self.repo).await {
            Ok(Some(id)) => Some(RepoScope::new(self.forge_kind.as_str(), &id)),
            Ok(None) => {
                warn!(repo = %self.repo, "the forge gives no id for the repository; setup is not cached and the base's runs are not kept");
                None
            }
            Err(e) => {
                warn!(repo = %self.repo, error = %e, "could not read the repository's id; setup is not cached and the base's runs are not kept");
                None
            }
        }
    }

    /// The base's runs kept by an earlier execution under `key`, if any. Runs whose setup
    /// was restored from the setup cache are kept only as long as that entry is: the
    /// cache emptied (or the entry evicted) takes them with it.
    async fn kept_baseline(
        &self,
        key: &str,
        scope: &RepoScope,
    ) -> Result<Option<verify::RunSet>, Stop> {
        let Some(json) = baselines::take(&self.app.db, key).await? else {
            return Ok(None);
        };
        match serde_json::from_str::<verify::RunSet>(&json) {
            Ok(runs) if runs.rests_on_a_gone_setup(open_setup_cache(self).as_ref(), scope) => {
                info!(
                    key,
                    "a kept baseline's setup cache entry is gone; the base runs again"
                );
                baselines::forget(&self.app.db, key).await?;
                Ok(None)
            }
            Ok(runs) => {
                info!(key, "the base's runs are kept from an earlier execution");
                self.audit(
                    AuditAction::BaselineReused,
                    serde_json::json!({ "key": key }),
                )
                .await?;
                Ok(Some(runs))
            }
            // Written by another version: run the base again.
            Err(e) => {
                warn!(error = %e, "a kept baseline is unreadable; the base runs again");
                baselines::forget(&self.app.db, key).await?;
                Ok(None)
            }
        }
    }

    /// Keeps the baseline for later runs on the same base under the key of the commands
    /// it holds, unless a verification met flaky tests (on the result, or among the base's
    /// own re-runs); kept ones that met them are forgotten.
    async fn keep_baseline(&self, carried: &mut Carried, checked: &Checked) -> Result<(), Stop> {
        // Base-side flakes too: a kept baseline would carry one run's luck.
        let flaky = checked.verification.counts.flaky > 0
            || carried
                .baseline
                .as_ref()
                .is_some_and(verify::RunSet::met_flaky);
        if flaky {
            carried.met_flaky = true;
            for key in carried.kept_under.drain(..) {
                baselines::forget(&self.app.db, &key).await?;
            }
        }
        let Some(key) = carried.baseline_key.clone() else {
            return Ok(());
        };
        if carried.met_flaky || carried.kept_under.contains(&key) {
            return Ok(());
        }
        let Some(runs) = &carried.baseline else {
            return Ok(());
        };
        baselines::keep(&self.app.db, &key, &serde_json::to_string(runs)?).await?;
        // Kept once: the later attempts of this execution already have it.
        carried.kept_under.push(key);
        Ok(())
    }

    /// Keeps the final attempt's outcome with its run and publishes it.
    async fn record(
        &self,
        config: &RepoConfig,
        ready: Prepared,
        run: &RunId,
        mut outcome: RunOutcome,
        mut timings: Timings,
    ) -> Result<(), Stop> {
        // The record names the commit before it is pushed, and the push comes before the
        // session moves on: whichever worker carries on after a restart publishes it from
        // the record, once it finds the branch holding it.
        let signature = (ready.message.as_str(), &ready.author);
        let commit = self
            .commit_to_publish(
                &ready.result,
                &outcome.result(),
                config.on_failure,
                signature,
            )
            .await?;
        outcome.commit = commit.as_ref().map(|c| c.0.clone());
        let text = serde_json::to_string(&outcome)?;
        self.finish_run(run, RunState::Verified, None, Some(&text))
            .await?;
        let pushed = match commit {
            Some(commit) => Some((commit, self.push_verified(&ready.result).await?)),
            None => None,
        };
        self.move_to(SessionState::Verifying, SessionState::Publishing, None)
            .await?;
        if let Some(ws) = ready.baseline_ws
            && let Err(e) = ws.finish(Outcome::Succeeded).await
        {
            warn!(error = %e, "could not remove the baseline's workspace");
        }
        let stage = Instant::now();
        let published = self
            .publish(
                config,
                &ready.choice,
                run,
                super::publish::Verified::Here(ready.result, pushed),
                &outcome,
            )
            .await;
        timings.record("publish", stage);
        timings.log(&self.id);
        // Kept whatever publishing came to: how long each stage took is for the operator
        // (and the overhead benchmark) to read.
        let detail = serde_json::json!({ "run": run, "attempts": outcome.attempts, "stages_ms": timings.json() });
        self.audit(AuditAction::ExecutionTimed, detail).await?;
        published
    }
}

/// The verifier with the repository's part of the deployment's setup cache, keyed by the
/// run's environment (the image digest, or `host`); without one (an unwritable DATA_DIR,
/// or no repository scope) setup runs every time.
fn setup_cached(
    verifier: Verifier,
    execution: &Execution<'_>,
    ready: &Prepared,
    config: &RepoConfig,
) -> Verifier {
    let Some(scope) = ready.scope.clone() else {
        return verifier;
    };
    match open_setup_cache(execution) {
        Some(cache) => verifier.with_setup_cache(
            Arc::new(cache),
            scope,
            &ready.environment_id,
            &config.environment,
        ),
        None => verifier,
    }
}

fn open_setup_cache(execution: &Execution<'_>) -> Option<SetupCache> {
    let settings = &execution.app.settings;
    match SetupCache::open(&settings.data_dir, settings.images.setup_cache_max) {
        Ok(cache) => Some(cache),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "setup runs without the setup cache");
            None
        }
    }
}

/// What is left of `budget` after the session spent `cost_microusd` and `tokens`; `None`
/// when nothing is.
fn budget_left(budget: Budget, cost_microusd: i64, tokens: i64) -> Option<Budget> {
    let left = Budget {
        max_microusd: budget.max_microusd.map(|m| m - cost_microusd),
        max_tokens: budget
            .max_tokens
            .map(|t| t.saturating_sub(u64::try_from(tokens).unwrap_or(0))),
    };
    let spent = left.max_microusd.is_some_and(|m| m <= 0) || left.max_tokens == Some(0);
    (!spent).then_some(left)
}

/// Why an executor that stopped by itself did not finish, if it did not.
fn unfinished(
    stop: StopReason,
    budget: Budget,
    limits: &executor::AttemptLimits,
    summary: &str,
) -> Option<String> {
    match stop {
        StopReason::Finished => None,
        StopReason::Budget => Some(comments::executor_over_budget(budget)),
        StopReason::Timeout => Some(comments::executor_timed_out(limits.wall)),
        StopReason::TurnLimit => Some(comments::executor_turn_limit(limits.max_turns)),
        StopReason::Crashed => Some(comments::executor_crashed(summary)),
    }
}

/// A verified failure, as the next rung is told about it.
struct Failed<'a> {
    checked: Checked,
    verdict: &'a review::ReviewVerdict,
    unmet: &'a [String],
    /// What the reviewer (or verification) asked of a next attempt.
    instructions: String,
}

/// What a failed attempt's account is made of.
struct Account<'a> {
    number: u32,
    from: &'a Rung,
    failure: &'a str,
    failed: &'a Failed<'a>,
    changed: &'a [crate::git::ChangedFile],
    /// The branch its work is kept on.
    kept: Option<&'a str>,
}

/// The rung above `current` on `ladder`, if there is one.
fn next_rung(ladder: Option<&Ladder>, current: Option<usize>) -> Option<usize> {
    let next = current? + 1;
    (next < ladder?.rungs.len()).then_some(next)
}

/// The status comment's line for an attempt on rung `i`.
fn on_rung(ladder: &Ladder, i: usize) -> String {
    let Some(rung) = ladder.rung(i) else {
        return String::new();
    };
    format!(
        "\n\nOn rung {} of {} of the escalation ladder: {} · {}.",
        i + 1,
        ladder.rungs.len(),
        crate::markdown::code(&rung.executor, false),
        crate::markdown::code(&rung.model, false)
    )
}

/// Why the ladder stopped short of rung `next`: what climbing would have cost.
fn climb_unaffordable(
    attempt: u32,
    failure: &str,
    (next, to): (usize, &Rung),
    estimate: i64,
    left: i64,
) -> String {
    let usd = |m: i64| m.max(0) as f64 / 1_000_000.0;
    format!(
        "Attempt {attempt} failed: {}. The next rung of the escalation ladder, rung {} ({} · \
         {}), would cost about ${:.4} (the last attempt's tokens at its prices), and only \
         ${:.4} of the budget is left, so the ladder stops here.",
        first_line(failure),
        next + 1,
        crate::markdown::code(&to.executor, false),
        crate::markdown::code(&to.model, false),
        usd(estimate),
        usd(left)
    )
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim_end_matches('.')
}

/// The distilled account of a failed attempt a higher rung starts with: what verification
/// and the reviewer said, which files it changed and how large its diff was. Never the
/// executor's transcript or its own account of what it did.
fn hint_of(a: &Account<'_>) -> String {
    use std::fmt::Write as _;
    let f = a.failed;
    let mut out = format!(
        "Attempt {} ran on a cheaper rung ({}) and did not pass. You start again from the \
         base: none of its changes are in this checkout",
        a.number,
        a.from.label()
    );
    match a.kept {
        Some(branch) => {
            let _ = write!(out, " (they are kept on the branch `{branch}`).");
        }
        None => out.push('.'),
    }
    let _ = write!(out, "\n\n- Why it failed: {}", a.failure.trim());
    let verdict = if f.verdict.accept {
        "accepted"
    } else {
        "rejected"
    };
    let findings = crate::text::clip(f.verdict.findings.trim(), 1_000);
    let _ = write!(out, "\n- The reviewer {verdict} it: {findings}");
    let asked = crate::text::clip(f.instructions.trim(), 1_000);
    let _ = write!(out, "\n- Asked of the next attempt: {asked}");
    let files: Vec<String> = a
        .changed
        .iter()
        .take(30)
        .map(|c| format!("`{}` ({})", c.path, change_word(c.change)))
        .collect();
    let _ = write!(out, "\n- Files it changed: {}", files.join(", "));
    let (added, removed) = diff_lines(&f.checked.diff);
    let _ = write!(
        out,
        "\n- Its diff: {added} lines added, {removed} removed, in {} files ({} bytes).",
        a.changed.len(),
        f.checked.diff.len()
    );
    let _ = write!(
        out,
        "\n\nIts verification:\n\n{}\n",
        f.checked.compact.trim_end()
    );
    out
}

fn change_word(change: crate::git::ChangeKind) -> &'static str {
    match change {
        crate::git::ChangeKind::Added => "added",
        crate::git::ChangeKind::Modified => "modified",
        crate::git::ChangeKind::Deleted => "deleted",
        crate::git::ChangeKind::TypeChanged => "type changed",
    }
}

/// Lines a unified diff adds and removes, its file headers left out.
fn diff_lines(diff: &str) -> (usize, usize) {
    diff.lines().fold((0, 0), |(a, r), l| {
        if l.starts_with("+++") || l.starts_with("---") {
            (a, r)
        } else if l.starts_with('+') {
            (a + 1, r)
        } else if l.starts_with('-') {
            (a, r + 1)
        } else {
            (a, r)
        }
    })
}

/// Why a verified and reviewed attempt did not pass, if it did not: verification first,
/// then the contract's own commands, then the reviewer.
fn failure_of(
    verification: &verify::VerificationReport,
    unmet: &[String],
    verdict: &review::ReviewVerdict,
) -> Option<String> {
    if verification.verdict != verify::Verdict::Passed {
        Some(verification.headline())
    } else if !unmet.is_empty() {
        Some(comments::checks_still_fail(unmet))
    } else if !verdict.accept {
        Some(comments::reviewer_rejected(&verdict.findings))
    } else {
        None
    }
}

/// Whether a verified and reviewed attempt is done. The contract's own commands define
/// done: a failure they had on the base too is no excuse, whatever the executor or the
/// reviewer say. A failed attempt goes back to the executor while attempts remain.
fn judge(
    verification: &verify::VerificationReport,
    unmet: &[String],
    verdict: &review::ReviewVerdict,
    attempt: u32,
    max_attempts: u32,
) -> Judgement {
    match failure_of(verification, unmet, verdict) {
        Some(failure) if attempt < max_attempts => {
            let mut instructions = if verdict.instructions.trim().is_empty() {
                format!("Fix what kept the result from passing. {failure}")
            } else {
                verdict.instructions.clone()
            };
            // A weakened test is undone, not worked around: said first, whatever else.
            if let Some(undo) = verification.weakening.instructions() {
                instructions = format!("{undo}\n{instructions}");
            }
            Judgement::Again { instructions }
        }
        failure => Judgement::Final { failure },
    }
}

/// The contract's verification commands that did not succeed on the result. A command
/// that fails on the result as it failed on the base counts as met when the contract's
/// new tests are all proven and the run named every failure: the repository's own
/// failures (a test broken in this environment) do not hold back a proven fix, and
/// verification has already found nothing introduced.
fn unmet_commands(contract: &Contract, report: &verify::VerificationReport) -> Vec<String> {
    let same = |a: &str, b: &str| a.split_whitespace().eq(b.split_whitespace());
    let named: Vec<&verify::ProvenTest> = report
        .proof
        .tests
        .iter()
        .filter(|t| t.in_contract)
        .collect();
    let all_proven = !contract.verification.new_tests.is_empty()
        && !named.is_empty()
        && named.iter().all(|t| t.proof == verify::Proof::Proven);
    let as_on_the_base = |c: &verify::CommandComparison| {
        all_proven
            && c.baseline
                .as_ref()
                .is_some_and(|b| !b.succeeded() && b.complete())
            && c.after.complete()
            && c.after.no_result.is_none()
            && !c.after.timed_out
    };
    contract
        .verification
        .commands
        .iter()
        .filter(|wanted| {
            report.commands.iter().any(|c| {
                c.phase == verify::Phase::Check
                    && same(&c.command, wanted)
                    && !c.after.succeeded()
                    && !as_on_the_base(c)
            })
        })
        .map(|c| c.trim().to_owned())
        .collect()
}

/// Why a failed executor stopped, as the issue is told. The provider's answer is its own
/// text and stays in the audit log; the budget is planwright's.
fn executor_failure(e: &ExecutorError) -> String {
    match e {
        ExecutorError::Model(m) if !matches!(m, ModelError::BudgetExceeded { .. }) => {
            comments::executor_model_failed()
        }
        e => comments::executor_error(e),
    }
}

/// The session's stop for a failed executor, saying `text`; the provider's own answer is
/// kept for the audit log only.
fn executor_stop(e: ExecutorError, text: String) -> Stop {
    match e {
        ExecutorError::Model(ref m) if !matches!(m, ModelError::BudgetExceeded { .. }) => {
            Stop::hidden(text, e)
        }
        _ => Stop::fail(text),
    }
}

fn verify_stop(e: VerifyError, on: &str) -> Stop {
    match e {
        VerifyError::Sandbox(crate::sandbox::SandboxError::Internal(e)) => Stop::retryable(e),
        e => Stop::fail(comments::could_not_verify(on, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(verdict: verify::Verdict) -> verify::VerificationReport {
        verify::VerificationReport {
            verdict,
            commands: Vec::new(),
            counts: Default::default(),
            failures: Vec::new(),
            scope: Vec::new(),
            scope_omitted: 0,
            chosen: Vec::new(),
            proof: Default::default(),
            weakening: Default::default(),
            judged: Vec::new(),
        }
    }

    fn review(accept: bool, instructions: &str) -> review::ReviewVerdict {
        review::ReviewVerdict {
            accept,
            findings: "The change misses the empty case.\nMore.".into(),
            instructions: instructions.into(),
        }
    }

    #[test]
    fn a_passing_accepted_attempt_is_published_as_passed() {
        let passed = report(verify::Verdict::Passed);
        let judged = judge(&passed, &[], &review(true, ""), 1, 3);
        assert_eq!(judged, Judgement::Final { failure: None });
    }

    #[test]
    fn a_failure_goes_back_to_the_executor_while_attempts_remain() {
        let passed = report(verify::Verdict::Passed);
        let judged = judge(&passed, &[], &review(false, "Handle the empty case."), 1, 2);
        assert_eq!(
            judged,
            Judgement::Again {
                instructions: "Handle the empty case.".into()
            }
        );
        // Without the reviewer's instructions, the failure itself is the instruction.
        let unmet = vec!["cargo test".to_owned()];
        let Judgement::Again { instructions } = judge(&passed, &unmet, &review(true, " "), 2, 3)
        else {
            panic!("an unmet command was published with attempts left");
        };
        assert_eq!(
            instructions,
            "Fix what kept the result from passing. Contract check still fails: `cargo test`"
        );
    }

    #[test]
    fn the_last_attempt_is_published_with_the_first_reason_it_failed() {
        let failed = report(verify::Verdict::Failed);
        let unmet = vec!["make check".to_owned()];
        let Judgement::Final { failure: Some(why) } =
            judge(&failed, &unmet, &review(false, ""), 3, 3)
        else {
            panic!("the last attempt was not final");
        };
        assert_eq!(why, failed.headline());
        let passed = report(verify::Verdict::Passed);
        let judged = judge(&passed, &unmet, &review(false, ""), 3, 3);
        let failure = Some("Contract check still fails: `make check`".to_owned());
        assert_eq!(judged, Judgement::Final { failure });
        let judged = judge(&passed, &[], &review(false, ""), 3, 3);
        let failure =
            Some("Not accepted by the reviewer: The change misses the empty case.".into());
        assert_eq!(judged, Judgement::Final { failure });
    }

    #[test]
    fn a_command_failing_as_on_the_base_holds_back_only_an_unproven_fix() {
        let contract = Contract::from_json(
            r#"{"summary": "s", "diagnosis": {"hypothesis": "h"},
                "change": {"goal": "g", "files": [{"path": "a.py", "action": "modify", "why": "w"}]},
                "verification": {"commands": ["pytest"], "new_tests": ["test_a.py::test_new"]},
                "routing": {"risk": "low"}}"#,
        )
        .unwrap();
        let summary = |exit: i32, failed: u64| verify::RunSummary {
            exit_code: Some(exit),
            signal: None,
            timed_out: false,
            duration_ms: 1,
            runner: "pytest".into(),
            passed: 3,
            failed,
            skipped: 0,
            errors: 0,
            unnamed: 0,
            restored: false,
            no_result: None,
        };
        let mut passed = report(verify::Verdict::Passed);
        passed.commands.push(verify::CommandComparison {
            command: "pytest".into(),
            phase: verify::Phase::Check,
            baseline: Some(summary(1, 1)),
            after: summary(1, 1),
            rerun: None,
            reruns: Vec::new(),
            base_reruns: Vec::new(),
        });
        let proven = |proof| verify::ProvenTest {
            test: "test_a.py::test_new".into(),
            command: "pytest".into(),
            before: "failed".into(),
            after: "passed".into(),
            proof,
            in_contract: true,
        };
        passed.proof.tests.push(proven(verify::Proof::Proven));
        assert_eq!(unmet_commands(&contract, &passed), Vec::<String>::new());
        // Not proven: the failing command is what the result is judged by.
        passed.proof.tests[0] = proven(verify::Proof::Unknown);
        assert_eq!(unmet_commands(&contract, &passed), ["pytest"]);
        // Passing on the base, failing now: never met.
        passed.proof.tests[0] = proven(verify::Proof::Proven);
        passed.commands[0].baseline = Some(summary(0, 0));
        assert_eq!(unmet_commands(&contract, &passed), ["pytest"]);
        // A failure the run did not name may be new.
        passed.commands[0].baseline = Some(summary(1, 1));
        passed.commands[0].after.unnamed = 1;
        assert_eq!(unmet_commands(&contract, &passed), ["pytest"]);
    }

    #[test]
    fn a_failed_runs_check_title_says_what_failed() {
        let title = |failure: Option<String>| {
            publish::check_title(&publish::RunResult::Failed {
                reason: failure.expect("a failure"),
            })
        };
        let mut failed = report(verify::Verdict::Failed);
        failed.counts.introduced = 1;
        let passed = report(verify::Verdict::Passed);
        let unmet = vec!["make check".to_owned()];
        let final_failure = |v: &verify::VerificationReport, unmet: &[String], accept| match judge(
            v,
            unmet,
            &review(accept, ""),
            3,
            3,
        ) {
            Judgement::Final { failure } => failure,
            other => panic!("the last attempt was not final: {other:?}"),
        };
        assert_eq!(
            title(final_failure(&failed, &unmet, false)),
            "Verification failed: 1 introduced, no verification commands"
        );
        assert_eq!(
            title(final_failure(&passed, &unmet, false)),
            "Contract check still fails: `make check`"
        );
        assert_eq!(
            title(final_failure(&passed, &[], false)),
            "Not accepted by the reviewer: The change misses the empty case."
        );
        assert_eq!(
            publish::check_title(&publish::RunResult::Succeeded),
            "Verification passed"
        );
    }

    #[test]
    fn a_weakened_test_is_undone_first_whatever_the_reviewer_asks() {
        let mut weakened = report(verify::Verdict::Failed);
        weakened.weakening.findings.push(verify::WeakeningFinding {
            kind: verify::WeakeningKind::Skip,
            path: "test_calc.py".into(),
            lines: vec![7],
            in_base: false,
            test: Some("TestCalc.test_add".into()),
            what: "adds `@unittest.skip` to `TestCalc.test_add`".into(),
            instruction: "remove `@unittest.skip` at test_calc.py:7".into(),
            ruling: verify::Ruling::Refused("not declared".into()),
        });
        let Judgement::Again { instructions } = judge(
            &weakened,
            &[],
            &review(true, "Handle the empty case."),
            1,
            2,
        ) else {
            panic!("a weakened result was published with attempts left");
        };
        assert_eq!(
            instructions,
            "Verification refused these changes to the tests; undo them and fix the code \
             instead:\n- remove `@unittest.skip` at test_calc.py:7\n\nHandle the empty case."
        );
        let judged = judge(&weakened, &[], &review(true, ""), 2, 2);
        assert_eq!(
            judged,
            Judgement::Final {
                failure: Some(weakened.headline())
            }
        );
        assert!(weakened.headline().contains("1 weakened test"));
    }

    #[test]
    fn budget_left_counts_what_the_session_spent() {
        let budget = Budget {
            max_microusd: Some(1_000_000),
            max_tokens: Some(5_000),
        };
        let left = budget_left(budget, 400_000, 1_000).unwrap();
        assert_eq!(left.max_microusd, Some(600_000));
        assert_eq!(left.max_tokens, Some(4_000));
        assert!(budget_left(budget, 1_000_000, 0).is_none());
        assert!(budget_left(budget, 0, 5_000).is_none());
        let unlimited = Budget {
            max_microusd: None,
            max_tokens: None,
        };
        assert!(budget_left(unlimited, i64::MAX, i64::MAX).is_some());
    }

    #[test]
    fn an_executor_that_stopped_early_says_which_limit_it_met() {
        let budget = Budget::usd(2.0);
        let limits = executor::AttemptLimits::default();
        assert_eq!(unfinished(StopReason::Finished, budget, &limits, ""), None);
        let over = unfinished(StopReason::Budget, budget, &limits, "").unwrap();
        assert_eq!(over, "The executor ran out of budget (limit $2.00).");
        let crashed = unfinished(StopReason::Crashed, budget, &limits, "\n oom killed \nrest");
        assert_eq!(
            crashed.as_deref(),
            Some("The executor stopped without finishing: oom killed")
        );
        let timeout = unfinished(StopReason::Timeout, budget, &limits, "").unwrap();
        assert!(timeout.contains("within 45 minutes"), "{timeout}");
    }
}
