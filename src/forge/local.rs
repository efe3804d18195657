//! A forge made of a local git repository and a folder of files, for trying planwright
//! without GitHub or GitLab: the issue comes from a markdown text, comments, checks and
//! the pull request report are files in an output folder, and what planwright posts is
//! also written to a terminal (or any writer) as it happens.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

use anyhow::Context;
use async_trait::async_trait;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::{
    CheckState, Comment, CommitCheck, Forge, ForgeError, GitRemote, Issue, LabelChange,
    NewPullRequest, Permission, PullRequest, Reaction, Repository,
};
use crate::contract::SourceLinks;
use crate::event::{Actor, Thread};
use crate::ids::{CommentId, CommitSha, IssueNumber, PullNumber, RepoName};

/// The login planwright's own comments are written under.
pub const BOT_LOGIN: &str = "planwright";
/// The one issue a local run works on.
pub const ISSUE: IssueNumber = IssueNumber(1);
/// The one pull request a local run opens.
pub const PULL: PullNumber = PullNumber(1);

const PULL_FILE: &str = "pull-request.md";
const PULL_MARKER: &str = "<!-- planwright:pull ";
const REACTIONS_FILE: &str = "reactions.txt";

/// An issue written by hand: the first `# ` heading is the title and the rest the body;
/// text without such a heading has its first line as the title.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalIssue {
    pub title: String,
    pub body: String,
}

impl LocalIssue {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let text = text.trim_start_matches('\u{feff}');
        if text.trim().is_empty() {
            anyhow::bail!("Cannot use the issue: it is empty");
        }
        let lines: Vec<&str> = text.lines().collect();
        // A `# ` line inside a fenced code block is a shell comment, not the title.
        let mut fenced = false;
        let heading = lines.iter().position(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                fenced = !fenced;
                return false;
            }
            !fenced && (line.starts_with("# ") || line.trim_end() == "#")
        });
        let (title, rest) = match heading {
            Some(i) => {
                let title = lines[i].trim_start_matches('#').trim();
                if title.is_empty() {
                    anyhow::bail!("Cannot use the issue: its `# ` heading has no title");
                }
                let rest: Vec<&str> = lines[..i].iter().chain(&lines[i + 1..]).copied().collect();
                (title, rest)
            }
            None => {
                let first = lines
                    .iter()
                    .position(|l| !l.trim().is_empty())
                    .unwrap_or_default();
                (lines[first].trim(), lines[first + 1..].to_vec())
            }
        };
        Ok(LocalIssue {
            title: title.to_owned(),
            body: without_blank_edges(&rest),
        })
    }

    /// Reads and parses an issue file; an empty file is an error naming it.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("Could not read the issue file `{}`", path.display()))?;
        if text.trim().is_empty() {
            anyhow::bail!(
                "Cannot use the issue file `{}`: it is empty",
                path.display()
            );
        }
        Self::parse(&text).with_context(|| format!("Cannot use `{}`", path.display()))
    }
}

/// `lines` joined, without the blank lines at either end.
fn without_blank_edges(lines: &[&str]) -> String {
    let blank = |l: &&str| l.trim().is_empty();
    let start = lines.iter().position(|l| !blank(l)).unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !blank(l))
        .map_or(start, |i| i + 1);
    lines[start..end].join("\n")
}

/// One local repository and one issue, seen as a forge.
pub struct LocalForge {
    /// The repository's top folder, canonical.
    root: PathBuf,
    name: RepoName,
    /// The branch checked out when the forge was opened: the base of the work.
    default_branch: String,
    issue: LocalIssue,
    /// Where comments, checks and the pull request report are written, canonical.
    out: PathBuf,
    user: String,
    /// Also serialises the numbering and rewriting of files.
    echo: Mutex<Box<dyn Write + Send>>,
}

