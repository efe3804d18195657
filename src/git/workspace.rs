//! One run's workspace and its result: the paths the sandbox is given, the changed
//! files, the diff and texts verification reads, the result commit, and what the checks
//! wrote undone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};
use git2::{Oid, Repository};

use super::artifacts::{Artifacts, content_id, put_back, remove_path};
use super::fs::{remove_tree, touch};
use super::sparse::Widening;
use super::text::{FileText, base_text, checkout_text};
use super::{WorkspaceError, blocking};
use crate::ids::CommitSha;

/// Present in a workspace kept after a failed run; its mtime is when the run failed.
pub(super) const FAILED_MARK: &str = "failed";

/// Bytes of unified diff kept for verification and review; past it the diff is cut and
/// says so, so that a result of huge files cannot fill memory.
pub const DIFF_MAX_BYTES: usize = 8 << 20;

/// Files larger than this are shown as binary in a diff rather than loaded whole.
const DIFF_TEXT_MAX_BYTES: i64 = 4 << 20;

/// The largest result planwright commits: the sizes of its added and changed files.
pub const RESULT_MAX_BYTES: u64 = 256 << 20;

/// How a run ended, which decides whether its workspace is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// One changed path between the base and the checkout as the run left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    pub path: String,
    pub change: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// A file became a symlink or the other way round.
    TypeChanged,
}

/// Who a run's commit is by.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// One run's workspace. Dropped without [`Workspace::finish`], it counts as failed and is
/// kept until the sweep.
#[derive(Debug)]
pub struct Workspace {
    pub(super) dir: PathBuf,
    pub(super) branch: String,
    pub(super) base: Oid,
    /// What the result commit goes on top of when that is not `base`
    /// ([`Workspaces::stack_on`](super::Workspaces::stack_on)).
    pub(super) parent: Option<Oid>,
    /// What the result is read against when that is not `base`
    /// ([`Workspace::compare_from`]): the session's base when a run starts from work
    /// pushed or kept before.
    pub(super) compared: Option<Oid>,
    pub(super) shared_objects: PathBuf,
    pub(super) finished: bool,
    /// Set while the checkout holds only part of the commit ([`Workspaces::create_sparse`](super::Workspaces::create_sparse)).
    pub(super) sparse: Option<Arc<Widening>>,
}

impl Workspace {
    /// Where the whole workspace lives, for [`Workspaces::reopen`](super::Workspaces::reopen).
    pub fn location(&self) -> &Path {
        &self.dir
    }

    /// The folder to give the sandbox as its workspace (holds `repo/` and `home/`).
    pub fn root(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The checkout; relative to [`Workspace::root`] it is `repo`, the sandbox's working
    /// directory.
    pub fn repo(&self) -> PathBuf {
        self.dir.join("run/repo")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("run/home")
    }

    /// Variables to add to a sandboxed command: `HOME` outside the checkout, so caches and
    /// tool settings never show up in the diff.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("HOME".into(), self.home().display().to_string())]
    }

    /// A sandbox command working in the checkout, with `HOME` and the git history it
    /// needs: the mirror's objects are shown read-only, since the sandbox hides `DATA_DIR`.
    pub fn command(&self, argv: Vec<String>) -> crate::sandbox::Command {
        let mut cmd = crate::sandbox::Command::new(self.root(), argv);
        cmd.cwd = Some("repo".into());
        cmd.env = self.env();
        cmd.read_only = vec![self.shared_objects().to_path_buf()];
        cmd
    }

    /// The mirror's objects folder the checkout's history lives in. A sandbox that hides
    /// `DATA_DIR` must show this folder read-only at the same path, or git inside sees no
    /// history.
    pub fn shared_objects(&self) -> &Path {
        &self.shared_objects
    }

    /// planwright's own git dir of the run, from which the run branch is pushed.
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join("git")
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    pub fn base(&self) -> CommitSha {
        CommitSha(self.base.to_string())
    }

    /// Reads the result (its changed files, texts and diff) against `commit` rather than
    /// the commit the checkout started from: a run that carries on earlier work is
    /// checked as the whole change the branch will hold, so nothing the earlier work did
    /// escapes the checks. The result is still committed on top of where it started.
    pub fn compare_from(&mut self, commit: &CommitSha) -> Result<(), WorkspaceError> {
        let oid = Oid::from_str(commit.as_str()).map_err(|_| WorkspaceError::BadCommit {
            repo: String::new(),
            sha: commit.as_str().to_owned(),
            reason: "not a commit SHA".into(),
        })?;
        self.compared = (oid != self.base).then_some(oid);
        Ok(())
    }

