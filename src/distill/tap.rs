//! Reads the human output of `TAP producers`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct TapParser {
    report: TestReport,
    score: u32,
}

impl Parser for TapParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Tap.runner().to_owned(),
            ..self.report
        }
    }
}
