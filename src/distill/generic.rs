//! The generic compressor: summarises any command output in bounded memory. It keeps the
//! head and the tail, collapses runs of repeated or near-identical lines and long stack
//! traces, keeps every line that looks like an error with a little context, and says how
//! much it dropped. It is the whole report for output no parser recognises, and the
//! excerpt of every other report.
//!
//! Two promises, checked by property tests: the summary is never longer than the input,
//! and no error line is lost while the kept middle stays within its budget. Every marker
//! stands for more bytes than it takes; runs too short for that are kept as they were.

use std::collections::VecDeque;

/// Lines kept verbatim from the start and the end.
const HEAD_LINES: usize = 30;
const TAIL_LINES: usize = 30;
/// Lines kept after an error line (one is kept before it).
const AFTER_ERROR: usize = 2;
/// Budget for the kept middle (error lines, their context, markers).
const MIDDLE_BYTES: usize = 48 * 1024;
/// Frames of one stack trace kept before the rest are collapsed.
const FRAMES_KEPT: usize = 4;
/// A run of dropped or collapsed lines is held back up to this many bytes, so that a run
/// shorter than its marker can be kept as it was.
const HOLD_BYTES: u64 = 256;
/// Lines longer than this are cut to a quarter of it.
const LINE_BYTES: usize = 2_000;

/// What the compressor kept of the output.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub text: String,
    pub dropped_bytes: u64,
}

/// Whether a line reads like an error, a failure or a crash.
pub fn is_error_line(line: &str) -> bool {
    const NEEDLES: [&str; 14] = [
        "error",
        "fail",
        "panic",
        "exception",
        "traceback",
        "fatal",
        "assert",
        "denied",
        "not found",
        "undefined",
        "cannot ",
        "could not",
        "segmentation fault",
        "abort",
    ];
    let lower = line.to_ascii_lowercase();
    NEEDLES.iter().any(|n| lower.contains(n))
}

/// Whether a line is one frame of a stack trace (JavaScript/Java `at …`, Python
/// `File "…", line N`, Rust `N: symbol`, Go `\tpath/file.go:N`).
fn is_frame(line: &str) -> bool {
    let t = line.trim_start();
    if t.len() == line.len() {
        return false; // frames are indented
    }
    if t.starts_with("at ") || t.starts_with("File \"") {
        return true;
    }
    if let Some((num, rest)) = t.split_once(": ") {
        return !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty();
    }
    line.starts_with('\t') && t.contains(".go:")
}

