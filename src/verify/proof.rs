//! Fail-to-pass proof: the tests a result adds or changes, run against the base code (the
//! base commit's checkout with only the result's test files put in), and what each one
//! proves. A test that fails on the base code and passes on the result shows the change
//! does what it is for; one that did not fail before proves nothing about it.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Component, Path};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::runs::{CommandRun, Phase, RunSet, tail};
use super::scope::{is_test_path, names_file};
use super::spans::{code, fence};

use crate::contract::Contract;
use crate::git::{ChangeKind, ChangedFile};

/// Tests listed in a proof; the counts go on past it.
const LISTED: usize = 100;

/// Bytes of test files put into the base's checkout for one proof.
const COPIED_MAX: u64 = 64 * 1024 * 1024;

/// Test files put into the base's checkout for one proof.
const COPIED_FILES: usize = 5_000;

/// Lines of an incomplete run's output shown with the proof.
const TAIL_LINES: usize = 20;

/// What one test proves about the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proof {
    /// Fails on the base code, passes on the result: it proves the change.
    Proven,
    /// Did not fail on the base code, passes on the result: it proves nothing about the
    /// change.
    ProvesNothing,
    /// Fails on the result.
    FailsAfter,
    /// The runs do not say: the base code did not build for a reason outside the test
    /// files, or a run could not run tests at all.
    Unknown,
}

impl Proof {
    fn label(self) -> &'static str {
        match self {
            Proof::Proven => "✅ proves the change",
            Proof::ProvesNothing => "⚠️ proves nothing: it does not fail on the base code",
            Proof::FailsAfter => "❌ fails after the change",
            Proof::Unknown => "❔ unknown",
        }
    }

    fn plain(self) -> &'static str {
        match self {
            Proof::Proven => "proves the change",
            Proof::ProvesNothing => "PROVES NOTHING (does not fail on the base code)",
            Proof::FailsAfter => "fails after the change",
            Proof::Unknown => "unknown",
        }
    }
}

/// One added or changed test, before and after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenTest {
    /// The test's id as its runner prints it, or the contract's `new_tests` entry.
    pub test: String,
    pub command: String,
    /// On the base code, in a few words ("failed", "did not fail", "did not compile: …").
    pub before: String,
    /// On the result ("passed", "failed", …).
    pub after: String,
    pub proof: Proof,
    /// The contract's `new_tests` names it.
    pub in_contract: bool,
}

/// The proof for one result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofReport {
    /// At most [`LISTED`], the contract's tests first.
    pub tests: Vec<ProvenTest>,
    /// Tests beyond those listed.
    pub omitted: u64,
    /// The base code ran with the result's test files (otherwise the result changed no
    /// test file, and the baseline stood for the base code).
    pub ran_on_base: bool,
    /// Said of the proof as a whole: test files that could not be put into the base's
    /// checkout, or why no proof was run.
    pub notes: Vec<String>,
    /// The base code's runs whose summary counted failures they did not name: a test
    /// they do not list may have failed, so their silence proves nothing either way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<IncompleteRun>,
}

/// A run on the base code that did not name every failure it counted, with the end of
/// its output so a maintainer sees why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncompleteRun {
    pub command: String,
    /// Failures and errors counted but not named.
    pub unnamed: u64,
    /// The last lines of the run's output (its distilled account).
    pub tail: String,
}

impl IncompleteRun {
    fn what(&self) -> String {
        format!(
            "on the base code counted {} failure(s) or error(s) it did not name; a test it \
             does not list may have failed. The end of its output:",
            self.unnamed
        )
    }
}

impl ProofReport {
    /// No proof could be made: `why` says so.
    pub fn not_run(why: &str) -> ProofReport {
        ProofReport {
            notes: vec![why.to_owned()],
            ..ProofReport::default()
        }
    }

    /// Why the result does not get a green check on the proof's account, if it does not:
    /// the contract names new tests, none of them proves the change, and at least one
    /// passed on the base code too.
    pub fn blocking(&self) -> Option<String> {
        let named: Vec<&ProvenTest> = self.tests.iter().filter(|t| t.in_contract).collect();
        let nothing = named.iter().any(|t| t.proof == Proof::ProvesNothing);
        let proven = named.iter().any(|t| t.proof == Proof::Proven);
        let failing = named.iter().any(|t| t.proof == Proof::FailsAfter);
        (nothing && !proven && !failing)
            .then(|| "the contract's new tests do not fail on the base code".to_owned())
    }

    pub fn is_empty(&self) -> bool {
        self.tests.is_empty() && self.notes.is_empty() && self.incomplete.is_empty()
    }

    /// The proof table for the pull request and the check run.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if self.tests.is_empty() && self.notes.is_empty() {
            return out;
        }
        out.push_str(
            "**Proof** (the new and changed tests on the base code, then on the result):\n\n",
        );
        if !self.tests.is_empty() {
            out.push_str("| test | on the base code | after | proof |\n|---|---|---|---|\n");
            for t in &self.tests {
                let name = if t.in_contract {
                    format!("{} (contract)", code(&t.test))
                } else {
                    code(&t.test)
                };
                let _ = writeln!(
                    out,
                    "| {name} | {} | {} | {} |",
                    cell(&t.before),
                    cell(&t.after),
                    t.proof.label()
                );
            }
            if self.omitted > 0 {
                let _ = writeln!(out, "\n… and {} more not listed.", self.omitted);
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n_{}_", crate::markdown::inline(note));
        }
        for run in &self.incomplete {
            let ticks = fence(&run.tail);
            let _ = writeln!(
                out,
                "\n{} {}\n\n{ticks}text\n{}\n{ticks}",
                code(&run.command),
                run.what(),
                run.tail
            );
        }
        if !self.ran_on_base && !self.tests.is_empty() {
            out.push_str(
                "\n_The result changed no test file: the baseline is the base code's run._\n",
            );
        }
        out
    }

    /// Plain text for the reviewer and a next attempt.
    pub fn compact(&self) -> String {
        let mut out = String::new();
        if self.tests.is_empty() && self.notes.is_empty() {
            return out;
        }
        out.push_str("proof (new and changed tests on the base code, then on the result):\n");
        for t in &self.tests {
            let contract = if t.in_contract { " (contract)" } else { "" };
            let _ = writeln!(
                out,
                "- {}{contract} [{}]: base code {}; after {}: {}",
                t.test,
                t.command,
                t.before,
                t.after,
                t.proof.plain()
            );
        }
        if self.omitted > 0 {
            let _ = writeln!(out, "- … {} more", self.omitted);
        }
        for note in &self.notes {
            let _ = writeln!(out, "- {note}");
        }
        for run in &self.incomplete {
            let _ = writeln!(
                out,
                "- {} {}\n    {}",
                run.command,
                run.what(),
                run.tail.replace('\n', "\n    ")
            );
        }
        out
    }
}

