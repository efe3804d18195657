//! A repository's own settings (`.github/planwright.yml`, `.gitlab/planwright.yml` or
//! `.planwright.yml`, read from the default branch for who may do what and from the base
//! commit for what runs): schema, defaults, errors that name the key and line, the test
//! command guessed from the repository when none is written, and the values an approval
//! binds.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::environment::{Choice, EnvironmentConfig, FileEnvironment};
use crate::ids::ModelName;
use crate::ids::Permission;

/// Every place the file may be, first found wins where no forge narrows it (each forge
/// names its own: `Forge::config_paths`).
pub const ALL_PATHS: &[&str] = &[
    ".planwright.yml",
    ".github/planwright.yml",
    ".gitlab/planwright.yml",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    Builtin,
    ClaudeCode,
    Codex,
    Command,
}

impl ExecutorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Builtin => "builtin",
            ExecutorKind::ClaudeCode => "claude-code",
            ExecutorKind::Codex => "codex",
            ExecutorKind::Command => "command",
        }
    }
}

/// What happens when execution or verification fails for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Open a draft PR with what was done and the failing report.
    DraftPr,
    /// Only explain on the issue.
    Comment,
}

/// The executor ladder a repository asks for: which executors and models a contract's
/// attempts may climb through after a verified failure.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Escalation {
    /// The settings say nothing: the deployment's `ESCALATE` decides.
    #[default]
    Unset,
    /// Every attempt runs on the one executor and model the contract's risk picks
    /// (`escalate: false`).
    Off,
    /// `escalate: true`: the executor models `low`, `medium` and `high` in that order,
    /// each with the repository's executor. The lines are those of `escalate` and of
    /// the three tiers' keys, for errors found later.
    Tiers {
        line: Option<usize>,
        tier_lines: [Option<usize>; 3],
    },
    /// `escalation: [...]`: these rungs, cheapest first.
    Rungs(Vec<RungSetting>),
}

/// One rung as `escalation` writes it, with the line it is written on.
#[derive(Debug, Clone, PartialEq)]
pub struct RungSetting {
    pub executor: ExecutorKind,
    pub model: ModelName,
    pub line: Option<usize>,
}

/// At most this many rungs: each is a dearer model to climb to.
pub const MAX_RUNGS: usize = 8;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Models {
    pub planner: Option<ModelName>,
    pub scout: Option<ModelName>,
    pub executor_low: Option<ModelName>,
    pub executor_medium: Option<ModelName>,
    pub executor_high: Option<ModelName>,
}

/// The settings in force for one repository: the file's values over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RepoConfig {
    pub label: String,
    pub min_permission: Permission,
    pub setup: Vec<String>,
    pub test: TestCommands,
    pub network_allow: Vec<String>,
    pub executor: ExecutorKind,
    /// The command line the `command` executor runs (`executor_command`).
    pub executor_command: Option<String>,
    pub models: Models,
    /// The executor ladder (`escalation` or `escalate`); planning fills it into the
    /// contract, which is what runs.
    pub escalation: Escalation,
    pub budget_usd: f64,
    pub max_attempts: u32,
    pub protected_paths: Vec<String>,
    pub on_failure: OnFailure,
    pub environment: EnvironmentConfig,
    /// Re-runs of a failing test before it is called flaky (0: none).
    pub flaky_reruns: u32,
    /// Tests known to be flaky: their failures neither block nor count as fixed.
    pub quarantine: Vec<String>,
    /// Rounds of questions the planner may ask before it plans (0: it never asks).
    pub max_questions: u32,
    /// Globs of the names of other checks whose failures on planwright's pull requests
    /// are not reported (`codecov/*`).
    pub ignore_checks: Vec<String>,
    /// How a contract's starting rung is chosen: `routing`, `routing_target`,
    /// `routing_min_runs`.
    pub routing: RoutingPolicy,
    /// The file it was read from; `None` when every value is a default.
    pub source: Option<String>,
}

/// How a contract's starting rung of the executor ladder is chosen. With `auto`, the
/// cheapest rung whose verified rate on this repository at the contract's risk has a
/// lower confidence bound of at least `target`, over at least `min_runs` attempts;
/// otherwise (and without `auto`) the rung the risk picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutingPolicy {
    pub auto: bool,
    /// The verified rate a rung's lower confidence bound must reach, between 0 and 1.
    pub target: f64,
    /// The attempts at a risk a rung needs on record before its rate is trusted.
    pub min_runs: u32,
}

/// Escalation stands behind a cheap start: a start that fails costs one cheap attempt
/// before the next rung, so a rung that is verified well over half the time pays for
/// itself against one that costs twice as much or more.
pub const DEFAULT_ROUTING_TARGET: f64 = 0.6;
/// Fewer attempts than this say more about luck than about the rung.
pub const DEFAULT_ROUTING_MIN_RUNS: u32 = 5;
const MAX_ROUTING_MIN_RUNS: u32 = 1_000;

impl Default for RoutingPolicy {
    fn default() -> Self {
        RoutingPolicy {
            auto: false,
            target: DEFAULT_ROUTING_TARGET,
            min_runs: DEFAULT_ROUTING_MIN_RUNS,
        }
    }
}

pub const DEFAULT_LABEL: &str = "planwright";
pub const DEFAULT_BUDGET_USD: f64 = 5.0;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
pub const DEFAULT_FLAKY_RERUNS: u32 = 2;
pub const DEFAULT_MAX_QUESTIONS: u32 = 1;
/// Each round waits on a person; past this the issue needs rewriting, not more questions.
pub const MAX_QUESTIONS: u32 = 5;
const MAX_IGNORED_CHECKS: usize = 100;
/// Each re-run costs a run of the failing tests; past this a test is flaky anyway.
pub const MAX_FLAKY_RERUNS: u32 = 5;
/// Entries of `quarantine`, and characters of one.
const MAX_QUARANTINED: usize = 1_000;
const MAX_TEST_ID: usize = 1_000;

/// The repository's `test` commands: one list every result runs, or lists keyed by path
/// globs (a monorepo's folders), each run when a result changes a file its glob matches.
/// Stored as the file writes it: a list as a list, globs as `{"by_path": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum TestCommands {
    Always(Vec<String>),
    ByPath { by_path: Vec<PathTests> },
}

/// One glob of `test` and the commands a change under it runs, in the file's order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathTests {
    pub glob: String,
    pub commands: Vec<String>,
}

impl Default for TestCommands {
    fn default() -> Self {
        TestCommands::Always(Vec::new())
    }
}

impl TestCommands {
    pub fn is_empty(&self) -> bool {
        match self {
            TestCommands::Always(list) => list.is_empty(),
            TestCommands::ByPath { by_path } => by_path.iter().all(|p| p.commands.is_empty()),
        }
    }

    /// The commands every result runs, whatever it changes.
    pub fn always(&self) -> &[String] {
        match self {
            TestCommands::Always(list) => list,
            TestCommands::ByPath { .. } => &[],
        }
    }

    /// The globs and their commands; none for the list form.
    pub fn by_path(&self) -> &[PathTests] {
        match self {
            TestCommands::Always(_) => &[],
            TestCommands::ByPath { by_path } => by_path,
        }
    }

    /// One line for a person or a model: `a; b`, or `` `glob`: a; b `` for each glob.
    pub fn describe(&self) -> String {
        match self {
            TestCommands::Always(list) => list.join("; "),
            TestCommands::ByPath { by_path } => by_path
                .iter()
                .map(|p| format!("changes under `{}`: {}", p.glob, p.commands.join("; ")))
                .collect::<Vec<_>>()
                .join(" — "),
        }
    }
}

impl RepoConfig {
    /// The settings when the repository has no file, with the commands guessed from `root`.
    pub fn defaults(root: &RootFiles) -> RepoConfig {
        let guess = detect(root);
        RepoConfig {
            label: DEFAULT_LABEL.to_owned(),
            min_permission: Permission::Write,
            setup: guess.setup,
            test: TestCommands::Always(guess.test),
            network_allow: guess.network_allow,
            executor: ExecutorKind::Builtin,
            executor_command: None,
            models: Models::default(),
            escalation: Escalation::Unset,
            budget_usd: DEFAULT_BUDGET_USD,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            protected_paths: vec![
                ".github/workflows/**".to_owned(),
                ".gitlab-ci.yml".to_owned(),
            ],
            on_failure: OnFailure::DraftPr,
            environment: EnvironmentConfig::default(),
            flaky_reruns: DEFAULT_FLAKY_RERUNS,
            quarantine: Vec::new(),
            max_questions: DEFAULT_MAX_QUESTIONS,
            ignore_checks: Vec::new(),
            routing: RoutingPolicy::default(),
            source: None,
        }
    }

