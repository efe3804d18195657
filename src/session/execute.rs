//! The execute job: carries out exactly the approved contract version and proves the
//! result. The executor works in one workspace while the baseline runs in another; the
//! result is verified against it, reviewed, sent back with instructions while attempts
//! remain, and published as a pull request (a draft or a report when it failed). Every
//! attempt is a `runs` row; a restarted job abandons what a dead process left running and
//! resumes publishing from the very workspace that was verified.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tracing::{Instrument as _, info, warn};

use super::flow::{ExecuteJob, comment_url, update_status};
use crate::app::App;
use crate::config::ProxyListen;
use crate::config::repo::{BoundSettings, ExecutorKind, RepoConfig};
use crate::contract::{Contract, ContractHash, ContractVersion};
use crate::event;
use crate::executor::agent::AgentCli;
use crate::executor::{
    self, AgentExecutor, Builtin, CommandExecutor, Executor, ExecutorError, ExecutorTask, Feedback,
    ProxyAccess, StopReason,
};
use crate::forge::Forge;
use crate::forge::repo_config::LoadError;
use crate::git::push::{PushError, PushFailure};
use crate::git::{Author, MirrorKey, Outcome, RESULT_MAX_BYTES, Workspace, WorkspaceRequest};
use crate::ids::Provider;
use crate::ids::{CommitSha, IssueNumber, RepoName, RunId, SessionId};
use crate::jobs::JobError;
use crate::llm::ModelError;
use crate::metering::ModelRole;
use crate::planner::reviewer::{self as review, ReviewRequest};
use crate::publish::{self, Publication, PublishError, Published, RunResult};
use crate::sandbox::Sandbox;
use crate::store::model_usage::Budget;
use crate::store::runs::{self, RunState};
use crate::store::state::SessionState;
use crate::store::{audit, sessions};
use crate::verify::{self, Verifier, VerifyError};

/// How often a running executor's session is looked at for a cancellation.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the job stopped early: the session fails with a reason people read, the job is
/// retried or dead-lettered, or the session moved on (cancelled) and nothing is left to do.
enum Stop {
    Fail(String),
    /// A failure whose cause is a provider's or forge's own text (internal addresses,
    /// masked keys): the issue, which may be public, gets `public`; the audit log keeps
    /// `detail` for the operator.
    Hidden {
        public: String,
        detail: String,
    },
    Job(JobError),
    Gone,
}

/// What a public issue is told about an internal failure.
const SEE_AUDIT: &str = "the details are in planwright's audit log for the operator";

impl<E: Into<JobError>> From<E> for Stop {
    fn from(e: E) -> Self {
        Stop::Job(e.into())
    }
}

/// What a verified attempt came to, kept with its run so publishing can resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunOutcome {
    verification: verify::VerificationReport,
    accepted: bool,
    findings: String,
    /// `None`: the run passed.
    failure: Option<String>,
    attempts: u32,
    max_attempts: u32,
}

/// How long each stage took, for the log and the overhead benchmark.
#[derive(Default)]
struct Timings {
    stages: Vec<(&'static str, std::time::Duration)>,
}

impl Timings {
    fn record(&mut self, stage: &'static str, since: Instant) {
        self.stages.push((stage, since.elapsed()));
    }

    fn log(&self, session: &SessionId) {
        let text: Vec<String> = self
            .stages
            .iter()
            .map(|(s, d)| format!("{s}={}ms", d.as_millis()))
            .collect();
        info!(session = %session, stages = %text.join(" "), "execution stages");
    }

    /// Milliseconds per stage, summed over attempts, for the audit log.
    fn json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (stage, d) in &self.stages {
            let ms = map
                .get(*stage)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            map.insert((*stage).to_owned(), (ms + d.as_millis() as u64).into());
        }
        serde_json::Value::Object(map)
    }
}

