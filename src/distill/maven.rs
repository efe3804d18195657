//! Reads the console output of Maven's Surefire (and Failsafe) plugins, 2.22 and 3.x,
//! with or without `-B` (colours are already stripped).
//!
//! Counts come from each module's total line after `Results:` (`Tests run: N, Failures:
//! F, Errors: E, Skipped: S`), summed over modules; per-class lines (`Tests run: ...,
//! Time elapsed: ... - in com.x.FooTest`) only stand in for a module whose total never
//! came (a log cut short). Surefire's failures are `failed`, its errors are `errors`;
//! passed = N - F - E - S (flaky tests that passed on a rerun count as passed).
//!
//! Ids are `SimpleClass.method` as in the `Results:` section (parameter index or display
//! name stripped); the message and location come from the per-test block printed during
//! the run (`<<< FAILURE!` followed by the exception and its `at` frames) when there is
//! one, else from the `Results:` line. A compilation error stops the build before tests:
//! one error per `COMPILATION ERROR` block, each compiler message a problem.

use std::collections::HashMap;

use super::{CONFIDENT, Format, MAX_FAILURES, MAX_MESSAGE, Parser, TestReport};

const PER_LINE: u32 = 20;
const PER_LINE_MAX: u32 = 600;
/// Lines kept of one exception message.
const MAX_MSG_LINES: usize = 10;
/// `at` frames looked at per failure.
const MAX_FRAMES: usize = 200;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    run: u64,
    failures: u64,
    errors: u64,
    skipped: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.run += other.run;
        self.failures += other.failures;
        self.errors += other.errors;
        self.skipped += other.skipped;
    }
}

