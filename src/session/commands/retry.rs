//! `/retry`: resumes a failed session at the stage that failed: planning again, carrying
//! out the approved contract again from the base, or publishing a verified result that was
//! never published. `/retry continue` carries the contract out from the unfinished change
//! a stopped run kept instead.

use crate::contract::ContractVersion;
use crate::session::comments;
use crate::session::context::{CommandContext, Done, move_or_refuse};
use crate::session::error::{Stop, UserError};
use crate::session::jobs::{Continuation, enqueue_execute, enqueue_plan};
use crate::session::run::execute;
use crate::store::audit::AuditAction;
use crate::store::runs::{self, RunState};
use crate::store::sessions::{ContractRow, SessionRow};
use crate::store::state::SessionState;

/// The stage a failed session resumes at, from where it failed (`None`: planning).
fn resume_stage(
    state: SessionState,
    failed_at: Option<SessionState>,
) -> Result<SessionState, UserError> {
    if state != SessionState::Failed {
        return Err(UserError::Refused(comments::retry_not_failed(state)));
    }
    Ok(failed_at.unwrap_or(SessionState::Planning))
}

/// Where carrying out an approved contract again starts: publishing again only helps a
/// verified result that was never published; anything else is carried out again.
fn execution_stage(failed_at: SessionState, last_run: Option<RunState>) -> SessionState {
    if failed_at == SessionState::Publishing && last_run == Some(RunState::Verified) {
        SessionState::Publishing
    } else {
        SessionState::Executing
    }
}

/// The unfinished work `/retry continue` carries on from: what the version's last run kept.
fn continuation(last_run: Option<&runs::RunRow>) -> Result<Continuation, UserError> {
    last_run
        .and_then(execute::continuation_of)
        .ok_or_else(|| UserError::Refused(comments::nothing_to_continue()))
}

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
    latest: Option<ContractRow>,
    continues: bool,
) -> Result<Done, Stop> {
    let (id, state) = (&session.id, session.state);
    let resume = resume_stage(state, session.resume_state)?;
    if continues && resume == SessionState::Planning {
        return Err(UserError::Refused(comments::nothing_to_continue()).into());
    }
    if resume == SessionState::Planning {
        move_or_refuse(tx, id, state, resume, comments::raced()).await?;
        let version = latest.map_or(ContractVersion(1), |c| ContractVersion(c.version.0 + 1));
        enqueue_plan(tx, id, version, None).await?;
        return Ok(Done {
            action: AuditAction::SessionRetried,
            detail: serde_json::json!({ "resume": resume.as_str() }),
            state: resume,
            status: comments::retrying_planning(ctx.login()),
        });
    }
    // A later stage runs the approved contract again: a fresh attempt from the base, or
    // publishing the verified result if it is still there.
    let Some(contract) = latest.filter(|c| c.approved_by.is_some()) else {
        return Err(UserError::Refused(comments::no_approved_contract()).into());
    };
    let earlier = runs::for_version(tx, id, contract.version).await?;
    let last_run = earlier.last();
    // The same approval carries the work on: the contract version and its binding stay.
    let (to, continues, status) = if continues {
        let from = continuation(last_run)?;
        let status = comments::continuing(contract.version, from.commit.as_str(), ctx.login());
        (SessionState::Executing, Some(from), status)
    } else {
        let to = execution_stage(resume, last_run.map(|r| r.state));
        let status = comments::carrying_out_again(contract.version, ctx.login());
        (to, None, status)
    };
    move_or_refuse(tx, id, state, to, comments::raced()).await?;
    runs::retire(tx, id, contract.version).await?;
    let detail = serde_json::json!({
        "resume": to.as_str(),
        "version": contract.version,
        "continues": continues.as_ref().map(|c| &c.commit),
    });
    let ahead = enqueue_execute(tx, id, &contract, continues).await?;
    Ok(Done {
        action: AuditAction::SessionRetried,
        detail,
        state: to,
        status: format!("{status}{}", comments::runs_ahead(ahead)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionState::*;

    #[test]
    fn only_a_failed_session_resumes_and_at_the_stage_it_failed() {
        assert_eq!(resume_stage(Failed, None), Ok(Planning));
        assert_eq!(resume_stage(Failed, Some(Verifying)), Ok(Verifying));
        let Err(UserError::Refused(text)) = resume_stage(AwaitingApproval, None) else {
            panic!("a session that had not failed was retried");
        };
        assert!(text.contains("this one is awaiting approval"), "{text}");
    }

    #[test]
    fn publishing_is_resumed_only_for_a_verified_unpublished_run() {
        assert_eq!(
            execution_stage(Publishing, Some(RunState::Verified)),
            Publishing
        );
        assert_eq!(
            execution_stage(Publishing, Some(RunState::Published)),
            Executing
        );
        assert_eq!(execution_stage(Publishing, None), Executing);
        assert_eq!(
            execution_stage(Verifying, Some(RunState::Verified)),
            Executing
        );
        assert_eq!(
            execution_stage(Executing, Some(RunState::Failed)),
            Executing
        );
    }
}
