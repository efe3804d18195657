//! `GET /metrics` on the real server: every named series is exposed in the Prometheus text
//! format, and each moves when the work it counts happens — a webhook delivered, a job
//! run, a job waiting, a session started, a model call recorded, a sandbox run.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use planwright::event::ForgeKind;
use planwright::ids::{IssueNumber, RepoName, SessionId};
use planwright::llm::Usage;
use planwright::sandbox::{Bwrap, Command, Sandbox};
use planwright::server::Role;
use planwright::store::{jobs, model_usage, now_ms, sessions};
use support::{TestDb, TestServer, eventually};

/// A scrape: each sample's series (name and labels, as rendered) with its value.
struct Scrape {
    text: String,
    samples: BTreeMap<String, f64>,
}

impl Scrape {
    fn get(&self, series: &str) -> Option<f64> {
        self.samples.get(series).copied()
    }

    /// The value, or 0 for a series not exposed yet (a count of nothing).
    fn value(&self, series: &str) -> f64 {
        self.get(series).unwrap_or(0.0)
    }
}

async fn scrape(server: &TestServer) -> Scrape {
    let response = server
        .client
        .get(format!("{}/metrics", server.base))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .expect("/metrics answers");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    Scrape {
        samples: parse(&text),
        text,
    }
}

/// Parses the exposition, checking as it goes that every sample belongs to a family
/// announced with HELP and TYPE, and that no series appears twice.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = Vec::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has a name and a text");
            assert!(!help.is_empty(), "{line}");
            helped.push(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a name and a type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                helped.contains(&name.to_owned()),
                "TYPE before HELP: {line}"
            );
            assert!(
                families.insert(name.to_owned(), kind.to_owned()).is_none(),
                "family announced twice: {line}"
            );
        } else {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| families.get(*base).is_some_and(|k| k == "histogram"))
                .unwrap_or(name);
            assert!(families.contains_key(family), "no TYPE for {line}");
            if families[family] == "counter" {
                assert!(name.ends_with("_total"), "a counter without _total: {line}");
            }
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("not a number: {line}")),
            };
            assert!(
                samples.insert(series.to_owned(), value).is_none(),
                "series exposed twice: {line}"
            );
        }
    }
    samples
}

fn ping() -> Vec<u8> {
    std::fs::read(support::fixtures().join("github-webhooks/ping._.1.json")).unwrap()
}

