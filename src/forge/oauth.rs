//! Signing in through the forge: GitHub's user authorization of the App itself (its
//! client id and secret), GitLab's OAuth application. The browser is sent to the forge
//! with a `state` and a PKCE challenge that only this browser's cookie can answer; the
//! code that comes back is exchanged for the person's own token, which the pages use to
//! see what they may read.

use std::time::Duration;

use base64::Engine as _;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::config::Settings;
use crate::event::ForgeKind;

/// How long the forge may take to send the browser back.
pub const FLOW_TTL_SECS: i64 = 10 * 60;

/// A forge people can sign in with.
#[derive(Clone)]
pub struct SignInProvider {
    pub forge: ForgeKind,
    /// Where the browser is sent to agree.
    authorize_url: String,
    /// Where the code is exchanged.
    token_url: String,
    /// The forge's REST API root (`/user` lives under it).
    pub api_url: String,
    client_id: String,
    client_secret: SecretString,
}

/// Who signed in, and the token that acts as them.
pub struct SignedInUser {
    pub login: String,
    pub id: i64,
    pub token: SecretString,
    /// Seconds the token lives, when the forge said.
    pub expires_in: Option<i64>,
}

/// Why a sign-in through the forge did not finish.
#[derive(Debug, thiserror::Error)]
pub enum OauthError {
    /// The forge said no (the person declined, the code was used or expired, the client
    /// secret is wrong): what it said.
    #[error("{0} refused the sign-in: {1}")]
    Refused(&'static str, String),
    #[error("Could not reach {0}: {1}")]
    Unreachable(&'static str, String),
}

fn forge_name(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::Gitlab => "GitLab",
        _ => "GitHub",
    }
}

impl SignInProvider {
    /// The forges this deployment can sign people in with: those with a client id and
    /// secret (GitHub's also from the app the manifest flow registered).
    pub fn configured(settings: &Settings) -> Vec<SignInProvider> {
        let mut providers = Vec::new();
        let github = &settings.github;
        let registered = (github.client_id.is_none() || github.client_secret.is_none())
            .then(|| {
                crate::config::github_app::RegisteredApp::load(&settings.data_dir)
                    .ok()
                    .flatten()
            })
            .flatten();
        let client_id = github
            .client_id
            .clone()
            .or_else(|| registered.as_ref().map(|a| a.client_id.clone()));
        let client_secret = github
            .client_secret
            .clone()
            .or_else(|| registered.as_ref().map(|a| a.client_secret.clone()));
        if let (Some(client_id), Some(client_secret)) = (client_id, client_secret) {
            providers.push(SignInProvider {
                forge: ForgeKind::Github,
                authorize_url: format!("{}/login/oauth/authorize", github.web_url),
                token_url: format!("{}/login/oauth/access_token", github.web_url),
                api_url: github.api_url.trim_end_matches('/').to_owned(),
                client_id,
                client_secret,
            });
        }
        let gitlab = &settings.gitlab;
        if let (Some(url), Some(client_id), Some(client_secret)) =
            (&gitlab.url, &gitlab.client_id, &gitlab.client_secret)
        {
            let url = url.trim_end_matches('/');
            providers.push(SignInProvider {
                forge: ForgeKind::Gitlab,
                authorize_url: format!("{url}/oauth/authorize"),
                token_url: format!("{url}/oauth/token"),
                api_url: format!("{url}/api/v4"),
                client_id: client_id.clone(),
                client_secret: client_secret.clone(),
            });
        }
        providers
    }

    pub fn name(&self) -> &'static str {
        forge_name(self.forge)
    }

    /// The path that starts a sign-in with this forge, and the one it returns to.
    pub fn start_path(&self) -> String {
        format!("/sign-in/{}", self.forge.as_str())
    }

    pub fn callback_path(&self) -> String {
        format!("/sign-in/{}/callback", self.forge.as_str())
    }