impl LocalForge {
    /// Opens the repository at `repo` (its top folder), on the branch checked out now.
    /// `out` defaults to `planwright/` in the repository's git folder, which git ignores
    /// and never commits. Comments already in `out` are kept: a second run continues the
    /// same thread.
    pub async fn open(
        repo: &Path,
        issue: LocalIssue,
        out: Option<&Path>,
        user: &str,
        echo: Box<dyn Write + Send>,
    ) -> anyhow::Result<Self> {
        let shown = repo.display();
        if !repo.exists() {
            anyhow::bail!("Cannot use `{shown}` as the repository: there is no such folder");
        }
        if !repo.is_dir() {
            anyhow::bail!("Cannot use `{shown}` as the repository: it is not a folder");
        }
        let root = repo
            .canonicalize()
            .with_context(|| format!("Cannot use `{shown}` as the repository"))?;
        let toplevel = git_text(&root, &["rev-parse", "--show-toplevel"])
            .await?
            .map_err(|stderr| {
                // Other refusals (a repository owned by someone else, a broken one) are
                // passed on as git words them.
                if stderr.contains("not a git repository") {
                    anyhow::anyhow!(
                        "Cannot use `{shown}` as the repository: it is not a git repository"
                    )
                } else {
                    anyhow::anyhow!(
                        "Cannot use `{shown}` as the repository: git cannot open it: {stderr}"
                    )
                }
            })?;
        let toplevel = PathBuf::from(toplevel)
            .canonicalize()
            .with_context(|| format!("Cannot use `{shown}` as the repository"))?;
        if toplevel != root {
            anyhow::bail!(
                "Cannot use `{shown}` as the repository: it is a folder inside the git repository at `{}`; use that instead",
                toplevel.display()
            );
        }
        check_login(user)
            .map_err(|why| anyhow::anyhow!("Cannot use `{user}` as the local user name: {why}"))?;
        if user.eq_ignore_ascii_case(BOT_LOGIN) {
            anyhow::bail!("Cannot use `{user}` as the local user name: it is planwright's own");
        }
        let default_branch = git_text(&root, &["symbolic-ref", "--quiet", "--short", "HEAD"])
            .await?
            .map_err(|_| {
                anyhow::anyhow!(
                    "Cannot use `{shown}` as the repository: HEAD is detached; check out the branch to work from"
                )
            })?;
        let has_commits = git_text(
            &root,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{default_branch}^{{commit}}"),
            ],
        )
        .await?
        .is_ok();
        if !has_commits {
            anyhow::bail!(
                "Cannot use `{shown}` as the repository: the branch `{default_branch}` has no commits yet"
            );
        }
        let dir_name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = RepoName::parse(&format!("local/{dir_name}"))
            .with_context(|| format!("Cannot name the repository at `{shown}`"))?;

