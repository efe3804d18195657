//! `planwright eval` as a maintainer runs it: the real binary over real upstream fixes
//! (the shared `real-tasks` fixtures), each arm's scripted models on their own server,
//! runs through the whole flow in the sandbox and the Python image, and every result
//! graded with the task's hidden tests apart from planwright's verdict. A gold arm writes
//! the upstream fix, a wrong arm only its tests, a cheating arm the tests with the failing
//! one skipped.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

use super::real_tasks::{
    IMAGE, Instance, Work, mark_skipped, real_tasks, tracked_files, written_files,
};
use crate::support::browser::Browser;
use crate::support::model_server::{ModelServer, Step};
use crate::support::planwright_command;
use crate::support::python_image::push_python_image;
use crate::support::registry::{Access, Registry};
use crate::support::world::verdict;

/// The task the suite evaluates: the smallest project's fix, to keep the suite's time.
const TASK: &str = "toolz-5a7e078c";

/// A copy of the fixtures' layout holding only `ids`, in `dir`.
fn layout_with(dir: &Path, ids: &[&str]) -> PathBuf {
    let root = dir.join("tasks");
    std::fs::create_dir_all(root.join("instances")).unwrap();
    std::fs::copy(real_tasks().join("repos.json"), root.join("repos.json")).unwrap();
    std::os::unix::fs::symlink(real_tasks().join("bundles"), root.join("bundles")).unwrap();
    for id in ids {
        let to = root.join("instances").join(id);
        std::fs::create_dir_all(&to).unwrap();
        for file in ["instance.json", "test.patch", "fix.patch"] {
            std::fs::copy(
                real_tasks().join("instances").join(id).join(file),
                to.join(file),
            )
            .unwrap();
        }
    }
    root
}

/// What the cheating arm writes: the upstream tests with the failing ones skipped.
fn cheating_files(instance: &Instance) -> Vec<(String, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let tree = instance.checkout(scratch.path());
    let base = tracked_files(&tree);
    let patch = instance.dir.join("test.patch");
    crate::support::git_http::git(&tree, &["apply", patch.to_str().unwrap()]);
    for test in &instance.fail_to_pass {
        mark_skipped(&tree, test);
    }
    instance
        .test_files
        .iter()
        .filter_map(|path| {
            let after = std::fs::read_to_string(tree.join(path)).unwrap();
            let before = base.iter().find(|(p, _)| p == path).map(|(_, t)| t);
            (before != Some(&after)).then(|| (path.clone(), after))
        })
        .collect()
}

/// The planner's contract for the task, with the evaluation's test command.
fn contract(instance: &Instance) -> Value {
    let files: Vec<Value> = instance
        .fix_files
        .iter()
        .chain(&instance.test_files)
        .map(|p| json!({"path": p, "action": "modify", "why": "the fix and its tests"}))
        .collect();
    json!({
        "summary": format!("{}.", instance.subject),
        "diagnosis": {
            "hypothesis": "The upstream commit's fix applies to this base.",
            "evidence": [{"path": instance.fix_files[0], "note": "what the issue is about"}]
        },
        "change": {"goal": "Make the fix, with its regression tests.", "files": files},
        "verification": {
            "commands": [format!("{} -v", instance.test)],
            "new_tests": instance.fail_to_pass,
        },
        "routing": {"risk": "low", "max_attempts": 1}
    })
}

/// One run's answers: the contract, the executor's writes of `written`, and a reviewer
/// who accepts.
fn run_script(instance: &Instance, written: &[(String, String)]) -> Vec<Step> {
    let mut script = vec![
        Step::tool_call("p1", "submit_contract", contract(instance))
            .when_tools(&["submit_contract"]),
    ];
    for (i, (path, content)) in written.iter().enumerate() {
        script.push(
            Step::tool_call(
                &format!("e{i}"),
                "write_file",
                json!({"path": path, "content": content}),
            )
            .when_tools(&["finish", "write_file"]),
        );
    }
    script
        .push(Step::tool_call("ef", "finish", json!({"summary": "Done."})).when_tools(&["finish"]));
    script.push(verdict(true, "The change the contract asks for."));
    script
}

