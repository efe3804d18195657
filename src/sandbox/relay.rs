//! The inside end of a bridge: `planwright sandbox relay` listens on loopback ports in the
//! sandbox's own network namespace and copies each connection to a host Unix socket
//! mounted in, then confines itself (Landlock) and becomes the sandboxed command. The relay
//! dies with the sandbox's pid namespace.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

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

/// Listens on `127.0.0.1:PORT` for every bridge and forks the server off, so the command
/// never races the relay. No new program is started: inside an image root the relay runs
/// through the host's loader (see `carry.rs`), which `/proc/self/exe` would name instead.
fn start(bridges: &[(u16, PathBuf)]) -> Result<()> {
    let mut listeners = Vec::with_capacity(bridges.len());
    for (port, socket) in bridges {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, *port))
            .with_context(|| format!("Could not listen on 127.0.0.1:{port}"))?;
        listener
            .set_nonblocking(true)
            .context("Could not make the listener non-blocking")?;
        listeners.push((listener, socket.clone()));
    }
    // Twice: the server becomes a child of the sandbox's init rather than of the command,
    // which then has no child it did not start; init's exit takes it down with the rest.
    // SAFETY: the relay has no other thread (its runtime starts in the server), so the
    // children may run any code.
    let middle = unsafe { libc::fork() };
    match middle {
        -1 => return Err(std::io::Error::last_os_error()).context("Could not fork the relay"),
        0 => {
            // SAFETY: as above; `_exit` skips what the parent still owns.
            match unsafe { libc::fork() } {
                0 => {
                    if let Err(e) = serve(listeners) {
                        eprintln!("planwright relay: {e:#}");
                    }
                    unsafe { libc::_exit(1) }
                }
                -1 => unsafe { libc::_exit(1) },
                _ => unsafe { libc::_exit(0) },
            }
        }
        _ => {}
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above, into a local.
    if unsafe { libc::waitpid(middle, &mut status, 0) } != middle
        || !libc::WIFEXITED(status)
        || libc::WEXITSTATUS(status) != 0
    {
        bail!("Could not start the relay for the bridged ports (status {status})");
    }
    Ok(())
}

/// Relays connections on `listeners` until killed.
fn serve(listeners: Vec<(TcpListener, PathBuf)>) -> Result<()> {
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
