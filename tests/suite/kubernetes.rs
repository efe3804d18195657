//! The Kubernetes manifests under deploy/kubernetes: each validates strictly against the
//! schema of the oldest Kubernetes they support, and they agree with the code they deploy
//! (probe and scrape paths answer on the real server of their role, every environment
//! name is a setting, the grace period covers SHUTDOWN_GRACE_SECS, the worker's security
//! context is the one docs/operating/kubernetes.md shows, the pods run as the image's
//! user, the KEDA example's queries count the work on this backend as /metrics does).

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use planwright::config::Settings;
use planwright::server::Role;
use serde::Deserialize;
use serde_norway::Value;
use support::{TestDb, TestServer};

/// The oldest Kubernetes the manifests are written for: `appArmorProfile` in a
/// securityContext is 1.30's.
const OLDEST_KUBERNETES: &str = "1.30.0";

/// What the grace period must leave beyond SHUTDOWN_GRACE_SECS, for handing unfinished
/// jobs back and closing.
const GRACE_MARGIN: Duration = Duration::from_secs(10);

/// The book's page that shows the worker's security context, word for word.
const KUBERNETES_PAGE: &str = "docs/operating/kubernetes.md";

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = read(path);
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// The files kustomization.yaml applies, which must be every other YAML file beside it.
fn resources() -> Vec<PathBuf> {
    let dir = manifests_dir();
    let kustomization = &documents(&dir.join("kustomization.yaml"))[0];
    let listed: Vec<PathBuf> = kustomization["resources"]
        .as_sequence()
        .expect("kustomization.yaml lists its resources")
        .iter()
        .map(|r| dir.join(r.as_str().expect("a resource is a file name")))
        .collect();
    let mut present: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    present.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        sorted, present,
        "kustomization.yaml must list every manifest beside it"
    );
    listed
}

/// Every object `kubectl apply -k` sends.
fn objects() -> Vec<Value> {
    resources().iter().flat_map(|p| documents(p)).collect()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

#[test]
fn every_manifest_validates_strictly_against_the_oldest_kubernetes_supported() {
    let files = resources();
    let output = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "-k", OLDEST_KUBERNETES])
        .args(&files)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "Could not run kubernetes-validate ({e}): install it with \
                 `pip3 install kubernetes-validate` (.ci/run does)"
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    // An object whose schema is unknown is only warned about: every one must have passed.
    let objects = objects();
    let passed = stdout.lines().filter(|l| l.contains(" passed ")).count();
    assert_eq!(passed, objects.len(), "{stdout}{stderr}");
    assert!(
        !stdout.contains("WARN") && !stderr.contains("WARN"),
        "{stdout}{stderr}"
    );
}

/// A pod template's first container's environment as the pod sees it: the ConfigMap and
/// Secret it reads whole, then its own `env` (which wins).
fn pod_env(objects: &[Value], pod: &Value) -> Vec<(String, String)> {
    let container = &pod["containers"][0];
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for source in container["envFrom"].as_sequence().into_iter().flatten() {
        let (kind, key, reference) = if source["configMapRef"].is_mapping() {
            ("ConfigMap", "data", &source["configMapRef"])
        } else {
            ("Secret", "stringData", &source["secretRef"])
        };
        let object = named(objects, kind, reference["name"].as_str().unwrap());
        for (name, value) in object[key].as_mapping().expect("values to read") {
            env.insert(
                name.as_str().unwrap().to_owned(),
                value.as_str().expect("a string value").to_owned(),
            );
        }
    }
    for var in container["env"].as_sequence().into_iter().flatten() {
        env.insert(
            var["name"].as_str().unwrap().to_owned(),
            var["value"].as_str().expect("a literal value").to_owned(),
        );
    }
    env.into_iter().collect()
}

/// The pod specs of the Deployments and Jobs, by name.
fn pods(objects: &[Value]) -> Vec<(String, &Value)> {
    objects
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "Job")))
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                &o["spec"]["template"]["spec"],
            )
        })
        .collect()
}

