//! Carrying out a command a permitted person wrote on the issue: the session is read in
//! the transaction, the command's handler decides (a pure function of the session's state,
//! tested on its own) and writes its move and next job, and the audit entries are written
//! with it before the status comment says what happened. A refusal is answered to the
//! commenter and changes nothing.

use tracing::info;

use super::commands::Command;
use super::error::{Stop, UserError};
use super::{approve, cancel, comments, label, replan, retry, revise, status};
use crate::app::App;
use crate::config::repo::RepoConfig;
use crate::event::{Actor, RepoEvent};
use crate::forge::Forge;
use crate::ids::{IssueNumber, SessionId};
use crate::jobs::JobError;
use crate::store::state::SessionState;
use crate::store::{audit, sessions};

pub(super) struct CommandContext<'a> {
    pub app: &'a App,
    pub forge: &'a dyn Forge,
    pub event: &'a RepoEvent,
    pub issue: IssueNumber,
    pub author: &'a Actor,
    /// When the forge says the command was written (seconds, its clock).
    pub written_at: Option<i64>,
    pub delivery: Option<&'a str>,
    pub config: &'a RepoConfig,
}

/// What a carried-out command did: its audit entry and what the status comment says.
pub(super) struct Done {
    pub action: &'static str,
    pub detail: serde_json::Value,
    pub state: SessionState,
    pub status: String,
}

impl CommandContext<'_> {
    fn actor(&self) -> String {
        format!("{}:{}", self.event.forge.as_str(), self.author.login)
    }

    pub(super) fn login(&self) -> &str {
        &self.author.login
    }

    /// Carries out `command`; a refusal is answered to its writer.
    pub(super) async fn carry_out(&self, command: &Command) -> Result<(), JobError> {
        match self.act(command).await {
            Ok(()) | Err(Stop::Gone) => Ok(()),
            Err(Stop::User(e)) => self.reply(e).await,
            Err(Stop::Job(e)) => Err(e),
        }
    }

    /// Answers the commenter on the issue.
    pub(super) async fn reply(&self, e: UserError) -> Result<(), JobError> {
        let text = match e {
            UserError::Refused(text) | UserError::Failed(text) => text,
            UserError::Hidden { public, .. } => public,
        };
        let text = comments::reply_to(&self.author.login, &text);
        self.forge
            .create_comment(&self.event.repo, self.issue, &text)
            .await?;
        Ok(())
    }

    async fn act(&self, command: &Command) -> Result<(), Stop> {
        // `/plan` plans from the issue as it is now: the text the maintainer just chose to
        // plan from. Read before the transaction, which must not wait on the forge.
        let issue_now = match command {
            Command::Plan => Some(self.forge.issue(&self.event.repo, self.issue).await?),
            _ => None,
        };
        let event = self.event;
        let mut tx = self.app.db.writer.begin().await?;
        let Some(session) =
            sessions::find_active(&mut tx, event.forge, &event.repo, self.issue).await?
        else {
            drop(tx);
            if *command == Command::Plan {
                let (app, forge, config) = (self.app, self.forge, self.config);
                let (issue, by, delivery) = (self.issue, self.author, self.delivery);
                label::start_session(app, forge, event, issue, by, config, delivery, issue_now)
                    .await?;
                return Ok(());
            }
            return Err(UserError::Refused(comments::no_session(&self.config.label)).into());
        };
        let latest = sessions::latest_contract(&mut tx, &session.id).await?;
        let done = match command {
            Command::Approve { version } => {
                approve::apply(self, &mut tx, &session, latest, *version).await?
            }
            Command::Revise { feedback } => {
                revise::apply(self, &mut tx, &session, latest, feedback).await?
            }
            Command::Plan => replan::apply(self, &mut tx, &session, latest, issue_now).await?,
            Command::Retry { continues } => {
                retry::apply(self, &mut tx, &session, latest, *continues).await?
            }
            Command::Cancel => cancel::apply(self, &mut tx, &session).await?,
        };
        let handled = serde_json::json!({ "command": command.name() });
        self.record(tx, &session.id, done, handled).await
    }

    /// Writes the command's audit entries, commits its transaction and updates the status
    /// comment. `handled` is the detail of the `command.handled` entry redeliveries look for.
    pub(super) async fn record(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        id: &SessionId,
        done: Done,
        handled: serde_json::Value,
    ) -> Result<(), Stop> {
        let actor = self.actor();
        for (action, detail) in [(done.action, done.detail), ("command.handled", handled)] {
            audit::append(
                &mut tx,
                &audit::Entry {
                    actor: &actor,
                    action,
                    session: Some(id.as_str()),
                    delivery: self.delivery,
                    detail,
                },
            )
            .await?;
        }
        tx.commit().await?;
        info!(session = %id, action = done.action, by = %self.author.login, "command carried out");
        status::update_status_of(self.app, self.forge, id, done.state, &done.status).await?;
        Ok(())
    }
}

/// A session's move, or the refusal a command that lost a race to another gets.
pub(super) async fn move_or_refuse(
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
