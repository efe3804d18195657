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
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Outcome, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName};
use secrecy::SecretString;

const RUNS: usize = 5;
/// 100k files take minutes per method; three round-robin runs still give a median.
const RUNS_100K: usize = 3;

/// What each commit after the first carries.
#[derive(Clone, Copy, PartialEq)]
enum History {
    /// Three files of about 1 KiB rewritten: the pack stays small and compresses well.
    Light,
    /// Twenty files rewritten with hex noise, and a build artefact of `BLOB_BYTES` random
    /// bytes replaced (the last commit deletes it): the pack grows by about that much per
    /// commit, nothing in it deltifies, while the checkout stays the size of the files.
    Heavy,
}

const HEAVY_REWRITES: usize = 20;
const BLOB_BYTES: usize = 256 * 1024;
const BLOB_PATH: &str = "assets/build.bin";

impl History {
    fn name(self) -> &'static str {
        match self {
            History::Light => "light",
            History::Heavy => "heavy",
        }
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A bare repository of `files` files (about 1 KiB each, 100 to a folder) and `commits`
/// commits after the first, each as `history` says; returns its head SHA.
fn generate(dir: &Path, files: usize, commits: usize, history: History) -> String {
    git(
        dir.parent().unwrap(),
        &["init", "-q", "--bare", "-b", "main", dir.to_str().unwrap()],
    );
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["fast-import", "--quiet"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import runs");
    let mut input = std::io::BufWriter::new(child.stdin.take().unwrap());
    let path = |i: usize| format!("src/d{:04}/f{i:06}.rs", i / 100);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let body = |i: usize, rev: usize, noise: Option<&mut u64>| {
        let mut s = format!("// file {i}, revision {rev}\n");
        let mut noise = noise;
        while s.len() < 1000 {
            if let Some(rng) = noise.as_deref_mut() {
                s.push_str(&format!("pub const K: u64 = 0x{:016x};\n", xorshift(rng)));
            } else {
                s.push_str("pub fn item() -> u64 { 42 }\n");
            }
        }
        s
    };
    let mut blob = vec![0u8; BLOB_BYTES];
    for c in 0..=commits {
        writeln!(input, "commit refs/heads/main").unwrap();
        writeln!(
            input,
            "committer Bench <bench@example.com> {} +0000",
            1_600_000_000 + c
        )
        .unwrap();
        let msg = format!("commit {c}");
        writeln!(input, "data {}\n{msg}", msg.len()).unwrap();
        let rewrites = match history {
            History::Light => 3,
            History::Heavy => HEAVY_REWRITES,
        };
        let touched: Vec<usize> = if c == 0 {
            (0..files).collect()
        } else {
            (0..rewrites)
                .map(|_| (xorshift(&mut rng) % files as u64) as usize)
                .collect()
        };
        for i in touched {
            let noisy = c > 0 && history == History::Heavy;
            let b = body(i, c, noisy.then_some(&mut rng));
            writeln!(input, "M 100644 inline {}\ndata {}\n{b}", path(i), b.len()).unwrap();
        }
        if history == History::Heavy && c > 0 {
            if c == commits {
                writeln!(input, "D {BLOB_PATH}").unwrap();
            } else {
                for chunk in blob.chunks_mut(8) {
                    chunk.copy_from_slice(&xorshift(&mut rng).to_le_bytes());
                }
                writeln!(input, "M 100644 inline {BLOB_PATH}\ndata {}", blob.len()).unwrap();
                input.write_all(&blob).unwrap();
                writeln!(input).unwrap();
            }
        }
        writeln!(input).unwrap();
    }
    drop(input);
    assert!(child.wait().unwrap().success(), "git fast-import failed");
    git(dir, &["rev-parse", "main"])
}

/// Bytes of packed and loose objects in a repository, as `git count-objects` counts them.
fn stored_bytes(dir: &Path) -> u64 {
    git(dir, &["count-objects", "-v"])
        .lines()
        .filter_map(|l| {
            l.strip_prefix("size-pack: ")
                .or_else(|| l.strip_prefix("size: "))
        })
        .map(|kib| kib.parse::<u64>().unwrap() * 1024)
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Milliseconds `f` takes; what it made is removed outside the timing.
fn timed(f: impl FnOnce() -> PathBuf) -> f64 {
    let start = Instant::now();
    let made = f();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let _ = std::fs::remove_dir_all(made);
    settle();
    ms
}

/// Writes out what the last method left dirty, outside any timing: otherwise the next
/// method pays for the previous one's writeback (hundreds of MB after a `--no-local` clone
/// of a heavy history).
fn settle() {
    let _ = Command::new("sync").status();
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
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    cases.retain(|&(files, commits, history)| {
        let names = [
            files.to_string(),
            commits.to_string(),
            history.name().to_owned(),
        ];
        words.iter().all(|w| names.contains(w))
    });

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
