//! An environment image with Debian bookworm's python3, pip, git and patch and the PyPI
//! packages of a requirements file: a root made with `debootstrap` and `pip`, packed as a
//! one-layer OCI layout with `umoci`. Built once and kept between tests and test runs in
//! a folder named by a hash of the recipe and the requirements, under a lock so that the
//! parallel test processes build it once; each test pushes it to its own registry.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use sha2::Digest as _;

use super::registry::{Registry, require};

/// The Debian release the root is made of.
const SUITE: &str = "bookworm";
/// What debootstrap installs beside the minimal base.
const PACKAGES: &str = "python3,python3-pip,git,patch";
/// The image's own `PATH`, as Debian's login shell sets it for root.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Changes whenever the steps below change what is built, so an old build is not reused.
const RECIPE: &str = "debootstrap minbase; pip --break-system-packages; trimmed; umoci repack; v1";
/// The tag of the image in its layout.
const TAG: &str = "python";

/// The Debian mirror debootstrap downloads from (`PLANWRIGHT_TEST_DEBIAN_MIRROR`).
fn mirror() -> String {
    std::env::var("PLANWRIGHT_TEST_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".to_owned())
}

/// Where built images are kept (`PLANWRIGHT_TEST_IMAGE_CACHE`, by default beside the
/// tests' other shared roots in the target folder).
fn cache_root() -> PathBuf {
    std::env::var_os("PLANWRIGHT_TEST_IMAGE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("images"))
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The certificate bundle the host's own pip trusts, so the image's pip reaches PyPI
/// through the same TLS interception, if any, as the host does.
fn host_certificates() -> PathBuf {
    ["PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .chain([PathBuf::from("/etc/ssl/certs/ca-certificates.crt")])
        .find(|p| p.is_file())
        .expect("the host has no certificate bundle for pip: install ca-certificates")
}

/// A one-layer OCI layout of the Python image for `requirements` (a pip requirements
/// file): built now if no earlier test or run built it; its path and tag.
pub fn python_image(requirements: &Path) -> (PathBuf, &'static str) {
    let wanted = std::fs::read(requirements)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", requirements.display()));
    let mut hash = sha2::Sha256::new();
    for part in [RECIPE, SUITE, PACKAGES] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.update(&wanted);
    let key = &hex::encode(hash.finalize())[..16];
    let root = cache_root();
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(format!("python-{key}"));
    let layout = dir.join("layout");
    // One process builds; the others wait here and then find it built.
    let lock = std::fs::File::create(root.join(format!("python-{key}.lock"))).unwrap();
    lock.lock().expect("the image cache's lock");
    if !dir.join(".complete").exists() {
        build(&dir, &wanted);
    }
    drop(lock);
    (layout, TAG)
}

/// Pushes the image for `requirements` to `registry` as `name_tag`.
pub fn push_python_image(registry: &Registry, requirements: &Path, name_tag: &str) {
    let (layout, tag) = python_image(requirements);
    registry.push_layout(&layout, tag, name_tag);
}

fn build(dir: &Path, requirements: &[u8]) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root_user = unsafe { libc::geteuid() } == 0;
    assert!(
        root_user,
        "building the Python image needs root (debootstrap and chroot): run the tests as root, as .ci/run does"
    );
    require("debootstrap", "debootstrap");
    require("umoci", "umoci");
    let started = Instant::now();
    // A build cut short can leave debootstrap's /proc and /sys mounted in its root.
    unmount_under(dir);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let rootfs = dir.join("rootfs");
    run(Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--include={PACKAGES}"), SUITE])
        .arg(&rootfs)
        .arg(mirror()));
    let debootstrapped = started.elapsed();
    std::fs::write(rootfs.join("tmp/requirements.txt"), requirements).unwrap();
    std::fs::copy(host_certificates(), rootfs.join("tmp/host-ca.crt")).unwrap();
    // The host's pip settings (a wheel folder, a certificate path) mean nothing inside.
    let mut pip = Command::new("chroot");
    pip.env_clear()
        .envs(
            std::env::vars()
                .filter(|(k, _)| k.to_ascii_lowercase().ends_with("_proxy"))
                .collect::<Vec<_>>(),
        )
        .env("PATH", PATH)
        .env("HOME", "/root")
        .env("LANG", "C.UTF-8")
        .arg(&rootfs)
        .args([
            "python3",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--break-system-packages",
            "--root-user-action=ignore",
            "--cert",
            "/tmp/host-ca.crt",
            "-r",
            "/tmp/requirements.txt",
        ]);
    run(&mut pip);
    // What a running image has no use for: device nodes (the sandbox brings its own),
    // downloaded packages and indexes, documentation, the install's scratch files.
    for trimmed in [
        "dev",
        "tmp",
        "var/cache/apt",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
    ] {
        let path = rootfs.join(trimmed);
        std::fs::remove_dir_all(&path).unwrap_or_else(|e| {
            if e.kind() != std::io::ErrorKind::NotFound {
                panic!("cannot trim {}: {e}", path.display())
            }
        });
        std::fs::create_dir_all(&path).unwrap();
    }
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let layout = dir.join("layout");
    let image = format!("{}:{TAG}", layout.display());
    run(Command::new("umoci")
        .arg("init")
        .arg("--layout")
        .arg(&layout));
    run(Command::new("umoci").args(["new", "--image", &image]));
    // The root becomes the empty image's unpacked root, and its repack the one layer, of
    // relative names as images have them.
    let bundle = dir.join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--image", &image])
        .arg(&bundle));
    std::fs::remove_dir(bundle.join("rootfs")).unwrap();
    std::fs::rename(&rootfs, bundle.join("rootfs")).unwrap();
    run(Command::new("umoci")
        .args(["repack", "--image", &image])
        .arg(&bundle));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &image,
        "--config.env",
        &format!("PATH={PATH}"),
        "--config.env",
        "LANG=C.UTF-8",
    ]));
    std::fs::remove_dir_all(&bundle).unwrap();
    std::fs::write(dir.join(".complete"), "").unwrap();
    eprintln!(
        "built the Python image in {:.0?} (debootstrap {:.0?}) at {}",
        started.elapsed(),
        debootstrapped,
        layout.display()
    );
}

/// Lazily unmounts whatever is mounted below `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut below: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect();
    below.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for mount in below {
        run(Command::new("umount").arg("-l").arg(mount));
    }
}
