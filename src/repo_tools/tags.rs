//! Definitions and references in source files, read line by line with one pattern per
//! language family: what a ctags would find, without a parser to fail. A file in a
//! language not known here is still on the map, as a path.

use std::sync::LazyLock;

use regex::Regex;

/// A language family, by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Script,
    Go,
    Jvm,
    C,
    Ruby,
    Php,
    Shell,
}

impl Lang {
    pub fn of(path: &str) -> Option<Lang> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let ext = name.rsplit_once('.').map(|(_, e)| e)?;
        Some(match ext {
            "rs" => Lang::Rust,
            "py" | "pyi" => Lang::Python,
            "js" | "jsx" | "mjs" | "cjs" | "ts" | "tsx" | "mts" | "cts" | "vue" | "svelte" => {
                Lang::Script
            }
            "go" => Lang::Go,
            "java" | "kt" | "kts" | "scala" | "cs" | "groovy" | "swift" | "dart" => Lang::Jvm,
            "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" | "m" | "mm" => Lang::C,
            "rb" | "rake" => Lang::Ruby,
            "php" => Lang::Php,
            "sh" | "bash" | "zsh" => Lang::Shell,
            _ => return None,
        })
    }

    fn pattern(self) -> &'static Regex {
        match self {
            Lang::Rust => &RUST,
            Lang::Python => &PYTHON,
            Lang::Script => &SCRIPT,
            Lang::Go => &GO,
            Lang::Jvm => &JVM,
            Lang::C => &C,
            Lang::Ruby => &RUBY,
            Lang::Php => &PHP,
            Lang::Shell => &SHELL,
        }
    }
}

fn pattern(text: &str) -> Regex {
    Regex::new(text).unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
}

// Each pattern names the defined identifier `name`. They are anchored at the line's start
// (after indentation), so a call or a comment is not taken for a definition.
static RUST: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r#"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|const|unsafe|extern(?:\s+"[^"]*")?|default)\s+)*(?:fn|struct|enum|trait|type|mod|union|static|const|macro_rules!)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)"#,
    )
});
static PYTHON: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^\s*(?:async\s+)?(?:def|class)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)"));
static SCRIPT: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:(?:async\s+)?function\*?\s+(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)|(?:class|interface|enum|type|namespace)\s+(?P<name2>[A-Za-z_$][A-Za-z0-9_$]*)|(?:const|let|var)\s+(?P<name3>[A-Za-z_$][A-Za-z0-9_$]*)\s*(?::[^=]+)?=\s*(?:async\s+)?(?:function|\([^)]*\)\s*(?::[^=]+)?=>|[A-Za-z_$][A-Za-z0-9_$]*\s*=>))",
    )
});
static GO: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"^(?:func\s+(?:\([^)]*\)\s*)?|type\s+)(?P<name>[A-Za-z_][A-Za-z0-9_]*)")
});
static JVM: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|sealed|open|override|data|case|inline|suspend|async|virtual|partial|readonly|synchronized)\s+)*(?:(?:class|interface|enum|record|object|trait|struct|fun|func|def)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)|[A-Za-z_][A-Za-z0-9_<>\[\]?,. ]*\s+(?P<name2>[A-Za-z_][A-Za-z0-9_]*)\s*\([^;]*$)",
    )
});
static C: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^(?:#\s*define\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?:typedef\s+)?(?:struct|class|enum|union)\s+(?P<name2>[A-Za-z_][A-Za-z0-9_]*)\s*[{:]?\s*$|[A-Za-z_][A-Za-z0-9_:<>,*& ]*[\s*&]+(?P<name3>[A-Za-z_][A-Za-z0-9_:~]*)\s*\([^;]*$)",
    )
});
static RUBY: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^\s*(?:def\s+(?:self\.)?(?P<name>[A-Za-z_][A-Za-z0-9_]*[?!=]?)|(?:class|module)\s+(?P<name2>[A-Z][A-Za-z0-9_:]*))",
    )
});
static PHP: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^\s*(?:(?:public|private|protected|static|abstract|final)\s+)*(?:function|class|interface|trait|enum)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
    )
});
static SHELL: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^\s*(?:function\s+(?P<name>[A-Za-z_][A-Za-z0-9_-]*)|(?P<name2>[A-Za-z_][A-Za-z0-9_-]*)\s*\(\)\s*\{?)",
    )
});

