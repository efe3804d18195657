//! The `planwright` command line.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use planwright::config::{LogFormat, Settings};
use planwright::distill::{self, Format};
use planwright::server::{self, Role};
use planwright::store::{Db, deliveries, sessions};

#[derive(Parser)]
#[command(
    name = "planwright",
    version,
    about = "Takes issues to pull requests through an approved build contract"
)]
struct Cli {
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
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// List received webhook deliveries, newest first.
    Deliveries {
        #[arg(long)]
        json: bool,
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
        command: ContractCommand,
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
    /// Check this deployment: settings, database and migrations, GitHub and GitLab
    /// credentials, model provider keys, git, executors, the sandbox, free disk. One line
    /// per check (ok, warn, FAIL); exits non-zero when any check fails.
    Doctor,
    /// Run commands the way executors run them.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
}

#[derive(Subcommand)]
enum SandboxCommand {
    /// Run one command in the sandbox an executor would get, with DIR as its workspace.
    Run {
        #[arg(long)]
        workspace: PathBuf,
        /// `none`: no network at all; `setup`: the hosts given with --allow, through the
        /// egress proxy (HTTP_PROXY and friends are set inside).
        #[arg(long, value_enum, default_value = "none")]
        network: Network,
        /// A host the setup phase may reach: `example.com`, `*.example.com`,
        /// `.example.com` or an IP address, each with an optional `:port` (default 80
        /// and 443).
        #[arg(long)]
        allow: Vec<String>,
        /// Wall-clock limit in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Another path to hide (DATA_DIR from the settings is hidden when they load).
        #[arg(long)]
        hide: Vec<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Inside a sandbox: relay 127.0.0.1:PORT to a mounted Unix socket for each bridge,
    /// then run the command (or, without one, only relay).
    #[command(hide = true)]
    Relay {
        #[arg(long = "bridge", value_name = "PORT=SOCKET", value_parser = planwright::sandbox::relay::parse_bridge, required = true)]
        bridges: Vec<(u16, PathBuf)>,
        /// A folder the command may write in; nothing else is writable (Landlock).
        #[arg(long)]
        writable: Vec<PathBuf>,
        #[arg(last = true)]
        command: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ContractCommand {
    /// Check a contract's JSON (what `submit_contract` receives): every problem is listed
    /// with its path; exit 1 when there is any.
    Validate {
        /// The JSON file; `-` reads standard input.
        file: PathBuf,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Network {
    None,
    Setup,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Inside a sandbox: no settings, no logging, nothing but the relay.
    if let Command::Sandbox {
        command:
            SandboxCommand::Relay {
                bridges,
                writable,
                command,
            },
    } = &cli.command
    {
        use planwright::sandbox::relay;
        let result = if command.is_empty() {
            relay::serve(bridges)
        } else {
            Err(relay::enter(bridges, writable, command))
        };
        return match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("planwright: {e:#}");
                // As shells do when a command cannot be run.
                std::process::ExitCode::from(127)
            }
        };
    }
    // Distilling needs no settings, database or runtime.
    if let Command::Distill {
        format,
        command,
        json,
        markdown,
        file,
    } = &cli.command
    {
        return match distill(
            *format,
            command.as_deref(),
            *json,
            *markdown,
            file.as_deref(),
        ) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("planwright: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if let Command::Contract {
        command: ContractCommand::Validate { file },
    } = &cli.command
    {
        return contract_validate(file);
    }
    // The sandbox command needs no database; settings only add paths to hide.
    if let Command::Sandbox {
        command: SandboxCommand::Run { .. },
    } = &cli.command
    {
        let Command::Sandbox { command } = cli.command else {
            return std::process::ExitCode::FAILURE;
        };
        return match sandbox_run(command, cli.config.as_deref()) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("planwright: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    // The doctor reports settings that do not load as one of its checks.
    if let Command::Doctor = cli.command {
        return doctor(cli.config.as_deref());
    }
    if let Command::Solve {
        repo,
        issue_file,
        issue,
        approve,
    } = cli.command
    {
        return solve(cli.config.as_deref(), repo, issue_file, issue, approve);
    }
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("planwright: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    init_tracing(settings.log_format, "info");
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("planwright: Could not start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, settings)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("planwright: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, settings: Settings) -> Result<()> {
    match command {
        Command::Serve { role } => {
            let running =
                server::start(settings, role, planwright::session::dispatch::handler).await?;
            let stopper = running.stopper();
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutting down: no new requests or jobs");
                stopper.cancel();
            });
            running.wait().await
        }
        Command::Setup { org, listen } => {
            let data_dir = settings.data_dir.clone();
            let app = planwright::server::setup::setup_from_terminal(settings, listen, org).await?;
            println!(
                "Registered the GitHub App {} (id {}); its credentials are in {}.",
                app.slug,
                app.id,
                planwright::onboarding::RegisteredApp::path(&data_dir).display()
            );
            println!(
                "Install it on your repositories: {}/installations/new",
                app.html_url.trim_end_matches('/')
            );
            Ok(())
        }
        Command::Migrate => {
            Db::open(&settings.database_url).await?;
            println!(
                "migrations applied to {}",
                planwright::store::redact(&settings.database_url)
            );
            Ok(())
        }
        Command::Sessions { json, limit } => {
            let db = Db::connect(&settings.database_url).await?;
            let rows = sessions::list(&db, i64::from(limit)).await.context(
                "Could not list sessions (has `planwright migrate` run on this database?)",
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                println!("no sessions");
            } else {
                for s in rows {
                    let version = s
                        .contract_version
                        .map_or_else(|| "-".to_owned(), |v| format!("v{v}"));
                    println!(
                        "{}  {:<8} {}#{}  {:<17} {:<4} ${:.2}  by {}",
                        s.id,
                        s.forge,
                        s.repo,
                        s.issue_number,
                        s.state,
                        version,
                        s.cost_microusd as f64 / 1_000_000.0,
                        s.triggered_by
                    );
                }
            }
            Ok(())
        }
        Command::Distill { .. }
        | Command::Solve { .. }
        | Command::Sandbox { .. }
        | Command::Contract { .. }
        | Command::Doctor => Ok(()),
        Command::Deliveries { json, limit } => {
            let db = Db::connect(&settings.database_url).await?;
            let rows = deliveries::list(&db, i64::from(limit)).await.context(
                "Could not list deliveries (has `planwright migrate` run on this database?)",
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                println!("no deliveries");
            } else {
                for d in rows {
                    let event = match &d.action {
                        Some(a) => format!("{}.{a}", d.event),
                        None => d.event.clone(),
                    };
                    println!(
                        "{}  {:<6} {:<40} {:<8} jobs={} {}{}",
                        d.id,
                        d.forge,
                        event,
                        d.status,
                        d.jobs,
                        d.repo.as_deref().unwrap_or("-"),
                        d.error.map(|e| format!("  ({e})")).unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
    }
}

fn distill(
    format: Option<Format>,
    command: Option<&str>,
    json: bool,
    markdown: bool,
    file: Option<&std::path::Path>,
) -> Result<()> {
    use std::io::Write;
    let report = match file {
        Some(path) if path.as_os_str() != "-" => {
            let f = std::fs::File::open(path)
                .with_context(|| format!("Could not open {}", path.display()))?;
            distill::distill(f, format, command)
                .with_context(|| format!("Could not read {}", path.display()))?
        }
        _ => distill::distill(std::io::stdin().lock(), format, command)
            .context("Could not read standard input")?,
    };
    let text = if json {
        serde_json::to_string_pretty(&report)?
    } else if markdown {
        distill::render::markdown(&report)
    } else {
        distill::render::compact(&report)
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")?;
    Ok(())
}

/// Prints one line per check; fails when any check does.
fn doctor(config: Option<&Path>) -> std::process::ExitCode {
    use planwright::doctor::{self, Status};
    let checks = match Settings::load(config) {
        Ok(settings) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("planwright: Could not start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let relay = std::env::current_exe().ok();
            let mut checks = doctor::settings(&settings);
            checks.extend(runtime.block_on(doctor::run(&settings, relay)));
            checks
        }
        Err(e) => vec![doctor::settings_failed(&e)],
    };
    for check in &checks {
        println!("{}", check.line());
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "planwright: Cannot run planwright here as configured: fix {} (see the FAIL lines above)",
            failed.join(", ")
        );
        std::process::ExitCode::FAILURE
    }
}

fn sandbox_run(
    command: SandboxCommand,
    config: Option<&std::path::Path>,
) -> Result<std::process::ExitCode> {
    use planwright::sandbox::{self, Exit, Sandbox, egress};
    use std::io::Write;
    let SandboxCommand::Run {
        workspace,
        network,
        allow,
        timeout,
        mut hide,
        command,
    } = command
    else {
        anyhow::bail!("Cannot run the relay as `sandbox run`");
    };
    let allowlist = match network {
        Network::None if !allow.is_empty() => {
            anyhow::bail!("Cannot use --allow without --network setup")
        }
        Network::None => None,
        Network::Setup => Some(egress::Allowlist::parse(&allow)?),
    };
    // Without its settings the sandbox would not know DATA_DIR or the key files, and
    // would show them.
    let settings = Settings::load(config).context(
        "Cannot run the sandbox without the settings, which say what it must hide: fix them \
         (`planwright doctor` lists the problems) and run again",
    )?;
    init_tracing(settings.log_format, "info");
    hide.extend(sandbox::hidden_paths(&settings));
    let bwrap = sandbox::Bwrap::new(hide)?;
    let mut cmd = sandbox::Command::new(workspace, command);
    cmd.limits.wall = std::time::Duration::from_secs(timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("Could not start the async runtime")?;
    let out = runtime.block_on(async {
        let Some(allowlist) = allowlist else {
            return bwrap.run(&cmd).await.map_err(anyhow::Error::from);
        };
        // A folder of its own the sandbox user can enter, removed afterwards.
        let dir = std::env::temp_dir().join(format!("planwright-egress-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).with_context(|| format!("Could not create {}", dir.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("Could not open {} to the sandbox", dir.display()))?;
        }
        let result = async {
            let proxy =
                egress::EgressProxy::start(&dir.join("egress.sock"), allowlist, "sandbox-run")
                    .await?;
            cmd.bridge_egress_proxy(proxy.socket());
            Ok(bwrap.run(&cmd).await?)
        }
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        result
    })?;
    std::io::stdout().lock().write_all(&out.stdout.bytes)?;
    let mut stderr = std::io::stderr().lock();
    stderr.write_all(&out.stderr.bytes)?;
    let exit = match out.exit {
        Exit::Code(c) => format!("exit code {c}"),
        Exit::Signal(s) => format!("signal {s}"),
    };
    writeln!(
        stderr,
        "planwright: {exit}{} after {:.1}s; output dropped beyond the cap: stdout {} bytes, stderr {} bytes",
        if out.timed_out { " (timed out)" } else { "" },
        out.duration.as_secs_f64(),
        out.stdout.dropped(),
        out.stderr.dropped()
    )?;
    Ok(match out.exit {
        Exit::Code(c) => std::process::ExitCode::from(u8::try_from(c).unwrap_or(1)),
        Exit::Signal(s) => std::process::ExitCode::from(u8::try_from(128 + s).unwrap_or(1)),
    })
}

/// Logs on standard error at `level` unless PLANWRIGHT_LOG or RUST_LOG say otherwise.
fn init_tracing(format: LogFormat, level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PLANWRIGHT_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(level));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal, not in captured logs.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// `solve`: 0 when the run passed, 1 when it did not (or was declined), 2 on bad input,
/// 130 when interrupted.
fn solve(
    config: Option<&Path>,
    repo: PathBuf,
    issue_file: Option<PathBuf>,
    issue: Option<String>,
    approve: bool,
) -> std::process::ExitCode {
    use planwright::forge::local::LocalIssue;
    use planwright::solve::{self, Ended, SolveError};
    use std::process::ExitCode;
    let issue = match (issue_file, issue) {
        (Some(file), None) => LocalIssue::from_file(&file),
        (None, Some(text)) => LocalIssue::parse(&text),
        _ => Err(anyhow::anyhow!(
            "Cannot tell what the issue is: give either --issue-file or --issue"
        )),
    };
    let issue = match issue {
        Ok(i) => i,
        Err(e) => {
            eprintln!("planwright: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("planwright: Could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let opened = solve::open(solve::Request {
            repo,
            issue,
            approve,
        })
        .await?;
        let settings = Settings::load_with_data_dir(config, &opened.default_data_dir)
            .map_err(SolveError::Input)?;
        // Progress lines tell the story; the log speaks up only for problems.
        init_tracing(settings.log_format, "warn");
        for warning in &settings.warnings {
            tracing::warn!("{warning}");
        }
        solve::run(settings, opened).await
    });
    // The runtime would otherwise wait for the stdin reader of an unanswered question.
    runtime.shutdown_background();
    match result {
        Ok(Ended::Passed { branch, report }) => {
            println!("planwright: the run passed.");
            println!("branch: {branch}");
            println!("report: {}", report.display());
            ExitCode::SUCCESS
        }
        Ok(Ended::Failed {
            reason,
            branch,
            report,
        }) => {
            println!("planwright: the run did not pass: {reason}");
            if let Some(branch) = branch {
                println!("branch: {branch}");
            }
            if let Some(report) = report {
                println!("report: {}", report.display());
            }
            ExitCode::FAILURE
        }
        Ok(Ended::Declined) => ExitCode::FAILURE,
        Ok(Ended::Interrupted) => ExitCode::from(130),
        Err(SolveError::Input(e)) => {
            eprintln!("planwright: {e:#}");
            ExitCode::from(2)
        }
        Err(SolveError::Failed(e)) => {
            eprintln!("planwright: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `contract validate`: 0 valid, 1 invalid (problems on stderr), 2 unreadable.
fn contract_validate(file: &Path) -> std::process::ExitCode {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("planwright: Could not read {}: {e}", file.display());
            return std::process::ExitCode::from(2);
        }
    };
    match planwright::contract::Contract::from_json(&text) {
        Ok(contract) => {
            println!(
                "valid: {} file(s) to change, risk {}",
                contract.change.files.len(),
                contract.routing.risk.as_str()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(invalid) => {
            eprint!("{invalid}");
            std::process::ExitCode::FAILURE
        }
    }
}
