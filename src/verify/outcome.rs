//! What a verified run came to, as a run's `outcome` column keeps it: the final attempt's
//! verification and review (what publishing resumes from), or an earlier attempt's
//! verification report alone. The JSON is stored, so its shape does not change.

use serde::{Deserialize, Serialize};

use super::report::VerificationReport;
use crate::publish::RunResult;

/// What the final attempt of a run came to, kept with its run so publishing can resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutcome {
    pub verification: VerificationReport,
    pub accepted: bool,
    pub findings: String,
    /// `None`: the run passed.
    pub failure: Option<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    /// `reference@digest` of the image it ran in, or `host`; absent from outcomes kept
    /// before it was recorded.
    #[serde(default)]
    pub environment: Option<String>,
    /// The result's commit, pushed to the session's branch before the run was recorded as
    /// verified (when it opens a pull request): what lets any worker finish publishing
    /// it. Absent from outcomes kept before it was recorded, and for results reported on
    /// the issue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// What each rung of the contract's executor ladder spent, in the order climbed; the
    /// last produced this result. Absent without a ladder, and from outcomes kept before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rungs: Vec<crate::publish::RungSpend>,
}

impl RunOutcome {
    /// How the run ended, as publishing says it.
    pub fn result(&self) -> RunResult {
        match &self.failure {
            None => RunResult::Succeeded,
            Some(reason) => RunResult::Failed {
                reason: reason.clone(),
            },
        }
    }
}

/// What a run's `outcome` column holds, read back: a final attempt's outcome, an earlier
/// attempt's verification report alone, or something else (unfinished work kept aside,
/// or a shape this version does not know), which tells nothing about verification.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StoredOutcome {
    Final(Box<RunOutcome>),
    Report(Box<VerificationReport>),
    Other(serde::de::IgnoredAny),
}

impl StoredOutcome {
    /// Reads a run's `outcome` text; text that is not JSON at all reads as `Other`.
    pub fn parse(text: &str) -> StoredOutcome {
        serde_json::from_str(text).unwrap_or(StoredOutcome::Other(serde::de::IgnoredAny))
    }

