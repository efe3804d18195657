//! Reads the human output of `python -m unittest`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct UnittestParser {
    report: TestReport,
    score: u32,
}

impl Parser for UnittestParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Unittest.runner().to_owned(),
            ..self.report
        }
    }
}
