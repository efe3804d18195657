//! Environment images against a real registry on loopback: pulls (anonymous, htpasswd,
//! bearer tokens), platform choice, digest checks, hostile layers, the cache's sharing,
//! locking and eviction, and `planwright env pull`.

use std::path::{Path, PathBuf};

use planwright::config::images::{ImageSettings, RegistryCredentials};
use planwright::environment::{Environments, PullError, PullErrorKind};
use planwright::ids::image::ImageRef;

use crate::support::planwright_command;
use crate::support::registry::{
    Access, LayerBlob, PASSWORD, Packing, Registry, TarLayer, USER, UmociImage, busybox_root,
    glibc_root, sha256,
};

/// The registries and hostile servers of these tests all listen on 127.0.0.1, which their
/// operator lists by host (an image name alone never lets a pull reach loopback).
fn settings(cache_max: u64, credentials: RegistryCredentials) -> ImageSettings {
    ImageSettings {
        credentials,
        cache_max,
        insecure: vec!["127.0.0.1".to_owned()],
        ..ImageSettings::default()
    }
}

fn environments(data: &Path) -> Environments {
    Environments::new(data, &settings(1 << 30, RegistryCredentials::default())).unwrap()
}

fn reference(registry: &Registry, name_tag: &str) -> ImageRef {
    ImageRef::parse(&registry.reference(name_tag)).unwrap()
}

/// What the cache keeps besides finished images: nothing, after any pull.
fn leftovers(data: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for sub in ["tmp", "blobs/sha256"] {
        let dir = data.join("environments").join(sub);
        found.extend(std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()));
    }
    found
}

fn images(data: &Path) -> usize {
    std::fs::read_dir(data.join("environments/images"))
        .unwrap()
        .count()
}

async fn pull_error(environments: &Environments, image: &ImageRef) -> PullError {
    environments
        .pull(image)
        .await
        .expect_err("the pull is refused")
}

/// A busybox image in two layers: the second deletes a file and a folder of the first.
fn busybox_image(dir: &Path) -> UmociImage {
    let mut image = UmociImage::new(dir, "bb");
    image
        .layer(|root| {
            busybox_root(root);
            std::fs::write(root.join("hello"), "hello from the image\n").unwrap();
            std::fs::write(root.join("doomed"), "gone in layer 2").unwrap();
            std::fs::create_dir_all(root.join("olddir/sub")).unwrap();
            std::fs::write(root.join("olddir/sub/file"), "x").unwrap();
        })
        .layer(|root| {
            std::fs::remove_file(root.join("doomed")).unwrap();
            std::fs::remove_dir_all(root.join("olddir")).unwrap();
            std::fs::write(root.join("added"), "layer 2").unwrap();
        })
        .config(&[
            "--config.env",
            "PATH=/bin",
            "--config.workingdir",
            "/work",
            "--config.user",
            "1000",
        ]);
    image
}

