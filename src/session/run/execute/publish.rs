//! The way out of an execution: the verified result is pushed and opened as a pull request
//! (a draft, or a report comment, when it failed), and the session moves on. A restart
//! publishes again from the very workspace that was verified when it is still there, and
//! otherwise (another worker, a lost disk) from what the run recorded: the result's commit,
//! pushed before the run was recorded as verified, and its outcome.

use std::path::Path;

use anyhow::Context as _;
use tracing::{info, warn};

use super::execution::Execution;

/// The verified result a run publishes.
pub(super) enum Verified {
    /// Its checkout, on this worker; with the commit when it was pushed already, and
    /// whether that push moved the branch (so no check of ours can be on it yet).
    Here(Workspace, Option<(CommitSha, bool)>),
    /// What the run recorded: its branch, and its commit there when it was pushed.
    Recorded {
        branch: String,
        commit: Option<CommitSha>,
    },
}

/// Where a publication takes the result from.
pub(super) enum Source<'a> {
    /// The verified checkout: committed and pushed if it is not yet.
    Workspace(&'a Workspace),
    /// Already on the forge (`None`: nothing to push, the report goes on the issue).
    Forge(Option<publish::Pushed<'a>>),
}

/// What a publication shows besides the contract: how the run ended and what it found.
pub(super) struct Shown<'a> {
    pub result: &'a RunResult,
    pub verification: &'a publish::VerificationSummary,
    pub review: Option<&'a publish::ReviewSummary>,
    /// `reference@digest` of the image it ran in, or `host`.
    pub environment: Option<&'a str>,
    pub attempts: u32,
    pub max_attempts: u32,
    /// What each rung of the ladder spent; empty without one.
    pub rungs: &'a [publish::RungSpend],
}
use crate::config::environment::Choice;
use crate::config::repo::{OnFailure, RepoConfig};
use crate::forge::ForgeError;
use crate::git::push::{PushError, PushFailure};
use crate::git::{Author, Outcome, Workspace};
use crate::ids::{CommitSha, PullNumber, RunId};
use crate::publish::{self, Publication, PublishError, Published, RunResult};
use crate::session::error::Stop;
use crate::session::status::comment_url;
use crate::session::{comments, image};
use crate::store::audit::AuditAction;
use crate::store::reviews;
use crate::store::runs::{self, RunState};
use crate::store::sessions;
use crate::store::state::SessionState;
use crate::verify::RunOutcome;