#[derive(Debug, Default, Clone)]
struct Detail {
    message: String,
    lines: usize,
    location: Option<String>,
    /// The test class's fully qualified name, when known.
    class: String,
    frames: usize,
    in_frames: bool,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Section {
    None,
    Failures,
    Errors,
    Flakes,
    Other,
}

#[derive(Debug)]
pub struct MavenParser {
    report: TestReport,
    score: u32,
    line_score: u32,
    /// The class named by the last `Running` or per-class line.
    class: String,
    /// Per-class counts since the last module total.
    classes: Counts,
    /// Failed and errored tests of the current module's per-class blocks, by id, in order.
    details: Vec<(String, Detail)>,
    detail_index: HashMap<String, usize>,
    /// The per-test block being read.
    open: Option<usize>,
    in_results: bool,
    section: Section,
    /// Results entries of the current module: (id, message, is_error).
    results: Vec<(String, String, bool)>,
    compile_blocks: u64,
    compile_seen: Vec<(String, Option<String>)>,
}

impl Default for MavenParser {
    fn default() -> Self {
        MavenParser {
            report: TestReport::new(Format::Maven),
            score: 0,
            line_score: 0,
            class: String::new(),
            classes: Counts::default(),
            details: Vec::new(),
            detail_index: HashMap::new(),
            open: None,
            in_results: false,
            section: Section::None,
            results: Vec::new(),
            compile_blocks: 0,
            compile_seen: Vec::new(),
        }
    }
}

/// Strips Maven's `[INFO] `, `[ERROR] `, `[WARNING] ` level and returns it.
fn strip_level(line: &str) -> (&str, &str) {
    for level in ["[INFO]", "[ERROR]", "[WARNING]", "[WARN]", "[DEBUG]"] {
        if let Some(rest) = line.strip_prefix(level) {
            return (level, rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    ("", line)
}

/// `Tests run: 4, Failures: 1, Errors: 1, Skipped: 1[, Flakes: 1][, Time elapsed: ...]`.
fn counts_line(text: &str) -> Option<Counts> {
    let rest = text.strip_prefix("Tests run: ")?;
    let mut counts = Counts::default();
    let mut seen = 0;
    for (i, part) in rest.split(", ").enumerate() {
        let (key, value) = if i == 0 {
            ("Tests run", part)
        } else {
            match part.split_once(": ") {
                Some(kv) => kv,
                None => break,
            }
        };
        let number: String = value.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = number.parse::<u64>() else {
            continue;
        };
        match key {
            "Tests run" => counts.run = n,
            "Failures" => counts.failures = n,
            "Errors" => counts.errors = n,
            "Skipped" => counts.skipped = n,
            _ => continue,
        }
        seen += 1;
    }
    (seen >= 4).then_some(counts)
}

/// The class after ` - in ` (2.x) or ` -- in ` (3.x) on a per-class line.
fn class_of_counts_line(text: &str) -> Option<&str> {
    let (_, class) = text.rsplit_once(" in ")?;
    let class = class.trim();
    (!class.is_empty() && !class.contains(' ')).then_some(class)
}

fn simple_class(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

/// Cuts a method name at its parameters or index: `parseCents{String, long}[2]` →
/// `parseCents`, `parse[1]` → `parse`, `add(int, int)` → `add`.
fn strip_params(method: &str) -> &str {
    match method.find(['{', '[', '(']) {
        Some(0) | None => method,
        Some(i) => &method[..i],
    }
}

/// A per-test header: `parse(com.x.LedgerTest)  Time elapsed: 0.01 s  <<< FAILURE!`
/// (2.x, JUnit 4), `parse  Time elapsed: ...` (2.x, JUnit 5), `com.x.LedgerTest.parse --
/// Time elapsed: ... <<< ERROR!` (3.x) → (class if named, method, is_error).
fn test_header(text: &str) -> Option<(Option<&str>, &str, bool)> {
    let is_error = if text.ends_with("<<< ERROR!") {
        true
    } else if text.ends_with("<<< FAILURE!") {
        false
    } else {
        return None;
    };
    if text.starts_with("Tests run:") {
        return None;
    }
    let at = text.find("Time elapsed:")?;
    let head = text[..at].trim_end();
    let head = head.strip_suffix(" --").unwrap_or(head).trim();
    if head.is_empty() {
        return None;
    }
    // JUnit 4 style: method(class).
    if head.ends_with(')')
        && let Some(open) = head.rfind('(')
    {
        let class = &head[open + 1..head.len() - 1];
        if !class.is_empty() && !class.contains([' ', ',']) && class.contains('.') {
            return Some((Some(class), &head[..open], is_error));
        }
    }
    let base = strip_params(head);
    if !base.contains(' ')
        && let Some((class, method)) = base.rsplit_once('.')
    {
        return Some((Some(class), method, is_error));
    }
    Some((None, head, is_error))
}

/// Frames of the test framework and the JDK, skipped when locating a failure.
fn is_framework_frame(frame: &str) -> bool {
    [
        "org.junit.",
        "junit.",
        "org.opentest4j.",
        "java.",
        "jdk.",
        "sun.",
        "javax.",
        "org.apache.maven.",
        "org.assertj.",
        "org.hamcrest.",
        "org.mockito.",
        "org.testng.",
        "kotlin.",
        "org.spockframework.",
        "com.google.common.truth.",
    ]
    .iter()
    .any(|p| frame.starts_with(p))
}

/// `at com.x.LedgerTest.parse(LedgerTest.java:42)` → (`com.x.LedgerTest.parse`,
/// `LedgerTest.java:42`).
fn frame(line: &str) -> Option<(&str, Option<&str>)> {
    let rest = line.trim_start().strip_prefix("at ")?;
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    let inside = &rest[open + 1..close];
    let location = inside
        .rsplit_once(':')
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|_| inside);
    Some((&rest[..open], location))
}

/// `/path/X.java:[12,5] cannot find symbol` → (message, `/path/X.java:12`).
fn compiler_line(text: &str) -> Option<(String, Option<String>)> {
    let open = text.find(":[")?;
    let file = &text[..open];
    if !(file.ends_with(".java") || file.ends_with(".kt") || file.ends_with(".groovy")) {
        return None;
    }
    let close = text[open..].find(']')? + open;
    let position = &text[open + 2..close];
    let line = position.split(',').next().unwrap_or("");
    let message = text[close + 1..].trim();
    Some((message.to_owned(), Some(format!("{file}:{line}"))))
}

impl MavenParser {
    fn bump(&mut self) {
        self.line_score = (self.line_score + PER_LINE).min(PER_LINE_MAX);
    }

    fn confident(&mut self) {
        self.score = self.score.max(CONFIDENT);
    }

    fn close_detail(&mut self) {
        self.open = None;
    }

    /// A module's totals: count them and report its failures.
    fn end_module(&mut self, totals: Counts) {
        self.close_detail();
        self.report.passed += totals
            .run
            .saturating_sub(totals.failures + totals.errors + totals.skipped);
        self.report.failed += totals.failures;
        self.report.errors += totals.errors;
        self.report.skipped += totals.skipped;
        self.classes = Counts::default();
        let results = std::mem::take(&mut self.results);
        if results.is_empty() {
            self.report_details();
        } else {
            let mut done: Vec<(String, String)> = Vec::new();
            for (id, message, _) in results {
                let detail = self
                    .detail_index
                    .get(&id)
                    .and_then(|i| self.details.get(*i))
                    .map(|(_, d)| d.clone());
                let (message, location) = match detail {
                    Some(d) if !d.message.is_empty() => (d.message, d.location),
                    Some(d) => (message, d.location),
                    None => (message, None),
                };
                if done.iter().any(|(i, m)| *i == id && *m == message) {
                    continue;
                }
                self.report.push_failure(&id, &message, location.as_deref());
                done.push((id, message));
            }
        }
        self.details.clear();
        self.detail_index.clear();
        self.in_results = false;
        self.section = Section::None;
    }

    /// No `Results:` entries: report the per-test blocks seen.
    fn report_details(&mut self) {
        for (id, d) in std::mem::take(&mut self.details) {
            self.report
                .push_failure(&id, &d.message, d.location.as_deref());
        }
    }

    fn detail_line(&mut self, line: &str) -> bool {
        let Some(i) = self.open else {
            return false;
        };
        let Some((_, d)) = self.details.get_mut(i) else {
            return false;
        };
        if line.trim().is_empty() || line.starts_with('[') {
            self.open = None;
            return false;
        }
        if let Some((function, location)) = frame(line) {
            d.in_frames = true;
            d.frames += 1;
            if d.location.is_none() && d.frames <= MAX_FRAMES {
                let ours = !d.class.is_empty() && function.starts_with(d.class.as_str());
                if ours || (d.class.is_empty() && !is_framework_frame(function)) {
                    d.location = location.map(str::to_owned);
                }
            }
            return true;
        }
        let trimmed = line.trim();
        if d.in_frames || trimmed.starts_with("Caused by:") || trimmed.starts_with("...") {
            d.in_frames = true;
            return true;
        }
        if d.lines < MAX_MSG_LINES && d.message.len() < MAX_MESSAGE {
            if !d.message.is_empty() {
                d.message.push('\n');
            }
            d.message.push_str(line.trim_end());
            d.lines += 1;
        }
        true
    }

    fn results_line(&mut self, text: &str) {
        let trimmed = text.trim();
        match trimmed {
            "Failures:" | "Failed tests:" => {
                self.section = Section::Failures;
                return;
            }
            "Errors:" | "Tests in error:" => {
                self.section = Section::Errors;
                return;
            }
            "Flakes:" => {
                self.section = Section::Flakes;
                return;
            }
            "" => return,
            _ => {}
        }
        if trimmed.ends_with(':') && !trimmed.contains(' ') {
            self.section = Section::Other;
            return;
        }
        if !matches!(self.section, Section::Failures | Section::Errors) {
            return;
        }
        if let Some(run) = trimmed.strip_prefix("Run ")
            && run.starts_with(|c: char| c.is_ascii_digit())
        {
            // A rerun of the entry above: its message when the entry had none.
            if let Some((_, message, _)) = self.results.last_mut()
                && message.is_empty()
            {
                let text = run.split_once(": ").map(|(_, t)| t).unwrap_or("");
                let text = text.split_once(' ').map(|(_, m)| m).unwrap_or(text);
                *message = text.to_owned();
            }
            return;
        }
        let (head, message) = match trimmed.split_once(' ') {
            Some((h, m)) => (h, m.trim()),
            None => (trimmed, ""),
        };
        let name = head.split(':').next().unwrap_or(head);
        let name = match name.split_once("->") {
            Some((n, _)) => n,
            None => name,
        };
        let id = match name.rsplit_once('.') {
            Some((class, method)) => format!("{class}.{}", strip_params(method)),
            None => strip_params(name).to_owned(),
        };
        if id.is_empty() || self.results.len() >= MAX_FAILURES {
            return;
        }
        self.results
            .push((id, message.to_owned(), self.section == Section::Errors));
    }

    fn compile_line(&mut self, level: &str, text: &str) -> bool {
        if level == "[ERROR]"
            && let Some((message, location)) = compiler_line(text)
        {
            if self.compile_seen.len() < MAX_FAILURES
                && !self
                    .compile_seen
                    .iter()
                    .any(|(m, l)| *m == message && *l == location)
            {
                self.report.push_problem(&message, location.as_deref());
                self.compile_seen.push((message, location));
            }
            return true;
        }
        let trimmed = text.trim();
        if (level == "[ERROR]" || level.is_empty())
            && !self.compile_seen.is_empty()
            && (trimmed.starts_with("symbol:") || trimmed.starts_with("location:"))
            && let Some(problem) = self.report.build_errors.last_mut()
        {
            if problem.message.len() < MAX_MESSAGE && !problem.message.contains(trimmed) {
                problem.message.push('\n');
                problem.message.push_str(trimmed);
            }
            return true;
        }
        false
    }
}

impl Parser for MavenParser {
    fn line(&mut self, line: &str) {
        let (level, text) = strip_level(line);
        if self.detail_line(line) {
            return;
        }
        if text.starts_with("COMPILATION ERROR") {
            self.confident();
            self.compile_blocks += 1;
            self.report.errors += 1;
            return;
        }
        if self.compile_line(level, text) {
            return;
        }
        if text.starts_with("Failed to execute goal") && text.contains("Compilation failure") {
            self.confident();
            if self.compile_blocks == 0 {
                self.compile_blocks += 1;
                self.report.errors += 1;
            }
            return;
        }
        if let Some(counts) = counts_line(text) {
            if text.contains("Time elapsed") || class_of_counts_line(text).is_some() {
                // One class.
                self.bump();
                if let Some(class) = class_of_counts_line(text) {
                    self.class = class.to_owned();
                }
                self.classes.add(counts);
                self.in_results = false;
            } else if !level.is_empty() || self.in_results {
                self.confident();
                self.end_module(counts);
            } else {
                self.bump();
            }
            return;
        }
        if let Some(class) = text.strip_prefix("Running ") {
            let class = class.trim();
            if !class.is_empty() && !class.contains(' ') && class.contains('.') {
                self.bump();
                self.class = class.to_owned();
            }
            return;
        }
        if !level.is_empty() && text.trim() == "T E S T S" {
            self.confident();
            return;
        }
        if !level.is_empty() && text.trim() == "Results:" {
            self.in_results = true;
            self.section = Section::None;
            return;
        }
        if !level.is_empty()
            && (text.starts_with("BUILD FAILURE") || text.starts_with("BUILD SUCCESS"))
        {
            self.confident();
            return;
        }
        if let Some((class, method, _)) = test_header(text) {
            self.bump();
            let class = class
                .map(str::to_owned)
                .unwrap_or_else(|| self.class.clone());
            let id = if class.is_empty() {
                strip_params(method).to_owned()
            } else {
                format!("{}.{}", simple_class(&class), strip_params(method))
            };
            if self.details.len() < MAX_FAILURES {
                self.detail_index
                    .entry(id.clone())
                    .or_insert(self.details.len());
                self.open = Some(self.details.len());
                self.details.push((
                    id,
                    Detail {
                        class,
                        ..Detail::default()
                    },
                ));
            }
            return;
        }
        if self.in_results && !level.is_empty() {
            self.results_line(text);
        }
    }

    fn score(&self) -> u32 {
        self.score.max(self.line_score.min(CONFIDENT - 1))
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        // A module whose total never came (a log cut short): its classes' counts.
        let classes = self.classes;
        if classes.run > 0 || !self.details.is_empty() || !self.results.is_empty() {
            self.end_module(classes);
        }
        TestReport {
            runner: Format::Maven.runner().to_owned(),
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::distill::testing::{failure, fixture, run};

    #[test]
    fn surefire_2_fixture() {
        let log = fixture("maven_surefire_mixed");
        let (r, score) = run(Format::Maven, &log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (6, 3, 1, 1));
        assert_eq!(r.failures.len(), 4);
        let f = failure(&r, "LedgerTest.parseCents");
        assert_eq!(
            f.message,
            "org.opentest4j.AssertionFailedError: expected: <150> but was: <105>"
        );
        assert_eq!(f.location.as_deref(), Some("LedgerTest.java:30"));
        let f = failure(&r, "ReportTest.crashesOnNull");
        assert!(f.message.contains("because \"s\" is null"));
        assert_eq!(f.location.as_deref(), Some("ReportTest.java:16"));
        let f = failure(&r, "LedgerTest.lastOfEmptyThrowsNicely");
        assert!(!f.message.contains("Caused by"));
    }

    #[test]
    fn surefire_3_multi_module_junit4() {
        let log = "\
[INFO] Reactor Build Order:
[INFO] --- surefire:3.2.5:test (default-test) @ core ---
[INFO] -------------------------------------------------------
[INFO]  T E S T S
[INFO] -------------------------------------------------------
[INFO] Running com.x.LedgerTest
[ERROR] Tests run: 4, Failures: 1, Errors: 1, Skipped: 1, Time elapsed: 0.05 s <<< FAILURE! -- in com.x.LedgerTest
[ERROR] com.x.LedgerTest.parse -- Time elapsed: 0.01 s <<< FAILURE!
java.lang.AssertionError: expected:<1> but was:<2>
\tat org.junit.Assert.fail(Assert.java:89)
\tat com.x.LedgerTest.parse(LedgerTest.java:42)

[ERROR] com.x.LedgerTest.boom -- Time elapsed: 0.01 s <<< ERROR!
java.lang.IllegalStateException: no ledger
\tat com.x.Ledger.open(Ledger.java:17)
\tat com.x.LedgerTest.boom(LedgerTest.java:50)

[INFO] 
[INFO] Results:
[INFO] 
[ERROR] Failures: 
[ERROR]   LedgerTest.parse:42 expected:<1> but was:<2>
[ERROR] Errors: 
[ERROR]   LedgerTest.boom:50 » IllegalState no ledger
[INFO] 
[ERROR] Tests run: 4, Failures: 1, Errors: 1, Skipped: 1
[INFO] 
[INFO] --- surefire:3.2.5:test (default-test) @ api ---
[INFO] Running com.x.api.ClientTest
[ERROR] Tests run: 3, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.02 s <<< FAILURE! -- in com.x.api.ClientTest
[ERROR] com.x.api.ClientTest.retries[1] -- Time elapsed: 0.01 s <<< FAILURE!
java.lang.AssertionError: retries
\tat com.x.api.ClientTest.retries(ClientTest.java:9)

[INFO] Running com.x.api.FlakyTest
[WARNING] Tests run: 2, Failures: 0, Errors: 0, Skipped: 0, Flakes: 1, Time elapsed: 0.01 s -- in com.x.api.FlakyTest
[INFO] 
[INFO] Results:
[INFO] 
[ERROR] Failures: 
[ERROR]   ClientTest.retries:9 retries
[WARNING] Flakes: 
[WARNING] FlakyTest.sometimes
[ERROR]   Run 1: FlakyTest.sometimes:12 expected true
[INFO]   Run 2: PASS
[INFO] 
[ERROR] Tests run: 5, Failures: 1, Errors: 0, Skipped: 0, Flakes: 1
[INFO] BUILD FAILURE
";
        let (r, score) = run(Format::Maven, log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (5, 2, 1, 1));
        let ids: Vec<&str> = r.failures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            ["LedgerTest.parse", "LedgerTest.boom", "ClientTest.retries"]
        );
        let f = failure(&r, "LedgerTest.boom");
        assert_eq!(f.message, "java.lang.IllegalStateException: no ledger");
        assert_eq!(f.location.as_deref(), Some("LedgerTest.java:50"));
        assert_eq!(
            failure(&r, "LedgerTest.parse").location.as_deref(),
            Some("LedgerTest.java:42")
        );
    }

    #[test]
    fn surefire_2_junit4_and_truncated_log() {
        let log = "\
[INFO] Running com.x.LedgerTest
[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.05 s <<< FAILURE! - in com.x.LedgerTest
[ERROR] parse(com.x.LedgerTest)  Time elapsed: 0.01 s  <<< FAILURE!
java.lang.AssertionError: expected:<1> but was:<2>
\tat org.junit.Assert.fail(Assert.java:89)
\tat com.x.LedgerTest.parse(LedgerTest.java:42)

[INFO] Running com.x.OtherTest
";
        let (r, _) = run(Format::Maven, log);
        assert_eq!((r.passed, r.failed), (1, 1));
        let f = failure(&r, "LedgerTest.parse");
        assert_eq!(f.location.as_deref(), Some("LedgerTest.java:42"));
    }

    #[test]
    fn compilation_error() {
        let log = "\
[INFO] --- maven-compiler-plugin:3.10.1:testCompile (default-testCompile) @ ledger ---
[INFO] Compiling 2 source files to /p/target/test-classes
[INFO] -------------------------------------------------------------
[ERROR] COMPILATION ERROR : 
[INFO] -------------------------------------------------------------
[ERROR] /p/src/test/java/com/x/LedgerTest.java:[12,5] cannot find symbol
  symbol:   variable y
  location: class com.x.LedgerTest
[INFO] 1 error
[INFO] -------------------------------------------------------------
[INFO] BUILD FAILURE
[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.10.1:testCompile (default-testCompile) on project ledger: Compilation failure
[ERROR] /p/src/test/java/com/x/LedgerTest.java:[12,5] cannot find symbol
[ERROR]   symbol:   variable y
[ERROR]   location: class com.x.LedgerTest
";
        let (r, score) = run(Format::Maven, log);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.errors), (0, 0, 1));
        assert!(r.failures.is_empty());
        assert_eq!(r.build_errors.len(), 1);
        assert_eq!(
            r.build_errors[0].location.as_deref(),
            Some("/p/src/test/java/com/x/LedgerTest.java:12")
        );
        assert!(
            r.build_errors[0]
                .message
                .starts_with("cannot find symbol\nsymbol:")
        );
    }

    #[test]
    fn junk_does_not_panic() {
        run(
            Format::Maven,
            "[ERROR] Tests run: x\n[ERROR]   .:\n[INFO] Results:\n[ERROR] Failures:\n[ERROR]   \n\
             [ERROR]   Run 1:\n[ERROR] (x)  Time elapsed: 0 s  <<< ERROR!\n\tat (\n[ERROR] /a.java:[\n\
             Tests run: 1, Failures: 9, Errors: 9, Skipped: 9",
        );
        let junk: String = (0..5000u32)
            .map(|i| char::from_u32((i * 7919) % 0x3000).unwrap_or('x'))
            .collect();
        run(Format::Maven, &junk);
    }
}
