//! Reads the human output of `cargo test`: libtest's pretty and terse (`-q`) formats over
//! any number of test binaries and doctest suites, plus the compiler errors that keep
//! tests from running.
//!
//! Counts come from each binary's `test result:` line; the per-test lines only stand in
//! for a binary whose summary never came (a crash, a truncated log). Failure ids come from
//! `test x ... FAILED` lines, the `failures:` list and the `---- x stdout ----` blocks.

use std::collections::HashMap;

use super::rust_output::{BuildErrors, MESSAGE_CHARS, Snippet};
use super::{CONFIDENT, Format, Parser, TestReport};
use crate::text::clip;

/// Failing tests remembered per binary before its summary comes.
const MAX_PENDING: usize = super::MAX_FAILURES;
/// Panics printed outside `----` blocks (`--nocapture`) remembered per binary.
const MAX_LOOSE: usize = 200;
/// Score per recognised per-test line, and its ceiling.
const MAX_LINE_SCORE: u32 = 500;

/// Splits `test name ... result` into the name (without libtest's mode suffix) and the
/// result text; `None` when the line is not a per-test line.
pub(crate) fn split_test_line(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_prefix("test ")?;
    let p = rest.find(" ...")?;
    let name = normalize_name(&rest[..p]);
    if name.is_empty() {
        return None;
    }
    Some((name, rest[p + 4..].trim()))
}

/// Drops the ` - should panic` / ` - compile fail` / ` - compile` suffix libtest prints
/// after some names (the `failures:` list prints the bare name).
fn normalize_name(name: &str) -> String {
    let name = name.trim_end();
    for suffix in [" - should panic", " - compile fail", " - compile"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return base.to_owned();
        }
    }
    name.to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
    Ignored,
    Bench,
}

fn outcome(result: &str) -> Option<Outcome> {
    if result == "ok" || result.starts_with("ok ") {
        Some(Outcome::Ok)
    } else if result.starts_with("FAILED") {
        Some(Outcome::Failed)
    } else if result.starts_with("ignored") {
        Some(Outcome::Ignored)
    } else if result.starts_with("bench:") {
        Some(Outcome::Bench)
    } else {
        None
    }
}

/// The counts of a `test result: ...` line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

pub(crate) fn parse_test_result(t: &str) -> Option<Counts> {
    let rest = t.strip_prefix("test result: ")?;
    let mut counts = Counts::default();
    let mut seen = 0;
    for piece in rest.split([';', '.']) {
        let mut words = piece.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => counts.passed = n,
            "failed" => counts.failed = n,
            "ignored" => counts.ignored = n,
            _ => continue,
        }
        seen += 1;
    }
    (seen >= 2).then_some(counts)
}

/// `running N tests`: a test binary starts.
fn is_running(t: &str) -> bool {
    let Some(rest) = t.strip_prefix("running ") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some(n), Some("test" | "tests"), None) if n.bytes().all(|b| b.is_ascii_digit())
    )
}

/// `-q` progress lines: `..F.i` optionally followed by ` 88/100`.
fn terse_marks(t: &str) -> Option<(u64, u64, u64)> {
    let marks = match t.split_once(' ') {
        Some((marks, count)) => {
            let (a, b) = count.trim().split_once('/')?;
            if !(a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit())) {
                return None;
            }
            marks
        }
        None => t,
    };
    if marks.is_empty() || !marks.bytes().all(|b| matches!(b, b'.' | b'F' | b'i')) {
        return None;
    }
    let count = |c: u8| marks.bytes().filter(|b| *b == c).count() as u64;
    Some((count(b'.'), count(b'F'), count(b'i')))
}

