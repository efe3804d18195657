//! Text cut to a size: the one clipper every part of planwright shortens a message,
//! a finding or a line with, so a cut reads the same everywhere (a leaf).

/// Cuts `text` to at most `max` characters, marking the cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn a_cut_falls_between_characters_and_is_marked() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("ééééé", 2), "éé…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
