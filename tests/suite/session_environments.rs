//! Sessions in the repository's own environment, on GitHub and on GitLab: an image on a
//! real registry (named by the repository file or by its devcontainer) holds the only test
//! tool that can check the change, so the pull request's results can only have come from
//! inside it; an image that cannot be pulled stops the session before any model is paid.

use serde_json::json;

use crate::support::calc::{CALC, contract_checked_by};
use crate::support::model_server::Step;
use crate::support::registry::{Access, Registry, UmociImage, busybox_root};
use crate::support::world::{World, verdict};
use planwright::event::ForgeKind;

/// The test tool only the image has: it checks `add` the way a project's own runner
/// would, and prints TAP.
const CALC_TEST: &str = "#!/bin/sh\n\
if grep -q 'return a + b' calc.py; then\n\
  echo 'ok 1 - add adds'\n\
  echo '1..1'\n\
else\n\
  echo 'not ok 1 - add adds'\n\
  echo '1..1'\n\
  exit 1\n\
fi\n";

/// A static busybox image whose `PATH` leads to `calc-test`, pushed as `tools/calc:1`.
fn push_tools_image(registry: &Registry, dir: &std::path::Path) {
    let mut image = UmociImage::new(dir, "calc");
    image
        .layer(|root| {
            busybox_root(root);
            for tool in ["grep", "echo"] {
                std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
            }
            let bin = root.join("opt/calc/bin");
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::write(bin.join("calc-test"), CALC_TEST).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(
                bin.join("calc-test"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        })
        .config(&["--config.env", "PATH=/opt/calc/bin:/bin"]);
    registry.push_layout(&image.layout, "calc", "tools/calc:1");
}

/// The manifest digest the registry serves for `name:tag`, as its own header says.
async fn served_digest(registry: &Registry, name: &str, tag: &str) -> String {
    let url = format!("http://{}/v2/{name}/manifests/{tag}", registry.addr);
    let response = reqwest::Client::new()
        .head(url)
        .header(
            "Accept",
            "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");
    response.headers()["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The planner sends a scout, which runs the image's tool, then submits; the builtin
/// executor fixes `add`; the reviewer accepts.
fn fixing_script() -> Vec<Step> {
    vec![
        Step::tool_call("p0", "investigate", json!({"question": "Does calc-test pass?"}))
            .when_tools(&["submit_contract"]),
        Step::tool_call("s1", "run", json!({"command": "calc-test"})).when_tools(&["report"]),
        Step::tool_call(
            "s2",
            "report",
            json!({"findings": "calc-test fails: add subtracts", "evidence": ["calc.py:2"], "confidence": "high"}),
        )
        .when_tools(&["report"]),
        Step::tool_call("p1", "submit_contract", contract_checked_by("calc-test", 1))
            .when_tools(&["submit_contract"]),
        Step::tool_call(
            "e1",
            "edit_file",
            json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}),
        )
        .when_tools(&["finish", "edit_file"]),
        Step::tool_call("e2", "finish", json!({"summary": "add now adds."}))
            .when_tools(&["finish"]),
        verdict(true, "The change the contract asks for."),
    ]
}

/// A calc repository holding `files` besides its code, planned and fixed by the scripted
/// models, with `settings` as its planwright file.
async fn calc_world(on: ForgeKind, settings: &str, files: &[(&str, &str)]) -> World {
    let mut all = vec![("calc.py", CALC), (World::settings_path(on), settings)];
    all.extend_from_slice(files);
    let relay = env!("CARGO_BIN_EXE_planwright");
    let extra = [
        ("PLANWRIGHT_EXECUTOR_MODEL", "anthropic:claude-sonnet-4-5"),
        ("PLANWRIGHT_SANDBOX_RELAY", relay),
    ];
    World::start_with(on, fixing_script(), &all, &extra).await
}

fn host_lacks(tool: &str) {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    assert!(
        !found.status.success(),
        "the host must not have `{tool}`, or the test proves nothing"
    );
}

/// Label → contract → `/approve` → a pull request whose results and digest come from the
/// image; `source` is how the contract's settings section names where it came from.
async fn runs_in_the_image(world: World, registry: &Registry, source: &str) {
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    let digest = served_digest(registry, "tools/calc", "1").await;
    let reference = registry.reference("tools/calc:1");

    // The scout's command ran in the image too: what it was shown is the tool's output.
    let scouted = world.models.requests().iter().any(|r| {
        let body = r.body.to_string();
        body.contains("exit: Code(1)\\ntap: FAILED") && body.contains("- add adds")
    });
    assert!(scouted, "no scout saw calc-test's output");
    let contract = world.contract_comments().pop().expect("a contract comment");
    assert!(
        contract.contains(&format!(
            "- environment: `{reference}` (`{digest}`), from {source}"
        )),
        "{contract}"
    );
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let body = &pulls[0].body;
    assert!(
        body.contains(&format!(
            "Ran in the image `{reference}` (`{digest}`), from {source}."
        )),
        "{body}"
    );
    // The tool exists only in the image: the base failed it and the result passes it.
    assert!(
        body.contains("| `calc-test` | ❌ 0 passed, 1 failed · exit 1")
            && body.contains("| ✅ 1 passed, 0 failed · exit 0"),
        "{body}"
    );
    let runs = world.runs().await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(
        runs[0].environment.as_deref(),
        Some(format!("{reference}@{digest}").as_str()),
        "recorded on the run"
    );
    world.server.stop().await;
}

async fn a_tool_only_the_repositorys_image_has_checks_the_change(on: ForgeKind) {
    host_lacks("calc-test");
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    push_tools_image(&registry, dir.path());
    let reference = registry.reference("tools/calc:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let world = calc_world(on, &settings, &[]).await;
    runs_in_the_image(
        world,
        &registry,
        "the repository file's `environment.image`",
    )
    .await;
}

async fn the_devcontainers_image_is_used_when_the_repository_file_names_none(on: ForgeKind) {
    host_lacks("calc-test");
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    push_tools_image(&registry, dir.path());
    let reference = registry.reference("tools/calc:1");
    let devcontainer = format!(
        "{{\n  // The team's CI image.\n  \"name\": \"calc\",\n  \"image\": \"{reference}\",\n}}\n"
    );
    let files = [(".devcontainer/devcontainer.json", devcontainer.as_str())];
    let world = calc_world(on, "test: calc-test\n", &files).await;
    runs_in_the_image(
        world,
        &registry,
        "the devcontainer `.devcontainer/devcontainer.json`",
    )
    .await;
}

async fn an_image_that_cannot_be_pulled_stops_the_session_before_any_model_is_paid(on: ForgeKind) {
    let registry = Registry::start(Access::Anonymous).await;
    let reference = registry.reference("tools/missing:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let world = calc_world(on, &settings, &[]).await;
    world.label(&world.maintainer, "label-missing-image").await;
    let failed = world.wait_for_state("failed").await;
    let reason = failed.failure.unwrap_or_default();
    assert!(
        reason.contains(&format!("The environment image `{reference}`"))
            && reason.contains("from the repository file's `environment.image`")
            && reason.contains("Check the name and the tag"),
        "{reason}"
    );
    let status = world
        .wait_for_comment("the failure", |b| b.contains("could not be used"))
        .await;
    assert!(status.contains(&reference), "{status}");
    assert!(world.models.requests().is_empty(), "a model was called");
    world.all_jobs_settled().await;
    world.server.stop().await;
}

async fn an_image_without_the_bwrap_sandbox_is_refused_before_any_model_is_paid(on: ForgeKind) {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    push_tools_image(&registry, dir.path());
    let reference = registry.reference("tools/calc:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let mut all = vec![
        ("calc.py", CALC),
        (World::settings_path(on), settings.as_str()),
    ];
    all.truncate(2);
    let extra = [
        ("PLANWRIGHT_SANDBOX", "none"),
        ("PLANWRIGHT_UNSAFE_NO_SANDBOX", "true"),
    ];
    let world = World::start_with(on, fixing_script(), &all, &extra).await;
    world.label(&world.maintainer, "label-no-bwrap").await;
    let failed = world.wait_for_state("failed").await;
    let reason = failed.failure.unwrap_or_default();
    assert!(
        reason.contains(&format!("The environment image `{reference}`"))
            && reason.contains("without the bwrap sandbox"),
        "{reason}"
    );
    assert!(world.models.requests().is_empty(), "a model was called");
    // planwright's requests carry its user agent; skopeo's push does not.
    let log = registry.log();
    assert!(!log.contains("planwright/"), "the image was pulled: {log}");
    world.server.stop().await;
}

/// `tools/calc:1` moved to an image whose `calc-test` passes whatever the code says.
fn push_lenient_image_under_the_same_tag(registry: &Registry, dir: &std::path::Path) {
    let mut image = UmociImage::new(dir, "lenient");
    image
        .layer(|root| {
            busybox_root(root);
            let bin = root.join("opt/calc/bin");
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::write(
                bin.join("calc-test"),
                "#!/bin/sh\necho 'ok 1 - add adds'\necho '1..1'\n",
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(
                bin.join("calc-test"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        })
        .config(&["--config.env", "PATH=/opt/calc/bin:/bin"]);
    registry.push_layout(&image.layout, "lenient", "tools/calc:1");
}

async fn a_tag_moved_after_planning_does_not_change_what_the_approval_runs(on: ForgeKind) {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    push_tools_image(&registry, dir.path());
    let planned = served_digest(&registry, "tools/calc", "1").await;
    let reference = registry.reference("tools/calc:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let world = calc_world(on, &settings, &[]).await;
    world.label(&world.maintainer, "label-tag-moves").await;
    world.wait_for_state("awaiting_approval").await;
    let contract = world.contract_comments().pop().expect("a contract comment");
    assert!(
        contract.contains(&format!("- environment: `{reference}` (`{planned}`)")),
        "the approval shows the digest it binds: {contract}"
    );
    // The registry is not trusted: between planning and approval it moves the tag.
    push_lenient_image_under_the_same_tag(&registry, dir.path());
    assert_ne!(served_digest(&registry, "tools/calc", "1").await, planned);
    world
        .comment(&world.maintainer, "/approve", "approve-tag-moved")
        .await;
    world.wait_for_state("pr_opened").await;
    let body = &world.pulls()[0].body;
    assert!(body.contains(&format!("(`{planned}`)")), "{body}");
    // The approved image's tool still fails the base: the lenient one would pass it.
    assert!(
        body.contains("| `calc-test` | ❌ 0 passed, 1 failed · exit 1"),
        "{body}"
    );
    world.server.stop().await;
}

async fn an_image_gone_by_approval_stops_the_run_before_the_executor_is_paid(on: ForgeKind) {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    push_tools_image(&registry, dir.path());
    let digest = served_digest(&registry, "tools/calc", "1").await;
    let reference = registry.reference("tools/calc:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let world = calc_world(on, &settings, &[]).await;
    world.label(&world.maintainer, "label-image-gone").await;
    world.wait_for_state("awaiting_approval").await;
    // Evicted from planwright's cache, and deleted from the registry's own storage.
    let hex = digest.trim_start_matches("sha256:");
    let cached = world
        .settings
        .data_dir
        .join("environments/images")
        .join(hex);
    std::fs::remove_dir_all(&cached).unwrap();
    let manifests = registry
        .storage
        .join("docker/registry/v2/repositories/tools/calc/_manifests");
    std::fs::remove_dir_all(manifests.join("tags/1")).unwrap();
    std::fs::remove_dir_all(manifests.join("revisions/sha256").join(hex)).unwrap();
    world
        .comment(&world.maintainer, "/approve", "approve-image-gone")
        .await;
    let failed = world.wait_for_state("failed").await;
    let reason = failed.failure.unwrap_or_default();
    assert!(
        reason.contains(&format!("The environment image `{reference}`"))
            && reason.contains("Check the name and the tag"),
        "{reason}"
    );
    let executor_called = world.models.requests().iter().any(|r| {
        let body = r.body.to_string();
        body.contains("\"finish\"") && body.contains("\"edit_file\"")
    });
    assert!(!executor_called, "the executor's model was called");
    assert!(world.runs().await.is_empty(), "an attempt was started");
    world.all_jobs_settled().await;
    world.server.stop().await;
}

/// The operator-only detail the session's failure was recorded with in the audit log.
async fn failure_detail(world: &World) -> String {
    let mut conn = world.server.db.pool.acquire().await.unwrap();
    let log = planwright::store::audit::list(&mut conn).await.unwrap();
    let failed = log
        .iter()
        .find(|e| e.action == "session.failed")
        .unwrap_or_else(|| panic!("no session.failed entry: {log:#?}"));
    let detail: serde_json::Value = serde_json::from_str(&failed.detail).unwrap();
    detail["detail"].as_str().unwrap_or_default().to_owned()
}

/// A repository names a port on the planwright host's loopback as its image's registry,
/// and the operator lists no registry: nothing connects to it, and the issue learns only
/// that the address is not public.
#[tokio::test]
async fn a_repository_cannot_point_the_pull_at_a_loopback_port() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let reference = format!("127.0.0.1:{port}/x:latest");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let world = calc_world(ForgeKind::Github, &settings, &[]).await;
    world.label(&world.maintainer, "label-loopback-image").await;
    let failed = world.wait_for_state("failed").await;
    let reason = failed.failure.unwrap_or_default();
    assert!(
        reason.contains(&format!("The environment image `{reference}`"))
            && reason.contains("is not at a public address")
            && reason.contains("REGISTRY_PRIVATE"),
        "{reason}"
    );
    let status = world
        .wait_for_comment("the failure", |b| b.contains("could not be used"))
        .await;
    assert!(!status.contains("a loopback address"), "{status}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the pull connected to the loopback port: {other:?}"),
    }
    let detail = failure_detail(&world).await;
    assert!(
        detail.contains("its registry is at 127.0.0.1, a loopback address"),
        "{detail}"
    );
    assert!(world.models.requests().is_empty(), "a model was called");
    world.all_jobs_settled().await;
    world.server.stop().await;
}

/// A registry the operator listed answers a pull with its own text (here, naming an
/// inside host): the issue gets the kind of failure and what to do, the audit log the
/// registry's words.
#[tokio::test]
async fn the_registrys_own_answer_stays_out_of_the_issue() {
    const ANSWER: &str = "bc-7.build.corp.internal has no repository tools/calc";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{BufRead as _, Write as _};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while head.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let body =
                format!("{{\"errors\":[{{\"code\":\"NAME_UNKNOWN\",\"message\":\"{ANSWER}\"}}]}}");
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let on = ForgeKind::Github;
    let reference = format!("{addr}/tools/calc:1");
    let settings = format!("test: calc-test\nenvironment:\n  image: {reference}\n");
    let files = [
        ("calc.py", CALC),
        (World::settings_path(on), settings.as_str()),
    ];
    let extra = [("PLANWRIGHT_REGISTRY_INSECURE", addr.as_str())];
    let world = World::start_with(on, fixing_script(), &files, &extra).await;
    world
        .label(&world.maintainer, "label-answering-registry")
        .await;
    let failed = world.wait_for_state("failed").await;
    let reason = failed.failure.unwrap_or_default();
    let status = world
        .wait_for_comment("the failure", |b| b.contains("could not be used"))
        .await;
    for public in [&reason, &status] {
        assert!(
            public.contains("its registry has no such image")
                && public.contains("Check the name and the tag")
                && public.contains("audit log"),
            "{public}"
        );
        // The image's own name (its port may hold any digits) is the comment's to show.
        let public = public.replace(&reference, "");
        for hidden in ["bc-7", "NAME_UNKNOWN", "404", "/v2/"] {
            assert!(!public.contains(hidden), "{hidden} in: {public}");
        }
    }
    let detail = failure_detail(&world).await;
    assert!(detail.contains(ANSWER), "{detail}");
    let page = world
        .server
        .client
        .get(format!(
            "{}/sessions/{}",
            world.server.base,
            failed.id.as_str()
        ))
        .bearer_auth(crate::support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(ANSWER),
        "the operator's page lacks the answer: {page}"
    );
    assert!(world.models.requests().is_empty(), "a model was called");
    world.all_jobs_settled().await;
    world.server.stop().await;
}

crate::on_both_forges!(
    a_tool_only_the_repositorys_image_has_checks_the_change,
    the_devcontainers_image_is_used_when_the_repository_file_names_none,
    an_image_that_cannot_be_pulled_stops_the_session_before_any_model_is_paid,
    a_tag_moved_after_planning_does_not_change_what_the_approval_runs,
    an_image_without_the_bwrap_sandbox_is_refused_before_any_model_is_paid,
    an_image_gone_by_approval_stops_the_run_before_the_executor_is_paid,
);
