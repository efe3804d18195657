//! A stateful fake of GitHub's REST API on a loopback port: repositories, issues,
//! comments (with edit history), reactions, permissions, files and App installations,
//! answered with GitHub's JSON shapes and credentials checked the way GitHub does. Every
//! request is recorded, and the next N requests can be made to fail on purpose.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use octocrab::jsonwebtoken::{self, Algorithm, DecodingKey, Validation};
use planwright::config::GithubSettings;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Value, json};

pub const APP_ID: u64 = 4242;
pub const APP_SLUG: &str = "planwright-test";

/// A throwaway RSA key pair for the fake App, made once per test binary with openssl
/// (so no key is ever committed). GitHub hands out PKCS#1 PEM, so the private key is too.
pub struct AppKey {
    pub private_pem: String,
    pub public_pem: String,
}

pub fn app_key() -> &'static AppKey {
    static KEY: OnceLock<AppKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let private = std::process::Command::new("openssl")
            .args(["genrsa", "-traditional", "2048"])
            .output()
            .expect("openssl is installed");
        assert!(private.status.success(), "openssl genrsa failed");
        let mut child = std::process::Command::new("openssl")
            .args(["rsa", "-pubout"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl runs");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&private.stdout)
            .unwrap();
        let public = child.wait_with_output().unwrap();
        assert!(public.status.success(), "openssl rsa -pubout failed");
        AppKey {
            private_pem: String::from_utf8(private.stdout).unwrap(),
            public_pem: String::from_utf8(public.stdout).unwrap(),
        }
    })
}

/// Who sent a recorded request, as the fake understood its `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    /// A valid App JWT.
    Jwt,
    /// An installation token the fake issued (valid or not).
    Token(String),
    Invalid(String),
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    pub credential: Credential,
    pub body: String,
    /// The status the fake answered with.
    pub status: u16,
}

#[derive(Debug, Clone)]
pub struct FakeUser {
    pub login: String,
    pub id: i64,
    pub bot: bool,
}

impl FakeUser {
    pub fn new(login: &str, id: i64) -> Self {
        FakeUser {
            login: login.into(),
            id,
            bot: false,
        }
    }

    fn json(&self) -> Value {
        json!({
            "login": self.login,
            "id": self.id,
            "node_id": format!("U_{}", self.id),
            "avatar_url": format!("https://avatars.githubusercontent.com/u/{}?v=4", self.id),
            "url": format!("https://api.github.com/users/{}", self.login),
            "html_url": format!("https://github.com/{}", self.login),
            "type": if self.bot { "Bot" } else { "User" },
            "site_admin": false,
        })
    }
}

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: i64,
    pub repo: String,
    pub issue: i64,
    pub body: String,
    pub author: FakeUser,
    /// Earlier bodies, oldest first.
    pub history: Vec<String>,
    /// `(content, login)` pairs.
    pub reactions: Vec<(String, String)>,
}

struct FakeIssue {
    title: String,
    body: Option<String>,
    labels: Vec<String>,
    author: FakeUser,
}

struct FakeRepo {
    id: i64,
    full_name: String,
    default_branch: String,
    head_sha: String,
    issues: BTreeMap<i64, FakeIssue>,
    files: HashMap<String, Vec<u8>>,
    /// login (lower-cased) → (permission, role_name)
    permissions: HashMap<String, (String, String)>,
}

struct IssuedToken {
    installation: i64,
    expires_at: u64,
}

struct Failure {
    status: u16,
    headers: Vec<(String, String)>,
}

#[derive(Default)]
struct World {
    installations: HashMap<i64, Vec<String>>,
    tokens: HashMap<String, IssuedToken>,
    repos: HashMap<String, FakeRepo>,
    comments: BTreeMap<i64, FakeComment>,
    next_id: i64,
    requests: Vec<Recorded>,
    failures: VecDeque<Failure>,
}

impl World {
    fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeGithub {
    pub url: String,
    world: Arc<Mutex<World>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeGithub {
    pub async fn start() -> Self {
        let world = Arc::new(Mutex::new(World {
            next_id: 1000,
            ..World::default()
        }));
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&world));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeGithub { url, world, task }
    }