#[test]
fn every_environment_name_is_a_setting_and_every_value_is_accepted() {
    let objects = objects();
    let pods = pods(&objects);
    assert!(pods.len() >= 3, "web, worker and the migration");
    for (name, pod) in pods {
        let env = pod_env(&objects, pod);
        for (var, _) in &env {
            assert!(
                var.starts_with(planwright::config::ENV_PREFIX),
                "{name}: {var} is not a planwright setting's name"
            );
        }
        let settings = Settings::from_sources(None, &env)
            .unwrap_or_else(|e| panic!("{name}: the settings do not load: {e:#}"));
        assert!(
            settings.warnings.is_empty(),
            "{name}: {:?}",
            settings.warnings
        );
    }
}

#[test]
fn the_grace_period_covers_shutdown_grace_secs() {
    let objects = objects();
    for kind in ["Deployment"] {
        for object in objects.iter().filter(|o| o["kind"].as_str() == Some(kind)) {
            let name = object["metadata"]["name"].as_str().unwrap();
            let pod = &object["spec"]["template"]["spec"];
            let settings = Settings::from_sources(None, &pod_env(&objects, pod)).unwrap();
            let given = pod["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name} sets no terminationGracePeriodSeconds"));
            assert!(
                Duration::from_secs(given) >= settings.queue.shutdown_grace + GRACE_MARGIN,
                "{name}: terminationGracePeriodSeconds {given} does not cover \
                 SHUTDOWN_GRACE_SECS {:?} and a margin of {GRACE_MARGIN:?}",
                settings.queue.shutdown_grace
            );
        }
    }
}

/// The role `planwright serve` runs as in this pod, from its arguments.
fn role(pod: &Value) -> Option<Role> {
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_sequence()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match args.as_slice() {
        ["serve", "--role", "web"] => Some(Role::Web),
        ["serve", "--role", "worker"] => Some(Role::Worker),
        ["serve"] => Some(Role::All),
        _ => None,
    }
}

/// A container port by its name or number.
fn port(container: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return n as u16;
    }
    let wanted = port.as_str().expect("a port name or number");
    container["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|p| p["name"].as_str() == Some(wanted))
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {wanted}")) as u16
}

/// Every probe answers 200 on the real server of the pod's role, on the port the pod's
/// LISTEN gives it; the scrape annotations name METRICS_LISTEN's port, where /metrics
/// answers.
#[tokio::test]
async fn the_probes_and_the_scrape_reach_real_routes_of_their_role() {
    let objects = objects();
    let mut probed = 0;
    for (name, pod) in pods(&objects) {
        let Some(role) = role(pod) else {
            continue;
        };
        let env = pod_env(&objects, pod);
        let settings = Settings::from_sources(None, &env).unwrap();
        let container = &pod["containers"][0];
        let db = TestDb::new().await;
        let server = TestServer::start(
            support::settings(&db, &[("PLANWRIGHT_METRICS_LISTEN", "127.0.0.1:0")]),
            role,
            planwright::session::dispatch::handler,
        )
        .await;
        for probe in ["readinessProbe", "livenessProbe"] {
            let get = &container[probe]["httpGet"];
            let path = get["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no {probe} over HTTP"));
            assert_eq!(
                port(container, &get["port"]),
                settings.listen.port(),
                "{name}: the {probe} probes another port than LISTEN's"
            );
            // A worker is ready once its sandbox check has passed, which it does here.
            let status = support::eventually(&format!("{name}: {probe} {path}"), || async {
                let response = server
                    .client
                    .get(format!("{}{path}", server.base))
                    .send()
                    .await
                    .unwrap();
                (response.status() == 200).then_some(response.status())
            })
            .await;
            assert_eq!(status, 200, "{name}: {probe} {path}");
            probed += 1;
        }
        let annotations = &pod_template(&objects, &name)["metadata"]["annotations"];
        assert_eq!(
            annotations["prometheus.io/scrape"].as_str(),
            Some("true"),
            "{name}"
        );
        let metrics_port: u16 = annotations["prometheus.io/port"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            Some(metrics_port),
            settings.metrics_listen.map(|a| a.port()),
            "{name}: the scrape port is not METRICS_LISTEN's"
        );
        let path = annotations["prometheus.io/path"].as_str().unwrap();
        let scraped = server
            .client
            .get(format!("{}{path}", server.metrics_base.clone().unwrap()))
            .send()
            .await
            .unwrap();
        assert_eq!(scraped.status(), 200, "{name}: {path}");
        server.stop().await;
    }
    assert_eq!(probed, 4, "web and worker, readiness and liveness");
}

fn pod_template<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    &named(objects, "Deployment", name)["spec"]["template"]
}

