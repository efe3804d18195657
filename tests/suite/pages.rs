//! The signed-in pages: who may see them (the operator's token, typed into the sign-in
//! form or sent as a bearer token), what a forged cookie or a form from elsewhere gets,
//! and what a finished session's page shows.

use crate::support;

use planwright::event::ForgeKind;
use planwright::ids::{InstallationId, IssueNumber, RepoName, SessionId};
use planwright::server::Role;
use planwright::session::dispatch;
use planwright::store::sessions::{self, NewSession};
use serde_json::{Value, json};
use support::browser::Browser;
use support::fake_forge::{
    APP_ID, FakeGithub, FakeUser, OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, app_key,
};
use support::fake_gitlab::{
    FakeGitlab, OAUTH_CLIENT_ID as GITLAB_CLIENT_ID, OAUTH_CLIENT_SECRET as GITLAB_CLIENT_SECRET,
};
use support::model_server::Step;
use support::world::World;
use support::{GITHUB_SECRET, TestDb, TestServer};

/// A token that sits in session failures, dossiers and contracts: no page an anonymous
/// visitor gets may show it.
const LEAKED_TOKEN: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A server with the GitHub App configured, ADMIN_TOKEN as `extra` leaves it, and two
/// sessions: `acme/widgets#7`, awaiting approval at $1.25, and a failed one with markup in
/// its repository's name.
async fn status_world(extra: &[(&str, &str)]) -> (TestDb, FakeGithub, TestServer) {
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
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    );
    let server = TestServer::start(settings, Role::Web, dispatch::handler).await;
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
                forge: ForgeKind::Github,
                repo: &RepoName::parse(repo).unwrap(),
                issue: IssueNumber(*issue),
                installation: Some(InstallationId(1)),
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
        .bind(format!("token {LEAKED_TOKEN} in the log"))
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
            .bind(format!(
                "{{\"summary\":\"issue body with {LEAKED_TOKEN}\"}}"
            ))
            .bind("b".repeat(40))
            .execute(&mut *conn)
            .await
            .unwrap();
        }
    }
    drop(conn);
    (db, github, server)
}

/// The `name=value` pairs a response sets, as a `Cookie` header sends them back; cookies
/// it removes are left out.
fn cookies_set(response: &reqwest::Response) -> String {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| !v.contains("Max-Age=0"))
        .filter_map(|v| v.split(';').next())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The value of the hidden `csrf` field of a page's form.
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

/// Posts the sign-out form with `csrf`, as a browser does.
async fn sign_out(server: &TestServer, cookie: &str, csrf: &str) -> reqwest::Response {
    browser()
        .post(format!("{}/sign-out", server.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf)]))
        .send()
        .await
        .unwrap()
}

