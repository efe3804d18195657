//! What a session does on each event and job: a label starts one, comments command it,
//! the plan job runs the planner and posts the contract. Every state move is written with
//! the job that carries it on and an audit entry, in one transaction; every comment is
//! looked up by its marker before it is created, so retries and redeliveries post nothing
//! twice.

use std::sync::Arc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tracing::{Instrument as _, info, warn};

use super::commands::{self, Command};
use super::dispatch::JobKind;
use crate::app::App;
use crate::config::repo::{BoundSettings, RepoConfig};
use crate::contract::{
    Base, Contract, ContractMarker, ContractVersion, RenderContext, SourceLinks,
};
use crate::event::{self, Actor, RepoEvent, RepoEventKind, Thread};
use crate::forge::repo_config::{self, LoadError};
use crate::forge::{Forge, ForgeError, LabelChange, Reaction};
use crate::ids::{CommentId, CommitSha, IssueNumber, RepoName, SessionId};
use crate::jobs::JobError;
use crate::llm::ModelError;
use crate::metering::ModelRole;
use crate::planner::{Dossier, PlanError, PlanRequest, Planner, PlannerOptions};
use crate::repo_tools::RepoTools;
use crate::store::model_usage::Budget;
use crate::store::runs::RunState;
use crate::store::state::SessionState;
use crate::store::{audit, jobs, sessions};

/// Attempts a session job gets before it is dead-lettered; planning failures a person
/// must see are handled inside the job, so these are for outages.
pub(crate) const JOB_ATTEMPTS: i64 = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanJob {
    pub session: SessionId,
    /// The version this job produces.
    pub version: i64,
    /// `/revise` feedback: the new version builds on the previous one.
    pub feedback: Option<String>,
}

/// What an approval binds to: exactly this version, hash and base.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecuteJob {
    pub session: SessionId,
    pub version: i64,
    pub sha256: String,
    pub base_sha: String,
    /// The sha256 of the repository settings recorded with the contract; `None` for a
    /// contract planned before settings were recorded.
    #[serde(default)]
    pub settings_sha256: Option<String>,
}

/// The handler of repository events (label, comment).
pub async fn on_repo_event(
    app: &App,
    event: &RepoEvent,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    if !app.forges.configured(event.forge) {
        warn!(forge = %event.forge, repo = %event.repo, "an event arrived from a forge planwright has no credentials for; it is ignored");
        return Ok(());
    }
    match &event.kind {
        RepoEventKind::IssueLabeled {
            issue,
            labels,
            actor,
        } => on_labeled(app, event, *issue, labels, actor, delivery).await,
        RepoEventKind::IssueUnlabeled {
            issue,
            labels,
            actor,
        } => on_unlabeled(app, event, *issue, labels, actor, delivery).await,
        RepoEventKind::CommentCreated {
            thread: Thread::Issue(issue),
            comment,
            body,
            author,
        } => on_comment(app, event, *issue, *comment, body, author, delivery).await,
        RepoEventKind::CommentCreated {
            thread: Thread::PullRequest(pull),
            comment,
            body,
            ..
        } => on_pull_comment(app, event, *pull, *comment, body, delivery).await,
        RepoEventKind::ReviewSubmitted { .. } | RepoEventKind::MergeRequestChanged { .. } => {
            info!(repo = %event.repo, kind = ?event.kind, "repository event needs no action");
            Ok(())
        }
    }
}

/// Whether `actor` may not trigger anything: bots, planwright included.
async fn is_bot(forge: &dyn Forge, actor: &Actor) -> Result<bool, ForgeError> {
    Ok(actor.bot || actor.login.ends_with("[bot]") || forge.is_own(actor).await?)
}

async fn on_labeled(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    if is_bot(forge.as_ref(), actor).await? {
        return Ok(());
    }
    let config = match repo_config::load_policy(forge.as_ref(), &event.repo, Some(event.forge))
        .await
    {
        Ok(c) => c,
        Err(LoadError::Config(e)) => {
            // Only worth saying when the label could have been ours.
            if labels
                .iter()
                .any(|l| l.eq_ignore_ascii_case(crate::config::repo::DEFAULT_LABEL))
            {
                forge
                    .create_comment(
                        &event.repo,
                        issue,
                        &format!("planwright cannot start: the repository's settings are not valid.\n\n{e}"),
                    )
                    .await?;
            }
            return Ok(());
        }
        Err(LoadError::Forge(e)) => return Err(e.into()),
    };
    if !labels.iter().any(|l| l.eq_ignore_ascii_case(&config.label)) {
        return Ok(());
    }
    // A webhook is only what its sender claims: the issue must carry the label now. A
    // local issue has no labels; `solve` itself stands for adding one.
    let now = match event.forge {
        event::ForgeKind::Local => None,
        event::ForgeKind::Github | event::ForgeKind::Gitlab => {
            let Some(now) = labeled_issue(forge.as_ref(), event, issue, &config.label).await?
            else {
                info!(repo = %event.repo, issue = issue.0, "a label event for a label the issue does not carry is ignored");
                return Ok(());
            };
            Some(now)
        }
    };
    // Whoever the forge says added the label is the one whose permission counts.
    let Some(by) = forge
        .label_changed_by(&event.repo, issue, &config.label, LabelChange::Added, actor)
        .await?
    else {
        info!(repo = %event.repo, issue = issue.0, "a label event for a label nobody is recorded adding is ignored");
        return Ok(());
    };
    if is_bot(forge.as_ref(), &by).await? {
        return Ok(());
    }
    start_session(
        app,
        forge.as_ref(),
        event,
        issue,
        &by,
        &config,
        delivery,
        now,
    )
    .await
}

