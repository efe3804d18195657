//! The base's tests judge the result: for the comparison with the baseline, the result's
//! checkout runs with its pre-existing test files in their base form, except those the
//! approved contract names, and without the test files it adds; those run apart, in an
//! invocation of their own, so nothing they do when loaded can change how the old tests
//! see the code.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::proof::copy_tests;
use super::rerun;
use super::scope::{is_test_path, normalise};

use crate::contract::Contract;
use crate::git::{ChangeKind, ChangedFile, FileText, Workspace};

/// Bytes read of a test file's base form; a larger one is judged as the result left it,
/// and the report says so.
const BASE_FORM_BYTES: u64 = 8 << 20;

/// What the judged run changes in the result's checkout, and what it says of it.
#[derive(Debug, Default)]
pub(super) struct Judging {
    /// Pre-existing test files the result changed and the contract does not name, and
    /// package `__init__.py` files it adds to test folders: put in their base form (the
    /// added ones left out) for the judged run.
    pub base_form: Vec<String>,
    /// Test files the result adds, run apart.
    pub apart: Vec<String>,
    /// Test files the result changed that the judged run takes as the result left them
    /// (the contract names them): a new test module they import stays in that run.
    pub result_form: Vec<String>,
    /// Said in the report: what was judged how, and what could not be.
    pub notes: Vec<String>,
}

/// A file that holds tests a runner collects by its name, not a helper, data or a
/// fixture the tests read.
fn is_test_module(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (stem, ext) = match name.rsplit_once('.') {
        Some(pair) => pair,
        None => return false,
    };
    match ext {
        "py" => stem.starts_with("test_") || stem.ends_with("_test"),
        _ => false,
    }
}

/// A package's `__init__.py`: pytest and unittest import it before any test module in its
/// folder, so what it runs at import changes how every test there sees the code.
fn is_package_init(path: &str) -> bool {
    path.rsplit('/').next() == Some("__init__.py")
}

impl Judging {
    /// Which of the result's `changed` files the judged run takes from the base, and which
    /// it leaves out to run apart (only where every check command's runner can run files
    /// on their own).
    pub(super) fn plan(contract: &Contract, changed: &[ChangedFile], checks: &[String]) -> Self {
        let named: Vec<String> = contract.declared_paths();
        let mut judging = Judging::default();
        let mut added = Vec::new();
        for c in changed {
            let path = normalise(&c.path);
            if !is_test_path(&path) {
                continue;
            }
            match c.change {
                ChangeKind::Added => {
                    if is_test_module(&path) {
                        added.push(path);
                    } else if is_package_init(&path) && !named.contains(&path) {
                        // The runner imports it before the old tests in its folder, which
                        // do not need it: they ran without it on the base.
                        judging.base_form.push(path);
                    }
                }
                ChangeKind::Modified | ChangeKind::Deleted | ChangeKind::TypeChanged => {
                    // A named folder names the files under it.
                    let covered = named
                        .iter()
                        .any(|n| *n == path || path.starts_with(&format!("{n}/")));
                    if covered {
                        judging.result_form.push(path);
                    } else {
                        judging.base_form.push(path);
                    }
                }
            }
        }
        if !added.is_empty() {
            let unsplit: Vec<&String> = checks
                .iter()
                .filter(|command| apart_line(command, &added).is_none())
                .collect();
            if unsplit.is_empty() {
                judging.apart = added;
            } else {
                let listed: Vec<String> = unsplit.iter().map(|c| code(c)).collect();
                judging.notes.push(format!(
                    "The new test files ran with the old ones: {} cannot run test files on \
                     their own.",
                    listed.join(", ")
                ));
            }
        }
        judging
    }

    pub(super) fn is_empty(&self) -> bool {
        self.base_form.is_empty() && self.apart.is_empty()
    }

