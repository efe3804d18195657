//! The command executor: a command line from the repository config, run in the sandbox
//! with the contract in a file beside the checkout (`PLANWRIGHT_CONTRACT`) and, when a
//! proxy socket is given, the model proxy bridged in with a capability token for this
//! run only. Coding agents with a prompt file and an API base URL fit this shape.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::builtin::replace;
use super::{
    Executor, ExecutorError, ExecutorReport, ExecutorTask, StopReason, checkout_dir,
    prepare_records,
};
use crate::ids::{RunId, SessionId};
use crate::metering::proxy::Capabilities;
use crate::sandbox::{self, Sandbox};

/// Where the contract is written, relative to the sandbox's workspace root: outside the
/// checkout, so it never shows in the diff.
pub const CONTRACT_FILE: &str = ".planwright/contract.md";
/// Lines at the end of the command's output taken as its summary.
const SUMMARY_LINES: usize = 40;
const MAX_SUMMARY_CHARS: usize = 4_000;
/// A token outlives the run's wall clock by this much, so the last call is not cut off;
/// it is revoked as soon as the command ends anyway.
const TOKEN_GRACE: Duration = Duration::from_secs(60);

/// The model proxy a command may use: the socket it listens on and what is needed to
/// issue this run's token.
#[derive(Clone)]
pub struct ProxyAccess {
    pub socket: PathBuf,
    pub capabilities: Arc<Capabilities>,
    pub run: RunId,
    pub session: SessionId,
}

#[derive(Clone)]
pub struct CommandExecutor {
    command: String,
    sandbox: Arc<dyn Sandbox>,
    proxy: Option<ProxyAccess>,
}

impl CommandExecutor {
    /// `command` is run with `sh -c` in the checkout.
    pub fn new(
        command: impl Into<String>,
        sandbox: Arc<dyn Sandbox>,
        proxy: Option<ProxyAccess>,
    ) -> Result<Self, ExecutorError> {
        let command = command.into();
        if command.trim().is_empty() {
            return Err(ExecutorError::Invalid(
                "the repository config gives the `command` executor no command line".into(),
            ));
        }
        if command.contains('\0') {
            return Err(ExecutorError::Invalid(
                "the executor's command line contains a NUL byte".into(),
            ));
        }
        Ok(CommandExecutor {
            command,
            sandbox,
            proxy,
        })
    }

    /// Writes the task's prompt to [`CONTRACT_FILE`] under the workspace root and returns
    /// its path. An earlier run in this workspace may have left anything at
    /// `.planwright`, a symlink included, so that entry is replaced, not followed.
    fn write_contract(&self, task: &ExecutorTask) -> Result<PathBuf, ExecutorError> {
        let dir = task.root.join(".planwright");
        let records = |source| ExecutorError::Records {
            path: dir.clone(),
            source,
        };
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(&dir).map_err(records)?;
                std::fs::create_dir(&dir).map_err(records)?;
            }
            Err(_) => std::fs::create_dir(&dir).map_err(records)?,
        }
        replace(
            &dir,
            "contract.md".as_ref(),
            task.prompt().as_bytes(),
            0o644,
        )
        .map_err(records)?;
        Ok(task.root.join(CONTRACT_FILE))
    }
}

#[async_trait]
impl Executor for CommandExecutor {
    fn name(&self) -> &'static str {
        "command"
    }

    async fn run(&self, task: &ExecutorTask) -> Result<ExecutorReport, ExecutorError> {
        let started = Instant::now();
        prepare_records(task)?;
        let cwd = checkout_dir(task)?;
        let contract = self.write_contract(task)?;

        let mut cmd = sandbox::Command::new(
            &task.root,
            vec!["sh".into(), "-c".into(), self.command.clone()],
        );
        cmd.cwd = Some(cwd);
        cmd.env = task.env.clone();
        cmd.read_only = task.read_only.clone();
        cmd.root = task.environment.clone();
        cmd.env
            .push(("PLANWRIGHT_CONTRACT".into(), contract.display().to_string()));
        cmd.limits.wall = task.limits.wall;
        cmd.spill_dir = Some(task.records.clone());
        if let Some(proxy) = &self.proxy {
            let token = proxy.capabilities.issue(
                &proxy.run,
                &proxy.session,
                task.limits.budget,
                task.limits.wall + TOKEN_GRACE,
            );
            cmd.bridge_model_proxy(&proxy.socket, token);
        }
        let result = self.sandbox.run(&cmd).await;
        if let Some(proxy) = &self.proxy {
            // Nothing the command left behind may spend on the run's behalf.
            proxy.capabilities.revoke(&proxy.run);
        }
        let output = result.map_err(ExecutorError::Sandbox)?;

        let stdout = output.stdout.text();
        let stderr = output.stderr.text();
        let status = output.status_text(cmd.limits.wall);
        let transcript = task.records.join("transcript.log");
        let mut text = format!(
            "$ {}\n--- stdout ({} bytes) ---\n{stdout}",
            self.command, output.stdout.total
        );
        for (name, captured) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            if let Some(spilled) = &captured.spilled {
                text.push_str(&format!(
                    "\n[{name} past {} bytes is in {}]\n",
                    captured.bytes.len(),
                    spilled.display()
                ));
            }
        }
        text.push_str(&format!(
            "\n--- stderr ({} bytes) ---\n{stderr}\n--- {status} ---\n",
            output.stderr.total
        ));
        std::fs::write(&transcript, text).map_err(|source| ExecutorError::Records {
            path: transcript.clone(),
            source,
        })?;

        let stop = if output.timed_out {
            StopReason::Timeout
        } else if output.exit.success() {
            StopReason::Finished
        } else {
            StopReason::Crashed
        };
        let lines: Vec<&str> = stdout.trim_end().lines().collect();
        let tail = lines[lines.len().saturating_sub(SUMMARY_LINES)..].join("\n");
        let mut summary = crate::text::clip(tail.trim(), MAX_SUMMARY_CHARS);
        if stop != StopReason::Finished {
            summary = format!("The command stopped: {status}.\n{summary}")
                .trim_end()
                .to_owned();
        }
        Ok(ExecutorReport {
            stop,
            summary,
            turns: 1,
            steps: 0,
            transcript,
            duration: started.elapsed(),
        })
    }
}
