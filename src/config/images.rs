//! The settings for environment images: the default image, registry credentials (the
//! Docker `config.json` that `docker login` writes), the registries that may answer plain
//! HTTP, and the size caps of the image cache and the setup cache.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use secrecy::SecretString;

use super::keys::{Raw, Setting};
use crate::ids::image::ImageRef;

/// What an operator gets without setting `ENVIRONMENT_CACHE_MAX`: room for a handful of
/// toolchain images.
const DEFAULT_CACHE_MAX: u64 = 20 << 30;
/// How long one pull may talk to registries (`ENVIRONMENT_PULL_TIMEOUT`): a few GiB over a
/// slow link, not a registry that sends one byte a minute.
const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Without `SETUP_CACHE_MAX`: room for the dependencies of a few repositories.
const DEFAULT_SETUP_CACHE_MAX: u64 = 10 << 30;

#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// The deployment's default environment (`ENVIRONMENT_IMAGE`).
    pub default_image: Option<ImageRef>,
    pub credentials: RegistryCredentials,
    /// `host` or `host:port` entries that may be reached over plain HTTP
    /// (`REGISTRY_INSECURE`), and may be at loopback or private addresses.
    pub insecure: Vec<String>,
    /// Registries that may be at loopback or private addresses, by name or literal
    /// (`REGISTRY_PRIVATE`); a loopback one is reached over plain HTTP, as Docker does.
    /// Any other registry an image names is reached only at public addresses.
    pub private: Vec<String>,
    /// Bytes the unpacked images may take (`ENVIRONMENT_CACHE_MAX`).
    pub cache_max: u64,
    /// Bytes the setup cache under `DATA_DIR/setup-cache` may take (`SETUP_CACHE_MAX`).
    pub setup_cache_max: u64,
    /// How long one pull's requests may take in all, however steadily a registry sends.
    pub pull_timeout: Duration,
}

impl Default for ImageSettings {
    fn default() -> Self {
        Self {
            default_image: None,
            credentials: RegistryCredentials::default(),
            insecure: Vec::new(),
            private: Vec::new(),
            cache_max: DEFAULT_CACHE_MAX,
            setup_cache_max: DEFAULT_SETUP_CACHE_MAX,
            pull_timeout: DEFAULT_PULL_TIMEOUT,
        }
    }
}

/// A user name and password per registry host or repository prefix, from a Docker
/// `config.json`. As containers-auth.json(5) allows, a key may name a repository prefix
/// (`ghcr.io/acme`, `ghcr.io/acme/ci`); the most specific key matching an image wins.
#[derive(Debug, Clone, Default)]
pub struct RegistryCredentials {
    entries: Vec<Credential>,
}

#[derive(Debug, Clone)]
struct Credential {
    /// The key as the file spells it, for messages.
    key: String,
    host: String,
    /// Repository path segments the key is limited to; none for a host-wide key.
    prefix: Vec<String>,
    user: String,
    password: SecretString,
}

impl RegistryCredentials {
    /// The credentials for an image: the entry of its registry whose repository prefix is
    /// the longest that the image's repository starts with, matched by whole segments
    /// (`ghcr.io/acme` is not used for `ghcr.io/acmeevil/x`); a host-wide entry last.
    pub fn for_image(&self, image: &ImageRef) -> Option<(&str, &SecretString)> {
        let host = normalise_host(image.registry());
        let repository: Vec<&str> = image.repository().split('/').collect();
        self.entries
            .iter()
            .filter(|e| {
                e.host == host
                    && e.prefix.len() <= repository.len()
                    && e.prefix.iter().zip(&repository).all(|(a, b)| a == b)
            })
            .max_by_key(|e| e.prefix.len())
            .map(|e| (e.user.as_str(), &e.password))
    }

