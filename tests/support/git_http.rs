//! Git's smart HTTP protocol for the fake forges: serves a folder of bare repositories by
//! running `git http-backend` as a CGI program behind Basic auth the caller decides, and
//! makes bare repositories with a first commit through the `git` CLI.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tokio::io::AsyncWriteExt;

/// Decides whether a Basic `(user, password)` pair may use the repositories.
pub type Auth = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// Serves the bare repositories under `root` (`root/<path>.git`).
#[derive(Clone)]
pub struct GitHttp {
    root: PathBuf,
    auth: Auth,
}

impl GitHttp {
    pub fn new(
        root: impl Into<PathBuf>,
        auth: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        GitHttp {
            root: root.into(),
            auth: Arc::new(auth),
        }
    }

    /// A router serving every path as a repository path under the root.
    pub fn router(self) -> Router {
        Router::new()
            .fallback(
                move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                    let git = self.clone();
                    async move {
                        git.serve(
                            uri.path(),
                            &method,
                            uri.query().unwrap_or(""),
                            &headers,
                            body,
                        )
                        .await
                    }
                },
            )
            // Pushes of a few megabytes are ordinary; axum's default limit is 2 MB.
            .layer(DefaultBodyLimit::disable())
    }

    /// Starts a server on a loopback port; the base URL it answers on and its task (abort
    /// it, or drop the runtime, to stop it).
    pub async fn start(self) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let router = self.router();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        (url, task)
    }

    /// Answers one request for `path_info` (`/owner/repo.git/info/refs`, relative to the
    /// root): 401 with a Basic challenge unless the credentials pass, else whatever
    /// `git http-backend` says.
    pub async fn serve(
        &self,
        path_info: &str,
        method: &Method,
        query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response {
        let Some((user, password)) = basic_credentials(headers) else {
            return challenge();
        };
        if !(self.auth)(&user, &password) {
            return challenge();
        }
        match self
            .backend(path_info, method, query, headers, &user, body)
            .await
        {
            Ok(response) => response,
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("git http-backend: {e}"),
            )
                .into_response(),
        }
    }

    async fn backend(
        &self,
        path_info: &str,
        method: &Method,
        query: &str,
        headers: &HeaderMap,
        user: &str,
        body: Bytes,
    ) -> std::io::Result<Response> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let mut command = tokio::process::Command::new("git");
        command
            .arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            // Pushing over HTTP is off unless asked for (or REMOTE_USER is set; both are).
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.receivepack")
            .env("GIT_CONFIG_VALUE_0", "true")
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .env("REQUEST_METHOD", method.as_str())
            .env("PATH_INFO", path_info)
            .env("QUERY_STRING", query)
            .env("CONTENT_TYPE", header("content-type"))
            // hyper has already undone any chunked transfer encoding, so the length is
            // known; a gzip body stays compressed: http-backend inflates it itself when
            // told the encoding.
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
            .env("HTTP_GIT_PROTOCOL", header("git-protocol"))
            .env("REMOTE_USER", user)
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        // Written while the output is read, so a large answer cannot block the writer.
        let writer = tokio::spawn(async move {
            let written = stdin.write_all(&body).await;
            drop(stdin);
            written
        });
        let output = child.wait_with_output().await?;
        // http-backend may answer (an error) without reading the whole body.
        let _ = writer.await;
        if !output.stderr.is_empty() {
            eprintln!(
                "git http-backend ({method} {path_info}): {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(cgi_response(&output.stdout))
    }
}

/// Turns a CGI answer (headers, a blank line, the body) into a response; `Status:`
/// carries the status line, 200 when absent.
fn cgi_response(stdout: &[u8]) -> Response {
    let (head, body) = match find(stdout, b"\r\n\r\n") {
        Some(i) => (&stdout[..i], &stdout[i + 4..]),
        None => match find(stdout, b"\n\n") {
            Some(i) => (&stdout[..i], &stdout[i + 2..]),
            None => {
                return (StatusCode::BAD_GATEWAY, "git http-backend wrote no headers")
                    .into_response();
            }
        },
    };
    let mut status = StatusCode::OK;
    let mut response = Response::new(Body::from(body.to_vec()));
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or("500");
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    *response.status_mut() = status;
    response
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn challenge() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("www-authenticate", "Basic realm=\"fake git\"")],
        "Authentication required",
    )
        .into_response()
}

/// `git` with no user or system configuration, run in `dir`; panics with git's output
/// when it fails, and returns its trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = git_command(dir)
        .args(args)
        .output()
        .expect("git is installed");
    assert!(
        output.status.success(),
        "git {args:?} failed in {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A `git` command isolated from the machine's configuration, with a fixed identity.
pub fn git_command(dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("git");
    command
        .current_dir(dir)
        // Workspaces are handed to the sandbox's user; git must still read them here.
        .args(["-c", "safe.directory=*"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "Test Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.com");
    for name in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_ASKPASS"] {
        command.env_remove(name);
    }
    command
}

/// Makes the bare repository `bare` (created if missing) with one commit on `branch`
/// holding `files`, and returns that commit's SHA.
pub fn init_bare_repo(bare: &Path, branch: &str, files: &[(&str, &str)]) -> String {
    std::fs::create_dir_all(bare).unwrap();
    git(
        bare,
        &[
            "init",
            "--bare",
            "--quiet",
            &format!("--initial-branch={branch}"),
        ],
    );
    // As GitHub and GitLab do: filtered fetches (partial clones), and objects fetched by id.
    git(bare, &["config", "uploadpack.allowFilter", "true"]);
    git(bare, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &["init", "--quiet", &format!("--initial-branch={branch}")],
    );
    for (path, content) in files {
        let file = work.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    git(work.path(), &["add", "--all"]);
    git(
        work.path(),
        &["commit", "--quiet", "--allow-empty", "-m", "Initial commit"],
    );
    let bare = bare.to_str().expect("a UTF-8 path");
    git(
        work.path(),
        &[
            "push",
            "--quiet",
            bare,
            &format!("HEAD:refs/heads/{branch}"),
        ],
    );
    git(work.path(), &["rev-parse", "HEAD"])
}

/// The bytes a bare repository's objects take on disk, as a forge reports a repository's
/// size (`git count-objects`: packs and loose objects); 0 when there is none yet.
pub fn repo_size(bare: &Path) -> u64 {
    if !bare.join("objects").is_dir() {
        return 0;
    }
    git(bare, &["count-objects", "-v"])
        .lines()
        .filter_map(|l| match l.split_once(": ")? {
            ("size" | "size-pack", kib) => kib.trim().parse::<u64>().ok(),
            _ => None,
        })
        .sum::<u64>()
        * 1024
}
