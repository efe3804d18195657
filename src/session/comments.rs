//! Every text a session posts for people to read: replies to commands, the status comment's
//! lines and the reasons a session fails. Named here, so a change of wording is one place
//! and a reviewer sees the bot's whole voice at once.

use std::fmt::Display;

use crate::config::environment::Choice;
use crate::config::repo::{BoundSettings, TestCommands};
use crate::contract::ContractVersion;
use crate::environment::{PullError, PullErrorKind};
use crate::ids::{IssueNumber, Permission, SessionId};
use crate::store::model_usage::Budget;
use crate::store::state::SessionState;

/// What a public issue is told about an internal failure.
pub(super) const SEE_AUDIT: &str = "the details are in planwright's audit log for the operator";

/// A reply to the person who wrote a command.
pub(super) fn reply_to(login: &str, text: &str) -> String {
    format!("@{login}: {text}")
}

/// The whole body of the session's one status comment.
pub(super) fn status_body(state: SessionState, text: &str, session: &SessionId) -> String {
    format!(
        "**planwright** · {}\n\n{text}\n\n{}",
        state.describe(),
        status_marker(session)
    )
}

/// What finds the status comment again; trusted only in planwright's own comments.
pub(super) fn status_marker(session: &SessionId) -> String {
    format!("<!-- planwright:status {{\"session\":\"{session}\"}} -->")
}

/// The status line of a session whose work waits for the forge's rate limit.
pub(super) fn waiting_for_rate_limit(
    forge: crate::event::ForgeKind,
    until: chrono::DateTime<chrono::Utc>,
    wait: std::time::Duration,
) -> String {
    let forge = match forge {
        crate::event::ForgeKind::Github => "GitHub",
        crate::event::ForgeKind::Gitlab => "GitLab",
        crate::event::ForgeKind::Local => "the forge",
    };
    let minutes = wait.as_secs().div_ceil(60);
    format!(
        "Waiting for {forge}'s rate limit, which is nearly spent: this session continues at {} (in about {minutes} minute{}). Nothing is lost meanwhile.",
        until.format("%H:%M UTC"),
        if minutes == 1 { "" } else { "s" }
    )
}

// Labels, permissions and settings.

pub(super) fn settings_invalid_cannot_start(e: &impl Display) -> String {
    format!("planwright cannot start: the repository's settings are not valid.\n\n{e}")
}

pub(super) fn settings_invalid_cannot_act(e: &impl Display) -> String {
    format!("planwright cannot act: the repository's settings are not valid.\n\n{e}")
}

pub(super) fn settings_invalid(e: &impl Display) -> String {
    format!("The repository's settings are not valid.\n\n{e}")
}

/// `doing` completes "only people with … access can …".
pub(super) fn not_permitted(
    login: &str,
    needed: Permission,
    doing: &str,
    have: Permission,
) -> String {
    format!(
        "@{login}, only people with **{needed}** access or more can {doing} here (you have **{have}**)."
    )
}

pub(super) fn doing_command(command: &impl Display) -> String {
    format!("use `{command}`")
}

pub(super) fn already_working(state: SessionState) -> String {
    format!(
        "planwright is already working on this issue (it is {}). Use `/cancel` to stop it, or `/plan` to start the planning over.",
        state.describe()
    )
}

pub(super) fn cancelled_by_unlabel(login: &str, label: &str) -> String {
    format!("Cancelled: @{login} removed the `{label}` label.")
}

// Refusals of commands.

pub(super) fn no_session(label: &str) -> String {
    format!("there is no planwright session on this issue. Add the `{label}` label to start one.")
}

pub(super) fn raced() -> String {
    "another command changed this session first.".into()
}

pub(super) fn raced_approval() -> String {
    "another command changed this session first; nothing was approved.".into()
}

pub(super) fn raced_revision() -> String {
    "another command changed this session first; the revision was not started.".into()
}

pub(super) fn nothing_to_approve(state: SessionState) -> String {
    format!(
        "there is nothing to approve right now: the session is {}.",
        state.describe()
    )
}

pub(super) fn no_posted_contract() -> String {
    "there is no posted contract to approve yet.".into()
}