    /// The commit the result is read against.
    fn compared(&self) -> Oid {
        self.compared.unwrap_or(self.base)
    }

    /// Files that differ between the base and the checkout (untracked files included,
    /// ignored ones not).
    pub async fn changed_files(&self) -> Result<Vec<ChangedFile>, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut files = Vec::new();
            for delta in diff.deltas() {
                let change = match delta.status() {
                    git2::Delta::Added | git2::Delta::Untracked => ChangeKind::Added,
                    git2::Delta::Deleted => ChangeKind::Deleted,
                    git2::Delta::Typechange => ChangeKind::TypeChanged,
                    _ => ChangeKind::Modified,
                };
                let file = if change == ChangeKind::Deleted {
                    delta.old_file()
                } else {
                    delta.new_file()
                };
                let path = file
                    .path()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                files.push(ChangedFile { path, change });
            }
            Ok(files)
        })
        .await
    }

    /// The paths this run itself changed: from the commit the checkout started from,
    /// whatever the result is read against (a round on top of earlier work names only
    /// what it did).
    pub async fn paths_changed_since_start(&self) -> Result<Vec<String>, WorkspaceError> {
        let (git_dir, work, start) = (self.git_dir(), self.repo(), self.base);
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, start)?;
            Ok(diff
                .deltas()
                .flat_map(|d| [d.old_file().path(), d.new_file().path()])
                .flatten()
                .map(|p| p.to_string_lossy().into_owned())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect())
        })
        .await
    }

    /// The unified diff from the base to the checkout, at most [`DIFF_MAX_BYTES`].
    pub async fn diff(&self) -> Result<String, WorkspaceError> {
        self.diff_within(DIFF_MAX_BYTES).await
    }

    /// The unified diff from the base to the checkout, cut after `max` bytes with a last
    /// line saying so. Printed file by file, so only the kept part is ever held.
    pub async fn diff_within(&self, max: usize) -> Result<String, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut out = Vec::new();
            let mut cut = false;
            let printed = diff.print(git2::DiffFormat::Patch, |_, _, line| {
                let origin = matches!(line.origin(), '+' | '-' | ' ');
                if out.len() + usize::from(origin) + line.content().len() > max {
                    cut = true;
                    return false;
                }
                if origin {
                    out.push(line.origin() as u8);
                }
                out.extend_from_slice(line.content());
                true
            });
            if !cut {
                printed.context("Could not render the diff")?;
            }
            let mut text = String::from_utf8_lossy(&out).into_owned();
            if cut {
                text.push_str(&format!(
                    "\n[planwright: the diff is cut here, at {max} bytes]\n"
                ));
            }
            Ok(text)
        })
        .await
    }

    /// `paths` as the base commit and the checkout hold them, each side at most
    /// `max_bytes`. A path under a symbolic link in the checkout is not followed: what
    /// it points at is not the result's.
    pub async fn file_texts(
        &self,
        paths: Vec<String>,
        max_bytes: u64,
    ) -> Result<Vec<(FileText, FileText)>, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let tree = repo
                .find_commit(base)
                .and_then(|c| c.tree())
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let odb = repo.odb().context("Could not open the object database")?;
            paths
                .iter()
                .map(|path| {
                    let old = base_text(&repo, &odb, &tree, path, max_bytes)?;
                    Ok((old, checkout_text(&work, path, max_bytes)))
                })
                .collect()
        })
        .await
    }

    /// Bytes the result's added and changed files hold in the checkout (symbolic links
    /// count as their own size, not their target's).
    pub async fn changed_bytes(&self) -> Result<u64, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut total = 0u64;
            for delta in diff.deltas() {
                if delta.status() == git2::Delta::Deleted {
                    continue;
                }
                if let Some(path) = delta.new_file().path()
                    && let Ok(meta) = std::fs::symlink_metadata(work.join(path))
                {
                    total = total.saturating_add(meta.len());
                }
            }
            Ok(total)
        })
        .await
    }

    /// Commits the checkout as it is onto the run branch in planwright's git dir and
    /// returns the branch's new tip (the old one when nothing changed).
    pub async fn commit(
        &self,
        message: &str,
        author: &Author,
    ) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, work, branch) = (self.git_dir(), self.repo(), self.branch.clone());
        let (message, author) = (message.to_owned(), author.clone());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let mut index = repo.index().context("Could not read the run's index")?;
            index
                .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
                .context("Could not stage the run's files")?;
            index
                .update_all(["*"], None)
                .context("Could not stage the run's deletions")?;
            index.write().context("Could not write the run's index")?;
            let tree_id = index
                .write_tree()
                .context("Could not write the run's tree")?;
            let branch_ref = format!("refs/heads/{branch}");
            let parent = repo
                .find_reference(&branch_ref)
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?;
            if parent.tree_id() == tree_id {
                return Ok(CommitSha(parent.id().to_string()));
            }
            let tree = repo
                .find_tree(tree_id)
                .context("Could not read the run's tree")?;
            let signature = signature(&author)?;
            let id = repo
                .commit(
                    Some(&branch_ref),
                    &signature,
                    &signature,
                    &message,
                    &tree,
                    &[&parent],
                )
                .context("Could not commit the run's changes")?;
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// Commits the checkout as the run's one result commit on the base (or the parent it
    /// is stacked on), replacing what an earlier attempt committed, and leaving out
    /// `exclude` (files an earlier attempt's verification created, while they hold what it
    /// left). Taken before verification runs, so nothing the checks write joins the
    /// result. Returns the base when the result changes nothing.
    pub async fn commit_result(
        &self,
        message: &str,
        author: &Author,
        exclude: &Artifacts,
    ) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, work, branch, base) =
            (self.git_dir(), self.repo(), self.branch.clone(), self.base);
        let parent = self.parent.unwrap_or(base);
        let (message, author, exclude) = (message.to_owned(), author.clone(), exclude.clone());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let base_commit = repo
                .find_commit(base)
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let parent_commit = repo
                .find_commit(parent)
                .with_context(|| format!("Could not read the commit {parent} to build on"))?;
            let base_tree = base_commit.tree().context("Could not read the base tree")?;
            let mut index = repo.index().context("Could not read the run's index")?;
            index
                .read_tree(&base_tree)
                .context("Could not start the run's index from the base")?;
            let mut skip =
                |path: &Path, _: &[u8]| -> i32 { i32::from(exclude.unchanged(&work, path)) };
            index
                .add_all(["*"], git2::IndexAddOption::DEFAULT, Some(&mut skip))
                .context("Could not stage the run's files")?;
            index
                .update_all(["*"], Some(&mut skip))
                .context("Could not stage the run's deletions")?;
            index.write().context("Could not write the run's index")?;
            let tree_id = index
                .write_tree()
                .context("Could not write the run's tree")?;
            let branch_ref = format!("refs/heads/{branch}");
            if tree_id == base_tree.id() {
                repo.reference(&branch_ref, base, true, "planwright: nothing changed")
                    .context("Could not reset the run branch")?;
                return Ok(CommitSha(base.to_string()));
            }
            let tree = repo
                .find_tree(tree_id)
                .context("Could not read the run's tree")?;
            let signature = signature(&author)?;
            let id = repo
                .commit(
                    None,
                    &signature,
                    &signature,
                    &message,
                    &tree,
                    &[&parent_commit],
                )
                .context("Could not commit the run's result")?;
            repo.reference(&branch_ref, id, true, "planwright: the run's result")
                .context("Could not point the run branch at the result")?;
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// The run branch's tip in planwright's git dir.
    pub async fn tip(&self) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, branch) = (self.git_dir(), self.branch.clone());
        blocking(move || {
            let repo = Repository::open_bare(&git_dir)
                .with_context(|| format!("Could not open {}", git_dir.display()))?;
            let id = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?
                .id();
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// Undoes what verification's commands did to the committed result in the checkout,
    /// so that no later attempt's commit takes it for the executor's: tracked files they
    /// rewrote, deleted or turned into another kind are put back as the run branch's tip
    /// holds them (a formatter's rewrite, a snapshot update), and a file the result
    /// deleted that they made again is removed. Files they created stay (caches, a
    /// setup's `node_modules`: deleting them would only cost the next run) and are
    /// returned with the id of their content, which a later commit leaves out while the
    /// content is unchanged.
    pub async fn undo_checks_writes(&self) -> Result<Artifacts, WorkspaceError> {
        let (git_dir, work, branch, base) =
            (self.git_dir(), self.repo(), self.branch.clone(), self.base);
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let tip = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?;
            let tip_tree = tip.tree().context("Could not read the result's tree")?;
            let base_tree = repo
                .find_commit(base)
                .and_then(|c| c.tree())
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let diff = diff_from_base(&repo, tip.id())?;
            let (mut new, mut changed) = (Vec::new(), Vec::new());
            for delta in diff.deltas() {
                let Some(path) = delta.new_file().path().or(delta.old_file().path()) else {
                    continue;
                };
                match delta.status() {
                    git2::Delta::Untracked | git2::Delta::Added => new.push(path.to_owned()),
                    git2::Delta::Modified | git2::Delta::Deleted | git2::Delta::Typechange => {
                        changed.push(path.to_owned());
                    }
                    _ => {}
                }
            }
            // Put back first: a link the checks left where a folder was gives way to the
            // folder, and is no file of theirs to keep.
            for path in &changed {
                let entry = tip_tree
                    .get_path(path)
                    .with_context(|| format!("Could not find {} in the result", path.display()))?;
                put_back(&repo, &work, path, &entry)?;
            }
            let mut created = Artifacts::default();
            let file_in = |tree: &git2::Tree<'_>, path: &Path| {
                tree.get_path(path)
                    .is_ok_and(|e| e.kind() == Some(git2::ObjectType::Blob))
            };
            for path in &new {
                if file_in(&base_tree, path) && tip_tree.get_path(path).is_err() {
                    remove_path(&work, path)?;
                } else if let Some(id) = content_id(&work.join(path)) {
                    created.0.insert(path.to_string_lossy().into_owned(), id);
                }
            }
            Ok(created)
        })
        .await
    }

    /// Removes the workspace after a success; keeps it after a failure, marked, until
    /// [`Workspaces::sweep`](super::Workspaces::sweep) finds it older than the time failed workspaces are kept.
    pub async fn finish(mut self, outcome: Outcome) -> Result<(), WorkspaceError> {
        self.finished = true;
        let dir = self.dir.clone();
        blocking(move || match outcome {
            Outcome::Succeeded => remove_tree(&dir),
            Outcome::Failed => touch(&dir.join(FAILED_MARK)),
        })
        .await
    }
}

