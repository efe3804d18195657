//! `POST /webhooks/gitlab`: checks `X-Gitlab-Token` in constant time, deduplicates on
//! `Idempotency-Key` (or `X-Gitlab-Event-UUID`), and turns issue label changes, notes on
//! issues and merge requests, and merge request changes into domain events.

use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use serde::Deserialize;

use super::{
    Lenient, Parsed, Refusal, Verified, accept, header, parse_object, read_body, token_matches,
};
use crate::event::{Actor, CiSource, Event, ForgeKind, RepoEvent, RepoEventKind, Thread};
use crate::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};
use crate::server::AppState;

pub async fn receive(State(state): State<AppState>, delivery: GitlabDelivery) -> Response {
    let parsed = parse(&delivery.event, &delivery.body);
    accept(
        &state,
        Verified {
            forge: ForgeKind::Gitlab,
            event: delivery.event,
            delivery_key: delivery.delivery_key,
            body: delivery.body,
            parsed,
        },
    )
    .await
}

/// A request that presented one of the configured tokens.
pub struct GitlabDelivery {
    pub event: String,
    pub delivery_key: Option<String>,
    pub body: String,
}

impl FromRequest<AppState> for GitlabDelivery {
    type Rejection = Refusal;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let settings = &state.settings;
        if settings.gitlab.webhook_secrets.is_empty() && settings.gitlab.project_secrets.is_empty()
        {
            return Err(Refusal::NotConfigured("GitLab"));
        }
        let headers = req.headers();
        let token = header(headers, "x-gitlab-token").ok_or(Refusal::Unauthorized(
            "The request has no X-Gitlab-Token header",
        ))?;
        let global = token_matches(token.as_bytes(), settings.gitlab_secrets());
        // Every project secret is compared, so the time says nothing about which matched.
        let projects: Vec<&RepoName> = settings
            .gitlab_project_secrets()
            .filter(|(_, secret)| token_matches(token.as_bytes(), std::iter::once(*secret)))
            .map(|(project, _)| project)
            .collect();
        if !global && projects.is_empty() {
            return Err(Refusal::Unauthorized("X-Gitlab-Token does not match"));
        }
        let event = header(headers, "x-gitlab-event")
            .map(str::to_owned)
            .ok_or(Refusal::MissingHeader("X-Gitlab-Event"))?;
        // Idempotency-Key stays the same across GitLab's retries of one delivery.
        let delivery_key = header(headers, "idempotency-key")
            .or_else(|| header(headers, "x-gitlab-event-uuid"))
            .map(str::to_owned);
        let body = read_body(req, state).await?;
        let body = String::from_utf8_lossy(&body).into_owned();
        // A project's secret speaks for that project only: the body is read for its
        // project only now that the token is known to be one of ours.
        if !global && !project_of(&body).is_some_and(|p| projects.contains(&&p)) {
            return Err(Refusal::Unauthorized(
                "X-Gitlab-Token is not the webhook secret of the payload's project",
            ));
        }
        Ok(GitlabDelivery {
            event,
            delivery_key,
            body,
        })
    }
}

