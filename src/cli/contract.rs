//! `planwright contract validate`: checks a contract's JSON as `submit_contract` does
//! and lists every problem with its path: 0 valid, 1 invalid, 2 unreadable.
//! `planwright contract diff A B`: what version B decides differently from version A,
//! section by section, as a revision's comment shows it: 0 the same, 1 different, 2 a file
//! unreadable or not a valid contract.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::contract::{Contract, ContractDiff};

use super::exit::{Error, ExitStatus};

#[derive(Subcommand)]
pub(super) enum ContractCommand {
    /// Check a contract's JSON (what `submit_contract` receives): every problem is listed
    /// with its path; exit 1 when there is any.
    Validate {
        /// The JSON file; `-` reads standard input.
        file: PathBuf,
    },
    /// What contract `new` decides differently from `old`: files, constraints,
    /// verification, expected behaviour, routing and budget; exit 1 when anything differs.
    Diff {
        /// The earlier version's JSON file; `-` reads standard input.
        old: PathBuf,
        /// The later version's JSON file.
        new: PathBuf,
    },
}

pub(super) fn run(command: ContractCommand) -> Result<ExitStatus, Error> {
    match command {
        ContractCommand::Validate { file } => validate(&file),
        ContractCommand::Diff { old, new } => diff(&old, &new),
    }
}

fn read(file: &Path) -> Result<String, Error> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    text.map_err(|e| Error::Input(anyhow::anyhow!("Could not read {}: {e}", file.display())))
}

fn diff(old: &Path, new: &Path) -> Result<ExitStatus, Error> {
    if old == Path::new("-") && new == Path::new("-") {
        return Err(Error::Input(anyhow::anyhow!(
            "Only one of the two contracts can come from standard input"
        )));
    }
    let parse = |file: &Path| -> Result<Contract, Error> {
        Contract::from_json(&read(file)?)
            .map_err(|invalid| Error::Input(anyhow::anyhow!("{}: {invalid}", file.display())))
    };
    let (old, new) = (parse(old)?, parse(new)?);
    let diff = ContractDiff::between(&old, &new);
    if diff.is_empty() {
        println!("no change in what the contract decides");
        return Ok(ExitStatus::Success);
    }
    print!("{}", diff.text());
    Ok(ExitStatus::Failure)
}

fn validate(file: &Path) -> Result<ExitStatus, Error> {
    let text = read(file)?;
    match Contract::from_json(&text) {
        Ok(contract) => {
            println!(
                "valid: {} file(s) to change, risk {}",
                contract.change.files.len(),
                contract.routing.risk.as_str()
            );
            // What approving it allows to happen to existing tests, for the one who approves.
            for t in &contract.verification.test_changes {
                let test = t.test.as_deref().map_or(String::new(), |t| format!(" {t}"));
                println!(
                    "allows {} in {}{test}: {}",
                    t.kind.as_str(),
                    t.normalised_path(),
                    t.why.trim()
                );
            }
            Ok(ExitStatus::Success)
        }
        Err(invalid) => {
            eprint!("{invalid}");
            Ok(ExitStatus::Failure)
        }
    }
}
