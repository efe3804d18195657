//! The repository map and search on the generated monorepo of the planner's tests (a
//! folder of unpacked registry crates beside the small library an issue is about),
//! against the library alone: what the map costs to build cold (a commit not seen
//! before), for a new question on a commit already indexed, and from the cache; how big
//! it is on each repository, since it is part of every planner turn; and how long a
//! search with thousands of matches takes.
//!
//! `cargo bench --bench repo_map`; `PLANWRIGHT_BENCH_MAP_CRATES=10000` for 100k files.

#[path = "../tests/support/monorepo.rs"]
#[allow(dead_code)]
mod monorepo;

use std::time::Instant;

use planwright::repo_tools::{RepoTools, tokens};

const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    let crates: usize = std::env::var("PLANWRIGHT_BENCH_MAP_CRATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let small = tempfile::tempdir().unwrap();
    monorepo::library(small.path());
    let large = tempfile::tempdir().unwrap();
    monorepo::monorepo(large.path(), crates);
    let question = format!("{}\n{}", monorepo::ISSUE_TITLE, monorepo::ISSUE_BODY);
    let other_question = "Where is the order of buffered items kept?";

    println!("repo_map: median of {RUNS} runs, milliseconds; maps in bytes and tokens");
    println!(
        "{:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "files", "map B", "map tok", "cold", "new q", "cached", "cold/small", "search"
    );
    let mut small_cold = 0.0;
    for (name, dir) in [("small", small.path()), ("large", large.path())] {
        let files = walk_count(dir);
        let (mut cold, mut new_question, mut cached, mut search) = (vec![], vec![], vec![], vec![]);
        let mut map = String::new();
        for run in 0..RUNS {
            // A commit id not seen before: the index is built from the files.
            let tools = RepoTools::new(dir)
                .unwrap()
                .at_commit(&format!("{name}-{run}"));
            cold.push(ms(|| map = tools.map(&question)));
            new_question.push(ms(|| {
                tools.map(&format!("{other_question} ({run})"));
            }));
            cached.push(ms(|| {
                tools.map(&question);
            }));
            search.push(ms(|| {
                tools.search("reserv", "").unwrap();
            }));
        }
        let cold = median(cold);
        if name == "small" {
            small_cold = cold;
        }
        println!(
            "{:>8} {:>9} {:>9} {:>9.1} {:>9.1} {:>9.3} {:>10.1} {:>9.1}",
            files,
            map.len(),
            tokens(&map),
            cold,
            median(new_question),
            median(cached),
            cold / small_cold,
            median(search)
        );
    }
}

fn walk_count(dir: &std::path::Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                count += 1;
            }
        }
    }
    count
}
