//! Reading usage out of what providers answer through the proxy: the per-API rules for
//! where the token counts are in an answer or in a stream's events.

use serde_json::Value;

use super::api::Api;
use crate::llm::{Usage, anthropic, openai};

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
                    anthropic::apply_usage_delta(&mut self.usage, &data["usage"]);
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