    /// Reads a file's text over the defaults. Keys left out keep their default (the guessed
    /// commands included); every error names the file, line and key. The phases run in the
    /// file's key order, so that of several bad values the same one is always reported.
    pub fn parse(text: &str, path: &str, root: &RootFiles) -> Result<RepoConfig, ConfigError> {
        let mut config = RepoConfig::defaults(root);
        if text.trim().is_empty() {
            config.source = Some(path.to_owned());
            return Ok(config);
        }
        let mut file = read_file(text, path)?;
        let at = |key: &str, message: String| ConfigError {
            path: path.to_owned(),
            line: line_of(text, key),
            message: format!("`{key}`: {message}"),
        };
        config.apply_trigger(&mut file, &at)?;
        config.apply_commands(&mut file, &at)?;
        config.apply_models(&mut file, &at)?;
        config.apply_escalation(&mut file, text, &at)?;
        config.apply_run_limits(&mut file, &at)?;
        config.apply_results(&mut file, &at)?;
        config.apply_check_handling(&mut file, &at)?;
        config.apply_questions(&mut file, &at)?;
        config.apply_routing(&mut file, &at)?;
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// How the starting rung is chosen: `routing: auto` and its bar.
    fn apply_routing(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(mode) = file.routing.take() {
            self.routing.auto = match mode.trim() {
                "auto" => true,
                "static" => false,
                other => {
                    return Err(at(
                        "routing",
                        format!("`{other}` is not one of auto, static"),
                    ));
                }
            };
        }
        if let Some(target) = file.routing_target.take() {
            if !(target.is_finite() && target > 0.0 && target < 1.0) {
                return Err(at(
                    "routing_target",
                    "must be a share of attempts verified, more than 0 and less than 1 (e.g. 0.6)"
                        .into(),
                ));
            }
            self.routing.target = target;
        }
        if let Some(n) = file.routing_min_runs.take() {
            if !(1..=MAX_ROUTING_MIN_RUNS).contains(&n) {
                return Err(at(
                    "routing_min_runs",
                    format!("must be between 1 and {MAX_ROUTING_MIN_RUNS}"),
                ));
            }
            self.routing.min_runs = n;
        }
        Ok(())
    }

    /// Who may start a session, and the label that starts one.
    fn apply_trigger(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(label) = file.label.take() {
            if label.trim().is_empty() || label.len() > 50 {
                return Err(at(
                    "label",
                    "must be a label name of 1 to 50 characters".into(),
                ));
            }
            self.label = label;
        }
        if let Some(p) = file.min_permission.take() {
            self.min_permission = p.0;
        }
        Ok(())
    }

    /// What runs in the sandbox: the setup and test commands, the hosts it may reach, and
    /// the executor with its command line.
    fn apply_commands(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(setup) = file.setup.take() {
            self.setup = commands(setup, "setup", at)?;
        }
        if let Some(test) = file.test.take()
            && !test.is_null()
        {
            self.test = test_commands(test, at)?;
        }
        if let Some(hosts) = file.network_allow.take() {
            for h in &hosts {
                if !valid_host_rule(h) {
                    return Err(at(
                        "network_allow",
                        format!("`{h}` is not a host name (e.g. `crates.io` or `*.npmjs.org`)"),
                    ));
                }
            }
            self.network_allow = hosts;
        }
        if let Some(e) = file.executor.take() {
            self.executor = e.0;
        }
        if let Some(line) = file.executor_command.take() {
            let mut line = commands(vec![line], "executor_command", at)?;
            self.executor_command = line.pop();
        }
        if self.executor == ExecutorKind::Command && self.executor_command.is_none() {
            return Err(at(
                "executor",
                "`command` needs the command line to run in `executor_command`".into(),
            ));
        }
        Ok(())
    }

    /// The models the repository asks for, each checked to be a `provider:model` name.
    fn apply_models(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        let Some(m) = file.models.take() else {
            return Ok(());
        };
        let model = |key: &str, v: Option<String>| -> Result<Option<ModelName>, ConfigError> {
            v.map(|name| ModelName::parse(&name).map_err(|e| at(key, e.to_string())))
                .transpose()
        };
        self.models.planner = model("planner", m.planner)?;
        self.models.scout = model("scout", m.scout)?;
        if let Some(e) = m.executor {
            self.models.executor_low = model("low", e.low)?;
            self.models.executor_medium = model("medium", e.medium)?;
            self.models.executor_high = model("high", e.high)?;
        }
        Ok(())
    }

    /// The executor ladder: explicit rungs (`escalation`) or the executor tiers
    /// (`escalate: true`), never both. Prices, keys and installed executors are the
    /// deployment's, so planning checks those.
    fn apply_escalation(
        &mut self,
        file: &mut File,
        text: &str,
        at: &impl At,
    ) -> Result<(), ConfigError> {
        match (file.escalation.take(), file.escalate.take()) {
            (Some(_), Some(_)) => Err(at(
                "escalate",
                "write either `escalation` (the rungs) or `escalate: true` (the executor \
                 tiers), not both"
                    .into(),
            )),
            (None, Some(true)) => {
                self.escalation = Escalation::Tiers {
                    line: line_of(text, "escalate"),
                    tier_lines: ["low", "medium", "high"].map(|k| line_of(text, k)),
                };
                Ok(())
            }
            (None, Some(false)) => {
                self.escalation = Escalation::Off;
                Ok(())
            }
            (None, None) => Ok(()),
            (Some(rungs), None) => {
                if rungs.is_empty() || rungs.len() > MAX_RUNGS {
                    return Err(at(
                        "escalation",
                        format!("must list 1 to {MAX_RUNGS} rungs, cheapest first"),
                    ));
                }
                let lines = rung_lines(text, rungs.len());
                let mut read = Vec::new();
                for (i, (rung, line)) in rungs.into_iter().zip(lines).enumerate() {
                    let model = ModelName::parse(&rung.model).map_err(|e| ConfigError {
                        line,
                        ..at("escalation", format!("rung {}: {e}", i + 1))
                    })?;
                    if rung.executor.0 == ExecutorKind::Command {
                        return Err(ConfigError {
                            line,
                            ..at(
                                "escalation",
                                format!(
                                    "rung {}: the `command` executor runs no model of planwright's \
                                     choosing, so it cannot be a rung",
                                    i + 1
                                ),
                            )
                        });
                    }
                    read.push(RungSetting {
                        executor: rung.executor.0,
                        model,
                        line,
                    });
                }
                self.escalation = Escalation::Rungs(read);
                Ok(())
            }
        }
    }

    /// What one session may spend: its budget and its executor attempts.
    fn apply_run_limits(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(usd) = file.budget_usd.take() {
            if !(usd.is_finite() && usd > 0.0 && usd <= 1_000.0) {
                return Err(at(
                    "budget_usd",
                    "must be more than 0 and at most 1000".into(),
                ));
            }
            self.budget_usd = usd;
        }
        if let Some(n) = file.max_attempts.take() {
            if !(1..=10).contains(&n) {
                return Err(at("max_attempts", "must be between 1 and 10".into()));
            }
            self.max_attempts = n;
        }
        Ok(())
    }

    /// What a result may touch, what a failed one becomes, and the environment it runs in.
    fn apply_results(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(paths) = file.protected_paths.take() {
            // A repository adds to the defaults: a list naming only its own folders must
            // not open the workflows to a result.
            for path in paths {
                if !self.protected_paths.contains(&path) {
                    self.protected_paths.push(path);
                }
            }
        }
        if let Some(o) = file.on_failure.take() {
            self.on_failure = o.0;
        }
        if let Some(env) = file.environment.take() {
            self.environment = env.check().map_err(|(key, message)| at(key, message))?;
        }
        Ok(())
    }

    /// How failing checks are judged: flaky reruns, quarantined tests, ignored checks.
    fn apply_check_handling(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(n) = file.flaky_reruns.take() {
            if n > MAX_FLAKY_RERUNS {
                return Err(at(
                    "flaky_reruns",
                    format!("must be between 0 and {MAX_FLAKY_RERUNS}"),
                ));
            }
            self.flaky_reruns = n;
        }
        if let Some(ids) = file.quarantine.take() {
            self.quarantine = quarantine(ids).map_err(|m| at("quarantine", m))?;
        }
        if let Some(globs) = file.ignore_checks.take() {
            if globs.len() > MAX_IGNORED_CHECKS || globs.iter().any(|g| g.trim().is_empty()) {
                return Err(at(
                    "ignore_checks",
                    format!("must be at most {MAX_IGNORED_CHECKS} non-empty check name globs"),
                ));
            }
            self.ignore_checks = globs;
        }
        Ok(())
    }

    /// How many questions the planner may ask before it plans.
    fn apply_questions(&mut self, file: &mut File, at: &impl At) -> Result<(), ConfigError> {
        if let Some(n) = file.max_questions.take() {
            if n > MAX_QUESTIONS {
                return Err(at(
                    "max_questions",
                    format!("must be between 0 and {MAX_QUESTIONS}"),
                ));
            }
            self.max_questions = n;
        }
        Ok(())
    }

    /// The settings as a checkout of one commit holds them (the first candidate file, or
    /// the defaults), with the commands the file leaves out guessed from its root files.
    /// `paths` are where the file is looked for, first found wins.
    pub fn from_checkout(dir: &Path, paths: &[&str]) -> Result<RepoConfig, ConfigError> {
        let root = RootFiles::from_dir(dir);
        for path in paths {
            match super::checkout_file::read(dir, path) {
                Ok(Some(text)) => {
                    let config = RepoConfig::parse(&text, path, &root)?;
                    // Only a checkout can tell whether the files keying the cache exist.
                    if let Err(message) = config.environment.key_files(dir) {
                        return Err(ConfigError {
                            path: (*path).to_owned(),
                            line: line_of(&text, "cache_key"),
                            message: format!("`cache_key`: {message}"),
                        });
                    }
                    return Ok(config);
                }
                Ok(None) => {}
                Err(message) => {
                    return Err(ConfigError {
                        path: (*path).to_owned(),
                        line: None,
                        message,
                    });
                }
            }
        }
        Ok(RepoConfig::defaults(&root))
    }

    /// The files the settings in `dir` name as the setup cache's key (`cache_key`), read
    /// without checking them; none when there are no settings or they do not parse (which
    /// [`RepoConfig::from_checkout`] then reports).
    pub fn cache_key_paths(dir: &Path, paths: &[&str]) -> Vec<String> {
        let root = RootFiles::from_dir(dir);
        for path in paths {
            if let Ok(Some(text)) = super::checkout_file::read(dir, path) {
                return RepoConfig::parse(&text, path, &root)
                    .ok()
                    .and_then(|config| config.environment.cache_key)
                    .unwrap_or_default();
            }
        }
        Vec::new()
    }

    /// The values an approval binds to.
    pub fn bound(&self) -> BoundSettings {
        let name = |m: &Option<ModelName>| m.as_ref().map(ToString::to_string);
        BoundSettings {
            source: self.source.clone(),
            label: self.label.clone(),
            min_permission: self.min_permission.as_str().to_owned(),
            executor: self.executor.as_str().to_owned(),
            executor_command: self.executor_command.clone(),
            setup: self.setup.clone(),
            test: self.test.clone(),
            network_allow: self.network_allow.clone(),
            protected_paths: self.protected_paths.clone(),
            budget_usd: self.budget_usd,
            max_attempts: self.max_attempts,
            on_failure: match self.on_failure {
                OnFailure::DraftPr => "draft_pr",
                OnFailure::Comment => "comment",
            }
            .to_owned(),
            environment: self.environment.clone(),
            chosen: None,
            flaky_reruns: self.flaky_reruns,
            quarantine: self.quarantine.clone(),
            models: BoundModels {
                planner: name(&self.models.planner),
                scout: name(&self.models.scout),
                executor_low: name(&self.models.executor_low),
                executor_medium: name(&self.models.executor_medium),
                executor_high: name(&self.models.executor_high),
            },
        }
    }

    /// The settings recorded with an approved contract; an error names the value that
    /// this planwright cannot read back.
    pub fn from_bound(b: &BoundSettings) -> Result<RepoConfig, String> {
        let model = |m: &Option<String>| {
            m.as_deref()
                .map(ModelName::parse)
                .transpose()
                .map_err(|e| e.to_string())
        };
        let executor = [
            ExecutorKind::Builtin,
            ExecutorKind::ClaudeCode,
            ExecutorKind::Codex,
            ExecutorKind::Command,
        ]
        .into_iter()
        .find(|k| k.as_str() == b.executor)
        .ok_or_else(|| format!("`{}` is not an executor", b.executor))?;
        Ok(RepoConfig {
            label: b.label.clone(),
            min_permission: b.min_permission.parse().map_err(|e| format!("{e}"))?,
            setup: b.setup.clone(),
            test: b.test.clone(),
            network_allow: b.network_allow.clone(),
            executor,
            executor_command: b.executor_command.clone(),
            // The contract carries the ladder it was approved with.
            escalation: Escalation::Unset,
            models: Models {
                planner: model(&b.models.planner)?,
                scout: model(&b.models.scout)?,
                executor_low: model(&b.models.executor_low)?,
                executor_medium: model(&b.models.executor_medium)?,
                executor_high: model(&b.models.executor_high)?,
            },
            budget_usd: b.budget_usd,
            max_attempts: b.max_attempts,
            protected_paths: b.protected_paths.clone(),
            on_failure: match b.on_failure.as_str() {
                "draft_pr" => OnFailure::DraftPr,
                "comment" => OnFailure::Comment,
                other => return Err(format!("`{other}` is not an on_failure value")),
            },
            environment: b.environment.clone(),
            flaky_reruns: b.flaky_reruns,
            quarantine: b.quarantine.clone(),
            // Planning's and the pull request's alone, never what a run does.
            max_questions: DEFAULT_MAX_QUESTIONS,
            ignore_checks: Vec::new(),
            // Planning's choice of the starting rung, which the contract then carries.
            routing: RoutingPolicy::default(),
            source: b.source.clone(),
        })
    }

    /// The executor model for a contract's risk, when the repository chose one.
    pub fn executor_model(&self, risk: crate::contract::Risk) -> Option<&ModelName> {
        match risk {
            crate::contract::Risk::Low => self.models.executor_low.as_ref(),
            crate::contract::Risk::Medium => self.models.executor_medium.as_ref(),
            crate::contract::Risk::High => self.models.executor_high.as_ref(),
        }
    }
}

/// The repository's settings as the contract's base commit held them, recorded with the
/// contract at planning: what runs after approval is this, not whatever the default
/// branch says by then.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BoundSettings {
    pub source: Option<String>,
    pub label: String,
    pub min_permission: String,
    pub executor: String,
    pub executor_command: Option<String>,
    pub setup: Vec<String>,
    /// Recorded as a list before path globs were: that form still reads as it was.
    pub test: TestCommands,
    pub network_allow: Vec<String>,
    pub protected_paths: Vec<String>,
    pub budget_usd: f64,
    pub max_attempts: u32,
    pub on_failure: String,
    pub models: BoundModels,
    /// Absent from settings recorded before environments: those ran on the host.
    #[serde(default)]
    pub environment: EnvironmentConfig,
    /// The environment chosen at planning from `environment`, the base's devcontainer and
    /// the deployment's default; `None` in settings recorded before it was: the host.
    #[serde(default)]
    pub chosen: Option<Choice>,
    /// Absent from settings recorded before flaky re-runs were a setting: the default.
    #[serde(default = "default_flaky_reruns")]
    pub flaky_reruns: u32,
    #[serde(default)]
    pub quarantine: Vec<String>,
}

