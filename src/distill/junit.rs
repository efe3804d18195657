//! Reads JUnit XML reports (Surefire, Gradle, pytest `--junitxml`, jest-junit, nextest,
//! `go-junit-report`, node's junit reporter) as a stream.
//!
//! Every `<testcase>` counts once, wherever it sits (`<testsuites>`, nested
//! `<testsuite>`s, or a bare `<testsuite>`): with a `<failure>` it failed, with an
//! `<error>` (and no failure) it errored (`errors`, and it is among the failures), with
//! `<skipped>` it was skipped, else it passed. Surefire's `<rerunFailure>`/`<flaky...>`
//! elements (runs before a final pass) do not count. A `<testsuite>` that declares
//! failures or errors but holds no testcase (a suite that failed to load) is one error
//! with the suite's name as id.
//!
//! Id: `classname.name`; the name alone when the classname is empty or the name already
//! starts with it (jest-junit's `"{classname} {title}"`); the classname alone when the
//! name is empty. Message: the `message` attribute, else the first lines of the element's
//! text. Location: the first `file:line` in the failure text (or message) outside test
//! frameworks and runtimes, else the testcase's `file` and `line` attributes.
//!
//! Memory stays bounded whatever the document: text runs, attribute values and comments
//! are cut at [`MAX_TEXT`] bytes before the XML reader sees them, and invalid UTF-8 is
//! replaced. Malformed or truncated XML gives what was read up to the damage; only I/O
//! errors of the underlying reader are errors.

use std::io::{BufRead, Read};

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use super::{Format, MAX_MESSAGE, TestReport};

/// Bytes kept of one text run, attribute value, comment or CDATA section.
const MAX_TEXT: usize = 16 * 1024;
/// Lines of a failure's text used as its message when it has no `message` attribute.
const MESSAGE_LINES: usize = 5;
/// Errors from the XML reader tolerated before giving up on a damaged document.
const MAX_XML_ERRORS: usize = 1_000;
/// Suites tracked in depth (deeper nesting is still read, without per-suite checks).
const MAX_DEPTH: usize = 256;

/// Reads a JUnit XML document from `reader` in bounded memory.
pub fn parse_xml(reader: impl BufRead) -> std::io::Result<TestReport> {
    let mut xml = Reader::from_reader(Bounded::new(reader));
    {
        let config = xml.config_mut();
        config.check_end_names = false;
        config.allow_unmatched_ends = true;
        config.allow_dangling_amp = true;
        config.check_comments = false;
        config.expand_empty_elements = false;
    }
    let mut state = State::default();
    let mut buf = Vec::with_capacity(4096);
    let mut errors = 0;
    loop {
        buf.clear();
        let before = xml.buffer_position();
        match xml.read_event_into(&mut buf) {
            Ok(Event::Eof) => break,
            Ok(event) => state.event(event),
            Err(quick_xml::Error::Io(e)) => {
                return Err(std::io::Error::new(e.kind(), e.to_string()));
            }
            Err(_) => {
                errors += 1;
                if errors > MAX_XML_ERRORS || xml.buffer_position() == before {
                    break;
                }
            }
        }
        if buf.capacity() > 4 * MAX_TEXT {
            buf = Vec::with_capacity(4096);
        }
    }
    Ok(state.finish())
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    #[default]
    Passed,
    Skipped,
    Error,
    Failed,
}

#[derive(Debug, Default)]
struct Case {
    id: String,
    outcome: Outcome,
    message: String,
    /// Text of the `<failure>` or `<error>` element deciding the outcome.
    body: String,
    file: Option<String>,
    line: Option<String>,
}

#[derive(Debug, Default)]
struct Suite {
    name: String,
    declared_problems: u64,
    cases: u64,
}

#[derive(Debug)]
struct State {
    report: TestReport,
    case: Option<Case>,
    /// Inside the `<failure>`/`<error>` whose text is the body.
    collecting: bool,
    suites: Vec<Suite>,
    depth: usize,
}

