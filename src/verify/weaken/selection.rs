//! The settings that choose which tests run (pytest's, Jest's, Vitest's, Cargo's test
//! targets, Maven Surefire's, CI workflows), compared between the base and the result: a
//! result that changes them can pass by running fewer tests.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::code::{Lang, blanked};
use super::draft::{Draft, WeakeningKind};

use crate::repo_tools::glob_matches;

const PYTEST_KEYS: &[&str] = &[
    "addopts",
    "testpaths",
    "norecursedirs",
    "python_files",
    "python_classes",
    "python_functions",
];
const JEST_KEYS: &[&str] = &[
    "testPathIgnorePatterns",
    "modulePathIgnorePatterns",
    "testMatch",
    "testRegex",
];
const VITEST_KEYS: &[&str] = &["include", "exclude"];
/// Cargo keys that turn a target's tests off or change how they run.
const CARGO_KEYS: &[&str] = &["test", "harness", "autotests", "required-features"];
/// What in a Maven build skips or filters tests.
const MAVEN_TOKENS: &[&str] = &[
    "<skiptests>",
    "<skip>",
    "<maven.test.skip>",
    "<skipits>",
    "<testfailureignore>",
    "<exclude>",
    "<excludes>",
    "<test>",
    "-dskiptests",
    "-dmaven.test.skip",
    "-dtest=",
];
/// Words of a CI line that runs tests: removing or changing one runs fewer.
const CI_TEST_WORDS: &[&str] = &[
    "test", "spec", "jest", "vitest", "tox", "nox", "mvn", "gradle", "ctest",
];
/// What added to a CI file lets tests fail, or run fewer of them.
const CI_WEAKENING: &[&str] = &[
    "continue-on-error",
    "allow_failure",
    "if: false",
    "if: ${{ false }}",
    "|| true",
    "--skip",
    "skiptests",
    "maven.test.skip",
    "--ignore",
    "--deselect",
    " -k ",
    "testpathignorepatterns",
    "--exclude",
    "-short",
];
const CI_FILES: &[&str] = &[
    ".github/workflows/*",
    ".gitlab-ci.yml",
    ".gitlab/ci/**",
    ".circleci/**",
    ".buildkite/**",
    ".travis.yml",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    "Jenkinsfile",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// An INI file and the section pytest reads in it.
    Ini(&'static str),
    PyProject,
    Cargo,
    /// `jest.config.*`, `vitest.config.*`, `vite.config.*`: JavaScript or JSON.
    JsConfig(&'static [&'static str]),
    PackageJson,
    Maven,
    Ci,
}

impl Format {
    pub(super) fn of(path: &str) -> Option<Format> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let stem = name.split('.').next().unwrap_or(name);
        match name {
            "pytest.ini" | "tox.ini" => Some(Format::Ini("pytest")),
            "setup.cfg" => Some(Format::Ini("tool:pytest")),
            "pyproject.toml" => Some(Format::PyProject),
            "Cargo.toml" => Some(Format::Cargo),
            "package.json" => Some(Format::PackageJson),
            "pom.xml" | "maven.config" => Some(Format::Maven),
            _ if name.contains(".config.") && stem == "jest" => Some(Format::JsConfig(JEST_KEYS)),
            _ if name.contains(".config.") && (stem == "vitest" || stem == "vite") => {
                Some(Format::JsConfig(VITEST_KEYS))
            }
            _ if name.starts_with("vitest.workspace.") => Some(Format::JsConfig(VITEST_KEYS)),
            _ if CI_FILES.iter().any(|g| glob_matches(g, path)) => Some(Format::Ci),
            _ => None,
        }
    }
}

/// One setting as a file holds it: a display name for its key, its value with the
/// whitespace taken out, and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setting {
    /// The key as the file spells it (empty for a line of Maven or CI).
    name: String,
    key: String,
    value: String,
    line: usize,
    /// Added, it runs more tests, not fewer (a `[[test]]` target that only names a file).
    harmless_added: bool,
}

