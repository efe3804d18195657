//! A pull-only client for the OCI distribution API: manifests and image indexes (Docker v2
//! and OCI media types), the host's platform picked from an index, blobs streamed to disk
//! and checked against their sha256 digest before anything uses them.
//!
//! Not the `oci-client` crate, although it uses the same reqwest 0.13: it brings `oci-spec`
//! (derive_builder, getset, strum) and a second sha2, and its one error type does not tell a
//! registry that timed out from one that refused us. This client is the few requests a pull
//! needs, on the crate's one HTTP stack, with every answer sorted into a [`PullErrorKind`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::dns::Resolve;
use reqwest::{Response, StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::Digest as _;
use tokio::io::AsyncWriteExt as _;

use super::auth::{self, Challenge};
use super::image::RunConfig;
use super::pull_error::{PullError, PullErrorKind};
use super::reach::{self, Reach};
use super::unpack::Compression;
use crate::config::images::ImageSettings;
use crate::ids::image::{Digest, ImageRef};

const MANIFEST_TYPES: &[&str] = &[OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_INDEX];
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_INDEX: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Layers one image may have: Docker builds stay far below, and each layer costs a
/// download and an unpack.
const MAX_LAYERS: usize = 128;
/// Manifests and configs are small; a registry sending more is not a registry.
const MAX_DOCUMENT: usize = 8 << 20;
/// Waiting for a connection, and for each read of a body: a big layer may take long in
/// total, but a registry that stops sending for this long is not coming back.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What decides how to reach each registry; each pull gets its own HTTP client, whose
/// name lookup and redirects follow that pull's [`Reach`].
pub(super) struct Client {
    insecure: Vec<String>,
    private: Vec<String>,
    credentials: crate::config::images::RegistryCredentials,
    lookup: Option<Arc<dyn Resolve>>,
    pull_timeout: Duration,
}

impl Client {
    pub(super) fn new(settings: &ImageSettings) -> Self {
        Self {
            insecure: settings.insecure.clone(),
            private: settings.private.clone(),
            credentials: settings.credentials.clone(),
            lookup: None,
            pull_timeout: settings.pull_timeout,
        }
    }

    /// Names are looked up by `lookup` instead of the system resolver; what it answers is
    /// checked all the same.
    pub(super) fn set_lookup(&mut self, lookup: Arc<dyn Resolve>) {
        self.lookup = Some(lookup);
    }

    /// A connection to the image's repository, authenticated on first need.
    pub(super) fn remote<'a>(&'a self, image: &'a ImageRef) -> Result<Remote<'a>, PullError> {
        let host = image.api_host();
        let reach = Arc::new(Reach::new(host, &self.insecure, &self.private));
        let scheme = if reach.own_http() { "http" } else { "https" };
        let policy = reach.clone();
        // A registry may send blobs elsewhere (a CDN), but not inward and not down to plain
        // HTTP; names it redirects to are checked when they are resolved.
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let target = host_port(attempt.url());
            if attempt.previous().len() >= 10 {
                return attempt.error("it redirected more than 10 times");
            }
            let plain = attempt.url().scheme() != "https";
            if plain && !(attempt.url().scheme() == "http" && policy.plain_http(&target)) {
                return attempt.error(PlainRedirect(target));
            }
            match policy.check_literal(&target) {
                Ok(()) => attempt.follow(),
                Err(blocked) => attempt.error(blocked),
            }
        });
        // The address rules cannot hold through a proxy, which resolves names itself.
        let http = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(reach::Guarded {
                reach: reach.clone(),
                lookup: self.lookup.clone(),
            })
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .redirect(redirects)
            .user_agent(concat!("planwright/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                PullError::new(
                    PullErrorKind::Local,
                    image,
                    format!("could not set up an HTTP client for the registry: {e}"),
                )
            })?;
        Ok(Remote {
            client: self,
            http,
            reach,
            deadline: tokio::time::Instant::now() + self.pull_timeout,
            image,
            base: format!("{scheme}://{host}/v2/{}", image.repository()),
            authorization: Mutex::new(None),
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("a redirect to plain HTTP at {0}; {PLAIN_HTTP_RULE}")]
struct PlainRedirect(String);

const PLAIN_HTTP_RULE: &str = "planwright uses plain HTTP only to the image's own registry, when the planwright operator lists it in REGISTRY_INSECURE (or lists a loopback registry in REGISTRY_PRIVATE)";

fn host_port(url: &Url) -> String {
    // IPv6 hosts come bracketed, as a reference spells them.
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// A file removed when this is dropped, unless it was taken back.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One image's repository on its registry, with the authorization it has won so far.
pub(super) struct Remote<'a> {
    client: &'a Client,
    http: reqwest::Client,
    reach: Arc<Reach>,
    /// When every request of the pull must be done: a registry sending one byte per read
    /// timeout would otherwise hold the image's lock for as long as it likes.
    deadline: tokio::time::Instant,
    image: &'a ImageRef,
    base: String,
    authorization: Mutex<Option<SecretString>>,
}

/// What a reference resolves to: the image for this host's platform.
#[derive(Debug)]
pub(super) struct Resolved {
    pub digest: Digest,
    pub layers: Vec<Layer>,
    pub config: RunConfig,
    /// The uncompressed digest of each layer, from the config.
    pub diff_ids: Vec<Digest>,
    pub manifest: Vec<u8>,
    pub config_blob: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub digest: Digest,
    pub size: u64,
    pub compression: Compression,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    config: Option<Descriptor>,
    layers: Option<Vec<Descriptor>>,
    manifests: Option<Vec<Descriptor>>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    platform: Option<Platform>,
}

#[derive(Deserialize, Clone)]
struct Platform {
    architecture: String,
    os: String,
    variant: Option<String>,
}

impl Platform {
    fn name(&self) -> String {
        match &self.variant {
            Some(variant) => format!("{}/{}/{variant}", self.os, self.architecture),
            None => format!("{}/{}", self.os, self.architecture),
        }
    }
}

#[derive(Deserialize)]
struct ConfigDocument {
    #[serde(default)]
    config: Option<RunConfig>,
    rootfs: Option<RootFs>,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// The Go architecture name of this host, as image platforms spell it.
pub(super) fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        other => other,
    }
}