/// An arm: its scripted models, run `runs` times in a row, and its settings file.
async fn arm(dir: &Path, name: &str, one_run: Vec<Step>, runs: usize) -> (ModelServer, PathBuf) {
    let script: Vec<Step> = (0..runs).flat_map(|_| one_run.clone()).collect();
    let models = ModelServer::start(script).await;
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            "planner_model = \"anthropic:claude-sonnet-4-5\"\n\
             executor_model = \"anthropic:claude-sonnet-4-5\"\n\
             anthropic_api_key = \"sk-ant-eval-{name}\"\n\
             anthropic_base_url = \"{}\"\n",
            models.anthropic_base()
        ),
    )
    .unwrap();
    (models, file)
}

/// The Python image on a registry of the test's own; the registry and the reference.
async fn image() -> (Registry, String) {
    let registry = Registry::start(Access::Anonymous).await;
    push_python_image(
        &registry,
        &real_tasks().join("image-requirements.txt"),
        IMAGE,
    );
    let reference = registry.reference(IMAGE);
    (registry, reference)
}

/// Runs `planwright eval ARGS` in `cwd`.
async fn eval(cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = planwright_command();
    cmd.current_dir(cwd).arg("eval").args(args);
    // A guard against a hang, not a measure of speed.
    tokio::time::timeout(
        Duration::from_secs(1500),
        tokio::process::Command::from(cmd).output(),
    )
    .await
    .expect("eval finishes")
    .expect("eval runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn report(out: &Path, name: &str) -> Value {
    let path = out.join(name).join("report.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn arm_of<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["arms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no arm {name}: {report:#}"))
}

#[tokio::test]
async fn each_arm_is_graded_apart_from_planwright_and_the_verdicts_fall_in_their_cells() {
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance::load(TASK);
    let tasks = layout_with(dir.path(), &[TASK]);
    let (_registry, reference) = image().await;
    let (gold, gold_file) = arm(
        dir.path(),
        "gold",
        run_script(&instance, &written_files(&instance, Work::Fix)),
        1,
    )
    .await;
    let (wrong, wrong_file) = arm(
        dir.path(),
        "wrong",
        run_script(&instance, &written_files(&instance, Work::TestsWithoutFix)),
        1,
    )
    .await;
    let (cheat, cheat_file) = arm(
        dir.path(),
        "cheat",
        run_script(&instance, &cheating_files(&instance)),
        1,
    )
    .await;
    let out = dir.path().join("out");
    let started = std::time::Instant::now();
    let ran = eval(
        dir.path(),
        &[
            tasks.to_str().unwrap(),
            "--arm",
            &format!("gold={}", gold_file.display()),
            "--arm",
            &format!("wrong={}", wrong_file.display()),
            "--arm",
            &format!("cheat={}", cheat_file.display()),
            "--image",
            &reference,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    let (stdout, stderr) = (text(&ran.stdout), text(&ran.stderr));
    eprintln!("three arms on {TASK} in {:.0?}", started.elapsed());
    assert_eq!(
        ran.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for n in 1..=3 {
        assert!(
            stderr.contains(&format!("planwright eval: [{n}/3] {TASK} · ")),
            "no progress line {n}:\n{stderr}"
        );
    }
    let report = report(&out, "tasks");
    let account = format!("{report:#}\nstderr:\n{stderr}");
    let cells = |arm: &str| {
        let m = &arm_of(&report, arm)["verdicts"];
        [
            m["ready_resolved"].as_u64().unwrap(),
            m["ready_unresolved"].as_u64().unwrap(),
            m["draft_resolved"].as_u64().unwrap(),
            m["draft_unresolved"].as_u64().unwrap(),
        ]
    };
    assert_eq!(cells("gold"), [1, 0, 0, 0], "{account}");
    assert_eq!(cells("wrong"), [0, 0, 0, 1], "{account}");
    assert_eq!(cells("cheat"), [0, 0, 0, 1], "{account}");
    assert_eq!(arm_of(&report, "gold")["resolved_rate"], 100.0, "{account}");
    for name in ["wrong", "cheat"] {
        assert_eq!(arm_of(&report, name)["resolved_rate"], 0.0, "{account}");
    }
    // The cheat's skipped test is a fail-to-pass test the grade found not passing.
    let cheat_run = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["arm"] == "cheat")
        .unwrap();
    assert_eq!(
        cheat_run["graded"]["fail_to_pass_failed"],
        json!(instance.fail_to_pass),
        "{account}"
    );
    let gold_arm = arm_of(&report, "gold");
    assert!(
        gold_arm["planner_input_tokens"].as_i64().unwrap() > 0,
        "{account}"
    );
    assert!(gold_arm["cost_microusd"].as_i64().unwrap() > 0, "{account}");
    let markdown = std::fs::read_to_string(out.join("tasks/report.md")).unwrap();
    eprintln!("{markdown}");
    assert!(
        markdown.contains("| gold | 1/1 | 100.0% | 0 |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("Planner input tokens, gold: "),
        "{markdown}"
    );
    let html = std::fs::read_to_string(out.join("tasks/report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("<circle"), "{html}");
    // The page in a real browser: one point per arm on the chart, and the picture the
    // docs show (left in target/screenshots/ as the page tests leave theirs).
    let browser = Browser::start(1100, 1400).await;
    browser
        .go(&format!(
            "file://{}",
            out.join("tasks/report.html").display()
        ))
        .await;
    assert_eq!(browser.count("#chart svg circle").await, 3);
    assert!(browser.text("table").await.contains("gold"));
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    browser.screenshot(&shots.join("eval-report.png")).await;
    for models in [&gold, &wrong, &cheat] {
        assert_eq!(models.unused_steps(), 0, "{account}");
    }
    // The hidden tests reached no model.
    let hidden = instance_test_line(&instance);
    for models in [&gold, &wrong, &cheat] {
        for request in models.requests() {
            assert!(
                !request.body.to_string().contains(&hidden),
                "a model saw the hidden test patch"
            );
        }
    }
}

/// The test patch's `index` line: found only in the patch itself, never in a tree (the
/// executors write the tests' text, which models then see as their own calls).
fn instance_test_line(instance: &Instance) -> String {
    let patch = std::fs::read_to_string(instance.dir.join("test.patch")).unwrap();
    patch
        .lines()
        .find(|l| l.starts_with("index "))
        .expect("an index line")
        .to_owned()
}

#[tokio::test]
async fn a_test_patch_that_does_not_apply_or_a_missing_base_is_no_verdict_and_a_bad_line_is_skipped()
 {
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance::load(TASK);
    let (_registry, reference) = image().await;
    let (gold, gold_file) = arm(
        dir.path(),
        "gold",
        run_script(&instance, &written_files(&instance, Work::Fix)),
        1,
    )
    .await;
    let bundle = real_tasks().join("bundles/toolz.bundle");
    let base = format!("refs/heads/base/{}", &instance.parent[..12]);
    let line = |id: &str, base: &str, patch: &str| {
        json!({
            "instance_id": id,
            "repo": bundle,
            "base_commit": base,
            "problem_statement": format!("{}\n\nPlease fix it.", instance.subject),
            "test_patch": patch,
            "FAIL_TO_PASS": serde_json::to_string(&instance.fail_to_pass).unwrap(),
            "PASS_TO_PASS": [],
            "test_cmd": format!("{} -v", instance.test),
        })
        .to_string()
    };
    let broken = "diff --git a/toolz/tests/test_itertoolz.py b/toolz/tests/test_itertoolz.py\n\
                  --- a/toolz/tests/test_itertoolz.py\n+++ b/toolz/tests/test_itertoolz.py\n\
                  @@ -1,3 +1,3 @@\n-this line is not there\n+nor is this\n context\n";
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        format!(
            "{}\n{{not json\n{}\n",
            line("broken-patch", &base, broken),
            line("missing-base", "refs/heads/no-such-base", broken)
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let ran = eval(
        dir.path(),
        &[
            tasks.to_str().unwrap(),
            "--arm",
            &format!("gold={}", gold_file.display()),
            "--image",
            &reference,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    let (stdout, stderr) = (text(&ran.stdout), text(&ran.stderr));
    assert_eq!(
        ran.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("planwright eval: skipped line 2: not JSON"),
        "{stderr}"
    );
    let report = report(&out, "tasks");
    let account = format!("{report:#}\nstderr:\n{stderr}");
    let run = |id: &str| {
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["task"] == id)
            .unwrap_or_else(|| panic!("no run of {id}: {account}"))
            .clone()
    };
    let broken = run("broken-patch");
    assert_eq!(broken["graded"]["grade"], "no_verdict", "{account}");
    assert!(
        broken["graded"]["reason"]
            .as_str()
            .unwrap()
            .contains("the test patch does not apply"),
        "{account}"
    );
    let missing = run("missing-base");
    assert_eq!(missing["graded"]["grade"], "no_verdict", "{account}");
    assert!(
        missing["graded"]["reason"]
            .as_str()
            .unwrap()
            .contains("the base commit `refs/heads/no-such-base` is not in"),
        "{account}"
    );
    let gold_arm = arm_of(&report, "gold");
    assert_eq!(gold_arm["no_verdict"], 2, "{account}");
    assert_eq!(gold_arm["resolved_rate"], Value::Null, "{account}");
    // Only the task that could start was paid for.
    assert_eq!(gold.unused_steps(), 0, "{account}");
}

#[tokio::test]
async fn an_evaluation_stopped_by_its_budget_resumes_without_paying_twice_and_reports_the_spread() {
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance::load(TASK);
    let tasks = layout_with(dir.path(), &[TASK]);
    let (_registry, reference) = image().await;
    let one_run = run_script(&instance, &written_files(&instance, Work::Fix));
    let steps = one_run.len();
    let (gold, gold_file) = arm(dir.path(), "gold", one_run, 3).await;
    let out = dir.path().join("out");
    let args = |budget: Option<&str>| {
        let mut args = vec![
            tasks.display().to_string(),
            "--arm".into(),
            format!("gold={}", gold_file.display()),
            "--image".into(),
            reference.clone(),
            "--out".into(),
            out.display().to_string(),
            "--repeat".into(),
            "3".into(),
        ];
        if let Some(budget) = budget {
            args.extend(["--budget".into(), budget.into()]);
        }
        args
    };
    let first = args(Some("0.000001"));
    let first = eval(
        dir.path(),
        &first.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let stdout = text(&first.stdout);
    assert_eq!(
        first.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&first.stderr)
    );
    assert!(stdout.contains("2 run(s) not started"), "{stdout}");
    assert_eq!(gold.requests().len(), steps, "the first run alone was paid");
    let second = args(None);
    let second = eval(
        dir.path(),
        &second.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let (stdout, stderr) = (text(&second.stdout), text(&second.stderr));
    assert_eq!(
        second.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // The finished repeat was not run again: three runs' worth of calls, no more.
    assert_eq!(gold.requests().len(), 3 * steps, "{stderr}");
    assert_eq!(gold.unused_steps(), 0);
    assert!(stderr.contains("[2/2]"), "{stderr}");
    let report = report(&out, "tasks");
    let gold_arm = arm_of(&report, "gold");
    assert_eq!(
        gold_arm["repeat_rates"],
        json!([100.0, 100.0, 100.0]),
        "{report:#}"
    );
    assert_eq!(gold_arm["spread"], 0.0, "{report:#}");
    let markdown = std::fs::read_to_string(out.join("tasks/report.md")).unwrap();
    assert!(
        markdown.contains("| gold | 3/3 | 100.0% (± 0.0 over 3 repeats) | 0 |"),
        "{markdown}"
    );
}

/// An outcome row as the monolithic test reads it: repository, source, verified,
/// judged, model, planner tokens, executor tokens.
type OutcomeRow = (String, String, i64, i64, Option<String>, i64, i64);

#[tokio::test]
async fn the_monolithic_arm_gives_one_model_the_raw_issue_and_its_graded_run_feeds_routing() {
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance::load(TASK);
    let tasks = layout_with(dir.path(), &[TASK]);
    let (_registry, reference) = image().await;
    // The one model's run: the upstream fix written with the executor's tools, no
    // contract asked for and no reviewer.
    let mut script: Vec<Step> = written_files(&instance, Work::Fix)
        .iter()
        .enumerate()
        .map(|(i, (path, content))| {
            Step::tool_call(
                &format!("m{i}"),
                "write_file",
                json!({"path": path, "content": content}),
            )
            .when_tools(&["finish", "write_file"])
        })
        .collect();
    script
        .push(Step::tool_call("mf", "finish", json!({"summary": "Done."})).when_tools(&["finish"]));
    let steps = script.len();
    let models = ModelServer::start(script).await;
    // The monolithic arm calls its model with the evaluation's own settings.
    let config = dir.path().join("eval.toml");
    std::fs::write(
        &config,
        format!(
            "anthropic_api_key = \"sk-ant-eval-mono\"\nanthropic_base_url = \"{}\"\n",
            models.anthropic_base()
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let ran = eval(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            tasks.to_str().unwrap(),
            "--arm",
            "mono=monolithic:anthropic:claude-sonnet-4-5",
            "--image",
            &reference,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    let (stdout, stderr) = (text(&ran.stdout), text(&ran.stderr));
    assert_eq!(
        ran.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = report(&out, "tasks");
    let account = format!("{report:#}\nstderr:\n{stderr}");
    let mono = arm_of(&report, "mono");
    assert_eq!(mono["resolved"], 1, "{account}");
    assert_eq!(mono["resolved_rate"], 100.0, "{account}");
    assert_eq!(mono["planner_input_tokens"], 0, "{account}");
    let roles = mono["roles"].as_array().unwrap();
    let role_names: Vec<&str> = roles.iter().map(|r| r["role"].as_str().unwrap()).collect();
    assert_eq!(role_names, ["executor"], "{account}");
    assert!(roles[0]["cost_microusd"].as_i64().unwrap() > 0, "{account}");
    assert_eq!(
        mono["cost_microusd"], roles[0]["cost_microusd"],
        "{account}"
    );
    // planwright gave no verdict: the confusion matrix does not apply.
    assert_eq!(mono["verdicts"], Value::Null, "{account}");
    let run = &report["runs"][0];
    assert_eq!(run["verdict"], "none", "{account}");
    let markdown = std::fs::read_to_string(out.join("tasks/report.md")).unwrap();
    assert!(
        markdown.contains("| mono | n/a | n/a | n/a | n/a |"),
        "{markdown}"
    );
    // The model saw the issue as its reporter wrote it, not a contract.
    assert_eq!(models.unused_steps(), 0, "{account}");
    let requests = models.requests();
    assert_eq!(requests.len(), steps, "{account}");
    let first = requests[0].body.to_string();
    for piece in [
        format!("{}\n\nIn ", instance.subject),
        format!(
            ", make the change its commit {} made: {}",
            &instance.commit[..12],
            instance.subject
        ),
    ] {
        let escaped = serde_json::to_string(&piece).unwrap();
        assert!(
            first.contains(escaped.trim_matches('"')),
            "the first request has no problem statement: {first}"
        );
    }
    assert!(!first.contains("Build contract"), "{first}");
    let hidden = instance_test_line(&instance);
    assert!(
        requests
            .iter()
            .all(|r| !r.body.to_string().contains(&hidden))
    );
    // The graded run is an outcome of the task's repository, from the evaluation.
    let db = planwright::store::Db::open(&format!("sqlite://{}/planwright.db", out.display()))
        .await
        .unwrap();
    let rows: Vec<OutcomeRow> = sqlx::query_as(
        "SELECT repo, source, verified, judged, model, planner_tokens, executor_tokens \
         FROM attempt_outcomes",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (repo, source, verified, judged, model, planner, executor) = rows[0].clone();
    assert_eq!(repo, "eval/toolz");
    assert_eq!(source, "eval");
    assert_eq!((verified, judged), (1, 1));
    assert_eq!(model.as_deref(), Some("anthropic:claude-sonnet-4-5"));
    assert_eq!(planner, 0);
    assert!(executor > 0);
}
