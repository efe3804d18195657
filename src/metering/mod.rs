//! What model calls cost: the price table (USD per million tokens, defaults overridable
//! from settings), budgets for a session and a run, holds of a call's worst case against
//! them (`reserve`), and `Metered`, the `ChatModel` wrapper that refuses a call once a
//! budget is used up and records every call's usage.

pub mod proxy;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use async_trait::async_trait;

use crate::config::prices::Price;
use crate::config::prices::PriceTable;
use crate::ids::ModelName;
use crate::ids::{RunId, SessionId};
use crate::llm::{ChatModel, ChatRequest, ChatResponse, ModelError, Usage};
use crate::store::Db;
use crate::store::model_usage::Budget;
use crate::store::model_usage::usd;
use crate::store::model_usage::{self, Held, HoldId, Scope, Spent};

/// What a call costs at a price from the settings.
impl Price {
    /// The most `input` tokens in and `output` tokens out can cost, whatever part of the
    /// input is cached.
    pub fn worst_case(&self, input: u64, output: u64) -> Spent {
        let dearest = self.input.max(self.cache_read).max(self.cache_write);
        let cost = input as f64 * dearest + output as f64 * self.output;
        let tokens = input.saturating_add(output);
        Spent {
            cost_microusd: cost.ceil() as i64,
            tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
        }
    }

    pub fn cost_microusd(&self, usage: &Usage) -> i64 {
        let cost = usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read
            + usage.cache_write_tokens as f64 * self.cache_write;
        cost.round() as i64
    }
}

/// The work a call is made for; stored with its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    Planner,
    Scout,
    Executor,
    Reviewer,
}

impl ModelRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelRole::Planner => "planner",
            ModelRole::Scout => "scout",
            ModelRole::Executor => "executor",
            ModelRole::Reviewer => "reviewer",
        }
    }
}

/// How long a call waits for calls in flight to finish when their holds fill a budget
/// that is not yet spent; past it the call is refused.
const HOLD_WAIT: Duration = Duration::from_secs(300);

/// Why `reserve` refused: the budget and what it says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub scope: String,
    pub spent: String,
    pub limit: String,
    /// Not spent yet, but held by calls in flight for longer than `HOLD_WAIT`.
    pub held: bool,
}

