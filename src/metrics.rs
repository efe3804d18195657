//! The process's own metrics, which any module records into (sandbox runs by outcome and
//! duration), and the Prometheus text format (0.0.4) that `/metrics` is written in. A leaf:
//! it imports nothing of the crate, so recording a metric adds no dependency on the server.
//! Not prometheus-client: it writes OpenMetrics only, where a counter's `# TYPE` loses
//! `_total` and families with no series vanish.

use std::collections::BTreeMap;
use std::fmt::{Display, Write};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a family's series are, as its `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up, from the process's or the database's start.
    Counter,
    /// A value read at scrape time, up or down.
    Gauge,
    /// Counts of observations by upper bound (`le`), with their sum and count.
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One family of `/metrics` series, written once: the exposition's HELP and TYPE lines
/// come from it, and so does the metrics reference. [`FAMILIES`] lists every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    /// The labels its series carry (a histogram's `le` aside).
    pub labels: &'static [&'static str],
    /// What it counts, in the HELP line's words.
    pub help: &'static str,
}

impl Family {
    pub const BUILD_INFO: Family = Family {
        name: "planwright_build_info",
        kind: Kind::Gauge,
        labels: &["version"],
        help: "The running planwright version (always 1).",
    };
    pub const DELIVERIES: Family = Family {
        name: "planwright_deliveries_total",
        kind: Kind::Counter,
        labels: &["forge", "event", "outcome"],
        help: "Webhook deliveries accepted and stored, by forge, event and outcome (queued: jobs \
               enqueued; ignored: nothing to do; rejected: signed but unreadable).",
    };
    pub const JOBS: Family = Family {
        name: "planwright_jobs",
        kind: Kind::Gauge,
        labels: &["kind", "state"],
        help: "Jobs in the durable queue, by kind and state (queued, running, done, dead).",
    };
    pub const QUEUE_OLDEST_AGE: Family = Family {
        name: "planwright_queue_oldest_age_seconds",
        kind: Kind::Gauge,
        labels: &[],
        help: "How long the oldest job that is due has been waiting for a worker (0: none waits).",
    };
    pub const WORK_WAITING: Family = Family {
        name: "planwright_work_waiting",
        kind: Kind::Gauge,
        labels: &["work"],
        help: "Work waiting for a worker (queued, backoffs included), by work: runs (executions, \
               MAX_RUNS per worker) and jobs (every other job, WORKERS per worker).",
    };
    pub const WORK_RUNNING: Family = Family {
        name: "planwright_work_running",
        kind: Kind::Gauge,
        labels: &["work"],
        help: "Work a worker holds a lease on, by work: runs and jobs.",
    };
    pub const SESSIONS: Family = Family {
        name: "planwright_sessions",
        kind: Kind::Gauge,
        labels: &["state"],
        help: "Sessions by state; ended ones (pr_opened, failed, cancelled) stay counted.",
    };
    pub const EXECUTOR_RUNS: Family = Family {
        name: "planwright_executor_runs",
        kind: Kind::Gauge,
        labels: &["executor", "state"],
        help: "Executor attempts by executor and state (running, verified, published, failed, \
               abandoned).",
    };
    pub const ATTEMPTS: Family = Family {
        name: "planwright_attempts_total",
        kind: Kind::Counter,
        labels: &["source", "executor", "model", "outcome"],
        help: "Executor attempts that ended, by source (run, eval), executor, model (none: the \
               executor names none) and outcome (verified; failed: checks, review or no result; \
               stopped: cancelled or failed by the infrastructure).",
    };
    pub const MODEL_TOKENS: Family = Family {
        name: "planwright_model_tokens_total",
        kind: Kind::Counter,
        labels: &["role", "provider", "model", "kind"],
        help: "Model tokens used, by role, provider, model and kind (input, output, cache_read, \
               cache_write).",
    };
    pub const MODEL_COST: Family = Family {
        name: "planwright_model_cost_usd_total",
        kind: Kind::Counter,
        labels: &["role", "provider", "model"],
        help: "What model calls cost in US dollars, at the configured prices, by role, provider \
               and model.",
    };
    pub const FORGE_REQUESTS: Family = Family {
        name: "planwright_forge_requests_total",
        kind: Kind::Counter,
        labels: &["forge", "route", "status"],
        help: "Requests this process made to a forge's API, by forge, route (method and path with \
               names and numbers taken out) and answer status (error: none came).",
    };
    pub const FORGE_REQUESTS_HELD: Family = Family {
        name: "planwright_forge_requests_held_total",
        kind: Kind::Counter,
        labels: &["forge"],
        help: "Forge requests this process held back instead of sending, because the identity's \
               rate limit was down to its reserve; the work waits for the reset.",
    };
    pub const IMAGE_CACHE_PULLS: Family = Family {
        name: "planwright_image_cache_pulls_total",
        kind: Kind::Counter,
        labels: &["result"],
        help: "Environment image pulls by this process: hit when the unpacked image was cached, \
               miss when it was downloaded and unpacked.",
    };
    pub const IMAGE_CACHE_DOWNLOADED: Family = Family {
        name: "planwright_image_cache_downloaded_bytes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Bytes of image layers downloaded by this process's cache misses.",
    };
    pub const SETUP_CACHE_LOOKUPS: Family = Family {
        name: "planwright_setup_cache_lookups_total",
        kind: Kind::Counter,
        labels: &["result"],
        help: "Setup phases by this process that could use the setup cache: hit when it was \
               restored from the cache, miss when its commands ran.",
    };
    pub const SETUP_CACHE_RESTORED: Family = Family {
        name: "planwright_setup_cache_restored_bytes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Bytes copied out of the setup cache by this process's hits.",
    };
    pub const SANDBOX_RUNS: Family = Family {
        name: "planwright_sandbox_runs_total",
        kind: Kind::Counter,
        labels: &["outcome"],
        help: "Commands run in a sandbox by this process, by outcome (ok, failed: non-zero exit or \
               signal, timeout: killed at the wall-clock limit, error: could not start).",
    };
    pub const SANDBOX_RUN_DURATION: Family = Family {
        name: "planwright_sandbox_run_duration_seconds",
        kind: Kind::Histogram,
        labels: &[],
        help: "Wall-clock time of sandbox runs in this process, start to exit.",
    };
    pub const FORGE_RATE_LIMIT_REMAINING: Family = Family {
        name: "planwright_forge_rate_limit_remaining",
        kind: Kind::Gauge,
        labels: &["forge", "scope"],
        help: "What the forge's last answer said is left of the identity's rate limit (scope: a \
               GitHub host's installation or the app itself, or a GitLab API).",
    };
    pub const FORGE_RATE_LIMIT_RESET: Family = Family {
        name: "planwright_forge_rate_limit_reset_seconds",
        kind: Kind::Gauge,
        labels: &["forge", "scope"],
        help: "When (Unix seconds) the identity's rate limit window starts again, as the forge's \
               last answer said.",
    };
}

