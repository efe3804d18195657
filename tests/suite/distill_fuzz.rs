//! Property tests over every parser at once (as `distill` runs them): random bytes, real
//! log lines from all runners shuffled together, and real logs cut at random points must
//! never panic, and the report must stay consistent and bounded.

use crate::support;

use planwright::distill::{self, Format, MAX_FAILURES, MAX_MESSAGE, render};
use proptest::prelude::*;

fn all_log_lines() -> Vec<String> {
    let dir = support::fixtures().join("test-logs");
    let mut lines = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    paths.sort();
    for path in paths {
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

fn logs() -> Vec<Vec<u8>> {
    let dir = support::fixtures().join("test-logs");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

fn check(input: &[u8], format: Option<Format>) -> Result<(), TestCaseError> {
    let report = distill::distill(input, format, None).unwrap();
    prop_assert!(report.failures.len() <= MAX_FAILURES);
    prop_assert!(report.dropped_bytes <= input.len() as u64);
    prop_assert_eq!(report.input_bytes, input.len() as u64);
    for f in &report.failures {
        prop_assert!(f.message.chars().count() <= MAX_MESSAGE + 1);
    }
    let compact = render::compact(&report);
    let _ = render::markdown(&report);
    prop_assert!(
        compact.len() <= 64 * 1024,
        "compact rendering of {} bytes",
        compact.len()
    );
    Ok(())
}

const FORMATS: [Option<Format>; 13] = [
    None,
    Some(Format::Cargo),
    Some(Format::Nextest),
    Some(Format::Pytest),
    Some(Format::Unittest),
    Some(Format::Jest),
    Some(Format::Vitest),
    Some(Format::Node),
    Some(Format::Go),
    Some(Format::Maven),
    Some(Format::Junit),
    Some(Format::Tap),
    Some(Format::Generic),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..20_000), f in 0usize..13) {
        check(&bytes, FORMATS[f])?;
    }

    #[test]
    fn lines_of_every_runner_mixed(picks in prop::collection::vec(any::<prop::sample::Index>(), 0..600)) {
        let lines = all_log_lines();
        let text: Vec<&str> = picks.iter().map(|i| lines[i.index(lines.len())].as_str()).collect();
        check(text.join("\n").as_bytes(), None)?;
    }

    #[test]
    fn real_logs_cut_anywhere(which in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>(), f in 0usize..13) {
        let logs = logs();
        let log = &logs[which.index(logs.len())];
        let end = cut.index(log.len() + 1);
        check(&log[..end], FORMATS[f])?;
    }
}
