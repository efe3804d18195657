//! Where a repository event enters a session: it is routed by kind, bots are ignored, and a
//! command is read back from the forge (a webhook's author and body are only what its
//! sender claims), claimed for one delivery, checked against the writer's permission and
//! handed to its handler.

use tracing::{info, warn};

use super::command::CommandContext;
use super::commands::{self, Command};
use super::{answer, ci, comments, label, review, revise};
use crate::app::App;
use crate::config::repo::RepoConfig;
use crate::event::{Actor, RepoEvent, RepoEventKind, Thread};
use crate::forge::repo_config::{self, LoadError};
use crate::forge::{Comment, Forge, ForgeError, Reaction};
use crate::ids::{CommentId, IssueNumber, PullNumber};
use crate::jobs::JobError;
use crate::store::audit;

/// The handler of repository events (label, comment).
pub async fn on_repo_event(
    app: &App,
    event: &RepoEvent,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    if !app.forges.configured(event.forge) {
        warn!(forge = %event.forge, repo = %event.repo, "an event arrived from a forge planwright has no credentials for; it is ignored");
        return Ok(());
    }
    match &event.kind {
        RepoEventKind::IssueLabeled {
            issue,
            labels,
            actor,
        } => label::on_labeled(app, event, *issue, labels, actor, delivery).await,
        RepoEventKind::IssueUnlabeled {
            issue,
            labels,
            actor,
        } => label::on_unlabeled(app, event, *issue, labels, actor, delivery).await,
        RepoEventKind::CommentCreated {
            thread: Thread::Issue(issue),
            comment,
            body,
            author,
        } => on_comment(app, event, *issue, *comment, body, author, delivery).await,
        RepoEventKind::CommentCreated {
            thread: Thread::PullRequest(pull),
            comment,
            body,
            ..
        } => on_pull_comment(app, event, *pull, *comment, body, delivery).await,
        RepoEventKind::ReviewSubmitted {
            pull,
            review: id,
            state,
            body,
            author,
        } => review::on_review(app, event, *pull, *id, state, body, author, delivery).await,
        RepoEventKind::ChecksFailed { sha, source } => {
            ci::on_checks_failed(app, event, sha, source).await
        }
        RepoEventKind::MergeRequestChanged { .. } => {
            info!(repo = %event.repo, kind = ?event.kind, "repository event needs no action");
            Ok(())
        }
    }
}

/// Whether `actor` may not trigger anything: bots, planwright included.
pub(super) async fn is_bot(forge: &dyn Forge, actor: &Actor) -> Result<bool, ForgeError> {
    Ok(actor.bot || actor.login.ends_with("[bot]") || forge.is_own(actor).await?)
}

/// Whether `actor` has the repository's `min_permission`; if not, says so on the issue
/// (`doing` completes "only people with … access can …").
pub(super) async fn permitted(
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    actor: &Actor,
    config: &RepoConfig,
    doing: &str,
) -> Result<bool, JobError> {
    let permission = forge.permission_of(&event.repo, actor).await?;
    if permission >= config.min_permission {
        return Ok(true);
    }
    let text = comments::not_permitted(&actor.login, config.min_permission, doing, permission);
    forge.create_comment(&event.repo, issue, &text).await?;
    Ok(false)
}

