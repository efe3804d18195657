//! Networking of the real bubblewrap sandbox: bridges from loopback ports inside to Unix
//! sockets on the host, the setup phase's egress proxy with its allowlist, and everything
//! else staying unreachable. Each escape test fails if the sandbox gets out. bubblewrap and
//! curl must be installed (CI installs both); without them these tests fail, not skip.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use planwright::sandbox::bwrap::HostUser;
use planwright::sandbox::egress::{Allowlist, EgressProxy};
use planwright::sandbox::{Bridge, Bwrap, Command, MODEL_PROXY_PORT, Output, Root, Sandbox};
use secrecy::SecretString;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::support::roots;

const TOKEN: &str = "cap-token-for-this-run-4b1d";

/// A workspace and a folder for host sockets, under the target folder (the sandbox has a
/// private /tmp) and open to the unprivileged user sandboxes run as.
struct SandboxDirs {
    root: tempfile::TempDir,
    workspace: PathBuf,
    /// The `/` every command of the test gets, when not the host's.
    image: Option<Root>,
}

impl SandboxDirs {
    fn new() -> Self {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary folder");
        let workspace = root.path().join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        for dir in [root.path(), &workspace] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        SandboxDirs {
            root,
            workspace,
            image: None,
        }
    }

    /// The same, with every command in an image root that has the host's tools (curl,
    /// bash, python3) and files of its own.
    fn in_image() -> Self {
        SandboxDirs {
            image: Some(roots::host_like()),
            ..SandboxDirs::new()
        }
    }

    /// A host user no other test uses, different for the two roots so that both
    /// variants of a test may run at once.
    fn own_uid(&self, uid: u32) -> u32 {
        if self.image.is_some() { uid + 100 } else { uid }
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn sandbox(&self) -> Bwrap {
        Bwrap::new(Vec::new())
            .expect("bubblewrap is installed (CI installs the bubblewrap package)")
            .with_relay_program(env!("CARGO_BIN_EXE_planwright"))
    }

    fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new(
            &self.workspace,
            vec!["sh".into(), "-c".into(), script.into()],
        );
        cmd.root = self.image.clone();
        cmd
    }

    async fn run(&self, command: &Command) -> Output {
        self.sandbox().run(command).await.expect("the sandbox runs")
    }
}

fn report(out: &Output) -> String {
    format!(
        "exit {:?}, stdout:\n{}\nstderr:\n{}",
        out.exit,
        out.stdout.text(),
        out.stderr.text()
    )
}

/// A host HTTP server that records every request head it gets and answers `pong <path>`.
#[derive(Clone, Default)]
struct Recorder {
    heads: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
}

impl Recorder {
    /// On a Unix socket, mode 0666 like the real proxies make theirs.
    fn on_unix(path: &Path) -> Self {
        // Wherever this checkout lies, however long its path.
        let listener = planwright::unix_socket::bind(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let recorder = Recorder::default();
        let r = recorder.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                r.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(r.clone().answer(stream));
            }
        });
        recorder
    }

    /// On a loopback TCP port, standing in for a package registry.
    async fn on_tcp() -> (Self, u16) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorder = Recorder::default();
        let r = recorder.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                r.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(r.clone().answer(stream));
            }
        });
        (recorder, port)
    }

    async fn answer(self, mut stream: impl AsyncRead + AsyncWrite + Unpin) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
        self.heads.lock().unwrap().push(head);
        let body = format!("pong {path}");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Everything logged through `tracing` in this test process, as plain text.
fn logs() -> String {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let buf = LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || LogWriter(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    });
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn egress(world: &SandboxDirs, allow: &[&str], run: &str) -> EgressProxy {
    logs();
    EgressProxy::start(
        &world.socket("egress.sock"),
        Allowlist::parse(allow).unwrap(),
        run,
    )
    .await
    .unwrap()
}

