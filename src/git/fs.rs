//! Files and folders under `DATA_DIR` as mirrors and workspaces use them: stamps, an
//! exclusive lock between processes, handing a tree to the sandbox user, removing one.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;

pub(super) fn touch(path: &Path) -> anyhow::Result<()> {
    File::create(path)
        .and_then(|f| f.set_modified(SystemTime::now()))
        .with_context(|| format!("Could not write {}", path.display()))
}

/// An exclusive `flock`, released when dropped (closing the file releases it).
pub(super) struct FileLock(#[allow(dead_code)] File);

impl FileLock {
    pub(super) fn exclusive(path: &Path) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("Could not create {}", parent.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("Could not open the lock {}", path.display()))?;
        loop {
            // SAFETY: the descriptor is open for as long as `file` lives.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(FileLock(file));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("Could not lock {}", path.display()));
            }
        }
    }
}

pub(super) fn chown_tree(root: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .with_context(|| format!("Could not hand {} to the sandbox user", path.display()))?;
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("Could not inspect {}", path.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)
                .with_context(|| format!("Could not list {}", path.display()))?
            {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// Removes a workspace even where the run left folders without write permission (a
/// sandbox running as planwright's own user can do that).
pub(super) fn remove_tree(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return Ok(());
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    std::fs::remove_dir_all(dir)
        .with_context(|| format!("Could not remove the workspace {}", dir.display()))
}