/// Text from the runs (a build error's location, why a run ended) in a table cell: shown
/// as written, nothing in it read as markdown.
fn cell(text: &str) -> String {
    crate::markdown::inline(text)
}

/// The result's changes that a proof runs on the base code: its test files (by path, or
/// named by the contract's `new_tests`).
pub fn test_changes(contract: &Contract, changed: &[ChangedFile]) -> Vec<ChangedFile> {
    changed
        .iter()
        .filter(|c| {
            is_test_path(&c.path)
                || contract
                    .verification
                    .new_tests
                    .iter()
                    .any(|entry| names_file(entry, &c.path))
        })
        .cloned()
        .collect()
}

/// Extensions of files in a programming language: code, which a proof never takes from
/// the result, since the base code is what it runs.
const CODE_EXTENSIONS: &[&str] = &[
    "py", "pyi", "pyx", "pxd", "rs", "go", "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx",
    "java", "kt", "kts", "scala", "groovy", "rb", "php", "c", "h", "cc", "cpp", "cxx", "hpp", "hh",
    "m", "mm", "swift", "cs", "fs", "vb", "ex", "exs", "erl", "hrl", "clj", "lua", "pl", "pm", "r",
    "jl", "dart", "zig", "nim", "hs", "ml", "mli", "sh", "bash", "zsh", "ps1", "sql", "vue",
    "svelte", "so", "dll", "dylib", "a", "o", "wasm", "jar", "class", "pyc",
];

/// Files that say how code builds, installs or is tested: never taken from the result.
const BUILD_FILES: &[&str] = &[
    "cargo.toml",
    "cargo.lock",
    "build.rs",
    "package.json",
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "tox.ini",
    "pytest.ini",
    "conftest.py",
    "requirements.txt",
    "pipfile",
    "pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "go.mod",
    "go.sum",
    "pom.xml",
    "build.gradle",
    "settings.gradle",
    "gradle.properties",
    "makefile",
    "gnumakefile",
    "cmakelists.txt",
    "meson.build",
    "dockerfile",
    "gemfile",
    "gemfile.lock",
    "rakefile",
    "composer.json",
    "composer.lock",
    "mix.exs",
    "deno.json",
    "tsconfig.json",
    "babel.config.json",
    ".babelrc",
    ".npmrc",
    ".pypirc",
    ".env",
    "manifest.in",
];

/// A file a test may read that is neither code nor how code builds: data, fixtures,
/// snapshots, expected output.
fn is_support_file(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let dir_is = |d: &str| lower.split('/').any(|part| part == d);
    if name.is_empty() || dir_is(".github") || dir_is(".gitlab") || dir_is(".cargo") {
        return false;
    }
    if BUILD_FILES.contains(&name)
        || name.starts_with("jest.config.")
        || name.starts_with("vitest.config.")
        || name.starts_with("babel.config.")
        || name.starts_with(".gitlab-ci")
        || name.starts_with(".planwright")
    {
        return false;
    }
    match name.rsplit_once('.') {
        Some((_, ext)) => !CODE_EXTENSIONS.contains(&ext),
        None => true,
    }
}

/// The result's changes that its tests may read on the base code besides the test files:
/// data, fixtures and snapshots it adds or changes, never code or build settings. A test
/// that passes only because of such a file then passes on the base code too, and proves
/// nothing about the code.
pub fn support_changes(changed: &[ChangedFile], tests: &[ChangedFile]) -> Vec<ChangedFile> {
    changed
        .iter()
        .filter(|c| !tests.iter().any(|t| t.path == c.path) && is_support_file(&c.path))
        .cloned()
        .collect()
}

/// Puts the result's `tests` (read from `from`, the result's checkout) into `to`, the
/// base's checkout: written, or removed where the result deleted them. Never follows a
/// link the base's tree holds. Returns what could not be put in, said for the report.
pub fn copy_tests(from: &Path, to: &Path, tests: &[ChangedFile]) -> anyhow::Result<Vec<String>> {
    use std::os::unix::fs::MetadataExt as _;
    let mut notes = Vec::new();
    let mut copied = 0u64;
    let mut files = 0usize;
    // What is written belongs to the checkout's owner (the user sandboxes run as), with
    // the modes git gives: the base code must read and write it as the result's run does.
    let root = std::fs::metadata(to).with_context(|| format!("Could not read {}", to.display()))?;
    let owner = Owner {
        uid: root.uid(),
        gid: root.gid(),
    };
    for change in tests {
        let relative = Path::new(&change.path);
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            notes.push(format!(
                "`{}` is not a plain relative path: left out",
                change.path
            ));
            continue;
        }
        let target = to.join(relative);
        let parent_ok = safe_parents(to, relative, owner)?;
        if !parent_ok {
            notes.push(format!(
                "`{}` is under a link in the base's tree: left out",
                change.path
            ));
            continue;
        }
        match change.change {
            ChangeKind::Deleted => remove_entry(&target)?,
            ChangeKind::Added | ChangeKind::Modified | ChangeKind::TypeChanged => {
                if !plain_parents(from, relative) {
                    notes.push(format!(
                        "`{}` is under a link in the result: left out",
                        change.path
                    ));
                    continue;
                }
                let source = from.join(relative);
                let meta = match std::fs::symlink_metadata(&source) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        remove_entry(&target)?;
                        continue;
                    }
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("Could not read {}", source.display()));
                    }
                };
                if !meta.is_file() {
                    notes.push(format!("`{}` is not a regular file: left out", change.path));
                    continue;
                }
                files += 1;
                copied += meta.len();
                if copied > COPIED_MAX || files > COPIED_FILES {
                    // Deletions still apply; only copies stop.
                    notes.push(format!(
                        "`{}` was left out: past {COPIED_FILES} files or {} MiB of test files",
                        change.path,
                        COPIED_MAX / 1024 / 1024
                    ));
                    continue;
                }
                let bytes = read_plain(&source)?;
                remove_entry(&target)?;
                let executable = meta.mode() & 0o111 != 0;
                write_new(&target, &bytes, executable, owner)?;
            }
        }
    }
    Ok(notes)
}

