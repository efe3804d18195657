//! The parts every job handler shares, built once from the settings: the database, the
//! forges, the models, the sandbox and the environment images.

use std::sync::Arc;

use anyhow::Context as _;

use crate::config::Settings;
use crate::environment::Environments;
use crate::git::{MirrorCache, Workspaces};
use crate::ids::ModelName;
use crate::llm::{ChatModel, HttpOptions};
use crate::metering::proxy::ModelProxy;
use crate::metering::{Metered, ModelRole};
use crate::sandbox::Sandbox;
use crate::store::Db;
use crate::store::model_usage::Budget;

pub use crate::forge::Forges;

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
