//! The settings for environment images: the default image, registry credentials (the
//! Docker `config.json` that `docker login` writes), the registries that may answer plain
//! HTTP, and the size caps of the image cache and the setup cache.

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use secrecy::SecretString;

use crate::ids::image::ImageRef;

/// What an operator gets without setting `ENVIRONMENT_CACHE_MAX`: room for a handful of
/// toolchain images.
const DEFAULT_CACHE_MAX: u64 = 20 << 30;

/// Without `SETUP_CACHE_MAX`: room for the dependencies of a few repositories.
const DEFAULT_SETUP_CACHE_MAX: u64 = 10 << 30;

#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// The deployment's default environment (`ENVIRONMENT_IMAGE`).
    pub default_image: Option<ImageRef>,
    pub credentials: RegistryCredentials,
    /// `host` or `host:port` entries that may be reached over plain HTTP
    /// (`REGISTRY_INSECURE`), beside loopback registries, which always may.
    pub insecure: Vec<String>,
    /// Bytes the unpacked images may take (`ENVIRONMENT_CACHE_MAX`).
    pub cache_max: u64,
    /// Bytes the setup cache under `DATA_DIR/setup-cache` may take (`SETUP_CACHE_MAX`).
    pub setup_cache_max: u64,
}

impl Default for ImageSettings {
    fn default() -> Self {
        Self {
            default_image: None,
            credentials: RegistryCredentials::default(),
            insecure: Vec::new(),
            cache_max: DEFAULT_CACHE_MAX,
            setup_cache_max: DEFAULT_SETUP_CACHE_MAX,
        }
    }
}

/// A user name and password per registry host, from a Docker `config.json`.
#[derive(Debug, Clone, Default)]
pub struct RegistryCredentials {
    entries: Vec<(String, String, SecretString)>,
}

impl RegistryCredentials {
    /// The credentials for a registry as a reference names it (`ghcr.io`,
    /// `127.0.0.1:5000`, `docker.io`).
    pub fn for_registry(&self, registry: &str) -> Option<(&str, &SecretString)> {
        let wanted = normalise_host(registry);
        self.entries
            .iter()
            .find(|(host, _, _)| *host == wanted)
            .map(|(_, user, password)| (user.as_str(), password))
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
            entries.push((normalise_host(&host), user, SecretString::from(password)));
        }
        Ok(Self { entries })
    }
}

