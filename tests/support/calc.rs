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

/// A regression test for the bug: it fails on the base code and passes with the fix.
pub const TEST_ADD_NEGATIVE: &str =
    "    def test_add_negative(self):\n        self.assertEqual(add(-2, -3), -5)\n";

/// The calc tests with one more test method.
pub fn tests_with(method: &str) -> String {
    TEST_CALC.replace("\n\nif __name__", &format!("\n{method}\n\nif __name__"))
}

/// The calc contract naming `new_test` as the test the executor adds to `test_calc.py`.
pub fn contract_with_new_test(new_test: &str, max_attempts: u32) -> Value {
    let mut contract = contract(max_attempts);
    contract["verification"]["new_tests"] = json!([new_test]);
    contract["change"]["files"]
        .as_array_mut()
        .expect("the contract lists files")
        .push(json!({"path": "test_calc.py", "action": "modify", "why": "a regression test"}));
    contract
}

/// The executor's steps that fix `add` and add `method` to the tests.
pub fn fix_and_test(method: &str) -> Vec<Step> {
    vec![
        Step::tool_call(
            "e1",
            "edit_file",
            json!({"path": "calc.py", "old": "return a - b", "new": "return a + b"}),
        )
        .when_tools(&["finish", "edit_file"]),
        Step::tool_call(
            "e2",
            "write_file",
            json!({"path": "test_calc.py", "content": tests_with(method)}),
        )
        .when_tools(&["finish", "write_file"]),
        Step::tool_call("e3", "finish", json!({"summary": "add adds, with a test."}))
            .when_tools(&["finish"]),
    ]
}

/// A new test module holding the regression test: verification runs it apart from the
/// old tests.
pub const TEST_REGRESSION: &str = "import unittest\n\nfrom calc import add\n\n\nclass TestRegression(unittest.TestCase):\n    def test_add_negative(self):\n        self.assertEqual(add(-2, -3), -5)\n";

/// [`proving_script`] with the regression test in a new module, `test_regression.py`, that
/// the contract names: the run's proof has a test to run on the base code, and the new
/// module runs apart from the old tests.
pub fn apart_script(max_attempts: u32) -> Vec<Step> {
    let mut contract = contract(max_attempts);
    contract["verification"]["new_tests"] =
        json!(["test_regression.TestRegression.test_add_negative"]);
    contract["change"]["files"]
        .as_array_mut()
        .expect("the contract lists files")
        .push(
            json!({"path": "test_regression.py", "action": "create", "why": "a regression test"}),
        );
    let mut script = proving_script(max_attempts);
    script[0] = Step::tool_call("p1", "submit_contract", contract).when_tools(&["submit_contract"]);
    // The regression test goes into a file of its own instead of `test_calc.py`.
    script[2] = Step::tool_call(
        "e2",
        "write_file",
        json!({"path": "test_regression.py", "content": TEST_REGRESSION}),
    )
    .when_tools(&["finish", "write_file"]);
    script
}

/// [`fixing_script`] with a regression test the contract names: the run's proof has a
/// test to run on the base code.
pub fn proving_script(max_attempts: u32) -> Vec<Step> {
    let contract =
        contract_with_new_test("test_calc.py::TestCalc::test_add_negative", max_attempts);
    let mut script =
        vec![Step::tool_call("p1", "submit_contract", contract).when_tools(&["submit_contract"])];
    script.extend(fix_and_test(TEST_ADD_NEGATIVE));
    script.push(
        Step::tool_call(
            "r1",
            "verdict",
            json!({"accept": true, "findings": "Fixed, and the new test pins it.", "instructions": ""}),
        )
        .when_tools(&["verdict"]),
    );
    script
}

/// A command executor that asks the model (through the model proxy) whether to go on:
/// told to wait, it makes a start and hangs; told to proceed, it only fixes the bug.
pub const ASKS_THEN_FIXES: &str = "curl -s \"$ANTHROPIC_BASE_URL/v1/messages\" -H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"go on?\"}]}' | grep -q proceed || { echo '# started' >> calc.py; sleep 600; }; sed -i 's/a - b/a + b/' calc.py";
