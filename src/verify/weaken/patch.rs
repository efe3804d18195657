//! Tests that replace the code they test: a test file that assigns, patches, mocks or
//! stubs a name that a source file the contract changes defines (`calc.add = …`,
//! `mock.patch("calc.add")`, `jest.mock('./calc')`, a Go package variable swapped) makes
//! a test pass while that code stays as it was. What a test file gains of these, against
//! its base side, is a finding; patches of anything else (the clock, the network, the
//! filesystem, modules the contract leaves alone) are the tests' own business. A Go test
//! file that gains `func TestMain` decides how its package's tests run, and is found here
//! too, since that needs the file's text.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;

use super::super::scope::{is_test_path, normalise};
use super::super::spans::code as inline;
use super::code::{Lang, blanked};
use super::draft::{Draft, WeakeningKind};

use crate::contract::Contract;
use crate::repo_tools::{SourceLang, definition};

/// What the files read so far showed of patches, and of what the sources define.
#[derive(Default)]
pub(super) struct Patches {
    tests: Vec<TestFile>,
    sources: Vec<Defined>,
    /// Other code files' new patches: they count when the contract does not name the file
    /// (a helper the old tests import can replace the code as well as a test can).
    others: Vec<TestFile>,
}

/// A test file's patches that its base side did not have.
struct TestFile {
    path: String,
    lang: Lang,
    sites: Vec<Site>,
    /// The line of a `func TestMain` the base did not have.
    test_main: Option<usize>,
}

/// The top-level names a source file defines, on either side.
struct Defined {
    path: String,
    lang: Lang,
    names: HashSet<String>,
    /// A Go file's package clause.
    package: Option<String>,
}

/// One place a test file replaces something: its line, the line as written, and what.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Site {
    line: usize,
    written: String,
    target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    /// Python: the dotted path the test reaches it by, its imports resolved (`calc.add`,
    /// `pkg.mod.Calc.add`, `calc` for the whole module).
    Dotted(String),
    /// JavaScript: the module as imported (a path when relative) and the name replaced;
    /// `None` for the whole module.
    Module { spec: String, name: Option<String> },
    /// Go: a package-level variable, of an imported package or (`None`) the test's own.
    GoVar {
        import: Option<String>,
        name: String,
    },
}

/// The language of a file whose patches or definitions are read, by its extension.
fn lang_of(path: &str) -> Option<Lang> {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.')?.1 {
        "py" => Some(Lang::Python),
        "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "mts" | "cts" => Some(Lang::Js),
        "go" => Some(Lang::Go),
        _ => None,
    }
}

/// A file whose patches count: a test file (by its path, or where its language keeps
/// tests: `__tests__`, `spec`), or a `conftest.py` (pytest's fixtures).
fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    is_test_path(path)
        || name == "conftest.py"
        || matches!(Lang::of(path), Some(Lang::Python | Lang::Js | Lang::Go))
}

/// Whether the weakening reading must read `path` for its patches.
pub(super) fn reads(path: &str) -> bool {
    is_test_file(path) && lang_of(path).is_some()
}

/// A changed code file the contract does not name: read for patches too.
pub(super) fn unnamed_code(contract: &Contract, path: &str) -> bool {
    lang_of(path).is_some() && !changed_by(contract, &normalise(path))
}

/// The patches `result` has that `base` did not.
fn new_sites(lang: Lang, base: Option<&str>, result: &str) -> Vec<Site> {
    let after = sites(lang, result);
    let before = base.map(|b| sites(lang, b)).unwrap_or_default();
    let mut left: HashMap<(&str, &Target), usize> = HashMap::new();
    for s in &before {
        *left.entry((s.written.as_str(), &s.target)).or_default() += 1;
    }
    let mut new = Vec::new();
    for s in &after {
        match left.get_mut(&(s.written.as_str(), &s.target)) {
            Some(n) if *n > 0 => *n -= 1,
            _ => new.push(s.clone()),
        }
    }
    new
}

/// The source files the contract changes, in a language whose patches are read: their
/// definitions are what a test must not replace, whether or not the result changed them.
/// Only paths inside the repository: the contract's words are not the diff's.
pub(super) fn sources(contract: &Contract) -> Vec<String> {
    contract
        .change
        .files
        .iter()
        .map(|f| normalise(&f.path))
        .filter(|p| {
            !p.is_empty()
                && !p.split('/').any(|part| part == "..")
                && !is_test_file(p)
                && lang_of(p).is_some()
        })
        .collect()
}

