//! Path globs as models and repository settings write them, compiled once to match many
//! paths.

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
    glob(pattern).map(|g| g.compile_matcher())
}

/// The pattern as globset takes it, or `None` when it is too large to compile.
pub(crate) fn glob(pattern: &str) -> Option<globset::Glob> {
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
}
