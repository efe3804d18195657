//! Reading a registry's `WWW-Authenticate` challenge, and the HTTP basic answer with the
//! configured credentials. The bearer-token dance Docker Hub and GHCR use (ask the
//! challenge's realm for a pull token) is the registry client's, which makes the request.

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};

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
