//! `POST /webhooks/gitlab` through the real router: GitLab's documented payloads, token
//! checks and deduplication.

use crate::support;

use planwright::event::{Actor, Event, ForgeKind, RepoEvent, RepoEventKind, Thread};
use planwright::ids::{CommentId, IssueNumber, PullNumber, RepoName};
use planwright::store::{deliveries, jobs};
use serde_json::Value;
use support::{TestDb, TestServer};

fn actor(v: &Value) -> Actor {
    Actor {
        login: v["user"]["username"].as_str().unwrap().to_owned(),
        id: v["user"]["id"].as_i64().unwrap(),
        bot: false,
    }
}

fn titles(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|l| {
            l.iter()
                .map(|x| x["title"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What the payload says should be acted on, read straight from the JSON.
fn expected_events(header: &str, v: &Value) -> Vec<Event> {
    let repo = || RepoName::parse(v["project"]["path_with_namespace"].as_str().unwrap()).unwrap();
    let one = |kind| {
        vec![Event::Repository(RepoEvent {
            forge: ForgeKind::Gitlab,
            repo: repo(),
            installation: None,
            kind,
        })]
    };
    let attrs = &v["object_attributes"];
    match header {
        "Issue Hook" => {
            let previous = titles(&v["changes"]["labels"]["previous"]);
            let added: Vec<String> = titles(&v["changes"]["labels"]["current"])
                .into_iter()
                .filter(|t| !previous.contains(t))
                .collect();
            if added.is_empty() {
                return Vec::new();
            }
            one(RepoEventKind::IssueLabeled {
                issue: IssueNumber(attrs["iid"].as_i64().unwrap()),
                labels: added,
                actor: actor(v),
            })
        }
        "Note Hook" => {
            let thread = match attrs["noteable_type"].as_str() {
                Some("Issue") => Thread::Issue(IssueNumber(v["issue"]["iid"].as_i64().unwrap())),
                Some("MergeRequest") => {
                    Thread::PullRequest(PullNumber(v["merge_request"]["iid"].as_i64().unwrap()))
                }
                _ => return Vec::new(),
            };
            one(RepoEventKind::CommentCreated {
                thread,
                comment: CommentId(attrs["id"].as_i64().unwrap()),
                body: attrs["note"].as_str().unwrap().to_owned(),
                author: actor(v),
            })
        }
        "Merge Request Hook" => one(RepoEventKind::MergeRequestChanged {
            pull: PullNumber(attrs["iid"].as_i64().unwrap()),
            action: attrs["action"].as_str().unwrap().to_owned(),
            state: attrs["state"].as_str().unwrap().to_owned(),
            actor: actor(v),
        }),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn every_documented_payload_is_accepted_and_acted_on_events_are_exact() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let dir = support::fixtures().join("gitlab-webhooks");
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let entries = index.as_array().unwrap();
    assert!(entries.len() >= 20);
    let mut acted_on = std::collections::BTreeSet::new();
    for entry in entries {
        let file = entry["file"].as_str().unwrap();
        let header = entry["x_gitlab_event"].as_str().unwrap();
        let body = std::fs::read(dir.join(file)).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        let response = server.gitlab(header, &body).send().await.unwrap();
        let (status, got) = server.accepted(response, file).await;
        let expected = expected_events(header, &value);
        assert_eq!(got, expected, "{file}");
        let want = if expected.is_empty() {
            "ignored"
        } else {
            "queued"
        };
        assert_eq!(status, want, "{file}");
        if !expected.is_empty() {
            acted_on.insert(file.to_owned());
        }
    }
    for file in [
        "issue-hook.1.json",
        "note-hook.issue.json",
        "note-hook.merge_request.json",
        "merge-request-hook.1.json",
    ] {
        assert!(
            acted_on.contains(file),
            "{file} was not acted on: {acted_on:?}"
        );
    }
    server.stop().await;
}

fn note() -> Vec<u8> {
    std::fs::read(support::fixtures().join("gitlab-webhooks/note-hook.issue.json")).unwrap()
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_and_nothing_is_stored() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let url = format!("{}/webhooks/gitlab", server.base);
    for token in [
        None,
        Some("nope"),
        Some("gitlab-test-toke"),
        Some("gitlab-test-token-"),
    ] {
        let mut req = server
            .client
            .post(&url)
            .header("x-gitlab-event", "Note Hook");
        if let Some(t) = token {
            req = req.header("x-gitlab-token", t);
        }
        let response = req.body(note()).send().await.unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
    }
    let response = server
        .client
        .post(&url)
        .header("x-gitlab-token", support::GITLAB_SECRET)
        .body(note())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("X-Gitlab-Event"));
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 0);
    server.stop().await;
}

#[tokio::test]
async fn retries_with_the_same_idempotency_key_make_one_job() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    for _ in 0..3 {
        let response = server
            .gitlab("Note Hook", &note())
            .header("idempotency-key", "retry-key-1")
            .header("x-gitlab-event-uuid", "uuid-changes-per-attempt")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }
    // Without an Idempotency-Key, the event UUID is the key.
    for _ in 0..2 {
        let response = server
            .gitlab("Note Hook", &note())
            .header("x-gitlab-event-uuid", "event-uuid-2")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 2);
    assert_eq!(jobs::list(&server.db, None).await.unwrap().len(), 2);
    // Without either, every request is a new delivery.
    for _ in 0..2 {
        server.gitlab("Note Hook", &note()).send().await.unwrap();
    }
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 4);
    server.stop().await;
}

#[tokio::test]
async fn an_unreadable_body_is_stored_as_rejected() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let response = server
        .gitlab("Issue Hook", b"{\"object_kind\": \"issue\", \"changes\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let listed = deliveries::list(&server.db, 10).await.unwrap();
    assert_eq!(listed[0].status.as_str(), "rejected");
    assert_eq!(listed[0].forge.as_str(), "gitlab");
    assert!(jobs::list(&server.db, None).await.unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_note_signed_with_another_projects_secret_is_refused() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(
        &db,
        &[
            ("PLANWRIGHT_GITLAB_WEBHOOK_SECRET", ""),
            (
                "PLANWRIGHT_GITLAB_WEBHOOK_SECRETS",
                "acme/tools=secret-of-tools, acme/widgets=secret-of-widgets",
            ),
        ],
    )
    .await;
    let on = |project: &str| {
        let mut v: Value = serde_json::from_slice(&note()).unwrap();
        v["project"]["path_with_namespace"] = Value::from(project);
        serde_json::to_vec(&v).unwrap()
    };
    let send = |token: &'static str, body: Vec<u8>| {
        server
            .client
            .post(format!("{}/webhooks/gitlab", server.base))
            .header("content-type", "application/json")
            .header("x-gitlab-event", "Note Hook")
            .header("x-gitlab-token", token)
            .body(body)
            .send()
    };
    // Whoever holds the tools project's secret writes a note "on" widgets.
    let forged = send("secret-of-tools", on("acme/widgets")).await.unwrap();
    assert_eq!(forged.status(), 401);
    let said = forged.text().await.unwrap();
    assert!(
        said.contains("not the webhook secret of the payload's project"),
        "{said}"
    );
    assert!(!said.contains("secret-of"), "{said}");
    // A body without a project cannot borrow one either.
    let mut bare: Value = serde_json::from_slice(&note()).unwrap();
    bare.as_object_mut().unwrap().remove("project");
    let bare = send("secret-of-tools", serde_json::to_vec(&bare).unwrap())
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 0);
    // Each project's own secret is accepted for it, whatever the path's case.
    for (token, project) in [
        ("secret-of-widgets", "acme/widgets"),
        ("secret-of-tools", "Acme/Tools"),
    ] {
        let response = send(token, on(project)).await.unwrap();
        let (status, events) = server.accepted(response, project).await;
        assert_eq!(status, "queued", "{project}");
        assert_eq!(events.len(), 1, "{project}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_global_secret_is_still_accepted_beside_project_secrets() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(
        &db,
        &[(
            "PLANWRIGHT_GITLAB_WEBHOOK_SECRETS",
            "acme/tools=secret-of-tools",
        )],
    )
    .await;
    let response = server.gitlab("Note Hook", &note()).send().await.unwrap();
    let (status, _) = server.accepted(response, "global secret").await;
    assert_eq!(status, "queued");
    server.stop().await;
}

#[tokio::test]
async fn a_payload_without_a_user_id_is_accepted_with_the_login_alone() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    // Older GitLab versions send the user without an id.
    let mut v: Value = serde_json::from_slice(&note()).unwrap();
    v["user"].as_object_mut().unwrap().remove("id");
    let login = v["user"]["username"].as_str().unwrap().to_owned();
    let body = serde_json::to_vec(&v).unwrap();
    let response = server.gitlab("Note Hook", &body).send().await.unwrap();
    let (status, events) = server.accepted(response, "a user without an id").await;
    assert_eq!(status, "queued");
    let [Event::Repository(RepoEvent { kind, .. })] = &events[..] else {
        panic!("one repository event expected: {events:?}");
    };
    let RepoEventKind::CommentCreated { author, .. } = kind else {
        panic!("a comment expected: {kind:?}");
    };
    assert_eq!(
        author,
        &Actor {
            login,
            id: 0,
            bot: false
        }
    );
    server.stop().await;
}
