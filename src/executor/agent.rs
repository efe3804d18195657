//! The coding-agent executors: Claude Code or Codex ([`crate::agent_cli`]) run in the
//! sandbox on the task's prompt, reaching models only through the model proxy with a
//! capability token for this run, revoked as soon as the CLI ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Executor, ExecutorError, ExecutorReport, ExecutorTask, StopReason, prepare_records};
use crate::agent_cli::{self, AgentCli, Launch};
use crate::distill;
use crate::sandbox::{self, Sandbox};

use super::ProxyAccess;

/// A token outlives the run's wall clock by this much, so the last call is not cut off.
const TOKEN_GRACE: Duration = Duration::from_secs(60);
const MAX_SUMMARY_CHARS: usize = 4_000;

#[derive(Clone)]
pub struct AgentExecutor {
    cli: AgentCli,
    program: PathBuf,
    /// The model id as the CLI's provider names it.
    model: String,
    sandbox: Arc<dyn Sandbox>,
    proxy: ProxyAccess,
}

impl AgentExecutor {
    pub fn new(
        cli: AgentCli,
        program: PathBuf,
        model: impl Into<String>,
        sandbox: Arc<dyn Sandbox>,
        proxy: ProxyAccess,
    ) -> Self {
        AgentExecutor {
            cli,
            program,
            model: model.into(),
            sandbox,
            proxy,
        }
    }
}

/// Where a CLI is installed: on `PATH`, else in the prefix `scripts/install-agents` and
/// the container image use.
pub fn locate(cli: AgentCli) -> Option<PathBuf> {
    crate::sandbox::bwrap::find_on_path(cli.program_name()).or_else(|| {
        let fixed = PathBuf::from("/opt/planwright-agents/bin").join(cli.program_name());
        fixed.is_file().then_some(fixed)
    })
}

#[async_trait]
impl Executor for AgentExecutor {
    fn name(&self) -> &'static str {
        self.cli.name()
    }

    async fn run(&self, task: &ExecutorTask) -> Result<ExecutorReport, ExecutorError> {
        let started = Instant::now();
        prepare_records(task)?;
        let home = task
            .env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .unwrap_or_else(|| task.root.join("home"));
        let prompt = task.prompt();
        let launch = Launch {
            program: &self.program,
            model: &self.model,
            prompt: &prompt,
            home: &home,
            read_only: &task.read_only,
        };
        let token = self.proxy.capabilities.issue(
            &self.proxy.run,
            &self.proxy.session,
            task.limits.budget,
            task.limits.wall + TOKEN_GRACE,
        );
        let limits = sandbox::Limits {
            wall: task.limits.wall,
            ..sandbox::Limits::default()
        };
        let result = agent_cli::run(
            self.sandbox.as_ref(),
            self.cli,
            &launch,
            &task.root,
            &self.proxy.socket,
            token,
            limits,
        )
        .await;
        // Nothing the CLI left behind may spend on the run's behalf.
        self.proxy.capabilities.revoke(&self.proxy.run);
        let run = result.map_err(ExecutorError::Sandbox)?;

        let transcript = task.records.join("transcript.jsonl");
        let mut text = run.output.stdout.text();
        let stderr = run.output.stderr.text();
        if !stderr.trim().is_empty() {
            text.push_str("\n--- stderr ---\n");
            text.push_str(&stderr);
        }
        std::fs::write(&transcript, text).map_err(|source| ExecutorError::Records {
            path: transcript.clone(),
            source,
        })?;

        let report = run.report;
        let stop = if run.output.timed_out {
            StopReason::Timeout
        } else {
            match &report.stop {
                agent_cli::StopReason::Completed => StopReason::Finished,
                agent_cli::StopReason::MaxTurns => StopReason::TurnLimit,
                agent_cli::StopReason::Failed(message)
                    if message.to_ascii_lowercase().contains("budget") =>
                {
                    StopReason::Budget
                }
                agent_cli::StopReason::Failed(_) | agent_cli::StopReason::Unfinished => {
                    StopReason::Crashed
                }
            }
        };
        let mut summary = report.summary.clone();
        if let Some(message) = &report.final_message {
            summary = format!("{summary}\n{message}");
        }
        if !report.denied.is_empty() {
            summary.push_str(&format!(
                "\nRefused for want of a permission: {}",
                report.denied.join(", ")
            ));
        }
        Ok(ExecutorReport {
            stop,
            summary: distill::clip(summary.trim(), MAX_SUMMARY_CHARS),
            turns: 1,
            steps: report.tools.values().sum(),
            transcript,
            duration: started.elapsed(),
        })
    }
}
