//! Identifier newtypes shared by every layer, so that a repository name, an issue number
//! and an installation id can never be passed in each other's place; each is stored and
//! read by the store as itself (the sqlx traits), not as a bare string or number.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A repository's full path as the forge names it (`owner/name`, or `group/sub/name` on
/// GitLab), lower-cased: both forges treat these paths case-insensitively, so the
/// normalised form is the one used as a key (and the one stored, so a stored name is
/// read back as it is).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct RepoName(String);

impl RepoName {
    /// Normalises a full path; refuses one without an owner part or with empty segments.
    pub fn parse(full_path: &str) -> Result<Self, InvalidRepoName> {
        let trimmed = full_path.trim().trim_matches('/');
        let valid = trimmed.contains('/') && trimmed.split('/').all(|s| !s.is_empty());
        if valid {
            Ok(Self(trimmed.to_ascii_lowercase()))
        } else {
            Err(InvalidRepoName(full_path.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a repository path of the form owner/name")]
pub struct InvalidRepoName(String);

/// Stores a closed set of names as text through the `Any` driver the store uses: the
/// type gives `as_str` and `FromStr`, and a stored name it does not know fails the row's
/// decoding with the parse error, naming the value.
macro_rules! stored_as_text {
    ($name:ty) => {
        impl sqlx::Type<sqlx::Any> for $name {
            fn type_info() -> sqlx::any::AnyTypeInfo {
                <str as sqlx::Type<sqlx::Any>>::type_info()
            }
        }

        impl<'q> sqlx::Encode<'q, sqlx::Any> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut <sqlx::Any as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<'q, sqlx::Any>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Any> for $name {
            fn decode(
                value: <sqlx::Any as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let name = <&str as sqlx::Decode<'r, sqlx::Any>>::decode(value)?;
                Ok(name.parse()?)
            }
        }
    };
}
pub(crate) use stored_as_text;

macro_rules! int_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

int_id!(
    /// An issue's number within its repository (GitLab: the issue `iid`).
    IssueNumber
);
int_id!(
    /// A pull request's number (GitLab: the merge request `iid`).
    PullNumber
);
int_id!(
    /// A GitHub App installation.
    InstallationId
);
int_id!(
    /// A comment (GitHub issue or review comment id, GitLab note id).
    CommentId
);

/// A commit's full SHA as the forge reports it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct CommitSha(pub String);

impl CommitSha {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CommitSha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// A new, time-ordered identifier.
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7().to_string())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_id!(
    /// A delivery recorded in the inbox (our id, not the forge's delivery id).
    DeliveryId
);
text_id!(
    /// A job in the durable queue.
    JobId
);
text_id!(
    /// A planner session: one issue's way from label to pull request.
    SessionId
);
text_id!(
    /// One executor run: an attempt at carrying out an approved contract.
    RunId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names_are_normalised_and_validated() {
        let name = RepoName::parse(" Codertocat/Hello-World ").unwrap();
        assert_eq!(name.as_str(), "codertocat/hello-world");
        assert_eq!(
            RepoName::parse("Group/Sub/Project").unwrap().as_str(),
            "group/sub/project"
        );
        assert!(RepoName::parse("no-owner").is_err());
        assert!(RepoName::parse("owner//name").is_err());
        assert!(RepoName::parse("").is_err());
    }
}
