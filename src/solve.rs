//! `planwright solve`: the whole flow on a repository on this machine, through the local
//! forge. The session, its jobs and the worker that runs them are the ones `serve` uses;
//! only the label and the `/approve` come from the terminal instead of webhooks, and the
//! progress (stage, time, tokens, cost) is printed as it goes.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::app::{App, Forges};
use crate::config::Settings;
use crate::contract::ContractVersion;
use crate::event::{self, Actor, RepoEvent, RepoEventKind, Thread};
use crate::forge::local::{self, LocalForge, LocalIssue};
use crate::forge::repo_config::LoadError;
use crate::jobs::{JobError, Waker, Worker};
use crate::metering::ModelRole;
use crate::metering::proxy::{self, Capabilities, ProxyState};
use crate::session::handlers;
use crate::store::audit::AuditAction;
use crate::store::state::SessionState;
use crate::store::{Db, audit, jobs, model_usage, sessions};

/// How often the session is looked at while a job works on it.
const POLL: Duration = Duration::from_millis(200);
/// While the stage stays the same, a new line only when the spending changed and this
/// long has passed.
const QUIET: Duration = Duration::from_secs(5);

/// What `solve` was asked to do.
pub struct Request {
    pub repo: PathBuf,
    pub issue: LocalIssue,
    /// Approve the contract without asking.
    pub approve: bool,
    /// Print nothing: no comments, no progress lines (an evaluation runs many at once).
    pub quiet: bool,
}