/// Sends a raw request to the egress proxy's socket and returns its whole answer.
async fn ask_proxy(proxy: &EgressProxy, request: &str) -> String {
    let mut stream = planwright::unix_socket::connect(proxy.socket())
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("the proxy answers")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

crate::on_both_roots!(
    SandboxDirs:
    a_bridge_carries_model_requests_to_the_host_socket,
    the_environment_has_the_base_urls_and_the_token_and_nothing_else_secret,
    without_a_bridge_there_is_no_relay_and_nothing_connects,
    setup_reaches_an_allowlisted_registry_by_connect_and_plain_http,
    setup_refuses_other_hosts_with_403_and_logs_the_denial,
    the_proxy_refuses_the_metadata_service_and_names_resolving_to_loopback,
    no_resolver_is_reachable_inside,
    the_relay_dies_with_the_sandbox,
    a_bridged_command_writes_only_where_the_mounts_allow_and_cannot_kill_the_relay,
    the_relay_comes_in_by_content_from_a_folder_the_sandbox_user_cannot_enter,
);

async fn a_bridge_carries_model_requests_to_the_host_socket(world: SandboxDirs) {
    let socket = world.socket("model.sock");
    let server = Recorder::on_unix(&socket);
    let mut cmd = world.command(
        r#"curl -sS -H "x-api-key: $ANTHROPIC_API_KEY" -d '{"model":"m"}' "$ANTHROPIC_BASE_URL/v1/messages"; echo
           curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" -d '{}' "$OPENAI_BASE_URL/chat/completions""#,
    );
    cmd.bridge_model_proxy(&socket, SecretString::from(TOKEN));
    let out = world.run(&cmd).await;
    assert!(out.exit.success(), "{}", report(&out));
    assert_eq!(
        out.stdout.text(),
        "pong /v1/messages\npong /v1/chat/completions",
        "{}",
        report(&out)
    );
    let heads = server.heads();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(heads[0].starts_with("POST /v1/messages HTTP/1.1\r\n"));
    assert!(heads[0].contains(&format!("x-api-key: {TOKEN}\r\n")));
    assert!(heads[0].contains(&format!("Host: 127.0.0.1:{MODEL_PROXY_PORT}\r\n")));
    assert!(heads[1].starts_with("POST /v1/chat/completions HTTP/1.1\r\n"));
    assert!(heads[1].contains(&format!("Authorization: Bearer {TOKEN}\r\n")));
}

async fn the_environment_has_the_base_urls_and_the_token_and_nothing_else_secret(
    world: SandboxDirs,
) {
    // SAFETY: nextest runs each test in its own process, and no thread reading the
    // environment exists yet.
    unsafe {
        std::env::set_var("ANTHROPIC_API_KEY", "sk-ant-real-provider-key");
        std::env::set_var("PLANWRIGHT_GITHUB_WEBHOOK_SECRET", "hunter2-webhook");
    }
    let socket = world.socket("model.sock");
    let _server = Recorder::on_unix(&socket);
    let mut cmd = world
        .command("env; echo ---; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done");
    cmd.bridge_model_proxy(&socket, SecretString::from(TOKEN));
    let out = world.run(&cmd).await;
    let stdout = out.stdout.text();
    let (env, cmdlines) = stdout.split_once("---").expect("both parts printed");
    for line in [
        format!("ANTHROPIC_BASE_URL=http://127.0.0.1:{MODEL_PROXY_PORT}"),
        format!("OPENAI_BASE_URL=http://127.0.0.1:{MODEL_PROXY_PORT}/v1"),
        format!("ANTHROPIC_API_KEY={TOKEN}"),
        format!("OPENAI_API_KEY={TOKEN}"),
    ] {
        assert!(env.lines().any(|l| l == line), "{line}: {}", report(&out));
    }
    assert!(!stdout.contains("real-provider-key"), "{}", report(&out));
    assert!(!stdout.contains("hunter2"), "{}", report(&out));
    for (name, _) in env.lines().filter_map(|l| l.split_once('=')) {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "TERM",
                "SHELL",
                "PYTHONDONTWRITEBYTECODE",
                "PWD",
                "SHLVL",
                "_",
                "ANTHROPIC_BASE_URL",
                "OPENAI_BASE_URL",
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY"
            ]
            .contains(&name),
            "{name} leaked into the sandbox: {}",
            report(&out)
        );
    }
    // bwrap (pid 1 inside), the relay and the command: the token is in none of their
    // command lines, which any host user can read.
    assert!(cmdlines.contains("bwrap"), "{}", report(&out));
    assert!(cmdlines.contains("sandbox relay"), "{}", report(&out));
    assert!(!cmdlines.contains(TOKEN), "{}", report(&out));
}