    /// Puts the judged tree in place in `workspace`: the base form of `base_form`, and
    /// `apart` removed. What the result holds of them is kept under `saved` first, to be
    /// put back by [`Judging::put_back`].
    pub(super) async fn prepare(
        &mut self,
        workspace: &Workspace,
        scratch: &Path,
    ) -> anyhow::Result<Saved> {
        self.keep_imported(workspace).await?;
        let texts = workspace
            .file_texts(self.base_form.clone(), BASE_FORM_BYTES)
            .await
            .context("Could not read the test files' base form")?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = Aside(scratch.join(format!("judged-{}", &id[..12])));
        let (base_dir, saved_dir) = (dir.0.join("base"), dir.0.join("saved"));
        for d in [&base_dir, &saved_dir] {
            std::fs::create_dir_all(d)
                .with_context(|| format!("Could not create {}", d.display()))?;
        }
        let mut kept = Vec::new();
        for (path, (base, _)) in self.base_form.iter().zip(texts) {
            match base {
                FileText::Text(text) => {
                    let target = base_dir.join(path);
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&target, text)?;
                    kept.push(path.clone());
                }
                FileText::Absent => kept.push(path.clone()),
                FileText::Unread(why) => self.notes.push(format!(
                    "{} was judged as the result left it: its base form could not be read \
                     ({why}).",
                    code(path)
                )),
            }
        }
        self.base_form = kept;
        let touched: Vec<String> = self.base_form.iter().chain(&self.apart).cloned().collect();
        let repo = workspace.repo();
        // The result's form of every touched file, to put back after the judged run.
        let present: Vec<ChangedFile> = touched
            .iter()
            .map(|p| ChangedFile {
                path: p.clone(),
                change: if repo.join(p).symlink_metadata().is_ok() {
                    ChangeKind::Modified
                } else {
                    ChangeKind::Deleted
                },
            })
            .collect();
        let notes = copy_tests(&repo, &saved_dir, &present)?;
        if !notes.is_empty() {
            anyhow::bail!(
                "the result's test files could not be kept aside: {}",
                notes.join("; ")
            );
        }
        let judged: Vec<ChangedFile> = self
            .base_form
            .iter()
            .map(|p| ChangedFile {
                path: p.clone(),
                change: if base_dir.join(p).exists() {
                    ChangeKind::Modified
                } else {
                    ChangeKind::Deleted
                },
            })
            .chain(self.apart.iter().map(|p| ChangedFile {
                path: p.clone(),
                change: ChangeKind::Deleted,
            }))
            .collect();
        let notes = copy_tests(&base_dir, &repo, &judged)?;
        if !notes.is_empty() {
            // Undo what went in before saying so: the result stays as it was.
            let _ = copy_tests(&saved_dir, &repo, &present);
            anyhow::bail!("the base form could not be put in: {}", notes.join("; "));
        }
        Ok(Saved {
            _dir: dir,
            saved: saved_dir,
            present,
            base: base_dir,
            judged,
        })
    }

    /// Keeps in the judged run each new test module that a test file it runs in the
    /// result's form imports (and those they import in turn): run apart, that file would
    /// fail to import it, which is no failure of the code.
    async fn keep_imported(&mut self, workspace: &Workspace) -> anyhow::Result<()> {
        if self.apart.is_empty() || self.result_form.is_empty() {
            return Ok(());
        }
        let paths: Vec<String> = self
            .result_form
            .iter()
            .chain(&self.apart)
            .cloned()
            .collect();
        let texts = workspace
            .file_texts(paths.clone(), BASE_FORM_BYTES)
            .await
            .context("Could not read the result's test files")?;
        let text_of = |path: &str| -> Option<&str> {
            let i = paths.iter().position(|p| p == path)?;
            match &texts[i].1 {
                FileText::Text(t) => Some(t.as_str()),
                FileText::Absent | FileText::Unread(_) => None,
            }
        };
        let mut importers: Vec<String> = self.result_form.clone();
        let mut changed = true;
        while changed {
            changed = false;
            let (kept, still): (Vec<String>, Vec<String>) = std::mem::take(&mut self.apart)
                .into_iter()
                .partition(|module| {
                    importers
                        .iter()
                        .filter_map(|f| text_of(f))
                        .any(|text| imports(text, module))
                });
            self.apart = still;
            if !kept.is_empty() {
                changed = true;
                for module in kept {
                    self.notes.push(format!(
                        "{} ran with the old tests: a test file the contract names imports it.",
                        code(&module)
                    ));
                    importers.push(module);
                }
            }
        }
        Ok(())
    }

    /// The line running the files set apart for `command`.
    pub(super) fn apart_line(&self, command: &str) -> Option<String> {
        apart_line(command, &self.apart)
    }

    /// What the report says of the judged run.
    pub(super) fn describe(&self, lines: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        if !self.base_form.is_empty() {
            let files: Vec<String> = self.base_form.iter().map(|p| code(p)).collect();
            out.push(format!(
                "Judged by the base's tests: {} ran in {} base form, since the contract does \
                 not name {}.",
                files.join(", "),
                if files.len() == 1 { "its" } else { "their" },
                if files.len() == 1 { "it" } else { "them" },
            ));
        }
        if !self.apart.is_empty() {
            let files: Vec<String> = self.apart.iter().map(|p| code(p)).collect();
            let how: Vec<String> = lines.iter().map(|l| code(l)).collect();
            out.push(format!(
                "The new test files {} ran apart from the old ones: {}.",
                files.join(", "),
                how.join(", ")
            ));
        }
        out.extend(self.notes.iter().cloned());
        out
    }
}

