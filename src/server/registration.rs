//! Registering the GitHub App. `GET /` registers it through GitHub's manifest flow until
//! one is configured, and shows the session pages after that; GitHub sends the
//! browser back to `GET /setup/github/callback` with the code for the new app's credentials.
//! Registering needs the operator's setup token: a fresh public instance is otherwise
//! anyone's to claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use askama::Template;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRef, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{error, info, warn};

use super::AppState;
use super::html::{html, message_page};
use crate::app::Forges;
use crate::config::Settings;
use crate::config::github_app::{self, RegisteredApp};
use crate::event::ForgeKind;
use crate::forge::github::GithubApp;
use crate::onboarding;

pub const CALLBACK_PATH: &str = "/setup/github/callback";
/// Holds the browser's half of a manifest-flow `state`: the state alone, which travels in
/// URLs, does not finish a registration.
const STATE_COOKIE: &str = "planwright_setup_state";
/// How long a state planwright issued may come back from GitHub.
const STATE_TTL: Duration = Duration::from_secs(30 * 60);
/// States outstanding at once; only the operator can ask for one, so this is a backstop.
const MAX_STATES: usize = 32;
/// The token form is a few fields; nothing bigger is read from an unauthenticated sender.
pub const FORM_LIMIT: usize = 4096;

/// What the registration pages need, shared by `serve` and `setup`.
#[derive(Clone)]
pub struct Onboarding {
    settings: Arc<Settings>,
    forges: Arc<Forges>,
    /// The base GitHub sends the browser back to: PUBLIC_URL, or `setup`'s local listener.
    return_url: String,
    /// The organisation `setup --org` registers for, when no `?org=` is given.
    org: Option<String>,
    notify: Option<UnboundedSender<RegisteredApp>>,
    /// One registration at a time: two would race to store different apps.
    registering: Arc<tokio::sync::Mutex<()>>,
    setup_token: Arc<SetupToken>,
    states: Arc<Mutex<IssuedStates>>,
}

/// The secret that lets a browser register the app: SETUP_TOKEN, or one made for this
/// process and shown only to whoever reads its log or terminal.
struct SetupToken {
    secret: SecretString,
    generated: bool,
}

impl Onboarding {
    pub fn new(settings: Arc<Settings>, forges: Arc<Forges>, return_url: &str) -> Self {
        let setup_token = match &settings.setup_token {
            Some(secret) => SetupToken {
                secret: secret.clone(),
                generated: false,
            },
            None => SetupToken {
                secret: SecretString::from(hex::encode(rand::random::<[u8; 16]>())),
                generated: true,
            },
        };
        Onboarding {
            settings,
            forges,
            return_url: return_url.trim_end_matches('/').to_owned(),
            org: None,
            notify: None,
            registering: Arc::new(tokio::sync::Mutex::new(())),
            setup_token: Arc::new(setup_token),
            states: Arc::new(Mutex::new(IssuedStates::default())),
        }
    }

    /// Tells `notify` of every app registered through these pages.
    pub fn notify(mut self, notify: UnboundedSender<RegisteredApp>) -> Self {
        self.notify = Some(notify);
        self
    }

    pub fn with_org(mut self, org: Option<String>) -> Self {
        self.org = org;
        self
    }

    /// The registration page with the setup token in it, for the operator's own eyes only
    /// (their terminal, or the log of a fresh `serve`).
    pub fn setup_url(&self) -> String {
        format!(
            "{}/?token={}",
            self.return_url,
            utf8_percent_encode(self.setup_token.secret.expose_secret(), NON_ALPHANUMERIC)
        )
    }

    /// Tells the operator of a fresh `serve` how to register the app. A token they chose
    /// stays out of the log; one made here can be read nowhere else.
    pub fn announce(&self) {
        if self.setup_token.generated {
            warn!(
                setup_url = %self.setup_url(),
                "No GitHub App is configured: open setup_url to register one (its setup token is made anew at every start; set SETUP_TOKEN to choose one)"
            );
        } else {
            warn!(
                "No GitHub App is configured: open {}/ and give the setup token (SETUP_TOKEN) to register one",
                self.return_url
            );
        }
    }

