//! A mirror's first fetch and a later update through `MirrorCache` (the production path,
//! which runs the git command line), against `git clone --mirror --no-local` and
//! `git fetch` of the same repository, and against libgit2's fetch, which the mirror used
//! before: its indexer resolves deltas on one core.
//!
//! The upstream is a local path, so both sides pay for a full pack made by
//! `git upload-pack` and indexed on arrival, without a network in between (`--no-local`
//! keeps `git clone` from hardlinking instead). An update brings the last `UPDATE_COMMITS`
//! commits to a mirror that has the rest.
//!
//! `cargo bench --bench mirror`; words after `--` (`20000 light`) keep only the cases
//! they all name.

#[path = "common/repo.rs"]
mod repo;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use git2::{AutotagOption, FetchOptions, FetchPrune, Repository, RepositoryInitOptions};
use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey};
use planwright::ids::RepoName;
use repo::{History, generate, git, keep_named, median, settle, stored_bytes};
use secrecy::SecretString;

const RUNS: usize = 5;
const UPDATE_COMMITS: usize = 20;
const REFSPEC: &str = "+refs/heads/*:refs/heads/*";

const METHODS: [&str; 3] = ["ours", "git", "libgit2"];

/// libgit2's fetch as the mirror made it: into a bare repository, every branch, pruned,
/// no tags.
fn libgit2_fetch(dir: &Path, url: &str) {
    let repo = if dir.exists() {
        Repository::open_bare(dir).unwrap()
    } else {
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).external_template(false);
        Repository::init_opts(dir, &opts).unwrap()
    };
    let mut options = FetchOptions::new();
    options
        .prune(FetchPrune::On)
        .download_tags(AutotagOption::None);
    repo.remote_anonymous(url)
        .unwrap()
        .fetch(&[REFSPEC], Some(&mut options), None)
        .unwrap();
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

