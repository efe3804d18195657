//! The coding-agent executors: Claude Code or Codex run in the sandbox on the task's
//! prompt, reaching models only through the model proxy with a capability token for this
//! run, revoked as soon as the CLI ends. Each CLI's command line and event reading is in
//! its own file; what they share (the prompt file, the run, the report) is here.

mod claude_code;
mod codex;
mod launch;
mod report;

pub use launch::{Invocation, Launch};
pub use report::AgentReport;

use std::path::{Path, PathBuf};

use anyhow::Context;
use secrecy::SecretString;
use serde_json::Value;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{
    Executor, ExecutorError, ExecutorReport, ExecutorTask, ProxyAccess, StopReason, prepare_records,
};
use crate::sandbox::{self, Command, Limits, Output, Sandbox, SandboxError};

/// The prompt's file in the run's records, which only planwright writes: anything under the
/// workspace (`HOME` included) an earlier sandboxed run may have swapped for a symlink.
const PROMPT_FILE: &str = "contract.md";

/// Debian's statically linked bash (the `bash-static` package).
const STATIC_BASH: &str = "bash-static";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentCli {
    ClaudeCode,
    Codex,
}

impl AgentCli {
    /// The name the repository config and contracts use for this executor.
    pub fn name(self) -> &'static str {
        match self {
            AgentCli::ClaudeCode => "claude-code",
            AgentCli::Codex => "codex",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "claude-code" => Some(AgentCli::ClaudeCode),
            "codex" => Some(AgentCli::Codex),
            _ => None,
        }
    }

    /// The executable's name in the install prefix (`scripts/install-agents`).
    pub fn program_name(self) -> &'static str {
        match self {
            AgentCli::ClaudeCode => "claude",
            AgentCli::Codex => "codex",
        }
    }

    /// The command line and environment for one run on `launch.prompt`. The command reads
    /// the prompt on its stdin, so a long contract never meets the argument length limit;
    /// no shell of the root's is needed for that.
    pub fn invocation(self, launch: &Launch<'_>) -> Invocation {
        let mut env = Vec::new();
        let args = match self {
            AgentCli::ClaudeCode => claude_code::args(launch, &mut env),
            AgentCli::Codex => codex::args(launch, &mut env),
        };
        let mut argv = vec![launch.program.display().to_string()];
        argv.extend(args);
        let mut carry = Vec::new();
        if self == AgentCli::ClaudeCode {
            // Claude Code runs its Bash tool only in bash or zsh, which many images lack;
            // the host's static bash runs in any of them.
            if let Some(bash) = crate::sandbox::bwrap::find_on_path(STATIC_BASH) {
                env.push((
                    "CLAUDE_CODE_SHELL".into(),
                    format!("{}/bin/{STATIC_BASH}", crate::sandbox::carry::PREFIX),
                ));
                carry.push(bash);
            }
        }
        Invocation {
            argv,
            env,
            carry,
            prompt: launch.prompt.to_owned(),
        }
    }

    /// Reads the JSON events the CLI printed on stdout (one object a line; other lines
    /// are skipped) into the run's outcome.
    pub fn read_events(self, stdout: &str) -> AgentReport {
        let events = stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok());
        match self {
            AgentCli::ClaudeCode => claude_code::read(events),
            AgentCli::Codex => codex::read(events),
        }
    }
}

/// One finished CLI run: what the sandbox gave back and its reading.
#[derive(Debug)]
pub struct AgentRun {
    pub output: Output,
    pub report: AgentReport,
}