/// Whether the contract changes `path`: it names the file or a folder holding it.
fn changed_by(contract: &Contract, path: &str) -> bool {
    contract.change.files.iter().any(|f| {
        let declared = normalise(&f.path);
        !declared.is_empty() && (path == declared || path.starts_with(&format!("{declared}/")))
    })
}

impl Patches {
    /// Reads one file's two sides: a test file's new patches, a source file's names.
    pub(super) fn add(&mut self, path: &str, base: Option<&str>, result: Option<&str>) {
        let Some(lang) = lang_of(path) else { return };
        if is_test_file(path) {
            let Some(result) = result else { return };
            let new = new_sites(lang, base, result);
            let test_main = (lang == Lang::Go && base.and_then(test_main).is_none())
                .then(|| test_main(result))
                .flatten();
            if !new.is_empty() || test_main.is_some() {
                self.tests.push(TestFile {
                    path: path.to_owned(),
                    lang,
                    sites: new,
                    test_main,
                });
            }
        } else {
            if let Some(result) = result {
                let new = new_sites(lang, base, result);
                if !new.is_empty() {
                    self.others.push(TestFile {
                        path: path.to_owned(),
                        lang,
                        sites: new,
                        test_main: None,
                    });
                }
            }
            let mut names = HashSet::new();
            for text in [base, result].into_iter().flatten() {
                names.extend(defined(lang, text));
            }
            let package = (lang == Lang::Go)
                .then(|| result.or(base).and_then(go_package))
                .flatten();
            self.sources.push(Defined {
                path: path.to_owned(),
                lang,
                names,
                package,
            });
        }
    }

    /// The findings: each new patch of a name a source the contract changes defines, and
    /// each `func TestMain` added.
    pub(super) fn finish(self, contract: &Contract, out: &mut Vec<Draft>) {
        let sources: Vec<&Defined> = self
            .sources
            .iter()
            .filter(|d| changed_by(contract, &d.path))
            .collect();
        let others = self
            .others
            .iter()
            .filter(|f| !changed_by(contract, &f.path));
        for file in self.tests.iter().chain(others) {
            let mut seen = HashSet::new();
            for site in &file.sites {
                // A test replaced under its own name runs other code where the test was:
                // its assertions stay, so nothing else sees it.
                if file.lang == Lang::Python
                    && let Target::Dotted(dotted) = &site.target
                    && let Some(test) = replaced_test(dotted)
                    && seen.insert(site.line)
                {
                    out.push(Draft {
                        kind: WeakeningKind::Patch,
                        path: file.path.clone(),
                        lines: vec![site.line],
                        in_base: false,
                        test: Some(test.to_owned()),
                        what: format!(
                            "replaces the test {} with other code, so it does not run what it \
                             checks",
                            inline(test)
                        ),
                        instruction: format!(
                            "remove the assignment at {}:{} ({}): a test must run its own body",
                            file.path,
                            site.line,
                            inline(&site.written)
                        ),
                    });
                    continue;
                }
                let hit = sources
                    .iter()
                    .filter(|d| d.lang == file.lang)
                    .find_map(|d| patched(file, &site.target, d).map(|name| (d, name)));
                let Some((source, name)) = hit else { continue };
                if !seen.insert(site.line) {
                    continue;
                }
                let what = match &name {
                    Some(name) => format!(
                        "patches {} of {} that the contract changes, so the test does not run \
                         the code it checks",
                        inline(name),
                        inline(&source.path)
                    ),
                    None => format!(
                        "replaces the module {} that the contract changes, so the tests do not \
                         run the code they check",
                        inline(&source.path)
                    ),
                };
                out.push(Draft {
                    kind: WeakeningKind::Patch,
                    path: file.path.clone(),
                    lines: vec![site.line],
                    in_base: false,
                    test: None,
                    what,
                    instruction: format!(
                        "remove the patch at {}:{} ({}): the tests must run `{}` as it is, so \
                         fix the code there",
                        file.path,
                        site.line,
                        inline(&site.written),
                        source.path
                    ),
                });
            }
            if let Some(line) = file.test_main {
                out.push(Draft {
                    kind: WeakeningKind::Selection,
                    path: file.path.clone(),
                    lines: vec![line],
                    in_base: false,
                    test: None,
                    what: "adds `func TestMain`, which decides how the package's tests run"
                        .to_owned(),
                    instruction: format!(
                        "remove `func TestMain` at {}:{line}: the package's tests must run as \
                         the base runs them",
                        file.path
                    ),
                });
            }
        }
    }
}