/// `at` is the contract comment's address in parentheses, or empty.
pub(super) fn approval_predates_contract(version: ContractVersion, at: &str) -> String {
    format!(
        "this `/approve` was written before contract v{version}{at} was posted, so it cannot approve it. Read it and approve it with a new `/approve`."
    )
}

pub(super) fn not_the_current_version(
    asked: ContractVersion,
    current: ContractVersion,
    at: &str,
) -> String {
    format!(
        "version {asked} is not the current contract; version {current}{at} is. Approve it with `/approve`."
    )
}

pub(super) fn revise_not_awaiting(state: SessionState) -> String {
    format!(
        "a contract can be revised while it awaits approval; the session is {}.",
        state.describe()
    )
}

pub(super) fn pull_revise_not_ended(state: SessionState) -> String {
    format!(
        "the pull request can be revised once its run has ended; the session is {}.",
        state.describe()
    )
}

pub(super) fn pull_revise_other_session() -> String {
    "another planwright session is active on the issue; revise there.".into()
}

pub(super) fn replan_not_now(state: SessionState) -> String {
    format!(
        "planning can start over while the planner waits for an answer or a contract awaits approval, or after a failure; the session is {}.",
        state.describe()
    )
}

pub(super) fn retry_not_failed(state: SessionState) -> String {
    format!(
        "only a failed session can be retried; this one is {}.",
        state.describe()
    )
}

pub(super) fn no_approved_contract() -> String {
    "there is no approved contract to carry out; use `/plan` to start over.".into()
}

pub(super) fn cannot_cancel(state: SessionState) -> String {
    format!(
        "the session cannot be cancelled now: it is {}.",
        state.describe()
    )
}

// Other checks on the pull request.

pub(super) fn checks_failed(sha: &str, shown: &str) -> String {
    let short: String = sha.chars().take(12).collect();
    format!(
        "### Checks failed on {short}\n\n{shown}\nA maintainer can ask for another round with `/revise <what to change>` here; it gets these failures as evidence."
    )
}

// Questions before the plan.

/// What finds a round of questions again; trusted only in planwright's own comments.
pub(super) fn questions_marker(session: &SessionId, round: usize) -> String {
    format!("<!-- planwright:questions {{\"session\":\"{session}\",\"round\":{round}}} -->")
}

pub(super) fn questions(questions: &[String], marker: &str) -> String {
    let list: String = questions
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}. {}\n", i + 1, crate::markdown::inline(q)))
        .collect();
    format!(
        "### planwright has questions before it plans\n\nThe planner could not settle these from the issue and the code:\n\n{list}\nReply in a comment: the next comment here from someone with **triage** access or more is taken as the answer, and planning goes on from it. (`/plan` starts planning over; `/cancel` stops.)\n\n{marker}"
    )
}

pub(super) fn waiting_for_answer(count: usize) -> String {
    let what = if count == 1 {
        "a question"
    } else {
        "questions"
    };
    format!(
        "The planner asked {what} before planning (below); it waits, at no cost, for an answer from someone with triage access or more."
    )
}

pub(super) fn answer_not_permitted(login: &str, have: Permission) -> String {
    format!(
        "@{login}, thank you. Only people with **triage** access or more can answer planwright's questions (you have **{have}**), so the planner still waits for an answer."
    )
}

pub(super) fn planning_with_answer(login: &str) -> String {
    format!("Planning goes on with @{login}'s answer.")
}

// What the status comment says after a command.

pub(super) fn approved(version: ContractVersion, login: &str) -> String {
    format!("Contract v{version} approved by @{login}; executing it.")
}

/// Said after a queued run's status when runs queued earlier wait before it: empty when
/// none do. The place is as it stood at queueing; installations take turns from there.
pub(super) fn runs_ahead(ahead: i64) -> String {
    match ahead {
        ..=0 => String::new(),
        1 => "\n\nWaiting for a free run slot: 1 run was queued before it (installations take turns).".to_owned(),
        n => format!("\n\nWaiting for a free run slot: {n} runs were queued before it (installations take turns)."),
    }
}

pub(super) fn revising(version: ContractVersion, login: &str) -> String {
    format!("Revising the contract (v{version}) with feedback from @{login}.")
}

pub(super) fn revising_from_pull(version: ContractVersion, login: &str) -> String {
    format!(
        "Revising the contract (v{version}) with feedback from @{login} on the pull request; the next round continues on the same branch."
    )
}

