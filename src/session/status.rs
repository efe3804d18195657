//! The session's one status comment on the issue, and finding planwright's own comments
//! again: by marker, trusted only in comments planwright wrote, so retries and
//! redeliveries edit instead of posting twice.

use super::comments;
use crate::app::App;
use crate::contract::SourceLinks;
use crate::forge::{Comment, Forge, ForgeError};
use crate::ids::{CommentId, IssueNumber, RepoName, SessionId};
use crate::jobs::JobError;
use crate::store::sessions;
use crate::store::state::SessionState;

/// Edits (or creates, once) the session's one status comment.
pub(crate) async fn update_status(
    app: &App,
    forge: &dyn Forge,
    session: &sessions::SessionRow,
    state: SessionState,
    text: &str,
) -> Result<(), JobError> {
    let id = session.id.clone();
    let repo = session.repo.clone();
    let issue = session.issue_number;
    let marker = comments::status_marker(&id);
    let body = comments::status_body(state, text, &id);
    let known = session
        .status_comment_id
        .as_deref()
        .and_then(|c| c.parse::<i64>().ok())
        .map(CommentId);
    let comment = match known {
        Some(c) => Some(c),
        None => {
            match app.db.claim_status_comment(&id).await? {
                // Nobody posted one: no need to look.
                sessions::StatusComment::First => None,
                sessions::StatusComment::Posted(c) => c.parse::<i64>().ok().map(CommentId),
                sessions::StatusComment::Unknown => {
                    find_own_comment(forge, &repo, issue, |b| b.contains(&marker))
                        .await?
                        .map(|c| c.id)
                }
            }
        }
    };
    let id_text = match comment {
        Some(c) => {
            match forge.edit_comment(&repo, issue, c, &body).await {
                Ok(_) => {}
                // Someone deleted it: post a new one.
                Err(ForgeError::NotFound { .. }) => {
                    let new = forge.create_comment(&repo, issue, &body).await?;
                    return store_status(app, &id, new.id).await;
                }
                Err(e) => return Err(e.into()),
            }
            c
        }
        None => forge.create_comment(&repo, issue, &body).await?.id,
    };
    if known != Some(id_text) {
        store_status(app, &id, id_text).await?;
    }
    Ok(())
}

/// [`update_status`] for a session known by id: the row is read fresh, so the comment
/// id stored by an earlier step is used. Nothing happens when the session is gone.
pub(crate) async fn update_status_of(
    app: &App,
    forge: &dyn Forge,
    id: &SessionId,
    state: SessionState,
    text: &str,
) -> Result<bool, JobError> {
    let Some(row) = app.db.session(id).await? else {
        return Ok(false);
    };
    update_status(app, forge, &row, state, text).await?;
    Ok(true)
}

/// Says on the session's status comment that its work waits `wait` for the forge's rate
/// limit, and when it goes on; the job itself is deferred by the queue. Spends the
/// budget's reserve, kept for this; a note that cannot be posted is only logged.
pub(crate) async fn note_rate_limit(app: &App, id: &SessionId, wait: std::time::Duration) {
    let noted = crate::forge::budget::from_reserve(async {
        let Some(row) = app.db.session(id).await? else {
            return Ok(());
        };
        let forge = app.forges.get(row.forge, row.installation_id)?;
        let until = chrono::Utc::now() + wait;
        let text = comments::waiting_for_rate_limit(row.forge, until, wait);
        update_status(app, forge.as_ref(), &row, row.state, &text).await
    })
    .await;
    if let Err(e) = noted {
        tracing::warn!(session = %id, error = %e.message(), "could not say on the issue that the session waits for the rate limit");
    }
}

async fn store_status(app: &App, id: &SessionId, comment: CommentId) -> Result<(), JobError> {
    app.db
        .set_status_comment(id, &comment.0.to_string())
        .await?;
    Ok(())
}

/// planwright's own comment on the issue whose body passes `test` (markers are trusted
/// only in comments planwright wrote).
pub(crate) async fn find_own_comment(
    forge: &dyn Forge,
    repo: &RepoName,
    issue: IssueNumber,
    test: impl Fn(&str) -> bool,
) -> Result<Option<Comment>, ForgeError> {
    for comment in forge.comments(repo, issue).await? {
        if test(&comment.body) && forge.is_own(&comment.author).await? {
            return Ok(Some(comment));
        }
    }
    Ok(None)
}

/// The web address of a comment on the issue, where the forge has a web view.
pub(crate) fn comment_url(
    links: &SourceLinks,
    issue: IssueNumber,
    comment: Option<&str>,
) -> Option<String> {
    let comment = comment?;
    match links {
        SourceLinks::GitHub { repo_url } => {
            Some(format!("{repo_url}/issues/{issue}#issuecomment-{comment}"))
        }
        SourceLinks::GitLab { project_url } => {
            Some(format!("{project_url}/-/issues/{issue}#note_{comment}"))
        }
        SourceLinks::None => None,
    }
}
