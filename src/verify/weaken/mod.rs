//! What in a result weakens verification rather than fixing the code: skip and focus
//! markers added, assertions or test functions removed, the test selection edited. The
//! base's and the result's files are compared language by language (`code.rs`, and
//! `selection.rs` for the settings that choose tests); [`rule`] alone decides whether the
//! approved contract declared a finding, and a finding it did not fails the result.

mod code;
mod draft;
mod patch;
mod selection;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::LazyLock;

use regex::Regex;

use serde::{Deserialize, Serialize};

use self::code::{Lang, Parsed, TestFn};
pub(super) use self::draft::Draft;
pub use self::draft::WeakeningKind;
use self::selection::Format;
use super::scope::{is_test_path, normalise};
use super::spans::code as inline;

use crate::contract::{Contract, TestChange};
use crate::git::{ChangedFile, FileText, Workspace, WorkspaceError};

/// Changed files read in one verification; the rest are listed as not read.
const MAX_FILES: usize = 200;
/// Bytes read of each side of a file.
const MAX_FILE_BYTES: u64 = 512 << 10;
/// Bytes read in all; the files after are listed as not read.
const MAX_TOTAL_BYTES: u64 = 32 << 20;
/// Files read at a time: only their text is held at once, the rest is what they showed.
const BATCH: usize = 16;
/// Findings kept in a report, refused ones first.
const MAX_FINDINGS: usize = 100;
/// Files not read that a report names.
const MAX_UNREAD: usize = 50;

/// Whether the approved contract declared a finding, and what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ruling {
    /// Not declared: the result fails verification.
    Refused(String),
    /// Declared by the contract: listed for the reviewer, nothing more.
    Declared(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeakeningFinding {
    pub kind: WeakeningKind,
    pub path: String,
    /// 1-based, in the result, or in the base when `in_base` (what was removed).
    pub lines: Vec<u32>,
    pub in_base: bool,
    /// The test it touches, qualified as the file names it (`TestCalc.test_add`).
    pub test: Option<String>,
    /// What the result did, in markdown: "adds `@unittest.skip` to `TestCalc.test_add`".
    pub what: String,
    /// What a next attempt must do about it.
    pub instruction: String,
    pub ruling: Ruling,
}

impl WeakeningFinding {
    pub fn refused(&self) -> bool {
        matches!(self.ruling, Ruling::Refused(_))
    }

    /// `tests/test_parse.py:14`, or `tests/test_parse.py:8, 11 in the base`.
    pub fn location(&self) -> String {
        let lines: Vec<String> = self.lines.iter().map(u32::to_string).collect();
        let mut at = if lines.is_empty() {
            self.path.clone()
        } else {
            format!("{}:{}", self.path, lines.join(", "))
        };
        if self.in_base {
            at.push_str(" in the base");
        }
        at
    }

    fn because(&self) -> &str {
        match &self.ruling {
            Ruling::Refused(why) | Ruling::Declared(why) => why,
        }
    }
}

/// A file not read for weakening, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnreadFile {
    pub path: String,
    pub why: String,
}

/// Everything the reading of the result's changed files for weakening found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weakening {
    pub findings: Vec<WeakeningFinding>,
    #[serde(default)]
    pub findings_omitted: u64,
    #[serde(default)]
    pub unread: Vec<UnreadFile>,
    #[serde(default)]
    pub unread_omitted: u64,
    /// Tests the result changes in files the contract names: allowed, and listed so a
    /// reviewer sees each old and new expectation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<ChangedExpectation>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changed_omitted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One assertion a test now writes differently, in a file the contract names: the fix
/// changes what the test expects (`assertEqual(rc, 0)` becomes `assertEqual(rc, 2)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedExpectation {
    pub path: String,
    /// The test as the result names it.
    pub test: String,
    /// Its name on the base, when the result renamed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
    /// 1-based, of the new assertion in the result.
    pub line: u32,
    /// 1-based, of the old assertion on the base.
    pub old_line: u32,
    pub old_assertion: String,
    pub new_assertion: String,
}