impl Default for State {
    fn default() -> Self {
        State {
            report: TestReport::new(Format::Junit),
            case: None,
            collecting: false,
            suites: Vec::new(),
            depth: 0,
        }
    }
}

fn attr(element: &BytesStart, key: &str) -> Option<String> {
    element
        .attributes()
        .with_checks(false)
        .flatten()
        .find(|a| a.key.local_name().as_ref() == key)
        .map(|a| match a.normalized_value(XmlVersion::Implicit1_0) {
            Ok(v) => v.into_owned(),
            Err(_) => a.value.into_owned(),
        })
}

fn entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

fn case_id(classname: &str, name: &str) -> String {
    let classname = classname.trim();
    let name = name.trim();
    if name.is_empty() {
        classname.to_owned()
    } else if classname.is_empty() || name.starts_with(classname) {
        name.to_owned()
    } else {
        format!("{classname}.{name}")
    }
}

impl State {
    fn event(&mut self, event: Event) {
        match event {
            Event::Start(e) => self.start(&e, false),
            Event::Empty(e) => self.start(&e, true),
            Event::End(e) => {
                let name = e.local_name();
                self.end(name.as_ref());
            }
            Event::Text(t) if self.collecting => self.text(&t.xml10_content()),
            Event::CData(t) if self.collecting => self.text(&t),
            Event::GeneralRef(r) if self.collecting => {
                let c = if r.is_char_ref() {
                    r.resolve_char_ref().ok().flatten()
                } else {
                    entity(&r)
                };
                match c {
                    Some(c) => self.text(c.encode_utf8(&mut [0; 4])),
                    None => self.text(&format!("&{};", &*r)),
                }
            }
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        if let Some(case) = self.case.as_mut()
            && case.body.len() < MAX_TEXT
        {
            let room = MAX_TEXT - case.body.len();
            let mut cut = text.len().min(room);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            case.body.push_str(&text[..cut]);
        }
    }

    fn start(&mut self, e: &BytesStart, empty: bool) {
        let local = e.local_name();
        match local.as_ref() {
            "testsuite" if !empty => {
                self.depth += 1;
                if self.suites.len() < MAX_DEPTH {
                    let number = |k| {
                        attr(e, k)
                            .and_then(|v| v.trim().parse::<u64>().ok())
                            .unwrap_or(0)
                    };
                    self.suites.push(Suite {
                        name: attr(e, "name").unwrap_or_default(),
                        declared_problems: number("errors") + number("failures"),
                        cases: 0,
                    });
                }
            }
            "testcase" => {
                self.end_case();
                for suite in self.suites.iter_mut() {
                    suite.cases += 1;
                }
                let classname = attr(e, "classname").unwrap_or_default();
                let name = attr(e, "name").unwrap_or_default();
                self.case = Some(Case {
                    id: case_id(&classname, &name),
                    file: attr(e, "file"),
                    line: attr(e, "line"),
                    ..Case::default()
                });
                if empty {
                    self.end_case();
                }
            }
            kind @ ("failure" | "error" | "skipped") => {
                let Some(case) = self.case.as_mut() else {
                    return;
                };
                let outcome = match kind {
                    "failure" => Outcome::Failed,
                    "error" => Outcome::Error,
                    _ => Outcome::Skipped,
                };
                if outcome <= case.outcome {
                    return;
                }
                case.outcome = outcome;
                case.message = attr(e, "message").unwrap_or_default();
                case.body.clear();
                self.collecting = !empty && outcome != Outcome::Skipped;
            }
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "failure" | "error" | "skipped" => self.collecting = false,
            "testcase" => self.end_case(),
            "testsuite" => {
                self.end_case();
                if self.depth > self.suites.len() {
                    self.depth -= 1;
                } else if let Some(suite) = self.suites.pop() {
                    self.depth = self.depth.saturating_sub(1);
                    if suite.cases == 0 && suite.declared_problems > 0 {
                        // A suite that failed as a whole (it did not load or set up).
                        self.report.errors += 1;
                        self.report.push_failure(&suite.name, "", None);
                    }
                }
            }
            _ => {}
        }
    }

    fn end_case(&mut self) {
        self.collecting = false;
        let Some(case) = self.case.take() else {
            return;
        };
        match case.outcome {
            Outcome::Passed => {
                self.report.passed += 1;
                self.report.push_passing(&case.id);
            }
            Outcome::Skipped => self.report.skipped += 1,
            Outcome::Failed | Outcome::Error => {
                if case.outcome == Outcome::Failed {
                    self.report.failed += 1;
                } else {
                    self.report.errors += 1;
                }
                let message = if case.message.trim().is_empty() {
                    first_lines(&case.body, MESSAGE_LINES)
                } else {
                    first_lines(&case.message, MESSAGE_LINES * 2)
                };
                let location = find_location(&case.body)
                    .or_else(|| find_location(&case.message))
                    .or_else(|| match (&case.file, &case.line) {
                        (Some(f), Some(l)) if !f.is_empty() => Some(format!("{f}:{l}")),
                        (Some(f), None) if !f.is_empty() => Some(f.clone()),
                        _ => None,
                    });
                self.report
                    .push_failure(&case.id, &message, location.as_deref());
            }
        }
    }

    fn finish(mut self) -> TestReport {
        // A document cut short: the testcase being read counts as far as it got.
        self.end_case();
        self.report
    }
}

/// The first `n` non-empty lines of `text`, at most [`MAX_MESSAGE`] characters.
fn first_lines(text: &str, n: usize) -> String {
    let mut out = String::new();
    for line in text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
    {
        if out.len() >= MAX_MESSAGE {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
        if out.lines().count() >= n {
            break;
        }
    }
    out
}

const SOURCE_EXTENSIONS: [&str; 24] = [
    "py", "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "go", "rs", "java", "kt", "kts",
    "scala", "groovy", "rb", "c", "cc", "cpp", "h", "cs", "php", "swift",
];

/// Paths of runtimes and test frameworks, skipped when locating a failure.
fn is_foreign(path: &str, line: &str) -> bool {
    let t = line.trim_start();
    let frame = t.strip_prefix("at ").unwrap_or("");
    // `at app//com.x.Test.m(...)`, `at java.base/java.lang.Thread.run(...)`.
    let call = frame.split('(').next().unwrap_or(frame);
    let frame = call.rsplit('/').next().unwrap_or(call);
    path.contains("node_modules")
        || path.starts_with("node:")
        || path.contains("site-packages")
        || path.contains("/lib/python")
        || path.contains("/usr/lib/go")
        || path.contains("/src/testing/")
        || path.contains("/src/runtime/")
        || path.contains("/rustc/")
        || path.contains("/.cargo/registry/")
        || [
            "org.junit.",
            "junit.",
            "org.opentest4j.",
            "java.",
            "jdk.",
            "sun.",
            "kotlin.",
            "org.assertj.",
            "org.hamcrest.",
            "org.gradle.",
            "org.apache.maven.",
        ]
        .iter()
        .any(|p| frame.starts_with(p))
}

/// The first `file:line` in `text` (`path/x.py:12`, `(Foo.java:42)`, `x_test.go:9:`,
/// `File "x.py", line 12`), skipping frames of runtimes and test frameworks.
pub(crate) fn find_location(text: &str) -> Option<String> {
    for line in text.lines() {
        if let Some(found) = python_location(line).or_else(|| line_location(line))
            && !is_foreign(&found, line)
        {
            return Some(found);
        }
    }
    None
}

/// `File "tests/x.py", line 12, in test_y` → `tests/x.py:12`.
fn python_location(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!number.is_empty()).then(|| format!("{file}:{number}"))
}

/// The first `path.ext:line[:col]` token of a line, `ext` a source file extension.
fn line_location(line: &str) -> Option<String> {
    let bytes = line.as_bytes();
    let mut search = 0;
    while let Some(found) = line[search..].find(':') {
        let colon = search + found;
        search = colon + 1;
        let digits = bytes[colon + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            continue;
        }
        let start = line[..colon]
            .rfind(|c: char| c.is_whitespace() || "()[]<>\"'`,;=".contains(c))
            .map_or(0, |i| i + 1);
        let path = &line[start..colon];
        let path = path.strip_prefix("file://").unwrap_or(path);
        let Some((_, ext)) = path.rsplit_once('.') else {
            continue;
        };
        if !SOURCE_EXTENSIONS.contains(&ext) {
            continue;
        }
        return Some(format!("{path}:{}", &line[colon + 1..colon + 1 + digits]));
    }
    None
}

/// What the byte filter is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Within {
    Text,
    /// A tag (or `<!DOCTYPE`), with the quote of the attribute value being read.
    Tag(Option<u8>),
    Comment,
    CData,
    Pi,
}

