//! The setup cache under `DATA_DIR/setup-cache/`: what a setup phase left in the checkout's
//! `environment.cache` paths and in HOME, kept under a key of everything that decides it
//! (the repository, environment, setup commands, allowlist, cache paths, key files and the
//! files the setup commands name), and copied back into later workspaces of the same
//! repository instead of running setup again. Each repository has a folder of its own,
//! named by its forge id (`repos/<scope>/<key>/`: `entry.json`, `lease`, `repo/`, `home/`),
//! so one repository's entries, HOME among them, are never found by another's runs, however
//! alike their settings. `tmp/` is where an entry is copied before one rename publishes it,
//! `locks/<key>.lock` held while it is.
//!
//! Everything copied in was written by sandboxed code: symlinks are copied as symlinks and
//! never followed, special files are left out, names come from directory listings only,
//! and the whole is capped. The workspaces copied from and into run nothing meanwhile (a
//! setup phase stores after its commands ended, a restore precedes them), so the checks
//! below are not raced.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use super::lease::flock;
use crate::ids::RepoScope;
use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};

/// Changes when the layout of an entry does, so old entries are never read as new ones.
/// (1 kept every repository's entries in one folder, `entries/`, which is removed.)
const LAYOUT: u32 = 2;

/// What each file, folder or link counts at least: the block it takes on disk, so that a
/// million empty files weigh what they cost.
const BLOCK: u64 = 4096;

/// The key of a setup phase: sha256 over the repository (`scope`), the environment it runs
/// in (`environment`: the image digest, or `host`), its commands, its allowlist, the cache
/// paths, and each key file's path and content as the checkout at `repo` holds it. A key
/// file that is a symlink counts by its target's name; it is never followed, nor a folder
/// symlink above it.
pub fn key(
    scope: &RepoScope,
    environment: &str,
    setup: &[String],
    network_allow: &[String],
    cache: &[String],
    repo: &Path,
    key_files: &[String],
) -> anyhow::Result<String> {
    let mut files = Vec::new();
    for name in key_files {
        // Under a symlink, the file would be the host's (`/proc/kcore`), read as root.
        if !under_real_dirs(repo, &inside(name)?) {
            return Err(anyhow!("The cache key file {name} is under a symlink"));
        }
        let path = repo.join(name);
        let meta = fs::symlink_metadata(&path)
            .with_context(|| format!("Could not read the cache key file {name}"))?;
        let content = if meta.file_type().is_symlink() {
            let target = fs::read_link(&path)?;
            format!("symlink:{}", target.display()).into_bytes()
        } else if meta.is_file() {
            fs::read(&path).with_context(|| format!("Could not read the cache key file {name}"))?
        } else {
            return Err(anyhow!("The cache key file {name} is not a file"));
        };
        files.push((name, hex::encode(Sha256::digest(&content))));
    }
    let decided = serde_json::json!({
        "layout": LAYOUT,
        "repository": scope.as_str(),
        "environment": environment,
        "setup": setup,
        "network_allow": network_allow,
        "cache": cache,
        "key_files": files,
    });
    Ok(hex::encode(Sha256::digest(decided.to_string().as_bytes())))
}

/// Files that programs read their setup from when a command runs them: a changed
/// `postinstall` in `package.json` or `deps:` rule in a `Makefile` changes what setup
/// does as surely as a changed lock file.
const MANIFESTS: &[(&[&str], &[&str])] = &[
    (&["make", "gmake"], &["Makefile", "makefile", "GNUmakefile"]),
    (
        &["npm", "npx", "pnpm", "yarn", "bun"],
        &["package.json", ".npmrc", ".yarnrc", ".yarnrc.yml"],
    ),
    (
        &["pip", "pip3", "uv", "poetry", "pdm", "pipenv", "tox", "nox"],
        &[
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "Pipfile",
            "tox.ini",
            "noxfile.py",
        ],
    ),
    (&["cargo"], &["Cargo.toml", ".cargo/config.toml"]),
    (&["go"], &["go.mod"]),
    (&["bundle", "gem"], &["Gemfile"]),
    (&["mvn", "mvnw"], &["pom.xml"]),
    (
        &["gradle", "gradlew"],
        &[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
        ],
    ),
    (&["composer"], &["composer.json"]),
];

