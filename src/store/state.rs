//! The session state machine, written down once: the states, which moves are allowed, and
//! what each state means to a person reading the status comment. Adding a state breaks
//! the build wherever it must be handled.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    Planning,
    /// The planner asked the maintainers questions before planning; the next answer from
    /// someone allowed to give one resumes it.
    AwaitingAnswer,
    AwaitingApproval,
    Executing,
    Verifying,
    Publishing,
    PrOpened,
    Failed,
    Cancelled,
}

impl SessionState {
    pub const ALL: [SessionState; 9] = [
        SessionState::Planning,
        SessionState::AwaitingAnswer,
        SessionState::AwaitingApproval,
        SessionState::Executing,
        SessionState::Verifying,
        SessionState::Publishing,
        SessionState::PrOpened,
        SessionState::Failed,
        SessionState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Planning => "planning",
            SessionState::AwaitingAnswer => "awaiting_answer",
            SessionState::AwaitingApproval => "awaiting_approval",
            SessionState::Executing => "executing",
            SessionState::Verifying => "verifying",
            SessionState::Publishing => "publishing",
            SessionState::PrOpened => "pr_opened",
            SessionState::Failed => "failed",
            SessionState::Cancelled => "cancelled",
        }
    }

    /// How the status comment names the stage.
    pub fn describe(self) -> &'static str {
        match self {
            SessionState::Planning => "planning",
            SessionState::AwaitingAnswer => "waiting for an answer",
            SessionState::AwaitingApproval => "awaiting approval",
            SessionState::Executing => "executing",
            SessionState::Verifying => "verifying",
            SessionState::Publishing => "opening the pull request",
            SessionState::PrOpened => "pull request opened",
            SessionState::Failed => "failed",
            SessionState::Cancelled => "cancelled",
        }
    }

    /// An active session holds its issue: no second one starts beside it. A failed
    /// session stays active so that `/retry` can resume it.
    pub fn is_active(self) -> bool {
        match self {
            SessionState::Planning
            | SessionState::AwaitingAnswer
            | SessionState::AwaitingApproval
            | SessionState::Executing
            | SessionState::Verifying
            | SessionState::Publishing
            | SessionState::Failed => true,
            SessionState::PrOpened | SessionState::Cancelled => false,
        }
    }

    /// Whether `self → next` is a move the flow makes.
    pub fn can_become(self, next: SessionState) -> bool {
        use SessionState::*;
        match self {
            Planning => matches!(next, AwaitingAnswer | AwaitingApproval | Failed | Cancelled),
            // An answer resumes planning (so does `/plan`); `/cancel`.
            AwaitingAnswer => matches!(next, Planning | Cancelled),
            // `/approve`, `/revise` or `/plan`, `/cancel`.
            AwaitingApproval => matches!(next, Executing | Planning | Cancelled),
            Executing => matches!(next, Verifying | Failed | Cancelled),
            // A result sent back by the reviewer goes to the executor again.
            Verifying => matches!(next, Executing | Publishing | Failed | Cancelled),
            Publishing => matches!(next, PrOpened | Failed),
            // `/revise` on the pull request runs another round on the same branch.
            PrOpened => matches!(next, Planning),
            // `/retry` resumes the failed stage; `/plan` starts over.
            Failed => matches!(
                next,
                Planning | Executing | Verifying | Publishing | Cancelled
            ),
            Cancelled => false,
        }
    }
}

crate::ids::stored_as_text!(SessionState);

/// Listings (`planwright sessions --json`) show the stored name.
impl serde::Serialize for SessionState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a session state")]
pub struct UnknownState(String);

impl FromStr for SessionState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in SessionState::ALL {
            assert_eq!(s.as_str().parse::<SessionState>().unwrap(), s);
        }
        assert!("done".parse::<SessionState>().is_err());
    }

    #[test]
    fn ended_sessions_do_not_move_and_do_not_hold_the_issue() {
        for next in SessionState::ALL {
            assert!(!SessionState::Cancelled.can_become(next));
        }
        assert!(!SessionState::Cancelled.is_active());
        assert!(!SessionState::PrOpened.is_active());
        assert!(SessionState::Failed.is_active());
    }

    #[test]
    fn approval_is_only_possible_while_awaiting_it() {
        let from: Vec<_> = SessionState::ALL
            .into_iter()
            .filter(|s| s.can_become(SessionState::Executing))
            .collect();
        assert_eq!(
            from,
            [
                SessionState::AwaitingApproval,
                SessionState::Verifying,
                SessionState::Failed
            ]
        );
        assert!(!SessionState::Planning.can_become(SessionState::Executing));
    }
}
