//! Reads the human output of `go test` (Go 1.19 onwards), plain and `-v`.
//!
//! Counts are what the output shows: every `--- PASS/FAIL/SKIP: name` line counts once,
//! parent tests and subtests alike (plain mode prints only failures, so its passes are
//! not counted). Ids are the names as printed on those lines (`TestX/sub`). A package that
//! fails without any failing test (`[build failed]`, `[setup failed]`, a failing
//! `TestMain`) is one error, with the import path as id and the compiler messages as
//! problems. A panic fails the test that was running: the one whose `--- FAIL` line came
//! just before it, else the one named by `running tests:` or `=== RUN`, else the test
//! function in the goroutine trace.
//!
//! Output is attributed per package: the `ok`/`FAIL <pkg>` line closes a package, and the
//! failures seen since are reported then, with their `t.Log`/`t.Error` lines (which come
//! before the `--- FAIL` line with `-v` and after it without).
//! `go test -json` output is not read (its lines are ignored).

use std::collections::HashMap;

use super::{CONFIDENT, Format, MAX_FAILURES, MAX_MESSAGE, Parser, TestReport};

/// Score per recognised per-test line, and the most they add up to.
const PER_LINE: u32 = 10;
const PER_LINE_MAX: u32 = 600;
/// Tests whose messages are kept at once within a package.
const MAX_TRACKED: usize = 512;
/// Lines kept of one test's messages.
const MAX_MSG_LINES: usize = 20;
/// Tests remembered as started and not yet finished (for panics).
const MAX_RUNNING: usize = 256;
/// Compiler messages kept per `# pkg` block.
const MAX_BLOCK_LINES: usize = 50;

#[derive(Debug, Default)]
struct Msg {
    lines: Vec<String>,
    chars: usize,
    location: Option<String>,
}

impl Msg {
    fn add(&mut self, line: &str) {
        if self.lines.len() < MAX_MSG_LINES && self.chars < MAX_MESSAGE {
            self.chars += line.len();
            self.lines.push(line.to_owned());
        }
    }

    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

#[derive(Debug, Default)]
struct Panic {
    message: Msg,
    location: Option<String>,
    /// The test whose `--- FAIL` line came just before the panic.
    after_fail: Option<String>,
    /// Names under `running tests:` (Go 1.21 timeouts).
    running: Vec<String>,
    in_running_list: bool,
    in_trace: bool,
    last_function: String,
    /// First `pkg.TestX(` function of the trace.
    trace_test: Option<String>,
}

/// Where the last `# pkg` compiler-output block stands.
#[derive(Debug, Default)]
struct Block {
    package: String,
    lines: Vec<(String, Option<String>)>,
}

/// The last header line seen, to attribute indented message lines.
#[derive(Debug)]
enum Header {
    None,
    /// `=== RUN/CONT/NAME name`: output lines that follow are that test's (`-v`).
    Running(String),
    /// `--- FAIL: name` at this indentation: deeper output lines are its (plain mode).
    Result {
        name: String,
        indent: usize,
    },
}

#[derive(Debug)]
pub struct GoParser {
    report: TestReport,
    score: u32,
    line_score: u32,
    header: Header,
    /// Messages per test in the current package.
    messages: HashMap<String, Msg>,
    /// The test the last message line went to, and that line's indentation.
    last_target: Option<(String, usize)>,
    /// Failing tests of the current package, reported when the package ends.
    pending: Vec<String>,
    running: Vec<String>,
    panic: Option<Panic>,
    /// Set after an Example's `--- FAIL` line: its got/want lines follow unindented.
    example: Option<String>,
    blocks: Vec<Block>,
    in_block: bool,
    /// `-v` output (`=== RUN` lines) lists passing tests; plain output does not.
    verbose: bool,
}

impl Default for GoParser {
    fn default() -> Self {
        GoParser {
            report: TestReport::new(Format::Go),
            score: 0,
            line_score: 0,
            header: Header::None,
            messages: HashMap::new(),
            last_target: None,
            pending: Vec::new(),
            running: Vec::new(),
            panic: None,
            example: None,
            blocks: Vec::new(),
            in_block: false,
            verbose: false,
        }
    }
}

/// `--- PASS: name (0.00s)` → (indent, outcome, name).
fn result_line(line: &str) -> Option<(usize, &str, &str)> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    let indent = line.len() - trimmed.len();
    let rest = trimmed.strip_prefix("--- ")?;
    let (outcome, rest) = rest.split_once(": ")?;
    if !matches!(outcome, "PASS" | "FAIL" | "SKIP") {
        return None;
    }
    let rest = rest.trim_end();
    let name = match rest.rfind(" (") {
        Some(i) if rest.ends_with(')') => &rest[..i],
        _ => rest,
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    Some((indent, outcome, name))
}

/// `=== RUN   TestX` → ("RUN", "TestX").
fn run_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("=== ")?;
    let (verb, name) = rest.split_once(' ')?;
    if !matches!(verb, "RUN" | "CONT" | "PAUSE" | "NAME") {
        return None;
    }
    let name = name.trim();
    (!name.is_empty() && !name.contains(char::is_whitespace)).then_some((verb, name))
}

