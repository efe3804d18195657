//! The execute job: carries out exactly the approved contract version and proves the
//! result. The executor works in one workspace while the baseline runs in another; the
//! result is verified against it, reviewed, sent back with instructions while attempts
//! remain, and published as a pull request (a draft or a report when it failed). Every
//! attempt is a `runs` row; a restarted job abandons what a dead process left running and
//! resumes publishing from the very workspace that was verified. `attempt.rs` holds the
//! attempts' steps, `choose.rs` which executor runs, `publish.rs` the way out.

mod attempt;
mod choose;
mod execution;
pub(in crate::session) mod ladder;
mod partial;
mod publish;

use execution::Execution;

use partial::LeftBehind;

pub(in crate::session) use partial::continuation_of;

use std::sync::Arc;

use tracing::{Instrument as _, info, warn};

use crate::app::App;
use crate::config::repo::BoundSettings;
use crate::contract::{Contract, ContractHash};
use crate::forge::Forge;
use crate::ids::SessionId;
use crate::jobs::JobError;
use crate::session::comments;
use crate::session::error::{Stop, UserError};
use crate::session::jobs::{ExecuteJob, JOB_ATTEMPTS, JobEnd};
use crate::session::status::update_status;
use crate::store::audit::AuditAction;
use crate::store::runs::{self, RunState};
use crate::store::state::SessionState;
use crate::store::{audit, sessions};
use crate::verify;

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

impl Execution<'_> {
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
        // Each verified failure (a run that failed with its verification recorded) climbed
        // one rung of the ladder.
        let climbed = earlier
            .iter()
            .filter(|r| r.retired == 0 && r.state == RunState::Failed)
            .filter(|r| {
                r.outcome
                    .as_deref()
                    .is_some_and(|o| verify::StoredOutcome::parse(o).verification().is_some())
            })
            .count();
        self.attempts(&config, &choice, sandbox, used, max_attempts, climbed)
            .await
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
