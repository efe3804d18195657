//! A tiny Python project whose `add` subtracts: its own unittest fails on the base commit,
//! so a run's verification has real results to compare. Shared by the end-to-end tests.

use serde_json::{Value, json};

use super::model_server::Step;

pub const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
pub const TEST_CALC: &str = "import unittest\n\nfrom calc import add, mul\n\n\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";
pub const UNITTEST: &str = "python3 -m unittest -v";

/// The contract a planner would write for the bug, allowing `max_attempts`.
pub fn contract(max_attempts: u32) -> Value {
    contract_checked_by(UNITTEST, max_attempts)
}

/// The same contract, verified by `command`.
pub fn contract_checked_by(command: &str, max_attempts: u32) -> Value {
    json!({
        "summary": "add subtracts instead of adding.",
        "diagnosis": {
            "hypothesis": "calc.add returns a - b.",
            "evidence": [{"path": "calc.py", "lines": "1-2", "note": "a - b"}]
        },
        "change": {
            "goal": "Make add return the sum.",
            "files": [{"path": "calc.py", "action": "modify", "why": "use +"}]
        },
        "verification": {"commands": [command]},
        "routing": {"risk": "low", "max_attempts": max_attempts}
    })
}

/// Every model answer of a run that fixes the bug at once, without delay: the planner
/// submits the contract, the builtin executor edits one line and finishes, the reviewer
/// accepts.
pub fn fixing_script(max_attempts: u32) -> Vec<Step> {
    vec![
        Step::tool_call("p1", "submit_contract", contract(max_attempts))
            .when_tools(&["submit_contract"]),
        Step::tool_call(
            "e1",
            "edit_file",
            json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}),
        )
        .when_tools(&["finish", "edit_file"]),
        Step::tool_call("e2", "finish", json!({"summary": "add now adds."}))
            .when_tools(&["finish"]),
        Step::tool_call(
            "r1",
            "verdict",
            json!({"accept": true, "findings": "The change the contract asks for.", "instructions": ""}),
        )
        .when_tools(&["verdict"]),
    ]
}
