//! Planner sessions: one issue's way from label to pull request. `commands` reads what
//! maintainers write in the thread.

pub mod commands;
