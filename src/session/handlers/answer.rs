//! An answer to the planner's questions. While a session waits for one, the next comment
//! on the issue that is not a command, written after the questions, from someone with
//! `triage` access or more, is given to the planner (quoted as untrusted data, like every
//! human text) and planning goes on. Anyone else is told once per round that their words
//! were not taken.

use tracing::info;

use crate::app::App;
use crate::contract::ContractVersion;
use crate::event::Thread;
use crate::forge::Reaction;
use crate::ids::{CommentId, IssueNumber, Permission, SessionId};
use crate::jobs::JobError;
use crate::planner::Dossier;
use crate::planner::dossier::Answer;
use crate::session::comments;
use crate::session::context::RepoContext;
use crate::session::jobs::enqueue_plan;
use crate::session::status::update_status_of;
use crate::store::audit;
use crate::store::audit::AuditAction;
use crate::store::sessions;
use crate::store::state::SessionState;

/// Who may answer: people who may already triage the issue.
const MAY_ANSWER: Permission = Permission::Triage;

/// A comment that is not a command was written on `issue`.
pub(super) async fn on_comment(
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    comment: CommentId,
) -> Result<(), JobError> {
    // Most comments answer nothing: the database says so before the forge is asked.
    let app = repo.app;
    let session = app.db.active_session(repo.kind, repo.name, issue).await?;
    let Some(session) = session.filter(|s| s.state == SessionState::AwaitingAnswer) else {
        return Ok(());
    };
    let dossier = read_dossier(app.db.dossier(&session.id).await?);
    let Some(asked_at) = dossier.waiting().map(|r| r.asked_at) else {
        return Ok(());
    };
    if dossier.answered_by(comment.0) {
        return Ok(());
    }
    let forge = repo.forge()?;
    let thread = Thread::Issue(issue);
    let Some(written) = repo.command_comment(thread, comment).await? else {
        return Ok(());
    };
    let author = &written.author;
    // Written before the questions were posted (a late delivery): it answers nothing.
    if let (Some(written), Some(asked)) = (written.created_at, asked_at)
        && written < asked
    {
        return Ok(());
    }
    if repo.is_bot(author).await? {
        return Ok(());
    }
    let permission = forge.permission_of(repo.name, author).await?;
    if permission < MAY_ANSWER {
        if refused_once(app, &session.id, &author.login).await? {
            let text = comments::answer_not_permitted(&author.login, permission);
            forge.create_comment(repo.name, issue, &text).await?;
        }
        return Ok(());
    }
    let id = &session.id;
    let mut tx = app.db.writer.begin().await?;
    let mut dossier = dossier_of(&mut tx, id).await?;
    let answer = Answer {
        by: author.login.clone(),
        text: written.body.clone(),
        comment: Some(comment.0),
    };
    let (from, to) = (SessionState::AwaitingAnswer, SessionState::Planning);
    // Nothing waits (the session moved on since it was read): the comment is just a comment.
    if dossier.answered_by(comment.0)
        || !dossier.answer(answer)
        || !sessions::move_state(&mut tx, id, from, to, None).await?
    {
        return Ok(());
    }
    let text = serde_json::to_string(&dossier).map_err(anyhow::Error::from)?;
    sessions::save_dossier(&mut tx, id, Some(&text)).await?;
    let version = sessions::latest_contract(&mut tx, id)
        .await?
        .map_or(ContractVersion(1), |c| ContractVersion(c.version.0 + 1));
    enqueue_plan(&mut tx, id, version, None).await?;
    let round = dossier.asked.len();
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &repo.actor(author),
            action: AuditAction::QuestionsAnswered,
            session: Some(id.as_str()),
            delivery: repo.delivery,
            detail: serde_json::json!({ "round": round, "comment": comment, "version": version }),
        },
    )
    .await?;
    tx.commit().await?;
    info!(session = %id, by = %author.login, round, "the planner's questions were answered");
    forge
        .react(repo.name, issue, comment, Reaction::Eyes)
        .await?;
    let text = comments::planning_with_answer(&author.login);
    update_status_of(app, forge, id, to, &text).await?;
    Ok(())
}

async fn dossier_of(conn: &mut sqlx::AnyConnection, id: &SessionId) -> Result<Dossier, JobError> {
    Ok(read_dossier(sessions::load_dossier(conn, id).await?))
}

/// A stored dossier; a new one for none (or one this version cannot read).
fn read_dossier(text: Option<String>) -> Dossier {
    match text {
        Some(text) => serde_json::from_str(&text).unwrap_or_default(),
        None => Dossier::default(),
    }
}

/// Records that `login` was told they may not answer the waiting round; `false` when
/// they were told before (nobody is answered twice for the same round).
async fn refused_once(app: &App, id: &SessionId, login: &str) -> Result<bool, JobError> {
    let mut tx = app.db.writer.begin().await?;
    let mut dossier = dossier_of(&mut tx, id).await?;
    let Some(round) = dossier.asked.last_mut().filter(|r| r.answer.is_none()) else {
        return Ok(false);
    };
    if round.refused.iter().any(|r| r.eq_ignore_ascii_case(login)) {
        return Ok(false);
    }
    round.refused.push(login.to_owned());
    let text = serde_json::to_string(&dossier).map_err(anyhow::Error::from)?;
    sessions::save_dossier(&mut tx, id, Some(&text)).await?;
    tx.commit().await?;
    Ok(true)
}
