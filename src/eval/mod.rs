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
use crate::contract::Risk;
use crate::event::ForgeKind;
use crate::executor::{AttemptLimits, Builtin, Executor as _, ExecutorTask, StopReason};
use crate::forge::local::LocalIssue;
use crate::ids::{ModelName, RepoName, RunId};
use crate::llm::HttpOptions;
use crate::metering::{Metered, ModelRole};
use crate::solve::{self, Ended, SolveError};
use crate::store::Db;
use crate::store::model_usage::Spent;
use crate::store::outcomes::{NewOutcome, OutcomeSource, ReviewerVerdict, RoleSpend};
use grade::{Grade, Graded, Grader};
use store::{RunRecord, Verdict};
use tasks::Task;

/// One configuration to compare: its name and how its runs are made.
#[derive(Debug, Clone)]
pub struct ArmSpec {
    pub name: String,
    pub kind: ArmKind,
}

/// How an arm's runs are made.
#[derive(Debug, Clone)]
pub enum ArmKind {
    /// planwright's flow with the settings in this file.
    Settings(PathBuf),
    /// The baseline: one model (`provider:model`) given the raw issue, with the builtin
    /// executor's tools and sandbox, and no planner, contract or distillation; provider
    /// keys and addresses come from the evaluation's own settings (`--config`).
    Monolithic(String),
}

/// How a monolithic arm is spelt: `NAME=monolithic:PROVIDER:MODEL`.
const MONOLITHIC: &str = "monolithic:";

impl ArmSpec {
    /// `NAME=SETTINGS_FILE`, or `NAME=monolithic:PROVIDER:MODEL`.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let (name, file) = text.split_once('=').with_context(|| {
            format!(
                "Cannot read the arm `{text}`: write it as NAME=SETTINGS_FILE or \
                 NAME=monolithic:PROVIDER:MODEL"
            )
        })?;
        anyhow::ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
            "Cannot use `{name}` as an arm's name: use letters, digits, `-`, `_` and `.`"
        );
        anyhow::ensure!(!file.is_empty(), "The arm `{name}` names no settings file");
        let kind = match file.strip_prefix(MONOLITHIC) {
            Some(model) => {
                ModelName::parse(model).map_err(|e| {
                    anyhow::anyhow!("The arm `{name}` (monolithic:PROVIDER:MODEL): {e}")
                })?;
                ArmKind::Monolithic(model.to_owned())
            }
            None => ArmKind::Settings(PathBuf::from(file)),
        };
        Ok(ArmSpec {
            name: name.to_owned(),
            kind,
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
    /// The monolithic arm's one model; `None` for planwright's flow.
    monolithic: Option<ModelName>,
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
/// that names no planner or executor model, refuses the whole evaluation, as does a
/// monolithic arm whose model the evaluation's settings cannot call.
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
        let arm = match &spec.kind {
            ArmKind::Settings(file) => settings_arm(request, &spec.name, file)?,
            ArmKind::Monolithic(model) => monolithic_arm(request, &spec.name, model)?,
        };
        arms.push(arm);
    }
    Ok(arms)
}

/// An arm running planwright's flow with the settings in `file`.
fn settings_arm(request: &Request, name: &str, file: &Path) -> Result<Arm, EvalError> {
    if !file.is_file() {
        return Err(EvalError::Input(anyhow::anyhow!(
            "The arm `{name}`: its settings file `{}` is not there",
            file.display()
        )));
    }
    let settings = Settings::load_with_data_dir(Some(file), &request.out).map_err(|e| {
        EvalError::Input(e.context(format!(
            "The arm `{name}`: its settings file `{}` does not load",
            file.display()
        )))
    })?;
    for (model, key) in [
        (&settings.models.planner, "planner_model"),
        (&settings.models.executor, "executor_model"),
    ] {
        if model.is_none() {
            return Err(EvalError::Input(anyhow::anyhow!(
                "The arm `{name}`: its settings file `{}` sets no `{key}`",
                file.display()
            )));
        }
    }
    Ok(Arm {
        name: name.to_owned(),
        settings,
        monolithic: None,
    })
}