impl Execution<'_> {
    /// Publishing again after a restart: the verified run's workspace, if it is still there.
    pub(super) async fn resume_publishing(
        &self,
        config: &RepoConfig,
        choice: &Choice,
        earlier: &[runs::RunRow],
    ) -> Result<(), Stop> {
        let lost = || Stop::fail(comments::result_lost());
        let Some(run) = earlier
            .iter()
            .rev()
            .find(|r| r.state == RunState::Verified || r.state == RunState::Published)
        else {
            return Err(lost());
        };
        let (Some(dir), Some(branch), Some(text)) = (&run.workspace, &run.branch, &run.outcome)
        else {
            return Err(lost());
        };
        let outcome: RunOutcome = serde_json::from_str(text)
            .with_context(|| format!("The outcome of run {} is unreadable", run.id))
            .map_err(Stop::permanent)?;
        if run.state == RunState::Published {
            // Published before the process stopped: only the session's move is left.
            return match &outcome.failure {
                None => {
                    let session = self.app.db.session(&self.id).await?;
                    let pull = session.and_then(|s| s.pull_number);
                    self.move_with_audit(
                        (SessionState::Publishing, SessionState::PrOpened),
                        AuditAction::PullOpened,
                        serde_json::json!({"number": pull.map(|p| p.0), "run": run.id}),
                    )
                    .await?;
                    let text = comments::pull_was_opened(pull);
                    self.status(SessionState::PrOpened, &text).await
                }
                Some(reason) => Err(Stop::fail(comments::failed_report_was_published(reason))),
            };
        }
        let workspace = self
            .app
            .workspaces
            .reopen(
                Path::new(dir),
                &self.mirror()?,
                branch,
                &CommitSha(self.row.base_sha.clone()),
            )
            .map_err(Stop::permanent)?;
        if let Some(workspace) = workspace {
            info!(run = %run.id, "publishing the verified result after a restart");
            return self
                .publish(
                    config,
                    choice,
                    &run.id,
                    Verified::Here(workspace, None),
                    &outcome,
                )
                .await;
        }
        // Another worker's checkout, or one lost with its disk: what the run recorded is
        // enough when nothing needs pushing, or when the branch holds its commit (the
        // worker may have stopped between recording the commit and pushing it).
        let commit = outcome.commit.clone().map(CommitSha);
        let opens_a_pull = publish::opens_a_pull(&outcome.result(), config.on_failure);
        match &commit {
            Some(commit) if opens_a_pull => {
                let scratch = self
                    .app
                    .settings
                    .data_dir
                    .join("branch-checks")
                    .join(run.id.as_str());
                let holds =
                    publish::branch_holds(self.forge, &self.repo, branch, commit, &scratch).await;
                let _ = std::fs::remove_dir_all(&scratch);
                if !holds.map_err(publish_stop)? {
                    return Err(lost());
                }
            }
            None if opens_a_pull => return Err(lost()),
            _ => {}
        }
        info!(run = %run.id, "publishing the verified result from its record");
        let recorded = Verified::Recorded {
            branch: branch.clone(),
            commit,
        };
        self.publish(config, choice, &run.id, recorded, &outcome)
            .await
    }

    /// The commit a verified result will be published as, when it opens a pull request
    /// (made now if the result was not committed before verification): what the run's
    /// record names before anything is pushed.
    pub(super) async fn commit_to_publish(
        &self,
        workspace: &Workspace,
        result: &RunResult,
        on_failure: OnFailure,
        signature: (&str, &Author),
    ) -> Result<Option<CommitSha>, Stop> {
        if !publish::opens_a_pull(result, on_failure) {
            return Ok(None);
        }
        let commit = publish::result_commit(workspace, signature).await;
        commit.map(Some).map_err(publish_stop)
    }

    /// Pushes the verified result's branch once its record names the commit: from then
    /// on, publishing needs nothing of this worker's. Returns whether the push moved the
    /// branch (so no check of ours can be on the commit yet).
    pub(super) async fn push_verified(&self, workspace: &Workspace) -> Result<bool, Stop> {
        match publish::push_branch(self.forge, workspace, &self.repo).await {
            Ok(pushed) => Ok(pushed == crate::git::push::Pushed::Moved),
            Err(e) => Err(publish_stop(e)),
        }
    }

    pub(super) async fn publish(
        &self,
        config: &RepoConfig,
        choice: &Choice,
        run: &RunId,
        verified: Verified,
        outcome: &RunOutcome,
    ) -> Result<(), Stop> {
        let result = outcome.result();
        // No status edit of its own: publishing takes seconds, and the status says what
        // came of it next.
        let verification = outcome.verification.for_publication();
        let review = publish::ReviewSummary {
            accepted: outcome.accepted,
            findings: outcome.findings.clone(),
        };
        let shown = Shown {
            result: &result,
            verification: &verification,
            review: Some(&review),
            environment: outcome.environment.as_deref(),
            attempts: outcome.attempts,
            max_attempts: outcome.max_attempts,
            rungs: &outcome.rungs,
        };
        let source = match &verified {
            Verified::Here(workspace, Some((commit, moved))) => {
                Source::Forge(Some(publish::Pushed {
                    branch: workspace.branch(),
                    commit,
                    moved: *moved,
                }))
            }
            Verified::Here(workspace, None) => Source::Workspace(workspace),
            Verified::Recorded { branch, commit } => {
                Source::Forge(commit.as_ref().map(|commit| publish::Pushed {
                    branch,
                    commit,
                    moved: false,
                }))
            }
        };
        let published = self
            .publish_shown(config.on_failure, choice, source, &shown)
            .await?;
        let workspace = match verified {
            Verified::Here(workspace, _) => Some(workspace),
            Verified::Recorded { .. } => None,
        };
        let ladder = publish::ladder_section(&outcome.rungs);
        self.published(run, workspace, &result, published, &ladder)
            .await
    }

    /// Publishes `workspace`'s commit as `shown` says, as `on_failure` asks for one that
    /// did not pass; a failure to publish becomes the session's stop.
    pub(super) async fn publish_shown(
        &self,
        on_failure: OnFailure,
        choice: &Choice,
        source: Source<'_>,
        shown: &Shown<'_>,
    ) -> Result<Published, Stop> {
        let names = self.app.forges.bot_names(self.forge_kind).await?;
        let author = self.author(names.first().map_or("planwright", String::as_str));
        let links = self.forge.web_links(&self.repo);
        let contract_url = self
            .row
            .comment_url
            .clone()
            .or_else(|| comment_url(&links, self.issue, self.row.comment_id.as_deref()));
        let approved_by = self.row.approved_by.clone().unwrap_or_default();
        let ran_in = image::ran_in(choice, shown.environment);
        let publication = Publication {
            body_limit: self.forge.pull_body_limit(),
            check_carries_report: self.forge.check_carries_report(),
            repo: &self.repo,
            issue: self.issue,
            session: &self.id,
            contract: &self.contract,
            version: self.version(),
            hash: &self.hash,
            contract_url: contract_url.as_deref(),
            approved_by: &approved_by,
            base_branch: &self.row.base_branch,
            verification: shown.verification,
            environment: &ran_in,
            review: shown.review,
            attempts: shown.attempts,
            max_attempts: shown.max_attempts,
            result: shown.result,
            on_failure,
            author: &author,
            rungs: shown.rungs,
        };
        let published = match source {
            Source::Workspace(workspace) => {
                publish::publish(self.forge, &self.app.db, workspace, &publication).await
            }
            Source::Forge(pushed) => {
                publish::publish_pushed(self.forge, &self.app.db, pushed, &publication).await
            }
        };
        published.map_err(publish_stop)
    }

    /// Records what publishing came to and moves the session to its end; `workspace`:
    /// the verified checkout, when this worker has it.
    async fn published(
        &self,
        run: &RunId,
        workspace: Option<Workspace>,
        result: &RunResult,
        published: Published,
        ladder: &str,
    ) -> Result<(), Stop> {
        let mut conn = self.writer().await?;
        if let Published::Pull { commit, pull } = &published {
            runs::set_head(&mut conn, run, commit.as_str()).await?;
            sessions::set_pull(&mut conn, &self.id, pull.number).await?;
        }
        runs::update(&mut conn, run, RunState::Published, None, None).await?;
        drop(conn);
        // Without the checkout (published from the record), the review comments this
        // round answered are left unanswered rather than guessed at.
        let round_changed = match (result, &published, &workspace) {
            (RunResult::Succeeded, Published::Pull { .. }, Some(workspace)) => workspace
                .paths_changed_since_start()
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %e, "could not list what the round changed");
                    Vec::new()
                }),
            _ => Vec::new(),
        };
        if let Some(workspace) = workspace
            && let Err(e) = workspace.finish(Outcome::Succeeded).await
        {
            warn!(error = %e, "could not remove the run's workspace");
        }
        match (result, &published) {
            (RunResult::Succeeded, Published::Pull { pull, .. }) => {
                self.move_with_audit(
                    (SessionState::Publishing, SessionState::PrOpened),
                    AuditAction::PullOpened,
                    serde_json::json!({"number": pull.number.0, "url": pull.url, "run": run}),
                )
                .await?;
                let mut text = comments::pull_opened(pull.number, &pull.url);
                if !ladder.is_empty() {
                    text = format!("{}\n\n{}", text.trim_end(), ladder.trim_end());
                }
                self.status(SessionState::PrOpened, &text).await?;
                let Published::Pull { commit, .. } = &published else {
                    return Ok(());
                };
                self.answer_review_comments(pull.number, commit, &round_changed)
                    .await
            }
            (RunResult::Failed { reason }, Published::Pull { pull, .. }) => Err(Stop::fail(
                comments::failed_with_draft(reason, pull.number, &pull.url),
            )),
            (RunResult::Failed { reason }, Published::Comment { .. }) => {
                Err(Stop::fail(comments::failed_with_report(reason)))
            }
            (RunResult::Succeeded, Published::Comment { .. } | Published::Branch { .. })
            | (RunResult::Failed { .. }, Published::Branch { .. })
            | (RunResult::Unfinished { .. }, _) => Err(Stop::permanent(anyhow::anyhow!(
                "A verified run was published as {published:?}"
            ))),
        }
    }

    /// Answers, each in its own thread, the inline review comments this round was asked to
    /// address whose files it changed; each once. A comment deleted since is let go; a
    /// forge that fails leaves the rest for nobody to wait on: the round is published.
    async fn answer_review_comments(
        &self,
        pull: PullNumber,
        commit: &CommitSha,
        changed: &[String],
    ) -> Result<(), Stop> {
        let version = self.version();
        let mut conn = self.reader().await?;
        let owed = reviews::unanswered(&mut conn, &self.id, version).await?;
        drop(conn);
        let text = comments::review_comment_answered(commit.as_str(), self.version());
        for comment in owed.iter().filter(|c| changed.contains(&c.path)) {
            let thread = comment.thread.as_deref();
            let id = comment.comment_id;
            match self
                .forge
                .reply_to_review_comment(&self.repo, pull, id, thread, &text)
                .await
            {
                Ok(()) | Err(ForgeError::NotFound { .. }) => {}
                Err(e) => {
                    warn!(error = %e, comment = %id, "could not answer a review comment");
                    continue;
                }
            }
            let mut conn = self.writer().await?;
            reviews::answered(&mut conn, &self.id, version, id).await?;
        }
        Ok(())
    }

    pub(super) fn author(&self, login: &str) -> Author {
        Author {
            name: login.to_owned(),
            email: self.forge.commit_email(login),
        }
    }
}

/// What a failure to publish stops the session with.
fn publish_stop(e: PublishError) -> Stop {
    match e {
        // The workspace stays (dropped unfinished) for the job's next attempt.
        e if e.is_retryable() => Stop::retryable(e),
        PublishError::Push(PushError {
            branch,
            failure: PushFailure::Rejected,
            message,
            ..
        }) => Stop::fail(comments::push_rejected(&branch, &message)),
        e => Stop::hidden(comments::could_not_publish(), e),
    }
}