/// Runs `cli` in `sandbox` on the workspace `root` (checkout in `root/repo`, `HOME` in
/// `root/home`), reaching models only through the proxy on `proxy_socket` with the run's
/// capability `token`. The prompt is kept in `records` (planwright's, outside the
/// workspace) and read from there on stdin. The transcript is the raw stdout in `output`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    sandbox: &dyn Sandbox,
    cli: AgentCli,
    launch: &Launch<'_>,
    root: &Path,
    records: &Path,
    proxy_socket: &Path,
    token: SecretString,
    limits: Limits,
) -> Result<AgentRun, SandboxError> {
    let invocation = cli.invocation(launch);
    fresh_config_homes(launch.home)?;
    let prompt_file = records.join(PROMPT_FILE);
    std::fs::write(&prompt_file, &invocation.prompt)
        .with_context(|| format!("Could not write the prompt to {}", prompt_file.display()))?;
    let mut command = Command::new(root, invocation.argv);
    command.from_host = true;
    command.root = launch.environment.cloned();
    command.stdin = Some(prompt_file);
    command.carry = invocation.carry;
    command.cwd = Some("repo".into());
    command.read_only = launch.read_only.to_vec();
    command
        .env
        .push(("HOME".into(), launch.home.display().to_string()));
    command.env.extend(invocation.env);
    command.bridge_model_proxy(proxy_socket, token);
    command.limits = limits;
    let output = sandbox.run(&command).await?;
    let report = cli.read_events(&output.stdout.text());
    Ok(AgentRun { output, report })
}

/// Where in the run's `HOME` each CLI keeps its settings, instruction files, skills,
/// hooks and state: Claude Code's folder (`CLAUDE_CONFIG_DIR`, which also holds its global
/// config then) and the global config it keeps beside it otherwise, and Codex's
/// `CODEX_HOME`. planwright writes nothing there; everything goes on the command line.
const CONFIG_HOMES: [&str; 3] = [".claude", ".claude.json", ".codex"];

/// Gives both CLIs empty config homes in `home` before a run. `HOME` lies in the workspace,
/// which the repository's own commands (its tests during verification) write to: settings,
/// hooks, instruction files or skills left there would reach the model, and nobody listed
/// them. Whatever is there is removed, a symlink as itself, never followed; the folders are
/// made anew (Codex refuses a `CODEX_HOME` that does not exist).
fn fresh_config_homes(home: &Path) -> Result<(), SandboxError> {
    ensure_folder(home)?;
    for name in CONFIG_HOMES {
        let path = home.join(name);
        let removed = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|e| {
            SandboxError::InvalidCommand(format!(
                "{} cannot be removed ({e}): remove it or start from a fresh workspace",
                path.display()
            ))
        })?;
    }
    for name in [".claude", ".codex"] {
        ensure_folder(&home.join(name))?;
    }
    Ok(())
}

