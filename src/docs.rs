//! The reference pages under `docs/reference/`, written from the code's own definitions so
//! that they cannot drift from it: the deployment settings ([`crate::config::KEYS`]), the
//! repository file's keys ([`crate::config::repo::REPO_KEYS`]), the command line (clap's
//! model of it, handed in by `cli`) and the `/metrics` families
//! ([`crate::metrics::FAMILIES`]). `planwright docs write` writes them; a test fails when
//! the committed pages differ from what this writes.

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::config::repo::{ALL_PATHS, REPO_KEYS, example_file};
use crate::config::{ENV_PREFIX, KEYS};
use crate::metrics::{FAMILIES, Kind};

/// The command that writes the pages again, run from the repository's top folder.
pub const REGENERATE: &str = "cargo run -- docs write";

/// One generated page: where it goes, relative to the repository's top, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub path: &'static str,
    pub text: String,
}

/// Every reference page, for the command line `cli` describes.
pub fn pages(cli: &clap::Command) -> Vec<Page> {
    vec![
        Page {
            path: "docs/reference/settings.md",
            text: settings(),
        },
        Page {
            path: "docs/reference/repository-config.md",
            text: repository_config(),
        },
        Page {
            path: "docs/reference/cli.md",
            text: command_line(cli),
        },
        Page {
            path: "docs/reference/metrics.md",
            text: metrics(),
        },
    ]
}

/// Writes the pages under `root`, the repository's top folder; returns those whose text
/// changed.
pub fn write(root: &Path, pages: &[Page]) -> Result<Vec<&'static str>> {
    let mut changed = Vec::new();
    for page in pages {
        let path = root.join(page.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(page.text.as_str()) {
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("Could not create {}", dir.display()))?;
        }
        std::fs::write(&path, &page.text)
            .with_context(|| format!("Could not write {}", path.display()))?;
        changed.push(page.path);
    }
    Ok(changed)
}

/// The pages whose committed text under `root` is missing or differs from `pages`.
pub fn stale(root: &Path, pages: &[Page]) -> Vec<&'static str> {
    pages
        .iter()
        .filter(|page| {
            std::fs::read_to_string(root.join(page.path))
                .ok()
                .as_deref()
                != Some(page.text.as_str())
        })
        .map(|page| page.path)
        .collect()
}

/// The first lines of every page: its title and where it comes from.
fn header(title: &str, source: &str) -> String {
    format!(
        "# {title}\n\n<!-- Written by `{REGENERATE}` from {source}: edit those, not this page. -->\n\n"
    )
}

/// Text that sits in one cell of a Markdown table.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A default as a person reads it: a literal value in code, words as they are, none as a
/// dash.
fn default_text(default: &str) -> String {
    if default.is_empty() {
        "—".to_owned()
    } else if default.contains(' ') || default.contains('`') {
        cell(default)
    } else {
        format!("`{}`", cell(default))
    }
}

fn settings() -> String {
    let mut out = header("Settings", "`src/config/keys.rs`");
    out.push_str(
        "A deployment reads its settings from an optional TOML file (`--config FILE`, or \
         `planwright.toml` in the working folder when present) with environment variables over \
         it: each key's variable is the key in capitals after `",
    );
    out.push_str(ENV_PREFIX);
    out.push_str(
        "`. A key the file does not know is refused with its line; every value is checked \
         when planwright starts, and an error names the key.\n\n",
    );
    out.push_str("| Key | Environment variable | Default | Meaning |\n|---|---|---|---|\n");
    for key in KEYS {
        let mut env = format!("`{}`", key.env());
        if key.also_unprefixed() {
            let _ = write!(env, " or `{}`", key.key.to_ascii_uppercase());
        }
        let _ = writeln!(
            out,
            "| <a id=\"{name}\"></a>`{name}` | {env} | {} | {} |",
            default_text(key.default),
            cell(key.doc),
            name = key.key,
        );
    }
    out
}

fn repository_config() -> String {
    let mut out = header(
        "Repository configuration",
        "`REPO_KEYS` in `src/config/repo.rs`",
    );
    let paths: Vec<String> = ALL_PATHS.iter().map(|p| format!("`{p}`")).collect();
    let _ = write!(
        out,
        "A repository's own settings live in one YAML file: {}. Every key is optional; \
         a key left out keeps its default. An unknown key or a bad value is answered on the \
         issue with the file, line and key, and no session starts. Who may start and command \
         a session (`label`, `min_permission`) is read from the default branch; everything \
         a run uses is read from the commit the contract is planned against and bound to \
         the approval.\n\n",
        paths.join(", ")
    );
    out.push_str("| Key | Default | Meaning |\n|---|---|---|\n");
    for key in REPO_KEYS {
        let _ = writeln!(
            out,
            "| <a id=\"{}\"></a>`{}` | {} | {} |",
            key.key.replace('.', "-"),
            key.key,
            cell(key.default),
            cell(key.doc),
        );
    }
    out.push_str("\nA file that sets every key:\n\n```yaml\n");
    out.push_str(&example_file());
    out.push_str("```\n");
    out
}