async fn without_a_bridge_there_is_no_relay_and_nothing_connects(world: SandboxDirs) {
    let socket = world.socket("model.sock");
    let server = Recorder::on_unix(&socket);
    let out = world
        .run(&world.command(&format!(
            "if curl -sS --max-time 5 http://127.0.0.1:{MODEL_PROXY_PORT}/; then echo CONNECTED; fi
             if bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'; then echo CONNECTED; fi
             ls /run/planwright 2>/dev/null && echo MOUNTED
             for f in /proc/[0-9]*/cmdline; do
               tr '\\0' ' ' < $f | grep -q 'sandbox rela[y]' && echo RELAY
             done
             env | grep -i -e '_proxy=' -e '_base_url=' && echo ENV",
            port = egress_port()
        )))
        .await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("CONNECTED"), "{}", report(&out));
    assert!(!stdout.contains("MOUNTED"), "{}", report(&out));
    assert!(!stdout.contains("RELAY"), "{}", report(&out));
    assert!(!stdout.contains("ENV"), "{}", report(&out));
    assert_eq!(server.connections(), 0);
}

fn egress_port() -> u16 {
    planwright::sandbox::egress::PORT
}

async fn setup_reaches_an_allowlisted_registry_by_connect_and_plain_http(world: SandboxDirs) {
    let (registry, port) = Recorder::on_tcp().await;
    let proxy = egress(
        &world,
        &[&format!("127.0.0.1:{port}"), &format!("localhost:{port}")],
        "run-allow-7",
    )
    .await;
    let mut cmd = world.command(&format!(
        "curl -sS http://127.0.0.1:{port}/plain/crate; echo
         curl -sS --proxytunnel http://127.0.0.1:{port}/tunnel/crate; echo
         curl -sS http://localhost:{port}/by-name"
    ));
    cmd.bridge_egress_proxy(proxy.socket());
    let out = world.run(&cmd).await;
    assert!(out.exit.success(), "{}", report(&out));
    assert_eq!(
        out.stdout.text(),
        "pong /plain/crate\npong /tunnel/crate\npong /by-name",
        "{}",
        report(&out)
    );
    let heads = registry.heads();
    assert_eq!(heads.len(), 3, "{heads:?}");
    // Forwarded in origin form, without the hop to the proxy.
    assert!(
        heads[0].starts_with("GET /plain/crate HTTP/1.1\r\n"),
        "{heads:?}"
    );
    assert!(!heads[0].to_lowercase().contains("proxy-"), "{heads:?}");
    assert!(heads[0].contains("Connection: close\r\n"), "{heads:?}");
    assert!(
        heads[1].starts_with("GET /tunnel/crate HTTP/1.1\r\n"),
        "{heads:?}"
    );
    assert!(
        heads[2].starts_with("GET /by-name HTTP/1.1\r\n"),
        "{heads:?}"
    );
    let logs = logs();
    for method in ["GET", "CONNECT"] {
        assert!(
            logs.lines().any(|l| l.contains("run=run-allow-7")
                && l.contains(&format!("port={port}"))
                && l.contains(&format!("method={method}"))
                && l.contains("verdict=\"allow\"")),
            "{logs}"
        );
    }
}

