//! What a verified result costs under the escalation ladder, beside always using the top
//! rung and never escalating, on one scripted task set.
//!
//! Each task is a fresh world from the test harness (`tests/support`): the real server and
//! worker, SQLite, the fake GitHub with git over smart HTTP, bubblewrap, and scripted
//! models that answer at once. The project is the calc package whose unittest fails on the
//! base. The cheap rung solves a known share of the tasks; on the others its result fails
//! verification every time it tries (and the reviewer rejects it). The top rung always
//! solves. Every call is scripted with the same tokens on both rungs, so what differs
//! between the policies is the prices, which come from the deployment's price table.
//!
//! The policies, each over every task with the same number of attempts:
//! - the ladder: the cheap rung first, one rung up after a verified failure;
//! - always the top rung: a repository with no ladder whose executor model is the dear one;
//! - never escalating: a repository with no ladder whose executor model is the cheap one.
//!
//! What each session spent is read from the database (the model usage rows), and a task
//! counts as verified when its session ended with a pull request ready for review. The
//! figures expected from the share, the scripted tokens and the prices are printed below
//! the measured ones, and the run stops when the two differ, or when a task's executor ran
//! on another model than its policy names or left scripted answers unused.
//!
//! `cargo bench --bench ladder` (as root, like CI; needs bubblewrap, git and python3).
//! `PLANWRIGHT_BENCH_LADDER_TASKS` sets the number of tasks (default 10);
//! `PLANWRIGHT_BENCH_LADDER_CHEAP_SHARE` the share the cheap rung solves (default 0.6, or
//! `60%`); `RUST_LOG` (e.g. `planwright=debug`) prints the server's log to stderr.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use planwright::config::prices::Price;
use planwright::event::ForgeKind;
use planwright::ids::ModelName;
use planwright::store::model_usage;
use serde_json::json;
use support::calc::{CALC, UNITTEST};
use support::model_server::{ScriptUsage, Step};
use support::world::{World, submit_calc, verdict};

const CHEAP: &str = "openai:gpt-5-mini";
const DEAR: &str = "anthropic:claude-sonnet-4-5";
/// Attempts every policy may make on a task: the ladder's two rungs, once each.
const ATTEMPTS: u32 = 2;
/// Longest wait for one task's session to end.
const TASK_TIMEOUT: Duration = Duration::from_secs(180);

/// Tokens of one planner call: the issue, the repository map and files read, a contract.
const PLANNER_CALL: (u64, u64) = (20_000, 2_500);
/// Tokens of one executor call: the contract, the files read so far, one tool call.
const EXECUTOR_CALL: (u64, u64) = (15_000, 1_000);
/// Executor calls per attempt: read the file, write it, finish.
const EXECUTOR_CALLS: u64 = 3;
/// Tokens of one reviewer call: the contract, the diff, the verification's account.
const REVIEWER_CALL: (u64, u64) = (8_000, 600);

fn usage((input, output): (u64, u64)) -> ScriptUsage {
    ScriptUsage {
        input,
        output,
        ..ScriptUsage::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Policy {
    Ladder,
    Top,
    Never,
}

impl Policy {
    const ALL: [Policy; 3] = [Policy::Ladder, Policy::Top, Policy::Never];

    fn name(self) -> &'static str {
        match self {
            Policy::Ladder => "ladder",
            Policy::Top => "always the top rung",
            Policy::Never => "never escalating",
        }
    }

    /// The repository's planwright settings. The calc contract is of low risk: the
    /// ladder-less repositories route low risk to their one executor model.
    fn settings(self) -> String {
        let one =
            |model: &str| format!("test: {UNITTEST}\nmodels:\n  executor:\n    low: \"{model}\"\n");
        match self {
            Policy::Ladder => format!(
                "test: {UNITTEST}\nescalation:\n  - executor: builtin\n    model: \"{CHEAP}\"\n  - executor: builtin\n    model: \"{DEAR}\"\n"
            ),
            Policy::Top => one(DEAR),
            Policy::Never => one(CHEAP),
        }
    }

    /// Whether each attempt this policy makes on a task solves it: `cheap_solves` says
    /// whether the cheap rung can.
    fn attempts(self, cheap_solves: bool) -> Vec<bool> {
        match (self, cheap_solves) {
            (Policy::Top, _) | (_, true) => vec![true],
            (Policy::Ladder, false) => vec![false, true],
            (Policy::Never, false) => vec![false; ATTEMPTS as usize],
        }
    }

    /// The executor models each attempt uses, as the usage rows name them.
    fn models(self, cheap_solves: bool) -> BTreeSet<&'static str> {
        let bare = |m: &'static str| m.split_once(':').map_or(m, |(_, name)| name);
        match (self, cheap_solves) {
            (Policy::Top, _) => [bare(DEAR)].into(),
            (Policy::Ladder, false) => [bare(CHEAP), bare(DEAR)].into(),
            _ => [bare(CHEAP)].into(),
        }
    }
}

