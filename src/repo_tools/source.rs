//! Where the read tools find the repository's files: a folder on disk (a checkout, or an
//! executor's workspace as it changes), or a commit's tree in a git object database. The
//! tree needs nothing checked out, so a planning checkout of a large repository can stay
//! sparse, and what the tools show cannot change under them whatever a scout's command
//! writes.

use std::collections::VecDeque;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use git2::{ObjectType, Oid, Repository};

use super::read::READ_MAX_BYTES;
use super::walk::{self, Entry, Walk};

/// Symlinks followed at most while resolving one path, as the kernel allows.
const LINKS_MAX: usize = 40;
/// The longest symlink target followed, as the kernel allows (a page).
const LINK_TARGET_MAX: usize = 4096;
/// Folders stepped into or out of at most while resolving one path.
const STEPS_MAX: usize = 4096;
/// The git mode of a symlink.
const LINK_MODE: i32 = 0o120000;

/// Where the files come from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// A folder on disk, read as it is.
    Disk(PathBuf),
    /// A commit's tree, read from the objects of the repository at `git_dir`.
    Tree { git_dir: PathBuf, commit: Oid },
}

/// A path resolved inside the repository, symlinks followed.
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// Relative to the root, `/`-separated; empty for the root.
    pub rel: String,
    pub dir: bool,
    /// On disk, the real path; for a tree, the relative path (files are read by `blob`).
    pub path: PathBuf,
    /// For a tree, the file's blob (none for a folder).
    pub blob: Option<Oid>,
}

impl Source {
    /// What caches built from this source are kept under: the folder, or the git dir.
    pub fn key_path(&self) -> &Path {
        match self {
            Source::Disk(root) => root,
            Source::Tree { git_dir, .. } => git_dir,
        }
    }

    /// A path inside the repository, or why not. Symlinks are followed and must stay
    /// inside; `.git` is not part of the repository's files.
    pub fn resolve(&self, relative: &str) -> Result<Found, String> {
        let rel = Path::new(relative.trim().trim_start_matches("./"));
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(format!("`{relative}` is not a path inside the repository"));
        }
        match self {
            Source::Disk(root) => {
                let real = root
                    .join(rel)
                    .canonicalize()
                    .map_err(|_| format!("`{relative}` does not exist"))?;
                if !real.starts_with(root) {
                    return Err(format!("`{relative}` points outside the repository"));
                }
                if real.starts_with(root.join(".git")) {
                    return Err("the .git folder is not part of the repository's files".into());
                }
                Ok(Found {
                    rel: real
                        .strip_prefix(root)
                        .unwrap_or(&real)
                        .to_string_lossy()
                        .into_owned(),
                    dir: real.is_dir(),
                    path: real,
                    blob: None,
                })
            }
            Source::Tree { .. } => {
                let parts: Vec<String> = rel
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                        _ => None,
                    })
                    .collect();
                let repo = self
                    .open()
                    .map_err(|e| format!("cannot read `{relative}`: {e}"))?;
                let tree = self
                    .tree(&repo)
                    .map_err(|e| format!("cannot read `{relative}`: {e}"))?;
                resolve_in_tree(&repo, &tree, parts, relative)
            }
        }
    }

    /// Every file under `dir` (a folder `resolve` found), in path order.
    pub fn walk(&self, dir: &Found) -> Walk {
        match self {
            Source::Disk(root) => walk::walk(root, &dir.path),
            Source::Tree { .. } => {
                let Ok(repo) = self.open() else {
                    return Walk::default();
                };
                let Ok(tree) = self.tree(&repo) else {
                    return Walk::default();
                };
                let start = if dir.rel.is_empty() {
                    Some(tree)
                } else {
                    tree.get_path(Path::new(&dir.rel))
                        .ok()
                        .and_then(|e| e.to_object(&repo).ok())
                        .and_then(|o| o.into_tree().ok())
                };
                match start {
                    Some(start) => walk_tree(&repo, start, &dir.rel),
                    None => Walk::default(),
                }
            }
        }
    }

    /// The whole repository, as a `Found` for its root.
    pub fn root(&self) -> Found {
        Found {
            rel: String::new(),
            dir: true,
            path: self.key_path().to_path_buf(),
            blob: None,
        }
    }

    /// The size of a file `resolve` found; 0 when it cannot be told.
    pub fn size_of(&self, found: &Found) -> u64 {
        match found.blob {
            Some(blob) => self
                .open()
                .and_then(|repo| repo.odb()?.read_header(blob))
                .map_or(0, |(size, _)| size as u64),
            None => std::fs::metadata(&found.path).map_or(0, |m| m.len()),
        }
    }

    /// A reader for many files in a row (one open repository for a tree).
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            source: self,
            repo: match self {
                Source::Disk(_) => None,
                Source::Tree { .. } => self.open().ok(),
            },
        }
    }

    /// A small regular file at the root (`.gitattributes`, `.gitignore`): never through
    /// a symlink, never more than `max` bytes.
    pub fn small_root_file(&self, name: &str, max: u64) -> Option<String> {
        match self {
            Source::Disk(root) => walk::read_small(&root.join(name), max).ok(),
            Source::Tree { .. } => {
                let repo = self.open().ok()?;
                let tree = self.tree(&repo).ok()?;
                let entry = tree.get_name(name)?;
                if entry.kind() != Some(ObjectType::Blob) || entry.filemode() == LINK_MODE {
                    return None;
                }
                let (size, kind) = repo.odb().ok()?.read_header(entry.id()).ok()?;
                if kind != ObjectType::Blob || size as u64 > max {
                    return None;
                }
                let blob = repo.find_blob(entry.id()).ok()?;
                Some(String::from_utf8_lossy(blob.content()).into_owned())
            }
        }
    }

    /// The repository and the commit whose history says what changed recently.
    pub fn history(&self) -> Option<(Repository, Oid)> {
        match self {
            Source::Disk(root) => {
                let repo = Repository::open(root).ok()?;
                let head = repo.head().ok()?.peel_to_commit().ok()?.id();
                Some((repo, head))
            }
            Source::Tree { commit, .. } => Some((self.open().ok()?, *commit)),
        }
    }

    fn open(&self) -> Result<Repository, git2::Error> {
        match self {
            Source::Disk(root) => Repository::open(root),
            Source::Tree { git_dir, .. } => Repository::open(git_dir),
        }
    }

    /// The commit's tree; a checkout is read from disk, never from its git.
    fn tree<'r>(&self, repo: &'r Repository) -> Result<git2::Tree<'r>, git2::Error> {
        match self {
            Source::Tree { commit, .. } => repo.find_commit(*commit)?.tree(),
            Source::Disk(_) => Err(git2::Error::from_str("a checkout is read from disk")),
        }
    }
}

