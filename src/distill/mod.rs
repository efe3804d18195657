//! Distillation: turns raw test-runner output and command output into compact, faithful
//! reports, so that strong models and maintainers read an account of what happened rather
//! than terminal exhaust. Deterministic and streaming: input is read line by line in
//! bounded memory, whatever its size.
//!
//! Each runner has a [`Parser`] fed every line of the output; the one that recognises the
//! output best produces the [`TestReport`]. Output no parser recognises is summarised by
//! the generic compressor alone.

pub mod cargo;
pub mod generic;
pub mod gotest;
pub mod jest;
pub mod junit;
pub mod lines;
pub mod maven;
pub mod nextest;
pub mod node;
pub mod pytest;
pub mod render;
mod rust_output;
#[cfg(test)]
mod summary_forms;
pub mod tap;
pub mod unittest;
pub mod vitest;

use std::io::{BufRead, Read};

use crate::text::clip;
use serde::{Deserialize, Serialize};

/// Lines longer than this are cut (the rest counts as dropped).
pub const MAX_LINE: usize = 64 * 1024;
/// Failures kept per report; the counts go on past it.
pub const MAX_FAILURES: usize = 2_000;
/// Passing tests named per report.
pub const MAX_PASSING: usize = 100_000;
/// Characters kept of one failure's message.
pub const MAX_MESSAGE: usize = 2_000;
/// A parser's score once it has seen its runner's unmistakable summary or banner.
pub const CONFIDENT: u32 = 1_000;

/// The test runners (and file formats) planwright reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Cargo,
    Nextest,
    Pytest,
    Unittest,
    Jest,
    Vitest,
    Node,
    Go,
    Maven,
    Junit,
    Tap,
    Generic,
}

impl Format {
    /// Detection order: a runner whose output wraps another's comes before it (nextest
    /// prints libtest output; pytest runs unittest tests).
    pub const DETECTION_ORDER: [Format; 10] = [
        Format::Nextest,
        Format::Cargo,
        Format::Pytest,
        Format::Unittest,
        Format::Vitest,
        Format::Jest,
        Format::Node,
        Format::Go,
        Format::Maven,
        Format::Tap,
    ];

    /// The runner's name as reports give it.
    pub fn runner(self) -> &'static str {
        match self {
            Format::Cargo => "cargo test",
            Format::Nextest => "cargo nextest",
            Format::Pytest => "pytest",
            Format::Unittest => "unittest",
            Format::Jest => "jest",
            Format::Vitest => "vitest",
            Format::Node => "node --test",
            Format::Go => "go test",
            Format::Maven => "maven surefire",
            Format::Junit => "junit xml",
            Format::Tap => "tap",
            Format::Generic => "generic",
        }
    }

    /// The format a command line most likely prints, if it says.
    pub fn from_command(command: &str) -> Option<Format> {
        let c = command.to_ascii_lowercase();
        let words: Vec<&str> = c.split_whitespace().collect();
        let has = |w: &str| {
            words
                .iter()
                .any(|x| *x == w || x.ends_with(&format!("/{w}")))
        };
        let pair = |a: &str, b: &str| words.windows(2).any(|p| p[0].ends_with(a) && p[1] == b);
        if has("nextest") {
            Some(Format::Nextest)
        } else if pair("cargo", "test") || pair("cargo", "t") {
            Some(Format::Cargo)
        } else if has("pytest") || has("py.test") || pair("-m", "pytest") {
            Some(Format::Pytest)
        } else if pair("-m", "unittest") || pair("manage.py", "test") {
            Some(Format::Unittest)
        } else if has("vitest") {
            Some(Format::Vitest)
        } else if has("jest") {
            Some(Format::Jest)
        } else if words.first().is_some_and(|w| w.ends_with("node")) && has("--test") {
            Some(Format::Node)
        } else if pair("go", "test") {
            Some(Format::Go)
        } else if has("mvn") || has("mvnw") || has("./mvnw") {
            Some(Format::Maven)
        } else if has("prove") {
            Some(Format::Tap)
        } else {
            None
        }
    }
}

