//! The read-only repository tools the planner and scouts share (`read_file`, `list_files`,
//! `search`) and the compact repository map. They read a checkout at the base commit and
//! never follow a path or symlink out of it; every answer is bounded.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use regex::RegexBuilder;
use serde_json::{Value, json};

use crate::llm::Tool;

/// Lines one `read_file` answer holds at most.
const MAX_READ_LINES: usize = 250;
/// Characters per line shown; minified files are not worth more.
const MAX_LINE_CHARS: usize = 300;
const MAX_LISTED: usize = 300;
const MAX_MATCHES: usize = 80;
/// Files larger than this are not searched (generated or vendored).
const MAX_SEARCH_BYTES: u64 = 1 << 20;

/// A checkout seen read-only.
#[derive(Debug, Clone)]
pub struct RepoTools {
    root: PathBuf,
}

impl RepoTools {
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("Cannot open the checkout at {}: {e}", root.display()))?;
        Ok(RepoTools { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
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
                description: "List files under a folder, optionally filtered by a glob (`*.rs`, `src/**/test_*.py`).".into(),
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
                    "Search file contents with a regular expression (case-insensitive); answers path:line: text, at most {MAX_MATCHES} matches."
                ),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "path": {"type": "string", "description": "folder or file to search in; empty for everything"}
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
        Some(match name {
            "read_file" => match text("path") {
                Some(path) => self.read_file(path, number("start_line"), number("end_line")),
                None => Err("read_file needs `path`".into()),
            },
            "list_files" => self.list_files(text("path").unwrap_or(""), text("pattern")),
            "search" => match text("pattern") {
                Some(pattern) => self.search(pattern, text("path").unwrap_or("")),
                None => Err("search needs `pattern`".into()),
            },
            _ => return None,
        })
    }

    /// A path inside the checkout, or why not. Symlinks are resolved and must stay inside.
    fn resolve(&self, relative: &str) -> Result<PathBuf, String> {
        let rel = Path::new(relative.trim().trim_start_matches("./"));
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(format!("`{relative}` is not a path inside the repository"));
        }
        let joined = self.root.join(rel);
        let real = joined
            .canonicalize()
            .map_err(|_| format!("`{relative}` does not exist"))?;
        if !real.starts_with(&self.root) {
            return Err(format!("`{relative}` points outside the repository"));
        }
        if real.starts_with(self.root.join(".git")) {
            return Err("the .git folder is not part of the repository's files".into());
        }
        Ok(real)
    }

    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    pub fn read_file(
        &self,
        path: &str,
        start: Option<usize>,
        end: Option<usize>,
    ) -> Result<String, String> {
        let real = self.resolve(path)?;
        if real.is_dir() {
            return Err(format!("`{path}` is a folder; use list_files"));
        }
        let bytes = std::fs::read(&real).map_err(|e| format!("cannot read `{path}`: {e}"))?;
        if bytes.iter().take(8000).any(|b| *b == 0) {
            return Err(format!("`{path}` is a binary file ({} bytes)", bytes.len()));
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let start = start.unwrap_or(1).max(1);
        if total == 0 {
            return Ok(format!("{} is empty", self.display(&real)));
        }
        if start > total {
            return Err(format!("`{path}` has only {total} lines"));
        }
        let wanted_end = end.unwrap_or(total).clamp(start, total);
        let end = wanted_end.min(start + MAX_READ_LINES - 1);
        let mut out = format!("{} lines {start}-{end} of {total}\n", self.display(&real));
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

    pub fn list_files(&self, path: &str, pattern: Option<&str>) -> Result<String, String> {
        let base = if path.trim().is_empty() || path.trim() == "." {
            self.root.clone()
        } else {
            self.resolve(path)?
        };
        let mut files = Vec::new();
        self.walk(&base, &mut files);
        let glob = pattern.map(PathGlob::new);
        let matching: Vec<String> = files
            .iter()
            .map(|f| self.display(f))
            .filter(|f| glob.as_ref().is_none_or(|g| g.matches(f)))
            .collect();
        if matching.is_empty() {
            return Ok("no files match".into());
        }
        let mut out = String::new();
        for f in matching.iter().take(MAX_LISTED) {
            out.push_str(f);
            out.push('\n');
        }
        if matching.len() > MAX_LISTED {
            let _ = writeln!(
                out,
                "… and {} more; narrow the path or pattern",
                matching.len() - MAX_LISTED
            );
        }
        Ok(out)
    }

    pub fn search(&self, pattern: &str, path: &str) -> Result<String, String> {
        let re = RegexBuilder::new(pattern)
            .case_insensitive(true)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("not a valid regular expression: {e}"))?;
        let base = if path.trim().is_empty() {
            self.root.clone()
        } else {
            self.resolve(path)?
        };
        let mut files = Vec::new();
        if base.is_file() {
            files.push(base);
        } else {
            self.walk(&base, &mut files);
        }
        let mut out = String::new();
        let mut matches = 0usize;
        let mut more = 0usize;
        for file in files {
            // A committed symlink may point anywhere: search it only if it stays inside.
            let file = match file.canonicalize() {
                Ok(real) if real.starts_with(&self.root) => file,
                _ => continue,
            };
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            if meta.len() > MAX_SEARCH_BYTES {
                continue;
            }
            let Ok(bytes) = std::fs::read(&file) else {
                continue;
            };
            if bytes.iter().take(8000).any(|b| *b == 0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if matches < MAX_MATCHES {
                        let _ = writeln!(
                            out,
                            "{}:{}: {}",
                            self.display(&file),
                            i + 1,
                            clip_line(line.trim())
                        );
                    } else {
                        more += 1;
                    }
                    matches += 1;
                }
            }
        }
        if matches == 0 {
            return Ok("no matches".into());
        }
        if more > 0 {
            let _ = writeln!(out, "… {more} more matches; narrow the pattern or path");
        }
        Ok(out)
    }

    /// Files under `dir`, sorted, without `.git`; symlinks are listed, not followed.
    fn walk(&self, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    self.walk(&path, out);
                }
            } else {
                out.push(path);
            }
        }
    }

    /// A compact picture of the repository: top-level entries, each folder with its file
    /// count and a few names, bounded whatever the repository's size.
    pub fn map(&self) -> String {
        let mut files = Vec::new();
        self.walk(&self.root, &mut files);
        let rel: Vec<String> = files.iter().map(|f| self.display(f)).collect();
        let mut out = format!("{} files\n", rel.len());
        let mut groups: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
        for f in &rel {
            let key = match f.split_once('/') {
                Some((top, rest)) => match rest.split_once('/') {
                    Some((second, _)) => format!("{top}/{second}/"),
                    None => format!("{top}/"),
                },
                None => String::new(),
            };
            groups.entry(key).or_default().push(f);
        }
        for (group, members) in groups.iter().take(60) {
            if group.is_empty() {
                let _ = writeln!(out, "{}", members.join(", "));
                continue;
            }
            let names: Vec<&str> = members
                .iter()
                .take(6)
                .map(|m| m.strip_prefix(group.as_str()).unwrap_or(m))
                .collect();
            let _ = writeln!(
                out,
                "{group} ({} files): {}{}",
                members.len(),
                names.join(", "),
                if members.len() > 6 { ", …" } else { "" }
            );
        }
        if groups.len() > 60 {
            let _ = writeln!(out, "… {} more folders", groups.len() - 60);
        }
        out
    }
}

