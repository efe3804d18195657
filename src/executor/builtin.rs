//! The builtin executor: a bounded tool loop on the run's (metered) model with DESIGN's
//! executor tools. Reads go through the planner's read-only [`RepoTools`]; writes stay in
//! the checkout (no `..`, absolute paths, symlinks or `.git`); commands run in the sandbox
//! and the model reads their distilled output. Everything raw goes to the transcript.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::ops::ControlFlow;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    Executor, ExecutorError, ExecutorReport, ExecutorTask, StopReason, checkout_dir,
    prepare_records,
};
use crate::distill;
use crate::llm::{
    ChatModel, ChatRequest, ContentBlock, Message, ModelError, Role, Tool, anthropic,
};
use crate::repo_tools::RepoTools;
use crate::sandbox::{self, Sandbox, SandboxError};

/// Longest one `run` may take, whatever the model asks.
const MAX_RUN_SECS: u64 = 30 * 60;
const DEFAULT_RUN_SECS: u64 = 300;
/// Largest file `write_file` writes; generated blobs have no place in a reviewed change.
const MAX_WRITE_BYTES: usize = 2 << 20;
/// Raw output of one command kept in the transcript, per stream.
const TRANSCRIPT_OUTPUT_CHARS: usize = 256 * 1024;
const MAX_SUMMARY_CHARS: usize = 4_000;

/// planwright's own executor.
#[derive(Clone)]
pub struct Builtin {
    /// The run's model, metered with the run's budget by the caller.
    model: Arc<dyn ChatModel>,
    sandbox: Arc<dyn Sandbox>,
    max_tokens: u32,
}

impl Builtin {
    pub fn new(model: Arc<dyn ChatModel>, sandbox: Arc<dyn Sandbox>) -> Self {
        Builtin {
            model,
            sandbox,
            max_tokens: 8_000,
        }
    }
}

fn system(max_turns: u32) -> String {
    format!(
        "You carry out a build contract in a checkout of a repository. The repository's \
maintainers approved the contract: do what it asks and nothing more. Change the files it \
names and add the tests it asks for, keep to its constraints, leave what is out of scope \
alone. Read before you edit (read_file, list_files, search). Change a file with edit_file \
(replaces one exact, unique piece of text) or write_file (writes a whole file). Paths are \
relative to the repository root. Run commands with run: they run in a sandbox without \
network, and you see a summary of their output. Run the verification commands before you \
finish when you can. When the change is complete, call finish with a short summary of what \
you changed and what you ran. You have at most {max_turns} turns."
    )
}

fn tools() -> Vec<Tool> {
    let mut tools = RepoTools::definitions();
    tools.extend([
        Tool {
            name: "write_file".into(),
            description: "Write a whole file (created with its folders if missing, replaced otherwise).".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "relative to the repository root"},
                    "content": {"type": "string"}
                },
                "required": ["path", "content"]
            }),
        },
        Tool {
            name: "edit_file".into(),
            description: "Replace the one occurrence of `old` in a file with `new`. `old` must match the file exactly (whitespace included) and only once.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "relative to the repository root"},
                    "old": {"type": "string"},
                    "new": {"type": "string"}
                },
                "required": ["path", "old", "new"]
            }),
        },
        RepoTools::run_definition(
            "Run a shell command in the repository's folder, in a sandbox without network. Output is summarised.",
            MAX_RUN_SECS,
        ),
        Tool {
            name: "finish".into(),
            description: "Finish: the change is complete. Summarise what you changed and what you ran.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"]
            }),
        },
    ]);
    tools
}

