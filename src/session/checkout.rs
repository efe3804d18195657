//! The read-only checkout a planner and its scouts look at: the repository at the base
//! commit, from the mirror cache.

use std::path::{Path, PathBuf};

use crate::app::App;
use crate::contract::Base;
use crate::forge::Forge;
use crate::ids::RepoName;
use crate::worker::JobError;

pub struct Checkout {
    path: PathBuf,
}

impl Checkout {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

pub async fn for_planning(
    _app: &App,
    _forge: &dyn Forge,
    _repo: &RepoName,
    _base: &Base,
) -> Result<Checkout, JobError> {
    Err(JobError::Permanent(anyhow::anyhow!(
        "checkouts are not wired yet"
    )))
}
