//! The signed-in person's own token against their forge's REST API: what the pages ask
//! in their name (what they may read), never with the App's or the bot's credentials.
//! Each forge's questions are in its folder (`github/person.rs`, `gitlab/person.rs`).

use secrecy::{ExposeSecret as _, SecretString};

/// Why access could not be told.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The forge no longer takes the person's token: they sign in again.
    #[error("the forge no longer takes this sign-in's token")]
    SignInAgain,
    #[error("Could not ask the forge what this person may read: {0}")]
    Unavailable(String),
}

/// A GET with the person's token: the answer, `None` for 403/404 (not theirs to see),
/// or why it could not be told.
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
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