/// The project a payload says it is about.
fn project_of(body: &str) -> Option<RepoName> {
    #[derive(Deserialize)]
    struct OnlyProject {
        project: Project,
    }
    let only: OnlyProject = serde_json::from_str(body).ok()?;
    RepoName::parse(&only.project.path_with_namespace).ok()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Payload {
    object_kind: Lenient<String>,
    user: Lenient<User>,
    project: Lenient<Project>,
    object_attributes: Lenient<Attributes>,
    changes: Lenient<Changes>,
    issue: Lenient<Iid>,
    merge_request: Lenient<Iid>,
}

#[derive(Debug, Deserialize)]
struct User {
    /// Older GitLab versions send no id: the login alone (id 0) stands for the user, and a
    /// command's author is read back from the API anyway.
    #[serde(default)]
    id: Option<i64>,
    username: String,
}

impl From<&User> for Actor {
    fn from(user: &User) -> Self {
        Actor {
            login: user.username.clone(),
            id: user.id.unwrap_or(0),
            bot: crate::forge::gitlab::is_token_bot(&user.username),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Project {
    path_with_namespace: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Attributes {
    id: Lenient<i64>,
    iid: Lenient<i64>,
    action: Lenient<String>,
    state: Lenient<String>,
    note: Lenient<String>,
    noteable_type: Lenient<String>,
    system: Lenient<bool>,
    /// A pipeline's outcome and commit.
    status: Lenient<String>,
    sha: Lenient<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Changes {
    labels: Lenient<LabelChange>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LabelChange {
    previous: Vec<Label>,
    current: Vec<Label>,
}

#[derive(Debug, Deserialize)]
struct Label {
    title: String,
}

#[derive(Debug, Deserialize)]
struct Iid {
    iid: i64,
}

/// Reads a verified payload; `Err` when it is not a JSON object or an event planwright
/// acts on lacks a field it needs.
pub fn parse(event: &str, body: &str) -> Result<Parsed, String> {
    let p: Payload = parse_object(body)?;
    let attrs = p.object_attributes.get();
    let action = attrs
        .and_then(|a| a.action.get().cloned())
        .or_else(|| p.object_kind.get().cloned());
    let repo = p
        .project
        .get()
        .and_then(|proj| RepoName::parse(&proj.path_with_namespace).ok());
    let kind = repo_event(event, &p)?;
    let events = match kind {
        None => Vec::new(),
        Some(kind) => {
            let repo = repo
                .clone()
                .ok_or_else(|| format!("The {event} payload has no readable `project`"))?;
            vec![Event::Repository(RepoEvent {
                forge: ForgeKind::Gitlab,
                repo,
                installation: None,
                kind,
            })]
        }
    };
    Ok(Parsed {
        action,
        repo,
        installation: None,
        events,
    })
}

/// The repository event one hook stands for: none for a hook or change planwright
/// does not act on.
fn repo_event(event: &str, p: &Payload) -> Result<Option<RepoEventKind>, String> {
    let reading = Reading { event, p };
    match event {
        "Issue Hook" | "Confidential Issue Hook" => reading.issue_labels(),
        "Note Hook" | "Confidential Note Hook" => reading.note(),
        "Pipeline Hook" => reading.pipeline(),
        "Merge Request Hook" => reading.merge_request(),
        _ => Ok(None),
    }
}

/// One hook's payload being read into a repository event.
struct Reading<'a> {
    event: &'a str,
    p: &'a Payload,
}

impl Reading<'_> {
    /// The error for a payload without a field its event needs.
    fn need(&self, what: &str) -> String {
        format!("The {} payload has no readable `{what}`", self.event)
    }

    fn actor(&self) -> Result<Actor, String> {
        self.p
            .user
            .get()
            .map(Actor::from)
            .ok_or_else(|| self.need("user"))
    }

    /// An issue whose labels changed: labels added or removed, nothing for any other
    /// change.
    fn issue_labels(&self) -> Result<Option<RepoEventKind>, String> {
        let Some(change) = self.p.changes.get().and_then(|c| c.labels.get()) else {
            return Ok(None);
        };
        let added: Vec<String> = change
            .current
            .iter()
            .filter(|l| !change.previous.iter().any(|prev| prev.title == l.title))
            .map(|l| l.title.clone())
            .collect();
        let removed: Vec<String> = change
            .previous
            .iter()
            .filter(|l| !change.current.iter().any(|now| now.title == l.title))
            .map(|l| l.title.clone())
            .collect();
        if added.is_empty() && removed.is_empty() {
            return Ok(None);
        }
        let iid = self
            .p
            .object_attributes
            .get()
            .and_then(|a| a.iid.get().copied())
            .ok_or_else(|| self.need("object_attributes.iid"))?;
        let issue = IssueNumber(iid);
        // One change that both adds and removes labels is read as the adding: starting
        // work is what a person waits for.
        Ok(Some(if added.is_empty() {
            RepoEventKind::IssueUnlabeled {
                issue,
                labels: removed,
                actor: self.actor()?,
            }
        } else {
            RepoEventKind::IssueLabeled {
                issue,
                labels: added,
                actor: self.actor()?,
            }
        }))
    }

    /// A comment created on an issue or a merge request.
    fn note(&self) -> Result<Option<RepoEventKind>, String> {
        let p = self.p;
        let attrs = p
            .object_attributes
            .get()
            .ok_or_else(|| self.need("object_attributes"))?;
        // System notes are GitLab's own records ("added label X"), and edits are not
        // new commands.
        let system = attrs.system.get().copied().unwrap_or(false);
        let created = attrs.action.get().is_none_or(|a| a == "create");
        if system || !created {
            return Ok(None);
        }
        let thread = match attrs.noteable_type.get().map(String::as_str) {
            Some("Issue") => Thread::Issue(IssueNumber(
                p.issue
                    .get()
                    .map(|i| i.iid)
                    .ok_or_else(|| self.need("issue.iid"))?,
            )),
            Some("MergeRequest") => Thread::PullRequest(PullNumber(
                p.merge_request
                    .get()
                    .map(|m| m.iid)
                    .ok_or_else(|| self.need("merge_request.iid"))?,
            )),
            _ => return Ok(None),
        };
        Ok(Some(RepoEventKind::CommentCreated {
            thread,
            comment: CommentId(
                attrs
                    .id
                    .get()
                    .copied()
                    .ok_or_else(|| self.need("object_attributes.id"))?,
            ),
            body: attrs.note.get().cloned().unwrap_or_default(),
            author: self.actor()?,
        }))
    }

    /// A pipeline that finished: an event only when it failed.
    fn pipeline(&self) -> Result<Option<RepoEventKind>, String> {
        let attrs = self
            .p
            .object_attributes
            .get()
            .ok_or_else(|| self.need("object_attributes"))?;
        if attrs.status.get().map(String::as_str) != Some("failed") {
            return Ok(None);
        }
        let id = attrs
            .id
            .get()
            .copied()
            .ok_or_else(|| self.need("object_attributes.id"))?;
        let sha = attrs
            .sha
            .get()
            .ok_or_else(|| self.need("object_attributes.sha"))?;
        Ok(Some(RepoEventKind::ChecksFailed {
            sha: CommitSha(sha.clone()),
            source: CiSource::Pipeline { id },
        }))
    }

    /// A merge request that changed, with the action and the state it is in.
    fn merge_request(&self) -> Result<Option<RepoEventKind>, String> {
        let attrs = self
            .p
            .object_attributes
            .get()
            .ok_or_else(|| self.need("object_attributes"))?;
        Ok(Some(RepoEventKind::MergeRequestChanged {
            pull: PullNumber(
                attrs
                    .iid
                    .get()
                    .copied()
                    .ok_or_else(|| self.need("object_attributes.iid"))?,
            ),
            action: attrs.action.get().cloned().unwrap_or_default(),
            state: attrs.state.get().cloned().unwrap_or_default(),
            actor: self.actor()?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_added_are_those_not_there_before() {
        let body = r#"{"object_kind":"issue","user":{"id":7,"username":"ada"},
            "project":{"path_with_namespace":"Grp/Sub/Proj"},
            "object_attributes":{"iid":4,"action":"update"},
            "changes":{"labels":{"previous":[{"title":"bug"}],
                                 "current":[{"title":"bug"},{"title":"planwright"}]}}}"#;
        let parsed = parse("Issue Hook", body).unwrap();
        let Event::Repository(ev) = &parsed.events[0] else {
            panic!("expected a repository event")
        };
        assert_eq!(ev.repo.as_str(), "grp/sub/proj");
        match &ev.kind {
            RepoEventKind::IssueLabeled {
                issue,
                labels,
                actor,
            } => {
                assert_eq!(issue.0, 4);
                assert_eq!(labels, &vec!["planwright".to_owned()]);
                assert_eq!(actor.login, "ada");
            }
            other => panic!("unexpected {other:?}"),
        }
        // A label removed is its own event.
        let removed = body
            .replace(r#",{"title":"planwright"}]}}"#, "]}}")
            .replace(
                r#""previous":[{"title":"bug"}]"#,
                r#""previous":[{"title":"bug"},{"title":"x"}]"#,
            );
        let parsed = parse("Issue Hook", &removed).unwrap();
        let Event::Repository(ev) = &parsed.events[0] else {
            panic!("expected a repository event")
        };
        match &ev.kind {
            RepoEventKind::IssueUnlabeled { labels, .. } => assert_eq!(labels, &["x"]),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn system_notes_and_edits_are_ignored() {
        let body = |system: bool, action: &str| {
            format!(
                r#"{{"user":{{"id":1,"username":"root"}},"project":{{"path_with_namespace":"a/b"}},
                "object_attributes":{{"id":9,"note":"/approve","noteable_type":"Issue","system":{system},"action":"{action}"}},
                "issue":{{"iid":3}}}}"#
            )
        };
        assert_eq!(
            parse("Note Hook", &body(false, "create"))
                .unwrap()
                .events
                .len(),
            1
        );
        assert!(
            parse("Note Hook", &body(true, "create"))
                .unwrap()
                .events
                .is_empty()
        );
        assert!(
            parse("Note Hook", &body(false, "update"))
                .unwrap()
                .events
                .is_empty()
        );
    }
}
