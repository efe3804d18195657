//! The repository's instruction files for coding agents: which ones lie on a contract's
//! paths, read at the base when the contract is written (so the approval binds them),
//! and read again from the run's checkout, checked against the recorded hash, when an
//! executor is handed them. The files are the repository's content, shaped by whoever
//! can push to it: no symlink is followed, on the way to a file or at it.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use git2::{ObjectType, Repository};
use sha2::{Digest, Sha256};

use super::repo::RepoTools;
use super::source::Source;
use crate::contract::InstructionFile;

/// The names looked for in the root and in every folder on the way to a contract's file,
/// in the order they are handed over within one folder. `AGENTS.md` is read by Codex and
/// most other agents, `AGENTS.override.md` is Codex's replacement for it, `CLAUDE.md`,
/// `.claude/CLAUDE.md` and `CLAUDE.local.md` are Claude Code's.
pub const FOLDER_FILES: [&str; 5] = [
    "AGENTS.md",
    "AGENTS.override.md",
    "CLAUDE.md",
    ".claude/CLAUDE.md",
    "CLAUDE.local.md",
];
/// Looked for at the root only (GitHub Copilot's repository instructions).
pub const ROOT_FILES: [&str; 1] = [".github/copilot-instructions.md"];
/// Bytes of instructions an executor is given at most, all files together: Codex's own
/// default for its project instructions, so a repository written for Codex fits as its
/// authors saw it, and a small share of any executor model's context.
pub const MAX_INSTRUCTION_BYTES: u64 = 32 * 1024;
/// A larger file is not read at all: no instruction file is this large, and its hash
/// would mean reading all of it.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Git's modes of a regular file; a symlink (`120000`) or a submodule is never read.
const FILE_MODES: [i32; 2] = [0o100644, 0o100755];

/// Every path an instruction file may have for a contract touching `paths`: the root's
/// names, then each folder on the way to each path, shallower folders first (nearest
/// last), each folder's names in [`FOLDER_FILES`] order.
pub fn candidates<S: AsRef<str>>(paths: &[S]) -> Vec<String> {
    leveled(paths).into_iter().map(|(_, path)| path).collect()
}

/// [`candidates`], each with its folder's depth (0 for the root).
fn leveled<S: AsRef<str>>(paths: &[S]) -> Vec<(usize, String)> {
    let mut folders: Vec<String> = vec![String::new()];
    for path in paths {
        let parts: Vec<&str> = path
            .as_ref()
            .trim()
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.iter().any(|p| *p == ".." || *p == ".git") {
            continue;
        }
        for end in 1..parts.len() {
            folders.push(parts[..end].join("/"));
        }
    }
    folders.sort_by(|a, b| depth(a).cmp(&depth(b)).then_with(|| a.cmp(b)));
    folders.dedup();
    let mut out = Vec::new();
    for folder in &folders {
        for name in FOLDER_FILES {
            out.push((depth(folder), join(folder, name)));
        }
        if folder.is_empty() {
            out.extend(ROOT_FILES.iter().map(|n| (0, (*n).to_owned())));
        }
    }
    out
}

fn depth(folder: &str) -> usize {
    if folder.is_empty() {
        0
    } else {
        folder.matches('/').count() + 1
    }
}

fn join(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_owned()
    } else {
        format!("{folder}/{name}")
    }
}

/// The sha256 of `bytes`, lower-case hex.
fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Why a listed file is not handed over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Withheld {
    #[error("`{0}` is missing from the checkout, is not a plain file, or lies behind a symlink")]
    Unreadable(String),
    #[error("`{0}` in the checkout is not the file the contract lists (its sha256 differs)")]
    Changed(String),
}

