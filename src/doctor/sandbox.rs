//! `planwright doctor`'s sandbox checks: whether bubblewrap is installed and actually starts
//! a command here (with a bridge), what the kernel allows for user namespaces and Landlock,
//! which host user sandboxes run as, and whether DATA_DIR is writable and holds sockets.

use std::path::{Path, PathBuf};

use crate::config::Settings;
use crate::sandbox::bwrap::HostUser;
use crate::sandbox::landlock::Enforced;
use crate::sandbox::{Bwrap, Command, Sandbox};

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// A failure here means executors cannot run.
    pub required: bool,
}

/// Runs every check. `relay` is the planwright executable that serves bridges inside.
pub async fn checks(settings: &Settings, relay: Option<PathBuf>) -> Vec<Check> {
    let bwrap_required = settings.sandbox == "bwrap";
    let mut out = Vec::new();
    out.push(
        match (settings.sandbox.as_str(), settings.unsafe_no_sandbox) {
            ("none", true) => Check {
                name: "sandbox setting",
                ok: false,
                detail:
                    "SANDBOX=none with UNSAFE_NO_SANDBOX=1: executors run with no isolation at all"
                        .into(),
                required: false,
            },
            (name, _) => Check {
                name: "sandbox setting",
                ok: true,
                detail: format!("SANDBOX={name}"),
                required: false,
            },
        },
    );
    let program = crate::sandbox::bwrap::find_on_path("bwrap");
    out.push(Check {
        name: "bubblewrap",
        ok: program.is_some(),
        detail: match &program {
            Some(p) => format!("{} ({})", p.display(), version(p).await),
            None => "`bwrap` is not on PATH: install the `bubblewrap` package, or set \
                     SANDBOX=none together with UNSAFE_NO_SANDBOX=1 to run executors unsandboxed"
                .into(),
        },
        required: bwrap_required,
    });
    out.push(user_namespaces());
    let landlock = crate::sandbox::landlock::probe();
    out.push(Check {
        name: "landlock",
        ok: matches!(landlock, Ok(Enforced::Abi(_))),
        detail: match landlock {
            Ok(Enforced::Abi(abi)) => {
                format!("ABI {abi}: bridged runs may write only in the workspace, /tmp and /dev")
            }
            Ok(Enforced::Unsupported) => {
                "not available: bubblewrap's mounts are the only wall".into()
            }
            Err(e) => format!("not available ({e:#}): bubblewrap's mounts are the only wall"),
        },
        required: false,
    });
    out.push(control_groups());
    let data = data_dir(&settings.data_dir);
    let data_ok = data.ok;
    out.push(data);
    if data_ok {
        out.push(sockets(&settings.data_dir).await);
    }
    if program.is_some() {
        out.extend(sandbox_runs(settings, relay, data_ok, bwrap_required).await);
    }
    out
}

async fn version(program: &Path) -> String {
    match tokio::process::Command::new(program)
        .arg("--version")
        .env_clear()
        .output()
        .await
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => format!("Could not run it: {e}"),
    }
}

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn user_namespaces() -> Check {
    let max = read_sysctl("/proc/sys/user/max_user_namespaces");
    let clone = read_sysctl("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut problems = Vec::new();
    if max == Some(0) {
        problems.push("user.max_user_namespaces is 0".to_owned());
    }
    if clone == Some(0) {
        problems.push("kernel.unprivileged_userns_clone is 0".to_owned());
    }
    if apparmor == Some(1) {
        problems.push(
            "kernel.apparmor_restrict_unprivileged_userns is 1 (bwrap needs an AppArmor profile)"
                .to_owned(),
        );
    }
    Check {
        name: "user namespaces",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "allowed (max_user_namespaces {})",
                max.map_or("unknown".into(), |m| m.to_string())
            )
        } else {
            problems.join("; ")
        },
        // The sandbox run below is the real test; these settings only explain a failure.
        required: false,
    }
}

/// Whether runs get a control group of their own, by making one as a run would.
fn control_groups() -> Check {
    use crate::sandbox::cgroup::{RunGroup, Version};
    let version = match Version::detect() {
        Some(Version::V1) => "cgroup v1",
        Some(Version::V2) => "cgroup v2",
        None => "no cgroup hierarchy",
    };
    let made = RunGroup::create(1 << 30, 64);
    Check {
        name: "control groups",
        ok: made.is_ok(),
        detail: match made {
            Ok(_) => format!(
                "{version}, used: each sandbox runs in a group of its own (memory of the \
                 whole run, its process count, an equal CPU share)"
            ),
            Err(e) => format!(
                "{version}, not used: {e:#}; sandboxes are bounded by per-process limits only \
                 (run planwright as root, or give it a delegated cgroup v2 subtree)"
            ),
        },
        required: false,
    }
}

fn data_dir(dir: &Path) -> Check {
    let probe = dir.join(format!(".doctor-{}", uuid::Uuid::new_v4()));
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&probe, b"probe"))
        .and_then(|()| std::fs::remove_file(&probe));
    Check {
        name: "data dir",
        ok: result.is_ok(),
        detail: match result {
            Ok(()) => format!("{} is writable", dir.display()),
            Err(e) => format!("Could not write in {}: {e}", dir.display()),
        },
        required: true,
    }
}