fn default_flaky_reruns() -> u32 {
    DEFAULT_FLAKY_RERUNS
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BoundModels {
    pub planner: Option<String>,
    pub scout: Option<String>,
    pub executor_low: Option<String>,
    pub executor_medium: Option<String>,
    pub executor_high: Option<String>,
}

impl BoundSettings {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The sha256 of the recorded JSON, which an approval carries to the run.
    pub fn sha256_of(json: &str) -> String {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(json.as_bytes()))
    }
}

/// A problem in the repository's file, posted on the issue as it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "`{}` line {line}: {}", self.path, self.message),
            None => write!(f, "`{}`: {}", self.path, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// serde_norway appends " at line N column M" which the error already carries.
fn tidy(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// The key named by one of our own value checks (`min_permission: \`x\` is not …`).
fn own_key(message: &str) -> Option<&str> {
    let (key, _) = message.split_once(": `")?;
    ["min_permission", "executor", "on_failure"]
        .into_iter()
        .find(|k| *k == key)
}

/// The first line where `key:` starts (indented or not), for errors found after parsing.
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches("- ");
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// The test ids of `quarantine`, as the runners print them.
fn quarantine(ids: Vec<String>) -> Result<Vec<String>, String> {
    if ids.len() > MAX_QUARANTINED {
        return Err(format!("holds more than {MAX_QUARANTINED} tests"));
    }
    for id in &ids {
        if id.trim().is_empty() {
            return Err("holds an empty test id".into());
        }
        if id.chars().any(char::is_control) || id.chars().count() > MAX_TEST_ID {
            return Err(format!(
                "`{}` is not a test id (one line of at most {MAX_TEST_ID} characters)",
                crate::text::clip(&id.replace(char::is_control, " "), 80)
            ));
        }
    }
    Ok(ids)
}

fn commands(
    list: Vec<String>,
    key: &str,
    at: &impl Fn(&str, String) -> ConfigError,
) -> Result<Vec<String>, ConfigError> {
    for c in &list {
        if c.trim().is_empty() {
            return Err(at(key, "holds an empty command".into()));
        }
        if c.contains('\0') {
            return Err(at(key, "holds a command with a NUL byte".into()));
        }
    }
    Ok(list)
}

/// `test` as written: one command, a list, or a mapping of path globs to a command or a
/// list; every problem names the glob.
fn test_commands(
    value: serde_norway::Value,
    at: &impl Fn(&str, String) -> ConfigError,
) -> Result<TestCommands, ConfigError> {
    use serde_norway::Value;
    let list = |value: Value, what: &str| -> Result<Vec<String>, ConfigError> {
        let items = match value {
            Value::String(one) => vec![Value::String(one)],
            Value::Sequence(items) => items,
            _ => {
                return Err(at(
                    "test",
                    format!("{what} must be a command or a list of commands"),
                ));
            }
        };
        let mut commands = Vec::new();
        for item in items {
            match item {
                Value::String(c) => commands.push(c),
                _ => {
                    return Err(at(
                        "test",
                        format!("{what} holds a value that is not a command"),
                    ));
                }
            }
        }
        self::commands(commands, "test", at)
    };
    let Value::Mapping(globs) = value else {
        return Ok(TestCommands::Always(list(value, "the list")?));
    };
    let mut by_path = Vec::new();
    for (glob, commands) in globs {
        let Value::String(glob) = glob else {
            return Err(at("test", "a key that is not a path glob".into()));
        };
        if let Err(why) = valid_glob(&glob) {
            return Err(at("test", format!("`{glob}` is not a path glob: {why}")));
        }
        let commands = list(commands, &format!("`{glob}`"))?;
        if commands.is_empty() {
            return Err(at("test", format!("`{glob}` has no commands")));
        }
        by_path.push(PathTests { glob, commands });
    }
    if by_path.is_empty() {
        return Err(at(
            "test",
            "names no globs (write `[]` for no test commands)".into(),
        ));
    }
    Ok(TestCommands::ByPath { by_path })
}

/// A glob matched against paths relative to the repository's root (`services/api/**`,
/// `**/*.py`): relative, without empty, `.` or `..` segments, on one line.
fn valid_glob(glob: &str) -> Result<(), &'static str> {
    if glob.trim().is_empty() {
        return Err("it is empty");
    }
    if glob != glob.trim() {
        return Err("it starts or ends with spaces");
    }
    if glob.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    if glob.starts_with('/') {
        return Err("paths are relative to the repository's root");
    }
    if glob.contains('\\') {
        return Err("paths are written with `/`");
    }
    let segments: Vec<&str> = glob.trim_end_matches('/').split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return Err("it has an empty, `.` or `..` segment");
    }
    Ok(())
}

