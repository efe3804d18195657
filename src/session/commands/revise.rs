//! `/revise <changes>`: on the issue while a contract awaits approval, a new version built
//! on the current one; on the pull request a session published, another round on the same
//! branch once its run has ended.

use tracing::info;

use crate::contract::ContractVersion;
use crate::forge::{Forge, ForgeError, PullState, ReviewComment};
use crate::ids::{PullNumber, RepoName};
use crate::jobs::JobError;
use crate::session::context::{CommandContext, Done, move_or_refuse};
use crate::session::error::{Stop, UserError};
use crate::session::jobs::{PlanJob, enqueue_plan, enqueue_plan_job};
use crate::session::{comments, feedback};
use crate::store::audit::AuditAction;
use crate::store::ci_reports;
use crate::store::reviews::{self, Owed};
use crate::store::sessions::{self, ContractRow, SessionRow};
use crate::store::state::SessionState;

fn decide(state: SessionState) -> Result<(), UserError> {
    if state == SessionState::AwaitingApproval {
        Ok(())
    } else {
        Err(UserError::Refused(comments::revise_not_awaiting(state)))
    }
}

/// Whether the pull request's session may start another round; `other_active`: another
/// session holds the issue meanwhile.
fn decide_on_pull(state: SessionState, other_active: bool) -> Result<(), UserError> {
    if !matches!(state, SessionState::PrOpened | SessionState::Failed) {
        return Err(UserError::Refused(comments::pull_revise_not_ended(state)));
    }
    if other_active {
        return Err(UserError::Refused(comments::pull_revise_other_session()));
    }
    Ok(())
}

fn next_version(latest: Option<&ContractRow>) -> ContractVersion {
    latest.map_or(ContractVersion(1), |c| ContractVersion(c.version.0 + 1))
}

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
    latest: Option<ContractRow>,
    feedback: &str,
) -> Result<Done, Stop> {
    decide(session.state)?;
    let (from, to) = (SessionState::AwaitingApproval, SessionState::Planning);
    move_or_refuse(tx, &session.id, from, to, comments::raced_revision()).await?;
    let version = next_version(latest.as_ref());
    enqueue_plan(tx, &session.id, version, Some(feedback.to_owned())).await?;
    Ok(Done {
        action: AuditAction::ContractRevisionRequested,
        detail: serde_json::json!({ "version": version, "feedback": feedback }),
        state: to,
        status: comments::revising(version, ctx.login()),
    })
}

/// A round asked for on the pull request: what the planner is told and, for a review,
/// the review to claim and the inline comments its round owes an answer.
pub(in crate::session) struct PullRound<'a> {
    pub feedback: &'a str,
    pub review: Option<i64>,
    pub owed: &'a [Owed],
}

/// `/revise` written on the session's pull request, after `inline`: the writer's open
/// comments on its diff (`more`: there were more than were read).
pub(in crate::session) async fn on_pull(
    ctx: &CommandContext<'_>,
    session: &SessionRow,
    pull: PullNumber,
    asked: &str,
    (inline, more): (&[ReviewComment], bool),
) -> Result<(), JobError> {
    if let Some(refusal) = closed(ctx.repo.forge()?, ctx.repo.name, pull).await? {
        return ctx.reply(UserError::Refused(refusal)).await;
    }
    let feedback = feedback::feedback(asked, inline, more);
    let owed = feedback::owed(inline);
    let round = PullRound {
        feedback: &feedback,
        review: None,
        owed: &owed,
    };
    match start_round(ctx, session, pull, &round).await {
        Ok(()) | Err(Stop::Gone) => Ok(()),
        Err(Stop::User(e)) => ctx.reply(e).await,
        Err(Stop::Job(e)) => Err(e),
    }
}

/// Why no round can start on pull request `pull`, when it is closed or merged: the
/// branch has nowhere to go. Asked before a round's transaction, which must not wait on
/// the forge.
pub(in crate::session) async fn closed(
    forge: &dyn Forge,
    repo: &RepoName,
    pull: PullNumber,
) -> Result<Option<String>, ForgeError> {
    Ok(match forge.pull_state(repo, pull).await? {
        PullState::Open => None,
        PullState::Closed => Some(comments::pull_not_open("closed")),
        PullState::Merged => Some(comments::pull_not_open("merged")),
    })
}

