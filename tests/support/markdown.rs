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

/// `md` with every line ending as CommonMark defines them (`\n`, `\r\n` and a lone `\r`,
/// as a forge reads them) written as `\n`: pulldown-cmark ends a line at a lone `\r` in
/// a paragraph but not inside a code block.
fn lines_as_a_forge_reads_them(md: &str) -> String {
    md.replace("\r\n", "\n").replace('\r', "\n")
}

/// The prose of the rendered markdown: its text outside code spans and code blocks, where
/// a mention pings and a heading or emphasis takes effect.
pub fn prose(md: &str) -> String {
    let md = lines_as_a_forge_reads_them(md);
    let mut out = String::new();
    let mut in_block = false;
    for event in Parser::new_ext(&md, Options::ENABLE_GFM | Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_block = true,
            Event::End(TagEnd::CodeBlock) => in_block = false,
            Event::Text(t) if !in_block => out.push_str(&t),
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            _ => {}
        }
    }
    out
}

/// Where the rendered markdown's links and images point, and its headings' text.
pub fn links_and_headings(md: &str) -> Vec<String> {
    let md = lines_as_a_forge_reads_them(md);
    let mut out = Vec::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(&md, Options::ENABLE_GFM | Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                out.push(dest_url.into_string());
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => out.extend(heading.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            _ => {}
        }
    }
    out
}

/// `shown` names `who` (a mention a hostile name tried to write), but only as text: no
/// mention of `@who` in its prose, and no link or heading naming it or the attacker's
/// `evil.example`.
pub fn assert_inert(shown: &str, who: &str) {
    assert!(shown.contains(who), "{shown}");
    let prose = prose(shown);
    assert!(!prose.contains(&format!("@{who}")), "{prose}\n\n{shown}");
    let live = links_and_headings(shown);
    assert!(
        !live
            .iter()
            .any(|l| l.contains("evil.example") || l.contains(who)),
        "{live:?}\n\n{shown}"
    );
}
