//! Code spans and fences for the report's markdown, that no text they hold can break.

/// `text` as inline code that survives a table cell: pipes escaped, no line breaks (a
/// file name may hold carriage returns, which end a line for markdown too), and fenced by
/// more backticks than it holds.
pub(super) fn code(text: &str) -> String {
    crate::markdown::code(text, true)
}

/// A fence for a code block holding `text`: more backticks than any run in it, and at
/// least three.
pub(super) fn fence(text: &str) -> String {
    "`".repeat((longest_backtick_run(text) + 1).max(3))
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}
