//! Small real projects, one per test runner, written into a checkout with the tests a
//! caller gives: a Rust crate without dependencies (`cargo test`), a pytest module, a jest
//! suite, a Go module and a `node --test` file. Each runs in the real sandbox with the
//! host's toolchains (Debian's cargo, golang-go, python3-pytest, node and a global jest,
//! which `scripts/test` and `.ci/run` install); none needs the network. [`Upstream`]
//! commits one as a repository's base and checks it out into workspaces.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Workspace, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName};
use planwright::sandbox::Bwrap;
use planwright::verify::Verifier;
use secrecy::SecretString;

use super::git_http::git;

/// A project's runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Cargo,
    Pytest,
    Jest,
    Go,
    Node,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Cargo, Kind::Pytest, Kind::Jest, Kind::Go, Kind::Node];

    /// The command verification runs for the project.
    pub fn check(self) -> &'static str {
        match self {
            Kind::Cargo => "cargo test",
            Kind::Pytest => "python3 -m pytest -v",
            Kind::Jest => "jest --ci",
            Kind::Go => "go test -v ./...",
            Kind::Node => "node --test",
        }
    }

    /// The id the runner's report gives the test `name` written by [`write`].
    pub fn id(self, name: &str) -> String {
        match self {
            Kind::Cargo => format!("tests::{name}"),
            Kind::Pytest => format!("test_project.py::{name}"),
            Kind::Jest | Kind::Go | Kind::Node => name.to_owned(),
        }
    }

    /// A test name the runner accepts, from a plain word (`adds` → `TestAdds` for Go,
    /// `test_adds` for pytest).
    pub fn name(self, word: &str) -> String {
        match self {
            Kind::Cargo | Kind::Jest | Kind::Node => word.to_owned(),
            Kind::Pytest => format!("test_{word}"),
            Kind::Go => {
                let mut chars = word.chars();
                let first = chars.next().map(|c| c.to_ascii_uppercase());
                format!(
                    "Test{}{}",
                    first.into_iter().collect::<String>(),
                    chars.as_str()
                )
            }
        }
    }

    /// A body that passes.
    pub fn passing(self) -> &'static str {
        match self {
            Kind::Cargo => "assert_eq!(1 + 1, 2);",
            Kind::Pytest => "assert 1 + 1 == 2",
            Kind::Jest | Kind::Node => "if (1 + 1 !== 2) throw new Error('arithmetic');",
            Kind::Go => "if 1+1 != 2 {\n\tt.Fatal(\"arithmetic\")\n}",
        }
    }

    /// A body that fails every time.
    pub fn failing(self) -> &'static str {
        match self {
            Kind::Cargo => "assert_eq!(1 + 1, 3, \"always fails\");",
            Kind::Pytest => "assert 1 + 1 == 3, \"always fails\"",
            Kind::Jest | Kind::Node => "throw new Error('always fails');",
            Kind::Go => "t.Fatal(\"always fails\")",
        }
    }

    /// A body that fails every other run in the same checkout (the first, the third, …):
    /// it counts its runs in `counter`, a file in the working directory.
    pub fn flaky(self, counter: &str) -> String {
        match self {
            Kind::Cargo => format!(
                "let n: u32 = std::fs::read_to_string({counter:?}).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0) + 1;\n\
                 std::fs::write({counter:?}, n.to_string()).unwrap();\n\
                 assert!(n % 2 == 0, \"run {{}} fails\", n);"
            ),
            Kind::Pytest => format!(
                "import pathlib\n\
                 p = pathlib.Path({counter:?})\n\
                 n = int(p.read_text()) + 1 if p.exists() else 1\n\
                 p.write_text(str(n))\n\
                 assert n % 2 == 0, f\"run {{n}} fails\""
            ),
            Kind::Jest | Kind::Node => format!(
                "const fs = require('fs');\n\
                 const n = (fs.existsSync({counter:?}) ? Number(fs.readFileSync({counter:?}, 'utf8')) : 0) + 1;\n\
                 fs.writeFileSync({counter:?}, String(n));\n\
                 if (n % 2 === 1) throw new Error(`run ${{n}} fails`);"
            ),
            Kind::Go => format!(
                "b, _ := os.ReadFile({counter:?})\n\
                 n, _ := strconv.Atoi(string(b))\n\
                 n++\n\
                 if err := os.WriteFile({counter:?}, []byte(strconv.Itoa(n)), 0o644); err != nil {{\n\
                 \tt.Fatal(err)\n\
                 }}\n\
                 if n%2 == 1 {{\n\
                 \tt.Fatalf(\"run %d fails\", n)\n\
                 }}"
            ),
        }
    }
}

