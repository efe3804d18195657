//! The reviewer: the planner's model reads the approved contract, the result's diff (cut
//! per file when large) and the verification planwright ran itself, and answers with a
//! `verdict` — accepted, what it found, and what the next attempt must do if not.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::json;

use crate::contract::Contract;
use crate::executor::brief;
use crate::llm::{ChatModel, ChatRequest, ContentBlock, Message, ModelError, Role, Tool};
use crate::text::clip;

/// The diff the reviewer reads at most; past it each file keeps a share.
const MAX_DIFF_CHARS: usize = 60_000;
/// Answers without a usable `verdict` before the review gives up.
const MAX_TURNS: usize = 3;
const MAX_TEXT_CHARS: usize = 8_000;

const SYSTEM: &str = "You review the result of a build contract that maintainers approved. \
You get the contract, the change as a diff, and the verification planwright ran itself on \
the base commit and on the result (those results are facts; the executor's own account is \
only a claim). Accept the result when it does what the contract asks, keeps to its \
constraints and scope, and verification shows no failure the change introduced. Otherwise \
do not accept it, and give the executor precise instructions for its next attempt. Answer \
by calling `verdict` once.";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReviewVerdict {
    pub accept: bool,
    /// What the reviewer found, for the pull request.
    #[serde(default)]
    pub findings: String,
    /// What the next attempt must do; empty when accepted.
    #[serde(default)]
    pub instructions: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("The reviewer gave no usable verdict in {MAX_TURNS} answers")]
    NoVerdict,
}

pub struct ReviewRequest<'a> {
    pub contract: &'a Contract,
    pub diff: &'a str,
    /// `VerificationReport::compact`.
    pub verification: &'a str,
    /// The executor's own account of its attempt.
    pub claim: &'a str,
}

fn tool() -> Tool {
    Tool {
        name: "verdict".into(),
        description: "Give the verdict on the result.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "accept": {"type": "boolean", "description": "the result may be opened as a pull request"},
                "findings": {"type": "string", "description": "what you found, for the maintainers (markdown, short)"},
                "instructions": {"type": "string", "description": "when not accepted: what the next attempt must change"}
            },
            "required": ["accept", "findings"]
        }),
    }
}

pub async fn review(
    model: &dyn ChatModel,
    request: &ReviewRequest<'_>,
) -> Result<ReviewVerdict, ReviewError> {
    let mut messages = vec![Message::user(prompt(request))];
    for _ in 0..MAX_TURNS {
        let response = model
            .chat(&ChatRequest {
                system: SYSTEM.into(),
                messages: messages.clone(),
                tools: vec![tool()],
                max_tokens: 4_000,
                temperature: None,
            })
            .await?;
        let mut results = Vec::new();
        for block in &response.content {
            let ContentBlock::ToolUse { id, name, input } = block else {
                continue;
            };
            if name == "verdict" {
                match serde_json::from_value::<ReviewVerdict>(input.clone()) {
                    Ok(mut verdict) => {
                        verdict.findings = clip(verdict.findings.trim(), MAX_TEXT_CHARS);
                        verdict.instructions = clip(verdict.instructions.trim(), MAX_TEXT_CHARS);
                        return Ok(verdict);
                    }
                    Err(e) => results.push(ContentBlock::ToolResult {
                        tool_use_id: id.clone(),
                        content: format!("The verdict could not be read: {e}. Call verdict again."),
                        is_error: true,
                    }),
                }
            } else {
                results.push(ContentBlock::ToolResult {
                    tool_use_id: id.clone(),
                    content: "Only `verdict` is available.".into(),
                    is_error: true,
                });
            }
        }
        messages.push(Message {
            role: Role::Assistant,
            content: response.content.clone(),
        });
        if results.is_empty() {
            messages.push(Message::user("Answer by calling `verdict`."));
        } else {
            messages.push(Message {
                role: Role::User,
                content: results,
            });
        }
    }
    Err(ReviewError::NoVerdict)
}

fn prompt(r: &ReviewRequest<'_>) -> String {
    let mut out = brief(r.contract);
    let _ = write!(
        out,
        "\n# Verification (run by planwright)\n\n{}\n\n# The change\n\n```diff\n{}\n```\n\n\
         # The executor's account (a claim, not evidence)\n\n{}\n",
        r.verification.trim_end(),
        bounded_diff(r.diff).trim_end(),
        clip(r.claim.trim(), MAX_TEXT_CHARS)
    );
    out
}

/// The diff within [`MAX_DIFF_CHARS`]: whole when it fits, otherwise every file's header
/// with an equal share of its lines, so a large file cannot hide the others.
pub fn bounded_diff(diff: &str) -> String {
    if diff.chars().count() <= MAX_DIFF_CHARS {
        return diff.to_owned();
    }
    let mut files: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, _) in diff.match_indices("diff --git ") {
        if i > start {
            files.push(&diff[start..i]);
        }
        start = i;
    }
    files.push(&diff[start..]);
    let share = (MAX_DIFF_CHARS / files.len().max(1)).max(400);
    let mut out = String::new();
    for file in files {
        let count = file.chars().count();
        if count <= share {
            out.push_str(file);
        } else {
            out.push_str(&clip(file, share));
            let _ = writeln!(
                out,
                "\n[… {} more characters of this file's diff]",
                count - share
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_diff_keeps_every_file() {
        let mut diff = String::new();
        for name in ["a.rs", "b.rs", "c.rs"] {
            let _ = writeln!(diff, "diff --git a/{name} b/{name}");
            for i in 0..5_000 {
                let _ = writeln!(diff, "+line {i} of {name}");
            }
        }
        let bounded = bounded_diff(&diff);
        assert!(bounded.chars().count() < MAX_DIFF_CHARS + 500);
        for name in ["a.rs", "b.rs", "c.rs"] {
            assert!(bounded.contains(&format!("diff --git a/{name}")), "{name}");
        }
        assert!(bounded.contains("more characters of this file's diff"));
        assert_eq!(
            bounded_diff("diff --git a/x b/x\n+1\n"),
            "diff --git a/x b/x\n+1\n"
        );
    }
}
