//! What a run gives back: how it ended and what it wrote.

use std::path::PathBuf;
use std::time::Duration;

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Killed by this signal. bwrap reports a signal as exit code 128 + N, as shells do,
    /// so a command that itself exits with such a code reads as a signal too.
    Signal(i32),
}

impl Exit {
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

/// One output stream, kept up to the cap.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// The first bytes of the stream, at most `Limits::output_bytes`.
    pub bytes: Vec<u8>,
    /// Bytes the command wrote in all.
    pub total: u64,
    /// The file holding the stream past the cap (from its start), when one was written.
    pub spilled: Option<PathBuf>,
}

impl Captured {
    /// Bytes not kept in memory.
    pub fn dropped(&self) -> u64 {
        self.total.saturating_sub(self.bytes.len() as u64)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

#[derive(Debug, Clone)]
pub struct Output {
    pub exit: Exit,
    /// The wall-clock limit was reached and every process of the run was killed.
    pub timed_out: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

impl Output {
    /// How the command ended, in the words a model or a log reads: its exit code, the
    /// signal that killed it, or the wall-clock limit it reached (`wall`).
    pub fn status_text(&self, wall: Duration) -> String {
        if self.timed_out {
            format!("timed out after {}s and was killed", wall.as_secs())
        } else {
            match self.exit {
                Exit::Code(code) => format!("exit code {code}"),
                Exit::Signal(signal) => format!("killed by signal {signal}"),
            }
        }
    }

    /// Why the command never ran, if it did not: bubblewrap prints `bwrap: …` and exits
    /// 1 when it cannot set the sandbox up (a folder it cannot reach, a namespace the
    /// host refuses), and a shell exits 126 or 127 when the program cannot be executed
    /// or is not there.
    pub fn not_started(&self) -> Option<String> {
        let stderr = self.stderr.text();
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        match self.exit {
            Exit::Code(1) if self.stdout.total == 0 && first.starts_with("bwrap: ") => {
                Some(format!("the sandbox could not start it ({})", first.trim()))
            }
            Exit::Code(126) => Some("its program could not be executed (exit 126)".to_owned()),
            Exit::Code(127) => Some("its program was not found (exit 127)".to_owned()),
            _ => None,
        }
    }
}
