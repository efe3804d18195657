//! Reads the output of node's built-in test runner (`node --test`, Node 18–22): the spec
//! reporter (`✔ name (1.2ms)`, `✖ name`, `﹣ name # SKIP`, `▶ suite`), the dot reporter
//! (`..X.` then "Failed tests:") and the TAP reporter (`# Subtest:`, `not ok 3 - name`,
//! YAML, `# duration_ms`).
//!
//! Counts follow node's summary (`ℹ tests/pass/fail/cancelled/skipped/todo` or the TAP
//! `#` trailer): describe() suites are not tests, a test whose subtest failed is a failed
//! test. The spec and dot reporters print suites and such tests alike; a child's stack
//! tells them apart (`TestContext.test` is `t.test()` inside a test, `Suite.` frames are
//! describe()); without a hint a parent is taken for a suite.

use super::jest::{Collected, MAX_HINT_SCORE, frame_location, indent, strip_duration};
use super::tap::{NodeSummary, TapCore};
use super::{CONFIDENT, Format, Parser, TestReport};

/// What a parent (a test with children) turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unknown,
    Suite,
    Test,
}

#[derive(Debug)]
struct Open {
    indent: usize,
    name: String,
    kind: Kind,
}

/// A `✖` entry whose details are being read.
#[derive(Debug, Default)]
struct Failing {
    indent: usize,
    id: String,
    text: Collected,
    /// The stack says how this test was started (see [`Kind`]).
    started_by: Option<Kind>,
    /// `'1 subtest failed'`: the entry of a parent.
    subtests: bool,
    /// A parent closing in the spec tree; `None` for a leaf.
    parent_kind: Option<Kind>,
}

const MAX_OPEN: usize = 256;

#[derive(Debug)]
pub struct NodeParser {
    tap: TapCore,
    report: TestReport,
    summary: NodeSummary,
    score: u32,
    hints: u32,
    open: Vec<Open>,
    failing: Option<Failing>,
    /// After "✖ failing tests:" (a recap of failures already read).
    recap: bool,
    /// After the dot reporter's "Failed tests:".
    dot_failures: bool,
    /// What the last failure entry says about the parent listed after it.
    last_hint: Kind,
    dots: u64,
    crosses: u64,
    spec_passed: u64,
    spec_failed: u64,
    spec_skipped: u64,
}

impl Default for NodeParser {
    fn default() -> Self {
        NodeParser {
            tap: TapCore::new(true),
            report: TestReport::default(),
            summary: NodeSummary::default(),
            score: 0,
            hints: 0,
            open: Vec::new(),
            failing: None,
            recap: false,
            dot_failures: false,
            last_hint: Kind::Unknown,
            dots: 0,
            crosses: 0,
            spec_passed: 0,
            spec_failed: 0,
            spec_skipped: 0,
        }
    }
}

/// A spec line: (mark, name, directive is skip, directive is todo).
fn spec_line(t: &str) -> Option<(char, String, bool, bool)> {
    let mut chars = t.chars();
    let mark = chars.next()?;
    if !matches!(mark, '✔' | '✖' | '﹣' | '▶') || chars.next() != Some(' ') {
        return None;
    }
    let rest = chars.as_str();
    // `name (1.2ms) # SKIP reason`: the directive follows the duration.
    let (body, directive) = match rest.rfind(") # ") {
        Some(i) => (&rest[..=i], Some(rest[i + 4..].trim())),
        None => match rest.rfind(" # ") {
            Some(i) if mark == '﹣' || rest[i + 3..].to_ascii_uppercase().starts_with("TODO") => {
                (&rest[..i], Some(rest[i + 3..].trim()))
            }
            _ => (rest, None),
        },
    };
    let upper = directive.map(str::to_ascii_uppercase).unwrap_or_default();
    let todo = upper.starts_with("TODO");
    let skip = mark == '﹣' || upper.starts_with("SKIP");
    Some((mark, strip_duration(body).to_owned(), skip, todo))
}

impl NodeParser {
    fn hint(&mut self, n: u32) {
        self.hints = (self.hints + n).min(MAX_HINT_SCORE);
    }

    /// Settles the failure entry being read.
    fn close_failing(&mut self) {
        let Some(f) = self.failing.take() else {
            return;
        };
        let started = f.started_by.unwrap_or(Kind::Unknown);
        let is_test = match f.parent_kind {
            // A parent closing in the spec tree: its children told what it is.
            Some(kind) => kind == Kind::Test,
            // Dot list: the entry before a parent's is its last failing child.
            None if f.subtests => self.last_hint == Kind::Test,
            None => true,
        };
        self.last_hint = match (f.parent_kind, f.subtests) {
            (Some(Kind::Suite), _) => Kind::Suite,
            (None, true) if self.last_hint != Kind::Test => Kind::Suite,
            (None, false) => started,
            _ => Kind::Unknown,
        };
        // A parent's children say what the parent is.
        if f.parent_kind.is_none()
            && !f.subtests
            && let Some(open) = self.open.last_mut()
            && open.indent < f.indent
            && open.kind == Kind::Unknown
        {
            open.kind = started;
        }
        if is_test {
            self.spec_failed += 1;
            let message = f.text.message();
            let message = message.trim_matches('\'');
            self.report
                .push_failure(&f.id, message, f.text.location.as_deref());
        }
    }

