//! The plan job: runs the planner on a checkout of the base (or resumes it from its
//! dossier), stores the contract with the settings it binds, and posts it for approval.
//! A contract already stored for its version is posted as it is, so a retried job never
//! pays for planning twice.

use std::sync::Arc;

use anyhow::Context as _;
use tracing::{Instrument as _, info, warn};

use crate::app::App;
use crate::config::environment::Choice;
use crate::config::repo::{BoundSettings, RepoConfig};
use crate::contract::{
    Base, Contract, ContractDiff, ContractMarker, ContractModels, ContractVersion, RenderContext,
    Routing,
};
use crate::environment::source;
use crate::event::ForgeKind;
use crate::forge::repo_config;
use crate::forge::{Forge, ForgeError, Issue};
use crate::ids::{CommentId, CommitSha, IssueNumber, RepoName, SessionId};
use crate::jobs::JobError;
use crate::llm::ModelError;
use crate::metering::ModelRole;
use crate::planner::{Dossier, PlanError, PlanRequest, Planner, PlannerOptions};
use crate::repo_tools::RepoTools;
use crate::session::comments;
use crate::session::error::{Stop, UserError};
use crate::session::jobs::{JOB_ATTEMPTS, JobEnd, PlanJob};
use crate::session::status::{comment_url, find_own_comment, update_status, update_status_of};
use crate::store::audit;
use crate::store::audit::AuditAction;
use crate::store::model_usage::Budget;
use crate::store::sessions::{self, ContractRow, SessionRow};
use crate::store::state::SessionState;

/// The plan job: runs the planner (or resumes it) and posts the contract. The round ends
/// here only when planning fails.
pub async fn plan_job(app: Arc<App>, plan: PlanJob, attempt: i64) -> Result<JobEnd, JobError> {
    let Some(session) = app.db.session(&plan.session).await? else {
        return Err(JobError::Permanent(anyhow::anyhow!(
            "Session {} does not exist",
            plan.session
        )));
    };
    let again = session.state == SessionState::AwaitingApproval;
    if session.state != SessionState::Planning && !again {
        info!(session = %plan.session, state = %session.state, "plan job no longer needed");
        return Ok(JobEnd::RoundGoesOn);
    }
    let forge = app.forges.get(session.forge, session.installation_id)?;
    let span = tracing::info_span!("session", id = %plan.session, repo = %session.repo, issue = session.issue_number.0);
    let job = Planning {
        app: &app,
        forge: forge.as_ref(),
        session: &session,
        plan: &plan,
        last_try: attempt >= JOB_ATTEMPTS,
    };
    // Instrumented, not entered: a guard held across an await puts other tasks' log
    // lines under this span.
    async {
        let done = match again {
            true => job.announce_again().await,
            false => job.plan_and_post().await,
        };
        match done {
            Ok(()) | Err(Stop::Gone) => Ok(JobEnd::RoundGoesOn),
            // A round that failed in planning has ended: a review waiting for it starts.
            Err(Stop::User(UserError::Refused(reason) | UserError::Failed(reason))) => {
                fail(&app, job.forge, &session, &reason, None).await?;
                Ok(JobEnd::RoundEnded)
            }
            Err(Stop::User(UserError::Hidden { public, detail })) => {
                fail(&app, job.forge, &session, &public, Some(&detail)).await?;
                Ok(JobEnd::RoundEnded)
            }
            Err(Stop::Job(e)) => Err(e),
        }
    }
    .instrument(span)
    .await
}

/// One plan job's session and what it must produce.
struct Planning<'a> {
    app: &'a App,
    forge: &'a dyn Forge,
    session: &'a SessionRow,
    plan: &'a PlanJob,
    /// The job queue will not run this job again.
    last_try: bool,
}