/// Signs in through the form, as a browser does; the session cookie.
async fn sign_in(server: &TestServer, token: &str) -> reqwest::Response {
    let form = browser()
        .get(format!("{}/sign-in", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    let cookie = cookies_set(&form);
    let csrf = csrf_of(&form.text().await.unwrap());
    browser()
        .post(format!("{}/sign-in", server.base))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", token), ("csrf", csrf.as_str())]))
        .send()
        .await
        .unwrap()
}

async fn get(server: &TestServer, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut request = browser().get(format!("{}{path}", server.base));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap()
}

/// What no one signed out may see: repositories, states, costs, sessions' text.
const PRIVATE: &[&str] = &[
    "acme/widgets",
    "awaiting_approval",
    "$1.25",
    "Installations",
    "v2",
    LEAKED_TOKEN,
];

#[tokio::test]
async fn anonymous_visitors_see_only_the_sign_in_page() {
    let (_db, _github, server) = status_world(&[]).await;
    for path in ["/", "/sessions/s-0", "/sessions/s-1", "/sessions/none"] {
        for (authorization, why) in [
            (None, "no credentials"),
            (Some("Bearer admin-test-token-7f3e2c"), "a wrong token"),
            (
                Some(&*format!("Bearer {GITHUB_SECRET}")),
                "the webhook secret",
            ),
            (
                Some(&*format!(
                    "Basic {}",
                    base64_encode(&format!("operator:{}", support::ADMIN_TOKEN))
                )),
                "the token as a Basic password, which a browser would send on its own",
            ),
        ] {
            let mut request = browser().get(format!("{}{path}", server.base));
            if let Some(authorization) = authorization {
                request = request.header("authorization", authorization);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{path}: {why}");
            let page = response.text().await.unwrap();
            assert!(page.contains("Sign in"), "{path}: {why}: {page}");
            for leak in PRIVATE {
                assert!(!page.contains(leak), "{path}: {why}: shows {leak}:\n{page}");
            }
        }
        // Scripts get JSON saying what to send.
        let refused = browser()
            .get(format!("{}{path}", server.base))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.headers()["www-authenticate"],
            "Bearer realm=\"planwright\""
        );
        let body: Value = refused.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
    }
    server.stop().await;

    // Without ADMIN_TOKEN the token form is not offered, and the token is nobody's.
    let (_db, _github, server) = status_world(&[("PLANWRIGHT_ADMIN_TOKEN", "")]).await;
    let page = get(&server, "/sign-in", None).await.text().await.unwrap();
    assert!(page.contains("set ADMIN_TOKEN"), "{page}");
    let refused = browser()
        .get(format!("{}/", server.base))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    server.stop().await;
}

/// A form's fields, URL-encoded as a browser posts them.
fn form_body(fields: &[(&str, &str)]) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    fields
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, NON_ALPHANUMERIC),
                utf8_percent_encode(v, NON_ALPHANUMERIC)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn the_operator_signs_in_with_the_token_form_sees_every_session_and_signs_out() {
    let (_db, _github, server) = status_world(&[]).await;
    let wrong = sign_in(&server, "not-the-admin-token-at-all").await;
    assert_eq!(wrong.status(), 401);
    assert!(cookies_set(&wrong).find("planwright_session=").is_none());
    assert!(wrong.text().await.unwrap().contains("not the operator"));

    let signed_in = sign_in(&server, support::ADMIN_TOKEN).await;
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()["location"], "/");
    let set: Vec<&str> = signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .filter(|v| v.starts_with("planwright_session="))
        .collect();
    assert_eq!(set.len(), 1, "{set:?}");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age="] {
        assert!(set[0].contains(attribute), "{attribute} in {}", set[0]);
    }
    // The cookie says nothing readable about who it signs in.
    assert!(!set[0].contains("operator"), "{}", set[0]);
    let cookie = cookies_set(&signed_in);

    let home = get(&server, "/", Some(&cookie)).await;
    assert_eq!(home.status(), 200);
    let csp = home.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let page = home.text().await.unwrap();
    assert!(
        page.contains("acme/widgets#7") && page.contains("$1.25"),
        "{page}"
    );
    assert!(
        page.contains("acme/&lt;script&gt;alert(1)&lt;/script&gt;#8"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    // Failures first.
    assert!(
        page.find("#8").unwrap() < page.find("#7").unwrap(),
        "{page}"
    );
    assert!(
        !page.contains(LEAKED_TOKEN),
        "the home page shows a session's text"
    );
    // Filtered by repository and state.
    let filtered = get(&server, "/?repo=acme/widgets&state=", Some(&cookie))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        filtered.contains("acme/widgets#7") && !filtered.contains("#8</a>"),
        "{filtered}"
    );
    let failed = get(&server, "/?state=failed", Some(&cookie))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !failed.contains("acme/widgets#7") && failed.contains("#8</a>"),
        "{failed}"
    );

    let session = get(&server, "/sessions/s-0", Some(&cookie)).await;
    assert_eq!(session.status(), 200);
    let page = session.text().await.unwrap();
    assert!(page.contains("acme/widgets#7"), "{page}");

    // Signing out needs the page's CSRF token; then the cookie is gone.
    let csrf = csrf_of(&page);
    let forged = sign_out(&server, &cookie, "0".repeat(48).as_str()).await;
    assert_eq!(forged.status(), 403);
    assert_eq!(get(&server, "/", Some(&cookie)).await.status(), 200);
    let out = sign_out(&server, &cookie, csrf.as_str()).await;
    assert_eq!(out.status(), 303);
    let removed = out.headers()["set-cookie"].to_str().unwrap();
    assert!(
        removed.starts_with("planwright_session=") && removed.contains("Max-Age=0"),
        "{removed}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_sign_in_form_from_elsewhere_and_forged_cookies_are_refused() {
    let (_db, _github, server) = status_world(&[]).await;
    // A form posted from another site carries neither this browser's form cookie nor
    // its token.
    for (cookie, csrf) in [
        (None, "x"),
        (None, ""),
        (Some("planwright_sign_in=forged"), "x"),
    ] {
        let mut request = browser().post(format!("{}/sign-in", server.base));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let refused = request
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&[
                ("token", support::ADMIN_TOKEN),
                ("csrf", csrf),
            ]))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403);
        assert!(cookies_set(&refused).find("planwright_session=").is_none());
    }
    // Another form's cookie with this form's token: refused too.
    let form = get(&server, "/sign-in", None).await;
    let _ = form.text().await;
    let other = get(&server, "/sign-in", None).await;
    let other_cookie = cookies_set(&other);
    let refused = browser()
        .post(format!("{}/sign-in", server.base))
        .header("cookie", other_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[
            ("token", support::ADMIN_TOKEN),
            ("csrf", &"a".repeat(48)),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);

    let signed_in = sign_in(&server, support::ADMIN_TOKEN).await;
    let cookie = cookies_set(&signed_in);
    let value = cookie
        .split("; ")
        .find_map(|c| c.strip_prefix("planwright_session="))
        .unwrap()
        .to_owned();
    // One character changed, cut short, made up: each is no one.
    let mut flipped: Vec<char> = value.chars().collect();
    let middle = flipped.len() / 2;
    flipped[middle] = if flipped[middle] == 'A' { 'B' } else { 'A' };
    let flipped: String = flipped.into_iter().collect();
    for forged in [
        flipped,
        value[..value.len() - 4].to_owned(),
        "eyJ3aG8iOnsia2luZCI6Im9wZXJhdG9yIn19".to_owned(),
    ] {
        let response = get(&server, "/", Some(&format!("planwright_session={forged}"))).await;
        assert_eq!(response.status(), 401, "{forged}");
    }
    // A cookie another deployment signed (its own key) is no one here either.
    let (_db2, _github2, elsewhere) = status_world(&[]).await;
    let foreign = cookies_set(&sign_in(&elsewhere, support::ADMIN_TOKEN).await);
    assert_eq!(get(&elsewhere, "/", Some(&foreign)).await.status(), 200);
    assert_eq!(get(&server, "/", Some(&foreign)).await.status(), 401);
    elsewhere.stop().await;

    // A session that does not exist is the same 404 for JSON and pages.
    let missing = get(&server, "/sessions/no-such-session", Some(&cookie)).await;
    assert_eq!(missing.status(), 404);
    server.stop().await;
}