/// Why `solve` stopped before a result: input it cannot work with (exit 2), or a
/// failure on the way.
#[derive(Debug)]
pub enum SolveError {
    Input(anyhow::Error),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for SolveError {
    fn from(e: anyhow::Error) -> Self {
        SolveError::Failed(e)
    }
}

fn input(e: impl Into<anyhow::Error>) -> SolveError {
    SolveError::Input(e.into())
}

/// How a solve ended.
#[derive(Debug)]
pub enum Ended {
    /// Verification passed and the reviewer accepted: the branch holds the result.
    Passed { branch: String, report: PathBuf },
    /// The run did not pass; the reason was printed. A draft may still be there.
    Failed {
        reason: String,
        branch: Option<String>,
        report: Option<PathBuf>,
    },
    /// The contract was not approved.
    Declined,
    /// Ctrl-C: the session is left as it is, the next `solve` cancels it.
    Interrupted,
}

/// The repository checked and its output folder made: what runs once settings load.
pub struct Opened {
    forge: Arc<LocalForge>,
    user: String,
    approve: bool,
    quiet: bool,
    /// DATA_DIR unless the settings name another: `planwright/` in the git folder.
    pub default_data_dir: PathBuf,
    /// Where this run's comments, checks and `pull-request.md` go.
    pub output: PathBuf,
}

/// Checks everything `solve` is given before anything is spent: the issue, the
/// repository, a branch left by an earlier run, a way to approve.
pub async fn open(request: Request) -> Result<Opened, SolveError> {
    if !request.approve && !std::io::stdin().is_terminal() {
        return Err(input(anyhow::anyhow!(
            "Cannot ask for approval: standard input is not a terminal. Run `planwright solve` \
             at a terminal to read the contract before approving it, or add --approve to \
             carry it out without asking"
        )));
    }
    let user = local_user();
    // Opened once to check the repository and find its git folder, then again with this
    // run's own output folder there.
    let probe = LocalForge::open(
        &request.repo,
        request.issue.clone(),
        None,
        &user,
        Box::new(std::io::sink()),
    )
    .await
    .map_err(input)?;
    let base = probe.output_dir().to_path_buf();
    let branch = crate::git::branch_name(local::ISSUE, &request.issue.title);
    if git(
        &request.repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .await?
    .is_some()
    {
        return Err(input(anyhow::anyhow!(
            "Cannot start: the branch `{branch}` is there from an earlier run and planwright \
             never overwrites it; delete it (`git branch -D {branch}`) or give the issue another title"
        )));
    }
    let dirty = git(&request.repo, &["status", "--porcelain"])
        .await?
        .unwrap_or_default();
    if !dirty.trim().is_empty() && !request.quiet {
        eprintln!(
            "planwright: note: `{}` has uncommitted changes; planwright works from the last \
             commit (HEAD) and does not see them",
            request.repo.display()
        );
    }
    let output = (1..)
        .map(|n| base.join(format!("solve-{n}")))
        .find(|dir| !dir.exists())
        .context("Cannot number this run's output folder")?;
    let echo: Box<dyn Write + Send> = if request.quiet {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::stdout())
    };
    let forge = LocalForge::open(&request.repo, request.issue, Some(&output), &user, echo)
        .await
        .map_err(input)?;
    let output = forge.output_dir().to_path_buf();
    Ok(Opened {
        forge: Arc::new(forge),
        user,
        approve: request.approve,
        quiet: request.quiet,
        default_data_dir: base,
        output,
    })
}

/// The local user's login as the forge shows it: the account name when it is a usable
/// one, else `maintainer`.
fn local_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| {
            !u.is_empty()
                && !u.eq_ignore_ascii_case(local::BOT_LOGIN)
                && !u.contains(".v")
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
        .unwrap_or_else(|| "maintainer".to_owned())
}

/// `git` in `dir`: its output when it succeeded, `None` when it refused.
async fn git(dir: &Path, args: &[&str]) -> anyhow::Result<Option<String>> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("Could not run git (is it installed?)")?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Runs the session from label to result. `settings` are the deployment's, with
/// DATA_DIR defaulting to [`Opened::default_data_dir`]; the database is always SQLite
/// there, never a server's.
pub async fn run(mut settings: Settings, opened: Opened) -> Result<Ended, SolveError> {
    let started = Instant::now();
    std::fs::create_dir_all(&settings.data_dir).with_context(|| {
        format!(
            "Could not create the data folder `{}`",
            settings.data_dir.display()
        )
    })?;
    settings.database_url = format!("sqlite://{}/planwright.db", settings.data_dir.display());
    let db = Db::open(&settings.database_url).await?;
    let stop = CancellationToken::new();
    // Only executors that bring their own agent need the proxy; the builtin one does
    // without, so a socket that cannot be made is worth a warning, not a stop.
    let proxy = match ProxyState::new(
        db.clone(),
        &settings.models,
        Arc::new(Capabilities::generate()),
    ) {
        Ok(state) => match proxy::serve(&settings.model_proxy, state, stop.clone()).await {
            Ok((proxy, _task)) => Some(proxy),
            Err(e) => {
                eprintln!(
                    "planwright: warning: the model proxy did not start ({e:#}); only the builtin executor can run"
                );
                None
            }
        },
        Err(e) => return Err(e.into()),
    };
    let mut app = App::new(db.clone(), Arc::new(settings))?.with_model_proxy(proxy);
    app.forges = Arc::new(Forges::local(opened.forge.clone()));
    let app = Arc::new(app);

    let waker = Waker::default();
    let worker = Worker {
        db: db.clone(),
        handler: crate::session::dispatch::handler(app.clone()),
        settings: app.settings.queue.clone(),
        owner: format!("solve:{}", std::process::id()),
        waker: waker.clone(),
        // `solve` says when the sandbox is missing, as a session would.
        runs: crate::jobs::RunGate::open(),
    };
    let worker = tokio::spawn(worker.run(stop.clone()));
    let session = Session {
        app: &app,
        forge: &opened.forge,
        user: &opened.user,
        output: &opened.output,
        waker: &waker,
        started,
        quiet: opened.quiet,
    };
    let ended = session.drive(opened.approve).await;
    stop.cancel();
    // Interrupted: the person wants out now, not after the running job's grace period;
    // the sandbox dies with this process and the next `solve` cancels the session.
    if !matches!(ended, Ok(Ended::Interrupted))
        && let Err(e) = worker.await
    {
        tracing::warn!(error = %e, "the job worker stopped abnormally");
    }
    ended
}

struct Session<'a> {
    app: &'a Arc<App>,
    forge: &'a Arc<LocalForge>,
    user: &'a str,
    output: &'a Path,
    waker: &'a Waker,
    started: Instant,
    quiet: bool,
}