/// The execute job's handler; `attempt` is the job's, starting at 1.
pub async fn execute_job(app: Arc<App>, execute: ExecuteJob, attempt: i64) -> Result<(), JobError> {
    let mut conn = app.db.pool.acquire().await?;
    let Some(session) = sessions::get(&mut conn, &execute.session).await? else {
        return Err(JobError::Permanent(anyhow::anyhow!(
            "Session {} does not exist",
            execute.session
        )));
    };
    let contract_row = sessions::contract(&mut conn, &execute.session, execute.version).await?;
    drop(conn);
    let state = session.state;
    if !matches!(
        state,
        SessionState::Executing | SessionState::Verifying | SessionState::Publishing
    ) {
        info!(session = %execute.session, state = %state, "execute job no longer needed");
        return Ok(());
    }
    let forge_kind = session.forge;
    let repo = session.repo.clone();
    let forge = app.forges.get(forge_kind, session.installation_id)?;
    let span = tracing::info_span!("execute", session = %execute.session, repo = %repo, issue = session.issue_number.0, version = execute.version);
    // Instrumented, not entered: a guard held across an await puts other tasks' log
    // lines under this span.
    async {
        let ctx = match contract_row {
            // What was approved is exactly what runs: the job carries the hash and base.
            Some(row)
                if row.sha256 == execute.sha256
                    && row.base_sha == execute.base_sha
                    && row.settings.as_deref().map(BoundSettings::sha256_of)
                        == execute.settings_sha256
                    && row.approved_by.is_some() =>
            {
                let contract = Contract::from_json(&row.body).map_err(|e| {
                    JobError::Permanent(anyhow::anyhow!(
                        "Stored contract v{} is unreadable: {e}",
                        row.version
                    ))
                })?;
                let hash = ContractHash::parse(&row.sha256).ok_or_else(|| {
                    JobError::Permanent(anyhow::anyhow!(
                        "Stored contract v{} has no valid hash",
                        row.version
                    ))
                })?;
                Execution {
                    app: app.clone(),
                    forge: forge.as_ref(),
                    forge_kind,
                    repo: repo.clone(),
                    issue: session.issue_number,
                    id: session.id.clone(),
                    contract,
                    hash,
                    row,
                }
            }
            _ => {
                let reason = format!(
                    "Contract v{} as approved (sha256 {}) is not on record; nothing was run.",
                    execute.version, execute.sha256
                );
                fail(&app, forge.as_ref(), &session.id, &reason).await?;
                return Ok(());
            }
        };
        match ctx.run(state).await {
            Ok(()) | Err(Stop::Gone) => Ok(()),
            Err(Stop::Fail(reason)) => {
                fail(&app, forge.as_ref(), &ctx.id, &reason).await?;
                Ok(())
            }
            Err(Stop::Hidden { public, detail }) => {
                fail_detailed(&app, forge.as_ref(), &ctx.id, &public, Some(&detail)).await?;
                Ok(())
            }
            // A job that will not run again must not leave the session waiting for it.
            Err(Stop::Job(e)) if attempt >= super::flow::JOB_ATTEMPTS || !e.is_retryable() => {
                let reason = format!("planwright could not continue: {SEE_AUDIT}.");
                fail_detailed(&app, forge.as_ref(), &ctx.id, &reason, Some(&e.message())).await?;
                Err(e)
            }
            Err(Stop::Job(e)) => Err(e),
        }
    }
    .instrument(span)
    .await
}

struct Execution<'a> {
    app: Arc<App>,
    forge: &'a dyn Forge,
    forge_kind: event::ForgeKind,
    repo: RepoName,
    issue: IssueNumber,
    id: SessionId,
    contract: Contract,
    hash: ContractHash,
    row: sessions::ContractRow,
}

