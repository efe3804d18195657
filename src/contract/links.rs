//! Links from a contract comment to the files and comparisons it names, on the forge
//! that shows them.

use super::{LineRange, normalise_path};
use crate::ids::CommitSha;

/// How to link evidence to file lines at the base commit.
#[derive(Debug, Clone)]
pub enum SourceLinks {
    /// `https://github.com/o/r/blob/<sha>/path#L12-L30`.
    GitHub { repo_url: String },
    /// `https://gitlab.example/g/p/-/blob/<sha>/path#L12-30`.
    GitLab { project_url: String },
    /// No web view (the local forge): paths are shown as text.
    None,
}

impl SourceLinks {
    /// The forge's page comparing `branch` with `base`: the change the branch holds.
    pub fn compare(&self, base: &str, branch: &str) -> Option<String> {
        let branch = percent_encoding::utf8_percent_encode(branch, PATH_SET).to_string();
        let base = percent_encoding::utf8_percent_encode(base, PATH_SET).to_string();
        match self {
            SourceLinks::GitHub { repo_url } => Some(format!(
                "{}/compare/{base}...{branch}",
                repo_url.trim_end_matches('/')
            )),
            SourceLinks::GitLab { project_url } => Some(format!(
                "{}/-/compare/{base}...{branch}",
                project_url.trim_end_matches('/')
            )),
            SourceLinks::None => None,
        }
    }

    /// A file, or lines of it, at `sha` on the forge's web view.
    pub fn file(&self, sha: &CommitSha, path: &str, lines: Option<LineRange>) -> Option<String> {
        let path = normalise_path(path);
        let path = percent_encoding::utf8_percent_encode(&path, PATH_SET).to_string();
        match self {
            SourceLinks::GitHub { repo_url } => {
                let anchor = match lines {
                    Some(l) if l.start == l.end => format!("#L{}", l.start),
                    Some(l) => format!("#L{}-L{}", l.start, l.end),
                    None => String::new(),
                };
                Some(format!(
                    "{}/blob/{}/{path}{anchor}",
                    repo_url.trim_end_matches('/'),
                    sha.as_str()
                ))
            }
            SourceLinks::GitLab { project_url } => {
                let anchor = match lines {
                    Some(l) if l.start == l.end => format!("#L{}", l.start),
                    Some(l) => format!("#L{}-{}", l.start, l.end),
                    None => String::new(),
                };
                Some(format!(
                    "{}/-/blob/{}/{path}{anchor}",
                    project_url.trim_end_matches('/'),
                    sha.as_str()
                ))
            }
            SourceLinks::None => None,
        }
    }
}

/// Path characters that must be escaped in a URL path (the slashes stay).
const PATH_SET: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'%')
    // A `)` would end the markdown link early.
    .add(b'(')
    .add(b')');
