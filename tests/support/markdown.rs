//! Markdown read the way a forge renders it, to check what a reader actually sees.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The text a reader of the rendered markdown sees: text and code, not link destinations
/// or titles, HTML, math or image descriptions, with line breaks as spaces.
pub fn visible_text(md: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_MATH
        | Options::ENABLE_GFM;
    let mut out = String::new();
    let mut hidden = 0;
    for event in Parser::new_ext(md, options) {
        match event {
            Event::Start(Tag::Image { .. } | Tag::FootnoteDefinition(_)) => hidden += 1,
            Event::End(TagEnd::Image | TagEnd::FootnoteDefinition) => hidden -= 1,
            Event::Text(t) | Event::Code(t) if hidden == 0 => out.push_str(&t),
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            _ => {}
        }
    }
    out
}
