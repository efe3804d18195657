//! `jest` and `vitest` (`-t`, a pattern over a test's full name: its describe blocks and
//! its own name, joined by spaces) and `node --test` (`--test-name-pattern`). The ids
//! become literal patterns; the files the command named stay, since they only narrow.

use super::words::{program_at, regex_literal, without};

pub(super) fn select(words: &[String], ids: &[&str]) -> Option<Vec<String>> {
    if let Some(at) = program_at(words, "vitest") {
        return Some(named(words, at, ids, " > "));
    }
    if let Some(at) = program_at(words, "jest") {
        return Some(named(words, at, ids, " › "));
    }
    let node = words
        .first()
        .filter(|w| *w == "node" || w.ends_with("/node"))?;
    let test = words.iter().position(|w| w == "--test")?;
    let mut out: Vec<String> = vec![node.clone()];
    out.extend(without(&words[1..=test], &["--test-name-pattern"]));
    // Node reads each pattern against a test's name; its ids are those names.
    for id in ids {
        out.push(format!("--test-name-pattern=(?:^| ){}$", regex_literal(id)));
    }
    out.extend(without(&words[test + 1..], &["--test-name-pattern"]));
    Some(out)
}

/// The runner's words with `-t` set to a pattern matching each id's full name exactly
/// (`separator` joins its describe blocks in the id).
fn named(words: &[String], at: usize, ids: &[&str], separator: &str) -> Vec<String> {
    let names: Vec<String> = ids
        .iter()
        .map(|id| regex_literal(&id.split(separator).collect::<Vec<_>>().join(" ")))
        .collect();
    let mut out: Vec<String> = words[..=at].to_vec();
    out.extend(without(
        &words[at + 1..],
        &["-t", "--testNamePattern", "--test-name-pattern"],
    ));
    out.push("-t".into());
    // A test at the top of a vitest file has the file's nameless suite before it.
    out.push(format!("(?:^| )(?:{})$", names.join("|")));
    out
}

#[cfg(test)]
mod tests {
    use super::super::select;
    use super::super::tests::{HOSTILE, argv};

    #[test]
    fn jest_and_vitest_take_a_full_name_pattern() {
        assert_eq!(
            select(
                "npx jest --ci src/cart -t old",
                &["applyCoupon › edge cases › rounds (cents)", "subtotal"]
            )
            .unwrap(),
            "npx jest --ci src/cart -t '(?:^| )(?:applyCoupon edge cases rounds \\(cents\\)|subtotal)$'"
        );
        assert_eq!(
            select("vitest run", &["subtotal > handles 1.5"]).unwrap(),
            "vitest run -t '(?:^| )(?:subtotal handles 1\\.5)$'"
        );
        for id in HOSTILE {
            let line = select("jest", &[id]).unwrap();
            let words = argv(&line);
            assert_eq!(words.len(), 3, "{line}");
            let pattern = regex::Regex::new(&words[2]).unwrap();
            assert!(pattern.is_match(id), "{line}");
            assert!(!pattern.is_match(&format!("{id}x")), "{line}");
        }
    }

    #[test]
    fn node_takes_one_name_pattern_per_id() {
        assert_eq!(
            select(
                "node --test --test-name-pattern=old test/",
                &["slugify(\"x\")", "b"]
            )
            .unwrap(),
            "node --test '--test-name-pattern=(?:^| )slugify\\(\"x\"\\)$' '--test-name-pattern=(?:^| )b$' test/"
        );
        for id in HOSTILE {
            let line = select("node --test", &[id]).unwrap();
            assert_eq!(argv(&line).len(), 3, "{line}");
        }
        assert_eq!(select("node script.js", &["a"]), None);
    }
}
