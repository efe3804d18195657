//! Which files of a checkout are generated or vendored: content a reader of the
//! repository should see last.

use std::collections::HashSet;

use globset::{Glob, GlobSet, GlobSetBuilder};

use super::source::Source;
use super::walk::Entry;

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
    /// `.gitattributes` patterns marking content generated or vendored, and unmarking it.
    marked: GlobSet,
    unmarked: GlobSet,
    /// `.gitignore` patterns in order, with whether each is a negation (`!`): the last
    /// one to match decides, as for git.
    ignored: GlobSet,
    negated: Vec<bool>,
    /// Folders (with a trailing `/`) that hold a packaged crate or package.
    packaged: HashSet<String>,
}

/// Lines of a `.gitattributes` or `.gitignore` read at most: one set of globs matches
/// every path, but a file of a million patterns should not be compiled either.
const PATTERNS_MAX: usize = 1_000;
/// The largest `.gitattributes` or `.gitignore` read.
const PATTERN_FILE_BYTES: u64 = 64 << 10;

impl Generated {
    pub fn new(source: &Source, files: &[Entry]) -> Self {
        let (mut marked, mut unmarked) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        if let Some(text) = source.small_root_file(".gitattributes", PATTERN_FILE_BYTES) {
            for line in text.lines().take(PATTERNS_MAX) {
                let mut words = line.split_whitespace();
                let Some(pattern) = words.next().filter(|p| !p.starts_with('#')) else {
                    continue;
                };
                for attribute in words {
                    let set = match attribute {
                        "linguist-generated"
                        | "linguist-generated=true"
                        | "linguist-vendored"
                        | "linguist-vendored=true" => &mut marked,
                        "-linguist-generated"
                        | "linguist-generated=false"
                        | "-linguist-vendored"
                        | "linguist-vendored=false" => &mut unmarked,
                        _ => continue,
                    };
                    for glob in gitattributes_globs(pattern) {
                        set.add(glob);
                    }
                }
            }
        }
        let mut ignored = GlobSetBuilder::new();
        let mut negated = Vec::new();
        if let Some(text) = source.small_root_file(".gitignore", PATTERN_FILE_BYTES) {
            for line in text.lines().take(PATTERNS_MAX) {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (negation, pattern) = match line.strip_prefix('!') {
                    Some(rest) => (true, rest),
                    None => (false, line),
                };
                for glob in gitattributes_globs(pattern) {
                    ignored.add(glob);
                    negated.push(negation);
                }
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
        // A set too large to compile leaves its patterns out; the well-known names still
        // apply.
        let build = |set: GlobSetBuilder| set.build().unwrap_or_else(|_| GlobSet::empty());
        let ignored = match ignored.build() {
            Ok(set) => set,
            Err(_) => {
                negated.clear();
                GlobSet::empty()
            }
        };
        Generated {
            marked: build(marked),
            unmarked: build(unmarked),
            ignored,
            negated,
            packaged,
        }
    }

    pub fn is_generated(&self, rel: &str) -> bool {
        if self.unmarked.is_match(rel) {
            return false;
        }
        if self.marked.is_match(rel) {
            return true;
        }
        let last = self.ignored.matches(rel).into_iter().max();
        if last.is_some_and(|i| !self.negated.get(i).copied().unwrap_or(true)) {
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
fn gitattributes_globs(pattern: &str) -> Vec<Glob> {
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
    [
        super::glob::glob(&glob),
        super::glob::glob(&format!("{glob}/**")),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::repo_tools::walk::walk;

    fn entries(root: &Path) -> Vec<Entry> {
        walk(root, root).files
    }

    /// `.gitignore` is read in order, the last matching pattern deciding: `/*` then
    /// `!/src/` leaves `src/` the repository's own.
    #[test]
    fn a_negated_ignore_pattern_re_includes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn f() {}\n").unwrap();
        std::fs::write(root.join("build/out.rs"), "fn g() {}\n").unwrap();
        std::fs::write(root.join(".gitignore"), "/*\n!/src/\n!.gitignore\n").unwrap();
        let generated = Generated::new(&Source::Disk(root.to_path_buf()), &entries(root));
        assert!(!generated.is_generated("src/lib.rs"));
        assert!(generated.is_generated("build/out.rs"));
        assert!(!generated.is_generated(".gitignore"));
    }

    /// A `.gitattributes` that is a symlink (to an endless device, here) or a pipe is not
    /// read; one of a million patterns is read only up to its limits.
    #[test]
    fn pattern_files_are_read_only_when_small_and_regular() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::os::unix::fs::symlink("/dev/zero", root.join(".gitattributes")).unwrap();
        let pipe = std::ffi::CString::new(root.join(".gitignore").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o644) }, 0);
        std::fs::write(root.join("gen.rs"), "fn f() {}\n").unwrap();
        let generated = Generated::new(&Source::Disk(root.to_path_buf()), &entries(root));
        assert!(!generated.is_generated("gen.rs"));

        std::fs::remove_file(root.join(".gitignore")).unwrap();
        let many: String = (0..1_000_000).map(|i| format!("f{i}.rs\n")).collect();
        std::fs::write(root.join(".gitignore"), many).unwrap();
        let generated = Generated::new(&Source::Disk(root.to_path_buf()), &entries(root));
        assert!(
            !generated.is_generated("f5.rs"),
            "past the size limit: not read"
        );
        let few: String = (0..5_000).map(|i| format!("f{i}.rs\n")).collect();
        std::fs::write(root.join(".gitignore"), few).unwrap();
        let generated = Generated::new(&Source::Disk(root.to_path_buf()), &entries(root));
        assert!(generated.is_generated("f5.rs"));
        assert!(
            !generated.is_generated("f4999.rs"),
            "past the pattern limit"
        );
    }
}
