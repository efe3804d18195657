//! Carrying out a command a permitted person wrote on the issue: the session is read in
//! the transaction, the command's handler decides (a pure function of the session's state,
//! tested on its own) and writes its move and next job, and the audit entries are written
//! with it before the status comment says what happened. A refusal is answered to the
//! commenter and changes nothing. One file per command; `parse` reads them from text, and
//! `start` starts a session, as the label or `/plan` on an issue with none does.

mod approve;
mod cancel;
pub mod parse;
mod replan;
mod retry;
pub(super) mod revise;
pub(super) mod start;

use parse::Command;

use super::comments;
use super::context::CommandContext;
use super::error::{Stop, UserError};
use crate::jobs::JobError;
use crate::store::sessions;

/// Carries out `command`; a refusal is answered to its writer.
pub(super) async fn carry_out(ctx: &CommandContext<'_>, command: &Command) -> Result<(), JobError> {
    match act(ctx, command).await {
        Ok(()) | Err(Stop::Gone) => Ok(()),
        Err(Stop::User(e)) => ctx.reply(e).await,
        Err(Stop::Job(e)) => Err(e),
    }
}

async fn act(ctx: &CommandContext<'_>, command: &Command) -> Result<(), Stop> {
    let repo = ctx.repo;
    // `/plan` plans from the issue as it is now: the text the maintainer just chose to
    // plan from. Read before the transaction, which must not wait on the forge.
    let issue_now = match command {
        Command::Plan => Some(repo.forge()?.issue(repo.name, ctx.issue).await?),
        _ => None,
    };
    let mut tx = repo.app.db.writer.begin().await?;
    let Some(session) = sessions::find_active(&mut tx, repo.kind, repo.name, ctx.issue).await?
    else {
        drop(tx);
        if *command == Command::Plan {
            start::start_session(repo, ctx.issue, ctx.author, ctx.config, issue_now).await?;
            return Ok(());
        }
        return Err(UserError::Refused(comments::no_session(&ctx.config.label)).into());
    };
    let latest = sessions::latest_contract(&mut tx, &session.id).await?;
    let done = match command {
        Command::Approve { version } => {
            approve::apply(ctx, &mut tx, &session, latest, *version).await?
        }
        Command::Revise { feedback } => {
            revise::apply(ctx, &mut tx, &session, latest, feedback).await?
        }
        Command::Plan => replan::apply(ctx, &mut tx, &session, latest, issue_now).await?,
        Command::Retry { continues } => {
            retry::apply(ctx, &mut tx, &session, latest, *continues).await?
        }
        Command::Cancel => cancel::apply(ctx, &mut tx, &session).await?,
    };
    let handled = serde_json::json!({ "command": command.name() });
    ctx.record(tx, &session.id, done, handled).await
}
