//! The model proxy: the only way sandboxed executors reach a model. It checks the run's
//! capability token (from the headers, before reading the body), refuses requests with
//! anything but what a client-side agent needs (`allow`), holds each call's worst case
//! against the run's budget, swaps the token for the real key, forwards to the provider
//! (streams pass through as they arrive) and records each call's usage against the run
//! and its session.

mod allow;
mod api;
mod meter;
pub mod token;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use token::{Capabilities, Grant, TokenError};

use crate::config::ModelSettings;
use crate::ids::{ModelName, Provider};
use crate::llm::sse::{SseSplitter, event_data};
use crate::llm::{Usage, error_chain, secret_header};
use crate::metering::{self as usage, ModelRole, Price, PriceTable};
use crate::store::Db;
use crate::store::model_usage::{self, HoldId, Scope};
use api::Api;
use meter::StreamMeter;

/// Requests carry whole conversations, images included; both providers refuse bodies
/// past 32 MB themselves, so nothing larger is worth reading.
const REQUEST_LIMIT: usize = 32 * 1024 * 1024;

/// Client headers worth passing on; everything else (keys, cookies, hop-by-hop headers,
/// compression asks the meter could not read through) stays behind. The body is always
/// JSON, so its type is set rather than passed. Beta flags are sorted by `betas`.
const REQUEST_HEADERS: &[&str] = &["accept", "user-agent", "anthropic-version"];

/// Anthropic betas passed on: what Claude Code asks for, none of which reaches past the
/// conversation. Unknown ones are dropped rather than refused, so a newer client keeps
/// working (the body's allowlist is what bounds what a beta could unlock).
const ANTHROPIC_BETAS: &[&str] = &[
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "thinking-token-count-2026-05-13",
    "thinking-display-updates-2026-08-18",
    "prompt-caching-2024-07-31",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
];

/// Betas whose point is a provider-side reach (MCP servers, files, code, the web, a
/// computer, skills): refused outright, so the caller learns why instead of seeing the
/// feature fail oddly.
const REFUSED_BETAS: &[&str] = &[
    "mcp-client-",
    "files-api-",
    "code-execution-",
    "web-fetch-",
    "web-search-",
    "computer-use-",
    "skills-",
];

/// `count_tokens` is free to the run but not to the account's rate limits: a run may
/// count this often.
const COUNT_TOKENS_PER_RUN: u32 = 200;

/// A run's calls in flight at once; more wait their turn. Each holds its worst case
/// against the budget, so this bounds how much of it calls in flight can hold.
const CALLS_PER_RUN: usize = 8;

/// The output a call without its own limit is given: every call's worst case must be
/// known before it is sent.
const DEFAULT_OUTPUT_TOKENS: u64 = 32_000;

/// The least output a call is lowered to when the budget left cannot pay for what it
/// asked: enough for a short answer and a tool call (and above Anthropic's smallest
/// thinking budget, 1024), so the agent can still finish its step.
const MIN_OUTPUT_TOKENS: u64 = 2_048;

/// The most output a call may ask for (the providers' largest limits).
const MAX_OUTPUT_TOKENS: u64 = 128_000;

/// Provider answer headers passed back: the type, and what tells an agent to slow down.
fn passes_back(name: &HeaderName) -> bool {
    let name = name.as_str();
    matches!(
        name,
        "content-type" | "retry-after" | "request-id" | "x-request-id"
    ) || name.starts_with("anthropic-ratelimit-")
        || name.starts_with("x-ratelimit-")
        || name.starts_with("openai-")
}

use crate::config::ProxyListen;

/// What the proxy needs to answer; cheap to clone.
#[derive(Clone)]
pub struct ProxyState(Arc<Inner>);

struct Inner {
    db: Db,
    capabilities: Arc<Capabilities>,
    prices: PriceTable,
    anthropic_base: String,
    anthropic_key: Option<SecretString>,
    openai_base: String,
    openai_key: Option<SecretString>,
    http: reqwest::Client,
}

impl ProxyState {
    pub fn new(db: Db, models: &ModelSettings, capabilities: Arc<Capabilities>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // No whole-request limit: a long answer streams for minutes. A provider
            // silent this long has gone away.
            .read_timeout(Duration::from_secs(300))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("Could not set up the HTTP client for the model proxy")?;
        Ok(Self(Arc::new(Inner {
            db,
            capabilities,
            prices: models.prices.clone(),
            anthropic_base: models.anthropic_base_url.trim_end_matches('/').to_owned(),
            anthropic_key: models.anthropic_api_key.clone(),
            openai_base: models.openai_base_url.trim_end_matches('/').to_owned(),
            openai_key: models.openai_api_key.clone(),
            http,
        })))
    }

    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.0.capabilities
    }
}

