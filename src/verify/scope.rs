//! The result's files against the contract's scope: changes outside the listed files,
//! protected and CI-run paths, links and submodules that point elsewhere.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::runs::RunSet;

use crate::contract::{Contract, FileAction};
use crate::git::{ChangeKind, ChangedFile};
use crate::repo_tools::glob_matches;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Outside what the contract declared: a reviewer looks at it.
    Flagged,
    /// Never accepted: the result is refused.
    Refused,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeFinding {
    pub path: String,
    /// `added`, `modified`, `deleted` or `type changed`.
    pub change: String,
    pub severity: Severity,
    pub reason: String,
}

/// A path under a test folder or named like a test file.
pub fn is_test_path(path: &str) -> bool {
    let path = normalise(path);
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    parts.iter().any(|d| *d == "tests" || *d == "test")
        || ["*_test.*", "test_*.*", "*.test.*", "*.spec.*"]
            .iter()
            .any(|p| glob_matches(p, name))
}

pub(super) fn normalise(path: &str) -> String {
    path.trim()
        .trim_start_matches("./")
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// A `new_tests` entry names this file: it holds the path (`tests/test_x.py::test_y`),
/// its dotted module (`tests.test_x.TestY`), or is the file name or a glob matching it.
pub(super) fn names_file(entry: &str, path: &str) -> bool {
    let entry = entry.trim();
    // Whole names only: `calc.py` is not named by `test_calc.py::test_add`.
    let name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let names = |part: &str| {
        entry.match_indices(part).any(|(at, _)| {
            let before = entry[..at].chars().next_back();
            let after = entry[at + part.len()..].chars().next();
            before.is_none_or(|c| !name_char(c)) && after.is_none_or(|c| !name_char(c))
        })
    };
    if names(path) {
        return true;
    }
    if let Some((stem, _)) = path.rsplit_once('.') {
        let dotted = stem.replace('/', ".");
        if dotted.len() >= 3 && names(&dotted) {
            return true;
        }
    }
    let first = entry
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default()
        .split("::")
        .next()
        .unwrap_or_default();
    let name = path.rsplit('/').next().unwrap_or(path);
    !first.is_empty() && (first == name || glob_matches(first, path))
}

fn change_name(change: ChangeKind) -> &'static str {
    match change {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::TypeChanged => "type changed",
    }
}

/// A changed path that is not a plain file or folder in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Pushed as a link, it shows readers and CI whatever its target holds.
    Symlink,
    /// A folder holding its own repository, committed as a gitlink: a pin to any commit
    /// of any repository.
    Gitlink,
}

impl Link {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Link::Symlink => "a symbolic link",
            Link::Gitlink => "a nested repository (a gitlink)",
        }
    }
}

/// The result's changed paths that are, or lie under, a symbolic link or a nested
/// repository, as the checkout holds them: what the result commit takes in.
pub fn links_in(repo: &Path, changed: &[ChangedFile]) -> HashMap<String, Link> {
    let mut links = HashMap::new();
    for file in changed {
        if file.change == ChangeKind::Deleted {
            continue;
        }
        let path = normalise(&file.path);
        let mut at = repo.to_path_buf();
        for part in path.split('/') {
            at.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&at) else {
                break;
            };
            let link = if meta.file_type().is_symlink() {
                Some(Link::Symlink)
            } else if meta.is_dir() && std::fs::symlink_metadata(at.join(".git")).is_ok() {
                Some(Link::Gitlink)
            } else {
                None
            };
            if let Some(link) = link {
                links.insert(path.clone(), link);
                break;
            }
        }
    }
    links
}

/// Files that CI services or build tools run on push, with the repository's secrets in
/// reach: a result may change one only when the approved contract names it, since a
/// change there runs before any maintainer reviews the pull request. A pattern without
/// `/` matches the file name in any folder.
pub const RUN_BY_CI: &[&str] = &[
    ".github/workflows/**",
    ".github/actions/**",
    "action.yml",
    "action.yaml",
    ".gitlab-ci.yml",
    ".gitlab/ci/**",
    ".circleci/**",
    ".buildkite/**",
    ".travis.yml",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    "Jenkinsfile",
    ".pre-commit-config.yaml",
    ".husky/**",
    "Makefile",
    "makefile",
    "GNUmakefile",
    "*.mk",
    "justfile",
    "Rakefile",
    "package.json",
    "build.rs",
    ".cargo/config",
    ".cargo/config.toml",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "conftest.py",
    "Cargo.toml",
    "Gemfile",
    "noxfile.py",
    "tox.ini",
    "build.gradle",
    "build.gradle.kts",
    "gradlew",
];