/// `thread 'name' (123) panicked at ...`: the thread's name (libtest names test threads
/// after their tests).
fn panicking_thread(t: &str) -> Option<&str> {
    if !t.contains("panicked at") {
        return None;
    }
    let rest = t.strip_prefix("thread '")?;
    let end = rest.find('\'')?;
    Some(&rest[..end])
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Section {
    #[default]
    None,
    /// `---- name stdout ----` blocks, of failures or (with `--show-output`) successes.
    Blocks { successes: bool },
    /// The indented list of names after the second header.
    List { successes: bool },
}

/// One test binary (or doctest suite) between `running N tests` and `test result:`.
#[derive(Debug, Default)]
struct Binary {
    section: Section,
    block: Option<(String, Snippet, bool)>,
    failed: Vec<String>,
    failed_set: HashMap<String, ()>,
    details: HashMap<String, (String, Option<String>)>,
    loose: HashMap<String, (String, Option<String>)>,
    loose_current: Option<(String, Snippet)>,
    /// `test x ... ` printed without its result yet (`--nocapture`).
    pending: Option<(String, Snippet)>,
    passed: u64,
    failed_n: u64,
    ignored: u64,
    /// cargo said the binary failed before it printed its summary.
    crashed: bool,
}

impl Binary {
    fn add_failed(&mut self, name: &str) {
        if self.failed_set.contains_key(name) || self.failed.len() >= MAX_PENDING {
            return;
        }
        self.failed_set.insert(name.to_owned(), ());
        self.failed.push(name.to_owned());
    }

    fn close_block(&mut self) {
        if let Some((name, snippet, successes)) = self.block.take()
            && !successes
        {
            self.add_failed(&name);
            if self.details.len() < MAX_PENDING {
                self.details.insert(name, snippet.summary());
            }
        }
    }

    fn close_loose(&mut self) {
        if let Some((name, snippet)) = self.loose_current.take()
            && self.loose.len() < MAX_LOOSE
            && !self.loose.contains_key(&name)
        {
            self.loose.insert(name, snippet.summary());
        }
    }
}

#[derive(Debug, Default)]
pub struct CargoParser {
    report: TestReport,
    /// Saw cargo's or libtest's unmistakable lines.
    banner: bool,
    test_lines: u32,
    /// Saw nextest's lines: the libtest output here is embedded in nextest's.
    nextest: bool,
    bin: Option<Binary>,
    build: BuildErrors,
    ran_binary: bool,
}

impl CargoParser {
    fn bump(&mut self) {
        self.test_lines = (self.test_lines + 1).min(MAX_LINE_SCORE);
    }

    /// Ends the current binary, adding its counts (from its summary when it printed one)
    /// and its failures to the report.
    fn finish_binary(&mut self, counts: Option<Counts>, crash: Option<&str>) {
        let Some(mut bin) = self.bin.take() else {
            // A summary whose `running N tests` was cut off still counts.
            if let Some(c) = counts {
                self.report.passed += c.passed;
                self.report.failed += c.failed;
                self.report.skipped += c.ignored;
            }
            return;
        };
        bin.close_block();
        bin.close_loose();
        let mut crash_message = crash.map(str::to_owned);
        if bin.crashed && crash_message.is_none() {
            crash_message = Some("test binary exited before printing its summary".to_owned());
        }
        match counts {
            Some(c) => {
                self.report.passed += c.passed;
                self.report.failed += c.failed;
                self.report.skipped += c.ignored;
            }
            None => {
                if let Some((name, _)) = &bin.pending
                    && crash_message.is_some()
                {
                    let name = name.clone();
                    bin.add_failed(&name);
                    bin.failed_n += 1;
                }
                self.report.passed += bin.passed;
                self.report.failed += bin.failed_n.max(bin.failed.len() as u64);
                self.report.skipped += bin.ignored;
            }
        }
        let pending_name = bin.pending.as_ref().map(|(n, _)| n.clone());
        let crashed_without_test = crash_message.is_some() && pending_name.is_none();
        for name in &bin.failed {
            let (mut message, mut location) = match bin.details.get(name) {
                Some(d) if !d.0.is_empty() => d.clone(),
                _ => match bin.loose.get(name) {
                    Some(d) => d.clone(),
                    None => match (&bin.pending, &pending_name) {
                        (Some((_, snippet)), Some(p)) if p == name && !snippet.is_empty() => {
                            snippet.summary()
                        }
                        _ => (String::new(), None),
                    },
                },
            };
            if Some(name) == pending_name.as_ref()
                && let Some(crash) = &crash_message
            {
                message = if message.is_empty() {
                    crash.clone()
                } else {
                    format!("{crash}\n{message}")
                };
            }
            if let Some(doc) = doctest_location(name)
                && !message.contains("\n  --> ")
                && !message.starts_with("error")
            {
                location = Some(doc);
            }
            self.report
                .push_failure(name, &message, location.as_deref());
        }
        if crashed_without_test && let Some(crash) = crash_message {
            self.report.errors += 1;
            self.report.push_problem(&crash, None);
        }
    }

    fn in_binary(&mut self, line: &str, t: &str) {
        let Some(bin) = self.bin.as_mut() else {
            return;
        };
        // Section headers.
        if t == "failures:" || t == "successes:" {
            let successes = t == "successes:";
            bin.close_block();
            bin.close_loose();
            bin.section = match bin.section {
                Section::Blocks { successes: s } if s == successes => Section::List { successes },
                _ => Section::Blocks { successes },
            };
            return;
        }
        if matches!(bin.section, Section::Blocks { .. } | Section::List { .. })
            && let Some(inner) = t.strip_prefix("---- ")
            && let Some(name) = inner
                .strip_suffix(" stdout ----")
                .or_else(|| inner.strip_suffix(" stderr ----"))
        {
            bin.close_block();
            let successes = matches!(
                bin.section,
                Section::Blocks { successes: true } | Section::List { successes: true }
            );
            bin.section = Section::Blocks { successes };
            bin.block = Some((normalize_name(name), Snippet::default(), successes));
            return;
        }
        if let Some((_, snippet, _)) = bin.block.as_mut() {
            snippet.push(line);
            return;
        }
        if let Section::List { successes } = bin.section {
            if line.starts_with("    ") && !t.is_empty() {
                if !successes {
                    bin.add_failed(t);
                }
                return;
            }
            if t.is_empty() {
                return;
            }
            bin.section = Section::None;
        }
        // Per-test lines.
        if let Some((name, result)) = split_test_line(t) {
            bin.close_loose();
            match outcome(result) {
                Some(o) => {
                    if bin.pending.as_ref().is_some_and(|(n, _)| *n == name) {
                        bin.pending = None;
                    }
                    match o {
                        Outcome::Ok => {
                            bin.passed += 1;
                            self.report.push_passing(&name);
                        }
                        Outcome::Failed => {
                            bin.failed_n += 1;
                            bin.add_failed(&name);
                        }
                        Outcome::Ignored => bin.ignored += 1,
                        Outcome::Bench => {}
                    }
                }
                None => {
                    let mut snippet = Snippet::default();
                    if !result.is_empty() {
                        snippet.push(result);
                    }
                    bin.pending = Some((name, snippet));
                }
            }
            self.bump();
            return;
        }
        // `--nocapture`: the result of a pending test on a line of its own.
        if bin.pending.is_some() && (t == "ok" || t == "FAILED" || t.ends_with(" ok")) {
            if let Some((name, snippet)) = bin.pending.take() {
                if t == "FAILED" {
                    bin.failed_n += 1;
                    bin.add_failed(&name);
                    if bin.details.len() < MAX_PENDING && !snippet.is_empty() {
                        bin.details.insert(name, snippet.summary());
                    }
                } else {
                    bin.passed += 1;
                }
            }
            return;
        }
        if bin.section == Section::None
            && let Some((ok, failed, ignored)) = terse_marks(t)
        {
            bin.passed += ok;
            bin.failed_n += failed;
            bin.ignored += ignored;
            self.bump();
            return;
        }
        // Output printed outside the blocks: a panic names its test by the thread.
        if let Some(thread) = panicking_thread(t) {
            bin.close_loose();
            let mut snippet = Snippet::default();
            snippet.push(line);
            bin.loose_current = Some((thread.to_owned(), snippet));
        } else if let Some((_, snippet)) = bin.loose_current.as_mut() {
            snippet.push(line);
        }
        if let Some((_, snippet)) = bin.pending.as_mut() {
            snippet.push(line);
        }
    }
}

/// `src/lib.rs - item (line 17)` → `src/lib.rs:17`: where a doctest is (the panic
/// location rustdoc prints is relative to the generated test).
fn doctest_location(name: &str) -> Option<String> {
    let (file, rest) = name.split_once(" - ")?;
    let open = rest.rfind("(line ")?;
    let line = rest[open + "(line ".len()..].strip_suffix(')')?;
    if file.contains(' ') || line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!("{file}:{line}"))
}

