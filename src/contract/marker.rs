//! The hidden marker at the end of a contract comment that ties it back to its session,
//! version and hash.

use serde::{Deserialize, Serialize};

use super::{ContractHash, ContractVersion};
use crate::ids::SessionId;

/// The hidden line at the end of a contract comment:
/// `<!-- planwright:contract {"session":…,"version":…,"sha256":…} -->`.
/// Only trust a marker found in a comment written by planwright itself: anyone can paste
/// one into their own comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractMarker {
    pub session: SessionId,
    pub version: ContractVersion,
    pub sha256: ContractHash,
}

const MARKER_PREFIX: &str = "<!-- planwright:contract ";

impl ContractMarker {
    pub fn render(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{MARKER_PREFIX}{json} -->")
    }

    /// The last well-formed marker in a comment body, if any.
    pub fn find(body: &str) -> Option<ContractMarker> {
        body.match_indices(MARKER_PREFIX)
            .filter_map(|(at, _)| {
                let rest = &body[at + MARKER_PREFIX.len()..];
                let end = rest.find(" -->")?;
                let marker: ContractMarker = serde_json::from_str(&rest[..end]).ok()?;
                ContractHash::parse(marker.sha256.as_str())?;
                Some(marker)
            })
            .last()
    }
}