#[derive(Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

impl Owner {
    fn give(self, path: &Path) -> anyhow::Result<()> {
        // Only root may give a file away; as anyone else it is already ours.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(());
        }
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
            .with_context(|| format!("Could not give {} to the checkout's owner", path.display()))
    }
}

/// Creates the folders above `relative` under `root` where missing; false when one of
/// them is something other than a folder (a link the base's tree holds).
fn safe_parents(root: &Path, relative: &Path, owner: Owner) -> anyhow::Result<bool> {
    let mut at = root.to_path_buf();
    let Some(parent) = relative.parent() else {
        return Ok(true);
    };
    for part in parent.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&at)
                    .with_context(|| format!("Could not create {}", at.display()))?;
                owner.give(&at)?;
            }
            Err(e) => return Err(e).with_context(|| format!("Could not read {}", at.display())),
        }
    }
    Ok(true)
}

/// Every folder above `relative` under `root` is a folder, not a link: what is read is
/// in the checkout.
fn plain_parents(root: &Path, relative: &Path) -> bool {
    let mut at = root.to_path_buf();
    let Some(parent) = relative.parent() else {
        return true;
    };
    parent.components().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

fn remove_entry(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)
            .with_context(|| format!("Could not remove {}", path.display())),
        Ok(_) => std::fs::remove_file(path)
            .with_context(|| format!("Could not remove {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("Could not read {}", path.display())),
    }
}

fn read_plain(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("Could not open {}", path.display()))?;
    if !file.metadata()?.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .with_context(|| format!("Could not read {}", path.display()))?;
    Ok(bytes)
}

fn write_new(path: &Path, bytes: &[u8], executable: bool, owner: Owner) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mode = if executable { 0o755 } else { 0o644 };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("Could not create {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("Could not write {}", path.display()))?;
    owner.give(path)
}

/// Compares the base code's runs (`before`: the base with the result's test files, or
/// the baseline when `ran_on_base` is false) with the result's (`after`), for the tests
/// that failed on the base code in `tests` and the contract's `new_tests`. `baseline`
/// tells the tests the result added from those already failing; `notes` say what could not
/// be put into the base's checkout, which makes a failure there no proof.
pub fn prove(
    contract: &Contract,
    tests: &[ChangedFile],
    baseline: &RunSet,
    before: &RunSet,
    after: &RunSet,
    ran_on_base: bool,
    notes: Vec<String>,
) -> ProofReport {
    let mut listed: Vec<ProvenTest> = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let files: Vec<&str> = tests
        .iter()
        .filter(|c| c.change != ChangeKind::Deleted)
        .map(|c| c.path.as_str())
        .collect();
    let entries = &contract.verification.new_tests;
    let checks = after.runs.iter().filter(|r| r.phase == Phase::Check);
    // A test file left out can make the others fail on the base code for its absence.
    let whole = notes.is_empty();
    let mut new_failure = false;

    // Tests of the changed files that fail on the base code, by id.
    for run_after in checks.clone() {
        let Some(base) = before.find(Phase::Check, &run_after.command) else {
            continue;
        };
        let failing_already = baseline
            .find(Phase::Check, &run_after.command)
            .map(CommandRun::failing_ids)
            .unwrap_or_default();
        for f in &base.failures {
            let location = f.location.as_deref();
            let in_files = files.iter().any(|path| {
                names_file(&f.id, path) || location.is_some_and(|l| location_in(l, path))
            });
            let named = entries.iter().any(|e| test_matches(e, &f.id, location));
            if !(in_files || named) || !seen.insert((run_after.command.clone(), f.id.clone())) {
                continue;
            }
            new_failure |= in_files && !failing_already.contains(f.id.as_str());
            let (after, proof) = after_state(after, run_after, &f.id);
            listed.push(ProvenTest {
                test: f.id.clone(),
                command: run_after.command.clone(),
                before: "failed".into(),
                after,
                proof: match proof {
                    Proof::Proven | Proof::ProvesNothing if whole => Proof::Proven,
                    Proof::Proven | Proof::ProvesNothing => Proof::Unknown,
                    other => other,
                },
                in_contract: named,
            });
        }
    }

    // The contract's tests no failure on the base code named.
    let seen_on_base = Seen {
        files: &files,
        before,
        ran_on_base,
        whole,
        new_failure,
    };
    for entry in entries {
        if listed
            .iter()
            .any(|t| t.in_contract && test_matches(entry, &t.test, None))
        {
            continue;
        }
        listed.push(entry_proof(entry, &seen_on_base, checks.clone()));
    }

    listed.sort_by_key(|t| !t.in_contract);
    let omitted = listed.len().saturating_sub(LISTED) as u64;
    listed.truncate(LISTED);
    let incomplete = before
        .runs
        .iter()
        .filter(|r| r.phase == Phase::Check && !r.summary.complete())
        .filter(|r| listed.iter().any(|t| t.command == r.command))
        .map(|r| IncompleteRun {
            command: r.command.clone(),
            unnamed: r.summary.unnamed,
            tail: tail(&r.excerpt, TAIL_LINES),
        })
        .collect();
    ProofReport {
        tests: listed,
        omitted,
        ran_on_base,
        notes,
        incomplete,
    }
}

