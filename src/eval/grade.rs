//! Grading a result the way SWE-bench does, apart from anything planwright said of it:
//! the files the hidden test patch touches are put back as the base had them, the patch
//! is applied, the task's tests run in the task's image, and the result is resolved only
//! when every fail-to-pass test and every pass-to-pass test passes. A test counts as
//! passing only when the runner names it passing, so a skipped one counts as failed.
//! What stops the grading itself (a patch that does not apply, an image that does not
//! pull, a sandbox that does not run) is no verdict, never a failure of the result.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::checkout::git;
use super::tasks::{PassToPass, Task};
use crate::distill::TestReport;
use crate::environment::Environments;
use crate::ids::image::ImageRef;
use crate::sandbox::{Command, Exit, Limits, Root, Sandbox};

/// How a result graded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grade {
    Resolved,
    Unresolved,
    /// The grading (or the run) could not be carried out; the reason says why.
    NoVerdict,
}

impl Grade {
    /// Whether the grade counts toward an arm's rate: no verdict does not.
    pub fn counts(self) -> bool {
        self != Grade::NoVerdict
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Grade::Resolved => "resolved",
            Grade::Unresolved => "unresolved",
            Grade::NoVerdict => "no verdict",
        }
    }
}

/// A grade with what it rests on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Graded {
    pub grade: Grade,
    /// Why it is not resolved, or why there is no verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fail-to-pass tests that did not pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail_to_pass_failed: Vec<String>,
    /// The pass-to-pass tests that did not pass (failed, skipped or gone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_to_pass_failed: Vec<String>,
}

impl Graded {
    pub fn no_verdict(reason: impl Into<String>) -> Self {
        Graded {
            grade: Grade::NoVerdict,
            reason: Some(reason.into()),
            fail_to_pass_failed: Vec::new(),
            pass_to_pass_failed: Vec::new(),
        }
    }
}

/// What grading runs with: the sandbox, the image cache and the image.
pub struct Grader {
    pub sandbox: Arc<dyn Sandbox>,
    pub environments: Arc<Environments>,
}

impl Grader {
    /// Grades `revision` of the repository `repo` (the run's) for `task`, working in
    /// `scratch`, in `image` (`None`: the host's own tools).
    pub async fn grade(
        &self,
        task: &Task,
        repo: &Path,
        base: &str,
        revision: &str,
        image: Option<&str>,
        scratch: &Path,
    ) -> Graded {
        // The lease keeps the cache from evicting the image while the tests run.
        let lease = match image {
            Some(image) => match self.pull(image).await {
                Ok(lease) => Some(lease),
                Err(e) => return Graded::no_verdict(format!("the image did not pull: {e:#}")),
            },
            None => None,
        };
        let root = lease.as_ref().map(|l| l.sandbox_root());
        let tree = scratch.join("run");
        if let Err(e) = checkout(task, repo, base, revision, &tree).await {
            return Graded::no_verdict(format!("{e:#}"));
        }
        let mut commands: Vec<&str> = task.setup.iter().map(String::as_str).collect();
        let Some(test) = task.test_cmd.as_deref() else {
            return Graded::no_verdict("the task names no test command (`test_cmd`)");
        };
        commands.push(test);
        let mut report = None;
        for (i, command) in commands.iter().enumerate() {
            let spill = scratch.join(format!("output-{i}"));
            match self.run(&tree, command, root.clone(), &spill).await {
                Ok((exit, r)) if i + 1 == commands.len() => report = Some((exit, r)),
                Ok((exit, _)) if exit.success() => {}
                Ok((exit, _)) => {
                    return Graded::no_verdict(format!(
                        "the setup command `{command}` failed ({exit:?})"
                    ));
                }
                Err(e) => return Graded::no_verdict(format!("the sandbox failed: {e:#}")),
            }
        }
        let Some((exit, report)) = report else {
            return Graded::no_verdict("no test command ran");
        };
        judge(task, exit, &report)
    }

