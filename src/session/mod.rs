//! Planner sessions: one issue's way from label to pull request.
//!
//! From the bottom up: `jobs` holds the queue's job payloads and how each is queued;
//! `error` says how a step ends early, `comments` holds every text posted, `status` keeps
//! the status comment, and `feedback` words what a review asks for. `context` is what the
//! handlers of one event share (the repository on its forge, the delivery, and for a
//! command who asked under which settings). `commands` carries out what maintainers write,
//! one file per command (`parse` reads them); `round` is the one step that follows the
//! end of a round; `handlers` routes each repository event to its handler, one file per
//! kind. `run` holds the plan and execute jobs (with `checkout` and `environment`, what
//! they run on), and `dispatch` runs each kind of job.

pub mod checkout;
mod commands;
mod comments;
mod context;
pub mod dispatch;
mod error;
mod feedback;
pub mod handlers;
mod image;
pub mod jobs;
mod round;
mod run;
mod status;