/// What the base code's runs can say about a test none of their failures names.
struct Seen<'a> {
    /// The result's test files put into the base's checkout.
    files: &'a [&'a str],
    before: &'a RunSet,
    ran_on_base: bool,
    /// Every test file went in.
    whole: bool,
    /// A test the result added failed on the base code: an entry no failure names may
    /// only be named otherwise than its runner names it.
    new_failure: bool,
}

/// A contract entry that no failure on the base code named: failing after, a build of the
/// base code broken by the test files themselves (it fails before), passing before — only
/// when the base code's run was whole and nothing else explains the silence — or unknown.
fn entry_proof<'a>(
    entry: &str,
    seen: &Seen<'_>,
    checks: impl Iterator<Item = &'a CommandRun> + Clone,
) -> ProvenTest {
    let failing_after = checks.clone().find(|r| {
        r.failures
            .iter()
            .any(|f| test_matches(entry, &f.id, f.location.as_deref()))
    });
    if let Some(run) = failing_after {
        return ProvenTest {
            test: entry.to_owned(),
            command: run.command.clone(),
            before: before_words(seen.before, run),
            after: "failed".into(),
            proof: Proof::FailsAfter,
            in_contract: true,
        };
    }
    // The command that ran tests on the result is the entry's; none did: the first.
    let Some(run) = checks
        .clone()
        .find(|r| r.ran_tests())
        .or(checks.clone().next())
    else {
        return ProvenTest {
            test: entry.to_owned(),
            command: String::new(),
            before: "—".into(),
            after: "no verification command".into(),
            proof: Proof::Unknown,
            in_contract: true,
        };
    };
    // Its failures are all listed and the entry is not among them: it passed.
    let ran_after = whole_run(run);
    let after = if ran_after {
        "passed".to_owned()
    } else if !run.summary.complete() {
        not_named(run)
    } else {
        format!("no tests ran ({})", run.summary.ending())
    };
    let base = seen.before.find(Phase::Check, &run.command);
    let named_file = entry_file(entry);
    let (before_text, proof) = match base {
        None => ("not run".to_owned(), Proof::Unknown),
        Some(b) if b.summary.no_result.is_some() => (
            format!(
                "could not run: {}",
                b.summary.no_result.as_deref().unwrap_or_default()
            ),
            Proof::Unknown,
        ),
        // The run counted failures it did not name: the entry may be one of them.
        Some(b)
            if !b.summary.complete()
                && !named_file
                    .is_some_and(|file| b.failures.iter().any(|f| location_in(&f.id, file))) =>
        {
            (not_named(b), Proof::Unknown)
        }
        Some(b) if !b.ran_tests() && !b.summary.succeeded() => {
            match broken_by_tests(b, seen.files) {
                Some(at) if seen.ran_on_base && seen.whole => {
                    (format!("did not build: {at}"), Proof::Proven)
                }
                _ => (
                    format!("the base code did not build: {}", first_problem(b)),
                    Proof::Unknown,
                ),
            }
        }
        Some(b) if !b.ran_tests() => ("ran no tests".into(), Proof::Unknown),
        // A collection or import error of the entry's own file (pytest names the file):
        // its tests failed before, as a new test of new code does.
        Some(b)
            if named_file
                .is_some_and(|file| b.failures.iter().any(|f| location_in(&f.id, file))) =>
        {
            let proof = if seen.ran_on_base && seen.whole {
                Proof::Proven
            } else {
                Proof::Unknown
            };
            ("its file failed to load".into(), proof)
        }
        Some(b) if !whole_run(b) => (
            format!("its run did not finish ({})", b.summary.ending()),
            Proof::Unknown,
        ),
        Some(_) if !seen.ran_on_base => (
            "not run with the result's tests: the result changed no test file".into(),
            Proof::Unknown,
        ),
        Some(_) if !seen.whole => ("not all test files could be put in".into(), Proof::Unknown),
        Some(_) if named_file.is_some_and(|f| !seen.files.iter().any(|p| location_in(f, p))) => (
            "its file is not among the result's test files".into(),
            Proof::Unknown,
        ),
        Some(_) if seen.new_failure => (
            "not failing under this name (other new tests failed)".into(),
            Proof::Unknown,
        ),
        Some(_) => ("did not fail".into(), Proof::ProvesNothing),
    };
    let proof = if ran_after { proof } else { Proof::Unknown };
    ProvenTest {
        test: entry.to_owned(),
        command: run.command.clone(),
        before: before_text,
        after,
        proof,
        in_contract: true,
    }
}

/// What a run that did not name every failure it counted says of a test it does not list.
fn not_named(run: &CommandRun) -> String {
    format!(
        "unknown: {} failure(s) counted but not named ({})",
        run.summary.unnamed,
        run.summary.ending()
    )
}

/// The run went to its end and lists every failure: a test it does not list did not fail.
fn whole_run(run: &CommandRun) -> bool {
    run.ran_tests()
        && run.summary.complete()
        && run.summary.no_result.is_none()
        && !run.summary.timed_out
        && run.summary.signal.is_none()
        && run.failures.len() < crate::distill::MAX_FAILURES
}