/// `    x_test.go:42: text` → (indent, "x_test.go:42", "text").
fn message_line(line: &str) -> Option<(usize, &str, &str)> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    let indent = line.len() - trimmed.len();
    if indent == 0 {
        return None;
    }
    let (location, text) = go_location_prefix(trimmed)?;
    Some((indent, location, text))
}

/// `file.go:12: text` or `file.go:12:3: text` → ("file.go:12[:3]", "text").
fn go_location_prefix(text: &str) -> Option<(&str, &str)> {
    let go = text.find(".go:")?;
    let file = &text[..go + 3];
    if file.is_empty() || file.contains(char::is_whitespace) {
        return None;
    }
    let after = &text[go + 4..];
    let mut end = go + 4;
    let mut parts = 0;
    let mut rest = after;
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        parts += 1;
        end += digits;
        rest = &rest[digits..];
        if parts < 2
            && let Some(r) = rest.strip_prefix(':')
            && r.starts_with(|c: char| c.is_ascii_digit())
        {
            end += 1;
            rest = r;
            continue;
        }
        break;
    }
    if parts == 0 {
        return None;
    }
    let rest = rest.strip_prefix(':')?;
    Some((&text[..end], rest.strip_prefix(' ').unwrap_or(rest)))
}

/// The package line: `ok  \tpkg\t0.01s`, `FAIL\tpkg\t0.01s`, `FAIL\tpkg [build failed]`,
/// `?   \tpkg\t[no test files]` → (status, package, rest).
fn package_line(line: &str) -> Option<(&str, &str, &str)> {
    let (status, rest) = if let Some(r) = line.strip_prefix("ok ") {
        ("ok", r)
    } else if let Some(r) = line.strip_prefix("ok\t") {
        ("ok", r)
    } else if let Some(r) = line
        .strip_prefix("FAIL\t")
        .or_else(|| line.strip_prefix("FAIL "))
    {
        ("FAIL", r)
    } else if let Some(r) = line.strip_prefix("? ").or_else(|| line.strip_prefix("?\t")) {
        ("?", r)
    } else {
        return None;
    };
    let rest = rest.trim_start();
    let (package, tail) = match rest.find([' ', '\t']) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    if package.is_empty() || package.starts_with(['[', '(', '-']) {
        return None;
    }
    let tail_ok = match status {
        "?" => tail.starts_with("[no test files]"),
        "ok" => is_duration(tail) || tail.starts_with("(cached)") || tail.starts_with('['),
        _ => {
            is_duration(tail)
                || tail.starts_with("[build failed]")
                || tail.starts_with("[setup failed]")
                || tail.starts_with("(cached)")
        }
    };
    tail_ok.then_some((status, package, tail))
}