pub(super) fn approval_blocked_by_questions(
    version: ContractVersion,
    questions: &[String],
) -> String {
    let list: String = questions
        .iter()
        .map(|q| format!("\n- {}", crate::markdown::inline(q)))
        .collect();
    format!(
        "contract v{version} cannot be approved while it has open questions that block it:{list}\n\nAnswer them with `/revise <your answers>` for a version that settles them."
    )
}

pub(super) fn revising_from_review(version: ContractVersion, login: &str) -> String {
    format!(
        "Revising the contract (v{version}) with @{login}'s review of the pull request; the next round continues on the same branch."
    )
}

// Reviews of the pull request.

/// Said once, on the pull request, to a reviewer who may not start a round.
pub(super) fn review_not_permitted(login: &str, needed: Permission, have: Permission) -> String {
    format!(
        "@{login}, thank you for the review. Only people with **{needed}** access or more can ask planwright for another round (you have **{have}**), so this review starts nothing; a maintainer can write `/revise <what to change>` here."
    )
}

/// Why a closed or merged pull request takes no other round (`how`: `closed`, `merged`).
pub(super) fn pull_not_open(how: &str) -> String {
    format!(
        "the pull request is {how}, so another round on its branch would have nowhere to go; to change the code again, label the issue (or a new one) for planwright."
    )
}

/// Said on the pull request when a review waits for the running round to end.
pub(super) fn review_queued(login: &str) -> String {
    format!(
        "@{login}: a round is already running on this pull request; this review starts the next one when it ends."
    )
}

/// Said on the pull request when a review cannot start a round now.
pub(super) fn review_not_now(login: &str, reason: &str) -> String {
    format!("@{login}: this review starts no new round: {reason}")
}

/// The pointer on the pull request to a revised contract waiting on the issue.
pub(super) fn revision_waiting(
    version: ContractVersion,
    issue: IssueNumber,
    url: Option<&str>,
) -> String {
    let place = match url {
        Some(url) => format!("[in #{issue}]({url})"),
        None => format!("in #{issue}"),
    };
    format!(
        "Revision v{version} of the build contract is waiting for approval {place}. Nothing changes on this branch until a maintainer approves it there."
    )
}

/// The reply in an inline comment's thread once a round touched its file.
pub(super) fn review_comment_answered(commit: &str, version: ContractVersion) -> String {
    let short: String = commit.chars().take(12).collect();
    format!("Addressed in {short} (build contract v{version}).")
}

pub(super) fn replanning(login: &str) -> String {
    format!("Planning again from scratch, as @{login} asked.")
}

pub(super) fn retrying_planning(login: &str) -> String {
    format!("Retrying planning, as @{login} asked.")
}

pub(super) fn carrying_out_again(version: ContractVersion, login: &str) -> String {
    format!("Carrying out contract v{version} again, as @{login} asked.")
}

pub(super) fn cancelled_by(login: &str) -> String {
    format!("Cancelled by @{login}.")
}

// The plan job.

pub(super) fn investigating() -> String {
    "The planner is investigating the issue.".into()
}

const EDITED: &str = "**The issue was edited after planwright was asked to start**";

pub(super) fn investigating_edited() -> String {
    format!(
        "The planner is investigating the issue. {EDITED}: the contract is planned from the text as it was then. Use `/plan` to plan from the current text."
    )
}

pub(super) fn contract_posted(version: ContractVersion, edited: bool, notes: &[String]) -> String {
    let note = if edited {
        format!(
            "\n\n{EDITED}: this contract is planned from the text as it was then. Use `/plan` to plan from the current text."
        )
    } else {
        String::new()
    };
    format!(
        "Build contract v{version} is posted below. A maintainer can `/approve` it, ask for `/revise <changes>`, or `/cancel`.{note}{}",
        environment_notes(notes)
    )
}

/// How an environment was chosen, where the maintainer should know it (a devcontainer
/// passed over, the host's own tools): empty when there is nothing to say.
pub(super) fn environment_notes(notes: &[String]) -> String {
    notes
        .iter()
        .map(|n| format!("\n\n**Environment:** {n}"))
        .collect()
}

