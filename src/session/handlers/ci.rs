//! Other checks that failed on a head planwright pushed (another app's check suite, a
//! commit status, a GitLab pipeline): read back from the forge, distilled, said once on the
//! pull request with `/revise` offered, and kept as evidence for the next round. Nothing
//! waits for checks that never finish.

use std::fmt::Write as _;

use tracing::info;

use crate::distill::{self, render};
use crate::event::CiSource;
use crate::forge::{FailedCheck, repo_config, truncate_with_note};
use crate::ids::CommitSha;
use crate::jobs::JobError;
use crate::repo_tools::glob_matches;
use crate::session::comments;
use crate::session::context::RepoContext;
use crate::store::ci_reports::{self, NewReport};

/// The most of one report's evidence a round is given, in characters.
const EVIDENCE_MAX: usize = 2_500;
/// Reports (and comments) on one commit: anyone who may set statuses could add hundreds.
const REPORTS_PER_COMMIT: i64 = 5;

pub(super) async fn on_checks_failed(
    repo: &RepoContext<'_>,
    sha: &CommitSha,
    source: &CiSource,
) -> Result<(), JobError> {
    // Most commits with failing checks are not planwright's: the database says so first.
    let app = repo.app;
    let session = app
        .db
        .session_by_head(repo.kind, repo.name, sha.as_str())
        .await?;
    let Some((session, pull)) = session.and_then(|s| s.pull_number.map(|p| (s, p))) else {
        return Ok(());
    };
    let forge = repo.forge()?;
    // Settings that do not load ignore nothing: the failure is still worth saying.
    let ignored = repo_config::load_policy(forge, repo.name)
        .await
        .map(|c| c.ignore_checks)
        .unwrap_or_default();
    let failed: Vec<FailedCheck> = forge
        .failed_checks(repo.name, sha, source)
        .await?
        .into_iter()
        .filter(|c| !ignored.iter().any(|glob| glob_matches(glob, &c.name)))
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    let distilled: Vec<Distilled> = failed.iter().map(Distilled::of).collect();
    let evidence = evidence(sha, &distilled);
    let mut conn = app.db.writer.acquire().await?;
    if ci_reports::count_on(&mut conn, &session.id, sha.as_str()).await? >= REPORTS_PER_COMMIT {
        info!(session = %session.id, %sha, "enough failed checks are reported on this commit");
        return Ok(());
    }
    let report = NewReport {
        forge: repo.kind,
        repo: repo.name,
        sha: sha.as_str(),
        source: &source.key(),
        session: &session.id,
        pull,
        evidence: &evidence,
    };
    let first = ci_reports::claim(&mut conn, &report).await?;
    drop(conn);
    if !first {
        return Ok(());
    }
    let text = comments::checks_failed(sha.as_str(), &shown(&distilled));
    let text = truncate_with_note(&text, forge.pull_body_limit());
    forge.comment_on_pull(repo.name, pull, &text).await?;
    info!(session = %session.id, pull = pull.0, %sha, checks = failed.len(), "failed checks reported on the pull request");
    Ok(())
}

/// One failed check, distilled.
struct Distilled<'a> {
    check: &'a FailedCheck,
    report: distill::TestReport,
}

impl Distilled<'_> {
    fn of(check: &FailedCheck) -> Distilled<'_> {
        Distilled {
            check,
            report: distill::distill_str(&check.log, None, None),
        }
    }

    /// The check's name and conclusion, as another app or service set them: shown with
    /// nothing invisible or direction-changing left in.
    fn heading(&self) -> String {
        format!("{} ({})", self.check.name, self.check.conclusion)
            .chars()
            .filter(|c| !crate::markdown::is_invisible(*c))
            .collect()
    }
}

/// What the pull request's readers see: each check, where to read all of it, and its
/// distilled output.
fn shown(checks: &[Distilled<'_>]) -> String {
    let mut out = String::new();
    for d in checks {
        let _ = write!(out, "**{}**", crate::markdown::inline(&d.heading()));
        if let Some(url) = d.check.url.as_deref().filter(|u| plain_url(u)) {
            let _ = write!(out, " · [details]({url})");
        }
        out.push_str("\n\n");
        if d.check.log.trim().is_empty() {
            out.push_str("_It printed nothing planwright can read._\n\n");
        } else {
            out.push_str(&render::markdown(&d.report));
            out.push('\n');
        }
    }
    out
}

/// A web address another app set that can stand in a markdown link as it is: anything
/// else is left out rather than let it close the link or hide text.
fn plain_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && !url.chars().any(|c| {
            c.is_whitespace() || "()<>[]`\"'\\".contains(c) || crate::markdown::is_invisible(c)
        })
}

/// What the next round's planner reads: compact, bounded, naming the commit.
fn evidence(sha: &CommitSha, checks: &[Distilled<'_>]) -> String {
    let mut out = format!("On commit {sha}:\n");
    for d in checks {
        let _ = writeln!(out, "- {}", d.heading());
        if !d.check.log.trim().is_empty() {
            out.push_str(&render::compact(&d.report));
            out.push('\n');
        }
    }
    crate::text::clip(&out, EVIDENCE_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(log: &str) -> FailedCheck {
        FailedCheck {
            name: "tests".into(),
            conclusion: "failure".into(),
            url: Some("https://ci.example/run/1".into()),
            log: log.into(),
        }
    }

    #[test]
    fn a_test_log_is_shown_and_kept_as_its_failing_tests() {
        let log = "F.\n=================================== FAILURES ===================================\n___________________________________ test_add ___________________________________\n\n    def test_add():\n>       assert add(2, 3) == 5\nE       assert -1 == 5\n\ntest_calc.py:4: AssertionError\n=========================== short test summary info ============================\nFAILED test_calc.py::test_add - assert -1 == 5\n1 failed, 1 passed in 0.01s\n";
        let failed = [check(log)];
        let distilled: Vec<_> = failed.iter().map(Distilled::of).collect();
        let sha = CommitSha("0123456789abcdef0123456789abcdef01234567".into());
        let kept = evidence(&sha, &distilled);
        assert!(kept.starts_with("On commit 0123456789abcdef"), "{kept}");
        assert!(kept.contains("- tests (failure)"), "{kept}");
        assert!(kept.contains("test_calc.py::test_add"), "{kept}");
        let seen = shown(&distilled);
        assert!(
            seen.contains("**tests (failure)** · [details](https://ci.example/run/1)"),
            "{seen}"
        );
        assert!(seen.contains("test_calc.py::test_add"), "{seen}");
    }

    #[test]
    fn only_plain_addresses_become_links() {
        assert!(plain_url("https://ci.example/run/1?x=2#y"));
        for bad in [
            "javascript:alert(1)",
            "https://a/)[x](https://b",
            "https://a b",
            "ftp://a",
        ] {
            assert!(!plain_url(bad), "{bad}");
        }
    }

    #[test]
    fn evidence_stays_bounded_and_a_silent_check_says_so() {
        let huge = "error: something broke\n".repeat(100_000);
        let failed = [check(&huge), check("")];
        let distilled: Vec<_> = failed.iter().map(Distilled::of).collect();
        let sha = CommitSha("a".repeat(40));
        assert!(evidence(&sha, &distilled).chars().count() <= EVIDENCE_MAX + 100);
        assert!(shown(&distilled).contains("_It printed nothing planwright can read._"));
    }
}