/// The proxy's routes, at the paths the vendors' own clients use: point
/// `ANTHROPIC_BASE_URL` at the proxy and `OPENAI_BASE_URL` at the proxy's `/v1`.
pub fn router(state: ProxyState) -> Router {
    fn route(api: Api) -> axum::routing::MethodRouter<ProxyState> {
        post(move |State(state): State<ProxyState>, request: Request| forward(state, api, request))
    }
    Router::new()
        .route("/v1/messages", route(Api::Messages))
        .route("/v1/messages/count_tokens", route(Api::CountTokens))
        .route("/v1/chat/completions", route(Api::ChatCompletions))
        .route("/v1/responses", route(Api::Responses))
        .with_state(state)
}

/// A proxy serving in this process.
#[derive(Debug, Clone)]
pub struct ModelProxy {
    /// Where it listens (the bound port, when the settings asked for port 0).
    pub listen: ProxyListen,
    pub capabilities: Arc<Capabilities>,
}

/// Binds `listen` and serves `state` there until `stop` is cancelled. A Unix socket left
/// by a process that is gone is replaced; one another process serves is not.
pub async fn serve(
    listen: &ProxyListen,
    state: ProxyState,
    stop: CancellationToken,
) -> Result<(ModelProxy, JoinHandle<Result<()>>)> {
    let capabilities = state.capabilities().clone();
    let app = router(state);
    let until = async move { stop.cancelled().await };
    let (bound, task) = match listen {
        ProxyListen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("Could not listen on {addr} for the model proxy"))?;
            let bound = ProxyListen::Tcp(listener.local_addr()?);
            let task = tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(until)
                    .await
                    .context("The model proxy failed")
            });
            (bound, task)
        }
        ProxyListen::Unix(path) => {
            let listener = bind_socket(path).await?;
            let socket = path.clone();
            let task = tokio::spawn(async move {
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(until)
                    .await
                    .context("The model proxy failed");
                if let Err(e) = std::fs::remove_file(&socket) {
                    warn!(socket = %socket.display(), error = %e, "Could not remove the model proxy socket");
                }
                served
            });
            (listen.clone(), task)
        }
    };
    info!(listen = %bound, "model proxy listening");
    Ok((
        ModelProxy {
            listen: bound,
            capabilities,
        },
        task,
    ))
}

async fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!(
                "Cannot use {} as the model proxy socket: something other than a socket is there",
                path.display()
            );
        }
        if crate::unix_socket::connect(path).await.is_ok() {
            bail!(
                "Cannot use {} as the model proxy socket: another process serves it (give each process its own MODEL_PROXY_SOCKET)",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| {
            format!(
                "Could not remove the stale model proxy socket {}",
                path.display()
            )
        })?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("Could not create {} for the model proxy", dir.display()))?;
    }
    let listener = crate::unix_socket::bind(path).with_context(|| {
        format!(
            "Could not listen on the model proxy socket {}",
            path.display()
        )
    })?;
    crate::sandbox::open_to_sandboxes(path).with_context(|| {
        format!(
            "Could not open the model proxy socket {} to sandboxes",
            path.display()
        )
    })?;
    Ok(listener)
}

/// Why the proxy answers instead of the provider.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Token,
    BadRequest,
    TooLarge,
    Budget,
    Unavailable,
    Upstream,
}

