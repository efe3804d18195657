//! Time to a ready workspace from a warm mirror, against `git clone` of the same
//! repository (`--no-local`, which really copies, and a plain local clone, which hardlinks
//! objects), and against the other ways of sharing history: a git2 linked worktree of the
//! mirror and `git clone --shared`. Repositories are generated with `git fast-import`: the
//! same files with a short, a long and a long heavy history (hundreds of MB packed), so
//! history's share of the cost shows.
//!
//! `cargo bench --bench workspace`; `PLANWRIGHT_BENCH_WORKSPACE_100K=1` adds 100k files;
//! words after `--` (`10000 heavy`) keep only the cases they all name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[path = "common/repo.rs"]
mod repo;

use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Outcome, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName};
use repo::{BLOB_PATH, History, generate, git, keep_named, median, settle, stored_bytes};
use secrecy::SecretString;

const RUNS: usize = 5;
/// 100k files take minutes per method; three round-robin runs still give a median.
const RUNS_100K: usize = 3;

/// Milliseconds `f` takes; what it made is removed outside the timing.
fn timed(f: impl FnOnce() -> PathBuf) -> f64 {
    let start = Instant::now();
    let made = f();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let _ = std::fs::remove_dir_all(made);
    settle();
    ms
}

const METHODS: [&str; 7] = [
    "floor",
    "ours",
    "ours+own",
    "worktree",
    "--shared",
    "clone",
    "--no-local",
];

