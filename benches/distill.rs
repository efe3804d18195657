//! Distillation on the real test logs: bytes in against bytes of the model rendering out
//! (with a check that every failing id of the runner's truth is in it), beside `gzip -9` of
//! the same log as the baseline for size; and the time to distill the largest log beside
//! the time to merely split it into lines (the floor any reader pays). Then a large
//! synthetic stream for throughput and peak memory.
//!
//! `cargo bench --bench distill` (fixtures from ../shared/fixtures/test-logs).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use planwright::distill::{self, lines::Lines, render};

fn gzip_len(bytes: &[u8]) -> usize {
    let mut child = Command::new("gzip")
        .arg("-9c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip runs");
    let mut stdin = child.stdin.take().unwrap();
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out.stdout.len()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/test-logs");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("test-log fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    println!(
        "{:<38} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "log", "bytes in", "model", "ratio", "gzip -9", "ratio", "ids"
    );
    let (mut total_in, mut total_out, mut total_gz) = (0usize, 0usize, 0usize);
    let mut largest = (0usize, PathBuf::new());
    for log in &logs {
        let bytes = std::fs::read(log).unwrap();
        let truth: serde_json::Value =
            serde_json::from_slice(&std::fs::read(log.with_extension("truth.json")).unwrap())
                .unwrap();
        let report = distill::distill(&bytes[..], None, None).unwrap();
        let model = render::compact(&report);
        let ids = truth["failing"].as_array().unwrap();
        let kept = ids
            .iter()
            .filter(|id| model.contains(id.as_str().unwrap()))
            .count();
        let gz = gzip_len(&bytes);
        total_in += bytes.len();
        total_out += model.len();
        total_gz += gz;
        if bytes.len() > largest.0 {
            largest = (bytes.len(), log.clone());
        }
        println!(
            "{:<38} {:>9} {:>8} {:>7.1}x {:>8} {:>7.1}x {:>3}/{:<3}",
            log.file_stem().unwrap().to_string_lossy(),
            bytes.len(),
            model.len(),
            bytes.len() as f64 / model.len().max(1) as f64,
            gz,
            bytes.len() as f64 / gz as f64,
            kept,
            ids.len()
        );
    }
    println!(
        "{:<38} {:>9} {:>8} {:>7.1}x {:>8} {:>7.1}x",
        "all",
        total_in,
        total_out,
        total_in as f64 / total_out.max(1) as f64,
        total_gz,
        total_in as f64 / total_gz as f64
    );

    let bytes = std::fs::read(&largest.1).unwrap();
    let runs = 30;
    let mut distill_ms = Vec::new();
    let mut split_ms = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let report = distill::distill(&bytes[..], None, None).unwrap();
        std::hint::black_box(render::compact(&report));
        distill_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let mut lines = Lines::new(&bytes[..]);
        let mut n = 0usize;
        while let Some(l) = lines.next_line().unwrap() {
            n += l.len();
        }
        std::hint::black_box(n);
        split_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (d, s) = (median(distill_ms), median(split_ms));
    println!(
        "largest log {} ({} bytes): distill {:.2} ms, line split alone {:.2} ms (baseline), ratio {:.1}x",
        largest.1.file_name().unwrap().to_string_lossy(),
        bytes.len(),
        d,
        s,
        d / s
    );

    // A large synthetic stream: libtest lines, progress noise and occasional failures.
    let mb: usize = std::env::var("BENCH_STREAM_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    // Each chunk is one libtest binary's run: 2000 tests, two of them failing.
    let mut chunk = String::from(
        "     Running unittests src/lib.rs (target/debug/deps/big-0123)\n\nrunning 2000 tests\n",
    );
    for i in 0..2000 {
        if i % 997 == 0 {
            chunk.push_str(&format!("test module_{i}::case ... FAILED\n"));
        } else {
            chunk.push_str(&format!("test module_{i}::case ... ok\n"));
        }
    }
    chunk.push_str("\nfailures:\n\n");
    for i in [0, 997, 1994] {
        chunk.push_str(&format!(
            "---- module_{i}::case stdout ----\n\nthread 'module_{i}::case' panicked at src/lib.rs:{i}:5:\nassertion failed: ok\n\n"
        ));
    }
    chunk
        .push_str("failures:\n    module_0::case\n    module_997::case\n    module_1994::case\n\n");
    chunk.push_str("test result: FAILED. 1997 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.50s\n\n");
    let repeats = mb * 1024 * 1024 / chunk.len();
    struct Repeat<'a> {
        chunk: &'a [u8],
        left: usize,
        pos: usize,
    }
    impl std::io::Read for Repeat<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Ok(0);
            }
            let n = buf.len().min(self.chunk.len() - self.pos);
            buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.chunk.len() {
                self.pos = 0;
                self.left -= 1;
            }
            Ok(n)
        }
    }
    let before = peak_rss_mib();
    let t = Instant::now();
    let report = distill::distill(
        Repeat {
            chunk: chunk.as_bytes(),
            left: repeats,
            pos: 0,
        },
        None,
        None,
    )
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "stream: {} MiB in {:.1} s ({:.0} MiB/s), runner {}, {} passed, {} failed, {} failures kept, peak RSS {:.0} MiB (before: {:.0} MiB)",
        report.input_bytes / (1024 * 1024),
        secs,
        report.input_bytes as f64 / (1024.0 * 1024.0) / secs,
        report.runner,
        report.passed,
        report.failed,
        report.failures.len(),
        peak_rss_mib(),
        before
    );
}
