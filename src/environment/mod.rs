//! A run's environment: which OCI image it uses and where that choice came from
//! ([`source`]), and the image itself: pulled from its registry, verified, unpacked once
//! into a read-only root folder under `DATA_DIR/environments/` and handed out under a
//! [`cache::Lease`] that keeps the cache from evicting it while a run uses it; and what a
//! setup phase leaves, kept for later runs on the same lock files ([`setup`]).

mod auth;
pub mod cache;
mod image;
mod lease;
mod pull_error;
mod reach;
mod registry;
pub mod setup_cache;
pub mod source;
mod unpack;

pub use image::Image;
pub use pull_error::{PullError, PullErrorKind};

use std::path::Path;

use crate::config::images::ImageSettings;
use crate::ids::image::ImageRef;

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
