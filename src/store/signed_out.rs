//! Sign-ins that were ended before their cookie expired: a cookie is a sealed value the
//! browser keeps, so signing out also writes its id here, and a copy of the cookie kept
//! elsewhere is refused until it would have expired anyway.

use anyhow::Result;

use super::{Db, now_ms};

/// Records that the sign-in `id` ended; `until` (Unix seconds) is when its cookie would
/// have expired, after which the row is of no use and goes.
pub async fn record(db: &Db, id: &str, until: i64) -> Result<()> {
    sqlx::query("DELETE FROM signed_out WHERE until < $1")
        .bind(now_ms() / 1000)
        .execute(&db.pool)
        .await?;
    sqlx::query("INSERT INTO signed_out (id, until) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING")
        .bind(id)
        .bind(until)
        .execute(&db.pool)
        .await?;
    Ok(())
}

/// Whether the sign-in `id` was ended.
pub async fn is_signed_out(db: &Db, id: &str) -> Result<bool> {
    let found: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM signed_out WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await?;
    Ok(found > 0)
}
