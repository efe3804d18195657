//! `/healthz` (the process answers) and `/readyz` (the database answers too).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match tokio::time::timeout(Duration::from_secs(2), state.db.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready"),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "readiness check: the database does not answer");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database timed out"),
    }
}