#[tokio::test]
async fn anonymous_pull_unpacks_files_symlinks_and_whiteouts() {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    let image = busybox_image(dir.path());
    registry.push_layout(&image.layout, "bb", "tools/busybox:1");
    let data = dir.path().join("data");
    let environments = environments(&data);
    let lease = environments
        .pull(&reference(&registry, "tools/busybox:1"))
        .await
        .unwrap();
    assert!(lease.unpacked());
    let root = &lease.root;
    assert!(root.is_absolute(), "{}", root.display());
    assert_eq!(
        std::fs::read_to_string(root.join("hello")).unwrap(),
        "hello from the image\n"
    );
    assert_eq!(
        std::fs::read_link(root.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    assert!(
        !root.join("doomed").exists(),
        "the whiteout removed the file"
    );
    assert!(
        !root.join("olddir").exists(),
        "the whiteout removed the folder"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("added")).unwrap(),
        "layer 2"
    );
    assert_eq!(lease.env, ["PATH=/bin"]);
    assert_eq!(lease.working_dir.as_deref(), Some("/work"));
    assert_eq!(lease.user.as_deref(), Some("1000"));
    assert!(lease.digest.as_str().starts_with("sha256:"));
    // The static busybox runs as unpacked: its bytes came through intact.
    let out = std::process::Command::new(root.join("bin/busybox"))
        .args(["echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));

    // Pulled again: found in the cache, same root.
    let again = environments
        .pull(&reference(&registry, "tools/busybox:1"))
        .await
        .unwrap();
    assert!(!again.unpacked());
    assert_eq!(again.root, lease.root);
}

#[tokio::test]
async fn glibc_image_runs_in_its_own_root() {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    let mut image = UmociImage::new(dir.path(), "glibc");
    image.layer(glibc_root);
    registry.push_layout(&image.layout, "glibc", "tools/glibc:1");
    let data = dir.path().join("data");
    let lease = environments(&data)
        .pull(&reference(&registry, "tools/glibc:1"))
        .await
        .unwrap();
    // chroot proves the loader and libraries are all there and intact.
    let out = std::process::Command::new("chroot")
        .arg(&lease.root)
        .args(["/bin/ls", "/"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("bin"));
}

#[tokio::test]
async fn handcrafted_layers_in_every_compression_with_opaque_folders() {
    let registry = Registry::start(Access::Anonymous).await;
    let lower = TarLayer::default()
        .dir("etc")
        .file("etc/old", 0o644, b"lower")
        .file("etc/keep-not", 0o644, b"lower")
        .dir("var")
        .file("var/log", 0o644, b"lower")
        .finish();
    let upper = TarLayer::default()
        .dir("etc")
        .file("etc/.wh..wh..opq", 0o644, b"")
        .file("etc/new", 0o600, b"upper")
        .file("var/.wh.log", 0o644, b"")
        .finish();
    let top = TarLayer::default()
        .file("top", 0o755, b"#!/bin/sh\n")
        .finish();
    registry
        .push_layers(
            "hand/made",
            "1",
            &[
                LayerBlob::new(lower, Packing::Tar),
                LayerBlob::new(upper, Packing::Zstd),
                LayerBlob::new(top, Packing::Gzip),
            ],
            &["PATH=/usr/bin"],
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let lease = environments(dir.path())
        .pull(&reference(&registry, "hand/made:1"))
        .await
        .unwrap();
    let root = &lease.root;
    let mut etc: Vec<_> = std::fs::read_dir(root.join("etc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    etc.sort();
    assert_eq!(
        etc,
        ["new"],
        "the opaque folder hides the lower layer's files"
    );
    assert!(!root.join("var/log").exists());
    assert!(root.join("var").is_dir());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("etc/new"), 0o604, "readable by the sandbox's user");
    assert_eq!(mode("top"), 0o755);
}

/// Credentials for the registry as `docker login` writes them.
fn docker_config(
    dir: &Path,
    registry: &Registry,
    user: &str,
    password: &str,
) -> RegistryCredentials {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let file = dir.join("config.json");
    let text = serde_json::json!({"auths": {registry.addr.clone(): {"auth": auth}}}).to_string();
    std::fs::write(&file, &text).unwrap();
    RegistryCredentials::from_docker_config(&std::fs::read_to_string(&file).unwrap(), &file)
        .unwrap()
}

async fn pull_with(
    data: &Path,
    registry: &Registry,
    credentials: RegistryCredentials,
    name_tag: &str,
) -> Result<planwright::environment::cache::Lease, PullError> {
    Environments::new(data, &settings(1 << 30, credentials))
        .unwrap()
        .pull(&reference(registry, name_tag))
        .await
}

async fn authenticated_pulls(access: Access) {
    let registry = Registry::start(access).await;
    let dir = tempfile::tempdir().unwrap();
    let mut image = UmociImage::new(dir.path(), "bb");
    image.layer(busybox_root);
    registry.push_layout(&image.layout, "bb", "private/busybox:1");
    let data = dir.path().join("data");

    let right = docker_config(dir.path(), &registry, USER, PASSWORD);
    let lease = pull_with(&data, &registry, right, "private/busybox:1")
        .await
        .unwrap();
    assert!(lease.root.join("bin/busybox").is_file());
    drop(lease);
    std::fs::remove_dir_all(&data).unwrap();

    let wrong = docker_config(dir.path(), &registry, USER, "wrong");
    let error = pull_with(&data, &registry, wrong, "private/busybox:1")
        .await
        .unwrap_err();
    assert_eq!(error.kind, PullErrorKind::Refused, "{error}");
    let text = error.to_string();
    assert!(text.contains("private/busybox:1"), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert!(text.contains("401"), "the registry's answer: {text}");
    assert!(text.contains("REGISTRY_AUTH"), "what to do: {text}");

    let error = pull_with(
        &data,
        &registry,
        RegistryCredentials::default(),
        "private/busybox:1",
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, PullErrorKind::Refused, "{error}");
    assert!(error.to_string().contains("REGISTRY_AUTH"), "{error}");
    assert!(!error.is_transient());
    assert_eq!(images(&data), 0);
}

#[tokio::test]
async fn htpasswd_basic_auth_takes_right_credentials_only() {
    authenticated_pulls(Access::Htpasswd).await;
}

/// The registry's own `auth.token` checks what a token service of the tests signs: the
/// client meets a real bearer challenge and a real token validation.
#[tokio::test]
async fn bearer_token_challenge_takes_right_credentials_only() {
    authenticated_pulls(Access::Token).await;
}

/// Credentials keyed by repository prefix go to images under that prefix only (by whole
/// path segments), the most specific key winning over a host-wide one.
#[tokio::test]
async fn credentials_keyed_by_repository_prefix_are_lent_to_that_prefix_only() {
    use base64::Engine as _;
    let registry = Registry::start(Access::Htpasswd).await;
    let dir = tempfile::tempdir().unwrap();
    let mut image = UmociImage::new(dir.path(), "bb");
    image.layer(busybox_root);
    for name in ["acme/ci:1", "acmeevil/loot:1", "other/loot:1"] {
        registry.push_layout(&image.layout, "bb", name);
    }
    let auth = |password: &str| {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
        serde_json::json!({ "auth": pair })
    };
    let file = dir.path().join("scoped.json");
    let scoped = serde_json::json!({"auths": {format!("{}/acme", registry.addr): auth(PASSWORD)}});
    std::fs::write(&file, scoped.to_string()).unwrap();
    let scoped =
        RegistryCredentials::from_docker_config(&std::fs::read_to_string(&file).unwrap(), &file)
            .unwrap();
    assert!(scoped.host_wide_warnings().is_empty());
    let data = dir.path().join("data");
    let lease = pull_with(&data, &registry, scoped.clone(), "acme/ci:1")
        .await
        .unwrap();
    assert!(lease.root.join("bin/busybox").is_file());
    let error = pull_with(&data, &registry, scoped, "acmeevil/loot:1")
        .await
        .unwrap_err();
    assert_eq!(error.kind, PullErrorKind::Refused, "{error}");
    assert!(
        error.to_string().contains(&format!(
            "REGISTRY_AUTH has none for {}/acmeevil/loot",
            registry.addr
        )),
        "the sibling got the scoped credentials: {error}"
    );

    // A host-wide key with a wrong password: the scoped key still wins for its prefix,
    // and the host-wide one is what other repositories get (and are refused with).
    let both = serde_json::json!({"auths": {
        registry.addr.clone(): auth("wrong"),
        format!("{}/acme", registry.addr): auth(PASSWORD),
    }});
    std::fs::write(&file, both.to_string()).unwrap();
    let both =
        RegistryCredentials::from_docker_config(&std::fs::read_to_string(&file).unwrap(), &file)
            .unwrap();
    assert_eq!(both.host_wide_warnings().len(), 1);
    let other = dir.path().join("other-data");
    pull_with(&other, &registry, both.clone(), "acme/ci:1")
        .await
        .unwrap();
    let error = pull_with(&other, &registry, both, "other/loot:1")
        .await
        .unwrap_err();
    assert_eq!(error.kind, PullErrorKind::Refused, "{error}");
    assert!(error.to_string().contains("401"), "{error}");
}

/// Pushes an image made of one handcrafted layer, returning its manifest digest and size.
async fn push_one(registry: &Registry, name: &str, tag: &str, tar: Vec<u8>) -> (String, usize) {
    registry
        .push_layers(name, tag, &[LayerBlob::new(tar, Packing::Gzip)], &[])
        .await
}

#[tokio::test]
async fn an_index_yields_the_hosts_platform_and_a_missing_one_is_named() {
    let registry = Registry::start(Access::Anonymous).await;
    let amd64 = push_one(
        &registry,
        "multi/arch",
        "amd64",
        TarLayer::default().file("arch", 0o644, b"amd64").finish(),
    )
    .await;
    let arm64 = push_one(
        &registry,
        "multi/arch",
        "arm64",
        TarLayer::default().file("arch", 0o644, b"arm64").finish(),
    )
    .await;
    let entry = |(digest, size): &(String, usize), architecture: &str, variant: Option<&str>| {
        let mut platform = serde_json::json!({"os": "linux", "architecture": architecture});
        if let Some(variant) = variant {
            platform["variant"] = variant.into();
        }
        serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": size, "platform": platform,
        })
    };
    let index = |entries: Vec<serde_json::Value>| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": entries,
        }))
        .unwrap()
    };
    let media_type = "application/vnd.oci.image.index.v1+json";
    let both = index(vec![
        entry(&arm64, "arm64", Some("v8")),
        entry(&amd64, "amd64", None),
    ]);
    registry
        .put_manifest("multi/arch", "both", media_type, &both)
        .await;
    let only_arm = index(vec![
        entry(&arm64, "arm64", Some("v8")),
        entry(&arm64, "arm", Some("v7")),
    ]);
    registry
        .put_manifest("multi/arch", "arm", media_type, &only_arm)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let environments = environments(dir.path());
    let lease = environments
        .pull(&reference(&registry, "multi/arch:both"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(lease.root.join("arch")).unwrap(),
        "amd64"
    );
    assert_eq!(
        lease.digest.as_str(),
        amd64.0,
        "the platform's manifest digest"
    );

    let error = pull_error(&environments, &reference(&registry, "multi/arch:arm")).await;
    assert_eq!(error.kind, PullErrorKind::Platform);
    let text = error.to_string();
    assert!(text.contains("no linux/amd64 image"), "{text}");
    assert!(
        text.contains("linux/arm64/v8, linux/arm/v7"),
        "names what it has: {text}"
    );
}

#[tokio::test]
async fn a_damaged_blob_is_refused_and_nothing_is_kept() {
    let registry = Registry::start(Access::Anonymous).await;
    let tar = TarLayer::default()
        .file("data", 0o644, &[7u8; 4096])
        .finish();
    let layer = LayerBlob::new(tar, Packing::Gzip);
    let layer_digest = sha256(&layer.blob);
    registry
        .push_layers("broken/blob", "1", &[layer], &[])
        .await;
    // Same length, different bytes: only the digest can tell.
    let file = registry.blob_file(&layer_digest);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let error = pull_error(
        &environments(dir.path()),
        &reference(&registry, "broken/blob:1"),
    )
    .await;
    assert_eq!(error.kind, PullErrorKind::DigestMismatch, "{error}");
    assert!(error.to_string().contains(&layer_digest), "{error}");
    assert!(
        error.to_string().contains("push the image again"),
        "{error}"
    );
    assert_eq!(images(dir.path()), 0);
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[tokio::test]
async fn a_missing_image_or_tag_is_not_found_and_a_dead_registry_is_transient() {
    let registry = Registry::start(Access::Anonymous).await;
    push_one(
        &registry,
        "present/image",
        "1",
        TarLayer::default().file("f", 0o644, b"x").finish(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let environments = environments(dir.path());
    for name in ["absent/image:1", "present/image:2"] {
        let error = pull_error(&environments, &reference(&registry, name)).await;
        assert_eq!(error.kind, PullErrorKind::NotFound, "{error}");
        let text = error.to_string();
        assert!(
            text.contains(name) && text.contains("404") && text.contains("check the name"),
            "{text}"
        );
    }
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = pull_error(
        &environments,
        &ImageRef::parse(&format!("127.0.0.1:{port}/x:1")).unwrap(),
    )
    .await;
    assert!(error.is_transient(), "{error}");
    assert!(
        error.to_string().contains("could not be reached"),
        "{error}"
    );
    assert!(leftovers(dir.path()).is_empty());
}

/// Each layer tries one way out; every one is refused (or, for a device node, left out)
/// and nothing lands outside the cache.
#[tokio::test]
async fn hostile_layers_are_refused_and_leave_nothing() {
    let registry = Registry::start(Access::Anonymous).await;
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped");
    let target_text = target.display().to_string();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot",
            TarLayer::default()
                .file("../../../../escaped", 0o644, b"x")
                .finish(),
            "climbs out",
        ),
        (
            "absolute",
            TarLayer::default().file(&target_text, 0o644, b"x").finish(),
            "absolute",
        ),
        (
            "symlink-parent",
            TarLayer::default()
                .symlink("link", &outside.path().display().to_string())
                .file("link/escaped", 0o644, b"x")
                .finish(),
            "a symlink",
        ),
        (
            "hardlink-outside",
            TarLayer::default()
                .hard_link("passwd", "../../../../etc/passwd")
                .finish(),
            "climbs out",
        ),
        (
            "hardlink-absolute",
            TarLayer::default()
                .hard_link("passwd", "/etc/passwd")
                .finish(),
            "absolute",
        ),
        (
            "hardlink-missing",
            TarLayer::default()
                .hard_link("passwd", "etc/passwd")
                .finish(),
            "no file already inside",
        ),
        (
            "whiteout-parent",
            TarLayer::default().file("sub/.wh..", 0o644, b"").finish(),
            "whiteout of the folder itself or its parent",
        ),
        (
            "whiteout-root",
            TarLayer::default().file(".wh..", 0o644, b"").finish(),
            "whiteout of the folder itself or its parent",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let environments = environments(dir.path());
    for (name, tar, reason) in cases {
        let tag = format!("hostile/{name}:1");
        push_one(&registry, &format!("hostile/{name}"), "1", tar).await;
        let error = pull_error(&environments, &reference(&registry, &tag)).await;
        assert_eq!(error.kind, PullErrorKind::HostileLayer, "{name}: {error}");
        assert!(error.to_string().contains(reason), "{name}: {error}");
        assert!(
            error.to_string().contains("nothing of the image was kept"),
            "{error}"
        );
        assert!(!target.exists(), "{name} wrote outside the root");
        assert_eq!(images(dir.path()), 0, "{name}");
        assert!(
            leftovers(dir.path()).is_empty(),
            "{name}: {:?}",
            leftovers(dir.path())
        );
    }
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
}

/// A tar header of `kind` declaring `size` bytes, followed by `body` (which may be shorter).
fn extension_entry(
    builder: &mut tar::Builder<Vec<u8>>,
    kind: tar::EntryType,
    size: u64,
    body: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_path("././@LongLink").unwrap();
    header.set_size(size);
    header.set_cksum();
    builder.append(&header, body).unwrap();
}

/// A PAX record as tar writes it: its own length first.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let rest = format!(" {key}={value}\n");
    let mut len = rest.len() + 1;
    while format!("{len}").len() + rest.len() != len {
        len += 1;
    }
    format!("{len}{rest}").into_bytes()
}

/// Extension headers that declare huge bodies are refused from their header, before any
/// of the body is read into memory; a layer decompressing far past the cap is cut off.
#[tokio::test]
async fn huge_extension_headers_and_endless_layers_are_refused() {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    let environments = Environments::new(
        dir.path(),
        &settings(2 << 20, RegistryCredentials::default()),
    )
    .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for (name, kind) in [
        ("long-name", tar::EntryType::GNULongName),
        ("long-link", tar::EntryType::GNULongLink),
        ("pax", tar::EntryType::XHeader),
        ("pax-global", tar::EntryType::XGlobalHeader),
    ] {
        let mut builder = tar::Builder::new(Vec::new());
        extension_entry(&mut builder, kind, 1 << 30, &zeros);
        let tar = builder.into_inner().unwrap();
        registry
            .push_layers(
                &format!("ext/{name}"),
                "1",
                &[LayerBlob::new(tar, Packing::Zstd)],
                &[],
            )
            .await;
        let error = pull_error(
            &environments,
            &reference(&registry, &format!("ext/{name}:1")),
        )
        .await;
        assert_eq!(error.kind, PullErrorKind::HostileLayer, "{name}: {error}");
        assert!(
            error
                .to_string()
                .contains("extension header of 1073741824 bytes"),
            "{name}: {error}"
        );
        assert_eq!(images(dir.path()), 0);
        assert!(leftovers(dir.path()).is_empty(), "{name}");
    }

    // A valid archive, then 8 MiB of zeros after its end: tiny compressed, and read to
    // the end for the digest check unless the stream is bounded.
    let mut tar = TarLayer::default().file("a", 0o644, b"a").finish();
    tar.extend(std::iter::repeat_n(0u8, 8 << 20));
    registry
        .push_layers(
            "ext/endless",
            "1",
            &[LayerBlob::new(tar, Packing::Zstd)],
            &[],
        )
        .await;
    let error = pull_error(&environments, &reference(&registry, "ext/endless:1")).await;
    assert_eq!(error.kind, PullErrorKind::TooLarge, "{error}");
    assert!(
        error.to_string().contains("ENVIRONMENT_CACHE_MAX"),
        "{error}"
    );
    assert!(leftovers(dir.path()).is_empty());
}

/// Names past the tar header's 100 bytes arrive in GNU long-name and PAX headers, and are
/// unpacked under those names, links too.
#[tokio::test]
async fn long_names_from_gnu_and_pax_headers_are_unpacked() {
    let registry = Registry::start(Access::Anonymous).await;
    let gnu = format!("gnu/{}", "g".repeat(150));
    let pax = format!("pax/{}", "p".repeat(150));
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(3);
    header.set_mode(0o644);
    builder.append_data(&mut header, &gnu, &b"gnu"[..]).unwrap();
    let mut records = pax_record("path", &pax);
    records.extend(pax_record("linkpath", &gnu));
    extension_entry(
        &mut builder,
        tar::EntryType::XHeader,
        records.len() as u64,
        &records,
    );
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_path("short").unwrap();
    link.set_size(0);
    link.set_mode(0o777);
    link.set_cksum();
    builder.append(&link, &[][..]).unwrap();
    let tar = builder.into_inner().unwrap();
    registry
        .push_layers("ext/long", "1", &[LayerBlob::new(tar, Packing::Gzip)], &[])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let lease = environments(dir.path())
        .pull(&reference(&registry, "ext/long:1"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(lease.root.join(&gnu)).unwrap(), b"gnu");
    assert_eq!(
        std::fs::read_link(lease.root.join(&pax)).unwrap(),
        Path::new(&gnu)
    );
    assert!(!lease.root.join("short").exists());
}

/// A manifest declaring layer sizes past the cache's cap (or overflowing their sum) is
/// refused before anything is downloaded or evicted.
#[tokio::test]
async fn declared_layer_sizes_past_the_cap_are_refused_before_eviction() {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    let environments = Environments::new(
        dir.path(),
        &settings(1 << 20, RegistryCredentials::default()),
    )
    .unwrap();
    push_one(
        &registry,
        "sizes/kept",
        "1",
        TarLayer::default().file("a", 0o644, b"a").finish(),
    )
    .await;
    drop(
        environments
            .pull(&reference(&registry, "sizes/kept:1"))
            .await
            .unwrap(),
    );
    assert_eq!(images(dir.path()), 1);

    let tar = TarLayer::default().file("b", 0o644, b"b").finish();
    let layer = LayerBlob::new(tar, Packing::Tar);
    let digest = registry.upload_blob("sizes/huge", &layer.blob).await;
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id.clone(), layer.diff_id.clone(), layer.diff_id.clone()]},
    }))
    .unwrap();
    let config_digest = registry.upload_blob("sizes/huge", &config).await;
    for (tag, sizes) in [
        ("one", vec![i64::MAX as u64, 1, 1]),
        ("overflow", vec![i64::MAX as u64; 3]),
        ("just-over", vec![(1 << 20) - 2, 1, 1]),
    ] {
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": sizes.iter().map(|size| serde_json::json!({
                "mediaType": layer.media_type, "digest": digest, "size": size,
            })).collect::<Vec<_>>(),
        });
        registry
            .put_manifest(
                "sizes/huge",
                tag,
                "application/vnd.oci.image.manifest.v1+json",
                &serde_json::to_vec(&manifest).unwrap(),
            )
            .await;
        let error = pull_error(
            &environments,
            &reference(&registry, &format!("sizes/huge:{tag}")),
        )
        .await;
        assert_eq!(error.kind, PullErrorKind::TooLarge, "{tag}: {error}");
        assert!(
            error
                .to_string()
                .contains("more than ENVIRONMENT_CACHE_MAX (1048576 bytes) together"),
            "{tag}: {error}"
        );
        assert_eq!(
            images(dir.path()),
            1,
            "{tag}: the unleased image was evicted"
        );
        assert!(leftovers(dir.path()).is_empty(), "{tag}");
    }
}

