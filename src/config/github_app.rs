//! The GitHub App this deployment registered through the manifest flow, as kept in
//! `DATA_DIR/github-app.json`, which `serve` and `setup` share.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

/// Where the credentials GitHub returns are kept, under `DATA_DIR`.
pub const CREDENTIALS_FILE: &str = "github-app.json";

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
pub(crate) struct Stored {
    id: u64,
    slug: String,
    html_url: String,
    pem: SecretString,
    webhook_secret: Option<SecretString>,
    client_id: String,
    client_secret: SecretString,
}

impl Stored {
    pub(crate) fn into_app(self, what: &str) -> Result<RegisteredApp> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
