//! Where a repository's pages are on its forge's website: its issues, its pull (merge)
//! requests and their checks, and the files a contract or an observation names. Built
//! from the settings alone, so a page can link without asking the forge anything.

use crate::config::Settings;
use crate::contract::SourceLinks;
use crate::event::ForgeKind;
use crate::ids::RepoName;

/// One repository's web pages on its forge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebLinks {
    forge: ForgeKind,
    /// The repository's own page (`https://github.com/owner/name`); `None` on a forge
    /// with no website (the local repository `solve` works on) or whose address is not
    /// set.
    base: Option<String>,
}

impl WebLinks {
    /// The links of `repo` on `forge`, at the addresses the settings give.
    pub fn new(settings: &Settings, forge: ForgeKind, repo: &RepoName) -> Self {
        let base = match forge {
            ForgeKind::Github => Some(format!("{}/{repo}", settings.github_url)),
            ForgeKind::Gitlab => settings
                .gitlab
                .url
                .as_ref()
                .map(|base| format!("{}/{repo}", base.trim_end_matches('/'))),
            ForgeKind::Local => None,
        };
        WebLinks { forge, base }
    }

    /// The issue's page.
    pub fn issue(&self, issue: i64) -> Option<String> {
        self.base.as_ref().map(|base| match self.forge {
            ForgeKind::Gitlab => format!("{base}/-/issues/{issue}"),
            _ => format!("{base}/issues/{issue}"),
        })
    }

    /// The pull (merge) request's page.
    pub fn pull(&self, pull: i64) -> Option<String> {
        self.base.as_ref().map(|base| match self.forge {
            ForgeKind::Gitlab => format!("{base}/-/merge_requests/{pull}"),
            _ => format!("{base}/pull/{pull}"),
        })
    }

    /// Where the forge shows the checks of a pull (merge) request: planwright's check run
    /// on GitHub, its commit status (an external pipeline) on GitLab.
    pub fn checks(&self, pull: i64) -> Option<String> {
        self.base.as_ref().map(|base| match self.forge {
            ForgeKind::Gitlab => format!("{base}/-/merge_requests/{pull}/pipelines"),
            _ => format!("{base}/pull/{pull}/checks"),
        })
    }

    /// Where file references (contracts, observations, settings) link to.
    pub fn source(&self) -> SourceLinks {
        match &self.base {
            Some(url) if self.forge == ForgeKind::Gitlab => SourceLinks::GitLab {
                project_url: url.clone(),
            },
            Some(url) => SourceLinks::GitHub {
                repo_url: url.clone(),
            },
            None => SourceLinks::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(forge: ForgeKind, env: &[(&str, &str)]) -> WebLinks {
        let env: Vec<(String, String)> = [("PLANWRIGHT_DATA_DIR", "/srv/pw")]
            .iter()
            .chain(env)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let settings = Settings::from_sources(None, &env).unwrap();
        WebLinks::new(&settings, forge, &RepoName::parse("acme/widgets").unwrap())
    }

    #[test]
    fn each_forge_gets_its_own_page_addresses() {
        let github = links(ForgeKind::Github, &[]);
        let repo = "https://github.com/acme/widgets";
        assert_eq!(github.issue(7), Some(format!("{repo}/issues/7")));
        assert_eq!(github.pull(8), Some(format!("{repo}/pull/8")));
        assert_eq!(github.checks(8), Some(format!("{repo}/pull/8/checks")));
        assert!(matches!(github.source(), SourceLinks::GitHub { repo_url } if repo_url == repo));

        let gitlab = links(
            ForgeKind::Gitlab,
            &[("PLANWRIGHT_GITLAB_URL", "https://gitlab.example.com/")],
        );
        let project = "https://gitlab.example.com/acme/widgets";
        assert_eq!(gitlab.issue(7), Some(format!("{project}/-/issues/7")));
        assert_eq!(
            gitlab.pull(8),
            Some(format!("{project}/-/merge_requests/8"))
        );
        assert_eq!(
            gitlab.checks(8),
            Some(format!("{project}/-/merge_requests/8/pipelines"))
        );
        assert!(matches!(
            gitlab.source(),
            SourceLinks::GitLab { project_url } if project_url == project
        ));
    }

    #[test]
    fn a_forge_without_a_website_links_nowhere() {
        for local in [links(ForgeKind::Local, &[]), links(ForgeKind::Gitlab, &[])] {
            assert_eq!(local.issue(1), None);
            assert_eq!(local.pull(1), None);
            assert_eq!(local.checks(1), None);
            assert!(matches!(local.source(), SourceLinks::None));
        }
    }
}
