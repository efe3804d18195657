//! Where model-written code runs: the [`Sandbox`] trait, what a run asks for ([`Command`],
//! the [`Root`] it sees as `/`, [`Limits`], [`Bridge`]s to host sockets) and what it gives
//! back ([`Output`]). bubblewrap
//! (`bwrap.rs`) is the real implementation; [`Unsandboxed`] exists only for operators who
//! opt out explicitly.

pub mod bwrap;
pub mod carry;
pub mod cgroup;
pub mod egress;
pub mod landlock;
mod process;
pub mod relay;
mod seccomp;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use secrecy::SecretString;

use crate::config::Settings;

pub use bwrap::Bwrap;

/// One command to run in a workspace.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program and its arguments; the program is looked up on the sandbox's `PATH`,
    /// unless `from_host` says it is a host program.
    pub argv: Vec<String>,
    /// `argv[0]` is a program on the host (planwright's own, such as a coding CLI),
    /// brought in read-only with its loader and libraries so that it runs in any root
    /// (see `carry.rs`), rather than one of the root's own.
    pub from_host: bool,
    /// Statically linked host programs the command starts by path, shown read-only at
    /// `/.planwright/bin/NAME` in any root (see `carry::static_program`).
    pub carry: Vec<PathBuf>,
    /// The sandbox's `/`: an image's unpacked root, or `None` for the host's own
    /// programs and libraries.
    pub root: Option<Root>,
    /// A file (usually inside the workspace) the command reads as its stdin; `None`:
    /// an empty stdin.
    pub stdin: Option<PathBuf>,
    /// The writable folder the command works in; everything else is read-only or hidden.
    pub workspace: PathBuf,
    /// Working directory relative to the workspace (`None`: the workspace itself).
    pub cwd: Option<PathBuf>,
    /// Variables added to the fixed allowlist (see [`base_env`]); nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Variables whose values must not show in logs, such as the model proxy's capability
    /// token. They reach the command through the environment only, never through argv.
    pub secret_env: Vec<(String, SecretString)>,
    /// Loopback ports inside the sandbox that lead to Unix sockets on the host; the only
    /// way out of a sandbox's network namespace.
    pub bridges: Vec<Bridge>,
    /// Folders shown read-only at their own path even inside a hidden one: a workspace's
    /// history lives in the mirror cache under `DATA_DIR` (see `Workspace::command`).
    /// A folder that holds a hidden path is refused.
    pub read_only: Vec<PathBuf>,
    pub limits: Limits,
    /// Where output beyond the cap is kept (`stdout.log`, `stderr.log`); usually the run's
    /// log folder beside the workspace. `None`: the excess is only counted.
    pub spill_dir: Option<PathBuf>,
}

impl Command {
    pub fn new(workspace: impl Into<PathBuf>, argv: Vec<String>) -> Self {
        Command {
            argv,
            from_host: false,
            carry: Vec::new(),
            root: None,
            stdin: None,
            workspace: workspace.into(),
            cwd: None,
            env: Vec::new(),
            secret_env: Vec::new(),
            bridges: Vec::new(),
            read_only: Vec::new(),
            limits: Limits::default(),
            spill_dir: None,
        }
    }

    /// Gives the command the model proxy listening on `socket` as
    /// `http://127.0.0.1:`[`MODEL_PROXY_PORT`], where the Anthropic and OpenAI clients look
    /// for it, with `token` (the run's capability token, never a provider key) as their key.
    pub fn bridge_model_proxy(&mut self, socket: impl Into<PathBuf>, token: SecretString) {
        let base = format!("http://127.0.0.1:{MODEL_PROXY_PORT}");
        self.bridges.push(Bridge {
            port: MODEL_PROXY_PORT,
            socket: socket.into(),
        });
        self.env.push(("ANTHROPIC_BASE_URL".into(), base.clone()));
        // OpenAI clients append `/chat/completions` or `/responses` to the base URL.
        self.env
            .push(("OPENAI_BASE_URL".into(), format!("{base}/v1")));
        self.secret_env
            .push(("ANTHROPIC_API_KEY".into(), token.clone()));
        self.secret_env.push(("OPENAI_API_KEY".into(), token));
    }