/// Files that set up how a repository's tests run (pytest's fixtures and settings, Jest's,
/// Vitest's and Babel's configurations, Mocha's, a Rust build script, Cargo's settings): one
/// the result adds changes how the base's tests see the code, so it is refused unless the
/// approved contract names it. A pattern without `/` matches the file name in any folder.
pub const TEST_SETUP: &[&str] = &[
    "conftest.py",
    "pytest.ini",
    "jest.config.*",
    "jest.setup.*",
    "vitest.config.*",
    "vitest.setup.*",
    "vitest.workspace.*",
    "babel.config.*",
    ".babelrc",
    ".babelrc.*",
    ".mocharc.*",
    "build.rs",
    "**/.cargo/config",
    "**/.cargo/config.toml",
];

/// Checks the result's changed files against the contract: protected paths, files CI runs
/// and test setup files added that the contract does not name, and the deletion of a test the contract means to make
/// pass are refused; anything else outside the declared files and test files is flagged.
pub fn check_scope(
    contract: &Contract,
    protected: &[String],
    changed: &[ChangedFile],
    links: &HashMap<String, Link>,
    baseline: &RunSet,
) -> Vec<ScopeFinding> {
    let scope = Scope::read(contract, protected, links, baseline);
    changed
        .iter()
        .filter_map(|file| {
            let path = normalise(&file.path);
            let (severity, reason) = scope.judge(file, &path)?;
            Some(ScopeFinding {
                path,
                change: change_name(file.change).to_owned(),
                severity,
                reason,
            })
        })
        .collect()
}

/// What a changed file is judged against: the contract's files and what it means to
/// make pass, the protected paths and the links the result adds.
struct Scope<'a> {
    contract: &'a Contract,
    protected: &'a [String],
    links: &'a HashMap<String, Link>,
    declared: Vec<(String, FileAction)>,
    /// Files holding tests that fail on the base: the ones a fix is meant to turn green.
    failing_files: HashSet<String>,
    evidence: HashSet<String>,
}

impl<'a> Scope<'a> {
    fn read(
        contract: &'a Contract,
        protected: &'a [String],
        links: &'a HashMap<String, Link>,
        baseline: &RunSet,
    ) -> Self {
        let declared = contract
            .change
            .files
            .iter()
            .map(|f| (normalise(&f.path), f.action))
            .collect();
        let failing_files = baseline
            .runs
            .iter()
            .flat_map(|r| r.failures.iter())
            .filter_map(|f| f.location.as_deref())
            .filter_map(|l| l.split(':').next())
            .map(normalise)
            .collect();
        let evidence = contract
            .diagnosis
            .evidence
            .iter()
            .map(|e| normalise(&e.path))
            .collect();
        Scope {
            contract,
            protected,
            links,
            declared,
            failing_files,
            evidence,
        }
    }

    fn names_test(&self, path: &str) -> bool {
        self.contract
            .verification
            .new_tests
            .iter()
            .any(|t| names_file(t, path))
    }

    /// The finding for one changed file at `path` (normalised), if any.
    fn judge(&self, file: &ChangedFile, path: &str) -> Option<(Severity, String)> {
        if let Some(glob) = self.protected.iter().find(|g| glob_matches(g, path)) {
            return Some((Severity::Refused, format!("protected by `{glob}`")));
        }
        let declaration = self
            .declared
            .iter()
            .find(|(d, _)| path == *d || path.starts_with(&format!("{d}/")))
            .map(|(_, action)| *action);
        if declaration.is_none()
            && let Some(reason) = self.unnamed_refusal(file, path)
        {
            return Some((Severity::Refused, reason));
        }
        let deleted = file.change == ChangeKind::Deleted;
        let test = is_test_path(path) || self.names_test(path);
        if deleted && test && declaration != Some(FileAction::Delete) {
            return Some(self.deleted_test(path, declaration));
        }
        match declaration {
            Some(action) if deleted && action != FileAction::Delete => Some((
                Severity::Flagged,
                format!("deleted, but the contract says to {} it", action.as_str()),
            )),
            Some(_) => None,
            None if test => None,
            None => Some((Severity::Flagged, "not among the contract's files".into())),
        }
    }

