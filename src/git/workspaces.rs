//! Per-run workspaces: made from a mirror's commit (whole or sparse), taken back after
//! a restart, stacked on earlier work, and swept when a failed run's is old enough.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::anyhow;
use git2::Oid;

use super::WorkspaceError;
use super::branch::branch_name;
use super::checkout::{CheckoutError, checkout};
use super::fs::remove_tree;
use super::mirror::{MirrorCache, MirrorKey};
use super::sparse;
use super::workspace::{FAILED_MARK, Workspace};
use crate::forge::GitRemote;
use crate::ids::{CommitSha, IssueNumber};

/// What a run needs checked out.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    pub mirror: MirrorKey,
    pub remote: GitRemote,
    pub base: CommitSha,
    pub issue: IssueNumber,
    pub title: String,
    /// The repository's size in bytes as its forge reports it, when asked (see
    /// [`MirrorCache::needs_size`]): it decides whether a mirror made now is partial.
    pub size: Option<u64>,
}

/// Per-run workspaces under `DATA_DIR/workspaces/<id>/`:
/// - `git/`: planwright's own git dir for the run (alternates to the mirror); the sandbox
///   never sees it, so what is read back and committed does not depend on anything the
///   run could have written into a `.git`;
/// - `run/`: the sandbox's writable folder (`Command::workspace`), owned by the sandbox
///   user: `run/repo` is the checkout with the run's own `.git`, `run/home` its `HOME`.
pub struct Workspaces {
    root: PathBuf,
    cache: Arc<MirrorCache>,
    owner: Option<(u32, u32)>,
}

impl Workspaces {
    /// `owner`: the host user and group the sandbox runs as, when that is not planwright's
    /// own (root hands workspaces to an unprivileged user, see `Bwrap::new`).
    pub fn new(data_dir: &Path, cache: Arc<MirrorCache>, owner: Option<(u32, u32)>) -> Self {
        Workspaces {
            root: data_dir.join("workspaces"),
            cache,
            owner,
        }
    }

    /// The owner a sandbox started by this process needs: `Bwrap`'s default host user when
    /// planwright is root, none otherwise.
    pub fn default_owner() -> Option<(u32, u32)> {
        // SAFETY: geteuid has no preconditions.
        (unsafe { libc::geteuid() } == 0).then_some(crate::sandbox::Bwrap::DEFAULT_HOST_USER)
    }

    pub fn cache(&self) -> &Arc<MirrorCache> {
        &self.cache
    }

    /// A fresh checkout of `base` on the run branch, fetching into the mirror only when
    /// the commit is not there yet.
    pub async fn create(&self, request: &WorkspaceRequest) -> Result<Workspace, WorkspaceError> {
        self.create_on(request, &branch_name(request.issue, &request.title))
            .await
    }

    /// As [`Workspaces::create`], on a branch the caller names (a session keeps the branch
    /// its first run was given, whatever the issue's title became).
    pub async fn create_on(
        &self,
        request: &WorkspaceRequest,
        branch: &str,
    ) -> Result<Workspace, WorkspaceError> {
        self.make(request, branch, None).await
    }

