//! The signed-in pages: the sessions a viewer may see (`/`), and one session's decisions
//! and doings (`/sessions/{id}`). Every page answers `Accept: application/json` with the
//! same data. Nothing here is a source of truth: the pages read the database, and the
//! issue thread stays the record of decisions.

mod access;
pub mod auth;
mod repository;
mod session;
mod transcript;

use askama::Template;
use axum::Form;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Redirect, Response};
use serde::{Deserialize, Serialize};
use tracing::error;

use super::AppState;
use super::html::{SAME_ORIGIN, html, message_page};
use crate::contract::SourceLinks;
use crate::event::ForgeKind;
use crate::forge::{WebLinks, oauth};
use crate::ids::{RepoName, SessionId};
use crate::store::{installations, now_ms, sessions, signed_out};
use access::{AccessCache, AccessError};
use auth::{Person, Viewer, Visit};
use oauth::SignInProvider;

/// Sessions the home page lists at most.
const HOME_SESSIONS: i64 = 200;

/// What the pages share: their cookies, the client they ask forges with on people's
/// behalf, and what those forges said people may read.
#[derive(Clone)]
pub struct Pages {
    cookies: auth::Cookies,
    http: reqwest::Client,
    access: Arc<AccessCache>,
}

impl Pages {
    pub async fn new(
        db: &crate::store::Db,
        settings: &crate::config::Settings,
    ) -> anyhow::Result<Pages> {
        Ok(Pages {
            cookies: auth::Cookies::new(
                auth::cookie_key(db).await?,
                settings.public_url.starts_with("https://"),
            ),
            http: oauth::client()?,
            access: Arc::new(AccessCache::new(settings.access_check)),
        })
    }
}

/// Whether the caller asked for JSON rather than a page.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            let json = accept.find("application/json");
            let page = accept.find("text/html");
            match (json, page) {
                (Some(j), Some(h)) => j < h,
                (Some(_), None) => true,
                _ => false,
            }
        })
}

/// Who sent the request, unless their sign-in was ended (or that cannot be told).
async fn who(state: &AppState, headers: &HeaderMap) -> Option<Visit> {
    let visit = state
        .pages
        .cookies
        .visit(headers, state.settings.admin_token.as_ref())?;
    if let Some((id, _)) = &visit.sign_in {
        match signed_out::is_signed_out(&state.db, id).await {
            Ok(false) => {}
            Ok(true) => return None,
            Err(e) => {
                error!(error = %format!("{e:#}"), "Could not tell whether a sign-in was ended");
                return None;
            }
        }
    }
    Some(visit)
}

/// What every page and its JSON carry: never cached (they are one viewer's), varying
/// with who asks and how, and not to be sniffed into another type.
pub async fn private_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Cookie, Authorization"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// What an anonymous request gets: the sign-in page, or a JSON refusal.
fn sign_in_needed(state: &AppState, headers: &HeaderMap) -> Response {
    if wants_json(headers) {
        let mut response = (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({
                "error": "sign in first: send Authorization: Bearer <ADMIN_TOKEN>, or sign in through the page with a browser"
            })),
        )
            .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"planwright\""),
        );
        return response;
    }
    sign_in_page(state, StatusCode::UNAUTHORIZED, None)
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage<'a> {
    csrf: &'a str,
    error: Option<&'a str>,
    /// Whether the operator's token can sign in here at all.
    token_sign_in: bool,
    /// `(name, path)` of each forge people can sign in with.
    forges: Vec<(&'static str, String)>,
}

fn sign_in_page(state: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let (csrf, jar) = state.pages.cookies.sign_in_form();
    let page = SignInPage {
        csrf: &csrf,
        error,
        token_sign_in: state.settings.admin_token.is_some(),
        forges: SignInProvider::configured(&state.settings)
            .iter()
            .map(|p| (p.name(), p.start_path()))
            .collect(),
    };
    let mut response = html(status, &page, Some(SAME_ORIGIN));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"planwright\""),
        );
    }
    (jar, response).into_response()
}