/// Reads the changed files that may hold tests or choose them, on the base and in the
/// checkout, and compares them.
pub(super) async fn read(
    workspace: &Workspace,
    contract: &Contract,
    changed: &[ChangedFile],
) -> Result<Weakening, WorkspaceError> {
    let mut wanted: Vec<&str> = changed
        .iter()
        .map(|c| c.path.as_str())
        .filter(|p| {
            Lang::of(p).is_some()
                || Format::of(p).is_some()
                || patch::reads(p)
                || patch::unnamed_code(contract, p)
        })
        .collect();
    // The sources the contract changes, for what a test must not replace, even when the
    // result left them as they were.
    let sources = patch::sources(contract);
    for source in &sources {
        if !wanted.contains(&source.as_str()) {
            wanted.push(source);
        }
    }
    // Within the bound, what chooses tests first, then test files, then other sources.
    wanted.sort_by_key(|p| (Format::of(p).is_none(), !is_test_path(p)));
    let beyond = wanted.split_off(MAX_FILES.min(wanted.len()));
    let mut reading = Reading::default();
    let mut total = 0u64;
    for batch in wanted.chunks(BATCH) {
        if total >= MAX_TOTAL_BYTES {
            reading.unread.extend(batch.iter().map(|p| UnreadFile {
                path: (*p).to_owned(),
                why: format!("past the {} MiB read in all", MAX_TOTAL_BYTES >> 20),
            }));
            continue;
        }
        let paths: Vec<String> = batch.iter().map(|p| (*p).to_owned()).collect();
        let texts = workspace.file_texts(paths.clone(), MAX_FILE_BYTES).await?;
        for (path, (base, result)) in paths.into_iter().zip(texts) {
            total += size(&base) + size(&result);
            reading.add(path, base, result);
        }
    }
    reading
        .unread
        .extend(beyond.into_iter().map(|p| UnreadFile {
            path: p.to_owned(),
            why: format!("beyond the first {MAX_FILES} files read"),
        }));
    Ok(reading.finish(contract).bounded())
}

fn size(side: &FileText) -> u64 {
    match side {
        FileText::Text(t) => t.len() as u64,
        FileText::Absent | FileText::Unread(_) => 0,
    }
}

/// Compares each `(path, base, result)` and rules on what weakens the tests.
#[cfg(test)]
fn find(contract: &Contract, files: Vec<(String, FileText, FileText)>) -> Weakening {
    let mut reading = Reading::default();
    for (path, base, result) in files {
        reading.add(path, base, result);
    }
    reading.finish(contract)
}

/// The comparison under way: what the files read so far showed, without their text.
#[derive(Default)]
struct Reading {
    drafts: Vec<Draft>,
    unread: Vec<UnreadFile>,
    sources: Vec<CodeFile>,
    patches: patch::Patches,
}

impl Reading {
    fn add(&mut self, path: String, base: FileText, result: FileText) {
        let (base, result) = match (base, result) {
            (FileText::Unread(why), _) => {
                self.unread.push(UnreadFile {
                    path,
                    why: format!("on the base: {why}"),
                });
                return;
            }
            (_, FileText::Unread(why)) => {
                self.unread.push(UnreadFile {
                    path,
                    why: format!("in the result: {why}"),
                });
                return;
            }
            (base, result) => (text(base), text(result)),
        };
        self.patches.add(&path, base.as_deref(), result.as_deref());
        if let Some(format) = Format::of(&path) {
            selection::compare(
                format,
                &path,
                base.as_deref(),
                result.as_deref(),
                &mut self.drafts,
            );
        }
        if let Some(lang) = Lang::of(&path) {
            let parse = |t: &Option<String>| {
                t.as_deref()
                    .map(|t| code::parse(lang, t))
                    .unwrap_or_default()
            };
            self.sources.push(CodeFile {
                base: parse(&base),
                result: parse(&result),
                path,
                lang,
            });
        }
    }