/// Reads files' bytes, at most `READ_MAX_BYTES` of each.
pub(super) struct Reader<'a> {
    source: &'a Source,
    repo: Option<Repository>,
}

impl Reader<'_> {
    /// At most `READ_MAX_BYTES` of a file the walk listed (a symlink's target's, when it
    /// leads to a file inside), and the file's size.
    pub fn entry(&self, entry: &Entry) -> std::io::Result<(Vec<u8>, u64)> {
        match (entry.blob, entry.symlink) {
            (Some(blob), false) => self.blob(blob),
            (Some(_), true) => {
                let found = self
                    .source
                    .resolve(&entry.rel)
                    .map_err(std::io::Error::other)?;
                self.found(&found)
            }
            (None, _) => super::read::read_bounded(&entry.path),
        }
    }

    /// At most `READ_MAX_BYTES` of a file `resolve` found, and its size.
    pub fn found(&self, found: &Found) -> std::io::Result<(Vec<u8>, u64)> {
        if found.dir {
            return Err(std::io::Error::other("a folder"));
        }
        match found.blob {
            Some(blob) => self.blob(blob),
            None => super::read::read_bounded(&found.path),
        }
    }

    fn blob(&self, id: Oid) -> std::io::Result<(Vec<u8>, u64)> {
        let (Some(repo), Source::Tree { git_dir, .. }) = (&self.repo, self.source) else {
            return Err(std::io::Error::other("the repository cannot be opened"));
        };
        let odb = repo.odb().map_err(std::io::Error::other)?;
        let (size, kind) = odb.read_header(id).map_err(std::io::Error::other)?;
        // A tree entry's mode can claim a file for any object: only a blob is one.
        if kind != ObjectType::Blob {
            return Err(std::io::Error::other("not a file"));
        }
        let size = size as u64;
        if size <= READ_MAX_BYTES {
            let object = odb.read(id).map_err(std::io::Error::other)?;
            return Ok((object.data().to_vec(), size));
        }
        // libgit2 reads an object whole: a 2 GB file is streamed from git instead, and
        // only its start is kept.
        let mut child = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(["cat-file", "blob"])
            .arg(id.to_string())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut bytes = Vec::new();
        if let Some(out) = child.stdout.take() {
            out.take(READ_MAX_BYTES).read_to_end(&mut bytes)?;
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok((bytes, size))
    }
}