impl<'a> Remote<'a> {
    pub(super) fn image(&self) -> &ImageRef {
        self.image
    }

    pub(super) fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    pub(super) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    fn on_own_registry(&self, url: &Url) -> bool {
        host_port(url).eq_ignore_ascii_case(self.image.api_host())
    }

    pub(super) fn credentials(&self) -> Option<(&str, &SecretString)> {
        self.client.credentials.for_image(self.image)
    }

    /// The manifest for this host's platform, its config, and the layers to unpack.
    pub(super) async fn resolve(&self) -> Result<Resolved, PullError> {
        let reference = self.image.manifest_reference().to_owned();
        let (mut digest, mut body, mut media_type) = self.manifest(&reference).await?;
        if let Some(pinned) = self.image.digest()
            && *pinned != digest
        {
            return Err(self.mismatch(&format!("the manifest {pinned}"), &digest));
        }
        let mut document = self.parse_document(&body, &media_type)?;
        if media_type == OCI_INDEX || media_type == DOCKER_INDEX {
            let chosen = self.choose_platform(document.manifests.unwrap_or_default())?;
            let wanted = self.digest(&chosen.digest)?;
            (digest, body, media_type) = self.manifest(wanted.as_str()).await?;
            if digest != wanted {
                return Err(self.mismatch(&format!("the manifest {wanted}"), &digest));
            }
            document = self.parse_document(&body, &media_type)?;
            if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
                return Err(self.unsupported(&format!(
                    "the index entry for {} is a {media_type}, not an image manifest",
                    chosen.platform.map(|p| p.name()).unwrap_or_default()
                )));
            }
        }
        let (Some(config), Some(layer_descriptors)) = (document.config, document.layers) else {
            return Err(self.unsupported("its manifest has no config or no layers"));
        };
        if layer_descriptors.len() > MAX_LAYERS {
            return Err(self.unsupported(&format!(
                "its manifest has {} layers, more than the {MAX_LAYERS} planwright unpacks; squash the image",
                layer_descriptors.len()
            )));
        }
        let config_digest = self.digest(&config.digest)?;
        let config_blob = self.small_blob(&config_digest).await?;
        let parsed: ConfigDocument = serde_json::from_slice(&config_blob)
            .map_err(|e| self.unsupported(&format!("its config is not an image config: {e}")))?;
        let mut layers = Vec::new();
        for layer in layer_descriptors {
            let compression = Compression::for_media_type(&layer.media_type).ok_or_else(|| {
                self.unsupported(&format!(
                    "its layer {} has the media type `{}`, which is not a tar, gzip or zstd image layer",
                    layer.digest, layer.media_type
                ))
            })?;
            layers.push(Layer {
                digest: self.digest(&layer.digest)?,
                size: layer.size,
                compression,
            });
        }
        let diff_ids = parsed
            .rootfs
            .map(|r| r.diff_ids)
            .unwrap_or_default()
            .iter()
            .map(|d| self.digest(d))
            .collect::<Result<Vec<_>, _>>()?;
        if diff_ids.len() != layers.len() {
            return Err(self.unsupported(&format!(
                "its config lists {} layer digests for {} layers",
                diff_ids.len(),
                layers.len()
            )));
        }
        Ok(Resolved {
            digest,
            layers,
            config: parsed.config.unwrap_or_default(),
            diff_ids,
            manifest: body,
            config_blob,
        })
    }

    fn parse_document(&self, body: &[u8], media_type: &str) -> Result<Document, PullError> {
        if !MANIFEST_TYPES.contains(&media_type) {
            return Err(self.unsupported(&format!(
                "its manifest has the media type `{media_type}`; planwright reads OCI and Docker v2 manifests and indexes (re-push the image with a current docker or skopeo)"
            )));
        }
        serde_json::from_slice(body)
            .map_err(|e| self.unsupported(&format!("its manifest is not valid JSON: {e}")))
    }

    fn choose_platform(&self, manifests: Vec<Descriptor>) -> Result<Descriptor, PullError> {
        let architecture = host_architecture();
        let matches = |p: &Platform| {
            p.os == "linux"
                && p.architecture == architecture
                && (architecture != "arm64" || p.variant.as_deref().is_none_or(|v| v == "v8"))
        };
        if let Some(found) = manifests
            .iter()
            .find(|m| m.platform.as_ref().is_some_and(matches))
        {
            return Ok(found.clone());
        }
        let available: Vec<String> = manifests
            .iter()
            .filter_map(|m| m.platform.as_ref())
            // Attestation manifests (buildx) carry this pseudo-platform.
            .filter(|p| p.os != "unknown")
            .map(Platform::name)
            .collect();
        Err(PullError::new(
            PullErrorKind::Platform,
            self.image,
            format!(
                "it has no linux/{architecture} image, only {}; publish one for linux/{architecture} (docker buildx build --platform linux/{architecture}) or choose another image",
                if available.is_empty() {
                    "entries without a platform".to_owned()
                } else {
                    available.join(", ")
                }
            ),
        ))
    }

    /// The manifest's digest (computed, and checked against what the registry claims), its
    /// bytes and its media type.
    async fn manifest(&self, reference: &str) -> Result<(Digest, Vec<u8>, String), PullError> {
        let url = format!("{}/manifests/{reference}", self.base);
        let response = self.get(&url, Some(&MANIFEST_TYPES.join(", "))).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let claimed = header("docker-content-digest");
        let content_type = header("content-type");
        let body = read_limited(response, MAX_DOCUMENT, &url, self).await?;
        let digest = Digest::of(&body);
        if let Some(claimed) = claimed
            && claimed != digest.as_str()
        {
            return Err(self.mismatch(&format!("the manifest {claimed}"), &digest));
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct MediaType {
            media_type: Option<String>,
        }
        let inline = serde_json::from_slice::<MediaType>(&body)
            .ok()
            .and_then(|m| m.media_type);
        let media_type = inline
            .or(content_type.map(|c| c.split(';').next().unwrap_or("").trim().to_owned()))
            .unwrap_or_default();
        Ok((digest, body, media_type))
    }

    /// A blob small enough to hold in memory (the config), verified.
    async fn small_blob(&self, digest: &Digest) -> Result<Vec<u8>, PullError> {
        let url = format!("{}/blobs/{digest}", self.base);
        let response = self.get(&url, None).await?;
        let body = read_limited(response, MAX_DOCUMENT, &url, self).await?;
        let actual = Digest::of(&body);
        if actual != *digest {
            return Err(self.mismatch(&format!("the config {digest}"), &actual));
        }
        Ok(body)
    }

    /// Streams a layer into `dest`, checking its size and digest; `dest` exists afterwards
    /// only when both matched.
    pub(super) async fn fetch_layer(&self, layer: &Layer, dest: &Path) -> Result<(), PullError> {
        let url = format!("{}/blobs/{}", self.base, layer.digest);
        let mut response = self.get(&url, None).await?;
        let partial = dest.with_extension(format!("partial.{}", uuid::Uuid::new_v4().simple()));
        let local = |e: std::io::Error| PullError::local(self.image, &partial, &e);
        // Removed however this ends, a pull dropped mid-download (another layer failed,
        // the job was cancelled) included, unless it became the blob.
        let mut leftover = RemoveOnDrop(Some(partial.clone()));
        let result = async {
            let mut file = tokio::fs::File::create(&partial).await.map_err(local)?;
            let mut hasher = sha2::Sha256::new();
            let mut received: u64 = 0;
            while let Some(chunk) = self.in_time(&url, response.chunk()).await? {
                received += chunk.len() as u64;
                if received > layer.size {
                    return Err(self.corrupt(&format!(
                        "the registry sent more than the {} bytes its manifest gives for the layer {}",
                        layer.size, layer.digest
                    )));
                }
                hasher.update(&chunk);
                file.write_all(&chunk).await.map_err(local)?;
            }
            file.flush().await.map_err(local)?;
            let actual = Digest::from_sha256(hasher.finalize().into());
            if actual != layer.digest {
                return Err(self.mismatch(&format!("the layer {}", layer.digest), &actual));
            }
            tokio::fs::rename(&partial, dest).await.map_err(local)
        }
        .await;
        if result.is_ok() {
            leftover.0 = None;
        }
        result
    }

    /// A GET with the authorization won so far; a 401 is answered once with its challenge.
    async fn get(&self, url: &str, accept: Option<&str>) -> Result<Response, PullError> {
        let response = self.send(url, accept).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return self.check_status(response, url).await;
        }
        // After a redirect elsewhere, a challenge is that host's, and answering it would
        // hand it this registry's credentials.
        if !self.on_own_registry(response.url()) {
            let elsewhere = host_port(response.url());
            let answer = answer(response, self.deadline).await;
            return Err(self.refused(&format!(
                "{url} redirected to {elsewhere}, which answered {answer}; planwright answers only the image's own registry's challenges"
            )));
        }
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Challenge::parse);
        let authorization = match challenge {
            Some(Challenge::Basic) => match self.credentials() {
                Some((user, password)) => auth::basic(user, password),
                None => return Err(self.refused(&self.missing_credentials())),
            },
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => bearer_token(self, &realm, service.as_deref(), scope.as_deref()).await?,
            None => {
                let answer = answer(response, self.deadline).await;
                return Err(self.refused(&format!(
                    "it answered {answer} without a challenge planwright can answer (Basic or Bearer)"
                )));
            }
        };
        *self.authorization.lock().unwrap_or_else(|e| e.into_inner()) = Some(authorization);
        let response = self.send(url, accept).await?;
        self.check_status(response, url).await
    }

    async fn send(&self, url: &str, accept: Option<&str>) -> Result<Response, PullError> {
        let url = self.checked_url(url, "registry")?;
        let mut request = self.http.get(url.clone());
        if let Some(accept) = accept {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        let authorization = self
            .authorization
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(authorization) = authorization {
            let mut value = reqwest::header::HeaderValue::from_str(authorization.expose_secret())
                .map_err(|_| self.refused("its token is not a valid header value"))?;
            value.set_sensitive(true);
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        self.in_time(url.as_str(), request.send()).await
    }

    /// A request's step, failed as transient once the pull's deadline has passed.
    pub(super) async fn in_time<T>(
        &self,
        url: &str,
        step: impl Future<Output = Result<T, reqwest::Error>>,
    ) -> Result<T, PullError> {
        match tokio::time::timeout_at(self.deadline, step).await {
            Ok(done) => done.map_err(|e| self.send_error(url, &e)),
            Err(_) => Err(self.transient(&format!(
                "the pull took longer than its {} seconds (ENVIRONMENT_PULL_TIMEOUT) while {url} was still sending; the registry is too slow or stalled, nothing of it was kept and planwright tries again later",
                self.client.pull_timeout.as_secs()
            ))),
        }
    }

    /// `url` parsed, and refused when it would use plain HTTP where only HTTPS may be used
    /// or names an address the pull may not reach.
    pub(super) fn checked_url(&self, url: &str, what: &str) -> Result<Url, PullError> {
        let parsed = Url::parse(url)
            .map_err(|_| self.protocol(&format!("its {what} address `{url}` is not a URL")))?;
        let host = host_port(&parsed);
        match parsed.scheme() {
            "https" => {}
            "http" if self.reach.plain_http(&host) => {}
            _ => {
                return Err(self.blocked(&format!(
                    "its {what} address {url} is not HTTPS; {PLAIN_HTTP_RULE}"
                )));
            }
        }
        self.reach
            .check_literal(&host)
            .map_err(|b| self.blocked(&b.explain(&format!("its {what} is at"))))?;
        Ok(parsed)
    }

    /// Sorts an answer: success passes, the rest becomes the error its status means.
    pub(super) async fn check_status(
        &self,
        response: Response,
        url: &str,
    ) -> Result<Response, PullError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let answer = answer(response, self.deadline).await;
        let host = self.image.api_host();
        Err(match status {
            StatusCode::NOT_FOUND => PullError::new(
                PullErrorKind::NotFound,
                self.image,
                format!(
                    "the registry {host} has no such image ({url} answered {answer}); check the name and tag, and that the image was pushed"
                ),
            ),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                self.refused(&format!("it answered {answer}"))
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::REQUEST_TIMEOUT => self.transient(&format!(
                "the registry {host} answered {answer}; planwright tries again later"
            )),
            s if s.is_server_error() => self.transient(&format!(
                "the registry {host} answered {answer}; planwright tries again later (if it lasts, check the registry)"
            )),
            _ => self.protocol(&format!("{url} answered {answer}")),
        })
    }

    pub(super) fn send_error(&self, url: &str, error: &reqwest::Error) -> PullError {
        if let Some(blocked) = reach::cause::<reach::Blocked>(error) {
            let what = if error.is_redirect() {
                format!("{url} redirected to")
            } else if blocked.host == reach::bare_host(self.image.api_host()) {
                "its address".to_owned()
            } else {
                format!("{url} led to")
            };
            return self.blocked(&blocked.explain(&what));
        }
        let mut cause = String::new();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            cause = inner.to_string();
            source = inner.source();
        }
        let what = if error.is_timeout() {
            "did not answer in time"
        } else if error.is_connect() {
            "could not be reached"
        } else if error.is_redirect() {
            if let Some(plain) = reach::cause::<PlainRedirect>(error) {
                return self.blocked(&format!("{url} sent {plain}"));
            }
            return self.protocol(&format!(
                "{url} sent a redirect planwright does not follow: {cause}"
            ));
        } else {
            "broke off the connection"
        };
        self.transient(&format!(
            "{url} {what} ({cause}); planwright tries again later (if it lasts, check the registry's address and the network)"
        ))
    }

    fn missing_credentials(&self) -> String {
        let (registry, repository) = (self.image.registry(), self.image.repository());
        let owner = repository.split('/').next().unwrap_or(repository);
        format!(
            "it asks for credentials and REGISTRY_AUTH has none for {registry}/{repository}; run `docker login {registry}` and name its config.json in REGISTRY_AUTH, keying the entry by repository prefix (`{registry}/{owner}`)"
        )
    }

    pub(super) fn refused(&self, detail: &str) -> PullError {
        let advice = if self.credentials().is_some() {
            format!(
                "check the credentials REGISTRY_AUTH gives {}/{} and that they may pull it",
                self.image.registry(),
                self.image.repository()
            )
        } else {
            format!(
                "if the image is private, put credentials for {}/{} in the config.json that REGISTRY_AUTH names",
                self.image.registry(),
                self.image.repository()
            )
        };
        PullError::new(
            PullErrorKind::Refused,
            self.image,
            format!(
                "the registry {} refused access: {detail}; {advice}",
                self.image.api_host()
            ),
        )
    }

    fn blocked(&self, detail: &str) -> PullError {
        PullError::new(PullErrorKind::Blocked, self.image, detail.to_owned())
    }

    fn transient(&self, detail: &str) -> PullError {
        PullError::new(PullErrorKind::Transient, self.image, detail.to_owned())
    }

    pub(super) fn protocol(&self, detail: &str) -> PullError {
        PullError::new(
            PullErrorKind::Protocol,
            self.image,
            format!(
                "the registry {} gave an answer planwright cannot use: {detail}",
                self.image.api_host()
            ),
        )
    }

    fn unsupported(&self, detail: &str) -> PullError {
        PullError::new(PullErrorKind::Unsupported, self.image, detail.to_owned())
    }

    fn corrupt(&self, detail: &str) -> PullError {
        PullError::new(
            PullErrorKind::DigestMismatch,
            self.image,
            format!(
                "{detail}; nothing of it was kept (the registry's storage may be damaged: push the image again)"
            ),
        )
    }

    fn mismatch(&self, what: &str, actual: &Digest) -> PullError {
        self.corrupt(&format!(
            "the registry sent {what} with the content digest {actual} instead"
        ))
    }

    fn digest(&self, text: &str) -> Result<Digest, PullError> {
        Digest::parse(text).map_err(|e| self.unsupported(&format!("its manifest names {e}")))
    }
}

