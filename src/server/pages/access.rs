//! What a signed-in person may read, asked of the forge with their own token and kept
//! for a few minutes: on GitHub, the repositories of the App's installations they can
//! see (two listings, however many sessions there are; GitHub lists only repositories the
//! person has been given access to, not every public one); on GitLab, the person's own
//! membership of each project the pages are about to show, at least Reporter (who may
//! read confidential issues): a public or internal project anyone can see is not enough. A person who lost access stops seeing its sessions at
//! the next check; a token the forge no longer takes ends the sign-in.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use crate::event::ForgeKind;
use crate::ids::RepoName;

/// Pages of a listing read at most (100 entries each).
const MAX_PAGES: usize = 20;
/// Installations of the App one person is looked up in at most.
const MAX_INSTALLATIONS: usize = 50;
/// Projects checked one by one for one page at most; the rest are not shown.
pub const MAX_CHECKS: usize = 100;
/// GitLab's Reporter access level: who may read a project's confidential issues.
const REPORTER: i64 = 20;

/// Why access could not be told.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The forge no longer takes the person's token: they sign in again.
    #[error("the forge no longer takes this sign-in's token")]
    SignInAgain,
    #[error("Could not ask the forge what this person may read: {0}")]
    Unavailable(String),
}

/// Who is asking, as the cache keys them.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Person {
    forge: ForgeKind,
    id: i64,
}

/// Answers about access, per person, for as long as they are trusted.
pub struct AccessCache {
    fresh: Duration,
    /// GitHub: every repository the person can see through the App.
    listed: Mutex<HashMap<Person, (Instant, BTreeSet<String>)>>,
    /// GitLab: project by project.
    checked: Mutex<HashMap<(Person, String), (Instant, bool)>>,
    /// One listing at a time per person: pages loaded together wait for the first.
    listing: Mutex<HashMap<Person, Arc<tokio::sync::Mutex<()>>>>,
}

impl AccessCache {
    /// Answers trusted for `fresh` (zero: every page asks again).
    pub fn new(fresh: Duration) -> AccessCache {
        AccessCache {
            fresh,
            listed: Mutex::default(),
            checked: Mutex::default(),
            listing: Mutex::default(),
        }
    }

    /// Which of `repos` (on `forge`) the person may read. Repositories of another forge
    /// than the person's are never theirs.
    #[allow(clippy::too_many_arguments)]
    pub async fn readable(
        &self,
        http: &reqwest::Client,
        api_url: &str,
        forge: ForgeKind,
        user_id: i64,
        token: &SecretString,
        repos: &[RepoName],
    ) -> Result<BTreeSet<String>, AccessError> {
        let person = Person { forge, id: user_id };
        match forge {
            ForgeKind::Github => {
                let listed = self.github_listing(http, api_url, &person, token).await?;
                Ok(repos
                    .iter()
                    .map(|r| r.to_string().to_ascii_lowercase())
                    .filter(|r| listed.contains(r))
                    .collect())
            }
            ForgeKind::Gitlab => {
                let mut readable = BTreeSet::new();
                for repo in repos.iter().take(MAX_CHECKS) {
                    if self
                        .gitlab_project(http, api_url, &person, token, repo)
                        .await?
                    {
                        readable.insert(repo.to_string().to_ascii_lowercase());
                    }
                }
                Ok(readable)
            }
            ForgeKind::Local => Ok(BTreeSet::new()),
        }
    }

    async fn github_listing(
        &self,
        http: &reqwest::Client,
        api_url: &str,
        person: &Person,
        token: &SecretString,
    ) -> Result<BTreeSet<String>, AccessError> {
        let turn = self
            .listing
            .lock()
            .map(|mut m| Arc::clone(m.entry(person.clone()).or_default()))
            .unwrap_or_default();
        let _turn = turn.lock().await;
        if let Some((at, listed)) = self.listed.lock().ok().and_then(|m| m.get(person).cloned())
            && at.elapsed() < self.fresh
        {
            return Ok(listed);
        }
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
                    &format!(
                        "{api_url}/user/installations/{id}/repositories?per_page=100&page={page}"
                    ),
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
        if let Ok(mut cache) = self.listed.lock() {
            cache.retain(|_, (at, _)| at.elapsed() < self.fresh);
            cache.insert(person.clone(), (Instant::now(), listed.clone()));
        }
        Ok(listed)
    }

    async fn gitlab_project(
        &self,
        http: &reqwest::Client,
        api_url: &str,
        person: &Person,
        token: &SecretString,
        repo: &RepoName,
    ) -> Result<bool, AccessError> {
        let key = (person.clone(), repo.to_string().to_ascii_lowercase());
        if let Some((at, readable)) = self.checked.lock().ok().and_then(|m| m.get(&key).copied())
            && at.elapsed() < self.fresh
        {
            return Ok(readable);
        }
        let path = percent_encoding::utf8_percent_encode(
            &repo.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        let readable = get_json::<GlMember>(
            http,
            &format!("{api_url}/projects/{path}/members/all/{}", person.id),
            token,
        )
        .await?
        .is_some_and(|m| m.state == "active" && m.access_level >= REPORTER);
        if let Ok(mut cache) = self.checked.lock() {
            cache.retain(|_, (at, _)| at.elapsed() < self.fresh);
            cache.insert(key, (Instant::now(), readable));
        }
        Ok(readable)
    }
}

/// A GET with the person's token: the answer, `None` for 403/404 (not theirs to see),
/// or why it could not be told.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
    token: &SecretString,
) -> Result<Option<T>, AccessError> {
    let response = http
        .get(url)
        .bearer_auth(token.expose_secret())
        .header("accept", "application/json")
        .header("user-agent", "planwright")
        .send()
        .await
        .map_err(|e| AccessError::Unavailable(e.without_url().to_string()))?;
    match response.status().as_u16() {
        401 => Err(AccessError::SignInAgain),
        403 | 404 => Ok(None),
        200..=299 => response
            .json()
            .await
            .map(Some)
            .map_err(|e| AccessError::Unavailable(e.without_url().to_string())),
        status => Err(AccessError::Unavailable(format!(
            "the forge answered {status}"
        ))),
    }
}

#[derive(Deserialize)]
struct GlMember {
    access_level: i64,
    state: String,
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
