//! The trigger label: adding it starts a session, removing it while planning or awaiting
//! approval cancels one. A label event is only what its sender claims, so the issue's
//! labels and who changed them are read back from the forge before anything happens.

use tracing::info;

use crate::event::Actor;
use crate::forge::repo_config::{self, LoadError};
use crate::forge::{ForgeError, Issue, LabelChange};
use crate::ids::IssueNumber;
use crate::jobs::JobError;
use crate::session::commands::start::start_session;
use crate::session::comments;
use crate::session::context::RepoContext;
use crate::session::status::update_status;
use crate::store::audit::AuditAction;
use crate::store::state::SessionState;
use crate::store::{audit, sessions};

pub(super) async fn on_labeled(
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
) -> Result<(), JobError> {
    let forge = repo.forge()?;
    if repo.is_bot(actor).await? {
        return Ok(());
    }
    let config = match repo_config::load_policy(forge, repo.name).await {
        Ok(c) => c,
        Err(LoadError::Config(e)) => {
            // Only worth saying when the label could have been ours.
            if labels
                .iter()
                .any(|l| l.eq_ignore_ascii_case(crate::config::repo::DEFAULT_LABEL))
            {
                let text = comments::settings_invalid_cannot_start(&e);
                forge.create_comment(repo.name, issue, &text).await?;
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
        let Some(now) = labeled_issue(repo, issue, &config.label).await? else {
            info!(repo = %repo.name, issue = issue.0, "a label event for a label the issue does not carry is ignored");
            return Ok(());
        };
        Some(now)
    } else {
        None
    };
    // Whoever the forge says added the label is the one whose permission counts.
    let Some(by) = forge
        .label_changed_by(repo.name, issue, &config.label, LabelChange::Added, actor)
        .await?
    else {
        info!(repo = %repo.name, issue = issue.0, "a label event for a label nobody is recorded adding is ignored");
        return Ok(());
    };
    if repo.is_bot(&by).await? {
        return Ok(());
    }
    start_session(repo, issue, &by, &config, now).await
}

/// The issue as the forge has it, when it carries `label`.
async fn labeled_issue(
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    label: &str,
) -> Result<Option<Issue>, JobError> {
    match repo.forge()?.issue(repo.name, issue).await {
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
    repo: &RepoContext<'_>,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
) -> Result<(), JobError> {
    let (app, forge) = (repo.app, repo.forge()?);
    if repo.is_bot(actor).await? {
        return Ok(());
    }
    let session = app.db.active_session(repo.kind, repo.name, issue).await?;
    let Some(session) = session.filter(|s| unlabel_cancels(s.state)) else {
        return Ok(());
    };
    let config = match repo_config::load_policy(forge, repo.name).await {
        Ok(c) => c,
        Err(LoadError::Config(_)) => return Ok(()),
        Err(LoadError::Forge(e)) => return Err(e.into()),
    };
    if !labels.iter().any(|l| l.eq_ignore_ascii_case(&config.label)) {
        return Ok(());
    }
    if labeled_issue(repo, issue, &config.label).await?.is_some() {
        info!(repo = %repo.name, issue = issue.0, "an unlabel event for a label the issue still carries is ignored");
        return Ok(());
    }
    let removed = LabelChange::Removed;
    let Some(by) = forge
        .label_changed_by(repo.name, issue, &config.label, removed, actor)
        .await?
    else {
        info!(repo = %repo.name, issue = issue.0, "an unlabel event for a label nobody is recorded removing is ignored");
        return Ok(());
    };
    if repo.is_bot(&by).await? {
        return Ok(());
    }
    if forge.permission_of(repo.name, &by).await? < config.min_permission {
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
            actor: &repo.actor(&by),
            action: AuditAction::SessionCancelled,
            session: Some(id.as_str()),
            delivery: repo.delivery,
            detail: serde_json::json!({ "why": "label removed" }),
        },
    )
    .await?;
    tx.commit().await?;
    let text = comments::cancelled_by_unlabel(&by.login, &config.label);
    update_status(app, forge, &session, cancelled, &text).await
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