/// What `result` changes of `base`'s test selection (either side `None` when the file
/// is not there).
pub(super) fn compare(
    format: Format,
    path: &str,
    base: Option<&str>,
    result: Option<&str>,
    out: &mut Vec<Draft>,
) {
    let (base, result) = (base.unwrap_or_default(), result.unwrap_or_default());
    match format {
        Format::Maven => added_lines(path, base, result, out, |l| {
            let l = l.to_lowercase();
            MAVEN_TOKENS.iter().any(|t| l.contains(t))
        }),
        Format::Ci => ci(path, base, result, out),
        _ => {
            let read = |text: &str| match format {
                Format::Ini(section) => ini(text, section),
                Format::PyProject => toml_like(text, |section, key| {
                    section == "tool.pytest.ini_options" && PYTEST_KEYS.contains(&key)
                }),
                Format::Cargo => cargo(text),
                Format::JsConfig(keys) => js_keys(text, keys, true),
                Format::PackageJson => package_json(text),
                Format::Maven | Format::Ci => Vec::new(),
            };
            compare_settings(path, &read(base), &read(result), out);
        }
    }
}

fn compare_settings(path: &str, base: &[Setting], result: &[Setting], out: &mut Vec<Draft>) {
    let before: HashMap<&str, &Setting> = base.iter().map(|s| (s.key.as_str(), s)).collect();
    let after: HashMap<&str, &Setting> = result.iter().map(|s| (s.key.as_str(), s)).collect();
    for s in result {
        let what = match before.get(s.key.as_str()) {
            Some(old) if old.value == s.value => continue,
            Some(_) => format!("changes {} to {}", s.key, as_code(&clipped(&s.value))),
            None if s.harmless_added => continue,
            None => format!("adds {} = {}", s.key, as_code(&clipped(&s.value))),
        };
        out.push(selection(path, s, false, what));
    }
    for s in base {
        if !after.contains_key(s.key.as_str()) {
            let what = format!("removes {}", s.key);
            out.push(selection(path, s, true, what));
        }
    }
}

fn selection(path: &str, s: &Setting, in_base: bool, what: String) -> Draft {
    Draft {
        kind: WeakeningKind::Selection,
        path: path.to_owned(),
        lines: vec![s.line],
        in_base,
        test: None,
        instruction: format!("undo this change to the test selection: {what}"),
        what,
    }
}

/// A name or value the result wrote, as inline code: it may hold backticks and line
/// breaks, none of which can end the span.
fn as_code(text: &str) -> String {
    crate::markdown::code(text, false)
}

fn clipped(value: &str) -> String {
    let mut v: String = value.chars().take(120).collect();
    if v.len() < value.len() {
        v.push('…');
    }
    v.replace('`', "'")
}

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect()
}

/// `[section]`'s keys among pytest's, with their indented continuation lines.
fn ini(text: &str, wanted: &str) -> Vec<Setting> {
    let mut out: Vec<Setting> = Vec::new();
    let mut section = String::new();
    let mut current: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(at) = current {
                out[at].value.push_str(&squeeze(trimmed));
            }
            continue;
        }
        current = None;
        if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            section = name.trim().to_owned();
            continue;
        }
        let Some(split) = trimmed.find(['=', ':']) else {
            continue;
        };
        let key = trimmed[..split].trim();
        if section == wanted && PYTEST_KEYS.contains(&key) {
            out.push(Setting {
                name: key.to_owned(),
                key: format!("{} in {}", as_code(key), as_code(&format!("[{section}]"))),
                value: squeeze(&trimmed[split + 1..]),
                line: i + 1,
                harmless_added: false,
            });
            current = Some(out.len() - 1);
        }
    }
    out
}