/// Walks `parts` down from `root`, a folder at a time, following symlinks (relative to
/// the folder holding them, their pieces in order) while they stay inside. Bounded as the
/// kernel bounds it: link targets of at most 4 KiB, at most 40 links, and at most
/// `STEPS_MAX` steps in all.
fn resolve_in_tree(
    repo: &Repository,
    root: &git2::Tree<'_>,
    parts: Vec<String>,
    asked: &str,
) -> Result<Found, String> {
    let missing = || format!("`{asked}` does not exist");
    let outside = || format!("`{asked}` points outside the repository");
    let odb = repo.odb().map_err(|_| missing())?;
    let mut queue: VecDeque<String> = parts.into();
    // The folders walked into: their names, and their trees after the root's.
    let mut done: Vec<String> = Vec::new();
    let mut trees: Vec<git2::Tree<'_>> = vec![root.clone()];
    let mut file: Option<Oid> = None;
    let (mut links, mut steps) = (0usize, 0usize);
    while let Some(part) = queue.pop_front() {
        steps += 1;
        if steps > STEPS_MAX {
            return Err(format!("`{asked}` takes too many steps to resolve"));
        }
        // Nothing is inside a file.
        if file.is_some() {
            return Err(missing());
        }
        if part == ".." {
            if done.pop().is_none() {
                return Err(outside());
            }
            trees.pop();
            continue;
        }
        let (kind, id, mode) = {
            let current = trees.last().ok_or_else(missing)?;
            let entry = current.get_name(&part).ok_or_else(missing)?;
            (entry.kind(), entry.id(), entry.filemode())
        };
        match kind {
            Some(ObjectType::Tree) => {
                let tree = repo.find_tree(id).map_err(|_| missing())?;
                done.push(part);
                trees.push(tree);
            }
            Some(ObjectType::Blob) if mode == LINK_MODE => {
                links += 1;
                if links > LINKS_MAX {
                    return Err(format!("`{asked}` is a loop of symlinks"));
                }
                match odb.read_header(id) {
                    Ok((size, ObjectType::Blob)) if (1..=LINK_TARGET_MAX).contains(&size) => {}
                    _ => return Err(missing()),
                }
                let target = repo.find_blob(id).map_err(|_| missing())?;
                let target = String::from_utf8_lossy(target.content()).into_owned();
                if target.starts_with('/') {
                    return Err(outside());
                }
                let mut rest: VecDeque<String> = target
                    .split('/')
                    .filter(|piece| !piece.is_empty() && *piece != ".")
                    .map(str::to_owned)
                    .collect();
                rest.extend(queue.drain(..));
                queue = rest;
            }
            Some(ObjectType::Blob) => {
                done.push(part);
                file = Some(id);
            }
            // A submodule's commit: nothing of it is in this repository.
            _ => return Err(missing()),
        }
    }
    if done.first().is_some_and(|p| p == ".git") {
        return Err("the .git folder is not part of the repository's files".into());
    }
    let rel = done.join("/");
    Ok(Found {
        path: PathBuf::from(&rel),
        rel,
        dir: file.is_none(),
        blob: file,
    })
}

/// The files under `start` (the folder `prefix`) as `walk::walk` lists a checkout: path
/// order, a folder's files before its subfolders', bounded alike.
fn walk_tree(repo: &Repository, start: git2::Tree<'_>, prefix: &str) -> Walk {
    let mut out = Walk::default();
    let mut visited = 0usize;
    let odb = repo.odb().ok();
    let mut stack: Vec<(String, Oid)> = vec![(prefix.to_owned(), start.id())];
    while let Some((folder, id)) = stack.pop() {
        let Ok(tree) = repo.find_tree(id) else {
            continue;
        };
        // One folder of millions of entries is not listed at all past the limit.
        if visited + tree.len() > walk::VISIT_MAX {
            out.stopped = true;
            return out;
        }
        let mut entries: Vec<git2::TreeEntry<'_>> = tree.iter().collect();
        entries.sort_by(|a, b| a.name_bytes().cmp(b.name_bytes()));
        let mut folders = Vec::new();
        for entry in entries {
            visited += 1;
            if visited > walk::VISIT_MAX {
                out.stopped = true;
                return out;
            }
            let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
            let rel = if folder.is_empty() {
                name
            } else {
                format!("{folder}/{name}")
            };
            match entry.kind() {
                Some(ObjectType::Tree) => folders.push((rel, entry.id())),
                Some(ObjectType::Blob) => {
                    if out.files.len() >= walk::KEEP_FILES {
                        out.not_kept += 1;
                        continue;
                    }
                    let symlink = entry.filemode() == LINK_MODE;
                    let size = match (&odb, symlink) {
                        (Some(odb), false) => odb
                            .read_header(entry.id())
                            .map_or(0, |(size, _)| size as u64),
                        _ => 0,
                    };
                    out.files.push(Entry {
                        path: PathBuf::from(&rel),
                        rel,
                        size,
                        symlink,
                        blob: Some(entry.id()),
                    });
                }
                // Submodules hold nothing of this repository.
                _ => {}
            }
        }
        stack.extend(folders.into_iter().rev());
    }
    out
}
