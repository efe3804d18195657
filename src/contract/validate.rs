//! Reading a contract from the planner's JSON and checking it: every problem found,
//! each named by where it is, so the planner can fix them all at once.

use serde_json::Value;

use super::{
    Base, Change, Contract, ContractVersion, Diagnosis, Invalid, Problem, RenderContext, Routing,
    SourceLinks, Verification, normalise_path,
};
use crate::ids::{CommitSha, SessionId};
use crate::markdown;

/// Limits that keep a contract readable in one comment and sane to execute.
const MAX_SUMMARY_CHARS: usize = 2_000;

const MAX_TEXT_CHARS: usize = 4_000;

const MAX_LIST_ITEMS: usize = 50;

const MAX_FILES: usize = 100;

const MAX_ATTEMPTS: u32 = 10;

const MAX_BUDGET_USD: f64 = 1_000.0;

/// GitHub's comment limit with room for the banner a superseded version gets.
pub(super) const MAX_COMMENT_CHARS: usize = markdown::GITHUB_TEXT_LIMIT - 1_000;

impl Contract {
    /// Parses the JSON a model or a person wrote and validates it; serde's message for a
    /// shape error names the field and position.
    pub fn from_json(text: &str) -> Result<Contract, Invalid> {
        let contract: Contract = serde_json::from_str(text).map_err(|e| {
            Invalid(vec![Problem {
                at: "$".into(),
                message: e.to_string(),
            }])
        })?;
        contract.validate()?;
        Ok(contract)
    }

    /// As `from_json`, from a value already parsed (a tool call's input).
    pub fn from_value(value: Value) -> Result<Contract, Invalid> {
        let contract: Contract = serde_json::from_value(value).map_err(|e| {
            Invalid(vec![Problem {
                at: "$".into(),
                message: e.to_string(),
            }])
        })?;
        contract.validate()?;
        Ok(contract)
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut problems = Vec::new();
        let mut problem = |at: String, message: &str| {
            problems.push(Problem {
                at,
                message: message.to_owned(),
            })
        };
        text(&mut problem, "summary", &self.summary, MAX_SUMMARY_CHARS);
        self.diagnosis.validate(&mut problem);
        self.change.validate(&mut problem);
        strings(&mut problem, "constraints", &self.constraints);
        strings(&mut problem, "out_of_scope", &self.out_of_scope);
        strings(
            &mut problem,
            "verification.commands",
            &self.verification.commands,
        );
        strings(
            &mut problem,
            "verification.new_tests",
            &self.verification.new_tests,
        );
        self.verification.validate_test_changes(&mut problem);
        self.routing.validate(&mut problem);
        list(&mut problem, "open_questions", self.open_questions.len());
        for (i, q) in self.open_questions.iter().enumerate() {
            let at = format!("open_questions[{i}].question");
            text(&mut problem, &at, &q.question, MAX_TEXT_CHARS);
        }

        // Every string, whatever field it is in: what the maintainer reads must be what
        // the executor gets, and these render as nothing or reorder what is around them.
        if let Ok(value) = serde_json::to_value(self) {
            invisible_characters(&mut problem, "", &value);
        }
        // The approver must be able to read all of it in one comment; a forge refuses a
        // longer one, which would only show after planning is paid for.
        let shown = self.rendered_chars();
        if shown > MAX_COMMENT_CHARS {
            problem(
                "$".into(),
                &format!(
                    "is too long to show in one comment ({shown} characters once rendered, at most {MAX_COMMENT_CHARS}); say it more briefly"
                ),
            );
        }

        if problems.is_empty() {
            Ok(())
        } else {
            Err(Invalid(problems))
        }
    }

    /// The length of the comment this contract makes, with links as long as GitHub's.
    fn rendered_chars(&self) -> usize {
        let base = Base {
            branch: "b".repeat(100),
            sha: CommitSha("0".repeat(40)),
        };
        let links = SourceLinks::GitHub {
            repo_url: format!("https://github.com/{}/{}", "o".repeat(39), "r".repeat(100)),
        };
        self.render_markdown(&RenderContext {
            session: &SessionId::generate(),
            version: ContractVersion(u32::MAX),
            base: &base,
            links: &links,
            bot_mention: &"b".repeat(39),
            default_budget_usd: Some(MAX_BUDGET_USD),
        })
        .chars()
        .count()
    }

