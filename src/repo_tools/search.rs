//! `search` and `list_files`, which say how many there are and where before they show
//! any: a scout that sees 80 of 39,531 matches must know it, and where the rest are, to
//! narrow.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use regex::{Regex, RegexBuilder};

use super::generated::Generated;
use super::glob::PathGlob;
use super::read::clip_line;
use super::repo::RepoTools;
use super::source::{Found, Reader};
use super::tags::{self, Lang};
use super::walk::{self, thousands};

/// Matching lines shown at most, and per file (so one file cannot fill the answer).
pub const MAX_MATCHES: usize = 50;
const PER_FILE_SHOWN: usize = 3;
/// Paths `list_files` shows at most.
pub const MAX_LISTED: usize = 200;
/// Files larger than this are not searched (generated or data).
const MAX_SEARCH_BYTES: u64 = 1 << 20;
/// Bytes one search reads at most; past it, the files left are counted as not searched.
const SEARCH_TOTAL_BYTES: u64 = 512 << 20;
/// The time one search takes at most; files past it are counted, not searched.
const SEARCH_TIME: Duration = Duration::from_secs(20);
/// Matching lines remembered to choose from, for the repository's own files and for
/// generated or vendored ones; past it they are only counted.
const CANDIDATES_OWN: usize = 20_000;
const CANDIDATES_GENERATED: usize = 5_000;
/// Folders and files named in a breakdown.
const TOP_FOLDERS: usize = 8;
const TOP_FILES: usize = 10;

/// How `search` reads its pattern.
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    /// Only where the pattern is a whole word (`reserv` does not match `preserve`).
    pub whole_word: bool,
    /// Case matters; by default it does not.
    pub case_sensitive: bool,
    /// Only paths matching this glob (`*.py`, `src/**/test_*.rs`).
    pub glob: Option<String>,
}

struct Hit {
    file: usize,
    line: usize,
    text: String,
    definition: bool,
}

/// What one search found and what it passed over, counted as it reads the files.
#[derive(Default)]
struct Scan {
    /// Matching lines per file (its index in the walk), for each file with any.
    per_file: Vec<(usize, usize)>,
    /// The matching lines remembered to choose the shown ones from.
    hits: Vec<Hit>,
    /// Matching lines in all, shown or not.
    total: usize,
    searched: usize,
    large: usize,
    binary: usize,
    outside: usize,
    over_budget: usize,
    unreadable: usize,
    /// Files passed over once the search ran out of time.
    late: usize,
    /// Bytes read so far.
    read: u64,
    kept_own: usize,
    kept_generated: usize,
}

impl RepoTools {
    pub fn search_with(
        &self,
        pattern: &str,
        path: &str,
        options: &SearchOptions,
    ) -> Result<String, String> {
        let re = compile(pattern, options)?;
        let base = self.base(path)?;
        let walked = self.files_at(&base);
        let glob = options.glob.as_deref().map(PathGlob::new);
        let generated = Generated::new(&self.source, &walked.files);
        let mut scan = self.scan(&re, &walked, &generated, glob.as_ref());

        let searched_note = scan.searched_note(&walked);
        if scan.total == 0 {
            return Ok(format!("no matches ({searched_note})\n"));
        }
        let mut out = format!(
            "{} matching lines in {} files ({searched_note})\n",
            thousands(scan.total),
            thousands(scan.per_file.len())
        );
        let is_generated = |i: usize| generated.is_generated(&walked.files[i].rel);
        if scan.per_file.len() > PER_FILE_SHOWN {
            out.push_str(&where_they_are(
                &scan.per_file,
                &walked,
                &base,
                is_generated,
            ));
        }
        let chosen = choose_shown(&mut scan.hits, is_generated);
        out.push_str(&shown_matches(&chosen, scan.total, &walked));
        Ok(out)
    }

    /// The files a search under `base` reads: the tree's walk for a folder, the one file
    /// otherwise.
    fn files_at(&self, base: &Found) -> walk::Walk {
        if base.dir {
            return self.source.walk(base);
        }
        walk::Walk {
            files: vec![walk::Entry {
                size: self.source.size_of(base),
                path: base.path.clone(),
                rel: base.rel.clone(),
                symlink: false,
                blob: base.blob,
            }],
            ..walk::Walk::default()
        }
    }

