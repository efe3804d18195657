//! Repositories on disk: one bare mirror per forge repository, fetched incrementally by
//! the git command line with credentials given only through a credential helper's
//! environment, and per-run workspaces checked out from
//! a mirror without copying its history (objects shared through `objects/info/alternates`).
//! Also reads a run's result back: changed files, the diff, and the commit to publish.

pub mod push;
mod sparse;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow};
use git2::{Cred, CredentialType, IndexTime, Oid, Repository, RepositoryInitOptions};
use secrecy::{ExposeSecret, SecretString};

pub use sparse::Widening;

use crate::forge::GitRemote;
use crate::ids::{CommitSha, IssueNumber, RepoName};

/// Every branch, mirrored as is; branches deleted upstream are pruned.
const REFSPEC: &str = "+refs/heads/*:refs/heads/*";
/// Touched at the start of each fetch: a caller that asked before it began needs no fetch
/// of its own.
const FETCH_STAMP: &str = "planwright-fetched";
/// Touched whenever a workspace is made from the mirror; `prune_unused` reads it.
const USE_STAMP: &str = "planwright-used";
/// Present in a workspace kept after a failed run; its mtime is when the run failed.
const FAILED_MARK: &str = "failed";
const BRANCH_PREFIX: &str = "planwright/";
const SLUG_MAX: usize = 40;
/// Bytes of unified diff kept for verification and review; past it the diff is cut and
/// says so, so that a result of huge files cannot fill memory.
pub const DIFF_MAX_BYTES: usize = 8 << 20;
/// Files larger than this are shown as binary in a diff rather than loaded whole.
const DIFF_TEXT_MAX_BYTES: i64 = 4 << 20;
/// The largest result planwright commits: the sizes of its added and changed files.
pub const RESULT_MAX_BYTES: u64 = 256 << 20;
/// The user and group bubblewrap shows a run as (`--uid`/`--gid` in `bwrap.rs`), whoever
/// owns the files on the host: the stat data in the run's index must match what git
/// inside sees, or its first `git status` rehashes every file.
const SANDBOX_INSIDE_ID: u32 = 1000;

/// Failures a caller branches on: a commit that is not there is the contract's problem, a
/// refused or unreachable remote is the forge's (retryable unless refused); the rest is
/// internal.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("Cannot prepare a workspace of {repo} at {sha}: {reason}")]
    BadCommit {
        repo: String,
        sha: String,
        reason: String,
    },
    #[error("Could not fetch {repo} from {url}: {message}")]
    Fetch {
        repo: String,
        url: String,
        message: String,
        /// The forge refused the credentials: fetching again will not help.
        refused: bool,
    },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

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

/// `git` on `git_dir` as every fetch into a mirror runs it: the remote's credentials
/// offered through the helper, which answers only for the remote's own scheme, host and
/// port (not for a host a redirect leads to); no background gc; every fetch kept as one
/// pack; a forge that stops sending given up on.
fn git_with_credentials(git_dir: &Path, remote: &GitRemote) -> std::process::Command {
    let mut command = git_command(git_dir);
    command.args(["-c", "credential.helper="]);
    if let Ok(url) = reqwest::Url::parse(&remote.url)
        && url.has_host()
    {
        command.arg("-c").arg(format!(
            "credential.{}.helper={CREDENTIAL_HELPER}",
            url.origin().ascii_serialization()
        ));
    }
    command
        .args([
            // A fetch must not start a background gc racing the mirror's lock.
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            // Every fetch kept as one pack, however small: thousands of loose objects
            // would slow every later read until the next gc.
            "-c",
            "fetch.unpackLimit=1",
            // A forge that stops sending is given up on rather than waited for forever.
            "-c",
            "http.lowSpeedLimit=1",
            "-c",
            "http.lowSpeedTime=300",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env(USER_VAR, &remote.username)
        .env(PASSWORD_VAR, remote.password.expose_secret());
    command
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

/// Runs `command` to its end, with `input` on its standard input, or kills it (and what
/// it started) after `timeout`. Keeps at most `GIT_SAID_BYTES` of what it writes to
/// standard error.
fn output_within(
    mut command: std::process::Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    if input.is_some() {
        command.stdin(std::process::Stdio::piped());
    }
    let mut child = command
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run git: {e}"))?;
    let group = child.id() as libc::pid_t;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
    }
    let mut stderr = child.stderr.take();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.take(GIT_SAID_BYTES).read_to_end(&mut said);
            let _ = std::io::copy(pipe, &mut std::io::sink());
        }
        let _ = done.send(child.wait().map(|status| std::process::Output {
            status,
            stdout: Vec::new(),
            stderr: said,
        }));
    });
    match finished.recv_timeout(timeout) {
        Ok(output) => output.map_err(|e| format!("could not run git: {e}")),
        Err(_) => {
            // SAFETY: signals the process group this function started; no memory involved.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            // Reaped by the thread; a process that left the group and kept the pipe open
            // is not waited for.
            let _ = finished.recv_timeout(Duration::from_secs(10));
            Err(format!(
                "the fetch took longer than {} seconds and was stopped",
                timeout.as_secs()
            ))
        }
    }
}

/// What of git's standard error is kept for the error message.
const GIT_SAID_BYTES: u64 = 64 << 10;

/// The environment variables the credential helper reads.
const USER_VAR: &str = "PLANWRIGHT_GIT_USER";
const PASSWORD_VAR: &str = "PLANWRIGHT_GIT_PASSWORD";
/// Answers git's `get` with the user and token from the environment, and ignores `store`
/// and `erase`: git asks once, and a refused answer fails the fetch.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get && printf 'username=%s\\npassword=%s\\n' \"$PLANWRIGHT_GIT_USER\" \"$PLANWRIGHT_GIT_PASSWORD\"; }; f";

