//! Where planwright is installed: GitHub App installations and the repositories they
//! cover, kept current from `installation*` webhooks.

use anyhow::Result;
use sqlx::AnyConnection;

use super::now_ms;
use crate::event::ForgeKind;
use crate::ids::{InstallationId, RepoName};

/// Whether an installation may be acted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InstallationState {
    Active,
    Suspended,
    Deleted,
}

impl InstallationState {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallationState::Active => "active",
            InstallationState::Suspended => "suspended",
            InstallationState::Deleted => "deleted",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an installation state")]
pub struct UnknownInstallationState(String);

impl std::str::FromStr for InstallationState {
    type Err = UnknownInstallationState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use InstallationState::*;
        [Active, Suspended, Deleted]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownInstallationState(s.to_owned()))
    }
}

crate::ids::stored_as_text!(InstallationState);

/// Records an installation's account and state.
pub async fn upsert(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    installation: InstallationId,
    account: &str,
    state: InstallationState,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO installations (forge, installation_id, account, state, updated_at) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (forge, installation_id) DO UPDATE SET account = excluded.account, \
         state = excluded.state, updated_at = excluded.updated_at",
    )
    .bind(forge)
    .bind(installation)
    .bind(account)
    .bind(state.as_str())
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn add_repositories(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    installation: InstallationId,
    repos: &[RepoName],
) -> Result<()> {
    let now = now_ms();
    for repo in repos {
        sqlx::query(
            "INSERT INTO installation_repositories (forge, installation_id, repo, added_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (forge, installation_id, repo) DO NOTHING",
        )
        .bind(forge)
        .bind(installation)
        .bind(repo)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub async fn remove_repositories(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    installation: InstallationId,
    repos: Option<&[RepoName]>,
) -> Result<()> {
    match repos {
        None => {
            sqlx::query(
                "DELETE FROM installation_repositories WHERE forge = $1 AND installation_id = $2",
            )
            .bind(forge)
            .bind(installation)
            .execute(&mut *conn)
            .await?;
        }
        Some(repos) => {
            for repo in repos {
                sqlx::query(
                    "DELETE FROM installation_repositories \
                     WHERE forge = $1 AND installation_id = $2 AND repo = $3",
                )
                .bind(forge)
                .bind(installation)
                .bind(repo)
                .execute(&mut *conn)
                .await?;
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct InstallationRow {
    pub forge: ForgeKind,
    pub installation_id: InstallationId,
    pub account: String,
    pub state: InstallationState,
    pub updated_at: i64,
}

pub async fn list(conn: &mut AnyConnection) -> Result<Vec<InstallationRow>> {
    Ok(sqlx::query_as::<_, InstallationRow>(
        "SELECT forge, installation_id, account, state, updated_at FROM installations \
         ORDER BY forge, installation_id",
    )
    .fetch_all(conn)
    .await?)
}

pub async fn repositories(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    installation: InstallationId,
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar::<_, String>(
        "SELECT repo FROM installation_repositories WHERE forge = $1 AND installation_id = $2 \
         ORDER BY repo",
    )
    .bind(forge)
    .bind(installation)
    .fetch_all(conn)
    .await?)
}
