//! The read-only repository tools the planner and scouts share (`read_file`, `list_files`,
//! `search`) and the compact repository map. They read a checkout at the base commit and
//! never follow a path or symlink out of it; every answer is bounded.

mod generated;
mod glob;
mod instructions;
mod map;
mod read;
mod repo;
mod search;
mod source;
mod tags;
mod walk;

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::llm::Tool;
pub use glob::{PathGlob, glob_matches};
pub use instructions::{FOLDER_FILES, MAX_INSTRUCTION_BYTES, ROOT_FILES, Withheld, candidates};
pub use map::{DEFAULT_TOKENS as DEFAULT_MAP_TOKENS, tokens};
use read::{READ_MAX_BYTES, clip_line};
pub use repo::RepoTools;
pub use search::SearchOptions;
use search::{MAX_LISTED, MAX_MATCHES};
use source::{Found, Source};
pub use tags::{Lang as SourceLang, definition};

/// Lines one `read_file` answer holds at most.
const MAX_READ_LINES: usize = 250;

impl RepoTools {
    /// The tools on the files of the folder `root`, as they are when read.
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("Cannot open the checkout at {}: {e}", root.display()))?;
        Ok(RepoTools {
            source: Source::Disk(root.clone()),
            root,
            commit: None,
            map_tokens: map::DEFAULT_TOKENS,
            widening: None,
        })
    }

    /// The tools on `commit`'s tree in the repository at `git_dir` (its objects; nothing
    /// needs to be checked out), for a checkout at `root` that commands run in. What they
    /// show is the commit, whatever is written into the checkout meanwhile.
    pub fn in_tree(root: &Path, git_dir: &Path, commit: &str) -> anyhow::Result<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("Cannot open the checkout at {}: {e}", root.display()))?;
        let repo = git2::Repository::open(git_dir).map_err(|e| {
            anyhow::anyhow!("Cannot open the repository at {}: {e}", git_dir.display())
        })?;
        let oid = git2::Oid::from_str(commit)
            .and_then(|oid| repo.find_commit(oid).map(|c| c.id()))
            .map_err(|e| anyhow::anyhow!("Cannot read the commit {commit}: {e}"))?;
        Ok(RepoTools {
            root,
            source: Source::Tree {
                git_dir: repo.path().to_path_buf(),
                commit: oid,
            },
            commit: Some(oid.to_string()),
            map_tokens: map::DEFAULT_TOKENS,
            widening: None,
        })
    }

    /// Says the checkout is `commit` and stays so: its map is built once and kept.
    pub fn at_commit(mut self, commit: &str) -> Self {
        self.commit = Some(commit.to_owned());
        self
    }

    /// The map's budget in tokens (`MAP_TOKENS`).
    pub fn with_map_tokens(mut self, tokens: usize) -> Self {
        self.map_tokens = tokens.max(map::MIN_TOKENS);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Says the checkout at `root` is sparse: the rest of it is checked out before the
    /// first command runs there ([`RepoTools::ready_for_commands`]).
    pub fn with_widening(mut self, widening: Option<std::sync::Arc<crate::git::Widening>>) -> Self {
        self.widening = widening;
        self
    }

    /// Makes the checkout whole, once, for a command that may read any of it; the tools
    /// themselves read the commit's tree and never need this.
    pub async fn ready_for_commands(&self) -> Result<(), String> {
        match &self.widening {
            Some(widening) => widening
                .complete()
                .await
                .map_err(|e| format!("the rest of the checkout could not be written: {e}")),
            None => Ok(()),
        }
    }

    /// The `run` tool beside the read-only ones: a shell command in a sandbox, with a
    /// timeout the model may ask for up to `max_secs`. The scouts and the builtin executor
    /// each describe where it runs.
    pub fn run_definition(description: &str, max_secs: u64) -> Tool {
        Tool {
            name: "run".into(),
            description: description.into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": max_secs}
                },
                "required": ["command"]
            }),
        }
    }

    /// The tool definitions for the model, in DESIGN's names.
    pub fn definitions() -> Vec<Tool> {
        vec![
            Tool {
                name: "read_file".into(),
                description: format!(
                    "Read lines of a file in the repository (at most {MAX_READ_LINES} lines per call), with line numbers."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "relative to the repository root"},
                        "start_line": {"type": "integer", "minimum": 1},
                        "end_line": {"type": "integer", "minimum": 1}
                    },
                    "required": ["path"]
                }),
            },
            Tool {
                name: "list_files".into(),
                description: format!(
                    "List files under a folder, optionally filtered by a glob (`*.rs`, `src/**/test_*.py`). Says how many match and, past {MAX_LISTED}, in which folders."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "folder relative to the root; empty for the root"},
                        "pattern": {"type": "string"}
                    }
                }),
            },
            Tool {
                name: "search".into(),
                description: format!(
                    "Search file contents with a regular expression (case-insensitive unless case_sensitive). Answers the total count, where the matches are by folder and file, then at most {MAX_MATCHES} lines as path:line: text, definitions first."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "path": {"type": "string", "description": "folder or file to search in; empty for everything"},
                        "glob": {"type": "string", "description": "only paths matching this glob, e.g. `*.py` or `src/**/*.rs`"},
                        "whole_word": {"type": "boolean", "description": "match whole words only"},
                        "case_sensitive": {"type": "boolean"}
                    },
                    "required": ["pattern"]
                }),
            },
        ]
    }

    /// Runs one of the read tools; `None` when `name` is not one of them. The error side
    /// is a message for the model (a tool error), not a failure of the session.
    pub fn call(&self, name: &str, input: &Value) -> Option<Result<String, String>> {
        let text = |key: &str| input.get(key).and_then(Value::as_str);
        let number = |key: &str| {
            input
                .get(key)
                .and_then(|v| v.as_u64().or_else(|| v.as_str()?.trim().parse().ok()))
                .map(|n| n as usize)
        };
        let flag = |key: &str| {
            input
                .get(key)
                .is_some_and(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")))
        };
        Some(match name {
            "read_file" => match text("path") {
                Some(path) => self.read_file(path, number("start_line"), number("end_line")),
                None => Err("read_file needs `path`".into()),
            },
            "list_files" => self.list_files(text("path").unwrap_or(""), text("pattern")),
            "search" => match text("pattern") {
                Some(pattern) => self.search_with(
                    pattern,
                    text("path").unwrap_or(""),
                    &SearchOptions {
                        whole_word: flag("whole_word"),
                        case_sensitive: flag("case_sensitive"),
                        glob: text("glob")
                            .filter(|g| !g.trim().is_empty())
                            .map(str::to_owned),
                    },
                ),
                None => Err("search needs `pattern`".into()),
            },
            _ => return None,
        })
    }

    /// [`RepoTools::call`] on a blocking thread: a search may read for seconds, which an
    /// async task must not spend.
    pub async fn call_in_background(
        &self,
        name: &str,
        input: &Value,
    ) -> Option<Result<String, String>> {
        let (tools, name, input) = (self.clone(), name.to_owned(), input.clone());
        tokio::task::spawn_blocking(move || tools.call(&name, &input))
            .await
            .unwrap_or_else(|e| Some(Err(format!("the tool failed: {e}"))))
    }

    /// A path inside the repository, or why not. Symlinks are resolved and must stay
    /// inside.
    fn resolve(&self, relative: &str) -> Result<Found, String> {
        self.source.resolve(relative)
    }

    /// Lines of a file, at most `MAX_READ_LINES` at once, from its first
    /// `READ_MAX_BYTES`: a 2 GB file is never read whole.
    pub fn read_file(
        &self,
        path: &str,
        start: Option<usize>,
        end: Option<usize>,
    ) -> Result<String, String> {
        let found = self.resolve(path)?;
        if found.dir {
            return Err(format!("`{path}` is a folder; use list_files"));
        }
        let (bytes, size) = self
            .source
            .reader()
            .found(&found)
            .map_err(|e| format!("cannot read `{path}`: {e}"))?;
        if bytes.iter().take(8000).any(|b| *b == 0) {
            return Err(format!("`{path}` is a binary file ({size} bytes)"));
        }
        let cut = size > bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.lines().collect();
        if cut && !bytes.ends_with(b"\n") && lines.len() > 1 {
            // The last line read is only the start of one (a file of one long line keeps
            // it, clipped like any other).
            lines.pop();
        }
        let total = lines.len();
        let start = start.unwrap_or(1).max(1);
        if total == 0 {
            return Ok(format!("{} is empty", found.rel));
        }
        if start > total {
            return Err(format!("`{path}` has only {total} lines"));
        }
        let wanted_end = end.unwrap_or(total).clamp(start, total);
        let end = wanted_end.min(start + MAX_READ_LINES - 1);
        let mut out = if cut {
            format!(
                "{} lines {start}-{end} of the first {total} (the file has {size} bytes; only its first {} MiB are read)\n",
                found.rel,
                READ_MAX_BYTES >> 20
            )
        } else {
            format!("{} lines {start}-{end} of {total}\n", found.rel)
        };
        for (i, line) in lines[start - 1..end].iter().enumerate() {
            let _ = writeln!(out, "{:>5} {}", start + i, clip_line(line));
        }
        if end < wanted_end {
            let _ = writeln!(
                out,
                "… {} more lines; read from line {} to continue",
                wanted_end - end,
                end + 1
            );
        }
        Ok(out)
    }

    /// The files and definitions most relevant to `question`, within the map's token
    /// budget. Built once per commit (when the commit is known) and per question.
    pub fn map(&self, question: &str) -> String {
        match &self.commit {
            Some(commit) => {
                map::cached_map(commit, &self.source, question, self.map_tokens).to_string()
            }
            None => map::Index::build(&self.source).render(question, self.map_tokens),
        }
    }

    /// `map`, on a blocking thread: ranking a large repository's graph takes a while,
    /// which an async task must not spend.
    pub async fn map_in_background(&self, question: &str) -> String {
        let tools = self.clone();
        let question = question.to_owned();
        tokio::task::spawn_blocking(move || tools.map(&question))
            .await
            .unwrap_or_else(|e| format!("(the repository map could not be made: {e})"))
    }

    /// Builds the commit's index now (it takes seconds on a large repository), so the
    /// model calls that follow do not wait for it inside an async task.
    pub fn prepare_map(&self) {
        if let Some(commit) = &self.commit {
            map::index_for(commit, &self.source);
        }
    }

    pub fn search(&self, pattern: &str, path: &str) -> Result<String, String> {
        self.search_with(pattern, path, &SearchOptions::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git` in `dir`, with `input` on its standard input; what it printed.
    fn git_in(dir: &Path, args: &[&str], input: Option<&[u8]>) -> String {
        use std::io::Write as _;
        let mut child = std::process::Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(bytes) = input {
            stdin.write_all(bytes).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn repo() -> (tempfile::TempDir, RepoTools) {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().join("repo");
        std::fs::create_dir_all(root.join("src/parse")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "secret-ish").unwrap();
        std::fs::write(root.join("README.md"), "# demo\n").unwrap();
        let body: String = (1..=600).map(|i| format!("line {i}\n")).collect();
        std::fs::write(root.join("src/long.rs"), body).unwrap();
        std::fs::write(
            root.join("src/parse/mod.rs"),
            "fn parse() {}\n// TODO trailing comma\n",
        )
        .unwrap();
        std::fs::write(root.join("src/bin.dat"), [0u8, 1, 2]).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
        let secret = dir.path().join("outside-secret.txt");
        std::fs::write(&secret, "TOKEN=hunter2\n").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("src/link.txt")).unwrap();
        let tools = RepoTools::new(root).unwrap();
        (dir, tools)
    }

    #[test]
    fn read_file_is_bounded_and_numbered() {
        let (_d, t) = repo();
        let out = t.read_file("src/long.rs", Some(10), Some(12)).unwrap();
        assert!(out.starts_with("src/long.rs lines 10-12 of 600\n"), "{out}");
        assert!(out.contains("   11 line 11"));
        let out = t.read_file("src/long.rs", None, None).unwrap();
        assert!(out.contains("lines 1-250 of 600"));
        assert!(out.contains("350 more lines; read from line 251"));
        assert!(
            t.read_file("src/long.rs", Some(700), None)
                .unwrap_err()
                .contains("only 600")
        );
        assert!(
            t.read_file("src/bin.dat", None, None)
                .unwrap_err()
                .contains("binary")
        );
    }

    #[test]
    fn paths_cannot_leave_the_checkout() {
        let (_d, t) = repo();
        for bad in [
            "../x",
            "/etc/passwd",
            "escape/passwd",
            "src/../../x",
            ".git/config",
        ] {
            assert!(t.read_file(bad, None, None).is_err(), "{bad}");
        }
        assert!(t.list_files("escape", None).is_err());
        assert!(t.read_file("src/link.txt", None, None).is_err());
        assert!(t.search("hunter2", "").unwrap().starts_with("no matches ("));
        assert!(!t.list_files("", None).unwrap().contains(".git"));
    }

    #[test]
    fn list_and_search() {
        let (_d, t) = repo();
        let all = t.list_files("", None).unwrap();
        assert_eq!(all.lines().count(), 6, "{all}");
        assert_eq!(t.list_files("", Some("*.rs")).unwrap().lines().count(), 2);
        assert_eq!(
            t.list_files("", Some("src/**/mod.rs")).unwrap().trim(),
            "src/parse/mod.rs"
        );
        let hits = t.search("trailing\\s+COMMA", "").unwrap();
        assert_eq!(
            hits.lines().collect::<Vec<_>>(),
            [
                "1 matching lines in 1 files (searched 3 files; not searched: 1 binary, 2 symlinks to no file inside)",
                "src/parse/mod.rs:2: // TODO trailing comma"
            ],
            "{hits}"
        );
        assert!(
            t.search("nothing-here", "src")
                .unwrap()
                .starts_with("no matches (searched 2 files")
        );
        assert!(
            t.search("(", "")
                .unwrap_err()
                .contains("regular expression")
        );
        let many = t.search("line", "src/long.rs").unwrap();
        assert!(many.starts_with("600 matching lines in 1 files"), "{many}");
        assert!(
            many.contains("… 597 more matching lines not shown"),
            "{many}"
        );
    }

    /// A tree with many matches in a vendored folder and a few in the code that matters.
    fn monorepo() -> (tempfile::TempDir, RepoTools) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        for i in 0..40 {
            let crate_dir = root.join(format!("crates/a{i:02}-0.1.0"));
            std::fs::create_dir_all(crate_dir.join("src")).unwrap();
            std::fs::write(crate_dir.join(".cargo_vcs_info.json"), "{}").unwrap();
            std::fs::write(
                crate_dir.join("src/lib.rs"),
                "// preserve the reservation order\nfn reserve_slot() {}\nfn preserve() { reserve_slot() }\n",
            )
            .unwrap();
        }
        std::fs::create_dir_all(root.join("zz_inventory")).unwrap();
        std::fs::write(
            root.join("zz_inventory/stock.py"),
            "class Stock:\n    def reserve(self, n):\n        return self.take(n)\n\n    def take(self, n):\n        pass\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(
            root.join("tests/test_stock.py"),
            "from zz_inventory.stock import Stock\n\ndef test_reserve():\n    Stock().reserve(2)\n",
        )
        .unwrap();
        let tools = RepoTools::new(&root).unwrap();
        (dir, tools)
    }

    #[test]
    fn search_says_how_many_and_where_and_shows_definitions_first() {
        let (_d, t) = monorepo();
        let out = t.search("reserv", "").unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0], "123 matching lines in 42 files (searched 82 files)",
            "{out}"
        );
        assert!(
            lines[1].starts_with(
                "By folder (matching lines): crates/ 120 (generated or vendored) · tests/ 2 · zz_inventory/ 1"
            ),
            "{out}"
        );
        assert!(
            lines[2].starts_with("Within crates/: crates/a00-0.1.0/ 3"),
            "{out}"
        );
        assert!(
            lines[3].starts_with("Most matches: crates/a00-0.1.0/src/lib.rs 3"),
            "{out}"
        );
        // The repository's own files first, definitions before uses.
        assert_eq!(
            lines[5], "tests/test_stock.py:3: def test_reserve():  (definition)",
            "{out}"
        );
        assert_eq!(
            lines[6], "zz_inventory/stock.py:2: def reserve(self, n):  (definition)",
            "{out}"
        );
        assert_eq!(
            lines[7], "tests/test_stock.py:4: Stock().reserve(2)",
            "{out}"
        );
        assert_eq!(
            lines[8], "crates/a00-0.1.0/src/lib.rs:2: fn reserve_slot() {}  (definition)",
            "{out}"
        );
        assert!(out.ends_with("narrow with path, glob, whole_word or case_sensitive\n"));

        // Whole words: `reserve` is not `reserve_slot` or `preserve`.
        let whole = t
            .search_with(
                "reserve",
                "",
                &SearchOptions {
                    whole_word: true,
                    ..SearchOptions::default()
                },
            )
            .unwrap();
        assert!(whole.starts_with("2 matching lines in 2 files"), "{whole}");
        let cased = t
            .search_with(
                "stock",
                "",
                &SearchOptions {
                    case_sensitive: true,
                    glob: Some("*.py".into()),
                    ..SearchOptions::default()
                },
            )
            .unwrap();
        assert!(
            cased.starts_with("1 matching lines in 1 files (searched 2 files)"),
            "{cased}"
        );
        let through_call = t
            .call(
                "search",
                &json!({"pattern": "reserve", "whole_word": true, "glob": "tests/**"}),
            )
            .unwrap()
            .unwrap();
        assert!(
            through_call.starts_with("1 matching lines in 1 files"),
            "{through_call}"
        );
    }

    #[test]
    fn list_files_says_how_many_and_where() {
        let (_d, t) = monorepo();
        let few = t.list_files("", Some("*.py")).unwrap();
        assert_eq!(few, "tests/test_stock.py\nzz_inventory/stock.py\n");
        let none = t.list_files("tests", Some("*.rs")).unwrap();
        assert_eq!(none, "no files match (of 1 file under this path)");
    }

    #[test]
    fn the_map_ranks_what_the_question_names_first_and_fits_its_budget() {
        let (_d, t) = monorepo();
        let t = t.with_map_tokens(300);
        let map = t.map("Stock.reserve goes negative in zz_inventory");
        assert!(
            map.starts_with("82 files; 80 generated or vendored (ranked last)."),
            "{map}"
        );
        let first = map.lines().nth(2).unwrap();
        assert_eq!(first, "zz_inventory/stock.py", "{map}");
        assert!(
            map.contains("     2│    def reserve(self, n):")
                || map.contains("     2│def reserve(self, n):"),
            "{map}"
        );
        assert!(tokens(&map) <= 300, "{} tokens:\n{map}", tokens(&map));
        assert!(map.contains("Not shown: "), "{map}");
        assert!(map.contains("crates/ "), "{map}");
    }

    #[test]
    fn globs() {
        assert!(glob_matches("*.rs", "src/a/b.rs"));
        assert!(glob_matches("src/*.rs", "src/b.rs"));
        assert!(!glob_matches("src/*.rs", "src/a/b.rs"));
        assert!(glob_matches("src/**/*.rs", "src/a/b.rs"));
        assert!(glob_matches("src/**/*.rs", "src/b.rs"));
        assert!(glob_matches("test_?.py", "tests/test_a.py"));
        assert!(!glob_matches("*.py", "a.rs"));
        assert!(glob_matches("**", "a/b/c"));
        assert!(glob_matches(
            ".github/workflows/**",
            ".github/workflows/ci.yml"
        ));
        assert!(!glob_matches(".github/workflows/**", ".github/ci.yml"));
        assert!(glob_matches("src/**", "src/a/b.rs"));
        assert!(glob_matches("src/a**rs", "src/a/b.rs"));
        assert!(glob_matches("src/a**rs", "src/ars"));
        assert!(!glob_matches("src/a**rs", "src/b/a.rs"));
        assert!(glob_matches("**b.rs", "a/b.rs"));
        assert!(glob_matches("docs/[draft]{1}.md", "docs/[draft]{1}.md"));
        assert!(!glob_matches("docs/[draft].md", "docs/d.md"));
        assert!(!glob_matches("src/?.rs", "src//.rs"));
    }

    /// Symlink loops, a folder linked to itself, a name that is not UTF-8, a 2 GB file, a
    /// pipe and a pattern that matches every line: each tool finishes, reads within its
    /// bounds and says what it left out.
    #[test]
    fn hostile_trees_are_bounded_and_counted() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let src = root.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::os::unix::fs::symlink("b", root.join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.join("b")).unwrap();
        std::os::unix::fs::symlink(".", src.join("self")).unwrap();
        let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9.py");
        std::fs::write(
            src.join(latin1),
            "def reserve_units(quantity):\n    return quantity\n",
        )
        .unwrap();
        // Text first, then 2 GB of nothing (a sparse file: no disk is used).
        let huge = src.join("huge.log");
        let head: String = (1..=1000).map(|i| format!("entry {i}\n")).collect();
        std::fs::write(&huge, &head).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&huge)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        let pipe = std::ffi::CString::new(src.join("pipe").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o644) }, 0);
        let t = RepoTools::new(&root).unwrap();

        let listed = t.list_files("", None).unwrap();
        assert_eq!(
            listed.lines().collect::<Vec<_>>(),
            ["a", "b", "src/caf\u{fffd}.py", "src/huge.log", "src/self"],
            "{listed}"
        );

        let found = t.search("reserve_units", "").unwrap();
        assert_eq!(
            found.lines().collect::<Vec<_>>(),
            [
                "1 matching lines in 1 files (searched 1 files; not searched: 1 larger than 1 MiB, 3 symlinks to no file inside)",
                "src/caf\u{fffd}.py:1: def reserve_units(quantity):",
            ],
            "{found}"
        );
        let everything = t.search("", "").unwrap();
        assert!(
            everything.starts_with("2 matching lines in 1 files"),
            "{everything}"
        );

        let read = t.read_file("src/huge.log", Some(999), None).unwrap();
        assert!(
            read.contains("only its first 8 MiB are read"),
            "{}",
            &read[..200.min(read.len())]
        );
        assert!(
            read.contains("  999 entry 999"),
            "{}",
            &read[..200.min(read.len())]
        );
        assert!(
            t.read_file("src/pipe", None, None)
                .unwrap_err()
                .contains("not a regular file")
        );

        let map = t.map("reserve_units");
        assert!(map.contains("def reserve_units(quantity):"), "{map}");
        assert!(map.contains("src/huge.log"), "{map}");
    }

    /// A file past the read limit: one long line is shown (clipped), not called empty; a
    /// cut that falls at a line end keeps that line.
    #[test]
    fn a_large_file_is_read_up_to_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("min.js"), "x".repeat(9 << 20)).unwrap();
        // Lines of 8 bytes: 8 MiB is a whole number of them.
        let lines: String = (0..(9 << 20) / 8).map(|i| format!("{i:07}\n")).collect();
        std::fs::write(root.join("lines.txt"), lines).unwrap();
        let t = RepoTools::new(root).unwrap();
        let min = t.read_file("min.js", None, None).unwrap();
        assert!(
            min.starts_with("min.js lines 1-1 of the first 1 (the file has 9437184 bytes"),
            "{}",
            &min[..200]
        );
        let last = (8 << 20) / 8;
        let read = t.read_file("lines.txt", Some(last), None).unwrap();
        assert!(
            read.starts_with(&format!(
                "lines.txt lines {last}-{last} of the first {last} "
            )),
            "{read}"
        );
        assert!(read.contains(&format!("{:07}", last - 1)), "{read}");
    }

    /// Whole words: ASCII ones stop at ASCII word ends, others at Unicode's.
    #[test]
    fn whole_words_in_and_out_of_ascii() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(
            root.join("a.txt"),
            "foobar\nfoo bar\nun café noir\ncaféine\n",
        )
        .unwrap();
        let t = RepoTools::new(root).unwrap();
        let whole = SearchOptions {
            whole_word: true,
            ..SearchOptions::default()
        };
        let foo = t.search_with("foo", "", &whole).unwrap();
        assert!(foo.starts_with("1 matching lines"), "{foo}");
        assert!(foo.contains("a.txt:2: foo bar"), "{foo}");
        let cafe = t.search_with("café", "", &whole).unwrap();
        assert!(cafe.starts_with("1 matching lines"), "{cafe}");
        assert!(cafe.contains("a.txt:3: un café noir"), "{cafe}");
    }

    #[test]
    fn a_pattern_made_to_backtrack_finishes() {
        // With a backtracking matcher each `*` retries every split of the rest: this took
        // minutes; linear matching answers at once.
        let pattern = format!("{}b", "*a".repeat(40));
        let deep = format!("{}b", "**/a".repeat(20));
        let path = "a".repeat(200);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((
                glob_matches(&pattern, &path),
                glob_matches(&deep, &path),
                glob_matches(&pattern, &format!("{path}b")),
            ));
        });
        let answer = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the match finishes");
        assert_eq!(answer, (false, false, true));
    }

    /// The tools read from a commit's tree answer as they do from its checkout: the same
    /// listings, searches, reads, map and refusals, through symlinks inside and out, a
    /// loop, a name that is not UTF-8, a binary file, generated content and a file past
    /// the read limit.
    #[test]
    fn a_commits_tree_answers_as_its_checkout_does() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let write = |rel: &str, text: &[u8]| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("README.md", b"# demo\nSee src/parse/mod.rs.\n");
        let long: String = (1..=600).map(|i| format!("line {i}\n")).collect();
        write("src/long.rs", long.as_bytes());
        write(
            "src/parse/mod.rs",
            b"pub fn parse_items() {}\n// TODO trailing comma\nfn helper() { parse_items() }\n",
        );
        write("src/bin.dat", &[0u8, 1, 2]);
        write("gen/out.rs", b"fn parse_generated() {}\n");
        write(".gitattributes", b"gen/** linguist-generated\n");
        let big: String = (0..(9 << 20) / 8).map(|i| format!("{i:07}\n")).collect();
        write("data/big.txt", big.as_bytes());
        write("sub/dir/deep.py", b"def parse_deep():\n    return 1\n");
        std::fs::write(
            root.join("src")
                .join(std::ffi::OsStr::from_bytes(b"caf\xe9.py")),
            "def parse_cafe():\n    pass\n",
        )
        .unwrap();
        let link =
            |target: &str, at: &str| std::os::unix::fs::symlink(target, root.join(at)).unwrap();
        link("/etc", "escape");
        link("../../outside.txt", "src/out.txt");
        link("parse/mod.rs", "src/alias.rs");
        link("../sub/dir", "src/deep");
        link(".", "src/self");
        link("parse/../long.rs", "src/up.rs");
        link("../src/../README.md", "src/round.md");
        link("b", "a");
        link("a", "b");
        std::fs::write(dir.path().join("outside.txt"), "TOKEN=hunter2\n").unwrap();
        let git = |args: &[&str]| git_in(&root, args, None);
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "all"]);
        let head = git(&["rev-parse", "HEAD"]);
        let disk = RepoTools::new(&root).unwrap();
        let tree = RepoTools::in_tree(&root, &root.join(".git"), &head).unwrap();

        let calls = [
            ("list_files", json!({})),
            ("list_files", json!({"path": "src"})),
            ("list_files", json!({"path": "src/deep"})),
            ("list_files", json!({"path": "", "pattern": "*.py"})),
            ("list_files", json!({"path": "escape"})),
            ("read_file", json!({"path": "README.md"})),
            (
                "read_file",
                json!({"path": "src/long.rs", "start_line": 10, "end_line": 12}),
            ),
            ("read_file", json!({"path": "src/alias.rs"})),
            ("read_file", json!({"path": "./src/deep/deep.py"})),
            ("read_file", json!({"path": "src/self/parse/mod.rs"})),
            ("read_file", json!({"path": "src/up.rs", "end_line": 2})),
            ("read_file", json!({"path": "src/round.md"})),
            ("read_file", json!({"path": "src/alias.rs/x"})),
            (
                "read_file",
                json!({"path": "data/big.txt", "start_line": 1048576}),
            ),
            ("read_file", json!({"path": "src/bin.dat"})),
            ("read_file", json!({"path": "src"})),
            ("read_file", json!({"path": "escape/passwd"})),
            ("read_file", json!({"path": "src/out.txt"})),
            ("read_file", json!({"path": "a"})),
            ("read_file", json!({"path": "../x"})),
            ("read_file", json!({"path": "missing.rs"})),
            ("read_file", json!({"path": "README.md/x"})),
            ("search", json!({"pattern": "parse"})),
            ("search", json!({"pattern": "parse_items", "path": "src"})),
            ("search", json!({"pattern": "hunter2"})),
            ("search", json!({"pattern": "line", "path": "src/long.rs"})),
            (
                "search",
                json!({"pattern": "parse", "glob": "*.py", "whole_word": false}),
            ),
        ];
        for (name, input) in &calls {
            let (from_disk, from_tree) = (
                disk.call(name, input).unwrap(),
                tree.call(name, input).unwrap(),
            );
            match (&from_disk, &from_tree) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{name} {input}"),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{name} {input}: {from_disk:?} from the checkout, {from_tree:?} from the tree"
                ),
            }
        }
        assert!(
            tree.call("read_file", &json!({"path": "data/big.txt"}))
                .unwrap()
                .unwrap()
                .contains("only its first 8 MiB are read")
        );
        assert_eq!(
            disk.map("parse_items in src/parse"),
            tree.map("parse_items in src/parse")
        );
        assert!(tree.map("parse_items").contains("pub fn parse_items()"));

        // What a command writes into the checkout does not change what the tree shows.
        std::fs::write(root.join("README.md"), "rewritten\n").unwrap();
        assert!(
            tree.read_file("README.md", None, None)
                .unwrap()
                .contains("# demo")
        );
        assert!(RepoTools::in_tree(&root, &root.join(".git"), &"0".repeat(40)).is_err());
    }

    /// What only a tree can hold: a symlink whose target is longer than the kernel takes
    /// (6 KB of `./` before a real file: a megabyte of it would be split into a million
    /// pieces), and an entry whose mode says file but whose object is a tree. Neither is
    /// followed or read.
    #[test]
    fn hostile_objects_in_a_tree_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("README.md"), "# demo\n").unwrap();
        let git = |args: &[&str], input: Option<&[u8]>| git_in(root, args, input);
        git(&["init", "-q"], None);
        git(&["add", "README.md"], None);
        let target = format!("{}README.md", "./".repeat(3000));
        let big = git(&["hash-object", "-w", "--stdin"], Some(target.as_bytes()));
        let readme_tree = git(&["write-tree"], None);
        for (mode, id, path) in [
            ("120000", &big, "far"),
            ("100644", &readme_tree, "fake.txt"),
        ] {
            git(
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("{mode},{id},{path}"),
                ],
                None,
            );
        }
        git(&["commit", "-q", "-m", "hostile"], None);
        let head = git(&["rev-parse", "HEAD"], None);
        let tools = RepoTools::in_tree(root, &root.join(".git"), &head).unwrap();
        assert!(
            tools
                .read_file("far", None, None)
                .unwrap_err()
                .contains("does not exist")
        );
        assert!(
            tools
                .read_file("fake.txt", None, None)
                .unwrap_err()
                .contains("not a file")
        );
        let found = tools.search("README|demo", "").unwrap();
        assert!(found.starts_with("1 matching lines in 1 files"), "{found}");
        assert!(found.contains("1 symlinks to no file inside"), "{found}");
        assert!(found.contains("1 unreadable"), "{found}");
    }

    #[test]
    fn tool_calls_by_name() {
        let (_d, t) = repo();
        let out = t
            .call(
                "read_file",
                &json!({"path": "README.md", "start_line": "1"}),
            )
            .unwrap();
        assert!(out.unwrap().contains("# demo"));
        assert!(t.call("read_file", &json!({})).unwrap().is_err());
        assert!(t.call("write_file", &json!({})).is_none());
    }
}
