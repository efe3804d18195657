//! `/retry`: resumes a failed session at the stage that failed: planning again, carrying
//! out the approved contract again from the base, or publishing a verified result that was
//! never published.

use super::command::{CommandContext, Done, move_or_refuse};
use super::comments;
use super::dispatch::{enqueue_execute, enqueue_plan};
use super::error::{Stop, UserError};
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

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
    latest: Option<ContractRow>,
) -> Result<Done, Stop> {
    let (id, state) = (&session.id, session.state);
    let resume = resume_stage(state, session.resume_state)?;
    if resume == SessionState::Planning {
        move_or_refuse(tx, id, state, resume, comments::raced()).await?;
        let version = latest.map_or(1, |c| c.version + 1);
        enqueue_plan(tx, id, version, None).await?;
        return Ok(Done {
            action: "session.retried",
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
    let last_run = runs::for_version(tx, id, contract.version)
        .await?
        .last()
        .map(|r| r.state);
    let to = execution_stage(resume, last_run);
    move_or_refuse(tx, id, state, to, comments::raced()).await?;
    runs::retire(tx, id, contract.version).await?;
    enqueue_execute(tx, id, &contract).await?;
    Ok(Done {
        action: "session.retried",
        detail: serde_json::json!({ "resume": to.as_str(), "version": contract.version }),
        state: to,
        status: comments::carrying_out_again(contract.version, ctx.login()),
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
