//! The repository map and search on the generated monorepo of the planner's tests (a
//! folder of unpacked registry crates beside the small library an issue is about),
//! against the library alone: what the map costs to build cold (a commit not seen
//! before), for a new question on a commit already indexed, and from the cache; how big
//! it is on each repository, since it is part of every planner turn; and how long a
//! search with thousands of matches takes.
//!
//! Then the same scripted planning session (one scout, a read, a contract, against the
//! fake model provider) on each repository: what the planner is sent over the session.
//!
//! `cargo bench --bench repo_map`; `PLANWRIGHT_BENCH_MAP_CRATES=10000` for 100k files.

#[path = "../tests/support/model_server.rs"]
#[allow(dead_code)]
mod model_server;
#[path = "../tests/support/monorepo.rs"]
#[allow(dead_code)]
mod monorepo;

use std::path::Path;
use std::time::Instant;

use model_server::ModelServer;
use planwright::config::repo::{RepoConfig, RootFiles};
use planwright::contract::Base;
use planwright::ids::{CommitSha, RepoName};
use planwright::planner::{Dossier, PlanRequest, Planned, Planner, PlannerOptions};
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

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let on_small = rt.block_on(planner_input(small.path()));
    let on_large = rt.block_on(planner_input(large.path()));
    println!(
        "planner input per session: {on_small} bytes on the library, {on_large} on the monorepo ({:.2}x)",
        on_large as f64 / on_small as f64
    );
}

/// Bytes of messages and system prompt sent to the planner over one scripted session.
async fn planner_input(dir: &Path) -> usize {
    let server = ModelServer::start(monorepo::planner_script()).await;
    let (planner_model, scout_model) = (
        server.client("anthropic:claude-bench-planner"),
        server.client("openai:gpt-bench-scout"),
    );
    let tools = RepoTools::new(dir).unwrap();
    let planner = Planner {
        model: planner_model.as_ref(),
        scout_model: scout_model.as_ref(),
        tools: &tools,
        sandbox: None,
        root: None,
        options: PlannerOptions::default(),
    };
    let issue = monorepo::issue();
    let config = RepoConfig::defaults(&RootFiles::from_dir(dir));
    let request = PlanRequest {
        repo: &RepoName::parse("acme/inventory").unwrap(),
        issue: &issue,
        base: &Base {
            branch: "main".into(),
            sha: CommitSha("0123456789abcdef0123456789abcdef01234567".into()),
        },
        config: &config,
        revision: None,
        evidence: None,
    };
    let mut checkpoint = |_: &Dossier| {
        Box::pin(async { Ok(()) })
            as std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
    };
    let planned = planner
        .plan(&request, &mut Dossier::default(), &mut checkpoint)
        .await
        .unwrap();
    assert!(
        matches!(planned, Planned::Contract(_)),
        "the session ends in a contract"
    );
    server
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .map(|r| r.body["messages"].to_string().len() + r.body["system"].to_string().len())
        .sum()
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
