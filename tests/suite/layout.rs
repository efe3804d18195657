//! The crate's dependencies run one way, as README's Layout section draws them: a module
//! may use the modules of the rows below its own, and those of its own row only where no
//! cycle results. This test reads every `crate::` path in `src/` (outside unit tests) and
//! fails on an edge the picture does not allow, so a shortcut breaks the build's tests
//! instead of the layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. Keep in step with README's Layout section.
const ROWS: &[&[&str]] = &[
    &["cli", "server", "onboarding", "doctor", "solve"],
    &["session", "app", "installation"],
    &["planner", "executor", "verify", "publish"],
    &[
        "environment",
        "git",
        "metering",
        "repo_tools",
        "forge",
        "jobs",
    ],
    &["sandbox", "llm", "store", "config"],
    &[
        "contract",
        "event",
        "ids",
        "distill",
        "markdown",
        "metrics",
        "unix_socket",
    ],
];

/// Edges the rows would allow that the design rules out all the same.
const NEVER: &[(&str, &str)] = &[
    // An executor carries out a contract; it must not reach the planner's prompts or tools.
    ("executor", "planner"),
];

/// Leaves: they import nothing of the crate but other leaves (distill writes its code
/// spans with markdown's, which imports nothing at all).
const LEAVES: &[&str] = &["ids", "distill", "markdown", "metrics", "unix_socket"];

/// `(from, to) -> where`, for every top-level module `from` naming `crate::to`.
fn edges() -> BTreeMap<(String, String), Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "main" || top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in library_lines(&text) {
            for to in crate_paths(line) {
                if to != top {
                    edges
                        .entry((top.clone(), to))
                        .or_default()
                        .push(format!("{}:{number}", relative.display()));
                }
            }
        }
    }
    edges
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The file's lines up to its unit tests, without comments.
fn library_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod tests"))
        .unwrap_or(lines.len());
    lines
        .into_iter()
        .take(end)
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// The top-level modules a line names as `crate::<module>`.
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `$crate::` in a macro and `pub(crate)` are not paths into the crate's modules.
        let joined = before.is_some_and(|c| c == '$' || c == '_' || c.is_alphanumeric());
        if !name.is_empty() && !joined {
            found.push(name);
        }
        rest = after;
    }
    found
}

fn row_of(module: &str) -> Option<usize> {
    ROWS.iter().position(|row| row.contains(&module))
}

#[test]
fn every_module_of_the_crate_has_a_row() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let unplaced: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .filter(|m| row_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules with no row in tests/layout.rs (and README's Layout): {unplaced:?}"
    );
}

#[test]
fn dependencies_run_one_way() {
    let mut wrong = Vec::new();
    for ((from, to), places) in edges() {
        let (Some(a), Some(b)) = (row_of(&from), row_of(&to)) else {
            wrong.push(format!(
                "{from} -> {to} (a module with no row) at {}",
                places[0]
            ));
            continue;
        };
        if b < a {
            wrong.push(format!(
                "{from} -> {to} goes up a row, at {}",
                places.join(", ")
            ));
        }
        if NEVER.contains(&(from.as_str(), to.as_str())) {
            wrong.push(format!(
                "{from} -> {to} is ruled out, at {}",
                places.join(", ")
            ));
        }
        if LEAVES.contains(&from.as_str()) && !LEAVES.contains(&to.as_str()) {
            wrong.push(format!(
                "{from} is a leaf but uses {to}, at {}",
                places.join(", ")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies the layout does not allow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_modules_use_each_other() {
    let edges = edges();
    let graph: BTreeMap<&str, BTreeSet<&str>> =
        edges.keys().fold(BTreeMap::new(), |mut g, (from, to)| {
            g.entry(from.as_str()).or_default().insert(to.as_str());
            g
        });
    // A cycle through any number of modules: depth-first search with a path stack.
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(start) = path.iter().position(|n| *n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            let hops: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "{} -> {} at {}",
                        w[0],
                        w[1],
                        edges[&(w[0].to_owned(), w[1].to_owned())][0]
                    )
                })
                .collect();
            panic!("a cycle of modules: {}", hops.join("; "));
        }
    }
}

/// The reader must see what a shortcut looks like to be trusted on the real tree.
#[test]
fn the_reader_finds_paths_into_the_crate_and_only_those() {
    assert_eq!(crate_paths("use crate::store::Db;"), ["store"]);
    assert_eq!(
        crate_paths("let x = crate::forge::repo_config::load(crate::ids::RepoName);"),
        ["forge", "ids"]
    );
    assert!(crate_paths("pub(crate) fn f() {}").is_empty());
    assert!(crate_paths("$crate::inner!()").is_empty());
    assert!(crate_paths("use other_crate::x;").is_empty());
    let text = "use crate::a;\n// use crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n";
    let seen: Vec<String> = library_lines(text)
        .flat_map(|(_, l)| crate_paths(l))
        .collect();
    assert_eq!(seen, ["a"]);
}