    /// The image pulled into the cache, leased for as long as the lease lives.
    pub(super) async fn pull(
        &self,
        image: &str,
    ) -> anyhow::Result<crate::environment::cache::Lease> {
        let reference = ImageRef::parse(image).map_err(|e| anyhow::anyhow!("{e}"))?;
        self.environments
            .pull(&reference)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    async fn run(
        &self,
        tree: &Path,
        command: &str,
        root: Option<Root>,
        spill: &Path,
    ) -> anyhow::Result<(Exit, TestReport)> {
        let mut cmd = Command::new(tree, vec!["sh".into(), "-c".into(), command.to_owned()]);
        cmd.cwd = Some("repo".into());
        cmd.env = vec![("HOME".into(), tree.join("home").display().to_string())];
        cmd.root = root;
        cmd.limits = Limits::default();
        std::fs::create_dir_all(spill)?;
        cmd.spill_dir = Some(spill.to_path_buf());
        let output = self.sandbox.run(&cmd).await?;
        let hint = command.to_owned();
        let exit = output.exit;
        let report = tokio::task::spawn_blocking(move || -> anyhow::Result<TestReport> {
            let text =
                |c: &crate::sandbox::Captured| -> anyhow::Result<Box<dyn std::io::Read + Send>> {
                    Ok(match &c.spilled {
                        Some(path) => Box::new(std::fs::File::open(path)?),
                        None => Box::new(std::io::Cursor::new(c.bytes.clone())),
                    })
                };
            let input = text(&output.stdout)?
                .chain(std::io::Cursor::new(b"\n".to_vec()))
                .chain(text(&output.stderr)?);
            crate::distill::distill(input, None, Some(&hint))
                .context("Could not read the tests' output")
        })
        .await
        .context("The distilling task failed")??;
        Ok((exit, report))
    }
}

/// The result's tree in `tree/repo`, its test-patch files as the base had them and the
/// test patch applied; `tree/home` beside it.
async fn checkout(
    task: &Task,
    repo: &Path,
    base: &str,
    revision: &str,
    tree: &Path,
) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(tree);
    std::fs::create_dir_all(tree.join("home"))?;
    let commit = git(
        repo,
        &["rev-parse", "--verify", &format!("{revision}^{{commit}}")],
    )
    .await
    .with_context(|| format!("the result `{revision}` is not in the run's repository"))?;
    let into = tree.join("repo");
    let into_text = into.display().to_string();
    let from = repo.display().to_string();
    git(
        tree,
        &["clone", "--quiet", "--no-checkout", &from, &into_text],
    )
    .await
    .context("the run's repository could not be cloned for grading")?;
    git(&into, &["checkout", "--quiet", "--detach", &commit])
        .await
        .with_context(|| format!("the result `{revision}` could not be checked out"))?;
    for path in patch_paths(&task.test_patch) {
        let at_base = git(&into, &["cat-file", "-e", &format!("{base}:{path}")])
            .await
            .is_ok();
        if at_base {
            git(&into, &["checkout", "--quiet", base, "--", &path]).await?;
        } else {
            let _ = std::fs::remove_file(into.join(&path));
        }
    }
    let patch = tree.join("test.patch");
    std::fs::write(&patch, &task.test_patch)?;
    let patch_text = patch.display().to_string();
    git(&into, &["apply", "--whitespace=nowarn", &patch_text])
        .await
        .context("the test patch does not apply to the base's test files")?;
    Ok(())
}