/// Why an environment image could not be used; nothing was run in it, and no executor
/// model was paid for. Only the kind of failure and what to do: the registry's own answer
/// (and any address it led to) stays in the audit log, since whoever named the image could
/// otherwise read what an internal registry or the host's network says.
pub(super) fn image_unusable(choice: &Choice, error: &PullError) -> String {
    let image = choice.image.as_deref().unwrap_or("");
    let platform = crate::environment::host_platform();
    let (what, advice) = match error.kind {
        PullErrorKind::NotFound => (
            "its registry has no such image".to_owned(),
            "Check the name and the tag, or publish the image, then use `/retry`.".to_owned(),
        ),
        PullErrorKind::Refused => (
            "its registry refused access".to_owned(),
            "If the image is private, the planwright operator adds credentials for its registry to the Docker config.json named by REGISTRY_AUTH; then use `/retry`.".to_owned(),
        ),
        PullErrorKind::Platform => (
            format!("it has no image for {platform}"),
            format!("Publish the image for {platform}, or name another, then use `/retry`."),
        ),
        PullErrorKind::DigestMismatch => (
            "what its registry sent does not match its digest".to_owned(),
            VERIFY_ADVICE.to_owned(),
        ),
        PullErrorKind::HostileLayer => (
            "a layer of it breaks the rules planwright unpacks images by".to_owned(),
            VERIFY_ADVICE.to_owned(),
        ),
        PullErrorKind::Protocol => (
            "its registry gave an answer planwright cannot use".to_owned(),
            VERIFY_ADVICE.to_owned(),
        ),
        PullErrorKind::Unsupported => (
            "its manifest or layers are of a kind planwright does not read".to_owned(),
            "Publish it as an OCI or Docker v2 image with tar, gzip or zstd layers (squashed, if it has very many), or name another.".to_owned(),
        ),
        PullErrorKind::Blocked => (
            "its registry, or a host the registry sent the pull to, is not at a public address over HTTPS".to_owned(),
            "Name an image on a public registry; the planwright operator can list an internal one in REGISTRY_PRIVATE.".to_owned(),
        ),
        PullErrorKind::TooLarge => (
            "it is larger than planwright's image cache may hold".to_owned(),
            "Use a smaller image, or the operator raises ENVIRONMENT_CACHE_MAX.".to_owned(),
        ),
        PullErrorKind::Local => (
            "planwright could not store it in its image cache".to_owned(),
            "The planwright operator checks DATA_DIR; then use `/retry`.".to_owned(),
        ),
        PullErrorKind::Transient => (
            "its registry could not be reached or did not answer in time".to_owned(),
            "`planwright env pull` on the planwright host tries it the same way; use `/retry` when it works.".to_owned(),
        ),
    };
    format!(
        "The environment image `{}` (from {}) could not be used, so nothing ran in it: {what} ({SEE_AUDIT}).\n\n{advice}",
        image.replace('`', "'"),
        choice.from_where(),
    )
}

const VERIFY_ADVICE: &str = "planwright does not use an image it cannot verify or unpack safely: rebuild and publish it, or name another.";

pub(super) fn image_needs_bwrap(choice: &Choice) -> String {
    format!(
        "The environment image `{}` (from {}) cannot be used: this planwright runs without the bwrap sandbox, which is what shows an image as a run's root. The operator can enable it (`planwright doctor` says what is missing).",
        choice.image.as_deref().unwrap_or("").replace('`', "'"),
        choice.from_where()
    )
}

/// The image cache itself failed (a full or unwritable DATA_DIR): the operator's to
/// fix, and its paths are not for a public issue.
pub(super) fn image_cache_failed() -> String {
    format!("planwright could not store the environment image in its cache: {SEE_AUDIT}.")
}

pub(super) fn issue_unreadable() -> String {
    "The issue can no longer be read.".into()
}

pub(super) fn planning_over_budget(spent: &impl Display, limit: &impl Display) -> String {
    format!(
        "Planning stopped: the session used {spent} of its {limit} budget. Raise `budget_usd` in the repository's settings and use `/retry`."
    )
}

pub(super) fn planner_model_failed() -> String {
    format!("The planner's model call failed; {SEE_AUDIT}. Use `/retry` to try again.")
}

pub(super) fn planning_stopped(e: &impl Display) -> String {
    format!("{e}. Use `/retry` to try again or `/plan` to start over.")
}

