//! `/plan`: starts planning over from the issue as it is now, forgetting what the planner
//! learned, while a contract awaits approval or after a failure. With no session on the
//! issue it starts one (see `start.rs`).

use crate::contract::ContractVersion;
use crate::forge::Issue;
use crate::session::comments;
use crate::session::context::{CommandContext, Done, move_or_refuse};
use crate::session::error::{Stop, UserError};
use crate::session::jobs::enqueue_plan;
use crate::store::audit::AuditAction;
use crate::store::sessions::{self, ContractRow, SessionRow};
use crate::store::state::SessionState;

fn decide(state: SessionState) -> Result<(), UserError> {
    if matches!(
        state,
        SessionState::AwaitingAnswer | SessionState::AwaitingApproval | SessionState::Failed
    ) {
        Ok(())
    } else {
        Err(UserError::Refused(comments::replan_not_now(state)))
    }
}

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
    latest: Option<ContractRow>,
    issue_now: Option<Issue>,
) -> Result<Done, Stop> {
    decide(session.state)?;
    let id = &session.id;
    let to = SessionState::Planning;
    move_or_refuse(tx, id, session.state, to, comments::raced()).await?;
    sessions::save_dossier(tx, id, None).await?;
    if let Some(now) = &issue_now {
        sessions::set_issue_snapshot(tx, id, &now.title, &now.body).await?;
    }
    let version = latest.map_or(ContractVersion(1), |c| ContractVersion(c.version.0 + 1));
    enqueue_plan(tx, id, version, None).await?;
    Ok(Done {
        action: AuditAction::SessionReplanned,
        detail: serde_json::json!({ "version": version }),
        state: to,
        status: comments::replanning(ctx.login()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionState::*;

    #[test]
    fn planning_starts_over_only_when_nothing_is_running() {
        assert_eq!(decide(AwaitingAnswer), Ok(()));
        assert_eq!(decide(AwaitingApproval), Ok(()));
        assert_eq!(decide(Failed), Ok(()));
        for state in [
            Planning, Executing, Verifying, Publishing, PrOpened, Cancelled,
        ] {
            let Err(UserError::Refused(text)) = decide(state) else {
                panic!("planning started over while {state}");
            };
            assert!(text.contains(state.describe()), "{text}");
        }
    }
}
