//! Reads the human output of `python -m unittest` (and of runners built on it, such as
//! Django's `manage.py test`).
//!
//! Counts come from `Ran N tests in 0.012s` and the verdict line after it (`OK (skipped=1)`,
//! `FAILED (failures=2, errors=1)`); failing ids and messages from the
//! `FAIL: test_x (pkg.mod.Class.test_x)` blocks and the verbose `... FAIL` lines.
//!
//! Counting conventions (those of the other runners' reports): failures count in `failed`
//! (one per failed subtest, as unittest counts them), errors in `errors`, expected
//! failures in `skipped`, unexpected successes in `passed`. Passed tests are the `ok`
//! and `unexpected success` outcomes when the output shows each test (verbose lines or the
//! progress dots), else what `Ran N` leaves once the rest is taken away.
//!
//! Ids are the dotted path unittest accepts on its command line: `pkg.mod.Class.test_x`
//! (from `test_x (pkg.mod.Class.test_x)` since Python 3.11, `test_x (pkg.mod.Class)`
//! before); a class or module whose fixture failed (`setUpClass (pkg.mod.Class)`) is
//! named by its own path, a module that failed to import by its module name.

use std::collections::HashSet;

use super::{CONFIDENT, Format, MAX_FAILURES, MAX_MESSAGE, Parser, TestReport};
use crate::text::clip;

/// Exception message lines kept per failure.
const MAX_MESSAGE_LINES: usize = 12;
/// Characters kept of one buffered line.
const MAX_KEPT_LINE: usize = 300;
const MAX_BONUS: u32 = CONFIDENT - 1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    errors: u64,
}

/// One `FAIL:`/`ERROR:` block being read.
#[derive(Debug)]
struct Block {
    id: String,
    /// The test method's name, to pick its own traceback frame.
    method: String,
    import_error: bool,
    /// Past the `-----` line under the header.
    body: bool,
    message: Vec<String>,
    /// The last `File "x", line N` frame, and the last one in the test method itself.
    last_frame: Option<String>,
    test_frame: Option<String>,
}

#[derive(Debug, Default)]
pub struct UnittestParser {
    report: TestReport,
    confident: bool,
    bonus: u32,
    /// The previous line was a `=====` separator: a `FAIL:` header may follow.
    after_rule: bool,
    block: Option<Block>,
    /// Failing ids already reported, and verbose failing ids not (yet) given a block.
    reported: HashSet<String>,
    verbose_failing: Vec<String>,
    /// Per-test outcomes of the current run (verbose lines or dots).
    markers: Counts,
    markers_seen: bool,
    /// `Ran N tests` of the current run, waiting for its verdict line.
    ran: Option<u64>,
    totals: Counts,
    totals_seen: bool,
    /// A verbose line whose outcome comes later (the test printed something).
    pending: Option<String>,
    /// A bare test description line: its docstring and outcome come on the next line.
    described: Option<String>,
    /// `FAIL:`/`ERROR:` blocks read, and failing verbose lines: each names one failure
    /// unittest counts (a test with failed subtests has one per subtest).
    blocks: u64,
    verbose_outcomes: u64,
}