/// Every model answer of one task under a policy: the planner's contract, then per attempt
/// the executor reads `calc.py`, writes it (fixed, or with `add` multiplying, which the
/// unittest rejects) and finishes, and the reviewer judges.
fn script(attempts: &[bool]) -> Vec<Step> {
    let executor = usage(EXECUTOR_CALL);
    let mut steps = vec![submit_calc(ATTEMPTS).usage(usage(PLANNER_CALL))];
    for (i, &solves) in attempts.iter().enumerate() {
        // A wrong result differs from one attempt to the next, whatever it starts from.
        let body = if solves {
            "return a + b".to_owned()
        } else {
            format!("return a * b  # attempt {}", i + 1)
        };
        let content = CALC.replace("return a - b", &body);
        steps.extend([
            Step::tool_call(&format!("r{i}"), "read_file", json!({"path": "calc.py"}))
                .when_tools(&["finish", "read_file"])
                .usage(executor),
            Step::tool_call(
                &format!("w{i}"),
                "write_file",
                json!({"path": "calc.py", "content": content}),
            )
            .when_tools(&["finish", "write_file"])
            .usage(executor),
            Step::tool_call(&format!("f{i}"), "finish", json!({"summary": "add adds."}))
                .when_tools(&["finish"])
                .usage(executor),
            if solves {
                verdict(true, "The change the contract asks for.")
            } else {
                verdict(
                    false,
                    "add multiplies instead of adding; the unittest fails.",
                )
            }
            .usage(usage(REVIEWER_CALL)),
        ]);
    }
    steps
}

/// What one task's session did, read from the database and the fake.
struct Measured {
    verified: bool,
    cost_microusd: i64,
    executor_microusd: i64,
    /// The prices of the cheap and the dear model in the deployment the task ran on.
    prices: (Price, Price),
}

async fn run_task(policy: Policy, cheap_solves: bool) -> Measured {
    let script = script(&policy.attempts(cheap_solves));
    let world = World::calc(ForgeKind::Github, script, &policy.settings()).await;
    world.approve_calc().await;
    let session = support::eventually_within("the session to end", TASK_TIMEOUT, || async {
        world
            .find_session()
            .await
            .filter(|s| matches!(s.state.as_str(), "pr_opened" | "failed"))
    })
    .await;
    world.all_jobs_settled().await;
    let unused = world.models.unused_steps();
    assert_eq!(
        unused,
        0,
        "{} left {unused} scripted answers unused (cheap rung solves: {cheap_solves}); the \
         flow is not the one measured. The session: {session:#?}",
        policy.name()
    );
    let db = &world.server.db;
    let spent = model_usage::spent_by_session(db, &session.id)
        .await
        .unwrap();
    let calls = model_usage::list_by_session(db, &session.id).await.unwrap();
    let executor: Vec<_> = calls.iter().filter(|c| c.role == "executor").collect();
    let models: BTreeSet<&str> = executor.iter().map(|c| c.model.as_str()).collect();
    assert_eq!(
        models,
        policy.models(cheap_solves),
        "{} ran the executor on other models than it should",
        policy.name()
    );
    let ready = world.pulls().iter().any(|p| !p.draft);
    let price = |name: &str| {
        let model = ModelName::parse(name).expect("a model name");
        (world.settings.models.prices.get(&model))
            .unwrap_or_else(|| panic!("`{name}` has no price in the deployment's table"))
    };
    let measured = Measured {
        verified: session.state.as_str() == "pr_opened" && ready,
        cost_microusd: spent.cost_microusd,
        executor_microusd: executor.iter().map(|c| c.cost_microusd).sum(),
        prices: (price(CHEAP), price(DEAR)),
    };
    world.server.stop().await;
    measured
}

/// One policy's figures over the task set, in micro-USD.
#[derive(Default)]
struct Totals {
    verified: usize,
    cost: f64,
    executor: f64,
}

impl Totals {
    fn per_verified(&self) -> Option<f64> {
        (self.verified > 0).then(|| self.cost / self.verified as f64)
    }
}

fn call_cost((input, output): (u64, u64), price: Price) -> f64 {
    input as f64 * price.input + output as f64 * price.output
}

/// What each policy should spend and verify over `tasks` tasks of which the cheap rung
/// solves `easy`, at the deployment's prices.
fn expected(policy: Policy, tasks: usize, easy: usize, cheap: Price, dear: Price) -> Totals {
    let planner = call_cost(PLANNER_CALL, dear);
    let reviewer = call_cost(REVIEWER_CALL, dear);
    let attempt = |price| EXECUTOR_CALLS as f64 * call_cost(EXECUTOR_CALL, price);
    let mut totals = Totals::default();
    for i in 0..tasks {
        totals.cost += planner;
        for (n, solves) in policy.attempts(i < easy).iter().enumerate() {
            // A ladder's second attempt is on the dear rung; every other attempt on the
            // policy's one model.
            let dear_attempt = match policy {
                Policy::Top => true,
                Policy::Ladder => n > 0,
                Policy::Never => false,
            };
            let executor = attempt(if dear_attempt { dear } else { cheap });
            totals.cost += executor + reviewer;
            totals.executor += executor;
            if *solves {
                totals.verified += 1;
            }
        }
    }
    totals
}