#[async_trait]
impl Executor for Builtin {
    fn name(&self) -> &'static str {
        "builtin"
    }

    async fn run(&self, task: &ExecutorTask) -> Result<ExecutorReport, ExecutorError> {
        let started = Instant::now();
        let deadline = started + task.limits.wall;
        let attempt = Attempt::prepare(task, deadline)?;
        let mut transcript = Transcript::create(task.records.join("transcript.jsonl"))?;
        let system = system(task.limits.max_turns);
        let prompt = task.prompt();
        transcript.record(json!({
            "kind": "start",
            "executor": "builtin",
            "model": self.model.name().to_string(),
            "system": system,
            "prompt": prompt,
        }))?;

        let mut messages = vec![Message::user(prompt)];
        let mut turns = 0u32;
        let mut steps = 0u32;
        let mut last_text = String::new();
        let stop = loop {
            if turns >= task.limits.max_turns {
                break (StopReason::TurnLimit, None);
            }
            let request = ChatRequest {
                system: system.clone(),
                messages: messages.clone(),
                tools: tools(),
                max_tokens: self.max_tokens,
                temperature: Some(0.0),
            };
            turns += 1;
            let response = match self.ask(&request, deadline, turns, &mut transcript).await? {
                ControlFlow::Continue(response) => response,
                ControlFlow::Break(reason) => break (reason, None),
            };
            transcript.record(json!({
                "kind": "assistant",
                "turn": turns,
                "stop_reason": format!("{:?}", response.stop_reason),
                "content": response.content.iter().map(anthropic::block_json).collect::<Vec<_>>(),
            }))?;
            let text = response.text();
            if !text.trim().is_empty() {
                last_text = text;
            }
            messages.push(Message {
                role: Role::Assistant,
                content: response.content.clone(),
            });
            let (results, finished) = self
                .carry_out(
                    &attempt,
                    &response.content,
                    turns,
                    &mut steps,
                    &mut transcript,
                )
                .await?;
            if let Some(summary) = finished {
                break (StopReason::Finished, Some(summary));
            }
            if Instant::now() >= deadline {
                break (StopReason::Timeout, None);
            }
            if results.is_empty() {
                messages.push(Message::user(
                    "Use the tools to make the change; when it is complete, call `finish`.",
                ));
            } else {
                messages.push(Message {
                    role: Role::User,
                    content: results,
                });
            }
        };

        let (reason, summary) = stop;
        let summary = crate::text::clip(summary.unwrap_or(last_text).trim(), MAX_SUMMARY_CHARS);
        transcript.record(json!({
            "kind": "stop",
            "reason": reason.as_str(),
            "turns": turns,
            "steps": steps,
            "summary": summary,
        }))?;
        Ok(ExecutorReport {
            stop: reason,
            summary,
            turns,
            steps,
            transcript: transcript.path,
            duration: started.elapsed(),
        })
    }
}

impl Builtin {
    /// One turn of the model: a timeout or a spent budget ends the loop, any other model
    /// error the attempt.
    async fn ask(
        &self,
        request: &ChatRequest,
        deadline: Instant,
        turn: u32,
        transcript: &mut Transcript,
    ) -> Result<ControlFlow<StopReason, crate::llm::ChatResponse>, ExecutorError> {
        match tokio::time::timeout_at(deadline, self.model.chat(request)).await {
            Err(_) => Ok(ControlFlow::Break(StopReason::Timeout)),
            Ok(Err(e @ ModelError::BudgetExceeded { .. })) => {
                transcript
                    .record(json!({"kind": "model_error", "turn": turn, "error": e.to_string()}))?;
                Ok(ControlFlow::Break(StopReason::Budget))
            }
            Ok(Err(e)) => {
                transcript
                    .record(json!({"kind": "model_error", "turn": turn, "error": e.to_string()}))?;
                Err(ExecutorError::Model(e))
            }
            Ok(Ok(response)) => Ok(ControlFlow::Continue(response)),
        }
    }

