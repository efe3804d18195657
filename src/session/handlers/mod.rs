//! Where a repository event enters a session: it is routed by kind to its handler, one
//! file per kind (`label`, `comment` for commands, `answer` for answers to the planner's
//! questions, `review`, `ci`), each given the event's [`RepoContext`] and its own fields.

mod answer;
mod ci;
mod comment;
mod label;
mod pull_review;

use tracing::{info, warn};

use super::context::RepoContext;
use crate::app::App;
use crate::event::{RepoEvent, RepoEventKind, Thread};
use crate::jobs::JobError;

/// The handler of repository events; `delivery` is the one that carried the event.
pub async fn on_repo_event(
    app: &App,
    event: &RepoEvent,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    if !app.forges.configured(event.forge) {
        warn!(forge = %event.forge, repo = %event.repo, "an event arrived from a forge planwright has no credentials for; it is ignored");
        return Ok(());
    }
    let repo = RepoContext::of_event(app, event, delivery);
    match &event.kind {
        RepoEventKind::IssueLabeled {
            issue,
            labels,
            actor,
        } => label::on_labeled(&repo, *issue, labels, actor).await,
        RepoEventKind::IssueUnlabeled {
            issue,
            labels,
            actor,
        } => label::on_unlabeled(&repo, *issue, labels, actor).await,
        RepoEventKind::CommentCreated {
            thread: Thread::Issue(issue),
            comment,
            body,
            author,
        } => comment::on_issue(&repo, *issue, *comment, body, author).await,
        RepoEventKind::CommentCreated {
            thread: Thread::PullRequest(pull),
            comment,
            body,
            ..
        } => comment::on_pull(&repo, *pull, *comment, body).await,
        RepoEventKind::ReviewSubmitted {
            pull,
            review: id,
            state,
            body,
            author,
        } => pull_review::on_review(&repo, *pull, *id, *state, body, author).await,
        RepoEventKind::ChecksFailed { sha, source } => {
            ci::on_checks_failed(&repo, sha, source).await
        }
        RepoEventKind::MergeRequestChanged { .. } => {
            info!(repo = %event.repo, kind = ?event.kind, "repository event needs no action");
            Ok(())
        }
    }
}