impl Parser for UnittestParser {
    fn line(&mut self, line: &str) {
        let line = line.trim_end();
        let after_rule = std::mem::take(&mut self.after_rule);
        if is_rule(line, '=') {
            self.close_block();
            self.after_rule = true;
            return;
        }
        if after_rule && let Some((kind, desc)) = block_header(line) {
            self.open_block(kind, desc);
            return;
        }
        if let Some(n) = parse_ran(line) {
            self.close_block();
            self.ran = Some(n);
            self.confident = true;
            return;
        }
        if self.ran.is_some()
            && let Some(counts) = parse_verdict(line)
        {
            self.end_run(counts);
            return;
        }
        if let Some(block) = self.block.as_mut() {
            if is_rule(line, '-') {
                if block.body {
                    // The rule before `Ran N tests`: the last block is over.
                    self.close_block();
                } else {
                    block.body = true;
                }
                return;
            }
            if block.body {
                block.line(line);
            }
            return;
        }
        self.test_line(line);
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
        let verbose = std::mem::take(&mut self.verbose_failing);
        for id in verbose {
            if self.reported.insert(id.clone()) {
                self.report.push_failure(&id, "", None);
            }
        }
        let counts = if self.totals_seen {
            let mut c = self.totals;
            // A run cut before its verdict line still showed its tests.
            if self.markers_seen {
                add(&mut c, self.markers);
            }
            c
        } else {
            self.markers
        };
        let mut report = self.report;
        report.runner = Format::Unittest.runner().to_owned();
        report.passed = counts.passed;
        report.failed = counts.failed;
        report.skipped = counts.skipped;
        report.errors = counts.errors;
        report.named_outcomes = self.blocks.max(self.verbose_outcomes);
        report
    }
}

fn add(total: &mut Counts, c: Counts) {
    total.passed += c.passed;
    total.failed += c.failed;
    total.skipped += c.skipped;
    total.errors += c.errors;
}

impl UnittestParser {
    fn add_bonus(&mut self, n: u32) {
        self.bonus = self.bonus.saturating_add(n).min(MAX_BONUS);
    }

    /// A verbose `test_x (pkg.mod.Class.test_x) ... ok` line, or a line of dots.
    fn test_line(&mut self, line: &str) {
        let described = self.described.take();
        if let Some((desc, outcome)) = line.trim_start().rsplit_once(" ... ") {
            // A test with a docstring shows it after its name, on a line of its own.
            if let Some(id) = test_id(desc).or(described) {
                self.pending = None;
                match outcome_of(outcome) {
                    Some(o) => self.outcome(&id, o),
                    None => self.pending = Some(id),
                }
                self.add_bonus(3);
            }
            return;
        }
        if let Some(id) = self.pending.take() {
            match outcome_of(line.trim()) {
                Some(o) => self.outcome(&id, o),
                None => self.pending = Some(id),
            }
            return;
        }
        if let Some(desc) = line.trim_start().strip_suffix(" ...")
            && let Some(id) = test_id(desc)
        {
            self.pending = Some(id);
            return;
        }
        if let Some(id) = test_id(line) {
            self.described = Some(id);
            return;
        }
        if is_dots(line) {
            for c in line.chars() {
                let m = &mut self.markers;
                match c {
                    '.' | 'u' => m.passed += 1,
                    'F' => m.failed += 1,
                    'E' => m.errors += 1,
                    's' | 'x' => m.skipped += 1,
                    _ => {}
                }
            }
            // Lines of dots are too common elsewhere to count towards the score.
            self.markers_seen = true;
        }
    }

    fn outcome(&mut self, id: &str, outcome: Outcome) {
        self.markers_seen = true;
        let m = &mut self.markers;
        match outcome {
            Outcome::Passed => {
                m.passed += 1;
                self.report.push_passing(id);
            }
            Outcome::Skipped => m.skipped += 1,
            Outcome::Failed => m.failed += 1,
            Outcome::Error => m.errors += 1,
            Outcome::Running => return,
        }
        if matches!(outcome, Outcome::Failed | Outcome::Error) {
            self.verbose_outcomes += 1;
        }
        if matches!(outcome, Outcome::Failed | Outcome::Error)
            && self.verbose_failing.len() < MAX_FAILURES
            && !self.verbose_failing.iter().any(|x| x == id)
        {
            self.verbose_failing.push(id.to_owned());
        }
    }

    fn open_block(&mut self, kind: &str, desc: &str) {
        self.close_block();
        self.add_bonus(50);
        if kind == "UNEXPECTED SUCCESS" {
            // Counted as passed; nothing to report.
            return;
        }
        let import_error = desc.contains("unittest.loader._FailedTest")
            || desc.contains("unittest.loader.ModuleImportFailure");
        let Some(id) = test_id(desc).or_else(|| {
            let d = desc.split(" (").next().unwrap_or(desc).trim();
            (!d.is_empty()).then(|| d.to_owned())
        }) else {
            return;
        };
        let method = desc.split(' ').next().unwrap_or_default().to_owned();
        self.block = Some(Block {
            id,
            method,
            import_error,
            body: false,
            message: Vec::new(),
            last_frame: None,
            test_frame: None,
        });
    }

