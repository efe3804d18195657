//! The bubblewrap sandbox: a read-only root built from an allowlist of host folders (the
//! system's programs and libraries, a cleaned `/etc`) or from an image's unpacked root,
//! the workspace as the only writable place, private `/tmp` and `/run`, fresh `/proc` and
//! `/dev`, every namespace unshared (no network but the bridged host sockets, see
//! `relay.rs`), an unprivileged user of its own per run, and the secret paths covered up
//! where an allowed folder holds them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;

use super::carry;
use super::command::{Bridge, Command};
use super::output::Output;
use super::prepare::{full_env, stdin, validate};
use super::process;
use super::run::{Sandbox, SandboxError};
use crate::metrics::{self, SandboxRunEnd};

/// Kept at its old path for the crate's other callers.
pub(crate) use super::carry::find_on_path;

/// The user and group a command sees itself as inside the sandbox.
const INSIDE_ID: &str = "1000";

/// Where the relay program and the bridged sockets appear inside (on the private `/run`).
const INSIDE_RUN: &str = "/run/planwright";

/// Size of the private `/run`, which holds only mount points and sockets.
const RUN_BYTES: u64 = 16 << 20;

/// Host folders shown read-only at their own path: the system's programs and libraries and
/// the coding CLIs planwright installs. Home folders, `/var`, `/srv`, `/mnt`, the rest of
/// `/opt` and every socket folder stay out of the sandbox altogether, so a file there is
/// unreachable whatever its mode, and so is a Unix socket (a read-only mount would not stop
/// `connect()`).
const HOST_ROOTS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/planwright-agents",
];

/// What programs read from `/etc`: users and groups, name resolution, certificates, the
/// dynamic linker, the time zone, git's and the interpreters' own settings. The rest
/// (`shadow`, ssh host keys, package-manager credentials such as `npmrc` or `pip.conf`,
/// wherever an operator put planwright's settings) is not there.
const HOST_ETC: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "protocols",
    "services",
    "networks",
    "ssl",
    "pki",
    "crypto-policies",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "os-release",
    "lsb-release",
    "debian_version",
    "mime.types",
    "magic",
    "magic.mime",
    "gitconfig",
    "perl",
];

/// `/etc` entries of toolchains whose folder carries a version (`python3.11`,
/// `java-17-openjdk`).
const HOST_ETC_PREFIXES: &[&str] = &["python3", "java-"];

pub use super::host_users::{HOST_IDS, SANDBOX_GROUP};

/// Where root keeps one lock file per host user in use, shared by every planwright
/// process on the machine.
const LEASE_DIR: &str = "/run/planwright-sandbox-users";

/// Which host user a sandbox runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostUser {
    /// planwright's own (it is not root, so it cannot be anyone else).
    Own,
    /// A free one of these ids as the uid, held for the run, in [`SANDBOX_GROUP`].
    Range(Range<u32>),
    /// Always this uid and gid.
    Fixed(u32, u32),
}

/// Where everything in one run is shown, and the descriptors bwrap gets.
struct Layout<'a> {
    workspace: &'a Path,
    workspace_fd: RawFd,
    cwd: &'a Path,
    /// The image root to show as `/`, or `None` for the host's allowlisted folders.
    root: Option<&'a Path>,
    read_only: &'a [PathBuf],
    /// Host files brought in, by their path inside (see `carry.rs`).
    carried: &'a BTreeMap<PathBuf, PathBuf>,
    bridges: &'a [Bridge],
    /// The relay program's descriptor and the command line that starts it.
    relay: Option<(RawFd, &'a [String])>,
    seccomp_fd: Option<RawFd>,
    /// planwright's `/etc/nsswitch.conf` for an image root (see `carry::NSSWITCH_CONF`).
    nsswitch_fd: Option<RawFd>,
    tmp_bytes: u64,
}

/// The host files a run brings in, by their path inside, and the command lines that
/// start the command and the relay with them.
struct Brought {
    mounts: BTreeMap<PathBuf, PathBuf>,
    argv: Vec<String>,
    relay_launch: Option<Vec<String>>,
}

pub struct Bwrap {
    program: PathBuf,
    hidden: Vec<PathBuf>,
    host_user: HostUser,
    relay: Option<PathBuf>,
}

