//! The setup cache as verification uses it: a setup phase whose key the cache holds is
//! restored instead of run, and one that ran on the base's checkout and succeeded is kept.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::plan::Plan;
use super::runs::{CommandRun, Phase, RunSummary};
use crate::config::environment::EnvironmentConfig;
use crate::distill;
use crate::environment::setup_cache::{self, SetupCache, Stored};
use crate::git::Workspace;
use crate::ids::RepoScope;

/// What a verifier needs to use the setup cache.
#[derive(Clone)]
pub struct SetupCaching {
    pub(super) cache: Arc<SetupCache>,
    /// The repository whose entries these runs find and keep.
    pub(super) scope: RepoScope,
    /// The image digest runs use, or `host`.
    pub(super) environment: String,
    pub(super) config: EnvironmentConfig,
}

/// One setup phase's look into the cache.
pub(super) struct Lookup {
    cache: Arc<SetupCache>,
    scope: RepoScope,
    /// The entry's key: what a baseline computed from a restored setup is bound to.
    pub(super) key: String,
    cache_paths: Vec<String>,
    repo: PathBuf,
    home: PathBuf,
    /// Set on a hit: how long the restore took.
    restored: Option<Duration>,
}

impl SetupCaching {
    /// Looks up (and on a hit restores) the setup phase of `plan` in `workspace`; `None`
    /// when the cache does not apply: no setup, no `cache` paths to keep (restoring HOME
    /// alone would skip what setup writes into the checkout), or no key to be had.
    pub(super) async fn look_up(&self, plan: &Plan, workspace: &Workspace) -> Option<Lookup> {
        if plan.setup.is_empty() || self.config.cache.is_empty() {
            return None;
        }
        let (repo, home) = (workspace.repo(), workspace.home());
        let (caching, setup, allow) =
            (self.clone(), plan.setup.clone(), plan.network_allow.clone());
        let (r, h) = (repo.clone(), home.clone());
        let found = tokio::task::spawn_blocking(move || {
            let mut files = caching.config.key_files(&r).map_err(anyhow::Error::msg)?;
            for named in setup_cache::named_files(&setup, &r) {
                if !files.contains(&named) {
                    files.push(named);
                }
            }
            let key = setup_cache::key(
                &caching.scope,
                &caching.environment,
                &setup,
                &allow,
                &caching.config.cache,
                &r,
                &files,
            )?;
            let started = Instant::now();
            // A failed restore leaves the workspace to setup, as a miss does.
            let restored = match caching.cache.restore(&caching.scope, &key, &r, &h) {
                Ok(hit) => hit,
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "could not restore from the setup cache; setup runs");
                    None
                }
            };
            anyhow::Ok((key, restored.map(|bytes| (bytes, started.elapsed()))))
        })
        .await;
        let (key, restored) = match found {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                info!(error = %format!("{e:#}"), "the setup cache does not apply; setup runs");
                return None;
            }
            Err(e) => {
                warn!(error = %e, "the setup cache task failed; setup runs");
                return None;
            }
        };
        crate::metrics::record_setup_cache(restored.is_some(), restored.map_or(0, |r| r.0));
        Some(Lookup {
            cache: self.cache.clone(),
            scope: self.scope.clone(),
            key,
            cache_paths: self.config.cache.clone(),
            repo,
            home,
            restored: restored.map(|r| r.1),
        })
    }
}

impl Lookup {
    /// On a hit, a run per setup command saying it was restored.
    pub(super) fn restored_runs(&self, plan: &Plan) -> Option<Vec<CommandRun>> {
        let took = self.restored?;
        let duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        Some(
            plan.setup
                .iter()
                .map(|command| CommandRun {
                    command: command.clone(),
                    phase: Phase::Setup,
                    summary: RunSummary {
                        exit_code: Some(0),
                        signal: None,
                        timed_out: false,
                        duration_ms,
                        runner: distill::Format::Generic.runner().to_owned(),
                        passed: 0,
                        failed: 0,
                        skipped: 0,
                        errors: 0,
                        restored: true,
                        no_result: None,
                        unnamed: 0,
                    },
                    failures: Vec::new(),
                    build_errors: Vec::new(),
                    excerpt: String::new(),
                    selected: None,
                    could_not_select: false,
                    ids: Vec::new(),
                    confirms: false,
                    passing: Vec::new(),
                })
                .collect(),
        )
    }

    /// Keeps what the setup phase left, when every command of it succeeded. Failing to
    /// keep it costs the next run time, not this one its result: logged only.
    pub(super) async fn keep(self, runs: &[CommandRun]) {
        let setup = runs.iter().filter(|r| r.phase == Phase::Setup);
        if self.restored.is_some() || !setup.clone().all(|r| r.summary.succeeded()) {
            return;
        }
        let key = self.key.clone();
        let stored = tokio::task::spawn_blocking(move || {
            self.cache.store(
                &self.scope,
                &self.key,
                &self.cache_paths,
                &self.repo,
                &self.home,
            )
        })
        .await;
        match stored {
            Ok(Ok(Stored::Kept(bytes))) => {
                info!(key, bytes, "kept the setup phase in the setup cache")
            }
            Ok(Ok(Stored::AlreadyThere)) => {}
            Ok(Ok(Stored::TooLarge)) => warn!(
                key,
                "the setup phase left more than SETUP_CACHE_MAX; it is not kept and runs again next time"
            ),
            Ok(Err(e)) => {
                warn!(key, error = %format!("{e:#}"), "could not keep the setup phase in the setup cache")
            }
            Err(e) => warn!(key, error = %e, "the setup cache task failed"),
        }
    }
}