    fn token_matches(&self, given: &str) -> bool {
        let expected = Sha256::digest(self.setup_token.secret.expose_secret().as_bytes());
        bool::from(Sha256::digest(given.trim().as_bytes()).ct_eq(&expected))
    }
}

/// Manifest-flow states this process issued and has not seen back yet, each bound to the
/// browser it was issued to by a digest of that browser's cookie.
#[derive(Default)]
struct IssuedStates {
    by_state: HashMap<String, Issued>,
}

struct Issued {
    browser: [u8; 32],
    expires: Instant,
}

#[derive(Debug, PartialEq, Eq)]
enum StateRefusal {
    /// Never issued here, or used already.
    Unknown,
    Expired,
    /// Issued to another browser (or the cookie is missing).
    OtherBrowser,
}

impl IssuedStates {
    /// A new state and the cookie value that must come back with it.
    fn issue(&mut self, now: Instant) -> (String, String) {
        self.by_state.retain(|_, issued| issued.expires > now);
        while self.by_state.len() >= MAX_STATES {
            let Some(oldest) = self
                .by_state
                .iter()
                .min_by_key(|(_, issued)| issued.expires)
                .map(|(state, _)| state.clone())
            else {
                break;
            };
            self.by_state.remove(&oldest);
        }
        let state = onboarding::new_state();
        let browser = onboarding::new_state();
        self.by_state.insert(
            state.clone(),
            Issued {
                browser: Sha256::digest(browser.as_bytes()).into(),
                expires: now + STATE_TTL,
            },
        );
        (state, browser)
    }

    /// Takes the state back, once. A state presented without its browser's cookie stays
    /// issued: whoever saw it in a URL cannot spend it for the browser it belongs to.
    fn redeem(
        &mut self,
        state: &str,
        browser: Option<&str>,
        now: Instant,
    ) -> Result<(), StateRefusal> {
        let issued = self.by_state.get(state).ok_or(StateRefusal::Unknown)?;
        if issued.expires <= now {
            self.by_state.remove(state);
            return Err(StateRefusal::Expired);
        }
        let browser = browser
            .filter(|b| !b.is_empty())
            .ok_or(StateRefusal::OtherBrowser)?;
        let presented: [u8; 32] = Sha256::digest(browser.as_bytes()).into();
        if !bool::from(presented.ct_eq(&issued.browser)) {
            return Err(StateRefusal::OtherBrowser);
        }
        self.by_state.remove(state);
        Ok(())
    }
}

impl FromRef<AppState> for Onboarding {
    fn from_ref(state: &AppState) -> Self {
        state.onboarding.clone()
    }
}

/// `planwright setup`'s one-shot listener: the registration page and the callback only.
pub fn terminal_router(onboarding: Onboarding) -> Router {
    Router::new()
        .route(
            "/",
            get(terminal_index)
                .post(terminal_token_form)
                .layer(DefaultBodyLimit::max(FORM_LIMIT)),
        )
        .route(CALLBACK_PATH, get(callback))
        .with_state(onboarding)
}

#[derive(Deserialize)]
pub struct IndexQuery {
    org: Option<String>,
    token: Option<String>,
    #[serde(flatten)]
    pages: super::pages::HomeQuery,
}

/// `GET /`: the registration page while no forge is configured (or, on a GitLab-only
/// deployment, when the setup token is given), the session pages after.
pub async fn index(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<IndexQuery>,
) -> Response {
    // A deployment that only has GitLab shows its pages; the GitHub App can still be
    // registered there through `/?token=`, the address `serve` prints.
    let registering = query.token.is_some() || query.org.is_some();
    if !state.forges.configured(ForgeKind::Github)
        && (registering || !state.forges.configured(ForgeKind::Gitlab))
    {
        return registration_page(
            &state.onboarding,
            query.org.as_deref(),
            query.token.as_deref(),
        );
    }
    super::pages::home(state, headers, query.pages).await
}

