//! The executor ladder: built at planning from the repository's `escalation` (or
//! `escalate: true`) with the deployment's prices, model keys and installed executors,
//! each problem a settings error at the rung's line; where a contract's first attempt
//! starts; and, between attempts, what climbing one rung would cost.

use crate::app::App;
use crate::config::repo::{ConfigError, Escalation, ExecutorKind, RepoConfig};
use crate::contract::{Ladder, Risk, Routing, Rung};
use crate::executor::agent::{self, AgentCli};
use crate::ids::{ModelName, Provider};
use crate::metering::ModelRole;

/// One rung as the settings ask for it, before the deployment is asked about it.
struct Wanted {
    executor: ExecutorKind,
    model: ModelName,
    /// The settings' line the rung is written on.
    line: Option<usize>,
    /// The key an error names.
    key: &'static str,
}

/// The ladder the repository's settings ask for, checked against what this deployment
/// has; `None` when they ask for none. `attempts` is what the whole ladder may make.
pub(in crate::session) fn build(
    app: &App,
    config: &RepoConfig,
    routing: &Routing,
    attempts: u32,
) -> Result<Option<Ladder>, ConfigError> {
    let wanted = wanted_rungs(app, config)?;
    if wanted.is_empty() {
        return Ok(None);
    }
    let path = config.source.clone().unwrap_or_default();
    let error = |w: &Wanted, i: usize, message: String| ConfigError {
        path: path.clone(),
        line: w.line,
        message: format!("`{}`: rung {} (`{}`): {message}", w.key, i + 1, w.model),
    };
    let mut rungs: Vec<Rung> = Vec::new();
    for (i, w) in wanted.iter().enumerate() {
        let Some(price) = app.settings.models.prices.get(&w.model) else {
            let text = "has no price: add it to the deployment's `MODEL_PRICES`, or choose a \
                        priced model";
            return Err(error(w, i, text.into()));
        };
        if let Some(missing) = missing_key(app, &w.model) {
            let text = format!("{missing} is not set in this deployment");
            return Err(error(w, i, text));
        }
        if let Some(why) = not_runnable(app, w.executor, &w.model) {
            return Err(error(w, i, why));
        }
        let rung = Rung {
            executor: w.executor.as_str().to_owned(),
            model: w.model.to_string(),
            input_usd_per_mtok: price.input,
            output_usd_per_mtok: price.output,
        };
        if let Some(before) = rungs.last()
            && list_price(&rung) < list_price(before)
        {
            let text = format!(
                "costs less than rung {i} (`{}`: ${:.2} against ${:.2} per million tokens in \
                 and out); list the rungs cheapest first",
                before.model,
                list_price(&rung),
                list_price(before)
            );
            return Err(error(w, i, text));
        }
        rungs.push(rung);
    }
    let risk_model = config.executor_model(routing.risk);
    let (start, start_reason) = start(&rungs, routing, risk_model);
    Ok(Some(Ladder {
        rungs,
        start,
        attempts,
        start_reason,
    }))
}

/// Whether the settings' ladder can be built here: checked before any model is paid.
pub(in crate::session) fn check(app: &App, config: &RepoConfig) -> Result<(), ConfigError> {
    let routing = Routing {
        risk: Risk::Low,
        executor: None,
        model: None,
        budget_usd: None,
        budget_tokens: None,
        max_attempts: None,
        ladder: None,
    };
    build(app, config, &routing, 1).map(drop)
}