/// The issue as the forge has it, when it carries `label`.
async fn labeled_issue(
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    label: &str,
) -> Result<Option<crate::forge::Issue>, JobError> {
    match forge.issue(&event.repo, issue).await {
        Ok(now) => Ok(now
            .labels
            .iter()
            .any(|l| l.eq_ignore_ascii_case(label))
            .then_some(now)),
        Err(ForgeError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removing the trigger label while planning or awaiting approval cancels the session;
/// once execution has started, `/cancel` is the way.
async fn on_unlabeled(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    labels: &[String],
    actor: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    if is_bot(forge.as_ref(), actor).await? {
        return Ok(());
    }
    let mut conn = app.db.pool.acquire().await?;
    let Some(session) = sessions::find_active(&mut conn, event.forge, &event.repo, issue).await?
    else {
        return Ok(());
    };
    drop(conn);
    let state = session.state;
    if !matches!(
        state,
        SessionState::Planning | SessionState::AwaitingApproval
    ) {
        return Ok(());
    }
    let config =
        match repo_config::load_policy(forge.as_ref(), &event.repo, Some(event.forge)).await {
            Ok(c) => c,
            Err(LoadError::Config(_)) => return Ok(()),
            Err(LoadError::Forge(e)) => return Err(e.into()),
        };
    if !labels.iter().any(|l| l.eq_ignore_ascii_case(&config.label)) {
        return Ok(());
    }
    if labeled_issue(forge.as_ref(), event, issue, &config.label)
        .await?
        .is_some()
    {
        info!(repo = %event.repo, issue = issue.0, "an unlabel event for a label the issue still carries is ignored");
        return Ok(());
    }
    let Some(by) = forge
        .label_changed_by(
            &event.repo,
            issue,
            &config.label,
            LabelChange::Removed,
            actor,
        )
        .await?
    else {
        info!(repo = %event.repo, issue = issue.0, "an unlabel event for a label nobody is recorded removing is ignored");
        return Ok(());
    };
    if is_bot(forge.as_ref(), &by).await? {
        return Ok(());
    }
    if forge.permission(&event.repo, &by.login).await? < config.min_permission {
        info!(by = %by.login, "label removed by someone who may not cancel; session kept");
        return Ok(());
    }
    let id = session.id.clone();
    let mut tx = app.db.writer.begin().await?;
    if !sessions::move_state(&mut tx, &id, state, SessionState::Cancelled, None).await? {
        return Ok(());
    }
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &format!("{}:{}", event.forge.as_str(), by.login),
            action: "session.cancelled",
            session: Some(id.as_str()),
            delivery,
            detail: serde_json::json!({ "why": "label removed" }),
        },
    )
    .await?;
    tx.commit().await?;
    update_status(
        app,
        forge.as_ref(),
        &session,
        SessionState::Cancelled,
        &format!(
            "Cancelled: @{} removed the `{}` label.",
            by.login, config.label
        ),
    )
    .await
}

/// Checks the actor's permission and starts a session, unless one holds the issue. The
/// issue's text as it is now (`issue_now`, or read here) is what will be planned from.
#[allow(clippy::too_many_arguments)]
async fn start_session(
    app: &App,
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    actor: &Actor,
    config: &RepoConfig,
    delivery: Option<&str>,
    issue_now: Option<crate::forge::Issue>,
) -> Result<(), JobError> {
    if !permitted(forge, event, issue, actor, config, "start planwright").await? {
        return Ok(());
    }
    let issue_now = match issue_now {
        Some(i) => i,
        None => forge.issue(&event.repo, issue).await?,
    };
    let mut tx = app.db.writer.begin().await?;
    if let Some(delivery) = delivery
        && audit::delivery_did(&mut tx, delivery, "session.started").await?
    {
        return Ok(());
    }
    if let Some(active) = sessions::find_active(&mut tx, event.forge, &event.repo, issue).await? {
        drop(tx);
        let state = active.state;
        forge
            .create_comment(
                &event.repo,
                issue,
                &format!(
                    "planwright is already working on this issue (it is {}). Use `/cancel` to stop it, or `/plan` to start the planning over.",
                    state.describe()
                ),
            )
            .await?;
        return Ok(());
    }
    let id = SessionId::generate();
    sessions::insert(
        &mut tx,
        &sessions::NewSession {
            id: &id,
            forge: event.forge,
            repo: &event.repo,
            issue,
            installation: event.installation,
            triggered_by: &actor.login,
        },
    )
    .await?;
    sessions::set_issue_snapshot(&mut tx, &id, &issue_now.title, &issue_now.body).await?;
    enqueue_plan(&mut tx, &id, 1, None).await?;
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: &format!("{}:{}", event.forge, actor.login),
            action: "session.started",
            session: Some(id.as_str()),
            delivery,
            detail: serde_json::json!({ "repo": event.repo, "issue": issue }),
        },
    )
    .await?;
    tx.commit().await?;
    info!(session = %id, repo = %event.repo, issue = issue.0, by = %actor.login, "session started");
    Ok(())
}

/// Whether `actor` has the repository's `min_permission`; if not, says so on the issue
/// (`doing` completes "only people with … access can …").
async fn permitted(
    forge: &dyn Forge,
    event: &RepoEvent,
    issue: IssueNumber,
    actor: &Actor,
    config: &RepoConfig,
    doing: &str,
) -> Result<bool, JobError> {
    let permission = forge.permission(&event.repo, &actor.login).await?;
    if permission >= config.min_permission {
        return Ok(true);
    }
    forge
        .create_comment(
            &event.repo,
            issue,
            &format!(
                "@{}, only people with **{}** access or more can {doing} here (you have **{permission}**).",
                actor.login, config.min_permission
            ),
        )
        .await?;
    Ok(false)
}

async fn enqueue_plan(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: i64,
    feedback: Option<String>,
) -> anyhow::Result<()> {
    let mut job = JobKind::Plan(PlanJob {
        session: session.clone(),
        version,
        feedback,
    })
    .to_new_job(JOB_ATTEMPTS)?;
    job.session = Some(session.clone());
    jobs::enqueue(conn, &job).await?;
    Ok(())
}

async fn enqueue_execute(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    contract: &sessions::ContractRow,
) -> anyhow::Result<()> {
    let mut job = JobKind::Execute(ExecuteJob {
        session: session.clone(),
        version: contract.version,
        sha256: contract.sha256.clone(),
        base_sha: contract.base_sha.clone(),
        settings_sha256: contract.settings.as_deref().map(BoundSettings::sha256_of),
    })
    .to_new_job(JOB_ATTEMPTS)?;
    job.session = Some(session.clone());
    jobs::enqueue(conn, &job).await?;
    Ok(())
}

