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
        self.score
            .max(self.hints)
            .max(self.tap.node_marks.min(MAX_HINT_SCORE))
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.close_failing();
        self.tap.finish();
        let human = self.spec_passed + self.spec_failed + self.spec_skipped + self.dots;
        // The TAP reporter's banner says which account to read, even when no test point
        // came before its `#` trailer (the output was cut, or a test closed it).
        let use_tap = self.tap.version || (self.tap.points > 0 && human == 0);
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
                    r.estimated_counts = true;
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

#[cfg(test)]
mod tests {
    use super::super::testing::{failure, fixture, run, sorted_ids};
    use super::super::{CONFIDENT, Format, distill_str};

    /// Real `node --test --test-reporter=tap` output (Node 20.20): a describe() suite with
    /// a failing test, skip and todo; a test whose `t.test()` subtest failed; a throwing
    /// test; a file with a syntax error.
    const NODE_TAP: &str = r#"TAP version 13
# Subtest: math
    # Subtest: adds
    ok 1 - adds
      ---
      duration_ms: 0.708513
      ...
    # Subtest: subtracts
    not ok 2 - subtracts
      ---
      duration_ms: 1.159894
      location: '/tmp/njs/a.test.js:5:3'
      failureType: 'testCodeFailure'
      error: |-
        Expected values to be strictly equal:
        
        2 !== 1
        
      code: 'ERR_ASSERTION'
      name: 'AssertionError'
      expected: 1
      actual: 2
      operator: 'strictEqual'
      stack: |-
        TestContext.<anonymous> (/tmp/njs/a.test.js:5:32)
        Test.runInAsyncScope (node:async_hooks:206:9)
        Test.run (node:internal/test_runner/test:796:25)
        Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
        Test.postRun (node:internal/test_runner/test:889:19)
        Test.run (node:internal/test_runner/test:835:12)
        async Promise.all (index 0)
        async Suite.run (node:internal/test_runner/test:1135:7)
        async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
      ...
    # Subtest: skipped one
    ok 3 - skipped one # SKIP
      ---
      duration_ms: 0.102823
      ...
    # Subtest: todo one
    ok 4 - todo one # TODO
      ---
      duration_ms: 0.142642
      ...
    1..4
not ok 1 - math
  ---
  duration_ms: 3.184375
  type: 'suite'
  location: '/tmp/njs/a.test.js:3:1'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: parent
    # Subtest: child ok
    ok 1 - child ok
      ---
      duration_ms: 0.140188
      ...
    # Subtest: child bad
    not ok 2 - child bad
      ---
      duration_ms: 0.212686
      location: '/tmp/njs/a.test.js:11:11'
      failureType: 'testCodeFailure'
      error: 'nope'
      code: 'ERR_ASSERTION'
      name: 'AssertionError'
      expected: true
      actual: false
      operator: '=='
      stack: |-
        TestContext.<anonymous> (/tmp/njs/a.test.js:11:44)
        Test.runInAsyncScope (node:async_hooks:206:9)
        Test.run (node:internal/test_runner/test:796:25)
        Test.start (node:internal/test_runner/test:702:17)
        TestContext.test (node:internal/test_runner/test:292:20)
        TestContext.<anonymous> (/tmp/njs/a.test.js:11:11)
        async Test.run (node:internal/test_runner/test:797:9)
        async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
      ...
    1..2
not ok 2 - parent
  ---
  duration_ms: 0.769554
  location: '/tmp/njs/a.test.js:9:1'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: top fails
not ok 3 - top fails
  ---
  duration_ms: 0.088231
  location: '/tmp/njs/a.test.js:13:1'
  failureType: 'testCodeFailure'
  error: 'boom'
  code: 'ERR_TEST_FAILURE'
  stack: |-
    TestContext.<anonymous> (/tmp/njs/a.test.js:13:33)
    Test.runInAsyncScope (node:async_hooks:206:9)
    Test.run (node:internal/test_runner/test:796:25)
    Test.processPendingSubtests (node:internal/test_runner/test:526:18)
    Test.postRun (node:internal/test_runner/test:889:19)
    Test.run (node:internal/test_runner/test:835:12)
    async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
  ...
# /tmp/njs/b.test.js:1
# syntax error here (
#        ^^^^^
# SyntaxError: Unexpected identifier 'error'
#     at wrapSafe (node:internal/modules/cjs/loader:1464:18)
#     at Module._compile (node:internal/modules/cjs/loader:1495:20)
#     at Module._extensions..js (node:internal/modules/cjs/loader:1623:10)
#     at Module.load (node:internal/modules/cjs/loader:1266:32)
#     at Module._load (node:internal/modules/cjs/loader:1091:12)
#     at Function.executeUserEntryPoint [as runMain] (node:internal/modules/run_main:164:12)
#     at node:internal/main/run_main_module:28:49
# Node.js v20.20.2
# Subtest: /tmp/njs/b.test.js
not ok 2 - /tmp/njs/b.test.js
  ---
  duration_ms: 72.587206
  location: '/tmp/njs/b.test.js:1:1'
  failureType: 'testCodeFailure'
  exitCode: 1
  signal: ~
  error: 'test failed'
  code: 'ERR_TEST_FAILURE'
  ...
1..4
# tests 9
# suites 1
# pass 2
# fail 5
# cancelled 0
# skipped 1
# todo 1
# duration_ms 174.20025
"#;

