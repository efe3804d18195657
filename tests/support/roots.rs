//! Root folders for sandboxes, built in the test the way an unpacked image looks: a
//! busybox one with no libc at all (from Debian's `busybox-static`), the same with a
//! glibc that is not the host's, and one with the host's own programs (hard links to
//! `/usr`) for the escape suite's tools. Each holds files the host lacks.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use planwright::sandbox::Root;

/// The statically linked busybox of Debian's `busybox-static` package.
const BUSYBOX: &str = "/bin/busybox";

/// A file only the test images have, and its content.
pub const IMAGE_ONLY_FILE: &str = "/etc/image-release";
pub const IMAGE_RELEASE: &str = "planwright test image\n";

/// A program only the test images have, on the image's own `PATH` only.
pub const IMAGE_ONLY_TOOL: &str = "image-tool";
pub const IMAGE_PATH: &str = "/opt/image/bin:/bin";

/// A root with busybox's applets in `/bin` and nothing else to run programs with: no
/// loader, no libc. Its `Env` sets a `PATH` of its own and a variable.
pub fn busybox(dir: &Path) -> Root {
    assert!(
        Path::new(BUSYBOX).is_file(),
        "{BUSYBOX} is missing: install Debian's busybox-static package (.ci/run does)"
    );
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
    let list = std::process::Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .expect("busybox runs");
    for applet in String::from_utf8(list.stdout).unwrap().lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
    }
    let tools = dir.join("opt/image/bin");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join(IMAGE_ONLY_TOOL),
        "#!/bin/sh\necho \"image tool in $IMAGE_FLAVOUR\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        tools.join(IMAGE_ONLY_TOOL),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    base_files(dir);
    Root {
        dir: dir.to_path_buf(),
        env: vec![
            ("PATH".into(), IMAGE_PATH.into()),
            ("IMAGE_FLAVOUR".into(), "busybox".into()),
            // The run's HOME is planwright's, whatever the image says.
            ("HOME".into(), "/root".into()),
        ],
    }
}

