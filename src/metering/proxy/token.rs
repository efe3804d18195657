//! Capability tokens for the model proxy: short-lived, signed (HMAC-SHA256) grants that
//! scope an executor's model calls to one run, one session and one budget. The key lives
//! only in this process, so tokens die with it, as the sandboxes they were issued to do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::sync::Semaphore;

use crate::ids::{RunId, SessionId};
use crate::metering::Budget;

/// Every token starts with this, so a leaked one is recognisable in a secret scanner.
const PREFIX: &str = "pwcap_";

/// What a valid token allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub run: RunId,
    pub session: SessionId,
    pub budget: Budget,
    /// Unix milliseconds.
    pub expires_at_ms: i64,
    /// The only models the run may call, as their providers name them (an executor's
    /// rung's model), so a run cannot buy a dearer model's answer on a cheaper rung's
    /// account. Empty for a run that names no model: the command executor's, whose
    /// command may call any priced model.
    pub models: Vec<String>,
}

/// Why a token was refused. The messages go back to the agent, so they name the problem
/// and never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "Cannot use the model proxy without a capability token: send it as x-api-key or Authorization: Bearer"
    )]
    Missing,
    #[error("Cannot use the model proxy: the capability token is not one planwright issued")]
    Invalid,
    #[error("Cannot use the model proxy: the capability token has expired")]
    Expired,
    #[error("Cannot use the model proxy: the capability token was revoked (its run has ended)")]
    Revoked,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    run: String,
    session: String,
    max_microusd: Option<i64>,
    max_tokens: Option<u64>,
    exp: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    models: Vec<String>,
    /// Tells tokens of one run apart, so each can be checked against the live list.
    nonce: String,
}

/// Issues and checks capability tokens. A token is valid while it is signed by this
/// key, unexpired, and its run has not been revoked.
pub struct Capabilities {
    key: SecretSlice<u8>,
    /// Live runs. Revoking a run removes its entry, so even a token issued again for the
    /// same run id later does not revive the old ones.
    live: Mutex<HashMap<RunId, Live>>,
}

/// A run's live tokens, (nonce, expiry ms), and what the proxy limits per run while
/// the run lives.
#[derive(Default)]
struct Live {
    tokens: Vec<(String, i64)>,
    counted: u32,
    calls: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capabilities(..)")
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Self::generate()
    }
}

