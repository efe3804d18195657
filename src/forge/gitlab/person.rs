//! What a signed-in person may read on GitLab, asked with their own token.

use secrecy::SecretString;
use serde::Deserialize;

use crate::forge::person::{AccessError, get_json};
use crate::ids::RepoName;

/// GitLab's Reporter access level: who may read a project's confidential issues.
const REPORTER: i64 = 20;

/// Whether the person (`user_id`) is an active member of `repo` at Reporter or above:
/// a public or internal project anyone can see is not enough.
pub async fn reads_project(
    http: &reqwest::Client,
    api_url: &str,
    token: &SecretString,
    user_id: i64,
    repo: &RepoName,
) -> Result<bool, AccessError> {
    let path = percent_encoding::utf8_percent_encode(
        &repo.to_string(),
        percent_encoding::NON_ALPHANUMERIC,
    )
    .to_string();
    Ok(get_json::<GlMember>(
        http,
        &format!("{api_url}/projects/{path}/members/all/{user_id}"),
        token,
    )
    .await?
    .is_some_and(|m| m.state == "active" && m.access_level >= REPORTER))
}

#[derive(Deserialize)]
struct GlMember {
    access_level: i64,
    state: String,
}
