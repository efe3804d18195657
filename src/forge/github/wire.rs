//! GitHub's answers as they arrive: small structs read from its JSON, and what they
//! become in the forge's own types.

use secrecy::SecretString;
use serde::Deserialize;
use serde_json::Value;

use crate::event::Actor;
use crate::forge::{CI_LOG_MAX, Comment, FailedCheck, PullRequest, ReviewComment, tail};
use crate::ids::{CommentId, PullNumber};

#[derive(Deserialize)]
pub(super) struct GhInstallation {
    pub(super) id: i64,
    #[serde(default)]
    pub(super) account: Option<GhAccount>,
    #[serde(default)]
    pub(super) permissions: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub(super) events: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct GhAccount {
    pub(super) login: String,
}

#[derive(Deserialize)]
pub(super) struct GhErrorBody {
    pub(super) message: Option<String>,
    /// A 422's details: "Validation Failed" alone does not say what failed.
    #[serde(default)]
    pub(super) errors: Vec<Value>,
}

impl GhErrorBody {
    pub(super) fn into_message(self) -> Option<String> {
        let details: Vec<String> = self
            .errors
            .iter()
            .filter_map(|e| match e {
                Value::String(text) => Some(text.clone()),
                other => other.get("message")?.as_str().map(str::to_owned),
            })
            .collect();
        match (self.message, details.is_empty()) {
            (Some(message), true) => Some(message),
            (Some(message), false) => Some(format!("{message}: {}", details.join("; "))),
            (None, false) => Some(details.join("; ")),
            (None, true) => None,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct GhGraphql {
    pub(super) data: Option<Value>,
    pub(super) errors: Option<Vec<GhGraphqlError>>,
}

#[derive(Deserialize)]
pub(super) struct GhGraphqlError {
    pub(super) message: String,
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct GhNode {
    pub(super) node_id: String,
}

#[derive(Deserialize)]
pub(super) struct GhToken {
    pub(super) token: SecretString,
}

#[derive(Deserialize)]
pub(super) struct GhPull {
    pub(super) number: i64,
    pub(super) html_url: String,
    pub(super) title: String,
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) draft: bool,
    pub(super) head: GhPullEnd,
    pub(super) base: GhPullEnd,
}

#[derive(Deserialize)]
pub(super) struct GhPullState {
    pub(super) state: String,
    #[serde(default)]
    pub(super) merged: bool,
}

#[derive(Deserialize)]
pub(super) struct GhPullEnd {
    #[serde(rename = "ref")]
    pub(super) branch: String,
    /// `null` when the fork the branch lived in was deleted.
    #[serde(default)]
    pub(super) repo: Option<GhPullRepo>,
}

#[derive(Deserialize)]
pub(super) struct GhPullRepo {
    pub(super) full_name: String,
}

impl From<GhPull> for PullRequest {
    fn from(p: GhPull) -> Self {
        PullRequest {
            number: PullNumber(p.number),
            url: p.html_url,
            head_branch: p.head.branch,
            base_branch: p.base.branch,
            title: p.title,
            body: p.body.unwrap_or_default(),
            draft: p.draft,
        }
    }
}

#[derive(Deserialize, Default)]
pub(super) struct GhCheckRuns {
    pub(super) check_runs: Vec<GhCheckRun>,
}

#[derive(Deserialize)]
pub(super) struct GhCheckRun {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) app: Option<GhCheckApp>,
    #[serde(default)]
    pub(super) conclusion: Option<String>,
    #[serde(default)]
    pub(super) details_url: Option<String>,
    #[serde(default)]
    pub(super) html_url: Option<String>,
    #[serde(default)]
    pub(super) output: Option<GhCheckOutput>,
}

#[derive(Deserialize)]
pub(super) struct GhCheckApp {
    pub(super) id: u64,
}

#[derive(Deserialize)]
pub(super) struct GhApp {
    pub(super) slug: String,
}

#[derive(Deserialize)]
pub(super) struct GhUser {
    pub(super) login: String,
    pub(super) id: i64,
    #[serde(rename = "type", default)]
    pub(super) kind: String,
}

impl From<GhUser> for Actor {
    fn from(user: GhUser) -> Self {
        let bot = user.kind == "Bot" || user.login.ends_with("[bot]");
        Actor {
            login: user.login,
            id: user.id,
            bot,
        }
    }
}

/// Conclusions of a finished check run that mean it failed.
pub(super) fn failed_conclusion(conclusion: &str) -> bool {
    matches!(
        conclusion,
        "failure" | "timed_out" | "action_required" | "startup_failure"
    )
}

#[derive(Deserialize)]
pub(super) struct GhCheckSuite {
    pub(super) head_sha: String,
    #[serde(default)]
    pub(super) app: Option<GhCheckApp>,
}

#[derive(Deserialize)]
pub(super) struct GhCheckOutput {
    #[serde(default)]
    pub(super) title: Option<String>,
    #[serde(default)]
    pub(super) summary: Option<String>,
    #[serde(default)]
    pub(super) text: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct GhAnnotation {
    pub(super) path: String,
    #[serde(default)]
    pub(super) start_line: Option<i64>,
    #[serde(default)]
    pub(super) annotation_level: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

impl GhCheckRun {
    /// The run as a failed check: its output's parts one after another, then its
    /// annotations as `path:line: level: message` lines.
    pub(super) fn into_failed(self, annotations: &[GhAnnotation]) -> FailedCheck {
        let mut log = String::new();
        if let Some(output) = self.output {
            for part in [output.title, output.summary, output.text]
                .into_iter()
                .flatten()
            {
                log.push_str(part.trim_end());
                log.push('\n');
            }
        }
        for a in annotations {
            let line = a.start_line.map(|l| format!(":{l}")).unwrap_or_default();
            log.push_str(&format!(
                "{}{line}: {}: {}\n",
                a.path,
                a.annotation_level.as_deref().unwrap_or("failure"),
                a.message.as_deref().unwrap_or_default().trim()
            ));
        }
        FailedCheck {
            name: self.name,
            conclusion: self.conclusion.unwrap_or_default(),
            url: self.details_url.or(self.html_url),
            log: tail(&log, CI_LOG_MAX).into_owned(),
        }
    }
}

#[derive(Deserialize)]
pub(super) struct GhCombinedStatus {
    #[serde(default)]
    pub(super) statuses: Vec<GhStatus>,
}

#[derive(Deserialize)]
pub(super) struct GhStatus {
    pub(super) context: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) target_url: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct GhReview {
    pub(super) id: i64,
    pub(super) user: Option<GhUser>,
    pub(super) body: Option<String>,
    pub(super) state: String,
}

#[derive(Deserialize)]
pub(super) struct GhReviewComment {
    pub(super) id: i64,
    pub(super) path: String,
    #[serde(default)]
    pub(super) line: Option<i64>,
    #[serde(default)]
    pub(super) start_line: Option<i64>,
    #[serde(default)]
    pub(super) diff_hunk: Option<String>,
    #[serde(default)]
    pub(super) body: Option<String>,
    pub(super) user: Option<GhUser>,
}

impl From<GhReviewComment> for ReviewComment {
    fn from(c: GhReviewComment) -> Self {
        ReviewComment {
            id: CommentId(c.id),
            thread: None,
            path: c.path,
            lines: c.line.map(|end| (c.start_line.unwrap_or(end), end)),
            diff_hunk: c.diff_hunk.unwrap_or_default(),
            body: c.body.unwrap_or_default(),
            author: c.user.map_or_else(ghost, Actor::from),
        }
    }
}

/// GitHub shows a deleted account as `null`; it acts as nobody.
pub(super) fn ghost() -> Actor {
    Actor {
        login: "ghost".into(),
        id: 0,
        bot: false,
    }
}

#[derive(Deserialize)]
pub(super) struct GhLabel {
    pub(super) name: String,
}

#[derive(Deserialize)]
pub(super) struct GhIssue {
    pub(super) number: i64,
    pub(super) title: String,
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) labels: Vec<GhLabel>,
    pub(super) user: GhUser,
}

#[derive(Deserialize)]
pub(super) struct GhComment {
    pub(super) id: i64,
    pub(super) body: Option<String>,
    pub(super) user: Option<GhUser>,
    #[serde(default)]
    pub(super) created_at: Option<String>,
    /// The issue (or pull request) the comment is on; a review comment names its pull
    /// request in `pull_request_url` instead.
    #[serde(default)]
    pub(super) issue_url: Option<String>,
    #[serde(default)]
    pub(super) pull_request_url: Option<String>,
}

impl GhComment {
    /// Whether the comment's API address says it is on `#number`.
    pub(super) fn is_on(&self, number: i64) -> bool {
        let suffix_issue = format!("/issues/{number}");
        let suffix_pull = format!("/pulls/{number}");
        self.issue_url
            .as_deref()
            .is_some_and(|u| u.ends_with(&suffix_issue))
            || self
                .pull_request_url
                .as_deref()
                .is_some_and(|u| u.ends_with(&suffix_pull))
    }
}

impl From<GhComment> for Comment {
    fn from(c: GhComment) -> Self {
        Comment {
            id: CommentId(c.id),
            body: c.body.unwrap_or_default(),
            author: c.user.map_or_else(ghost, Actor::from),
            created_at: c.created_at.as_deref().and_then(crate::forge::unix_seconds),
        }
    }
}

#[derive(Deserialize)]
pub(super) struct GhRepoQuery {
    pub(super) repository: Option<GhRepoNode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GhRepoNode {
    #[serde(default)]
    pub(super) database_id: Option<i64>,
    #[serde(default)]
    pub(super) disk_usage: Option<u64>,
    pub(super) default_branch_ref: Option<GhRefNode>,
}

#[derive(Deserialize)]
pub(super) struct GhRefNode {
    pub(super) name: String,
    pub(super) target: GhOid,
}

#[derive(Deserialize)]
pub(super) struct GhOid {
    pub(super) oid: String,
}

#[derive(Deserialize)]
pub(super) struct GhPermission {
    pub(super) permission: String,
    pub(super) role_name: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct GhContent {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) encoding: Option<String>,
    pub(super) content: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_validation_failure_says_what_failed() {
        let body: GhErrorBody = serde_json::from_value(json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom",
                        "message": "A pull request already exists for o:b."}],
        }))
        .unwrap();
        assert_eq!(
            body.into_message().unwrap(),
            "Validation Failed: A pull request already exists for o:b."
        );
    }
}