/// `git` on `git_dir` with nothing from the caller's environment but the proxy and
/// certificate settings, no global or system config (whose credential helpers or
/// `insteadOf` rewrites would apply), and only the transports a forge remote uses.
fn git_command(git_dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(git_dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ALLOW_PROTOCOL", "https:http:file")
        .stdin(std::process::Stdio::null());
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GIT_SSL_CAINFO",
    ] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// What git said, in one bounded line: its last few lines of error output.
fn git_said(stderr: &str, status: std::process::ExitStatus) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("fatal: ")
                .trim_start_matches("error: ")
        })
        .filter(|l| !l.is_empty())
        .collect();
    let said = lines[lines.len().saturating_sub(3)..].join("; ");
    let said: String = said.chars().take(1000).collect();
    if said.is_empty() {
        format!("git fetch {status}")
    } else {
        said
    }
}

/// The credential callback for one push. libgit2 asks again each time the forge
/// refuses, forever; the second question means the first answer was refused, so it fails
/// then with an error naming the user.
pub fn credentials(
    username: String,
    password: SecretString,
) -> impl FnMut(&str, Option<&str>, CredentialType) -> Result<Cred, git2::Error> {
    let mut asked = 0u32;
    move |url, _from_url, allowed| {
        asked += 1;
        if asked > 1 {
            return Err(git2::Error::from_str(&format!(
                "the credentials of `{username}` were refused by {url}"
            )));
        }
        if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            return Err(git2::Error::from_str(&format!(
                "{url} asks for credentials planwright does not have ({allowed:?}); it offers a user name and token"
            )));
        }
        Cred::userpass_plaintext(&username, password.expose_secret())
    }
}

fn touch(path: &Path) -> anyhow::Result<()> {
    File::create(path)
        .and_then(|f| f.set_modified(SystemTime::now()))
        .with_context(|| format!("Could not write {}", path.display()))
}

/// An exclusive `flock`, released when dropped (closing the file releases it).
struct FileLock(#[allow(dead_code)] File);

impl FileLock {
    fn exclusive(path: &Path) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("Could not create {}", parent.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("Could not open the lock {}", path.display()))?;
        loop {
            // SAFETY: the descriptor is open for as long as `file` lives.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(FileLock(file));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("Could not lock {}", path.display()));
            }
        }
    }
}

/// The branch a run works on: `planwright/<issue>-<slug>`, the slug made of the title's
/// ASCII letters and digits, lower-cased, at most 40 characters.
pub fn branch_name(issue: IssueNumber, title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            if slug.len() == SLUG_MAX {
                break;
            }
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            if slug.len() + 1 >= SLUG_MAX {
                break;
            }
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        format!("{BRANCH_PREFIX}{issue}")
    } else {
        format!("{BRANCH_PREFIX}{issue}-{slug}")
    }
}

/// What a run needs checked out.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    pub mirror: MirrorKey,
    pub remote: GitRemote,
    pub base: CommitSha,
    pub issue: IssueNumber,
    pub title: String,
    /// The repository's size in bytes as its forge reports it, when asked (see
    /// [`MirrorCache::needs_size`]): it decides whether a mirror made now is partial.
    pub size: Option<u64>,
}

/// How a run ended, which decides whether its workspace is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// Per-run workspaces under `DATA_DIR/workspaces/<id>/`:
/// - `git/`: planwright's own git dir for the run (alternates to the mirror); the sandbox
///   never sees it, so what is read back and committed does not depend on anything the
///   run could have written into a `.git`;
/// - `run/`: the sandbox's writable folder (`Command::workspace`), owned by the sandbox
///   user: `run/repo` is the checkout with the run's own `.git`, `run/home` its `HOME`.
pub struct Workspaces {
    root: PathBuf,
    cache: Arc<MirrorCache>,
    owner: Option<(u32, u32)>,
}

impl Workspaces {
    /// `owner`: the host user and group the sandbox runs as, when that is not planwright's
    /// own (root hands workspaces to an unprivileged user, see `Bwrap::new`).
    pub fn new(data_dir: &Path, cache: Arc<MirrorCache>, owner: Option<(u32, u32)>) -> Self {
        Workspaces {
            root: data_dir.join("workspaces"),
            cache,
            owner,
        }
    }

    /// The owner a sandbox started by this process needs: `Bwrap`'s default host user when
    /// planwright is root, none otherwise.
    pub fn default_owner() -> Option<(u32, u32)> {
        // SAFETY: geteuid has no preconditions.
        (unsafe { libc::geteuid() } == 0).then_some(crate::sandbox::Bwrap::DEFAULT_HOST_USER)
    }

    pub fn cache(&self) -> &Arc<MirrorCache> {
        &self.cache
    }

    /// A fresh checkout of `base` on the run branch, fetching into the mirror only when
    /// the commit is not there yet.
    pub async fn create(&self, request: &WorkspaceRequest) -> Result<Workspace, WorkspaceError> {
        self.create_on(request, &branch_name(request.issue, &request.title))
            .await
    }

    /// As [`Workspaces::create`], on a branch the caller names (a session keeps the branch
    /// its first run was given, whatever the issue's title became).
    pub async fn create_on(
        &self,
        request: &WorkspaceRequest,
        branch: &str,
    ) -> Result<Workspace, WorkspaceError> {
        self.make(request, branch, None).await
    }

