//! Reads the human output of `jest` (default, `--verbose` and `--silent` reporters).
//!
//! Counts come from jest's own summary (`Tests: 7 failed, 1 skipped, 1 todo, 11 passed,
//! 20 total`) when it is there, otherwise from the per-test lines. Failure ids come from the
//! `● describe › test` blocks; `● Test suite failed to run` blocks are errors whose id is
//! the file named by the `FAIL <file>` header above them.

use std::collections::HashSet;

use super::{CONFIDENT, Format, MAX_FAILURES, Parser, TestReport};

/// Lines of a failure's text kept for its message.
pub(crate) const MAX_MESSAGE_LINES: usize = 12;

/// Below this, per-test evidence never makes a parser confident.
pub(crate) const MAX_HINT_SCORE: u32 = CONFIDENT - 100;

/// True for `path:line` or `path:line:col`.
pub(crate) fn is_location(s: &str) -> bool {
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    let mut parts = s.rsplitn(3, ':');
    let (a, b, c) = (parts.next(), parts.next(), parts.next());
    let ok_path = |p: &str| !p.is_empty() && !p.contains(' ') || p.contains('/');
    match (a, b, c) {
        (Some(col), Some(line), Some(path)) if digits(col) && digits(line) => ok_path(path),
        (Some(line), Some(path), _) if digits(line) => ok_path(path) && !path.ends_with(':'),
        _ => false,
    }
}

/// The `path:line:col` of a JavaScript stack frame (`at fn (path:1:2)`, `at path:1:2`, or
/// the same without `at`), unless it points into node's internals or `node_modules`.
pub(crate) fn frame_location(line: &str) -> Option<String> {
    let t = line.trim();
    let rest = t.strip_prefix("at ").unwrap_or(t);
    let candidate = match (rest.rfind('('), rest.ends_with(')')) {
        (Some(open), true) => rest.get(open + 1..rest.len() - 1)?,
        _ => rest.rsplit(' ').next()?,
    };
    let candidate = candidate.strip_prefix("file://").unwrap_or(candidate);
    let internal = candidate.starts_with("node:")
        || candidate.starts_with("internal/")
        || candidate.contains("node_modules");
    (is_location(candidate) && !internal).then(|| candidate.to_owned())
}

/// Cuts a trailing duration such as ` (3 ms)`, ` (1.2ms)`, ` 5ms` or ` (5.1 s)`.
pub(crate) fn strip_duration(text: &str) -> &str {
    let t = text.trim_end();
    let is_duration = |d: &str| {
        let d = d.trim();
        let num = d
            .strip_suffix("ms")
            .or_else(|| d.strip_suffix('s'))
            .map(str::trim_end);
        num.is_some_and(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_digit() || b == b'.' || b == b',')
        })
    };
    if let Some(inner) = t.strip_suffix(')')
        && let Some(open) = inner.rfind(" (")
        && inner.get(open + 2..).is_some_and(is_duration)
    {
        return inner[..open].trim_end();
    }
    if let Some(space) = t.rfind(' ')
        && is_duration(&t[space + 1..])
    {
        return t[..space].trim_end();
    }
    t
}

/// Leading spaces of a line.
pub(crate) fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Parses `N word` items separated by `sep` (`7 failed, 1 skipped, 20 total`), calling
/// `f(word, n)` for each.
pub(crate) fn count_items(text: &str, sep: char, mut f: impl FnMut(&str, u64)) {
    for item in text.split(sep) {
        let mut words = item.split_whitespace();
        if let (Some(n), Some(word)) = (words.next(), words.next())
            && let Ok(n) = n.parse::<u64>()
        {
            f(word.trim_end_matches(|c: char| !c.is_alphanumeric()), n);
        }
    }
}

/// A failure's text being read: its message lines and best location.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) lines: Vec<String>,
    pub(crate) location: Option<String>,
    /// No more message lines: the stack or code frame has started.
    pub(crate) message_done: bool,
    blank: bool,
}

