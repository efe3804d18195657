//! Reads the human output of `cargo nextest run`.
//!
//! Counts come from the `Summary [...] N tests run: ...` line when there is one, else from
//! the per-test status lines (`PASS`, `FAIL`, `SKIP`, `TIMEOUT`, `SIGSEGV`, retries...).
//! The libtest output nextest embeds (captured `stdout ───`/`stderr ───` sections, or the
//! raw output with `--no-capture`) only gives failure messages: its `test result:` lines
//! are one per test process and are never counted.

use std::collections::HashMap;

use super::rust_output::{BuildErrors, Snippet};
use super::{CONFIDENT, Format, MAX_FAILURES, Parser, TestReport};
use crate::text::clip;

/// Score per recognised status line, and its ceiling.
const MAX_LINE_SCORE: u32 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A test starts (its `--no-capture` output follows).
    Start,
    /// Progress that decides nothing: `RETRY`, `SLOW`, `TERMINATING`, setup scripts.
    Progress,
    Pass,
    Fail,
    Skip,
}

/// A status line: `   FAIL [   0.005s] ( 2/24) binary-id test::name`.
fn parse_status(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start();
    let open = t.find(" [")?;
    let status = t[..open].trim();
    let first = status.bytes().next()?;
    if !first.is_ascii_uppercase()
        || !status.bytes().all(|b| {
            b.is_ascii_uppercase() || b.is_ascii_digit() || matches!(b, b' ' | b'-' | b'/')
        })
    {
        return None;
    }
    let after = &t[open + 2..];
    let close = after.find(']')?;
    if !after[..close]
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b' ' | b'.' | b's' | b'm' | b'h' | b'>' | b'/'))
    {
        return None;
    }
    let mut rest = after[close + 1..].trim_start();
    if let Some(r) = rest.strip_prefix('(') {
        let c = r.find(')')?;
        if !r[..c]
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b' ' | b'/'))
        {
            return None;
        }
        rest = r[c + 1..].trim_start();
    }
    let id = rest.trim_end();
    if id.is_empty() {
        return None;
    }
    Some((status, id))
}

fn kind(status: &str) -> Option<Kind> {
    let words = status.split_whitespace();
    if words.clone().any(|w| w == "SETUP") {
        return Some(Kind::Progress);
    }
    let word = words
        .rev()
        .find(|w| w.bytes().all(|b| b.is_ascii_uppercase() || b == b'-'))?;
    Some(match word {
        "START" => Kind::Start,
        "PASS" | "LEAK" | "FLAKY" => Kind::Pass,
        "SKIP" => Kind::Skip,
        "FAIL" | "TIMEOUT" | "TIMEDOUT" | "ABORT" | "LEAK-FAIL" | "EXECFAIL" | "ERROR" => {
            Kind::Fail
        }
        w if w.starts_with("SIG") && w.len() > 3 => Kind::Fail,
        "RETRY" | "SLOW" | "TERMINATING" | "KILLING" | "CANCEL" | "TRY" | "RUN" => Kind::Progress,
        _ => return None,
    })
}

/// Whether a line is nextest's own (banner, status line, summary, its build command):
/// the cargo parser uses it to tell libtest output embedded in nextest output.
pub(crate) fn is_nextest_line(line: &str) -> bool {
    let t = line.trim();
    is_banner(t)
        || parse_summary(t).is_some()
        || is_build_command_error(t)
        || parse_status(line).is_some_and(|(status, _)| kind(status).is_some())
}

fn is_banner(t: &str) -> bool {
    t.starts_with("Nextest run ID ") || parse_starting(t).is_some()
}

/// `error: command `cargo test --no-run --message-format json-render-diagnostics` exited...`
fn is_build_command_error(t: &str) -> bool {
    t.starts_with("error: command `")
        && t.contains("--no-run")
        && t.contains("--message-format json-render-diagnostics")
}

/// `Starting 24 tests across 3 binaries (2 tests skipped)`: the tests skipped.
fn parse_starting(t: &str) -> Option<u64> {
    let rest = t.strip_prefix("Starting ")?;
    let across = rest.find(" across ")?;
    if !rest[..across].contains(" test") || !rest[across..].contains(" binar") {
        return None;
    }
    let mut skipped = 0;
    if let Some(open) = rest.find('(') {
        for piece in rest[open + 1..].trim_end_matches(')').split(',') {
            let mut words = piece.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next())
                && what.starts_with("test")
                && let Ok(n) = n.parse::<u64>()
            {
                skipped += n;
            }
        }
    }
    Some(skipped)
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    passed: u64,
    failed: u64,
    skipped: u64,
}

