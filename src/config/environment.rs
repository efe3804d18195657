//! The repository file's `environment` section: the image runs use, the workspace paths
//! kept with the setup cache, and the files whose content keys that cache. Checked here
//! with the key's line, so a bad value is answered on the issue before anything runs.

use std::path::{Component, Path};

use serde::Deserialize;

/// The lock files whose content keys the setup cache when `cache_key` is not given: the
/// ones a checkout holds at its top.
pub const LOCK_FILES: &[&str] = &[
    "Cargo.lock",
    "package-lock.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "poetry.lock",
    "uv.lock",
    "requirements.txt",
    "go.sum",
    "Gemfile.lock",
    "pom.xml",
    "gradle.lockfile",
];

/// Where runs get their tools and what of the setup phase's work is kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct EnvironmentConfig {
    /// An OCI image reference (`ghcr.io/acme/ci:1.4`, `registry:5000/x/y@sha256:…`);
    /// `None`: the devcontainer, then the deployment's default, decide.
    #[serde(default)]
    pub image: Option<String>,
    /// Workspace paths restored from the setup cache instead of running setup again
    /// (`node_modules`, `.venv`, `target`).
    #[serde(default)]
    pub cache: Vec<String>,
    /// Files whose content keys the setup cache; `None`: the [`LOCK_FILES`] present
    /// (with `requirements*.txt`).
    #[serde(default)]
    pub cache_key: Option<Vec<String>>,
}

/// Which source named a run's image (see `environment::source::choose`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "from", content = "path")]
pub enum Source {
    /// The repository file's `environment.image`.
    Repository,
    /// A devcontainer file's `image`, at this path.
    Devcontainer(String),
    /// The deployment's `ENVIRONMENT_IMAGE`.
    Deployment,
    /// No image anywhere: the planwright host's own tools.
    Host,
}

/// The environment chosen for a contract at planning, bound with it: the reference (a
/// tag is resolved to a digest once per run), where it came from, and what the maintainer
/// should know about how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Choice {
    /// The image reference; `None` on the host.
    pub image: Option<String>,
    /// The digest `image` resolved to when planning pulled it: what the approval binds,
    /// so a tag moved since cannot change what runs. `None` on the host, and in choices
    /// recorded before digests were bound.
    #[serde(default)]
    pub digest: Option<String>,
    pub source: Source,
    /// Sources passed over (a devcontainer planwright cannot build) and the host fallback,
    /// in words for the status comment and the pull request.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Choice {
    /// The planwright host's own tools, with the note that says so.
    pub fn host(mut notes: Vec<String>) -> Self {
        notes.push(
            "Runs on the planwright host's tools: no image is named by the repository's \
             `environment.image`, a devcontainer, or the deployment's ENVIRONMENT_IMAGE."
                .to_owned(),
        );
        Choice {
            image: None,
            digest: None,
            source: Source::Host,
            notes,
        }
    }

    /// The reference to pull: pinned to the bound digest when there is one (the tag kept
    /// for the reader; a registry resolves the digest).
    pub fn pinned(&self) -> Option<String> {
        let image = self.image.as_deref()?;
        Some(match &self.digest {
            Some(digest) => {
                let name = image.split_once('@').map_or(image, |(name, _)| name);
                format!("{name}@{digest}")
            }
            None => image.to_owned(),
        })
    }

    /// Where the image came from, in words (`the repository's devcontainer
    /// `.devcontainer.json``).
    pub fn from_where(&self) -> String {
        match &self.source {
            Source::Repository => "the repository file's `environment.image`".to_owned(),
            Source::Devcontainer(path) => format!("the devcontainer `{path}`"),
            Source::Deployment => "the deployment's ENVIRONMENT_IMAGE".to_owned(),
            Source::Host => "no image: the planwright host's tools".to_owned(),
        }
    }
}

/// What a pull request says of a run that used the host's own programs, not an image.
pub const HOST_NOTE: &str = "Ran on the planwright host's tools: no image is named by the \
     repository's `environment.image`, a devcontainer, or the deployment's ENVIRONMENT_IMAGE.";

/// The section as written; unknown keys are refused with their line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileEnvironment {
    image: Option<String>,
    cache: Option<Vec<String>>,
    cache_key: Option<Vec<String>>,
}

