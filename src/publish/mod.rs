//! Publishing a finished run: the commit on the run branch (naming the issue, with the
//! approved contract and its approver as trailers), the push through git2 with the forge's
//! credentials given only to git's callback, the pull or merge request with its report,
//! and the check on the pushed commit. Every step can be repeated after a failure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tracing::Instrument;

use crate::config::repo::OnFailure;
use crate::contract::{Contract, ContractHash, ContractVersion, instruction_table};
use crate::forge::{
    CheckState, CommitCheck, Forge, ForgeError, NewPullRequest, PullRequest, truncate_with_note,
};
use crate::git::push;
use crate::git::push::PushError;
use crate::git::{Author, Workspace, WorkspaceError};
use crate::ids::{CommentId, CommitSha, IssueNumber, RepoName, SessionId};
use crate::jobs::JobError;
use crate::markdown;
use crate::markdown::GITHUB_TEXT_LIMIT;
use crate::store::{Db, model_usage};

/// The name of the check planwright sets on the commits it pushes.
pub const CHECK_NAME: &str = "planwright";
/// The first line of a commit message, as git tools show it without cutting.
const SUBJECT_MAX: usize = 72;

/// One verification command: what it reported before the change and after it, in a few
/// words each ("12 passed, 1 failed"). `baseline` is `None` where the command could not
/// run before the change (a test the run added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationRow {
    pub command: String,
    pub baseline: Option<String>,
    pub after: String,
}

/// What verification found, as the pull request and the check show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerificationSummary {
    pub rows: Vec<VerificationRow>,
    /// Markdown: what the added and changed tests prove on the base code; empty when
    /// no proof was made.
    pub proof: String,
    /// Markdown about the tests still failing after the change; empty when none are.
    pub failing: String,
    /// The full distilled report (markdown): the check's text, and on GitLab, where a
    /// commit status holds one line, part of the merge request description.
    pub details: String,
    /// Which of the repository's path globs chose which commands (markdown); empty when
    /// its `test` is a plain list.
    pub chosen: String,
}

/// The reviewer's verdict on the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewSummary {
    pub accepted: bool,
    /// What the reviewer found, markdown.
    pub findings: String,
}

/// How the run ended; a failed run is published as `on_failure` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunResult {
    Succeeded,
    /// `reason` names what failed in its first line ("Verification failed: …", "Not
    /// accepted by the reviewer: …"): it is the check's title as it is.
    Failed {
        reason: String,
    },
    /// The executor stopped before finishing (`reason` says why): its unfinished change,
    /// never verified, is kept as a draft or on a branch of its own.
    Unfinished {
        reason: String,
    },
}

impl RunResult {
    fn passed(&self) -> bool {
        match self {
            RunResult::Succeeded => true,
            RunResult::Failed { .. } | RunResult::Unfinished { .. } => false,
        }
    }
}

/// The branches unfinished work is kept on with `on_failure: comment`:
/// `planwright/<issue>-partial-<n>`.
pub fn partial_branch(issue: IssueNumber, n: u32) -> String {
    format!("planwright/{issue}-partial-{n}")
}

/// How many `-partial-<n>` branches are tried before giving up: each one holds other work.
const PARTIAL_BRANCHES_MAX: u32 = 100;

/// Everything a publication says about a run.
#[derive(Debug, Clone)]
pub struct Publication<'a> {
    /// The most bytes the pull request's body may hold (`Forge::pull_body_limit`).
    pub body_limit: usize,
    /// Whether the check carries the full report, so the body leaves it out
    /// (`Forge::check_carries_report`).
    pub check_carries_report: bool,
    pub repo: &'a RepoName,
    pub issue: IssueNumber,
    pub session: &'a SessionId,
    pub contract: &'a Contract,
    pub version: ContractVersion,
    pub hash: &'a ContractHash,
    /// The comment the approved contract was posted in.
    pub contract_url: Option<&'a str>,
    pub approved_by: &'a str,
    /// The branch the pull request asks to merge into.
    pub base_branch: &'a str,
    pub verification: &'a VerificationSummary,
    /// Where the checks ran (an image by digest, or the planwright host's tools), in one
    /// line of markdown; the verification section opens with it.
    pub environment: &'a str,
    pub review: Option<&'a ReviewSummary>,
    /// Executor attempts used, and allowed.
    pub attempts: u32,
    pub max_attempts: u32,
    pub result: &'a RunResult,
    pub on_failure: OnFailure,
    /// Author and committer of the commit: planwright's bot identity.
    pub author: &'a Author,
    /// What each rung of the contract's executor ladder spent, in the order climbed; the
    /// last produced the result. Empty without a ladder.
    pub rungs: &'a [RungSpend],
}