/// `crates.io`, `*.npmjs.org`, `localhost:4873`: letters, digits, dots, dashes, an optional
/// leading `*.` and an optional port.
fn valid_host_rule(rule: &str) -> bool {
    let (host, port) = match rule.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rule, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |n| n == 0)) {
        return false;
    }
    let host = host.strip_prefix("*.").unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// Makes the error for a bad value of `key`, at the line that writes the key.
trait At: Fn(&str, String) -> ConfigError {}

impl<F: Fn(&str, String) -> ConfigError> At for F {}

/// The file parsed, or the parser's error at the line of the key it is about.
fn read_file(text: &str, path: &str) -> Result<File, ConfigError> {
    serde_norway::from_str(text).map_err(|e| {
        let message = tidy(&e.to_string());
        // Our own value checks report "key: …" but the parser places them at the start
        // of the enclosing mapping; the key's own line is what a person needs.
        let line = own_key(&message)
            .and_then(|key| line_of(text, key))
            .or(e.location().map(|l| l.line()));
        ConfigError {
            path: path.to_owned(),
            line,
            message,
        }
    })
}

/// One key of the repository's file as its reference lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoKey {
    /// The key, dotted below a section (`environment.image`).
    pub key: &'static str,
    /// The value when the file leaves the key out, as a person reads it.
    pub default: &'static str,
    /// A value the file may give, as YAML; every example together makes a valid file.
    pub example: &'static str,
    /// What the key is for, in one line.
    pub doc: &'static str,
}

