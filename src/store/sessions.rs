//! Planner sessions and their contracts as stored: one session row per issue's way from
//! label to pull request, one contract row per version. State moves are compare-and-set,
//! so of two concurrent commands exactly one wins.

use anyhow::Result;
use sqlx::AnyConnection;

use super::{Db, now_ms};
use crate::contract::ContractVersion;
use crate::event::ForgeKind;
use crate::ids::{InstallationId, IssueNumber, PullNumber, RepoName, SessionId};
use crate::store::state::SessionState;

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct SessionRow {
    pub id: SessionId,
    pub forge: ForgeKind,
    pub repo: RepoName,
    pub issue_number: IssueNumber,
    pub installation_id: Option<InstallationId>,
    pub state: SessionState,
    pub active: i64,
    pub triggered_by: String,
    pub status_comment_id: Option<String>,
    pub failure: Option<String>,
    /// The stage a failed session's `/retry` resumes.
    pub resume_state: Option<SessionState>,
    pub cost_microusd: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// The pull (merge) request the session published, once it did.
    pub pull_number: Option<PullNumber>,
    /// The newest contract version, once there is one.
    pub contract_version: Option<ContractVersion>,
}

const COLUMNS: &str = "id, forge, repo, issue_number, installation_id, state, active, \
    triggered_by, status_comment_id, failure, resume_state, cost_microusd, created_at, \
    updated_at, pull_number, (SELECT MAX(c.version) FROM contracts c WHERE c.session_id = sessions.id) \
    AS contract_version";

/// The session whose run pushed `sha` to its pull request, if any.
pub async fn find_by_head(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    sha: &str,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions WHERE forge = $1 AND repo = $2 \
         AND pull_number IS NOT NULL AND id IN (SELECT session_id FROM runs WHERE head_sha = $3) \
         ORDER BY created_at DESC LIMIT 1"
    );
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(forge)
        .bind(repo)
        .bind(sha)
        .fetch_optional(conn)
        .await?)
}

/// The newest sessions first, with the latest contract version.
pub async fn list(db: &Db, limit: i64) -> Result<Vec<SessionRow>> {
    let sql = format!("SELECT {COLUMNS} FROM sessions ORDER BY created_at DESC, id DESC LIMIT $1");
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(limit)
        .fetch_all(&db.pool)
        .await?)
}

/// Which sessions a listing shows; every part is optional.
#[derive(Default)]
pub struct Filter<'a> {
    pub forge: Option<ForgeKind>,
    /// Only these repositories (those a person may read); an empty set shows nothing.
    pub among: Option<&'a [RepoName]>,
    pub repo: Option<&'a RepoName>,
    pub state: Option<SessionState>,
}

/// The sessions `filter` lets through: failed ones first, then the newest first.
pub async fn list_filtered(db: &Db, filter: &Filter<'_>, limit: i64) -> Result<Vec<SessionRow>> {
    if filter.among.is_some_and(<[RepoName]>::is_empty) {
        return Ok(Vec::new());
    }
    let mut conditions = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if filter.forge.is_some() {
        conditions.push(format!("forge = {}", next()));
    }
    if filter.repo.is_some() {
        conditions.push(format!("repo = {}", next()));
    }
    if filter.state.is_some() {
        conditions.push(format!("state = {}", next()));
    }
    if let Some(among) = filter.among {
        let places: Vec<String> = among.iter().map(|_| next()).collect();
        conditions.push(format!("repo IN ({})", places.join(", ")));
    }
    let limit_place = next();
    let conditions = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions {conditions} \
         ORDER BY CASE WHEN state = 'failed' THEN 0 ELSE 1 END, created_at DESC, id DESC \
         LIMIT {limit_place}"
    );
    let mut query = sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql));
    if let Some(forge) = filter.forge {
        query = query.bind(forge);
    }
    if let Some(repo) = filter.repo {
        query = query.bind(repo);
    }
    if let Some(state) = filter.state {
        query = query.bind(state.as_str());
    }
    for repo in filter.among.unwrap_or_default() {
        query = query.bind(repo);
    }
    Ok(query.bind(limit).fetch_all(&db.pool).await?)
}