    fn close_block(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        self.blocks += 1;
        let message = clip(&block.message.join("\n"), MAX_MESSAGE);
        let location = block.test_frame.or(block.last_frame);
        if block.import_error {
            self.report
                .push_problem(&format!("{}: {message}", block.id), location.as_deref());
        }
        if self.reported.insert(block.id.clone()) {
            self.report
                .push_failure(&block.id, &message, location.as_deref());
        }
    }

    /// The verdict line closes a run: its counts, with the passed tests taken from the
    /// per-test outcomes when the output showed them.
    fn end_run(&mut self, verdict: Verdict) {
        self.close_block();
        let ran = self.ran.take().unwrap_or(0);
        let mut c = Counts {
            passed: 0,
            failed: verdict.failures,
            skipped: verdict.skipped + verdict.expected_failures,
            errors: verdict.errors,
        };
        c.passed = if self.markers_seen {
            self.markers.passed
        } else {
            ran.saturating_sub(
                verdict.failures + verdict.errors + verdict.skipped + verdict.expected_failures,
            )
        };
        add(&mut self.totals, c);
        self.totals_seen = true;
        self.markers = Counts::default();
        self.markers_seen = false;
        self.confident = true;
    }
}

impl Block {
    fn line(&mut self, line: &str) {
        if line.starts_with("Traceback (most recent call last)") {
            self.message.clear();
            return;
        }
        if let Some(rest) = line.strip_prefix("  File \"")
            && let Some((path, rest)) = rest.split_once("\", line ")
        {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let func = rest.split_once(", in ").map(|(_, f)| f.trim());
            let loc = clip(&format!("{path}:{n}"), MAX_KEPT_LINE);
            if func == Some(self.method.as_str()) {
                self.test_frame = Some(loc.clone());
            }
            self.last_frame = Some(loc);
            self.message.clear();
            return;
        }
        if self.message.is_empty() && (line.starts_with(' ') || line.trim().is_empty()) {
            // Source lines and carets of a frame.
            return;
        }
        if line.starts_with("During handling of the above exception")
            || line.starts_with("The above exception was the direct cause")
        {
            return;
        }
        if !line.trim().is_empty() && self.message.len() < MAX_MESSAGE_LINES {
            self.message.push(clip(line, MAX_KEPT_LINE));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
    Error,
    Skipped,
    /// The test's subtests follow.
    Running,
}

fn outcome_of(text: &str) -> Option<Outcome> {
    let text = text.trim();
    match text {
        "ok" | "unexpected success" => Some(Outcome::Passed),
        "FAIL" => Some(Outcome::Failed),
        "ERROR" => Some(Outcome::Error),
        "expected failure" => Some(Outcome::Skipped),
        "" => Some(Outcome::Running),
        _ if text.starts_with("skipped") => Some(Outcome::Skipped),
        _ => None,
    }
}

/// A line of one repeated character, 40 or more long (unittest prints 70).
fn is_rule(line: &str, c: char) -> bool {
    line.len() >= 40 && line.chars().all(|x| x == c)
}

/// `FAIL: desc`, `ERROR: desc`, `UNEXPECTED SUCCESS: desc`.
fn block_header(line: &str) -> Option<(&'static str, &str)> {
    for kind in ["FAIL", "ERROR", "UNEXPECTED SUCCESS"] {
        if let Some(desc) = line.strip_prefix(kind).and_then(|r| r.strip_prefix(": ")) {
            return Some((kind, desc.trim()));
        }
    }
    None
}

/// `Ran 12 tests in 0.034s`.
fn parse_ran(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("Ran ")?;
    let (n, rest) = rest.split_once(' ')?;
    let n: u64 = n.parse().ok()?;
    let rest = rest
        .strip_prefix("tests in ")
        .or_else(|| rest.strip_prefix("test in "))?;
    let secs = rest.strip_suffix('s')?;
    (!secs.is_empty() && secs.chars().all(|c| c.is_ascii_digit() || c == '.')).then_some(n)
}

#[derive(Debug, Default, Clone, Copy)]
struct Verdict {
    failures: u64,
    errors: u64,
    skipped: u64,
    expected_failures: u64,
}

/// `OK`, `OK (skipped=1)`, `FAILED (failures=2, errors=1)`, `NO TESTS RAN`.
fn parse_verdict(line: &str) -> Option<Verdict> {
    let line = line.trim();
    if line == "OK" || line == "NO TESTS RAN" {
        return Some(Verdict::default());
    }
    let rest = line
        .strip_prefix("OK (")
        .or_else(|| line.strip_prefix("FAILED ("))?;
    let inner = rest.strip_suffix(')')?;
    let mut v = Verdict::default();
    for item in inner.split(", ") {
        let (key, n) = item.split_once('=')?;
        let n: u64 = n.trim().parse().ok()?;
        match key.trim() {
            "failures" => v.failures = n,
            "errors" => v.errors = n,
            "skipped" => v.skipped = n,
            "expected failures" => v.expected_failures = n,
            _ => {}
        }
    }
    Some(v)
}

/// The dotted id of a test description: `test_x (pkg.mod.Class.test_x)` (3.11+),
/// `test_x (pkg.mod.Class)` (before), with a subtest's ` (i=1)` or ` [msg]` after it.
fn test_id(desc: &str) -> Option<String> {
    let (name, rest) = desc.trim().split_once(" (")?;
    let (path, after) = rest.split_once(')')?;
    let after = after.trim();
    if !(after.is_empty() || after.starts_with('(') || after.starts_with('[')) {
        return None;
    }
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    };
    if !ident(name) || !ident(path) || (!path.contains('.') && !name.contains('.')) {
        return None;
    }
    if path.starts_with("unittest.loader.") {
        // A module that failed to import: `pkg.test_x (unittest.loader._FailedTest...)`.
        return Some(name.to_owned());
    }
    if matches!(
        name,
        "setUpClass" | "tearDownClass" | "setUpModule" | "tearDownModule"
    ) {
        return Some(path.to_owned());
    }
    if path.ends_with(&format!(".{name}")) {
        Some(path.to_owned())
    } else {
        Some(format!("{path}.{name}"))
    }
}

/// unittest's progress line: `..F.sE.x`, nothing else on it.
fn is_dots(line: &str) -> bool {
    !line.is_empty() && line.chars().all(|c| ".FEsxu".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::parser_for;
    use crate::distill::testing::{failure, other_runners_logs, run, sorted_ids};

    /// `python3.11 -m unittest -v` on a small package: a module that fails to import, a
    /// failing `setUpClass`, failures, an error, skip, expected failure, unexpected
    /// success, a failed subtest.
    const VERBOSE_311: &str = r##"pkg.test_broken (unittest.loader._FailedTest.pkg.test_broken) ... ERROR
setUpClass (pkg.test_calc.BrokenSetup) ... ERROR
test_add (pkg.test_calc.CalcTests.test_add) ... ok
test_error (pkg.test_calc.CalcTests.test_error) ... ERROR
test_fail (pkg.test_calc.CalcTests.test_fail) ... FAIL
test_multiline (pkg.test_calc.CalcTests.test_multiline) ... FAIL
test_skip (pkg.test_calc.CalcTests.test_skip) ... skipped 'not ready'
test_sub (pkg.test_calc.CalcTests.test_sub) ... 
  test_sub (pkg.test_calc.CalcTests.test_sub) (i=1) ... FAIL
test_xf (pkg.test_calc.CalcTests.test_xf) ... expected failure
test_xp (pkg.test_calc.CalcTests.test_xp) ... unexpected success

======================================================================
ERROR: pkg.test_broken (unittest.loader._FailedTest.pkg.test_broken)
----------------------------------------------------------------------
ImportError: Failed to import test module: pkg.test_broken
Traceback (most recent call last):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/unittest/loader.py", line 419, in _find_test_path
    module = self._get_module_from_name(name)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/unittest/loader.py", line 362, in _get_module_from_name
    __import__(name)
  File "/tmp/ut/pkg/test_broken.py", line 1, in <module>
    import nonexistent_module_xyz
ModuleNotFoundError: No module named 'nonexistent_module_xyz'


======================================================================
ERROR: setUpClass (pkg.test_calc.BrokenSetup)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 29, in setUpClass
    raise RuntimeError("no fixture")
RuntimeError: no fixture

======================================================================
ERROR: test_error (pkg.test_calc.CalcTests.test_error)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 10, in test_error
    helper("missing")
  File "/tmp/ut/pkg/test_calc.py", line 3, in helper
    raise KeyError(x)
KeyError: 'missing'

======================================================================
FAIL: test_fail (pkg.test_calc.CalcTests.test_fail)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 8, in test_fail
    self.assertEqual(2 * 2, 5, "math is broken")
AssertionError: 4 != 5 : math is broken

======================================================================
FAIL: test_multiline (pkg.test_calc.CalcTests.test_multiline)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 25, in test_multiline
    self.assertEqual("a\nb\nc", "a\nB\nc")
AssertionError: 'a\nb\nc' != 'a\nB\nc'
  a
- b
+ B
  c

======================================================================
FAIL: test_sub (pkg.test_calc.CalcTests.test_sub) (i=1)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 23, in test_sub
    self.assertNotEqual(i, 1)
AssertionError: 1 == 1

======================================================================
UNEXPECTED SUCCESS: test_xp (pkg.test_calc.CalcTests.test_xp)
----------------------------------------------------------------------
Ran 9 tests in 0.001s

FAILED (failures=3, errors=3, skipped=1, expected failures=1, unexpected successes=1)
"##;

    /// The same suite without `-v`.
    const DOTS_311: &str = r##"EE.EFFsFxu
======================================================================
ERROR: pkg.test_broken (unittest.loader._FailedTest.pkg.test_broken)
----------------------------------------------------------------------
ImportError: Failed to import test module: pkg.test_broken
Traceback (most recent call last):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/unittest/loader.py", line 419, in _find_test_path
    module = self._get_module_from_name(name)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/unittest/loader.py", line 362, in _get_module_from_name
    __import__(name)
  File "/tmp/ut/pkg/test_broken.py", line 1, in <module>
    import nonexistent_module_xyz
ModuleNotFoundError: No module named 'nonexistent_module_xyz'


======================================================================
ERROR: setUpClass (pkg.test_calc.BrokenSetup)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 29, in setUpClass
    raise RuntimeError("no fixture")
RuntimeError: no fixture

======================================================================
ERROR: test_error (pkg.test_calc.CalcTests.test_error)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 10, in test_error
    helper("missing")
  File "/tmp/ut/pkg/test_calc.py", line 3, in helper
    raise KeyError(x)
KeyError: 'missing'

======================================================================
FAIL: test_fail (pkg.test_calc.CalcTests.test_fail)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 8, in test_fail
    self.assertEqual(2 * 2, 5, "math is broken")
AssertionError: 4 != 5 : math is broken

======================================================================
FAIL: test_multiline (pkg.test_calc.CalcTests.test_multiline)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 25, in test_multiline
    self.assertEqual("a\nb\nc", "a\nB\nc")
AssertionError: 'a\nb\nc' != 'a\nB\nc'
  a
- b
+ B
  c

======================================================================
FAIL: test_sub (pkg.test_calc.CalcTests.test_sub) (i=1)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/pkg/test_calc.py", line 23, in test_sub
    self.assertNotEqual(i, 1)
AssertionError: 1 == 1

======================================================================
UNEXPECTED SUCCESS: test_xp (pkg.test_calc.CalcTests.test_xp)
----------------------------------------------------------------------
Ran 9 tests in 0.001s

FAILED (failures=3, errors=3, skipped=1, expected failures=1, unexpected successes=1)
"##;

    /// Python before 3.11 (`test_x (pkg.mod.Class)`), a docstring, a chained exception.
    const VERBOSE_310: &str = r##"test_add (pkg.test_calc.CalcTests) ... ok
test_error (pkg.test_calc.CalcTests) ... ERROR
test_fail (pkg.test_calc.CalcTests)
Doubles the value. ... FAIL
test_skip (pkg.test_calc.CalcTests) ... skipped 'not ready'

======================================================================
ERROR: test_error (pkg.test_calc.CalcTests)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/src/pkg/test_calc.py", line 10, in test_error
    helper("missing")
  File "/src/pkg/test_calc.py", line 3, in helper
    raise KeyError(x)
KeyError: 'missing'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/src/pkg/test_calc.py", line 12, in test_error
    raise ValueError("wrapped")
ValueError: wrapped

======================================================================
FAIL: test_fail (pkg.test_calc.CalcTests)
Doubles the value.
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/src/pkg/test_calc.py", line 8, in test_fail
    self.assertEqual(2 * 2, 5)
AssertionError: 4 != 5

----------------------------------------------------------------------
Ran 4 tests in 0.002s

FAILED (failures=1, errors=1, skipped=1)
"##;

    const FAILING_311: [&str; 6] = [
        "pkg.test_broken",
        "pkg.test_calc.BrokenSetup",
        "pkg.test_calc.CalcTests.test_error",
        "pkg.test_calc.CalcTests.test_fail",
        "pkg.test_calc.CalcTests.test_multiline",
        "pkg.test_calc.CalcTests.test_sub",
    ];

    #[test]
    fn verbose_311() {
        let (r, score) = run(Format::Unittest, VERBOSE_311);
        assert!(score >= CONFIDENT);
        assert_eq!(r.runner, "unittest");
        // ok + unexpected success; failures=3 (one a subtest); errors=3; skip + xfail.
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 3, 2, 3));
        assert_eq!(sorted_ids(&r), FAILING_311);
        let f = failure(&r, "pkg.test_calc.CalcTests.test_fail");
        assert_eq!(f.message, "AssertionError: 4 != 5 : math is broken");
        assert_eq!(f.location.as_deref(), Some("/tmp/ut/pkg/test_calc.py:8"));
        let f = failure(&r, "pkg.test_calc.CalcTests.test_error");
        assert_eq!(f.message, "KeyError: 'missing'");
        assert_eq!(f.location.as_deref(), Some("/tmp/ut/pkg/test_calc.py:10"));
        let f = failure(&r, "pkg.test_calc.CalcTests.test_multiline");
        assert_eq!(
            f.message,
            "AssertionError: 'a\\nb\\nc' != 'a\\nB\\nc'\n  a\n- b\n+ B\n  c"
        );
        let f = failure(&r, "pkg.test_broken");
        assert_eq!(
            f.message,
            "ModuleNotFoundError: No module named 'nonexistent_module_xyz'"
        );
        assert_eq!(f.location.as_deref(), Some("/tmp/ut/pkg/test_broken.py:1"));
        assert_eq!(r.build_errors.len(), 1);
    }

