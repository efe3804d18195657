//! The checkout a planner and its scouts look at: the repository at the base commit, made
//! from the mirror cache like an executor's workspace, and removed when planning ends. The
//! tools read the commit's tree, so a large repository's checkout starts sparse (its root
//! files and settings) and is made whole when a scout first runs a command.

use std::path::PathBuf;

use crate::app::App;
use crate::contract::Base;
use crate::event;
use crate::forge::{Forge, ForgeError, GitRemote};
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

    /// planwright's own git dir of the checkout, which holds the base commit's objects;
    /// the sandbox never sees it.
    pub fn git_dir(&self) -> PathBuf {
        self.workspace.git_dir()
    }

    /// Set while the checkout holds only part of the base commit.
    pub fn widening(&self) -> Option<std::sync::Arc<crate::git::Widening>> {
        self.workspace.widening()
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
    let mirror = MirrorKey::new(forge_kind.as_str(), repo.clone()).map_err(permanent)?;
    let mut request = WorkspaceRequest {
        size: mirror_size(app, forge, &mirror).await?,
        mirror,
        remote: forge.git_remote(repo).await?,
        base: base.sha.clone(),
        issue,
        title: title.to_owned(),
    };
    // What is read from the checkout before any command runs: the settings, and the
    // devcontainer that may name the environment.
    let keep: Vec<&str> = forge
        .config_paths()
        .iter()
        .chain(crate::environment::source::DEVCONTAINER_PATHS)
        .copied()
        .collect();
    let mut renewal = Renewal::new(forge, repo);
    let created = loop {
        let created = app
            .workspaces
            .create_sparse(&request, app.settings.sparse_checkout_files, &keep)
            .await;
        match renewal.after(&created).await? {
            Some(renewed) => request.remote = renewed,
            None => break created,
        }
    };
    match created {
        Ok(workspace) => {
            if let Some(widening) = workspace.widening() {
                // Files the settings name as the setup cache's key must be there to be
                // checked.
                let named = crate::config::repo::RepoConfig::cache_key_paths(
                    &workspace.repo(),
                    forge.config_paths(),
                );
                widening.include(named.clone()).await.map_err(permanent)?;
                // A name reached through a symlink is checked where the link leads, which
                // may not be written yet: such a checkout is made whole at once.
                if named.iter().any(|p| !workspace.repo().join(p).is_file()) {
                    widening.complete().await.map_err(permanent)?;
                }
                tracing::info!(%repo, "a sparse planning checkout");
            }
            Ok(Checkout { workspace })
        }
        Err(e @ WorkspaceError::Fetch { refused: false, .. }) => Err(JobError::Retryable(e.into())),
        Err(e) => Err(permanent(e)),
    }
}

/// The repository's size as its forge reports it, asked only when it decides how the
/// mirror about to be made is made (`MIRROR_PARTIAL_ABOVE`): one forge call per mirror.
pub(crate) async fn mirror_size(
    app: &App,
    forge: &dyn Forge,
    mirror: &MirrorKey,
) -> Result<Option<u64>, ForgeError> {
    if !app.workspaces.cache().needs_size(mirror) {
        return Ok(None);
    }
    let size = forge.repository(mirror.repo()).await?.size;
    if size.is_none() {
        tracing::warn!(repo = %mirror.repo(), "the forge does not say how large the repository is; its mirror is made whole");
    }
    Ok(size)
}

fn permanent(e: WorkspaceError) -> JobError {
    JobError::Permanent(e.into())
}

/// Git credentials renewed once when the forge refuses them, as it does a cached token
/// revoked since it was handed out; a second refusal stands.
pub(crate) struct Renewal<'a> {
    forge: &'a dyn Forge,
    repo: &'a RepoName,
    renewed: bool,
}

impl<'a> Renewal<'a> {
    pub(crate) fn new(forge: &'a dyn Forge, repo: &'a RepoName) -> Self {
        Self {
            forge,
            repo,
            renewed: false,
        }
    }

    /// The renewed remote to fetch with again, when `fetched` was refused and nothing
    /// was renewed yet; `None` when `fetched` stands.
    pub(crate) async fn after<T>(
        &mut self,
        fetched: &Result<T, WorkspaceError>,
    ) -> Result<Option<GitRemote>, ForgeError> {
        let Err(e @ WorkspaceError::Fetch { refused: true, .. }) = fetched else {
            return Ok(None);
        };
        if self.renewed {
            return Ok(None);
        }
        tracing::warn!(error = %e, "git refused the credentials; fetching once more with renewed ones");
        self.renewed = true;
        self.forge.renewed_git_remote(self.repo).await.map(Some)
    }
}
