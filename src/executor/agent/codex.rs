//! Codex as an executor: its command line and environment for a run whose only provider
//! is the model proxy (a provider of planwright's own), and a reading of its `--json` events.

use std::collections::BTreeMap;

use serde_json::Value;

use super::launch::Launch;
use super::report::{AgentReport, Ending, FINAL_MESSAGE_LIMIT, report, truncate};
use crate::sandbox::MODEL_PROXY_PORT;

pub(super) fn args(launch: &Launch<'_>, env: &mut Vec<(String, String)>) -> Vec<String> {
    let codex_home = launch.home.join(".codex");
    env.push(("CODEX_HOME".into(), codex_home.display().to_string()));
    // The built-in OpenAI provider ignores OPENAI_BASE_URL for some requests
    // and tries a WebSocket to api.openai.com first; a provider of our own
    // speaks plain HTTP to the proxy, with the capability token as its key.
    let provider = format!(
        "model_providers.planwright={{name=\"planwright\",\
         base_url=\"http://127.0.0.1:{MODEL_PROXY_PORT}/v1\",\
         env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}}"
    );
    let mut args: Vec<String> = [
        "exec",
        "--json",
        "--model",
        launch.model,
        "--config",
        "model_provider=planwright",
        "--config",
    ]
    .map(str::to_owned)
    .to_vec();
    args.push(provider);
    args.extend(
        [
            "--config",
            "check_for_update_on_startup=false",
            "--config",
            "analytics.enabled=false",
            "--config",
            "feedback.enabled=false",
            // The repository's instruction files come in the prompt, as the contract lists
            // them: Codex's own reading would add the root's a second time, or let an
            // `AGENTS.override.md` displace the `AGENTS.md` the contract lists.
            "--config",
            "project_doc_max_bytes=0",
            // Web search runs at the provider, outside the sandbox; the model
            // proxy refuses it, so Codex must not offer it.
            "--config",
            "web_search=\"disabled\"",
            // Codex's own sandbox needs user namespaces, which the planwright
            // sandbox it runs in does not allow; that sandbox is the boundary.
            "--sandbox",
            "danger-full-access",
            "--skip-git-repo-check",
            "--ephemeral",
            "--ignore-user-config",
            "--color",
            "never",
            // The prompt comes on stdin.
            "-",
        ]
        .map(str::to_owned),
    );
    args
}

pub(super) fn read(events: impl Iterator<Item = Value>) -> AgentReport {
    let mut tools = BTreeMap::new();
    let mut last_text = None;
    let mut turns = 0;
    let mut stop = Ending::Unfinished;
    for event in events {
        match event["type"].as_str() {
            Some("item.completed") => {
                let item = &event["item"];
                match item["type"].as_str() {
                    Some("agent_message") => last_text = item["text"].as_str().map(str::to_owned),
                    // Warnings Codex reports as items do not end the run.
                    Some("error" | "reasoning") | None => {}
                    Some(kind) => *tools.entry(kind.to_owned()).or_insert(0) += 1,
                }
            }
            Some("turn.completed") => {
                turns += 1;
                stop = Ending::Completed;
            }
            Some("turn.failed") => {
                turns += 1;
                let message = event["error"]["message"]
                    .as_str()
                    .unwrap_or("a failed turn without a message");
                stop = Ending::Failed(truncate(message, FINAL_MESSAGE_LIMIT));
            }
            _ => {}
        }
    }
    // Codex runs with approvals off: it never asks, so it reports no denials.
    report(stop, last_text, tools, Vec::new(), Some(turns))
}
