//! A file's text on either side of a result, as the base commit and the checkout hold
//! it, bounded in size and never through a link.

use std::path::Path;

use anyhow::Context;
use git2::Repository;

/// One side of a changed file, read as text for comparing it line by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileText {
    /// Not there on this side.
    Absent,
    Text(String),
    /// Not read, and why: over the size cap, not UTF-8, or not a regular file.
    Unread(String),
}

pub(super) fn base_text(
    repo: &Repository,
    odb: &git2::Odb<'_>,
    tree: &git2::Tree<'_>,
    path: &str,
    max_bytes: u64,
) -> anyhow::Result<FileText> {
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(FileText::Absent);
    };
    if entry.kind() != Some(git2::ObjectType::Blob) || entry.filemode() == 0o120000 {
        return Ok(FileText::Unread("not a regular file".into()));
    }
    let (size, _) = odb
        .read_header(entry.id())
        .with_context(|| format!("Could not read {path} in the base commit"))?;
    if size as u64 > max_bytes {
        return Ok(FileText::Unread(format!("larger than {max_bytes} bytes")));
    }
    let blob = repo
        .find_blob(entry.id())
        .with_context(|| format!("Could not read {path} in the base commit"))?;
    Ok(text_of(blob.content().to_vec()))
}

pub(super) fn checkout_text(work: &Path, path: &str, max_bytes: u64) -> FileText {
    let mut at = work.to_path_buf();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return FileText::Absent;
        };
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() || (last && !meta.is_file()) || (!last && !meta.is_dir()) {
            return FileText::Unread("not a regular file".into());
        }
        if last && meta.len() > max_bytes {
            return FileText::Unread(format!("larger than {max_bytes} bytes"));
        }
    }
    match std::fs::read(&at) {
        Ok(bytes) => text_of(bytes),
        Err(e) => FileText::Unread(format!("could not be read: {e}")),
    }
}

fn text_of(bytes: Vec<u8>) -> FileText {
    match String::from_utf8(bytes) {
        Ok(text) => FileText::Text(text),
        Err(_) => FileText::Unread("not UTF-8 text".into()),
    }
}