    /// Carries out the tool calls of one answer in order: their results for the model
    /// and, when the answer called `finish`, its summary.
    async fn carry_out(
        &self,
        attempt: &Attempt<'_>,
        content: &[ContentBlock],
        turn: u32,
        steps: &mut u32,
        transcript: &mut Transcript,
    ) -> Result<(Vec<ContentBlock>, Option<String>), ExecutorError> {
        let mut results = Vec::new();
        let mut finished = None;
        for block in content {
            let ContentBlock::ToolUse { id, name, input } = block else {
                continue;
            };
            *steps += 1;
            if finished.is_some() {
                // Calls after `finish` in the same answer are not carried out.
                continue;
            }
            let (result, raw) = if name == "finish" {
                match parse::<FinishArgs>(name, input) {
                    Ok(args) => {
                        finished = Some(args.summary.clone());
                        (Ok("finished".to_owned()), None)
                    }
                    Err(e) => (Err(e), None),
                }
            } else {
                self.call(attempt, name, input, *steps).await?
            };
            let (content, is_error) = match result {
                Ok(text) => (text, false),
                Err(text) => (text, true),
            };
            transcript.record(json!({
                "kind": "tool",
                "turn": turn,
                "id": id,
                "name": name,
                "is_error": is_error,
                "output": content,
                "raw": raw,
            }))?;
            results.push(ContentBlock::ToolResult {
                tool_use_id: id.clone(),
                content,
                is_error,
            });
        }
        Ok((results, finished))
    }
    /// One tool call: the answer for the model (the error side is a tool error) and, for
    /// commands, the raw output for the transcript. Only failures of the sandbox itself
    /// end the attempt.
    async fn call(
        &self,
        attempt: &Attempt<'_>,
        name: &str,
        input: &Value,
        step: u32,
    ) -> Result<(Result<String, String>, Option<Value>), ExecutorError> {
        if !input.is_object() {
            return Ok((
                Err(format!(
                    "the arguments of `{name}` must be a JSON object; got: {}",
                    crate::text::clip(&display_input(input), 200)
                )),
                None,
            ));
        }
        if let Some(result) = attempt.reader.call_in_background(name, input).await {
            return Ok((result, None));
        }
        let result = match name {
            "write_file" => parse::<WriteArgs>(name, input)
                .and_then(|a| attempt.writer.write(&a.path, &a.content)),
            "edit_file" => parse::<EditArgs>(name, input)
                .and_then(|a| attempt.writer.edit(&a.path, &a.old, &a.new)),
            "run" => {
                let args = match parse::<RunArgs>(name, input) {
                    Ok(args) => args,
                    Err(e) => return Ok((Err(e), None)),
                };
                return self.run_command(attempt, &args, step).await;
            }
            other => Err(format!(
                "`{other}` is not a tool you have (read_file, list_files, search, write_file, edit_file, run, finish)"
            )),
        };
        Ok((result, None))
    }

    async fn run_command(
        &self,
        attempt: &Attempt<'_>,
        args: &RunArgs,
        step: u32,
    ) -> Result<(Result<String, String>, Option<Value>), ExecutorError> {
        if args.command.trim().is_empty() {
            return Ok((Err("`command` is empty".into()), None));
        }
        let remaining = attempt.deadline.saturating_duration_since(Instant::now());
        let task = attempt.task;
        if remaining.is_zero() {
            return Ok((Err("the attempt's time is up".into()), None));
        }
        let asked = Duration::from_secs(
            args.timeout_s
                .unwrap_or(DEFAULT_RUN_SECS)
                .clamp(1, MAX_RUN_SECS),
        );
        let mut cmd = sandbox::Command::new(
            &task.root,
            vec!["sh".into(), "-c".into(), args.command.clone()],
        );
        cmd.cwd = Some(attempt.cwd.clone());
        cmd.env = task.env.clone();
        cmd.read_only = task.read_only.clone();
        cmd.root = task.environment.clone();
        cmd.limits.wall = asked.min(remaining);
        cmd.spill_dir = Some(task.records.join(format!("run-{step}")));
        let output = match self.sandbox.run(&cmd).await {
            Ok(output) => output,
            Err(e @ (SandboxError::Unavailable(_) | SandboxError::Internal(_))) => {
                return Err(ExecutorError::Sandbox(e));
            }
            Err(e @ SandboxError::InvalidCommand(_)) => {
                return Ok((Err(e.to_string()), None));
            }
        };
        let stdout = output.stdout.text();
        let stderr = output.stderr.text();
        let status = output.status_text(cmd.limits.wall);
        let mut text = stdout.clone();
        text.push_str(&stderr);
        let report = distill::distill_str(&text, None, Some(&args.command));
        let answer = format!("{status}\n{}", distill::render::compact(&report));
        let raw = json!({
            "command": args.command,
            "status": status,
            "stdout": crate::text::clip(&stdout, TRANSCRIPT_OUTPUT_CHARS),
            "stderr": crate::text::clip(&stderr, TRANSCRIPT_OUTPUT_CHARS),
            "stdout_bytes": output.stdout.total,
            "stderr_bytes": output.stderr.total,
        });
        Ok((Ok(answer), Some(raw)))
    }
}