    /// Sends the command's HTTP(S) traffic to the egress proxy listening on `socket` (see
    /// [`egress::EgressProxy`]), under every name package managers read.
    pub fn bridge_egress_proxy(&mut self, socket: impl Into<PathBuf>) {
        let url = format!("http://127.0.0.1:{}", egress::PORT);
        self.bridges.push(Bridge {
            port: egress::PORT,
            socket: socket.into(),
        });
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            self.env.push((name.into(), url.clone()));
        }
    }
}

/// A folder shown read-only as a sandbox's `/` in place of the host's, such as an OCI
/// image's unpacked root file system, with the variables its image configuration sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub dir: PathBuf,
    /// The image's `Env`: they come first, under the fixed allowlist and the command's
    /// own variables, and its `PATH` leads the sandbox's. Those that would steer
    /// planwright's own programs run in the root (the host's loader, the relay, the coding
    /// CLIs: [`STEERING_ENV`]) are dropped.
    pub env: Vec<(String, String)>,
}

impl Root {
    /// A root with no variables of its own.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root {
            dir: dir.into(),
            env: Vec::new(),
        }
    }
}

/// Lets sandboxes, and no other user, connect to the host socket at `path`: as root they
/// run in [`bwrap::SANDBOX_GROUP`], which gets the socket with mode 0660; otherwise they
/// run as planwright's own user, the owner, and the mode is 0600.
pub fn open_to_sandboxes(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let mode = if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(path, None, Some(bwrap::SANDBOX_GROUP))?;
        0o660
    } else {
        0o600
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The loopback port the model proxy appears on inside a sandbox.
pub const MODEL_PROXY_PORT: u16 = 8089;

/// `127.0.0.1:port` inside the sandbox leads to the Unix socket `socket` on the host. The
/// socket is mounted into the sandbox, so its folders must be searchable and the socket
/// itself writable by the sandbox's host user (mode 0666 does both for the socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    pub port: u16,
    pub socket: PathBuf,
}

/// Resource limits of one run. Kernel limits (rlimits) apply to each process inside; the
/// process count is per host user (see `Bwrap::host_user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time before the whole process tree is killed.
    pub wall: Duration,
    /// CPU seconds per process (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Address space per process in bytes (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Processes of the host user (`RLIMIT_NPROC`), and of the run's control group
    /// where there is one.
    pub processes: u64,
    /// Memory of the whole run, its tmpfs files included, where it has a control group
    /// of its own (see `cgroup.rs`).
    pub run_memory_bytes: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub file_size_bytes: u64,
    /// Size of each of the sandbox's memory-backed folders, `/tmp` and `/dev/shm` (what
    /// is written there is host memory).
    pub tmp_bytes: u64,
    /// Bytes of each of stdout and stderr kept in memory.
    pub output_bytes: usize,
    /// Bytes of each stream kept in the spill file; the rest is only counted.
    pub spill_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall: Duration::from_secs(30 * 60),
            cpu_seconds: 30 * 60,
            memory_bytes: 8 << 30,
            processes: 512,
            run_memory_bytes: 8 << 30,
            file_size_bytes: 1 << 30,
            tmp_bytes: 1 << 30,
            output_bytes: 1 << 20,
            spill_bytes: 64 << 20,
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Killed by this signal. bwrap reports a signal as exit code 128 + N, as shells do,
    /// so a command that itself exits with such a code reads as a signal too.
    Signal(i32),
}

impl Exit {
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

/// One output stream, kept up to the cap.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// The first bytes of the stream, at most `Limits::output_bytes`.
    pub bytes: Vec<u8>,
    /// Bytes the command wrote in all.
    pub total: u64,
    /// The file holding the stream past the cap (from its start), when one was written.
    pub spilled: Option<PathBuf>,
}

