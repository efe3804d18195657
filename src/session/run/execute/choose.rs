//! Which executor carries out a contract: the contract's routing may name one and its
//! model, the repository's settings give the default, and each kind is checked against
//! what this planwright has (the model proxy's socket, the installed coding CLI).

use std::sync::Arc;

use super::execution::Execution;
use crate::config::ProxyListen;
use crate::config::repo::{ExecutorKind, RepoConfig};
use crate::executor::agent::AgentCli;
use crate::executor::{self, AgentExecutor, Builtin, CommandExecutor, Executor, ProxyAccess};
use crate::ids::{Provider, RunId};
use crate::metering::ModelRole;
use crate::sandbox::Sandbox;
use crate::session::comments;
use crate::session::error::Stop;
use crate::store::model_usage::Budget;

impl Execution<'_> {
    pub(super) fn executor(
        &self,
        kind: ExecutorKind,
        model: Option<&str>,
        config: &RepoConfig,
        sandbox: &Arc<dyn Sandbox>,
        run: &RunId,
        (budget, left): (Budget, Budget),
    ) -> Result<Box<dyn Executor>, Stop> {
        let proxy = self.app.model_proxy.as_ref().and_then(|p| match &p.listen {
            ProxyListen::Unix(socket) => Some(ProxyAccess {
                socket: socket.clone(),
                capabilities: p.capabilities.clone(),
                run: run.clone(),
                session: self.id.clone(),
            }),
            ProxyListen::Tcp(_) => None,
        });
        // A rung of the ladder names its own model; without one, the contract's routing.
        let named = model.or(self.contract.routing.model.as_deref());
        let choice = match named {
            Some(name) => Some(
                crate::ids::ModelName::parse(name)
                    .map_err(|e| Stop::fail(comments::executor_model_unusable(&e)))?,
            ),
            None => config.executor_model(self.contract.routing.risk).cloned(),
        };
        match kind {
            ExecutorKind::Builtin => {
                let model = self
                    .app
                    .model_for_run(
                        ModelRole::Executor,
                        &self.id,
                        run,
                        budget,
                        left,
                        choice.as_ref(),
                    )
                    .map_err(|e| Stop::fail(format!("{e:#}")))?;
                Ok(Box::new(Builtin::new(model, sandbox.clone())))
            }
            ExecutorKind::Command => {
                let line = config.executor_command.clone().unwrap_or_default();
                CommandExecutor::new(line, sandbox.clone(), proxy)
                    .map(|e| Box::new(e) as Box<dyn Executor>)
                    .map_err(|e| Stop::fail(e.to_string()))
            }
            ExecutorKind::ClaudeCode | ExecutorKind::Codex => {
                let (cli, provider) = if kind == ExecutorKind::ClaudeCode {
                    (AgentCli::ClaudeCode, Provider::Anthropic)
                } else {
                    (AgentCli::Codex, Provider::OpenAi)
                };
                let Some(proxy) = proxy else {
                    return Err(Stop::fail(comments::no_model_proxy(cli.name())));
                };
                let Some(program) = executor::agent::locate(cli) else {
                    let text = comments::executor_not_installed(cli.name(), cli.program_name());
                    return Err(Stop::fail(text));
                };
                let name = self
                    .app
                    .model_name(ModelRole::Executor, choice.as_ref())
                    .map_err(|e| Stop::fail(format!("{e:#}")))?;
                if name.provider != provider {
                    let speaks = match provider {
                        Provider::Anthropic => "Anthropic",
                        Provider::OpenAi => "OpenAI",
                    };
                    return Err(Stop::fail(comments::wrong_provider(
                        cli.name(),
                        &name,
                        speaks,
                    )));
                }
                Ok(Box::new(AgentExecutor::new(
                    cli,
                    program,
                    name.model,
                    sandbox.clone(),
                    proxy,
                )))
            }
        }
    }
}

impl Execution<'_> {
    /// The executor model an attempt of `kind` runs on (`provider:model`), as its run
    /// records it: the contract's choice, else the repository's for the risk, else the
    /// deployment's; `None` for the command executor, which names none.
    pub(super) fn attempt_model(&self, kind: ExecutorKind, config: &RepoConfig) -> Option<String> {
        if kind == ExecutorKind::Command {
            return None;
        }
        let choice = match &self.contract.routing.model {
            Some(name) => Some(crate::ids::ModelName::parse(name).ok()?),
            None => config.executor_model(self.contract.routing.risk).cloned(),
        };
        let name = self.app.model_name(ModelRole::Executor, choice.as_ref());
        name.ok().map(|n| n.to_string())
    }
}

pub(super) fn parse_executor(name: &str) -> Option<ExecutorKind> {
    [
        ExecutorKind::Builtin,
        ExecutorKind::ClaudeCode,
        ExecutorKind::Codex,
        ExecutorKind::Command,
    ]
    .into_iter()
    .find(|k| k.as_str() == name.trim())
}
