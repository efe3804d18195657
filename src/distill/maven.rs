//! Reads the human output of `mvn test (Surefire)`.

use super::{Format, Parser, TestReport};

#[derive(Debug, Default)]
pub struct MavenParser {
    report: TestReport,
    score: u32,
}

impl Parser for MavenParser {
    fn line(&mut self, _line: &str) {}

    fn score(&self) -> u32 {
        self.score
    }

    fn finish(self: Box<Self>) -> TestReport {
        TestReport {
            runner: Format::Maven.runner().to_owned(),
            ..self.report
        }
    }
}
