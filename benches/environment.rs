//! A cold pull of an environment image, planwright against the tools a person would use:
//! `planwright`'s registry client and unpacker (download, verify, unpack into a fresh
//! cache) beside `skopeo copy` to an OCI layout followed by `umoci unpack --rootless`, run
//! round-robin against the same real registry on loopback, on the same image.
//!
//! The image: Python's standard library from this host (about 1 500 files, 50 MB) in one
//! layer and a static busybox in a second, gzip-compressed as umoci writes them.
//!
//! `cargo bench --bench environment` (needs docker-registry, umoci, skopeo, busybox-static);
//! `PLANWRIGHT_BENCH_ENVIRONMENT_RUNS` sets the rounds (default 5).

#[path = "../tests/support/registry.rs"]
#[allow(dead_code)]
mod registry;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use planwright::config::images::{ImageSettings, RegistryCredentials};
use planwright::environment::Environments;
use planwright::ids::image::ImageRef;

use registry::{Access, Registry, UmociImage, busybox_root};

const STDLIB: &str = "/usr/lib/python3.11";

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "cp -a {}", from.display());
}

fn planwright_pull(runtime: &tokio::runtime::Runtime, image: &ImageRef, data: &Path) -> f64 {
    // The loopback registry is listed, as its operator would list it.
    let settings = ImageSettings {
        credentials: RegistryCredentials::default(),
        cache_max: 20 << 30,
        private: vec![image.registry().to_owned()],
        ..ImageSettings::default()
    };
    let started = Instant::now();
    let environments = Environments::new(data, &settings).unwrap();
    let lease = runtime.block_on(environments.pull(image)).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert!(lease.unpacked() && lease.root.join("bin/busybox").is_file());
    elapsed
}

fn skopeo_umoci(reference: &str, dir: &Path) -> f64 {
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    let started = Instant::now();
    let copy = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("oci:{}:bench", layout.display()))
        .status()
        .unwrap();
    assert!(copy.success(), "skopeo copy");
    let unpack = Command::new("umoci")
        .args(["unpack", "--rootless", "--image"])
        .arg(format!("{}:bench", layout.display()))
        .arg(&bundle)
        .status()
        .unwrap();
    assert!(unpack.success(), "umoci unpack");
    let elapsed = started.elapsed().as_secs_f64();
    assert!(bundle.join("rootfs/bin/busybox").is_file());
    elapsed
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("PLANWRIGHT_BENCH_ENVIRONMENT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    assert!(
        Path::new(STDLIB).is_dir(),
        "{STDLIB} is missing: install python3"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = runtime.block_on(Registry::start(Access::Anonymous));
    let work = tempfile::tempdir().unwrap();
    let mut image = UmociImage::new(work.path(), "bench");
    image
        .layer(|root| {
            std::fs::create_dir_all(root.join("usr/lib")).unwrap();
            copy_tree(Path::new(STDLIB), &root.join("usr/lib"));
        })
        .layer(busybox_root);
    registry.push_layout(&image.layout, "bench", "bench/python:1");
    let reference = registry.reference("bench/python:1");
    let parsed = ImageRef::parse(&reference).unwrap();

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let dir = tempfile::tempdir_in(work.path()).unwrap();
        ours.push(planwright_pull(&runtime, &parsed, &dir.path().join("data")));
        let dir = tempfile::tempdir_in(work.path()).unwrap();
        theirs.push(skopeo_umoci(&reference, dir.path()));
        eprintln!(
            "round {}: planwright {:.3}s, skopeo + umoci {:.3}s",
            round + 1,
            ours[round],
            theirs[round]
        );
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "cold pull + unpack of a 2-layer, ~50 MB image from a loopback registry ({runs} rounds, medians)"
    );
    println!("  planwright env pull      {ours:.3}s");
    println!("  skopeo copy + umoci unpack {theirs:.3}s");
    println!("  ratio planwright / skopeo+umoci: {:.2}", ours / theirs);
}
