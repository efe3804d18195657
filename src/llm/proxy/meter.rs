//! Reading usage out of what providers answer through the proxy: a splitter that cuts a
//! server-sent-event stream into whole events as bytes arrive, and the per-API rules for
//! where the token counts are in an answer or in a stream's events.

use serde_json::Value;

use super::Api;
use crate::llm::{Usage, anthropic, openai};

/// Cuts bytes into whole SSE events (each ending in a blank line), keeping the
/// unfinished rest for the next chunk.
#[derive(Debug, Default)]
pub(super) struct SseSplitter {
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
pub(super) fn event_data(raw: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut data = String::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    serde_json::from_str(&data).ok()
}

/// The chunk a Chat Completions stream ends with when `include_usage` is asked: usage
/// and no choices.
pub(super) fn is_usage_only_chunk(data: &Value) -> bool {
    data["usage"].is_object() && data["choices"].as_array().is_some_and(Vec::is_empty)
}

/// The usage a whole (non-streamed) answer reports, if it reports any.
pub(super) fn answer_usage(api: Api, answer: &Value) -> Option<Usage> {
    let usage = &answer["usage"];
    if !usage.is_object() {
        return None;
    }
    Some(match api {
        Api::Messages | Api::CountTokens => anthropic::parse_usage(usage),
        Api::ChatCompletions => openai::parse_usage(usage),
        Api::Responses => openai::parse_responses_usage(usage),
    })
}

/// Usage gathered from a stream's events as they pass.
#[derive(Debug)]
pub(super) struct StreamMeter {
    api: Api,
    usage: Usage,
}

impl StreamMeter {
    pub fn new(api: Api) -> Self {
        Self {
            api,
            usage: Usage::default(),
        }
    }

    pub fn observe(&mut self, data: &Value) {
        match self.api {
            // `message_start` has the input side (and a first output count);
            // `message_delta` has the running output count, and on newer API versions
            // final input counts as well.
            Api::Messages => match data["type"].as_str() {
                Some("message_start") => {
                    self.usage = anthropic::parse_usage(&data["message"]["usage"]);
                }
                Some("message_delta") => {
                    let usage = &data["usage"];
                    let set = |slot: &mut u64, key: &str| {
                        if let Some(n) = usage[key].as_u64() {
                            *slot = n;
                        }
                    };
                    set(&mut self.usage.output_tokens, "output_tokens");
                    set(&mut self.usage.input_tokens, "input_tokens");
                    set(&mut self.usage.cache_read_tokens, "cache_read_input_tokens");
                    set(
                        &mut self.usage.cache_write_tokens,
                        "cache_creation_input_tokens",
                    );
                }
                _ => {}
            },
            Api::ChatCompletions => {
                if data["usage"].is_object() {
                    self.usage = openai::parse_usage(&data["usage"]);
                }
            }
            Api::Responses => {
                let done = matches!(
                    data["type"].as_str(),
                    Some("response.completed" | "response.incomplete" | "response.failed")
                );
                if done && data["response"]["usage"].is_object() {
                    self.usage = openai::parse_responses_usage(&data["response"]["usage"]);
                }
            }
            Api::CountTokens => {}
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }
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
        }
    }

    #[test]
    fn anthropic_output_counts_are_running_totals() {
        let mut meter = StreamMeter::new(Api::Messages);
        meter.observe(
            &serde_json::json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 12, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7,
            "output_tokens": 1}}}),
        );
        meter
            .observe(&serde_json::json!({"type": "message_delta", "usage": {"output_tokens": 30}}));
        meter
            .observe(&serde_json::json!({"type": "message_delta", "usage": {"output_tokens": 42}}));
        assert_eq!(
            meter.usage(),
            Usage {
                input_tokens: 12,
                output_tokens: 42,
                cache_read_tokens: 100,
                cache_write_tokens: 7,
            }
        );
    }
}
