//! Every runner's summary forms, as the runners printed them on this machine (pytest 7.2,
//! Python 3.11 unittest, cargo 1.95, node 20) or as the shared logs hold them, with the
//! counts each gives and how many of its counted failures the output leaves unnamed.

use super::testing::{fixture, fixture_names, run, truth};
use super::{Format, TestReport};

type Counts = (u64, u64, u64, u64);

fn counts(r: &TestReport) -> Counts {
    (r.passed, r.failed, r.skipped, r.errors)
}

const PYTEST_RA: &str = r####"============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0+repack
rootdir: /tmp/pyforms
collected 8 items

test_f.py ..xXsFE.                                                       [100%]

==================================== ERRORS ====================================
___________________________ ERROR at setup of test_e ___________________________

    @pytest.fixture
>   def boom(): raise RuntimeError("x")
E   RuntimeError: x

test_f.py:12: RuntimeError
=================================== FAILURES ===================================
____________________________________ test_f ____________________________________

>   def test_f(): assert 0
E   assert 0

test_f.py:10: AssertionError
=============================== warnings summary ===============================
test_f.py::test_w
  /tmp/pyforms/test_f.py:3: UserWarning: w
    def test_w(): warnings.warn(UserWarning("w"))

-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED test_f.py::test_p
PASSED test_f.py::test_w
PASSED test_f.py::test_desel
SKIPPED [1] test_f.py:8: unconditional skip
XFAIL test_f.py::test_xf
XPASS test_f.py::test_xp 
ERROR test_f.py::test_e - RuntimeError: x
FAILED test_f.py::test_f - assert 0
= 1 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.03s =
"####;

const PYTEST_Q_TBNO: &str = r####"..xXsFE.                                                                 [100%]
=============================== warnings summary ===============================
test_f.py::test_w
  /tmp/pyforms/test_f.py:3: UserWarning: w
    def test_w(): warnings.warn(UserWarning("w"))

-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
=========================== short test summary info ============================
FAILED test_f.py::test_f - assert 0
ERROR test_f.py::test_e - RuntimeError: x
1 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.02s
"####;

const CARGO_DEFAULT: &str = r####"    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.00s
     Running unittests src/lib.rs (/tmp/forms/rc-target/debug/deps/rc-a84f2c166dd1b0ee)

running 4 tests
test tests::ign ... ignored
test tests::bad ... FAILED
test tests::ok ... ok
test tests::sp - should panic ... ok

failures:

---- tests::bad stdout ----

thread 'tests::bad' (16873) panicked at src/lib.rs:5:24:
assertion `left == right` failed
  left: 2
 right: 3
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::bad

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
"####;

const CARGO_Q: &str = r####"
running 4 tests
i 1/4
tests::bad --- FAILED
..
failures:

---- tests::bad stdout ----

thread 'tests::bad' (16882) panicked at src/lib.rs:5:24:
assertion `left == right` failed
  left: 2
 right: 3
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::bad

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
"####;

const NODE_SPEC: &str = r####"✔ ok (0.697978ms)
✖ bad (1.493743ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  1 !== 2
  
      at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:4:28)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 1,
    expected: 2,
    operator: 'strictEqual'
  }

﹣ skipme (0.083165ms) # SKIP
✔ todo one (0.070135ms) # TODO
▶ group
  ✔ inner ok (0.109304ms)
  ✖ inner bad (0.069755ms)
    Error: boom
        at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:9:33)
        at Test.runInAsyncScope (node:async_hooks:206:9)
        at Test.run (node:internal/test_runner/test:796:25)
        at Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
        at Test.postRun (node:internal/test_runner/test:889:19)
        at Test.run (node:internal/test_runner/test:835:12)
        at async Promise.all (index 0)
        at async Suite.run (node:internal/test_runner/test:1135:7)
        at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)

✖ group (1.620874ms)
ℹ tests 6
ℹ suites 1
ℹ pass 2
ℹ fail 2
ℹ cancelled 0
ℹ skipped 1
ℹ todo 1
ℹ duration_ms 116.565296

✖ failing tests:

test at a.test.mjs:4:1
✖ bad (1.493743ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  1 !== 2
  
      at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:4:28)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 1,
    expected: 2,
    operator: 'strictEqual'
  }