/// An error in the provider's own shape, so the agent's client reads the message.
fn refuse(provider: Provider, refusal: Refusal, message: &str) -> Response {
    let (status, kind, code) = match (provider, refusal) {
        (Provider::Anthropic, Refusal::Token) => (401, "authentication_error", None),
        (Provider::OpenAi, Refusal::Token) => {
            (401, "invalid_request_error", Some("invalid_api_key"))
        }
        (_, Refusal::BadRequest) => (400, "invalid_request_error", None),
        (Provider::Anthropic, Refusal::TooLarge) => (413, "request_too_large", None),
        (Provider::OpenAi, Refusal::TooLarge) => (413, "invalid_request_error", None),
        // What each vendor answers when the money has run out; neither is retried by
        // the agents' clients as a passing rate limit would be.
        (Provider::Anthropic, Refusal::Budget) => (402, "billing_error", None),
        (Provider::OpenAi, Refusal::Budget) => {
            (429, "insufficient_quota", Some("insufficient_quota"))
        }
        (Provider::Anthropic, Refusal::Unavailable) => (503, "api_error", None),
        (Provider::OpenAi, Refusal::Unavailable) => (503, "server_error", None),
        (Provider::Anthropic, Refusal::Upstream) => (502, "api_error", None),
        (Provider::OpenAi, Refusal::Upstream) => (502, "server_error", None),
    };
    let body = match provider {
        Provider::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Provider::OpenAi => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

/// The grant of the token the client sent where its vendor's tools put a key: Anthropic
/// tools use `x-api-key` or `Authorization: Bearer`, OpenAI tools the latter. A tool
/// may send a key of its own beside the token, so every candidate is tried, the
/// vendor's usual place first, and the first one's refusal is the answer.
fn client_grant(
    capabilities: &Capabilities,
    provider: Provider,
    headers: &HeaderMap,
) -> Result<Grant, TokenError> {
    let api_key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let candidates = match provider {
        Provider::Anthropic => [api_key, bearer],
        Provider::OpenAi => [bearer, api_key],
    };
    let mut refusal = TokenError::Missing;
    for token in candidates.into_iter().flatten() {
        match capabilities.verify(token) {
            Ok(grant) => return Ok(grant),
            Err(e) if refusal == TokenError::Missing => refusal = e,
            Err(_) => {}
        }
    }
    Err(refusal)
}

/// One proxied call's accounting: whom it is for and at what price.
struct Call {
    grant: Grant,
    name: ModelName,
    price: Option<Price>,
    db: Db,
    /// The call's worst case held against the run's budget until it is recorded.
    hold: Option<HoldId>,
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for Call {
    /// A call that ends unrecorded (refused or failed upstream, its client gone before
    /// an answer) cost nothing on record: its hold goes.
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else { return };
        let db = self.db.clone();
        let run = self.grant.run.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = model_usage::release(&db, &hold).await {
                    error!(%run, error = %format!("{e:#}"), "Could not release a model call's budget hold");
                }
            });
        }
    }
}

impl Call {
    async fn record(&mut self, db: &Db, usage: Usage, outcome: &str) {
        info!(
            provider = %self.name.provider,
            model = %self.name.model,
            run = %self.grant.run,
            session = %self.grant.session,
            input_tokens = usage.input_tokens,
            output_tokens = usage.output_tokens,
            cache_read_tokens = usage.cache_read_tokens,
            cache_write_tokens = usage.cache_write_tokens,
            outcome,
            "proxied model call"
        );
        let Some(price) = self.price else { return };
        let call = model_usage::NewUsage {
            session: Some(&self.grant.session),
            run: Some(&self.grant.run),
            role: ModelRole::Executor.as_str(),
            provider: self.name.provider.as_str(),
            model: &self.name.model,
            usage,
            cost_microusd: price.cost_microusd(&usage),
        };
        // Unrecorded, the hold stays: the worst case keeps counting rather than nothing.
        let hold = self.hold.take();
        if let Err(e) = model_usage::record_held(db, &call, hold.as_ref()).await {
            error!(run = %self.grant.run, error = %format!("{e:#}"), "Could not record a proxied model call's usage");
        }
    }
}

/// A refusal on the way in, answered in the provider's format.
struct Refused(Refusal, String);

impl Refused {
    fn new(refusal: Refusal, message: impl Into<String>) -> Self {
        Self(refusal, message.into())
    }
}