    /// Why a change the contract does not name is refused outright: a test setup file
    /// added, a file CI runs, or a link; `None` for any other.
    fn unnamed_refusal(&self, file: &ChangedFile, path: &str) -> Option<String> {
        if file.change == ChangeKind::Added
            && let Some(glob) = TEST_SETUP.iter().find(|g| glob_matches(g, path))
        {
            return Some(format!(
                "a file like `{glob}` sets up how the tests run; the contract must name \
                 the file to add it"
            ));
        }
        if let Some(glob) = RUN_BY_CI.iter().find(|g| glob_matches(g, path)) {
            return Some(format!(
                "CI runs files like `{glob}` on push; the contract must name the file to change it"
            ));
        }
        self.links.get(path).map(|link| {
            format!(
                "{}; the contract must name the path to add one",
                link.describe()
            )
        })
    }

    /// A test file deleted that the contract does not say to delete: refused when it is
    /// one the contract means to make pass, flagged otherwise.
    fn deleted_test(&self, path: &str, declaration: Option<FileAction>) -> (Severity, String) {
        let targeted = declaration.is_some()
            || self.failing_files.contains(path)
            || self.evidence.contains(path)
            || self.names_test(path);
        if targeted {
            (
                Severity::Refused,
                "a test file the contract is meant to make pass was deleted".into(),
            )
        } else {
            (
                Severity::Flagged,
                "a test file was deleted; the contract does not say to".into(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(files: &[&str]) -> Contract {
        let files: Vec<serde_json::Value> = files
            .iter()
            .map(|p| serde_json::json!({"path": p, "action": "create", "why": "w"}))
            .collect();
        Contract::from_json(
            &serde_json::json!({
                "summary": "s",
                "diagnosis": {"hypothesis": "h"},
                "change": {"goal": "g", "files": files},
                "verification": {"commands": ["python3 -m pytest"]},
                "routing": {"risk": "low"}
            })
            .to_string(),
        )
        .unwrap()
    }

    fn scope(contract: &Contract, files: &[(&str, ChangeKind)]) -> Vec<(String, Severity)> {
        let changed: Vec<ChangedFile> = files
            .iter()
            .map(|(path, change)| ChangedFile {
                path: (*path).to_owned(),
                change: *change,
            })
            .collect();
        check_scope(contract, &[], &changed, &HashMap::new(), &RunSet::default())
            .into_iter()
            .map(|f| (f.path, f.severity))
            .collect()
    }

    #[test]
    fn an_added_test_setup_file_is_refused_unless_the_contract_names_it() {
        let added = [
            "conftest.py",
            "tests/unit/conftest.py",
            "pytest.ini",
            "jest.config.js",
            "web/jest.config.ts",
            "vitest.config.mts",
            "babel.config.js",
            "build.rs",
            "crates/x/build.rs",
            ".cargo/config.toml",
            "crates/x/.cargo/config.toml",
        ];
        let files: Vec<(&str, ChangeKind)> =
            added.iter().map(|p| (*p, ChangeKind::Added)).collect();
        let none = contract(&["calc.py"]);
        let found = scope(&none, &files);
        assert_eq!(
            found,
            added
                .iter()
                .map(|p| ((*p).to_owned(), Severity::Refused))
                .collect::<Vec<_>>()
        );
        let changed = [ChangedFile {
            path: "web/jest.config.ts".into(),
            change: ChangeKind::Added,
        }];
        let reason =
            &check_scope(&none, &[], &changed, &HashMap::new(), &RunSet::default())[0].reason;
        assert_eq!(
            reason,
            "a file like `jest.config.*` sets up how the tests run; the contract must name the \
             file to add it"
        );
        // Named, each is the contract's to add.
        assert_eq!(scope(&contract(&added), &files), []);
        // A test file beside them is no setup, and a changed Jest configuration is compared
        // for its test selection instead.
        assert_eq!(
            scope(
                &none,
                &[
                    ("tests/test_calc.py", ChangeKind::Added),
                    ("jest.config.js", ChangeKind::Modified),
                ]
            ),
            [("jest.config.js".to_owned(), Severity::Flagged)]
        );
    }
}
