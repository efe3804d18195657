//! Escape attempts against the real bubblewrap sandbox: each test does what a hostile
//! executor would try and fails if it gets anywhere, on the host's root and again on an
//! image root; then what an image root itself must show and keep, and `sandbox run` in a
//! root folder or a pulled image. bubblewrap and busybox-static must be installed (CI
//! installs them); without them these tests fail rather than skip.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use planwright::sandbox::{Bwrap, Command, Exit, Output, Root, Sandbox};

use crate::support::roots::{self, IMAGE_ONLY_FILE, IMAGE_ONLY_TOOL, IMAGE_PATH, IMAGE_RELEASE};
use crate::support::sh_word;

const PRIVATE_KEY: &str = "-----BEGIN RSA PRIVATE KEY----- sandbox-test-private-key";
const DATABASE: &str = "SQLite format 3 sandbox-test-database";

/// A fake DATA_DIR holding a database and a private key, with the run's workspace inside
/// it, as planwright lays them out. It lives under the target folder unless a test puts it
/// elsewhere (under /tmp, which each run replaces with its own), and is readable by
/// anyone, so that only the sandbox's covering of DATA_DIR keeps its files out of reach.
struct DataDir {
    root: tempfile::TempDir,
    data: PathBuf,
    workspace: PathBuf,
    logs: PathBuf,
    /// The `/` every command of the test gets, when not the host's.
    image: Option<Root>,
}

impl DataDir {
    fn new() -> Self {
        Self::under(Path::new(env!("CARGO_TARGET_TMPDIR")))
    }

    /// The same, in a new folder under `base`.
    fn under(base: &Path) -> Self {
        let root = tempfile::tempdir_in(base).expect("a temporary folder");
        let data = root.path().join("data");
        let workspace = data.join("workspaces").join("run-1");
        let logs = data.join("logs").join("run-1");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(data.join("planwright.db"), DATABASE).unwrap();
        std::fs::write(data.join("github-app.pem"), PRIVATE_KEY).unwrap();
        for dir in [root.path(), &data, &data.join("workspaces")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for file in ["planwright.db", "github-app.pem"] {
            std::fs::set_permissions(data.join(file), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        DataDir {
            root,
            data,
            workspace,
            logs,
            image: None,
        }
    }

    /// The same, with every command in an image root that has the host's tools (the
    /// escape attempts need curl, bash and python3) and files of its own.
    fn in_image() -> Self {
        DataDir {
            image: Some(roots::host_like()),
            ..DataDir::new()
        }
    }

    /// A host user no other test uses, different for the two roots so that both
    /// variants of a test may run at once.
    fn own_uid(&self, uid: u32) -> u32 {
        if self.image.is_some() { uid + 100 } else { uid }
    }

    fn sandbox(&self) -> Bwrap {
        Bwrap::new(vec![self.data.clone()])
            .expect("bubblewrap is installed (CI installs the bubblewrap package)")
    }

    fn command(&self, script: &str) -> Command {
        Command::new(
            &self.workspace,
            vec!["sh".into(), "-c".into(), script.into()],
        )
    }

    async fn sh(&self, script: &str) -> Output {
        self.run(&self.sandbox(), self.command(script)).await
    }

    async fn run(&self, sandbox: &Bwrap, mut command: Command) -> Output {
        if command.root.is_none() {
            command.root = self.image.clone();
        }
        sandbox.run(&command).await.expect("the sandbox runs")
    }
}

fn report(out: &Output) -> String {
    format!(
        "exit {:?}, timed out {}, stdout:\n{}\nstderr:\n{}",
        out.exit,
        out.timed_out,
        out.stdout.text(),
        out.stderr.text()
    )
}

crate::on_both_roots!(
    DataDir:
    the_network_is_unreachable,
    python_leaves_no_bytecode_to_be_reused_after_an_edit,
    writes_land_in_the_workspace_only,
    data_dir_is_hidden_under_every_name,
    nothing_of_the_parents_environment_gets_in,
    runs_unprivileged_and_cannot_read_root_only_files,
    no_descriptor_of_the_parent_gets_in,
    the_timeout_kills_the_whole_tree,
    output_is_capped_and_the_rest_counted_and_spilled,
    the_process_limit_stops_a_fork_bomb,
    the_memory_limit_stops_a_memory_hog,
    the_cpu_and_file_size_limits_hold,
    exit_codes_and_signals_are_reported,
    a_working_directory_outside_the_workspace_is_refused,
    another_runs_workspace_cannot_be_read,
    the_settings_file_key_files_and_a_home_are_not_in_the_sandbox,
    a_host_unix_socket_outside_run_cannot_be_reached,
    two_runs_at_the_process_limit_do_not_starve_each_other,
    kernel_facing_system_calls_are_refused,
    memory_backed_folders_are_bounded,
    a_run_in_its_own_control_group_cannot_add_up_memory_across_processes,
);

async fn the_network_is_unreachable(world: DataDir) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = world
        .sh(&format!(
            "if curl -sS --max-time 5 http://127.0.0.1:{port}/ ; then echo CONNECTED; fi
             if bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'; then echo CONNECTED; fi
             if getent hosts example.com; then echo RESOLVED; fi
             cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '"
        ))
        .await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("CONNECTED"), "{}", report(&out));
    assert!(!stdout.contains("RESOLVED"), "{}", report(&out));
    // Only the namespace's own loopback; the host has other interfaces.
    assert_eq!(stdout.trim(), "lo", "{}", report(&out));
    assert!(
        listener.accept().is_err(),
        "the host listener accepted a connection from inside"
    );
}

async fn python_leaves_no_bytecode_to_be_reused_after_an_edit(world: DataDir) {
    std::fs::write(
        world.workspace.join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let out = world
        .sh("python3 -c 'import calc; print(calc.add(2, 3))'")
        .await;
    assert_eq!(out.stdout.text().trim(), "-1", "{}", report(&out));
    // The same size, the same second: a cached `.pyc` would still say -1.
    std::fs::write(
        world.workspace.join("calc.py"),
        "def add(a, b):\n    return a + b\n",
    )
    .unwrap();
    let out = world
        .sh("python3 -c 'import calc; print(calc.add(2, 3))'")
        .await;
    assert_eq!(out.stdout.text().trim(), "5", "{}", report(&out));
    assert!(
        !world.workspace.join("__pycache__").exists(),
        "bytecode was written into the workspace"
    );
}

async fn writes_land_in_the_workspace_only(world: DataDir) {
    let host_tmp = PathBuf::from(format!("/tmp/planwright-escape-{}", std::process::id()));
    let out = world
        .sh(&format!(
            "for f in /etc/escaped /root/escaped /usr/escaped {data}/escaped; do
               if echo x > $f; then echo WROTE $f; fi
             done
             echo x > {host_tmp}
             echo inside > made-inside",
            data = sh_word(&world.data),
            host_tmp = sh_word(&host_tmp)
        ))
        .await;
    // The cover over DATA_DIR is a private tmpfs: writing there may succeed inside, but
    // must not reach the host (checked below).
    let stdout = out.stdout.text();
    let outside_data: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("WROTE") && !l.contains("/data/escaped"))
        .collect();
    assert!(outside_data.is_empty(), "{}", report(&out));
    for f in ["/etc/escaped", "/root/escaped", "/usr/escaped"] {
        assert!(!Path::new(f).exists(), "{f} was written");
    }
    assert!(!world.data.join("escaped").exists());
    assert!(!host_tmp.exists(), "the host's /tmp was written");
    assert_eq!(
        std::fs::read_to_string(world.workspace.join("made-inside")).unwrap(),
        "inside\n"
    );
}

async fn data_dir_is_hidden_under_every_name(world: DataDir) {
    std::os::unix::fs::symlink(
        world.data.join("github-app.pem"),
        world.workspace.join("key-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&world.data, world.workspace.join("data-link")).unwrap();
    let data = sh_word(&world.data);
    let out = world
        .sh(&format!(
            "cat {data}/planwright.db {data}/github-app.pem
             cat /proc/1/root{data}/github-app.pem /proc/self/root{data}/planwright.db
             cat key-link data-link/planwright.db
             ls -A {data}"
        ))
        .await;
    let stdout = out.stdout.text();
    assert!(
        !stdout.contains("sandbox-test-private-key"),
        "{}",
        report(&out)
    );
    assert!(
        !stdout.contains("sandbox-test-database"),
        "{}",
        report(&out)
    );
    // Only the path down to the workspace exists in the covered DATA_DIR.
    assert_eq!(stdout.trim(), "workspaces", "{}", report(&out));
}

async fn nothing_of_the_parents_environment_gets_in(world: DataDir) {
    // SAFETY: nextest runs each test in its own process, and this test starts no thread
    // that reads the environment before this line.
    unsafe { std::env::set_var("PLANWRIGHT_TEST_SECRET", "hunter2-sandbox-secret") };
    let mut cmd = world.command("env; echo ---; tr '\\0' '\\n' < /proc/1/environ");
    cmd.env.push(("GIVEN_BY_CALLER".into(), "yes".into()));
    let out = world.run(&world.sandbox(), cmd).await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("hunter2"), "{}", report(&out));
    assert!(stdout.contains("GIVEN_BY_CALLER=yes"), "{}", report(&out));
    assert!(
        stdout.contains(&format!("HOME={}", world.workspace.display())),
        "{}",
        report(&out)
    );
    let names: Vec<&str> = stdout
        .lines()
        .take_while(|l| *l != "---")
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for name in &names {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TERM",
                "SHELL",
                "PYTHONDONTWRITEBYTECODE",
                "GIVEN_BY_CALLER",
                "PWD",
                "SHLVL",
                "_"
            ]
            .contains(name),
            "{name} leaked into the sandbox: {}",
            report(&out)
        );
    }
}

