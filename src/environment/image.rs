//! An unpacked image ([`Image`]) and the part of its config a run needs ([`RunConfig`]).

use std::path::PathBuf;

use crate::ids::image::Digest;

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
    pub(super) env: Option<Vec<String>>,
    pub(super) working_dir: Option<String>,
    pub(super) user: Option<String>,
}
