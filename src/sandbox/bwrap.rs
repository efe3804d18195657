//! The bubblewrap sandbox: a read-only view of the host with the workspace as the only
//! writable place, private `/tmp` and `/run`, fresh `/proc` and `/dev`, every namespace
//! unshared (no network), an unprivileged user, and the secret paths covered up.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;

use super::{Command, Output, Sandbox, SandboxError, base_env, process, validate};

/// The user and group a command sees itself as inside the sandbox.
const INSIDE_ID: &str = "1000";

pub struct Bwrap {
    program: PathBuf,
    hidden: Vec<PathBuf>,
    host_user: Option<(u32, u32)>,
}

impl Bwrap {
    /// `nobody`: the host user sandboxes run as when planwright runs as root.
    pub const DEFAULT_HOST_USER: (u32, u32) = (65534, 65534);

    /// A sandbox that never shows `hidden` (folders and files, e.g. `DATA_DIR`, the
    /// private key, the settings file). Fails when `bwrap` is not installed.
    pub fn new(hidden: Vec<PathBuf>) -> Result<Self, SandboxError> {
        let program = find_on_path("bwrap").ok_or_else(|| {
            SandboxError::Unavailable(
                "bubblewrap (`bwrap`) is not installed; install the `bubblewrap` package".into(),
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
        })
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
        env: &[(String, String)],
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
            "--clearenv",
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
        // there. Bound from a descriptor opened by planwright: the unprivileged host
        // user need not be able to walk DATA_DIR to reach it.
        args.extend([
            "--bind-fd".into(),
            workspace_fd.to_string().into(),
            workspace.as_os_str().to_owned(),
            "--chdir".into(),
            cwd.as_os_str().to_owned(),
        ]);
        for (k, v) in env {
            args.extend(["--setenv".into(), k.into(), v.into()]);
        }
        args.push("--".into());
        args
    }
}

#[async_trait]
impl Sandbox for Bwrap {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    async fn run(&self, command: &Command) -> Result<Output, SandboxError> {
        let (workspace, cwd) = validate(command)?;
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
        let mut env = base_env(&workspace);
        env.extend(command.env.iter().cloned());

        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args(&workspace, fd, &cwd, &env))
            .args(&command.argv)
            // bwrap itself needs nothing from planwright's environment either.
            .env_clear();
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

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
