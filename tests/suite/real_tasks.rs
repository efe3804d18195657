//! Upstream bug fixes of real Python projects through the whole pipeline, judged against
//! what pytest said of them. Each instance of the shared `real-tasks` fixtures (a base tree,
//! the fix's source and test patches, and pytest's truth) becomes a session on the GitHub
//! fake: the planner's contract names the patches' files and the tests that fail before
//! the fix and pass after it, the builtin executor writes the patched files, and the
//! repository's environment is a Debian image with Python and pytest that the suite builds.
//! The honest fix must give a ready pull request with every one of those tests proven, no
//! weakened test and no scope finding. Two controls per repository must not be ready: the
//! tests without the fix, and the fix with a passing test marked skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::git_http::git;
use crate::support::model_server::Step;
use crate::support::python_image::push_python_image;
use crate::support::registry::{Access, Registry};
use crate::support::world::{Pull, World, verdict};
use crate::support::{eventually_within, fixtures};
use planwright::event::ForgeKind;

/// How long one session may take to plan, or to run and publish: the image is pulled and
/// unpacked, and the project's whole suite runs on the base, the result and for the proof.
const PHASE_LIMIT: Duration = Duration::from_secs(15 * 60);
/// The image's name on each test's registry.
pub(super) const IMAGE: &str = "real-tasks/python:1";

pub(super) fn real_tasks() -> PathBuf {
    fixtures().join("real-tasks")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

/// One instance as its `instance.json` and its repository's entry in `repos.json` give it.
pub(super) struct Instance {
    pub(super) id: String,
    pub(super) dir: PathBuf,
    pub(super) bundle: PathBuf,
    pub(super) commit: String,
    pub(super) parent: String,
    pub(super) subject: String,
    pub(super) fix_files: Vec<String>,
    pub(super) test_files: Vec<String>,
    /// The repository's test command.
    pub(super) test: String,
    pub(super) fail_to_pass: Vec<String>,
    pub(super) skip_control_test: String,
    /// pytest's counts per state of the tree (`base`, `base+tests`, `fix`).
    pub(super) counts: Value,
}

impl Instance {
    pub(super) fn load(id: &str) -> Instance {
        let dir = real_tasks().join("instances").join(id);
        let instance = read_json(&dir.join("instance.json"));
        let repo = instance["repo"].as_str().expect("a repo").to_owned();
        let repos = read_json(&real_tasks().join("repos.json"));
        let test = repos[&repo]["test"]
            .as_str()
            .unwrap_or_else(|| panic!("repos.json has no test command for {repo}"))
            .to_owned();
        let truth = &instance["truth"];
        Instance {
            id: id.to_owned(),
            bundle: real_tasks().join("bundles").join(format!("{repo}.bundle")),
            dir,
            commit: instance["commit"].as_str().expect("a commit").to_owned(),
            parent: instance["parent"].as_str().expect("a parent").to_owned(),
            subject: instance["subject"].as_str().unwrap_or_default().to_owned(),
            fix_files: strings(&instance["fix_files"]),
            test_files: strings(&instance["test_files"]),
            test,
            fail_to_pass: strings(&truth["FAIL_TO_PASS"]),
            skip_control_test: truth["skip_control_test"]
                .as_str()
                .expect("a skip_control_test")
                .to_owned(),
            counts: truth["counts"].clone(),
        }
    }

    /// A checkout of the instance's base tree (the upstream parent's tree).
    pub(super) fn checkout(&self, into: &Path) -> PathBuf {
        let dir = into.join("tree");
        let branch = format!("base/{}", &self.parent[..12]);
        git(
            into,
            &[
                "clone",
                "--quiet",
                "-b",
                &branch,
                self.bundle.to_str().expect("a UTF-8 path"),
                "tree",
            ],
        );
        dir
    }

    /// `P passed, F failed` as planwright's verification table says pytest's counts for
    /// the tree in state `state`.
    fn counts(&self, state: &str) -> String {
        let count = |key: &str| self.counts[state][key].as_u64().unwrap_or(0);
        format!("{} passed, {} failed", count("passed"), count("failed"))
    }

    fn files(&self) -> Vec<String> {
        self.fix_files
            .iter()
            .chain(&self.test_files)
            .cloned()
            .collect()
    }
}

/// The executor's work in a session, and the outcome the truth calls for.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Work {
    /// The upstream commit: its fix and its tests.
    Fix,
    /// Its tests alone: they fail after, as they did before.
    TestsWithoutFix,
    /// The fix and its tests, and a test that passes on the fix marked skipped.
    FixWithSkippedTest,
}