async fn forward(state: ProxyState, api: Api, request: Request) -> Response {
    let provider = api.provider();
    let (parts, body) = request.into_parts();
    let (uri, headers) = (parts.uri, parts.headers);
    // The token is checked from the headers alone: a caller without one never gets a
    // byte of its body read, so it cannot make the proxy buffer anything.
    let grant = match client_grant(&state.0.capabilities, provider, &headers) {
        Ok(grant) => grant,
        Err(e) => {
            info!(%provider, reason = ?e, "model proxy refused a call without a valid token");
            return refuse(provider, Refusal::Token, &e.to_string());
        }
    };
    let body = match read_body(&headers, body).await {
        Ok(body) => body,
        Err(Refused(refusal, message)) => return refuse(provider, refusal, &message),
    };
    let betas = match betas(provider, &headers) {
        Ok(betas) => betas,
        Err(Refused(refusal, message)) => return refuse(provider, refusal, &message),
    };
    let (call, mut request) = match admit(&state.0, api, grant, &body).await {
        Ok(admitted) => admitted,
        Err(Refused(refusal, message)) => return refuse(provider, refusal, &message),
    };
    // Without `include_usage` a Chat Completions stream reports no usage at all: ask for
    // it, and keep the extra chunk from a client that did not.
    let hide_usage_chunk = api == Api::ChatCompletions
        && request["stream"] == true
        && request["stream_options"]["include_usage"] != true;
    if hide_usage_chunk {
        if !request["stream_options"].is_object() {
            request["stream_options"] = json!({});
        }
        request["stream_options"]["include_usage"] = json!(true);
    }
    // OpenAI keeps a Responses conversation unless told not to; nothing of a run should
    // outlive it at the provider.
    if api == Api::Responses && request.get("store").is_none() {
        request["store"] = json!(false);
    }
    // What was checked is what is sent: the client's own bytes could read differently
    // to the provider's parser (a key given twice, say) than they did to the check.
    let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let upstream_headers = match upstream_headers(&state.0, provider, &headers, betas) {
        Ok(h) => h,
        Err(Refused(refusal, message)) => return refuse(provider, refusal, &message),
    };
    let base = match provider {
        Provider::Anthropic => &state.0.anthropic_base,
        Provider::OpenAi => &state.0.openai_base,
    };
    let url = match forwarded_query(provider, uri.query()) {
        Some(query) => format!("{base}{}?{query}", api.upstream_path()),
        None => format!("{base}{}", api.upstream_path()),
    };
    let sent = state
        .0
        .http
        .post(&url)
        .headers(upstream_headers)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(upstream) => answer(state, api, call, upstream, hide_usage_chunk).await,
        Err(e) => {
            warn!(%provider, error = %error_chain(&e), "model proxy could not reach the provider");
            refuse(
                provider,
                Refusal::Upstream,
                &format!("Could not reach {provider}: {}", error_chain(&e)),
            )
        }
    }
}

/// The query parameters passed on: only Anthropic's `beta=true`, which Claude Code adds
/// and which switches on nothing the body's allowlist has not already passed. Any other
/// parameter could change what the provider does unchecked, so it is dropped.
fn forwarded_query(provider: Provider, query: Option<&str>) -> Option<&'static str> {
    let asked = query?.split('&').filter(|p| !p.is_empty());
    let mut beta = false;
    for parameter in asked {
        if provider == Provider::Anthropic && parameter == "beta=true" {
            beta = true;
        } else {
            info!(%provider, parameter = %parameter.split('=').next().unwrap_or_default(), "model proxy dropped a query parameter it does not pass on");
        }
    }
    beta.then_some("beta=true")
}

