//! The bubblewrap sandbox: a read-only view of the host with the workspace as the only
//! writable place, private `/tmp` and `/run`, fresh `/proc` and `/dev`, every namespace
//! unshared (no network but the bridged host sockets, see `relay.rs`), an unprivileged
//! user, and the secret paths covered up.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;

use super::{Bridge, Command, Output, Sandbox, SandboxError, full_env, process, validate};

/// The user and group a command sees itself as inside the sandbox.
const INSIDE_ID: &str = "1000";

/// Where the relay program and the bridged sockets appear inside (on the private `/run`).
const INSIDE_RUN: &str = "/run/planwright";

pub struct Bwrap {
    program: PathBuf,
    hidden: Vec<PathBuf>,
    host_user: Option<(u32, u32)>,
    relay: Option<PathBuf>,
}

impl Bwrap {
    /// `nobody`: the host user sandboxes run as when planwright runs as root.
    pub const DEFAULT_HOST_USER: (u32, u32) = (65534, 65534);

    /// A sandbox that never shows `hidden` (folders and files, e.g. `DATA_DIR`, the
    /// private key, the settings file). Fails when `bwrap` is not installed.
    pub fn new(hidden: Vec<PathBuf>) -> Result<Self, SandboxError> {
        let program = find_on_path("bwrap").ok_or_else(|| {
            SandboxError::Unavailable(
                "bubblewrap (`bwrap`) is not installed; install the `bubblewrap` package \
                 (or, to run executors with no isolation at all, set SANDBOX=none together \
                 with UNSAFE_NO_SANDBOX=1)"
                    .into(),
            )
        })?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Ok(Bwrap {
            program,
            hidden,
            // A user namespace made by root maps the sandbox's user onto host root, which
            // owns (and so may read) every root-only file such as /etc/shadow or /root;
            // starting bwrap as an unprivileged host user instead makes such files
            // unreadable inside.
            host_user: root.then_some(Self::DEFAULT_HOST_USER),
            // The relay is planwright's own `sandbox relay` command.
            relay: std::env::current_exe().ok(),
        })
    }

    /// The planwright binary that serves bridges inside (`planwright sandbox relay`);
    /// by default the running executable, which is right unless that is not planwright
    /// (a test binary, say).
    pub fn with_relay_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.relay = Some(program.into());
        self
    }

    /// The host user sandboxes run as (`None`: planwright's own user).
    pub fn host_user(&self) -> Option<(u32, u32)> {
        self.host_user
    }

    /// Runs sandboxes as this host user and group when planwright is root (ignored
    /// otherwise: then they run as planwright's own user). Its process count is what
    /// `Limits::processes` bounds, so concurrent runs are best given different users.
    pub fn with_host_user(mut self, uid: u32, gid: u32) -> Self {
        if self.host_user.is_some() {
            self.host_user = Some((uid, gid));
        }
        self
    }

    /// The arguments to bwrap, up to and including `--`.
    fn args(
        &self,
        workspace: &Path,
        workspace_fd: i32,
        cwd: &Path,
        read_only: &[PathBuf],
        bridges: &[Bridge],
        relay: Option<&Path>,
    ) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(&[
            "--unshare-all",
            // Explicit so that failing to create it is an error rather than silently
            // running in the host's user namespace.
            "--unshare-user",
            "--disable-userns",
            "--uid",
            INSIDE_ID,
            "--gid",
            INSIDE_ID,
            "--die-with-parent",
            // A new session: no TIOCSTI into a terminal planwright may have.
            "--new-session",
            "--cap-drop",
            "ALL",
            // No --clearenv/--setenv: the environment is bwrap's own (set by planwright),
            // so values such as the capability token never appear in a command line.
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            // Host services listen on Unix sockets under /run; a read-only mount does not
            // stop connecting to them.
            "--tmpfs",
            "/run",
        ]);
        for path in &self.hidden {
            // Covering the real location hides it under every name; a path that does not
            // exist has nothing to hide.
            let Ok(real) = path.canonicalize() else {
                continue;
            };
            if real.is_dir() {
                args.extend(["--tmpfs".into(), real.into_os_string()]);
            } else {
                args.extend([
                    "--ro-bind".into(),
                    "/dev/null".into(),
                    real.into_os_string(),
                ]);
            }
        }
        // After the covers, so a workspace inside DATA_DIR is visible and nothing else
        // there. Bound from a descriptor opened by planwright, so it is the folder
        // checked above; bubblewrap (0.8) still resolves that descriptor's path, so the
        // unprivileged host user must be able to walk down to the workspace (`planwright
        // doctor` checks this for DATA_DIR).
        args.extend([
            "--bind-fd".into(),
            workspace_fd.to_string().into(),
            workspace.as_os_str().to_owned(),
            "--chdir".into(),
            cwd.as_os_str().to_owned(),
        ]);
        for path in read_only {
            args.extend([
                "--ro-bind".into(),
                path.as_os_str().to_owned(),
                path.as_os_str().to_owned(),
            ]);
        }
        // `relay` is set exactly when there are bridges (see `check_bridges`).
        if let Some(relay) = relay {
            args.extend([
                "--ro-bind".into(),
                relay.as_os_str().to_owned(),
                format!("{INSIDE_RUN}/relay").into(),
            ]);
            for bridge in bridges {
                args.extend([
                    "--ro-bind".into(),
                    bridge.socket.as_os_str().to_owned(),
                    inside_socket(bridge.port).into(),
                ]);
            }
        }
        args.push("--".into());
        // The relay listens on the bridged ports, then becomes the command (relay.rs).
        if relay.is_some() {
            args.extend([
                format!("{INSIDE_RUN}/relay").into(),
                "sandbox".into(),
                "relay".into(),
            ]);
            for bridge in bridges {
                args.extend([
                    "--bridge".into(),
                    format!("{}={}", bridge.port, inside_socket(bridge.port)).into(),
                ]);
            }
            // What the mounts leave writable, minus the covers over hidden paths.
            args.extend([
                "--writable".into(),
                workspace.as_os_str().to_owned(),
                "--writable".into(),
                "/tmp".into(),
                "--writable".into(),
                "/dev".into(),
                "--".into(),
            ]);
        }
        args
    }

    /// The read-only folders as real paths; one that would show a hidden path (being it,
    /// or holding it) is refused.
    fn check_read_only(&self, paths: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
        let hidden: Vec<PathBuf> = self
            .hidden
            .iter()
            .filter_map(|h| h.canonicalize().ok())
            .collect();
        paths
            .iter()
            .map(|p| {
                let real = p.canonicalize().map_err(|e| {
                    SandboxError::InvalidCommand(format!(
                        "cannot show {} read-only: {e}",
                        p.display()
                    ))
                })?;
                if !real.is_dir() {
                    return Err(SandboxError::InvalidCommand(format!(
                        "cannot show {} read-only: it is not a folder",
                        p.display()
                    )));
                }
                if hidden.iter().any(|h| h.starts_with(&real)) {
                    return Err(SandboxError::InvalidCommand(format!(
                        "cannot show {} read-only: it holds a path that must stay hidden",
                        p.display()
                    )));
                }
                Ok(real)
            })
            .collect()
    }

    /// Refuses bridges the sandbox could not use, before bwrap fails less clearly.
    fn check_bridges(&self, bridges: &[Bridge]) -> Result<Option<PathBuf>, SandboxError> {
        if bridges.is_empty() {
            return Ok(None);
        }
        let relay = self.relay.clone().ok_or_else(|| {
            SandboxError::Unavailable(
                "the planwright executable, which relays bridged ports, cannot be found".into(),
            )
        })?;
        if !relay.is_file() {
            return Err(SandboxError::Unavailable(format!(
                "the relay program {} does not exist",
                relay.display()
            )));
        }
        if let Some((uid, gid)) = self.host_user {
            use std::os::unix::fs::MetadataExt;
            for bridge in bridges {
                let meta = std::fs::metadata(&bridge.socket)
                    .with_context(|| format!("Could not inspect {}", bridge.socket.display()))?;
                // Connecting needs write permission, by owner, group or other.
                let mode = meta.mode();
                let writable = (meta.uid() == uid && mode & 0o200 != 0)
                    || (meta.gid() == gid && mode & 0o020 != 0)
                    || mode & 0o002 != 0;
                if !writable {
                    return Err(SandboxError::InvalidCommand(format!(
                        "the sandbox user (uid {uid}, gid {gid}) cannot connect to {}: give the \
                         socket to group {gid} with mode 0660",
                        bridge.socket.display()
                    )));
                }
            }
        }
        Ok(Some(relay))
    }
}