/// The test a dotted assignment target replaces: `TestCalc.test_add`, or `test_add` at a
/// module's top (the last part named like a test, under a class named like one).
fn replaced_test(dotted: &str) -> Option<&str> {
    let mut parts = dotted.rsplit('.');
    let name = parts.next()?;
    if !name.starts_with("test") {
        return None;
    }
    match parts.next() {
        Some(owner)
            if owner.starts_with("Test") || owner.ends_with("Test") || owner.ends_with("Tests") =>
        {
            let start = dotted.len() - name.len() - owner.len() - 1;
            Some(&dotted[start..])
        }
        Some(_) => None,
        None => Some(name),
    }
}

/// The name of `source` that `target` replaces (`None`: the whole module), if it is one.
fn patched(file: &TestFile, target: &Target, source: &Defined) -> Option<Option<String>> {
    match target {
        Target::Dotted(dotted) => {
            let parts: Vec<&str> = dotted.split('.').collect();
            let modules = python_modules(&source.path);
            // The longest module name the path starts with decides.
            let (k, _) = (1..=parts.len())
                .rev()
                .map(|k| (k, parts[..k].join(".")))
                .find(|(_, m)| modules.contains(m))?;
            if k == parts.len() {
                return Some(None);
            }
            source
                .names
                .contains(parts[k])
                .then(|| Some(parts[k..].join(".")))
        }
        Target::Module { spec, name } => {
            if !js_module_is(&file.path, spec, &source.path) {
                return None;
            }
            match name {
                None => Some(None),
                Some(n) => source.names.contains(n).then(|| Some(n.clone())),
            }
        }
        Target::GoVar { import, name } => {
            let dir = |p: &str| {
                p.rsplit_once('/')
                    .map_or(String::new(), |(d, _)| d.to_owned())
            };
            let (source_dir, test_dir) = (dir(&source.path), dir(&file.path));
            let same = match import {
                None => source_dir == test_dir,
                // The package's folder ends its import path; at the module's root, the
                // import path ends with the package's name.
                Some(path) if source_dir.is_empty() => {
                    test_dir.is_empty() && source.package.as_deref() == path.rsplit('/').next()
                }
                Some(path) => *path == source_dir || path.ends_with(&format!("/{source_dir}")),
            };
            (same && source.names.contains(name)).then(|| Some(name.clone()))
        }
    }
}

/// The dotted names a Python file is imported by: `pkg.mod` and `mod` for
/// `pkg/mod.py`, `src.pkg` and `pkg` for `src/pkg/__init__.py`.
fn python_modules(path: &str) -> HashSet<String> {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    let parts: Vec<&str> = stem.split('/').collect();
    (0..parts.len()).map(|i| parts[i..].join(".")).collect()
}