/// The checkout's files the setup commands name, which key the cache besides the lock
/// files: each word of a command (or the value of a `--flag=value`) that is a regular
/// file in `repo` (`sh setup.sh`, `make -f deps.mk`, `./scripts/bootstrap`), and the
/// [`MANIFESTS`] of the programs they run. Scripts those scripts run in turn are not
/// followed: a repository names them in `cache_key`.
pub fn named_files(setup: &[String], repo: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut add = |name: &str| {
        let Ok(relative) = inside(name) else {
            return;
        };
        let is_file = under_real_dirs(repo, &relative)
            && fs::symlink_metadata(repo.join(&relative)).is_ok_and(|m| m.is_file());
        let name = relative.to_string_lossy().into_owned();
        if is_file && !found.contains(&name) {
            found.push(name);
        }
    };
    for command in setup {
        for word in shell_words(command) {
            let value = match word.split_once('=') {
                Some((flag, value)) if flag.starts_with('-') => value,
                _ => word.as_str(),
            };
            if !value.starts_with('-') {
                add(value);
            }
            let program = word.rsplit('/').next().unwrap_or_default();
            for (programs, manifests) in MANIFESTS {
                if programs.contains(&program) {
                    manifests.iter().for_each(|m| add(m));
                }
            }
        }
    }
    found.sort();
    found
}

/// The words of a shell command line as `sh` would split them, quotes removed and
/// operators (`&&`, `;`, `|`, redirections, parentheses) taken as separators; enough to
/// find the file names in it, not to run it.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let quoted: String = chars.by_ref().take_while(|&c| c != '\'').collect();
                word.get_or_insert_default().push_str(&quoted);
            }
            '"' => {
                let text = word.get_or_insert_default();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => text.extend(chars.next()),
                        c => text.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_default().extend(chars.next()),
            c if c.is_whitespace() || ";&|()<>`".contains(c) => words.extend(word.take()),
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    words
}

/// What an entry holds, written last before it is published.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Entry {
    /// The cache paths setup left (those it did not are not restored either).
    paths: Vec<String>,
    /// Bytes as [`BLOCK`] counts them.
    bytes: u64,
}

/// How a store ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Kept, with this many bytes.
    Kept(u64),
    /// Another run stored the key first.
    AlreadyThere,
    /// More than the cap: not kept.
    TooLarge,
}

pub struct SetupCache {
    dir: PathBuf,
    max: u64,
}