/// Holds `worst` against every budget in `limits` before a call is sent (see
/// `model_usage::hold`); a budget full only of other calls' holds is waited for.
/// `Ok(None)`: nothing to hold, no budget has a limit.
pub async fn reserve(
    db: &Db,
    session: Option<&SessionId>,
    run: Option<&RunId>,
    limits: &[(Scope<'_>, Budget)],
    worst: Spent,
) -> Result<Result<Option<HoldId>, OverBudget>> {
    let limits: Vec<(Scope<'_>, Budget)> = limits
        .iter()
        .filter(|(_, b)| b.max_microusd.is_some() || b.max_tokens.is_some())
        .copied()
        .collect();
    if limits.is_empty() {
        return Ok(Ok(None));
    }
    let deadline = tokio::time::Instant::now() + HOLD_WAIT;
    let mut waited = false;
    loop {
        // Asked for before the attempt, so a release during it is not missed.
        let released = model_usage::RELEASED.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let (i, spent, held) = match model_usage::hold(db, session, run, &limits, worst).await? {
            Held::Held(id) => return Ok(Ok(Some(id))),
            Held::Spent(i, spent) => (i, spent, false),
            Held::Busy(i, spent) => (i, spent, true),
        };
        let now = tokio::time::Instant::now();
        if !held || now >= deadline {
            let (scope, budget) = &limits[i];
            let (spent, limit) =
                budget
                    .check(&spent)
                    .unwrap_or_else(|| match budget.max_microusd {
                        Some(limit) => (usd(spent.cost_microusd), usd(limit)),
                        None => (
                            format!("{} tokens", spent.tokens),
                            format!("{} tokens", budget.max_tokens.unwrap_or_default()),
                        ),
                    });
            return Ok(Err(OverBudget {
                scope: scope.to_string(),
                spent,
                limit,
                held,
            }));
        }
        if !waited {
            waited = true;
            tracing::info!(scope = %limits[i].0, "a model call waits: its budget is held by calls in flight");
        }
        // Holds of other processes are released without telling this one: look again
        // every so often as well.
        let _ = tokio::time::timeout(Duration::from_secs(1).min(deadline - now), released).await;
    }
}

/// A generous count of a request's input tokens from its text: no tokenizer puts fewer
/// than 3 bytes in a token on average, and an image (sent as data) costs the providers
/// at most `IMAGE_TOKENS` however large its bytes.
pub fn input_estimate(text_bytes: usize, images: usize) -> u64 {
    const IMAGE_TOKENS: u64 = 6_400;
    (text_bytes as u64).div_ceil(3) + images as u64 * IMAGE_TOKENS
}

/// A model whose calls are accounted to a role, and optionally a session and a run, each
/// with its budget. A call is refused before anything is sent once a budget is used up;
/// otherwise its worst case is held against the budgets while it runs, so calls made at
/// once end at most one call's worst case over.
#[derive(Debug)]
pub struct Metered {
    model: Arc<dyn ChatModel>,
    price: Price,
    db: Db,
    role: ModelRole,
    session: Option<(SessionId, Budget)>,
    run: Option<(RunId, Budget)>,
}

impl Metered {
    /// Fails for a model without a price: its calls could not be held to a budget.
    pub fn new(
        model: Arc<dyn ChatModel>,
        prices: &PriceTable,
        db: Db,
        role: ModelRole,
    ) -> Result<Self> {
        let Some(price) = prices.get(model.name()) else {
            bail!(
                "Cannot account for {}: it has no price (add it to MODEL_PRICES)",
                model.name()
            );
        };
        Ok(Self {
            model,
            price,
            db,
            role,
            session: None,
            run: None,
        })
    }

    pub fn for_session(mut self, session: SessionId, budget: Budget) -> Self {
        self.session = Some((session, budget));
        self
    }

    pub fn for_run(mut self, run: RunId, budget: Budget) -> Self {
        self.run = Some((run, budget));
        self
    }

    /// Holds the call's worst case against the session's and the run's budgets, so
    /// concurrent calls (scouts run side by side) cannot together pass a limit by more
    /// than one call.
    async fn reserve(&self, request: &ChatRequest) -> Result<Option<HoldId>, ModelError> {
        let mut limits = Vec::new();
        if let Some((id, budget)) = &self.session {
            limits.push((Scope::Session(id), *budget));
        }
        if let Some((id, budget)) = &self.run {
            limits.push((Scope::Run(id), *budget));
        }
        let worst = self.price.worst_case(
            request_input_estimate(request),
            u64::from(request.max_tokens),
        );
        let held = reserve(
            &self.db,
            self.session.as_ref().map(|(id, _)| id),
            self.run.as_ref().map(|(id, _)| id),
            &limits,
            worst,
        )
        .await
        .map_err(ModelError::Accounting)?;
        held.map_err(|over| ModelError::BudgetExceeded {
            role: self.role.as_str().to_owned(),
            model: self.model.name().to_string(),
            scope: over.scope,
            spent: over.spent,
            limit: over.limit,
        })
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut hold = HoldGuard {
            db: self.db.clone(),
            hold: self.reserve(request).await?,
        };
        let result = self.model.chat(request).await;
        // A stream broken off for good may still have cost tokens; they count too.
        let usage = match &result {
            Ok(response) => response.usage,
            Err(ModelError::Interrupted { usage, .. }) if usage.total() > 0 => *usage,
            Err(_) => {
                if let Some(held) = hold.hold.take() {
                    model_usage::release(&self.db, &held)
                        .await
                        .map_err(ModelError::Accounting)?;
                }
                return result;
            }
        };
        let name = self.model.name();
        let record = model_usage::NewUsage {
            session: self.session.as_ref().map(|(id, _)| id),
            run: self.run.as_ref().map(|(id, _)| id),
            role: self.role.as_str(),
            provider: name.provider.as_str(),
            model: &name.model,
            usage,
            cost_microusd: self.price.cost_microusd(&usage),
        };
        let held = hold.hold.take();
        model_usage::record_held(&self.db, &record, held.as_ref())
            .await
            .map_err(ModelError::Accounting)?;
        result
    }
}

/// A call's hold until its usage is recorded. A call given up on (its future dropped,
/// as a cancelled session does) never reaches its record: the hold goes here instead, or
/// it would fill the budget until `model_usage::STALE_HOLD` and make later calls wait.
struct HoldGuard {
    db: Db,
    hold: Option<HoldId>,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else { return };
        let db = self.db.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = model_usage::release(&db, &hold).await {
                    tracing::error!(error = %format!("{e:#}"), "Could not release a model call's budget hold");
                }
            });
        }
    }
}

