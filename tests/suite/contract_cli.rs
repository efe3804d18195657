//! `planwright contract validate`: what a maintainer or a script runs on a contract's JSON.

use crate::support;

use std::io::Write;
use std::process::Stdio;

use support::planwright_command;

fn contract() -> serde_json::Value {
    serde_json::json!({
        "summary": "Parsing a config with a trailing comma panics.",
        "diagnosis": {
            "hypothesis": "The tokenizer does not expect `]` after `,`.",
            "evidence": [{"path": "src/parse.rs", "lines": "40-52", "note": "no arm for `]`"}]
        },
        "change": {
            "goal": "Accept a trailing comma in arrays.",
            "files": [{"path": "src/parse.rs", "action": "modify", "why": "add the arm"}]
        },
        "verification": {"commands": ["cargo test parse"]},
        "routing": {"risk": "medium"}
    })
}

fn validate(json: &str) -> std::process::Output {
    let mut child = planwright_command()
        .args(["contract", "validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_valid_contract_passes() {
    let out = validate(&contract().to_string());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 file(s)") && stdout.contains("risk medium"),
        "{stdout}"
    );
}

#[test]
fn every_problem_is_listed_with_exit_1() {
    let mut c = contract();
    c["summary"] = "".into();
    c["change"]["files"][0]["path"] = "../outside".into();
    let out = validate(&c.to_string());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("- summary: must not be empty"), "{stderr}");
    assert!(
        stderr.contains("- change.files[0].path: must not leave"),
        "{stderr}"
    );

    let out = validate("{\"summary\": 3}");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid type"));
}

#[test]
fn allowed_changes_to_tests_are_checked_and_listed() {
    let mut c = contract();
    c["verification"]["test_changes"] = serde_json::json!([
        {"path": "./tests//parse.rs", "test": "old_shape", "kind": "remove", "why": "the old shape is gone"}
    ]);
    let out = validate(&c.to_string());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("allows remove in tests/parse.rs old_shape: the old shape is gone"),
        "{stdout}"
    );

    c["verification"]["test_changes"] = serde_json::json!([
        {"path": "./", "kind": "skip", "why": " "},
        {"path": "tests/parse.rs", "test": "", "kind": "weaken", "why": "x\u{202E}y"}
    ]);
    let out = validate(&c.to_string());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for problem in [
        "- verification.test_changes[0].path: must name a file or folder",
        "- verification.test_changes[0].why: must not be empty",
        "- verification.test_changes[1].test: must not be empty",
        "- verification.test_changes[1].why: contains an invisible",
    ] {
        assert!(stderr.contains(problem), "{problem}: {stderr}");
    }

    c["verification"]["test_changes"] =
        serde_json::json!([{"path": "tests/parse.rs", "kind": "disable", "why": "flaky"}]);
    let out = validate(&c.to_string());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown variant `disable`") && stderr.contains("`skip`"),
        "{stderr}"
    );
}

#[test]
fn an_unreadable_file_is_exit_2() {
    let out = planwright_command()
        .args(["contract", "validate", "/nonexistent/contract.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Could not read /nonexistent/contract.json")
    );
}

#[test]
fn a_bidi_override_in_a_path_or_command_is_refused() {
    // Shown in a comment, `src/\u{202E}sr.bat` reads as `src/tab.rs`.
    let mut c = contract();
    c["change"]["files"][0]["path"] = "src/\u{202E}sr.bat".into();
    c["verification"]["commands"][0] = "cargo test \u{2066}parse\u{2069}".into();
    let out = validate(&c.to_string());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "- change.files[0].path: contains an invisible or direction-changing character (U+202E)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("- verification.commands[0]: contains an invisible"),
        "{stderr}"
    );
}

fn diff(old: &serde_json::Value, new: &serde_json::Value) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("v1.json"), dir.path().join("v2.json"));
    std::fs::write(&a, old.to_string()).unwrap();
    std::fs::write(&b, new.to_string()).unwrap();
    planwright_command()
        .args(["contract", "diff"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap()
}

#[test]
fn diff_says_what_a_revision_decides_differently() {
    let v1 = contract();
    let mut v2 = contract();
    v2["change"]["files"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"path": "tests/parse.rs", "action": "create", "why": "a test"}));
    v2["routing"]["max_attempts"] = 2.into();
    let out = diff(&v1, &v2);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Files:\n  + tests/parse.rs (create): a test\nRouting and budget:\n  ~ max attempts: not set → 2\n"
    );
    let same = diff(&v1, &v1);
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert_eq!(
        String::from_utf8_lossy(&same.stdout),
        "no change in what the contract decides\n"
    );
    let mut broken = contract();
    broken["summary"] = "".into();
    let bad = diff(&v1, &broken);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("summary: must not be empty"),
        "{bad:?}"
    );
}