/// The rungs the settings name, in order; the executor tiers (`escalate: true`) each fall
/// back to the deployment's executor model, and a tier naming the model of the one below
/// it adds no rung.
fn wanted_rungs(app: &App, config: &RepoConfig) -> Result<Vec<Wanted>, ConfigError> {
    // The deployment's `ESCALATE` stands for `escalate: true` where the settings are silent.
    let deployment = Escalation::Tiers {
        line: None,
        tier_lines: [None; 3],
    };
    let from_deployment = config.escalation == Escalation::Unset && app.settings.escalate;
    let escalation = match from_deployment {
        true => &deployment,
        false => &config.escalation,
    };
    match escalation {
        Escalation::Unset | Escalation::Off => Ok(Vec::new()),
        Escalation::Rungs(rungs) => Ok(rungs
            .iter()
            .map(|r| Wanted {
                executor: r.executor,
                model: r.model.clone(),
                line: r.line,
                key: "escalation",
            })
            .collect()),
        Escalation::Tiers { line, tier_lines } => {
            let path = config.source.clone().unwrap_or_default();
            // The deployment's default passes over a repository whose executor has no tiers.
            if config.executor == ExecutorKind::Command && from_deployment {
                return Ok(Vec::new());
            }
            if config.executor == ExecutorKind::Command {
                return Err(ConfigError {
                    path,
                    line: *line,
                    message: "`escalate`: the `command` executor runs no model of planwright's \
                              choosing, so it has no tiers to climb"
                        .into(),
                });
            }
            let tiers = [
                config.models.executor_low.as_ref(),
                config.models.executor_medium.as_ref(),
                config.models.executor_high.as_ref(),
            ];
            let mut wanted: Vec<Wanted> = Vec::new();
            for (tier, tier_line) in tiers.into_iter().zip(tier_lines) {
                let model = match tier {
                    Some(m) => m.clone(),
                    None => app
                        .model_name(ModelRole::Executor, None)
                        .map_err(|e| ConfigError {
                            path: path.clone(),
                            line: *line,
                            message: format!("`escalate`: {e:#}"),
                        })?,
                };
                if wanted.last().is_some_and(|w| w.model == model) {
                    continue;
                }
                wanted.push(Wanted {
                    executor: config.executor,
                    model,
                    line: tier.and(*tier_line).or(*line),
                    key: match (tier, from_deployment) {
                        (Some(_), _) => "models.executor",
                        (None, false) => "escalate",
                        (None, true) => "ESCALATE",
                    },
                });
            }
            Ok(wanted)
        }
    }
}

/// The setting whose key a model's provider needs, when this deployment lacks it. An
/// OpenAI-compatible server of the operator's own may need none.
fn missing_key(app: &App, model: &ModelName) -> Option<&'static str> {
    let models = &app.settings.models;
    match model.provider {
        Provider::Anthropic => models
            .anthropic_api_key
            .is_none()
            .then_some("`ANTHROPIC_API_KEY`"),
        Provider::OpenAi => (models.openai_api_key.is_none()
            && models.openai_base_url.contains("api.openai.com"))
        .then_some("`OPENAI_API_KEY`"),
    }
}

/// Why this deployment cannot run `executor` with `model`, if it cannot: a coding CLI
/// must be installed, reach the model proxy, and speak the model's provider.
fn not_runnable(app: &App, executor: ExecutorKind, model: &ModelName) -> Option<String> {
    let (cli, provider) = match executor {
        ExecutorKind::Builtin => return None,
        ExecutorKind::Command => {
            return Some("the `command` executor cannot be a rung".into());
        }
        ExecutorKind::ClaudeCode => (AgentCli::ClaudeCode, Provider::Anthropic),
        ExecutorKind::Codex => (AgentCli::Codex, Provider::OpenAi),
    };
    if agent::locate(cli).is_none() {
        return Some(format!(
            "the {} executor is not installed here (no `{}` on PATH)",
            cli.name(),
            cli.program_name()
        ));
    }
    if app.model_proxy.is_none() {
        return Some(format!(
            "the {} executor needs the model proxy, which this deployment does not run",
            cli.name()
        ));
    }
    (model.provider != provider)
        .then(|| format!("{} speaks only its own vendor's models", cli.name()))
}

/// A rung's list price as rungs are compared: USD per million input tokens plus per
/// million output tokens.
pub(super) fn list_price(rung: &Rung) -> f64 {
    rung.input_usd_per_mtok + rung.output_usd_per_mtok
}