/// A whole session, label to pull request, as the operator's script reads it: the
/// contract, the verification of its attempt, the cost by role, the timeline.
async fn a_finished_session_shows_its_contract_verification_and_cost(on: ForgeKind) {
    let world = World::calc(
        on,
        support::calc::fixing_script(2),
        &format!("test: {}\n", support::calc::UNITTEST),
    )
    .await;
    world.approve_calc().await;
    let session = world.wait_for_state("pr_opened").await;
    let base = &world.server.base;
    let json: Value = world
        .server
        .client
        .get(format!("{base}/sessions/{}", session.id.as_str()))
        .bearer_auth(support::ADMIN_TOKEN)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(json["state"], "pr_opened");
    let contract = &json["contracts"][0];
    assert_eq!(contract["version"], 1);
    assert_eq!(contract["approved_by"], world.maintainer.login.as_str());
    assert!(
        contract["markdown"]
            .as_str()
            .unwrap()
            .contains("Build contract v1"),
        "{json:#}"
    );
    let attempt = &json["attempts"][0];
    assert_eq!(attempt["state"], "published");
    assert_eq!(attempt["accepted"], true);
    assert_eq!(attempt["verification"]["verdict"], "passed", "{attempt:#}");
    let roles: Vec<&str> = json["costs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"planner") && roles.contains(&"reviewer"),
        "{roles:?}"
    );
    let timeline: Vec<&str> = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["what"].as_str().unwrap())
        .collect();
    assert!(
        timeline.contains(&"contract approved") && timeline.contains(&"pull opened"),
        "{timeline:?}"
    );
    let pull = session.pull_number.expect("a pull request").0;
    assert!(
        json["pull_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/{pull}")),
        "{json:#}"
    );

    let checks = json["checks_url"].as_str().unwrap();
    assert!(
        checks.ends_with(&format!("/pull/{pull}/checks"))
            || checks.ends_with(&format!("/-/merge_requests/{pull}/pipelines")),
        "{checks}"
    );

    assert_eq!(attempt["transcript"], true, "{attempt:#}");
    // The repository's page: the settings the contract was planned with, the session,
    // the month's cost.
    let repository: Value = world
        .server
        .client
        .get(format!(
            "{base}/repos/{}/{}",
            json["forge"].as_str().unwrap(),
            json["repo"].as_str().unwrap()
        ))
        .bearer_auth(support::ADMIN_TOKEN)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        repository["sessions"][0]["id"], json["id"],
        "{repository:#}"
    );
    // Each value says which line of the settings file set it, read from the mirror at the
    // commit the contract was planned at; a value the file does not set is the default.
    let setting = |key: &str| {
        repository["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .unwrap_or_else(|| panic!("no `{key}` in {repository:#}"))
            .clone()
    };
    let test = setting("test");
    assert_eq!(test["line"], 1, "{test:#}");
    let source = repository["settings_source"].as_str().unwrap();
    let commit = repository["settings_commit"].as_str().unwrap();
    let link = test["link"].as_str().unwrap();
    assert!(
        link.ends_with(&format!("/{commit}/{source}#L1")),
        "{link} for {source} at {commit}"
    );
    let budget = setting("budget_usd");
    assert!(
        budget["line"].is_null() && budget["link"].is_null(),
        "{budget:#}"
    );
    assert_eq!(
        repository["months"].as_array().unwrap().len(),
        1,
        "{repository:#}"
    );
    assert!(repository["months"][0]["cost_microusd"].as_i64().unwrap() > 0);
    // The attempt's outcome: one verified attempt of the deployment's executor model at
    // the contract's risk, with what it cost.
    let outcomes = repository["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 1, "{repository:#}");
    let model = &outcomes[0];
    assert_eq!(model["risk"], "low", "{model:#}");
    assert_eq!(model["executor"], "builtin", "{model:#}");
    assert_eq!(model["model"], "anthropic:claude-sonnet-4-5", "{model:#}");
    assert_eq!(
        (model["runs"].as_i64(), model["verified"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(model["verified_rate"], "100%", "{model:#}");
    assert!(
        model["median_cost_microusd"].as_i64().unwrap() > 0,
        "{model:#}"
    );
    let transcript = format!(
        "{base}/sessions/{}/attempts/{}/transcript",
        session.id.as_str(),
        attempt["id"].as_str().unwrap()
    );
    let paged: Value = world
        .server
        .client
        .get(&transcript)
        .bearer_auth(support::ADMIN_TOKEN)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entries = paged["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{paged:#}");
    assert_eq!(entries[0]["line"], 1);
    let raw = world
        .server
        .client
        .get(format!("{transcript}/raw"))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    assert!(
        raw.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    // One entry per line of the raw file, all of it on the first page here.
    assert_eq!(paged["more"], false);
    assert_eq!(raw.text().await.unwrap().lines().count(), entries.len());

    let page = world
        .server
        .client
        .get(format!("{base}/sessions/{}", session.id.as_str()))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for part in [
        "Build contract v1",
        "<table>",
        "spend-chart",
        "reviewer",
        "Timeline",
    ] {
        assert!(page.contains(part), "{part} is missing:\n{page}");
    }
    let repository_page = world
        .server
        .client
        .get(format!(
            "{base}/repos/{}/{}",
            json["forge"].as_str().unwrap(),
            json["repo"].as_str().unwrap()
        ))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for part in [
        "Models here",
        "<code>anthropic:claude-sonnet-4-5</code>",
        "100% (1 of 1)",
    ] {
        assert!(
            repository_page.contains(part),
            "{part} is missing:\n{repository_page}"
        );
    }
    world.server.stop().await;
}

crate::on_both_forges!(a_finished_session_shows_its_contract_verification_and_cost);

/// A session on `forge` for `repo`, as `status_world` seeds them.
async fn seed(db: &TestDb, id: &str, forge: ForgeKind, repo: &str, issue: i64, state: &str) {
    let mut conn = db.db.pool.acquire().await.unwrap();
    sessions::insert(
        &mut conn,
        &NewSession {
            id: &SessionId(id.to_owned()),
            forge,
            repo: &RepoName::parse(repo).unwrap(),
            issue: IssueNumber(issue),
            installation: Some(InstallationId(1)),
            triggered_by: "maria",
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE sessions SET state = $1 WHERE id = $2")
        .bind(state)
        .bind(id)
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// The path and query of an absolute URL, to ask them of the server under test.
fn path_of(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme
        .find('/')
        .map_or_else(|| "/".to_owned(), |at| after_scheme[at..].to_owned())
}

/// Signs in through the forge as a browser does: to the forge's consent page and back.
/// The last answer (the callback's), whose cookies are the sign-in.
async fn sign_in_through(server: &TestServer, forge: &str) -> reqwest::Response {
    let page = get(server, "/sign-in", None).await.text().await.unwrap();
    let start = format!("/sign-in/{forge}");
    assert!(page.contains(&format!("href=\"{start}\"")), "{page}");
    let started = get(server, &start, None).await;
    assert_eq!(started.status(), 303);
    let flow = cookies_set(&started);
    let consent = started.headers()["location"].to_str().unwrap().to_owned();
    for part in [
        "client_id=",
        "state=",
        "code_challenge=",
        "code_challenge_method=S256",
    ] {
        assert!(consent.contains(part), "{part} in {consent}");
    }
    let back = browser().get(&consent).send().await.unwrap();
    assert_eq!(back.status(), 302, "{consent}");
    let callback = back.headers()["location"].to_str().unwrap().to_owned();
    get(server, &path_of(&callback), Some(&flow)).await
}

#[tokio::test]
async fn people_sign_in_with_github_and_see_only_the_sessions_they_can_read() {
    let (db, github, server) = status_world(&[
        ("PLANWRIGHT_GITHUB_CLIENT_ID", OAUTH_CLIENT_ID),
        ("PLANWRIGHT_GITHUB_CLIENT_SECRET", OAUTH_CLIENT_SECRET),
        ("PLANWRIGHT_ACCESS_CHECK_SECS", "0"),
    ])
    .await;
    seed(
        &db,
        "s-private",
        ForgeKind::Github,
        "acme/vault",
        3,
        "executing",
    )
    .await;
    seed(
        &db,
        "s-gitlab",
        ForgeKind::Gitlab,
        "acme/widgets",
        9,
        "executing",
    )
    .await;
    for repo in ["acme/widgets", "acme/vault"] {
        github.add_repo(repo, "main", &"a".repeat(40));
    }
    github.add_installation(1, &["acme/widgets", "acme/vault"]);
    let octocat = FakeUser::new("octocat", 583231);
    github.set_permission("acme/widgets", "octocat", "read", "read");
    github.sign_in_as(Some(&octocat));

    let signed_in = sign_in_through(&server, "github").await;
    assert_eq!(signed_in.status(), 303);
    let cookie = cookies_set(&signed_in);
    assert!(cookie.contains("planwright_session="), "{cookie}");
    let page = get(&server, "/", Some(&cookie)).await.text().await.unwrap();
    assert!(page.contains("acme/widgets#7"), "{page}");
    for hidden in ["acme/vault", "#9", "Installations", "#8"] {
        assert!(!page.contains(hidden), "shows {hidden}:\n{page}");
    }
    // A failure's detail (a registry's own answer) is the operator's alone: whoever can
    // read the repository may have made the session fail to read it.
    const DETAIL: &str = "bc-7.build.corp.internal answered 404";
    {
        let mut conn = db.db.pool.acquire().await.unwrap();
        planwright::store::audit::append(
            &mut conn,
            &planwright::store::audit::Entry {
                actor: "planwright",
                action: planwright::store::audit::AuditAction::SessionFailed,
                session: Some("s-0"),
                delivery: None,
                detail: json!({ "reason": "The image could not be used", "detail": DETAIL }),
            },
        )
        .await
        .unwrap();
    }
    let readable = get(&server, "/sessions/s-0", Some(&cookie)).await;
    assert_eq!(readable.status(), 200);
    let readable = readable.text().await.unwrap();
    assert!(!readable.contains("bc-7"), "{readable}");
    let operator = server
        .client
        .get(format!("{}/sessions/s-0", server.base))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(operator.contains(DETAIL), "{operator}");
    let csrf = csrf_of(&readable);
    // Someone else's repository, another forge's session, and no session at all answer
    // the same.
    let mut answers = Vec::new();
    for id in ["s-private", "s-gitlab", "no-such-session"] {
        let response = get(&server, &format!("/sessions/{id}"), Some(&cookie)).await;
        answers.push((response.status(), response.text().await.unwrap()));
    }
    assert!(
        answers.iter().all(|a| a == &answers[2] && a.0 == 404),
        "{answers:?}"
    );

    let run = planwright::ids::RunId::generate();
    {
        let mut conn = db.db.pool.acquire().await.unwrap();
        planwright::store::runs::insert(
            &mut conn,
            &planwright::store::runs::NewRun {
                id: &run,
                session: &SessionId("s-0".into()),
                version: planwright::contract::ContractVersion(2),
                attempt: 1,
                executor: "builtin",
                branch: "planwright/7-x",
                workspace: "",
                environment: "host",
                model: None,
                rung: 0,
            },
        )
        .await
        .unwrap();
    }
    let records = db
        .dir
        .path()
        .join("runs")
        .join(run.as_str())
        .join("executor");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::write(
        records.join("transcript.jsonl"),
        "{\"type\":\"tool_call\",\"input\":\"<script>alert(1)</script>\"}\n",
    )
    .unwrap();
    let transcript = format!("/sessions/s-0/attempts/{}/transcript", run.as_str());
    let page = get(&server, &transcript, Some(&cookie)).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("tool_call") && !page.contains("<script>alert"),
        "{page}"
    );
    assert!(
        !page.contains("/raw"),
        "a person is offered the raw file:\n{page}"
    );
    assert_eq!(
        get(&server, &format!("{transcript}/raw"), Some(&cookie))
            .await
            .status(),
        404
    );
    // The repository pages follow the same access.
    assert_eq!(
        get(&server, "/repos/github/acme/widgets", Some(&cookie))
            .await
            .status(),
        200
    );
    for hidden in [
        "/repos/github/acme/vault",
        "/repos/gitlab/acme/widgets",
        "/repos/github/acme/nothing",
    ] {
        assert_eq!(
            get(&server, hidden, Some(&cookie)).await.status(),
            404,
            "{hidden}"
        );
    }
    // Another session's transcript path with this run: no such thing.
    assert_eq!(
        get(
            &server,
            &format!("/sessions/s-private/attempts/{}/transcript", run.as_str()),
            Some(&cookie)
        )
        .await
        .status(),
        404
    );

    // Signing out ends this sign-in everywhere (a copy of the cookie is refused) and
    // hands the token back to GitHub.
    assert_eq!(github.user_tokens(), 1);
    let out = sign_out(&server, &cookie, csrf.as_str()).await;
    assert_eq!(out.status(), 303);
    assert_eq!(get(&server, "/", Some(&cookie)).await.status(), 401);
    assert_eq!(github.user_tokens(), 0);
    let cookie = cookies_set(&sign_in_through(&server, "github").await);

    // Access lost on GitHub: gone at the next check.
    github.set_permission("acme/widgets", "octocat", "none", "");
    let page = get(&server, "/", Some(&cookie)).await.text().await.unwrap();
    assert!(!page.contains("acme/widgets"), "{page}");
    assert_eq!(
        get(&server, "/sessions/s-0", Some(&cookie)).await.status(),
        404
    );

    // The token revoked: signed out, and told to sign in again.
    github.revoke_user_tokens();
    let ended = get(&server, "/", Some(&cookie)).await;
    assert_eq!(ended.status(), 401);
    let removed: Vec<&str> = ended
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(
        removed
            .iter()
            .any(|c| c.starts_with("planwright_session=") && c.contains("Max-Age=0")),
        "{removed:?}"
    );
    assert!(ended.text().await.unwrap().contains("sign in again"));

    // Someone who declines on GitHub is not signed in, and is told so.
    github.sign_in_as(None);
    let declined = sign_in_through(&server, "github").await;
    assert_eq!(declined.status(), 401);
    assert!(!cookies_set(&declined).contains("planwright_session="));
    assert!(
        declined
            .text()
            .await
            .unwrap()
            .contains("did not sign you in")
    );

    // A code brought back to a browser that did not start the sign-in is refused.
    github.sign_in_as(Some(&octocat));
    let started = get(&server, "/sign-in/github", None).await;
    let consent = started.headers()["location"].to_str().unwrap().to_owned();
    let back = browser().get(&consent).send().await.unwrap();
    let callback = back.headers()["location"].to_str().unwrap().to_owned();
    let elsewhere = get(&server, &path_of(&callback), None).await;
    assert_eq!(elsewhere.status(), 403);
    assert!(!cookies_set(&elsewhere).contains("planwright_session="));
    server.stop().await;
}

#[tokio::test]
async fn people_sign_in_with_gitlab_and_see_only_their_projects() {
    let db = TestDb::new().await;
    let gitlab = FakeGitlab::start().await;
    gitlab.add_project("acme/widgets", "main", &"a".repeat(40));
    gitlab.add_project("acme/vault", "main", &"b".repeat(40));
    let alice = gitlab.add_user("alice", 41);
    gitlab.add_member("acme/widgets", &alice, 20);
    // A guest may see a project, not its confidential issues: not enough.
    gitlab.add_member("acme/vault", &alice, 10);
    let settings = support::settings(
        &db,
        &[
            ("PLANWRIGHT_GITLAB_URL", gitlab.url.as_str()),
            ("PLANWRIGHT_GITLAB_TOKEN", support::fake_gitlab::TOKEN),
            ("PLANWRIGHT_GITLAB_CLIENT_ID", GITLAB_CLIENT_ID),
            ("PLANWRIGHT_GITLAB_CLIENT_SECRET", GITLAB_CLIENT_SECRET),
        ],
    );
    // A GitLab-only deployment: `/` is not the GitHub registration page.
    let server = TestServer::start(settings, Role::Web, dispatch::handler).await;
    seed(
        &db,
        "g-1",
        ForgeKind::Gitlab,
        "acme/widgets",
        4,
        "awaiting_approval",
    )
    .await;
    seed(&db, "g-2", ForgeKind::Gitlab, "acme/vault", 5, "failed").await;
    gitlab.sign_in_as(Some(&alice));
    let signed_in = sign_in_through(&server, "gitlab").await;
    assert_eq!(signed_in.status(), 303);
    let cookie = cookies_set(&signed_in);
    let home: Value = browser()
        .get(format!("{}/", server.base))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed: Vec<&str> = home["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["repo"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["acme/widgets"], "{home:#}");
    assert_eq!(home["viewer"], "alice");
    assert_eq!(
        get(&server, "/sessions/g-2", Some(&cookie)).await.status(),
        404
    );
    let page = get(&server, "/sessions/g-1", Some(&cookie)).await;
    assert_eq!(page.status(), 200);
    let csrf = csrf_of(&page.text().await.unwrap());
    let out = sign_out(&server, &cookie, csrf.as_str()).await;
    assert_eq!(out.status(), 303);
    assert_eq!(gitlab.user_tokens(), 0, "the token was not revoked");
    assert_eq!(
        get(&server, "/sessions/g-1", Some(&cookie)).await.status(),
        401
    );
    server.stop().await;
}

#[tokio::test]
async fn a_new_admin_token_ends_the_operator_sign_ins_made_with_the_old_one() {
    let (db, _github, server) = status_world(&[]).await;
    let cookie = cookies_set(&sign_in(&server, support::ADMIN_TOKEN).await);
    let home = get(&server, "/", Some(&cookie)).await;
    assert_eq!(home.status(), 200);
    for (name, value) in [
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        ("vary", "Accept, Cookie, Authorization"),
    ] {
        assert_eq!(home.headers()[name], value, "{name}");
    }
    let json = browser()
        .get(format!("{}/sessions/s-0", server.base))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(json.headers()["cache-control"], "no-store");
    server.stop().await;

    // The same deployment (its database, so its cookie key) with another ADMIN_TOKEN.
    let settings = support::settings(
        &db,
        &[
            ("PLANWRIGHT_GITHUB_APP_ID", APP_ID.to_string().as_str()),
            (
                "PLANWRIGHT_GITHUB_PRIVATE_KEY",
                app_key().private_pem.as_str(),
            ),
            ("PLANWRIGHT_ADMIN_TOKEN", "a-rotated-admin-token-0123456789"),
        ],
    );
    let server = TestServer::start(settings, Role::Web, dispatch::handler).await;
    assert_eq!(get(&server, "/", Some(&cookie)).await.status(), 401);
    let fresh = cookies_set(&sign_in(&server, "a-rotated-admin-token-0123456789").await);
    assert_eq!(get(&server, "/", Some(&fresh)).await.status(), 200);
    server.stop().await;
}

/// Where the page tests leave their screenshots (the README's come from here).
fn screenshots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots")
}

/// In a real browser: the operator signs in through the form, finds a finished session
/// (planned, revised, approved, carried out) on the home page, and its page shows the
/// contract's diff from v1, the verification table and the spend chart.
#[tokio::test]
async fn in_a_browser_the_operator_signs_in_and_reads_a_finished_session() {
    let mut v2 = support::calc::contract(2);
    v2["summary"] = json!("add subtracts instead of adding; mul is left as it is.");
    v2["constraints"] = json!(["Leave mul unchanged."]);
    let mut script = support::calc::fixing_script(2);
    script.insert(
        1,
        Step::tool_call("p2", "submit_contract", v2).when_tools(&["submit_contract"]),
    );
    let world = World::calc(
        ForgeKind::Github,
        script,
        &format!("test: {}\n", support::calc::UNITTEST),
    )
    .await;
    world.label(&world.maintainer, "browser-label").await;
    world.wait_for_state("awaiting_approval").await;
    world
        .comment(
            &world.maintainer,
            "/revise say that mul stays",
            "browser-revise",
        )
        .await;
    support::eventually("contract v2 awaits approval", || async {
        let s = world.session().await;
        (s.contract_version == Some(planwright::contract::ContractVersion(2))
            && s.state.as_str() == "awaiting_approval")
            .then_some(())
    })
    .await;
    let session = world.session().await;
    let base = world.server.base.clone();

    let browser = Browser::start(1280, 2400).await;
    browser.go(&format!("{base}/")).await;
    assert!(browser.source().await.contains("Sign in to planwright"));
    browser.type_into("#token", support::ADMIN_TOKEN).await;
    browser
        .click("form[action='/sign-in'] button[type=submit]")
        .await;
    support::eventually("the home page after signing in", || async {
        browser
            .source()
            .await
            .contains("Failures first")
            .then_some(())
    })
    .await;
    assert_eq!(browser.count("a[href^='/sessions/']").await, 1);
    assert!(browser.text("main table").await.contains("acme/widgets#"));
    browser.resize(1280, 420).await;
    browser.screenshot(&screenshots().join("home.png")).await;
    browser.resize(1280, 2400).await;

    browser.click("a[href^='/sessions/']").await;
    support::eventually("the session page", || async {
        browser
            .url()
            .await
            .ends_with(&format!("/sessions/{}", session.id.as_str()))
            .then_some(())
    })
    .await;
    // The page stays open while the contract is approved and carried out: it follows
    // the session on its own, without anyone reloading it.
    assert!(browser.source().await.contains("awaiting approval"));
    world
        .comment(&world.maintainer, "/approve", "browser-approve")
        .await;
    world.wait_for_state("pr_opened").await;
    support::eventually("the open page to show the pull request", || async {
        browser
            .source()
            .await
            .contains("pull request opened")
            .then_some(())
    })
    .await;
    assert_eq!(browser.count("details[id^='contract-v']").await, 2);
    let diff = browser.text("#contract-v2 .diff").await;
    assert!(
        diff.contains("Changes from v1") && diff.contains("Leave mul unchanged"),
        "{diff}"
    );
    assert!(browser.count(".verification table").await >= 1);
    let verification = browser.text(".verification").await;
    // Baseline against the result, as the pull request shows it.
    assert!(
        verification.contains("1 fixed")
            && verification.contains("baseline")
            && verification.contains("2 passed, 0 failed"),
        "{verification}"
    );
    assert_eq!(browser.count("#spend-chart polyline").await, 1);
    assert!(
        browser
            .text("section[aria-labelledby='cost'] table")
            .await
            .contains("planner")
    );
    browser.screenshot(&screenshots().join("session.png")).await;
    world.server.stop().await;
}