    /// The same run with `--test-reporter=spec`.
    const NODE_SPEC: &str = r#"▶ math
  ✔ adds (0.851366ms)
  ✖ subtracts (1.213855ms)
    AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
    
    2 !== 1
    
        at TestContext.<anonymous> (/tmp/njs/a.test.js:5:32)
        at Test.runInAsyncScope (node:async_hooks:206:9)
        at Test.run (node:internal/test_runner/test:796:25)
        at Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
        at Test.postRun (node:internal/test_runner/test:889:19)
        at Test.run (node:internal/test_runner/test:835:12)
        at async Promise.all (index 0)
        at async Suite.run (node:internal/test_runner/test:1135:7)
        at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
      generatedMessage: true,
      code: 'ERR_ASSERTION',
      actual: 2,
      expected: 1,
      operator: 'strictEqual'
    }

  ﹣ skipped one (0.149532ms) # SKIP
  ✔ todo one (0.190704ms) # TODO
✖ math (3.603008ms)
▶ parent
  ✔ child ok (0.163193ms)
  ✖ child bad (0.292065ms)
    AssertionError [ERR_ASSERTION]: nope
        at TestContext.<anonymous> (/tmp/njs/a.test.js:11:44)
        at Test.runInAsyncScope (node:async_hooks:206:9)
        at Test.run (node:internal/test_runner/test:796:25)
        at Test.start (node:internal/test_runner/test:702:17)
        at TestContext.test (node:internal/test_runner/test:292:20)
        at TestContext.<anonymous> (/tmp/njs/a.test.js:11:11)
        at async Test.run (node:internal/test_runner/test:797:9)
        at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
      generatedMessage: false,
      code: 'ERR_ASSERTION',
      actual: false,
      expected: true,
      operator: '=='
    }

✖ parent (0.893198ms)
✖ top fails (0.147019ms)
  Error: boom
      at TestContext.<anonymous> (/tmp/njs/a.test.js:13:33)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)