/// The body, up to `REQUEST_LIMIT`; a declared length past it is refused unread.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Refused> {
    let too_large = || {
        Refused::new(
            Refusal::TooLarge,
            format!(
                "Cannot forward the request: its body is larger than the model proxy's limit of {} MB",
                REQUEST_LIMIT / (1024 * 1024)
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > REQUEST_LIMIT as u64) {
        return Err(too_large());
    }
    // A body sent without a length (chunked) is cut off at the limit as it arrives.
    axum::body::to_bytes(body, REQUEST_LIMIT)
        .await
        .map_err(|e| {
            Refused::new(
                Refusal::TooLarge,
                format!(
                    "Could not read the request body whole (the model proxy takes at most {} MB): {e}",
                    REQUEST_LIMIT / (1024 * 1024)
                ),
            )
        })
}

/// Lets a call through, or says why not: a JSON body naming a priced model with only
/// what the proxy forwards, and a run with budget left, on which the call's worst case
/// is then held.
async fn admit(
    inner: &Inner,
    api: Api,
    grant: Grant,
    body: &[u8],
) -> Result<(Call, Value), Refused> {
    let (mut request, name) = read_request(api, &grant, body)?;
    if !api.metered() {
        return admit_count(inner, grant, name, request);
    }
    let Some(price) = inner.prices.get(&name) else {
        return Err(Refused::new(
            Refusal::BadRequest,
            format!(
                "Cannot use {name} through planwright: it has no price, so its calls could not be held to the run's budget (add it to MODEL_PRICES)"
            ),
        ));
    };
    let output = output_limit(api, &mut request)?;
    let (image_bytes, images) = inline_images(api, &request);
    let input = usage::input_estimate(body.len().saturating_sub(image_bytes), images);
    let asked = output;
    let output = fit_output(inner, &grant, price, input, asked)
        .await
        .map_err(|e| {
            error!(run = %grant.run, error = %format!("{e:#}"), "Could not read a run's model budget");
            Refused::new(
                Refusal::Unavailable,
                "Could not check the run's budget; try again shortly",
            )
        })?;
    if output < asked {
        info!(run = %grant.run, asked, output, "model proxy lowered a call's output limit to what the run's budget left can pay");
        set_output_limit(api, &mut request, output);
    }
    let worst = price.worst_case(input, output);
    let slots = inner
        .capabilities
        .call_slots(&grant.run, CALLS_PER_RUN)
        .ok_or_else(|| Refused::new(Refusal::Token, TokenError::Revoked.to_string()))?;
    let slot = slots
        .acquire_owned()
        .await
        .map_err(|_| Refused::new(Refusal::Token, TokenError::Revoked.to_string()))?;
    let hold = hold_budget(inner, &grant, &name, worst).await?;
    let call = Call {
        grant,
        name,
        price: Some(price),
        db: inner.db.clone(),
        hold,
        _slot: Some(slot),
    };
    Ok((call, request))
}

/// The body as a JSON object the proxy forwards, and the model it names.
fn read_request(api: Api, grant: &Grant, body: &[u8]) -> Result<(Value, ModelName), Refused> {
    let provider = api.provider();
    let request: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Err(Refused::new(
                Refusal::BadRequest,
                "Cannot forward the request: its body is not a JSON object",
            ));
        }
    };
    if let Err(message) = allow::check(api, request.as_object().unwrap_or(&Default::default())) {
        info!(run = %grant.run, %provider, reason = %message, "model proxy refused a request it does not forward");
        return Err(Refused::new(Refusal::BadRequest, message));
    }
    let Some(model) = request["model"].as_str().map(str::to_owned) else {
        return Err(Refused::new(
            Refusal::BadRequest,
            "Cannot forward the request: it names no `model`",
        ));
    };
    if !grant.models.is_empty() && !grant.models.contains(&model) {
        info!(run = %grant.run, %model, "model proxy refused a model the run was not given");
        return Err(Refused::new(
            Refusal::BadRequest,
            format!(
                "Cannot use {model} in this run: its token allows only {}; ask for one of those",
                grant.models.join(", ")
            ),
        ));
    }
    Ok((request, ModelName { provider, model }))
}

/// A call that costs nothing (counting tokens): no budget to hold, only a count per run.
fn admit_count(
    inner: &Inner,
    grant: Grant,
    name: ModelName,
    request: Value,
) -> Result<(Call, Value), Refused> {
    if !inner
        .capabilities
        .count_call(&grant.run, COUNT_TOKENS_PER_RUN)
    {
        info!(run = %grant.run, "model proxy refused a count past the run's limit");
        return Err(Refused::new(
            Refusal::BadRequest,
            format!(
                "Cannot count tokens: run {} has made its {COUNT_TOKENS_PER_RUN} count_tokens calls",
                grant.run
            ),
        ));
    }
    let call = Call {
        grant,
        name,
        price: None,
        db: inner.db.clone(),
        hold: None,
        _slot: None,
    };
    Ok((call, request))
}

/// Holds the call's worst case against the run's budget, or refuses it: the budget is
/// spent, or held by the run's calls in flight.
async fn hold_budget(
    inner: &Inner,
    grant: &Grant,
    name: &ModelName,
    worst: model_usage::Spent,
) -> Result<Option<HoldId>, Refused> {
    let limits = [(Scope::Run(&grant.run), grant.budget)];
    let held = usage::reserve(
        &inner.db,
        Some(&grant.session),
        Some(&grant.run),
        &limits,
        worst,
    )
    .await
    .map_err(|e| {
        error!(run = %grant.run, error = %format!("{e:#}"), "Could not hold a run's model budget");
        Refused::new(
            Refusal::Unavailable,
            "Could not check the run's budget; try again shortly",
        )
    })?;
    match held {
        Ok(hold) => Ok(hold),
        Err(over) if over.held => {
            info!(run = %grant.run, spent = %over.spent, limit = %over.limit, "model proxy refused a call while the run's budget was held by calls in flight");
            Err(Refused::new(
                Refusal::Budget,
                format!(
                    "Cannot call {name}: run {}'s budget of {} is held by its calls still in flight ({} spent so far); try again when they finish",
                    grant.run, over.limit, over.spent
                ),
            ))
        }
        Err(over) => {
            info!(run = %grant.run, spent = %over.spent, limit = %over.limit, "model proxy refused a call past the run's budget");
            Err(Refused::new(
                Refusal::Budget,
                format!(
                    "Cannot call {name}: run {} has spent its budget ({} of {}); planwright refuses further model calls for this run",
                    grant.run, over.spent, over.limit
                ),
            ))
        }
    }
}