/// One failing test (or a test file, module or package that errored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The test's identifier exactly as the runner prints it.
    pub id: String,
    /// The assertion or panic message (first lines), empty when the output has none.
    pub message: String,
    /// The most relevant `file:line`, when the output names one.
    pub location: Option<String>,
}

/// A build or collection error that kept tests from running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub message: String,
    pub location: Option<String>,
}

/// What a test run did, as read from its output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestReport {
    pub runner: String,
    pub passed: u64,
    pub failed: u64,
    /// Skipped, ignored, disabled, xfail and todo tests.
    pub skipped: u64,
    /// Errors outside test bodies: build failures, collection or setup errors, files that
    /// failed to load, packages that failed to build.
    pub errors: u64,
    pub failures: Vec<Failure>,
    /// Build or collection errors, with their messages.
    #[serde(default)]
    pub build_errors: Vec<Problem>,
    /// The output does not state every count (node's dot reporter, plain `go test`):
    /// `passed` and `skipped` come from per-test marks, which may also stand for suites
    /// or skipped tests. `failed`, `errors` and the failures are still exact.
    #[serde(default)]
    pub estimated_counts: bool,
    /// Failures and errors the counts hold that the report does not name: the runner's
    /// summary counted them, but the output did not say which tests they were (a test
    /// closed the runner's output, the log was cut) or there were more than
    /// [`MAX_FAILURES`]. A run with any is incomplete: a test it does not list may still
    /// have failed. Always 0 when the counts are estimated.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unnamed: u64,
    /// How many failing outcomes the output named, for runners that count a test more
    /// than once (failed subtests, a failure and a teardown error of one test); 0 when
    /// each listed failure stands for one. Read by [`TestReport::count_unnamed`].
    #[serde(skip)]
    pub named_outcomes: u64,
    /// Bytes of input not kept anywhere in the report or its excerpt.
    pub dropped_bytes: u64,
    /// Bytes of input read.
    #[serde(default)]
    pub input_bytes: u64,
    /// The generic compressor's account of the raw output, for humans (not in JSON).
    #[serde(skip)]
    pub excerpt: String,
    /// Tests the output names passing, where the runner lists them (TAP, `cargo test`,
    /// `go test -v`, JUnit XML, `unittest -v`, `pytest -v`/`-rA`), at most
    /// [`MAX_PASSING`]; not in JSON.
    #[serde(skip)]
    pub passing: Vec<String>,
}

impl TestReport {
    pub fn new(format: Format) -> Self {
        TestReport {
            runner: format.runner().to_owned(),
            ..TestReport::default()
        }
    }

    /// Adds a failure, keeping at most [`MAX_FAILURES`] and [`MAX_MESSAGE`] characters of
    /// its message. Returns false when the failure was not kept.
    pub fn push_failure(&mut self, id: &str, message: &str, location: Option<&str>) -> bool {
        if self.failures.len() >= MAX_FAILURES {
            return false;
        }
        self.failures.push(Failure {
            id: id.to_owned(),
            message: clip(message.trim(), MAX_MESSAGE),
            location: location.map(str::to_owned),
        });
        true
    }

    /// Notes a test the output names passing, keeping at most [`MAX_PASSING`].
    pub fn push_passing(&mut self, id: &str) {
        if self.passing.len() < MAX_PASSING {
            self.passing.push(id.to_owned());
        }
    }

    pub fn push_problem(&mut self, message: &str, location: Option<&str>) {
        if self.build_errors.len() < MAX_FAILURES {
            self.build_errors.push(Problem {
                message: clip(message.trim(), MAX_MESSAGE),
                location: location.map(str::to_owned),
            });
        }
    }

    /// True when every test that ran passed and nothing errored.
    pub fn succeeded(&self) -> bool {
        self.failed == 0 && self.errors == 0
    }

