//! Reads the human output of `pytest`.
//!
//! Counts come from the final summary line (`== 6 failed, 14 passed, 1 xfailed in 0.05s
//! ==`), which is the only place pytest states them; when a log is cut before it, the
//! verbose `PASSED`/`FAILED` lines or the progress characters stand in. Failing ids come
//! from the "short test summary info" section (`FAILED id - message`, `ERROR id`,
//! `SUBFAILED(params) id`) and the verbose lines; messages and locations from the
//! `FAILURES`/`ERRORS` sections, whose `___ Class.test_x ___` headers are matched back to
//! the node ids.
//!
//! Counting conventions: xpassed counts as passed, xfailed as skipped; passed subtests are
//! not counted, failed subtests count in `failed` (as pytest's summary does); a test with
//! a teardown error counts once in passed and once in errors.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{CONFIDENT, Format, MAX_FAILURES, MAX_MESSAGE, Parser, TestReport};
use crate::text::clip;

/// `E` lines kept per failure (the first lines of the last exception shown).
const MAX_E_LINES: usize = 10;
/// Characters kept of one buffered line.
const MAX_KEPT_LINE: usize = 300;
/// Lines kept at the end of a failure section, for messages without `E` lines.
const TAIL_LINES: usize = 6;
/// Doctest `Expected:`/`Got:` lines kept.
const MAX_EXPECTED_LINES: usize = 8;
/// Characters kept of a short-summary message (pytest truncates them anyway).
const MAX_SUMMARY_MESSAGE: usize = 500;
/// Score added by recognised per-test lines, at most.
const MAX_BONUS: u32 = CONFIDENT - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Section {
    /// Before any section, or after the session banner: progress and verbose lines.
    #[default]
    Run,
    Failures,
    Errors,
    ShortSummary,
    /// Any other `=== title ===` section (warnings, passes, coverage...).
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    /// A `___ test ___` section under FAILURES.
    Failure,
    /// `ERROR at setup of test` / `ERROR at teardown of test`.
    Error,
    /// `ERROR collecting path`.
    Collect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdKind {
    Failed,
    SubFailed,
    Error,
}

/// A failure section being read.
#[derive(Debug)]
struct Block {
    kind: BlockKind,
    /// The header's test name (`Class.test_x[param]`, `[doctest] mod.fn`, a module path).
    title: String,
    e_lines: Vec<String>,
    e_indent: usize,
    /// A non-`E` line came after the `E` lines: the next `E` line starts a new group.
    e_closed: bool,
    /// `File "x", line N` inside the `E` lines (a SyntaxError's own location).
    e_file: Option<String>,
    tail: VecDeque<String>,
    expected: Vec<String>,
    in_expected: bool,
    unexpected: Option<String>,
    /// The last `path:N: ...` frame line.
    location: Option<String>,
    /// The first `path:N: ...` frame line's path (the test's own file, mostly).
    first_path: Option<String>,
    /// The last `File "x", line N` of a native traceback.
    native: Option<String>,
    /// A `--- Captured ... ---` subsection began: the failure itself is over.
    done: bool,
}

/// A failure section once read: what the report needs of it.
#[derive(Debug)]
struct Entry {
    kind: BlockKind,
    title: String,
    message: String,
    location: Option<String>,
    first_path: Option<String>,
    used: bool,
}

/// A failing id and where its account is.
#[derive(Debug)]
struct Failing {
    id: String,
    kind: IdKind,
    /// The short summary's (truncated) message, if any.
    message: String,
    /// The failure section already known to be its own.
    section: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    errors: u64,
}

#[derive(Debug, Default)]
pub struct PytestParser {
    confident: bool,
    bonus: u32,
    section: Section,
    /// Between the banner's `collected N items` and the first section: progress lines.
    progress_phase: bool,
    current: Option<Block>,
    sections: Vec<Entry>,
    /// From the short test summary: id, kind, message.
    summary_ids: Vec<(String, IdKind, String)>,
    /// Failing ids from verbose lines, in order, and as a set.
    verbose_ids: Vec<(String, IdKind)>,
    verbose_set: HashSet<String>,
    final_counts: Option<Counts>,
    verbose_counts: Counts,
    verbose_seen: bool,
    progress_counts: Counts,
    /// Files named by default-mode progress lines (`tests/test_x.py .F.`), up to two.
    progress_files: Vec<String>,
    /// A verbose line that named a test but whose outcome comes on a later line.
    pending_id: Option<String>,
    /// Tests verbose lines (`-v`) or `-rA`'s `PASSED id` name passing.
    passing: Vec<String>,
}

impl Parser for PytestParser {
    fn line(&mut self, line: &str) {
        let trimmed = line.trim_end();
        if let Some((text, padded)) = summary_text(trimmed)
            && let Some(counts) = parse_summary_line(text, padded)
        {
            // The final line, wrapped in `=` or bare (`-q`); a later one replaces it.
            self.final_counts = Some(counts);
            self.confident = true;
            if padded {
                self.close_block();
                self.progress_phase = false;
                self.section = Section::Other;
            }
            return;
        }
        if let Some(title) = sep_title(trimmed, '=') {
            self.sep_line(title);
            return;
        }
        if trimmed.starts_with("platform ")
            && trimmed.contains(" -- Python ")
            && trimmed.contains("pytest-")
        {
            self.confident = true;
            return;
        }
        match self.section {
            Section::Run => self.run_line(trimmed),
            Section::Failures | Section::Errors => self.block_line(trimmed),
            Section::ShortSummary => self.summary_line(trimmed),
            Section::Other => {}
        }
    }

    fn score(&self) -> u32 {
        if self.confident {
            CONFIDENT + self.bonus.min(MAX_BONUS)
        } else {
            self.bonus.min(MAX_BONUS)
        }
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_block();
        let mut report = TestReport::new(Format::Pytest);
        report.passing = std::mem::take(&mut self.passing);
        let failing = self.failing_ids();
        let counts = match self.final_counts {
            Some(c) => c,
            None => {
                let mut c = if self.verbose_seen {
                    self.verbose_counts
                } else {
                    self.progress_counts
                };
                let failed = failing.iter().filter(|f| f.kind != IdKind::Error).count() as u64;
                let errors = failing.len() as u64 - failed;
                c.failed = c.failed.max(failed);
                c.errors = c.errors.max(errors);
                c
            }
        };
        report.passed = counts.passed;
        report.failed = counts.failed;
        report.skipped = counts.skipped;
        report.errors = counts.errors;

        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, s) in self.sections.iter().enumerate() {
            by_key.entry(section_key(&s.title)).or_default().push(i);
        }
        for f in &failing {
            let found = f
                .section
                .or_else(|| self.find_section(&by_key, &f.id, f.kind));
            let (message, location, collect) = match found.and_then(|i| self.sections.get_mut(i)) {
                Some(s) => {
                    s.used = true;
                    let message = if s.message.is_empty() {
                        f.message.clone()
                    } else {
                        s.message.clone()
                    };
                    (message, s.location.clone(), s.kind == BlockKind::Collect)
                }
                None => (f.message.clone(), None, false),
            };
            let id = &f.id;
            if collect || (f.kind == IdKind::Error && !id.contains("::") && is_path(id)) {
                report.push_problem(&format!("{id}: {message}"), location.as_deref());
            }
            report.push_failure(id, &message, location.as_deref());
        }
        report.named_outcomes = self.named_outcomes();
        report
    }
}

impl PytestParser {
    fn add_bonus(&mut self, n: u32) {
        self.bonus = self.bonus.saturating_add(n).min(MAX_BONUS);
    }