/// What one rung of an executor ladder spent on a run: its attempts, and their model
/// calls' tokens and cost.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RungSpend {
    /// The rung's place on the contract's ladder, from 1.
    pub rung: usize,
    pub executor: String,
    pub model: String,
    pub attempts: u32,
    pub tokens: i64,
    pub cost_microusd: i64,
}

/// The ladder's part of a pull request or report: which rung produced the result and what
/// each rung climbed cost. Empty without a ladder.
pub fn ladder_section(rungs: &[RungSpend]) -> String {
    let Some(last) = rungs.last() else {
        return String::new();
    };
    let mut out = String::from("### Escalation ladder\n\n");
    let _ = writeln!(
        out,
        "This result was produced on rung {} ({} · {}).\n",
        last.rung,
        markdown::code(&last.executor, false),
        markdown::code(&last.model, false)
    );
    out.push_str(
        "| rung | executor | model | attempts | tokens | cost |\n|---|---|---|---|---|---|\n",
    );
    for r in rungs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | ${:.4} |",
            r.rung,
            markdown::code(&r.executor, false),
            markdown::code(&r.model, false),
            r.attempts,
            r.tokens,
            r.cost_microusd as f64 / 1_000_000.0
        );
    }
    out.push('\n');
    out
}

/// Where the run was published.
#[derive(Debug, Clone)]
pub enum Published {
    Pull {
        commit: CommitSha,
        pull: PullRequest,
    },
    /// A failed run with `on_failure: comment`: the report is on the issue, nothing pushed.
    Comment { comment: CommentId },
    /// Unfinished work with `on_failure: comment`: pushed to a branch of its own, with
    /// the forge's page comparing it to the base branch when the forge has one.
    Branch {
        branch: String,
        commit: CommitSha,
        url: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("Cannot publish the run branch `{branch}`: the run changed nothing")]
    NothingChanged { branch: String },
    #[error(transparent)]
    Push(#[from] PushError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl PublishError {
    pub fn is_retryable(&self) -> bool {
        match self {
            PublishError::Push(e) => e.failure.is_retryable(),
            PublishError::Forge(e) => e.is_retryable(),
            PublishError::Workspace(WorkspaceError::Fetch { refused, .. }) => !refused,
            PublishError::NothingChanged { .. }
            | PublishError::Workspace(WorkspaceError::BadCommit { .. })
            | PublishError::Workspace(WorkspaceError::Internal(_))
            | PublishError::Internal(_) => false,
        }
    }
}

impl From<PublishError> for JobError {
    fn from(e: PublishError) -> Self {
        // The forge's own error decides, a rate limit's wait included.
        if let PublishError::Forge(e) = e {
            return JobError::from(e);
        }
        if e.is_retryable() {
            JobError::Retryable(e.into())
        } else {
            JobError::Permanent(e.into())
        }
    }
}

/// Publishes the run in `workspace`. A successful run, or a failed one with
/// `on_failure: draft_pr`, is committed, pushed and opened as a pull request (a draft
/// when failed) with the check set on its commit; a failed one with `on_failure:
/// comment` only reports on the issue. Called again after any failure it finishes the
/// job without a second commit, pull request or comment.
pub async fn publish(
    forge: &dyn Forge,
    db: &Db,
    workspace: &Workspace,
    publication: &Publication<'_>,
) -> Result<Published, PublishError> {
    let p = publication;
    let span =
        tracing::info_span!("publish", repo = %p.repo, issue = %p.issue, session = %p.session);
    publish_in_span(forge, db, workspace, p)
        .instrument(span)
        .await
}

async fn publish_in_span(
    forge: &dyn Forge,
    db: &Db,
    workspace: &Workspace,
    p: &Publication<'_>,
) -> Result<Published, PublishError> {
    if let (RunResult::Unfinished { .. }, OnFailure::Comment) = (p.result, p.on_failure) {
        return keep_on_own_branch(forge, workspace, p).await;
    }
    if !opens_a_pull(p.result, p.on_failure) {
        return publish_pushed(forge, db, None, p).await;
    }
    let message = commit_message(p);
    let (commit, pushed) = push_result(forge, workspace, p.repo, (&message, p.author)).await?;
    let pushed = Pushed {
        branch: workspace.branch(),
        commit: &commit,
        moved: pushed == push::Pushed::Moved,
    };
    publish_pushed(forge, db, Some(pushed), p).await
}

/// Whether a result is published as a pull request (and so pushed first): one that
/// passed, or one that did not with `on_failure: draft_pr`.
pub fn opens_a_pull(result: &RunResult, on_failure: OnFailure) -> bool {
    matches!(
        (result, on_failure),
        (RunResult::Succeeded, _) | (_, OnFailure::DraftPr)
    )
}

/// Pushes `workspace`'s result to its branch in `repo`, committing it first (with this
/// message and author) unless it was committed before verification: whatever publishing
/// is left to do can then be done from the forge alone.
pub async fn push_result(
    forge: &dyn Forge,
    workspace: &Workspace,
    repo: &RepoName,
    signature: (&str, &Author),
) -> Result<(CommitSha, push::Pushed), PublishError> {
    let commit = result_commit(workspace, signature).await?;
    Ok((commit, push_branch(forge, workspace, repo).await?))
}

/// The commit holding `workspace`'s result: the run branch's tip when the result was
/// committed before verification (committing again would take in what the checks
/// wrote), else a commit made now with this message and author.
pub async fn result_commit(
    workspace: &Workspace,
    (message, author): (&str, &Author),
) -> Result<CommitSha, PublishError> {
    let tip = workspace.tip().await?;
    let commit = if tip != workspace.base() {
        tip
    } else {
        workspace.commit(message, author).await?
    };
    if commit == workspace.base() {
        return Err(PublishError::NothingChanged {
            branch: workspace.branch().to_owned(),
        });
    }
    Ok(commit)
}

/// Pushes `workspace`'s run branch to `repo`, never by force.
pub async fn push_branch(
    forge: &dyn Forge,
    workspace: &Workspace,
    repo: &RepoName,
) -> Result<push::Pushed, PublishError> {
    let remote = forge.git_remote(repo).await?;
    let pushed = match push::push(&workspace.git_dir(), &remote, workspace.branch()).await {
        // The token may have been revoked since it was handed out: renewed once.
        Err(e) if e.failure == push::PushFailure::Refused => {
            tracing::warn!(error = %e, "git refused the credentials; pushing once more with renewed ones");
            let renewed = forge.renewed_git_remote(repo).await?;
            push::push(&workspace.git_dir(), &renewed, workspace.branch()).await?
        }
        pushed => pushed?,
    };
    tracing::info!(branch = workspace.branch(), "pushed");
    Ok(pushed)
}

/// Whether `branch` in `repo` holds exactly `commit` on the forge, asked through a scratch
/// repository at `scratch` (made there if missing): what a worker without the checkout
/// checks before it publishes a recorded result.
pub async fn branch_holds(
    forge: &dyn Forge,
    repo: &RepoName,
    branch: &str,
    commit: &CommitSha,
    scratch: &std::path::Path,
) -> Result<bool, PublishError> {
    let dir = scratch.to_owned();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir)?;
        git2::Repository::init_bare(&dir)
            .map(drop)
            .map_err(std::io::Error::other)
    })
    .await
    .map_err(|e| PublishError::Internal(anyhow::anyhow!("the scratch task failed: {e}")))?
    .map_err(|e| PublishError::Internal(e.into()))?;
    let remote = forge.git_remote(repo).await?;
    let head = push::remote_head(scratch, &remote, branch).await?;
    Ok(head.as_ref() == Some(commit))
}

