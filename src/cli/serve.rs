//! `planwright serve`: the webhook server and the job workers until SIGTERM or Ctrl-C,
//! which stop new requests and jobs and let running ones finish.

use crate::config::Settings;
use crate::server::{self, Role};

use super::exit::ExitStatus;

pub(super) async fn run(settings: Settings, role: Role) -> anyhow::Result<ExitStatus> {
    let running = server::start(settings, role, crate::session::dispatch::handler).await?;
    let stopper = running.stopper();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new requests or jobs");
        stopper.cancel();
    });
    running.wait().await?;
    Ok(ExitStatus::Success)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