    /// A checkout of `request.base` on `branch`; sparse when `sparse` says so and the
    /// commit is that large (see [`Workspaces::create_sparse`]).
    async fn make(
        &self,
        request: &WorkspaceRequest,
        branch: &str,
        sparse: Option<(usize, Vec<String>)>,
    ) -> Result<Workspace, WorkspaceError> {
        let repo_name = request.mirror.repo().to_string();
        let bad = |reason: &str| WorkspaceError::BadCommit {
            repo: repo_name.clone(),
            sha: request.base.as_str().to_owned(),
            reason: reason.to_owned(),
        };
        let sha = request.base.as_str();
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("a full 40-character commit SHA is needed"));
        }
        let oid = Oid::from_str(sha).map_err(|_| bad("not a commit SHA"))?;
        self.cache
            .ensure_commit(&request.mirror, &request.remote, oid, request.size)
            .await?;

        let mirror = self.cache.path(&request.mirror);
        let dir = self.root.join(uuid::Uuid::now_v7().to_string());
        let branch = branch.to_owned();
        let owner = self.owner;
        let (b, d) = (branch.clone(), dir.clone());
        let created = tokio::task::spawn_blocking(move || {
            let only = match sparse {
                Some((files_max, keep)) => sparse::paths(&mirror, oid, files_max, &keep)?,
                None => None,
            };
            let objects = checkout(&mirror, &d, oid, &b, owner, only.as_deref())?;
            Ok::<_, CheckoutError>((objects, only.is_some()))
        })
        .await
        .map_err(|e| anyhow!("The checkout task failed: {e}"))?;
        match created {
            Ok((shared_objects, sparse)) => Ok(Workspace {
                sparse: sparse.then(|| Arc::new(sparse::Widening::new(&dir, oid, owner))),
                dir,
                branch,
                base: oid,
                parent: None,
                compared: None,
                shared_objects,
                finished: false,
            }),
            Err(e) => {
                let _ = remove_tree(&dir);
                Err(match e {
                    CheckoutError::NotACommit(reason) => bad(&reason),
                    CheckoutError::Other(e) => e.into(),
                })
            }
        }
    }

    /// The workspace a run left at `dir` (see [`Workspace::location`]), for publishing
    /// the result it verified after a restart; `None` when it is gone or not one of ours.
    /// It counts as running again, so the sweep leaves it alone.
    pub fn reopen(
        &self,
        dir: &Path,
        mirror: &MirrorKey,
        branch: &str,
        base: &CommitSha,
    ) -> Result<Option<Workspace>, WorkspaceError> {
        let Ok(base) = Oid::from_str(base.as_str()) else {
            return Ok(None);
        };
        if dir.parent() != Some(self.root.as_path())
            || !dir.join("git").is_dir()
            || !dir.join("run/repo").is_dir()
        {
            return Ok(None);
        }
        let Ok(shared_objects) = self.cache.path(mirror).join("objects").canonicalize() else {
            return Ok(None);
        };
        match std::fs::remove_file(dir.join(FAILED_MARK)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(
                    anyhow!("Could not take back the workspace {}: {e}", dir.display()).into(),
                );
            }
        }
        Ok(Some(Workspace {
            dir: dir.to_path_buf(),
            branch: branch.to_owned(),
            base,
            parent: None,
            compared: None,
            shared_objects,
            finished: false,
            sparse: None,
        }))
    }

    /// Puts the result of `workspace` on top of `parent`: a commit the run branch holds
    /// upstream that the checkout did not start from (unfinished work kept there), so the
    /// result's push moves the branch forward rather than being refused. The result's
    /// content is still the checkout's, whatever `parent` held.
    pub async fn stack_on(
        &self,
        workspace: &mut Workspace,
        mirror: &MirrorKey,
        remote: &GitRemote,
        parent: &CommitSha,
    ) -> Result<(), WorkspaceError> {
        let oid = Oid::from_str(parent.as_str()).map_err(|_| WorkspaceError::BadCommit {
            repo: mirror.repo().to_string(),
            sha: parent.as_str().to_owned(),
            reason: "not a commit SHA".into(),
        })?;
        if oid != workspace.base {
            self.cache.ensure_commit(mirror, remote, oid, None).await?;
            workspace.parent = Some(oid);
        }
        Ok(())
    }

    /// Removes workspaces of failed runs kept longer than `keep_failed`; returns how many.
    /// Workspaces without the failure mark belong to running (or crashed) runs and are
    /// left alone.
    pub async fn sweep(&self, keep_failed: Duration) -> Result<usize, WorkspaceError> {
        let root = self.root.clone();
        let removed = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
            let Ok(entries) = std::fs::read_dir(&root) else {
                return Ok(0);
            };
            let mut removed = 0;
            for entry in entries {
                let dir = entry?.path();
                let Ok(failed_at) =
                    std::fs::metadata(dir.join(FAILED_MARK)).and_then(|m| m.modified())
                else {
                    continue;
                };
                if SystemTime::now()
                    .duration_since(failed_at)
                    .unwrap_or_default()
                    >= keep_failed
                {
                    remove_tree(&dir)?;
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
        .map_err(|e| anyhow!("The sweep task failed: {e}"))??;
        Ok(removed)
    }
}

impl Workspaces {
    /// A checkout of `request.base` for reading: when the commit has more than
    /// `files_max` files, only its root files and `keep` (paths the checkout must hold,
    /// such as settings files) are written, and the rest when [`Widening::complete`](sparse::Widening::complete) is
    /// called.
    pub async fn create_sparse(
        &self,
        request: &WorkspaceRequest,
        files_max: usize,
        keep: &[&str],
    ) -> Result<Workspace, WorkspaceError> {
        let keep = keep.iter().map(|k| (*k).to_owned()).collect();
        let branch = branch_name(request.issue, &request.title);
        self.make(request, &branch, Some((files_max, keep))).await
    }
}