impl Execution<'_> {
    async fn writer(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.writer.acquire().await?)
    }

    async fn reader(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.pool.acquire().await?)
    }

    fn version(&self) -> ContractVersion {
        ContractVersion(u32::try_from(self.row.version).unwrap_or(u32::MAX))
    }

    /// The settings the approval bound (the base commit's, recorded at planning); a
    /// contract planned before they were recorded reads them now.
    async fn config(&self) -> Result<RepoConfig, Stop> {
        if let Some(json) = self.row.settings.as_deref() {
            let bound: BoundSettings = serde_json::from_str(json).map_err(|e| {
                Stop::Fail(format!(
                    "The settings recorded with contract v{} cannot be read ({e}); use `/plan` to plan it again.",
                    self.row.version
                ))
            })?;
            return RepoConfig::from_bound(&bound).map_err(|e| {
                Stop::Fail(format!(
                    "The settings recorded with contract v{} cannot be used ({e}); use `/plan` to plan it again.",
                    self.row.version
                ))
            });
        }
        match crate::forge::repo_config::load(self.forge, &self.repo, Some(self.forge_kind)).await {
            Ok(c) => Ok(c),
            Err(LoadError::Config(e)) => Err(Stop::Fail(format!(
                "The repository's settings are not valid.\n\n{e}"
            ))),
            Err(LoadError::Forge(e)) => Err(e.into()),
        }
    }

    async fn run(&self, state: SessionState) -> Result<(), Stop> {
        let config = self.config().await?;
        let max_attempts = self
            .contract
            .routing
            .max_attempts
            .unwrap_or(config.max_attempts)
            .max(1);
        let mut conn = self.writer().await?;
        let abandoned = runs::abandon_running(&mut conn, &self.id).await?;
        let earlier = runs::for_version(&mut conn, &self.id, self.row.version).await?;
        drop(conn);
        if abandoned > 0 {
            warn!(
                runs = abandoned,
                "runs left by a stopped process were abandoned"
            );
        }
        if state == SessionState::Publishing {
            return self.resume_publishing(&config, &earlier).await;
        }
        // Verified and recorded, then stopped before the move: publish that result.
        if state == SessionState::Verifying
            && earlier
                .last()
                .is_some_and(|r| r.state == RunState::Verified)
        {
            self.move_to(SessionState::Verifying, SessionState::Publishing, None)
                .await?;
            return self.resume_publishing(&config, &earlier).await;
        }
        if state == SessionState::Verifying {
            self.move_to(SessionState::Verifying, SessionState::Executing, None)
                .await?;
        }
        // An attempt a restart interrupted was not the executor's failure.
        let used = earlier
            .iter()
            .filter(|r| r.retired == 0 && r.state != RunState::Abandoned)
            .count();
        let used = u32::try_from(used).unwrap_or(u32::MAX);
        if used >= max_attempts {
            return Err(Stop::Fail(format!(
                "Contract v{} has used all {max_attempts} of its attempts.",
                self.row.version
            )));
        }
        let Some(sandbox) = self.app.sandbox.clone() else {
            return Err(Stop::Fail(
                "planwright cannot run executors here: bubblewrap is not available on this \
                 host (`planwright doctor` says why). Executors run only in the sandbox, or \
                 with SANDBOX=none and UNSAFE_NO_SANDBOX=1 set by the operator."
                    .into(),
            ));
        };
        self.attempts(&config, sandbox, used, max_attempts).await
    }

    /// The branch of the session's first run, or a new one named after the issue.
    async fn branch(&self) -> Result<String, Stop> {
        let mut conn = self.reader().await?;
        if let Some(branch) = runs::branch_of_session(&mut conn, &self.id).await? {
            return Ok(branch);
        }
        drop(conn);
        let title = match self.forge.issue(&self.repo, self.issue).await {
            Ok(issue) => issue.title,
            Err(e) if !e.is_retryable() => String::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(crate::git::branch_name(self.issue, &title))
    }

    fn mirror(&self) -> Result<MirrorKey, Stop> {
        MirrorKey::new(self.forge_kind.as_str(), self.repo.clone())
            .map_err(|e| Stop::Job(JobError::Permanent(e.into())))
    }

    /// A checkout of `start` on `branch`.
    async fn workspace(&self, branch: &str, start: &str) -> Result<Workspace, Stop> {
        let request = WorkspaceRequest {
            mirror: self.mirror()?,
            remote: self.forge.git_remote(&self.repo).await?,
            base: CommitSha(start.to_owned()),
            issue: self.issue,
            title: String::new(),
        };
        match self.app.workspaces.create_on(&request, branch).await {
            Ok(w) => Ok(w),
            Err(e @ crate::git::WorkspaceError::Fetch { refused: false, .. }) => {
                Err(Stop::Job(JobError::Retryable(e.into())))
            }
            Err(e) => Err(Stop::Fail(format!(
                "Could not check out the commit {start}: {e}"
            ))),
        }
    }

    async fn attempts(
        &self,
        config: &RepoConfig,
        sandbox: Arc<dyn Sandbox>,
        used: u32,
        max_attempts: u32,
    ) -> Result<(), Stop> {
        let mut timings = Timings::default();
        let started = Instant::now();
        let branch = self.branch().await?;
        // A later round (`/revise` on the pull request) continues from what the session
        // pushed, so the branch only moves forward; the baseline is always the base.
        let mut conn = self.reader().await?;
        let start = runs::published_head(&mut conn, &self.id)
            .await?
            .unwrap_or_else(|| self.row.base_sha.clone());
        drop(conn);
        let (result, baseline_ws) = tokio::join!(
            self.workspace(&branch, &start),
            self.workspace(&branch, &self.row.base_sha)
        );
        let (result, baseline_ws) = (result?, baseline_ws?);
        timings.record("workspaces", started);
        let runs_dir = self.app.settings.data_dir.join("runs");
        let plan = verify::Plan::new(&self.contract, config);
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
        let limits = executor::Limits {
            budget,
            ..executor::Limits::default()
        };
        let kind = match routing.executor.as_deref() {
            None => config.executor,
            Some(name) => parse_executor(name).ok_or_else(|| {
                Stop::Fail(format!("The contract names the unknown executor `{name}`."))
            })?,
        };
        let mut baseline: Option<verify::RunSet> = None;
        let mut feedback: Option<Feedback> = None;
        // What verification wrote into the checkout: never part of a later result.
        let mut artifacts: HashSet<String> = HashSet::new();
        let names = self.app.forges.bot_names(self.forge_kind).await?;
        let author = self.author(names.first().map_or("planwright", String::as_str));
        let approved_by = self.row.approved_by.clone().unwrap_or_default();
        let message = publish::result_message(
            self.issue,
            &self.contract,
            self.version(),
            &self.hash,
            &approved_by,
        );
        let mut attempt = used + 1;
        loop {
            let run = RunId::generate();
            let records = runs_dir.join(run.as_str());
            let scratch = records.join("verify");
            create_open_dir(&scratch)?;
            // What the session has left: a coding agent's token is held to it, so
            // planning, reviews and earlier attempts count against the contract's budget.
            let spent = crate::store::model_usage::spent_by_session(&self.app.db, &self.id).await?;
            let left = Budget {
                max_microusd: budget.max_microusd.map(|m| m - spent.cost_microusd),
                max_tokens: budget
                    .max_tokens
                    .map(|t| t.saturating_sub(u64::try_from(spent.tokens).unwrap_or(0))),
            };
            if left.max_microusd.is_some_and(|m| m <= 0) || left.max_tokens == Some(0) {
                return Err(Stop::Fail(format!(
                    "The session has used its budget ({}) before attempt {attempt}. Nothing was pushed.",
                    budget_text(budget)
                )));
            }
            let executor = self.executor(kind, config, &sandbox, &run, budget, left)?;
            let mut conn = self.writer().await?;
            runs::insert(
                &mut conn,
                &runs::NewRun {
                    id: &run,
                    session: &self.id,
                    version: self.row.version,
                    attempt: i64::from(attempt),
                    executor: executor.name(),
                    branch: &branch,
                    workspace: &result.location().display().to_string(),
                },
            )
            .await?;
            drop(conn);
            self.status(
                SessionState::Executing,
                &format!(
                    "Carrying out contract v{} with the `{}` executor (attempt {attempt} of {max_attempts}).",
                    self.row.version,
                    executor.name()
                ),
            )
            .await?;
            let limits = executor::Limits {
                budget: left,
                ..limits
            };
            let mut task =
                ExecutorTask::new(&result, &self.contract, records.join("executor"), limits);
            task.feedback = feedback.take();
            let verifier = Verifier::new(sandbox.clone(), scratch);
            let stage = Instant::now();
            let work = async {
                match baseline.take() {
                    Some(b) => (executor.run(&task).await, Ok(b)),
                    // The base's checks need no result: they run beside the executor.
                    None => {
                        tokio::join!(
                            executor.run(&task),
                            verifier.baseline(&plan, &baseline_ws, run.as_str())
                        )
                    }
                }
            };
            // A session cancelled meanwhile stops the executor: its sandbox dies with
            // the dropped future, and nothing is pushed.
            let (report, base) = tokio::select! {
                done = work => done,
                () = self.until_cancelled() => {
                    self.finish_run(&run, RunState::Failed, Some("cancelled"), None).await?;
                    return Err(Stop::Gone);
                }
            };
            baseline = Some(base.map_err(|e| verify_stop(e, "the base commit"))?);
            timings.record("executor+baseline", stage);
            let report = match report {
                Ok(r) => r,
                Err(e) => {
                    self.finish_run(&run, RunState::Failed, Some(&e.to_string()), None)
                        .await?;
                    return Err(executor_stop(e));
                }
            };
            self.finish_run(&run, RunState::Running, Some(&report.summary), None)
                .await?;
            let stopped = match report.stop {
                StopReason::Finished => None,
                StopReason::Budget => Some(format!(
                    "The executor ran out of budget (limit {}).",
                    budget_text(budget)
                )),
                StopReason::Timeout => Some(format!(
                    "The executor did not finish within {} minutes and was stopped.",
                    limits.wall.as_secs() / 60
                )),
                StopReason::TurnLimit => Some(format!(
                    "The executor did not finish within its {} turns.",
                    limits.max_turns
                )),
                StopReason::Crashed => Some(format!(
                    "The executor stopped without finishing: {}",
                    first_line(&report.summary)
                )),
            };
            if let Some(reason) = stopped {
                self.finish_run(&run, RunState::Failed, None, None).await?;
                return Err(Stop::Fail(format!("{reason} Nothing was pushed.")));
            }
            let size = result
                .changed_bytes()
                .await
                .map_err(|e| Stop::Job(JobError::Permanent(e.into())))?;
            if size > RESULT_MAX_BYTES {
                self.finish_run(&run, RunState::Failed, None, None).await?;
                return Err(Stop::Fail(format!(
                    "The result is too large to publish: its added and changed files hold {} \
                     MiB, over the {} MiB a result may hold. Nothing was pushed.",
                    size >> 20,
                    RESULT_MAX_BYTES >> 20
                )));
            }
            let committed = result
                .commit_result(&message, &author, &artifacts)
                .await
                .map_err(|e| Stop::Job(JobError::Permanent(e.into())))?;
            if committed == result.base() {
                self.finish_run(&run, RunState::Failed, None, None).await?;
                return Err(Stop::Fail(
                    "The executor finished without changing anything. Nothing was pushed.".into(),
                ));
            }

            self.move_to(SessionState::Executing, SessionState::Verifying, None)
                .await?;
            self.status(
                SessionState::Verifying,
                &format!(
                    "Verifying attempt {attempt}: {} command(s) on the base and on the result.",
                    plan.checks.len() + plan.setup.len()
                ),
            )
            .await?;
            let diff = result
                .diff()
                .await
                .map_err(|e| Stop::Job(JobError::Permanent(e.into())))?;
            let stage = Instant::now();
            let Some(base_runs) = baseline.as_ref() else {
                return Err(Stop::Job(JobError::Permanent(anyhow::anyhow!(
                    "The baseline was not run with the first attempt"
                ))));
            };
            let verification = verifier
                .verify(&plan, &self.contract, base_runs, &result, run.as_str())
                .await
                .map_err(|e| verify_stop(e, "the result"))?;
            timings.record("verify", stage);
            artifacts.extend(
                result
                    .changed_since_tip()
                    .await
                    .map_err(|e| Stop::Job(JobError::Permanent(e.into())))?,
            );
            if verification.verdict == verify::Verdict::Refused {
                let outcome = serde_json::to_string(&verification)?;
                self.finish_run(&run, RunState::Failed, None, Some(&outcome))
                    .await?;
                let refused: Vec<String> = verification
                    .scope
                    .iter()
                    .filter(|f| f.severity == verify::Severity::Refused)
                    .map(|f| {
                        // The path is the executor's: a backtick in it must not open
                        // markdown that hides the rest of the list.
                        format!(
                            "- {} ({}): {}",
                            crate::markdown::code(&f.path, false),
                            f.change,
                            f.reason
                        )
                    })
                    .collect();
                return Err(Stop::Fail(format!(
                    "The result was refused, and nothing was pushed:\n\n{}",
                    refused.join("\n")
                )));
            }

            let stage = Instant::now();
            let reviewer = self
                .app
                .model(
                    ModelRole::Reviewer,
                    &self.id,
                    Budget {
                        max_microusd: budget.max_microusd,
                        max_tokens: None,
                    },
                    config.models.planner.as_ref(),
                )
                .map_err(|e| Stop::Fail(format!("{e:#}")))?;
            let compact = verification.compact();
            let verdict = review::review(
                reviewer.as_ref(),
                &ReviewRequest {
                    contract: &self.contract,
                    diff: &diff,
                    verification: &compact,
                    claim: &report.summary,
                },
            )
            .await
            .map_err(|e| match e {
                review::ReviewError::Model(ModelError::BudgetExceeded { spent, limit, .. }) => {
                    Stop::Fail(format!(
                        "The session used {spent} of its {limit} budget before the review."
                    ))
                }
                e => Stop::Hidden {
                    public: format!("Could not review the result: the reviewer's model call failed; {SEE_AUDIT}."),
                    detail: e.to_string(),
                },
            })?;
            timings.record("review", stage);
            // The contract's own commands define done: a failure they had on the base
            // too is no excuse, whatever the executor or the reviewer say.
            let unmet = unmet_commands(&self.contract, &verification);
            let passed = verification.verdict == verify::Verdict::Passed
                && unmet.is_empty()
                && verdict.accept;
            let failure = if passed {
                None
            } else if verification.verdict != verify::Verdict::Passed {
                Some(verification.headline())
            } else if !unmet.is_empty() {
                Some(format!(
                    "the contract's verification still fails: {}",
                    unmet
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            } else {
                Some(format!(
                    "the reviewer did not accept the result: {}",
                    first_line(&verdict.findings)
                ))
            };
            if failure.is_some() && attempt < max_attempts {
                let outcome = serde_json::to_string(&verification)?;
                self.finish_run(&run, RunState::Failed, None, Some(&outcome))
                    .await?;
                let instructions = if verdict.instructions.trim().is_empty() {
                    format!(
                        "Make verification pass: {}",
                        failure.as_deref().unwrap_or_default()
                    )
                } else {
                    verdict.instructions.clone()
                };
                feedback = Some(Feedback {
                    instructions,
                    verification: compact,
                });
                self.move_to(SessionState::Verifying, SessionState::Executing, None)
                    .await?;
                attempt += 1;
                continue;
            }
            let outcome = RunOutcome {
                verification,
                accepted: verdict.accept,
                findings: verdict.findings,
                failure,
                attempts: attempt,
                max_attempts,
            };
            let text = serde_json::to_string(&outcome)?;
            self.finish_run(&run, RunState::Verified, None, Some(&text))
                .await?;
            self.move_to(SessionState::Verifying, SessionState::Publishing, None)
                .await?;
            if let Err(e) = baseline_ws.finish(Outcome::Succeeded).await {
                warn!(error = %e, "could not remove the baseline's workspace");
            }
            let stage = Instant::now();
            let published = self.publish(config, &run, result, &outcome).await;
            timings.record("publish", stage);
            timings.log(&self.id);
            // Kept whatever publishing came to: how long each stage took is for the
            // operator (and the overhead benchmark) to read.
            self.audit(
                "execution.timed",
                serde_json::json!({ "run": run, "attempts": attempt, "stages_ms": timings.json() }),
            )
            .await?;
            return published;
        }
    }

    /// Publishing again after a restart: the verified run's workspace, if it is still there.
    async fn resume_publishing(
        &self,
        config: &RepoConfig,
        earlier: &[runs::RunRow],
    ) -> Result<(), Stop> {
        let lost = || {
            Stop::Fail(
                "The verified result was lost before it could be published (planwright \
                 restarted and its workspace is gone). Use `/retry` to carry out the \
                 contract again."
                    .into(),
            )
        };
        let Some(run) = earlier
            .iter()
            .rev()
            .find(|r| r.state == RunState::Verified || r.state == RunState::Published)
        else {
            return Err(lost());
        };
        let (Some(dir), Some(branch), Some(text)) = (&run.workspace, &run.branch, &run.outcome)
        else {
            return Err(lost());
        };
        let outcome: RunOutcome = serde_json::from_str(text)
            .with_context(|| format!("The outcome of run {} is unreadable", run.id))
            .map_err(|e| Stop::Job(JobError::Permanent(e)))?;
        if run.state == RunState::Published {
            // Published before the process stopped: only the session's move is left.
            return match &outcome.failure {
                None => {
                    self.move_to(SessionState::Publishing, SessionState::PrOpened, None)
                        .await?;
                    let mut conn = self.reader().await?;
                    let pull = sessions::get(&mut conn, &self.id)
                        .await?
                        .and_then(|s| s.pull_number);
                    drop(conn);
                    let text = match pull {
                        Some(n) => format!("Pull request #{n} is open: verification passed and the reviewer accepted it."),
                        None => "The pull request is open: verification passed and the reviewer accepted it.".to_owned(),
                    };
                    self.status(SessionState::PrOpened, &text).await
                }
                Some(reason) => Err(Stop::Fail(format!(
                    "The run did not pass ({reason}); its report was published."
                ))),
            };
        }
        let workspace = self
            .app
            .workspaces
            .reopen(
                Path::new(dir),
                &self.mirror()?,
                branch,
                &CommitSha(self.row.base_sha.clone()),
            )
            .map_err(|e| Stop::Job(JobError::Permanent(e.into())))?;
        let Some(workspace) = workspace else {
            return Err(lost());
        };
        info!(run = %run.id, "publishing the verified result after a restart");
        self.publish(config, &run.id, workspace, &outcome).await
    }

    async fn publish(
        &self,
        config: &RepoConfig,
        run: &RunId,
        workspace: Workspace,
        outcome: &RunOutcome,
    ) -> Result<(), Stop> {
        let result = match &outcome.failure {
            None => RunResult::Succeeded,
            Some(reason) => RunResult::Failed {
                reason: reason.clone(),
            },
        };
        self.status(
            SessionState::Publishing,
            match result {
                RunResult::Succeeded => "Verification passed; opening the pull request.",
                RunResult::Failed { .. } => "The run did not pass; publishing its report.",
            },
        )
        .await?;
        let names = self.app.forges.bot_names(self.forge_kind).await?;
        let author = self.author(names.first().map_or("planwright", String::as_str));
        let links = super::flow::source_links(&self.app, self.forge_kind, &self.repo);
        let contract_url = self
            .row
            .comment_url
            .clone()
            .or_else(|| comment_url(&links, self.issue, self.row.comment_id.as_deref()));
        let verification = outcome.verification.for_publication();
        let review = publish::Review {
            accepted: outcome.accepted,
            findings: outcome.findings.clone(),
        };
        let approved_by = self.row.approved_by.clone().unwrap_or_default();
        let publication = Publication {
            forge: self.forge_kind,
            repo: &self.repo,
            issue: self.issue,
            session: &self.id,
            contract: &self.contract,
            version: self.version(),
            hash: &self.hash,
            contract_url: contract_url.as_deref(),
            approved_by: &approved_by,
            base_branch: &self.row.base_branch,
            verification: &verification,
            review: Some(&review),
            attempts: outcome.attempts,
            max_attempts: outcome.max_attempts,
            result: &result,
            on_failure: config.on_failure,
            author: &author,
        };
        let published =
            match publish::publish(self.forge, &self.app.db, &workspace, &publication).await {
                Ok(p) => p,
                Err(e) if e.is_retryable() => {
                    // The workspace stays (dropped unfinished) for the job's next attempt.
                    return Err(Stop::Job(JobError::Retryable(e.into())));
                }
                Err(PublishError::Push(PushError {
                    branch,
                    failure: PushFailure::Rejected,
                    message,
                    ..
                })) => {
                    return Err(Stop::Fail(format!(
                        "The forge refused the push to `{branch}` ({message}). planwright never \
                     overwrites a branch holding commits it did not make; delete the branch \
                     or use `/retry` after moving it."
                    )));
                }
                Err(e) => {
                    return Err(Stop::Hidden {
                        public: format!("Could not publish the result: {SEE_AUDIT}."),
                        detail: e.to_string(),
                    });
                }
            };
        let mut conn = self.writer().await?;
        if let Published::Pull { commit, pull } = &published {
            runs::set_head(&mut conn, run, commit.as_str()).await?;
            sessions::set_pull(&mut conn, &self.id, pull.number).await?;
        }
        runs::update(&mut conn, run, RunState::Published, None, None).await?;
        drop(conn);
        if let Err(e) = workspace.finish(Outcome::Succeeded).await {
            warn!(error = %e, "could not remove the run's workspace");
        }
        match (&result, &published) {
            (RunResult::Succeeded, Published::Pull { pull, .. }) => {
                self.move_to(SessionState::Publishing, SessionState::PrOpened, None)
                    .await?;
                self.audit(
                    "pull.opened",
                    serde_json::json!({"number": pull.number.0, "url": pull.url, "run": run}),
                )
                .await?;
                self.status(
                    SessionState::PrOpened,
                    &format!(
                        "Pull request [#{}]({}) is open: verification passed and the reviewer accepted it.",
                        pull.number.0, pull.url
                    ),
                )
                .await?;
                Ok(())
            }
            (RunResult::Failed { reason }, Published::Pull { pull, .. }) => {
                Err(Stop::Fail(format!(
                    "The run did not pass ({reason}). A draft pull request shows what was done: [#{}]({}).",
                    pull.number.0, pull.url
                )))
            }
            (RunResult::Failed { reason }, Published::Comment { .. }) => Err(Stop::Fail(format!(
                "The run did not pass ({reason}). The report is in the comment below; nothing was pushed."
            ))),
            (RunResult::Succeeded, Published::Comment { .. }) => Err(Stop::Job(
                JobError::Permanent(anyhow::anyhow!("A passing run was published as a comment")),
            )),
        }
    }

    fn author(&self, login: &str) -> Author {
        let host = match self.forge_kind {
            event::ForgeKind::Github => "users.noreply.github.com".to_owned(),
            event::ForgeKind::Gitlab => {
                let url = self.app.settings.gitlab.url.as_deref().unwrap_or_default();
                let host = reqwest::Url::parse(url)
                    .ok()
                    .and_then(|u| u.host_str().map(str::to_owned))
                    .unwrap_or_else(|| "gitlab.com".to_owned());
                format!("noreply.{host}")
            }
            event::ForgeKind::Local => "localhost".to_owned(),
        };
        Author {
            name: login.to_owned(),
            email: format!("{login}@{host}"),
        }
    }

    fn executor(
        &self,
        kind: ExecutorKind,
        config: &RepoConfig,
        sandbox: &Arc<dyn Sandbox>,
        run: &RunId,
        budget: Budget,
        left: Budget,
    ) -> Result<Box<dyn Executor>, Stop> {
        let proxy = self.app.model_proxy.as_ref().and_then(|p| match &p.listen {
            ProxyListen::Unix(socket) => Some(ProxyAccess {
                socket: socket.clone(),
                capabilities: p.capabilities.clone(),
                run: run.clone(),
                session: self.id.clone(),
            }),
            ProxyListen::Tcp(_) => None,
        });
        let choice = match &self.contract.routing.model {
            Some(name) => Some(crate::ids::ModelName::parse(name).map_err(|e| {
                Stop::Fail(format!("The contract's executor model cannot be used: {e}"))
            })?),
            None => config.executor_model(self.contract.routing.risk).cloned(),
        };
        match kind {
            ExecutorKind::Builtin => {
                let model = self
                    .app
                    .model_for_run(
                        ModelRole::Executor,
                        &self.id,
                        run,
                        budget,
                        left,
                        choice.as_ref(),
                    )
                    .map_err(|e| Stop::Fail(format!("{e:#}")))?;
                Ok(Box::new(Builtin::new(model, sandbox.clone())))
            }
            ExecutorKind::Command => {
                let line = config.executor_command.clone().unwrap_or_default();
                CommandExecutor::new(line, sandbox.clone(), proxy)
                    .map(|e| Box::new(e) as Box<dyn Executor>)
                    .map_err(|e| Stop::Fail(e.to_string()))
            }
            ExecutorKind::ClaudeCode | ExecutorKind::Codex => {
                let (cli, provider) = if kind == ExecutorKind::ClaudeCode {
                    (AgentCli::ClaudeCode, Provider::Anthropic)
                } else {
                    (AgentCli::Codex, Provider::OpenAi)
                };
                let Some(proxy) = proxy else {
                    return Err(Stop::Fail(format!(
                        "The `{}` executor reaches models through the model proxy's Unix \
                         socket, and this planwright serves none (set MODEL_PROXY_SOCKET).",
                        cli.name()
                    )));
                };
                let Some(program) = executor::agent::locate(cli) else {
                    return Err(Stop::Fail(format!(
                        "The `{}` executor is not installed here: `{}` is neither on PATH \
                         nor in /opt/planwright-agents/bin (scripts/install-agents installs it).",
                        cli.name(),
                        cli.program_name()
                    )));
                };
                let name = self
                    .app
                    .model_name(ModelRole::Executor, choice.as_ref())
                    .map_err(|e| Stop::Fail(format!("{e:#}")))?;
                if name.provider != provider {
                    return Err(Stop::Fail(format!(
                        "The `{}` executor cannot use `{name}`: it speaks to {} models only.",
                        cli.name(),
                        match provider {
                            Provider::Anthropic => "Anthropic",
                            Provider::OpenAi => "OpenAI",
                        }
                    )));
                }
                Ok(Box::new(AgentExecutor::new(
                    cli,
                    program,
                    name.model,
                    sandbox.clone(),
                    proxy,
                )))
            }
        }
    }

    async fn finish_run(
        &self,
        run: &RunId,
        state: RunState,
        report: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        runs::update(&mut conn, run, state, report, outcome).await?;
        Ok(())
    }

    /// Returns once the session is no longer executing (a maintainer cancelled it).
    async fn until_cancelled(&self) {
        let mut every = tokio::time::interval(CANCEL_POLL);
        loop {
            every.tick().await;
            let Ok(mut conn) = self.app.db.pool.acquire().await else {
                continue;
            };
            if let Ok(Some(row)) = sessions::get(&mut conn, &self.id).await
                && row.state == SessionState::Cancelled
            {
                return;
            }
        }
    }

    /// Moves the session on; [`Stop::Gone`] when it was moved elsewhere first (cancelled).
    async fn move_to(
        &self,
        from: SessionState,
        to: SessionState,
        failure: Option<&str>,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        if sessions::move_state(&mut conn, &self.id, from, to, failure).await? {
            Ok(())
        } else {
            info!(from = %from, to = %to, "the session moved on; execution stops");
            Err(Stop::Gone)
        }
    }

    async fn audit(&self, action: &str, detail: serde_json::Value) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        audit::append(
            &mut conn,
            &audit::Entry {
                actor: "planwright",
                action,
                session: Some(self.id.as_str()),
                delivery: None,
                detail,
            },
        )
        .await?;
        Ok(())
    }

    async fn status(&self, state: SessionState, text: &str) -> Result<(), Stop> {
        let mut conn = self.reader().await?;
        let Some(row) = sessions::get(&mut conn, &self.id).await? else {
            return Err(Stop::Gone);
        };
        drop(conn);
        update_status(&self.app, self.forge, &row, state, text).await?;
        Ok(())
    }
}

/// Fails the session from whichever execution stage it is in, and says why.
async fn fail(app: &App, forge: &dyn Forge, id: &SessionId, reason: &str) -> Result<(), JobError> {
    fail_detailed(app, forge, id, reason, None).await
}

/// As [`fail`], with `detail` kept in the audit log only.
async fn fail_detailed(
    app: &App,
    forge: &dyn Forge,
    id: &SessionId,
    reason: &str,
    detail: Option<&str>,
) -> Result<(), JobError> {
    let mut conn = app.db.pool.acquire().await?;
    let Some(row) = sessions::get(&mut conn, id).await? else {
        return Ok(());
    };
    drop(conn);
    let from = row.state;
    if !matches!(
        from,
        SessionState::Executing | SessionState::Verifying | SessionState::Publishing
    ) {
        return Ok(());
    }
    let mut tx = app.db.writer.begin().await?;
    let moved = sessions::move_state(&mut tx, id, from, SessionState::Failed, Some(reason)).await?;
    if moved {
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: "planwright",
                action: "session.failed",
                session: Some(id.as_str()),
                delivery: None,
                detail: serde_json::json!({ "reason": reason, "stage": from.as_str(), "detail": detail }),
            },
        )
        .await?;
    }
    tx.commit().await?;
    if moved {
        warn!(session = %id, reason, "session failed");
        // The failure is recorded: a status comment that cannot be written must not send
        // the job round again, where it could meet a session `/retry` already restarted.
        if let Err(e) = update_status(
            app,
            forge,
            &row,
            SessionState::Failed,
            &format!("{reason}\n\nUse `/retry` to carry out the contract again, or `/plan` to start over."),
        )
        .await
        {
            warn!(session = %id, error = %format!("{e:?}"), "could not say on the issue that the session failed");
        }
    }
    Ok(())
}