async fn setup_refuses_other_hosts_with_403_and_logs_the_denial(world: SandboxDirs) {
    let (_registry, port) = Recorder::on_tcp().await;
    let (other, other_port) = Recorder::on_tcp().await;
    let proxy = egress(&world, &[&format!("127.0.0.1:{port}")], "run-deny-3").await;
    let mut cmd = world.command(&format!(
        "curl -sS -w ' %{{http_code}}' http://127.0.0.1:{other_port}/plain; echo
         curl -sS --proxytunnel http://127.0.0.1:{other_port}/tunnel && echo TUNNELLED
         curl -sS -w ' %{{http_code}}' http://127.0.0.1/; echo"
    ));
    cmd.bridge_egress_proxy(proxy.socket());
    let out = world.run(&cmd).await;
    assert_eq!(
        out.stdout.text(),
        format!(
            "planwright egress proxy: 127.0.0.1:{other_port} is not in the allowlist\n 403\n\
             planwright egress proxy: 127.0.0.1:80 is not in the allowlist\n 403\n"
        ),
        "{}",
        report(&out)
    );
    assert!(out.stderr.text().contains("403"), "{}", report(&out));
    assert_eq!(other.connections(), 0);
    let logs = logs();
    for method in ["GET", "CONNECT"] {
        assert!(
            logs.lines().any(|l| l.contains("run=run-deny-3")
                && l.contains(&format!("port={other_port}"))
                && l.contains(&format!("method={method}"))
                && l.contains("verdict=\"deny\"")),
            "{logs}"
        );
    }
}

