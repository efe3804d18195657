//! One web process and two worker processes of one deployment on one database, as an
//! operator runs them past one machine: the in-process server takes the webhooks
//! (`--role web`), two `planwright serve --role worker` processes, each with a DATA_DIR of
//! its own, run the jobs. A worker killed mid-executor or while publishing, or told to
//! stop, leaves the run to the other, which carries it to one pull request with one commit
//! for the round and one check.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use planwright::event::ForgeKind;
use planwright::server::Role;
use planwright::store::jobs::{self, JobState};

use crate::support::calc::{ASKS_THEN_FIXES, CALC, TEST_CALC, UNITTEST};
use crate::support::model_server::Step;
use crate::support::world::{Fake, World, submit_calc, verdict};
use crate::support::{self, eventually, eventually_within};

/// A `planwright serve --role worker` process, killed when dropped.
struct Worker {
    child: Child,
    data: PathBuf,
    /// Where it listens (`/healthz`, `/readyz`).
    addr: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    /// Started with the deployment's environment and a DATA_DIR of its own under `root`.
    fn start(world: &World, root: &Path, name: &str, extra: &[(&str, &str)]) -> Worker {
        let data = root.join(name);
        std::fs::create_dir_all(&data).unwrap();
        let mut cmd = support::planwright_command();
        cmd.args(["serve", "--role", "worker"])
            .envs(world.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("PLANWRIGHT_DATA_DIR", &data)
            .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
            .env("PLANWRIGHT_LOG_FORMAT", "json")
            .envs(extra.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("the worker starts");
        let addr = support::listening_address(&mut child);
        Worker { child, data, addr }
    }

    /// Whether the checkout at `dir` is one of this worker's.
    fn holds(&self, dir: &str) -> bool {
        Path::new(dir).starts_with(&self.data)
    }
}

/// The calc project with `executor` as its command executor and a web server in this
/// process; workers are started by the test.
async fn web_only(script: Vec<Step>, executor: &str) -> (World, tempfile::TempDir) {
    let settings =
        format!("test: {UNITTEST}\nexecutor: command\nexecutor_command: >-\n  {executor}\n");
    let files = [
        ("calc.py", CALC),
        ("test_calc.py", TEST_CALC),
        (World::settings_path(ForgeKind::Github), settings.as_str()),
    ];
    let env = [
        ("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5"),
        ("PLANWRIGHT_SANDBOX_RELAY", env!("CARGO_BIN_EXE_planwright")),
        ("PLANWRIGHT_JOB_RETRY_BASE_MS", "200"),
    ];
    let world = World::start_as(ForgeKind::Github, script, &files, &env, Role::Web).await;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    (world, root)
}

/// [`web_only`] with two workers started.
async fn deployment(
    script: Vec<Step>,
    executor: &str,
    worker_env: &[(&str, &str)],
) -> (World, tempfile::TempDir, [Worker; 2]) {
    let (world, root) = web_only(script, executor).await;
    let workers = [
        Worker::start(&world, root.path(), "worker-a", worker_env),
        Worker::start(&world, root.path(), "worker-b", worker_env),
    ];
    (world, root, workers)
}

/// The one pull request holds one commit over the base, the fix, with one check of ours;
/// no job was dead-lettered.
async fn one_pull_one_commit_one_check(world: &World) {
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(!pulls[0].draft);
    let head = world.upstream(&["rev-parse", &pulls[0].head]);
    let main = world.upstream(&["rev-parse", "main"]);
    assert_eq!(world.upstream(&["rev-parse", &format!("{head}^")]), main);
    // Nothing else was pushed anywhere: no commit of an interrupted attempt.
    assert_eq!(
        world.upstream(&["rev-list", "--count", "--all", &format!("^{main}")]),
        "1"
    );
    let calc = world.upstream(&["show", &format!("{head}:calc.py")]);
    assert!(
        calc.contains("a + b") && !calc.contains("# started"),
        "{calc}"
    );
    assert_eq!(world.checks(&head).len(), 1, "{:?}", world.checks(&head));
    let dead: Vec<_> = jobs::list(&world.server.db, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.state == JobState::Dead)
        .collect();
    assert!(dead.is_empty(), "{dead:#?}");
}

/// Waits (a minute at most: a lease may have to lapse first) for the pull request.
async fn pull_request_opened(world: &World) {
    eventually_within("the pull request", Duration::from_secs(60), || async {
        world
            .find_session()
            .await
            .filter(|s| s.state.as_str() == "pr_opened")
    })
    .await;
}

/// The run under way and the worker whose checkout it is.
async fn running_on(world: &World, workers: &[Worker; 2]) -> (usize, String) {
    eventually("the attempt to make a start", || async {
        let runs = world.runs().await;
        let run = runs.iter().find(|r| r.state.as_str() == "running")?;
        let dir = run.workspace.clone()?;
        let calc = Path::new(&dir).join("run/repo/calc.py");
        let started = std::fs::read_to_string(calc).ok()?.contains("# started");
        let owner = workers.iter().position(|w| w.holds(&dir))?;
        started.then_some((owner, dir))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_executor_leaves_the_run_to_the_other_with_nothing_published_twice() {
    let script = vec![
        submit_calc(2),
        Step::text("wait").when_last_contains("go on?"),
        Step::text("proceed").when_last_contains("go on?"),
        verdict(true, "Fixed."),
    ];
    let lease = [("PLANWRIGHT_JOB_LEASE_SECS", "3")];
    let (world, _root, mut workers) = deployment(script, ASKS_THEN_FIXES, &lease).await;
    world.approve_calc().await;
    let (owner, _) = running_on(&world, &workers).await;
    workers[owner].child.kill().unwrap();
    workers[owner].child.wait().unwrap();
    let killed = Instant::now();
    eventually_within(
        "the other worker to take the run over",
        Duration::from_secs(60),
        || async {
            let runs = world.runs().await;
            (runs.len() == 2).then_some(())
        },
    )
    .await;
    let resumed = killed.elapsed();
    eprintln!("the killed worker's run resumed on the other after {resumed:?} (JOB_LEASE_SECS 3)");
    pull_request_opened(&world).await;
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["abandoned", "published"], "{runs:#?}");
    // Taken over by the other worker, in a checkout of its own.
    let other = &workers[1 - owner];
    assert!(
        other.holds(runs[1].workspace.as_deref().unwrap_or_default()),
        "{runs:#?}"
    );
    // The interrupted attempt was not the executor's: the same attempt ran again.
    assert_eq!(runs[1].attempt, 1);
    one_pull_one_commit_one_check(&world).await;
    world.server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_while_publishing_leaves_the_verified_result_to_the_other() {
    let script = vec![submit_calc(2), verdict(true, "As asked.")];
    let lease = [("PLANWRIGHT_JOB_LEASE_SECS", "3")];
    let fix = "sed -i 's/a - b/a + b/' calc.py";
    let (world, _root, mut workers) = deployment(script, fix, &lease).await;
    let Fake::Github(github) = &world.fake else {
        unreachable!("a GitHub deployment")
    };
    // The pull request cannot be opened: the worker that verified the result is killed
    // between pushing it and opening the pull request.
    for _ in 0..200 {
        github.refuse_next_body("POST", "\"head\":", 502);
    }
    world.approve_calc().await;
    let (owner, branch) = eventually("the verified result to be pushed", || async {
        let runs = world.runs().await;
        let run = runs.iter().find(|r| r.state.as_str() == "verified")?;
        let branch = run.branch.clone()?;
        let dir = run.workspace.clone()?;
        let owner = workers.iter().position(|w| w.holds(&dir))?;
        let pushed = world.upstream(&["branch", "--list", &branch]);
        (!pushed.trim().is_empty()).then_some((owner, branch))
    })
    .await;
    workers[owner].child.kill().unwrap();
    workers[owner].child.wait().unwrap();
    assert!(world.pulls().is_empty());
    github.clear_faults();
    pull_request_opened(&world).await;
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["published"], "{runs:#?}");
    assert_eq!(world.pulls()[0].head, branch);
    one_pull_one_commit_one_check(&world).await;
    world.server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_told_to_stop_hands_its_run_back_within_the_grace_period() {
    let script = vec![
        submit_calc(2),
        Step::text("wait").when_last_contains("go on?"),
        Step::text("proceed").when_last_contains("go on?"),
        verdict(true, "Fixed."),
    ];
    // A lease far longer than the test waits: only a run handed back is taken over.
    let grace = [
        ("PLANWRIGHT_JOB_LEASE_SECS", "600"),
        ("PLANWRIGHT_SHUTDOWN_GRACE_SECS", "2"),
    ];
    let (world, _root, mut workers) = deployment(script, ASKS_THEN_FIXES, &grace).await;
    world.approve_calc().await;
    let (owner, _) = running_on(&world, &workers).await;
    let told = Instant::now();
    support::signal(workers[owner].child.id(), "TERM");
    let status = loop {
        if let Some(status) = workers[owner].child.try_wait().unwrap() {
            break status;
        }
        assert!(
            told.elapsed() < Duration::from_secs(2 + 10),
            "the worker outlived its grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "the worker stopped {:?} after SIGTERM ({status})",
        told.elapsed()
    );
    pull_request_opened(&world).await;
    let runs = world.runs().await;
    let states: Vec<&str> = runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["abandoned", "published"], "{runs:#?}");
    one_pull_one_commit_one_check(&world).await;
    world.server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_sandbox_cannot_start_takes_no_runs_and_says_why() {
    let script = vec![submit_calc(2), verdict(true, "As asked.")];
    let (world, root) = web_only(script, "sed -i 's/a - b/a + b/' calc.py").await;
    // As in a pod whose seccomp or AppArmor profile refuses user namespaces.
    let refused = root.path().join("refused-bin");
    std::fs::create_dir_all(&refused).unwrap();
    let bwrap = refused.join("bwrap");
    std::fs::write(
        &bwrap,
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&bwrap, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", refused.display(), std::env::var("PATH").unwrap());
    let confined = Worker::start(&world, root.path(), "confined", &[("PATH", path.as_str())]);

    // Unready until its sandbox is checked, then unready saying what bubblewrap said.
    let text = eventually("the sandbox check's answer", || async {
        let ready = reqwest::get(format!("http://{}/readyz", confined.addr))
            .await
            .unwrap();
        assert_eq!(ready.status(), 503);
        let text = ready.text().await.unwrap();
        text.contains("cannot start").then_some(text)
    })
    .await;
    assert!(
        text.contains("takes no runs") && text.contains("setting up uid map: Permission denied"),
        "{text}"
    );

    // It plans, but leaves the run queued while it goes on with later work.
    world.approve_calc().await;
    let run = eventually("the run to be queued", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        all.into_iter().find(|j| j.lane.is_some())
    })
    .await;
    world
        .comment(
            &world.maintainer,
            "Thanks, looking forward to it.",
            "later-comment",
        )
        .await;
    eventually("a job queued after the run to be done", || async {
        let all = jobs::list(&world.server.db, None).await.unwrap();
        all.iter()
            .any(|j| j.lane.is_none() && j.created_at > run.created_at && j.state == JobState::Done)
            .then_some(())
    })
    .await;
    let all = jobs::list(&world.server.db, None).await.unwrap();
    let still = all.iter().find(|j| j.id == run.id).unwrap();
    assert_eq!(
        (still.state, still.attempts),
        (JobState::Queued, 0),
        "{still:#?}"
    );

    // A worker whose sandbox starts is ready, and takes it.
    let able = Worker::start(&world, root.path(), "able", &[]);
    eventually("the able worker to be ready", || async {
        let ready = reqwest::get(format!("http://{}/readyz", able.addr))
            .await
            .unwrap();
        (ready.status() == 200).then_some(())
    })
    .await;
    pull_request_opened(&world).await;
    let runs = world.runs().await;
    assert!(
        able.holds(runs[0].workspace.as_deref().unwrap_or_default()),
        "{runs:#?}"
    );
    one_pull_one_commit_one_check(&world).await;
    drop(confined);
    world.server.stop().await;
}
