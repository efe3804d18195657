//! The files of a checkout, walked once and bounded, and which of them are generated or
//! vendored: content a reader of the repository should see last.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::PathGlob;

/// Files a walk keeps at most; past it they are only counted. A checkout of a million
/// files is walked (counted) whole but never held whole in memory.
pub const KEEP_FILES: usize = 300_000;
/// Entries a walk looks at at most, files and folders, before it stops counting too.
const VISIT_MAX: usize = 2_000_000;

/// One file of the checkout.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    /// Relative to the root, `/`-separated; a non-UTF-8 name is shown lossily.
    pub rel: String,
    pub size: u64,
    pub symlink: bool,
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

/// Every file under `dir` (inside `root`), sorted by path, without `.git`; symlinks are
/// listed, not followed, so a symlink loop is one entry. Iterative: a deep tree cannot
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
            });
        }
        // Files of a folder come before its subfolders', which keeps path order within
        // each folder level as `ls -R` shows it.
        stack.extend(folders.into_iter().rev());
    }
    out
}

/// Folder names whose content is someone else's or made by a build.
const WELL_KNOWN: &[&str] = &[
    "node_modules",
    "vendor",
    "vendors",
    "vendored",
    "third_party",
    "third-party",
    "thirdparty",
    "deps",
    "dist",
    "build",
    "target",
    "generated",
    "__generated__",
    "site-packages",
    ".venv",
    "venv",
    "bower_components",
    "Pods",
    "Carthage",
    "__snapshots__",
    "testdata",
    "fixtures",
];

/// File names that are made by tools.
const GENERATED_NAMES: &[&str] = &[
    "Cargo.lock",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "poetry.lock",
    "Pipfile.lock",
    "composer.lock",
    "Gemfile.lock",
    "go.sum",
    "uv.lock",
    ".cargo-ok",
    ".cargo_vcs_info.json",
    "Cargo.toml.orig",
];

/// Name endings of generated files.
const GENERATED_SUFFIXES: &[&str] = &[
    ".min.js",
    ".min.css",
    ".map",
    ".pb.go",
    "_pb2.py",
    "_pb2_grpc.py",
    ".pb.h",
    ".pb.cc",
    ".g.dart",
    ".generated.ts",
    ".snap",
];

/// Which files are generated or vendored, by the repository's own word
/// (`.gitattributes` `linguist-generated`/`linguist-vendored`, a committed file that
/// `.gitignore` names), by packaging markers (a folder holding an unpacked crate), and by
/// well-known names.
pub struct Generated {
    marked: Vec<PathGlob>,
    unmarked: Vec<PathGlob>,
    ignored: Vec<PathGlob>,
    /// Folders (with a trailing `/`) that hold a packaged crate or package.
    packaged: HashSet<String>,
}

impl Generated {
    pub fn new(root: &Path, files: &[Entry]) -> Self {
        let mut marked = Vec::new();
        let mut unmarked = Vec::new();
        if let Ok(text) = read_small(&root.join(".gitattributes")) {
            for line in text.lines() {
                let mut words = line.split_whitespace();
                let Some(pattern) = words.next().filter(|p| !p.starts_with('#')) else {
                    continue;
                };
                for attribute in words {
                    let globs = || gitattributes_globs(pattern).into_iter();
                    match attribute {
                        "linguist-generated"
                        | "linguist-generated=true"
                        | "linguist-vendored"
                        | "linguist-vendored=true" => marked.extend(globs()),
                        "-linguist-generated"
                        | "linguist-generated=false"
                        | "-linguist-vendored"
                        | "linguist-vendored=false" => unmarked.extend(globs()),
                        _ => {}
                    }
                }
            }
        }
        let mut ignored = Vec::new();
        if let Ok(text) = read_small(&root.join(".gitignore")) {
            for line in text.lines() {
                let line = line.trim();
                // Negations re-include; leaving them out only errs towards "not generated".
                if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                    continue;
                }
                ignored.extend(gitattributes_globs(line));
            }
        }
        let packaged = files
            .iter()
            .filter(|f| {
                let name = f.rel.rsplit('/').next().unwrap_or(&f.rel);
                name == ".cargo_vcs_info.json" || name == ".cargo-ok" || name == "PKG-INFO"
            })
            .filter_map(|f| f.rel.rsplit_once('/').map(|(dir, _)| format!("{dir}/")))
            .collect();
        Generated {
            marked,
            unmarked,
            ignored,
            packaged,
        }
    }

    pub fn is_generated(&self, rel: &str) -> bool {
        if self.unmarked.iter().any(|g| g.matches(rel)) {
            return false;
        }
        if self.marked.iter().any(|g| g.matches(rel)) || self.ignored.iter().any(|g| g.matches(rel))
        {
            return true;
        }
        let (folders, name) = match rel.rsplit_once('/') {
            Some((folders, name)) => (folders, name),
            None => ("", rel),
        };
        if GENERATED_NAMES.contains(&name) || GENERATED_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            return true;
        }
        if folders.is_empty() {
            return false;
        }
        if folders.split('/').any(|f| WELL_KNOWN.contains(&f)) {
            return true;
        }
        // Inside an unpacked package: any of its parent folders holds the marker.
        let mut prefix = String::with_capacity(folders.len() + 1);
        for part in folders.split('/') {
            prefix.push_str(part);
            prefix.push('/');
            if self.packaged.contains(&prefix) {
                return true;
            }
        }
        false
    }
}

/// A `.gitattributes` or `.gitignore` pattern as path globs: one without a slash matches
/// at any depth, a leading slash anchors, and a name matches the folder's content too.
fn gitattributes_globs(pattern: &str) -> Vec<PathGlob> {
    let pattern = pattern.trim_end_matches('/');
    let anchored = pattern.starts_with('/') || pattern.contains('/');
    let pattern = pattern.trim_start_matches('/');
    if pattern.is_empty() {
        return Vec::new();
    }
    let glob = if anchored {
        pattern.to_owned()
    } else {
        format!("**/{pattern}")
    };
    vec![PathGlob::new(&glob), PathGlob::new(&format!("{glob}/**"))]
}

fn read_small(path: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    if meta.len() > 256 << 10 {
        return Err(std::io::Error::other("too large"));
    }
    Ok(String::from_utf8_lossy(&std::fs::read(path)?).into_owned())
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