/// A result's commit on the forge: its branch, and whether the push that put it there
/// just moved the branch (so no check of ours can be on it yet).
pub struct Pushed<'a> {
    pub branch: &'a str,
    pub commit: &'a CommitSha,
    pub moved: bool,
}

/// The rest of publishing once the result is on the forge (`pushed`; `None` for a
/// failed run reported on the issue, which pushes nothing): the pull request, its draft
/// state and body, and the check on the commit. Needs no checkout, so any worker can
/// finish what another began.
pub async fn publish_pushed(
    forge: &dyn Forge,
    db: &Db,
    pushed: Option<Pushed<'_>>,
    p: &Publication<'_>,
) -> Result<Published, PublishError> {
    let usage = model_usage::list_by_session(db, p.session).await?;
    let mut cost = cost_table(&usage);
    cost.push_str(&rounds_table(
        &model_usage::cost_by_round(db, p.session).await?,
    ));
    let Some(Pushed {
        branch,
        commit,
        moved,
    }) = pushed.filter(|_| opens_a_pull(p.result, p.on_failure))
    else {
        return report_on_issue(forge, p, &cost).await;
    };
    let failed = !p.result.passed();
    let body = pull_body(p, &cost);
    let title = subject(p);
    let pull = forge
        .find_or_create_pull(
            p.repo,
            &NewPullRequest {
                head_branch: branch,
                base_branch: p.base_branch,
                title: &title,
                body: &body,
                draft: failed,
            },
        )
        .await?;
    // Found from an earlier attempt, it carries that attempt's report.
    let pull = if pull.body == body {
        pull
    } else {
        forge.update_pull_body(p.repo, pull.number, &body).await?
    };
    // And that attempt's state: a draft of a failed round is ready once a round passes,
    // and a round that fails makes it a draft again.
    // A courtesy, not worth the publication: a repository without drafts (or a pull
    // request closed meanwhile) keeps its state, and the check and report still land.
    let pull = if pull.draft == failed {
        pull
    } else {
        match forge.set_draft(p.repo, &pull, failed).await {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!(error = %e, pull = %pull.number, draft = failed, "could not change the pull request's draft state");
                pull
            }
        }
    };

    let state = match p.result {
        RunResult::Succeeded => CheckState::Success,
        // Never green: a failed run, or an unfinished change that was not verified.
        RunResult::Failed { .. } | RunResult::Unfinished { .. } => CheckState::Failure,
    };
    let check_title = check_title(p.result);
    let summary = check_summary(p);
    forge
        .set_check(
            p.repo,
            &CommitCheck {
                name: CHECK_NAME,
                head_sha: commit,
                state,
                title: &check_title,
                summary: &summary,
                text: &p.verification.details,
                details_url: Some(&pull.url),
                // Pushed just now, so no check of ours can be on it yet.
                new_commit: moved,
            },
        )
        .await?;
    tracing::info!(pull = %pull.number, "published");
    Ok(Published::Pull {
        commit: commit.clone(),
        pull,
    })
}

