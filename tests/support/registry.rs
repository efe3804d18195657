//! A real OCI registry on loopback (Debian's `docker-registry`, the CNCF distribution
//! registry) as a child process killed on drop, anonymous, behind htpasswd or behind a
//! token server of ours whose signed tokens the registry itself checks; images built with
//! `umoci` and pushed with `skopeo`, or written layer by layer and pushed through the
//! registry's upload API for what umoci cannot make (hostile layers, indexes, zstd).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use sha2::Digest as _;

/// Credentials the authenticating registries accept.
pub const USER: &str = "alice";
pub const PASSWORD: &str = "correct-horse";

/// The addresses of the registries running in this test process. A deployment reaches a
/// loopback registry only when its operator lists it, so a test's settings list these as
/// an operator would ([`operator_listing`]).
static RUNNING: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The setting that lists the test's running registries, `host:port` each, and its value;
/// `None` while no registry runs.
pub fn operator_listing() -> Option<(&'static str, String)> {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    (!running.is_empty()).then(|| {
        let addrs: Vec<&str> = running.iter().map(String::as_str).collect();
        ("PLANWRIGHT_REGISTRY_INSECURE", addrs.join(","))
    })
}

/// Who may pull.
pub enum Access {
    Anonymous,
    Htpasswd,
    Token,
}

pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub storage: PathBuf,
    dir: tempfile::TempDir,
    access_needs_creds: bool,
    _token_server: Option<TokenServer>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.addr);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fails the test, saying how to install it, when `tool` is not on the PATH.
pub fn require(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{tool}` is missing: install it with `apt-get install -y {package}` (.ci/run does)"
    );
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    pub async fn start(access: Access) -> Registry {
        require("docker-registry", "docker-registry");
        let mut dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        let (auth, token_server) = match access {
            Access::Anonymous => (String::new(), None),
            Access::Htpasswd => {
                require("htpasswd", "apache2-utils");
                let line = run(Command::new("htpasswd").args(["-Bbn", USER, PASSWORD]));
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, line.trim()).unwrap();
                (
                    format!(
                        "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                        file.display()
                    ),
                    None,
                )
            }
            Access::Token => {
                let server = TokenServer::start(dir.path());
                (
                    format!(
                        "auth:\n  token:\n    realm: {}\n    service: test-registry\n    issuer: test-issuer\n    rootcertbundle: {}\n",
                        server.realm,
                        server.cert.display()
                    ),
                    Some(server),
                )
            }
        };
        let access_needs_creds = token_server.is_some() || !auth.is_empty();
        let mut token_server = token_server;
        // A port found free may be taken before the registry binds it: then it exits, and
        // starts again on another.
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
                    storage.display()
                ),
            )
            .unwrap();
            let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
            let child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("docker-registry starts");
            let mut registry = Registry {
                child,
                addr,
                storage: storage.clone(),
                access_needs_creds,
                dir,
                _token_server: token_server.take(),
            };
            if registry.wait_ready().await {
                RUNNING
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(registry.addr.clone());
                return registry;
            }
            dir = std::mem::replace(&mut registry.dir, tempfile::tempdir().unwrap());
            token_server = registry._token_server.take();
        }
        panic!("docker-registry could not start on a free port");
    }

    /// Polls `/v2/` until the registry answers as one (its API version header), for at
    /// most ten seconds; false when it exited (its port was taken).
    async fn wait_ready(&mut self) -> bool {
        let http = reqwest::Client::new();
        let url = format!("http://{}/v2/", self.addr);
        for _ in 0..200 {
            if self.child.try_wait().unwrap().is_some() {
                let log = self.log();
                assert!(
                    log.contains("address already in use"),
                    "docker-registry exited: {log}"
                );
                return false;
            }
            let answered = http.get(&url).send().await.is_ok_and(|r| {
                r.headers()
                    .get("docker-distribution-api-version")
                    .is_some_and(|v| v == "registry/2.0")
            });
            if answered {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("docker-registry did not answer on {url}: {}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT/name:tag`.
    pub fn reference(&self, name_tag: &str) -> String {
        format!("{}/{name_tag}", self.addr)
    }

    /// Where the registry keeps a blob's bytes (to damage one).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Pushes `layout:tag` (an OCI layout) as `name:tag` with skopeo.
    pub fn push_layout(&self, layout: &Path, tag: &str, name_tag: &str) {
        require("skopeo", "skopeo");
        let mut command = Command::new("skopeo");
        command.args(["copy", "--quiet", "--dest-tls-verify=false"]);
        if self.access_needs_creds {
            command.arg(format!("--dest-creds={USER}:{PASSWORD}"));
        }
        command
            .arg(format!("oci:{}:{tag}", layout.display()))
            .arg(format!("docker://{}", self.reference(name_tag)));
        run(&mut command);
    }

    /// Uploads one blob (anonymous registries only); returns its digest.
    pub async fn upload_blob(&self, name: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let http = reqwest::Client::new();
        let started = http
            .post(format!("http://{}/v2/{name}/blobs/uploads/", self.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(started.status(), 202, "{}", started.text().await.unwrap());
        let location = started.headers()["location"].to_str().unwrap().to_owned();
        let location = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.addr)
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let done = http
            .put(format!("{location}{separator}digest={digest}"))
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(done.status(), 201, "{}", done.text().await.unwrap());
        digest
    }

    /// Puts a manifest or index under `reference` (a tag); returns its digest.
    pub async fn put_manifest(
        &self,
        name: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) -> String {
        let response = reqwest::Client::new()
            .put(format!(
                "http://{}/v2/{name}/manifests/{reference}",
                self.addr
            ))
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        sha256(body)
    }

    /// Pushes an image of these layers (lowest first) with this config `Env`; returns the
    /// manifest, its digest and size.
    pub async fn push_layers(
        &self,
        name: &str,
        tag: &str,
        layers: &[LayerBlob],
        env: &[&str],
    ) -> (String, usize) {
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": env, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>()},
        });
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = self.upload_blob(name, &config).await;
        let mut descriptors = Vec::new();
        for layer in layers {
            let digest = self.upload_blob(name, &layer.blob).await;
            descriptors.push(serde_json::json!({
                "mediaType": layer.media_type, "digest": digest, "size": layer.blob.len(),
            }));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": descriptors,
        });
        let body = serde_json::to_vec(&manifest).unwrap();
        let digest = self
            .put_manifest(
                name,
                tag,
                "application/vnd.oci.image.manifest.v1+json",
                &body,
            )
            .await;
        (digest, body.len())
    }
}

