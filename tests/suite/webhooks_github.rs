//! `POST /webhooks/github` through the real router: every real example payload, and every
//! way a request can be wrong.

use crate::support;

use std::collections::BTreeMap;

use planwright::event::{
    Actor, Event, ForgeKind, InstallationAction, RepoEvent, RepoEventKind, ReviewState, Thread,
};
use planwright::ids::{CommentId, InstallationId, IssueNumber, PullNumber, RepoName};
use planwright::store::{deliveries, jobs};
use serde_json::Value;
use support::{GITHUB_SECRET, TestDb, TestServer, sign};

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("fixture has a string at {pointer}"))
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("fixture has an integer at {pointer}"))
}

fn repo(v: &Value) -> RepoName {
    RepoName::parse(str_at(v, "/repository/full_name")).unwrap()
}

fn actor(v: &Value, pointer: &str) -> Actor {
    let user = v.pointer(pointer).unwrap();
    Actor {
        login: str_at(user, "/login").to_owned(),
        id: int_at(user, "/id"),
        bot: str_at(user, "/type") == "Bot",
    }
}

fn repos(v: &Value, pointer: &str) -> Vec<RepoName> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|r| RepoName::parse(str_at(r, "/full_name")).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// What the payload says should be acted on, read straight from the JSON.
fn expected_events(event: &str, v: &Value) -> Vec<Event> {
    let action = v.get("action").and_then(Value::as_str);
    let installation = v
        .pointer("/installation/id")
        .and_then(Value::as_i64)
        .map(InstallationId);
    let in_repo = |kind| {
        vec![Event::Repository(RepoEvent {
            forge: ForgeKind::Github,
            repo: repo(v),
            installation,
            kind,
        })]
    };
    match (event, action) {
        ("ping", _) => vec![Event::Ping {
            hook_id: v.get("hook_id").and_then(Value::as_i64),
        }],
        ("issues", Some("labeled")) => in_repo(RepoEventKind::IssueLabeled {
            issue: IssueNumber(int_at(v, "/issue/number")),
            labels: vec![str_at(v, "/label/name").to_owned()],
            actor: actor(v, "/sender"),
        }),
        ("issues", Some("unlabeled")) => in_repo(RepoEventKind::IssueUnlabeled {
            issue: IssueNumber(int_at(v, "/issue/number")),
            labels: vec![str_at(v, "/label/name").to_owned()],
            actor: actor(v, "/sender"),
        }),
        ("issue_comment", Some("created")) => {
            let number = int_at(v, "/issue/number");
            let thread = if v.pointer("/issue/pull_request").is_some() {
                Thread::PullRequest(PullNumber(number))
            } else {
                Thread::Issue(IssueNumber(number))
            };
            in_repo(RepoEventKind::CommentCreated {
                thread,
                comment: CommentId(int_at(v, "/comment/id")),
                body: str_at(v, "/comment/body").to_owned(),
                author: actor(v, "/comment/user"),
            })
        }
        ("pull_request_review_comment", Some("created")) => {
            in_repo(RepoEventKind::CommentCreated {
                thread: Thread::PullRequest(PullNumber(int_at(v, "/pull_request/number"))),
                comment: CommentId(int_at(v, "/comment/id")),
                body: str_at(v, "/comment/body").to_owned(),
                author: actor(v, "/comment/user"),
            })
        }
        ("pull_request_review", Some("submitted")) => in_repo(RepoEventKind::ReviewSubmitted {
            pull: PullNumber(int_at(v, "/pull_request/number")),
            review: int_at(v, "/review/id"),
            state: ReviewState::parse(str_at(v, "/review/state")),
            body: v
                .pointer("/review/body")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            author: actor(v, "/review/user"),
        }),
        ("installation", Some(action)) => vec![Event::Installation {
            installation: installation.unwrap(),
            action: InstallationAction::from(action.to_owned()),
            account: str_at(v, "/installation/account/login").to_owned(),
            repositories: repos(v, "/repositories"),
        }],
        ("installation_repositories", Some(action)) => vec![Event::InstallationRepositories {
            installation: installation.unwrap(),
            action: action.to_owned(),
            added: repos(v, "/repositories_added"),
            removed: repos(v, "/repositories_removed"),
        }],
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn every_real_payload_is_accepted_and_acted_on_events_are_exact() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let dir = support::fixtures().join("github-webhooks");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() > 300,
        "expected the full set of examples in {}",
        dir.display()
    );
    let mut acted_on: BTreeMap<String, usize> = BTreeMap::new();
    for (n, path) in files.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let event = name.split('.').next().unwrap();
        let body = std::fs::read(path).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        let response = server
            .github(event, &format!("fixture-{n}"), &body)
            .send()
            .await
            .unwrap();
        let (status, got) = server.accepted(response, &name).await;
        let expected = expected_events(event, &value);
        assert_eq!(got, expected, "{name}");
        let want = if expected.is_empty() {
            "ignored"
        } else {
            "queued"
        };
        assert_eq!(status, want, "{name}");
        if !expected.is_empty() {
            *acted_on.entry(event.to_owned()).or_default() += 1;
        }
    }
    // Every acted-on kind was seen among the examples.
    for kind in [
        "ping",
        "issues",
        "issue_comment",
        "pull_request_review_comment",
        "pull_request_review",
        "installation",
        "installation_repositories",
    ] {
        assert!(
            acted_on.contains_key(kind),
            "no example of {kind} was acted on: {acted_on:?}"
        );
    }
    let listed = deliveries::list(&server.db, 1000).await.unwrap();
    assert_eq!(listed.len(), files.len());
    server.stop().await;
}

