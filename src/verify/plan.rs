//! What verification runs: the commands from the contract and the repository's settings,
//! each on the base commit and on the result.

use std::collections::{HashMap, HashSet};

use super::runs::{Phase, RunSet};
use crate::config::repo::{ALL_PATHS, PathTests, RepoConfig};
use crate::contract::{Contract, TestChangeKind};
use crate::git::ChangedFile;
use crate::repo_tools::PathGlob;

/// What verification runs, from the contract and the repository's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The repository's `setup` commands: the only ones with network, through the egress
    /// proxy and `network_allow`.
    pub setup: Vec<String>,
    /// The contract's verification commands, then the repository's `test` commands that
    /// apply (all of a list; those of the globs `chosen` names), each once.
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
    /// Tests (or test files) the contract's `test_changes` allow removing: failing on the
    /// base and no longer run, they neither block nor count as fixed.
    pub removable: Vec<String>,
    /// What runs whatever a result changes: the contract's commands and a `test` list.
    pub always: Vec<String>,
    /// The repository's `test` commands keyed by path globs, to choose from again once a
    /// result's diff says which paths it touches.
    pub by_path: Vec<PathTests>,
    /// The globs of `by_path` that chose commands in `checks`: matched by the paths the
    /// contract declares (before the result exists) or by those the result changed.
    pub chosen: Vec<PathTests>,
}

impl Plan {
    /// The plan before the result exists: the path-keyed commands are chosen by what the
    /// contract says it will change (its files and its new tests).
    pub fn new(contract: &Contract, config: &RepoConfig) -> Plan {
        let always: Vec<String> = contract
            .verification
            .commands
            .iter()
            .chain(config.test.always())
            .cloned()
            .collect();
        let mut protected = config.protected_paths.clone();
        for path in ALL_PATHS {
            if !protected.iter().any(|p| p == path) {
                protected.push((*path).to_owned());
            }
        }
        let plan = Plan {
            setup: config
                .setup
                .iter()
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect(),
            checks: Vec::new(),
            network_allow: config.network_allow.clone(),
            protected,
            flaky_reruns: config.flaky_reruns,
            quarantine: config.quarantine.clone(),
            expects_tests: !contract.verification.new_tests.is_empty(),
            removable: contract
                .verification
                .test_changes
                .iter()
                .filter(|t| t.kind == TestChangeKind::Remove)
                .map(|t| t.test.clone().unwrap_or_else(|| t.normalised_path()))
                .collect(),
            always,
            by_path: config.test.by_path().to_vec(),
            chosen: Vec::new(),
        };
        plan.choose_by(&declared_paths(contract))
    }

    /// The plan for a result: the path-keyed commands are chosen by the files its diff
    /// touches.
    pub fn for_result(&self, changed: &[ChangedFile]) -> Plan {
        let paths: Vec<String> = changed.iter().map(|c| c.path.clone()).collect();
        self.choose_by(&paths)
    }

