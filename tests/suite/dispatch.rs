//! From webhook to finished job with the real handlers: installation events keep the
//! installations table current, and every acted-on delivery's job completes.

use crate::support;

use planwright::event::ForgeKind;
use planwright::ids::InstallationId;
use planwright::server::Role;
use planwright::session::dispatch;
use planwright::store::jobs::JobState;
use planwright::store::{audit, installations, jobs};
use serde_json::Value;
use support::{TestDb, TestServer, eventually};

fn fixture(name: &str) -> (Vec<u8>, Value) {
    let body = std::fs::read(support::fixtures().join("github-webhooks").join(name)).unwrap();
    let value = serde_json::from_slice(&body).unwrap();
    (body, value)
}

async fn all_jobs_done(server: &TestServer) {
    eventually("every job to finish", || async {
        let all = jobs::list(&server.db, None).await.unwrap();
        all.iter().all(|j| j.state == JobState::Done).then_some(())
    })
    .await;
}

#[tokio::test]
async fn installation_events_keep_installations_and_their_repositories() {
    let db = TestDb::new().await;
    let server = TestServer::start(support::settings(&db, &[]), Role::All, dispatch::handler).await;

    let (body, created) = fixture("installation.created.1.json");
    let response = server
        .github("installation", "inst-1", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    all_jobs_done(&server).await;
    let id = InstallationId(created["installation"]["id"].as_i64().unwrap());
    let mut conn = server.db.pool.acquire().await.unwrap();
    let rows = installations::list(&mut conn).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].installation_id, id);
    assert_eq!(
        rows[0].account,
        created["installation"]["account"]["login"]
            .as_str()
            .unwrap()
    );
    assert_eq!(rows[0].state.as_str(), "active");
    let mut expected: Vec<String> = created["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["full_name"].as_str().unwrap().to_lowercase())
        .collect();
    expected.sort();
    assert_eq!(
        installations::repositories(&mut conn, ForgeKind::Github, id)
            .await
            .unwrap(),
        expected
    );

    // Removing repositories, then deleting the installation.
    let (_, mut removed) = fixture("installation_repositories.removed.1.json");
    removed["installation"]["id"] = Value::from(id.0);
    removed["repositories_removed"] = created["repositories"].clone();
    let body_removed = serde_json::to_vec(&removed).unwrap();
    let response = server
        .github("installation_repositories", "inst-2", &body_removed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    all_jobs_done(&server).await;
    assert!(
        installations::repositories(&mut conn, ForgeKind::Github, id)
            .await
            .unwrap()
            .is_empty()
    );

    let (_, mut deleted) = fixture("installation.deleted.1.json");
    deleted["installation"]["id"] = Value::from(id.0);
    let response = server
        .github(
            "installation",
            "inst-3",
            &serde_json::to_vec(&deleted).unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    all_jobs_done(&server).await;
    let rows = installations::list(&mut conn).await.unwrap();
    assert_eq!(rows[0].state.as_str(), "deleted");

    let trail = audit::list(&mut conn).await.unwrap();
    let actions: Vec<&str> = trail.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        vec!["installation.created", "installation.deleted"]
    );
    drop(conn);
    server.stop().await;
}

#[tokio::test]
async fn acted_on_deliveries_become_finished_jobs() {
    let db = TestDb::new().await;
    let server = TestServer::start(support::settings(&db, &[]), Role::All, dispatch::handler).await;
    for (n, (event, file)) in [
        ("issues", "issues.labeled.1.json"),
        ("issue_comment", "issue_comment.created.1.json"),
        (
            "pull_request_review",
            "pull_request_review.submitted.1.json",
        ),
        ("ping", "ping._.1.json"),
    ]
    .iter()
    .enumerate()
    {
        let (body, _) = fixture(file);
        let response = server
            .github(event, &format!("flow-{n}"), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{file}");
    }
    all_jobs_done(&server).await;
    let all = jobs::list(&server.db, None).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(
        all.iter()
            .all(|j| j.attempts == 1 && j.last_error.is_none())
    );
    server.stop().await;
}
