//! Reads the human output of `vitest` (default, verbose and dot reporters, 1.x–3.x).
//!
//! Counts come from the `Tests  7 failed | 7 passed | 1 skipped | 1 todo (16)` summary;
//! failure ids from the `FAIL  file > describe > test` lines of the failed-tests section
//! (or, when that section is missing, from the `× describe > test` lines). Files that fail
//! to load (`FAIL  file [ file ]` under "Failed Suites") are errors whose id is the file.

use super::jest::{Collected, MAX_HINT_SCORE, count_items, is_location, strip_duration};
use super::{CONFIDENT, Format, MAX_FAILURES, Parser, TestReport};

#[derive(Debug, Default)]
struct Block {
    /// (id, is a file or suite error); several `FAIL` lines can share one error.
    ids: Vec<(String, bool)>,
    text: Collected,
}

#[derive(Debug, Default)]
pub struct VitestParser {
    report: TestReport,
    score: u32,
    hints: u32,
    block: Option<Block>,
    /// Inside the "Failed Suites" / "Failed Tests" / "Unhandled Errors" sections.
    in_failures: bool,
    summary: bool,
    errors_line: Option<u64>,
    failed_ids: u64,
    suite_errors: u64,
    /// `×` lines, used only when the failed-tests section is missing.
    crossed: Vec<String>,
    line_passed: u64,
    line_failed: u64,
    line_skipped: u64,
}

/// Splits the text after `FAIL` into (id, is a file/suite error).
fn fail_target(rest: &str) -> Option<(String, bool)> {
    let mut rest = rest.trim();
    // `|project| file > test` and `[browser] file > test` name the project first.
    for (open, close) in [('|', '|'), ('[', ']')] {
        if let Some(after) = rest.strip_prefix(open)
            && let Some(end) = after.find(close)
            && after[end + 1..].starts_with(' ')
        {
            rest = after[end + 1..].trim_start();
        }
    }
    if rest.is_empty() {
        return None;
    }
    if let Some(open) = rest.find(" [ ")
        && rest.ends_with(']')
        && !rest[..open].contains(" > ")
    {
        return Some((rest[..open].to_owned(), true));
    }
    match rest.split_once(" > ") {
        Some((_file, name)) => Some((name.trim().to_owned(), false)),
        None => Some((rest.to_owned(), true)),
    }
}

impl VitestParser {
    fn hint(&mut self, n: u32) {
        self.hints = (self.hints + n).min(MAX_HINT_SCORE);
    }

    fn close_block(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let message = block.text.message();
        for (id, error) in &block.ids {
            if *error {
                self.suite_errors += 1;
            } else {
                self.failed_ids += 1;
            }
            self.report
                .push_failure(id, &message, block.text.location.as_deref());
        }
    }

    fn summary_line(&mut self, t: &str) -> bool {
        if let Some(rest) = t.strip_prefix("Test Files ") {
            if rest.trim_end().ends_with(')') {
                self.score = CONFIDENT;
            }
            return true;
        }
        if let Some(rest) = t.strip_prefix("Tests ")
            && rest.trim_end().ends_with(')')
            && rest.trim_start().starts_with(|c: char| c.is_ascii_digit())
        {
            let body = rest.rsplit_once('(').map_or(rest, |(b, _)| b);
            let (mut passed, mut failed, mut skipped) = (0, 0, 0);
            count_items(body, '|', |word, n| match word {
                "passed" => passed += n,
                "failed" => failed += n,
                "skipped" | "todo" => skipped += n,
                _ => {}
            });
            self.report.passed = passed;
            self.report.failed = failed;
            self.report.skipped = skipped;
            self.summary = true;
            self.score = self.score.max(CONFIDENT / 2);
            return true;
        }
        if let Some(rest) = t.strip_prefix("Errors ")
            && rest.contains("error")
        {
            let mut n = 0;
            count_items(rest, '|', |word, k| {
                if word.starts_with("error") {
                    n += k;
                }
            });
            self.errors_line = Some(n);
            return true;
        }
        false
    }

    fn test_line(&mut self, t: &str) {
        let mut chars = t.chars();
        let (Some(mark), Some(' ')) = (chars.next(), chars.next()) else {
            return;
        };
        let rest = chars.as_str().trim();
        // File lines: `✓ test/a.test.js (3 tests) 5ms`, `❯ test/a.test.js (3 tests | 1 failed)`.
        let is_file = rest.contains(" test)") || rest.contains(" tests") && rest.contains('(');
        if is_file && rest.contains('(') {
            if mark == '✓' || mark == '❯' || mark == '×' {
                self.hint(5);
            }
            return;
        }
        match mark {
            '✓' | '√' => self.line_passed += 1,
            '×' | '✗' => {
                self.line_failed += 1;
                if self.crossed.len() < MAX_FAILURES {
                    let name = strip_duration(rest);
                    let name = match name.split_once(" > ") {
                        // The verbose reporter names the file first.
                        Some((file, test))
                            if file.contains('/')
                                || file.contains(".test.")
                                || file.contains(".spec.") =>
                        {
                            test
                        }
                        _ => name,
                    };
                    self.crossed.push(name.to_owned());
                }
            }
            '↓' => self.line_skipped += 1,
            _ => return,
        }
        self.hint(2);
    }
}

