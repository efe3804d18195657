//! The tasks an evaluation runs: SWE-bench-compatible JSONL (one task a line), or a
//! folder laid out as `real-tasks` is (a `repos.json`, git bundles and one folder per
//! instance with its patches and pytest's truth). Both load into the same [`Task`]; a
//! line or an instance that does not load is set aside with its place and the reason,
//! and the others still run.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

/// One task: a repository at a base commit, the issue as its reporter wrote it, and the
/// tests that judge a result, hidden from every model.
#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    /// A git repository's folder, or a git bundle file.
    pub repo: PathBuf,
    /// Any revision of `repo` naming the base commit (a hash or a branch).
    pub base_commit: String,
    /// The issue as the models see it: its first line is the title.
    pub problem_statement: String,
    /// The tests that judge the result, applied only when grading.
    pub test_patch: String,
    /// Tests that must go from failing to passing.
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: PassToPass,
    /// The environment image runs and grading use; `None`: the evaluation's default.
    pub image: Option<String>,
    /// The command that runs the tests; it must name the tests that pass (`pytest -v`).
    pub test_cmd: Option<String>,
    /// Commands that prepare the checkout before the tests.
    pub setup: Vec<String>,
}

/// The tests that passed before and must still pass.
#[derive(Debug, Clone, PartialEq)]
pub enum PassToPass {
    /// Named one by one, as SWE-bench ships them.
    Listed(Vec<String>),
    /// Counted: at least `passing` tests pass (the fail-to-pass ones included) and none
    /// fails but those in `failing_anyway`, which fail on the fixed tree too.
    Counted {
        passing: u64,
        failing_anyway: Vec<String>,
    },
}

/// A line or instance that did not load: where it is and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// `line 7`, or the instance's folder name.
    pub place: String,
    pub reason: String,
}

/// What a task file held.
#[derive(Debug, Default)]
pub struct Loaded {
    pub tasks: Vec<Task>,
    pub skipped: Vec<Skipped>,
}

/// Reads the tasks at `path`: a JSONL file, or a folder in the `real-tasks` layout.
/// Only an unreadable path, or one holding no task at all, is an error.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let loaded = if path.is_dir() {
        load_layout(path)?
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("Cannot read the task file `{}`", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        parse_jsonl(&text, base)
    };
    let mut ids = std::collections::HashSet::new();
    let mut out = Loaded {
        tasks: Vec::new(),
        skipped: loaded.skipped,
    };
    for task in loaded.tasks {
        if ids.insert(task.id.clone()) {
            out.tasks.push(task);
        } else {
            out.skipped.push(Skipped {
                place: task.id.clone(),
                reason: "a second task with this instance_id".into(),
            });
        }
    }
    anyhow::ensure!(
        !out.tasks.is_empty(),
        "`{}` holds no task that loads{}",
        path.display(),
        out.skipped
            .iter()
            .map(|s| format!("\n  {}: {}", s.place, s.reason))
            .collect::<String>()
    );
    Ok(out)
}

/// SWE-bench-compatible JSONL; relative `repo` paths are read from `base`.
pub fn parse_jsonl(text: &str, base: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match task_of_line(line, base) {
            Ok(task) => loaded.tasks.push(task),
            Err(reason) => loaded.skipped.push(Skipped {
                place: format!("line {}", i + 1),
                reason,
            }),
        }
    }
    loaded
}