struct Row {
    files: usize,
    commits: usize,
    history: History,
    runs: usize,
    /// Packed bytes in the upstream repository: what a full clone has to copy.
    history_bytes: u64,
    /// Bytes of the files checked out at the head.
    checkout_bytes: u64,
    /// Median milliseconds per method, in the order of `METHODS`.
    ms: Vec<f64>,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    scratch: &Path,
    (files, commits, history): (usize, usize, History),
) -> Row {
    let case = scratch.join(format!("f{files}-c{commits}-{}", history.name()));
    std::fs::create_dir_all(&case).unwrap();
    let up = case.join("up.git");
    let started = Instant::now();
    let head = generate(&up, files, commits, history);
    let history_bytes = stored_bytes(&up);
    eprintln!(
        "generated {files} files x {commits} {} commits ({:.1} MB packed) in {:.1}s",
        history.name(),
        history_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    // The baseline has to be a real copy: a `--no-local` clone must carry the whole
    // history over, or the comparison says nothing about history.
    let copied = case.join("copied.git");
    git(
        &case,
        &[
            "clone",
            "-q",
            "--bare",
            "--no-local",
            up.to_str().unwrap(),
            copied.to_str().unwrap(),
        ],
    );
    let copied_bytes = stored_bytes(&copied);
    assert!(
        copied_bytes * 10 >= history_bytes * 9,
        "a --no-local clone holds {copied_bytes} bytes of a {history_bytes}-byte history"
    );
    std::fs::remove_dir_all(&copied).unwrap();

    let data = case.join("data");
    let cache = Arc::new(MirrorCache::new(&data));
    let key = MirrorKey::new("github", RepoName::parse("bench/repo").unwrap()).unwrap();
    let remote = GitRemote {
        url: up.display().to_string(),
        username: "bench".into(),
        password: SecretString::from("unused"),
    };
    rt.block_on(cache.update(&key, &remote)).unwrap();
    let request = WorkspaceRequest {
        mirror: key.clone(),
        remote,
        base: CommitSha(head.clone()),
        issue: IssueNumber(1),
        title: "Benchmark run".into(),
        size: None,
    };
    let plain = Workspaces::new(&data, cache.clone(), None);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let handed = Workspaces::new(&data, cache.clone(), root.then_some((65534, 65534)));
    let ours = |workspaces: &Workspaces| {
        let start = Instant::now();
        let ws = rt.block_on(workspaces.create(&request)).unwrap();
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        assert!(ws.repo().join("src/d0000/f000000.rs").is_file());
        rt.block_on(ws.finish(Outcome::Succeeded)).unwrap();
        settle();
        ms
    };

    // A linked worktree writes into the repository it belongs to: a copy of the mirror.
    let mirror = case.join("worktree-mirror.git");
    git(
        &case,
        &[
            "clone",
            "-q",
            "--mirror",
            up.to_str().unwrap(),
            mirror.to_str().unwrap(),
        ],
    );
    let repo = git2::Repository::open_bare(&mirror).unwrap();
    let commit = repo
        .find_commit(git2::Oid::from_str(&head).unwrap())
        .unwrap();
    // The floor: the same bytes written as plain files, no git at all.
    let contents: Vec<(String, Vec<u8>)> = {
        let tree = commit.tree().unwrap();
        let mut all = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if let Ok(blob) = entry.to_object(&repo).and_then(|o| o.peel_to_blob()) {
                all.push((
                    format!("{dir}{}", entry.name().unwrap()),
                    blob.content().to_vec(),
                ));
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        all
    };
    let checkout_bytes = contents.iter().map(|(_, b)| b.len() as u64).sum();
    assert!(
        !contents.iter().any(|(p, _)| p == BLOB_PATH),
        "the build artefact is still checked out"
    );
    let clone = |i: usize, extra: &[&str]| {
        let dst = case.join(format!("clone{i}"));
        let mut args = vec!["clone", "-q"];
        args.extend_from_slice(extra);
        args.extend([up.to_str().unwrap(), dst.to_str().unwrap()]);
        timed(|| {
            git(&case, &args);
            dst.clone()
        })
    };

    // Round-robin, so that a slow spell of the machine falls on every method alike.
    let runs = if files >= 100_000 { RUNS_100K } else { RUNS };
    let mut samples = vec![Vec::new(); METHODS.len()];
    for i in 0..runs {
        samples[0].push(timed(|| {
            let dst = case.join(format!("floor{i}"));
            for (path, bytes) in &contents {
                let full = dst.join(path);
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(full, bytes).unwrap();
            }
            dst
        }));
        samples[1].push(ours(&plain));
        samples[2].push(ours(&handed));
        samples[3].push(timed(|| {
            let path = case.join(format!("wt{i}"));
            let branch = repo.branch(&format!("bench-{i}"), &commit, true).unwrap();
            let mut opts = git2::WorktreeAddOptions::new();
            opts.reference(Some(branch.get()));
            repo.worktree(&format!("wt{i}"), &path, Some(&opts))
                .unwrap();
            path
        }));
        samples[4].push(clone(i, &["--shared"]));
        samples[5].push(clone(i, &[]));
        samples[6].push(clone(i, &["--no-local"]));
        let round: Vec<String> = samples.iter().map(|s| format!("{:.0}", s[i])).collect();
        eprintln!("  run {}/{runs} ms: {}", i + 1, round.join(" "));
    }
    assert_eq!(cache.fetch_count(), 1, "a warm mirror was fetched again");
    let _ = std::fs::remove_dir_all(&case);
    Row {
        files,
        commits,
        history,
        runs,
        history_bytes,
        checkout_bytes,
        ms: samples.into_iter().map(median).collect(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut cases = vec![
        (1_000, 2_000, History::Light),
        (1_000, 2_000, History::Heavy),
        (10_000, 20, History::Light),
        (10_000, 2_000, History::Light),
        (10_000, 2_000, History::Heavy),
    ];
    if std::env::var_os("PLANWRIGHT_BENCH_WORKSPACE_100K").is_some() {
        cases.push((100_000, 2_000, History::Light));
    }
    // `cargo bench --bench workspace -- 100000 heavy`: only the cases whose files, commits
    // or history name all match the words given.
    keep_named(&mut cases);

    // Rows are printed as they are measured: the 100k case takes the better part of an
    // hour, and the rows before it should not be lost with it.
    println!("workspace: median of round-robin runs, milliseconds; history and checkout in MB");
    print!(
        "{:>7} {:>7} {:>5} {:>4} {:>8} {:>8}",
        "files", "commits", "hist", "runs", "hist MB", "files MB"
    );
    for m in METHODS {
        print!(" {m:>10}");
    }
    println!(" {:>10} {:>10}", "ours/clone", "ours/--nl");
    for case in cases {
        let r = measure(&rt, scratch.path(), case);
        print!(
            "{:>7} {:>7} {:>5} {:>4} {:>8.1} {:>8.1}",
            r.files,
            r.commits,
            r.history.name(),
            r.runs,
            r.history_bytes as f64 / 1e6,
            r.checkout_bytes as f64 / 1e6
        );
        for ms in &r.ms {
            print!(" {ms:>10.1}");
        }
        println!(" {:>10.3} {:>10.3}", r.ms[1] / r.ms[5], r.ms[1] / r.ms[6]);
        std::io::stdout().flush().unwrap();
    }
    println!(
        "floor: the same files written with std::fs; ours: alternates checkout; ours+own: \
         the same handed to the sandbox user (as root); worktree: git2 linked worktree; \
         hist MB: packed upstream history; files MB: bytes checked out"
    );
}
