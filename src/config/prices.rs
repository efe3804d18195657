//! The price of each model (USD per million tokens): defaults as published, overridden
//! from the settings' `MODEL_PRICES`. What a call costs at these prices is metering's.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::ids::ModelName;

/// USD per million tokens of each kind; with these units a token count times a price is
/// micro-USD, the unit costs are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

/// Prices by `provider:model`. A dated model (`claude-sonnet-4-5-20250929`) takes the
/// price of its undated name.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

/// List prices as published when this table was written; deployments override them with
/// `MODEL_PRICES` rather than waiting for a release.
const DEFAULT_PRICES: &[(&str, Price)] = &[
    ("anthropic:claude-opus-4-5", price(5.0, 25.0, 0.5, 6.25)),
    ("anthropic:claude-sonnet-4-5", price(3.0, 15.0, 0.3, 3.75)),
    ("anthropic:claude-haiku-4-5", price(1.0, 5.0, 0.1, 1.25)),
    ("openai:gpt-5", price(1.25, 10.0, 0.125, 0.0)),
    ("openai:gpt-5-mini", price(0.25, 2.0, 0.025, 0.0)),
    ("openai:gpt-4.1", price(2.0, 8.0, 0.5, 0.0)),
];

const fn price(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
    Price {
        input,
        output,
        cache_read,
        cache_write,
    }
}

impl Default for PriceTable {
    fn default() -> Self {
        Self {
            prices: DEFAULT_PRICES
                .iter()
                .map(|(name, p)| ((*name).to_owned(), *p))
                .collect(),
        }
    }
}

impl PriceTable {
    /// The defaults with `text`'s entries added or replaced. `text` is TOML with one table
    /// per model: `["openai:qwen2.5-coder"]` then `input = 0.0`, `output = 0.0`, and
    /// optionally `cache_read`, `cache_write`.
    pub fn with_overrides(text: &str) -> Result<Self> {
        let overrides: BTreeMap<String, Price> =
            toml::from_str(text).context("expected TOML tables of input/output prices")?;
        let mut table = Self::default();
        for (name, price) in overrides {
            ModelName::parse(&name)?;
            for (what, value) in [
                ("input", price.input),
                ("output", price.output),
                ("cache_read", price.cache_read),
                ("cache_write", price.cache_write),
            ] {
                if !(value.is_finite() && value >= 0.0) {
                    bail!("the {what} price of `{name}` must be a non-negative number");
                }
            }
            table.prices.insert(name, price);
        }
        Ok(table)
    }

    pub fn get(&self, name: &ModelName) -> Option<Price> {
        let full = name.to_string();
        if let Some(p) = self.prices.get(&full) {
            return Some(*p);
        }
        // The longest priced name that `full` extends with a `-suffix`.
        self.prices
            .iter()
            .filter(|(known, _)| {
                full.strip_prefix(known.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(known, _)| known.len())
            .map(|(_, p)| *p)
    }
}