struct Row {
    files: usize,
    commits: usize,
    history: History,
    packed_bytes: u64,
    /// Per method: first fetch, update.
    first: Vec<f64>,
    update: Vec<f64>,
    /// A partial mirror (`MIRROR_PARTIAL`) made ready for a workspace at the head: its
    /// first fetch and the head's files, and the bytes it then stores.
    partial_ms: f64,
    partial_bytes: u64,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    scratch: &Path,
    (files, commits, history): (usize, usize, History),
) -> Row {
    let case = scratch.join(format!("{files}-{commits}-{}", history.name()));
    std::fs::create_dir_all(&case).unwrap();
    let upstream = case.join("upstream.git");
    generate(&upstream, files, commits, history);
    git(&upstream, &["gc", "--quiet"]);
    let packed_bytes = stored_bytes(&upstream);
    // What a mirror holds before the update: everything but the last commits.
    let before = case.join("before.git");
    git(
        &case,
        &[
            "clone",
            "--quiet",
            "--mirror",
            "--no-local",
            upstream.to_str().unwrap(),
            before.to_str().unwrap(),
        ],
    );
    git(
        &before,
        &[
            "update-ref",
            "refs/heads/main",
            &format!("main~{UPDATE_COMMITS}"),
        ],
    );
    git(&before, &["reflog", "expire", "--expire=now", "--all"]);
    git(&before, &["gc", "--quiet", "--prune=now"]);

    let url = upstream.to_str().unwrap().to_owned();
    let remote = GitRemote {
        url: url.clone(),
        username: "x-access-token".into(),
        password: SecretString::from("unused-for-a-local-path"),
    };
    let key = MirrorKey::new("bench", RepoName::parse("octo/big").unwrap()).unwrap();
    let mut first = vec![Vec::new(); METHODS.len()];
    let mut update = vec![Vec::new(); METHODS.len()];
    for _ in 0..RUNS {
        for (m, method) in METHODS.iter().enumerate() {
            // First fetch, into nothing.
            let data = case.join("data");
            let target = case.join("target.git");
            let start = Instant::now();
            match *method {
                "ours" => rt
                    .block_on(MirrorCache::new(&data).update(&key, &remote))
                    .unwrap(),
                "git" => {
                    git(
                        &case,
                        &[
                            "clone",
                            "--quiet",
                            "--mirror",
                            "--no-local",
                            &url,
                            target.to_str().unwrap(),
                        ],
                    );
                }
                _ => libgit2_fetch(&target, &url),
            }
            first[m].push(ms_since(start));
            let _ = std::fs::remove_dir_all(&data);
            let _ = std::fs::remove_dir_all(&target);
            settle();

            // Update: the same starting mirror, the last commits to bring.
            let cache = MirrorCache::new(&data);
            let at = if *method == "ours" {
                cache.path(&key)
            } else {
                target.clone()
            };
            copy(&before, &at);
            settle();
            let start = Instant::now();
            match *method {
                "ours" => rt.block_on(cache.update(&key, &remote)).unwrap(),
                "git" => {
                    git(
                        &at,
                        &["fetch", "--quiet", "--prune", "--no-tags", &url, REFSPEC],
                    );
                }
                _ => libgit2_fetch(&at, &url),
            }
            update[m].push(ms_since(start));
            assert_eq!(
                git(&at, &["rev-parse", "main"]),
                git(&upstream, &["rev-parse", "main"]),
                "{method} did not bring the update"
            );
            let _ = std::fs::remove_dir_all(&data);
            let _ = std::fs::remove_dir_all(&target);
            settle();
        }
    }
    // A partial mirror: what it takes to be ready for a workspace at the head.
    git(&upstream, &["config", "uploadpack.allowFilter", "true"]);
    git(
        &upstream,
        &["config", "uploadpack.allowAnySHA1InWant", "true"],
    );
    let head = git2::Oid::from_str(&git(&upstream, &["rev-parse", "main"])).unwrap();
    let mut partial = Vec::new();
    let mut partial_bytes = 0;
    for _ in 0..RUNS {
        let data = case.join("data");
        let cache = MirrorCache::new(&data)
            .with_partial(&["*".to_owned()])
            .unwrap();
        let start = Instant::now();
        rt.block_on(cache.ensure_commit(&key, &remote, head, None))
            .unwrap();
        partial.push(ms_since(start));
        partial_bytes = stored_bytes(&cache.path(&key));
        let _ = std::fs::remove_dir_all(&data);
        settle();
    }
    std::fs::remove_dir_all(&case).unwrap();
    Row {
        partial_ms: median(partial),
        partial_bytes,
        files,
        commits,
        history,
        packed_bytes,
        first: first.into_iter().map(median).collect(),
        update: update.into_iter().map(median).collect(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut cases = vec![(20_000, 500, History::Light), (10_000, 200, History::Heavy)];
    keep_named(&mut cases);

    println!(
        "mirror: median of {RUNS} round-robin runs, milliseconds; an update brings {UPDATE_COMMITS} commits"
    );
    println!(
        "{:>6} {:>7} {:>5} {:>8} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8} {:>8}",
        "files",
        "commits",
        "hist",
        "pack MB",
        "ours",
        "clone",
        "libgit2",
        "ours/cl",
        "lg2/cl",
        "ours",
        "fetch",
        "libgit2",
        "ours/f",
        "lg2/f"
    );
    println!(
        "partial: a partial mirror ready for a workspace at the head (first fetch and its files)"
    );
    for case in cases {
        let r = measure(&rt, scratch.path(), case);
        println!(
            "{:>6} {:>7} {:>5} {:>8.1} | {:>8.0} {:>8.0} {:>8.0} {:>8.2} {:>8.2} | {:>8.0} {:>8.0} {:>8.0} {:>8.2} {:>8.2}",
            r.files,
            r.commits,
            r.history.name(),
            r.packed_bytes as f64 / 1e6,
            r.first[0],
            r.first[1],
            r.first[2],
            r.first[0] / r.first[1],
            r.first[2] / r.first[1],
            r.update[0],
            r.update[1],
            r.update[2],
            r.update[0] / r.update[1],
            r.update[2] / r.update[1],
        );
        println!(
            "{:>6} {:>7} {:>5} partial: {:.0} ms ({:.2}x the full first fetch), {:.1} MB stored ({:.2}x the pack)",
            r.files,
            r.commits,
            r.history.name(),
            r.partial_ms,
            r.partial_ms / r.first[0],
            r.partial_bytes as f64 / 1e6,
            r.partial_bytes as f64 / r.packed_bytes as f64
        );
        std::io::stdout().flush().unwrap();
    }
}
