//! The repository the tools read, shared by the files that give it tools.

use std::path::PathBuf;

use super::source::Source;

/// A repository seen read-only: a checkout as it is, or a commit's tree.
#[derive(Debug, Clone)]
pub struct RepoTools {
    /// The checkout, where a scout's commands run.
    pub(super) root: PathBuf,
    /// Where the files are read from.
    pub(super) source: Source,
    /// The commit checked out, when it will not change under the tools: the map's cache key.
    pub(super) commit: Option<String>,
    pub(super) map_tokens: usize,
    /// Set while the checkout holds only part of the commit.
    pub(super) widening: Option<std::sync::Arc<crate::git::Widening>>,
}