/// Makes `dir` a folder unless it is one; planwright runs as root here, so never through
/// a symlink a run left behind.
fn ensure_folder(dir: &Path) -> Result<(), SandboxError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SandboxError::InvalidCommand(format!(
            "{} is not a folder (an earlier run may have left a symlink there): \
             remove it or start from a fresh workspace",
            dir.display()
        ))),
        Err(_) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("Could not create {}", dir.display()))?;
            Ok(())
        }
    }
}

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
            environment: task.environment.as_ref(),
        };
        // The rung's model only: the CLIs' side calls use it too (see `claude_code`).
        let token = self.proxy.capabilities.issue_for(
            &self.proxy.run,
            &self.proxy.session,
            task.limits.budget,
            task.limits.wall + TOKEN_GRACE,
            std::slice::from_ref(&self.model),
        );
        let limits = sandbox::Limits {
            wall: task.limits.wall,
            ..sandbox::Limits::default()
        };
        let result = run(
            self.sandbox.as_ref(),
            self.cli,
            &launch,
            &task.root,
            &task.records,
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
            report.stop
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
            summary: crate::text::clip(summary.trim(), MAX_SUMMARY_CHARS),
            turns: 1,
            steps: report.tools.values().sum(),
            transcript,
            duration: started.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::report::{FINAL_MESSAGE_LIMIT, SUMMARY_LIMIT};
    use super::*;
    use crate::sandbox::MODEL_PROXY_PORT;

    /// Streams the real CLIs printed: an edit against the scripted model server (see
    /// tests/agents_cli.rs) and a run whose model server refused every request.
    const CLAUDE_EDIT: &str = include_str!("../../../tests/data/agent_cli/claude-code-edit.jsonl");
    const CLAUDE_API_ERROR: &str =
        include_str!("../../../tests/data/agent_cli/claude-code-api-error.jsonl");
    const CODEX_EDIT: &str = include_str!("../../../tests/data/agent_cli/codex-edit.jsonl");
    const CODEX_API_ERROR: &str =
        include_str!("../../../tests/data/agent_cli/codex-api-error.jsonl");

    fn launch<'a>(home: &'a Path, prompt: &'a str) -> Launch<'a> {
        Launch {
            program: Path::new("/opt/planwright-agents/bin/claude"),
            model: "claude-sonnet-4-5",
            prompt,
            home,
            read_only: &[],
            environment: None,
        }
    }

    #[test]
    fn names_round_trip() {
        for cli in [AgentCli::ClaudeCode, AgentCli::Codex] {
            assert_eq!(AgentCli::parse(cli.name()), Some(cli));
        }
        assert_eq!(AgentCli::parse("builtin"), None);
    }

    #[test]
    fn claude_code_reads_the_prompt_file_on_stdin_with_only_local_tools() {
        let home = Path::new("/ws/home");
        let prompt = "# Contract\n\nA prompt far too secret for argv";
        let inv = AgentCli::ClaudeCode.invocation(&launch(home, prompt));
        assert_eq!(inv.prompt, prompt);
        assert!(inv.argv.iter().all(|a| !a.contains("far too secret")));
        assert_eq!(inv.argv[0], "/opt/planwright-agents/bin/claude");
        let after = |flag: &str| {
            let i = inv.argv.iter().position(|a| a == flag).unwrap();
            inv.argv[i + 1].as_str()
        };
        assert_eq!(after("--output-format"), "stream-json");
        assert_eq!(after("--model"), "claude-sonnet-4-5");
        assert_eq!(after("--permission-mode"), "acceptEdits");
        assert_eq!(after("--tools"), "Bash,Edit,Write,Read,Glob,Grep");
        // Allowing the editing tools by rule would allow them outside the checkout.
        assert!(!after("--allowedTools").contains("Edit"));
        assert!(!after("--allowedTools").contains("Write"));
        assert!(!after("--tools").contains("Web"));
        let env: BTreeMap<_, _> = inv.env.iter().cloned().collect();
        assert_eq!(env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], "1");
        assert_eq!(env["ANTHROPIC_SMALL_FAST_MODEL"], "claude-sonnet-4-5");
        // The proxy's address and the token come from the sandbox's bridge, not from here.
        assert!(!env.contains_key("ANTHROPIC_BASE_URL"));
        assert!(!env.contains_key("ANTHROPIC_API_KEY"));
    }

    #[test]
    fn codex_speaks_to_the_proxy_as_a_provider_of_its_own() {
        let home = Path::new("/ws/home");
        let mut l = launch(home, "the contract");
        l.program = Path::new("/opt/planwright-agents/bin/codex");
        l.model = "gpt-5";
        let inv = AgentCli::Codex.invocation(&l);
        assert_eq!(
            &inv.argv[..3],
            ["/opt/planwright-agents/bin/codex", "exec", "--json"]
        );
        assert_eq!(inv.argv.last().map(String::as_str), Some("-"));
        let provider = inv
            .argv
            .iter()
            .find(|a| a.starts_with("model_providers.planwright="))
            .unwrap();
        assert!(provider.contains(&format!(
            "base_url=\"http://127.0.0.1:{MODEL_PROXY_PORT}/v1\""
        )));
        assert!(provider.contains("env_key=\"OPENAI_API_KEY\""));
        assert!(inv.argv.contains(&"model_provider=planwright".to_owned()));
        assert!(inv.argv.contains(&"analytics.enabled=false".to_owned()));
        let env: BTreeMap<_, _> = inv.env.iter().cloned().collect();
        assert_eq!(env["CODEX_HOME"], "/ws/home/.codex");
        assert!(!env.contains_key("OPENAI_API_KEY"));
    }

    #[test]
    fn a_claude_code_edit_reads_as_completed_with_its_tools() {
        let report = AgentCli::ClaudeCode.read_events(CLAUDE_EDIT);
        assert_eq!(report.stop, StopReason::Finished);
        assert_eq!(
            report.final_message.as_deref(),
            Some("Changed the greeting to planwright.")
        );
        assert_eq!(report.tools.get("Read"), Some(&1));
        assert_eq!(report.tools.get("Edit"), Some(&1));
        assert_eq!(report.summary, "3 turns, Edit ×1, Read ×1; completed");
    }

    #[test]
    fn a_claude_code_api_error_reads_as_failed_with_its_message() {
        let report = AgentCli::ClaudeCode.read_events(CLAUDE_API_ERROR);
        assert_eq!(report.stop, StopReason::Crashed);
        assert_eq!(report.failure.as_deref(), Some("API Error: 418 probe"));
        assert_eq!(
            report.summary,
            "1 turn, no tools; failed: API Error: 418 probe"
        );
    }

    #[test]
    fn a_stream_cut_before_the_result_is_unfinished() {
        let cut: String = CLAUDE_EDIT
            .lines()
            .filter(|l| !l.contains("\"type\":\"result\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let report = AgentCli::ClaudeCode.read_events(&format!("{cut}{{\"type\":\"resu"));
        assert_eq!(report.stop, StopReason::Crashed);
        assert_eq!(report.failure, None);
        assert_eq!(
            report.final_message.as_deref(),
            Some("Changed the greeting to planwright.")
        );
        let empty = AgentCli::Codex.read_events("");
        assert_eq!((empty.stop, empty.failure), (StopReason::Crashed, None));
    }

    #[test]
    fn a_codex_edit_reads_as_completed_and_warnings_are_not_tools() {
        let report = AgentCli::Codex.read_events(CODEX_EDIT);
        assert_eq!(report.stop, StopReason::Finished);
        assert_eq!(
            report.final_message.as_deref(),
            Some("Changed the greeting to planwright.")
        );
        assert_eq!(report.tools.len(), 1, "{:?}", report.tools);
        assert_eq!(report.tools.get("command_execution"), Some(&1));
        assert_eq!(report.summary, "1 turn, command_execution ×1; completed");
    }

    #[test]
    fn a_failed_codex_turn_reads_as_failed() {
        let report = AgentCli::Codex.read_events(CODEX_API_ERROR);
        assert_eq!(report.stop, StopReason::Crashed);
        let message = report.failure.as_deref().unwrap_or_default();
        assert!(message.contains("418"), "{message}");
        assert!(report.final_message.is_none());
    }

    #[test]
    fn a_long_final_message_and_summary_are_bounded() {
        let long = "x".repeat(FINAL_MESSAGE_LIMIT * 2);
        let stream = serde_json::json!({"type": "result", "subtype": "success", "is_error": false,
            "num_turns": 1, "result": long})
        .to_string();
        let report = AgentCli::ClaudeCode.read_events(&stream);
        let message = report.final_message.unwrap();
        assert_eq!(message.chars().count(), FINAL_MESSAGE_LIMIT + 1);
        assert!(message.ends_with('…'));
        let failed =
            serde_json::json!({"type": "turn.failed", "error": {"message": "é".repeat(5000)}})
                .to_string();
        let report = AgentCli::Codex.read_events(&failed);
        assert_eq!(report.summary.chars().count(), SUMMARY_LIMIT + 1);
    }
}