#[async_trait]
impl Sandbox for Bwrap {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    async fn run(&self, command: &Command) -> Result<Output, SandboxError> {
        let started = std::time::Instant::now();
        let result = self.run_uncounted(command).await;
        crate::server::metrics::record_sandbox_run(&result, started.elapsed());
        result
    }
}

impl Bwrap {
    async fn run_uncounted(&self, command: &Command) -> Result<Output, SandboxError> {
        let (workspace, cwd) = validate(command)?;
        let relay = self.check_bridges(&command.bridges)?;
        if let Some((uid, gid)) = self.host_user {
            let ws = workspace.clone();
            tokio::task::spawn_blocking(move || chown_tree(&ws, uid, gid))
                .await
                .context("The ownership task failed")??;
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&workspace)
            .with_context(|| format!("Could not open {}", workspace.display()))?;
        let fd = dir.as_raw_fd();

        let mut cmd = tokio::process::Command::new(&self.program);
        let read_only = self.check_read_only(&command.read_only)?;
        cmd.args(self.args(
            &workspace,
            fd,
            &cwd,
            &read_only,
            &command.bridges,
            relay.as_deref(),
        ))
        .args(&command.argv)
        // Nothing of planwright's environment: bwrap passes on exactly this.
        .env_clear()
        .envs(full_env(&workspace, command));
        if let Some((uid, gid)) = self.host_user {
            // std drops supplementary groups as well when root changes uid.
            cmd.uid(uid).gid(gid);
        }
        let finished =
            process::run(cmd, &command.limits, command.spill_dir.as_deref(), Some(fd)).await?;
        drop(dir);
        Ok(finished.into_output(true))
    }
}

/// Gives the workspace to the host user the sandbox runs as, without following symlinks
/// (a symlink in a repository must not hand over a file outside it).
fn chown_tree(root: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("Could not inspect {}", path.display()))?;
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).with_context(|| {
                format!("Could not hand {} to the sandbox user", path.display())
            })?;
        }
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

fn inside_socket(port: u16) -> String {
    format!("{INSIDE_RUN}/bridge-{port}.sock")
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