/// What the tools of one attempt work on.
struct Attempt<'a> {
    task: &'a ExecutorTask,
    reader: RepoTools,
    writer: Writer,
    /// The checkout relative to the sandbox's workspace.
    cwd: PathBuf,
    deadline: Instant,
}

impl<'a> Attempt<'a> {
    fn prepare(task: &'a ExecutorTask, deadline: Instant) -> Result<Self, ExecutorError> {
        prepare_records(task)?;
        let cwd = checkout_dir(task)?;
        // An earlier attempt's commands may have swapped the checkout for a symlink;
        // canonicalising that would aim every tool at its target.
        if !is_real_dir(&task.repo) {
            return Err(ExecutorError::Invalid(format!(
                "the checkout {} is not a folder (replaced by an earlier run?)",
                task.repo.display()
            )));
        }
        let reader =
            RepoTools::new(&task.repo).map_err(|e| ExecutorError::Invalid(e.to_string()))?;
        let writer = Writer {
            root: reader.root().to_path_buf(),
        };
        Ok(Attempt {
            task,
            reader,
            writer,
            cwd,
            deadline,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old: String,
    new: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    command: String,
    #[serde(default)]
    timeout_s: Option<u64>,
}

#[derive(Deserialize)]
struct FinishArgs {
    summary: String,
}

/// The arguments as `T`, or a tool error naming what is wrong with them.
fn parse<T: for<'de> Deserialize<'de>>(name: &str, input: &Value) -> Result<T, String> {
    if !input.is_object() {
        return Err(format!(
            "the arguments of `{name}` must be a JSON object; got: {}",
            crate::text::clip(&display_input(input), 200)
        ));
    }
    serde_json::from_value(input.clone())
        .map_err(|e| format!("the arguments of `{name}` are not usable: {e}"))
}

/// Unparseable arguments arrive as the raw text in a JSON string; show that text.
fn display_input(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// The attempt's record, one JSON object a line, flushed as it goes so a crash leaves
/// everything up to it.
struct Transcript {
    path: PathBuf,
    file: std::fs::File,
}

impl Transcript {
    fn create(path: PathBuf) -> Result<Self, ExecutorError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| ExecutorError::Records {
                path: path.clone(),
                source,
            })?;
        Ok(Transcript { path, file })
    }

    fn record(&mut self, mut entry: Value) -> Result<(), ExecutorError> {
        entry["at_ms"] = json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        );
        let mut line = entry.to_string();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|source| ExecutorError::Records {
                path: self.path.clone(),
                source,
            })
    }
}

/// Writes into the checkout. Every component of a path is checked as it is walked: no
/// symlink is followed, nothing under `.git` is touched, and a file is replaced by
/// renaming a new one over it, so a hard or symbolic link planted by a command never
/// carries a write elsewhere.
struct Writer {
    root: PathBuf,
}