/// `Summary [   0.545s] 24 tests run: 17 passed (1 flaky), 7 failed, 1 timed out, 2 skipped`.
fn parse_summary(t: &str) -> Option<Totals> {
    let rest = t.strip_prefix("Summary [")?;
    let rest = &rest[rest.find(']')? + 1..];
    let at = rest.find(" tests run").or_else(|| rest.find(" test run"))?;
    let after = &rest[at..];
    let body = after.split_once(':').map_or("", |(_, b)| b);
    let body = body.split(';').next().unwrap_or("");
    // Parenthesised details (`(1 slow, 2 flaky)`) are subsets of the count before them.
    let mut flat = String::with_capacity(body.len());
    let mut depth = 0u32;
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => flat.push(c),
            _ => {}
        }
    }
    let mut totals = Totals::default();
    for piece in flat.split(',') {
        let piece = piece.trim();
        let Some((n, what)) = piece.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        let what = what.trim();
        if what.starts_with("passed") {
            totals.passed += n;
        } else if what.starts_with("skipped") {
            totals.skipped += n;
        } else if what.starts_with("failed")
            || what.starts_with("timed out")
            || what.starts_with("exec failed")
            || what.starts_with("error")
            || what.starts_with("aborted")
        {
            totals.failed += n;
        }
    }
    Some(totals)
}

/// How a captured output section is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// No section header seen yet.
    None,
    /// `  stdout ───` then lines indented by four spaces.
    Indented,
    /// `--- STDOUT: binary test ---` then the raw output (older nextest).
    Raw,
}

fn section_header(t: &str) -> Option<Layout> {
    if (t.starts_with("stdout") || t.starts_with("stderr") || t.starts_with("output"))
        && t.contains('─')
    {
        return Some(Layout::Indented);
    }
    if t.starts_with("--- ")
        && (t.contains("STDOUT:") || t.contains("STDERR:") || t.contains("OUTPUT:"))
    {
        return Some(Layout::Raw);
    }
    None
}

fn is_separator(t: &str) -> bool {
    (t.starts_with("────") && t.chars().all(|c| c == '─'))
        || (t.len() >= 10 && t.bytes().all(|b| b == b'-'))
}

#[derive(Debug)]
struct Entry {
    id: String,
    message: String,
    location: Option<String>,
    failing: bool,
}

/// The failing test whose output sections come next.
#[derive(Debug)]
struct Current {
    idx: Option<usize>,
    status: String,
    snippet: Snippet,
    layout: Layout,
}

#[derive(Debug, Default)]
pub struct NextestParser {
    confident: bool,
    status_lines: u32,
    started: bool,
    /// Summed over the summary lines (one per run).
    summary: Option<Totals>,
    after_summary: bool,
    // Counted from status lines, for output without a summary.
    passed: u64,
    failed: u64,
    skipped_lines: u64,
    banner_skipped: u64,
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    current: Option<Current>,
    /// `--no-capture`: the output of the test that started last.
    live: Option<(String, Snippet)>,
    build: BuildErrors,
    build_command: Option<String>,
}

impl NextestParser {
    fn entry(&mut self, id: &str) -> Option<usize> {
        if let Some(&i) = self.index.get(id) {
            return Some(i);
        }
        if self.entries.len() >= MAX_FAILURES {
            return None;
        }
        self.entries.push(Entry {
            id: id.to_owned(),
            message: String::new(),
            location: None,
            failing: false,
        });
        self.index.insert(id.to_owned(), self.entries.len() - 1);
        Some(self.entries.len() - 1)
    }

    fn close_current(&mut self) {
        let Some(current) = self.current.take() else {
            return;
        };
        let Some(entry) = current.idx.and_then(|i| self.entries.get_mut(i)) else {
            return;
        };
        if !entry.message.is_empty() {
            return;
        }
        let (message, location) = if current.snippet.is_empty() {
            (String::new(), None)
        } else {
            current.snippet.summary()
        };
        let what = describe(&current.status);
        entry.message = match what {
            Some(w) if message.is_empty() => w,
            Some(w) => format!("{w}\n{message}"),
            None => message,
        };
        if entry.location.is_none() {
            entry.location = location;
        }
    }

