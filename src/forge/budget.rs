//! Each forge identity's rate limit as a budget: what the last answer said is left
//! (`x-ratelimit-*` on GitHub, `RateLimit-*` on GitLab), kept per process, so work that
//! would spend the last of it waits for the reset instead of failing on the forge.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// What one identity (a GitHub installation, the GitLab token) has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub limit: u64,
    pub remaining: u64,
    /// Unix seconds when the window starts again.
    pub reset: u64,
}

impl Limit {
    /// Calls kept back from ordinary work: a hundredth of the window, at least five.
    pub fn reserve(&self) -> u64 {
        (self.limit / 100).max(5)
    }
}

static LIMITS: Mutex<BTreeMap<(&'static str, String), Limit>> = Mutex::new(BTreeMap::new());

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The limit an answer's headers state, if they say what is left and when it resets.
pub fn parse(headers: &HeaderMap) -> Option<Limit> {
    let number = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| super::header(headers, n))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(Limit {
        // Without it, only the smallest reserve is kept.
        limit: number(&["x-ratelimit-limit", "ratelimit-limit"]).unwrap_or(0),
        remaining: number(&["x-ratelimit-remaining", "ratelimit-remaining"])?,
        reset: number(&["x-ratelimit-reset", "ratelimit-reset"])?,
    })
}

/// Keeps what an answer for `scope` on `forge` said is left.
pub fn record(forge: &'static str, scope: &str, headers: &HeaderMap) {
    let Some(limit) = parse(headers) else { return };
    if let Ok(mut limits) = LIMITS.lock() {
        limits.insert((forge, scope.to_owned()), limit);
    }
}

/// The call `what` for `scope`, held when only the reserve is left: a rate limit
/// waiting for the reset, counted, instead of a request that would spend the rest.
pub fn check(forge: &'static str, scope: &str, what: &str) -> Result<(), super::ForgeError> {
    match held(forge, scope) {
        None => Ok(()),
        Some(wait) => {
            crate::metrics::record_forge_request_held(forge);
            Err(super::ForgeError::RateLimited {
                what: what.to_owned(),
                retry_after: Some(wait),
            })
        }
    }
}

/// How long work for `scope` waits: until the reset, when what is left is down to the
/// reserve and the reset is still ahead; `None` when it may go on.
pub fn held(forge: &'static str, scope: &str) -> Option<Duration> {
    let limits = LIMITS.lock().ok()?;
    let limit = limits.get(&(forge, scope.to_owned()))?;
    let now = now();
    let floor = if RESERVE.try_with(|_| ()).is_ok() {
        0
    } else {
        limit.reserve()
    };
    (limit.remaining <= floor && limit.reset > now).then(|| Duration::from_secs(limit.reset - now))
}

tokio::task_local! {
    static RESERVE: ();
}

/// Runs `work` with the reserve open to it: its calls are held only once the forge says
/// nothing is left. For telling people their work waits, which is what the reserve is for.
pub async fn from_reserve<F: std::future::Future>(work: F) -> F::Output {
    RESERVE.scope((), work).await
}

/// Appends every identity's last known limit to a `/metrics` exposition.
pub fn render(out: &mut crate::metrics::Exposition) {
    out.family(&crate::metrics::Family::FORGE_RATE_LIMIT_REMAINING);
    let limits = all();
    for (forge, scope, limit) in &limits {
        out.sample(
            "planwright_forge_rate_limit_remaining",
            &[("forge", forge), ("scope", scope)],
            limit.remaining,
        );
    }
    out.family(&crate::metrics::Family::FORGE_RATE_LIMIT_RESET);
    for (forge, scope, limit) in &limits {
        out.sample(
            "planwright_forge_rate_limit_reset_seconds",
            &[("forge", forge), ("scope", scope)],
            limit.reset,
        );
    }
}

/// Every identity's last known limit.
pub fn all() -> Vec<(&'static str, String, Limit)> {
    LIMITS
        .lock()
        .map(|limits| {
            limits
                .iter()
                .map(|((forge, scope), limit)| (*forge, scope.clone(), *limit))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn work_waits_for_the_reset_once_only_the_reserve_is_left() {
        let reset = now() + 600;
        let answer = |remaining: u64| {
            headers(&[
                ("x-ratelimit-limit", "5000".into()),
                ("x-ratelimit-remaining", remaining.to_string()),
                ("x-ratelimit-reset", reset.to_string()),
            ])
        };
        record("github", "installation 1", &answer(51));
        assert_eq!(held("github", "installation 1"), None);
        record("github", "installation 1", &answer(50));
        let wait = held("github", "installation 1").unwrap();
        assert!(wait <= Duration::from_secs(600) && wait >= Duration::from_secs(590));
        // Another identity has its own budget.
        assert_eq!(held("github", "installation 2"), None);
        // A reset already past lets work go on.
        record(
            "gitlab",
            "token",
            &headers(&[
                ("ratelimit-limit", "2000".into()),
                ("ratelimit-remaining", "0".into()),
                ("ratelimit-reset", (now() - 1).to_string()),
            ]),
        );
        assert_eq!(held("gitlab", "token"), None);
        // An answer without the headers changes nothing.
        record("github", "installation 1", &HeaderMap::new());
        assert!(held("github", "installation 1").is_some());
    }
}
