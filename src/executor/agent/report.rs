//! What a CLI run's reading comes to: how it ended ([`Ending`]) and the executor's
//! [`AgentReport`] made from it, bounded in size.

use std::collections::BTreeMap;

use crate::executor::StopReason;

/// Characters of the final message kept; the whole stream stays in the transcript.
pub(super) const FINAL_MESSAGE_LIMIT: usize = 16 * 1024;
/// Characters of the summary line.
pub(super) const SUMMARY_LIMIT: usize = 1024;

/// How a CLI run ended, in its own words; [`report`] reads it as the executor's
/// [`StopReason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ending {
    /// The agent finished and said so.
    Completed,
    /// The agent ran out of turns before finishing.
    MaxTurns,
    /// The CLI reported a failure (a model API error, a failed turn).
    Failed(String),
    /// The stream ended without a result: the process died or was killed.
    Unfinished,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentReport {
    /// One bounded line: turns, tools used, how it ended.
    pub summary: String,
    pub final_message: Option<String>,
    pub stop: StopReason,
    /// What the CLI said when it failed (a model API error, a failed turn).
    pub failure: Option<String>,
    /// Tool (or item) names and how often each was used.
    pub tools: BTreeMap<String, u32>,
    /// Tools the CLI refused to run for want of a permission, in order.
    pub denied: Vec<String>,
}

pub(super) fn report(
    ending: Ending,
    final_message: Option<String>,
    tools: BTreeMap<String, u32>,
    denied: Vec<String>,
    turns: Option<u64>,
) -> AgentReport {
    let (stop, failure) = match ending {
        Ending::Completed => (StopReason::Finished, None),
        Ending::MaxTurns => (StopReason::TurnLimit, None),
        // The proxy refuses a call past the run's budget with a message saying so, which
        // the CLI reports as its failure.
        Ending::Failed(message) if message.to_ascii_lowercase().contains("budget") => {
            (StopReason::Budget, Some(message))
        }
        Ending::Failed(message) => (StopReason::Crashed, Some(message)),
        Ending::Unfinished => (StopReason::Crashed, None),
    };
    let ending = match (&stop, &failure) {
        (StopReason::Finished, _) => "completed".to_owned(),
        (StopReason::TurnLimit, _) => "stopped at the turn limit".to_owned(),
        (_, Some(message)) => format!("failed: {}", first_line(message)),
        (_, None) => "ended without a result".to_owned(),
    };
    let used = if tools.is_empty() {
        "no tools".to_owned()
    } else {
        tools
            .iter()
            .map(|(name, n)| format!("{name} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let turns = match turns {
        None => String::new(),
        Some(1) => "1 turn, ".to_owned(),
        Some(n) => format!("{n} turns, "),
    };
    let refused = match denied.len() {
        0 => String::new(),
        n => format!(" ({n} denied: {})", denied.join(", ")),
    };
    AgentReport {
        summary: truncate(&format!("{turns}{used}{refused}; {ending}"), SUMMARY_LIMIT),
        final_message: final_message.map(|m| truncate(&m, FINAL_MESSAGE_LIMIT)),
        stop,
        failure,
        tools,
        denied,
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// At most `limit` characters, marked when cut.
pub(super) fn truncate(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}
