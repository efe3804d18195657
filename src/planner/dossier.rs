//! The planner's explicit state, persisted per session: what it believes, what it has
//! observed (with file:line evidence), what is still open, and its scouts' reports. Each
//! planner turn is built from this, not from a growing transcript.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// How much of the dossier's observation text a turn carries; older bodies are dropped
/// (their source line stays) once the total passes this.
const MAX_OBSERVATION_CHARS: usize = 24_000;
const MAX_BELIEFS: usize = 12;
const MAX_QUESTIONS: usize = 8;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dossier {
    /// The planner's current beliefs, replaced each time it states them.
    pub beliefs: Vec<String>,
    pub open_questions: Vec<String>,
    pub observations: Vec<Observation>,
    pub scout_reports: Vec<ScoutReport>,
    /// Problems with the planner's last `submit_contract`, shown until it submits again.
    pub contract_problems: Vec<String>,
    /// Planner turns taken so far (across restarts).
    pub turns: u32,
    pub invalid_submissions: u32,
    /// The rounds of questions the planner asked the maintainers, with their answers.
    #[serde(default)]
    pub asked: Vec<Asked>,
}

/// One round of questions the planner asked before planning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    pub questions: Vec<String>,
    /// `None` until someone allowed to answer did.
    pub answer: Option<Answer>,
    /// When the forge says the questions were posted (seconds): an answer is written after.
    #[serde(default)]
    pub asked_at: Option<i64>,
    /// Who was told they may not answer this round (each once).
    #[serde(default)]
    pub refused: Vec<String>,
}

/// A person's answer, kept as they wrote it: it is quoted as data whenever it is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub by: String,
    pub text: String,
    /// The comment it was written in: one comment answers one round.
    #[serde(default)]
    pub comment: Option<i64>,
}

/// The most of one answer the planner reads, in characters.
const MAX_ANSWER_CHARS: usize = 6_000;

/// One thing the planner looked at: where, and what it saw (already bounded by the tool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// `read_file src/parse.rs 40-52`, `search "trailing comma"`.
    pub source: String,
    pub text: String,
}

/// A scout's answer to one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoutReport {
    pub question: String,
    pub findings: String,
    pub evidence: Vec<String>,
    /// `high`, `medium`, `low`, as the scout judged.
    pub confidence: String,
}

impl Dossier {
    pub fn observe(&mut self, source: String, text: String) {
        // Reading the same thing twice keeps only the newest copy.
        self.observations.retain(|o| o.source != source);
        self.observations.push(Observation { source, text });
    }

    /// Reads the `Beliefs:` and `Open questions:` lists from the planner's text. Text
    /// without those headings is kept as a single belief so nothing the planner
    /// concluded is lost.
    pub fn take_notes(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let mut beliefs = Vec::new();
        let mut questions = Vec::new();
        let mut section: Option<&mut Vec<String>> = None;
        let mut saw_heading = false;
        for line in text.lines() {
            let l = line.trim();
            let lower = l.to_ascii_lowercase();
            let lower = lower.trim_start_matches(['#', '*', ' ']);
            if lower.starts_with("beliefs") {
                section = Some(&mut beliefs);
                saw_heading = true;
                continue;
            }
            if lower.starts_with("open questions") || lower.starts_with("questions") {
                section = Some(&mut questions);
                saw_heading = true;
                continue;
            }
            let item = l.trim_start_matches(['-', '*', '•', ' ']).trim();
            if let Some(list) = section.as_deref_mut()
                && !item.is_empty()
            {
                list.push(item.chars().take(500).collect());
            }
        }
        if !saw_heading {
            beliefs.push(text.chars().take(1_000).collect());
        }
        if !beliefs.is_empty() {
            beliefs.truncate(MAX_BELIEFS);
            self.beliefs = beliefs;
        }
        if saw_heading {
            questions.truncate(MAX_QUESTIONS);
            self.open_questions = questions;
        }
    }

    /// The round of questions waiting for an answer, if one is.
    pub fn waiting(&self) -> Option<&Asked> {
        self.asked.last().filter(|r| r.answer.is_none())
    }

