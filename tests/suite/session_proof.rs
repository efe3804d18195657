//! The fail-to-pass proof through a whole session, on GitHub and on GitLab: the executor's
//! regression test runs on the base code, and the pull request says what it proves.

use insta::assert_snapshot;
use planwright::event::ForgeKind;

use crate::support::calc::{UNITTEST, contract_with_new_test, fix_and_test, proving_script};
use crate::support::model_server::Step;
use crate::support::redact::redact;
use crate::support::world::{World, verdict};

fn submit_with_new_test(new_test: &str, max_attempts: u32) -> Step {
    Step::tool_call(
        "p1",
        "submit_contract",
        contract_with_new_test(new_test, max_attempts),
    )
    .when_tools(&["submit_contract"])
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
    let script = proving_script(2);
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
        | `python3 -m unittest -v` | ❌ 1 passed, 1 failed · exit 1 · [duration]; re-run of the failing tests: ❌ 0 passed, 1 failed, then ❌ 0 passed, 1 failed | ✅ 3 passed, 0 failed · exit 0 · [duration]; run of the tests that failed on the base: ✅ 1 passed, 0 failed, then ✅ 1 passed, 0 failed |

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
