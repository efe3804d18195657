//! The mirror cache: one bare mirror per forge repository under `DATA_DIR/mirrors`,
//! fetched incrementally by the git command line (partial clones for large
//! repositories), one fetch at a time per repository, pruned and repacked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow};
use git2::{Oid, Repository, RepositoryInitOptions};

use super::WorkspaceError;
use super::command::{git_command, git_said, output_within};
use super::credentials::git_with_credentials;
use super::fs::{FileLock, touch};
use super::text::{FileText, base_text};
use crate::forge::GitRemote;
use crate::ids::RepoName;

/// Every branch, mirrored as is; branches deleted upstream are pruned.
const REFSPEC: &str = "+refs/heads/*:refs/heads/*";

/// Touched at the start of each fetch: a caller that asked before it began needs no fetch
/// of its own.
const FETCH_STAMP: &str = "planwright-fetched";

/// Touched whenever a workspace is made from the mirror; `prune_unused` reads it.
const USE_STAMP: &str = "planwright-used";

/// Which mirror: the forge's name (`github`, `gitlab`) and the repository.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MirrorKey {
    forge: String,
    repo: RepoName,
}

impl MirrorKey {
    pub fn new(forge: &str, repo: RepoName) -> Result<Self, WorkspaceError> {
        // Both become folder names under DATA_DIR: nothing that could climb out of it.
        let safe = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !safe(forge) || !repo.as_str().split('/').all(safe) {
            return Err(anyhow!(
                "Cannot keep a mirror of {repo} on forge `{forge}`: the names must be letters, digits, `.`, `_` or `-` and not start with `.`"
            )
            .into());
        }
        Ok(MirrorKey {
            forge: forge.to_owned(),
            repo,
        })
    }

    pub fn repo(&self) -> &RepoName {
        &self.repo
    }
}

/// The bare mirrors under `DATA_DIR/mirrors/<forge>/<owner>/<name>.git`. One fetch at a
/// time per repository: a `tokio` mutex per key in this process, and an exclusive `flock`
/// on `<name>.git.lock` between processes sharing `DATA_DIR`.
pub struct MirrorCache {
    root: PathBuf,
    locks: std::sync::Mutex<HashMap<MirrorKey, Arc<tokio::sync::Mutex<()>>>>,
    fetches: AtomicU64,
    fetch_timeout: Duration,
    /// Repositories (`owner/name` globs) whose mirrors are partial clones.
    partial: globset::GlobSet,
    /// Repositories larger than this (bytes, as their forge reports) get partial mirrors.
    partial_above: Option<u64>,
}

/// The longest one fetch may take, however steadily the forge sends: a fetch holds the
/// mirror's lock, and every session on the repository waits for it.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2 * 3600);

impl MirrorCache {
    pub fn new(data_dir: &Path) -> Self {
        MirrorCache {
            root: data_dir.join("mirrors"),
            locks: std::sync::Mutex::default(),
            fetches: AtomicU64::new(0),
            fetch_timeout: FETCH_TIMEOUT,
            partial: globset::GlobSet::empty(),
            partial_above: None,
        }
    }

    /// Mirrors of repositories matching `patterns` (`acme/monorepo`, `acme/*`, `*`) are
    /// made as partial clones: history without file contents, each commit's files
    /// fetched when a workspace is made from it. Applies to mirrors made from now on.
    pub fn with_partial(mut self, patterns: &[String]) -> anyhow::Result<Self> {
        let mut set = globset::GlobSetBuilder::new();
        for pattern in patterns {
            set.add(
                // `*` crosses `/`: `acme/*` takes GitLab's subgroups too, and `*` all.
                globset::GlobBuilder::new(pattern)
                    .build()
                    .with_context(|| format!("`{pattern}` is not a repository pattern"))?,
            );
        }
        self.partial = set
            .build()
            .context("The partial-mirror patterns do not compile")?;
        Ok(self)
    }

    /// Mirrors of repositories their forge reports larger than `bytes` are made as
    /// partial clones too.
    pub fn with_partial_above(mut self, bytes: Option<u64>) -> Self {
        self.partial_above = bytes;
        self
    }