const JS_EXTENSIONS: &[&str] = &[".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".mts", ".cts"];

fn without_js_extension(path: &str) -> &str {
    JS_EXTENSIONS
        .iter()
        .find_map(|e| path.strip_suffix(e))
        .unwrap_or(path)
}

/// Whether `spec`, imported by the test file at `test`, is the source at `source`: a
/// relative path resolved from the test's folder, or a bare or aliased one (`@/calc`)
/// that the source's path ends with.
fn js_module_is(test: &str, spec: &str, source: &str) -> bool {
    let source = without_js_extension(source);
    if spec.starts_with("./") || spec.starts_with("../") {
        let mut parts: Vec<&str> = test.split('/').collect();
        parts.pop();
        for part in spec.split('/') {
            match part {
                "." | "" => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        let resolved = parts.join("/");
        let resolved = without_js_extension(&resolved);
        return source == resolved || source == format!("{resolved}/index");
    }
    let bare = spec
        .trim_start_matches("@/")
        .trim_start_matches("~/")
        .trim_start_matches('#');
    let bare = without_js_extension(bare);
    !bare.is_empty()
        && (source == bare
            || source.ends_with(&format!("/{bare}"))
            || source == format!("{bare}/index")
            || source.ends_with(&format!("/{bare}/index")))
}

/// A file's text and its blanked twin, with where each line starts.
struct Text<'a> {
    raw: &'a str,
    code: String,
    starts: Vec<usize>,
}

impl<'a> Text<'a> {
    fn new(lang: Lang, raw: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(raw.match_indices('\n').map(|(i, _)| i + 1));
        Text {
            raw,
            code: blanked(lang, raw),
            starts,
        }
    }

    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|s| *s <= offset)
    }

    /// Whether the byte at `offset` is code, not inside a string or a comment.
    fn is_code(&self, offset: usize) -> bool {
        let (raw, code) = (self.raw.as_bytes(), self.code.as_bytes());
        offset < raw.len() && raw[offset] == code[offset] && !raw[offset].is_ascii_whitespace()
    }

    /// Line `line` (1-based) as written, its whitespace collapsed, clipped for a report.
    fn written(&self, line: usize) -> String {
        const MAX_CHARS: usize = 160;
        let start = self.starts[line - 1];
        let end = self.starts.get(line).map_or(self.raw.len(), |e| e - 1);
        let whole = self.raw[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if whole.chars().count() <= MAX_CHARS {
            return whole;
        }
        let mut clipped: String = whole.chars().take(MAX_CHARS).collect();
        clipped.push('…');
        clipped
    }

    fn site(&self, offset: usize, target: Target) -> Site {
        let line = self.line_of(offset);
        Site {
            line,
            written: self.written(line),
            target,
        }
    }

    /// Each match of `pattern` in the text whose group `group` starts in code.
    fn matches<'r>(
        &'r self,
        pattern: &'r Regex,
        group: usize,
    ) -> impl Iterator<Item = regex::Captures<'a>> + 'r {
        pattern
            .captures_iter(self.raw)
            .filter(move |c| c.get(group).is_some_and(|g| self.is_code(g.start())))
    }
}

fn pattern(text: &str) -> Regex {
    Regex::new(text).unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
}

fn sites(lang: Lang, text: &str) -> Vec<Site> {
    let text = Text::new(lang, text);
    let mut out = match lang {
        Lang::Python => python_sites(&text),
        Lang::Js => js_sites(&text),
        Lang::Go => go_sites(&text),
        Lang::Rust | Lang::Java => Vec::new(),
    };
    let mut seen = HashSet::new();
    out.retain(|s| seen.insert((s.line, s.target.clone())));
    out.sort_by_key(|s| s.line);
    out
}

/// The names a Python file's imports bind, each to the dotted path it stands for, and
/// those bound by `from … import`.
fn python_imports(text: &Text<'_>) -> (HashMap<String, String>, HashSet<String>) {
    static IMPORT: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?m)^[ \t]*(import)[ \t]+([^\n#;]+)"));
    static FROM: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"(?m)^[ \t]*(from)[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)")
    });
    let mut bound = HashMap::new();
    let mut from_names = HashSet::new();
    for c in text.matches(&IMPORT, 1) {
        for item in c[2].split(',') {
            let words: Vec<&str> = item.split_whitespace().collect();
            match words.as_slice() {
                [module, "as", alias] => bound.insert((*alias).to_owned(), (*module).to_owned()),
                [module] => {
                    let first = module.split('.').next().unwrap_or(module);
                    bound.insert(first.to_owned(), first.to_owned())
                }
                _ => None,
            };
        }
    }
    for c in text.matches(&FROM, 1) {
        let module = c[2].trim_start_matches('.');
        let names = c[3].trim_matches(|ch: char| ch == '(' || ch == ')' || ch.is_whitespace());
        for item in names.split(',') {
            let words: Vec<&str> = item.split_whitespace().collect();
            let (name, alias) = match words.as_slice() {
                [name, "as", alias] => (*name, *alias),
                [name] if *name != "*" => (*name, *name),
                _ => continue,
            };
            let full = if module.is_empty() {
                name.to_owned()
            } else {
                format!("{module}.{name}")
            };
            bound.insert(alias.to_owned(), full);
            from_names.insert(alias.to_owned());
        }
    }
    (bound, from_names)
}

