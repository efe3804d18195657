//! planwright: takes issues to pull requests through a build contract that maintainers
//! approve. The library holds every layer, the command line (`cli`) included; `main.rs`
//! only parses the arguments and hands them to it.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod cli;
pub mod config;
pub mod contract;
pub mod distill;
pub mod docs;
pub mod doctor;
pub mod environment;
pub mod eval;
pub mod event;
pub mod executor;
pub mod forge;
pub mod git;
pub mod ids;
pub mod installation;
pub mod jobs;
pub mod llm;
pub mod markdown;
pub mod metering;
pub mod metrics;
pub mod onboarding;
pub mod planner;
pub mod publish;
pub mod repo_tools;
pub mod routing;
pub mod sandbox;
pub mod server;
pub mod session;
pub mod solve;
pub mod store;
pub mod text;
pub mod unix_socket;
pub mod verify;
