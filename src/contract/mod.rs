//! The build contract: the planner's decision as a typed document, its validation, the
//! canonical JSON that is hashed (an approval binds to version + hash + base SHA), the
//! markdown comment maintainers read, and the hidden marker that ties the comment back.

mod canonical;
mod diff;
mod links;
mod marker;
mod record;
mod render;
#[cfg(test)]
pub(crate) mod tests;
mod validate;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::ids::CommitSha;
use render::code;

pub use diff::{ContractDiff, Line as DiffLine, Section as DiffSection};
pub use links::SourceLinks;
pub use marker::ContractMarker;
pub use record::{ContractModels, InstructionFile, instruction_table};
pub use render::{RenderContext, open_question, superseded_banner};

/// A contract's version within its session: 1 for the first, one more per `/revise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ContractVersion(pub u32);

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The sha256 of a contract's canonical JSON, lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ContractHash(String);

impl ContractHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits, enough for a person to compare two versions.
    pub fn short(&self) -> &str {
        &self.0[..12.min(self.0.len())]
    }

    /// Accepts only a full lower-case sha256 in hex, as the marker carries it.
    pub fn parse(hex: &str) -> Option<Self> {
        let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        valid.then(|| ContractHash(hex.to_owned()))
    }
}

impl fmt::Display for ContractHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the planner submits (`submit_contract`) and `planwright contract validate` reads.
/// Field names are part of the public interface (DESIGN §10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    pub summary: String,
    pub diagnosis: Diagnosis,
    pub change: Change,
    #[serde(default)]
    pub constraints: Vec<String>,
    #[serde(default)]
    pub out_of_scope: Vec<String>,
    pub verification: Verification,
    pub routing: Routing,
    /// What the planner could not settle. A blocking one refuses `/approve`: a revision
    /// that settles it is needed first. Left out of the JSON when empty, so contracts
    /// without any keep their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_questions: Vec<OpenQuestion>,
    /// The repository's instruction files at the base on the contract's paths, which every
    /// executor is handed. planwright fills it after the planner submits, never the planner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<InstructionFile>,
    /// The models that wrote this version and review its result; planwright fills it.
    #[serde(default, skip_serializing_if = "ContractModels::is_empty")]
    pub models: ContractModels,
}

/// A question the contract leaves open. Written as a plain string (not blocking) or as
/// `{"question": …, "blocking": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "OpenQuestionForm")]
pub struct OpenQuestion {
    pub question: String,
    pub blocking: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OpenQuestionForm {
    Text(String),
    Full {
        question: String,
        #[serde(default)]
        blocking: bool,
    },
}

impl From<OpenQuestionForm> for OpenQuestion {
    fn from(form: OpenQuestionForm) -> Self {
        match form {
            OpenQuestionForm::Text(question) => OpenQuestion {
                question,
                blocking: false,
            },
            OpenQuestionForm::Full { question, blocking } => OpenQuestion { question, blocking },
        }
    }
}

impl Contract {
    /// The questions that must be settled before the contract can be approved.
    pub fn blocking_questions(&self) -> Vec<&str> {
        self.open_questions
            .iter()
            .filter(|q| q.blocking)
            .map(|q| q.question.as_str())
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnosis {
    pub hypothesis: String,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    #[serde(default)]
    pub uncertainties: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub path: String,
    #[serde(
        default,
        deserialize_with = "lines_from_any",
        skip_serializing_if = "Option::is_none"
    )]
    pub lines: Option<LineRange>,
    pub note: String,
}

/// Lines `start..=end` of a file, 1-based. Written `12` or `12-30`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    pub start: u32,
    pub end: u32,
}

impl LineRange {
    /// Reads the forms models actually write: `12`, `12-30`, `L12-L30`, `12:30`, `12–30`.
    pub fn parse(text: &str) -> Option<LineRange> {
        let cleaned: String = text
            .trim()
            .chars()
            .filter(|c| !matches!(c, 'L' | 'l' | ' '))
            .map(|c| {
                if matches!(c, ':' | '–' | '—' | ',') {
                    '-'
                } else {
                    c
                }
            })
            .collect();
        let (start, end) = match cleaned.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let n = cleaned.parse().ok()?;
                (n, n)
            }
        };
        Some(LineRange { start, end })
    }
}

impl fmt::Display for LineRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

