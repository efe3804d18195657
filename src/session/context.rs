//! What the handlers of one event share. A [`RepoContext`] is built once per event (or
//! from the session's row, when a round ends): the app, the repository on its forge, the
//! forge's client for it and the delivery that carried the event. A [`CommandContext`]
//! adds who asked, on which issue and under which settings, once a command is known to be
//! theirs; every command's handler takes one, writes its move in the transaction it is
//! given and says what it did as a [`Done`].

use std::sync::{Arc, OnceLock};

use tracing::{info, warn};

use super::comments;
use super::error::{Stop, UserError};
use super::status;
use crate::app::App;
use crate::config::repo::RepoConfig;
use crate::event::{Actor, ForgeKind, RepoEvent, Thread};
use crate::forge::repo_config::{self, LoadError};
use crate::forge::{Comment, Forge, ForgeError};
use crate::ids::{CommentId, InstallationId, IssueNumber, RepoName, SessionId};
use crate::jobs::JobError;
use crate::store::audit;
use crate::store::audit::AuditAction;
use crate::store::sessions::{self, SessionRow};
use crate::store::state::SessionState;

/// One repository on its forge, as one event's handlers see it.
pub(crate) struct RepoContext<'a> {
    pub app: &'a App,
    pub kind: ForgeKind,
    pub name: &'a RepoName,
    pub installation: Option<InstallationId>,
    /// The delivery that carried the event, which lets a retried job see what its first
    /// attempt already did; `None` for a step no delivery started.
    pub delivery: Option<&'a str>,
    forge: OnceLock<Arc<dyn Forge>>,
}

impl<'a> RepoContext<'a> {
    /// The context of a repository event carried by `delivery`.
    pub fn of_event(app: &'a App, event: &'a RepoEvent, delivery: Option<&'a str>) -> Self {
        Self {
            app,
            kind: event.forge,
            name: &event.repo,
            installation: event.installation,
            delivery,
            forge: OnceLock::new(),
        }
    }

    /// The context of a step of `session`'s own, which no delivery started.
    pub fn of_session(app: &'a App, session: &'a SessionRow) -> Self {
        Self {
            app,
            kind: session.forge,
            name: &session.repo,
            installation: session.installation_id,
            delivery: None,
            forge: OnceLock::new(),
        }
    }

    /// The forge's client for this repository, made when it is first needed: most events
    /// are settled by the database before the forge is asked anything.
    pub fn forge(&self) -> Result<&dyn Forge, ForgeError> {
        if let Some(forge) = self.forge.get() {
            return Ok(forge.as_ref());
        }
        let made = self.app.forges.get(self.kind, self.installation)?;
        Ok(self.forge.get_or_init(|| made).as_ref())
    }

    /// How the audit log names `actor`: `forge:login`.
    pub fn actor(&self, actor: &Actor) -> String {
        format!("{}:{}", self.kind.as_str(), actor.login)
    }

    /// Whether `actor` may not trigger anything: bots, planwright included.
    pub async fn is_bot(&self, actor: &Actor) -> Result<bool, ForgeError> {
        Ok(actor.bot || actor.login.ends_with("[bot]") || self.forge()?.is_own(actor).await?)
    }

    /// Whether `actor` has the repository's `min_permission`; if not, says so on the issue
    /// (`doing` completes "only people with … access can …").
    pub async fn permitted(
        &self,
        issue: IssueNumber,
        actor: &Actor,
        config: &RepoConfig,
        doing: &str,
    ) -> Result<bool, JobError> {
        let forge = self.forge()?;
        let permission = forge.permission_of(self.name, actor).await?;
        if permission >= config.min_permission {
            return Ok(true);
        }
        let text = comments::not_permitted(&actor.login, config.min_permission, doing, permission);
        forge.create_comment(self.name, issue, &text).await?;
        Ok(false)
    }

    /// The repository's policy, or `None` after telling `reply` why it is not valid.
    pub async fn policy_or_say(
        &self,
        reply: impl AsyncFnOnce(String) -> Result<(), ForgeError>,
    ) -> Result<Option<RepoConfig>, JobError> {
        match repo_config::load_policy(self.forge()?, self.name).await {
            Ok(c) => Ok(Some(c)),
            Err(LoadError::Config(e)) => {
                reply(comments::settings_invalid_cannot_act(&e)).await?;
                Ok(None)
            }
            Err(LoadError::Forge(e)) => Err(e.into()),
        }
    }