    /// Every file's findings, with the contract's ruling on each.
    fn finish(self, contract: &Contract) -> Weakening {
        let Reading {
            mut drafts,
            unread,
            sources,
            patches,
        } = self;
        for file in &sources {
            markers(file, &mut drafts);
            build_tags(file, &mut drafts);
        }
        let mut edits = Vec::new();
        tests(&sources, &mut drafts, &mut edits);
        patches.finish(contract, &mut drafts);
        // A changed expectation is the fix's business only where the contract says the
        // tests change: elsewhere a test must keep expecting what it expected.
        let mut changed = Vec::new();
        for edit in edits {
            if names_file(contract, edit.base_path) && names_file(contract, edit.path) {
                changed.extend(edit.listed());
            } else {
                drafts.push(edit.draft());
            }
        }
        let mut weakening = ruled(contract, drafts, unread);
        weakening.changed = changed;
        weakening
    }
}

/// The findings, each with the contract's ruling.
fn ruled(contract: &Contract, drafts: Vec<Draft>, unread: Vec<UnreadFile>) -> Weakening {
    let findings = drafts
        .into_iter()
        .map(|d| {
            let ruling = rule(contract, &d);
            WeakeningFinding {
                kind: d.kind,
                lines: d
                    .lines
                    .iter()
                    .map(|l| u32::try_from(*l).unwrap_or(u32::MAX))
                    .collect(),
                path: d.path,
                in_base: d.in_base,
                test: d.test,
                what: d.what,
                instruction: d.instruction,
                ruling,
            }
        })
        .collect();
    Weakening {
        findings,
        unread,
        ..Weakening::default()
    }
}

fn text(side: FileText) -> Option<String> {
    match side {
        FileText::Text(t) => Some(t),
        FileText::Absent | FileText::Unread(_) => None,
    }
}

/// Whether the contract's `change.files` name `path`, itself or a folder holding it (the
/// checkout's root names nothing).
fn names_file(contract: &Contract, path: &str) -> bool {
    contract
        .change
        .files
        .iter()
        .any(|f| covers(&normalise(&f.path), path))
}

/// Whether a declared path (normalised) is `path` or a folder holding it.
fn covers(declared: &str, path: &str) -> bool {
    !declared.is_empty()
        && (path == declared
            || path
                .strip_prefix(declared)
                .is_some_and(|rest| rest.starts_with('/')))
}

/// The one rule: a finding is refused unless an entry of the contract's
/// `verification.test_changes`, which the maintainer approved under its own heading,
/// allows it: the entry's path covers the finding's file, its test (when it names one) is
/// the finding's test, and its kind is the finding's. Nothing else the contract says
/// declares a weakening.
fn rule(contract: &Contract, draft: &Draft) -> Ruling {
    let kind = draft.kind.allowed_by();
    let in_file: Vec<&TestChange> = contract
        .verification
        .test_changes
        .iter()
        .filter(|t| covers(&t.normalised_path(), &draft.path))
        .collect();
    let allows = |t: &&&TestChange| {
        t.kind == kind
            && t.test.as_deref().is_none_or(|entry| {
                draft
                    .test
                    .as_deref()
                    .is_some_and(|test| same_test(entry, test))
            })
    };
    if let Some(entry) = in_file.iter().find(allows) {
        return Ruling::Declared(format!(
            "allowed by the contract's test_changes: {}: {}",
            entry.label(),
            crate::markdown::inline(&entry.why)
        ));
    }
    if in_file.is_empty() {
        return Ruling::Refused(format!(
            "the contract's test_changes allow no change to {}",
            inline(&draft.path)
        ));
    }
    let of = draft
        .test
        .as_deref()
        .map_or(String::new(), |t| format!(" of {}", inline(t)));
    Ruling::Refused(format!(
        "the contract's test_changes for {} do not allow {}{of}",
        inline(&draft.path),
        kind.as_str()
    ))
}

/// Whether a contract's test name is the finding's test: the same name, or its last
/// parts (`test_add` is `TestCalc.test_add`). A pytest node id's file part
/// (`tests/test_calc.py::`) and parameters (`[1]`) are left out.
fn same_test(entry: &str, test: &str) -> bool {
    let entry = entry.trim();
    let entry = match entry.split_once("::") {
        Some((file, rest)) if file.contains('/') || file.contains('.') => rest,
        _ => entry,
    };
    let entry = match entry.rsplit_once('[') {
        Some((name, params)) if params.ends_with(']') => name,
        _ => entry,
    };
    let parts = |name: &str| -> Vec<String> {
        name.split("::")
            .flat_map(|p| p.split(" > "))
            .flat_map(|p| p.split('.'))
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()
    };
    let (entry, test) = (parts(entry), parts(test));
    !entry.is_empty() && test.ends_with(&entry)
}

