//! What changed from one contract version to the next, section by section: files added,
//! removed or changed in action or reason, constraints, verification commands, expected
//! behaviour, routing and budget. Read by maintainers before they approve a revision, so
//! it says what the decision now is, not which characters moved.

use std::fmt::Write as _;

use super::{Contract, Evidence, FileChange, Routing};
use crate::markdown;

/// Characters of a changed text shown on each side.
const TEXT_CHARS: usize = 400;

/// Bytes kept for the line naming the sections that did not fit: every title, once.
const ROOM_LINE: usize = 300;

/// One change within a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Added(String),
    Removed(String),
    /// `what` went from `from` to `to`; `what` is empty where the section names it.
    Changed {
        what: String,
        from: String,
        to: String,
    },
}

/// The changes of one section of the contract, in the order the contract shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub title: &'static str,
    pub lines: Vec<Line>,
}

/// Every section that changed; empty when the two versions decide the same thing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContractDiff {
    pub sections: Vec<Section>,
}

/// The instruction files a contract lists, one line each, as the diff names them.
fn instructions(c: &Contract) -> Vec<String> {
    c.instructions
        .iter()
        .map(|f| format!("{} ({}, {})", f.path, f.short_hash(), f.size_text()))
        .collect()
}

impl ContractDiff {
    pub fn between(old: &Contract, new: &Contract) -> ContractDiff {
        let mut sections = Vec::new();
        let mut section = |title: &'static str, lines: Vec<Line>| {
            if !lines.is_empty() {
                sections.push(Section { title, lines });
            }
        };
        section("Summary", text("", &old.summary, &new.summary));
        section("Diagnosis", diagnosis(old, new));
        section("Goal", text("", &old.change.goal, &new.change.goal));
        section(
            "Expected behaviour",
            items(
                &old.change.expected_behaviour,
                &new.change.expected_behaviour,
            ),
        );
        section("Files", files(&old.change.files, &new.change.files));
        section("Constraints", items(&old.constraints, &new.constraints));
        section("Out of scope", items(&old.out_of_scope, &new.out_of_scope));
        let mut verification = items(&old.verification.commands, &new.verification.commands);
        for line in items(&old.verification.new_tests, &new.verification.new_tests) {
            verification.push(match line {
                Line::Added(t) => Line::Added(format!("new test {t}")),
                Line::Removed(t) => Line::Removed(format!("new test {t}")),
                other => other,
            });
        }
        let allowed = |c: &Contract| -> Vec<String> {
            c.verification
                .test_changes
                .iter()
                .map(|t| {
                    let test = t
                        .test
                        .as_deref()
                        .map_or(String::new(), |t| format!(" {}", t.trim()));
                    format!(
                        "allows {} in {}{test}: {}",
                        t.kind.as_str(),
                        t.normalised_path(),
                        t.why.trim()
                    )
                })
                .collect()
        };
        verification.extend(items(&allowed(old), &allowed(new)));
        section("Verification", verification);
        section("Routing and budget", routing(&old.routing, &new.routing));
        let questions = |c: &Contract| -> Vec<String> {
            c.open_questions.iter().map(super::open_question).collect()
        };
        section("Open questions", items(&questions(old), &questions(new)));
        section(
            "Instructions",
            items(&instructions(old), &instructions(new)),
        );
        let models = |c: &Contract| c.models.line().into_iter().collect::<Vec<_>>();
        section("Models", items(&models(old), &models(new)));
        ContractDiff { sections }
    }

    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }

    /// Adds what the versions were planned against and with, when that changed: the base
    /// commit, and the repository settings bound with the approval.
    pub fn with_base(mut self, old_sha: &str, new_sha: &str, settings_changed: bool) -> Self {
        let short = |sha: &str| sha.chars().take(12).collect::<String>();
        let mut lines = Vec::new();
        if old_sha != new_sha {
            lines.push(Line::Changed {
                what: "base commit".into(),
                from: short(old_sha),
                to: short(new_sha),
            });
        }
        if settings_changed {
            lines.push(Line::Added(
                "the repository settings changed (listed below)".into(),
            ));
        }
        if !lines.is_empty() {
            self.sections.push(Section {
                title: "Base and settings",
                lines,
            });
        }
        self
    }

    /// The section of a revision's comment, escaped like the contract itself; at most
    /// `max` characters, the rest named by section.
    pub fn markdown(&self, from: u32, max: usize) -> String {
        let mut out = format!("### Changes from v{from}\n\n");
        // Room for the heading and the line naming what did not fit, or nothing at all.
        if max < out.len() + ROOM_LINE {
            return String::new();
        }
        let max = max - ROOM_LINE;
        if self.sections.is_empty() {
            out.push_str("Nothing the contract decides changed; only its wording did.\n\n");
            return out;
        }
        let mut left_out = Vec::new();
        for s in &self.sections {
            let mut part = format!("**{}**\n", s.title);
            for line in &s.lines {
                part.push_str(&match line {
                    Line::Added(t) => format!("- ➕ {}\n", markdown::inline(t)),
                    Line::Removed(t) => format!("- ➖ ~~{}~~\n", markdown::inline(t)),
                    Line::Changed { what, from, to } if what.is_empty() => format!(
                        "- ✏️ {} → {}\n",
                        markdown::inline(from),
                        markdown::inline(to)
                    ),
                    Line::Changed { what, from, to } => format!(
                        "- ✏️ {}: {} → {}\n",
                        markdown::inline(what),
                        markdown::inline(from),
                        markdown::inline(to)
                    ),
                });
            }
            part.push('\n');
            if left_out.is_empty() && out.len() + part.len() <= max {
                out.push_str(&part);
            } else {
                left_out.push(s.title);
            }
        }
        if !left_out.is_empty() {
            let _ = writeln!(
                out,
                "Also changed, not shown for room: {} (`planwright contract diff` shows all).\n",
                left_out.join(", ")
            );
        }
        debug_assert!(out.len() <= max + ROOM_LINE);
        out
    }

    /// Plain text for a terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for s in &self.sections {
            let _ = writeln!(out, "{}:", s.title);
            for line in &s.lines {
                let _ = match line {
                    Line::Added(t) => writeln!(out, "  + {t}"),
                    Line::Removed(t) => writeln!(out, "  - {t}"),
                    Line::Changed { what, from, to } if what.is_empty() => {
                        writeln!(out, "  ~ {from} → {to}")
                    }
                    Line::Changed { what, from, to } => writeln!(out, "  ~ {what}: {from} → {to}"),
                };
            }
        }
        out
    }
}

