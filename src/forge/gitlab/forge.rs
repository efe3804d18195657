//! The GitLab forge's handle ([`GitlabForge`]): its HTTP client, API root, token, retry
//! policy and what it keeps between calls. The calls themselves are in `mod.rs` and
//! `client.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use secrecy::SecretString;
use tokio::sync::OnceCell;

use crate::event::Actor;
use crate::forge::RetryPolicy;
use crate::ids::RepoName;

/// GitLab as seen through one token (a bot user's, or a project or group access token).
#[derive(Clone)]
pub struct GitlabForge {
    pub(super) http: reqwest::Client,
    /// `https://gitlab.example.com/api/v4`, without a trailing slash.
    pub(super) api: String,
    /// Kept only to scrub it out of error text the server might echo back.
    pub(super) token: SecretString,
    pub(super) retry: RetryPolicy,
    /// The token's own user: never changes for a token, so it is fetched once.
    pub(super) me: Arc<OnceCell<Actor>>,
    /// Each project's `http_url_to_repo` as last read, and when: reused by `git_remote`
    /// for `CLONE_URL_KEPT`, so a session's fetches and pushes ask for it once.
    pub(super) clone_urls: Arc<Mutex<HashMap<RepoName, (String, Instant)>>>,
    /// Each project's id as last read.
    pub(super) repo_ids: crate::forge::RepoIds,
}
