//! What every implementation does before it starts a command: checking it, and its
//! environment and stdin.

use std::path::{Component, Path, PathBuf};

use super::command::Command;
use super::run::SandboxError;

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

pub(super) fn steers(name: &str) -> bool {
    let (names, prefixes) = STEERING_ENV;
    names.contains(&name) || prefixes.iter().any(|p| name.starts_with(p))
}

/// The whole environment of a command: the base, the caller's variables, then the secret
/// ones (exposed here only to be handed to the process).
pub(super) fn full_env(workspace: &Path, command: &Command) -> Vec<(String, String)> {
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
pub(super) fn stdin(command: &Command) -> Result<std::process::Stdio, SandboxError> {
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
pub(super) fn validate(command: &Command) -> Result<(PathBuf, PathBuf), SandboxError> {
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
