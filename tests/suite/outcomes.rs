//! Attempt outcomes in the real database (SQLite, and PostgreSQL when the suite runs on
//! it): an ended run is recorded with what each role spent on it, a repository's record
//! is its own, and `routing: auto` reads its starting rung back from it.

use planwright::config::repo::RoutingPolicy;
use planwright::contract::Rung;
use planwright::contract::{ContractVersion, Risk};
use planwright::event::ForgeKind;
use planwright::ids::{IssueNumber, RepoName, RunId, SessionId};
use planwright::llm::Usage;
use planwright::routing::{self, AttemptEnd, AttemptScope, Whose};
use planwright::store::model_usage::{self, Spent};
use planwright::store::outcomes::{
    AttemptCount, NewOutcome, OutcomeSource, ReviewerVerdict, RoleSpend,
};
use planwright::store::{now_ms, runs, sessions};

use crate::support::TestDb;

const HAIKU: &str = "anthropic:claude-haiku-4-5";
const SONNET: &str = "anthropic:claude-sonnet-4-5";

/// Returns once the clock reads a later millisecond than when it was called.
async fn past_this_millisecond() {
    let now = now_ms();
    while now_ms() <= now {
        tokio::task::yield_now().await;
    }
}

fn ladder() -> Vec<Rung> {
    vec![
        Rung {
            executor: "builtin".into(),
            model: HAIKU.into(),
            input_usd_per_mtok: 1.0,
            output_usd_per_mtok: 5.0,
        },
        Rung {
            executor: "builtin".into(),
            model: SONNET.into(),
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
        },
    ]
}

/// A repository that reads only its own outcomes.
fn own(forge: ForgeKind, repo: &RepoName) -> Whose<'_> {
    Whose {
        forge,
        repo,
        groups: &[],
    }
}

fn auto() -> RoutingPolicy {
    RoutingPolicy {
        auto: true,
        ..RoutingPolicy::default()
    }
}