/// Every family `/metrics` announces, in the order it announces them.
pub const FAMILIES: &[Family] = &[
    Family::BUILD_INFO,
    Family::DELIVERIES,
    Family::JOBS,
    Family::QUEUE_OLDEST_AGE,
    Family::WORK_WAITING,
    Family::WORK_RUNNING,
    Family::SESSIONS,
    Family::EXECUTOR_RUNS,
    Family::ATTEMPTS,
    Family::MODEL_TOKENS,
    Family::MODEL_COST,
    Family::FORGE_REQUESTS,
    Family::FORGE_REQUESTS_HELD,
    Family::IMAGE_CACHE_PULLS,
    Family::IMAGE_CACHE_DOWNLOADED,
    Family::SETUP_CACHE_LOOKUPS,
    Family::SETUP_CACHE_RESTORED,
    Family::SANDBOX_RUNS,
    Family::SANDBOX_RUN_DURATION,
    Family::FORGE_RATE_LIMIT_REMAINING,
    Family::FORGE_RATE_LIMIT_RESET,
];

/// Upper bounds (seconds) of the sandbox run duration buckets: from a quick `git status`
/// to a full test suite near the default 30-minute wall-clock limit.
const DURATION_BUCKETS: [f64; 11] = [
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// How a sandbox run ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxRunEnd {
    /// Exit code 0.
    Ok,
    /// Another exit code, or killed by a signal.
    Failed,
    /// Killed at the wall-clock limit.
    Timeout,
    /// The sandbox could not start the command.
    Error,
}

