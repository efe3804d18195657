//! The files of a checkout, walked once and bounded.

use std::path::{Path, PathBuf};

/// Files a walk keeps at most; past it they are only counted. A checkout of a million
/// files is walked (counted) whole but never held whole in memory.
pub const KEEP_FILES: usize = 300_000;
/// Entries a walk looks at at most, files and folders, before it stops counting too.
pub(super) const VISIT_MAX: usize = 2_000_000;

/// One file of the checkout.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    /// Relative to the root, `/`-separated; a non-UTF-8 name is shown lossily.
    pub rel: String,
    pub size: u64,
    pub symlink: bool,
    /// The file's blob, when it is read from a commit's tree rather than from disk.
    pub blob: Option<git2::Oid>,
}

/// The files under a folder, in path order.
#[derive(Debug, Default)]
pub struct Walk {
    pub files: Vec<Entry>,
    /// Files seen past `KEEP_FILES`: counted, not kept.
    pub not_kept: usize,
    /// The walk stopped counting at `VISIT_MAX` entries: the counts are a floor.
    pub stopped: bool,
}

impl Walk {
    /// How many files there are, as far as the walk counted.
    pub fn total(&self) -> usize {
        self.files.len() + self.not_kept
    }

    /// `9,490 files` or `at least 2,000,000 files`.
    pub fn describe_total(&self) -> String {
        let n = thousands(self.total());
        if self.stopped {
            format!("at least {n} files")
        } else if self.total() == 1 {
            "1 file".to_owned()
        } else {
            format!("{n} files")
        }
    }
}

/// Every regular file and symlink under `dir` (inside `root`), sorted by path, without
/// `.git`; symlinks are listed, not followed, so a symlink loop is one entry. Iterative: a deep tree cannot
/// exhaust the stack.
pub fn walk(root: &Path, dir: &Path) -> Walk {
    let mut out = Walk::default();
    let mut visited = 0usize;
    // A stack of folders still to read, each already sorted; popped from the end, so
    // children are pushed in reverse.
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        let mut folders = Vec::new();
        for entry in entries {
            visited += 1;
            if visited > VISIT_MAX {
                out.stopped = true;
                return out;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    folders.push(entry.path());
                }
                continue;
            }
            // A pipe, socket or device (which a run's commands can leave behind; git
            // never checks one out) is not a file: reading a pipe would wait forever.
            if !kind.is_file() && !kind.is_symlink() {
                continue;
            }
            if out.files.len() >= KEEP_FILES {
                out.not_kept += 1;
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let size = if kind.is_symlink() {
                0
            } else {
                entry.metadata().map(|m| m.len()).unwrap_or(0)
            };
            out.files.push(Entry {
                path,
                rel,
                size,
                symlink: kind.is_symlink(),
                blob: None,
            });
        }
        // Files of a folder come before its subfolders', which keeps path order within
        // each folder level as `ls -R` shows it.
        stack.extend(folders.into_iter().rev());
    }
    out
}

/// A small regular file's text: never through a symlink (which could lead to
/// `/dev/zero` or a pipe), never more than `max` bytes.
pub(super) fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() || meta.len() > max {
        return Err(std::io::Error::other("not a small regular file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `17812` → `17,812`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