impl SetupCache {
    /// Opens (making) `DATA_DIR/setup-cache` with a cap of `max` bytes and removes what
    /// crashed stores and evictions left in `tmp/`.
    pub fn open(data_dir: &Path, max: u64) -> anyhow::Result<Self> {
        let dir = data_dir.join("setup-cache");
        // Entries of the first layout belong to no repository in particular: none may be
        // restored into any.
        match fs::remove_dir_all(dir.join("entries")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(e).context("Could not remove the setup cache's unscoped entries");
            }
            _ => {}
        }
        for sub in ["repos", "tmp", "locks"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path).with_context(|| {
                format!(
                    "Could not make the setup cache folder {}; check that DATA_DIR is writable",
                    path.display()
                )
            })?;
        }
        let cache = Self { dir, max };
        super::lease::sweep_tmp(&cache.dir);
        Ok(cache)
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join("locks").join(format!("{key}.lock"))
    }

    fn entry_dir(&self, scope: &RepoScope, key: &str) -> PathBuf {
        self.dir.join("repos").join(scope.folder()).join(key)
    }

    /// Whether `scope`'s entry under `key` is there (a kept baseline computed from it
    /// lives as long as it does).
    pub fn holds(&self, scope: &RepoScope, key: &str) -> bool {
        check_key(key).is_ok() && self.entry_dir(scope, key).join("entry.json").is_file()
    }

    /// Copies `scope`'s entry under `key` into the checkout `repo` and the `home` beside
    /// it, each cached path replacing what is there; `None` when the cache has no such
    /// entry. Returns the bytes restored. An error may leave the workspace partly
    /// restored: the caller runs setup then, as on a miss.
    pub fn restore(
        &self,
        scope: &RepoScope,
        key: &str,
        repo: &Path,
        home: &Path,
    ) -> anyhow::Result<Option<u64>> {
        check_key(key)?;
        let dir = self.entry_dir(scope, key);
        let lease_path = dir.join("lease");
        let lease = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lease_path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).context("Could not open a setup cache entry"),
        };
        // Waits only while an eviction moves the entry away.
        flock(&lease, libc::LOCK_SH)?;
        let still_there = match (lease.metadata(), fs::metadata(&lease_path)) {
            (Ok(held), Ok(now)) => held.ino() == now.ino() && held.dev() == now.dev(),
            _ => false,
        };
        if !still_there {
            return Ok(None);
        }
        let entry: Entry = serde_json::from_slice(&fs::read(dir.join("entry.json"))?)
            .context("A setup cache entry is damaged")?;
        for top in [repo, home] {
            real_dir(top)?;
        }
        let mut targets = Vec::new();
        for path in &entry.paths {
            let relative = inside(path)?;
            targets.push((dir.join("repo").join(&relative), prepare(repo, &relative)?));
        }
        for item in fs::read_dir(dir.join("home"))? {
            let name = item?.file_name();
            targets.push((
                dir.join("home").join(&name),
                prepare(home, Path::new(&name))?,
            ));
        }
        let mut counted = Counted::unbounded();
        for (from, to) in &targets {
            copy_tree(from, to, &mut counted)?;
        }
        let _ = lease.set_modified(SystemTime::now());
        Ok(Some(counted.bytes))
    }

    /// Keeps the checkout's `cache` paths and `home` under `scope`'s `key`: copied into
    /// `tmp/` and published by one rename, after evicting least recently used entries (of
    /// any repository) to make room. An entry larger than the cap is not kept.
    pub fn store(
        &self,
        scope: &RepoScope,
        key: &str,
        cache: &[String],
        repo: &Path,
        home: &Path,
    ) -> anyhow::Result<Stored> {
        check_key(key)?;
        let lock = fs::File::create(self.lock_path(key))?;
        // Two runs storing one key: the second waits, then finds the first's entry.
        flock(&lock, libc::LOCK_EX)?;
        let target = self.entry_dir(scope, key);
        if target.exists() {
            return Ok(Stored::AlreadyThere);
        }
        let staging = self
            .dir
            .join("tmp")
            .join(format!("{key}.{}", uuid::Uuid::new_v4().simple()));
        let result = self.fill(&staging, cache, repo, home);
        let stored = match result {
            Ok(Some(bytes)) => {
                self.evict(bytes, key);
                if let Some(folder) = target.parent() {
                    fs::create_dir_all(folder)?;
                }
                fs::rename(&staging, &target)
                    .with_context(|| format!("Could not publish {}", target.display()))
                    .map(|()| Stored::Kept(bytes))
            }
            Ok(None) => Ok(Stored::TooLarge),
            Err(e) => Err(e),
        };
        if !matches!(stored, Ok(Stored::Kept(_))) {
            let _ = fs::remove_dir_all(&staging);
        }
        stored
    }

    /// The entry's files in `staging`; `None` when they pass the cap.
    fn fill(
        &self,
        staging: &Path,
        cache: &[String],
        repo: &Path,
        home: &Path,
    ) -> anyhow::Result<Option<u64>> {
        for top in [repo, home] {
            real_dir(top)?;
        }
        fs::create_dir_all(staging.join("repo"))?;
        let mut counted = Counted {
            bytes: 0,
            max: self.max,
        };
        let mut paths = Vec::new();
        for path in cache {
            let relative = inside(path)?;
            // A path setup did not make, or one under a symlink it made, is not kept.
            if !under_real_dirs(repo, &relative) {
                continue;
            }
            let from = repo.join(&relative);
            if fs::symlink_metadata(&from).is_err() {
                continue;
            }
            let to = staging.join("repo").join(&relative);
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent)?;
            }
            match copy_tree(&from, &to, &mut counted) {
                Err(e) if e.kind() == io::ErrorKind::FileTooLarge => return Ok(None),
                other => other?,
            }
            paths.push(path.clone());
        }
        match copy_tree(home, &staging.join("home"), &mut counted) {
            Err(e) if e.kind() == io::ErrorKind::FileTooLarge => return Ok(None),
            other => other?,
        }
        let entry = Entry {
            paths,
            bytes: counted.bytes,
        };
        fs::write(staging.join("entry.json"), serde_json::to_vec(&entry)?)?;
        fs::write(staging.join("lease"), b"")?;
        Ok(Some(counted.bytes))
    }

    /// Evicts least recently used entries nobody restores until `incoming` more bytes fit
    /// under the cap; never `keep`.
    fn evict(&self, incoming: u64, keep: &str) {
        let size = |dir: &Path| {
            fs::read(dir.join("entry.json"))
                .ok()
                .and_then(|t| serde_json::from_slice::<Entry>(&t).ok())
                .map_or(0, |e| e.bytes)
        };
        let entries = super::lease::listing(&self.dir.join("repos"))
            .iter()
            .flat_map(|folder| super::lease::listing(folder))
            .collect();
        super::lease::evict_least_recent(
            entries,
            &self.dir.join("tmp"),
            "setup cache",
            (self.max, incoming),
            Some(keep),
            size,
        );
    }
}

