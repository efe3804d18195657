//! The comment command parser: `/approve`, `/revise <feedback>`, `/cancel`, `/retry`
//! (or `/retry continue`), `/plan`, also written `@<bot> approve`. Pure text in, a command (or a user error) out;
//! permissions and state are checked by the caller.

use std::fmt;

use crate::contract::ContractVersion;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `version` when the commenter named one (`/approve v2`); otherwise the latest.
    Approve {
        version: Option<ContractVersion>,
    },
    Revise {
        feedback: String,
    },
    Cancel,
    /// `continues`: `/retry continue`, carrying on from the unfinished change a stopped
    /// run kept, rather than starting again from the base.
    Retry {
        continues: bool,
    },
    Plan,
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::Approve { .. } => "approve",
            Command::Revise { .. } => "revise",
            Command::Cancel => "cancel",
            Command::Retry { .. } => "retry",
            Command::Plan => "plan",
        }
    }
}

/// A comment that addresses planwright but cannot be acted on; the message is posted
/// back as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("`/revise` needs to say what to change, e.g. `/revise keep the old function name`.")]
    EmptyFeedback,
    #[error(
        "`{0}` is not a planwright command. Commands: `/approve`, `/revise <feedback>`, `/cancel`, `/retry`, `/retry continue`, `/plan`."
    )]
    Unknown(String),
    #[error(
        "`/retry` takes `continue` (carry on from the unfinished change) or nothing (start again from the base), not `{0}`."
    )]
    RetryArgument(String),
    #[error("This comment holds more than one command (`/{0}` and `/{1}`); send one per comment.")]
    Several(&'static str, &'static str),
}

/// Longest feedback kept: more does not help a planner and would crowd its context.
const MAX_FEEDBACK_CHARS: usize = 8_000;

/// Finds the command in a comment. `bot_names` are the handles planwright answers to
/// (e.g. `planwright` and `planwright[bot]`). A comment without a command is `Ok(None)`;
/// slash words that are not ours (GitLab quick actions, other bots) are ignored; quoted
/// lines and code blocks never count, so replying with a quote of `/approve` approves
/// nothing.
pub fn parse(body: &str, bot_names: &[&str]) -> Result<Option<Command>, CommandError> {
    let lines = live_lines(body);
    let mut found: Option<(usize, Command)> = None;
    for (index, line) in lines.iter().enumerate() {
        let Some((word, rest, addressed)) = command_word(line, bot_names) else {
            continue;
        };
        let command = match word.to_ascii_lowercase().as_str() {
            "approve" => Command::Approve {
                version: version_in(rest),
            },
            "revise" => {
                // The feedback is the rest of the line and every line after it.
                let mut feedback = rest.trim().to_owned();
                for later in &lines[index + 1..] {
                    feedback.push('\n');
                    feedback.push_str(later);
                }
                let feedback = feedback.trim().to_owned();
                if feedback.is_empty() {
                    return Err(CommandError::EmptyFeedback);
                }
                let feedback = feedback.chars().take(MAX_FEEDBACK_CHARS).collect();
                let command = Command::Revise { feedback };
                if let Some((_, first)) = found {
                    return Err(CommandError::Several(first.name(), command.name()));
                }
                return Ok(Some(command));
            }
            "cancel" => Command::Cancel,
            "retry" => Command::Retry {
                continues: retry_continues(rest)?,
            },
            "plan" | "replan" => Command::Plan,
            other if addressed => return Err(CommandError::Unknown(other.to_owned())),
            _ => continue,
        };
        if let Some((_, first)) = &found {
            if first.name() != command.name() {
                return Err(CommandError::Several(first.name(), command.name()));
            }
            continue;
        }
        found = Some((index, command));
    }
    Ok(found.map(|(_, c)| c))
}

/// The comment's lines outside fenced code blocks and quotes, with inline code removed.
fn live_lines(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    // GitLab's multi-line quote: every line from a `>>>` line to the next is quoted. One
    // left open quotes the rest of the comment, as it would hide a command in a reply.
    let mut gitlab_quote = false;
    for raw in body.lines() {
        let line = raw.trim();
        if fence.is_none() && line.starts_with(">>>") {
            gitlab_quote = !gitlab_quote;
            continue;
        }
        if gitlab_quote {
            continue;
        }
        let marker = if line.starts_with("```") {
            Some("```")
        } else if line.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                continue;
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                continue;
            }
            (Some(_), _) => continue,
            (None, None) => {}
        }
        if line.starts_with('>') || raw.starts_with("    ") || raw.starts_with('\t') {
            continue;
        }
        out.push(strip_inline_code(line));
    }
    out
}