impl Parser for CargoParser {
    fn line(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        let t = line.trim();
        if !self.nextest && super::nextest::is_nextest_line(line) {
            self.nextest = true;
        }
        // Inside a binary, these lines may be a test's own output (a test of a test
        // tool): they only mark binaries where no binary runs (or the last one died).
        let state = self.bin.as_ref().map(|b| (b.crashed, b.block.is_some()));
        let between = matches!(state, None | Some((true, _)));
        let in_block = matches!(state, Some((_, true)));
        if between && is_running(t) {
            self.finish_binary(None, None);
            self.bin = Some(Binary::default());
            self.ran_binary = true;
            self.bump();
            return;
        }
        if !in_block && let Some(counts) = parse_test_result(t) {
            self.banner = true;
            self.finish_binary(Some(counts), None);
            return;
        }
        if between
            && ((t.starts_with("Running ")
                && ((t.ends_with(')') && t.contains(" (")) || t.contains("/deps/")))
                || (t.starts_with("Doc-tests ") && t.split_whitespace().count() == 2))
        {
            self.banner = true;
            self.finish_binary(None, None);
            return;
        }
        if self.bin.is_some() {
            if !in_block
                && (t.starts_with("error: test failed") || t.starts_with("error: doctest failed"))
            {
                if let Some(bin) = self.bin.as_mut() {
                    bin.crashed = true;
                }
                return;
            }
            if self.bin.as_ref().is_some_and(|b| b.crashed)
                && t.starts_with("process didn't exit successfully")
            {
                let crash = clip(t, MESSAGE_CHARS);
                self.finish_binary(None, Some(&crash));
                return;
            }
            self.in_binary(line, t);
            return;
        }
        let before = self.build.saw_could_not_compile();
        self.build.line(t);
        if !before && self.build.saw_could_not_compile() {
            self.banner = true;
        }
    }

