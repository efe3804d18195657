//! The HTTP side of `serve`: the axum router (webhooks, health, status and setup pages), and the process wiring
//! that runs it beside the job workers and the model proxy and shuts them down in order.

pub mod health;
pub mod html;
pub mod metrics;
pub mod operator;
pub mod pages;
pub mod registration;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;
use tracing::{info, info_span, warn};

use crate::app::{App, Forges};
use crate::config::Settings;
use crate::jobs::{Handler, Waker, Worker};
use crate::metering::proxy::{self, Capabilities, ModelProxy, ProxyState};
use crate::store::Db;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub settings: Arc<Settings>,
    pub waker: Waker,
    /// The forges the job handlers use; webhook verification reads the GitHub secrets here.
    pub forges: Arc<Forges>,
    pub onboarding: registration::Onboarding,
    /// Turns for reading GitHub bodies whose signature is not checked yet (WEBHOOK_BODY_READS).
    pub unverified_reads: Arc<tokio::sync::Semaphore>,
    /// Where verified deliveries are written, several to a transaction.
    pub inbox: crate::store::deliveries::Inbox,
    /// The signed-in pages' cookie key.
    pub pages: pages::Pages,
    /// Whether this process takes runs (`/readyz` says why not): a worker's sandbox that
    /// cannot start, or has not been checked yet, closes it.
    pub runs: crate::jobs::RunGate,
}

/// Which parts of planwright this process runs (several processes can share PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Webhooks and job workers.
    All,
    /// Webhooks only.
    Web,
    /// Job workers only (with /healthz and /readyz for probes).
    Worker,
}

pub fn router(state: AppState, role: Role) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/assets/live.js", get(pages::live_script));
    // Moved to a listener of its own, the main one (often public) does not serve it at all.
    if state.settings.metrics_listen.is_none() {
        router = router.route("/metrics", get(metrics::metrics));
    }
    if role != Role::Worker {
        router = router
            .route("/webhooks/github", post(webhooks::github::receive))
            .route("/webhooks/gitlab", post(webhooks::gitlab::receive))
            .merge(
                Router::new()
                    .route(
                        "/",
                        get(registration::index)
                            .post(registration::token_form)
                            .layer(DefaultBodyLimit::max(registration::FORM_LIMIT)),
                    )
                    .route(registration::CALLBACK_PATH, get(registration::callback))
                    .route(
                        "/sign-in",
                        get(pages::sign_in_form)
                            .post(pages::sign_in)
                            .layer(DefaultBodyLimit::max(registration::FORM_LIMIT)),
                    )
                    .route(
                        "/sign-out",
                        post(pages::sign_out)
                            .layer(DefaultBodyLimit::max(registration::FORM_LIMIT)),
                    )
                    .route("/sign-in/{forge}", get(pages::forge_sign_in))
                    .route("/sign-in/{forge}/callback", get(pages::forge_callback))
                    .route("/sessions/{id}", get(pages::session_page))
                    .route("/repos/{forge}/{*repo}", get(pages::repository_page))
                    .route(
                        "/sessions/{id}/attempts/{run}/transcript",
                        get(pages::transcript_page),
                    )
                    .route(
                        "/sessions/{id}/attempts/{run}/transcript/raw",
                        get(pages::transcript_raw),
                    )
                    .layer(axum::middleware::map_response(pages::private_headers)),
            );
    }
    // Webhook bodies keep the handlers' own limit and timeout (JSON 413 and 408, the HMAC fed
    // as the body streams): tower-http's limit fails a chunked excess as a read error (400),
    // and its timeouts bound the whole handler or only the wait for each frame.
    router
        .layer(DefaultBodyLimit::max(state.settings.webhook_body_limit))
        .layer(
            TraceLayer::new_for_http()
                // The path alone: `/?token=` carries the setup token, which stays out of logs.
                .make_span_with(|request: &Request| {
                    info_span!("request", method = %request.method(), path = request.uri().path())
                })
                // Handlers log their own failures, with their cause.
                .on_failure(()),
        )
        .with_state(state)
}

