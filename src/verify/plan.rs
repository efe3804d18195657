//! What verification runs: the commands from the contract and the repository's settings,
//! each on the base commit and on the result.

use std::collections::HashSet;

use crate::config::repo::{ALL_PATHS, RepoConfig};
use crate::contract::Contract;

/// What verification runs, from the contract and the repository's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The repository's `setup` commands: the only ones with network, through the egress
    /// proxy and `network_allow`.
    pub setup: Vec<String>,
    /// The contract's verification commands, then the repository's `test` commands, each
    /// once.
    pub checks: Vec<String>,
    pub network_allow: Vec<String>,
    /// Globs no result may touch: the repository's `protected_paths` and planwright's own
    /// settings files, which are protected whatever `protected_paths` says.
    pub protected: Vec<String>,
}

impl Plan {
    pub fn new(contract: &Contract, config: &RepoConfig) -> Plan {
        let mut checks: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for command in contract
            .verification
            .commands
            .iter()
            .chain(config.test.iter())
        {
            // Commands that differ only in spacing run the same thing.
            let key = command.split_whitespace().collect::<Vec<_>>().join(" ");
            if !key.is_empty() && seen.insert(key) {
                checks.push(command.trim().to_owned());
            }
        }
        let mut protected = config.protected_paths.clone();
        for path in ALL_PATHS {
            if !protected.iter().any(|p| p == path) {
                protected.push((*path).to_owned());
            }
        }
        Plan {
            setup: config
                .setup
                .iter()
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect(),
            checks,
            network_allow: config.network_allow.clone(),
            protected,
        }
    }
}
