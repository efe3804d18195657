//! One repository's page: the settings its newest contract was planned with (each value,
//! and the file they came from), its recent sessions, how each executor model has done
//! here at each risk, and what it cost month by month.

use std::collections::BTreeMap;

use askama::Template;
use serde::Serialize;

use super::auth::Viewer;
use super::{AppState, HomeRow, home_row};
use crate::config::repo::line_of;
use crate::contract::LineRange;
use crate::event::ForgeKind;
use crate::git::MirrorKey;
use crate::ids::{CommitSha, RepoName};
use crate::store::outcomes as model_outcomes;
use crate::store::{model_usage, now_ms, sessions};

/// Sessions the page lists at most.
const RECENT: i64 = 50;
/// A settings file larger than this is not read for its line numbers.
const SETTINGS_MAX_BYTES: u64 = 1 << 20;

#[derive(Serialize)]
pub struct RepositoryView {
    pub forge: &'static str,
    pub repo: String,
    /// The settings file they were read from; `None`: the defaults (no file).
    pub settings_source: Option<String>,
    /// The commit they were read at.
    pub settings_commit: Option<String>,
    /// Each setting and its value, as recorded with the newest contract.
    pub settings: Vec<Setting>,
    pub sessions: Vec<HomeRow>,
    /// `YYYY-MM` → what the models cost that month.
    pub months: Vec<Month>,
    /// Each executor model's record here, per risk: what `routing: auto` learns from.
    pub outcomes: Vec<ModelRecord>,
}

/// How one executor and model did on this repository at one risk.
#[derive(Serialize)]
pub struct ModelRecord {
    pub risk: String,
    pub executor: String,
    /// `provider:model`; `None` for an executor that names none.
    pub model: Option<String>,
    /// Attempts that came to a judgement of the model's work.
    pub runs: i64,
    pub verified: i64,
    /// `82%`.
    pub verified_rate: String,
    /// The median of what a verified attempt cost (executor and reviewer); `None` before
    /// one was verified.
    pub median_cost: Option<String>,
    pub median_cost_microusd: Option<i64>,
}

impl ModelRecord {
    fn of(s: model_outcomes::OutcomeStats) -> Self {
        let rate = (s.verified as f64 * 100.0 / s.runs.max(1) as f64).round();
        ModelRecord {
            verified_rate: format!("{rate}%"),
            median_cost: s.median_verified_microusd.map(model_usage::usd),
            median_cost_microusd: s.median_verified_microusd,
            risk: s.risk,
            executor: s.executor,
            model: s.model,
            runs: s.runs,
            verified: s.verified,
        }
    }
}

#[derive(Serialize)]
pub struct Setting {
    pub key: String,
    pub value: String,
    /// The line of the settings file that sets it; `None`: the default, or the file could
    /// not be read from the mirror.
    pub line: Option<usize>,
    /// That line on the forge.
    pub link: Option<String>,
}

#[derive(Serialize)]
pub struct Month {
    pub month: String,
    pub cost: String,
    pub cost_microusd: i64,
}

#[derive(Template)]
#[template(path = "repository.html")]
pub struct RepositoryPage<'a> {
    pub r: &'a RepositoryView,
    pub csrf: &'a str,
}

/// The repository as `viewer` may see it; `None` when it has no session or is not theirs.
pub async fn load(
    state: &AppState,
    viewer: &Viewer,
    forge: ForgeKind,
    repo: &RepoName,
) -> anyhow::Result<Option<RepositoryView>> {
    if let Viewer::Person(person) = viewer
        && (forge != person.forge
            || super::readable(state, person, std::slice::from_ref(repo))
                .await?
                .is_empty())
    {
        return Ok(None);
    }
    let rows = sessions::list_filtered(
        &state.db,
        &sessions::Filter {
            forge: Some(forge),
            repo: Some(repo),
            ..sessions::Filter::default()
        },
        RECENT,
    )
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let mut conn = state.db.pool.acquire().await?;
    let latest = sessions::latest_settings(&mut conn, forge, repo).await?;
    drop(conn);
    let (settings_source, settings_commit, settings) = match latest {
        Some((json, commit)) => {
            let value: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            let source = value
                .get("source")
                .and_then(|s| s.as_str())
                .map(str::to_owned);
            let text = match &source {
                Some(path) => settings_text(state, forge, repo, &commit, path).await,
                None => None,
            };
            let links = super::source_links(state, forge, repo);
            let settings = value
                .as_object()
                .map(|fields| {
                    fields
                        .iter()
                        .filter(|(key, _)| key.as_str() != "source")
                        .map(|(key, value)| {
                            let line = text.as_deref().and_then(|t| line_of(t, key));
                            let link = match (&source, line) {
                                (Some(path), Some(line)) => links.file(
                                    &CommitSha(commit.clone()),
                                    path,
                                    Some(LineRange {
                                        start: line as u32,
                                        end: line as u32,
                                    }),
                                ),
                                _ => None,
                            };
                            Setting {
                                key: key.clone(),
                                value: match value {
                                    serde_json::Value::String(s) => s.clone(),
                                    other => other.to_string(),
                                },
                                line,
                                link,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            (source, Some(commit), settings)
        }
        None => (None, None, Vec::new()),
    };
    let mut by_month: BTreeMap<String, i64> = BTreeMap::new();
    for (at, cost) in model_usage::spent_on_repository(&state.db, forge, repo).await? {
        let month = chrono::DateTime::from_timestamp_millis(at)
            .map_or_else(|| "unknown".to_owned(), |t| t.format("%Y-%m").to_string());
        *by_month.entry(month).or_default() += cost;
    }
    let mut outcomes = state.db.outcome_stats(forge, repo, None).await?;
    // Low, medium, high; then the executor and model.
    outcomes.sort_by_key(|s| (risk_order(&s.risk), s.executor.clone(), s.model.clone()));
    Ok(Some(RepositoryView {
        outcomes: outcomes.into_iter().map(ModelRecord::of).collect(),
        forge: forge.as_str(),
        repo: repo.to_string(),
        settings_source,
        settings_commit,
        settings,
        sessions: rows.iter().map(|s| home_row(s, now)).collect(),
        months: by_month
            .into_iter()
            .rev()
            .map(|(month, cost_microusd)| Month {
                month,
                cost: model_usage::usd(cost_microusd),
                cost_microusd,
            })
            .collect(),
    }))
}

fn risk_order(risk: &str) -> usize {
    ["low", "medium", "high"]
        .iter()
        .position(|r| *r == risk)
        .unwrap_or(3)
}

/// The settings file as committed, read from the repository's mirror, for the line of
/// each value. `None` when the mirror is gone (pruned, or another process's disk).
async fn settings_text(
    state: &AppState,
    forge: ForgeKind,
    repo: &RepoName,
    commit: &str,
    path: &str,
) -> Option<String> {
    let key = MirrorKey::new(forge.as_str(), repo.clone()).ok()?;
    let mirrors = crate::git::MirrorCache::new(&state.settings.data_dir);
    let (commit, path) = (commit.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        mirrors.committed_text(&key, &commit, &path, SETTINGS_MAX_BYTES)
    })
    .await
    .ok()
    .flatten()
}
