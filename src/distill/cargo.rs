//! Reads the human output of `cargo test`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct CargoParser {
    report: TestReport,
    score: u32,
}

impl Parser for CargoParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Cargo.runner().to_owned(),
            ..self.report
        }
    }
}