/// `GET /sign-in`.
pub async fn sign_in_form(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if who(&state, &headers).await.is_some() {
        return Redirect::to("/").into_response();
    }
    sign_in_page(&state, StatusCode::OK, None)
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /sign-in`: the operator's token typed into the form.
pub async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    if !state
        .pages
        .cookies
        .sign_in_form_matches(&headers, &form.csrf)
    {
        return sign_in_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("This form has expired or did not come from this page: sign in again."),
        );
    }
    if !auth::is_admin_token(form.token.trim(), state.settings.admin_token.as_ref()) {
        return sign_in_page(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("That is not the operator's token (ADMIN_TOKEN)."),
        );
    }
    let jar = state.pages.cookies.sign_in(
        &headers,
        &Viewer::Operator,
        state.settings.admin_token.as_ref(),
        auth::SESSION_TTL_SECS,
    );
    (jar, Redirect::to("/")).into_response()
}

fn provider(state: &AppState, forge: &str) -> Option<SignInProvider> {
    SignInProvider::configured(&state.settings)
        .into_iter()
        .find(|p| p.forge.as_str() == forge)
}

/// `GET /sign-in/{forge}`: off to the forge's consent page, with a `state` and a PKCE
/// verifier kept in this browser's cookie.
pub async fn forge_sign_in(State(state): State<AppState>, Path(forge): Path<String>) -> Response {
    let Some(provider) = provider(&state, &forge) else {
        return message_page(
            StatusCode::NOT_FOUND,
            "Not found",
            "This planwright does not sign people in with that forge.",
        );
    };
    let flow_state = auth::random_token();
    let verifier = auth::random_token();
    let location = provider.authorize(&state.settings.public_url, &flow_state, &verifier);
    let jar =
        state
            .pages
            .cookies
            .start_flow(provider.forge, flow_state, verifier, oauth::FLOW_TTL_SECS);
    (jar, Redirect::to(&location)).into_response()
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /sign-in/{forge}/callback`: the forge sends the browser back with a code for the
/// `state` this browser was given; the code becomes the person's token and their sign-in.
pub async fn forge_callback(
    State(state): State<AppState>,
    Path(forge): Path<String>,
    Query(query): Query<CallbackQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(provider) = provider(&state, &forge) else {
        return sign_in_page(
            &state,
            StatusCode::NOT_FOUND,
            Some("This planwright does not sign people in with that forge."),
        );
    };
    let Some(flow) = query
        .state
        .as_deref()
        .and_then(|s| state.pages.cookies.flow(&headers, provider.forge, s))
    else {
        return sign_in_page(
            &state,
            StatusCode::FORBIDDEN,
            Some(
                "That sign-in was not started from this browser, or took too long: sign in again.",
            ),
        );
    };
    if let Some(error) = query.error {
        let said = query.error_description.unwrap_or(error);
        let message = format!("{} did not sign you in: {said}", provider.name());
        return (
            state.pages.cookies.end_flow(&headers),
            sign_in_page(&state, StatusCode::UNAUTHORIZED, Some(&message)),
        )
            .into_response();
    }
    let Some(code) = query.code.filter(|c| !c.is_empty()) else {
        return (
            state.pages.cookies.end_flow(&headers),
            sign_in_page(
                &state,
                StatusCode::BAD_REQUEST,
                Some("The forge sent no code back: sign in again."),
            ),
        )
            .into_response();
    };
    match provider
        .finish(
            &state.pages.http,
            &state.settings.public_url,
            &code,
            &flow.verifier,
        )
        .await
    {
        Ok(user) => {
            let viewer = Viewer::Person(Person {
                forge: provider.forge,
                login: user.login,
                id: user.id,
                token: user.token,
            });
            // Not past the token's own life: after it, the forge would refuse it anyway.
            let ttl = user.expires_in.map_or(auth::SESSION_TTL_SECS, |e| e - 60);
            let jar = state.pages.cookies.sign_in(&headers, &viewer, None, ttl);
            (jar, Redirect::to("/")).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "A sign-in through the forge did not finish");
            (
                state.pages.cookies.end_flow(&headers),
                sign_in_page(&state, StatusCode::UNAUTHORIZED, Some(&e.to_string())),
            )
                .into_response()
        }
    }
}