/// Words a definition pattern can catch that are never a definition's name.
const KEYWORDS: &[&str] = &[
    "if", "else", "for", "while", "switch", "return", "new", "case", "catch", "do", "try",
    "sizeof", "throw", "delete", "typeof", "await", "yield", "match", "when", "elif", "with",
];

/// One definition: the name, its line (1-based), and the line itself, clipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Def {
    pub name: String,
    pub line: u32,
    pub text: String,
}

/// The definition on this line, if it is one.
pub fn definition(lang: Lang, line: &str) -> Option<String> {
    if line.len() > 1_000 {
        return None;
    }
    let captures = lang.pattern().captures(line)?;
    let name = ["name", "name2", "name3"]
        .iter()
        .find_map(|n| captures.name(n))?
        .as_str();
    (!KEYWORDS.contains(&name)).then(|| name.to_owned())
}

/// Every definition in a file's text.
pub fn definitions(lang: Lang, text: &str) -> Vec<Def> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(name) = definition(lang, line) {
            out.push(Def {
                name,
                line: i as u32 + 1,
                text: clip(line.trim(), 100),
            });
        }
    }
    out
}

/// The identifiers in `text` (ASCII letters, digits, `_`, not starting with a digit), at
/// least three characters long: shorter ones link everything to everything.
pub fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut at = 0usize;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let b = bytes[at];
            if b.is_ascii_alphabetic() || b == b'_' {
                let start = at;
                while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                    at += 1;
                }
                if at - start >= 3 {
                    return Some(&text[start..at]);
                }
            } else if b.is_ascii_digit() {
                // A number's letters (`0x1f`, `10usize`) are not identifiers.
                while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                    at += 1;
                }
            } else {
                at += 1;
            }
        }
        None
    })
}

fn clip(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(max).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(path: &str, text: &str) -> Vec<String> {
        definitions(Lang::of(path).unwrap(), text)
            .into_iter()
            .map(|d| d.name)
            .collect()
    }

    #[test]
    fn definitions_in_the_common_languages() {
        assert_eq!(
            names(
                "a.rs",
                "pub(crate) async fn reserve(x: u32) {\n    let y = reserve(1);\n}\nimpl Stock {}\npub struct Stock;\nmacro_rules! m {}\n"
            ),
            ["reserve", "Stock", "m"]
        );
        assert_eq!(
            names(
                "a.py",
                "class Inventory:\n    async def reserve(self):\n        reserve()\n# def not_this\n"
            ),
            ["Inventory", "reserve"]
        );
        assert_eq!(
            names(
                "a.ts",
                "export function load() {}\nexport const save = async (x) => x;\nclass Store {}\nif (x) {}\ninterface Shape {}\n"
            ),
            ["load", "save", "Store", "Shape"]
        );
        assert_eq!(
            names(
                "a.go",
                "func (s *Stock) Reserve(n int) error {\ntype Stock struct {\n\tif x {\n"
            ),
            ["Reserve", "Stock"]
        );
        assert_eq!(
            names(
                "A.java",
                "public class Stock {\n    public int reserve(int n) {\n        if (n > 0) {\n        return reserve(n);\n"
            ),
            ["Stock", "reserve"]
        );
        assert_eq!(
            names(
                "a.c",
                "static int reserve(struct stock *s, int n)\n{\n\tif (n) {\n#define MAX 3\nstruct stock {\n"
            ),
            ["reserve", "MAX", "stock"]
        );
        assert_eq!(
            names("a.rb", "module Shop\n  def self.reserve!\n"),
            ["Shop", "reserve!"]
        );
        assert!(Lang::of("README.md").is_none());
        assert!(Lang::of("Makefile").is_none());
    }

    #[test]
    fn identifiers_skip_numbers_and_short_words() {
        let found: Vec<&str> = identifiers("let ab = 0x1fff + reserve_all(stock_2);").collect();
        assert_eq!(found, ["let", "reserve_all", "stock_2"]);
    }
}