async fn runs_unprivileged_and_cannot_read_root_only_files(world: DataDir) {
    let out = world
        .sh("id -u; grep CapEff /proc/self/status; cat /etc/shadow; ls /root")
        .await;
    let stdout = out.stdout.text();
    let uid = stdout.lines().next().unwrap_or_default();
    assert_ne!(uid, "0", "{}", report(&out));
    assert_eq!(uid, "1000", "{}", report(&out));
    assert!(
        stdout.contains("CapEff:\t0000000000000000"),
        "{}",
        report(&out)
    );
    assert!(!stdout.contains("root:"), "{}", report(&out));
    assert!(
        out.stderr.text().contains("/etc/shadow"),
        "{}",
        report(&out)
    );
}

async fn no_descriptor_of_the_parent_gets_in(world: DataDir) {
    let marker = world.root.path().join("inherited-marker");
    std::fs::write(&marker, "x").unwrap();
    let path = std::ffi::CString::new(marker.to_str().unwrap()).unwrap();
    // SAFETY: a plain open of a valid path; without O_CLOEXEC on purpose, as a careless
    // supervisor would leave it.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0);
    let out = world
        .sh("for f in /proc/$$/fd/*; do readlink $f; done")
        .await;
    assert!(
        !out.stdout.text().contains("inherited-marker"),
        "{}",
        report(&out)
    );
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
}

/// Whether any process of `uid` is still alive on the host.
fn processes_of(uid: u32) -> usize {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
        .count()
}

async fn the_timeout_kills_the_whole_tree(world: DataDir) {
    let uid = world.own_uid(64_001);
    let sandbox = world.sandbox().with_host_user(uid, uid);
    let mut cmd = world.command("sleep 1000 & (sleep 1000 &); echo started; sleep 1000");
    cmd.limits.wall = Duration::from_secs(2);
    let out = world.run(&sandbox, cmd).await;
    assert!(out.timed_out, "{}", report(&out));
    assert_eq!(out.exit, Exit::Signal(9), "{}", report(&out));
    assert!(out.duration < Duration::from_secs(10), "{:?}", out.duration);
    assert_eq!(out.stdout.text(), "started\n");
    // The pid namespace goes down with bwrap; wait for the kernel to finish reaping.
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_of(uid) > 0 {
        assert!(
            Instant::now() < deadline,
            "processes of the sandbox survived the timeout"
        );
        tokio::task::yield_now().await;
    }
}

