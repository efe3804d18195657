//! `planwright doctor`'s sandbox checks: whether bubblewrap is installed and actually starts
//! a command here (with a bridge), what the kernel allows for user namespaces and Landlock
//! (and, when it refuses, which of its needs the pod, container or machine lacks),
//! which host user sandboxes run as, and whether DATA_DIR is writable and holds sockets.

use std::path::{Path, PathBuf};

use crate::config::Settings;
use crate::sandbox::Bwrap;
use crate::sandbox::bwrap::HostUser;
use crate::sandbox::landlock::Enforced;

/// One line of the report.
#[derive(Debug, Clone)]
pub struct SandboxCheck {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// A failure here means executors cannot run.
    pub required: bool,
}

/// Runs every check. `relay` is the planwright executable that serves bridges inside.
pub async fn checks(settings: &Settings, relay: Option<PathBuf>) -> Vec<SandboxCheck> {
    let bwrap_required = settings.sandbox == "bwrap";
    let mut out = Vec::new();
    out.push(
        match (settings.sandbox.as_str(), settings.unsafe_no_sandbox) {
            ("none", true) => SandboxCheck {
                name: "sandbox setting",
                ok: false,
                detail:
                    "SANDBOX=none with UNSAFE_NO_SANDBOX=1: executors run with no isolation at all"
                        .into(),
                required: false,
            },
            (name, _) => SandboxCheck {
                name: "sandbox setting",
                ok: true,
                detail: format!("SANDBOX={name}"),
                required: false,
            },
        },
    );
    let program = crate::sandbox::bwrap::find_on_path("bwrap");
    out.push(SandboxCheck {
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
    let confinement = Confinement::observe(program.as_deref());
    out.push(user_namespaces(&confinement));
    let landlock = crate::sandbox::landlock::probe();
    out.push(SandboxCheck {
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
        out.extend(sandbox_runs(settings, relay, data_ok, bwrap_required, &confinement).await);
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

fn user_namespaces(confinement: &Confinement) -> SandboxCheck {
    let missing = missing(confinement);
    SandboxCheck {
        name: "user namespaces",
        ok: missing.is_empty(),
        detail: if missing.is_empty() {
            format!(
                "allowed (max_user_namespaces {}), and /proc is whole for the sandbox's own",
                confinement
                    .max_user_namespaces
                    .map_or("unknown".into(), |m| m.to_string())
            )
        } else {
            format!("{} ({})", missing.join("; "), confinement.host.describe())
        },
        // The sandbox run below is the real test; these say what a failure lacks.
        required: false,
    }
}

/// Where planwright runs, for naming what to change in that place's own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// A pod: `KUBERNETES_SERVICE_HOST` is set.
    Kubernetes,
    /// A container of Docker, Podman or another runtime.
    Container,
    /// A machine or VM of its own.
    Machine,
}

impl Host {
    fn detect() -> Host {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            return Host::Kubernetes;
        }
        let marked = ["/.dockerenv", "/run/.containerenv"]
            .iter()
            .any(|p| Path::new(p).exists());
        let cgroup = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
        let named = ["docker", "kubepods", "containerd", "libpod", "crio"]
            .iter()
            .any(|n| cgroup.contains(n));
        if marked || named {
            Host::Container
        } else {
            Host::Machine
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Host::Kubernetes => "in a Kubernetes pod",
            Host::Container => "in a container",
            Host::Machine => "on this machine",
        }
    }
}

/// What this process sees of what bubblewrap needs: whether it may make a user namespace,
/// what refuses it if not, and whether /proc is whole (bubblewrap mounts a /proc of its
/// own, which the kernel refuses inside a user namespace while parts of the outer one
/// are covered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    pub host: Host,
    /// The error making a user namespace gave (an errno); `None` when it worked.
    pub userns_refused: Option<i32>,
    /// A seccomp filter applies to this process (`Seccomp: 2` in /proc/self/status).
    pub seccomp_filter: bool,
    /// The AppArmor profile confining this process; `None` when unconfined or absent.
    pub apparmor: Option<String>,
    pub max_user_namespaces: Option<i64>,
    pub unprivileged_userns_clone: Option<i64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` is 1.
    pub apparmor_restricts_userns: bool,
    /// `no_new_privs` is set: a setuid bwrap gains nothing.
    pub no_new_privs: bool,
    /// The bwrap found is setuid root.
    pub bwrap_setuid: bool,
    /// Paths of /proc covered by another mount (a container runtime's masks).
    pub proc_covered: Vec<String>,
    pub root: bool,
}

impl Confinement {
    /// Looks, and tries to make a user namespace in a child process.
    pub fn observe(bwrap: Option<&Path>) -> Confinement {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let apparmor = [
            "/proc/self/attr/apparmor/current",
            "/proc/self/attr/current",
        ]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|p| p.trim_end_matches(['\0', '\n']).trim().to_owned())
        .filter(|p| !p.is_empty() && p != "unconfined");
        let bwrap_setuid = bwrap.is_some_and(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).is_ok_and(|m| m.mode() & 0o4000 != 0 && m.uid() == 0)
        });
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Confinement {
            host: Host::detect(),
            userns_refused: try_user_namespace().err(),
            seccomp_filter: field("Seccomp").as_deref() == Some("2"),
            apparmor,
            max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restricts_userns: read_sysctl(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ) == Some(1),
            no_new_privs: field("NoNewPrivs").as_deref() == Some("1"),
            bwrap_setuid,
            proc_covered: proc_covered(&mountinfo),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
        }
    }
}

/// Makes a user namespace in a child process, as bubblewrap would; the errno on refusal.
fn try_user_namespace() -> Result<(), i32> {
    use std::os::unix::process::CommandExt;
    let Ok(program) = std::env::current_exe() else {
        return Ok(());
    };
    let mut command = std::process::Command::new(program);
    command
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec, only the async-signal-safe unshare(2) runs.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    match command.status() {
        Ok(_) => Ok(()),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EPERM)),
    }
}

/// The mount points inside /proc, from /proc/self/mountinfo: a container runtime's
/// masks and read-only paths. binfmt_misc's own folder is left out: the kernel keeps it
/// empty, so covering it hides nothing.
pub fn proc_covered(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = *fields.get(4)?;
            let fstype = fields
                .iter()
                .position(|f| *f == "-")
                .and_then(|i| fields.get(i + 1))
                .copied()
                .unwrap_or_default();
            (point.starts_with("/proc/") && !matches!(fstype, "binfmt_misc" | "autofs"))
                .then(|| point.to_owned())
        })
        .collect()
}

/// What bubblewrap lacks here, each named with what gives it, in the terms of where
/// planwright runs (a pod's securityContext, a container's options, a machine's
/// settings); empty when nothing is missing.
pub fn missing(c: &Confinement) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(errno) = c.userns_refused {
        let mut causes = Vec::new();
        if c.max_user_namespaces == Some(0) {
            causes.push(match c.host {
                Host::Machine => "user.max_user_namespaces is 0 (set it above 0)".to_owned(),
                _ => "user.max_user_namespaces is 0 on the node; a pod or container cannot \
                      change it: run on nodes that allow user namespaces"
                    .to_owned(),
            });
        }
        if !c.root && c.unprivileged_userns_clone == Some(0) {
            causes
                .push("kernel.unprivileged_userns_clone is 0 on the host (set it to 1)".to_owned());
        }
        if c.seccomp_filter {
            causes.push(match c.host {
                Host::Kubernetes => "a seccomp profile refuses it (the runtime's default does): \
                     set securityContext.seccompProfile.type to Unconfined, or Localhost with \
                     a profile allowing clone, clone3 and unshare with CLONE_NEWUSER"
                    .to_owned(),
                Host::Container => "a seccomp profile refuses it (the runtime's default does): \
                     start the container with --security-opt seccomp=unconfined, or a profile \
                     allowing clone, clone3 and unshare with CLONE_NEWUSER"
                    .to_owned(),
                Host::Machine => "a seccomp filter applies to planwright (a service manager's \
                     RestrictNamespaces= or SystemCallFilter=?): let it make user namespaces"
                    .to_owned(),
            });
        }
        if let Some(profile) = &c.apparmor {
            causes.push(match c.host {
                Host::Kubernetes => format!(
                    "the AppArmor profile `{profile}` confines planwright: set \
                     securityContext.appArmorProfile.type to Unconfined"
                ),
                Host::Container => format!(
                    "the AppArmor profile `{profile}` confines planwright: start the container \
                     with --security-opt apparmor=unconfined"
                ),
                Host::Machine => format!(
                    "the AppArmor profile `{profile}` confines planwright: allow it `userns`"
                ),
            });
        }
        if c.apparmor_restricts_userns {
            causes.push(
                "kernel.apparmor_restrict_unprivileged_userns is 1 on the host: give bwrap an \
                 AppArmor profile allowing `userns`, or set it to 0"
                    .to_owned(),
            );
        }
        if c.no_new_privs && c.bwrap_setuid {
            causes.push(
                "bwrap is setuid root, but no_new_privs is set (allowPrivilegeEscalation: false, \
                 --security-opt no-new-privileges), so it runs unprivileged and needs user \
                 namespaces all the same"
                    .to_owned(),
            );
        }
        if causes.is_empty() {
            causes.push(
                "nothing seen here explains it: check the kernel's settings and security \
                 modules where planwright runs"
                    .to_owned(),
            );
        }
        out.push(format!(
            "making a user namespace was refused ({}): {}",
            std::io::Error::from_raw_os_error(errno),
            causes.join(", and ")
        ));
    }
    if !c.proc_covered.is_empty() {
        let mut shown: Vec<&str> = c.proc_covered.iter().take(3).map(String::as_str).collect();
        if c.proc_covered.len() > shown.len() {
            shown.push("…");
        }
        let covered = shown.join(", ");
        out.push(match c.host {
            Host::Kubernetes => format!(
                "/proc has covered paths ({covered}), so bubblewrap cannot mount a /proc of its \
                 own: set securityContext.procMount to Unmasked, which needs the pod's \
                 hostUsers: false"
            ),
            Host::Container => format!(
                "/proc has covered paths ({covered}), so bubblewrap cannot mount a /proc of its \
                 own: start the container with --security-opt systempaths=unconfined (Podman: \
                 --security-opt unmask=ALL)"
            ),
            Host::Machine => format!(
                "/proc has covered paths ({covered}), so bubblewrap cannot mount a /proc of its \
                 own: unmount them"
            ),
        });
    }
    out
}

/// Whether runs get a control group of their own, by making one as a run would.
fn control_groups() -> SandboxCheck {
    use crate::sandbox::cgroup::{RunGroup, Version};
    let version = match Version::detect() {
        Some(Version::V1) => "cgroup v1",
        Some(Version::V2) => "cgroup v2",
        None => "no cgroup hierarchy",
    };
    let made = RunGroup::create(1 << 30, 64);
    SandboxCheck {
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

fn data_dir(dir: &Path) -> SandboxCheck {
    let probe = dir.join(format!(".doctor-{}", uuid::Uuid::new_v4()));
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&probe, b"probe"))
        .and_then(|()| std::fs::remove_file(&probe));
    SandboxCheck {
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
async fn sockets(dir: &Path) -> SandboxCheck {
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
    SandboxCheck {
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
    confinement: &Confinement,
) -> Vec<SandboxCheck> {
    let mut out = Vec::new();
    let bwrap = match Bwrap::new(crate::sandbox::hidden_paths(settings)) {
        Ok(b) => b,
        Err(e) => {
            out.push(SandboxCheck {
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
    out.push(SandboxCheck {
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
    let plain = crate::sandbox::run_true(&bwrap, &scratch, false).await;
    out.push(SandboxCheck {
        name: "sandbox",
        ok: plain.is_ok(),
        detail: match &plain {
            Ok(()) => "bubblewrap started `true` in a sandbox".into(),
            Err(e) => match missing(confinement).as_slice() {
                [] => e.clone(),
                lacks => format!(
                    "{e}; {} it lacks: {}",
                    confinement.host.describe(),
                    lacks.join("; ")
                ),
            },
        },
        required,
    });
    if plain.is_ok() {
        let bridged = crate::sandbox::run_true(&bwrap, &scratch, true).await;
        out.push(SandboxCheck {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fine(host: Host) -> Confinement {
        Confinement {
            host,
            userns_refused: None,
            seccomp_filter: false,
            apparmor: None,
            max_user_namespaces: Some(63_000),
            unprivileged_userns_clone: None,
            apparmor_restricts_userns: false,
            no_new_privs: false,
            bwrap_setuid: false,
            proc_covered: Vec::new(),
            root: false,
        }
    }

    /// A container's /proc as Docker and containerd leave it: masks and read-only paths.
    const CONTAINER_MOUNTINFO: &str = "\
612 590 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
613 612 0:55 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
614 612 0:55 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
615 612 0:5 /null /proc/kcore rw,nosuid - devtmpfs udev rw,size=4027464k
616 612 0:60 / /proc/acpi ro,relatime - tmpfs tmpfs ro
617 590 0:61 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755";

    #[test]
    fn the_paths_a_runtime_covers_in_proc_are_found_and_binfmt_misc_is_not_one() {
        assert_eq!(
            proc_covered(CONTAINER_MOUNTINFO),
            ["/proc/bus", "/proc/sys", "/proc/kcore", "/proc/acpi"]
        );
        let host = "\
25 30 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
40 25 0:35 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw
41 40 0:36 / /proc/sys/fs/binfmt_misc rw,relatime shared:14 - binfmt_misc binfmt_misc rw";
        assert!(proc_covered(host).is_empty());
    }

    #[test]
    fn nothing_is_missing_where_user_namespaces_work_and_proc_is_whole() {
        for host in [Host::Kubernetes, Host::Container, Host::Machine] {
            assert!(missing(&fine(host)).is_empty());
        }
        // A filter or a profile that lets user namespaces through is no problem.
        let mut c = fine(Host::Kubernetes);
        c.seccomp_filter = true;
        c.apparmor = Some("planwright-worker (enforce)".into());
        assert!(missing(&c).is_empty());
    }

    #[test]
    fn a_pod_with_the_default_profiles_and_masked_proc_is_told_each_field_to_set() {
        let mut c = fine(Host::Kubernetes);
        c.userns_refused = Some(libc::EPERM);
        c.seccomp_filter = true;
        c.apparmor = Some("cri-containerd.apparmor.d (enforce)".into());
        c.proc_covered = proc_covered(CONTAINER_MOUNTINFO);
        let said = missing(&c);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("making a user namespace was refused (Operation not permitted")
        );
        assert!(said[0].contains("securityContext.seccompProfile.type to Unconfined"));
        assert!(said[0].contains(
            "AppArmor profile `cri-containerd.apparmor.d (enforce)` confines planwright: set \
             securityContext.appArmorProfile.type to Unconfined"
        ));
        assert!(
            said[1].contains("/proc/bus, /proc/sys, /proc/kcore, …"),
            "{}",
            said[1]
        );
        assert!(said[1].contains("securityContext.procMount to Unmasked"));
        assert!(said[1].contains("hostUsers: false"));
    }

    #[test]
    fn a_container_is_told_its_runtime_options() {
        let mut c = fine(Host::Container);
        c.userns_refused = Some(libc::EPERM);
        c.seccomp_filter = true;
        c.proc_covered = vec!["/proc/kcore".into()];
        let said = missing(&c).join("\n");
        assert!(said.contains("--security-opt seccomp=unconfined"), "{said}");
        assert!(!said.contains("AppArmor"), "{said}");
        assert!(
            said.contains("--security-opt systempaths=unconfined"),
            "{said}"
        );
    }

    #[test]
    fn the_node_settings_and_a_setuid_bwrap_under_no_new_privs_are_named() {
        let mut c = fine(Host::Kubernetes);
        c.userns_refused = Some(libc::ENOSPC);
        c.max_user_namespaces = Some(0);
        let said = missing(&c);
        assert!(
            said[0].contains("user.max_user_namespaces is 0 on the node"),
            "{said:?}"
        );
        assert!(!said[0].contains("seccomp"), "{said:?}");

        let mut c = fine(Host::Machine);
        c.userns_refused = Some(libc::EPERM);
        c.unprivileged_userns_clone = Some(0);
        c.no_new_privs = true;
        c.bwrap_setuid = true;
        let said = missing(&c).join("\n");
        assert!(
            said.contains("kernel.unprivileged_userns_clone is 0"),
            "{said}"
        );
        assert!(said.contains("no_new_privs is set"), "{said}");
        // As root, the unprivileged switch does not apply.
        c.root = true;
        assert!(!missing(&c).join("\n").contains("unprivileged_userns_clone"));

        // A refusal nothing here explains still says so, rather than nothing.
        let mut c = fine(Host::Machine);
        c.userns_refused = Some(libc::EPERM);
        assert!(missing(&c)[0].contains("nothing seen here explains it"));
    }

    /// This machine: what it observes agrees with what a real user namespace does.
    #[test]
    fn the_observed_refusal_is_what_making_a_user_namespace_does_here() {
        let c = Confinement::observe(None);
        let works = std::process::Command::new("bwrap")
            .args(["--unshare-user", "--ro-bind", "/", "/", "true"])
            .status()
            .is_ok_and(|s| s.success());
        assert_eq!(c.userns_refused.is_none(), works, "{c:?}");
    }
}