/// Pushes the unfinished result to the first `planwright/<issue>-partial-<n>` branch that
/// does not exist yet or already holds exactly this commit (a repeated job), so a branch
/// holding other work is never moved.
async fn keep_on_own_branch(
    forge: &dyn Forge,
    workspace: &Workspace,
    p: &Publication<'_>,
) -> Result<Published, PublishError> {
    keep_on_partial_branch(forge, workspace, p.repo, p.issue, p.base_branch).await
}

/// Pushes `workspace`'s committed result to the first `planwright/<issue>-partial-<n>`
/// branch that is free or already holds it: where a failed attempt's work is kept when the
/// next attempt starts again from the base, as unfinished work is.
pub async fn keep_on_partial_branch(
    forge: &dyn Forge,
    workspace: &Workspace,
    repo: &RepoName,
    issue: IssueNumber,
    base_branch: &str,
) -> Result<Published, PublishError> {
    let p = (repo, issue, base_branch);
    let commit = workspace.tip().await?;
    if commit == workspace.base() {
        return Err(PublishError::NothingChanged {
            branch: workspace.branch().to_owned(),
        });
    }
    let remote = forge.git_remote(p.0).await?;
    let git_dir = workspace.git_dir();
    for n in 1..=PARTIAL_BRANCHES_MAX {
        let branch = partial_branch(p.1, n);
        match push::remote_head(&git_dir, &remote, &branch).await? {
            Some(there) if there != commit => continue,
            Some(_) => {}
            None => {
                push::push_commit(&git_dir, &remote, &commit, &branch).await?;
            }
        }
        tracing::info!(branch, commit = %commit, "kept the unfinished change");
        let url = forge.web_links(p.0).compare(p.2, &branch);
        return Ok(Published::Branch {
            branch,
            commit,
            url,
        });
    }
    Err(PublishError::Internal(anyhow::anyhow!(
        "Cannot keep the unfinished change: the branches {} to {} all hold other work",
        partial_branch(p.1, 1),
        partial_branch(p.1, PARTIAL_BRANCHES_MAX)
    )))
}