    /// Settings that point planwright's GitHub client at this fake.
    pub fn settings(&self) -> GithubSettings {
        GithubSettings {
            app_id: Some(APP_ID),
            private_key: Some(SecretString::from(app_key().private_pem.clone())),
            webhook_secrets: Vec::new(),
            api_url: self.url.clone(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        f(&mut self.world.lock().unwrap())
    }

    pub fn add_repo(&self, full_name: &str, default_branch: &str, head_sha: &str) {
        self.with(|w| {
            let id = w.next_id();
            w.repos.insert(
                full_name.to_ascii_lowercase(),
                FakeRepo {
                    id,
                    full_name: full_name.into(),
                    default_branch: default_branch.into(),
                    head_sha: head_sha.into(),
                    issues: BTreeMap::new(),
                    files: HashMap::new(),
                    permissions: HashMap::new(),
                },
            );
        });
    }

    pub fn add_installation(&self, id: i64, repos: &[&str]) {
        self.with(|w| {
            w.installations
                .insert(id, repos.iter().map(|r| r.to_ascii_lowercase()).collect());
        });
    }

    pub fn add_issue(
        &self,
        repo: &str,
        number: i64,
        title: &str,
        body: Option<&str>,
        labels: &[&str],
        author: FakeUser,
    ) {
        self.with(|w| {
            let repo = w.repos.get_mut(&repo.to_ascii_lowercase()).unwrap();
            repo.issues.insert(
                number,
                FakeIssue {
                    title: title.into(),
                    body: body.map(str::to_owned),
                    labels: labels.iter().map(|l| l.to_string()).collect(),
                    author,
                },
            );
        });
    }

    pub fn add_comment(&self, repo: &str, issue: i64, body: &str, author: FakeUser) -> i64 {
        self.with(|w| {
            let id = w.next_id();
            w.comments.insert(
                id,
                FakeComment {
                    id,
                    repo: repo.to_ascii_lowercase(),
                    issue,
                    body: body.into(),
                    author,
                    history: Vec::new(),
                    reactions: Vec::new(),
                },
            );
            id
        })
    }

    /// `permission` is GitHub's legacy field (admin/write/read/none), `role_name` the
    /// fine-grained role; GitHub reports both.
    pub fn set_permission(&self, repo: &str, login: &str, permission: &str, role_name: &str) {
        self.with(|w| {
            w.repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .permissions
                .insert(
                    login.to_ascii_lowercase(),
                    (permission.into(), role_name.into()),
                );
        });
    }

    pub fn put_file(&self, repo: &str, path: &str, content: &str) {
        self.with(|w| {
            w.repos
                .get_mut(&repo.to_ascii_lowercase())
                .unwrap()
                .files
                .insert(path.into(), content.as_bytes().to_vec());
        });
    }

    pub fn comment(&self, id: i64) -> Option<FakeComment> {
        self.with(|w| w.comments.get(&id).cloned())
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.with(|w| w.requests.clone())
    }

    /// Recorded requests with this method whose path starts with `prefix`.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .count()
    }

    pub fn issued_tokens(&self) -> Vec<String> {
        self.with(|w| w.tokens.keys().cloned().collect())
    }

    /// Forgets every issued installation token, as when GitHub revokes them.
    pub fn revoke_tokens(&self) {
        self.with(|w| w.tokens.clear());
    }

    /// The next `n` requests, whatever they are, answer `status` with `headers` and a
    /// GitHub-shaped error body.
    pub fn fail_next(&self, n: usize, status: u16, headers: &[(&str, &str)]) {
        self.with(|w| {
            for _ in 0..n {
                w.failures.push_back(Failure {
                    status,
                    headers: headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                });
            }
        });
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// RFC 3339 in UTC, as GitHub writes timestamps.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": status.as_str(),
        })),
    )
        .into_response()
}

fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "Not Found")
}

#[derive(Deserialize)]
struct JwtClaims {
    iss: Value,
    iat: u64,
    exp: u64,
}

