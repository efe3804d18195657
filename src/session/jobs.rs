//! Every kind of job the queue carries, with its payload, and how each is queued: the
//! stored kind names and payload shapes are those of rows already in the queue.

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::config::repo::BoundSettings;
use crate::contract::{ContractHash, ContractVersion};
use crate::event::{Event, ForgeKind};
use crate::ids::{CommitSha, SessionId};
use crate::jobs::JobError;
use crate::store::{jobs, sessions};

/// Attempts a session job gets before it is dead-lettered; planning failures a person
/// must see are handled inside the job, so these are for outages.
pub(crate) const JOB_ATTEMPTS: i64 = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanJob {
    pub session: SessionId,
    /// The version this job produces.
    pub version: ContractVersion,
    /// `/revise` feedback: the new version builds on the previous one.
    pub feedback: Option<String>,
    /// What other checks reported on the pull request since the last round, distilled:
    /// written by CI and test code, so shown to the planner apart from the feedback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// What an approval binds to: exactly this version, hash and base.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecuteJob {
    pub session: SessionId,
    pub version: ContractVersion,
    pub sha256: ContractHash,
    pub base_sha: CommitSha,
    /// The sha256 of the repository settings recorded with the contract; `None` for a
    /// contract planned before settings were recorded.
    #[serde(default)]
    pub settings_sha256: Option<String>,
    /// `/retry continue`: the execution carries on from the unfinished change a stopped
    /// run kept, instead of starting from the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Continuation>,
}

/// Unfinished work an execution carries on from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuation {
    /// The commit holding the unfinished change, as it was pushed.
    pub commit: CommitSha,
    /// Why the run that made it stopped, for the executor to read.
    pub reason: String,
}

/// How a plan or execute job left its session: whether the round it ran has ended (the
/// session failed, or its pull request is open again), so what waited for it may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobEnd {
    RoundEnded,
    /// The session goes on (a contract awaits approval, questions an answer) or the job
    /// had nothing to do.
    RoundGoesOn,
}

/// A job as the session layer knows it. The stored kind names (`event`, `plan`,
/// `execute`) and payloads are those of rows already in the queue.
#[derive(Debug, Clone)]
pub enum JobKind {
    /// One domain event from a delivery.
    Event(Event),
    /// Runs the planner for one contract version.
    Plan(PlanJob),
    /// Carries out an approved contract.
    Execute(ExecuteJob),
}

impl JobKind {
    /// The name stored in the queue's `kind` column.
    pub fn name(&self) -> &'static str {
        match self {
            JobKind::Event(_) => "event",
            JobKind::Plan(_) => "plan",
            JobKind::Execute(_) => "execute",
        }
    }

    /// The job to enqueue, its payload serialised.
    pub fn to_new_job(&self, max_attempts: i64) -> serde_json::Result<jobs::NewJob> {
        let payload = match self {
            JobKind::Event(event) => serde_json::to_string(event)?,
            JobKind::Plan(plan) => serde_json::to_string(plan)?,
            JobKind::Execute(execute) => serde_json::to_string(execute)?,
        };
        Ok(jobs::NewJob::new(self.name(), payload, max_attempts))
    }

    /// Reads a claimed job; an unknown kind or unreadable payload will never run.
    pub fn parse(kind: &str, payload: &str) -> Result<Self, JobError> {
        let context = || format!("Cannot read the {kind} job's payload");
        let parsed = match kind {
            "event" => serde_json::from_str(payload).map(JobKind::Event),
            "plan" => serde_json::from_str(payload).map(JobKind::Plan),
            "execute" => serde_json::from_str(payload).map(JobKind::Execute),
            _ => {
                return Err(JobError::Permanent(anyhow::anyhow!(
                    "no handler for job kind `{kind}`"
                )));
            }
        };
        parsed.with_context(context).map_err(JobError::Permanent)
    }
}

/// Queues the plan job that writes `version` (with `/revise` feedback, if any).
pub(crate) async fn enqueue_plan(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    version: ContractVersion,
    feedback: Option<String>,
) -> anyhow::Result<()> {
    enqueue_plan_job(
        conn,
        PlanJob {
            session: session.clone(),
            version,
            feedback,
            evidence: None,
        },
    )
    .await
}

