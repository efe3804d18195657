//! `/metrics` is for whoever holds an operator token: `Authorization: Bearer <token>`, or
//! HTTP Basic with the token as the password, which scrapers are often set up to send.

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use secrecy::{ExposeSecret as _, SecretString};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// Whether the request presents one of `accepted`. Digests are compared, in constant time,
/// so that neither a token's content nor its length shows in the timing.
pub fn authorized<'a>(
    headers: &HeaderMap,
    accepted: impl IntoIterator<Item = &'a SecretString>,
) -> bool {
    let Some(presented) = presented(headers) else {
        return false;
    };
    let presented = Sha256::digest(presented.as_bytes());
    let mut matched = subtle::Choice::from(0);
    for token in accepted {
        matched |= Sha256::digest(token.expose_secret().as_bytes()).ct_eq(&presented);
    }
    matched.into()
}

fn presented(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, credentials) = value.split_once(' ')?;
    let credentials = credentials.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(credentials.to_owned()).filter(|c| !c.is_empty());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (_user, password) = decoded.split_once(':')?;
        return Some(password.to_owned()).filter(|p| !p.is_empty());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_token_is_taken_as_bearer_or_as_the_basic_password() {
        let token = SecretString::from("0123456789abcdef-token");
        let basic = base64::engine::general_purpose::STANDARD.encode("any:0123456789abcdef-token");
        assert!(authorized(&with("Bearer 0123456789abcdef-token"), [&token]));
        assert!(authorized(
            &with("bearer  0123456789abcdef-token "),
            [&token]
        ));
        assert!(authorized(&with(&format!("Basic {basic}")), [&token]));
        for refused in [
            "Bearer 0123456789abcdef-toke",
            "Bearer ",
            "0123456789abcdef-token",
            "Token 0123456789abcdef-token",
            "Basic MDEyMzQ1Njc4OWFiY2RlZi10b2tlbg==",
        ] {
            assert!(!authorized(&with(refused), [&token]), "{refused}");
        }
        assert!(!authorized(&HeaderMap::new(), [&token]));
        assert!(!authorized(&with("Bearer 0123456789abcdef-token"), []));
    }
}