/// A registry answering every request with an error whose body never ends: the pull
/// reads a bounded part of it and fails, instead of buffering forever.
#[tokio::test]
async fn an_endless_error_body_is_read_only_in_part() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(1 << 16));
                while socket.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let image = ImageRef::parse(&format!("{addr}/endless/error:1")).unwrap();
    // Bounds the test, not the code: unbounded reading never returns.
    let error = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        pull_error(&environments(dir.path()), &image),
    )
    .await
    .expect("the pull reads the error body without end");
    assert!(error.to_string().contains("404"), "{error}");
}

/// A registry that answers the manifest and config at once, then sends the layer one
/// byte at a time, each well within the read timeout: only the pull's deadline ends it.
#[tokio::test]
async fn a_registry_dripping_a_layer_is_cut_off_at_the_pull_deadline() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let tar = TarLayer::default()
        .file("big", 0o644, &vec![1u8; 1 << 20])
        .finish();
    let layer = LayerBlob::new(tar, Packing::Tar);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
    }))
    .unwrap();
    let (config_digest, layer_digest) = (sha256(&config), sha256(&layer.blob));
    let expected_layer = layer_digest.clone();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": layer.media_type, "digest": layer_digest, "size": layer.blob.len()}],
    }))
    .unwrap();
    let blob = std::sync::Arc::new(layer.blob);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (manifest, config, blob) = (manifest.clone(), config.clone(), blob.clone());
            let layer_path = format!("/v2/drip/layer/blobs/{layer_digest}");
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let path = text.split(' ').nth(1).unwrap_or("").to_owned();
                let (body, media_type): (&[u8], _) = if path.contains("/manifests/") {
                    (&manifest, "application/vnd.oci.image.manifest.v1+json")
                } else if path == layer_path {
                    (&blob, "application/octet-stream")
                } else {
                    (&config, "application/octet-stream")
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {media_type}\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                if path != layer_path {
                    let _ = socket.write_all(body).await;
                    return;
                }
                for byte in body {
                    if socket.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let settings = ImageSettings {
        pull_timeout: std::time::Duration::from_secs(3),
        ..settings(1 << 30, RegistryCredentials::default())
    };
    let environments = Environments::new(dir.path(), &settings).unwrap();
    let image = ImageRef::parse(&format!("{addr}/drip/layer:1")).unwrap();
    // Bounds the test, not the code: without a deadline the layer takes a day.
    let error = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        pull_error(&environments, &image),
    )
    .await
    .expect("the pull outlived its deadline");
    assert!(error.is_transient(), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("took longer than its 3 seconds (ENVIRONMENT_PULL_TIMEOUT)")
            && text.contains(&format!("/v2/drip/layer/blobs/{expected_layer}")),
        "{text}"
    );
    assert_eq!(images(dir.path()), 0);
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

/// Entries without content still cost: a layer of many empty folders (tiny once
/// compressed) is refused at the size cap instead of exhausting inodes.
#[tokio::test]
async fn many_empty_entries_are_charged_against_the_cap() {
    let registry = Registry::start(Access::Anonymous).await;
    let mut layer = TarLayer::default();
    for i in 0..2000 {
        layer.dir(&format!("d{i}"));
    }
    registry
        .push_layers(
            "entries/dirs",
            "1",
            &[LayerBlob::new(layer.finish(), Packing::Zstd)],
            &[],
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let environments = Environments::new(
        dir.path(),
        &settings(4 << 20, RegistryCredentials::default()),
    )
    .unwrap();
    let error = pull_error(&environments, &reference(&registry, "entries/dirs:1")).await;
    assert_eq!(error.kind, PullErrorKind::TooLarge, "{error}");
    assert!(
        error.to_string().contains("ENVIRONMENT_CACHE_MAX"),
        "{error}"
    );
    assert_eq!(images(dir.path()), 0);
    assert!(leftovers(dir.path()).is_empty());
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// A hostile HTTP server on loopback: answers each request with `respond(path)` and keeps
/// every request's path and Authorization header.
async fn hostile_server(respond: impl Fn(&str) -> String + Send + Sync + 'static) -> (u16, Seen) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Seen::default();
    let (kept, respond) = (seen.clone(), std::sync::Arc::new(respond));
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (kept, respond) = (kept.clone(), respond.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let path = text.split(' ').nth(1).unwrap_or("").to_owned();
                let authorization = text.lines().find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("authorization")
                        .then(|| value.trim().to_owned())
                });
                kept.lock().unwrap().push((path.clone(), authorization));
                let _ = socket.write_all(respond(&path).as_bytes()).await;
            });
        }
    });
    (port, seen)
}

