//! `planwright eval`: runs a set of tasks with known answers through planwright's real
//! pipeline, once per arm (a deployment's settings), grades every result apart from
//! planwright's own verdict, and reports what each arm resolved, what it cost per role,
//! and how often planwright's verdict agreed with the grade. Finished runs are kept in
//! the evaluation's database, so an interrupted evaluation carries on without paying
//! for them again.

pub mod checkout;
pub mod grade;
pub mod report;
pub mod store;
pub mod tasks;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context as _;
use futures_util::StreamExt as _;

use crate::app::App;
use crate::config::ProxyListen;
use crate::config::Settings;
use crate::forge::local::LocalIssue;
use crate::solve::{self, Ended, SolveError};
use crate::store::Db;
use grade::{Graded, Grader};
use store::{RunRecord, Verdict};
use tasks::Task;

/// One configuration to compare: its name and the settings file its runs use.
#[derive(Debug, Clone)]
pub struct ArmSpec {
    pub name: String,
    pub settings: PathBuf,
}

impl ArmSpec {
    /// `NAME=SETTINGS_FILE`.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let (name, file) = text.split_once('=').with_context(|| {
            format!("Cannot read the arm `{text}`: write it as NAME=SETTINGS_FILE")
        })?;
        anyhow::ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
            "Cannot use `{name}` as an arm's name: use letters, digits, `-`, `_` and `.`"
        );
        anyhow::ensure!(!file.is_empty(), "The arm `{name}` names no settings file");
        Ok(ArmSpec {
            name: name.to_owned(),
            settings: PathBuf::from(file),
        })
    }
}

/// What `planwright eval` was asked to do.
pub struct Request {
    pub tasks: PathBuf,
    pub arms: Vec<ArmSpec>,
    /// The evaluation's folder: its database, the runs' records and the reports.
    pub out: PathBuf,
    /// The evaluation's name in the database (resuming needs the same one).
    pub name: String,
    pub repeat: u32,
    /// No run starts once the evaluation has spent this much.
    pub budget_usd: Option<f64>,
    pub jobs: usize,
    /// The image for tasks that name none.
    pub image: Option<String>,
    /// The settings grading runs with (sandbox, registries): `--config`.
    pub config: Option<PathBuf>,
}

