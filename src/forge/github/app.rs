//! The GitHub App itself: its client signing JWTs as the app, the installations it
//! hands out as forges, and what each has accepted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use http::Method;
use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId as OctoInstallationId};
use secrecy::ExposeSecret;
use tokio::sync::OnceCell;

use super::GithubForge;
use super::client::{MAX_PAGES, PER_PAGE, Shared, classify_octocrab, graphql_url};
use super::wire::*;
use crate::config::GithubSettings;
use crate::forge::conditional::Answers;
use crate::forge::{ForgeError, RetryPolicy};
use crate::ids::InstallationId;

/// The GitHub App: signs JWTs as the app and hands out per-installation forges.
#[derive(Clone)]
pub struct GithubApp {
    pub(super) shared: Arc<Shared>,
}

impl GithubApp {
    /// Builds the app client from the settings; a key that does not parse is an error
    /// naming the setting, so a misconfigured deployment stops at startup.
    pub fn from_settings(settings: &GithubSettings) -> anyhow::Result<Self> {
        let app_id = settings
            .app_id
            .context("Cannot use GitHub: GITHUB_APP_ID is not set")?;
        let key = settings
            .private_key
            .as_ref()
            .context("Cannot use GitHub: GITHUB_PRIVATE_KEY is not set")?;
        let key = octocrab::EncodingKey::from_rsa_pem(key.expose_secret().as_bytes())
            .context("Cannot use GITHUB_PRIVATE_KEY: it is not an RSA private key in PEM form")?;
        let app = Octocrab::builder()
            .base_uri(settings.api_url.as_str())
            .with_context(|| {
                format!(
                    "Cannot use GITHUB_API_URL `{}` as a base URL",
                    settings.api_url
                )
            })?
            .app(AppId(app_id), key)
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)))
            .build()
            .context("Could not build the GitHub client")?;
        Ok(GithubApp {
            shared: Arc::new(Shared {
                app,
                app_id,
                graphql_url: graphql_url(&settings.api_url),
                web_url: settings.web_url.clone(),
                http: reqwest::Client::builder()
                    // A redirect could carry the token to another host.
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(Duration::from_secs(10))
                    .timeout(Duration::from_secs(30))
                    .build()
                    .context("Could not build the GitHub GraphQL client")?,
                retry: RetryPolicy {
                    max_rate_limit_wait: settings.rate_limit_wait,
                    ..RetryPolicy::default()
                },
                answers: Answers::default(),
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
                repo_ids: crate::forge::RepoIds::default(),
            }),
        })
    }

    /// The same app with another retry policy (tests use short backoffs). Call it before
    /// handing out installations: they share the policy of the app they came from.
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        GithubApp {
            shared: Arc::new(Shared {
                app: self.shared.app.clone(),
                app_id: self.shared.app_id,
                graphql_url: self.shared.graphql_url.clone(),
                web_url: self.shared.web_url.clone(),
                http: self.shared.http.clone(),
                retry,
                answers: Answers::default(),
                slug: OnceCell::new(),
                installations: Mutex::new(HashMap::new()),
                repo_ids: crate::forge::RepoIds::default(),
            }),
        }
    }

    /// The forge as seen by one installation.
    pub fn installation(&self, id: InstallationId) -> Result<GithubForge, ForgeError> {
        let what = || format!("use installation {id}");
        let mut clients = self
            .shared
            .installations
            .lock()
            .map_err(|_| ForgeError::Client {
                what: what(),
                message: "the client cache was poisoned by a panic".into(),
            })?;
        let client = match clients.get(&id) {
            Some(client) => Arc::clone(client),
            None => {
                let client = Arc::new(
                    self.shared
                        .app
                        .installation(OctoInstallationId(id.0 as u64))
                        .map_err(|e| classify_octocrab(what(), e))?,
                );
                clients.insert(id, Arc::clone(&client));
                client
            }
        };
        Ok(GithubForge {
            shared: Arc::clone(&self.shared),
            client,
            installation: id,
        })
    }

    /// Every installation of the app, with the permissions and events it has accepted
    /// (an installation made before the app asked for more keeps its old grant until an
    /// owner accepts the new one).
    pub async fn installations(&self) -> Result<Vec<InstallationGrant>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let batch: Vec<GhInstallation> = self
                .shared
                .request(
                    &self.shared.app,
                    None,
                    Method::GET,
                    &format!("/app/installations?per_page={PER_PAGE}&page={page}"),
                    None,
                )
                .await?;
            let last = batch.len() < PER_PAGE;
            all.extend(batch.into_iter().map(|i| InstallationGrant {
                id: InstallationId(i.id),
                account: i.account.map(|a| a.login).unwrap_or_default(),
                permissions: i.permissions,
                events: i.events,
            }));
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// The app's bot login (`<slug>[bot]`), fetched once.
    pub async fn bot_login(&self) -> Result<String, ForgeError> {
        let slug = self
            .shared
            .slug
            .get_or_try_init(|| async {
                let app: GhApp = self
                    .shared
                    .request(&self.shared.app, None, Method::GET, "/app", None)
                    .await?;
                Ok::<_, ForgeError>(app.slug)
            })
            .await?;
        Ok(format!("{slug}[bot]"))
    }
}

/// What one installation of the app has accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationGrant {
    pub id: InstallationId,
    /// The user or organisation it is installed on.
    pub account: String,
    /// Permission name → `read`, `write` or `admin`.
    pub permissions: std::collections::BTreeMap<String, String>,
    pub events: Vec<String>,
}
