//! Repositories on disk: one bare mirror per forge repository, fetched incrementally by
//! the git command line with credentials given only through a credential helper's
//! environment, and per-run workspaces checked out from
//! a mirror without copying its history (objects shared through `objects/info/alternates`).
//! Also reads a run's result back: changed files, the diff, and the commit to publish.

mod artifacts;
mod branch;
mod checkout;
mod command;
mod credentials;
mod fs;
mod mirror;
pub mod push;
mod sparse;
mod text;
mod workspace;
mod workspaces;

use anyhow::anyhow;

pub use artifacts::Artifacts;
pub use branch::branch_name;
pub use credentials::credentials;
pub use mirror::{FETCH_TIMEOUT, MirrorCache, MirrorKey};
pub use sparse::Widening;
pub use text::FileText;
pub use workspace::{
    Author, ChangeKind, ChangedFile, DIFF_MAX_BYTES, Outcome, RESULT_MAX_BYTES, Workspace,
    changed_file_count,
};
pub use workspaces::{WorkspaceRequest, Workspaces};

/// Failures a caller branches on: a commit that is not there is the contract's problem, a
/// refused or unreachable remote is the forge's (retryable unless refused); the rest is
/// internal.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("Cannot prepare a workspace of {repo} at {sha}: {reason}")]
    BadCommit {
        repo: String,
        sha: String,
        reason: String,
    },
    #[error("Could not fetch {repo} from {url}: {message}")]
    Fetch {
        repo: String,
        url: String,
        message: String,
        /// The forge refused the credentials: fetching again will not help.
        refused: bool,
    },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Result<T, WorkspaceError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("The workspace task failed: {e}"))??)
}