/// Asks the realm for a token to pull `remote`'s repository.
async fn bearer_token(
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
            auth::basic(user, password).expose_secret(),
        );
    }
    let response = remote.in_time(realm, request.send()).await?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let answer = answer(response, remote.deadline()).await;
        return Err(remote.refused(&format!("its token service {realm} answered {answer}")));
    }
    let response = remote.check_status(response, realm).await?;
    let body = read_limited(response, 1 << 20, realm, remote).await?;
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

/// The status and, from a distribution-spec error body, its first code and message. Reads
/// at most 64 KiB of the body, and none past the deadline: an error needs no more, and a
/// registry may send no end.
pub(super) async fn answer(mut response: Response, deadline: tokio::time::Instant) -> String {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(Deserialize)]
    struct ErrorEntry {
        code: Option<String>,
        message: Option<String>,
    }
    let status = response.status();
    let mut body = Vec::new();
    while body.len() < 64 << 10
        && let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await
    {
        body.extend_from_slice(&chunk);
    }
    let detail = match serde_json::from_slice::<Errors>(&body) {
        Ok(errors) => errors
            .errors
            .into_iter()
            .next()
            .map(|e| {
                [e.code, e.message]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(": ")
            })
            .unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)])
            .trim()
            .to_owned(),
    };
    if detail.is_empty() {
        status.to_string()
    } else {
        format!("{status} ({detail})")
    }
}

/// The body, refused once it grows past `limit` bytes.
pub(super) async fn read_limited(
    mut response: Response,
    limit: usize,
    url: &str,
    remote: &Remote<'_>,
) -> Result<Vec<u8>, PullError> {
    let mut body = Vec::new();
    while let Some(chunk) = remote.in_time(url, response.chunk()).await? {
        if body.len() + chunk.len() > limit {
            return Err(remote.protocol(&format!("{url} sent more than {limit} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
