//! `planwright docs write`: writes the reference pages under `docs/reference/` from the
//! code's own definitions (see [`crate::docs`]). Hidden: it is for working on planwright,
//! from a checkout of its repository.

use std::path::PathBuf;

use clap::Subcommand;

use super::exit::{Error, ExitStatus};

#[derive(Subcommand)]
pub(super) enum DocsCommand {
    /// Write the reference pages (settings, repository configuration, command line,
    /// metrics) under the repository's top folder.
    Write {
        /// The repository's top folder.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
}

pub(super) fn run(command: DocsCommand, cli: &clap::Command) -> Result<ExitStatus, Error> {
    let DocsCommand::Write { root } = command;
    if !root.join("Cargo.toml").is_file() {
        return Err(Error::Input(anyhow::anyhow!(
            "{} is not planwright's repository (no Cargo.toml): run this from its top folder or pass --root",
            root.display()
        )));
    }
    let pages = crate::docs::pages(cli);
    let changed = crate::docs::write(&root, &pages)?;
    for page in &pages {
        let state = if changed.contains(&page.path) {
            "written"
        } else {
            "unchanged"
        };
        println!("{}: {state}", page.path);
    }
    Ok(ExitStatus::Success)
}