/// The check's title (a GitLab commit status's description): a failed run's reason names
/// what failed (verification, a contract command, the reviewer), so it is the title as it
/// is, and the summary and the pull request say the same.
pub fn check_title(result: &RunResult) -> String {
    match result {
        RunResult::Succeeded => "Verification passed".to_owned(),
        RunResult::Failed { reason } => first_line(reason).to_owned(),
        RunResult::Unfinished { reason } => format!("Did not finish: {}", first_line(reason)),
    }
}

/// `Fix #7: <the contract's summary>`, cut to one short line.
fn subject(p: &Publication<'_>) -> String {
    subject_for(p.issue, p.contract)
}

fn subject_for(issue: IssueNumber, contract: &Contract) -> String {
    let prefix = format!("Fix #{issue}: ");
    let room = SUBJECT_MAX.saturating_sub(prefix.chars().count());
    format!("{prefix}{}", clip_line(first_line(&contract.summary), room))
}

fn commit_message(p: &Publication<'_>) -> String {
    result_message(p.issue, p.contract, p.version, p.hash, p.approved_by)
}

/// The result commit's message: the subject naming the issue, the goal, and trailers for
/// the approved contract and its approver.
pub fn result_message(
    issue: IssueNumber,
    contract: &Contract,
    version: ContractVersion,
    hash: &ContractHash,
    approved_by: &str,
) -> String {
    let mut message = subject_for(issue, contract);
    let goal = contract.change.goal.trim();
    if !goal.is_empty() {
        let _ = write!(message, "\n\n{goal}");
    }
    // Trailers: the last paragraph, one `Key: value` a line.
    let _ = write!(
        message,
        "\n\nPlanwright-Contract: v{} sha256:{}\nApproved-by: {}\n",
        version,
        hash,
        first_line(approved_by)
    );
    message
}

/// The body of the pull request: what and why, the contract, verification, review, cost,
/// attempts and `Closes #N`, within the forge's limit. Only the long free-text parts
/// (failing tests, the full report) are cut to fit, so the closing line always stays.
fn pull_body(p: &Publication<'_>, cost: &str) -> String {
    let limit = p.body_limit;
    let details = if p.check_carries_report {
        ""
    } else {
        p.verification.details.as_str()
    };
    let render = |failing: &str, details: &str| {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<!-- planwright:pull {} -->",
            serde_json::json!({
                "session": p.session.as_str(),
                "version": p.version.0,
                "sha256": p.hash.as_str(),
            })
        );
        match p.result {
            RunResult::Succeeded => {}
            RunResult::Failed { reason } => {
                let _ = writeln!(
                    out,
                    "> [!WARNING]\n> This run did not pass: {}. It is a draft for a maintainer to look at.\n",
                    first_line(reason)
                );
            }
            RunResult::Unfinished { reason } => {
                let quoted: Vec<String> = reason.trim().lines().map(|l| format!("> {l}")).collect();
                let _ = writeln!(
                    out,
                    "> [!WARNING]\n> This is unfinished work, a draft for a maintainer to look at or for `/retry continue` on the issue to carry on from. It stopped because:\n>\n{}\n",
                    quoted.join("\n")
                );
            }
        }
        out.push_str(&what_and_why(p));
        out.push_str(&instruction_table(
            &p.contract.instructions,
            "### Instructions the executor was given",
        ));
        if !p.contract.instructions.is_empty() {
            out.push('\n');
        }
        out.push_str(&verification_section(p, failing));
        if !details.is_empty() {
            let _ = writeln!(
                out,
                "<details><summary>Full test report</summary>\n\n{details}\n\n</details>\n"
            );
        }
        out.push_str(&review_section(p));
        let _ = writeln!(out, "### Cost\n\n{cost}");
        out.push_str(&ladder_section(p.rungs));
        let _ = writeln!(
            out,
            "Attempts: {} of {}.\n\nCloses #{}",
            p.attempts, p.max_attempts, p.issue
        );
        out
    };
    let whole = render(&p.verification.failing, details);
    if whole.len() <= limit {
        return whole;
    }
    // One-byte stand-ins keep the frames around each part (left out when a part is
    // empty) in the count; the note `truncate_with_note` adds is inside each part's share.
    let fixed = render("x", if details.is_empty() { "" } else { "x" }).len();
    let room = limit.saturating_sub(fixed);
    let failing_room = if details.is_empty() { room } else { room / 2 };
    let failing = truncate_with_note(&p.verification.failing, failing_room);
    let details = truncate_with_note(details, room.saturating_sub(failing.len()));
    let body = render(&failing, &details);
    // Beyond what a body can hold even without the free text: cut the end as a last resort.
    truncate_with_note(&body, limit).into_owned()
}

