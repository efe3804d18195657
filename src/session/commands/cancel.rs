//! `/cancel`: ends the session wherever it may still be stopped; a running executor sees
//! the move and stops, and nothing is pushed.

use crate::session::comments;
use crate::session::context::{CommandContext, Done, move_or_refuse};
use crate::session::error::{Stop, UserError};
use crate::store::audit::AuditAction;
use crate::store::sessions::SessionRow;
use crate::store::state::SessionState;

fn decide(state: SessionState) -> Result<(), UserError> {
    if state.can_become(SessionState::Cancelled) {
        Ok(())
    } else {
        Err(UserError::Refused(comments::cannot_cancel(state)))
    }
}

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
) -> Result<Done, Stop> {
    decide(session.state)?;
    let to = SessionState::Cancelled;
    move_or_refuse(tx, &session.id, session.state, to, comments::raced()).await?;
    Ok(Done {
        action: AuditAction::SessionCancelled,
        detail: serde_json::json!({}),
        state: to,
        status: comments::cancelled_by(ctx.login()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionState::*;

    #[test]
    fn a_session_is_cancelled_unless_it_is_publishing_or_over() {
        for state in [Planning, AwaitingApproval, Executing, Verifying, Failed] {
            assert_eq!(decide(state), Ok(()), "{state}");
        }
        for state in [Publishing, PrOpened, Cancelled] {
            let Err(UserError::Refused(text)) = decide(state) else {
                panic!("cancelled while {state}");
            };
            assert!(text.contains("cannot be cancelled now"), "{text}");
        }
    }
}