/// Passes an XML byte stream through, cutting every text run, attribute value, comment
/// and CDATA section at [`MAX_TEXT`] bytes (so that no event the XML reader buffers can
/// grow without bound) and replacing invalid UTF-8 with `?`.
struct Bounded<R> {
    inner: R,
    out: Vec<u8>,
    pos: usize,
    within: Within,
    /// Bytes kept of the current run.
    run: usize,
    /// The first bytes after `<`, to tell comments and CDATA from tags.
    opening: Vec<u8>,
    /// The last three bytes read (kept or not), to find `-->`, `]]>` and `?>`.
    tail: [u8; 3],
    /// A UTF-8 sequence not yet complete.
    seq: [u8; 4],
    seq_len: usize,
    seq_need: usize,
    done: bool,
    /// The input chunk being filtered.
    scratch: Vec<u8>,
}

impl<R: BufRead> Bounded<R> {
    fn new(inner: R) -> Self {
        Bounded {
            inner,
            out: Vec::with_capacity(64 * 1024),
            pos: 0,
            within: Within::Text,
            run: 0,
            opening: Vec::with_capacity(8),
            tail: [0; 3],
            seq: [0; 4],
            seq_len: 0,
            seq_need: 0,
            done: false,
            scratch: Vec::with_capacity(64 * 1024),
        }
    }

