//! Unfinished work is kept, never lost: an attempt that ends without a result to verify
//! (the executor met a limit, crashed or failed, or its result was refused for something
//! other than a path pushing would set off) has its change committed and pushed, as a
//! draft pull request on the session's branch or on a `planwright/<issue>-partial-<n>`
//! branch, and `/retry continue` carries on from it. Nothing is pushed for a change that
//! is empty, too large, or touches a protected path or a file CI runs on push.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tracing::info;

use super::execution::Execution;
use super::publish::Shown;
use crate::config::environment::Choice;
use crate::config::repo::OnFailure;
use crate::git::{Artifacts, Author, RESULT_MAX_BYTES, Workspace};
use crate::ids::{CommitSha, RunId};
use crate::publish::{self, Published, RunResult};
use crate::repo_tools::glob_matches;
use crate::session::comments;
use crate::session::error::Stop;
use crate::session::jobs::Continuation;
use crate::store::audit::AuditAction;
use crate::store::runs::{self, RunRow, RunState};
use crate::store::sessions;
use crate::verify::{self, RUN_BY_CI, ScopeFinding, Severity};

/// A run's outcome when it kept unfinished work: `{"partial": {…}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PartialOutcome {
    partial: Kept,
}

/// Unfinished work kept from a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    /// Why the run stopped.
    reason: String,
    /// The commit holding the change.
    commit: String,
    /// Where it was pushed, once it was: the session's branch or one of its own.
    #[serde(default)]
    branch: Option<String>,
    /// The draft pull request, or the forge's page comparing the branch.
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    pull: Option<i64>,
    #[serde(default)]
    published: bool,
}

/// What `/retry continue` carries on from: the unfinished work `run` kept and pushed.
pub(in crate::session) fn continuation_of(run: &RunRow) -> Option<Continuation> {
    let outcome: PartialOutcome = serde_json::from_str(run.outcome.as_deref()?).ok()?;
    let kept = outcome.partial;
    kept.published.then_some(Continuation {
        commit: CommitSha(kept.commit),
        reason: kept.reason,
    })
}

/// Whether pushing the path a finding names would set something off: a protected path,
/// or a file CI runs on push that the contract did not name (`check_scope` refuses those
/// only when undeclared).
fn set_off_by_push(finding: &ScopeFinding, protected: &[String]) -> bool {
    finding.severity == Severity::Refused
        && (protected.iter().any(|g| glob_matches(g, &finding.path))
            || RUN_BY_CI.iter().any(|g| glob_matches(g, &finding.path)))
}

/// The first of `findings` that keeps a change from being pushed at all.
pub(super) fn unpushable<'f>(
    findings: &'f [ScopeFinding],
    protected: &[String],
) -> Option<&'f ScopeFinding> {
    findings.iter().find(|f| set_off_by_push(f, protected))
}

/// What keeping left-behind work needs of the execution's settings.
pub(super) struct LeftBehind<'a> {
    pub protected: &'a [String],
    pub choice: &'a Choice,
    pub on_failure: OnFailure,
    pub max_attempts: u32,
}

/// An attempt that ended without a result to publish, with what it changed.
pub(super) struct Unfinished<'a> {
    pub run: &'a RunId,
    /// What the run stays: failed, or abandoned when a restart interrupted it (it does
    /// not count against the attempts).
    pub state: RunState,
    pub workspace: &'a Workspace,
    /// Why it ended, as the issue is told.
    pub reason: String,
    /// The result commit, when it was made before verification refused it.
    pub committed: Option<CommitSha>,
    pub message: &'a str,
    pub author: &'a Author,
    /// Files an earlier attempt's verification wrote: never part of the change.
    pub artifacts: &'a Artifacts,
    pub protected: &'a [String],
    pub choice: &'a Choice,
    pub on_failure: OnFailure,
    /// `reference@digest` of the run's image, or `host`.
    pub environment: &'a str,
    pub attempts: u32,
    pub max_attempts: u32,
}

