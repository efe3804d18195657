//! A run's environment: which OCI image it uses and where that choice came from
//! ([`source`]), and the image itself: pulled from its registry, verified, unpacked once
//! into a read-only root folder under `DATA_DIR/environments/` and handed out under a
//! [`cache::Lease`] that keeps the cache from evicting it while a run uses it; and what a
//! setup phase leaves, kept for later runs on the same lock files ([`setup`]).

mod auth;
pub mod cache;
mod lease;
mod reach;
mod registry;
pub mod setup_cache;
pub mod source;
mod unpack;

use std::path::{Path, PathBuf};

use crate::config::images::ImageSettings;
use crate::ids::image::{Digest, ImageRef};

/// An unpacked image: its root folder and what its config says a process in it gets.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Image {
    /// The reference it was pulled by (the first, when several name it).
    pub reference: String,
    pub digest: Digest,
    /// The unpacked root file system; nothing may write in it.
    #[serde(skip)]
    pub root: PathBuf,
    /// `NAME=value` entries, `PATH` among them when the image sets one.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    /// Bytes of file content in `root`.
    pub size: u64,
}

impl Image {
    /// What a sandbox shows as `/` for a run in this image: its root, read-only, with the
    /// variables its config sets (an entry without `=` means nothing and is left out).
    pub fn sandbox_root(&self) -> crate::sandbox::Root {
        let env = self
            .env
            .iter()
            .filter_map(|entry| entry.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        crate::sandbox::Root {
            dir: self.root.clone(),
            env,
        }
    }
}

/// The part of an image config's `config` object a run needs.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RunConfig {
    env: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
}

/// Why a pull failed, as a caller branches on it: only `Transient` is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullErrorKind {
    /// A timeout, a connection error, a 5xx or 429 answer.
    Transient,
    /// No such repository, tag or manifest.
    NotFound,
    /// Credentials missing or refused (401/403).
    Refused,
    /// A blob or manifest whose content does not match its digest.
    DigestMismatch,
    /// A registry, redirect or token service at an address or over a scheme planwright
    /// does not reach: plain HTTP, or a loopback, private or link-local address that the
    /// operator did not list.
    Blocked,
    /// The image has no variant for this host's platform.
    Platform,
    /// A layer tried to leave the root or otherwise break the unpacking rules.
    HostileLayer,
    /// A manifest, media type or layer planwright cannot read.
    Unsupported,
    /// An answer that breaks the distribution protocol.
    Protocol,
    /// Larger than the cache may hold at all.
    TooLarge,
    /// A local file system error in the cache.
    Local,
}

#[derive(Debug, thiserror::Error)]
#[error("Could not pull the image {image}: {message}")]
pub struct PullError {
    pub kind: PullErrorKind,
    pub image: String,
    message: String,
}

impl PullError {
    fn new(kind: PullErrorKind, image: &ImageRef, message: String) -> Self {
        Self {
            kind,
            image: image.to_string(),
            message,
        }
    }

    fn local(image: &ImageRef, path: &Path, error: &std::io::Error) -> Self {
        Self::new(
            PullErrorKind::Local,
            image,
            format!(
                "could not write the image cache at {} ({error}); check that DATA_DIR is writable and has room",
                path.display()
            ),
        )
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == PullErrorKind::Transient
    }
}

/// The platform images are picked for on this host, as registries spell it
/// (`linux/amd64`).
pub fn host_platform() -> String {
    format!("linux/{}", registry::host_architecture())
}

/// The registries and the image cache of one DATA_DIR.
pub struct Environments {
    client: registry::Client,
    cache: cache::Cache,
}

impl Environments {
    pub fn new(data_dir: &Path, settings: &ImageSettings) -> anyhow::Result<Self> {
        for warning in settings.credentials.host_wide_warnings() {
            tracing::warn!("{warning}");
        }
        Ok(Self {
            client: registry::Client::new(settings),
            cache: cache::Cache::open(&data_dir.join("environments"), settings.cache_max)?,
        })
    }

    /// Registry names are looked up by `lookup` instead of the system resolver (a
    /// deployment's own DNS, or a test's); the addresses it answers are checked as any.
    pub fn with_lookup(mut self, lookup: std::sync::Arc<dyn reqwest::dns::Resolve>) -> Self {
        self.client.set_lookup(lookup);
        self
    }

    /// The image unpacked and leased: from the cache when it holds the digest the
    /// reference resolves to, else downloaded, verified and unpacked, once however many
    /// pulls of it run at the same time.
    pub async fn pull(&self, image: &ImageRef) -> Result<cache::Lease, PullError> {
        // A reference pinned to a digest the cache holds needs no registry at all.
        if let Some(digest) = image.digest()
            && let Some(lease) = self.cache.lease(image, digest)?
        {
            crate::metrics::record_image_pull(true, 0);
            return Ok(lease);
        }
        let remote = self.client.remote(image)?;
        let resolved = remote.resolve().await?;
        if let Some(lease) = self.cache.lease(image, &resolved.digest)? {
            crate::metrics::record_image_pull(true, 0);
            return Ok(lease);
        }
        self.cache.fill(image, &remote, resolved).await
    }
}
