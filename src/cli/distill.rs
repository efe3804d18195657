//! `planwright distill`: summarises test-runner or command output from a file or
//! standard input, compact for models, as markdown or as JSON.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::distill::{self, Format};

use super::exit::ExitStatus;

pub(super) fn run(
    format: Option<Format>,
    command: Option<&str>,
    json: bool,
    markdown: bool,
    file: Option<&Path>,
) -> anyhow::Result<ExitStatus> {
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
    Ok(ExitStatus::Success)
}