async fn the_proxy_refuses_the_metadata_service_and_names_resolving_to_loopback(
    world: SandboxDirs,
) {
    let (registry, port) = Recorder::on_tcp().await;
    // `.localhost` covers the name `localhost` by a domain rule, which does not name the
    // loopback address; `localhost:PORT` itself would.
    let proxy = egress(&world, &[&format!(".localhost:{port}")], "run-special-1").await;
    let answer = ask_proxy(&proxy, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("169.254.169.254:80 is not in the allowlist"),
        "{answer}"
    );
    let answer = ask_proxy(
        &proxy,
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    let answer = ask_proxy(
        &proxy,
        &format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("localhost resolves to non-public addresses (127.0.0.1"),
        "{answer}"
    );
    assert_eq!(registry.connections(), 0);
    let logs = logs();
    assert!(
        logs.lines().any(|l| l.contains("run=run-special-1")
            && l.contains("host=\"169.254.169.254\"")
            && l.contains("verdict=\"deny\"")),
        "{logs}"
    );
    drop(proxy);

    // The same request goes through once the name is listed exactly.
    let proxy = egress(&world, &[&format!("localhost:{port}")], "run-special-2").await;
    let answer = ask_proxy(
        &proxy,
        &format!("GET http://localhost:{port}/ok HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("pong /ok"), "{answer}");
    assert_eq!(registry.connections(), 1);
}

async fn no_resolver_is_reachable_inside(world: SandboxDirs) {
    let proxy = egress(&world, &["crates.io"], "run-dns-1").await;
    let host_udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    host_udp.set_nonblocking(true).unwrap();
    let udp_port = host_udp.local_addr().unwrap().port();
    // The resolvers the host uses: a non-loopback one needs a route, which the sandbox's
    // network lacks; a loopback stub (127.0.0.53) would be the host's loopback, not ours.
    let mut cmd = world.command(&format!(
        "if getent hosts crates.io; then echo RESOLVED; fi
         for ns in $(awk '/^nameserver/ {{print $2}}' /etc/resolv.conf) 127.0.0.1; do
           echo TRIED $ns
           case $ns in 127.*) ;; *) if bash -c \": > /dev/udp/$ns/53\"; then echo ROUTED $ns; fi;; esac
         done
         bash -c 'echo query > /dev/udp/127.0.0.1/{udp_port}'"
    ));
    cmd.bridge_egress_proxy(proxy.socket());
    let out = world.run(&cmd).await;
    let stdout = out.stdout.text();
    assert!(!stdout.contains("RESOLVED"), "{}", report(&out));
    assert!(!stdout.contains("ROUTED"), "{}", report(&out));
    assert!(stdout.contains("TRIED 127.0.0.1"), "{}", report(&out));
    let mut buf = [0u8; 64];
    assert!(
        host_udp.recv(&mut buf).is_err(),
        "a datagram from inside reached the host's loopback"
    );
}

/// Host processes of `uid` whose command line starts with `prefix`.
/// How the relay's processes show in `/proc/PID/cmdline`: started through the host's
/// loader brought in under `/.planwright` (see `carry.rs`).
const RELAY_COMMAND_LINE: &str = "/.planwright/lib/relay/ld-linux-x86-64.so.2 \
    --inhibit-cache --library-path /.planwright/lib/relay /run/planwright/relay sandbox relay \
    --bridge";

fn processes_of(uid: u32, prefix: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().to_string_lossy().parse::<u32>().ok()?, e)))
        .filter(|(_, e)| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
        .filter(|(_, e)| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .starts_with(prefix)
                })
                .unwrap_or(false)
        })
        .map(|(pid, _)| pid)
        .collect()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn the_relay_dies_with_the_sandbox(world: SandboxDirs) {
    // A host user of its own, so only this run's processes are counted.
    let own = world.own_uid(64_003);
    let socket = world.socket("model.sock");
    let _server = Recorder::on_unix(&socket);
    let gate = world.workspace.join("gate");
    let path = std::ffi::CString::new(gate.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo of a valid path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let sandbox = world.sandbox().with_host_user(own, own);
    // Not root: sandboxes run as our own user.
    // SAFETY: geteuid has no preconditions.
    let uid = match sandbox.host_user() {
        HostUser::Fixed(uid, _) => *uid,
        _ => unsafe { libc::geteuid() },
    };
    let mut cmd = world.command("echo up > up; cat gate > /dev/null; echo finished");
    cmd.bridges.push(Bridge {
        port: 9000,
        socket: socket.clone(),
    });
    let run = tokio::spawn(async move { sandbox.run(&cmd).await });
    let up = world.workspace.join("up");
    wait_until("the command started", || up.exists()).await;
    // Not bwrap, whose command line names the relay too: the relay itself.
    let relays = processes_of(uid, RELAY_COMMAND_LINE);
    assert!(!relays.is_empty(), "the relay runs while the command does");
    let opened = tokio::task::spawn_blocking(move || std::fs::write(gate, b"go"));
    let out = run.await.unwrap().expect("the sandbox runs");
    opened.await.unwrap().unwrap();
    assert_eq!(out.stdout.text(), "finished\n", "{}", report(&out));
    wait_until("the relay is gone", || {
        relays
            .iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    })
    .await;
    if uid == own {
        wait_until("every process of the run is gone", || {
            processes_of(own, "").is_empty()
        })
        .await;
    }
}

fn planwright(world: &SandboxDirs) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_planwright"));
    cmd.current_dir(world.root.path())
        .env("PLANWRIGHT_DATA_DIR", world.root.path().join("data"));
    cmd
}