test at a.test.mjs:9:3
✖ inner bad (0.069755ms)
  Error: boom
      at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:9:33)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Promise.all (index 0)
      at async Suite.run (node:internal/test_runner/test:1135:7)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
"####;

const NODE_TAP: &str = r####"TAP version 13
# Subtest: ok
ok 1 - ok
  ---
  duration_ms: 3.739896
  ...
# Subtest: bad
not ok 2 - bad
  ---
  duration_ms: 3.660276
  location: '/tmp/forms/nd/a.test.mjs:4:1'
  failureType: 'testCodeFailure'
  error: |-
    Expected values to be strictly equal:
    
    1 !== 2
    
  code: 'ERR_ASSERTION'
  name: 'AssertionError'
  expected: 2
  actual: 1
  operator: 'strictEqual'
  stack: |-
    TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:4:28)
    Test.runInAsyncScope (node:async_hooks:206:9)
    Test.run (node:internal/test_runner/test:796:25)
    Test.processPendingSubtests (node:internal/test_runner/test:526:18)
    Test.postRun (node:internal/test_runner/test:889:19)
    Test.run (node:internal/test_runner/test:835:12)
    async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
  ...
# Subtest: skipme
ok 3 - skipme # SKIP
  ---
  duration_ms: 0.817818
  ...
# Subtest: todo one
ok 4 - todo one # TODO
  ---
  duration_ms: 0.900662
  ...
# Subtest: group
    # Subtest: inner ok
    ok 1 - inner ok
      ---
      duration_ms: 0.35298
      ...
    # Subtest: inner bad
    not ok 2 - inner bad
      ---
      duration_ms: 0.693751
      location: '/tmp/forms/nd/a.test.mjs:9:3'
      failureType: 'testCodeFailure'
      error: 'boom'
      code: 'ERR_TEST_FAILURE'
      stack: |-
        TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:9:33)
        Test.runInAsyncScope (node:async_hooks:206:9)
        Test.run (node:internal/test_runner/test:796:25)
        Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
        Test.postRun (node:internal/test_runner/test:889:19)
        Test.run (node:internal/test_runner/test:835:12)
        async Promise.all (index 0)
        async Suite.run (node:internal/test_runner/test:1135:7)
        async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
      ...
    1..2
not ok 5 - group
  ---
  duration_ms: 5.019256
  type: 'suite'
  location: '/tmp/forms/nd/a.test.mjs:7:1'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
1..5
# tests 6
# suites 1
# pass 2
# fail 2
# cancelled 0
# skipped 1
# todo 1
# duration_ms 254.97943
"####;

const NODE_DOT: &str = r####".X...XX

Failed tests:

✖ bad (0.818199ms)
  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:
  
  1 !== 2
  
      at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:4:28)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Test.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7) {
    generatedMessage: true,
    code: 'ERR_ASSERTION',
    actual: 1,
    expected: 2,
    operator: 'strictEqual'
  }