/// The busybox root with a glibc that is not the host's where glibc programs look for
/// theirs (a loader and a libc that cannot load anything), and a preload file naming a
/// library, as a hostile image could ship: planwright's pieces must use none of them.
pub fn foreign_libc(dir: &Path) -> Root {
    let root = busybox(dir);
    for (path, content) in [
        ("lib64/ld-linux-x86-64.so.2", "not the host's loader"),
        ("lib/x86_64-linux-gnu/libc.so.6", "not the host's libc"),
        (
            "etc/ld.so.preload",
            "/lib/x86_64-linux-gnu/libimage-preload.so\n",
        ),
    ] {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root
}

/// Builds, with the host's C compiler, a shared library that writes `marker` (a path as
/// the sandbox sees it) as soon as it is loaded, before anything calls into it, as a
/// hostile image's library would run its code.
pub fn marker_library(out: &Path, marker: &Path) {
    let source = out.with_extension("c");
    std::fs::write(
        &source,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void loaded(void) {{\n\
               int fd = open({marker:?}, O_WRONLY | O_CREAT | O_APPEND, 0644);\n\
               if (fd >= 0) {{ write(fd, \"loaded\\n\", 7); close(fd); }}\n\
             }}\n\
             int OSSL_provider_init(void) {{ return 0; }}\n"
        ),
    )
    .unwrap();
    cc(&["-shared", "-fPIC"], &source, out);
    std::fs::remove_file(&source).unwrap();
}

/// Compiles `source` into `out` with the host's C compiler.
pub fn cc(args: &[&str], source: &Path, out: &Path) {
    let status = std::process::Command::new("cc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .expect("cc is missing: install gcc (.ci/run and scripts/test do)");
    assert!(status.success(), "cc could not build {}", out.display());
}

/// The busybox root with what a hostile image could ship to get code into a glibc program:
/// a name service of its own (`evil`) in its `nsswitch.conf` and its library folder, one
/// named with a `/` (which glibc opens relative to the working directory, the workspace
/// `cwd`, where a repository could put it), an OpenSSL configuration that loads a provider
/// into node, and a glibc of the host's version, so that a static program's loading of a
/// library would succeed too. Each library writes `marker` when loaded.
pub fn hostile_libraries(dir: &Path, cwd: &Path, marker: &Path) -> Root {
    let mut root = busybox(dir);
    let arch = format!("{}-linux-gnu", std::env::consts::ARCH);
    let lib = dir.join("lib").join(&arch);
    std::fs::create_dir_all(&lib).unwrap();
    marker_library(&lib.join("libnss_evil.so.2"), marker);
    std::fs::create_dir_all(cwd.join("libnss_")).unwrap();
    marker_library(&cwd.join("workspace-evil.so.2"), marker);
    marker_library(&dir.join("evil-provider.so"), marker);
    for host in ["libc.so.6", "ld-linux-x86-64.so.2"] {
        std::fs::copy(Path::new("/lib").join(&arch).join(host), lib.join(host)).unwrap();
    }
    std::fs::write(
        dir.join("etc/nsswitch.conf"),
        "passwd: evil /../workspace-evil files\ngroup: evil files\nhosts: evil files\n\
         initgroups: evil files\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("etc/hosts"),
        "127.0.0.1 localhost\n10.1.2.3 image-host\n",
    )
    .unwrap();
    let openssl = "nodejs_conf = nodejs_init\nopenssl_conf = nodejs_init\n\
                   [nodejs_init]\nproviders = providers\n\
                   [providers]\nevil = evil\n\
                   [evil]\nmodule = /evil-provider.so\nactivate = 1\n";
    for conf in ["etc/ssl/openssl.cnf", "usr/lib/ssl/openssl.cnf"] {
        std::fs::create_dir_all(dir.join(conf).parent().unwrap()).unwrap();
        std::fs::write(dir.join(conf), openssl).unwrap();
    }
    root.env
        .push(("OPENSSL_CONF".into(), "/etc/ssl/openssl.cnf".into()));
    root
}

/// A root with the host's own programs and libraries (`/usr` hard-linked, so building it
/// is quick, and the merged-/usr links), an `/etc` of its own with a root-only file, and
/// the image-only files: the escape suite's tools (curl, bash, python3) run in it.
/// Built once per target folder and shared, as the image cache shares an unpacked image.
pub fn host_like() -> Root {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("host-like-root");
    if !dir.join(".complete").exists() {
        let building = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let status = std::process::Command::new("cp")
            .args(["-al", "/usr"])
            .arg(building.path().join("usr"))
            .status()
            .unwrap();
        assert!(status.success(), "cp -al /usr failed");
        for link in ["bin", "sbin", "lib", "lib64"] {
            std::os::unix::fs::symlink(format!("usr/{link}"), building.path().join(link)).unwrap();
        }
        let etc = building.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        for name in ["passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache"] {
            std::fs::copy(Path::new("/etc").join(name), etc.join(name)).unwrap();
        }
        // An image's own root-only file, unpacked as root: not readable inside.
        std::fs::write(etc.join("shadow"), "root:image-secret-hash:19000::::::\n").unwrap();
        std::fs::set_permissions(etc.join("shadow"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        base_files(building.path());
        std::fs::write(building.path().join(".complete"), "").unwrap();
        let building = building.keep();
        std::fs::set_permissions(&building, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another test may have finished first; its root is as good.
        if std::fs::rename(&building, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&building);
        }
    }
    Root {
        dir,
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
    }
}

fn base_files(dir: &Path) {
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        dir.join(IMAGE_ONLY_FILE.trim_start_matches('/')),
        IMAGE_RELEASE,
    )
    .unwrap();
    if !etc.join("passwd").exists() {
        std::fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    }
    for sub in ["root", "var/lib", "usr/lib"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs each named test, an `async fn(Fixture)` of the calling module, twice: on the
/// host's root (`Fixture::new()`) and on an image root (`Fixture::in_image()`).
#[macro_export]
macro_rules! on_both_roots {
    ($fixture:ident: $($test:ident),+ $(,)?) => {$(
        mod $test {
            #[tokio::test]
            async fn host_root() {
                super::$test(super::$fixture::new()).await
            }

            #[tokio::test]
            async fn image_root() {
                super::$test(super::$fixture::in_image()).await
            }
        }
    )+};
}
