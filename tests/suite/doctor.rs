//! `planwright doctor` against a fake world: a deployment whose every part answers passes,
//! and each broken part (a setting that does not load, an unreachable database, a GitHub
//! key or GitLab token the forge refuses, a model provider that cannot be reached, a
//! default environment image the registry does not have) is reported on its own line, by
//! name, with a non-zero exit.

use crate::support;

use std::path::{Path, PathBuf};

use support::fake_forge::{APP_SLUG, Credential, FakeGithub, app_key};
use support::fake_gitlab::{BOT_USERNAME, FakeGitlab};
use support::model_server::ModelServer;
use support::registry::{Access, Registry, UmociImage};
use support::{TestDb, planwright_command};

const ANTHROPIC_KEY: &str = "sk-ant-doctor-test-key";
const OPENAI_KEY: &str = "sk-openai-doctor-test-key";

struct Report {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Report {
    /// The report line of check `name`.
    fn line(&self, name: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| {
                l.get(5..)
                    .is_some_and(|rest| rest.starts_with(&format!("{name:<16} ")))
            })
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{}", self.stdout))
    }

    fn assert_line(&self, name: &str, status: &str, contains: &[&str]) {
        let line = self.line(name);
        assert!(
            line.starts_with(status),
            "`{name}` is not {status}: {line}\n{}",
            self.stdout
        );
        for part in contains {
            assert!(line.contains(part), "`{name}` lacks {part:?}: {line}");
        }
    }

