//! A control group of its own for each sandbox run, where the host lets planwright make
//! one: the run's memory (everything its processes and its tmpfs files hold, which
//! per-process rlimits cannot add up), its process count and an equal share of the CPU
//! beside other runs. cgroup v2 (one hierarchy) and v1 (one per controller) both work.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup hierarchy the host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn detect() -> Option<Version> {
        if Path::new(ROOT).join("cgroup.controllers").exists() {
            Some(Version::V2)
        } else if Path::new(ROOT).join("memory").is_dir() && Path::new(ROOT).join("pids").is_dir() {
            Some(Version::V1)
        } else {
            None
        }
    }
}

/// One run's group (one folder per hierarchy), removed when dropped. Processes join it by
/// writing to `procs`, opened by planwright beforehand (see [`RunGroup::join_fds`]).
pub struct RunGroup {
    dirs: Vec<PathBuf>,
    procs: Vec<OwnedFd>,
}

impl RunGroup {
    /// Makes the group with these limits, or says why the host does not allow it.
    pub fn create(memory_bytes: u64, processes: u64) -> Result<RunGroup> {
        let name = format!("planwright-run-{}", uuid::Uuid::new_v4().simple());
        let mut group = RunGroup {
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        match Version::detect() {
            Some(Version::V2) => {
                let parent = v2_parent()?;
                let dir = parent.join(&name);
                group.make(&dir)?;
                write(&dir, "memory.max", &memory_bytes.to_string())?;
                // Over the limit a run is killed rather than left thrashing in swap.
                let _ = write(&dir, "memory.swap.max", "0");
                write(&dir, "pids.max", &processes.to_string())?;
                write(&dir, "cpu.weight", "100")?;
                group.open_procs(&dir)?;
            }
            Some(Version::V1) => {
                for (controller, settings) in [
                    (
                        "memory",
                        vec![("memory.limit_in_bytes", memory_bytes.to_string())],
                    ),
                    ("pids", vec![("pids.max", processes.to_string())]),
                    ("cpu", vec![("cpu.shares", "1024".to_owned())]),
                ] {
                    let dir = v1_parent(controller)?.join(&name);
                    group.make(&dir)?;
                    for (file, value) in settings {
                        write(&dir, file, &value)?;
                    }
                    group.open_procs(&dir)?;
                }
            }
            None => bail!("this host has no cgroup hierarchy under {ROOT}"),
        }
        Ok(group)
    }

    fn make(&mut self, dir: &Path) -> Result<()> {
        if let Some(parent) = dir.parent() {
            sweep(parent);
        }
        std::fs::create_dir(dir).with_context(|| format!("Could not create {}", dir.display()))?;
        self.dirs.push(dir.to_path_buf());
        Ok(())
    }

    fn open_procs(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("cgroup.procs");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("Could not open {}", path.display()))?;
        self.procs.push(file.into());
        Ok(())
    }

    /// Descriptors the child writes `0` to (itself) before it starts anything: opened by
    /// planwright, so the write is allowed after the child has become the sandbox user.
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The group's folders, for reports.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl RunGroup {
    /// Removes the group once the kernel has finished reaping its processes (the pid
    /// namespace dies with bwrap, but its last processes go a moment later).
    pub async fn remove(mut self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut dirs = std::mem::take(&mut self.dirs);
        while !dirs.is_empty() {
            dirs.retain(|dir| std::fs::remove_dir(dir).is_err());
            if dirs.is_empty() || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.dirs = dirs;
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::warn!("Could not remove the control group {}: {e}", dir.display());
            }
        }
    }
}

/// Joins the calling process to every group in `fds`. Called between fork and exec, so it
/// does nothing but `write(2)`.
pub(super) fn join(fds: &[RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: writing a static buffer to a descriptor that stays open until exec.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Removes the groups of runs whose planwright was killed before it could. A group in use
/// has processes, which the kernel does not let go; one made a moment ago may not have
/// them yet, so only groups older than a minute are tried.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(60));
        if old
            && entry
                .file_name()
                .to_string_lossy()
                .starts_with("planwright-run-")
        {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

fn write(dir: &Path, file: &str, value: &str) -> Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, value).with_context(|| format!("Could not write {}", path.display()))
}

/// This process's own group in a hierarchy, from `/proc/self/cgroup` (`N:controllers:/path`).
fn own_path(controller: &str) -> Result<PathBuf> {
    let text =
        std::fs::read_to_string("/proc/self/cgroup").context("Could not read /proc/self/cgroup")?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if controllers.split(',').any(|x| x == controller) {
            return Ok(PathBuf::from(path.trim_start_matches('/')));
        }
    }
    bail!("/proc/self/cgroup names no {controller} group")
}

fn v1_parent(controller: &str) -> Result<PathBuf> {
    let mount = Path::new(ROOT).join(controller);
    // Inside a container the path may be the host's, which this mount does not show.
    let own = mount.join(own_path(controller)?);
    Ok(if own.is_dir() { own } else { mount })
}

/// v2 allows controllers only for groups without processes of their own, so runs go in
/// a `planwright` group beside planwright's (under the root of what this process sees),
/// with the controllers switched on down to it.
fn v2_parent() -> Result<PathBuf> {
    let root = Path::new(ROOT);
    let parent = root.join("planwright-sandboxes");
    let controllers = "+memory +pids +cpu";
    write(root, "cgroup.subtree_control", controllers).context(
        "the cgroup root does not hand memory, pids and cpu to its children (in a container, \
         give planwright a cgroup namespace of its own or a delegated subtree)",
    )?;
    match std::fs::create_dir(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => bail!("Could not create {}: {e}", parent.display()),
    }
    write(&parent, "cgroup.subtree_control", controllers)?;
    Ok(parent)
}
