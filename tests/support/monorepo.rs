//! A large repository shaped like a real one: a folder of unpacked registry crates (the
//! bulk, vendored, sorting first) beside a small Python library whose bug an issue
//! describes, in folders that sort late. And the same library alone, as a small
//! repository, so a session on each can be compared.

use std::path::Path;

use planwright::event::Actor;
use planwright::forge::Issue;
use planwright::ids::IssueNumber;
use serde_json::json;

use super::model_server::Step;

/// The issue both repositories are planned for.
pub const ISSUE_TITLE: &str = "Reserving more than is in stock makes the count negative";
pub const ISSUE_BODY: &str = "`Stock.reserve_units` accepts a quantity larger than what is on hand, and \
`available()` then goes negative. `test_reserve_more_than_stock` in tests/test_stock.py shows it: \
it expects `InsufficientStock`. `release_units` has the same problem in reverse.";

/// The files of the library: the code the issue is about, its tests and a few more.
pub fn library(root: &Path) {
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "inventory/__init__.py",
        "from .stock import Stock, InsufficientStock\n",
    );
    write(
        "inventory/stock.py",
        "class InsufficientStock(Exception):\n    pass\n\n\nclass Stock:\n    def __init__(self, on_hand):\n        self.on_hand = on_hand\n        self.reserved = 0\n\n    def available(self):\n        return self.on_hand - self.reserved\n\n    def reserve_units(self, quantity):\n        self.reserved += quantity\n        return self.available()\n\n    def release_units(self, quantity):\n        self.reserved -= quantity\n        return self.available()\n",
    );
    write(
        "inventory/ledger.py",
        "from .stock import Stock\n\n\ndef record(stock: Stock, quantity):\n    return stock.reserve_units(quantity)\n",
    );
    write(
        "inventory/report.py",
        "def summarise(stocks):\n    return sum(s.available() for s in stocks)\n",
    );
    write(
        "tests/test_stock.py",
        "import pytest\nfrom inventory import Stock, InsufficientStock\n\n\ndef test_reserve_within_stock():\n    assert Stock(5).reserve_units(2) == 3\n\n\ndef test_reserve_more_than_stock():\n    with pytest.raises(InsufficientStock):\n        Stock(1).reserve_units(2)\n",
    );
    write(
        "tests/test_ledger.py",
        "from inventory.ledger import record\nfrom inventory import Stock\n\n\ndef test_record():\n    assert record(Stock(3), 1) == 2\n",
    );
    write("README.md", "# inventory\n\nStock keeping.\n");
    write(
        "pyproject.toml",
        "[project]\nname = \"inventory\"\nversion = \"0.1.0\"\n",
    );
    write(".gitignore", "__pycache__/\n*.pyc\n");
    write("setup.cfg", "[tool:pytest]\ntestpaths = tests\n");
}

/// The library and `crates` unpacked crates of ten files each beside it, many of them
/// defining `reserve` and friends, as real collections do.
pub fn monorepo(root: &Path, crates: usize) {
    library(root);
    for i in 0..crates {
        let name = format!("crate{i:05}");
        let dir = root.join(format!("crates/{name}-1.{}.0", i % 7));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::create_dir_all(dir.join("benches")).unwrap();
        let files: [(&str, String); 10] = [
            (
                "Cargo.toml",
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"1.{}.0\"\n",
                    i % 7
                ),
            ),
            ("Cargo.toml.orig", format!("[package]\nname = \"{name}\"\n")),
            (".cargo-ok", "{\"v\":1}".to_owned()),
            (
                ".cargo_vcs_info.json",
                "{\"git\":{\"sha1\":\"0000000000000000000000000000000000000000\"}}".to_owned(),
            ),
            (
                "README.md",
                format!("# {name}\n\nA buffer that preserves order.\n"),
            ),
            (
                "src/lib.rs",
                format!(
                    "//! {name}: buffers.\nmod raw;\nmod iter;\n\npub struct Buffer{i} {{\n    items: Vec<u8>,\n}}\n\nimpl Buffer{i} {{\n    pub fn new() -> Self {{\n        Buffer{i} {{ items: Vec::new() }}\n    }}\n\n    pub fn reserve(&mut self, additional: usize) {{\n        self.items.reserve(additional);\n    }}\n\n    pub fn reserve_exact(&mut self, additional: usize) {{\n        self.items.reserve_exact(additional);\n    }}\n\n    pub fn len(&self) -> usize {{\n        self.items.len()\n    }}\n}}\n"
                ),
            ),
            (
                "src/raw.rs",
                format!(
                    "pub(crate) unsafe fn grow_{i}(ptr: *mut u8, additional: usize) -> *mut u8 {{\n    // preserve alignment while reserving\n    ptr.add(additional)\n}}\n"
                ),
            ),
            (
                "src/iter.rs",
                format!(
                    "pub struct Iter{i}<'a> {{\n    rest: &'a [u8],\n}}\n\npub fn iter_{i}(rest: &[u8]) -> Iter{i}<'_> {{\n    Iter{i} {{ rest }}\n}}\n"
                ),
            ),
            (
                "tests/basic.rs",
                format!(
                    "#[test]\nfn reserves() {{\n    let mut b = {name}::Buffer{i}::new();\n    b.reserve(4);\n    assert_eq!(b.len(), 0);\n}}\n"
                ),
            ),
            (
                "benches/bench.rs",
                "fn main() {\n    // reserve in a loop\n}\n".to_owned(),
            ),
        ];
        for (path, text) in files {
            std::fs::write(dir.join(path), text).unwrap();
        }
    }
}

/// The issue, as the forge gives it.
pub fn issue() -> Issue {
    Issue {
        number: IssueNumber(7),
        title: ISSUE_TITLE.into(),
        body: ISSUE_BODY.into(),
        labels: vec!["planwright".into()],
        author: Actor {
            login: "reporter".into(),
            id: 5,
            bot: false,
        },
    }
}

/// One scout finds the function, the planner reads it and submits.
pub fn planner_script() -> Vec<Step> {
    vec![
        Step::tool_call(
            "p1",
            "investigate",
            json!({"question": "Where is reserve_units defined, and what checks the quantity?"}),
        )
        .when_tools(&["submit_contract"]),
        Step::tool_call("s1", "search", json!({"pattern": "reserve_units", "whole_word": true}))
            .when_tools(&["report"]),
        Step::tool_call(
            "s2",
            "report",
            json!({"findings": "Stock.reserve_units in inventory/stock.py adds to reserved without a check", "evidence": ["inventory/stock.py:13"], "confidence": "high"}),
        )
        .when_tools(&["report"]),
        Step::tool_call(
            "p2",
            "read_file",
            json!({"path": "inventory/stock.py", "start_line": 10, "end_line": 19}),
        )
        .when_tools(&["submit_contract"]),
        Step::tool_call(
            "p3",
            "submit_contract",
            json!({
                "summary": "reserve_units and release_units accept quantities that make the count negative.",
                "diagnosis": {
                    "hypothesis": "Neither checks the quantity against what is available.",
                    "evidence": [{"path": "inventory/stock.py", "lines": "13-19", "note": "no check"}]
                },
                "change": {
                    "goal": "Raise InsufficientStock instead.",
                    "files": [{"path": "inventory/stock.py", "action": "modify", "why": "check quantities"}]
                },
                "verification": {"commands": ["pytest"], "new_tests": ["test_release_more_than_reserved"]},
                "routing": {"risk": "low"}
            }),
        )
        .when_tools(&["submit_contract"]),
    ]
}