/// Where a contract's first attempt starts, and why when the risk did not choose it: the
/// rung the contract's routing names (the planner's choice, or a maintainer's pin through
/// `/revise`), else the rung of the repository's executor model for the contract's risk,
/// else the risk's place on the ladder (low the first rung, medium the second, high the
/// third, none past the last). A start learned from outcomes is decided here too.
pub(in crate::session) fn start(
    rungs: &[Rung],
    routing: &Routing,
    risk_model: Option<&ModelName>,
) -> (usize, Option<String>) {
    if let Some(model) = &routing.model {
        let named = rungs.iter().position(|r| {
            r.model == *model && routing.executor.as_ref().is_none_or(|e| *e == r.executor)
        });
        return match named {
            Some(i) => (i, Some(format!("the contract's routing names `{model}`"))),
            None => (
                by_risk(rungs, routing.risk, risk_model),
                Some(format!(
                    "the contract's routing names `{model}`, which is not on the ladder; the \
                     risk chose the start"
                )),
            ),
        };
    }
    (by_risk(rungs, routing.risk, risk_model), None)
}

fn by_risk(rungs: &[Rung], risk: Risk, risk_model: Option<&ModelName>) -> usize {
    let last = rungs.len().saturating_sub(1);
    if let Some(model) = risk_model
        && let Some(i) = rungs.iter().position(|r| r.model == model.to_string())
    {
        return i;
    }
    match risk {
        Risk::Low => 0,
        Risk::Medium => 1.min(last),
        Risk::High => 2.min(last),
    }
}

/// What the next attempt would likely cost on `next`: the last attempt's tokens at its
/// prices, in micro-USD.
pub(super) fn estimate(next: &Rung, input_tokens: u64, output_tokens: u64) -> i64 {
    next.cost_microusd(input_tokens, output_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rung(model: &str, input: f64, output: f64) -> Rung {
        Rung {
            executor: "builtin".into(),
            model: model.into(),
            input_usd_per_mtok: input,
            output_usd_per_mtok: output,
        }
    }

    fn routing(risk: Risk, model: Option<&str>) -> Routing {
        Routing {
            risk,
            executor: None,
            model: model.map(str::to_owned),
            budget_usd: None,
            budget_tokens: None,
            max_attempts: None,
            ladder: None,
        }
    }

    #[test]
    fn the_start_is_the_risks_rung_unless_the_routing_pins_one() {
        let rungs = [
            rung("openai:gpt-5-mini", 0.25, 2.0),
            rung("anthropic:claude-sonnet-4-5", 3.0, 15.0),
        ];
        assert_eq!(start(&rungs, &routing(Risk::Low, None), None), (0, None));
        assert_eq!(start(&rungs, &routing(Risk::Medium, None), None), (1, None));
        assert_eq!(start(&rungs, &routing(Risk::High, None), None), (1, None));
        let tier = ModelName::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(
            start(&rungs, &routing(Risk::Low, None), Some(&tier)),
            (1, None)
        );
        let pinned = start(
            &rungs,
            &routing(Risk::High, Some("openai:gpt-5-mini")),
            None,
        );
        assert_eq!(
            pinned,
            (
                0,
                Some("the contract's routing names `openai:gpt-5-mini`".into())
            )
        );
        let (i, why) = start(&rungs, &routing(Risk::Low, Some("openai:gpt-5")), None);
        assert_eq!(i, 0);
        assert!(why.unwrap().contains("not on the ladder"));
    }

    #[test]
    fn the_next_rungs_cost_is_the_last_attempts_tokens_at_its_prices() {
        let next = rung("anthropic:claude-sonnet-4-5", 3.0, 15.0);
        // 100k in at $3/M and 10k out at $15/M: $0.30 + $0.15.
        assert_eq!(estimate(&next, 100_000, 10_000), 450_000);
    }
}
