//! A comment on an issue or on a pull request a session published. A command is read back
//! from the forge (a webhook's author and body are only what its sender claims), claimed
//! for one delivery, checked against the writer's permission and handed to its handler;
//! any other comment on an issue may answer the planner's questions.

use super::answer;
use crate::event::{Actor, Thread};
use crate::forge::Reaction;
use crate::ids::{CommentId, IssueNumber, PullNumber};
use crate::jobs::JobError;
use crate::session::commands::parse::{self, Command};
use crate::session::commands::{self, revise};
use crate::session::comments;
use crate::session::context::{CommandContext, RepoContext};

/// A comment on issue `issue`: a command, or perhaps an answer to the planner.
pub(super) async fn on_issue(
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    comment: CommentId,
    claimed_body: &str,
    claimed_author: &Actor,
) -> Result<(), JobError> {
    let forge = repo.forge()?;
    if repo.is_bot(claimed_author).await? {
        return Ok(());
    }
    let names = repo.app.forges.bot_names(repo.kind).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Only what looks like a command is worth reading back from the forge, or an answer
    // to the planner's questions when it waits for one.
    if matches!(parse::parse(claimed_body, &names), Ok(None)) {
        return answer::on_comment(repo, issue, comment).await;
    }
    let thread = Thread::Issue(issue);
    let Some(written) = repo.command_comment(thread, comment).await? else {
        return Ok(());
    };
    let author = &written.author;
    if repo.is_bot(author).await? {
        return Ok(());
    }
    let command = match parse::parse(&written.body, &names) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => return Ok(()),
        Err(e) => Err(e),
    };
    if repo.already_handled().await? {
        return Ok(());
    }
    let say = async |text: String| {
        forge
            .create_comment(repo.name, issue, &text)
            .await
            .map(drop)
    };
    let Some(config) = repo.policy_or_say(say).await? else {
        return Ok(());
    };
    let command = match command {
        Ok(c) => c,
        Err(e) => {
            // Only someone who may command planwright is told what went wrong: anyone
            // else's text gets no reply to spam the issue with.
            if forge.permission_of(repo.name, author).await? >= config.min_permission {
                let text = comments::reply_to(&author.login, &e.to_string());
                forge.create_comment(repo.name, issue, &text).await?;
            }
            return Ok(());
        }
    };
    let doing = comments::doing_command(&command);
    if !repo.permitted(issue, author, &config, &doing).await? {
        return Ok(());
    }
    // Seen: the work itself goes through the queue.
    forge
        .react(repo.name, issue, comment, Reaction::Eyes)
        .await?;
    let ctx = CommandContext {
        repo,
        issue,
        author,
        written_at: written.created_at,
        config: &config,
    };
    commands::carry_out(&ctx, &command).await
}

/// `/revise` on the pull (merge) request a session published: another round on the same
/// branch, starting with a revised contract on the issue. Other commands belong on the
/// issue, and comments on other pull requests are not planwright's.
pub(super) async fn on_pull(
    repo: &RepoContext<'_>,
    pull: PullNumber,
    comment: CommentId,
    claimed_body: &str,
) -> Result<(), JobError> {
    let (app, forge) = (repo.app, repo.forge()?);
    // Most comments on pull requests are not for planwright: read the text first.
    let names = app.forges.bot_names(repo.kind).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Ok(Some(Command::Revise { .. })) = parse::parse(claimed_body, &names) else {
        return Ok(());
    };
    let thread = Thread::PullRequest(pull);
    let Some(written) = repo.command_comment(thread, comment).await? else {
        return Ok(());
    };
    let author = &written.author;
    let Ok(Some(Command::Revise { feedback })) = parse::parse(&written.body, &names) else {
        return Ok(());
    };
    if repo.is_bot(author).await? || repo.already_handled().await? {
        return Ok(());
    }
    let Some(session) = app.db.session_by_pull(repo.kind, repo.name, pull).await? else {
        return Ok(());
    };
    let issue = session.issue_number;
    let say = async |text: String| {
        let text = comments::reply_to(&author.login, &text);
        forge
            .create_comment(repo.name, issue, &text)
            .await
            .map(drop)
    };
    let Some(config) = repo.policy_or_say(say).await? else {
        return Ok(());
    };
    if !repo
        .permitted(issue, author, &config, "use `/revise`")
        .await?
    {
        return Ok(());
    }
    let ctx = CommandContext {
        repo,
        issue,
        author,
        written_at: written.created_at,
        config: &config,
    };
    // The writer's open comments on the diff are part of what they ask for.
    let inline = forge.open_review_comments(repo.name, pull, author).await?;
    revise::on_pull(&ctx, &session, pull, &feedback, (&inline.0, inline.1)).await
}
