//! Starting a session on an issue, as adding the trigger label or `/plan` on an issue with
//! no session does: the writer's permission is checked, the issue's text recorded as what
//! will be planned from, and the first plan job queued.

use tracing::info;

use crate::config::repo::RepoConfig;
use crate::contract::ContractVersion;
use crate::event::Actor;
use crate::forge::Issue;
use crate::ids::{IssueNumber, SessionId};
use crate::jobs::JobError;
use crate::session::comments;
use crate::session::context::RepoContext;
use crate::session::jobs::enqueue_plan;
use crate::store::audit::AuditAction;
use crate::store::{audit, sessions};

/// Checks the actor's permission and starts a session, unless one holds the issue. The
/// issue's text as it is now (`issue_now`, or read here) is what will be planned from.
pub(in crate::session) async fn start_session(
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    actor: &Actor,
    config: &RepoConfig,
    issue_now: Option<Issue>,
) -> Result<(), JobError> {
    if !repo
        .permitted(issue, actor, config, "start planwright")
        .await?
    {
        return Ok(());
    }
    let forge = repo.forge()?;
    let issue_now = match issue_now {
        Some(i) => i,
        None => forge.issue(repo.name, issue).await?,
    };
    let delivery = repo.delivery;
    let mut tx = repo.app.db.writer.begin().await?;
    if let Some(delivery) = delivery
        && audit::delivery_did(&mut tx, delivery, AuditAction::SessionStarted).await?
    {
        return Ok(());
    }
    if let Some(active) = sessions::find_active(&mut tx, repo.kind, repo.name, issue).await? {
        drop(tx);
        let text = comments::already_working(active.state);
        forge.create_comment(repo.name, issue, &text).await?;
        return Ok(());
    }
    let id = SessionId::generate();
    sessions::insert(
        &mut tx,
        &sessions::NewSession {
            id: &id,
            forge: repo.kind,
            repo: repo.name,
            issue,
            installation: repo.installation,
            triggered_by: &actor.login,
        },
    )
    .await?;
    sessions::set_issue_snapshot(&mut tx, &id, &issue_now.title, &issue_now.body).await?;
    enqueue_plan(&mut tx, &id, ContractVersion(1), None).await?;
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &repo.actor(actor),
            action: AuditAction::SessionStarted,
            session: Some(id.as_str()),
            delivery,
            detail: serde_json::json!({ "repo": repo.name, "issue": issue }),
        },
    )
    .await?;
    tx.commit().await?;
    info!(session = %id, repo = %repo.name, issue = issue.0, by = %actor.login, "session started");
    Ok(())
}
