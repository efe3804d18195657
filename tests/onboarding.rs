//! Registering the GitHub App through the manifest flow against the fake GitHub, with the
//! browser's part played by hand: the page's form is posted to the fake, whose redirect
//! is followed back with the page's cookie. Then the status page, which must not leak.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};

use planwright::app::App;
use planwright::event::Forge;
use planwright::ids::{InstallationId, RepoName, SessionId};
use planwright::server::{Role, default_handlers};
use planwright::store::sessions::{self, NewSession};
use serde_json::Value;
use support::fake_forge::{APP_ID, APP_SLUG, FakeGithub, app_key};
use support::{GITHUB_SECRET, TestDb, TestServer, eventually, sign};

const PUBLIC_URL: &str = "https://pw.example.org";

/// Settings with no GitHub App and no GitHub webhook secret, GitHub being the fake.
fn unconfigured(db: &TestDb, github: &FakeGithub) -> planwright::config::Settings {
    support::settings(
        db,
        &[
            ("PLANWRIGHT_PUBLIC_URL", PUBLIC_URL),
            ("PLANWRIGHT_GITHUB_API_URL", github.url.as_str()),
            ("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", ""),
        ],
    )
}

/// A browser without redirects or a cookie jar: each step is taken by the test.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The value of the first `name="` attribute after `after` in `page`.
fn attribute(page: &str, after: &str, name: &str) -> String {
    let start = page
        .find(after)
        .unwrap_or_else(|| panic!("no {after} in the page:\n{page}"));
    let rest = &page[start..];
    let open = format!("{name}=\"");
    let at = rest.find(&open).unwrap() + open.len();
    let end = rest[at..].find('"').unwrap();
    unescape(&rest[at..at + end])
}

/// What the registration page offers: the form's target, the manifest it posts, and the
/// state cookie it set.
struct Offer {
    action: String,
    manifest: Value,
    cookie: String,
}

async fn offer(server: &TestServer, query: &str) -> Offer {
    offer_at(&server.base, query).await
}

async fn offer_at(base: &str, query: &str) -> Offer {
    let response = browser()
        .get(format!("{base}/{query}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let set_cookie = response
        .headers()
        .get("set-cookie")
        .expect("the page sets the state cookie")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let page = response.text().await.unwrap();
    assert!(page.contains("Register GitHub App"), "{page}");
    let action = attribute(&page, "<form", "action");
    let manifest = attribute(&page, "name=\"manifest\"", "value");
    Offer {
        action,
        manifest: serde_json::from_str(&manifest).unwrap(),
        cookie,
    }
}

fn state_of(action: &str) -> String {
    action
        .split_once("?state=")
        .map(|(_, s)| s.to_owned())
        .unwrap_or_else(|| panic!("no state in {action}"))
}

/// Posts the manifest to the fake GitHub as the browser's form would, and returns the
/// path and query GitHub sends the browser back to under PUBLIC_URL.
async fn submit(offer: &Offer) -> String {
    let location = submit_to_github(offer).await;
    location
        .strip_prefix(PUBLIC_URL)
        .unwrap_or_else(|| panic!("GitHub sends the browser back to PUBLIC_URL: {location}"))
        .to_owned()
}

/// Where GitHub sends the browser after taking the manifest.
async fn submit_to_github(offer: &Offer) -> String {
    let response = browser()
        .post(&offer.action)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("manifest", offer.manifest.to_string())]).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302, "{:?}", response.text().await);
    response.headers()["location"].to_str().unwrap().to_owned()
}