/// The forge no longer takes the person's token: signed out, and told why.
fn sign_in_again(state: &AppState, headers: &HeaderMap, forge: ForgeKind) -> Response {
    let name = match forge {
        ForgeKind::Gitlab => "GitLab",
        _ => "GitHub",
    };
    let message = format!("{name} no longer accepts this sign-in: sign in again.");
    let page = sign_in_page(state, StatusCode::UNAUTHORIZED, Some(&message));
    (state.pages.cookies.sign_out(headers), page).into_response()
}

/// The forge's REST root people's tokens are used against.
fn person_api(state: &AppState, forge: ForgeKind) -> String {
    match forge {
        ForgeKind::Gitlab => format!(
            "{}/api/v4",
            state
                .settings
                .gitlab
                .url
                .as_deref()
                .unwrap_or("")
                .trim_end_matches('/')
        ),
        _ => state
            .settings
            .github
            .api_url
            .trim_end_matches('/')
            .to_owned(),
    }
}

/// Which of `repos` the person may read, as their forge says (cached briefly).
async fn readable(
    state: &AppState,
    person: &Person,
    repos: &[RepoName],
) -> Result<Vec<RepoName>, AccessError> {
    let seen = state
        .pages
        .access
        .readable(
            &state.pages.http,
            &person_api(state, person.forge),
            person.forge,
            person.id,
            &person.token,
            repos,
        )
        .await?;
    Ok(repos
        .iter()
        .filter(|r| seen.contains(&r.to_string().to_ascii_lowercase()))
        .cloned()
        .collect())
}