/// The result's form of the files a judged run touched, kept aside.
pub(super) struct Saved {
    _dir: Aside,
    saved: PathBuf,
    present: Vec<ChangedFile>,
    /// The base form of the files judged in it, and what the judged tree makes of each.
    base: PathBuf,
    judged: Vec<ChangedFile>,
}

/// A folder of the scratch space, removed with everything in it when dropped.
struct Aside(PathBuf);

impl Drop for Aside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Saved {
    /// Puts the judged tree in `workspace` again, after [`Saved::result_tree`].
    pub(super) fn judged_tree(&self, workspace: &Workspace) -> anyhow::Result<()> {
        let notes = copy_tests(&self.base, &workspace.repo(), &self.judged)?;
        if !notes.is_empty() {
            anyhow::bail!("the base form could not be put in: {}", notes.join("; "));
        }
        Ok(())
    }

    /// Puts the result's form of every judged file in `workspace`, for runs of the
    /// result's own tests.
    pub(super) fn result_tree(&self, workspace: &Workspace) -> anyhow::Result<()> {
        let notes = copy_tests(&self.saved, &workspace.repo(), &self.present)?;
        if !notes.is_empty() {
            anyhow::bail!(
                "the result's test files could not be put back: {}",
                notes.join("; ")
            );
        }
        Ok(())
    }

    /// Puts the result's form back in `workspace`, for good.
    pub(super) fn put_back(self, workspace: &Workspace) -> anyhow::Result<()> {
        self.result_tree(workspace)
    }
}

/// A file name or command as inline code in the report: it may hold backticks and line
/// breaks (a file name may hold carriage returns), none of which can end the span.
fn code(text: &str) -> String {
    crate::markdown::code(text, false)
}

/// Whether Python source `text` imports the module of file `path` (`tests/test_cases.py`:
/// `import test_cases`, `from tests.test_cases import x`, `from . import test_cases`).
fn imports(text: &str, path: &str) -> bool {
    let Some(stem) = path.strip_suffix(".py") else {
        return false;
    };
    let name = stem.rsplit('/').next().unwrap_or(stem);
    let name = regex::escape(name);
    let pattern = format!(
        r"(?m)^\s*(?:from\s+[\w.]*\b{name}\s+import\b|import\s+(?:[\w.]+\s*,\s*)*[\w.]*\b{name}\b|from\s+[\w.]+\s+import\s+[^\n]*\b{name}\b)"
    );
    regex::Regex::new(&pattern).is_ok_and(|re| re.is_match(text))
}

