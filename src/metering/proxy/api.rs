//! The provider APIs the proxy speaks, one per route: which provider each belongs to,
//! where it lives upstream and whether it is metered.

use crate::ids::Provider;

/// The provider API a route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Messages,
    CountTokens,
    ChatCompletions,
    Responses,
}

impl Api {
    pub(super) fn provider(self) -> Provider {
        match self {
            Api::Messages | Api::CountTokens => Provider::Anthropic,
            Api::ChatCompletions | Api::Responses => Provider::OpenAi,
        }
    }

    /// The path under the provider's base URL: Anthropic's is the host, OpenAI's ends
    /// in `/v1`, as the settings (and both vendors' tools) have them.
    pub(super) fn upstream_path(self) -> &'static str {
        match self {
            Api::Messages => "/v1/messages",
            Api::CountTokens => "/v1/messages/count_tokens",
            Api::ChatCompletions => "/chat/completions",
            Api::Responses => "/responses",
        }
    }

    /// Counting tokens is free: neither held to the budget nor recorded.
    pub(super) fn metered(self) -> bool {
        self != Api::CountTokens
    }
}