impl Captured {
    /// Bytes not kept in memory.
    pub fn dropped(&self) -> u64 {
        self.total.saturating_sub(self.bytes.len() as u64)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

#[derive(Debug, Clone)]
pub struct Output {
    pub exit: Exit,
    /// The wall-clock limit was reached and every process of the run was killed.
    pub timed_out: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

impl Output {
    /// How the command ended, in the words a model or a log reads: its exit code, the
    /// signal that killed it, or the wall-clock limit it reached (`wall`).
    pub fn status_text(&self, wall: Duration) -> String {
        if self.timed_out {
            format!("timed out after {}s and was killed", wall.as_secs())
        } else {
            match self.exit {
                Exit::Code(code) => format!("exit code {code}"),
                Exit::Signal(signal) => format!("killed by signal {signal}"),
            }
        }
    }

    /// Why the command never ran, if it did not: bubblewrap prints `bwrap: …` and exits
    /// 1 when it cannot set the sandbox up (a folder it cannot reach, a namespace the
    /// host refuses), and a shell exits 126 or 127 when the program cannot be executed
    /// or is not there.
    pub fn not_started(&self) -> Option<String> {
        let stderr = self.stderr.text();
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        match self.exit {
            Exit::Code(1) if self.stdout.total == 0 && first.starts_with("bwrap: ") => {
                Some(format!("the sandbox could not start it ({})", first.trim()))
            }
            Exit::Code(126) => Some("its program could not be executed (exit 126)".to_owned()),
            Exit::Code(127) => Some("its program was not found (exit 127)".to_owned()),
            _ => None,
        }
    }
}

/// Failures a caller branches on: a missing sandbox is the operator's to fix, a bad
/// command is the caller's; anything else is internal.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("The sandbox is not available here: {0}")]
    Unavailable(String),
    #[error("Cannot run this command: {0}")]
    InvalidCommand(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The setting value that selects this sandbox (`bwrap`, `none`).
    fn name(&self) -> &'static str;
    async fn run(&self, command: &Command) -> Result<Output, SandboxError>;
}

/// The sandbox the settings ask for; `DATA_DIR` and the files holding secrets are always
/// hidden from it.
pub fn from_settings(settings: &Settings) -> Result<Box<dyn Sandbox>, SandboxError> {
    match settings.sandbox.as_str() {
        "none" if settings.unsafe_no_sandbox => Ok(Box::new(Unsandboxed::new(true)?)),
        _ => {
            let bwrap = Bwrap::new(hidden_paths(settings))?;
            Ok(Box::new(match &settings.sandbox_relay {
                Some(program) => bwrap.with_relay_program(program),
                None => bwrap,
            }))
        }
    }
}

/// Starts `true` in `sandbox` with a workspace under `scratch` (and, with `bridge`, a
/// bridged Unix socket): whether this host can run sandboxed commands at all, and if not
/// what the sandbox said. `doctor` asks it, and a worker before it takes runs.
pub async fn run_true(sandbox: &dyn Sandbox, scratch: &Path, bridge: bool) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let workspace = scratch.join("workspace");
    std::fs::create_dir_all(&workspace)
        .map_err(|e| format!("Could not create {}: {e}", workspace.display()))?;
    for dir in [scratch, &workspace] {
        // Sandboxes run as another user; it must be able to reach the folder.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("Could not open {} to the sandbox: {e}", dir.display()))?;
    }
    let mut command = Command::new(&workspace, vec!["true".into()]);
    command.limits.wall = Duration::from_secs(60);
    let _listener = if bridge {
        let socket = scratch.join("bridge.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = crate::unix_socket::bind(&socket)
            .map_err(|e| format!("Could not listen on {}: {e}", socket.display()))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("Could not open {} to the sandbox: {e}", socket.display()))?;
        command.bridges.push(Bridge { port: 9999, socket });
        Some(listener)
    } else {
        None
    };
    match sandbox.run(&command).await {
        Ok(out) if out.exit.success() => Ok(()),
        Ok(out) => Err(format!(
            "bubblewrap could not start a command ({:?}): {}",
            out.exit,
            out.stderr.text().trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// What a sandbox must never show: `DATA_DIR` and the files the settings name.
pub fn hidden_paths(settings: &Settings) -> Vec<PathBuf> {
    std::iter::once(settings.data_dir.clone())
        .chain(settings.secret_files.iter().cloned())
        .collect()
}

/// Variables of an image's `Env` that are never passed on: each would load code into, or
/// change the endpoints of, the host programs planwright carries into the root (by
/// exact name, then by prefix).
pub const STEERING_ENV: (&[&str], &[&str]) = (
    &[
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_DEBUG_OUTPUT",
        "LD_PROFILE",
        "GLIBC_TUNABLES",
        "GCONV_PATH",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "NODE_OPTIONS",
        "NODE_PATH",
        "NODE_EXTRA_CA_CERTS",
        "BASH_ENV",
        "ENV",
    ],
    &["CLAUDE_", "ANTHROPIC_", "CODEX_", "OPENAI_"],
);

fn steers(name: &str) -> bool {
    let (names, prefixes) = STEERING_ENV;
    names.contains(&name) || prefixes.iter().any(|p| name.starts_with(p))
}

/// The whole environment of a command: the base, the caller's variables, then the secret
/// ones (exposed here only to be handed to the process).
fn full_env(workspace: &Path, command: &Command) -> Vec<(String, String)> {
    use secrecy::ExposeSecret;
    let image = command
        .root
        .as_ref()
        .map(|r| r.env.as_slice())
        .unwrap_or_default();
    let mut env: Vec<(String, String)> =
        image.iter().filter(|(k, _)| !steers(k)).cloned().collect();
    for (name, value) in base_env(workspace) {
        // Later entries win: the allowlist's, except that the image's PATH comes first.
        let value = match image.iter().rev().find(|(k, _)| k == "PATH") {
            Some((_, first)) if name == "PATH" => format!("{first}:{value}"),
            _ => value,
        };
        env.push((name, value));
    }
    env.extend(command.env.iter().cloned());
    env.extend(
        command
            .secret_env
            .iter()
            .map(|(k, v)| (k.clone(), v.expose_secret().to_owned())),
    );
    env
}

/// The environment every sandboxed command starts from: nothing of planwright's own.
pub fn base_env(workspace: &Path) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), workspace.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TERM".into(), "dumb".into()),
        // Without it, bash looks the user's shell up in the user database.
        ("SHELL".into(), "/bin/sh".into()),
        // Python reuses a cached `.pyc` whose source has the same size and mtime second:
        // an edit made soon after a run could then be tested as the code before it.
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ]
}

/// The command's stdin: its file, opened by planwright (never through a symlink in its
/// last component, which the sandbox could have planted), or nothing.
fn stdin(command: &Command) -> Result<std::process::Stdio, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = &command.stdin else {
        return Ok(std::process::Stdio::null());
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            SandboxError::InvalidCommand(format!(
                "the stdin file {} cannot be opened: {e}",
                path.display()
            ))
        })?;
    Ok(file.into())
}

/// Checks what every implementation relies on, and returns the absolute workspace and
/// working directory.
fn validate(command: &Command) -> Result<(PathBuf, PathBuf), SandboxError> {
    if command.argv.is_empty() {
        return Err(SandboxError::InvalidCommand("no program given".into()));
    }
    let workspace = command.workspace.canonicalize().map_err(|e| {
        SandboxError::InvalidCommand(format!(
            "the workspace {} cannot be opened: {e}",
            command.workspace.display()
        ))
    })?;
    if !workspace.is_dir() {
        return Err(SandboxError::InvalidCommand(format!(
            "the workspace {} is not a folder",
            workspace.display()
        )));
    }
    let cwd = match &command.cwd {
        None => workspace.clone(),
        // Only plain relative components: `..` or an absolute path would start the
        // command outside the one folder it may write.
        Some(rel) if rel.components().all(|c| matches!(c, Component::Normal(_))) => {
            workspace.join(rel)
        }
        Some(rel) => {
            return Err(SandboxError::InvalidCommand(format!(
                "the working directory {} is not inside the workspace",
                rel.display()
            )));
        }
    };
    let names = command
        .env
        .iter()
        .map(|(k, _)| k)
        .chain(command.secret_env.iter().map(|(k, _)| k));
    for name in names {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(SandboxError::InvalidCommand(format!(
                "{name:?} is not a variable name"
            )));
        }
    }
    for (i, bridge) in command.bridges.iter().enumerate() {
        // Binding a port below 1024 needs a capability the sandbox does not have.
        if bridge.port < 1024 {
            return Err(SandboxError::InvalidCommand(format!(
                "the bridge to {} needs a port from 1024 up, not {}",
                bridge.socket.display(),
                bridge.port
            )));
        }
        if command.bridges[..i].iter().any(|b| b.port == bridge.port) {
            return Err(SandboxError::InvalidCommand(format!(
                "port {} is bridged twice",
                bridge.port
            )));
        }
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(&bridge.socket) {
            Ok(meta) if meta.file_type().is_socket() => {}
            Ok(_) => {
                return Err(SandboxError::InvalidCommand(format!(
                    "the bridge socket {} is not a Unix socket",
                    bridge.socket.display()
                )));
            }
            Err(e) => {
                return Err(SandboxError::InvalidCommand(format!(
                    "the bridge socket {} cannot be opened: {e}",
                    bridge.socket.display()
                )));
            }
        }
    }
    Ok((workspace, cwd))
}

