//! `/healthz` (the process answers) and `/readyz` (the database answers too, and a
//! worker's sandbox starts).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    if let Some(reason) = state.runs.refusal() {
        let text = format!(
            "this worker takes no runs: {reason}; `planwright doctor` names what is missing"
        );
        return (StatusCode::SERVICE_UNAVAILABLE, text);
    }
    match tokio::time::timeout(Duration::from_secs(2), state.db.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready".to_owned()),
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "readiness check: the database does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "database unavailable".to_owned(),
            )
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "database timed out".to_owned(),
        ),
    }
}