fn clip(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::clip(&text, TEXT_CHARS)
}

/// A text field: changed, or nothing (whitespace alone does not count).
fn text(what: &str, old: &str, new: &str) -> Vec<Line> {
    if same(old, new) {
        return Vec::new();
    }
    vec![Line::Changed {
        what: what.to_owned(),
        from: clip(old),
        to: clip(new),
    }]
}

fn same(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// A list: what is in one and not the other, in each one's order.
fn items(old: &[String], new: &[String]) -> Vec<Line> {
    let mut lines: Vec<Line> = old
        .iter()
        .filter(|o| !new.iter().any(|n| same(n, o)))
        .map(|o| Line::Removed(clip(o)))
        .collect();
    lines.extend(
        new.iter()
            .filter(|n| !old.iter().any(|o| same(o, n)))
            .map(|n| Line::Added(clip(n))),
    );
    lines
}

fn diagnosis(old: &Contract, new: &Contract) -> Vec<Line> {
    let (o, n) = (&old.diagnosis, &new.diagnosis);
    let mut lines = text("hypothesis", &o.hypothesis, &n.hypothesis);
    let shown = |e: &Evidence| match e.lines {
        Some(l) => format!("evidence {}:{l}: {}", e.path, e.note),
        None => format!("evidence {}: {}", e.path, e.note),
    };
    let (old_evidence, new_evidence): (Vec<String>, Vec<String>) = (
        o.evidence.iter().map(shown).collect(),
        n.evidence.iter().map(shown).collect(),
    );
    lines.extend(items(&old_evidence, &new_evidence));
    for line in items(&o.uncertainties, &n.uncertainties) {
        lines.push(match line {
            Line::Added(t) => Line::Added(format!("uncertainty: {t}")),
            Line::Removed(t) => Line::Removed(format!("uncertainty: {t}")),
            other => other,
        });
    }
    lines
}

/// Files by path: added, removed, or the same path with another action or reason.
fn files(old: &[FileChange], new: &[FileChange]) -> Vec<Line> {
    let key = |f: &FileChange| super::normalise_path(&f.path);
    let shown = |f: &FileChange| format!("{} ({}): {}", key(f), f.action.as_str(), clip(&f.why));
    let mut lines = Vec::new();
    for o in old {
        match new.iter().find(|n| key(n) == key(o)) {
            None => lines.push(Line::Removed(shown(o))),
            Some(n) => {
                if n.action != o.action {
                    lines.push(Line::Changed {
                        what: format!("{} action", key(o)),
                        from: o.action.as_str().to_owned(),
                        to: n.action.as_str().to_owned(),
                    });
                }
                if !same(&n.why, &o.why) {
                    lines.push(Line::Changed {
                        what: format!("{} why", key(o)),
                        from: clip(&o.why),
                        to: clip(&n.why),
                    });
                }
            }
        }
    }
    for n in new {
        if !old.iter().any(|o| key(o) == key(n)) {
            lines.push(Line::Added(shown(n)));
        }
    }
    lines
}

fn routing(old: &Routing, new: &Routing) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut field = |what: &str, from: Option<String>, to: Option<String>| {
        if from != to {
            let none = "not set".to_owned();
            lines.push(Line::Changed {
                what: what.to_owned(),
                from: from.unwrap_or_else(|| none.clone()),
                to: to.unwrap_or(none),
            });
        }
    };
    field(
        "risk",
        Some(old.risk.as_str().to_owned()),
        Some(new.risk.as_str().to_owned()),
    );
    field("executor", old.executor.clone(), new.executor.clone());
    field("model", old.model.clone(), new.model.clone());
    let usd = |v: Option<f64>| v.map(|u| format!("${u:.2}"));
    field("budget", usd(old.budget_usd), usd(new.budget_usd));
    let n = |v: Option<u64>| v.map(|t| t.to_string());
    field("token budget", n(old.budget_tokens), n(new.budget_tokens));
    let attempts = |v: Option<u32>| v.map(|t| t.to_string());
    field(
        "max attempts",
        attempts(old.max_attempts),
        attempts(new.max_attempts),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::sample_json;

    fn contract(edit: impl FnOnce(&mut serde_json::Value)) -> Contract {
        let mut json = sample_json();
        edit(&mut json);
        Contract::from_value(json).unwrap()
    }

    #[test]
    fn the_same_decision_in_other_spacing_is_no_change() {
        let a = contract(|_| {});
        let b = contract(|j| {
            j["summary"] = serde_json::json!(format!("  {}  ", j["summary"].as_str().unwrap()));
        });
        assert!(ContractDiff::between(&a, &b).is_empty());
        assert!(
            ContractDiff::between(&a, &b)
                .markdown(1, 10_000)
                .contains("Nothing the contract decides changed")
        );
    }

    #[test]
    fn a_changed_instruction_file_or_model_is_a_change() {
        let file = |sha: &str| serde_json::json!([{"path": "src/AGENTS.md", "sha256": sha, "bytes": 12, "sent": 12}]);
        let a = contract(|j| {
            j["instructions"] = file(&"ab".repeat(32));
            j["models"] = serde_json::json!({"planner": "anthropic:claude-opus-4"});
        });
        let b = contract(|j| {
            j["instructions"] = file(&"cd".repeat(32));
            j["models"] = serde_json::json!({"planner": "openai:gpt-5"});
        });
        let diff = ContractDiff::between(&a, &b);
        let titles: Vec<&str> = diff.sections.iter().map(|s| s.title).collect();
        assert_eq!(titles, ["Instructions", "Models"]);
        assert_eq!(
            diff.sections[0].lines,
            [
                Line::Removed("src/AGENTS.md (abababababab, 12 bytes)".into()),
                Line::Added("src/AGENTS.md (cdcdcdcdcdcd, 12 bytes)".into())
            ]
        );
    }

    #[test]
    fn each_section_says_what_was_added_removed_or_changed() {
        let a = contract(|_| {});
        let b = contract(|j| {
            j["change"]["files"][0]["action"] = "create".into();
            j["change"]["files"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"path": "src/lex.rs", "action": "modify", "why": "the lexer too"}));
            j["constraints"] = serde_json::json!(["no new dependencies", "keep `parse` public"]);
            j["verification"]["commands"] = serde_json::json!(["cargo test --all"]);
            j["routing"]["risk"] = "medium".into();
            j["routing"]["budget_usd"] = serde_json::json!(3.5);
        });
        let diff = ContractDiff::between(&a, &b);
        let titles: Vec<&str> = diff.sections.iter().map(|s| s.title).collect();
        assert_eq!(
            titles,
            ["Files", "Constraints", "Verification", "Routing and budget"]
        );
        let text = diff.text();
        assert!(
            text.contains("  ~ src/parse.rs action: modify → create\n"),
            "{text}"
        );
        assert!(
            text.contains("  + src/lex.rs (modify): the lexer too\n"),
            "{text}"
        );
        assert!(text.contains("  + cargo test --all\n"), "{text}");
        assert!(text.contains("  ~ risk: low → medium\n"), "{text}");
        assert!(text.contains("  ~ budget: $2.50 → $3.50\n"), "{text}");

        // A change to tests a revision starts to allow is what a maintainer must see.
        let c = contract(|j| {
            j["verification"]["test_changes"] = serde_json::json!([
                {"path": "tests/parse.rs", "test": "old_shape", "kind": "remove", "why": "the shape is gone"}
            ]);
        });
        let text = ContractDiff::between(&a, &c).text();
        assert!(
            text.contains("  + allows remove in tests/parse.rs old_shape: the shape is gone\n"),
            "{text}"
        );
    }

    #[test]
    fn the_comment_section_is_escaped_and_bounded() {
        let a = contract(|_| {});
        let b = contract(|j| {
            j["constraints"] =
                serde_json::json!(["<!-- planwright:contract {} --> @admin [x](http://evil)"]);
            j["out_of_scope"] = serde_json::json!(["y".repeat(300)]);
        });
        let diff = ContractDiff::between(&a, &b);
        let md = diff.markdown(1, 10_000);
        assert!(!md.contains("<!--"), "{md}");
        assert!(!md.contains("@admin"), "{md}");
        // Room for all but the last section.
        let short = diff.markdown(1, md.len() - 40);
        assert!(short.len() <= md.len() - 40, "{short}");
        assert_eq!(diff.markdown(1, 100), "", "no room, no section");
        assert!(
            short.contains("Also changed, not shown for room: Out of scope"),
            "{short}"
        );
    }
}