    fn status(&mut self, status: &str, id: &str, kind: Kind) {
        self.started = true;
        self.status_lines = (self.status_lines + 1).min(MAX_LINE_SCORE);
        let live = match self.live.take() {
            Some((live_id, snippet)) if live_id == id => Some(snippet),
            other => {
                self.live = other;
                None
            }
        };
        match kind {
            Kind::Start => {
                self.live = Some((id.to_owned(), Snippet::default()));
            }
            Kind::Progress => {
                if let Some(snippet) = live {
                    self.live = Some((id.to_owned(), snippet));
                }
            }
            Kind::Skip => {
                if !self.after_summary {
                    self.skipped_lines += 1;
                }
            }
            Kind::Pass => {
                if !self.after_summary {
                    self.passed += 1;
                }
                if let Some(&i) = self.index.get(id)
                    && let Some(e) = self.entries.get_mut(i)
                    && e.failing
                {
                    e.failing = false;
                    if !self.after_summary {
                        self.failed = self.failed.saturating_sub(1);
                    }
                }
            }
            Kind::Fail => {
                let known = self.index.get(id).copied();
                let was_failing = known
                    .and_then(|i| self.entries.get(i))
                    .is_some_and(|e| e.failing);
                if !self.after_summary && !was_failing {
                    self.failed += 1;
                }
                let idx = self.entry(id);
                if let Some(e) = idx.and_then(|i| self.entries.get_mut(i)) {
                    e.failing = true;
                }
                self.current = Some(Current {
                    idx,
                    status: status.to_owned(),
                    snippet: live.unwrap_or_default(),
                    layout: Layout::None,
                });
            }
        }
    }
}

/// What a non-`FAIL` result means, said in words.
fn describe(status: &str) -> Option<String> {
    let word = status
        .split_whitespace()
        .rev()
        .find(|w| w.bytes().all(|b| b.is_ascii_uppercase() || b == b'-'))?;
    Some(match word {
        "FAIL" => return None,
        "TIMEOUT" | "TIMEDOUT" => "test timed out".to_owned(),
        "LEAK-FAIL" => "test leaked handles".to_owned(),
        "EXECFAIL" | "ERROR" => "test could not be started".to_owned(),
        "ABORT" => "test process aborted".to_owned(),
        w if w.starts_with("SIG") => format!("test process killed by {w}"),
        w => w.to_owned(),
    })
}

impl Parser for NextestParser {
    fn line(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        let t = line.trim();
        if t.starts_with("Nextest run ID ") {
            self.close_current();
            self.confident = true;
            self.started = true;
            return;
        }
        if let Some(skipped) = parse_starting(t) {
            self.close_current();
            self.confident = true;
            self.started = true;
            self.after_summary = false;
            self.banner_skipped += skipped;
            return;
        }
        if let Some(totals) = parse_summary(t) {
            self.close_current();
            self.live = None;
            self.confident = true;
            self.started = true;
            self.after_summary = true;
            let sum = self.summary.get_or_insert_with(Totals::default);
            sum.passed += totals.passed;
            sum.failed += totals.failed;
            sum.skipped += totals.skipped;
            return;
        }
        if let Some((status, id)) = parse_status(line)
            && let Some(kind) = kind(status)
        {
            self.close_current();
            self.status(status, id, kind);
            return;
        }
        if let Some(current) = self.current.as_mut() {
            if let Some(layout) = section_header(t) {
                current.layout = layout;
                return;
            }
            let keep = match current.layout {
                Layout::Indented if line.is_empty() => true,
                Layout::Indented => {
                    if let Some(inner) = line.strip_prefix("    ") {
                        current.snippet.push(inner);
                        return;
                    }
                    false
                }
                Layout::Raw => !is_separator(t),
                Layout::None => t.is_empty(),
            };
            if keep {
                if current.layout != Layout::None {
                    current.snippet.push(line);
                }
                return;
            }
            self.close_current();
        }
        if is_separator(t) || t.starts_with("Cancelling") || t.starts_with("Canceling") {
            return;
        }
        if is_build_command_error(t) {
            self.confident = true;
            if self.build_command.is_none() {
                self.build_command = Some(clip(t, 500));
            }
            return;
        }
        if !self.started {
            self.build.line(t);
        }
        if let Some((_, snippet)) = self.live.as_mut() {
            snippet.push(line);
        }
    }