impl Execution<'_> {
    /// Keeps the change of an attempt that ended without a result (committed before any
    /// check writes to the tree) and returns the failure text: why it ended and where the
    /// change is, or why nothing was pushed.
    pub(super) async fn keep_unfinished(&self, u: Unfinished<'_>) -> Result<String, Stop> {
        let workspace = u.workspace;
        let commit = match &u.committed {
            Some(commit) => commit.clone(),
            None => {
                let size = workspace.changed_bytes().await.map_err(Stop::permanent)?;
                if size > RESULT_MAX_BYTES {
                    return Ok(comments::partial_too_large(
                        &u.reason,
                        size,
                        RESULT_MAX_BYTES,
                    ));
                }
                let changed = workspace.changed_files().await.map_err(Stop::permanent)?;
                let links = verify::links_in(&workspace.repo(), &changed);
                let base = verify::RunSet::default();
                let scope =
                    verify::check_scope(&self.contract, u.protected, &changed, &links, &base);
                if let Some(f) = unpushable(&scope, u.protected) {
                    return Ok(comments::partial_touches(&u.reason, &f.path, &f.reason));
                }
                workspace
                    .commit_result(u.message, u.author, u.artifacts)
                    .await
                    .map_err(Stop::permanent)?
            }
        };
        if commit == workspace.base() {
            return Ok(comments::nothing_pushed(&u.reason));
        }
        let kept = Kept {
            reason: u.reason.clone(),
            commit: commit.as_str().to_owned(),
            branch: None,
            url: None,
            pull: None,
            published: false,
        };
        self.record_kept(&u, &kept).await?;
        self.push_kept(&u, kept).await
    }

    /// Pushes the kept change as `on_failure` asks and records where it went.
    async fn push_kept(&self, u: &Unfinished<'_>, mut kept: Kept) -> Result<String, Stop> {
        let result = RunResult::Unfinished {
            reason: u.reason.clone(),
        };
        let verification = publish::VerificationSummary::default();
        let shown = Shown {
            result: &result,
            verification: &verification,
            review: None,
            environment: Some(u.environment),
            attempts: u.attempts,
            max_attempts: u.max_attempts,
            rungs: &[],
        };
        let published = self
            .publish_shown(
                u.on_failure,
                u.choice,
                super::publish::Source::Workspace(u.workspace),
                &shown,
            )
            .await?;
        let text = match published {
            Published::Pull { commit, pull } => {
                let mut conn = self.writer().await?;
                // The session's branch holds it now: the next result goes on top of it.
                runs::set_head(&mut conn, u.run, commit.as_str()).await?;
                sessions::set_pull(&mut conn, &self.id, pull.number).await?;
                drop(conn);
                kept.branch = Some(u.workspace.branch().to_owned());
                kept.url = Some(pull.url.clone());
                kept.pull = Some(pull.number.0);
                comments::partial_in_draft(&u.reason, pull.number, &pull.url)
            }
            Published::Branch { branch, url, .. } => {
                let text = comments::partial_on_branch(&u.reason, &branch, url.as_deref());
                kept.branch = Some(branch);
                kept.url = url;
                text
            }
            Published::Comment { .. } => {
                return Err(Stop::permanent(anyhow::anyhow!(
                    "Unfinished work was published as a report"
                )));
            }
        };
        kept.published = true;
        self.record_kept(u, &kept).await?;
        info!(run = %u.run, branch = ?kept.branch, "kept the unfinished change");
        self.audit(
            AuditAction::PartialKept,
            serde_json::json!({ "run": u.run, "commit": kept.commit, "branch": kept.branch, "url": kept.url }),
        )
        .await?;
        Ok(text)
    }

    async fn record_kept(&self, u: &Unfinished<'_>, kept: &Kept) -> Result<(), Stop> {
        let outcome = serde_json::to_string(&PartialOutcome {
            partial: kept.clone(),
        })?;
        self.finish_run(u.run, u.state, None, Some(&outcome)).await
    }

    /// Unfinished work `run` left behind: one whose keeping a stopped job began (pushed
    /// again, the same commit). Returns what became of it; `None` when there is nothing to
    /// look after. An attempt a restart interrupted (abandoned with no outcome) left
    /// nothing to keep: it did not end, it is tried again, and nothing of it is published.
    pub(super) async fn keep_left_behind(
        &self,
        run: &RunRow,
        left: &LeftBehind<'_>,
    ) -> Result<Option<String>, Stop> {
        let kept = match (run.state, run.outcome.as_deref()) {
            (RunState::Abandoned, None) => {
                self.retire_interrupted(run).await;
                return Ok(None);
            }
            (RunState::Abandoned | RunState::Failed, Some(text)) => {
                match serde_json::from_str::<PartialOutcome>(text) {
                    Ok(outcome) if !outcome.partial.published => outcome.partial,
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let (Some(dir), Some(branch)) = (run.workspace.as_deref(), run.branch.as_deref()) else {
            return Ok(None);
        };
        let base = CommitSha(self.row.base_sha.clone());
        let reopened = self
            .app
            .workspaces
            .reopen(Path::new(dir), &self.mirror()?, branch, &base)
            .map_err(Stop::permanent)?;
        let Some(workspace) = reopened else {
            return Ok(None);
        };
        let names = self.app.forges.bot_names(self.forge_kind).await?;
        let author = self.author(names.first().map_or("planwright", String::as_str));
        let approved_by = self.row.approved_by.clone().unwrap_or_default();
        let (issue, version) = (self.issue, self.version());
        let message =
            publish::result_message(issue, &self.contract, version, &self.hash, &approved_by);
        let tip = workspace.tip().await.map_err(Stop::permanent)?;
        if tip.as_str() != kept.commit {
            return Ok(None);
        }
        let unfinished = Unfinished {
            run: &run.id,
            state: run.state,
            workspace: &workspace,
            reason: kept.reason.clone(),
            committed: Some(tip),
            message: &message,
            author: &author,
            artifacts: &Artifacts::default(),
            protected: left.protected,
            choice: left.choice,
            on_failure: left.on_failure,
            environment: run.environment.as_deref().unwrap_or("host"),
            attempts: u32::try_from(run.attempt).unwrap_or(1),
            max_attempts: left.max_attempts,
        };
        info!(run = %run.id, "keeping what an attempt left unfinished");
        Ok(Some(self.push_kept(&unfinished, kept).await?))
    }

    /// The checkout of an attempt a restart interrupted, when this worker has it: marked
    /// as a failed run's, so it stays for a look as long as those do and is then swept.
    async fn retire_interrupted(&self, run: &RunRow) {
        let (Some(dir), Some(branch)) = (run.workspace.as_deref(), run.branch.as_deref()) else {
            return;
        };
        let base = CommitSha(self.row.base_sha.clone());
        let Ok(mirror) = self.mirror() else {
            return;
        };
        match self
            .app
            .workspaces
            .reopen(Path::new(dir), &mirror, branch, &base)
        {
            Ok(Some(workspace)) => {
                if let Err(e) = workspace.finish(crate::git::Outcome::Failed).await {
                    tracing::warn!(run = %run.id, error = %e, "could not retire an interrupted attempt's checkout");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(run = %run.id, error = %e, "could not reopen an interrupted attempt's checkout")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;

    fn finding(path: &str, severity: Severity) -> ScopeFinding {
        ScopeFinding {
            path: path.into(),
            change: "added".into(),
            severity,
            reason: "r".into(),
        }
    }

    #[test]
    fn only_protected_paths_and_files_ci_runs_keep_a_change_from_being_pushed() {
        let protected = vec!["secrets/**".to_owned()];
        let link = [finding("docs/elsewhere", Severity::Refused)];
        assert!(unpushable(&link, &protected).is_none());
        let flagged = [finding(".github/workflows/ci.yml", Severity::Flagged)];
        assert!(unpushable(&flagged, &protected).is_none());
        for path in [
            "secrets/key.pem",
            ".gitlab-ci.yml",
            ".github/workflows/ci.yml",
        ] {
            let refused = [link[0].clone(), finding(path, Severity::Refused)];
            let found = unpushable(&refused, &protected).map(|f| f.path.as_str());
            assert_eq!(found, Some(path));
        }
    }

    fn run(state: RunState, outcome: Option<String>) -> RunRow {
        RunRow {
            id: RunId::generate(),
            session_id: SessionId::generate(),
            contract_version: crate::contract::ContractVersion(1),
            attempt: 1,
            executor: "command".into(),
            state,
            branch: Some("planwright/7-fix".into()),
            head_sha: None,
            input_tokens: 0,
            output_tokens: 0,
            cost_microusd: 0,
            report: None,
            workspace: None,
            outcome,
            environment: None,
            retired: 0,
            model: None,
            rung: 0,
            started_at: 0,
            finished_at: None,
        }
    }

    #[test]
    fn only_kept_and_pushed_work_can_be_continued() {
        let kept = |published: bool| {
            serde_json::to_string(&PartialOutcome {
                partial: Kept {
                    reason: "The executor ran out of time.".into(),
                    commit: "ab".repeat(20),
                    branch: Some("planwright/7-partial-1".into()),
                    url: None,
                    pull: None,
                    published,
                },
            })
            .unwrap()
        };
        let from = continuation_of(&run(RunState::Failed, Some(kept(true)))).unwrap();
        assert_eq!(from.commit, CommitSha("ab".repeat(20)));
        assert_eq!(from.reason, "The executor ran out of time.");
        // Not pushed yet, a verification report, or nothing kept at all.
        assert!(continuation_of(&run(RunState::Failed, Some(kept(false)))).is_none());
        let report = r#"{"verdict":"failed","commands":[]}"#.to_owned();
        assert!(continuation_of(&run(RunState::Failed, Some(report))).is_none());
        assert!(continuation_of(&run(RunState::Failed, None)).is_none());
    }
}
