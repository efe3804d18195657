//! Text written by a model (the planner, the reviewer) placed in forge markdown so that a
//! reader sees every character of it: no construct GitHub or GitLab renders (a link
//! reference definition, an HTML comment, a heading, a quote, math) can hide or restyle it.

/// The longest text GitHub accepts in a check run's summary or text (and, with margin,
/// a comment body).
pub const GITHUB_TEXT_LIMIT: usize = 65_535;

/// A character a reader does not see, or one that reorders what is around it: format
/// characters (category Cf: zero-width, bidi controls, tags), variation selectors, the
/// blank fillers some scripts have, and control characters other than line breaks and tabs.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                  // soft hyphen
        | '\u{034F}'                // combining grapheme joiner
        | '\u{0600}'..='\u{0605}'   // Arabic number signs
        | '\u{061C}'                // Arabic letter mark
        | '\u{06DD}' | '\u{070F}' | '\u{0890}' | '\u{0891}' | '\u{08E2}'
        | '\u{115F}' | '\u{1160}'   // Hangul fillers
        | '\u{17B4}' | '\u{17B5}'   // Khmer inherent vowels, drawn as nothing
        | '\u{180B}'..='\u{180F}'   // Mongolian variation selectors and vowel separator
        | '\u{200B}'..='\u{200F}'   // zero-width space, joiners, LRM/RLM
        | '\u{2028}' | '\u{2029}'   // line and paragraph separators
        | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
        | '\u{2060}'..='\u{206F}'   // word joiner, invisible operators, bidi isolates
        | '\u{2800}'                // blank braille pattern
        | '\u{3164}'                // Hangul filler
        | '\u{FE00}'..='\u{FE0F}'   // variation selectors
        | '\u{FEFF}'                // byte order mark, zero-width no-break space
        | '\u{FFA0}'                // half-width Hangul filler
        | '\u{FFF9}'..='\u{FFFB}'   // interlinear annotation
        | '\u{110BD}' | '\u{110CD}'
        | '\u{13430}'..='\u{1343F}' // Egyptian hieroglyph format controls
        | '\u{1BCA0}'..='\u{1BCA3}' // shorthand format controls
        | '\u{1D173}'..='\u{1D17A}' // musical symbol format controls
        | '\u{E0000}'..='\u{E007F}' // tag characters
        | '\u{E0100}'..='\u{E01EF}' // variation selectors supplement
    ) || (c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
}

/// One line of escaped text: whitespace collapsed, every character markdown could read as
/// syntax escaped, mentions kept from pinging.
pub fn inline(text: &str) -> String {
    escape(&text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Escapes `text` for use where a paragraph may start. CommonMark lets any ASCII
/// punctuation be backslash-escaped, so escaping more than strictly needed costs nothing
/// on screen; what matters is that `[x]: url "title"`, `<!-- … -->`, `$\phantom{…}$`,
/// `&#x202E;` and the line-leading markers (`#`, `>`, `-`, `+`, `=`, `1.`, `|`) all show
/// as typed.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut line_start = true;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // `&lt;` rather than `\<`: the raw comment then holds no `<!--` at all, so no
            // text can plant a marker planwright looks for.
            '<' => out.push_str("&lt;"),
            // A zero-width joiner after `@` keeps the text visible but stops the mention.
            '@' => out.push_str("@\u{200d}"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '>' | '#' | '|' | '~' | '!' | '&' | '$' => {
                out.push('\\');
                out.push(c);
            }
            '-' | '+' | '=' if line_start => {
                out.push('\\');
                out.push(c);
            }
            '0'..='9' if line_start => {
                // `12.` or `12)` at the start of a line opens an ordered list.
                out.push(c);
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
                if let Some(marker) = chars.next_if(|n| matches!(n, '.' | ')')) {
                    out.push('\\');
                    out.push(marker);
                }
            }
            ' ' | '\t' if line_start => {
                // Indentation makes a code block or a nested list; it is shown as one space.
                while chars.next_if(|n| matches!(n, ' ' | '\t')).is_some() {}
                out.push(' ');
                continue;
            }
            '\n' => {
                out.push('\n');
                line_start = true;
                continue;
            }
            c => out.push(c),
        }
        line_start = false;
    }
    out
}

/// `text` as an inline code span on one line: a backtick run longer than any inside it, so
/// the text cannot close it early, and `|` escaped for use in a table cell when `in_table`.
pub fn code(text: &str, in_table: bool) -> String {
    let text = text.replace(['\n', '\r'], " ");
    let text = if in_table {
        text.replace('|', "\\|")
    } else {
        text
    };
    let ticks = "`".repeat(longest_run(&text, '`') + 1);
    // A span that starts or ends with a backtick needs a space to tell them apart (one
    // space each side is stripped when rendered).
    let pad = if text.starts_with('`') || text.ends_with('`') || text.starts_with(' ') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// `text` verbatim in a fenced block no line of it can close, each line indented by
/// `indent` (a list item's content is indented under its marker).
pub fn fenced(text: &str, indent: &str) -> String {
    let fence = "~".repeat((longest_run(text, '~') + 1).max(3));
    let mut out = format!("{indent}{fence}text\n");
    // Markdown ends a line at a lone `\r` too; each becomes a line of the fence here, so
    // none can put text outside it.
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    for line in text.trim_end().lines() {
        out.push_str(indent);
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(indent);
    out.push_str(&fence);
    out.push('\n');
    out
}

fn longest_run(text: &str, c: char) -> usize {
    text.split(|x| x != c)
        .map(|run| run.chars().count())
        .max()
        .unwrap_or(0)
}