/// How `id` did on the result's run, and what that makes of a test that failed before:
/// it passed only when a run of it alone showed it passing (the result's run does not
/// list passing tests, and a test missing from it may just not have run).
fn after_state(after: &RunSet, run: &CommandRun, id: &str) -> (String, Proof) {
    let confirmations = after.reruns_of(&run.command);
    let confirmations = confirmations.iter().filter(|r| r.confirms);
    if run.failures.iter().any(|f| f.id == id) {
        ("failed".into(), Proof::FailsAfter)
    } else if run.named_passing(id) || confirmations.clone().any(|r| r.passed(id)) {
        ("passed".into(), Proof::Proven)
    } else if confirmations.clone().any(|r| r.failed_when_selected(id)) {
        (
            "not in the run; failed when run alone".into(),
            Proof::FailsAfter,
        )
    } else if !run.summary.complete() {
        (not_named(run), Proof::Unknown)
    } else if run.ran_tests() {
        (
            "not in the run, and not seen passing alone".into(),
            Proof::Unknown,
        )
    } else {
        (
            format!("no tests ran ({})", run.summary.ending()),
            Proof::Unknown,
        )
    }
}

fn before_words(before: &RunSet, after: &CommandRun) -> String {
    match before.find(Phase::Check, &after.command) {
        None => "not run".into(),
        Some(b) if b.failures.is_empty() && b.summary.succeeded() => "did not fail".into(),
        Some(b) if !b.ran_tests() => format!("did not build: {}", first_problem(b)),
        Some(_) => "ran".into(),
    }
}

/// Where the base code's build broke, when every error it names is in one of the test
/// files: the new test itself does not compile without the change, which is how a test of
/// new code fails before it.
fn broken_by_tests(run: &CommandRun, files: &[&str]) -> Option<String> {
    let located: Vec<&str> = run
        .build_errors
        .iter()
        .filter_map(|p| p.location.as_deref())
        .chain(run.failures.iter().filter_map(|f| f.location.as_deref()))
        .collect();
    if located.is_empty() {
        return None;
    }
    located
        .iter()
        .all(|l| files.iter().any(|path| location_in(l, path)))
        .then(|| located[0].to_owned())
}

fn first_problem(run: &CommandRun) -> String {
    run.build_errors
        .first()
        .map(|p| match &p.location {
            Some(l) => l.clone(),
            None => p.message.lines().next().unwrap_or_default().to_owned(),
        })
        .unwrap_or_else(|| run.summary.ending())
}

/// `location` (`path:line[:col]`, relative to the checkout) is in `path`.
fn location_in(location: &str, path: &str) -> bool {
    let file = location
        .trim()
        .trim_start_matches("./")
        .split(':')
        .next()
        .unwrap_or_default();
    !file.is_empty() && (file == path || file.ends_with(&format!("/{path}")))
}

