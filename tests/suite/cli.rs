//! The `planwright` binary as an operator runs it.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{GITHUB_SECRET, listening_address, planwright_command, sign};

fn wait_for_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("serve did not stop within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn serve_starts_with_only_a_webhook_secret_lists_deliveries_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = planwright_command()
        .arg("serve")
        .current_dir(dir.path())
        .env("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
        // Port 0 so that parallel tests do not collide; everything else is the default.
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listening_address(&mut child);
    let client = reqwest::Client::new();
    let health = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = client
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert!(dir.path().join("data/planwright.db").exists());

    let body =
        std::fs::read(support::fixtures().join("github-webhooks/issue_comment.created.1.json"))
            .unwrap();
    let response = client
        .post(format!("http://{addr}/webhooks/github"))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "cli-delivery-1")
        .header("x-hub-signature-256", sign(GITHUB_SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);

    let out = planwright_command()
        .args(["deliveries", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["delivery_key"], "cli-delivery-1");
    assert_eq!(listed[0]["event"], "issue_comment");
    assert_eq!(listed[0]["action"], "created");
    assert_eq!(listed[0]["repo"], "codertocat/hello-world");
    assert_eq!(listed[0]["jobs"], 1);

    support::signal(child.id(), "TERM");
    let status = wait_for_exit(&mut child, Duration::from_secs(30));
    assert!(status.success(), "serve exited with {status}");
}

/// Requests are logged under a span naming their method and path, never their query: a
/// setup token sent in the address stays out of the log.
#[tokio::test]
async fn a_request_logs_its_path_and_not_the_setup_token_in_its_address() {
    const WRONG_TOKEN: &str = "not-the-setup-token-6b1f0e2c";
    let dir = tempfile::tempdir().unwrap();
    let mut child = planwright_command()
        .arg("serve")
        .current_dir(dir.path())
        .env("PLANWRIGHT_SETUP_TOKEN", "operator-setup-token-0c7d1e")
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("serve logs that it listens").unwrap();
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["fields"]["message"] == "listening"
        {
            break v["fields"]["addr"].as_str().unwrap().to_owned();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let refused = reqwest::get(format!("http://{addr}/?token={WRONG_TOKEN}"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let mut seen = Vec::new();
    let refusal = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no log of the refusal in:\n{}", seen.join("\n")));
        seen.push(line.clone());
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the setup token is wrong"))
        {
            break v;
        }
    };
    assert_eq!(refusal["span"]["name"], "request", "{refusal}");
    assert_eq!(refusal["span"]["method"], "GET", "{refusal}");
    assert_eq!(refusal["span"]["path"], "/", "{refusal}");
    support::signal(child.id(), "TERM");
    let status = wait_for_exit(&mut child, Duration::from_secs(30));
    assert!(status.success(), "serve exited with {status}");
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    for line in &seen {
        assert!(!line.contains(WRONG_TOKEN), "{line}");
    }
}

#[test]
fn bad_settings_are_named_and_exit_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = planwright_command()
        .arg("serve")
        .current_dir(dir.path())
        .env("PLANWRIGHT_WORKERS", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PLANWRIGHT_WORKERS") && stderr.contains("lots"),
        "{stderr}"
    );

    std::fs::write(
        dir.path().join("planwright.toml"),
        "lisen = \"0.0.0.0:1\"\n",
    )
    .unwrap();
    let out = planwright_command()
        .arg("migrate")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lisen"), "{stderr}");
}

#[tokio::test]
async fn migrate_creates_every_table_on_an_empty_database_and_can_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let url = support::empty_database_url(dir.path()).await;
    for _ in 0..2 {
        let out = planwright_command()
            .arg("migrate")
            .current_dir(dir.path())
            .env("PLANWRIGHT_DATABASE_URL", &url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = planwright::store::Db::connect(&url).await.unwrap();
    for table in [
        "deliveries",
        "jobs",
        "installations",
        "installation_repositories",
        "sessions",
        "contracts",
        "runs",
        "audit_log",
    ] {
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                .fetch_one(&db.pool)
                .await
                .unwrap_or_else(|e| panic!("table {table} exists: {e}"));
        assert_eq!(n, 0, "{table}");
    }
    let out = planwright_command()
        .args(["sessions", "--json"])
        .current_dir(dir.path())
        .env("PLANWRIGHT_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success());
    let sessions: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sessions, Value::Array(Vec::new()));
}

#[test]
fn sandbox_run_shows_what_an_executor_gets() {
    let dir = tempfile::tempdir().unwrap();
    let out = planwright_command()
        .args(["sandbox", "run", "--workspace"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "id -u; echo made > f; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1000\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("exit code 3"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f")).unwrap(),
        "made\n"
    );

    let out = planwright_command()
        .args(["sandbox", "run", "--allow", "crates.io", "--workspace"])
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Cannot use --allow without --network setup")
    );
}