    fn score(&self) -> u32 {
        if self.nextest {
            // libtest output embedded in nextest's: the nextest parser reads it.
            return 0;
        }
        if self.banner {
            CONFIDENT + self.test_lines
        } else {
            self.test_lines.min(CONFIDENT - 1)
        }
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.finish_binary(None, None);
        if self.build.failed() && (!self.ran_binary || self.build.saw_could_not_compile()) {
            let build = std::mem::take(&mut self.build);
            build.report(&mut self.report, None);
        }
        TestReport {
            runner: Format::Cargo.runner().to_owned(),
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::rust_output::as_location;

    use crate::distill::testing::{failure, fixture, other_runners_logs, run};

    #[test]
    fn multi_binary_messages_and_locations() {
        let (r, score) = run(Format::Cargo, &fixture("cargo_test_no_fail_fast_multi"));
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (20, 8, 2, 0));
        let f = failure(&r, "parse::tests::parse_list_report");
        assert_eq!(f.message, "report input should parse: MissingEquals(5)");
        assert_eq!(f.location.as_deref(), Some("src/parse.rs:85:40"));
        let f = failure(&r, "parse::tests::port_garbage_panics");
        assert_eq!(f.message, "test did not panic as expected");
        assert_eq!(f.location.as_deref(), Some("src/parse.rs:74:8"));
        let f = failure(&r, "stats::tests::median_even");
        assert!(f.message.starts_with("assertion `left == right` failed"));
        assert!(f.message.contains("left: Some(3.0)") && f.message.contains("right: Some(2.5)"));
        assert_eq!(f.location.as_deref(), Some("src/stats.rs:46:9"));
        let f = failure(&r, "src/lib.rs - words (line 17)");
        assert!(
            f.message.contains("left: [\"hello\", \"world\"]"),
            "{}",
            f.message
        );
        assert_eq!(f.location.as_deref(), Some("src/lib.rs:17"));
        let f = failure(&r, "api_title_multibyte");
        assert!(f.message.contains("is not a char boundary"));
        assert_eq!(f.location.as_deref(), Some("src/lib.rs:33:21"));
    }

    #[test]
    fn backtrace_frames_do_not_become_locations() {
        let (r, _) = run(Format::Cargo, &fixture("cargo_real_regex_syntax_backtrace"));
        assert_eq!((r.passed, r.failed, r.skipped), (187, 10, 0));
        let f = failure(&r, "ast::parse::tests::parse_ignore_whitespace");
        assert_eq!(f.location.as_deref(), Some("src/ast/parse.rs:2909:9"));
        assert!(f.message.contains("left:") && f.message.contains("right:"));
        assert!(!f.message.contains("stack backtrace"));
        for f in &r.failures {
            assert!(
                f.message.chars().count() <= MESSAGE_CHARS + 1,
                "{}",
                f.message
            );
            assert!(!f.location.as_deref().unwrap_or("").contains("/rustc/"));
        }
        let f = failure(&r, "src/lib.rs - is_meta_character (line 248)");
        assert_eq!(f.message, "assertion failed: is_meta_character('#')");
    }

    #[test]
    fn compile_error_is_one_error_with_problems() {
        let (r, score) = run(Format::Cargo, &fixture("cargo_test_compile_error"));
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.errors), (0, 0, 1));
        assert!(r.failures.is_empty());
        assert_eq!(r.build_errors.len(), 2);
        assert_eq!(r.build_errors[0].message, "error[E0308]: mismatched types");
        assert_eq!(
            r.build_errors[0].location.as_deref(),
            Some("tests/stats_props.rs:13:18")
        );
        assert_eq!(
            r.build_errors[1].location.as_deref(),
            Some("tests/stats_props.rs:20:48")
        );
    }

    #[test]
    fn zero_on_other_runners() {
        // Stricter than the shared check (below CONFIDENT): not even a per-test line.
        for (name, text) in other_runners_logs(Format::Cargo) {
            let (_, score) = run(Format::Cargo, &text);
            assert_eq!(score, 0, "{name}");
        }
    }

    #[test]
    fn quiet_output() {
        let log = "\
     Running unittests src/lib.rs (target/debug/deps/k-0123)

running 5 tests
..F.i
failures:

---- m::t_bad stdout ----

thread 'm::t_bad' (77) panicked at src/m.rs:3:5:
boom
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    m::t_bad

test result: FAILED. 3 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
";
        let (r, score) = run(Format::Cargo, log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (3, 1, 1, 0));
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].id, "m::t_bad");
        assert_eq!(r.failures[0].message, "boom");
        assert_eq!(r.failures[0].location.as_deref(), Some("src/m.rs:3:5"));
        // Without the summary the marks still count.
        let cut: String = log.lines().take(4).map(|l| format!("{l}\n")).collect();
        let (r, _) = run(Format::Cargo, &cut);
        assert_eq!((r.passed, r.failed, r.skipped), (3, 1, 1));
    }

    #[test]
    fn nocapture_output() {
        let log = "\
running 3 tests
test a::prints ... hello from the test
more output
ok
test a::loud_fail ... some output
thread 'a::loud_fail' (9) panicked at src/a.rs:10:9:
assertion `left == right` failed
  left: 1
 right: 2
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
FAILED
test a::quiet ... ok

failures:

failures:
    a::loud_fail

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
";
        let (r, _) = run(Format::Cargo, log);
        assert_eq!((r.passed, r.failed), (2, 1));
        let f = failure(&r, "a::loud_fail");
        assert!(f.message.contains("left: 1"), "{}", f.message);
        assert_eq!(f.location.as_deref(), Some("src/a.rs:10:9"));
        // Truncated before the summary: the per-test lines count.
        let cut: String = log.lines().take(13).map(|l| format!("{l}\n")).collect();
        let (r, _) = run(Format::Cargo, &cut);
        assert_eq!((r.passed, r.failed), (2, 1));
        assert_eq!(r.failures[0].id, "a::loud_fail");
    }

    #[test]
    fn show_output_successes_are_not_failures() {
        let log = "\
running 2 tests
test ok_one ... ok
test bad_one ... FAILED

successes:

---- ok_one stdout ----
fine

successes:
    ok_one

failures:

---- bad_one stdout ----
thread 'bad_one' panicked at 'old style message', src/lib.rs:4:5

failures:
    bad_one

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
        let (r, _) = run(Format::Cargo, log);
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].id, "bad_one");
        assert_eq!(r.failures[0].message, "old style message");
        assert_eq!(r.failures[0].location.as_deref(), Some("src/lib.rs:4:5"));
    }

    #[test]
    fn fail_fast_counts_only_what_ran_and_crash_is_reported() {
        let log = "\
     Running unittests src/lib.rs (target/debug/deps/k-0123)

running 2 tests
test one ... ok
test two ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/it.rs (target/debug/deps/it-0123)

running 3 tests
test it_a ... ok
error: test failed, to rerun pass `--test it`

Caused by:
  process didn't exit successfully: `target/debug/deps/it-0123` (signal: 11, SIGSEGV: invalid memory reference)
";
        let (r, _) = run(Format::Cargo, log);
        assert_eq!((r.passed, r.failed, r.errors), (3, 0, 1));
        assert!(r.build_errors[0].message.contains("SIGSEGV"));
        assert!(!r.succeeded());
    }

    #[test]
    fn never_panics_and_stays_bounded() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let pieces = [
            "test ",
            " ... ",
            "ok",
            "FAILED",
            "failures:",
            "---- x stdout ----",
            "running 1 test",
            "thread 'x' panicked at ",
            "'",
            "', ",
            ":",
            "1",
            "é",
            "test result: ",
            " passed;",
            "-->",
            "error[E1]: x",
            "error: could not compile `x`",
            "    ",
            "(line 3)",
            " - ",
            "stack backtrace:",
            "at ",
            "/rustc/x:1:2",
            "successes:",
            "..F",
        ];
        let mut p = Box::new(CargoParser::default());
        for _ in 0..20_000 {
            let mut line = String::new();
            for _ in 0..(next() % 6) {
                line.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            p.line(&line);
        }
        let r = p.finish();
        assert!(r.failures.len() <= crate::distill::MAX_FAILURES);
        // One huge failure block keeps a bounded message.
        let mut p = Box::new(CargoParser::default());
        p.line("running 1 test");
        p.line("test big ... FAILED");
        p.line("failures:");
        p.line("---- big stdout ----");
        for i in 0..100_000 {
            p.line(&format!("line {i} {}", "x".repeat(1000)));
        }
        p.line("thread 'big' panicked at src/big.rs:1:1:");
        p.line(&"y".repeat(60_000));
        let r = p.finish();
        assert_eq!(r.failures.len(), 1);
        assert!(r.failures[0].message.len() < 2_000);
        assert_eq!(r.failures[0].location.as_deref(), Some("src/big.rs:1:1"));
    }

    #[test]
    fn libtest_output_printed_by_a_failing_test_is_not_counted() {
        let log = "\
running 2 tests
test runs_inner ... FAILED
test fine ... ok

failures:

---- runs_inner stdout ----
running 3 tests
test inner::a ... ok
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

thread 'runs_inner' (5) panicked at tests/inner.rs:12:5:
inner run disagreed


failures:
    runs_inner

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
        let (r, _) = run(Format::Cargo, log);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].message, "inner run disagreed");
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("tests/inner.rs:12:5")
        );
    }

    #[test]
    fn locations() {
        assert_eq!(as_location("src/a.rs:1:2").as_deref(), Some("src/a.rs:1:2"));
        assert_eq!(as_location("src/a.rs:7").as_deref(), Some("src/a.rs:7"));
        assert_eq!(
            as_location("C:\\x\\a.rs:7:1").as_deref(),
            Some("C:\\x\\a.rs:7:1")
        );
        assert_eq!(as_location("no location here"), None);
        assert_eq!(as_location(":1:2"), None);
        assert_eq!(
            doctest_location("src/lib.rs - a::b (line 12)").as_deref(),
            Some("src/lib.rs:12")
        );
        assert_eq!(
            split_test_line("test x::y - should panic ... ok").map(|(n, r)| (n, r.to_owned())),
            Some(("x::y".to_owned(), "ok".to_owned()))
        );
    }
}