/// A contract's `new_tests` entry names the runner's test `id` (found at `location`):
/// the same text; or the entry's last name (`tests/test_calc.py::test_sum` → `test_sum`)
/// is one of the id's names and the file the entry names, if any, is the id's; or, for an
/// entry written as words (`adds big numbers`), the id has them as one name
/// (`test_adds_big_numbers`).
pub(super) fn test_matches(entry: &str, id: &str, location: Option<&str>) -> bool {
    let entry = entry.trim();
    if entry.is_empty() {
        return false;
    }
    if entry == id.trim() {
        return true;
    }
    let names = |s: &str| -> Vec<String> {
        s.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let id_names = names(id);
    if entry.contains(char::is_whitespace) {
        let joined = names(&entry.to_lowercase()).join("_");
        return id_names
            .iter()
            .map(|n| n.to_lowercase())
            .any(|n| n == joined || n == format!("test_{joined}"));
    }
    let entry_names = names(entry);
    let Some(last) = entry_names.last() else {
        return false;
    };
    if FILE_SUFFIXES.contains(&last.as_str()) {
        // The entry is a whole file: its tests are those the id places there.
        return names_file(id, entry) || location.is_some_and(|l| location_in(l, entry));
    }
    if !id_names.iter().any(|n| n == last) {
        return false;
    }
    match entry_file(entry) {
        Some(file) => names_file(id, file) || location.is_some_and(|l| location_in(l, file)),
        None => true,
    }
}

/// The file an entry names before its test (`tests/test_calc.py` of
/// `tests/test_calc.py::test_sum`), if it names one.
fn entry_file(entry: &str) -> Option<&str> {
    let (file, _) = entry.trim().split_once("::")?;
    let extension = file.rsplit_once('.').map(|(_, e)| e)?;
    FILE_SUFFIXES.contains(&extension).then_some(file)
}

/// The last name of a path that is a file's extension, not a test's name.
const FILE_SUFFIXES: &[&str] = &[
    "py", "rs", "go", "js", "ts", "jsx", "tsx", "mjs", "cjs", "java", "kt", "rb", "php", "cs", "c",
    "cc", "cpp", "swift", "scala", "ex", "exs",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::{Failure, Problem};
    use crate::verify::runs::RunSummary;

    fn contract(new_tests: &[&str]) -> Contract {
        let tests: Vec<String> = new_tests.iter().map(|t| format!("{t:?}")).collect();
        Contract::from_json(&format!(
            r#"{{
              "summary": "s",
              "diagnosis": {{"hypothesis": "h"}},
              "change": {{"goal": "g", "files": [{{"path": "calc.py", "action": "modify", "why": "w"}}]}},
              "verification": {{"commands": ["t"], "new_tests": [{}]}},
              "routing": {{"risk": "low"}}
            }}"#,
            tests.join(",")
        ))
        .unwrap()
    }

    fn run(exit: i32, passed: u64, failing: &[(&str, &str)]) -> CommandRun {
        CommandRun {
            command: "t".into(),
            phase: Phase::Check,
            summary: RunSummary {
                exit_code: Some(exit),
                signal: None,
                timed_out: false,
                duration_ms: 10,
                runner: "pytest".into(),
                passed,
                failed: failing.len() as u64,
                skipped: 0,
                errors: 0,
                restored: false,
                no_result: None,
                unnamed: 0,
            },
            failures: failing
                .iter()
                .map(|(id, at)| Failure {
                    id: (*id).into(),
                    message: "assert".into(),
                    location: Some((*at).into()),
                })
                .collect(),
            build_errors: Vec::new(),
            excerpt: String::new(),
            selected: None,
            could_not_select: false,
            ids: Vec::new(),
            confirms: false,
            passing: Vec::new(),
        }
    }

    /// A run of `ids` alone on the result that saw `passed` tests pass.
    fn confirmation(ids: &[&str], passed: u64) -> CommandRun {
        let mut r = run(0, passed, &[]);
        r.selected = Some(format!("t {}", ids.join(" ")));
        r.ids = ids.iter().map(|id| (*id).to_owned()).collect();
        r.confirms = true;
        r
    }

    fn set(run: CommandRun) -> RunSet {
        RunSet {
            runs: vec![run],
            ..RunSet::default()
        }
    }

    fn added(path: &str) -> ChangedFile {
        ChangedFile {
            path: path.into(),
            change: ChangeKind::Added,
        }
    }

    fn proofs(report: &ProofReport) -> Vec<(&str, Proof, bool)> {
        report
            .tests
            .iter()
            .map(|t| (t.test.as_str(), t.proof, t.in_contract))
            .collect()
    }

    #[test]
    fn the_proof_takes_data_the_tests_read_but_never_code_or_build_settings() {
        for data in [
            "data/expected.txt",
            "tests/fixtures/payload.json",
            "snapshots/__snapshots__/render.snap",
            "VERSION",
            "docs/table.csv",
        ] {
            assert!(is_support_file(data), "{data}");
        }
        for code in [
            "calc.py",
            "src/lib.rs",
            "web/app.test.ts",
            "conftest.py",
            "pkg/conftest.py",
            "Cargo.toml",
            "package.json",
            "jest.config.js",
            "setup.cfg",
            ".github/workflows/ci.yml",
            ".cargo/config.toml",
            "Makefile",
            "lib/native.so",
        ] {
            assert!(!is_support_file(code), "{code}");
        }
        let changed = [
            added("data/expected.txt"),
            added("calc.py"),
            added("test_x.py"),
        ];
        let support = support_changes(&changed, &[added("test_x.py")]);
        assert_eq!(
            support.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(),
            ["data/expected.txt"]
        );
    }

    #[test]
    fn a_test_failing_on_the_base_code_and_passing_after_proves_the_change() {
        let c = contract(&["tests/test_calc.py::test_sum"]);
        let files = [added("tests/test_calc.py")];
        let before = set(run(
            1,
            3,
            &[
                ("tests/test_calc.py::test_sum", "tests/test_calc.py:4"),
                ("tests/test_calc.py::test_big", "tests/test_calc.py:9"),
                ("tests/test_other.py::test_old", "tests/test_other.py:2"),
            ],
        ));
        let mut after = set(run(
            1,
            4,
            &[("tests/test_other.py::test_old", "tests/test_other.py:2")],
        ));
        // Not in the result's run: each passes when run alone.
        after.reruns.push(confirmation(
            &[
                "tests/test_calc.py::test_sum",
                "tests/test_calc.py::test_big",
            ],
            2,
        ));
        let report = prove(
            &c,
            &files,
            &RunSet::default(),
            &before,
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(
            proofs(&report),
            vec![
                ("tests/test_calc.py::test_sum", Proof::Proven, true),
                ("tests/test_calc.py::test_big", Proof::Proven, false),
            ]
        );
        assert_eq!(report.blocking(), None);
        let table = report.markdown();
        assert!(
            table.contains("| `tests/test_calc.py::test_sum` (contract) | failed | passed | ✅ proves the change |"),
            "{table}"
        );
    }

    #[test]
    fn a_contract_test_that_passes_on_the_base_code_proves_nothing_and_blocks() {
        let c = contract(&["test_sum"]);
        let files = [added("tests/test_calc.py")];
        let before = set(run(0, 4, &[]));
        let after = set(run(0, 4, &[]));
        let report = prove(
            &c,
            &files,
            &RunSet::default(),
            &before,
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(
            proofs(&report),
            vec![("test_sum", Proof::ProvesNothing, true)]
        );
        assert_eq!(
            report.blocking().as_deref(),
            Some("the contract's new tests do not fail on the base code")
        );
        // One proven test among them is enough.
        let c = contract(&["test_sum", "test_big"]);
        let before = set(run(
            1,
            4,
            &[("test_calc.py::test_big", "tests/test_calc.py:9")],
        ));
        let report = prove(
            &c,
            &files,
            &RunSet::default(),
            &before,
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(report.blocking(), None, "{:?}", report.tests);
    }

    #[test]
    fn a_new_test_failing_after_is_said_and_does_not_count_as_proof() {
        let c = contract(&["test_sum"]);
        let before = set(run(1, 1, &[("t::test_sum", "tests/t.py:1")]));
        let after = set(run(1, 1, &[("t::test_sum", "tests/t.py:1")]));
        let report = prove(
            &c,
            &[added("tests/t.py")],
            &RunSet::default(),
            &before,
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(
            proofs(&report),
            vec![("t::test_sum", Proof::FailsAfter, true)]
        );
    }

    #[test]
    fn a_test_that_does_not_compile_on_the_base_code_fails_before_unless_other_code_broke() {
        let c = contract(&["adds_large_numbers"]);
        let files = [added("tests/big.rs")];
        let mut broken = run(101, 0, &[]);
        broken.build_errors = vec![Problem {
            message: "error[E0425]: cannot find function `add_big`".into(),
            location: Some("tests/big.rs:3:5".into()),
        }];
        let after = set(run(0, 5, &[]));
        let none = RunSet::default();
        let report = prove(
            &c,
            &files,
            &none,
            &set(broken.clone()),
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(
            proofs(&report),
            vec![("adds_large_numbers", Proof::Proven, true)]
        );
        assert_eq!(report.tests[0].before, "did not build: tests/big.rs:3:5");
        // A build broken in code the result did not add says nothing about the test.
        broken.build_errors[0].location = Some("src/lib.rs:10:1".into());
        let report = prove(&c, &files, &none, &set(broken), &after, true, Vec::new());
        assert_eq!(
            proofs(&report),
            vec![("adds_large_numbers", Proof::Unknown, true)]
        );
        assert_eq!(
            report.tests[0].before,
            "the base code did not build: src/lib.rs:10:1"
        );
        assert_eq!(report.blocking(), None);
    }

    #[test]
    fn entries_match_ids_by_their_last_name_or_file() {
        let yes = [
            (
                "tests/test_calc.py::test_sum",
                "test_sum (tests.test_calc.TestCalc)",
                None,
            ),
            ("test_sum", "tests/test_calc.py::TestCalc::test_sum", None),
            (
                "parse::tests::trailing_comma",
                "tests::trailing_comma",
                None,
            ),
            ("tests/test_calc.py", "tests/test_calc.py::test_sum", None),
            ("tests/a.py::test_sum", "test_sum", Some("tests/a.py:3")),
            ("adds big numbers", "tests::test_adds_big_numbers", None),
        ];
        for (entry, id, location) in yes {
            assert!(test_matches(entry, id, location), "{entry} / {id}");
        }
        let no = [
            ("tests/test_calc.py", "tests/test_other.py::test_sum", None),
            ("tests/a.py::test_sum", "tests/b.py::test_sum", None),
            ("tests/a.py::test_sum", "test_sum", Some("tests/b.py:3")),
            ("test_sum", "test_summary", None),
            ("adds big numbers", "test_add[big]", None),
            ("", "x", None),
        ];
        for (entry, id, location) in no {
            assert!(!test_matches(entry, id, location), "{entry} / {id}");
        }
    }

    #[test]
    fn a_silent_base_run_proves_nothing_only_when_it_was_whole() {
        let c = contract(&["tests/test_calc.py::test_sum"]);
        let files = [added("tests/test_calc.py")];
        let after = set(run(0, 5, &[]));
        let none = RunSet::default();
        let verdict = |before: CommandRun, ran_on_base: bool, notes: Vec<String>| {
            let report = prove(&c, &files, &none, &set(before), &after, ran_on_base, notes);
            (report.tests[0].proof, report.tests[0].before.clone())
        };
        assert_eq!(
            verdict(run(0, 4, &[]), true, Vec::new()),
            (Proof::ProvesNothing, "did not fail".into())
        );
        // A base run that a limit ended, or whose failures were not all listed.
        let mut timed_out = run(1, 4, &[]);
        timed_out.summary.timed_out = true;
        assert_eq!(verdict(timed_out, true, Vec::new()).0, Proof::Unknown);
        // The test files did not all go in, or none went in at all.
        let left_out = vec!["`tests/helpers.py` is not a regular file: left out".to_owned()];
        assert_eq!(verdict(run(0, 4, &[]), true, left_out).0, Proof::Unknown);
        assert_eq!(verdict(run(0, 4, &[]), false, Vec::new()).0, Proof::Unknown);
        // A collection error names the file, not the test: the file failed before.
        let collected = run(2, 0, &[("tests/test_calc.py", "tests/test_calc.py:1")]);
        let mut after = after.clone();
        after.reruns.push(confirmation(&["tests/test_calc.py"], 5));
        let report = prove(&c, &files, &none, &set(collected), &after, true, Vec::new());
        assert_eq!(
            proofs(&report),
            vec![
                ("tests/test_calc.py::test_sum", Proof::Proven, true),
                ("tests/test_calc.py", Proof::Proven, false),
            ],
            "{:?}",
            report.tests
        );
        assert_eq!(report.tests[0].before, "its file failed to load");
        // Another new test failed before: the entry may only be named otherwise.
        let c = contract(&["adds large sums"]);
        let other = run(
            1,
            4,
            &[("tests/test_calc.py::test_big", "tests/test_calc.py:9")],
        );
        let mut after = set(run(0, 5, &[]));
        after
            .reruns
            .push(confirmation(&["tests/test_calc.py::test_big"], 1));
        let report = prove(&c, &files, &none, &set(other), &after, true, Vec::new());
        assert_eq!(report.tests[0].proof, Proof::Unknown, "{:?}", report.tests);
        assert_eq!(report.tests[1].proof, Proof::Proven, "{:?}", report.tests);
        // Not seen passing: a test missing from the result's run proves nothing either way.
        let unseen = set(run(0, 5, &[]));
        let other = run(
            1,
            4,
            &[("tests/test_calc.py::test_big", "tests/test_calc.py:9")],
        );
        let report = prove(&c, &files, &none, &set(other), &unseen, true, Vec::new());
        assert_eq!(report.tests[1].proof, Proof::Unknown, "{:?}", report.tests);
        assert_eq!(
            report.tests[1].after,
            "not in the run, and not seen passing alone"
        );
        assert_eq!(report.blocking(), None);
    }

    /// A base run whose summary counted failures it did not name (a test closed the
    /// runner's output) says nothing of a contract test it does not list: "unknown",
    /// never "did not fail", with the end of its output shown; the table marks it, and
    /// it is no run a test passed in.
    #[test]
    fn a_base_run_that_does_not_name_its_failures_gives_unknown_not_did_not_fail() {
        let c = contract(&["tests/test_calc.py::test_sum"]);
        let files = [added("tests/test_calc.py")];
        let after = set(run(0, 5, &[]));
        let mut incomplete = run(1, 3, &[]);
        incomplete.summary.failed = 2;
        incomplete.summary.unnamed = 2;
        incomplete.excerpt = "tests/test_calc.py F.F.                [100%]\n\
            Traceback (most recent call last):\n\
            ValueError: I/O operation on closed file.\n\
            ========================= 2 failed, 3 passed in 0.04s ========================="
            .into();
        let report = prove(
            &c,
            &files,
            &RunSet::default(),
            &set(incomplete.clone()),
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(
            proofs(&report),
            vec![("tests/test_calc.py::test_sum", Proof::Unknown, true)]
        );
        assert_eq!(
            report.tests[0].before,
            "unknown: 2 failure(s) counted but not named (exit 1)"
        );
        // Unknown neither proves the change nor blocks it, as other unknowns.
        assert_eq!(report.blocking(), None);
        let table = report.markdown();
        assert!(table.contains("| ❔ unknown |"), "{table}");
        assert!(
            table.contains("counted 2 failure(s) or error(s) it did not name"),
            "{table}"
        );
        assert!(
            table.contains("ValueError: I/O operation on closed file.\n====="),
            "{table}"
        );
        assert!(report.compact().contains("I/O operation on closed file"));
        // Read back from the database as it was stored.
        let stored = serde_json::to_string(&report).unwrap();
        assert_eq!(
            serde_json::from_str::<ProofReport>(&stored).unwrap(),
            report
        );

        // Whole, the same run says the test did not fail.
        let mut whole = incomplete.clone();
        whole.summary.unnamed = 0;
        whole.summary.failed = 0;
        let report = prove(
            &c,
            &files,
            &RunSet::default(),
            &set(whole),
            &after,
            true,
            Vec::new(),
        );
        assert_eq!(report.tests[0].proof, Proof::ProvesNothing);
        assert!(report.incomplete.is_empty());

        // No test passed in an incomplete run, and its table cell says why.
        assert!(!incomplete.passed("tests/test_calc.py::test_sum"));
        let mut named = incomplete.clone();
        named.summary.unnamed = 0;
        assert!(named.passed("tests/test_calc.py::test_sum"));
        let table = crate::verify::report::VerificationReport::compare(
            &set(incomplete),
            &after,
            &[],
            Vec::new(),
        )
        .pr_markdown();
        assert!(
            table.contains("3 passed, 2 failed · 2 failures not named · exit 1"),
            "{table}"
        );
    }

    #[test]
    fn copied_tests_belong_to_the_checkouts_owner_with_the_modes_git_gives() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(from.path().join("tests/new")).unwrap();
        let hidden = from.path().join("tests/new/test_a.py");
        std::fs::write(&hidden, "x").unwrap();
        // Unreadable to anyone else: on the base code it would fail for that alone.
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o600)).unwrap();
        let tool = from.path().join("tests/new/run.sh");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o700)).unwrap();
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(to.path(), Some(65534), Some(65534)).unwrap();
        }
        let owner = std::fs::metadata(to.path()).unwrap();
        let notes = copy_tests(
            from.path(),
            to.path(),
            &[added("tests/new/test_a.py"), added("tests/new/run.sh")],
        )
        .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        for (path, mode) in [
            ("tests", 0o755),
            ("tests/new", 0o755),
            ("tests/new/test_a.py", 0o644),
            ("tests/new/run.sh", 0o755),
        ] {
            let meta = std::fs::metadata(to.path().join(path)).unwrap();
            assert_eq!(
                (meta.uid(), meta.gid()),
                (owner.uid(), owner.gid()),
                "{path}"
            );
            if path.ends_with(".py") || path.ends_with(".sh") {
                assert_eq!(meta.mode() & 0o777, mode, "{path}");
            }
        }
    }

    #[test]
    fn a_test_failing_before_only_for_a_left_out_file_is_no_proof() {
        let c = contract(&[]);
        let files = [added("tests/test_calc.py")];
        let before = set(run(
            1,
            0,
            &[("tests/test_calc.py::test_sum", "tests/test_calc.py:4")],
        ));
        let after = set(run(0, 5, &[]));
        let notes = vec!["`tests/conftest.py` is under a link in the result: left out".to_owned()];
        let report = prove(&c, &files, &RunSet::default(), &before, &after, true, notes);
        assert_eq!(
            proofs(&report),
            vec![("tests/test_calc.py::test_sum", Proof::Unknown, false)]
        );
    }

    #[test]
    fn test_files_go_into_the_base_checkout_without_following_its_links() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(from.path().join("tests/deep")).unwrap();
        std::fs::write(from.path().join("tests/deep/test_a.py"), "new").unwrap();
        std::fs::create_dir_all(from.path().join("spec")).unwrap();
        std::fs::write(from.path().join("spec/a_spec.rb"), "x").unwrap();
        std::fs::write(to.path().join("test_gone.py"), "old").unwrap();
        // The base's tree holds `spec` as a link out of the checkout.
        std::os::unix::fs::symlink(outside.path(), to.path().join("spec")).unwrap();
        let notes = copy_tests(
            from.path(),
            to.path(),
            &[
                added("tests/deep/test_a.py"),
                added("spec/a_spec.rb"),
                ChangedFile {
                    path: "test_gone.py".into(),
                    change: ChangeKind::Deleted,
                },
            ],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(to.path().join("tests/deep/test_a.py")).unwrap(),
            "new"
        );
        assert!(!to.path().join("test_gone.py").exists());
        assert_eq!(
            notes,
            vec!["`spec/a_spec.rb` is under a link in the base's tree: left out"]
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

        // A folder of the result that is a link to elsewhere is never read through.
        std::fs::write(outside.path().join("secret_test.py"), "host secret").unwrap();
        std::os::unix::fs::symlink(outside.path(), from.path().join("test")).unwrap();
        let notes = copy_tests(from.path(), to.path(), &[added("test/secret_test.py")]).unwrap();
        assert_eq!(
            notes,
            vec!["`test/secret_test.py` is under a link in the result: left out"]
        );
        assert!(!to.path().join("test/secret_test.py").exists());
    }
}
