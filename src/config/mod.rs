//! Deployment settings: an optional TOML file overridden by `PLANWRIGHT_<KEY>` environment
//! variables (DESIGN §10). Every value is checked here, once, with the key named in the
//! error, so the rest of the program reads typed settings only. `keys` lists every key
//! (the file's shape and the environment's names), `load` checks them into `settings`.

pub mod checkout_file;
pub mod environment;
pub mod github_app;
pub mod images;
pub mod keys;
mod load;
pub mod prices;
pub mod repo;
mod settings;

pub use keys::{ENV_PREFIX, KEYS, Key};
pub use settings::{
    ACCESS_CHECK, GithubSettings, GitlabSettings, LogFormat, MAP_TOKENS, MAP_TOKENS_MIN,
    ModelSettings, ProxyListen, QueueSettings, RATE_LIMIT_WAIT, SPARSE_CHECKOUT_FILES, Settings,
    WorkspaceSettings,
};