    /// The entries keyed by a registry host alone, as warnings: each lends its
    /// credentials to whatever image any repository names on that host. For startup
    /// logs and `planwright doctor`.
    pub fn host_wide_warnings(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.prefix.is_empty())
            .map(|e| {
                format!(
                    "REGISTRY_AUTH's entry `{}` lends its credentials to any image a repository names on {}; key it by repository prefix (`{}/ORGANISATION`) so that only those images are pulled with them",
                    e.key, e.host, e.host
                )
            })
            .collect()
    }

    /// Reads the `auths` of a Docker `config.json`: each entry's `auth` (base64 of
    /// `user:password`) or its `username` and `password`.
    pub fn from_docker_config(text: &str, path: &Path) -> Result<Self> {
        #[derive(serde::Deserialize)]
        struct File {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            auth: Option<String>,
            username: Option<String>,
            password: Option<String>,
        }
        let file: File = serde_json::from_str(text).with_context(|| {
            format!(
                "Cannot read {} as a Docker config.json (a JSON object with `auths`)",
                path.display()
            )
        })?;
        let mut entries = Vec::new();
        for (host, entry) in file.auths {
            let (user, password) = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .ok()
                        .and_then(|bytes| String::from_utf8(bytes).ok());
                    match decoded.as_deref().and_then(|d| d.split_once(':')) {
                        Some((user, password)) => (user.to_owned(), password.to_owned()),
                        None => bail!(
                            "Cannot use {}: the `auth` of `{host}` is not base64 of `user:password`; run `docker login {host}` again or give `username` and `password`",
                            path.display()
                        ),
                    }
                }
                (_, Some(user), Some(password)) => (user, password),
                _ => bail!(
                    "Cannot use {}: the entry for `{host}` has neither `auth` nor `username` and `password` (credential helpers are not read; log in with `docker login` using a file store)",
                    path.display()
                ),
            };
            let (registry, prefix) = split_key(&host);
            entries.push(Credential {
                key: host,
                host: registry,
                prefix,
                user,
                password: SecretString::from(password),
            });
        }
        Ok(Self { entries })
    }
}

/// A key's registry and repository prefix. Keys with a scheme are Docker's URLs
/// (`https://index.docker.io/v1/`), whose path is an API version, never a repository.
fn split_key(key: &str) -> (String, Vec<String>) {
    let key = key.trim();
    let (rest, url) = match key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
    {
        Some(rest) => (rest, true),
        None => (key, false),
    };
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let host = normalise_host(parts.next().unwrap_or(""));
    let prefix = if url {
        Vec::new()
    } else {
        parts.map(str::to_owned).collect()
    };
    (host, prefix)
}

/// `index.docker.io`, `registry-1.docker.io` and `docker.io` are one registry.
fn normalise_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

/// `20G`, `512M`, `1T`, `1048576`: binary units, as `du -h` prints them.
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, shift) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 10),
        (i, 'M' | 'm') => (&text[..i], 20),
        (i, 'G' | 'g') => (&text[..i], 30),
        (i, 'T' | 't') => (&text[..i], 40),
        _ => (text, 0),
    };
    number.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

impl ImageSettings {
    /// The image settings checked, each error naming the key's source.
    pub(super) fn from_raw(raw: &Raw) -> Result<ImageSettings> {
        let default_image = match raw.environment_image.text() {
            None => None,
            Some(text) => Some(
                ImageRef::parse(text)
                    .with_context(|| format!("Cannot use {}", raw.environment_image.source()))?,
            ),
        };
        let credentials = match raw.registry_auth.text() {
            None => RegistryCredentials::default(),
            Some(path) => {
                let path = Path::new(path);
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!(
                        "Could not read the registry credentials named by {} (a Docker config.json, as `docker login` writes to ~/.docker/config.json)",
                        raw.registry_auth.source()
                    )
                })?;
                RegistryCredentials::from_docker_config(&text, path)?
            }
        };
        let insecure = registry_hosts(&raw.registry_insecure)?;
        let private = registry_hosts(&raw.registry_private)?;
        let size = |setting: &Setting, default: u64| match setting.text() {
            None => Ok(default),
            Some(text) => match parse_size(text) {
                Some(size) if size > 0 => Ok(size),
                _ => Err(anyhow::anyhow!(
                    "Cannot use {}: expected a size such as `20G`, `512M` or a number of bytes, got `{text}`",
                    setting.source()
                )),
            },
        };
        let cache_max = size(&raw.environment_cache_max, DEFAULT_CACHE_MAX)?;
        let setup_cache_max = size(&raw.setup_cache_max, DEFAULT_SETUP_CACHE_MAX)?;
        Ok(ImageSettings {
            default_image,
            credentials,
            insecure,
            private,
            cache_max,
            setup_cache_max,
            pull_timeout: raw
                .environment_pull_timeout
                .positive()?
                .map_or(DEFAULT_PULL_TIMEOUT, Duration::from_secs),
        })
    }
}