/// The planner's and the reviewer's text is escaped as in the contract comment
/// ([`markdown`]), so a pull request shows all of it and hides nothing from its reviewers.
fn what_and_why(p: &Publication<'_>) -> String {
    let mut out = String::from("### What and why\n\n");
    let _ = writeln!(out, "{}\n", markdown::inline(&p.contract.summary));
    let goal = p.contract.change.goal.trim();
    if !goal.is_empty() {
        let _ = writeln!(out, "**Goal:** {}\n", markdown::inline(goal));
    }
    let contract = format!("build contract v{} (`{}`)", p.version, p.hash.short());
    let linked = match p.contract_url {
        Some(url) => format!("[{contract}]({url})"),
        None => contract,
    };
    let _ = writeln!(
        out,
        "Implements the approved {linked}, approved by @{}.\n",
        first_line(p.approved_by)
    );
    out
}

fn verification_section(p: &Publication<'_>, failing: &str) -> String {
    let mut out = String::from("### Verification\n\n");
    if !p.environment.is_empty() {
        let _ = writeln!(out, "{}\n", p.environment.trim());
    }
    let v = p.verification;
    if !v.chosen.trim().is_empty() {
        let _ = writeln!(out, "{}\n", v.chosen.trim());
    }
    if v.rows.is_empty() {
        out.push_str("No verification commands ran.\n\n");
    } else {
        out.push_str("| command | baseline | after |\n|---|---|---|\n");
        for row in &v.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                markdown::code(&row.command, true),
                row.baseline.as_deref().map_or("—".to_owned(), cell),
                cell(&row.after)
            );
        }
        out.push('\n');
    }
    if !v.proof.trim().is_empty() {
        let _ = writeln!(out, "{}\n", v.proof.trim_end());
    }
    if !failing.trim().is_empty() {
        let _ = writeln!(out, "{}\n", failing.trim_end());
    }
    out
}

fn review_section(p: &Publication<'_>) -> String {
    let mut out = String::from("### Review\n\n");
    match p.review {
        Some(review) => {
            let verdict = if review.accepted {
                "Accepted"
            } else {
                "Not accepted"
            };
            let _ = writeln!(out, "**{verdict}** by the reviewer.\n");
            if !review.findings.trim().is_empty() {
                let _ = writeln!(out, "{}", markdown::fenced(&review.findings, ""));
            }
        }
        None => out.push_str("No review was made.\n\n"),
    }
    out
}

/// The check's summary: the verdict and the verification table; the full report goes in
/// the check's text.
fn check_summary(p: &Publication<'_>) -> String {
    let mut out = String::new();
    match p.result {
        RunResult::Succeeded => {}
        RunResult::Failed { reason } => {
            let _ = writeln!(out, "**Failed:** {}\n", reason.trim());
        }
        RunResult::Unfinished { reason } => {
            let _ = writeln!(out, "**Did not finish:** {}\n", reason.trim());
        }
    }
    out.push_str(&verification_section(p, ""));
    out.push_str(&review_section(p));
    out
}

/// Model cost by role and model, from the session's usage rows.
fn cost_table(rows: &[model_usage::UsageRow]) -> String {
    if rows.is_empty() {
        return "No model calls were recorded.\n".to_owned();
    }
    #[derive(Default)]
    struct Sum {
        calls: u64,
        input: i64,
        output: i64,
        cost: i64,
    }
    let mut sums: BTreeMap<(&str, String), Sum> = BTreeMap::new();
    for row in rows {
        let sum = sums
            .entry((row.role.as_str(), format!("{}:{}", row.provider, row.model)))
            .or_default();
        sum.calls += 1;
        sum.input += row.input_tokens + row.cache_read_tokens + row.cache_write_tokens;
        sum.output += row.output_tokens;
        sum.cost += row.cost_microusd;
    }
    let mut out = String::from("| role | model | calls | input tokens | output tokens | cost |\n");
    out.push_str("|---|---|---:|---:|---:|---:|\n");
    let mut total = 0;
    for ((role, model), sum) in &sums {
        total += sum.cost;
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} |",
            cell(role),
            cell(model),
            sum.calls,
            sum.input,
            sum.output,
            dollars(sum.cost)
        );
    }
    let _ = writeln!(out, "| **total** | | | | | **{}** |", dollars(total));
    out
}