impl FileEnvironment {
    /// The checked section; `Err((key, message))` names what is wrong and how to fix it.
    pub(super) fn check(self) -> Result<EnvironmentConfig, (&'static str, String)> {
        let image = match self.image {
            Some(image) => Some(check_reference(&image).map_err(|m| ("image", m))?),
            None => None,
        };
        let cache = self.cache.unwrap_or_default();
        for path in &cache {
            check_workspace_path(path).map_err(|m| ("cache", m))?;
        }
        if let Some(files) = &self.cache_key {
            if files.is_empty() {
                let text = "lists no file; leave it out to key the cache by the lock files";
                return Err(("cache_key", text.into()));
            }
            for path in files {
                check_workspace_path(path).map_err(|m| ("cache_key", m))?;
            }
        }
        Ok(EnvironmentConfig {
            image,
            cache,
            cache_key: self.cache_key,
        })
    }
}

impl EnvironmentConfig {
    /// The files keying the setup cache in the checkout at `dir`: those `cache_key` names
    /// (each must exist: `Err` names the first that does not), or the lock files present.
    pub fn key_files(&self, dir: &Path) -> Result<Vec<String>, String> {
        if let Some(files) = &self.cache_key {
            return match files.iter().find(|f| !dir.join(f).is_file()) {
                Some(missing) => Err(format!(
                    "`{missing}` is not a file in the repository; name files that exist, or leave `cache_key` out to use the lock files"
                )),
                None => Ok(files.clone()),
            };
        }
        let mut found: Vec<String> = LOCK_FILES
            .iter()
            .filter(|f| dir.join(f).is_file())
            .map(|f| (*f).to_owned())
            .collect();
        // `requirements-dev.txt` and the like pin as much as `requirements.txt` does.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let pinned = name.starts_with("requirements") && name.ends_with(".txt");
                if pinned && !found.contains(&name) && entry.path().is_file() {
                    found.push(name);
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

/// The reference as written, when it parses as an image reference; the error says why not,
/// with an example.
pub fn check_reference(image: &str) -> Result<String, String> {
    match crate::ids::image::ImageRef::parse(image) {
        Ok(_) => Ok(image.trim().to_owned()),
        Err(e) => Err(format!(
            "{e} (e.g. `ghcr.io/acme/ci:1.4` or `registry.example.com/team/ci@sha256:…`)"
        )),
    }
}

/// A path inside the workspace: relative, without `..`.
fn check_workspace_path(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    let inside = !path.trim().is_empty()
        && !path.contains('\0')
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(())
    } else {
        Err(format!(
            "`{path}` is not a path inside the repository; name it relative to the repository's top, without `..`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(image: Option<&str>, cache: &[&str], key: Option<&[&str]>) -> FileEnvironment {
        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        FileEnvironment {
            image: image.map(str::to_owned),
            cache: Some(list(cache)),
            cache_key: key.map(list),
        }
    }

    #[test]
    fn references_and_workspace_paths_are_accepted() {
        let digest = format!(
            "registry.example.com:5000/team/ci@sha256:{}",
            "a".repeat(64)
        );
        for image in ["ghcr.io/acme/ci:1.4", "python:3.12-slim", digest.as_str()] {
            let env = file(
                Some(image),
                &["node_modules", "./.venv"],
                Some(&["a/b.lock"]),
            )
            .check()
            .unwrap();
            assert_eq!(env.image.as_deref(), Some(image));
            assert_eq!(env.cache, ["node_modules", "./.venv"]);
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let key = |f: FileEnvironment| f.check().unwrap_err().0;
        assert_eq!(key(file(Some("not an image"), &[], None)), "image");
        assert_eq!(key(file(Some("-rm"), &[], None)), "image");
        assert_eq!(key(file(None, &["../outside"], None)), "cache");
        assert_eq!(key(file(None, &["/etc"], None)), "cache");
        assert_eq!(key(file(None, &[], Some(&["lock/../../x"]))), "cache_key");
        assert_eq!(key(file(None, &[], Some(&[]))), "cache_key");
    }

    #[test]
    fn the_lock_files_present_key_the_cache_unless_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["Cargo.lock", "requirements-dev.txt", "README.md"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let env = EnvironmentConfig::default();
        assert_eq!(
            env.key_files(dir.path()).unwrap(),
            ["Cargo.lock", "requirements-dev.txt"]
        );
        let named = EnvironmentConfig {
            cache_key: Some(vec!["README.md".into()]),
            ..EnvironmentConfig::default()
        };
        assert_eq!(named.key_files(dir.path()).unwrap(), ["README.md"]);
        let missing = EnvironmentConfig {
            cache_key: Some(vec!["deps.lock".into()]),
            ..EnvironmentConfig::default()
        };
        let error = missing.key_files(dir.path()).unwrap_err();
        assert!(error.contains("`deps.lock` is not a file"), "{error}");
    }
}
