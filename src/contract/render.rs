//! The contract comment maintainers read and answer: the contract as markdown, escaped
//! so that no text in it can hide, close the marker or mention anyone.

use super::{
    Base, Contract, ContractMarker, ContractVersion, Ladder, OpenQuestion, SourceLinks,
    normalise_path,
};
use crate::ids::SessionId;
use crate::markdown;

/// Everything the comment shows beside the contract itself.
pub struct RenderContext<'a> {
    pub session: &'a SessionId,
    pub version: ContractVersion,
    pub base: &'a Base,
    pub links: &'a SourceLinks,
    /// The bot's handle, for the `@bot approve` form (`planwright[bot]` shows as
    /// `@planwright`).
    pub bot_mention: &'a str,
    /// The repository's budget when the contract names none.
    pub default_budget_usd: Option<f64>,
}

impl Contract {
    /// The comment maintainers read and answer. Text from the contract is the planner's,
    /// not the issue author's, but it is still escaped so it cannot close the marker or
    /// inject mentions.
    pub fn render_markdown(&self, ctx: &RenderContext<'_>) -> String {
        let hash = self.hash(ctx.base);
        let mut md = String::new();
        push(
            &mut md,
            &format!("## Build contract v{} · `{}`", ctx.version, hash.short()),
        );
        push(&mut md, "");
        push(&mut md, &inline(&self.summary));
        push(&mut md, "");
        self.render_diagnosis(&mut md, ctx);
        self.render_change(&mut md);
        if !self.constraints.is_empty() {
            bullets(&mut md, "### Constraints", &self.constraints);
            push(&mut md, "");
        }
        if !self.out_of_scope.is_empty() {
            bullets(&mut md, "### Out of scope", &self.out_of_scope);
            push(&mut md, "");
        }
        if !self.open_questions.is_empty() {
            let shown: Vec<String> = self.open_questions.iter().map(open_question).collect();
            bullets(&mut md, "### Open questions", &shown);
            push(&mut md, "");
        }
        self.render_verification(&mut md);
        self.render_routing(&mut md, ctx);
        super::record::render_record(&self.instructions, &self.models, &mut md);
        push(
            &mut md,
            &format!(
                "Planned against {} at `{}`.",
                code(&ctx.base.branch),
                &ctx.base.sha.as_str()[..12.min(ctx.base.sha.as_str().len())]
            ),
        );
        push(&mut md, "");
        push(&mut md, "---");
        push(
            &mut md,
            &format!(
                "Reply `/approve` to build exactly this version, `/revise <what to change>` for a new version, or `/cancel` to stop. (`@{} approve` works too.) Only the version shown here is approved; edits to this comment change nothing.",
                ctx.bot_mention
            ),
        );
        push(&mut md, "");
        md.push_str(
            &ContractMarker {
                session: ctx.session.clone(),
                version: ctx.version,
                sha256: hash,
            }
            .render(),
        );
        md.push('\n');
        md
    }

    fn render_diagnosis(&self, md: &mut String, ctx: &RenderContext<'_>) {
        push(md, "### Diagnosis");
        push(md, &inline(&self.diagnosis.hypothesis));
        if !self.diagnosis.evidence.is_empty() {
            push(md, "");
            push(md, "**Evidence**");
            for e in &self.diagnosis.evidence {
                let label = match e.lines {
                    Some(l) => format!("{}:{}", normalise_path(&e.path), l),
                    None => normalise_path(&e.path),
                };
                let location = match ctx.links.file(&ctx.base.sha, &e.path, e.lines) {
                    Some(url) => format!("[{}]({url})", code(&label)),
                    None => code(&label),
                };
                push(md, &format!("- {location} — {}", inline(&e.note)));
            }
        }
        bullets(md, "**Uncertainties**", &self.diagnosis.uncertainties);
        push(md, "");
    }

    fn render_change(&self, md: &mut String) {
        push(md, "### Change");
        push(md, &inline(&self.change.goal));
        bullets(
            md,
            "**Expected behaviour**",
            &self.change.expected_behaviour,
        );
        push(md, "");
        push(md, "| file | action | why |");
        push(md, "|---|---|---|");
        for f in &self.change.files {
            push(
                md,
                &format!(
                    "| {} | {} | {} |",
                    markdown::code(&normalise_path(&f.path), true),
                    f.action.as_str(),
                    inline(&f.why)
                ),
            );
        }
        push(md, "");
    }

    fn render_verification(&self, md: &mut String) {
        push(md, "### Verification");
        if self.verification.commands.is_empty() {
            push(
                md,
                "planwright runs the repository's test commands before and after the change.",
            );
        } else {
            push(
                md,
                "planwright runs these itself, before and after the change (with the repository's test commands):",
            );
            for c in &self.verification.commands {
                if c.trim().contains('\n') {
                    // A newline separates commands in a shell: shown on one line, the
                    // second would read as arguments of the first.
                    push(md, "-");
                    md.push_str(&markdown::fenced(c.trim(), "  "));
                } else {
                    push(md, &format!("- {}", code(c.trim())));
                }
            }
        }
        bullets(md, "**New tests**", &self.verification.new_tests);
        push(md, "");
        self.render_test_changes(md);
    }