/// A layer as pushed: its blob, media type and the digest of its tar.
pub struct LayerBlob {
    pub blob: Vec<u8>,
    pub media_type: &'static str,
    pub diff_id: String,
}

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// How a handcrafted layer is stored.
#[derive(Clone, Copy)]
pub enum Packing {
    Tar,
    Gzip,
    Zstd,
}

impl LayerBlob {
    pub fn new(tar: Vec<u8>, packing: Packing) -> LayerBlob {
        use std::io::Write as _;
        let diff_id = sha256(&tar);
        let (blob, media_type) = match packing {
            Packing::Tar => (tar, "application/vnd.oci.image.layer.v1.tar"),
            Packing::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&tar).unwrap();
                (
                    gz.finish().unwrap(),
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                )
            }
            Packing::Zstd => (
                zstd::encode_all(&tar[..], 3).unwrap(),
                "application/vnd.oci.image.layer.v1.tar+zstd",
            ),
        };
        LayerBlob {
            blob,
            media_type,
            diff_id,
        }
    }
}

/// A tar written entry by entry, names taken as given (hostile ones too).
pub struct TarLayer {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for TarLayer {
    fn default() -> Self {
        Self {
            builder: tar::Builder::new(Vec::new()),
        }
    }
}

impl TarLayer {
    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_mtime(1_700_000_000);
        header
    }

    /// Writes the name raw into the header, so `..` and absolute names survive.
    fn append(
        &mut self,
        mut header: tar::Header,
        name: &str,
        link: Option<&str>,
        data: &[u8],
    ) -> &mut Self {
        let bytes = name.as_bytes();
        let gnu = header.as_gnu_mut().unwrap();
        gnu.name[..bytes.len()].copy_from_slice(bytes);
        if let Some(link) = link {
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_cksum();
        self.builder.append(&header, data).unwrap();
        self
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> &mut Self {
        let header = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        self.append(header, name, None, data)
    }

    pub fn dir(&mut self, name: &str) -> &mut Self {
        let header = Self::header(tar::EntryType::Directory, 0o755, 0);
        self.append(header, name, None, &[])
    }

    pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        let header = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.append(header, name, Some(target), &[])
    }

    pub fn hard_link(&mut self, name: &str, target: &str) -> &mut Self {
        let header = Self::header(tar::EntryType::Link, 0o644, 0);
        self.append(header, name, Some(target), &[])
    }

    pub fn special(&mut self, name: &str, kind: tar::EntryType) -> &mut Self {
        let mut header = Self::header(kind, 0o666, 0);
        header.set_device_major(1).unwrap();
        header.set_device_minor(3).unwrap();
        self.append(header, name, None, &[])
    }

    pub fn finish(&mut self) -> Vec<u8> {
        let builder = std::mem::replace(&mut self.builder, tar::Builder::new(Vec::new()));
        builder.into_inner().unwrap()
    }
}

/// An OCI layout built with umoci: `init`, `new`, then one layer per `layer` call.
pub struct UmociImage {
    pub layout: PathBuf,
    pub tag: String,
    bundle: PathBuf,
}

impl UmociImage {
    pub fn new(dir: &Path, tag: &str) -> UmociImage {
        require("umoci", "umoci");
        let layout = dir.join("layout");
        if !layout.exists() {
            run(Command::new("umoci")
                .arg("init")
                .arg("--layout")
                .arg(&layout));
        }
        let image = format!("{}:{tag}", layout.display());
        run(Command::new("umoci").args(["new", "--image", &image]));
        UmociImage {
            layout,
            tag: tag.to_owned(),
            bundle: dir.join(format!("bundle-{tag}")),
        }
    }

