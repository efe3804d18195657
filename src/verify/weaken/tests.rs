use super::*;

use crate::verify::report::{Verdict, VerificationReport};
use crate::verify::runs::RunSet;

const PY: &str = "import unittest
import calc


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(calc.mul(2, 3), 6)
        self.assertEqual(calc.mul(0, 3), 0)


if __name__ == \"__main__\":
    unittest.main()
";

fn contract_naming(files: &[(&str, &str)]) -> Contract {
    contract_allowing(files, "add adds", serde_json::json!([]))
}

/// A contract naming `files` (path, why) whose goal is `goal` and whose
/// `verification.test_changes` are `test_changes`.
fn contract_allowing(
    files: &[(&str, &str)],
    goal: &str,
    test_changes: serde_json::Value,
) -> Contract {
    let files: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, why)| serde_json::json!({"path": path, "action": "modify", "why": why}))
        .collect();
    Contract::from_json(
        &serde_json::json!({
            "summary": "s",
            "diagnosis": {"hypothesis": "h"},
            "change": {"goal": goal, "files": files},
            "verification": {"commands": ["python3 -m unittest"], "test_changes": test_changes},
            "routing": {"risk": "low"}
        })
        .to_string(),
    )
    .unwrap()
}

fn side(text: Option<&str>) -> FileText {
    text.map_or(FileText::Absent, |t| FileText::Text(t.to_owned()))
}

/// Each finding as `(kind, what, location, refused)`.
fn weakened(
    contract: &Contract,
    files: &[(&str, Option<&str>, Option<&str>)],
) -> Vec<(WeakeningKind, String, String, bool)> {
    let files = files
        .iter()
        .map(|(path, base, result)| ((*path).to_owned(), side(*base), side(*result)))
        .collect();
    find(contract, files)
        .findings
        .into_iter()
        .map(|f| (f.kind, f.what.clone(), f.location(), f.refused()))
        .collect()
}

/// What changing `path` from `base` to `result` weakens, under a contract naming only
/// `calc.py`: `(what, location)` each.
fn one(path: &str, base: &str, result: &str) -> Vec<(String, String)> {
    weakened(
        &contract_naming(&[("calc.py", "use +")]),
        &[(path, Some(base), Some(result))],
    )
    .into_iter()
    .map(|(_, what, at, refused)| {
        assert!(refused, "{what}");
        (what, at)
    })
    .collect()
}

fn pair(what: &str, at: &str) -> (String, String) {
    (what.to_owned(), at.to_owned())
}

#[test]
fn python_skip_markers_are_found_with_their_lines() {
    for (decorator, shown) in [
        ("@unittest.skip(\"later\")", "@unittest.skip"),
        ("@unittest.skipIf(True, \"x\")", "@unittest.skipIf"),
        ("@unittest.skipUnless(False, \"x\")", "@unittest.skipUnless"),
        ("@pytest.mark.skip(reason=\"x\")", "@pytest.mark.skip"),
        (
            "@pytest.mark.skipif(sys.platform == \"linux\", reason=\"x\")",
            "@pytest.mark.skipif",
        ),
        ("@pytest.mark.xfail", "@pytest.mark.xfail"),
        ("@unittest.expectedFailure", "@unittest.expectedFailure"),
    ] {
        let result = PY.replace(
            "    def test_add",
            &format!("    {decorator}\n    def test_add"),
        );
        assert_eq!(
            one("test_calc.py", PY, &result),
            [pair(
                &format!("adds `{shown}` to `TestCalc.test_add`"),
                "test_calc.py:6"
            )],
            "{decorator}"
        );
    }
    for (call, shown) in [
        ("self.skipTest(\"later\")", "self.skipTest"),
        ("pytest.skip(\"later\")", "pytest.skip"),
        ("pytest.xfail(\"later\")", "pytest.xfail"),
        ("raise unittest.SkipTest(\"later\")", "unittest.SkipTest"),
    ] {
        let in_body = PY.replace(
            "        self.assertEqual(calc.add(2, 3), 5)",
            &format!("        {call}\n        self.assertEqual(calc.add(2, 3), 5)"),
        );
        assert_eq!(
            one("test_calc.py", PY, &in_body),
            [pair(
                &format!("adds `{shown}` to `TestCalc.test_add`"),
                "test_calc.py:7"
            )],
            "{call}"
        );
    }
    let on_class = PY.replace("class TestCalc", "@unittest.skip(\"all\")\nclass TestCalc");
    assert_eq!(
        one("test_calc.py", PY, &on_class),
        [pair(
            "adds `@unittest.skip` to `TestCalc`",
            "test_calc.py:5"
        )]
    );
    let module = "import pytest\n\ndef test_a():\n    assert 1\n";
    let marked = "import pytest\npytestmark = pytest.mark.skip(reason=\"x\")\n\ndef test_a():\n    assert 1\n";
    assert_eq!(
        one("tests/test_a.py", module, marked),
        [pair(
            "adds `pytestmark = pytest.mark.skip` to the whole file",
            "tests/test_a.py:2"
        )]
    );
}

#[test]
fn a_skip_in_a_string_or_a_comment_is_not_one() {
    let result = PY.replace(
        "    def test_add(self):\n",
        "    # @unittest.skip(\"maybe later\")\n    def test_add(self):\n        \"\"\"\n        @pytest.mark.skip\n        \"\"\"\n        note = \"self.skipTest('x') @unittest.skip\"  # pytest.skip(\n",
    );
    assert_eq!(one("test_calc.py", PY, &result), []);
    let rust = "#[test]\nfn parses() {\n    assert!(parse(\"\"));\n}\n";
    let quoted = "#[test]\nfn parses() {\n    // #[ignore]\n    let s = \"#[ignore]\";\n    let r = r#\"#[ignore] assert!(\"#;\n    assert!(parse(\"\"));\n}\n";
    assert_eq!(one("src/parse.rs", rust, quoted), []);
    let js = "it('adds', () => {\n  expect(add(2, 3)).toBe(5);\n});\n";
    let quoted = "it('adds', () => {\n  // it.skip('adds')\n  const s = 'it.only(\"x\")';\n  expect(add(2, 3)).toBe(5);\n  expect(/a/.test('a')).toBe(true);\n});\n";
    assert_eq!(one("calc.test.js", js, quoted), []);
}

#[test]
fn a_new_skipped_test_beside_new_passing_ones_is_still_found() {
    let result = PY.replace(
        "\n\nif __name__",
        "\n    def test_sub(self):\n        self.assertEqual(calc.sub(3, 2), 1)\n\n    @unittest.skip(\"flaky\")\n    def test_div(self):\n        self.assertEqual(calc.div(6, 3), 2)\n\n\nif __name__",
    );
    assert_eq!(
        one("test_calc.py", PY, &result),
        [pair(
            "adds `@unittest.skip` to `TestCalc.test_div`",
            "test_calc.py:16"
        )]
    );
}

#[test]
fn removed_assertions_and_falling_counts_name_the_base_lines() {
    let removed = PY.replace("        self.assertEqual(calc.mul(0, 3), 0)\n", "");
    assert_eq!(
        one("test_calc.py", PY, &removed),
        [pair(
            "removes the assertion `self.assertEqual(calc.mul(0, 3), 0)` from `TestCalc.test_mul`",
            "test_calc.py:11 in the base"
        )]
    );
    // Commented out is removed.
    let commented = PY.replace(
        "        self.assertEqual(calc.add(2, 3), 5)",
        "        # self.assertEqual(calc.add(2, 3), 5)\n        pass",
    );
    assert_eq!(
        one("test_calc.py", PY, &commented),
        [pair(
            "removes the assertion `self.assertEqual(calc.add(2, 3), 5)` from `TestCalc.test_add`",
            "test_calc.py:7 in the base"
        )]
    );
    let both = PY.replace(
        "        self.assertEqual(calc.mul(2, 3), 6)\n        self.assertEqual(calc.mul(0, 3), 0)\n",
        "        self.assertTrue(calc.mul(2, 3))\n",
    );
    assert_eq!(
        one("test_calc.py", PY, &both),
        [pair(
            "lowers the assertions of `TestCalc.test_mul` from 2 to 1",
            "test_calc.py:10, 11 in the base"
        )]
    );
    // Rewording an assertion keeps the count: not a weakening by count, but a changed
    // expectation, refused in a file the contract does not name.
    let reworded = PY.replace("calc.mul(0, 3), 0)", "calc.mul(3, 0), 0)");
    assert_eq!(
        one("test_calc.py", PY, &reworded),
        [pair(
            "changes `self.assertEqual(calc.mul(0, 3), 0)` to `self.assertEqual(calc.mul(3, 0), 0)` in `TestCalc.test_mul`",
            "test_calc.py:11"
        )]
    );
    // Spacing alone changes nothing.
    let spaced = PY.replace("calc.mul(0, 3), 0)", "calc.mul(0,3),0 )");
    assert_eq!(one("test_calc.py", PY, &spaced), []);
    let pytest = "def test_raises():\n    with pytest.raises(ValueError):\n        parse('')\n    assert parse('1') == 1\n";
    let emptied = "def test_raises():\n    parse('1')\n";
    assert_eq!(
        one("tests/test_p.py", pytest, emptied),
        [pair(
            "lowers the assertions of `test_raises` from 2 to 0",
            "tests/test_p.py:2, 4 in the base"
        )]
    );
}

