//! The file locks both caches under `DATA_DIR` share: a `lease` file in each entry that
//! every user holds a shared lock on, so that eviction, which needs the exclusive lock,
//! never removes an entry some run (in any process) is using; and the sweep of what a
//! process that died mid-way left in a cache's `tmp/`.

use std::fs;
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub(super) fn flock(file: &fs::File, operation: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a descriptor this function borrows for the call.
    let status = unsafe { libc::flock(file.as_raw_fd(), operation) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Removes what a process that died mid-way left in `cache/tmp/`: each leftover is named
/// after its entry's key (`<key>.<uuid>`, `evict-<key>-<uuid>`), and one whose
/// `cache/locks/<key>.lock` nobody holds is no one's work in progress.
pub(super) fn sweep_tmp(cache: &Path) {
    let Ok(entries) = fs::read_dir(cache.join("tmp")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = name.trim_start_matches("evict-");
        let key = key.split(['.', '-']).next().unwrap_or("");
        let lock = cache.join("locks").join(format!("{key}.lock"));
        let free = fs::File::create(lock)
            .is_ok_and(|lock| flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_ok());
        if free {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Moves the entry at `dir`, if nobody leases it, into `tmp` (so nobody finds half of it)
/// and removes it there. `true` when it was evicted.
pub(super) fn evict(dir: &Path, tmp: &Path, what: &str) -> bool {
    let Ok(lease) = fs::File::open(dir.join("lease")) else {
        return false;
    };
    if flock(&lease, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return false;
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let away = tmp.join(format!("evict-{name}-{}", uuid::Uuid::new_v4().simple()));
    if fs::rename(dir, &away).is_err() {
        return false;
    }
    drop(lease);
    tracing::info!(entry = %name, "evicted from the {what}");
    let _ = fs::remove_dir_all(&away);
    true
}

/// The folders in `folder`; none when it cannot be read.
pub(super) fn listing(folder: &Path) -> Vec<PathBuf> {
    let Ok(items) = fs::read_dir(folder) else {
        return Vec::new();
    };
    items
        .flatten()
        .filter(|item| item.file_type().is_ok_and(|t| t.is_dir()))
        .map(|item| item.path())
        .collect()
}

/// Evicts the least recently used of the entry folders `dirs` (by their lease's mtime)
/// that nobody leases, never `keep`, until `incoming` more bytes fit under `max`; `size`
/// reads an entry's bytes from its record. Returns the bytes left: what is leased stays
/// even when that is over the cap, since a run in progress matters more than the cap.
pub(super) fn evict_least_recent(
    dirs: Vec<PathBuf>,
    tmp: &Path,
    what: &str,
    (max, incoming): (u64, u64),
    keep: Option<&str>,
    size: impl Fn(&Path) -> u64,
) -> u64 {
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for dir in dirs {
        let used = fs::metadata(dir.join("lease"))
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        entries.push((used, size(&dir), dir));
    }
    let mut total: u64 = entries.iter().map(|(_, bytes, _)| bytes).sum();
    entries.sort();
    for (_, bytes, dir) in entries {
        if total.saturating_add(incoming) <= max {
            break;
        }
        if keep.is_some_and(|k| dir.ends_with(k)) {
            continue;
        }
        if evict(&dir, tmp, what) {
            total = total.saturating_sub(bytes);
        }
    }
    total
}
