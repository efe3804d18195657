//! Server-sent events as providers stream them: a splitter that cuts a byte stream into
//! whole events as chunks arrive, and the data an event carries. Shared by the clients
//! and the model proxy's meter.

use serde_json::Value;

/// Cuts bytes into whole SSE events (each ending in a blank line), keeping the
/// unfinished rest for the next chunk.
#[derive(Debug, Default)]
pub(crate) struct SseSplitter {
    buf: Vec<u8>,
    /// How far `buf` has been searched for an event end already.
    searched: usize,
}

impl SseSplitter {
    /// The events `chunk` completes, raw, blank line included.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = event_end(&self.buf, self.searched) {
            let rest = self.buf.split_off(end);
            events.push(std::mem::replace(&mut self.buf, rest));
            self.searched = 0;
        }
        // An end marker may straddle chunks: search its first bytes again next time.
        self.searched = self.buf.len().saturating_sub(3);
        events
    }

    /// What is left when the stream ends: an event without its blank line, if any.
    pub fn rest(&mut self) -> Vec<u8> {
        self.searched = 0;
        std::mem::take(&mut self.buf)
    }
}

/// The index just past the first blank line at or after `from`.
fn event_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        if rest.starts_with(b"\n\n") || rest.starts_with(b"\r\r") {
            Some(i + 2)
        } else if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else {
            None
        }
    })
}

/// The JSON an event's `data:` lines carry; `None` for comments, pings without data and
/// OpenAI's closing `[DONE]`.
pub(crate) fn event_data(raw: &[u8]) -> Option<Value> {
    serde_json::from_str(&data_text(raw)?).ok()
}

/// Whether the event is OpenAI's `data: [DONE]`, the last of a whole stream.
pub(crate) fn is_done(raw: &[u8]) -> bool {
    data_text(raw).is_some_and(|data| data.trim() == "[DONE]")
}

/// The event's `data:` lines joined; `None` when it has none.
fn data_text(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("data:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            match &mut data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => data = Some(value.to_owned()),
            }
        }
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_whatever_the_chunking() {
        let stream = b"event: a\ndata: {\"n\":1}\n\n: comment\r\n\r\ndata: {\"n\":\ndata: 2}\n\ndata: [DONE]\n\n";
        for size in 1..stream.len() {
            let mut splitter = SseSplitter::default();
            let events: Vec<Vec<u8>> = stream.chunks(size).flat_map(|c| splitter.push(c)).collect();
            assert_eq!(events.concat(), stream.to_vec(), "chunks of {size}");
            assert_eq!(events.len(), 4, "chunks of {size}");
            assert!(splitter.rest().is_empty());
            assert_eq!(event_data(&events[0]), Some(serde_json::json!({"n": 1})));
            assert_eq!(event_data(&events[1]), None);
            assert_eq!(event_data(&events[2]), Some(serde_json::json!({"n": 2})));
            assert_eq!(event_data(&events[3]), None);
            assert!(is_done(&events[3]) && !is_done(&events[0]) && !is_done(&events[1]));
        }
    }
}
