//! Where a run's environment comes from, first found wins: the repository file's
//! `environment.image`, the `image` of the devcontainer on the base commit, the
//! deployment's `ENVIRONMENT_IMAGE`, and else the planwright host's own tools. A source that
//! cannot be used is passed over with a note saying what to do, never silently.

use std::path::Path;

use serde::Deserialize;

use crate::config::checkout_file;
use crate::config::environment::{Choice, EnvironmentConfig, Source, check_reference};

/// Where the devcontainer may be, first found wins (the specification's two places).
pub const DEVCONTAINER_PATHS: &[&str] = &[".devcontainer/devcontainer.json", ".devcontainer.json"];

/// The devcontainer fields that decide whether planwright can use it.
#[derive(Debug, Deserialize)]
struct Devcontainer {
    image: Option<String>,
    build: Option<serde_json::Value>,
    #[serde(rename = "dockerFile")]
    docker_file: Option<serde_json::Value>,
    #[serde(rename = "dockerComposeFile")]
    docker_compose_file: Option<serde_json::Value>,
}

/// Chooses the environment for a checkout of the base commit at `checkout`.
pub fn choose(env: &EnvironmentConfig, checkout: &Path, deployment: Option<&str>) -> Choice {
    let mut notes = Vec::new();
    if let Some(image) = &env.image {
        return Choice {
            image: Some(image.clone()),
            digest: None,
            source: Source::Repository,
            notes,
        };
    }
    for path in DEVCONTAINER_PATHS {
        let text = match checkout_file::read(checkout, path) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(e) => {
                notes.push(format!("{e}, so its image was not used."));
                break;
            }
        };
        match devcontainer_image(path, &text) {
            Ok(image) => {
                return Choice {
                    image: Some(image),
                    digest: None,
                    source: Source::Devcontainer((*path).to_owned()),
                    notes,
                };
            }
            Err(note) => notes.push(note),
        }
        // The first devcontainer found is the repository's; another is not a fallback.
        break;
    }
    if let Some(image) = deployment {
        return Choice {
            image: Some(image.to_owned()),
            digest: None,
            source: Source::Deployment,
            notes,
        };
    }
    Choice::host(notes)
}

/// The image a devcontainer file names, or a note saying why planwright cannot use it.
fn devcontainer_image(path: &str, text: &str) -> Result<String, String> {
    let options = jsonc_parser::ParseOptions::default();
    let file: Devcontainer = jsonc_parser::parse_to_serde_value(text, &options)
        .map_err(|e| format!("`{path}` cannot be read ({e}), so its image was not used."))?;
    match file.image {
        Some(image) => check_reference(&image)
            .map_err(|e| format!("`{path}` names an image planwright cannot use: {e}.")),
        None if file.build.is_some()
            || file.docker_file.is_some()
            || file.docker_compose_file.is_some() =>
        {
            Err(format!(
                "`{path}` builds its image (`build`, `dockerFile` or `dockerComposeFile`), which \
                 planwright cannot do: publish the image to a registry and name it as `image` \
                 there, or as `environment.image` in the repository's planwright file."
            ))
        }
        None => Err(format!("`{path}` names no `image`, so it was not used.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const DEVCONTAINER: &str = r#"{
        // The team's CI image, with comments and a trailing comma as editors write them.
        "name": "ci",
        "image": "ghcr.io/acme/ci:1.4",
        "features": { "ghcr.io/devcontainers/features/node:1": {} },
    }"#;

    #[test]
    fn the_repository_file_wins_then_the_devcontainer_then_the_deployment() {
        let dir = checkout(&[(".devcontainer/devcontainer.json", DEVCONTAINER)]);
        let named = EnvironmentConfig {
            image: Some("python:3.12".into()),
            ..EnvironmentConfig::default()
        };
        let choice = choose(&named, dir.path(), Some("debian:12"));
        assert_eq!(choice.image.as_deref(), Some("python:3.12"));
        assert_eq!(choice.source, Source::Repository);

        let none = EnvironmentConfig::default();
        let choice = choose(&none, dir.path(), Some("debian:12"));
        assert_eq!(choice.image.as_deref(), Some("ghcr.io/acme/ci:1.4"));
        assert_eq!(
            choice.source,
            Source::Devcontainer(".devcontainer/devcontainer.json".into())
        );
        assert!(choice.notes.is_empty());

        let bare = checkout(&[]);
        let choice = choose(&none, bare.path(), Some("debian:12"));
        assert_eq!(
            (choice.image.as_deref(), choice.source),
            (Some("debian:12"), Source::Deployment)
        );
    }

    #[test]
    fn with_no_image_anywhere_the_host_is_used_and_said() {
        let bare = checkout(&[]);
        let choice = choose(&EnvironmentConfig::default(), bare.path(), None);
        assert_eq!((choice.image, choice.source), (None, Source::Host));
        assert!(
            choice.notes[0].contains("planwright host's tools"),
            "{:?}",
            choice.notes
        );
    }

    #[test]
    fn a_devcontainer_that_builds_its_image_is_passed_over_with_what_to_do() {
        let built = r#"{ "build": { "dockerfile": "Dockerfile" } }"#;
        let dir = checkout(&[(".devcontainer.json", built)]);
        let choice = choose(&EnvironmentConfig::default(), dir.path(), Some("debian:12"));
        assert_eq!(choice.source, Source::Deployment);
        assert!(
            choice.notes[0].contains("`.devcontainer.json` builds its image")
                && choice.notes[0].contains("publish the image"),
            "{:?}",
            choice.notes
        );
        let choice = choose(&EnvironmentConfig::default(), dir.path(), None);
        assert_eq!(choice.source, Source::Host);
        assert_eq!(choice.notes.len(), 2, "{:?}", choice.notes);
    }

    #[test]
    fn an_unreadable_or_unusable_devcontainer_is_named() {
        for (text, says) in [
            ("{ \"image\": ", "cannot be read"),
            (r#"{ "image": "not an image" }"#, "cannot use"),
            (r#"{ "name": "x" }"#, "names no `image`"),
        ] {
            let dir = checkout(&[(".devcontainer/devcontainer.json", text)]);
            let choice = choose(&EnvironmentConfig::default(), dir.path(), None);
            assert_eq!(choice.source, Source::Host);
            assert!(choice.notes[0].contains(says), "{text}: {:?}", choice.notes);
        }
    }
}