        let out = match out {
            Some(out) => out.to_path_buf(),
            None => {
                let git_dir = git_text(&root, &["rev-parse", "--absolute-git-dir"])
                    .await?
                    .map_err(|stderr| {
                        anyhow::anyhow!("Could not find the git folder of `{shown}`: {stderr}")
                    })?;
                PathBuf::from(git_dir).join("planwright")
            }
        };
        std::fs::create_dir_all(&out)
            .with_context(|| format!("Could not create the output folder `{}`", out.display()))?;
        let out = out
            .canonicalize()
            .with_context(|| format!("Could not use the output folder `{}`", out.display()))?;
        Ok(LocalForge {
            root,
            name,
            default_branch,
            issue,
            out,
            user: user.to_owned(),
            echo: Mutex::new(echo),
        })
    }

    pub fn name(&self) -> &RepoName {
        &self.name
    }

    /// The folder comments, checks and the pull request report are written to.
    pub fn output_dir(&self) -> &Path {
        &self.out
    }

    /// A comment by someone other than planwright, e.g. the local user's `/approve`
    /// typed at the terminal. It is not echoed: its author wrote it there.
    pub fn add_comment(&self, author: &str, body: &str) -> anyhow::Result<Comment> {
        check_login(author)
            .map_err(|why| anyhow::anyhow!("Cannot comment as `{author}`: {why}"))?;
        if author.eq_ignore_ascii_case(BOT_LOGIN) {
            anyhow::bail!("Cannot comment as `{author}`: only planwright itself writes as it");
        }
        let _files = self.lock();
        self.write_new_comment(author, body)
            .with_context(|| format!("Could not write a comment in `{}`", self.out.display()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn Write + Send>> {
        // A panic while holding the lock leaves nothing half-done that matters here: the
        // files are rewritten whole.
        self.echo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes to the echo; the files are the record, so a closed terminal is only logged.
    fn say(echo: &mut Box<dyn Write + Send>, text: &str) {
        if let Err(e) = echo.write_all(text.as_bytes()).and_then(|()| echo.flush()) {
            tracing::warn!(error = %e, "could not echo to the terminal");
        }
    }

    fn actor(&self, login: &str) -> Actor {
        // Stable made-up ids: 0 is "unknown" elsewhere, so the two known people get others.
        let id = if login.eq_ignore_ascii_case(BOT_LOGIN) {
            1
        } else if login.eq_ignore_ascii_case(&self.user) {
            2
        } else {
            0
        };
        Actor {
            login: login.to_owned(),
            id,
            bot: login.eq_ignore_ascii_case(BOT_LOGIN),
        }
    }

    fn comments_dir(&self) -> PathBuf {
        self.out.join("comments")
    }

    /// Every comment file's number, author and path, by number.
    fn comment_files(&self) -> io::Result<Vec<(i64, String, PathBuf)>> {
        let dir = self.comments_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if let Some((number, author)) = parse_comment_file(&file_name) {
                found.push((number, author, entry.path()));
            }
        }
        found.sort_by_key(|(n, _, _)| *n);
        Ok(found)
    }

    fn find_comment(&self, id: CommentId) -> Result<(String, PathBuf), ForgeError> {
        self.comment_files()
            .map_err(|e| io_error("list the comments", &e))?
            .into_iter()
            .find(|(n, _, _)| *n == id.0)
            .map(|(_, author, path)| (author, path))
            .ok_or_else(|| ForgeError::NotFound {
                what: format!("find comment #{id}"),
            })
    }

    fn write_new_comment(&self, author: &str, body: &str) -> io::Result<Comment> {
        let next = self.comment_files()?.last().map_or(1, |(n, _, _)| n + 1);
        std::fs::create_dir_all(self.comments_dir())?;
        let path = self.comments_dir().join(format!("{next:04}-{author}.md"));
        write_whole(&path, body)?;
        Ok(Comment {
            id: CommentId(next),
            body: body.to_owned(),
            author: self.actor(author),
            created_at: None,
        })
    }

    fn check_repo(&self, repo: &RepoName) -> Result<(), ForgeError> {
        if *repo == self.name {
            Ok(())
        } else {
            Err(ForgeError::NotFound {
                what: format!("find the repository {repo} (this is {})", self.name),
            })
        }
    }

    fn check_issue(&self, issue: IssueNumber) -> Result<(), ForgeError> {
        if issue == ISSUE {
            Ok(())
        } else {
            Err(ForgeError::NotFound {
                what: format!("find issue #{issue} (a local run has only #{ISSUE})"),
            })
        }
    }

    /// Runs git in the repository; `Err` for git not running at all, `Ok(Err(stderr))`
    /// for git refusing.
    async fn git(&self, args: &[&str]) -> Result<Result<String, String>, ForgeError> {
        git_text(&self.root, args)
            .await
            .map_err(|e| ForgeError::Client {
                what: format!("run `git {}`", args.first().copied().unwrap_or_default()),
                message: format!("{e:#}"),
            })
    }

    async fn branch_exists(&self, branch: &str) -> Result<bool, ForgeError> {
        let spec = format!("refs/heads/{branch}^{{commit}}");
        Ok(self
            .git(&["rev-parse", "--verify", "--quiet", &spec])
            .await?
            .is_ok())
    }

    fn pull_path(&self) -> PathBuf {
        self.out.join(PULL_FILE)
    }

    fn pull_url(&self) -> String {
        reqwest::Url::from_file_path(self.pull_path())
            .map(String::from)
            .unwrap_or_else(|()| format!("file://{}", self.pull_path().display()))
    }

    fn read_pull(&self) -> Result<Option<PullRequest>, ForgeError> {
        let text = match std::fs::read_to_string(self.pull_path()) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("read the pull request", &e)),
        };
        let malformed = |message: &str| ForgeError::Malformed {
            what: format!("read `{}`", self.pull_path().display()),
            message: message.to_owned(),
        };
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        let meta: PullMeta = first
            .strip_prefix(PULL_MARKER)
            .and_then(|m| m.strip_suffix(" -->"))
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| malformed("its first line is not planwright's marker"))?;
        // Someone may have edited the header by hand; then the whole text is the body.
        let body = rest
            .strip_prefix(&pull_header(&meta))
            .unwrap_or(rest)
            .to_owned();
        Ok(Some(self.pull_from(meta, body)))
    }

    fn pull_from(&self, meta: PullMeta, body: String) -> PullRequest {
        PullRequest {
            number: PULL,
            url: self.pull_url(),
            head_branch: meta.head,
            base_branch: meta.base,
            title: meta.title,
            body,
            // A local result is a file to read, never merged: nothing to mark.
            draft: false,
        }
    }

    fn write_pull(&self, meta: &PullMeta, body: &str) -> Result<(), ForgeError> {
        let marker = serde_json::to_string(meta).map_err(|e| ForgeError::Client {
            what: "write the pull request".into(),
            message: e.to_string(),
        })?;
        let text = format!("{PULL_MARKER}{marker} -->\n{}{body}", pull_header(meta));
        write_whole(&self.pull_path(), &text).map_err(|e| io_error("write the pull request", &e))
    }
}