/// `https://index.docker.io/v1/` and `docker.io` are one registry; keys may be URLs.
fn normalise_host(key: &str) -> String {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

/// `20G`, `512M`, `1T`, `1048576`: binary units, as `du -h` prints them.
fn parse_size(text: &str) -> Option<u64> {
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

impl super::Raw {
    pub(super) fn images(&self) -> Result<ImageSettings> {
        let default_image = match self.text("environment_image") {
            None => None,
            Some(text) => Some(
                ImageRef::parse(text)
                    .with_context(|| format!("Cannot use {}", self.source("environment_image")))?,
            ),
        };
        let credentials = match self.text("registry_auth") {
            None => RegistryCredentials::default(),
            Some(path) => {
                let path = Path::new(path);
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!(
                        "Could not read the registry credentials named by {} (a Docker config.json, as `docker login` writes to ~/.docker/config.json)",
                        self.source("registry_auth")
                    )
                })?;
                RegistryCredentials::from_docker_config(&text, path)?
            }
        };
        let mut insecure = Vec::new();
        for host in self.text("registry_insecure").unwrap_or("").split(',') {
            let host = host.trim();
            if host.is_empty() {
                continue;
            }
            let valid = crate::ids::image::is_registry_host(host);
            if !valid {
                bail!(
                    "Cannot use {}: `{host}` is not a registry host (give `host` or `host:port`, comma-separated, without `http://`)",
                    self.source("registry_insecure")
                );
            }
            insecure.push(host.to_ascii_lowercase());
        }
        let size = |key: &str, default: u64| match self.text(key) {
            None => Ok(default),
            Some(text) => match parse_size(text) {
                Some(size) if size > 0 => Ok(size),
                _ => Err(anyhow::anyhow!(
                    "Cannot use {}: expected a size such as `20G`, `512M` or a number of bytes, got `{text}`",
                    self.source(key)
                )),
            },
        };
        let cache_max = size("environment_cache_max", DEFAULT_CACHE_MAX)?;
        let setup_cache_max = size("setup_cache_max", DEFAULT_SETUP_CACHE_MAX)?;
        Ok(ImageSettings {
            default_image,
            credentials,
            insecure,
            cache_max,
            setup_cache_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn load(vars: &[(&str, &str)]) -> Result<super::super::Settings> {
        let env: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (format!("PLANWRIGHT_{k}"), (*v).to_owned()))
            .chain([(
                "PLANWRIGHT_DATA_DIR".to_owned(),
                "/nonexistent-planwright".to_owned(),
            )])
            .collect();
        super::super::Settings::from_sources(None, &env)
    }

    #[test]
    fn settings_check_every_image_key_when_they_load() {
        let dir = tempfile::tempdir().unwrap();
        let auth = dir.path().join("config.json");
        std::fs::write(
            &auth,
            r#"{"auths":{"ghcr.io":{"username":"u","password":"p"}}}"#,
        )
        .unwrap();
        let auth_path = auth.display().to_string();
        let settings = load(&[
            ("ENVIRONMENT_IMAGE", "ghcr.io/acme/ci:1.4"),
            ("REGISTRY_AUTH", &auth_path),
            ("REGISTRY_INSECURE", "registry.lan:5000, lab"),
            ("ENVIRONMENT_CACHE_MAX", "512M"),
            ("SETUP_CACHE_MAX", "2G"),
        ])
        .unwrap();
        let images = &settings.images;
        assert_eq!(
            images.default_image.as_ref().unwrap().to_string(),
            "ghcr.io/acme/ci:1.4"
        );
        assert!(images.credentials.for_registry("ghcr.io").is_some());
        assert_eq!(images.insecure, ["registry.lan:5000", "lab"]);
        assert_eq!(images.cache_max, 512 << 20);
        assert_eq!(images.setup_cache_max, 2 << 30);
        assert!(
            settings.secret_files.contains(&auth),
            "hidden from sandboxes"
        );
        assert_eq!(load(&[]).unwrap().images.cache_max, 20 << 30);
        assert_eq!(load(&[]).unwrap().images.setup_cache_max, 10 << 30);

        let missing = dir.path().join("absent.json").display().to_string();
        for (key, value, needle) in [
            (
                "ENVIRONMENT_IMAGE",
                "Not An Image",
                "PLANWRIGHT_ENVIRONMENT_IMAGE",
            ),
            ("REGISTRY_INSECURE", "http://lab", "without `http://`"),
            ("ENVIRONMENT_CACHE_MAX", "big", "such as `20G`"),
            ("ENVIRONMENT_CACHE_MAX", "0", "such as `20G`"),
            ("SETUP_CACHE_MAX", "ten", "PLANWRIGHT_SETUP_CACHE_MAX"),
            ("REGISTRY_AUTH", &missing, "docker login"),
        ] {
            let error = format!("{:#}", load(&[(key, value)]).unwrap_err());
            assert!(error.contains(needle), "{key}={value}: {error}");
        }
    }

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

    #[test]
    fn docker_config_entries_are_found_by_host() {
        let text = r#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "alice", "password": "pw"}
        }, "credsStore": "desktop"}"#;
        let creds = RegistryCredentials::from_docker_config(text, Path::new("c.json")).unwrap();
        let (user, password) = creds.for_registry("docker.io").unwrap();
        assert_eq!((user, password.expose_secret()), ("hub", "secret"));
        let (user, _) = creds.for_registry("127.0.0.1:5000").unwrap();
        assert_eq!(user, "alice");
        assert!(creds.for_registry("ghcr.io").is_none());
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