impl Serialize for LineRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LineRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        line_range_from_value(&value).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{value}` is not a line range (write 12 or \"12-30\")"
            ))
        })
    }
}

fn line_range_from_value(value: &Value) -> Option<LineRange> {
    let number = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match value {
        Value::Number(_) => number(value).map(|n| LineRange { start: n, end: n }),
        Value::String(s) => LineRange::parse(s),
        Value::Array(items) if items.len() == 2 => Some(LineRange {
            start: number(&items[0])?,
            end: number(&items[1])?,
        }),
        _ => None,
    }
}

fn lines_from_any<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LineRange>, D::Error> {
    let value = Value::deserialize(d)?;
    if value.is_null() {
        return Ok(None);
    }
    line_range_from_value(&value).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "`{value}` is not a line range (write 12 or \"12-30\")"
        ))
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub goal: String,
    #[serde(default)]
    pub expected_behaviour: Vec<String>,
    pub files: Vec<FileChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileChange {
    pub path: String,
    pub action: FileAction,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileAction {
    Modify,
    Create,
    Delete,
}

impl FileAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FileAction::Modify => "modify",
            FileAction::Create => "create",
            FileAction::Delete => "delete",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verification {
    /// Commands planwright runs itself, before and after the change; the repository's
    /// configured test commands are always run as well.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Tests the executor must add.
    #[serde(default)]
    pub new_tests: Vec<String>,
    /// The changes to existing tests the maintainer allows: verification refuses any
    /// other skipped, removed, renamed, weakened or patched test and any change to which
    /// tests run. Left out of the JSON when empty, so contracts without any keep their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_changes: Vec<TestChange>,
}

/// One change to existing tests the contract allows: in this file (or folder), to this
/// test when one is named, of this kind, for this reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestChange {
    pub path: String,
    /// The test as the file names it (`TestCalc.test_add`, or its last part `test_add`);
    /// none allows the change to any test in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    pub kind: TestChangeKind,
    pub why: String,
}

/// What a [`TestChange`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestChangeKind {
    /// Add a skip, expected-failure or focus marker.
    Skip,
    /// Remove a test.
    Remove,
    /// Rename a test and change what it expects.
    Rename,
    /// Remove or change a test's assertions.
    Weaken,
    /// Change which tests run (a runner's settings, a CI line, a build constraint).
    Select,
    /// Replace code under test from a test (`monkeypatch.setattr`, `jest.mock`).
    Patch,
}

impl TestChangeKind {
    pub const ALL: [TestChangeKind; 6] = [
        TestChangeKind::Skip,
        TestChangeKind::Remove,
        TestChangeKind::Rename,
        TestChangeKind::Weaken,
        TestChangeKind::Select,
        TestChangeKind::Patch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TestChangeKind::Skip => "skip",
            TestChangeKind::Remove => "remove",
            TestChangeKind::Rename => "rename",
            TestChangeKind::Weaken => "weaken",
            TestChangeKind::Select => "select",
            TestChangeKind::Patch => "patch",
        }
    }
}

impl TestChange {
    /// The file or folder it covers, normalised as `change.files` are.
    pub fn normalised_path(&self) -> String {
        normalise_path(&self.path)
    }

    /// `skip `tests/x.py` `test_y``: what a ruling it decided quotes.
    pub fn label(&self) -> String {
        let mut label = format!("{} {}", self.kind.as_str(), code(&self.normalised_path()));
        if let Some(test) = &self.test {
            label.push(' ');
            label.push_str(&code(test.trim()));
        }
        label
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routing {
    pub risk: Risk,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The executor ladder, filled by planwright at planning from the repository's
    /// settings (never the planner's to write): the rungs an attempt may climb after a
    /// verified failure, and the one the first attempt runs on. Left out of the JSON when
    /// there is none, so contracts without one keep their hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ladder: Option<Ladder>,
}

/// The executors and models a contract's attempts may use, cheapest first. An attempt
/// that ends in a verified failure (verification, or the reviewer's findings) hands the
/// next attempt to the rung above; an attempt never changes model inside itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ladder {
    pub rungs: Vec<Rung>,
    /// The index of the rung the first attempt runs on.
    pub start: usize,
    /// The attempts the whole ladder may make (the contract's, else the repository's).
    pub attempts: u32,
    /// Why it starts there, in one line, when something other than the risk chose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_reason: Option<String>,
}

/// One rung of a [`Ladder`]: an executor kind, its model and the model's list price (USD
/// per million tokens) when the contract was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rung {
    pub executor: String,
    pub model: String,
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
}

impl Rung {
    /// What `input` and `output` tokens cost on this rung, in micro-USD.
    pub fn cost_microusd(&self, input: u64, output: u64) -> i64 {
        let cost =
            input as f64 * self.input_usd_per_mtok + output as f64 * self.output_usd_per_mtok;
        cost.round() as i64
    }

    /// `builtin · openai:gpt-5-mini`, as comments name a rung.
    pub fn label(&self) -> String {
        format!("{} · {}", self.executor, self.model)
    }
}

impl Ladder {
    /// The rung `index` when there is one.
    pub fn rung(&self, index: usize) -> Option<&Rung> {
        self.rungs.get(index)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// The branch and commit a contract was planned against; an approval binds to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub branch: String,
    pub sha: CommitSha,
}

/// Every problem found in a contract, each with the JSON path it concerns, so a model can
/// fix them all in one more turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub Vec<Problem>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `change.files[2].path`, or `$` for the document itself.
    pub at: String,
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "The contract is not valid:")?;
        for p in &self.0 {
            writeln!(f, "- {}: {}", p.at, p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid {}

fn normalise_path(p: &str) -> String {
    p.trim()
        .trim_start_matches("./")
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}