fn clip_line(line: &str) -> String {
    if line.chars().count() <= MAX_LINE_CHARS {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(MAX_LINE_CHARS).collect();
    s.push_str(" …");
    s
}

/// `*` within a path segment, `**` across segments, `?` one character. A pattern without
/// `/` is matched against the file name alone.
pub fn glob_matches(pattern: &str, path: &str) -> bool {
    PathGlob::new(pattern).matches(path)
}

/// A glob compiled once, to match many paths. Patterns come from models and repository
/// settings, so matching is linear in the path (globset compiles to a regular expression):
/// a pattern like `*a*a*a…b` costs no more than any other.
pub struct PathGlob {
    matcher: Option<globset::GlobMatcher>,
    name_only: bool,
}

impl PathGlob {
    pub fn new(pattern: &str) -> PathGlob {
        let pattern = pattern.trim().trim_start_matches("./");
        PathGlob {
            matcher: compile(pattern),
            name_only: !pattern.contains('/'),
        }
    }

    /// A pattern too large to compile matches nothing.
    pub fn matches(&self, path: &str) -> bool {
        let Some(matcher) = &self.matcher else {
            return false;
        };
        if self.name_only {
            matcher.is_match(path.rsplit('/').next().unwrap_or(path))
        } else {
            matcher.is_match(path)
        }
    }
}

fn compile(pattern: &str) -> Option<globset::GlobMatcher> {
    // Only `*`, `**` and `?` are special here, as they always were: classes and
    // alternatives are taken literally. A `**` that is not a whole segment (`a**b`) still
    // crosses folders, which globset only does for a whole segment: it becomes "within
    // one segment, or across folders".
    let mut text = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                while chars.next_if_eq(&'*').is_some() {}
                let whole_segment = (text.is_empty() || text.ends_with('/'))
                    && chars.peek().is_none_or(|n| *n == '/');
                if whole_segment {
                    text.push_str("**");
                } else {
                    text.push_str("{*,*/**/*}");
                }
            }
            '[' => text.push_str("[[]"),
            ']' => text.push_str("[]]"),
            '{' => text.push_str("[{]"),
            '}' => text.push_str("[}]"),
            c => text.push(c),
        }
    }
    globset::GlobBuilder::new(&text)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(t.search("hunter2", "").unwrap(), "no matches");
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
        assert_eq!(hits.trim(), "src/parse/mod.rs:2: // TODO trailing comma");
        assert_eq!(t.search("nothing-here", "src").unwrap(), "no matches");
        assert!(
            t.search("(", "")
                .unwrap_err()
                .contains("regular expression")
        );
        let many = t.search("line", "src/long.rs").unwrap();
        assert!(many.contains("… 520 more matches"), "{many}");
    }

    #[test]
    fn the_map_is_compact() {
        let (_d, t) = repo();
        let map = t.map();
        assert!(map.starts_with("6 files\n"), "{map}");
        assert!(map.contains("src/parse/ (1 files): mod.rs"), "{map}");
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
