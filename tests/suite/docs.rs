//! The documentation holds: the reference pages under `docs/reference/` are what the code
//! writes today, `/metrics` announces exactly the families the metrics reference is
//! written from, and every relative link and anchor in `README.md`, `CONTRIBUTING.md` and
//! `docs/` leads to a file and a heading that exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use clap::CommandFactory;
use planwright::docs::{self, REGENERATE};
use planwright::metrics::{FAMILIES, Kind, SandboxRunEnd};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use regex::Regex;

use crate::support::TestDb;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_reference_pages_are_what_the_code_writes() {
    let pages = docs::pages(&planwright::cli::Cli::command());
    let stale = docs::stale(repository(), &pages);
    let mut report = String::new();
    for page in pages.iter().filter(|p| stale.contains(&p.path)) {
        let committed = std::fs::read_to_string(repository().join(page.path)).unwrap_or_default();
        let first = committed
            .lines()
            .zip(page.text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(page.text.lines().count()));
        report.push_str(&format!(
            "\n{}:{}: committed {:?}\n    the code writes {:?}",
            page.path,
            first + 1,
            committed.lines().nth(first).unwrap_or("(the end)"),
            page.text.lines().nth(first).unwrap_or("(the end)"),
        ));
    }
    assert!(
        stale.is_empty(),
        "The reference pages differ from what the code writes; run `{REGENERATE}` from the \
         repository's top folder and commit them:{report}"
    );
}

/// A sample's name and the names of its labels.
type Sample = (String, Vec<String>);

/// The families the exposition announces, with their types, and every sample.
fn exposition(text: &str) -> (Vec<(String, String)>, Vec<Sample>) {
    let mut families = Vec::new();
    let mut samples = Vec::new();
    let label = Regex::new(r#"([a-z_]+)="(?:[^"\\]|\\.)*""#).unwrap();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.push((name.to_owned(), kind.to_owned()));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap();
            let labels = match line[end..].strip_prefix('{') {
                Some(rest) => label
                    .captures_iter(&rest[..rest.rfind('}').unwrap()])
                    .map(|c| c[1].to_owned())
                    .collect(),
                None => Vec::new(),
            };
            samples.push((line[..end].to_owned(), labels));
        }
    }
    (families, samples)
}

#[tokio::test]
async fn metrics_announce_exactly_the_listed_families_with_their_labels() {
    let db = TestDb::new().await;
    // Give the process's own families samples, so that their labels are seen.
    planwright::metrics::record_sandbox_run(SandboxRunEnd::Ok, Duration::from_millis(3));
    planwright::metrics::record_forge_request("github", "GET /repos/{o}/{r}", "200");
    planwright::metrics::record_forge_request_held("github");
    planwright::metrics::record_image_pull(false, 10);
    planwright::metrics::record_setup_cache(true, 10);
    let text = planwright::server::metrics::render(&db.db).await.unwrap();
    let (announced, samples) = exposition(&text);
    let listed: Vec<(String, String)> = FAMILIES
        .iter()
        .map(|f| (f.name.to_owned(), f.kind.as_str().to_owned()))
        .collect();
    assert_eq!(
        announced, listed,
        "/metrics must announce the families of metrics::FAMILIES, in its order"
    );
    let mut seen = BTreeSet::new();
    for (name, labels) in &samples {
        let family = FAMILIES
            .iter()
            .find(|f| {
                f.name == name
                    || (f.kind == Kind::Histogram
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| name.strip_suffix(s) == Some(f.name)))
            })
            .unwrap_or_else(|| panic!("the sample {name} belongs to no listed family"));
        seen.insert(family.name);
        for label in labels {
            let histogram_bound = label == "le" && name.ends_with("_bucket");
            assert!(
                histogram_bound || family.labels.contains(&label.as_str()),
                "{name} carries the label `{label}`, which metrics::FAMILIES does not list for it"
            );
        }
    }
    for family in FAMILIES.iter().filter(|f| !f.labels.is_empty()) {
        if seen.contains(family.name) {
            let labelled = samples.iter().any(|(name, labels)| {
                name == family.name
                    && labels
                        .iter()
                        .map(String::as_str)
                        .eq(family.labels.iter().copied())
            });
            assert!(
                labelled,
                "{} has samples without exactly the labels {:?}",
                family.name, family.labels
            );
        }
    }
}