#[test]
fn a_removed_test_is_found_and_a_moved_or_renamed_one_is_not() {
    let removed = PY.replace(
        "    def test_mul(self):\n        self.assertEqual(calc.mul(2, 3), 6)\n        self.assertEqual(calc.mul(0, 3), 0)\n",
        "",
    );
    assert_eq!(
        one("test_calc.py", PY, &removed),
        [pair(
            "removes the test `TestCalc.test_mul`",
            "test_calc.py:9 in the base"
        )]
    );
    // No longer a test by its name: removed.
    let demoted = PY.replace("def test_mul", "def check_mul");
    assert_eq!(
        one("test_calc.py", PY, &demoted),
        [pair(
            "removes the test `TestCalc.test_mul`",
            "test_calc.py:9 in the base"
        )]
    );
    let contract = contract_naming(&[("calc.py", "use +")]);
    // Renamed, assertions kept.
    let renamed = PY.replace("def test_mul", "def test_multiplies");
    assert_eq!(
        weakened(&contract, &[("test_calc.py", Some(PY), Some(&renamed))]),
        []
    );
    // The file moved: its tests are still there.
    assert_eq!(
        weakened(
            &contract,
            &[
                ("test_calc.py", Some(PY), None),
                ("tests/test_calc.py", None, Some(PY)),
            ]
        ),
        []
    );
    // The file deleted: every test it held is removed.
    let gone: Vec<(WeakeningKind, String)> =
        weakened(&contract, &[("test_calc.py", Some(PY), None)])
            .into_iter()
            .map(|(kind, what, _, _)| (kind, what))
            .collect();
    assert_eq!(
        gone,
        [
            (
                WeakeningKind::RemovedTest,
                "removes the test `TestCalc.test_add`".to_owned()
            ),
            (
                WeakeningKind::RemovedTest,
                "removes the test `TestCalc.test_mul`".to_owned()
            ),
        ]
    );
}

#[test]
fn rust_tests_ignore_and_assertions() {
    let base = "fn helper() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 3), 5);\n        assert!(add(0, 0) == 0);\n    }\n\n    #[tokio::test(flavor = \"multi_thread\")]\n    async fn lives<'a>() {\n        let c = '{';\n        assert_ne!(c, '}');\n    }\n}\n";
    let ignored = base.replace(
        "    #[test]\n    fn adds",
        "    #[test]\n    #[ignore = \"later\"]\n    fn adds",
    );
    assert_eq!(
        one("src/calc.rs", base, &ignored),
        [pair("adds `#[ignore]` to `adds`", "src/calc.rs:6")]
    );
    let fewer = base.replace("        assert!(add(0, 0) == 0);\n", "");
    assert_eq!(
        one("src/calc.rs", base, &fewer),
        [pair(
            "removes the assertion `assert!(add(0, 0) == 0);` from `adds`",
            "src/calc.rs:8 in the base"
        )]
    );
    let async_fewer = base.replace("        assert_ne!(c, '}');\n", "");
    assert_eq!(
        one("src/calc.rs", base, &async_fewer),
        [pair(
            "removes the assertion `assert_ne!(c, '}');` from `lives`",
            "src/calc.rs:14 in the base"
        )]
    );
    let untested = base.replace("    #[test]\n", "");
    assert_eq!(
        one("src/calc.rs", base, &untested),
        [pair("removes the test `adds`", "src/calc.rs:6 in the base")]
    );
}

#[test]
fn javascript_skip_and_focus_markers() {
    let base = "describe('calc', () => {\n  it('adds', () => {\n    expect(add(2, 3)).toBe(5);\n  });\n  test('muls', async () => {\n    assert.equal(mul(2, 3), 6);\n  });\n});\n";
    let cases = [
        (
            "  it('adds'",
            "  it.skip('adds'",
            "adds `it.skip` to `calc > adds`",
            2,
        ),
        (
            "  it('adds'",
            "  xit('adds'",
            "adds `xit` to `calc > adds`",
            2,
        ),
        (
            "  test('muls'",
            "  test.skip('muls'",
            "adds `test.skip` to `calc > muls`",
            5,
        ),
        (
            "describe('calc'",
            "describe.skip('calc'",
            "adds `describe.skip` to `calc`",
            1,
        ),
        (
            "describe('calc'",
            "xdescribe('calc'",
            "adds `xdescribe` to `calc`",
            1,
        ),
        (
            "  it('adds'",
            "  it.only('adds'",
            "adds `it.only` to `calc > adds`",
            2,
        ),
        (
            "  it('adds'",
            "  fit('adds'",
            "adds `fit` to `calc > adds`",
            2,
        ),
        (
            "describe('calc'",
            "describe.only('calc'",
            "adds `describe.only` to `calc`",
            1,
        ),
        (
            "describe('calc'",
            "fdescribe('calc'",
            "adds `fdescribe` to `calc`",
            1,
        ),
    ];
    for (old, new, what, line) in cases {
        let result = base.replace(old, new);
        assert_eq!(
            one("src/calc.test.ts", base, &result),
            [pair(what, &format!("src/calc.test.ts:{line}"))],
            "{new}"
        );
    }
    let contract = contract_naming(&[("calc.py", "use +")]);
    let focused = weakened(
        &contract,
        &[(
            "src/calc.test.ts",
            Some(base),
            Some(&base.replace("it('adds'", "it.only('adds'")),
        )],
    );
    assert_eq!(focused[0].0, WeakeningKind::Focus);
    let fewer = base.replace("    expect(add(2, 3)).toBe(5);\n", "");
    assert_eq!(
        one("src/calc.test.ts", base, &fewer),
        [pair(
            "removes the assertion `expect(add(2, 3)).toBe(5);` from `calc > adds`",
            "src/calc.test.ts:3 in the base"
        )]
    );
}

#[test]
fn go_skips_assertions_and_build_constraints() {
    let base = "package calc\n\nimport \"testing\"\n\nfunc TestMain(m *testing.M) { m.Run() }\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Errorf(\"want 5\")\n\t}\n\trequire.Equal(t, 0, Add(0, 0))\n}\n";
    let skipped = base.replace(
        "func TestAdd(t *testing.T) {\n",
        "func TestAdd(t *testing.T) {\n\tt.Skip(\"later\")\n",
    );
    assert_eq!(
        one("calc_test.go", base, &skipped),
        [pair("adds `t.Skip` to `TestAdd`", "calc_test.go:8")]
    );
    let fewer = base.replace("\trequire.Equal(t, 0, Add(0, 0))\n", "");
    assert_eq!(
        one("calc_test.go", base, &fewer),
        [pair(
            "removes the assertion `require.Equal(t, 0, Add(0, 0))` from `TestAdd`",
            "calc_test.go:11 in the base"
        )]
    );
    let tagged = format!("//go:build integration\n\n{base}");
    assert_eq!(
        one("calc_test.go", base, &tagged),
        [pair(
            "adds the build constraint `//go:build integration`",
            "calc_test.go:1"
        )]
    );
    // Not a test file: Go keeps tests in `_test.go`.
    assert_eq!(one("calc.go", base, &skipped), []);
    // Nor is an application's module, whatever its functions are called.
    let app = "def test_connection(db):\n    assert db.ping()\n";
    assert_eq!(one("src/db.py", app, ""), []);
    assert_eq!(
        one("src/app.js", "test('x', () => { expect(1) });\n", ""),
        []
    );
}

