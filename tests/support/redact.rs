//! What varies from run to run in the texts planwright posts (ids, hashes, commit shas,
//! loopback ports, durations), replaced by a fixed word, so that an inline snapshot can
//! hold everything else exactly.

use std::sync::LazyLock;

use regex::Regex;

/// `(pattern, replacement)`, applied in order: longer hex runs before shorter ones.
static RULES: LazyLock<Vec<(Regex, &str)>> = LazyLock::new(|| {
    [
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[uuid]",
        ),
        (r"\b[0-9a-f]{64}\b", "[sha256]"),
        (r"\b[0-9a-f]{40}\b", "[sha]"),
        (r"\b[0-9a-f]{12}\b", "[hash]"),
        (r"http://127\.0\.0\.1:\d+", "http://[loopback]"),
        // Comment anchors: ids the fakes count up across the whole scenario.
        (r"#issuecomment-\d+", "#issuecomment-[id]"),
        (r"#note_\d+", "#note_[id]"),
        (r"\b\d+(\.\d+)? ?(ms|s)\b", "[duration]"),
    ]
    .into_iter()
    .map(|(pattern, word)| (Regex::new(pattern).unwrap(), word))
    .collect()
});

/// `text` with everything that varies between runs replaced.
pub fn redact(text: &str) -> String {
    RULES.iter().fold(text.to_owned(), |text, (pattern, word)| {
        pattern.replace_all(&text, *word).into_owned()
    })
}

#[test]
fn what_varies_is_replaced_and_the_rest_kept() {
    let text = "session 019ad0c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d at 6dcb09b5b57875f334f61aebed695e2e4193db5e, \
        sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 (9f86d081884c), \
        http://127.0.0.1:41234/x#issuecomment-1003 took 1.25 s and 80ms; #7 passed (#note_105)";
    assert_eq!(
        redact(text),
        "session [uuid] at [sha], sha256:[sha256] ([hash]), http://[loopback]/x#issuecomment-[id] \
         took [duration] and [duration]; #7 passed (#note_[id])"
    );
}