    /// Reads every file the glob lets through, within the search's time and byte
    /// budgets, and counts and remembers its matching lines.
    fn scan(
        &self,
        re: &Regex,
        walked: &walk::Walk,
        generated: &Generated,
        glob: Option<&PathGlob>,
    ) -> Scan {
        let reader = self.source.reader();
        let deadline = Instant::now() + SEARCH_TIME;
        let mut scan = Scan::default();
        for (index, file) in walked.files.iter().enumerate() {
            if glob.is_some_and(|g| !g.matches(&file.rel)) {
                continue;
            }
            if Instant::now() > deadline {
                scan.late += 1;
                continue;
            }
            let Some(bytes) = self.read_searchable(file, &reader, &mut scan) else {
                continue;
            };
            scan.searched += 1;
            let text = String::from_utf8_lossy(&bytes);
            let own = !generated.is_generated(&file.rel);
            scan.match_lines(index, &text, Lang::of(&file.rel), own, re);
        }
        scan
    }

    /// The bytes of one file worth searching, or `None` (counted in `scan` by why) for a
    /// symlink leading out, a file too large or past the byte budget, an unreadable or a
    /// binary one.
    fn read_searchable(
        &self,
        file: &walk::Entry,
        reader: &Reader<'_>,
        scan: &mut Scan,
    ) -> Option<Vec<u8>> {
        // A committed symlink may point anywhere: search it only if it leads to a file
        // inside (and not into `.git`).
        let target = match file.symlink {
            true => match self.resolve(&file.rel) {
                Ok(found) if !found.dir => Some(found),
                _ => {
                    scan.outside += 1;
                    return None;
                }
            },
            false => None,
        };
        let size = match &target {
            Some(found) => self.source.size_of(found),
            None => file.size,
        };
        if size > MAX_SEARCH_BYTES {
            scan.large += 1;
            return None;
        }
        if scan.read + size > SEARCH_TOTAL_BYTES {
            scan.over_budget += 1;
            return None;
        }
        let read_file = match &target {
            Some(found) => reader.found(found),
            None => reader.entry(file),
        };
        let Ok((bytes, _)) = read_file else {
            scan.unreadable += 1;
            return None;
        };
        scan.read += size;
        if bytes.iter().take(8000).any(|b| *b == 0) {
            scan.binary += 1;
            return None;
        }
        Some(bytes)
    }
    pub fn list_files(&self, path: &str, pattern: Option<&str>) -> Result<String, String> {
        let base = self.base(path)?;
        let walked = self.source.walk(&base);
        let glob = pattern.map(PathGlob::new);
        let generated = Generated::new(&self.source, &walked.files);
        let matching: Vec<(&str, bool)> = walked
            .files
            .iter()
            .filter(|f| glob.as_ref().is_none_or(|g| g.matches(&f.rel)))
            .map(|f| (f.rel.as_str(), generated.is_generated(&f.rel)))
            .collect();
        if matching.is_empty() {
            return Ok(if walked.files.is_empty() {
                "no files here".into()
            } else {
                format!(
                    "no files match (of {} under this path)",
                    walked.describe_total()
                )
            });
        }
        let mut out = String::new();
        let beyond = if walked.not_kept > 0 || walked.stopped {
            format!(
                ", among the first {} in path order ({} in all)",
                thousands(walk::KEEP_FILES),
                walked.describe_total()
            )
        } else {
            String::new()
        };
        if matching.len() > MAX_LISTED {
            let _ = writeln!(out, "{} files{beyond}", thousands(matching.len()));
            let base_rel = if base.rel.is_empty() {
                String::new()
            } else {
                format!("{}/", base.rel)
            };
            out.push_str(&breakdown(
                matching
                    .iter()
                    .map(|(rel, generated)| (*rel, 1, *generated)),
                &base_rel,
                "files",
            ));
        }
        // The repository's own files before generated ones, each group in path order.
        let mut ordered = matching.clone();
        ordered.sort_by_key(|(_, generated)| *generated);
        for (rel, _) in ordered.iter().take(MAX_LISTED) {
            out.push_str(rel);
            out.push('\n');
        }
        if matching.len() > MAX_LISTED {
            let _ = writeln!(
                out,
                "… and {} more; narrow the path or pattern",
                thousands(matching.len() - MAX_LISTED)
            );
        }
        Ok(out)
    }