    /// Emits one byte through the UTF-8 check.
    fn emit(&mut self, b: u8) {
        if self.seq_need > 0 {
            let lead = self.seq[0];
            let ok = if self.seq_len == 1 {
                match lead {
                    0xE0 => (0xA0..=0xBF).contains(&b),
                    0xED => (0x80..=0x9F).contains(&b),
                    0xF0 => (0x90..=0xBF).contains(&b),
                    0xF4 => (0x80..=0x8F).contains(&b),
                    _ => (0x80..=0xBF).contains(&b),
                }
            } else {
                (0x80..=0xBF).contains(&b)
            };
            if ok {
                self.seq[self.seq_len] = b;
                self.seq_len += 1;
                self.seq_need -= 1;
                if self.seq_need == 0 {
                    self.out.extend_from_slice(&self.seq[..self.seq_len]);
                    self.seq_len = 0;
                }
                return;
            }
            self.broken();
        }
        match b {
            0x00..=0x7F => self.out.push(b),
            0xC2..=0xDF => self.begin(b, 1),
            0xE0..=0xEF => self.begin(b, 2),
            0xF0..=0xF4 => self.begin(b, 3),
            _ => self.out.push(b'?'),
        }
    }

    fn begin(&mut self, b: u8, need: usize) {
        self.seq[0] = b;
        self.seq_len = 1;
        self.seq_need = need;
    }

    /// An incomplete UTF-8 sequence: replaced.
    fn broken(&mut self) {
        if self.seq_need > 0 || self.seq_len > 0 {
            self.out.push(b'?');
        }
        self.seq_len = 0;
        self.seq_need = 0;
    }

    fn keep(&mut self, b: u8) {
        self.run += 1;
        self.emit(b);
    }