/// The setup token form's fields.
#[derive(Deserialize)]
struct TokenForm {
    token: Option<String>,
    org: Option<String>,
}

/// `POST /`: the setup token form, which keeps the token out of the address bar.
pub async fn token_form(State(state): State<AppState>, body: Bytes) -> Response {
    if state.forges.configured(ForgeKind::Github) {
        return already_registered();
    }
    submitted_token(&state.onboarding, &body)
}

async fn terminal_token_form(State(onboarding): State<Onboarding>, body: Bytes) -> Response {
    submitted_token(&onboarding, &body)
}

fn submitted_token(onboarding: &Onboarding, body: &[u8]) -> Response {
    match serde_urlencoded::from_bytes::<TokenForm>(body) {
        Ok(form) => registration_page(
            onboarding,
            form.org.as_deref().or(onboarding.org.as_deref()),
            Some(form.token.as_deref().unwrap_or_default()),
        ),
        Err(e) => message_page(
            StatusCode::BAD_REQUEST,
            "Cannot register",
            &format!("Could not read the form: {e}. Open / and submit the form again."),
        ),
    }
}

async fn terminal_index(
    State(onboarding): State<Onboarding>,
    Query(query): Query<IndexQuery>,
) -> Response {
    let org = query.org.or_else(|| onboarding.org.clone());
    registration_page(&onboarding, org.as_deref(), query.token.as_deref())
}

/// Asks for the setup token; `wrong` when one was given and it is not this planwright's.
fn token_page(org: Option<&str>, wrong: bool) -> Response {
    let status = if wrong {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::UNAUTHORIZED
    };
    html(status, &TokenPage { org, wrong }, Some("'self'"))
}

fn registration_page(onboarding: &Onboarding, org: Option<&str>, token: Option<&str>) -> Response {
    let org = org.map(str::trim).filter(|o| !o.is_empty());
    // Checked first, so that the token form never carries a name GitHub would refuse.
    if let Err(e) = onboarding::registration_url(&onboarding.settings.github_url, org, "") {
        return message_page(
            StatusCode::BAD_REQUEST,
            "Cannot register",
            &format!("{e:#}"),
        );
    }
    match token {
        None => return token_page(org, false),
        Some(token) if !onboarding.token_matches(token) => {
            warn!("refused the GitHub App registration page: the setup token is wrong");
            return token_page(org, true);
        }
        Some(_) => {}
    }
    let Ok(mut states) = onboarding.states.lock() else {
        error!("Could not issue a registration state: a panic poisoned the lock");
        return message_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Cannot register",
            "Could not issue a registration state; restart planwright and try again.",
        );
    };
    let (state, browser) = states.issue(Instant::now());
    drop(states);
    let action = match onboarding::registration_url(&onboarding.settings.github_url, org, &state) {
        Ok(url) => url,
        Err(e) => {
            return message_page(
                StatusCode::BAD_REQUEST,
                "Cannot register",
                &format!("{e:#}"),
            );
        }
    };
    let manifest =
        match onboarding::manifest(&onboarding.settings.public_url, &onboarding.return_url) {
            Ok(m) => m,
            Err(e) => {
                error!(error = %format!("{e:#}"), "Could not build the app manifest");
                return message_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Cannot register",
                    &format!("{e:#}"),
                );
            }
        };
    let compact = manifest.to_string();
    let pretty = serde_json::to_string_pretty(&manifest).unwrap_or_else(|_| compact.clone());
    let data_dir = RegisteredApp::path(&onboarding.settings.data_dir)
        .display()
        .to_string();
    let page = RegisterPage {
        org,
        data_dir: &data_dir,
        action: &action,
        manifest: &compact,
        pretty: &pretty,
    };
    let secure = if onboarding.return_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{STATE_COOKIE}={browser}; Path=/setup/github; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
        STATE_TTL.as_secs()
    );
    let mut response = html(StatusCode::OK, &page, Some(&onboarding.settings.github_url));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
}