impl Bwrap {
    /// The host user a workspace is prepared for before its first run: the first of
    /// [`HOST_IDS`], which a run without others at the same time gets.
    pub const DEFAULT_HOST_USER: (u32, u32) = (HOST_IDS.start, SANDBOX_GROUP);

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
            host_user: if root {
                HostUser::Range(HOST_IDS)
            } else {
                HostUser::Own
            },
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

    /// The host user sandboxes run as.
    pub fn host_user(&self) -> &HostUser {
        &self.host_user
    }

    /// Runs every sandbox as this host user and group when planwright is root (ignored
    /// otherwise: then they run as planwright's own user). Its process count is what
    /// `Limits::processes` bounds, so concurrent runs are best given different users,
    /// as the default range does.
    pub fn with_host_user(mut self, uid: u32, gid: u32) -> Self {
        if self.host_user != HostUser::Own {
            self.host_user = HostUser::Fixed(uid, gid);
        }
        self
    }

    /// The arguments to bwrap, up to and including `--`.
    fn args(&self, layout: &Layout<'_>) -> Result<Vec<OsString>, SandboxError> {
        let mut args = isolation_args();
        let hidden: Vec<PathBuf> = self
            .hidden
            .iter()
            .filter_map(|h| h.canonicalize().ok())
            .collect();
        let shown = match layout.root {
            None => host_root(&hidden, &mut args),
            Some(dir) => {
                show_image_root(dir, layout, &mut args)?;
                Vec::new()
            }
        };
        memory_mounts(layout.tmp_bytes, &mut args);
        let visible: Vec<&Path> = shown
            .iter()
            .map(PathBuf::as_path)
            .chain(layout.read_only.iter().map(PathBuf::as_path))
            .chain(layout.carried.values().map(PathBuf::as_path))
            .chain([layout.workspace])
            .collect();
        let folder_covers = cover_hidden(&hidden, &visible, &mut args);
        run_mounts(layout, &mut args);
        // Last, once the mount points in them exist: the root itself (a tmpfs bubblewrap
        // made to hold the mounts above), /dev and the covers over hidden folders are
        // memory too, and must not become places to write.
        for cover in folder_covers {
            args.extend(["--remount-ro".into(), cover.into_os_string()]);
        }
        args.extend([
            "--remount-ro".into(),
            "/dev".into(),
            "--remount-ro".into(),
            "/".into(),
        ]);
        if let Some(fd) = layout.seccomp_fd {
            args.extend(["--seccomp".into(), fd.to_string().into()]);
        }
        args.push("--".into());
        if let Some((_, launch)) = layout.relay {
            relay_command(layout.workspace, layout.bridges, launch, &mut args);
        }
        Ok(args)
    }

    /// The root folder as a real path; one that would show a hidden path (being it, or
    /// holding it) is refused.
    fn check_root(&self, dir: &Path) -> Result<PathBuf, SandboxError> {
        let real = dir.canonicalize().map_err(|e| {
            SandboxError::InvalidCommand(format!(
                "the root folder {} cannot be opened: {e}",
                dir.display()
            ))
        })?;
        if !real.is_dir() {
            return Err(SandboxError::InvalidCommand(format!(
                "the root folder {} is not a folder",
                dir.display()
            )));
        }
        if self
            .hidden
            .iter()
            .filter_map(|h| h.canonicalize().ok())
            .any(|h| h.starts_with(&real))
        {
            return Err(SandboxError::InvalidCommand(format!(
                "cannot use {} as the root: it holds a path that must stay hidden",
                dir.display()
            )));
        }
        // Through a symlinked /etc, the image's /etc/ld.so.preload would be another path
        // in the root, out of reach of the keep-out by name (see `args`).
        if let Ok(meta) = std::fs::symlink_metadata(real.join("etc"))
            && !meta.is_dir()
        {
            return Err(SandboxError::InvalidCommand(format!(
                "cannot use {} as the root: its etc is not a folder (a symlink?); an image \
                 needs a real /etc, so that what its /etc/ld.so.preload names never loads \
                 into planwright's programs",
                dir.display()
            )));
        }
        Ok(real)
    }

