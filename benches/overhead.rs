//! planwright's own overhead from webhook to pull request, split by stage: the whole flow
//! (label → contract → `/approve` → PR) against the fake GitHub and a scripted model that
//! answers at once, beside the work no bot can avoid done by hand in the same loop.
//!
//! Each planwright run is a fresh world from the test harness (`tests/support`): the real
//! server and worker, SQLite, git over smart HTTP, bubblewrap. The project is a tiny
//! Python package whose unittest fails on the base; the executor edits one line and the
//! reviewer accepts. Measured from outside: label webhook sent → contract comment on the
//! fake (planning), `/approve` sent → pull request on the fake (execution); inside, the
//! audit log's timestamps and the execute job's `execution.timed` stages.
//!
//! The baseline, run round-robin with it: `git clone --no-local` of the same repository
//! twice (result and base checkouts) and the check (`python3 -m unittest -v`) on the base
//! and on the edited result, once as plain processes and once more through planwright's
//! own `Bwrap`, so the sandbox's share and planwright's share can be told apart. The main
//! run has `flaky_reruns: 0` and a fix that changes no test file; a third run each round
//! has the executor add a regression test the contract names, with the default re-runs, so
//! the fail-to-pass proof and the re-runs of the base's failing test happen: its execution
//! time against the main run's is what they add. A fourth puts the same regression test in
//! a new test module, which verification runs apart from the old tests: its execution time
//! against the third's is what that invocation of its own adds.
//!
//! `cargo bench --bench overhead` (as root, like CI; needs bubblewrap, git and python3).
//! `PLANWRIGHT_BENCH_OVERHEAD_RUNS` sets the number of measured rounds (default 10);
//! `PLANWRIGHT_BENCH_FORGE_LATENCY_MS` makes every forge API call wait that long first;
//! `RUST_LOG` (e.g. `planwright=debug`) prints the server's log to stderr.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use planwright::config::QueueSettings;
use planwright::event::ForgeKind;
use planwright::ids::{IssueNumber, RepoName};
use planwright::sandbox::{self, Bwrap, Sandbox};
use planwright::server::Role;
use planwright::session::dispatch;
use planwright::store::{audit, sessions};
use serde_json::{Value, json};
use support::calc::{CALC, TEST_CALC, UNITTEST};
use support::fake_forge::{APP_ID, APP_SLUG, FakeGithub, FakeUser, app_key};
use support::model_server::{ModelServer, Step};
use support::{TestDb, TestServer};

const REPO: &str = "acme/widgets";
const INSTALLATION: i64 = 77;
const ISSUE: i64 = 7;
const SETTINGS: &str = "test: python3 -m unittest -v\n";
/// The same without re-running failing tests: the run the proof and re-runs are weighed
/// against.
const SETTINGS_NO_RERUNS: &str = "test: python3 -m unittest -v\nflaky_reruns: 0\n";
/// What planwright runs in the sandbox for this contract: the check on the base, then on
/// the result (the contract's command and the repository's `test` are the same one, run
/// once). The baseline runs it as often; a run that differs stops the benchmark.
const CHECK_RUNS: u64 = 2;
/// Longest wait for any step of a run before the benchmark gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

fn files(settings: &'static str) -> [(&'static str, &'static str); 4] {
    [
        ("calc.py", CALC),
        ("test_calc.py", TEST_CALC),
        (".github/workflows/ci.yml", "on: push\n"),
        (".github/planwright.yml", settings),
    ]
}

/// What the executor's result holds and what verification does with it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Variant {
    /// The one-line fix with `flaky_reruns: 0`: no test file changes, so no proof runs on
    /// the base code, and no failing test is run again.
    Fix,
    /// The fix and a regression test the contract names, with the default re-runs: the
    /// fail-to-pass proof runs the tests once more on the base code, and the base's
    /// failing test is run again alone, twice.
    Proving,
    /// [`Variant::Proving`] with the regression test in a new test module: it runs apart
    /// from the old tests, one invocation more.
    Apart,
}

