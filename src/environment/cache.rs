//! The image cache under `DATA_DIR/environments/`: `images/<hex>/` per manifest digest
//! (`rootfs/`, `image.json`, and `lease`, which every user holds a shared lock on and
//! whose mtime says when it was last used), `blobs/sha256/<hex>` for verified layers while
//! they are unpacked, `tmp/` where an image is unpacked before one rename publishes it,
//! and `locks/<hex>.lock`, held while an image is unpacked so that two processes never
//! unpack into the same place. Least recently used images nobody leases are evicted to
//! stay under the size cap.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::image::Image;
use super::lease::flock;
use super::pull_error::{PullError, PullErrorKind};
use super::registry::{Remote, Resolved};
use super::unpack::{self, LayerFile};
use crate::ids::image::{Digest, ImageRef};

/// Layers downloaded at once for one image.
const PARALLEL_LAYERS: usize = 4;

pub(super) struct Cache {
    dir: PathBuf,
    max: u64,
    /// One lock per digest being filled in this process: a second pull of the same image
    /// waits for the first instead of downloading it again.
    filling: Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
}

/// An image in use. While any lease on it is alive (in any process), it is not evicted.
#[derive(Debug)]
pub struct Lease {
    image: Image,
    unpacked: bool,
    _lock: fs::File,
}

impl Lease {
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Whether this pull downloaded and unpacked it (rather than finding it cached).
    pub fn unpacked(&self) -> bool {
        self.unpacked
    }
}

impl std::ops::Deref for Lease {
    type Target = Image;
    fn deref(&self) -> &Image {
        &self.image
    }
}