    /// What planwright brings in from the host for this command (see `carry.rs`): the
    /// command's own program when it is a host one, the static programs it starts, and
    /// the relay's loader and libraries.
    fn carried(&self, command: &Command, relay: Option<&Path>) -> Result<Brought, SandboxError> {
        let invalid = |e: anyhow::Error| SandboxError::InvalidCommand(format!("{e:#}"));
        let mut brought = carry::Carried::default();
        let mut argv = command.argv.clone();
        if command.from_host {
            let program = carry::program(Path::new(&command.argv[0])).map_err(invalid)?;
            argv.splice(..1, program.argv.iter().cloned());
            brought.merge_mounts(program).map_err(invalid)?;
        }
        for path in &command.carry {
            let (inside, host) = carry::static_program(path).map_err(invalid)?;
            brought.mount(inside, host).map_err(invalid)?;
        }
        let relay_launch = match relay {
            Some(path) => {
                let relay = carry::executable(path, &format!("{INSIDE_RUN}/relay"))
                    .map_err(|e| SandboxError::Unavailable(format!("{e:#}")))?;
                let launch = relay.argv.clone();
                brought.merge_mounts(relay).map_err(invalid)?;
                Some(launch)
            }
            None => None,
        };
        let mounts = brought.mounts;
        let hidden: Vec<PathBuf> = self
            .hidden
            .iter()
            .filter_map(|h| h.canonicalize().ok())
            .collect();
        for host in mounts.values() {
            if hidden
                .iter()
                .any(|h| h.starts_with(host) || host.starts_with(h))
            {
                return Err(SandboxError::InvalidCommand(format!(
                    "cannot bring {} into the sandbox: it is or holds a path that must stay \
                     hidden",
                    host.display()
                )));
            }
        }
        Ok(Brought {
            mounts,
            argv,
            relay_launch,
        })
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
    fn check_bridges(
        &self,
        bridges: &[Bridge],
        user: Option<(u32, u32)>,
    ) -> Result<Option<PathBuf>, SandboxError> {
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
        if let Some((uid, gid)) = user {
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

/// The namespaces, user and capabilities every run gets: all unshared, no capability.
fn isolation_args() -> Vec<OsString> {
    [
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
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// Shows the image root `dir` as `/`, keeping out what it must not cover, with
/// planwright's `nsswitch.conf`.
fn show_image_root(
    dir: &Path,
    layout: &Layout<'_>,
    args: &mut Vec<OsString>,
) -> Result<(), SandboxError> {
    let mut keep_out: Vec<&Path> = [layout.workspace, Path::new(carry::PREFIX)]
        .into_iter()
        .chain(layout.read_only.iter().map(PathBuf::as_path))
        .collect();
    // The host's loader, which starts planwright's pieces, would load what an
    // image's preload file names into them, before the relay confines itself.
    // Kept out by its path inside, which `check_root` made sure goes through a
    // real /etc of the image's (or none).
    keep_out.push(Path::new("/etc/ld.so.preload"));
    // Its sources are libraries the carried programs would load by name.
    keep_out.push(Path::new("/etc/nsswitch.conf"));
    image_root(dir, &keep_out, args)?;
    let fd = layout
        .nsswitch_fd
        .context("An image root needs planwright's nsswitch.conf")?;
    args.extend([
        "--perms".into(),
        "0444".into(),
        "--ro-bind-data".into(),
        fd.to_string().into(),
        "/etc/nsswitch.conf".into(),
    ]);
    Ok(())
}

/// Mounts what the run itself needs: its workspace (where it starts), the read-only
/// folders, the host files it brings in and its bridges.
fn run_mounts(layout: &Layout<'_>, args: &mut Vec<OsString>) {
    // After the covers, so a workspace inside DATA_DIR is visible and nothing else
    // there, and after the private /tmp and /run, so a workspace under one of them
    // (DATA_DIR in /tmp, say) is shown over the run's own. Bound from a descriptor opened by planwright, so it is the folder
    // checked above; bubblewrap (0.8) still resolves that descriptor's path, so the
    // unprivileged host user must be able to walk down to the workspace (checked
    // before the run, see `unreachable_parent`).
    args.extend([
        "--bind-fd".into(),
        layout.workspace_fd.to_string().into(),
        layout.workspace.as_os_str().to_owned(),
        "--chdir".into(),
        layout.cwd.as_os_str().to_owned(),
    ]);
    for path in layout.read_only {
        args.extend([
            "--ro-bind".into(),
            path.as_os_str().to_owned(),
            path.as_os_str().to_owned(),
        ]);
    }
    for (inside, host) in layout.carried {
        args.extend([
            "--ro-bind".into(),
            host.as_os_str().to_owned(),
            inside.as_os_str().to_owned(),
        ]);
    }
    // `relay` is set exactly when there are bridges (see `check_bridges`).
    if let Some((fd, _)) = layout.relay {
        relay_mounts(fd, layout.bridges, args);
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
        let outcome = match &result {
            Ok(out) if out.timed_out => SandboxRunEnd::Timeout,
            Ok(out) if out.exit.success() => SandboxRunEnd::Ok,
            Ok(_) => SandboxRunEnd::Failed,
            Err(_) => SandboxRunEnd::Error,
        };
        metrics::record_sandbox_run(outcome, started.elapsed());
        result
    }
}

impl Bwrap {
    async fn run_uncounted(&self, command: &Command) -> Result<Output, SandboxError> {
        let (workspace, cwd) = validate(command)?;
        // Held until the run ends: no other run gets this host user meanwhile.
        let lease = self.lease_user().await?;
        let user = lease.as_ref().map(|(uid, gid, _)| (*uid, *gid));
        let shown = self.check_shown(command, workspace, user)?;
        if let Some((uid, gid)) = user {
            shown.check_reachable(command, uid, gid)?;
            let ws = shown.workspace.clone();
            tokio::task::spawn_blocking(move || chown_tree(&ws, uid, gid))
                .await
                .context("The ownership task failed")??;
        }
        let fds = Descriptors::open(&shown)?;
        let layout = Layout {
            workspace: &shown.workspace,
            workspace_fd: fds.dir.as_raw_fd(),
            cwd: &cwd,
            root: shown.root.as_deref(),
            read_only: &shown.read_only,
            carried: &shown.brought.mounts,
            bridges: &command.bridges,
            relay: fds
                .relay
                .as_ref()
                .map(AsRawFd::as_raw_fd)
                .zip(shown.brought.relay_launch.as_deref()),
            seccomp_fd: fds.seccomp.as_ref().map(AsRawFd::as_raw_fd),
            nsswitch_fd: fds.nsswitch.as_ref().map(AsRawFd::as_raw_fd),
            tmp_bytes: command.limits.tmp_bytes,
        };
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args(&layout)?)
            .args(&shown.brought.argv)
            // Nothing of planwright's environment: bwrap passes on exactly this.
            .env_clear()
            .envs(full_env(&shown.workspace, command))
            .stdin(stdin(command)?);
        if let Some((uid, gid)) = user {
            // std drops supplementary groups as well when root changes uid.
            cmd.uid(uid).gid(gid);
        }
        let group = run_group(&command.limits);
        let join = group
            .as_ref()
            .map(super::cgroup::RunGroup::join_fds)
            .unwrap_or_default();
        let finished = process::run(
            cmd,
            &command.limits,
            command.spill_dir.as_deref(),
            &fds.keep(),
            &join,
        )
        .await;
        if let Some(group) = group {
            group.remove().await;
        }
        let finished = finished?;
        drop((fds, lease));
        Ok(finished.into_output(true))
    }

    /// The host user a run gets, as `(uid, gid, lease)`: `None` to run as planwright's
    /// own; from a range, leased until the lease is dropped.
    async fn lease_user(&self) -> Result<Option<(u32, u32, Option<Lease>)>, SandboxError> {
        Ok(match &self.host_user {
            HostUser::Own => None,
            HostUser::Fixed(uid, gid) => Some((*uid, *gid, None)),
            HostUser::Range(range) => {
                let range = range.clone();
                let lease = tokio::task::spawn_blocking(move || lease_host_user(range))
                    .await
                    .context("The host user task failed")??;
                Some((lease.id, SANDBOX_GROUP, Some(lease)))
            }
        })
    }

    /// Checks what the run shows inside (bridges, read-only folders, the image root and
    /// the host files it brings in) and answers their real paths.
    fn check_shown(
        &self,
        command: &Command,
        workspace: PathBuf,
        user: Option<(u32, u32)>,
    ) -> Result<Shown, SandboxError> {
        let relay = self.check_bridges(&command.bridges, user)?;
        let read_only = self.check_read_only(&command.read_only)?;
        let root = command
            .root
            .as_ref()
            .map(|r| self.check_root(&r.dir))
            .transpose()?;
        let brought = self.carried(command, relay.as_deref())?;
        Ok(Shown {
            workspace,
            relay,
            read_only,
            root,
            brought,
        })
    }
}

/// The host paths one run shows inside, checked.
struct Shown {
    workspace: PathBuf,
    /// The relay program, when the run has bridges.
    relay: Option<PathBuf>,
    read_only: Vec<PathBuf>,
    root: Option<PathBuf>,
    brought: Brought,
}

impl Shown {
    /// An error naming the first path the sandbox user `uid` cannot reach because a
    /// folder above it is closed to it.
    fn check_reachable(&self, command: &Command, uid: u32, gid: u32) -> Result<(), SandboxError> {
        for (path, what) in std::iter::once((&self.workspace, "workspace"))
            .chain(self.read_only.iter().map(|p| (p, "read-only folder")))
            .chain(self.root.iter().map(|p| (p, "root folder")))
            .chain(
                self.brought
                    .mounts
                    .values()
                    .map(|p| (p, "host program or library")),
            )
            .chain(command.bridges.iter().map(|b| (&b.socket, "bridge socket")))
        {
            if let Some((dir, mode)) = unreachable_parent(path, uid, gid) {
                return Err(SandboxError::InvalidCommand(format!(
                    "the sandbox user (uid {uid}) cannot reach the {what} {}: {} (mode \
                     {mode:04o}) is closed to it; make that folder searchable by others \
                     (chmod o+x {}) or use a {what} outside it",
                    path.display(),
                    dir.display(),
                    dir.display()
                )));
            }
        }
        Ok(())
    }
}

/// The descriptors bwrap is given: the workspace opened as a path, the relay program,
/// the seccomp filter and, for an image root, planwright's `nsswitch.conf`. Held open
/// until the run ends.
struct Descriptors {
    dir: std::fs::File,
    relay: Option<std::fs::File>,
    seccomp: Option<std::os::fd::OwnedFd>,
    nsswitch: Option<std::fs::File>,
}

impl Descriptors {
    fn open(shown: &Shown) -> Result<Descriptors, SandboxError> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&shown.workspace)
            .with_context(|| format!("Could not open {}", shown.workspace.display()))?;
        let relay = shown
            .relay
            .as_deref()
            .map(|path| {
                std::fs::File::open(path)
                    .with_context(|| format!("Could not open the relay program {}", path.display()))
            })
            .transpose()?;
        let seccomp = super::seccomp::descriptor()?;
        let nsswitch = shown
            .root
            .as_ref()
            .map(|_| memory_file(c"planwright-nsswitch", carry::NSSWITCH_CONF.as_bytes()))
            .transpose()?;
        Ok(Descriptors {
            dir,
            relay,
            seccomp,
            nsswitch,
        })
    }

    /// The descriptors the sandbox's process keeps open.
    fn keep(&self) -> Vec<RawFd> {
        let mut keep = vec![self.dir.as_raw_fd()];
        keep.extend(self.relay.as_ref().map(AsRawFd::as_raw_fd));
        keep.extend(self.seccomp.as_ref().map(AsRawFd::as_raw_fd));
        keep.extend(self.nsswitch.as_ref().map(AsRawFd::as_raw_fd));
        keep
    }
}

/// A control group holding the run to its memory and process limits, when one can be
/// made.
fn run_group(limits: &super::command::Limits) -> Option<super::cgroup::RunGroup> {
    match super::cgroup::RunGroup::create(limits.run_memory_bytes, limits.processes) {
        Ok(group) => Some(group),
        Err(e) => {
            // `planwright doctor` reports this once; the rlimits still hold.
            tracing::debug!("Running the sandbox without a control group: {e:#}");
            None
        }
    }
}

/// A file in memory holding `bytes`, read from its start, for bubblewrap to copy into the
/// sandbox.
fn memory_file(name: &std::ffi::CStr, bytes: &[u8]) -> anyhow::Result<std::fs::File> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and valid flags; the result is checked below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("Could not create a memory file");
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes)
        .and_then(|()| file.rewind())
        .context("Could not write a memory file")?;
    Ok(file)
}

/// Every place a command can write that is memory, not disk, has a size: /tmp and
/// /dev/shm the run's limit, /run room for mount points and sockets only, and /dev itself
/// none (it is made read-only at the end; its devices stay usable).
fn memory_mounts(tmp_bytes: u64, args: &mut Vec<OsString>) {
    args.extend([
        "--dev".into(),
        "/dev".into(),
        "--size".into(),
        tmp_bytes.to_string().into(),
        "--tmpfs".into(),
        "/dev/shm".into(),
        "--proc".into(),
        "/proc".into(),
        "--size".into(),
        tmp_bytes.to_string().into(),
        "--tmpfs".into(),
        "/tmp".into(),
        // A private /run: nothing of the host's, and room for the relay and bridges.
        "--size".into(),
        RUN_BYTES.to_string().into(),
        "--tmpfs".into(),
        "/run".into(),
    ]);
}

/// Covers each hidden path that a `visible` folder holds; returns the covered folders,
/// which are remounted read-only once every mount is made.
fn cover_hidden(hidden: &[PathBuf], visible: &[&Path], args: &mut Vec<OsString>) -> Vec<PathBuf> {
    let mut folder_covers = Vec::new();
    for real in hidden {
        // Covering the real location hides it under every name. Only what a shown
        // folder holds needs a cover; anything else is not in the sandbox at all,
        // and a cover would give its name away.
        if !visible.iter().any(|v| real.starts_with(v)) {
            continue;
        }
        if real.is_dir() {
            args.extend(["--tmpfs".into(), real.clone().into_os_string()]);
            folder_covers.push(real.clone());
        } else {
            args.extend([
                "--ro-bind".into(),
                "/dev/null".into(),
                real.clone().into_os_string(),
            ]);
        }
    }
    folder_covers
}

/// The relay and the bridged sockets on the private `/run`. The relay comes in by
/// content, copied from a descriptor planwright opened, so the sandbox user need not
/// reach wherever the executable is installed.
fn relay_mounts(relay_fd: RawFd, bridges: &[Bridge], args: &mut Vec<OsString>) {
    args.extend([
        "--perms".into(),
        "0555".into(),
        "--ro-bind-data".into(),
        relay_fd.to_string().into(),
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

/// The relay listens on the bridged ports, then becomes the command (relay.rs). It starts
/// through `launch`, the host's loader (see `carry.rs`), so it runs in any root.
fn relay_command(
    workspace: &Path,
    bridges: &[Bridge],
    launch: &[String],
    args: &mut Vec<OsString>,
) {
    args.extend(launch.iter().map(OsString::from));
    args.extend(["sandbox".into(), "relay".into()]);
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

/// Top-level folders of an image root that are never the image's: each run gets fresh ones.
const FRESH: &[&str] = &["dev", "proc", "tmp", "run"];

/// Shows the image root `dir` read-only as `/`, entry by entry on bubblewrap's own root,
/// so that mount points (`keep_out`: the workspace, read-only folders, planwright's
/// prefix) can be made without writing in the image, which many runs share. A folder on
/// the way to one is made afresh and its other entries shown; the mount point itself, and
/// a symlink or file in its way, are not the image's.
fn image_root(
    dir: &Path,
    keep_out: &[&Path],
    args: &mut Vec<OsString>,
) -> Result<(), SandboxError> {
    let mut stack = vec![PathBuf::from("/")];
    while let Some(inside) = stack.pop() {
        let host = dir.join(inside.strip_prefix("/").unwrap_or(&inside));
        let mut names: Vec<OsString> = std::fs::read_dir(&host)
            .with_context(|| format!("Could not list {}", host.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("Could not list {}", host.display()))?;
        names.sort();
        for name in names {
            let path = inside.join(&name);
            if (inside == Path::new("/") && FRESH.iter().any(|f| name == *f))
                || keep_out.contains(&path.as_path())
            {
                continue;
            }
            let source = host.join(&name);
            let meta = std::fs::symlink_metadata(&source)
                .with_context(|| format!("Could not inspect {}", source.display()))?;
            if keep_out.iter().any(|k| k.starts_with(&path)) {
                if meta.is_dir() {
                    args.extend(["--dir".into(), path.clone().into_os_string()]);
                    stack.push(path);
                }
                continue;
            }
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&source)
                    .with_context(|| format!("Could not read {}", source.display()))?;
                args.extend(["--symlink".into(), target.into_os_string(), path.into()]);
            } else if meta.is_dir() || meta.is_file() {
                args.extend(["--ro-bind".into(), source.into_os_string(), path.into()]);
            }
            // Sockets, fifos and devices are not shown: an image has no use for them.
        }
    }
    Ok(())
}

/// Mounts the allowlisted host folders and `/etc` entries into `args`; returns the real
/// host paths now visible. Top-level symlinks (`/bin -> usr/bin` on merged-/usr systems)
/// stay symlinks; nothing that is or holds a hidden path is shown.
fn host_root(hidden: &[PathBuf], args: &mut Vec<OsString>) -> Vec<PathBuf> {
    let mut shown = Vec::new();
    let conceals = |real: &Path| {
        hidden.iter().any(|h| h.starts_with(real) && h != real)
            || hidden.iter().any(|h| real.starts_with(h))
    };
    for root in HOST_ROOTS {
        let path = Path::new(root);
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(path) {
                args.extend(["--symlink".into(), target.into_os_string(), path.into()]);
            }
        } else if meta.is_dir() {
            // A hidden path inside gets its cover later; only the folder itself being
            // hidden keeps it out.
            if hidden.iter().any(|h| path.starts_with(h)) {
                continue;
            }
            args.extend(["--ro-bind".into(), path.into(), path.into()]);
            shown.push(path.to_path_buf());
        }
    }
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return shown;
    };
    let mut names: Vec<OsString> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|name| {
            let name = name.to_string_lossy();
            HOST_ETC.contains(&name.as_ref())
                || HOST_ETC_PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .collect();
    names.sort();
    for name in names {
        let path = Path::new("/etc").join(&name);
        // A symlink (`localtime`, `os-release`) is shown with what it points to, and only
        // when that is itself a place the sandbox may see.
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        let allowed = real.starts_with("/etc")
            || shown.iter().any(|s| real.starts_with(s))
            || HOST_ROOTS.iter().any(|r| real.starts_with(r));
        // A cover at the real path would not cover this second name of it.
        if !allowed || (real != path && conceals(&real)) {
            continue;
        }
        args.extend(["--ro-bind".into(), real.clone().into(), path.into()]);
        shown.push(real);
    }
    shown
}

/// The first folder above `path` (or `path` itself, for what must be listed) that the
/// host user `uid`/`gid` cannot search, with its mode. bubblewrap resolves every mount
/// source as that user, and would only say "Permission denied" about a descriptor.
fn unreachable_parent(path: &Path, uid: u32, gid: u32) -> Option<(PathBuf, u32)> {
    path.ancestors().skip(1).find_map(|dir| {
        let meta = std::fs::metadata(dir).ok()?;
        let mode = meta.mode() & 0o7777;
        let bit = if meta.uid() == uid {
            0o100
        } else if meta.gid() == gid {
            0o010
        } else {
            0o001
        };
        (mode & bit == 0).then(|| (dir.to_path_buf(), mode))
    })
}

/// One host user of [`HOST_IDS`] held for a run.
struct Lease {
    id: u32,
    // The lock lasts as long as this descriptor.
    _lock: std::fs::File,
}

/// Takes the first id of `range` no other run on this machine holds, by an exclusive
/// lock on its file in [`LEASE_DIR`] (released by the kernel however the holder ends).
fn lease_host_user(range: Range<u32>) -> Result<Lease, SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = Path::new(LEASE_DIR);
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(SandboxError::Unavailable(format!(
                "Could not create {LEASE_DIR}, where planwright keeps the sandbox users it \
                 hands out: {e}"
            )));
        }
    }
    // Anyone who could write there could hold every id, or swap a lock file for a link.
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("Could not inspect {LEASE_DIR}"))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(SandboxError::Unavailable(format!(
            "{LEASE_DIR} must be a folder owned by root and writable by root only; remove it \
             and planwright creates it again"
        )));
    }
    for id in range.clone() {
        let path = dir.join(id.to_string());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("Could not open {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Lease { id, _lock: file });
        }
    }
    Err(SandboxError::Unavailable(format!(
        "every sandbox user (uids {} to {}) is in use by a run",
        range.start,
        range.end - 1
    )))
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
