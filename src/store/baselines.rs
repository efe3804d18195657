//! Kept baseline runs: the JSON of one base commit's runs under the key that decides them
//! (`verify::Plan::baseline_key`, which names the repository by its forge id). A baseline
//! that turned out flaky is forgotten, and so is one whose setup was restored from a setup
//! cache entry that is gone (`verify::RunSet::rests_on_a_gone_setup`).

use anyhow::Result;

use super::{Db, now_ms};

/// The runs kept under `key`, marked used.
pub async fn take(db: &Db, key: &str) -> Result<Option<String>> {
    let mut conn = db.writer.acquire().await?;
    let runs: Option<String> =
        sqlx::query_scalar("SELECT runs FROM baselines WHERE cache_key = $1")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
    if runs.is_some() {
        sqlx::query("UPDATE baselines SET used_at = $1 WHERE cache_key = $2")
            .bind(now_ms())
            .bind(key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(runs)
}

/// Keeps `runs` under `key`, replacing what was there.
pub async fn keep(db: &Db, key: &str, runs: &str) -> Result<()> {
    let now = now_ms();
    sqlx::query(
        "INSERT INTO baselines (cache_key, runs, created_at, used_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (cache_key) DO UPDATE SET runs = excluded.runs, \
         created_at = excluded.created_at, used_at = excluded.used_at",
    )
    .bind(key)
    .bind(runs)
    .bind(now)
    .execute(&db.writer)
    .await?;
    Ok(())
}

pub async fn forget(db: &Db, key: &str) -> Result<()> {
    sqlx::query("DELETE FROM baselines WHERE cache_key = $1")
        .bind(key)
        .execute(&db.writer)
        .await?;
    Ok(())
}