/// The block under "The worker's security context" in the book's Kubernetes page.
fn documented_security_context() -> Value {
    let page = read(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(KUBERNETES_PAGE));
    let after = page
        .split_once("## The worker's security context")
        .expect("docs/operating/kubernetes.md documents the worker's security context")
        .1;
    let block = after
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a yaml block")
        .0;
    serde_norway::from_str(block).expect("the documented block is YAML")
}

#[test]
fn the_worker_security_context_is_the_one_the_book_documents() {
    let objects = objects();
    let pod = &pod_template(&objects, "planwright-worker")["spec"];
    let documented = documented_security_context();
    assert_eq!(documented["hostUsers"], pod["hostUsers"]);
    assert_eq!(documented["securityContext"], pod["securityContext"]);
    assert_eq!(
        documented["containers"][0]["securityContext"],
        pod["containers"][0]["securityContext"]
    );
    // Nothing more than bubblewrap needs: no privileged mode, no added capability.
    let container = &pod["containers"][0]["securityContext"];
    assert_ne!(container["privileged"].as_bool(), Some(true));
    assert!(container["capabilities"]["add"].is_null(), "{container:?}");
    assert_eq!(
        container["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "bubblewrap is not setuid here: no_new_privs costs it nothing"
    );
}

/// The objects of the KEDA example, which is applied apart (KEDA's kinds are not
/// Kubernetes' own).
fn keda_objects() -> Vec<Value> {
    documents(&manifests_dir().join("keda/scaled-object.yaml"))
}

/// A gauge's value in a Prometheus exposition.
fn gauge(exposition: &str, series: &str) -> i64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{exposition}"))
        .trim()
        .parse()
        .unwrap()
}

