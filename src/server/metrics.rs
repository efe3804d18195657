//! `GET /metrics` in the Prometheus text format (0.0.4): the database's picture (deliveries,
//! jobs, sessions, model usage) aggregated at scrape time, then this process's own counters
//! from [`crate::metrics`].

use anyhow::Result;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use secrecy::SecretString;

use super::AppState;
use crate::metrics::{Exposition, Family};
use crate::store::state::SessionState;
use crate::store::{Db, deliveries, jobs, model_usage, now_ms, runs, sessions};

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` on the main listener: for a holder of METRICS_TOKEN or ADMIN_TOKEN only.
pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let settings = &state.settings;
    let accepted: Vec<&SecretString> = [&settings.admin_token, &settings.metrics_token]
        .into_iter()
        .flatten()
        .collect();
    if accepted.is_empty() {
        return (
            StatusCode::FORBIDDEN,
            "Metrics are not served here: set METRICS_TOKEN (or ADMIN_TOKEN) and scrape with \
             Authorization: Bearer <token>, or give them a private listener with METRICS_LISTEN\n",
        )
            .into_response();
    }
    if !super::operator::authorized(&headers, accepted) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"planwright\"")],
            "Cannot show the metrics without a token: send Authorization: Bearer <METRICS_TOKEN or ADMIN_TOKEN>\n",
        )
            .into_response();
    }
    exposition(&state.db).await
}

/// The listener METRICS_LISTEN names: `/metrics` alone, without a token, for a network the
/// operator keeps private.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<AppState>| async move { exposition(&state.db).await }),
        )
        .with_state(state)
}

async fn exposition(db: &Db) -> Response {
    match render(db).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "Could not read the metrics from the database");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "Could not read the metrics from the database",
            )
                .into_response()
        }
    }
}

/// The whole exposition: database aggregates first, then this process's counters.
pub async fn render(db: &Db) -> Result<String> {
    let mut out = Exposition::default();

    out.family(&Family::BUILD_INFO);
    out.sample(
        "planwright_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );

    queue(db, &mut out).await?;
    work(db, &mut out).await?;
    usage(db, &mut out).await?;
    crate::metrics::render_process(&mut out);
    crate::forge::budget::render(&mut out);
    Ok(out.into_text())
}

/// Deliveries and the job queue.
async fn queue(db: &Db, out: &mut Exposition) -> Result<()> {
    let deliveries = deliveries::counts(db).await?;
    out.family(&Family::DELIVERIES);
    for (forge, event, outcome, n) in &deliveries {
        out.sample(
            "planwright_deliveries_total",
            &[
                ("forge", forge.as_str()),
                ("event", event.as_str()),
                ("outcome", outcome.as_str()),
            ],
            n,
        );
    }

    let jobs = jobs::counts(db).await?;
    out.family(&Family::JOBS);
    for (kind, state, n) in &jobs {
        out.sample(
            "planwright_jobs",
            &[("kind", kind.as_str()), ("state", state.as_str())],
            n,
        );
    }

    // Only jobs due now are waiting; one held back for a retry's backoff is not late.
    let now = now_ms();
    let oldest = jobs::oldest_due(db, now).await?;
    out.family(&Family::QUEUE_OLDEST_AGE);
    let age = oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
    out.sample("planwright_queue_oldest_age_seconds", &[], age);

    // The same figures as the view planwright_work_waiting, read from it, for an HPA
    // through a metrics adapter.
    let work = jobs::work_waiting(db).await?;
    out.family(&Family::WORK_WAITING);
    out.sample(
        "planwright_work_waiting",
        &[("work", "runs")],
        work.runs_waiting,
    );
    out.sample(
        "planwright_work_waiting",
        &[("work", "jobs")],
        work.jobs_waiting,
    );
    out.family(&Family::WORK_RUNNING);
    out.sample(
        "planwright_work_running",
        &[("work", "runs")],
        work.runs_running,
    );
    out.sample(
        "planwright_work_running",
        &[("work", "jobs")],
        work.jobs_running,
    );

    Ok(())
}

/// Sessions and executor runs.
async fn work(db: &Db, out: &mut Exposition) -> Result<()> {
    let sessions = sessions::counts(db).await?;
    out.family(&Family::SESSIONS);
    // Every state is present, at 0 when empty, so a dashboard's series never vanish.
    for state in SessionState::ALL {
        let n = sessions
            .iter()
            .filter(|(s, _)| s == state.as_str())
            .map(|(_, n)| *n)
            .sum::<i64>();
        out.sample("planwright_sessions", &[("state", state.as_str())], n);
    }
    for (state, n) in &sessions {
        if !SessionState::ALL.iter().any(|s| s.as_str() == state) {
            out.sample("planwright_sessions", &[("state", state.as_str())], n);
        }
    }

    let runs = runs::counts(db).await?;
    out.family(&Family::EXECUTOR_RUNS);
    for (executor, state, n) in &runs {
        out.sample(
            "planwright_executor_runs",
            &[("executor", executor.as_str()), ("state", state.as_str())],
            n,
        );
    }

    let attempts = db.attempt_counts().await?;
    out.family(&Family::ATTEMPTS);
    for a in &attempts {
        out.sample(
            "planwright_attempts_total",
            &[
                ("source", a.source.as_str()),
                ("executor", a.executor.as_str()),
                ("model", a.model.as_str()),
                ("outcome", a.outcome.as_str()),
            ],
            a.attempts,
        );
    }

    Ok(())
}

/// Model tokens and cost.
async fn usage(db: &Db, out: &mut Exposition) -> Result<()> {
    let usage = model_usage::totals(db).await?;
    out.family(&Family::MODEL_TOKENS);
    for u in &usage {
        for (kind, n) in [
            ("input", u.input),
            ("output", u.output),
            ("cache_read", u.cache_read),
            ("cache_write", u.cache_write),
        ] {
            out.sample(
                "planwright_model_tokens_total",
                &[
                    ("role", u.role.as_str()),
                    ("provider", u.provider.as_str()),
                    ("model", u.model.as_str()),
                    ("kind", kind),
                ],
                n,
            );
        }
    }
    out.family(&Family::MODEL_COST);
    for u in &usage {
        out.sample(
            "planwright_model_cost_usd_total",
            &[
                ("role", u.role.as_str()),
                ("provider", u.provider.as_str()),
                ("model", u.model.as_str()),
            ],
            u.cost_microusd as f64 / 1_000_000.0,
        );
    }

    Ok(())
}