    /// The weakening the maintainer allows by approving, each entry on its own row; nothing
    /// when the contract allows none, since verification then refuses all of it.
    fn render_test_changes(&self, md: &mut String) {
        if self.verification.test_changes.is_empty() {
            return;
        }
        push(md, "#### Changes to tests the maintainer allows");
        push(
            md,
            "Approving allows exactly these; verification refuses any other skipped, removed, renamed, weakened or patched test, and any other change to which tests run.",
        );
        push(md, "");
        push(md, "| file | test | change | why |");
        push(md, "|---|---|---|---|");
        for t in &self.verification.test_changes {
            let test = match &t.test {
                Some(test) => markdown::code(test.trim(), true),
                None => "every test in it".to_owned(),
            };
            push(
                md,
                &format!(
                    "| {} | {test} | {} | {} |",
                    markdown::code(&t.normalised_path(), true),
                    t.kind.as_str(),
                    inline(&t.why)
                ),
            );
        }
        push(md, "");
    }

    fn render_routing(&self, md: &mut String, ctx: &RenderContext<'_>) {
        push(md, "### Routing");
        let r = &self.routing;
        let mut routing = vec![format!("risk **{}**", r.risk.as_str())];
        if let Some(e) = &r.executor {
            routing.push(format!("executor {}", code(e)));
        }
        if let Some(m) = &r.model {
            routing.push(format!("model {}", code(m)));
        }
        // What the run gets: the repository's budget caps the contract's.
        let budget = match (r.budget_usd, ctx.default_budget_usd) {
            (Some(contract), Some(repository)) => Some(contract.min(repository)),
            (contract, repository) => contract.or(repository),
        };
        if let Some(usd) = budget {
            routing.push(format!("budget ${usd:.2}"));
        }
        if let Some(t) = r.budget_tokens {
            routing.push(format!("at most {t} tokens"));
        }
        if let Some(n) = r.max_attempts {
            routing.push(format!("{n} attempts at most"));
        }
        push(md, &routing.join(" · "));
        push(md, "");
        if let Some(ladder) = &r.ladder {
            render_ladder(md, ladder, budget);
        }
    }
}

/// The executor ladder as the approval binds it: each rung's executor, model and price,
/// where the first attempt starts and why, and what the whole ladder may spend.
fn render_ladder(md: &mut String, ladder: &Ladder, budget_usd: Option<f64>) {
    push(
        md,
        "**Escalation ladder**: an attempt that fails verification or is rejected by the \
         reviewer hands the next attempt to the rung above, starting again from the base \
         with an account of what failed.",
    );
    push(md, "");
    push(
        md,
        "| rung | executor | model | USD per million tokens (in / out) |",
    );
    push(md, "|---|---|---|---|");
    for (i, rung) in ladder.rungs.iter().enumerate() {
        let start = if i == ladder.start {
            " (starts here)"
        } else {
            ""
        };
        push(
            md,
            &format!(
                "| {}{start} | {} | {} | {:.2} / {:.2} |",
                i + 1,
                code(&rung.executor),
                code(&rung.model),
                rung.input_usd_per_mtok,
                rung.output_usd_per_mtok
            ),
        );
    }
    push(md, "");
    let mut spend = format!("{} attempts in all", ladder.attempts);
    if let Some(usd) = budget_usd {
        spend.push_str(&format!(
            ", all rungs together within the budget of ${usd:.2}"
        ));
    }
    push(md, &format!("{spend}."));
    if let Some(reason) = &ladder.start_reason {
        push(
            md,
            &format!("Starts on rung {}: {}", ladder.start + 1, inline(reason)),
        );
    }
    push(md, "");
}

/// The line put above an older version's comment when a newer one is posted.
pub fn superseded_banner(
    old: ContractVersion,
    new: ContractVersion,
    new_url: Option<&str>,
) -> String {
    let new_ref = match new_url {
        Some(url) => format!("[v{new}]({url})"),
        None => format!("v{new}"),
    };
    format!(
        "> **Superseded**: v{old} was replaced by {new_ref}. Approving v{old} is no longer possible.\n\n"
    )
}

/// Appends one line of the comment.
fn push(md: &mut String, s: &str) {
    md.push_str(s);
    md.push('\n');
}

fn bullets(md: &mut String, heading: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    md.push('\n');
    md.push_str(heading);
    md.push('\n');
    for item in items {
        md.push_str("- ");
        md.push_str(&inline(item));
        md.push('\n');
    }
}

/// One open question as its line reads, saying when it blocks approval.
pub fn open_question(q: &OpenQuestion) -> String {
    if q.blocking {
        format!("Blocks approval: {}", q.question)
    } else {
        q.question.clone()
    }
}

/// Contract text in a comment: see [`crate::markdown`] for why nothing in it can hide.
fn inline(text: &str) -> String {
    markdown::inline(text)
}

pub(super) fn code(text: &str) -> String {
    markdown::code(text, false)
}