fn strip_inline_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            out.push(c);
        }
    }
    out
}

/// `(command word, rest of the line, addressed to us by mention)` when the line starts
/// with `/word` or `@bot word` (`@bot /word` too).
fn command_word<'l>(line: &'l str, bot_names: &[&str]) -> Option<(&'l str, &'l str, bool)> {
    let line = line.trim_start();
    if let Some(after) = line.strip_prefix('/') {
        let (word, rest) = split_word(after);
        return is_word(word).then_some((word, rest, false));
    }
    let after_at = line.strip_prefix('@')?;
    let (handle, rest) = split_word(after_at);
    let handle = handle.trim_end_matches([',', ':']);
    if !bot_names.iter().any(|b| b.eq_ignore_ascii_case(handle)) {
        return None;
    }
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let (word, rest) = split_word(rest);
    if word.is_empty() {
        return None;
    }
    Some((word, rest, true))
}

fn split_word(text: &str) -> (&str, &str) {
    let end = text.find(|c: char| c.is_whitespace()).unwrap_or(text.len());
    (&text[..end], &text[end..])
}

fn is_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `/retry` was followed by `continue`; any other word is refused, so a mistyped
/// `/retry contineu` does not quietly throw the unfinished change away.
fn retry_continues(rest: &str) -> Result<bool, CommandError> {
    let mut words = rest.split_whitespace();
    let Some(first) = words.next() else {
        return Ok(false);
    };
    let word = first.trim_end_matches(['.', '!']);
    if word.eq_ignore_ascii_case("continue") && words.next().is_none() {
        return Ok(true);
    }
    Err(CommandError::RetryArgument(
        rest.trim().chars().take(80).collect(),
    ))
}