impl Capabilities {
    /// A fresh random key.
    pub fn generate() -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            key: SecretSlice::from(key.to_vec()),
            live: Mutex::new(HashMap::new()),
        }
    }

    /// A token for `run` of `session`, valid for `ttl` or until the run is revoked, for
    /// any priced model.
    pub fn issue(
        &self,
        run: &RunId,
        session: &SessionId,
        budget: Budget,
        ttl: Duration,
    ) -> SecretString {
        self.issue_for(run, session, budget, ttl, &[])
    }

    /// A token like [`Capabilities::issue`]'s that calls only `models` (any priced
    /// model when empty).
    pub fn issue_for(
        &self,
        run: &RunId,
        session: &SessionId,
        budget: Budget,
        ttl: Duration,
        models: &[String],
    ) -> SecretString {
        let now = now_ms();
        let exp = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let claims = Claims {
            run: run.as_str().to_owned(),
            session: session.as_str().to_owned(),
            max_microusd: budget.max_microusd,
            max_tokens: budget.max_tokens,
            exp,
            models: models.to_vec(),
            nonce: uuid::Uuid::new_v4().simple().to_string(),
        };
        {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            // Forgets expired tokens of every run, so runs never revoked do not pile up.
            live.retain(|_, run| {
                run.tokens.retain(|(_, e)| *e > now);
                !run.tokens.is_empty()
            });
            live.entry(run.clone())
                .or_default()
                .tokens
                .push((claims.nonce.clone(), exp));
        }
        // Serialising a struct of strings and numbers cannot fail.
        let payload = serde_json::to_vec(&claims).unwrap_or_default();
        let signature = self.mac(&payload).finalize().into_bytes();
        SecretString::from(format!(
            "{PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }

    /// Ends every token issued for `run`.
    pub fn revoke(&self, run: &RunId) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run);
    }

    pub fn verify(&self, token: &str) -> Result<Grant, TokenError> {
        let body = token.strip_prefix(PREFIX).ok_or(TokenError::Invalid)?;
        let (payload, signature) = body.split_once('.').ok_or(TokenError::Invalid)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Invalid)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Invalid)?;
        // Constant-time: the comparison must not tell a forger how close they came.
        self.mac(&payload)
            .verify_slice(&signature)
            .map_err(|_| TokenError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Invalid)?;
        if claims.exp <= now_ms() {
            return Err(TokenError::Expired);
        }
        let run = RunId(claims.run);
        let live = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&run)
            .is_some_and(|live| live.tokens.iter().any(|(n, _)| *n == claims.nonce));
        if !live {
            return Err(TokenError::Revoked);
        }
        Ok(Grant {
            run,
            session: SessionId(claims.session),
            budget: Budget {
                max_microusd: claims.max_microusd,
                max_tokens: claims.max_tokens,
            },
            expires_at_ms: claims.exp,
            models: claims.models,
        })
    }

    /// Counts one more call of a limited kind for `run`: false once `limit` were made
    /// (or the run has ended).
    pub(crate) fn count_call(&self, run: &RunId, limit: u32) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.get_mut(run) {
            Some(live) if live.counted < limit => {
                live.counted += 1;
                true
            }
            _ => false,
        }
    }

    /// The slots `run`'s concurrent calls share, `slots` of them (`None` once the run
    /// has ended).
    pub(crate) fn call_slots(&self, run: &RunId, slots: usize) -> Option<Arc<Semaphore>> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let live = live.get_mut(run)?;
        Some(
            live.calls
                .get_or_insert_with(|| Arc::new(Semaphore::new(slots)))
                .clone(),
        )
    }

    fn mac(&self, payload: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.expose_secret())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(payload);
        mac
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (RunId, SessionId) {
        (RunId::generate(), SessionId::generate())
    }

    #[test]
    fn a_token_carries_its_grant_until_revoked() {
        let caps = Capabilities::generate();
        let (run, session) = ids();
        let token = caps.issue(&run, &session, Budget::usd(2.0), Duration::from_secs(60));
        let grant = caps.verify(token.expose_secret()).unwrap();
        assert_eq!(grant.run, run);
        assert_eq!(grant.session, session);
        assert_eq!(grant.budget, Budget::usd(2.0));
        caps.revoke(&run);
        assert_eq!(caps.verify(token.expose_secret()), Err(TokenError::Revoked));
        // A new token for the same run does not revive the revoked one.
        let again = caps.issue(&run, &session, Budget::usd(2.0), Duration::from_secs(60));
        assert!(caps.verify(again.expose_secret()).is_ok());
        assert_eq!(caps.verify(token.expose_secret()), Err(TokenError::Revoked));
    }

    #[test]
    fn forged_altered_and_expired_tokens_are_refused() {
        let caps = Capabilities::generate();
        let (run, session) = ids();
        let token = caps.issue(&run, &session, Budget::usd(1.0), Duration::from_secs(60));
        let other = Capabilities::generate();
        assert_eq!(
            other.verify(token.expose_secret()),
            Err(TokenError::Invalid)
        );
        // A bigger budget in the payload breaks the signature.
        let (payload, signature) = token
            .expose_secret()
            .strip_prefix(PREFIX)
            .unwrap()
            .split_once('.')
            .unwrap();
        let mut claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        claims["max_microusd"] = serde_json::json!(1_000_000_000);
        let altered = format!(
            "{PREFIX}{}.{signature}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap())
        );
        assert_eq!(caps.verify(&altered), Err(TokenError::Invalid));
        for junk in ["", "pwcap_", "pwcap_a.b", "sk-ant-123"] {
            assert_eq!(caps.verify(junk), Err(TokenError::Invalid), "{junk}");
        }
        let expired = caps.issue(&run, &session, Budget::usd(1.0), Duration::ZERO);
        assert_eq!(
            caps.verify(expired.expose_secret()),
            Err(TokenError::Expired)
        );
    }
}
