//! `planwright eval`: runs [`crate::eval`] and says where the reports are: 0 when every
//! planned run was graded, 1 when the budget stopped it first (run it again to go on),
//! 2 on bad input.

use std::path::{Path, PathBuf};

use crate::eval::{self, ArmSpec, EvalError};

use super::exit::{Error, ExitStatus};

/// What the command line gave `eval`.
pub(super) struct Args {
    pub tasks: PathBuf,
    pub arms: Vec<String>,
    pub out: PathBuf,
    pub name: Option<String>,
    pub repeat: u32,
    pub budget: Option<f64>,
    pub jobs: usize,
    pub image: Option<String>,
}

pub(super) fn run(config: Option<&Path>, args: Args) -> Result<ExitStatus, Error> {
    let arms = args
        .arms
        .iter()
        .map(|a| ArmSpec::parse(a))
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(Error::Input)?;
    if let Some(budget) = args.budget
        && (budget.is_nan() || budget <= 0.0)
    {
        return Err(Error::Input(anyhow::anyhow!(
            "Cannot use --budget {budget}: give a positive amount in US dollars"
        )));
    }
    let name = match args.name {
        Some(name) => name,
        None => args
            .tasks
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "evaluation".to_owned()),
    };
    let request = eval::Request {
        tasks: args.tasks,
        arms,
        out: args.out,
        name,
        repeat: args.repeat,
        budget_usd: args.budget,
        jobs: args.jobs,
        image: args.image,
        config: config.map(Path::to_path_buf),
    };
    super::runtime::init_tracing(crate::config::LogFormat::Text, "warn");
    let runtime = super::runtime::runtime()?;
    let finished = runtime.block_on(eval::run(request)).map_err(|e| match e {
        EvalError::Input(e) => Error::Input(e),
        EvalError::Failed(e) => Error::Failed(e),
    })?;
    for arm in &finished.report.arms {
        println!(
            "{}: {} of {} graded runs resolved, {} no verdict, ${:.4}",
            arm.name,
            arm.resolved,
            arm.resolved + arm.unresolved,
            arm.no_verdict,
            arm.cost_microusd as f64 / 1_000_000.0
        );
    }
    for path in &finished.written {
        println!("report: {}", path.display());
    }
    if finished.not_started > 0 {
        println!(
            "planwright eval: the budget is spent; {} run(s) not started. Run the same command again (with a larger --budget) to go on.",
            finished.not_started
        );
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}