    /// The verification report it holds, whichever attempt made it.
    pub fn verification(&self) -> Option<&VerificationReport> {
        match self {
            StoredOutcome::Final(outcome) => Some(&outcome.verification),
            StoredOutcome::Report(report) => Some(report),
            StoredOutcome::Other(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verdict;

    /// A report as kept before proof, weakening and chosen globs were recorded.
    const OLD_REPORT: &str = r#"{"verdict":"failed","commands":[],"counts":{"introduced":1,"flaky":0,"pre_existing":0,"fixed":0},"failures":[],"scope":[],"scope_omitted":0}"#;

    #[test]
    fn a_final_outcome_kept_before_environment_and_commit_still_reads() {
        let text = format!(
            r#"{{"verification":{OLD_REPORT},"accepted":false,"findings":"Not done.","failure":"Verification failed: 1 introduced","attempts":2,"max_attempts":3}}"#
        );
        let StoredOutcome::Final(outcome) = StoredOutcome::parse(&text) else {
            panic!("not read as a final outcome: {text}");
        };
        assert_eq!(outcome.verification.verdict, Verdict::Failed);
        assert_eq!(outcome.verification.counts.introduced, 1);
        assert!(!outcome.accepted);
        assert_eq!(outcome.findings, "Not done.");
        assert_eq!(
            outcome.result(),
            RunResult::Failed {
                reason: "Verification failed: 1 introduced".to_owned()
            }
        );
        assert_eq!((outcome.attempts, outcome.max_attempts), (2, 3));
        assert_eq!(outcome.environment, None);
        assert_eq!(outcome.commit, None);
        // What publishing reads back is the same.
        let direct: RunOutcome = serde_json::from_str(&text).unwrap();
        assert_eq!(direct.attempts, 2);
    }

    #[test]
    fn a_final_outcome_is_written_in_the_shape_it_always_had() {
        let text = format!(
            r#"{{"verification":{OLD_REPORT},"accepted":true,"findings":"Fine.","failure":null,"attempts":1,"max_attempts":3,"environment":"host","commit":"0123456789abcdef0123456789abcdef01234567"}}"#
        );
        let outcome: RunOutcome = serde_json::from_str(&text).unwrap();
        assert_eq!(outcome.result(), RunResult::Succeeded);
        assert_eq!(
            outcome.commit.as_deref(),
            Some("0123456789abcdef0123456789abcdef01234567")
        );
        let written = serde_json::to_value(&outcome).unwrap();
        let mut expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The report writes its own counts in full; the rest is as it was.
        expected["verification"] = serde_json::to_value(&outcome.verification).unwrap();
        assert_eq!(written, expected);
        assert_eq!(
            written.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "accepted",
                "attempts",
                "commit",
                "environment",
                "failure",
                "findings",
                "max_attempts",
                "verification"
            ]
        );
        let StoredOutcome::Final(_) =
            StoredOutcome::parse(&serde_json::to_string(&outcome).unwrap())
        else {
            panic!("a written outcome does not read back as final");
        };
    }

    #[test]
    fn an_outcome_keeps_what_each_rung_spent_and_one_without_reads_as_before() {
        let text = format!(
            r#"{{"verification":{OLD_REPORT},"accepted":true,"findings":"","failure":null,"attempts":2,"max_attempts":3,"environment":"host","rungs":[{{"rung":1,"executor":"builtin","model":"openai:gpt-5-mini","attempts":1,"tokens":30,"cost_microusd":9}},{{"rung":2,"executor":"builtin","model":"anthropic:claude-sonnet-4-5","attempts":1,"tokens":30,"cost_microusd":210}}]}}"#
        );
        let StoredOutcome::Final(outcome) = StoredOutcome::parse(&text) else {
            panic!("not read as a final outcome: {text}");
        };
        let models: Vec<&str> = outcome.rungs.iter().map(|r| r.model.as_str()).collect();
        assert_eq!(models, ["openai:gpt-5-mini", "anthropic:claude-sonnet-4-5"]);
        assert_eq!(outcome.rungs[1].cost_microusd, 210);
        let written = serde_json::to_value(&*outcome).unwrap();
        assert_eq!(written["rungs"][0]["rung"], 1);
    }

    #[test]
    fn an_outcome_without_a_commit_writes_none() {
        let text = format!(
            r#"{{"verification":{OLD_REPORT},"accepted":true,"findings":"","failure":null,"attempts":1,"max_attempts":1,"environment":null}}"#
        );
        let outcome: RunOutcome = serde_json::from_str(&text).unwrap();
        let written = serde_json::to_value(&outcome).unwrap();
        assert!(written.get("commit").is_none(), "{written}");
        assert!(written.get("rungs").is_none(), "{written}");
        assert!(written["environment"].is_null(), "{written}");
    }

    #[test]
    fn an_earlier_attempts_report_alone_still_reads() {
        let StoredOutcome::Report(report) = StoredOutcome::parse(OLD_REPORT) else {
            panic!("not read as a report: {OLD_REPORT}");
        };
        assert_eq!(report.verdict, Verdict::Failed);
        assert_eq!(
            StoredOutcome::parse(OLD_REPORT)
                .verification()
                .map(|r| r.counts.introduced),
            Some(1)
        );
    }

    #[test]
    fn anything_else_reads_as_other() {
        for text in [
            r#"{"partial":{"published":false}}"#,
            r#"{"verification":{"verdict":"passed"}}"#,
            "not json",
            "[]",
        ] {
            let stored = StoredOutcome::parse(text);
            assert!(
                matches!(stored, StoredOutcome::Other(_)),
                "{text} read as {stored:?}"
            );
            assert!(stored.verification().is_none());
        }
    }
}