    /// A checkout of `request.base` on `branch`; sparse when `sparse` says so and the
    /// commit is that large (see [`Workspaces::create_sparse`]).
    async fn make(
        &self,
        request: &WorkspaceRequest,
        branch: &str,
        sparse: Option<(usize, Vec<String>)>,
    ) -> Result<Workspace, WorkspaceError> {
        let repo_name = request.mirror.repo.to_string();
        let bad = |reason: &str| WorkspaceError::BadCommit {
            repo: repo_name.clone(),
            sha: request.base.as_str().to_owned(),
            reason: reason.to_owned(),
        };
        let sha = request.base.as_str();
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("a full 40-character commit SHA is needed"));
        }
        let oid = Oid::from_str(sha).map_err(|_| bad("not a commit SHA"))?;
        self.cache
            .ensure_commit(&request.mirror, &request.remote, oid, request.size)
            .await?;

        let mirror = self.cache.path(&request.mirror);
        let dir = self.root.join(uuid::Uuid::now_v7().to_string());
        let branch = branch.to_owned();
        let owner = self.owner;
        let (b, d) = (branch.clone(), dir.clone());
        let created = tokio::task::spawn_blocking(move || {
            let only = match sparse {
                Some((files_max, keep)) => sparse::paths(&mirror, oid, files_max, &keep)?,
                None => None,
            };
            let objects = checkout(&mirror, &d, oid, &b, owner, only.as_deref())?;
            Ok::<_, CheckoutError>((objects, only.is_some()))
        })
        .await
        .map_err(|e| anyhow!("The checkout task failed: {e}"))?;
        match created {
            Ok((shared_objects, sparse)) => Ok(Workspace {
                sparse: sparse.then(|| Arc::new(sparse::Widening::new(&dir, oid, owner))),
                dir,
                branch,
                base: oid,
                parent: None,
                compared: None,
                shared_objects,
                finished: false,
            }),
            Err(e) => {
                let _ = remove_tree(&dir);
                Err(match e {
                    CheckoutError::NotACommit(reason) => bad(&reason),
                    CheckoutError::Other(e) => e.into(),
                })
            }
        }
    }

    /// The workspace a run left at `dir` (see [`Workspace::location`]), for publishing
    /// the result it verified after a restart; `None` when it is gone or not one of ours.
    /// It counts as running again, so the sweep leaves it alone.
    pub fn reopen(
        &self,
        dir: &Path,
        mirror: &MirrorKey,
        branch: &str,
        base: &CommitSha,
    ) -> Result<Option<Workspace>, WorkspaceError> {
        let Ok(base) = Oid::from_str(base.as_str()) else {
            return Ok(None);
        };
        if dir.parent() != Some(self.root.as_path())
            || !dir.join("git").is_dir()
            || !dir.join("run/repo").is_dir()
        {
            return Ok(None);
        }
        let Ok(shared_objects) = self.cache.path(mirror).join("objects").canonicalize() else {
            return Ok(None);
        };
        match std::fs::remove_file(dir.join(FAILED_MARK)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(
                    anyhow!("Could not take back the workspace {}: {e}", dir.display()).into(),
                );
            }
        }
        Ok(Some(Workspace {
            dir: dir.to_path_buf(),
            branch: branch.to_owned(),
            base,
            parent: None,
            compared: None,
            shared_objects,
            finished: false,
            sparse: None,
        }))
    }

    /// Puts the result of `workspace` on top of `parent`: a commit the run branch holds
    /// upstream that the checkout did not start from (unfinished work kept there), so the
    /// result's push moves the branch forward rather than being refused. The result's
    /// content is still the checkout's, whatever `parent` held.
    pub async fn stack_on(
        &self,
        workspace: &mut Workspace,
        mirror: &MirrorKey,
        remote: &GitRemote,
        parent: &CommitSha,
    ) -> Result<(), WorkspaceError> {
        let oid = Oid::from_str(parent.as_str()).map_err(|_| WorkspaceError::BadCommit {
            repo: mirror.repo.to_string(),
            sha: parent.as_str().to_owned(),
            reason: "not a commit SHA".into(),
        })?;
        if oid != workspace.base {
            self.cache.ensure_commit(mirror, remote, oid, None).await?;
            workspace.parent = Some(oid);
        }
        Ok(())
    }

    /// Removes workspaces of failed runs kept longer than `keep_failed`; returns how many.
    /// Workspaces without the failure mark belong to running (or crashed) runs and are
    /// left alone.
    pub async fn sweep(&self, keep_failed: Duration) -> Result<usize, WorkspaceError> {
        let root = self.root.clone();
        let removed = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
            let Ok(entries) = std::fs::read_dir(&root) else {
                return Ok(0);
            };
            let mut removed = 0;
            for entry in entries {
                let dir = entry?.path();
                let Ok(failed_at) =
                    std::fs::metadata(dir.join(FAILED_MARK)).and_then(|m| m.modified())
                else {
                    continue;
                };
                if SystemTime::now()
                    .duration_since(failed_at)
                    .unwrap_or_default()
                    >= keep_failed
                {
                    remove_tree(&dir)?;
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
        .map_err(|e| anyhow!("The sweep task failed: {e}"))??;
        Ok(removed)
    }
}

enum CheckoutError {
    NotACommit(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for CheckoutError {
    fn from(e: anyhow::Error) -> Self {
        CheckoutError::Other(e)
    }
}

/// Builds `dir/git` and `dir/run/{repo,home}`; returns the mirror objects folder the
/// workspace reads its history from.
fn checkout(
    mirror: &Path,
    dir: &Path,
    base: Oid,
    branch: &str,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> Result<PathBuf, CheckoutError> {
    let objects = mirror
        .join("objects")
        .canonicalize()
        .with_context(|| format!("Could not open the objects of {}", mirror.display()))?;
    let run = dir.join("run");
    let work = run.join("repo");
    let home = run.join("home");
    for d in [&work, &home] {
        std::fs::create_dir_all(d).with_context(|| format!("Could not create {}", d.display()))?;
    }

    let git_dir = dir.join("git");
    let repo = init_sharing(&git_dir, &objects, true)?;
    let commit = match repo.find_commit(base) {
        Ok(c) => c,
        Err(_) => {
            return Err(CheckoutError::NotACommit(
                "no such commit in the repository".into(),
            ));
        }
    };
    repo.set_workdir(&work, false)
        .with_context(|| format!("Could not use {} as the checkout", work.display()))?;
    let branch_ref = format!("refs/heads/{branch}");
    repo.reference(&branch_ref, base, true, "planwright: run branch")
        .with_context(|| format!("Could not create the branch {branch}"))?;
    repo.set_head(&branch_ref)
        .context("Could not point HEAD at the run branch")?;

    let index = write_tree(&repo, &commit, &work, owner, only)?;
    let run_git = run_git_dir(&work, &objects, base, branch, &index)?;
    if let Some((uid, gid)) = owner {
        for path in [&run, &work, &home] {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).with_context(|| {
                format!("Could not hand {} to the sandbox user", path.display())
            })?;
        }
        // Small: no objects of its own.
        chown_tree(&run_git, uid, gid)?;
    }
    Ok(objects)
}

/// Writes `commit`'s files (`only` these, when given) into `work` for the sandbox user
/// `owner`, and returns the index with their stat data.
fn write_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    work: &Path,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> anyhow::Result<git2::Index> {
    let handed = check_out_tree(repo, commit, work, owner, only)?;
    let mut index = repo
        .index()
        .context("Could not read the checkout's index")?;
    if !handed.is_empty() {
        refresh_stat(&mut index, &handed)?;
        index
            .write()
            .context("Could not write the checkout's index")?;
    }
    Ok(index)
}

/// Writes `commit`'s files into `work`, handing each to the sandbox user (`owner`) as it
/// is written instead of walking the tree afterwards; returns their new stat data, which
/// goes back into the index so `git status` inside does not rehash every file whose
/// owner and ctime changed.
fn check_out_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    work: &Path,
    owner: Option<(u32, u32)>,
    only: Option<&[PathBuf]>,
) -> anyhow::Result<HashMap<PathBuf, std::fs::Metadata>> {
    let mut handed: HashMap<PathBuf, std::fs::Metadata> = HashMap::new();
    let mut dirs: HashSet<PathBuf> = HashSet::new();
    let mut failure: Option<anyhow::Error> = None;
    {
        let mut builder = git2::build::CheckoutBuilder::new();
        builder.force();
        if let Some(paths) = only {
            // Exactly these paths, never read as patterns.
            builder.disable_pathspec_match(true);
            for path in paths {
                builder.path(path.as_path());
            }
        }
        if let Some((uid, gid)) = owner {
            let (handed, dirs, failure) = (&mut handed, &mut dirs, &mut failure);
            builder.progress(move |path, _, _| {
                let Some(rel) = path else { return };
                if failure.is_some() {
                    return;
                }
                let full = work.join(rel);
                let mut parent = rel.parent();
                while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                    if !dirs.insert(p.to_path_buf()) {
                        break;
                    }
                    if let Err(e) = std::os::unix::fs::lchown(work.join(p), Some(uid), Some(gid)) {
                        *failure = Some(anyhow!(
                            "Could not hand {} to the sandbox user: {e}",
                            p.display()
                        ));
                    }
                    parent = p.parent();
                }
                match std::os::unix::fs::lchown(&full, Some(uid), Some(gid))
                    .and_then(|()| std::fs::symlink_metadata(&full))
                {
                    Ok(meta) => {
                        handed.insert(rel.to_path_buf(), meta);
                    }
                    Err(e) => {
                        *failure = Some(anyhow!(
                            "Could not hand {} to the sandbox user: {e}",
                            rel.display()
                        ))
                    }
                }
            });
        }
        repo.checkout_tree(commit.as_object(), Some(&mut builder))
            .with_context(|| {
                format!(
                    "Could not check out {} into {}",
                    commit.id(),
                    work.display()
                )
            })?;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(handed)
}

/// The run's own `.git` in `work`: same objects, same branch, a copy of `index`; nothing
/// that points back at planwright's git dir, no remote and no credentials.
fn run_git_dir(
    work: &Path,
    objects: &Path,
    base: Oid,
    branch: &str,
    index: &git2::Index,
) -> anyhow::Result<PathBuf> {
    let branch_ref = format!("refs/heads/{branch}");
    let run_git = work.join(".git");
    let run_repo = init_sharing(&run_git, objects, false)?;
    run_repo
        .reference(&branch_ref, base, true, "planwright: run branch")
        .with_context(|| format!("Could not create the branch {branch} in the checkout"))?;
    run_repo
        .set_head(&branch_ref)
        .context("Could not point the checkout's HEAD at the run branch")?;
    drop(run_repo);
    fill_run_index(&run_git, index)?;
    Ok(run_git)
}

/// Puts `index`'s entries into the index of the run's own git dir `run_git`, as the
/// sandbox's user owns them. The index file is opened alone: libgit2 will not open a
/// repository owned by another user, as the run's is once handed over.
fn fill_run_index(run_git: &Path, index: &git2::Index) -> anyhow::Result<()> {
    let mut run_index = git2::Index::open(&run_git.join("index"))
        .context("Could not read the checkout's own index")?;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    for mut entry in entries {
        entry.uid = SANDBOX_INSIDE_ID;
        entry.gid = SANDBOX_INSIDE_ID;
        run_index
            .add(&entry)
            .context("Could not fill the checkout's own index")?;
    }
    run_index
        .write()
        .context("Could not write the checkout's own index")
}

/// A repository at `git_dir` whose objects come from `objects` through alternates.
fn init_sharing(git_dir: &Path, objects: &Path, bare: bool) -> anyhow::Result<Repository> {
    let mut opts = RepositoryInitOptions::new();
    // No hook templates from the host in a repository the sandbox works in.
    opts.bare(bare).external_template(false).no_reinit(true);
    let repo = if bare {
        Repository::init_opts(git_dir, &opts)
    } else {
        let work = git_dir.parent().unwrap_or(git_dir);
        Repository::init_opts(work, &opts)
    }
    .with_context(|| format!("Could not create the repository {}", git_dir.display()))?;
    let alternates = git_dir.join("objects/info/alternates");
    let mut file = File::create(&alternates)
        .with_context(|| format!("Could not write {}", alternates.display()))?;
    writeln!(file, "{}", objects.display())
        .with_context(|| format!("Could not write {}", alternates.display()))?;
    drop(file);
    // Reopened so the object database sees the alternates written after init.
    let repo = if bare {
        drop(repo);
        Repository::open_bare(git_dir)
    } else {
        drop(repo);
        Repository::open(git_dir)
    }
    .with_context(|| format!("Could not open the repository {}", git_dir.display()))?;
    Ok(repo)
}

/// Puts the stat data taken after the hand-over into the index entries.
fn refresh_stat(
    index: &mut git2::Index,
    handed: &HashMap<PathBuf, std::fs::Metadata>,
) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let entries: Vec<git2::IndexEntry> = index.iter().collect();
    for mut entry in entries {
        let rel = Path::new(std::ffi::OsStr::from_bytes(&entry.path));
        let Some(meta) = handed.get(rel) else {
            continue;
        };
        // The index keeps 32-bit fields; git truncates the same way.
        entry.ctime = IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
        entry.mtime = IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
        entry.dev = meta.dev() as u32;
        entry.ino = meta.ino() as u32;
        entry.uid = meta.uid();
        entry.gid = meta.gid();
        entry.file_size = meta.size() as u32;
        index
            .add(&entry)
            .with_context(|| format!("Could not update the index entry of {}", rel.display()))?;
    }
    Ok(())
}

fn chown_tree(root: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
            .with_context(|| format!("Could not hand {} to the sandbox user", path.display()))?;
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("Could not inspect {}", path.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)
                .with_context(|| format!("Could not list {}", path.display()))?
            {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// Removes a workspace even where the run left folders without write permission (a
/// sandbox running as planwright's own user can do that).
fn remove_tree(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return Ok(());
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    std::fs::remove_dir_all(dir)
        .with_context(|| format!("Could not remove the workspace {}", dir.display()))
}

/// One changed path between the base and the checkout as the run left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    pub path: String,
    pub change: Change,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
    /// A file became a symlink or the other way round.
    TypeChanged,
}

/// One side of a changed file, read as text for comparing it line by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileText {
    /// Not there on this side.
    Absent,
    Text(String),
    /// Not read, and why: over the size cap, not UTF-8, or not a regular file.
    Unread(String),
}

/// Who a run's commit is by.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// One run's workspace. Dropped without [`Workspace::finish`], it counts as failed and is
/// kept until the sweep.
#[derive(Debug)]
pub struct Workspace {
    dir: PathBuf,
    branch: String,
    base: Oid,
    /// What the result commit goes on top of when that is not `base`
    /// ([`Workspaces::stack_on`]).
    parent: Option<Oid>,
    /// What the result is read against when that is not `base`
    /// ([`Workspace::compare_from`]): the session's base when a run starts from work
    /// pushed or kept before.
    compared: Option<Oid>,
    shared_objects: PathBuf,
    finished: bool,
    /// Set while the checkout holds only part of the commit ([`Workspaces::create_sparse`]).
    sparse: Option<Arc<sparse::Widening>>,
}

impl Workspace {
    /// Where the whole workspace lives, for [`Workspaces::reopen`].
    pub fn location(&self) -> &Path {
        &self.dir
    }

    /// The folder to give the sandbox as its workspace (holds `repo/` and `home/`).
    pub fn root(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The checkout; relative to [`Workspace::root`] it is `repo`, the sandbox's working
    /// directory.
    pub fn repo(&self) -> PathBuf {
        self.dir.join("run/repo")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("run/home")
    }

    /// Variables to add to a sandboxed command: `HOME` outside the checkout, so caches and
    /// tool settings never show up in the diff.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("HOME".into(), self.home().display().to_string())]
    }

    /// A sandbox command working in the checkout, with `HOME` and the git history it
    /// needs: the mirror's objects are shown read-only, since the sandbox hides `DATA_DIR`.
    pub fn command(&self, argv: Vec<String>) -> crate::sandbox::Command {
        let mut cmd = crate::sandbox::Command::new(self.root(), argv);
        cmd.cwd = Some("repo".into());
        cmd.env = self.env();
        cmd.read_only = vec![self.shared_objects().to_path_buf()];
        cmd
    }

    /// The mirror's objects folder the checkout's history lives in. A sandbox that hides
    /// `DATA_DIR` must show this folder read-only at the same path, or git inside sees no
    /// history.
    pub fn shared_objects(&self) -> &Path {
        &self.shared_objects
    }

    /// planwright's own git dir of the run, from which the run branch is pushed.
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join("git")
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    pub fn base(&self) -> CommitSha {
        CommitSha(self.base.to_string())
    }

    /// Reads the result (its changed files, texts and diff) against `commit` rather than
    /// the commit the checkout started from: a run that carries on earlier work is
    /// checked as the whole change the branch will hold, so nothing the earlier work did
    /// escapes the checks. The result is still committed on top of where it started.
    pub fn compare_from(&mut self, commit: &CommitSha) -> Result<(), WorkspaceError> {
        let oid = Oid::from_str(commit.as_str()).map_err(|_| WorkspaceError::BadCommit {
            repo: String::new(),
            sha: commit.as_str().to_owned(),
            reason: "not a commit SHA".into(),
        })?;
        self.compared = (oid != self.base).then_some(oid);
        Ok(())
    }

    /// The commit the result is read against.
    fn compared(&self) -> Oid {
        self.compared.unwrap_or(self.base)
    }

    /// Files that differ between the base and the checkout (untracked files included,
    /// ignored ones not).
    pub async fn changed_files(&self) -> Result<Vec<ChangedFile>, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut files = Vec::new();
            for delta in diff.deltas() {
                let change = match delta.status() {
                    git2::Delta::Added | git2::Delta::Untracked => Change::Added,
                    git2::Delta::Deleted => Change::Deleted,
                    git2::Delta::Typechange => Change::TypeChanged,
                    _ => Change::Modified,
                };
                let file = if change == Change::Deleted {
                    delta.old_file()
                } else {
                    delta.new_file()
                };
                let path = file
                    .path()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                files.push(ChangedFile { path, change });
            }
            Ok(files)
        })
        .await
    }

    /// The paths this run itself changed: from the commit the checkout started from,
    /// whatever the result is read against (a round on top of earlier work names only
    /// what it did).
    pub async fn paths_changed_since_start(&self) -> Result<Vec<String>, WorkspaceError> {
        let (git_dir, work, start) = (self.git_dir(), self.repo(), self.base);
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, start)?;
            Ok(diff
                .deltas()
                .flat_map(|d| [d.old_file().path(), d.new_file().path()])
                .flatten()
                .map(|p| p.to_string_lossy().into_owned())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect())
        })
        .await
    }

    /// The unified diff from the base to the checkout, at most [`DIFF_MAX_BYTES`].
    pub async fn diff(&self) -> Result<String, WorkspaceError> {
        self.diff_within(DIFF_MAX_BYTES).await
    }

    /// The unified diff from the base to the checkout, cut after `max` bytes with a last
    /// line saying so. Printed file by file, so only the kept part is ever held.
    pub async fn diff_within(&self, max: usize) -> Result<String, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut out = Vec::new();
            let mut cut = false;
            let printed = diff.print(git2::DiffFormat::Patch, |_, _, line| {
                let origin = matches!(line.origin(), '+' | '-' | ' ');
                if out.len() + usize::from(origin) + line.content().len() > max {
                    cut = true;
                    return false;
                }
                if origin {
                    out.push(line.origin() as u8);
                }
                out.extend_from_slice(line.content());
                true
            });
            if !cut {
                printed.context("Could not render the diff")?;
            }
            let mut text = String::from_utf8_lossy(&out).into_owned();
            if cut {
                text.push_str(&format!(
                    "\n[planwright: the diff is cut here, at {max} bytes]\n"
                ));
            }
            Ok(text)
        })
        .await
    }

    /// `paths` as the base commit and the checkout hold them, each side at most
    /// `max_bytes`. A path under a symbolic link in the checkout is not followed: what
    /// it points at is not the result's.
    pub async fn file_texts(
        &self,
        paths: Vec<String>,
        max_bytes: u64,
    ) -> Result<Vec<(FileText, FileText)>, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let tree = repo
                .find_commit(base)
                .and_then(|c| c.tree())
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let odb = repo.odb().context("Could not open the object database")?;
            paths
                .iter()
                .map(|path| {
                    let old = base_text(&repo, &odb, &tree, path, max_bytes)?;
                    Ok((old, checkout_text(&work, path, max_bytes)))
                })
                .collect()
        })
        .await
    }

    /// Bytes the result's added and changed files hold in the checkout (symbolic links
    /// count as their own size, not their target's).
    pub async fn changed_bytes(&self) -> Result<u64, WorkspaceError> {
        let (git_dir, work, base) = (self.git_dir(), self.repo(), self.compared());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let diff = diff_from_base(&repo, base)?;
            let mut total = 0u64;
            for delta in diff.deltas() {
                if delta.status() == git2::Delta::Deleted {
                    continue;
                }
                if let Some(path) = delta.new_file().path()
                    && let Ok(meta) = std::fs::symlink_metadata(work.join(path))
                {
                    total = total.saturating_add(meta.len());
                }
            }
            Ok(total)
        })
        .await
    }

    /// Commits the checkout as it is onto the run branch in planwright's git dir and
    /// returns the branch's new tip (the old one when nothing changed).
    pub async fn commit(
        &self,
        message: &str,
        author: &Author,
    ) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, work, branch) = (self.git_dir(), self.repo(), self.branch.clone());
        let (message, author) = (message.to_owned(), author.clone());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let mut index = repo.index().context("Could not read the run's index")?;
            index
                .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
                .context("Could not stage the run's files")?;
            index
                .update_all(["*"], None)
                .context("Could not stage the run's deletions")?;
            index.write().context("Could not write the run's index")?;
            let tree_id = index
                .write_tree()
                .context("Could not write the run's tree")?;
            let branch_ref = format!("refs/heads/{branch}");
            let parent = repo
                .find_reference(&branch_ref)
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?;
            if parent.tree_id() == tree_id {
                return Ok(CommitSha(parent.id().to_string()));
            }
            let tree = repo
                .find_tree(tree_id)
                .context("Could not read the run's tree")?;
            let signature = signature(&author)?;
            let id = repo
                .commit(
                    Some(&branch_ref),
                    &signature,
                    &signature,
                    &message,
                    &tree,
                    &[&parent],
                )
                .context("Could not commit the run's changes")?;
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// Commits the checkout as the run's one result commit on the base (or the parent it
    /// is stacked on), replacing what an earlier attempt committed, and leaving out
    /// `exclude` (files an earlier attempt's verification created, while they hold what it
    /// left). Taken before verification runs, so nothing the checks write joins the
    /// result. Returns the base when the result changes nothing.
    pub async fn commit_result(
        &self,
        message: &str,
        author: &Author,
        exclude: &Artifacts,
    ) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, work, branch, base) =
            (self.git_dir(), self.repo(), self.branch.clone(), self.base);
        let parent = self.parent.unwrap_or(base);
        let (message, author, exclude) = (message.to_owned(), author.clone(), exclude.clone());
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let base_commit = repo
                .find_commit(base)
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let parent_commit = repo
                .find_commit(parent)
                .with_context(|| format!("Could not read the commit {parent} to build on"))?;
            let base_tree = base_commit.tree().context("Could not read the base tree")?;
            let mut index = repo.index().context("Could not read the run's index")?;
            index
                .read_tree(&base_tree)
                .context("Could not start the run's index from the base")?;
            let mut skip =
                |path: &Path, _: &[u8]| -> i32 { i32::from(exclude.unchanged(&work, path)) };
            index
                .add_all(["*"], git2::IndexAddOption::DEFAULT, Some(&mut skip))
                .context("Could not stage the run's files")?;
            index
                .update_all(["*"], Some(&mut skip))
                .context("Could not stage the run's deletions")?;
            index.write().context("Could not write the run's index")?;
            let tree_id = index
                .write_tree()
                .context("Could not write the run's tree")?;
            let branch_ref = format!("refs/heads/{branch}");
            if tree_id == base_tree.id() {
                repo.reference(&branch_ref, base, true, "planwright: nothing changed")
                    .context("Could not reset the run branch")?;
                return Ok(CommitSha(base.to_string()));
            }
            let tree = repo
                .find_tree(tree_id)
                .context("Could not read the run's tree")?;
            let signature = signature(&author)?;
            let id = repo
                .commit(
                    None,
                    &signature,
                    &signature,
                    &message,
                    &tree,
                    &[&parent_commit],
                )
                .context("Could not commit the run's result")?;
            repo.reference(&branch_ref, id, true, "planwright: the run's result")
                .context("Could not point the run branch at the result")?;
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// The run branch's tip in planwright's git dir.
    pub async fn tip(&self) -> Result<CommitSha, WorkspaceError> {
        let (git_dir, branch) = (self.git_dir(), self.branch.clone());
        blocking(move || {
            let repo = Repository::open_bare(&git_dir)
                .with_context(|| format!("Could not open {}", git_dir.display()))?;
            let id = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?
                .id();
            Ok(CommitSha(id.to_string()))
        })
        .await
    }

    /// Undoes what verification's commands did to the committed result in the checkout,
    /// so that no later attempt's commit takes it for the executor's: tracked files they
    /// rewrote, deleted or turned into another kind are put back as the run branch's tip
    /// holds them (a formatter's rewrite, a snapshot update), and a file the result
    /// deleted that they made again is removed. Files they created stay (caches, a
    /// setup's `node_modules`: deleting them would only cost the next run) and are
    /// returned with the id of their content, which a later commit leaves out while the
    /// content is unchanged.
    pub async fn undo_checks_writes(&self) -> Result<Artifacts, WorkspaceError> {
        let (git_dir, work, branch, base) =
            (self.git_dir(), self.repo(), self.branch.clone(), self.base);
        blocking(move || {
            let repo = open_results(&git_dir, &work)?;
            let tip = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .and_then(|r| r.peel_to_commit())
                .context("Could not read the run branch")?;
            let tip_tree = tip.tree().context("Could not read the result's tree")?;
            let base_tree = repo
                .find_commit(base)
                .and_then(|c| c.tree())
                .with_context(|| format!("Could not read the base commit {base}"))?;
            let diff = diff_from_base(&repo, tip.id())?;
            let (mut new, mut changed) = (Vec::new(), Vec::new());
            for delta in diff.deltas() {
                let Some(path) = delta.new_file().path().or(delta.old_file().path()) else {
                    continue;
                };
                match delta.status() {
                    git2::Delta::Untracked | git2::Delta::Added => new.push(path.to_owned()),
                    git2::Delta::Modified | git2::Delta::Deleted | git2::Delta::Typechange => {
                        changed.push(path.to_owned());
                    }
                    _ => {}
                }
            }
            // Put back first: a link the checks left where a folder was gives way to the
            // folder, and is no file of theirs to keep.
            for path in &changed {
                let entry = tip_tree
                    .get_path(path)
                    .with_context(|| format!("Could not find {} in the result", path.display()))?;
                put_back(&repo, &work, path, &entry)?;
            }
            let mut created = Artifacts::default();
            let file_in = |tree: &git2::Tree<'_>, path: &Path| {
                tree.get_path(path)
                    .is_ok_and(|e| e.kind() == Some(git2::ObjectType::Blob))
            };
            for path in &new {
                if file_in(&base_tree, path) && tip_tree.get_path(path).is_err() {
                    remove_path(&work, path)?;
                } else if let Some(id) = content_id(&work.join(path)) {
                    created.0.insert(path.to_string_lossy().into_owned(), id);
                }
            }
            Ok(created)
        })
        .await
    }

    /// Removes the workspace after a success; keeps it after a failure, marked, until
    /// [`Workspaces::sweep`] finds it older than the time failed workspaces are kept.
    pub async fn finish(mut self, outcome: Outcome) -> Result<(), WorkspaceError> {
        self.finished = true;
        let dir = self.dir.clone();
        blocking(move || match outcome {
            Outcome::Succeeded => remove_tree(&dir),
            Outcome::Failed => touch(&dir.join(FAILED_MARK)),
        })
        .await
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.finished {
            let _ = touch(&self.dir.join(FAILED_MARK));
        }
    }
}