/// Checks an App JWT as GitHub does: signed by the app's key, `iss` the app id, issued in
/// the past and expiring within ten minutes.
fn valid_jwt(token: &str) -> bool {
    let Ok(key) = DecodingKey::from_rsa_pem(app_key().public_pem.as_bytes()) else {
        return false;
    };
    let mut validation = Validation::new(Algorithm::RS256);
    // `iss` is checked below: octocrab sends the app id as a number, which
    // jsonwebtoken's own issuer check only reads as a string.
    validation.set_required_spec_claims(&["exp", "iat"]);
    let Ok(data) = jsonwebtoken::decode::<JwtClaims>(token, &key, &validation) else {
        return false;
    };
    let claims = data.claims;
    let iss_ok = claims.iss == json!(APP_ID) || claims.iss == json!(APP_ID.to_string());
    let now = now();
    iss_ok && claims.iat <= now && claims.exp > now && claims.exp <= now + 600 + 5
}

fn credential(world: &World, headers: &HeaderMap) -> Credential {
    let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Credential::None;
    };
    let Some(secret) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("token "))
    else {
        return Credential::Invalid(value.to_owned());
    };
    if world.tokens.contains_key(secret) {
        Credential::Token(secret.to_owned())
    } else if valid_jwt(secret) {
        Credential::Jwt
    } else {
        Credential::Invalid(secret.to_owned())
    }
}

fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

async fn handle(
    State(world): State<Arc<Mutex<World>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut w = world.lock().unwrap();
    let credential = credential(&w, &headers);
    let response = answer(&mut w, &method, &uri, &credential, &body);
    w.requests.push(Recorded {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), |p| p.to_string()),
        credential,
        body: String::from_utf8_lossy(&body).into_owned(),
        status: response.status().as_u16(),
    });
    response
}

