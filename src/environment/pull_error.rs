//! Why a pull failed ([`PullError`]) and how a caller branches on it ([`PullErrorKind`]).

use std::path::Path;

use crate::ids::image::ImageRef;

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
    pub(super) fn new(kind: PullErrorKind, image: &ImageRef, message: String) -> Self {
        Self {
            kind,
            image: image.to_string(),
            message,
        }
    }

    pub(super) fn local(image: &ImageRef, path: &Path, error: &std::io::Error) -> Self {
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
