//! What one CLI run needs ([`Launch`]) and the command line made from it ([`Invocation`]).

use std::path::{Path, PathBuf};

use crate::sandbox::Root;

/// What one run needs. Paths are as the sandbox sees them, which for the workspace is
/// where it is on the host.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The CLI's executable on the host; the sandbox brings it in with what it needs to
    /// run in any root (`sandbox::carry`).
    pub program: &'a Path,
    /// The model id as its provider names it (`claude-sonnet-4-5`, `gpt-5`).
    pub model: &'a str,
    /// The rendered contract.
    pub prompt: &'a str,
    /// The run's `HOME` inside the sandbox's workspace, outside the checkout.
    pub home: &'a Path,
    /// Host folders shown read-only at the same path (the checkout's shared history).
    pub read_only: &'a [PathBuf],
    /// The sandbox's `/`: the environment image's root, or `None` for the host's.
    pub environment: Option<&'a Root>,
}

#[derive(Debug, Clone)]
pub struct Invocation {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Static host programs the CLI starts by path (see `sandbox::Command::carry`).
    pub carry: Vec<PathBuf>,
    /// What the command reads on its stdin.
    pub prompt: String,
}