    /// Whether the repository's size would decide how its mirror is made: a size
    /// setting is set, no pattern names the repository, and there is no mirror yet. Only
    /// then is the forge asked for it.
    pub fn needs_size(&self, key: &MirrorKey) -> bool {
        self.partial_above.is_some()
            && !self.partial.is_match(key.repo.as_str())
            && !self.path(key).exists()
    }

    /// Whether a new mirror of `key`, whose forge reports `size` bytes, is partial.
    fn makes_partial(&self, key: &MirrorKey, size: Option<u64>) -> bool {
        self.partial.is_match(key.repo.as_str())
            || size
                .zip(self.partial_above)
                .is_some_and(|(size, above)| size > above)
    }

    /// A shorter (or longer) bound than `FETCH_TIMEOUT` on one fetch.
    pub fn with_fetch_timeout(mut self, timeout: Duration) -> Self {
        self.fetch_timeout = timeout;
        self
    }

    pub fn path(&self, key: &MirrorKey) -> PathBuf {
        let mut path = self.root.join(&key.forge);
        let mut parts = key.repo.as_str().split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_some() {
                path.push(part);
            } else {
                path.push(format!("{part}.git"));
            }
        }
        path
    }

    /// A text file as committed at `commit` in the mirror, when the mirror, the commit and
    /// the file are all there and it is at most `max_bytes`; for showing, never for
    /// deciding (the forge stays the source of what a commit holds).
    pub fn committed_text(
        &self,
        key: &MirrorKey,
        commit: &str,
        path: &str,
        max_bytes: u64,
    ) -> Option<String> {
        let repo = Repository::open_bare(self.path(key)).ok()?;
        let tree = repo
            .find_commit(Oid::from_str(commit).ok()?)
            .ok()?
            .tree()
            .ok()?;
        let odb = repo.odb().ok()?;
        match base_text(&repo, &odb, &tree, path, max_bytes).ok()? {
            FileText::Text(text) => Some(text),
            _ => None,
        }
    }

    /// Network operations (first clones and fetches) this cache has started.
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }

    fn lock_for(&self, key: &MirrorKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(key.clone()).or_default().clone()
    }

    /// Brings the mirror up to date with the remote, creating it on first use. A caller
    /// that waited while another fetch began after it asked reuses that fetch.
    pub async fn update(&self, key: &MirrorKey, remote: &GitRemote) -> Result<(), WorkspaceError> {
        self.sync(key, remote, None, None).await
    }

    /// Makes sure `sha` is in the mirror, fetching only when it is not. `size`: the
    /// repository's size as its forge reports it, when known, for a mirror made now.
    pub async fn ensure_commit(
        &self,
        key: &MirrorKey,
        remote: &GitRemote,
        sha: Oid,
        size: Option<u64>,
    ) -> Result<(), WorkspaceError> {
        self.sync(key, remote, Some(sha), size).await
    }

    async fn sync(
        &self,
        key: &MirrorKey,
        remote: &GitRemote,
        want: Option<Oid>,
        size: Option<u64>,
    ) -> Result<(), WorkspaceError> {
        let asked = SystemTime::now();
        let lock = self.lock_for(key);
        let _held = lock.lock().await;
        let path = self.path(key);
        let key = key.clone();
        let remote = remote.clone();
        let how = Fetching {
            timeout: self.fetch_timeout,
            partial: self.makes_partial(&key, size),
        };
        let did_fetch = tokio::task::spawn_blocking(move || {
            let _flock = FileLock::exclusive(&lock_path(&path))?;
            sync_blocking(&path, &key, &remote, want, asked, how)
        })
        .await
        .map_err(|e| anyhow!("The mirror task failed: {e}"))??;
        if did_fetch {
            self.fetches.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Removes mirrors no workspace was made from for `older_than`, and returns their
    /// paths. Workspaces share a mirror's objects, so `older_than` must exceed the longest
    /// run plus the time failed workspaces are kept.
    pub async fn prune_unused(&self, older_than: Duration) -> Result<Vec<PathBuf>, WorkspaceError> {
        let mut removed = Vec::new();
        for key in self.keys()? {
            let lock = self.lock_for(&key);
            let _held = lock.lock().await;
            let path = self.path(&key);
            let gone = tokio::task::spawn_blocking(move || -> anyhow::Result<Option<PathBuf>> {
                let _flock = FileLock::exclusive(&lock_path(&path))?;
                // A fetch counts as a use as well as a checkout.
                let last = [path.join(USE_STAMP), path.join(FETCH_STAMP), path.clone()]
                    .iter()
                    .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
                    .max()
                    .ok_or_else(|| anyhow!("Could not read when {} was used", path.display()))?;
                let idle = SystemTime::now().duration_since(last).unwrap_or_default();
                if idle < older_than {
                    return Ok(None);
                }
                std::fs::remove_dir_all(&path)
                    .with_context(|| format!("Could not remove the mirror {}", path.display()))?;
                Ok(Some(path))
            })
            .await
            .map_err(|e| anyhow!("The prune task failed: {e}"))??;
            removed.extend(gone);
        }
        Ok(removed)
    }

    /// Repacks every mirror with `git gc` (the command line: libgit2 has no gc). Unreachable
    /// objects are kept for git's default two weeks, so workspaces made from a branch
    /// that was force-pushed since keep their history.
    pub async fn gc(&self) -> Result<(), WorkspaceError> {
        for key in self.keys()? {
            let lock = self.lock_for(&key);
            let _held = lock.lock().await;
            let path = self.path(&key);
            let _flock = {
                let lock_file = lock_path(&path);
                tokio::task::spawn_blocking(move || FileLock::exclusive(&lock_file))
                    .await
                    .map_err(|e| anyhow!("The gc task failed: {e}"))??
            };
            let mut command = tokio::process::Command::from(git_command(&path));
            let status = command
                .args(["gc", "--quiet"])
                .status()
                .await
                .with_context(|| format!("Could not run git gc in {}", path.display()))?;
            if !status.success() {
                return Err(anyhow!(
                    "Could not gc the mirror {}: git gc {status}",
                    path.display()
                )
                .into());
            }
        }
        Ok(())
    }

    /// Every mirror on disk, found by walking `<forge>/<path…>.git`.
    fn keys(&self) -> anyhow::Result<Vec<MirrorKey>> {
        let mut keys = Vec::new();
        let Ok(forges) = std::fs::read_dir(&self.root) else {
            return Ok(keys);
        };
        for forge in forges {
            let forge = forge?;
            let forge_name = forge.file_name().to_string_lossy().into_owned();
            let mut stack = vec![(forge.path(), String::new())];
            while let Some((dir, prefix)) = stack.pop() {
                for entry in std::fs::read_dir(&dir)
                    .with_context(|| format!("Could not list {}", dir.display()))?
                {
                    let entry = entry?;
                    if !entry.file_type()?.is_dir() {
                        continue;
                    }
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if let Some(repo) = name.strip_suffix(".git") {
                        let full = format!("{prefix}{repo}");
                        if let Ok(repo) = RepoName::parse(&full)
                            && let Ok(key) = MirrorKey::new(&forge_name, repo)
                        {
                            keys.push(key);
                        }
                    } else if !name.contains(".git.tmp-") {
                        stack.push((entry.path(), format!("{prefix}{name}/")));
                    }
                }
            }
        }
        Ok(keys)
    }
}

fn lock_path(mirror: &Path) -> PathBuf {
    let mut name = mirror.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// How a mirror fetches: its time limit, and whether a new mirror is a partial clone.
#[derive(Debug, Clone, Copy)]
struct Fetching {
    timeout: Duration,
    partial: bool,
}

/// Returns whether it went to the network. Asked for a commit, it also marks the mirror
/// used while the lock is held, so `prune_unused` cannot remove it before the checkout,
/// and in a partial mirror fetches the commit's files that are not there yet.
fn sync_blocking(
    path: &Path,
    key: &MirrorKey,
    remote: &GitRemote,
    want: Option<Oid>,
    asked: SystemTime,
    how: Fetching,
) -> Result<bool, WorkspaceError> {
    let fetched = fetch_if_needed(path, key, remote, want, asked, how)?;
    if let Some(commit) = want {
        if is_partial(path) {
            backfill(path, key, remote, commit, how.timeout)?;
        }
        touch(&path.join(USE_STAMP))?;
    }
    Ok(fetched)
}

fn fetch_if_needed(
    path: &Path,
    key: &MirrorKey,
    remote: &GitRemote,
    want: Option<Oid>,
    asked: SystemTime,
    how: Fetching,
) -> Result<bool, WorkspaceError> {
    if path.exists() {
        let repo = Repository::open_bare(path)
            .with_context(|| format!("Could not open the mirror {}", path.display()))?;
        if let Some(sha) = want
            && repo.find_commit(sha).is_ok()
        {
            return Ok(false);
        }
        let fetched_since_asked = std::fs::metadata(path.join(FETCH_STAMP))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= asked);
        if fetched_since_asked {
            return Ok(false);
        }
        drop(repo);
        touch(&path.join(FETCH_STAMP))?;
        fetch(path, key, remote, how.timeout)?;
        return Ok(true);
    }
    // A first clone goes to a temporary folder renamed into place, so an interrupted one
    // never leaves a half mirror behind.
    let parent = path
        .parent()
        .ok_or_else(|| anyhow!("Cannot keep a mirror at {}", path.display()))?;
    std::fs::create_dir_all(parent)
        .with_context(|| format!("Could not create {}", parent.display()))?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(format!(".tmp-{}", uuid::Uuid::new_v4()));
    let tmp = parent.join(tmp_name);
    let result = (|| {
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).external_template(false);
        let repo = Repository::init_opts(&tmp, &opts)
            .with_context(|| format!("Could not create the mirror {}", tmp.display()))?;
        if how.partial {
            // A promisor remote: packs fetched from it may leave out what it can send
            // later. Its URL is kept (never a credential) and set again at each fetch.
            let mut config = repo
                .config()
                .context("Could not read the mirror's config")?;
            config
                .set_bool("remote.origin.promisor", true)
                .and_then(|()| config.set_str("remote.origin.partialclonefilter", PARTIAL_FILTER))
                .context("Could not make the mirror a partial clone")?;
        }
        drop(repo);
        touch(&tmp.join(FETCH_STAMP))?;
        fetch(&tmp, key, remote, how.timeout)?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("Could not move the mirror into {}", path.display()))?;
        Ok(true)
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

/// Fetches with the git command line rather than libgit2: git's `index-pack` resolves
/// deltas on every core where libgit2's indexer uses one, which made a first fetch of a
/// large repository several times slower than `git clone --mirror`. The credentials reach
/// git through a credential helper that reads them from this one child's environment:
/// never in its arguments (which any user of the host can read in `/proc`), the URL, the
/// mirror's config or git's messages.
fn fetch(
    git_dir: &Path,
    key: &MirrorKey,
    remote: &GitRemote,
    timeout: Duration,
) -> Result<(), WorkspaceError> {
    let fail = fetch_failure(key, remote);
    refuse_password_url(key, remote)?;
    let partial = is_partial(git_dir);
    if partial {
        set_origin(git_dir, remote).map_err(|e| fail(e, false))?;
    }
    let mut command = git_with_credentials(git_dir, remote);
    command.args([
        "fetch",
        "--quiet",
        "--prune",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
    ]);
    if partial {
        command.args([&format!("--filter={PARTIAL_FILTER}"), "origin", REFSPEC]);
    } else {
        command.args(["--", &remote.url, REFSPEC]);
    }
    let output = output_within(command, None, timeout).map_err(|e| fail(e, false))?;
    check_fetched(output, fail)
}

/// The error of a fetch of `key` from `remote`, given what went wrong and whether the
/// forge refused the credentials.
fn fetch_failure<'a>(
    key: &'a MirrorKey,
    remote: &'a GitRemote,
) -> impl Fn(String, bool) -> WorkspaceError + 'a {
    move |message, refused| WorkspaceError::Fetch {
        repo: key.repo.to_string(),
        url: remote.url.clone(),
        message,
        refused,
    }
}