/// A comma-separated list of `host` or `host:port` entries, lower-cased.
fn registry_hosts(setting: &Setting) -> Result<Vec<String>> {
    let mut hosts = Vec::new();
    for host in setting.text().unwrap_or("").split(',') {
        let host = host.trim();
        if host.is_empty() {
            continue;
        }
        if !crate::ids::image::is_registry_host(host) {
            bail!(
                "Cannot use {}: `{host}` is not a registry host (give `host` or `host:port`, comma-separated, without `http://`)",
                setting.source()
            );
        }
        hosts.push(host.to_ascii_lowercase());
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("20G"), Some(20 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    fn user_for<'c>(creds: &'c RegistryCredentials, image: &str) -> Option<&'c str> {
        creds
            .for_image(&ImageRef::parse(image).unwrap())
            .map(|(user, _)| user)
    }

    #[test]
    fn docker_config_entries_are_found_by_host() {
        let text = r#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "alice", "password": "pw"}
        }, "credsStore": "desktop"}"#;
        let creds = RegistryCredentials::from_docker_config(text, Path::new("c.json")).unwrap();
        let (user, password) = creds
            .for_image(&ImageRef::parse("debian:12").unwrap())
            .unwrap();
        assert_eq!((user, password.expose_secret()), ("hub", "secret"));
        assert_eq!(user_for(&creds, "127.0.0.1:5000/any/thing"), Some("alice"));
        assert_eq!(user_for(&creds, "ghcr.io/acme/ci"), None);
        assert_eq!(user_for(&creds, "127.0.0.1:5001/any/thing"), None);
    }

    #[test]
    fn repository_prefixes_match_whole_segments_and_the_most_specific_wins() {
        let entry = |user: &str| serde_json::json!({"username": user, "password": "p"});
        let text = serde_json::json!({"auths": {
            "ghcr.io": entry("host"),
            "ghcr.io/acme": entry("acme"),
            "ghcr.io/acme/ci": entry("acme-ci"),
            "quay.io/team/": entry("team"),
            "docker.io/library": entry("official"),
            "https://registry.example/v2/": entry("url"),
        }})
        .to_string();
        let creds = RegistryCredentials::from_docker_config(&text, Path::new("c.json")).unwrap();
        for (image, user) in [
            ("ghcr.io/acme/ci:1", Some("acme-ci")),
            ("ghcr.io/acme/ci/sub:1", Some("acme-ci")),
            ("ghcr.io/acme/cd:1", Some("acme")),
            ("ghcr.io/acme/cidr:1", Some("acme")),
            ("ghcr.io/acmeevil/ci:1", Some("host")),
            ("ghcr.io/other/x:1", Some("host")),
            ("quay.io/team/x:1", Some("team")),
            ("quay.io/teams/x:1", None),
            ("quay.io/team:1", Some("team")),
            ("debian:12", Some("official")),
            ("someone/image:1", None),
            ("registry.example/v2/x:1", Some("url")),
            ("registry.example/any:1", Some("url")),
        ] {
            assert_eq!(user_for(&creds, image), user, "{image}");
        }
        let warnings = creds.host_wide_warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains(
                "`ghcr.io` lends its credentials to any image a repository names on ghcr.io; key it by repository prefix"
            ),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("`https://registry.example/v2/`"),
            "{warnings:?}"
        );
    }

    #[test]
    fn bad_docker_configs_are_explained() {
        let path = Path::new("c.json");
        let error = RegistryCredentials::from_docker_config("not json", path).unwrap_err();
        assert!(
            format!("{error:#}").contains("Docker config.json"),
            "{error:#}"
        );
        let error =
            RegistryCredentials::from_docker_config(r#"{"auths":{"h":{"auth":"!!"}}}"#, path)
                .unwrap_err();
        assert!(error.to_string().contains("not base64"), "{error}");
        let error =
            RegistryCredentials::from_docker_config(r#"{"auths":{"h":{}}}"#, path).unwrap_err();
        assert!(error.to_string().contains("credential helpers"), "{error}");
    }
}