#[tokio::test]
async fn deliveries_and_jobs_are_counted_as_they_happen() {
    let db = TestDb::new().await;
    let server = TestServer::start(
        support::settings(&db, &[]),
        Role::All,
        planwright::session::dispatch::handler,
    )
    .await;
    let before = scrape(&server).await;
    for family in [
        "planwright_deliveries_total counter",
        "planwright_jobs gauge",
        "planwright_queue_oldest_age_seconds gauge",
        "planwright_sessions gauge",
        "planwright_model_tokens_total counter",
        "planwright_model_cost_usd_total counter",
        "planwright_sandbox_runs_total counter",
        "planwright_sandbox_run_duration_seconds histogram",
    ] {
        assert!(
            before.text.contains(&format!("# TYPE {family}\n")),
            "{family} missing:\n{}",
            before.text
        );
    }
    assert_eq!(before.get("planwright_queue_oldest_age_seconds"), Some(0.0));
    let delivered = r#"planwright_deliveries_total{forge="github",event="ping",outcome="queued"}"#;
    let done = r#"planwright_jobs{kind="event",state="done"}"#;
    assert_eq!(before.get(delivered), None, "{}", before.text);

    let body = ping();
    let response = server
        .github("ping", "metrics-ping-1", &body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let after = eventually("the ping's job to be done", || async {
        let now = scrape(&server).await;
        (now.value(done) >= 1.0).then_some(now)
    })
    .await;
    assert_eq!(after.get(delivered), Some(1.0), "{}", after.text);
    assert_eq!(after.value(done), before.value(done) + 1.0);

    // A redelivery of the same delivery is one delivery.
    server
        .github("ping", "metrics-ping-1", &body)
        .send()
        .await
        .unwrap();
    // An event planwright does not act on, with a name that needs escaping as a label.
    let odd = "odd\"event\\name";
    let response = server
        .github(odd, "metrics-odd-1", &body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let last = scrape(&server).await;
    assert_eq!(last.get(delivered), Some(1.0));
    assert_eq!(
        last.get(r#"planwright_deliveries_total{forge="github",event="odd\"event\\name",outcome="ignored"}"#),
        Some(1.0),
        "{}",
        last.text
    );
    server.stop().await;
}

#[tokio::test]
async fn waiting_jobs_sessions_and_model_usage_show_at_the_next_scrape() {
    let db = TestDb::new().await;
    // Web only: nothing claims the jobs, so they wait.
    let server = TestServer::web(&db).await;
    let before = scrape(&server).await;
    for state in ["planning", "awaiting_approval", "pr_opened", "failed"] {
        assert_eq!(
            before.get(&format!("planwright_sessions{{state=\"{state}\"}}")),
            Some(0.0),
            "{}",
            before.text
        );
    }

    let mut conn = db.db.pool.acquire().await.unwrap();
    let mut waiting = jobs::NewJob::new("plan", "{}", 3);
    waiting.run_at = Some(now_ms() - 90_000);
    jobs::enqueue(&mut conn, &waiting).await.unwrap();
    // Held back for a retry's backoff: not waiting yet.
    let mut later = jobs::NewJob::new("plan", "{}", 3);
    later.run_at = Some(now_ms() + 3_600_000);
    jobs::enqueue(&mut conn, &later).await.unwrap();
    let session = SessionId::generate();
    sessions::insert(
        &mut conn,
        &sessions::NewSession {
            id: &session,
            forge: ForgeKind::Github,
            repo: &RepoName::parse("octo/metrics").unwrap(),
            issue: IssueNumber(7),
            installation: None,
            triggered_by: "maintainer",
        },
    )
    .await
    .unwrap();
    drop(conn);
    for (role, input, output, cost) in [
        ("planner", 1200, 300, 45_000),
        ("planner", 800, 100, 15_000),
        ("scout", 50, 20, 500),
    ] {
        model_usage::record(
            &db.db,
            &model_usage::NewUsage {
                session: Some(&session),
                run: None,
                role,
                provider: "anthropic",
                model: "claude-test",
                usage: Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cache_read_tokens: 7,
                    cache_write_tokens: 0,
                },
                cost_microusd: cost,
            },
        )
        .await
        .unwrap();
    }

    let after = scrape(&server).await;
    assert_eq!(
        after.get(r#"planwright_jobs{kind="plan",state="queued"}"#),
        Some(2.0)
    );
    let age = after.value("planwright_queue_oldest_age_seconds");
    assert!(
        (90.0..3600.0).contains(&age),
        "oldest waiting job age {age}"
    );
    assert_eq!(
        after.get(r#"planwright_sessions{state="planning"}"#),
        Some(1.0)
    );
    let planner = r#"role="planner",provider="anthropic",model="claude-test""#;
    assert_eq!(
        after.get(&format!(
            "planwright_model_tokens_total{{{planner},kind=\"input\"}}"
        )),
        Some(2000.0)
    );
    assert_eq!(
        after.get(&format!(
            "planwright_model_tokens_total{{{planner},kind=\"output\"}}"
        )),
        Some(400.0)
    );
    assert_eq!(
        after.get(&format!(
            "planwright_model_tokens_total{{{planner},kind=\"cache_read\"}}"
        )),
        Some(14.0)
    );
    assert_eq!(
        after.get(&format!("planwright_model_cost_usd_total{{{planner}}}")),
        Some(0.06)
    );
    assert_eq!(
        after.get(r#"planwright_model_cost_usd_total{role="scout",provider="anthropic",model="claude-test"}"#),
        Some(0.0005)
    );
    server.stop().await;
}

#[tokio::test]
async fn attempts_are_counted_by_executor_model_and_outcome() {
    use planwright::contract::Risk;
    use planwright::ids::RunId;
    use planwright::store::outcomes::{NewOutcome, OutcomeSource, ReviewerVerdict, RoleSpend};

    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    let before = scrape(&server).await;
    assert!(
        before
            .text
            .contains("# TYPE planwright_attempts_total counter\n"),
        "{}",
        before.text
    );
    let repo = RepoName::parse("octo/metrics").unwrap();
    // Verified, failed (judged), stopped (cancelled); and the command executor's, which
    // names no model.
    for (model, verified, judged, executor) in [
        (Some("anthropic:claude-haiku-4-5"), true, true, "builtin"),
        (Some("anthropic:claude-haiku-4-5"), true, true, "builtin"),
        (Some("anthropic:claude-haiku-4-5"), false, true, "builtin"),
        (Some("anthropic:claude-haiku-4-5"), false, false, "builtin"),
        (None, false, true, "command"),
    ] {
        db.db
            .record_outcome(&NewOutcome {
                run: &RunId::generate(),
                forge: ForgeKind::Github,
                repo: &repo,
                session: None,
                version: None,
                risk: Risk::Low,
                executor,
                model,
                rung: 0,
                verified,
                judged,
                why_not: (!verified).then_some("verification failed"),
                verdict: ReviewerVerdict::None,
                attempt: 1,
                spend: RoleSpend::default(),
                wall_ms: 10,
                files_changed: None,
                source: OutcomeSource::Run,
            })
            .await
            .unwrap();
    }
    let after = scrape(&server).await;
    let series = |executor: &str, model: &str, outcome: &str| {
        after.get(&format!(
            "planwright_attempts_total{{source=\"run\",executor=\"{executor}\",model=\"{model}\",outcome=\"{outcome}\"}}"
        ))
    };
    let haiku = "anthropic:claude-haiku-4-5";
    assert_eq!(
        series("builtin", haiku, "verified"),
        Some(2.0),
        "{}",
        after.text
    );
    assert_eq!(
        series("builtin", haiku, "failed"),
        Some(1.0),
        "{}",
        after.text
    );
    assert_eq!(
        series("builtin", haiku, "stopped"),
        Some(1.0),
        "{}",
        after.text
    );
    assert_eq!(
        series("command", "none", "failed"),
        Some(1.0),
        "{}",
        after.text
    );
    server.stop().await;
}

#[tokio::test]
async fn sandbox_runs_are_counted_by_outcome_with_their_duration() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new().await;
    let server = TestServer::web(&db).await;
    // The sandbox's host user must be able to reach the workspace.
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = scrape(&server).await;
    let count = |s: &Scrape, outcome: &str| {
        s.value(&format!(
            "planwright_sandbox_runs_total{{outcome=\"{outcome}\"}}"
        ))
    };

    let sandbox = Bwrap::new(Vec::new()).expect("bubblewrap is installed");
    let run = |argv: &[&str]| {
        let mut command = Command::new(root.path(), argv.iter().map(|a| (*a).to_owned()).collect());
        command.limits.wall = Duration::from_secs(60);
        command
    };
    assert!(sandbox.run(&run(&["true"])).await.unwrap().exit.success());
    assert!(!sandbox.run(&run(&["false"])).await.unwrap().exit.success());
    let mut slow = run(&["sleep", "30"]);
    slow.limits.wall = Duration::from_millis(300);
    assert!(sandbox.run(&slow).await.unwrap().timed_out);
    let mut outside = run(&["true"]);
    outside.cwd = Some("../..".into());
    assert!(sandbox.run(&outside).await.is_err());

    let after = scrape(&server).await;
    // Other tests in this process may run sandboxes too: at least ours were counted.
    for outcome in ["ok", "failed", "timeout", "error"] {
        assert!(
            count(&after, outcome) >= count(&before, outcome) + 1.0,
            "{outcome}: {}",
            after.text
        );
    }
    let runs = |s: &Scrape| s.value("planwright_sandbox_run_duration_seconds_count");
    assert!(runs(&after) >= runs(&before) + 4.0, "{}", after.text);
    assert_eq!(
        after.get(r#"planwright_sandbox_run_duration_seconds_bucket{le="+Inf"}"#),
        Some(runs(&after))
    );
    // The timed-out run alone took at least its 300 ms limit.
    let sum = |s: &Scrape| s.value("planwright_sandbox_run_duration_seconds_sum");
    assert!(sum(&after) - sum(&before) >= 0.3, "{}", after.text);
    // Buckets are cumulative: ordered by their bound, counts never fall.
    let mut buckets: Vec<(f64, f64)> = after
        .samples
        .iter()
        .filter_map(|(k, v)| {
            let le = k
                .strip_prefix("planwright_sandbox_run_duration_seconds_bucket{le=\"")?
                .strip_suffix("\"}")?;
            Some((
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                },
                *v,
            ))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.len() > 2, "{}", after.text);
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    // The timed-out run is not in the smallest bucket.
    assert!(buckets[0].1 < runs(&after), "{buckets:?}");
    server.stop().await;
}

/// `/metrics` from the main (often public) listener: anyone asking without a token learns
/// nothing; a scraper's METRICS_TOKEN or the operator's ADMIN_TOKEN gets the exposition.
#[tokio::test]
async fn metrics_show_nothing_without_a_token_on_the_main_listener() {
    const METRICS_TOKEN: &str = "metrics-test-token-81c4d0";
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_METRICS_TOKEN", METRICS_TOKEN)]).await;
    let get = |token: Option<&str>| {
        let mut request = server.client.get(format!("{}/metrics", server.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    for (token, why) in [
        (None, "no token"),
        (Some("metrics-test-token-81c4d1"), "a wrong token"),
        (Some(""), "an empty token"),
    ] {
        let refused = get(token).await.unwrap();
        assert_eq!(refused.status(), 401, "{why}");
        assert_eq!(
            refused.headers()["www-authenticate"],
            "Bearer realm=\"planwright\""
        );
        let text = refused.text().await.unwrap();
        assert!(!text.contains("planwright_"), "{why}: {text}");
        assert!(text.contains("METRICS_TOKEN"), "{text}");
    }
    for token in [METRICS_TOKEN, support::ADMIN_TOKEN] {
        let shown = get(Some(token)).await.unwrap();
        assert_eq!(shown.status(), 200);
        let text = shown.text().await.unwrap();
        assert!(text.contains("# TYPE planwright_sessions gauge"), "{text}");
        assert!(text.contains("planwright_model_cost_usd_total"), "{text}");
    }
    server.stop().await;

    // With neither token set, the main listener serves no metrics at all, and says so.
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_ADMIN_TOKEN", "")]).await;
    let off = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(off.status(), 403);
    let text = off.text().await.unwrap();
    assert!(!text.contains("planwright_"), "{text}");
    assert!(text.contains("METRICS_LISTEN"), "{text}");
    server.stop().await;
}

/// METRICS_LISTEN moves `/metrics` to a listener of its own, which the operator keeps
/// private: served there without a token, and no longer on the main listener.
#[tokio::test]
async fn metrics_on_a_listener_of_their_own_are_served_only_there() {
    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_METRICS_LISTEN", "127.0.0.1:0")]).await;
    let main = server
        .client
        .get(format!("{}/metrics", server.base))
        .bearer_auth(support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 404);
    let own = server.metrics_base.clone().expect("a metrics listener");
    assert_ne!(own, server.base);
    let scraped = server
        .client
        .get(format!("{own}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    let text = scraped.text().await.unwrap();
    assert!(text.contains("# TYPE planwright_sessions gauge"), "{text}");
    // Only the metrics are there: not the webhooks, nor the status page.
    for path in ["/", "/healthz", "/webhooks/github"] {
        let other = server
            .client
            .get(format!("{own}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), 404, "{path}");
    }
    server.stop().await;
}

/// The fake's requests by (route, status) as planwright names routes: the API's only
/// (git over smart HTTP is not an API call), and without installation tokens, which
/// octocrab also asks for inside its own client.
fn fake_routes(
    requests: &[(String, String, u16)],
    forge: ForgeKind,
) -> BTreeMap<(String, String), u64> {
    let mut routes = BTreeMap::new();
    for (method, path, status) in requests {
        if path.contains(".git/") {
            continue;
        }
        let path = match forge {
            ForgeKind::Gitlab => path.strip_prefix("/api/v4").unwrap_or(path),
            _ => path.as_str(),
        };
        let route = planwright::forge::route(method, path);
        if route.ends_with("/access_tokens") {
            continue;
        }
        *routes.entry((route, status.to_string())).or_default() += 1;
    }
    routes
}

async fn every_forge_request_is_counted_by_route_and_status(on: ForgeKind) {
    use support::world::World;
    let world = World::calc(
        on,
        support::calc::fixing_script(2),
        &format!("test: {}\n", support::calc::UNITTEST),
    )
    .await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    world.all_jobs_settled().await;
    let requests: Vec<(String, String, u16)> = match &world.fake {
        support::world::Fake::Github(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path, r.status))
            .collect(),
        support::world::Fake::Gitlab(f) => f
            .requests()
            .into_iter()
            .map(|r| (r.method, r.path, r.status))
            .collect(),
    };
    let seen = fake_routes(&requests, on);
    let forge = match on {
        ForgeKind::Gitlab => "gitlab",
        _ => "github",
    };
    let scrape = scrape(&world.server).await;
    let prefix = format!("planwright_forge_requests_total{{forge=\"{forge}\",route=\"");
    let mut counted = BTreeMap::new();
    for (series, n) in &scrape.samples {
        let Some(rest) = series.strip_prefix(&prefix) else {
            continue;
        };
        let (route, status) = rest
            .trim_end_matches("\"}")
            .split_once("\",status=\"")
            .unwrap_or_else(|| panic!("an unreadable series: {series}"));
        if !route.ends_with("/access_tokens") {
            counted.insert((route.to_owned(), status.to_owned()), *n as u64);
        }
    }
    assert!(seen.len() > 5, "the flow made few requests: {seen:#?}");
    assert_eq!(counted, seen, "{}", scrape.text);
    world.server.stop().await;
}

crate::on_both_forges!(every_forge_request_is_counted_by_route_and_status,);