/// Files verification's commands created in a result's checkout, each with the id of the
/// content they left: the checks' own, never the executor's, until the executor changes
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Artifacts(HashMap<String, Oid>);

impl Artifacts {
    /// Adds `later`'s files; a file both hold keeps what the later checks left.
    pub fn extend(&mut self, later: Artifacts) {
        self.0.extend(later.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `path` (relative to `work`) is one of these files, holding what the checks
    /// left in it.
    fn unchanged(&self, work: &Path, path: &Path) -> bool {
        self.0
            .get(path.to_string_lossy().as_ref())
            .is_some_and(|id| content_id(&work.join(path)).as_ref() == Some(id))
    }
}

/// The blob id of what `path` holds: a file's bytes, or a symbolic link's target (never
/// what it points to); `None` for a folder or nothing.
fn content_id(path: &Path) -> Option<Oid> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        Oid::hash_object(
            git2::ObjectType::Blob,
            target.as_os_str().as_encoded_bytes(),
        )
        .ok()
    } else if meta.is_file() {
        Oid::hash_file(git2::ObjectType::Blob, path).ok()
    } else {
        None
    }
}

/// Removes `relative` from `work`, if it is there, without following links.
fn remove_path(work: &Path, relative: &Path) -> anyhow::Result<()> {
    let target = work.join(relative);
    match std::fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&target),
        Ok(_) => std::fs::remove_file(&target),
        Err(_) => return Ok(()),
    }
    .with_context(|| format!("Could not remove {}", target.display()))
}