fn labeled() -> Vec<u8> {
    std::fs::read(support::fixtures().join("github-webhooks/issues.labeled.1.json")).unwrap()
}

async fn nothing_stored(server: &TestServer) {
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 0);
    assert!(jobs::list(&server.db, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_signatures_are_refused_and_nothing_is_stored() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let body = labeled();
    // No signature, a malformed one, the wrong secret, a body changed after signing.
    let cases = vec![
        (None, body.clone()),
        (Some("sha1=abcdef".to_owned()), body.clone()),
        (Some("sha256=zz".to_owned()), body.clone()),
        (Some(sign("wrong-secret", &body)), body.clone()),
        (
            Some(sign(GITHUB_SECRET, &body)),
            body[..body.len() / 2].to_vec(),
        ),
    ];
    for (signature, body) in cases {
        let response = server
            .github_signed("issues", "d-1", &body, signature.as_deref())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{signature:?}");
    }
    nothing_stored(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn any_of_the_rotated_secrets_is_accepted() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(
        &db,
        &[("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "new-secret,old-secret")],
    )
    .await;
    let body = labeled();
    for (n, secret) in ["old-secret", "new-secret"].iter().enumerate() {
        let response = server
            .github_signed(
                "issues",
                &format!("rotated-{n}"),
                &body,
                Some(&sign(secret, &body)),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{secret}");
    }
    // A secret no longer in the list.
    let response = server
        .github_signed(
            "issues",
            "rotated-out",
            &body,
            Some(&sign(GITHUB_SECRET, &body)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 2);
    server.stop().await;
}

#[tokio::test]
async fn oversize_bodies_get_413_and_nothing_is_stored() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_WEBHOOK_BODY_LIMIT", "16384")]).await;
    let mut value: Value = serde_json::from_slice(&labeled()).unwrap();
    value["issue"]["body"] = Value::String("x".repeat(32768));
    let body = serde_json::to_vec(&value).unwrap();
    let response = server.github("issues", "big", &body).send().await.unwrap();
    assert_eq!(response.status(), 413);
    // Just under the limit is fine.
    value["issue"]["body"] = Value::String(String::new());
    let small = serde_json::to_vec(&value).unwrap();
    assert!(small.len() < 16384);
    nothing_stored(&server).await;
    let response = server
        .github("issues", "small", &small)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    server.stop().await;
}

#[tokio::test]
async fn the_default_limit_takes_a_large_real_payload() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let mut value: Value = serde_json::from_slice(&labeled()).unwrap();
    value["issue"]["body"] = Value::String("y".repeat(5 * 1024 * 1024));
    let body = serde_json::to_vec(&value).unwrap();
    let response = server
        .github("issues", "large", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let listed = deliveries::list(&server.db, 10).await.unwrap();
    let stored = deliveries::payload(&server.db, listed[0].id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.len(), body.len());
    server.stop().await;
}

#[tokio::test]
async fn missing_headers_are_named() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let body = labeled();
    let response = server
        .client
        .post(format!("{}/webhooks/github", server.base))
        .header("x-github-delivery", "no-event")
        .header("x-hub-signature-256", sign(GITHUB_SECRET, &body))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("X-GitHub-Event"), "{text}");
    let response = server
        .client
        .post(format!("{}/webhooks/github", server.base))
        .header("x-github-event", "issues")
        .header("x-hub-signature-256", sign(GITHUB_SECRET, &body))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("X-GitHub-Delivery"));
    nothing_stored(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn a_signed_but_unreadable_body_is_stored_as_rejected_without_a_job() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let cases: [(&str, &[u8]); 3] = [
        ("issues", b"{\"action\": \"labeled\", "),
        ("issues", b"[\"not\", \"an object\"]"),
        // Valid JSON for an acted-on event, but without the issue it is about.
        ("issues", b"{\"action\":\"labeled\",\"repository\":{\"full_name\":\"a/b\"},\"label\":{\"name\":\"x\"}}"),
    ];
    for (n, (event, body)) in cases.iter().enumerate() {
        let response = server
            .github(event, &format!("bad-{n}"), body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{}", String::from_utf8_lossy(body));
    }
    let listed = deliveries::list(&server.db, 10).await.unwrap();
    assert_eq!(listed.len(), 3);
    for d in &listed {
        assert_eq!(d.status.as_str(), "rejected");
        assert!(d.error.as_deref().is_some_and(|e| !e.is_empty()));
        assert_eq!(d.jobs, 0);
    }
    assert!(jobs::list(&server.db, None).await.unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_redelivery_is_answered_and_does_nothing_else() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let body = labeled();
    let first = server
        .github("issues", "same-id", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 202);
    let again = server
        .github("issues", "same-id", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let answer: Value = again.json().await.unwrap();
    assert_eq!(answer["status"], "duplicate");
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 1);
    assert_eq!(jobs::list(&server.db, None).await.unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_duplicates_make_exactly_one_job() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let body = labeled();
    let mut sends = Vec::new();
    for _ in 0..24 {
        sends.push(server.github("issues", "raced", &body).send());
    }
    let mut accepted = 0;
    for response in futures_join(sends).await {
        let response = response.unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        if response.status() == 202 {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 1);
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 1);
    assert_eq!(jobs::list(&server.db, None).await.unwrap().len(), 1);
    server.stop().await;
}

/// Runs the futures concurrently, keeping their order.
async fn futures_join<F: std::future::Future + Send + 'static>(futures: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn form_encoded_deliveries_are_read() {
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let json = labeled();
    let body =
        serde_urlencoded::to_string([("payload", String::from_utf8(json).unwrap())]).unwrap();
    let response = server
        .client
        .post(format!("{}/webhooks/github", server.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-github-event", "issues")
        .header("x-github-delivery", "form-1")
        .header("x-hub-signature-256", sign(GITHUB_SECRET, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let job = &jobs::list(&server.db, None).await.unwrap()[0];
    let event: Event = serde_json::from_str(&job.payload).unwrap();
    assert!(matches!(
        event,
        Event::Repository(RepoEvent {
            kind: RepoEventKind::IssueLabeled { .. },
            ..
        })
    ));
    server.stop().await;
}

#[tokio::test]
async fn without_a_secret_github_webhooks_are_unavailable() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "")]).await;
    let response = server
        .github("issues", "x", &labeled())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    nothing_stored(&server).await;
    server.stop().await;
}

/// Starts a GitHub delivery of `length` bytes whose signature is wrong, and sends only
/// its first kilobyte: the connection holds a body read until the rest comes.
async fn slow_unsigned_upload(server: &TestServer, length: usize) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let addr = server.base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         x-github-event: issues\r\nx-github-delivery: slow\r\n\
         x-hub-signature-256: sha256={}\r\ncontent-length: {length}\r\n\r\n",
        "0".repeat(64)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; 1024]).await.unwrap();
    stream
}

/// The status code of the answer on a raw connection.
async fn status_of(stream: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(30), stream.read(&mut buffer))
                .await
                .expect("an answer within 30 s")
                .unwrap();
        assert!(read > 0, "the connection closed without an answer");
        answer.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Anyone can send GitHub bodies of the full limit with a made-up signature, slowly; each
/// is held in memory until it is complete. With WEBHOOK_BODY_READS of them being read, the
/// next is told to come back later instead of adding another buffer.
#[tokio::test]
async fn unsigned_bodies_read_at_once_are_bounded_and_the_next_is_told_to_retry() {
    use tokio::io::AsyncWriteExt as _;
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_WEBHOOK_BODY_READS", "2")]).await;
    let length = 1024 * 1024;
    let mut first = slow_unsigned_upload(&server, length).await;
    let second = slow_unsigned_upload(&server, length).await;

    // Until both slow bodies are being read, a probe is read and refused for its signature.
    let body = labeled();
    let refused = support::eventually("a third unsigned body is turned away", || async {
        let response = server
            .github_signed("issues", "probe", &body, Some(&sign("guess", &body)))
            .send()
            .await
            .ok()?;
        (response.status() == 503).then_some(response)
    })
    .await;
    assert_eq!(refused.headers()["retry-after"], "10");
    let answer: Value = refused.json().await.unwrap();
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("Cannot read the body now"),
        "{answer}"
    );
    // A delivery GitHub signed waits its turn like any other: nobody can tell it apart
    // before its body is read.
    let signed = server
        .github("issues", "signed", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 503);
    nothing_stored(&server).await;

    // Once a slow body is complete (and refused), its turn goes to the next delivery.
    first.write_all(&vec![b' '; length - 1024]).await.unwrap();
    assert_eq!(status_of(&mut first).await, 401);
    let signed = server
        .github("issues", "signed", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 202);
    assert_eq!(deliveries::count(&server.db).await.unwrap(), 1);
    // A sender that gives up frees its turn too (and does not hold up the shutdown).
    let third = slow_unsigned_upload(&server, length).await;
    let probe = || async {
        server
            .github_signed("issues", "probe", &body, Some(&sign("guess", &body)))
            .send()
            .await
            .ok()
            .map(|r| r.status())
    };
    support::eventually("the third slow body takes the free turn", || async {
        (probe().await? == 503).then_some(())
    })
    .await;
    drop(second);
    support::eventually("the turn of the abandoned body is free again", || async {
        (probe().await? == 401).then_some(())
    })
    .await;
    drop((first, third));
    server.stop().await;
}
