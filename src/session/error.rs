//! Why a session step stopped early. A [`UserError`] is something a person reads (a
//! refusal answered to the commenter, or the reason a session failed); everything else is
//! the job queue's to retry or dead-letter, and only errors known to pass are retried.

use crate::jobs::JobError;

/// What is posted back when planwright will not or cannot do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserError {
    /// A command that cannot be carried out now: the commenter is answered and the
    /// session stays as it was.
    Refused(String),
    /// The session fails, with this reason on its status comment.
    Failed(String),
    /// The session fails, but the cause is a provider's or forge's own text (internal
    /// addresses, masked keys): the issue, which may be public, gets `public`; the audit
    /// log keeps `detail` for the operator.
    Hidden { public: String, detail: String },
}

/// How a session step ends early.
#[derive(Debug)]
pub(crate) enum Stop {
    User(UserError),
    /// The session moved on meanwhile (a maintainer cancelled it): nothing is left to do.
    Gone,
    Job(JobError),
}

impl Stop {
    pub(crate) fn fail(reason: impl Into<String>) -> Self {
        Stop::User(UserError::Failed(reason.into()))
    }

    pub(crate) fn hidden(public: impl Into<String>, detail: impl ToString) -> Self {
        Stop::User(UserError::Hidden {
            public: public.into(),
            detail: detail.to_string(),
        })
    }

    /// A bug or broken record: trying again gives the same answer.
    pub(crate) fn permanent(e: impl Into<anyhow::Error>) -> Self {
        Stop::Job(JobError::Permanent(e.into()))
    }

    pub(crate) fn retryable(e: impl Into<anyhow::Error>) -> Self {
        Stop::Job(JobError::Retryable(e.into()))
    }
}

impl From<UserError> for Stop {
    fn from(e: UserError) -> Self {
        Stop::User(e)
    }
}

impl<E: Into<JobError>> From<E> for Stop {
    fn from(e: E) -> Self {
        Stop::Job(e.into())
    }
}