/// Whether planwright can make, and reach, a Unix socket as deep in `dir` (DATA_DIR) as a
/// run's setup phase makes its egress proxy's. A path longer than a socket address holds
/// goes through its folder's descriptor (see `unix_socket`).
async fn sockets(dir: &Path) -> Check {
    use crate::unix_socket as socket;
    let scratch = dir.join(format!(
        "doctor-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let folder = scratch
        .join("runs")
        .join(crate::ids::RunId::generate().as_str())
        .join("verify");
    let path = folder.join(format!("egress-{}.sock", "0".repeat(12)));
    let made = async {
        std::fs::create_dir_all(&folder)?;
        let listener = socket::bind(&path)?;
        let (accepted, connected) = tokio::join!(listener.accept(), socket::connect(&path));
        accepted.and(connected).map(drop)
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    let bytes = path.as_os_str().len();
    Check {
        name: "sockets",
        ok: made.is_ok(),
        detail: match made {
            Ok(()) if socket::fits(&path) => format!(
                "a run's sockets in DATA_DIR ({bytes} bytes deep) are made and reached at \
                 their paths"
            ),
            Ok(()) => format!(
                "a run's sockets in DATA_DIR ({bytes} bytes deep, more than the {} a socket \
                 address holds) are made and reached through their folder",
                socket::MAX_PATH_BYTES
            ),
            Err(e) => format!(
                "Could not make and reach a Unix socket at {} ({bytes} bytes): {e}",
                path.display()
            ),
        },
        required: true,
    }
}

/// Starts `true` in a real sandbox, then again with a bridge (which needs the relay).
async fn sandbox_runs(
    settings: &Settings,
    relay: Option<PathBuf>,
    data_ok: bool,
    required: bool,
) -> Vec<Check> {
    let mut out = Vec::new();
    let bwrap = match Bwrap::new(crate::sandbox::hidden_paths(settings)) {
        Ok(b) => b,
        Err(e) => {
            out.push(Check {
                name: "sandbox",
                ok: false,
                detail: e.to_string(),
                required,
            });
            return out;
        }
    };
    let bwrap = match relay {
        Some(r) => bwrap.with_relay_program(r),
        None => bwrap,
    };
    out.push(Check {
        name: "host user",
        ok: true,
        detail: match bwrap.host_user() {
            HostUser::Range(ids) => format!(
                "sandboxes run as a uid of their own from {} to {}, one per concurrent run",
                ids.start,
                ids.end - 1
            ),
            HostUser::Fixed(uid, gid) => format!("sandboxes run as uid {uid}, gid {gid}"),
            // SAFETY: geteuid has no preconditions.
            HostUser::Own => format!(
                "planwright is not root, so sandboxes run as its own uid {} in a user \
                 namespace of their own: they see only the allowlisted system folders, the \
                 workspace and nothing of this user's home, but they share this user's \
                 process limit and what they write is owned by it; run planwright as root \
                 to give each sandbox a user of its own",
                unsafe { libc::geteuid() }
            ),
        },
        required: false,
    });
    if !data_ok {
        return out;
    }
    // Inside DATA_DIR, where workspaces live: the sandbox user must reach it there.
    let scratch = settings
        .data_dir
        .join(format!("doctor-{}", uuid::Uuid::new_v4()));
    let plain = run_true(&bwrap, &scratch, false).await;
    out.push(Check {
        name: "sandbox",
        ok: plain.is_ok(),
        detail: match &plain {
            Ok(()) => "bubblewrap started `true` in a sandbox".into(),
            Err(e) => e.clone(),
        },
        required,
    });
    if plain.is_ok() {
        let bridged = run_true(&bwrap, &scratch, true).await;
        out.push(Check {
            name: "bridge",
            ok: bridged.is_ok(),
            detail: match bridged {
                Ok(()) => "a sandbox with a bridged socket started".into(),
                Err(e) => e,
            },
            required,
        });
    }
    let _ = std::fs::remove_dir_all(&scratch);
    out
}

async fn run_true(bwrap: &Bwrap, scratch: &Path, bridge: bool) -> Result<(), String> {
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
    command.limits.wall = std::time::Duration::from_secs(60);
    let _listener = if bridge {
        let socket = scratch.join("bridge.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = crate::unix_socket::bind(&socket)
            .map_err(|e| format!("Could not listen on {}: {e}", socket.display()))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("Could not open {} to the sandbox: {e}", socket.display()))?;
        command
            .bridges
            .push(crate::sandbox::Bridge { port: 9999, socket });
        Some(listener)
    } else {
        None
    };
    match bwrap.run(&command).await {
        Ok(out) if out.exit.success() => Ok(()),
        Ok(out) => Err(format!(
            "bubblewrap could not start a command ({:?}): {}",
            out.exit,
            out.stderr.text().trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}