/// `GET /setup/github/callback`: takes back the `state` this planwright issued to this
/// browser (once, before it expires), exchanges the code, stores the credentials and starts
/// using the app.
pub async fn callback(
    State(onboarding): State<Onboarding>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    if onboarding.forges.configured(ForgeKind::Github) {
        return already_registered();
    }
    let browser = cookie(&headers, STATE_COOKIE);
    let redeemed = match onboarding.states.lock() {
        Ok(mut states) => states.redeem(
            query.state.as_deref().unwrap_or_default(),
            browser.as_deref(),
            Instant::now(),
        ),
        Err(_) => Err(StateRefusal::Unknown),
    };
    if let Err(refusal) = redeemed {
        warn!(
            ?refusal,
            "refused a GitHub App registration with a state planwright did not issue to this browser"
        );
        let why = match refusal {
            StateRefusal::Unknown => {
                "The state GitHub sent back was not issued by this planwright, or it was used already."
            }
            StateRefusal::Expired => "The state GitHub sent back has expired.",
            StateRefusal::OtherBrowser => {
                "The state GitHub sent back does not match this browser: it was issued to another one, or this browser kept no cookie."
            }
        };
        return message_page(
            StatusCode::FORBIDDEN,
            "Cannot finish the registration",
            &format!(
                "{why} Start again from {}/ in this browser, with the setup token.",
                onboarding.return_url
            ),
        );
    }
    let Some(code) = query.code.filter(|c| !c.is_empty()) else {
        return message_page(
            StatusCode::BAD_REQUEST,
            "Cannot finish the registration",
            "GitHub sent no code: the registration was not completed on GitHub. Start again from / with the setup token.",
        );
    };
    let _registering = onboarding.registering.lock().await;
    if onboarding.forges.configured(ForgeKind::Github) {
        return already_registered();
    }
    match register(&onboarding, &code).await {
        Ok(app) => {
            info!(app_id = app.id, slug = %app.slug, "GitHub App registered from the manifest");
            let install = format!("{}/installations/new", app.html_url.trim_end_matches('/'));
            // GitHub's answer is trusted for its content, not for the link's scheme.
            let install = (install.starts_with("https://") || install.starts_with("http://"))
                .then_some(install.as_str());
            let page = RegisteredPage {
                slug: &app.slug,
                id: app.id,
                install,
            };
            let mut response = html(StatusCode::OK, &page, None);
            if let Some(notify) = &onboarding.notify {
                let _ = notify.send(app);
            }
            if let Ok(value) = HeaderValue::from_str(&format!(
                "{STATE_COOKIE}=; Path=/setup/github; Max-Age=0; HttpOnly; SameSite=Lax"
            )) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(e) => {
            let message = format!("{e:#}");
            error!(error = %message, "Could not register the GitHub App");
            message_page(
                StatusCode::BAD_GATEWAY,
                "Cannot finish the registration",
                &message,
            )
        }
    }
}

fn already_registered() -> Response {
    message_page(
        StatusCode::CONFLICT,
        "Cannot register another GitHub App",
        "This planwright has a GitHub App already.",
    )
}

async fn register(onboarding: &Onboarding, code: &str) -> anyhow::Result<RegisteredApp> {
    let settings = &onboarding.settings;
    let app = RegisteredApp::exchange(&settings.github.api_url, code).await?;
    // Built before anything is stored, so a key GitHub sent that cannot sign is an error
    // here rather than at the next start.
    let github = settings.github.with_registered(&app);
    let client = GithubApp::from_settings(&github)?;
    app.save(&settings.data_dir)?;
    onboarding
        .forges
        .install_github(client, github.webhook_secrets)?;
    Ok(app)
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The setup token form.
#[derive(Template)]
#[template(path = "token.html")]
struct TokenPage<'a> {
    org: Option<&'a str>,
    wrong: bool,
}

/// The manifest form that registers the app on GitHub.
#[derive(Template)]
#[template(path = "register.html")]
struct RegisterPage<'a> {
    org: Option<&'a str>,
    data_dir: &'a str,
    action: &'a str,
    manifest: &'a str,
    pretty: &'a str,
}