#[tokio::test]
async fn sandbox_run_with_network_setup_reaches_only_the_allowed_hosts() {
    let world = SandboxDirs::new();
    let (registry, port) = Recorder::on_tcp().await;
    let (other, other_port) = Recorder::on_tcp().await;
    let mut cmd = planwright(&world);
    cmd.args(["sandbox", "run", "--network", "setup", "--allow"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--workspace")
        .arg(&world.workspace)
        .arg("--")
        .args([
            "sh",
            "-c",
            &format!(
                "curl -sS http://127.0.0.1:{port}/from-cli; echo; curl -sS http://127.0.0.1:{other_port}/"
            ),
        ]);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        format!(
            "pong /from-cli\nplanwright egress proxy: 127.0.0.1:{other_port} is not in the allowlist\n"
        ),
        "{stderr}"
    );
    assert_eq!(registry.heads().len(), 1);
    assert_eq!(other.connections(), 0);
    // Every connection is logged, the denied one too.
    assert!(stderr.contains("egress allowed"), "{stderr}");
    assert!(stderr.contains("egress denied"), "{stderr}");
    assert!(stderr.contains(&format!("port={other_port}")), "{stderr}");
}

#[test]
fn doctor_starts_a_sandbox_and_fails_without_bubblewrap() {
    let world = SandboxDirs::new();
    let out = planwright(&world).arg("doctor").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "ok   bubblewrap",
        "ok   sandbox          bubblewrap started `true` in a sandbox",
        "ok   bridge",
        "ok   data dir",
        "ok   host user        sandboxes run as a uid of their own",
        "ok   control groups",
        "used: each sandbox runs in a group of its own",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    assert!(
        std::fs::read_dir(world.root.path().join("data"))
            .unwrap()
            .next()
            .is_none(),
        "doctor left files in DATA_DIR"
    );

    let out = planwright(&world)
        .arg("doctor")
        .env("PATH", world.root.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAIL bubblewrap       `bwrap` is not on PATH"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SANDBOX=none together with UNSAFE_NO_SANDBOX=1"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Cannot run planwright here as configured: fix ")
            && String::from_utf8_lossy(&out.stderr).contains("bubblewrap"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Landlock ABI of this kernel (below 1: none).
fn landlock_abi() -> i64 {
    // SAFETY: the documented probe: a null attribute of size 0 with the version flag.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    }
}

async fn a_bridged_command_writes_only_where_the_mounts_allow_and_cannot_kill_the_relay(
    world: SandboxDirs,
) {
    let abi = landlock_abi();
    assert!(
        abi >= 2,
        "this kernel has no usable Landlock (ABI {abi}); the sandbox's second wall needs it"
    );
    // Outside /tmp, wherever this checkout lives: writes under /tmp are allowed inside
    // (it is the sandbox's private tmpfs), and a cover under it would be too.
    let outside_tmp = tempfile::tempdir_in("/var/tmp").expect("a folder under /var/tmp");
    let hidden = outside_tmp.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    let socket = world.socket("model.sock");
    let server = Recorder::on_unix(&socket);
    let script = format!(
        "echo x > /tmp/t && echo TMP
         echo x > in-workspace && mv in-workspace moved && echo WORKSPACE
         echo x > /dev/null && echo DEVNULL
         echo x > {hidden}/escaped && echo COVER
         for p in /proc/[0-9]*; do
           case \"$(tr '\\0' ' ' < $p/cmdline)\" in
             \"{RELAY_COMMAND_LINE}\"*) kill -9 ${{p#/proc/}} && echo KILLED;;
           esac
         done
         curl -sS http://127.0.0.1:9000/still-there",
        hidden = hidden.display()
    );
    let sandbox = Bwrap::new(vec![hidden.clone()])
        .unwrap()
        .with_relay_program(env!("CARGO_BIN_EXE_planwright"));

    // A hidden folder outside the allowlisted root is not in the sandbox at all, not even
    // as a cover that could be written.
    let out = sandbox.run(&world.command(&script)).await.unwrap();
    assert!(out.stdout.text().contains("WORKSPACE"), "{}", report(&out));
    assert!(!out.stdout.text().contains("COVER"), "{}", report(&out));

    let mut cmd = world.command(&script);
    cmd.bridges.push(Bridge {
        port: 9000,
        socket: socket.clone(),
    });
    let out = sandbox.run(&cmd).await.unwrap();
    let stdout = out.stdout.text();
    for allowed in ["TMP", "WORKSPACE", "DEVNULL"] {
        assert!(stdout.contains(allowed), "{allowed}: {}", report(&out));
    }
    assert!(!stdout.contains("COVER"), "{}", report(&out));
    assert!(world.workspace.join("moved").exists());
    // Signals out of the Landlock domain are scoped from ABI 6 (Linux 6.12) on.
    if abi >= 6 {
        assert!(!stdout.contains("KILLED"), "{}", report(&out));
        assert!(stdout.ends_with("pong /still-there"), "{}", report(&out));
        assert_eq!(server.heads().len(), 1);
    }
}

async fn the_relay_comes_in_by_content_from_a_folder_the_sandbox_user_cannot_enter(
    world: SandboxDirs,
) {
    // As `mktemp -d` makes it (0700, root's): a clone or `cargo install` root there.
    let private = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let relay = private.path().join("planwright");
    std::fs::hard_link(env!("CARGO_BIN_EXE_planwright"), &relay)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_planwright"), &relay).map(|_| ()))
        .unwrap();
    let socket = world.socket("model.sock");
    let server = Recorder::on_unix(&socket);
    let mut cmd = world.command("curl -sS http://127.0.0.1:9000/through-the-relay");
    cmd.bridges.push(Bridge {
        port: 9000,
        socket: socket.clone(),
    });
    let sandbox = Bwrap::new(Vec::new()).unwrap().with_relay_program(&relay);
    let out = sandbox.run(&cmd).await.expect("the sandbox runs");
    assert!(out.exit.success(), "{}", report(&out));
    assert_eq!(
        out.stdout.text(),
        "pong /through-the-relay",
        "{}",
        report(&out)
    );
    assert_eq!(server.heads().len(), 1);
}

#[test]
fn doctor_says_what_isolation_a_planwright_that_is_not_root_has() {
    const UID: u32 = 64_030;
    let world = SandboxDirs::new();
    let data = world.root.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(UID), Some(UID)).unwrap();
    use std::os::unix::process::CommandExt;
    let out = planwright(&world)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PLANWRIGHT_DATA_DIR", &data)
        .uid(UID)
        .gid(UID)
        .arg("doctor")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        &format!(
            "ok   host user        planwright is not root, so sandboxes run as its own uid {UID}"
        ),
        "nothing of this user's home",
        "share this user's process limit",
        "ok   sandbox          bubblewrap started `true` in a sandbox",
        "warn control groups",
        "not used:",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

#[tokio::test]
async fn the_model_proxy_bridge_works_in_images_with_no_libc_or_another_ones() {
    for build in [roots::busybox, roots::foreign_libc] {
        let world = SandboxDirs::new();
        let dir = world.root.path().join("image");
        std::fs::create_dir(&dir).unwrap();
        let root = build(&dir);
        let socket = world.socket("model.sock");
        let server = Recorder::on_unix(&socket);
        // busybox's wget: the image has no curl, and the host's is not there.
        let mut cmd = world.command(
            "cat /etc/ld.so.preload && echo PRELOAD
             test -e /usr/bin/curl && echo HOST_CURL
             wget -q -O - --header \"x-api-key: $ANTHROPIC_API_KEY\" \
               \"$ANTHROPIC_BASE_URL/v1/messages\"",
        );
        cmd.root = Some(root);
        cmd.bridge_model_proxy(&socket, SecretString::from(TOKEN));
        let out = world.run(&cmd).await;
        assert!(out.exit.success(), "{}", report(&out));
        assert_eq!(out.stdout.text(), "pong /v1/messages", "{}", report(&out));
        // The host's loader started the relay and loaded nothing the image named (it says
        // "ERROR: ld.so: object … cannot be preloaded" when it sees a preload file).
        assert!(
            !out.stderr.text().contains("ERROR: ld.so"),
            "{}",
            report(&out)
        );
        assert!(!out.stdout.text().contains("PRELOAD"), "{}", report(&out));
        let heads = server.heads();
        assert_eq!(heads.len(), 1, "{}", report(&out));
        assert!(
            heads[0].starts_with("GET /v1/messages HTTP/1.1\r\n"),
            "{heads:?}"
        );
        assert!(
            heads[0].contains(&format!("x-api-key: {TOKEN}\r\n")),
            "{heads:?}"
        );
    }
}