/// Every file of the tree `dir` that git tracks, with its text.
pub(super) fn tracked_files(dir: &Path) -> Vec<(String, String)> {
    git(dir, &["ls-files", "-z"])
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(|path| {
            let bytes = std::fs::read(dir.join(path)).unwrap();
            let text = String::from_utf8(bytes)
                .unwrap_or_else(|_| panic!("{path} of the base tree is not UTF-8 text"));
            (path.to_owned(), text)
        })
        .collect()
}

/// Adds a skip marker to the test `node` (`path::Class::test` or `path::test`) in the
/// tree `dir`: `@unittest.skip` on a method of a `unittest` class, `@pytest.mark.skip` on
/// a pytest function, with the module imported when the file does not import it.
pub(super) fn mark_skipped(dir: &Path, node: &str) {
    let mut parts = node.split("::");
    let path = parts.next().expect("a path");
    let names: Vec<&str> = parts.collect();
    let (class, function) = match names[..] {
        [function] => (None, function),
        [class, function] => (Some(class), function),
        _ => panic!("cannot place a skip marker on {node}"),
    };
    let file = dir.join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let start = match class {
        Some(class) => {
            lines
                .iter()
                .position(|l| {
                    l.starts_with(&format!("class {class}(")) || l == &format!("class {class}:")
                })
                .unwrap_or_else(|| panic!("no class {class} in {path}"))
                + 1
        }
        None => 0,
    };
    let def = lines[start..]
        .iter()
        .position(|l| {
            let code = l.trim_start();
            let indented = l.len() > code.len();
            indented == class.is_some()
                && (code.starts_with(&format!("def {function}("))
                    || code.starts_with(&format!("async def {function}(")))
        })
        .map(|i| start + i)
        .unwrap_or_else(|| panic!("no test {function} in {path}"));
    let unittest_style = class.is_some_and(|class| {
        lines[start - 1].starts_with(&format!("class {class}("))
            && lines[start - 1].contains("TestCase")
    });
    let (module, marker) = if unittest_style {
        ("unittest", "@unittest.skip(\"not needed for now\")")
    } else {
        ("pytest", "@pytest.mark.skip(reason=\"not needed for now\")")
    };
    let indent = &lines[def][..lines[def].len() - lines[def].trim_start().len()];
    lines.insert(def, format!("{indent}{marker}"));
    if !lines.iter().any(|l| l == &format!("import {module}")) {
        let first_import = lines
            .iter()
            .position(|l| {
                (l.starts_with("import ") || l.starts_with("from "))
                    && !l.starts_with("from __future__")
            })
            .unwrap_or(0);
        lines.insert(first_import, format!("import {module}"));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    std::fs::write(&file, out).unwrap();
}

/// The files the executor writes for `work`, with their new text: every file of the
/// patches' that `work` changes, as `git apply` leaves it in a checkout of the base.
pub(super) fn written_files(instance: &Instance, work: Work) -> Vec<(String, String)> {
    let scratch = tempfile::tempdir().unwrap();
    let tree = instance.checkout(scratch.path());
    let base = tracked_files(&tree);
    let mut patches = vec!["test.patch"];
    if work != Work::TestsWithoutFix {
        patches.insert(0, "fix.patch");
    }
    for patch in patches {
        let patch = instance.dir.join(patch);
        git(&tree, &["apply", patch.to_str().expect("a UTF-8 path")]);
    }
    if work == Work::FixWithSkippedTest {
        mark_skipped(&tree, &instance.skip_control_test);
    }
    let mut written = Vec::new();
    for path in instance.files() {
        let after = std::fs::read_to_string(tree.join(&path)).unwrap();
        let before = base.iter().find(|(p, _)| *p == path).map(|(_, t)| t);
        if before != Some(&after) {
            written.push((path, after));
        }
    }
    assert!(
        !written.is_empty(),
        "{work:?} of {} changes nothing",
        instance.id
    );
    written
}

/// The planner's contract: the patches' files, the tests that must go from failing to
/// passing, and the repository's test command.
fn contract(instance: &Instance) -> Value {
    let files: Vec<Value> = instance
        .fix_files
        .iter()
        .map(|p| json!({"path": p, "action": "modify", "why": "the fix"}))
        .chain(
            instance
                .test_files
                .iter()
                .map(|p| json!({"path": p, "action": "modify", "why": "regression tests"})),
        )
        .collect();
    json!({
        "summary": format!("{} (upstream {}).", instance.subject, &instance.commit[..12]),
        "diagnosis": {
            "hypothesis": "The upstream commit's fix and tests apply to this base.",
            "evidence": [{"path": instance.fix_files[0], "note": "what the upstream commit fixed"}]
        },
        "change": {
            "goal": "Make the upstream commit's fix, with its regression tests.",
            "files": files
        },
        "verification": {
            "commands": [instance.test],
            "new_tests": instance.fail_to_pass,
        },
        "routing": {"risk": "low", "max_attempts": 1}
    })
}

/// The models' answers: the contract, the builtin executor's writes and finish, and a
/// reviewer who accepts.
fn script(instance: &Instance, written: &[(String, String)]) -> Vec<Step> {
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
    script.push(
        Step::tool_call(
            "ef",
            "finish",
            json!({"summary": "Applied the fix and its tests."}),
        )
        .when_tools(&["finish"]),
    );
    script.push(verdict(true, "The change the contract asks for."));
    script
}

/// What a session published, read back from the fake.
struct Published {
    state: String,
    failure: String,
    pulls: Vec<Pull>,
    /// planwright's checks on the pull request's head: conclusion, title and text.
    checks: Vec<(String, String, String)>,
}

impl Published {
    fn pull(&self) -> &Pull {
        assert_eq!(self.pulls.len(), 1, "{}", self.account());
        &self.pulls[0]
    }

    /// Everything a reader of a failed assertion needs to see.
    fn account(&self) -> String {
        let mut out = format!("session {}: {}\n", self.state, self.failure);
        for pull in &self.pulls {
            out.push_str(&format!(
                "pull request #{} (draft: {}):\n{}\n",
                pull.number,
                pull.draft,
                verification_section(&pull.body)
            ));
        }
        for (conclusion, title, text) in &self.checks {
            out.push_str(&format!("check {conclusion}: {title}\n{text}\n"));
        }
        out
    }
}

/// The body's verification section, up to the review.
fn verification_section(body: &str) -> &str {
    let Some(start) = body.find("### Verification") else {
        return body;
    };
    let end = body[start..]
        .find("### Review")
        .map_or(body.len(), |e| start + e);
    &body[start..end]
}

async fn wait_for_any(world: &World, states: &[&str]) -> planwright::store::sessions::SessionRow {
    let what = format!("the session to be {}", states.join(" or "));
    eventually_within(&what, PHASE_LIMIT, || async {
        world
            .find_session()
            .await
            .filter(|s| states.contains(&s.state.as_str()))
    })
    .await
}

/// Runs `work` on instance `id` as a session in the image, to its published outcome.
async fn session(id: &str, work: Work) -> Published {
    let instance = Instance::load(id);
    let written = written_files(&instance, work);
    let registry = Registry::start(Access::Anonymous).await;
    push_python_image(
        &registry,
        &real_tasks().join("image-requirements.txt"),
        IMAGE,
    );
    let settings = format!(
        "test: {}\nenvironment:\n  image: {}\n",
        instance.test,
        registry.reference(IMAGE)
    );
    let scratch = tempfile::tempdir().unwrap();
    let base = tracked_files(&instance.checkout(scratch.path()));
    let on = ForgeKind::Github;
    let mut files: Vec<(&str, &str)> = base.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    files.push((World::settings_path(on), settings.as_str()));
    let extra = [
        ("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5"),
        ("PLANWRIGHT_SANDBOX_RELAY", env!("CARGO_BIN_EXE_planwright")),
    ];
    let world = World::start_with(on, script(&instance, &written), &files, &extra).await;
    let started = std::time::Instant::now();
    world.label(&world.maintainer, "real-task-label").await;
    let planned = wait_for_any(&world, &["awaiting_approval", "failed"]).await;
    assert_eq!(
        planned.state.as_str(),
        "awaiting_approval",
        "{id}: planning failed: {}",
        planned.failure.unwrap_or_default()
    );
    world
        .comment(&world.maintainer, "/approve", "real-task-approve")
        .await;
    let ended = wait_for_any(&world, &["pr_opened", "failed"]).await;
    let pulls = world.pulls();
    let checks = match pulls.first() {
        Some(pull) => {
            let head = world.upstream(&["rev-parse", &pull.head]);
            world
                .github()
                .check_runs(world.repo)
                .into_iter()
                .filter(|r| r.head_sha == head)
                .map(|r| {
                    (
                        r.conclusion.unwrap_or(r.status),
                        r.title.unwrap_or_default(),
                        r.text.unwrap_or_default(),
                    )
                })
                .collect()
        }
        None => Vec::new(),
    };
    let published = Published {
        state: ended.state.as_str().to_owned(),
        failure: ended.failure.unwrap_or_default(),
        pulls,
        checks,
    };
    eprintln!(
        "{id} {work:?} published in {:.0?}:\n{}",
        started.elapsed(),
        published.account()
    );
    world.server.stop().await;
    published
}

/// The table row of the proof that names `test`.
fn proof_row<'a>(body: &'a str, test: &str) -> Option<&'a str> {
    let cell = format!("| `{test}`");
    body.lines().find(|l| l.starts_with(&cell))
}

