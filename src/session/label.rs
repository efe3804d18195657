//! The trigger label: adding it starts a session, removing it while planning or awaiting
//! approval cancels one. A label event is only what its sender claims, so the issue's
//! labels and who changed them are read back from the forge before anything happens.

use tracing::info;

use super::comments;
use super::dispatch::enqueue_plan;
use super::events::{is_bot, permitted};
use super::status::update_status;
use crate::app::App;
use crate::config::repo::RepoConfig;
use crate::event::{Actor, RepoEvent};
use crate::forge::repo_config::{self, LoadError};
use crate::forge::{Forge, ForgeError, Issue, LabelChange};
use crate::ids::{IssueNumber, SessionId};
use crate::jobs::JobError;
use crate::store::state::SessionState;
use crate::store::{audit, sessions};

pub(super) async fn on_labeled(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    let forge = forge.as_ref();
    if is_bot(forge, actor).await? {
        return Ok(());
    }
    let config = match repo_config::load_policy(forge, &event.repo).await {
        Ok(c) => c,
        Err(LoadError::Config(e)) => {
            // Only worth saying when the label could have been ours.
            if labels
                .iter()
                .any(|l| l.eq_ignore_ascii_case(crate::config::repo::DEFAULT_LABEL))
            {
                let text = comments::settings_invalid_cannot_start(&e);
                forge.create_comment(&event.repo, issue, &text).await?;
            }
            return Ok(());
        }
        Err(LoadError::Forge(e)) => return Err(e.into()),
    };
    if !labels.iter().any(|l| l.eq_ignore_ascii_case(&config.label)) {
        return Ok(());
    }
    // A webhook is only what its sender claims: the issue must carry the label now. A
    // local issue has no labels; `solve` itself stands for adding one.
    let now = if forge.has_labels() {
        let Some(now) = labeled_issue(forge, event, issue, &config.label).await? else {
            info!(repo = %event.repo, issue = issue.0, "a label event for a label the issue does not carry is ignored");
            return Ok(());
        };
        Some(now)
    } else {
        None
    };
    // Whoever the forge says added the label is the one whose permission counts.
    let Some(by) = forge
        .label_changed_by(&event.repo, issue, &config.label, LabelChange::Added, actor)
        .await?
    else {
        info!(repo = %event.repo, issue = issue.0, "a label event for a label nobody is recorded adding is ignored");
        return Ok(());
    };
    if is_bot(forge, &by).await? {
        return Ok(());
    }
    start_session(app, forge, event, issue, &by, &config, delivery, now).await
}

/// The issue as the forge has it, when it carries `label`.
async fn labeled_issue(
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    label: &str,
) -> Result<Option<Issue>, JobError> {
    match forge.issue(&event.repo, issue).await {
        Ok(now) => Ok(now
            .labels
            .iter()
            .any(|l| l.eq_ignore_ascii_case(label))
            .then_some(now)),
        Err(ForgeError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether removing the label cancels a session in `state`: once execution has started,
/// `/cancel` is the way.
fn unlabel_cancels(state: SessionState) -> bool {
    matches!(
        state,
        SessionState::Planning | SessionState::AwaitingApproval
    )
}

pub(super) async fn on_unlabeled(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    let forge = forge.as_ref();
    if is_bot(forge, actor).await? {
        return Ok(());
    }
    let mut conn = app.db.pool.acquire().await?;
    let session = sessions::find_active(&mut conn, event.forge, &event.repo, issue).await?;
    drop(conn);
    let Some(session) = session.filter(|s| unlabel_cancels(s.state)) else {
        return Ok(());
    };
    let config = match repo_config::load_policy(forge, &event.repo).await {
        Ok(c) => c,
        Err(LoadError::Config(_)) => return Ok(()),
        Err(LoadError::Forge(e)) => return Err(e.into()),
    };
    if !labels.iter().any(|l| l.eq_ignore_ascii_case(&config.label)) {
        return Ok(());
    }
    if labeled_issue(forge, event, issue, &config.label)
        .await?
        .is_some()
    {
        info!(repo = %event.repo, issue = issue.0, "an unlabel event for a label the issue still carries is ignored");
        return Ok(());
    }
    let removed = LabelChange::Removed;
    let Some(by) = forge
        .label_changed_by(&event.repo, issue, &config.label, removed, actor)
        .await?
    else {
        info!(repo = %event.repo, issue = issue.0, "an unlabel event for a label nobody is recorded removing is ignored");
        return Ok(());
    };
    if is_bot(forge, &by).await? {
        return Ok(());
    }
    if forge.permission_of(&event.repo, &by).await? < config.min_permission {
        info!(by = %by.login, "label removed by someone who may not cancel; session kept");
        return Ok(());
    }
    let id = session.id.clone();
    let mut tx = app.db.writer.begin().await?;
    let cancelled = SessionState::Cancelled;
    if !sessions::move_state(&mut tx, &id, session.state, cancelled, None).await? {
        return Ok(());
    }
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &format!("{}:{}", event.forge.as_str(), by.login),
            action: "session.cancelled",
            session: Some(id.as_str()),
            delivery,
            detail: serde_json::json!({ "why": "label removed" }),
        },
    )
    .await?;
    tx.commit().await?;
    let text = comments::cancelled_by_unlabel(&by.login, &config.label);
    update_status(app, forge, &session, cancelled, &text).await
}

/// Checks the actor's permission and starts a session, unless one holds the issue. The
/// issue's text as it is now (`issue_now`, or read here) is what will be planned from.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_session(
    app: &App,
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    actor: &Actor,
    config: &RepoConfig,
    delivery: Option<&str>,
    issue_now: Option<Issue>,
) -> Result<(), JobError> {
    if !permitted(forge, event, issue, actor, config, "start planwright").await? {
        return Ok(());
    }
    let issue_now = match issue_now {
        Some(i) => i,
        None => forge.issue(&event.repo, issue).await?,
    };
    let mut tx = app.db.writer.begin().await?;
    if let Some(delivery) = delivery
        && audit::delivery_did(&mut tx, delivery, "session.started").await?
    {
        return Ok(());
    }
    if let Some(active) = sessions::find_active(&mut tx, event.forge, &event.repo, issue).await? {
        drop(tx);
        let text = comments::already_working(active.state);
        forge.create_comment(&event.repo, issue, &text).await?;
        return Ok(());
    }
    let id = SessionId::generate();
    sessions::insert(
        &mut tx,
        &sessions::NewSession {
            id: &id,
            forge: event.forge,
            repo: &event.repo,
            issue,
            installation: event.installation,
            triggered_by: &actor.login,
        },
    )
    .await?;
    sessions::set_issue_snapshot(&mut tx, &id, &issue_now.title, &issue_now.body).await?;
    enqueue_plan(&mut tx, &id, 1, None).await?;
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &format!("{}:{}", event.forge, actor.login),
            action: "session.started",
            session: Some(id.as_str()),
            delivery,
            detail: serde_json::json!({ "repo": event.repo, "issue": issue }),
        },
    )
    .await?;
    tx.commit().await?;
    info!(session = %id, repo = %event.repo, issue = issue.0, by = %actor.login, "session started");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_session_not_yet_executing_is_cancelled_by_removing_the_label() {
        use SessionState::*;
        for state in [Planning, AwaitingApproval] {
            assert!(unlabel_cancels(state), "{state}");
        }
        for state in [
            Executing, Verifying, Publishing, PrOpened, Failed, Cancelled,
        ] {
            assert!(!unlabel_cancels(state), "{state}");
        }
    }
}