impl RepoTools {
    /// The instruction files on the way to `paths` (a contract's files), as the tools'
    /// source has them, with how much of each fits [`MAX_INSTRUCTION_BYTES`]. The cap is
    /// spent nearest first: a folder's own instructions are the last to be cut, and a
    /// large root file cannot starve them. Empty, non-UTF-8 and oversized files are left
    /// out, as is anything behind a symlink.
    pub fn instruction_files<S: AsRef<str>>(&self, paths: &[S]) -> Vec<InstructionFile> {
        let mut found: Vec<(usize, InstructionFile, String)> = Vec::new();
        for (level, path) in leveled(paths) {
            let Some(bytes) = self.source.plain_file(&path) else {
                continue;
            };
            let Ok(text) = String::from_utf8(bytes) else {
                tracing::info!(path, "an instruction file is not UTF-8; left out");
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let file = InstructionFile {
                sha256: sha256(text.as_bytes()),
                bytes: text.len() as u64,
                sent: 0,
                path,
            };
            found.push((level, file, text));
        }
        let mut order: Vec<usize> = (0..found.len()).collect();
        // Deepest first; within a depth, in the order they are handed over.
        order.sort_by(|a, b| found[*b].0.cmp(&found[*a].0).then(a.cmp(b)));
        let mut left = MAX_INSTRUCTION_BYTES as usize;
        for i in order {
            let (_, file, text) = &mut found[i];
            let mut sent = text.len().min(left);
            while !text.is_char_boundary(sent) {
                sent -= 1;
            }
            file.sent = sent as u64;
            left -= sent;
        }
        found.into_iter().map(|(_, file, _)| file).collect()
    }

    /// The text of a listed instruction file as an executor is given it (cut where the
    /// contract says), read from the tools' source; refused unless it is the very file
    /// the contract lists.
    pub fn instruction_text(&self, file: &InstructionFile) -> Result<String, Withheld> {
        let bytes = self
            .source
            .plain_file(&file.path)
            .ok_or_else(|| Withheld::Unreadable(file.path.clone()))?;
        if sha256(&bytes) != file.sha256 {
            return Err(Withheld::Changed(file.path.clone()));
        }
        let text = String::from_utf8(bytes).map_err(|_| Withheld::Changed(file.path.clone()))?;
        let sent = file.sent as usize;
        if sent > text.len() || !text.is_char_boundary(sent) {
            return Err(Withheld::Changed(file.path.clone()));
        }
        Ok(text[..sent].to_owned())
    }
}

impl Source {
    /// A regular file's whole content, or `None`: for a folder on disk, no component of
    /// the path may be a symlink; for a tree, the entry must be a blob with a file's mode
    /// (a path through a symlinked folder finds nothing). At most [`MAX_FILE_BYTES`].
    pub(super) fn plain_file(&self, rel: &str) -> Option<Vec<u8>> {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || *p == ".git")
        {
            return None;
        }
        match self {
            Source::Disk(root) => {
                let mut at = root.clone();
                for (i, part) in parts.iter().enumerate() {
                    at.push(part);
                    let kind = std::fs::symlink_metadata(&at).ok()?.file_type();
                    let last = i + 1 == parts.len();
                    if (last && !kind.is_file()) || (!last && !kind.is_dir()) {
                        return None;
                    }
                }
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&at)
                    .ok()?;
                let meta = file.metadata().ok()?;
                if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
                    return None;
                }
                let mut bytes = Vec::new();
                file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).ok()?;
                (bytes.len() as u64 <= MAX_FILE_BYTES).then_some(bytes)
            }
            Source::Tree { git_dir, commit } => {
                let repo = Repository::open(git_dir).ok()?;
                let tree = repo.find_commit(*commit).ok()?.tree().ok()?;
                let entry = tree.get_path(std::path::Path::new(rel)).ok()?;
                if entry.kind() != Some(ObjectType::Blob) || !FILE_MODES.contains(&entry.filemode())
                {
                    return None;
                }
                let (size, kind) = repo.odb().ok()?.read_header(entry.id()).ok()?;
                if kind != ObjectType::Blob || size as u64 > MAX_FILE_BYTES {
                    return None;
                }
                Some(repo.find_blob(entry.id()).ok()?.content().to_vec())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_run_from_the_root_to_each_files_folder() {
        let got = candidates(&["src/parser/lex.rs", "./src/main.rs", "docs/a/../b.md"]);
        let folders: Vec<&str> = got
            .iter()
            .filter(|p| p.ends_with("/AGENTS.md") || *p == "AGENTS.md")
            .map(String::as_str)
            .collect();
        assert_eq!(
            folders,
            ["AGENTS.md", "src/AGENTS.md", "src/parser/AGENTS.md"]
        );
        assert_eq!(
            got[..6],
            [
                "AGENTS.md",
                "AGENTS.override.md",
                "CLAUDE.md",
                ".claude/CLAUDE.md",
                "CLAUDE.local.md",
                ".github/copilot-instructions.md"
            ]
        );
    }

    fn tools(files: &[(&str, &str)]) -> (tempfile::TempDir, RepoTools) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let at = dir.path().join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        let tools = RepoTools::new(dir.path()).unwrap();
        (dir, tools)
    }

    #[test]
    fn symlinks_are_never_followed_to_a_file_or_through_a_folder() {
        let (dir, _) = tools(&[("src/x.rs", ""), ("AGENTS.md", "root words")]);
        let secret = dir
            .path()
            .parent()
            .unwrap()
            .join(format!("instructions-secret-{}", std::process::id()));
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("AGENTS.md"), "TOKEN=hunter2").unwrap();
        std::os::unix::fs::symlink(secret.join("AGENTS.md"), dir.path().join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("lib")).unwrap();
        let tools = RepoTools::new(dir.path()).unwrap();
        let files = tools.instruction_files(&["src/x.rs", "lib/y.rs"]);
        let _ = std::fs::remove_dir_all(&secret);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["AGENTS.md"]);
        assert_eq!(tools.instruction_text(&files[0]).unwrap(), "root words");
    }

    #[test]
    fn a_commits_symlinks_are_not_read_at_planning() {
        let (dir, _) = tools(&[
            ("AGENTS.md", "root words\n"),
            ("src/AGENTS.md", "src words\n"),
        ]);
        let root = dir.path();
        std::os::unix::fs::symlink("AGENTS.md", root.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink("src", root.join("lib")).unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .current_dir(root)
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "links"]);
        let head = git(&["rev-parse", "HEAD"]);
        let tree = RepoTools::in_tree(root, &root.join(".git"), &head).unwrap();
        let files = tree.instruction_files(&["src/x.rs", "lib/y.rs"]);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["AGENTS.md", "src/AGENTS.md"]);
        assert_eq!(tree.instruction_text(&files[1]).unwrap(), "src words\n");
    }

    #[test]
    fn the_cap_cuts_the_root_before_the_nearest_and_says_so() {
        let big = "r".repeat(MAX_INSTRUCTION_BYTES as usize);
        let near = "é".repeat(1000);
        let (_dir, tools) = tools(&[("AGENTS.md", &big), ("src/CLAUDE.md", &near)]);
        let files = tools.instruction_files(&["src/lib.rs"]);
        assert_eq!(files.len(), 2);
        let (root, nested) = (&files[0], &files[1]);
        assert_eq!(nested.path, "src/CLAUDE.md");
        assert!(!nested.cut());
        assert!(root.cut());
        assert_eq!(root.sent + nested.sent, MAX_INSTRUCTION_BYTES);
        assert_eq!(
            root.size_text(),
            format!("cut to {} of 32768 bytes", root.sent)
        );
        assert_eq!(
            tools.instruction_text(root).unwrap().len() as u64,
            root.sent
        );
    }

    #[test]
    fn a_file_changed_since_the_listing_is_withheld() {
        let (dir, tools) = tools(&[("AGENTS.md", "use tabs")]);
        let files = tools.instruction_files(&["x.rs"]);
        std::fs::write(dir.path().join("AGENTS.md"), "use spaces").unwrap();
        assert_eq!(
            tools.instruction_text(&files[0]),
            Err(Withheld::Changed("AGENTS.md".into()))
        );
        std::fs::remove_file(dir.path().join("AGENTS.md")).unwrap();
        assert_eq!(
            tools.instruction_text(&files[0]),
            Err(Withheld::Unreadable("AGENTS.md".into()))
        );
    }
}