/// What the pull request file records besides its body.
#[derive(Serialize, Deserialize)]
struct PullMeta {
    head: String,
    base: String,
    title: String,
}

/// The readable top of the pull request file, between the marker and the body.
fn pull_header(meta: &PullMeta) -> String {
    format!(
        "# {}\n\nBranch `{}` into `{}`: `git diff {}...{}` shows the change.\n\n",
        meta.title.replace('\n', " "),
        meta.head,
        meta.base,
        meta.base,
        meta.head
    )
}

/// A login that can be part of a file name and read back from it.
fn check_login(login: &str) -> Result<(), &'static str> {
    if login.is_empty() {
        return Err("it is empty");
    }
    if !login
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err("use only letters, digits, '-', '_' and '.'");
    }
    if version_suffix(login).is_some() {
        return Err("it ends like an edit's file name (`.v1`)");
    }
    Ok(())
}

/// `name` without a trailing `.v<digits>`, when it has one.
fn version_suffix(name: &str) -> Option<&str> {
    let (stem, version) = name.rsplit_once(".v")?;
    (!version.is_empty() && version.chars().all(|c| c.is_ascii_digit())).then_some(stem)
}

/// `0007-ada.md` → (7, "ada"); earlier versions (`0007-ada.v1.md`) and other files → None.
fn parse_comment_file(file_name: &str) -> Option<(i64, String)> {
    let stem = file_name.strip_suffix(".md")?;
    if version_suffix(stem).is_some() {
        return None;
    }
    let (number, author) = stem.split_once('-')?;
    let number = number.parse().ok().filter(|n| *n > 0)?;
    check_login(author).ok()?;
    Some((number, author.to_owned()))
}

/// A check name as a file name: `planwright/verify` → `planwright-verify`.
fn file_slug(name: &str) -> String {
    let slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let slug = slug.trim_matches(['-', '.']);
    if slug.is_empty() {
        "check".to_owned()
    } else {
        slug.to_owned()
    }
}

fn check_state_name(state: CheckState) -> &'static str {
    match state {
        CheckState::Pending => "pending",
        CheckState::Running => "running",
        CheckState::Success => "success",
        CheckState::Failure => "failure",
        CheckState::Neutral => "neutral",
        CheckState::Cancelled => "cancelled",
    }
}

/// Replaces `path` with `text` in one step, so a reader (or a crash) never meets half a
/// file; the temporary name ends in `.tmp`, which is never taken for a comment.
fn write_whole(path: &Path, text: &str) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