    /// The checks of this plan that `base` holds no run of: what the base must still run
    /// before the result compares against it.
    pub fn missing_from(&self, base: &RunSet) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| base.find(Phase::Check, c).is_none())
            .cloned()
            .collect()
    }

    /// This plan running `checks` instead: the commands a baseline holds, for its key.
    pub fn with_checks(&self, checks: Vec<String>) -> Plan {
        Plan {
            checks,
            ..self.clone()
        }
    }

    fn choose_by(&self, paths: &[String]) -> Plan {
        let chosen: Vec<PathTests> = self
            .by_path
            .iter()
            .filter(|rule| {
                let glob = PathGlob::new(&rule.glob);
                paths.iter().any(|p| touches(&glob, &rule.glob, p))
            })
            .cloned()
            .collect();
        // Commands that differ only in spacing run the same thing, under the spelling met
        // first in the whole plan: the base's runs and the result's then name it alike,
        // whichever globs chose it.
        let spaced = |c: &str| c.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut spelling: HashMap<String, &str> = HashMap::new();
        for command in self
            .always
            .iter()
            .chain(self.by_path.iter().flat_map(|c| &c.commands))
        {
            spelling.entry(spaced(command)).or_insert(command.trim());
        }
        let mut checks: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for command in self
            .always
            .iter()
            .chain(chosen.iter().flat_map(|c| &c.commands))
        {
            let key = spaced(command);
            if !key.is_empty() && seen.insert(key.clone()) {
                checks.push(
                    spelling
                        .get(&key)
                        .copied()
                        .unwrap_or(command.trim())
                        .to_owned(),
                );
            }
        }
        Plan {
            checks,
            chosen,
            ..self.clone()
        }
    }

    /// What decides a baseline's runs, hashed: under the same key, running the base again
    /// would only repeat them. `repository` is the repository's scope (its forge and forge
    /// id: `ids::RepoScope`), so one repository never finds another's runs; `environment`
    /// names the image digest (or the host); a new planwright version reads output anew,
    /// so it starts afresh.
    pub fn baseline_key(&self, repository: &str, base_sha: &str, environment: &str) -> String {
        use sha2::Digest as _;
        let decided = serde_json::json!({
            "planwright": env!("CARGO_PKG_VERSION"),
            "repository": repository,
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

/// The paths a contract says its result touches: its files (a folder ends in `/`) and
/// the files its new tests live in (`tests/parse.rs::empty` → `tests/parse.rs`).
fn declared_paths(contract: &Contract) -> Vec<String> {
    let files = contract.change.files.iter().map(|f| f.path.as_str());
    let tests = contract
        .verification
        .new_tests
        .iter()
        .map(|t| t.split("::").next().unwrap_or(t));
    files
        .chain(tests)
        .map(|p| p.trim().trim_start_matches("./").to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Whether `path` falls under `glob`; a declared folder (`services/api/`) does when the
/// glob matches a file in it or names a path inside it.
fn touches(glob: &PathGlob, pattern: &str, path: &str) -> bool {
    match path.strip_suffix('/') {
        None => glob.matches(path),
        Some(folder) => {
            glob.matches(&format!("{folder}/any-file"))
                || pattern
                    .trim_start_matches("./")
                    .starts_with(&format!("{folder}/"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::repo::RootFiles;
    use crate::git::{ChangeKind, ChangedFile};

    fn monorepo() -> RepoConfig {
        let text = "test:\n  \"services/api/**\": [\"cd services/api && npm test\"]\n  \"services/web/**\": [\"cd services/web && npm test\", \"make test\"]\n  \"**/*.md\": [\"mdlint\"]\n  \"**\": [\"make  test\"]\n";
        RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap()
    }

    fn declaring(files: &[&str], new_tests: &[&str]) -> Contract {
        let files: Vec<serde_json::Value> = files
            .iter()
            .map(|p| serde_json::json!({"path": p, "action": "modify", "why": "w"}))
            .collect();
        Contract::from_value(serde_json::json!({
            "summary": "s",
            "diagnosis": {"hypothesis": "h"},
            "change": {"goal": "g", "files": files},
            "verification": {"commands": ["./check-contract"], "new_tests": new_tests},
            "routing": {"risk": "low"}
        }))
        .unwrap()
    }

    fn modified(paths: &[&str]) -> Vec<ChangedFile> {
        paths
            .iter()
            .map(|p| ChangedFile {
                path: (*p).into(),
                change: ChangeKind::Modified,
            })
            .collect()
    }

    fn globs(plan: &Plan) -> Vec<&str> {
        plan.chosen.iter().map(|c| c.glob.as_str()).collect()
    }

    #[test]
    fn the_base_runs_what_the_contract_declares_and_the_result_what_it_changed() {
        let config = monorepo();
        let plan = Plan::new(&declaring(&["services/api/src/app.ts"], &[]), &config);
        assert_eq!(globs(&plan), ["services/api/**", "**"]);
        assert_eq!(
            plan.checks,
            [
                "./check-contract",
                "cd services/api && npm test",
                "make test"
            ]
        );
        // A result that also touched the web app and a README runs theirs, each command
        // once, spelt alike whichever glob chose it (`make  test` is `make test`).
        let result = plan.for_result(&modified(&["services/web/a.ts", "services/api/README.md"]));
        assert_eq!(
            globs(&result),
            ["services/api/**", "services/web/**", "**/*.md", "**"]
        );
        assert_eq!(
            result.checks,
            [
                "./check-contract",
                "cd services/api && npm test",
                "cd services/web && npm test",
                "make test",
                "mdlint"
            ]
        );
        // Chosen again from the rules, not from what the base ran.
        let narrow = result.for_result(&modified(&["Makefile"]));
        assert_eq!(narrow.checks, ["./check-contract", "make test"]);
    }

    #[test]
    fn new_tests_and_declared_folders_choose_too() {
        let config = monorepo();
        let plan = Plan::new(
            &declaring(
                &["services/web/"],
                &["services/api/test/parse.test.ts::empty"],
            ),
            &config,
        );
        assert_eq!(globs(&plan), ["services/api/**", "services/web/**", "**"]);
        let plan = Plan::new(&declaring(&["Makefile"], &[]), &config);
        assert_eq!(globs(&plan), ["**"]);
        assert_eq!(plan.checks, ["./check-contract", "make test"]);
    }

    #[test]
    fn what_the_base_still_has_to_run_and_its_key() {
        let config = monorepo();
        let base_plan = Plan::new(&declaring(&["services/api/x.ts"], &[]), &config);
        let result = base_plan.for_result(&modified(&["services/web/x.ts"]));
        let ran = |commands: &[String]| super::RunSet {
            runs: commands
                .iter()
                .map(|c| super::super::CommandRun {
                    command: c.clone(),
                    phase: Phase::Check,
                    summary: super::super::RunSummary {
                        exit_code: Some(0),
                        signal: None,
                        timed_out: false,
                        duration_ms: 1,
                        runner: "generic".into(),
                        passed: 0,
                        failed: 0,
                        skipped: 0,
                        errors: 0,
                        restored: false,
                        no_result: None,
                        unnamed: 0,
                    },
                    failures: vec![],
                    build_errors: vec![],
                    excerpt: String::new(),
                    selected: None,
                    could_not_select: false,
                    ids: Vec::new(),
                    confirms: false,
                    passing: Vec::new(),
                })
                .collect(),
            ..super::RunSet::default()
        };
        let mut base = ran(&base_plan.checks);
        assert_eq!(result.missing_from(&base), ["cd services/web && npm test"]);
        base.extend_checks(ran(&result.checks));
        assert!(result.missing_from(&base).is_empty());
        assert_eq!(base.runs.len(), 4, "each command once");
        // The grown baseline is keyed by every command it holds, so a later run whose
        // contract declares only the API keeps finding the API's baseline, not this one.
        let key = |plan: &Plan| plan.baseline_key("github:1296269", "abc", "host");
        let grown = base_plan.with_checks(base.checks());
        assert_ne!(key(&grown), key(&base_plan));
        assert_eq!(
            key(&base_plan.with_checks(base_plan.checks.clone())),
            key(&base_plan)
        );
    }

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
            removable: vec![],
            always: vec!["npm test".into()],
            by_path: vec![],
            chosen: vec![],
        };
        let key = plan.baseline_key("github:1296269", "abc", "host");
        assert_eq!(key, plan.baseline_key("github:1296269", "abc", "host"));
        let mut others = vec![
            plan.baseline_key("github:1296270", "abc", "host"),
            plan.baseline_key("github:1296269", "abd", "host"),
            plan.baseline_key("github:1296269", "abc", "sha256:00"),
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
            others.push(changed.baseline_key("github:1296269", "abc", "host"));
        }
        for other in &others {
            assert_ne!(*other, key);
        }
        // What a result may not touch does not change how the base runs.
        let mut protected = plan.clone();
        protected.protected.push("migrations/**".into());
        assert_eq!(protected.baseline_key("github:1296269", "abc", "host"), key);
    }
}