    fn assert_hides(&self, secret: &str) {
        assert!(
            !self.stdout.contains(secret) && !self.stderr.contains(secret),
            "a secret was printed:\n{}\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// Runs the doctor with exactly these settings and `PATH`.
async fn doctor(env: &[(&str, String)], path: &Path) -> Report {
    let mut cmd = planwright_command();
    cmd.arg("doctor").env("PATH", path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("planwright doctor runs");
    Report {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A `PATH` holding git and bubblewrap from this machine and a `claude` that answers
/// `--version`, but no `codex`: which executors the doctor finds is then known.
fn tools(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["git", "bwrap"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{tool} is installed"));
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho '9.9.9 (Claude Code)'\n").unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Settings that point every part at the fakes.
fn env_for(
    db: &TestDb,
    github: &FakeGithub,
    gitlab: &FakeGitlab,
    models: &ModelServer,
) -> Vec<(&'static str, String)> {
    vec![
        ("PLANWRIGHT_DATA_DIR", db.dir.path().display().to_string()),
        ("PLANWRIGHT_DATABASE_URL", db.url.clone()),
        (
            "PLANWRIGHT_GITHUB_APP_ID",
            support::fake_forge::APP_ID.to_string(),
        ),
        (
            "PLANWRIGHT_GITHUB_PRIVATE_KEY",
            app_key().private_pem.clone(),
        ),
        ("PLANWRIGHT_GITHUB_API_URL", github.url.clone()),
        ("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "gh-secret".into()),
        ("PLANWRIGHT_GITLAB_URL", gitlab.url.clone()),
        (
            "PLANWRIGHT_GITLAB_TOKEN",
            support::fake_gitlab::TOKEN.to_owned(),
        ),
        ("PLANWRIGHT_GITLAB_WEBHOOK_SECRET", "gl-secret".into()),
        ("PLANWRIGHT_ANTHROPIC_API_KEY", ANTHROPIC_KEY.into()),
        ("PLANWRIGHT_ANTHROPIC_BASE_URL", models.anthropic_base()),
        ("PLANWRIGHT_OPENAI_API_KEY", OPENAI_KEY.into()),
        ("PLANWRIGHT_OPENAI_BASE_URL", models.openai_base()),
        ("PLANWRIGHT_PLANNER_MODEL", "anthropic:claude-test".into()),
    ]
}

fn set(env: &mut Vec<(&'static str, String)>, key: &'static str, value: &str) {
    env.retain(|(k, _)| *k != key);
    env.push((key, value.to_owned()));
}

#[tokio::test]
async fn a_deployment_whose_parts_all_answer_passes() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let gitlab = FakeGitlab::start().await;
    let models = ModelServer::start(Vec::new()).await;
    let path = tools(db.dir.path());
    let report = doctor(&env_for(&db, &github, &gitlab, &models), &path).await;
    assert!(report.success, "{}\n{}", report.stdout, report.stderr);

    report.assert_line("settings", "ok", &["loaded"]);
    report.assert_line(
        "operator pages",
        "warn",
        &[
            "the operator cannot sign in to the session pages (no ADMIN_TOKEN)",
            "/metrics refused",
        ],
    );
    report.assert_line("database", "ok", &["migrations applied"]);
    report.assert_line(
        "github installations",
        "ok",
        &["0 installation(s), each with every permission and event"],
    );
    report.assert_line(
        "github app",
        "ok",
        &[
            &format!("GET /app on {} answered", github.url),
            &format!("{APP_SLUG}[bot]"),
        ],
    );
    report.assert_line(
        "gitlab token",
        "ok",
        &[&format!("the token is @{BOT_USERNAME}'s")],
    );
    report.assert_line("anthropic", "ok", &["accepts ANTHROPIC_API_KEY"]);
    report.assert_line("openai", "ok", &["accepts OPENAI_API_KEY"]);
    report.assert_line("git", "ok", &["git version"]);
    report.assert_line("executor claude", "ok", &["9.9.9 (Claude Code)"]);
    report.assert_line("executor codex", "warn", &["`codex` is not on PATH"]);
    report.assert_line("sandbox", "ok", &["bubblewrap started `true`"]);
    report.assert_line("sockets", "ok", &["are made and reached"]);
    report.assert_line(
        "environment",
        "warn",
        &[
            "ENVIRONMENT_IMAGE is not set",
            "use the planwright host's tools",
        ],
    );
    report.assert_line("disk space", "ok", &["GiB free in"]);

    // The keys were really sent, each the way its provider reads it, and never printed.
    let asked: Vec<_> = models
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/models")
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked
            .iter()
            .any(|r| r.header("x-api-key") == Some(ANTHROPIC_KEY)
                && r.header("anthropic-version").is_some())
    );
    assert!(
        asked
            .iter()
            .any(|r| r.header("authorization") == Some(&format!("Bearer {OPENAI_KEY}")))
    );
    assert_eq!(
        github
            .requests()
            .iter()
            .filter(|r| r.path == "/app" && r.credential == Credential::Jwt)
            .count(),
        1
    );
    report.assert_hides(ANTHROPIC_KEY);
    report.assert_hides(OPENAI_KEY);
    report.assert_hides(support::fake_gitlab::TOKEN);
    report.assert_hides("PRIVATE KEY");
}

#[tokio::test]
async fn an_installation_that_has_not_accepted_the_new_events_is_told_which() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    github.add_installation(77, &[]);
    github.add_installation(78, &[]);
    // Installed before the app asked for check suites and statuses.
    github.set_grant(
        78,
        &[
            ("issues", "write"),
            ("pull_requests", "write"),
            ("contents", "write"),
            ("checks", "write"),
            ("metadata", "read"),
            ("members", "read"),
        ],
        &[
            "issues",
            "issue_comment",
            "pull_request_review",
            "pull_request_review_comment",
        ],
    );
    let gitlab = FakeGitlab::start().await;
    let models = ModelServer::start(Vec::new()).await;
    let path = tools(db.dir.path());
    let report = doctor(&env_for(&db, &github, &gitlab, &models), &path).await;
    report.assert_line(
        "github installations",
        "warn",
        &[
            "installation 78 (org-78) has not accepted the permission statuses: read, the event check_suite, the event status",
            "review the request",
        ],
    );
    assert!(
        !report.stdout.contains("installation 77"),
        "{}",
        report.stdout
    );
    github.set_grant(78, &[], &[]);
    let report = doctor(&env_for(&db, &github, &gitlab, &models), &path).await;
    report.assert_line(
        "github installations",
        "warn",
        &["installation 78 (org-78) has not accepted the permission checks: write"],
    );
}

/// Another RSA key: well-formed, but not the one the fake GitHub knows the app by.
fn foreign_key() -> String {
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .output()
        .expect("openssl is installed");
    assert!(out.status.success(), "openssl genrsa failed");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn refused_credentials_and_an_unreachable_provider_are_named() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let gitlab = FakeGitlab::start().await;
    let models = ModelServer::start(Vec::new()).await;
    let path = tools(db.dir.path());
    let mut env = env_for(&db, &github, &gitlab, &models);
    set(&mut env, "PLANWRIGHT_GITHUB_PRIVATE_KEY", &foreign_key());
    set(
        &mut env,
        "PLANWRIGHT_GITLAB_TOKEN",
        "glpat-not-a-token-it-knows",
    );
    // Nothing listens on port 1.
    set(
        &mut env,
        "PLANWRIGHT_ANTHROPIC_BASE_URL",
        "http://127.0.0.1:1",
    );
    let report = doctor(&env, &path).await;
    assert!(!report.success, "{}", report.stdout);

    report.assert_line(
        "github app",
        "FAIL",
        &["(401)", "GITHUB_PRIVATE_KEY", "GITHUB_APP_ID"],
    );
    assert!(
        github
            .requests()
            .iter()
            .any(|r| r.path == "/app" && matches!(r.credential, Credential::Invalid(_))),
        "the doctor did not ask GitHub"
    );
    report.assert_line("gitlab token", "FAIL", &["(401)", "GITLAB_TOKEN"]);
    report.assert_line("anthropic", "FAIL", &["Could not reach http://127.0.0.1:1"]);
    // The parts that work still say so.
    report.assert_line("database", "ok", &[]);
    report.assert_line("openai", "ok", &[]);
    for name in ["github app", "gitlab token", "anthropic"] {
        assert!(report.stderr.contains(name), "{}", report.stderr);
    }
    report.assert_hides("glpat-not-a-token-it-knows");
    report.assert_hides(ANTHROPIC_KEY);
}

#[tokio::test]
async fn an_unreachable_database_fails_without_showing_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = tools(dir.path());
    let env = vec![
        (
            "PLANWRIGHT_DATA_DIR",
            dir.path().join("data").display().to_string(),
        ),
        (
            "PLANWRIGHT_DATABASE_URL",
            "postgres://planwright:s3cret-pw@127.0.0.1:1/planwright".to_owned(),
        ),
    ];
    let report = doctor(&env, &path).await;
    assert!(!report.success, "{}", report.stdout);
    report.assert_line(
        "database",
        "FAIL",
        &[
            "Could not connect to PostgreSQL at postgres://planwright:***@127.0.0.1:1/planwright",
            "check DATABASE_URL",
        ],
    );
    report.assert_hides("s3cret-pw");
    assert!(report.stderr.contains("fix database"), "{}", report.stderr);
    // Nothing configured is a warning, not a failure.
    report.assert_line("github app", "warn", &["not configured"]);
    report.assert_line("gitlab token", "warn", &["not configured"]);
    report.assert_line("anthropic", "warn", &["ANTHROPIC_API_KEY is not set"]);
}

#[tokio::test]
async fn a_database_not_yet_migrated_is_a_warning_and_is_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = tools(dir.path());
    let url = support::empty_database_url(dir.path()).await;
    let env = vec![
        (
            "PLANWRIGHT_DATA_DIR",
            dir.path().join("data").display().to_string(),
        ),
        ("PLANWRIGHT_DATABASE_URL", url.clone()),
    ];
    let report = doctor(&env, &path).await;
    assert!(report.success, "{}\n{}", report.stdout, report.stderr);
    if url.starts_with("sqlite:") {
        report.assert_line(
            "database",
            "warn",
            &["does not exist yet", "planwright migrate"],
        );
        assert!(
            !dir.path().join("empty").exists(),
            "the doctor created the database"
        );
    } else {
        report.assert_line(
            "database",
            "warn",
            &["migrations pending", "planwright migrate"],
        );
    }
}

/// A `DATA_DIR` longer than a socket address holds: the doctor makes and reaches a run's
/// sockets there, and starts a sandbox bridged to one. A model proxy socket the operator
/// names past the limit is refused at once, with the limit.
#[tokio::test]
async fn a_long_data_dir_holds_sockets_and_a_long_proxy_socket_is_refused() {
    let db = TestDb::new().await;
    let github = FakeGithub::start().await;
    let gitlab = FakeGitlab::start().await;
    let models = ModelServer::start(Vec::new()).await;
    let path = tools(db.dir.path());
    let data = db.dir.path().join("d".repeat(120));
    let mut env = env_for(&db, &github, &gitlab, &models);
    set(&mut env, "PLANWRIGHT_DATA_DIR", data.to_str().unwrap());
    let report = doctor(&env, &path).await;
    assert!(report.success, "{}\n{}", report.stdout, report.stderr);
    report.assert_line(
        "sockets",
        "ok",
        &[
            "more than the 107 a socket address holds",
            "through their folder",
        ],
    );
    report.assert_line("bridge", "ok", &["a sandbox with a bridged socket started"]);

    let named = data.join("model-proxy.sock");
    set(
        &mut env,
        "PLANWRIGHT_MODEL_PROXY_SOCKET",
        named.to_str().unwrap(),
    );
    let report = doctor(&env, &path).await;
    assert!(!report.success, "{}", report.stdout);
    report.assert_line(
        "settings",
        "FAIL",
        &["PLANWRIGHT_MODEL_PROXY_SOCKET", "at most 107 bytes"],
    );
}

#[tokio::test]
async fn a_setting_that_does_not_load_is_the_one_failure_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = tools(dir.path());
    let env = vec![
        ("PLANWRIGHT_DATA_DIR", dir.path().display().to_string()),
        ("PLANWRIGHT_LISTEN", "not-an-address".to_owned()),
    ];
    let report = doctor(&env, &path).await;
    assert!(!report.success, "{}", report.stdout);
    report.assert_line("settings", "FAIL", &["PLANWRIGHT_LISTEN", "not-an-address"]);
    assert_eq!(report.stdout.lines().count(), 1, "{}", report.stdout);
}

/// The images unpacked in DATA_DIR's cache, by digest hex.
fn cached_images(data: &Path) -> Vec<String> {
    match std::fs::read_dir(data.join("environments/images")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn the_default_environment_image_is_pulled_into_the_cache_or_its_refusal_named() {
    let registry = Registry::start(Access::Anonymous).await;
    let db = TestDb::new().await;
    let mut image = UmociImage::new(db.dir.path(), "tools");
    image.layer(|root| std::fs::write(root.join("hello"), "from the image\n").unwrap());
    registry.push_layout(&image.layout, "tools", "doctor/tools:1");
    let path = tools(db.dir.path());
    let data = db.dir.path().join("data");
    let env = |image: String| {
        vec![
            ("PLANWRIGHT_DATA_DIR", data.display().to_string()),
            ("PLANWRIGHT_DATABASE_URL", db.url.clone()),
            ("PLANWRIGHT_ENVIRONMENT_IMAGE", image),
        ]
    };

    let pullable = registry.reference("doctor/tools:1");
    let report = doctor(&env(pullable.clone()), &path).await;
    assert!(report.success, "{}\n{}", report.stdout, report.stderr);
    let cached = cached_images(&data);
    assert_eq!(cached.len(), 1, "{cached:?}\n{}", report.stdout);
    report.assert_line(
        "environment",
        "ok",
        &[
            &format!("ENVIRONMENT_IMAGE {pullable} is sha256:{}", cached[0]),
            " MiB unpacked (pulled now)",
        ],
    );
    let root = data
        .join("environments/images")
        .join(&cached[0])
        .join("rootfs");
    assert_eq!(
        std::fs::read_to_string(root.join("hello")).unwrap(),
        "from the image\n"
    );
    // A run, or the doctor again, finds it there.
    let report = doctor(&env(pullable), &path).await;
    report.assert_line("environment", "ok", &["(already in the cache)"]);

    let missing = registry.reference("doctor/absent:1");
    let report = doctor(&env(missing.clone()), &path).await;
    assert!(!report.success, "{}", report.stdout);
    report.assert_line(
        "environment",
        "FAIL",
        &[&format!("Could not pull the image {missing}"), "404"],
    );
    assert!(
        report.stderr.contains("fix environment"),
        "{}",
        report.stderr
    );
    assert_eq!(cached_images(&data), cached, "nothing else was kept");

    // Without bwrap no run can use an image: said before anything is pulled.
    let mut unsandboxed = env(registry.reference("doctor/other:1"));
    unsandboxed.push(("PLANWRIGHT_SANDBOX", "none".into()));
    unsandboxed.push(("PLANWRIGHT_UNSAFE_NO_SANDBOX", "1".into()));
    let report = doctor(&unsandboxed, &path).await;
    assert!(!report.success, "{}", report.stdout);
    report.assert_line(
        "environment",
        "FAIL",
        &["cannot be used with SANDBOX=none", "set SANDBOX=bwrap"],
    );
}

#[tokio::test]
async fn registry_credentials_keyed_by_host_alone_are_warned_about_and_prefixed_ones_not() {
    let db = TestDb::new().await;
    let path = tools(db.dir.path());
    let auth = db.dir.path().join("config.json");
    std::fs::write(
        &auth,
        r#"{"auths": {
            "ghcr.io": {"username": "bot", "password": "host-wide-secret"},
            "registry.example.com/acme": {"username": "bot", "password": "prefixed-secret"}
        }}"#,
    )
    .unwrap();
    let env = vec![
        (
            "PLANWRIGHT_DATA_DIR",
            db.dir.path().join("data").display().to_string(),
        ),
        ("PLANWRIGHT_DATABASE_URL", db.url.clone()),
        ("PLANWRIGHT_REGISTRY_AUTH", auth.display().to_string()),
    ];
    let report = doctor(&env, &path).await;
    assert!(report.success, "{}\n{}", report.stdout, report.stderr);
    let warnings: Vec<&str> = report
        .stdout
        .lines()
        .filter(|l| l.starts_with(&format!("warn {:<16} ", "registry auth")))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", report.stdout);
    assert!(
        warnings[0].contains("`ghcr.io`") && warnings[0].contains("key it by repository prefix"),
        "{}",
        warnings[0]
    );
    report.assert_hides("host-wide-secret");
    report.assert_hides("prefixed-secret");
}

/// A program of this machine, by its absolute path (the doctor runs with a `PATH` of its
/// own).
fn host_program(name: &str) -> String {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is installed"))
        .display()
        .to_string()
}

/// Runs the doctor as a pod would see it (`KUBERNETES_SERVICE_HOST` set), inside a user
/// and mount namespace of its own where `prepare` (a shell command) first takes away one
/// of bubblewrap's needs; as the image's user 10001 in a user namespace below that one
/// when `as_image_user`, else as that namespace's root.
async fn doctor_in_a_pod_without(prepare: &str, as_image_user: bool) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let path = tools(dir.path());
    let user = if as_image_user {
        format!(
            "{} --user --map-user=10001 --map-group=10001 ",
            host_program("unshare")
        )
    } else {
        String::new()
    };
    let script = format!("{prepare} && exec {user}\"$0\" doctor");
    let program = planwright_command().get_program().to_owned();
    let mut cmd = std::process::Command::new(host_program("unshare"));
    cmd.args([
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
    ])
    .arg(host_program("sh"))
    .args(["-c", &script])
    .arg(program)
    .env("PATH", &path)
    .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    .env("PLANWRIGHT_DATA_DIR", dir.path().join("data"))
    .env(
        "PLANWRIGHT_DATABASE_URL",
        format!("sqlite://{}/pw.db", dir.path().display()),
    );
    for (name, _) in std::env::vars() {
        if name.starts_with("PLANWRIGHT_") && name != "PLANWRIGHT_DATA_DIR" {
            cmd.env_remove(&name);
        }
    }
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("unshare runs");
    Report {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A container runtime's mask over a /proc path (as every runtime sets by default) keeps
/// bubblewrap from mounting a /proc of its own: the sandbox fails, and the doctor names
/// the pod field that lifts it.
#[tokio::test]
async fn a_pod_whose_proc_is_masked_is_told_to_unmask_it() {
    // The same pod with /proc whole runs its sandbox: the mask alone makes the difference.
    let whole = doctor_in_a_pod_without("true", true).await;
    whole.assert_line("user namespaces", "ok", &["allowed"]);
    whole.assert_line("sandbox", "ok", &["bubblewrap started `true`"]);

    let report = doctor_in_a_pod_without(
        &format!("{} --bind /dev/null /proc/keys", host_program("mount")),
        true,
    )
    .await;
    assert!(!report.success, "{}\n{}", report.stdout, report.stderr);
    report.assert_line(
        "user namespaces",
        "warn",
        &[
            "/proc has covered paths (/proc/keys)",
            "set securityContext.procMount to Unmasked",
            "hostUsers: false",
            "in a Kubernetes pod",
        ],
    );
    report.assert_line(
        "sandbox",
        "FAIL",
        &["Can't mount proc", "it lacks", "procMount to Unmasked"],
    );
}

/// A node that allows no user namespaces: named as the node's setting, which no pod field
/// changes.
#[tokio::test]
async fn a_pod_on_a_node_without_user_namespaces_is_told_it_is_the_node() {
    let report =
        doctor_in_a_pod_without("echo 0 > /proc/sys/user/max_user_namespaces", false).await;
    assert!(!report.success, "{}\n{}", report.stdout, report.stderr);
    report.assert_line(
        "user namespaces",
        "warn",
        &[
            "making a user namespace was refused",
            "user.max_user_namespaces is 0 on the node",
        ],
    );
    report.assert_line("sandbox", "FAIL", &["max_user_namespaces is 0"]);
}
