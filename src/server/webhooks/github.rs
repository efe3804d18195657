//! `POST /webhooks/github`: verifies `X-Hub-Signature-256` over the raw body, as it
//! arrives and before anything is parsed, then turns the events planwright acts on into
//! domain events. Anyone may send a body, so only a few are read at once.

use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use hmac::{Hmac, Mac};
use secrecy::ExposeSecret as _;
use serde::Deserialize;
use sha2::Sha256;

use super::{Lenient, Parsed, Refusal, Verified, accept, header, parse_object, read_streamed};
use crate::event::{
    Actor, CiSource, Event, ForgeKind, InstallationAction, RepoEvent, RepoEventKind, ReviewState,
    Thread,
};
use crate::ids::{CommentId, CommitSha, InstallationId, IssueNumber, PullNumber, RepoName};
use crate::server::AppState;

pub async fn receive(State(state): State<AppState>, delivery: GithubDelivery) -> Response {
    let parsed = parse(&delivery.event, &delivery.body);
    accept(
        &state,
        Verified {
            forge: ForgeKind::Github,
            event: delivery.event,
            delivery_key: delivery.delivery_id,
            body: delivery.body,
            parsed,
        },
    )
    .await
}

/// A request whose signature matched one of the configured secrets.
pub struct GithubDelivery {
    pub event: String,
    pub delivery_id: Option<String>,
    /// The JSON payload (taken out of the `payload` field for form-encoded deliveries).
    pub body: String,
}

impl FromRequest<AppState> for GithubDelivery {
    type Rejection = Refusal;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        // Read per request: an app registered while running brings its secret with it.
        let secrets = state.forges.github_secrets();
        if secrets.is_empty() {
            return Err(Refusal::NotConfigured("GitHub"));
        }
        let headers = req.headers();
        let signature = header(headers, "x-hub-signature-256").ok_or(Refusal::Unauthorized(
            "The request has no X-Hub-Signature-256 header",
        ))?;
        let signature = signature
            .strip_prefix("sha256=")
            .and_then(|hex_digest| hex::decode(hex_digest).ok())
            .filter(|bytes| bytes.len() == 32)
            .ok_or(Refusal::Unauthorized(
                "X-Hub-Signature-256 is not of the form sha256=<hex digest>",
            ))?;
        let event = header(headers, "x-github-event").map(str::to_owned);
        let delivery_id = header(headers, "x-github-delivery").map(str::to_owned);
        let form = header(headers, "content-type")
            .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
        // Held until the signature is checked: bodies nobody has vouched for yet are
        // what an attacker can send without limit.
        let turn = tokio::time::timeout(
            super::READ_TURN_WAIT,
            state.unverified_reads.clone().acquire_owned(),
        )
        .await
        .map_err(|_| Refusal::Busy)?
        .map_err(|_| Refusal::Busy)?;
        let mut macs = Signatures::new(secrets.iter().map(|s| s.expose_secret().as_bytes()));
        let body = read_streamed(req, state.settings.webhook_body_limit, |chunk| {
            macs.update(chunk)
        })
        .await?;
        let verified = macs.match_(&signature);
        drop(turn);
        if !verified {
            return Err(Refusal::Unauthorized(
                "The signature does not match the body",
            ));
        }
        let event = event.ok_or(Refusal::MissingHeader("X-GitHub-Event"))?;
        let delivery_id = Some(delivery_id.ok_or(Refusal::MissingHeader("X-GitHub-Delivery"))?);
        let body = if form {
            form_payload(&body)
        } else {
            String::from_utf8_lossy(&body).into_owned()
        };
        Ok(GithubDelivery {
            event,
            delivery_id,
            body,
        })
    }
}

/// The body's HMAC under every accepted secret, fed as the body arrives.
struct Signatures(Vec<Hmac<Sha256>>);

impl Signatures {
    fn new<'a>(secrets: impl Iterator<Item = &'a [u8]>) -> Self {
        Signatures(
            secrets
                .filter_map(|secret| Hmac::<Sha256>::new_from_slice(secret).ok())
                .collect(),
        )
    }

    fn update(&mut self, chunk: &[u8]) {
        for mac in &mut self.0 {
            mac.update(chunk);
        }
    }

    /// Whether `signature` is the body's under any secret.
    fn match_(self, signature: &[u8]) -> bool {
        let mut matched = false;
        for mac in self.0 {
            // verify_slice compares in constant time; every secret is tried regardless.
            matched |= mac.verify_slice(signature).is_ok();
        }
        matched
    }
}

