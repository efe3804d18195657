//! A task's repository made ready for a run: a new repository holding one commit, the
//! base commit's tree, with no history that could show the fix, and planwright's
//! settings for the task's test command, setup and image when the task names them.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;

use super::tasks::Task;

/// The identity of the base commit an evaluation makes.
pub(super) const AUTHOR: [&str; 4] = [
    "-c",
    "user.name=planwright eval",
    "-c",
    "user.email=eval@planwright.invalid",
];

/// `git ARGS` in `dir`: its standard output, or an error with what git said.
pub(super) async fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("Could not run git (is it installed?)")?;
    anyhow::ensure!(
        out.status.success(),
        "git {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The task's source as a git folder to read from: the repository itself, or a bare
/// clone of the bundle made once in `cache`.
async fn source(task: &Task, cache: &Path) -> Result<PathBuf, String> {
    if task.repo.is_dir() {
        return Ok(task.repo.clone());
    }
    if !task.repo.is_file() {
        return Err(format!(
            "the repository `{}` is not there",
            task.repo.display()
        ));
    }
    let bare = cache.join("source.git");
    if !bare.join("HEAD").exists() {
        let _ = std::fs::remove_dir_all(&bare);
        std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        let bundle = task.repo.display().to_string();
        let into = bare.display().to_string();
        git(cache, &["clone", "--quiet", "--mirror", &bundle, &into])
            .await
            .map_err(|e| format!("the bundle `{bundle}` does not clone: {e:#}"))?;
    }
    Ok(bare)
}

/// The repository a run starts from, made in `dir/repo`: its path and base commit.
/// `cache` keeps what every run of the task can share. An error is the reason the task
/// has no verdict.
pub async fn prepare(
    task: &Task,
    image: Option<&str>,
    cache: &Path,
    dir: &Path,
) -> Result<(PathBuf, String), String> {
    let source = source(task, cache).await?;
    let wanted = format!("{}^{{commit}}", task.base_commit);
    let base = git(&source, &["rev-parse", "--verify", "--quiet", &wanted])
        .await
        .map_err(|_| {
            format!(
                "the base commit `{}` is not in `{}`",
                task.base_commit,
                task.repo.display()
            )
        })?;
    let repo = dir.join("repo");
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(&repo).map_err(|e| format!("{}: {e}", repo.display()))?;
    copy_tree(&source, &base, &repo)
        .await
        .map_err(|e| format!("the base tree could not be written: {e:#}"))?;
    let settings = settings(task, image);
    if let Some(settings) = &settings {
        std::fs::write(repo.join(".planwright.yml"), settings)
            .map_err(|e| format!("the settings file could not be written: {e}"))?;
    }
    let commit = async {
        git(&repo, &["init", "--quiet", "--initial-branch=main"]).await?;
        git(&repo, &["add", "--all", "--force"]).await?;
        let mut args = AUTHOR.to_vec();
        let message = format!("{}: base", task.id);
        args.extend(["commit", "--quiet", "--no-verify", "-m", &message]);
        git(&repo, &args).await?;
        git(&repo, &["rev-parse", "HEAD"]).await
    };
    let head = commit
        .await
        .map_err(|e| format!("the base commit could not be made: {e:#}"))?;
    Ok((repo, head))
}

/// Writes the tree of `commit` in `source` into `into` as a checkout would, with an index
/// of its own so `source` is left as it was. Not `git archive`: it leaves out what the
/// tree's `.gitattributes` marks `export-ignore` (often the tests) and rewrites
/// `export-subst` files, so the base would not be the base.
async fn copy_tree(source: &Path, commit: &str, into: &Path) -> anyhow::Result<()> {
    let index = into.with_extension("index");
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(source)
        .arg("--work-tree")
        .arg(into)
        .args(["checkout", "--quiet", "--force", commit, "--", "."])
        .env("GIT_INDEX_FILE", &index)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("Could not run git checkout")?;
    let _ = std::fs::remove_file(&index);
    anyhow::ensure!(
        out.status.success(),
        "git checkout of the base failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// `.planwright.yml` for the task's test command, setup and image (JSON, which YAML
/// reads), or `None` when the task names none and the repository's own settings hold.
pub fn settings(task: &Task, image: Option<&str>) -> Option<String> {
    if task.test_cmd.is_none() && task.setup.is_empty() && image.is_none() {
        return None;
    }
    let mut settings = serde_json::Map::new();
    if let Some(test) = &task.test_cmd {
        settings.insert("test".into(), json!(test));
    }
    if !task.setup.is_empty() {
        settings.insert("setup".into(), json!(task.setup));
    }
    if let Some(image) = image {
        settings.insert("environment".into(), json!({ "image": image }));
    }
    serde_json::to_string_pretty(&settings).ok()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[tokio::test]
    async fn the_base_keeps_what_gitattributes_leaves_out_of_an_archive() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::create_dir_all(source.join("tests")).unwrap();
        std::fs::write(
            source.join(".gitattributes"),
            "tests/ export-ignore
v.txt export-subst
",
        )
        .unwrap();
        std::fs::write(source.join("tests/test_a.py"), "def test_a(): pass\n").unwrap();
        std::fs::write(source.join("v.txt"), "$Format:%H$\n").unwrap();
        git(&source, &["init", "--quiet"]);
        git(&source, &["add", "--all"]);
        git(&source, &["commit", "--quiet", "-m", "base"]);
        let head = git(&source, &["rev-parse", "HEAD"]);
        let into = dir.path().join("into");
        std::fs::create_dir_all(&into).unwrap();
        copy_tree(&source, &head, &into).await.unwrap();
        assert!(
            into.join("tests/test_a.py").is_file(),
            "the tests are part of the base"
        );
        let v = std::fs::read_to_string(into.join("v.txt")).unwrap();
        assert_eq!(v, "$Format:%H$\n", "files are written as committed");
        // The source's own index is not touched.
        assert_eq!(git(&source, &["status", "--porcelain"]), "");
    }
}