/// `input_estimate` of what a `ChatRequest` sends.
fn request_input_estimate(request: &ChatRequest) -> u64 {
    let mut bytes = request.system.len();
    for tool in &request.tools {
        bytes += tool.name.len() + tool.description.len() + tool.input_schema.to_string().len();
    }
    for message in &request.messages {
        for block in &message.content {
            bytes += match block {
                crate::llm::ContentBlock::Text(text) => text.len(),
                crate::llm::ContentBlock::ToolUse { id, name, input } => {
                    id.len() + name.len() + input.to_string().len()
                }
                crate::llm::ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => tool_use_id.len() + content.len(),
            };
        }
    }
    input_estimate(bytes, 0)
}

#[async_trait]
impl ChatModel for Metered {
    fn name(&self) -> &ModelName {
        self.model.name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.call(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_micro_usd_per_token_kind() {
        let table = PriceTable::default();
        let sonnet = table
            .get(&ModelName::parse("anthropic:claude-sonnet-4-5-20250929").unwrap())
            .unwrap();
        let usage = Usage {
            input_tokens: 1000,
            output_tokens: 500,
            cache_read_tokens: 2000,
            cache_write_tokens: 100,
        };
        assert_eq!(sonnet.cost_microusd(&usage), 3000 + 7500 + 600 + 375);
        // A longer priced name wins over its prefix.
        let mini = table
            .get(&ModelName::parse("openai:gpt-5-mini").unwrap())
            .unwrap();
        assert_eq!(mini.input, 0.25);
        assert!(
            table
                .get(&ModelName::parse("openai:gpt-50").unwrap())
                .is_none()
        );
    }

    #[test]
    fn overrides_add_and_replace_and_bad_ones_are_named() {
        let table = PriceTable::with_overrides(
            "[\"openai:local-coder\"]\ninput = 0\noutput = 0\n\n[\"anthropic:claude-haiku-4-5\"]\ninput = 2.0\noutput = 8.0\n",
        )
        .unwrap();
        let local = table
            .get(&ModelName::parse("openai:local-coder").unwrap())
            .unwrap();
        assert_eq!(local.output, 0.0);
        let haiku = table
            .get(&ModelName::parse("anthropic:claude-haiku-4-5").unwrap())
            .unwrap();
        assert_eq!(haiku.input, 2.0);
        let err = format!(
            "{:#}",
            PriceTable::with_overrides("[\"mistral:x\"]\ninput = 1\noutput = 1\n").unwrap_err()
        );
        assert!(err.contains("mistral"), "{err}");
        let err = format!(
            "{:#}",
            PriceTable::with_overrides("[\"openai:x\"]\ninput = -1\noutput = 1\n").unwrap_err()
        );
        assert!(err.contains("openai:x"), "{err}");
        assert!(PriceTable::with_overrides("[\"openai:x\"]\ninptu = 1\noutput = 1\n").is_err());
    }

    #[test]
    fn budgets_refuse_at_their_limit() {
        let spent = |cost, tokens| model_usage::Spent {
            cost_microusd: cost,
            tokens,
        };
        assert!(Budget::usd(0.01).check(&spent(9_999, 0)).is_none());
        assert!(Budget::usd(0.01).check(&spent(10_000, 0)).is_some());
        assert!(Budget::tokens(100).check(&spent(0, 100)).is_some());
        assert!(
            Budget::default()
                .check(&spent(i64::MAX, i64::MAX))
                .is_none()
        );
    }
}