/// The settings (`BoundSettings` JSON) the newest contract of a repository recorded, and
/// the commit they were read at.
pub async fn latest_settings(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
) -> Result<Option<(String, String)>> {
    Ok(sqlx::query_as::<_, (String, String)>(
        "SELECT c.settings, c.base_sha FROM contracts c JOIN sessions s ON s.id = c.session_id \
         WHERE s.forge = $1 AND s.repo = $2 AND c.settings IS NOT NULL \
         ORDER BY c.created_at DESC, c.version DESC LIMIT 1",
    )
    .bind(forge)
    .bind(repo)
    .fetch_optional(conn)
    .await?)
}

/// Every repository that has a session (on `forge`, when given), in name order.
pub async fn repositories(db: &Db, forge: Option<ForgeKind>) -> Result<Vec<RepoName>> {
    Ok(sqlx::query_scalar::<_, RepoName>(
        "SELECT DISTINCT repo FROM sessions WHERE ($1 IS NULL OR forge = $1) ORDER BY repo",
    )
    .bind(forge.map(|f| f.as_str()))
    .fetch_all(&db.pool)
    .await?)
}

/// How many sessions are in each stored state, for `/metrics`.
pub async fn counts(db: &Db) -> Result<Vec<(String, i64)>> {
    Ok(
        sqlx::query_as("SELECT state, COUNT(*) FROM sessions GROUP BY state")
            .fetch_all(&db.pool)
            .await?,
    )
}

pub async fn get(conn: &mut AnyConnection, id: &SessionId) -> Result<Option<SessionRow>> {
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE id = $1");
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(conn)
        .await?)
}

/// The session holding an issue, if one does.
pub async fn find_active(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    issue: IssueNumber,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions WHERE forge = $1 AND repo = $2 AND issue_number = $3 \
         AND active = 1"
    );
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(forge)
        .bind(repo)
        .bind(issue)
        .fetch_optional(conn)
        .await?)
}

/// The newest session of an issue, active or not (for commands on an ended one).
pub async fn latest_for_issue(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    issue: IssueNumber,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions WHERE forge = $1 AND repo = $2 AND issue_number = $3 \
         ORDER BY created_at DESC, id DESC LIMIT 1"
    );
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(forge)
        .bind(repo)
        .bind(issue)
        .fetch_optional(conn)
        .await?)
}

pub struct NewSession<'a> {
    pub id: &'a SessionId,
    pub forge: ForgeKind,
    pub repo: &'a RepoName,
    pub issue: IssueNumber,
    pub installation: Option<InstallationId>,
    pub triggered_by: &'a str,
}

