//! Where model-written code runs: the [`Sandbox`] trait, what a run asks for ([`Command`],
//! the [`Root`] it sees as `/`, [`Limits`], [`Bridge`]s to host sockets) and what it gives
//! back ([`Output`]). bubblewrap
//! (`bwrap.rs`) is the real implementation; [`Unsandboxed`] exists only for operators who
//! opt out explicitly.

pub mod bwrap;
pub mod carry;
pub mod cgroup;
mod command;
pub mod egress;
mod host_users;
pub mod landlock;
mod output;
mod prepare;
mod process;
pub mod relay;
mod run;
mod seccomp;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use crate::config::Settings;

pub use bwrap::Bwrap;
pub use command::{Bridge, Command, Limits, MODEL_PROXY_PORT, Root};
pub use host_users::open_to_sandboxes;
pub use output::{Captured, Exit, Output};
pub use prepare::{STEERING_ENV, base_env};
use prepare::{full_env, stdin, validate};
pub use run::{Sandbox, SandboxError};

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
