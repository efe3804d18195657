//! Test functions, skip and focus markers and assertions in one source file, found line
//! by line with each language's usual patterns. Strings and comments are blanked first,
//! so a marker quoted in a string or left in a comment is never one.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use super::super::scope::is_test_path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Lang {
    Rust,
    Python,
    Js,
    Go,
    Java,
}

impl Lang {
    /// The language whose tests `path` may hold. Where tests live by convention, only
    /// such files are read, so an application's own `test_connection()` or `test(x)` is
    /// not taken for a test: Go's `_test.go`, Python's and JavaScript's test files and
    /// folders. Rust and Java tests are told by their attributes wherever they are.
    pub(super) fn of(path: &str) -> Option<Lang> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let (_, ext) = name.rsplit_once('.')?;
        let folders = || path.split('/').rev().skip(1);
        match ext {
            "rs" => Some(Lang::Rust),
            "py" if is_test_path(path)
                || name.starts_with("test")
                || name.ends_with("tests.py") =>
            {
                Some(Lang::Python)
            }
            "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "mts" | "cts"
                if is_test_path(path) || folders().any(|d| d == "__tests__" || d == "spec") =>
            {
                Some(Lang::Js)
            }
            "go" if name.ends_with("_test.go") => Some(Lang::Go),
            "java" => Some(Lang::Java),
            _ => None,
        }
    }
}

/// One test function: its name (qualified by its class or `describe` blocks), the line it
/// is defined on, and its assertions with their lines, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TestFn {
    pub name: String,
    pub line: usize,
    pub assertions: Vec<(usize, String)>,
}

/// A marker that skips tests (`@pytest.mark.skip`, `#[ignore]`, `t.Skip`) or narrows the
/// suite to some (`it.only`); `owner` is the test or block it applies to, `None` for the
/// whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Marker {
    pub text: String,
    pub focus: bool,
    pub owner: Option<String>,
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Parsed {
    pub tests: Vec<TestFn>,
    pub markers: Vec<Marker>,
    /// Go build constraints (`//go:build`, `// +build`) above the package clause.
    pub build_tags: Vec<(usize, String)>,
}

pub(super) fn parse(lang: Lang, text: &str) -> Parsed {
    let code = blanked(lang, text);
    let source = Source::new(text, &code);
    match lang {
        Lang::Python => python(&source),
        Lang::Rust => rust(&source),
        Lang::Js => js(&source),
        Lang::Go => go(&source),
        Lang::Java => java(&source),
    }
}

/// The text and its blanked twin (same bytes at the same offsets, strings' contents and
/// comments turned to spaces), with where each line starts.
struct Source<'a> {
    raw: &'a str,
    code: &'a str,
    starts: Vec<usize>,
}