fn executor_stop(e: ExecutorError) -> Stop {
    match e {
        e if e.is_retryable() => Stop::Job(JobError::Retryable(e.into())),
        // The provider's answer is its own text; the budget is planwright's.
        ExecutorError::Model(ref m) if !matches!(m, ModelError::BudgetExceeded { .. }) => {
            Stop::Hidden {
                public: format!(
                    "The executor's model call failed; {SEE_AUDIT}. Nothing was pushed."
                ),
                detail: e.to_string(),
            }
        }
        e => Stop::Fail(format!("{e}. Nothing was pushed.")),
    }
}

fn verify_stop(e: VerifyError, on: &str) -> Stop {
    match e {
        VerifyError::Sandbox(crate::sandbox::SandboxError::Internal(e)) => {
            Stop::Job(JobError::Retryable(e))
        }
        e => Stop::Fail(format!("Could not verify {on}: {e}")),
    }
}

/// The contract's verification commands that did not succeed on the result.
fn unmet_commands(contract: &Contract, report: &verify::VerificationReport) -> Vec<String> {
    let same = |a: &str, b: &str| a.split_whitespace().eq(b.split_whitespace());
    contract
        .verification
        .commands
        .iter()
        .filter(|wanted| {
            report.commands.iter().any(|c| {
                c.phase == verify::Phase::Check && same(&c.command, wanted) && !c.after.succeeded()
            })
        })
        .map(|c| c.trim().to_owned())
        .collect()
}

fn parse_executor(name: &str) -> Option<ExecutorKind> {
    [
        ExecutorKind::Builtin,
        ExecutorKind::ClaudeCode,
        ExecutorKind::Codex,
        ExecutorKind::Command,
    ]
    .into_iter()
    .find(|k| k.as_str() == name.trim())
}

fn budget_text(budget: Budget) -> String {
    match (budget.max_microusd, budget.max_tokens) {
        (Some(m), _) => format!("${:.2}", m as f64 / 1_000_000.0),
        (None, Some(t)) => format!("{t} tokens"),
        (None, None) => "none".into(),
    }
}

fn first_line(text: &str) -> &str {
    text.trim().lines().next().unwrap_or_default().trim()
}

/// A folder of the run's records, open to the unprivileged user sandboxes run as (the
/// setup phase's egress socket is made there).
fn create_open_dir(dir: &PathBuf) -> Result<(), Stop> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
        .with_context(|| format!("Could not create {}", dir.display()))
        .map_err(|e| Stop::Job(JobError::Retryable(e)))
}