/// `key = value` lines of a TOML file that `keep(section, key)` wants, a value running on
/// while its brackets are open. Array tables (`[[test]]`) are told apart by their number.
fn toml_like(text: &str, keep: impl Fn(&str, &str) -> bool) -> Vec<Setting> {
    toml_entries(text)
        .into_iter()
        .filter(|e| keep(&e.section, &e.key))
        .map(|e| Setting {
            key: format!(
                "{} in {}",
                as_code(&e.key),
                as_code(&format!("[{}]", e.table))
            ),
            name: e.key,
            value: e.value,
            line: e.line,
            harmless_added: false,
        })
        .collect()
}

struct TomlEntry {
    /// The table's header as written, numbered for array tables (`[test] 2`).
    table: String,
    section: String,
    /// The table's own line.
    header: usize,
    key: String,
    value: String,
    line: usize,
}

fn toml_entries(text: &str) -> Vec<TomlEntry> {
    let mut out: Vec<TomlEntry> = Vec::new();
    let (mut section, mut table, mut header) = (String::new(), String::new(), 0);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut open = 0i64;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.split(" #").next().unwrap_or(line).trim();
        if open > 0 {
            if let Some(last) = out.last_mut() {
                last.value.push_str(&squeeze(trimmed));
            }
            open += brackets(trimmed);
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed
            .strip_prefix("[[")
            .and_then(|t| t.strip_suffix("]]"))
        {
            section = name.trim().to_owned();
            let n = seen.entry(section.clone()).or_default();
            *n += 1;
            table = format!("[{section}] {n}");
            header = i + 1;
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            section = name.trim().to_owned();
            table = section.clone();
            header = i + 1;
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            continue;
        };
        open = brackets(value);
        out.push(TomlEntry {
            table: table.clone(),
            section: section.clone(),
            header,
            key: key.trim().trim_matches('"').to_owned(),
            value: squeeze(value),
            line: i + 1,
        });
    }
    out
}

/// Brackets a TOML value opens and does not close, outside its strings.
fn brackets(text: &str) -> i64 {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// Cargo's test switches per target, and each `[[test]]` target as a whole: one that is
/// changed or removed, or added with a switch, changes which tests run.
fn cargo(text: &str) -> Vec<Setting> {
    let entries = toml_entries(text);
    let mut out = Vec::new();
    let mut targets: Vec<(String, usize, Vec<String>, bool)> = Vec::new();
    for e in &entries {
        if e.section == "test" {
            match targets.iter_mut().find(|t| t.0 == e.table) {
                Some(t) => t.2.push(format!("{}={}", e.key, e.value)),
                None => targets.push((
                    e.table.clone(),
                    e.header,
                    vec![format!("{}={}", e.key, e.value)],
                    false,
                )),
            }
            if let Some(t) = targets.iter_mut().find(|t| t.0 == e.table) {
                t.3 |= CARGO_KEYS.contains(&e.key.as_str());
            }
        } else if CARGO_KEYS.contains(&e.key.as_str())
            && (e.section == "lib" || e.section == "package" || e.table.contains(']'))
        {
            out.push(Setting {
                name: e.key.clone(),
                key: format!(
                    "{} in {}",
                    as_code(&e.key),
                    as_code(&format!("[{}]", e.table))
                ),
                value: e.value.clone(),
                line: e.line,
                harmless_added: false,
            });
        }
    }
    for (table, header, mut keys, switched) in targets {
        keys.sort();
        let name = keys
            .iter()
            .find_map(|k| k.strip_prefix("name="))
            .map_or(table.clone(), |n| n.trim_matches('"').to_owned());
        out.push(Setting {
            name: "[[test]]".into(),
            key: format!("the `[[test]]` target {}", as_code(&name)),
            value: keys.join(","),
            line: header,
            harmless_added: !switched,
        });
    }
    out
}

/// Each of `keys` in a JavaScript or JSON configuration, numbered when it repeats; its
/// value runs to the comma or bracket that ends it. `code`: a JavaScript file, whose
/// comments do not count.
fn js_keys(text: &str, keys: &[&str], code: bool) -> Vec<Setting> {
    static KEY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"["']?\b([A-Za-z_]\w*)\b["']?\s*:"#)
            .unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
    });
    let blank = if code {
        blanked(Lang::Js, text)
    } else {
        text.to_owned()
    };
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    for found in KEY.captures_iter(text) {
        let (Some(whole), Some(key)) = (found.get(0), found.get(1)) else {
            continue;
        };
        let Some(known) = keys.iter().find(|k| **k == key.as_str()) else {
            continue;
        };
        if blank[whole.start()..whole.end()].trim().is_empty() {
            continue;
        }
        let n = seen.entry(known).or_default();
        *n += 1;
        let label = if *n == 1 {
            as_code(known)
        } else {
            format!("{} ({n})", as_code(known))
        };
        out.push(Setting {
            name: (*known).to_owned(),
            key: label,
            value: squeeze(&value_at(text, whole.end())),
            line: line_of(whole.start()),
            harmless_added: false,
        });
    }
    out
}