impl<'a> Source<'a> {
    fn new(raw: &'a str, code: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(raw.match_indices('\n').map(|(i, _)| i + 1));
        Source { raw, code, starts }
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|s| *s <= offset)
    }

    /// Line `n` (1-based) as written, trimmed, its inner whitespace collapsed.
    fn written(&self, n: usize) -> String {
        let start = self.starts[n - 1];
        let end = self.starts.get(n).map_or(self.raw.len(), |e| e - 1);
        self.raw[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn code_lines(&self) -> impl Iterator<Item = (usize, &'a str)> {
        self.code.split('\n').enumerate().map(|(i, l)| (i + 1, l))
    }

    /// Where the bracket opened at `open` closes (`None`: never in this file).
    fn closing(&self, open: usize) -> Option<usize> {
        let bytes = self.code.as_bytes();
        let (o, c) = match bytes.get(open)? {
            b'(' => (b'(', b')'),
            b'{' => (b'{', b'}'),
            b'[' => (b'[', b']'),
            _ => return None,
        };
        let mut depth = 0usize;
        for (i, b) in bytes.iter().enumerate().skip(open) {
            if *b == o {
                depth += 1;
            } else if *b == c {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        None
    }

    /// The body `{ … }` that starts at the first `{` after `from`: its two offsets, or to
    /// the end of the file when it never closes.
    fn braced_body(&self, from: usize) -> Option<(usize, usize)> {
        let open = from + self.code[from..].find('{')?;
        Some((open, self.closing(open).unwrap_or(self.code.len())))
    }

    /// The assertions `pattern` finds between two offsets, one per match, each with its
    /// line as written.
    fn assertions(&self, pattern: &Regex, from: usize, to: usize) -> Vec<(usize, String)> {
        pattern
            .find_iter(&self.code[from..to])
            .map(|m| {
                let line = self.line_of(from + m.start());
                (line, self.written(line))
            })
            .collect()
    }
}

fn pattern(text: &str) -> Regex {
    Regex::new(text).unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
}

/// `text` with comments and the contents of string literals turned to spaces (newlines
/// kept, quotes kept), so every offset and line stays where it was.
pub(super) fn blanked(lang: Lang, text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let hide = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(b.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let python = lang == Lang::Python;
        if (python && c == b'#') || (!python && c == b'/' && next == Some(b'/')) {
            let end = find_byte(b, i, b'\n').unwrap_or(b.len());
            hide(&mut out, i, end);
            i = end;
        } else if !python && c == b'/' && next == Some(b'*') {
            let end = find_seq(b, i + 2, b"*/").map_or(b.len(), |e| e + 2);
            hide(&mut out, i, end);
            i = end;
        } else if lang == Lang::Rust
            && let Some((open, hashes)) = raw_string_start(b, i)
        {
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let end = find_seq(b, open + 1, &close).unwrap_or(b.len());
            hide(&mut out, open + 1, end);
            i = end + close.len();
        } else if python && (c == b'"' || c == b'\'') && b.get(i..i + 3) == Some(&[c, c, c]) {
            let end = find_seq(b, i + 3, &[c, c, c]).unwrap_or(b.len());
            hide(&mut out, i + 3, end);
            i = end + 3;
        } else if c == b'"' || c == b'`' || (c == b'\'' && quote_opens(lang, b, i)) {
            // Go's backquoted strings take no escapes; the other strings end at a line's
            // end unless the language lets them span lines.
            let escapes = !(lang == Lang::Go && c == b'`');
            let multiline = c == b'`' || (lang == Lang::Rust && c == b'"');
            let end = string_end(b, i + 1, c, escapes, multiline);
            hide(&mut out, i + 1, end);
            i = end + 1;
        } else {
            i += 1;
        }
    }
    // Only ASCII was replaced, and only whole characters: still UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

fn find_byte(b: &[u8], from: usize, byte: u8) -> Option<usize> {
    b.get(from..)?
        .iter()
        .position(|x| *x == byte)
        .map(|p| p + from)
}

fn find_seq(b: &[u8], from: usize, seq: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(seq.len())
        .position(|w| w == seq)
        .map(|p| p + from)
}

/// A Rust raw string `r"…"`, `r#"…"#`, `br"…"` starting at `i`: its opening quote and how
/// many `#` close it.
fn raw_string_start(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let ident = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let starts_word = |at: usize| at == 0 || !ident(b[at - 1]);
    let prefixed = starts_word(i) || (i > 0 && b[i - 1] == b'b' && starts_word(i - 1));
    if b[i] != b'r' || !prefixed {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|x| **x == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some((i + 1 + hashes, hashes))
}

/// Whether a `'` at `i` opens a literal: always in Python and JavaScript; in Rust only a
/// character literal does (`'a'`, `'\n'`), not a lifetime (`'a`).
fn quote_opens(lang: Lang, b: &[u8], i: usize) -> bool {
    if lang != Lang::Rust {
        return true;
    }
    match b.get(i + 1) {
        Some(b'\\') => true,
        Some(first) => {
            let width = match first {
                0x00..=0x7f => 1,
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            b.get(i + 1 + width) == Some(&b'\'')
        }
        None => false,
    }
}

/// Where a string opened just before `from` with `quote` ends (the closing quote's offset,
/// or where the line or file ends when it never closes).
fn string_end(b: &[u8], from: usize, quote: u8, escapes: bool, multiline: bool) -> usize {
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'\\' if escapes => i += 2,
            b'\n' if !multiline => return i,
            x if x == quote => return i,
            _ => i += 1,
        }
    }
    b.len()
}

fn python(src: &Source<'_>) -> Parsed {
    static DEF: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)"));
    static DECORATOR: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"^\s*@\s*((?:pytest\.)?mark\.(?:skipif|skip|xfail)|(?:unittest\.)?(?:skipIf|skipUnless|skip|expectedFailure))\b",
        )
    });
    static CALL: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"\b(self\.skipTest|pytest\.skip|pytest\.xfail|(?:unittest\.)?SkipTest)\s*\(")
    });
    static PYTESTMARK: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"^\s*pytestmark\s*=.*\bmark\.(skipif|skip|xfail)\b"));
    static ASSERT: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"\bassert\b|\bself\.assert\w*\s*\(|\bpytest\.raises\s*\("));

    struct Scope {
        indent: usize,
        name: String,
        class: bool,
        test: Option<usize>,
    }
    let mut parsed = Parsed::default();
    let mut stack: Vec<Scope> = Vec::new();
    let mut pending: Vec<Marker> = Vec::new();
    let mut depth = 0i64;
    for (n, line) in src.code_lines() {
        let continued = depth > 0;
        for c in line.bytes() {
            match c {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth = (depth - 1).max(0),
                _ => {}
            }
        }
        if line.trim().is_empty() {
            continue;
        }
        if !continued {
            let indent = line.len() - line.trim_start().len();
            while stack.last().is_some_and(|s| s.indent >= indent) {
                stack.pop();
            }
            if let Some(def) = DEF.captures(line) {
                let class = &def[2] == "class";
                let name = def[3].to_owned();
                let mut qualified: Vec<&str> = stack.iter().map(|s| s.name.as_str()).collect();
                qualified.push(&name);
                let qualified = qualified.join(".");
                let test = (!class && name.starts_with("test") && stack.iter().all(|s| s.class))
                    .then(|| {
                        parsed.tests.push(TestFn {
                            name: qualified.clone(),
                            line: n,
                            assertions: Vec::new(),
                        });
                        parsed.tests.len() - 1
                    });
                for mut marker in pending.drain(..) {
                    marker.owner = Some(qualified.clone());
                    parsed.markers.push(marker);
                }
                stack.push(Scope {
                    indent,
                    name,
                    class,
                    test,
                });
                continue;
            }
            if let Some(d) = DECORATOR.captures(line) {
                pending.push(Marker {
                    text: format!("@{}", &d[1]),
                    focus: false,
                    owner: None,
                    line: n,
                });
                continue;
            }
            if !line.trim_start().starts_with('@') {
                parsed.markers.append(&mut pending);
            }
        }
        let inner = || {
            let names: Vec<&str> = stack.iter().map(|s| s.name.as_str()).collect();
            (!names.is_empty()).then(|| names.join("."))
        };
        if let Some(m) = PYTESTMARK.captures(line) {
            parsed.markers.push(Marker {
                text: format!("pytestmark = pytest.mark.{}", &m[1]),
                focus: false,
                owner: inner(),
                line: n,
            });
        }
        for call in CALL.captures_iter(line) {
            parsed.markers.push(Marker {
                text: call[1].to_owned(),
                focus: false,
                owner: inner(),
                line: n,
            });
        }
        if let Some(test) = stack.iter().rev().find_map(|s| s.test) {
            let found = ASSERT.find_iter(line).count();
            let written = src.written(n);
            parsed.tests[test]
                .assertions
                .extend(std::iter::repeat_n((n, written), found));
        }
    }
    parsed.markers.append(&mut pending);
    parsed
}