impl Parser for VitestParser {
    fn line(&mut self, line: &str) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("RUN ")
            && rest.trim_start().starts_with('v')
            && rest.trim_start()[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            self.score = CONFIDENT;
            return;
        }
        if t.starts_with('⎯') {
            self.close_block();
            if t.contains("Failed Tests") || t.contains("Failed Suites") || t.contains("Unhandled")
            {
                self.in_failures = true;
                self.hint(100);
            }
            return;
        }
        if let Some(rest) = t.strip_prefix("FAIL ")
            && line.starts_with(" FAIL ")
            && let Some(target) = fail_target(rest)
        {
            self.hint(20);
            match self.block.as_mut() {
                Some(block) if block.text.lines.is_empty() && block.ids.len() < 100 => {
                    block.ids.push(target)
                }
                _ => {
                    self.close_block();
                    self.block = Some(Block {
                        ids: vec![target],
                        ..Block::default()
                    });
                }
            }
            return;
        }
        if self.summary_line(t) {
            self.close_block();
            self.in_failures = false;
            return;
        }
        let Some(block) = self.block.as_mut() else {
            if !self.in_failures {
                self.test_line(t);
            }
            return;
        };
        if let Some(frame) = t.strip_prefix('❯').or_else(|| t.strip_prefix("at ")) {
            block.text.message_done = true;
            let candidate = frame.trim().rsplit(' ').next().unwrap_or("");
            let candidate = candidate.trim_start_matches('(').trim_end_matches(')');
            if block.text.location.is_none()
                && is_location(candidate)
                && !candidate.contains("node_modules")
                && !candidate.starts_with("node:")
            {
                block.text.location = Some(candidate.to_owned());
            }
            return;
        }
        // Code frame: `  15|     expect(...)`, `    |   ^`.
        if let Some((num, _)) = t.split_once('|')
            && num.bytes().all(|b| b.is_ascii_digit())
            && block.text.message_done
        {
            return;
        }
        block.text.text(line);
    }

    fn score(&self) -> u32 {
        self.score.max(self.hints)
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_block();
        if self.report.failures.is_empty() && self.failed_ids == 0 {
            for id in std::mem::take(&mut self.crossed) {
                self.report.push_failure(&id, "", None);
            }
        }
        if !self.summary {
            self.report.passed = self.line_passed;
            self.report.failed = self.failed_ids.max(self.line_failed);
            self.report.skipped = self.line_skipped;
        }
        self.report.errors = self.suite_errors + self.errors_line.unwrap_or(0);
        TestReport {
            runner: Format::Vitest.runner().to_owned(),
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{failure, fixture, run};
    use super::super::{CONFIDENT, Format, distill_str};

    #[test]
    fn vitest_messages_and_locations() {
        let (r, score) = run(Format::Vitest, &fixture("vitest_default_mixed"));
        assert!(score >= CONFIDENT);
        let f = failure(&r, "subtotal > handles floating point cents");
        assert!(
            f.message
                .starts_with("AssertionError: expected 0.30000000000000004")
        );
        assert_eq!(f.location.as_deref(), Some("test/cart.test.js:15:53"));
    }

    const LOAD_ERROR: &str = "
 RUN  v1.6.0 /work/app

 ❯ test/broken.test.ts (0 test)
 ✓ test/ok.test.ts (2 tests) 3ms
 · test/dots.test.ts (3 tests | 1 skipped)

⎯⎯⎯⎯⎯⎯ Failed Suites 1 ⎯⎯⎯⎯⎯⎯⎯

 FAIL  test/broken.test.ts [ test/broken.test.ts ]
Error: Failed to load url ./missing (resolved id: ./missing) in /work/app/test/broken.test.ts. Does the file exist?
 ❯ loadAndTransform node_modules/vite/dist/node/chunks/dep.js:5:3
 ❯ test/broken.test.ts:2:1

⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯[1/1]⎯

 Test Files  1 failed | 2 passed (3)
      Tests  4 passed | 1 skipped (5)
   Start at  10:00:00
   Duration  300ms
";

    #[test]
    fn vitest_file_that_fails_to_load_is_an_error() {
        let r = distill_str(LOAD_ERROR, None, None);
        assert_eq!(r.runner, "vitest");
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (4, 0, 1, 1));
        assert_eq!(r.failures[0].id, "test/broken.test.ts");
        assert!(
            r.failures[0]
                .message
                .starts_with("Error: Failed to load url")
        );
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("test/broken.test.ts:2:1")
        );
    }

    #[test]
    fn vitest_verbose_without_failure_section() {
        let text = " ✓ test/a.test.ts > math > adds 1ms\n × test/a.test.ts > math > subtracts 2ms\n ↓ test/a.test.ts > math > later\n";
        let (r, _) = run(Format::Vitest, text);
        assert_eq!((r.passed, r.failed, r.skipped), (1, 1, 1));
        assert_eq!(r.failures[0].id, "math > subtracts");
    }

    #[test]
    fn vitest_projects_and_shared_errors() {
        let text = " FAIL  |unit| test/a.test.ts > a > b\n FAIL  |unit| test/c.test.ts > c\nAssertionError: nope\n ❯ test/a.test.ts:3:4\n";
        let (r, _) = run(Format::Vitest, text);
        let ids: Vec<_> = r.failures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["a > b", "c"]);
        assert_eq!(r.failures[1].message, "AssertionError: nope");
    }
}