/// One source file on both sides.
struct CodeFile {
    path: String,
    lang: Lang,
    base: Parsed,
    result: Parsed,
}

/// Markers the result has that the base did not have on the same test or block.
fn markers(file: &CodeFile, out: &mut Vec<Draft>) {
    let mut before: HashMap<(&str, Option<&str>), usize> = HashMap::new();
    for m in &file.base.markers {
        *before
            .entry((m.text.as_str(), m.owner.as_deref()))
            .or_default() += 1;
    }
    for m in &file.result.markers {
        if let Some(n) = before.get_mut(&(m.text.as_str(), m.owner.as_deref()))
            && *n > 0
        {
            *n -= 1;
            continue;
        }
        let target = m
            .owner
            .as_deref()
            .map_or("the whole file".to_owned(), inline);
        let at = format!("{}:{}", file.path, m.line);
        let (kind, instruction) = if m.focus {
            (
                WeakeningKind::Focus,
                format!(
                    "remove `{}` at {at}: it keeps the suite's other tests from running",
                    m.text
                ),
            )
        } else {
            (
                WeakeningKind::Skip,
                format!("remove `{}` at {at} and make {target} pass instead", m.text),
            )
        };
        out.push(Draft {
            kind,
            path: file.path.clone(),
            lines: vec![m.line],
            in_base: false,
            test: m.owner.clone(),
            what: format!("adds {} to {target}", inline(&m.text)),
            instruction,
        });
    }
}

/// Go build constraints added to a test file: its tests then run only with the tag.
fn build_tags(file: &CodeFile, out: &mut Vec<Draft>) {
    for (line, tag) in &file.result.build_tags {
        if file.base.build_tags.iter().any(|(_, t)| t == tag) {
            continue;
        }
        out.push(Draft {
            kind: WeakeningKind::Selection,
            path: file.path.clone(),
            lines: vec![*line],
            in_base: false,
            test: None,
            what: format!("adds the build constraint {}", inline(tag)),
            instruction: format!(
                "remove the build constraint at {}:{line}: the file's tests would run only \
                 with it",
                file.path
            ),
        });
    }
}

/// A test the result kept (under its name, in another file, or renamed) with as many
/// assertions, some of which now expect something else.
struct Edit<'a> {
    base_path: &'a str,
    path: &'a str,
    old: &'a TestFn,
    new: &'a TestFn,
}

impl Edit<'_> {
    fn renamed(&self) -> bool {
        self.old.name != self.new.name
    }

    /// Each changed assertion, as a file the contract names lists it.
    fn listed(&self) -> Vec<ChangedExpectation> {
        let line = |l: usize| u32::try_from(l).unwrap_or(u32::MAX);
        changed_pairs(self.old, self.new)
            .into_iter()
            .map(|(old, new)| ChangedExpectation {
                path: self.path.to_owned(),
                test: self.new.name.clone(),
                renamed_from: self.renamed().then(|| self.old.name.clone()),
                line: line(new.0),
                old_line: line(old.0),
                old_assertion: old.1.clone(),
                new_assertion: new.1.clone(),
            })
            .collect()
    }

    /// The finding it is in a file the contract does not name.
    fn draft(&self) -> Draft {
        let pairs = changed_pairs(self.old, self.new);
        let changes = match pairs.as_slice() {
            [(old, new)] => format!("changes {} to {}", inline(&old.1), inline(&new.1)),
            _ => format!("changes {} assertions", pairs.len()),
        };
        let (kind, what) = if self.renamed() {
            (
                WeakeningKind::RenamedTest,
                format!(
                    "renames the test {} to {} and {changes}",
                    inline(&self.old.name),
                    inline(&self.new.name)
                ),
            )
        } else {
            (
                WeakeningKind::ChangedExpectation,
                format!("{changes} in {}", inline(&self.new.name)),
            )
        };
        let old_lines: Vec<String> = pairs.iter().map(|(old, _)| old.0.to_string()).collect();
        let listed: Vec<String> = pairs
            .iter()
            .take(5)
            .map(|(old, _)| inline(&old.1))
            .collect();
        Draft {
            kind,
            path: self.path.to_owned(),
            lines: pairs.iter().map(|(_, new)| new.0).collect(),
            in_base: false,
            test: Some(self.old.name.clone()),
            what,
            instruction: format!(
                "restore what {} expected at {}:{} in the base ({}): the contract does not \
                 name {}, so its tests must keep expecting what they did",
                inline(&self.old.name),
                self.base_path,
                old_lines.join(", "),
                listed.join(", "),
                inline(self.path)
            ),
        }
    }
}