    /// Whether comment `comment` answered a round already.
    pub fn answered_by(&self, comment: i64) -> bool {
        self.asked.iter().any(|r| {
            r.answer
                .as_ref()
                .is_some_and(|a| a.comment == Some(comment))
        })
    }

    /// Gives the last unanswered round of questions its answer; `false` when none waits.
    pub fn answer(&mut self, answer: Answer) -> bool {
        match self.asked.last_mut() {
            Some(round) if round.answer.is_none() => {
                round.answer = Some(answer);
                true
            }
            _ => false,
        }
    }

    /// The dossier as the planner reads it at the start of a turn.
    pub fn render(&self) -> String {
        let mut out = String::from("## Dossier\n");
        section(&mut out, "Beliefs", &self.beliefs);
        section(&mut out, "Open questions", &self.open_questions);
        if !self.asked.is_empty() {
            out.push_str("\n### Your questions to the maintainers\n");
            for round in &self.asked {
                for q in &round.questions {
                    let _ = writeln!(out, "- {q}");
                }
                match &round.answer {
                    Some(a) => {
                        let (text, _) = super::untrusted::clean_capped(&a.text, MAX_ANSWER_CHARS);
                        let label = format!("The answer from @{}", a.by);
                        let _ = writeln!(out, "{}", super::untrusted::quote(&label, &text));
                    }
                    None => out.push_str("(not answered)\n"),
                }
            }
        }
        if !self.scout_reports.is_empty() {
            out.push_str("\n### Scout reports\n");
            for r in &self.scout_reports {
                let _ = writeln!(
                    out,
                    "- Q: {}\n  A ({} confidence): {}",
                    r.question, r.confidence, r.findings
                );
                for e in &r.evidence {
                    let _ = writeln!(out, "  - {e}");
                }
            }
        }
        if !self.observations.is_empty() {
            out.push_str("\n### Observations (newest last)\n");
            // Keep the newest bodies whole; older ones shrink to their source line.
            let mut budget = MAX_OBSERVATION_CHARS;
            let mut shown = vec![false; self.observations.len()];
            for (i, o) in self.observations.iter().enumerate().rev() {
                if o.text.len() <= budget {
                    budget -= o.text.len();
                    shown[i] = true;
                }
            }
            for (o, show) in self.observations.iter().zip(shown) {
                if show {
                    let _ = writeln!(out, "#### {}\n{}", o.source, o.text.trim_end());
                } else {
                    let _ = writeln!(
                        out,
                        "#### {} (seen earlier; read again if needed)",
                        o.source
                    );
                }
            }
        }
        if !self.contract_problems.is_empty() {
            out.push_str("\n### Your last submit_contract was refused\n");
            for p in &self.contract_problems {
                let _ = writeln!(out, "- {p}");
            }
        }
        out
    }
}

fn section(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n### {title}");
    for item in items {
        let _ = writeln!(out, "- {item}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_read_from_headings() {
        let mut d = Dossier::default();
        d.take_notes("Beliefs:\n- the tokenizer lacks an arm\n- objects are fine\n\nOpen questions:\n- is there a test?\n");
        assert_eq!(
            d.beliefs,
            ["the tokenizer lacks an arm", "objects are fine"]
        );
        assert_eq!(d.open_questions, ["is there a test?"]);
        d.take_notes("Let me look at the parser.");
        assert_eq!(d.beliefs, ["Let me look at the parser."]);
        assert_eq!(
            d.open_questions,
            ["is there a test?"],
            "unchanged without a heading"
        );
        d.take_notes("  ");
        assert_eq!(d.beliefs.len(), 1);
    }

    #[test]
    fn old_observation_bodies_give_way_to_new_ones() {
        let mut d = Dossier::default();
        d.observe("read_file a".into(), "A".repeat(20_000));
        d.observe("read_file b".into(), "B".repeat(20_000));
        d.observe("read_file a".into(), "a-again".into());
        assert_eq!(d.observations.len(), 2);
        let text = d.render();
        assert!(text.contains("#### read_file b\nBBBB"));
        assert!(text.contains("#### read_file a\na-again"));
        d.observe("read_file c".into(), "C".repeat(10_000));
        let text = d.render();
        assert!(
            text.contains("#### read_file b (seen earlier"),
            "{}",
            &text[..200]
        );
        assert!(text.len() < 30_000);
    }
}