impl Session<'_> {
    fn actor(&self) -> Actor {
        // The id the local forge gives its user.
        Actor {
            login: self.user.to_owned(),
            id: 2,
            bot: false,
        }
    }

    async fn event(&self, kind: RepoEventKind) -> Result<(), SolveError> {
        let event = RepoEvent {
            forge: event::ForgeKind::Local,
            repo: self.forge.name().clone(),
            installation: None,
            kind,
        };
        handlers::on_repo_event(self.app, &event, None)
            .await
            .map_err(|e| match e {
                JobError::Retryable(e) | JobError::Permanent(e) => SolveError::Failed(e),
            })?;
        self.waker.wake();
        Ok(())
    }

    async fn active(&self) -> anyhow::Result<Option<sessions::SessionRow>> {
        let mut conn = self.app.db.pool.acquire().await?;
        sessions::find_active(
            &mut conn,
            event::ForgeKind::Local,
            self.forge.name(),
            local::ISSUE,
        )
        .await
    }

    async fn drive(&self, approve: bool) -> Result<Ended, SolveError> {
        let repo = self.forge.name().clone();
        let config = match crate::forge::repo_config::load_policy(self.forge.as_ref(), &repo).await
        {
            Ok(c) => c,
            Err(LoadError::Config(e)) => {
                return Err(input(anyhow::anyhow!(
                    "Cannot start: the repository's planwright settings are not valid (they are read from the last commit):\n{e}"
                )));
            }
            Err(LoadError::Forge(e)) => return Err(SolveError::Failed(e.into())),
        };
        // Settings that cannot plan are bad input, found before a session starts.
        self.app
            .model_name(ModelRole::Planner, config.models.planner.as_ref())
            .map_err(input)?;
        self.cancel_leftover().await?;
        // The trigger label, as a maintainer would add it on a forge.
        self.event(RepoEventKind::IssueLabeled {
            issue: local::ISSUE,
            labels: vec![config.label.clone()],
            actor: self.actor(),
        })
        .await?;
        let Some(row) = self.active().await? else {
            return Err(SolveError::Failed(anyhow::anyhow!(
                "Could not start a session; the comments above say why"
            )));
        };
        let id = row.id.clone();
        let mut progress = Progress::new(self.started, self.quiet);
        let planned = match self
            .wait(
                &id,
                &[
                    SessionState::AwaitingApproval,
                    SessionState::Failed,
                    SessionState::Cancelled,
                ],
                &mut progress,
            )
            .await?
        {
            Some(row) => row,
            None => return Ok(Ended::Interrupted),
        };
        if planned.state != SessionState::AwaitingApproval {
            return self.ended(&planned).await;
        }
        let version = planned.contract_version.unwrap_or(ContractVersion(1));
        let approved =
            approve || ask(&format!("Approve build contract v{version}? [y/N] ")).await?;
        let command = if approved { "/approve" } else { "/cancel" };
        let comment = self
            .forge
            .add_comment(self.user, command)
            .with_context(|| format!("Could not write `{command}`"))?;
        self.event(RepoEventKind::CommentCreated {
            thread: Thread::Issue(local::ISSUE),
            comment: comment.id,
            body: command.to_owned(),
            author: self.actor(),
        })
        .await?;
        if !approved {
            eprintln!(
                "planwright: not approved; the session is cancelled. The contract stays in {}",
                self.output.join("comments").display()
            );
            return Ok(Ended::Declined);
        }
        match self
            .wait(
                &id,
                &[
                    SessionState::PrOpened,
                    SessionState::Failed,
                    SessionState::Cancelled,
                ],
                &mut progress,
            )
            .await?
        {
            Some(row) => self.ended(&row).await,
            None => Ok(Ended::Interrupted),
        }
    }

    /// A session an earlier `solve` left unfinished (interrupted, or not approved) holds
    /// the issue: it is cancelled, as this run starts over.
    async fn cancel_leftover(&self) -> anyhow::Result<()> {
        let Some(row) = self.active().await? else {
            return Ok(());
        };
        let id = row.id.clone();
        let mut state = row.state;
        let mut tx = self.app.db.writer.begin().await?;
        if !state.can_become(SessionState::Cancelled) {
            let why = "interrupted: a later `solve` started over";
            sessions::move_state(&mut tx, &id, state, SessionState::Failed, Some(why)).await?;
            state = SessionState::Failed;
        }
        let moved =
            sessions::move_state(&mut tx, &id, state, SessionState::Cancelled, None).await?;
        anyhow::ensure!(
            moved,
            "Cannot start: the earlier session {id} could not be cancelled"
        );
        audit::append(
            &mut tx,
            &audit::Entry {
                actor: &format!("local:{}", self.user),
                action: AuditAction::SessionCancelled,
                session: Some(id.as_str()),
                delivery: None,
                detail: serde_json::json!({ "why": "a new solve started" }),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Waits until the session is in one of `until`, printing progress; `None` on Ctrl-C.
    /// A job that gave up for good ends the wait with its error.
    async fn wait(
        &self,
        id: &crate::ids::SessionId,
        until: &[SessionState],
        progress: &mut Progress,
    ) -> anyhow::Result<Option<sessions::SessionRow>> {
        let interrupted = tokio::signal::ctrl_c();
        tokio::pin!(interrupted);
        loop {
            let mut conn = self.app.db.pool.acquire().await?;
            let row = sessions::get(&mut conn, id)
                .await?
                .with_context(|| format!("Session {id} is gone"))?;
            drop(conn);
            let state = row.state;
            let spent = model_usage::spent_by_session(&self.app.db, id).await?;
            progress.show(state, spent);
            if until.contains(&state) {
                return Ok(Some(row));
            }
            let own: Vec<jobs::JobRow> = jobs::list(&self.app.db, None)
                .await?
                .into_iter()
                .filter(|j| j.session_id.as_ref() == Some(id))
                .collect();
            for job in &own {
                let error = job.last_error.as_deref().unwrap_or_default();
                if job.state == jobs::JobState::Dead {
                    anyhow::bail!(
                        "The {} job gave up after {} attempt(s): {error}",
                        job.kind,
                        job.attempts
                    );
                }
                if job.state == jobs::JobState::Queued && job.attempts > 0 {
                    progress.retrying(job.id.as_str(), job.attempts, error);
                }
            }
            tokio::select! {
                _ = &mut interrupted => {
                    eprintln!("planwright: interrupted; the session is left {} and the next `solve` cancels it", state.describe());
                    return Ok(None);
                }
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    async fn ended(&self, row: &sessions::SessionRow) -> Result<Ended, SolveError> {
        let mut conn = self
            .app
            .db
            .pool
            .acquire()
            .await
            .map_err(anyhow::Error::from)?;
        let branch = crate::store::runs::branch_of_session(&mut conn, &row.id).await?;
        drop(conn);
        let report = Some(self.output.join("pull-request.md")).filter(|p| p.exists());
        match (row.state, branch, report) {
            (SessionState::PrOpened, Some(branch), Some(report)) => {
                Ok(Ended::Passed { branch, report })
            }
            (state, branch, report) => Ok(Ended::Failed {
                reason: row
                    .failure
                    .clone()
                    .unwrap_or_else(|| format!("the session ended {}", state.describe())),
                branch,
                report,
            }),
        }
    }
}

/// Asks on the terminal; anything but `y`/`yes` is no.
async fn ask(question: &str) -> anyhow::Result<bool> {
    let question = question.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stderr = std::io::stderr().lock();
        write!(stderr, "{question}")?;
        stderr.flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        let answer = answer.trim().to_ascii_lowercase();
        Ok(answer == "y" || answer == "yes")
    })
    .await
    .context("The question on the terminal was not answered")?
}

/// The progress lines on standard error: `[  42s] executing · 12345 tokens · $0.0321`.
struct Progress {
    started: Instant,
    last: Option<(SessionState, model_usage::Spent, Instant)>,
    retries: std::collections::HashSet<(String, i64)>,
    quiet: bool,
}

impl Progress {
    fn new(started: Instant, quiet: bool) -> Self {
        Progress {
            started,
            last: None,
            retries: Default::default(),
            quiet,
        }
    }

    fn show(&mut self, state: SessionState, spent: model_usage::Spent) {
        let due = match &self.last {
            None => true,
            Some((s, _, _)) if *s != state => true,
            Some((_, before, at)) => *before != spent && at.elapsed() >= QUIET,
        };
        if due && !self.quiet {
            eprintln!("{}", line(self.started.elapsed(), state, spent));
            self.last = Some((state, spent, Instant::now()));
        }
    }

    fn retrying(&mut self, job: &str, attempt: i64, error: &str) {
        if self.retries.insert((job.to_owned(), attempt)) && !self.quiet {
            let first = error.lines().next().unwrap_or_default();
            eprintln!(
                "planwright: [{:>4}s] attempt {attempt} failed, retrying: {first}",
                self.started.elapsed().as_secs()
            );
        }
    }
}

fn line(elapsed: Duration, state: SessionState, spent: model_usage::Spent) -> String {
    format!(
        "planwright: [{:>4}s] {} · {} tokens · ${:.4}",
        elapsed.as_secs(),
        state.describe(),
        spent.tokens,
        spent.cost_microusd as f64 / 1_000_000.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_has_stage_time_tokens_and_cost() {
        let spent = model_usage::Spent {
            cost_microusd: 32_100,
            tokens: 12_345,
        };
        assert_eq!(
            line(
                Duration::from_millis(42_900),
                SessionState::Verifying,
                spent
            ),
            "planwright: [  42s] verifying · 12345 tokens · $0.0321"
        );
    }
}
