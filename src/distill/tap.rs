//! Reads TAP (Test Anything Protocol, versions 12–14) as `prove -v`, tape, node-tap and
//! node's own TAP reporter print it.
//!
//! Test points (`ok 3 - name`, `not ok 4 - name # TODO`), indented subtests, YAML
//! diagnostics (`error:`/`message:`, `location:`/`at:`), `Bail out!` and the plan. The
//! reading itself is [`TapCore`], shared with the `node --test` parser, which counts the
//! way node does (suites left out, a test whose subtest failed counted as failed).

use super::jest::{Collected, MAX_HINT_SCORE, frame_location, indent, is_location};
use super::{CONFIDENT, Format, Parser, TestReport};

/// A test point waiting for its YAML block.
#[derive(Debug, Default)]
struct Point {
    indent: usize,
    ok: bool,
    skip: bool,
    todo: bool,
    id: String,
    parent: bool,
    child_failed: bool,
    suite: bool,
    text: Collected,
    yaml_indent: Option<usize>,
    /// The YAML key whose block scalar is being read (`error: |-`).
    scalar: Option<(String, usize)>,
    expected: Option<String>,
    actual: Option<String>,
}

/// node's summary comments (`# tests 9`, `# pass 2`, ...).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NodeSummary {
    pub(crate) tests: Option<u64>,
    pub(crate) pass: Option<u64>,
    pub(crate) fail: Option<u64>,
    pub(crate) cancelled: Option<u64>,
    pub(crate) skipped: Option<u64>,
    pub(crate) todo: Option<u64>,
}

impl NodeSummary {
    /// Reads `tests 9` / `pass 2` / ... (the text after `#` or `ℹ`); true when it was one.
    pub(crate) fn read(&mut self, text: &str) -> bool {
        let mut words = text.split_whitespace();
        let (Some(key), Some(n), None) = (words.next(), words.next(), words.next()) else {
            return false;
        };
        if key == "duration_ms" || key == "suites" {
            return n.parse::<f64>().is_ok();
        }
        let Ok(n) = n.parse::<u64>() else {
            return false;
        };
        let slot = match key {
            "tests" => &mut self.tests,
            "pass" => &mut self.pass,
            "fail" => &mut self.fail,
            "cancelled" => &mut self.cancelled,
            "skipped" => &mut self.skipped,
            "todo" => &mut self.todo,
            _ => return false,
        };
        *slot = Some(n);
        true
    }

    /// Writes the counts into `report` when the summary had them.
    pub(crate) fn apply(&self, report: &mut TestReport) -> bool {
        if self.pass.is_none() && self.fail.is_none() {
            return false;
        }
        report.passed = self.pass.unwrap_or(0);
        report.failed = self.fail.unwrap_or(0) + self.cancelled.unwrap_or(0);
        report.skipped = self.skipped.unwrap_or(0) + self.todo.unwrap_or(0);
        true
    }
}

/// The TAP reader shared by the TAP and node parsers.
#[derive(Debug, Default)]
pub(crate) struct TapCore {
    /// Count the way node does: suites left out, parents counted like any test.
    node: bool,
    pub(crate) report: TestReport,
    pending: Option<Point>,
    /// (indent, a test point failed at that depth) for the subtests being read.
    levels: Vec<(usize, bool)>,
    pub(crate) version: bool,
    pub(crate) plan: bool,
    pub(crate) points: u64,
    /// node's trailer (`# suites`, `# cancelled`, `# duration_ms`) or YAML keys.
    pub(crate) node_marks: u32,
    pub(crate) summary: NodeSummary,
}

/// Splits `name # SKIP reason` into (name, skip, todo); `\#` is an escaped `#`.
fn directive(text: &str) -> (String, bool, bool) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(off) = text[i..].find('#') {
        let at = i + off;
        if at == 0 || bytes[at - 1] != b'\\' {
            let after = text[at + 1..].trim_start().to_ascii_lowercase();
            let skip = after.starts_with("skip");
            let todo = after.starts_with("todo");
            if skip || todo {
                return (text[..at].trim().to_owned(), skip, todo);
            }
        }
        i = at + 1;
    }
    (text.trim().to_owned(), false, false)
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    let inner = v
        .strip_prefix('\'')
        .and_then(|x| x.strip_suffix('\''))
        .or_else(|| v.strip_prefix('"').and_then(|x| x.strip_suffix('"')));
    match inner {
        Some(x) => x.replace("''", "'"),
        None => v.to_owned(),
    }
}