/// Writes `entry` (a file or a link of the result's tree) back at `relative` in `work`.
/// The folders on the way are made real ones first: a check may have left a link in the
/// place of one, and writing through it would reach outside the checkout.
fn put_back(
    repo: &Repository,
    work: &Path,
    relative: &Path,
    entry: &git2::TreeEntry<'_>,
) -> anyhow::Result<()> {
    if entry.kind() != Some(git2::ObjectType::Blob) {
        return Ok(());
    }
    let mut dir = work.to_path_buf();
    let parts: Vec<_> = relative.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&dir)
                .with_context(|| format!("Could not remove {}", dir.display()))?,
            Err(_) => {}
        }
        std::fs::create_dir(&dir).with_context(|| format!("Could not create {}", dir.display()))?;
    }
    remove_path(work, relative)?;
    let target = work.join(relative);
    let blob = repo
        .find_blob(entry.id())
        .with_context(|| format!("Could not read {} in the result", relative.display()))?;
    if entry.filemode() == i32::from(git2::FileMode::Link) {
        use std::os::unix::ffi::OsStrExt as _;
        let link = std::ffi::OsStr::from_bytes(blob.content());
        std::os::unix::fs::symlink(link, &target)
    } else {
        std::fs::write(&target, blob.content()).and_then(|()| {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = if entry.filemode() == i32::from(git2::FileMode::BlobExecutable) {
                0o755
            } else {
                0o644
            };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
        })
    }
    .with_context(|| format!("Could not write {} back", target.display()))
}

