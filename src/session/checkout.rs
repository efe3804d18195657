//! The checkout a planner and its scouts look at: the repository at the base commit, made
//! from the mirror cache like an executor's workspace, and removed when planning ends.

use std::path::PathBuf;

use crate::app::App;
use crate::contract::Base;
use crate::event;
use crate::forge::Forge;
use crate::git::{MirrorKey, Outcome, Workspace, WorkspaceError, WorkspaceRequest};
use crate::ids::{IssueNumber, RepoName};
use crate::jobs::JobError;

pub struct Checkout {
    workspace: Workspace,
}

impl Checkout {
    pub fn path(&self) -> PathBuf {
        self.workspace.repo()
    }

    /// Removes the checkout. One that is dropped instead (planning failed) is kept for
    /// the configured time, for debugging.
    pub async fn done(self) {
        if let Err(e) = self.workspace.finish(Outcome::Succeeded).await {
            tracing::warn!(error = %e, "could not remove a planning checkout");
        }
    }
}

pub async fn for_planning(
    app: &App,
    forge_kind: event::ForgeKind,
    forge: &dyn Forge,
    repo: &RepoName,
    issue: IssueNumber,
    title: &str,
    base: &Base,
) -> Result<Checkout, JobError> {
    let remote = forge.git_remote(repo).await?;
    let request = WorkspaceRequest {
        mirror: MirrorKey::new(forge_kind.as_str(), repo.clone()).map_err(permanent)?,
        remote,
        base: base.sha.clone(),
        issue,
        title: title.to_owned(),
    };
    match app.workspaces.create(&request).await {
        Ok(workspace) => Ok(Checkout { workspace }),
        Err(e @ WorkspaceError::Fetch { refused: false, .. }) => Err(JobError::Retryable(e.into())),
        Err(e) => Err(permanent(e)),
    }
}

fn permanent(e: WorkspaceError) -> JobError {
    JobError::Permanent(e.into())
}
