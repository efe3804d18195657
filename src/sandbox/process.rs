//! Starting a sandbox's outermost process and watching it: rlimits set between fork and
//! exec, a process group of its own that the wall-clock timeout kills whole, and both
//! output pipes read at once, each kept up to its cap.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::command::Limits;
use super::output::{Captured, Exit, Output};

/// How long output may keep flowing once the process has ended: a straggler that left
/// the process group must not hold the run open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

pub(super) struct Finished {
    status: ExitStatus,
    timed_out: bool,
    stdout: Captured,
    stderr: Captured,
    duration: Duration,
}

impl Finished {
    /// `folded_signals`: the launcher reports a child's death by signal N as exit code
    /// 128 + N (bwrap does).
    pub(super) fn into_output(self, folded_signals: bool) -> Output {
        let exit = match (self.status.code(), self.status.signal()) {
            (Some(c), _) if folded_signals && (129..=128 + 64).contains(&c) => {
                Exit::Signal(c - 128)
            }
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            // Neither code nor signal cannot happen for a waited-for process.
            (None, None) => Exit::Code(-1),
        };
        Output {
            exit,
            timed_out: self.timed_out,
            stdout: self.stdout,
            stderr: self.stderr,
            duration: self.duration,
        }
    }
}

/// `close_range` flag: mark close-on-exec rather than close now (std still needs its own
/// descriptors until exec).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// Runs `cmd` to its end or the wall-clock limit. `keep_fds` are descriptors the launcher
/// must inherit (everything else planwright holds is close-on-exec).
pub(super) async fn run(
    mut cmd: tokio::process::Command,
    limits: &Limits,
    spill_dir: Option<&Path>,
    keep_fds: &[RawFd],
    cgroup_fds: &[RawFd],
) -> Result<Finished> {
    let keep_fds = keep_fds.to_vec();
    let cgroup_fds = cgroup_fds.to_vec();
    let rlimits: [(Resource, u64); 5] = [
        (libc::RLIMIT_CPU, limits.cpu_seconds),
        (libc::RLIMIT_AS, limits.memory_bytes),
        (libc::RLIMIT_NPROC, limits.processes),
        (libc::RLIMIT_FSIZE, limits.file_size_bytes),
        // A crashing process must not write a core file of its whole memory.
        (libc::RLIMIT_CORE, 0),
    ];
    // stdin is the caller's (see `sandbox::stdin`).
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so the timeout can kill everything it started at once.
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: between fork and exec only async-signal-safe calls are allowed; the closure
    // calls setrlimit and fcntl on values computed beforehand and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // First, so that everything the launcher starts is counted in the run's group.
            super::cgroup::join(&cgroup_fds)?;
            for (resource, value) in rlimits {
                let limit = libc::rlimit {
                    rlim_cur: value as libc::rlim_t,
                    rlim_max: value as libc::rlim_t,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Descriptors planwright itself inherited without close-on-exec (a pipe from
            // its supervisor, say) must not reach the sandbox.
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            for &fd in &keep_fds {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }

    let started = Instant::now();
    let mut child = cmd.spawn().context("Could not start the sandbox process")?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .context("The sandbox process has no id")?;
    let stop_reading = CancellationToken::new();
    let spill = |name: &str| spill_dir.map(|d| (d.join(name), limits.spill_bytes));
    let stdout = child.stdout.take().context("stdout is not piped")?;
    let stderr = child.stderr.take().context("stderr is not piped")?;
    let out_task = tokio::spawn(capture(
        stdout,
        limits.output_bytes,
        spill("stdout.log"),
        stop_reading.clone(),
    ));
    let err_task = tokio::spawn(capture(
        stderr,
        limits.output_bytes,
        spill("stderr.log"),
        stop_reading.clone(),
    ));

    let (status, timed_out) = match tokio::time::timeout(limits.wall, child.wait()).await {
        Ok(status) => (
            status.context("Could not wait for the sandbox process")?,
            false,
        ),
        Err(_) => {
            kill_group(group);
            let status = child
                .wait()
                .await
                .context("Could not wait for the killed sandbox process")?;
            (status, true)
        }
    };
    let duration = started.elapsed();
    // Background children left in the group die with the run rather than outlive it.
    kill_group(group);
    let cancel_later = stop_reading.clone();
    let grace = tokio::spawn(async move {
        tokio::time::sleep(DRAIN_GRACE).await;
        cancel_later.cancel();
    });
    let stdout = out_task.await.context("The stdout reader failed")??;
    let stderr = err_task.await.context("The stderr reader failed")??;
    grace.abort();
    Ok(Finished {
        status,
        timed_out,
        stdout,
        stderr,
        duration,
    })
}

fn kill_group(group: i32) {
    // SAFETY: kill has no memory-safety preconditions; ESRCH (group already gone) is fine.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
}

/// Reads a pipe to its end (or until told to stop), keeping `keep` bytes in memory and,
/// once past that, the stream from its start in the spill file up to its own cap.
async fn capture(
    mut pipe: impl AsyncRead + Unpin,
    keep: usize,
    spill: Option<(PathBuf, u64)>,
    stop: CancellationToken,
) -> Result<Captured> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Captured::default();
    let mut file: Option<(tokio::fs::File, u64)> = None;
    let mut spill_failed = false;
    loop {
        let n = tokio::select! {
            n = pipe.read(&mut buf) => n.context("Could not read the command's output")?,
            () = stop.cancelled() => break,
        };
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        out.total += n as u64;
        let take = keep.saturating_sub(out.bytes.len()).min(n);
        out.bytes.extend_from_slice(&chunk[..take]);
        if take == n || spill_failed {
            continue;
        }
        let Some((path, cap)) = &spill else { continue };
        if file.is_none() {
            match open_spill(path, &out.bytes).await {
                Ok(f) => {
                    file = Some((f, out.bytes.len() as u64));
                    out.spilled = Some(path.clone());
                }
                Err(e) => {
                    // The cap still holds without the file; only the excess is lost.
                    tracing::warn!("Could not keep output beyond the cap: {e:#}");
                    spill_failed = true;
                    continue;
                }
            }
        }
        if let Some((f, written)) = &mut file {
            let rest = &chunk[take..];
            let room = cap.saturating_sub(*written);
            let part = &rest[..rest.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
            if !part.is_empty() {
                f.write_all(part)
                    .await
                    .with_context(|| format!("Could not write {}", path.display()))?;
                *written += part.len() as u64;
            }
        }
    }
    if let Some((mut f, _)) = file {
        f.flush().await.context("Could not flush the spill file")?;
    }
    Ok(out)
}

async fn open_spill(path: &Path, head: &[u8]) -> Result<tokio::fs::File> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .with_context(|| format!("Could not create {}", dir.display()))?;
    }
    let mut f = tokio::fs::File::create(path)
        .await
        .with_context(|| format!("Could not create {}", path.display()))?;
    f.write_all(head)
        .await
        .with_context(|| format!("Could not write {}", path.display()))?;
    Ok(f)
}
