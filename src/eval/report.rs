//! An evaluation's report: per arm what it resolved (with the spread over repeats), what
//! it cost and used per role, how long a task took, and planwright's verdict against the
//! grade; then every run. Written as Markdown, JSON, and an HTML page with a chart of
//! cost against resolved rate.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use super::grade::Grade;
use super::store::{RoleUsage, RunRecord, Verdict};
use super::tasks::Loaded;

/// planwright's verdict against the grade, over the runs that have both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Matrix {
    pub ready_resolved: u32,
    /// A ready pull request whose tests do not pass: a false green.
    pub ready_unresolved: u32,
    /// A draft that resolves the task: a false red.
    pub draft_resolved: u32,
    pub draft_unresolved: u32,
}

/// One arm's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ArmReport {
    pub name: String,
    pub runs: u32,
    pub resolved: u32,
    pub unresolved: u32,
    pub no_verdict: u32,
    /// Resolved over graded runs (no-verdict runs left out); `None` with none graded.
    pub resolved_rate: Option<f64>,
    /// The rate of each repeat, in repeat order.
    pub repeat_rates: Vec<f64>,
    /// The repeats' standard deviation, in points of rate (0 with one repeat).
    pub spread: f64,
    pub cost_microusd: i64,
    pub cost_per_task_microusd: i64,
    /// Tokens and cost per role, summed over the arm's runs.
    pub roles: Vec<RoleUsage>,
    /// The planner's input tokens: what the split spends on its strong model.
    pub planner_input_tokens: i64,
    pub wall_ms_per_task: u64,
    /// Of that, what the flow itself took; the rest is the harness (checkout, grading).
    pub solve_ms_per_task: u64,
    /// `None` when no run of the arm carries a verdict of planwright's (the monolithic
    /// arm has none): the comparison does not apply.
    pub verdicts: Option<Matrix>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub evaluation: String,
    pub tasks: usize,
    /// Task lines or instances that did not load: where, and why.
    pub skipped: Vec<(String, String)>,
    pub arms: Vec<ArmReport>,
    pub runs: Vec<RunRecord>,
}

impl Report {
    pub fn build(
        evaluation: &str,
        loaded: &Loaded,
        arms: &[String],
        records: &[RunRecord],
    ) -> Self {
        let ids: Vec<&str> = loaded.tasks.iter().map(|t| t.id.as_str()).collect();
        let mut runs: Vec<RunRecord> = records
            .iter()
            .filter(|r| ids.contains(&r.task.as_str()) && arms.contains(&r.arm))
            .cloned()
            .collect();
        let position = |r: &RunRecord| {
            (
                ids.iter().position(|t| *t == r.task),
                r.repeat,
                arms.iter().position(|a| *a == r.arm),
            )
        };
        runs.sort_by_key(position);
        Report {
            evaluation: evaluation.to_owned(),
            tasks: loaded.tasks.len(),
            skipped: loaded
                .skipped
                .iter()
                .map(|s| (s.place.clone(), s.reason.clone()))
                .collect(),
            arms: arms.iter().map(|a| arm_report(a, &runs)).collect(),
            runs,
        }
    }
}

