//! `planwright doctor`: one line per check of this deployment; fails when any check
//! does.

use std::path::Path;

use crate::config::Settings;
use crate::doctor::{self, Status};

use super::exit::ExitStatus;

pub(super) fn run(config: Option<&Path>) -> anyhow::Result<ExitStatus> {
    let checks = match Settings::load(config) {
        Ok(settings) => {
            let runtime = super::runtime::runtime()?;
            let relay = std::env::current_exe().ok();
            let mut checks = doctor::settings(&settings);
            checks.extend(runtime.block_on(doctor::run(&settings, relay)));
            checks
        }
        Err(e) => vec![doctor::settings_failed(&e)],
    };
    for check in &checks {
        println!("{}", check.line());
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        Ok(ExitStatus::Success)
    } else {
        eprintln!(
            "planwright: Cannot run planwright here as configured: fix {} (see the FAIL lines above)",
            failed.join(", ")
        );
        Ok(ExitStatus::Failure)
    }
}
