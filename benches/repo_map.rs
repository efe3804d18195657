//! The repository map and search on the generated monorepo of the planner's tests (a
//! folder of unpacked registry crates beside the small library an issue is about),
//! against the library alone: what the map costs to build cold (a commit not seen
//! before), for a new question on a commit already indexed, and from the cache; how big
//! it is on each repository, since it is part of every planner turn; and how long a
//! search with thousands of matches takes.
//!
//! Each is measured on the files of a checkout and on the commit's tree (what planning
//! reads, so that its checkout can stay sparse).
//!
//! Then the same scripted planning session (one scout, a read, a contract, against the
//! fake model provider) on each repository: what the planner is sent over the session.
//! And the planning checkout of the monorepo from a warm mirror: written whole, sparse
//! (root files and settings), and the rest written when a scout first runs a command.
//!
//! `cargo bench --bench repo_map`; `PLANWRIGHT_BENCH_MAP_CRATES=10000` for 100k files.

#[path = "../tests/support/model_server.rs"]
#[allow(dead_code)]
mod model_server;
#[path = "../tests/support/monorepo.rs"]
#[allow(dead_code)]
mod monorepo;
#[path = "common/repo.rs"]
mod repo;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use model_server::ModelServer;
use planwright::config::repo::{RepoConfig, RootFiles};
use planwright::contract::Base;
use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Outcome, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName};
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

    let counts = [walk_count(small.path()), walk_count(large.path())];
    let heads = [commit_all(small.path()), commit_all(large.path())];

    println!("repo_map: median of {RUNS} runs, milliseconds; maps in bytes and tokens");
    println!(
        "{:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "from", "files", "map B", "map tok", "cold", "new q", "cached", "cold/small", "search"
    );
    let mut small_cold = 0.0;
    let mut large_cold = Vec::new();
    for from in ["disk", "tree"] {
        for (i, (name, dir)) in [("small", small.path()), ("large", large.path())]
            .into_iter()
            .enumerate()
        {
            let (mut cold, mut new_question, mut cached, mut search) =
                (vec![], vec![], vec![], vec![]);
            let mut map = String::new();
            for run in 0..RUNS {
                // A commit id not seen before: the index is built from the files.
                let tools = match from {
                    "disk" => RepoTools::new(dir).unwrap(),
                    _ => RepoTools::in_tree(dir, &dir.join(".git"), &heads[i]).unwrap(),
                }
                .at_commit(&format!("{from}-{name}-{run}"));
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
            } else {
                large_cold.push(cold);
            }
            println!(
                "{:>6} {:>8} {:>9} {:>9} {:>9.1} {:>9.1} {:>9.3} {:>10.1} {:>9.1}",
                from,
                counts[i],
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
    println!(
        "cold map on the monorepo, from the tree against the checkout: {:.2}x",
        large_cold[1] / large_cold[0]
    );

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
    checkouts(&rt, large.path(), &heads[1], counts[1]);
}

/// Commits every file of `dir` into a repository there; returns the commit.
fn commit_all(dir: &Path) -> String {
    repo::git(dir, &["init", "-q"]);
    repo::git(dir, &["add", "-A"]);
    repo::git(
        dir,
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-q",
            "-m",
            "bench",
        ],
    );
    repo::git(dir, &["rev-parse", "HEAD"])
}

/// The planning checkout of the monorepo from a warm mirror: whole, and sparse with the
/// rest written later, in round-robin runs.
fn checkouts(rt: &tokio::runtime::Runtime, dir: &Path, head: &str, files: usize) {
    let data = tempfile::tempdir().unwrap();
    let workspaces = Workspaces::new(data.path(), Arc::new(MirrorCache::new(data.path())), None);
    let request = WorkspaceRequest {
        mirror: MirrorKey::new("github", RepoName::parse("acme/monorepo").unwrap()).unwrap(),
        remote: GitRemote {
            url: dir.join(".git").display().to_string(),
            username: "x-access-token".into(),
            password: "unused-for-a-local-path".to_owned().into(),
        },
        base: CommitSha(head.to_owned()),
        issue: IssueNumber(1),
        title: "bench".into(),
        size: None,
    };
    let keep = [".github/planwright.yml", ".devcontainer/devcontainer.json"];
    let sparse_above = planwright::config::SPARSE_CHECKOUT_FILES;
    // The first makes the mirror.
    let warm = rt
        .block_on(workspaces.create_sparse(&request, usize::MAX, &keep))
        .unwrap();
    rt.block_on(warm.finish(Outcome::Succeeded)).unwrap();
    let (mut whole, mut sparse, mut rest) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let start = Instant::now();
        let ws = rt
            .block_on(workspaces.create_sparse(&request, usize::MAX, &keep))
            .unwrap();
        whole.push(start.elapsed().as_secs_f64() * 1000.0);
        rt.block_on(ws.finish(Outcome::Succeeded)).unwrap();

        let start = Instant::now();
        let ws = rt
            .block_on(workspaces.create_sparse(&request, sparse_above, &keep))
            .unwrap();
        sparse.push(start.elapsed().as_secs_f64() * 1000.0);
        let widening = ws.widening().expect("the monorepo is past the file count");
        let start = Instant::now();
        rt.block_on(widening.complete()).unwrap();
        rest.push(start.elapsed().as_secs_f64() * 1000.0);
        rt.block_on(ws.finish(Outcome::Succeeded)).unwrap();
    }
    let (whole, sparse, rest) = (median(whole), median(sparse), median(rest));
    println!(
        "planning checkout of {files} files, ms: whole {whole:.0}, sparse {sparse:.1} ({:.4}x), the rest on a first command {rest:.0}",
        sparse / whole
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