/// What each round cost, when there was more than one: planning a version, then carrying
/// it out and reviewing it.
fn rounds_table(rows: &[model_usage::RoundCost]) -> String {
    let mut rounds: BTreeMap<Option<ContractVersion>, (i64, i64)> = BTreeMap::new();
    for row in rows {
        let round = rounds.entry(row.version).or_default();
        if row.planning {
            round.0 += row.cost_microusd;
        } else {
            round.1 += row.cost_microusd;
        }
    }
    if rounds.len() < 2 {
        return String::new();
    }
    let mut out = String::from(
        "
| round | planning | carrying out and review | total |
|---|---:|---:|---:|
",
    );
    for (version, (planning, running)) in &rounds {
        let name = version.map_or_else(|| "not yet a contract".to_owned(), |v| format!("v{v}"));
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} |",
            dollars(*planning),
            dollars(*running),
            dollars(planning + running)
        );
    }
    out
}

/// Micro-dollars as `$0.0123`, rounded to the nearest hundredth of a cent.
fn dollars(microusd: i64) -> String {
    let units = (microusd.max(0) + 50) / 100;
    format!("${}.{:04}", units / 10_000, units % 10_000)
}

/// Text for one table cell: on one line, with the column separator escaped (GitHub reads
/// `\|` as a pipe even inside a code span).
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn first_line(text: &str) -> &str {
    text.trim().lines().next().unwrap_or_default().trim()
}

