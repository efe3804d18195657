//! Registering the GitHub App through the manifest flow against the fake GitHub, with the
//! browser's part played by hand: the page's form is posted to the fake, whose redirect
//! is followed back with the page's cookie. Registering needs the operator's setup token;
//! a visitor without it cannot register an app of their own. Then `/` lists the
//! installation for the operator.

use crate::support;

use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};

use planwright::app::App;
use planwright::event::ForgeKind;
use planwright::ids::{InstallationId, RepoName};
use planwright::server::Role;
use planwright::session::dispatch;
use serde_json::Value;
use support::fake_forge::{APP_ID, APP_SLUG, FakeGithub, app_key};
use support::{GITHUB_SECRET, TestDb, TestServer, eventually, sign};

const PUBLIC_URL: &str = "https://pw.example.org";
/// The operator's SETUP_TOKEN in these tests.
const SETUP_TOKEN: &str = "operator-setup-token-5d1c9a";

/// Settings with no GitHub App and no GitHub webhook secret, GitHub being the fake.
fn unconfigured(db: &TestDb, github: &FakeGithub) -> planwright::config::Settings {
    support::settings(
        db,
        &[
            ("PLANWRIGHT_PUBLIC_URL", PUBLIC_URL),
            ("PLANWRIGHT_GITHUB_API_URL", github.url.as_str()),
            ("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", ""),
            ("PLANWRIGHT_SETUP_TOKEN", SETUP_TOKEN),
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

/// The registration page opened with the operator's setup token; `query` is `""` or
/// `?org=NAME`.
async fn offer(server: &TestServer, query: &str) -> Offer {
    let separator = if query.is_empty() { "?" } else { "&" };
    offer_at(&format!(
        "{}/{query}{separator}token={SETUP_TOKEN}",
        server.base
    ))
    .await
}

async fn offer_at(url: &str) -> Offer {
    read_offer(browser().get(url).send().await.unwrap()).await
}

/// The registration page reached through the setup token form instead of the address.
async fn offer_by_form(server: &TestServer, token: &str) -> reqwest::Response {
    browser()
        .post(format!("{}/", server.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", token)]).unwrap())
        .send()
        .await
        .unwrap()
}

async fn read_offer(response: reqwest::Response) -> Offer {
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
    let server = TestServer::start(unconfigured(&db, &github), Role::Web, dispatch::handler).await;

    let personal = offer(&server, "").await;
    let state = state_of(&personal.action);
    assert_eq!(
        personal.action,
        format!("{}/settings/apps/new?state={state}", github.url)
    );
    assert_eq!(state.len(), 64);
    // The cookie is the browser's own half: a state seen in a URL does not give it.
    let (name, browser_half) = personal.cookie.split_once('=').unwrap();
    assert_eq!(name, "planwright_setup_state");
    assert_eq!(browser_half.len(), 64);
    assert_ne!(browser_half, state);
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
            "pull_request_review_comment",
            "check_suite",
            "status"
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
        dispatch::handler(app)
    })
    .await;
    let app = app_slot.lock().unwrap().clone().unwrap();
    assert!(!app.forges.configured(ForgeKind::Github));
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
    assert!(page.contains("was not issued by this planwright"), "{page}");
    let refused = browser()
        .get(format!("{}{back}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let page = refused.text().await.unwrap();
    assert!(page.contains("does not match this browser"), "{page}");
    assert!(!credentials.exists());
    assert_eq!(github.count("POST", "/app-manifests/"), 0);
    assert!(!app.forges.configured(ForgeKind::Github));

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
    assert!(app.forges.configured(ForgeKind::Github));
    let forge = app
        .forges
        .get(ForgeKind::Github, Some(InstallationId(957387)))
        .unwrap();
    let info = forge
        .repository(&RepoName::parse(repo).unwrap())
        .await
        .unwrap();
    assert_eq!(info.default_branch, "main");

    // `/` now lists, for the operator, the installation the webhook recorded.
    let status = eventually("the home page lists the installation", || async {
        let page = browser()
            .get(format!("{}/", server.base))
            .bearer_auth(support::ADMIN_TOKEN)
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

/// The takeover of a fresh public instance: a visitor without the setup token registers an
/// app of their own on GitHub with a state they chose, then brings the browser back with a
/// cookie holding that same state. Nothing of theirs may be exchanged or stored.
#[tokio::test]
async fn a_visitor_without_the_setup_token_cannot_register_an_app_with_a_state_of_their_choosing() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let app_slot: Arc<Mutex<Option<Arc<App>>>> = Arc::default();
    let slot = app_slot.clone();
    let server = TestServer::start(unconfigured(&db, &github), Role::Web, move |app| {
        *slot.lock().unwrap() = Some(app.clone());
        dispatch::handler(app)
    })
    .await;
    let app = app_slot.lock().unwrap().clone().unwrap();
    let credentials = db.dir.path().join("github-app.json");

    // The page offers no manifest, state or cookie without the token.
    let asked = browser()
        .get(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 401);
    assert!(asked.headers().get("set-cookie").is_none());
    let page = asked.text().await.unwrap();
    assert!(page.contains("setup token"), "{page}");
    for absent in ["Register GitHub App", "state=", "manifest", &github.url] {
        assert!(!page.contains(absent), "the page shows {absent}:\n{page}");
    }
    // A wrong token, in the address or through the form, gets no further.
    for wrong in [
        "operator-setup-token-5d1c9b",
        "",
        SETUP_TOKEN.trim_end_matches('a'),
    ] {
        let by_address = browser()
            .get(format!("{}/?token={wrong}", server.base))
            .send()
            .await
            .unwrap();
        let by_form = offer_by_form(&server, wrong).await;
        for refused in [by_address, by_form] {
            assert_eq!(refused.status(), 403, "{wrong}");
            assert!(refused.headers().get("set-cookie").is_none());
            let page = refused.text().await.unwrap();
            assert!(page.contains("it is not this planwright's"), "{page}");
            assert!(!page.contains("Register GitHub App"), "{page}");
        }
    }

    // The visitor registers on GitHub with their own state, as the manifest flow allows...
    let chosen = "a".repeat(64);
    let own = Offer {
        action: format!("{}/settings/apps/new?state={chosen}", github.url),
        manifest: planwright::onboarding::manifest(PUBLIC_URL, PUBLIC_URL).unwrap(),
        cookie: format!("planwright_setup_state={chosen}"),
    };
    let back = submit(&own).await;
    assert!(back.contains(&format!("state={chosen}")), "{back}");
    // ...and comes back with a cookie of their choosing: refused, the code not spent.
    for cookie in [own.cookie.clone(), "planwright_setup_state=".to_owned()] {
        let refused = browser()
            .get(format!("{}{back}", server.base))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403);
        let page = refused.text().await.unwrap();
        assert!(page.contains("Cannot finish the registration"), "{page}");
    }
    assert_eq!(github.count("POST", "/app-manifests/"), 0);
    assert!(!credentials.exists());
    assert!(!app.forges.configured(ForgeKind::Github));
    let still = browser()
        .get(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), 401);
    server.stop().await;
}

/// A state is spent by the first callback that brings it back with its cookie, even when
/// that registration fails: the same state cannot register a second time.
#[tokio::test]
async fn a_state_registers_once_and_a_new_page_gives_a_new_one() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let server = TestServer::start(unconfigured(&db, &github), Role::Web, dispatch::handler).await;
    let credentials = db.dir.path().join("github-app.json");

    let first = read_offer(offer_by_form(&server, SETUP_TOKEN).await).await;
    let back = submit(&first).await;
    let spoiled = replace_query(&back, "code", "not-a-code");
    let failed = browser()
        .get(format!("{}{spoiled}", server.base))
        .header("cookie", &first.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 502);
    let again = browser()
        .get(format!("{}{back}", server.base))
        .header("cookie", &first.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 403);
    let page = again.text().await.unwrap();
    assert!(page.contains("used already"), "{page}");
    assert_eq!(github.count("POST", "/app-manifests/"), 1);
    assert!(!credentials.exists());

    let second = offer(&server, "").await;
    assert_ne!(state_of(&second.action), state_of(&first.action));
    let back = submit(&second).await;
    let done = browser()
        .get(format!("{}{back}", server.base))
        .header("cookie", &second.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 200);
    assert!(credentials.exists());
    server.stop().await;
}

/// A fresh `serve` without SETUP_TOKEN makes a token and prints the address to open with
/// it; the address works, the bare page does not register.
#[tokio::test]
async fn serve_without_an_app_prints_the_setup_address_with_a_token_of_its_own() {
    use std::io::BufRead as _;
    let github = FakeGithub::start().await;
    let data = tempfile::tempdir().unwrap();
    let mut child = support::planwright_command()
        .arg("serve")
        .env("PLANWRIGHT_DATA_DIR", data.path())
        .env("PLANWRIGHT_LISTEN", "127.0.0.1:0")
        .env("PLANWRIGHT_PUBLIC_URL", PUBLIC_URL)
        .env("PLANWRIGHT_GITHUB_API_URL", &github.url)
        .env("PLANWRIGHT_LOG_FORMAT", "json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let read = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let (mut setup_url, mut addr) = (None, None);
        while setup_url.is_none() || addr.is_none() {
            let line = lines.next().expect("serve logs before it stops").unwrap();
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if let Some(url) = v["fields"]["setup_url"].as_str() {
                setup_url = Some(url.to_owned());
            }
            if v["fields"]["message"] == "listening" {
                addr = v["fields"]["addr"].as_str().map(str::to_owned);
            }
        }
        // Keep draining the log so that serve never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        (setup_url.unwrap(), addr.unwrap())
    });
    let (setup_url, addr) = tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("serve starts within 30 s")
        .unwrap();
    let token = setup_url
        .strip_prefix(&format!("{PUBLIC_URL}/?token="))
        .unwrap_or_else(|| panic!("the address is under PUBLIC_URL: {setup_url}"));
    assert_eq!(token.len(), 32);
    let bare = browser()
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    let offer = offer_at(&format!("http://{addr}/?token={token}")).await;
    assert!(offer.action.starts_with(&github.url), "{}", offer.action);
    support::signal(child.id(), "TERM");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "serve exited with {status}");
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
    let page = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("setup names the page to open: {line}"))
        .to_owned();
    // The address it prints carries the setup token; without it, the page asks for one.
    let (local, token) = page
        .split_once("/?token=")
        .unwrap_or_else(|| panic!("the address carries the setup token: {page}"));
    let local = local.to_owned();
    assert_eq!(token.len(), 32, "{page}");
    let asked = browser().get(format!("{local}/")).send().await.unwrap();
    assert_eq!(asked.status(), 401);
    assert!(asked.headers().get("set-cookie").is_none());
    let wrong = browser()
        .get(format!("{local}/?token={}", "0".repeat(32)))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403);

    let offer = offer_at(&page).await;
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