/// The name of the first `fn` after `from`, and where its name ends.
fn next_fn(src: &Source<'_>, from: usize) -> Option<(String, usize)> {
    static FN: LazyLock<Regex> = LazyLock::new(|| pattern(r"\bfn\s+(\w+)"));
    let found = FN.captures(&src.code[from..])?;
    let name = found.get(1)?;
    Some((name.as_str().to_owned(), from + name.end()))
}

fn rust(src: &Source<'_>) -> Parsed {
    static TEST: LazyLock<Regex> = LazyLock::new(|| {
        pattern(r"#\[\s*(?:(?:\w+::)*test\b[^\]]*|rstest\s*|test_case\b[^\]]*)\]")
    });
    static IGNORE: LazyLock<Regex> = LazyLock::new(|| pattern(r"#\[\s*ignore\b[^\]]*\]"));
    static ASSERT: LazyLock<Regex> = LazyLock::new(|| pattern(r"\b\w*assert\w*!"));
    let mut parsed = Parsed::default();
    let mut seen = HashSet::new();
    for attr in TEST.find_iter(src.code) {
        let Some((name, after)) = next_fn(src, attr.end()) else {
            continue;
        };
        if !seen.insert(after) {
            // `#[rstest]` beside `#[test_case]`: one function.
            continue;
        }
        let body = src.braced_body(after);
        parsed.tests.push(TestFn {
            line: src.line_of(after),
            assertions: body
                .map(|(from, to)| src.assertions(&ASSERT, from, to))
                .unwrap_or_default(),
            name,
        });
    }
    for ignore in IGNORE.find_iter(src.code) {
        parsed.markers.push(Marker {
            text: "#[ignore]".into(),
            focus: false,
            owner: next_fn(src, ignore.end()).map(|(name, _)| name),
            line: src.line_of(ignore.start()),
        });
    }
    parsed
}