impl TapCore {
    pub(crate) fn new(node: bool) -> Self {
        TapCore {
            node,
            ..TapCore::default()
        }
    }

    /// Reads a test point line (`ok 1 - name`), if it is one.
    fn point(line: &str) -> Option<Point> {
        let t = line.trim_start();
        let (ok, rest) = if let Some(r) = t.strip_prefix("not ok") {
            (false, r)
        } else {
            (true, t.strip_prefix("ok")?)
        };
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let rest = rest.trim_start();
        let num_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (num, rest) = rest.split_at(num_len);
        let rest = rest.trim_start();
        let rest = rest
            .strip_prefix("- ")
            .unwrap_or(rest.strip_prefix('-').unwrap_or(rest));
        let (name, skip, todo) = directive(rest);
        let name = name.replace("\\#", "#");
        let id = if name.is_empty() {
            num.to_owned()
        } else {
            name
        };
        Some(Point {
            indent: indent(line),
            ok,
            skip,
            todo,
            id,
            ..Point::default()
        })
    }

    fn settle(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        self.points += 1;
        let counted = if self.node {
            !p.suite
        } else {
            // A parent sums up its subtests: count it only when it failed on its own.
            !p.parent || (!p.ok && !p.child_failed && !p.todo)
        };
        if !counted {
            return;
        }
        if p.skip || p.todo {
            self.report.skipped += 1;
        } else if p.ok {
            self.report.passed += 1;
            self.report.push_passing(&p.id);
        } else {
            self.report.failed += 1;
            let mut message = p.text.message();
            if message.is_empty()
                && let (Some(e), Some(a)) = (&p.expected, &p.actual)
            {
                message = format!("expected: {e}\nactual: {a}");
            }
            self.report
                .push_failure(&p.id, &message, p.text.location.as_deref());
        }
    }

    /// A YAML line of the pending point; false when the block has ended (or never began).
    fn yaml(&mut self, line: &str) -> bool {
        let Some(p) = self.pending.as_mut() else {
            return false;
        };
        let t = line.trim();
        let Some(base) = p.yaml_indent else {
            if t == "---" && indent(line) >= p.indent {
                p.yaml_indent = Some(indent(line));
                return true;
            }
            return false;
        };
        if t == "..." && indent(line) <= base {
            p.yaml_indent = None;
            self.settle();
            return true;
        }
        let ind = indent(line);
        if let Some((key, key_indent)) = &p.scalar {
            if ind > *key_indent || t.is_empty() {
                match key.as_str() {
                    "error" | "message" => p.text.text(line),
                    "stack" | "at" if p.text.location.is_none() => {
                        p.text.location = frame_location(t);
                    }
                    _ => {}
                }
                return true;
            }
            p.scalar = None;
        }
        if let Some((key, value)) = t.split_once(':') {
            let value = value.trim();
            if value.starts_with('|') || value.starts_with('>') {
                p.scalar = Some((key.to_owned(), ind));
                return true;
            }
            if value.is_empty() {
                // A nested map (`at:` in node-tap): read its lines like a scalar.
                p.scalar = Some((key.to_owned(), ind));
                return true;
            }
            match key {
                "error" | "message" if p.text.lines.is_empty() => p.text.text(&unquote(value)),
                "location" | "at" | "file" if p.text.location.is_none() => {
                    let v = unquote(value);
                    let v = v.strip_prefix("file://").unwrap_or(&v).to_owned();
                    p.text.location = if is_location(&v) {
                        Some(v)
                    } else {
                        frame_location(&v)
                    };
                }
                "type" if unquote(value) == "suite" => p.suite = true,
                "expected" | "wanted" => p.expected = Some(value.to_owned()),
                "actual" | "found" => p.actual = Some(value.to_owned()),
                "failureType" | "duration_ms" => self.node_marks += 1,
                _ => {}
            }
        }
        true
    }

