//! Reads the human output of `node --test`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct NodeParser {
    report: TestReport,
    score: u32,
}

impl Parser for NodeParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Node.runner().to_owned(),
            ..self.report
        }
    }
}