fn go(src: &Source<'_>) -> Parsed {
    static TEST: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?m)^func\s+(Test\w*)\s*\("));
    static SKIP: LazyLock<Regex> = LazyLock::new(|| pattern(r"\b(\w+)\.(Skip(?:f|Now)?)\s*\("));
    static ASSERT: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"\b(?:t|tt|tb)\.(?:Errorf|Error|Fatalf|Fatal|FailNow|Fail)\s*\(|\b(?:assert|require)\.\w+\s*\(",
        )
    });
    let mut parsed = Parsed::default();
    let mut bodies = Vec::new();
    for test in TEST.captures_iter(src.code) {
        let Some(whole) = test.get(0) else { continue };
        if &test[1] == "TestMain" {
            // The package's setup, not a test.
            continue;
        }
        let body = src.braced_body(whole.end());
        bodies.push((test[1].to_owned(), body));
        parsed.tests.push(TestFn {
            name: test[1].to_owned(),
            line: src.line_of(whole.start()),
            assertions: body
                .map(|(from, to)| src.assertions(&ASSERT, from, to))
                .unwrap_or_default(),
        });
    }
    for skip in SKIP.captures_iter(src.code) {
        let Some(at) = skip.get(0).map(|m| m.start()) else {
            continue;
        };
        let owner = bodies
            .iter()
            .find(|(_, body)| body.is_some_and(|(from, to)| from < at && at < to))
            .map(|(name, _)| name.clone());
        parsed.markers.push(Marker {
            text: format!("{}.{}", &skip[1], &skip[2]),
            focus: false,
            owner,
            line: src.line_of(at),
        });
    }
    for (i, line) in src.raw.lines().enumerate() {
        let line = line.trim();
        if line.starts_with("package ") {
            break;
        }
        if line.starts_with("//go:build") || line.starts_with("// +build") {
            parsed.build_tags.push((i + 1, line.to_owned()));
        }
    }
    parsed
}

/// The declaration after the annotations at `from`: a class's name or a method's, and
/// where the name ends.
fn next_declaration(src: &Source<'_>, from: usize) -> Option<(String, usize)> {
    static ANNOTATION: LazyLock<Regex> = LazyLock::new(|| pattern(r"^\s*@[\w.]+\s*"));
    static DECLARATION: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"\b(?:class|interface|enum|record)\s+(\w+)|(\w+)\s*\("));
    let mut at = from;
    while let Some(a) = ANNOTATION.find(&src.code[at..]) {
        at += a.end();
        if src.code[at..].starts_with('(') {
            at = src.closing(at)? + 1;
        }
    }
    let found = DECLARATION.captures(&src.code[at..])?;
    let name = found.get(1).or(found.get(2))?;
    Some((name.as_str().to_owned(), at + name.end()))
}

fn java(src: &Source<'_>) -> Parsed {
    static TEST: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"@(?:org\.junit\.(?:jupiter\.api\.)?)?(?:Test|ParameterizedTest|RepeatedTest|TestFactory|TestTemplate)\b",
        )
    });
    static DISABLED: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"@(?:org\.junit\.(?:jupiter\.api\.)?)?(Disabled\w*|Ignore)\b"));
    static ASSERT: LazyLock<Regex> = LazyLock::new(|| pattern(r"\bassert\w*\s*\(|\bassert\s"));
    let mut parsed = Parsed::default();
    for test in TEST.find_iter(src.code) {
        let Some((name, after)) = next_declaration(src, test.start()) else {
            continue;
        };
        let body = src.braced_body(after);
        parsed.tests.push(TestFn {
            line: src.line_of(after),
            assertions: body
                .map(|(from, to)| src.assertions(&ASSERT, from, to))
                .unwrap_or_default(),
            name,
        });
    }
    for disabled in DISABLED.captures_iter(src.code) {
        let Some(whole) = disabled.get(0) else {
            continue;
        };
        parsed.markers.push(Marker {
            text: format!("@{}", &disabled[1]),
            focus: false,
            owner: next_declaration(src, whole.start()).map(|(name, _)| name),
            line: src.line_of(whole.start()),
        });
    }
    parsed
}