#[test]
fn java_disabled_and_assertions() {
    let base = "class CalcTest {\n    @Test\n    void adds() {\n        assertEquals(5, Calc.add(2, 3));\n        Assertions.assertTrue(Calc.add(0, 0) == 0);\n    }\n}\n";
    let disabled = base.replace("    @Test\n", "    @Test\n    @Disabled(\"later\")\n");
    assert_eq!(
        one("src/test/java/CalcTest.java", base, &disabled),
        [pair(
            "adds `@Disabled` to `adds`",
            "src/test/java/CalcTest.java:3"
        )]
    );
    let ignored = base.replace("class CalcTest", "@Ignore\nclass CalcTest");
    assert_eq!(
        one("CalcTest.java", base, &ignored),
        [pair("adds `@Ignore` to `CalcTest`", "CalcTest.java:1")]
    );
    let fewer = base.replace("        Assertions.assertTrue(Calc.add(0, 0) == 0);\n", "");
    assert_eq!(
        one("CalcTest.java", base, &fewer),
        [pair(
            "removes the assertion `Assertions.assertTrue(Calc.add(0, 0) == 0);` from `adds`",
            "CalcTest.java:5 in the base"
        )]
    );
}

#[test]
fn edits_to_the_test_selection() {
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "pytest.ini",
            "[pytest]\naddopts = -q\n",
            "[pytest]\naddopts = -q\n    -k 'not add'\n",
            "changes `addopts` in `[pytest]` to `-q-k'notadd'`",
            "pytest.ini:2",
        ),
        (
            "setup.cfg",
            "[metadata]\nname = calc\n",
            "[metadata]\nname = calc\n\n[tool:pytest]\nnorecursedirs = tests\n",
            "adds `norecursedirs` in `[tool:pytest]` = `tests`",
            "setup.cfg:5",
        ),
        (
            "tox.ini",
            "[pytest]\ntestpaths = tests\n",
            "[pytest]\n",
            "removes `testpaths` in `[pytest]`",
            "tox.ini:2 in the base",
        ),
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\ntestpaths = [\n  \"tests\",\n]\n",
            "[tool.pytest.ini_options]\ntestpaths = [\n  \"tests/unit\",\n]\n",
            "changes `testpaths` in `[tool.pytest.ini_options]` to `[\"tests/unit\",]`",
            "pyproject.toml:2",
        ),
        (
            "jest.config.js",
            "module.exports = {\n  // testMatch: ['x'],\n  verbose: true,\n};\n",
            "module.exports = {\n  // testMatch: ['x'],\n  testPathIgnorePatterns: ['/calc/'],\n  verbose: true,\n};\n",
            "adds `testPathIgnorePatterns` = `['/calc/']`",
            "jest.config.js:3",
        ),
        (
            "package.json",
            "{\n  \"name\": \"calc\",\n  \"jest\": {\n    \"testMatch\": [\"**/*.test.js\"]\n  }\n}\n",
            "{\n  \"name\": \"calc\",\n  \"jest\": {\n    \"testMatch\": [\"**/add.test.js\"]\n  }\n}\n",
            "changes `testMatch` to `[\"**/add.test.js\"]`",
            "package.json:4",
        ),
        (
            "vitest.config.ts",
            "export default defineConfig({ test: { include: ['src/**/*.test.ts'] } })\n",
            "export default defineConfig({ test: { include: ['src/**/*.test.ts'], exclude: ['src/calc.test.ts'] } })\n",
            "adds `exclude` = `['src/calc.test.ts']`",
            "vitest.config.ts:1",
        ),
        (
            "Cargo.toml",
            "[package]\nname = \"calc\"\n\n[lib]\npath = \"src/lib.rs\"\n",
            "[package]\nname = \"calc\"\n\n[lib]\npath = \"src/lib.rs\"\ntest = false\n",
            "adds `test` in `[lib]` = `false`",
            "Cargo.toml:6",
        ),
        (
            "Cargo.toml",
            "[package]\nname = \"calc\"\n\n[[test]]\nname = \"api\"\npath = \"tests/api.rs\"\n",
            "[package]\nname = \"calc\"\n",
            "removes the `[[test]]` target `api`",
            "Cargo.toml:4 in the base",
        ),
        (
            "pom.xml",
            "<project>\n  <build>\n  </build>\n</project>\n",
            "<project>\n  <properties>\n    <skipTests>true</skipTests>\n  </properties>\n  <build>\n  </build>\n</project>\n",
            "adds `<skipTests>true</skipTests>`",
            "pom.xml:3",
        ),
        (
            ".github/workflows/ci.yml",
            "jobs:\n  test:\n    steps:\n      - run: python -m pytest\n",
            "jobs:\n  test:\n    continue-on-error: true\n    steps:\n      - run: python -m pytest tests/unit\n",
            "removes or changes `- run: python -m pytest`",
            ".github/workflows/ci.yml:4 in the base",
        ),
    ];
    for (path, base, result, what, at) in cases {
        let found = one(path, base, result);
        assert!(
            found.contains(&pair(what, at)),
            "{path}: {found:#?} lacks {what} at {at}"
        );
    }
    let ci = one(
        ".github/workflows/ci.yml",
        "jobs:\n  test:\n    steps:\n      - run: python -m pytest\n",
        "jobs:\n  test:\n    continue-on-error: true\n    steps:\n      - run: python -m pytest\n",
    );
    assert_eq!(
        ci,
        [pair(
            "adds `continue-on-error: true`",
            ".github/workflows/ci.yml:3"
        )]
    );
    // A test target that only names its file runs more tests, not fewer; a commented
    // key is no key.
    let more = one(
        "Cargo.toml",
        "[package]\nname = \"calc\"\n",
        "[package]\nname = \"calc\"\n\n[[test]]\nname = \"api\"\npath = \"tests/api.rs\"\n",
    );
    assert_eq!(more, []);
    let commented = one(
        "jest.config.js",
        "module.exports = {};\n",
        "module.exports = {\n  // testMatch: ['x'],\n};\n",
    );
    assert_eq!(commented, []);
}

/// The ruling on each finding of `files` under `contract`.
fn rulings(contract: &Contract, files: &[(&str, Option<&str>, Option<&str>)]) -> Vec<Ruling> {
    find(
        contract,
        files
            .iter()
            .map(|(p, b, r)| ((*p).to_owned(), side(*b), side(*r)))
            .collect(),
    )
    .findings
    .into_iter()
    .map(|f| f.ruling)
    .collect()
}

#[test]
fn words_in_the_contract_declare_nothing() {
    let skipped = PY.replace(
        "    def test_add",
        "    @unittest.skip(\"upstream\")\n    def test_add",
    );
    let files = [("test_calc.py", Some(PY), Some(skipped.as_str()))];
    // The goal and the file's `why` both say "skip": still refused, nothing allows it.
    let wordy = contract_allowing(
        &[("test_calc.py", "Skip test_add until the upstream fix lands")],
        "Skip the flaky test and ignore, disable or remove whatever fails",
        serde_json::json!([]),
    );
    assert_eq!(
        rulings(&wordy, &files),
        [Ruling::Refused(
            "the contract's test_changes allow no change to `test_calc.py`".into()
        )]
    );
    let selection = [(
        "pytest.ini",
        Some("[pytest]\naddopts = -q\n"),
        Some("[pytest]\naddopts = -q -m 'not slow'\n"),
    )];
    let keyed = contract_naming(&[("pytest.ini", "pass -m 'not slow' in addopts")]);
    assert!(
        matches!(rulings(&keyed, &selection)[..], [Ruling::Refused(_)]),
        "{:?}",
        rulings(&keyed, &selection)
    );
}