    fn sep_line(&mut self, title: &str) {
        self.close_block();
        self.progress_phase = false;
        self.section = match title {
            "test session starts" => {
                self.confident = true;
                self.progress_phase = true;
                Section::Run
            }
            "FAILURES" => {
                self.add_bonus(200);
                Section::Failures
            }
            "ERRORS" => {
                self.add_bonus(200);
                Section::Errors
            }
            "short test summary info" => {
                self.confident = true;
                Section::ShortSummary
            }
            _ => Section::Other,
        };
    }

    /// Progress characters and verbose per-test lines.
    fn run_line(&mut self, line: &str) {
        if line.starts_with("collected ")
            || line.starts_with("collecting ")
            || (line.contains(" workers [") && line.ends_with(" items]"))
        {
            self.progress_phase = true;
            return;
        }
        if let Some((id, status)) = parse_verbose(line) {
            self.pending_id = None;
            self.verbose(&id, status);
            return;
        }
        if let Some(id) = pending_verbose_id(line) {
            self.pending_id = Some(id.to_owned());
            return;
        }
        if let Some(id) = self.pending_id.clone()
            && let Some(status) = leading_status(line)
        {
            self.pending_id = None;
            self.verbose(&id, status);
            return;
        }
        if let Some((file, chars, percent)) = parse_progress(line)
            && (percent || self.progress_phase)
        {
            if let Some(f) = file
                && self.progress_files.len() < 2
                && !self.progress_files.iter().any(|x| x == f)
            {
                self.progress_files.push(f.to_owned());
            }
            for c in chars.chars() {
                let counts = &mut self.progress_counts;
                match c {
                    '.' | 'X' => counts.passed += 1,
                    'F' | 'u' => counts.failed += 1,
                    'E' => counts.errors += 1,
                    's' | 'x' => counts.skipped += 1,
                    _ => {}
                }
            }
            self.add_bonus(if percent { 20 } else { 2 });
        }
    }

    fn verbose(&mut self, id: &str, status: &str) {
        self.verbose_seen = true;
        self.add_bonus(3);
        let counts = &mut self.verbose_counts;
        let kind = match status {
            "PASSED" | "XPASS" => {
                counts.passed += 1;
                if self.passing.len() < super::MAX_PASSING {
                    self.passing.push(id.to_owned());
                }
                None
            }
            "FAILED" => {
                counts.failed += 1;
                Some(IdKind::Failed)
            }
            "SUBFAILED" => {
                counts.failed += 1;
                Some(IdKind::SubFailed)
            }
            "ERROR" => {
                counts.errors += 1;
                Some(IdKind::Error)
            }
            "SKIPPED" | "XFAIL" => {
                counts.skipped += 1;
                None
            }
            _ => None,
        };
        if let Some(kind) = kind
            && self.verbose_ids.len() < MAX_FAILURES
            && self.verbose_set.insert(id.to_owned())
        {
            self.verbose_ids.push((id.to_owned(), kind));
        }
    }

    fn summary_line(&mut self, line: &str) {
        let Some((kind, rest)) = short_summary_kind(line) else {
            return;
        };
        let (id, message) = split_id_message(rest, &self.verbose_set);
        if id.is_empty() || self.summary_ids.len() >= MAX_FAILURES {
            return;
        }
        self.add_bonus(5);
        self.summary_ids
            .push((id.to_owned(), kind, clip(message, MAX_SUMMARY_MESSAGE)));
    }

    /// A line inside the FAILURES or ERRORS section.
    fn block_line(&mut self, line: &str) {
        if let Some(title) = sep_title(line, '_') {
            self.close_block();
            let (kind, title) = if let Some(t) = title.strip_prefix("ERROR collecting ") {
                (BlockKind::Collect, t)
            } else if let Some(t) = title
                .strip_prefix("ERROR at setup of ")
                .or_else(|| title.strip_prefix("ERROR at teardown of "))
                .or_else(|| title.strip_prefix("ERROR at call of "))
            {
                (BlockKind::Error, t)
            } else if self.section == Section::Errors {
                (BlockKind::Error, title)
            } else {
                (BlockKind::Failure, title)
            };
            self.current = Some(Block::new(kind, title));
            return;
        }
        let Some(block) = self.current.as_mut() else {
            return;
        };
        if block.done {
            return;
        }
        if sep_title(line, '-').is_some() {
            block.done = true;
            return;
        }
        block.line(line);
    }

    fn close_block(&mut self) {
        self.pending_id = None;
        let Some(block) = self.current.take() else {
            return;
        };
        if self.sections.len() >= MAX_FAILURES {
            return;
        }
        self.sections.push(block.into_section());
    }

    /// The failing ids, in the order the output gives them, each once.
    fn failing_ids(&self) -> Vec<Failing> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut out: Vec<Failing> = Vec::new();
        let add = |id: &str, kind: IdKind, message: &str, section: Option<usize>| Failing {
            id: id.to_owned(),
            kind,
            message: message.to_owned(),
            section,
        };
        for (id, kind, message) in &self.summary_ids {
            if seen.insert(id) {
                out.push(add(id, *kind, message, None));
            }
        }
        for (id, kind) in &self.verbose_ids {
            if seen.insert(id) {
                out.push(add(id, *kind, "", None));
            }
        }
        // Collection errors have a header even where nothing else names them.
        for (i, s) in self.sections.iter().enumerate() {
            if s.kind == BlockKind::Collect && seen.insert(&s.title) {
                out.push(add(&s.title, IdKind::Error, "", Some(i)));
            }
        }
        if !self.summary_ids.is_empty() || !self.verbose_ids.is_empty() {
            return out;
        }
        // No short summary and no verbose lines (old pytest, `-rN`): rebuild the ids
        // from the section headers. A test with failed subtests has several sections.
        let files = self.test_files();
        let mut names: HashSet<String> = HashSet::new();
        for (i, s) in self.sections.iter().enumerate() {
            if s.kind == BlockKind::Collect {
                continue;
            }
            let kind = if s.kind == BlockKind::Error {
                IdKind::Error
            } else {
                IdKind::Failed
            };
            let name = test_name(&s.title);
            if !names.insert(format!("{kind:?} {name}")) {
                continue;
            }
            let id = derive_id(s, &files);
            if seen.insert(&s.title) {
                out.push(add(&id, kind, "", Some(i)));
            }
        }
        out
    }

    /// How many failing outcomes the output named: pytest counts each failed subtest,
    /// and a test's failure and its teardown error, apart, and names each on a line of
    /// its own in the short summary, the verbose lines and the failure sections.
    fn named_outcomes(&self) -> u64 {
        let summary = self.summary_ids.len() as u64;
        let verbose = if self.verbose_seen {
            self.verbose_counts.failed + self.verbose_counts.errors
        } else {
            0
        };
        let sections = self.sections.len() as u64;
        summary.max(verbose).max(sections)
    }

    /// The test files the output names: in default-mode progress lines, or as the first
    /// traceback frame of failures.
    fn test_files(&self) -> Vec<&str> {
        let mut files: Vec<&str> = self.progress_files.iter().map(String::as_str).collect();
        for s in &self.sections {
            if let Some(p) = s.first_path.as_deref()
                && s.kind == BlockKind::Failure
                && is_test_file(p)
                && !files.contains(&p)
            {
                files.push(p);
            }
        }
        files
    }

    fn find_section(
        &self,
        by_key: &HashMap<String, Vec<usize>>,
        id: &str,
        kind: IdKind,
    ) -> Option<usize> {
        let key = id_key(id);
        let fits = |i: &usize, want: &[BlockKind]| {
            self.sections
                .get(*i)
                .is_some_and(|s| !s.used && want.contains(&s.kind))
        };
        let wanted: &[BlockKind] = match kind {
            IdKind::Error => &[BlockKind::Error, BlockKind::Collect],
            IdKind::Failed | IdKind::SubFailed => &[BlockKind::Failure],
        };
        let exact = by_key.get(&key);
        let pick =
            |want: &[BlockKind]| exact.and_then(|v| v.iter().find(|i| fits(i, want)).copied());
        if kind != IdKind::SubFailed
            && let Some(i) = pick(wanted)
        {
            return Some(i);
        }
        // Subtest sections: `Class.test_x (n=4)`, `test_x [msg] (i=1)`.
        let prefix = format!("{key} ");
        if let Some(i) = self
            .sections
            .iter()
            .position(|s| !s.used && wanted.contains(&s.kind) && s.title.starts_with(&prefix))
        {
            return Some(i);
        }
        pick(wanted).or_else(|| pick(&[BlockKind::Failure, BlockKind::Error, BlockKind::Collect]))
    }
}