    fn byte(&mut self, b: u8) {
        self.tail = [self.tail[1], self.tail[2], b];
        match self.within {
            Within::Text => {
                if b == b'<' {
                    self.broken();
                    self.out.push(b);
                    self.within = Within::Tag(None);
                    self.opening.clear();
                    self.run = 0;
                } else if self.run < MAX_TEXT {
                    self.keep(b);
                }
            }
            Within::Tag(quote) => {
                if self.opening.len() < 8 && quote.is_none() {
                    self.opening.push(b);
                    match &self.opening[..] {
                        b"!--" => {
                            self.out.push(b);
                            self.within = Within::Comment;
                            self.run = 0;
                            return;
                        }
                        b"![CDATA[" => {
                            self.out.push(b);
                            self.within = Within::CData;
                            self.run = 0;
                            return;
                        }
                        b"?" => {
                            self.out.push(b);
                            self.within = Within::Pi;
                            self.run = 0;
                            return;
                        }
                        _ => {}
                    }
                }
                match quote {
                    Some(q) if b == q => {
                        self.broken();
                        self.out.push(b);
                        self.within = Within::Tag(None);
                        self.run = 0;
                    }
                    Some(_) => {
                        if self.run < MAX_TEXT {
                            self.keep(b);
                        }
                    }
                    None if b == b'"' || b == b'\'' => {
                        self.broken();
                        self.out.push(b);
                        self.within = Within::Tag(Some(b));
                        self.run = 0;
                    }
                    None if b == b'>' => {
                        self.broken();
                        self.out.push(b);
                        self.within = Within::Text;
                        self.run = 0;
                    }
                    None => {
                        if self.run < MAX_TEXT {
                            self.keep(b);
                        }
                    }
                }
            }
            Within::Comment | Within::CData | Within::Pi => {
                let end: &[u8] = match self.within {
                    Within::Comment => b"-->",
                    Within::CData => b"]]>",
                    _ => b"?>",
                };
                if self.tail.ends_with(end) {
                    self.broken();
                    if self.run >= MAX_TEXT {
                        // The start of the terminator may have been cut: write it whole.
                        self.out.extend_from_slice(end);
                    } else {
                        self.out.push(b);
                    }
                    self.within = Within::Text;
                    self.run = 0;
                } else if self.run < MAX_TEXT {
                    self.keep(b);
                }
            }
        }
    }
}

impl<R: BufRead> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Bounded<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.pos >= self.out.len() && !self.done {
            self.out.clear();
            self.pos = 0;
            let chunk = loop {
                match self.inner.fill_buf() {
                    Ok(chunk) => break chunk,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if chunk.is_empty() {
                self.done = true;
                self.broken();
                break;
            }
            let n = chunk.len().min(64 * 1024);
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&chunk[..n]);
            self.inner.consume(n);
            for &b in &scratch {
                self.byte(b);
            }
            self.scratch = scratch;
        }
        Ok(&self.out[self.pos..])
    }

    fn consume(&mut self, amount: usize) {
        self.pos = (self.pos + amount).min(self.out.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(xml: &str) -> TestReport {
        parse_xml(xml.as_bytes()).unwrap()
    }

    fn ids(report: &TestReport) -> Vec<&str> {
        report.failures.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn surefire_report() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" name="com.example.ledger.LedgerTest" time="0.158" tests="4" errors="1" skipped="1" failures="1">
  <properties><property name="java.version" value="17"/></properties>
  <testcase name="parseCents{String, long}[2]" classname="com.example.ledger.LedgerTest" time="0">
    <failure message="expected: &lt;150&gt; but was: &lt;105&gt;" type="org.opentest4j.AssertionFailedError"><![CDATA[org.opentest4j.AssertionFailedError: expected: <150> but was: <105>
	at org.junit.jupiter.api.AssertionUtils.fail(AssertionUtils.java:55)
	at com.example.ledger.LedgerTest.parseCents(LedgerTest.java:30)
]]></failure>
    <system-out><![CDATA[posted 2 entries at Foo.java:3
]]></system-out>
  </testcase>
  <testcase name="crashesOnNull" classname="com.example.ledger.LedgerTest" time="0.002">
    <error message="Cannot invoke &quot;String.length()&quot;" type="java.lang.NullPointerException">java.lang.NullPointerException: Cannot invoke &quot;String.length()&quot;
	at com.example.ledger.LedgerTest.crashesOnNull(LedgerTest.java:16)
</error>
  </testcase>
  <testcase name="disabled" classname="com.example.ledger.LedgerTest" time="0"><skipped/></testcase>
  <testcase name="ok" classname="com.example.ledger.LedgerTest" time="0"/>
</testsuite>"#;
        let r = parse(xml);
        assert_eq!(r.runner, "junit xml");
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 1, 1));
        assert_eq!(
            ids(&r),
            [
                "com.example.ledger.LedgerTest.parseCents{String, long}[2]",
                "com.example.ledger.LedgerTest.crashesOnNull"
            ]
        );
        assert_eq!(r.failures[0].message, "expected: <150> but was: <105>");
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("LedgerTest.java:30")
        );
        assert_eq!(r.failures[1].message, "Cannot invoke \"String.length()\"");
        assert_eq!(
            r.failures[1].location.as_deref(),
            Some("LedgerTest.java:16")
        );
    }

    #[test]
    fn pytest_report() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="5" time="0.05" timestamp="2026-11-29T15:00:00" hostname="h"><testcase classname="tests.test_totals" name="test_total[2-3]" file="tests/test_totals.py" line="11" time="0.001"><failure message="assert 5 == 6">a = 2

    def test_total(a):
