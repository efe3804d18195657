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
    /// Re-runs of a failing test, on the base and on the result, before it is flaky.
    pub flaky_reruns: u32,
    /// Tests whose failures neither block nor count as fixed; never re-run.
    pub quarantine: Vec<String>,
    /// The contract names new tests: a test runner that finds none fails.
    pub expects_tests: bool,
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
            flaky_reruns: config.flaky_reruns,
            quarantine: config.quarantine.clone(),
            expects_tests: !contract.verification.new_tests.is_empty(),
        }
    }

    /// What decides a baseline's runs, hashed: under the same key, running the base again
    /// would only repeat them. `environment` names the image digest (or the host); a new
    /// planwright version reads output anew, so it starts afresh.
    pub fn baseline_key(&self, repo: &str, base_sha: &str, environment: &str) -> String {
        use sha2::Digest as _;
        let decided = serde_json::json!({
            "planwright": env!("CARGO_PKG_VERSION"),
            "repo": repo,
            "base": base_sha,
            "environment": environment,
            "setup": self.setup,
            "checks": self.checks,
            "network_allow": self.network_allow,
            // The base's failing tests are re-run as these say.
            "flaky_reruns": self.flaky_reruns,
            "quarantine": self.quarantine,
        });
        hex::encode(sha2::Sha256::digest(decided.to_string().as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_key_changes_with_everything_that_decides_the_runs() {
        let plan = Plan {
            setup: vec!["npm ci".into()],
            checks: vec!["npm test".into()],
            network_allow: vec!["registry.npmjs.org".into()],
            protected: vec![],
            flaky_reruns: 2,
            quarantine: vec![],
            expects_tests: false,
        };
        let key = plan.baseline_key("github:o/r", "abc", "host");
        assert_eq!(key, plan.baseline_key("github:o/r", "abc", "host"));
        let mut others = vec![
            plan.baseline_key("github:o/other", "abc", "host"),
            plan.baseline_key("github:o/r", "abd", "host"),
            plan.baseline_key("github:o/r", "abc", "sha256:00"),
        ];
        for change in [
            |p: &mut Plan| p.setup.push("npm run build".into()),
            |p: &mut Plan| p.checks[0] = "npm run lint".into(),
            |p: &mut Plan| p.network_allow.clear(),
            |p: &mut Plan| p.flaky_reruns = 0,
            |p: &mut Plan| p.quarantine.push("t::flaky".into()),
        ] {
            let mut changed = plan.clone();
            change(&mut changed);
            others.push(changed.baseline_key("github:o/r", "abc", "host"));
        }
        for other in &others {
            assert_ne!(*other, key);
        }
        // What a result may not touch does not change how the base runs.
        let mut protected = plan.clone();
        protected.protected.push("migrations/**".into());
        assert_eq!(protected.baseline_key("github:o/r", "abc", "host"), key);
    }
}