impl Block {
    fn new(kind: BlockKind, title: &str) -> Self {
        Block {
            kind,
            title: clip(title, MAX_KEPT_LINE),
            e_lines: Vec::new(),
            e_indent: 0,
            e_closed: false,
            e_file: None,
            tail: VecDeque::new(),
            expected: Vec::new(),
            in_expected: false,
            unexpected: None,
            location: None,
            first_path: None,
            native: None,
            done: false,
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix('E')
            && (rest.is_empty() || rest.starts_with(' '))
        {
            if self.e_closed {
                self.e_lines.clear();
                self.e_file = None;
                self.e_closed = false;
            }
            let indent = rest.len() - rest.trim_start().len();
            if self.e_lines.is_empty() {
                self.e_indent = indent;
            }
            let text = &rest[indent.min(self.e_indent)..];
            if let Some(loc) = native_frame(text) {
                self.e_file = Some(loc);
            }
            if !text.trim().is_empty() && self.e_lines.len() < MAX_E_LINES {
                self.e_lines.push(clip(text.trim_end(), MAX_KEPT_LINE));
            }
            return;
        }
        if !self.e_lines.is_empty() {
            self.e_closed = true;
        }
        if self.in_expected {
            if line.trim().is_empty() {
                self.in_expected = false;
            } else if self.expected.len() < MAX_EXPECTED_LINES {
                self.expected.push(clip(line, MAX_KEPT_LINE));
            }
            return;
        }
        if line == "Expected:" {
            self.in_expected = true;
            self.expected.clear();
            self.expected.push(line.to_owned());
            return;
        }
        if let Some(text) = line.strip_prefix("UNEXPECTED EXCEPTION: ") {
            self.unexpected = Some(clip(text, MAX_KEPT_LINE));
            return;
        }
        if let Some((path, loc)) = frame_location(line) {
            if self.first_path.is_none() {
                self.first_path = Some(clip(path, MAX_KEPT_LINE));
            }
            self.location = Some(clip(loc, MAX_KEPT_LINE));
            return;
        }
        if let Some(loc) = native_frame(line) {
            self.native = Some(clip(&loc, MAX_KEPT_LINE));
        }
        if line.trim().is_empty() || line.starts_with("[gw") {
            return;
        }
        if self.tail.len() >= TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(clip(line, MAX_KEPT_LINE));
    }

    fn into_section(self) -> Entry {
        let message = if !self.e_lines.is_empty() {
            self.e_lines.join("\n")
        } else if !self.expected.is_empty() {
            self.expected.join("\n")
        } else if let Some(u) = self.unexpected {
            u
        } else {
            self.tail
                .iter()
                .rev()
                .find(|l| !l.starts_with(char::is_whitespace))
                .cloned()
                .unwrap_or_default()
        };
        let location = self.e_file.or(self.location).or(self.native);
        Entry {
            kind: self.kind,
            title: self.title,
            message: clip(&message, MAX_MESSAGE),
            location,
            first_path: self.first_path,
            used: false,
        }
    }
}

/// The title of a pytest separator line `=== title ===` (or with `_`, `-`, `!`): at
/// least three separator characters, a space, the title, a space, at least three more.
fn sep_title(line: &str, sep: char) -> Option<&str> {
    let inner = line.trim_start_matches(sep);
    if line.len() - inner.len() < 3 * sep.len_utf8() {
        return None;
    }
    let inner = inner.strip_prefix(' ')?;
    let core = inner.trim_end_matches(sep);
    if inner.len() - core.len() < 3 * sep.len_utf8() {
        return None;
    }
    let title = core.strip_suffix(' ')?;
    (!title.trim().is_empty()).then_some(title.trim())
}

/// The text of a line that may be the final summary, and whether it was wrapped in `=`:
/// pytest pads it to the terminal's width (`=== 1 failed in 0.1s ===`), with a single `=`
/// or none when the line is wider than the terminal; `-q` prints it bare.
fn summary_text(line: &str) -> Option<(&str, bool)> {
    let inner = line.trim_start_matches('=');
    if inner.len() == line.len() {
        return Some((line, false));
    }
    let inner = inner.strip_prefix(' ')?;
    let core = inner.trim_end_matches('=');
    if core.len() == inner.len() {
        return None;
    }
    Some((core.strip_suffix(' ')?, true))
}

/// Words of the final summary line that pytest itself prints (with subtests, in pytest 9
/// and the `pytest-subtests` plugin, as `subtests passed`).
const SUMMARY_WORDS: &[&str] = &[
    "passed",
    "failed",
    "skipped",
    "deselected",
    "xfailed",
    "xpassed",
    "warning",
    "warnings",
    "error",
    "errors",
    "rerun",
];

/// `6 failed, 14 passed, 3 skipped, 1 xfailed, 1 xpassed, 2 errors in 0.05s` (also
/// `no tests ran in 0.01s`, `... in 26.97s (0:00:26)`, `... in 0.05 seconds`): nothing but
/// `N word` items joined by `, `, then the duration. Plugins add words of their own; a
/// word pytest does not print is taken only from a line wrapped in `=` (`padded`), so a
/// test's own output is not read as the summary.
fn parse_summary_line(text: &str, padded: bool) -> Option<Counts> {
    let (items, time) = text.rsplit_once(" in ")?;
    if !is_duration(time) {
        return None;
    }
    let mut counts = Counts::default();
    if items == "no tests ran" {
        return Some(counts);
    }
    let mut outcome = false;
    for item in items.split(", ") {
        let (n, word) = item.split_once(' ')?;
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let n: u64 = n.parse().ok()?;
        if word.is_empty()
            || word.starts_with(' ')
            || word.ends_with(' ')
            || !word.chars().all(|c| c.is_ascii_lowercase() || c == ' ')
        {
            return None;
        }
        let known = SUMMARY_WORDS.contains(&word)
            || word
                .strip_prefix("subtests ")
                .or_else(|| word.strip_prefix("subtest "))
                .is_some_and(|w| SUMMARY_WORDS.contains(&w));
        if !known && !padded {
            return None;
        }
        match word {
            "passed" | "xpassed" => counts.passed += n,
            "failed" => counts.failed += n,
            "skipped" | "xfailed" => counts.skipped += n,
            "error" | "errors" => counts.errors += n,
            // Warnings, deselected, rerun, subtests passed...: not test outcomes here.
            _ => {}
        }
        outcome |= known;
    }
    outcome.then_some(counts)
}

/// `0.05s`, `26.97s (0:00:26)`, `0.05 seconds`.
fn is_duration(text: &str) -> bool {
    let text = text.trim();
    let (secs, rest) = match text.split_once('s') {
        Some((a, b)) => (a.trim_end(), b),
        None => return false,
    };
    let rest = rest.strip_prefix("econds").unwrap_or(rest).trim();
    let clock = rest.is_empty()
        || (rest.starts_with('(')
            && rest.ends_with(')')
            && rest[1..rest.len() - 1]
                .chars()
                .all(|c| c.is_ascii_digit() || c == ':' || c == '.'));
    !secs.is_empty()
        && secs.chars().all(|c| c.is_ascii_digit() || c == '.')
        && secs.starts_with(|c: char| c.is_ascii_digit())
        && clock
}

const STATUSES: [&str; 10] = [
    "PASSED",
    "FAILED",
    "ERROR",
    "SKIPPED",
    "XFAIL",
    "XPASS",
    "SUBPASSED",
    "SUBFAILED",
    "SUBSKIPPED",
    "RERUN",
];

fn balanced(text: &str) -> bool {
    text.matches('[').count() == text.matches(']').count()
}

/// Strips a trailing `[ 42%]` or `[ 3/26]` progress marker; says whether there was one.
fn strip_percent(line: &str) -> (&str, bool) {
    let t = line.trim_end();
    if let Some(body) = t.strip_suffix(']')
        && let Some(open) = body.rfind('[')
    {
        let inside = body[open + 1..].trim();
        let numeric = inside
            .strip_suffix('%')
            .map(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or_else(|| {
                inside.split_once('/').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && !b.is_empty()
                        && a.trim().chars().all(|c| c.is_ascii_digit())
                        && b.chars().all(|c| c.is_ascii_digit())
                })
            });
        if numeric && (open == 0 || body[..open].ends_with(' ')) {
            return (body[..open].trim_end(), true);
        }
    }
    (t, false)
}