#[test]
fn a_test_change_allows_only_its_file_test_and_kind() {
    let skipped = PY.replace(
        "    def test_add",
        "    @unittest.skip(\"upstream\")\n    def test_add",
    );
    let files = [("test_calc.py", Some(PY), Some(skipped.as_str()))];
    let allowing = |entry: serde_json::Value| {
        rulings(
            &contract_allowing(
                &[("calc.py", "use +")],
                "add adds",
                serde_json::json!([entry]),
            ),
            &files,
        )
    };
    let declared = "allowed by the contract's test_changes: skip `test_calc.py` `test_add`: \
                    upstream fix pending";
    assert_eq!(
        allowing(serde_json::json!({
            "path": "./test_calc.py", "test": "test_add", "kind": "skip", "why": "upstream fix pending"
        })),
        [Ruling::Declared(declared.into())]
    );
    // The whole name, a pytest node id, and no test at all (every test in the file).
    for test in [
        serde_json::json!("TestCalc.test_add"),
        serde_json::json!("test_calc.py::TestCalc::test_add"),
    ] {
        let ruled = allowing(serde_json::json!({
            "path": "test_calc.py", "test": test, "kind": "skip", "why": "w"
        }));
        assert!(
            matches!(ruled[..], [Ruling::Declared(_)]),
            "{test}: {ruled:?}"
        );
    }
    let whole = allowing(serde_json::json!({"path": "test_calc.py", "kind": "skip", "why": "w"}));
    assert_eq!(
        whole,
        [Ruling::Declared(
            "allowed by the contract's test_changes: skip `test_calc.py`: w".into()
        )]
    );
    // The wrong kind, the wrong test, another file: refused.
    assert_eq!(
        allowing(serde_json::json!({
            "path": "test_calc.py", "test": "test_add", "kind": "remove", "why": "w"
        })),
        [Ruling::Refused(
            "the contract's test_changes for `test_calc.py` do not allow skip of `TestCalc.test_add`"
                .into()
        )]
    );
    for test in ["test_mul", "OtherCalc.test_add", "add"] {
        let ruled = allowing(serde_json::json!({
            "path": "test_calc.py", "test": test, "kind": "skip", "why": "w"
        }));
        assert!(
            matches!(ruled[..], [Ruling::Refused(_)]),
            "{test}: {ruled:?}"
        );
    }
    assert_eq!(
        allowing(serde_json::json!({
            "path": "tests/test_calc.py", "test": "test_add", "kind": "skip", "why": "w"
        })),
        [Ruling::Refused(
            "the contract's test_changes allow no change to `test_calc.py`".into()
        )]
    );
    // A folder covers its files; a focus marker is allowed as a skip.
    let under = [(
        "tests/test_calc.py",
        Some(PY),
        Some(skipped.replace("@unittest.skip(\"upstream\")", "@unittest.skip(\"x\")")),
    )];
    let under: Vec<(&str, Option<&str>, Option<&str>)> = under
        .iter()
        .map(|(p, b, r)| (*p, *b, r.as_deref()))
        .collect();
    let folder = contract_allowing(
        &[("calc.py", "use +")],
        "g",
        serde_json::json!([{"path": "tests/", "kind": "skip", "why": "w"}]),
    );
    assert!(matches!(
        rulings(&folder, &under)[..],
        [Ruling::Declared(_)]
    ));
    let js = "it('adds', () => {\n  expect(add(2, 3)).toBe(5);\n});\n";
    let focused = js.replace("it('adds'", "it.only('adds'");
    let allowed = contract_allowing(
        &[("calc.py", "use +")],
        "g",
        serde_json::json!([{"path": "calc.test.js", "test": "adds", "kind": "skip", "why": "w"}]),
    );
    assert!(matches!(
        rulings(&allowed, &[("calc.test.js", Some(js), Some(&focused))])[..],
        [Ruling::Declared(_)]
    ));
    // A selection edit is allowed by `select`, never by an entry naming a test.
    let selection = [(
        "pytest.ini",
        Some("[pytest]\naddopts = -q\n"),
        Some("[pytest]\naddopts = -q -m 'not slow'\n"),
    )];
    let select = |entry: serde_json::Value| {
        rulings(
            &contract_allowing(&[("pytest.ini", "w")], "g", serde_json::json!([entry])),
            &selection,
        )
    };
    assert!(matches!(
        select(
            serde_json::json!({"path": "pytest.ini", "kind": "select", "why": "slow ones run nightly"})
        )[..],
        [Ruling::Declared(_)]
    ));
    assert!(matches!(
        select(
            serde_json::json!({"path": "pytest.ini", "test": "slow", "kind": "select", "why": "w"})
        )[..],
        [Ruling::Refused(_)]
    ));
    // A removed test by `remove`, a lost assertion by `weaken`.
    let removed = PY.replace(
        "    def test_mul(self):\n        self.assertEqual(calc.mul(2, 3), 6)\n        self.assertEqual(calc.mul(0, 3), 0)\n",
        "",
    );
    let lost = PY.replace("        self.assertEqual(calc.mul(0, 3), 0)\n", "");
    for (result, kind, other) in [(&removed, "remove", "weaken"), (&lost, "weaken", "remove")] {
        let files = [("test_calc.py", Some(PY), Some(result.as_str()))];
        let ruled = |kind: &str| {
            rulings(
                &contract_allowing(
                    &[("calc.py", "use +")],
                    "g",
                    serde_json::json!([{"path": "test_calc.py", "test": "test_mul", "kind": kind, "why": "w"}]),
                ),
                &files,
            )
        };
        assert!(matches!(ruled(kind)[..], [Ruling::Declared(_)]), "{kind}");
        assert!(matches!(ruled(other)[..], [Ruling::Refused(_)]), "{other}");
    }
}

/// A test file where `test_x_returns_0` checks an exit code.
const CLI: &str = "import unittest
import cli


class TestCli(unittest.TestCase):
    def test_x_returns_0(self):
        rc = cli.main(['x'])
        self.assertEqual(rc, 0)

    def test_y(self):
        self.assertEqual(cli.main(['y']), 0)
";

#[test]
fn a_renamed_test_that_expects_something_else_is_a_changed_expectation_where_the_contract_names_it()
{
    // The fix makes `x` exit 2, and the test, renamed, now says so.
    let fixed = CLI
        .replace("test_x_returns_0", "test_x_returns_2")
        .replace("self.assertEqual(rc, 0)", "self.assertEqual(rc, 2)");
    let files = || {
        vec![(
            "tests/test_cli.py".to_owned(),
            FileText::Text(CLI.into()),
            FileText::Text(fixed.clone()),
        )]
    };
    let named = find(
        &contract_naming(&[("cli.py", "exit 2"), ("tests/test_cli.py", "expect 2")]),
        files(),
    );
    assert_eq!(named.findings, [], "{named:#?}");
    assert_eq!(
        named.changed,
        [ChangedExpectation {
            path: "tests/test_cli.py".into(),
            test: "TestCli.test_x_returns_2".into(),
            renamed_from: Some("TestCli.test_x_returns_0".into()),
            line: 8,
            old_line: 8,
            old_assertion: "self.assertEqual(rc, 0)".into(),
            new_assertion: "self.assertEqual(rc, 2)".into(),
        }]
    );
    let report = VerificationReport::compare(&RunSet::default(), &RunSet::default(), &[], vec![])
        .with_weakening(named.clone());
    assert_eq!(report.verdict, Verdict::Passed);
    let failing = report.for_publication().failing;
    assert!(
        failing.contains(
            "**Changed expectations (1)**: assertions the result writes differently in test \
             files the contract names"
        ) && failing.contains(
            "- `tests/test_cli.py:8` in `TestCli.test_x_returns_2` (renamed from \
             `TestCli.test_x_returns_0`): `self.assertEqual(rc, 0)` (line 8 in the base) → \
             `self.assertEqual(rc, 2)`"
        ),
        "{failing}"
    );
    assert!(
        report
            .check_markdown()
            .contains("**Changed expectations (1)**")
    );
    assert!(
        report.compact().contains(
            "- tests/test_cli.py:8 TestCli.test_x_returns_2 (renamed from \
             TestCli.test_x_returns_0): self.assertEqual(rc, 0) (line 8 in the base) -> \
             self.assertEqual(rc, 2)"
        ),
        "{}",
        report.compact()
    );
    let stored: VerificationReport =
        serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(stored, report);

    // The same in a file the contract does not name: refused, unless `rename` allows it.
    let unnamed = find(&contract_naming(&[("cli.py", "exit 2")]), files());
    assert_eq!(unnamed.changed, []);
    let found: Vec<(WeakeningKind, String, String, bool)> = unnamed
        .findings
        .iter()
        .map(|f| (f.kind, f.what.clone(), f.location(), f.refused()))
        .collect();
    assert_eq!(
        found,
        [(
            WeakeningKind::RenamedTest,
            "renames the test `TestCli.test_x_returns_0` to `TestCli.test_x_returns_2` and \
             changes `self.assertEqual(rc, 0)` to `self.assertEqual(rc, 2)`"
                .to_owned(),
            "tests/test_cli.py:8".to_owned(),
            true
        )]
    );
    let allowed = find(
        &contract_allowing(
            &[("cli.py", "exit 2")],
            "g",
            serde_json::json!([{
                "path": "tests/test_cli.py", "test": "test_x_returns_0", "kind": "rename", "why": "x exits 2"
            }]),
        ),
        files(),
    );
    assert!(!allowed.findings[0].refused(), "{allowed:#?}");

    // Kept under its name with another expected value: the same, in place.
    let in_place = CLI.replace("self.assertEqual(rc, 0)", "self.assertEqual(rc, 2)");
    let in_place = || {
        vec![(
            "tests/test_cli.py".to_owned(),
            FileText::Text(CLI.into()),
            FileText::Text(in_place.clone()),
        )]
    };
    let named = find(&contract_naming(&[("tests/", "expect 2")]), in_place());
    assert_eq!(named.findings, []);
    assert_eq!(named.changed.len(), 1);
    assert_eq!(named.changed[0].renamed_from, None);
    let unnamed = find(&contract_naming(&[("cli.py", "exit 2")]), in_place());
    assert_eq!(unnamed.findings.len(), 1);
    assert_eq!(unnamed.findings[0].kind, WeakeningKind::ChangedExpectation);
    assert!(unnamed.findings[0].refused());
}

