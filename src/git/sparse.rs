//! Sparse planning checkouts. The planner and its scouts read a commit's files from its
//! tree (`RepoTools::in_tree`), so a checkout of a large repository need only hold what
//! is read from disk before any command runs: the files at its root (which say how the
//! project is built and tested) and the settings files. The rest is checked out, once,
//! when a scout first runs a command, since a command may read anything.

use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

use super::checkout::{CheckoutError, fill_run_index, write_tree};
use super::fs::chown_tree;
use super::{WorkspaceError, blocking};

/// A planning checkout that holds part of its commit until [`Widening::complete`].
#[derive(Debug)]
pub struct Widening {
    /// planwright's git dir of the workspace, and the checkout.
    git_dir: PathBuf,
    work: PathBuf,
    base: Oid,
    owner: Option<(u32, u32)>,
    done: tokio::sync::Mutex<bool>,
}

impl Widening {
    pub(super) fn new(dir: &Path, base: Oid, owner: Option<(u32, u32)>) -> Self {
        Widening {
            git_dir: dir.join("git"),
            work: dir.join("run/repo"),
            base,
            owner,
            done: tokio::sync::Mutex::new(false),
        }
    }

    /// Checks out the rest of the commit; once: later calls return at once.
    pub async fn complete(&self) -> Result<(), WorkspaceError> {
        self.widen(None).await
    }

    /// Checks out `paths` too (files the settings name), when they are in the commit.
    pub async fn include(&self, paths: Vec<String>) -> Result<(), WorkspaceError> {
        if paths.is_empty() {
            return Ok(());
        }
        self.widen(Some(paths.into_iter().map(PathBuf::from).collect()))
            .await
    }

    /// Checks out `only` these paths, or the whole commit (after which the checkout is
    /// whole and nothing more is written).
    async fn widen(&self, only: Option<Vec<PathBuf>>) -> Result<(), WorkspaceError> {
        let mut done = self.done.lock().await;
        if *done {
            return Ok(());
        }
        let whole = only.is_none();
        let (git_dir, work, base, owner) = (
            self.git_dir.clone(),
            self.work.clone(),
            self.base,
            self.owner,
        );
        blocking(move || widen(&git_dir, &work, base, only.as_deref(), owner)).await?;
        *done = whole;
        Ok(())
    }
}

/// The paths a sparse checkout of `base` writes; `None` when the commit has at most
/// `files_max` files and is checked out whole.
pub(super) fn paths(
    mirror: &Path,
    base: Oid,
    files_max: usize,
    keep: &[String],
) -> Result<Option<Vec<PathBuf>>, CheckoutError> {
    let repo = Repository::open_bare(mirror)
        .with_context(|| format!("Could not open the mirror {}", mirror.display()))?;
    let Ok(commit) = repo.find_commit(base) else {
        return Err(CheckoutError::NotACommit(
            "no such commit in the repository".into(),
        ));
    };
    let tree = commit.tree().context("Could not read the commit's tree")?;
    // Counted only as far as the limit: a tree that repeats its folders can name more
    // files than any checkout could hold.
    let mut files = 0usize;
    let counted = tree.walk(TreeWalkMode::PreOrder, |_, entry| {
        if entry.kind() == Some(ObjectType::Blob) {
            files += 1;
            if files > files_max {
                return TreeWalkResult::Abort;
            }
        }
        TreeWalkResult::Ok
    });
    if files <= files_max {
        counted.context("Could not count the commit's files")?;
        return Ok(None);
    }
    let mut paths: Vec<PathBuf> = tree
        .iter()
        .filter(|e| e.kind() == Some(ObjectType::Blob))
        .map(|e| PathBuf::from(std::ffi::OsStr::from_bytes(e.name_bytes())))
        .collect();
    for path in keep {
        if !paths.iter().any(|p| p == Path::new(path))
            && tree
                .get_path(Path::new(path))
                .is_ok_and(|e| e.kind() == Some(ObjectType::Blob))
        {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(Some(paths))
}

/// Checks out `only` these paths of `base` (all of them when `None`) into a workspace's
/// checkout, and brings both indexes (planwright's and the run's own) up to date, so
/// `git status` inside shows nothing changed.
fn widen(
    git_dir: &Path,
    work: &Path,
    base: Oid,
    only: Option<&[PathBuf]>,
    owner: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    let repo = Repository::open_bare(git_dir)
        .with_context(|| format!("Could not open {}", git_dir.display()))?;
    repo.set_workdir(work, false)
        .with_context(|| format!("Could not use {} as the checkout", work.display()))?;
    let commit = repo
        .find_commit(base)
        .with_context(|| format!("Could not find the commit {base}"))?;
    let index = write_tree(&repo, &commit, work, owner, only)?;
    let run_git = work.join(".git");
    fill_run_index(&run_git, &index)?;
    if let Some((uid, gid)) = owner {
        chown_tree(&run_git, uid, gid)?;
    }
    Ok(())
}