fn arm_report(name: &str, all: &[RunRecord]) -> ArmReport {
    let runs: Vec<&RunRecord> = all.iter().filter(|r| r.arm == name).collect();
    let count = |g: Grade| runs.iter().filter(|r| r.graded.grade == g).count() as u32;
    let (resolved, unresolved) = (count(Grade::Resolved), count(Grade::Unresolved));
    let rate = |rs: &[&RunRecord]| -> Option<f64> {
        let graded = rs.iter().filter(|r| r.graded.grade.counts()).count();
        let resolved = rs
            .iter()
            .filter(|r| r.graded.grade == Grade::Resolved)
            .count();
        (graded > 0).then(|| resolved as f64 * 100.0 / graded as f64)
    };
    let mut by_repeat: BTreeMap<u32, Vec<&RunRecord>> = BTreeMap::new();
    for r in &runs {
        by_repeat.entry(r.repeat).or_default().push(r);
    }
    let repeat_rates: Vec<f64> = by_repeat.values().filter_map(|rs| rate(rs)).collect();
    let mean = repeat_rates.iter().sum::<f64>() / repeat_rates.len().max(1) as f64;
    let spread = if repeat_rates.len() > 1 {
        (repeat_rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>()
            / (repeat_rates.len() - 1) as f64)
            .sqrt()
    } else {
        0.0
    };
    let mut roles: BTreeMap<String, RoleUsage> = BTreeMap::new();
    for usage in runs.iter().flat_map(|r| &r.usage) {
        let sum = roles
            .entry(usage.role.clone())
            .or_insert_with(|| RoleUsage {
                role: usage.role.clone(),
                ..RoleUsage::default()
            });
        sum.input_tokens += usage.input_tokens;
        sum.output_tokens += usage.output_tokens;
        sum.cache_read_tokens += usage.cache_read_tokens;
        sum.cache_write_tokens += usage.cache_write_tokens;
        sum.cost_microusd += usage.cost_microusd;
    }
    let cost: i64 = runs.iter().map(|r| r.cost_microusd()).sum();
    let n = runs.len().max(1);
    let mut verdicts = Matrix::default();
    for r in &runs {
        match (r.verdict, r.graded.grade) {
            (Verdict::Ready, Grade::Resolved) => verdicts.ready_resolved += 1,
            (Verdict::Ready, Grade::Unresolved) => verdicts.ready_unresolved += 1,
            (Verdict::Draft, Grade::Resolved) => verdicts.draft_resolved += 1,
            (Verdict::Draft, Grade::Unresolved) => verdicts.draft_unresolved += 1,
            _ => {}
        }
    }
    let judged_by_planwright = runs.iter().any(|r| r.verdict != Verdict::None);
    ArmReport {
        name: name.to_owned(),
        runs: runs.len() as u32,
        resolved,
        unresolved,
        no_verdict: count(Grade::NoVerdict),
        resolved_rate: rate(&runs),
        repeat_rates,
        spread,
        cost_microusd: cost,
        cost_per_task_microusd: cost / n as i64,
        planner_input_tokens: roles.get("planner").map_or(0, |u| u.input_tokens),
        roles: roles.into_values().collect(),
        wall_ms_per_task: runs.iter().map(|r| r.wall_ms).sum::<u64>() / n as u64,
        solve_ms_per_task: runs.iter().map(|r| r.solve_ms).sum::<u64>() / n as u64,
        verdicts: judged_by_planwright.then_some(verdicts),
    }
}

fn usd(microusd: i64) -> String {
    format!("${:.4}", microusd as f64 / 1_000_000.0)
}

fn rate_text(arm: &ArmReport) -> String {
    match arm.resolved_rate {
        None => "–".to_owned(),
        Some(rate) if arm.repeat_rates.len() > 1 => format!(
            "{rate:.1}% (± {:.1} over {} repeats)",
            arm.spread,
            arm.repeat_rates.len()
        ),
        Some(rate) => format!("{rate:.1}%"),
    }
}