impl SandboxRunEnd {
    const ALL: [SandboxRunEnd; 4] = [
        SandboxRunEnd::Ok,
        SandboxRunEnd::Failed,
        SandboxRunEnd::Timeout,
        SandboxRunEnd::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            SandboxRunEnd::Ok => "ok",
            SandboxRunEnd::Failed => "failed",
            SandboxRunEnd::Timeout => "timeout",
            SandboxRunEnd::Error => "error",
        }
    }
}

/// Sandbox runs of this process: counts by outcome and a duration histogram. Process-wide
/// because sandboxes are made wherever a job needs one, far from the router's state.
struct SandboxRuns {
    outcomes: [AtomicU64; SandboxRunEnd::ALL.len()],
    /// Per bucket, not cumulative; the last slot is beyond the largest bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

static SANDBOX_RUNS: SandboxRuns = SandboxRuns {
    outcomes: [const { AtomicU64::new(0) }; SandboxRunEnd::ALL.len()],
    buckets: [const { AtomicU64::new(0) }; DURATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64::new(0),
};

/// Counts one sandbox run that took `elapsed`, by how it ended.
pub fn record_sandbox_run(outcome: SandboxRunEnd, elapsed: Duration) {
    let slot = SandboxRunEnd::ALL
        .iter()
        .position(|o| *o == outcome)
        .unwrap_or_default();
    SANDBOX_RUNS.outcomes[slot].fetch_add(1, Ordering::Relaxed);
    let secs = elapsed.as_secs_f64();
    let bucket = DURATION_BUCKETS
        .iter()
        .position(|bound| secs <= *bound)
        .unwrap_or(DURATION_BUCKETS.len());
    SANDBOX_RUNS.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    SANDBOX_RUNS.sum_micros.fetch_add(micros, Ordering::Relaxed);
}

/// Image pulls of this process: served from the cache, downloaded, and bytes downloaded.
static IMAGE_CACHE: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Counts one image pull: a cache hit, or a miss that downloaded `bytes` of layers.
pub fn record_image_pull(hit: bool, bytes: u64) {
    IMAGE_CACHE[usize::from(!hit)].fetch_add(1, Ordering::Relaxed);
    IMAGE_CACHE[2].fetch_add(bytes, Ordering::Relaxed);
}

/// Setup phases of this process: restored from the setup cache, run, and bytes restored.
static SETUP_CACHE: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Counts one setup phase that could use the setup cache: a hit that restored `bytes`, or
/// a miss that ran the commands.
pub fn record_setup_cache(hit: bool, bytes: u64) {
    SETUP_CACHE[usize::from(!hit)].fetch_add(1, Ordering::Relaxed);
    SETUP_CACHE[2].fetch_add(bytes, Ordering::Relaxed);
}

/// Forge requests of this process by forge, route and status (`error`: no answer).
/// Forge calls held back for a rate limit's reset, by forge.
static FORGE_HELD: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts one forge call held back because its identity's rate limit is down to the
/// reserve.
pub fn record_forge_request_held(forge: &'static str) {
    if let Ok(mut map) = FORGE_HELD.lock() {
        *map.entry(forge).or_default() += 1;
    }
}

static FORGE_REQUESTS: Mutex<BTreeMap<(&'static str, String, String), u64>> =
    Mutex::new(BTreeMap::new());

tokio::task_local! {
    /// The forge requests of the job being run, where the job runner counts them.
    static JOB_REQUESTS: Arc<RequestTally>;
}

/// One job's forge requests by route, for the line logged when it ends.
#[derive(Debug, Default)]
pub struct RequestTally {
    by_route: Mutex<BTreeMap<String, u64>>,
}

impl RequestTally {
    pub fn total(&self) -> u64 {
        self.by_route.lock().map_or(0, |m| m.values().sum())
    }

    /// `GET /repos/{owner}/{repo}/issues/{n}: 2, …`, most frequent first.
    pub fn summary(&self) -> String {
        let Ok(map) = self.by_route.lock() else {
            return String::new();
        };
        let mut routes: Vec<(&String, &u64)> = map.iter().collect();
        routes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        routes
            .iter()
            .map(|(route, n)| format!("{route}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn by_route(&self) -> BTreeMap<String, u64> {
        self.by_route.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Runs `work` with its forge requests counted into `tally` (not those of tasks it
/// spawns, which the process-wide count still holds).
pub async fn counting_forge_requests<F: Future>(tally: Arc<RequestTally>, work: F) -> F::Output {
    JOB_REQUESTS.scope(tally, work).await
}

/// Counts one forge request: `route` as `forge::route` makes it, `status` the answer's
/// code or `error`.
pub fn record_forge_request(forge: &'static str, route: &str, status: &str) {
    if let Ok(mut map) = FORGE_REQUESTS.lock() {
        *map.entry((forge, route.to_owned(), status.to_owned()))
            .or_default() += 1;
    }
    let _ = JOB_REQUESTS.try_with(|tally| {
        if let Ok(mut map) = tally.by_route.lock() {
            *map.entry(format!("{forge} {route}")).or_default() += 1;
        }
    });
}

/// Appends this process's counters to `out`.
pub fn render_process(out: &mut Exposition) {
    out.family(&Family::FORGE_REQUESTS);
    if let Ok(map) = FORGE_REQUESTS.lock() {
        for ((forge, route, status), n) in map.iter() {
            out.sample(
                "planwright_forge_requests_total",
                &[("forge", forge), ("route", route), ("status", status)],
                n,
            );
        }
    }
    out.family(&Family::FORGE_REQUESTS_HELD);
    if let Ok(map) = FORGE_HELD.lock() {
        for (forge, n) in map.iter() {
            out.sample(
                "planwright_forge_requests_held_total",
                &[("forge", forge)],
                n,
            );
        }
    }
    out.family(&Family::IMAGE_CACHE_PULLS);
    for (result, n) in ["hit", "miss"].iter().zip(&IMAGE_CACHE) {
        out.sample(
            "planwright_image_cache_pulls_total",
            &[("result", result)],
            n.load(Ordering::Relaxed),
        );
    }
    out.family(&Family::IMAGE_CACHE_DOWNLOADED);
    out.sample(
        "planwright_image_cache_downloaded_bytes_total",
        &[],
        IMAGE_CACHE[2].load(Ordering::Relaxed),
    );
    out.family(&Family::SETUP_CACHE_LOOKUPS);
    for (result, n) in ["hit", "miss"].iter().zip(&SETUP_CACHE) {
        out.sample(
            "planwright_setup_cache_lookups_total",
            &[("result", result)],
            n.load(Ordering::Relaxed),
        );
    }
    out.family(&Family::SETUP_CACHE_RESTORED);
    out.sample(
        "planwright_setup_cache_restored_bytes_total",
        &[],
        SETUP_CACHE[2].load(Ordering::Relaxed),
    );
    out.family(&Family::SANDBOX_RUNS);
    for (outcome, n) in SandboxRunEnd::ALL.iter().zip(&SANDBOX_RUNS.outcomes) {
        out.sample(
            "planwright_sandbox_runs_total",
            &[("outcome", outcome.as_str())],
            n.load(Ordering::Relaxed),
        );
    }
    out.family(&Family::SANDBOX_RUN_DURATION);
    let mut cumulative = 0;
    for (i, count) in SANDBOX_RUNS.buckets.iter().enumerate() {
        cumulative += count.load(Ordering::Relaxed);
        let bound = DURATION_BUCKETS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), f64::to_string);
        out.sample(
            "planwright_sandbox_run_duration_seconds_bucket",
            &[("le", &bound)],
            cumulative,
        );
    }
    out.sample(
        "planwright_sandbox_run_duration_seconds_sum",
        &[],
        SANDBOX_RUNS.sum_micros.load(Ordering::Relaxed) as f64 / 1_000_000.0,
    );
    out.sample(
        "planwright_sandbox_run_duration_seconds_count",
        &[],
        cumulative,
    );
}

/// An exposition being written: families announced with HELP and TYPE, then their samples.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Announces a family: its HELP and TYPE lines, before its samples.
    pub fn family(&mut self, family: &Family) {
        let Family {
            name, kind, help, ..
        } = family;
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.as_str());
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A label value as the text format needs it: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        let mut out = Exposition::default();
        out.sample("m", &[("a", "x\"y"), ("b", "z")], 3);
        assert_eq!(out.text, "m{a=\"x\\\"y\",b=\"z\"} 3\n");
    }

    #[test]
    fn help_text_stays_on_one_line() {
        let mut out = Exposition::default();
        out.family(&Family {
            name: "m",
            kind: Kind::Counter,
            labels: &[],
            help: "first\nsecond \\ third",
        });
        assert_eq!(
            out.text,
            "# HELP m first\\nsecond \\\\ third\n# TYPE m counter\n"
        );
    }
}