/// Writes the project of `kind` into `repo` with `tests` (name, body) as its only tests,
/// replacing the tests a previous call wrote; returns the command that checks it. An
/// empty `tests` leaves a project that runs no tests.
pub fn write(kind: Kind, repo: &Path, tests: &[(&str, &str)]) -> &'static str {
    match kind {
        Kind::Cargo => {
            put(
                repo,
                "Cargo.toml",
                "[package]\nname = \"project\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
            );
            put(
                repo,
                "Cargo.lock",
                "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 3\n\n[[package]]\nname = \"project\"\nversion = \"0.1.0\"\n",
            );
            let mut lib = String::from(
                "pub fn add(a: i64, b: i64) -> i64 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n",
            );
            for (name, body) in tests {
                lib.push_str(&format!(
                    "    #[test]\n    fn {name}() {{\n{}\n    }}\n\n",
                    indent(body, 8)
                ));
            }
            lib.push_str("}\n");
            put(repo, "src/lib.rs", &lib);
        }
        Kind::Pytest => {
            let mut text = String::new();
            for (name, body) in tests {
                text.push_str(&format!("def {name}():\n{}\n\n\n", indent(body, 4)));
            }
            put(repo, "test_project.py", &text);
        }
        Kind::Jest | Kind::Node => {
            put(
                repo,
                "package.json",
                "{\"name\": \"project\", \"private\": true}\n",
            );
            let mut text = match kind {
                Kind::Node => String::from("const { test } = require('node:test');\n\n"),
                _ => String::new(),
            };
            for (name, body) in tests {
                text.push_str(&format!(
                    "test({name:?}, () => {{\n{}\n}});\n\n",
                    indent(body, 2)
                ));
            }
            // node --test finds `*.test.js` files as jest does; jest refuses a file
            // without tests, so no tests is no file.
            if tests.is_empty() {
                let _ = std::fs::remove_file(repo.join("project.test.js"));
            } else {
                put(repo, "project.test.js", &text);
            }
        }
        Kind::Go => {
            put(repo, "go.mod", "module example.com/project\n\ngo 1.19\n");
            put(
                repo,
                "project.go",
                "package project\n\nfunc Add(a, b int) int { return a + b }\n",
            );
            let path = repo.join("project_test.go");
            if tests.is_empty() {
                // `[no test files]`: Go runs nothing at all.
                let _ = std::fs::remove_file(path);
            } else {
                let mut text = String::from(
                    "package project\n\nimport (\n\t\"os\"\n\t\"strconv\"\n\t\"testing\"\n)\n\nvar _ = os.ReadFile\nvar _ = strconv.Itoa\n\n",
                );
                for (name, body) in tests {
                    text.push_str(&format!(
                        "func {name}(t *testing.T) {{\n{}\n}}\n\n",
                        indent(body, 1)
                    ));
                }
                put(repo, "project_test.go", &text);
            }
        }
    }
    kind.check()
}

fn put(repo: &Path, path: &str, text: &str) {
    let full = repo.join(path);
    std::fs::create_dir_all(full.parent().expect("a file in a folder")).expect("a folder");
    std::fs::write(&full, text).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
}

/// `body` with every line indented by `n` spaces (Go's by `n` tabs).
fn indent(body: &str, n: usize) -> String {
    let pad = if n == 1 {
        "\t".to_owned()
    } else {
        " ".repeat(n)
    };
    body.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A project committed to an upstream repository, the mirror cache and workspaces over it,
/// and a verifier on the real sandbox; all under the target folder and open to the
/// unprivileged user sandboxes run as.
pub struct Upstream {
    pub root: tempfile::TempDir,
    pub url: PathBuf,
    pub base: String,
    pub workspaces: Workspaces,
    pub key: MirrorKey,
    pub verifier: Verifier,
}

impl Upstream {
    /// The project of `kind` with `tests`, committed as the base.
    pub fn new(kind: Kind, tests: &[(&str, &str)]) -> Upstream {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary folder");
        let (data, scratch) = (root.path().join("data"), root.path().join("s"));
        for dir in [root.path(), &data, &scratch] {
            std::fs::create_dir_all(dir).expect("a folder");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .expect("permissions");
        }
        let url = root.path().join("up.git");
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).expect("a folder");
        git(
            root.path(),
            &["init", "-q", "--bare", "-b", "main", "up.git"],
        );
        git(&work, &["init", "-q", "-b", "main"]);
        write(kind, &work, tests);
        put(&work, ".gitignore", "target/\n");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "the project"]);
        git(
            &work,
            &["push", "-q", url.to_str().expect("a UTF-8 path"), "main"],
        );
        let base = git(&work, &["rev-parse", "HEAD"]);
        let cache = Arc::new(MirrorCache::new(&data));
        let workspaces = Workspaces::new(&data, cache, Workspaces::default_owner());
        let key = MirrorKey::new("github", RepoName::parse("octo/project").expect("a name"))
            .expect("a key");
        let sandbox = Bwrap::new(Vec::new())
            .expect("bubblewrap is installed (CI installs the bubblewrap package)")
            .with_relay_program(env!("CARGO_BIN_EXE_planwright"));
        let verifier = Verifier::new(Arc::new(sandbox), scratch);
        Upstream {
            root,
            url,
            base,
            workspaces,
            key,
            verifier,
        }
    }

    /// A fresh checkout of the base.
    pub async fn workspace(&self) -> Workspace {
        self.workspaces
            .create(&WorkspaceRequest {
                mirror: self.key.clone(),
                remote: GitRemote {
                    url: self.url.display().to_string(),
                    username: "x-access-token".into(),
                    password: SecretString::from("unused-for-a-local-path"),
                },
                base: CommitSha(self.base.clone()),
                issue: IssueNumber(7),
                title: "a change".into(),
                size: None,
            })
            .await
            .expect("a workspace at the base")
    }
}