/// How long a worker whose sandbox failed its check waits before checking again.
const SANDBOX_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Checks that sandboxed commands run in this process and opens `gate` once they do;
/// while they do not, the gate says why and the check is repeated.
async fn check_sandbox(app: Arc<App>, gate: crate::jobs::RunGate, stop: CancellationToken) {
    loop {
        match sandbox_refusal(&app).await {
            None => {
                gate.set(None);
                info!("the sandbox starts: this worker takes runs");
                return;
            }
            Some(reason) => {
                warn!(%reason, "this worker takes no runs: its sandbox cannot start (planwright doctor says what is missing)");
                gate.set(Some(&format!("its sandbox cannot start ({reason})")));
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SANDBOX_RECHECK) => {}
        }
    }
}

/// Why sandboxed commands cannot run in this process, if they cannot: no sandbox (the
/// setting's own error), or one that fails to start `true`.
async fn sandbox_refusal(app: &App) -> Option<String> {
    let settings = &app.settings;
    let Some(sandbox) = &app.sandbox else {
        let missing = app.sandbox_missing.as_deref();
        return Some(
            missing
                .unwrap_or("the sandbox could not be set up")
                .to_owned(),
        );
    };
    // A folder of this process's own: workers may share a DATA_DIR.
    let scratch = settings
        .data_dir
        .join(format!("sandbox-check-{}", std::process::id()));
    let checked = crate::sandbox::run_true(sandbox.as_ref(), &scratch, false).await;
    let _ = std::fs::remove_dir_all(&scratch);
    checked.err()
}

/// A running `serve`: its address, and the handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    /// Where `/metrics` is served when METRICS_LISTEN moves it off the main listener.
    pub metrics_addr: Option<SocketAddr>,
    pub db: Db,
    /// The model proxy, in roles that run executors (it issues their tokens).
    pub model_proxy: Option<ModelProxy>,
    stop: CancellationToken,
    task: JoinHandle<Result<()>>,
}

impl Running {
    /// Stops taking requests and jobs, lets running jobs finish within the grace period
    /// (handing the rest back), and waits until all of it is done.
    pub async fn stop(self) -> Result<()> {
        self.stop.cancel();
        self.wait().await
    }

    /// Waits until the server stops (after [`Running::stop`] or a fatal error).
    pub async fn wait(self) -> Result<()> {
        self.task.await.context("The server task panicked")?
    }

    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }
}