    fn human_line(&mut self, line: &str) {
        let t = line.trim();
        let ind = indent(line);
        if let Some(rest) = t.strip_prefix('ℹ') {
            self.close_failing();
            if self.summary.read(rest) {
                self.score = CONFIDENT;
            }
            return;
        }
        if t.starts_with("✖ failing tests:") {
            self.close_failing();
            self.recap = true;
            self.hint(200);
            return;
        }
        if t == "Failed tests:" && ind == 0 {
            self.close_failing();
            self.dot_failures = true;
            self.hint(100);
            return;
        }
        if !t.is_empty() && t.bytes().all(|b| b == b'.' || b == b'X') && ind == 0 {
            self.close_failing();
            self.dots += t.bytes().filter(|b| *b == b'.').count() as u64;
            self.crosses += t.bytes().filter(|b| *b == b'X').count() as u64;
            self.hint(10);
            return;
        }
        if let Some((mark, name, skip, todo)) = spec_line(t) {
            self.close_failing();
            if self.recap {
                return;
            }
            if self.dot_failures && mark == '✖' {
                // The dot list is flat: a parent shows as `'N subtests failed'` below.
                self.score = self.score.max(CONFIDENT);
                self.failing = Some(Failing {
                    indent: ind,
                    id: name,
                    ..Failing::default()
                });
                return;
            }
            self.hint(5);
            self.open.retain(|o| o.indent <= ind);
            if mark == '▶' {
                // Node 18 prints a finished suite as `▶ name (1.2ms)` too.
                let closing = self
                    .open
                    .last()
                    .is_some_and(|o| o.indent == ind && o.name == name);
                if closing {
                    self.open.pop();
                } else if self.open.len() < MAX_OPEN {
                    self.open.push(Open {
                        indent: ind,
                        name,
                        kind: Kind::Unknown,
                    });
                }
                return;
            }
            let parent = match self.open.last() {
                Some(o) if o.indent == ind && o.name == name => {
                    let kind = o.kind;
                    self.open.pop();
                    Some(kind)
                }
                _ => None,
            };
            let counts = parent.is_none_or(|k| k == Kind::Test);
            match mark {
                '✖' if !todo => {
                    self.failing = Some(Failing {
                        indent: ind,
                        id: name,
                        parent_kind: parent,
                        ..Failing::default()
                    });
                }
                _ if !counts => {}
                _ if skip || todo => self.spec_skipped += 1,
                '✔' => self.spec_passed += 1,
                _ => {}
            }
            return;
        }
        let Some(f) = self.failing.as_mut() else {
            return;
        };
        if !t.is_empty() && ind <= f.indent {
            self.close_failing();
            return;
        }
        if t.starts_with("at ") {
            f.text.message_done = true;
            if f.started_by.is_none() {
                if t.contains("TestContext.test (") {
                    f.started_by = Some(Kind::Test);
                } else if t.contains("Suite.") {
                    f.started_by = Some(Kind::Suite);
                }
            }
            if f.text.location.is_none() {
                f.text.location = frame_location(t);
            }
            return;
        }
        if f.text.lines.is_empty()
            && (t.ends_with("subtest failed'") || t.ends_with("subtests failed'"))
        {
            f.subtests = true;
        }
        f.text.text(line);
    }
}

impl Parser for NodeParser {
    fn line(&mut self, line: &str) {
        self.tap.line(line);
        self.human_line(line);
    }

    fn score(&self) -> u32 {
        if self.tap.node_marks >= 10 && (self.tap.version || self.tap.points > 0) {
            return CONFIDENT;
        }
        self.score.max(self.hints).max(self.tap.node_marks.min(MAX_HINT_SCORE))
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_failing();
        self.tap.finish();
        let human = self.spec_passed + self.spec_failed + self.spec_skipped + self.dots;
        let use_tap = self.tap.points > 0 && (self.tap.version || human == 0);
        let mut report = if use_tap {
            let mut r = std::mem::take(&mut self.tap.report);
            self.tap.summary.apply(&mut r);
            r
        } else {
            let mut r = std::mem::take(&mut self.report);
            if !self.summary.apply(&mut r) {
                if self.dots + self.crosses > 0 {
                    // The dot reporter prints no summary: '.' covers passed and skipped
                    // tests and passing suites alike.
                    r.passed = self.dots;
                } else {
                    r.passed = self.spec_passed;
                    r.skipped = self.spec_skipped;
                }
                r.failed = self.spec_failed;
            }
            r
        };
        report.runner = Format::Node.runner().to_owned();
        report
    }
}