fn answer(
    w: &mut World,
    method: &Method,
    uri: &Uri,
    credential: &Credential,
    body: &[u8],
) -> Response {
    if let Some(failure) = w.failures.pop_front() {
        let status = StatusCode::from_u16(failure.status).unwrap();
        let message = if failure.status == 403 || failure.status == 429 {
            "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
        } else {
            status.canonical_reason().unwrap_or("error")
        };
        let mut response = error(status, message);
        for (k, v) in failure.headers {
            response.headers_mut().insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(&v).unwrap(),
            );
        }
        return response;
    }
    let segments: Vec<String> = uri
        .path()
        .trim_matches('/')
        .split('/')
        .map(decode_segment)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let json_body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);

    if segs.first() == Some(&"app") {
        if *credential != Credential::Jwt {
            return error(
                StatusCode::UNAUTHORIZED,
                "A JSON web token could not be decoded",
            );
        }
        return match (method.clone(), segs.as_slice()) {
            (Method::GET, ["app"]) => axum::Json(json!({
                "id": APP_ID,
                "slug": APP_SLUG,
                "node_id": "A_kwHOAAAAAA",
                "name": "planwright (test)",
                "owner": FakeUser::new("planwright-org", 1).json(),
                "description": "",
                "external_url": "https://example.com",
                "html_url": format!("https://github.com/apps/{APP_SLUG}"),
                "created_at": rfc3339(0),
                "updated_at": rfc3339(0),
                "permissions": {"issues": "write", "contents": "write", "metadata": "read"},
                "events": ["issues", "issue_comment"],
            }))
            .into_response(),
            (Method::POST, ["app", "installations", id, "access_tokens"]) => {
                let Ok(id) = id.parse::<i64>() else {
                    return not_found();
                };
                if !w.installations.contains_key(&id) {
                    return not_found();
                }
                let token = format!("ghs_{}", uuid::Uuid::new_v4().simple());
                let expires_at = now() + 3600;
                w.tokens.insert(
                    token.clone(),
                    IssuedToken {
                        installation: id,
                        expires_at,
                    },
                );
                (
                    StatusCode::CREATED,
                    axum::Json(json!({
                        "token": token,
                        "expires_at": rfc3339(expires_at),
                        "permissions": {"issues": "write", "contents": "write"},
                        "repository_selection": "selected",
                    })),
                )
                    .into_response()
            }
            _ => not_found(),
        };
    }

    let installation = match credential {
        Credential::Token(t) => match w.tokens.get(t) {
            Some(issued) if issued.expires_at > now() => issued.installation,
            _ => return error(StatusCode::UNAUTHORIZED, "Bad credentials"),
        },
        _ => return error(StatusCode::UNAUTHORIZED, "Bad credentials"),
    };
    let ["repos", owner, name, rest @ ..] = segs.as_slice() else {
        return not_found();
    };
    let key = format!("{owner}/{name}").to_ascii_lowercase();
    let visible = w
        .installations
        .get(&installation)
        .is_some_and(|repos| repos.contains(&key));
    if !visible || !w.repos.contains_key(&key) {
        return not_found();
    }
    let bot = FakeUser {
        login: format!("{APP_SLUG}[bot]"),
        id: 9_000_000,
        bot: true,
    };
    let query: HashMap<String, String> =
        serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap_or_default();

    match (method.clone(), rest) {
        (Method::GET, []) => {
            let repo = &w.repos[&key];
            let (owner_login, repo_name) = repo.full_name.split_once('/').unwrap();
            axum::Json(json!({
                "id": repo.id,
                "node_id": format!("R_{}", repo.id),
                "name": repo_name,
                "full_name": repo.full_name,
                "owner": FakeUser::new(owner_login, 2).json(),
                "private": true,
                "html_url": format!("https://github.com/{}", repo.full_name),
                "clone_url": format!("https://github.com/{}.git", repo.full_name),
                "url": format!("https://api.github.com/repos/{}", repo.full_name),
                "default_branch": repo.default_branch,
            }))
            .into_response()
        }
        (Method::GET, ["branches", branch @ ..]) => {
            let repo = &w.repos[&key];
            if branch.join("/") != repo.default_branch {
                return error(StatusCode::NOT_FOUND, "Branch not found");
            }
            axum::Json(json!({
                "name": repo.default_branch,
                "commit": {
                    "sha": repo.head_sha,
                    "url": format!("https://api.github.com/repos/{}/commits/{}", repo.full_name, repo.head_sha),
                },
                "protected": false,
            }))
            .into_response()
        }
        (Method::GET, ["issues", "comments", id]) => match comment_of(w, &key, id) {
            Some(c) => axum::Json(comment_json(c)).into_response(),
            None => not_found(),
        },
        // octocrab's typed edit sends POST; GitHub accepts POST on PATCH routes.
        (Method::PATCH | Method::POST, ["issues", "comments", id]) => {
            let Some(new_body) = json_body.get("body").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            let Some(id) = comment_of(w, &key, id).map(|c| c.id) else {
                return not_found();
            };
            let comment = w.comments.get_mut(&id).unwrap();
            let old = std::mem::replace(&mut comment.body, new_body.to_owned());
            comment.history.push(old);
            axum::Json(comment_json(comment)).into_response()
        }
        (Method::POST, ["issues", "comments", id, "reactions"]) => {
            let Some(content) = json_body.get("content").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            const CONTENTS: [&str; 8] = [
                "+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes",
            ];
            if !CONTENTS.contains(&content) {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
            }
            let Some(id) = comment_of(w, &key, id).map(|c| c.id) else {
                return not_found();
            };
            let comment = w.comments.get_mut(&id).unwrap();
            let pair = (content.to_owned(), bot.login.clone());
            let status = if comment.reactions.contains(&pair) {
                StatusCode::OK
            } else {
                comment.reactions.push(pair);
                StatusCode::CREATED
            };
            let reaction_id = w.next_id();
            (
                status,
                axum::Json(json!({
                    "id": reaction_id,
                    "node_id": format!("REA_{reaction_id}"),
                    "user": bot.json(),
                    "content": content,
                    "created_at": rfc3339(now()),
                })),
            )
                .into_response()
        }
        (Method::GET, ["issues", number]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            let comments = w
                .comments
                .values()
                .filter(|c| c.repo == key && c.issue == number)
                .count();
            let repo = &w.repos[&key];
            let Some(issue) = repo.issues.get(&number) else {
                return not_found();
            };
            axum::Json(json!({
                "id": repo.id * 10_000 + number,
                "node_id": format!("I_{number}"),
                "number": number,
                "title": issue.title,
                "body": issue.body,
                "user": issue.author.json(),
                "labels": issue.labels.iter().enumerate().map(|(i, l)| json!({
                    "id": i + 1, "node_id": format!("LA_{i}"), "name": l,
                    "color": "ededed", "default": false, "description": null,
                })).collect::<Vec<_>>(),
                "state": "open",
                "locked": false,
                "comments": comments,
                "author_association": "CONTRIBUTOR",
                "created_at": rfc3339(0),
                "updated_at": rfc3339(0),
                "html_url": format!("https://github.com/{}/issues/{number}", repo.full_name),
                "url": format!("https://api.github.com/repos/{}/issues/{number}", repo.full_name),
            }))
            .into_response()
        }
        (Method::GET, ["issues", number, "comments"]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            if !w.repos[&key].issues.contains_key(&number) {
                return not_found();
            }
            let per_page: usize = query
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30)
                .min(100);
            let page: usize = query
                .get("page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1)
                .max(1);
            let items: Vec<Value> = w
                .comments
                .values()
                .filter(|c| c.repo == key && c.issue == number)
                .skip((page - 1) * per_page)
                .take(per_page)
                .map(comment_json)
                .collect();
            axum::Json(items).into_response()
        }
        (Method::POST, ["issues", number, "comments"]) => {
            let Ok(number) = number.parse::<i64>() else {
                return not_found();
            };
            if !w.repos[&key].issues.contains_key(&number) {
                return not_found();
            }
            let Some(text) = json_body.get("body").and_then(Value::as_str) else {
                return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
            };
            let id = w.next_id();
            let comment = FakeComment {
                id,
                repo: key.clone(),
                issue: number,
                body: text.to_owned(),
                author: bot,
                history: Vec::new(),
                reactions: Vec::new(),
            };
            let answer = comment_json(&comment);
            w.comments.insert(id, comment);
            (StatusCode::CREATED, axum::Json(answer)).into_response()
        }
        (Method::GET, ["collaborators", login, "permission"]) => {
            let repo = &w.repos[&key];
            let Some((permission, role)) = repo.permissions.get(&login.to_ascii_lowercase()) else {
                return not_found();
            };
            axum::Json(json!({
                "permission": permission,
                "role_name": role,
                "user": FakeUser::new(login, 77).json(),
            }))
            .into_response()
        }
        (Method::GET, ["contents", path @ ..]) => {
            let repo = &w.repos[&key];
            let path = path.join("/");
            if let Some(r) = query.get("ref")
                && *r != repo.default_branch
            {
                return not_found();
            }
            let Some(bytes) = repo.files.get(&path) else {
                return not_found();
            };
            // GitHub wraps the base64 at 60 characters a line.
            let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
            let wrapped: String = encoded
                .as_bytes()
                .chunks(60)
                .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
                .collect();
            let name = path.rsplit('/').next().unwrap_or(&path);
            axum::Json(json!({
                "type": "file",
                "encoding": "base64",
                "size": bytes.len(),
                "name": name,
                "path": path,
                "content": wrapped,
                "sha": "3d21ec53a331a6f037a91c368710b99387d012c1",
                "url": format!("https://api.github.com/repos/{}/contents/{path}", repo.full_name),
                "html_url": format!("https://github.com/{}/blob/{}/{path}", repo.full_name, repo.default_branch),
                "git_url": null,
                "download_url": null,
                "_links": {},
            }))
            .into_response()
        }
        _ => not_found(),
    }
}

fn comment_of<'w>(w: &'w World, repo: &str, id: &str) -> Option<&'w FakeComment> {
    let id = id.parse::<i64>().ok()?;
    w.comments.get(&id).filter(|c| c.repo == repo)
}

fn comment_json(c: &FakeComment) -> Value {
    json!({
        "id": c.id,
        "node_id": format!("IC_{}", c.id),
        "url": format!("https://api.github.com/repos/{}/issues/comments/{}", c.repo, c.id),
        "html_url": format!("https://github.com/{}/issues/{}#issuecomment-{}", c.repo, c.issue, c.id),
        "issue_url": format!("https://api.github.com/repos/{}/issues/{}", c.repo, c.issue),
        "body": c.body,
        "user": c.author.json(),
        "created_at": rfc3339(0),
        "updated_at": rfc3339(0),
        "author_association": "NONE",
    })
}
