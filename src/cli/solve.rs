//! `planwright solve`: reads the issue, runs [`crate::solve`] on the local repository and
//! says how it ended: 0 when the run passed, 1 when it did not (or was declined), 2 on
//! bad input, 130 when interrupted.

use std::path::{Path, PathBuf};

use crate::config::Settings;
use crate::forge::local::LocalIssue;
use crate::solve::{self, Ended, SolveError};

use super::exit::{Error, ExitStatus};

impl From<SolveError> for Error {
    fn from(e: SolveError) -> Self {
        match e {
            SolveError::Input(e) => Error::Input(e),
            SolveError::Failed(e) => Error::Failed(e),
        }
    }
}

pub(super) fn run(
    config: Option<&Path>,
    repo: PathBuf,
    issue_file: Option<PathBuf>,
    issue: Option<String>,
    approve: bool,
) -> Result<ExitStatus, Error> {
    let issue = match (issue_file, issue) {
        (Some(file), None) => LocalIssue::from_file(&file),
        (None, Some(text)) => LocalIssue::parse(&text),
        _ => Err(anyhow::anyhow!(
            "Cannot tell what the issue is: give either --issue-file or --issue"
        )),
    }
    .map_err(Error::Input)?;
    let runtime = super::runtime::runtime()?;
    let result = runtime.block_on(async {
        let opened = solve::open(solve::Request {
            repo,
            issue,
            approve,
            quiet: false,
        })
        .await?;
        let settings = Settings::load_with_data_dir(config, &opened.default_data_dir)
            .map_err(SolveError::Input)?;
        // Progress lines tell the story; the log speaks up only for problems.
        super::runtime::init_tracing(settings.log_format, "warn");
        for warning in &settings.warnings {
            tracing::warn!("{warning}");
        }
        solve::run(settings, opened).await
    });
    // The runtime would otherwise wait for the stdin reader of an unanswered question.
    runtime.shutdown_background();
    match result? {
        Ended::Passed { branch, report } => {
            println!("planwright: the run passed.");
            println!("branch: {branch}");
            println!("report: {}", report.display());
            Ok(ExitStatus::Success)
        }
        Ended::Failed {
            reason,
            branch,
            report,
        } => {
            println!("planwright: the run did not pass: {reason}");
            if let Some(branch) = branch {
                println!("branch: {branch}");
            }
            if let Some(report) = report {
                println!("report: {}", report.display());
            }
            Ok(ExitStatus::Failure)
        }
        Ended::Declined => Ok(ExitStatus::Failure),
        Ended::Interrupted => Ok(ExitStatus::Interrupted),
    }
}
