//! OCI image references (`name[:tag][@sha256:…]`) with Docker's defaults, and content
//! digests. Here rather than beside the registry client because the settings check
//! `ENVIRONMENT_IMAGE` when they load, and settings may use only identifiers.

use std::fmt;
use std::str::FromStr;

/// Docker's registry when a reference names none; its API lives on another host.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// The distribution spec's limit on a repository name with its registry.
const MAX_NAME: usize = 255;
const MAX_TAG: usize = 128;

/// A content digest; only sha256, the one every registry and image uses, is accepted, so
/// that every blob can be checked.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl TryFrom<String> for Digest {
    type Error = InvalidReference;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> String {
        digest.0
    }
}

impl Digest {
    /// `sha256:` and 64 lower-case hex digits.
    pub fn parse(text: &str) -> Result<Self, InvalidReference> {
        let fail = |reason: &str| InvalidReference {
            input: text.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(fail("a digest is `sha256:` followed by 64 hex digits"));
        };
        if algorithm != "sha256" {
            return Err(fail(&format!(
                "the digest algorithm `{algorithm}` is not supported; only sha256 digests can be verified"
            )));
        }
        let hex_ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex_ok {
            return Err(fail("a sha256 digest has 64 lower-case hex digits"));
        }
        Ok(Self(text.to_owned()))
    }

    /// The digest of these bytes.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self::from_sha256(sha2::Sha256::digest(bytes).into())
    }

    pub fn from_sha256(hash: [u8; 32]) -> Self {
        Self(format!("sha256:{}", hex::encode(hash)))
    }

    /// The 64 hex digits, fit for a file name.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A parsed image reference. At least one of tag and digest is set (`latest` when the
/// text names neither); with both, the digest is what is pulled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Cannot use the image reference `{input}`: {reason} (expected `[registry/]name[:tag][@sha256:…]`, e.g. `ghcr.io/acme/ci:1.4` or `debian:12`)"
)]
pub struct InvalidReference {
    input: String,
    reason: String,
}

impl ImageRef {
    pub fn parse(text: &str) -> Result<Self, InvalidReference> {
        let input = text.trim();
        let fail = |reason: &str| InvalidReference {
            input: text.to_owned(),
            reason: reason.to_owned(),
        };
        if input.is_empty() {
            return Err(fail("it is empty"));
        }
        let (name_tag, digest) = match input.rsplit_once('@') {
            Some((rest, digest)) => (
                rest,
                Some(Digest::parse(digest).map_err(|e| fail(&e.reason))?),
            ),
            None => (input, None),
        };
        // A colon after the last slash starts the tag; one before it is a registry's port.
        let (name, tag) = match name_tag.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
            _ => (name_tag, None),
        };
        if let Some(tag) = tag {
            check_tag(tag).map_err(|reason| fail(&reason))?;
        }
        let (registry, repository) = split_registry(name);
        check_registry(registry).map_err(|reason| fail(&reason))?;
        let repository = match (registry, repository.contains('/')) {
            (DOCKER_HUB, false) => format!("library/{repository}"),
            _ => repository.to_owned(),
        };
        check_repository(&repository).map_err(|reason| fail(&reason))?;
        if registry.len() + 1 + repository.len() > MAX_NAME {
            return Err(fail(&format!(
                "the name is longer than {MAX_NAME} characters"
            )));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_owned()),
            (tag, _) => tag.map(str::to_owned),
        };
        Ok(Self {
            registry: registry.to_owned(),
            repository,
            tag,
            digest,
        })
    }

    /// The registry as the reference names it (`docker.io`, `ghcr.io`, `127.0.0.1:5000`).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The host and port its API answers on (Docker Hub's is not `docker.io`).
    pub fn api_host(&self) -> &str {
        match self.registry.as_str() {
            DOCKER_HUB => DOCKER_HUB_API,
            other => other,
        }
    }

    /// The path inside the registry, `library/` included for Docker Hub's official images.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// What the manifest is asked for by: the digest when pinned, else the tag.
    pub fn manifest_reference(&self) -> &str {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => digest.as_str(),
            (None, Some(tag)) => tag,
            (None, None) => "latest",
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for ImageRef {
    type Err = InvalidReference;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Whether `text` is a registry as a reference may name one: `host`, `host:port`,
/// `[v6]:port`.
pub fn is_registry_host(text: &str) -> bool {
    check_registry(text).is_ok()
}

/// As Docker decides: the first component is a registry when it has a dot or a port, or
/// is `localhost`; otherwise the name is on Docker Hub.
fn split_registry(name: &str) -> (&str, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            match first {
                "index.docker.io" | "registry-1.docker.io" => (DOCKER_HUB, rest),
                _ => (first, rest),
            }
        }
        _ => (DOCKER_HUB, name),
    }
}

fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !registry.ends_with(']') => (host, Some(port)),
        _ => (registry, None),
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("the registry's port `{port}` is not a number"));
    }
    let bracketed_ipv6 = host.starts_with('[')
        && host.ends_with(']')
        && host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok();
    let hostname = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if bracketed_ipv6 || hostname {
        Ok(())
    } else {
        Err(format!("`{registry}` is not a registry host name"))
    }
}

/// Path components of lower-case letters and digits, joined by `.`, `_`, `__` or dashes.
fn check_repository(repository: &str) -> Result<(), String> {
    for component in repository.split('/') {
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let bytes = component.as_bytes();
        let ok = !bytes.is_empty()
            && alnum(bytes[0])
            && alnum(bytes[bytes.len() - 1])
            && bytes
                .iter()
                .all(|&b| alnum(b) || matches!(b, b'.' | b'_' | b'-'))
            && !component.contains("..")
            && !component.contains("___")
            && !component.contains("._")
            && !component.contains("_.");
        if !ok {
            let hint = if component.bytes().any(|b| b.is_ascii_uppercase()) {
                " (repository names are lower-case)"
            } else {
                ""
            };
            return Err(format!(
                "`{component}` is not a valid repository path component{hint}"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let bytes = tag.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_TAG
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the tag `{tag}` is not valid (letters, digits, `_`, `.` and `-`, at most {MAX_TAG}, not starting with `.` or `-`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parts(text: &str) -> (String, String, Option<String>, Option<String>) {
        let r = ImageRef::parse(text).unwrap();
        (
            r.registry().to_owned(),
            r.repository().to_owned(),
            r.tag().map(str::to_owned),
            r.digest().map(|d| d.to_string()),
        )
    }

    fn s(text: &str) -> String {
        text.to_owned()
    }

    #[test]
    fn docker_defaults_apply() {
        assert_eq!(
            parts("busybox"),
            (
                s("docker.io"),
                s("library/busybox"),
                Some(s("latest")),
                None
            )
        );
        assert_eq!(
            parts("acme/tool:1.2"),
            (s("docker.io"), s("acme/tool"), Some(s("1.2")), None)
        );
        assert_eq!(
            parts("index.docker.io/library/debian:12"),
            (s("docker.io"), s("library/debian"), Some(s("12")), None)
        );
        let hub = ImageRef::parse("debian").unwrap();
        assert_eq!(hub.api_host(), "registry-1.docker.io");
        assert_eq!(hub.to_string(), "docker.io/library/debian:latest");
    }

    #[test]
    fn registries_with_ports_and_digests() {
        let pinned = format!("127.0.0.1:5000/x/y@sha256:{HEX}");
        assert_eq!(
            parts(&pinned),
            (
                s("127.0.0.1:5000"),
                s("x/y"),
                None,
                Some(format!("sha256:{HEX}"))
            )
        );
        let r = ImageRef::parse(&pinned).unwrap();
        assert_eq!(r.manifest_reference(), format!("sha256:{HEX}"));
        assert_eq!(r.api_host(), "127.0.0.1:5000");
        assert_eq!(
            parts(&format!("ghcr.io/acme/ci:1.4@sha256:{HEX}")),
            (
                s("ghcr.io"),
                s("acme/ci"),
                Some(s("1.4")),
                Some(format!("sha256:{HEX}"))
            )
        );
        assert_eq!(
            parts("localhost/tool"),
            (s("localhost"), s("tool"), Some(s("latest")), None)
        );
        assert_eq!(
            parts("[::1]:5000/tool:v1"),
            (s("[::1]:5000"), s("tool"), Some(s("v1")), None)
        );
        assert_eq!(
            parts("registry:5000/x/y"),
            (s("registry:5000"), s("x/y"), Some(s("latest")), None)
        );
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("Busybox", "lower-case"),
            ("busybox:", "tag"),
            ("busybox:-x", "tag"),
            ("busybox@sha256:abc", "64"),
            (&format!("busybox@md5:{HEX}") as &str, "md5"),
            ("host:port/x", "port"),
            ("a//b", "component"),
            ("ghcr.io/acme/ci/", "component"),
            ("bad_host.io/x", "registry host"),
        ];
        for (input, needle) in cases {
            let error = ImageRef::parse(input).unwrap_err().to_string();
            assert!(error.contains(needle), "{input:?}: {error}");
            assert!(error.contains("expected `[registry/]name"), "{error}");
        }
        let long = format!("ghcr.io/{}", "a".repeat(300));
        assert!(
            ImageRef::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("longer")
        );
    }

    #[test]
    fn digests_are_sha256_only() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        assert_eq!(d.hex().len(), 64);
        assert!(Digest::parse(&format!("sha512:{HEX}")).is_err());
        assert!(Digest::parse(&format!("sha256:{}", HEX.to_uppercase())).is_err());
    }
}