fn io_error(what: &str, e: &io::Error) -> ForgeError {
    ForgeError::Client {
        what: what.to_owned(),
        message: e.to_string(),
    }
}

/// git in `dir`. Variables that would point it at another repository are cleared: the
/// folder given is the one meant. Its messages are kept in English, as they are matched.
fn git_command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    command
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_COMMON_DIR")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .kill_on_drop(true);
    command
}

/// Runs git in `dir`: its trimmed output, or what it said when it refused.
async fn git_text(dir: &Path, args: &[&str]) -> anyhow::Result<Result<String, String>> {
    let output: Output = git_command(dir, args)
        .output()
        .await
        .context("Could not run git (is it installed?)")?;
    if output.status.success() {
        Ok(Ok(String::from_utf8_lossy(&output.stdout)
            .trim_end_matches(['\n', '\r'])
            .to_owned()))
    } else {
        Ok(Err(String::from_utf8_lossy(&output.stderr)
            .trim()
            .to_owned()))
    }
}

#[async_trait]
impl Forge for LocalForge {
    fn web_links(&self, _repo: &RepoName) -> SourceLinks {
        SourceLinks::None
    }

    fn commit_email(&self, login: &str) -> String {
        format!("{login}@localhost")
    }

    /// A local pull request is a file: GitLab's generous limit keeps it readable.
    fn pull_body_limit(&self) -> usize {
        super::gitlab::BODY_LIMIT
    }

    fn check_carries_report(&self) -> bool {
        false
    }