/// `v2`, `version 2` or `2` right after `/approve`; anything else ("lgtm!") is not a version.
fn version_in(rest: &str) -> Option<ContractVersion> {
    let mut words = rest.split_whitespace();
    let first = words.next()?.trim_end_matches(['.', ',', '!']);
    let digits = match first.to_ascii_lowercase().as_str() {
        "version" => words.next()?.trim_end_matches(['.', ',', '!']).to_owned(),
        other => other.trim_start_matches('v').to_owned(),
    };
    digits.parse().ok().filter(|n| *n > 0).map(ContractVersion)
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOT: &[&str] = &["planwright", "planwright[bot]"];

    fn p(body: &str) -> Result<Option<Command>, CommandError> {
        parse(body, BOT)
    }

    #[test]
    fn plain_commands() {
        assert_eq!(p("/approve"), Ok(Some(Command::Approve { version: None })));
        assert_eq!(
            p("  /APPROVE  "),
            Ok(Some(Command::Approve { version: None }))
        );
        assert_eq!(p("/cancel"), Ok(Some(Command::Cancel)));
        assert_eq!(p("/retry"), Ok(Some(Command::Retry { continues: false })));
        assert_eq!(p("/plan"), Ok(Some(Command::Plan)));
        assert_eq!(
            p("Looks good.\n\n/approve\n"),
            Ok(Some(Command::Approve { version: None }))
        );
    }

    #[test]
    fn retry_may_continue_and_refuses_other_words() {
        let continues = Ok(Some(Command::Retry { continues: true }));
        assert_eq!(p("/retry continue"), continues);
        assert_eq!(p("/RETRY Continue."), continues);
        assert_eq!(p("@planwright retry continue"), continues);
        assert_eq!(
            p("/retry contineu"),
            Err(CommandError::RetryArgument("contineu".into()))
        );
        assert_eq!(
            p("/retry continue now"),
            Err(CommandError::RetryArgument("continue now".into()))
        );
        let text = CommandError::RetryArgument("from scratch".into()).to_string();
        assert!(
            text.contains("`continue`") && text.contains("`from scratch`"),
            "{text}"
        );
    }

    #[test]
    fn approve_may_name_a_version() {
        for body in [
            "/approve v2",
            "/approve 2",
            "/approve version 2",
            "@planwright approve v2.",
        ] {
            assert_eq!(
                p(body),
                Ok(Some(Command::Approve {
                    version: Some(ContractVersion(2))
                })),
                "{body}"
            );
        }
        assert_eq!(
            p("/approve lgtm!"),
            Ok(Some(Command::Approve { version: None }))
        );
        assert_eq!(
            p("/approve v0"),
            Ok(Some(Command::Approve { version: None }))
        );
    }

    #[test]
    fn mentions_work_with_or_without_the_slash() {
        for body in [
            "@planwright approve",
            "@planwright /approve",
            "@Planwright[bot] approve",
            "@planwright, approve",
        ] {
            assert_eq!(
                p(body),
                Ok(Some(Command::Approve { version: None })),
                "{body}"
            );
        }
        assert_eq!(p("@someone approve"), Ok(None));
        assert_eq!(p("@planwright"), Ok(None));
    }

    #[test]
    fn revise_takes_the_rest_of_the_comment() {
        assert_eq!(
            p("/revise keep the old name\nand add a test for empty input"),
            Ok(Some(Command::Revise {
                feedback: "keep the old name\nand add a test for empty input".into()
            }))
        );
        assert_eq!(
            p("/revise\n\nSplit it in two."),
            Ok(Some(Command::Revise {
                feedback: "Split it in two.".into()
            }))
        );
        assert_eq!(p("/revise   "), Err(CommandError::EmptyFeedback));
        let long = format!("/revise {}", "x".repeat(20_000));
        match p(&long) {
            Ok(Some(Command::Revise { feedback })) => {
                assert_eq!(feedback.len(), MAX_FEEDBACK_CHARS)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn quotes_code_and_inline_code_never_count() {
        assert_eq!(p("> /approve\n\nI disagree."), Ok(None));
        assert_eq!(p("```\n/approve\n```"), Ok(None));
        assert_eq!(p("~~~\n/approve\n~~~\n"), Ok(None));
        assert_eq!(p("    /approve"), Ok(None));
        assert_eq!(p("type `/approve` to run it"), Ok(None));
        assert_eq!(p("`/approve`"), Ok(None));
        // A GitLab reply quoting a comment that said `/approve`.
        assert_eq!(
            p(">>>\nShip it.\n/approve\n>>>\nI am not sure yet."),
            Ok(None)
        );
        assert_eq!(p(">>>\n/approve"), Ok(None));
        assert_eq!(p(">>>\n/approve\n>>>\n/cancel"), Ok(Some(Command::Cancel)));
        assert_eq!(
            p("```\n/cancel\n```\n/approve"),
            Ok(Some(Command::Approve { version: None }))
        );
    }

    #[test]
    fn commands_only_at_the_start_of_a_line() {
        assert_eq!(p("please /approve this"), Ok(None));
        assert_eq!(p("see https://example.com/approve"), Ok(None));
        assert_eq!(p("and/or /approve"), Ok(None));
    }

    #[test]
    fn foreign_slash_words_are_ignored_but_unknown_mentions_are_answered() {
        assert_eq!(p("/label ~bug\n/assign @me"), Ok(None));
        assert_eq!(
            p("/label ~bug\n/approve"),
            Ok(Some(Command::Approve { version: None }))
        );
        assert_eq!(
            p("@planwright merge"),
            Err(CommandError::Unknown("merge".into()))
        );
    }

    #[test]
    fn two_different_commands_are_refused_and_repeats_are_one() {
        assert_eq!(
            p("/approve\n/cancel"),
            Err(CommandError::Several("approve", "cancel"))
        );
        assert_eq!(
            p("/approve\n/revise more tests"),
            Err(CommandError::Several("approve", "revise"))
        );
        assert_eq!(
            p("/approve\n@planwright approve"),
            Ok(Some(Command::Approve { version: None }))
        );
    }

    #[test]
    fn errors_read_as_sentences() {
        assert!(CommandError::EmptyFeedback.to_string().contains("/revise"));
        assert!(
            CommandError::Unknown("merge".into())
                .to_string()
                .contains("`/approve`")
        );
    }
}