/// What one Markdown file links to and the anchors it defines.
struct Document {
    /// Each link's line and target, as written.
    links: Vec<(usize, String)>,
    /// Heading slugs as GitHub makes them, and the ids of `<a id>` and `<a name>`.
    anchors: BTreeSet<String>,
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, punctuation
/// dropped (letters, digits, `-` and `_` kept).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Reads the links and anchors of a Markdown text: inline, reference-style and
/// autolinks, images, and `href`/`src` in HTML; none of what code spans and blocks hold.
fn read_document(text: &str) -> Document {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let html_anchor = Regex::new(r#"<a\s[^>]*\b(?:id|name)\s*=\s*"([^"]*)""#).unwrap();
    let html_link = Regex::new(r#"\b(?:href|src)\s*=\s*"([^"]*)""#).unwrap();
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut slugs: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push((line_of(range.start), dest_url.to_string()));
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                // GitHub numbers repeated headings: `x`, `x-1`, `x-2`.
                let n = slugs.entry(base.clone()).or_default();
                let mut id = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                while anchors.contains(&id) {
                    *n += 1;
                    id = format!("{base}-{n}");
                }
                *n += 1;
                anchors.insert(id);
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Html(html) | Event::InlineHtml(html) => {
                for c in html_anchor.captures_iter(&html) {
                    anchors.insert(c[1].to_owned());
                }
                for c in html_link.captures_iter(&html) {
                    links.push((line_of(range.start), c[1].to_owned()));
                }
            }
            _ => {}
        }
    }
    Document { links, anchors }
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above its start.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

fn is_markdown(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "md" || e == "markdown")
}

/// Every broken relative link and anchor of `files` (paths under `root`), one line each:
/// `file:line: what is wrong`.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let scheme = Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*:").unwrap();
    let mut documents: BTreeMap<PathBuf, Document> = BTreeMap::new();
    let mut read = |path: &Path| -> Option<BTreeSet<String>> {
        if !documents.contains_key(path) {
            let text = std::fs::read_to_string(root.join(path)).ok()?;
            documents.insert(path.to_owned(), read_document(&text));
        }
        Some(documents[path].anchors.clone())
    };
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for (line, target) in read_document(&text).links {
            let at = format!("{}:{line}", file.display());
            if target.is_empty() {
                problems.push(format!("{at}: a link with no target"));
                continue;
            }
            if scheme.is_match(&target) || target.starts_with("//") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let path = path.split('?').next().unwrap_or_default();
            let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
            let linked = if path.is_empty() {
                Some(file.clone())
            } else if let Some(from_top) = path.strip_prefix('/') {
                normalise(Path::new(from_top))
            } else {
                normalise(&file.parent().unwrap_or(Path::new("")).join(path.as_ref()))
            };
            let Some(linked) = linked else {
                problems.push(format!("{at}: `{target}` leads out of the repository"));
                continue;
            };
            if !root.join(&linked).exists() {
                problems.push(format!(
                    "{at}: `{target}`: there is no {}",
                    linked.display()
                ));
                continue;
            }
            if fragment.is_empty() || !is_markdown(&linked) {
                continue;
            }
            let fragment = percent_encoding::percent_decode_str(fragment).decode_utf8_lossy();
            let anchors = read(&linked).unwrap_or_default();
            if !anchors.contains(fragment.as_ref()) {
                problems.push(format!(
                    "{at}: `{target}`: {} has no heading or anchor `{fragment}`",
                    linked.display()
                ));
            }
        }
    }
    problems
}

/// The Markdown files under `dir` (relative to `root`), in order.
fn markdown_under(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return found;
    };
    for entry in entries {
        let path = dir.join(entry.unwrap().file_name());
        if root.join(&path).is_dir() {
            found.extend(markdown_under(root, &path));
        } else if is_markdown(&path) {
            found.push(path);
        }
    }
    found.sort();
    found
}

#[test]
fn relative_links_and_anchors_lead_somewhere() {
    let root = repository();
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    files.extend(markdown_under(root, Path::new("docs")));
    for file in &files {
        assert!(root.join(file).is_file(), "{} is missing", file.display());
    }
    let broken = broken_links(root, &files);
    assert!(
        broken.is_empty(),
        "Links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_reports_each_broken_link_and_anchor_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs/guide")).unwrap();
    std::fs::write(root.join("docs/pic.png"), b"png").unwrap();
    std::fs::write(
        root.join("docs/guide/other.md"),
        "# Other page\n\n## Set-up: the `serve` command!\n\n## Twice\n\n## Twice\n\n\
         <a id=\"custom-spot\"></a>\n\nText.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Top\n\
         \n\
         [fine](docs/guide/other.md) and [gone](docs/missing.md)\n\
         [heading](docs/guide/other.md#set-up-the-serve-command) [bad](docs/guide/other.md#setup)\n\
         [second](docs/guide/other.md#twice-1) [third](docs/guide/other.md#twice-2)\n\
         [custom](docs/guide/other.md#custom-spot) [here](#top) [nothere](#bottom)\n\
         ![picture](docs/pic.png) ![lost picture](docs/lost.png)\n\
         [by reference][ref] and [web](https://example.com/x.md) <https://example.com>\n\
         `[in a code span](nowhere.md)`\n\
         \n\
         ```\n\
         [in a code block](nowhere.md)\n\
         ```\n\
         \n\
         <img src=\"docs/none.png\"> [up](../outside.md) [folder](docs/guide)\n\
         \n\
         [ref]: docs/guide/other.md#nope\n",
    )
    .unwrap();
    let problems = broken_links(root, &[PathBuf::from("README.md")]);
    assert_eq!(
        problems,
        [
            "README.md:3: `docs/missing.md`: there is no docs/missing.md",
            "README.md:4: `docs/guide/other.md#setup`: docs/guide/other.md has no heading or anchor `setup`",
            "README.md:5: `docs/guide/other.md#twice-2`: docs/guide/other.md has no heading or anchor `twice-2`",
            "README.md:6: `#bottom`: README.md has no heading or anchor `bottom`",
            "README.md:7: `docs/lost.png`: there is no docs/lost.png",
            "README.md:8: `docs/guide/other.md#nope`: docs/guide/other.md has no heading or anchor `nope`",
            "README.md:15: `docs/none.png`: there is no docs/none.png",
            "README.md:15: `../outside.md` leads out of the repository",
        ]
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Quick start"), "quick-start");
    assert_eq!(
        slug("Build contract v1 · d8dfdb6b14bf"),
        "build-contract-v1--d8dfdb6b14bf"
    );
    assert_eq!(
        slug("What `solve` does, and why?"),
        "what-solve-does-and-why"
    );
    assert_eq!(slug("snake_case and-dash"), "snake_case-and-dash");
}