&gt;       assert total(a) == 6
E       assert 5 == 6

tests/test_totals.py:14: AssertionError</failure></testcase><testcase classname="tests.test_totals" name="test_db" time="0.001"><error message="failed on setup with &quot;RuntimeError: no db&quot;">@pytest.fixture
def db():
&gt;   raise RuntimeError("no db")
E   RuntimeError: no db

tests/conftest.py:5: RuntimeError</error></testcase><testcase classname="tests.test_totals" name="test_skip" time="0"><skipped type="pytest.skip" message="later">tests/test_totals.py:20: later</skipped></testcase><testcase classname="tests.test_totals" name="test_xfail" time="0"><skipped type="pytest.xfail" message="bug"/></testcase><testcase classname="tests.test_totals" name="test_ok" time="0"/><testcase classname="" name="tests.test_broken" time="0"><error message="collection failure">ImportError while importing test module</error></testcase></testsuite></testsuites>"#;
        let r = parse(xml);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 2, 2));
        assert_eq!(
            ids(&r),
            [
                "tests.test_totals.test_total[2-3]",
                "tests.test_totals.test_db",
                "tests.test_broken"
            ]
        );
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("tests/test_totals.py:14")
        );
        assert_eq!(
            r.failures[1].message,
            "failed on setup with \"RuntimeError: no db\""
        );
        assert_eq!(
            r.failures[1].location.as_deref(),
            Some("tests/conftest.py:5")
        );
        assert_eq!(r.failures[2].location, None);
    }

    #[test]
    fn jest_junit_report() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="jest tests" tests="3" failures="1" errors="0" time="0.9">
  <testsuite name="cart" errors="0" failures="1" skipped="1" timestamp="2026-11-29T15:00:00" time="0.5" tests="3">
    <testcase classname="cart adds items" name="cart adds items" time="0.002">
      <failure>Error: expect(received).toBe(expected) // Object.is equality

Expected: 3
Received: 2
    at Object.toBe (/home/dev/project/js/node_modules/expect/build/index.js:1:1)
    at Object.&lt;anonymous&gt; (/home/dev/project/js/cart.test.js:12:25)</failure>
    </testcase>
    <testcase classname="cart removes" name="cart removes" time="0.001"/>
    <testcase classname="cart todo" name="cart todo" time="0"><skipped/></testcase>
  </testsuite>