    fn base(&self, path: &str) -> Result<Found, String> {
        if path.trim().is_empty() || path.trim() == "." {
            Ok(self.source.root())
        } else {
            self.resolve(path)
        }
    }
}

impl Scan {
    /// Counts the lines of one file that match, and remembers a few definitions and uses
    /// of it while there is room among the candidates.
    fn match_lines(&mut self, index: usize, text: &str, lang: Option<Lang>, own: bool, re: &Regex) {
        let mut count = 0usize;
        // At most as many definitions and uses per file as can be shown.
        let (mut definitions, mut uses) = (0usize, 0usize);
        for (i, line) in text.lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            count += 1;
            let room = if own {
                self.kept_own < CANDIDATES_OWN
            } else {
                self.kept_generated < CANDIDATES_GENERATED
            };
            if room && (definitions < PER_FILE_SHOWN || uses < PER_FILE_SHOWN) {
                let definition = lang
                    .and_then(|lang| tags::definition(lang, line))
                    .is_some_and(|name| re.is_match(&name));
                let kept = if definition {
                    &mut definitions
                } else {
                    &mut uses
                };
                if *kept >= PER_FILE_SHOWN {
                    continue;
                }
                *kept += 1;
                if own {
                    self.kept_own += 1;
                } else {
                    self.kept_generated += 1;
                }
                self.hits.push(Hit {
                    file: index,
                    line: i + 1,
                    text: clip_line(line.trim()),
                    definition,
                });
            }
        }
        if count > 0 {
            self.per_file.push((index, count));
            self.total += count;
        }
    }

    /// How many files were searched and, by reason, how many were not.
    fn searched_note(&self, walked: &walk::Walk) -> String {
        let mut left_out = Vec::new();
        if self.large > 0 {
            left_out.push(format!("{} larger than 1 MiB", self.large));
        }
        if self.binary > 0 {
            left_out.push(format!("{} binary", self.binary));
        }
        if self.outside > 0 {
            left_out.push(format!("{} symlinks to no file inside", self.outside));
        }
        if self.unreadable > 0 {
            left_out.push(format!("{} unreadable", self.unreadable));
        }
        if self.over_budget > 0 {
            left_out.push(format!(
                "{} past the {} MiB one search reads",
                thousands(self.over_budget),
                SEARCH_TOTAL_BYTES >> 20
            ));
        }
        if self.late > 0 {
            left_out.push(format!(
                "{} past the {} seconds one search takes",
                thousands(self.late),
                SEARCH_TIME.as_secs()
            ));
        }
        if walked.not_kept > 0 {
            left_out.push(format!(
                "{} past the first {} the walk keeps",
                thousands(walked.not_kept),
                thousands(walk::KEEP_FILES)
            ));
        }
        if walked.stopped {
            left_out.push("the rest of a tree too large to count".to_owned());
        }
        if left_out.is_empty() {
            format!("searched {} files", thousands(self.searched))
        } else {
            format!(
                "searched {} files; not searched: {}",
                thousands(self.searched),
                left_out.join(", ")
            )
        }
    }
}

/// Where the matches are: counts by folder, then the files with the most.
fn where_they_are(
    per_file: &[(usize, usize)],
    walked: &walk::Walk,
    base: &Found,
    is_generated: impl Fn(usize) -> bool,
) -> String {
    let base_rel = if base.rel.is_empty() {
        String::new()
    } else {
        format!("{}/", base.rel)
    };
    let mut out = breakdown(
        per_file
            .iter()
            .map(|(i, count)| (walked.files[*i].rel.as_str(), *count, is_generated(*i))),
        &base_rel,
        "matching lines",
    );
    let mut busiest = per_file.to_vec();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let files: Vec<String> = busiest
        .iter()
        .take(TOP_FILES)
        .map(|(i, count)| format!("{} {}", walked.files[*i].rel, thousands(*count)))
        .collect();
    let _ = writeln!(out, "Most matches: {}", files.join(" · "));
    out
}

