//! The canonical JSON of a contract and its base, and the hash an approval binds to.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Base, Contract, ContractHash};

impl Contract {
    /// The bytes that are hashed: the contract plus the base it was planned against, as
    /// JSON with object keys sorted, no insignificant whitespace, and strings trimmed — so
    /// the same decision always hashes the same, whatever order a model wrote it in.
    pub fn canonical_json(&self, base: &Base) -> String {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.insert(
                "base".into(),
                serde_json::json!({ "branch": base.branch, "sha": base.sha.as_str() }),
            );
        }
        let mut out = String::new();
        write_canonical(&value, &mut out);
        out
    }

    pub fn hash(&self, base: &Base) -> ContractHash {
        ContractHash(hex::encode(Sha256::digest(
            self.canonical_json(base).as_bytes(),
        )))
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => out.push_str(&Value::String(s.trim().to_owned()).to_string()),
        other => out.push_str(&other.to_string()),
    }
}
