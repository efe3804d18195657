//! A setup phase restored from the setup cache against the same phase run: the base of a
//! repository whose setup makes a virtualenv and pip-installs its `requirements.txt`
//! offline from a local folder of wheels, verified as planwright verifies a base
//! (`Verifier::baseline`: setup, then a check importing the packages) in the real sandbox.
//! A miss runs setup into an empty cache and keeps it; a hit restores it. Round-robin,
//! each round on fresh checkouts.
//!
//! The wheels are made here (pure Python, as many as `PLANWRIGHT_BENCH_SETUP_PACKAGES`,
//! default 40, of 50 modules each) and vendored in the repository (`wheels/`: the sandbox
//! shows no host folder of the bench's), so nothing needs the network.
//!
//! `cargo bench --bench setup_cache` (needs bubblewrap and python3-venv);
//! `PLANWRIGHT_BENCH_SETUP_RUNS` sets the rounds (default 3).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use planwright::config::environment::EnvironmentConfig;
use planwright::environment::setup_cache::SetupCache;
use planwright::forge::GitRemote;
use planwright::git::{MirrorCache, MirrorKey, Outcome, WorkspaceRequest, Workspaces};
use planwright::ids::{CommitSha, IssueNumber, RepoName, RepoScope};
use planwright::sandbox::Bwrap;
use planwright::verify::{Phase, Plan, RunSet, Verifier};
use secrecy::SecretString;

const PYTHON: &str = "/usr/bin/python3";