/// The comment a command arrived in, as the forge has it, claimed for this delivery: a
/// webhook's author and body are only what its sender claims, and its delivery id is the
/// sender's to choose. `None` when there is nothing to act on: the forge has no such
/// comment on the thread, or another delivery already carried this one.
async fn command_comment(
    app: &App,
    forge: &dyn Forge,
    event: &RepoEvent,
    thread: Thread,
    comment: CommentId,
    delivery: Option<&str>,
) -> Result<Option<crate::forge::Comment>, JobError> {
    let found = match forge.comment(&event.repo, thread, comment).await {
        Ok(found) => found,
        Err(ForgeError::NotFound { .. }) => {
            warn!(repo = %event.repo, %comment, "a command's comment is not on the forge; it is ignored");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let mut conn = app.db.writer.acquire().await?;
    let claimed = crate::store::deliveries::claim_command(
        &mut conn,
        event.forge,
        &event.repo,
        comment,
        delivery,
    )
    .await?;
    if !claimed {
        info!(repo = %event.repo, %comment, ?delivery, "a command already carried by another delivery is ignored");
        return Ok(None);
    }
    Ok(Some(found))
}

#[allow(clippy::too_many_arguments)]
async fn on_comment(
    app: &App,
    event: &RepoEvent,
    issue: IssueNumber,
    comment: CommentId,
    claimed_body: &str,
    claimed_author: &Actor,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    if is_bot(forge.as_ref(), claimed_author).await? {
        return Ok(());
    }
    let names = app.forges.bot_names(event.forge).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Only what looks like a command is worth reading back from the forge.
    if matches!(commands::parse(claimed_body, &names), Ok(None)) {
        return Ok(());
    }
    let Some(written) = command_comment(
        app,
        forge.as_ref(),
        event,
        Thread::Issue(issue),
        comment,
        delivery,
    )
    .await?
    else {
        return Ok(());
    };
    let author = &written.author;
    if is_bot(forge.as_ref(), author).await? {
        return Ok(());
    }
    let command = match commands::parse(&written.body, &names) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => return Ok(()),
        Err(e) => Err(e),
    };
    if let Some(delivery) = delivery {
        let mut conn = app.db.pool.acquire().await?;
        if audit::delivery_did(&mut conn, delivery, "command.handled").await? {
            return Ok(());
        }
    }
    let config =
        match repo_config::load_policy(forge.as_ref(), &event.repo, Some(event.forge)).await {
            Ok(c) => c,
            Err(LoadError::Config(e)) => {
                forge
                    .create_comment(
                        &event.repo,
                        issue,
                        &format!(
                            "planwright cannot act: the repository's settings are not valid.\n\n{e}"
                        ),
                    )
                    .await?;
                return Ok(());
            }
            Err(LoadError::Forge(e)) => return Err(e.into()),
        };
    let command = match command {
        Ok(c) => c,
        Err(e) => {
            // Only someone who may command planwright is told what went wrong: anyone
            // else's text gets no reply to spam the issue with.
            if forge.permission(&event.repo, &author.login).await? >= config.min_permission {
                forge
                    .create_comment(&event.repo, issue, &format!("@{}: {e}", author.login))
                    .await?;
            }
            return Ok(());
        }
    };
    let doing = format!("use `{command}`");
    if !permitted(forge.as_ref(), event, issue, author, &config, &doing).await? {
        return Ok(());
    }
    // Seen: the work itself goes through the queue.
    forge
        .react(&event.repo, issue, comment, Reaction::Eyes)
        .await?;

    let ctx = CommandContext {
        app,
        forge: forge.as_ref(),
        event,
        issue,
        author,
        written_at: written.created_at,
        delivery,
        config: &config,
    };
    let reply = ctx.act(&command).await?;
    if let Some(reply) = reply {
        forge
            .create_comment(&event.repo, issue, &format!("@{}: {reply}", author.login))
            .await?;
    }
    Ok(())
}

/// `/revise` on the pull (merge) request a session published: another round on the same
/// branch, starting with a revised contract on the issue. Other commands belong on the
/// issue, and comments on other pull requests are not planwright's.
async fn on_pull_comment(
    app: &App,
    event: &RepoEvent,
    pull: crate::ids::PullNumber,
    comment: CommentId,
    claimed_body: &str,
    delivery: Option<&str>,
) -> Result<(), JobError> {
    let forge = app.forges.get(event.forge, event.installation)?;
    // Most comments on pull requests are not for planwright: read the text first.
    let names = app.forges.bot_names(event.forge).await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Ok(Some(Command::Revise { .. })) = commands::parse(claimed_body, &names) else {
        return Ok(());
    };
    let Some(written) = command_comment(
        app,
        forge.as_ref(),
        event,
        Thread::PullRequest(pull),
        comment,
        delivery,
    )
    .await?
    else {
        return Ok(());
    };
    let author = &written.author;
    let Ok(Some(Command::Revise { feedback })) = commands::parse(&written.body, &names) else {
        return Ok(());
    };
    if is_bot(forge.as_ref(), author).await? {
        return Ok(());
    }
    let mut conn = app.db.pool.acquire().await?;
    if let Some(delivery) = delivery
        && audit::delivery_did(&mut conn, delivery, "command.handled").await?
    {
        return Ok(());
    }
    let Some(session) = sessions::find_by_pull(&mut conn, event.forge, &event.repo, pull).await?
    else {
        return Ok(());
    };
    drop(conn);
    let issue = session.issue_number;
    let replier = forge.clone();
    let reply = |text: String| async move {
        replier
            .create_comment(&event.repo, issue, &format!("@{}: {text}", author.login))
            .await
            .map(|_| ())
    };
    let config =
        match repo_config::load_policy(forge.as_ref(), &event.repo, Some(event.forge)).await {
            Ok(c) => c,
            Err(LoadError::Config(e)) => {
                reply(format!(
                    "planwright cannot act: the repository's settings are not valid.\n\n{e}"
                ))
                .await?;
                return Ok(());
            }
            Err(LoadError::Forge(e)) => return Err(e.into()),
        };
    if !permitted(
        forge.as_ref(),
        event,
        issue,
        author,
        &config,
        "use `/revise`",
    )
    .await?
    {
        return Ok(());
    }
    let id = session.id.clone();
    let state = session.state;
    if !matches!(state, SessionState::PrOpened | SessionState::Failed) {
        reply(format!(
            "the pull request can be revised once its run has ended; the session is {}.",
            state.describe()
        ))
        .await?;
        return Ok(());
    }
    let mut tx = app.db.writer.begin().await?;
    if let Some(other) = sessions::find_active(&mut tx, event.forge, &event.repo, issue).await?
        && other.id != session.id
    {
        drop(tx);
        reply("another planwright session is active on the issue; revise there.".into()).await?;
        return Ok(());
    }
    let next_version = sessions::latest_contract(&mut tx, &id)
        .await?
        .map_or(1, |c| c.version + 1);
    if !sessions::move_state(&mut tx, &id, state, SessionState::Planning, None).await? {
        drop(tx);
        reply("another command changed this session first; the revision was not started.".into())
            .await?;
        return Ok(());
    }
    enqueue_plan(&mut tx, &id, next_version, Some(feedback.clone())).await?;
    let actor = format!("{}:{}", event.forge.as_str(), author.login);
    for (action, detail) in [
        (
            "contract.revision_requested",
            serde_json::json!({ "version": next_version, "feedback": feedback, "pull": pull.0 }),
        ),
        (
            "command.handled",
            serde_json::json!({ "command": "revise", "pull": pull.0 }),
        ),
    ] {
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: &actor,
                action,
                session: Some(id.as_str()),
                delivery,
                detail,
            },
        )
        .await?;
    }
    tx.commit().await?;
    info!(session = %id, pull = pull.0, by = %author.login, "revision asked for on the pull request");
    let mut conn = app.db.pool.acquire().await?;
    if let Some(row) = sessions::get(&mut conn, &id).await? {
        drop(conn);
        update_status(
            app,
            forge.as_ref(),
            &row,
            SessionState::Planning,
            &format!(
                "Revising the contract (v{next_version}) with feedback from @{} on the pull request; the next round continues on the same branch.",
                author.login
            ),
        )
        .await?;
    }
    Ok(())
}

