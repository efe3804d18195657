//! Claude Code as an executor: its command line and environment for a run whose only
//! provider is the model proxy, and a reading of the `stream-json` events it prints.

use std::collections::BTreeMap;

use serde_json::Value;

use super::launch::Launch;
use super::report::{AgentReport, Ending, FINAL_MESSAGE_LIMIT, report, truncate};

/// The tools Claude Code is given: reading, editing and running commands, nothing that
/// reaches out (the web tools) or spawns further agents.
const CLAUDE_TOOLS: &str = "Bash,Edit,Write,Read,Glob,Grep";

/// The tools allowed without asking. Not the editing ones: a rule allowing `Edit` or
/// `Write` allows them on any path, while `acceptEdits` accepts edits inside the working
/// directory only.
const CLAUDE_ALLOWED: &str = "Bash,Read,Glob,Grep";

pub(super) fn args(launch: &Launch<'_>, env: &mut Vec<(String, String)>) -> Vec<String> {
    // Its settings, state and global config in one folder planwright empties before
    // each run (`fresh_config_homes`), never in a `~/.claude.json` beside it.
    env.push((
        "CLAUDE_CONFIG_DIR".into(),
        launch.home.join(".claude").display().to_string(),
    ));
    // Every request but the model's own stays home: no telemetry, error
    // reports, update checks or release notes. Side requests (titles, command
    // checks) use the same model, so the proxy prices all of them.
    for (name, value) in [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("ANTHROPIC_SMALL_FAST_MODEL", launch.model),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", launch.model),
        // The repository's instruction files come in the prompt, as the contract lists
        // them: Claude Code's own reading would add the root's a second time, and any in
        // the run's HOME that nobody listed.
        ("CLAUDE_CODE_DISABLE_CLAUDE_MDS", "1"),
    ] {
        env.push((name.to_owned(), value.to_owned()));
    }
    [
        "-p",
        "--output-format",
        "stream-json",
        // stream-json in print mode requires it.
        "--verbose",
        "--model",
        launch.model,
        "--tools",
        CLAUDE_TOOLS,
        // Edits inside the working directory are accepted, commands are
        // allowed; anything else needs a prompt nobody answers, so it is
        // refused. The sandbox bounds what the commands reach.
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        CLAUDE_ALLOWED,
        "--no-session-persistence",
        "--strict-mcp-config",
        "--disable-slash-commands",
        // Settings from the run's own HOME only: a repository's
        // `.claude/settings.json` must not change models, hooks or endpoints.
        "--setting-sources",
        "user",
    ]
    .map(str::to_owned)
    .to_vec()
}

pub(super) fn read(events: impl Iterator<Item = Value>) -> AgentReport {
    let mut tools = BTreeMap::new();
    let mut last_text = None;
    let mut result: Option<Value> = None;
    for event in events {
        match event["type"].as_str() {
            Some("assistant") => {
                for block in event["message"]["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("tool_use") => {
                            let name = block["name"].as_str().unwrap_or("unknown");
                            *tools.entry(name.to_owned()).or_insert(0) += 1;
                        }
                        Some("text") => last_text = block["text"].as_str().map(str::to_owned),
                        _ => {}
                    }
                }
            }
            Some("result") => result = Some(event),
            _ => {}
        }
    }
    let (stop, final_message, turns) = match &result {
        None => (Ending::Unfinished, last_text, None),
        Some(result) => {
            let text = result["result"].as_str().map(str::to_owned).or(last_text);
            let stop = match (result["subtype"].as_str(), result["is_error"].as_bool()) {
                (Some("error_max_turns"), _) => Ending::MaxTurns,
                (Some("success"), Some(false) | None) => Ending::Completed,
                (subtype, _) => Ending::Failed(truncate(
                    text.as_deref()
                        .or(subtype)
                        .unwrap_or("an error without a message"),
                    FINAL_MESSAGE_LIMIT,
                )),
            };
            (stop, text, result["num_turns"].as_u64())
        }
    };
    let denied = result
        .as_ref()
        .and_then(|r| r["permission_denials"].as_array())
        .into_iter()
        .flatten()
        .map(|d| d["tool_name"].as_str().unwrap_or("unknown").to_owned())
        .collect();
    report(stop, final_message, tools, denied, turns)
}
