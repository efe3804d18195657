//! Conditional GETs. The answers to GETs are kept with their `ETag`, so asking again
//! sends `If-None-Match`, and a `304 Not Modified` (which GitHub does not count against
//! the rate limit) is answered from what was kept. Bounded: small answers only, and the
//! least recently used go first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderValue;

use super::ForgeError;

/// Answers larger than this are not kept: the GETs that repeat (a settings file, an
/// issue, a permission) are small.
const ENTRY_MAX: usize = 256 * 1024;
/// What all kept answers may take together.
const TOTAL_MAX: usize = 16 * 1024 * 1024;

/// Kept answers by (identity, path and query): an answer one identity may read is not
/// handed to another.
#[derive(Default)]
pub struct Answers {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<(String, String), Kept>,
    bytes: usize,
    clock: u64,
}

struct Kept {
    etag: HeaderValue,
    body: Arc<str>,
    used: u64,
}

/// What a GET sends to be conditional, and the answer that stands for a 304.
#[derive(Clone)]
pub struct Sent {
    pub etag: HeaderValue,
    pub body: Arc<str>,
}

impl Answers {
    /// The tag to send with a GET of `path` by `scope`, and the answer it stands for.
    pub fn lookup(&self, scope: &str, path: &str) -> Option<Sent> {
        let mut inner = self.inner.lock().ok()?;
        inner.clock += 1;
        let now = inner.clock;
        let kept = inner
            .entries
            .get_mut(&(scope.to_owned(), path.to_owned()))?;
        kept.used = now;
        Some(Sent {
            etag: kept.etag.clone(),
            body: Arc::clone(&kept.body),
        })
    }

    /// Keeps a successful answer that carried an `ETag`.
    pub fn keep(&self, scope: &str, path: &str, etag: &HeaderValue, body: &str) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let key = (scope.to_owned(), path.to_owned());
        if let Some(old) = inner.entries.remove(&key) {
            inner.bytes -= old.body.len();
        }
        if body.len() > ENTRY_MAX {
            return;
        }
        while inner.bytes + body.len() > TOTAL_MAX {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(old) = inner.entries.remove(&oldest) {
                inner.bytes -= old.body.len();
            }
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.bytes += body.len();
        inner.entries.insert(
            key,
            Kept {
                etag: etag.clone(),
                body: Arc::from(body),
                used,
            },
        );
    }
}

/// The body a `304 Not Modified` stands for: the kept answer the request was made
/// conditional with. A 304 to a request that was not conditional is an error saying so.
pub fn not_modified(sent: Option<&Sent>, forge: &str, what: &str) -> Result<String, ForgeError> {
    match sent {
        Some(sent) => Ok(sent.body.to_string()),
        None => Err(unasked(forge, what)),
    }
}

/// A `304 Not Modified` answer to a request that did not ask for one: there is no body
/// to read, so the call fails, saying where the answer is likely to come from.
pub fn unasked(forge: &str, what: &str) -> ForgeError {
    ForgeError::Malformed {
        what: what.to_owned(),
        message: format!(
            "{forge} (or a proxy on the way) answered 304 Not Modified to a request that was not conditional, so there is no answer to read; a caching proxy between planwright and {forge} must pass requests through unchanged"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_answers_are_per_identity_bounded_and_least_recently_used_go_first() {
        let answers = Answers::default();
        let tag = HeaderValue::from_static("\"a\"");
        answers.keep("installation 1", "/repos/o/r/issues/1", &tag, "one");
        assert_eq!(
            &*answers
                .lookup("installation 1", "/repos/o/r/issues/1")
                .unwrap()
                .body,
            "one"
        );
        assert!(
            answers
                .lookup("installation 2", "/repos/o/r/issues/1")
                .is_none()
        );
        // Too large to keep, and it replaces nothing stale.
        answers.keep("installation 1", "/big", &tag, &"x".repeat(ENTRY_MAX + 1));
        assert!(answers.lookup("installation 1", "/big").is_none());
        // Filling the bound evicts the least recently used, not the one just read.
        let chunk = "y".repeat(ENTRY_MAX);
        answers.keep("installation 1", "/first", &tag, &chunk);
        answers.lookup("installation 1", "/repos/o/r/issues/1");
        for n in 0..TOTAL_MAX / ENTRY_MAX {
            answers.keep("installation 1", &format!("/fill/{n}"), &tag, &chunk);
        }
        assert!(answers.lookup("installation 1", "/first").is_none());
        let inner = answers.inner.lock().unwrap();
        assert!(inner.bytes <= TOTAL_MAX);
        assert_eq!(
            inner.bytes,
            inner.entries.values().map(|k| k.body.len()).sum::<usize>()
        );
    }

    #[test]
    fn a_304_nobody_asked_for_is_a_clear_error() {
        let error = not_modified(None, "GitHub", "GET /repos/o/r").unwrap_err();
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("not conditional"), "{error}");
    }
}
