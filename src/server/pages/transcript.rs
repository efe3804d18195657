//! An attempt's transcript: everything its executor did, kept raw under
//! `DATA_DIR/runs/<run>/executor/`. The page shows it distilled, a page at a time: one
//! entry per line, each clipped, its kind named. Only the operator downloads the raw
//! file, streamed as it is, however large. Reading never holds more than a page of
//! clipped lines in memory, whatever the file's size or the length of its lines.

use std::path::{Path, PathBuf};

use askama::Template;
use serde::Serialize;

/// Entries on one page.
pub const PAGE_LINES: usize = 200;
/// Characters of one entry shown; the rest is counted, not shown.
const ENTRY_CHARS: usize = 2_000;
/// Bytes of one line read at most; a longer line is skipped to its end.
const LINE_BYTES: usize = 64 * 1024;

/// The transcript file of a run, as its executor left it, if there is one.
pub fn path(data_dir: &Path, run: &str) -> Option<PathBuf> {
    let records = data_dir.join("runs").join(run).join("executor");
    ["transcript.jsonl", "transcript.log"]
        .into_iter()
        .map(|name| records.join(name))
        .find(|p| p.is_file())
}

#[derive(Serialize)]
pub struct Entry {
    /// The line's number in the file, from 1.
    pub line: usize,
    /// What the entry is (`type`, `kind` or `event` of a JSON line; `text` otherwise).
    pub kind: String,
    pub text: String,
    /// Characters not shown.
    pub clipped: usize,
}

#[derive(Serialize)]
pub struct TranscriptView {
    pub session: String,
    pub run: String,
    pub page: usize,
    pub entries: Vec<Entry>,
    /// Whether a next page exists.
    pub more: bool,
    pub bytes: u64,
    #[serde(skip)]
    pub raw: bool,
}

#[derive(Template)]
#[template(path = "transcript.html")]
pub struct TranscriptPage<'a> {
    pub t: &'a TranscriptView,
    pub csrf: &'a str,
}

/// Reads page `page` (from 0) of the transcript at `path`.
pub fn read(path: &Path, page: usize) -> std::io::Result<(Vec<Entry>, bool, u64)> {
    let file = std::fs::File::open(path)?;
    let bytes = file.metadata()?.len();
    let mut reader = std::io::BufReader::new(file);
    let first = page.saturating_mul(PAGE_LINES);
    let mut entries = Vec::new();
    let mut number = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let Some(cut) = next_line(&mut reader, &mut line)? else {
            return Ok((entries, false, bytes));
        };
        number += 1;
        if number <= first {
            continue;
        }
        if entries.len() == PAGE_LINES {
            return Ok((entries, true, bytes));
        }
        entries.push(entry(number, &line, cut));
    }
}

/// Reads one line into `into`, at most [`LINE_BYTES`] of it; the rest of a longer line
/// is read past and counted. `None` at the end of the file.
fn next_line(
    reader: &mut impl std::io::BufRead,
    into: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    let mut cut = 0;
    let mut read_any = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(read_any.then_some(cut));
        }
        read_any = true;
        let (chunk, ends) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None => (buffer, None),
        };
        let room = LINE_BYTES.saturating_sub(into.len());
        into.extend_from_slice(&chunk[..chunk.len().min(room)]);
        cut += chunk.len().saturating_sub(room);
        let used = ends.unwrap_or(buffer.len());
        reader.consume(used);
        if ends.is_some() {
            return Ok(Some(cut));
        }
    }
}

fn entry(line: usize, bytes: &[u8], cut: usize) -> Entry {
    let text = String::from_utf8_lossy(bytes);
    let (kind, shown) = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) => {
            let kind = ["type", "kind", "event", "role"]
                .iter()
                .find_map(|k| value.get(*k).and_then(|v| v.as_str()))
                .unwrap_or("entry")
                .to_owned();
            (kind, value.to_string())
        }
        Err(_) => ("text".to_owned(), text.into_owned()),
    };
    let total = shown.chars().count();
    let text: String = shown.chars().take(ENTRY_CHARS).collect();
    Entry {
        line,
        kind,
        clipped: total.saturating_sub(ENTRY_CHARS) + cut,
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_bounded_whatever_the_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("transcript.jsonl");
        let mut text = String::new();
        text.push_str("{\"type\":\"tool_call\",\"name\":\"run\"}\n");
        text.push_str(&"x".repeat(LINE_BYTES * 3));
        text.push('\n');
        for n in 0..(PAGE_LINES * 2) {
            text.push_str(&format!("plain line {n}\n"));
        }
        text.push_str("no newline at the end");
        std::fs::write(&file, &text).unwrap();
        let (entries, more, bytes) = read(&file, 0).unwrap();
        assert!(more);
        assert_eq!(bytes, text.len() as u64);
        assert_eq!(entries.len(), PAGE_LINES);
        assert_eq!(entries[0].kind, "tool_call");
        assert_eq!(entries[1].text.chars().count(), ENTRY_CHARS);
        assert_eq!(entries[1].clipped, LINE_BYTES * 3 - ENTRY_CHARS);
        assert_eq!(entries[2].text, "plain line 0");
        let (last, more, _) = read(&file, 2).unwrap();
        assert!(!more);
        assert_eq!(last.last().unwrap().text, "no newline at the end");
        assert_eq!(last.last().unwrap().line, PAGE_LINES * 2 + 3);
        let (beyond, more, _) = read(&file, 50).unwrap();
        assert!(beyond.is_empty() && !more);
    }
}