/// Every key the repository's file may hold, in the reference's order. A unit test holds
/// it to the fields of [`File`] and its sections, both ways.
pub const REPO_KEYS: &[RepoKey] = &[
    RepoKey {
        key: "label",
        default: "`planwright`",
        example: "planwright",
        doc: "the label that starts a session on an issue (1 to 50 characters); read from the default branch",
    },
    RepoKey {
        key: "min_permission",
        default: "`write`",
        example: "write",
        doc: "who may start and command a session: `triage`, `write`, `maintain`, `admin`, or GitLab's `reporter` to `owner`; never lower; read from the default branch",
    },
    RepoKey {
        key: "setup",
        default: "guessed from the repository",
        example: "[\"cargo fetch\"]",
        doc: "commands run in the sandbox before the work, with the network allowlist; one command or a list",
    },
    RepoKey {
        key: "test",
        default: "guessed from the repository",
        example: "[\"cargo test\"]",
        doc: "commands every verification runs; one command, a list, or path globs each mapped to a command or a list (a monorepo's folders)",
    },
    RepoKey {
        key: "network_allow",
        default: "guessed from the repository",
        example: "[\"crates.io\", \"*.npmjs.org\"]",
        doc: "hosts the setup commands may reach (`crates.io`, `*.npmjs.org`, an optional port)",
    },
    RepoKey {
        key: "executor",
        default: "`builtin`",
        example: "command",
        doc: "what carries out the contract: `builtin`, `claude-code`, `codex` or `command`",
    },
    RepoKey {
        key: "executor_command",
        default: "none",
        example: "./tools/agent.sh",
        doc: "the command line the `command` executor runs (required with it)",
    },
    RepoKey {
        key: "models.planner",
        default: "the deployment's `planner_model`",
        example: "\"anthropic:claude-sonnet-4-5\"",
        doc: "`provider:model` that plans this repository's issues",
    },
    RepoKey {
        key: "models.scout",
        default: "the deployment's `scout_model`",
        example: "\"openai:gpt-5-mini\"",
        doc: "`provider:model` for the planner's scouts",
    },
    RepoKey {
        key: "models.executor.low",
        default: "the deployment's `executor_model`",
        example: "\"openai:gpt-5-mini\"",
        doc: "`provider:model` that executes a low-risk contract",
    },
    RepoKey {
        key: "models.executor.medium",
        default: "the deployment's `executor_model`",
        example: "\"anthropic:claude-sonnet-4-5\"",
        doc: "`provider:model` that executes a medium-risk contract",
    },
    RepoKey {
        key: "models.executor.high",
        default: "the deployment's `executor_model`",
        example: "\"anthropic:claude-opus-4-1\"",
        doc: "`provider:model` that executes a high-risk contract",
    },
    RepoKey {
        key: "escalation",
        default: "none",
        example: "[{executor: builtin, model: \"openai:gpt-5-mini\"}, {executor: builtin, model: \"anthropic:claude-sonnet-4-5\"}]",
        doc: "the executor ladder, cheapest rung first: after a verified failure the next attempt runs one rung up",
    },
    RepoKey {
        key: "escalate",
        default: "the deployment's `escalate`",
        example: "true",
        doc: "`true` climbs `models.executor`'s tiers (low, medium, high) instead of a written ladder; never beside `escalation`",
    },
    RepoKey {
        key: "budget_usd",
        default: "`5.0`",
        example: "5.0",
        doc: "what one session may spend on models, in US dollars (more than 0, at most 1000)",
    },
    RepoKey {
        key: "max_attempts",
        default: "`3`",
        example: "3",
        doc: "executor attempts one run may make (1 to 10)",
    },
    RepoKey {
        key: "protected_paths",
        default: "`.github/workflows/**`, `.gitlab-ci.yml`",
        example: "[\"migrations/**\"]",
        doc: "path globs a result may not touch; added to the defaults, never replacing them",
    },
    RepoKey {
        key: "on_failure",
        default: "`draft_pr`",
        example: "draft_pr",
        doc: "what a run that fails for good leaves: `draft_pr` (a draft with the failing report) or `comment` (an explanation on the issue)",
    },
    RepoKey {
        key: "environment.image",
        default: "the devcontainer's image, else the deployment's `environment_image`, else the host's tools",
        example: "ghcr.io/acme/ci:1.4",
        doc: "the OCI image runs use: a tag, or `name@sha256:…`",
    },
    RepoKey {
        key: "environment.cache",
        default: "none",
        example: "[node_modules, .venv]",
        doc: "workspace paths kept with the setup cache and restored instead of running `setup` again",
    },
    RepoKey {
        key: "environment.cache_key",
        default: "the lock files at the repository's top",
        example: "[package-lock.json]",
        doc: "files whose content keys the setup cache; each must exist on the base commit",
    },
    RepoKey {
        key: "flaky_reruns",
        default: "`2`",
        example: "2",
        doc: "re-runs of a failing test before it is called flaky (0 to 5; 0: none)",
    },
    RepoKey {
        key: "quarantine",
        default: "none",
        example: "[\"tests/test_net.py::test_timeout\"]",
        doc: "tests known to be flaky, by the id the verification table gives them: their failures neither block nor count as fixed",
    },
    RepoKey {
        key: "max_questions",
        default: "`1`",
        example: "1",
        doc: "rounds of questions the planner may ask before it plans (0 to 5; 0: it never asks)",
    },
    RepoKey {
        key: "ignore_checks",
        default: "none",
        example: "[\"codecov/*\"]",
        doc: "globs of other checks whose failures on planwright's pull requests are not reported",
    },
    RepoKey {
        key: "routing",
        default: "`static`",
        example: "auto",
        doc: "`auto` starts a contract on the cheapest rung with a good enough record in this repository; `static` on the rung its risk picks",
    },
    RepoKey {
        key: "routing_target",
        default: "`0.6`",
        example: "0.6",
        doc: "the verified share a rung's record must clear (its 90% lower confidence bound) for `routing: auto`",
    },
    RepoKey {
        key: "routing_min_runs",
        default: "`5`",
        example: "5",
        doc: "the attempts a rung needs at a risk before `routing: auto` trusts its record",
    },
];

/// Keys [`example_file`] leaves out because their example may not stand beside another's:
/// `escalate` is written instead of `escalation`, never with it.
const NOT_IN_EXAMPLE: &[&str] = &["escalate"];

/// A file that gives every key of [`REPO_KEYS`] its example value, sections nested.
pub fn example_file() -> String {
    let mut out = String::new();
    let mut open: Vec<&str> = Vec::new();
    for k in REPO_KEYS
        .iter()
        .filter(|k| !NOT_IN_EXAMPLE.contains(&k.key))
    {
        let mut parts: Vec<&str> = k.key.split('.').collect();
        let leaf = parts.pop().unwrap_or_default();
        let shared = open.iter().zip(&parts).take_while(|(a, b)| a == b).count();
        open.truncate(shared);
        for section in &parts[shared..] {
            out.push_str(&format!("{}{section}:\n", "  ".repeat(open.len())));
            open.push(section);
        }
        out.push_str(&format!(
            "{}{leaf}: {}\n",
            "  ".repeat(open.len()),
            k.example
        ));
    }
    out
}

#[cfg(test)]
mod key_list {
    use serde::de::{self, Visitor};

    use super::*;

    /// A deserializer that only records the field names a derived struct asks for.
    struct Fields<'a>(&'a mut Vec<&'static str>);

    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend(fields);
            Err(de::Error::custom("fields recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    fn fields<'de, T: Deserialize<'de>>(prefix: &str) -> Vec<String> {
        let mut names = Vec::new();
        let _ = T::deserialize(Fields(&mut names));
        names.iter().map(|n| format!("{prefix}{n}")).collect()
    }

    #[test]
    fn the_key_list_names_every_field_of_the_file_and_no_other() {
        let sections = ["models", "models.executor", "environment"];
        let mut file: Vec<String> = [
            fields::<File>(""),
            fields::<FileModels>("models."),
            fields::<FileExecutorModels>("models.executor."),
            fields::<FileEnvironment>("environment."),
        ]
        .concat();
        file.retain(|k| !sections.contains(&k.as_str()));
        file.sort();
        let mut listed: Vec<String> = REPO_KEYS.iter().map(|k| k.key.to_owned()).collect();
        listed.sort();
        let unlisted: Vec<&String> = file.iter().filter(|k| !listed.contains(k)).collect();
        let unknown: Vec<&String> = listed.iter().filter(|k| !file.contains(k)).collect();
        assert!(
            unlisted.is_empty() && unknown.is_empty(),
            "REPO_KEYS must list the file's keys: add {unlisted:?} to it, remove {unknown:?} \
             (a key in a new section: add the section to this test's list)"
        );
        for k in REPO_KEYS {
            assert!(!k.doc.is_empty() && !k.default.is_empty(), "{}", k.key);
        }
    }

    #[test]
    fn a_file_with_every_listed_key_is_read() {
        let text = example_file();
        let c = RepoConfig::parse(&text, ".planwright.yml", &RootFiles::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c.executor_command.as_deref(), Some("./tools/agent.sh"));
        assert_eq!(
            c.environment.cache_key,
            Some(vec!["package-lock.json".to_owned()])
        );
        assert!(c.models.executor_high.is_some());
    }
}

/// The file as written: every key optional, unknown keys refused (with their line).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    label: Option<String>,
    min_permission: Option<MinPermission>,
    #[serde(default, deserialize_with = "one_or_many")]
    setup: Option<Vec<String>>,
    /// A command, a list, or globs each with theirs: read by [`test_commands`].
    test: Option<serde_norway::Value>,
    network_allow: Option<Vec<String>>,
    executor: Option<Executor>,
    executor_command: Option<String>,
    models: Option<FileModels>,
    escalation: Option<Vec<FileRung>>,
    escalate: Option<bool>,
    budget_usd: Option<f64>,
    max_attempts: Option<u32>,
    protected_paths: Option<Vec<String>>,
    on_failure: Option<Failure>,
    environment: Option<FileEnvironment>,
    flaky_reruns: Option<u32>,
    quarantine: Option<Vec<String>>,
    max_questions: Option<u32>,
    ignore_checks: Option<Vec<String>>,
    routing: Option<String>,
    routing_target: Option<f64>,
    routing_min_runs: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModels {
    planner: Option<String>,
    scout: Option<String>,
    executor: Option<FileExecutorModels>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileExecutorModels {
    low: Option<String>,
    medium: Option<String>,
    high: Option<String>,
}

/// One rung of `escalation`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRung {
    executor: Executor,
    model: String,
}

/// The line of each of the first `n` rungs of `escalation`: the list's items written one
/// per line (`- executor: …`), else the line of `escalation` itself.
fn rung_lines(text: &str, n: usize) -> Vec<Option<usize>> {
    let at = line_of(text, "escalation");
    let items: Vec<usize> = match at {
        Some(start) => {
            let indent = |l: &str| l.len() - l.trim_start().len();
            let key_indent = text.lines().nth(start - 1).map_or(0, indent);
            text.lines()
                .enumerate()
                .skip(start)
                .take_while(|(_, l)| {
                    l.trim().is_empty() || indent(l) > key_indent || l.trim_start().starts_with('-')
                })
                .filter(|(_, l)| l.trim_start().starts_with('-'))
                .map(|(i, _)| i + 1)
                .collect()
        }
        None => Vec::new(),
    };
    (0..n).map(|i| items.get(i).copied().or(at)).collect()
}

/// `test: cargo test` as well as `test: ["cargo test"]`.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(s)) => Some(vec![s]),
        Some(OneOrMany::Many(v)) => Some(v),
    })
}

