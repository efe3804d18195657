//! How a command ended ([`ExitStatus`]) and why it stopped short ([`Error`]), which
//! `cli::run` turns into the process's exit code.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It did what it was asked (0).
    Success,
    /// It ran and the answer is no: a check failed, a contract is not valid, a run did
    /// not pass, or something failed on the way (1).
    Failure,
    /// What it was given cannot be worked with: the settings, a file, the issue (2).
    BadInput,
    /// Stopped with Ctrl-C (130, as shells report SIGINT).
    Interrupted,
    /// The status of a command run on the user's behalf, passed on.
    Code(u8),
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        match status {
            ExitStatus::Success => ExitCode::SUCCESS,
            ExitStatus::Failure => ExitCode::FAILURE,
            ExitStatus::BadInput => ExitCode::from(2),
            ExitStatus::Interrupted => ExitCode::from(130),
            ExitStatus::Code(code) => ExitCode::from(code),
        }
    }
}

/// Why a command stopped short; said on standard error as `planwright: …`.
#[derive(Debug)]
pub(super) enum Error {
    /// In what it was given (exits [`ExitStatus::BadInput`]).
    Input(anyhow::Error),
    /// On the way (exits [`ExitStatus::Failure`]).
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Self {
        Error::Failed(e)
    }
}