/// A node id as verbose lines print it: a path with `::` parts, no leading space.
fn looks_like_node_id(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(char::is_whitespace)
        && text.contains("::")
        && !text.starts_with("::")
        && text.split("::").next().is_some_and(|p| !p.contains(' '))
        && balanced(text)
}

/// `path::test STATUS (reason)   [ 42%]` or xdist's `[gw0] [ 42%] STATUS path::test`.
fn parse_verbose(line: &str) -> Option<(String, &'static str)> {
    if let Some(rest) = line.strip_prefix("[gw") {
        let (_, rest) = rest.split_once("] ")?;
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('[') {
            Some(r) => r.split_once("] ")?.1.trim_start(),
            None => rest,
        };
        // The status, then for subtests a `[msg] (params)` label, then the id.
        let status = STATUSES.iter().find(|s| {
            rest.strip_prefix(**s)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('[') || r.starts_with('('))
        })?;
        let id = skip_label(&rest[status.len()..])?.trim();
        return looks_like_node_id(id).then(|| (id.to_owned(), *status));
    }
    let (body, _) = strip_percent(line);
    for (i, _) in body.match_indices(' ') {
        let id = &body[..i];
        let after = &body[i + 1..];
        let Some(status) = STATUSES.iter().find(|s| {
            after.strip_prefix(**s).is_some_and(|r| {
                r.is_empty()
                    || r.starts_with(" (")
                    || (s.starts_with("SUB") && (r.starts_with('[') || r.starts_with('(')))
            })
        }) else {
            continue;
        };
        if looks_like_node_id(id) {
            return Some((id.to_owned(), status));
        }
    }
    None
}

/// A verbose line naming a test whose outcome comes later (`-s`, live logs, subtests).
fn pending_verbose_id(line: &str) -> Option<&str> {
    let id = line.trim_end();
    (looks_like_node_id(id) && !id.contains(" - ")).then_some(id)
}

/// `PASSED      [ 50%]` on a line of its own, after a test's live output.
fn leading_status(line: &str) -> Option<&'static str> {
    let (body, percent) = strip_percent(line);
    if !percent {
        return None;
    }
    let word = body.split_whitespace().next()?;
    STATUSES.iter().find(|s| **s == word).copied()
}

/// `.F.sxX   [ 42%]` or `tests/test_x.py .F.s   [ 42%]`: file, characters, percent.
fn parse_progress(line: &str) -> Option<(Option<&str>, &str, bool)> {
    let (body, percent) = strip_percent(line);
    let is_progress = |s: &str| !s.is_empty() && s.chars().all(|c| ".FEsxXu".contains(c));
    if is_progress(body) {
        return Some((None, body, percent));
    }
    let (file, chars) = body.split_once(' ')?;
    let chars = chars.trim();
    (is_progress(chars) && file.contains('.') && !file.starts_with(char::is_whitespace))
        .then_some((Some(file), chars, percent))
}

/// `FAILED rest`, `ERROR rest`, `SUBFAILED[msg] (params) rest`.
fn short_summary_kind(line: &str) -> Option<(IdKind, &str)> {
    if let Some(rest) = line.strip_prefix("FAILED ") {
        return Some((IdKind::Failed, rest));
    }
    if let Some(rest) = line.strip_prefix("ERROR ") {
        return Some((IdKind::Error, rest));
    }
    let rest = skip_label(line.strip_prefix("SUBFAILED")?)?;
    Some((IdKind::SubFailed, rest.trim_start()))
}

/// Skips a subtest's `[msg] (params)` label (either part may be missing).
fn skip_label(mut rest: &str) -> Option<&str> {
    for (open, close) in [('[', ']'), ('(', ')')] {
        if rest.starts_with(open) {
            let end = matching_close(rest, open, close)?;
            rest = rest[end + close.len_utf8()..].trim_start();
        }
    }
    Some(rest.trim_start())
}

/// Byte index of the bracket closing the one `text` starts with.
fn matching_close(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Splits `id - message`: ids may hold ` - ` inside their parameters, so the split is the
/// first ` - ` after a known id, else the first that leaves the brackets balanced.
fn split_id_message<'a>(rest: &'a str, known: &HashSet<String>) -> (&'a str, &'a str) {
    let rest = rest.trim_end();
    let cuts: Vec<usize> = rest.match_indices(" - ").map(|(i, _)| i).collect();
    if let Some(&i) = cuts.iter().find(|&&i| known.contains(&rest[..i])) {
        return (&rest[..i], &rest[i + 3..]);
    }
    if known.contains(rest) {
        return (rest, "");
    }
    if let Some(&i) = cuts.iter().find(|&&i| balanced(&rest[..i])) {
        return (&rest[..i], &rest[i + 3..]);
    }
    match cuts.first() {
        Some(&i) if !balanced(rest) => (&rest[..i], &rest[i + 3..]),
        _ => (rest, ""),
    }
}

/// `tests/test_x.py:42: AssertionError`, `tests/test_x.py:42: in test_x`,
/// `tests/test_x.py:64: `: the path and `path:line`.
fn frame_location(line: &str) -> Option<(&str, &str)> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let mut search = 0;
    while let Some(off) = line[search..].find(':') {
        let colon = search + off;
        let path = &line[..colon];
        let after = &line[colon + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            let rest = &after[digits..];
            if let Some(r) = rest.strip_prefix(':')
                && (r.is_empty() || r.starts_with(' '))
                && !path.contains(char::is_whitespace)
                && path.contains('.')
            {
                return Some((path, &line[..colon + 1 + digits]));
            }
        }
        search = colon + 1;
    }
    None
}