impl Variant {
    /// Planner, executor and reviewer, answered without delay.
    fn script(self) -> Vec<Step> {
        match self {
            Variant::Fix => support::calc::fixing_script(1),
            Variant::Proving => support::calc::proving_script(1),
            Variant::Apart => support::calc::apart_script(1),
        }
    }

    fn settings(self) -> &'static str {
        match self {
            Variant::Fix => SETTINGS_NO_RERUNS,
            Variant::Proving | Variant::Apart => SETTINGS,
        }
    }

    /// Sandboxed commands a run makes: the check on the base and on the result; with the
    /// proof, once more on the base code with the result's tests, and the base's failing
    /// test twice more alone.
    fn check_runs(self) -> u64 {
        match self {
            Variant::Fix => CHECK_RUNS,
            Variant::Proving => CHECK_RUNS + 1 + 2,
            Variant::Apart => CHECK_RUNS + 1 + 2 + 1,
        }
    }
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// One fake GitHub, scripted model server and planwright server with its own database.
struct World {
    github: FakeGithub,
    _models: ModelServer,
    server: TestServer,
    _db: TestDb,
    maintainer: FakeUser,
}

impl World {
    async fn start(variant: Variant) -> World {
        let db = TestDb::new().await;
        let github = FakeGithub::start().await;
        // A forge as far away as a real one: every API call waits this long.
        if let Some(ms) = std::env::var("PLANWRIGHT_BENCH_FORGE_LATENCY_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            github.set_latency(Duration::from_millis(ms));
        }
        github.add_repo(REPO, "main", &"0".repeat(40));
        github.add_installation(INSTALLATION, &[REPO]);
        github.create_git_repo(REPO, &files(variant.settings()));
        github.put_file(REPO, ".github/planwright.yml", variant.settings());
        let maintainer = FakeUser::new("maria", 101);
        github.set_permission(REPO, "maria", "write", "maintain");
        github.add_issue(
            REPO,
            ISSUE,
            "add subtracts",
            Some("`add(2, 3)` gives -1."),
            &["planwright"],
            maintainer.clone(),
        );
        let models = ModelServer::start(variant.script()).await;
        let key = app_key().private_pem.clone();
        let app_id = APP_ID.to_string();
        let anthropic = models.anthropic_base();
        let openai = models.openai_base();
        // A deployment's own poll interval, not the tests' shorter one: how soon an idle
        // worker finds a job is part of the overhead.
        let poll = QueueSettings::default()
            .poll_interval
            .as_millis()
            .to_string();
        let env = [
            ("PLANWRIGHT_JOB_POLL_MS", poll.as_str()),
            ("PLANWRIGHT_GITHUB_APP_ID", app_id.as_str()),
            ("PLANWRIGHT_GITHUB_PRIVATE_KEY", key.as_str()),
            ("PLANWRIGHT_GITHUB_API_URL", github.url.as_str()),
            ("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-sonnet-4-5"),
            ("PLANWRIGHT_SCOUT_MODEL", "openai:gpt-5-mini"),
            ("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5"),
            ("PLANWRIGHT_ANTHROPIC_API_KEY", "sk-ant-bench"),
            ("PLANWRIGHT_ANTHROPIC_BASE_URL", anthropic.as_str()),
            ("PLANWRIGHT_OPENAI_API_KEY", "sk-openai-bench"),
            ("PLANWRIGHT_OPENAI_BASE_URL", openai.as_str()),
            // The sandbox's model relay is planwright itself, not this program.
            ("PLANWRIGHT_SANDBOX_RELAY", env!("CARGO_BIN_EXE_planwright")),
        ];
        let settings = support::settings(&db, &env);
        let server = TestServer::start(settings, Role::All, dispatch::handler).await;
        World {
            github,
            _models: models,
            server,
            _db: db,
            maintainer,
        }
    }

