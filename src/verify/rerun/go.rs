//! `go test`: `-run` with the failing top-level tests' names (a subtest runs with its
//! parent), and `-count=1` so the re-run is not answered from the test cache.

use super::words::{regex_literal, without};

pub(super) fn select(words: &[String], ids: &[&str]) -> Option<Vec<String>> {
    let test = words
        .windows(2)
        .position(|w| (w[0] == "go" || w[0].ends_with("/go")) && w[1] == "test")?
        + 1;
    let mut names: Vec<&str> = Vec::new();
    for id in ids {
        let top = id.split('/').next().unwrap_or(id);
        // A package's own failure (its id is the import path) names no test to run.
        let is_test = ["Test", "Example", "Fuzz"]
            .iter()
            .any(|p| top.starts_with(p))
            && top.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !is_test {
            return None;
        }
        if !names.contains(&top) {
            names.push(top);
        }
    }
    let pattern = names
        .iter()
        .map(|n| regex_literal(n))
        .collect::<Vec<_>>()
        .join("|");
    let mut out: Vec<String> = words[..=test].to_vec();
    out.push("-run".into());
    out.push(format!("^(?:{pattern})$"));
    out.push("-count=1".into());
    out.extend(without(
        &words[test + 1..],
        &["-run", "--run", "-count", "--count", "-skip", "--skip"],
    ));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::select;
    use super::super::tests::{HOSTILE, argv};

    #[test]
    fn go_runs_the_top_level_tests() {
        assert_eq!(
            select(
                "go test -v -run Old -count=3 ./...",
                &["TestParseLine/spaces", "TestParseLine", "TestRemove"]
            )
            .unwrap(),
            "go test -run '^(?:TestParseLine|TestRemove)$' -count=1 -v ./..."
        );
        assert_eq!(select("go test ./...", &["example.com/m/pkg"]), None);
        assert_eq!(select("go vet ./...", &["TestA"]), None);
        for id in HOSTILE {
            assert_eq!(select("go test ./...", &[id]), None, "{id}");
        }
        // Subtest names may hold anything: only the parent's name goes in.
        let line = select("go test", &["TestA/it's $(x) `y`"]).unwrap();
        assert_eq!(
            argv(&line),
            vec!["go", "test", "-run", "^(?:TestA)$", "-count=1"]
        );
    }
}