#[derive(Deserialize)]
pub struct SignOutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /sign-out`.
pub async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SignOutForm>,
) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return Redirect::to("/sign-in").into_response();
    };
    if visit
        .csrf
        .as_deref()
        .is_some_and(|csrf| !auth::same_token(csrf, &form.csrf))
    {
        return forbidden(&headers);
    }
    if let Some((id, until)) = &visit.sign_in
        && let Err(e) = signed_out::record(&state.db, id, *until).await
    {
        return unavailable("a sign-out", &e);
    }
    if let Viewer::Person(person) = &visit.viewer
        && let Some(provider) = SignInProvider::configured(&state.settings)
            .into_iter()
            .find(|p| p.forge == person.forge)
        && let Err(e) = provider.revoke(&state.pages.http, &person.token).await
    {
        tracing::warn!(error = %e, "Could not hand a signed-out person's token back to the forge");
    }
    (
        state.pages.cookies.sign_out(&headers),
        Redirect::to("/sign-in"),
    )
        .into_response()
}

/// A refusal as the caller asked for it: JSON with `error`, or a page saying `message`.
fn refusal(
    headers: &HeaderMap,
    status: StatusCode,
    error: &str,
    title: &str,
    message: &str,
) -> Response {
    if wants_json(headers) {
        return (status, Json(serde_json::json!({ "error": error }))).into_response();
    }
    message_page(status, title, message)
}

fn forbidden(headers: &HeaderMap) -> Response {
    refusal(
        headers,
        StatusCode::FORBIDDEN,
        "the form's CSRF token does not match",
        "Refused",
        "This form did not come from this page (its CSRF token does not match). Go back, reload, and try again.",
    )
}

fn not_found(headers: &HeaderMap) -> Response {
    refusal(
        headers,
        StatusCode::NOT_FOUND,
        "no such session",
        "Not found",
        "There is no such session, or it is not yours to see.",
    )
}

/// What a page about one session or repository answers when its data could not be
/// read. A person whose forge no longer takes their token signs in again; a person whose
/// access could not be told gets the 404 of something they may not see; anything else
/// is the database's failure.
fn load_failed(
    state: &AppState,
    headers: &HeaderMap,
    viewer: &Viewer,
    what: &str,
    e: &anyhow::Error,
) -> Response {
    match (e.downcast_ref::<AccessError>(), viewer) {
        (Some(AccessError::SignInAgain), Viewer::Person(p)) => {
            sign_in_again(state, headers, p.forge)
        }
        (_, Viewer::Person(_)) => {
            tracing::warn!(error = %format!("{e:#}"), "Could not tell whether a person may read {what}");
            not_found(headers)
        }
        _ => unavailable(what, e),
    }
}

fn unavailable(what: &str, e: &anyhow::Error) -> Response {
    error!(error = %format!("{e:#}"), "Could not build {what}");
    message_page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "Could not read the database; the log has the details.",
    )
}

#[derive(Deserialize, Default)]
pub struct HomeQuery {
    repo: Option<String>,
    state: Option<String>,
}

#[derive(Serialize)]
struct Home {
    viewer: String,
    sessions: Vec<HomeRow>,
    installations: Vec<InstallationRow>,
    repositories: Vec<String>,
    states: Vec<&'static str>,
    filter_repo: Option<String>,
    filter_state: Option<String>,
}

#[derive(Serialize)]
struct HomeRow {
    id: String,
    forge: &'static str,
    repo: String,
    issue: i64,
    state: &'static str,
    stage: &'static str,
    contract_version: Option<crate::contract::ContractVersion>,
    cost: String,
    cost_microusd: i64,
    age: String,
    created_at: i64,
    updated_at: i64,
    failed: bool,
}

/// A session as lists show it.
fn home_row(s: &sessions::SessionRow, now: i64) -> HomeRow {
    HomeRow {
        id: s.id.as_str().to_owned(),
        forge: s.forge.as_str(),
        repo: s.repo.to_string(),
        issue: s.issue_number.0,
        state: s.state.as_str(),
        stage: s.state.describe(),
        contract_version: s.contract_version,
        cost: crate::store::model_usage::usd(s.cost_microusd),
        cost_microusd: s.cost_microusd,
        age: age(now - s.created_at),
        created_at: s.created_at,
        updated_at: s.updated_at,
        failed: s.state == crate::store::state::SessionState::Failed,
    }
}

#[derive(Serialize)]
struct InstallationRow {
    forge: &'static str,
    id: i64,
    account: String,
    state: &'static str,
    repositories: usize,
}

#[derive(Template)]
#[template(path = "home.html")]
struct HomePage<'a> {
    home: &'a Home,
    csrf: &'a str,
}

/// `GET /` for a configured deployment: the viewer's sessions, failures first, then
/// newest first; filterable by repository and state.
pub async fn home(state: AppState, headers: HeaderMap, query: HomeQuery) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return sign_in_needed(&state, &headers);
    };
    let home = match load_home(&state, &visit.viewer, &query).await {
        Ok(home) => home,
        Err(e) => {
            if let (Some(AccessError::SignInAgain), Viewer::Person(p)) =
                (e.downcast_ref::<AccessError>(), &visit.viewer)
            {
                return sign_in_again(&state, &headers, p.forge);
            }
            return unavailable("the home page", &e);
        }
    };
    if wants_json(&headers) {
        return Json(home).into_response();
    }
    let csrf = visit.csrf.unwrap_or_default();
    html(
        StatusCode::OK,
        &HomePage {
            home: &home,
            csrf: &csrf,
        },
        Some(SAME_ORIGIN),
    )
}

async fn load_home(state: &AppState, viewer: &Viewer, query: &HomeQuery) -> anyhow::Result<Home> {
    let repo = query
        .repo
        .as_deref()
        .filter(|r| !r.is_empty())
        .and_then(|r| RepoName::parse(r).ok());
    let wanted_state = query
        .state
        .as_deref()
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse::<crate::store::state::SessionState>().ok());
    let (forge, among, repositories) = match viewer {
        Viewer::Operator => (None, None, sessions::repositories(&state.db, None).await?),
        Viewer::Person(p) => {
            let candidates = sessions::repositories(&state.db, Some(p.forge)).await?;
            let mine = readable(state, p, &candidates).await?;
            (Some(p.forge), Some(mine.clone()), mine)
        }
    };
    let rows = sessions::list_filtered(
        &state.db,
        &sessions::Filter {
            forge,
            among: among.as_deref(),
            repo: repo.as_ref(),
            state: wanted_state,
        },
        HOME_SESSIONS,
    )
    .await?;
    let now = now_ms();
    let sessions = rows.iter().map(|s| home_row(s, now)).collect();
    let mut conn = state.db.pool.acquire().await?;
    let mut installation_rows = Vec::new();
    if viewer.is_operator() {
        {
            for i in installations::list(&mut conn).await? {
                let repositories =
                    installations::repositories(&mut conn, i.forge, i.installation_id)
                        .await?
                        .len();
                installation_rows.push(InstallationRow {
                    forge: i.forge.as_str(),
                    id: i.installation_id.0,
                    account: i.account.clone(),
                    state: i.state.as_str(),
                    repositories,
                });
            }
        }
    }
    drop(conn);
    let repositories = repositories.into_iter().map(|r| r.to_string()).collect();
    Ok(Home {
        viewer: viewer.name(),
        sessions,
        installations: installation_rows,
        repositories,
        states: crate::store::state::SessionState::ALL
            .iter()
            .map(|s| s.as_str())
            .collect(),
        filter_repo: repo.map(|r| r.to_string()),
        filter_state: wanted_state.map(|s| s.as_str().to_owned()),
    })
}

/// `GET /sessions/{id}`.
pub async fn session_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return sign_in_needed(&state, &headers);
    };
    let id = SessionId(id);
    let view = match session::load(&state, &visit.viewer, &id).await {
        Ok(Some(view)) => view,
        Ok(None) => return not_found(&headers),
        Err(e) => return load_failed(&state, &headers, &visit.viewer, "a session page", &e),
    };
    if wants_json(&headers) {
        return Json(view).into_response();
    }
    let csrf = visit.csrf.unwrap_or_default();
    let mut page = html(
        StatusCode::OK,
        &session::SessionPage {
            s: &view,
            csrf: &csrf,
        },
        Some(SAME_ORIGIN),
    );
    if view.live.is_some() {
        allow_own_script(&mut page);
    }
    page
}

/// Lets a page run planwright's own scripts and ask its own address: for the live
/// updates of a running session.
fn allow_own_script(page: &mut Response) {
    let headers = page.headers_mut();
    let csp = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("default-src 'none'")
        .replacen(
            "default-src 'none';",
            "default-src 'none'; script-src 'self'; connect-src 'self';",
            1,
        );
    if let Ok(value) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
}

/// `GET /repos/{forge}/{repo}`: a repository's settings, recent sessions and cost per
/// month.
pub async fn repository_page(
    State(state): State<AppState>,
    Path((forge, repo)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return sign_in_needed(&state, &headers);
    };
    let (Ok(forge), Ok(repo)) = (forge.parse::<ForgeKind>(), RepoName::parse(&repo)) else {
        return not_found(&headers);
    };
    let view = match repository::load(&state, &visit.viewer, forge, &repo).await {
        Ok(Some(view)) => view,
        Ok(None) => return not_found(&headers),
        Err(e) => {
            return load_failed(&state, &headers, &visit.viewer, "a repository page", &e);
        }
    };
    if wants_json(&headers) {
        return Json(view).into_response();
    }
    let csrf = visit.csrf.unwrap_or_default();
    html(
        StatusCode::OK,
        &repository::RepositoryPage {
            r: &view,
            csrf: &csrf,
        },
        Some(SAME_ORIGIN),
    )
}

/// `GET /assets/live.js`: reloads a running session's page when the session moves on.
pub async fn live_script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        include_str!("../../../templates/live.js"),
    )
        .into_response()
}

#[derive(Deserialize, Default)]
pub struct TranscriptQuery {
    #[serde(default)]
    page: usize,
}

/// The run `run` of a session the viewer may see, and its transcript file.
async fn transcript_of(
    state: &AppState,
    visit: &Visit,
    id: &SessionId,
    run: &str,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    if session::visible(state, &visit.viewer, id).await?.is_none() {
        return Ok(None);
    }
    let mut conn = state.db.pool.acquire().await?;
    let runs = crate::store::runs::for_session(&mut conn, id).await?;
    drop(conn);
    // The path comes from the stored run, never from the request.
    Ok(runs
        .iter()
        .find(|r| r.id.as_str() == run)
        .and_then(|r| transcript::path(&state.settings.data_dir, r.id.as_str())))
}

/// `GET /sessions/{id}/attempts/{run}/transcript`: the transcript, distilled, a page at
/// a time.
pub async fn transcript_page(
    State(state): State<AppState>,
    Path((id, run)): Path<(String, String)>,
    Query(query): Query<TranscriptQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return sign_in_needed(&state, &headers);
    };
    let id = SessionId(id);
    let path = match transcript_of(&state, &visit, &id, &run).await {
        Ok(Some(path)) => path,
        Ok(None) => return not_found(&headers),
        Err(e) => return load_failed(&state, &headers, &visit.viewer, "a transcript", &e),
    };
    let page = query.page;
    let read = tokio::task::spawn_blocking(move || transcript::read(&path, page)).await;
    let Ok(Ok((entries, more, bytes))) = read else {
        return not_found(&headers);
    };
    let view = transcript::TranscriptView {
        session: id.as_str().to_owned(),
        run,
        page,
        entries,
        more,
        bytes,
        raw: visit.viewer.is_operator(),
    };
    if wants_json(&headers) {
        return Json(view).into_response();
    }
    let csrf = visit.csrf.unwrap_or_default();
    html(
        StatusCode::OK,
        &transcript::TranscriptPage {
            t: &view,
            csrf: &csrf,
        },
        Some(SAME_ORIGIN),
    )
}

/// `GET /sessions/{id}/attempts/{run}/transcript/raw`: the raw file, for the operator
/// only (it may hold the repository's code and command output in full).
pub async fn transcript_raw(
    State(state): State<AppState>,
    Path((id, run)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Some(visit) = who(&state, &headers).await else {
        return sign_in_needed(&state, &headers);
    };
    if !visit.viewer.is_operator() {
        return not_found(&headers);
    }
    let id = SessionId(id);
    let Ok(Some(path)) = transcript_of(&state, &visit, &id, &run).await else {
        return not_found(&headers);
    };
    let Ok(file) = tokio::fs::File::open(&path).await else {
        return not_found(&headers);
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("transcript");
    let disposition = format!("attachment; filename=\"{run}-{name}\"");
    let mut response =
        axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file)).into_response();
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        out.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// The issue's page on its forge.
fn issue_url(state: &AppState, forge: ForgeKind, repo: &RepoName, issue: i64) -> Option<String> {
    WebLinks::new(&state.settings, forge, repo).issue(issue)
}

/// The pull (merge) request's page on its forge.
fn pull_url(state: &AppState, forge: ForgeKind, repo: &RepoName, pull: i64) -> Option<String> {
    WebLinks::new(&state.settings, forge, repo).pull(pull)
}

/// Where file references (contracts, observations, settings) link to.
fn source_links(state: &AppState, forge: ForgeKind, repo: &RepoName) -> SourceLinks {
    WebLinks::new(&state.settings, forge, repo).source()
}

/// Where the forge shows the checks of a pull (merge) request.
fn checks_url(state: &AppState, forge: ForgeKind, repo: &RepoName, pull: i64) -> Option<String> {
    WebLinks::new(&state.settings, forge, repo).checks(pull)
}

/// `12 min ago`.
pub fn age(ms: i64) -> String {
    let secs = (ms / 1000).max(0);
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86400 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86400),
    }
}

/// Markdown planwright wrote (contracts, reports), or a model or person wrote inside
/// them, as HTML that can carry no script, style or form: rendered, then sanitised.
pub fn markdown_html(text: &str) -> String {
    use pulldown_cmark::{Options, Parser};
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TASKLISTS);
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, Parser::new_ext(text, options));
    ammonia::Builder::default()
        .link_rel(Some("noopener noreferrer nofollow"))
        .clean(&out)
        .to_string()
}