/// Queues `plan`.
pub(crate) async fn enqueue_plan_job(
    conn: &mut sqlx::AnyConnection,
    plan: PlanJob,
) -> anyhow::Result<()> {
    let session = plan.session.clone();
    let mut job = JobKind::Plan(plan).to_new_job(JOB_ATTEMPTS)?;
    job.session = Some(session);
    jobs::enqueue(conn, &job).await?;
    Ok(())
}

/// Queues the execute job bound to exactly this contract row; with `continues`, it carries
/// on from that unfinished work. Returns how many runs wait before it now.
pub(crate) async fn enqueue_execute(
    conn: &mut sqlx::AnyConnection,
    session: &SessionId,
    contract: &sessions::ContractRow,
    continues: Option<Continuation>,
) -> anyhow::Result<i64> {
    let row = sessions::get(conn, session)
        .await?
        .with_context(|| format!("Session {session} does not exist"))?;
    let sha256 = ContractHash::parse(&contract.sha256)
        .with_context(|| format!("Contract v{} has no valid hash", contract.version))?;
    let mut job = JobKind::Execute(ExecuteJob {
        session: session.clone(),
        version: contract.version,
        sha256,
        base_sha: CommitSha(contract.base_sha.clone()),
        settings_sha256: contract.settings.as_deref().map(BoundSettings::sha256_of),
        continues,
    })
    .to_new_job(JOB_ATTEMPTS)?;
    job.session = Some(session.clone());
    job.lane = Some(lane(&row));
    let id = jobs::enqueue(conn, &job).await?;
    jobs::runs_ahead(conn, &id).await
}

/// Whose turn a session's runs take: a GitHub installation, a GitLab top-level group (one
/// organisation either way), or the local forge's one lane.
pub(crate) fn lane(session: &sessions::SessionRow) -> String {
    match (session.forge, session.installation_id) {
        (ForgeKind::Github, Some(installation)) => format!("github:{installation}"),
        (ForgeKind::Gitlab, _) | (ForgeKind::Github, None) => {
            let owner = session.repo.as_str().split('/').next().unwrap_or_default();
            format!("{}:{owner}", session.forge)
        }
        (ForgeKind::Local, _) => "local".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Payloads as the queue held them before their fields were typed: each reads, and is
    /// written back the same.
    const STORED: &[(&str, &str)] = &[
        (
            "plan",
            r#"{"session":"5f0c8a52-0d8e-4a57-9b8e-2f1d3c4b5a69","version":2,"feedback":"Handle mul too.","evidence":"On commit 0123456789abcdef0123456789abcdef01234567:\n- tests (failure)\n"}"#,
        ),
        (
            "execute",
            r#"{"session":"5f0c8a52-0d8e-4a57-9b8e-2f1d3c4b5a69","version":3,"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","base_sha":"0123456789abcdef0123456789abcdef01234567","settings_sha256":"2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae","continues":{"commit":"89abcdef0123456789abcdef0123456789abcdef","reason":"The executor ran out of turns."}}"#,
        ),
        (
            "execute",
            r#"{"session":"5f0c8a52-0d8e-4a57-9b8e-2f1d3c4b5a69","version":1,"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","base_sha":"0123456789abcdef0123456789abcdef01234567","settings_sha256":null}"#,
        ),
    ];

    #[test]
    fn payloads_stored_before_the_fields_were_typed_read_and_write_back_the_same() {
        for (kind, payload) in STORED {
            let job = JobKind::parse(kind, payload).unwrap_or_else(|e| panic!("{payload}: {e:?}"));
            assert_eq!(job.name(), *kind);
            let written = job.to_new_job(JOB_ATTEMPTS).unwrap().payload;
            assert_eq!(written, *payload);
        }
        let JobKind::Execute(execute) = JobKind::parse(STORED[1].0, STORED[1].1).unwrap() else {
            panic!("not an execute job");
        };
        assert_eq!(execute.version, ContractVersion(3));
        assert_eq!(execute.sha256.short(), "9f86d081884c");
        let continues = execute.continues.unwrap();
        assert_eq!(
            continues.commit.as_str(),
            "89abcdef0123456789abcdef0123456789abcdef"
        );
    }
}
