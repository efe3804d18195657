//! Mirror cache and per-run workspaces against real repositories built with the `git`
//! command line in temporary folders; the upstream is a local bare repository.

use crate::support;

use support::git_http::git;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use planwright::forge::GitRemote;
use planwright::git::{
    Author, ChangeKind, ChangedFile, MirrorCache, MirrorKey, Outcome, WorkspaceError,
    WorkspaceRequest, Workspaces,
};
use planwright::ids::{CommitSha, IssueNumber, RepoName};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

/// A bare upstream repository and a clone to make commits in.
struct Upstream {
    _dir: tempfile::TempDir,
    bare: PathBuf,
    work: PathBuf,
}

impl Upstream {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("up.git");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", "up.git"],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        Upstream {
            _dir: dir,
            bare,
            work,
        }
    }

    /// Writes the files, commits them on the current branch and pushes it; returns the SHA.
    fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let full = self.work.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", message]);
        let branch = git(&self.work, &["rev-parse", "--abbrev-ref", "HEAD"]);
        git(&self.work, &["push", "-q", "origin", &branch]);
        git(&self.work, &["rev-parse", "HEAD"])
    }

    fn remote(&self) -> GitRemote {
        GitRemote {
            url: self.bare.display().to_string(),
            username: "x-access-token".into(),
            password: SecretString::from("unused-for-a-local-path"),
        }
    }
}

struct Setup {
    data: tempfile::TempDir,
    workspaces: Workspaces,
    key: MirrorKey,
}

fn setup(owner: Option<(u32, u32)>) -> Setup {
    setup_in(owner, &std::env::temp_dir())
}

fn setup_in(owner: Option<(u32, u32)>, parent: &Path) -> Setup {
    let data = tempfile::tempdir_in(parent).unwrap();
    let cache = Arc::new(MirrorCache::new(data.path()));
    let workspaces = Workspaces::new(data.path(), cache, owner);
    let key = MirrorKey::new("github", RepoName::parse("Octo/Repo").unwrap()).unwrap();
    Setup {
        data,
        workspaces,
        key,
    }
}

fn request(setup: &Setup, upstream: &Upstream, base: &str) -> WorkspaceRequest {
    WorkspaceRequest {
        mirror: setup.key.clone(),
        remote: upstream.remote(),
        base: CommitSha(base.to_owned()),
        issue: IssueNumber(7),
        title: "Fix the parser's crash on empty input".into(),
        size: None,
    }
}

/// Every file under `dir` with its content, hashed: any write shows.
fn hash_tree(dir: &Path) -> String {
    let mut paths = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else {
            paths.push(p);
        }
    }
    paths.sort();
    let mut hasher = Sha256::new();
    for p in paths {
        hasher.update(p.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(&p).unwrap_or_default());
    }
    hex::encode(hasher.finalize())
}

fn branches(mirror: &Path) -> Vec<String> {
    let out = git(
        mirror,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads",
        ],
    );
    out.lines().map(str::to_owned).collect()
}