/// At most `max` characters, ending with `…` when cut.
fn clip_line(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The report of a failed run as an issue comment, edited in place when an earlier
/// attempt already posted it (found by its marker).
async fn report_on_issue(
    forge: &dyn Forge,
    p: &Publication<'_>,
    cost: &str,
) -> Result<Published, PublishError> {
    let marker = format!(
        "<!-- planwright:report {} -->",
        serde_json::json!({
            "session": p.session.as_str(),
            "version": p.version.0,
            "sha256": p.hash.as_str(),
        })
    );
    let reason = match p.result {
        RunResult::Failed { reason } | RunResult::Unfinished { reason } => first_line(reason),
        RunResult::Succeeded => "",
    };
    let mut body = format!("{marker}\nThe run did not pass: {reason}. Nothing was pushed.\n\n");
    body.push_str(&what_and_why(p));
    let details = &p.verification.details;
    let mut rest = String::new();
    rest.push_str(&review_section(p));
    let _ = writeln!(
        rest,
        "### Cost\n\n{cost}\n{}Attempts: {} of {}.",
        ladder_section(p.rungs),
        p.attempts,
        p.max_attempts
    );
    let mut middle = verification_section(p, &p.verification.failing);
    if !details.is_empty() {
        let _ = writeln!(
            middle,
            "<details><summary>Full test report</summary>\n\n{details}\n\n</details>\n"
        );
    }
    let room = GITHUB_TEXT_LIMIT.saturating_sub(body.len() + rest.len());
    body.push_str(&truncate_with_note(&middle, room));
    body.push_str(&rest);

    let existing = forge
        .comments(p.repo, p.issue)
        .await?
        .into_iter()
        .find(|c| c.body.starts_with(&marker));
    let comment = match existing {
        Some(c) if c.body == body => c,
        Some(c) => forge.edit_comment(p.repo, p.issue, c.id, &body).await?,
        None => forge.create_comment(p.repo, p.issue, &body).await?,
    };
    Ok(Published::Comment {
        comment: comment.id,
    })
}

#[cfg(test)]
mod round_tests {
    use super::*;
    use model_usage::RoundCost;

    #[test]
    fn each_round_shows_its_planning_and_its_run_once_there_are_two() {
        let row = |version, planning, cost| RoundCost {
            version: Some(ContractVersion(version)),
            planning,
            cost_microusd: cost,
        };
        assert_eq!(
            rounds_table(&[row(1, true, 10_000), row(1, false, 5_000)]),
            ""
        );
        let table = rounds_table(&[
            row(1, true, 10_000),
            row(1, false, 5_000),
            row(2, true, 20_000),
            row(2, false, 1_000),
        ]);
        assert_eq!(
            table,
            "\n| round | planning | carrying out and review | total |\n|---|---:|---:|---:|\n\
             | v1 | $0.0100 | $0.0050 | $0.0150 |\n| v2 | $0.0200 | $0.0010 | $0.0210 |\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_while_publishing_waits_for_the_reset() {
        let limited = PublishError::Forge(ForgeError::RateLimited {
            what: "POST /repos/acme/widgets/pulls".into(),
            retry_after: Some(std::time::Duration::from_secs(1800)),
        });
        assert_eq!(
            JobError::from(limited).rate_limit_wait(),
            Some(std::time::Duration::from_secs(1800))
        );
    }

    fn contract() -> Contract {
        Contract::from_value(serde_json::json!({
            "summary": "Parsing a config with a trailing comma panics, and this summary goes on for longer than a subject line may.\nSecond line.",
            "diagnosis": {"hypothesis": "h", "evidence": [{"path": "src/p.rs", "note": "n"}]},
            "change": {"goal": "Accept a trailing comma.", "files": [{"path": "src/p.rs", "action": "modify", "why": "w"}]},
            "verification": {"commands": ["cargo test"]},
            "routing": {"risk": "low"}
        }))
        .unwrap()
    }

    #[test]
    fn a_long_report_is_cut_and_the_closing_line_stays() {
        let contract = contract();
        let hash = ContractHash::parse(&"ab".repeat(32)).unwrap();
        let (repo, session) = (RepoName::parse("o/r").unwrap(), SessionId::generate());
        let author = Author {
            name: "planwright".into(),
            email: "planwright@example.com".into(),
        };
        let verification = VerificationSummary {
            rows: vec![],
            proof: String::new(),
            failing: "é failing test\n".repeat(20_000),
            details: "x".repeat(2_000_000),
            chosen: String::new(),
        };
        let result = RunResult::Failed {
            reason: "tests fail".into(),
        };
        // GitHub's check run carries the report; GitLab's (and a local) body holds it.
        for (forge, limit, check_carries_report) in [
            ("github", GITHUB_TEXT_LIMIT, true),
            ("gitlab", crate::forge::gitlab::BODY_LIMIT, false),
        ] {
            let p = Publication {
                body_limit: limit,
                check_carries_report,
                repo: &repo,
                issue: IssueNumber(12),
                session: &session,
                contract: &contract,
                version: ContractVersion(1),
                hash: &hash,
                contract_url: None,
                approved_by: "octocat",
                base_branch: "main",
                verification: &verification,
                environment: "",
                review: None,
                attempts: 3,
                max_attempts: 3,
                result: &result,
                on_failure: OnFailure::DraftPr,
                author: &author,
                rungs: &[],
            };
            let body = pull_body(&p, "cost table\n");
            assert!(body.len() <= limit, "{forge}: {}", body.len());
            assert!(body.len() > limit - 200, "{forge}: the room is used");
            assert!(body.trim_end().ends_with("Closes #12"), "{forge}");
            assert!(body.contains("more bytes not shown."), "{forge}");
            assert!(body.contains("build contract v1 (`abababababab`)"));

            let message = commit_message(&p);
            let subject = message.lines().next().unwrap();
            assert!(
                subject.starts_with("Fix #12: Parsing a config"),
                "{subject}"
            );
            assert!(subject.ends_with('…') && subject.chars().count() == SUBJECT_MAX);
            assert!(message.ends_with(&format!(
                "\n\nPlanwright-Contract: v1 sha256:{hash}\nApproved-by: octocat\n"
            )));
        }
    }

    #[test]
    fn dollars_round_to_a_hundredth_of_a_cent() {
        assert_eq!(dollars(0), "$0.0000");
        assert_eq!(dollars(123_456), "$0.1235");
        assert_eq!(dollars(5_000_000), "$5.0000");
        assert_eq!(dollars(49), "$0.0000");
    }

    #[test]
    fn cells_stay_on_one_line_and_keep_their_pipes() {
        assert_eq!(cell("cargo test | tee\nout"), "cargo test \\| tee out");
    }
}