/// `  File "path", line N, in f` → `path:N`.
fn native_frame(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (path, rest) = rest.split_once("\", line ")?;
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!n.is_empty()).then(|| format!("{path}:{n}"))
}

/// A module or directory path, as collection errors name them.
fn is_path(id: &str) -> bool {
    !id.contains(' ') && (id.contains('/') || id.ends_with(".py"))
}

/// A test's own file, by pytest's default naming (`test_*.py`, `*_test.py`), relative.
fn is_test_file(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    !path.starts_with('/') && (file.starts_with("test") || file.ends_with("_test.py"))
}

/// A node id for a section header when nothing else gives one: the test's file (its
/// first traceback frame, or the only test file the output names) and the header's
/// dotted path turned into `::` parts.
fn derive_id(s: &Entry, files: &[&str]) -> String {
    let name = test_name(&s.title);
    let path = s
        .first_path
        .as_deref()
        .filter(|p| s.kind == BlockKind::Failure && is_test_file(p))
        .or_else(|| (files.len() == 1).then(|| files.first().copied()).flatten());
    let parts = if let Some(doc) = name.strip_prefix("[doctest] ") {
        doc.to_owned()
    } else {
        let (head, params) = match name.find('[') {
            Some(i) => name.split_at(i),
            None => (name, ""),
        };
        format!("{}{params}", head.replace('.', "::"))
    };
    match path {
        Some(p) => format!("{p}::{parts}"),
        None => parts,
    }
}

/// The header's test name without a subtest's ` [msg] (params)` suffix.
fn test_name(title: &str) -> &str {
    if title.starts_with("[doctest] ") {
        return title;
    }
    let mut depth = 0i32;
    for (i, c) in title.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ' ' if depth <= 0 => return &title[..i],
            _ => {}
        }
    }
    title
}

/// The section-header form of a failure: `Class.test_x[param]`, `mod.fn` for doctests.
fn section_key(title: &str) -> String {
    title.strip_prefix("[doctest] ").unwrap_or(title).to_owned()
}

