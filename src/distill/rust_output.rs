//! What rustc and libtest print around a failure, read the same way whichever runner
//! shows it (`cargo test` or nextest): a bounded excerpt of one test's output and the
//! panic it summarises to, and the compiler errors of a build that kept tests from running.

use super::TestReport;
use crate::text::clip;

/// Lines kept of one test's output while looking for its panic.
const SNIPPET_LINES: usize = 60;
/// Lines kept before the panic once it shows up (context such as `Error: ...`).
const SNIPPET_HEAD: usize = 8;
/// Characters kept of one buffered output line.
const SNIPPET_LINE_CHARS: usize = 400;
/// Lines and characters of a failure message.
const MESSAGE_LINES: usize = 8;
const MESSAGE_LINE_CHARS: usize = 240;
pub(super) const MESSAGE_CHARS: usize = 700;
/// Compiler errors kept for a failed build.
const MAX_PROBLEMS: usize = 20;

/// A bounded excerpt of one test's output, kept so that its panic can be summarised.
#[derive(Debug, Default, Clone)]
pub(crate) struct Snippet {
    lines: Vec<String>,
    anchored: bool,
}

impl Snippet {
    pub(crate) fn push(&mut self, line: &str) {
        let line = line.trim_end();
        if !self.anchored && is_anchor(line) {
            self.anchored = true;
            self.lines.truncate(SNIPPET_HEAD);
        }
        if self.lines.len() < SNIPPET_LINES {
            self.lines.push(clip(line, SNIPPET_LINE_CHARS));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lines.iter().all(|l| l.trim().is_empty())
    }

    /// The message and location of what went wrong, as far as the excerpt says.
    pub(crate) fn summary(&self) -> (String, Option<String>) {
        summarize(&self.lines)
    }
}

/// Lines where the interesting part of a failure's output starts.
fn is_anchor(line: &str) -> bool {
    let t = line.trim_start();
    t.contains("panicked at ")
        || t.starts_with("note: test did not panic")
        || t.starts_with("error[")
        || (t.starts_with("error: ") && !t.starts_with("error: test failed"))
}

/// Summarises a failed test's output: the panic message (with an assertion's left/right)
/// and its location, or what else explains the failure.
pub(crate) fn summarize(lines: &[String]) -> (String, Option<String>) {
    if let Some(i) = lines.iter().position(|l| l.contains("panicked at ")) {
        let line = &lines[i];
        let after = line
            .find("panicked at ")
            .map_or("", |p| &line[p + "panicked at ".len()..]);
        let (mut message, mut location) = if let Some(quoted) = after.strip_prefix('\'') {
            old_style_panic(quoted, &lines[i + 1..])
        } else {
            let loc = after.trim_end().trim_end_matches(':');
            (message_after(&lines[i + 1..]), as_location(loc))
        };
        if location.as_deref().is_none_or(is_foreign)
            && let Some(frame) = user_frame(&lines[i + 1..])
        {
            location = Some(frame);
        }
        if message.contains("termination value")
            && let Some(err) = lines[..i].iter().find(|l| l.starts_with("Error: "))
        {
            message = format!("{}\n{message}", clip(err.trim(), MESSAGE_LINE_CHARS));
        }
        if let Some(j) = lines
            .iter()
            .position(|l| l.contains("panic did not contain expected string"))
        {
            for l in lines[j..].iter().take(3) {
                message.push('\n');
                message.push_str(&clip(l.trim(), MESSAGE_LINE_CHARS));
            }
        }
        if message.trim().is_empty() {
            message = "panicked".to_owned();
        }
        return (clip(message.trim(), MESSAGE_CHARS), location);
    }
    if let Some(l) = lines
        .iter()
        .find(|l| l.trim_start().starts_with("note: test did not panic"))
    {
        let t = l.trim();
        let location = t.find(" at ").and_then(|p| as_location(&t[p + 4..]));
        return ("test did not panic as expected".to_owned(), location);
    }
    if let Some(i) = lines.iter().position(|l| {
        let t = l.trim_start();
        t.starts_with("error[") || (t.starts_with("error: ") && !t.starts_with("error: aborting"))
    }) {
        let message = clip(lines[i].trim(), MESSAGE_CHARS);
        let location = lines[i + 1..]
            .iter()
            .take(4)
            .find_map(|l| l.trim_start().strip_prefix("--> "))
            .and_then(as_location);
        return (message, location);
    }
    let mut kept = Vec::new();
    for l in lines {
        let t = l.trim();
        if t.is_empty() || is_noise(t) {
            continue;
        }
        kept.push(clip(t, MESSAGE_LINE_CHARS));
        if kept.len() == 3 {
            break;
        }
    }
    (clip(&kept.join("\n"), MESSAGE_CHARS), None)
}

/// libtest's own lines that say nothing about why a test failed.
fn is_noise(t: &str) -> bool {
    t.starts_with("running ")
        || t == "stdout:"
        || t == "stderr:"
        || t == "failures:"
        || t.starts_with("test result:")
        || t.starts_with("---- ")
        || t.starts_with("note: run with `RUST_BACKTRACE")
        || (t.starts_with("test ") && t.contains(" ..."))
}

/// The message lines after a `panicked at file:line:col:` line.
fn message_after(lines: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut chars = 0;
    let mut blanks = 0;
    for l in lines {
        let t = l.trim_end();
        let s = t.trim_start();
        if s.starts_with("note: run with `RUST_BACKTRACE")
            || s.starts_with("stack backtrace:")
            || s.starts_with("note: Some details")
            || s.starts_with("note: panic did not contain")
            || s.contains("panicked at ")
            || s.starts_with("---- ")
            || s == "failures:"
            || s.starts_with("test result:")
            || (s.starts_with("test ") && s.contains(" ..."))
        {
            break;
        }
        if s.is_empty() {
            if out.is_empty() {
                continue;
            }
            blanks += 1;
            if blanks >= 2 {
                break;
            }
            continue;
        }
        if blanks > 0 {
            out.push(String::new());
        }
        blanks = 0;
        let c = clip(t, MESSAGE_LINE_CHARS);
        chars += c.len();
        out.push(c);
        if out.len() >= MESSAGE_LINES || chars >= MESSAGE_CHARS {
            break;
        }
    }
    out.join("\n")
}

/// `panicked at 'message', src/x.rs:1:2` (Rust before 1.73); the message may span lines.
fn old_style_panic(first: &str, rest: &[String]) -> (String, Option<String>) {
    let mut text = first.to_owned();
    let mut i = 0;
    loop {
        if let Some(p) = text.rfind("', ")
            && let Some(loc) = as_location(&text[p + 3..])
        {
            let message = text[..p].to_owned();
            return (clip(&message, MESSAGE_CHARS), Some(loc));
        }
        if i >= rest.len() || i >= MESSAGE_LINES || text.len() > MESSAGE_CHARS * 2 {
            break;
        }
        text.push('\n');
        text.push_str(&clip(rest[i].trim_end(), MESSAGE_LINE_CHARS));
        i += 1;
    }
    let first_line = first.trim_end_matches('\'');
    (clip(first_line, MESSAGE_CHARS), None)
}

/// Whether a path belongs to the standard library or a dependency rather than the project.
fn is_foreign(path: &str) -> bool {
    path.starts_with("/rustc/")
        || path.starts_with("library/")
        || path.contains("/library/std/")
        || path.contains("/library/core/")
        || path.contains("/library/alloc/")
        || path.contains("/rustlib/")
        || path.contains("/.cargo/registry/")
        || path.contains("/cargo/registry/")
        || path.contains("/.cargo/git/")
}

/// The first backtrace frame (`at ./src/x.rs:1:2`) in the project's own code.
fn user_frame(lines: &[String]) -> Option<String> {
    let start = lines
        .iter()
        .position(|l| l.trim_start().starts_with("stack backtrace:"))?;
    lines[start + 1..]
        .iter()
        .take(SNIPPET_LINES)
        .filter_map(|l| l.trim_start().strip_prefix("at "))
        .filter_map(as_location)
        .find(|p| !is_foreign(p))
        .map(|p| p.strip_prefix("./").map(str::to_owned).unwrap_or(p))
}

/// `path:line` or `path:line:col` (trailing text cut), if `s` is one.
pub(crate) fn as_location(s: &str) -> Option<String> {
    let s = s.trim().trim_end_matches([':', ',', '.']);
    let mut parts = s.rsplitn(3, ':');
    let last = parts.next()?;
    let middle = parts.next()?;
    let numeric = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !numeric(last) {
        return None;
    }
    let path_ok = |p: &str| !p.is_empty() && !p.contains(' ');
    if numeric(middle) {
        parts.next().filter(|p| path_ok(p)).map(|_| s.to_owned())
    } else if path_ok(middle) {
        Some(s.to_owned())
    } else {
        None
    }
}

/// Compiler errors seen while building, kept in case the build turns out to have failed.
#[derive(Debug, Default)]
pub(crate) struct BuildErrors {
    diags: Vec<(String, Option<String>)>,
    /// The last diagnostic is an error still waiting for its `-->` location.
    open: bool,
    rustc_error: bool,
    could_not_compile: Option<String>,
}

impl BuildErrors {
    /// Reads a line printed while no test binary runs.
    pub(crate) fn line(&mut self, t: &str) {
        if t.starts_with("error: could not compile ") {
            self.open = false;
            if self.could_not_compile.is_none() {
                self.could_not_compile = Some(clip(t, MESSAGE_CHARS));
            }
            return;
        }
        if t.starts_with("error[") || (t.starts_with("error: ") && !is_runtime_error(t)) {
            self.rustc_error |= t.starts_with("error[");
            if self.diags.len() < MAX_PROBLEMS {
                self.diags.push((clip(t, MESSAGE_CHARS), None));
                self.open = true;
            } else {
                self.open = false;
            }
            return;
        }
        if t.starts_with("warning:") || t.starts_with("error") {
            self.open = false;
            return;
        }
        if self.open
            && let Some(rest) = t.strip_prefix("--> ")
        {
            self.open = false;
            if let Some(last) = self.diags.last_mut() {
                last.1 = as_location(rest);
            }
        }
    }

