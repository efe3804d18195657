//! The two jobs a session's round runs: `plan` writes and posts a contract, `execute`
//! carries out an approved one and publishes what it proved.

pub mod execute;
pub mod plan;