fn python_sites(text: &Text<'_>) -> Vec<Site> {
    // `calc.add = …`, anywhere: at module level, in `setUpModule`, in a fixture.
    static ASSIGN: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?m)^[ \t]*([A-Za-z_]\w*(?:\.\w+)+)[ \t]*=(?:[^=]|$)"));
    // `add = …` at module level, rebinding a name imported from the module.
    static REBIND: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?m)^([A-Za-z_]\w*)[ \t]*=(?:[^=]|$)"));
    // `setattr(calc, "add", …)`, `monkeypatch.setattr(calc, "add", …)`, `delattr`.
    static SETATTR: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b((?:set|del)attr)\s*\(\s*([A-Za-z_][\w.]*)\s*,\s*['"](\w+)['"]"#)
    });
    // `monkeypatch.setattr("calc.add", …)`.
    static SETATTR_DOTTED: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"\b((?:set|del)attr)\s*\(\s*['"]([\w.]+)['"]"#));
    // `mock.patch("calc.add")`, `@patch("calc.add")`, `mocker.patch(target="calc.add")`.
    static PATCH: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"\b(patch)\s*\(\s*(?:target\s*=\s*)?['"]([\w.]+)['"]"#));
    // `patch.object(calc, "add")`.
    static PATCH_OBJECT: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r#"\b(patch)\s*\.\s*object\s*\(\s*(?:target\s*=\s*)?([A-Za-z_][\w.]*)\s*,\s*(?:attribute\s*=\s*)?['"](\w+)['"]"#,
        )
    });
    // `patch.multiple(calc, add=…)`, `patch.multiple("calc", add=…)`.
    static PATCH_MULTIPLE: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r#"\b(patch)\s*\.\s*multiple\s*\(\s*(?:['"]([\w.]+)['"]|([A-Za-z_][\w.]*))\s*,([^)]*)"#,
        )
    });
    static KEYWORD: LazyLock<Regex> = LazyLock::new(|| pattern(r"(\w+)\s*=[^=]"));
    // `sys.modules["calc"] = …`, `monkeypatch.setitem(sys.modules, "calc", …)`.
    static SYS_MODULES: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r#"\b(sys)\s*\.\s*modules\s*\[\s*['"]([\w.]+)['"]\s*\]\s*=(?:[^=]|$)|\b(setitem)\s*\(\s*sys\.modules\s*,\s*['"]([\w.]+)['"]"#,
        )
    });

    let (bound, from_names) = python_imports(text);
    let resolve = |chain: &str| {
        let (first, rest) = chain.split_once('.').unwrap_or((chain, ""));
        match (bound.get(first), rest.is_empty()) {
            (Some(full), true) => full.clone(),
            (Some(full), false) => format!("{full}.{rest}"),
            (None, _) => chain.to_owned(),
        }
    };
    let mut out = Vec::new();
    let mut push = |at: usize, dotted: String| {
        out.push(text.site(at, Target::Dotted(dotted)));
    };
    for c in text.matches(&ASSIGN, 1) {
        push(c.get(1).map_or(0, |m| m.start()), resolve(&c[1]));
    }
    for c in text.matches(&REBIND, 1) {
        if from_names.contains(&c[1]) {
            push(c.get(1).map_or(0, |m| m.start()), resolve(&c[1]));
        }
    }
    for c in text.matches(&SETATTR, 1) {
        push(
            c.get(1).map_or(0, |m| m.start()),
            format!("{}.{}", resolve(&c[2]), &c[3]),
        );
    }
    for c in text.matches(&SETATTR_DOTTED, 1) {
        push(c.get(1).map_or(0, |m| m.start()), c[2].to_owned());
    }
    for c in text.matches(&PATCH, 1) {
        push(c.get(1).map_or(0, |m| m.start()), c[2].to_owned());
    }
    for c in text.matches(&PATCH_OBJECT, 1) {
        push(
            c.get(1).map_or(0, |m| m.start()),
            format!("{}.{}", resolve(&c[2]), &c[3]),
        );
    }
    for c in text.matches(&PATCH_MULTIPLE, 1) {
        let owner = match (c.get(2), c.get(3)) {
            (Some(dotted), _) => dotted.as_str().to_owned(),
            (None, Some(name)) => resolve(name.as_str()),
            (None, None) => continue,
        };
        for k in KEYWORD.captures_iter(&c[4]) {
            push(
                c.get(1).map_or(0, |m| m.start()),
                format!("{owner}.{}", &k[1]),
            );
        }
    }
    for c in SYS_MODULES.captures_iter(text.raw) {
        let (Some(word), Some(module)) = (c.get(1).or(c.get(3)), c.get(2).or(c.get(4))) else {
            continue;
        };
        if text.is_code(word.start()) {
            push(word.start(), module.as_str().to_owned());
        }
    }
    out
}

