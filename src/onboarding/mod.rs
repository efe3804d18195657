//! Registering planwright's GitHub App from `app-manifest.yml`: the manifest with this
//! deployment's URLs, the exchange of GitHub's one-time code for the app's credentials, and
//! those credentials kept in `DATA_DIR/github-app.json`, which `serve` and `setup` share.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use crate::config::github_app::RegisteredApp;
use crate::config::github_app::Stored;

/// The manifest as shipped; its `http://localhost:3000` URLs are replaced per deployment.
pub const MANIFEST_YAML: &str = include_str!("../../app-manifest.yml");

/// The manifest to post to GitHub: webhooks go to `public_url`, and GitHub sends the browser
/// back to `return_url` (PUBLIC_URL for `serve`, the local listener for `setup`).
pub fn manifest(public_url: &str, return_url: &str) -> Result<Value> {
    let mut manifest: Value =
        serde_norway::from_str(MANIFEST_YAML).context("Cannot read app-manifest.yml")?;
    let public_url = public_url.trim_end_matches('/');
    let Some(fields) = manifest.as_object_mut() else {
        bail!("Cannot read app-manifest.yml: it is not a mapping");
    };
    fields.insert("url".into(), json!(public_url));
    fields.insert(
        "hook_attributes".into(),
        json!({ "url": format!("{public_url}/webhooks/github"), "active": true }),
    );
    fields.insert(
        "callback_urls".into(),
        json!([format!("{public_url}/sign-in/github/callback")]),
    );
    fields.insert(
        "redirect_url".into(),
        json!(format!(
            "{}/setup/github/callback",
            return_url.trim_end_matches('/')
        )),
    );
    Ok(manifest)
}

/// GitHub's page that takes the manifest: the user's own apps, or an organisation's.
pub fn registration_url(github_url: &str, org: Option<&str>, state: &str) -> Result<String> {
    let base = github_url.trim_end_matches('/');
    let state = utf8_percent_encode(state, NON_ALPHANUMERIC);
    match org {
        None => Ok(format!("{base}/settings/apps/new?state={state}")),
        Some(org) => {
            check_org(org)?;
            Ok(format!(
                "{base}/organizations/{org}/settings/apps/new?state={state}"
            ))
        }
    }
}

/// GitHub account names: letters, digits and single inner hyphens, at most 39 characters.
pub fn check_org(org: &str) -> Result<()> {
    let valid = !org.is_empty()
        && org.len() <= 39
        && org.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !org.starts_with('-')
        && !org.ends_with('-')
        && !org.contains("--");
    if !valid {
        bail!("Cannot register the app for `{org}`: it is not a GitHub organisation name");
    }
    Ok(())
}

/// A fresh value for the manifest flow's `state`, checked when GitHub sends the browser back.
pub fn new_state() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl RegisteredApp {
    /// Trades the one-time `code` GitHub put in the redirect for the new app's credentials
    /// (`POST /app-manifests/{code}/conversions`, which takes no authentication).
    pub async fn exchange(api_url: &str, code: &str) -> Result<Self> {
        if code.is_empty() || code.len() > 200 {
            bail!("Cannot finish registering the GitHub App: GitHub sent no usable code");
        }
        let url = format!(
            "{}/app-manifests/{}/conversions",
            api_url.trim_end_matches('/'),
            utf8_percent_encode(code, NON_ALPHANUMERIC)
        );
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .context("Could not build the HTTP client for GitHub")?;
        let response = client
            .post(&url)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .header("user-agent", "planwright")
            .send()
            .await
            .with_context(|| format!("Could not reach GitHub at {api_url}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .with_context(|| format!("Could not read GitHub's answer from {api_url}"))?;
        if !status.is_success() {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
            bail!(
                "Could not exchange the manifest code for the GitHub App's credentials: GitHub answered {status}: {message}"
            );
        }
        let what = "GitHub's answer to the manifest conversion";
        let stored: Stored =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("Cannot use {what}: {e}"))?;
        stored.into_app(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_carries_this_deployments_urls() {
        let m = manifest("https://pw.example.org/", "http://127.0.0.1:4000").unwrap();
        assert_eq!(m["url"], "https://pw.example.org");
        assert_eq!(
            m["hook_attributes"]["url"],
            "https://pw.example.org/webhooks/github"
        );
        assert_eq!(
            m["redirect_url"],
            "http://127.0.0.1:4000/setup/github/callback"
        );
        assert_eq!(m["public"], false);
        assert_eq!(m["default_permissions"]["checks"], "write");
        assert_eq!(m["default_permissions"]["members"], "read");
        assert_eq!(m["default_permissions"]["statuses"], "read");
        let events = m["default_events"].as_array().unwrap();
        assert!(events.contains(&json!("pull_request_review_comment")));
        assert!(events.contains(&json!("check_suite")) && events.contains(&json!("status")));
        assert!(!events.contains(&json!("installation")));
    }

    #[test]
    fn organisation_names_are_checked() {
        assert_eq!(
            registration_url("https://github.com", Some("my-org"), "s1").unwrap(),
            "https://github.com/organizations/my-org/settings/apps/new?state=s1"
        );
        for bad in ["", "a/b", "-x", "x--y", "x?y=1", &"a".repeat(40)] {
            assert!(
                registration_url("https://github.com", Some(bad), "s").is_err(),
                "{bad}"
            );
        }
    }
}