fn signature(author: &Author) -> anyhow::Result<git2::Signature<'static>> {
    git2::Signature::now(&author.name, &author.email).map_err(|e| {
        anyhow!(
            "Cannot commit as {} <{}>: {}",
            author.name,
            author.email,
            e.message()
        )
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Result<T, WorkspaceError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("The workspace task failed: {e}"))??)
}

/// planwright's git dir with the checkout as its work tree. The checkout is refused when
/// the run replaced it with a symlink: reading through one would publish files from
/// elsewhere on the host.
fn open_results(git_dir: &Path, work: &Path) -> anyhow::Result<Repository> {
    let meta = std::fs::symlink_metadata(work)
        .with_context(|| format!("Could not open the checkout {}", work.display()))?;
    if !meta.is_dir() {
        return Err(anyhow!(
            "Cannot read the run's result: {} is no longer a folder",
            work.display()
        ));
    }
    let repo = Repository::open_bare(git_dir)
        .with_context(|| format!("Could not open {}", git_dir.display()))?;
    repo.set_workdir(work, false)
        .with_context(|| format!("Could not use {} as the checkout", work.display()))?;
    Ok(repo)
}

fn base_text(
    repo: &Repository,
    odb: &git2::Odb<'_>,
    tree: &git2::Tree<'_>,
    path: &str,
    max_bytes: u64,
) -> anyhow::Result<FileText> {
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(FileText::Absent);
    };
    if entry.kind() != Some(git2::ObjectType::Blob) || entry.filemode() == 0o120000 {
        return Ok(FileText::Unread("not a regular file".into()));
    }
    let (size, _) = odb
        .read_header(entry.id())
        .with_context(|| format!("Could not read {path} in the base commit"))?;
    if size as u64 > max_bytes {
        return Ok(FileText::Unread(format!("larger than {max_bytes} bytes")));
    }
    let blob = repo
        .find_blob(entry.id())
        .with_context(|| format!("Could not read {path} in the base commit"))?;
    Ok(text_of(blob.content().to_vec()))
}