impl Cache {
    /// Opens (making) the cache folder and removes what crashed pulls left in `tmp/`.
    pub(super) fn open(dir: &Path, max: u64) -> anyhow::Result<Self> {
        for sub in ["images", "blobs/sha256", "tmp", "locks"] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| {
                anyhow::anyhow!(
                    "Could not make the image cache folder {}: {e}",
                    dir.join(sub).display()
                )
            })?;
        }
        // Absolute, so that the roots handed out stay valid wherever they are used from.
        let dir = fs::canonicalize(dir).map_err(|e| {
            anyhow::anyhow!(
                "Could not open the image cache folder {}: {e}",
                dir.display()
            )
        })?;
        let cache = Self {
            dir,
            max,
            filling: Mutex::new(HashMap::new()),
        };
        super::lease::sweep_tmp(&cache.dir);
        Ok(cache)
    }

    fn image_dir(&self, digest: &Digest) -> PathBuf {
        self.dir.join("images").join(digest.hex())
    }

    /// A lease on the image when the cache holds it.
    pub(super) fn lease(
        &self,
        image: &ImageRef,
        digest: &Digest,
    ) -> Result<Option<Lease>, PullError> {
        self.lease_with(image, digest, false)
    }

    fn lease_with(
        &self,
        image: &ImageRef,
        digest: &Digest,
        unpacked: bool,
    ) -> Result<Option<Lease>, PullError> {
        let dir = self.image_dir(digest);
        let lease_path = dir.join("lease");
        let local = |e: io::Error| PullError::local(image, &lease_path, &e);
        let file = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lease_path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(local(e)),
        };
        // Waits only while an eviction renames the image away.
        flock(&file, libc::LOCK_SH).map_err(local)?;
        // The file may be one an eviction moved out meanwhile.
        let still_there = match (file.metadata(), fs::metadata(&lease_path)) {
            (Ok(held), Ok(current)) => held.ino() == current.ino() && held.dev() == current.dev(),
            _ => false,
        };
        if !still_there {
            return Ok(None);
        }
        let text = fs::read(dir.join("image.json")).map_err(local)?;
        let mut found: Image = serde_json::from_slice(&text).map_err(|e| {
            local(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("image.json is damaged: {e}"),
            ))
        })?;
        found.root = dir.join("rootfs");
        let _ = file.set_modified(SystemTime::now());
        Ok(Some(Lease {
            image: found,
            unpacked,
            _lock: file,
        }))
    }

    /// Downloads and unpacks a resolved image the cache lacks, then leases it.
    pub(super) async fn fill(
        &self,
        image: &ImageRef,
        remote: &Remote<'_>,
        resolved: Resolved,
    ) -> Result<Lease, PullError> {
        // Declared sizes are the registry's word: one past the cap would evict every
        // unleased image and then stream until the disk is full.
        let downloaded = resolved
            .layers
            .iter()
            .try_fold(resolved.config_blob.len() as u64, |sum, layer| {
                sum.checked_add(layer.size)
            })
            .filter(|&sum| sum <= self.max)
            .ok_or_else(|| {
                PullError::new(
                    PullErrorKind::TooLarge,
                    image,
                    format!(
                        "its manifest gives its config and layers more than ENVIRONMENT_CACHE_MAX ({} bytes) together; raise the cap or choose a smaller image",
                        self.max
                    ),
                )
            })?;
        let turn = {
            let mut filling = self.filling.lock().unwrap_or_else(|e| e.into_inner());
            filling.entry(resolved.digest.clone()).or_default().clone()
        };
        let result = async {
            let _turn = turn.lock().await;
            if let Some(lease) = self.lease(image, &resolved.digest)? {
                crate::metrics::record_image_pull(true, 0);
                return Ok(lease);
            }
            let lock_path = self
                .dir
                .join("locks")
                .join(format!("{}.lock", resolved.digest.hex()));
            let lock = tokio::task::spawn_blocking(move || {
                let lock = fs::File::create(&lock_path)?;
                flock(&lock, libc::LOCK_EX).map(|()| lock)
            })
            .await
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(|e| PullError::local(image, &self.dir.join("locks"), &e))?;
            // Another process may have unpacked it while this one waited.
            if let Some(lease) = self.lease(image, &resolved.digest)? {
                crate::metrics::record_image_pull(true, 0);
                return Ok(lease);
            }
            self.evict(downloaded, None);
            let unpacked = self.download_and_unpack(image, remote, &resolved).await;
            drop(lock);
            unpacked?;
            crate::metrics::record_image_pull(false, downloaded);
            self.evict(0, Some(&resolved.digest));
            self.lease_with(image, &resolved.digest, true)?
                .ok_or_else(|| {
                    PullError::local(
                        image,
                        &self.image_dir(&resolved.digest),
                        &io::Error::other("the image vanished right after it was unpacked"),
                    )
                })
        }
        .await;
        let mut filling = self.filling.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&turn) <= 2 {
            filling.remove(&resolved.digest);
        }
        result
    }

    /// The layers into `blobs/`, unpacked into `tmp/`, published by one rename; whatever
    /// fails leaves neither blobs nor a partial root behind.
    async fn download_and_unpack(
        &self,
        image: &ImageRef,
        remote: &Remote<'_>,
        resolved: &Resolved,
    ) -> Result<(), PullError> {
        let blobs = self.dir.join("blobs/sha256");
        let staging = self.dir.join("tmp").join(format!(
            "{}.{}",
            resolved.digest.hex(),
            uuid::Uuid::new_v4().simple()
        ));
        let result = async {
            let files = self.layer_files(image, remote, resolved, &blobs).await?;
            let root = staging.join("rootfs");
            fs::create_dir_all(&root).map_err(|e| PullError::local(image, &root, &e))?;
            // Whatever the umask: the sandbox's user must be able to enter the root.
            for dir in [&staging, &root] {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
                    .map_err(|e| PullError::local(image, dir, &e))?;
            }
            let (image_owned, root_owned, max) = (image.clone(), root.clone(), self.max);
            let layers: Vec<_> = resolved
                .layers
                .iter()
                .zip(&resolved.diff_ids)
                .zip(files)
                .map(|((layer, diff_id), file)| {
                    (
                        file,
                        layer.digest.clone(),
                        layer.compression,
                        diff_id.clone(),
                    )
                })
                .collect();
            let done = tokio::task::spawn_blocking(move || {
                let layers = layers
                    .iter()
                    .map(|(file, digest, compression, diff_id)| {
                        Ok(LayerFile {
                            file: file.try_clone()?,
                            digest,
                            compression: *compression,
                            diff_id,
                        })
                    })
                    .collect::<io::Result<Vec<_>>>()
                    .map_err(|e| PullError::local(&image_owned, &root_owned, &e))?;
                unpack::unpack(&image_owned, &root_owned, layers, max)
            })
            .await
            .map_err(|e| PullError::local(image, &root, &io::Error::other(e.to_string())))??;
            let record = Image {
                reference: image.to_string(),
                digest: resolved.digest.clone(),
                root: root.clone(),
                env: resolved.config.env.clone().unwrap_or_default(),
                working_dir: resolved
                    .config
                    .working_dir
                    .clone()
                    .filter(|w| !w.is_empty()),
                user: resolved.config.user.clone().filter(|u| !u.is_empty()),
                size: done.bytes,
            };
            let write = |name: &str, bytes: &[u8]| {
                let path = staging.join(name);
                fs::write(&path, bytes).map_err(|e| PullError::local(image, &path, &e))
            };
            let json = serde_json::to_vec_pretty(&record).unwrap_or_default();
            write("image.json", &json)?;
            write("manifest.json", &resolved.manifest)?;
            write("config.json", &resolved.config_blob)?;
            write("lease", b"")?;
            let target = self.image_dir(&resolved.digest);
            fs::rename(&staging, &target).map_err(|e| PullError::local(image, &target, &e))
        }
        .await;
        for layer in &resolved.layers {
            let _ = fs::remove_file(blobs.join(layer.digest.hex()));
        }
        if result.is_err() {
            let _ = fs::remove_dir_all(&staging);
        }
        result
    }

    /// An open, verified file per layer, downloading those not already in `blobs/` (a
    /// concurrent pull of another image may have fetched a shared one). Opened files stay
    /// readable when that pull removes its blobs.
    async fn layer_files(
        &self,
        image: &ImageRef,
        remote: &Remote<'_>,
        resolved: &Resolved,
        blobs: &Path,
    ) -> Result<Vec<fs::File>, PullError> {
        use futures_util::FutureExt as _;
        use futures_util::{StreamExt as _, TryStreamExt as _};
        // Collected boxed futures, not a lazy map: a closure's future held across the
        // await makes every caller's future fail `Send` for all lifetimes, which a spawned
        // job needs.
        let fetches: Vec<futures_util::future::BoxFuture<'_, _>> = resolved
            .layers
            .iter()
            .map(|layer| {
                async move {
                    let path = blobs.join(layer.digest.hex());
                    match fs::File::open(&path) {
                        Ok(file) => return Ok(file),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(PullError::local(image, &path, &e)),
                    }
                    remote.fetch_layer(layer, &path).await?;
                    fs::File::open(&path).map_err(|e| PullError::local(image, &path, &e))
                }
                .boxed()
            })
            .collect();
        // The first failure ends the pull: the downloads still under way are dropped
        // rather than finished for nothing.
        futures_util::stream::iter(fetches)
            .buffered(PARALLEL_LAYERS)
            .try_collect()
            .await
    }

    /// Evicts least recently used images that no one leases until `incoming` more bytes
    /// fit under the cap, never `keep`. What is leased stays even when that leaves the
    /// cache over its cap: a run in progress matters more than the cap.
    fn evict(&self, incoming: u64, keep: Option<&Digest>) {
        let size = |dir: &Path| {
            fs::read(dir.join("image.json"))
                .ok()
                .and_then(|t| serde_json::from_slice::<Image>(&t).ok())
                .map_or(0, |i| i.size)
        };
        let total = super::lease::evict_least_recent(
            super::lease::listing(&self.dir.join("images")),
            &self.dir.join("tmp"),
            "image cache",
            (self.max, incoming),
            keep.map(Digest::hex),
            size,
        );
        if total.saturating_add(incoming) > self.max {
            tracing::warn!(
                cache = %self.dir.display(),
                "the image cache holds {total} bytes in images that runs are using, over ENVIRONMENT_CACHE_MAX ({} bytes)",
                self.max
            );
        }
    }
}
