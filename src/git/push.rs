//! The push of a run branch through git2, with the forge's credentials given only to
//! git's callback, and why a push failed, classified once.

use std::path::Path;

use git2::{ErrorClass, ErrorCode, PushOptions, RemoteCallbacks, Repository};

use crate::forge::GitRemote;
use crate::ids::CommitSha;

/// Why a push failed, classified once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushFailure {
    /// The forge refused the credentials, or they may not push here.
    Refused,
    /// The forge took the credentials but refused the update (a protected branch, a
    /// branch holding commits planwright did not make).
    Rejected,
    /// The forge could not be reached or failed on its side (network, 5xx).
    Unreachable,
    /// Planwright's own repository could not be read.
    Local,
}

impl PushFailure {
    pub fn is_retryable(self) -> bool {
        match self {
            PushFailure::Unreachable => true,
            PushFailure::Refused | PushFailure::Rejected | PushFailure::Local => false,
        }
    }
}

/// `url` is the remote's, which never holds credentials.
#[derive(Debug, thiserror::Error)]
#[error("Could not push `{branch}` to {url}: {message}")]
pub struct PushError {
    pub branch: String,
    pub url: String,
    pub message: String,
    pub failure: PushFailure,
}

/// What a successful push did to the remote branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The branch was created or moved to the commit by this push.
    Moved,
    /// The branch already held the commit (an earlier attempt pushed it), or git did not
    /// say: whatever an earlier attempt attached to the commit may be there.
    Already,
}

/// Pushes `refs/heads/<branch>` from `git_dir` to the remote, without force: a branch
/// that already holds exactly this commit (a repeated push after a lost answer) is a
/// success; one holding other commits is refused rather than overwritten.
pub async fn push(git_dir: &Path, remote: &GitRemote, branch: &str) -> Result<Pushed, PushError> {
    let (branch_name, url) = (branch.to_owned(), remote.url.clone());
    let (git_dir, remote, branch) = (git_dir.to_owned(), remote.clone(), branch.to_owned());
    tokio::task::spawn_blocking(move || push_blocking(&git_dir, &remote, &branch))
        .await
        .map_err(|e| PushError {
            branch: branch_name.clone(),
            url: url.clone(),
            message: format!("the push task failed: {e}"),
            failure: PushFailure::Local,
        })?
}

/// Pushes `commit` (held in `git_dir`) to `refs/heads/<branch>` on the remote, under the
/// same rule as [`push`]: the run's own branch is left where it is.
pub async fn push_commit(
    git_dir: &Path,
    remote: &GitRemote,
    commit: &CommitSha,
    branch: &str,
) -> Result<(), PushError> {
    let (git_dir, remote, branch) = (git_dir.to_owned(), remote.clone(), branch.to_owned());
    let commit = commit.clone();
    let (branch_name, url) = (branch.clone(), remote.url.clone());
    tokio::task::spawn_blocking(move || {
        let local = |message: String| PushError {
            branch: branch.clone(),
            url: remote.url.clone(),
            message,
            failure: PushFailure::Local,
        };
        let repo = Repository::open_bare(&git_dir).map_err(|e| {
            local(format!(
                "cannot open {}: {}",
                git_dir.display(),
                e.message()
            ))
        })?;
        let oid = git2::Oid::from_str(commit.as_str()).map_err(|e| local(e.message().into()))?;
        repo.reference(
            &format!("refs/heads/{branch}"),
            oid,
            true,
            "planwright: kept",
        )
        .map_err(|e| local(e.message().into()))?;
        push_blocking(&git_dir, &remote, &branch).map(|_| ())
    })
    .await
    .map_err(|e| PushError {
        branch: branch_name,
        url,
        message: format!("the push task failed: {e}"),
        failure: PushFailure::Local,
    })?
}