    /// Whether the build failed (cargo said so, or rustc reported errors).
    pub(crate) fn failed(&self) -> bool {
        self.could_not_compile.is_some() || self.rustc_error
    }

    pub(crate) fn saw_could_not_compile(&self) -> bool {
        self.could_not_compile.is_some()
    }

    /// Records the build failure: one error, with the compiler's messages as problems.
    pub(crate) fn report(&self, report: &mut TestReport, fallback: Option<&str>) {
        report.errors += 1;
        let mut any = false;
        for (message, location) in &self.diags {
            if message.starts_with("error: aborting due to") {
                continue;
            }
            report.push_problem(message, location.as_deref());
            any = true;
        }
        if !any {
            let message = self
                .could_not_compile
                .as_deref()
                .or(fallback)
                .unwrap_or("build failed before tests ran");
            report.push_problem(message, None);
        }
    }
}

/// Cargo's own `error:` lines about running tests, not about compiling them.
fn is_runtime_error(t: &str) -> bool {
    let rest = &t["error: ".len().min(t.len())..];
    rest.starts_with("test failed")
        || rest.starts_with("doctest failed")
        || rest.starts_with("process didn't exit")
        || rest.starts_with("aborting due to")
        || rest.starts_with("command `")
        || rest.bytes().next().is_some_and(|b| b.is_ascii_digit())
}
