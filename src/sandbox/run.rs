//! What a sandbox is: the trait every implementation fulfils, and the failures a caller
//! branches on.

use async_trait::async_trait;

use super::command::Command;
use super::output::Output;

/// Failures a caller branches on: a missing sandbox is the operator's to fix, a bad
/// command is the caller's; anything else is internal.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("The sandbox is not available here: {0}")]
    Unavailable(String),
    #[error("Cannot run this command: {0}")]
    InvalidCommand(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The setting value that selects this sandbox (`bwrap`, `none`).
    fn name(&self) -> &'static str;
    async fn run(&self, command: &Command) -> Result<Output, SandboxError>;
}
