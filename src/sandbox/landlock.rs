//! Landlock inside the sandbox, as a second wall behind bubblewrap's mounts: writes only
//! beneath the given folders, and (kernel ABI 6 and later) no signals to, or abstract
//! sockets of, processes outside the domain, such as the relay started before it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const FS_WRITE_FILE: u64 = 1 << 1;
const FS_REMOVE_DIR: u64 = 1 << 4;
const FS_REMOVE_FILE: u64 = 1 << 5;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_DIR: u64 = 1 << 7;
const FS_MAKE_REG: u64 = 1 << 8;
const FS_MAKE_SOCK: u64 = 1 << 9;
const FS_MAKE_FIFO: u64 = 1 << 10;
const FS_MAKE_BLOCK: u64 = 1 << 11;
const FS_MAKE_SYM: u64 = 1 << 12;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// What the running kernel enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforced {
    /// Writes confined, at this ABI version.
    Abi(i64),
    /// The kernel has no usable Landlock (missing, disabled, or ABI 1, which would forbid
    /// every rename across folders); bubblewrap's mounts alone hold.
    Unsupported,
}

/// The kernel's Landlock ABI version; below 1 when it has none.
pub(crate) fn abi() -> i64 {
    // SAFETY: the documented probe: a null attribute of size 0 with the version flag.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    }
}

/// Confines this process and everything it later starts: files may be written, created,
/// removed or renamed only beneath `writable`. Reading and executing are left to the
/// mounts.
pub fn restrict_writes(writable: &[&Path]) -> Result<Enforced> {
    let abi = abi();
    if abi < 2 {
        return Ok(Enforced::Unsupported);
    }
    let mut access = FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM
        | FS_REFER;
    if abi >= 3 {
        access |= FS_TRUNCATE;
    }
    let attr = RulesetAttr {
        handled_access_fs: access,
        handled_access_net: 0,
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // Older kernels know a shorter attribute: only the fields they understand.
    let size = match abi {
        2 | 3 => std::mem::size_of::<u64>(),
        4 | 5 => 2 * std::mem::size_of::<u64>(),
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least `size` bytes.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(std::io::Error::last_os_error()).context("Could not create a Landlock ruleset");
    }
    let ruleset = i32::try_from(ruleset).context("Landlock returned no descriptor")?;
    let result = add_rules_and_restrict(ruleset, access, writable);
    // SAFETY: closing the descriptor created above, once.
    unsafe { libc::close(ruleset) };
    result.map(|()| Enforced::Abi(abi))
}

fn add_rules_and_restrict(ruleset: i32, access: u64, writable: &[&Path]) -> Result<()> {
    for path in writable {
        let c = CString::new(path.as_os_str().as_bytes())
            .with_context(|| format!("Cannot confine writes to {}", path.display()))?;
        // SAFETY: a plain open of a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("Could not open {}", path.display()));
        }
        let rule = PathBeneathAttr {
            allowed_access: access,
            parent_fd: fd,
        };
        // SAFETY: `rule` is a valid path-beneath attribute for the ruleset descriptor.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            )
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: closing the descriptor opened above, once.
        unsafe { libc::close(fd) };
        if added != 0 {
            return Err(err)
                .with_context(|| format!("Could not allow writes in {}", path.display()));
        }
    }
    // SAFETY: prctl and landlock_restrict_self take plain integers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error()).context("Could not set no_new_privs");
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            let err = std::io::Error::last_os_error();
            bail!("Could not enforce the Landlock ruleset: {err}");
        }
    }
    Ok(())
}
