//! What planwright itself records in a contract beside the planner's decision: the
//! repository's instruction files every executor is handed, and the models that wrote
//! the version and will review its result. Both are part of the hashed JSON, so an
//! approval binds them; both are left out when empty, so older contracts keep their hash.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::markdown;

/// One instruction file of the repository (`AGENTS.md`, `CLAUDE.md`, …) as it was at the
/// contract's base: the run hands over exactly these bytes, or leaves the file out when
/// the checkout's copy no longer matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionFile {
    /// Relative to the repository's root, `/`-separated.
    pub path: String,
    /// The sha256 of the whole file, lower-case hex.
    pub sha256: String,
    /// The file's size.
    pub bytes: u64,
    /// The bytes of it an executor is given: fewer than `bytes` when the cap cut it.
    pub sent: u64,
}

impl InstructionFile {
    /// Whether the cap on all instruction files together cut this one.
    pub fn cut(&self) -> bool {
        self.sent < self.bytes
    }

    /// The first 12 digits of its hash, as the comment and the pull request show it.
    pub fn short_hash(&self) -> &str {
        &self.sha256[..12.min(self.sha256.len())]
    }

    /// How much of it reaches the executor, in words: `812 bytes`, or
    /// `cut to 4096 of 9000 bytes`.
    pub fn size_text(&self) -> String {
        if self.cut() {
            format!("cut to {} of {} bytes", self.sent, self.bytes)
        } else {
            format!("{} bytes", self.bytes)
        }
    }
}

/// The models behind a contract version, by their full names (`anthropic:claude-opus-4`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractModels {
    /// The model that wrote this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// The model that reviews the result of a run on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
}

impl ContractModels {
    pub fn is_empty(&self) -> bool {
        self.planner.is_none() && self.reviewer.is_none()
    }

    /// The comment's line naming them, or `None` for a contract recorded without them.
    pub fn line(&self) -> Option<String> {
        let code = |name: &str| markdown::code(name.trim(), false);
        match (&self.planner, &self.reviewer) {
            (None, None) => None,
            (Some(p), Some(r)) => Some(format!("Planned by {}; reviewed by {}.", code(p), code(r))),
            (Some(p), None) => Some(format!("Planned by {}.", code(p))),
            (None, Some(r)) => Some(format!("Reviewed by {}.", code(r))),
        }
    }
}

/// The table of instruction files, as the contract comment and the pull request show it,
/// under `heading` (none when empty). Nothing when the contract lists none.
pub fn instruction_table(files: &[InstructionFile], heading: &str) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut md = String::new();
    if !heading.is_empty() {
        let _ = writeln!(md, "{heading}\n");
    }
    let _ = writeln!(md, "| file | sha256 | size |");
    let _ = writeln!(md, "|---|---|---|");
    for f in files {
        let _ = writeln!(
            md,
            "| {} | `{}` | {} |",
            markdown::code(&f.path, true),
            f.short_hash(),
            f.size_text()
        );
    }
    md
}

/// The contract comment's part for what planwright recorded: the instruction files and
/// the models. Text from the repository is escaped like the rest of the comment.
pub(super) fn render_record(
    instructions: &[InstructionFile],
    models: &ContractModels,
    md: &mut String,
) {
    if !instructions.is_empty() {
        md.push_str("### Instructions the executor is given\n");
        md.push_str(
            "The repository's own instruction files on the contract's paths, as they are at the base, nearest last. \
             They can shape how the code is written; they never widen the files, the budget or the permissions above.\n\n",
        );
        md.push_str(&instruction_table(instructions, ""));
        md.push('\n');
    }
    if let Some(line) = models.line() {
        md.push_str(&line);
        md.push('\n');
    }
}