#[test]
fn a_test_that_loses_assertions_or_is_replaced_by_another_is_still_refused_where_named() {
    let contract = contract_naming(&[("cli.py", "exit 2"), ("tests/test_cli.py", "expect 2")]);
    let found = |result: &str| -> Vec<(WeakeningKind, bool)> {
        find(
            &contract,
            vec![(
                "tests/test_cli.py".to_owned(),
                FileText::Text(CLI.into()),
                FileText::Text(result.to_owned()),
            )],
        )
        .findings
        .iter()
        .map(|f| (f.kind, f.refused()))
        .collect()
    };
    // Renamed and its assertion gone.
    let emptied = CLI
        .replace("test_x_returns_0", "test_x_returns_2")
        .replace(
            "        self.assertEqual(rc, 0)\n",
            "        self.assertTrue(True or rc)\n",
        )
        .replace(
            "    def test_y",
            "    def test_z(self):\n        pass\n\n    def test_y",
        );
    let lost = CLI.replace(
        "        rc = cli.main(['x'])\n        self.assertEqual(rc, 0)\n",
        "        cli.main(['x'])\n",
    );
    assert_eq!(found(&lost), [(WeakeningKind::Assertions, true)]);
    let renamed_lost = lost.replace("test_x_returns_0", "test_x_returns_2");
    assert_eq!(found(&renamed_lost), [(WeakeningKind::RemovedTest, true)]);
    // An unrelated test in its place: removed, not renamed.
    let replaced = CLI.replace(
        "    def test_x_returns_0(self):\n        rc = cli.main(['x'])\n        self.assertEqual(rc, 0)\n",
        "    def test_help(self):\n        self.assertIn('usage', cli.usage())\n",
    );
    assert_eq!(found(&replaced), [(WeakeningKind::RemovedTest, true)]);
    // A new assertion of another shape with a name unlike the old one: removed.
    assert!(found(&emptied).contains(&(WeakeningKind::RemovedTest, true)));
}

#[test]
fn a_refused_weakening_fails_a_passing_report_and_says_what_to_undo() {
    let skipped = PY.replace(
        "    def test_add",
        "    @unittest.skip(\"later\")\n    def test_add",
    );
    let weakening = find(
        &contract_naming(&[("calc.py", "use +")]),
        vec![(
            "test_calc.py".into(),
            FileText::Text(PY.into()),
            FileText::Text(skipped),
        )],
    );
    let passed = VerificationReport::compare(&RunSet::default(), &RunSet::default(), &[], vec![]);
    assert_eq!(passed.verdict, Verdict::Passed);
    let stored = serde_json::to_string(&passed).unwrap();
    assert!(!stored.contains("weakening"), "{stored}");
    let report = passed.with_weakening(weakening.clone());
    assert_eq!(report.verdict, Verdict::Failed);
    assert!(
        report
            .headline()
            .starts_with("Verification failed: 1 weakened test"),
        "{}",
        report.headline()
    );
    let failing = report.for_publication().failing;
    assert!(
        failing.contains(
            "- **refused**: adds `@unittest.skip` to `TestCalc.test_add` (`test_calc.py:6`): \
             the contract's test_changes allow no change to `test_calc.py`"
        ),
        "{failing}"
    );
    assert!(report.check_markdown().contains("**Weakened tests (1)**"));
    let compact = report.compact();
    assert!(
        compact.contains(
            "to do: remove `@unittest.skip` at test_calc.py:6 and make `TestCalc.test_add` pass instead"
        ),
        "{compact}"
    );
    let instructions = report.weakening.instructions().unwrap();
    assert!(instructions.starts_with("Verification refused these changes to the tests"));
    let back: VerificationReport =
        serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(back, report);

    // A refused scope stays refused; a declared weakening alone fails nothing.
    let mut refused =
        VerificationReport::compare(&RunSet::default(), &RunSet::default(), &[], vec![]);
    refused.verdict = Verdict::Refused;
    assert_eq!(
        refused.with_weakening(weakening.clone()).verdict,
        Verdict::Refused
    );
    let mut declared = weakening;
    declared.findings[0].ruling = Ruling::Declared("x".into());
    let report = VerificationReport::compare(&RunSet::default(), &RunSet::default(), &[], vec![])
        .with_weakening(declared);
    assert_eq!(report.verdict, Verdict::Passed);
    assert!(report.weakening.instructions().is_none());
    assert!(
        report
            .for_publication()
            .failing
            .contains("- declared: adds")
    );
}

#[test]
fn findings_are_bounded_refused_first_and_unread_files_are_named() {
    let mut base = String::from("import unittest\n\n\nclass T(unittest.TestCase):\n");
    for i in 0..150 {
        base.push_str(&format!("    def test_{i}(self):\n        assert {i}\n"));
    }
    let mut found = find(
        &contract_allowing(
            &[("tests/test_t.py", "remove the old tests")],
            "g",
            serde_json::json!([{"path": "tests/test_t.py", "kind": "remove", "why": "gone"}]),
        ),
        vec![
            (
                "tests/test_t.py".into(),
                FileText::Text(base.clone()),
                FileText::Absent,
            ),
            (
                "test_other.py".into(),
                FileText::Text(base),
                FileText::Absent,
            ),
            (
                "test_big.py".into(),
                FileText::Text(String::new()),
                FileText::Unread("larger than 524288 bytes".into()),
            ),
        ],
    );
    assert_eq!(found.unread.len(), 1);
    assert_eq!(
        found.unread[0].why,
        "in the result: larger than 524288 bytes"
    );
    found = found.bounded();
    assert_eq!(found.findings.len(), MAX_FINDINGS);
    assert_eq!(found.findings_omitted, 200);
    assert!(found.findings.iter().all(|f| f.refused()));
    assert!(found.findings.iter().all(|f| f.path == "test_other.py"));
    assert!(
        found
            .markdown()
            .contains("Not read for weakened tests: `test_big.py`")
    );
}