    pub(crate) fn line(&mut self, line: &str) {
        if self.yaml(line) {
            return;
        }
        self.settle();
        let t = line.trim();
        if let Some(mut p) = TapCore::point(line) {
            let mut child_failed = false;
            let mut parent = false;
            while let Some(&(ind, failed)) = self.levels.last() {
                if ind <= p.indent {
                    break;
                }
                self.levels.pop();
                parent = true;
                child_failed |= failed;
            }
            match self.levels.last_mut() {
                Some(level) if level.0 == p.indent => level.1 |= !p.ok && !p.todo,
                _ => self.levels.push((p.indent, !p.ok && !p.todo)),
            }
            p.parent = parent;
            p.child_failed = child_failed;
            self.pending = Some(p);
            return;
        }
        if let Some(v) = t.strip_prefix("TAP version ") {
            if v.trim().bytes().all(|b| b.is_ascii_digit()) {
                self.version = true;
            }
            return;
        }
        if let Some(rest) = t.strip_prefix("1..")
            && rest
                .split_whitespace()
                .next()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            self.plan = true;
            return;
        }
        if let Some(reason) = t.strip_prefix("Bail out!") {
            self.report.errors += 1;
            self.report
                .push_problem(&format!("Bail out! {}", reason.trim()), None);
            return;
        }
        if let Some(comment) = t.strip_prefix('#')
            && indent(line) == 0
            && self.summary.read(comment)
        {
            let key = comment.split_whitespace().next().unwrap_or("");
            if matches!(key, "suites" | "cancelled" | "duration_ms") {
                self.node_marks += 10;
            }
        }
    }

    pub(crate) fn finish(&mut self) {
        self.settle();
    }
}

#[derive(Debug)]
pub struct TapParser {
    core: TapCore,
}

impl Default for TapParser {
    fn default() -> Self {
        TapParser {
            core: TapCore::new(false),
        }
    }
}

impl Parser for TapParser {
    fn line(&mut self, line: &str) {
        self.core.line(line);
    }

    fn score(&self) -> u32 {
        let c = &self.core;
        if c.version || (c.plan && c.points > 0) {
            return CONFIDENT;
        }
        (c.points.min(u64::from(MAX_HINT_SCORE)) as u32 * 5).min(MAX_HINT_SCORE)
    }

    fn finish(mut self: Box<Self>) -> TestReport {
        self.core.finish();
        TestReport {
            runner: Format::Tap.runner().to_owned(),
            ..self.core.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::run;
    use super::super::{CONFIDENT, Format, distill_str};

    const PROVE: &str = "\
TAP version 13
1..6
ok 1 - parses numbers
not ok 2 - rejects words
  ---
  message: 'should throw'
  severity: fail
  at:
    file: t/parse.t
    line: 12
  ...
ok 3 # SKIP no network
not ok 4 - rounds \\# halves # TODO later
# Subtest: nested
    1..2
    ok 1 - inner a
    not ok 2 - inner b
      ---
      operator: equal
      expected: 3
      actual: 4
      at: Test.<anonymous> (/src/t/nested.js:5:5)
      ...
not ok 5 - nested
ok 6
";

    #[test]
    fn generic_tap() {
        let r = distill_str(PROVE, None, None);
        assert_eq!(r.runner, "tap");
        assert_eq!((r.passed, r.failed, r.skipped, r.errors), (3, 2, 2, 0));
        let ids: Vec<_> = r.failures.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["rejects words", "inner b"]);
        assert_eq!(r.failures[0].message, "should throw");
        assert_eq!(r.failures[1].message, "expected: 3\nactual: 4");
        assert_eq!(
            r.failures[1].location.as_deref(),
            Some("/src/t/nested.js:5:5")
        );
    }

    #[test]
    fn tape_and_bail_out() {
        let text = "TAP version 13\n# add\nok 1 should be equal\nnot ok 2 should be equal\n  ---\n    operator: equal\n    expected: 3\n    actual:   4\n  ...\nBail out! database down\n\n1..2\n# tests 2\n# pass  1\n# fail  1\n";
        let (r, score) = run(Format::Tap, text);
        assert!(score >= CONFIDENT);
        assert_eq!((r.passed, r.failed, r.errors), (1, 1, 1));
        assert_eq!(r.failures[0].id, "should be equal");
        assert_eq!(r.build_errors[0].message, "Bail out! database down");
        // tape's trailer is not node's: node stays unsure.
        let (_, score) = run(Format::Node, text);
        assert!(score < CONFIDENT);
        let r = distill_str(text, None, None);
        assert_eq!(r.runner, "tap");
    }

    #[test]
    fn a_failing_parent_without_failing_children_counts() {
        let text = "1..1\n    ok 1 - a\n    1..2\nnot ok 1 - plan mismatch\n";
        let (r, _) = run(Format::Tap, text);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.failures[0].id, "plan mismatch");
    }
}
