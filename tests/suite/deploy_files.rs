//! The Dockerfile and fly.toml agree with the code they ship: the Rust image is new enough
//! for `rust-version`, the binary and its subcommands exist, the exposed port is the
//! default LISTEN port, and every health and metrics path they name answers on the real
//! router. (The image itself needs a Docker engine; `.ci/run` lints the file with hadolint.)

use crate::support;

use std::path::PathBuf;

use planwright::config::Settings;
use support::{TestDb, TestServer, planwright_command};

fn repo_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions() -> Vec<(String, String)> {
    let text = repo_file("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

fn all(instructions: &[(String, String)], keyword: &str) -> Vec<String> {
    instructions
        .iter()
        .filter(|(k, _)| k == keyword)
        .map(|(_, v)| v.clone())
        .collect()
}

/// The value of `ARG name=value`.
fn arg_default(instructions: &[(String, String)], name: &str) -> String {
    all(instructions, "ARG")
        .into_iter()
        .find_map(|a| a.strip_prefix(&format!("{name}=")).map(str::to_owned))
        .unwrap_or_else(|| panic!("no ARG {name}=… in the Dockerfile"))
}

fn version(text: &str) -> Vec<u64> {
    text.split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("not a version: {text}"))
        })
        .collect()
}

fn cargo_manifest() -> toml::Table {
    toml::from_str(&repo_file("Cargo.toml")).unwrap()
}

fn default_port() -> u16 {
    Settings::from_sources(None, &[])
        .expect("the defaults load")
        .listen
        .port()
}

#[test]
fn the_dockerfile_builds_this_crate_with_a_new_enough_rust() {
    let ins = instructions();
    let manifest = cargo_manifest();
    let package = manifest["package"].as_table().unwrap();
    let needed = version(package["rust-version"].as_str().unwrap());
    let rust = arg_default(&ins, "RUST_VERSION");
    assert!(
        version(&rust) >= needed,
        "the builder's Rust {rust} is older than rust-version {needed:?}"
    );
    let froms = all(&ins, "FROM");
    assert!(
        froms
            .iter()
            .any(|f| f.starts_with("rust:${RUST_VERSION}-") && f.ends_with(" AS builder")),
        "{froms:?}"
    );
    let bin = package["default-run"].as_str().unwrap();
    assert_eq!(bin, package["name"].as_str().unwrap());
    let runs = all(&ins, "RUN").join("\n");
    assert!(
        runs.contains(&format!("cargo build --release --locked --bin {bin}")),
        "{runs}"
    );
    let copies = all(&ins, "COPY");
    assert!(
        copies.contains(&format!(
            "--from=builder /usr/local/bin/{bin} /usr/local/bin/{bin}"
        )),
        "{copies:?}"
    );
    assert_eq!(all(&ins, "ENTRYPOINT"), vec![format!("[\"{bin}\"]")]);
}

#[test]
fn the_runtime_image_is_slim_debian_with_git_and_bubblewrap_as_a_non_root_user() {
    let ins = instructions();
    let froms = all(&ins, "FROM");
    assert!(
        froms.contains(&"debian:${DEBIAN_RELEASE}-slim AS runtime-0".to_owned()),
        "{froms:?}"
    );
    let runs = all(&ins, "RUN").join("\n");
    for package in ["git", "bubblewrap", "ca-certificates"] {
        assert!(
            runs.split_whitespace().any(|w| w == package),
            "{package} is not installed: {runs}"
        );
    }
    let users = all(&ins, "USER");
    assert_eq!(users.len(), 1, "{users:?}");
    let uid = users[0].split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "runs as root: {users:?}");
    assert!(runs.contains(&format!("--uid {uid}")), "{runs}");

    // DATA_DIR is the volume and belongs to that user.
    let env = all(&ins, "ENV").join(" ");
    let data_dir = env
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("PLANWRIGHT_DATA_DIR="))
        .expect("PLANWRIGHT_DATA_DIR is set");
    assert_eq!(all(&ins, "VOLUME"), vec![format!("[\"{data_dir}\"]")]);
    assert!(runs.contains(&format!("chown planwright:planwright {data_dir}")));

    // WITH_AGENTS=1 picks the stage with Node and both executors.
    assert_eq!(arg_default(&ins, "WITH_AGENTS"), "0");
    assert_eq!(froms.last().unwrap(), "runtime-${WITH_AGENTS}");
    assert!(
        froms.contains(&"runtime-0 AS runtime-1".to_owned()),
        "{froms:?}"
    );
    for package in ["@anthropic-ai/claude-code@", "@openai/codex@"] {
        assert!(runs.contains(package), "{package} is not installed: {runs}");
    }
    let node: u64 = arg_default(&ins, "NODE_VERSION").parse().unwrap();
    assert!(node >= 22, "Claude Code needs Node 22 or newer, not {node}");

    // Nothing secret or bulky goes into the build context.
    let ignored = repo_file(".dockerignore");
    for entry in ["target/", "data/", "planwright.toml", ".env", "*.pem"] {
        assert!(
            ignored.lines().any(|l| l == entry),
            "{entry} is not ignored"
        );
    }
}

