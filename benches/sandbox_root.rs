//! Sandbox start from a cached image root against today's host-root start: the same
//! `true` command through planwright's own `Bwrap`, on the host's allowlisted folders, on
//! a busybox root (no libc: a small image) and on a root with the host's whole `/usr`
//! hard-linked (a large glibc image), each once plain and once with a bridge (the relay
//! starting through the host's loader). The roots are folders already unpacked, as the
//! image cache hands them out; what is measured is bubblewrap's setup of the mounts and
//! planwright's around it.
//!
//! Cases run round-robin in one process; the report is each case's median and its ratio
//! to the host root with the same bridges. No timing is asserted.
//!
//! `cargo bench --bench sandbox_root` (as root, like CI; needs bubblewrap and
//! busybox-static). `PLANWRIGHT_BENCH_SANDBOX_RUNS` sets the rounds (default 40).

#[path = "../tests/support/mod.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use planwright::sandbox::{Bridge, Bwrap, Command, Root, Sandbox};
use support::roots;

struct Case {
    name: &'static str,
    root: Option<Root>,
    bridged: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let runs: usize = std::env::var("PLANWRIGHT_BENCH_SANDBOX_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary folder");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace = dir.path().join("workspace");
    let busybox_dir = dir.path().join("busybox");
    for d in [&workspace, &busybox_dir] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let busybox = roots::busybox(&busybox_dir);
    let glibc = roots::host_like();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Nothing connects during `true`; the socket only has to be there to be bridged.
    let socket = dir.path().join("bridge.sock");
    let _listener = runtime.block_on(async { tokio::net::UnixListener::bind(&socket).unwrap() });
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let sandbox = Bwrap::new(Vec::new())
        .expect("bubblewrap is installed")
        .with_relay_program(env!("CARGO_BIN_EXE_planwright"));

    let mut cases = Vec::new();
    for bridged in [false, true] {
        for (name, root) in [
            ("host root", None),
            ("busybox image", Some(busybox.clone())),
            ("glibc image (host /usr)", Some(glibc.clone())),
        ] {
            cases.push(Case {
                name,
                root,
                bridged,
            });
        }
    }
    let command = |case: &Case| {
        let mut cmd = Command::new(&workspace, vec!["true".into()]);
        cmd.root = case.root.clone();
        if case.bridged {
            cmd.bridges.push(Bridge {
                port: 9000,
                socket: socket.clone(),
            });
        }
        cmd
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    runtime.block_on(async {
        // One unmeasured round: page cache and the lease folder warm for every case.
        for case in &cases {
            let out = sandbox.run(&command(case)).await.expect("the sandbox runs");
            assert!(out.exit.success(), "{}: {}", case.name, out.stderr.text());
        }
        for round in 0..runs {
            for (i, case) in cases.iter().enumerate() {
                let cmd = command(case);
                let started = Instant::now();
                let out = sandbox.run(&cmd).await.expect("the sandbox runs");
                samples[i].push(started.elapsed().as_secs_f64() * 1000.0);
                assert!(out.exit.success(), "{}: {}", case.name, out.stderr.text());
            }
            if (round + 1) % 10 == 0 {
                eprintln!("  {}/{runs} rounds", round + 1);
            }
        }
    });
    println!("sandbox start (`true`): median of {runs} round-robin runs, milliseconds");
    println!(
        "{:<28} {:>8} {:>10} {:>10}",
        "root", "bridge", "ms", "vs host"
    );
    let medians: Vec<f64> = samples.into_iter().map(median).collect();
    for (i, case) in cases.iter().enumerate() {
        let host = cases
            .iter()
            .position(|c| c.root.is_none() && c.bridged == case.bridged)
            .unwrap();
        println!(
            "{:<28} {:>8} {:>10.2} {:>10.3}",
            case.name,
            if case.bridged { "yes" } else { "no" },
            medians[i],
            medians[i] / medians[host]
        );
    }
}