/// Opens the database (migrating it), binds the listener and starts the router and the
/// job workers, as `role` says.
/// `handler` builds the job handler from the shared parts (`serve` gives
/// [`crate::session::dispatch::handler`]).
pub async fn start(
    settings: Settings,
    role: Role,
    handler: impl FnOnce(Arc<App>) -> Handler,
) -> Result<Running> {
    let db = Db::open(&settings.database_url).await?;
    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("Could not listen on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let metrics_listener = match settings.metrics_listen {
        Some(at) => Some(
            TcpListener::bind(at)
                .await
                .with_context(|| format!("Could not listen on {at} (METRICS_LISTEN)"))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let settings = Arc::new(settings);
    let stop = CancellationToken::new();
    let (model_proxy, proxy_task) = start_model_proxy(role, &db, &settings, &stop).await?;
    let app =
        Arc::new(App::new(db.clone(), settings.clone())?.with_model_proxy(model_proxy.clone()));
    let runs = run_gate(role, &app, &stop);
    let forges = app.forges.clone();
    let handler = handler(app);
    let waker = Waker::default();
    let state = app_state(&db, &settings, forges, waker.clone(), runs.clone()).await?;
    if role != Role::Worker && !state.forges.configured(crate::event::ForgeKind::Github) {
        state.onboarding.announce();
    }
    let worker = (role != Role::Web).then(|| Worker {
        db: db.clone(),
        handler,
        settings: settings.queue.clone(),
        owner: format!("{}:{}", hostname(), std::process::id()),
        waker,
        runs,
    });
    let metrics_server = metrics_listener.map(|listener| {
        let stopped = stop.clone();
        let app = metrics::router(state.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
        })
    });
    if let Some(at) = metrics_addr {
        info!(addr = %at, "metrics listening");
    }
    let app = router(state, role);
    info!(%addr, ?role, database = %crate::store::redact(&settings.database_url), "listening");
    let task = tokio::spawn(serve(
        listener,
        app,
        worker,
        metrics_server,
        proxy_task,
        stop.clone(),
    ));
    Ok(Running {
        addr,
        metrics_addr,
        db,
        model_proxy,
        stop,
        task,
    })
}

/// Starts the model proxy in the roles that run executors, with its task. The proxy
/// lives where executors run: their tokens are signed with this process's key, and the
/// sandbox reaches the proxy through a socket on this host.
async fn start_model_proxy(
    role: Role,
    db: &Db,
    settings: &Settings,
    stop: &CancellationToken,
) -> Result<(Option<ModelProxy>, Option<JoinHandle<Result<()>>>)> {
    if role == Role::Web {
        return Ok((None, None));
    }
    let state = ProxyState::new(
        db.clone(),
        &settings.models,
        std::sync::Arc::new(Capabilities::generate()),
    )?;
    let (proxy, task) = proxy::serve(&settings.model_proxy, state, stop.clone()).await?;
    Ok((Some(proxy), Some(task)))
}

/// Whether this process takes runs. A worker is there to run executors: one whose
/// sandbox cannot start (no bubblewrap, user namespaces refused in its pod) takes no
/// runs, and its readiness says why. The check runs beside serving (a liveness probe is
/// answered meanwhile) and again while it fails, so a passing fault does not keep the
/// worker out for good.
fn run_gate(role: Role, app: &Arc<App>, stop: &CancellationToken) -> crate::jobs::RunGate {
    match role {
        Role::Worker => {
            let gate = crate::jobs::RunGate::closed("its sandbox has not been checked yet");
            tokio::spawn(check_sandbox(app.clone(), gate.clone(), stop.clone()));
            gate
        }
        Role::Web | Role::All => crate::jobs::RunGate::open(),
    }
}

/// The state the router's handlers share.
async fn app_state(
    db: &Db,
    settings: &Arc<Settings>,
    forges: Arc<Forges>,
    waker: Waker,
    runs: crate::jobs::RunGate,
) -> Result<AppState> {
    Ok(AppState {
        db: db.clone(),
        settings: settings.clone(),
        waker,
        onboarding: registration::Onboarding::new(
            settings.clone(),
            forges.clone(),
            &settings.public_url,
        ),
        unverified_reads: Arc::new(tokio::sync::Semaphore::new(
            settings
                .webhook_body_reads
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        forges,
        inbox: crate::store::deliveries::Inbox::start(db.clone()),
        pages: pages::Pages::new(db, settings).await?,
        runs,
    })
}

/// Serves HTTP and runs the job workers until `stop` is cancelled, then waits for the
/// workers, the metrics listener and the model proxy, logging any that stopped
/// abnormally.
async fn serve(
    listener: TcpListener,
    app: Router,
    worker: Option<Worker>,
    metrics_server: Option<JoinHandle<std::io::Result<()>>>,
    proxy_task: Option<JoinHandle<Result<()>>>,
    stop: CancellationToken,
) -> Result<()> {
    let http_stop = stop.clone();
    let workers = worker.map(|w| tokio::spawn(w.run(stop)));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { http_stop.cancelled().await })
        .await;
    if let Some(workers) = workers
        && let Err(e) = workers.await
    {
        warn!(error = %e, "the job workers stopped abnormally");
    }
    if let Some(metrics) = metrics_server {
        match metrics.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "the metrics listener stopped abnormally"),
            Err(e) => warn!(error = %e, "the metrics listener stopped abnormally"),
        }
    }
    if let Some(proxy) = proxy_task {
        match proxy.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(error = %format!("{e:#}"), "the model proxy stopped abnormally")
            }
            Err(e) => warn!(error = %e, "the model proxy stopped abnormally"),
        }
    }
    served.context("The HTTP server failed")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "planwright".to_owned())
}
