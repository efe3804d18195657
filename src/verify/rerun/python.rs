//! `pytest` (node ids as arguments, in place of the paths the command named) and
//! `python -m unittest` (dotted ids as arguments).

use super::words::{option_like, options_only, program_at};

/// pytest's options that take a value as the next word.
const PYTEST_VALUES: &[&str] = &[
    "-k",
    "-m",
    "-p",
    "-c",
    "-o",
    "-W",
    "-n",
    "-r",
    "--rootdir",
    "--confcutdir",
    "--basetemp",
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "--junitxml",
    "--junit-xml",
    "--tb",
    "--maxfail",
    "--durations",
    "--log-level",
    "--cov",
    "--cov-report",
    "--color",
    "--import-mode",
    "--capture",
    "--override-ini",
    "--dist",
    "--numprocesses",
];

pub(super) fn select(words: &[String], ids: &[&str]) -> Option<Vec<String>> {
    if ids.iter().any(|id| option_like(id)) {
        return None;
    }
    let module = words.windows(2).position(|w| w[0] == "-m").map(|i| i + 1);
    let pytest = match module {
        Some(i) if words[i] == "pytest" || words[i] == "py.test" => Some(i),
        Some(i) if words[i] == "unittest" => return unittest(words, i, ids),
        _ => program_at(words, "pytest")
            .or_else(|| program_at(words, "py.test"))
            .or_else(|| program_at(words, "pytest-3")),
    }?;
    // Paths run beside node ids, not instead: they go.
    let mut out: Vec<String> = words[..=pytest].to_vec();
    out.extend(options_only(&words[pytest + 1..], PYTEST_VALUES));
    out.extend(ids.iter().map(|id| (*id).to_owned()));
    Some(out)
}

/// `python -m unittest [options] ID…`; `discover` with a start folder or pattern names
/// tests relative to that folder, which the command line cannot, so it runs whole.
fn unittest(words: &[String], at: usize, ids: &[&str]) -> Option<Vec<String>> {
    let args = &words[at + 1..];
    if let Some(d) = args.iter().position(|a| a == "discover")
        && args.len() > d + 1
    {
        return None;
    }
    let mut out: Vec<String> = words[..=at].to_vec();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-k" {
            // A pattern narrows; the ids are narrower still.
            i += 2;
            continue;
        }
        if a.starts_with('-') && !a.starts_with("-k") {
            out.push(a.clone());
        }
        i += 1;
    }
    out.extend(ids.iter().map(|id| (*id).to_owned()));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::select;
    use super::super::tests::{HOSTILE, argv};

    #[test]
    fn pytest_gets_node_ids_instead_of_paths() {
        assert_eq!(
            select(
                "python3 -m pytest -q tests/ -k fast --tb short",
                &["tests/test_a.py::test_x[1-2]", "tests/test_b.py::T::test_y"]
            )
            .unwrap(),
            "python3 -m pytest -q -k fast --tb short 'tests/test_a.py::test_x[1-2]' tests/test_b.py::T::test_y"
        );
        assert_eq!(
            select("pytest", &["t.py::test_a"]).unwrap(),
            "pytest t.py::test_a"
        );
        assert_eq!(select("pytest", &["-p"]), None);
        for id in HOSTILE {
            let line = select("pytest -v", &[id]).unwrap();
            assert_eq!(argv(&line), vec!["pytest", "-v", id], "{line}");
        }
    }

    #[test]
    fn unittest_gets_dotted_ids() {
        assert_eq!(
            select("python3 -m unittest -v", &["test_calc.TestCalc.test_add"]).unwrap(),
            "python3 -m unittest -v test_calc.TestCalc.test_add"
        );
        assert_eq!(
            select(
                "python -m unittest -k add tests.test_a",
                &["tests.test_a.T.test_b"]
            )
            .unwrap(),
            "python -m unittest tests.test_a.T.test_b"
        );
        assert_eq!(
            select("python3 -m unittest discover", &["a.B.test_c"]).unwrap(),
            "python3 -m unittest a.B.test_c"
        );
        assert_eq!(
            select("python3 -m unittest discover -s tests", &["a.B.test_c"]),
            None
        );
        for id in HOSTILE {
            let line = select("python3 -m unittest", &[id]).unwrap();
            assert_eq!(argv(&line), vec!["python3", "-m", "unittest", id], "{line}");
        }
    }
}
