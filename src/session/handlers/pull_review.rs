//! A review of a pull request a session published. One that requests changes (or a comment
//! review that starts with `/revise`), by someone with the repository's permission, starts
//! another round on the same branch; the planner gets its text and inline comments quoted
//! as untrusted data. Each review is acted on once, however often it is delivered; one
//! that comes while a round runs waits for it to end.

use tracing::{info, warn};

use crate::event::Actor;
use crate::forge::{ForgeError, Review, ReviewState};
use crate::ids::PullNumber;
use crate::jobs::JobError;
use crate::session::commands::parse::{self, Command};
use crate::session::commands::revise;
use crate::session::context::{CommandContext, RepoContext};
use crate::session::error::{Stop, UserError};
use crate::session::round::QueuedReview;
use crate::session::{comments, feedback};
use crate::store::reviews;
use crate::store::sessions::SessionRow;
use crate::store::state::SessionState;

/// What a review asks of planwright: the text of its request when it asks for another
/// round, `None` when it asks for nothing.
fn asked_for(state: ReviewState, body: &str, names: &[&str]) -> Option<String> {
    let revise = match parse::parse(body, names) {
        Ok(Some(Command::Revise { feedback })) => Some(feedback),
        _ => None,
    };
    match state {
        ReviewState::ChangesRequested => Some(revise.unwrap_or_else(|| body.trim().to_owned())),
        ReviewState::Commented => revise,
        ReviewState::Approved | ReviewState::Dismissed | ReviewState::Other => None,
    }
}

/// A review was submitted on pull request `pull`; the webhook's state, body and author are
/// only what its sender claims, so the review is read back from the forge.
pub(super) async fn on_review(
    repo: &RepoContext<'_>,
    pull: PullNumber,
    review: i64,
    claimed_state: ReviewState,
    claimed_body: &str,
    claimed_author: &Actor,
) -> Result<(), JobError> {
    let app = repo.app;
    let forge = repo.forge()?;
    let names = app.forges.bot_names(repo.kind).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Most reviews ask planwright for nothing: read the claim before calling the forge.
    if asked_for(claimed_state, claimed_body, &names).is_none()
        || repo.is_bot(claimed_author).await?
    {
        return Ok(());
    }
    let Some(session) = app.db.session_by_pull(repo.kind, repo.name, pull).await? else {
        info!(repo = %repo.name, pull = pull.0, "a review of a pull request planwright did not open is not planwright's");
        return Ok(());
    };
    let review = match forge.review(repo.name, pull, review).await {
        Ok(review) => review,
        Err(ForgeError::NotFound { .. }) => {
            warn!(repo = %repo.name, pull = pull.0, review, "a review is not on the forge; it is ignored");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let Some(asked) = asked_for(review.state, &review.body, &names) else {
        return Ok(());
    };
    if repo.is_bot(&review.author).await? {
        return Ok(());
    }
    let reviewed = Reviewed {
        repo,
        pull,
        session: &session,
        review: &review,
    };
    reviewed.act(&asked).await
}

/// A review read back from the forge that asks for another round.
struct Reviewed<'a> {
    repo: &'a RepoContext<'a>,
    pull: PullNumber,
    session: &'a SessionRow,
    review: &'a Review,
}

impl Reviewed<'_> {
    async fn act(&self, asked: &str) -> Result<(), JobError> {
        let (repo, author) = (self.repo, &self.review.author);
        let forge = repo.forge()?;
        let say = async |text: String| self.say(&comments::reply_to(&author.login, &text)).await;
        let Some(config) = repo.policy_or_say(say).await? else {
            return Ok(());
        };
        let permission = forge.permission_of(repo.name, author).await?;
        if permission < config.min_permission {
            let text =
                comments::review_not_permitted(&author.login, config.min_permission, permission);
            return self.refuse(&text).await;
        }
        if let Some(refusal) = revise::closed(forge, repo.name, self.pull).await? {
            return self
                .refuse(&comments::review_not_now(&author.login, &refusal))
                .await;
        }
        let review = self.review;
        let feedback = feedback::feedback(asked, &review.comments, review.more_comments);
        let owed = feedback::owed(&review.comments);
        let ctx = CommandContext {
            repo,
            issue: self.session.issue_number,
            author,
            written_at: None,
            config: &config,
        };
        let round = revise::PullRound {
            feedback: &feedback,
            review: Some(review.id),
            owed: &owed,
        };
        match revise::start_round(&ctx, self.session, self.pull, &round).await {
            Ok(()) | Err(Stop::Gone) => Ok(()),
            Err(Stop::User(e)) => {
                let queued = QueuedReview {
                    feedback,
                    owed,
                    author: author.clone(),
                };
                if self.queue_while_running(&queued).await? {
                    return Ok(());
                }
                let reason = match e {
                    UserError::Refused(text) | UserError::Failed(text) => text,
                    UserError::Hidden { public, .. } => public,
                };
                self.refuse(&comments::review_not_now(&author.login, &reason))
                    .await
            }
            Err(Stop::Job(e)) => Err(e),
        }
    }

    /// Keeps the review for when the session's running round ends, saying so once.
    /// `false` when no round is running (the session was cancelled, or another holds
    /// the issue): the review cannot wait for anything.
    async fn queue_while_running(&self, queued: &QueuedReview) -> Result<bool, JobError> {
        let repo = self.repo;
        let mut conn = repo.app.db.writer.acquire().await?;
        let now = crate::store::sessions::get(&mut conn, &self.session.id).await?;
        let running =
            now.is_some_and(|s| s.state.is_active() && !matches!(s.state, SessionState::Failed));
        if !running {
            return Ok(false);
        }
        let round = serde_json::to_string(queued).map_err(anyhow::Error::from)?;
        let (id, review) = (&self.session.id, self.review.id);
        let first = reviews::queue(&mut conn, repo.kind, repo.name, review, id, &round).await?;
        drop(conn);
        if first {
            let text = comments::review_queued(&queued.author.login);
            self.say(&text).await?;
        }
        Ok(true)
    }

    /// Answers a review that starts nothing, once: the review is claimed first, so a
    /// redelivery says nothing more.
    async fn refuse(&self, text: &str) -> Result<(), JobError> {
        let repo = self.repo;
        let (id, review) = (&self.session.id, self.review.id);
        if repo
            .app
            .db
            .claim_review(repo.kind, repo.name, review, id, None)
            .await?
        {
            self.say(text).await?;
        }
        Ok(())
    }

    async fn say(&self, text: &str) -> Result<(), ForgeError> {
        let repo = self.repo;
        repo.forge()?
            .comment_on_pull(repo.name, self.pull, text)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requested_changes_or_a_revise_command_ask_for_a_round() {
        let names = ["planwright"];
        let asked = |state, body| asked_for(state, body, &names);
        assert_eq!(
            asked(ReviewState::ChangesRequested, "Use a loop."),
            Some("Use a loop.".into())
        );
        assert_eq!(
            asked(ReviewState::ChangesRequested, ""),
            Some(String::new())
        );
        assert_eq!(
            asked(ReviewState::ChangesRequested, "/revise use a loop"),
            Some("use a loop".into())
        );
        assert_eq!(
            asked(ReviewState::Commented, "/revise use a loop"),
            Some("use a loop".into())
        );
        assert_eq!(asked(ReviewState::Commented, "Looks fine."), None);
        assert_eq!(asked(ReviewState::Approved, "/revise use a loop"), None);
        assert_eq!(asked(ReviewState::Dismissed, "x"), None);
        assert_eq!(asked(ReviewState::Other, "x"), None);
    }
}