/// The comment a command arrived in, as the forge has it, claimed for this delivery: a
/// webhook's author and body are only what its sender claims, and its delivery id is the
/// sender's to choose. `None` when there is nothing to act on: the forge has no such
/// comment on the thread, or another delivery already carried this one.
pub(super) async fn command_comment(
    app: &App,
    forge: &dyn Forge,
    event: &RepoEvent,
    thread: Thread,
    comment: CommentId,
    delivery: Option<&str>,
) -> Result<Option<Comment>, JobError> {
    let found = match forge.comment(&event.repo, thread, comment).await {
        Ok(found) => found,
        Err(ForgeError::NotFound { .. }) => {
            warn!(repo = %event.repo, %comment, "a command's comment is not on the forge; it is ignored");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let mut conn = app.db.writer.acquire().await?;
    let claimed = crate::store::deliveries::claim_command(
        &mut conn,
        event.forge,
        &event.repo,
        comment,
        delivery,
    )
    .await?;
    if !claimed {
        info!(repo = %event.repo, %comment, ?delivery, "a command already carried by another delivery is ignored");
        return Ok(None);
    }
    Ok(Some(found))
}

/// Whether a delivery already carried a command to its end (a redelivery after a crash
/// between the transaction and the reply).
async fn already_handled(app: &App, delivery: Option<&str>) -> Result<bool, JobError> {
    let Some(delivery) = delivery else {
        return Ok(false);
    };
    let mut conn = app.db.pool.acquire().await?;
    Ok(audit::delivery_did(&mut conn, delivery, "command.handled").await?)
}

/// The repository's policy, or `None` after telling `reply` why it is not valid.
pub(super) async fn policy_or_say(
    forge: &dyn Forge,
    event: &RepoEvent,
    reply: impl AsyncFnOnce(String) -> Result<(), ForgeError>,
) -> Result<Option<RepoConfig>, JobError> {
    match repo_config::load_policy(forge, &event.repo).await {
        Ok(c) => Ok(Some(c)),
        Err(LoadError::Config(e)) => {
            reply(comments::settings_invalid_cannot_act(&e)).await?;
            Ok(None)
        }
        Err(LoadError::Forge(e)) => Err(e.into()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn on_comment(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    comment: CommentId,
    claimed_body: &str,
    claimed_author: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    let forge = forge.as_ref();
    if is_bot(forge, claimed_author).await? {
        return Ok(());
    }
    let names = app.forges.bot_names(event.forge).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Only what looks like a command is worth reading back from the forge, or an answer
    // to the planner's questions when it waits for one.
    if matches!(commands::parse(claimed_body, &names), Ok(None)) {
        return answer::on_comment(app, event, issue, comment, delivery).await;
    }
    let thread = Thread::Issue(issue);
    let Some(written) = command_comment(app, forge, event, thread, comment, delivery).await? else {
        return Ok(());
    };
    let author = &written.author;
    if is_bot(forge, author).await? {
        return Ok(());
    }
    let command = match commands::parse(&written.body, &names) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => return Ok(()),
        Err(e) => Err(e),
    };
    if already_handled(app, delivery).await? {
        return Ok(());
    }
    let say = async |text: String| {
        forge
            .create_comment(&event.repo, issue, &text)
            .await
            .map(drop)
    };
    let Some(config) = policy_or_say(forge, event, say).await? else {
        return Ok(());
    };
    let command = match command {
        Ok(c) => c,
        Err(e) => {
            // Only someone who may command planwright is told what went wrong: anyone
            // else's text gets no reply to spam the issue with.
            if forge.permission_of(&event.repo, author).await? >= config.min_permission {
                let text = comments::reply_to(&author.login, &e.to_string());
                forge.create_comment(&event.repo, issue, &text).await?;
            }
            return Ok(());
        }
    };
    let doing = comments::doing_command(&command);
    if !permitted(forge, event, issue, author, &config, &doing).await? {
        return Ok(());
    }
    // Seen: the work itself goes through the queue.
    forge
        .react(&event.repo, issue, comment, Reaction::Eyes)
        .await?;
    let ctx = CommandContext {
        app,
        forge,
        event,
        issue,
        author,
        written_at: written.created_at,
        delivery,
        config: &config,
    };
    ctx.carry_out(&command).await
}

/// `/revise` on the pull (merge) request a session published: another round on the same
/// branch, starting with a revised contract on the issue. Other commands belong on the
/// issue, and comments on other pull requests are not planwright's.
async fn on_pull_comment(
    app: &App,
    event: &RepoEvent,
    pull: PullNumber,
    comment: CommentId,
    claimed_body: &str,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    let forge = forge.as_ref();
    // Most comments on pull requests are not for planwright: read the text first.
    let names = app.forges.bot_names(event.forge).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Ok(Some(Command::Revise { .. })) = commands::parse(claimed_body, &names) else {
        return Ok(());
    };
    let thread = Thread::PullRequest(pull);
    let Some(written) = command_comment(app, forge, event, thread, comment, delivery).await? else {
        return Ok(());
    };
    let author = &written.author;
    let Ok(Some(Command::Revise { feedback })) = commands::parse(&written.body, &names) else {
        return Ok(());
    };
    if is_bot(forge, author).await? || already_handled(app, delivery).await? {
        return Ok(());
    }
    let mut conn = app.db.pool.acquire().await?;
    let session =
        crate::store::sessions::find_by_pull(&mut conn, event.forge, &event.repo, pull).await?;
    drop(conn);
    let Some(session) = session else {
        return Ok(());
    };
    let issue = session.issue_number;
    let say = async |text: String| {
        let text = comments::reply_to(&author.login, &text);
        forge
            .create_comment(&event.repo, issue, &text)
            .await
            .map(drop)
    };
    let Some(config) = policy_or_say(forge, event, say).await? else {
        return Ok(());
    };
    if !permitted(forge, event, issue, author, &config, "use `/revise`").await? {
        return Ok(());
    }
    let ctx = CommandContext {
        app,
        forge,
        event,
        issue,
        author,
        written_at: written.created_at,
        delivery,
        config: &config,
    };
    // The writer's open comments on the diff are part of what they ask for.
    let inline = forge
        .open_review_comments(&event.repo, pull, author)
        .await?;
    revise::on_pull(&ctx, &session, pull, &feedback, (&inline.0, inline.1)).await
}