#[test]
fn the_image_serves_on_the_default_port_and_runs_real_subcommands() {
    let ins = instructions();
    let port = default_port();
    assert_eq!(all(&ins, "EXPOSE"), vec![port.to_string()]);
    let env = all(&ins, "ENV").join(" ");
    assert!(
        env.contains(&format!("PLANWRIGHT_LISTEN=0.0.0.0:{port}")),
        "{env}"
    );
    let health = all(&ins, "HEALTHCHECK").join(" ");
    assert!(
        health.contains(&format!("http://127.0.0.1:{port}/healthz")),
        "{health}"
    );
    let cmd = all(&ins, "CMD");
    assert_eq!(cmd, vec!["[\"serve\"]".to_owned()]);
    for sub in ["serve", "migrate", "doctor"] {
        let out = planwright_command().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "`planwright {sub}` does not exist");
    }
}

#[test]
fn fly_toml_mounts_data_dir_and_migrates_before_release() {
    let fly: toml::Table = toml::from_str(&repo_file("fly.toml")).unwrap();
    let data_dir = fly["env"]["PLANWRIGHT_DATA_DIR"].as_str().unwrap();
    let mounts = fly["mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0]["destination"].as_str(), Some(data_dir));
    assert_eq!(
        fly["deploy"]["release_command"].as_str(),
        Some("planwright migrate")
    );
    let port = i64::from(default_port());
    assert_eq!(
        fly["http_service"]["internal_port"].as_integer(),
        Some(port)
    );
    // Metrics stay off the public service: on a listener of their own, which Fly scrapes.
    let metrics_port = metrics_port(&fly);
    assert_ne!(
        metrics_port, port,
        "the public service would serve /metrics"
    );
    let services = fly.get("services").and_then(|s| s.as_array());
    assert!(
        services
            .into_iter()
            .flatten()
            .all(|s| s["internal_port"].as_integer() != Some(metrics_port)),
        "a service exposes the metrics port"
    );
    assert_eq!(fly["metrics"]["port"].as_integer(), Some(metrics_port));
    assert_eq!(fly["metrics"]["path"].as_str(), Some("/metrics"));
    assert_eq!(
        fly["env"]["PLANWRIGHT_LISTEN"].as_str(),
        Some(format!("0.0.0.0:{port}").as_str())
    );
    let checks = fly["checks"].as_table().unwrap();
    assert!(
        checks
            .values()
            .any(|c| c["path"].as_str() == Some("/healthz") && c["port"].as_integer() == Some(port)),
        "{checks:?}"
    );
    assert_eq!(
        fly["build"]["dockerfile"].as_str(),
        Some("Dockerfile"),
        "fly.toml builds another file"
    );
}

/// The port of fly.toml's PLANWRIGHT_METRICS_LISTEN.
fn metrics_port(fly: &toml::Table) -> i64 {
    let listen = fly["env"]["PLANWRIGHT_METRICS_LISTEN"]
        .as_str()
        .expect("fly.toml gives the metrics a listener of their own");
    listen.rsplit(':').next().unwrap().parse().unwrap()
}

/// Every path the deployment files probe answers 200 on the real router; the metrics on
/// their own listener, as fly.toml sets it up, and not on the main one.
#[tokio::test]
async fn the_paths_the_deployment_files_probe_answer() {
    let fly: toml::Table = toml::from_str(&repo_file("fly.toml")).unwrap();
    let metrics_path = fly["metrics"]["path"].as_str().unwrap().to_owned();
    let mut paths = Vec::new();
    for check in fly["checks"].as_table().unwrap().values() {
        paths.push(check["path"].as_str().unwrap().to_owned());
    }
    for check in fly["http_service"]["checks"].as_array().unwrap() {
        paths.push(check["path"].as_str().unwrap().to_owned());
    }
    let health = all(&instructions(), "HEALTHCHECK").join(" ");
    let docker_path = health
        .split(&format!("127.0.0.1:{}", default_port()))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a health check URL");
    paths.push(docker_path.to_owned());

    let db = TestDb::new().await;
    let server = TestServer::web_with(&db, &[("PLANWRIGHT_METRICS_LISTEN", "127.0.0.1:0")]).await;
    for path in &paths {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    assert!(paths.len() >= 3, "{paths:?}");
    let metrics_base = server.metrics_base.clone().expect("a metrics listener");
    let scraped = server
        .client
        .get(format!("{metrics_base}{metrics_path}"))
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200, "{metrics_path}");
    let public = server
        .client
        .get(format!("{}{metrics_path}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "{metrics_path} on the main listener");
    server.stop().await;
}