/// `0.012s` (possibly followed by more, such as coverage).
fn is_duration(text: &str) -> bool {
    let word = text.split_whitespace().next().unwrap_or("");
    let Some(number) = word.strip_suffix('s') else {
        return false;
    };
    !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && number.bytes().any(|b| b.is_ascii_digit())
}

/// `# example.com/shop/report [example.com/shop/report.test]` → the package.
fn block_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("# ")?;
    let mut words = rest.split_whitespace();
    let package = words.next()?;
    let ok = match words.next() {
        None => true,
        Some(w) => w.starts_with('[') && words.next().is_none(),
    };
    (ok && !package.contains(['#', '*', '`'])).then_some(package)
}

/// `example.com/shop/crash.TestLastOfEmpty(0xc000007860?)` → `TestLastOfEmpty`.
fn trace_test_name(function: &str) -> Option<String> {
    let call = function.split('(').next().unwrap_or("");
    let last = call.rsplit('/').next().unwrap_or(call);
    let mut parts = last.split('.');
    parts.next()?;
    let name = parts.next()?;
    let is_test = ["Test", "Example", "Fuzz", "Benchmark"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|r| r.is_empty() || !r.starts_with(|c: char| c.is_ascii_lowercase()))
    });
    is_test.then(|| name.to_owned())
}

/// Frames of Go's own runtime and testing packages, skipped when locating a panic.
fn is_runtime_frame(function: &str) -> bool {
    [
        "runtime.",
        "testing.",
        "panic(",
        "created by ",
        "reflect.",
        "sync.",
    ]
    .iter()
    .any(|p| function.starts_with(p))
}

impl GoParser {
    fn bump_line_score(&mut self, by: u32) {
        let add = by.min(PER_LINE_MAX.saturating_sub(self.line_score));
        self.line_score += add;
    }

    fn message_for(&mut self, name: &str) -> Option<&mut Msg> {
        if !self.messages.contains_key(name) && self.messages.len() >= MAX_TRACKED {
            return None;
        }
        Some(self.messages.entry(name.to_owned()).or_default())
    }

    fn add_message(&mut self, name: &str, location: Option<&str>, text: &str) {
        if let Some(msg) = self.message_for(name) {
            if msg.location.is_none() && location.is_some() {
                msg.location = location.map(str::to_owned);
                // The located line's text opens the message; later lines keep their prefix.
                msg.add(text);
            } else {
                match location {
                    Some(l) => msg.add(&format!("{l}: {text}")),
                    None => msg.add(text),
                }
            }
        }
    }

    fn fail(&mut self, name: &str) {
        self.report.failed += 1;
        if self.pending.len() < MAX_FAILURES {
            self.pending.push(name.to_owned());
        }
    }

    /// Fails `name` unless it already failed in this package.
    fn fail_once(&mut self, name: &str) {
        if !self.pending.iter().any(|p| p == name) {
            self.fail(name);
        }
    }

    fn finish_running(&mut self, name: &str) {
        if let Some(i) = self.running.iter().rposition(|r| r == name) {
            self.running.remove(i);
        }
    }

    fn on_result(&mut self, indent: usize, outcome: &str, name: &str) {
        self.bump_line_score(PER_LINE);
        self.finish_running(name);
        self.last_target = None;
        self.example = None;
        match outcome {
            "PASS" => {
                self.report.passed += 1;
                self.report.push_passing(name);
                self.messages.remove(name);
            }
            "SKIP" => {
                self.report.skipped += 1;
                self.messages.remove(name);
            }
            _ => {
                self.fail(name);
                if name.starts_with("Example") {
                    self.example = Some(name.to_owned());
                }
            }
        }
        self.header = Header::Result {
            name: name.to_owned(),
            indent,
        };
    }

