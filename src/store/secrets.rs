//! Secrets the deployment makes for itself and every process must share (the key of the
//! pages' session cookie): made once, by whichever process asks first.

use anyhow::{Context, Result};

use super::{Db, now_ms};

/// The secret stored under `name`, stored first from `make` when there is none. Two
/// processes asking at once both end up with the one that was stored.
pub async fn get_or_insert(db: &Db, name: &str, make: impl FnOnce() -> String) -> Result<String> {
    sqlx::query(
        "INSERT INTO secrets (name, value, created_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(make())
    .bind(now_ms())
    .execute(&db.pool)
    .await?;
    sqlx::query_scalar::<_, String>("SELECT value FROM secrets WHERE name = $1")
        .bind(name)
        .fetch_optional(&db.pool)
        .await?
        .with_context(|| format!("The secret `{name}` was stored and is not there"))
}
