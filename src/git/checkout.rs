//! Writing a commit out as a run's checkout: planwright's own git dir and the run's,
//! both sharing the mirror's objects, the files handed to the sandbox user as they are
//! written, and indexes whose stat data matches what git inside the sandbox sees.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use git2::{IndexTime, Oid, Repository, RepositoryInitOptions};

use super::fs::chown_tree;

/// The user and group bubblewrap shows a run as (`--uid`/`--gid` in `bwrap.rs`), whoever
/// owns the files on the host: the stat data in the run's index must match what git
/// inside sees, or its first `git status` rehashes every file.
const SANDBOX_INSIDE_ID: u32 = 1000;

pub(super) enum CheckoutError {
    NotACommit(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for CheckoutError {
    fn from(e: anyhow::Error) -> Self {
        CheckoutError::Other(e)
    }
}

/// Builds `dir/git` and `dir/run/{repo,home}`; returns the mirror objects folder the
/// workspace reads its history from.
pub(super) fn checkout(
    mirror: &Path,
    dir: &Path,
    base: Oid,
    branch: &str,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> Result<PathBuf, CheckoutError> {
    let objects = mirror
        .join("objects")
        .canonicalize()
        .with_context(|| format!("Could not open the objects of {}", mirror.display()))?;
    let run = dir.join("run");
    let work = run.join("repo");
    let home = run.join("home");
    for d in [&work, &home] {
        std::fs::create_dir_all(d).with_context(|| format!("Could not create {}", d.display()))?;
    }

    let git_dir = dir.join("git");
    let repo = init_sharing(&git_dir, &objects, true)?;
    let commit = match repo.find_commit(base) {
        Ok(c) => c,
        Err(_) => {
            return Err(CheckoutError::NotACommit(
                "no such commit in the repository".into(),
            ));
        }
    };
    repo.set_workdir(&work, false)
        .with_context(|| format!("Could not use {} as the checkout", work.display()))?;
    let branch_ref = format!("refs/heads/{branch}");
    repo.reference(&branch_ref, base, true, "planwright: run branch")
        .with_context(|| format!("Could not create the branch {branch}"))?;
    repo.set_head(&branch_ref)
        .context("Could not point HEAD at the run branch")?;

    let index = write_tree(&repo, &commit, &work, owner, only)?;
    let run_git = run_git_dir(&work, &objects, base, branch, &index)?;
    if let Some((uid, gid)) = owner {
        for path in [&run, &work, &home] {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).with_context(|| {
                format!("Could not hand {} to the sandbox user", path.display())
            })?;
        }
        // Small: no objects of its own.
        chown_tree(&run_git, uid, gid)?;
    }
    Ok(objects)
}

/// Writes `commit`'s files (`only` these, when given) into `work` for the sandbox user
/// `owner`, and returns the index with their stat data.
pub(super) fn write_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    work: &Path,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> anyhow::Result<git2::Index> {
    let handed = check_out_tree(repo, commit, work, owner, only)?;
    let mut index = repo
        .index()
        .context("Could not read the checkout's index")?;
    if !handed.is_empty() {
        refresh_stat(&mut index, &handed)?;
        index
            .write()
            .context("Could not write the checkout's index")?;
    }
    Ok(index)
}

/// Writes `commit`'s files into `work`, handing each to the sandbox user (`owner`) as it
/// is written instead of walking the tree afterwards; returns their new stat data, which
/// goes back into the index so `git status` inside does not rehash every file whose
/// owner and ctime changed.
fn check_out_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    work: &Path,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> anyhow::Result<HashMap<PathBuf, std::fs::Metadata>> {
    let mut handed: HashMap<PathBuf, std::fs::Metadata> = HashMap::new();
    let mut dirs: HashSet<PathBuf> = HashSet::new();
    let mut failure: Option<anyhow::Error> = None;
    {
        let mut builder = git2::build::CheckoutBuilder::new();
        builder.force();
        if let Some(paths) = only {
            // Exactly these paths, never read as patterns.
            builder.disable_pathspec_match(true);
            for path in paths {
                builder.path(path.as_path());
            }
        }
        if let Some((uid, gid)) = owner {
            let (handed, dirs, failure) = (&mut handed, &mut dirs, &mut failure);
            builder.progress(move |path, _, _| {
                let Some(rel) = path else { return };
                if failure.is_some() {
                    return;
                }
                let full = work.join(rel);
                let mut parent = rel.parent();
                while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                    if !dirs.insert(p.to_path_buf()) {
                        break;
                    }
                    if let Err(e) = std::os::unix::fs::lchown(work.join(p), Some(uid), Some(gid)) {
                        *failure = Some(anyhow!(
                            "Could not hand {} to the sandbox user: {e}",
                            p.display()
                        ));
                    }
                    parent = p.parent();
                }
                match std::os::unix::fs::lchown(&full, Some(uid), Some(gid))
                    .and_then(|()| std::fs::symlink_metadata(&full))
                {
                    Ok(meta) => {
                        handed.insert(rel.to_path_buf(), meta);
                    }
                    Err(e) => {
                        *failure = Some(anyhow!(
                            "Could not hand {} to the sandbox user: {e}",
                            rel.display()
                        ))
                    }
                }
            });
        }
        repo.checkout_tree(commit.as_object(), Some(&mut builder))
            .with_context(|| {
                format!(
                    "Could not check out {} into {}",
                    commit.id(),
                    work.display()
                )
            })?;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(handed)
}

/// The run's own `.git` in `work`: same objects, same branch, a copy of `index`; nothing
/// that points back at planwright's git dir, no remote and no credentials.
fn run_git_dir(
    work: &Path,
    objects: &Path,
    base: Oid,
    branch: &str,
    index: &git2::Index,
) -> anyhow::Result<PathBuf> {
    let branch_ref = format!("refs/heads/{branch}");
    let run_git = work.join(".git");
    let run_repo = init_sharing(&run_git, objects, false)?;
    run_repo
        .reference(&branch_ref, base, true, "planwright: run branch")
        .with_context(|| format!("Could not create the branch {branch} in the checkout"))?;
    run_repo
        .set_head(&branch_ref)
        .context("Could not point the checkout's HEAD at the run branch")?;
    drop(run_repo);
    fill_run_index(&run_git, index)?;
    Ok(run_git)
}

/// Puts `index`'s entries into the index of the run's own git dir `run_git`, as the
/// sandbox's user owns them. The index file is opened alone: libgit2 will not open a
/// repository owned by another user, as the run's is once handed over.
pub(super) fn fill_run_index(run_git: &Path, index: &git2::Index) -> anyhow::Result<()> {
    let mut run_index = git2::Index::open(&run_git.join("index"))
        .context("Could not read the checkout's own index")?;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    for mut entry in entries {
        entry.uid = SANDBOX_INSIDE_ID;
        entry.gid = SANDBOX_INSIDE_ID;
        run_index
            .add(&entry)
            .context("Could not fill the checkout's own index")?;
    }
    run_index
        .write()
        .context("Could not write the checkout's own index")
}

/// A repository at `git_dir` whose objects come from `objects` through alternates.
fn init_sharing(git_dir: &Path, objects: &Path, bare: bool) -> anyhow::Result<Repository> {
    let mut opts = RepositoryInitOptions::new();
    // No hook templates from the host in a repository the sandbox works in.
    opts.bare(bare).external_template(false).no_reinit(true);
    let repo = if bare {
        Repository::init_opts(git_dir, &opts)
    } else {
        let work = git_dir.parent().unwrap_or(git_dir);
        Repository::init_opts(work, &opts)
    }
    .with_context(|| format!("Could not create the repository {}", git_dir.display()))?;
    let alternates = git_dir.join("objects/info/alternates");
    let mut file = File::create(&alternates)
        .with_context(|| format!("Could not write {}", alternates.display()))?;
    writeln!(file, "{}", objects.display())
        .with_context(|| format!("Could not write {}", alternates.display()))?;
    drop(file);
    // Reopened so the object database sees the alternates written after init.
    let repo = if bare {
        drop(repo);
        Repository::open_bare(git_dir)
    } else {
        drop(repo);
        Repository::open(git_dir)
    }
    .with_context(|| format!("Could not open the repository {}", git_dir.display()))?;
    Ok(repo)
}

/// Puts the stat data taken after the hand-over into the index entries.
fn refresh_stat(
    index: &mut git2::Index,
    handed: &HashMap<PathBuf, std::fs::Metadata>,
) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    for mut entry in entries {
        let rel = Path::new(std::ffi::OsStr::from_bytes(&entry.path));
        let Some(meta) = handed.get(rel) else {
            continue;
        };
        // The index keeps 32-bit fields; git truncates the same way.
        entry.ctime = IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
        entry.mtime = IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
        entry.dev = meta.dev() as u32;
        entry.ino = meta.ino() as u32;
        entry.uid = meta.uid();
        entry.gid = meta.gid();
        entry.file_size = meta.size() as u32;
        index
            .add(&entry)
            .with_context(|| format!("Could not update the index entry of {}", rel.display()))?;
    }
    Ok(())
}
