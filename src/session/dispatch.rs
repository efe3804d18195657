//! The one `match` that runs each kind of job: a new kind does not build until it is
//! handled here. An event goes to its handler; a plan or execute job that ends a round is
//! followed by the one step that starts what waited for it.

use std::sync::Arc;

use tracing::Instrument as _;

use super::jobs::{JobEnd, JobKind};
use super::{handlers, round, run};
use crate::app::App;
use crate::event::Event;
use crate::installation;
use crate::jobs::{Handler, Job, JobError};

/// The handler `serve` and `solve` give their workers.
pub fn handler(app: Arc<App>) -> Handler {
    Handler::new(move |job| run(app.clone(), job))
}

async fn run(app: Arc<App>, job: Job) -> Result<(), JobError> {
    let (session, ended) = match JobKind::parse(&job.kind, &job.payload)? {
        JobKind::Event(event) => return on_event(&app, &job, &event).await,
        JobKind::Plan(plan) => (
            plan.session.clone(),
            run::plan::plan_job(app.clone(), plan, job.attempt).await,
        ),
        JobKind::Execute(execute) => (
            execute.session.clone(),
            run::execute::execute_job(app.clone(), execute, job.attempt).await,
        ),
    };
    let result = match ended {
        Ok(JobEnd::RoundEnded) => {
            let span = tracing::info_span!("round", session = %session);
            round::ended(&app, &session).instrument(span).await
        }
        Ok(JobEnd::RoundGoesOn) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = &result
        && let Some(wait) = e.rate_limit_wait()
    {
        super::status::note_rate_limit(&app, &session, wait).await;
    }
    result
}

async fn on_event(app: &App, job: &Job, event: &Event) -> Result<(), JobError> {
    if let Event::Repository(repo_event) = event {
        // The delivery lets a retried job see what its first attempt already did.
        let delivery = job.delivery.as_ref().map(|d| d.as_str());
        return handlers::on_repo_event(app, repo_event, delivery).await;
    }
    installation::on_event(&job.db, event)
        .await
        .map_err(JobError::from)
}
