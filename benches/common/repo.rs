//! Repositories for the git benchmarks, generated with `git fast-import`: the same files
//! with a short, a long and a long heavy history, so history's share of a cost shows.

#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// What each commit after the first carries.
#[derive(Clone, Copy, PartialEq)]
pub enum History {
    /// Three files of about 1 KiB rewritten: the pack stays small and compresses well.
    Light,
    /// Twenty files rewritten with hex noise, and a build artefact of `BLOB_BYTES` random
    /// bytes replaced (the last commit deletes it): the pack grows by about that much per
    /// commit, nothing in it deltifies, while the checkout stays the size of the files.
    Heavy,
}

pub const HEAVY_REWRITES: usize = 20;
pub const BLOB_BYTES: usize = 256 * 1024;
pub const BLOB_PATH: &str = "assets/build.bin";

impl History {
    pub fn name(self) -> &'static str {
        match self {
            History::Light => "light",
            History::Heavy => "heavy",
        }
    }
}

pub fn git(dir: &Path, args: &[&str]) -> String {
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

pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A bare repository of `files` files (about 1 KiB each, 100 to a folder) and `commits`
/// commits after the first, each as `history` says; returns its head SHA.
pub fn generate(dir: &Path, files: usize, commits: usize, history: History) -> String {
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
pub fn stored_bytes(dir: &Path) -> u64 {
    git(dir, &["count-objects", "-v"])
        .lines()
        .filter_map(|l| {
            l.strip_prefix("size-pack: ")
                .or_else(|| l.strip_prefix("size: "))
        })
        .map(|kib| kib.parse::<u64>().unwrap() * 1024)
        .sum()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Writes out what the last method left dirty, outside any timing: otherwise the next
/// method pays for the previous one's writeback (hundreds of MB after a `--no-local` clone
/// of a heavy history).
pub fn settle() {
    let _ = Command::new("sync").status();
}

/// Keeps the cases whose files, commits or history name every word given after `--`
/// (`cargo bench --bench workspace -- 10000 heavy`).
pub fn keep_named(cases: &mut Vec<(usize, usize, History)>) {
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
}
