//! Planner sessions: one issue's way from label to pull request. `state` is the state
//! machine, `commands` reads what maintainers write in the thread, `dispatch` runs each
//! kind of job, `flow` acts on events and runs the planning job, `execute` carries out an approved contract to a pull
//! request with `review` judging each attempt.

pub mod checkout;
pub mod commands;
pub mod dispatch;
pub mod execute;
pub mod flow;