impl Planning<'_> {
    fn kind(&self) -> ForgeKind {
        self.session.forge
    }

    fn repo(&self) -> &RepoName {
        &self.session.repo
    }

    fn issue(&self) -> IssueNumber {
        self.session.issue_number
    }

    fn id(&self) -> &SessionId {
        &self.session.id
    }

    /// The version this job produces, as the contract rows number it.
    fn version(&self) -> ContractVersion {
        self.plan.version
    }

    /// With `routing: auto`, the ladder starts on the cheapest rung this repository's
    /// outcomes at the contract's risk qualify, and says why (with too few, the rung the
    /// risk picks, and says that). A rung the contract's routing names stays pinned.
    async fn learned_start(&self, routing: &mut Routing, config: &RepoConfig) -> Result<(), Stop> {
        let (risk, pinned) = (routing.risk, routing.model.is_some());
        let Some(ladder) = routing.ladder.as_mut() else {
            return Ok(());
        };
        if !config.routing.auto || pinned {
            return Ok(());
        }
        let whose = crate::routing::Whose {
            forge: self.kind(),
            repo: self.repo(),
            groups: &self.app.settings.routing_groups,
        };
        let start = crate::routing::learned_start(
            &self.app.db,
            &whose,
            risk,
            &ladder.rungs,
            ladder.start,
            &config.routing,
        )
        .await?;
        ladder.start = start.rung;
        ladder.start_reason = Some(start.reason);
        Ok(())
    }

    async fn plan_and_post(&self) -> Result<(), Stop> {
        let investigating = comments::investigating();
        update_status(
            self.app,
            self.forge,
            self.session,
            SessionState::Planning,
            &investigating,
        )
        .await?;
        let db = &self.app.db;
        let existing = db.contract(self.id(), self.version()).await?;
        let dossier = read_dossier(db.dossier(self.id()).await?);
        // Questions asked and not yet posted (the job died before posting) are posted as
        // they are; asking again would cost money and might differ.
        if let Some(round) = dossier.asked.last().filter(|r| r.answer.is_none()) {
            return self.ask(&round.questions, dossier.asked.len()).await;
        }
        // A contract already stored for this version (the job died before posting) is
        // posted as it is: planning again would cost money and might differ.
        let (row, edited) = match existing {
            Some(row) => (row, false),
            None => match self.write_contract().await? {
                Written::Contract(row, edited) => (*row, edited),
                Written::Asked { questions, round } => return self.ask(&questions, round).await,
            },
        };
        let (body, version, notes) = self.render(&row).await?;
        // Cancelled while the planner worked: the contract stays on record, unposted.
        let still_planning = (self.app.db.session(self.id()).await?)
            .is_some_and(|s| s.state == SessionState::Planning);
        if !still_planning {
            info!(session = %self.id(), "session ended while planning; contract not posted");
            return Ok(());
        }
        self.post(&row, &body, version, edited, &notes).await
    }

    /// The issue as planwright was asked to plan it: an edit since (after the maintainer
    /// looked) is flagged, not planned from. `true` when it was edited.
    async fn issue_as_asked(&self) -> Result<(Issue, bool), Stop> {
        let mut issue = match self.forge.issue(self.repo(), self.issue()).await {
            Ok(i) => i,
            Err(ForgeError::NotFound { .. }) => {
                return Err(Stop::fail(comments::issue_unreadable()));
            }
            Err(e) => return Err(e.into()),
        };
        let snapshot = self.app.db.issue_snapshot(self.id()).await?;
        let Some((title, body)) = snapshot.filter(|(t, b)| *t != issue.title || *b != issue.body)
        else {
            return Ok((issue, false));
        };
        warn!(session = %self.id(), "the issue was edited after planwright was asked to start; planning from the text as it was");
        let text = comments::investigating_edited();
        update_status(
            self.app,
            self.forge,
            self.session,
            SessionState::Planning,
            &text,
        )
        .await?;
        issue.title = title;
        issue.body = body;
        Ok((issue, true))
    }

    /// Posts the planner's questions (once: a retry finds its comment by marker) and
    /// waits, at no cost, for an answer.
    async fn ask(&self, questions: &[String], round: usize) -> Result<(), Stop> {
        let (forge, repo, issue, id) = (self.forge, self.repo(), self.issue(), self.id());
        let marker = comments::questions_marker(id, round);
        let posted = match find_own_comment(forge, repo, issue, |b| b.contains(&marker)).await? {
            Some(c) => c,
            None => {
                let text = comments::questions(questions, &marker);
                forge.create_comment(repo, issue, &text).await?
            }
        };
        let mut tx = self.app.db.writer.begin().await?;
        let (from, to) = (SessionState::Planning, SessionState::AwaitingAnswer);
        if !sessions::move_state(&mut tx, id, from, to, None).await? {
            // Cancelled (or planned over) meanwhile: the questions stay unanswered.
            tx.commit().await?;
            return Ok(());
        }
        // An answer is a comment written after the questions.
        let mut dossier = load_dossier(&mut tx, id).await?;
        if let Some(waiting) = dossier.asked.last_mut() {
            waiting.asked_at = posted.created_at;
        }
        let text = serde_json::to_string(&dossier)?;
        sessions::save_dossier(&mut tx, id, Some(&text)).await?;
        let detail =
            serde_json::json!({ "round": round, "questions": questions, "comment": posted.id });
        audit_planwright(&mut tx, id, AuditAction::QuestionsAsked, detail).await?;
        tx.commit().await?;
        let text = comments::waiting_for_answer(questions.len());
        update_status_of(self.app, forge, id, to, &text).await?;
        Ok(())
    }

    /// Plans the version and stores it with the settings of its base, or says what the
    /// planner asked instead.
    async fn write_contract(&self) -> Result<Written, Stop> {
        let (issue, edited) = self.issue_as_asked().await?;
        let previous = match self.version() {
            ContractVersion(1) => None,
            ContractVersion(v) => {
                let before = ContractVersion(v - 1);
                self.app.db.contract(self.id(), before).await?
            }
        };
        let base = match &previous {
            // A revision keeps the base its evidence refers to.
            Some(p) => Base {
                branch: p.base_branch.clone(),
                sha: CommitSha(p.base_sha.clone()),
            },
            None => {
                let r = self.forge.repository(self.repo()).await?;
                Base {
                    branch: r.default_branch,
                    sha: r.head_sha,
                }
            }
        };
        let previous_contract = previous.as_ref().map(stored_contract).transpose()?;
        let revision = previous_contract
            .as_ref()
            .zip(self.plan.feedback.as_deref());
        let (planned, config, choice) = self.run_planner(&issue, &base, revision).await?;
        let mut contract = match planned {
            Planned::Contract(contract) => contract,
            Planned::Questions { questions, round } => {
                return Ok(Written::Asked { questions, round });
            }
        };
        // The ladder is planwright's to fill from the settings, whatever the submission
        // said: the approval binds what the repository asked for.
        let attempts = (contract.routing.max_attempts)
            .unwrap_or(config.max_attempts)
            .max(1);
        contract.routing.ladder =
            super::execute::ladder::build(self.app, &config, &contract.routing, attempts)
                .map_err(|e| Stop::fail(comments::settings_invalid(&e)))?;
        self.learned_start(&mut contract.routing, &config).await?;
        let sha256 = contract.hash(&base);
        let body = serde_json::to_string(&contract)?;
        let mut bound = config.bound();
        bound.chosen = Some(choice);
        let settings = bound.to_json();
        let (id, version) = (self.id(), self.version());
        let mut tx = self.app.db.writer.begin().await?;
        let new = sessions::NewContract {
            session: id,
            version,
            sha256: sha256.as_str(),
            body: &body,
            base_branch: &base.branch,
            base_sha: base.sha.as_str(),
            settings: Some(&settings),
        };
        sessions::insert_contract(&mut tx, &new).await?;
        let detail = serde_json::json!({
            "version": version,
            "sha256": sha256,
            "settings_sha256": BoundSettings::sha256_of(&settings),
        });
        audit_planwright(&mut tx, id, AuditAction::ContractWritten, detail).await?;
        tx.commit().await?;
        let row = (self.app.db.contract(id, version).await?)
            .context("The contract just stored cannot be read back")?;
        Ok(Written::Contract(Box::new(row), edited))
    }

    /// The contract comment's text, with the settings the approval binds.
    async fn render(
        &self,
        row: &ContractRow,
    ) -> Result<(String, ContractVersion, Vec<String>), Stop> {
        let contract = stored_contract(row)?;
        let base = Base {
            branch: row.base_branch.clone(),
            sha: CommitSha(row.base_sha.clone()),
        };
        let names = self.app.forges.bot_names(self.kind()).await?;
        let bound = match row.settings.as_deref() {
            Some(json) => Some(serde_json::from_str::<BoundSettings>(json).map_err(|e| {
                anyhow::anyhow!("Stored settings of v{} are unreadable: {e}", row.version)
            })?),
            None => None,
        };
        let config_budget = match &bound {
            Some(b) => Some(b.budget_usd),
            None => repo_config::load_policy(self.forge, self.repo())
                .await
                .map(|c| c.budget_usd)
                .ok(),
        };
        let version = row.version;
        let links = self.forge.web_links(self.repo());
        let mut body = contract.render_markdown(&RenderContext {
            session: self.id(),
            version,
            base: &base,
            links: &links,
            bot_mention: names.first().map_or("planwright", String::as_str),
            default_budget_usd: config_budget,
        });
        if let (Some(b), Some(json)) = (&bound, row.settings.as_deref()) {
            insert_settings(&mut body, &comments::settings_section(b, json));
        }
        if version > ContractVersion(1) {
            self.insert_changes(&mut body, &contract, row, ContractVersion(version.0 - 1))
                .await?;
        }
        let notes = bound
            .and_then(|b| b.chosen)
            .map(|c| c.notes)
            .unwrap_or_default();
        Ok((body, version, notes))
    }

    /// Puts what changed from version `previous` above the diagnosis, in the room the
    /// comment has left.
    async fn insert_changes(
        &self,
        body: &mut String,
        contract: &Contract,
        row: &ContractRow,
        previous: ContractVersion,
    ) -> Result<(), Stop> {
        let Some(old) = self.app.db.contract(self.id(), previous).await? else {
            return Ok(());
        };
        let settings_changed = old.settings != row.settings;
        let old_sha = old.base_sha.clone();
        let old = stored_contract(&old)?;
        // GitHub counts characters; the margin keeps room for the banner a superseded
        // version gets. The section's own size is counted in bytes, never less.
        let room = (crate::markdown::GITHUB_TEXT_LIMIT - SUPERSEDED_ROOM)
            .saturating_sub(body.chars().count())
            .min(CHANGES_CHARS);
        let section = ContractDiff::between(&old, contract)
            .with_base(&old_sha, &row.base_sha, settings_changed)
            .markdown(previous.0, room);
        match body.find("### Diagnosis") {
            Some(at) => body.insert_str(at, &section),
            None => body.push_str(&section),
        }
        Ok(())
    }

    /// Posts the contract (once: a retry finds its comment by marker), moves the session
    /// to awaiting approval and folds older versions away.
    async fn post(
        &self,
        row: &ContractRow,
        body: &str,
        version: ContractVersion,
        edited: bool,
        notes: &[String],
    ) -> Result<(), Stop> {
        let (forge, repo, issue, id) = (self.forge, self.repo(), self.issue(), self.id());
        let ours = |b: &str| {
            ContractMarker::find(b).is_some_and(|m| m.session == *id && m.version == version)
        };
        let first = self.app.db.claim_contract_post(id, row.version).await?;
        // Looked for only when an earlier attempt may have posted it.
        let earlier = match first {
            true => None,
            false => find_own_comment(forge, repo, issue, ours).await?,
        };
        let posted = match earlier {
            Some(c) => c,
            None => forge.create_comment(repo, issue, body).await?,
        };
        let mut tx = self.app.db.writer.begin().await?;
        let comment = posted.id.0.to_string();
        sessions::set_contract_comment(&mut tx, id, row.version, &comment, None, posted.created_at)
            .await?;
        let (from, to) = (SessionState::Planning, SessionState::AwaitingApproval);
        if !sessions::move_state(&mut tx, id, from, to, None).await? {
            // Cancelled while planning: the contract stays on record, nothing else happens.
            tx.commit().await?;
            return Ok(());
        }
        let superseded = sessions::supersede_before(&mut tx, id, row.version).await?;
        let detail = serde_json::json!({ "version": row.version, "sha256": row.sha256, "comment": posted.id });
        audit_planwright(&mut tx, id, AuditAction::ContractPosted, detail).await?;
        tx.commit().await?;
        self.announce(&superseded, version, edited, notes).await?;
        if let Some(pull) = self.session.pull_number {
            // A round asked for on the pull request: its readers learn where it waits.
            // Said once (the move above happens once); a courtesy, so not worth failing for.
            let url = comment_url(&forge.web_links(repo), issue, Some(&comment));
            let text = comments::revision_waiting(version, issue, url.as_deref());
            if let Err(e) = forge.comment_on_pull(repo, pull, &text).await {
                warn!(error = %e, pull = pull.0, "could not point the pull request to the revised contract");
            }
        }
        Ok(())
    }

    /// What follows a posted contract on the forge: the versions it supersedes marked so,
    /// and the status comment pointing to it.
    async fn announce(
        &self,
        superseded: &[ContractRow],
        version: ContractVersion,
        edited: bool,
        notes: &[String],
    ) -> Result<(), Stop> {
        let (forge, repo, issue) = (self.forge, self.repo(), self.issue());
        for old in superseded {
            let Some(comment) = old.comment_id.as_deref().and_then(|c| c.parse().ok()) else {
                continue;
            };
            mark_superseded(forge, repo, issue, CommentId(comment), old, version).await?;
        }
        let text = comments::contract_posted(version, edited, notes);
        let to = SessionState::AwaitingApproval;
        update_status_of(self.app, forge, self.id(), to, &text).await?;
        Ok(())
    }

    /// An earlier attempt posted this job's contract and stopped before announcing it (a
    /// rate limit, an outage): the announcement is made again, so the status comment does
    /// not stay at what it said meanwhile. Nothing happens when a later version exists.
    async fn announce_again(&self) -> Result<(), Stop> {
        let db = &self.app.db;
        let latest = db.latest_contract(self.id()).await?;
        let Some(row) = latest.filter(|r| r.version == self.version() && r.comment_id.is_some())
        else {
            return Ok(());
        };
        let before = db
            .contract(self.id(), ContractVersion(row.version.0 - 1))
            .await?;
        let (_, version, notes) = self.render(&row).await?;
        let superseded: Vec<ContractRow> = before.into_iter().collect();
        self.announce(&superseded, version, false, &notes).await
    }

    /// Runs the planner on a checkout of the base, with the settings that checkout holds
    /// (the default branch may have moved on since, or a revision keeps an older base).
    async fn run_planner(
        &self,
        issue: &Issue,
        base: &Base,
        revision: Option<(&Contract, &str)>,
    ) -> Result<(Planned, RepoConfig, Choice), Stop> {
        let (app, forge, kind) = (self.app, self.forge, self.kind());
        let checkout = crate::session::checkout::for_planning(
            app,
            kind,
            forge,
            self.repo(),
            issue.number,
            &issue.title,
            base,
        )
        .await?;
        let config = match RepoConfig::from_checkout(&checkout.path(), forge.config_paths()) {
            Ok(c) => c,
            Err(e) => {
                checkout.done().await;
                return Err(Stop::fail(comments::settings_invalid(&e)));
            }
        };
        // A ladder this deployment cannot climb is said before any model is paid.
        if let Err(e) = super::execute::ladder::check(app, &config) {
            checkout.done().await;
            return Err(Stop::fail(comments::settings_invalid(&e)));
        }
        let deployment = app
            .settings
            .images
            .default_image
            .as_ref()
            .map(ToString::to_string);
        let mut choice =
            source::choose(&config.environment, &checkout.path(), deployment.as_deref());
        // Pulled before any model is paid: scouts run their commands in it, and an image
        // that cannot be used is said now rather than after approval.
        let image = match crate::session::image::pull(app, &choice, self.last_try).await {
            Ok(image) => image,
            Err(stop) => {
                checkout.done().await;
                return Err(stop);
            }
        };
        // The approval binds what the scouts saw, not a tag that may move by then.
        choice.digest = image.as_ref().map(|lease| lease.digest.to_string());
        let root = image.as_ref().map(|lease| lease.sandbox_root());
        let budget = Budget::usd(config.budget_usd);
        let model = |role, choice| {
            app.model(role, self.id(), budget, choice)
                .map_err(|e| Stop::fail(format!("{e:#}")))
        };
        let planner_model = model(ModelRole::Planner, config.models.planner.as_ref())?;
        let scout_model = model(ModelRole::Scout, config.models.scout.as_ref())?;
        let reviewer = app
            .model_name(ModelRole::Reviewer, config.models.planner.as_ref())
            .map_err(|e| Stop::fail(format!("{e:#}")))?;
        // The tools read the base commit's tree: a sparse checkout holds little of it, and
        // a scout's command cannot change what they show.
        let tools = RepoTools::in_tree(&checkout.path(), &checkout.git_dir(), base.sha.as_str())
            .map_err(Stop::from)?
            .with_map_tokens(app.settings.map_tokens)
            .with_widening(checkout.widening());
        // The map's index reads every source file once: seconds on a large repository,
        // which must not hold up the async workers.
        let tools = {
            let tools = tools.clone();
            tokio::task::spawn_blocking(move || {
                tools.prepare_map();
                tools
            })
            .await
            .map_err(|e| Stop::from(anyhow::anyhow!("The repository map's task failed: {e}")))?
        };
        let mut dossier = read_dossier(app.db.dossier(self.id()).await?);
        let planner = Planner {
            model: planner_model.as_ref(),
            scout_model: scout_model.as_ref(),
            tools: &tools,
            sandbox: app.sandbox.as_deref(),
            root: root.as_ref(),
            options: PlannerOptions::default(),
        };
        let request = PlanRequest {
            repo: self.repo(),
            issue,
            base,
            config: &config,
            revision,
            evidence: self.plan.evidence.as_deref(),
        };
        let db = app.db.clone();
        let id = self.id().clone();
        let mut checkpoint = move |d: &Dossier| {
            let db = db.clone();
            let id = id.clone();
            let text = serde_json::to_string(d);
            Box::pin(async move {
                let text = text?;
                db.save_dossier(&id, Some(&text)).await
            })
                as std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
        };
        let mut result = planner.plan(&request, &mut dossier, &mut checkpoint).await;
        if let Ok(crate::planner::Planned::Contract(contract)) = &mut result {
            let models = ContractModels {
                planner: Some(planner_model.name().to_string()),
                reviewer: Some(reviewer.to_string()),
            };
            keep_record(contract, &tools, models);
        }
        drop(image);
        checkout.done().await;
        let planned = self.planned(result, dossier).await?;
        Ok((planned, config, choice))
    }

    /// What the planner's end means for the session; what it learned is kept for the next
    /// version, which starts its turn count afresh.
    async fn planned(
        &self,
        result: Result<crate::planner::Planned, PlanError>,
        mut dossier: Dossier,
    ) -> Result<Planned, Stop> {
        dossier.turns = 0;
        dossier.invalid_submissions = 0;
        let keep = async || -> Result<(), Stop> {
            let text = serde_json::to_string(&dossier)?;
            self.app.db.save_dossier(self.id(), Some(&text)).await?;
            Ok(())
        };
        let round = dossier.asked.len();
        match result {
            Ok(crate::planner::Planned::Contract(contract)) => {
                keep().await?;
                Ok(Planned::Contract(contract))
            }
            // Planning goes on from the answer with a fresh count of turns.
            Ok(crate::planner::Planned::Questions(questions)) => {
                keep().await?;
                Ok(Planned::Questions { questions, round })
            }
            Err(PlanError::Model(e)) if e.is_retryable() => Err(Stop::retryable(e)),
            Err(PlanError::Model(ModelError::BudgetExceeded { spent, limit, .. })) => {
                Err(Stop::fail(comments::planning_over_budget(&spent, &limit)))
            }
            Err(PlanError::Model(e)) => Err(Stop::hidden(comments::planner_model_failed(), e)),
            Err(e @ (PlanError::TurnLimit(_) | PlanError::Invalid(..))) => {
                keep().await?;
                Err(Stop::fail(comments::planning_stopped(&e)))
            }
            Err(PlanError::Checkpoint(e)) => Err(Stop::retryable(e)),
        }
    }
}