    /// How many of the failures and errors the counts hold the report does not name.
    /// Each listed failure (or each named outcome, where the runner counts a test more
    /// than once) accounts for one; build and collection errors described in
    /// `build_errors` account for the errors. Estimated counts come from the named
    /// outcomes themselves, so nothing there is unnamed.
    pub fn count_unnamed(&self) -> u64 {
        if self.estimated_counts {
            return 0;
        }
        let listed = (self.failures.len() as u64).max(self.named_outcomes);
        let described = if self.build_errors.is_empty() {
            0
        } else {
            self.errors
        };
        (self.failed + self.errors).saturating_sub(listed + described)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A runner's output reader: fed every line, then asked how sure it is and what it saw.
///
/// Lines come without their line ending, with ANSI escapes removed and at most
/// [`MAX_LINE`] bytes long. A parser keeps bounded state whatever the input (use
/// [`TestReport::push_failure`], cap any buffered lines).
pub trait Parser: Send {
    fn line(&mut self, line: &str);

    /// 0: nothing of this runner's output seen. Per-test lines recognised add a little
    /// (at most `CONFIDENT - 1` in all); the runner's own summary or banner lines give
    /// at least [`CONFIDENT`].
    fn score(&self) -> u32;

    fn finish(self: Box<Self>) -> TestReport;
}

/// A fresh parser for `format` (`Junit` and `Generic` have line parsers too, for
/// completeness: JUnit XML is normally read by [`junit::parse_xml`]).
pub fn parser_for(format: Format) -> Box<dyn Parser> {
    match format {
        Format::Cargo => Box::new(cargo::CargoParser::default()),
        Format::Nextest => Box::new(nextest::NextestParser::default()),
        Format::Pytest => Box::new(pytest::PytestParser::default()),
        Format::Unittest => Box::new(unittest::UnittestParser::default()),
        Format::Jest => Box::new(jest::JestParser::default()),
        Format::Vitest => Box::new(vitest::VitestParser::default()),
        Format::Node => Box::new(node::NodeParser::default()),
        Format::Go => Box::new(gotest::GoParser::default()),
        Format::Maven => Box::new(maven::MavenParser::default()),
        Format::Tap => Box::new(tap::TapParser::default()),
        Format::Junit | Format::Generic => Box::new(NoParser),
    }
}

/// Recognises nothing: the generic compressor does all the work.
struct NoParser;

impl Parser for NoParser {
    fn line(&mut self, _line: &str) {}
    fn score(&self) -> u32 {
        0
    }
    fn finish(self: Box<Self>) -> TestReport {
        TestReport::new(Format::Generic)
    }
}

/// Reads a whole run's output and distils it. `format` forces a parser; otherwise the
/// command (when known) and then the output decide. Never fails on odd input: unknown
/// output gets the generic summary.
pub fn distill(
    input: impl Read,
    format: Option<Format>,
    command: Option<&str>,
) -> std::io::Result<TestReport> {
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, input);
    let looks_like_xml = {
        let head = reader.fill_buf()?;
        let text = String::from_utf8_lossy(&head[..head.len().min(512)]);
        let t = text.trim_start_matches('\u{feff}').trim_start();
        t.starts_with("<?xml") || t.starts_with("<testsuite")
    };
    if format == Some(Format::Junit) || (format.is_none() && looks_like_xml) {
        let mut counting = Counting {
            inner: reader,
            consumed: 0,
        };
        let mut report = junit::parse_xml(&mut counting)?;
        // Drain what the XML reader left (after the root element), so the count is the
        // whole input.
        std::io::copy(&mut counting, &mut std::io::sink())?;
        report.input_bytes = counting.consumed;
        report.unnamed = report.count_unnamed();
        // The raw XML is not kept: the report is all that remains of it.
        report.dropped_bytes = counting.consumed;
        return Ok(report);
    }
    let candidates: Vec<Format> = match format {
        Some(f) => vec![f],
        None => Format::DETECTION_ORDER.to_vec(),
    };
    let mut parsers: Vec<(Format, Box<dyn Parser>)> =
        candidates.iter().map(|f| (*f, parser_for(*f))).collect();
    let mut compressor = generic::Compressor::new();
    let mut lines = lines::Lines::new(reader);
    while let Some(line) = lines.next_line()? {
        for (_, parser) in parsers.iter_mut() {
            parser.line(line);
        }
        compressor.line(line);
    }
    let input_bytes = lines.bytes_read();
    let cut_bytes = lines.bytes_cut();
    let hinted = command.and_then(Format::from_command);
    let chosen = choose(&parsers, format, hinted);
    let summary = compressor.finish();
    let mut report = match chosen {
        Some(i) => parsers.swap_remove(i).1.finish(),
        None => TestReport::new(Format::Generic),
    };
    report.input_bytes = input_bytes;
    report.unnamed = report.count_unnamed();
    report.dropped_bytes = summary.dropped_bytes + cut_bytes;
    report.excerpt = summary.text;
    Ok(report)
}

/// Counts the bytes a reader hands out.
struct Counting<R> {
    inner: R,
    consumed: u64,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.consumed += amount as u64;
        self.inner.consume(amount);
    }
}