    /// The comment a command arrived in, as the forge has it, claimed for this delivery: a
    /// webhook's author and body are only what its sender claims, and its delivery id is
    /// the sender's to choose. `None` when there is nothing to act on: the forge has no
    /// such comment on the thread, or another delivery already carried this one.
    pub async fn command_comment(
        &self,
        thread: Thread,
        comment: CommentId,
    ) -> Result<Option<Comment>, JobError> {
        let found = match self.forge()?.comment(self.name, thread, comment).await {
            Ok(found) => found,
            Err(ForgeError::NotFound { .. }) => {
                warn!(repo = %self.name, %comment, "a command's comment is not on the forge; it is ignored");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let (kind, repo, delivery) = (self.kind, self.name, self.delivery);
        let db = &self.app.db;
        if !db.claim_command(kind, repo, comment, delivery).await? {
            info!(%repo, %comment, ?delivery, "a command already carried by another delivery is ignored");
            return Ok(None);
        }
        Ok(Some(found))
    }

    /// Whether this delivery already carried a command to its end (a redelivery after a
    /// crash between the transaction and the reply).
    pub async fn already_handled(&self) -> Result<bool, JobError> {
        let Some(delivery) = self.delivery else {
            return Ok(false);
        };
        Ok(self
            .app
            .db
            .delivery_did(delivery, AuditAction::CommandHandled)
            .await?)
    }
}

/// A command a permitted person asked for on `issue`, under the repository's settings.
pub(crate) struct CommandContext<'a> {
    pub repo: &'a RepoContext<'a>,
    pub issue: IssueNumber,
    pub author: &'a Actor,
    /// When the forge says the command was written (seconds, its clock).
    pub written_at: Option<i64>,
    pub config: &'a RepoConfig,
}

/// What a carried-out command did: its audit entry and what the status comment says.
pub(crate) struct Done {
    pub action: AuditAction,
    pub detail: serde_json::Value,
    pub state: SessionState,
    pub status: String,
}

impl CommandContext<'_> {
    pub fn login(&self) -> &str {
        &self.author.login
    }

    /// Answers the commenter on the issue.
    pub async fn reply(&self, e: UserError) -> Result<(), JobError> {
        let text = match e {
            UserError::Refused(text) | UserError::Failed(text) => text,
            UserError::Hidden { public, .. } => public,
        };
        let text = comments::reply_to(&self.author.login, &text);
        let repo = self.repo;
        repo.forge()?
            .create_comment(repo.name, self.issue, &text)
            .await?;
        Ok(())
    }

    /// Writes the command's audit entries, commits its transaction and updates the status
    /// comment. `handled` is the detail of the `command.handled` entry redeliveries look for.
    pub async fn record(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        id: &SessionId,
        done: Done,
        handled: serde_json::Value,
    ) -> Result<(), Stop> {
        let actor = self.repo.actor(self.author);
        for (action, detail) in [
            (done.action.clone(), done.detail),
            (AuditAction::CommandHandled, handled),
        ] {
            audit::append(
                &mut tx,
                &audit::Entry {
                    actor: &actor,
                    action,
                    session: Some(id.as_str()),
                    delivery: self.repo.delivery,
                    detail,
                },
            )
            .await?;
        }
        tx.commit().await?;
        info!(session = %id, action = %done.action, by = %self.author.login, "command carried out");
        let (app, forge) = (self.repo.app, self.repo.forge()?);
        status::update_status_of(app, forge, id, done.state, &done.status).await?;
        Ok(())
    }
}

/// A session's move, or the refusal a command that lost a race to another gets.
pub(crate) async fn move_or_refuse(
    conn: &mut sqlx::AnyConnection,
    id: &SessionId,
    from: SessionState,
    to: SessionState,
    refusal: String,
) -> Result<(), Stop> {
    if sessions::move_state(conn, id, from, to, None).await? {
        Ok(())
    } else {
        Err(UserError::Refused(refusal).into())
    }
}
