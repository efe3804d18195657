//! What a run asks for: the [`Command`], the [`Root`] it sees as `/`, its [`Limits`] and
//! the [`Bridge`]s to host sockets.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;

use super::egress;

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
    /// CLIs: [`super::STEERING_ENV`]) are dropped.
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