/// Runs commands directly on the host, with the limits and the empty environment but no
/// isolation at all. Only for operators who set `UNSAFE_NO_SANDBOX=1`.
pub struct Unsandboxed(());

impl Unsandboxed {
    /// `operator_allowed` is the `unsafe_no_sandbox` setting; without it there is no
    /// unsandboxed runner.
    pub fn new(operator_allowed: bool) -> Result<Self, SandboxError> {
        if operator_allowed {
            Ok(Unsandboxed(()))
        } else {
            Err(SandboxError::Unavailable(
                "running without a sandbox needs UNSAFE_NO_SANDBOX=1".into(),
            ))
        }
    }
}

#[async_trait]
impl Sandbox for Unsandboxed {
    fn name(&self) -> &'static str {
        "none"
    }

    async fn run(&self, command: &Command) -> Result<Output, SandboxError> {
        let (workspace, cwd) = validate(command)?;
        if command.root.is_some() {
            return Err(SandboxError::InvalidCommand(
                "another root than the host's needs the bwrap sandbox".into(),
            ));
        }
        if !command.bridges.is_empty() {
            // Without a network namespace of its own, a run has no private loopback to put
            // the bridged ports on.
            return Err(SandboxError::InvalidCommand(
                "bridges to host sockets need the bwrap sandbox".into(),
            ));
        }
        let mut cmd = tokio::process::Command::new(&command.argv[0]);
        cmd.args(&command.argv[1..])
            .current_dir(cwd)
            .env_clear()
            .envs(full_env(&workspace, command))
            .stdin(stdin(command)?);
        let output =
            process::run(cmd, &command.limits, command.spill_dir.as_deref(), &[], &[]).await?;
        Ok(output.into_output(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_directory_must_stay_inside_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(dir.path(), vec!["true".into()]);
        cmd.cwd = Some("../etc".into());
        assert!(matches!(
            validate(&cmd),
            Err(SandboxError::InvalidCommand(_))
        ));
        cmd.cwd = Some("/etc".into());
        assert!(matches!(
            validate(&cmd),
            Err(SandboxError::InvalidCommand(_))
        ));
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        cmd.cwd = Some("sub".into());
        let (ws, cwd) = validate(&cmd).unwrap();
        assert_eq!(cwd, ws.join("sub"));
    }

    #[test]
    fn no_unsandboxed_runner_without_the_operator() {
        assert!(Unsandboxed::new(false).is_err());
    }
}