struct CommandContext<'a> {
    app: &'a App,
    forge: &'a dyn Forge,
    event: &'a RepoEvent,
    issue: IssueNumber,
    author: &'a Actor,
    /// When the forge says the command was written (seconds, its clock).
    written_at: Option<i64>,
    delivery: Option<&'a str>,
    config: &'a RepoConfig,
}

impl CommandContext<'_> {
    fn actor(&self) -> String {
        format!("{}:{}", self.event.forge.as_str(), self.author.login)
    }

    /// Carries out a command; `Some(text)` is a reply the commenter must read (a refusal).
    async fn act(&self, command: &Command) -> Result<Option<String>, JobError> {
        // `/plan` plans from the issue as it is now: the text the maintainer just chose to
        // plan from. Read before the transaction, which must not wait on the forge.
        let issue_now = match command {
            Command::Plan => Some(self.forge.issue(&self.event.repo, self.issue).await?),
            _ => None,
        };
        let mut tx = self.app.db.writer.begin().await?;
        let Some(session) =
            sessions::find_active(&mut tx, self.event.forge, &self.event.repo, self.issue).await?
        else {
            drop(tx);
            if *command == Command::Plan {
                return start_session(
                    self.app,
                    self.forge,
                    self.event,
                    self.issue,
                    self.author,
                    self.config,
                    self.delivery,
                    issue_now,
                )
                .await
                .map(|()| None);
            }
            return Ok(Some(format!(
                "there is no planwright session on this issue. Add the `{}` label to start one.",
                self.config.label
            )));
        };
        let id = session.id.clone();
        let state = session.state;
        let latest = sessions::latest_contract(&mut tx, &id).await?;
        let next_version = latest.as_ref().map_or(1, |c| c.version + 1);
        let refused = |text: String| Ok(Some(text));
        let done = match command {
            Command::Approve { version } => {
                if state != SessionState::AwaitingApproval {
                    return refused(format!(
                        "there is nothing to approve right now: the session is {}.",
                        state.describe()
                    ));
                }
                let Some(contract) = latest.filter(|c| c.comment_id.is_some()) else {
                    return refused("there is no posted contract to approve yet.".into());
                };
                // A command written before this version was posted was about an earlier
                // one (a late or replayed delivery); approving it would bind words to text
                // their writer never saw.
                if let (Some(written), Some(posted)) =
                    (self.written_at, contract.comment_created_at)
                    && written < posted
                {
                    let at = contract
                        .comment_url
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default();
                    return refused(format!(
                        "this `/approve` was written before contract v{}{at} was posted, so it cannot approve it. Read it and approve it with a new `/approve`.",
                        contract.version
                    ));
                }
                if let Some(asked) = version
                    && i64::from(asked.0) != contract.version
                {
                    let at = contract
                        .comment_url
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default();
                    return refused(format!(
                        "version {asked} is not the current contract; version {}{at} is. Approve it with `/approve`.",
                        contract.version
                    ));
                }
                if !sessions::approve_contract(&mut tx, &id, contract.version, &self.author.login)
                    .await?
                    || !sessions::move_state(
                        &mut tx,
                        &id,
                        SessionState::AwaitingApproval,
                        SessionState::Executing,
                        None,
                    )
                    .await?
                {
                    return refused(
                        "another command changed this session first; nothing was approved.".into(),
                    );
                }
                enqueue_execute(&mut tx, &id, &contract).await?;
                (
                    "contract.approved",
                    serde_json::json!({
                        "version": contract.version,
                        "sha256": contract.sha256,
                        "base_sha": contract.base_sha,
                        "settings_sha256": contract.settings.as_deref().map(BoundSettings::sha256_of),
                    }),
                    SessionState::Executing,
                    format!(
                        "Contract v{} approved by @{}; executing it.",
                        contract.version, self.author.login
                    ),
                )
            }
            Command::Revise { feedback } => {
                if state != SessionState::AwaitingApproval {
                    return refused(format!(
                        "a contract can be revised while it awaits approval; the session is {}.",
                        state.describe()
                    ));
                }
                if !sessions::move_state(
                    &mut tx,
                    &id,
                    SessionState::AwaitingApproval,
                    SessionState::Planning,
                    None,
                )
                .await?
                {
                    return refused(
                        "another command changed this session first; the revision was not started."
                            .into(),
                    );
                }
                enqueue_plan(&mut tx, &id, next_version, Some(feedback.clone())).await?;
                (
                    "contract.revision_requested",
                    serde_json::json!({ "version": next_version, "feedback": feedback }),
                    SessionState::Planning,
                    format!(
                        "Revising the contract (v{next_version}) with feedback from @{}.",
                        self.author.login
                    ),
                )
            }
            Command::Plan => {
                if !matches!(state, SessionState::AwaitingApproval | SessionState::Failed) {
                    return refused(format!(
                        "planning can start over while a contract awaits approval or after a failure; the session is {}.",
                        state.describe()
                    ));
                }
                if !sessions::move_state(&mut tx, &id, state, SessionState::Planning, None).await? {
                    return refused("another command changed this session first.".into());
                }
                sessions::save_dossier(&mut tx, &id, None).await?;
                if let Some(now) = &issue_now {
                    sessions::set_issue_snapshot(&mut tx, &id, &now.title, &now.body).await?;
                }
                enqueue_plan(&mut tx, &id, next_version, None).await?;
                (
                    "session.replanned",
                    serde_json::json!({ "version": next_version }),
                    SessionState::Planning,
                    format!(
                        "Planning again from scratch, as @{} asked.",
                        self.author.login
                    ),
                )
            }
            Command::Retry => {
                if state != SessionState::Failed {
                    return refused(format!(
                        "only a failed session can be retried; this one is {}.",
                        state.describe()
                    ));
                }
                let resume = session.resume_state.unwrap_or(SessionState::Planning);
                if resume == SessionState::Planning {
                    if !sessions::move_state(&mut tx, &id, state, SessionState::Planning, None)
                        .await?
                    {
                        return refused("another command changed this session first.".into());
                    }
                    enqueue_plan(&mut tx, &id, next_version, None).await?;
                    (
                        "session.retried",
                        serde_json::json!({ "resume": resume.as_str() }),
                        SessionState::Planning,
                        format!("Retrying planning, as @{} asked.", self.author.login),
                    )
                } else {
                    // A later stage runs the approved contract again: a fresh attempt
                    // from the base, or publishing the verified result if it is still there.
                    let Some(contract) = latest.filter(|c| c.approved_by.is_some()) else {
                        return refused(
                            "there is no approved contract to carry out; use `/plan` to start over."
                                .into(),
                        );
                    };
                    // Publishing again only helps a verified result that was never
                    // published; anything else is carried out again.
                    let unpublished =
                        crate::store::runs::for_version(&mut tx, &id, contract.version)
                            .await?
                            .last()
                            .is_some_and(|r| r.state == RunState::Verified);
                    let resume = if resume == SessionState::Publishing && unpublished {
                        SessionState::Publishing
                    } else {
                        SessionState::Executing
                    };
                    if !sessions::move_state(&mut tx, &id, state, resume, None).await? {
                        return refused("another command changed this session first.".into());
                    }
                    crate::store::runs::retire(&mut tx, &id, contract.version).await?;
                    enqueue_execute(&mut tx, &id, &contract).await?;
                    (
                        "session.retried",
                        serde_json::json!({ "resume": resume.as_str(), "version": contract.version }),
                        resume,
                        format!(
                            "Carrying out contract v{} again, as @{} asked.",
                            contract.version, self.author.login
                        ),
                    )
                }
            }
            Command::Cancel => {
                if !state.can_become(SessionState::Cancelled) {
                    return refused(format!(
                        "the session cannot be cancelled now: it is {}.",
                        state.describe()
                    ));
                }
                if !sessions::move_state(&mut tx, &id, state, SessionState::Cancelled, None).await?
                {
                    return refused("another command changed this session first.".into());
                }
                (
                    "session.cancelled",
                    serde_json::json!({}),
                    SessionState::Cancelled,
                    format!("Cancelled by @{}.", self.author.login),
                )
            }
        };
        let (action, detail, new_state, status) = done;
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: &self.actor(),
                action,
                session: Some(id.as_str()),
                delivery: self.delivery,
                detail: detail.clone(),
            },
        )
        .await?;
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: &self.actor(),
                action: "command.handled",
                session: Some(id.as_str()),
                delivery: self.delivery,
                detail: serde_json::json!({ "command": command.name() }),
            },
        )
        .await?;
        tx.commit().await?;
        info!(session = %id, command = command.name(), by = %self.author.login, "command carried out");
        let mut conn = self.app.db.pool.acquire().await?;
        if let Some(row) = sessions::get(&mut conn, &id).await? {
            drop(conn);
            update_status(self.app, self.forge, &row, new_state, &status).await?;
        }
        Ok(None)
    }
}

