//! `planwright distill` as scripts and CI use it: the JSON interface, markdown, standard
//! input, unknown and hostile input, and memory that stays bounded on a huge stream.

use crate::support;

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;
use support::planwright_command;

fn fixture(name: &str) -> std::path::PathBuf {
    support::fixtures().join("test-logs").join(name)
}

#[test]
fn json_is_the_stable_interface() {
    let out = planwright_command()
        .args(["distill", "--json"])
        .arg(fixture("cargo_test_no_fail_fast_multi.log"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "runner",
        "passed",
        "failed",
        "skipped",
        "errors",
        "failures",
        "dropped_bytes",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let truth: Value = serde_json::from_slice(
        &std::fs::read(fixture("cargo_test_no_fail_fast_multi.truth.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(v["failed"], truth["failed"]);
    let failure = &v["failures"][0];
    for key in ["id", "message", "location"] {
        assert!(
            failure.get(key).is_some(),
            "failure without {key}: {failure}"
        );
    }
}

#[test]
fn markdown_and_standard_input() {
    let log = std::fs::read(fixture("pytest_q_mixed.log")).unwrap();
    let mut child = planwright_command()
        .args(["distill", "--markdown", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&log).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(
        md.contains("| passed | failed | skipped | errors |"),
        "{md}"
    );
    assert!(md.contains("<details>"), "{md}");
}

#[test]
fn unknown_and_binary_input_falls_back_to_the_generic_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("noise.bin");
    let mut bytes: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    bytes.extend_from_slice(b"\nfatal: could not read from remote repository\n");
    std::fs::write(&path, &bytes).unwrap();
    let out = planwright_command()
        .args(["distill", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runner"], "generic");
    assert!(v["dropped_bytes"].as_u64().unwrap() > 0);
    let out = planwright_command()
        .arg("distill")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fatal: could not read from remote repository"),
        "{text}"
    );
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = planwright_command()
        .args(["distill", "/nonexistent/run.log"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/run.log"));
}

/// 96 MiB through a pipe: the child's peak memory (read from /proc while it runs) stays
/// small and does not grow with the input.
#[test]
fn a_huge_stream_is_distilled_in_bounded_memory() {
    let mut child = planwright_command()
        .args(["distill", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    // Passing and failing tests, with a line that reads like an error every few lines:
    // every kind of line a parser or the compressor might be tempted to keep.
    let chunk: String = (0..1000)
        .map(|i| match i % 5 {
            0 => format!("test module_{i}::case ... FAILED\n"),
            1 => format!("error: something failed in step {i}\n"),
            _ => format!("test module_{i}::case ... ok\n"),
        })
        .collect();
    let target: usize = 96 * 1024 * 1024;
    let mut sent = 0;
    let mut peak_kib = 0u64;
    while sent < target {
        stdin.write_all(chunk.as_bytes()).unwrap();
        sent += chunk.len();
        if sent % (16 * 1024 * 1024) < chunk.len() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            if let Some(kib) = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["input_bytes"].as_u64().unwrap(), sent as u64);
    assert!(peak_kib > 0, "the child's memory could be read");
    assert!(
        peak_kib < 48 * 1024,
        "peak RSS {peak_kib} KiB for a {sent}-byte stream"
    );
}