fn checkout_text(work: &Path, path: &str, max_bytes: u64) -> FileText {
    let mut at = work.to_path_buf();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return FileText::Absent;
        };
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() || (last && !meta.is_file()) || (!last && !meta.is_dir()) {
            return FileText::Unread("not a regular file".into());
        }
        if last && meta.len() > max_bytes {
            return FileText::Unread(format!("larger than {max_bytes} bytes"));
        }
    }
    match std::fs::read(&at) {
        Ok(bytes) => text_of(bytes),
        Err(e) => FileText::Unread(format!("could not be read: {e}")),
    }
}

fn text_of(bytes: Vec<u8>) -> FileText {
    match String::from_utf8(bytes) {
        Ok(text) => FileText::Text(text),
        Err(_) => FileText::Unread("not UTF-8 text".into()),
    }
}

fn diff_from_base(repo: &Repository, base: Oid) -> anyhow::Result<git2::Diff<'_>> {
    let tree = repo
        .find_commit(base)
        .and_then(|c| c.tree())
        .with_context(|| format!("Could not read the base commit {base}"))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true)
        .max_size(DIFF_TEXT_MAX_BYTES);
    repo.diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .context("Could not compare the checkout with the base")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_offered_once_then_refused() {
        let mut ask = credentials("x-access-token".into(), SecretString::from("s3cret"));
        let first = ask(
            "https://forge.example/o/r.git",
            None,
            CredentialType::USER_PASS_PLAINTEXT,
        );
        assert!(first.is_ok());
        let second = ask(
            "https://forge.example/o/r.git",
            None,
            CredentialType::USER_PASS_PLAINTEXT,
        )
        .err()
        .unwrap();
        assert!(second.message().contains("`x-access-token` were refused"));
        assert!(!second.message().contains("s3cret"));
    }

    #[test]
    fn credentials_refuse_kinds_they_cannot_give() {
        let mut ask = credentials("u".into(), SecretString::from("p"));
        let err = ask("ssh://h/r", None, CredentialType::SSH_KEY)
            .err()
            .unwrap();
        assert!(
            err.message().contains("asks for credentials"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn branch_names_are_short_ascii_slugs() {
        assert_eq!(
            branch_name(IssueNumber(12), "Fix: crash when the config file is empty!"),
            "planwright/12-fix-crash-when-the-config-file-is-empty"
        );
        assert_eq!(
            branch_name(IssueNumber(3), "Ünïcode — ☃"),
            "planwright/3-n-code"
        );
        assert_eq!(branch_name(IssueNumber(4), "☃☃"), "planwright/4");
        let long = branch_name(IssueNumber(5), &"word ".repeat(30));
        let slug = long.strip_prefix("planwright/5-").unwrap();
        assert!(slug.len() <= SLUG_MAX && !slug.ends_with('-'), "{slug}");
        assert!(git2::Reference::is_valid_name(&format!(
            "refs/heads/{long}"
        )));
    }

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