    /// Flushes the panic being read, failing the test that was running.
    fn end_panic(&mut self) {
        let Some(panic) = self.panic.take() else {
            return;
        };
        let target = panic
            .after_fail
            .clone()
            .or_else(|| panic.running.first().cloned())
            .or_else(|| self.running.last().cloned())
            .or_else(|| panic.trace_test.clone());
        let Some(target) = target else {
            self.add_orphan(&panic.message.text(), panic.location.as_deref());
            return;
        };
        for other in panic.running.iter().skip(1) {
            self.fail_once(other);
        }
        self.fail_once(&target);
        if let Some(msg) = self.message_for(&target) {
            let earlier = std::mem::take(msg);
            msg.location = panic.location.clone().or(earlier.location.clone());
            for line in panic.message.lines.iter().chain(earlier.lines.iter()) {
                msg.add(line);
            }
        }
    }

    /// Output of the package that belongs to no test (a panic outside tests, TestMain).
    fn add_orphan(&mut self, text: &str, location: Option<&str>) {
        if let Some(msg) = self.message_for("") {
            if msg.location.is_none() {
                msg.location = location.map(str::to_owned);
            }
            msg.add(text);
        }
    }

    /// The package line closed a package: report its failures.
    fn end_package(&mut self, status: &str, package: &str, tail: &str) {
        self.end_panic();
        let pending = std::mem::take(&mut self.pending);
        let mut messages = std::mem::take(&mut self.messages);
        for name in &pending {
            let msg = messages.remove(name.as_str()).unwrap_or_default();
            self.report
                .push_failure(name, &msg.text(), msg.location.as_deref());
        }
        if status == "FAIL" && pending.is_empty() {
            // The package failed without a failing test: it did not build, or its setup
            // or TestMain failed.
            self.report.errors += 1;
            let block = self
                .blocks
                .iter()
                .position(|b| b.package == package)
                .map(|i| self.blocks.remove(i));
            let (message, location) = match block {
                Some(b) => {
                    let location = b.lines.iter().find_map(|(_, l)| l.clone());
                    let text: Vec<&str> = b.lines.iter().map(|(m, _)| m.as_str()).collect();
                    (text.join("\n"), location)
                }
                None => {
                    let orphan = messages.remove("").unwrap_or_default();
                    let text = orphan.text();
                    if text.is_empty() {
                        (tail.to_owned(), orphan.location)
                    } else {
                        (text, orphan.location)
                    }
                }
            };
            self.report
                .push_failure(package, &message, location.as_deref());
        }
        self.running.clear();
        self.header = Header::None;
        self.last_target = None;
        self.example = None;
        self.in_block = false;
    }

    fn block_line(&mut self, line: &str) -> bool {
        if line.starts_with('\t') || line.starts_with("  ") {
            // Continuation of the previous compiler message.
            if let Some(block) = self.blocks.last_mut()
                && let Some((message, _)) = block.lines.last_mut()
                && message.len() < MAX_MESSAGE
            {
                message.push('\n');
                message.push_str(line.trim());
                if let Some(problem) = self.report.build_errors.last_mut()
                    && problem.message.len() < MAX_MESSAGE
                {
                    problem.message.push('\n');
                    problem.message.push_str(line.trim());
                }
            }
            return true;
        }
        let (message, location) = match go_location_prefix(line) {
            Some((location, text)) => (text.to_owned(), Some(location.to_owned())),
            None if line.starts_with("note: ")
                || line.starts_with("vet: ")
                || line.starts_with("too many errors")
                || line.starts_with("go: ")
                || line.starts_with("package ")
                || line.starts_with("found packages ")
                || line.starts_with("cannot find package")
                || line.contains(": no required module provides package")
                || line.starts_with("no required module") =>
            {
                (line.to_owned(), None)
            }
            None => return false,
        };
        self.report.push_problem(&message, location.as_deref());
        if let Some(block) = self.blocks.last_mut()
            && block.lines.len() < MAX_BLOCK_LINES
        {
            block.lines.push((message, location));
        }
        true
    }