fn replace_query(path: &str, name: &str, value: &str) -> String {
    let (base, query) = path.split_once('?').unwrap();
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

fn installation_created() -> Vec<u8> {
    std::fs::read(
        support::fixtures()
            .join("github-webhooks")
            .join("installation.created.1.json"),
    )
    .unwrap()
}

#[tokio::test]
async fn before_configuration_the_page_offers_the_manifest_with_this_deployments_urls() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let server = TestServer::start(unconfigured(&db, &github), Role::Web, |_| {
        planwright::worker::Handlers::default()
    })
    .await;

    let personal = offer(&server, "").await;
    let state = state_of(&personal.action);
    assert_eq!(
        personal.action,
        format!("{}/settings/apps/new?state={state}", github.url)
    );
    assert_eq!(state.len(), 64);
    assert_eq!(personal.cookie, format!("planwright_setup_state={state}"));
    let m = &personal.manifest;
    assert_eq!(m["url"], PUBLIC_URL);
    assert_eq!(
        m["hook_attributes"]["url"],
        format!("{PUBLIC_URL}/webhooks/github")
    );
    assert_eq!(
        m["redirect_url"],
        format!("{PUBLIC_URL}/setup/github/callback")
    );
    assert_eq!(m["public"], false);
    for (permission, access) in [
        ("issues", "write"),
        ("pull_requests", "write"),
        ("contents", "write"),
        ("checks", "write"),
        ("metadata", "read"),
        ("members", "read"),
    ] {
        assert_eq!(m["default_permissions"][permission], access, "{permission}");
    }
    let events: Vec<&str> = m["default_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "issues",
            "issue_comment",
            "pull_request_review",
            "pull_request_review_comment"
        ]
    );

    // Every page has its own state.
    let again = offer(&server, "").await;
    assert_ne!(state_of(&again.action), state);

    let org = offer(&server, "?org=acme-labs").await;
    assert!(
        org.action.starts_with(&format!(
            "{}/organizations/acme-labs/settings/apps/new?state=",
            github.url
        )),
        "{}",
        org.action
    );
    let refused = browser()
        .get(format!("{}/?org=acme/../evil", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("Cannot register"));

    // No secret yet: webhooks are refused as unconfigured.
    let body = installation_created();
    let response = server
        .github_signed(
            "installation",
            "d-0",
            &body,
            Some(&sign(GITHUB_SECRET, &body)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    server.stop().await;
}

#[tokio::test]
async fn the_manifest_flow_stores_the_app_and_planwright_uses_it_without_a_restart() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let repo = "Codertocat/Hello-World";
    github.add_repo(repo, "main", &"a".repeat(40));
    github.add_installation(957387, &[repo]);
    let app_slot: Arc<Mutex<Option<Arc<App>>>> = Arc::default();
    let slot = app_slot.clone();
    let server = TestServer::start(unconfigured(&db, &github), Role::All, move |app| {
        *slot.lock().unwrap() = Some(app.clone());
        default_handlers(app)
    })
    .await;
    let app = app_slot.lock().unwrap().clone().unwrap();
    assert!(!app.forges.configured(Forge::Github));
    let credentials = db.dir.path().join("github-app.json");

    let offer = offer(&server, "").await;
    let back = submit(&offer).await;
    assert!(back.starts_with("/setup/github/callback?code="), "{back}");
    let (registered_for, posted) = github.registered_manifests().pop().unwrap();
    assert_eq!(registered_for, None);
    assert_eq!(posted, offer.manifest);

    // A state other than the one this browser was given is refused, and so is the right
    // state without the cookie; the code is not spent on either.
    let forged = replace_query(&back, "state", &"0".repeat(64));
    let refused = browser()
        .get(format!("{}{forged}", server.base))
        .header("cookie", &offer.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let page = refused.text().await.unwrap();
    assert!(page.contains("does not match"), "{page}");
    let refused = browser()
        .get(format!("{}{back}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(!credentials.exists());
    assert_eq!(github.count("POST", "/app-manifests/"), 0);
    assert!(!app.forges.configured(Forge::Github));

    let done = browser()
        .get(format!("{}{back}", server.base))
        .header("cookie", format!("other=1; {}", offer.cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    let page = done.text().await.unwrap();
    assert!(page.contains(APP_SLUG), "{page}");
    assert!(
        page.contains(&format!("{}/apps/{APP_SLUG}/installations/new", github.url)),
        "{page}"
    );
    assert!(!page.contains("PRIVATE KEY"), "{page}");
    assert_eq!(github.count("POST", "/app-manifests/"), 1);

    let mode = std::fs::metadata(&credentials)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let stored: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    assert_eq!(stored["id"], APP_ID);
    assert_eq!(stored["slug"], APP_SLUG);
    assert_eq!(stored["pem"], app_key().private_pem.as_str());
    assert_eq!(stored["client_id"], "Iv1.8a61f9b3a7aba766");
    assert_eq!(stored["client_secret"].as_str().unwrap().len(), 40);
    let secret = stored["webhook_secret"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 40);
    assert_ne!(secret, GITHUB_SECRET);

    // Webhooks signed with the new secret are accepted at once; the old one is not a secret here.
    let body = installation_created();
    let response = server
        .github_signed("installation", "d-1", &body, Some(&sign(&secret, &body)))
        .send()
        .await
        .unwrap();
    let (status, events) = server.accepted(response, "installation.created").await;
    assert_eq!(status, "queued");
    assert_eq!(events.len(), 1);
    let response = server
        .github_signed(
            "installation",
            "d-2",
            &body,
            Some(&sign(GITHUB_SECRET, &body)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // The job handlers' forge signs as the new app: the fake only takes JWTs of its key.
    assert!(app.forges.configured(Forge::Github));
    let forge = app
        .forges
        .get(Forge::Github, Some(InstallationId(957387)))
        .unwrap();
    let info = forge
        .repository(&RepoName::parse(repo).unwrap())
        .await
        .unwrap();
    assert_eq!(info.default_branch, "main");

    // `/` is now the status page, listing the installation the webhook recorded.
    let status = eventually("the status page lists the installation", || async {
        let page = browser()
            .get(format!("{}/", server.base))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        page.contains("Codertocat").then_some(page)
    })
    .await;
    assert!(!status.contains("Register GitHub App"), "{status}");
    assert!(status.contains("957387"), "{status}");

    // A second registration is refused: one deployment, one app.
    let again = browser()
        .get(format!("{}{back}", server.base))
        .header("cookie", &offer.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    server.stop().await;

    // After a restart the stored app is read back from DATA_DIR.
    let settings = unconfigured(&db, &github);
    assert_eq!(settings.github.app_id, Some(APP_ID));
    assert_eq!(settings.github.webhook_secrets.len(), 1);
}

#[tokio::test]
async fn the_status_page_shows_sessions_without_leaking() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let key = app_key().private_pem.clone();
    let app_id = APP_ID.to_string();
    let settings = support::settings(
        &db,
        &[
            ("PLANWRIGHT_GITHUB_APP_ID", app_id.as_str()),
            ("PLANWRIGHT_GITHUB_PRIVATE_KEY", key.as_str()),
            ("PLANWRIGHT_GITHUB_API_URL", github.url.as_str()),
        ],
    );
    let server = TestServer::start(settings, Role::Web, |_| {
        planwright::worker::Handlers::default()
    })
    .await;
    let secret = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";
    let seed = [
        ("acme/widgets", 7, "awaiting_approval", 1_250_000_i64),
        ("acme/<script>alert(1)</script>", 8, "failed", 0),
    ];
    let mut conn = db.db.pool.acquire().await.unwrap();
    for (i, (repo, issue, state, cost)) in seed.iter().enumerate() {
        let id = SessionId(format!("s-{i}"));
        sessions::insert(
            &mut conn,
            &NewSession {
                id: &id,
                forge: "github",
                repo,
                issue: *issue,
                installation: Some(1),
                triggered_by: "maria",
            },
        )
        .await
        .unwrap();
        sqlx::query(
            "UPDATE sessions SET state = $1, cost_microusd = $2, failure = $3, dossier = $3, \
             status_comment_id = $3 WHERE id = $4",
        )
        .bind(*state)
        .bind(*cost)
        .bind(format!("token {secret} in the log"))
        .bind(id.as_str())
        .execute(&mut *conn)
        .await
        .unwrap();
        for version in 1..=2_i64 {
            sqlx::query(
                "INSERT INTO contracts (session_id, version, sha256, body, base_branch, \
                 base_sha, created_at) VALUES ($1, $2, $3, $4, 'main', $5, 0)",
            )
            .bind(id.as_str())
            .bind(version)
            .bind("f".repeat(64))
            .bind(format!("{{\"summary\":\"issue body with {secret}\"}}"))
            .bind("b".repeat(40))
            .execute(&mut *conn)
            .await
            .unwrap();
        }
    }
    drop(conn);

    let response = browser()
        .get(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/html; charset=utf-8"
    );
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let page = response.text().await.unwrap();
    assert!(!page.contains("Register GitHub App"), "{page}");
    assert!(page.contains("acme/widgets#7"), "{page}");
    assert!(page.contains("awaiting_approval"), "{page}");
    assert!(page.contains("v2"), "{page}");
    assert!(page.contains("$1.25"), "{page}");
    assert!(
        page.contains("acme/&lt;script&gt;alert(1)&lt;/script&gt;#8"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    for leak in [secret, "PRIVATE KEY", GITHUB_SECRET, support::GITLAB_SECRET] {
        assert!(!page.contains(leak), "the page shows {leak}:\n{page}");
    }
    server.stop().await;
}

/// Reads one line of the child's output off the runtime's threads, within 30 seconds.
async fn next_line(
    reader: std::io::BufReader<std::process::ChildStdout>,
) -> (std::io::BufReader<std::process::ChildStdout>, String) {
    use std::io::BufRead as _;
    let read = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        (reader, line)
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("planwright setup prints within 30 s")
        .unwrap()
}

#[tokio::test]
async fn setup_registers_the_app_from_the_terminal_and_refuses_a_second() {
    let github = FakeGithub::start().await;
    let data = tempfile::tempdir().unwrap();
    let command = || {
        let mut cmd = support::planwright_command();
        cmd.args(["setup", "--org", "acme-labs"])
            .env("PLANWRIGHT_DATA_DIR", data.path())
            .env("PLANWRIGHT_PUBLIC_URL", PUBLIC_URL)
            .env("PLANWRIGHT_GITHUB_API_URL", &github.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let mut child = command().spawn().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let (stdout, line) = next_line(stdout).await;
    let local = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("setup names the page to open: {line}"))
        .trim_end_matches('/')
        .to_owned();

    let offer = offer_at(&local, "").await;
    assert!(
        offer.action.starts_with(&format!(
            "{}/organizations/acme-labs/settings/apps/new?state=",
            github.url
        )),
        "{}",
        offer.action
    );
    // Webhooks still go to the deployment; only the browser comes back to the terminal.
    assert_eq!(
        offer.manifest["hook_attributes"]["url"],
        format!("{PUBLIC_URL}/webhooks/github")
    );
    let back = submit_to_github(&offer).await;
    assert!(
        back.starts_with(&format!("{local}/setup/github/callback?code=")),
        "{back}"
    );
    let done = browser()
        .get(&back)
        .header("cookie", &offer.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);

    let status = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut rest = String::new();
            let mut stdout = stdout;
            stdout.read_to_string(&mut rest).unwrap();
            (child.wait().unwrap(), rest)
        }),
    )
    .await
    .expect("setup stops once the app is stored")
    .unwrap();
    let (status, rest) = status;
    assert!(status.success(), "{rest}");
    assert!(
        rest.contains(&format!(
            "Registered the GitHub App {APP_SLUG} (id {APP_ID})"
        )),
        "{rest}"
    );
    let credentials = data.path().join("github-app.json");
    let mode = std::fs::metadata(&credentials)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let stored: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    assert_eq!(stored["pem"], app_key().private_pem.as_str());
    assert_eq!(
        github.registered_manifests()[0].0.as_deref(),
        Some("acme-labs")
    );

    let again = command().output().unwrap();
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("Cannot set up a GitHub App"), "{err}");
}