fn packs(mirror: &Path) -> Vec<PathBuf> {
    let mut packs: Vec<PathBuf> = std::fs::read_dir(mirror.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect();
    packs.sort();
    packs
}

#[tokio::test]
async fn mirror_is_created_then_fetched_incrementally_with_pruning() {
    let up = Upstream::new();
    let first = up.commit(&[("README.md", "hello\n")], "first");
    git(&up.work, &["checkout", "-q", "-b", "feature"]);
    let feature = up.commit(&[("feature.txt", "wip\n")], "feature");
    git(&up.work, &["checkout", "-q", "main"]);

    let s = setup(None);
    let cache = s.workspaces.cache();
    cache.update(&s.key, &up.remote()).await.unwrap();
    let mirror = cache.path(&s.key);
    assert_eq!(mirror, s.data.path().join("mirrors/github/octo/repo.git"));
    assert_eq!(
        branches(&mirror),
        vec![
            format!("refs/heads/feature {feature}"),
            format!("refs/heads/main {first}"),
        ]
    );
    assert_eq!(cache.fetch_count(), 1);
    let packs_before = packs(&mirror);
    assert_eq!(packs_before.len(), 1, "one pack after the first fetch");

    let second = up.commit(&[("README.md", "hello again\n")], "second");
    git(&up.work, &["push", "-q", "origin", "--delete", "feature"]);
    cache.update(&s.key, &up.remote()).await.unwrap();
    assert_eq!(branches(&mirror), vec![format!("refs/heads/main {second}")]);
    assert_eq!(cache.fetch_count(), 2);
    // Incremental: the first pack is untouched and the new objects came as a second one.
    let packs_after = packs(&mirror);
    assert_eq!(packs_after.len(), 2, "{packs_after:?}");
    assert!(packs_after.contains(&packs_before[0]));
    // The mirror keeps no remote (and so no URL) in its configuration.
    let config = std::fs::read_to_string(mirror.join("config")).unwrap();
    assert!(!config.contains("up.git"), "{config}");
}

#[tokio::test]
async fn concurrent_workspaces_on_a_cold_mirror_fetch_once() {
    let up = Upstream::new();
    let base = up.commit(&[("src/lib.rs", "pub fn f() {}\n")], "first");
    let s = setup(None);
    let req = request(&s, &up, &base);
    let (a, b) = tokio::join!(s.workspaces.create(&req), s.workspaces.create(&req));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(s.workspaces.cache().fetch_count(), 1);
    assert_ne!(a.root(), b.root());
    for ws in [&a, &b] {
        assert_eq!(git(&ws.repo(), &["rev-parse", "HEAD"]), base);
    }
    // A warm mirror that already has the commit is not fetched again.
    let c = s.workspaces.create(&req).await.unwrap();
    assert_eq!(s.workspaces.cache().fetch_count(), 1);
    for ws in [a, b, c] {
        ws.finish(Outcome::Succeeded).await.unwrap();
    }
}

#[tokio::test]
async fn workspace_is_at_the_base_on_the_run_branch_and_leaves_the_mirror_alone() {
    let up = Upstream::new();
    up.commit(&[("src/lib.rs", "pub fn f() {}\n")], "first");
    up.commit(&[("src/lib.rs", "pub fn f() -> u8 { 1 }\n")], "second");
    let base = up.commit(&[("docs/guide.md", "# Guide\n")], "third");
    up.commit(&[("docs/guide.md", "# Guide v2\n")], "after the base");
    let s = setup(None);
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();

    let repo = ws.repo();
    assert_eq!(ws.root().join("repo"), repo);
    assert_eq!(ws.home(), ws.root().join("home"));
    assert!(ws.home().is_dir());
    assert_eq!(
        ws.env(),
        vec![("HOME".to_owned(), ws.home().display().to_string())]
    );
    assert_eq!(
        ws.branch(),
        "planwright/7-fix-the-parser-s-crash-on-empty-input"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), base);
    assert_eq!(
        git(&repo, &["symbolic-ref", "HEAD"]),
        format!("refs/heads/{}", ws.branch())
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["log", "--format=%s"]), "third\nsecond\nfirst");
    assert_eq!(
        std::fs::read_to_string(repo.join("docs/guide.md")).unwrap(),
        "# Guide\n"
    );
    // History is shared, not copied: the checkout's object store is empty.
    assert_eq!(git(&repo, &["count-objects"]), "0 objects, 0 kilobytes");
    let alternates = std::fs::read_to_string(repo.join(".git/objects/info/alternates")).unwrap();
    assert_eq!(alternates.trim(), ws.shared_objects().display().to_string());
    assert_eq!(git(&repo, &["remote"]), "");
    let config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    assert!(
        !config.contains("up.git") && !config.contains("url"),
        "{config}"
    );
    // No hooks from the host's templates: libgit2's built-in template has only a sample.
    for hook in std::fs::read_dir(repo.join(".git/hooks")).unwrap() {
        let name = hook.unwrap().file_name();
        assert!(name.to_string_lossy().ends_with(".sample"), "{name:?}");
    }

    let mirror = s.workspaces.cache().path(&s.key);
    let before = hash_tree(&mirror);
    std::fs::write(repo.join("src/new.rs"), "pub fn g() {}\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "work in the run"]);
    git(&repo, &["gc", "-q"]);
    assert_eq!(git(&repo, &["log", "-1", "--format=%s"]), "work in the run");
    assert_eq!(hash_tree(&mirror), before, "the mirror changed");
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn the_result_is_read_and_committed_from_the_checkout() {
    let up = Upstream::new();
    let base = up.commit(
        &[
            ("src/lib.rs", "pub fn f() {}\n"),
            ("src/old.rs", "// old\n"),
            (".gitignore", "target/\n"),
        ],
        "first",
    );
    let s = setup(None);
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    let repo = ws.repo();
    assert!(ws.changed_files().await.unwrap().is_empty());
    assert_eq!(ws.diff().await.unwrap(), "");

    std::fs::write(repo.join("src/lib.rs"), "pub fn f() -> u8 { 2 }\n").unwrap();
    std::fs::remove_file(repo.join("src/old.rs")).unwrap();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(repo.join("tests/t.rs"), "#[test] fn t() {}\n").unwrap();
    std::fs::create_dir_all(repo.join("target")).unwrap();
    std::fs::write(repo.join("target/junk"), "build output").unwrap();
    std::fs::write(ws.home().join(".bash_history"), "ls\n").unwrap();
    // The run's own commits and index do not change what is read back.
    git(&repo, &["add", "src/lib.rs"]);
    git(&repo, &["commit", "-q", "-m", "partial"]);

    let mut changed = ws.changed_files().await.unwrap();
    changed.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        changed,
        vec![
            ChangedFile {
                path: "src/lib.rs".into(),
                change: ChangeKind::Modified
            },
            ChangedFile {
                path: "src/old.rs".into(),
                change: ChangeKind::Deleted
            },
            ChangedFile {
                path: "tests/t.rs".into(),
                change: ChangeKind::Added
            },
        ]
    );
    let diff = ws.diff().await.unwrap();
    assert!(
        diff.contains("-pub fn f() {}\n+pub fn f() -> u8 { 2 }\n"),
        "{diff}"
    );
    assert!(diff.contains("+#[test] fn t() {}"), "{diff}");
    assert!(
        diff.contains("diff --git a/src/old.rs b/src/old.rs"),
        "{diff}"
    );

    let author = Author {
        name: "planwright".into(),
        email: "bot@planwright.example".into(),
    };
    let sha = ws.commit("Fix f\n\nCloses #7", &author).await.unwrap();
    let git_dir = ws.git_dir();
    assert_eq!(
        git(
            &git_dir,
            &["rev-parse", &format!("refs/heads/{}", ws.branch())]
        ),
        sha.as_str()
    );
    assert_eq!(
        git(&git_dir, &["rev-parse", &format!("{}^", sha.as_str())]),
        base
    );
    assert_eq!(
        git(
            &git_dir,
            &["log", "-1", "--format=%an <%ae>%n%B", sha.as_str()]
        ),
        "planwright <bot@planwright.example>\nFix f\n\nCloses #7"
    );
    assert_eq!(
        git(&git_dir, &["diff", "--name-status", &base, sha.as_str()]),
        "M\tsrc/lib.rs\nD\tsrc/old.rs\nA\ttests/t.rs"
    );
    // Nothing new: the tip stays.
    assert_eq!(ws.commit("again", &author).await.unwrap(), sha);
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn the_result_is_refused_when_the_checkout_became_a_symlink() {
    let up = Upstream::new();
    let base = up.commit(&[("a.txt", "a\n")], "first");
    let s = setup(None);
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("secret"), "host file").unwrap();
    std::fs::rename(ws.repo(), ws.root().join("moved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), ws.repo()).unwrap();
    let err = ws.changed_files().await.unwrap_err().to_string();
    assert!(err.contains("is no longer a folder"), "{err}");
    let author = Author {
        name: "p".into(),
        email: "p@example.com".into(),
    };
    assert!(ws.commit("m", &author).await.is_err());
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn success_removes_the_workspace_and_failure_keeps_it_until_the_sweep() {
    let up = Upstream::new();
    let base = up.commit(&[("a.txt", "a\n")], "first");
    let s = setup(None);
    let req = request(&s, &up, &base);

    let ok = s.workspaces.create(&req).await.unwrap();
    let ok_dir = ok.root().parent().unwrap().to_path_buf();
    assert!(ok_dir.is_dir());
    ok.finish(Outcome::Succeeded).await.unwrap();
    assert!(!ok_dir.exists());

    let failed = s.workspaces.create(&req).await.unwrap();
    let failed_dir = failed.root().parent().unwrap().to_path_buf();
    failed.finish(Outcome::Failed).await.unwrap();
    let dropped = s.workspaces.create(&req).await.unwrap();
    let dropped_dir = dropped.root().parent().unwrap().to_path_buf();
    drop(dropped);
    let running = s.workspaces.create(&req).await.unwrap();

    assert_eq!(
        s.workspaces.sweep(Duration::from_secs(3600)).await.unwrap(),
        0
    );
    assert!(failed_dir.join("run/repo/a.txt").is_file());
    assert!(dropped_dir.join("run/repo/a.txt").is_file());

    assert_eq!(s.workspaces.sweep(Duration::ZERO).await.unwrap(), 2);
    assert!(!failed_dir.exists());
    assert!(!dropped_dir.exists());
    assert!(
        running.repo().join("a.txt").is_file(),
        "a running workspace was swept"
    );
    running.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn a_symlink_pointing_outside_stays_a_symlink_and_files_go_to_the_sandbox_user() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("host-file");
    std::fs::write(&target, "not the run's").unwrap();
    let up = Upstream::new();
    std::fs::create_dir_all(up.work.join("links")).unwrap();
    std::os::unix::fs::symlink(&target, up.work.join("links/escape")).unwrap();
    std::os::unix::fs::symlink("../../../../..", up.work.join("links/up")).unwrap();
    let base = up.commit(&[("src/main.rs", "fn main() {}\n")], "links");

    // As root the run is handed to another user, as `Bwrap` does; otherwise to ourselves.
    // SAFETY: getters without preconditions.
    let (me, my_group) = unsafe { (libc::geteuid(), libc::getegid()) };
    let owner = if me == 0 {
        (65534, 65534)
    } else {
        (me, my_group)
    };
    let s = setup(Some(owner));
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    let repo = ws.repo();

    let escape = repo.join("links/escape");
    assert!(
        std::fs::symlink_metadata(&escape)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_link(&escape).unwrap(), target);
    let up_link = repo.join("links/up");
    assert!(
        std::fs::symlink_metadata(&up_link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(&up_link).unwrap(),
        Path::new("../../../../..")
    );

    use std::os::unix::fs::MetadataExt;
    let target_meta = std::fs::metadata(&target).unwrap();
    assert_eq!((target_meta.uid(), target_meta.gid()), (me, my_group));
    let mut stack = vec![ws.root()];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!((meta.uid(), meta.gid()), owner, "{}", p.display());
        seen += 1;
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert!(seen > 10, "only {seen} entries");
    // planwright's own git dir and the mirror stay planwright's.
    let own = std::fs::metadata(ws.git_dir().join("index")).unwrap();
    assert_eq!(own.uid(), me);
    let mirror = std::fs::metadata(s.workspaces.cache().path(&s.key).join("config")).unwrap();
    assert_eq!(mirror.uid(), me);
    // Each index carries the stat data after the hand-over, with the owner as its reader
    // sees it: planwright on the host, the run as bubblewrap's user 1000 inside.
    let ids = |path: PathBuf| {
        let index = git2::Index::open(&path).unwrap();
        let ids: std::collections::BTreeSet<(u32, u32)> =
            index.iter().map(|e| (e.uid, e.gid)).collect();
        assert_eq!(index.len(), 3);
        ids.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(ids(ws.git_dir().join("index")), vec![owner]);
    assert_eq!(ids(repo.join(".git/index")), vec![(1000, 1000)]);
    assert!(ws.changed_files().await.unwrap().is_empty());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn unknown_or_malformed_commits_are_clear_errors() {
    let up = Upstream::new();
    up.commit(&[("a.txt", "a\n")], "first");
    let s = setup(None);
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = s
        .workspaces
        .create(&request(&s, &up, missing))
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::BadCommit { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot prepare a workspace of octo/repo at {missing}: no such commit in the repository"
        )
    );

    let err = s
        .workspaces
        .create(&request(&s, &up, "0123abc"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Cannot prepare a workspace of octo/repo at 0123abc: a full 40-character commit SHA is needed"
    );
    // A tree is not a commit.
    let tree = git(&up.work, &["rev-parse", "HEAD^{tree}"]);
    let err = s
        .workspaces
        .create(&request(&s, &up, &tree))
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::BadCommit { .. }), "{err:?}");
    // Nothing is left behind by the failed attempts.
    let left = std::fs::read_dir(s.data.path().join("workspaces"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn an_unreadable_remote_is_a_clear_error_and_leaves_no_mirror() {
    let s = setup(None);
    let gone = tempfile::tempdir().unwrap().path().join("nowhere.git");
    let remote = GitRemote {
        url: gone.display().to_string(),
        username: "u".into(),
        password: SecretString::from("p"),
    };
    let err = s
        .workspaces
        .cache()
        .update(&s.key, &remote)
        .await
        .unwrap_err();
    match &err {
        WorkspaceError::Fetch { refused, .. } => assert!(!refused),
        other => panic!("expected a fetch error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "Could not fetch octo/repo from {}: ",
            gone.display()
        )),
        "{text}"
    );
    let parent = s.workspaces.cache().path(&s.key);
    assert!(!parent.exists());
    assert_eq!(
        std::fs::read_dir(parent.parent().unwrap())
            .unwrap()
            .filter(|e| !e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".lock"))
            .count(),
        0,
        "a temporary mirror was left behind"
    );
}

#[tokio::test]
async fn a_url_carrying_a_password_is_refused_without_repeating_it() {
    let s = setup(None);
    let remote = GitRemote {
        url: "https://x-access-token:ghs_leaked@forge.example/octo/repo.git".into(),
        username: "x-access-token".into(),
        password: SecretString::from("ghs_leaked"),
    };
    let err = s
        .workspaces
        .cache()
        .update(&s.key, &remote)
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains("ghs_leaked"), "{text}");
    assert!(
        text.contains("credentials must not be part of the URL"),
        "{text}"
    );
    assert_eq!(s.workspaces.cache().fetch_count(), 0);
}

#[tokio::test]
async fn unused_mirrors_are_pruned_and_used_ones_kept() {
    let up = Upstream::new();
    let base = up.commit(&[("a.txt", "a\n")], "first");
    let s = setup(None);
    let other = MirrorKey::new("gitlab", RepoName::parse("group/sub/other").unwrap()).unwrap();
    let cache = s.workspaces.cache();
    cache.update(&other, &up.remote()).await.unwrap();
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    ws.finish(Outcome::Succeeded).await.unwrap();

    assert!(
        cache
            .prune_unused(Duration::from_secs(3600))
            .await
            .unwrap()
            .is_empty()
    );
    // Age the mirror nothing was checked out from.
    let old = std::time::SystemTime::now() - Duration::from_secs(10 * 86400);
    let other_path = cache.path(&other);
    for entry in ["planwright-used", "planwright-fetched", ""] {
        let p = other_path.join(entry);
        if p.exists() {
            std::fs::File::open(&p).unwrap().set_modified(old).unwrap();
        }
    }
    let removed = cache
        .prune_unused(Duration::from_secs(86400))
        .await
        .unwrap();
    assert_eq!(removed, vec![other_path.clone()]);
    assert!(!other_path.exists());
    assert!(cache.path(&s.key).exists());
    // gc leaves a usable mirror behind.
    cache.gc().await.unwrap();
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    assert_eq!(git(&ws.repo(), &["log", "--format=%s"]), "first");
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn git_inside_the_sandbox_sees_a_clean_checkout_and_can_commit() {
    use planwright::sandbox::{Bwrap, Sandbox};
    let up = Upstream::new();
    up.commit(&[("src/lib.rs", "pub fn f() {}\n")], "first");
    let base = up.commit(&[("README.md", "# r\n")], "second");
    // The sandbox has its own /tmp, so DATA_DIR goes elsewhere; it is hidden as in
    // planwright's own sandbox, and the checkout still reads its history from the mirror
    // (shown read-only by `Workspace::command`).
    let s = setup_in(
        Workspaces::default_owner(),
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(s.data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    std::fs::write(s.data.path().join("planwright.db"), "secret rows").unwrap();
    let sandbox = Bwrap::new(vec![s.data.path().to_path_buf()]).unwrap();
    let run = |script: &str| {
        let mut cmd = ws.command(vec!["sh".into(), "-c".into(), script.into()]);
        cmd.env.push(("GIT_CONFIG_NOSYSTEM".into(), "1".into()));
        let sandbox = &sandbox;
        async move { sandbox.run(&cmd).await.unwrap() }
    };

    // The rest of DATA_DIR stays hidden, and the mirror cannot be written.
    let db = s.data.path().join("planwright.db");
    let out = run(&format!(
        "cat {} 2>/dev/null; touch {}/x 2>/dev/null && echo wrote; true",
        support::sh_word(&db),
        support::sh_word(ws.shared_objects())
    ))
    .await;
    assert_eq!(out.stdout.text(), "", "{}", out.stderr.text());
    let mut showing_data_dir = ws.command(vec!["true".into()]);
    showing_data_dir.read_only = vec![s.data.path().to_path_buf()];
    assert!(sandbox.run(&showing_data_dir).await.is_err());

    let index = ws.repo().join(".git/index");
    let before = std::fs::read(&index).unwrap();
    let out = run("git status --porcelain && echo \"home=$HOME\" && git log --format=%s").await;
    assert!(out.exit.success(), "{}", out.stderr.text());
    assert_eq!(
        out.stdout.text(),
        format!("home={}\nsecond\nfirst\n", ws.home().display())
    );
    // The index already matched what git sees inside: nothing to refresh and write back.
    assert_eq!(
        std::fs::read(&index).unwrap(),
        before,
        "git status rewrote the index"
    );

    let out = run("echo new > new.txt && git add new.txt && \
         git -c user.name=run -c user.email=run@example.com commit -q -m inside && \
         git log -1 --format=%s && git status --porcelain")
    .await;
    assert!(out.exit.success(), "{}", out.stderr.text());
    assert_eq!(out.stdout.text(), "inside\n");
    let changed = ws.changed_files().await.unwrap();
    assert_eq!(
        changed,
        vec![ChangedFile {
            path: "new.txt".into(),
            change: ChangeKind::Added
        }]
    );
    ws.finish(Outcome::Succeeded).await.unwrap();
}

#[tokio::test]
async fn a_result_of_huge_files_is_measured_and_its_diff_stays_within_its_bound() {
    let up = Upstream::new();
    let base = up.commit(&[("src/lib.rs", "pub fn f() {}\n")], "first");
    let s = setup(None);
    let ws = s.workspaces.create(&request(&s, &up, &base)).await.unwrap();
    let repo = ws.repo();
    // Many short lines (cut between lines) and one file too large to diff as text.
    let lines: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(repo.join("src/many.txt"), &lines).unwrap();
    let huge = "x".repeat(5 << 20);
    std::fs::write(repo.join("huge.txt"), &huge).unwrap();

    let bound = 64 << 10;
    let diff = ws.diff_within(bound).await.unwrap();
    let note = "[planwright: the diff is cut here, at 65536 bytes]";
    assert!(
        diff.ends_with(&format!("\n{note}\n")),
        "{}",
        &diff[diff.len() - 200..]
    );
    assert!(diff.len() <= bound + note.len() + 2, "{} bytes", diff.len());
    assert!(diff.contains("+line 0\n"));

    // Whole, the many lines are there and the huge file is not loaded as text.
    let whole = ws.diff().await.unwrap();
    assert!(whole.contains("+line 39999\n"));
    assert!(
        !whole.contains("xxxxxxxx"),
        "the huge file was diffed as text"
    );
    assert!(whole.len() < lines.len() * 2, "{} bytes", whole.len());

    let bytes = ws.changed_bytes().await.unwrap();
    assert_eq!(bytes, (lines.len() + huge.len()) as u64);
}

/// A forge that takes the connection and never answers is given up on after the fetch's
/// time limit, with a clear error and no mirror left behind; git's own low-speed limit
/// alone would wait minutes, holding the mirror's lock.
#[tokio::test]
async fn a_forge_that_never_answers_is_given_up_on() {
    // Connections queue in the listener's backlog and are never read.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let remote = GitRemote {
        url: format!("http://{}/octo/repo.git", listener.local_addr().unwrap()),
        username: "x-access-token".into(),
        password: SecretString::from("ghs_silent"),
    };
    let data = tempfile::tempdir().unwrap();
    let cache = MirrorCache::new(data.path()).with_fetch_timeout(Duration::from_secs(1));
    let key = MirrorKey::new("github", RepoName::parse("octo/repo").unwrap()).unwrap();
    let err = cache.update(&key, &remote).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the fetch took longer than 1 seconds and was stopped"),
        "{text}"
    );
    assert!(!matches!(err, WorkspaceError::Fetch { refused: true, .. }));
    assert!(!cache.path(&key).exists());
    drop(listener);
}

/// A repository named in `MIRROR_PARTIAL` is mirrored without file contents: its history
/// arrives as commits and trees, and a workspace's commit brings its own files (one
/// request), so old versions never reach the disk until a workspace needs them. Updates
/// and `gc` keep working on it.
#[tokio::test]
async fn a_partial_mirror_holds_history_without_contents_and_fetches_a_workspaces_files() {
    let up = Upstream::new();
    // What GitHub and GitLab allow: filtered fetches, and fetching an object by its id.
    git(&up.bare, &["config", "uploadpack.allowFilter", "true"]);
    git(
        &up.bare,
        &["config", "uploadpack.allowAnySHA1InWant", "true"],
    );
    let first = up.commit(&[("a.txt", "one\n"), ("src/b.txt", "bee one\n")], "first");
    let second = up.commit(&[("a.txt", "two\n")], "second");

    let data = tempfile::tempdir().unwrap();
    let cache = Arc::new(
        MirrorCache::new(data.path())
            .with_partial(&["other/x".to_owned(), "octo/*".to_owned()])
            .unwrap(),
    );
    let workspaces = Workspaces::new(data.path(), cache.clone(), None);
    let key = MirrorKey::new("github", RepoName::parse("octo/repo").unwrap()).unwrap();
    let request = |base: &str| WorkspaceRequest {
        mirror: key.clone(),
        remote: up.remote(),
        base: CommitSha(base.to_owned()),
        issue: IssueNumber(7),
        title: "partial".into(),
        size: None,
    };
    let mirror = cache.path(&key);
    let missing = || {
        let listed = git(
            &mirror,
            &["rev-list", "--objects", "--missing=print", "--all"],
        );
        let mut missing: Vec<String> = listed
            .lines()
            .filter_map(|l| l.strip_prefix('?'))
            .map(str::to_owned)
            .collect();
        missing.sort();
        missing
    };
    let blob =
        |commit: &str, path: &str| git(&up.bare, &["rev-parse", &format!("{commit}:{path}")]);

    let at_second = workspaces.create(&request(&second)).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(at_second.repo().join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(
        std::fs::read_to_string(at_second.repo().join("src/b.txt")).unwrap(),
        "bee one\n"
    );
    // Only the first commit's own version of a.txt is not here: history without contents.
    assert_eq!(missing(), vec![blob(&first, "a.txt")]);
    // The run's git sees a clean checkout and its whole history of commits.
    assert_eq!(git(&at_second.repo(), &["status", "--porcelain"]), "");
    assert_eq!(
        git(&at_second.repo(), &["log", "--format=%s"]),
        "second\nfirst"
    );

    let at_first = workspaces.create(&request(&first)).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(at_first.repo().join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(missing().is_empty());

    // An update brings new history the same way, and gc keeps the mirror whole.
    let third = up.commit(&[("a.txt", "three\n"), ("c.txt", "see\n")], "third");
    cache.update(&key, &up.remote()).await.unwrap();
    assert_eq!(missing(), {
        let mut m = vec![blob(&third, "a.txt"), blob(&third, "c.txt")];
        m.sort();
        m
    });
    cache.gc().await.unwrap();
    let at_third = workspaces.create(&request(&third)).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(at_third.repo().join("c.txt")).unwrap(),
        "see\n"
    );
    assert!(missing().is_empty());
    // The promisor remote's URL is kept; no credential is.
    let config = std::fs::read_to_string(mirror.join("config")).unwrap();
    assert!(config.contains("promisor = true"), "{config}");
    assert!(!config.contains("unused-for-a-local-path"), "{config}");
    for ws in [at_first, at_second, at_third] {
        ws.finish(Outcome::Succeeded).await.unwrap();
    }
}

/// `MIRROR_PARTIAL_ABOVE`: a repository the forge reports larger than the setting gets a
/// partial mirror, one at or below it a whole one; the size is asked for only while there
/// is no mirror yet and no pattern decides, and a size the forge does not give makes a
/// whole mirror.
#[tokio::test]
async fn a_repository_larger_than_the_size_setting_gets_a_partial_mirror() {
    let up = Upstream::new();
    git(&up.bare, &["config", "uploadpack.allowFilter", "true"]);
    git(
        &up.bare,
        &["config", "uploadpack.allowAnySHA1InWant", "true"],
    );
    up.commit(&[("a.txt", "one\n")], "first");
    let second = up.commit(&[("a.txt", "two\n")], "second");
    let data = tempfile::tempdir().unwrap();
    let cache = Arc::new(
        MirrorCache::new(data.path())
            .with_partial(&["named/*".to_owned()])
            .unwrap()
            .with_partial_above(Some(1000)),
    );
    let workspaces = Workspaces::new(data.path(), cache.clone(), None);
    let promisor = |key: &MirrorKey| {
        std::fs::read_to_string(cache.path(key).join("config"))
            .unwrap()
            .contains("promisor = true")
    };
    let named = MirrorKey::new("github", RepoName::parse("named/repo").unwrap()).unwrap();
    assert!(!cache.needs_size(&named), "a pattern decides");
    for (name, size, partial) in [
        ("octo/large", Some(1001), true),
        ("octo/small", Some(1000), false),
        ("octo/unsaid", None, false),
    ] {
        let key = MirrorKey::new("github", RepoName::parse(name).unwrap()).unwrap();
        assert!(cache.needs_size(&key), "{name}: no mirror yet");
        let ws = workspaces
            .create(&WorkspaceRequest {
                mirror: key.clone(),
                remote: up.remote(),
                base: CommitSha(second.clone()),
                issue: IssueNumber(7),
                title: "sized".into(),
                size,
            })
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.repo().join("a.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(promisor(&key), partial, "{name}");
        assert!(!cache.needs_size(&key), "{name}: the mirror is made");
        let missing = git(
            &cache.path(&key),
            &["rev-list", "--objects", "--missing=print", "--all"],
        );
        let old = missing.lines().filter(|l| l.starts_with('?')).count();
        assert_eq!(old, usize::from(partial), "{name}: {missing}");
        ws.finish(Outcome::Succeeded).await.unwrap();
    }
}

/// A planning checkout of a commit past the file count holds its root files and the
/// files it must keep; files named later are added; completing it writes the rest, once,
/// handed to the sandbox user, and git inside the sandbox sees a clean checkout without
/// rewriting its index. A commit within the count is checked out whole.
#[tokio::test]
async fn a_sparse_checkout_holds_its_root_and_is_made_whole_once() {
    use planwright::sandbox::{Bwrap, Sandbox};
    use std::os::unix::fs::PermissionsExt;
    let up = Upstream::new();
    let base = up.commit(
        &[
            ("README.md", "# r\n"),
            ("Cargo.lock", "lock\n"),
            (".github/planwright.yml", "budget_usd: 1\n"),
            ("src/a.rs", "fn a() {}\n"),
            ("src/deep/b.rs", "fn b() {}\n"),
            ("docs/c.md", "see\n"),
        ],
        "first",
    );
    let s = setup_in(
        Workspaces::default_owner(),
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    );
    std::fs::set_permissions(s.data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let keep = [".github/planwright.yml", ".devcontainer.json"];

    let whole = s
        .workspaces
        .create_sparse(&request(&s, &up, &base), 6, &keep)
        .await
        .unwrap();
    assert!(whole.widening().is_none());
    assert!(whole.repo().join("src/deep/b.rs").is_file());
    whole.finish(Outcome::Succeeded).await.unwrap();

    let ws = s
        .workspaces
        .create_sparse(&request(&s, &up, &base), 5, &keep)
        .await
        .unwrap();
    let widening = ws.widening().expect("a sparse checkout");
    let present = |rel: &str| ws.repo().join(rel).exists();
    for rel in ["README.md", "Cargo.lock", ".github/planwright.yml"] {
        assert!(present(rel), "{rel}");
    }
    for rel in [
        "src/a.rs",
        "src/deep/b.rs",
        "docs/c.md",
        ".devcontainer.json",
    ] {
        assert!(!present(rel), "{rel}");
    }
    widening
        .include(vec!["docs/c.md".into(), "no/such.file".into()])
        .await
        .unwrap();
    assert!(present("docs/c.md") && !present("src/a.rs"));

    widening.complete().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.repo().join("src/deep/b.rs")).unwrap(),
        "fn b() {}\n"
    );
    let sandbox = Bwrap::new(vec![s.data.path().to_path_buf()]).unwrap();
    let index = ws.repo().join(".git/index");
    let before = std::fs::read(&index).unwrap();
    let mut cmd = ws.command(vec![
        "sh".into(),
        "-c".into(),
        "git status --porcelain && git ls-files | wc -l && touch src/deep/new.rs && echo wrote"
            .into(),
    ]);
    cmd.env.push(("GIT_CONFIG_NOSYSTEM".into(), "1".into()));
    let out = sandbox.run(&cmd).await.unwrap();
    assert!(out.exit.success(), "{}", out.stderr.text());
    assert_eq!(out.stdout.text(), "6\nwrote\n", "{}", out.stderr.text());
    assert_eq!(
        std::fs::read(&index).unwrap(),
        before,
        "git status rewrote the index"
    );
    // Made whole once: a second call writes nothing over what the run changed.
    std::fs::write(ws.repo().join("src/a.rs"), "changed\n").unwrap();
    widening.complete().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.repo().join("src/a.rs")).unwrap(),
        "changed\n"
    );
    ws.finish(Outcome::Succeeded).await.unwrap();
}
