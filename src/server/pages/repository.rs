//! One repository's page: the settings its newest contract was planned with (each value,
//! and the file they came from), its recent sessions, and what it cost month by month.

use std::collections::BTreeMap;

use askama::Template;
use serde::Serialize;

use super::auth::Viewer;
use super::{AppState, HomeRow, home_row};
use crate::event::ForgeKind;
use crate::ids::RepoName;
use crate::store::{model_usage, now_ms, sessions};

/// Sessions the page lists at most.
const RECENT: i64 = 50;

#[derive(Serialize)]
pub struct RepositoryView {
    pub forge: &'static str,
    pub repo: String,
    /// The settings file they were read from; `None`: the defaults (no file).
    pub settings_source: Option<String>,
    /// The commit they were read at.
    pub settings_commit: Option<String>,
    /// Each setting and its value, as recorded with the newest contract.
    pub settings: Vec<(String, String)>,
    pub sessions: Vec<HomeRow>,
    /// `YYYY-MM` → what the models cost that month.
    pub months: Vec<Month>,
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
            let settings = value
                .as_object()
                .map(|fields| {
                    fields
                        .iter()
                        .filter(|(key, _)| key.as_str() != "source")
                        .map(|(key, value)| {
                            let shown = match value {
                                serde_json::Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            (key.clone(), shown)
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
    Ok(Some(RepositoryView {
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
