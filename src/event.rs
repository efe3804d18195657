//! The domain events planwright acts on. Webhooks from either forge are parsed into these
//! right after verification; nothing past the webhook edge reads raw payloads.

use serde::{Deserialize, Serialize};

use crate::ids::{CommentId, CommitSha, InstallationId, IssueNumber, PullNumber, RepoName};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgeKind {
    Github,
    Gitlab,
    /// A repository on this machine, worked on by `planwright solve` (no webhooks).
    Local,
}

impl ForgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::Github => "github",
            ForgeKind::Gitlab => "gitlab",
            ForgeKind::Local => "local",
        }
    }
}

impl std::fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a forge planwright knows")]
pub struct UnknownForge(String);

impl std::str::FromStr for ForgeKind {
    type Err = UnknownForge;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [ForgeKind::Github, ForgeKind::Gitlab, ForgeKind::Local]
            .into_iter()
            .find(|forge| forge.as_str() == s)
            .ok_or_else(|| UnknownForge(s.to_owned()))
    }
}

crate::ids::stored_as_text!(ForgeKind);

/// Who did something on the forge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub login: String,
    pub id: i64,
    /// The forge says this account is a bot (GitHub `type: Bot`, a `[bot]` login).
    pub bot: bool,
}

/// Where a comment was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "number", rename_all = "snake_case")]
pub enum Thread {
    Issue(IssueNumber),
    PullRequest(PullNumber),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The forge checks that the hook works (GitHub `ping`).
    Ping {
        hook_id: Option<i64>,
    },
    /// An app installation changed (`installation.*`).
    Installation {
        installation: InstallationId,
        action: InstallationAction,
        account: String,
        /// The repositories the payload names (only for `created`, and only when the
        /// installation is limited to selected repositories).
        repositories: Vec<RepoName>,
    },
    /// Repositories were added to or removed from an installation.
    InstallationRepositories {
        installation: InstallationId,
        action: String,
        added: Vec<RepoName>,
        removed: Vec<RepoName>,
    },
    Repository(RepoEvent),
}

/// What happened to an app installation, in GitHub's words (`installation.<action>`),
/// parsed at the webhook edge. An action planwright does not act on keeps its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum InstallationAction {
    Created,
    Deleted,
    Suspend,
    Unsuspend,
    NewPermissionsAccepted,
    Other(String),
}

impl InstallationAction {
    /// GitHub's name of the action.
    pub fn as_str(&self) -> &str {
        match self {
            InstallationAction::Created => "created",
            InstallationAction::Deleted => "deleted",
            InstallationAction::Suspend => "suspend",
            InstallationAction::Unsuspend => "unsuspend",
            InstallationAction::NewPermissionsAccepted => "new_permissions_accepted",
            InstallationAction::Other(name) => name,
        }
    }
}

impl From<String> for InstallationAction {
    fn from(name: String) -> Self {
        match name.as_str() {
            "created" => InstallationAction::Created,
            "deleted" => InstallationAction::Deleted,
            "suspend" => InstallationAction::Suspend,
            "unsuspend" => InstallationAction::Unsuspend,
            "new_permissions_accepted" => InstallationAction::NewPermissionsAccepted,
            _ => InstallationAction::Other(name),
        }
    }
}

impl From<InstallationAction> for String {
    fn from(action: InstallationAction) -> Self {
        action.as_str().to_owned()
    }
}