/// One real upstream fix: its name, its source and test files, and each test file on
/// the base and with the fix's test patch applied.
struct RealTask {
    name: String,
    fix_files: Vec<String>,
    test_files: Vec<String>,
    files: Vec<(String, FileText, FileText)>,
}

/// The real upstream fixes under the shared fixtures: each test file of an instance on its
/// base (from the bundle) and with the instance's test patch applied.
fn real_tasks() -> Vec<RealTask> {
    let root = std::env::var_os("PLANWRIGHT_TEST_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
        })
        .join("real-tasks");
    let git = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut instances: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("instances"))
        .unwrap_or_else(|e| panic!("the real tasks are missing at {}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    instances.sort();
    assert!(
        !instances.is_empty(),
        "no instances under {}",
        root.display()
    );
    instances
        .into_iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let instance: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("instance.json")).unwrap())
                    .unwrap();
            let list = |key: &str| -> Vec<String> {
                instance[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect()
            };
            let (fix_files, test_files) = (list("fix_files"), list("test_files"));
            let parent = instance["parent"].as_str().unwrap();
            let repo = name.rsplit_once('-').unwrap().0;
            let bundle = root.join("bundles").join(format!("{repo}.bundle"));
            let checkout = tempfile::tempdir().unwrap();
            git(
                checkout.path(),
                &[
                    "clone",
                    "-q",
                    "-b",
                    &format!("base/{}", &parent[..12]),
                    bundle.to_str().unwrap(),
                    "tree",
                ],
            );
            let tree = checkout.path().join("tree");
            let read = |path: &str| match std::fs::read_to_string(tree.join(path)) {
                Ok(text) => FileText::Text(text),
                Err(_) => FileText::Absent,
            };
            let before: Vec<FileText> = test_files.iter().map(|p| read(p)).collect();
            git(&tree, &["apply", dir.join("test.patch").to_str().unwrap()]);
            let files = test_files
                .iter()
                .zip(before)
                .map(|(path, base)| (path.clone(), base, read(path)))
                .collect();
            RealTask {
                name,
                fix_files,
                test_files,
                files,
            }
        })
        .collect()
}

#[test]
fn real_upstream_test_changes_are_not_refused_where_the_contract_names_them() {
    let contract = |files: &[&String]| {
        let named: Vec<(&str, &str)> = files.iter().map(|p| (p.as_str(), "the fix")).collect();
        contract_naming(&named)
    };
    let mut renamed_on_real_files = 0;
    for RealTask {
        name,
        fix_files,
        test_files,
        files,
    } in real_tasks()
    {
        let all: Vec<&String> = fix_files.iter().chain(&test_files).collect();
        let named = find(&contract(&all), files.clone());
        assert_eq!(named.refused().count(), 0, "{name}: {}", named.markdown());
        // Where the fix changes what a test expects, a contract that does not name the
        // test file is refused; where it only adds, nothing is.
        let sources: Vec<&String> = fix_files.iter().collect();
        let unnamed = find(&contract(&sources), files.clone());
        assert_eq!(
            unnamed.refused().count(),
            named.changed.len(),
            "{name}: {}\n{}",
            named.markdown(),
            unnamed.markdown()
        );

        // The same file with the change the fix of an exit code makes: a test renamed and
        // its expected value changed.
        let (path, base, FileText::Text(result)) = &files[0] else {
            panic!("{name}: {} is not in the result", files[0].0);
        };
        let code = code::parse(Lang::of(path).unwrap(), result);
        let Some((test, (line, assertion))) = code.tests.iter().find_map(|t| {
            let (line, text) = t.assertions.first()?;
            let changed = replace_literal(text)?;
            let last = t.name.rsplit('.').next()?;
            (t.assertions.len() == 1
                && result.matches(&format!("def {last}(")).count() == 1
                && result.matches(text.as_str()).count() == 1)
                .then(|| (t.name.clone(), (*line, (text.clone(), changed))))
        }) else {
            continue;
        };
        let (old, new) = assertion;
        let last = test.rsplit('.').next().unwrap();
        let new_name = format!("{test}_changed");
        let edited = result
            .replace(&format!("def {last}("), &format!("def {last}_changed("))
            .replace(&old, &new);
        let edited = vec![(path.clone(), base.clone(), FileText::Text(edited))];
        let named = find(&contract(&all), edited.clone());
        assert_eq!(named.refused().count(), 0, "{name}: {}", named.markdown());
        assert!(
            named.changed.iter().any(|c| c.test == new_name
                && c.renamed_from.as_deref() == Some(test.as_str())
                && c.line as usize == line
                && c.new_assertion == new),
            "{name}: {test} → {new_name}: {:#?}",
            named.changed
        );
        let unnamed = find(&contract(&sources), edited);
        assert!(
            unnamed
                .refused()
                .any(|f| f.kind == WeakeningKind::RenamedTest
                    && f.test.as_deref() == Some(test.as_str())),
            "{name}: {}",
            unnamed.markdown()
        );
        renamed_on_real_files += 1;
    }
    assert!(
        renamed_on_real_files > 0,
        "no real test file had a test to rename"
    );
}

/// `text` with its last number made one more, or `None` when it holds none.
fn replace_literal(text: &str) -> Option<String> {
    let digits = text.rfind(|c: char| c.is_ascii_digit())?;
    let start = text[..=digits]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let number: u64 = text[start..=digits].parse().ok()?;
    Some(format!(
        "{}{}{}",
        &text[..start],
        number + 1,
        &text[digits + 1..]
    ))
}

const CALC_PY: &str = "import requests\n\n\ndef add(a, b):\n    return a - b\n\n\nclass Calc:\n    def mul(self, a, b):\n        return a * b\n\n\nRATE = 2\n";

/// The `Patch` findings of a result, as `(what, location, refused)`, under a contract
/// naming `contract_files`; each file is `(path, base, result)`.
fn patches(
    contract_files: &[(&str, &str)],
    files: &[(&str, Option<&str>, Option<&str>)],
) -> Vec<(String, String, bool)> {
    weakened(&contract_naming(contract_files), files)
        .into_iter()
        .filter(|(kind, ..)| *kind == WeakeningKind::Patch)
        .map(|(_, what, at, refused)| (what, at, refused))
        .collect()
}

fn patched(name: &str, source: &str, at: &str) -> (String, String, bool) {
    (
        format!(
            "patches `{name}` of `{source}` that the contract changes, so the test does not run \
             the code it checks"
        ),
        at.to_owned(),
        true,
    )
}