/// Each test of the base, found again in the result (by name in its file, by name in
/// another file for a move, by its assertions under a new name for a rename, or by a
/// similar body under a new name for a rename that changes what it expects) or reported
/// removed; found, it must keep as many assertions, and the ones it writes differently
/// are an edit.
fn tests<'a>(files: &'a [CodeFile], out: &mut Vec<Draft>, edits: &mut Vec<Edit<'a>>) {
    let bases: Vec<HashMap<&str, &TestFn>> = files.iter().map(|f| names(&f.base.tests)).collect();
    // Tests of the result whose names their file did not have on the base.
    let mut new: Vec<(usize, &TestFn, bool)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        for t in &f.result.tests {
            if !bases[i].contains_key(t.name.as_str()) {
                new.push((i, t, false));
            }
        }
    }
    let mut unmatched: Vec<(usize, &TestFn)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let results = names(&f.result.tests);
        for t in &f.base.tests {
            if let Some(r) = results.get(t.name.as_str()) {
                compare(&f.path, &f.path, t, r, out, edits);
                continue;
            }
            let moved = new.iter_mut().find(|(j, r, taken)| {
                !*taken && *j != i && files[*j].lang == f.lang && r.name == t.name
            });
            match moved {
                Some((j, r, taken)) => {
                    *taken = true;
                    compare(&f.path, &files[*j].path, t, r, out, edits);
                }
                None => unmatched.push((i, t)),
            }
        }
    }
    // Renames that keep every assertion first, so a looser match never takes their test.
    let mut left: Vec<(usize, &TestFn)> = Vec::new();
    for (i, t) in unmatched {
        let renamed = new.iter_mut().find(|(j, r, taken)| {
            !*taken && files[*j].lang == files[i].lang && keeps_assertions(t, r)
        });
        match renamed {
            Some((_, _, taken)) => *taken = true,
            None => left.push((i, t)),
        }
    }
    if left.is_empty() {
        return;
    }
    // Each new test's shapes, once: every test left is compared with all of them.
    let new_shapes: Vec<HashMap<String, usize>> = new.iter().map(|(_, r, _)| shapes(r)).collect();
    for (i, t) in left {
        let old_shapes = shapes(t);
        // The closest similar test, in the same file before any other.
        let renamed = new
            .iter_mut()
            .zip(&new_shapes)
            .filter_map(|((j, r, taken), new_shapes)| {
                if *taken || files[*j].lang != files[i].lang {
                    return None;
                }
                let kept = shapes_kept(&old_shapes, new_shapes);
                similar(t, r, kept).then_some(((*j == i, kept), j, r, taken))
            })
            .max_by_key(|(closeness, ..)| *closeness);
        if let Some((_, j, r, taken)) = renamed {
            *taken = true;
            edits.push(Edit {
                base_path: &files[i].path,
                path: &files[*j].path,
                old: t,
                new: r,
            });
            continue;
        }
        let path = &files[i].path;
        out.push(Draft {
            kind: WeakeningKind::RemovedTest,
            path: path.clone(),
            lines: vec![t.line],
            in_base: true,
            test: Some(t.name.clone()),
            what: format!("removes the test {}", inline(&t.name)),
            instruction: format!(
                "restore the test {} ({path}:{} in the base)",
                inline(&t.name),
                t.line
            ),
        });
    }
}