fn task_of_line(line: &str, base: &Path) -> Result<Task, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let text = |key: &str| -> Result<String, String> {
        match value.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(format!("`{key}` is empty")),
            Some(_) => Err(format!("`{key}` is not a string")),
            None => Err(format!("`{key}` is missing")),
        }
    };
    let optional = |key: &str| -> Result<Option<String>, String> {
        match value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{key}` is not a string")),
        }
    };
    let repo = PathBuf::from(text("repo")?);
    let fail_to_pass = test_list(&value, "FAIL_TO_PASS")?;
    if fail_to_pass.is_empty() {
        return Err("`FAIL_TO_PASS` names no test: nothing would tell a fix apart".into());
    }
    let setup = match value.get("setup") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(_) => test_list(&value, "setup")?,
    };
    Ok(Task {
        id: text("instance_id")?,
        repo: if repo.is_absolute() {
            repo
        } else {
            base.join(repo)
        },
        base_commit: text("base_commit")?,
        problem_statement: text("problem_statement")?,
        test_patch: text("test_patch")?,
        fail_to_pass,
        pass_to_pass: PassToPass::Listed(test_list(&value, "PASS_TO_PASS")?),
        image: optional("image")?,
        test_cmd: optional("test_cmd")?,
        setup,
    })
}

/// A list of strings, or a string holding one as JSON (as SWE-bench ships them).
fn test_list(value: &Value, key: &str) -> Result<Vec<String>, String> {
    let wrong = || format!("`{key}` is not a list of strings (or one encoded as JSON text)");
    let list = match value.get(key) {
        None => return Err(format!("`{key}` is missing")),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|_| wrong())?,
        Some(v) => v.clone(),
    };
    list.as_array()
        .ok_or_else(wrong)?
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(wrong))
        .collect()
}

/// The `real-tasks` layout: `repos.json`, `bundles/NAME.bundle`, `instances/ID/` with
/// `instance.json` and `test.patch`. The test command is the repository's with `-v`,
/// so pytest names each test with its outcome.
fn load_layout(dir: &Path) -> anyhow::Result<Loaded> {
    let repos_path = dir.join("repos.json");
    let repos: Value = serde_json::from_str(
        &std::fs::read_to_string(&repos_path)
            .with_context(|| format!("Cannot read `{}`", repos_path.display()))?,
    )
    .with_context(|| format!("`{}` is not JSON", repos_path.display()))?;
    let instances = dir.join("instances");
    let mut names: Vec<String> = std::fs::read_dir(&instances)
        .with_context(|| format!("Cannot read `{}`", instances.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut loaded = Loaded::default();
    for name in names {
        match instance(dir, &instances.join(&name), &repos) {
            Ok(task) => loaded.tasks.push(task),
            Err(reason) => loaded.skipped.push(Skipped {
                place: format!("instances/{name}"),
                reason,
            }),
        }
    }
    Ok(loaded)
}

fn instance(dir: &Path, folder: &Path, repos: &Value) -> Result<Task, String> {
    let text = std::fs::read_to_string(folder.join("instance.json"))
        .map_err(|e| format!("cannot read instance.json: {e}"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| format!("instance.json is not JSON: {e}"))?;
    let field = |v: &Value, key: &str| -> Result<String, String> {
        v.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("instance.json has no `{key}`"))
    };
    let repo = field(&value, "repo")?;
    let parent = field(&value, "parent")?;
    let commit = field(&value, "commit")?;
    let test = repos
        .get(&repo)
        .and_then(|r| r.get("test"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("repos.json has no test command for `{repo}`"))?;
    let truth = value.get("truth").ok_or("instance.json has no `truth`")?;
    let test_patch = std::fs::read_to_string(folder.join("test.patch"))
        .map_err(|e| format!("cannot read test.patch: {e}"))?;
    let passing = truth
        .pointer("/counts/fix/passed")
        .and_then(Value::as_u64)
        .ok_or("the truth has no passing count for the fix")?;
    let failing_anyway = match truth.get("failing_after_fix") {
        Some(_) => test_list(truth, "failing_after_fix")?,
        None => Vec::new(),
    };
    let subject = value
        .get("subject")
        .and_then(Value::as_str)
        .unwrap_or("the upstream fix");
    let upstream = value
        .get("upstream")
        .and_then(Value::as_str)
        .unwrap_or(&repo);
    Ok(Task {
        id: field(&value, "id").unwrap_or_else(|_| {
            folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        }),
        repo: dir.join("bundles").join(format!("{repo}.bundle")),
        base_commit: format!("refs/heads/base/{}", parent.get(..12).unwrap_or(&parent)),
        problem_statement: format!(
            "{subject}\n\nIn {upstream}, make the change its commit {} made: {subject}",
            commit.get(..12).unwrap_or(&commit)
        ),
        test_patch,
        fail_to_pass: test_list(truth, "FAIL_TO_PASS")?,
        pass_to_pass: PassToPass::Counted {
            passing,
            failing_anyway,
        },
        image: None,
        test_cmd: Some(format!("{test} -v")),
        setup: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(extra: &str) -> String {
        format!(
            r#"{{"instance_id":"a-1","repo":"repos/a","base_commit":"abc","problem_statement":"Title\n\nbody","test_patch":"diff","FAIL_TO_PASS":["t::one"],"PASS_TO_PASS":"[\"t::two\"]"{extra}}}"#
        )
    }

    #[test]
    fn lists_load_as_json_or_as_json_text_and_repos_are_read_from_the_file() {
        let loaded = parse_jsonl(
            &line(r#","image":"img:1","test_cmd":"pytest -v""#),
            Path::new("/data"),
        );
        assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
        let task = &loaded.tasks[0];
        assert_eq!(task.repo, Path::new("/data/repos/a"));
        assert_eq!(task.fail_to_pass, ["t::one"]);
        assert_eq!(task.pass_to_pass, PassToPass::Listed(vec!["t::two".into()]));
        assert_eq!(task.image.as_deref(), Some("img:1"));
        assert_eq!(task.test_cmd.as_deref(), Some("pytest -v"));
    }

    #[test]
    fn a_bad_line_is_set_aside_with_its_number_and_the_rest_load() {
        let text = format!(
            "{}\nnot json\n\n{}\n{}\n",
            line(""),
            line("").replace("\"FAIL_TO_PASS\":[\"t::one\"]", "\"FAIL_TO_PASS\":[]"),
            line("").replace("\"base_commit\":\"abc\",", "")
        );
        let loaded = parse_jsonl(&text, Path::new("/"));
        assert_eq!(loaded.tasks.len(), 1);
        let places: Vec<(&str, &str)> = loaded
            .skipped
            .iter()
            .map(|s| (s.place.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(places[0].0, "line 2");
        assert!(places[0].1.starts_with("not JSON"), "{places:?}");
        assert_eq!(places[1].0, "line 4");
        assert!(places[1].1.contains("FAIL_TO_PASS"), "{places:?}");
        assert_eq!(places[2], ("line 5", "`base_commit` is missing"));
    }
}
