//! The forges this deployment talks to, by kind: the GitHub App (which may arrive while
//! running), GitLab, and the local repository `solve` works on.

use std::sync::{Arc, RwLock};

use secrecy::SecretString;
use tokio::sync::OnceCell;

use super::github::GithubApp;
use super::gitlab::GitlabForge;
use super::local::{self, LocalForge};
use super::{Forge, ForgeError};
use crate::config::Settings;
use crate::event::{self, Actor};
use crate::ids::InstallationId;

/// The forges this deployment is configured for. The GitHub App can arrive while running
/// (registered through the manifest flow), so it and its webhook secrets sit behind locks.
pub struct Forges {
    github: RwLock<Option<GithubApp>>,
    /// Every accepted GitHub webhook secret (more than one while rotating).
    github_secrets: RwLock<Vec<SecretString>>,
    gitlab: Option<GitlabForge>,
    /// The repository `solve` works on; never set in `serve`.
    local: Option<Arc<LocalForge>>,
    github_bot: OnceCell<String>,
}

impl Forges {
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let github = match settings.github.app_id {
            Some(_) => Some(GithubApp::from_settings(&settings.github)?),
            None => None,
        };
        let gitlab = match settings.gitlab.token {
            Some(_) => Some(GitlabForge::from_settings(&settings.gitlab)?),
            None => None,
        };
        Ok(Forges {
            github: RwLock::new(github),
            github_secrets: RwLock::new(settings.github.webhook_secrets.clone()),
            gitlab,
            local: None,
            github_bot: OnceCell::new(),
        })
    }

    /// Built from clients the caller made (tests give them short retry policies).
    pub fn new(github: Option<GithubApp>, gitlab: Option<GitlabForge>) -> Self {
        Forges {
            github: RwLock::new(github),
            github_secrets: RwLock::new(Vec::new()),
            gitlab,
            local: None,
            github_bot: OnceCell::new(),
        }
    }

    /// Only the local forge: what `solve` works through.
    pub fn local(forge: Arc<LocalForge>) -> Self {
        Forges {
            local: Some(forge),
            ..Self::new(None, None)
        }
    }

    /// Starts using a GitHub App registered while running, with the webhook secrets to
    /// accept. Refused when an app is in use already: one deployment is one app.
    pub fn install_github(
        &self,
        app: GithubApp,
        webhook_secrets: Vec<SecretString>,
    ) -> anyhow::Result<()> {
        let mut github = self.github.write().map_err(|_| {
            anyhow::anyhow!("Cannot install the GitHub App: a panic poisoned the lock")
        })?;
        if github.is_some() {
            anyhow::bail!("Cannot install a second GitHub App: this planwright has one already");
        }
        let mut secrets = self.github_secrets.write().map_err(|_| {
            anyhow::anyhow!("Cannot install the GitHub App: a panic poisoned the lock")
        })?;
        *secrets = webhook_secrets;
        *github = Some(app);
        Ok(())
    }

    /// The accepted GitHub webhook secrets, for verification only.
    pub fn github_secrets(&self) -> Vec<SecretString> {
        self.github_secrets
            .read()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    fn github_app(&self) -> Option<GithubApp> {
        self.github.read().ok().and_then(|g| g.clone())
    }

    /// Whether this deployment can talk to `forge` at all.
    pub fn configured(&self, forge: event::ForgeKind) -> bool {
        match forge {
            event::ForgeKind::Github => self.github_app().is_some(),
            event::ForgeKind::Gitlab => self.gitlab.is_some(),
            event::ForgeKind::Local => self.local.is_some(),
        }
    }

    pub fn get(
        &self,
        forge: event::ForgeKind,
        installation: Option<InstallationId>,
    ) -> Result<Arc<dyn Forge>, ForgeError> {
        let unconfigured = |what: &str| ForgeError::Client {
            what: format!("use {forge}"),
            message: format!("{what} is not configured"),
        };
        match forge {
            event::ForgeKind::Github => {
                let app = self
                    .github_app()
                    .ok_or_else(|| unconfigured("the GitHub App (GITHUB_APP_ID)"))?;
                let installation = installation.ok_or_else(|| ForgeError::Client {
                    what: "use GitHub".into(),
                    message: "the event names no installation".into(),
                })?;
                Ok(Arc::new(app.installation(installation)?))
            }
            event::ForgeKind::Gitlab => {
                let gitlab = self
                    .gitlab
                    .as_ref()
                    .ok_or_else(|| unconfigured("GitLab (GITLAB_TOKEN)"))?;
                Ok(Arc::new(gitlab.clone()))
            }
            event::ForgeKind::Local => {
                let forge = self
                    .local
                    .as_ref()
                    .ok_or_else(|| unconfigured("a local repository (`planwright solve`)"))?;
                Ok(forge.clone())
            }
        }
    }

    /// The handles planwright answers to in comments (`@planwright approve`).
    pub async fn bot_names(&self, forge: event::ForgeKind) -> Result<Vec<String>, ForgeError> {
        match forge {
            event::ForgeKind::Github => {
                let Some(app) = self.github_app() else {
                    return Ok(Vec::new());
                };
                let login = self
                    .github_bot
                    .get_or_try_init(|| app.bot_login())
                    .await?
                    .clone();
                let slug = login.trim_end_matches("[bot]").to_owned();
                Ok(vec![slug, login])
            }
            event::ForgeKind::Gitlab => {
                let Some(gitlab) = &self.gitlab else {
                    return Ok(Vec::new());
                };
                let me: Actor = gitlab.bot_user().await?;
                Ok(vec![me.login])
            }
            event::ForgeKind::Local => Ok(vec![local::BOT_LOGIN.to_owned()]),
        }
    }
}