/// A monolithic arm: the evaluation's settings (`--config`) with `model` as the one
/// model, checked to be callable and priced.
fn monolithic_arm(request: &Request, name: &str, model: &str) -> Result<Arm, EvalError> {
    let refuse = |e: anyhow::Error| {
        EvalError::Input(e.context(format!("The arm `{name}` (monolithic:{model})")))
    };
    let mut settings =
        Settings::load_with_data_dir(request.config.as_deref(), &request.out).map_err(refuse)?;
    let parsed = ModelName::parse(model).map_err(|e| refuse(e.into()))?;
    crate::llm::client(&parsed, &settings.models, &HttpOptions::default()).map_err(refuse)?;
    if settings.models.prices.get(&parsed).is_none() {
        return Err(refuse(anyhow::anyhow!(
            "planwright has no price for `{model}`: add it to the settings' prices"
        )));
    }
    settings.models.executor = Some(model.to_owned());
    Ok(Arm {
        name: name.to_owned(),
        settings,
        monolithic: Some(parsed),
    })
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
        // The monolithic arm's checkout is its executor's sandbox folder, which its
        // records must lie outside.
        let checkout_in = match arm.monolithic {
            Some(_) => dir.join("work"),
            None => dir.clone(),
        };
        let record = match checkout::prepare(task, image.as_deref(), &cache, &checkout_in).await {
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
                let ran = match &arm.monolithic {
                    Some(model) => {
                        self.monolithic(task, arm, model, &repo, image.as_deref(), &dir)
                            .await
                    }
                    None => self.pipeline(task, arm, &repo, &dir).await,
                };
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
        let facts = run_facts(&dir.join("data"), arm).await;
        record_routing_outcome(&self.db, &self.request.name, task, &record, &facts).await?;
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

impl Context {
    /// The monolithic baseline on the task: the builtin executor, with the arm's one
    /// model (metered as the executor, in `dir/data`), the task's problem statement as
    /// its whole brief, in the sandbox and the task's image, working in the checkout
    /// `repo` (inside `dir/work`). What it leaves is committed for grading. planwright
    /// gives no verdict of its own here: nothing was planned to verify against.
    async fn monolithic(
        &self,
        task: &Task,
        arm: &Arm,
        model: &ModelName,
        repo: &Path,
        image: Option<&str>,
        dir: &Path,
    ) -> Ran {
        let stopped = |why: String| Ran {
            verdict: Verdict::None,
            revision: None,
            no_result: true,
            failure: Some(why),
        };
        let data = dir.join("data");
        let executor = match self.monolithic_executor(arm, model, &data).await {
            Ok(executor) => executor,
            Err(e) => return stopped(format!("the run could not start: {e:#}")),
        };
        // The lease keeps the image from eviction while the executor works.
        let lease = match image {
            Some(image) => match self.grader.pull(image).await {
                Ok(lease) => Some(lease),
                Err(e) => return stopped(format!("the image did not pull: {e:#}")),
            },
            None => None,
        };
        let root = dir.join("work");
        let home = root.join("home");
        if let Err(e) = std::fs::create_dir_all(&home) {
            return stopped(format!("could not create `{}`: {e}", home.display()));
        }
        let limits = AttemptLimits {
            wall: arm.settings.executor_timeout,
            ..AttemptLimits::default()
        };
        let work = ExecutorTask {
            root,
            repo: repo.to_path_buf(),
            env: vec![("HOME".into(), home.display().to_string())],
            read_only: Vec::new(),
            environment: lease.as_ref().map(|l| l.sandbox_root()),
            brief: monolithic_brief(&task.problem_statement),
            instructions: None,
            feedback: None,
            continues: None,
            hint: None,
            limits,
            records: dir.join("records"),
        };
        let failure = match executor.run(&work).await {
            Ok(report) => match report.stop {
                StopReason::Finished => None,
                other => Some(format!("the executor stopped: {}", other.as_str())),
            },
            Err(e) => Some(format!("the executor failed: {e}")),
        };
        let committed = async {
            checkout::git(repo, &["add", "--all", "--force"]).await?;
            let mut args = checkout::AUTHOR.to_vec();
            args.extend([
                "commit",
                "--quiet",
                "--no-verify",
                "--allow-empty",
                "-m",
                "monolithic result",
            ]);
            checkout::git(repo, &args).await?;
            checkout::git(repo, &["rev-parse", "HEAD"]).await
        };
        match committed.await {
            Ok(head) => Ran {
                verdict: Verdict::None,
                revision: Some(head),
                no_result: failure.is_some(),
                failure,
            },
            Err(e) => stopped(format!("the result could not be committed: {e:#}")),
        }
    }

    /// The builtin executor on `model`, its calls metered as the executor's in the
    /// run's own database under `data`.
    async fn monolithic_executor(
        &self,
        arm: &Arm,
        model: &ModelName,
        data: &Path,
    ) -> anyhow::Result<Builtin> {
        std::fs::create_dir_all(data)
            .with_context(|| format!("Could not create `{}`", data.display()))?;
        let db = Db::open(&format!("sqlite://{}/planwright.db", data.display())).await?;
        let models = &arm.settings.models;
        let client = crate::llm::client(model, models, &HttpOptions::default())?;
        let metered = Metered::new(client, &models.prices, db, ModelRole::Executor)?
            .for_run(RunId::generate(), AttemptLimits::default().budget);
        Ok(Builtin::new(Arc::new(metered), self.grader.sandbox.clone()))
    }
}

/// What the monolithic arm's model is given: the issue as its reporter wrote it.
fn monolithic_brief(problem_statement: &str) -> String {
    format!(
        "# The issue to resolve\n\n{}\n",
        problem_statement.trim_end()
    )
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

/// What a run's own records say of the attempt routing learns from: its risk, executor,
/// model and rung.
#[derive(Debug, Clone, PartialEq)]
struct RunFacts {
    risk: Risk,
    executor: String,
    model: Option<String>,
    rung: i64,
}

/// The last attempt's facts from the run's own database under `data`, when it holds
/// one; else the arm's executor model, and the contract's risk when there is a
/// contract (medium when there is none, as for the monolithic arm).
async fn run_facts(data: &Path, arm: &Arm) -> RunFacts {
    let mut facts = RunFacts {
        risk: Risk::Medium,
        executor: "builtin".to_owned(),
        model: arm.settings.models.executor.clone(),
        rung: 0,
    };
    let file = data.join("planwright.db");
    if !file.exists() {
        return facts;
    }
    let Ok(db) = Db::open(&format!("sqlite://{}", file.display())).await else {
        return facts;
    };
    let last: Option<(String, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT risk, executor, model, rung FROM attempt_outcomes \
         ORDER BY created_at DESC LIMIT 1",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap_or_default();
    if let Some((risk, executor, model, rung)) = last {
        facts.risk = parse_risk(&risk).unwrap_or(facts.risk);
        facts.executor = executor;
        facts.model = model.or(facts.model);
        facts.rung = rung;
        return facts;
    }
    let contract: Option<(String,)> =
        sqlx::query_as("SELECT body FROM contracts ORDER BY created_at DESC LIMIT 1")
            .fetch_optional(&db.pool)
            .await
            .unwrap_or_default();
    if let Some(risk) = contract
        .and_then(|(body,)| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|c| c.pointer("/routing/risk")?.as_str().and_then(parse_risk))
    {
        facts.risk = risk;
    }
    facts
}

fn parse_risk(text: &str) -> Option<Risk> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
}

/// The repository an evaluation's task counts for in the routing records:
/// `eval/FOLDER`, FOLDER being the name of the task's repository folder or bundle
/// (`.git` and `.bundle` left off), else its instance id, lower-cased, with anything
/// but letters, digits, `-`, `_` and `.` made `-`.
fn task_repo(task: &Task) -> anyhow::Result<RepoName> {
    let folder = task
        .repo
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .map(|n| {
            n.trim_end_matches(".bundle")
                .trim_end_matches(".git")
                .to_owned()
        })
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .unwrap_or_else(|| task.id.clone());
    let clean: String = folder
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    RepoName::parse(&format!("eval/{clean}"))
        .with_context(|| format!("The task `{}` gives no repository name", task.id))
}

/// The outcome's run: the same for the same (evaluation, task, arm, repeat), so an
/// evaluation resumed, or written again, keeps one row per run.
fn outcome_run(evaluation: &str, record: &RunRecord) -> RunId {
    use sha2::Digest as _;
    let key = format!(
        "{evaluation}\n{}\n{}\n{}",
        record.task, record.arm, record.repeat
    );
    let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    RunId(format!("eval-{}", &digest[..32]))
}

/// A graded run as an outcome of the repository's routing records, with source `eval`:
/// the grade, not planwright's verdict, is what the attempt achieved (verified when
/// resolved; judged unless there is no verdict).
async fn record_routing_outcome(
    db: &Db,
    evaluation: &str,
    task: &Task,
    record: &RunRecord,
    facts: &RunFacts,
) -> anyhow::Result<()> {
    let run = outcome_run(evaluation, record);
    let repo = task_repo(task)?;
    let spent = |role: &str| {
        record
            .usage
            .iter()
            .filter(|u| u.role == role)
            .fold(Spent::default(), |sum, u| Spent {
                cost_microusd: sum.cost_microusd + u.cost_microusd,
                tokens: sum.tokens
                    + u.input_tokens
                    + u.output_tokens
                    + u.cache_read_tokens
                    + u.cache_write_tokens,
            })
    };
    let grade = record.graded.grade;
    db.record_outcome(&NewOutcome {
        run: &run,
        forge: ForgeKind::Local,
        repo: &repo,
        session: None,
        version: None,
        risk: facts.risk,
        executor: &facts.executor,
        model: facts.model.as_deref(),
        rung: facts.rung,
        verified: grade == Grade::Resolved,
        judged: grade.counts(),
        why_not: record.graded.reason.as_deref(),
        verdict: match record.verdict {
            Verdict::Ready => ReviewerVerdict::Accepted,
            Verdict::Draft | Verdict::None => ReviewerVerdict::None,
        },
        attempt: 1,
        spend: RoleSpend {
            planner: spent("planner"),
            scout: spent("scout"),
            executor: spent("executor"),
            reviewer: spent("reviewer"),
        },
        wall_ms: record.wall_ms as i64,
        files_changed: None,
        source: OutcomeSource::Eval,
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(repo: &str, id: &str) -> Task {
        Task {
            id: id.to_owned(),
            repo: PathBuf::from(repo),
            base_commit: "main".to_owned(),
            problem_statement: "Title".to_owned(),
            test_patch: String::new(),
            fail_to_pass: Vec::new(),
            pass_to_pass: tasks::PassToPass::Listed(Vec::new()),
            image: None,
            test_cmd: None,
            setup: Vec::new(),
        }
    }

    fn record(arm: &str, repeat: u32, graded: Graded) -> RunRecord {
        RunRecord {
            task: "a-1".to_owned(),
            arm: arm.to_owned(),
            repeat,
            graded,
            verdict: Verdict::Draft,
            failure: None,
            usage: vec![store::RoleUsage {
                role: "executor".to_owned(),
                input_tokens: 10,
                output_tokens: 5,
                cost_microusd: 70,
                ..store::RoleUsage::default()
            }],
            wall_ms: 1_000,
            solve_ms: 900,
        }
    }

    fn graded(grade: Grade) -> Graded {
        Graded {
            grade,
            ..Graded::no_verdict("why")
        }
    }

    #[test]
    fn a_task_counts_for_a_repository_named_after_its_folder() {
        let name = |repo: &str, id: &str| task_repo(&task(repo, id)).unwrap().to_string();
        assert_eq!(name("/x/bundles/toolz.bundle", "t-1"), "eval/toolz");
        assert_eq!(name("/x/repos/My Repo.git", "t-1"), "eval/my-repo");
        assert_eq!(
            name("/", "django__django-11099"),
            "eval/django__django-11099"
        );
    }

    #[tokio::test]
    async fn each_graded_run_is_one_eval_outcome_whose_verification_is_the_grade() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&format!("sqlite://{}/planwright.db", dir.path().display()))
            .await
            .unwrap();
        let task = task("/x/toolz.bundle", "a-1");
        let facts = RunFacts {
            risk: Risk::Low,
            executor: "builtin".to_owned(),
            model: Some("anthropic:claude-sonnet-4-5".to_owned()),
            rung: 0,
        };
        let runs = [
            record("gold", 1, graded(Grade::Resolved)),
            record("wrong", 1, graded(Grade::Unresolved)),
            record("gold", 2, graded(Grade::NoVerdict)),
        ];
        for run in &runs {
            record_routing_outcome(&db, "tasks", &task, run, &facts)
                .await
                .unwrap();
        }
        // Written again, as a resumed evaluation would: still one row per run.
        record_routing_outcome(&db, "tasks", &task, &runs[0], &facts)
            .await
            .unwrap();
        let rows: Vec<(String, String, String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT run_id, repo, source, verified, judged, executor_tokens, executor_microusd \
             FROM attempt_outcomes ORDER BY run_id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 3, "{rows:?}");
        for run in &runs {
            let id = outcome_run("tasks", run);
            let row = rows.iter().find(|r| r.0 == id.as_str()).unwrap();
            assert_eq!((row.1.as_str(), row.2.as_str()), ("eval/toolz", "eval"));
            assert_eq!(row.3, i64::from(run.graded.grade == Grade::Resolved));
            assert_eq!(row.4, i64::from(run.graded.grade != Grade::NoVerdict));
            assert_eq!((row.5, row.6), (15, 70));
        }
        // Another evaluation's run of the same task and arm is another outcome.
        assert_ne!(
            outcome_run("tasks", &runs[0]),
            outcome_run("other", &runs[0])
        );
    }
}