    fn score(&self) -> u32 {
        if self.confident {
            CONFIDENT + self.status_lines
        } else {
            self.status_lines.min(CONFIDENT - 1)
        }
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_current();
        let mut report = TestReport::new(Format::Nextest);
        match self.summary {
            Some(s) => {
                report.passed = s.passed;
                report.failed = s.failed;
                report.skipped = s.skipped;
            }
            None => {
                report.passed = self.passed;
                report.failed = self.failed;
                report.skipped = self.skipped_lines.max(self.banner_skipped);
            }
        }
        if !self.started && (self.build.failed() || self.build_command.is_some()) {
            self.build
                .report(&mut report, self.build_command.as_deref());
        }
        for e in self.entries.iter().filter(|e| e.failing) {
            report.push_failure(&e.id, &e.message, e.location.as_deref());
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::distill_str;
    use crate::distill::testing::{failure, fixture, other_runners_logs, run};

    #[test]
    fn captured_output_gives_message_and_location() {
        let (r, score) = run(Format::Nextest, &fixture("nextest_fail_fast_default"));
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 1, 2, 0));
        assert_eq!(r.failures.len(), 1);
        let f = failure(&r, "textkit parse::tests::parse_list_report");
        assert_eq!(f.message, "report input should parse: MissingEquals(5)");
        assert_eq!(f.location.as_deref(), Some("src/parse.rs:85:40"));
    }

    #[test]
    fn no_capture_output_with_backtraces() {
        let (r, _) = run(Format::Nextest, &fixture("nextest_no_fail_fast_backtrace"));
        assert_eq!((r.passed, r.failed, r.skipped), (17, 7, 2));
        assert_eq!(r.failures.len(), 7);
        let f = failure(&r, "textkit::api api_title_multibyte");
        assert!(f.message.contains("is not a char boundary"));
        assert_eq!(f.location.as_deref(), Some("src/lib.rs:33:21"));
        let f = failure(&r, "textkit parse::tests::port_garbage_panics");
        assert_eq!(f.message, "test did not panic as expected");
        assert_eq!(f.location.as_deref(), Some("src/parse.rs:74:8"));
        let f = failure(&r, "textkit stats::tests::median_even");
        assert!(f.message.contains("left: Some(3.0)"), "{}", f.message);
        assert!(!f.message.contains("stack backtrace"));
    }

    #[test]
    fn large_run_and_detection() {
        for name in [
            "nextest_real_serde_saphyr_large",
            "nextest_no_fail_fast_backtrace",
            "nextest_fail_fast_default",
        ] {
            let r = distill_str(&fixture(name), None, None);
            assert_eq!(r.runner, "cargo nextest", "{name}");
        }
        let (r, _) = run(Format::Nextest, &fixture("nextest_real_serde_saphyr_large"));
        assert_eq!((r.passed, r.failed, r.skipped), (3396, 44, 1));
        let f = failure(
            &r,
            "serde-saphyr parse_scalars::tests::parse_int_signed_honors_legacy_prefix_underscores",
        );
        assert!(f.message.contains("left: 10"));
        assert_eq!(f.location.as_deref(), Some("src/parse_scalars.rs:617:9"));
    }

    #[test]
    fn zero_on_other_runners() {
        // Stricter than the shared check (below CONFIDENT): not even a per-test line.
        for (name, text) in other_runners_logs(Format::Nextest) {
            let (r, score) = run(Format::Nextest, &text);
            assert_eq!(score, 0, "{name}");
            assert!(r.failures.is_empty(), "{name}");
        }
    }

    const RETRIES: &str = "\
────────────
 Nextest run ID 00000000-0000-0000-0000-000000000000 with nextest profile: ci
    Starting 5 tests across 1 binary (1 test skipped)
        PASS [   0.003s] (1/5) mycrate tests::a
  TRY 1 FAIL [   0.004s] (2/5) mycrate tests::flaky
  stderr ───

    thread 'tests::flaky' (12) panicked at src/lib.rs:9:5:
    flaked

   RETRY 2/2 [         ] (2/5) mycrate tests::flaky
  TRY 2 PASS [   0.004s] (2/5) mycrate tests::flaky
     TIMEOUT [  60.002s] (3/5) mycrate tests::slow
     SIGSEGV [   0.010s] (4/5) mycrate tests::crash
  stderr ───
    thread 'tests::crash' (13) panicked at src/lib.rs:20:1:
    about to crash

  TRY 1 FAIL [   0.004s] (5/5) mycrate tests::always
  stderr ───
    thread 'tests::always' (14) panicked at src/lib.rs:30:5:
    nope