/// `output`, lowered to what the run's budget left can pay for after the input (but not
/// below `MIN_OUTPUT_TOKENS`). Lowered rather than refused: Claude Code and Codex ask
/// for a large limit on every call whatever answer they expect, so a refusal would end a
/// run with much of its budget left, while a lowered limit only cuts an answer that
/// would have overspent, which the agents continue from. It bounds what one call can
/// pass the budget by to its input and `MIN_OUTPUT_TOKENS`.
async fn fit_output(
    inner: &Inner,
    grant: &Grant,
    price: Price,
    input: u64,
    output: u64,
) -> Result<u64> {
    let budget = grant.budget;
    if budget.max_microusd.is_none() && budget.max_tokens.is_none() {
        return Ok(output);
    }
    let committed = model_usage::committed(&inner.db, Scope::Run(&grant.run)).await?;
    let mut fits = output;
    if let Some(limit) = budget.max_microusd
        && price.output > 0.0
    {
        let input_cost = price.worst_case(input, 0).cost_microusd;
        let room = limit
            .saturating_sub(committed.cost_microusd)
            .saturating_sub(input_cost)
            .max(0);
        fits = fits.min((room as f64 / price.output).floor() as u64);
    }
    if let Some(limit) = budget.max_tokens {
        let room = (limit as i64)
            .saturating_sub(committed.tokens)
            .saturating_sub(i64::try_from(input).unwrap_or(i64::MAX))
            .max(0);
        fits = fits.min(room as u64);
    }
    Ok(output.min(fits.max(MIN_OUTPUT_TOKENS)))
}

/// Lowers the request's output limit to `output` wherever it names one (it must bind
/// under either name). Anthropic refuses a thinking budget that is not under it.
fn set_output_limit(api: Api, request: &mut Value, output: u64) {
    let names: &[&str] = match api {
        Api::Messages | Api::CountTokens => &["max_tokens"],
        Api::ChatCompletions => &["max_completion_tokens", "max_tokens"],
        Api::Responses => &["max_output_tokens"],
    };
    for name in names {
        if request
            .get(*name)
            .and_then(Value::as_u64)
            .is_some_and(|n| n > output)
        {
            request[*name] = json!(output);
        }
    }
    if api == Api::Messages
        && let Some(thinking) = request["thinking"]["budget_tokens"].as_u64()
        && thinking >= output
    {
        request["thinking"]["budget_tokens"] = json!(output.saturating_sub(1));
    }
}

/// The most output `request` may produce, a default set when it names none. Chat
/// Completions takes either of two names; the larger counts.
fn output_limit(api: Api, request: &mut Value) -> Result<u64, Refused> {
    let names: &[&str] = match api {
        Api::Messages | Api::CountTokens => &["max_tokens"],
        Api::ChatCompletions => &["max_completion_tokens", "max_tokens"],
        Api::Responses => &["max_output_tokens"],
    };
    let mut most = None;
    for name in names {
        let Some(value) = request.get(*name) else {
            continue;
        };
        let Some(n) = value.as_u64() else {
            return Err(Refused::new(
                Refusal::BadRequest,
                format!("Cannot forward the request: `{name}` must be a whole number of tokens"),
            ));
        };
        if n > MAX_OUTPUT_TOKENS {
            return Err(Refused::new(
                Refusal::BadRequest,
                format!(
                    "Cannot forward the request: `{name}` is {n}, more than the {MAX_OUTPUT_TOKENS} output tokens the model proxy allows a call"
                ),
            ));
        }
        most = most.max(Some(n));
    }
    match most {
        Some(n) => Ok(n),
        None => {
            request[names[0]] = json!(DEFAULT_OUTPUT_TOKENS);
            Ok(DEFAULT_OUTPUT_TOKENS)
        }
    }
}