fn credentials_for(dir: &Path, host: &str) -> RegistryCredentials {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let file = dir.join("config.json");
    std::fs::write(
        &file,
        serde_json::json!({"auths": {host: {"auth": auth}}}).to_string(),
    )
    .unwrap();
    RegistryCredentials::from_docker_config(&std::fs::read_to_string(&file).unwrap(), &file)
        .unwrap()
}

/// A registry's credentials do not go to a host it redirects to that then asks for them,
/// nor to the token service that host's challenge names.
#[tokio::test]
async fn credentials_never_reach_a_host_other_than_the_registry() {
    // The other host names a realm on itself, so it learns its port once listening.
    let own_port = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
    let port_seen = own_port.clone();
    let (elsewhere, seen) = hostile_server(move |path| {
        let port = port_seen.load(std::sync::atomic::Ordering::SeqCst);
        if path.starts_with("/t") {
            let body = r#"{"token":"stolen"}"#;
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
        } else {
            format!("HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://127.0.0.1:{port}/t\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        }
    })
    .await;
    own_port.store(elsewhere, std::sync::atomic::Ordering::SeqCst);
    let (redirecting, _) = hostile_server(move |path| {
        format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{elsewhere}{path}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    {
        let host = format!("127.0.0.1:{redirecting}");
        let environments = Environments::new(
            dir.path(),
            &settings(1 << 30, credentials_for(dir.path(), &host)),
        )
        .unwrap();
        let image = ImageRef::parse(&format!("{host}/private/image:1")).unwrap();
        let error = pull_error(&environments, &image).await;
        assert_eq!(error.kind, PullErrorKind::Refused, "{host}: {error}");
    }
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the redirect was followed");
    assert!(
        seen.iter()
            .all(|(_, authorization)| authorization.is_none()),
        "credentials reached another host: {seen:?}"
    );
}

/// Answers registry names from a table, as a deployment's DNS might: the pull checks what
/// it answers like any lookup.
struct Lookup(Vec<(&'static str, std::net::IpAddr)>);

impl reqwest::dns::Resolve for Lookup {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let found: Vec<std::net::SocketAddr> = self
            .0
            .iter()
            .filter(|(host, _)| *host == name.as_str())
            .map(|(_, ip)| std::net::SocketAddr::new(*ip, 0))
            .collect();
        Box::pin(async move { Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs) })
    }
}

fn looked_up(environments: Environments, table: Lookup) -> Environments {
    environments.with_lookup(std::sync::Arc::new(table))
}

/// A listener that only counts the connections it accepts.
async fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, accepted)
}

/// An image naming a registry whose name resolves to loopback is not reached at all; the
/// same name listed by the operator in REGISTRY_INSECURE is pulled.
#[tokio::test]
async fn a_registry_name_resolving_inward_is_not_reached_unless_listed() {
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let (port, accepted) = counting_listener().await;
    let dir = tempfile::tempdir().unwrap();
    let environments = looked_up(
        environments(dir.path()),
        Lookup(vec![("registry.example", loopback)]),
    );
    let image = ImageRef::parse(&format!("registry.example:{port}/x/y:1")).unwrap();
    let error = pull_error(&environments, &image).await;
    assert_eq!(error.kind, PullErrorKind::Blocked, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("its address registry.example, which resolves to a loopback address")
            && text.contains("planwright follows a registry only to public addresses")
            && text.contains("REGISTRY_PRIVATE"),
        "{text}"
    );
    assert!(!error.is_transient());
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the pull connected to the loopback address"
    );

    let registry = Registry::start(Access::Anonymous).await;
    push_one(
        &registry,
        "listed/image",
        "1",
        TarLayer::default().file("f", 0o644, b"listed").finish(),
    )
    .await;
    let registry_port = registry.addr.rsplit_once(':').unwrap().1;
    let listed = format!("registry.example:{registry_port}");
    let settings = ImageSettings {
        insecure: vec![listed.clone()],
        ..settings(1 << 30, RegistryCredentials::default())
    };
    let environments = looked_up(
        Environments::new(dir.path(), &settings).unwrap(),
        Lookup(vec![("registry.example", loopback)]),
    );
    let lease = environments
        .pull(&ImageRef::parse(&format!("{listed}/listed/image:1")).unwrap())
        .await
        .unwrap();
    assert_eq!(std::fs::read(lease.root.join("f")).unwrap(), b"listed");
}

/// A plain TCP listener on loopback, not accepting: a connection made to it waits in its
/// queue, where [`connections`] finds it.
fn quiet_listener() -> (u16, std::net::TcpListener) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    (listener.local_addr().unwrap().port(), listener)
}