   RETRY 2/2 [         ] (5/5) mycrate tests::always
  TRY 2 FAIL [   0.004s] (5/5) mycrate tests::always
────────────
     Summary [  60.020s] 5 tests run: 2 passed (1 flaky), 2 failed, 1 timed out, 1 skipped
   FLAKY 2/2 [   0.004s] (2/5) mycrate tests::flaky
     TIMEOUT [  60.002s] (3/5) mycrate tests::slow
     SIGSEGV [   0.010s] (4/5) mycrate tests::crash
  TRY 2 FAIL [   0.004s] (5/5) mycrate tests::always
error: test run failed
";

    #[test]
    fn retries_timeouts_and_signals() {
        let (r, score) = run(Format::Nextest, RETRIES);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped), (2, 3, 1));
        let mut ids: Vec<&str> = r.failures.iter().map(|f| f.id.as_str()).collect();
        ids.sort();
        assert_eq!(
            ids,
            [
                "mycrate tests::always",
                "mycrate tests::crash",
                "mycrate tests::slow"
            ]
        );
        assert_eq!(failure(&r, "mycrate tests::slow").message, "test timed out");
        let crash = failure(&r, "mycrate tests::crash");
        assert!(crash.message.starts_with("test process killed by SIGSEGV"));
        assert!(crash.message.contains("about to crash"));
        assert_eq!(crash.location.as_deref(), Some("src/lib.rs:20:1"));
        assert_eq!(failure(&r, "mycrate tests::always").message, "nope");
        // Cut before the summary: the status lines count, the flaky test passed.
        let cut: String = RETRIES.lines().take(23).map(|l| format!("{l}\n")).collect();
        let (r, _) = run(Format::Nextest, &cut);
        assert_eq!((r.passed, r.failed, r.skipped), (2, 3, 1));
    }

    #[test]
    fn older_output_sections_and_summary_without_slash() {
        let log = "\
    Starting 2 tests across 1 binaries
        PASS [   0.003s] mycrate tests::a
        FAIL [   0.004s] mycrate tests::b

--- STDOUT:              mycrate tests::b ---

running 1 test
test tests::b ... FAILED

--- STDERR:              mycrate tests::b ---
thread 'tests::b' panicked at 'it broke', src/lib.rs:5:9
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

------------
     Summary [   0.010s] 2 tests run: 1 passed, 1 failed, 0 skipped
        FAIL [   0.004s] mycrate tests::b
";
        let (r, _) = run(Format::Nextest, log);
        assert_eq!((r.passed, r.failed, r.skipped), (1, 1, 0));
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.failures[0].message, "it broke");
        assert_eq!(r.failures[0].location.as_deref(), Some("src/lib.rs:5:9"));
    }

    #[test]
    fn build_failure_is_one_error() {
        let log = "\
   Compiling k v0.1.0 (/p)
error[E0425]: cannot find value `x` in this scope
 --> src/lib.rs:3:5
  |
3 |     x
  |     ^ not found in this scope

For more information about this error, try `rustc --explain E0425`.
error: could not compile `k` (lib test) due to 1 previous error
error: command `/usr/local/cargo/bin/cargo test --no-run --message-format json-render-diagnostics` exited with code 101
";
        let (r, score) = run(Format::Nextest, log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.errors), (0, 0, 1));
        assert!(r.failures.is_empty());
        assert_eq!(
            r.build_errors[0].message,
            "error[E0425]: cannot find value `x` in this scope"
        );
        assert_eq!(
            r.build_errors[0].location.as_deref(),
            Some("src/lib.rs:3:5")
        );
        assert_eq!(distill_str(log, None, None).runner, "cargo nextest");
    }

    #[test]
    fn never_panics_on_odd_input() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let pieces = [
            "PASS",
            "FAIL",
            "TRY 2 ",
            "SIGSEGV",
            " [",
            "]",
            "(",
            ")",
            "1/2",
            " 0.1s",
            "a b",
            "Summary [",
            " tests run:",
            " passed",
            ",",
            "(1 flaky)",
            "Starting ",
            " across ",
            "stdout ───",
            "    ",
            "é",
            "--- STDOUT:",
            "thread 'x' panicked at ",
            "──",
            "9",
        ];
        let mut p = Box::new(NextestParser::default());
        for _ in 0..20_000 {
            let mut line = String::new();
            for _ in 0..(next() % 7) {
                line.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            p.line(&line);
        }
        let r = p.finish();
        assert!(r.failures.len() <= MAX_FAILURES);
    }
}