    fn image(&self) -> String {
        format!("{}:{}", self.layout.display(), self.tag)
    }

    /// Unpacks the image so far, lets `change` edit its root, and repacks it as a layer.
    pub fn layer(&mut self, change: impl FnOnce(&Path)) -> &mut Self {
        let _ = std::fs::remove_dir_all(&self.bundle);
        run(Command::new("umoci")
            .args(["unpack", "--rootless", "--image", &self.image()])
            .arg(&self.bundle));
        change(&self.bundle.join("rootfs"));
        run(Command::new("umoci")
            .args(["repack", "--image", &self.image()])
            .arg(&self.bundle));
        self
    }

    pub fn config(&mut self, args: &[&str]) -> &mut Self {
        run(Command::new("umoci")
            .args(["config", "--image", &self.image()])
            .args(args));
        self
    }
}

/// A root with the static busybox (no libc at all) and its `sh` link.
pub fn busybox_root(root: &Path) {
    require("busybox", "busybox-static");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let busybox = run(Command::new("sh").args(["-c", "command -v busybox"]));
    std::fs::copy(busybox.trim(), bin.join("busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", bin.join("sh")).unwrap();
}

/// A root with the host's `ls` and the glibc libraries it loads, at their paths.
pub fn glibc_root(root: &Path) {
    let ls = "/bin/ls";
    let libraries = run(Command::new("ldd").arg(ls));
    let mut files = vec![PathBuf::from(ls)];
    for line in libraries.lines() {
        let path = line
            .split_whitespace()
            .find(|word| word.starts_with('/'))
            .map(PathBuf::from);
        files.extend(path);
    }
    for file in files {
        let target = root.join(file.strip_prefix("/").unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(std::fs::canonicalize(&file).unwrap(), &target).unwrap();
    }
}

/// Signs registry tokens for `alice`: a small token service the registry's own `auth.token`
/// checks (signature against the certificate, issuer, audience, expiry, granted actions).
struct TokenServer {
    realm: String,
    cert: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl TokenServer {
    fn start(dir: &Path) -> TokenServer {
        require("openssl", "openssl");
        let key = dir.join("token.key");
        let cert = dir.join("token.pem");
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=token",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert));
        let der = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert)
            .output()
            .unwrap()
            .stdout;
        let state = Arc::new((key, base64::engine::general_purpose::STANDARD.encode(der)));
        let app = axum::Router::new()
            .route("/token", axum::routing::get(issue))
            .with_state(state);
        // Its own thread and runtime: the tests block their runtime's thread on skopeo,
        // which asks this server for tokens meanwhile.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        TokenServer {
            realm,
            cert,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

async fn issue(
    axum::extract::State(state): axum::extract::State<Arc<(PathBuf, String)>>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let given = headers.get("authorization").and_then(|v| v.to_str().ok());
    if given != Some(expected.as_str()) {
        return (axum::http::StatusCode::UNAUTHORIZED, "wrong credentials").into_response();
    }
    let access: Vec<serde_json::Value> = query
        .get("scope")
        .into_iter()
        .flat_map(|scopes| scopes.split(' '))
        .filter_map(|scope| {
            let mut parts = scope.splitn(3, ':');
            let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [state.1]});
    let claims = serde_json::json!({
        "iss": "test-issuer", "sub": USER, "aud": query.get("service").cloned().unwrap_or_default(),
        "exp": now + 300, "nbf": now - 10, "iat": now, "jti": uuid::Uuid::new_v4().to_string(),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        url.encode(serde_json::to_vec(&header).unwrap()),
        url.encode(serde_json::to_vec(&claims).unwrap())
    );
    let key = state.0.clone();
    let signature = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = Command::new("openssl")
            .args(["dgst", "-sha256", "-sign"])
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(signing_input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (signing_input, out.stdout)
    })
    .await
    .unwrap();
    let token = format!("{}.{}", signature.0, url.encode(signature.1));
    axum::Json(serde_json::json!({"token": token, "access_token": token})).into_response()
}