fn push_blocking(git_dir: &Path, remote: &GitRemote, branch: &str) -> Result<Pushed, PushError> {
    let fail = |message: String, failure: PushFailure| PushError {
        branch: branch.to_owned(),
        url: remote.url.clone(),
        message,
        failure,
    };
    // A password in the URL would end up in error messages and the remote's logs.
    if let Ok(url) = reqwest::Url::parse(&remote.url)
        && url.password().is_some()
    {
        return Err(PushError {
            branch: branch.to_owned(),
            url: "a URL with a password in it".into(),
            message: "credentials must not be part of the URL".into(),
            failure: PushFailure::Refused,
        });
    }
    let repo = Repository::open_bare(git_dir).map_err(|e| {
        fail(
            format!("cannot open {}: {}", git_dir.display(), e.message()),
            PushFailure::Local,
        )
    })?;
    // libgit2 cannot push into a repository with a work tree, which is what the local
    // forge's remote is (the user's own checkout): the branch is fetched from that side.
    if Path::new(&remote.url).is_absolute()
        && let Ok(target) = Repository::open(&remote.url)
        && !target.is_bare()
    {
        return fetch_into(&repo, git_dir, &target, branch)
            .map(|()| Pushed::Already)
            .map_err(|(m, f)| fail(m, f));
    }
    let refused = std::cell::Cell::new(false);
    let rejected = std::cell::RefCell::new(None::<String>);
    // Whether the update git sends moves our branch: the remote's commit before it
    // against ours.
    let moved = std::cell::Cell::new(false);
    let target = format!("refs/heads/{branch}");
    let mut ask = super::credentials(remote.username.clone(), remote.password.clone());
    let mut callbacks = RemoteCallbacks::new();
    callbacks.credentials(|url, user, allowed| {
        ask(url, user, allowed).inspect_err(|_| refused.set(true))
    });
    callbacks.push_update_reference(|reference, status| {
        if let Some(status) = status {
            *rejected.borrow_mut() = Some(format!("the forge refused {reference}: {status}"));
        }
        Ok(())
    });
    callbacks.push_negotiation(|updates| {
        for update in updates {
            if update.dst_refname().is_ok_and(|r| r == target) && update.src() != update.dst() {
                moved.set(true);
            }
        }
        Ok(())
    });
    let mut options = PushOptions::new();
    options.remote_callbacks(callbacks);
    let mut anonymous = repo
        .remote_anonymous(&remote.url)
        .map_err(|e| fail(e.message().to_owned(), PushFailure::Local))?;
    let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
    let pushed = anonymous.push(&[refspec.as_str()], Some(&mut options));
    drop(options);
    if let Err(e) = pushed {
        let failure = if refused.get() {
            PushFailure::Refused
        } else {
            classify(&e)
        };
        return Err(fail(e.message().to_owned(), failure));
    }
    match rejected.into_inner() {
        Some(message) => Err(fail(message, PushFailure::Rejected)),
        None if moved.get() => Ok(Pushed::Moved),
        None => Ok(Pushed::Already),
    }
}

/// The commit `refs/heads/<branch>` holds on the remote, or `None` when there is no such
/// branch: what a push must not overwrite, looked up before choosing a branch to push to.
pub async fn remote_head(
    git_dir: &Path,
    remote: &GitRemote,
    branch: &str,
) -> Result<Option<CommitSha>, PushError> {
    let (git_dir, remote, branch) = (git_dir.to_owned(), remote.clone(), branch.to_owned());
    let (branch_name, url) = (branch.clone(), remote.url.clone());
    tokio::task::spawn_blocking(move || remote_head_blocking(&git_dir, &remote, &branch))
        .await
        .map_err(|e| PushError {
            branch: branch_name,
            url,
            message: format!("the lookup task failed: {e}"),
            failure: PushFailure::Local,
        })?
}

fn remote_head_blocking(
    git_dir: &Path,
    remote: &GitRemote,
    branch: &str,
) -> Result<Option<CommitSha>, PushError> {
    let fail = |message: String, failure: PushFailure| PushError {
        branch: branch.to_owned(),
        url: remote.url.clone(),
        message,
        failure,
    };
    let name = format!("refs/heads/{branch}");
    // The local forge's remote is the user's own checkout: its refs are read directly.
    if Path::new(&remote.url).is_absolute()
        && let Ok(target) = Repository::open(&remote.url)
        && !target.is_bare()
    {
        return match target.refname_to_id(&name) {
            Ok(id) => Ok(Some(CommitSha(id.to_string()))),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(fail(e.message().to_owned(), PushFailure::Local)),
        };
    }
    let repo = Repository::open_bare(git_dir).map_err(|e| {
        fail(
            format!("cannot open {}: {}", git_dir.display(), e.message()),
            PushFailure::Local,
        )
    })?;
    let refused = std::cell::Cell::new(false);
    let mut ask = super::credentials(remote.username.clone(), remote.password.clone());
    let mut callbacks = RemoteCallbacks::new();
    callbacks.credentials(|url, user, allowed| {
        ask(url, user, allowed).inspect_err(|_| refused.set(true))
    });
    let mut anonymous = repo
        .remote_anonymous(&remote.url)
        .map_err(|e| fail(e.message().to_owned(), PushFailure::Local))?;
    let connected = anonymous.connect_auth(git2::Direction::Fetch, Some(callbacks), None);
    let connection = match connected {
        Ok(c) => c,
        Err(e) => {
            let failure = if refused.get() {
                PushFailure::Refused
            } else {
                classify(&e)
            };
            return Err(fail(e.message().to_owned(), failure));
        }
    };
    let heads = connection
        .list()
        .map_err(|e| fail(e.message().to_owned(), classify(&e)))?;
    Ok(heads
        .iter()
        .find(|h| h.name() == name)
        .map(|h| CommitSha(h.oid().to_string())))
}

