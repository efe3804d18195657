//! The end of a round. After a plan or execute job ends its session's round (the pull
//! request is open again, or the session failed), the dispatcher takes this one step: the
//! review that has waited longest for the round to end starts the next one. Jobs never
//! start rounds themselves.

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::commands::revise;
use super::context::{CommandContext, RepoContext};
use super::error::Stop;
use crate::app::App;
use crate::event::Actor;
use crate::ids::SessionId;
use crate::jobs::JobError;
use crate::store::reviews::Owed;
use crate::store::sessions::SessionRow;
use crate::store::state::SessionState;

/// A review's round waiting for the session's running round to end (stored as JSON with
/// the review).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct QueuedReview {
    pub feedback: String,
    pub owed: Vec<Owed>,
    pub author: Actor,
}

/// What follows the end of `id`'s round: the round of the review that has waited longest
/// for it, once it has ended (the pull request is open again, or the run failed).
pub(super) async fn ended(app: &App, id: &SessionId) -> Result<(), JobError> {
    let Some(session) = app.db.session(id).await? else {
        return Ok(());
    };
    let ended = matches!(session.state, SessionState::PrOpened | SessionState::Failed);
    let (Some(pull), true) = (session.pull_number, ended) else {
        return Ok(());
    };
    let Some((review, round)) = app.db.oldest_queued_review(id).await? else {
        return Ok(());
    };
    let queued: QueuedReview = serde_json::from_str(&round).map_err(anyhow::Error::from)?;
    let repo = RepoContext::of_session(app, &session);
    let forge = repo.forge()?;
    if revise::closed(forge, &session.repo, pull).await?.is_some() {
        info!(session = %id, review, "a queued review's pull request was closed meanwhile");
        return drop_queued(app, &session, review).await;
    }
    let Some(config) = repo.policy_or_say(async |_| Ok(())).await? else {
        return Ok(());
    };
    // Its writer may have lost the permission while it waited.
    let permission = forge.permission_of(&session.repo, &queued.author).await?;
    if permission < config.min_permission {
        return drop_queued(app, &session, review).await;
    }
    let ctx = CommandContext {
        repo: &repo,
        issue: session.issue_number,
        author: &queued.author,
        written_at: None,
        config: &config,
    };
    let round = revise::PullRound {
        feedback: &queued.feedback,
        review: Some(review),
        owed: &queued.owed,
    };
    info!(session = %id, review, "starting the round of a review that waited for the last one");
    match revise::start_round(&ctx, &session, pull, &round).await {
        Ok(()) | Err(Stop::Gone) => Ok(()),
        Err(Stop::User(e)) => {
            warn!(session = %id, review, error = ?e, "a queued review could not start its round");
            drop_queued(app, &session, review).await
        }
        Err(Stop::Job(e)) => Err(e),
    }
}

/// Takes a queued review out of the queue without a round, so it blocks no other.
async fn drop_queued(app: &App, session: &SessionRow, review: i64) -> Result<(), JobError> {
    let db = &app.db;
    db.unqueue_review(session.forge, &session.repo, review)
        .await?;
    Ok(())
}