/// A permission in either forge's words: GitHub's read…admin or GitLab's guest…owner.
struct MinPermission(Permission);

impl<'de> Deserialize<'de> for MinPermission {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let p = match text.trim().to_ascii_lowercase().as_str() {
            "guest" => Permission::Read,
            "reporter" | "planner" => Permission::Triage,
            "developer" => Permission::Write,
            "maintainer" => Permission::Maintain,
            "owner" => Permission::Admin,
            other => match other.parse::<Permission>() {
                Ok(Permission::None) | Err(_) => {
                    return Err(serde::de::Error::custom(format!(
                        "min_permission: `{text}` is not a permission (read, triage, write, maintain, admin; or GitLab's guest, reporter, developer, maintainer, owner)"
                    )));
                }
                Ok(p) => p,
            },
        };
        // Anyone who can read a public repository could then approve what runs with the
        // deployment's model keys.
        if p == Permission::Read {
            return Err(serde::de::Error::custom(format!(
                "min_permission: `{text}` is too low: anyone who can read the repository could approve a contract; use triage or higher (GitLab: reporter or higher)"
            )));
        }
        Ok(MinPermission(p))
    }
}

struct Executor(ExecutorKind);

impl<'de> Deserialize<'de> for Executor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Executor(match text.trim() {
            "builtin" => ExecutorKind::Builtin,
            "claude-code" => ExecutorKind::ClaudeCode,
            "codex" => ExecutorKind::Codex,
            "command" => ExecutorKind::Command,
            _ => {
                return Err(serde::de::Error::custom(format!(
                    "executor: `{text}` is not an executor (builtin, claude-code, codex, command)"
                )));
            }
        }))
    }
}

struct Failure(OnFailure);

impl<'de> Deserialize<'de> for Failure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Failure(match text.trim() {
            "draft_pr" => OnFailure::DraftPr,
            "comment" => OnFailure::Comment,
            _ => {
                return Err(serde::de::Error::custom(format!(
                    "on_failure: `{text}` is not one of draft_pr, comment"
                )));
            }
        }))
    }
}

/// The root files that tell a repository's ecosystem, with the text of those whose content
/// matters (`package.json` scripts, `Makefile` targets).
#[derive(Debug, Clone, Default)]
pub struct RootFiles(BTreeMap<String, String>);

/// Files probed at the root; small on purpose, each is one forge request.
pub const PROBED_FILES: &[&str] = &[
    "Cargo.toml",
    "package.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "package-lock.json",
    "go.mod",
    "pyproject.toml",
    "setup.py",
    "pytest.ini",
    "tox.ini",
    "requirements.txt",
    "pom.xml",
    "mvnw",
    "build.gradle",
    "build.gradle.kts",
    "gradlew",
    "Makefile",
];

