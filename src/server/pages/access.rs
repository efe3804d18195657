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

use secrecy::SecretString;

use crate::event::ForgeKind;
pub use crate::forge::person::AccessError;
use crate::forge::{github, gitlab};
use crate::ids::RepoName;

/// Projects checked one by one for one page at most; the rest are not shown.
pub const MAX_CHECKS: usize = 100;

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
        let listed = github::readable_repositories(http, api_url, token).await?;
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
        let readable = gitlab::reads_project(http, api_url, token, person.id, repo).await?;
        if let Ok(mut cache) = self.checked.lock() {
            cache.retain(|_, (at, _)| at.elapsed() < self.fresh);
            cache.insert(key, (Instant::now(), readable));
        }
        Ok(readable)
    }
}