/// A `describe`/`it`/`test` call: its title, what it is, and its extent.
struct Block {
    title: String,
    test: bool,
    marker: Option<(String, bool)>,
    start: usize,
    open: usize,
    end: usize,
}

fn js(src: &Source<'_>) -> Parsed {
    static CALL: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"(?:^|[^.\w$])((x|f)?(describe|context|suite|it|test|specify))((?:\.(?:only|skip|concurrent|todo|failing))*)\s*\(",
        )
    });
    static ASSERT: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"(?:^|[^.\w$])(?:expect\s*\(|assert\b)"));
    let mut blocks = Vec::new();
    for call in CALL.captures_iter(src.code) {
        let (Some(word), Some(whole)) = (call.get(1), call.get(0)) else {
            continue;
        };
        let modifiers = call.get(4).map_or("", |m| m.as_str());
        if modifiers.contains(".todo") || modifiers.contains(".failing") {
            continue;
        }
        if call.get(2).is_some() && matches!(&call[3], "context" | "suite" | "specify") {
            continue;
        }
        let open = whole.end() - 1;
        let base = &call[3];
        let marker = match call.get(2).map(|m| m.as_str()) {
            Some("x") => Some((word.as_str().to_owned(), false)),
            Some(_) => Some((word.as_str().to_owned(), true)),
            None if modifiers.contains(".only") => Some((format!("{base}.only"), true)),
            None if modifiers.contains(".skip") => Some((format!("{base}.skip"), false)),
            None => None,
        };
        blocks.push(Block {
            title: js_title(src, open + 1),
            test: matches!(base, "it" | "test" | "specify"),
            marker,
            start: word.start(),
            open,
            end: src.closing(open).unwrap_or(src.code.len()),
        });
    }
    let mut parsed = Parsed::default();
    // The `describe` blocks around the one at hand: found in order, each nests in those
    // still open.
    let mut open: Vec<&Block> = Vec::new();
    for b in &blocks {
        open.retain(|o| b.start < o.end);
        let mut parts: Vec<&str> = open.iter().map(|o| o.title.as_str()).collect();
        parts.push(&b.title);
        let qualified = parts.join(" > ");
        if !b.test {
            open.push(b);
        }
        if let Some((text, focus)) = &b.marker {
            parsed.markers.push(Marker {
                text: text.clone(),
                focus: *focus,
                owner: Some(qualified.clone()),
                line: src.line_of(b.start),
            });
        }
        if b.test {
            parsed.tests.push(TestFn {
                name: qualified,
                line: src.line_of(b.start),
                assertions: src.assertions(&ASSERT, b.open, b.end),
            });
        }
    }
    parsed
}

/// A JavaScript test's title: its first argument as written, unquoted when a string.
fn js_title(src: &Source<'_>, from: usize) -> String {
    let code = &src.code[from..];
    let skipped = code.len() - code.trim_start().len();
    let at = from + skipped;
    let bytes = src.code.as_bytes();
    match bytes.get(at) {
        Some(q @ (b'\'' | b'"' | b'`')) => {
            let end = find_byte(bytes, at + 1, *q).unwrap_or(src.code.len());
            src.raw[at + 1..end].to_owned()
        }
        _ => {
            let end = src.code[at..]
                .find([',', ')', '\n'])
                .map_or(src.code.len(), |e| at + e);
            src.raw[at..end].trim().to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanking_keeps_offsets_and_hides_strings_and_comments() {
        let text = "let s = \"#[ignore] é\"; // #[ignore]\nlet c = 'x'; fn f<'a>() {}\n/* it.skip( */ r#\"x\"y\"#;";
        let code = blanked(Lang::Rust, text);
        assert_eq!(code.len(), text.len());
        assert_eq!(code.lines().count(), text.lines().count());
        assert!(!code.contains("ignore"), "{code}");
        assert!(!code.contains("skip"), "{code}");
        assert!(code.contains("fn f<'a>() {}"), "{code}");
        let py = blanked(
            Lang::Python,
            "x = '''\n@unittest.skip\n'''  # pytest.skip(\nassert x\n",
        );
        assert!(!py.contains("skip"), "{py}");
        assert!(py.contains("assert x"), "{py}");
    }
}
