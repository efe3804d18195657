//! Registering planwright's GitHub App from `app-manifest.yml`: the manifest with this
//! deployment's URLs, the exchange of GitHub's one-time code for the app's credentials, and
//! those credentials kept in `DATA_DIR/github-app.json`, which `serve` and `setup` share.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Settings;

/// The manifest as shipped; its `http://localhost:3000` URLs are replaced per deployment.
pub const MANIFEST_YAML: &str = include_str!("../../app-manifest.yml");

/// Where the credentials GitHub returns are kept, under `DATA_DIR`.
pub const CREDENTIALS_FILE: &str = "github-app.json";

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
fn check_org(org: &str) -> Result<()> {
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

/// The app GitHub created from the manifest, as stored.
#[derive(Debug, Clone)]
pub struct RegisteredApp {
    pub id: u64,
    pub slug: String,
    /// The app's page on GitHub; installing it starts at `<html_url>/installations/new`.
    pub html_url: String,
    pub pem: SecretString,
    pub webhook_secret: SecretString,
    pub client_id: String,
    pub client_secret: SecretString,
}

/// The file's shape, and the part of GitHub's conversion answer planwright keeps.
#[derive(Deserialize)]
struct Stored {
    id: u64,
    slug: String,
    html_url: String,
    pem: SecretString,
    webhook_secret: Option<SecretString>,
    client_id: String,
    client_secret: SecretString,
}

impl Stored {
    fn into_app(self, what: &str) -> Result<RegisteredApp> {
        let webhook_secret = self
            .webhook_secret
            .filter(|s| !s.expose_secret().is_empty())
            .with_context(|| format!("Cannot use {what}: it has no webhook secret"))?;
        Ok(RegisteredApp {
            id: self.id,
            slug: self.slug,
            html_url: self.html_url,
            pem: self.pem,
            webhook_secret,
            client_id: self.client_id,
            client_secret: self.client_secret,
        })
    }
}

impl RegisteredApp {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(CREDENTIALS_FILE)
    }

    /// The stored app, if one was registered here.
    pub fn load(data_dir: &Path) -> Result<Option<Self>> {
        let path = Self::path(data_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "Could not read the GitHub App credentials in {}",
                        path.display()
                    )
                });
            }
        };
        let what = format!("the GitHub App credentials in {}", path.display());
        let stored: Stored =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("Cannot use {what}: {e}"))?;
        stored.into_app(&what).map(Some)
    }

    /// Writes the credentials readable by this user only, atomically: a crash leaves the
    /// old file or the new one, never half of one, and never a moment of wider permissions.
    pub fn save(&self, data_dir: &Path) -> Result<PathBuf> {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("Could not create DATA_DIR {}", data_dir.display()))?;
        let path = Self::path(data_dir);
        let temporary = data_dir.join(format!(
            ".{CREDENTIALS_FILE}.{}",
            uuid::Uuid::new_v4().simple()
        ));
        let body = json!({
            "id": self.id,
            "slug": self.slug,
            "html_url": self.html_url,
            "pem": self.pem.expose_secret(),
            "webhook_secret": self.webhook_secret.expose_secret(),
            "client_id": self.client_id,
            "client_secret": self.client_secret.expose_secret(),
        });
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temporary)?;
            file.write_all(serde_json::to_string_pretty(&body)?.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            std::fs::File::open(data_dir)?.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&temporary);
            return Err(e).with_context(|| {
                format!(
                    "Could not store the GitHub App credentials in {}",
                    path.display()
                )
            });
        }
        Ok(path)
    }

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

/// `planwright setup`: serves the registration page on a one-shot local listener, waits
/// for GitHub to send the browser back, stores the credentials and stops.
pub async fn setup_from_terminal(
    settings: Settings,
    listen: SocketAddr,
    org: Option<String>,
) -> Result<RegisteredApp> {
    if let Some(org) = &org {
        check_org(org)?;
    }
    if let Some(id) = settings.github.app_id {
        bail!(
            "Cannot set up a GitHub App: app {id} is configured already (GITHUB_APP_ID, or {} under DATA_DIR); remove it first to register another",
            CREDENTIALS_FILE
        );
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("Could not listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let local = format!("http://{addr}");
    let settings = Arc::new(settings);
    let forges = Arc::new(crate::app::Forges::from_settings(&settings)?);
    let (done, mut registered) = tokio::sync::mpsc::unbounded_channel();
    let onboarding = crate::server::setup::Onboarding::new(settings.clone(), forges, &local)
        .notify(done)
        .with_org(org);
    let router = crate::server::setup::terminal_router(onboarding.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await
    });
    println!(
        "Open {} in a browser on this machine to register planwright's GitHub App.",
        onboarding.setup_url()
    );
    println!(
        "GitHub will send its webhooks to {}/webhooks/github (PUBLIC_URL).",
        settings.public_url
    );
    let app = tokio::select! {
        app = registered.recv() => app.context("The setup listener stopped before GitHub answered")?,
        _ = tokio::signal::ctrl_c() => {
            stop.cancel();
            bail!("Setup was interrupted before GitHub answered");
        }
    };
    stop.cancel();
    server
        .await
        .context("The setup listener panicked")?
        .context("The setup listener failed")?;
    Ok(app)
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
        let events = m["default_events"].as_array().unwrap();
        assert!(events.contains(&json!("pull_request_review_comment")));
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

    #[test]
    fn stored_credentials_round_trip_with_owner_only_permissions() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        assert!(RegisteredApp::load(dir.path()).unwrap().is_none());
        let app = RegisteredApp {
            id: 7,
            slug: "pw".into(),
            html_url: "https://github.com/apps/pw".into(),
            pem: SecretString::from("-----BEGIN RSA PRIVATE KEY-----\nx\n"),
            webhook_secret: SecretString::from("hook"),
            client_id: "Iv1.abc".into(),
            client_secret: SecretString::from("client"),
        };
        let path = app.save(dir.path()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let back = RegisteredApp::load(dir.path()).unwrap().unwrap();
        assert_eq!(back.id, 7);
        assert_eq!(back.webhook_secret.expose_secret(), "hook");
        assert_eq!(back.client_secret.expose_secret(), "client");
        // Nothing but the file itself is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        std::fs::write(&path, "{}").unwrap();
        let err = format!("{:#}", RegisteredApp::load(dir.path()).unwrap_err());
        assert!(err.contains(CREDENTIALS_FILE), "{err}");
    }
}