/// A base test and what the result has of it: fewer assertions is a finding; as many, some
/// written differently, an edit.
fn compare<'a>(
    base_path: &'a str,
    path: &'a str,
    old: &'a TestFn,
    new: &'a TestFn,
    out: &mut Vec<Draft>,
    edits: &mut Vec<Edit<'a>>,
) {
    if new.assertions.len() < old.assertions.len() {
        fewer_assertions(base_path, old, new, out);
    } else if !missing(old, new).is_empty() {
        edits.push(Edit {
            base_path,
            path,
            old,
            new,
        });
    }
}

/// Tests by name (the first of a name, as a runner would report it).
fn names(tests: &[TestFn]) -> HashMap<&str, &TestFn> {
    tests.iter().rev().map(|t| (t.name.as_str(), t)).collect()
}

/// A test under a new name that still holds every assertion `old` had: a rename.
fn keeps_assertions(old: &TestFn, new: &TestFn) -> bool {
    !old.assertions.is_empty() && missing(old, new).is_empty()
}

/// A test under a new name that is `old` expecting something else: as many assertions or
/// more, and most of `old`'s still there once literals are set aside (`kept` of them), or
/// a name sharing most words with some assertion still there. A test that lost
/// assertions never is.
fn similar(old: &TestFn, new: &TestFn, kept: usize) -> bool {
    if old.assertions.is_empty() || new.assertions.len() < old.assertions.len() {
        return false;
    }
    kept * 2 > old.assertions.len() || (kept > 0 && similar_names(&old.name, &new.name))
}

/// A test's assertions by shape, each with how many it has.
fn shapes(test: &TestFn) -> HashMap<String, usize> {
    let mut out: HashMap<String, usize> = HashMap::new();
    for (_, text) in &test.assertions {
        *out.entry(shape(text)).or_default() += 1;
    }
    out
}

/// How many of the old test's assertions the new one holds once literals are set aside.
fn shapes_kept(old: &HashMap<String, usize>, new: &HashMap<String, usize>) -> usize {
    old.iter()
        .map(|(shape, n)| (*n).min(new.get(shape).copied().unwrap_or(0)))
        .sum()
}

/// An assertion with its literals (strings, numbers, booleans, null, exception types) and
/// whitespace set aside: `assertEqual(rc, 0)` and `assertEqual(rc, 2)` have one shape, and
/// `assertRaises(ValueError)` and `assertRaises(IndexError)` another.
fn shape(assertion: &str) -> String {
    static LITERAL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r#""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\b(?:\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?|True|False|None|true|false|null|nil|undefined|\w*(?:Error|Exception|Warning))\b"#,
        )
        .unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
    });
    LITERAL
        .replace_all(assertion, "_")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Whether two test names are one test's, renamed: the same class or blocks around it,
/// and more than half of the longer name's words shared (`test_x_returns_0` and
/// `test_x_returns_2`).
fn similar_names(old: &str, new: &str) -> bool {
    let split = |name: &str| -> (String, Vec<String>) {
        let (outer, last) = name
            .rsplit_once(" > ")
            .or_else(|| name.rsplit_once('.'))
            .unwrap_or(("", name));
        (outer.to_owned(), words(last))
    };
    let ((old_outer, old_words), (new_outer, new_words)) = (split(old), split(new));
    let longer = old_words.len().max(new_words.len());
    let shared = old_words.iter().filter(|w| new_words.contains(w)).count();
    old_outer == new_outer && longer > 0 && shared * 2 > longer
}

/// A name's words, lower-case, without `test`: split at anything not a letter or digit,
/// between a lower-case letter and an upper-case one, and between letters and digits.
fn words(name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut previous: Option<char> = None;
    for c in name.chars() {
        let boundary = match previous {
            _ if !c.is_alphanumeric() => true,
            Some(p) => {
                (p.is_lowercase() && c.is_uppercase()) || (p.is_alphabetic() != c.is_alphabetic())
            }
            None => false,
        };
        if boundary && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
        previous = Some(c);
    }
    if !word.is_empty() {
        out.push(word);
    }
    out.retain(|w| w != "test" && w != "tests");
    out
}