/// The value starting at `from`: up to a comma, or the bracket closing its parent, at its
/// own depth, outside strings.
fn value_at(text: &str, from: usize) -> String {
    let mut depth = 0i64;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text[from..].char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' if depth == 0 => return text[from..from + i].to_owned(),
            ']' | '}' | ')' => depth -= 1,
            ',' | ';' if depth == 0 => return text[from..from + i].to_owned(),
            '\n' if depth == 0 && !text[from..from + i].trim().is_empty() => {
                return text[from..from + i].to_owned();
            }
            _ => {}
        }
    }
    text[from..].to_owned()
}

/// Jest's keys inside `package.json`'s `"jest"` object.
fn package_json(text: &str) -> Vec<Setting> {
    let Some(at) = text.find("\"jest\"") else {
        return Vec::new();
    };
    let Some(open) = text[at..].find('{').map(|o| at + o) else {
        return Vec::new();
    };
    let object = value_at(text, open + 1);
    let offset = open + 1;
    let mut settings = js_keys(&object, JEST_KEYS, false);
    let before = text[..offset].matches('\n').count();
    for s in &mut settings {
        s.line += before;
    }
    settings
}

/// Lines `result` adds that `matches`, as many as the base holds fewer of.
fn added_lines(
    path: &str,
    base: &str,
    result: &str,
    out: &mut Vec<Draft>,
    matches: impl Fn(&str) -> bool,
) {
    for (line, text) in unmatched(result, base) {
        if matches(&text) {
            let setting = Setting {
                name: String::new(),
                key: as_code(&text),
                value: String::new(),
                line,
                harmless_added: false,
            };
            let what = format!("adds {}", as_code(&clipped(&text)));
            out.push(selection(path, &setting, false, what));
        }
    }
}

/// Lines of `text` (trimmed, not blank, not comments) that `other` does not hold as many
/// times, with their line numbers.
fn unmatched(text: &str, other: &str) -> Vec<(usize, String)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for line in other.lines().map(str::trim).filter(|l| !l.is_empty()) {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("//") {
            continue;
        }
        match counts.get_mut(line) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push((i + 1, line.to_owned())),
        }
    }
    out
}

/// A CI file: a line that ran tests removed or changed, or a line added that lets tests
/// fail or skips some.
fn ci(path: &str, base: &str, result: &str, out: &mut Vec<Draft>) {
    for (line, text) in unmatched(base, result) {
        let lower = text.to_lowercase();
        if CI_TEST_WORDS.iter().any(|w| lower.contains(w)) {
            let setting = Setting {
                name: String::new(),
                key: as_code(&text),
                value: String::new(),
                line,
                harmless_added: false,
            };
            let what = format!("removes or changes {}", as_code(&clipped(&text)));
            out.push(selection(path, &setting, true, what));
        }
    }
    added_lines(path, base, result, out, |l| {
        let l = l.to_lowercase();
        CI_WEAKENING.iter().any(|t| l.contains(t))
    });
}
