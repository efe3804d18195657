//! Reads the human output of `jest`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct JestParser {
    report: TestReport,
    score: u32,
}

impl Parser for JestParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Jest.runner().to_owned(),
            ..self.report
        }
    }
}