</testsuites>"#;
        let r = parse(xml);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 1, 0));
        assert_eq!(ids(&r), ["cart adds items"]);
        assert!(
            r.failures[0]
                .message
                .starts_with("Error: expect(received).toBe(expected)")
        );
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("/home/dev/project/js/cart.test.js:12")
        );
    }

    #[test]
    fn go_junit_report_and_nested_suites() {
        let xml = r#"<testsuites tests="4" failures="2">
	<testsuite name="example.com/shop/inventory" tests="3" failures="2" errors="0">
		<properties><property name="go.version" value="go1.21.0"></property></properties>
		<testcase name="TestParseLine" classname="example.com/shop/inventory" time="0.000"><failure message="Failed" type="">inventory_test.go:54: ParseLine(&#34; A-1 : 3 &#34;) = x, want y</failure></testcase>
		<testcase name="TestParseLine/spaces" classname="example.com/shop/inventory" time="0.000"><failure message="Failed" type="">    inventory_test.go:54: bad&#xA;</failure></testcase>
		<testcase name="TestSum" classname="example.com/shop/inventory" time="0.000"></testcase>
		<testsuite name="inner"><testcase name="deep" classname="x"/></testsuite>
	</testsuite>
	<testsuite name="example.com/shop/report" tests="0" failures="0" errors="1"></testsuite>
</testsuites>"#;
        let r = parse(xml);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 2, 0, 1));
        assert_eq!(
            ids(&r),
            [
                "example.com/shop/inventory.TestParseLine",
                "example.com/shop/inventory.TestParseLine/spaces",
                "example.com/shop/report"
            ]
        );
        assert_eq!(r.failures[0].message, "Failed");
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("inventory_test.go:54")
        );
    }

    #[test]
    fn nextest_and_node_reports() {
        let nextest = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="2" failures="1" errors="0" uuid="x" timestamp="t" time="0.1">
    <testsuite name="textkit::words" tests="2" disabled="0" errors="0" failures="1">
        <testcase name="counts_unicode" classname="textkit::words" timestamp="t" time="0.01">
            <failure type="test failure with exit code 101">thread 'counts_unicode' panicked at tests/words.rs:12:5:
assertion `left == right` failed</failure>
            <rerunFailure type="test failure">earlier</rerunFailure>
            <system-out>running 1 test</system-out>
        </testcase>
        <testcase name="splits" classname="textkit::words" timestamp="t" time="0.01"><flakyFailure message="m">x</flakyFailure></testcase>
    </testsuite>
</testsuites>"#;
        let r = parse(nextest);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (1, 1, 0, 0));
        assert_eq!(ids(&r), ["textkit::words.counts_unicode"]);
        assert_eq!(r.failures[0].location.as_deref(), Some("tests/words.rs:12"));
        assert!(
            r.failures[0]
                .message
                .starts_with("thread 'counts_unicode' panicked")
        );

        let node = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites>
	<testsuite name="cart" time="0.01" disabled="0" errors="0" tests="2" failures="1" skipped="0" hostname="h">
		<testcase name="adds" time="0.001" classname="test" failure="Expected values to be strictly equal:&#10;&#10;2 !== 3&#10;">
			<failure type="testCodeFailure" message="Expected values to be strictly equal:&#10;&#10;2 !== 3&#10;">
[Error [ERR_TEST_FAILURE]: Expected values to be strictly equal:

2 !== 3
] {
  code: 'ERR_TEST_FAILURE',
  cause: AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
      at TestContext.&lt;anonymous&gt; (file:///home/dev/project/js/cart.test.mjs:9:12)
      at Test.runInAsyncScope (node:async_hooks:206:9)
}
			</failure>
		</testcase>
		<testcase name="todo later" time="0" classname="test"><skipped type="todo" message="TODO"/></testcase>
	</testsuite>
</testsuites>"#;
        let r = parse(node);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (0, 1, 1, 0));
        assert_eq!(ids(&r), ["test.adds"]);
        assert_eq!(
            r.failures[0].message,
            "Expected values to be strictly equal:\n2 !== 3"
        );
        assert_eq!(
            r.failures[0].location.as_deref(),
            Some("/home/dev/project/js/cart.test.mjs:9")
        );
    }

    #[test]
    fn gradle_report_without_message_attribute() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="com.x.CalcTest" tests="1" skipped="0" failures="1" errors="0" timestamp="t" hostname="h" time="0.01">
  <properties/>
  <testcase name="adds()" classname="com.x.CalcTest" time="0.01">
    <failure message="org.opentest4j.AssertionFailedError: expected: &lt;4&gt; but was: &lt;5&gt;" type="org.opentest4j.AssertionFailedError">org.opentest4j.AssertionFailedError: expected: &lt;4&gt; but was: &lt;5&gt;
	at app//org.junit.jupiter.api.AssertionFailureBuilder.build(AssertionFailureBuilder.java:151)
	at app//com.x.CalcTest.adds(CalcTest.kt:12)
