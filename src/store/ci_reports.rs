//! Failures of other checks on planwright's pull requests: claimed once per commit and
//! source (one comment each), and handed, distilled, to the next round.

use anyhow::Result;

use super::now_ms;
use crate::contract::ContractVersion;
use crate::event::ForgeKind;
use crate::ids::{PullNumber, RepoName, SessionId};

/// One report to claim.
pub struct NewReport<'a> {
    pub forge: ForgeKind,
    pub repo: &'a RepoName,
    pub sha: &'a str,
    pub source: &'a str,
    pub session: &'a SessionId,
    pub pull: PullNumber,
    pub evidence: &'a str,
}

/// Records the report; `false` when this commit's source was reported before.
pub async fn claim(conn: &mut sqlx::AnyConnection, r: &NewReport<'_>) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO ci_reports (forge, repo, sha, source, session_id, pull_number, evidence, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (forge, repo, sha, source) DO NOTHING",
    )
    .bind(r.forge)
    .bind(r.repo)
    .bind(r.sha)
    .bind(r.source)
    .bind(r.session)
    .bind(r.pull)
    .bind(r.evidence)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// How many reports the session has on commit `sha`.
pub async fn count_on(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    sha: &str,
) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM ci_reports WHERE session_id = $1 AND sha = $2")
            .bind(session)
            .bind(sha)
            .fetch_one(&mut *conn)
            .await?;
    Ok(n)
}

/// Gives the session's reports no round has had yet to the round for `version`; their
/// evidence, oldest first.
pub async fn take(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<Vec<String>> {
    sqlx::query("UPDATE ci_reports SET taken_by = $2 WHERE session_id = $1 AND taken_by IS NULL")
        .bind(session)
        .bind(version)
        .execute(&mut *conn)
        .await?;
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT evidence FROM ci_reports WHERE session_id = $1 AND taken_by = $2 \
         ORDER BY created_at, sha, source",
    )
    .bind(session)
    .bind(version)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(e,)| e).collect())
}
