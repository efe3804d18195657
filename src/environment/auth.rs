//! Answering a registry's `WWW-Authenticate` challenge: HTTP basic with the configured
//! credentials, or the bearer-token dance Docker Hub and GHCR use (ask the challenge's
//! realm for a pull token, with the credentials when there are any).

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};

use super::PullError;
use super::registry::Remote;

/// A parsed `WWW-Authenticate` header.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// `Basic realm="…"` or `Bearer realm="…",service="…",scope="…"`; parameter values
    /// may be quoted (and then hold commas) or bare tokens.
    pub(super) fn parse(header: &str) -> Option<Challenge> {
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = parse_params(rest);
        let get = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        Some(Challenge::Bearer {
            realm: get("realm")?,
            service: get("service"),
            scope: get("scope"),
        })
    }
}

fn parse_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text.trim_start();
    while let Some((name, after)) = rest.split_once('=') {
        let name = name.trim().trim_start_matches(',').trim().to_owned();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        params.push((name, value));
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    params
}

/// The `Authorization` value for basic credentials.
pub(super) fn basic(user: &str, password: &SecretString) -> SecretString {
    let pair = format!("{user}:{}", password.expose_secret());
    SecretString::from(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}

/// Asks the realm for a token to pull `remote`'s repository.
pub(super) async fn bearer_token(
    remote: &Remote<'_>,
    realm: &str,
    service: Option<&str>,
    scope: Option<&str>,
) -> Result<SecretString, PullError> {
    #[derive(serde::Deserialize)]
    struct Token {
        token: Option<String>,
        access_token: Option<String>,
    }
    let mut url = remote.checked_url(realm, "token service")?;
    let default_scope = format!("repository:{}:pull", remote.image().repository());
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("scope", scope.unwrap_or(&default_scope));
        if let Some(service) = service {
            query.append_pair("service", service);
        }
    }
    // The realm is named by the image's own registry (challenges from anywhere else are
    // refused before this): it may well be another host, as GitLab's is.
    let mut request = remote.http().get(url);
    if let Some((user, password)) = remote.credentials() {
        request = request.header(
            reqwest::header::AUTHORIZATION,
            basic(user, password).expose_secret(),
        );
    }
    let response = remote.in_time(realm, request.send()).await?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let answer = super::registry::answer(response, remote.deadline()).await;
        return Err(remote.refused(&format!("its token service {realm} answered {answer}")));
    }
    let response = remote.check_status(response, realm).await?;
    let body = super::registry::read_limited(response, 1 << 20, realm, remote).await?;
    let token: Token = serde_json::from_slice(&body).map_err(|e| {
        remote.protocol(&format!(
            "its token service {realm} sent no token ({e}); check that the registry's auth service is reachable"
        ))
    })?;
    match token.token.or(token.access_token) {
        Some(token) if !token.is_empty() => Ok(SecretString::from(format!("Bearer {token}"))),
        _ => Err(remote.protocol(&format!(
            "its token service {realm} answered without a token"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/debian:pull".into()),
            })
        );
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://ghcr.io/token", scope="repository:a/b:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: "https://ghcr.io/token".into(),
                service: None,
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        assert_eq!(
            Challenge::parse("bearer realm=http://127.0.0.1:1/t,service=x"),
            Some(Challenge::Bearer {
                realm: "http://127.0.0.1:1/t".into(),
                service: Some("x".into()),
                scope: None,
            })
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(Challenge::parse("Bearer service=x"), None);
        assert_eq!(Challenge::parse("Negotiate"), None);
    }
}
