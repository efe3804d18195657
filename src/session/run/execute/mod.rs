//! The execute job: carries out exactly the approved contract version and proves the
//! result. The executor works in one workspace while the baseline runs in another; the
//! result is verified against it, reviewed, sent back with instructions while attempts
//! remain, and published as a pull request (a draft or a report when it failed). Every
//! attempt is a `runs` row; a restarted job abandons what a dead process left running and
//! resumes publishing from the very workspace that was verified. `attempt.rs` holds the
//! attempts' steps, `choose.rs` which executor runs, `publish.rs` the way out.

mod attempt;
mod choose;
mod partial;
mod publish;

use partial::LeftBehind;

pub(in crate::session) use partial::continuation_of;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use tracing::{Instrument as _, info, warn};

use crate::app::App;
use crate::config::environment::Choice;
use crate::config::repo::{BoundSettings, RepoConfig};
use crate::contract::{Contract, ContractHash, ContractVersion};
use crate::event::ForgeKind;
use crate::forge::Forge;
use crate::forge::repo_config::LoadError;
use crate::git::{MirrorKey, Workspace, WorkspaceRequest};
use crate::ids::{CommitSha, IssueNumber, RepoName, RunId, SessionId};
use crate::jobs::JobError;
use crate::session::checkout::Renewal;
use crate::session::comments;
use crate::session::error::{Stop, UserError};
use crate::session::jobs::{Continuation, ExecuteJob, JOB_ATTEMPTS, JobEnd};
use crate::session::status::update_status;
use crate::store::audit::AuditAction;
use crate::store::runs::{self, RunState};
use crate::store::state::SessionState;
use crate::store::{audit, sessions};
use crate::verify;

/// How often a running executor's session is looked at for a cancellation.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(2);

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

/// The execute job's handler; `attempt` is the job's, starting at 1. The round ends when
/// the run does, however it ends.
pub async fn execute_job(
    app: Arc<App>,
    execute: ExecuteJob,
    attempt: i64,
) -> Result<JobEnd, JobError> {
    let Some(session) = app.db.session(&execute.session).await? else {
        return Err(JobError::Permanent(anyhow::anyhow!(
            "Session {} does not exist",
            execute.session
        )));
    };
    let version = execute.version;
    let contract_row = app.db.contract(&execute.session, version).await?;
    let state = session.state;
    if !matches!(
        state,
        SessionState::Executing | SessionState::Verifying | SessionState::Publishing
    ) {
        info!(session = %execute.session, state = %state, "execute job no longer needed");
        return Ok(JobEnd::RoundGoesOn);
    }
    let forge_kind = session.forge;
    let repo = session.repo.clone();
    let forge = app.forges.get(forge_kind, session.installation_id)?;
    let span = tracing::info_span!("execute", session = %execute.session, repo = %repo, issue = session.issue_number.0, version = version.0);
    // Instrumented, not entered: a guard held across an await puts other tasks' log
    // lines under this span.
    async {
        let ctx = match contract_row {
            // What was approved is exactly what runs: the job carries the hash and base.
            Some(row)
                if row.sha256 == execute.sha256.as_str()
                    && row.base_sha == execute.base_sha.as_str()
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
                    last_try: attempt >= JOB_ATTEMPTS,
                    app: app.clone(),
                    forge: forge.as_ref(),
                    forge_kind,
                    repo: repo.clone(),
                    issue: session.issue_number,
                    id: session.id.clone(),
                    contract,
                    hash,
                    row,
                    continues: execute.continues.clone(),
                }
            }
            _ => {
                let reason = comments::contract_not_on_record(version, execute.sha256.as_str());
                fail(&app, forge.as_ref(), &session.id, &reason).await?;
                return Ok(JobEnd::RoundGoesOn);
            }
        };
        let ended = match ctx.run(state).await {
            Ok(()) | Err(Stop::Gone) => Ok(()),
            Err(Stop::User(UserError::Refused(reason) | UserError::Failed(reason))) => {
                fail(&app, forge.as_ref(), &ctx.id, &reason).await
            }
            Err(Stop::User(UserError::Hidden { public, detail })) => {
                fail_detailed(&app, forge.as_ref(), &ctx.id, &public, Some(&detail)).await
            }
            // A job that will not run again must not leave the session waiting for it.
            Err(Stop::Job(e)) if attempt >= JOB_ATTEMPTS || !e.is_retryable() => {
                let reason = comments::could_not_continue();
                fail_detailed(&app, forge.as_ref(), &ctx.id, &reason, Some(&e.message())).await?;
                return Err(e);
            }
            Err(Stop::Job(e)) => return Err(e),
        };
        ended?;
        // The run has ended: a review that waited for it starts the next round.
        Ok(JobEnd::RoundEnded)
    }
    .instrument(span)
    .await
}

