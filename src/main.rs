//! The `planwright` command line: parses it and hands off to [`planwright::cli`].

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use clap::Parser;

fn main() -> std::process::ExitCode {
    planwright::cli::run(planwright::cli::Cli::parse())
}