/// What a JavaScript file's imports and `require`s bind: each name to its module and,
/// for a named import, the export it stands for.
fn js_bindings(text: &Text<'_>) -> HashMap<String, (String, Option<String>)> {
    static NAMESPACE: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"\b(import)\s+\*\s*as\s+([\w$]+)\s+from\s+['"]([^'"]+)['"]"#));
    static DEFAULT: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(import)\s+([\w$]+)\s*(?:,\s*\{([^}]*)\})?\s*from\s+['"]([^'"]+)['"]"#)
    });
    static NAMED: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"\b(import)\s*\{([^}]*)\}\s*from\s+['"]([^'"]+)['"]"#));
    static REQUIRE: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(const|let|var)\s+([\w$]+)\s*=\s*require\s*\(\s*['"]([^'"]+)['"]\s*\)"#)
    });
    static REQUIRE_NAMED: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(const|let|var)\s*\{([^}]*)\}\s*=\s*require\s*\(\s*['"]([^'"]+)['"]\s*\)"#)
    });
    let mut bound = HashMap::new();
    let mut named = |list: &str, spec: &str, separator: &str| {
        for item in list.split(',') {
            let (export, local) = match item.split_once(separator) {
                Some((e, l)) => (e.trim(), l.trim()),
                None => (item.trim(), item.trim()),
            };
            if !local.is_empty() {
                bound.insert(local.to_owned(), (spec.to_owned(), Some(export.to_owned())));
            }
        }
    };
    for c in text.matches(&NAMED, 1) {
        named(&c[2], &c[3], " as ");
    }
    for c in text.matches(&REQUIRE_NAMED, 1) {
        named(&c[2], &c[3], ":");
    }
    for c in text.matches(&DEFAULT, 1) {
        if let Some(list) = c.get(3) {
            named(list.as_str(), &c[4], " as ");
        }
    }
    for c in text.matches(&DEFAULT, 1) {
        bound.insert(c[2].to_owned(), (c[4].to_owned(), None));
    }
    for c in text.matches(&NAMESPACE, 1) {
        bound.insert(c[2].to_owned(), (c[3].to_owned(), None));
    }
    for c in text.matches(&REQUIRE, 1) {
        bound.insert(c[2].to_owned(), (c[3].to_owned(), None));
    }
    bound
}

