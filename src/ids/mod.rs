//! Identifier newtypes and the names every layer shares (a model, a permission level), so
//! that a repository name, an issue number and an installation id can never be passed in
//! each other's place; each is stored and read by the store as itself (the sqlx traits),
//! not as a bare string or number. A leaf: it imports nothing of the crate.

pub mod image;

use std::fmt;
use std::str::FromStr;

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

/// One repository as its forge knows it for as long as it exists (`github:12345`): what
/// keeps one repository's cached setup and kept baselines apart from every other's. Made
/// of the forge and the repository's forge id, never its name, so a rename keeps it and a
/// repository deleted and made again under an old name does not inherit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoScope(String);

impl RepoScope {
    /// `forge` as the store spells it (`github`), `id` as the forge gives it.
    pub fn new(forge: &str, id: &str) -> Self {
        Self(format!("{forge}:{id}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name for it that is safe as one folder's name whatever the id holds: the hex of
    /// its sha256.
    pub fn folder(&self) -> String {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(self.0.as_bytes()))
    }
}

impl fmt::Display for RepoScope {
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

/// The vendors planwright has a client for. OpenAI-compatible local servers (vLLM,
/// llama.cpp, Ollama) are `OpenAi` with another base URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model as settings name it: `provider:model`, e.g. `anthropic:claude-sonnet-4-5`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelName {
    pub provider: Provider,
    pub model: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InvalidModelName {
    #[error(
        "`{0}` is not a model name of the form provider:model (e.g. anthropic:claude-sonnet-4-5)"
    )]
    Malformed(String),
    #[error("`{name}` names the unknown provider `{provider}` (known: anthropic, openai)")]
    UnknownProvider { name: String, provider: String },
}

impl ModelName {
    pub fn parse(name: &str) -> Result<Self, InvalidModelName> {
        let trimmed = name.trim();
        let Some((provider, model)) = trimmed.split_once(':') else {
            return Err(InvalidModelName::Malformed(name.to_owned()));
        };
        let model = model.trim();
        if model.is_empty() || model.chars().any(char::is_whitespace) {
            return Err(InvalidModelName::Malformed(name.to_owned()));
        }
        let provider = match provider.trim() {
            "anthropic" => Provider::Anthropic,
            "openai" => Provider::OpenAi,
            other => {
                return Err(InvalidModelName::UnknownProvider {
                    name: name.to_owned(),
                    provider: other.to_owned(),
                });
            }
        };
        Ok(Self {
            provider,
            model: model.to_owned(),
        })
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// A user's access to a repository, ordered so that `permission >= Permission::Write` is
/// the authorization check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::Triage => "triage",
            Permission::Write => "write",
            Permission::Maintain => "maintain",
            Permission::Admin => "admin",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a permission level (none, read, triage, write, maintain, admin)")]
pub struct UnknownPermission(String);

impl FromStr for Permission {
    type Err = UnknownPermission;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "none" => Permission::None,
            "read" | "pull" => Permission::Read,
            "triage" => Permission::Triage,
            "write" | "push" => Permission::Write,
            "maintain" => Permission::Maintain,
            "admin" => Permission::Admin,
            _ => return Err(UnknownPermission(s.to_owned())),
        })
    }
}