✖ inner bad (0.067471ms)
  Error: boom
      at TestContext.<anonymous> (file:///tmp/forms/nd/a.test.mjs:9:33)
      at Test.runInAsyncScope (node:async_hooks:206:9)
      at Test.run (node:internal/test_runner/test:796:25)
      at Suite.processPendingSubtests (node:internal/test_runner/test:526:18)
      at Test.postRun (node:internal/test_runner/test:889:19)
      at Test.run (node:internal/test_runner/test:835:12)
      at async Promise.all (index 0)
      at async Suite.run (node:internal/test_runner/test:1135:7)
      at async Test.processPendingSubtests (node:internal/test_runner/test:526:7)
✖ group (1.486522ms)
  '1 subtest failed'
"####;

const UT_DEFAULT: &str = r####"EF.sFFxu
======================================================================
ERROR: test_e (test_u.T.test_e)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 5, in test_e
    def test_e(self): raise RuntimeError("x")
                      ^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: x

======================================================================
FAIL: test_f (test_u.T.test_f)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 4, in test_f
    def test_f(self): self.assertEqual(1, 2)
                      ^^^^^^^^^^^^^^^^^^^^^^
AssertionError: 1 != 2

======================================================================
FAIL: test_sub (test_u.T.test_sub) (i=1)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 15, in test_sub
    self.assertNotEqual(i, 1)
AssertionError: 1 == 1

======================================================================
FAIL: test_sub (test_u.T.test_sub) (i=2)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 16, in test_sub
    self.assertNotEqual(i, 2)
AssertionError: 2 == 2

======================================================================
UNEXPECTED SUCCESS: test_xp (test_u.T.test_xp)
----------------------------------------------------------------------
Ran 7 tests in 0.001s

FAILED (failures=3, errors=1, skipped=1, expected failures=1, unexpected successes=1)
"####;

const UT_V: &str = r####"test_e (test_u.T.test_e) ... ERROR
test_f (test_u.T.test_f) ... FAIL
test_p (test_u.T.test_p) ... ok
test_s (test_u.T.test_s) ... skipped 's'
test_sub (test_u.T.test_sub) ... 
  test_sub (test_u.T.test_sub) (i=1) ... FAIL
  test_sub (test_u.T.test_sub) (i=2) ... FAIL
test_xf (test_u.T.test_xf) ... expected failure
test_xp (test_u.T.test_xp) ... unexpected success

======================================================================
ERROR: test_e (test_u.T.test_e)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 5, in test_e
    def test_e(self): raise RuntimeError("x")
                      ^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: x

======================================================================
FAIL: test_f (test_u.T.test_f)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 4, in test_f
    def test_f(self): self.assertEqual(1, 2)
                      ^^^^^^^^^^^^^^^^^^^^^^
AssertionError: 1 != 2

======================================================================
FAIL: test_sub (test_u.T.test_sub) (i=1)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 15, in test_sub
    self.assertNotEqual(i, 1)
AssertionError: 1 == 1

======================================================================
FAIL: test_sub (test_u.T.test_sub) (i=2)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/ut/test_u.py", line 16, in test_sub
    self.assertNotEqual(i, 2)
AssertionError: 2 == 2

======================================================================
UNEXPECTED SUCCESS: test_xp (test_u.T.test_xp)
----------------------------------------------------------------------
Ran 7 tests in 0.001s

FAILED (failures=3, errors=1, skipped=1, expected failures=1, unexpected successes=1)
"####;

/// A whole run's output gives its counts and names every failure it counts: nothing
/// unnamed.
#[test]
fn each_runners_summary_forms_give_their_counts() {
    let cases: &[(&str, Format, &str, Counts)] = &[
        // `pytest -rA`, padded with a single `=` (wider than the terminal).
        ("pytest -rA", Format::Pytest, PYTEST_RA, (4, 1, 2, 1)),
        // `pytest -q --tb=no`: bare final line, warnings and xfail/xpass in it.
        (
            "pytest -q --tb=no",
            Format::Pytest,
            PYTEST_Q_TBNO,
            (4, 1, 2, 1),
        ),
        // failures=3 counts two failed subtests of one test; expected failures skip,
        // unexpected successes pass.
        (
            "python3 -m unittest",
            Format::Unittest,
            UT_DEFAULT,
            (2, 3, 2, 1),
        ),
        (
            "python3 -m unittest -v",
            Format::Unittest,
            UT_V,
            (2, 3, 2, 1),
        ),
        ("cargo test", Format::Cargo, CARGO_DEFAULT, (2, 1, 1, 0)),
        ("cargo test -q", Format::Cargo, CARGO_Q, (2, 1, 1, 0)),
        // todo counts as skipped.
        ("node --test (spec)", Format::Node, NODE_SPEC, (2, 2, 2, 0)),
        ("node --test (tap)", Format::Node, NODE_TAP, (2, 2, 2, 0)),
    ];
    let mut problems = Vec::new();
    for (what, format, text, want) in cases {
        let (r, _) = run(*format, text);
        if counts(&r) != *want || r.unnamed != 0 {
            problems.push(format!(
                "{what}: {:?} with {} unnamed ({:?}), want {want:?} and none",
                counts(&r),
                r.unnamed,
                r.failures.iter().map(|f| &f.id).collect::<Vec<_>>()
            ));
        }
        let detected = super::distill_str(text, None, None);
        if detected.runner != format.runner() || detected.unnamed != r.unnamed {
            problems.push(format!("{what}: detected as {}", detected.runner));
        }
    }
    // The node dot reporter states no counts: estimated, never unnamed.
    let (r, _) = run(Format::Node, NODE_DOT);
    if !r.estimated_counts || r.unnamed != 0 || r.failed != 2 {
        problems.push(format!("node dot: {:?} unnamed {}", counts(&r), r.unnamed));
    }
    // The shared logs: each complete, each failure named.
    for name in fixture_names() {
        let text = fixture(&name);
        let r = super::distill_str(
            &text,
            None,
            Some(truth(&name)["command"].as_str().unwrap_or("")),
        );
        if r.unnamed != 0 {
            problems.push(format!("{name}: {} unnamed", r.unnamed));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Each runner's summary with nothing before it to name the failures (the output was
/// cut, or a test closed the runner's output): every counted failure and error is
/// unnamed.
#[test]
fn a_summary_alone_leaves_its_failures_unnamed() {
    let cases: &[(&str, Format, &str, Counts, u64)] = &[
        (
            "pytest",
            Format::Pytest,
            "= 1 failed, 3 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 0.03s =\n",
            (4, 1, 2, 1),
            2,
        ),
        (
            "pytest -q",
            Format::Pytest,
            "..F.F                                                                    [100%]\n\
             2 failed, 3 passed in 0.02s\n",
            (3, 2, 0, 0),
            2,
        ),
        (
            "unittest",
            Format::Unittest,
            "EF.sFFxu\n\
             ----------------------------------------------------------------------\n\
             Ran 7 tests in 0.001s\n\
             \n\
             FAILED (failures=3, errors=1, skipped=1, expected failures=1, unexpected successes=1)\n",
            (2, 3, 2, 1),
            4,
        ),
        (
            "cargo test",
            Format::Cargo,
            "\nrunning 4 tests\n\
             \n\
             test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
            (2, 1, 1, 0),
            1,
        ),
        (
            "cargo nextest",
            Format::Nextest,
            "────────────\n     Summary [   0.545s] 24 tests run: 17 passed, 7 failed, 2 skipped\nerror: test run failed\n",
            (17, 7, 2, 0),
            7,
        ),
        (
            "node --test",
            Format::Node,
            "ℹ tests 6\nℹ suites 1\nℹ pass 2\nℹ fail 2\nℹ cancelled 0\nℹ skipped 1\nℹ todo 1\nℹ duration_ms 116.565296\n",
            (2, 2, 2, 0),
            2,
        ),
        (
            "node --test --test-reporter=tap",
            Format::Node,
            "TAP version 13\n# tests 6\n# suites 1\n# pass 2\n# fail 2\n# cancelled 0\n# skipped 1\n# todo 1\n# duration_ms 254.97943\n",
            (2, 2, 2, 0),
            2,
        ),
        (
            "jest",
            Format::Jest,
            "Test Suites: 2 failed, 1 passed, 3 total\n\
             Tests:       7 failed, 1 skipped, 1 todo, 11 passed, 20 total\n\
             Snapshots:   1 passed, 1 total\n\
             Time:        0.372 s, estimated 1 s\n\
             Ran all test suites.\n",
            (11, 7, 2, 0),
            7,
        ),
        (
            "vitest",
            Format::Vitest,
            " Test Files  2 failed (2)\n      Tests  7 failed | 7 passed | 1 skipped | 1 todo (16)\n   Start at  15:52:16\n",
            (7, 7, 2, 0),
            7,
        ),
        (
            "maven",
            Format::Maven,
            "[INFO] Results:\n[INFO] \n[ERROR] Tests run: 11, Failures: 3, Errors: 1, Skipped: 1\n[INFO] \n[INFO] BUILD FAILURE\n",
            (6, 3, 1, 1),
            4,
        ),
    ];
    let mut problems = Vec::new();
    for (what, format, text, want, unnamed) in cases {
        let (r, _) = run(*format, text);
        if counts(&r) != *want || r.unnamed != *unnamed {
            problems.push(format!(
                "{what}: {:?} with {} unnamed, want {want:?} with {unnamed}",
                counts(&r),
                r.unnamed
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
