//! The append-only audit log: who decided and who did what. This module only inserts and
//! reads; nothing in planwright updates or deletes a row.

use std::borrow::Cow;

use anyhow::Result;
use sqlx::AnyConnection;

use super::now_ms;

/// What an audit entry records. The text is stored and read back (the session page and
/// a retried delivery match on it), so a variant's text never changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditAction {
    SessionStarted,
    SessionCancelled,
    SessionReplanned,
    SessionRetried,
    SessionFailed,
    /// A command's delivery was handled: what makes a retried delivery a no-op.
    CommandHandled,
    QuestionsAsked,
    QuestionsAnswered,
    ContractWritten,
    ContractPosted,
    ContractApproved,
    ContractRevisionRequested,
    BaselineReused,
    ExecutionTimed,
    PullOpened,
    PartialKept,
    /// The GitHub App installed, removed or changed on an account, with GitHub's word for
    /// it (`created`, `deleted`, `suspend`, …).
    Installation(String),
}

impl AuditAction {
    /// The text the `action` column holds.
    pub fn as_str(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            AuditAction::SessionStarted => "session.started",
            AuditAction::SessionCancelled => "session.cancelled",
            AuditAction::SessionReplanned => "session.replanned",
            AuditAction::SessionRetried => "session.retried",
            AuditAction::SessionFailed => "session.failed",
            AuditAction::CommandHandled => "command.handled",
            AuditAction::QuestionsAsked => "questions.asked",
            AuditAction::QuestionsAnswered => "questions.answered",
            AuditAction::ContractWritten => "contract.written",
            AuditAction::ContractPosted => "contract.posted",
            AuditAction::ContractApproved => "contract.approved",
            AuditAction::ContractRevisionRequested => "contract.revision_requested",
            AuditAction::BaselineReused => "baseline.reused",
            AuditAction::ExecutionTimed => "execution.timed",
            AuditAction::PullOpened => "pull.opened",
            AuditAction::PartialKept => "partial.kept",
            AuditAction::Installation(action) => {
                return Cow::Owned(format!("installation.{action}"));
            }
        })
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// `github:<login>`, `gitlab:<username>`, or `planwright` for the bot's own steps.
    pub actor: &'a str,
    pub action: AuditAction,
    pub session: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub detail: serde_json::Value,
}

/// Appends an entry; call it inside the transaction of the change it records.
pub async fn append(conn: &mut AnyConnection, entry: &Entry<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (id, at, actor, action, session_id, delivery_id, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(now_ms())
    .bind(entry.actor)
    .bind(entry.action.as_str().into_owned())
    .bind(entry.session)
    .bind(entry.delivery)
    .bind(entry.detail.to_string())
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `delivery` already recorded `action`: a retried job's first attempt may have
/// committed before it failed.
pub async fn delivery_did(
    conn: &mut AnyConnection,
    delivery: &str,
    action: AuditAction,
) -> Result<bool> {
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT 1 FROM audit_log WHERE delivery_id = $1 AND action = $2 LIMIT 1")
            .bind(delivery)
            .bind(action.as_str().into_owned())
            .fetch_optional(conn)
            .await?;
    Ok(row.is_some())
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct AuditRow {
    pub id: String,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub session_id: Option<String>,
    pub delivery_id: Option<String>,
    pub detail: String,
}

/// Entries oldest first.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<AuditRow>> {
    Ok(sqlx::query_as::<_, AuditRow>(
        "SELECT id, at, actor, action, session_id, delivery_id, detail FROM audit_log \
         ORDER BY at, id",
    )
    .fetch_all(conn)
    .await?)
}

/// One session's entries, oldest first.
pub async fn for_session(
    conn: &mut AnyConnection,
    session: &crate::ids::SessionId,
) -> Result<Vec<AuditRow>> {
    Ok(sqlx::query_as::<_, AuditRow>(
        "SELECT id, at, actor, action, session_id, delivery_id, detail FROM audit_log \
         WHERE session_id = $1 ORDER BY at, id",
    )
    .bind(session.as_str())
    .fetch_all(conn)
    .await?)
}

impl super::Db {
    /// [`delivery_did`], read on a pooled connection.
    pub async fn delivery_did(&self, delivery: &str, action: AuditAction) -> Result<bool> {
        delivery_did(&mut *self.pool.acquire().await?, delivery, action).await
    }
}

#[cfg(test)]
mod tests {
    use super::AuditAction;

    /// The stored text of every action: renaming a variant must not change a row's text.
    #[test]
    fn every_action_keeps_its_stored_text() {
        let all = [
            (AuditAction::SessionStarted, "session.started"),
            (AuditAction::SessionCancelled, "session.cancelled"),
            (AuditAction::SessionReplanned, "session.replanned"),
            (AuditAction::SessionRetried, "session.retried"),
            (AuditAction::SessionFailed, "session.failed"),
            (AuditAction::CommandHandled, "command.handled"),
            (AuditAction::QuestionsAsked, "questions.asked"),
            (AuditAction::QuestionsAnswered, "questions.answered"),
            (AuditAction::ContractWritten, "contract.written"),
            (AuditAction::ContractPosted, "contract.posted"),
            (AuditAction::ContractApproved, "contract.approved"),
            (
                AuditAction::ContractRevisionRequested,
                "contract.revision_requested",
            ),
            (AuditAction::BaselineReused, "baseline.reused"),
            (AuditAction::ExecutionTimed, "execution.timed"),
            (AuditAction::PullOpened, "pull.opened"),
            (AuditAction::PartialKept, "partial.kept"),
            (
                AuditAction::Installation("created".to_owned()),
                "installation.created",
            ),
            (
                AuditAction::Installation("new_permissions_accepted".to_owned()),
                "installation.new_permissions_accepted",
            ),
        ];
        for (action, text) in &all {
            // A new variant must be listed here: this match has no wildcard.
            match action {
                AuditAction::SessionStarted
                | AuditAction::SessionCancelled
                | AuditAction::SessionReplanned
                | AuditAction::SessionRetried
                | AuditAction::SessionFailed
                | AuditAction::CommandHandled
                | AuditAction::QuestionsAsked
                | AuditAction::QuestionsAnswered
                | AuditAction::ContractWritten
                | AuditAction::ContractPosted
                | AuditAction::ContractApproved
                | AuditAction::ContractRevisionRequested
                | AuditAction::BaselineReused
                | AuditAction::ExecutionTimed
                | AuditAction::PullOpened
                | AuditAction::PartialKept
                | AuditAction::Installation(_) => {}
            }
            assert_eq!(action.as_str(), *text);
            assert_eq!(action.to_string(), *text);
        }
        let texts: std::collections::BTreeSet<_> = all.iter().map(|(_, t)| *t).collect();
        assert_eq!(texts.len(), all.len(), "two actions share a text");
    }
}
