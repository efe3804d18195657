//! planwright's integration tests, linked into one binary: `support` is the harness (the
//! fake forges, the scripted model server, the real server on a loopback port) and
//! `suite` holds one module per area. One binary links the crate once instead of once per
//! file.

mod suite;
mod support;
