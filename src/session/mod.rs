//! Planner sessions: one issue's way from label to pull request. `events` routes what
//! the forge reports, `label` starts and cancels sessions, `command` carries out what
//! maintainers write (one file per command: `approve`, `revise`, `replan`, `retry`,
//! `cancel`; `commands` parses them), `review` turns a pull request review into a round, `answer` gives the planner the
//! answer to its questions, `ci` reports other checks that failed on a pull request, `plan` and `execute` are the two jobs, `dispatch`
//! runs each kind of job, `status` keeps the status comment, `comments` holds every text
//! posted, and `error` says how a step ends early.

mod answer;
mod approve;
mod cancel;
pub mod checkout;
mod ci;
mod command;
pub mod commands;
mod comments;
pub mod dispatch;
mod environment;
mod error;
pub mod events;
pub mod execute;
mod label;
pub mod plan;
mod replan;
mod retry;
mod review;
mod revise;
mod status;