    #[test]
    fn dots_311() {
        let (r, score) = run(Format::Unittest, DOTS_311);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 3, 2, 3));
        assert_eq!(sorted_ids(&r), FAILING_311);
    }

    #[test]
    fn verbose_before_311() {
        let (r, score) = run(Format::Unittest, VERBOSE_310);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 1, 1));
        assert_eq!(
            sorted_ids(&r),
            [
                "pkg.test_calc.CalcTests.test_error",
                "pkg.test_calc.CalcTests.test_fail"
            ]
        );
        let f = failure(&r, "pkg.test_calc.CalcTests.test_error");
        assert_eq!(f.message, "ValueError: wrapped");
        assert_eq!(f.location.as_deref(), Some("/src/pkg/test_calc.py:12"));
    }

    #[test]
    fn all_passing_and_cut_runs() {
        let (r, score) = run(
            Format::Unittest,
            ".sx\n----------------------------------------------------------------------\nRan 3 tests in 0.000s\n\nOK (skipped=1, expected failures=1)\n",
        );
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 0, 2, 0));
        // Without per-test markers, `Ran N` minus the rest.
        let (r, _) = run(
            Format::Unittest,
            "Ran 5 tests in 0.010s\n\nFAILED (failures=1, skipped=1)\n",
        );
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (3, 1, 1, 0));
        // A log cut before the end still shows its verbose lines.
        let cut: String = VERBOSE_311
            .lines()
            .take(11)
            .map(|l| format!("{l}\n"))
            .collect();
        let (r, score) = run(Format::Unittest, &cut);
        assert!(score > 0 && score < CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 3, 2, 3));
    }

    #[test]
    fn test_ids() {
        let id = |s: &str| test_id(s);
        assert_eq!(id("test_x (a.b.C.test_x)").as_deref(), Some("a.b.C.test_x"));
        assert_eq!(id("test_x (a.b.C)").as_deref(), Some("a.b.C.test_x"));
        assert_eq!(
            id("test_x (a.b.C.test_x) (i=1)").as_deref(),
            Some("a.b.C.test_x")
        );
        assert_eq!(
            id("test_x (a.b.C) [msg] (i=1)").as_deref(),
            Some("a.b.C.test_x")
        );
        assert_eq!(id("setUpModule (a.b)").as_deref(), Some("a.b"));
        assert_eq!(
            id("a.b (unittest.loader._FailedTest)").as_deref(),
            Some("a.b")
        );
        assert_eq!(id("src/lib.rs - item (line 5)"), None);
        assert_eq!(id("it works (fast)"), None);
    }

    #[test]
    fn other_logs_are_not_taken_for_unittest() {
        // Pytest's logs may look a little like unittest's; none other does at all.
        for (name, text) in other_runners_logs(Format::Unittest) {
            let (_, score) = run(Format::Unittest, &text);
            if !name.starts_with("pytest_") {
                assert_eq!(score, 0, "{name}");
            }
        }
        // And unittest output is not taken for pytest.
        for text in [VERBOSE_311, DOTS_311, VERBOSE_310] {
            let (_, score) = run(Format::Pytest, text);
            assert_eq!(score, 0);
            assert_eq!(
                crate::distill::distill_str(text, None, None).runner,
                "unittest"
            );
        }
    }

    #[test]
    fn odd_input_never_panics_and_stays_bounded() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut text = String::new();
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let pieces = [
                "=",
                "-",
                " ",
                "FAIL: ",
                "ERROR: ",
                " (",
                ")",
                " ... ",
                "ok",
                "\n",
                "Ran ",
                "3 tests in 0.1s",
                "FAILED (",
                "failures=",
                "=",
                "  File \"",
                "\", line ",
                "é",
            ];
            text.push_str(pieces[(seed % pieces.len() as u64) as usize]);
        }
        let _ = run(Format::Unittest, &text);
        let bytes: Vec<u8> = (0..50_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
            .collect();
        let _ = run(Format::Unittest, &String::from_utf8_lossy(&bytes));

        let rule = "=".repeat(70);
        let dash = "-".repeat(70);
        let mut p = parser_for(Format::Unittest);
        for i in 0..5_000 {
            p.line(&rule);
            p.line(&format!("FAIL: test_{i} (m.C.test_{i})"));
            p.line(&dash);
            p.line("Traceback (most recent call last):");
            for _ in 0..100 {
                p.line("AssertionError: a long line of message that goes on");
            }
        }
        let r = p.finish();
        assert_eq!(r.failures.len(), MAX_FAILURES);
        assert!(
            r.failures
                .iter()
                .all(|f| f.message.len() <= MAX_MESSAGE * 4)
        );
    }
}
