//! What in a result weakens verification rather than fixing the code: skip and focus
//! markers added, assertions or test functions removed, the test selection edited. The
//! base's and the result's files are compared language by language (`code.rs`, and
//! `selection.rs` for the settings that choose tests); [`rule`] alone decides whether the
//! approved contract declared a finding, and a finding it did not fails the result.

mod code;
mod patch;
mod selection;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use self::code::{Lang, Parsed, TestFn};
use self::selection::Format;
use super::report::{Verdict, VerificationReport, code as inline};
use super::scope::{is_test_path, normalise};

use crate::contract::Contract;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeakeningKind {
    /// A skip or expected-failure marker added (`@pytest.mark.skip`, `#[ignore]`, `t.Skip`).
    Skip,
    /// A marker that runs only some tests (`it.only`, `fdescribe`).
    Focus,
    /// Fewer assertions in a test that is still there.
    Assertions,
    /// A test function of the base that the result no longer has.
    RemovedTest,
    /// A setting that chooses which tests run, or a CI line that runs them.
    Selection,
    /// A test that replaces code the contract changes (`calc.add = …`, `mock.patch`,
    /// `jest.mock`), so it does not run the code it checks.
    Patch,
}

impl WeakeningKind {
    /// What a contract that means this says (lowercase stems).
    fn words(self) -> &'static [&'static str] {
        match self {
            WeakeningKind::Skip => &[
                "skip",
                "ignor",
                "xfail",
                "disabl",
                "expected failure",
                "expectedfailure",
                "quarantin",
            ],
            WeakeningKind::Focus => &[".only", "focus"],
            WeakeningKind::Assertions => &["remov", "delet", "drop"],
            WeakeningKind::RemovedTest => &["remov", "delet", "drop", "renam", "replac", "move"],
            WeakeningKind::Selection => &["skip", "ignor", "exclud", "deselect", "disabl", "remov"],
            WeakeningKind::Patch => &["patch", "mock", "stub"],
        }
    }

    fn verb(self) -> &'static str {
        match self {
            WeakeningKind::Skip => "skip or disable tests",
            WeakeningKind::Focus => "narrow the suite to some tests",
            WeakeningKind::Assertions => "remove assertions",
            WeakeningKind::RemovedTest => "remove tests",
            WeakeningKind::Selection => "change which tests run",
            WeakeningKind::Patch => "replace the code the tests check",
        }
    }
}

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
}

/// A finding before the contract's ruling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Draft {
    pub kind: WeakeningKind,
    pub path: String,
    pub lines: Vec<usize>,
    pub in_base: bool,
    pub test: Option<String>,
    pub what: String,
    pub instruction: String,
    /// Words beside the kind's that declare it (a setting's key).
    pub words: Vec<String>,
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
        .filter(|p| Lang::of(p).is_some() || Format::of(p).is_some() || patch::reads(p))
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
        tests(&sources, &mut drafts);
        patches.finish(contract, &mut drafts);
        ruled(contract, drafts, unread)
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

/// The one rule: a finding is refused unless the approved contract names its file among
/// the files to change and says to do this there, in its `why` for the file or in the
/// change's goal or expected behaviour (a word of the finding's kind: "skip", "remove"…,
/// or the setting's key). Naming the test alone is not enough: a contract that means to
/// make `test_add` pass names it too.
fn rule(contract: &Contract, draft: &Draft) -> Ruling {
    let named = contract.change.files.iter().find(|f| {
        let declared = normalise(&f.path);
        !declared.is_empty()
            && (draft.path == declared || draft.path.starts_with(&format!("{declared}/")))
    });
    let Some(file) = named else {
        return Ruling::Refused(format!(
            "the contract's files do not include `{}`",
            draft.path
        ));
    };
    let mut places = vec![
        (format!("its `why` for `{}`", file.path), file.why.as_str()),
        ("its goal".to_owned(), contract.change.goal.as_str()),
    ];
    for expected in &contract.change.expected_behaviour {
        places.push(("its expected behaviour".to_owned(), expected.as_str()));
    }
    let words: Vec<&str> = draft
        .kind
        .words()
        .iter()
        .copied()
        .chain(draft.words.iter().map(String::as_str))
        .collect();
    for (place, text) in &places {
        let text = text.to_lowercase();
        if let Some(word) = words.iter().find(|w| text.contains(**w)) {
            return Ruling::Declared(format!(
                "the contract names `{}` and {place} says \"{word}\"",
                draft.path
            ));
        }
    }
    Ruling::Refused(format!(
        "the contract names `{}` but does not say to {}",
        draft.path,
        draft.kind.verb()
    ))
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
            words: Vec::new(),
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
            words: vec!["build constraint".into(), "build tag".into()],
        });
    }
}

/// Each test of the base, found again in the result (by name in its file, by name in
/// another file for a move, or by its assertions under a new name for a rename) or
/// reported removed; found, it must keep as many assertions.
fn tests(files: &[CodeFile], out: &mut Vec<Draft>) {
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
                fewer_assertions(&f.path, t, r, out);
                continue;
            }
            let moved = new.iter_mut().find(|(j, r, taken)| {
                !*taken && *j != i && files[*j].lang == f.lang && r.name == t.name
            });
            match moved {
                Some((_, r, taken)) => {
                    *taken = true;
                    fewer_assertions(&f.path, t, r, out);
                }
                None => unmatched.push((i, t)),
            }
        }
    }
    for (i, t) in unmatched {
        let renamed = new.iter_mut().find(|(j, r, taken)| {
            !*taken && files[*j].lang == files[i].lang && keeps_assertions(t, r)
        });
        match renamed {
            Some((_, _, taken)) => *taken = true,
            None => {
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
                    words: Vec::new(),
                });
            }
        }
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

/// `old`'s assertions that `new` does not hold as many times, with their lines.
fn missing<'a>(old: &'a TestFn, new: &TestFn) -> Vec<&'a (usize, String)> {
    let mut left: HashMap<&str, usize> = HashMap::new();
    for (_, text) in &new.assertions {
        *left.entry(text.as_str()).or_default() += 1;
    }
    old.assertions
        .iter()
        .filter(|(_, text)| match left.get_mut(text.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
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
        words: Vec::new(),
    });
}

impl Weakening {
    pub fn is_empty(&self) -> bool {
        self.findings.is_empty() && self.unread.is_empty()
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
                "**Weakened tests ({total})**: a test made to pass by skipping, narrowing or \
                 removing it, by replacing the code it checks, or by running fewer tests, does not \
                 count; unless the contract \
                 declares it, the result fails.\n"
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

impl VerificationReport {
    /// The report with what the result's files showed of weakened tests: a refused
    /// finding fails a result that passed, and a refused scope stays refused.
    pub fn with_weakening(mut self, weakening: Weakening) -> Self {
        if self.verdict == Verdict::Passed && weakening.refused().next().is_some() {
            self.verdict = Verdict::Failed;
        }
        self.weakening = weakening;
        self
    }
}
