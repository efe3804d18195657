//! Re-running only the failing tests: the command line that selects them, built per
//! runner family from the parsed command and the ids its report gave. Nothing is pasted
//! into a shell: the command is split into words as `sh` would, refused when it is more
//! than one simple command, and every word written back quoted; ids become literal
//! patterns where the runner takes patterns.

mod cargo;
mod go;
mod js;
mod maven;
mod python;
mod words;

/// A command line re-running `ids` alone, when the command's runner can select tests;
/// `None`: only the whole command can run again.
pub(super) fn select(command: &str, ids: &[&str]) -> Option<String> {
    if ids.is_empty() || ids.iter().any(|id| id.is_empty() || id.contains('\0')) {
        return None;
    }
    let line = Line::parse(command)?;
    let words = &line.words;
    let selected = cargo::select(words, ids)
        .or_else(|| python::select(words, ids))
        .or_else(|| js::select(words, ids))
        .or_else(|| go::select(words, ids))
        .or_else(|| maven::select(words, ids))?;
    Some(line.with_words(selected))
}

/// One simple command: variable assignments, then words.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    assignments: Vec<(String, String)>,
    words: Vec<String>,
}

impl Line {
    /// Splits `command` as `sh` would, or `None` when it holds anything that makes it
    /// more than words: operators, redirections, expansions, globs, comments.
    fn parse(command: &str) -> Option<Line> {
        let words = split(command)?;
        let mut line = Line {
            assignments: Vec::new(),
            words: Vec::new(),
        };
        for (word, raw) in words {
            if line.words.is_empty()
                && let Some((name, value)) = assignment(&raw, &word)
            {
                line.assignments.push((name, value));
            } else {
                line.words.push(word);
            }
        }
        (!line.words.is_empty()).then_some(line)
    }

    fn with_words(&self, words: Vec<String>) -> String {
        self.assignments
            .iter()
            .map(|(name, value)| format!("{name}={}", quote(value)))
            .chain(words.iter().enumerate().map(|(i, w)| {
                // A first word with `=` would read as an assignment.
                if i == 0 && w.contains('=') {
                    format!("'{}'", w.replace('\'', r"'\''"))
                } else {
                    quote(w)
                }
            }))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `NAME=value` before the command, by its unquoted name.
fn assignment(raw: &str, word: &str) -> Option<(String, String)> {
    let (name, _) = raw.split_once('=')?;
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let value = word.strip_prefix(name)?.strip_prefix('=')?;
    valid.then(|| (name.to_owned(), value.to_owned()))
}

/// The words of `command` with their quotes removed, each with its raw text up to the
/// first quote (to tell `A=b` from `'A=b'`).
fn split(command: &str) -> Option<Vec<(String, String)>> {
    let mut words = Vec::new();
    let mut chars = command.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        if first == '#' || first == '~' {
            return None;
        }
        let (mut word, mut raw, mut quoted) = (String::new(), String::new(), false);
        while let Some(&c) = chars.peek() {
            match c {
                ' ' | '\t' => break,
                '\'' => {
                    chars.next();
                    quoted = true;
                    loop {
                        match chars.next()? {
                            '\'' => break,
                            c => word.push(c),
                        }
                    }
                }
                '"' => {
                    chars.next();
                    quoted = true;
                    loop {
                        match chars.next()? {
                            '"' => break,
                            '\\' => match chars.next()? {
                                c @ ('"' | '\\') => word.push(c),
                                // `\$`, `` \` `` and a line continuation: left to `sh`.
                                _ => return None,
                            },
                            '$' | '`' => return None,
                            c => word.push(c),
                        }
                    }
                }
                '\\' => {
                    chars.next();
                    match chars.next()? {
                        '\n' => return None,
                        c => word.push(c),
                    }
                    quoted = true;
                }
                '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' | '*' | '?' | '[' | '\n'
                | '\r' | '{' | '}' => return None,
                c => {
                    chars.next();
                    word.push(c);
                    if !quoted {
                        raw.push(c);
                    }
                }
            }
        }
        words.push((word, raw));
    }
    Some(words)
}

/// `word` as one `sh` word: bare when it holds only characters `sh` never treats
/// specially, otherwise in single quotes.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::words::regex_literal;
    use super::*;

    /// What `sh -c LINE` passes as argv, to check the quoting by the real shell.
    pub(super) fn argv(line: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for a in {}; do printf '%s\\0' \"$a\"; done",
                // The line's words become the loop's list: `sh` splits and unquotes them
                // exactly as it would for the command.
                line
            ))
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{line}: {out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    pub(super) const HOSTILE: &[&str] = &[
        "it's \"quoted\"",
        "$(touch /tmp/planwright-pwned)",
        "`id`",
        "a b  c",
        "x; rm -rf ~",
        "a|b&c>d",
        "re.*+?^$()[]{}\\/",
        "tab\tand\nnewline",
    ];

    #[test]
    fn hostile_words_reach_argv_as_they_are() {
        for word in HOSTILE {
            let line = quote(word);
            assert_eq!(argv(&line), vec![(*word).to_owned()], "{line}");
        }
        assert_eq!(quote("plain-word_1.2:x=y"), "plain-word_1.2:x=y");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn only_simple_commands_are_rewritten() {
        for command in [
            "cargo test && cargo clippy",
            "cargo test | tee log",
            "cargo test > out",
            "cargo test $FLAGS",
            "cargo test \"$FLAGS\"",
            "pytest tests/*.py",
            "cd sub; pytest",
            "pytest # comment",
            "pytest `echo x`",
            "pytest 'unterminated",
            "(pytest)",
        ] {
            assert_eq!(Line::parse(command), None, "{command}");
        }
        let line = Line::parse("RUST_LOG=debug  'cargo' test \"a b\" c\\ d").unwrap();
        assert_eq!(
            line.assignments,
            vec![("RUST_LOG".to_owned(), "debug".to_owned())]
        );
        assert_eq!(line.words, vec!["cargo", "test", "a b", "c d"]);
        assert_eq!(
            line.with_words(line.words.clone()),
            "RUST_LOG=debug cargo test 'a b' 'c d'"
        );
        // A quoted assignment is a command name to `sh`, and stays one.
        let quoted = Line::parse("'A=b' cargo test").unwrap();
        assert!(quoted.assignments.is_empty());
        assert_eq!(quoted.words[0], "A=b");
        assert_eq!(quoted.with_words(quoted.words.clone()), "'A=b' cargo test");
    }

    #[test]
    fn commands_no_runner_selects_from_run_whole() {
        assert_eq!(select("make test", &["a"]), None);
        assert_eq!(select("npm test", &["a"]), None);
        assert_eq!(select("cargo test", &[]), None);
        assert_eq!(select("cargo test", &["a\0b"]), None);
    }

    #[test]
    fn regex_literals_match_only_themselves() {
        for text in HOSTILE {
            let re = regex::Regex::new(&format!("^{}$", regex_literal(text))).unwrap();
            assert!(re.is_match(text), "{text}");
            assert!(!re.is_match(&format!("{text}x")), "{text}");
        }
    }
}