/// The plan job: runs the planner (or resumes it) and posts the contract.
pub async fn plan_job(app: Arc<App>, plan: PlanJob) -> Result<(), JobError> {
    let mut conn = app.db.pool.acquire().await?;
    let Some(session) = sessions::get(&mut conn, &plan.session).await? else {
        return Err(JobError::Permanent(anyhow::anyhow!(
            "Session {} does not exist",
            plan.session
        )));
    };
    drop(conn);
    if session.state != SessionState::Planning {
        info!(session = %plan.session, state = %session.state, "plan job no longer needed");
        return Ok(());
    }
    let forge_kind = session.forge;
    let repo = session.repo.clone();
    let issue = session.issue_number;
    let forge = app.forges.get(forge_kind, session.installation_id)?;
    let span = tracing::info_span!("session", id = %plan.session, repo = %repo, issue = issue.0);
    // Instrumented, not entered: a guard held across an await puts other tasks' log
    // lines under this span.
    async {
        match plan_and_post(
            &app,
            forge.as_ref(),
            forge_kind,
            &repo,
            issue,
            &session,
            &plan,
        )
        .await
        {
            Ok(()) => Ok(()),
            Err(Failure::User(message)) => {
                fail(&app, forge.as_ref(), &session, &message, None).await?;
                Ok(())
            }
            Err(Failure::Hidden { public, detail }) => {
                fail(&app, forge.as_ref(), &session, &public, Some(&detail)).await?;
                Ok(())
            }
            Err(Failure::Job(e)) => Err(e),
        }
    }
    .instrument(span)
    .await
}

/// Why planning stopped: a reason to tell the issue (the session fails), or a job error
/// (retried by the queue, or dead-lettered).
enum Failure {
    User(String),
    /// A reason whose cause is a provider's own text: the issue, which may be public,
    /// gets `public`, the audit log keeps `detail`.
    Hidden {
        public: String,
        detail: String,
    },
    Job(JobError),
}

