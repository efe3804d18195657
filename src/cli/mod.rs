//! The `planwright` command line: its flags, one module per subcommand, and the
//! [`ExitStatus`] each one ends with, turned into the process's exit code in one place
//! ([`run`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::config::Settings;
use crate::distill::Format;
use crate::server::Role;

mod contract;
mod deliveries;
mod distill;
mod docs;
mod doctor;
mod env;
mod eval;
mod exit;
mod migrate;
mod runtime;
mod sandbox;
mod serve;
mod sessions;
mod setup;
mod solve;

use exit::Error;
pub use exit::ExitStatus;
use runtime::{init_tracing, runtime};

#[derive(Parser)]
#[command(
    name = "planwright",
    version,
    about = "Takes issues to pull requests through an approved build contract"
)]
pub struct Cli {
    /// Settings file (default: planwright.toml when present). Environment variables
    /// PLANWRIGHT_<KEY> override it.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receive webhooks and run jobs.
    Serve {
        /// What this process runs: `all` webhooks and job workers, `web` webhooks only,
        /// `worker` job workers only (with /healthz and /readyz for probes).
        #[arg(long, value_enum, default_value = "all")]
        role: Role,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Register planwright's GitHub App from its manifest: serves a one-shot page on a
    /// local address to open in a browser, waits for GitHub to send the browser back, and
    /// stores the app's credentials in DATA_DIR/github-app.json for `serve`.
    Setup {
        /// Register the app for this organisation instead of your own account.
        #[arg(long)]
        org: Option<String>,
        /// The local address of the one-shot page (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
    },
    /// List planner sessions, newest first.
    Sessions {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
        /// How many to list.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// List received webhook deliveries, newest first.
    Deliveries {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
        /// How many to list.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Summarise test-runner or command output: counts, failing tests with their message
    /// and location (the compact form for models by default).
    Distill {
        /// The runner whose output this is (default: detected from --command and the output).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// The command that produced the output, to help detection.
        #[arg(long)]
        command: Option<String>,
        /// Print the structured report as JSON.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print the report as markdown for humans.
        #[arg(long)]
        markdown: bool,
        /// The output to read; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
    /// Work with build contracts.
    Contract {
        #[command(subcommand)]
        command: contract::ContractCommand,
    },
    /// Take one issue to a result on a repository on this machine, without a forge: the
    /// contract is printed and approved here, the executor runs in the sandbox, and the
    /// result lands on a branch of the repository with its report in
    /// `.git/planwright/solve-N/pull-request.md`. Models and the sandbox come from the
    /// settings as for `serve`; DATA_DIR defaults to `.git/planwright/` (the database
    /// there is always SQLite). Exits 0 when the run passed, 1 when it did not, 2 on bad
    /// input.
    #[command(group(clap::ArgGroup::new("issue_text").required(true).args(["issue_file", "issue"])))]
    Solve {
        /// The repository's top folder; the work starts from the branch checked out.
        #[arg(long)]
        repo: PathBuf,
        /// A markdown file holding the issue: its first `# ` heading is the title.
        #[arg(long, value_name = "FILE")]
        issue_file: Option<PathBuf>,
        /// The issue as text: its first line is the title.
        #[arg(long, value_name = "TEXT")]
        issue: Option<String>,
        /// Carry out the contract without asking (needed when standard input is not a
        /// terminal).
        #[arg(long)]
        approve: bool,
    },
    /// Run a set of tasks with known answers through the whole flow, once per arm (a
    /// settings file with its models), grade each result with the task's hidden tests,
    /// and report resolved rate, cost per role and planwright's verdict against the
    /// grade (Markdown, JSON and HTML in OUT/NAME/). Finished runs are kept in
    /// OUT/planwright.db: the same command again carries on where it stopped. Exits 0
    /// when every run was graded, 1 when --budget stopped it, 2 on bad input.
    Eval {
        /// SWE-bench-compatible JSONL, or a folder in the real-tasks layout.
        tasks: PathBuf,
        /// NAME=SETTINGS_FILE: a configuration to compare (give one or more); or
        /// NAME=monolithic:PROVIDER:MODEL: the baseline, one model given the raw issue with
        /// the builtin executor's tools, no planner (its provider settings: --config).
        #[arg(long = "arm", value_name = "NAME=SETTINGS_FILE", required = true)]
        arms: Vec<String>,
        /// The evaluation's folder: its database, the runs and the reports.
        #[arg(long, default_value = "planwright-eval")]
        out: PathBuf,
        /// The evaluation's name (default: the task file's name without extension).
        #[arg(long)]
        name: Option<String>,
        /// Runs per task and arm, for the spread of the resolved rate.
        #[arg(long, default_value_t = 1)]
        repeat: u32,
        /// US dollars the whole evaluation may spend: no run starts once it is spent.
        #[arg(long, value_name = "USD")]
        budget: Option<f64>,
        /// Runs side by side.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// The environment image for tasks that name none.
        #[arg(long)]
        image: Option<String>,
    },
    /// Check this deployment: settings, database and migrations, GitHub and GitLab
    /// credentials, model provider keys, git, executors, the sandbox, free disk. One line
    /// per check (ok, warn, FAIL); exits non-zero when any check fails.
    Doctor,
    /// Work with environment images (the root file systems runs use).
    Env {
        #[command(subcommand)]
        command: env::EnvCommand,
    },
    /// Run commands the way executors run them.
    Sandbox {
        #[command(subcommand)]
        command: sandbox::SandboxCommand,
    },
    /// Write the reference pages under docs/ from the code's own definitions.
    #[command(hide = true)]
    Docs {
        #[command(subcommand)]
        command: docs::DocsCommand,
    },
}

/// Runs the command line's command.
pub fn run(cli: Cli) -> ExitCode {
    let config = cli.config.as_deref();
    let ended = match cli.command {
        // Inside a sandbox (the relay): no settings, no logging. `sandbox run` needs no
        // database; its settings only add paths to hide.
        Command::Sandbox { command } => sandbox::run(command, config).map_err(Error::Failed),
        // Distilling needs no settings, database or runtime.
        Command::Distill {
            format,
            command,
            json,
            markdown,
            file,
        } => distill::run(format, command.as_deref(), json, markdown, file.as_deref())
            .map_err(Error::Failed),
        Command::Contract { command } => contract::run(command),
        Command::Docs { command } => docs::run(command, &Cli::command()),
        // The doctor reports settings that do not load as one of its checks.
        Command::Doctor => doctor::run(config).map_err(Error::Failed),
        Command::Solve {
            repo,
            issue_file,
            issue,
            approve,
        } => solve::run(config, repo, issue_file, issue, approve),
        Command::Eval {
            tasks,
            arms,
            out,
            name,
            repeat,
            budget,
            jobs,
            image,
        } => eval::run(
            config,
            eval::Args {
                tasks,
                arms,
                out,
                name,
                repeat,
                budget,
                jobs,
                image,
            },
        ),
        Command::Serve { role } => deployment(config, |settings| serve::run(settings, role)),
        Command::Setup { org, listen } => {
            deployment(config, |settings| setup::run(settings, org, listen))
        }
        Command::Migrate => deployment(config, migrate::run),
        Command::Env { command } => deployment(config, |settings| env::run(settings, command)),
        Command::Sessions { json, limit } => {
            deployment(config, |settings| sessions::run(settings, json, limit))
        }
        Command::Deliveries { json, limit } => {
            deployment(config, |settings| deliveries::run(settings, json, limit))
        }
    };
    let status = match ended {
        Ok(status) => status,
        Err(Error::Input(e)) => {
            eprintln!("planwright: {e:#}");
            ExitStatus::BadInput
        }
        Err(Error::Failed(e)) => {
            eprintln!("planwright: {e:#}");
            ExitStatus::Failure
        }
    };
    status.into()
}

/// The commands that work on a deployment: its settings must load, and they log as
/// `serve` does.
fn deployment<F, R>(config: Option<&Path>, command: F) -> Result<ExitStatus, Error>
where
    F: FnOnce(Settings) -> R,
    R: Future<Output = anyhow::Result<ExitStatus>>,
{
    let settings = Settings::load(config).map_err(Error::Input)?;
    init_tracing(settings.log_format, "info");
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    Ok(runtime()?.block_on(command(settings))?)
}
