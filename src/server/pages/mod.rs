//! The signed-in pages: the sessions a viewer may see (`/`), and one session's decisions
//! and doings (`/sessions/{id}`). Every page answers `Accept: application/json` with the
//! same data. Nothing here is a source of truth: the pages read the database, and the
//! issue thread stays the record of decisions.

pub mod auth;
mod session;

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Json, Redirect, Response};
use axum_extra::extract::cookie::Key;
use serde::{Deserialize, Serialize};
use tracing::error;

use super::AppState;
use super::setup::html;
use crate::event::ForgeKind;
use crate::ids::{RepoName, SessionId};
use crate::store::{installations, now_ms, sessions};
use auth::{Viewer, Visit};

/// Sessions the home page lists at most.
const HOME_SESSIONS: i64 = 200;

/// What the pages share: the key of the session cookie.
#[derive(Clone)]
pub struct Pages {
    pub key: Key,
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

/// Cookies are `Secure` when planwright is reached over https.
fn secure(state: &AppState) -> bool {
    state.settings.public_url.starts_with("https://")
}

fn who(state: &AppState, headers: &HeaderMap) -> Option<Visit> {
    auth::visit(
        headers,
        &state.pages.key,
        state.settings.admin_token.as_ref(),
    )
}

/// What an anonymous request gets: the sign-in page, or a JSON refusal.
fn sign_in_needed(state: &AppState, headers: &HeaderMap) -> Response {
    if wants_json(headers) {
        let mut response = (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({
                "error": "sign in first: send Authorization: Bearer <ADMIN_TOKEN>"
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
}

fn sign_in_page(state: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let (csrf, jar) = auth::sign_in_form(&state.pages.key, secure(state));
    let page = SignInPage {
        csrf: &csrf,
        error,
        token_sign_in: state.settings.admin_token.is_some(),
    };
    let mut response = html(status, &page, Some(&state.settings.public_url));
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
    if who(&state, &headers).is_some() {
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
    if !auth::sign_in_form_matches(&headers, &state.pages.key, &form.csrf) {
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
    let jar = auth::sign_in(
        &headers,
        &state.pages.key,
        &Viewer::Operator,
        secure(&state),
    );
    (jar, Redirect::to("/")).into_response()
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
    let Some(visit) = who(&state, &headers) else {
        return Redirect::to("/sign-in").into_response();
    };
    if visit
        .csrf
        .as_deref()
        .is_some_and(|csrf| !auth::same_token(csrf, &form.csrf))
    {
        return forbidden(&headers);
    }
    (
        auth::sign_out(&headers, &state.pages.key),
        Redirect::to("/sign-in"),
    )
        .into_response()
}

fn forbidden(headers: &HeaderMap) -> Response {
    if wants_json(headers) {
        return (
            StatusCode::FORBIDDEN,
            Json(serde_json::json!({"error": "the form's CSRF token does not match"})),
        )
            .into_response();
    }
    super::setup::message_page(
        StatusCode::FORBIDDEN,
        "Refused",
        "This form did not come from this page (its CSRF token does not match). Go back, reload, and try again.",
    )
}

fn not_found(headers: &HeaderMap) -> Response {
    if wants_json(headers) {
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": "no such session"})),
        )
            .into_response();
    }
    super::setup::message_page(
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no such session, or it is not yours to see.",
    )
}

fn unavailable(what: &str, e: &anyhow::Error) -> Response {
    error!(error = %format!("{e:#}"), "Could not build {what}");
    super::setup::message_page(
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
    viewer: &'static str,
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
    contract_version: Option<i64>,
    cost: String,
    cost_microusd: i64,
    age: String,
    created_at: i64,
    updated_at: i64,
    failed: bool,
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
    let Some(visit) = who(&state, &headers) else {
        return sign_in_needed(&state, &headers);
    };
    let home = match load_home(&state, &visit.viewer, &query).await {
        Ok(home) => home,
        Err(e) => return unavailable("the home page", &e),
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
        Some(&state.settings.public_url),
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
    let rows =
        sessions::list_filtered(&state.db, repo.as_ref(), wanted_state, HOME_SESSIONS).await?;
    let now = now_ms();
    let sessions = rows
        .into_iter()
        .map(|s| HomeRow {
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
        })
        .collect();
    let mut conn = state.db.pool.acquire().await?;
    let mut installation_rows = Vec::new();
    match viewer {
        Viewer::Operator => {
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
    let repositories = sessions::repositories(&state.db)
        .await?
        .into_iter()
        .map(|r| r.to_string())
        .collect();
    Ok(Home {
        viewer: match viewer {
            Viewer::Operator => "operator",
        },
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
    let Some(visit) = who(&state, &headers) else {
        return sign_in_needed(&state, &headers);
    };
    let id = SessionId(id);
    let view = match session::load(&state, &visit.viewer, &id).await {
        Ok(Some(view)) => view,
        Ok(None) => return not_found(&headers),
        Err(e) => return unavailable("a session page", &e),
    };
    if wants_json(&headers) {
        return Json(view).into_response();
    }
    let csrf = visit.csrf.unwrap_or_default();
    html(
        StatusCode::OK,
        &session::SessionPage {
            s: &view,
            csrf: &csrf,
        },
        Some(&state.settings.public_url),
    )
}

/// The issue's page on its forge.
fn issue_url(state: &AppState, forge: ForgeKind, repo: &RepoName, issue: i64) -> Option<String> {
    forge_base(state, forge, repo).map(|base| match forge {
        ForgeKind::Gitlab => format!("{base}/-/issues/{issue}"),
        _ => format!("{base}/issues/{issue}"),
    })
}

/// The pull (merge) request's page on its forge.
fn pull_url(state: &AppState, forge: ForgeKind, repo: &RepoName, pull: i64) -> Option<String> {
    forge_base(state, forge, repo).map(|base| match forge {
        ForgeKind::Gitlab => format!("{base}/-/merge_requests/{pull}"),
        _ => format!("{base}/pull/{pull}"),
    })
}

fn forge_base(state: &AppState, forge: ForgeKind, repo: &RepoName) -> Option<String> {
    match forge {
        ForgeKind::Github => Some(format!("{}/{repo}", state.settings.github_url)),
        ForgeKind::Gitlab => state
            .settings
            .gitlab
            .url
            .as_ref()
            .map(|base| format!("{}/{repo}", base.trim_end_matches('/'))),
        ForgeKind::Local => None,
    }
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