/// What the planner came to, with the round its questions are.
enum Planned {
    Contract(Box<Contract>),
    Questions {
        questions: Vec<String>,
        round: usize,
    },
}

/// What a plan job wrote: a contract (and whether the issue was edited since it was
/// asked), or questions.
enum Written {
    Contract(Box<ContractRow>, bool),
    Asked {
        questions: Vec<String>,
        round: usize,
    },
}

/// The session's dossier; a new one when it has none (or one this version cannot read).
async fn load_dossier(conn: &mut sqlx::AnyConnection, id: &SessionId) -> Result<Dossier, Stop> {
    Ok(read_dossier(sessions::load_dossier(conn, id).await?))
}

/// A stored dossier; a new one for none (or one this version cannot read).
fn read_dossier(text: Option<String>) -> Dossier {
    match text {
        Some(text) => serde_json::from_str(&text).unwrap_or_default(),
        None => Dossier::default(),
    }
}

fn stored_contract(row: &ContractRow) -> Result<Contract, Stop> {
    Contract::from_json(&row.body).map_err(|e| {
        Stop::from(anyhow::anyhow!(
            "Stored contract v{} is unreadable: {e}",
            row.version
        ))
    })
}

async fn audit_planwright(
    conn: &mut sqlx::AnyConnection,
    id: &SessionId,
    action: AuditAction,
    detail: serde_json::Value,
) -> Result<(), Stop> {
    let entry = audit::Entry {
        actor: "planwright",
        action,
        session: Some(id.as_str()),
        delivery: None,
        detail,
    };
    audit::append(conn, &entry).await?;
    Ok(())
}

