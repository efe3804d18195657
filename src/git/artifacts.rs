//! Files verification's commands leave in a result's checkout, and putting back what
//! they rewrote.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use git2::{Oid, Repository};

/// Files verification's commands created in a result's checkout, each with the id of the
/// content they left: the checks' own, never the executor's, until the executor changes
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Artifacts(pub(super) HashMap<String, Oid>);

impl Artifacts {
    /// Adds `later`'s files; a file both hold keeps what the later checks left.
    pub fn extend(&mut self, later: Artifacts) {
        self.0.extend(later.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `path` (relative to `work`) is one of these files, holding what the checks
    /// left in it.
    pub(super) fn unchanged(&self, work: &Path, path: &Path) -> bool {
        self.0
            .get(path.to_string_lossy().as_ref())
            .is_some_and(|id| content_id(&work.join(path)).as_ref() == Some(id))
    }
}

/// The blob id of what `path` holds: a file's bytes, or a symbolic link's target (never
/// what it points to); `None` for a folder or nothing.
pub(super) fn content_id(path: &Path) -> Option<Oid> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        Oid::hash_object(
            git2::ObjectType::Blob,
            target.as_os_str().as_encoded_bytes(),
        )
        .ok()
    } else if meta.is_file() {
        Oid::hash_file(git2::ObjectType::Blob, path).ok()
    } else {
        None
    }
}

/// Removes `relative` from `work`, if it is there, without following links.
pub(super) fn remove_path(work: &Path, relative: &Path) -> anyhow::Result<()> {
    let target = work.join(relative);
    match std::fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&target),
        Ok(_) => std::fs::remove_file(&target),
        Err(_) => return Ok(()),
    }
    .with_context(|| format!("Could not remove {}", target.display()))
}

/// Writes `entry` (a file or a link of the result's tree) back at `relative` in `work`.
/// The folders on the way are made real ones first: a check may have left a link in the
/// place of one, and writing through it would reach outside the checkout.
pub(super) fn put_back(
    repo: &Repository,
    work: &Path,
    relative: &Path,
    entry: &git2::TreeEntry<'_>,
) -> anyhow::Result<()> {
    if entry.kind() != Some(git2::ObjectType::Blob) {
        return Ok(());
    }
    let mut dir = work.to_path_buf();
    let parts: Vec<_> = relative.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&dir)
                .with_context(|| format!("Could not remove {}", dir.display()))?,
            Err(_) => {}
        }
        std::fs::create_dir(&dir).with_context(|| format!("Could not create {}", dir.display()))?;
    }
    remove_path(work, relative)?;
    let target = work.join(relative);
    let blob = repo
        .find_blob(entry.id())
        .with_context(|| format!("Could not read {} in the result", relative.display()))?;
    if entry.filemode() == i32::from(git2::FileMode::Link) {
        use std::os::unix::ffi::OsStrExt as _;
        let link = std::ffi::OsStr::from_bytes(blob.content());
        std::os::unix::fs::symlink(link, &target)
    } else {
        std::fs::write(&target, blob.content()).and_then(|()| {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = if entry.filemode() == i32::from(git2::FileMode::BlobExecutable) {
                0o755
            } else {
                0o644
            };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
        })
    }
    .with_context(|| format!("Could not write {} back", target.display()))
}