fn usd(microusd: f64) -> String {
    format!("${:.4}", microusd / 1_000_000.0)
}

fn ratio(value: Option<f64>, against: Option<f64>) -> String {
    match (value, against) {
        (Some(v), Some(a)) if a > 0.0 => format!("{:.2}×", v / a),
        _ => "n/a".into(),
    }
}

fn table(title: &str, tasks: usize, rows: &[(Policy, Totals)]) {
    println!("\n{title}");
    println!(
        "{:<22} {:>9} {:>11} {:>11} {:>13} {:>14} {:>12}",
        "policy", "verified", "total", "executor", "per verified", "total/ladder", "per/ladder"
    );
    let ladder = &rows[0].1;
    for (policy, t) in rows {
        println!(
            "{:<22} {:>9} {:>11} {:>11} {:>13} {:>14} {:>12}",
            policy.name(),
            format!("{}/{tasks}", t.verified),
            usd(t.cost),
            usd(t.executor),
            t.per_verified().map_or("n/a".into(), usd),
            ratio(Some(t.cost), Some(ladder.cost)),
            ratio(t.per_verified(), ladder.per_verified()),
        );
    }
}

fn env_number(name: &str, default: f64) -> f64 {
    let Ok(text) = std::env::var(name) else {
        return default;
    };
    let (number, scale) = match text.trim().strip_suffix('%') {
        Some(percent) => (percent, 100.0),
        None => (text.trim(), 1.0),
    };
    number
        .parse::<f64>()
        .ok()
        .map(|n| n / scale)
        .filter(|n| n.is_finite() && *n >= 0.0)
        .unwrap_or_else(|| panic!("Cannot use {name}={text}: give a non-negative number"))
}

fn main() {
    let tasks = env_number("PLANWRIGHT_BENCH_LADDER_TASKS", 10.0);
    assert!(
        tasks >= 1.0 && tasks.fract() == 0.0,
        "Cannot use PLANWRIGHT_BENCH_LADDER_TASKS={tasks}: give a whole number of tasks, 1 or more"
    );
    let tasks = tasks as usize;
    let share = env_number("PLANWRIGHT_BENCH_LADDER_CHEAP_SHARE", 0.6);
    assert!(
        share <= 1.0,
        "Cannot use PLANWRIGHT_BENCH_LADDER_CHEAP_SHARE={share}: give a share from 0 to 1 (or 0% to 100%)"
    );
    let easy = (tasks as f64 * share).round() as usize;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let started = Instant::now();
    let mut measured: Vec<(Policy, Totals)> = Vec::new();
    let mut prices = None;
    for policy in Policy::ALL {
        let mut totals = Totals::default();
        for i in 0..tasks {
            let cheap_solves = i < easy;
            let begun = Instant::now();
            let m = rt.block_on(run_task(policy, cheap_solves));
            eprintln!(
                "ladder: {} task {}/{tasks} (cheap rung {}): {}, {} in {:.1} s",
                policy.name(),
                i + 1,
                if cheap_solves { "solves" } else { "fails" },
                if m.verified {
                    "verified"
                } else {
                    "not verified"
                },
                usd(m.cost_microusd as f64),
                begun.elapsed().as_secs_f64()
            );
            prices = Some(m.prices);
            totals.verified += usize::from(m.verified);
            totals.cost += m.cost_microusd as f64;
            totals.executor += m.executor_microusd as f64;
        }
        measured.push((policy, totals));
    }
    let (cheap, dear) = prices.expect("at least one task ran");

    println!(
        "Cost per verified result: {tasks} tasks, the cheap rung solves {easy} ({:.0}%), \
         {ATTEMPTS} attempts each; {:.0} s",
        easy as f64 / tasks as f64 * 100.0,
        started.elapsed().as_secs_f64()
    );
    println!(
        "cheap rung `{CHEAP}` at ${:.2} / ${:.2}, top rung `{DEAR}` at ${:.2} / ${:.2} per \
         million tokens in / out; the planner and the reviewer are `{DEAR}`",
        cheap.input, cheap.output, dear.input, dear.output
    );
    println!(
        "tokens in / out per call: planner {} / {}; executor {} / {}, {EXECUTOR_CALLS} calls an \
         attempt; reviewer {} / {}",
        PLANNER_CALL.0,
        PLANNER_CALL.1,
        EXECUTOR_CALL.0,
        EXECUTOR_CALL.1,
        REVIEWER_CALL.0,
        REVIEWER_CALL.1
    );
    table("measured (model usage in the database)", tasks, &measured);
    let expected: Vec<(Policy, Totals)> = Policy::ALL
        .into_iter()
        .map(|p| (p, expected(p, tasks, easy, cheap, dear)))
        .collect();
    table("expected from the share and the prices", tasks, &expected);
    let agrees = measured.iter().zip(&expected).all(|((_, m), (_, e))| {
        m.verified == e.verified && (m.cost - e.cost).abs() < 16.0 * tasks as f64
    });
    assert!(
        agrees,
        "The measurement differs from what the share and the prices give: the sessions \
         spent or verified other than scripted"
    );
    println!("\nthe measurement agrees with the expectation");
}