fn metrics() -> String {
    let mut out = header("Metrics", "`FAMILIES` in `src/metrics.rs`");
    out.push_str(
        "`GET /metrics` answers in the Prometheus text format (0.0.4), for a holder of \
         `metrics_token` or `admin_token`, or without a token on the `metrics_listen` \
         address. Totals read from the database (deliveries, jobs, sessions, runs, model \
         usage) are the whole deployment's; the others are the answering process's own. A \
         histogram's series are `NAME_bucket` (by `le`), `NAME_sum` and `NAME_count`.\n\n",
    );
    out.push_str("| Series | Type | Labels | Meaning |\n|---|---|---|---|\n");
    for family in FAMILIES {
        let labels = match (family.labels, family.kind) {
            ([], Kind::Histogram) => "`le`".to_owned(),
            ([], _) => "—".to_owned(),
            (labels, _) => labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {labels} | {} |",
            family.name,
            family.kind.as_str(),
            cell(family.help),
        );
    }
    out
}

fn command_line(cli: &clap::Command) -> String {
    let mut cli = cli.clone();
    cli.build();
    let mut out = header(
        "Command line",
        "the command line's definitions in `src/cli/`",
    );
    let name = cli.get_name().to_owned();
    let _ = writeln!(out, "{}\n\n```\n{}\n```\n", about(&cli), usage(&cli));
    let globals: Vec<&clap::Arg> = cli
        .get_arguments()
        .filter(|a| shown(a) && a.is_global_set())
        .collect();
    if !globals.is_empty() {
        out.push_str("Options every command takes:\n\n");
        arguments(&mut out, &globals);
        out.push('\n');
    }
    out.push_str("Commands:\n\n");
    for sub in commands(&cli) {
        let path = format!("{name} {}", sub.0.join(" "));
        let _ = writeln!(out, "- [`{path}`](#{})", path.replace(' ', "-"));
    }
    for (path, sub) in commands(&cli) {
        let _ = writeln!(
            out,
            "\n## {name} {}\n\n{}\n\n```\n{}\n```",
            path.join(" "),
            about(sub),
            usage(sub)
        );
        let args: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| shown(a) && !a.is_global_set())
            .collect();
        if !args.is_empty() {
            out.push('\n');
            arguments(&mut out, &args);
        }
    }
    out
}

/// Every command below `cmd` that a person may type, depth first, with its path of names;
/// hidden ones and clap's own `help` left out.
fn commands(cmd: &clap::Command) -> Vec<(Vec<&str>, &clap::Command)> {
    let mut found = Vec::new();
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        found.push((vec![sub.get_name()], sub));
        for (mut path, below) in commands(sub) {
            path.insert(0, sub.get_name());
            found.push((path, below));
        }
    }
    found
}

/// Whether an argument belongs in the reference: not hidden, not clap's own help and
/// version flags.
fn shown(arg: &clap::Arg) -> bool {
    !arg.is_hide_set() && !matches!(arg.get_id().as_str(), "help" | "version")
}

/// A command's description, paragraphs kept.
fn about(cmd: &clap::Command) -> String {
    cmd.get_long_about()
        .or(cmd.get_about())
        .map(|text| text.to_string().trim().to_owned())
        .unwrap_or_default()
}

/// The usage line as `--help` prints it, without its `Usage: ` label.
fn usage(cmd: &clap::Command) -> String {
    let text = cmd.clone().render_usage().to_string();
    text.trim()
        .strip_prefix("Usage: ")
        .unwrap_or(text.trim())
        .to_owned()
}

/// A table of arguments: how each is written, its values and default, and what it is for.
fn arguments(out: &mut String, args: &[&clap::Arg]) {
    out.push_str("| Argument | Values | Default | Meaning |\n|---|---|---|---|\n");
    for arg in args {
        let takes_value = arg.get_action().takes_values();
        let value_name = arg
            .get_value_names()
            .map(|names| names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap_or_else(|| vec![arg.get_id().as_str().to_ascii_uppercase()])
            .join(" ");
        let written = if arg.is_positional() {
            if arg.is_last_set() {
                format!("`-- {value_name}…`")
            } else {
                format!("`{value_name}`")
            }
        } else {
            let mut forms = Vec::new();
            if let Some(short) = arg.get_short() {
                forms.push(format!("`-{short}`"));
            }
            if let Some(long) = arg.get_long() {
                forms.push(format!("`--{long}`"));
            }
            forms.join(", ")
        };
        let values =
            if !takes_value || (arg.is_positional() && arg.get_possible_values().is_empty()) {
                "—".to_owned()
            } else {
                let possible: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                    .map(|v| format!("`{}`", v.get_name()))
                    .collect();
                if possible.is_empty() {
                    format!("`{value_name}`")
                } else {
                    possible.join(", ")
                }
            };
        let default = if takes_value && !arg.get_default_values().is_empty() {
            let values: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            format!("`{}`", values.join(" "))
        } else {
            "—".to_owned()
        };
        let mut meaning = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| cell(&h.to_string()))
            .unwrap_or_default();
        if arg.is_required_set() {
            meaning = format!("Required. {meaning}").trim_end().to_owned();
        }
        if meaning.is_empty() {
            meaning = "—".to_owned();
        }
        let _ = writeln!(out, "| {written} | {values} | {default} | {meaning} |");
    }
}