    /// A real payload from the shared fixtures, moved to our repository and issue.
    fn payload(&self, fixture: &str) -> Value {
        let path = support::fixtures().join("github-webhooks").join(fixture);
        let mut payload: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        let (owner, name) = REPO.split_once('/').unwrap();
        payload["repository"]["full_name"] = json!(REPO);
        payload["repository"]["name"] = json!(name);
        payload["repository"]["owner"]["login"] = json!(owner);
        payload["installation"] =
            json!({"id": INSTALLATION, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNzc="});
        payload["issue"]["number"] = json!(ISSUE);
        payload["sender"]["login"] = json!(self.maintainer.login);
        payload["sender"]["id"] = json!(self.maintainer.id);
        payload["sender"]["type"] = json!("User");
        payload
    }

    fn label_payload(&self) -> Value {
        let mut payload = self.payload("issues.labeled.1.json");
        payload["label"]["name"] = json!("planwright");
        payload
    }

    /// Writes `/approve` on the fake, and returns the webhook GitHub would send for it.
    fn approve_payload(&self) -> Value {
        let by = &self.maintainer;
        let id = self.github.add_comment(REPO, ISSUE, "/approve", by.clone());
        let mut payload = self.payload("issue_comment.created.1.json");
        payload["comment"]["id"] = json!(id);
        payload["comment"]["body"] = json!("/approve");
        payload["comment"]["user"]["login"] = json!(by.login);
        payload["comment"]["user"]["id"] = json!(by.id);
        payload["comment"]["user"]["type"] = json!("User");
        payload
    }

    /// Sends a signed delivery and returns when planwright has answered it.
    async fn send(&self, event: &str, delivery: &str, payload: &Value) {
        let body = serde_json::to_vec(payload).unwrap();
        let response = self
            .server
            .github(event, delivery, &body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{event} {delivery}: {}",
            response.status()
        );
    }

    fn contract_posted(&self) -> bool {
        let bot = format!("{APP_SLUG}[bot]");
        self.github
            .issue_comments(REPO, ISSUE)
            .iter()
            .any(|c| c.author.login == bot && c.body.contains("planwright:contract"))
    }

    async fn session(&self) -> Option<sessions::SessionRow> {
        let mut conn = self.server.db.pool.acquire().await.unwrap();
        sessions::latest_for_issue(
            &mut conn,
            ForgeKind::Github,
            &RepoName::parse(REPO).unwrap(),
            IssueNumber(ISSUE),
        )
        .await
        .unwrap()
    }

    /// Polls `done` every millisecond (the fake's state is in memory, so a check is cheap
    /// and the measurement's resolution stays far below the stages it times); gives up,
    /// with the session's state, when the flow stalls or fails.
    async fn until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut checks = 0u32;
        while !done() {
            checks += 1;
            if checks.is_multiple_of(500) || Instant::now() > deadline {
                let session = self.session().await;
                let failed = session
                    .as_ref()
                    .is_some_and(|s| s.state.as_str() == "failed");
                assert!(
                    !failed && Instant::now() <= deadline,
                    "Could not measure the flow: waiting for {what}, the session is {session:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn until_state(&self, state: &str) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let session = self.session().await;
            if session.as_ref().is_some_and(|s| s.state.as_str() == state) {
                return;
            }
            let failed = session
                .as_ref()
                .is_some_and(|s| s.state.as_str() == "failed");
            assert!(
                !failed && Instant::now() <= deadline,
                "Could not measure the flow: waiting for the session to be {state}, it is {session:#?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The audit log's entries of the run, by action; waits for `last` to be written.
    async fn audit_until(&self, last: &str) -> Vec<audit::AuditRow> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let mut conn = self.server.db.pool.acquire().await.unwrap();
            let rows = audit::list(&mut conn).await.unwrap();
            if rows.iter().any(|r| r.action == last) {
                return rows;
            }
            assert!(
                Instant::now() <= deadline,
                "Could not measure the flow: no `{last}` in the audit log: {rows:#?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn metrics(&self) -> String {
        self.server
            .client
            .get(format!("{}/metrics", self.server.base))
            .bearer_auth(support::ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// This process's forge requests so far by route (status left out), from `/metrics`.
    async fn forge_requests(&self) -> BTreeMap<String, u64> {
        let mut routes = BTreeMap::new();
        for line in self.metrics().await.lines() {
            let Some(rest) = line.strip_prefix("planwright_forge_requests_total{") else {
                continue;
            };
            let route = rest
                .split("route=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_else(|| panic!("an unreadable metrics line: {line}"));
            let n: u64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("an unreadable metrics line: {line}"));
            *routes.entry(route.to_owned()).or_default() += n;
        }
        routes
    }

    /// Sandbox runs of this process so far, and their summed time, from `/metrics`.
    async fn sandbox_runs(&self) -> (u64, f64) {
        let text = self.metrics().await;
        let value = |line: &str| -> f64 {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("an unreadable metrics line: {line}"))
        };
        let runs = text
            .lines()
            .filter(|l| l.starts_with("planwright_sandbox_runs_total{"))
            .map(|l| value(l) as u64)
            .sum();
        let seconds = text
            .lines()
            .find(|l| l.starts_with("planwright_sandbox_run_duration_seconds_sum"))
            .map(value)
            .expect("/metrics reports sandbox run time");
        (runs, seconds)
    }
}

/// One planwright run, in milliseconds per stage.
#[derive(Debug, Default, Clone)]
struct Flow {
    label_answered: f64,
    to_session: f64,
    planner: f64,
    posting: f64,
    planning: f64,
    to_approval: f64,
    stages: Vec<(String, f64)>,
    execution: f64,
    sandbox_runs: u64,
    sandbox_ms: f64,
    /// The flow's forge API requests by route.
    forge_requests: BTreeMap<String, u64>,
}

impl Flow {
    fn total(&self) -> f64 {
        self.planning + self.execution
    }

    fn stage(&self, name: &str) -> f64 {
        self.stages
            .iter()
            .find(|(s, _)| s == name)
            .map_or(0.0, |(_, ms)| *ms)
    }

    /// The part of execution no named stage accounts for: queueing, status comments,
    /// commits, diffs, bookkeeping.
    fn execution_rest(&self) -> f64 {
        self.execution - self.to_approval - self.stages.iter().map(|(_, ms)| ms).sum::<f64>()
    }
}

async fn planwright_run(round: &str, variant: Variant) -> Flow {
    let world = World::start(variant).await;
    let (runs_before, seconds_before) = world.sandbox_runs().await;
    let requests_before = world.forge_requests().await;
    let label = world.label_payload();

    let sent_ms = now_ms();
    let sent = Instant::now();
    world
        .send("issues", &format!("label-{round}"), &label)
        .await;
    let label_answered = sent.elapsed();
    world
        .until("the contract comment", || world.contract_posted())
        .await;
    let planning = sent.elapsed();
    let posted_ms = now_ms();

    // Approval waits for the session to take it, as a maintainer reading the comment would.
    world.until_state("awaiting_approval").await;
    let approve = world.approve_payload();
    let approve_ms = now_ms();
    let approved = Instant::now();
    world
        .send("issue_comment", &format!("approve-{round}"), &approve)
        .await;
    world
        .until("the pull request", || !world.github.pulls(REPO).is_empty())
        .await;
    let execution = approved.elapsed();

    world.until_state("pr_opened").await;
    let pulls = world.github.pulls(REPO);
    assert!(
        pulls.len() == 1 && !pulls[0].draft,
        "Could not measure the flow: expected one ready pull request, got {pulls:#?}"
    );
    let rows = world.audit_until("execution.timed").await;
    let at = |action: &str| -> i64 {
        rows.iter()
            .find(|r| r.action == action)
            .unwrap_or_else(|| panic!("no `{action}` in the audit log: {rows:#?}"))
            .at
    };
    let timed: Value = serde_json::from_str(
        &rows
            .iter()
            .find(|r| r.action == "execution.timed")
            .unwrap()
            .detail,
    )
    .unwrap();
    assert_eq!(timed["attempts"], 1, "one attempt was scripted: {timed}");
    let stages = timed["stages_ms"]
        .as_object()
        .unwrap_or_else(|| panic!("execution.timed holds no stages_ms: {timed}"))
        .iter()
        .map(|(name, ms)| (name.clone(), ms.as_f64().unwrap()))
        .collect();
    let (runs_after, seconds_after) = world.sandbox_runs().await;
    let mut forge_requests = world.forge_requests().await;
    for (route, n) in &requests_before {
        if let Some(after) = forge_requests.get_mut(route) {
            *after -= n;
        }
    }
    forge_requests.retain(|_, n| *n > 0);
    world.server.stop().await;

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Flow {
        label_answered: ms(label_answered),
        to_session: (at("session.started") - sent_ms) as f64,
        planner: (at("contract.written") - at("session.started")) as f64,
        posting: (posted_ms - at("contract.written")) as f64,
        planning: ms(planning),
        to_approval: (at("contract.approved") - approve_ms) as f64,
        stages,
        execution: ms(execution),
        sandbox_runs: runs_after - runs_before,
        sandbox_ms: (seconds_after - seconds_before) * 1000.0,
        forge_requests,
    }
}

/// The unavoidable work of one round, done directly, in milliseconds.
#[derive(Debug, Default, Clone)]
struct Baseline {
    clones: f64,
    checks_plain: f64,
    checks_bwrap: f64,
}

impl Baseline {
    fn plain(&self) -> f64 {
        self.clones + self.checks_plain
    }

    fn sandboxed(&self) -> f64 {
        self.clones + self.checks_bwrap
    }
}

fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("Could not open {} to the sandbox user: {e}", dir.display()));
}

fn clone(bare: &Path, into: &Path) {
    support::git_http::git(
        into.parent().unwrap(),
        &[
            "clone",
            "--quiet",
            "--no-local",
            bare.to_str().unwrap(),
            into.to_str().unwrap(),
        ],
    );
}

/// The executor's whole edit.
fn fix(checkout: &Path) {
    let file = checkout.join("calc.py");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("return a - b", "return a + b")).unwrap();
}

/// The check as a plain process with the environment sandboxed commands get; whether it
/// passed.
fn check_plain(checkout: &Path) -> bool {
    let output = std::process::Command::new("sh")
        .args(["-c", UNITTEST])
        .current_dir(checkout)
        .env_clear()
        .envs(sandbox::base_env(checkout))
        .output()
        .unwrap_or_else(|e| panic!("Could not run `{UNITTEST}`: {e}"));
    output.status.success()
}

async fn check_bwrap(bwrap: &Bwrap, checkout: &Path) -> bool {
    let command = sandbox::Command::new(checkout, vec!["sh".into(), "-c".into(), UNITTEST.into()]);
    let output = bwrap
        .run(&command)
        .await
        .unwrap_or_else(|e| panic!("Could not run `{UNITTEST}` in bubblewrap: {e}"));
    output.exit.success()
}

fn baseline_run(rt: &tokio::runtime::Runtime, bare: &Path, scratch: &Path) -> Baseline {
    let round = tempfile::tempdir_in(scratch).unwrap();
    open_to_all(round.path());
    let (result, base) = (round.path().join("result"), round.path().join("base"));

    let started = Instant::now();
    clone(bare, &result);
    clone(bare, &base);
    let clones = started.elapsed();
    let started = Instant::now();
    let base_passed = check_plain(&base);
    fix(&result);
    let result_passed = check_plain(&result);
    let checks_plain = started.elapsed();
    assert!(
        !base_passed && result_passed,
        "the check must fail on the base and pass on the fix (plain)"
    );

    // Fresh checkouts, so no bytecode the plain runs left behind helps the sandboxed ones;
    // the round's folder is hidden as planwright hides DATA_DIR around its workspaces.
    let (result, base) = (
        round.path().join("result-bwrap"),
        round.path().join("base-bwrap"),
    );
    clone(bare, &result);
    clone(bare, &base);
    fix(&result);
    let bwrap = Bwrap::new(vec![round.path().to_owned()]).unwrap();
    let started = Instant::now();
    let (base_passed, result_passed) = rt.block_on(async {
        (
            check_bwrap(&bwrap, &base).await,
            check_bwrap(&bwrap, &result).await,
        )
    });
    let checks_bwrap = started.elapsed();
    assert!(
        !base_passed && result_passed,
        "the check must fail on the base and pass on the fix (bubblewrap)"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Baseline {
        clones: ms(clones),
        checks_plain: ms(checks_plain),
        checks_bwrap: ms(checks_bwrap),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    let rounds: usize = std::env::var("PLANWRIGHT_BENCH_OVERHEAD_RUNS")
        .ok()
        .map(|v| {
            v.parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("Cannot use PLANWRIGHT_BENCH_OVERHEAD_RUNS={v}: give a positive number of rounds"))
        })
        .unwrap_or(10);
    if let Err(e) = Bwrap::new(Vec::new()) {
        panic!("Cannot run the overhead benchmark: planwright executes only in the sandbox. {e}");
    }
    let python = std::process::Command::new("python3")
        .arg("--version")
        .env_clear()
        .envs(sandbox::base_env(Path::new("/")))
        .output();
    assert!(
        python.as_ref().is_ok_and(|o| o.status.success()),
        "Cannot run the overhead benchmark: python3 is not on the sandbox's PATH \
         (/usr/local/bin:/usr/bin:/bin): {python:?}"
    );

    // The server's own log, to see where a slow stage spends its time.
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
    let scratch = tempfile::tempdir().unwrap();
    open_to_all(scratch.path());
    let bare = scratch.path().join("upstream.git");
    support::git_http::init_bare_repo(&bare, "main", &files(SETTINGS));

    eprintln!("overhead: one warm-up round, then {rounds} measured");
    rt.block_on(planwright_run("warmup", Variant::Fix));
    baseline_run(&rt, &bare, scratch.path());
    let mut flows = Vec::new();
    let mut proving = Vec::new();
    let mut apart = Vec::new();
    let mut baselines = Vec::new();
    for round in 0..rounds {
        // Alternating which goes first spreads any drift of the machine over all four.
        let mut order = [0, 1, 2, 3];
        order.rotate_left(round % 4);
        for which in order {
            match which {
                0 => flows.push(rt.block_on(planwright_run(&round.to_string(), Variant::Fix))),
                1 => proving.push(rt.block_on(planwright_run(
                    &format!("proving-{round}"),
                    Variant::Proving,
                ))),
                2 => apart
                    .push(rt.block_on(planwright_run(&format!("apart-{round}"), Variant::Apart))),
                _ => baselines.push(baseline_run(&rt, &bare, scratch.path())),
            }
        }
        for (f, variant) in [
            (flows.last().unwrap(), Variant::Fix),
            (proving.last().unwrap(), Variant::Proving),
            (apart.last().unwrap(), Variant::Apart),
        ] {
            assert_eq!(
                f.sandbox_runs,
                variant.check_runs(),
                "planwright ran {} sandboxed commands for {variant:?} where {} were expected; \
                 the comparison no longer holds",
                f.sandbox_runs,
                variant.check_runs()
            );
        }
        eprintln!(
            "round {round}: planwright {:.0} ms (with the proof {:.0} ms), baseline {:.0} ms plain, {:.0} ms bwrap",
            flows.last().unwrap().total(),
            proving.last().unwrap().total(),
            baselines.last().unwrap().plain(),
            baselines.last().unwrap().sandboxed()
        );
    }

    let flow = |f: fn(&Flow) -> f64| median(flows.iter().map(f).collect());
    let base = |f: fn(&Baseline) -> f64| median(baselines.iter().map(f).collect());
    let mut stage_names: Vec<String> = Vec::new();
    for f in &flows {
        for (name, _) in &f.stages {
            if !stage_names.contains(name) {
                stage_names.push(name.clone());
            }
        }
    }
    // The order the execute job runs them in; unknown names go last.
    let order = [
        "workspaces",
        "executor+baseline",
        "verify",
        "review",
        "publish",
    ];
    stage_names.sort_by_key(|n| order.iter().position(|o| o == n).unwrap_or(order.len()));

    let total = flow(Flow::total);
    let plain = base(Baseline::plain);
    let sandboxed = base(Baseline::sandboxed);
    let mut rows: Vec<(String, f64)> = vec![
        (
            "planning: label → contract comment".into(),
            flow(|f| f.planning),
        ),
        (
            "  label webhook answered".into(),
            flow(|f| f.label_answered),
        ),
        (
            "  webhook sent → session started".into(),
            flow(|f| f.to_session),
        ),
        (
            "  session started → contract stored".into(),
            flow(|f| f.planner),
        ),
        (
            "  contract stored → comment posted".into(),
            flow(|f| f.posting),
        ),
        (
            "execution: /approve → pull request".into(),
            flow(|f| f.execution),
        ),
        (
            "  /approve sent → approval recorded".into(),
            flow(|f| f.to_approval),
        ),
    ];
    for name in &stage_names {
        rows.push((
            format!("  {name}"),
            median(flows.iter().map(|f| f.stage(name)).collect()),
        ));
    }
    rows.extend([
        (
            "  rest (job pickup, config, status, commit)".into(),
            flow(Flow::execution_rest),
        ),
        (
            "  (sandboxed commands, summed)".into(),
            flow(|f| f.sandbox_ms),
        ),
        ("planwright: webhook → pull request".into(), total),
        (
            "baseline: git clone --no-local ×2".into(),
            base(|b| b.clones),
        ),
        (
            format!("baseline: check ×{CHECK_RUNS}, plain"),
            base(|b| b.checks_plain),
        ),
        (
            format!("baseline: check ×{CHECK_RUNS}, bwrap"),
            base(|b| b.checks_bwrap),
        ),
        ("baseline: clones + checks, plain".into(), plain),
        ("baseline: clones + checks, bwrap".into(), sandboxed),
    ]);

    println!(
        "overhead: median of {rounds} rounds (round-robin with the baseline), milliseconds; \
         check = `{UNITTEST}`"
    );
    let width = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    for (name, ms) in &rows {
        let pad = width - name.chars().count();
        println!("{name}{} {ms:>9.1}", " ".repeat(pad));
    }
    let paired = |b: fn(&Baseline) -> f64| {
        median(
            flows
                .iter()
                .zip(&baselines)
                .map(|(f, x)| f.total() / b(x))
                .collect(),
        )
    };
    println!(
        "ratio webhook → PR, planwright / baseline: {:.2} (plain), {:.2} (bwrap); \
         median of per-round ratios: {:.2} (plain), {:.2} (bwrap)",
        total / plain,
        total / sandboxed,
        paired(Baseline::plain),
        paired(Baseline::sandboxed)
    );
    // The forge calls of one flow (the same every round: the flow is scripted).
    let calls = &flows.last().unwrap().forge_requests;
    println!(
        "forge API calls per flow (label → PR): {} (installation tokens octocrab renews inside its client not included)",
        calls.values().sum::<u64>()
    );
    let mut by_count: Vec<(&String, &u64)> = calls.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (route, n) in by_count {
        println!("  {n:>3}  {route}");
    }
    let proving_execution = median(proving.iter().map(|f| f.execution).collect());
    println!(
        "with the fail-to-pass proof and the re-runs (the fix and a regression test, default \
         flaky_reruns): execution {:.1} ms against {:.1} ms for the fix alone without re-runs, \
         +{:.1} ms; median of per-round ratios {:.2}",
        proving_execution,
        flow(|f| f.execution),
        median(
            proving
                .iter()
                .zip(&flows)
                .map(|(p, f)| p.execution - f.execution)
                .collect()
        ),
        median(
            proving
                .iter()
                .zip(&flows)
                .map(|(p, f)| p.execution / f.execution)
                .collect()
        )
    );
    println!(
        "with the new test module run apart from the old tests (the same fix and test, in a \
         new file): execution {:.1} ms against {:.1} ms with the test in the old file, \
         +{:.1} ms; median of per-round ratios {:.2}",
        median(apart.iter().map(|f| f.execution).collect()),
        proving_execution,
        median(
            apart
                .iter()
                .zip(&proving)
                .map(|(a, p)| a.execution - p.execution)
                .collect()
        ),
        median(
            apart
                .iter()
                .zip(&proving)
                .map(|(a, p)| a.execution / p.execution)
                .collect()
        )
    );
    println!(
        "sandbox cost of the checks: {:.1} ms; planwright on top of the sandboxed baseline: {:.1} ms",
        base(|b| b.checks_bwrap - b.checks_plain),
        median(
            flows
                .iter()
                .zip(&baselines)
                .map(|(f, b)| f.total() - b.sandboxed())
                .collect()
        )
    );
}