/// The bytes and number of images sent as data, found only where each API carries an
/// image (Anthropic `image` blocks with a `base64` source, Chat Completions
/// `image_url.url`, Responses `input_image.image_url`): their tokens are bounded by the
/// image, not its size. Anything shaped like an image elsewhere (a tool's input, a
/// schema, a text that starts with `data:image/`) is text to the provider and is billed
/// as such. A document is billed by its pages' text, so its bytes count as text too.
fn inline_images(api: Api, request: &Value) -> (usize, usize) {
    let mut found = (0, 0);
    let mut image = |data: Option<&str>| {
        if let Some(data) = data {
            found.0 += data.len();
            found.1 += 1;
        }
    };
    match api {
        Api::Messages | Api::CountTokens => {
            for message in items(request, "messages") {
                for block in items(message, "content") {
                    let nested = match block["type"].as_str() {
                        Some("tool_result") => items(block, "content"),
                        _ => std::slice::from_ref(block),
                    };
                    for block in nested {
                        let source = &block["source"];
                        if block["type"] == "image"
                            && source["type"] == "base64"
                            && source["media_type"]
                                .as_str()
                                .is_some_and(|t| t.starts_with("image/"))
                        {
                            image(source["data"].as_str());
                        }
                    }
                }
            }
        }
        Api::ChatCompletions => {
            for message in items(request, "messages") {
                for part in items(message, "content") {
                    if part["type"] == "image_url" {
                        image(data_image(&part["image_url"]["url"]));
                    }
                }
            }
        }
        Api::Responses => {
            for item in items(request, "input") {
                for key in ["content", "output"] {
                    for part in items(item, key) {
                        if part["type"] == "input_image" {
                            image(data_image(&part["image_url"]));
                        }
                    }
                }
            }
        }
    }
    found
}

fn items<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// An OpenAI image URL that carries the image itself.
fn data_image(url: &Value) -> Option<&str> {
    url.as_str().filter(|u| u.starts_with("data:image/"))
}

/// The `anthropic-beta` flags to pass on, or the refusal of one that reaches past the
/// conversation. `openai-beta` is never passed on: no flag of it is needed on these
/// routes, and the ones that exist switch on other APIs.
fn betas(provider: Provider, client: &HeaderMap) -> Result<Option<HeaderValue>, Refused> {
    let header = match provider {
        Provider::Anthropic => "anthropic-beta",
        Provider::OpenAi => "openai-beta",
    };
    let asked: Vec<&str> = client
        .get_all(header)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect();
    let mut kept = Vec::new();
    for beta in asked {
        if provider == Provider::Anthropic
            && REFUSED_BETAS
                .iter()
                .any(|p| beta.to_ascii_lowercase().starts_with(p))
        {
            return Err(Refused::new(
                Refusal::BadRequest,
                format!(
                    "Cannot forward the request: the `{header}` flag `{beta}` lets the provider reach outside the conversation, which the model proxy does not allow; remove it"
                ),
            ));
        }
        if provider == Provider::Anthropic && ANTHROPIC_BETAS.contains(&beta) {
            kept.push(beta);
        } else {
            info!(%header, %beta, "model proxy dropped a beta flag it does not pass on");
        }
    }
    if kept.is_empty() {
        return Ok(None);
    }
    HeaderValue::from_str(&kept.join(","))
        .map(Some)
        .map_err(|_| {
            Refused::new(
                Refusal::BadRequest,
                format!("Cannot read the `{header}` header"),
            )
        })
}