/// Keys are hex digests; anything else must not become a path.
fn check_key(key: &str) -> anyhow::Result<()> {
    if key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(anyhow!("`{key}` is not a setup cache key"))
    }
}

/// A cache path as a relative path of normal components (the settings check it too).
fn inside(path: &str) -> anyhow::Result<PathBuf> {
    let relative: PathBuf = Path::new(path)
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    let normal = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if normal && relative.components().next().is_some() {
        Ok(relative)
    } else {
        Err(anyhow!("`{path}` is not a path inside the repository"))
    }
}

fn real_dir(path: &Path) -> anyhow::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(anyhow!("{} is not a folder", path.display()))
    }
}

/// Every folder from `top` down to `relative`'s parent is a real folder, not a symlink.
fn under_real_dirs(top: &Path, relative: &Path) -> bool {
    let mut at = top.to_path_buf();
    let Some(parent) = relative.parent() else {
        return true;
    };
    for part in parent.components() {
        at.push(part);
        if !fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
            return false;
        }
    }
    true
}

/// Where `relative` goes under `top`: its parents made real folders (whatever a run left
/// in their place is removed, never followed) and whatever is at the spot removed.
fn prepare(top: &Path, relative: &Path) -> anyhow::Result<PathBuf> {
    let mut at = top.to_path_buf();
    let parts: Vec<_> = relative.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() && !last => continue,
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&at)?,
            Ok(_) => fs::remove_file(&at)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        if !last {
            fs::create_dir(&at)?;
        }
    }
    Ok(at)
}

/// Bytes copied so far against a cap; passing it is `FileTooLarge`.
struct Counted {
    bytes: u64,
    max: u64,
}

impl Counted {
    fn unbounded() -> Self {
        Counted {
            bytes: 0,
            max: u64::MAX,
        }
    }

    fn add(&mut self, bytes: u64) -> io::Result<()> {
        self.bytes = self
            .bytes
            .saturating_add(bytes.div_ceil(BLOCK).max(1) * BLOCK);
        if self.bytes > self.max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "more than SETUP_CACHE_MAX",
            ));
        }
        Ok(())
    }
}

