//! Helpers on a command's words that every runner family's selection uses: finding the
//! program, keeping or dropping options, and ids as literal patterns.

/// `text` matched literally by a regular expression (JavaScript's, Go's RE2 and
/// Rust's alike).
pub(super) fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\^$.|?*+()[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Where `name` (a program) is in `words`: the word itself or a path ending in it.
pub(super) fn program_at(words: &[String], name: &str) -> Option<usize> {
    words
        .iter()
        .position(|w| w == name || w.ends_with(&format!("/{name}")))
}

/// Positional words of `args` removed, keeping options and the values of
/// `with_value` options (given as separate words).
pub(super) fn options_only(args: &[String], with_value: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.starts_with('-') && a.len() > 1 {
            kept.push(a.clone());
            if with_value.contains(&a.as_str())
                && let Some(value) = args.get(i + 1)
            {
                kept.push(value.clone());
                i += 1;
            }
        }
        i += 1;
    }
    kept
}

/// `args` without the options in `drop` (and their values, as separate words or after
/// `=`).
pub(super) fn without(args: &[String], drop: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if drop.contains(&a.as_str()) {
            i += 2;
            continue;
        }
        if drop.iter().any(|d| a.starts_with(&format!("{d}=")))
            || drop
                .iter()
                .any(|d| d.len() == 2 && !d.starts_with("--") && a.starts_with(d) && a.len() > 2)
        {
            i += 1;
            continue;
        }
        kept.push(a.clone());
        i += 1;
    }
    kept
}

/// An id that could be read as an option where it goes in as a word of its own.
pub(super) fn option_like(id: &str) -> bool {
    id.starts_with('-')
}