struct Execution<'a> {
    app: Arc<App>,
    forge: &'a dyn Forge,
    forge_kind: ForgeKind,
    repo: RepoName,
    issue: IssueNumber,
    id: SessionId,
    contract: Contract,
    hash: ContractHash,
    row: sessions::ContractRow,
    /// The job queue will not run this job again.
    last_try: bool,
    /// `/retry continue`: the unfinished work this execution carries on from.
    continues: Option<Continuation>,
}

impl Execution<'_> {
    async fn writer(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.writer.acquire().await?)
    }

    async fn reader(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.pool.acquire().await?)
    }

    fn version(&self) -> ContractVersion {
        self.row.version
    }

    /// The settings the approval bound (the base commit's, recorded at planning) and the
    /// environment chosen with them; a contract planned before they were recorded reads
    /// them now, and one planned before environments runs on the host.
    async fn settings(&self) -> Result<(RepoConfig, Choice), Stop> {
        if let Some(json) = self.row.settings.as_deref() {
            let bound: BoundSettings = serde_json::from_str(json).map_err(|e| {
                Stop::fail(comments::bound_settings_unreadable(self.row.version, &e))
            })?;
            let config = RepoConfig::from_bound(&bound)
                .map_err(|e| Stop::fail(comments::bound_settings_unusable(self.row.version, &e)))?;
            let choice = match (bound.chosen, &bound.environment.image) {
                (Some(choice), _) => choice,
                // Planned before environments were chosen, with an image named: running it
                // on the host would not be what the contract showed.
                (None, Some(image)) => {
                    let text = comments::planned_before_environments(self.row.version, image);
                    return Err(Stop::fail(text));
                }
                (None, None) => Choice::host(Vec::new()),
            };
            return Ok((config, choice));
        }
        match crate::forge::repo_config::load(self.forge, &self.repo).await {
            Ok(c) => Ok((c, Choice::host(Vec::new()))),
            Err(LoadError::Config(e)) => Err(Stop::fail(comments::settings_invalid(&e))),
            Err(LoadError::Forge(e)) => Err(e.into()),
        }
    }

    async fn run(&self, state: SessionState) -> Result<(), Stop> {
        let (config, choice) = self.settings().await?;
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
            return self.resume_publishing(&config, &choice, &earlier).await;
        }
        // Verified and recorded, then stopped before the move: publish that result.
        if state == SessionState::Verifying
            && earlier
                .last()
                .is_some_and(|r| r.state == RunState::Verified)
        {
            self.move_to(SessionState::Verifying, SessionState::Publishing, None)
                .await?;
            return self.resume_publishing(&config, &choice, &earlier).await;
        }
        // Unfinished work a stopped job or process left is kept before anything runs
        // again: a failed attempt's ends the session as its job would have. An attempt a
        // restart interrupted did not end: it runs again, and nothing of it is published.
        let protected = verify::Plan::new(&self.contract, &config).protected;
        for run in earlier.iter().filter(|r| r.retired == 0) {
            let left = LeftBehind {
                protected: &protected,
                choice: &choice,
                on_failure: config.on_failure,
                max_attempts,
            };
            let Some(text) = self.keep_left_behind(run, &left).await? else {
                continue;
            };
            if run.state == RunState::Failed {
                return Err(Stop::fail(text));
            }
            info!(run = %run.id, outcome = %text, "what an interrupted attempt changed was looked after");
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
            let text = comments::attempts_used(self.row.version, max_attempts);
            return Err(Stop::fail(text));
        }
        let Some(sandbox) = self.app.sandbox.clone() else {
            return Err(Stop::fail(comments::no_sandbox()));
        };
        self.attempts(&config, &choice, sandbox, used, max_attempts)
            .await
    }

    /// The branch of the session's first run, or a new one named after the issue.
    async fn branch(&self) -> Result<String, Stop> {
        let mut conn = self.reader().await?;
        if let Some(branch) = runs::branch_of_session(&mut conn, &self.id).await? {
            return Ok(branch);
        }
        // The title as the session recorded it at the start: no request, and the branch
        // name does not follow later edits.
        let recorded = sessions::issue_snapshot(&mut conn, &self.id).await?;
        drop(conn);
        let title = match recorded {
            Some((title, _)) => title,
            None => match self.forge.issue(&self.repo, self.issue).await {
                Ok(issue) => issue.title,
                Err(e) if !e.is_retryable() => String::new(),
                Err(e) => return Err(e.into()),
            },
        };
        Ok(crate::git::branch_name(self.issue, &title))
    }

    fn mirror(&self) -> Result<MirrorKey, Stop> {
        MirrorKey::new(self.forge_kind.as_str(), self.repo.clone()).map_err(Stop::permanent)
    }

    /// A checkout of `start` on `branch`.
    async fn workspace(&self, branch: &str, start: &str) -> Result<Workspace, Stop> {
        let mirror = self.mirror()?;
        let mut request = WorkspaceRequest {
            size: crate::session::checkout::mirror_size(&self.app, self.forge, &mirror).await?,
            mirror,
            remote: self.forge.git_remote(&self.repo).await?,
            base: CommitSha(start.to_owned()),
            issue: self.issue,
            title: String::new(),
        };
        let mut renewal = Renewal::new(self.forge, &self.repo);
        let created = loop {
            let created = self.app.workspaces.create_on(&request, branch).await;
            match renewal.after(&created).await? {
                Some(renewed) => request.remote = renewed,
                None => break created,
            }
        };
        match created {
            Ok(w) => Ok(w),
            Err(e @ crate::git::WorkspaceError::Fetch { refused: false, .. }) => {
                Err(Stop::retryable(e))
            }
            Err(e) => Err(Stop::fail(comments::checkout_failed(start, &e))),
        }
    }

    /// Makes `workspace`'s result go on top of `head`, what the session's branch holds.
    async fn stack_on(&self, workspace: &mut Workspace, head: &str) -> Result<(), Stop> {
        let mut remote = self.forge.git_remote(&self.repo).await?;
        let head = CommitSha(head.to_owned());
        let mirror = self.mirror()?;
        let mut renewal = Renewal::new(self.forge, &self.repo);
        let stacked = loop {
            let stacked = self
                .app
                .workspaces
                .stack_on(workspace, &mirror, &remote, &head)
                .await;
            match renewal.after(&stacked).await? {
                Some(renewed) => remote = renewed,
                None => break stacked,
            }
        };
        match stacked {
            Ok(()) => Ok(()),
            Err(e @ crate::git::WorkspaceError::Fetch { refused: false, .. }) => {
                Err(Stop::retryable(e))
            }
            Err(e) => Err(Stop::fail(comments::checkout_failed(head.as_str(), &e))),
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

    async fn audit(&self, action: AuditAction, detail: serde_json::Value) -> Result<(), Stop> {
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
        let Some(row) = self.app.db.session(&self.id).await? else {
            return Err(Stop::Gone);
        };
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
    let Some(row) = app.db.session(id).await? else {
        return Ok(());
    };
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
                action: AuditAction::SessionFailed,
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
            &comments::execution_failed(reason),
        )
        .await
        {
            warn!(session = %id, error = %format!("{e:?}"), "could not say on the issue that the session failed");
        }
    }
    Ok(())
}

/// A folder of the run's records, open to the unprivileged user sandboxes run as (the
/// setup phase's egress socket is made there).
fn create_open_dir(dir: &PathBuf) -> Result<(), Stop> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
        .with_context(|| format!("Could not create {}", dir.display()))
        .map_err(Stop::retryable)
}
