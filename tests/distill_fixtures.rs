//! One test per real test-runner log in `../shared/fixtures/test-logs/` (a new fixture is
//! covered by adding it): the report's counts equal the runner's own machine-readable
//! truth, its failing ids are exactly the truth's, and a large log's model rendering is at
//! least 20 times smaller than the log.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use planwright::distill::{self, render};
use serde::Deserialize;

#[derive(Deserialize)]
struct Truth {
    runner: String,
    passed: u64,
    failed: u64,
    skipped: u64,
    errors: u64,
    failing: Vec<String>,
}

fn fixtures() -> PathBuf {
    std::env::var_os("PLANWRIGHT_TEST_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"))
        .join("test-logs")
}

fn check(log: &Path, truth: &Path) -> Result<(), Failed> {
    let truth: Truth = serde_json::from_slice(&std::fs::read(truth)?)?;
    let bytes = std::fs::read(log)?;
    let report = distill::distill(&bytes[..], None, None)?;
    let mut problems = Vec::new();
    if report.runner != truth.runner {
        problems.push(format!(
            "runner: got {:?}, truth {:?}",
            report.runner, truth.runner
        ));
    }
    for (what, got, want) in [
        ("passed", report.passed, truth.passed),
        ("failed", report.failed, truth.failed),
        ("skipped", report.skipped, truth.skipped),
        ("errors", report.errors, truth.errors),
    ] {
        // A report that says its passed/skipped counts are estimates (the output does not
        // state them) must still account for every test that ran.
        let estimated = report.estimated_counts && (what == "passed" || what == "skipped");
        if got != want && !estimated {
            problems.push(format!("{what}: got {got}, truth {want}"));
        }
    }
    if report.estimated_counts && report.passed + report.skipped < truth.passed + truth.skipped {
        problems.push(format!(
            "estimated passed+skipped {} is below the truth's {}",
            report.passed + report.skipped,
            truth.passed + truth.skipped
        ));
    }
    let ids: Vec<&str> = report.failures.iter().map(|f| f.id.as_str()).collect();
    for id in &truth.failing {
        if !ids.contains(&id.as_str()) {
            problems.push(format!("missing failing id {id:?}"));
        }
    }
    for id in &ids {
        if !truth.failing.iter().any(|t| t == id) {
            problems.push(format!("failing id not in the truth: {id:?}"));
        }
    }
    if bytes.len() > 100 * 1024 {
        let compact = render::compact(&report);
        if compact.len() * 20 > bytes.len() {
            problems.push(format!(
                "model rendering is {} bytes for a {}-byte log (needs 20x smaller)",
                compact.len(),
                bytes.len()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

fn main() {
    let args = Arguments::from_args();
    let dir = fixtures();
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the test-log fixtures are at {}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{} can be listed: {e}", dir.display()));
    logs.retain(|p| p.extension().is_some_and(|x| x == "log"));
    logs.sort();
    assert!(!logs.is_empty(), "no .log fixtures in {}", dir.display());
    let trials = logs
        .into_iter()
        .map(|log| {
            let name = log
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let truth = log.with_extension("truth.json");
            Trial::test(name, move || check(&log, &truth))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