#[test]
fn python_tests_that_replace_code_the_contract_changes_are_refused() {
    let calc = [("calc.py", "use +")];
    // Each: what the test file gains after its imports, and the line of the patch.
    for (added, line, name) in [
        (
            "def setUpModule():\n    calc.add = lambda a, b: a + b\n",
            4,
            "add",
        ),
        ("calc.add = lambda a, b: a + b\n", 3, "add"),
        ("setattr(calc, \"add\", lambda a, b: a + b)\n", 3, "add"),
        (
            "from unittest import mock\npatcher = mock.patch(\"calc.add\", lambda a, b: a + b)\n",
            4,
            "add",
        ),
        (
            "from unittest.mock import patch\np = patch.object(calc, 'add', return_value=5)\n",
            4,
            "add",
        ),
        (
            "from unittest.mock import patch\np = patch.object(calc.Calc, 'mul')\n",
            4,
            "Calc.mul",
        ),
        (
            "from unittest import mock\np = mock.patch.multiple(calc, add=mock.DEFAULT)\n",
            4,
            "add",
        ),
        ("calc.RATE = 3\n", 3, "RATE"),
    ] {
        let result = PY.replacen("import calc\n", &format!("import calc\n{added}"), 1);
        assert_eq!(
            patches(
                &calc,
                &[
                    ("test_calc.py", Some(PY), Some(&result)),
                    ("calc.py", Some(CALC_PY), Some(CALC_PY)),
                ]
            ),
            [patched(name, "calc.py", &format!("test_calc.py:{line}"))],
            "{added}"
        );
    }

    // The decorator form, on the failing test itself.
    let decorated = PY
        .replacen(
            "import calc\n",
            "import calc\nfrom unittest.mock import patch\n",
            1,
        )
        .replace(
            "    def test_add",
            "    @patch(\"calc.add\", lambda a, b: a + b)\n    def test_add",
        );
    assert_eq!(
        patches(
            &calc,
            &[
                ("test_calc.py", Some(PY), Some(&decorated)),
                ("calc.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        [patched("add", "calc.py", "test_calc.py:7")]
    );

    // An alias, a package's module, a rebound import.
    let aliased = "import pkg.mod as m\nfrom pkg import mod\nfrom pkg.mod import add\n\nm.add = None\nmod.RATE = 3\nadd = lambda a, b: a + b\n";
    assert_eq!(
        patches(
            &[("src/pkg/mod.py", "use +")],
            &[
                ("tests/test_mod.py", None, Some(aliased)),
                ("src/pkg/mod.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        [
            patched("add", "src/pkg/mod.py", "tests/test_mod.py:5"),
            patched("RATE", "src/pkg/mod.py", "tests/test_mod.py:6"),
            patched("add", "src/pkg/mod.py", "tests/test_mod.py:7"),
        ]
    );

    // A new conftest.py whose fixture patches for every test.
    for fixture in [
        "    monkeypatch.setattr(calc, \"add\", lambda a, b: a + b)\n",
        "    monkeypatch.setattr(\"calc.add\", lambda a, b: a + b)\n",
        "    mocker.patch(\"calc.add\", side_effect=lambda a, b: a + b)\n",
    ] {
        let conftest = format!(
            "import pytest\nimport calc\n\n\n@pytest.fixture(autouse=True)\ndef fixed(monkeypatch, mocker):\n{fixture}"
        );
        assert_eq!(
            patches(
                &calc,
                &[
                    ("conftest.py", None, Some(&conftest)),
                    ("calc.py", Some(CALC_PY), Some(CALC_PY)),
                ]
            ),
            [patched("add", "calc.py", "conftest.py:7")],
            "{fixture}"
        );
    }

    // Replacing the whole module.
    let whole = "import sys\nimport types\nsys.modules[\"calc\"] = types.SimpleNamespace(add=lambda a, b: a + b)\n";
    assert_eq!(
        patches(
            &calc,
            &[
                ("tests/test_whole.py", None, Some(whole)),
                ("calc.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        [(
            "replaces the module `calc.py` that the contract changes, so the tests do not run \
             the code they check"
                .to_owned(),
            "tests/test_whole.py:3".to_owned(),
            true
        )]
    );
}

#[test]
fn python_patches_of_other_code_or_already_on_the_base_are_allowed() {
    let calc = [("calc.py", "use +")];
    let other = PY.replacen(
        "import calc\n",
        "import calc\nimport os\nimport time\nimport helpers\nfrom unittest import mock\n\
         time.time = lambda: 0\nos.environ[\"TZ\"] = \"UTC\"\n\
         p = mock.patch(\"requests.get\")\nq = mock.patch(\"calc.requests.get\")\n\
         r = mock.patch.dict(os.environ, {\"A\": \"1\"})\nhelpers.add = lambda a, b: a + b\n\
         calc.add(2, 3)\n# calc.add = lambda a, b: a + b\ns = \"calc.add = 1\"\n",
        1,
    );
    assert_eq!(
        patches(
            &calc,
            &[
                ("test_calc.py", Some(PY), Some(&other)),
                ("calc.py", Some(CALC_PY), Some(CALC_PY)),
                ("helpers.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        []
    );
    // The same patch on the base: not the result's doing.
    let patched_base = PY.replacen("import calc\n", "import calc\ncalc.add = max\n", 1);
    let patched_result = format!("{patched_base}\n# more\n");
    assert_eq!(
        patches(
            &calc,
            &[
                ("test_calc.py", Some(&patched_base), Some(&patched_result)),
                ("calc.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        []
    );
    // Code the contract does not change, though it is read.
    let helpers = PY.replacen("import calc\n", "import calc\ncalc.add = max\n", 1);
    assert_eq!(
        patches(
            &[("helpers.py", "w")],
            &[
                ("test_calc.py", Some(PY), Some(&helpers)),
                ("calc.py", Some(CALC_PY), Some(CALC_PY)),
            ]
        ),
        []
    );
}

#[test]
fn a_patch_the_contract_names_and_declares_is_listed_not_refused() {
    let result = PY.replacen("import calc\n", "import calc\ncalc.add = max\n", 1);
    let allowing = contract_allowing(
        &[("calc.py", "use +"), ("test_calc.py", "a regression test")],
        "add adds",
        serde_json::json!([{"path": "test_calc.py", "kind": "patch",
                            "why": "mock calc.add while its callers are checked"}]),
    );
    let found: Vec<_> = weakened(
        &allowing,
        &[
            ("test_calc.py", Some(PY), Some(&result)),
            ("calc.py", Some(CALC_PY), Some(CALC_PY)),
        ],
    )
    .into_iter()
    .filter(|(kind, ..)| *kind == WeakeningKind::Patch)
    .collect();
    assert_eq!(found.len(), 1);
    assert!(!found[0].3, "{found:?}");
    // A goal or a file's reason that says "mock" declares nothing.
    let said = patches(
        &[
            ("calc.py", "use +"),
            (
                "test_calc.py",
                "mock calc.add while its callers are checked",
            ),
        ],
        &[
            ("test_calc.py", Some(PY), Some(&result)),
            ("calc.py", Some(CALC_PY), Some(CALC_PY)),
        ],
    );
    assert!(said[0].2, "{said:?}");
    let named_only = patches(
        &[("calc.py", "use +"), ("test_calc.py", "a regression test")],
        &[
            ("test_calc.py", Some(PY), Some(&result)),
            ("calc.py", Some(CALC_PY), Some(CALC_PY)),
        ],
    );
    assert_eq!(named_only, [patched("add", "calc.py", "test_calc.py:3")]);
}

const CALC_JS: &str = "function add(a, b) {\n  return a - b;\n}\n\nclass Calc {\n  mul(a, b) {\n    return a * b;\n  }\n}\n\nmodule.exports = { add, Calc };\n";

#[test]
fn javascript_mocks_spies_and_stubs_of_code_the_contract_changes_are_refused() {
    let base = "const calc = require('../src/calc');\n\ntest('adds', () => {\n  expect(calc.add(2, 3)).toBe(5);\n});\n";
    for (added, line, name) in [
        ("jest.mock('../src/calc');\n", 2, None),
        (
            "vi.mock('../src/calc.js', () => ({ add: (a, b) => a + b }));\n",
            2,
            None,
        ),
        (
            "jest.spyOn(calc, 'add').mockImplementation((a, b) => a + b);\n",
            2,
            Some("add"),
        ),
        (
            "const spy = vi.spyOn(calc, 'add');\nspy.mockReturnValue(5);\n",
            2,
            Some("add"),
        ),
        ("sinon.stub(calc, 'add').returns(5);\n", 2, Some("add")),
        ("calc.add = (a, b) => a + b;\n", 2, Some("add")),
        (
            "const { Calc } = require('../src/calc');\nCalc.prototype.mul = () => 6;\n",
            3,
            Some("mul"),
        ),
    ] {
        let result = base.replacen("\n", &format!("\n{added}"), 1);
        let expected = match name {
            Some(name) => patched(name, "src/calc.js", &format!("test/calc.test.js:{line}")),
            None => (
                "replaces the module `src/calc.js` that the contract changes, so the tests do \
                 not run the code they check"
                    .to_owned(),
                format!("test/calc.test.js:{line}"),
                true,
            ),
        };
        assert_eq!(
            patches(
                &[("src/calc.js", "use +")],
                &[
                    ("test/calc.test.js", Some(base), Some(&result)),
                    ("src/calc.js", Some(CALC_JS), Some(CALC_JS)),
                ]
            ),
            [expected],
            "{added}"
        );
    }
    // A test in a `__tests__` folder.
    assert_eq!(
        patches(
            &[("src/calc.js", "use +")],
            &[
                (
                    "src/__tests__/calc.js",
                    None,
                    Some("const calc = require('../calc');\ncalc.add = () => 5;\n")
                ),
                ("src/calc.js", Some(CALC_JS), Some(CALC_JS)),
            ]
        ),
        [patched("add", "src/calc.js", "src/__tests__/calc.js:2")]
    );
    // ES modules, beside the test.
    let esm = "import * as calc from './calc.js';\nimport { add } from './calc';\ncalc.add = () => 5;\nvi.spyOn(calc, 'add').mockReturnValue(5);\n";
    assert_eq!(
        patches(
            &[("src/calc.ts", "use +")],
            &[
                ("src/calc.spec.ts", None, Some(esm)),
                (
                    "src/calc.ts",
                    Some("export function add(a: number, b: number) {\n  return a - b;\n}\n"),
                    None
                ),
            ]
        ),
        [
            patched("add", "src/calc.ts", "src/calc.spec.ts:3"),
            patched("add", "src/calc.ts", "src/calc.spec.ts:4"),
        ]
    );
}

#[test]
fn javascript_spies_that_call_through_and_mocks_of_other_modules_are_allowed() {
    let result = "const calc = require('../src/calc');\nconst axios = require('axios');\njest.mock('axios');\njest.mock('../src/other');\njest.useFakeTimers();\njest.spyOn(Date, 'now').mockReturnValue(0);\nconst spy = jest.spyOn(calc, 'add');\naxios.get = jest.fn();\n// calc.add = () => 5;\nconst s = 'calc.add = 5';\n\ntest('adds', () => {\n  expect(calc.add(2, 3)).toBe(5);\n  expect(spy).toHaveBeenCalled();\n});\n";
    assert_eq!(
        patches(
            &[("src/calc.js", "use +")],
            &[
                ("test/calc.test.js", None, Some(result)),
                ("src/calc.js", Some(CALC_JS), Some(CALC_JS)),
                ("src/other.js", Some(CALC_JS), Some(CALC_JS)),
            ]
        ),
        []
    );
}

const CALC_GO: &str = "package calc\n\nimport \"time\"\n\nvar addFn = func(a, b int) int { return a - b }\n\nvar (\n\tnow   = time.Now\n\tRate  = 2\n)\n\nfunc Add(a, b int) int { return addFn(a, b) }\n";

#[test]
fn go_tests_that_swap_a_package_variable_the_contract_changes_are_refused() {
    let base = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n";
    let swapped = base.replacen(
        "import \"testing\"\n",
        "import \"testing\"\n\nfunc init() {\n\taddFn = func(a, b int) int { return a + b }\n}\n",
        1,
    );
    assert_eq!(
        patches(
            &[("calc/calc.go", "use +")],
            &[
                ("calc/calc_test.go", Some(base), Some(&swapped)),
                ("calc/calc.go", Some(CALC_GO), Some(CALC_GO)),
            ]
        ),
        [patched("addFn", "calc/calc.go", "calc/calc_test.go:6")]
    );
    // From the external test package, through the import.
    let external = "package calc_test\n\nimport (\n\t\"testing\"\n\n\tc \"example.com/m/calc\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tc.Rate = 3\n\tnow := 5\n\tnow = 6\n\t_ = now\n}\n";
    assert_eq!(
        patches(
            &[("calc/calc.go", "use +")],
            &[
                ("calc/ext_test.go", None, Some(external)),
                ("calc/calc.go", Some(CALC_GO), Some(CALC_GO)),
            ]
        ),
        [patched("Rate", "calc/calc.go", "calc/ext_test.go:10")]
    );
    // At the module's root, from the external test package.
    let root = external.replace("\"example.com/m/calc\"", "\"example.com/calc\"");
    assert_eq!(
        patches(
            &[("calc.go", "use +")],
            &[
                ("ext_test.go", None, Some(&root)),
                ("calc.go", Some(CALC_GO), Some(CALC_GO)),
            ]
        ),
        [patched("Rate", "calc.go", "ext_test.go:10")]
    );
    // A variable of a package the contract does not change.
    assert_eq!(
        patches(
            &[("other/other.go", "w")],
            &[
                ("calc/calc_test.go", Some(base), Some(&swapped)),
                ("calc/calc.go", Some(CALC_GO), Some(CALC_GO)),
            ]
        ),
        []
    );
}

#[test]
fn a_go_test_file_gaining_test_main_is_refused_unless_declared() {
    let base = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\n";
    let main = format!("{base}\nfunc TestMain(m *testing.M) {{\n\tos.Exit(0)\n}}\n");
    let found = |contract: &[(&str, &str)]| {
        weakened(
            &contract_naming(contract),
            &[("calc/calc_test.go", Some(base), Some(&main))],
        )
    };
    assert_eq!(
        found(&[("calc/calc.go", "use +")]),
        [(
            WeakeningKind::Selection,
            "adds `func TestMain`, which decides how the package's tests run".to_owned(),
            "calc/calc_test.go:7".to_owned(),
            true
        )]
    );
    let declared = weakened(
        &contract_allowing(
            &[("calc/calc_test.go", "a TestMain")],
            "add adds",
            serde_json::json!([{"path": "calc/calc_test.go", "kind": "select",
                                "why": "a TestMain to start the database"}]),
        ),
        &[("calc/calc_test.go", Some(base), Some(&main))],
    );
    assert_eq!(declared.len(), 1);
    assert!(!declared[0].3, "{declared:?}");
    // Named, with a reason that says so, but not allowed by `test_changes`: refused.
    let said = found(&[("calc/calc_test.go", "a TestMain to start the database")]);
    assert!(said[0].3, "{said:?}");
    // Already there on the base: nothing.
    assert_eq!(
        weakened(
            &contract_naming(&[("calc/calc.go", "use +")]),
            &[("calc/calc_test.go", Some(&main), Some(&format!("{main}\n")))],
        ),
        []
    );
}

#[test]
fn the_sources_read_for_patches_are_the_contracts_code_inside_the_repository() {
    let mut contract = contract_naming(&[("calc.py", "w")]);
    // Set past validation, as a stored contract could hold them.
    for path in [
        "./web/src/calc.ts",
        "../outside/calc.py",
        "pkg/../../calc.go",
        "tests/test_calc.py",
        "conftest.py",
        "src/lib.rs",
        "docs/",
    ] {
        contract.change.files.push(crate::contract::FileChange {
            path: path.into(),
            action: crate::contract::FileAction::Modify,
            why: "w".into(),
        });
    }
    assert_eq!(patch::sources(&contract), ["calc.py", "web/src/calc.ts"]);
}

#[test]
fn a_patch_on_a_long_line_is_named_clipped() {
    let long = format!(
        "const calc = require('./calc');\ncalc.add = (a, b) => {{ return a + b; {} }};\n",
        "void 0; ".repeat(100)
    );
    let found = find(
        &contract_naming(&[("calc.js", "use +")]),
        vec![
            (
                "calc.test.js".into(),
                FileText::Absent,
                FileText::Text(long),
            ),
            (
                "calc.js".into(),
                FileText::Text(CALC_JS.into()),
                FileText::Text(CALC_JS.into()),
            ),
        ],
    );
    let instruction = &found.findings[0].instruction;
    assert!(
        instruction.contains("return a + b; void 0;"),
        "{instruction}"
    );
    assert!(instruction.chars().count() < 300, "{instruction}");
}

#[test]
fn a_test_replaced_under_its_own_name_is_a_patch() {
    let base = "import unittest\n\n\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1, 1)\n\n    def test_mul(self):\n        self.assertEqual(2, 2)\n";
    let swapped = format!("{base}\n\nTestCalc.test_add = TestCalc.test_mul\n");
    let found: Vec<_> = weakened(
        &contract_naming(&[("test_calc.py", "a regression test")]),
        &[("test_calc.py", Some(base), Some(&swapped))],
    )
    .into_iter()
    .filter(|(kind, ..)| *kind == WeakeningKind::Patch)
    .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .1
            .starts_with("replaces the test `TestCalc.test_add`"),
        "{found:?}"
    );
    assert!(found[0].3, "refused: {found:?}");
    // Setting another attribute of a test class is no swap.
    let helper = format!("{base}\n\nTestCalc.maxDiff = None\n");
    assert!(
        weakened(
            &contract_naming(&[("test_calc.py", "a regression test")]),
            &[("test_calc.py", Some(base), Some(&helper))],
        )
        .is_empty()
    );
}
