//! `git` on the command line as planwright runs it: nothing from the caller's
//! environment or config, a time limit, and what git said kept short.

use std::path::Path;
use std::time::Duration;

/// Runs `command` to its end, with `input` on its standard input, or kills it (and what
/// it started) after `timeout`. Keeps at most `GIT_SAID_BYTES` of what it writes to
/// standard error.
pub(super) fn output_within(
    mut command: std::process::Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    if input.is_some() {
        command.stdin(std::process::Stdio::piped());
    }
    let mut child = command
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run git: {e}"))?;
    let group = child.id() as libc::pid_t;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
    }
    let mut stderr = child.stderr.take();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.take(GIT_SAID_BYTES).read_to_end(&mut said);
            let _ = std::io::copy(pipe, &mut std::io::sink());
        }
        let _ = done.send(child.wait().map(|status| std::process::Output {
            status,
            stdout: Vec::new(),
            stderr: said,
        }));
    });
    match finished.recv_timeout(timeout) {
        Ok(output) => output.map_err(|e| format!("could not run git: {e}")),
        Err(_) => {
            // SAFETY: signals the process group this function started; no memory involved.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            // Reaped by the thread; a process that left the group and kept the pipe open
            // is not waited for.
            let _ = finished.recv_timeout(Duration::from_secs(10));
            Err(format!(
                "the fetch took longer than {} seconds and was stopped",
                timeout.as_secs()
            ))
        }
    }
}

/// What of git's standard error is kept for the error message.
const GIT_SAID_BYTES: u64 = 64 << 10;

/// `git` on `git_dir` with nothing from the caller's environment but the proxy and
/// certificate settings, no global or system config (whose credential helpers or
/// `insteadOf` rewrites would apply), and only the transports a forge remote uses.
pub(super) fn git_command(git_dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(git_dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ALLOW_PROTOCOL", "https:http:file")
        .stdin(std::process::Stdio::null());
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GIT_SSL_CAINFO",
    ] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// What git said, in one bounded line: its last few lines of error output.
pub(super) fn git_said(stderr: &str, status: std::process::ExitStatus) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("fatal: ")
                .trim_start_matches("error: ")
        })
        .filter(|l| !l.is_empty())
        .collect();
    let said = lines[lines.len().saturating_sub(3)..].join("; ");
    let said: String = said.chars().take(1000).collect();
    if said.is_empty() {
        format!("git fetch {status}")
    } else {
        said
    }
}