/// The report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Evaluation `{}`\n", report.evaluation);
    let _ = writeln!(
        out,
        "{} task(s), {} arm(s), {} run(s) graded.\n",
        report.tasks,
        report.arms.len(),
        report.runs.len()
    );
    for (place, reason) in &report.skipped {
        let _ = writeln!(out, "- skipped {place}: {reason}");
    }
    if !report.skipped.is_empty() {
        out.push('\n');
    }
    out.push_str("## Arms\n\n");
    out.push_str(
        "| arm | resolved | rate | no verdict | cost | cost per task | wall time per task | of which the flow |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for arm in &report.arms {
        let _ = writeln!(
            out,
            "| {} | {}/{} | {} | {} | {} | {} | {:.1}s | {:.1}s |",
            arm.name,
            arm.resolved,
            arm.resolved + arm.unresolved,
            rate_text(arm),
            arm.no_verdict,
            usd(arm.cost_microusd),
            usd(arm.cost_per_task_microusd),
            arm.wall_ms_per_task as f64 / 1000.0,
            arm.solve_ms_per_task as f64 / 1000.0
        );
    }
    out.push('\n');
    for arm in &report.arms {
        let _ = writeln!(
            out,
            "Planner input tokens, {}: {}  ",
            arm.name, arm.planner_input_tokens
        );
    }
    out.push_str("\n### Tokens and cost per role\n\n");
    out.push_str("| arm | role | input | output | cache read | cache write | cost |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for arm in &report.arms {
        for u in &arm.roles {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                arm.name,
                u.role,
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                usd(u.cost_microusd)
            );
        }
    }
    out.push_str("\n## planwright's verdict against the grade\n\n");
    out.push_str("| arm | ready, resolved | ready, not resolved (false green) | draft, resolved (false red) | draft, not resolved |\n");
    out.push_str("|---|---|---|---|---|\n");
    for arm in &report.arms {
        let _ = match arm.verdicts {
            Some(m) => writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                arm.name,
                m.ready_resolved,
                m.ready_unresolved,
                m.draft_resolved,
                m.draft_unresolved
            ),
            None => writeln!(out, "| {} | n/a | n/a | n/a | n/a |", arm.name),
        };
    }
    out.push_str("\n## Runs\n\n");
    out.push_str("| task | arm | repeat | grade | planwright | cost | wall time | why |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in &report.runs {
        let why = r
            .graded
            .reason
            .as_deref()
            .unwrap_or_default()
            .replace('|', "\\|")
            .replace('\n', " ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.1}s | {} |",
            r.task,
            r.arm,
            r.repeat,
            r.graded.grade.as_str(),
            r.verdict.as_str(),
            usd(r.cost_microusd()),
            r.wall_ms as f64 / 1000.0,
            crate::text::clip(&why, 200)
        );
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Cost per task (x) against resolved rate (y), one point per arm, as inline SVG.
pub fn chart(report: &Report) -> String {
    const W: f64 = 560.0;
    const H: f64 = 320.0;
    const PAD: f64 = 56.0;
    let max_cost = report
        .arms
        .iter()
        .map(|a| a.cost_per_task_microusd)
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.15;
    let x = |cost: i64| PAD + (cost as f64 / max_cost) * (W - 2.0 * PAD);
    let y = |rate: f64| H - PAD - rate / 100.0 * (H - 2.0 * PAD);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"cost per task against resolved rate\">\n"
    );
    let _ = writeln!(
        svg,
        "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#555\"/><line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{b}\" stroke=\"#555\"/>",
        b = H - PAD,
        r = W - PAD
    );
    for tick in [0.0, 50.0, 100.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{tick:.0}%</text>",
            PAD - 6.0,
            y(tick) + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">cost per task ({} at the right edge)</text>",
        W / 2.0,
        H - 16.0,
        usd(max_cost as i64)
    );
    let _ = writeln!(
        svg,
        "<text x=\"14\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">resolved</text>",
        H / 2.0,
        H / 2.0
    );
    let colours = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (i, arm) in report.arms.iter().enumerate() {
        let Some(rate) = arm.resolved_rate else {
            continue;
        };
        let (cx, cy) = (x(arm.cost_per_task_microusd), y(rate));
        // Arms on the same point get their labels one under the other.
        let below = placed
            .iter()
            .filter(|(px, py)| (px - cx).abs() < 1.0 && (py - cy).abs() < 1.0)
            .count() as f64;
        placed.push((cx, cy));
        let colour = colours[i % colours.len()];
        if arm.spread > 0.0 {
            let _ = writeln!(
                svg,
                "<line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>",
                y((rate - arm.spread).max(0.0)),
                y((rate + arm.spread).min(100.0))
            );
        }
        let _ = writeln!(
            svg,
            "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"6\" fill=\"{colour}\"><title>{}: {rate:.1}%, {} per task</title></circle>\n<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            escape(&arm.name),
            usd(arm.cost_per_task_microusd),
            cx + 9.0,
            cy - 8.0 + below * 14.0,
            escape(&arm.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The report as a page: the chart, then the Markdown's tables.
pub fn html(report: &Report) -> String {
    let mut body = String::new();
    let text = markdown(report);
    let parser = pulldown_cmark::Parser::new_ext(&text, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(&mut body, parser);
    let title = escape(&format!("Evaluation {}", report.evaluation));
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}table{{border-collapse:collapse;margin:1rem 0}}td,th{{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}}figure{{margin:1rem 0}}</style></head><body>\n<figure id=\"chart\">{}<figcaption>Cost per task against resolved rate, per arm (bars: the spread over repeats).</figcaption></figure>\n{body}</body></html>\n",
        chart(report)
    )
}

/// Writes `report.md`, `report.json` and `report.html` into `dir`; their paths.
pub fn write(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("Could not create `{}`", dir.display()))?;
    let files = [
        ("report.md", markdown(report)),
        ("report.json", serde_json::to_string_pretty(report)?),
        ("report.html", html(report)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .with_context(|| format!("Could not write `{}`", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
