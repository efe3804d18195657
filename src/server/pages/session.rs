//! One session's page: its timeline, every contract version with the diff from the one
//! before and who approved which hash, the dossier the planner reasoned from, each
//! attempt with its verification and review, and what each role and model cost.

use std::collections::BTreeMap;

use askama::Template;
use serde::Serialize;

use super::auth::Viewer;
use super::{AppState, age, checks_url, issue_url, markdown_html, pull_url};
use crate::contract::{
    Base, Contract, ContractDiff, ContractVersion, LineRange, RenderContext, SourceLinks,
};
use crate::ids::{CommitSha, SessionId};
use crate::planner::dossier::Dossier;
use crate::store::audit::AuditAction;
use crate::store::state::SessionState;
use crate::store::{audit, model_usage, now_ms, runs, sessions};
use crate::verify::{RunOutcome, StoredOutcome, VerificationReport};

/// Longest contract diff shown, in characters.
const DIFF_MAX: usize = 20_000;

#[derive(Serialize)]
pub struct SessionView {
    pub id: String,
    pub forge: &'static str,
    pub repo: String,
    pub issue: i64,
    pub title: Option<String>,
    pub state: &'static str,
    pub stage: &'static str,
    pub failure: Option<String>,
    /// What the failure was recorded with beyond its public reason (a registry's or a
    /// provider's own answer): for the operator only, since anyone who can read the
    /// repository, whoever made it fail among them, may see the rest of the page.
    pub failure_detail: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub age: String,
    pub issue_url: Option<String>,
    pub pull_url: Option<String>,
    /// The pull request's checks, planwright's own among them.
    pub checks_url: Option<String>,
    pub timeline: Vec<Moment>,
    pub contracts: Vec<ContractView>,
    pub dossier: Option<DossierView>,
    pub attempts: Vec<AttemptView>,
    pub costs: Vec<CostRow>,
    pub total_cost: String,
    /// Spend over time, for the chart: (ms since the session began, cumulative microdollars).
    pub spend: Vec<(i64, i64)>,
    /// While the session can still move on: what the page was made from (its last
    /// change and the length of its timeline), which the page's script compares.
    #[serde(skip)]
    pub live: Option<String>,
    #[serde(skip)]
    pub chart: Option<Chart>,
}

#[derive(Serialize)]
pub struct Moment {
    pub at: i64,
    pub when: String,
    pub what: String,
    pub actor: String,
}

#[derive(Serialize)]
pub struct ContractView {
    pub version: ContractVersion,
    pub sha256: String,
    pub base_branch: String,
    pub base_sha: String,
    pub created_at: i64,
    pub approved_by: Option<String>,
    pub approved_at: Option<i64>,
    pub superseded: bool,
    pub comment_url: Option<String>,
    /// The contract as maintainers read it (Markdown).
    pub markdown: String,
    /// What changed from the version before (Markdown); `None` for the first.
    pub diff: Option<String>,
    #[serde(skip)]
    pub html: String,
    #[serde(skip)]
    pub diff_html: Option<String>,
}

#[derive(Serialize)]
pub struct DossierView {
    pub beliefs: Vec<String>,
    pub open_questions: Vec<String>,
    pub observations: Vec<ObservationView>,
    pub scout_reports: Vec<ScoutView>,
}

#[derive(Serialize)]
pub struct ObservationView {
    /// What was looked at: `read_file src/parse.rs 40-52`, `search "x" in src`.
    pub source: String,
    pub text: String,
    /// The file read, at the newest contract's base commit, on the forge.
    pub link: Option<String>,
}

#[derive(Serialize)]
pub struct ScoutView {
    pub question: String,
    pub findings: String,
    pub evidence: Vec<String>,
    pub confidence: String,
}

#[derive(Serialize)]
pub struct AttemptView {
    pub id: String,
    pub contract_version: ContractVersion,
    pub attempt: i64,
    pub executor: String,
    pub models: Vec<String>,
    pub state: String,
    pub environment: Option<String>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub cost: String,
    /// The executor's own account: a claim, not a result.
    pub report: Option<String>,
    pub verification: Option<VerificationReport>,
    pub accepted: Option<bool>,
    pub findings: Option<String>,
    /// Whether its executor left a transcript.
    pub transcript: bool,
    #[serde(skip)]
    pub verification_html: Option<String>,
}

#[derive(Serialize)]
pub struct CostRow {
    pub role: String,
    pub model: String,
    pub calls: u64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost: String,
    pub cost_microusd: i64,
}

/// The spend chart as SVG coordinates (drawn without scripts).
pub struct Chart {
    pub points: String,
    pub total: String,
    pub span: String,
}