/// Puts a banner on an older contract's comment and folds it away where the forge can.
async fn mark_superseded(
    forge: &dyn Forge,
    repo: &RepoName,
    issue: IssueNumber,
    comment: CommentId,
    old: &ContractRow,
    new: ContractVersion,
) -> Result<(), ForgeError> {
    let old_version = old.version;
    let comments = forge.comments(repo, issue).await?;
    if let Some(current) = comments.iter().find(|c| c.id == comment) {
        let banner = crate::contract::superseded_banner(old_version, new, None);
        if !current.body.starts_with("> **Superseded**") {
            forge
                .edit_comment(repo, issue, comment, &format!("{banner}{}", current.body))
                .await?;
        }
    }
    match forge.minimize_comment(repo, issue, comment).await {
        Ok(_) => Ok(()),
        // Folding is a nicety; the banner already says it.
        Err(e) if !e.is_retryable() => {
            warn!(error = %e, "could not fold the superseded contract away");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Characters of a revision's comment given to what changed from the version before.
const CHANGES_CHARS: usize = 8_000;

/// Characters of a comment left for the banner put above it when it is superseded.
const SUPERSEDED_ROOM: usize = 1_000;

/// Puts `section` before the rendered contract's closing rule (or at its end).
fn insert_settings(body: &mut String, section: &str) {
    match body.rfind("\n---\n") {
        Some(at) => body.insert_str(at + 1, &format!("{section}\n")),
        None => body.push_str(section),
    }
}

/// Moves a planning session to Failed and says why on its status comment; `detail` is
/// kept in the audit log only.
async fn fail(
    app: &App,
    forge: &dyn Forge,
    session: &SessionRow,
    reason: &str,
    detail: Option<&str>,
) -> Result<(), JobError> {
    let id = &session.id;
    let mut tx = app.db.writer.begin().await?;
    let (from, to) = (SessionState::Planning, SessionState::Failed);
    let moved = sessions::move_state(&mut tx, id, from, to, Some(reason)).await?;
    if moved {
        let entry = audit::Entry {
            actor: "planwright",
            action: AuditAction::SessionFailed,
            session: Some(id.as_str()),
            delivery: None,
            detail: serde_json::json!({ "reason": reason, "detail": detail }),
        };
        audit::append(&mut tx, &entry).await?;
    }
    tx.commit().await?;
    if moved {
        warn!(session = %id, reason, "session failed");
        update_status(app, forge, session, to, reason).await?;
    }
    Ok(())
}

/// planwright's own record on a contract, bound by the approval whatever the planner
/// wrote: the instruction files on the paths it changes, and the models that planned it
/// and will review the result.
fn keep_record(contract: &mut Contract, tools: &RepoTools, models: ContractModels) {
    let paths: Vec<&str> = contract
        .change
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    contract.instructions = tools.instruction_files(&paths);
    contract.models = models;
}