impl std::fmt::Display for InstallationAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something that happened in one repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoEvent {
    pub forge: ForgeKind,
    pub repo: RepoName,
    /// GitHub: the installation the delivery was sent for; GitLab: none.
    pub installation: Option<InstallationId>,
    pub kind: RepoEventKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RepoEventKind {
    /// Labels were added to an issue (GitHub sends one per event; GitLab may add several).
    IssueLabeled {
        issue: IssueNumber,
        labels: Vec<String>,
        actor: Actor,
    },
    /// Labels were removed from an issue.
    IssueUnlabeled {
        issue: IssueNumber,
        labels: Vec<String>,
        actor: Actor,
    },
    /// A comment was written on an issue or a pull request (including review comments on
    /// a diff line).
    CommentCreated {
        thread: Thread,
        comment: CommentId,
        body: String,
        author: Actor,
    },
    /// A pull request review was submitted (GitHub only; its body may be empty).
    ReviewSubmitted {
        pull: PullNumber,
        review: i64,
        /// Parsed at the webhook edge; a state planwright does not know is `Other`.
        state: ReviewState,
        body: String,
        author: Actor,
    },
    /// Checks of another app or service ended in failure on a commit: a GitHub check
    /// suite or commit status, a GitLab pipeline. What failed is read from the forge.
    ChecksFailed { sha: CommitSha, source: CiSource },
    /// A merge request was opened, updated, merged or closed (GitLab).
    MergeRequestChanged {
        pull: PullNumber,
        action: String,
        state: String,
        actor: Actor,
    },
}

/// What a review says of a pull request, in the forge's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ReviewState {
    ChangesRequested,
    Commented,
    Approved,
    Dismissed,
    /// Started but not submitted, or a state planwright does not know.
    Other,
}

impl ReviewState {
    /// GitHub's names: `changes_requested` in webhooks, `CHANGES_REQUESTED` over REST.
    pub fn parse(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "changes_requested" => ReviewState::ChangesRequested,
            "commented" => ReviewState::Commented,
            "approved" => ReviewState::Approved,
            "dismissed" => ReviewState::Dismissed,
            _ => ReviewState::Other,
        }
    }
}

/// Read from GitHub's name, as a queued event stores it.
impl From<String> for ReviewState {
    fn from(name: String) -> Self {
        ReviewState::parse(&name)
    }
}

/// Written as GitHub's webhook name, so queued events read the same before and after.
impl From<ReviewState> for String {
    fn from(state: ReviewState) -> Self {
        match state {
            ReviewState::ChangesRequested => "changes_requested",
            ReviewState::Commented => "commented",
            ReviewState::Approved => "approved",
            ReviewState::Dismissed => "dismissed",
            ReviewState::Other => "other",
        }
        .to_owned()
    }
}

/// Where a failing check was reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CiSource {
    /// A GitHub check suite (one app's check runs on the commit).
    CheckSuite { id: i64 },
    /// A GitHub commit status, by its context.
    Status { context: String },
    /// A GitLab pipeline.
    Pipeline { id: i64 },
}

impl CiSource {
    /// What names it among the commit's reports: one comment each.
    pub fn key(&self) -> String {
        match self {
            CiSource::CheckSuite { id } => format!("check_suite:{id}"),
            CiSource::Status { context } => format!("status:{context}"),
            CiSource::Pipeline { id } => format!("pipeline:{id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A review event queued before its state was parsed at the webhook edge, exactly as
    /// the job row holds it.
    const QUEUED: &str = r#"{"type":"review_submitted","pull":7,"review":42,"state":"changes_requested","body":"Use a loop.","author":{"login":"maria","id":5,"bot":false}}"#;

    #[test]
    fn a_review_event_queued_with_its_state_as_text_reads_and_writes_back_the_same() {
        let kind: RepoEventKind = serde_json::from_str(QUEUED).unwrap();
        let RepoEventKind::ReviewSubmitted { state, .. } = &kind else {
            panic!("{kind:?}")
        };
        assert_eq!(*state, ReviewState::ChangesRequested);
        assert_eq!(serde_json::to_string(&kind).unwrap(), QUEUED);
    }

    #[test]
    fn a_review_state_planwright_does_not_know_is_other_and_every_known_one_round_trips() {
        let pending = QUEUED.replace("changes_requested", "pending");
        let kind: RepoEventKind = serde_json::from_str(&pending).unwrap();
        assert!(matches!(
            kind,
            RepoEventKind::ReviewSubmitted {
                state: ReviewState::Other,
                ..
            }
        ));
        for state in [
            ReviewState::ChangesRequested,
            ReviewState::Commented,
            ReviewState::Approved,
            ReviewState::Dismissed,
            ReviewState::Other,
        ] {
            assert_eq!(ReviewState::parse(&String::from(state)), state);
        }
        assert_eq!(
            ReviewState::parse("CHANGES_REQUESTED"),
            ReviewState::ChangesRequested
        );
    }
}