#[derive(Template)]
#[template(path = "session.html")]
pub struct SessionPage<'a> {
    pub s: &'a SessionView,
    pub csrf: &'a str,
}

/// The session's row, when `viewer` may see it: `None` when there is none or it is not
/// theirs (another forge's, or of a repository the person cannot read), alike.
pub async fn visible(
    state: &AppState,
    viewer: &Viewer,
    id: &SessionId,
) -> anyhow::Result<Option<sessions::SessionRow>> {
    let mut conn = state.db.pool.acquire().await?;
    let Some(row) = sessions::get(&mut conn, id).await? else {
        return Ok(None);
    };
    drop(conn);
    if let Viewer::Person(person) = viewer
        && (row.forge != person.forge
            || super::readable(state, person, std::slice::from_ref(&row.repo))
                .await?
                .is_empty())
    {
        return Ok(None);
    }
    Ok(Some(row))
}

/// The detail the session's last failure was recorded with in the audit log, if any.
fn failure_detail(audit_rows: &[audit::AuditRow]) -> Option<String> {
    let failed = audit_rows
        .iter()
        .rev()
        .find(|a| a.action == AuditAction::SessionFailed.as_str())?;
    let detail: serde_json::Value = serde_json::from_str(&failed.detail).ok()?;
    detail["detail"].as_str().map(str::to_owned)
}

/// The session as `viewer` may see it; `None` when there is none or it is not theirs.
pub async fn load(
    state: &AppState,
    viewer: &Viewer,
    id: &SessionId,
) -> anyhow::Result<Option<SessionView>> {
    let Some(row) = visible(state, viewer, id).await? else {
        return Ok(None);
    };
    let mut conn = state.db.pool.acquire().await?;
    let title = sessions::issue_snapshot(&mut conn, id)
        .await?
        .map(|(title, _)| title);
    let contract_rows = sessions::contracts(&mut conn, id).await?;
    let run_rows = runs::for_session(&mut conn, id).await?;
    let audit_rows = audit::for_session(&mut conn, id).await?;
    let dossier = sessions::load_dossier(&mut conn, id)
        .await?
        .and_then(|text| serde_json::from_str::<Dossier>(&text).ok());
    drop(conn);
    let usage = model_usage::list_by_session(&state.db, id).await?;

    let links = super::source_links(state, row.forge, &row.repo);
    let newest_base = contract_rows.last().map(|c| CommitSha(c.base_sha.clone()));
    let contracts = contract_views(id, &contract_rows, &links);
    let attempts = attempt_views(state, &run_rows, &usage);
    let spending = Spending::of(&usage, row.created_at);
    let now = now_ms();
    let timeline = timeline(&row, &audit_rows, now);
    let chart = chart(&spending.spend);
    let live = (!matches!(
        row.state,
        SessionState::PrOpened | SessionState::Failed | SessionState::Cancelled
    ))
    .then(|| format!("{}:{}", row.updated_at, timeline.len()));
    Ok(Some(SessionView {
        id: row.id.as_str().to_owned(),
        forge: row.forge.as_str(),
        repo: row.repo.to_string(),
        issue: row.issue_number.0,
        title,
        state: row.state.as_str(),
        stage: row.state.describe(),
        failure: row.failure.clone(),
        failure_detail: match viewer {
            Viewer::Operator => failure_detail(&audit_rows),
            Viewer::Person(_) => None,
        },
        created_at: row.created_at,
        updated_at: row.updated_at,
        age: age(now - row.created_at),
        issue_url: issue_url(state, row.forge, &row.repo, row.issue_number.0),
        pull_url: row
            .pull_number
            .and_then(|p| pull_url(state, row.forge, &row.repo, p.0)),
        checks_url: row
            .pull_number
            .and_then(|p| checks_url(state, row.forge, &row.repo, p.0)),
        timeline,
        contracts,
        dossier: dossier.and_then(|d| dossier_view(d, newest_base.as_ref(), &links)),
        attempts,
        costs: spending.costs,
        total_cost: model_usage::usd(spending.total),
        spend: spending.spend,
        chart,
        live,
    }))
}