impl RootFiles {
    pub fn insert(&mut self, name: &str, text: String) {
        self.0.insert(name.to_owned(), text);
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// From a checkout on disk.
    pub fn from_dir(dir: &Path) -> RootFiles {
        let mut root = RootFiles::default();
        for name in PROBED_FILES {
            if let Ok(Some(text)) = super::checkout_file::read(dir, name) {
                root.insert(name, text);
            }
        }
        root
    }
}

/// Commands and registry hosts guessed for one repository.
#[derive(Debug, Default, PartialEq)]
struct Guess {
    setup: Vec<String>,
    test: Vec<String>,
    network_allow: Vec<String>,
}

/// The usual test command of each ecosystem found at the root, in a fixed order. A
/// repository with several (a Rust crate with a JS front end) gets them all.
fn detect(root: &RootFiles) -> Guess {
    let mut g = Guess::default();
    let allow = |hosts: &[&str], g: &mut Guess| {
        for h in hosts {
            if !g.network_allow.iter().any(|x| x == h) {
                g.network_allow.push((*h).to_owned());
            }
        }
    };
    if root.has("Cargo.toml") {
        g.setup.push("cargo fetch".into());
        g.test.push("cargo test".into());
        allow(
            &["crates.io", "static.crates.io", "index.crates.io"],
            &mut g,
        );
    }
    if let Some(package) = root.text("package.json")
        && has_npm_test(package)
    {
        let (install, test) = if root.has("pnpm-lock.yaml") {
            ("pnpm install --frozen-lockfile", "pnpm test")
        } else if root.has("yarn.lock") {
            ("yarn install --frozen-lockfile", "yarn test")
        } else if root.has("package-lock.json") {
            ("npm ci", "npm test")
        } else {
            ("npm install", "npm test")
        };
        g.setup.push(install.into());
        g.test.push(test.into());
        allow(&["registry.npmjs.org", "registry.yarnpkg.com"], &mut g);
    }
    if root.has("go.mod") {
        g.setup.push("go mod download".into());
        g.test.push("go test ./...".into());
        allow(&["proxy.golang.org", "sum.golang.org"], &mut g);
    }
    let python = [
        "pyproject.toml",
        "setup.py",
        "pytest.ini",
        "tox.ini",
        "requirements.txt",
    ];
    if python.iter().any(|f| root.has(f)) {
        if root.has("requirements.txt") {
            g.setup
                .push("python3 -m pip install -r requirements.txt".into());
        }
        g.test.push("python3 -m pytest".into());
        allow(&["pypi.org", "files.pythonhosted.org"], &mut g);
    }
    if root.has("pom.xml") {
        let mvn = if root.has("mvnw") { "./mvnw" } else { "mvn" };
        g.setup.push(format!("{mvn} -B -q dependency:go-offline"));
        g.test.push(format!("{mvn} -B test"));
        allow(&["repo.maven.apache.org", "repo1.maven.org"], &mut g);
    } else if root.has("build.gradle") || root.has("build.gradle.kts") {
        let gradle = if root.has("gradlew") {
            "./gradlew"
        } else {
            "gradle"
        };
        g.test.push(format!("{gradle} test"));
        allow(
            &[
                "services.gradle.org",
                "plugins.gradle.org",
                "repo.maven.apache.org",
            ],
            &mut g,
        );
    }
    if g.test.is_empty()
        && let Some(makefile) = root.text("Makefile")
        && makefile.lines().any(|l| l.starts_with("test:"))
    {
        g.test.push("make test".into());
    }
    g
}

/// `npm init` writes a test script that only fails; it is not a test suite.
fn has_npm_test(package_json: &str) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(package_json) else {
        return false;
    };
    value["scripts"]["test"]
        .as_str()
        .is_some_and(|t| !t.trim().is_empty() && !t.contains("no test specified"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(files: &[(&str, &str)]) -> RootFiles {
        let mut r = RootFiles::default();
        for (name, text) in files {
            r.insert(name, (*text).to_owned());
        }
        r
    }

    const FULL: &str = r#"
label: ai-fix
min_permission: maintain
setup: ["cargo fetch"]
test: ["cargo test --workspace"]
network_allow: ["crates.io", "*.crates.io", "localhost:4873"]
executor: claude-code
models:
  planner: anthropic:claude-opus-4
  scout: openai:gpt-4o-mini
  executor: { low: openai:gpt-4o-mini, high: anthropic:claude-sonnet-4 }
budget_usd: 2.5
max_attempts: 2
protected_paths: [".github/workflows/**", "migrations/**"]
on_failure: comment
"#;

    #[test]
    fn a_full_file_is_read() {
        let c = RepoConfig::parse(FULL, ".github/planwright.yml", &RootFiles::default()).unwrap();
        assert_eq!(c.label, "ai-fix");
        assert_eq!(c.min_permission, Permission::Maintain);
        assert_eq!(c.test.always(), ["cargo test --workspace"]);
        assert_eq!(c.executor, ExecutorKind::ClaudeCode);
        assert_eq!(c.models.planner.as_ref().unwrap().model, "claude-opus-4");
        assert_eq!(c.models.executor_medium, None);
        assert_eq!(
            c.executor_model(crate::contract::Risk::High).unwrap().model,
            "claude-sonnet-4"
        );
        assert_eq!(c.budget_usd, 2.5);
        assert_eq!(c.on_failure, OnFailure::Comment);
        assert_eq!(c.source.as_deref(), Some(".github/planwright.yml"));
    }

    #[test]
    fn an_escalation_ladder_is_read_with_each_rungs_line() {
        let text = "test: make check\nescalation:\n  - executor: builtin\n    model: \"openai:gpt-4o-mini\"\n  - {executor: claude-code, model: \"anthropic:claude-sonnet-4\"}\nbudget_usd: 3\n";
        let c = RepoConfig::parse(text, "p.yml", &RootFiles::default()).unwrap();
        let Escalation::Rungs(rungs) = &c.escalation else {
            panic!("no rungs: {:?}", c.escalation);
        };
        let read: Vec<(ExecutorKind, String, Option<usize>)> = rungs
            .iter()
            .map(|r| (r.executor, r.model.to_string(), r.line))
            .collect();
        assert_eq!(
            read,
            [
                (
                    ExecutorKind::Builtin,
                    "openai:gpt-4o-mini".to_owned(),
                    Some(3)
                ),
                (
                    ExecutorKind::ClaudeCode,
                    "anthropic:claude-sonnet-4".to_owned(),
                    Some(5)
                ),
            ]
        );
        assert_eq!(c.budget_usd, 3.0);
        let tiers = "models:\n  executor:\n    low: openai:gpt-5-mini\n    high: anthropic:claude-sonnet-4-5\nescalate: true\n";
        let c = RepoConfig::parse(tiers, "p.yml", &RootFiles::default()).unwrap();
        assert_eq!(
            c.escalation,
            Escalation::Tiers {
                line: Some(5),
                tier_lines: [Some(3), None, Some(4)],
            }
        );
        let off = RepoConfig::parse("escalate: false\n", "p.yml", &RootFiles::default()).unwrap();
        assert_eq!(off.escalation, Escalation::Off);
        // What runs is the contract's ladder: bound settings carry none.
        let bound = RepoConfig::from_bound(&c.bound()).unwrap();
        assert_eq!(bound.escalation, Escalation::Unset);
        let unset = RepoConfig::parse("label: x\n", "p.yml", &RootFiles::default()).unwrap();
        assert_eq!(unset.escalation, Escalation::Unset);
    }

    #[test]
    fn a_bad_escalation_names_the_key_and_the_rungs_line() {
        let err = |text: &str| {
            RepoConfig::parse(text, "p.yml", &RootFiles::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("escalation:\n  - executor: builtin\n    model: gpt-4o\n"),
            "`p.yml` line 2: `escalation`: rung 1: `gpt-4o` is not a model name of the form provider:model (e.g. anthropic:claude-sonnet-4-5)"
        );
        let e = err(
            "escalation:\n  - executor: builtin\n    model: openai:gpt-5-mini\n  - executor: robot\n    model: openai:gpt-5\n",
        );
        assert!(
            e.contains("line 4") && e.contains("`robot` is not an executor"),
            "{e}"
        );
        let e = err("escalation:\n  - executor: command\n    model: openai:gpt-5\n");
        assert!(
            e.starts_with("`p.yml` line 2: `escalation`: rung 1: the `command` executor"),
            "{e}"
        );
        let e = err("escalation: []\n");
        assert_eq!(
            e,
            "`p.yml` line 1: `escalation`: must list 1 to 8 rungs, cheapest first"
        );
        let e =
            err("escalate: true\nescalation:\n  - executor: builtin\n    model: openai:gpt-5\n");
        assert!(
            e.starts_with("`p.yml` line 1: `escalate`: write either"),
            "{e}"
        );
        let e = err("escalation:\n  - executor: builtin\n    modle: openai:gpt-5\n");
        assert!(e.contains("line 3") && e.contains("modle"), "{e}");
    }

    #[test]
    fn a_repositorys_protected_paths_keep_the_defaults() {
        let c = RepoConfig::parse(FULL, ".github/planwright.yml", &RootFiles::default()).unwrap();
        assert_eq!(
            c.protected_paths,
            [".github/workflows/**", ".gitlab-ci.yml", "migrations/**"]
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line() {
        let text = "label: x\nlable: y\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("lable"), "{e}");
        assert!(
            e.to_string().starts_with("`.planwright.yml` line 2:"),
            "{e}"
        );

        let text = "label: x\n\nmin_permission: superuser\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("superuser"), "{e}");

        let text = "models:\n  planner: gpt-4\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("planner"), "{e}");

        let text = "test: cargo test\nbudget_usd: -3\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");

        let text = "max_attempts: many\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");

        let text = "network_allow: [\"http://evil\"]\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert!(e.message.contains("network_allow"), "{e}");

        let text = "label: [unclosed\n";
        let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn routing_auto_and_its_bar_are_read_and_bad_values_name_their_line() {
        let parse = |text: &str| RepoConfig::parse(text, ".planwright.yml", &RootFiles::default());
        let defaults = parse("label: x\n").unwrap();
        assert_eq!(defaults.routing, RoutingPolicy::default());
        assert!(!defaults.routing.auto);
        let c = parse("routing: auto\nrouting_target: 0.75\nrouting_min_runs: 8\n").unwrap();
        assert_eq!(
            c.routing,
            RoutingPolicy {
                auto: true,
                target: 0.75,
                min_runs: 8
            }
        );
        assert!(!parse("routing: static\n").unwrap().routing.auto);
        for (text, line, key) in [
            ("label: x\nrouting: cheapest\n", 2, "routing"),
            ("routing: auto\nrouting_target: 1.5\n", 2, "routing_target"),
            ("routing: auto\nrouting_target: 0\n", 2, "routing_target"),
            (
                "routing: auto\n\nrouting_min_runs: 0\n",
                3,
                "routing_min_runs",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.message.starts_with(&format!("`{key}`:")), "{e}");
        }
    }

    #[test]
    fn flaky_reruns_and_quarantine_are_read_bounded_and_bound() {
        let defaults =
            RepoConfig::parse("label: x\n", ".planwright.yml", &RootFiles::default()).unwrap();
        assert_eq!((defaults.flaky_reruns, defaults.quarantine.len()), (2, 0));
        let text =
            "flaky_reruns: 0\nquarantine: [\"tests/test_net.py::test_timeout[a b]\", \"pkg::t\"]\n";
        let c = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap();
        assert_eq!(c.flaky_reruns, 0);
        assert_eq!(
            c.quarantine,
            ["tests/test_net.py::test_timeout[a b]", "pkg::t"]
        );
        let back = RepoConfig::from_bound(&c.bound()).unwrap();
        assert_eq!((back.flaky_reruns, &back.quarantine), (0, &c.quarantine));

        for (text, line, says) in [
            (
                "label: x\nflaky_reruns: 6\n",
                2,
                "`flaky_reruns`: must be between 0 and 5",
            ),
            ("flaky_reruns: -1\n", 1, "flaky_reruns"),
            ("flaky_reruns: often\n", 1, "flaky_reruns"),
            (
                "label: x\nquarantine:\n  - a\n  - \"  \"\n",
                2,
                "`quarantine`: holds an empty test id",
            ),
            ("quarantine: [\"a\\nb\"]\n", 1, "is not a test id"),
            ("quarantine: tests/x.py\n", 1, "quarantine"),
        ] {
            let e = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }

        // Settings recorded before these keys existed read as the defaults.
        let mut old: serde_json::Value = serde_json::from_str(&defaults.bound().to_json()).unwrap();
        let object = old.as_object_mut().unwrap();
        object.remove("flaky_reruns");
        object.remove("quarantine");
        let read: BoundSettings = serde_json::from_value(old).unwrap();
        assert_eq!((read.flaky_reruns, read.quarantine.len()), (2, 0));
    }

    #[test]
    fn the_command_executor_needs_its_command_line() {
        let text = "executor: command\nexecutor_command: ./tools/agent.sh --contract \"$PLANWRIGHT_CONTRACT\"\n";
        let c = RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).unwrap();
        assert_eq!(c.executor, ExecutorKind::Command);
        assert_eq!(
            c.executor_command.as_deref(),
            Some("./tools/agent.sh --contract \"$PLANWRIGHT_CONTRACT\"")
        );
        let e = RepoConfig::parse(
            "executor: command\n",
            ".planwright.yml",
            &RootFiles::default(),
        )
        .unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
        assert!(e.message.contains("executor_command"), "{e}");
        let e = RepoConfig::parse(
            "executor_command: \"  \"\n",
            ".planwright.yml",
            &RootFiles::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("empty command"), "{e}");
    }

    #[test]
    fn gitlab_words_for_permissions() {
        for (word, p) in [
            ("reporter", Permission::Triage),
            ("developer", Permission::Write),
            ("maintainer", Permission::Maintain),
            ("owner", Permission::Admin),
            ("write", Permission::Write),
        ] {
            let c = RepoConfig::parse(
                &format!("min_permission: {word}\n"),
                ".gitlab/planwright.yml",
                &RootFiles::default(),
            )
            .unwrap();
            assert_eq!(c.min_permission, p, "{word}");
        }
        assert!(RepoConfig::parse("min_permission: none\n", "f", &RootFiles::default()).is_err());
    }

    #[test]
    fn a_permission_below_triage_is_refused_with_its_line() {
        for word in ["read", "guest", "Read"] {
            let text = format!("label: x\nmin_permission: {word}\n");
            let e = RepoConfig::parse(&text, ".gitlab/planwright.yml", &RootFiles::default())
                .unwrap_err();
            assert_eq!(e.line, Some(2), "{e}");
            assert!(
                e.to_string().contains(&format!(
                    "`{word}` is too low: anyone who can read the repository could approve"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn keys_left_out_keep_the_guessed_defaults() {
        let cargo = root(&[("Cargo.toml", "[package]")]);
        let c = RepoConfig::parse("label: fix-me\ntest: make check\n", "f", &cargo).unwrap();
        assert_eq!(c.test.always(), ["make check"]);
        assert_eq!(c.setup, ["cargo fetch"]);
        assert!(c.network_allow.contains(&"crates.io".to_owned()));
        let empty = RepoConfig::parse("", "f", &cargo).unwrap();
        assert_eq!(empty.test.always(), ["cargo test"]);
        assert_eq!(empty.label, DEFAULT_LABEL);
    }

    #[test]
    fn test_commands_are_guessed_per_ecosystem() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: &[Case] = &[
            (&[("Cargo.toml", "")], &["cargo test"]),
            (
                &[
                    ("package.json", r#"{"scripts":{"test":"vitest run"}}"#),
                    ("pnpm-lock.yaml", ""),
                ],
                &["pnpm test"],
            ),
            (
                &[
                    ("package.json", r#"{"scripts":{"test":"jest"}}"#),
                    ("yarn.lock", ""),
                ],
                &["yarn test"],
            ),
            (
                &[(
                    "package.json",
                    r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#,
                )],
                &[],
            ),
            (&[("go.mod", "module x")], &["go test ./..."]),
            (&[("pyproject.toml", "")], &["python3 -m pytest"]),
            (&[("pom.xml", ""), ("mvnw", "")], &["./mvnw -B test"]),
            (&[("build.gradle.kts", "")], &["gradle test"]),
            (
                &[("Makefile", "all:\n\ttrue\ntest:\n\t./run\n")],
                &["make test"],
            ),
            (&[("Makefile", "all:\n\ttrue\n")], &[]),
            (
                &[
                    ("Cargo.toml", ""),
                    ("package.json", r#"{"scripts":{"test":"jest"}}"#),
                    ("package-lock.json", ""),
                ],
                &["cargo test", "npm test"],
            ),
        ];
        for (files, expected) in cases {
            let c = RepoConfig::defaults(&root(files));
            assert_eq!(c.test.always(), *expected, "{files:?}");
        }
    }

    const MONOREPO: &str = r#"
label: x
test:
  "services/api/**": ["cd services/api && npm test"]
  web/**: cd web && npm test
  "**": ["make test"]
"#;

    #[test]
    fn test_commands_may_be_keyed_by_path_globs() {
        let c = RepoConfig::parse(MONOREPO, ".planwright.yml", &RootFiles::default()).unwrap();
        let rule = |glob: &str, commands: &[&str]| PathTests {
            glob: glob.into(),
            commands: commands.iter().map(|c| (*c).to_owned()).collect(),
        };
        assert_eq!(
            c.test,
            TestCommands::ByPath {
                by_path: vec![
                    rule("services/api/**", &["cd services/api && npm test"]),
                    rule("web/**", &["cd web && npm test"]),
                    rule("**", &["make test"]),
                ]
            }
        );
        assert!(c.test.always().is_empty());
        // The list and the single command read as they always did.
        for text in ["test: [\"make test\"]\n", "test: make test\n"] {
            let c = RepoConfig::parse(text, "f", &RootFiles::default()).unwrap();
            assert_eq!(c.test, TestCommands::Always(vec!["make test".into()]));
        }
    }

    #[test]
    fn a_bad_test_glob_or_command_names_the_line_and_the_glob() {
        for (text, says) in [
            (
                "label: x\ntest:\n  \"/abs/**\": [make]\n",
                "`/abs/**` is not a path glob",
            ),
            (
                "label: x\ntest:\n  \"a/../b\": [make]\n",
                "`a/../b` is not a path glob",
            ),
            ("label: x\ntest:\n  \"\": [make]\n", "`` is not a path glob"),
            (
                "label: x\ntest:\n  \"a/**\": []\n",
                "`a/**` has no commands",
            ),
            (
                "label: x\ntest:\n  \"a/**\": [\"  \"]\n",
                "holds an empty command",
            ),
            (
                "label: x\ntest:\n  \"a/**\": [3]\n",
                "`a/**` holds a value that is not a command",
            ),
            (
                "label: x\ntest:\n  \"a/**\": {x: y}\n",
                "`a/**` must be a command or a list",
            ),
            (
                "label: x\ntest:\n  3: [make]\n",
                "a key that is not a path glob",
            ),
            (
                "label: x\ntest: [make, [nested]]\n",
                "holds a value that is not a command",
            ),
            ("label: x\ntest: {}\n", "names no globs"),
        ] {
            let e =
                RepoConfig::parse(text, ".planwright.yml", &RootFiles::default()).expect_err(text);
            assert_eq!(e.line, Some(2), "{text}: {e}");
            assert!(e.message.starts_with("`test`: "), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn bound_test_globs_are_kept_and_a_bound_list_still_reads() {
        let c = RepoConfig::parse(MONOREPO, ".planwright.yml", &RootFiles::default()).unwrap();
        let json = c.bound().to_json();
        assert!(
            json.contains(r#""test":{"by_path":[{"glob":"services/api/**","commands":["cd services/api && npm test"]}"#),
            "{json}"
        );
        let back: BoundSettings = serde_json::from_str(&json).unwrap();
        assert_eq!(RepoConfig::from_bound(&back).unwrap().test, c.test);
        // A row recorded when `test` was only a list: it reads, and writes back unchanged.
        let listed = RepoConfig::parse("test: [cargo test]\n", "f", &RootFiles::default())
            .unwrap()
            .bound()
            .to_json();
        assert!(listed.contains(r#""test":["cargo test"]"#), "{listed}");
        let old: BoundSettings = serde_json::from_str(&listed).unwrap();
        assert_eq!(old.test, TestCommands::Always(vec!["cargo test".into()]));
        assert_eq!(old.to_json(), listed);
    }

    #[test]
    fn host_rules() {
        for ok in [
            "crates.io",
            "*.npmjs.org",
            "localhost:4873",
            "127.0.0.1:8080",
        ] {
            assert!(valid_host_rule(ok), "{ok}");
        }
        for bad in ["", "http://x", "a..b", "x:0", "x:99999", "*", "a/b"] {
            assert!(!valid_host_rule(bad), "{bad}");
        }
    }
}