/// Copies `from` to `to` (which must not exist) without following a symlink anywhere:
/// folders, regular files (their content copied, never linked, so no inode is shared) and
/// symlinks as symlinks; sockets, pipes and devices are left out. Modes lose setuid,
/// setgid and sticky bits; modification times are kept.
fn copy_tree(from: &Path, to: &Path, counted: &mut Counted) -> io::Result<()> {
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    // Folders get their mode and time once their content is in.
    let mut folders: Vec<(PathBuf, fs::Metadata)> = Vec::new();
    while let Some((from, to)) = stack.pop() {
        let meta = fs::symlink_metadata(&from)?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&from)?;
            counted.add(target.as_os_str().len() as u64)?;
            symlink(&target, &to)?;
        } else if kind.is_dir() {
            counted.add(0)?;
            fs::create_dir(&to)?;
            for item in fs::read_dir(&from)? {
                let name = item?.file_name();
                stack.push((from.join(&name), to.join(&name)));
            }
            folders.push((to, meta));
        } else if kind.is_file() {
            counted.add(meta.len())?;
            copy_file(&from, &to, &meta)?;
        }
    }
    for (dir, meta) in folders.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(meta.mode() & 0o777 | 0o700))?;
        if let Ok(modified) = meta.modified() {
            let _ = fs::File::open(dir).and_then(|d| d.set_modified(modified));
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path, meta: &fs::Metadata) -> io::Result<()> {
    let mut source = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    if !source.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} changed while it was copied",
            from.display()
        )));
    }
    let mut target = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(meta.mode() & 0o777)
        .open(to)?;
    // File to file: copy_file_range, a reflink where the file system has them.
    io::copy(&mut source, &mut target)?;
    target.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o777))?;
    if let Ok(modified) = meta.modified() {
        target.set_modified(modified)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12";

    fn scope() -> RepoScope {
        RepoScope::new("github", "1296269")
    }

    struct Workspace {
        _dir: tempfile::TempDir,
        repo: PathBuf,
        home: PathBuf,
    }

    fn workspace() -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        let (repo, home) = (dir.path().join("repo"), dir.path().join("home"));
        fs::create_dir_all(&repo).unwrap();
        fs::create_dir_all(&home).unwrap();
        Workspace {
            _dir: dir,
            repo,
            home,
        }
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_key_changes_with_everything_that_decides_setup() {
        let ws = workspace();
        fs::write(ws.repo.join("Cargo.lock"), "a").unwrap();
        let (setup, allow, cache) = (
            paths(&["cargo fetch"]),
            paths(&["crates.io"]),
            paths(&["target"]),
        );
        let files = paths(&["Cargo.lock"]);
        let base = key(&scope(), "host", &setup, &allow, &cache, &ws.repo, &files).unwrap();
        assert_eq!(
            base,
            key(&scope(), "host", &setup, &allow, &cache, &ws.repo, &files).unwrap()
        );
        let others = [
            key(
                &scope(),
                "sha256:00",
                &setup,
                &allow,
                &cache,
                &ws.repo,
                &files,
            ),
            key(
                &scope(),
                "host",
                &paths(&["cargo build"]),
                &allow,
                &cache,
                &ws.repo,
                &files,
            ),
            key(&scope(), "host", &setup, &[], &cache, &ws.repo, &files),
            key(
                &scope(),
                "host",
                &setup,
                &allow,
                &paths(&["target", ".venv"]),
                &ws.repo,
                &files,
            ),
            key(&scope(), "host", &setup, &allow, &cache, &ws.repo, &[]),
            // The same id on the other forge, and another repository on this one.
            key(
                &RepoScope::new("gitlab", "1296269"),
                "host",
                &setup,
                &allow,
                &cache,
                &ws.repo,
                &files,
            ),
            key(
                &RepoScope::new("github", "1296270"),
                "host",
                &setup,
                &allow,
                &cache,
                &ws.repo,
                &files,
            ),
        ];
        for other in others {
            assert_ne!(other.unwrap(), base);
        }
        fs::write(ws.repo.join("Cargo.lock"), "b").unwrap();
        assert_ne!(
            key(&scope(), "host", &setup, &allow, &cache, &ws.repo, &files).unwrap(),
            base
        );
        assert!(
            key(
                &scope(),
                "host",
                &setup,
                &allow,
                &cache,
                &ws.repo,
                &paths(&["absent.lock"])
            )
            .is_err()
        );
        symlink("/proc", ws.repo.join("sub")).unwrap();
        let under_link = key(
            &scope(),
            "host",
            &setup,
            &allow,
            &cache,
            &ws.repo,
            &paths(&["sub/kcore"]),
        );
        assert!(under_link.is_err());
    }

    #[test]
    fn a_stored_entry_restores_as_copies_of_its_own() {
        let data = tempfile::tempdir().unwrap();
        let cache = SetupCache::open(data.path(), 1 << 30).unwrap();
        let from = workspace();
        fs::create_dir_all(from.repo.join("deps/lib")).unwrap();
        fs::write(from.repo.join("deps/lib/a.py"), "print(1)").unwrap();
        let setuid = fs::Permissions::from_mode(0o4755);
        fs::set_permissions(from.repo.join("deps/lib/a.py"), setuid).unwrap();
        symlink("lib/a.py", from.repo.join("deps/link")).unwrap();
        fs::write(from.home.join(".tool"), "configured").unwrap();
        let stored = cache.store(
            &scope(),
            KEY,
            &paths(&["./deps", "absent"]),
            &from.repo,
            &from.home,
        );
        assert!(matches!(stored.unwrap(), Stored::Kept(_)));
        assert_eq!(
            cache
                .store(&scope(), KEY, &paths(&["deps"]), &from.repo, &from.home)
                .unwrap(),
            Stored::AlreadyThere
        );

        let to = workspace();
        fs::create_dir_all(to.repo.join("deps/stale")).unwrap();
        let bytes = cache
            .restore(&scope(), KEY, &to.repo, &to.home)
            .unwrap()
            .unwrap();
        assert!(bytes > 0);
        assert!(!to.repo.join("deps/stale").exists(), "replaced, not merged");
        assert_eq!(
            fs::read_to_string(to.repo.join("deps/lib/a.py")).unwrap(),
            "print(1)"
        );
        assert_eq!(
            fs::read_link(to.repo.join("deps/link")).unwrap(),
            Path::new("lib/a.py")
        );
        assert_eq!(
            fs::read_to_string(to.home.join(".tool")).unwrap(),
            "configured"
        );
        // A later run writing into its copy leaves the cache as it was.
        let restored = fs::metadata(to.repo.join("deps/lib/a.py")).unwrap();
        let kept = fs::metadata(cache.entry_dir(&scope(), KEY).join("repo/deps/lib/a.py")).unwrap();
        assert_ne!(restored.ino(), kept.ino());
        assert_eq!(restored.mode() & 0o7777, 0o755, "no setuid bit");
        let other = "cd".repeat(32);
        assert_eq!(
            cache.restore(&scope(), &other, &to.repo, &to.home).unwrap(),
            None
        );
    }

    #[test]
    fn symlinks_are_kept_as_links_and_never_followed() {
        let data = tempfile::tempdir().unwrap();
        let cache = SetupCache::open(data.path(), 1 << 30).unwrap();
        let secret = data.path().join("secret");
        fs::write(&secret, "host secret").unwrap();
        let from = workspace();
        fs::create_dir_all(from.repo.join("deps")).unwrap();
        symlink(&secret, from.repo.join("deps/leak")).unwrap();
        // A cache path that is itself a link to a host folder.
        symlink(data.path(), from.repo.join("venv")).unwrap();
        cache
            .store(
                &scope(),
                KEY,
                &paths(&["deps", "venv"]),
                &from.repo,
                &from.home,
            )
            .unwrap();
        let kept = cache.entry_dir(&scope(), KEY).join("repo");
        assert!(
            fs::symlink_metadata(kept.join("deps/leak"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            fs::symlink_metadata(kept.join("venv"))
                .unwrap()
                .file_type()
                .is_symlink()
        );

        // The checkout restored into holds links where the cache writes: they are
        // replaced, nothing is written through them.
        let to = workspace();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), to.repo.join("deps")).unwrap();
        cache
            .restore(&scope(), KEY, &to.repo, &to.home)
            .unwrap()
            .unwrap();
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert_eq!(fs::read_link(to.repo.join("deps/leak")).unwrap(), secret);
        assert_eq!(fs::read_to_string(&secret).unwrap(), "host secret");
    }

    #[test]
    fn an_entry_over_the_cap_is_not_kept_and_old_ones_make_room() {
        let data = tempfile::tempdir().unwrap();
        let cache = SetupCache::open(data.path(), 64 * BLOCK).unwrap();
        let ws = workspace();
        fs::create_dir_all(ws.repo.join("deps")).unwrap();
        fs::write(ws.repo.join("deps/big"), vec![0u8; 80 * BLOCK as usize]).unwrap();
        let stored = cache
            .store(&scope(), KEY, &paths(&["deps"]), &ws.repo, &ws.home)
            .unwrap();
        assert_eq!(stored, Stored::TooLarge);
        assert_eq!(
            fs::read_dir(data.path().join("setup-cache/tmp"))
                .unwrap()
                .count(),
            0
        );
        assert_eq!(
            cache.restore(&scope(), KEY, &ws.repo, &ws.home).unwrap(),
            None
        );

        fs::write(ws.repo.join("deps/big"), vec![0u8; 40 * BLOCK as usize]).unwrap();
        let first = "01".repeat(32);
        let second = "02".repeat(32);
        assert!(matches!(
            cache
                .store(&scope(), &first, &paths(&["deps"]), &ws.repo, &ws.home)
                .unwrap(),
            Stored::Kept(_)
        ));
        // Another repository's entry makes room as well: the cap is the deployment's.
        let other = RepoScope::new("gitlab", "7");
        assert!(matches!(
            cache
                .store(&other, &second, &paths(&["deps"]), &ws.repo, &ws.home)
                .unwrap(),
            Stored::Kept(_)
        ));
        assert!(
            !cache.entry_dir(&scope(), &first).exists(),
            "the least recently used went"
        );
        assert!(cache.entry_dir(&other, &second).exists());
    }

    #[test]
    fn one_repositorys_entry_and_home_are_never_restored_into_anothers() {
        let data = tempfile::tempdir().unwrap();
        let cache = SetupCache::open(data.path(), 1 << 30).unwrap();
        let from = workspace();
        fs::create_dir_all(from.repo.join("deps")).unwrap();
        fs::write(from.repo.join("deps/marker"), "first").unwrap();
        fs::write(from.home.join(".npmrc"), "registry=http://first/").unwrap();
        let first = scope();
        cache
            .store(&first, KEY, &paths(&["deps"]), &from.repo, &from.home)
            .unwrap();
        assert!(cache.holds(&first, KEY));

        for other in [
            RepoScope::new("gitlab", "1296269"),
            RepoScope::new("github", "1296270"),
        ] {
            let to = workspace();
            assert_eq!(
                cache.restore(&other, KEY, &to.repo, &to.home).unwrap(),
                None
            );
            assert!(!cache.holds(&other, KEY));
            assert!(!to.home.join(".npmrc").exists());
            assert!(!to.repo.join("deps").exists());
        }
        // Each repository's entries are in a folder of their own.
        let folders = super::super::lease::listing(&data.path().join("setup-cache/repos"));
        assert_eq!(
            folders,
            [data.path().join("setup-cache/repos").join(first.folder())]
        );
    }

    #[test]
    fn entries_of_the_first_layout_are_removed_when_the_cache_opens() {
        let data = tempfile::tempdir().unwrap();
        let old = data.path().join("setup-cache/entries").join(KEY);
        fs::create_dir_all(old.join("home")).unwrap();
        fs::write(old.join("home/.npmrc"), "planted").unwrap();
        SetupCache::open(data.path(), 1 << 30).unwrap();
        assert!(!data.path().join("setup-cache/entries").exists());
    }

    #[test]
    fn the_files_setup_commands_name_and_the_manifests_of_their_programs_key_it() {
        let ws = workspace();
        for file in [
            "setup.sh",
            "deps.mk",
            "scripts/bootstrap",
            "package.json",
            "Makefile",
            "reqs/dev.txt",
            "requirements.txt",
        ] {
            let path = ws.repo.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "x").unwrap();
        }
        fs::create_dir_all(ws.repo.join("deps")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.sh"), "x").unwrap();
        symlink(outside.path(), ws.repo.join("linked")).unwrap();
        let setup = paths(&[
            "sh setup.sh && make -f deps.mk deps",
            "./scripts/bootstrap --quiet; npm ci",
            "pip install --requirement=reqs/dev.txt 'requirements.txt' > log.txt",
            "sh linked/secret.sh /etc/passwd ../outside absent.sh deps",
        ]);
        assert_eq!(
            named_files(&setup, &ws.repo),
            [
                "Makefile",
                "deps.mk",
                "package.json",
                "reqs/dev.txt",
                "requirements.txt",
                "scripts/bootstrap",
                "setup.sh",
            ]
        );
        assert_eq!(
            shell_words(r#"a "b c"'d'\ e|f>g"#),
            ["a", "b cd e", "f", "g"]
        );
    }
}
