//! The execute job's shared state: the session, contract and forge a run carries out,
//! with the steps every part of the job takes through them (settings, branch, workspace,
//! moves, audit, status), the stages' timings, and the run's records folder. The job
//! (`mod.rs`) and its parts (attempts, choosing, partial work, publishing) build on it.

use crate::app::App;
use crate::config::environment::Choice;
use crate::config::repo::{BoundSettings, RepoConfig};
use crate::contract::{Contract, ContractHash, ContractVersion};
use crate::event::ForgeKind;
use crate::forge::Forge;
use crate::forge::repo_config::LoadError;
use crate::git::{MirrorKey, Workspace, WorkspaceRequest};
use crate::ids::{CommitSha, IssueNumber, RepoName, RunId, SessionId};
use crate::session::checkout::Renewal;
use crate::session::comments;
use crate::session::error::Stop;
use crate::session::jobs::Continuation;
use crate::session::status::update_status;
use crate::store::audit::AuditAction;
use crate::store::runs::{self, RunState};
use crate::store::state::SessionState;
use crate::store::{audit, sessions};
use anyhow::Context as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tracing::info;

/// How often a running executor's session is looked at for a cancellation.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// How long each stage took, for the log and the overhead benchmark.
#[derive(Default)]
pub(super) struct Timings {
    stages: Vec<(&'static str, std::time::Duration)>,
}

impl Timings {
    pub(super) fn record(&mut self, stage: &'static str, since: Instant) {
        self.stages.push((stage, since.elapsed()));
    }

    pub(super) fn log(&self, session: &SessionId) {
        let text: Vec<String> = self
            .stages
            .iter()
            .map(|(s, d)| format!("{s}={}ms", d.as_millis()))
            .collect();
        info!(session = %session, stages = %text.join(" "), "execution stages");
    }

    /// Milliseconds per stage, summed over attempts, for the audit log.
    pub(super) fn json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (stage, d) in &self.stages {
            let ms = map
                .get(*stage)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            map.insert((*stage).to_owned(), (ms + d.as_millis() as u64).into());
        }
        serde_json::Value::Object(map)
    }
}

pub(super) struct Execution<'a> {
    pub(super) app: Arc<App>,
    pub(super) forge: &'a dyn Forge,
    pub(super) forge_kind: ForgeKind,
    pub(super) repo: RepoName,
    pub(super) issue: IssueNumber,
    pub(super) id: SessionId,
    pub(super) contract: Contract,
    pub(super) hash: ContractHash,
    pub(super) row: sessions::ContractRow,
    /// The job queue will not run this job again.
    pub(super) last_try: bool,
    /// `/retry continue`: the unfinished work this execution carries on from.
    pub(super) continues: Option<Continuation>,
}

