//! The crate's dependencies run one way, as the book's Layout page
//! (docs/architecture/layout.md) draws them: a module may use the modules of the rows below
//! its own, and those of its own row only where no cycle results. This test reads every
//! path in `src/` that names another file of the crate (`use` trees and paths in
//! expressions, outside unit tests) and fails on an edge the picture does not allow, on an
//! edge the design rules out, and on files of one folder that import each other, so a
//! shortcut breaks the build's tests instead of the layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The book's page whose table draws [`ROWS`] for readers.
const LAYOUT_PAGE: &str = "docs/architecture/layout.md";

/// Top to bottom. Keep in step with the table in docs/architecture/layout.md.
const ROWS: &[&[&str]] = &[
    &[
        "cli",
        "server",
        "onboarding",
        "doctor",
        "eval",
        "solve",
        "docs",
    ],
    &["session", "app", "installation"],
    &["planner", "executor", "verify", "publish", "routing"],
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
        "text",
        "unix_socket",
    ],
];

/// Edges the rows would allow that the design rules out all the same.
const NEVER: &[(&str, &str)] = &[
    // A model client does not write usage; metering does, around it.
    ("llm", "store"),
    // The sandbox runs what it is given: it knows no forge, no repository, no database.
    ("sandbox", "forge"),
    ("sandbox", "git"),
    ("sandbox", "store"),
    // An executor carries out a contract; it must not reach the planner's prompts or tools.
    ("executor", "planner"),
    // A forge reports events; what a session makes of them is not its business.
    ("forge", "session"),
];

/// Leaves: they import nothing of the crate but other leaves. This is how `distill` →
/// anything is ruled out: distill writes its code spans with markdown's, which imports
/// nothing at all.
const LEAVES: &[&str] = &[
    "ids",
    "distill",
    "markdown",
    "metrics",
    "text",
    "unix_socket",
];

/// One file of `src/`: its path under `src/` and its text.
struct Source {
    path: String,
    text: String,
}

fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    rust_files(&src)
        .into_iter()
        .map(|file| Source {
            path: file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            text: std::fs::read_to_string(&file).unwrap(),
        })
        .collect()
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

