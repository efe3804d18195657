//! Reads the human output of `cargo nextest`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct NextestParser {
    report: TestReport,
    score: u32,
}

impl Parser for NextestParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Nextest.runner().to_owned(),
            ..self.report
        }
    }
}