/// Inserts a session in Planning. The partial unique index refuses a second active
/// session for the same issue; callers look first, and a lost race fails the insert.
pub async fn insert(conn: &mut AnyConnection, new: &NewSession<'_>) -> Result<()> {
    let now = now_ms();
    sqlx::query(
        "INSERT INTO sessions (id, forge, repo, issue_number, installation_id, state, active, \
         triggered_by, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $8)",
    )
    .bind(new.id)
    .bind(new.forge)
    .bind(new.repo)
    .bind(new.issue)
    .bind(new.installation)
    .bind(SessionState::Planning)
    .bind(new.triggered_by)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Moves a session from `from` to `to` if it is still in `from`; `false` when another
/// move got there first. A move to Failed remembers the stage `/retry` resumes.
pub async fn move_state(
    conn: &mut AnyConnection,
    id: &SessionId,
    from: SessionState,
    to: SessionState,
    failure: Option<&str>,
) -> Result<bool> {
    anyhow::ensure!(
        from.can_become(to),
        "Cannot move session {id} from {from} to {to}"
    );
    let resume = (to == SessionState::Failed).then_some(from);
    let done = sqlx::query(
        "UPDATE sessions SET state = $1, active = $2, failure = $3, \
         resume_state = COALESCE($4, resume_state), updated_at = $5 \
         WHERE id = $6 AND state = $7",
    )
    .bind(to)
    .bind(i64::from(to.is_active()))
    .bind(failure)
    .bind(resume)
    .bind(now_ms())
    .bind(id)
    .bind(from)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The newest session that published `pull` in the repository.
pub async fn find_by_pull(
    conn: &mut AnyConnection,
    forge: ForgeKind,
    repo: &RepoName,
    pull: PullNumber,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions WHERE forge = $1 AND repo = $2 AND pull_number = $3 \
         ORDER BY created_at DESC LIMIT 1"
    );
    Ok(sqlx::query_as::<_, SessionRow>(sqlx::AssertSqlSafe(sql))
        .bind(forge)
        .bind(repo)
        .bind(pull)
        .fetch_optional(conn)
        .await?)
}

pub async fn set_pull(conn: &mut AnyConnection, id: &SessionId, pull: PullNumber) -> Result<()> {
    sqlx::query("UPDATE sessions SET pull_number = $1 WHERE id = $2")
        .bind(pull)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn set_status_comment(
    conn: &mut AnyConnection,
    id: &SessionId,
    comment: &str,
) -> Result<()> {
    sqlx::query("UPDATE sessions SET status_comment_id = $1 WHERE id = $2")
        .bind(comment)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Where a session stands with its status comment before one is posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusComment {
    /// None was ever asked for: the caller now holds the first post (recorded, so a
    /// retry after a crash knows a comment may exist).
    First,
    /// Posted, with this id.
    Posted(String),
    /// A post was started and its id not recorded: the comment may exist.
    Unknown,
}

/// Claims the first post of the session's status comment, or says what an earlier
/// one left: one conditional write, so a stale row or a concurrent job never posts a
/// second comment.
pub async fn claim_status_comment(
    conn: &mut AnyConnection,
    id: &SessionId,
) -> Result<StatusComment> {
    let claimed = sqlx::query(
        "UPDATE sessions SET status_comment_id = '' WHERE id = $1 AND status_comment_id IS NULL",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if claimed > 0 {
        return Ok(StatusComment::First);
    }
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT status_comment_id FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?;
    Ok(match row.and_then(|(c,)| c).filter(|c| !c.is_empty()) {
        Some(c) => StatusComment::Posted(c),
        None => StatusComment::Unknown,
    })
}

/// Records the issue's title and text as they were when planwright was asked to start.
pub async fn set_issue_snapshot(
    conn: &mut AnyConnection,
    id: &SessionId,
    title: &str,
    body: &str,
) -> Result<()> {
    sqlx::query("UPDATE sessions SET issue_title = $1, issue_body = $2 WHERE id = $3")
        .bind(title)
        .bind(body)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The issue's title and text as recorded at the start; `None` for sessions started
/// before they were recorded.
pub async fn issue_snapshot(
    conn: &mut AnyConnection,
    id: &SessionId,
) -> Result<Option<(String, String)>> {
    let row: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT issue_title, issue_body FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?;
    Ok(match row {
        Some((Some(title), Some(body))) => Some((title, body)),
        _ => None,
    })
}

pub async fn load_dossier(conn: &mut AnyConnection, id: &SessionId) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT dossier FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(conn)
            .await?;
    Ok(row.and_then(|(d,)| d))
}

/// `None` clears it (a `/plan` starts over).
pub async fn save_dossier(
    conn: &mut AnyConnection,
    id: &SessionId,
    dossier: Option<&str>,
) -> Result<()> {
    sqlx::query("UPDATE sessions SET dossier = $1, updated_at = $2 WHERE id = $3")
        .bind(dossier)
        .bind(now_ms())
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ContractRow {
    pub session_id: SessionId,
    pub version: ContractVersion,
    pub sha256: String,
    /// The contract's JSON.
    pub body: String,
    pub base_branch: String,
    pub base_sha: String,
    pub comment_id: Option<String>,
    pub comment_url: Option<String>,
    pub created_at: i64,
    pub superseded_at: Option<i64>,
    pub approved_by: Option<String>,
    pub approved_at: Option<i64>,
    /// When the forge says the contract's comment was written (seconds, its clock).
    pub comment_created_at: Option<i64>,
    /// The repository's settings at the base commit (`BoundSettings` JSON); `None` for
    /// contracts planned before they were recorded.
    pub settings: Option<String>,
}

const CONTRACT_COLUMNS: &str = "session_id, version, sha256, body, base_branch, base_sha, \
    comment_id, comment_url, created_at, superseded_at, approved_by, approved_at, \
    comment_created_at, settings";

pub struct NewContract<'a> {
    pub session: &'a SessionId,
    pub version: ContractVersion,
    pub sha256: &'a str,
    pub body: &'a str,
    pub base_branch: &'a str,
    pub base_sha: &'a str,
    pub settings: Option<&'a str>,
}

pub async fn insert_contract(conn: &mut AnyConnection, new: &NewContract<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO contracts (session_id, version, sha256, body, base_branch, base_sha, \
         created_at, settings) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(new.session)
    .bind(new.version)
    .bind(new.sha256)
    .bind(new.body)
    .bind(new.base_branch)
    .bind(new.base_sha)
    .bind(now_ms())
    .bind(new.settings)
    .execute(conn)
    .await?;
    Ok(())
}

/// Every version of a session's contract, oldest first.
pub async fn contracts(conn: &mut AnyConnection, session: &SessionId) -> Result<Vec<ContractRow>> {
    let sql =
        format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE session_id = $1 ORDER BY version");
    Ok(sqlx::query_as::<_, ContractRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .fetch_all(conn)
        .await?)
}

/// The newest version of a session's contract.
pub async fn latest_contract(
    conn: &mut AnyConnection,
    session: &SessionId,
) -> Result<Option<ContractRow>> {
    let sql = format!(
        "SELECT {CONTRACT_COLUMNS} FROM contracts WHERE session_id = $1 \
         ORDER BY version DESC LIMIT 1"
    );
    Ok(sqlx::query_as::<_, ContractRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .fetch_optional(conn)
        .await?)
}

pub async fn contract(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<Option<ContractRow>> {
    let sql =
        format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE session_id = $1 AND version = $2");
    Ok(sqlx::query_as::<_, ContractRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .bind(version)
        .fetch_optional(conn)
        .await?)
}

/// Claims the first post of a contract version's comment: `true` when no post of it was
/// started before (so there is nothing to look for), `false` when one was.
pub async fn claim_contract_post(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
) -> Result<bool> {
    let claimed = sqlx::query(
        "UPDATE contracts SET posting = 1 \
         WHERE session_id = $1 AND version = $2 AND posting = 0 AND comment_id IS NULL",
    )
    .bind(session)
    .bind(version)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(claimed > 0)
}

pub async fn set_contract_comment(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
    comment_id: &str,
    comment_url: Option<&str>,
    comment_created_at: Option<i64>,
) -> Result<()> {
    sqlx::query(
        "UPDATE contracts SET comment_id = $1, comment_url = $2, comment_created_at = $3 \
         WHERE session_id = $4 AND version = $5",
    )
    .bind(comment_id)
    .bind(comment_url)
    .bind(comment_created_at)
    .bind(session)
    .bind(version)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the approval of one version, if it is still the current, unapproved one.
pub async fn approve_contract(
    conn: &mut AnyConnection,
    session: &SessionId,
    version: ContractVersion,
    by: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE contracts SET approved_by = $1, approved_at = $2 \
         WHERE session_id = $3 AND version = $4 AND superseded_at IS NULL \
         AND approved_at IS NULL",
    )
    .bind(by)
    .bind(now_ms())
    .bind(session)
    .bind(version)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks every version below `current` superseded; returns the ones newly marked.
pub async fn supersede_before(
    conn: &mut AnyConnection,
    session: &SessionId,
    current: ContractVersion,
) -> Result<Vec<ContractRow>> {
    let sql = format!(
        "SELECT {CONTRACT_COLUMNS} FROM contracts WHERE session_id = $1 AND version < $2 \
         AND superseded_at IS NULL ORDER BY version"
    );
    let rows = sqlx::query_as::<_, ContractRow>(sqlx::AssertSqlSafe(sql))
        .bind(session)
        .bind(current)
        .fetch_all(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE contracts SET superseded_at = $1 WHERE session_id = $2 AND version < $3 \
         AND superseded_at IS NULL",
    )
    .bind(now_ms())
    .bind(session)
    .bind(current)
    .execute(conn)
    .await?;
    Ok(rows)
}

/// Single reads on a pooled connection, for a step that holds no transaction.
impl Db {
    /// The session `id`.
    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>> {
        get(&mut *self.pool.acquire().await?, id).await
    }

    /// The session holding an issue, if one does.
    pub async fn active_session(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Option<SessionRow>> {
        find_active(&mut *self.pool.acquire().await?, forge, repo, issue).await
    }

    /// The newest session that published `pull` in the repository.
    pub async fn session_by_pull(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        pull: PullNumber,
    ) -> Result<Option<SessionRow>> {
        find_by_pull(&mut *self.pool.acquire().await?, forge, repo, pull).await
    }

    /// The session whose run pushed `sha` to its pull request, if any.
    pub async fn session_by_head(
        &self,
        forge: ForgeKind,
        repo: &RepoName,
        sha: &str,
    ) -> Result<Option<SessionRow>> {
        find_by_head(&mut *self.pool.acquire().await?, forge, repo, sha).await
    }

    /// Version `version` of the session's contract.
    pub async fn contract(
        &self,
        session: &SessionId,
        version: ContractVersion,
    ) -> Result<Option<ContractRow>> {
        contract(&mut *self.pool.acquire().await?, session, version).await
    }

    /// The session's planner dossier, as stored.
    pub async fn dossier(&self, id: &SessionId) -> Result<Option<String>> {
        load_dossier(&mut *self.pool.acquire().await?, id).await
    }

    /// The issue's title and text as recorded at the session's start.
    pub async fn issue_snapshot(&self, id: &SessionId) -> Result<Option<(String, String)>> {
        issue_snapshot(&mut *self.pool.acquire().await?, id).await
    }

    /// The session's newest contract.
    pub async fn latest_contract(&self, session: &SessionId) -> Result<Option<ContractRow>> {
        latest_contract(&mut *self.pool.acquire().await?, session).await
    }

    /// [`claim_contract_post`], on the writer's connection.
    pub async fn claim_contract_post(
        &self,
        session: &SessionId,
        version: ContractVersion,
    ) -> Result<bool> {
        claim_contract_post(&mut *self.writer.acquire().await?, session, version).await
    }

    /// [`save_dossier`], on the writer's connection.
    pub async fn save_dossier(&self, id: &SessionId, dossier: Option<&str>) -> Result<()> {
        save_dossier(&mut *self.writer.acquire().await?, id, dossier).await
    }

    /// [`claim_status_comment`], on the writer's connection.
    pub async fn claim_status_comment(&self, id: &SessionId) -> Result<StatusComment> {
        claim_status_comment(&mut *self.writer.acquire().await?, id).await
    }

    /// [`set_status_comment`], on the writer's connection.
    pub async fn set_status_comment(&self, id: &SessionId, comment: &str) -> Result<()> {
        set_status_comment(&mut *self.writer.acquire().await?, id, comment).await
    }
}
