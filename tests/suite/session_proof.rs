//! The fail-to-pass proof through a whole session, on GitHub and on GitLab: the executor's
//! regression test runs on the base code, and the pull request says what it proves.

use insta::assert_snapshot;
use planwright::event::ForgeKind;
use serde_json::{Value, json};

use crate::support::calc::{TEST_CALC, UNITTEST, contract as calc_contract};
use crate::support::model_server::Step;
use crate::support::redact::redact;
use crate::support::world::{World, verdict};

/// The calc contract naming `new_test` as the test the executor adds.
fn submit_with_new_test(new_test: &str, max_attempts: u32) -> Step {
    let mut contract: Value = calc_contract(max_attempts);
    contract["verification"]["new_tests"] = json!([new_test]);
    contract["change"]["files"]
        .as_array_mut()
        .unwrap()
        .push(json!({"path": "test_calc.py", "action": "modify", "why": "a regression test"}));
    Step::tool_call("p1", "submit_contract", contract).when_tools(&["submit_contract"])
}

/// The executor fixes `add` and adds `method` to the tests.
fn fix_and_test(method: &str) -> Vec<Step> {
    let tests = TEST_CALC.replace("\n\nif __name__", &format!("\n{method}\n\nif __name__"));
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
            json!({"path": "test_calc.py", "content": tests}),
        )
        .when_tools(&["finish", "write_file"]),
        Step::tool_call("e3", "finish", json!({"summary": "add adds, with a test."}))
            .when_tools(&["finish"]),
    ]
}

/// The body's verification section, up to the review.
fn verification_section(body: &str) -> &str {
    let start = body
        .find("### Verification")
        .expect("a verification section");
    let end = body[start..]
        .find("### Review")
        .map_or(body.len(), |e| start + e);
    &body[start..end]
}

async fn a_regression_test_failing_on_the_base_code_is_shown_as_proof(on: ForgeKind) {
    let mut script = vec![submit_with_new_test(
        "test_calc.py::TestCalc::test_add_negative",
        2,
    )];
    script.extend(fix_and_test(
        "    def test_add_negative(self):\n        self.assertEqual(add(-2, -3), -5)\n",
    ));
    script.push(verdict(true, "Fixed, and the new test pins it."));
    let world = World::calc(on, script, &format!("test: {UNITTEST}\n")).await;
    world.approve_calc().await;
    world.wait_for_state("pr_opened").await;
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(!pulls[0].draft);
    let head = world.upstream(&["rev-parse", &pulls[0].head]);
    assert_eq!(world.checks(&head), ["success"]);
    let section = redact(verification_section(&pulls[0].body));
    if on == ForgeKind::Github {
        assert_snapshot!(section, @r"
        ### Verification

        Ran on the planwright host's tools: no image is named by the repository's `environment.image`, a devcontainer, or the deployment's ENVIRONMENT_IMAGE.

        | command | baseline | after |
        |---|---|---|
        | `python3 -m unittest -v` | ❌ 1 passed, 1 failed · exit 1 · [duration] | ✅ 3 passed, 0 failed · exit 0 · [duration] |

        **Proof** (the new and changed tests on the base code, then on the result):

        | test | on the base code | after | proof |
        |---|---|---|---|
        | `test_calc.TestCalc.test_add_negative` (contract) | failed | passed | ✅ proves the change |
        | `test_calc.TestCalc.test_add` | failed | passed | ✅ proves the change |
        ");
    } else {
        assert!(
            section.contains("| `test_calc.TestCalc.test_add_negative` (contract) | failed | passed | ✅ proves the change |"),
            "{section}"
        );
    }
    world.server.stop().await;
}

async fn a_regression_test_passing_on_the_base_code_gets_no_green_check(on: ForgeKind) {
    let mut script = vec![submit_with_new_test("test_mul_zero", 1)];
    script.extend(fix_and_test(
        "    def test_mul_zero(self):\n        self.assertEqual(mul(0, 3), 0)\n",
    ));
    script.push(verdict(true, "Looks right."));
    let world = World::calc(on, script, &format!("test: {UNITTEST}\n")).await;
    world.approve_calc().await;
    let session = world.wait_for_state("failed").await;
    let failure = session.failure.unwrap_or_default();
    assert!(
        failure.contains("the contract's new tests do not fail on the base code"),
        "{failure}"
    );
    let pulls = world.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(
        pulls[0].draft,
        "a result whose new test proves nothing is a draft"
    );
    let head = world.upstream(&["rev-parse", &pulls[0].head]);
    assert_eq!(world.checks(&head), ["failure"]);
    let section = verification_section(&pulls[0].body);
    assert!(
        section.contains("| `test_mul_zero` (contract) | did not fail | passed | ⚠️ proves nothing: it does not fail on the base code |"),
        "{section}"
    );
    world.server.stop().await;
}

crate::on_both_forges!(
    a_regression_test_failing_on_the_base_code_is_shown_as_proof,
    a_regression_test_passing_on_the_base_code_gets_no_green_check,
);