/tmp/njs/b.test.js:1
syntax error here (
       ^^^^^

SyntaxError: Unexpected identifier 'error'
    at wrapSafe (node:internal/modules/cjs/loader:1464:18)
    at Module._compile (node:internal/modules/cjs/loader:1495:20)
    at Module._extensions..js (node:internal/modules/cjs/loader:1623:10)
    at Module.load (node:internal/modules/cjs/loader:1266:32)
    at Module._load (node:internal/modules/cjs/loader:1091:12)
    at Function.executeUserEntryPoint [as runMain] (node:internal/modules/run_main:164:12)
    at node:internal/main/run_main_module:28:49

Node.js v20.20.2
✖ /tmp/njs/b.test.js (76.257038ms)
  'test failed'

ℹ tests 9
ℹ suites 1
ℹ pass 2
ℹ fail 5
ℹ cancelled 0
ℹ skipped 1
ℹ todo 1
ℹ duration_ms 232.206362

✖ failing tests:

test at a.test.js:5:3
✖ subtracts (1.213855ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  2 !== 1
  
      at TestContext.<anonymous> (/tmp/njs/a.test.js:5:32)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Promise.all (index 0)
      at async Suite.run (node:internal/test_runner/test:1135:7)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 2,
    expected: 1,
    operator: 'strictEqual'
  }

test at a.test.js:11:11
✖ child bad (0.292065ms)
  AssertionError [ERR_ASSERTION]: nope
      at TestContext.<anonymous> (/tmp/njs/a.test.js:11:44)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.start (node:internal/test_runner/test:702:17)
      at TestContext.test (node:internal/test_runner/test:292:20)
      at TestContext.<anonymous> (/tmp/njs/a.test.js:11:11)
      at async Test.run (node:internal/test_runner/test:797:9)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: false,
    code: 'ERR_ASSERTION',
    actual: false,
    expected: true,
    operator: '=='
  }

test at a.test.js:13:1
✖ top fails (0.147019ms)
  Error: boom
      at TestContext.<anonymous> (/tmp/njs/a.test.js:13:33)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)

test at b.test.js:1:1
✖ /tmp/njs/b.test.js (76.257038ms)
  'test failed'
"#;

    const FAILING: [&str; 5] = [
        "/tmp/njs/b.test.js",
        "child bad",
        "parent",
        "subtracts",
        "top fails",
    ];

    #[test]
    fn node_tap_reporter() {
        let r = distill_str(NODE_TAP, None, None);
        assert_eq!(r.runner, "node --test");
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 5, 2, 0));
        assert_eq!(sorted_ids(&r), FAILING);
        let f = failure(&r, "subtracts");
        assert!(
            f.message
                .starts_with("Expected values to be strictly equal:")
        );
        assert_eq!(f.location.as_deref(), Some("/tmp/njs/a.test.js:5:3"));
    }

    #[test]
    fn node_spec_reporter() {
        let (r, score) = run(Format::Node, NODE_SPEC);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (2, 5, 2, 0));
        assert_eq!(sorted_ids(&r), FAILING);
        let f = failure(&r, "top fails");
        assert_eq!(f.message, "Error: boom");
        assert_eq!(f.location.as_deref(), Some("/tmp/njs/a.test.js:13:33"));
        let f = failure(&r, "/tmp/njs/b.test.js");
        assert_eq!(f.message, "test failed");
    }

    #[test]
    fn node_spec_without_summary_counts_lines() {
        let cut = NODE_SPEC.split("\u{2139} tests").next().unwrap();
        let (r, _) = run(Format::Node, cut);
        assert_eq!((r.passed, r.failed, r.skipped), (2, 5, 2));
    }

    #[test]
    fn node_fixture_details() {
        let (r, _) = run(Format::Node, &fixture("node_test_spec_mixed"));
        let f = failure(&r, "rejects decimals");
        assert!(
            f.message
                .starts_with("AssertionError [ERR_ASSERTION]: Missing expected")
        );
        assert!(
            f.location
                .as_deref()
                .unwrap()
                .ends_with("test/cart.test.js:68:49")
        );
        let (r, score) = run(Format::Node, &fixture("node_test_dot_load_error"));
        assert!(score >= CONFIDENT);
        assert_eq!(r.failed, 7);
    }
}