    fn panic_line(&mut self, line: &str) -> bool {
        let Some(panic) = self.panic.as_mut() else {
            return false;
        };
        if line.starts_with("goroutine ") && line.ends_with(':') {
            panic.in_trace = true;
            panic.in_running_list = false;
            return true;
        }
        if panic.in_trace {
            if let Some(frame) = line.strip_prefix('\t') {
                if panic.location.is_none() && !is_runtime_frame(&panic.last_function) {
                    let file = frame.split(" +0x").next().unwrap_or(frame).trim();
                    panic.location = Some(file.to_owned());
                }
                return true;
            }
            if line.is_empty() {
                return true;
            }
            if line.contains('(') || line.starts_with("created by ") {
                if panic.trace_test.is_none() {
                    panic.trace_test = trace_test_name(line);
                }
                panic.last_function = line.to_owned();
                return true;
            }
            return false;
        }
        if line == "running tests:" {
            panic.in_running_list = true;
            return true;
        }
        if panic.in_running_list
            && let Some(entry) = line.strip_prefix('\t')
        {
            if let Some(name) = entry.split_whitespace().next()
                && panic.running.len() < MAX_RUNNING
            {
                panic.running.push(name.to_owned());
            }
            return true;
        }
        if line.starts_with("\tpanic: ") || line.is_empty() {
            return true;
        }
        if package_line(line).is_some() || result_line(line).is_some() || run_line(line).is_some() {
            return false;
        }
        panic.message.add(line);
        true
    }
}

impl Parser for GoParser {
    fn line(&mut self, line: &str) {
        if line.starts_with("=== RUN") {
            self.verbose = true;
        }
        if self.in_block {
            if self.block_line(line) {
                return;
            }
            self.in_block = false;
        }
        if let Some((status, package, tail)) = package_line(line) {
            self.score = self.score.max(CONFIDENT);
            self.end_package(status, package, tail);
            return;
        }
        if let Some(package) = block_header(line) {
            if self.blocks.len() >= 64 {
                self.blocks.remove(0);
            }
            self.blocks.push(Block {
                package: package.to_owned(),
                lines: Vec::new(),
            });
            self.in_block = true;
            return;
        }
        if let Some(message) = line.strip_prefix("panic: ") {
            self.end_panic();
            let after_fail = match &self.header {
                Header::Result { name, .. } if self.pending.contains(name) => Some(name.clone()),
                _ => None,
            };
            let mut panic = Panic {
                after_fail,
                ..Panic::default()
            };
            panic.message.add(&format!(
                "panic: {}",
                message.trim_end_matches(" [recovered]")
            ));
            self.panic = Some(panic);
            return;
        }
        if self.panic_line(line) {
            return;
        }
        if let Some((verb, name)) = run_line(line) {
            self.bump_line_score(PER_LINE / 2);
            self.last_target = None;
            self.example = None;
            if verb == "PAUSE" {
                self.header = Header::None;
            } else {
                if verb == "RUN" && self.running.len() < MAX_RUNNING {
                    self.running.push(name.to_owned());
                }
                self.header = Header::Running(name.to_owned());
            }
            return;
        }
        if let Some((indent, outcome, name)) = result_line(line) {
            self.on_result(indent, outcome, name);
            return;
        }
        if line == "PASS" || line == "FAIL" {
            self.example = None;
            return;
        }
        if let Some((indent, location, text)) = message_line(line) {
            let target = match &self.header {
                Header::Result { name, indent: h } if indent > *h => Some(name.clone()),
                Header::Running(name) => Some(name.clone()),
                _ => None,
            };
            if let Some(target) = target {
                self.add_message(&target, Some(location), text);
                self.last_target = Some((target, indent));
            }
            return;
        }
        if let Some((target, indent)) = &self.last_target {
            let trimmed = line.trim_start_matches([' ', '\t']);
            if line.len() - trimmed.len() > *indent && !trimmed.is_empty() {
                let target = target.clone();
                self.add_message(&target, None, trimmed);
                return;
            }
            self.last_target = None;
        }
        if let Some(example) = self.example.clone() {
            self.add_message(&example, None, line);
            return;
        }
        if !line.trim().is_empty()
            && matches!(self.header, Header::None)
            && !line.starts_with("=== ")
            && (line.starts_with("exit status ") || line.contains("flag provided but not defined"))
        {
            self.add_orphan(line.trim(), None);
        }
    }