/// A URL that carries a password would put it in the mirror's logs, config and error
/// messages.
fn refuse_password_url(key: &MirrorKey, remote: &GitRemote) -> Result<(), WorkspaceError> {
    if let Ok(url) = reqwest::Url::parse(&remote.url)
        && url.password().is_some()
    {
        return Err(WorkspaceError::Fetch {
            repo: key.repo.to_string(),
            url: "a URL with a password in it".into(),
            message: "credentials must not be part of the URL".into(),
            refused: true,
        });
    }
    Ok(())
}

/// The filter of a partial mirror: every commit and tree, no file contents.
const PARTIAL_FILTER: &str = "blob:none";

/// Whether the mirror at `git_dir` is a partial clone.
fn is_partial(git_dir: &Path) -> bool {
    Repository::open_bare(git_dir)
        .and_then(|r| r.config())
        .and_then(|c| c.get_bool("remote.origin.promisor"))
        .unwrap_or(false)
}

/// Points the partial mirror's promisor remote at `remote`'s URL (a repository may have
/// moved since the mirror was made).
fn set_origin(git_dir: &Path, remote: &GitRemote) -> Result<(), String> {
    Repository::open_bare(git_dir)
        .and_then(|r| r.config())
        .and_then(|mut c| c.set_str("remote.origin.url", &remote.url))
        .map_err(|e| format!("could not set the mirror's remote: {}", e.message()))
}

