//! `cargo test` (libtest filters after `--`, matched with `--exact`) and `cargo nextest
//! run` (a filterset of exact test names, per test binary when the id names one).

use super::words::{option_like, options_only, program_at, without};

/// cargo's options before `--` that take a value as the next word.
const CARGO_VALUES: &[&str] = &[
    "-p",
    "--package",
    "--exclude",
    "-F",
    "--features",
    "--test",
    "--bench",
    "--bin",
    "--example",
    "--target",
    "--target-dir",
    "--manifest-path",
    "-j",
    "--jobs",
    "--profile",
    "--color",
    "--message-format",
    "--config",
    "-Z",
];

/// libtest's options that take a value as the next word.
const LIBTEST_VALUES: &[&str] = &[
    "--skip",
    "--test-threads",
    "--format",
    "--color",
    "-Z",
    "--logfile",
    "--shuffle-seed",
];

/// nextest's options before `--` that take a value as the next word.
const NEXTEST_VALUES: &[&str] = &[
    "-p",
    "--package",
    "--exclude",
    "-F",
    "--features",
    "--test",
    "--bench",
    "--bin",
    "--example",
    "--target",
    "--target-dir",
    "--manifest-path",
    "-j",
    "--test-threads",
    "-P",
    "--profile",
    "--cargo-profile",
    "--color",
    "--message-format",
    "--config",
    "-Z",
    "--retries",
    "--partition",
    "--status-level",
    "--final-status-level",
    "--failure-output",
    "--success-output",
    "--run-ignored",
    "--max-fail",
    "--tool-config-file",
    "--archive-file",
    "--workspace-remap",
    "--no-tests",
];

pub(super) fn select(words: &[String], ids: &[&str]) -> Option<Vec<String>> {
    let cargo = program_at(words, "cargo")?;
    let sub = words
        .iter()
        .enumerate()
        .skip(cargo + 1)
        .find(|(_, w)| !w.starts_with('-') && !w.starts_with('+'))?
        .0;
    match words[sub].as_str() {
        "test" | "t" => cargo_test(words, sub, ids),
        "nextest" if words.get(sub + 1).is_some_and(|w| w == "run" || w == "r") => {
            nextest(words, sub + 1, ids)
        }
        _ => None,
    }
}

/// `cargo test [options] -- [libtest options] --exact ID…`: the test name filter cargo
/// takes and libtest's own filters go, so only the ids match.
fn cargo_test(words: &[String], sub: usize, ids: &[&str]) -> Option<Vec<String>> {
    if ids.iter().any(|id| option_like(id)) {
        return None;
    }
    let (before, after) = split_at_dashes(&words[sub + 1..]);
    let mut out: Vec<String> = words[..=sub].to_vec();
    out.extend(options_only(before, CARGO_VALUES));
    out.push("--".into());
    out.extend(
        options_only(after, LIBTEST_VALUES)
            .into_iter()
            .filter(|a| a != "--exact"),
    );
    out.push("--exact".into());
    out.extend(ids.iter().map(|id| (*id).to_owned()));
    Some(out)
}

/// `cargo nextest run [options] -E 'test(=ID) | …'`, with the name filters and
/// filtersets the command had taken out.
fn nextest(words: &[String], run: usize, ids: &[&str]) -> Option<Vec<String>> {
    let (before, after) = split_at_dashes(&words[run + 1..]);
    let filters = ["-E", "--filterset", "--filter-expr"];
    let mut out: Vec<String> = words[..=run].to_vec();
    out.extend(without(&options_only(before, NEXTEST_VALUES), &filters));
    let expression = ids
        .iter()
        .map(|id| match id.split_once(' ') {
            // nextest's ids are `binary-id test::path`.
            Some((binary, test)) if !binary.is_empty() && !test.contains(' ') => format!(
                "(binary_id(={}) & test(={}))",
                matcher(binary),
                matcher(test)
            ),
            _ => format!("test(={})", matcher(id)),
        })
        .collect::<Vec<_>>()
        .join(" | ");
    out.push("-E".into());
    out.push(expression);
    let rest = options_only(after, LIBTEST_VALUES);
    if !rest.is_empty() {
        out.push("--".into());
        out.extend(rest);
    }
    Some(out)
}

/// A filterset matcher's text: `\`, `(`, `)` and `,` escaped, as nextest reads them.
fn matcher(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '(' | ')' | ',') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn split_at_dashes(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::select;
    use super::super::tests::{HOSTILE, argv};

    #[test]
    fn cargo_test_runs_the_ids_exactly() {
        assert_eq!(
            select("cargo test", &["parse::tests::empty"]).unwrap(),
            "cargo test -- --exact parse::tests::empty"
        );
        // A name filter is dropped (libtest ORs filters); options and their values stay.
        assert_eq!(
            select(
                "cargo test -p core --features x parse -- --nocapture --skip slow filt",
                &["a::b", "c::d"]
            )
            .unwrap(),
            "cargo test -p core --features x -- --nocapture --skip slow --exact a::b c::d"
        );
        assert_eq!(
            select("cargo +nightly --locked t -- --exact", &["x"]).unwrap(),
            "cargo +nightly --locked t -- --exact x"
        );
        // Not tests to select from.
        assert_eq!(select("cargo build", &["x"]), None);
        assert_eq!(select("cargo test", &["--ignored"]), None);
    }

    #[test]
    fn hostile_cargo_ids_stay_single_words() {
        for id in HOSTILE {
            let line = select("cargo test", &[id]).unwrap();
            assert_eq!(
                argv(&line),
                vec!["cargo", "test", "--", "--exact", id],
                "{line}"
            );
        }
    }

    #[test]
    fn nextest_takes_a_filterset_of_exact_names() {
        assert_eq!(
            select(
                "cargo nextest run --workspace -E 'test(slow)' filt",
                &["textkit parse::tests::a", "plain"]
            )
            .unwrap(),
            "cargo nextest run --workspace -E '(binary_id(=textkit) & test(=parse::tests::a)) | test(=plain)'"
        );
        let line = select("cargo nextest run", &["bin::x t(1,2)\\"]).unwrap();
        assert_eq!(
            argv(&line),
            vec![
                "cargo",
                "nextest",
                "run",
                "-E",
                "(binary_id(=bin::x) & test(=t\\(1\\,2\\)\\\\))"
            ]
        );
        for id in HOSTILE {
            let line = select("cargo nextest run", &[id]).unwrap();
            assert_eq!(argv(&line).len(), 5, "{line}");
        }
    }
}