/// How many connections reached `listener` (it never blocks: the queue is read until empty).
fn connections(listener: &std::net::TcpListener) -> usize {
    let mut seen = 0;
    loop {
        match listener.accept() {
            Ok(_) => seen += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return seen,
            Err(e) => panic!("the listener failed: {e}"),
        }
    }
}

/// An image naming a loopback, private or link-local address, or `localhost`, as its
/// registry is refused before any connection when the operator lists nothing, saying
/// why; listed by the operator (`host:port` or `host`), the same registry is pulled.
#[tokio::test]
async fn an_image_name_alone_never_reaches_loopback_or_private_addresses() {
    let (port, listener) = quiet_listener();
    let dir = tempfile::tempdir().unwrap();
    let unlisted = Environments::new(
        dir.path(),
        &ImageSettings {
            cache_max: 1 << 30,
            ..ImageSettings::default()
        },
    )
    .unwrap();
    for (image, expected) in [
        (
            format!("127.0.0.1:{port}/x:latest"),
            "its registry is at 127.0.0.1, a loopback address".to_owned(),
        ),
        (
            // A URL's parser reads this as 127.0.0.1: checked as the address it becomes.
            format!("127.1:{port}/x:latest"),
            "its registry is at 127.0.0.1, a loopback address".to_owned(),
        ),
        (
            format!("localhost:{port}/x:latest"),
            "its address localhost, which resolves to a loopback address".to_owned(),
        ),
        (
            "10.0.0.5:443/x:latest".to_owned(),
            "its registry is at 10.0.0.5, a private address".to_owned(),
        ),
        (
            "[fd00::1]/x:latest".to_owned(),
            "its registry is at fd00::1, a private address".to_owned(),
        ),
        (
            "169.254.169.254/x:latest".to_owned(),
            "its registry is at 169.254.169.254, a link-local address".to_owned(),
        ),
    ] {
        let error = pull_error(&unlisted, &ImageRef::parse(&image).unwrap()).await;
        assert_eq!(error.kind, PullErrorKind::Blocked, "{image}: {error}");
        let text = error.to_string();
        assert!(
            text.contains(&expected) && text.contains("REGISTRY_PRIVATE"),
            "{image}: {text}"
        );
        assert!(!error.is_transient(), "{image}");
    }
    assert_eq!(connections(&listener), 0, "a pull connected to loopback");

    // Listed by the operator, a loopback registry is reached, over plain HTTP as Docker
    // does, whether listed in REGISTRY_PRIVATE by `host:port` or by `host`.
    let registry = Registry::start(Access::Anonymous).await;
    push_one(
        &registry,
        "listed/image",
        "1",
        TarLayer::default().file("f", 0o644, b"listed").finish(),
    )
    .await;
    let registry_port = registry.addr.rsplit_once(':').unwrap().1;
    let unlisted_error = pull_error(&unlisted, &reference(&registry, "listed/image:1")).await;
    assert_eq!(unlisted_error.kind, PullErrorKind::Blocked);
    for (listed, image) in [
        (registry.addr.clone(), registry.reference("listed/image:1")),
        (
            "localhost".to_owned(),
            format!("localhost:{registry_port}/listed/image:1"),
        ),
    ] {
        let data = tempfile::tempdir().unwrap();
        let settings = ImageSettings {
            private: vec![listed.clone()],
            ..ImageSettings::default()
        };
        let lease = Environments::new(data.path(), &settings)
            .unwrap()
            .pull(&ImageRef::parse(&image).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{listed}: {e}"));
        assert_eq!(std::fs::read(lease.root.join("f")).unwrap(), b"listed");
    }
}

/// A registry on loopback (its own address, so it may use plain HTTP) tries to send the
/// pull to the cloud metadata service, a private address, a name resolving inward, or
/// another loopback host over plain HTTP, by redirect and by bearer realm: each is refused
/// before any connection, saying what and why.
#[tokio::test]
async fn redirects_and_realms_never_lead_inward_or_to_plain_http_elsewhere() {
    let (bystander, bystander_seen) = hostile_server(|_| {
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".to_owned()
    })
    .await;
    let (registry, _) = hostile_server(move |path| {
        let target = match path.split('/').nth(2).unwrap_or("") {
            "metadata" => "https://169.254.169.254/latest/meta-data/".to_owned(),
            "private" => "https://10.0.0.5/v2/".to_owned(),
            "named" => "https://inward.example/v2/".to_owned(),
            "plain" => format!("http://localhost:{bystander}/v2/"),
            realm => {
                let realm = match realm {
                    "realm-metadata" => "https://169.254.169.254/token".to_owned(),
                    "realm-named" => "https://inward.example/token".to_owned(),
                    _ => format!("http://localhost:{bystander}/token"),
                };
                return format!("HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"{realm}\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        };
        format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // With credentials for the registry: none may reach the token services it names.
    let credentials = credentials_for(dir.path(), &format!("127.0.0.1:{registry}"));
    let environments = looked_up(
        Environments::new(dir.path(), &settings(1 << 30, credentials)).unwrap(),
        Lookup(vec![("inward.example", "10.0.0.5".parse().unwrap())]),
    );
    for (name, expected) in [
        (
            "metadata",
            "redirected to 169.254.169.254, a link-local address",
        ),
        ("private", "redirected to 10.0.0.5, a private address"),
        (
            "named",
            "led to inward.example, which resolves to a private address",
        ),
        (
            "plain",
            &format!("a redirect to plain HTTP at localhost:{bystander}"),
        ),
        (
            "realm-metadata",
            "its token service is at 169.254.169.254, a link-local address",
        ),
        (
            "realm-named",
            "led to inward.example, which resolves to a private address",
        ),
        (
            "realm-plain",
            &format!("its token service address http://localhost:{bystander}/token is not HTTPS"),
        ),
    ] {
        let image = ImageRef::parse(&format!("127.0.0.1:{registry}/{name}/image:1")).unwrap();
        let error = pull_error(&environments, &image).await;
        assert_eq!(error.kind, PullErrorKind::Blocked, "{name}: {error}");
        let text = error.to_string();
        assert!(text.contains(expected), "{name}: {text}");
        if name.ends_with("named") {
            assert!(
                !text.contains("10.0.0.5"),
                "an inside lookup answered: {text}"
            );
        }
        assert!(!error.is_transient(), "{name}");
    }
    assert!(
        bystander_seen.lock().unwrap().is_empty(),
        "another loopback host was reached over plain HTTP"
    );
}

/// An image of more layers than planwright unpacks is refused from its manifest.
#[tokio::test]
async fn too_many_layers_are_refused() {
    let registry = Registry::start(Access::Anonymous).await;
    let layers: Vec<LayerBlob> = (0..129)
        .map(|_| LayerBlob::new(TarLayer::default().dir("d").finish(), Packing::Tar))
        .collect();
    registry.push_layers("layers/many", "1", &layers, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let error = pull_error(
        &environments(dir.path()),
        &reference(&registry, "layers/many:1"),
    )
    .await;
    assert_eq!(error.kind, PullErrorKind::Unsupported, "{error}");
    assert!(
        error.to_string().contains("129 layers, more than the 128"),
        "{error}"
    );
    assert_eq!(images(dir.path()), 0);
}

#[tokio::test]
async fn device_nodes_are_left_out_and_setuid_bits_dropped() {
    let registry = Registry::start(Access::Anonymous).await;
    let tar = TarLayer::default()
        .dir("dev")
        .special("dev/mem", tar::EntryType::Char)
        .special("dev/sda", tar::EntryType::Block)
        .special("fifo", tar::EntryType::Fifo)
        .file("su", 0o4755, b"#!/bin/sh\n")
        .file("sg", 0o2711, b"#!/bin/sh\n")
        .file("shared", 0o644, b"same inode")
        .hard_link("shared-link", "shared")
        .finish();
    push_one(&registry, "odd/entries", "1", tar).await;
    let dir = tempfile::tempdir().unwrap();
    let lease = environments(dir.path())
        .pull(&reference(&registry, "odd/entries:1"))
        .await
        .unwrap();
    let root = &lease.root;
    for gone in ["dev/mem", "dev/sda", "fifo"] {
        assert!(
            std::fs::symlink_metadata(root.join(gone)).is_err(),
            "{gone} was made"
        );
    }
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("su"), 0o755);
    assert_eq!(mode("sg"), 0o715);
    let inode = |p: &str| std::fs::metadata(root.join(p)).unwrap().ino();
    assert_eq!(inode("shared"), inode("shared-link"));
}

#[tokio::test]
async fn concurrent_pulls_of_one_image_unpack_it_once() {
    let registry = Registry::start(Access::Anonymous).await;
    let big = vec![42u8; 4 << 20];
    push_one(
        &registry,
        "shared/image",
        "1",
        TarLayer::default().file("big", 0o644, &big).finish(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let image = reference(&registry, "shared/image:1");
    let first = environments(dir.path());
    // A second cache object on the same folder stands for another process: it meets the
    // first through the lock file, not through memory.
    let second = environments(dir.path());
    let (a, b, c) = tokio::join!(first.pull(&image), first.pull(&image), second.pull(&image));
    let leases = [a.unwrap(), b.unwrap(), c.unwrap()];
    let unpacked = leases.iter().filter(|l| l.unpacked()).count();
    assert_eq!(unpacked, 1, "exactly one pull unpacked the image");
    assert!(leases.iter().all(|l| l.root == leases[0].root));
    assert_eq!(std::fs::read(leases[0].root.join("big")).unwrap(), big);
    assert!(leftovers(dir.path()).is_empty());
}

#[tokio::test]
async fn a_full_cache_evicts_the_least_recently_used_unleased_image() {
    let registry = Registry::start(Access::Anonymous).await;
    for name in ["a", "b", "c"] {
        let tar = TarLayer::default()
            .file("payload", 0o644, &[name.as_bytes()[0]; 10_000])
            .finish();
        push_one(&registry, &format!("lru/{name}"), "1", tar).await;
    }
    let big = TarLayer::default()
        .file("payload", 0o644, &[0u8; 40_000])
        .finish();
    push_one(&registry, "lru/big", "1", big).await;
    let dir = tempfile::tempdir().unwrap();
    // Room for two of the images (10 000 bytes, a name and an entry's 4096), not three.
    let environments = Environments::new(
        dir.path(),
        &settings(35_000, RegistryCredentials::default()),
    )
    .unwrap();
    let held = environments
        .pull(&reference(&registry, "lru/a:1"))
        .await
        .unwrap();
    let released = environments
        .pull(&reference(&registry, "lru/b:1"))
        .await
        .unwrap();
    let released_root = released.root.clone();
    drop(released);
    let newest = environments
        .pull(&reference(&registry, "lru/c:1"))
        .await
        .unwrap();
    assert!(
        held.root.join("payload").is_file(),
        "the leased image stays, though older"
    );
    assert!(!released_root.exists(), "the unleased one is evicted");
    assert!(newest.root.join("payload").is_file());
    assert_eq!(images(dir.path()), 2);

    let error = pull_error(&environments, &reference(&registry, "lru/big:1")).await;
    assert_eq!(error.kind, PullErrorKind::TooLarge, "{error}");
    assert!(
        error.to_string().contains("ENVIRONMENT_CACHE_MAX"),
        "{error}"
    );
    assert!(leftovers(dir.path()).is_empty());
    assert!(held.root.join("payload").is_file());
}

#[tokio::test]
async fn env_pull_prints_the_image_and_exits_by_outcome() {
    let registry = Registry::start(Access::Anonymous).await;
    let dir = tempfile::tempdir().unwrap();
    let (digest, _) = push_one(
        &registry,
        "cli/image",
        "1",
        TarLayer::default().file("f", 0o644, b"x").finish(),
    )
    .await;
    let data = dir.path().join("data");
    let pull = |image: String| {
        let mut command = planwright_command();
        command
            .args(["env", "pull", &image])
            .env("PLANWRIGHT_DATA_DIR", &data)
            .current_dir(dir.path());
        command.output().unwrap()
    };
    let out = pull(registry.reference("cli/image:1"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("digest  {digest}")), "{stdout}");
    assert!(stdout.contains("size    "), "{stdout}");
    let root = data
        .join("environments/images")
        .join(digest.trim_start_matches("sha256:"))
        .join("rootfs");
    assert!(
        stdout.contains(&root.canonicalize().unwrap().display().to_string()),
        "{stdout}"
    );

    let out = pull("Not A Reference".to_owned());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot use the image reference"));

    let out = pull(registry.reference("cli/absent:1"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Could not pull the image") && stderr.contains("404"),
        "{stderr}"
    );
}
