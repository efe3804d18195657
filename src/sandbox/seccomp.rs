//! The seccomp filter every sandboxed process runs under: system calls a build or test
//! never needs and that reach into the kernel or other processes (debugging, kernel
//! keyrings, BPF, userfaultfd, perf events, io_uring, loading kernels or modules, the mount family)
//! fail with `EPERM`. bubblewrap loads it (`--seccomp FD`) after its own setup, just
//! before the command starts.

use std::io::{Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{Context, Result};

/// The refused calls. Most already fail for an unprivileged user without capabilities;
/// the filter also closes the ones that do not (`ptrace`, the keyrings, `userfaultfd`,
/// `perf_event_open`, unprivileged `bpf`) and whatever a kernel bug might open later.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_bpf,
    libc::SYS_add_key,
    libc::SYS_keyctl,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // io_uring's operations are not seen by seccomp at all, and its code is a frequent
    // source of kernel flaws.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Reaching into other processes' descriptors and comparing kernel objects.
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
];

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

// Classic BPF, as in linux/filter.h and linux/seccomp.h.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// x86_64's x32 calls carry this bit; their numbers differ, so a list of x86_64 numbers
/// would not catch them.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// One `struct sock_filter`, as bubblewrap reads it.
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..2].copy_from_slice(&code.to_ne_bytes());
    out[2] = jt;
    out[3] = jf;
    out[4..].copy_from_slice(&k.to_ne_bytes());
    out
}

/// The compiled program: another architecture's calls (whose numbers mean other things)
/// kill the process, the refused ones get `EPERM`, everything else is allowed.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn program() -> Vec<u8> {
    // Each test jumps over the tests after it and the ALLOW to the ERRNO at the end.
    let mut tests: Vec<(u16, u32)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    tests.push((BPF_JGE_K, X32_SYSCALL_BIT));
    tests.extend(REFUSED.iter().map(|nr| (BPF_JEQ_K, *nr as u32)));
    let n = tests.len();
    let mut out = Vec::with_capacity((n + 6) * 8);
    out.extend(insn(BPF_LD_W_ABS, 0, 0, ARCH));
    out.extend(insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH));
    out.extend(insn(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS));
    out.extend(insn(BPF_LD_W_ABS, 0, 0, NR));
    for (i, (code, k)) in tests.into_iter().enumerate() {
        // The list is a few dozen long, far below a jump's 255.
        let jt = u8::try_from(n - i).unwrap_or(u8::MAX);
        out.extend(insn(code, jt, 0, k));
    }
    out.extend(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
    out.extend(insn(
        BPF_RET_K,
        0,
        0,
        SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    out
}

/// An anonymous file holding [`program`], read from its start by bubblewrap; `None` on
/// an architecture this filter does not know (the sandbox then has no filter).
pub(super) fn descriptor() -> Result<Option<OwnedFd>> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        // SAFETY: a NUL-terminated name and valid flags; the result is checked below.
        let fd = unsafe { libc::memfd_create(c"planwright-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .context("Could not create the seccomp filter's file");
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.write_all(&program())
            .and_then(|()| file.rewind())
            .context("Could not write the seccomp filter")?;
        Ok(Some(file.into()))
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_the_errno_return() {
        let prog = program();
        let insns: Vec<&[u8]> = prog.chunks(8).collect();
        let errno = insns.len() - 1;
        assert_eq!(
            u32::from_ne_bytes(insns[errno][4..].try_into().unwrap()),
            SECCOMP_RET_ERRNO | libc::EPERM as u32
        );
        for (i, insn) in insns.iter().enumerate().skip(4).take(errno - 5) {
            assert_eq!(i + 1 + usize::from(insn[2]), errno, "instruction {i}");
        }
    }
}