/// Fetches the files of `commit` a partial mirror does not have yet, in one request, as
/// git's own lazy fetch does; a commit whose files are all there costs one tree walk.
fn backfill(
    git_dir: &Path,
    key: &MirrorKey,
    remote: &GitRemote,
    commit: Oid,
    timeout: Duration,
) -> Result<(), WorkspaceError> {
    let fail = fetch_failure(key, remote);
    let listed = git_command(git_dir)
        .args(["rev-list", "--objects", "--missing=print", "--no-walk"])
        .arg(commit.to_string())
        .output()
        .map_err(|e| fail(format!("could not run git: {e}"), false))?;
    if !listed.status.success() {
        let said = String::from_utf8_lossy(&listed.stderr);
        return Err(fail(git_said(&said, listed.status), false));
    }
    let missing: String = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix('?'))
        .map(|oid| format!("{oid}\n"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    refuse_password_url(key, remote)?;
    set_origin(git_dir, remote).map_err(|e| fail(e, false))?;
    let mut command = git_with_credentials(git_dir, remote);
    command.args([
        "-c",
        "fetch.negotiationAlgorithm=noop",
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        &format!("--filter={PARTIAL_FILTER}"),
        "--stdin",
        "origin",
    ]);
    let output =
        output_within(command, Some(missing.into_bytes()), timeout).map_err(|e| fail(e, false))?;
    check_fetched(output, fail)
}

/// A fetch's outcome: refused when git says the forge turned the credentials down.
fn check_fetched(
    output: std::process::Output,
    fail: impl Fn(String, bool) -> WorkspaceError,
) -> Result<(), WorkspaceError> {
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let refused =
        said.contains("Authentication failed") || said.contains("could not read Username");
    Err(fail(git_said(&said, output.status), refused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_keys_stay_inside_the_cache() {
        let repo = RepoName::parse("a/../b").unwrap();
        assert!(MirrorKey::new("github", repo).is_err());
        assert!(MirrorKey::new("../x", RepoName::parse("a/b").unwrap()).is_err());
        let cache = MirrorCache::new(Path::new("/d"));
        let key = MirrorKey::new("gitlab", RepoName::parse("G/sub/Name").unwrap()).unwrap();
        assert_eq!(
            cache.path(&key),
            Path::new("/d/mirrors/gitlab/g/sub/name.git")
        );
    }
}
