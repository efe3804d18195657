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

use super::{CONFIDENT, Format, MAX_FAILURES, MAX_MESSAGE, Parser, TestReport, clip};

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
}

impl Parser for PytestParser {
    fn line(&mut self, line: &str) {
        let trimmed = line.trim_end();
        if let Some(title) = sep_title(trimmed, '=') {
            self.sep_line(title);
            return;
        }
        if let Some(counts) = parse_summary_line(trimmed) {
            // The bare final line of `-q` runs.
            self.final_counts = Some(counts);
            self.confident = true;
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
        let failing = self.failing_ids();
        let counts = match self.final_counts {
            Some(c) => c,
            None => {
                let mut c = if self.verbose_seen {
                    self.verbose_counts
                } else {
                    self.progress_counts
                };
                let failed = failing
                    .iter()
                    .filter(|(_, k, _)| *k != IdKind::Error)
                    .count() as u64;
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
        for (id, kind, summary_message) in &failing {
            let found = self.find_section(&by_key, id, *kind);
            let (message, location, collect) = match found {
                Some(i) => {
                    let s = &mut self.sections[i];
                    s.used = true;
                    let message = if s.message.is_empty() {
                        summary_message.clone()
                    } else {
                        s.message.clone()
                    };
                    (message, s.location.clone(), s.kind == BlockKind::Collect)
                }
                None => (summary_message.clone(), None, false),
            };
            if collect || (*kind == IdKind::Error && !id.contains("::")) {
                report.push_problem(&format!("{id}: {message}"), location.as_deref());
            }
            report.push_failure(id, &message, location.as_deref());
        }
        report
    }
}

impl PytestParser {
    fn add_bonus(&mut self, n: u32) {
        self.bonus = self.bonus.saturating_add(n).min(MAX_BONUS);
    }

    fn sep_line(&mut self, title: &str) {
        if let Some(counts) = parse_summary_line(title) {
            self.close_block();
            self.final_counts = Some(counts);
            self.confident = true;
            self.section = Section::Other;
            return;
        }
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
    fn failing_ids(&self) -> Vec<(String, IdKind, String)> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut out: Vec<(String, IdKind, String)> = Vec::new();
        for (id, kind, message) in &self.summary_ids {
            if seen.insert(id) {
                out.push((id.clone(), *kind, message.clone()));
            }
        }
        for (id, kind) in &self.verbose_ids {
            if seen.insert(id) {
                out.push((id.clone(), *kind, String::new()));
            }
        }
        // Collection errors have a header even where nothing else names them.
        for s in &self.sections {
            if s.kind == BlockKind::Collect && seen.insert(&s.title) {
                out.push((s.title.clone(), IdKind::Error, String::new()));
            }
        }
        if !self.summary_ids.is_empty() || !self.verbose_ids.is_empty() {
            return out;
        }
        // No short summary and no verbose lines (old pytest, `-rN`): rebuild the ids
        // from the section headers.
        let mut derived: Vec<(String, IdKind, String)> = Vec::new();
        for s in &self.sections {
            if s.kind == BlockKind::Collect {
                continue;
            }
            let id = self.derive_id(s);
            if !out.iter().any(|(x, _, _)| *x == id) && !derived.iter().any(|(x, _, _)| *x == id) {
                let kind = if s.kind == BlockKind::Error {
                    IdKind::Error
                } else {
                    IdKind::Failed
                };
                derived.push((id, kind, String::new()));
            }
        }
        out.extend(derived);
        out
    }

    /// A node id for a section header when nothing else gives one: the test's file
    /// (its first traceback frame, or the only file the progress lines named) and the
    /// header's dotted path turned into `::` parts.
    fn derive_id(&self, s: &Entry) -> String {
        let name = test_name(&s.title);
        let path = s
            .first_path
            .as_deref()
            .filter(|p| {
                let file = p.rsplit('/').next().unwrap_or(p);
                s.kind == BlockKind::Failure
                    && !p.starts_with('/')
                    && (file.starts_with("test") || file.ends_with("_test.py"))
            })
            .or_else(|| {
                (self.progress_files.len() == 1)
                    .then(|| self.progress_files.first().map(String::as_str))
                    .flatten()
            });
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

/// `6 failed, 14 passed, 3 skipped, 1 xfailed, 1 xpassed, 2 errors in 0.05s` (also
/// `no tests ran in 0.01s`, `... in 26.97s (0:00:26)`, `... in 0.05 seconds`).
fn parse_summary_line(text: &str) -> Option<Counts> {
    let (items, time) = text.rsplit_once(" in ")?;
    if !is_duration(time) {
        return None;
    }
    let mut counts = Counts::default();
    let items = items.trim();
    if items == "no tests ran" || items.is_empty() {
        return (!items.is_empty()).then_some(counts);
    }
    let mut recognised = false;
    for item in items.split(", ") {
        let (n, word) = item.trim().split_once(' ')?;
        let n: u64 = n.parse().ok()?;
        if !word.chars().all(|c| c.is_ascii_lowercase() || c == ' ') || word.is_empty() {
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
        recognised = true;
    }
    recognised.then_some(counts)
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
        let (word, id) = rest.split_once(' ')?;
        let status = STATUSES.iter().find(|s| **s == word)?;
        let id = id.trim();
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
    let mut rest = line.strip_prefix("SUBFAILED")?;
    for (open, close) in [('[', ']'), ('(', ')')] {
        if rest.starts_with(open) {
            let end = matching_close(rest, open, close)?;
            rest = rest[end + 1..].trim_start();
        }
    }
    Some((IdKind::SubFailed, rest.trim_start()))
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