    /// A local repository may be headed for either forge: any of the files counts.
    fn config_paths(&self) -> &'static [&'static str] {
        crate::config::repo::ALL_PATHS
    }

    fn has_labels(&self) -> bool {
        false
    }

    async fn is_own(&self, actor: &Actor) -> Result<bool, ForgeError> {
        Ok(actor.login.eq_ignore_ascii_case(BOT_LOGIN))
    }

    async fn repository(&self, repo: &RepoName) -> Result<Repository, ForgeError> {
        self.check_repo(repo)?;
        let spec = format!("refs/heads/{}^{{commit}}", self.default_branch);
        let sha = self
            .git(&["rev-parse", "--verify", "--quiet", &spec])
            .await?
            .map_err(|_| ForgeError::NotFound {
                what: format!("find the branch `{}`", self.default_branch),
            })?;
        // `size-pack` and `size` (loose objects) in KiB, as `git count-objects -v` says.
        let size = self.git(&["count-objects", "-v"]).await?.ok().map(|text| {
            text.lines()
                .filter_map(|l| match l.split_once(": ")? {
                    ("size" | "size-pack", value) => value.trim().parse::<u64>().ok(),
                    _ => None,
                })
                .sum::<u64>()
                .saturating_mul(1024)
        });
        Ok(Repository {
            name: self.name.clone(),
            default_branch: self.default_branch.clone(),
            head_sha: CommitSha(sha),
            size,
            id: Some(self.root.display().to_string()),
        })
    }

    async fn issue(&self, repo: &RepoName, issue: IssueNumber) -> Result<Issue, ForgeError> {
        self.check_repo(repo)?;
        self.check_issue(issue)?;
        Ok(Issue {
            number: ISSUE,
            title: self.issue.title.clone(),
            body: self.issue.body.clone(),
            labels: Vec::new(),
            author: self.actor(&self.user),
        })
    }

    async fn comments(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
    ) -> Result<Vec<Comment>, ForgeError> {
        self.check_repo(repo)?;
        self.check_issue(issue)?;
        let _files = self.lock();
        let listed = self
            .comment_files()
            .map_err(|e| io_error("list the comments", &e))?;
        listed
            .into_iter()
            .map(|(number, author, path)| {
                let body = std::fs::read_to_string(&path)
                    .map_err(|e| io_error(&format!("read `{}`", path.display()), &e))?;
                Ok(Comment {
                    id: CommentId(number),
                    body,
                    author: self.actor(&author),
                    created_at: None,
                })
            })
            .collect()
    }

    async fn comment(
        &self,
        repo: &RepoName,
        thread: Thread,
        comment: CommentId,
    ) -> Result<Comment, ForgeError> {
        let Thread::Issue(issue) = thread else {
            return Err(ForgeError::NotFound {
                what: format!("find comment #{comment}: a local issue has no pull requests"),
            });
        };
        self.comments(repo, issue)
            .await?
            .into_iter()
            .find(|c| c.id == comment)
            .ok_or_else(|| ForgeError::NotFound {
                what: format!("find comment #{comment}"),
            })
    }

    async fn create_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        self.check_repo(repo)?;
        self.check_issue(issue)?;
        let mut echo = self.lock();
        let comment = self
            .write_new_comment(BOT_LOGIN, body)
            .map_err(|e| io_error("write a comment", &e))?;
        Self::say(
            &mut echo,
            &format!("── planwright commented (#{}) ──\n{body}\n\n", comment.id),
        );
        Ok(comment)
    }

    /// Only planwright's own comments can be edited, as on a forge. The previous text is
    /// kept beside the comment as `….v1.md`, `….v2.md`, ….
    async fn edit_comment(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        self.check_repo(repo)?;
        self.check_issue(issue)?;
        let mut echo = self.lock();
        let (author, path) = self.find_comment(comment)?;
        if !author.eq_ignore_ascii_case(BOT_LOGIN) {
            return Err(ForgeError::Refused {
                what: format!("edit comment #{comment}"),
                status: 403,
                message: format!("it is {author}'s, and only its author can edit it"),
            });
        }
        let stem = format!("{:04}-{author}", comment.0);
        let version = (1..)
            .find(|v| !self.comments_dir().join(format!("{stem}.v{v}.md")).exists())
            .unwrap_or(1);
        let kept = self.comments_dir().join(format!("{stem}.v{version}.md"));
        std::fs::copy(&path, &kept)
            .and_then(|_| write_whole(&path, body))
            .map_err(|e| io_error(&format!("edit comment #{comment}"), &e))?;
        Self::say(
            &mut echo,
            &format!("── planwright edited its comment #{comment} ──\n{body}\n\n"),
        );
        Ok(Comment {
            id: comment,
            body: body.to_owned(),
            author: self.actor(&author),
            created_at: None,
        })
    }

    /// Recorded once per comment and reaction in `reactions.txt`.
    async fn react(
        &self,
        repo: &RepoName,
        issue: IssueNumber,
        comment: CommentId,
        reaction: Reaction,
    ) -> Result<(), ForgeError> {
        self.check_repo(repo)?;
        self.check_issue(issue)?;
        let mut echo = self.lock();
        self.find_comment(comment)?;
        let path = self.out.join(REACTIONS_FILE);
        let mut recorded = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_error("read the reactions", &e)),
        };
        let line = format!("{comment} {}", reaction.github_name());
        if recorded.lines().any(|l| l == line) {
            return Ok(());
        }
        let _ = writeln!(recorded, "{line}");
        write_whole(&path, &recorded).map_err(|e| io_error("record a reaction", &e))?;
        Self::say(
            &mut echo,
            &format!(
                "── planwright reacted {} to comment #{comment} ──\n\n",
                reaction.github_name()
            ),
        );
        Ok(())
    }

    /// The local user owns the repository; nobody else is there.
    async fn permission(&self, repo: &RepoName, login: &str) -> Result<Permission, ForgeError> {
        self.check_repo(repo)?;
        Ok(if login.eq_ignore_ascii_case(&self.user) {
            Permission::Admin
        } else {
            Permission::None
        })
    }

    /// Only the local user is there to change a label (`solve` stands for adding one).
    async fn label_changed_by(
        &self,
        repo: &RepoName,
        _issue: IssueNumber,
        _label: &str,
        _change: LabelChange,
        _claimed: &Actor,
    ) -> Result<Option<Actor>, ForgeError> {
        self.check_repo(repo)?;
        Ok(Some(self.actor(&self.user)))
    }

    /// The file as committed on the default branch; uncommitted changes are not seen,
    /// as a forge would not see them.
    async fn read_file(&self, repo: &RepoName, path: &str) -> Result<Option<String>, ForgeError> {
        self.check_repo(repo)?;
        let spec = format!(
            "refs/heads/{}:{}",
            self.default_branch,
            path.trim_start_matches('/')
        );
        match self.git(&["cat-file", "-t", &spec]).await? {
            Ok(kind) if kind == "blob" => {}
            // Missing, or a folder.
            _ => return Ok(None),
        }
        // Read raw: the text is checked as UTF-8 here, not made lossy.
        let output = git_command(&self.root, &["cat-file", "blob", &spec])
            .output()
            .await
            .map_err(|e| io_error("run `git cat-file`", &e))?;
        if !output.status.success() {
            return Ok(None);
        }
        String::from_utf8(output.stdout)
            .map(Some)
            .map_err(|_| ForgeError::Malformed {
                what: format!("read `{path}`"),
                message: "it is not UTF-8 text".into(),
            })
    }

    /// The pull request is the head branch itself plus `pull-request.md` in the output
    /// folder describing it. A local run has one: asking for another head branch while it
    /// exists is refused.
    async fn find_or_create_pull(
        &self,
        repo: &RepoName,
        new: &NewPullRequest<'_>,
    ) -> Result<PullRequest, ForgeError> {
        self.check_repo(repo)?;
        for branch in [new.head_branch, new.base_branch] {
            if !self.branch_exists(branch).await? {
                return Err(ForgeError::Refused {
                    what: format!("open a pull request from `{}`", new.head_branch),
                    status: 422,
                    message: format!(
                        "the branch `{branch}` does not exist in `{}`",
                        self.root.display()
                    ),
                });
            }
        }
        let mut echo = self.lock();
        if let Some(existing) = self.read_pull()? {
            if existing.head_branch == new.head_branch {
                return Ok(existing);
            }
            return Err(ForgeError::Refused {
                what: format!("open a pull request from `{}`", new.head_branch),
                status: 422,
                message: format!(
                    "the local pull request is already for `{}` (remove `{}` to start over)",
                    existing.head_branch,
                    self.pull_path().display()
                ),
            });
        }
        let meta = PullMeta {
            head: new.head_branch.to_owned(),
            base: new.base_branch.to_owned(),
            title: new.title.replace('\n', " "),
        };
        self.write_pull(&meta, new.body)?;
        let pull = self.pull_from(meta, new.body.to_owned());
        Self::say(
            &mut echo,
            &format!(
                "── planwright opened a pull request: {} ──\n{}\n\n",
                pull.url, pull.body
            ),
        );
        Ok(pull)
    }

    async fn update_pull_body(
        &self,
        repo: &RepoName,
        pull: PullNumber,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        self.check_repo(repo)?;
        let mut echo = self.lock();
        let existing = match self.read_pull()? {
            Some(existing) if pull == PULL => existing,
            _ => {
                return Err(ForgeError::NotFound {
                    what: format!("find pull request #{pull}"),
                });
            }
        };
        let meta = PullMeta {
            head: existing.head_branch,
            base: existing.base_branch,
            title: existing.title,
        };
        self.write_pull(&meta, body)?;
        let pull = self.pull_from(meta, body.to_owned());
        Self::say(
            &mut echo,
            &format!(
                "── planwright updated the pull request: {} ──\n{body}\n\n",
                pull.url
            ),
        );
        Ok(pull)
    }

    /// Written whole to `checks/<name>.md`, summary and text included.
    async fn set_check(&self, repo: &RepoName, check: &CommitCheck<'_>) -> Result<(), ForgeError> {
        self.check_repo(repo)?;
        let sha = check.head_sha.as_str();
        let exists = self
            .git(&["cat-file", "-e", &format!("{sha}^{{commit}}")])
            .await?
            .is_ok();
        if !exists {
            return Err(ForgeError::NotFound {
                what: format!("find commit {sha}"),
            });
        }
        let state = check_state_name(check.state);
        let mut text = format!(
            "# {}: {state}\n\n{}\n\nCommit `{sha}`",
            check.name, check.title
        );
        if let Some(url) = check.details_url {
            let _ = write!(text, ", details at {url}");
        }
        let _ = write!(text, "\n\n{}\n\n{}\n", check.summary, check.text);
        let mut echo = self.lock();
        let dir = self.out.join("checks");
        std::fs::create_dir_all(&dir)
            .and_then(|()| write_whole(&dir.join(format!("{}.md", file_slug(check.name))), &text))
            .map_err(|e| io_error(&format!("write the check `{}`", check.name), &e))?;
        let short = sha.get(..8).unwrap_or(sha);
        Self::say(
            &mut echo,
            &format!(
                "── check {} on {short}: {state} — {} ──\n\n",
                check.name, check.title
            ),
        );
        Ok(())
    }

    /// Files cannot be folded away; the caller marks the comment superseded instead.
    async fn minimize_comment(
        &self,
        repo: &RepoName,
        _issue: IssueNumber,
        _comment: CommentId,
    ) -> Result<bool, ForgeError> {
        self.check_repo(repo)?;
        Ok(false)
    }

    /// The repository folder itself; no credentials are needed to push to it.
    async fn git_remote(&self, repo: &RepoName) -> Result<GitRemote, ForgeError> {
        self.check_repo(repo)?;
        Ok(GitRemote {
            url: self.root.to_string_lossy().into_owned(),
            username: String::new(),
            password: SecretString::from(String::new()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heading_is_the_title_and_the_rest_the_body() {
        let issue =
            LocalIssue::parse("\n# Crash on empty config\n\nSteps:\n1. run it\n\n").unwrap();
        assert_eq!(issue.title, "Crash on empty config");
        assert_eq!(issue.body, "Steps:\n1. run it");

        let issue = LocalIssue::parse("Reported by ops.\n\n# The title\nDetails.").unwrap();
        assert_eq!(issue.title, "The title");
        assert_eq!(issue.body, "Reported by ops.\n\nDetails.");

        let issue =
            LocalIssue::parse("```sh\n# not a title\nrun\n```\n# Real title\nbody").unwrap();
        assert_eq!(issue.title, "Real title");
        assert_eq!(issue.body, "```sh\n# not a title\nrun\n```\nbody");
    }

    #[test]
    fn plain_text_takes_its_first_line_as_the_title() {
        let issue = LocalIssue::parse("  \nTypo in README  \n\n  indented detail\n").unwrap();
        assert_eq!(issue.title, "Typo in README");
        assert_eq!(issue.body, "  indented detail");

        let issue = LocalIssue::parse("## Only a subheading\ntext").unwrap();
        assert_eq!(issue.title, "## Only a subheading");
        assert_eq!(issue.body, "text");

        let issue = LocalIssue::parse("one line").unwrap();
        assert_eq!(issue.title, "one line");
        assert_eq!(issue.body, "");
    }

    #[test]
    fn empty_issues_are_refused() {
        for text in ["", " \n\t\n", "\u{feff}"] {
            let error = LocalIssue::parse(text).unwrap_err().to_string();
            assert_eq!(error, "Cannot use the issue: it is empty");
        }
        let error = LocalIssue::parse("#\nbody").unwrap_err().to_string();
        assert!(error.contains("heading has no title"), "{error}");
    }

    #[test]
    fn comment_file_names_round_trip() {
        assert_eq!(parse_comment_file("0007-ada.md"), Some((7, "ada".into())));
        assert_eq!(
            parse_comment_file("0012-first.last.md"),
            Some((12, "first.last".into()))
        );
        assert_eq!(parse_comment_file("0007-ada.v1.md"), None);
        assert_eq!(parse_comment_file("0007-ada.txt"), None);
        assert_eq!(parse_comment_file("notes.md"), None);
        assert!(check_login("ada.v2").is_err());
        assert!(check_login("Ada Lovelace").is_err());
        assert!(check_login("").is_err());
        assert!(check_login("ada-l_2.x").is_ok());
    }

    #[test]
    fn check_names_become_file_names() {
        assert_eq!(file_slug("planwright/verify"), "planwright-verify");
        assert_eq!(file_slug("../../etc"), "etc");
        assert_eq!(file_slug("///"), "check");
    }
}