/// Writes `count` wheels of `modules` modules each into `out`: a zip with the package,
/// METADATA, WHEEL and a RECORD of hashes, as pip checks them.
const MAKE_WHEELS: &str = r#"
import base64, hashlib, os, sys, zipfile
out, count, modules = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
def record(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"
for i in range(count):
    name = f"benchpkg{i}"
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": b"VERSION = '1.0'\n"}
    for m in range(modules):
        body = "".join(f"def f{m}_{k}(x):\n    return x * {k} + {m}\n\n" for k in range(60))
        files[f"{name}/mod{m}.py"] = body.encode()
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    lines = [record(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(os.path.join(out, f"{name}-1.0-py3-none-any.whl"), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
"#;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn run(cwd: &Path, program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?}");
}

fn open_dir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A bare upstream whose one commit holds the wheels and `requirements.txt` naming every
/// package.
fn upstream(root: &Path, packages: usize) -> (PathBuf, String) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (wheels, count) = (
        work.join("wheels").display().to_string(),
        packages.to_string(),
    );
    run(root, PYTHON, &["-c", MAKE_WHEELS, &wheels, &count, "50"]);
    let requirements: String = (0..packages)
        .map(|i| format!("benchpkg{i}==1.0\n"))
        .collect();
    std::fs::write(work.join("requirements.txt"), requirements).unwrap();
    std::fs::write(work.join("README.md"), "# bench\n").unwrap();
    run(
        root,
        "git",
        &["init", "-q", "--bare", "-b", "main", "up.git"],
    );
    run(&work, "git", &["init", "-q", "-b", "main"]);
    let upstream = root.join("up.git");
    let head = commit_all(&work, &upstream, "deps");
    (upstream, head)
}

/// Commits everything in the work tree at `work` with `message`, pushes it to
/// `upstream`'s `main` and returns the commit.
fn commit_all(work: &Path, upstream: &Path, message: &str) -> String {
    run(work, "git", &["add", "-A"]);
    let author = ["-c", "user.name=b", "-c", "user.email=b@b"];
    let commit = ["commit", "-q", "-m", message];
    run(work, "git", &[&author[..], &commit[..]].concat());
    run(
        work,
        "git",
        &["push", "-q", upstream.to_str().unwrap(), "main"],
    );
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(work)
        .output()
        .unwrap();
    String::from_utf8(head.stdout).unwrap().trim().to_owned()
}

/// One verification of the base: wall seconds, and the setup phase's own seconds.
fn baseline(
    runtime: &tokio::runtime::Runtime,
    workspaces: &Workspaces,
    request: &WorkspaceRequest,
    verifier: &Verifier,
    plan: &Plan,
    restored: bool,
) -> (f64, f64) {
    runtime.block_on(async {
        let ws = workspaces.create(request).await.unwrap();
        let started = Instant::now();
        let runs: RunSet = verifier.baseline(plan, &ws, "bench").await.unwrap();
        let wall = started.elapsed().as_secs_f64();
        let setup: Vec<_> = runs
            .runs
            .iter()
            .filter(|r| r.phase == Phase::Setup)
            .collect();
        assert!(setup.iter().all(|r| r.summary.succeeded()), "{runs:?}");
        assert!(
            setup.iter().all(|r| r.summary.restored == restored),
            "{runs:?}"
        );
        let check = runs.runs.iter().find(|r| r.phase == Phase::Check).unwrap();
        assert!(check.summary.succeeded(), "the packages import: {check:?}");
        ws.finish(Outcome::Succeeded).await.unwrap();
        // Restored setup commands each carry the one restore's time.
        let setup_ms = if restored {
            setup[0].summary.duration_ms
        } else {
            setup.iter().map(|r| r.summary.duration_ms).sum()
        };
        (wall, setup_ms as f64 / 1000.0)
    })
}

/// Commits a change to `path` in the work tree at `work` (appending `line`) and pushes
/// it to `upstream`; returns the new commit.
fn commit(work: &Path, upstream: &Path, path: &str, line: &str) -> String {
    let full = work.join(path);
    let mut text = std::fs::read_to_string(&full).unwrap_or_default();
    text.push_str(line);
    std::fs::write(&full, text).unwrap();
    commit_all(work, upstream, path)
}

/// What the cache does over one repository's history: each commit's base verified in
/// turn with one cache, as a busy repository's runs are. Commits either change a source
/// file (outside the cache paths and the files keying it) or the lock file. Returns
/// (lookups, hits).
fn history(
    runtime: &tokio::runtime::Runtime,
    workspaces: &Workspaces,
    request: &WorkspaceRequest,
    verifier: &Verifier,
    plan: &Plan,
    (work, upstream): (&Path, &Path),
) -> (usize, usize) {
    let changes = [
        "src.py",
        "src.py",
        "requirements.txt",
        "src.py",
        "src.py",
        "src.py",
        "requirements.txt",
        "src.py",
    ];
    let mut hits = 0;
    for (i, path) in changes.iter().enumerate() {
        let line = if *path == "src.py" {
            format!("X{i} = {i}\n")
        } else {
            format!("# pinned again ({i})\n")
        };
        let sha = commit(work, upstream, path, &line);
        let request = WorkspaceRequest {
            base: CommitSha(sha),
            ..request.clone()
        };
        let restored = runtime.block_on(async {
            let ws = workspaces.create(&request).await.unwrap();
            let runs: RunSet = verifier.baseline(plan, &ws, "bench").await.unwrap();
            ws.finish(Outcome::Succeeded).await.unwrap();
            let setup = runs.runs.iter().find(|r| r.phase == Phase::Setup).unwrap();
            assert!(setup.summary.succeeded(), "{runs:?}");
            setup.summary.restored
        });
        eprintln!(
            "history {}: {path} changed, {}",
            i + 1,
            if restored { "hit" } else { "miss" }
        );
        hits += usize::from(restored);
    }
    (changes.len(), hits)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let env_number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rounds = env_number("PLANWRIGHT_BENCH_SETUP_RUNS", 3);
    let packages = env_number("PLANWRIGHT_BENCH_SETUP_PACKAGES", 40);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = root.path().join("data");
    for dir in [root.path(), &data, &root.path().join("scratch")] {
        open_dir(dir);
    }
    let (upstream, base) = upstream(root.path(), packages);

    let workspaces = Workspaces::new(
        &data,
        Arc::new(MirrorCache::new(&data)),
        Workspaces::default_owner(),
    );
    let request = WorkspaceRequest {
        mirror: MirrorKey::new("github", RepoName::parse("bench/deps").unwrap()).unwrap(),
        remote: GitRemote {
            url: upstream.display().to_string(),
            username: "x-access-token".into(),
            password: SecretString::from("unused-for-a-local-path"),
        },
        base: CommitSha(base),
        issue: IssueNumber(1),
        title: "bench".into(),
        size: None,
    };
    let checks = vec![format!(
        ".venv/bin/python -c 'import benchpkg0.mod0, benchpkg{}.mod49'",
        packages - 1
    )];
    let plan = Plan {
        setup: vec![format!(
            "{PYTHON} -m venv .venv && .venv/bin/python -m pip install -q --disable-pip-version-check --no-index --find-links wheels -r requirements.txt"
        )],
        checks: checks.clone(),
        network_allow: Vec::new(),
        protected: Vec::new(),
        flaky_reruns: 0,
        quarantine: Vec::new(),
        expects_tests: false,
        removable: Vec::new(),
        always: checks,
        by_path: Vec::new(),
        chosen: Vec::new(),
    };
    let environment = EnvironmentConfig {
        cache: vec![".venv".into()],
        ..EnvironmentConfig::default()
    };
    let sandbox = Bwrap::new(Vec::new())
        .expect("bubblewrap is installed")
        .with_relay_program(env!("CARGO_BIN_EXE_planwright"));
    let sandbox = Arc::new(sandbox);

    let scope = RepoScope::new("github", "1");
    let (mut miss, mut hit, mut miss_setup, mut hit_setup) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // A fresh, empty cache: this round's first base runs setup and keeps it.
        let cache =
            SetupCache::open(&root.path().join(format!("cache-{round}")), 20 << 30).unwrap();
        let verifier = Verifier::new(sandbox.clone(), root.path().join("scratch"))
            .with_setup_cache(Arc::new(cache), scope.clone(), "host", &environment);
        let (wall, setup) = baseline(&runtime, &workspaces, &request, &verifier, &plan, false);
        miss.push(wall);
        miss_setup.push(setup);
        let (wall, setup) = baseline(&runtime, &workspaces, &request, &verifier, &plan, true);
        hit.push(wall);
        hit_setup.push(setup);
        eprintln!(
            "round {}: miss {:.3}s (setup {:.3}s), hit {:.3}s (restore {:.3}s)",
            round + 1,
            miss[round],
            miss_setup[round],
            hit[round],
            hit_setup[round]
        );
    }
    let entry = std::fs::read_dir(
        root.path()
            .join("cache-0/setup-cache/repos")
            .join(scope.folder()),
    )
    .unwrap()
    .next()
    .unwrap()
    .unwrap()
    .path();
    let meta = std::fs::read_to_string(entry.join("entry.json")).unwrap();
    let (miss, hit) = (median(miss), median(hit));
    let (miss_setup, hit_setup) = (median(miss_setup), median(hit_setup));
    println!(
        "verifying a base whose setup makes a venv and pip-installs {packages} packages offline ({rounds} rounds, medians; entry {meta})"
    );
    println!("  miss (setup runs, kept)      {miss:.3}s, of it setup {miss_setup:.3}s");
    println!("  hit (restored from the cache) {hit:.3}s, of it restore {hit_setup:.3}s");
    println!(
        "  ratio hit / miss: {:.2} whole, {:.2} setup phase",
        hit / miss,
        hit_setup / miss_setup
    );

    let cache = SetupCache::open(&root.path().join("cache-history"), 20 << 30).unwrap();
    let verifier = Verifier::new(sandbox.clone(), root.path().join("scratch")).with_setup_cache(
        Arc::new(cache),
        scope.clone(),
        "host",
        &environment,
    );
    let (lookups, hits) = history(
        &runtime,
        &workspaces,
        &request,
        &verifier,
        &plan,
        (&root.path().join("work"), &upstream),
    );
    println!(
        "  hit rate over {lookups} commits of one repository (source changes, 2 lock file changes): {hits}/{lookups} ({:.0}%)",
        100.0 * hits as f64 / lookups as f64
    );
}