/// What the contract comment says about the settings it binds, before its closing line:
/// an approver sees what will run beside the contract.
pub(super) fn settings_section(b: &BoundSettings, json: &str) -> String {
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
    let mut out = format!(
        "### Repository settings\nAs the base commit holds them (`{}`, settings `{}`); approving binds these too.\n\n- executor: {executor}\n- network allowed during setup: {}\n- protected paths: {}\n- setup: {}\n- tests: {}\n- re-runs of a failing test: {}\n- quarantined tests: {}\n",
        code(b.source.as_deref().unwrap_or("defaults")),
        &short[..12],
        list(&b.network_allow),
        list(&b.protected_paths),
        list(&b.setup),
        match &b.test {
            TestCommands::Always(commands) => list(commands),
            TestCommands::ByPath { by_path } => {
                let mut globs = String::from("by the paths a result changes:");
                for p in by_path {
                    globs.push_str(&format!("\n  - `{}`: {}", code(&p.glob), list(&p.commands)));
                }
                globs
            }
        },
        b.flaky_reruns,
        list(&b.quarantine),
    );
    let env = &b.environment;
    match &b.chosen {
        Some(
            chosen @ Choice {
                image: Some(image), ..
            },
        ) => {
            let pinned = match &chosen.digest {
                Some(digest) => format!(" (`{}`)", code(digest)),
                None => String::new(),
            };
            out.push_str(&format!(
                "- environment: `{}`{pinned}, from {}\n",
                code(image),
                chosen.from_where()
            ));
        }
        Some(_) => out.push_str("- environment: the planwright host's tools (no image named)\n"),
        None => {
            if let Some(image) = &env.image {
                out.push_str(&format!("- environment image: `{}`\n", code(image)));
            }
        }
    }
    if !env.cache.is_empty() {
        out.push_str(&format!(
            "- kept with the setup cache: {}\n",
            list(&env.cache)
        ));
    }
    if let Some(files) = &env.cache_key {
        out.push_str(&format!("- setup cache keyed by: {}\n", list(files)));
    }
    out
}

// The execute job.

pub(super) fn contract_not_on_record(version: ContractVersion, sha256: &str) -> String {
    format!("Contract v{version} as approved (sha256 {sha256}) is not on record; nothing was run.")
}

pub(super) fn could_not_continue() -> String {
    format!("planwright could not continue: {SEE_AUDIT}.")
}

/// How a failed execution ends on the status comment.
pub(super) fn execution_failed(reason: &str) -> String {
    // A failure that kept unfinished work already says how to go on from it.
    if reason.ends_with(CONTINUE_HINT) {
        return reason.to_owned();
    }
    format!("{reason}\n\nUse `/retry` to carry out the contract again, or `/plan` to start over.")
}

/// How a failure that kept unfinished work ends: the ways to go on.
const CONTINUE_HINT: &str = "Use `/retry continue` to carry on from the unfinished change, \
     `/retry` to start again from the base, or `/plan` to start over.";

pub(super) fn partial_in_draft(reason: &str, number: impl Display, url: &str) -> String {
    format!(
        "{}The unfinished change is kept in the draft pull request [#{number}]({url}).\n\n{CONTINUE_HINT}",
        lead(reason)
    )
}

pub(super) fn partial_on_branch(reason: &str, branch: &str, url: Option<&str>) -> String {
    let shown = crate::markdown::code(branch, false);
    let branch = match url {
        Some(url) => format!("[{shown}]({url})"),
        None => shown,
    };
    format!(
        "{}The unfinished change is kept on the branch {branch}.\n\n{CONTINUE_HINT}",
        lead(reason)
    )
}

/// `reason` followed by more: on the same line, or after a blank line when it is a list.
fn lead(reason: &str) -> String {
    let reason = reason.trim_end();
    if reason.contains('\n') {
        format!("{reason}\n\n")
    } else {
        format!("{reason} ")
    }
}

pub(super) fn partial_too_large(reason: &str, bytes: u64, max: u64) -> String {
    format!(
        "{}Its unfinished change holds {} MiB, over the {} MiB a result may hold, so \
         nothing was pushed.",
        lead(reason),
        bytes >> 20,
        max >> 20
    )
}

pub(super) fn partial_touches(reason: &str, path: &str, why: &str) -> String {
    format!(
        "{}Its unfinished change touches {} ({why}), so nothing was pushed.",
        lead(reason),
        crate::markdown::code(path, false)
    )
}

