//! The host users sandboxes run as, and opening a host socket to them alone.

use std::ops::Range;
use std::path::Path;

/// The host users sandboxes run as when planwright is root: one per concurrent run, so
/// that the process limit (counted per host user) of one run cannot starve another. Far
/// above the ids distributions hand out to people, services and the usual subordinate
/// ranges of rootless containers, and below 2^31, which bubblewrap cannot map.
pub const HOST_IDS: Range<u32> = 1_900_000_000..1_900_004_096;

/// The one group every range-leased host user runs in: sockets that only sandboxes may
/// reach (the model proxy's) are given to it with mode 0660. Runs still cannot see each
/// other's files: each sees only its own workspace.
pub const SANDBOX_GROUP: u32 = HOST_IDS.start;

/// Lets sandboxes, and no other user, connect to the host socket at `path`: as root they
/// run in [`SANDBOX_GROUP`], which gets the socket with mode 0660; otherwise they
/// run as planwright's own user, the owner, and the mode is 0600.
pub fn open_to_sandboxes(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let mode = if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(path, None, Some(SANDBOX_GROUP))?;
        0o660
    } else {
        0o600
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}