/// Each contract version rendered, with the diff from the version before it.
fn contract_views(
    id: &SessionId,
    contract_rows: &[sessions::ContractRow],
    links: &SourceLinks,
) -> Vec<ContractView> {
    let mut contracts = Vec::with_capacity(contract_rows.len());
    let mut previous: Option<(Contract, String, Option<String>)> = None;
    for c in contract_rows {
        let parsed = Contract::from_json(&c.body).ok();
        let base = Base {
            branch: c.base_branch.clone(),
            sha: CommitSha(c.base_sha.clone()),
        };
        let markdown = parsed.as_ref().map_or_else(
            || "The stored contract does not parse.".to_owned(),
            |contract| {
                contract.render_markdown(&RenderContext {
                    session: id,
                    version: c.version,
                    base: &base,
                    links,
                    bot_mention: "planwright",
                    default_budget_usd: None,
                })
            },
        );
        let diff = match (&previous, &parsed) {
            (Some((old, old_sha, old_settings)), Some(new)) => Some(
                ContractDiff::between(old, new)
                    .with_base(old_sha, &c.base_sha, *old_settings != c.settings)
                    .markdown(c.version.0 - 1, DIFF_MAX),
            ),
            _ => None,
        };
        if let Some(contract) = parsed {
            previous = Some((contract, c.base_sha.clone(), c.settings.clone()));
        }
        contracts.push(ContractView {
            version: c.version,
            sha256: c.sha256.clone(),
            base_branch: c.base_branch.clone(),
            base_sha: c.base_sha.clone(),
            created_at: c.created_at,
            approved_by: c.approved_by.clone(),
            approved_at: c.approved_at,
            superseded: c.superseded_at.is_some(),
            comment_url: c.comment_url.clone(),
            html: markdown_html(&markdown),
            diff_html: diff.as_deref().map(markdown_html),
            markdown,
            diff,
        });
    }
    contracts
}

/// Each attempt with the models it used and, when it got that far, its verification
/// and review.
fn attempt_views(
    state: &AppState,
    run_rows: &[runs::RunRow],
    usage: &[model_usage::UsageRow],
) -> Vec<AttemptView> {
    let mut attempts = Vec::with_capacity(run_rows.len());
    for r in run_rows {
        let mut models: Vec<String> = usage
            .iter()
            .filter(|u| u.run_id.as_deref() == Some(r.id.as_str()))
            .map(|u| format!("{}:{}", u.provider, u.model))
            .collect();
        models.dedup();
        let (verification, accepted, findings) =
            match r.outcome.as_deref().map(StoredOutcome::parse) {
                Some(StoredOutcome::Final(outcome)) => {
                    let RunOutcome {
                        verification,
                        accepted,
                        findings,
                        ..
                    } = *outcome;
                    (Some(verification), Some(accepted), Some(findings))
                }
                Some(StoredOutcome::Report(report)) => (Some(*report), None, None),
                _ => (None, None, None),
            };
        attempts.push(AttemptView {
            id: r.id.to_string(),
            contract_version: r.contract_version,
            attempt: r.attempt,
            executor: r.executor.clone(),
            models,
            state: r.state.as_str().to_owned(),
            environment: r.environment.clone(),
            started_at: r.started_at,
            finished_at: r.finished_at,
            cost: model_usage::usd(r.cost_microusd),
            report: r.report.clone(),
            verification_html: verification
                .as_ref()
                .map(|v| markdown_html(&v.pr_markdown())),
            verification,
            accepted,
            findings,
            transcript: super::transcript::path(&state.settings.data_dir, r.id.as_str()).is_some(),
        });
    }
    attempts
}

/// What the session's model calls cost: by role and model, in all, and summed over
/// time since the session started.
struct Spending {
    costs: Vec<CostRow>,
    total: i64,
    /// `(milliseconds since the start, microdollars spent so far)` after each call.
    spend: Vec<(i64, i64)>,
}

impl Spending {
    fn of(usage: &[model_usage::UsageRow], started_at: i64) -> Spending {
        let mut by_role: BTreeMap<(String, String), CostRow> = BTreeMap::new();
        let mut spend = Vec::with_capacity(usage.len());
        let mut total = 0_i64;
        for u in usage {
            let model = format!("{}:{}", u.provider, u.model);
            let entry = by_role
                .entry((u.role.clone(), model.clone()))
                .or_insert_with(|| CostRow {
                    role: u.role.clone(),
                    model,
                    calls: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                    cost: String::new(),
                    cost_microusd: 0,
                });
            entry.calls += 1;
            entry.input_tokens += u.input_tokens;
            entry.output_tokens += u.output_tokens;
            entry.cost_microusd += u.cost_microusd;
            total += u.cost_microusd;
            spend.push(((u.at - started_at).max(0), total));
        }
        let costs = by_role
            .into_values()
            .map(|mut c| {
                c.cost = model_usage::usd(c.cost_microusd);
                c
            })
            .collect();
        Spending {
            costs,
            total,
            spend,
        }
    }
}