pub(super) fn nothing_to_continue() -> String {
    "there is no unfinished change to continue from; use `/retry` to carry out the contract \
     again from the base."
        .into()
}

pub(super) fn continuing(version: ContractVersion, commit: &str, login: &str) -> String {
    let short = commit.get(..12).unwrap_or(commit);
    format!(
        "Carrying out contract v{version} again from the unfinished change `{short}`, as @{login} asked."
    )
}

pub(super) fn planned_before_environments(version: ContractVersion, image: &str) -> String {
    format!(
        "Contract v{version} was planned before planwright ran checks in environment images, so the image `{}` it names was never bound to it; use `/plan` to plan it again.",
        image.replace('`', "'")
    )
}

pub(super) fn bound_settings_unreadable(version: ContractVersion, e: &impl Display) -> String {
    format!(
        "The settings recorded with contract v{version} cannot be read ({e}); use `/plan` to plan it again."
    )
}

pub(super) fn bound_settings_unusable(version: ContractVersion, e: &impl Display) -> String {
    format!(
        "The settings recorded with contract v{version} cannot be used ({e}); use `/plan` to plan it again."
    )
}

pub(super) fn attempts_used(version: ContractVersion, max_attempts: u32) -> String {
    format!("Contract v{version} has used all {max_attempts} of its attempts.")
}

pub(super) fn no_sandbox() -> String {
    "planwright cannot run executors here: bubblewrap is not available on this \
     host (`planwright doctor` says why). Executors run only in the sandbox, or \
     with SANDBOX=none and UNSAFE_NO_SANDBOX=1 set by the operator."
        .into()
}

pub(super) fn checkout_failed(start: &str, e: &impl Display) -> String {
    format!("Could not check out the commit {start}: {e}")
}

pub(super) fn unknown_executor(name: &str) -> String {
    format!("The contract names the unknown executor `{name}`.")
}

pub(super) fn executor_model_unusable(e: &impl Display) -> String {
    format!("The contract's executor model cannot be used: {e}")
}

pub(super) fn no_model_proxy(executor: &str) -> String {
    format!(
        "The `{executor}` executor reaches models through the model proxy's Unix \
         socket, and this planwright serves none (set MODEL_PROXY_SOCKET)."
    )
}

pub(super) fn executor_not_installed(executor: &str, program: &str) -> String {
    format!(
        "The `{executor}` executor is not installed here: `{program}` is neither on PATH \
         nor in /opt/planwright-agents/bin (scripts/install-agents installs it)."
    )
}

pub(super) fn wrong_provider(executor: &str, model: &impl Display, provider: &str) -> String {
    format!("The `{executor}` executor cannot use `{model}`: it speaks to {provider} models only.")
}

pub(super) fn budget_used_before_attempt(budget: Budget, attempt: u32) -> String {
    format!(
        "The session has used its budget ({}) before attempt {attempt}. Nothing was pushed.",
        budget_text(budget)
    )
}

pub(super) fn executing(
    version: ContractVersion,
    executor: &str,
    attempt: u32,
    max_attempts: u32,
) -> String {
    format!(
        "Carrying out contract v{version} with the `{executor}` executor (attempt {attempt} of {max_attempts})."
    )
}

pub(super) fn executor_over_budget(budget: Budget) -> String {
    format!(
        "The executor ran out of budget (limit {}).",
        budget_text(budget)
    )
}

pub(super) fn executor_timed_out(limit: std::time::Duration) -> String {
    let secs = limit.as_secs();
    let within = match secs {
        s if s % 60 == 0 && s > 0 => format!("{} minutes", s / 60),
        1 => "1 second".to_owned(),
        s => format!("{s} seconds"),
    };
    format!("The executor did not finish within {within} and was stopped.")
}

pub(super) fn executor_turn_limit(turns: impl Display) -> String {
    format!("The executor did not finish within its {turns} turns.")
}

pub(super) fn executor_crashed(summary: &str) -> String {
    format!(
        "The executor stopped without finishing: {}",
        first_line(summary)
    )
}

pub(super) fn nothing_pushed(reason: &str) -> String {
    format!("{reason} Nothing was pushed.")
}

