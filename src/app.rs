//! The parts every job handler shares, built once from the settings: the database, the
//! forges, the models, the sandbox and the environment images.

use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use secrecy::SecretString;
use tokio::sync::OnceCell;

use crate::config::Settings;
use crate::environment::Environments;
use crate::event::{self, Actor};
use crate::forge::github::GithubApp;
use crate::forge::gitlab::GitlabForge;
use crate::forge::local::{self, LocalForge};
use crate::forge::{Forge, ForgeError};
use crate::git::{MirrorCache, Workspaces};
use crate::ids::InstallationId;
use crate::ids::ModelName;
use crate::llm::{ChatModel, HttpOptions};
use crate::metering::proxy::ModelProxy;
use crate::metering::{Metered, ModelRole};
use crate::sandbox::Sandbox;
use crate::store::Db;
use crate::store::model_usage::Budget;

pub struct App {
    pub db: Db,
    pub settings: Arc<Settings>,
    /// Shared with the HTTP side, which installs a GitHub App registered at run time.
    pub forges: Arc<Forges>,
    /// `None` when the sandbox cannot work here; scouts then only read.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// Why `sandbox` is `None`, in the sandbox's own words.
    pub sandbox_missing: Option<String>,
    /// Checkouts for planners and executors, from the mirror cache under `DATA_DIR`.
    pub workspaces: Arc<Workspaces>,
    /// The model proxy coding agents reach through the sandbox; `None` in roles that run
    /// no executors.
    pub model_proxy: Option<ModelProxy>,
    /// The registries and the image cache runs take their environments from.
    pub environments: Arc<Environments>,
    http: HttpOptions,
}

impl App {
    pub fn new(db: Db, settings: Arc<Settings>) -> anyhow::Result<Self> {
        Self::with_http(db, settings, HttpOptions::default())
    }

    /// As `new`, with other model HTTP options (tests use short retries).
    pub fn with_http(db: Db, settings: Arc<Settings>, http: HttpOptions) -> anyhow::Result<Self> {
        let forges = Arc::new(Forges::from_settings(&settings)?);
        let (sandbox, sandbox_missing) = match crate::sandbox::from_settings(&settings) {
            Ok(s) => (Some(Arc::from(s)), None),
            Err(e) => {
                tracing::warn!(error = %e, "scouts will not run commands");
                (None, Some(e.to_string()))
            }
        };
        let cache = Arc::new(
            MirrorCache::new(&settings.data_dir)
                .with_partial(&settings.workspaces.mirror_partial)?
                .with_partial_above(settings.workspaces.mirror_partial_above),
        );
        let workspaces = Arc::new(Workspaces::new(
            &settings.data_dir,
            cache,
            Workspaces::default_owner(),
        ));
        let environments = Arc::new(Environments::new(&settings.data_dir, &settings.images)?);
        Ok(App {
            db,
            settings,
            forges,
            sandbox,
            sandbox_missing,
            workspaces,
            model_proxy: None,
            environments,
            http,
        })
    }

    /// The same parts, with the model proxy this process serves.
    pub fn with_model_proxy(mut self, proxy: Option<ModelProxy>) -> Self {
        self.model_proxy = proxy;
        self
    }

    /// The model a role uses (the repository's choice when it made one, else the
    /// deployment's), metered to the session with its budget.
    pub fn model(
        &self,
        role: ModelRole,
        session: &crate::ids::SessionId,
        budget: Budget,
        repository_choice: Option<&ModelName>,
    ) -> anyhow::Result<Arc<dyn ChatModel>> {
        let metered = self.metered(role, repository_choice)?;
        Ok(Arc::new(metered.for_session(session.clone(), budget)))
    }

    /// As [`App::model`], with the calls also counted to one executor run.
    pub fn model_for_run(
        &self,
        role: ModelRole,
        session: &crate::ids::SessionId,
        run: &crate::ids::RunId,
        session_budget: Budget,
        run_budget: Budget,
        repository_choice: Option<&ModelName>,
    ) -> anyhow::Result<Arc<dyn ChatModel>> {
        let metered = self.metered(role, repository_choice)?;
        Ok(Arc::new(
            metered
                .for_session(session.clone(), session_budget)
                .for_run(run.clone(), run_budget),
        ))
    }

    /// The name of the model a role uses: the repository's choice, else the deployment's.
    pub fn model_name(
        &self,
        role: ModelRole,
        repository_choice: Option<&ModelName>,
    ) -> anyhow::Result<ModelName> {
        if let Some(name) = repository_choice {
            return Ok(name.clone());
        }
        let models = &self.settings.models;
        let (name, setting) = match role {
            ModelRole::Planner | ModelRole::Reviewer => (&models.planner, "PLANNER_MODEL"),
            ModelRole::Scout => (&models.scout, "SCOUT_MODEL"),
            ModelRole::Executor => (&models.executor, "EXECUTOR_MODEL"),
        };
        // A scout falls back to the planner's model rather than not existing.
        let name = match (name, role) {
            (Some(n), _) => n,
            (None, ModelRole::Scout) => models
                .planner
                .as_ref()
                .with_context(|| "Cannot plan: PLANNER_MODEL is not set".to_owned())?,
            (None, ModelRole::Executor) => {
                anyhow::bail!("Cannot execute: EXECUTOR_MODEL is not set")
            }
            (None, _) => anyhow::bail!("Cannot plan: {setting} is not set"),
        };
        ModelName::parse(name).with_context(|| format!("Cannot use {setting}"))
    }

    fn metered(
        &self,
        role: ModelRole,
        repository_choice: Option<&ModelName>,
    ) -> anyhow::Result<Metered> {
        let models = &self.settings.models;
        let name = self.model_name(role, repository_choice)?;
        let client = crate::llm::client(&name, models, &self.http)?;
        Metered::new(client, &models.prices, self.db.clone(), role)
    }
}

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