impl Collected {
    /// Adds a message line (blank runs collapsed; at most [`MAX_MESSAGE_LINES`]).
    pub(crate) fn text(&mut self, line: &str) {
        if self.message_done {
            return;
        }
        let t = line.trim_end();
        if t.trim().is_empty() {
            self.blank = !self.lines.is_empty();
            return;
        }
        if self.lines.len() >= MAX_MESSAGE_LINES {
            return;
        }
        if self.blank {
            self.lines.push(String::new());
            self.blank = false;
        }
        self.lines.push(crate::text::clip(t, 500));
    }

    pub(crate) fn message(&self) -> String {
        let base = self
            .lines
            .iter()
            .filter(|l| !l.is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        self.lines
            .iter()
            .map(|l| l.get(base..).unwrap_or(l.trim_start()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Debug, Default)]
struct Block {
    id: String,
    suite_error: bool,
    text: Collected,
    /// The code frame's `> 12 |` line number.
    frame_line: Option<String>,
    file: Option<String>,
}

#[derive(Debug, Default)]
pub struct JestParser {
    report: TestReport,
    score: u32,
    hints: u32,
    file: Option<String>,
    block: Option<Block>,
    /// The block being skipped (`● Console`, or a repeat in the final summary).
    skipping: bool,
    seen: HashSet<(String, String)>,
    summary: bool,
    test_failures: u64,
    suite_errors: u64,
    verbose_passed: u64,
    verbose_failed: u64,
    verbose_skipped: u64,
}

/// The file of a `PASS`/`FAIL` header (`FAIL test/a.test.js (5.2 s)`, `FAIL  project  a.js`).
fn header_file(rest: &str) -> Option<String> {
    let rest = strip_duration(rest.trim());
    let file = match rest.rfind("  ") {
        Some(i) => rest[i..].trim(),
        None => rest,
    };
    (!file.is_empty()).then(|| file.to_owned())
}

impl JestParser {
    fn hint(&mut self, n: u32) {
        self.hints = (self.hints + n).min(MAX_HINT_SCORE);
    }

    fn close_block(&mut self) {
        self.skipping = false;
        let Some(block) = self.block.take() else {
            return;
        };
        let location =
            block
                .text
                .location
                .clone()
                .or_else(|| match (&block.file, &block.frame_line) {
                    (Some(f), Some(n)) => Some(format!("{f}:{n}")),
                    _ => None,
                });
        let message = block.text.message();
        if block.suite_error {
            self.suite_errors += 1;
        } else {
            self.test_failures += 1;
        }
        self.report
            .push_failure(&block.id, &message, location.as_deref());
    }

    fn open_block(&mut self, title: &str) {
        self.close_block();
        self.hint(20);
        if title == "Console" {
            self.skipping = true;
            return;
        }
        let suite_error = title == "Test suite failed to run";
        let id = if suite_error {
            self.file.clone().unwrap_or_else(|| title.to_owned())
        } else {
            title.to_owned()
        };
        let key = (self.file.clone().unwrap_or_default(), id.clone());
        if self.seen.contains(&key) {
            // The final "Summary of all failing tests" repeats blocks already read.
            self.skipping = true;
            return;
        }
        if self.seen.len() < 2 * MAX_FAILURES {
            self.seen.insert(key);
        }
        self.block = Some(Block {
            id,
            suite_error,
            file: self.file.clone(),
            ..Block::default()
        });
    }

    fn summary_line(&mut self, t: &str) -> bool {
        // jest's own words when it finds no test file: a run of nothing, not unknown
        // output.
        if t.starts_with("No tests found, exiting with code ")
            || t.starts_with("Run with `--passWithNoTests`")
        {
            self.score = CONFIDENT;
            return true;
        }
        if let Some(rest) = t.strip_prefix("Test Suites:") {
            if rest.contains("total") {
                self.score = CONFIDENT;
            }
            return true;
        }
        if let Some(rest) = t.strip_prefix("Tests:") {
            if !rest.contains("total") {
                return false;
            }
            self.score = self.score.max(CONFIDENT / 2);
            self.summary = true;
            let (mut passed, mut failed, mut skipped) = (0, 0, 0);
            count_items(rest, ',', |word, n| match word {
                "passed" => passed += n,
                "failed" => failed += n,
                "skipped" | "todo" | "pending" => skipped += n,
                _ => {}
            });
            self.report.passed = passed;
            self.report.failed = failed;
            self.report.skipped = skipped;
            return true;
        }
        t.starts_with("Snapshots:")
            || t.starts_with("Time:")
            || t == "Ran all test suites."
            || t.starts_with("Ran all test suites ")
            || t == "Summary of all failing tests"
    }

    fn verbose_line(&mut self, t: &str) -> bool {
        let mut chars = t.chars();
        let (Some(mark), Some(' ')) = (chars.next(), chars.next()) else {
            return false;
        };
        let rest = chars.as_str();
        match mark {
            '✓' | '√' => self.verbose_passed += 1,
            '✕' | '×' => self.verbose_failed += 1,
            '○' | '✎' if rest.starts_with("skipped ") || rest.starts_with("todo ") => {
                self.verbose_skipped += 1
            }
            _ => return false,
        }
        self.hint(3);
        true
    }
}

impl Parser for JestParser {
    fn line(&mut self, line: &str) {
        let t = line.trim();
        let ind = indent(line);
        if ind == 0 && !t.is_empty() {
            // Failure text is always indented: anything at the margin ends a block.
            self.close_block();
            if let Some(rest) = t.strip_prefix("PASS ").or_else(|| t.strip_prefix("FAIL ")) {
                self.file = header_file(rest);
                self.hint(20);
                return;
            }
            self.summary_line(t);
            return;
        }
        if let Some(title) = t.strip_prefix("● ") {
            self.open_block(title.trim());
            return;
        }
        if self.skipping {
            return;
        }
        let file = self.file.clone();
        let Some(block) = self.block.as_mut() else {
            self.verbose_line(t);
            return;
        };
        // Code frame: `> 14 |     expect(...)`, `  13 |   });`, `     |   ^`.
        let frame = t.strip_prefix('>').unwrap_or(t).trim_start();
        if let Some((num, _)) = frame.split_once('|')
            && (num.trim().is_empty() || num.trim().bytes().all(|b| b.is_ascii_digit()))
            && (t.starts_with('>') || !num.trim().is_empty() || t.starts_with('|'))
        {
            block.text.message_done = true;
            if t.starts_with('>') && block.frame_line.is_none() {
                block.frame_line = Some(num.trim().to_owned());
            }
            return;
        }
        if t.starts_with("at ") {
            block.text.message_done = true;
            if let Some(loc) = frame_location(t) {
                let in_file = file
                    .as_deref()
                    .is_some_and(|f| loc.contains(f.trim_start_matches("./")));
                let better = match &block.text.location {
                    None => true,
                    Some(old) => in_file && !file.as_deref().is_some_and(|f| old.contains(f)),
                };
                if better {
                    block.text.location = Some(loc);
                }
            }
            return;
        }
        block.text.text(line);
    }

    fn score(&self) -> u32 {
        self.score.max(self.hints)
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_block();
        if !self.summary {
            self.report.passed = self.verbose_passed;
            self.report.failed = self.test_failures.max(self.verbose_failed);
            self.report.skipped = self.verbose_skipped;
        }
        self.report.errors = self.suite_errors;
        TestReport {
            runner: Format::Jest.runner().to_owned(),
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{failure, fixture, run};
    use super::super::{CONFIDENT, Format, distill_str};

    #[test]
    fn jest_messages_and_locations() {
        let (r, score) = run(Format::Jest, &fixture("jest_default_mixed"));
        assert!(score >= CONFIDENT);
        let f = failure(&r, "subtotal › handles floating point cents");
        assert!(f.message.starts_with("expect(received).toBe(expected)"));
        assert!(f.message.contains("Received: 0.30000000000000004"));
        assert_eq!(f.location.as_deref(), Some("test/cart.test.js:14:53"));
        // The first frame is in node_modules: the test file's frame is the location.
        let f = failure(&r, "fetchPrice rejects unknown skus");
        assert_eq!(f.location.as_deref(), Some("test/cart.test.js:60:9"));
        assert!(!r.failures.iter().any(|f| f.id == "Console"));

        let (r, _) = run(Format::Jest, &fixture("jest_suite_failed_to_run_silent"));
        let f = failure(&r, "test/missing.test.js");
        assert!(f.message.starts_with("Cannot find module"));
        assert_eq!(f.location.as_deref(), Some("test/missing.test.js:1:26"));
        assert_eq!(r.errors, 2);
    }

    const VERBOSE: &str = "\
PASS src/a.test.js
  math
    ✓ adds (3 ms)
    ○ skipped subtracts
    ✎ todo divides
FAIL src/b.test.js (5.12 s)
  strings
    ✕ pads (2 ms)
    ✓ trims

  ● strings › pads

    expect(received).toBe(expected) // Object.is equality

    Expected: \"  a\"
    Received: \"a\"

      3 | test('pads', () => {
    > 4 |   expect(pad('a')).toBe('  a');
        |                    ^

      at Object.<anonymous> (src/b.test.js:4:20)

Summary of all failing tests
FAIL src/b.test.js (5.12 s)
  ● strings › pads

    expect(received).toBe(expected) // Object.is equality

      at Object.<anonymous> (src/b.test.js:4:20)


Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 1 todo, 2 passed, 5 total
Snapshots:   0 total
Time:        6.2 s
";

    #[test]
    fn jest_verbose_and_final_summary_repeat() {
        let r = distill_str(VERBOSE, None, None);
        assert_eq!(r.runner, "jest");
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 1, 2, 0));
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].id, "strings › pads");
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("src/b.test.js:4:20")
        );
        // Without the summary, the verbose lines give the counts.
        let cut = VERBOSE.split("Test Suites:").next().unwrap();
        let (r, _) = run(Format::Jest, cut);
        assert_eq!((r.passed, r.failed, r.skipped), (2, 1, 2));
    }

    #[test]
    fn jest_code_frame_location_without_stack() {
        let text = "FAIL test/x.test.js\n  ● t\n\n    boom\n\n    > 7 | x()\n\nTests:       1 failed, 1 total\n";
        let (r, _) = run(Format::Jest, text);
        assert_eq!(r.failures[0].location.as_deref(), Some("test/x.test.js:7"));
        assert_eq!(r.failures[0].message, "boom");
    }

    #[test]
    fn odd_input_never_panics_and_stays_bounded() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let pieces = [
            "● ",
            "✓ ",
            "✕ ",
            "✖ ",
            "✔ ",
            "﹣ ",
            "▶ ",
            "ℹ ",
            "FAIL ",
            " FAIL  a > b",
            "ok ",
            "not ok ",
            "---",
            "...",
            "  ",
            "#",
            "|",
            ">",
            "(",
            ")",
            ":",
            "1..",
            "⎯",
            "❯ ",
            "é",
            "\u{0}",
            "at ",
            "x.js:1:2",
            "\n",
            "# TODO",
            " > ",
            "[ ",
            "]",
            "ms",
            "Tests:",
            "Test Files ",
            "Tests ",
            "'1 subtest failed'",
            "\\#",
            "Bail out!",
        ];
        let mut text = String::new();
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            text.push_str(pieces[(seed % pieces.len() as u64) as usize]);
        }
        for format in [Format::Jest, Format::Vitest, Format::Node, Format::Tap] {
            let _ = run(format, &text);
            let _ = run(format, &text[..text.len() / 3]);
        }
        let mut many = String::new();
        for i in 0..5_000 {
            many.push_str(&format!(
                "FAIL t.js\n  ● t{i}\n\n    boom\n{}\n not ok {i} - t{i}\n ✖ t{i} (1ms)\n",
                "      x\n".repeat(50)
            ));
        }
        for format in [Format::Jest, Format::Vitest, Format::Node, Format::Tap] {
            let (r, _) = run(format, &many);
            assert!(r.failures.len() <= super::super::MAX_FAILURES);
            assert!(r.failures.iter().all(|f| f.message.len() < 20_000));
        }
    }
}