async fn output_is_capped_and_the_rest_counted_and_spilled(world: DataDir) {
    let mut cmd = world.command("head -c 30000000 /dev/zero; echo tail >&2");
    cmd.limits.output_bytes = 1 << 20;
    cmd.limits.spill_bytes = 4 << 20;
    cmd.spill_dir = Some(world.logs.clone());
    let out = world.run(&world.sandbox(), cmd).await;
    assert!(out.exit.success(), "{}", report(&out));
    assert_eq!(out.stdout.bytes.len(), 1 << 20);
    assert_eq!(out.stdout.total, 30_000_000);
    assert_eq!(out.stdout.dropped(), 30_000_000 - (1 << 20));
    let spilled = out.stdout.spilled.clone().expect("the excess was spilled");
    assert_eq!(spilled, world.logs.join("stdout.log"));
    assert_eq!(std::fs::metadata(&spilled).unwrap().len(), 4 << 20);
    assert_eq!(out.stderr.text(), "tail\n");
    assert_eq!(out.stderr.spilled, None);
}

async fn the_process_limit_stops_a_fork_bomb(world: DataDir) {
    // A host user of its own: the process limit counts every process of the user.
    let uid = world.own_uid(64_002);
    let sandbox = world.sandbox().with_host_user(uid, uid);
    // `echo` is a builtin: the count keeps coming once forking fails.
    let mut cmd =
        world.command("i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done");
    cmd.limits.processes = 32;
    cmd.limits.wall = Duration::from_secs(60);
    let out = world.run(&sandbox, cmd).await;
    let running: usize = out
        .stdout
        .text()
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("{}", report(&out)));
    assert!(running <= 32, "{running} processes: {}", report(&out));
    assert!(out.stderr.text().contains("fork"), "{}", report(&out));
    assert!(!out.timed_out, "{}", report(&out));
}

async fn the_memory_limit_stops_a_memory_hog(world: DataDir) {
    let mut cmd =
        world.command("x=$(head -c 600000000 /dev/zero | tr '\\0' a); echo survived ${#x}");
    cmd.limits.memory_bytes = 256 << 20;
    let out = world.run(&world.sandbox(), cmd).await;
    assert!(!out.stdout.text().contains("survived"), "{}", report(&out));
    assert!(!out.exit.success(), "{}", report(&out));
}

async fn the_cpu_and_file_size_limits_hold(world: DataDir) {
    let mut cmd = world.command("head -c 5000000 /dev/zero > big; echo $?");
    cmd.limits.file_size_bytes = 1 << 20;
    let out = world.run(&world.sandbox(), cmd).await;
    // SIGXFSZ (25) kills the writer; the shell reports 128 + 25.
    assert_eq!(out.stdout.text(), "153\n", "{}", report(&out));
    assert_eq!(
        std::fs::metadata(world.workspace.join("big"))
            .unwrap()
            .len(),
        1 << 20
    );

    let mut cmd = world.command("while :; do :; done");
    cmd.limits.cpu_seconds = 1;
    cmd.limits.wall = Duration::from_secs(60);
    let out = world.run(&world.sandbox(), cmd).await;
    assert!(!out.timed_out, "{}", report(&out));
    assert!(
        matches!(out.exit, Exit::Signal(libc::SIGKILL | libc::SIGXCPU)),
        "{}",
        report(&out)
    );
}

async fn exit_codes_and_signals_are_reported(world: DataDir) {
    assert_eq!(world.sh("exit 7").await.exit, Exit::Code(7));
    assert_eq!(world.sh("true").await.exit, Exit::Code(0));
    assert_eq!(
        world.sh("kill -TERM $$").await.exit,
        Exit::Signal(libc::SIGTERM)
    );
}

async fn a_working_directory_outside_the_workspace_is_refused(world: DataDir) {
    let mut cmd = world.command("pwd");
    cmd.cwd = Some("../../".into());
    assert!(world.sandbox().run(&cmd).await.is_err());
    std::fs::create_dir(world.workspace.join("sub")).unwrap();
    cmd.cwd = Some("sub".into());
    let out = world.run(&world.sandbox(), cmd).await;
    assert_eq!(
        out.stdout.text().trim(),
        world.workspace.join("sub").display().to_string()
    );
}

async fn another_runs_workspace_cannot_be_read(world: DataDir) {
    let other = world.data.join("workspaces").join("run-2");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "another-run-secret").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        other.join("notes.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let data = sh_word(&world.data);
    let out = world
        .sh(&format!(
            "cat ../run-2/notes.txt {data}/workspaces/run-2/notes.txt /proc/1/root{data}/workspaces/run-2/notes.txt
             ls -A {data}/workspaces"
        ))
        .await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("another-run-secret"), "{}", report(&out));
    // Only this run's own folder is there.
    assert_eq!(stdout.trim(), "run-1", "{}", report(&out));
}