impl Writer {
    /// The path's plain components, or why it is not a path inside the checkout.
    fn components(path: &str) -> Result<Vec<&OsStr>, String> {
        let trimmed = path.trim();
        if trimmed.is_empty() {
            return Err("`path` is empty".into());
        }
        if trimmed.chars().any(char::is_control) {
            return Err(format!("`{path}` contains control characters"));
        }
        let mut parts = Vec::new();
        for component in Path::new(trimmed).components() {
            match component {
                Component::Normal(part) => {
                    if part.eq_ignore_ascii_case(".git") {
                        return Err(format!(
                            "`{path}` is inside .git, which is not part of the repository's files"
                        ));
                    }
                    parts.push(part);
                }
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!(
                        "`{path}` is absolute; give a path relative to the repository root"
                    ));
                }
                Component::ParentDir => {
                    return Err(format!(
                        "`{path}` uses `..`; give a path inside the repository"
                    ));
                }
            }
        }
        if parts.is_empty() {
            return Err(format!("`{path}` names the repository root, not a file"));
        }
        Ok(parts)
    }

    /// The folder holding the file `parts` names, created when `create` and missing.
    fn parent(&self, path: &str, parts: &[&OsStr], create: bool) -> Result<PathBuf, String> {
        // A command may have swapped the checkout itself for a symlink since the last
        // call; nothing runs in the sandbox while a tool writes, so checking now holds.
        if !is_real_dir(&self.root) {
            return Err(
                "the repository folder was replaced (by a symlink or file); nothing is written"
                    .into(),
            );
        }
        let mut dir = self.root.clone();
        let mut shown = PathBuf::new();
        for part in &parts[..parts.len() - 1] {
            dir.push(part);
            shown.push(part);
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(format!(
                        "`{}` is a symlink; files are not written through symlinks",
                        shown.display()
                    ));
                }
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => return Err(format!("`{}` is a file, not a folder", shown.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                    std::fs::create_dir(&dir).map_err(|e| {
                        format!("cannot create the folder `{}`: {e}", shown.display())
                    })?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(format!("`{path}` does not exist"));
                }
                Err(e) => return Err(format!("cannot open `{}`: {e}", shown.display())),
            }
        }
        Ok(dir)
    }

    /// The existing regular file's mode, `None` when there is no file; errors for
    /// symlinks and folders.
    fn existing(path: &str, target: &Path) -> Result<Option<u32>, String> {
        match std::fs::symlink_metadata(target) {
            Ok(meta) if meta.file_type().is_symlink() => Err(format!(
                "`{path}` is a symlink; files are not written through symlinks"
            )),
            Ok(meta) if meta.is_dir() => Err(format!("`{path}` is a folder")),
            Ok(meta) if meta.is_file() => Ok(Some(meta.permissions().mode() & 0o7777)),
            Ok(_) => Err(format!("`{path}` is not a regular file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot open `{path}`: {e}")),
        }
    }

    fn write(&self, path: &str, content: &str) -> Result<String, String> {
        if content.len() > MAX_WRITE_BYTES {
            return Err(format!(
                "the content is {} bytes; files of more than {MAX_WRITE_BYTES} bytes are not written",
                content.len()
            ));
        }
        let parts = Self::components(path)?;
        let dir = self.parent(path, &parts, true)?;
        let name = parts[parts.len() - 1];
        let target = dir.join(name);
        let mode = Self::existing(path, &target)?;
        replace(&dir, name, content.as_bytes(), mode.unwrap_or(0o644))
            .map_err(|e| format!("cannot write `{path}`: {e}"))?;
        let verb = if mode.is_some() {
            "replaced"
        } else {
            "created"
        };
        Ok(format!(
            "{verb} `{}` ({} lines)",
            path.trim(),
            content.lines().count()
        ))
    }

    fn edit(&self, path: &str, old: &str, new: &str) -> Result<String, String> {
        if old.is_empty() {
            return Err("`old` is empty; to write a whole file use write_file".into());
        }
        let parts = Self::components(path)?;
        let dir = self.parent(path, &parts, false)?;
        let name = parts[parts.len() - 1];
        let target = dir.join(name);
        let Some(mode) = Self::existing(path, &target)? else {
            return Err(format!(
                "`{path}` does not exist; create it with write_file"
            ));
        };
        let bytes = read_nofollow(&target).map_err(|e| format!("cannot read `{path}`: {e}"))?;
        let text = String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))?;
        let found = text.matches(old).count();
        if found == 0 {
            return Err(format!(
                "`old` does not occur in `{path}`; read the file and copy the text exactly, whitespace included"
            ));
        }
        if found > 1 {
            return Err(format!(
                "`old` occurs {found} times in `{path}`; include more of the surrounding text so it occurs once"
            ));
        }
        let updated = text.replacen(old, new, 1);
        if updated.len() > MAX_WRITE_BYTES {
            return Err(format!(
                "the edited file would be {} bytes; files of more than {MAX_WRITE_BYTES} bytes are not written",
                updated.len()
            ));
        }
        replace(&dir, name, updated.as_bytes(), mode)
            .map_err(|e| format!("cannot write `{path}`: {e}"))?;
        Ok(format!("edited `{}`", path.trim()))
    }
}

fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

