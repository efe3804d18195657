//! `planwright contract validate`: checks a contract's JSON as `submit_contract` does
//! and lists every problem with its path: 0 valid, 1 invalid, 2 unreadable.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::contract::Contract;

use super::{Error, ExitStatus};

#[derive(Subcommand)]
pub(super) enum ContractCommand {
    /// Check a contract's JSON (what `submit_contract` receives): every problem is listed
    /// with its path; exit 1 when there is any.
    Validate {
        /// The JSON file; `-` reads standard input.
        file: PathBuf,
    },
}

pub(super) fn run(command: ContractCommand) -> Result<ExitStatus, Error> {
    let ContractCommand::Validate { file } = command;
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(&file)
    };
    let text =
        text.map_err(|e| Error::Input(anyhow::anyhow!("Could not read {}: {e}", file.display())))?;
    match Contract::from_json(&text) {
        Ok(contract) => {
            println!(
                "valid: {} file(s) to change, risk {}",
                contract.change.files.len(),
                contract.routing.risk.as_str()
            );
            Ok(ExitStatus::Success)
        }
        Err(invalid) => {
            eprint!("{invalid}");
            Ok(ExitStatus::Failure)
        }
    }
}