/// The end of a registration; `install` only when GitHub's link is http(s).
#[derive(Template)]
#[template(path = "registered.html")]
struct RegisteredPage<'a> {
    slug: &'a str,
    id: u64,
    install: Option<&'a str>,
}

/// `planwright setup`: serves the registration page on a one-shot local listener, waits
/// for GitHub to send the browser back, stores the credentials and stops.
pub async fn setup_from_terminal(
    settings: Settings,
    listen: std::net::SocketAddr,
    org: Option<String>,
) -> anyhow::Result<RegisteredApp> {
    use anyhow::{Context as _, bail};
    if let Some(org) = &org {
        onboarding::check_org(org)?;
    }
    if let Some(id) = settings.github.app_id {
        bail!(
            "Cannot set up a GitHub App: app {id} is configured already (GITHUB_APP_ID, or {} under DATA_DIR); remove it first to register another",
            github_app::CREDENTIALS_FILE
        );
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("Could not listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let local = format!("http://{addr}");
    let settings = Arc::new(settings);
    let forges = Arc::new(crate::app::Forges::from_settings(&settings)?);
    let (done, mut registered) = tokio::sync::mpsc::unbounded_channel();
    let onboarding = Onboarding::new(settings.clone(), forges, &local)
        .notify(done)
        .with_org(org);
    let router = terminal_router(onboarding.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await
    });
    println!(
        "Open {} in a browser on this machine to register planwright's GitHub App.",
        onboarding.setup_url()
    );
    println!(
        "GitHub will send its webhooks to {}/webhooks/github (PUBLIC_URL).",
        settings.public_url
    );
    let app = tokio::select! {
        app = registered.recv() => app.context("The setup listener stopped before GitHub answered")?,
        _ = tokio::signal::ctrl_c() => {
            stop.cancel();
            bail!("Setup was interrupted before GitHub answered");
        }
    };
    stop.cancel();
    server
        .await
        .context("The setup listener panicked")?
        .context("The setup listener failed")?;
    Ok(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_taken_back_once_from_its_own_browser_before_it_expires() {
        let now = Instant::now();
        let mut states = IssuedStates::default();
        let (state, browser) = states.issue(now);
        assert_ne!(state, browser);
        assert_eq!(
            states.redeem(&state, None, now),
            Err(StateRefusal::OtherBrowser)
        );
        let (_, other) = states.issue(now);
        assert_eq!(
            states.redeem(&state, Some(&other), now),
            Err(StateRefusal::OtherBrowser)
        );
        assert_eq!(states.redeem(&state, Some(&browser), now), Ok(()));
        assert_eq!(
            states.redeem(&state, Some(&browser), now),
            Err(StateRefusal::Unknown)
        );
        assert_eq!(
            states.redeem(&"0".repeat(64), Some(&browser), now),
            Err(StateRefusal::Unknown)
        );

        let (late, browser) = states.issue(now);
        let after = now + STATE_TTL;
        assert_eq!(
            states.redeem(&late, Some(&browser), after),
            Err(StateRefusal::Expired)
        );
        assert_eq!(
            states.redeem(&late, Some(&browser), now),
            Err(StateRefusal::Unknown)
        );
    }

    #[test]
    fn outstanding_states_are_capped_and_the_oldest_goes_first() {
        let start = Instant::now();
        let mut states = IssuedStates::default();
        let issued: Vec<(String, String)> = (0..MAX_STATES as u64 + 1)
            .map(|i| states.issue(start + Duration::from_secs(i)))
            .collect();
        assert_eq!(states.by_state.len(), MAX_STATES);
        let now = start + Duration::from_secs(MAX_STATES as u64 + 1);
        let (first, browser) = &issued[0];
        assert_eq!(
            states.redeem(first, Some(browser), now),
            Err(StateRefusal::Unknown)
        );
        let (last, browser) = &issued[MAX_STATES];
        assert_eq!(states.redeem(last, Some(browser), now), Ok(()));
    }

    #[test]
    fn the_state_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("planwright_setup_state=abc"),
        );
        assert_eq!(cookie(&headers, STATE_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, "c"), None);
    }
}