/// The ScaledObject's queries run on this backend against the migrated schema and count
/// the work waiting and running, backoffs included and finished work not; `/metrics`
/// shows the same figures; each trigger's target is what one worker takes at once.
#[tokio::test]
async fn the_scaler_queries_count_the_work_and_the_metrics_agree() {
    use planwright::store::jobs::{self, NewJob, Room};

    let db = TestDb::new().await;
    {
        let mut conn = db.db.pool.acquire().await.unwrap();
        for lane in ["github:1", "github:1", "gitlab:acme"] {
            let mut run = NewJob::new("execute", "{}", 3);
            run.lane = Some(lane.to_owned());
            jobs::enqueue(&mut conn, &run).await.unwrap();
        }
        for _ in 0..2 {
            jobs::enqueue(&mut conn, &NewJob::new("plan", "{}", 3))
                .await
                .unwrap();
        }
        let mut later = NewJob::new("plan", "{}", 3);
        later.run_at = Some(planwright::store::now_ms() + 3_600_000);
        jobs::enqueue(&mut conn, &later).await.unwrap();
    }
    let lease = Duration::from_secs(60);
    let runs_only = Room {
        other: false,
        run: true,
        per_lane: None,
    };
    let others_only = Room {
        other: true,
        run: false,
        per_lane: None,
    };
    let run = jobs::claim(&db.db, "worker-a", lease, runs_only)
        .await
        .unwrap();
    assert!(run.unwrap().lane.is_some());
    let first = jobs::claim(&db.db, "worker-a", lease, others_only)
        .await
        .unwrap()
        .unwrap();
    assert!(jobs::complete(&db.db, &first).await.unwrap());
    let second = jobs::claim(&db.db, "worker-b", lease, others_only)
        .await
        .unwrap();
    assert!(second.unwrap().lane.is_none());

    // Runs: two queued and one running. Jobs: the one held back waits, one runs, one is done.
    let expected = [("runs", 3), ("jobs", 2)];
    let objects = objects();
    let worker = &pod_template(&objects, "planwright-worker")["spec"];
    let settings = Settings::from_sources(None, &pod_env(&objects, worker)).unwrap();
    let keda = keda_objects();
    let scaled = keda
        .iter()
        .find(|o| o["kind"].as_str() == Some("ScaledObject"))
        .expect("a ScaledObject");
    assert_eq!(
        scaled["spec"]["scaleTargetRef"]["name"].as_str(),
        Some("planwright-worker")
    );
    let triggers = scaled["spec"]["triggers"].as_sequence().unwrap();
    assert_eq!(triggers.len(), expected.len());
    for (name, count) in expected {
        let trigger = triggers
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no trigger {name}"));
        assert_eq!(trigger["type"].as_str(), Some("postgresql"));
        let query = trigger["metadata"]["query"].as_str().unwrap();
        // The manifest's own text, as KEDA sends it.
        let value: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(&db.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(value, count, "{query}");
        let target: usize = trigger["metadata"]["targetQueryValue"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let per_worker = match name {
            "runs" => settings.queue.max_runs,
            _ => settings.queue.workers,
        };
        assert_eq!(
            target, per_worker,
            "{name}: a worker takes {per_worker} at once"
        );
    }
    let auth = keda
        .iter()
        .find(|o| o["kind"].as_str() == Some("TriggerAuthentication"))
        .expect("a TriggerAuthentication");
    let secret = &auth["spec"]["secretTargetRef"][0];
    let stored = named(&objects, "Secret", secret["name"].as_str().unwrap());
    assert!(
        stored["stringData"][secret["key"].as_str().unwrap()]
            .as_str()
            .is_some_and(|url| url.starts_with("postgres")),
        "the scaler connects with the pods' DATABASE_URL"
    );

    let work = jobs::work_waiting(&db.db).await.unwrap();
    let text = planwright::server::metrics::render(&db.db).await.unwrap();
    for (series, value) in [
        ("planwright_work_waiting{work=\"runs\"}", work.runs_waiting),
        ("planwright_work_running{work=\"runs\"}", work.runs_running),
        ("planwright_work_waiting{work=\"jobs\"}", work.jobs_waiting),
        ("planwright_work_running{work=\"jobs\"}", work.jobs_running),
    ] {
        assert_eq!(gauge(&text, series), value, "{series}");
    }
    assert_eq!(
        (
            work.runs_waiting,
            work.runs_running,
            work.jobs_waiting,
            work.jobs_running
        ),
        (2, 1, 1, 1)
    );
}

/// `kubectl apply -l planwright/step=migrate` applies the Job with everything it reads.
#[test]
fn the_migration_step_carries_what_the_job_reads() {
    let objects = objects();
    let step = |o: &Value| o["metadata"]["labels"]["planwright/step"].as_str() == Some("migrate");
    let job = named(&objects, "Job", "planwright-migrate");
    assert!(step(job));
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["args"][0].as_str(),
        Some("migrate"),
        "the Job runs `planwright migrate`"
    );
    for source in pod["containers"][0]["envFrom"].as_sequence().unwrap() {
        let (kind, reference) = if source["configMapRef"].is_mapping() {
            ("ConfigMap", &source["configMapRef"])
        } else {
            ("Secret", &source["secretRef"])
        };
        let name = reference["name"].as_str().unwrap();
        assert!(step(named(&objects, kind, name)), "{kind} {name}");
    }
    let namespaces: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some("Namespace"))
        .collect();
    assert!(
        namespaces.iter().all(|n| step(n)),
        "the namespace comes first"
    );
}

/// The pods run as the image's own user, and the web pods' NetworkPolicy opens exactly
/// their LISTEN and METRICS_LISTEN ports.
#[test]
fn the_pods_run_as_the_image_user_and_the_policy_opens_their_ports() {
    let dockerfile = read(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"));
    let uid: u64 = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .and_then(|u| u.split(':').next())
        .expect("the Dockerfile names its user")
        .parse()
        .unwrap();
    let objects = objects();
    for (name, pod) in pods(&objects) {
        assert_eq!(
            pod["securityContext"]["runAsUser"].as_u64(),
            Some(uid),
            "{name}"
        );
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{name}"
        );
    }

    let web = &pod_template(&objects, "planwright-web")["spec"];
    let settings = Settings::from_sources(None, &pod_env(&objects, web)).unwrap();
    let policy = named(&objects, "NetworkPolicy", "planwright-web");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        named(&objects, "Deployment", "planwright-web")["spec"]["selector"]["matchLabels"]
    );
    let mut opened: Vec<u64> = policy["spec"]["ingress"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_sequence().unwrap().iter())
        .map(|p| p["port"].as_u64().unwrap())
        .collect();
    opened.sort_unstable();
    let mut expected = vec![
        u64::from(settings.listen.port()),
        u64::from(settings.metrics_listen.unwrap().port()),
    ];
    expected.sort_unstable();
    assert_eq!(opened, expected);
}