/// What happened to the session, in order: its start, then its audit log.
fn timeline(row: &sessions::SessionRow, audit_rows: &[audit::AuditRow], now: i64) -> Vec<Moment> {
    let mut timeline = vec![Moment {
        at: row.created_at,
        when: age(now - row.created_at),
        what: "session started".to_owned(),
        actor: row.triggered_by.clone(),
    }];
    timeline.extend(
        audit_rows
            .iter()
            // Its start is the row's own; how long stages took is for the log.
            .filter(|a| {
                a.action != AuditAction::SessionStarted.as_str()
                    && a.action != AuditAction::ExecutionTimed.as_str()
            })
            .map(|a| Moment {
                at: a.at,
                when: age(now - a.at),
                what: a.action.replace(['.', '_'], " "),
                actor: a.actor.clone(),
            }),
    );
    timeline.sort_by_key(|m| m.at);
    timeline
}

/// The dossier as shown, with each observation linked to the newest base; `None` when
/// it holds nothing.
fn dossier_view(
    d: Dossier,
    newest_base: Option<&CommitSha>,
    links: &SourceLinks,
) -> Option<DossierView> {
    if d.beliefs.is_empty()
        && d.open_questions.is_empty()
        && d.observations.is_empty()
        && d.scout_reports.is_empty()
    {
        return None;
    }
    Some(DossierView {
        beliefs: d.beliefs,
        open_questions: d.open_questions,
        observations: d
            .observations
            .into_iter()
            .map(|o| ObservationView {
                link: newest_base.and_then(|base| observation_link(links, base, &o.source)),
                source: o.source,
                text: o.text,
            })
            .collect(),
        scout_reports: d
            .scout_reports
            .into_iter()
            .map(|r| ScoutView {
                question: r.question,
                findings: r.findings,
                evidence: r.evidence,
                confidence: r.confidence,
            })
            .collect(),
    })
}

/// The file a `read_file` observation read (`read_file src/a.rs 40-52`, `… from 40`, or
/// the whole file), on the forge at `base`.
fn observation_link(links: &SourceLinks, base: &CommitSha, source: &str) -> Option<String> {
    let rest = source.strip_prefix("read_file ")?.trim();
    // The range, when there is one, is the last word: a path may hold spaces.
    let ranged = rest.rsplit_once(' ').and_then(|(head, last)| {
        let last = last.replace('"', "");
        let (path, from) = match head.strip_suffix(" from") {
            Some(path) => (path, true),
            None => (head, false),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let lines = match last.split_once('-') {
            Some((a, b)) if !from && digits(a) && digits(b) => LineRange::parse(&last)?,
            None if from && digits(&last) => LineRange::parse(&last)?,
            _ => return None,
        };
        Some((path, lines))
    });
    match ranged {
        Some((path, lines)) => links.file(base, path.trim(), Some(lines)),
        None => links.file(base, rest, None),
    }
}

/// Cumulative spend as a polyline in a 600×120 box; `None` without spend.
fn chart(spend: &[(i64, i64)]) -> Option<Chart> {
    let (&(last_at, total), _) = spend.split_last()?;
    if total <= 0 {
        return None;
    }
    let span = last_at.max(1);
    let mut points = String::from("0,120");
    for (at, cumulative) in spend {
        let x = (*at as f64 / span as f64) * 600.0;
        let y = 120.0 - (*cumulative as f64 / total as f64) * 110.0;
        points.push_str(&format!(" {x:.1},{y:.1}"));
    }
    Some(Chart {
        points,
        total: model_usage::usd(total),
        span: age(span).trim_end_matches(" ago").to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_file_observation_links_to_the_lines_read() {
        let github = SourceLinks::GitHub {
            repo_url: "https://github.com/o/r".into(),
        };
        let base = CommitSha("a".repeat(40));
        let at = |source: &str| observation_link(&github, &base, source);
        let blob = format!("https://github.com/o/r/blob/{}", "a".repeat(40));
        assert_eq!(
            at("read_file src/parse.rs 40-52").unwrap(),
            format!("{blob}/src/parse.rs#L40-L52")
        );
        assert_eq!(
            at("read_file src/parse.rs \"40\"-\"52\"").unwrap(),
            format!("{blob}/src/parse.rs#L40-L52")
        );
        assert_eq!(
            at("read_file src/parse.rs from 7").unwrap(),
            format!("{blob}/src/parse.rs#L7")
        );
        assert_eq!(
            at("read_file README.md").unwrap(),
            format!("{blob}/README.md")
        );
        assert_eq!(at("search \"x\" in src"), None);
        let gitlab = SourceLinks::GitLab {
            project_url: "https://gitlab.example/g/p".into(),
        };
        assert_eq!(
            observation_link(&gitlab, &base, "read_file a b.rs 3-4").unwrap(),
            format!(
                "https://gitlab.example/g/p/-/blob/{}/a%20b.rs#L3-4",
                "a".repeat(40)
            )
        );
        assert_eq!(
            observation_link(&SourceLinks::None, &base, "read_file a.rs"),
            None
        );
    }
}