/// `command` narrowed to the test files `files`, for the runners that take files: pytest
/// (paths) and unittest (dotted modules). `None` for any other.
fn apart_line(command: &str, files: &[String]) -> Option<String> {
    let format = crate::distill::Format::from_command(command)?;
    let ids: Vec<String> = match format {
        crate::distill::Format::Pytest => files.to_vec(),
        crate::distill::Format::Unittest => files
            .iter()
            .map(|f| f.strip_suffix(".py").map(|s| s.replace('/', ".")))
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    rerun::select(command, &ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(files: &[&str]) -> Contract {
        let listed: Vec<String> = files
            .iter()
            .map(|f| format!(r#"{{"path": "{f}", "action": "modify", "why": "x"}}"#))
            .collect();
        Contract::from_json(&format!(
            r#"{{"summary": "s", "diagnosis": {{"hypothesis": "h"}},
                "change": {{"goal": "g", "files": [{}]}},
                "verification": {{"commands": ["python3 -m pytest"]}},
                "routing": {{"risk": "low"}}}}"#,
            listed.join(",")
        ))
        .unwrap()
    }

    fn changed(path: &str, change: ChangeKind) -> ChangedFile {
        ChangedFile {
            path: path.into(),
            change,
        }
    }

    #[test]
    fn a_module_is_imported_by_any_of_pythons_forms() {
        for text in [
            "import test_cases\n",
            "import os, test_cases\n",
            "from test_cases import CASES\n",
            "from tests.test_cases import CASES\n",
            "from . import test_cases\n",
            "from .test_cases import CASES\n",
            "    from test_cases import CASES\n",
        ] {
            assert!(imports(text, "tests/test_cases.py"), "{text}");
        }
        for text in [
            "import test_cases_more\n",
            "# from test_cases import CASES\n",
            "x = 'test_cases'\n",
            "from other import thing\n",
        ] {
            assert!(!imports(text, "tests/test_cases.py"), "{text}");
        }
    }

    #[test]
    fn old_test_files_the_contract_does_not_name_are_judged_in_their_base_form() {
        let c = contract(&["calc.py", "tests/test_calc.py"]);
        let files = [
            changed("calc.py", ChangeKind::Modified),
            changed("tests/test_calc.py", ChangeKind::Modified),
            changed("tests/test_other.py", ChangeKind::Modified),
            changed("tests/test_gone.py", ChangeKind::Deleted),
            changed("tests/test_new.py", ChangeKind::Added),
            changed("tests/helpers.py", ChangeKind::Added),
            changed("tests/__init__.py", ChangeKind::Added),
            changed("tests/data/case.json", ChangeKind::Added),
        ];
        let judging = Judging::plan(&c, &files, &["python3 -m pytest tests".to_owned()]);
        assert_eq!(
            judging.base_form,
            [
                "tests/test_other.py",
                "tests/test_gone.py",
                "tests/__init__.py"
            ]
        );
        assert_eq!(judging.apart, ["tests/test_new.py"]);
        assert_eq!(
            judging.apart_line("python3 -m pytest tests").as_deref(),
            Some("python3 -m pytest tests/test_new.py")
        );
        assert_eq!(
            apart_line("python3 -m unittest", &["tests/test_new.py".to_owned()]).as_deref(),
            Some("python3 -m unittest tests.test_new")
        );
        // A runner that cannot run files alone runs them with the others, and says so.
        let judging = Judging::plan(&c, &files, &["make test".to_owned()]);
        assert!(judging.apart.is_empty());
        assert!(judging.notes[0].contains("`make test` cannot run test files on their own"));
    }
}
