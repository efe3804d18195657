//! `planwright migrate`: applies the pending database migrations.

use crate::config::Settings;
use crate::store::{self, Db};

use super::exit::ExitStatus;

pub(super) async fn run(settings: Settings) -> anyhow::Result<ExitStatus> {
    Db::open(&settings.database_url).await?;
    println!(
        "migrations applied to {}",
        store::redact(&settings.database_url)
    );
    Ok(ExitStatus::Success)
}
