//! GitLab's answers as they arrive: small structs read from its JSON, and what they
//! become in the forge's own types.

use serde::Deserialize;

use crate::event::Actor;
use crate::forge::{Comment, PullRequest, ReviewComment};
use crate::ids::{CommentId, PullNumber};

/// One entry of `resource_label_events`.
#[derive(Deserialize)]
pub(super) struct GlLabelEvent {
    pub(super) id: i64,
    pub(super) user: Option<GlUser>,
    pub(super) label: Option<GlLabelRef>,
    /// `add` or `remove`.
    pub(super) action: String,
}

#[derive(Deserialize)]
pub(super) struct GlLabelRef {
    pub(super) name: String,
}

#[derive(Deserialize)]
pub(super) struct GlUser {
    pub(super) id: i64,
    pub(super) username: String,
    /// Only some endpoints (`/user`, `/users/:id`) say it.
    #[serde(default)]
    pub(super) bot: bool,
}

impl From<GlUser> for Actor {
    fn from(user: GlUser) -> Self {
        let bot = user.bot || is_token_bot(&user.username);
        Actor {
            login: user.username,
            id: user.id,
            bot,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct GlIssue {
    pub(super) iid: i64,
    pub(super) title: String,
    pub(super) description: Option<String>,
    /// Plain names unless `with_labels_details` is asked for.
    #[serde(default)]
    pub(super) labels: Vec<String>,
    pub(super) author: GlUser,
}

#[derive(Deserialize)]
pub(super) struct GlNote {
    pub(super) id: i64,
    pub(super) body: Option<String>,
    pub(super) author: GlUser,
    #[serde(default)]
    pub(super) system: bool,
    #[serde(default)]
    pub(super) created_at: Option<String>,
}

impl From<GlNote> for Comment {
    fn from(n: GlNote) -> Self {
        Comment {
            id: CommentId(n.id),
            body: n.body.unwrap_or_default(),
            author: n.author.into(),
            created_at: n.created_at.as_deref().and_then(crate::forge::unix_seconds),
        }
    }
}

#[derive(Deserialize)]
pub(super) struct GlMergeRequestState {
    pub(super) state: String,
}

#[derive(Deserialize)]
pub(super) struct GlPipeline {
    pub(super) sha: String,
    pub(super) status: String,
}

#[derive(Deserialize)]
pub(super) struct GlJob {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) status: String,
    #[serde(default)]
    pub(super) allow_failure: bool,
    #[serde(default)]
    pub(super) failure_reason: Option<String>,
    #[serde(default)]
    pub(super) web_url: Option<String>,
}

/// A merge request discussion; one that starts with a note on a diff line is an inline
/// comment's thread.
#[derive(Deserialize)]
pub(super) struct GlDiscussion {
    pub(super) id: String,
    #[serde(default)]
    pub(super) notes: Vec<GlDiffNote>,
}

#[derive(Deserialize)]
pub(super) struct GlDiffNote {
    pub(super) id: i64,
    pub(super) body: Option<String>,
    pub(super) author: GlUser,
    #[serde(default)]
    pub(super) system: bool,
    #[serde(default)]
    pub(super) resolvable: bool,
    #[serde(default)]
    pub(super) resolved: bool,
    #[serde(default)]
    pub(super) position: Option<GlPosition>,
}

#[derive(Deserialize)]
pub(super) struct GlPosition {
    #[serde(default)]
    pub(super) new_path: Option<String>,
    #[serde(default)]
    pub(super) old_path: Option<String>,
    #[serde(default)]
    pub(super) new_line: Option<i64>,
    #[serde(default)]
    pub(super) line_range: Option<GlLineRange>,
}

#[derive(Deserialize)]
pub(super) struct GlLineRange {
    pub(super) start: GlLine,
    pub(super) end: GlLine,
}

#[derive(Deserialize)]
pub(super) struct GlLine {
    #[serde(default)]
    pub(super) new_line: Option<i64>,
}

impl GlDiscussion {
    /// The discussion's first note, when it is an unresolved note on a diff line.
    pub(super) fn open_diff_comment(self) -> Option<ReviewComment> {
        let first = self.notes.into_iter().next()?;
        let position = first.position?;
        if first.system || (first.resolvable && first.resolved) {
            return None;
        }
        let path = position.new_path.or(position.old_path)?;
        let lines = match position.line_range {
            Some(GlLineRange {
                start: GlLine { new_line: Some(a) },
                end: GlLine { new_line: Some(b) },
            }) => Some((a, b)),
            _ => position.new_line.map(|n| (n, n)),
        };
        Some(ReviewComment {
            id: CommentId(first.id),
            thread: Some(self.id),
            path,
            lines,
            // GitLab keeps the diff beside the note, not in it; the planner reads the file.
            diff_hunk: String::new(),
            body: first.body.unwrap_or_default(),
            author: first.author.into(),
        })
    }
}

#[derive(Deserialize)]
pub(super) struct GlProject {
    #[serde(default)]
    pub(super) id: Option<i64>,
    /// `null` while the repository is empty.
    pub(super) default_branch: Option<String>,
    #[serde(default)]
    pub(super) http_url_to_repo: Option<String>,
    /// Sent when asked for (`statistics=true`) and the token may see them.
    #[serde(default)]
    pub(super) statistics: Option<GlStatistics>,
}

#[derive(Deserialize)]
pub(super) struct GlStatistics {
    /// Bytes.
    #[serde(default)]
    pub(super) repository_size: Option<u64>,
}

#[derive(Deserialize)]
pub(super) struct GlBranch {
    pub(super) commit: GlCommit,
}

#[derive(Deserialize)]
pub(super) struct GlCommit {
    pub(super) id: String,
}

#[derive(Deserialize)]
pub(super) struct GlMember {
    pub(super) access_level: i64,
    /// The user's state (`active`, `blocked`, …).
    pub(super) state: Option<String>,
    /// `awaiting` while a seat or an invitation is pending.
    pub(super) membership_state: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct GlAward {
    pub(super) name: String,
    pub(super) user: GlUser,
}

#[derive(Deserialize)]
pub(super) struct GlFile {
    pub(super) encoding: String,
    pub(super) content: String,
}

#[derive(Deserialize)]
pub(super) struct GlMergeRequest {
    pub(super) iid: i64,
    pub(super) title: String,
    pub(super) description: Option<String>,
    pub(super) source_branch: String,
    pub(super) target_branch: String,
    pub(super) source_project_id: i64,
    pub(super) target_project_id: i64,
    pub(super) web_url: String,
    /// Missing before GitLab 13.2, whose `work_in_progress` came from the title alone.
    #[serde(default)]
    pub(super) draft: Option<bool>,
}

impl From<GlMergeRequest> for PullRequest {
    fn from(m: GlMergeRequest) -> Self {
        let draft = m
            .draft
            .unwrap_or_else(|| undrafted(&m.title).len() < m.title.len());
        PullRequest {
            number: PullNumber(m.iid),
            url: m.web_url,
            head_branch: m.source_branch,
            base_branch: m.target_branch,
            title: m.title,
            body: m.description.unwrap_or_default(),
            draft,
        }
    }
}

/// `title` without the prefixes that make GitLab treat a merge request as a draft
/// (`Draft:`, `[Draft]`, `(Draft)`, in any case, repeated or not).
pub(super) fn undrafted(title: &str) -> &str {
    let mut rest = title.trim_start();
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(len) = ["draft:", "[draft]", "(draft)"]
            .iter()
            .find(|p| lower.starts_with(*p))
            .map(|p| p.len())
        else {
            return rest;
        };
        rest = rest[len..].trim_start();
    }
}

/// Project and group access tokens act as `project_<id>_bot…` / `group_<id>_bot…` users.
pub(crate) fn is_token_bot(username: &str) -> bool {
    (username.starts_with("project_") || username.starts_with("group_"))
        && username.contains("_bot")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlabs_draft_prefixes_come_off_and_nothing_else() {
        assert_eq!(undrafted("Draft: Fix it"), "Fix it");
        assert_eq!(undrafted("[draft] (Draft)  DRAFT:Fix it"), "Fix it");
        assert_eq!(undrafted("Drafting the fix"), "Drafting the fix");
        assert_eq!(undrafted("Fix the draft: parser"), "Fix the draft: parser");
    }
}