fn js_sites(text: &Text<'_>) -> Vec<Site> {
    // `jest.mock('./calc')`, `vi.mock('./calc', …)`: the whole module.
    static MODULE_MOCK: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r#"\b(jest|vi)\s*\.\s*(?:mock|doMock|unstable_mockModule|setMock)\s*\(\s*['"]([^'"]+)['"]"#,
        )
    });
    // `jest.spyOn(calc, 'add')`: a patch when its implementation is replaced.
    static SPY: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(jest|vi)\s*\.\s*spyOn\s*\(\s*([\w$.]+)\s*,\s*['"]([\w$]+)['"][^)]*\)"#)
    });
    static MOCKED: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"^\s*\.\s*mock(?:Implementation|ImplementationOnce|ReturnValue|ReturnValueOnce|ResolvedValue|ResolvedValueOnce|RejectedValue|RejectedValueOnce|ReturnThis)\b",
        )
    });
    static SPY_VARIABLE: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"\b(?:const|let|var)\s+([\w$]+)\s*=\s*(?:await\s+)?$"));
    // `sinon.stub(calc, 'add')`, `sandbox.replace(calc, 'add', …)`, `sinon.stub(calc)`.
    static SINON: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r#"\b(sinon|[\w$]*[sS]andbox)\s*\.\s*(?:stub|replace|replaceGetter|replaceSetter)\s*\(\s*([\w$.]+)\s*(?:,\s*['"]([\w$]+)['"])?"#,
        )
    });
    static DEFINE: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(Object)\s*\.\s*defineProperty\s*\(\s*([\w$.]+)\s*,\s*['"]([\w$]+)['"]"#)
    });
    // `calc.add = …`, `Calc.prototype.add = …`.
    static ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"(?:^|[^.\w$])([A-Za-z_$][\w$]*)((?:\.[\w$]+)*)\.([\w$]+)\s*=(?:[^=]|$)")
    });
    // `require('./calc').add = …`.
    static REQUIRE_ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r#"\b(require)\s*\(\s*['"]([^'"]+)['"]\s*\)\s*\.\s*([\w$]+)\s*=(?:[^=]|$)"#)
    });

    let bound = js_bindings(text);
    let module = |owner: &str, name: Option<&str>| {
        let first = owner.split('.').next().unwrap_or(owner);
        bound.get(first).map(|(spec, _)| Target::Module {
            spec: spec.clone(),
            name: name.map(str::to_owned),
        })
    };
    let mut out = Vec::new();
    let start = |c: &regex::Captures<'_>| c.get(1).map_or(0, |m| m.start());
    for c in text.matches(&MODULE_MOCK, 1) {
        out.push(text.site(
            start(&c),
            Target::Module {
                spec: c[2].to_owned(),
                name: None,
            },
        ));
    }
    for c in text.matches(&SPY, 1) {
        let Some(whole) = c.get(0) else { continue };
        let chained = MOCKED.is_match(&text.raw[whole.end()..]);
        let line_start = text.starts[text.line_of(whole.start()) - 1];
        let named = SPY_VARIABLE
            .captures(&text.raw[line_start..whole.start()])
            .is_some_and(|v| {
                let later = pattern(&format!(
                    r"\b{}\s*\.\s*mock(?:Implementation|ReturnValue|ResolvedValue|RejectedValue|ReturnThis)",
                    regex::escape(&v[1])
                ));
                later.is_match(&text.raw[whole.end()..])
            });
        if (chained || named)
            && let Some(target) = module(&c[2], Some(&c[3]))
        {
            out.push(text.site(start(&c), target));
        }
    }
    for c in text.matches(&SINON, 1) {
        if let Some(target) = module(&c[2], c.get(3).map(|m| m.as_str())) {
            out.push(text.site(start(&c), target));
        }
    }
    for c in text.matches(&DEFINE, 1) {
        if let Some(target) = module(&c[2], Some(&c[3])) {
            out.push(text.site(start(&c), target));
        }
    }
    for c in text.matches(&ASSIGN, 1) {
        if let Some(target) = module(&c[1], Some(&c[3])) {
            out.push(text.site(start(&c), target));
        }
    }
    for c in text.matches(&REQUIRE_ASSIGN, 1) {
        out.push(text.site(
            start(&c),
            Target::Module {
                spec: c[2].to_owned(),
                name: Some(c[3].to_owned()),
            },
        ));
    }
    out
}

static GO_PACKAGE: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?m)^(package)\s+(\w+)"));

/// The package a Go file's clause names.
fn go_package(raw: &str) -> Option<String> {
    let text = Text::new(Lang::Go, raw);
    let found = text.matches(&GO_PACKAGE, 1).next()?;
    Some(found[2].to_owned())
}

fn go_sites(text: &Text<'_>) -> Vec<Site> {
    static IMPORT: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"(?m)^(import)\s+(?:([\w.]+)\s+)?"([^"]+)""#));
    static IMPORTS: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?ms)^(import)\s*\((.*?)\)"));
    static IMPORT_LINE: LazyLock<Regex> =
        LazyLock::new(|| pattern(r#"(?m)^\s*(?:([\w.]+)\s+)?"([^"]+)""#));
    // `addFn = …`, `calc.AddFn = …`, `a, calc.B = …`, inside any function.
    static ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"(?m)^[ \t]*([A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*)[ \t]*=(?:[^=]|$)")
    });
    let own_package = text
        .matches(&GO_PACKAGE, 1)
        .next()
        .map(|c| c[2].to_owned())
        .unwrap_or_default();
    let mut imports: HashMap<String, String> = HashMap::new();
    let mut bind = |alias: Option<&str>, path: &str| {
        let name = alias.unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path));
        imports.insert(name.to_owned(), path.to_owned());
    };
    for c in text.matches(&IMPORT, 1) {
        bind(c.get(2).map(|m| m.as_str()), &c[3]);
    }
    for c in text.matches(&IMPORTS, 1) {
        for line in IMPORT_LINE.captures_iter(&c[2]) {
            bind(line.get(1).map(|m| m.as_str()), &line[2]);
        }
    }
    let mut out = Vec::new();
    for c in text.matches(&ASSIGN, 1) {
        let at = c.get(1).map_or(0, |m| m.start());
        for target in c[1].split(',').map(str::trim) {
            let target = match target.split_once('.') {
                Some((package, name)) if !name.contains('.') => match imports.get(package) {
                    Some(path) => Target::GoVar {
                        import: Some(path.clone()),
                        name: name.to_owned(),
                    },
                    None => continue,
                },
                Some(_) => continue,
                // The test's own package is the source's only when it is not `x_test`.
                None if !own_package.ends_with("_test") && target != "_" => Target::GoVar {
                    import: None,
                    name: target.to_owned(),
                },
                None => continue,
            };
            out.push(text.site(at, target));
        }
    }
    out
}