    /// Every path the change may touch, normalised, for the scope check after execution.
    pub fn declared_paths(&self) -> Vec<String> {
        self.change
            .files
            .iter()
            .map(|f| normalise_path(&f.path))
            .collect()
    }
}

impl Diagnosis {
    fn validate(&self, problem: &mut impl FnMut(String, &str)) {
        text(
            problem,
            "diagnosis.hypothesis",
            &self.hypothesis,
            MAX_TEXT_CHARS,
        );
        for (i, e) in self.evidence.iter().enumerate() {
            let at = format!("diagnosis.evidence[{i}]");
            path(problem, &format!("{at}.path"), &e.path);
            text(problem, &format!("{at}.note"), &e.note, MAX_TEXT_CHARS);
            if let Some(lines) = e.lines
                && (lines.start == 0 || lines.end < lines.start)
            {
                problem(
                    format!("{at}.lines"),
                    "must be 1-based with the end not before the start",
                );
            }
        }
        list(problem, "diagnosis.evidence", self.evidence.len());
        strings(problem, "diagnosis.uncertainties", &self.uncertainties);
    }
}

impl Change {
    fn validate(&self, problem: &mut impl FnMut(String, &str)) {
        text(problem, "change.goal", &self.goal, MAX_TEXT_CHARS);
        strings(
            problem,
            "change.expected_behaviour",
            &self.expected_behaviour,
        );
        if self.files.is_empty() {
            problem(
                "change.files".into(),
                "must name at least one file to touch",
            );
        }
        if self.files.len() > MAX_FILES {
            problem(
                "change.files".into(),
                &format!("at most {MAX_FILES} files; split the work"),
            );
        }
        for (i, f) in self.files.iter().enumerate() {
            let at = format!("change.files[{i}]");
            path(problem, &format!("{at}.path"), &f.path);
            text(problem, &format!("{at}.why"), &f.why, MAX_TEXT_CHARS);
            let normalised = normalise_path(&f.path);
            if self.files[..i]
                .iter()
                .any(|g| normalise_path(&g.path) == normalised)
            {
                problem(format!("{at}.path"), "is listed twice");
            }
        }
    }
}

impl Verification {
    fn validate_test_changes(&self, problem: &mut impl FnMut(String, &str)) {
        list(
            problem,
            "verification.test_changes",
            self.test_changes.len(),
        );
        for (i, t) in self.test_changes.iter().enumerate() {
            let at = format!("verification.test_changes[{i}]");
            path(problem, &format!("{at}.path"), &t.path);
            if !t.path.trim().is_empty() && normalise_path(&t.path).is_empty() {
                problem(
                    format!("{at}.path"),
                    "must name a file or folder, not the whole repository",
                );
            }
            if let Some(test) = &t.test {
                if test.trim().is_empty() {
                    problem(
                        format!("{at}.test"),
                        "must not be empty (leave it out to cover every test in the file)",
                    );
                } else if test.chars().any(char::is_control) {
                    problem(format!("{at}.test"), "must not contain control characters");
                } else {
                    text(problem, &format!("{at}.test"), test, MAX_TEXT_CHARS);
                }
            }
            text(problem, &format!("{at}.why"), &t.why, MAX_TEXT_CHARS);
        }
    }
}

