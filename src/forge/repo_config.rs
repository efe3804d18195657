//! The repository's own settings file (`config::repo`) as the forge serves it from the
//! default branch, with the root files that guess the commands the file leaves out.

use crate::config::repo::{ConfigError, PROBED_FILES, RepoConfig, RootFiles};
use crate::forge::{Forge, ForgeError};
use crate::ids::RepoName;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The repository's fault: say it on the issue.
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
}

/// Reads the first candidate file from the default branch, or the defaults, with the
/// commands the file leaves out guessed from the repository's root files.
pub async fn load(forge: &dyn Forge, repo: &RepoName) -> Result<RepoConfig, LoadError> {
    load_with(forge, repo, true).await
}

/// As [`load`] without probing the root files (one forge request each):
/// for deciding who may do what, which needs no guessed commands. `setup`, `test` and
/// `network_allow` hold only what the file says.
pub async fn load_policy(forge: &dyn Forge, repo: &RepoName) -> Result<RepoConfig, LoadError> {
    load_with(forge, repo, false).await
}

async fn load_with(
    forge: &dyn Forge,
    repo: &RepoName,
    guess: bool,
) -> Result<RepoConfig, LoadError> {
    let root = |guess: bool| async move {
        if guess {
            probe(forge, repo).await
        } else {
            Ok(RootFiles::default())
        }
    };
    for path in forge.config_paths() {
        if let Some(text) = forge.read_file(repo, path).await? {
            return Ok(RepoConfig::parse(&text, path, &root(guess).await?)?);
        }
    }
    Ok(RepoConfig::defaults(&root(guess).await?))
}

async fn probe(forge: &dyn Forge, repo: &RepoName) -> Result<RootFiles, ForgeError> {
    let mut root = RootFiles::default();
    for name in PROBED_FILES {
        if let Some(text) = forge.read_file(repo, name).await? {
            root.insert(name, text);
        }
    }
    Ok(root)
}