/// The module a file under `src/` holds: `verify/run.rs` is `verify::run`, `verify/mod.rs`
/// and `ids.rs` are `verify` and `ids`. The crate's roots are the empty path.
fn module_of(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The text with comments, string and character literals and `#[cfg(test)]` items blanked
/// (lines keep their numbers), and the names of the modules declared only for tests.
fn library_text(text: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(chars.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.extend([' ', ' ']);
            i += 2;
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !i
                .checked_sub(1)
                .is_some_and(|p| chars[p].is_alphanumeric() || chars[p] == '_')
        {
            // A raw string: r"…" or r#"…"#, closed by a quote and as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            let open = i + 1 + hashes;
            if chars.get(open) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (open + 1..chars.len())
                .find(|&j| chars[j..].starts_with(&closing))
                .map_or(chars.len(), |j| j + closing.len());
            out.extend(chars[i..end].iter().map(|c| blank(*c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{1f}'), not a lifetime.
            let end = (i + 1..chars.len())
                .find(|&j| j > i + 1 && chars[j] == '\'')
                .unwrap_or(chars.len() - 1);
            out.extend(std::iter::repeat_n(' ', end + 1 - i));
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    let mut test_modules = Vec::new();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut at = 0;
    while let Some(start) = (at..out.len()).find(|&j| out[j..].starts_with(&marker)) {
        // The item the attribute applies to ends at its first `;` or at the brace closing
        // its first `{`, whichever comes first.
        let mut j = start + marker.len();
        let mut depth = 0usize;
        while j < out.len() {
            match out[j] {
                ';' if depth == 0 => break,
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let item: String = out[start + marker.len()..j.min(out.len())].iter().collect();
        let words: Vec<&str> = item.split_whitespace().collect();
        if out.get(j) == Some(&';')
            && let Some(m) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(m + 1)
        {
            test_modules.push(name.to_string());
        }
        let end = (j + 1).min(out.len());
        for c in &mut out[start..end] {
            *c = blank(*c);
        }
        at = j;
    }
    (out.into_iter().collect(), test_modules)
}

/// A token of a path: a name, `::`, or one of `{ } , * ;`.
#[derive(Debug, PartialEq)]
enum Token {
    Name(String),
    Colons,
    Punct(char),
}

/// Tokens with their line numbers; everything a path cannot hold is a `Punct(' ')` break.
fn tokens(text: &str) -> Vec<(usize, Token)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' || c == '$' {
            let mut name = c.to_string();
            while let Some(&n) = chars.peek() {
                if !(n.is_alphanumeric() || n == '_') {
                    break;
                }
                name.push(n);
                chars.next();
            }
            out.push((line, Token::Name(name)));
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push((line, Token::Colons));
        } else if "{},*;".contains(c) {
            out.push((line, Token::Punct(c)));
        } else if !c.is_whitespace() {
            out.push((line, Token::Punct(' ')));
        }
        if c == '\n' {
            line += 1;
        }
    }
    out
}

/// A path a file names, as written.
#[derive(Debug, PartialEq)]
struct Named {
    line: usize,
    path: Vec<String>,
    /// The name a `use … as name` gives it.
    alias: Option<String>,
    /// Named by a `pub use`: handed on to the file's users rather than used by the file.
    reexport: bool,
}

/// The paths a file names: every leaf of its `use` trees, and every `a::b` chain
/// elsewhere. `$crate::` (a macro's) and `pub(crate)` are not paths.
fn named_paths(text: &str) -> Vec<Named> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].1 {
            Token::Name(word) if word == "use" => {
                let end = (i..tokens.len())
                    .find(|&j| tokens[j].1 == Token::Punct(';'))
                    .unwrap_or(tokens.len());
                // `pub use` and `pub(crate) use`, whose `(crate)` reads as two breaks.
                let is_pub = |j: usize| matches!(&tokens[j].1, Token::Name(w) if w == "pub");
                let reexport = (i >= 1 && is_pub(i - 1))
                    || (i >= 4 && is_pub(i - 4) && tokens[i - 1].1 == Token::Punct(' '));
                let mut at = i + 1;
                let mut leaves = Vec::new();
                use_tree(&tokens[..end], &mut at, Vec::new(), &mut leaves);
                found.extend(leaves.into_iter().map(|(line, path, alias)| Named {
                    line,
                    path,
                    alias,
                    reexport,
                }));
                i = end;
            }
            Token::Name(_) if tokens.get(i + 1).is_some_and(|t| t.1 == Token::Colons) => {
                let line = tokens[i].0;
                let mut path = Vec::new();
                while let Some((_, Token::Name(name))) = tokens.get(i) {
                    path.push(name.clone());
                    if tokens.get(i + 1).is_none_or(|t| t.1 != Token::Colons) {
                        break;
                    }
                    i += 2;
                }
                i += 1;
                if path[0] != "$crate" {
                    found.push(Named {
                        line,
                        path,
                        alias: None,
                        reexport: false,
                    });
                }
            }
            _ => i += 1,
        }
    }
    found
}

/// A leaf of a `use` tree: its line, its path and the name `as` gives it.
type Leaf = (usize, Vec<String>, Option<String>);

/// Reads one `use` tree from `tokens[*at..]`, under `prefix`, into `found`.
fn use_tree(tokens: &[(usize, Token)], at: &mut usize, prefix: Vec<String>, found: &mut Vec<Leaf>) {
    let mut path = prefix;
    let mut alias = None;
    let line = tokens.get(*at).map_or(0, |t| t.0);
    while let Some((_, token)) = tokens.get(*at) {
        match token {
            Token::Name(name) if name == "as" => {
                if let Some((_, Token::Name(name))) = tokens.get(*at + 1) {
                    alias = Some(name.clone());
                }
                *at += 2;
                break;
            }
            Token::Name(name) => {
                path.push(name.clone());
                *at += 1;
            }
            Token::Colons => *at += 1,
            Token::Punct('*') => {
                *at += 1;
                break;
            }
            Token::Punct('{') => {
                *at += 1;
                while *at < tokens.len() && tokens[*at].1 != Token::Punct('}') {
                    use_tree(tokens, at, path.clone(), found);
                    if tokens.get(*at).is_some_and(|t| t.1 == Token::Punct(',')) {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            _ => break,
        }
    }
    if !path.is_empty() {
        found.push((line, path, alias));
    }
}

/// `(from, to) -> where`, for every file of `src/` that uses an item of another file. A
/// `pub use` is no use of its own: a path through it counts as naming the file the item
/// is defined in, so a folder's root file may re-export its files' items to the crate.
fn file_edges(sources: &[Source]) -> BTreeMap<(String, String), Vec<String>> {
    struct Read<'a> {
        path: &'a str,
        module: Vec<String>,
        named: Vec<Named>,
        children: BTreeSet<String>,
    }
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut read = Vec::new();
    for source in sources.iter().filter(|s| s.path != "main.rs") {
        let (text, tests) = library_text(&source.text);
        let module = module_of(&source.path);
        // Files declared only under `#[cfg(test)]` are unit tests, like a `mod tests { }`.
        test_only.extend(
            tests
                .into_iter()
                .map(|t| [module.clone(), vec![t]].concat()),
        );
        let children = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let rest = l.strip_prefix("pub ").unwrap_or(l);
                let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
                Some(rest.strip_prefix("mod ")?.strip_suffix(';')?.to_owned())
            })
            .collect();
        read.push(Read {
            path: &source.path,
            module,
            named: named_paths(&text),
            children,
        });
    }
    let modules: BTreeMap<&[String], &str> =
        read.iter().map(|r| (r.module.as_slice(), r.path)).collect();
    // `(module, name) -> the crate path it hands on`, for every `pub use` leaf.
    let mut reexports: BTreeMap<(&[String], String), Vec<String>> = BTreeMap::new();
    for r in &read {
        for named in r.named.iter().filter(|n| n.reexport) {
            if let Some(target) = resolve(&r.module, &r.children, &named.path) {
                let name = named.alias.clone().or_else(|| target.last().cloned());
                if let Some(name) = name {
                    reexports.insert((r.module.as_slice(), name), target);
                }
            }
        }
    }
    // The file a crate path leads to, through re-exports.
    let file_of = |mut target: Vec<String>| -> Option<&str> {
        for _ in 0..8 {
            let n = (1..=target.len())
                .rev()
                .find(|n| modules.contains_key(&target[..*n]))?;
            match target
                .get(n)
                .and_then(|name| reexports.get(&(&target[..n], name.clone())))
            {
                Some(through) => target = [through.as_slice(), &target[n + 1..]].concat(),
                None => return Some(modules[&target[..n]]),
            }
        }
        None
    };
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for r in &read {
        if test_only.iter().any(|t| r.module.starts_with(t)) {
            continue;
        }
        for named in r.named.iter().filter(|n| !n.reexport) {
            let Some(to) = resolve(&r.module, &r.children, &named.path).and_then(&file_of) else {
                continue;
            };
            if to != r.path {
                edges
                    .entry((r.path.to_owned(), to.to_owned()))
                    .or_default()
                    .push(format!("{}:{}", r.path, named.line));
            }
        }
    }
    edges
}

/// The crate path a path names from inside `module`, or `None` for another crate's.
fn resolve(module: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?.as_str();
    match first {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([module, &path[1..]].concat()),
        "super" => {
            let ups = path.iter().take_while(|p| *p == "super").count();
            let base = module.get(..module.len().checked_sub(ups)?)?;
            Some([base, &path[ups..]].concat())
        }
        _ if children.contains(first) => Some([module, path].concat()),
        _ => None,
    }
}

/// `(from, to) -> where` between top-level modules, from the edges between files.
fn module_edges(
    files: &BTreeMap<(String, String), Vec<String>>,
) -> BTreeMap<(String, String), Vec<String>> {
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ((from, to), places) in files {
        let (Some(a), Some(b)) = (
            module_of(from).first().cloned(),
            module_of(to).first().cloned(),
        ) else {
            continue;
        };
        if a != b {
            edges.entry((a, b)).or_default().extend(places.clone());
        }
    }
    edges
}

fn row_of(module: &str) -> Option<usize> {
    ROWS.iter().position(|row| row.contains(&module))
}

/// Every edge between modules that the rows, the never-edges or the leaves rule out.
fn wrong_edges(edges: &BTreeMap<(String, String), Vec<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for ((from, to), places) in edges {
        let (Some(a), Some(b)) = (row_of(from), row_of(to)) else {
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
    wrong
}

/// A cycle of the graph, as its nodes with the first repeated at the end.
fn cycle<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    // Depth-first search with a path stack.
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
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// A cycle of the edges' graph, each hop with where it is made.
fn cycle_of(edges: &BTreeMap<(String, String), Vec<String>>) -> Option<String> {
    let graph: BTreeMap<&str, BTreeSet<&str>> =
        edges.keys().fold(BTreeMap::new(), |mut g, (from, to)| {
            g.entry(from.as_str()).or_default().insert(to.as_str());
            g
        });
    let cycle = cycle(&graph)?;
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
    Some(hops.join("; "))
}

/// What a file is inside `folder` (a path under `src/` without a trailing slash): itself
/// if it sits in the folder or is the folder's root file (`folder.rs` or `folder/mod.rs`),
/// or the subfolder it sits in (a subfolder's `name.rs` root file counts as the
/// subfolder), or nothing if it lies outside.
fn node_in(folder: &str, file: &str, folders: &BTreeSet<String>) -> Option<String> {
    if file == format!("{folder}.rs") {
        return Some(file.to_owned());
    }
    let rest = file.strip_prefix(folder)?.strip_prefix('/')?;
    match rest.split_once('/') {
        Some((sub, _)) => Some(format!("{folder}/{sub}/")),
        None if folders.contains(&format!("{folder}/{}", rest.trim_end_matches(".rs"))) => {
            Some(format!("{folder}/{}/", rest.trim_end_matches(".rs")))
        }
        None => Some(file.to_owned()),
    }
}

/// Folders whose root file still holds items its own files use while it also uses theirs
/// (the contract's core types, the parsers' report types, the shared state of the server and
/// of its pages). Their root file's edges are left out of the folder check until the shared
/// items have a file of their own. Remove an entry when its folder is split; nothing may be
/// added.
const ROOT_HOLDS_SHARED_ITEMS: &[&str] = &["contract", "distill", "server", "server/pages"];

/// For every folder whose files (and subfolders, each as one) import each other, one
/// cycle among them. The folder's root file (`mod.rs`, or `name.rs` beside `name/`)
/// counts like any other: a root that uses its files and holds what they use is both
/// their top and their bottom, and is two files. Only the folders named in `lenient`
/// leave their root's edges out.
fn folder_cycles(
    files: &[&str],
    edges: &BTreeMap<(String, String), Vec<String>>,
    lenient: &[&str],
) -> Vec<String> {
    let folders: BTreeSet<String> = files
        .iter()
        .flat_map(|f| {
            let parts: Vec<&str> = f.split('/').collect();
            (1..parts.len())
                .map(|n| parts[..n].join("/"))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut cycles = Vec::new();
    for folder in &folders {
        let inside: BTreeMap<(String, String), Vec<String>> = edges
            .iter()
            .filter_map(|((from, to), places)| {
                let a = node_in(folder, from, &folders)?;
                let b = node_in(folder, to, &folders)?;
                let root = |n: &str| n == format!("{folder}.rs") || n == format!("{folder}/mod.rs");
                let skip_root = lenient.contains(&folder.as_str());
                (a != b && !(skip_root && (root(&a) || root(&b)))).then(|| ((a, b), places.clone()))
            })
            .fold(BTreeMap::new(), |mut m, (key, places)| {
                m.entry(key).or_insert_with(Vec::new).extend(places);
                m
            });
        if let Some(hops) = cycle_of(&inside) {
            cycles.push(format!("{folder}/: {hops}"));
        }
    }
    cycles
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
        "modules with no row in tests/suite/layout.rs (and docs/architecture/layout.md): {unplaced:?}"
    );
}

/// The modules of each numbered row of the table in the book's Layout page.
fn drawn_rows(page: &str) -> Vec<BTreeSet<String>> {
    page.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            cells.get(1)?.parse::<usize>().ok()?;
            let modules = cells.get(2)?.split(',').map(|m| {
                m.trim()
                    .trim_end_matches("(leaves)")
                    .trim()
                    .trim_matches('`')
                    .to_string()
            });
            Some(modules.filter(|m| !m.is_empty()).collect())
        })
        .collect()
}

#[test]
fn the_book_draws_the_rows_this_test_holds() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(LAYOUT_PAGE)).unwrap();
    let held: Vec<BTreeSet<String>> = ROWS
        .iter()
        .map(|row| row.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(
        drawn_rows(&page),
        held,
        "the rows of the table in {LAYOUT_PAGE} differ from ROWS in tests/suite/layout.rs"
    );
}

#[test]
fn dependencies_run_one_way() {
    let wrong = wrong_edges(&module_edges(&file_edges(&sources())));
    assert!(
        wrong.is_empty(),
        "dependencies the layout does not allow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_modules_use_each_other() {
    if let Some(hops) = cycle_of(&module_edges(&file_edges(&sources()))) {
        panic!("a cycle of modules: {hops}");
    }
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    let sources = sources();
    let paths: Vec<&str> = sources.iter().map(|s| s.path.as_str()).collect();
    let cycles = folder_cycles(&paths, &file_edges(&sources), ROOT_HOLDS_SHARED_ITEMS);
    assert!(
        cycles.is_empty(),
        "files of one folder that import each other (split what both use into a file \
         of its own):\n{}",
        cycles.join("\n")
    );
}

fn source(path: &str, text: &str) -> Source {
    Source {
        path: path.to_owned(),
        text: text.to_owned(),
    }
}

/// The reader must see what a shortcut looks like to be trusted on the real tree.
#[test]
fn the_reader_finds_paths_into_the_crate_and_only_those() {
    let names = |text: &str| -> Vec<String> {
        named_paths(&library_text(text).0)
            .into_iter()
            .map(|n| n.path.join("::"))
            .collect()
    };
    assert_eq!(names("use crate::store::Db;"), ["crate::store::Db"]);
    assert_eq!(
        names("let x = crate::forge::repo_config::load(crate::ids::RepoName);"),
        ["crate::forge::repo_config::load", "crate::ids::RepoName"]
    );
    assert!(names("pub(crate) fn f() {}").is_empty());
    assert!(names("$crate::inner!()").is_empty());
    assert_eq!(
        names("use super::{a, b::{C, d as e}, f::*};\nuse self::g::H;"),
        [
            "super::a",
            "super::b::C",
            "super::b::d",
            "super::f",
            "self::g::H"
        ]
    );
    assert!(names(r#"let s = "crate::store"; let c = '"'; // crate::x"#).is_empty());
    let text = "use crate::a;\n// use crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n";
    assert_eq!(names(text), ["crate::a"]);
    let text = "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nuse crate::x;\nuse crate::a;\n";
    assert_eq!(names(text), ["crate::a"]);
    assert_eq!(library_text(text).1, ["tests"]);

    let edges = file_edges(&[
        source(
            "a/mod.rs",
            "mod b;\nmod c;\n#[cfg(test)]\nmod tests;\npub use c::g as run;\nfn f() -> b::X { b::X }",
        ),
        source("a/b.rs", "pub struct X;\nfn f() { super::run(); }"),
        source("a/c.rs", "pub fn g() { crate::d::h(); }"),
        source("a/tests.rs", "use super::b::X;"),
        source("d.rs", "pub fn h() { std::process::exit(0) }"),
    ]);
    let pairs: Vec<(&str, &str)> = edges
        .keys()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // `super::run` is `c::g` handed on by `a/mod.rs`: b uses c, not the root file.
    assert_eq!(
        pairs,
        [
            ("a/b.rs", "a/c.rs"),
            ("a/c.rs", "d.rs"),
            ("a/mod.rs", "a/b.rs")
        ]
    );
    assert_eq!(edges[&("a/b.rs".into(), "a/c.rs".into())], ["a/b.rs:2"]);
}

/// The rules must catch an edge the design rules out, or passing on the tree says nothing.
#[test]
fn the_rules_refuse_a_ruled_out_edge() {
    let edge = |from: &str, to: &str| {
        BTreeMap::from([((from.to_owned(), to.to_owned()), vec!["x.rs:1".to_owned()])])
    };
    for (from, to) in [
        ("llm", "store"),
        ("sandbox", "forge"),
        ("sandbox", "git"),
        ("sandbox", "store"),
        ("executor", "planner"),
        ("forge", "session"),
    ] {
        let wrong = wrong_edges(&edge(from, to));
        assert!(
            wrong.iter().any(|w| w.contains("is ruled out")),
            "{from} -> {to}: {wrong:?}"
        );
    }
    let wrong = wrong_edges(&edge("distill", "contract"));
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].contains("is a leaf"), "{wrong:?}");
    let wrong = wrong_edges(&edge("config", "server"));
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].contains("goes up a row"), "{wrong:?}");
    assert!(wrong_edges(&edge("distill", "markdown")).is_empty());
    assert!(wrong_edges(&edge("planner", "llm")).is_empty());
}

/// Two files importing each other, or three in a ring, are caught whether they sit in a
/// folder with a `mod.rs` or beside their folder's `name.rs`; a subfolder counts as one.
#[test]
fn the_folder_check_finds_two_and_three_file_cycles() {
    let check = |files: &[Source]| {
        let paths: Vec<&str> = files.iter().map(|s| s.path.as_str()).collect();
        folder_cycles(&paths, &file_edges(files), &[])
    };
    let lenient = |files: &[Source]| {
        let paths: Vec<&str> = files.iter().map(|s| s.path.as_str()).collect();
        folder_cycles(&paths, &file_edges(files), &["a"])
    };
    let two = check(&[
        source("a/mod.rs", "mod b;\nmod c;"),
        source("a/b.rs", "use super::c::Y;\npub struct X;"),
        source("a/c.rs", "pub struct Y;\nfn f(_: crate::a::b::X) {}"),
    ]);
    assert_eq!(two.len(), 1, "{two:?}");
    assert!(
        two[0].starts_with("a/: a/b.rs -> a/c.rs at a/b.rs:1"),
        "{two:?}"
    );

    let three = check(&[
        source("top.rs", "mod b;\nmod c;\nmod d;"),
        source("top/b.rs", "pub fn b() { super::c::c() }"),
        source("top/c.rs", "pub fn c() { super::d::d() }"),
        source("top/d.rs", "use crate::top::b::b;\npub fn d() { b() }"),
    ]);
    assert_eq!(three.len(), 1, "{three:?}");
    assert!(
        three[0].contains("top/d.rs -> top/b.rs at top/d.rs:1"),
        "{three:?}"
    );

    // A root file that uses its files and holds what they use is a cycle with them; only
    // a folder let off leaves the root out, and a cycle of the files beside it still
    // counts there.
    let both_ways = [
        source(
            "a/mod.rs",
            "mod b;\nmod c;\npub const N: usize = 1;\nfn f(_: b::X) {}",
        ),
        source("a/b.rs", "pub struct X([u8; super::N]);"),
        source("a/c.rs", "pub fn c() { super::b::X([0]); }"),
    ];
    let root = check(&both_ways);
    assert_eq!(root.len(), 1, "{root:?}");
    assert!(root[0].contains("a/mod.rs"), "{root:?}");
    assert!(lenient(&both_ways).is_empty());
    let root = lenient(&[
        source(
            "a/mod.rs",
            "mod b;\nmod c;\npub const N: usize = 1;\nfn f(_: b::X) {}",
        ),
        source(
            "a/b.rs",
            "pub struct X([u8; super::N]);\nfn b() { super::c::c() }",
        ),
        source("a/c.rs", "pub fn c() { super::b::X([0]); }"),
    ]);
    assert_eq!(root.len(), 1, "{root:?}");
    assert!(!root[0].contains("mod.rs"), "{root:?}");

    let through_a_subfolder = check(&[
        source("a/mod.rs", "mod b;\nmod s;"),
        source("a/b.rs", "use super::s::t::T;\npub struct B;"),
        source("a/s/mod.rs", "pub mod t;"),
        source("a/s/t.rs", "pub struct T(super::super::b::B);"),
    ]);
    assert_eq!(through_a_subfolder.len(), 1, "{through_a_subfolder:?}");
    assert!(
        through_a_subfolder[0].contains("a/s/"),
        "{through_a_subfolder:?}"
    );

    let one_way = check(&[
        source("a/mod.rs", "mod b;\nmod c;\npub use b::X;\npub use c::Y;"),
        source("a/b.rs", "use super::c::Y;\npub struct X(Y);"),
        source("a/c.rs", "pub struct Y;"),
    ]);
    assert!(one_way.is_empty(), "{one_way:?}");
}

/// The longest function `src/` may hold, in lines, outside the test-output parsers of
/// `distill/` (a parser of one runner's output reads best as one match over its lines).
const FUNCTION_LINES_MAX: usize = 120;

/// `(name, first line, lines)` of every function in `text` longer than `max` lines, unit
/// tests left out. It reads rustfmt's layout: a function ends at the first closing brace
/// at its own indentation.
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    let mut test_attribute = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed == "#[cfg(test)]" {
            // The item that follows is test code: skip it whole.
            let mut end = i + 1;
            while end < lines.len() && lines[end] != format!("{indent}}}") {
                if lines[end].trim_end().ends_with(';') && end == i + 1 {
                    break;
                }
                end += 1;
            }
            i = end + 1;
            continue;
        }
        if trimmed.starts_with("#[test]") || trimmed.starts_with("#[tokio::test") {
            test_attribute = true;
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let at_fn = words
            .iter()
            .take_while(|w| {
                matches!(**w, "pub" | "async" | "const" | "unsafe" | "fn") || w.starts_with("pub(")
            })
            .any(|w| *w == "fn");
        if at_fn && !trimmed.trim_end().ends_with(';') {
            let name = trimmed
                .split("fn ")
                .nth(1)
                .unwrap_or("")
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
                .to_owned();
            let mut end = i;
            while end < lines.len()
                && lines[end] != format!("{indent}}}")
                && !(end == i && line.trim_end().ends_with('}'))
            {
                end += 1;
            }
            let length = end - i + 1;
            if length > max && !test_attribute {
                long.push((name, i + 1, length));
            }
            test_attribute = false;
            i = end + 1;
            continue;
        }
        i += 1;
    }
    long
}

#[test]
fn no_function_is_longer_than_a_reader_can_hold() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| !s.path.starts_with("distill/"))
        .flat_map(|s| {
            long_functions(&s.text, FUNCTION_LINES_MAX)
                .into_iter()
                .map(|(name, line, length)| format!("src/{}:{line} {name}: {length} lines", s.path))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines (split them into named phases):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_check_finds_a_long_function_and_passes_over_tests() {
    let body = |name: &str, lines: usize| {
        format!(
            "pub async fn {name}(x: u32) -> u32 {{\n{}    x\n}}\n",
            "    let _ = x;\n".repeat(lines)
        )
    };
    let text = format!(
        "{}\n{}\n#[test]\n{}\n#[cfg(test)]\nmod tests {{\n    {}\n}}\n",
        body("short", 10),
        body("long", 130),
        body("a_long_test", 130),
        body("inside_tests", 130).replace('\n', "\n    "),
    );
    let found = long_functions(&text, FUNCTION_LINES_MAX);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "long");
    assert_eq!(found[0].2, 133);
}