/// Whether the verification table's row for the test command reads pytest's counts as
/// the truth has them: `baseline` for the base, `after` for the result.
fn assert_counts(body: &str, instance: &Instance, baseline: &str, after: &str, account: &str) {
    let row = body
        .lines()
        .find(|l| l.starts_with(&format!("| `{}` |", instance.test)))
        .unwrap_or_else(|| panic!("no row for `{}`: {account}", instance.test));
    let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
    for (cell, state) in [(cells[1], baseline), (cells[2], after)] {
        let counts = cell.trim_start_matches(['✅', '❌', ' ']);
        assert!(
            counts.starts_with(&instance.counts(state)),
            "pytest said {} for {state}; planwright read {cell}\n{account}",
            instance.counts(state)
        );
    }
}

/// A proof row's cells after the test's name: on the base code, after, and the proof.
fn proof_cells(row: &str) -> Vec<&str> {
    row.trim_matches('|')
        .split(" | ")
        .skip(1)
        .map(str::trim)
        .collect()
}

/// The upstream fix is a ready pull request, green, with every test that went from
/// failing to passing proven, and nothing weakened or out of scope.
async fn the_upstream_fix_is_ready(id: &str) {
    let instance = Instance::load(id);
    let published = session(id, Work::Fix).await;
    let account = published.account();
    let pull = published.pull();
    assert_counts(&pull.body, &instance, "base", "fix", &account);
    assert_eq!(published.state, "pr_opened", "{account}");
    assert!(!pull.draft, "a draft: {account}");
    let conclusions: Vec<&str> = published.checks.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(conclusions, ["success"], "{account}");
    for test in &instance.fail_to_pass {
        let row = proof_row(&pull.body, test)
            .unwrap_or_else(|| panic!("no proof row for {test}: {account}"));
        assert_eq!(
            proof_cells(row),
            ["failed", "passed", "✅ proves the change"],
            "{row}\n{account}"
        );
    }
    assert!(!pull.body.contains("Weakened tests"), "{account}");
    assert!(!pull.body.contains("Refused changes"), "{account}");
    let (_, _, text) = &published.checks[0];
    assert!(!text.contains("Weakened tests"), "{account}");
    assert!(!text.contains("### Scope"), "{account}");
}

