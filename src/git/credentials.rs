//! How the forge's credentials reach git: through a credential helper reading this one
//! child's environment for a fetch, and through libgit2's callback for a push; never in
//! an argument, a URL or a config file.

use std::path::Path;

use git2::{Cred, CredentialType};
use secrecy::{ExposeSecret, SecretString};

use super::command::git_command;
use crate::forge::GitRemote;

/// The environment variables the credential helper reads.
const USER_VAR: &str = "PLANWRIGHT_GIT_USER";

const PASSWORD_VAR: &str = "PLANWRIGHT_GIT_PASSWORD";

/// Answers git's `get` with the user and token from the environment, and ignores `store`
/// and `erase`: git asks once, and a refused answer fails the fetch.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get && printf 'username=%s\\npassword=%s\\n' \"$PLANWRIGHT_GIT_USER\" \"$PLANWRIGHT_GIT_PASSWORD\"; }; f";

/// `git` on `git_dir` as every fetch into a mirror runs it: the remote's credentials
/// offered through the helper, which answers only for the remote's own scheme, host and
/// port (not for a host a redirect leads to); no background gc; every fetch kept as one
/// pack; a forge that stops sending given up on.
pub(super) fn git_with_credentials(git_dir: &Path, remote: &GitRemote) -> std::process::Command {
    let mut command = git_command(git_dir);
    command.args(["-c", "credential.helper="]);
    if let Ok(url) = reqwest::Url::parse(&remote.url)
        && url.has_host()
    {
        command.arg("-c").arg(format!(
            "credential.{}.helper={CREDENTIAL_HELPER}",
            url.origin().ascii_serialization()
        ));
    }
    command
        .args([
            // A fetch must not start a background gc racing the mirror's lock.
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            // Every fetch kept as one pack, however small: thousands of loose objects
            // would slow every later read until the next gc.
            "-c",
            "fetch.unpackLimit=1",
            // A forge that stops sending is given up on rather than waited for forever.
            "-c",
            "http.lowSpeedLimit=1",
            "-c",
            "http.lowSpeedTime=300",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env(USER_VAR, &remote.username)
        .env(PASSWORD_VAR, remote.password.expose_secret());
    command
}

/// The credential callback for one push. libgit2 asks again each time the forge
/// refuses, forever; the second question means the first answer was refused, so it fails
/// then with an error naming the user.
pub fn credentials(
    username: String,
    password: SecretString,
) -> impl FnMut(&str, Option<&str>, CredentialType) -> Result<Cred, git2::Error> {
    let mut asked = 0u32;
    move |url, _from_url, allowed| {
        asked += 1;
        if asked > 1 {
            return Err(git2::Error::from_str(&format!(
                "the credentials of `{username}` were refused by {url}"
            )));
        }
        if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            return Err(git2::Error::from_str(&format!(
                "{url} asks for credentials planwright does not have ({allowed:?}); it offers a user name and token"
            )));
        }
        Cred::userpass_plaintext(&username, password.expose_secret())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_offered_once_then_refused() {
        let mut ask = credentials("x-access-token".into(), SecretString::from("s3cret"));
        let first = ask(
            "https://forge.example/o/r.git",
            None,
            CredentialType::USER_PASS_PLAINTEXT,
        );
        assert!(first.is_ok());
        let second = ask(
            "https://forge.example/o/r.git",
            None,
            CredentialType::USER_PASS_PLAINTEXT,
        )
        .err()
        .unwrap();
        assert!(second.message().contains("`x-access-token` were refused"));
        assert!(!second.message().contains("s3cret"));
    }

    #[test]
    fn credentials_refuse_kinds_they_cannot_give() {
        let mut ask = credentials("u".into(), SecretString::from("p"));
        let err = ask("ssh://h/r", None, CredentialType::SSH_KEY)
            .err()
            .unwrap();
        assert!(
            err.message().contains("asks for credentials"),
            "{}",
            err.message()
        );
    }
}