/// `old`'s assertions that `new` does not hold as many times (whitespace aside), with
/// their lines.
fn missing<'a>(old: &'a TestFn, new: &TestFn) -> Vec<&'a (usize, String)> {
    let key = |text: &str| -> String { text.chars().filter(|c| !c.is_whitespace()).collect() };
    let mut left: HashMap<String, usize> = HashMap::new();
    for (_, text) in &new.assertions {
        *left.entry(key(text)).or_default() += 1;
    }
    old.assertions
        .iter()
        .filter(|(_, text)| match left.get_mut(&key(text)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}

/// An assertion's line and text, as [`TestFn`] holds it.
type Assertion = (usize, String);

/// Each assertion of `old` that `new` no longer holds, beside the one `new` writes in its
/// place: one of the same shape when there is one, else the next one `new` added.
fn changed_pairs<'a>(old: &'a TestFn, new: &'a TestFn) -> Vec<(&'a Assertion, &'a Assertion)> {
    let mut added: Vec<Option<&Assertion>> = missing(new, old).into_iter().map(Some).collect();
    missing(old, new)
        .into_iter()
        .filter_map(|gone| {
            let at = added
                .iter()
                .position(|a| a.is_some_and(|a| shape(&a.1) == shape(&gone.1)))
                .or_else(|| added.iter().position(Option::is_some))?;
            Some((gone, added[at].take()?))
        })
        .collect()
}

fn fewer_assertions(path: &str, old: &TestFn, new: &TestFn, out: &mut Vec<Draft>) {
    let (before, after) = (old.assertions.len(), new.assertions.len());
    if after >= before {
        return;
    }
    let gone = missing(old, new);
    let lines: Vec<usize> = gone.iter().map(|(line, _)| *line).collect();
    let name = inline(&new.name);
    let what = match gone.as_slice() {
        [(_, text)] if before - after == 1 => {
            format!("removes the assertion {} from {name}", inline(text))
        }
        _ => format!("lowers the assertions of {name} from {before} to {after}"),
    };
    let listed: Vec<String> = gone.iter().take(5).map(|(_, t)| inline(t)).collect();
    let at: Vec<String> = lines.iter().map(usize::to_string).collect();
    out.push(Draft {
        kind: WeakeningKind::Assertions,
        path: path.to_owned(),
        lines,
        in_base: true,
        test: Some(new.name.clone()),
        what,
        instruction: format!(
            "restore the assertion{} of {name} at {path}:{} in the base ({}): a test must \
             keep checking what it checked",
            if gone.len() == 1 { "" } else { "s" },
            at.join(", "),
            listed.join(", ")
        ),
    });
}

impl Weakening {
    pub fn is_empty(&self) -> bool {
        self.findings.is_empty() && self.unread.is_empty() && self.changed.is_empty()
    }

    pub fn refused(&self) -> impl Iterator<Item = &WeakeningFinding> {
        self.findings.iter().filter(|f| f.refused())
    }

    /// Refused findings first, so the bound never hides one.
    fn bounded(mut self) -> Self {
        self.findings.sort_by_key(|f| !f.refused());
        self.findings_omitted += self.findings.len().saturating_sub(MAX_FINDINGS) as u64;
        self.findings.truncate(MAX_FINDINGS);
        self.unread_omitted += self.unread.len().saturating_sub(MAX_UNREAD) as u64;
        self.unread.truncate(MAX_UNREAD);
        self.changed_omitted += self.changed.len().saturating_sub(MAX_FINDINGS) as u64;
        self.changed.truncate(MAX_FINDINGS);
        self
    }

    /// The headline's part: how many weakenings were refused.
    pub(super) fn headline_part(&self) -> Option<String> {
        match self.refused().count() {
            0 => None,
            1 => Some("1 weakened test".to_owned()),
            n => Some(format!("{n} weakened tests")),
        }
    }