pub(super) fn executor_model_failed() -> String {
    format!("The executor's model call failed; {SEE_AUDIT}.")
}

pub(super) fn executor_error(e: &impl Display) -> String {
    format!("{e}.")
}

pub(super) fn result_too_large(bytes: u64, max: u64) -> String {
    format!(
        "The result is too large to publish: its added and changed files hold {} \
         MiB, over the {} MiB a result may hold. Nothing was pushed.",
        bytes >> 20,
        max >> 20
    )
}

pub(super) fn nothing_changed() -> String {
    "The executor finished without changing anything. Nothing was pushed.".into()
}

pub(super) fn verifying(attempt: u32, commands: usize) -> String {
    format!("Verifying attempt {attempt}: {commands} command(s) on the base and on the result.")
}

pub(super) fn could_not_verify(on: &str, e: &impl Display) -> String {
    format!("Could not verify {on}: {e}")
}

/// `lines` are already one `- path (change): reason` per refused file.
pub(super) fn result_refused(lines: &[String]) -> String {
    format!(
        "The result was refused, and nothing was pushed:\n\n{}",
        lines.join("\n")
    )
}

pub(super) fn result_refused_kept(lines: &[String]) -> String {
    format!(
        "The result was refused for these paths:\n\n{}",
        lines.join("\n")
    )
}

pub(super) fn refused_path(path: &str, change: &impl Display, reason: &str) -> String {
    // The path is the executor's: a backtick in it must not open markdown that hides the
    // rest of the list.
    format!(
        "- {} ({change}): {reason}",
        crate::markdown::code(path, false)
    )
}

pub(super) fn review_over_budget(spent: &impl Display, limit: &impl Display) -> String {
    format!("The session used {spent} of its {limit} budget before the review.")
}

pub(super) fn reviewer_model_failed() -> String {
    format!("Could not review the result: the reviewer's model call failed; {SEE_AUDIT}.")
}

/// Why a run failed, as its check's title and every report of it say: what failed first.
pub(super) fn checks_still_fail(commands: &[String]) -> String {
    format!(
        "Contract check still fails: {}",
        commands
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub(super) fn reviewer_rejected(findings: &str) -> String {
    format!("Not accepted by the reviewer: {}", first_line(findings))
}

pub(super) fn result_lost() -> String {
    "The verified result was lost before it could be published (planwright \
     restarted and its workspace is gone). Use `/retry` to carry out the \
     contract again."
        .into()
}

pub(super) fn pull_opened(number: impl Display, url: &str) -> String {
    format!(
        "Pull request [#{number}]({url}) is open: verification passed and the reviewer accepted it."
    )
}

/// After a restart that found the pull request published but the session not yet moved.
pub(super) fn pull_was_opened(number: Option<impl Display>) -> String {
    match number {
        Some(n) => {
            format!("Pull request #{n} is open: verification passed and the reviewer accepted it.")
        }
        None => {
            "The pull request is open: verification passed and the reviewer accepted it.".into()
        }
    }
}

pub(super) fn failed_report_was_published(reason: &str) -> String {
    format!("The run did not pass ({reason}); its report was published.")
}

pub(super) fn failed_with_draft(reason: &str, number: impl Display, url: &str) -> String {
    format!(
        "The run did not pass ({reason}). A draft pull request shows what was done: [#{number}]({url})."
    )
}

pub(super) fn failed_with_report(reason: &str) -> String {
    format!(
        "The run did not pass ({reason}). The report is in the comment below; nothing was pushed."
    )
}

pub(super) fn push_rejected(branch: &str, message: &str) -> String {
    format!(
        "The forge refused the push to `{branch}` ({message}). planwright never \
         overwrites a branch holding commits it did not make; delete the branch \
         or use `/retry` after moving it."
    )
}

pub(super) fn could_not_publish() -> String {
    format!("Could not publish the result: {SEE_AUDIT}.")
}

pub(super) fn budget_text(budget: Budget) -> String {
    match (budget.max_microusd, budget.max_tokens) {
        (Some(m), _) => format!("${:.2}", m as f64 / 1_000_000.0),
        (None, Some(t)) => format!("{t} tokens"),
        (None, None) => "none".into(),
    }
}

fn first_line(text: &str) -> &str {
    text.trim().lines().next().unwrap_or_default().trim()
}
