//! `planwright deliveries`: the webhook deliveries received, newest first, as a table or
//! JSON.

use anyhow::Context as _;

use crate::config::Settings;
use crate::store::{Db, deliveries};

use super::exit::ExitStatus;

pub(super) async fn run(settings: Settings, json: bool, limit: u32) -> anyhow::Result<ExitStatus> {
    let db = Db::connect(&settings.database_url).await?;
    let rows = deliveries::list(&db, i64::from(limit))
        .await
        .context("Could not list deliveries (has `planwright migrate` run on this database?)")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        println!("no deliveries");
    } else {
        for d in rows {
            let event = match &d.action {
                Some(a) => format!("{}.{a}", d.event),
                None => d.event.clone(),
            };
            println!(
                "{}  {:<6} {:<40} {:<8} jobs={} {}{}",
                d.id,
                d.forge,
                event,
                d.status,
                d.jobs,
                d.repo.as_ref().map_or("-", |r| r.as_str()),
                d.error.map(|e| format!("  ({e})")).unwrap_or_default()
            );
        }
    }
    Ok(ExitStatus::Success)
}