    /// Markdown for the pull request, the check and a failure report: each finding with
    /// its file and line and the ruling, then what was not read.
    pub(super) fn markdown(&self) -> String {
        let mut out = String::new();
        if !self.findings.is_empty() {
            let total = self.findings.len() as u64 + self.findings_omitted;
            let _ = writeln!(
                out,
                "**Weakened tests ({total})**: a test made to pass by skipping, narrowing, \
                 removing or changing it, by replacing the code it checks, or by running fewer \
                 tests, does not count; unless the contract's `test_changes` allow it, the \
                 result fails.\n"
            );
            for f in &self.findings {
                let ruling = if f.refused() {
                    "**refused**"
                } else {
                    "declared"
                };
                let _ = writeln!(
                    out,
                    "- {ruling}: {} ({}): {}",
                    f.what,
                    inline(&f.location()),
                    f.because()
                );
            }
            if self.findings_omitted > 0 {
                let _ = writeln!(out, "- … and {} more", self.findings_omitted);
            }
            out.push('\n');
        }
        if !self.changed.is_empty() {
            let total = self.changed.len() as u64 + self.changed_omitted;
            let _ = writeln!(
                out,
                "**Changed expectations ({total})**: assertions the result writes differently \
                 in test files the contract names; allowed, so check that the fix calls for \
                 each.\n"
            );
            for c in &self.changed {
                let renamed = c.renamed_from.as_deref().map_or(String::new(), |old| {
                    format!(" (renamed from {})", inline(old))
                });
                let _ = writeln!(
                    out,
                    "- {} in {}{renamed}: {} (line {} in the base) → {}",
                    inline(&format!("{}:{}", c.path, c.line)),
                    inline(&c.test),
                    inline(&c.old_assertion),
                    c.old_line,
                    inline(&c.new_assertion)
                );
            }
            if self.changed_omitted > 0 {
                let _ = writeln!(out, "- … and {} more", self.changed_omitted);
            }
            out.push('\n');
        }
        if !self.unread.is_empty() {
            let listed: Vec<String> = self
                .unread
                .iter()
                .map(|u| format!("{} ({})", inline(&u.path), u.why))
                .collect();
            let _ = write!(out, "Not read for weakened tests: {}", listed.join(", "));
            if self.unread_omitted > 0 {
                let _ = write!(out, ", and {} more", self.unread_omitted);
            }
            out.push_str(".\n\n");
        }
        out
    }

    /// Plain text for the reviewer and a next attempt: each finding, its ruling and what
    /// to do about it.
    pub(super) fn compact(&self) -> String {
        let mut out = String::new();
        if !self.findings.is_empty() {
            out.push_str("weakened tests (a refused one fails the result):\n");
        }
        for f in &self.findings {
            let what = if f.refused() { "REFUSED" } else { "declared" };
            let _ = writeln!(
                out,
                "- {what} {} ({}): {}",
                f.what,
                f.location(),
                f.because()
            );
            if f.refused() {
                let _ = writeln!(out, "    to do: {}", f.instruction);
            }
        }
        if self.findings_omitted > 0 {
            let _ = writeln!(out, "- … {} more", self.findings_omitted);
        }
        if !self.changed.is_empty() {
            out.push_str("changed expectations (allowed: the contract names their files):\n");
        }
        for c in &self.changed {
            let renamed = c
                .renamed_from
                .as_deref()
                .map_or(String::new(), |old| format!(" (renamed from {old})"));
            let _ = writeln!(
                out,
                "- {}:{} {}{renamed}: {} (line {} in the base) -> {}",
                c.path, c.line, c.test, c.old_assertion, c.old_line, c.new_assertion
            );
        }
        if self.changed_omitted > 0 {
            let _ = writeln!(out, "- … {} more changed", self.changed_omitted);
        }
        for u in &self.unread {
            let _ = writeln!(out, "- not read for weakened tests: {} ({})", u.path, u.why);
        }
        out
    }

    /// What a next attempt must undo, when anything was refused.
    pub fn instructions(&self) -> Option<String> {
        let refused: Vec<&WeakeningFinding> = self.refused().collect();
        if refused.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Verification refused these changes to the tests; undo them and fix the code \
             instead:\n",
        );
        for f in refused {
            let _ = writeln!(out, "- {}", f.instruction);
        }
        Some(out)
    }
}