/// GitHub's form content type sends the JSON in a `payload` field.
fn form_payload(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Form {
        payload: String,
    }
    match serde_urlencoded::from_bytes::<Form>(body) {
        Ok(form) => form.payload,
        // Left as it came: parsing it as JSON fails and the delivery is rejected.
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Payload {
    action: Lenient<String>,
    repository: Lenient<Repository>,
    installation: Lenient<Installation>,
    sender: Lenient<User>,
    issue: Lenient<Issue>,
    label: Lenient<Label>,
    comment: Lenient<Comment>,
    review: Lenient<Review>,
    pull_request: Lenient<PullRequest>,
    hook_id: Lenient<i64>,
    repositories: Lenient<Vec<Repository>>,
    repositories_added: Lenient<Vec<Repository>>,
    repositories_removed: Lenient<Vec<Repository>>,
    check_suite: Lenient<CheckSuite>,
    /// A `status` event's fields sit at the top level.
    sha: Lenient<String>,
    state: Lenient<String>,
    context: Lenient<String>,
}

#[derive(Debug, Deserialize)]
struct CheckSuite {
    id: i64,
    head_sha: String,
    #[serde(default)]
    conclusion: Option<String>,
}

/// Conclusions of a finished check that mean it failed.
const FAILED: [&str; 4] = ["failure", "timed_out", "action_required", "startup_failure"];

#[derive(Debug, Deserialize)]
struct Repository {
    full_name: String,
}

#[derive(Debug, Deserialize)]
struct Installation {
    id: i64,
    #[serde(default)]
    account: Option<Account>,
}

#[derive(Debug, Deserialize)]
struct Account {
    login: Option<String>,
    slug: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct User {
    login: String,
    id: i64,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

impl From<&User> for Actor {
    fn from(user: &User) -> Self {
        Actor {
            login: user.login.clone(),
            id: user.id,
            bot: user.kind.as_deref() == Some("Bot") || user.login.ends_with("[bot]"),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Issue {
    number: i64,
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Label {
    name: String,
}

#[derive(Debug, Deserialize)]
struct Comment {
    id: i64,
    #[serde(default)]
    body: Option<String>,
    user: User,
}

#[derive(Debug, Deserialize)]
struct Review {
    id: i64,
    #[serde(default)]
    body: Option<String>,
    state: String,
    user: User,
}

#[derive(Debug, Deserialize)]
struct PullRequest {
    number: i64,
}

/// Reads a verified payload. `Err` when the body is not a JSON object, or when an event
/// planwright acts on lacks a field it needs.
pub fn parse(event: &str, body: &str) -> Result<Parsed, String> {
    let payload: Payload = parse_object(body)?;
    let action = payload.action.get().cloned();
    let repo = payload
        .repository
        .get()
        .and_then(|r| RepoName::parse(&r.full_name).ok());
    let installation = payload.installation.get().map(|i| InstallationId(i.id));
    let events = domain_events(
        event,
        action.as_deref(),
        repo.as_ref(),
        installation,
        &payload,
    )?;
    Ok(Parsed {
        action,
        repo,
        installation,
        events,
    })
}

/// The domain events one delivery stands for: none for an event or action planwright
/// does not act on.
fn domain_events(
    event: &str,
    action: Option<&str>,
    repo: Option<&RepoName>,
    installation: Option<InstallationId>,
    p: &Payload,
) -> Result<Vec<Event>, String> {
    let reading = Reading {
        event,
        repo,
        installation,
        p,
    };
    match (event, action) {
        ("ping", _) => Ok(vec![Event::Ping {
            hook_id: p.hook_id.get().copied(),
        }]),
        ("issues", Some("labeled")) => reading.issue_labeled(true),
        ("issues", Some("unlabeled")) => reading.issue_labeled(false),
        ("issue_comment", Some("created")) => reading.issue_comment(),
        ("pull_request_review_comment", Some("created")) => reading.review_comment(),
        ("pull_request_review", Some("submitted")) => reading.review_submitted(),
        ("check_suite", Some("completed")) => reading.check_suite_completed(),
        ("status", _) => reading.status(),
        ("installation", Some(action)) => reading.installation(action),
        ("installation_repositories", Some(action)) => reading.installation_repositories(action),
        _ => Ok(Vec::new()),
    }
}

/// One delivery's payload being read into domain events, with what every event of a
/// repository carries.
struct Reading<'a> {
    event: &'a str,
    repo: Option<&'a RepoName>,
    installation: Option<InstallationId>,
    p: &'a Payload,
}

impl Reading<'_> {
    /// The error for a payload without a field its event needs.
    fn need(&self, what: &str) -> String {
        format!("The {} payload has no readable `{what}`", self.event)
    }

    /// The one event of `kind` in the payload's repository.
    fn in_repo(&self, kind: RepoEventKind) -> Result<Vec<Event>, String> {
        let repo = self.repo.ok_or_else(|| self.need("repository"))?;
        Ok(vec![Event::Repository(RepoEvent {
            forge: ForgeKind::Github,
            repo: repo.clone(),
            installation: self.installation,
            kind,
        })])
    }

    fn sender(&self) -> Result<Actor, String> {
        self.p
            .sender
            .get()
            .map(Actor::from)
            .ok_or_else(|| self.need("sender"))
    }

    /// A label put on an issue (`labeled`) or taken off it.
    fn issue_labeled(&self, labeled: bool) -> Result<Vec<Event>, String> {
        let issue = self.p.issue.get().ok_or_else(|| self.need("issue"))?;
        let label = self.p.label.get().ok_or_else(|| self.need("label"))?;
        let (issue, labels, actor) = (
            IssueNumber(issue.number),
            vec![label.name.clone()],
            self.sender()?,
        );
        self.in_repo(if labeled {
            RepoEventKind::IssueLabeled {
                issue,
                labels,
                actor,
            }
        } else {
            RepoEventKind::IssueUnlabeled {
                issue,
                labels,
                actor,
            }
        })
    }

    /// A comment on an issue or a pull request's conversation.
    fn issue_comment(&self) -> Result<Vec<Event>, String> {
        let issue = self.p.issue.get().ok_or_else(|| self.need("issue"))?;
        let comment = self.p.comment.get().ok_or_else(|| self.need("comment"))?;
        let thread = if issue.pull_request.is_some() {
            Thread::PullRequest(PullNumber(issue.number))
        } else {
            Thread::Issue(IssueNumber(issue.number))
        };
        self.in_repo(RepoEventKind::CommentCreated {
            thread,
            comment: CommentId(comment.id),
            body: comment.body.clone().unwrap_or_default(),
            author: Actor::from(&comment.user),
        })
    }

    /// A comment on a pull request's diff.
    fn review_comment(&self) -> Result<Vec<Event>, String> {
        let pull = self
            .p
            .pull_request
            .get()
            .ok_or_else(|| self.need("pull_request"))?;
        let comment = self.p.comment.get().ok_or_else(|| self.need("comment"))?;
        self.in_repo(RepoEventKind::CommentCreated {
            thread: Thread::PullRequest(PullNumber(pull.number)),
            comment: CommentId(comment.id),
            body: comment.body.clone().unwrap_or_default(),
            author: Actor::from(&comment.user),
        })
    }

    fn review_submitted(&self) -> Result<Vec<Event>, String> {
        let pull = self
            .p
            .pull_request
            .get()
            .ok_or_else(|| self.need("pull_request"))?;
        let review = self.p.review.get().ok_or_else(|| self.need("review"))?;
        self.in_repo(RepoEventKind::ReviewSubmitted {
            pull: PullNumber(pull.number),
            review: review.id,
            state: ReviewState::parse(&review.state),
            body: review.body.clone().unwrap_or_default(),
            author: Actor::from(&review.user),
        })
    }

    /// A check suite that completed: an event only when it failed.
    fn check_suite_completed(&self) -> Result<Vec<Event>, String> {
        let suite = self
            .p
            .check_suite
            .get()
            .ok_or_else(|| self.need("check_suite"))?;
        if !suite
            .conclusion
            .as_deref()
            .is_some_and(|c| FAILED.contains(&c))
        {
            return Ok(Vec::new());
        }
        self.in_repo(RepoEventKind::ChecksFailed {
            sha: CommitSha(suite.head_sha.clone()),
            source: CiSource::CheckSuite { id: suite.id },
        })
    }

    /// A commit status: an event only for a failure or an error.
    fn status(&self) -> Result<Vec<Event>, String> {
        let state = self.p.state.get().ok_or_else(|| self.need("state"))?;
        if !matches!(state.as_str(), "failure" | "error") {
            return Ok(Vec::new());
        }
        let sha = self.p.sha.get().ok_or_else(|| self.need("sha"))?;
        let context = self.p.context.get().ok_or_else(|| self.need("context"))?;
        self.in_repo(RepoEventKind::ChecksFailed {
            sha: CommitSha(sha.clone()),
            source: CiSource::Status {
                context: context.clone(),
            },
        })
    }

    /// The app installed, removed or changed on an account.
    fn installation(&self, action: &str) -> Result<Vec<Event>, String> {
        let inst = self
            .p
            .installation
            .get()
            .ok_or_else(|| self.need("installation"))?;
        let account = inst
            .account
            .as_ref()
            .and_then(|a| {
                a.login
                    .clone()
                    .or_else(|| a.slug.clone())
                    .or_else(|| a.name.clone())
            })
            .ok_or_else(|| self.need("installation.account"))?;
        Ok(vec![Event::Installation {
            installation: InstallationId(inst.id),
            action: InstallationAction::from(action.to_owned()),
            account,
            repositories: repo_names(self.p.repositories.get())?,
        }])
    }

    /// Repositories added to or removed from an installation.
    fn installation_repositories(&self, action: &str) -> Result<Vec<Event>, String> {
        let inst = self
            .p
            .installation
            .get()
            .ok_or_else(|| self.need("installation"))?;
        Ok(vec![Event::InstallationRepositories {
            installation: InstallationId(inst.id),
            action: action.to_owned(),
            added: repo_names(self.p.repositories_added.get())?,
            removed: repo_names(self.p.repositories_removed.get())?,
        }])
    }
}

fn repo_names(repos: Option<&Vec<Repository>>) -> Result<Vec<RepoName>, String> {
    repos
        .map(|list| {
            list.iter()
                .map(|r| RepoName::parse(&r.full_name).map_err(|e| e.to_string()))
                .collect()
        })
        .unwrap_or_else(|| Ok(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_against_any_secret() {
        let body = b"{\"zen\":\"Keep it logically awesome.\"}";
        let mut mac = Hmac::<Sha256>::new_from_slice(b"new").unwrap();
        mac.update(body);
        let sig = mac.finalize().into_bytes();
        let secrets: Vec<&[u8]> = vec![b"old", b"new"];
        let over = |secrets: &[&[u8]], chunks: &[&[u8]]| {
            let mut macs = Signatures::new(secrets.iter().copied());
            for chunk in chunks {
                macs.update(chunk);
            }
            macs.match_(&sig)
        };
        assert!(over(&secrets, &[body]));
        // However the body arrives in pieces.
        assert!(over(
            &secrets,
            &[&body[..3], &[], &body[3..20], &body[20..]]
        ));
        assert!(!over(&[b"old"], &[body]));
        assert!(!over(&secrets, &[b"{}"]));
        assert!(!over(&[], &[body]));
    }

    #[test]
    fn form_encoded_payloads_are_unwrapped() {
        assert_eq!(form_payload(b"payload=%7B%22a%22%3A1%7D"), "{\"a\":1}");
    }

    #[test]
    fn acted_on_events_without_their_fields_are_errors() {
        let err = parse(
            "issues",
            r#"{"action":"labeled","repository":{"full_name":"a/b"}}"#,
        )
        .err()
        .unwrap();
        assert!(err.contains("issue"), "{err}");
        assert!(parse("issues", "[1,2]").is_err());
        // An ignored event needs no particular fields.
        let ok = parse(
            "star",
            r#"{"action":"created","repository":{"full_name":"A/B"}}"#,
        )
        .unwrap();
        assert!(ok.events.is_empty());
        assert_eq!(ok.repo.unwrap().as_str(), "a/b");
    }
}
