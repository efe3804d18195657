//! Storage: one sqlx `AnyPool` over SQLite (the embedded default) or PostgreSQL, the
//! migrations, and one module per table group. SQL here is portable between the two
//! backends; where they must differ (job claiming) the module says so.

pub mod audit;
pub mod baselines;
pub mod ci_reports;
pub mod deliveries;
pub mod installations;
pub mod jobs;
pub mod model_usage;
pub mod outcomes;
pub mod reviews;
pub mod runs;
pub mod secrets;
pub mod sessions;
pub mod signed_out;
pub mod state;
mod version;

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, ConnectOptions, Connection, Executor};

/// The migrations this binary carries (`planwright doctor` compares them with the database).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The database handle every layer shares; cheap to clone.
#[derive(Debug, Clone)]
pub struct Db {
    /// For reads (and writes of little contention, such as tests and the CLI).
    pub pool: AnyPool,
    /// For the hot writes: the webhook inbox and the job queue. On SQLite this is one
    /// connection, since SQLite admits one writer at a time and queuing for the pool is
    /// fairer and faster than SQLite's sleeping busy handler; on PostgreSQL it is `pool`.
    pub writer: AnyPool,
    pub backend: Backend,
}

impl Db {
    /// Opens the database named by `url`, creating a SQLite file (and its folder) on first
    /// use, and runs pending migrations.
    pub async fn open(url: &str) -> Result<Self> {
        let db = Self::connect(url).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// Opens the database without migrating it.
    pub async fn connect(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        };
        let (pool, writer) = match backend {
            Backend::Sqlite => {
                let options = prepare_sqlite(url).await?;
                (
                    sqlite_pool(&options, 8).await?,
                    sqlite_pool(&options, 1).await?,
                )
            }
            Backend::Postgres => {
                let pool = AnyPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect(url)
                    .await
                    .with_context(|| {
                        format!("Could not connect to PostgreSQL at {}", redact(url))
                    })?;
                (pool.clone(), pool)
            }
        };
        Ok(Self {
            pool,
            writer,
            backend,
        })
    }

    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .context("Could not apply the database migrations")
    }

    /// Answers whether the database takes a query, for `/readyz`.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The migrations the database records as `(version, success as 0 or 1, checksum)`;
    /// the error is sqlx's own, so that a missing table can be told from an outage.
    pub async fn applied_migrations(&self) -> Result<Vec<(i64, i64, Vec<u8>)>, sqlx::Error> {
        // The Any driver reads no SQLite BOOLEAN, so `success` comes back as a number.
        sqlx::query_as(
            "SELECT version, CAST(CASE WHEN success THEN 1 ELSE 0 END AS BIGINT), checksum \
             FROM _sqlx_migrations",
        )
        .fetch_all(&self.pool)
        .await
    }
}

/// Creates the SQLite file and its folder if needed and switches it to WAL mode.
async fn prepare_sqlite(url: &str) -> Result<AnyConnectOptions> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:")
        .split('?')
        .next()
        .unwrap_or_default();
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && path != ":memory:")
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("Could not create the data folder {}", parent.display()))?;
    }
    let url = if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    // WAL lets readers (the CLI, /readyz) work beside the writer; setting it needs an
    // exclusive lock, so it is done once on a lone connection before the pool opens.
    let options = AnyConnectOptions::from_str(&url)
        .with_context(|| format!("Cannot use the database URL {}", redact(&url)))?;
    let mut first = options
        .connect()
        .await
        .with_context(|| format!("Could not open the SQLite database {path}"))?;
    first
        .execute("PRAGMA journal_mode = WAL")
        .await
        .context("Could not switch the SQLite database to WAL mode")?;
    first.close().await?;
    Ok(options)
}

async fn sqlite_pool(options: &AnyConnectOptions, connections: u32) -> Result<AnyPool> {
    AnyPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute(
                    "PRAGMA busy_timeout = 30000; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                )
                .await?;
                Ok(())
            })
        })
        .connect_with(options.clone())
        .await
        .context("Could not open the SQLite database")
}

/// Whether a database error may pass by itself, so the job that met it is worth another
/// attempt: the server unreachable or restarting, the pool exhausted, SQLite busy or
/// locked, a PostgreSQL serialization failure, deadlock or connection limit.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let Some(code) = db.code() else { return false };
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // An extended result code; SQLITE_BUSY and SQLITE_LOCKED are its low byte.
                code.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6))
            } else {
                code.starts_with("08")
                    || matches!(
                        code.as_ref(),
                        "40001" | "40P01" | "53300" | "55P03" | "57P01" | "57P02" | "57P03"
                    )
            }
        }
        _ => false,
    }
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Milliseconds since the Unix epoch: every timestamp in the database is one of these.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("postgres://pw:s3cret@db:5432/planwright"),
            "postgres://pw:***@db:5432/planwright"
        );
        assert_eq!(redact("postgres://pw@db/x"), "postgres://pw@db/x");
        assert_eq!(redact("sqlite://data/p.db"), "sqlite://data/p.db");
    }
}