/// The push into a repository with a work tree, as a fetch into it, under the same rule:
/// a branch holding exactly this commit is a success, one holding another is left alone.
fn fetch_into(
    source: &Repository,
    git_dir: &Path,
    target: &Repository,
    branch: &str,
) -> Result<(), (String, PushFailure)> {
    let local = |e: git2::Error| (e.message().to_owned(), PushFailure::Local);
    let name = format!("refs/heads/{branch}");
    let commit = source.refname_to_id(&name).map_err(local)?;
    match target.refname_to_id(&name) {
        Ok(there) if there == commit => return Ok(()),
        Ok(there) => {
            return Err((
                format!("the branch is at {there}, not {commit}"),
                PushFailure::Rejected,
            ));
        }
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => return Err(local(e)),
    }
    let source_path = git_dir.to_str().ok_or_else(|| {
        (
            "the workspace's path is not UTF-8".to_owned(),
            PushFailure::Local,
        )
    })?;
    let mut remote = target.remote_anonymous(source_path).map_err(local)?;
    let mut options = git2::FetchOptions::new();
    options.update_fetchhead(false);
    remote
        .fetch(&[format!("{name}:{name}")], Some(&mut options), None)
        .map_err(local)?;
    match target.refname_to_id(&name) {
        Ok(there) if there == commit => Ok(()),
        _ => Err((
            format!("the branch did not arrive at {commit}"),
            PushFailure::Local,
        )),
    }
}

/// libgit2 reports an HTTP failure as "unexpected http status code: 403": a 4xx is the
/// forge refusing, a 5xx the forge failing.
fn classify(e: &git2::Error) -> PushFailure {
    match e.code() {
        ErrorCode::Auth | ErrorCode::Certificate => return PushFailure::Refused,
        ErrorCode::NotFastForward | ErrorCode::Modified => return PushFailure::Rejected,
        _ => {}
    }
    let status = e
        .message()
        .rsplit("status code: ")
        .next()
        .filter(|_| e.message().contains("status code: "))
        .and_then(|s| s.trim().get(..3))
        .and_then(|s| s.parse::<u16>().ok());
    match (e.class(), status) {
        (_, Some(400..=499)) => PushFailure::Refused,
        (_, Some(_)) => PushFailure::Unreachable,
        (ErrorClass::Net | ErrorClass::Http | ErrorClass::Ssl | ErrorClass::Os, None) => {
            PushFailure::Unreachable
        }
        (_, None) => PushFailure::Local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_decide_the_kind_of_push_failure() {
        let http = |status: u16| {
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Http,
                format!("unexpected http status code: {status}"),
            )
        };
        assert_eq!(classify(&http(502)), PushFailure::Unreachable);
        assert_eq!(classify(&http(403)), PushFailure::Refused);
        let net = git2::Error::new(
            ErrorCode::GenericError,
            ErrorClass::Net,
            "failed to connect to 127.0.0.1: Connection refused",
        );
        assert_eq!(classify(&net), PushFailure::Unreachable);
        let ff = git2::Error::new(
            ErrorCode::NotFastForward,
            ErrorClass::Reference,
            "cannot push non-fastforwardable reference",
        );
        assert_eq!(classify(&ff), PushFailure::Rejected);
        assert!(PushFailure::Unreachable.is_retryable());
        assert!(!PushFailure::Refused.is_retryable());
        assert!(!PushFailure::Rejected.is_retryable());
    }
}