/// Host processes whose command line is exactly `argv` joined by spaces.
fn host_processes(cmdline: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmdline)
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn the_sandbox_dies_when_planwright_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    // A sleep no other test runs, so its processes can be found on the host.
    let marker = format!("{}", 400_000 + std::process::id() % 100_000);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["sandbox", "run", "--workspace"])
        .arg(dir.path())
        .args(["--", "sleep", &marker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cmdline = format!("sleep {marker}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while host_processes(&cmdline).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the sandboxed sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: planwright gets no chance to clean up; the sandbox must go by itself.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !host_processes(&cmdline).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the sandboxed command outlived planwright: {:?}",
            host_processes(&cmdline)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const MODEL_KEY: &str = "sk-ant-sandbox-test-model-key";
const PRICES: &str = "[\"openai:sandbox-test-prices\"]\ninput = 1.0\noutput = 2.0\n";
const SSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- sandbox-test-ssh-key";
const NPM_TOKEN: &str = "//registry.npmjs.org/:_authToken=sandbox-test-npm-token";
const CLAUDE_LOGIN: &str = "{\"claudeAiOauth\":\"sandbox-test-claude-login\"}";

/// What an operator's host holds beside DATA_DIR: a settings file naming the model key, a
/// private key file and a price file, and the service user's home with its own
/// credentials. All of it under the target folder (which the old root, `/` read-only,
/// showed) and written `mode`, so only what the sandbox's root leaves out keeps it away.
struct HostSecrets {
    config: PathBuf,
    key: PathBuf,
    prices: PathBuf,
    home: PathBuf,
}

impl HostSecrets {
    fn new(root: &Path, mode: u32) -> Self {
        let etc = root.join("etc-planwright");
        let home = root.join("home").join("planwright");
        for dir in [&etc, &home.join(".ssh"), &home.join(".claude")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let key = etc.join("github-app.pem");
        let prices = etc.join("prices.toml");
        let config = etc.join("planwright.toml");
        std::fs::write(&key, PRIVATE_KEY).unwrap();
        std::fs::write(&prices, PRICES).unwrap();
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\nanthropic_api_key = \"{MODEL_KEY}\"\ngithub_private_key = \"{}\"\nmodel_prices = \"{}\"\n",
                root.join("data").display(),
                key.display(),
                prices.display()
            ),
        )
        .unwrap();
        let files = [
            (home.join(".ssh/id_ed25519"), SSH_KEY),
            (home.join(".npmrc"), NPM_TOKEN),
            (home.join(".claude/.credentials.json"), CLAUDE_LOGIN),
        ];
        for (path, text) in &files {
            std::fs::write(path, text).unwrap();
        }
        for path in [&key, &prices, &config]
            .into_iter()
            .chain(files.iter().map(|(p, _)| p))
        {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        for dir in [root.join("home"), etc.clone()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        HostSecrets {
            config,
            key,
            prices,
            home,
        }
    }

    /// A script that tries to read every secret file, then says it ran.
    fn script(&self) -> String {
        format!(
            "cat {config} {key} {prices}
             cat {home}/.ssh/id_ed25519 {home}/.npmrc {home}/.claude/.credentials.json
             ls -A {home}
             echo RAN",
            config = sh_word(&self.config),
            key = sh_word(&self.key),
            prices = sh_word(&self.prices),
            home = sh_word(&self.home)
        )
    }

    fn assert_none_leaked(&self, stdout: &str, report: &str) {
        assert!(
            stdout.ends_with("RAN\n"),
            "the script did not run: {report}"
        );
        for secret in [
            MODEL_KEY,
            "sandbox-test-private-key",
            "sandbox-test-prices",
            "sandbox-test-ssh-key",
            "sandbox-test-npm-token",
            "sandbox-test-claude-login",
            ".npmrc",
        ] {
            assert!(!stdout.contains(secret), "{secret} leaked: {report}");
        }
    }
}

async fn the_settings_file_key_files_and_a_home_are_not_in_the_sandbox(world: DataDir) {
    // Readable by anyone: the sandbox's own user could read them wherever they are shown.
    let secrets = HostSecrets::new(world.root.path(), 0o644);
    let out = world.sh(&secrets.script()).await;
    secrets.assert_none_leaked(&out.stdout.text(), &report(&out));
    assert!(
        out.stderr.text().contains("No such file"),
        "{}",
        report(&out)
    );
}

#[test]
fn a_planwright_that_is_not_root_shows_none_of_its_users_files() {
    // An id no account has: planwright as a service user of its own.
    const UID: u32 = 64_020;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Private to that user, as a service user's files are: only the user itself (and so a
    // sandbox running as it) may read them.
    let secrets = HostSecrets::new(root.path(), 0o600);
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(root.path().join("data")).unwrap();
    for dir in [
        workspace.clone(),
        root.path().join("data"),
        secrets.home.clone(),
        secrets.home.join(".ssh"),
        secrets.home.join(".claude"),
        secrets.config.parent().unwrap().to_path_buf(),
    ] {
        std::os::unix::fs::chown(&dir, Some(UID), Some(UID)).unwrap();
    }
    for file in [
        &secrets.config,
        &secrets.key,
        &secrets.prices,
        &secrets.home.join(".ssh/id_ed25519"),
        &secrets.home.join(".npmrc"),
        &secrets.home.join(".claude/.credentials.json"),
    ] {
        std::os::unix::fs::chown(file, Some(UID), Some(UID)).unwrap();
    }
    std::fs::set_permissions(&secrets.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &secrets.home)
        .current_dir(&workspace)
        .uid(UID)
        .gid(UID)
        .arg("--config")
        .arg(&secrets.config)
        .args(["sandbox", "run", "--workspace"])
        .arg(&workspace)
        .args(["--", "sh", "-c", &secrets.script()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!(
        "{:?}, stdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The home's files are this user's own: only the sandbox's root keeps them out.
    let own = std::fs::read_to_string(secrets.home.join(".npmrc"));
    assert!(
        own.is_ok(),
        "the test runs as root and reads the user's files"
    );
    secrets.assert_none_leaked(&stdout, &report);
}

async fn a_host_unix_socket_outside_run_cannot_be_reached(world: DataDir) {
    // Where a host service might listen (Fly's /.fly/api is one), open to everyone.
    let socket = world.root.path().join("host-api.sock");
    // Wherever this checkout lies, however long its path.
    let listener = planwright::unix_socket::bind(&socket)
        .unwrap()
        .into_std()
        .unwrap();
    listener.set_nonblocking(true).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = world
        .sh(&format!(
            "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{socket}'); print('CONNECTED')\"
             if curl -sS --max-time 5 --unix-socket {quoted} http://host/; then echo CONNECTED; fi
             echo RAN",
            socket = socket.display(),
            quoted = sh_word(&socket)
        ))
        .await;
    let stdout = out.stdout.text();
    assert!(stdout.ends_with("RAN\n"), "{}", report(&out));
    assert!(!stdout.contains("CONNECTED"), "{}", report(&out));
    assert!(
        listener.accept().is_err(),
        "the host socket accepted a connection from inside"
    );
}

async fn two_runs_at_the_process_limit_do_not_starve_each_other(world: DataDir) {
    let other = world.data.join("workspaces").join("run-2");
    std::fs::create_dir_all(&other).unwrap();
    let gate = world.workspace.join("gate");
    let path = std::ffi::CString::new(gate.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo of a valid path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    // The first run forks until its limit stops it, says how far it got, and holds every
    // process until the gate opens.
    let mut full = world.command(
        "python3 -c \"
import os, time
n = 0
while n < 200:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    n += 1
open('counting', 'w').write(str(n))
os.rename('counting', 'full')
open('gate').read()
\"",
    );
    full.limits.processes = 32;
    full.limits.wall = Duration::from_secs(120);
    full.root = world.image.clone();
    let sandbox = world.sandbox();
    let hog = tokio::spawn(async move { sandbox.run(&full).await });
    let marker = world.workspace.join("full");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the first run never filled up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let forked: u32 = std::fs::read_to_string(&marker).unwrap().parse().unwrap();
    assert!(
        forked < 32,
        "the first run was not held at its limit: {forked}"
    );
    let mut second = Command::new(
        &other,
        vec!["sh".into(), "-c".into(), "echo started".into()],
    );
    second.limits.processes = 32;
    let out = world.run(&world.sandbox(), second).await;
    let opened = tokio::task::spawn_blocking(move || std::fs::write(gate, b"go"));
    assert_eq!(out.stdout.text(), "started\n", "{}", report(&out));
    opened.await.unwrap().unwrap();
    let first = hog.await.unwrap().expect("the first run ends");
    assert!(first.exit.success(), "{}", report(&first));
}

#[test]
fn a_workspace_the_sandbox_user_cannot_reach_is_named_with_what_to_do() {
    // As `mktemp -d` makes it: 0700 and root's, so the sandbox's own user cannot enter.
    let private = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let workspace = private.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(private.path())
        .args(["sandbox", "run", "--workspace"])
        .arg(&workspace)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} (mode 0700) is closed to it",
            private.path().display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("chmod o+x {}", private.path().display())),
        "{stderr}"
    );
    assert!(!stderr.contains("/proc/self/fd"), "{stderr}");
}

#[test]
fn sandbox_run_refuses_to_start_when_the_settings_that_name_data_dir_do_not_load() {
    let world = DataDir::new();
    // DATA_DIR inside the folder given as the workspace, where nothing but its cover
    // hides it; one bad value makes the settings fail.
    let config = world.root.path().join("planwright.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\nlog_format = \"xml\"\n",
            world.data.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(world.root.path())
        .arg("--config")
        .arg(&config)
        .args(["sandbox", "run", "--workspace"])
        .arg(world.root.path())
        .args(["--", "cat", "data/planwright.db", "data/github-app.pem"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("sandbox-test-database"), "{stdout}");
    assert!(!stdout.contains("sandbox-test-private-key"), "{stdout}");
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Cannot run the sandbox without the settings"),
        "{stderr}"
    );
    assert!(stderr.contains("log_format"), "{stderr}");
}

async fn kernel_facing_system_calls_are_refused(world: DataDir) {
    // Harmless arguments: what matters is whether the kernel gets to look at them. Without
    // a filter, PTRACE_TRACEME and a key in the process keyring simply succeed.
    let calls = [
        ("ptrace", libc::SYS_ptrace, "0, 0, 0, 0"),
        ("add_key", libc::SYS_add_key, "b'user', b'k', b'v', 1, -2"),
        ("keyctl", libc::SYS_keyctl, "0, -2, 1"),
        (
            "request_key",
            libc::SYS_request_key,
            "b'user', b'k', None, 0",
        ),
        ("bpf", libc::SYS_bpf, "0, None, 0"),
        ("userfaultfd", libc::SYS_userfaultfd, "1"),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            "None, 0, -1, -1, 0",
        ),
        ("kexec_load", libc::SYS_kexec_load, "0, 0, None, 0"),
        (
            "mount",
            libc::SYS_mount,
            "b'none', b'/tmp', b'tmpfs', 0, None",
        ),
        ("fsopen", libc::SYS_fsopen, "b'tmpfs', 0"),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            "1, None, 0, None, 0, 0",
        ),
        ("io_uring_setup", libc::SYS_io_uring_setup, "1, None"),
        ("pidfd_getfd", libc::SYS_pidfd_getfd, "-1, 0, 0"),
    ];
    let mut script = String::from(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n",
    );
    for (name, nr, args) in calls {
        script.push_str(&format!(
            "r = libc.syscall({nr}, {args})\nprint('{name}', r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok')\n"
        ));
    }
    let out = world
        .run(
            &world.sandbox(),
            Command::new(
                &world.workspace,
                vec!["python3".into(), "-c".into(), script],
            ),
        )
        .await;
    assert!(out.exit.success(), "{}", report(&out));
    let stdout = out.stdout.text();
    assert_eq!(stdout.lines().count(), calls.len(), "{}", report(&out));
    for line in stdout.lines() {
        assert!(
            line.ends_with(" -1 Operation not permitted"),
            "{line}: {}",
            report(&out)
        );
    }
}

async fn memory_backed_folders_are_bounded(world: DataDir) {
    // What lands in a tmpfs is host memory: each place fills up at its size, or cannot be
    // written at all. Files may be larger than any of them, so only the sizes stop it.
    let mut cmd = world.command(&format!(
        "for d in /tmp /dev/shm /run /dev {data}; do
           head -c 40000000 /dev/zero > \"$d/fill\" 2>/dev/null
           echo \"$d $(cat \"$d/fill\" 2>/dev/null | wc -c)\"
         done",
        data = sh_word(&world.data)
    ));
    cmd.limits.tmp_bytes = 4 << 20;
    cmd.limits.file_size_bytes = 100_000_000;
    let out = world.run(&world.sandbox(), cmd).await;
    let sizes: Vec<(String, u64)> = out
        .stdout
        .text()
        .lines()
        .filter_map(|l| {
            let (dir, n) = l.rsplit_once(' ')?;
            Some((dir.to_owned(), n.parse().ok()?))
        })
        .collect();
    assert_eq!(sizes.len(), 5, "{}", report(&out));
    for (dir, written) in &sizes {
        let bound = match dir.as_str() {
            "/tmp" | "/dev/shm" => 4 << 20,
            "/run" => 16 << 20,
            _ => 0,
        };
        assert!(
            *written <= bound,
            "{dir} took {written} bytes: {}",
            report(&out)
        );
    }
}

async fn a_run_in_its_own_control_group_cannot_add_up_memory_across_processes(world: DataDir) {
    // Four processes of 100 MiB each stay under the per-process limit (RLIMIT_AS); only
    // a limit on the whole run stops them together. Each holds its memory until every
    // other one has reported, or one of them is killed.
    let script = "
import os, select, signal
r, w = os.pipe()
hold_r, hold_w = os.pipe()
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(hold_w)
        block = b'\\x01' * (100 << 20)
        os.write(w, b'x')
        os.read(hold_r, 1)
        os._exit(len(block) & 0)
    children.append(pid)
got = 0
killed = False
while got < 4 and not killed:
    ready, _, _ = select.select([r], [], [], 0.1)
    if ready:
        got += len(os.read(r, 4))
    pid, status = os.waitpid(-1, os.WNOHANG)
    killed = pid != 0 and os.WIFSIGNALED(status)
print('all held' if got >= 4 else 'killed')
os.close(hold_w)
";
    let mut cmd = Command::new(
        &world.workspace,
        vec!["python3".into(), "-c".into(), script.into()],
    );
    cmd.limits.memory_bytes = 512 << 20;
    cmd.limits.run_memory_bytes = 256 << 20;
    cmd.limits.wall = Duration::from_secs(120);
    let out = world.run(&world.sandbox(), cmd).await;
    assert_eq!(out.stdout.text(), "killed\n", "{}", report(&out));
}

/// An image root in a folder of the test's own, outside DATA_DIR.
fn image_root(world: &DataDir, build: fn(&Path) -> Root) -> Root {
    let dir = world.root.path().join("image");
    std::fs::create_dir(&dir).unwrap();
    build(&dir)
}

fn in_root(world: &DataDir, root: &Root, script: &str) -> Command {
    let mut cmd = world.command(script);
    cmd.root = Some(root.clone());
    cmd
}

#[tokio::test]
async fn an_image_root_is_the_commands_root_with_its_env_and_path_first() {
    let world = DataDir::new();
    let root = image_root(&world, roots::busybox);
    assert!(
        Path::new("/etc/debian_version").exists(),
        "the host is Debian"
    );
    let script = format!(
        "cat {IMAGE_ONLY_FILE}
         for f in /etc/debian_version /usr/bin/python3 /opt/planwright-agents; do
           test -e $f && echo HOST $f
         done
         {IMAGE_ONLY_TOOL}
         echo \"PATH=$PATH\"; echo \"HOME=$HOME\"; ls -A {data}",
        data = sh_word(&world.data)
    );
    let out = world
        .run(&world.sandbox(), in_root(&world, &root, &script))
        .await;
    let stdout = out.stdout.text();
    assert!(out.exit.success(), "{}", report(&out));
    assert!(stdout.starts_with(IMAGE_RELEASE), "{}", report(&out));
    assert!(!stdout.contains("HOST"), "{}", report(&out));
    // Of DATA_DIR, only the way down to the workspace.
    assert!(stdout.ends_with("\nworkspaces\n"), "{}", report(&out));
    assert!(
        stdout.contains("image tool in busybox\n"),
        "{}",
        report(&out)
    );
    assert!(
        stdout.contains(&format!("PATH={IMAGE_PATH}:/usr/local/bin:/usr/bin:/bin\n")),
        "{}",
        report(&out)
    );
    // The run's own HOME, not the image's.
    assert!(
        stdout.contains(&format!("HOME={}\n", world.workspace.display())),
        "{}",
        report(&out)
    );
    // The same command on the host's root finds neither the file nor the tool.
    let out = world
        .sh(&format!("cat {IMAGE_ONLY_FILE}; {IMAGE_ONLY_TOOL}"))
        .await;
    assert!(
        !out.stdout.text().contains("planwright test image"),
        "{}",
        report(&out)
    );
    assert_eq!(out.exit, Exit::Code(127), "{}", report(&out));
}

#[tokio::test]
async fn in_an_image_only_the_workspace_tmp_and_home_are_writable_and_the_image_stays_as_it_was() {
    only_the_workspace_tmp_and_home_are_writable(DataDir::new()).await;
}

#[tokio::test]
async fn in_an_image_with_the_workspace_under_tmp_only_the_workspace_tmp_and_home_are_writable() {
    only_the_workspace_tmp_and_home_are_writable(DataDir::under(Path::new("/tmp"))).await;
}

#[tokio::test]
async fn a_workspace_under_tmp_is_shown_over_the_runs_own_tmp_on_the_host_root() {
    a_workspace_under_tmp_is_shown_over_the_runs_own_tmp(DataDir::under(Path::new("/tmp"))).await;
}

#[tokio::test]
async fn a_workspace_under_tmp_is_shown_over_the_runs_own_tmp_on_an_image_root() {
    let world = DataDir {
        image: Some(roots::host_like()),
        ..DataDir::under(Path::new("/tmp"))
    };
    a_workspace_under_tmp_is_shown_over_the_runs_own_tmp(world).await;
}

/// DATA_DIR, and so the workspace, under /tmp, which every run replaces with a tmpfs of its
/// own: the workspace is mounted after it, so its files are there and what the command
/// writes lands in it, and nothing else of DATA_DIR is.
async fn a_workspace_under_tmp_is_shown_over_the_runs_own_tmp(world: DataDir) {
    assert!(
        world.workspace.starts_with("/tmp"),
        "{}",
        world.workspace.display()
    );
    std::fs::write(world.workspace.join("from-the-host"), "seen\n").unwrap();
    let elsewhere = world.root.path().with_extension("elsewhere");
    let out = world
        .sh(&format!(
            "cat from-the-host {workspace}/from-the-host
             echo made > made-inside
             echo x > {elsewhere} && echo TMP
             cat {data}/planwright.db {data}/github-app.pem
             ls -A {data}",
            workspace = sh_word(&world.workspace),
            elsewhere = sh_word(&elsewhere),
            data = sh_word(&world.data)
        ))
        .await;
    assert_eq!(
        out.stdout.text(),
        "seen\nseen\nTMP\nworkspaces\n",
        "{}",
        report(&out)
    );
    assert_eq!(
        std::fs::read_to_string(world.workspace.join("made-inside")).unwrap(),
        "made\n"
    );
    assert!(!elsewhere.exists(), "the host's /tmp was written");
}

/// Wherever `world` lies: a workspace under a folder each run gets fresh (/tmp, /run) is
/// shown over the run's own, and the image's copy of that folder is not shown at all.
async fn only_the_workspace_tmp_and_home_are_writable(world: DataDir) {
    let root = image_root(&world, roots::busybox);
    // A folder of the image on the way to the workspace: the workspace's mount point must
    // not be made in the image, which other runs share, and the folder's files stay.
    let top = world.workspace.components().nth(1).unwrap();
    let fresh = ["tmp", "run"].iter().any(|f| top.as_os_str() == *f);
    let on_the_way = root.dir.join(top).join("from-the-image");
    std::fs::create_dir_all(on_the_way.parent().unwrap()).unwrap();
    std::fs::write(&on_the_way, "kept").unwrap();
    let listing = |dir: &Path| -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = walk(dir);
        all.sort();
        all
    };
    let before = listing(&root.dir);
    let home = world.workspace.join("home");
    std::fs::create_dir(&home).unwrap();
    let mut cmd = in_root(
        &world,
        &root,
        &format!(
            "for f in /escaped /etc/escaped /bin/escaped /opt/image/bin/escaped /var/lib/escaped \
                      /root/escaped /.planwright/escaped; do
               if echo x > $f; then echo WROTE $f; fi
             done
             rm /bin/sh && echo REMOVED
             cat {image_file} && echo || echo NOT-SHOWN
             echo x > /tmp/t && echo TMP
             echo x > \"$HOME/h\" && echo HOME
             echo x > in-workspace && echo WORKSPACE",
            image_file = sh_word(Path::new("/").join(top).join("from-the-image"))
        ),
    );
    cmd.env.push(("HOME".into(), home.display().to_string()));
    let out = world.run(&world.sandbox(), cmd).await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("WROTE"), "{}", report(&out));
    assert!(!stdout.contains("REMOVED"), "{}", report(&out));
    let seen = if fresh { "NOT-SHOWN" } else { "kept\n" };
    for wrote in [seen, "TMP", "HOME", "WORKSPACE"] {
        assert!(stdout.contains(wrote), "{wrote}: {}", report(&out));
    }
    assert!(home.join("h").exists() && world.workspace.join("in-workspace").exists());
    assert_eq!(listing(&root.dir), before, "the image folder changed");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

#[tokio::test]
async fn a_root_that_holds_a_hidden_path_or_is_no_folder_is_refused() {
    let world = DataDir::new();
    for (dir, says) in [
        (world.root.path().to_path_buf(), "must stay hidden"),
        (world.data.join("planwright.db"), "is not a folder"),
        (world.root.path().join("missing"), "cannot be opened"),
    ] {
        let cmd = in_root(&world, &Root::new(&dir), "true");
        let err = world.sandbox().run(&cmd).await.unwrap_err().to_string();
        assert!(err.contains(says), "{}: {err}", dir.display());
    }
}

/// An image whose /etc is a symlink, so that its preload file is at another path in the
/// root: a host program carried in would load the library it names (the loader says
/// "ERROR: ld.so: object … cannot be preloaded" for this one). Such a root is refused.
#[tokio::test]
async fn an_image_whose_etc_is_a_symlink_is_refused() {
    for target in ["/x/etc", "x/etc"] {
        let world = DataDir::new();
        let root = image_root(&world, roots::busybox);
        std::fs::create_dir_all(root.dir.join("x")).unwrap();
        std::fs::rename(root.dir.join("etc"), root.dir.join("x/etc")).unwrap();
        std::os::unix::fs::symlink(target, root.dir.join("etc")).unwrap();
        std::fs::write(root.dir.join("x/etc/ld.so.preload"), "/x/evil.so\n").unwrap();
        std::fs::write(root.dir.join("x/evil.so"), "not a library").unwrap();
        let mut cmd = Command::new(&world.workspace, vec!["/usr/bin/true".into()]);
        cmd.from_host = true;
        cmd.root = Some(root);
        let err = match world.sandbox().run(&cmd).await {
            Ok(out) => panic!("{target}: the root was used\n{}", report(&out)),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("its etc is not a folder"), "{target}: {err}");
    }
}

/// An image's `Env` that would preload its library into the host programs carried in
/// (the loader says "ERROR: ld.so: object … cannot be preloaded" for this one) and point
/// the coding CLIs elsewhere: none of it reaches them; the image's other variables do.
#[tokio::test]
async fn an_image_env_that_would_steer_carried_programs_is_dropped() {
    let world = DataDir::new();
    let mut root = image_root(&world, roots::busybox);
    std::fs::write(root.dir.join("evil.so"), "not a library").unwrap();
    for (name, value) in [
        ("LD_PRELOAD", "/evil.so"),
        ("LD_AUDIT", "/evil.so"),
        ("GCONV_PATH", "/"),
        ("NODE_OPTIONS", "--require /evil.js"),
        ("ANTHROPIC_BASE_URL", "http://evil.example"),
        ("OPENAI_API_KEY", "image-key"),
    ] {
        root.env.push((name.into(), value.into()));
    }
    let mut cmd = Command::new(&world.workspace, vec!["/usr/bin/env".into()]);
    cmd.from_host = true;
    cmd.root = Some(root);
    let out = world.run(&world.sandbox(), cmd).await;
    assert!(out.exit.success(), "{}", report(&out));
    let stdout = out.stdout.text();
    assert!(!out.stderr.text().contains("ld.so"), "{}", report(&out));
    for name in [
        "LD_PRELOAD",
        "LD_AUDIT",
        "GCONV_PATH",
        "NODE_OPTIONS",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
    ] {
        assert!(
            !stdout.lines().any(|l| l.starts_with(&format!("{name}="))),
            "{name}\n{}",
            report(&out)
        );
    }
    assert!(
        stdout.contains("IMAGE_FLAVOUR=busybox\n"),
        "{}",
        report(&out)
    );
}

/// An image that names a name service of its own in `nsswitch.conf`, by soname from its
/// library folder and by a name with a `/` from the workspace: the host programs carried
/// in (a glibc one through the host's loader, the static bash the Claude Code executor
/// starts) look users, groups and hosts up without loading either.
#[tokio::test]
async fn an_images_name_services_never_load_into_carried_programs() {
    let world = DataDir::new();
    let marker = world.workspace.join("loaded");
    let dir = world.root.path().join("image");
    std::fs::create_dir(&dir).unwrap();
    let root = roots::hostile_libraries(&dir, &world.workspace, &marker);
    let bash = Path::new("/bin/bash-static");
    assert!(
        bash.is_file(),
        "{} is missing: install bash-static (.ci/run does)",
        bash.display()
    );
    let sandbox = world.sandbox();
    let run = |argv: &[&str], from_host: bool| {
        let mut cmd = Command::new(
            &world.workspace,
            argv.iter().map(|a| (*a).to_owned()).collect(),
        );
        cmd.from_host = from_host;
        if !from_host {
            cmd.carry = vec![bash.to_path_buf()];
        }
        cmd.root = Some(root.clone());
        world.run(&sandbox, cmd)
    };
    for (argv, from_host, says) in [
        (
            &["/usr/bin/getent", "passwd", "root"][..],
            true,
            "root:x:0:0:root:/root:/bin/sh\n",
        ),
        (
            &["/usr/bin/getent", "hosts", "image-host"],
            true,
            "image-host",
        ),
        (&["/usr/bin/id"], true, "uid=1000"),
        (
            &[
                "/.planwright/bin/bash-static",
                "-c",
                "echo ~root; env -u SHELL /.planwright/bin/bash-static -c 'echo $SHELL'",
            ],
            false,
            "/root\n/bin/sh\n",
        ),
    ] {
        let out = run(argv, from_host).await;
        assert!(out.exit.success(), "{argv:?}: {}", report(&out));
        assert!(
            out.stdout.text().contains(says),
            "{argv:?}: {}",
            report(&out)
        );
        assert!(!marker.exists(), "{argv:?} loaded the image's library");
    }
    // The library does run its code once loaded: a program that asks for it by path.
    let loader = world.root.path().join("open-library");
    let source = world.root.path().join("open-library.c");
    std::fs::write(
        &source,
        "#include <dlfcn.h>\nint main(int c, char **v) { return dlopen(v[1], RTLD_NOW) ? 0 : 1; }\n",
    )
    .unwrap();
    roots::cc(&[], &source, &loader);
    let library = format!("/lib/{}-linux-gnu/libnss_evil.so.2", std::env::consts::ARCH);
    let out = run(&[loader.to_str().unwrap(), &library], true).await;
    assert!(out.exit.success(), "{}", report(&out));
    assert!(marker.exists(), "the marker library wrote nothing");
}

/// node, which starts Codex, would load the OpenSSL providers that the image's
/// `openssl.cnf` or its `OPENSSL_CONF` names: carried in, it loads none and runs.
#[tokio::test]
async fn node_loads_no_openssl_provider_the_image_names() {
    let world = DataDir::new();
    let marker = world.workspace.join("loaded");
    let dir = world.root.path().join("image");
    std::fs::create_dir(&dir).unwrap();
    let root = roots::hostile_libraries(&dir, &world.workspace, &marker);
    let script = world.root.path().join("hello.js");
    std::fs::write(&script, "#!/usr/bin/env node\nconsole.log('node ran');\n").unwrap();
    let mut cmd = Command::new(&world.workspace, vec![script.display().to_string()]);
    cmd.from_host = true;
    cmd.root = Some(root);
    let out = world.run(&world.sandbox(), cmd).await;
    assert!(out.exit.success(), "{}", report(&out));
    assert_eq!(out.stdout.text(), "node ran\n", "{}", report(&out));
    assert!(!marker.exists(), "node loaded the image's provider");
}

#[test]
fn sandbox_run_tries_a_command_in_a_root_folder_as_a_run_would() {
    let world = DataDir::new();
    let root = image_root(&world, roots::busybox);
    let sandbox_run = |extra: &[&str], command: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .args(["sandbox", "run", "--workspace"])
            .arg(&world.workspace)
            .args(extra)
            .arg("--")
            .args(command)
            .output()
            .unwrap()
    };
    let dir = root.dir.display().to_string();
    let path = format!("PATH={IMAGE_PATH}");
    let out = sandbox_run(
        &[
            "--root",
            &dir,
            "--root-env",
            &path,
            "--root-env",
            "IMAGE_FLAVOUR=the cli",
        ],
        &[
            "sh",
            "-c",
            &format!("cat {IMAGE_ONLY_FILE}; {IMAGE_ONLY_TOOL}"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, format!("{IMAGE_RELEASE}image tool in the cli\n"));

    let out = sandbox_run(
        &[
            "--root",
            &world.root.path().join("missing").display().to_string(),
        ],
        &["true"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("the root folder") && stderr.contains("cannot be opened"),
        "{stderr}"
    );
    let out = sandbox_run(&["--root-env", "A=b"], &["true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root"));
}

#[tokio::test]
async fn sandbox_run_pulls_an_image_and_runs_the_command_in_it_as_a_run_would() {
    use crate::support::registry::{Access, Registry, UmociImage};
    let registry = Registry::start(Access::Anonymous).await;
    let world = DataDir::new();
    let mut image = UmociImage::new(world.root.path(), "busybox");
    image
        .layer(|rootfs| {
            roots::busybox(rootfs);
        })
        .config(&[
            "--config.env",
            &format!("PATH={IMAGE_PATH}"),
            "--config.env",
            "IMAGE_FLAVOUR=the pulled image",
        ]);
    registry.push_layout(&image.layout, "busybox", "tools/busybox:1");
    let sandbox_run = |extra: &[&str], command: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_planwright"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PLANWRIGHT_DATA_DIR", &world.data)
            .envs(crate::support::registry::operator_listing())
            .args(["sandbox", "run", "--workspace"])
            .arg(&world.workspace)
            .args(extra)
            .args(["--", "sh", "-c", command])
            .output()
            .unwrap()
    };
    let only_in_the_image = format!("cat {IMAGE_ONLY_FILE}; {IMAGE_ONLY_TOOL}");
    assert!(!Path::new("/opt/image").exists(), "the host has the tool");

    let reference = registry.reference("tools/busybox:1");
    let out = sandbox_run(&["--image", &reference], &only_in_the_image);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{IMAGE_RELEASE}image tool in the pulled image\n"),
        "{stderr}"
    );
    // Unpacked into DATA_DIR's cache, where a run finds it.
    let cached = std::fs::read_dir(world.data.join("environments/images"))
        .unwrap()
        .count();
    assert_eq!(cached, 1);
    // On the host's root, the same command finds neither.
    let out = sandbox_run(&[], &only_in_the_image);
    assert_eq!(
        out.status.code(),
        Some(127),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let missing = registry.reference("tools/absent:1");
    let out = sandbox_run(&["--image", &missing], "true");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("Could not pull the image {missing}")) && stderr.contains("404"),
        "{stderr}"
    );
    let root = world.root.path().display().to_string();
    let out = sandbox_run(&["--image", &reference, "--root", &root], "true");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
