//! `planwright sessions`: the planner sessions, newest first, as a table or JSON.

use anyhow::Context as _;

use crate::config::Settings;
use crate::store::{Db, sessions};

use super::exit::ExitStatus;

pub(super) async fn run(settings: Settings, json: bool, limit: u32) -> anyhow::Result<ExitStatus> {
    let db = Db::connect(&settings.database_url).await?;
    let rows = sessions::list(&db, i64::from(limit))
        .await
        .context("Could not list sessions (has `planwright migrate` run on this database?)")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        println!("no sessions");
    } else {
        for s in rows {
            let version = s
                .contract_version
                .map_or_else(|| "-".to_owned(), |v| format!("v{v}"));
            println!(
                "{}  {:<8} {}#{}  {:<17} {:<4} ${:.2}  by {}",
                s.id,
                s.forge,
                s.repo,
                s.issue_number,
                s.state,
                version,
                s.cost_microusd as f64 / 1_000_000.0,
                s.triggered_by
            );
        }
    }
    Ok(ExitStatus::Success)
}