/// Why an evaluation stopped before its report: bad input (nothing was paid), or a
/// failure on the way.
#[derive(Debug)]
pub enum EvalError {
    Input(anyhow::Error),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for EvalError {
    fn from(e: anyhow::Error) -> Self {
        EvalError::Failed(e)
    }
}

/// How an evaluation ended.
pub struct Finished {
    pub report: report::Report,
    /// The Markdown, JSON and HTML reports.
    pub written: Vec<PathBuf>,
    /// Runs not started because the budget was spent.
    pub not_started: usize,
}

struct Arm {
    name: String,
    settings: Settings,
}

/// Everything the runs share.
struct Context {
    request: Request,
    db: Db,
    grader: Grader,
    spent_microusd: Mutex<i64>,
    budget_microusd: Option<i64>,
    not_started: Mutex<usize>,
    done: Mutex<usize>,
    total: usize,
}

/// Runs the evaluation: every (task, arm, repeat) not yet graded, then the report.
pub async fn run(request: Request) -> Result<Finished, EvalError> {
    let loaded = tasks::load(&request.tasks).map_err(EvalError::Input)?;
    for skipped in &loaded.skipped {
        eprintln!(
            "planwright eval: skipped {}: {}",
            skipped.place, skipped.reason
        );
    }
    let arms = load_arms(&request)?;
    let mut settings = Settings::load_with_data_dir(request.config.as_deref(), &request.out)
        .map_err(EvalError::Input)?;
    settings.data_dir = request.out.clone();
    settings.database_url = format!("sqlite://{}/planwright.db", request.out.display());
    std::fs::create_dir_all(&request.out)
        .with_context(|| format!("Could not create `{}`", request.out.display()))?;
    let db = Db::open(&settings.database_url).await?;
    let app = App::new(db.clone(), Arc::new(settings))?;
    let Some(sandbox) = app.sandbox.clone() else {
        return Err(EvalError::Input(anyhow::anyhow!(
            "Cannot grade without the sandbox: {}",
            app.sandbox_missing.as_deref().unwrap_or("it is not set up")
        )));
    };
    let finished = store::list(&db, &request.name).await?;
    let done: HashSet<(String, String, u32)> = finished
        .iter()
        .map(|r| (r.task.clone(), r.arm.clone(), r.repeat))
        .collect();
    let spent: i64 = finished.iter().map(RunRecord::cost_microusd).sum();
    let mut todo = Vec::new();
    for task in &loaded.tasks {
        for repeat in 1..=request.repeat.max(1) {
            for arm in &arms {
                if !done.contains(&(task.id.clone(), arm.name.clone(), repeat)) {
                    todo.push((task, arm, repeat));
                }
            }
        }
    }
    let ctx = Context {
        total: todo.len(),
        budget_microusd: request.budget_usd.map(|usd| (usd * 1_000_000.0) as i64),
        request,
        db: db.clone(),
        grader: Grader {
            sandbox,
            environments: app.environments.clone(),
        },
        spent_microusd: Mutex::new(spent),
        not_started: Mutex::new(0),
        done: Mutex::new(0),
    };
    let jobs = ctx.request.jobs.max(1);
    let results: Vec<anyhow::Result<()>> = futures_util::stream::iter(todo)
        .map(|(task, arm, repeat)| ctx.run_one(task, arm, repeat))
        .buffer_unordered(jobs)
        .collect()
        .await;
    for result in results {
        result?;
    }
    let records = store::list(&db, &ctx.request.name).await?;
    let report = report::Report::build(&ctx.request.name, &loaded, &arms_names(&arms), &records);
    let written = report::write(&report, &ctx.request.out.join(&ctx.request.name))?;
    let not_started = *lock(&ctx.not_started);
    Ok(Finished {
        report,
        written,
        not_started,
    })
}

fn arms_names(arms: &[Arm]) -> Vec<String> {
    arms.iter().map(|a| a.name.clone()).collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every arm's settings, loaded before any model is paid: a file that does not load, or
/// that names no planner or executor model, refuses the whole evaluation.
fn load_arms(request: &Request) -> Result<Vec<Arm>, EvalError> {
    if request.arms.is_empty() {
        return Err(EvalError::Input(anyhow::anyhow!(
            "Give at least one --arm NAME=SETTINGS_FILE"
        )));
    }
    let mut arms: Vec<Arm> = Vec::new();
    for spec in &request.arms {
        if arms.iter().any(|a| a.name == spec.name) {
            return Err(EvalError::Input(anyhow::anyhow!(
                "Two arms are named `{}`: give each its own name",
                spec.name
            )));
        }
        if !spec.settings.is_file() {
            return Err(EvalError::Input(anyhow::anyhow!(
                "The arm `{}`: its settings file `{}` is not there",
                spec.name,
                spec.settings.display()
            )));
        }
        let settings =
            Settings::load_with_data_dir(Some(&spec.settings), &request.out).map_err(|e| {
                EvalError::Input(e.context(format!(
                    "The arm `{}`: its settings file `{}` does not load",
                    spec.name,
                    spec.settings.display()
                )))
            })?;
        for (model, key) in [
            (&settings.models.planner, "planner_model"),
            (&settings.models.executor, "executor_model"),
        ] {
            if model.is_none() {
                return Err(EvalError::Input(anyhow::anyhow!(
                    "The arm `{}`: its settings file `{}` sets no `{key}`",
                    spec.name,
                    spec.settings.display()
                )));
            }
        }
        arms.push(Arm {
            name: spec.name.clone(),
            settings,
        });
    }
    Ok(arms)
}

impl Context {
    fn spent(&self) -> i64 {
        *lock(&self.spent_microusd)
    }

    /// Runs, grades and keeps one (task, arm, repeat), unless the budget is spent.
    async fn run_one(&self, task: &Task, arm: &Arm, repeat: u32) -> anyhow::Result<()> {
        if self.budget_microusd.is_some_and(|b| self.spent() >= b) {
            *lock(&self.not_started) += 1;
            return Ok(());
        }
        let started = Instant::now();
        let dir = self
            .request
            .out
            .join("runs")
            .join(&self.request.name)
            .join(&task.id)
            .join(format!("{}-{repeat}", arm.name));
        // What an interrupted run left is not a result: it starts over.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("Could not create `{}`", dir.display()))?;
        let image = task.image.clone().or_else(|| self.request.image.clone());
        let cache = self.request.out.join("tasks").join(&task.id);
        let record = match checkout::prepare(task, image.as_deref(), &cache, &dir).await {
            Err(reason) => RunRecord {
                task: task.id.clone(),
                arm: arm.name.clone(),
                repeat,
                graded: Graded::no_verdict(reason),
                verdict: Verdict::None,
                failure: None,
                usage: Vec::new(),
                wall_ms: 0,
                solve_ms: 0,
            },
            Ok((repo, base)) => {
                let solving = Instant::now();
                let ran = self.pipeline(task, arm, &repo, &dir).await;
                let solve_ms = solving.elapsed().as_millis() as u64;
                let usage = usage_of(&dir.join("data")).await;
                let executed = usage.iter().any(|u| u.role == "executor");
                let graded = match &ran.revision {
                    // A run that stopped before any executor worked (a provider failing
                    // the planner, say) says nothing of the arm.
                    Some(_) if ran.no_result && !executed => Graded::no_verdict(format!(
                        "the run stopped before any executor worked: {}",
                        ran.failure.as_deref().unwrap_or_default()
                    )),
                    Some(revision) => {
                        self.grader
                            .grade(
                                task,
                                &repo,
                                &base,
                                revision,
                                image.as_deref(),
                                &dir.join("grade"),
                            )
                            .await
                    }
                    None => Graded::no_verdict(ran.failure.clone().unwrap_or_default()),
                };
                RunRecord {
                    task: task.id.clone(),
                    arm: arm.name.clone(),
                    repeat,
                    graded,
                    verdict: ran.verdict,
                    failure: ran.failure,
                    usage,
                    wall_ms: 0,
                    solve_ms,
                }
            }
        };
        let record = RunRecord {
            wall_ms: started.elapsed().as_millis() as u64,
            ..record
        };
        store::insert(&self.db, &self.request.name, &record).await?;
        record_routing_outcome(&self.db, task, &record).await?;
        let spent = {
            let mut spent = lock(&self.spent_microusd);
            *spent += record.cost_microusd();
            *spent
        };
        let done = {
            let mut done = lock(&self.done);
            *done += 1;
            *done
        };
        eprintln!(
            "planwright eval: [{done}/{}] {} · {} · repeat {repeat} · {}{} · spent ${:.4}",
            self.total,
            task.id,
            arm.name,
            record.graded.grade.as_str(),
            match record.verdict {
                Verdict::None => String::new(),
                v => format!(" (planwright: {})", v.as_str()),
            },
            spent as f64 / 1_000_000.0
        );
        Ok(())
    }

    /// The task through `solve`'s flow with the arm's settings, its data in `dir/data`.
    async fn pipeline(&self, task: &Task, arm: &Arm, repo: &Path, dir: &Path) -> Ran {
        let stopped = |why: String| Ran {
            verdict: Verdict::None,
            revision: None,
            no_result: true,
            failure: Some(why),
        };
        let issue = match LocalIssue::parse(&task.problem_statement) {
            Ok(issue) => issue,
            Err(e) => return stopped(format!("the problem statement is no issue: {e:#}")),
        };
        let data = dir.join("data");
        if let Err(e) = share_images(&self.request.out, &data) {
            return stopped(format!("{e:#}"));
        }
        let mut settings = arm.settings.clone();
        settings.data_dir = data.clone();
        if let ProxyListen::Unix(_) = settings.model_proxy {
            settings.model_proxy = ProxyListen::Unix(data.join("model-proxy.sock"));
        }
        let opened = match solve::open(solve::Request {
            repo: repo.to_path_buf(),
            issue,
            approve: true,
            quiet: true,
        })
        .await
        {
            Ok(opened) => opened,
            Err(SolveError::Input(e) | SolveError::Failed(e)) => {
                return stopped(format!("the run could not start: {e:#}"));
            }
        };
        match solve::run(settings, opened).await {
            Ok(Ended::Passed { branch, .. }) => Ran {
                verdict: Verdict::Ready,
                revision: Some(branch),
                no_result: false,
                failure: None,
            },
            Ok(Ended::Failed { reason, branch, .. }) => Ran {
                verdict: Verdict::Draft,
                no_result: branch.is_none(),
                // No result at all: the base is what the run leaves.
                revision: Some(branch.unwrap_or_else(|| "main".to_owned())),
                failure: Some(reason),
            },
            Ok(Ended::Declined | Ended::Interrupted) => stopped("the run was interrupted".into()),
            Err(SolveError::Input(e) | SolveError::Failed(e)) => {
                stopped(format!("the run failed: {e:#}"))
            }
        }
    }
}

/// What a run of the pipeline left: planwright's verdict, the revision to grade (none
/// when the run never got going), and planwright's reason when it did not pass.
struct Ran {
    verdict: Verdict,
    revision: Option<String>,
    /// The run left no branch of its own.
    no_result: bool,
    failure: Option<String>,
}

/// Every run keeps its own database (each runs its own worker), but they share the
/// evaluation's image cache, which locks across processes.
fn share_images(out: &Path, data: &Path) -> anyhow::Result<()> {
    let shared = out.join("environments");
    std::fs::create_dir_all(&shared)
        .with_context(|| format!("Could not create `{}`", shared.display()))?;
    std::fs::create_dir_all(data)
        .with_context(|| format!("Could not create `{}`", data.display()))?;
    let shared = shared.canonicalize()?;
    std::os::unix::fs::symlink(&shared, data.join("environments"))
        .context("Could not share the image cache with the run")?;
    Ok(())
}

/// The model usage a run's own database holds, per role; none when it has none.
async fn usage_of(data: &Path) -> Vec<store::RoleUsage> {
    let file = data.join("planwright.db");
    if !file.exists() {
        return Vec::new();
    }
    let url = format!("sqlite://{}", file.display());
    match Db::open(&url).await {
        Ok(db) => store::usage_by_role(&db).await.unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Where a graded run becomes an outcome of the repository's routing records, with
/// source `eval`: the grade, not planwright's verdict, is what the attempt achieved.
/// The outcome rows are not part of this build yet, so nothing is written here.
async fn record_routing_outcome(_db: &Db, _task: &Task, record: &RunRecord) -> anyhow::Result<()> {
    tracing::debug!(
        task = %record.task,
        arm = %record.arm,
        grade = record.graded.grade.as_str(),
        "graded run (source eval)"
    );
    Ok(())
}