/// Starts another round on the pull request's branch: contract v(n+1) is planned with the
/// feedback. `Stop::Gone` when the round's review was claimed before (a redelivery).
pub(in crate::session) async fn start_round(
    ctx: &CommandContext<'_>,
    session: &SessionRow,
    pull: PullNumber,
    round: &PullRound<'_>,
) -> Result<(), Stop> {
    let (id, repo) = (&session.id, ctx.repo);
    let mut tx = repo.app.db.writer.begin().await?;
    let other = sessions::find_active(&mut tx, repo.kind, repo.name, ctx.issue).await?;
    decide_on_pull(session.state, other.is_some_and(|o| o.id != *id))?;
    let version = next_version(sessions::latest_contract(&mut tx, id).await?.as_ref());
    if let Some(review) = round.review {
        let claimed =
            reviews::claim(&mut tx, repo.kind, repo.name, review, id, Some(version)).await?;
        if !claimed {
            return Err(Stop::Gone);
        }
    }
    reviews::owe_answers(&mut tx, id, version, round.owed).await?;
    let failures = ci_reports::take(&mut tx, id, version).await?;
    let to = SessionState::Planning;
    move_or_refuse(&mut tx, id, session.state, to, comments::raced_revision()).await?;
    let plan = PlanJob {
        session: id.clone(),
        version,
        feedback: Some(round.feedback.to_owned()),
        evidence: ci_evidence(&failures),
    };
    enqueue_plan_job(&mut tx, plan).await?;
    let review = round.review;
    let done = Done {
        action: AuditAction::ContractRevisionRequested,
        detail: serde_json::json!({
            "version": version, "feedback": round.feedback, "pull": pull.0, "review": review,
            "inline_comments": round.owed.len(), "ci_failures": failures.len(),
        }),
        state: to,
        status: match review {
            Some(_) => comments::revising_from_review(version, ctx.login()),
            None => comments::revising_from_pull(version, ctx.login()),
        },
    };
    let command = if review.is_some() { "review" } else { "revise" };
    let handled = serde_json::json!({ "command": command, "pull": pull.0, "review": review });
    ctx.record(tx, id, done, handled).await?;
    info!(session = %id, pull = pull.0, ?review, by = %ctx.login(), "revision asked for on the pull request");
    Ok(())
}

/// The reports of other checks no round had yet, the newest few (each already distilled
/// and bounded), saying how many were left out.
fn ci_evidence(failures: &[String]) -> Option<String> {
    const SHOWN: usize = 4;
    if failures.is_empty() {
        return None;
    }
    let skip = failures.len().saturating_sub(SHOWN);
    let mut out = failures[skip..].join("\n\n");
    if skip > 0 {
        out.push_str(&format!("\n\n({skip} older reports are not shown.)"));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionState::*;

    #[test]
    fn a_contract_is_revised_only_while_it_awaits_approval() {
        assert_eq!(decide(AwaitingApproval), Ok(()));
        for state in [
            Planning, Executing, Verifying, Publishing, PrOpened, Failed, Cancelled,
        ] {
            assert!(
                matches!(decide(state), Err(UserError::Refused(_))),
                "{state}"
            );
        }
    }

    #[test]
    fn a_pull_request_is_revised_once_its_run_ended_and_no_other_session_holds_the_issue() {
        assert_eq!(decide_on_pull(PrOpened, false), Ok(()));
        assert_eq!(decide_on_pull(Failed, false), Ok(()));
        let Err(UserError::Refused(text)) = decide_on_pull(Executing, false) else {
            panic!("a running session was revised");
        };
        assert!(
            text.contains("once its run has ended; the session is executing"),
            "{text}"
        );
        let Err(UserError::Refused(text)) = decide_on_pull(PrOpened, true) else {
            panic!("revised beside another active session");
        };
        assert!(text.contains("another planwright session"), "{text}");
    }

    #[test]
    fn the_next_version_follows_the_latest() {
        assert_eq!(next_version(None), ContractVersion(1));
        assert_eq!(
            next_version(Some(&super::super::approve::tests::posted(4))),
            ContractVersion(5)
        );
    }
}