</failure>
  </testcase>
  <system-out><![CDATA[]]></system-out>
</testsuite>"#;
        let r = parse(xml);
        assert_eq!((r.passed, r.failed), (0, 1));
        assert_eq!(ids(&r), ["com.x.CalcTest.adds()"]);
        assert_eq!(r.failures[0].location.as_deref(), Some("CalcTest.kt:12"));
    }

    #[test]
    fn truncated_and_malformed_documents_give_what_was_read() {
        let cut = r#"<?xml version="1.0"?><testsuite name="s"><testcase classname="a" name="one"/><testcase classname="a" name="two"><failure message="boom">at x.py:3"#;
        let r = parse(cut);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(ids(&r), ["a.two"]);

        let broken = r#"<testsuite><testcase name="a"/><testcase name="b" <<<>>> &bogus; </x></testsuite><testcase name="c"><skipped/></testcase>"#;
        let r = parse(broken);
        assert!(r.passed >= 1);

        for garbage in [
            &b"<testsuite\xff\xfe<<<"[..],
            b"",
            b"\x00\x01\x02",
            b"<![CDATA[",
            b"<!--",
        ] {
            let r = parse_xml(garbage).unwrap();
            assert_eq!(r.runner, "junit xml");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let xml = b"<testsuite><testcase classname=\"c\" name=\"t\xe9st\"><failure message=\"caf\xc3\xa9 \xff\">x</failure></testcase></testsuite>";
        let r = parse_xml(&xml[..]).unwrap();
        assert_eq!(r.failed, 1);
        assert_eq!(r.failures[0].id, "c.t?st");
        assert_eq!(r.failures[0].message, "café ?");
    }

    #[test]
    fn huge_text_is_cut_and_memory_stays_bounded() {
        // An 8 MB failure text and attribute, streamed: the filter keeps MAX_TEXT of each.
        struct Huge {
            parts: Vec<Vec<u8>>,
            i: usize,
            repeat: usize,
            filler: Vec<u8>,
        }
        impl Read for Huge {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let chunk: &[u8] = match self.i {
                    0 => &self.parts[0],
                    i if i <= self.repeat => &self.filler,
                    i if i == self.repeat + 1 => &self.parts[1],
                    _ => return Ok(0),
                };
                let n = chunk.len().min(buf.len());
                buf[..n].copy_from_slice(&chunk[..n]);
                self.i += 1;
                Ok(n)
            }
        }
        let huge = Huge {
            parts: vec![
                b"<testsuite><testcase classname=\"c\" name=\"t\"><failure>first line at x_test.go:7\n"
                    .to_vec(),
                b"</failure></testcase><testcase name=\"after\"/></testsuite>".to_vec(),
            ],
            i: 0,
            repeat: 1_000,
            filler: "é&amp;<![CDATA[ab]]>".repeat(400).into_bytes(),
        };
        let r = parse_xml(std::io::BufReader::new(huge)).unwrap();
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.failures[0].location.as_deref(), Some("x_test.go:7"));

        let mut filter = Bounded::new(&b""[..]);
        for _ in 0..1_000_000 {
            filter.byte(b'a');
        }
        assert!(filter.out.len() <= MAX_TEXT);
    }

    #[test]
    fn io_errors_are_errors() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk"))
            }
        }
        assert!(parse_xml(std::io::BufReader::new(Failing)).is_err());
    }

    #[test]
    fn distill_sends_xml_here() {
        let r = super::super::distill_str(
            "<?xml version=\"1.0\"?>\n<testsuite><testcase name=\"a\"/></testsuite>",
            None,
            None,
        );
        assert_eq!((r.runner.as_str(), r.passed), ("junit xml", 1));
    }
}