impl Workspace {
    /// The widening of a checkout made sparse; `None` when it was checked out whole.
    pub fn widening(&self) -> Option<Arc<Widening>> {
        self.sparse.clone()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.finished {
            let _ = touch(&self.dir.join(FAILED_MARK));
        }
    }
}

fn signature(author: &Author) -> anyhow::Result<git2::Signature<'static>> {
    git2::Signature::now(&author.name, &author.email).map_err(|e| {
        anyhow!(
            "Cannot commit as {} <{}>: {}",
            author.name,
            author.email,
            e.message()
        )
    })
}

/// planwright's git dir with the checkout as its work tree. The checkout is refused when
/// the run replaced it with a symlink: reading through one would publish files from
/// elsewhere on the host.
/// How many files differ between `base` and the checkout a run left at `dir` (see
/// [`Workspace::location`]), untracked ones included: an attempt's size as its outcome
/// records it. Reads only; an error when the checkout is gone.
pub async fn changed_file_count(dir: &Path, base: &CommitSha) -> Result<usize, WorkspaceError> {
    let (git_dir, work) = (dir.join("git"), dir.join("run/repo"));
    let base = Oid::from_str(base.as_str()).map_err(|_| WorkspaceError::BadCommit {
        repo: String::new(),
        sha: base.as_str().to_owned(),
        reason: "not a commit SHA".into(),
    })?;
    blocking(move || {
        let repo = open_results(&git_dir, &work)?;
        Ok(diff_from_base(&repo, base)?.deltas().len())
    })
    .await
}

fn open_results(git_dir: &Path, work: &Path) -> anyhow::Result<Repository> {
    let meta = std::fs::symlink_metadata(work)
        .with_context(|| format!("Could not open the checkout {}", work.display()))?;
    if !meta.is_dir() {
        return Err(anyhow!(
            "Cannot read the run's result: {} is no longer a folder",
            work.display()
        ));
    }
    let repo = Repository::open_bare(git_dir)
        .with_context(|| format!("Could not open {}", git_dir.display()))?;
    repo.set_workdir(work, false)
        .with_context(|| format!("Could not use {} as the checkout", work.display()))?;
    Ok(repo)
}

fn diff_from_base(repo: &Repository, base: Oid) -> anyhow::Result<git2::Diff<'_>> {
    let tree = repo
        .find_commit(base)
        .and_then(|c| c.tree())
        .with_context(|| format!("Could not read the base commit {base}"))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true)
        .max_size(DIFF_TEXT_MAX_BYTES);
    repo.diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .context("Could not compare the checkout with the base")
}