impl<E: Into<JobError>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Job(e.into())
    }
}

async fn plan_and_post(
    app: &App,
    forge: &dyn Forge,
    forge_kind: event::ForgeKind,
    repo: &RepoName,
    issue_number: IssueNumber,
    session: &sessions::SessionRow,
    plan: &PlanJob,
) -> Result<(), Failure> {
    let id = session.id.clone();
    update_status(
        app,
        forge,
        session,
        SessionState::Planning,
        "The planner is investigating the issue.",
    )
    .await?;

    let mut conn = app.db.pool.acquire().await?;
    let existing = sessions::contract(&mut conn, &id, plan.version).await?;
    let previous = match plan.version {
        1 => None,
        v => sessions::contract(&mut conn, &id, v - 1).await?,
    };
    drop(conn);

    // A contract already stored for this version (the job died before posting) is posted
    // as it is: planning again would cost money and might differ.
    let mut edited = false;
    let row = match existing {
        Some(row) => row,
        None => {
            let mut issue = match forge.issue(repo, issue_number).await {
                Ok(i) => i,
                Err(ForgeError::NotFound { .. }) => {
                    return Err(Failure::User("The issue can no longer be read.".into()));
                }
                Err(e) => return Err(e.into()),
            };
            // The planner reads the issue as it was when planwright was asked to start:
            // an edit since (after the maintainer looked) is flagged, not planned from.
            let mut conn = app.db.pool.acquire().await?;
            let snapshot = sessions::issue_snapshot(&mut conn, &id).await?;
            drop(conn);
            if let Some((title, body)) = snapshot
                && (title != issue.title || body != issue.body)
            {
                warn!(session = %id, "the issue was edited after planwright was asked to start; planning from the text as it was");
                update_status(
                    app,
                    forge,
                    session,
                    SessionState::Planning,
                    "The planner is investigating the issue. **The issue was edited after planwright was asked to start**: the contract is planned from the text as it was then. Use `/plan` to plan from the current text.",
                )
                .await?;
                issue.title = title;
                issue.body = body;
                edited = true;
            }
            let base = match &previous {
                // A revision keeps the base its evidence refers to.
                Some(p) => Base {
                    branch: p.base_branch.clone(),
                    sha: CommitSha(p.base_sha.clone()),
                },
                None => {
                    let r = forge.repository(repo).await?;
                    Base {
                        branch: r.default_branch,
                        sha: r.head_sha,
                    }
                }
            };
            let previous_contract = match &previous {
                Some(p) => Some(Contract::from_json(&p.body).map_err(|e| {
                    anyhow::anyhow!("Stored contract v{} is unreadable: {e}", p.version)
                })?),
                None => None,
            };
            let (contract, config) = run_planner(
                app,
                forge_kind,
                forge,
                repo,
                &id,
                &issue,
                &base,
                previous_contract.as_ref().zip(plan.feedback.as_deref()),
            )
            .await?;
            let sha256 = contract.hash(&base);
            let body = serde_json::to_string(&contract)?;
            let settings = config.bound().to_json();
            let mut tx = app.db.writer.begin().await?;
            sessions::insert_contract(
                &mut tx,
                &sessions::NewContract {
                    session: &id,
                    version: plan.version,
                    sha256: sha256.as_str(),
                    body: &body,
                    base_branch: &base.branch,
                    base_sha: base.sha.as_str(),
                    settings: Some(&settings),
                },
            )
            .await?;
            audit::append(
                &mut tx,
                &audit::Entry {
                    actor: "planwright",
                    action: "contract.written",
                    session: Some(id.as_str()),
                    delivery: None,
                    detail: serde_json::json!({
                        "version": plan.version,
                        "sha256": sha256,
                        "settings_sha256": BoundSettings::sha256_of(&settings),
                    }),
                },
            )
            .await?;
            tx.commit().await?;
            let mut conn = app.db.pool.acquire().await?;
            sessions::contract(&mut conn, &id, plan.version)
                .await?
                .context("The contract just stored cannot be read back")?
        }
    };

    let contract = Contract::from_json(&row.body)
        .map_err(|e| anyhow::anyhow!("Stored contract v{} is unreadable: {e}", row.version))?;
    let base = Base {
        branch: row.base_branch.clone(),
        sha: CommitSha(row.base_sha.clone()),
    };
    let names = app.forges.bot_names(forge_kind).await?;
    let bound = match row.settings.as_deref() {
        Some(json) => Some(serde_json::from_str::<BoundSettings>(json).map_err(|e| {
            anyhow::anyhow!("Stored settings of v{} are unreadable: {e}", row.version)
        })?),
        None => None,
    };
    let config_budget = match &bound {
        Some(b) => Some(b.budget_usd),
        None => repo_config::load_policy(forge, repo, Some(forge_kind))
            .await
            .map(|c| c.budget_usd)
            .ok(),
    };
    let version = ContractVersion(u32::try_from(row.version).unwrap_or(u32::MAX));
    let links = source_links(app, forge_kind, repo);
    let mut body = contract.render_markdown(&RenderContext {
        session: &id,
        version,
        base: &base,
        links: &links,
        bot_mention: names.first().map_or("planwright", String::as_str),
        default_budget_usd: config_budget,
    });
    if let (Some(b), Some(json)) = (&bound, row.settings.as_deref()) {
        insert_settings(&mut body, &settings_section(b, json));
    }
    // Cancelled while the planner worked: the contract stays on record, unposted.
    let mut conn = app.db.pool.acquire().await?;
    let still_planning = sessions::get(&mut conn, &id)
        .await?
        .is_some_and(|s| s.state == SessionState::Planning);
    drop(conn);
    if !still_planning {
        info!(session = %id, "session ended while planning; contract not posted");
        return Ok(());
    }
    let posted = match find_own_comment(forge, repo, issue_number, |b| {
        ContractMarker::find(b).is_some_and(|m| m.session == id && m.version == version)
    })
    .await?
    {
        Some(c) => c,
        None => forge.create_comment(repo, issue_number, &body).await?,
    };

    let mut tx = app.db.writer.begin().await?;
    sessions::set_contract_comment(
        &mut tx,
        &id,
        row.version,
        &posted.id.0.to_string(),
        None,
        posted.created_at,
    )
    .await?;
    let moved = sessions::move_state(
        &mut tx,
        &id,
        SessionState::Planning,
        SessionState::AwaitingApproval,
        None,
    )
    .await?;
    if !moved {
        // Cancelled while planning: the contract stays on record, nothing else happens.
        tx.commit().await?;
        return Ok(());
    }
    let superseded = sessions::supersede_before(&mut tx, &id, row.version).await?;
    audit::append(
        &mut tx,
        &audit::Entry {
            actor: "planwright",
            action: "contract.posted",
            session: Some(id.as_str()),
            delivery: None,
            detail: serde_json::json!({ "version": row.version, "sha256": row.sha256, "comment": posted.id }),
        },
    )
    .await?;
    tx.commit().await?;

    for old in superseded {
        let Some(comment) = old
            .comment_id
            .as_deref()
            .and_then(|c| c.parse::<i64>().ok())
        else {
            continue;
        };
        mark_superseded(forge, repo, issue_number, CommentId(comment), &old, version).await?;
    }
    let mut conn = app.db.pool.acquire().await?;
    if let Some(now) = sessions::get(&mut conn, &id).await? {
        drop(conn);
        update_status(
            app,
            forge,
            &now,
            SessionState::AwaitingApproval,
            &format!(
                "Build contract v{version} is posted below. A maintainer can `/approve` it, ask for `/revise <changes>`, or `/cancel`.{}",
                if edited {
                    "\n\n**The issue was edited after planwright was asked to start**: this contract is planned from the text as it was then. Use `/plan` to plan from the current text."
                } else {
                    ""
                }
            ),
        )
        .await?;
    }
    Ok(())
}