/// Writes `n` outcomes of `model` on `repo` at `risk`, the first `verified` of them
/// verified at `cost` micro-USD each.
#[allow(clippy::too_many_arguments)]
async fn seed(
    db: &TestDb,
    forge: ForgeKind,
    repo: &str,
    risk: Risk,
    model: &str,
    n: usize,
    verified: usize,
    cost: i64,
) {
    let repo = RepoName::parse(repo).unwrap();
    for i in 0..n {
        let run = RunId::generate();
        let ok = i < verified;
        db.db
            .record_outcome(&NewOutcome {
                run: &run,
                forge,
                repo: &repo,
                session: None,
                version: None,
                risk,
                executor: "builtin",
                model: Some(model),
                rung: 0,
                verified: ok,
                judged: true,
                why_not: (!ok).then_some("verification failed: 1 introduced failure"),
                verdict: if ok {
                    ReviewerVerdict::Accepted
                } else {
                    ReviewerVerdict::None
                },
                attempt: 1,
                spend: RoleSpend {
                    executor: Spent {
                        cost_microusd: cost,
                        tokens: 1_000,
                    },
                    ..RoleSpend::default()
                },
                wall_ms: 1_000,
                files_changed: Some(2),
                source: OutcomeSource::Run,
            })
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn routing_auto_starts_on_the_cheapest_rung_this_repository_verified() {
    let db = TestDb::new().await;
    let app = RepoName::parse("acme/app").unwrap();
    // acme/app: haiku verified 9 of 11 at medium risk, sonnet 6 of 6.
    seed(
        &db,
        ForgeKind::Github,
        "acme/app",
        Risk::Medium,
        HAIKU,
        11,
        9,
        100_000,
    )
    .await;
    seed(
        &db,
        ForgeKind::Github,
        "acme/app",
        Risk::Medium,
        SONNET,
        6,
        6,
        310_000,
    )
    .await;
    // Another repository, and the same name on another forge, where haiku never fails:
    // neither speaks for acme/app.
    seed(
        &db,
        ForgeKind::Github,
        "acme/other",
        Risk::High,
        HAIKU,
        20,
        20,
        1,
    )
    .await;
    seed(
        &db,
        ForgeKind::Gitlab,
        "acme/app",
        Risk::High,
        HAIKU,
        20,
        20,
        1,
    )
    .await;

    let (rungs, policy, whose) = (ladder(), auto(), own(ForgeKind::Github, &app));
    let start = |risk| routing::learned_start(&db.db, &whose, risk, &rungs, 1, &policy);
    let medium = start(Risk::Medium).await.unwrap();
    assert_eq!(medium.rung, 0, "{medium:?}");
    assert_eq!(
        medium.reason,
        "9 of 11 verified at medium risk here; \
         anthropic:claude-sonnet-4-5 (builtin) would cost 3.1× more"
    );
    // No record at high risk here, whatever other repositories' say.
    let high = start(Risk::High).await.unwrap();
    assert_eq!(high.rung, 1);
    assert_eq!(
        high.reason,
        "no rung has 5 runs at high risk here yet: starts on the default, \
         anthropic:claude-sonnet-4-5 (builtin)"
    );
    // The other repository's record routes it, and only it.
    let other = RepoName::parse("acme/other").unwrap();
    let there = routing::learned_start(
        &db.db,
        &own(ForgeKind::Github, &other),
        Risk::High,
        &ladder(),
        1,
        &auto(),
    )
    .await
    .unwrap();
    assert_eq!((there.rung, there.learned), (0, true), "{there:?}");
    // Static routing reads nothing and keeps the default.
    let fixed = routing::learned_start(
        &db.db,
        &own(ForgeKind::Github, &app),
        Risk::Medium,
        &ladder(),
        1,
        &RoutingPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!((fixed.rung, fixed.learned), (1, false));

    let stats = db
        .db
        .outcome_stats(ForgeKind::Github, &app, None)
        .await
        .unwrap();
    type Figures = (String, Option<String>, i64, i64, Option<i64>);
    let figures: Vec<Figures> = stats
        .into_iter()
        .map(|s| {
            (
                s.risk,
                s.model,
                s.runs,
                s.verified,
                s.median_verified_microusd,
            )
        })
        .collect();
    assert_eq!(
        figures,
        vec![
            ("medium".into(), Some(HAIKU.into()), 11, 9, Some(100_000)),
            ("medium".into(), Some(SONNET.into()), 6, 6, Some(310_000)),
        ]
    );
    let counts = db.db.attempt_counts().await.unwrap();
    let count = |model: &str, outcome: &str| {
        counts
            .iter()
            .filter(|c| c.model == model && c.outcome == outcome && c.executor == "builtin")
            .map(|c: &AttemptCount| c.attempts)
            .sum::<i64>()
    };
    assert_eq!(count(HAIKU, "verified"), 9 + 20 + 20);
    assert_eq!(count(HAIKU, "failed"), 2);
    assert_eq!(count(SONNET, "verified"), 6);
}

#[tokio::test]
async fn an_operators_group_of_repositories_reads_its_members_outcomes_together() {
    let db = TestDb::new().await;
    // Neither acme repository has 5 runs of haiku at low risk; together they have 6.
    seed(
        &db,
        ForgeKind::Github,
        "acme/app",
        Risk::Low,
        HAIKU,
        3,
        3,
        100,
    )
    .await;
    seed(
        &db,
        ForgeKind::Github,
        "acme/lib",
        Risk::Low,
        HAIKU,
        3,
        3,
        100,
    )
    .await;
    seed(
        &db,
        ForgeKind::Github,
        "other/app",
        Risk::Low,
        HAIKU,
        30,
        30,
        100,
    )
    .await;
    let groups = vec!["acme/*".to_owned()];
    let (rungs, policy) = (ladder(), auto());
    let start = |repo: &'static str, groups: &'static [String]| {
        let (db, rungs, policy) = (&db, &rungs, &policy);
        async move {
            let repo = RepoName::parse(repo).unwrap();
            let whose = Whose {
                forge: ForgeKind::Github,
                repo: &repo,
                groups,
            };
            routing::learned_start(&db.db, &whose, Risk::Low, rungs, 1, policy)
                .await
                .unwrap()
        }
    };
    let groups: &'static [String] = groups.leak();
    let grouped = start("acme/app", groups).await;
    assert_eq!(grouped.rung, 0, "{grouped:?}");
    assert_eq!(
        grouped.reason,
        "6 of 6 verified at low risk in acme/*; \
         anthropic:claude-sonnet-4-5 (builtin) would cost 3.0× more"
    );
    // Outside the group, and without one, a repository reads only its own.
    let alone = start("acme/app", &[]).await;
    assert_eq!((alone.rung, alone.learned), (1, false), "{alone:?}");
    let outside = start("other/app", groups).await;
    assert!(
        outside
            .reason
            .contains("30 of 30 verified at low risk here"),
        "{outside:?}"
    );
}

#[tokio::test]
async fn an_ended_run_is_recorded_once_with_what_each_role_spent_on_it() {
    let db = TestDb::new().await;
    let repo = RepoName::parse("acme/app").unwrap();
    let session = SessionId::generate();
    let mut conn = db.db.pool.acquire().await.unwrap();
    sessions::insert(
        &mut conn,
        &sessions::NewSession {
            id: &session,
            forge: ForgeKind::Github,
            repo: &repo,
            issue: IssueNumber(7),
            installation: None,
            triggered_by: "maria",
        },
    )
    .await
    .unwrap();
    drop(conn);
    let call = |role: &'static str, run: Option<RunId>, cost: i64| {
        let (db, session) = (db.db.clone(), session.clone());
        async move {
            model_usage::record(
                &db,
                &model_usage::NewUsage {
                    session: Some(&session),
                    run: run.as_ref(),
                    role,
                    provider: "anthropic",
                    model: "claude-sonnet-4-5",
                    usage: Usage {
                        input_tokens: 100,
                        output_tokens: 10,
                        ..Usage::default()
                    },
                    cost_microusd: cost,
                },
            )
            .await
            .unwrap();
        }
    };
    call("planner", None, 5_000).await;
    call("scout", None, 700).await;
    let mut conn = db.db.pool.acquire().await.unwrap();
    sessions::insert_contract(
        &mut conn,
        &sessions::NewContract {
            session: &session,
            version: ContractVersion(1),
            sha256: "0",
            body: "{}",
            base_branch: "main",
            base_sha: "0000000000000000000000000000000000000000",
            settings: None,
        },
    )
    .await
    .unwrap();
    drop(conn);
    let scope = AttemptScope {
        forge: ForgeKind::Github,
        repo: &repo,
        risk: Risk::Low,
        base: None,
        source: OutcomeSource::Run,
    };
    let mut ran = Vec::new();
    for attempt in 1..=2 {
        // The reviewer's calls are an attempt's by time: the next starts a moment later.
        past_this_millisecond().await;
        let run = RunId::generate();
        let mut conn = db.db.pool.acquire().await.unwrap();
        runs::insert(
            &mut conn,
            &runs::NewRun {
                id: &run,
                session: &session,
                version: ContractVersion(1),
                attempt,
                executor: "builtin",
                branch: "planwright/7-x",
                workspace: "",
                environment: "host",
                model: Some(HAIKU),
                rung: attempt - 1,
            },
        )
        .await
        .unwrap();
        drop(conn);
        call("executor", Some(run.clone()), 2_000 * attempt).await;
        call("reviewer", None, 300).await;
        let end = routing::attempt_end(runs::RunState::Failed, None, None).unwrap();
        routing::record_attempt(&db.db, &scope, &run, &end)
            .await
            .unwrap();
        ran.push(run);
    }
    // Recorded again (its unfinished work kept): still one row, now verified.
    let verified = AttemptEnd {
        verified: true,
        judged: true,
        why_not: None,
        verdict: ReviewerVerdict::Accepted,
    };
    routing::record_attempt(&db.db, &scope, &ran[1], &verified)
        .await
        .unwrap();

    type Row = (
        String,
        i64,
        i64,
        i64,
        Option<String>,
        i64,
        i64,
        i64,
        i64,
        i64,
        String,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT model, rung, attempt, verified, why_not, planner_microusd, scout_microusd, \
         executor_microusd, reviewer_microusd, executor_tokens, source \
         FROM attempt_outcomes ORDER BY attempt",
    )
    .fetch_all(&db.db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                HAIKU.into(),
                0,
                1,
                0,
                Some("stopped without a result to verify".into()),
                5_000,
                700,
                2_000,
                300,
                110,
                "run".into()
            ),
            // Planning is counted with the version's first attempt only.
            (
                HAIKU.into(),
                1,
                2,
                1,
                None,
                0,
                0,
                4_000,
                300,
                110,
                "run".into()
            ),
        ]
    );
    let stats = db
        .db
        .outcome_stats(ForgeKind::Github, &repo, Some(Risk::Low))
        .await
        .unwrap();
    assert_eq!((stats[0].runs, stats[0].verified), (2, 1), "{stats:?}");
    assert_eq!(stats[0].median_verified_microusd, Some(4_300));
}