/// The line of a `func TestMain(` in Go code.
fn test_main(text: &str) -> Option<usize> {
    static TEST_MAIN: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?m)^(func)\s+TestMain\s*\("));
    let text = Text::new(Lang::Go, text);
    let found = text.matches(&TEST_MAIN, 1).next()?;
    found.get(1).map(|m| text.line_of(m.start()))
}

/// The names a source file defines that a test could replace: Python's top-level
/// functions, classes and assignments; JavaScript's functions, classes, variables,
/// methods and exports; Go's package-level variables (a function cannot be assigned).
fn defined(lang: Lang, raw: &str) -> HashSet<String> {
    static PY_ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"^([A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*(?::[^=]*)?=(?:[^=]|$)")
    });
    static JS_EXTRA: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"(?m)(?:^|[^.\w$])(?:module\.)?exports\.([\w$]+)\s*=|^(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)|^[ \t]+(?:(?:static|async|get|set)\s+)*\*?([A-Za-z_$][\w$]*)\s*\([^)]*\)\s*\{|^\s*([A-Za-z_$][\w$]*)\s*:\s*(?:async\s+)?(?:function\b|\([^)]*\)\s*=>|[\w$]+\s*=>)",
        )
    });
    static JS_LIST: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"\bmodule\.exports\s*=\s*\{([^}]*)\}|\bexport\s*\{([^}]*)\}"));
    static GO_VAR: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?m)^var\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"));
    static GO_VARS: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?ms)^var\s*\((.*?)^\)"));
    static GO_VAR_LINE: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?m)^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"));
    const NOT_NAMES: &[&str] = &[
        "if",
        "for",
        "while",
        "switch",
        "catch",
        "function",
        "return",
        "constructor",
    ];
    let code = blanked(lang, raw);
    let mut names = HashSet::new();
    let mut split = |list: &str| {
        for n in list.split(',') {
            let n = n.trim();
            if !n.is_empty() {
                names.insert(n.to_owned());
            }
        }
    };
    match lang {
        Lang::Python => {
            for line in code.lines() {
                if line.starts_with(|c: char| c.is_whitespace()) {
                    continue;
                }
                if let Some(name) = definition(SourceLang::Python, line) {
                    split(&name);
                } else if let Some(c) = PY_ASSIGN.captures(line) {
                    split(&c[1]);
                }
            }
        }
        Lang::Js => {
            for line in code.lines() {
                if let Some(name) = definition(SourceLang::Script, line) {
                    split(&name);
                }
            }
            for c in JS_EXTRA.captures_iter(&code) {
                if let Some(name) = (1..=4).find_map(|i| c.get(i))
                    && !NOT_NAMES.contains(&name.as_str())
                {
                    split(name.as_str());
                }
            }
            for c in JS_LIST.captures_iter(&code) {
                let Some(list) = c.get(1).or(c.get(2)) else {
                    continue;
                };
                for item in list.as_str().split(',') {
                    // `add`, `add: plus`, `plus as add`: the name it is exported as.
                    let item = item.trim();
                    let exported = item
                        .rsplit_once(" as ")
                        .map_or_else(|| item.split(':').next().unwrap_or(item), |(_, e)| e);
                    let exported: String = exported
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                        .collect();
                    split(&exported);
                }
            }
        }
        Lang::Go => {
            for c in GO_VAR.captures_iter(&code) {
                split(&c[1]);
            }
            for c in GO_VARS.captures_iter(&code) {
                for line in GO_VAR_LINE.captures_iter(&c[1]) {
                    split(&line[1]);
                }
            }
        }
        Lang::Rust | Lang::Java => {}
    }
    names
}