/// Puts a banner on an older contract's comment and folds it away where the forge can.
async fn mark_superseded(
    forge: &dyn Forge,
    repo: &RepoName,
    issue: IssueNumber,
    comment: CommentId,
    old: &sessions::ContractRow,
    new: ContractVersion,
) -> Result<(), ForgeError> {
    let old_version = ContractVersion(u32::try_from(old.version).unwrap_or(u32::MAX));
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

/// What the contract comment says about the settings it binds, before its closing line:
/// an approver sees what will run beside the contract.
fn settings_section(b: &BoundSettings, json: &str) -> String {
    let code = |s: &str| s.replace('`', "'");
    let list = |items: &[String]| {
        if items.is_empty() {
            "none".to_owned()
        } else {
            items
                .iter()
                .map(|i| format!("`{}`", code(i)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let executor = match &b.executor_command {
        Some(line) if b.executor == "command" => format!("`command`: `{}`", code(line)),
        _ => format!("`{}`", b.executor),
    };
    let short = BoundSettings::sha256_of(json);
    format!(
        "### Repository settings\nAs the base commit holds them (`{}`, settings `{}`); approving binds these too.\n\n- executor: {executor}\n- network allowed during setup: {}\n- protected paths: {}\n- setup: {}\n- tests: {}\n",
        code(b.source.as_deref().unwrap_or("defaults")),
        &short[..12],
        list(&b.network_allow),
        list(&b.protected_paths),
        list(&b.setup),
        list(&b.test),
    )
}

/// Puts `section` before the rendered contract's closing rule (or at its end).
fn insert_settings(body: &mut String, section: &str) {
    match body.rfind("\n---\n") {
        Some(at) => body.insert_str(at + 1, &format!("{section}\n")),
        None => body.push_str(section),
    }
}

/// Runs the planner on a checkout of the base, with the settings that checkout holds
/// (the default branch may have moved on since, or a revision keeps an older base).
#[allow(clippy::too_many_arguments)]
async fn run_planner(
    app: &App,
    forge_kind: event::ForgeKind,
    forge: &dyn Forge,
    repo: &RepoName,
    session: &SessionId,
    issue: &crate::forge::Issue,
    base: &Base,
    revision: Option<(&Contract, &str)>,
) -> Result<(Contract, RepoConfig), Failure> {
    let checkout = crate::session::checkout::for_planning(
        app,
        forge_kind,
        forge,
        repo,
        issue.number,
        &issue.title,
        base,
    )
    .await?;
    let config = match RepoConfig::from_checkout(&checkout.path(), Some(forge_kind)) {
        Ok(c) => c,
        Err(e) => {
            checkout.done().await;
            return Err(Failure::User(format!(
                "The repository's settings are not valid.\n\n{e}"
            )));
        }
    };
    let config = &config;
    let budget = Budget::usd(config.budget_usd);
    let planner_model = app
        .model(
            ModelRole::Planner,
            session,
            budget,
            config.models.planner.as_ref(),
        )
        .map_err(|e| Failure::User(format!("{e:#}")))?;
    let scout_model = app
        .model(
            ModelRole::Scout,
            session,
            budget,
            config.models.scout.as_ref(),
        )
        .map_err(|e| Failure::User(format!("{e:#}")))?;
    let tools = RepoTools::new(&checkout.path()).map_err(Failure::from)?;
    let mut conn = app.db.pool.acquire().await?;
    let mut dossier: Dossier = match sessions::load_dossier(&mut conn, session).await? {
        Some(text) => serde_json::from_str(&text).unwrap_or_default(),
        None => Dossier::default(),
    };
    drop(conn);
    let planner = Planner {
        model: planner_model.as_ref(),
        scout_model: scout_model.as_ref(),
        tools: &tools,
        sandbox: app.sandbox.as_deref(),
        options: PlannerOptions::default(),
    };
    let request = PlanRequest {
        repo,
        issue,
        base,
        config,
        revision,
    };
    let db = app.db.clone();
    let id = session.clone();
    let mut checkpoint = move |d: &Dossier| {
        let db = db.clone();
        let id = id.clone();
        let text = serde_json::to_string(d);
        Box::pin(async move {
            let text = text?;
            let mut conn = db.writer.acquire().await?;
            sessions::save_dossier(&mut conn, &id, Some(&text)).await
        })
            as std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
    };
    let result = planner.plan(&request, &mut dossier, &mut checkpoint).await;
    checkout.done().await;
    // The next version starts its turn count afresh but keeps what was learned.
    let fresh_turns = |mut d: Dossier| {
        d.turns = 0;
        d.invalid_submissions = 0;
        d
    };
    match result {
        Ok(contract) => {
            let text = serde_json::to_string(&fresh_turns(dossier))?;
            let mut conn = app.db.writer.acquire().await?;
            sessions::save_dossier(&mut conn, session, Some(&text)).await?;
            Ok((contract, config.clone()))
        }
        Err(PlanError::Model(e)) if e.is_retryable() => {
            Err(Failure::Job(JobError::Retryable(e.into())))
        }
        Err(PlanError::Model(ModelError::BudgetExceeded { spent, limit, .. })) => {
            Err(Failure::User(format!(
                "Planning stopped: the session used {spent} of its {limit} budget. Raise `budget_usd` in the repository's settings and use `/retry`."
            )))
        }
        Err(PlanError::Model(e)) => Err(Failure::Hidden {
            public: "The planner's model call failed; the details are in planwright's audit log for the operator. Use `/retry` to try again.".to_owned(),
            detail: e.to_string(),
        }),
        Err(e @ (PlanError::TurnLimit(_) | PlanError::Invalid(..))) => {
            let text = serde_json::to_string(&fresh_turns(dossier))?;
            let mut conn = app.db.writer.acquire().await?;
            sessions::save_dossier(&mut conn, session, Some(&text)).await?;
            Err(Failure::User(format!(
                "{e}. Use `/retry` to try again or `/plan` to start over."
            )))
        }
        Err(PlanError::Checkpoint(e)) => Err(Failure::Job(JobError::Retryable(e))),
    }
}

/// Moves a planning session to Failed and says why on its status comment; `detail` is
/// kept in the audit log only.
async fn fail(
    app: &App,
    forge: &dyn Forge,
    session: &sessions::SessionRow,
    reason: &str,
    detail: Option<&str>,
) -> Result<(), JobError> {
    let id = session.id.clone();
    let mut tx = app.db.writer.begin().await?;
    let moved = sessions::move_state(
        &mut tx,
        &id,
        SessionState::Planning,
        SessionState::Failed,
        Some(reason),
    )
    .await?;
    if moved {
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: "planwright",
                action: "session.failed",
                session: Some(id.as_str()),
                delivery: None,
                detail: serde_json::json!({ "reason": reason, "detail": detail }),
            },
        )
        .await?;
    }
    tx.commit().await?;
    if moved {
        warn!(session = %id, reason, "session failed");
        update_status(app, forge, session, SessionState::Failed, reason).await?;
    }
    Ok(())
}

fn status_marker(session: &SessionId) -> String {
    format!("<!-- planwright:status {{\"session\":\"{session}\"}} -->")
}

/// Edits (or creates, once) the session's one status comment.
pub(crate) async fn update_status(
    app: &App,
    forge: &dyn Forge,
    session: &sessions::SessionRow,
    state: SessionState,
    text: &str,
) -> Result<(), JobError> {
    let id = session.id.clone();
    let repo = session.repo.clone();
    let issue = session.issue_number;
    let marker = status_marker(&id);
    let body = format!(
        "**planwright** · {}\n\n{text}\n\n{marker}",
        state.describe()
    );
    let known = session
        .status_comment_id
        .as_deref()
        .and_then(|c| c.parse::<i64>().ok())
        .map(CommentId);
    let comment = match known {
        Some(c) => Some(c),
        None => find_own_comment(forge, &repo, issue, |b| b.contains(&marker))
            .await?
            .map(|c| c.id),
    };
    let id_text = match comment {
        Some(c) => {
            match forge.edit_comment(&repo, issue, c, &body).await {
                Ok(_) => {}
                // Someone deleted it: post a new one.
                Err(ForgeError::NotFound { .. }) => {
                    let new = forge.create_comment(&repo, issue, &body).await?;
                    return store_status(app, &id, new.id).await;
                }
                Err(e) => return Err(e.into()),
            }
            c
        }
        None => forge.create_comment(&repo, issue, &body).await?.id,
    };
    if known != Some(id_text) {
        store_status(app, &id, id_text).await?;
    }
    Ok(())
}

async fn store_status(app: &App, id: &SessionId, comment: CommentId) -> Result<(), JobError> {
    let mut conn = app.db.writer.acquire().await?;
    sessions::set_status_comment(&mut conn, id, &comment.0.to_string()).await?;
    Ok(())
}

/// planwright's own comment on the issue whose body passes `test` (markers are trusted
/// only in comments planwright wrote).
pub(crate) async fn find_own_comment(
    forge: &dyn Forge,
    repo: &RepoName,
    issue: IssueNumber,
    test: impl Fn(&str) -> bool,
) -> Result<Option<crate::forge::Comment>, ForgeError> {
    for comment in forge.comments(repo, issue).await? {
        if test(&comment.body) && forge.is_own(&comment.author).await? {
            return Ok(Some(comment));
        }
    }
    Ok(None)
}

/// The web address of a comment on the issue, where the forge has a web view.
pub(crate) fn comment_url(
    links: &SourceLinks,
    issue: IssueNumber,
    comment: Option<&str>,
) -> Option<String> {
    let comment = comment?;
    match links {
        SourceLinks::GitHub { repo_url } => {
            Some(format!("{repo_url}/issues/{issue}#issuecomment-{comment}"))
        }
        SourceLinks::GitLab { project_url } => {
            Some(format!("{project_url}/-/issues/{issue}#note_{comment}"))
        }
        SourceLinks::None => None,
    }
}

/// Where evidence links point: the forge's web view of the repository.
pub(crate) fn source_links(app: &App, forge: event::ForgeKind, repo: &RepoName) -> SourceLinks {
    match forge {
        event::ForgeKind::Github => {
            let api = app.settings.github.api_url.trim_end_matches('/');
            let web = if api == "https://api.github.com" {
                "https://github.com".to_owned()
            } else {
                api.strip_suffix("/api/v3").unwrap_or(api).to_owned()
            };
            SourceLinks::GitHub {
                repo_url: format!("{web}/{repo}"),
            }
        }
        event::ForgeKind::Gitlab => match &app.settings.gitlab.url {
            Some(url) => {
                let base = url.trim_end_matches('/');
                let base = base.strip_suffix("/api/v4").unwrap_or(base);
                SourceLinks::GitLab {
                    project_url: format!("{base}/{repo}"),
                }
            }
            None => SourceLinks::None,
        },
        event::ForgeKind::Local => SourceLinks::None,
    }
}