/// The client's harmless headers and the provider's real key. OpenAI-compatible local
/// servers may need no key; Anthropic always does.
fn upstream_headers(
    inner: &Inner,
    provider: Provider,
    client: &HeaderMap,
    betas: Option<HeaderValue>,
) -> Result<HeaderMap, Refused> {
    let mut headers = HeaderMap::new();
    for name in REQUEST_HEADERS {
        for value in client.get_all(*name) {
            headers.append(*name, value.clone());
        }
    }
    if let Some(betas) = betas {
        headers.insert("anthropic-beta", betas);
    }
    // The body may have been rewritten as JSON, whatever the client declared.
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let injected = match (provider, &inner.anthropic_key, &inner.openai_key) {
        (Provider::Anthropic, Some(key), _) => Some(
            secret_header(key.expose_secret(), "Anthropic API key")
                .map(|v| (HeaderName::from_static("x-api-key"), v)),
        ),
        (Provider::Anthropic, None, _) => {
            return Err(Refused::new(
                Refusal::Unavailable,
                "Cannot forward to anthropic: planwright has no ANTHROPIC_API_KEY",
            ));
        }
        (Provider::OpenAi, _, Some(key)) => Some(
            secret_header(&format!("Bearer {}", key.expose_secret()), "OpenAI API key")
                .map(|v| (header::AUTHORIZATION, v)),
        ),
        (Provider::OpenAi, _, None) => None,
    };
    if let Some(injected) = injected {
        let (name, value) =
            injected.map_err(|e| Refused::new(Refusal::Unavailable, e.to_string()))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// The provider's answer, passed back: streams through `relay`, whole answers metered
/// from their `usage` first.
async fn answer(
    state: ProxyState,
    api: Api,
    mut call: Call,
    upstream: reqwest::Response,
    hide_usage_chunk: bool,
) -> Response {
    let provider = api.provider();
    let status = upstream.status();
    let mut headers = HeaderMap::new();
    for (name, value) in upstream.headers() {
        if passes_back(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    let event_stream = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if event_stream {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
        tokio::spawn(relay(state, api, call, upstream, hide_usage_chunk, tx));
        let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        }));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return (status, headers, body).into_response();
    }
    let db = &state.0.db;
    let bytes = match upstream.bytes().await {
        Ok(bytes) => bytes,
        Err(e) => {
            call.record(db, Usage::default(), "cut").await;
            return refuse(
                provider,
                Refusal::Upstream,
                &format!("Could not read {provider}'s answer: {}", error_chain(&e)),
            );
        }
    };
    if api.metered() {
        let usage = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|answer| meter::answer_usage(api, &answer));
        match usage {
            Some(usage) => call.record(db, usage, status.as_str()).await,
            // A success is paid for whether or not it says so; it stays on record.
            None if status.is_success() => {
                warn!(%provider, model = %call.name.model, "a proxied answer reported no usage");
                call.record(db, Usage::default(), status.as_str()).await;
            }
            None => {}
        }
    }
    (status, headers, bytes).into_response()
}

/// Passes a provider's event stream to the client event by event, metering it on the
/// way, and records the call when the stream ends, is cut, or the client goes away.
async fn relay(
    state: ProxyState,
    api: Api,
    mut call: Call,
    mut upstream: reqwest::Response,
    hide_usage_chunk: bool,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut splitter = SseSplitter::default();
    let mut meter = StreamMeter::new(api);
    let outcome = loop {
        match upstream.chunk().await {
            Ok(Some(chunk)) => {
                let mut out = Vec::with_capacity(chunk.len());
                for event in splitter.push(&chunk) {
                    let data = event_data(&event);
                    if let Some(data) = &data {
                        meter.observe(data);
                        if hide_usage_chunk && meter::is_usage_only_chunk(data) {
                            continue;
                        }
                    }
                    out.extend_from_slice(&event);
                }
                if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                    break "client gone";
                }
            }
            Ok(None) => {
                let rest = splitter.rest();
                if !rest.is_empty() {
                    if let Some(data) = event_data(&rest) {
                        meter.observe(&data);
                    }
                    let _ = tx.send(Ok(Bytes::from(rest))).await;
                }
                break "complete";
            }
            Err(e) => {
                warn!(provider = %api.provider(), error = %error_chain(&e), "a proxied stream was cut");
                // The unfinished event is dropped: half an event would garble the
                // client's parse of the error that follows.
                let _ = tx.send(Ok(cut_event(api))).await;
                break "cut";
            }
        }
    };
    // Recorded before the client's stream ends, so the agent's next call is already
    // held to what this one spent.
    call.record(&state.0.db, meter.usage(), outcome).await;
    drop(tx);
}

/// The in-stream error each API uses, so a client sees why its stream ended early.
fn cut_event(api: Api) -> Bytes {
    let message = format!(
        "The {} stream was cut before it finished; planwright ended it here",
        api.provider()
    );
    let event = match api {
        Api::Messages | Api::CountTokens => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        ),
        Api::ChatCompletions => format!(
            "data: {}\n\n",
            json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
        ),
        Api::Responses => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "code": "server_error", "message": message, "param": null})
        ),
    };
    Bytes::from(event)
}
