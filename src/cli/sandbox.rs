//! `planwright sandbox`: `run` runs one command in the sandbox an executor would get;
//! `relay` is what that sandbox runs inside to reach bridged host sockets.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;

use crate::config::Settings;
use crate::environment::Environments;
use crate::ids::image::ImageRef;
use crate::sandbox::{self, Exit, Sandbox, egress, relay};

use super::exit::ExitStatus;

#[derive(Subcommand)]
pub(super) enum SandboxCommand {
    /// Run one command in the sandbox an executor would get, with DIR as its workspace.
    Run {
        /// The folder the command works in, as an executor's checkout.
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,
        #[command(flatten)]
        environment: Environment,
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
    /// then run the command.
    #[command(hide = true)]
    Relay {
        #[arg(long = "bridge", value_name = "PORT=SOCKET", value_parser = relay::parse_bridge, required = true)]
        bridges: Vec<(u16, PathBuf)>,
        /// A folder the command may write in; nothing else is writable (Landlock).
        #[arg(long)]
        writable: Vec<PathBuf>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// Where the sandbox's `/` comes from, as a run in an environment gets it; without any,
/// the host's own programs.
#[derive(clap::Args)]
pub(super) struct Environment {
    /// A root folder (an unpacked image's file system) shown read-only as `/`.
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    root: Option<PathBuf>,
    /// A variable of the root's own environment, as an image's `Env` sets it; its `PATH`
    /// comes before the sandbox's.
    #[arg(long = "root-env", value_name = "NAME=VALUE", requires = "root", value_parser = parse_variable)]
    root_env: Vec<(String, String)>,
    /// An environment image (`ghcr.io/acme/ci:1.4`, `debian:12`), pulled into
    /// DATA_DIR/environments/ as a run pulls it; its root is shown read-only as `/` with
    /// its `Env`.
    #[arg(long, value_name = "REF")]
    image: Option<ImageRef>,
}

impl Environment {
    fn into_root(self) -> Option<sandbox::Root> {
        self.root.map(|dir| sandbox::Root {
            dir,
            env: self.root_env,
        })
    }
}

fn parse_variable(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!(
            "Cannot use `{arg}` as a variable: expected NAME=VALUE"
        )),
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum Network {
    None,
    Setup,
}

pub(super) fn run(command: SandboxCommand, config: Option<&Path>) -> anyhow::Result<ExitStatus> {
    match command {
        SandboxCommand::Relay {
            bridges,
            writable,
            command,
        } => {
            let e = relay::enter(&bridges, &writable, &command);
            eprintln!("planwright: {e:#}");
            // As shells do when a command cannot be run.
            Ok(ExitStatus::Code(127))
        }
        SandboxCommand::Run {
            workspace,
            environment,
            network,
            allow,
            timeout,
            hide,
            command,
        } => {
            let mut cmd = sandbox::Command::new(workspace, command);
            let image = environment.image.clone();
            cmd.root = environment.into_root();
            cmd.limits.wall = std::time::Duration::from_secs(timeout);
            run_command(cmd, image, network, &allow, hide, config)
        }
    }
}

fn run_command(
    mut cmd: sandbox::Command,
    image: Option<ImageRef>,
    network: Network,
    allow: &[String],
    mut hide: Vec<PathBuf>,
    config: Option<&Path>,
) -> anyhow::Result<ExitStatus> {
    let allowlist = match network {
        Network::None if !allow.is_empty() => {
            anyhow::bail!("Cannot use --allow without --network setup")
        }
        Network::None => None,
        Network::Setup => Some(egress::Allowlist::parse(allow)?),
    };
    // Without its settings the sandbox would not know DATA_DIR or the key files, and
    // would show them.
    let settings = Settings::load(config).context(
        "Cannot run the sandbox without the settings, which say what it must hide: fix them \
         (`planwright doctor` lists the problems) and run again",
    )?;
    super::runtime::init_tracing(settings.log_format, "info");
    hide.extend(sandbox::hidden_paths(&settings));
    let bwrap = sandbox::Bwrap::new(hide)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("Could not start the async runtime")?;
    let out = runtime.block_on(async {
        // Held until the command ends: the cache evicts no image a lease is held on.
        let _lease = match image {
            Some(image) => {
                let lease = Environments::new(&settings.data_dir, &settings.images)?
                    .pull(&image)
                    .await?;
                cmd.root = Some(lease.sandbox_root());
                Some(lease)
            }
            None => None,
        };
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
    Ok(ExitStatus::Code(match out.exit {
        Exit::Code(c) => u8::try_from(c).unwrap_or(1),
        Exit::Signal(s) => u8::try_from(128 + s).unwrap_or(1),
    }))
}
