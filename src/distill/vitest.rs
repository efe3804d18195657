//! Reads the human output of `vitest`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct VitestParser {
    report: TestReport,
    score: u32,
}

impl Parser for VitestParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Vitest.runner().to_owned(),
            ..self.report
        }
    }
}
