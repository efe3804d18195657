//! `/approve [vN]`: binds the maintainer's word to exactly the contract version they read,
//! its hash, base and settings, and queues the execute job for that binding.

use crate::config::repo::BoundSettings;
use crate::contract::{Contract, ContractVersion};
use crate::session::comments;
use crate::session::context::{CommandContext, Done, move_or_refuse};
use crate::session::error::{Stop, UserError};
use crate::session::jobs::enqueue_execute;
use crate::store::audit::AuditAction;
use crate::store::sessions::{self, ContractRow, SessionRow};
use crate::store::state::SessionState;

/// The contract an `/approve` written at `written_at` binds to, or why it binds none.
fn decide(
    state: SessionState,
    latest: Option<ContractRow>,
    asked: Option<ContractVersion>,
    written_at: Option<i64>,
) -> Result<ContractRow, UserError> {
    let contract = decide_version(state, latest, asked, written_at)?;
    let blocking = blocking_questions(&contract);
    if !blocking.is_empty() {
        let text = comments::approval_blocked_by_questions(contract.version, &blocking);
        return Err(UserError::Refused(text));
    }
    Ok(contract)
}

/// The contract's questions that block its approval (none in one that does not parse:
/// the execute job says that).
fn blocking_questions(contract: &ContractRow) -> Vec<String> {
    Contract::from_json(&contract.body)
        .map(|c| {
            c.blocking_questions()
                .into_iter()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn decide_version(
    state: SessionState,
    latest: Option<ContractRow>,
    asked: Option<ContractVersion>,
    written_at: Option<i64>,
) -> Result<ContractRow, UserError> {
    if state != SessionState::AwaitingApproval {
        return Err(UserError::Refused(comments::nothing_to_approve(state)));
    }
    let Some(contract) = latest.filter(|c| c.comment_id.is_some()) else {
        return Err(UserError::Refused(comments::no_posted_contract()));
    };
    let at = contract
        .comment_url
        .as_deref()
        .map(|u| format!(" ({u})"))
        .unwrap_or_default();
    // A command written before this version was posted was about an earlier one (a late
    // or replayed delivery); approving it would bind words to text their writer never saw.
    if let (Some(written), Some(posted)) = (written_at, contract.comment_created_at)
        && written < posted
    {
        let text = comments::approval_predates_contract(contract.version, &at);
        return Err(UserError::Refused(text));
    }
    if let Some(asked) = asked
        && asked != contract.version
    {
        let text = comments::not_the_current_version(asked, contract.version, &at);
        return Err(UserError::Refused(text));
    }
    Ok(contract)
}

pub(super) async fn apply(
    ctx: &CommandContext<'_>,
    tx: &mut sqlx::AnyConnection,
    session: &SessionRow,
    latest: Option<ContractRow>,
    asked: Option<ContractVersion>,
) -> Result<Done, Stop> {
    let contract = decide(session.state, latest, asked, ctx.written_at)?;
    let id = &session.id;
    if !sessions::approve_contract(tx, id, contract.version, ctx.login()).await? {
        return Err(UserError::Refused(comments::raced_approval()).into());
    }
    let (from, to) = (SessionState::AwaitingApproval, SessionState::Executing);
    move_or_refuse(tx, id, from, to, comments::raced_approval()).await?;
    let ahead = enqueue_execute(tx, id, &contract, None).await?;
    Ok(Done {
        action: AuditAction::ContractApproved,
        detail: serde_json::json!({
            "version": contract.version,
            "sha256": contract.sha256,
            "base_sha": contract.base_sha,
            "settings_sha256": contract.settings.as_deref().map(BoundSettings::sha256_of),
        }),
        state: to,
        status: format!(
            "{}{}",
            comments::approved(contract.version, ctx.login()),
            comments::runs_ahead(ahead)
        ),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ids::SessionId;

    pub(in crate::session) fn posted(version: u32) -> ContractRow {
        ContractRow {
            session_id: SessionId("s".into()),
            version: ContractVersion(version),
            sha256: "h".into(),
            body: "{}".into(),
            base_branch: "main".into(),
            base_sha: "b".into(),
            comment_id: Some("7".into()),
            comment_url: Some("https://forge/c/7".into()),
            created_at: 100,
            superseded_at: None,
            approved_by: None,
            approved_at: None,
            comment_created_at: Some(100),
            settings: None,
        }
    }

    fn refusal(r: Result<ContractRow, UserError>) -> String {
        match r {
            Err(UserError::Refused(text)) => text,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_posted_current_version_is_approved() {
        let ok = decide(
            SessionState::AwaitingApproval,
            Some(posted(2)),
            None,
            Some(100),
        );
        assert_eq!(ok.unwrap().version, ContractVersion(2));
        let named = decide(
            SessionState::AwaitingApproval,
            Some(posted(2)),
            Some(ContractVersion(2)),
            None,
        );
        assert_eq!(named.unwrap().version, ContractVersion(2));
    }

    #[test]
    fn a_contract_with_a_blocking_question_is_not_approved_and_the_refusal_names_it() {
        let mut contract = crate::contract::tests::sample_json();
        contract["open_questions"] = serde_json::json!([
            "Is Python 3.8 still supported?",
            {"question": "Should an empty element be an error or skipped?", "blocking": true}
        ]);
        let mut row = posted(3);
        row.body = contract.to_string();
        let text = refusal(decide(
            SessionState::AwaitingApproval,
            Some(row.clone()),
            None,
            None,
        ));
        assert!(
            text.contains("Should an empty element be an error or skipped?"),
            "{text}"
        );
        assert!(!text.contains("Python 3.8"), "{text}");
        assert!(text.contains("/revise"), "{text}");
        // Questions that do not block leave the approval as it was.
        contract["open_questions"] = serde_json::json!(["Is Python 3.8 still supported?"]);
        row.body = contract.to_string();
        assert_eq!(
            decide(SessionState::AwaitingApproval, Some(row), None, None)
                .unwrap()
                .version,
            ContractVersion(3)
        );
    }

    #[test]
    fn nothing_is_approved_outside_awaiting_approval_or_before_posting() {
        let text = refusal(decide(SessionState::Planning, Some(posted(1)), None, None));
        assert!(text.contains("the session is planning"), "{text}");
        let mut unposted = posted(1);
        unposted.comment_id = None;
        let text = refusal(decide(
            SessionState::AwaitingApproval,
            Some(unposted),
            None,
            None,
        ));
        assert!(text.contains("no posted contract"), "{text}");
        let text = refusal(decide(SessionState::AwaitingApproval, None, None, None));
        assert!(text.contains("no posted contract"), "{text}");
    }

    #[test]
    fn an_approval_written_before_the_contract_was_posted_binds_nothing() {
        let text = refusal(decide(
            SessionState::AwaitingApproval,
            Some(posted(3)),
            None,
            Some(99),
        ));
        assert!(
            text.contains("written before contract v3 (https://forge/c/7)"),
            "{text}"
        );
    }

    #[test]
    fn another_version_than_the_current_one_is_refused() {
        let asked = Some(ContractVersion(1));
        let text = refusal(decide(
            SessionState::AwaitingApproval,
            Some(posted(2)),
            asked,
            None,
        ));
        assert!(
            text.contains("version 1 is not the current contract; version 2"),
            "{text}"
        );
    }
}