/// Which lines to show: the repository's own files before generated or vendored ones,
/// definitions before uses within each, a few per file so the answer spans files, then
/// path order.
fn choose_shown(hits: &mut [Hit], is_generated: impl Fn(usize) -> bool) -> Vec<&Hit> {
    let mut shown_per_file: HashMap<usize, usize> = HashMap::new();
    hits.sort_by_key(|h| (is_generated(h.file), !h.definition, h.file, h.line));
    let mut chosen = Vec::new();
    for hit in hits.iter() {
        let n = shown_per_file.entry(hit.file).or_default();
        if *n >= PER_FILE_SHOWN {
            continue;
        }
        *n += 1;
        chosen.push(hit);
        if chosen.len() == MAX_MATCHES {
            break;
        }
    }
    chosen
}

/// The chosen lines, marked as definitions and followed by how many were left out when
/// not all are shown.
fn shown_matches(chosen: &[&Hit], total: usize, walked: &walk::Walk) -> String {
    let mut out = String::new();
    if total > chosen.len() {
        out.push_str("Matches, the repository's own and definitions first:\n");
    }
    for hit in chosen {
        let _ = writeln!(
            out,
            "{}:{}: {}{}",
            walked.files[hit.file].rel,
            hit.line,
            hit.text,
            if hit.definition && total > chosen.len() {
                "  (definition)"
            } else {
                ""
            }
        );
    }
    if total > chosen.len() {
        let _ = writeln!(
            out,
            "… {} more matching lines not shown; narrow with path, glob, whole_word or case_sensitive",
            thousands(total - chosen.len())
        );
    }
    out
}

fn compile(pattern: &str, options: &SearchOptions) -> Result<Regex, String> {
    // ASCII word boundaries for an ASCII pattern: Unicode ones on non-ASCII text push the
    // regex engine onto its slowest path. A pattern with other letters keeps Unicode's.
    let pattern = if options.whole_word && pattern.is_ascii() {
        format!(r"(?-u:\b)(?:{pattern})(?-u:\b)")
    } else if options.whole_word {
        format!(r"\b(?:{pattern})\b")
    } else {
        pattern.to_owned()
    };
    RegexBuilder::new(&pattern)
        .case_insensitive(!options.case_sensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("not a valid regular expression: {e}"))
}

/// `By folder: a/ 120 (generated or vendored) · b/ 30`, one level below `base`, and a
/// level deeper into a folder holding most of them.
fn breakdown<'a>(
    items: impl Iterator<Item = (&'a str, usize, bool)>,
    base: &str,
    unit: &str,
) -> String {
    let mut top: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut second: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut all = 0usize;
    for (rel, count, generated) in items {
        let inside = rel.strip_prefix(base).unwrap_or(rel);
        let mut parts = inside.split('/');
        let first = parts.next().unwrap_or_default();
        let key = match inside.contains('/') {
            true => format!("{base}{first}/"),
            false => format!("{base}(files here)"),
        };
        let entry = top.entry(key.clone()).or_default();
        entry.0 += count;
        if generated {
            entry.1 += count;
        }
        all += count;
        let rest: Vec<&str> = parts.collect();
        if rest.len() > 1 {
            *second
                .entry(key)
                .or_default()
                .entry(format!("{base}{first}/{}/", rest[0]))
                .or_default() += count;
        }
    }
    let mut sorted: Vec<(String, (usize, usize))> = top.into_iter().collect();
    sorted.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let items: Vec<String> = sorted
        .iter()
        .take(TOP_FOLDERS)
        .map(|(folder, (count, generated))| {
            if generated * 2 > *count {
                format!("{folder} {} (generated or vendored)", thousands(*count))
            } else {
                format!("{folder} {}", thousands(*count))
            }
        })
        .collect();
    let mut out = format!("By folder ({unit}): {}", items.join(" · "));
    if sorted.len() > TOP_FOLDERS {
        let _ = write!(out, " · {} more folders", sorted.len() - TOP_FOLDERS);
    }
    out.push('\n');
    if let Some((biggest, (count, _))) = sorted.first()
        && count * 2 > all
        && let Some(inner) = second.get(biggest)
        && inner.len() > 1
    {
        let mut inner: Vec<(&String, &usize)> = inner.iter().collect();
        inner.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let items: Vec<String> = inner
            .iter()
            .take(TOP_FOLDERS)
            .map(|(folder, count)| format!("{folder} {}", thousands(**count)))
            .collect();
        let _ = writeln!(out, "Within {biggest}: {}", items.join(" · "));
    }
    out
}