    fn score(&self) -> u32 {
        self.score.max(self.line_score.min(CONFIDENT - 1))
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        // A log cut short: report what the unfinished package showed.
        self.end_panic();
        let pending = std::mem::take(&mut self.pending);
        for name in &pending {
            let msg = self.messages.remove(name.as_str()).unwrap_or_default();
            self.report
                .push_failure(name, &msg.text(), msg.location.as_deref());
        }
        // Plain `go test` prints failures only: the passed and skipped tests it ran are
        // not in the output.
        let estimated_counts = !self.verbose && self.score >= CONFIDENT;
        TestReport {
            runner: Format::Go.runner().to_owned(),
            estimated_counts,
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::distill::testing::{failure, fixture, run};

    #[test]
    fn verbose_fixture_messages_and_panic() {
        let log = fixture("go_test_v_mixed");
        let (r, score) = run(Format::Go, &log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (10, 6, 1, 0));
        let f = failure(&r, "TestRemoveNeverNegative");
        assert_eq!(f.location.as_deref(), Some("inventory_test.go:27"));
        assert!(f.message.contains("Remove(5) on qty 1: expected error"));
        let f = failure(&r, "TestLastOfEmpty");
        assert!(
            f.message
                .starts_with("panic: runtime error: invalid memory address")
        );
        assert_eq!(
            f.location.as_deref(),
            Some("/home/dev/project/go/shop/crash/crash.go:17")
        );
        let f = failure(&r, "TestRound/#01");
        assert_eq!(f.message, "Round(2.675) = 2.68, want 2.67");
        assert_eq!(f.location.as_deref(), Some("pricing_test.go:9"));
        assert!(
            !r.failures
                .iter()
                .any(|f| f.message.contains("WAREHOUSE") || f.message.contains("tax ok"))
        );
    }

    #[test]
    fn build_failure_fixture() {
        let log = fixture("go_test_v_build_failed");
        let (r, _) = run(Format::Go, &log);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (10, 6, 1, 1));
        let f = failure(&r, "example.com/shop/report");
        assert_eq!(f.location.as_deref(), Some("report/report_test.go:6:14"));
        assert!(f.message.starts_with("cannot use Header(\"x\")"));
        assert_eq!(r.build_errors.len(), 2);
        assert_eq!(
            r.build_errors[1].location.as_deref(),
            Some("report/report_test.go:13:27")
        );
    }

    #[test]
    fn plain_mode() {
        let log = "\
--- FAIL: TestRemoveNeverNegative (0.00s)
    inventory_test.go:29: Remove(5) on qty 1: expected error, got nil
        second line of the message
--- FAIL: TestParseLine (0.00s)
    --- FAIL: TestParseLine/spaces (0.00s)
        inventory_test.go:54: got \" A-1 \", want \"A-1\"
FAIL
FAIL\texample.com/shop/inventory\t0.003s
ok  \texample.com/shop/pricing\t0.010s
ok  \texample.com/shop/cached\t(cached)
ok  \texample.com/shop/cover\t0.010s\tcoverage: 81.2% of statements
?   \texample.com/shop/cmd\t[no test files]
FAIL
";
        let (r, score) = run(Format::Go, log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (0, 3, 0, 0));
        assert!(
            r.estimated_counts,
            "plain output does not list passing tests"
        );
        let f = failure(&r, "TestRemoveNeverNegative");
        assert_eq!(
            f.message,
            "Remove(5) on qty 1: expected error, got nil\nsecond line of the message"
        );
        assert_eq!(f.location.as_deref(), Some("inventory_test.go:29"));
        let f = failure(&r, "TestParseLine/spaces");
        assert_eq!(f.location.as_deref(), Some("inventory_test.go:54"));
        assert_eq!(failure(&r, "TestParseLine").message, "");
    }

    #[test]
    fn newer_go_verbose_parallel_and_setup_failure() {
        // Go 1.20+: "=== NAME" attributes output of parallel tests.
        let log = "\
=== RUN   TestA
=== PAUSE TestA
=== RUN   TestB
=== PAUSE TestB
=== CONT  TestA
=== CONT  TestB
=== NAME  TestA
    a_test.go:10: a broke
=== NAME  TestB
    b_test.go:20: b is fine
--- PASS: TestB (0.00s)
--- FAIL: TestA (0.00s)
FAIL
FAIL\texample.com/m/a\t0.002s
# example.com/m/b
b/b.go:3:8: no required module provides package example.com/missing; to add it:
\tgo get example.com/missing
FAIL\texample.com/m/b [setup failed]
FAIL
";
        let (r, _) = run(Format::Go, log);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 0, 1));
        assert_eq!(failure(&r, "TestA").message, "a broke");
        let f = failure(&r, "example.com/m/b");
        assert_eq!(f.location.as_deref(), Some("b/b.go:3:8"));
        assert!(f.message.contains("go get example.com/missing"));
        assert_eq!(r.build_errors.len(), 1);
    }

    #[test]
    fn timeout_panic_fails_the_running_test() {
        let log = "\
=== RUN   TestQuick
--- PASS: TestQuick (0.00s)
=== RUN   TestSlow
panic: test timed out after 1s
running tests:
\tTestSlow (1s)

goroutine 17 [running]:
testing.(*M).startAlarm.func1()
\t/usr/lib/go-1.21/src/testing/testing.go:2259 +0x1fc
created by time.goFunc
\t/usr/lib/go-1.21/src/time/sleep.go:176 +0x45

goroutine 6 [sleep]:
example.com/m/slow.TestSlow(0xc000007860?)
\t/src/m/slow/slow_test.go:9 +0x1b
FAIL\texample.com/m/slow\t1.012s
";
        let (r, _) = run(Format::Go, log);
        assert_eq!((r.passed, r.failed, r.errors), (1, 1, 0));
        let f = failure(&r, "TestSlow");
        assert_eq!(f.message, "panic: test timed out after 1s");
        assert_eq!(f.location.as_deref(), Some("/src/m/slow/slow_test.go:9"));
    }

    #[test]
    fn plain_goroutine_panic_and_example_and_testmain() {
        let log = "\
panic: boom in a goroutine

goroutine 8 [running]:
example.com/m/w.worker()
\t/src/m/w/w.go:12 +0x25
created by example.com/m/w.TestWorker
\t/src/m/w/w_test.go:7 +0x1b
FAIL\texample.com/m/w\t0.004s
--- FAIL: ExampleHello (0.00s)
got:
hello
want:
bye
FAIL
FAIL\texample.com/m/ex\t0.001s
flag provided but not defined: -bogus
FAIL\texample.com/m/main\t0.001s
";
        let (r, _) = run(Format::Go, log);
        assert_eq!((r.failed, r.errors), (2, 1));
        let f = failure(&r, "TestWorker");
        assert_eq!(f.location.as_deref(), Some("/src/m/w/w.go:12"));
        assert_eq!(
            failure(&r, "ExampleHello").message,
            "got:\nhello\nwant:\nbye"
        );
        assert!(
            failure(&r, "example.com/m/main")
                .message
                .contains("flag provided")
        );
    }

    #[test]
    fn json_output_and_junk_do_not_panic() {
        let json = r#"{"Time":"2026-01-01T00:00:00Z","Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (0.00s)\n"}"#;
        let (r, score) = run(Format::Go, json);
        assert_eq!((r.failed, score), (0, 0));
        let junk: String = (0..5000u32)
            .map(|i| char::from_u32((i * 7919) % 0x3000).unwrap_or('x'))
            .collect();
        run(Format::Go, &junk);
        run(
            Format::Go,
            "--- FAIL: \n=== RUN \npanic: \ngoroutine 1 [x]:\n\t\n# \n# x\n\tgo\nok \nFAIL \n",
        );
    }
}