/// Picks the parser: a forced one; else the command's runner if it recognised anything;
/// else the first confident parser in detection order; else the highest score.
fn choose(
    parsers: &[(Format, Box<dyn Parser>)],
    forced: Option<Format>,
    hinted: Option<Format>,
) -> Option<usize> {
    if forced.is_some() {
        return (!parsers.is_empty()).then_some(0);
    }
    if let Some(h) = hinted
        && let Some(i) = parsers.iter().position(|(f, p)| *f == h && p.score() > 0)
    {
        return Some(i);
    }
    if let Some(i) = parsers.iter().position(|(_, p)| p.score() >= CONFIDENT) {
        return Some(i);
    }
    parsers
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| p.score() > 0)
        .max_by_key(|(i, (_, p))| (p.score(), std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}

/// Distils a string (tests and callers that already hold the output).
pub fn distill_str(text: &str, format: Option<Format>, command: Option<&str>) -> TestReport {
    match distill(text.as_bytes(), format, command) {
        Ok(report) => report,
        // Reading from memory cannot fail.
        Err(_) => TestReport::new(Format::Generic),
    }
}

/// Helpers the parsers' tests share: the real logs in `shared/fixtures/test-logs/`, and
/// feeding text to a parser as [`distill`] would.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Failure, Format, TestReport, lines, parser_for};

    /// The real test-runner logs, each `NAME.log` with its `NAME.truth.json`: under
    /// `PLANWRIGHT_TEST_FIXTURES` when it is set (a checkout not beside the fixtures),
    /// else beside the repository. Ends with `/`.
    pub(crate) fn fixtures_dir() -> String {
        let root = std::env::var("PLANWRIGHT_TEST_FIXTURES").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures").to_owned()
        });
        format!("{root}/test-logs/")
    }

    /// The log `NAME.log` (invalid UTF-8 replaced).
    pub(crate) fn fixture(name: &str) -> String {
        let path = format!("{}{name}.log", fixtures_dir());
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The ground truth of the log `NAME.log`.
    pub(crate) fn truth(name: &str) -> serde_json::Value {
        let path = format!("{}{name}.truth.json", fixtures_dir());
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The names (without `.log`) of all the logs, sorted.
    pub(crate) fn fixture_names() -> Vec<String> {
        let dir = fixtures_dir();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("fixtures")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".log").map(str::to_owned)
            })
            .collect();
        names.sort();
        assert!(!names.is_empty(), "no logs in {dir}");
        names
    }

    /// The runner a log's truth names.
    pub(crate) fn truth_runner(name: &str) -> String {
        truth(name)["runner"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}.truth.json has no runner"))
            .to_owned()
    }

    /// The logs (name, text) of runners other than `format`'s, by their truth.
    pub(crate) fn other_runners_logs(format: Format) -> Vec<(String, String)> {
        fixture_names()
            .into_iter()
            .filter(|name| truth_runner(name) != format.runner())
            .map(|name| {
                let text = fixture(&name);
                (name, text)
            })
            .collect()
    }

    /// Feeds `text` to a fresh parser for `format` line by line, as [`super::distill`]
    /// would; returns its report and its score.
    pub(crate) fn run(format: Format, text: &str) -> (TestReport, u32) {
        let mut parser = parser_for(format);
        let mut reader = lines::Lines::new(text.as_bytes());
        while let Some(line) = reader.next_line().expect("reading memory") {
            parser.line(line);
        }
        let score = parser.score();
        let mut report = parser.finish();
        report.unnamed = report.count_unnamed();
        (report, score)
    }

    /// The failure with this id; panics listing the ids there are.
    pub(crate) fn failure<'a>(report: &'a TestReport, id: &str) -> &'a Failure {
        report
            .failures
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no failure {id:?} among {:?}", sorted_ids(report)))
    }

    /// The failures' ids, sorted.
    pub(crate) fn sorted_ids(report: &TestReport) -> Vec<&str> {
        let mut ids: Vec<&str> = report.failures.iter().map(|f| f.id.as_str()).collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{fixture, fixture_names, run, truth_runner};
    use super::{CONFIDENT, Format};

    /// On every real log, its own runner's parser is confident and every other line
    /// parser stays below [`CONFIDENT`], so detection cannot pick the wrong runner.
    #[test]
    fn only_the_logs_own_parser_is_confident() {
        let mut problems = Vec::new();
        for name in fixture_names() {
            let runner = truth_runner(&name);
            let text = fixture(&name);
            assert!(
                Format::DETECTION_ORDER.iter().any(|f| f.runner() == runner),
                "{name}: no line parser for {runner:?}"
            );
            for format in Format::DETECTION_ORDER {
                let (_, score) = run(format, &text);
                let own = format.runner() == runner;
                if own && score < CONFIDENT {
                    problems.push(format!("{name}: own parser {format:?} only {score}"));
                }
                if !own && score >= CONFIDENT {
                    problems.push(format!("{name}: {format:?} is confident ({score})"));
                }
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// Each runner's account of finding no tests is read as that runner with nothing
    /// counted, whatever its exit code, so a run of no tests is told from output that
    /// names no runner (judged by its exit code alone).
    #[test]
    fn every_runner_saying_it_ran_no_tests_is_recognised() {
        let cases: &[(&str, Format, &str)] = &[
            (
                "cargo test",
                Format::Cargo,
                "   Compiling z v0.1.0 (/w)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.31s\n     Running unittests src/lib.rs (target/debug/deps/z-1)\n\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
            ),
            (
                "cargo nextest run",
                Format::Nextest,
                "    Starting 0 tests across 1 binary\n────────────\n     Summary [   0.000s] 0 tests run: 0 passed, 0 skipped\nerror: no tests to run\n(hint: use `--no-tests` to customize)\n",
            ),
            (
                "python3 -m pytest",
                Format::Pytest,
                "============================= test session starts ==============================\nplatform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0+repack\nrootdir: /w\ncollected 0 items\n\n============================ no tests ran in 0.03s =============================\n",
            ),
            (
                "python3 -m unittest",
                Format::Unittest,
                "\n----------------------------------------------------------------------\nRan 0 tests in 0.000s\n\nOK\n",
            ),
            (
                "python3 -m unittest",
                Format::Unittest,
                "\n----------------------------------------------------------------------\nRan 0 tests in 0.000s\n\nNO TESTS RAN\n",
            ),
            (
                "jest --ci",
                Format::Jest,
                "No tests found, exiting with code 1\nRun with `--passWithNoTests` to exit with code 0\nIn /w\n  1 file checked.\n  testMatch: **/__tests__/**/*.?([mc])[jt]s?(x), **/?(*.)+(spec|test).?([mc])[jt]s?(x) - 0 matches\n  testPathIgnorePatterns: /node_modules/ - 1 match\n  testRegex:  - 0 matches\nPattern:  - 0 matches\n",
            ),
            (
                "vitest run",
                Format::Vitest,
                "\n RUN  v1.6.0 /w\n\ninclude: **/*.{test,spec}.?(c|m)[jt]s?(x)\nexclude:  **/node_modules/**, **/dist/**\nwatch exclude:  **/node_modules/**, **/dist/**\n\nNo test files found, exiting with code 1\n",
            ),
            (
                "node --test",
                Format::Node,
                "TAP version 13\n1..0\n# tests 0\n# suites 0\n# pass 0\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n# duration_ms 3.112142\n",
            ),
            (
                "node --test",
                Format::Node,
                "ℹ tests 0\nℹ suites 0\nℹ pass 0\nℹ fail 0\nℹ cancelled 0\nℹ skipped 0\nℹ todo 0\nℹ duration_ms 4.2\n",
            ),
            (
                "go test ./...",
                Format::Go,
                "?   \texample.com/z\t[no test files]\n",
            ),
            (
                "go test -v ./...",
                Format::Go,
                "testing: warning: no tests to run\nPASS\nok  \texample.com/z\t0.068s [no tests to run]\n",
            ),
            (
                "mvn -B test",
                Format::Maven,
                "[INFO] -------------------------------------------------------\n[INFO]  T E S T S\n[INFO] -------------------------------------------------------\n[INFO] \n[INFO] Results:\n[INFO] \n[INFO] Tests run: 0, Failures: 0, Errors: 0, Skipped: 0\n[INFO] \n[INFO] BUILD SUCCESS\n",
            ),
        ];
        let mut problems = Vec::new();
        for (command, format, text) in cases {
            for hint in [Some(*command), None] {
                let report = super::distill_str(text, None, hint);
                let counted = report.passed + report.failed + report.skipped;
                if report.runner != format.runner() || counted != 0 || !report.failures.is_empty() {
                    problems.push(format!(
                        "{command} (hinted: {}): read as {} with {counted} tests",
                        hint.is_some(),
                        report.runner
                    ));
                }
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }
}

#[cfg(test)]
mod passing_tests {
    use super::*;

    #[test]
    fn runners_that_list_passing_tests_name_them() {
        let cases: [(&str, Format, &[&str]); 5] = [
            (
                "ok 1 - add adds\nnot ok 2 - mul\n1..2\n",
                Format::Tap,
                &["add adds"],
            ),
            (
                "running 2 tests\ntest calc::adds ... ok\ntest calc::muls ... FAILED\n\n\
                 failures:\n\n---- calc::muls stdout ----\npanicked\n\nfailures:\n    calc::muls\n\n\
                 test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; \
                 finished in 0.00s\n",
                Format::Cargo,
                &["calc::adds"],
            ),
            (
                "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestMul\n--- FAIL: TestMul \
                 (0.00s)\nFAIL\nFAIL\tcalc\t0.01s\n",
                Format::Go,
                &["TestAdd"],
            ),
            (
                "test_add (test_calc.TestCalc.test_add) ... ok\ntest_mul (test_calc.TestCalc.test_mul) \
                 ... FAIL\n\n======================================================================\n\
                 FAIL: test_mul (test_calc.TestCalc.test_mul)\n\
                 ----------------------------------------------------------------------\n\
                 AssertionError: 5 != 6\n\n\
                 ----------------------------------------------------------------------\n\
                 Ran 2 tests in 0.001s\n\nFAILED (failures=1)\n",
                Format::Unittest,
                &["test_calc.TestCalc.test_add"],
            ),
            (
                "tests/test_calc.py::test_add PASSED                 [ 50%]\n\
                 tests/test_calc.py::test_mul FAILED                 [100%]\n\n\
                 =========================== short test summary info ============================\n\
                 FAILED tests/test_calc.py::test_mul - assert 5 == 6\n\
                 ========================= 1 failed, 1 passed in 0.01s ==========================\n",
                Format::Pytest,
                &["tests/test_calc.py::test_add"],
            ),
        ];
        for (text, format, want) in cases {
            let report = distill_str(text, Some(format), None);
            assert_eq!(report.passing, want, "{format:?}: {report:?}");
        }
    }
}