impl Routing {
    fn validate(&self, problem: &mut impl FnMut(String, &str)) {
        if let Some(usd) = self.budget_usd
            && !(usd.is_finite() && usd > 0.0 && usd <= MAX_BUDGET_USD)
        {
            problem(
                "routing.budget_usd".into(),
                &format!("must be more than 0 and at most {MAX_BUDGET_USD}"),
            );
        }
        if self.budget_tokens == Some(0) {
            problem("routing.budget_tokens".into(), "must be more than 0");
        }
        if let Some(n) = self.max_attempts
            && !(1..=MAX_ATTEMPTS).contains(&n)
        {
            problem(
                "routing.max_attempts".into(),
                &format!("must be between 1 and {MAX_ATTEMPTS}"),
            );
        }
        for (key, value) in [
            ("routing.executor", &self.executor),
            ("routing.model", &self.model),
        ] {
            if let Some(v) = value
                && (v.trim().is_empty() || v.chars().any(char::is_control))
            {
                problem(key.into(), "must be a name, not empty");
            }
        }
        if let Some(ladder) = &self.ladder {
            ladder_problems(ladder, problem);
        }
    }
}

/// The most rungs a ladder holds: each is a dearer model to climb to.
const MAX_RUNGS: usize = 8;

/// A ladder planwright wrote reads back only as one it could have written.
fn ladder_problems(ladder: &super::Ladder, problem: &mut impl FnMut(String, &str)) {
    if ladder.rungs.is_empty() || ladder.rungs.len() > MAX_RUNGS {
        problem(
            "routing.ladder.rungs".into(),
            &format!("must hold 1 to {MAX_RUNGS} rungs"),
        );
    }
    if ladder.start >= ladder.rungs.len() {
        problem("routing.ladder.start".into(), "must name one of its rungs");
    }
    for (i, rung) in ladder.rungs.iter().enumerate() {
        for (key, value) in [("executor", &rung.executor), ("model", &rung.model)] {
            if value.trim().is_empty() || value.chars().any(char::is_control) {
                problem(
                    format!("routing.ladder.rungs[{i}].{key}"),
                    "must be a name, not empty",
                );
            }
        }
        for price in [rung.input_usd_per_mtok, rung.output_usd_per_mtok] {
            if !(price.is_finite() && price >= 0.0) {
                problem(
                    format!("routing.ladder.rungs[{i}]"),
                    "prices must be non-negative numbers",
                );
            }
        }
    }
}

fn text(problem: &mut impl FnMut(String, &str), at: &str, value: &str, max: usize) {
    if value.trim().is_empty() {
        problem(at.into(), "must not be empty");
    } else if value.chars().count() > max {
        problem(at.into(), &format!("is longer than {max} characters"));
    }
}

fn strings(problem: &mut impl FnMut(String, &str), at: &str, values: &[String]) {
    list(problem, at, values.len());
    for (i, v) in values.iter().enumerate() {
        text(problem, &format!("{at}[{i}]"), v, MAX_TEXT_CHARS);
    }
}

fn invisible_characters(problem: &mut impl FnMut(String, &str), at: &str, value: &Value) {
    match value {
        Value::String(s) => {
            // A lone carriage return ends a line where forges render markdown but not
            // where the text is split for display, so it could carry a line out of its fence.
            if let Some(c) = s.chars().find(|c| markdown::is_invisible(*c) || *c == '\r') {
                problem(
                    at.to_owned(),
                    &format!(
                        "contains an invisible or direction-changing character (U+{:04X}); write the text without it",
                        u32::from(c)
                    ),
                );
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                invisible_characters(problem, &format!("{at}[{i}]"), item);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let at = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                invisible_characters(problem, &at, item);
            }
        }
        _ => {}
    }
}

fn list(problem: &mut impl FnMut(String, &str), at: &str, len: usize) {
    if len > MAX_LIST_ITEMS {
        problem(at.into(), &format!("has more than {MAX_LIST_ITEMS} items"));
    }
}

/// A path inside the repository: relative, no `..`, no control characters.
fn path(problem: &mut impl FnMut(String, &str), at: &str, value: &str) {
    let v = value.trim();
    if v.is_empty() {
        problem(at.into(), "must not be empty");
    } else if v.starts_with('/') || v.starts_with('\\') || v.contains(":\\") {
        problem(at.into(), "must be relative to the repository root");
    } else if v.split(['/', '\\']).any(|part| part == "..") {
        problem(at.into(), "must not leave the repository (`..`)");
    } else if v.chars().any(char::is_control) {
        problem(at.into(), "must not contain control characters");
    }
}