/// The files a patch names, before and after (`diff --git a/X b/Y`, `---`/`+++`).
pub fn patch_paths(patch: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for line in patch.lines() {
        let named = if let Some(rest) = line.strip_prefix("--- a/") {
            Some(rest)
        } else {
            line.strip_prefix("+++ b/")
        };
        if let Some(path) = named {
            let path = path.trim_end().to_owned();
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// The grade the runner's report gives, by the task's lists.
pub fn judge(task: &Task, exit: Exit, report: &TestReport) -> Graded {
    if matches!(exit, Exit::Code(126 | 127)) && report.passed == 0 && report.failures.is_empty() {
        return Graded::no_verdict(format!(
            "the test command could not start ({exit:?}): {}",
            report.excerpt.lines().last().unwrap_or_default()
        ));
    }
    if report.passed > 0 && report.passing.is_empty() {
        return Graded::no_verdict(
            "the test command does not name the tests that pass; make it (pytest: add -v)",
        );
    }
    let passing: HashSet<&str> = report.passing.iter().map(String::as_str).collect();
    let fail_to_pass_failed: Vec<String> = task
        .fail_to_pass
        .iter()
        .filter(|t| !passing.contains(t.as_str()))
        .cloned()
        .collect();
    let mut pass_to_pass_failed = Vec::new();
    let mut short = None;
    match &task.pass_to_pass {
        PassToPass::Listed(tests) => {
            pass_to_pass_failed.extend(
                tests
                    .iter()
                    .filter(|t| !passing.contains(t.as_str()))
                    .cloned(),
            );
        }
        PassToPass::Counted {
            passing: wanted,
            failing_anyway,
        } => {
            pass_to_pass_failed.extend(
                report
                    .failures
                    .iter()
                    .map(|f| f.id.clone())
                    .filter(|id| !failing_anyway.contains(id) && !task.fail_to_pass.contains(id)),
            );
            if report.passed < *wanted {
                short = Some(format!(
                    "{} tests passed where the fixed tree passes {wanted}",
                    report.passed
                ));
            }
        }
    }
    let resolved =
        fail_to_pass_failed.is_empty() && pass_to_pass_failed.is_empty() && short.is_none();
    let reason = (!resolved).then(|| {
        let mut parts = Vec::new();
        if !fail_to_pass_failed.is_empty() {
            parts.push(format!(
                "{} fail-to-pass not passing",
                fail_to_pass_failed.len()
            ));
        }
        if !pass_to_pass_failed.is_empty() {
            parts.push(format!(
                "{} pass-to-pass not passing",
                pass_to_pass_failed.len()
            ));
        }
        parts.extend(short);
        parts.join("; ")
    });
    Graded {
        grade: if resolved {
            Grade::Resolved
        } else {
            Grade::Unresolved
        },
        reason,
        fail_to_pass_failed,
        pass_to_pass_failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(pass_to_pass: PassToPass) -> Task {
        Task {
            id: "t".into(),
            repo: "/r".into(),
            base_commit: "main".into(),
            problem_statement: "p".into(),
            test_patch: String::new(),
            fail_to_pass: vec!["t.py::test_new".into()],
            pass_to_pass,
            image: None,
            test_cmd: Some("python3 -m pytest -v".into()),
            setup: Vec::new(),
        }
    }

    fn report(lines: &str) -> TestReport {
        crate::distill::distill(lines.as_bytes(), None, Some("python3 -m pytest -v")).unwrap()
    }

    const RUN: &str = "t.py::test_new PASSED                  [ 33%]\n\
                       t.py::test_old PASSED                  [ 66%]\n\
                       t.py::test_other SKIPPED (later)       [100%]\n\n\
                       ========================= 2 passed, 1 skipped in 0.01s =========================\n";

    #[test]
    fn a_skipped_pass_to_pass_test_counts_as_failed() {
        let listed = task(PassToPass::Listed(vec![
            "t.py::test_old".into(),
            "t.py::test_other".into(),
        ]));
        let graded = judge(&listed, Exit::Code(0), &report(RUN));
        assert_eq!(graded.grade, Grade::Unresolved, "{graded:?}");
        assert_eq!(graded.pass_to_pass_failed, ["t.py::test_other"]);
        assert!(graded.fail_to_pass_failed.is_empty());
        let counted = task(PassToPass::Counted {
            passing: 3,
            failing_anyway: Vec::new(),
        });
        let graded = judge(&counted, Exit::Code(0), &report(RUN));
        assert_eq!(graded.grade, Grade::Unresolved, "{graded:?}");
    }

    #[test]
    fn every_listed_test_passing_is_resolved() {
        let listed = task(PassToPass::Listed(vec!["t.py::test_old".into()]));
        let graded = judge(&listed, Exit::Code(0), &report(RUN));
        assert_eq!(graded.grade, Grade::Resolved, "{graded:?}");
    }

    #[test]
    fn a_runner_that_names_no_passing_test_gives_no_verdict() {
        let listed = task(PassToPass::Listed(Vec::new()));
        let quiet = "t.py ..                                                  [100%]\n\n\
                     ============================== 2 passed in 0.01s ===============================\n";
        let graded = judge(&listed, Exit::Code(0), &report(quiet));
        assert_eq!(graded.grade, Grade::NoVerdict, "{graded:?}");
    }

    #[test]
    fn a_patch_names_the_files_it_touches() {
        let patch = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n\
                     diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n";
        assert_eq!(patch_paths(patch), ["x.py", "new.py"]);
    }
}