/// The upstream tests without the fix: they fail after as before, so no ready pull
/// request, and the failing tests are named.
async fn the_tests_without_the_fix_are_not_ready(id: &str) {
    let instance = Instance::load(id);
    let published = session(id, Work::TestsWithoutFix).await;
    let account = published.account();
    let pull = published.pull();
    assert_counts(&pull.body, &instance, "base", "base+tests", &account);
    assert_eq!(published.state, "failed", "{account}");
    assert!(pull.draft, "a ready pull request: {account}");
    let conclusions: Vec<&str> = published.checks.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(conclusions, ["failure"], "{account}");
    for test in &instance.fail_to_pass {
        let row = proof_row(&pull.body, test)
            .unwrap_or_else(|| panic!("no proof row for {test}: {account}"));
        assert_eq!(
            proof_cells(row)[..2],
            ["failed", "failed"][..],
            "{test} must fail on the base and after: {row}\n{account}"
        );
    }
}

/// The upstream fix with a test that passes on it marked skipped: not ready, and the
/// skip is named as a refused weakening.
async fn a_skipped_passing_test_is_not_ready(id: &str) {
    let instance = Instance::load(id);
    let published = session(id, Work::FixWithSkippedTest).await;
    let account = published.account();
    let pull = published.pull();
    assert_eq!(published.state, "failed", "{account}");
    assert!(pull.draft, "a ready pull request: {account}");
    let conclusions: Vec<&str> = published.checks.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(conclusions, ["failure"], "{account}");
    let name = instance.skip_control_test.rsplit("::").next().unwrap();
    let named = pull
        .body
        .lines()
        .any(|l| l.starts_with("- **refused**") && l.contains("skip") && l.contains(name));
    assert!(
        pull.body.contains("Weakened tests") && named,
        "the skip of {} is not refused: {account}",
        instance.skip_control_test
    );
}