/// A node id's header form: the parts after the file joined by dots
/// (`tests/a.py::TestK::test_m[x]` → `TestK.test_m[x]`); a module path stays as it is.
fn id_key(id: &str) -> String {
    match id.split_once("::") {
        Some((_, rest)) => rest.split("::").collect::<Vec<_>>().join("."),
        None => id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::parser_for;
    use crate::distill::testing::{
        failure, fixture, fixture_names, other_runners_logs, run, sorted_ids, truth,
    };

    /// `pytest -n 2 -v` (pytest-xdist 3.8) on a small suite: failures, a parameter with
    /// ` - ` inside, setup and teardown errors, skip, xfail, xpass, subtests.
    const XDIST_V: &str = r##"======================================= test session starts ========================================
platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.7.0 -- /tmp/pyv/bin/python
cachedir: .pytest_cache
rootdir: /tmp/ps
plugins: xdist-3.8.0
created: 2/2 workers
2 workers [13 items]

scheduling tests via LoadScheduling

tests/test_a.py::test_param[a - b] 
tests/test_a.py::test_ok 
[gw0] [  7%] PASSED tests/test_a.py::test_ok 
tests/test_a.py::test_fail 
[gw0] [ 15%] FAILED tests/test_a.py::test_fail 
[gw1] [ 23%] FAILED tests/test_a.py::test_param[a - b] 
tests/test_a.py::test_param[[z]] 
[gw0] [ 30%] PASSED tests/test_a.py::test_param[[z]] 
tests/test_a.py::test_setup 
tests/test_a.py::test_param[x y] 
[gw1] [ 38%] PASSED tests/test_a.py::test_param[x y] 
tests/test_a.py::test_teardown 
[gw1] [ 46%] PASSED tests/test_a.py::test_teardown 
[gw0] [ 53%] ERROR tests/test_a.py::test_setup 
[gw1] [ 53%] ERROR tests/test_a.py::test_teardown 
tests/test_a.py::test_skip 
tests/test_a.py::test_xf 
[gw0] [ 61%] SKIPPED tests/test_a.py::test_skip 
tests/test_a.py::test_xp 
[gw0] [ 69%] XPASS tests/test_a.py::test_xp 
[gw1] [ 76%] XFAIL tests/test_a.py::test_xf 
tests/test_a.py::TestK::test_m 
tests/test_a.py::test_sub 
[gw0] [ 84%] SUBPASSED[m] (i='0') tests/test_a.py::test_sub 
[gw1] [ 92%] FAILED tests/test_a.py::TestK::test_m 
[gw0] [ 92%] SUBFAILED[m] (i='1') tests/test_a.py::test_sub 
[gw0] [ 92%] SUBPASSED[m] (i='2') tests/test_a.py::test_sub 
[gw0] [ 92%] FAILED tests/test_a.py::test_sub 
tests/test_a.py::U::test_u 
[gw1] [100%] SUBPASSED(i='0') tests/test_a.py::U::test_u 
[gw1] [100%] SUBFAILED(i='1') tests/test_a.py::U::test_u 
[gw1] [100%] PASSED tests/test_a.py::U::test_u 

============================================== ERRORS ==============================================
___________________________________ ERROR at setup of test_setup ___________________________________
[gw0] linux -- Python 3.11.7 /tmp/pyv/bin/python

    @pytest.fixture
    def broken():
>       raise RuntimeError("no db")
E       RuntimeError: no db

tests/conftest.py:4: RuntimeError
________________________________ ERROR at teardown of test_teardown ________________________________
[gw1] linux -- Python 3.11.7 /tmp/pyv/bin/python

    @pytest.fixture
    def leaky():
        yield 1
>       raise RuntimeError("leak")
E       RuntimeError: leak

tests/conftest.py:8: RuntimeError
============================================= FAILURES =============================================
____________________________________________ test_fail _____________________________________________
[gw0] linux -- Python 3.11.7 /tmp/pyv/bin/python

    def test_fail():
>       assert 1 == 2
E       assert 1 == 2

tests/test_a.py:4: AssertionError
________________________________________ test_param[a - b] _________________________________________
[gw1] linux -- Python 3.11.7 /tmp/pyv/bin/python

s = 'a - b'

    @pytest.mark.parametrize("s", ["a - b", "x y", "[z]"])
    def test_param(s):
>       assert s != "a - b"
E       AssertionError: assert 'a - b' != 'a - b'

tests/test_a.py:7: AssertionError
___________________________________________ TestK.test_m ___________________________________________
[gw1] linux -- Python 3.11.7 /tmp/pyv/bin/python

self = <test_a.TestK object at 0x7fa0e4fb3e50>

    def test_m(self):
>       raise ValueError("bad value")
E       ValueError: bad value

tests/test_a.py:18: ValueError
_______________________________________ test_sub [m] (i='1') _______________________________________
[gw0] linux -- Python 3.11.7 /tmp/pyv/bin/python

subtests = <_pytest.subtests.Subtests object at 0x7f1fbb87d3d0>

    def test_sub(subtests):
        for i in range(3):
            with subtests.test(msg="m", i=i):
>               assert i != 1
E               assert 1 != 1

tests/test_a.py:22: AssertionError
_____________________________________________ test_sub _____________________________________________
[gw0] linux -- Python 3.11.7 /tmp/pyv/bin/python
contains 1 failed subtest
_________________________________________ U.test_u (i='1') _________________________________________
[gw1] linux -- Python 3.11.7 /tmp/pyv/bin/python

self = <test_a.U testMethod=test_u>

    def test_u(self):
        for i in range(2):
            with self.subTest(i=i):
>               self.assertEqual(i, 0)
E               AssertionError: 1 != 0

tests/test_a.py:27: AssertionError
===================================== short test summary info ======================================
FAILED tests/test_a.py::test_fail - assert 1 == 2
FAILED tests/test_a.py::test_param[a - b] - AssertionError: assert 'a - b' != 'a - b'
FAILED tests/test_a.py::TestK::test_m - ValueError: bad value
SUBFAILED[m] (i='1') tests/test_a.py::test_sub - assert 1 != 1
FAILED tests/test_a.py::test_sub - contains 1 failed subtest
SUBFAILED(i='1') tests/test_a.py::U::test_u - AssertionError: 1 != 0
ERROR tests/test_a.py::test_setup - RuntimeError: no db
ERROR tests/test_a.py::test_teardown - RuntimeError: leak
==== 6 failed, 5 passed, 1 skipped, 1 xfailed, 1 xpassed, 2 errors, 3 subtests passed in 0.46s =====
"##;

    /// `pytest -q -rN` on the same suite: no short summary, ids from the section headers.
    const NO_SUMMARY: &str = r##".FF..E.EsxXFuuuF.                                                                          [100%]
============================================== ERRORS ==============================================
___________________________________ ERROR at setup of test_setup ___________________________________

    @pytest.fixture
    def broken():
>       raise RuntimeError("no db")
E       RuntimeError: no db

tests/conftest.py:4: RuntimeError
________________________________ ERROR at teardown of test_teardown ________________________________

    @pytest.fixture
    def leaky():
        yield 1
>       raise RuntimeError("leak")
E       RuntimeError: leak

tests/conftest.py:8: RuntimeError
============================================= FAILURES =============================================
____________________________________________ test_fail _____________________________________________

    def test_fail():
>       assert 1 == 2
E       assert 1 == 2

tests/test_a.py:4: AssertionError
________________________________________ test_param[a - b] _________________________________________

s = 'a - b'

    @pytest.mark.parametrize("s", ["a - b", "x y", "[z]"])
    def test_param(s):
>       assert s != "a - b"
E       AssertionError: assert 'a - b' != 'a - b'

tests/test_a.py:7: AssertionError
___________________________________________ TestK.test_m ___________________________________________

self = <test_a.TestK object at 0x7f777f40c910>

    def test_m(self):
>       raise ValueError("bad value")
E       ValueError: bad value

tests/test_a.py:18: ValueError
________________________________________ test_sub [m] (i=1) ________________________________________

subtests = <_pytest.subtests.Subtests object at 0x7f777f428890>

    def test_sub(subtests):
        for i in range(3):
            with subtests.test(msg="m", i=i):
>               assert i != 1
E               assert 1 != 1

tests/test_a.py:22: AssertionError
_____________________________________________ test_sub _____________________________________________
contains 1 failed subtest
__________________________________________ U.test_u (i=1) __________________________________________

self = <test_a.U testMethod=test_u>

    def test_u(self):
        for i in range(2):
            with self.subTest(i=i):
>               self.assertEqual(i, 0)
E               AssertionError: 1 != 0

tests/test_a.py:27: AssertionError
6 failed, 5 passed, 1 skipped, 1 xfailed, 1 xpassed, 2 errors, 3 subtests passed in 0.04s
"##;

    /// `pytest -q --tb=line`: no section headers for failures.
    const TB_LINE: &str = r##".FF..E.EsxXFuuuF.                                                                          [100%]
============================================== ERRORS ==============================================
___________________________________ ERROR at setup of test_setup ___________________________________
E   RuntimeError: no db
________________________________ ERROR at teardown of test_teardown ________________________________
E   RuntimeError: leak
============================================= FAILURES =============================================
E   assert 1 == 2
/tmp/ps/tests/test_a.py:4: assert 1 == 2
E   AssertionError: assert 'a - b' != 'a - b'
/tmp/ps/tests/test_a.py:7: AssertionError: assert 'a - b' != 'a - b'
E   ValueError: bad value
/tmp/ps/tests/test_a.py:18: ValueError: bad value
E   assert 1 != 1
/tmp/ps/tests/test_a.py:22: assert 1 != 1
contains 1 failed subtest
contains 1 failed subtest
E   AssertionError: 1 != 0
/root/.pyenv/versions/3.11.7/lib/python3.11/unittest/case.py:866: AssertionError: 1 != 0
===================================== short test summary info ======================================
FAILED tests/test_a.py::test_fail - assert 1 == 2
FAILED tests/test_a.py::test_param[a - b] - AssertionError: assert 'a - b' != 'a - b'
FAILED tests/test_a.py::TestK::test_m - ValueError: bad value
SUBFAILED[m] (i=1) tests/test_a.py::test_sub - assert 1 != 1
FAILED tests/test_a.py::test_sub - contains 1 failed subtest
SUBFAILED(i=1) tests/test_a.py::U::test_u - AssertionError: 1 != 0
ERROR tests/test_a.py::test_setup - RuntimeError: no db
ERROR tests/test_a.py::test_teardown - RuntimeError: leak
6 failed, 5 passed, 1 skipped, 1 xfailed, 1 xpassed, 2 errors, 3 subtests passed in 0.03s
"##;

    #[test]
    fn pytest_fixtures_match_their_truth() {
        let names: Vec<String> = fixture_names()
            .into_iter()
            .filter(|n| n.starts_with("pytest_"))
            .collect();
        assert!(!names.is_empty());
        for name in names {
            let truth = truth(&name);
            let (r, score) = run(Format::Pytest, &fixture(&name));
            assert!(score >= CONFIDENT, "{name}: score {score}");
            for (what, got) in [
                ("passed", r.passed),
                ("failed", r.failed),
                ("skipped", r.skipped),
                ("errors", r.errors),
            ] {
                assert_eq!(Some(got), truth[what].as_u64(), "{name}: {what}");
            }
            let mut want: Vec<&str> = truth["failing"]
                .as_array()
                .expect("failing")
                .iter()
                .filter_map(|v| v.as_str())
                .collect();
            let got = sorted_ids(&r);
            want.sort();
            assert_eq!(got, want, "{name}");
            for f in &r.failures {
                assert!(!f.message.is_empty(), "{name}: {} has no message", f.id);
            }
            let (_, unittest_score) = run(Format::Unittest, &fixture(&name));
            assert!(
                unittest_score < CONFIDENT,
                "{name}: unittest {unittest_score}"
            );
        }
    }

    #[test]
    fn zero_on_other_runners() {
        // Stricter than the shared check (below CONFIDENT): not even a per-test line.
        for (name, text) in other_runners_logs(Format::Pytest) {
            let (_, score) = run(Format::Pytest, &text);
            assert_eq!(score, 0, "{name}");
        }
    }

    #[test]
    fn messages_and_locations_come_from_the_failure_sections() {
        let (r, _) = run(Format::Pytest, &fixture("pytest_q_mixed"));
        let f = failure(&r, "tests/test_totals.py::test_summarize_large_batch");
        assert_eq!(
            f.message,
            "ValueError: invalid literal for int() with base 10: 'two'"
        );
        assert_eq!(f.location.as_deref(), Some("invoicing/__init__.py:25"));
        let f = failure(
            &r,
            "tests/test_storage.py::TestExport::test_export_formats[xml]",
        );
        assert!(f.message.starts_with("AssertionError: format 'xml' not in"));
        assert_eq!(f.location.as_deref(), Some("tests/test_storage.py:60"));
        let f = failure(&r, "tests/test_storage.py::test_cleanup_leaks");
        assert_eq!(
            f.message,
            "RuntimeError: teardown: 3 connections still checked out"
        );
        assert_eq!(f.location.as_deref(), Some("tests/conftest.py:30"));

        let (r, _) = run(Format::Pytest, &fixture("pytest_collection_error"));
        let f = failure(&r, "tests/test_legacy.py");
        assert!(f.message.ends_with("SyntaxError: '{' was never closed"));
        assert_eq!(
            f.location.as_deref(),
            Some("/home/dev/project/py/collerr/tests/test_legacy.py:2")
        );
        assert_eq!(r.build_errors.len(), 2);

        let (r, _) = run(Format::Pytest, &fixture("pytest_real_toolz_doctest_v"));
        let f = failure(&r, "toolz/itertoolz.py::toolz.itertoolz.take_nth");
        assert_eq!(f.message, "Expected:\n    [10, 30, 50]\nGot:\n    [20, 40]");

        let (r, _) = run(Format::Pytest, &fixture("pytest_real_more_itertools_q"));
        let f = failure(&r, "tests/test_more.py::WindowedTests::test_basic");
        assert!(f.message.starts_with("AssertionError: Lists differ"));
        assert_eq!(f.location.as_deref(), Some("tests/test_more.py:906"));
    }

    #[test]
    fn xdist_verbose() {
        let (r, score) = run(Format::Pytest, XDIST_V);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (6, 6, 2, 2));
        assert_eq!(
            sorted_ids(&r),
            [
                "tests/test_a.py::TestK::test_m",
                "tests/test_a.py::U::test_u",
                "tests/test_a.py::test_fail",
                "tests/test_a.py::test_param[a - b]",
                "tests/test_a.py::test_setup",
                "tests/test_a.py::test_sub",
                "tests/test_a.py::test_teardown",
            ]
        );
        let f = failure(&r, "tests/test_a.py::test_param[a - b]");
        assert_eq!(f.message, "AssertionError: assert 'a - b' != 'a - b'");
        assert_eq!(f.location.as_deref(), Some("tests/test_a.py:7"));
        let f = failure(&r, "tests/test_a.py::test_sub");
        assert_eq!(f.message, "assert 1 != 1");

        // Without the summary line, the verbose lines give the counts.
        let cut: String = XDIST_V
            .lines()
            .take_while(|l| !l.contains("ERRORS"))
            .map(|l| format!("{l}\n"))
            .collect();
        let (r, score) = run(Format::Pytest, &cut);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (6, 6, 2, 2));
        assert_eq!(r.failures.len(), 7);
    }

    #[test]
    fn ids_from_section_headers_without_a_short_summary() {
        let (r, _) = run(Format::Pytest, NO_SUMMARY);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (6, 6, 2, 2));
        assert_eq!(
            sorted_ids(&r),
            [
                "tests/test_a.py::TestK::test_m",
                "tests/test_a.py::U::test_u",
                "tests/test_a.py::test_fail",
                "tests/test_a.py::test_param[a - b]",
                "tests/test_a.py::test_setup",
                "tests/test_a.py::test_sub",
                "tests/test_a.py::test_teardown",
            ]
        );
        assert_eq!(
            failure(&r, "tests/test_a.py::test_sub").message,
            "assert 1 != 1"
        );
    }

    #[test]
    fn tb_line_uses_the_summary_messages() {
        let (r, _) = run(Format::Pytest, TB_LINE);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (6, 6, 2, 2));
        assert_eq!(r.failures.len(), 7);
        assert_eq!(
            failure(&r, "tests/test_a.py::TestK::test_m").message,
            "ValueError: bad value"
        );
        assert_eq!(
            failure(&r, "tests/test_a.py::test_setup").message,
            "RuntimeError: no db"
        );
    }

    #[test]
    fn exitfirst_and_other_summaries() {
        let text = ".F\n\
            ===================== short test summary info =====================\n\
            FAILED tests/test_a.py::test_fail - assert 1 == 2\n\
            !!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!\n\
            1 failed, 1 passed in 0.01s\n";
        let (r, score) = run(Format::Pytest, text);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(sorted_ids(&r), ["tests/test_a.py::test_fail"]);

        let c = |s: &str| {
            summary_text(s)
                .and_then(|(t, padded)| parse_summary_line(t, padded))
                .map(|c| (c.passed, c.failed, c.skipped, c.errors))
        };
        assert_eq!(c("no tests ran in 0.01s"), Some((0, 0, 0, 0)));
        assert_eq!(
            c("3 passed, 2 deselected, 1 warning in 1.20s (0:00:01)"),
            Some((3, 0, 0, 0))
        );
        assert_eq!(c("1 failed, 1 error in 0.5 seconds"), Some((0, 1, 0, 1)));
        assert_eq!(
            c("2 passed, 4 subtests passed in 0.03s"),
            Some((2, 0, 0, 0))
        );
        assert_eq!(c("test result: ok. 2 passed in 3s"), None);
        assert_eq!(c("we ran in 3s"), None);
    }

    /// Every form of the final line pytest prints, as it printed them (pytest 7.2 and 9.2,
    /// default and `-q`, padded to the terminal, padded with a single `=` when wider than
    /// the terminal, coloured), with the counts they give; lines of other text that only
    /// look like one are not taken.
    #[test]
    fn every_form_of_the_final_line_is_read() {
        type Want = Option<(u64, u64, u64, u64)>;
        let cases: &[(&str, Want)] = &[
            (
                "= 8 failed, 1538 passed, 24 skipped, 30000 deselected, 1 xfailed, 189 errors in 13.23s =",
                Some((1538, 8, 25, 189)),
            ),
            (
                "= 1 failed, 2 passed, 1 skipped, 1 deselected, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.01s =",
                Some((3, 1, 2, 1)),
            ),
            (
                "1 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.01s",
                Some((4, 1, 2, 1)),
            ),
            (
                "========================= 2 failed, 5 errors in 0.04s ==========================",
                Some((0, 2, 0, 5)),
            ),
            ("3 failed, 2 passed in 0.12s", Some((2, 3, 0, 0))),
            ("7 deselected, 1 error in 0.01s", Some((0, 0, 0, 1))),
            (
                "============================ 8 deselected in 0.00s =============================",
                Some((0, 0, 0, 0)),
            ),
            (
                "============================ no tests ran in 0.03s =============================",
                Some((0, 0, 0, 0)),
            ),
            ("= no tests ran in 0.03s =", Some((0, 0, 0, 0))),
            ("no tests ran in 0.03s", Some((0, 0, 0, 0))),
            (
                "28 failed, 747 passed, 21184 subtests passed in 26.97s",
                Some((747, 28, 0, 0)),
            ),
            (
                "12 passed, 3 warnings in 61.35s (0:01:01)",
                Some((12, 0, 0, 0)),
            ),
            ("1 passed, 1 rerun in 0.20s", Some((1, 0, 0, 0))),
            // `--color=yes`, once the reader has taken the colour codes out.
            (
                "= 1 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.03s =",
                Some((4, 1, 2, 1)),
            ),
            // A plugin's own word, in pytest's padded line only.
            ("=== 3 passed, 2 flaky in 1.00s ===", Some((3, 0, 0, 0))),
            ("3 passed, 2 flaky in 1.00s", None),
            ("=== 3 apples in 2s ===", None),
            ("3 apples in 2s", None),
            ("we saw 3 passed in 2s", None),
            ("1 failed,2 passed in 1s", None),
            ("1 passed in the morning", None),
            ("=1 passed in 1s=", None),
            ("= 1 passed in 1s", None),
            ("-1 passed in 1s", None),
        ];
        let mut problems = Vec::new();
        for (line, want) in cases {
            let got = summary_text(line)
                .and_then(|(t, padded)| parse_summary_line(t, padded))
                .map(|c| (c.passed, c.failed, c.skipped, c.errors));
            if got != *want {
                problems.push(format!("{line:?}: {got:?}, want {want:?}"));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// The final line wider than the terminal, padded with a single `=`, gives the
    /// counts, not the progress characters (which `pytest -n` or a cut log may leave
    /// short).
    #[test]
    fn a_final_line_wider_than_the_terminal_gives_the_counts() {
        let text = "============================= test session starts ==============================\n\
            platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0+repack\n\
            collected 30000 items / 29999 deselected / 1 selected\n\
            \n\
            tests/test_a.py F                                                        [100%]\n\
            \n\
            =================================== FAILURES ===================================\n\
            ___________________________________ test_a _____________________________________\n\
            \n\
            >       assert 1 == 2\n\
            E       assert 1 == 2\n\
            \n\
            tests/test_a.py:2: AssertionError\n\
            =========================== short test summary info ============================\n\
            FAILED tests/test_a.py::test_a - assert 1 == 2\n\
            = 8 failed, 1538 passed, 24 skipped, 30000 deselected, 1 xfailed, 189 errors in 13.23s =\n";
        let (r, score) = run(Format::Pytest, text);
        assert!(score >= CONFIDENT);
        assert_eq!(
            (r.passed, r.failed, r.skipped, r.errors),
            (1538, 8, 25, 189)
        );
        assert_eq!(sorted_ids(&r), ["tests/test_a.py::test_a"]);
        // One failure named of the 197 the line counts.
        assert_eq!(r.unnamed, 196);
    }

    /// A run whose summary counts failures the output never names (a test closed
    /// pytest's captured output, so no FAILURES section or short summary was printed)
    /// says how many are unnamed; one that names each, however often a test is counted,
    /// says none.
    #[test]
    fn failures_the_summary_counts_but_the_output_does_not_name_are_told() {
        let text = "============================= test session starts ==============================\n\
            platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0+repack\n\
            rootdir: /w\n\
            collected 3 items\n\
            \n\
            tests/test_a.py F.F                                                      [100%]\n\
            ========================= 2 failed, 1 passed in 0.04s ==========================\n";
        let (r, _) = run(Format::Pytest, text);
        assert_eq!((r.passed, r.failed), (1, 2));
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.unnamed, 2);
        let bare = text.replace(
            "========================= 2 failed, 1 passed in 0.04s ==========================",
            "2 failed, 1 passed in 0.04s",
        );
        assert_eq!(run(Format::Pytest, &bare).0.unnamed, 2);

        // pytest 7.2 after a test closed `sys.stdout`: seven outcomes on seven lines,
        // four tests.
        let named = "test_close.py FFEEEEE                                                    [100%]\n\
            =========================== short test summary info ============================\n\
            FAILED test_close.py::test_a - assert 1 == 2\n\
            FAILED test_close.py::test_close - ValueError: I/O operation on closed file.\n\
            ERROR test_close.py::test_close - ValueError: I/O operation on closed file\n\
            ERROR test_close.py::test_b - ValueError: I/O operation on closed file\n\
            ERROR test_close.py::test_b - ValueError: I/O operation on closed file\n\
            ERROR test_close.py::test_ok - ValueError: I/O operation on closed file\n\
            ERROR test_close.py::test_ok - ValueError: I/O operation on closed file\n\
            ========================= 2 failed, 5 errors in 0.04s ==========================\n";
        let (r, _) = run(Format::Pytest, named);
        assert_eq!((r.failed, r.errors, r.failures.len()), (2, 5, 4));
        assert_eq!(r.unnamed, 0);
        // Failed subtests: 28 counted, 21 tests, each outcome on its own line.
        let (r, _) = run(Format::Pytest, &fixture("pytest_real_more_itertools_q"));
        assert_eq!((r.failed, r.failures.len(), r.unnamed), (28, 21, 0));
    }

    #[test]
    fn verbose_lines_in_their_variants() {
        assert_eq!(
            parse_verbose("tests/t.py::test_a[x PASSED y] FAILED                 [ 50%]"),
            Some(("tests/t.py::test_a[x PASSED y]".to_owned(), "FAILED"))
        );
        assert_eq!(
            parse_verbose("tests/t.py::test_b SKIPPED (no network)   [ 60%]"),
            Some(("tests/t.py::test_b".to_owned(), "SKIPPED"))
        );
        assert_eq!(
            parse_verbose("[gw3] PASSED tests/t.py::T::test_c "),
            Some(("tests/t.py::T::test_c".to_owned(), "PASSED"))
        );
        assert_eq!(parse_verbose("the test PASSED"), None);
        // Live logs (`log_cli`) put the outcome on a later line.
        let text = "==================== test session starts ====================\n\
            tests/t.py::test_live \n\
            -------------------- live log call --------------------\n\
            INFO     root:t.py:3 hello\n\
            FAILED                                                 [100%]\n";
        let (r, _) = run(Format::Pytest, text);
        assert_eq!(r.failed, 1);
        assert_eq!(sorted_ids(&r), ["tests/t.py::test_live"]);
    }

    #[test]
    fn short_summary_ids_with_dashes_and_brackets() {
        let known = HashSet::new();
        assert_eq!(
            split_id_message("t.py::test_p[a - b] - AssertionError: x - y", &known),
            ("t.py::test_p[a - b]", "AssertionError: x - y")
        );
        assert_eq!(
            split_id_message("t.py::mod.fn", &known),
            ("t.py::mod.fn", "")
        );
        let known: HashSet<String> = ["t.py::test_q - x".to_owned()].into();
        assert_eq!(
            split_id_message("t.py::test_q - x - boom", &known),
            ("t.py::test_q - x", "boom")
        );
        assert_eq!(
            short_summary_kind("SUBFAILED[m] (i=1) t.py::test_s - assert 1 != 1"),
            Some((IdKind::SubFailed, "t.py::test_s - assert 1 != 1"))
        );
    }

    #[test]
    fn odd_input_never_panics_and_stays_bounded() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut text = String::new();
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let pieces = [
                "=",
                "_",
                " ",
                "E",
                "FAILED ",
                "ERROR ",
                "::",
                "[",
                "]",
                " - ",
                ":12: ",
                "\n",
                "PASSED",
                "[ 5%]",
                "in 0.1s",
                "é",
                "SUBFAILED(",
                ")",
                "Expected:",
            ];
            text.push_str(pieces[(seed % pieces.len() as u64) as usize]);
        }
        let _ = run(Format::Pytest, &text);
        let bytes: Vec<u8> = (0..50_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
            .collect();
        let _ = run(Format::Pytest, &String::from_utf8_lossy(&bytes));

        let mut p = parser_for(Format::Pytest);
        p.line("=================== FAILURES ===================");
        for i in 0..5_000 {
            p.line(&format!("_______________ test_{i} _______________"));
            for _ in 0..50 {
                p.line("E   AssertionError: a very long message that goes on and on");
            }
        }
        p.line("=================== short test summary info ===================");
        for i in 0..5_000 {
            p.line(&format!("FAILED tests/t.py::test_{i} - AssertionError"));
        }
        p.line("5000 failed in 1.00s");
        let r = p.finish();
        assert_eq!(r.failed, 5_000);
        assert_eq!(r.failures.len(), MAX_FAILURES);
        assert!(
            r.failures
                .iter()
                .all(|f| f.message.len() <= MAX_MESSAGE * 4)
        );
    }
}