/// The line with every run of digits (and hex after `0x`) replaced, so that lines that
/// differ only in numbers, addresses or durations compare equal.
fn shape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            if c == '0' && chars.peek() == Some(&'x') {
                chars.next();
                while chars.peek().is_some_and(|n| n.is_ascii_hexdigit()) {
                    chars.next();
                }
            }
            while chars.peek().is_some_and(|n| n.is_ascii_digit()) {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// A line of the input, or a marker standing for lines collapsed or dropped.
#[derive(Debug, Clone)]
struct Item {
    text: String,
    /// Input bytes this item stands for.
    weight: u64,
    /// The text is the input line itself (not a marker).
    verbatim: bool,
    error: bool,
}

impl Item {
    fn line(text: &str) -> Self {
        let weight = text.len() as u64 + 1;
        let error = is_error_line(text);
        if text.len() > LINE_BYTES {
            // Keep the start of a very long line; the line counts as dropped.
            let clipped = crate::text::clip(text, LINE_BYTES / 4);
            return Item {
                text: clipped,
                weight,
                verbatim: false,
                error,
            };
        }
        Item {
            text: text.to_owned(),
            weight,
            verbatim: true,
            error,
        }
    }
}

/// Holds a run of items; once the run outweighs [`HOLD_BYTES`] it only counts them. Its
/// last item is always kept, so a collapsed run still ends with a real line.
#[derive(Debug, Default)]
struct Run {
    held: Vec<Item>,
    lines: u64,
    bytes: u64,
    overflowed: bool,
    last: Option<Item>,
}

impl Run {
    fn add(&mut self, item: Item) {
        let Some(previous) = self.last.replace(item) else {
            return;
        };
        self.lines += 1;
        self.bytes += previous.weight;
        if self.overflowed {
            return;
        }
        if self.bytes > HOLD_BYTES {
            self.overflowed = true;
            self.held.clear();
        } else {
            self.held.push(previous);
        }
    }

    fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    /// The run as it was, or one marker (standing for more than [`HOLD_BYTES`] bytes of
    /// input, so always shorter than what it replaces) followed by the run's last item.
    fn close(&mut self, describe: impl Fn(u64, u64) -> String) -> Vec<Item> {
        let run = std::mem::take(self);
        let mut out = if run.overflowed {
            vec![Item {
                text: describe(run.lines, run.bytes),
                weight: run.bytes,
                verbatim: false,
                error: false,
            }]
        } else {
            run.held
        };
        out.extend(run.last);
        out
    }
}

#[derive(Default)]
pub struct Compressor {
    // Stage 1: a run of lines of the same shape (errors: the same text).
    similar_key: Option<String>,
    similar_first: Option<Item>,
    similar: Run,
    // Stage 2: a run of stack frames.
    frames_seen: usize,
    frames: Run,
    // Stage 3: head, tail, and what leaves the tail for the middle.
    head: Vec<Item>,
    tail: VecDeque<Item>,
    middle: Vec<Item>,
    middle_bytes: usize,
    dropped: Run,
    last: Option<Item>,
    after_error: usize,
    input_bytes: u64,
}

impl Compressor {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn line(&mut self, line: &str) {
        let item = Item::line(line);
        self.input_bytes += item.weight;
        let key = if item.error {
            line.to_owned()
        } else {
            shape(line)
        };
        if self.similar_key.as_deref() == Some(key.as_str()) {
            self.similar.add(item);
            return;
        }
        self.end_similar();
        self.similar_key = Some(key);
        self.similar_first = Some(item);
    }

    fn end_similar(&mut self) {
        self.similar_key = None;
        if let Some(first) = self.similar_first.take() {
            self.frame_stage(first);
        }
        for item in self
            .similar
            .close(|n, _| format!("… ({n} more similar lines)"))
        {
            self.frame_stage(item);
        }
    }

    fn frame_stage(&mut self, item: Item) {
        if item.verbatim && !item.error && is_frame(&item.text) {
            self.frames_seen += 1;
            if self.frames_seen > FRAMES_KEPT {
                self.frames.add(item);
                return;
            }
            self.place(item);
        } else {
            self.end_frames();
            self.place(item);
        }
    }

    fn end_frames(&mut self) {
        self.frames_seen = 0;
        for item in self.frames.close(|n, _| format!("… ({n} more frames)")) {
            self.place(item);
        }
    }

    fn place(&mut self, item: Item) {
        if self.head.len() < HEAD_LINES {
            self.head.push(item);
            return;
        }
        self.tail.push_back(item);
        if self.tail.len() > TAIL_LINES
            && let Some(evicted) = self.tail.pop_front()
        {
            self.middle_stage(evicted);
        }
    }

    fn middle_stage(&mut self, item: Item) {
        if item.error {
            // The line before an error is its context.
            if let Some(before) = self.last.take() {
                self.keep(before);
            }
            self.keep(item);
            self.after_error = AFTER_ERROR;
        } else if self.after_error > 0 {
            self.after_error -= 1;
            self.keep(item);
        } else if let Some(previous) = self.last.replace(item) {
            self.dropped.add(previous);
        }
    }

    fn keep(&mut self, item: Item) {
        // Past the budget everything joins the dropped run, which then stays open: its
        // marker is written once, at the end.
        if self.middle_bytes + item.text.len() + 1 > MIDDLE_BYTES {
            self.dropped.add(item);
            return;
        }
        self.end_dropped();
        self.middle_bytes += item.text.len() + 1;
        self.middle.push(item);
    }

    fn end_dropped(&mut self) {
        if self.dropped.is_empty() {
            return;
        }
        for item in self
            .dropped
            .close(|n, bytes| format!("… ({n} lines, {bytes} bytes dropped)"))
        {
            self.middle_bytes += item.text.len() + 1;
            self.middle.push(item);
        }
    }

    pub fn finish(mut self) -> Summary {
        self.end_similar();
        self.end_frames();
        if let Some(last) = self.last.take() {
            self.dropped.add(last);
        }
        self.end_dropped();
        let mut text = String::new();
        let mut kept = 0;
        for item in self.head.iter().chain(&self.middle).chain(&self.tail) {
            if item.verbatim {
                kept += item.weight;
            }
            text.push_str(&item.text);
            text.push('\n');
        }
        // No newline after the last line: the summary never outgrows its input, even one
        // whose last line had none.
        text.pop();
        Summary {
            text,
            dropped_bytes: self.input_bytes.saturating_sub(kept),
        }
    }
}

/// Compresses a whole string (tests, and callers that hold small outputs).
pub fn compress(text: &str) -> Summary {
    let mut c = Compressor::new();
    let mut lines = super::lines::Lines::new(text.as_bytes());
    while let Ok(Some(line)) = lines.next_line() {
        c.line(line);
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_as_it_is() {
        let text = "one\ntwo\nerror: three\n";
        let s = compress(text);
        assert_eq!(s.text, text.trim_end());
        assert_eq!(s.dropped_bytes, 0);
    }

    #[test]
    fn long_output_keeps_head_tail_and_errors_and_says_what_it_dropped() {
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!("compiling unit {i} of many with some detail\n"));
            if i == 2500 {
                text.push_str("error[E0308]: mismatched types at src/lib.rs:10:5\n");
            }
        }
        let s = compress(&text);
        assert!(s.text.len() * 20 < text.len(), "{}", s.text.len());
        assert!(
            s.text
                .contains("error[E0308]: mismatched types at src/lib.rs:10:5")
        );
        assert!(s.text.contains("compiling unit 0 of many"));
        assert!(s.text.contains("compiling unit 4999 of many"));
        assert!(s.text.contains("bytes dropped") || s.text.contains("similar lines"));
        assert!(s.dropped_bytes > 0);
    }

    #[test]
    fn long_stack_traces_are_collapsed() {
        let mut text = String::from("Exception in thread main\n");
        for i in 0..200 {
            text.push_str(&format!(
                "    at com.example.Deep.recurse{}(Deep.java:{})\n",
                i % 7,
                i
            ));
        }
        text.push_str("done\n");
        let s = compress(&text);
        assert!(s.text.contains("more similar lines") || s.text.contains("more frames"));
        assert!(s.text.len() < text.len() / 5);
    }

    use proptest::prelude::*;

    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[ -~]{0,60}",
            2 => "[a-z ]{0,20}(error|FAILED|panicked|Traceback|assert)[ -~]{0,30}",
            2 => "    at [a-z.]{1,20}\\([a-z]{1,8}\\.js:[0-9]{1,4}\\)",
            2 => "progress [0-9]{1,6} of [0-9]{1,6}",
            1 => Just(String::new()),
        ]
    }

    fn output() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![3 => line().prop_map(|l| vec![l]),
            1 => (line(), 1usize..40).prop_map(|(l, n)| vec![l; n])],
            0..300,
        )
        .prop_map(|chunks| {
            let mut text = chunks.concat().join("\n");
            text.push('\n');
            text
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn never_longer_than_the_input(text in output()) {
            let s = compress(&text);
            prop_assert!(s.text.len() <= text.len(), "{} > {}", s.text.len(), text.len());
            prop_assert!(s.dropped_bytes <= text.len() as u64);
        }

        #[test]
        fn never_loses_an_error_line(text in output()) {
            let s = compress(&text);
            let kept: std::collections::HashSet<&str> = s.text.lines().collect();
            for l in text.lines().filter(|l| is_error_line(l)) {
                prop_assert!(kept.contains(l), "lost error line {:?}", l);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
            let mut c = Compressor::new();
            let mut lines = crate::distill::lines::Lines::new(&bytes[..]);
            while let Ok(Some(l)) = lines.next_line() {
                c.line(l);
            }
            let s = c.finish();
            prop_assert!(s.text.len() <= bytes.len() * 3);
        }
    }
}
