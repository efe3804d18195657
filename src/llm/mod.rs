//! Talking to models: the provider-neutral `ChatModel` interface (messages, tools, tool
//! calls, stop reasons, usage), `provider:model` names, error classification, and the one
//! retry loop both provider clients share. Wire formats stay in `anthropic.rs` and
//! `openai.rs`; accounting and budgets live in `usage.rs`; `proxy` serves executors.

pub mod anthropic;
mod endpoint;
pub mod openai;
pub(crate) mod sse;
mod types;

pub(crate) use endpoint::{error_chain, secret_header};
pub use types::*;

use std::sync::Arc;

use anyhow::bail;

use crate::config::ModelSettings;
use crate::ids::{ModelName, Provider};

/// The client for `name`, with the key and base URL the settings give its provider.
pub fn client(
    name: &ModelName,
    settings: &ModelSettings,
    options: &HttpOptions,
) -> anyhow::Result<Arc<dyn ChatModel>> {
    Ok(match name.provider {
        Provider::Anthropic => {
            let Some(key) = settings.anthropic_api_key.clone() else {
                bail!("Cannot use {name}: ANTHROPIC_API_KEY is not set");
            };
            Arc::new(anthropic::AnthropicClient::new(
                name.model.clone(),
                &settings.anthropic_base_url,
                key,
                options,
            )?)
        }
        Provider::OpenAi => Arc::new(openai::OpenAiClient::new(
            name.model.clone(),
            &settings.openai_base_url,
            settings.openai_api_key.clone(),
            options,
        )?),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::SecretString;

    use super::endpoint::*;
    use super::*;

    #[test]
    fn model_names_parse_and_errors_name_the_culprit() {
        let name = ModelName::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(name.provider, Provider::Anthropic);
        assert_eq!(name.model, "claude-sonnet-4-5");
        // Local servers' model names may contain colons (Ollama tags).
        let name = ModelName::parse("openai:qwen2.5-coder:7b").unwrap();
        assert_eq!(name.provider, Provider::OpenAi);
        assert_eq!(name.model, "qwen2.5-coder:7b");
        let err = ModelName::parse("gemini:pro").unwrap_err().to_string();
        assert!(err.contains("gemini"), "{err}");
        for bad in ["claude-sonnet", "anthropic:", "openai:gpt 5", ""] {
            let err = ModelName::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn retry_after_wins_over_backoff_and_both_are_capped() {
        let policy = ModelRetry {
            max_attempts: 5,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(10),
        };
        assert_eq!(
            policy.delay(3, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(10)
        );
        let first = policy.delay(1, None);
        assert!(first >= Duration::from_secs(2) && first <= Duration::from_millis(2500));
        assert_eq!(policy.delay(10, None), Duration::from_secs(10));
    }

    #[test]
    fn retryable_statuses_are_the_passing_ones() {
        for status in [429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn errors_lose_the_key() {
        let key = SecretString::from("sk-very-secret");
        let error = ModelError::Status {
            provider: Provider::OpenAi,
            status: 401,
            message: "Incorrect API key provided: sk-very-secret".into(),
            retry_after: None,
        };
        let text = redact(error, Some(&key)).to_string();
        assert!(!text.contains("sk-very-secret"), "{text}");
        assert!(text.contains("401"), "{text}");
    }
}