impl Execution<'_> {
    pub(super) async fn writer(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.writer.acquire().await?)
    }

    pub(super) async fn reader(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, Stop> {
        Ok(self.app.db.pool.acquire().await?)
    }

    pub(super) fn version(&self) -> ContractVersion {
        self.row.version
    }

    /// The settings the approval bound (the base commit's, recorded at planning) and the
    /// environment chosen with them; a contract planned before they were recorded reads
    /// them now, and one planned before environments runs on the host.
    pub(super) async fn settings(&self) -> Result<(RepoConfig, Choice), Stop> {
        if let Some(json) = self.row.settings.as_deref() {
            let bound: BoundSettings = serde_json::from_str(json).map_err(|e| {
                Stop::fail(comments::bound_settings_unreadable(self.row.version, &e))
            })?;
            let config = RepoConfig::from_bound(&bound)
                .map_err(|e| Stop::fail(comments::bound_settings_unusable(self.row.version, &e)))?;
            let choice = match (bound.chosen, &bound.environment.image) {
                (Some(choice), _) => choice,
                // Planned before environments were chosen, with an image named: running it
                // on the host would not be what the contract showed.
                (None, Some(image)) => {
                    let text = comments::planned_before_environments(self.row.version, image);
                    return Err(Stop::fail(text));
                }
                (None, None) => Choice::host(Vec::new()),
            };
            return Ok((config, choice));
        }
        match crate::forge::repo_config::load(self.forge, &self.repo).await {
            Ok(c) => Ok((c, Choice::host(Vec::new()))),
            Err(LoadError::Config(e)) => Err(Stop::fail(comments::settings_invalid(&e))),
            Err(LoadError::Forge(e)) => Err(e.into()),
        }
    }

    /// The branch of the session's first run, or a new one named after the issue.
    pub(super) async fn branch(&self) -> Result<String, Stop> {
        let mut conn = self.reader().await?;
        if let Some(branch) = runs::branch_of_session(&mut conn, &self.id).await? {
            return Ok(branch);
        }
        // The title as the session recorded it at the start: no request, and the branch
        // name does not follow later edits.
        let recorded = sessions::issue_snapshot(&mut conn, &self.id).await?;
        drop(conn);
        let title = match recorded {
            Some((title, _)) => title,
            None => match self.forge.issue(&self.repo, self.issue).await {
                Ok(issue) => issue.title,
                Err(e) if !e.is_retryable() => String::new(),
                Err(e) => return Err(e.into()),
            },
        };
        Ok(crate::git::branch_name(self.issue, &title))
    }

    pub(super) fn mirror(&self) -> Result<MirrorKey, Stop> {
        MirrorKey::new(self.forge_kind.as_str(), self.repo.clone()).map_err(Stop::permanent)
    }

    /// A checkout of `start` on `branch`.
    pub(super) async fn workspace(&self, branch: &str, start: &str) -> Result<Workspace, Stop> {
        let mirror = self.mirror()?;
        let mut request = WorkspaceRequest {
            size: crate::session::checkout::mirror_size(&self.app, self.forge, &mirror).await?,
            mirror,
            remote: self.forge.git_remote(&self.repo).await?,
            base: CommitSha(start.to_owned()),
            issue: self.issue,
            title: String::new(),
        };
        let mut renewal = Renewal::new(self.forge, &self.repo);
        let created = loop {
            let created = self.app.workspaces.create_on(&request, branch).await;
            match renewal.after(&created).await? {
                Some(renewed) => request.remote = renewed,
                None => break created,
            }
        };
        match created {
            Ok(w) => Ok(w),
            Err(e @ crate::git::WorkspaceError::Fetch { refused: false, .. }) => {
                Err(Stop::retryable(e))
            }
            Err(e) => Err(Stop::fail(comments::checkout_failed(start, &e))),
        }
    }

    /// Makes `workspace`'s result go on top of `head`, what the session's branch holds.
    pub(super) async fn stack_on(&self, workspace: &mut Workspace, head: &str) -> Result<(), Stop> {
        let mut remote = self.forge.git_remote(&self.repo).await?;
        let head = CommitSha(head.to_owned());
        let mirror = self.mirror()?;
        let mut renewal = Renewal::new(self.forge, &self.repo);
        let stacked = loop {
            let stacked = self
                .app
                .workspaces
                .stack_on(workspace, &mirror, &remote, &head)
                .await;
            match renewal.after(&stacked).await? {
                Some(renewed) => remote = renewed,
                None => break stacked,
            }
        };
        match stacked {
            Ok(()) => Ok(()),
            Err(e @ crate::git::WorkspaceError::Fetch { refused: false, .. }) => {
                Err(Stop::retryable(e))
            }
            Err(e) => Err(Stop::fail(comments::checkout_failed(head.as_str(), &e))),
        }
    }

    pub(super) async fn finish_run(
        &self,
        run: &RunId,
        state: RunState,
        report: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        runs::update(&mut conn, run, state, report, outcome).await?;
        drop(conn);
        if let Some(end) = crate::routing::attempt_end(state, report, outcome) {
            let scope = crate::routing::AttemptScope {
                forge: self.forge_kind,
                repo: &self.repo,
                risk: self.contract.routing.risk,
                base: Some(&CommitSha(self.row.base_sha.clone())),
                source: crate::store::outcomes::OutcomeSource::Run,
            };
            // A record of the attempt, not the attempt itself: the run goes on without it.
            if let Err(e) = crate::routing::record_attempt(&self.app.db, &scope, run, &end).await {
                tracing::warn!(run = %run, error = %format!("{e:#}"), "could not record the attempt's outcome");
            }
        }
        Ok(())
    }

    /// Returns once the session is no longer executing (a maintainer cancelled it).
    pub(super) async fn until_cancelled(&self) {
        let mut every = tokio::time::interval(CANCEL_POLL);
        loop {
            every.tick().await;
            let Ok(mut conn) = self.app.db.pool.acquire().await else {
                continue;
            };
            if let Ok(Some(row)) = sessions::get(&mut conn, &self.id).await
                && row.state == SessionState::Cancelled
            {
                return;
            }
        }
    }

    /// Moves the session on; [`Stop::Gone`] when it was moved elsewhere first (cancelled).
    pub(super) async fn move_to(
        &self,
        from: SessionState,
        to: SessionState,
        failure: Option<&str>,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        if sessions::move_state(&mut conn, &self.id, from, to, failure).await? {
            Ok(())
        } else {
            info!(from = %from, to = %to, "the session moved on; execution stops");
            Err(Stop::Gone)
        }
    }

    /// Moves the session on and records why in one transaction, so a reader who sees the
    /// new state also sees its entry in the timeline; [`Stop::Gone`] as [`Self::move_to`].
    pub(super) async fn move_with_audit(
        &self,
        (from, to): (SessionState, SessionState),
        action: AuditAction,
        detail: serde_json::Value,
    ) -> Result<(), Stop> {
        let mut tx = self.app.db.writer.begin().await?;
        if !sessions::move_state(&mut tx, &self.id, from, to, None).await? {
            info!(from = %from, to = %to, "the session moved on; execution stops");
            return Err(Stop::Gone);
        }
        let entry = audit::Entry {
            actor: "planwright",
            action,
            session: Some(self.id.as_str()),
            delivery: None,
            detail,
        };
        audit::append(&mut tx, &entry).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn audit(
        &self,
        action: AuditAction,
        detail: serde_json::Value,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        audit::append(
            &mut conn,
            &audit::Entry {
                actor: "planwright",
                action,
                session: Some(self.id.as_str()),
                delivery: None,
                detail,
            },
        )
        .await?;
        Ok(())
    }

    pub(super) async fn status(&self, state: SessionState, text: &str) -> Result<(), Stop> {
        let Some(row) = self.app.db.session(&self.id).await? else {
            return Err(Stop::Gone);
        };
        update_status(&self.app, self.forge, &row, state, text).await?;
        Ok(())
    }
}

/// A folder of the run's records, open to the unprivileged user sandboxes run as (the
/// setup phase's egress socket is made there).
pub(super) fn create_open_dir(dir: &PathBuf) -> Result<(), Stop> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)))
        .with_context(|| format!("Could not create {}", dir.display()))
        .map_err(Stop::retryable)
}
