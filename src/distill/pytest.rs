//! Reads the human output of `pytest`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct PytestParser {
    report: TestReport,
    score: u32,
}

impl Parser for PytestParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Pytest.runner().to_owned(),
            ..self.report
        }
    }
}
