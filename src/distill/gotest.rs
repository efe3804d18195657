//! Reads the human output of `go test`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct GoParser {
    report: TestReport,
    score: u32,
}

impl Parser for GoParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Go.runner().to_owned(),
            ..self.report
        }
    }
}