    /// Where to send the browser: the forge's consent page for this `state` and PKCE
    /// `verifier`.
    pub fn authorize(&self, public_url: &str, state: &str, verifier: &str) -> String {
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(verifier.as_bytes()));
        let redirect_uri = self.redirect_uri(public_url);
        let mut pairs = vec![
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", redirect_uri.as_str()),
            ("state", state),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ];
        if self.forge == ForgeKind::Gitlab {
            // Enough to read the person's own profile and what projects they can see.
            pairs.extend([("response_type", "code"), ("scope", "read_api")]);
        }
        format!("{}?{}", self.authorize_url, form_encode(&pairs))
    }

    fn redirect_uri(&self, public_url: &str) -> String {
        format!(
            "{}{}",
            public_url.trim_end_matches('/'),
            self.callback_path()
        )
    }

    /// Exchanges the code the forge sent back for the person's token, and asks the forge
    /// who they are with it.
    pub async fn finish(
        &self,
        http: &reqwest::Client,
        public_url: &str,
        code: &str,
        verifier: &str,
    ) -> Result<SignedInUser, OauthError> {
        let name = self.name();
        let unreachable =
            |e: reqwest::Error| OauthError::Unreachable(name, e.without_url().to_string());
        let redirect_uri = self.redirect_uri(public_url);
        let mut form = vec![
            ("client_id", self.client_id.as_str()),
            ("client_secret", self.client_secret.expose_secret()),
            ("code", code),
            ("redirect_uri", redirect_uri.as_str()),
            ("code_verifier", verifier),
        ];
        if self.forge == ForgeKind::Gitlab {
            form.push(("grant_type", "authorization_code"));
        }
        let response = http
            .post(&self.token_url)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_encode(&form))
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        let text = response.text().await.map_err(unreachable)?;
        // GitHub answers a refused exchange with 200 and an `error`; GitLab with 400/401.
        let answer: TokenAnswer = serde_json::from_str(&text).map_err(|_| {
            OauthError::Refused(name, format!("an answer that is not a token ({status})"))
        })?;
        let token = match (answer.access_token, answer.error) {
            (Some(token), None) if status.is_success() && !token.is_empty() => token,
            (_, Some(error)) => {
                return Err(OauthError::Refused(
                    name,
                    answer.error_description.unwrap_or(error),
                ));
            }
            _ => {
                return Err(OauthError::Refused(
                    name,
                    format!("no token in the answer ({status})"),
                ));
            }
        };
        let token = SecretString::from(token);
        let user = http
            .get(format!("{}/user", self.api_url))
            .bearer_auth(token.expose_secret())
            .header("accept", "application/json")
            .header("user-agent", "planwright")
            .send()
            .await
            .map_err(unreachable)?;
        if !user.status().is_success() {
            return Err(OauthError::Refused(
                name,
                format!(
                    "the new token could not read its own user ({})",
                    user.status()
                ),
            ));
        }
        let user: UserAnswer = user
            .json()
            .await
            .map_err(|_| OauthError::Refused(name, "the user answer is not a user".to_owned()))?;
        let login = match self.forge {
            ForgeKind::Gitlab => user.username.or(user.login),
            _ => user.login.or(user.username),
        }
        .ok_or_else(|| OauthError::Refused(name, "the user has no login".to_owned()))?;
        Ok(SignedInUser {
            login,
            id: user.id,
            token,
            expires_in: answer.expires_in,
        })
    }
}

impl SignInProvider {
    /// Hands a signed-out person's token back to the forge, so it cannot be used again
    /// (GitHub: the App's token endpoint, authenticated as the App's client; GitLab: the
    /// OAuth revocation endpoint).
    pub async fn revoke(
        &self,
        http: &reqwest::Client,
        token: &SecretString,
    ) -> Result<(), OauthError> {
        let name = self.name();
        let unreachable =
            |e: reqwest::Error| OauthError::Unreachable(name, e.without_url().to_string());
        let response = match self.forge {
            ForgeKind::Gitlab => {
                let revoke_url = self.token_url.replace("/oauth/token", "/oauth/revoke");
                http.post(revoke_url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form_encode(&[
                        ("client_id", self.client_id.as_str()),
                        ("client_secret", self.client_secret.expose_secret()),
                        ("token", token.expose_secret()),
                    ]))
                    .send()
                    .await
            }
            _ => {
                http.delete(format!(
                    "{}/applications/{}/token",
                    self.api_url, self.client_id
                ))
                .basic_auth(&self.client_id, Some(self.client_secret.expose_secret()))
                .header("accept", "application/vnd.github+json")
                .header("user-agent", "planwright")
                .json(&serde_json::json!({"access_token": token.expose_secret()}))
                .send()
                .await
            }
        }
        .map_err(unreachable)?;
        // 404/422: the token was gone already, which is what was wanted.
        match response.status().as_u16() {
            200..=299 | 404 | 422 => Ok(()),
            status => Err(OauthError::Refused(
                name,
                format!("the token was not revoked ({status})"),
            )),
        }
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    expires_in: Option<i64>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct UserAnswer {
    id: i64,
    login: Option<String>,
    username: Option<String>,
}

/// Fields URL-encoded, for a query or a form body.
pub fn form_encode(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// The HTTP client the pages use towards the forges for people: no redirects (a token
/// must not follow one to another host), bounded waits.
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .build()?)
}
