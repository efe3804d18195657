//! Renderings of a report: compact text for models (a few hundred tokens even for a large
//! failing run: counts, every failing id, the first failures' messages and locations) and
//! markdown for humans (a table of counts, the failures, a collapsible log excerpt).

use std::fmt::Write;

use super::{Failure, TestReport};
use crate::text::clip;

/// Failures shown with their message in the compact rendering; the rest by id only.
const DETAILED: usize = 12;
/// Failing ids listed at all in the compact rendering.
const LISTED: usize = 200;
/// Per-failure message budget in the compact rendering.
const MESSAGE_LINES: usize = 4;
const MESSAGE_CHARS: usize = 300;
/// The generic excerpt shown to a model when no runner was recognised.
const EXCERPT_CHARS: usize = 6_000;

fn verdict(report: &TestReport) -> &'static str {
    if report.succeeded() {
        "passed"
    } else if report.passed + report.failed + report.skipped == 0 && report.errors > 0 {
        "did not run"
    } else {
        "FAILED"
    }
}

fn short_message(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .take(MESSAGE_LINES)
        .collect();
    clip(&lines.join("\n"), MESSAGE_CHARS)
}

/// The report for a model.
pub fn compact(report: &TestReport) -> String {
    let mut out = String::new();
    if report.runner == super::Format::Generic.runner() {
        let _ = writeln!(
            out,
            "output: {} bytes, {} dropped (no test runner recognised)",
            report.input_bytes, report.dropped_bytes
        );
        out.push_str(&excerpt_for_model(&report.excerpt));
        return out;
    }
    let _ = writeln!(
        out,
        "{}: {} — {} passed, {} failed, {} skipped, {} errors",
        report.runner,
        verdict(report),
        report.passed,
        report.failed,
        report.skipped,
        report.errors
    );
    if report.estimated_counts {
        out.push_str("(passed and skipped are estimates: the output does not state them)\n");
    }
    for problem in report.build_errors.iter().take(DETAILED) {
        let _ = writeln!(
            out,
            "error{}: {}",
            problem
                .location
                .as_deref()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default(),
            short_message(&problem.message).replace('\n', "\n  ")
        );
    }
    if !report.failures.is_empty() {
        out.push_str("failures:\n");
    }
    for (
        n,
        Failure {
            id,
            message,
            location,
        },
    ) in report.failures.iter().enumerate()
    {
        if n == LISTED {
            let _ = writeln!(out, "… and {} more", report.failures.len() - LISTED);
            break;
        }
        let _ = write!(out, "- {id}");
        if let Some(location) = location {
            let _ = write!(out, " ({location})");
        }
        out.push('\n');
        if n < DETAILED && !message.trim().is_empty() {
            for line in short_message(message).lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    if report.unnamed > 0 {
        let _ = writeln!(
            out,
            "(incomplete: {} of the failures and errors counted are not named)",
            report.unnamed
        );
    }
    out.pop();
    out
}

/// The generic excerpt within [`EXCERPT_CHARS`]: lines clipped, and when it is still too
/// long, its first lines, its error lines and its last lines.
fn excerpt_for_model(excerpt: &str) -> String {
    let lines: Vec<String> = excerpt.lines().map(|l| clip(l, 240)).collect();
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    if total <= EXCERPT_CHARS {
        return lines.join("\n");
    }
    let (head, tail) = (8, 16);
    let mut keep = vec![false; lines.len()];
    let mut budget = EXCERPT_CHARS;
    let take = |i: usize, keep: &mut Vec<bool>, budget: &mut usize| {
        if !keep[i] && lines[i].len() < *budget {
            keep[i] = true;
            *budget -= lines[i].len() + 1;
        }
    };
    for i in (0..lines.len()).rev().take(tail) {
        take(i, &mut keep, &mut budget);
    }
    for i in 0..lines.len().min(head) {
        take(i, &mut keep, &mut budget);
    }
    let errors: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| super::generic::is_error_line(l))
        .map(|(i, _)| i)
        .collect();
    for i in errors {
        take(i, &mut keep, &mut budget);
    }
    let mut out = Vec::new();
    let mut skipped = 0;
    for (line, kept) in lines.iter().zip(keep) {
        if kept {
            if skipped > 0 {
                out.push(format!("… ({skipped} lines)"));
                skipped = 0;
            }
            out.push(line.clone());
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        out.push(format!("… ({skipped} lines)"));
    }
    out.join("\n")
}

/// A fence longer than any run of backticks in `text`.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// `text` with each line ended by `\n` alone. Markdown ends a line at a lone `\r` too: a
/// message indented under its list item must have each of its lines indented, or a line
/// that is not would end the item, and with it the fence, and be read as markdown.
fn one_ending(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// `text` as one inline code span. A test's name or location is one line, whatever the
/// log claims: a line break (a blank line ends a code span and its paragraph) is shown as
/// a space, so no name can close the span and write markdown of its own.
fn code(text: &str) -> String {
    crate::markdown::code(text, false)
}

/// The report for maintainers (pull request bodies, check runs, the terminal).
pub fn markdown(report: &TestReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "#### Tests ({}): {}\n", report.runner, verdict(report));
    out.push_str("| passed | failed | skipped | errors |\n|---:|---:|---:|---:|\n");
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} |",
        report.passed, report.failed, report.skipped, report.errors
    );
    if report.estimated_counts {
        out.push_str("\n_Passed and skipped are estimates: the output does not state them._\n");
    }
    if report.unnamed > 0 {
        let _ = writeln!(
            out,
            "\n_Incomplete: {} of the failures and errors counted are not named._",
            report.unnamed
        );
    }
    if !report.build_errors.is_empty() {
        out.push_str("\n**Errors before tests ran**\n\n");
        for problem in &report.build_errors {
            let _ = write!(out, "- ");
            if let Some(location) = &problem.location {
                let _ = write!(out, "{} ", code(location));
            }
            let message = one_ending(&short_message(&problem.message));
            let f = fence(&message);
            let _ = writeln!(
                out,
                "\n\n  {f}text\n  {}\n  {f}",
                message.replace('\n', "\n  ")
            );
        }
    }
    if !report.failures.is_empty() {
        out.push_str("\n**Failing tests**\n\n");
        for failure in &report.failures {
            let _ = write!(out, "- {}", code(&failure.id));
            if let Some(location) = &failure.location {
                let _ = write!(out, " at {}", code(location));
            }
            out.push('\n');
            if !failure.message.trim().is_empty() {
                let message = one_ending(&short_message(&failure.message));
                let f = fence(&message);
                let _ = writeln!(
                    out,
                    "\n  {f}text\n  {}\n  {f}",
                    message.replace('\n', "\n  ")
                );
            }
        }
    }
    if !report.excerpt.is_empty() {
        let f = fence(&report.excerpt);
        let _ = write!(
            out,
            "\n<details><summary>Log excerpt ({} of {} bytes dropped)</summary>\n\n{f}text\n{}\n{f}\n</details>\n",
            report.dropped_bytes, report.input_bytes, report.excerpt
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::{Format, TestReport};

    fn failing_report() -> TestReport {
        let mut r = TestReport::new(Format::Cargo);
        r.passed = 3;
        r.failed = 1;
        r.push_failure(
            "parse::tests::x",
            "assertion `left == right` failed\n  left: 1\n right: 2",
            Some("src/parse.rs:10:5"),
        );
        r.excerpt = "running 4 tests\n```weird```\n".to_owned();
        r
    }

    #[test]
    fn compact_names_counts_ids_locations_and_messages() {
        let text = compact(&failing_report());
        assert!(text.starts_with("cargo test: FAILED — 3 passed, 1 failed, 0 skipped, 0 errors"));
        assert!(text.contains("- parse::tests::x (src/parse.rs:10:5)"));
        assert!(text.contains("    left: 1"));
    }

    #[test]
    fn markdown_has_a_table_failures_and_a_safe_excerpt() {
        let md = markdown(&failing_report());
        assert!(md.contains("| 3 | 1 | 0 | 0 |"));
        assert!(md.contains("`parse::tests::x` at `src/parse.rs:10:5`"));
        assert!(md.contains("<details>"));
        // The excerpt holds a triple backtick, so its fence must be longer.
        assert!(md.contains("````text\nrunning 4 tests"));
    }

    #[test]
    fn code_spans_survive_backticks() {
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a\n\n# b\r\rc"), "`a  # b  c`");
    }
}
