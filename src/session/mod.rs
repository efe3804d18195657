//! Planner sessions: one issue's way from label to pull request. `state` is the state
//! machine, `commands` reads what maintainers write in the thread, `flow` acts on events
//! and runs the planning job.

pub mod checkout;
pub mod commands;
pub mod flow;
pub mod state;
