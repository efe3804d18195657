//! What a signed-in person can see on GitHub, asked with their own token.

use std::collections::BTreeSet;

use secrecy::SecretString;
use serde::Deserialize;

use crate::forge::person::{AccessError, get_json};

/// Pages of a listing read at most (100 entries each).
const MAX_PAGES: usize = 20;
/// Installations of the App one person is looked up in at most.
const MAX_INSTALLATIONS: usize = 50;

/// Every repository (`owner/name`, lower-case) the person can see through the App's
/// installations: GitHub lists only repositories the person has been given access to,
/// not every public one.
pub async fn readable_repositories(
    http: &reqwest::Client,
    api_url: &str,
    token: &SecretString,
) -> Result<BTreeSet<String>, AccessError> {
    let mut installations = Vec::new();
    for page in 1..=MAX_PAGES {
        let answer: GhInstallations = get_json(
            http,
            &format!("{api_url}/user/installations?per_page=100&page={page}"),
            token,
        )
        .await?
        .ok_or_else(|| AccessError::Unavailable("no installation listing".into()))?;
        let last = answer.installations.len() < 100;
        installations.extend(answer.installations.into_iter().map(|i| i.id));
        if last || installations.len() >= MAX_INSTALLATIONS {
            break;
        }
    }
    let mut listed = BTreeSet::new();
    for id in installations.into_iter().take(MAX_INSTALLATIONS) {
        for page in 1..=MAX_PAGES {
            let Some(answer) = get_json::<GhRepositories>(
                http,
                &format!("{api_url}/user/installations/{id}/repositories?per_page=100&page={page}"),
                token,
            )
            .await?
            else {
                // The installation went away meanwhile.
                break;
            };
            let last = answer.repositories.len() < 100;
            listed.extend(
                answer
                    .repositories
                    .into_iter()
                    .map(|r| r.full_name.to_ascii_lowercase()),
            );
            if last {
                break;
            }
        }
    }
    Ok(listed)
}

#[derive(Deserialize)]
struct GhInstallations {
    installations: Vec<GhInstallation>,
}

#[derive(Deserialize)]
struct GhInstallation {
    id: i64,
}

#[derive(Deserialize)]
struct GhRepositories {
    repositories: Vec<GhRepository>,
}

#[derive(Deserialize)]
struct GhRepository {
    full_name: String,
}