fn read_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes a new file beside `name` in `dir` and renames it over `name`, with `mode`'s
/// permission bits only.
pub(super) fn replace(dir: &Path, name: &OsStr, content: &[u8], mode: u32) -> std::io::Result<()> {
    // planwright may be root: a setuid or setgid bit the sandbox set on a file would make
    // the model's new content a program that runs as root (or root's group) on the host.
    let mode = mode & 0o777;
    let temp = dir.join(format!(
        ".{}.planwright-{}",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(content)?;
        // The umask may have cut the mode; an executable script stays executable.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&temp, dir.join(name))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout() -> (tempfile::TempDir, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn a() {}\nfn b() {}\nfn b() {}\n").unwrap();
        let writer = Writer {
            root: root.canonicalize().unwrap(),
        };
        (dir, writer)
    }

    #[test]
    fn writes_create_folders_and_keep_the_mode() {
        let (_d, w) = checkout();
        let script = w.root.join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            w.write("run.sh", "new\n").unwrap(),
            "replaced `run.sh` (1 lines)"
        );
        let meta = std::fs::metadata(&script).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        w.write("./tests/deep/new.rs", "x").unwrap();
        assert_eq!(
            std::fs::read_to_string(w.root.join("tests/deep/new.rs")).unwrap(),
            "x"
        );
        // No temporary files are left beside the written ones.
        assert_eq!(std::fs::read_dir(&w.root).unwrap().count(), 4);
    }

    #[test]
    fn writes_and_edits_drop_setuid_and_setgid_bits() {
        let (_d, w) = checkout();
        // What a sandboxed command can leave behind for the writer, which runs as
        // planwright (root, in the shipped setup) and would recreate the file as its own.
        let program = w.root.join("tool");
        std::fs::write(&program, "#!/bin/sh\nid\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o6755)).unwrap();
        w.write("tool", "#!/bin/sh\nid -u\n").unwrap();
        let mode = std::fs::metadata(&program).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o6755)).unwrap();
        w.edit("tool", "id -u", "id -g").unwrap();
        let mode = std::fs::metadata(&program).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
    }

    #[test]
    fn paths_outside_or_in_git_are_refused() {
        let (d, w) = checkout();
        std::os::unix::fs::symlink(d.path(), w.root.join("out")).unwrap();
        for (path, wanted) in [
            ("../x", "`..`"),
            ("/tmp/x", "absolute"),
            ("src/../../x", "`..`"),
            (".git/config", ".git"),
            ("sub/.GIT/hooks/pre-commit", ".git"),
            ("out/x", "symlink"),
            ("out", "symlink"),
            ("", "empty"),
            ("src", "folder"),
            ("src/lib.rs/x", "not a folder"),
        ] {
            let err = w.write(path, "x").unwrap_err();
            assert!(err.contains(wanted), "{path}: {err}");
        }
        assert!(!d.path().join("x").exists());
        assert!(!w.root.join("sub").exists());
    }

    #[test]
    fn edits_need_one_exact_match() {
        let (_d, w) = checkout();
        assert!(
            w.edit("src/lib.rs", "fn c", "x")
                .unwrap_err()
                .contains("does not occur")
        );
        assert!(
            w.edit("src/lib.rs", "fn b() {}", "x")
                .unwrap_err()
                .contains("2 times")
        );
        assert!(w.edit("src/lib.rs", "", "x").unwrap_err().contains("empty"));
        assert!(
            w.edit("src/nope.rs", "a", "b")
                .unwrap_err()
                .contains("does not exist")
        );
        w.edit("src/lib.rs", "fn a() {}", "fn a() { b() }").unwrap();
        assert_eq!(
            std::fs::read_to_string(w.root.join("src/lib.rs")).unwrap(),
            "fn a() { b() }\nfn b() {}\nfn b() {}\n"
        );
    }

    #[test]
    fn a_hard_link_is_replaced_not_written_through() {
        let (d, w) = checkout();
        let outside = d.path().join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        std::fs::hard_link(&outside, w.root.join("linked.txt")).unwrap();
        w.write("linked.txt", "changed").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        assert_eq!(
            std::fs::read_to_string(w.root.join("linked.txt")).unwrap(),
            "changed"
        );
    }
}