/// One test per instance, and per repository for its two controls, so each shows by
/// name; `the_suite_covers_every_instance` checks the lists against the fixtures.
macro_rules! real_tasks {
    (instances: $($instance:ident => $id:literal),+ ; controls: $($repo:ident => $control:literal),+ $(,)?) => {
        const INSTANCES: &[&str] = &[$($id),+];
        const CONTROLS: &[&str] = &[$($control),+];
        $(
            #[tokio::test]
            async fn $instance() {
                the_upstream_fix_is_ready($id).await;
            }
        )+
        $(
            mod $repo {
                #[tokio::test]
                async fn the_tests_without_the_fix_are_not_ready() {
                    super::the_tests_without_the_fix_are_not_ready($control).await;
                }

                #[tokio::test]
                async fn a_skipped_passing_test_is_not_ready() {
                    super::a_skipped_passing_test_is_not_ready($control).await;
                }
            }
        )+
    };
}

real_tasks!(
    instances:
        more_itertools_0e6acdf9 => "more-itertools-0e6acdf9",
        more_itertools_def2d821 => "more-itertools-def2d821",
        more_itertools_be5793a5 => "more-itertools-be5793a5",
        more_itertools_adeda34b => "more-itertools-adeda34b",
        toolz_5a7e078c => "toolz-5a7e078c";
    controls:
        more_itertools_controls => "more-itertools-0e6acdf9",
        toolz_controls => "toolz-5a7e078c",
);

/// Every instance in the fixtures has its test above, and every repository's control
/// instance its controls: an instance added to the fixtures fails here until it is named.
#[test]
fn the_suite_covers_every_instance() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(real_tasks().join("instances"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let named: BTreeSet<String> = INSTANCES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        on_disk, named,
        "the instances on disk and the suite's tests"
    );
    let repos = read_json(&real_tasks().join("repos.json"));
    let controls: BTreeSet<String> = repos
        .as_object()
        .expect("repos.json is an object")
        .values()
        .map(|r| r["control"].as_str().expect("a control").to_owned())
        .collect();
    let named: BTreeSet<String> = CONTROLS.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        controls, named,
        "the control instances and the suite's controls"
    );
}
