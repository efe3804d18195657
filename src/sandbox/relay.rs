//! The inside end of a bridge: `planwright sandbox relay` listens on loopback ports in the
//! sandbox's own network namespace and copies each connection to a host Unix socket
//! mounted in, then confines itself (Landlock) and becomes the sandboxed command. The relay
//! dies with the sandbox's pid namespace.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

/// What the serving process prints once every port listens.
const READY: &str = "ready";

/// Parses a `PORT=SOCKET` argument of `--bridge`.
pub fn parse_bridge(arg: &str) -> Result<(u16, PathBuf), String> {
    let (port, socket) = arg
        .split_once('=')
        .ok_or_else(|| format!("Cannot use `{arg}` as a bridge: expected PORT=SOCKET"))?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("Cannot use `{port}` as a bridge port: expected 1 to 65535"))?;
    if socket.is_empty() {
        return Err(format!(
            "Cannot use `{arg}` as a bridge: the socket path is empty"
        ));
    }
    Ok((port, PathBuf::from(socket)))
}

/// Starts the relay for `bridges` and, once it listens, replaces this process with
/// `command`, allowed to write beneath `writable` only (where the kernel supports
/// Landlock). Returns only on failure.
pub fn enter(
    bridges: &[(u16, PathBuf)],
    writable: &[PathBuf],
    command: &[String],
) -> anyhow::Error {
    if let Err(e) = start(bridges) {
        return e;
    }
    // After the relay started: it stays outside the domain, beyond the command's signals.
    let writable: Vec<&std::path::Path> = writable.iter().map(PathBuf::as_path).collect();
    if let Err(e) = super::landlock::restrict_writes(&writable) {
        return e;
    }
    let Some((program, args)) = command.split_first() else {
        return anyhow::anyhow!("Cannot start the command: none was given");
    };
    let err = std::process::Command::new(program).args(args).exec();
    anyhow::Error::new(err).context(format!("Could not run {program}"))
}

/// Runs `planwright sandbox relay` without a command (see [`serve`]) and waits until it
/// says every port listens, so the command never races the relay.
fn start(bridges: &[(u16, PathBuf)]) -> Result<()> {
    // The relay is a copy bubblewrap made from a descriptor, which has no path of its own
    // to look up; the kernel's link to the running program always leads to it.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    if let Some(name) = std::env::args_os().next() {
        cmd.arg0(name);
    }
    cmd.args(["sandbox", "relay"]);
    for (port, socket) in bridges {
        cmd.arg("--bridge")
            .arg(format!("{port}={}", socket.display()));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("Could not start the relay")?;
    let stdout = child
        .stdout
        .take()
        .context("The relay's stdout is not piped")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("Could not read from the relay")?;
    // The first process only forks the server off and exits (see `serve`).
    let status = child.wait().context("Could not wait for the relay")?;
    if line.trim_end() != READY || !status.success() {
        bail!("Could not start the relay for the bridged ports ({status})");
    }
    Ok(())
}

/// Listens on `127.0.0.1:PORT` for every bridge, detaches, reports readiness on stdout and
/// relays connections until killed.
pub fn serve(bridges: &[(u16, PathBuf)]) -> Result<()> {
    let mut listeners = Vec::with_capacity(bridges.len());
    for (port, socket) in bridges {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, *port))
            .with_context(|| format!("Could not listen on 127.0.0.1:{port}"))?;
        listener
            .set_nonblocking(true)
            .context("Could not make the listener non-blocking")?;
        listeners.push((listener, socket.clone()));
    }
    // Detach: the server becomes a child of the sandbox's init rather than of the command,
    // which then has no child it did not start; init's exit takes it down with the rest.
    // SAFETY: no other thread exists yet (the runtime starts below), so the child may run
    // any code.
    match unsafe { libc::fork() } {
        -1 => return Err(std::io::Error::last_os_error()).context("Could not fork the relay"),
        0 => {}
        _ => return Ok(()),
    }
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{READY}").context("Could not report readiness")?;
        stdout.flush().context("Could not report readiness")?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("Could not start the relay's runtime")?;
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for (listener, socket) in listeners {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            tasks.spawn(relay_port(listener, socket));
        }
        while let Some(done) = tasks.join_next().await {
            done.context("A relay task failed")??;
        }
        Ok(())
    })
}

async fn relay_port(listener: tokio::net::TcpListener, socket: PathBuf) -> Result<()> {
    loop {
        let (mut tcp, _) = listener
            .accept()
            .await
            .context("Could not accept a connection")?;
        let socket = socket.clone();
        tokio::spawn(async move {
            match tokio::net::UnixStream::connect(&socket).await {
                Ok(mut unix) => {
                    // A reset on either side only ends this connection.
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
                Err(e) => eprintln!(
                    "planwright relay: Could not reach {}: {e}",
                    socket.display()
                ),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_arguments() {
        assert_eq!(
            parse_bridge("8089=/run/planwright/bridge-8089.sock").unwrap(),
            (8089, PathBuf::from("/run/planwright/bridge-8089.sock"))
        );
        for bad in ["8089", "0=/s", "70000=/s", "x=/s", "80="] {
            assert!(parse_bridge(bad).is_err(), "{bad}");
        }
    }
}
