//! `GET /metrics` in the Prometheus text format (0.0.4): the database's picture (deliveries,
//! jobs, sessions, model usage) aggregated at scrape time, and the in-process counters of
//! sandbox runs that every run of this process bumps.

use std::fmt::{Display, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use secrecy::SecretString;

use super::AppState;
use crate::sandbox::{Output, SandboxError};
use crate::store::state::SessionState;
use crate::store::{Db, deliveries, jobs, model_usage, now_ms, runs, sessions};

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the sandbox run duration buckets: from a quick `git status`
/// to a full test suite near the default 30-minute wall-clock limit.
const DURATION_BUCKETS: [f64; 11] = [
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// How a sandbox run ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunOutcome {
    /// Exit code 0.
    Ok,
    /// Another exit code, or killed by a signal.
    Failed,
    /// Killed at the wall-clock limit.
    Timeout,
    /// The sandbox could not start the command.
    Error,
}

impl RunOutcome {
    const ALL: [RunOutcome; 4] = [
        RunOutcome::Ok,
        RunOutcome::Failed,
        RunOutcome::Timeout,
        RunOutcome::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Ok => "ok",
            RunOutcome::Failed => "failed",
            RunOutcome::Timeout => "timeout",
            RunOutcome::Error => "error",
        }
    }

    fn of(result: &Result<Output, SandboxError>) -> Self {
        match result {
            Ok(out) if out.timed_out => RunOutcome::Timeout,
            Ok(out) if out.exit.success() => RunOutcome::Ok,
            Ok(_) => RunOutcome::Failed,
            Err(_) => RunOutcome::Error,
        }
    }
}

/// Sandbox runs of this process: counts by outcome and a duration histogram. Process-wide
/// because sandboxes are made wherever a job needs one, far from the router's state.
struct SandboxRuns {
    outcomes: [AtomicU64; RunOutcome::ALL.len()],
    /// Per bucket, not cumulative; the last slot is beyond the largest bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

static SANDBOX_RUNS: SandboxRuns = SandboxRuns {
    outcomes: [const { AtomicU64::new(0) }; RunOutcome::ALL.len()],
    buckets: [const { AtomicU64::new(0) }; DURATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64::new(0),
};

/// Counts one sandbox run that took `elapsed`, by how it ended.
pub fn record_sandbox_run(result: &Result<Output, SandboxError>, elapsed: Duration) {
    let outcome = RunOutcome::of(result);
    let slot = RunOutcome::ALL
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or_default();
    SANDBOX_RUNS.outcomes[slot].fetch_add(1, Ordering::Relaxed);
    let secs = elapsed.as_secs_f64();
    let bucket = DURATION_BUCKETS
        .iter()
        .position(|bound| secs <= *bound)
        .unwrap_or(DURATION_BUCKETS.len());
    SANDBOX_RUNS.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    SANDBOX_RUNS.sum_micros.fetch_add(micros, Ordering::Relaxed);
}

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

    out.family(
        "planwright_build_info",
        "gauge",
        "The running planwright version (always 1).",
    );
    out.sample(
        "planwright_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );

    let deliveries = deliveries::counts(db).await?;
    out.family(
        "planwright_deliveries_total",
        "counter",
        "Webhook deliveries accepted and stored, by forge, event and outcome (queued: jobs \
         enqueued; ignored: nothing to do; rejected: signed but unreadable).",
    );
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
    out.family(
        "planwright_jobs",
        "gauge",
        "Jobs in the durable queue, by kind and state (queued, running, done, dead).",
    );
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
    out.family(
        "planwright_queue_oldest_age_seconds",
        "gauge",
        "How long the oldest job that is due has been waiting for a worker (0: none waits).",
    );
    let age = oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
    out.sample("planwright_queue_oldest_age_seconds", &[], age);

    let sessions = sessions::counts(db).await?;
    out.family(
        "planwright_sessions",
        "gauge",
        "Sessions by state; ended ones (pr_opened, failed, cancelled) stay counted.",
    );
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
    out.family(
        "planwright_executor_runs",
        "gauge",
        "Executor attempts by executor and state (running, verified, published, failed, abandoned).",
    );
    for (executor, state, n) in &runs {
        out.sample(
            "planwright_executor_runs",
            &[("executor", executor.as_str()), ("state", state.as_str())],
            n,
        );
    }

    let usage = model_usage::totals(db).await?;
    out.family(
        "planwright_model_tokens_total",
        "counter",
        "Model tokens used, by role, provider, model and kind (input, output, cache_read, \
         cache_write).",
    );
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
    out.family(
        "planwright_model_cost_usd_total",
        "counter",
        "What model calls cost in US dollars, at the configured prices, by role, provider \
         and model.",
    );
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

    out.family(
        "planwright_sandbox_runs_total",
        "counter",
        "Commands run in a sandbox by this process, by outcome (ok, failed: non-zero exit or \
         signal, timeout: killed at the wall-clock limit, error: could not start).",
    );
    for (outcome, n) in RunOutcome::ALL.iter().zip(&SANDBOX_RUNS.outcomes) {
        out.sample(
            "planwright_sandbox_runs_total",
            &[("outcome", outcome.as_str())],
            n.load(Ordering::Relaxed),
        );
    }
    out.family(
        "planwright_sandbox_run_duration_seconds",
        "histogram",
        "Wall-clock time of sandbox runs in this process, start to exit.",
    );
    let mut cumulative = 0;
    for (i, count) in SANDBOX_RUNS.buckets.iter().enumerate() {
        cumulative += count.load(Ordering::Relaxed);
        let bound = DURATION_BUCKETS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), f64::to_string);
        out.sample(
            "planwright_sandbox_run_duration_seconds_bucket",
            &[("le", &bound)],
            cumulative,
        );
    }
    out.sample(
        "planwright_sandbox_run_duration_seconds_sum",
        &[],
        SANDBOX_RUNS.sum_micros.load(Ordering::Relaxed) as f64 / 1_000_000.0,
    );
    out.sample(
        "planwright_sandbox_run_duration_seconds_count",
        &[],
        cumulative,
    );
    Ok(out.text)
}

#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// A label value as the text format needs it: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        let mut out = Exposition::default();
        out.sample("m", &[("a", "x\"y"), ("b", "z")], 3);
        assert_eq!(out.text, "m{a=\"x\\\"y\",b=\"z\"} 3\n");
    }

    #[test]
    fn help_text_stays_on_one_line() {
        let mut out = Exposition::default();
        out.family("m", "counter", "first\nsecond \\ third");
        assert_eq!(
            out.text,
            "# HELP m first\\nsecond \\\\ third\n# TYPE m counter\n"
        );
    }
}
