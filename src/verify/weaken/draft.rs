//! What a weakening is before the contract rules on it: its kind and the draft finding
//! each reader of the changed files makes.

use serde::{Deserialize, Serialize};

use crate::contract::TestChangeKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeakeningKind {
    /// A skip or expected-failure marker added (`@pytest.mark.skip`, `#[ignore]`, `t.Skip`).
    Skip,
    /// A marker that runs only some tests (`it.only`, `fdescribe`).
    Focus,
    /// Fewer assertions in a test that is still there.
    Assertions,
    /// A test function of the base that the result no longer has.
    RemovedTest,
    /// A setting that chooses which tests run, or a CI line that runs them.
    Selection,
    /// A test kept under its name, with as many assertions, that expects something else.
    ChangedExpectation,
    /// A test renamed, with as many assertions, that expects something else.
    RenamedTest,
    /// A test that replaces code the contract changes (`calc.add = …`, `mock.patch`,
    /// `jest.mock`), so it does not run the code it checks.
    Patch,
}

impl WeakeningKind {
    /// The contract's `test_changes` kind that allows it.
    pub fn allowed_by(self) -> TestChangeKind {
        match self {
            WeakeningKind::Skip | WeakeningKind::Focus => TestChangeKind::Skip,
            WeakeningKind::RemovedTest => TestChangeKind::Remove,
            WeakeningKind::Assertions | WeakeningKind::ChangedExpectation => TestChangeKind::Weaken,
            WeakeningKind::RenamedTest => TestChangeKind::Rename,
            WeakeningKind::Selection => TestChangeKind::Select,
            WeakeningKind::Patch => TestChangeKind::Patch,
        }
    }
}

/// A finding before the contract's ruling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::verify) struct Draft {
    pub kind: WeakeningKind,
    pub path: String,
    pub lines: Vec<usize>,
    pub in_base: bool,
    pub test: Option<String>,
    pub what: String,
    pub instruction: String,
}
