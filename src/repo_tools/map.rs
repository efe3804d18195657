//! The repository map: the files and definitions most relevant to a question, ranked and
//! fitted to a token budget, so that its size does not depend on the repository's.
//!
//! Built in two steps. The index (per commit, cached) reads every source file once for
//! its definitions and the identifiers it uses, and links a file that uses a name to the
//! files that define it. The ranking (per question, cached) runs a PageRank over those
//! links, personalised towards what the question names (paths, folders, identifiers) and
//! what changed recently; generated and vendored files rank last. No model is asked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use super::generated::Generated;
use super::source::{Reader, Source};
use super::tags::{self, Def, Lang};
use super::walk::{self, thousands};

pub use crate::config::{MAP_TOKENS as DEFAULT_TOKENS, MAP_TOKENS_MIN as MIN_TOKENS};
/// Source files read for definitions at most, and their bytes: past either, files are
/// on the map by path only, and the map says how many.
const PARSE_FILES: usize = 60_000;
const PARSE_BYTES: u64 = 192 << 20;
/// A file larger than this is not read for definitions (generated or data).
const PARSE_FILE_BYTES: u64 = 512 << 10;
/// Distinct identifiers kept per file, the most used first.
const REFS_PER_FILE: usize = 400;
/// Definitions kept per file: a file of a hundred thousand one-line functions is not
/// worth more of the map, or of memory, than this.
const DEFS_PER_FILE: usize = 300;
/// Links between files the ranking follows at most (each is 24 bytes, walked 25 times).
const EDGES_MAX: usize = 4_000_000;
/// Words and paths of a question looked for at most.
const MENTIONED_WORDS: usize = 300;
const MENTIONED_PATHS: usize = 100;
/// A name defined in more files than this links nothing: it is too common to say which.
const DEFINED_IN_MAX: usize = 40;
/// Definitions shown per file at most.
const DEFS_SHOWN: usize = 8;
/// Commits looked at for recent changes, newest first.
const RECENT_COMMITS: usize = 50;
/// Indexes kept in memory (one per commit), and rendered maps.
const INDEXES_KEPT: usize = 4;
const MAPS_KEPT: usize = 64;

/// The token count the budget is measured in: four bytes to a token, the usual estimate
/// for English and code.
pub fn tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

struct FileNode {
    rel: String,
    generated: bool,
    defs: Vec<Def>,
    /// `(identifier, uses)`, of identifiers some other file defines.
    refs: Vec<(u32, u32)>,
}

/// Everything about a commit's files that does not depend on the question.
pub struct Index {
    files: Vec<FileNode>,
    /// The walk's count, which may be more than `files` holds.
    total: String,
    total_files: usize,
    generated: usize,
    /// Source files not read for definitions (limits, binary, unreadable).
    unparsed: usize,
    names: Vec<String>,
    ids: HashMap<String, u32>,
    defined_in: Vec<Vec<u32>>,
    /// File → how recently it changed (1 for the newest commit, falling with age).
    recent: HashMap<u32, f64>,
}

impl Index {
    pub fn build(source: &Source) -> Index {
        let walked = source.walk(&source.root());
        let generated = Generated::new(source, &walked.files);
        let mut files: Vec<FileNode> = walked
            .files
            .iter()
            .map(|f| FileNode {
                rel: f.rel.clone(),
                generated: generated.is_generated(&f.rel),
                defs: Vec::new(),
                refs: Vec::new(),
            })
            .collect();
        let generated_count = files.iter().filter(|f| f.generated).count();

        // What to read: source files, the repository's own before generated ones, in path
        // order, within the limits.
        let mut candidates: Vec<(usize, Lang)> = walked
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.symlink)
            .filter_map(|(i, f)| Lang::of(&f.rel).map(|lang| (i, lang)))
            .collect();
        candidates.sort_by_key(|(i, _)| files[*i].generated);
        let mut chosen = Vec::new();
        let mut bytes = 0u64;
        let mut unparsed = 0usize;
        for (i, lang) in candidates {
            let size = walked.files[i].size;
            if size > PARSE_FILE_BYTES || chosen.len() >= PARSE_FILES || bytes + size > PARSE_BYTES
            {
                unparsed += 1;
                continue;
            }
            bytes += size;
            chosen.push((i, lang));
        }

        let parsed = parse_all(source, &walked.files, &chosen);
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut intern = |name: &str| -> u32 {
            if let Some(id) = ids.get(name) {
                return *id;
            }
            let id = names.len() as u32;
            names.push(name.to_owned());
            ids.insert(name.to_owned(), id);
            id
        };
        let mut defined_in: Vec<Vec<u32>> = Vec::new();
        let mut uses: Vec<(usize, Vec<(String, u32)>)> = Vec::with_capacity(parsed.len());
        for parsed in parsed {
            let Some((i, defs, used)) = parsed else {
                unparsed += 1;
                continue;
            };
            for def in &defs {
                let id = intern(&def.name) as usize;
                if defined_in.len() <= id {
                    defined_in.resize(id + 1, Vec::new());
                }
                if defined_in[id].last() != Some(&(i as u32)) {
                    defined_in[id].push(i as u32);
                }
            }
            files[i].defs = defs;
            uses.push((i, used));
        }
        for (i, used) in uses {
            files[i].refs = used
                .into_iter()
                .filter_map(|(name, count)| {
                    let id = *ids.get(&name)?;
                    let defined = defined_in.get(id as usize)?;
                    (defined.iter().any(|f| *f as usize != i)).then_some((id, count))
                })
                .collect();
        }
        let recent = recent_changes(source, &files);
        Index {
            total: walked.describe_total(),
            total_files: walked.total(),
            files,
            generated: generated_count,
            unparsed,
            names,
            ids,
            defined_in,
            recent,
        }
    }

    /// The map for `question` within `budget` tokens.
    pub fn render(&self, question: &str, budget: usize) -> String {
        let budget = budget.max(MIN_TOKENS);
        let (ranked, links_cut) = self.rank(question);
        let mut out = String::new();
        let _ = write!(out, "{}", self.total);
        if self.generated > 0 {
            let _ = write!(
                out,
                "; {} generated or vendored (ranked last)",
                thousands(self.generated)
            );
        }
        if self.unparsed > 0 {
            let _ = write!(
                out,
                "; {} source files not read for definitions (too large, past the limits, binary or unreadable)",
                thousands(self.unparsed)
            );
        }
        if links_cut {
            let _ = write!(
                out,
                "; ranked on the first {} links between files",
                thousands(EDGES_MAX)
            );
        }
        out.push_str(".\nMost relevant first, with line numbers of definitions:\n");
        // A tenth of the budget is kept for saying where everything else is.
        let body_budget = budget - budget / 10 - tokens(&out);
        let mut shown: HashSet<usize> = HashSet::new();
        let mut used = 0usize;
        // Past this many entries in a row that do not fit, nothing further down will.
        let mut misses = 0;
        for (file, defs) in &ranked {
            if misses > 20 || used + 3 > body_budget {
                break;
            }
            let node = &self.files[*file];
            let block = |take: usize| {
                let mut block = format!("{}\n", node.rel);
                let mut chosen: Vec<&&Def> = defs.iter().take(take).collect();
                chosen.sort_by_key(|d| d.line);
                for def in chosen {
                    let _ = writeln!(block, "{:>6}│{}", def.line, def.text);
                }
                block
            };
            // Fewer definitions rather than none: the file's most relevant come first.
            let mut take = defs.len();
            let mut text = block(take);
            while used + tokens(&text) > body_budget && take > 1 {
                take -= 1;
                text = block(take);
            }
            if used + tokens(&text) > body_budget {
                misses += 1;
                continue;
            }
            misses = 0;
            used += tokens(&text);
            out.push_str(&text);
            shown.insert(*file);
        }
        let not_shown = self.total_files.saturating_sub(shown.len());
        if not_shown > 0 {
            let tail_budget = budget.saturating_sub(tokens(&out));
            out.push_str(&self.elsewhere(&shown, not_shown, tail_budget));
        }
        out
    }

    /// Where the files the map did not show are, by folder, biggest first.
    fn elsewhere(&self, shown: &HashSet<usize>, not_shown: usize, budget: usize) -> String {
        let mut folders: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (i, f) in self.files.iter().enumerate() {
            if shown.contains(&i) {
                continue;
            }
            let folder = match f.rel.split_once('/') {
                Some((top, _)) => format!("{top}/"),
                None => "(top level)".to_owned(),
            };
            let entry = folders.entry(folder).or_default();
            entry.0 += 1;
            if f.generated {
                entry.1 += 1;
            }
        }
        let mut folders: Vec<(String, (usize, usize))> = folders.into_iter().collect();
        // The repository's own folders first, then by size.
        folders.sort_by(|a, b| {
            let generated = |f: &(usize, usize)| f.1 * 2 > f.0;
            generated(&a.1)
                .cmp(&generated(&b.1))
                .then(b.1.0.cmp(&a.1.0))
                .then(a.0.cmp(&b.0))
        });
        let mut out = format!("Not shown: {} files, in:", thousands(not_shown));
        let mut listed = 0usize;
        for (folder, (count, generated)) in &folders {
            let item = if generated * 2 > *count {
                format!(" {folder} {} (generated or vendored);", thousands(*count))
            } else {
                format!(" {folder} {};", thousands(*count))
            };
            if tokens(&out) + tokens(&item) + 12 > budget {
                break;
            }
            out.push_str(&item);
            listed += 1;
        }
        if listed < folders.len() {
            let _ = write!(out, " and {} more folders.", folders.len() - listed);
        } else if out.ends_with(';') {
            out.pop();
            out.push('.');
        }
        out.push_str("\nUse list_files and search to look further.\n");
        out
    }

    /// Files in order of relevance, each with the definitions worth showing, the most
    /// relevant first; and whether links past `EDGES_MAX` were left out.
    fn rank(&self, question: &str) -> (Vec<(usize, Vec<&Def>)>, bool) {
        if self.files.is_empty() {
            return (Vec::new(), false);
        }
        let mentions = Mentions::read(question);
        let mentioned_ids = self.mentioned_ids(&mentions);
        // Where the walk starts: what the question names, and what changed lately.
        let mut personal = self.named_weights(&mentions, &mentioned_ids);
        // Generated and vendored files are shown only when the question names them or
        // what they define; the rest of them are counted by folder at the end.
        let named: Vec<bool> = personal.iter().map(|p| *p > 0.0).collect();
        self.add_folders_and_recent(&mut personal, &mentions);
        self.normalise_start(&mut personal);
        let (edges, links_cut) = self.links(&mentioned_ids);
        let ranking = Ranking::run(&personal, edges);
        let ranked = self.choose_definitions(&ranking, &mentioned_ids, &named);
        (ranked, links_cut)
    }

    /// The names the question uses that are defined in few enough files to say which.
    fn mentioned_ids(&self, mentions: &Mentions) -> HashSet<u32> {
        mentions
            .words
            .iter()
            .filter_map(|w| self.ids.get(w.as_str()).copied())
            .filter(|id| {
                let d = self.defined_in.get(*id as usize).map_or(0, Vec::len);
                d > 0 && d <= DEFINED_IN_MAX
            })
            .collect()
    }

    /// Each file's weight from what the question names: the file itself, or the names it
    /// defines.
    fn named_weights(&self, mentions: &Mentions, mentioned_ids: &HashSet<u32>) -> Vec<f64> {
        let mut personal = vec![0f64; self.files.len()];
        // A file is named by its path or by any tail of it (`stock.py`, `inventory/stock.py`).
        for (i, f) in self.files.iter().enumerate() {
            let named = mentions.paths.contains(f.rel.as_str())
                || f.rel
                    .match_indices('/')
                    .any(|(at, _)| mentions.paths.contains(&f.rel[at + 1..]));
            if named {
                personal[i] += 10.0;
            }
        }
        for id in mentioned_ids {
            let defined = &self.defined_in[*id as usize];
            for f in defined {
                personal[*f as usize] += 5.0 / defined.len() as f64;
            }
        }
        personal
    }

    /// Adds the weight of the folders the question names and of the files changed lately.
    fn add_folders_and_recent(&self, personal: &mut [f64], mentions: &Mentions) {
        // A folder named by a word of the question (`inventory`), when the name is rare
        // enough to say which folder: `tests` in every package says nothing.
        let mut folders: HashMap<&str, HashSet<&str>> = HashMap::new();
        for f in &self.files {
            let mut end = 0;
            for part in f
                .rel
                .split('/')
                .collect::<Vec<_>>()
                .iter()
                .rev()
                .skip(1)
                .rev()
            {
                end += part.len() + 1;
                if part.len() >= 4 && mentions.words.contains(*part) {
                    folders.entry(part).or_default().insert(&f.rel[..end]);
                }
            }
        }
        let mut folder_files: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            for (name, paths) in &folders {
                if paths.len() <= 3 && paths.iter().any(|p| f.rel.starts_with(p)) {
                    folder_files.entry(name).or_default().push(i);
                }
            }
        }
        for members in folder_files.values() {
            for i in members {
                personal[*i] += 3.0 / members.len() as f64;
            }
        }
        for (file, weight) in &self.recent {
            personal[*file as usize] += weight;
        }
    }

    /// Damps generated files and makes the weights sum to 1; with nothing named, the
    /// repository's own files share it evenly.
    fn normalise_start(&self, personal: &mut [f64]) {
        let n = self.files.len();
        for (i, f) in self.files.iter().enumerate() {
            if f.generated {
                personal[i] *= 0.01;
            }
        }
        let sum: f64 = personal.iter().sum();
        if sum <= 0.0 {
            let own = self.files.iter().filter(|f| !f.generated).count().max(1) as f64;
            for (i, f) in self.files.iter().enumerate() {
                personal[i] = if f.generated {
                    0.01 / n as f64
                } else {
                    1.0 / own
                };
            }
        } else {
            personal.iter_mut().for_each(|p| *p /= sum);
        }
    }

    /// The links: a file using a name points at the files defining it, as
    /// `(from, to, name, weight)`; and whether links past `EDGES_MAX` were left out.
    fn links(&self, mentioned_ids: &HashSet<u32>) -> (Vec<(u32, u32, u32, f64)>, bool) {
        let mut edges: Vec<(u32, u32, u32, f64)> = Vec::new();
        let mut links_cut = false;
        for (src, f) in self.files.iter().enumerate() {
            for (id, count) in &f.refs {
                let defined = &self.defined_in[*id as usize];
                if defined.len() > DEFINED_IN_MAX {
                    continue;
                }
                let name = &self.names[*id as usize];
                let mut weight = (*count as f64).sqrt();
                if mentioned_ids.contains(id) {
                    weight *= 10.0;
                }
                if name.starts_with('_') {
                    weight *= 0.1;
                }
                if defined.len() > 5 {
                    weight *= 0.1;
                }
                if name.len() >= 8 && (name.contains('_') || name.chars().any(char::is_uppercase)) {
                    weight *= 2.0;
                }
                if edges.len() >= EDGES_MAX {
                    links_cut = true;
                    break;
                }
                for dst in defined {
                    if *dst as usize == src {
                        continue;
                    }
                    let mut w = weight;
                    if self.files[*dst as usize].generated {
                        w *= 0.05;
                    }
                    edges.push((src as u32, *dst, *id, w));
                }
            }
        }
        (edges, links_cut)
    }

    /// Each file's definitions worth showing, and the files in order: the repository's
    /// own first, then by rank with what the question names leading.
    fn choose_definitions(
        &self,
        ranking: &Ranking,
        mentioned_ids: &HashSet<u32>,
        named: &[bool],
    ) -> Vec<(usize, Vec<&Def>)> {
        let rank = &ranking.rank;
        let def_rank = ranking.definition_shares();
        let mut files: Vec<(usize, f64)> = Vec::with_capacity(self.files.len());
        let mut chosen: Vec<Vec<&Def>> = Vec::with_capacity(self.files.len());
        for (i, f) in self.files.iter().enumerate() {
            if f.generated && !named[i] {
                chosen.push(Vec::new());
                continue;
            }
            let mut defs: Vec<(&Def, f64)> = f
                .defs
                .iter()
                .map(|d| {
                    let id = self.ids.get(&d.name).copied().unwrap_or(u32::MAX);
                    let mut score =
                        def_rank.get(&(i as u32, id)).copied().unwrap_or(0.0) + rank[i] * 0.05;
                    if mentioned_ids.contains(&id) {
                        score *= 10.0;
                    }
                    (d, score)
                })
                .collect();
            defs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.line.cmp(&b.0.line)));
            let best = defs.first().map_or(0.0, |d| d.1);
            let shown: Vec<&Def> = defs.into_iter().take(DEFS_SHOWN).map(|d| d.0).collect();
            // What the question names itself comes before what the walk leads to from it:
            // ranks sum to 1, so the named files lead, in their own order.
            let named_first = if named[i] { 1.0 } else { 0.0 };
            files.push((i, rank[i] + best + named_first));
            chosen.push(shown);
        }
        files.sort_by(|a, b| {
            self.files[a.0]
                .generated
                .cmp(&self.files[b.0].generated)
                .then(b.1.total_cmp(&a.1))
                .then(a.0.cmp(&b.0))
        });
        files
            .into_iter()
            .map(|(i, _)| (i, std::mem::take(&mut chosen[i])))
            .collect()
    }
}

/// A walk over the links from the starting weights (a personalised PageRank): each
/// file's rank, and the links it ran along.
struct Ranking {
    rank: Vec<f64>,
    edges: Vec<(u32, u32, u32, f64)>,
    /// Each file's links' weights summed.
    out_weight: Vec<f64>,
}

impl Ranking {
    /// Walks 25 steps from `personal`, coming back to it with probability 0.15 each step.
    fn run(personal: &[f64], edges: Vec<(u32, u32, u32, f64)>) -> Ranking {
        let n = personal.len();
        let mut out_weight = vec![0f64; n];
        for (src, _, _, w) in &edges {
            out_weight[*src as usize] += w;
        }
        let mut rank = personal.to_vec();
        for _ in 0..25 {
            let mut next = vec![0f64; n];
            let mut dangling = 0f64;
            for (i, r) in rank.iter().enumerate() {
                if out_weight[i] == 0.0 {
                    dangling += r;
                }
            }
            for (src, dst, _, w) in &edges {
                next[*dst as usize] += 0.85 * rank[*src as usize] * w / out_weight[*src as usize];
            }
            for (i, value) in next.iter_mut().enumerate() {
                *value += (0.15 + 0.85 * dangling) * personal[i];
            }
            rank = next;
        }
        Ranking {
            rank,
            edges,
            out_weight,
        }
    }

    /// Each definition's share, by `(file, name)`: the rank flowing to it along its links.
    /// (A little of its file's own is added when it is scored, so a named file's
    /// definitions show even if nothing uses them.)
    fn definition_shares(&self) -> HashMap<(u32, u32), f64> {
        let mut def_rank: HashMap<(u32, u32), f64> = HashMap::new();
        for (src, dst, id, w) in &self.edges {
            *def_rank.entry((*dst, *id)).or_default() +=
                self.rank[*src as usize] * w / self.out_weight[*src as usize];
        }
        def_rank
    }
}

/// Reads the chosen files, on every core: `(file, definitions, identifiers used)`, or
/// `None` for a file that could not be read as text.
type Parsed = Option<(usize, Vec<Def>, Vec<(String, u32)>)>;

fn parse_all(source: &Source, entries: &[walk::Entry], chosen: &[(usize, Lang)]) -> Vec<Parsed> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let chunk = chosen.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = chosen
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let reader = source.reader();
                    part.iter()
                        .map(|(i, lang)| {
                            parse_one(&reader, &entries[*i], *lang).map(|(d, u)| (*i, d, u))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// A file's definitions, and the identifiers it uses with how often.
type Tags = (Vec<Def>, Vec<(String, u32)>);

fn parse_one(reader: &Reader<'_>, entry: &walk::Entry, lang: Lang) -> Option<Tags> {
    let (bytes, _) = reader.entry(entry).ok()?;
    if bytes.iter().take(8000).any(|b| *b == 0) {
        return None;
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut defs = tags::definitions(lang, &text);
    defs.truncate(DEFS_PER_FILE);
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for word in tags::identifiers(&text) {
        *counts.entry(word).or_default() += 1;
    }
    let mut used: Vec<(String, u32)> = counts.into_iter().map(|(w, c)| (w.to_owned(), c)).collect();
    used.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    used.truncate(REFS_PER_FILE);
    Some((defs, used))
}

/// Files changed by the newest commits of the checkout's history, first parents only.
fn recent_changes(source: &Source, files: &[FileNode]) -> HashMap<u32, f64> {
    let mut out = HashMap::new();
    let Some((repo, head)) = source.history() else {
        return out;
    };
    let by_path: HashMap<&str, u32> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.rel.as_str(), i as u32))
        .collect();
    let Ok(mut commit) = repo.find_commit(head) else {
        return out;
    };
    for age in 0..RECENT_COMMITS {
        let Ok(parent) = commit.parent(0) else {
            break;
        };
        let (Ok(new), Ok(old)) = (commit.tree(), parent.tree()) else {
            break;
        };
        if let Ok(diff) = repo.diff_tree_to_tree(Some(&old), Some(&new), None) {
            // A commit touching thousands of files (a vendoring, a reformat) says little
            // about any one of them.
            if diff.deltas().len() <= 50 {
                for delta in diff.deltas() {
                    if let Some(path) = delta.new_file().path().and_then(Path::to_str)
                        && let Some(i) = by_path.get(path)
                    {
                        out.entry(*i).or_insert(1.0 / (age as f64 + 1.0));
                    }
                }
            }
        }
        commit = parent;
    }
    out
}

/// What a question names: words (identifiers, folder names) and paths.
struct Mentions {
    words: HashSet<String>,
    paths: HashSet<String>,
}

impl Mentions {
    fn read(question: &str) -> Mentions {
        static PATH: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*")
                .unwrap_or_else(|e| unreachable!("a valid pattern: {e}"))
        });
        let mut words = HashSet::new();
        for word in tags::identifiers(question) {
            if words.len() == MENTIONED_WORDS {
                break;
            }
            words.insert(word.to_owned());
        }
        let paths = PATH
            .find_iter(question)
            .map(|m| {
                m.as_str()
                    .trim_matches(|c| c == '.' || c == '-')
                    .trim_start_matches("./")
            })
            .filter(|p| {
                p.contains('/')
                    || p.rsplit_once('.')
                        .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
            })
            .take(MENTIONED_PATHS)
            .map(str::to_owned)
            .collect();
        Mentions { words, paths }
    }
}

/// Indexes by checkout and commit, and maps by (checkout, commit, question, budget), kept
/// for the process: a session's planner and scouts share them. The checkout is part of
/// the key: two repositories (a fork and its parent) share commits, and a checkout is
/// read as it is, not from git.
static INDEXES: LazyLock<Mutex<Vec<(IndexKey, IndexCell)>>> = LazyLock::new(Mutex::default);
static MAPS: LazyLock<Mutex<Vec<KeptMap>>> = LazyLock::new(Mutex::default);

type IndexKey = (PathBuf, String);
/// Filled by the first caller to ask for a checkout; the others wait for it.
type IndexCell = Arc<OnceLock<Arc<Index>>>;
/// A map under its checkout, commit, question and budget.
type KeptMap = ((IndexKey, String, usize), Arc<str>);

/// The checkout's index at `commit`, built once however many ask at the same time.
pub(super) fn index_for(commit: &str, source: &Source) -> Arc<Index> {
    let key: IndexKey = (source.key_path().to_path_buf(), commit.to_owned());
    let cell = {
        let mut kept = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
        match kept.iter().position(|(k, _)| *k == key) {
            Some(at) => {
                let entry = kept.remove(at);
                let cell = entry.1.clone();
                kept.push(entry);
                cell
            }
            None => {
                let cell: IndexCell = Arc::default();
                kept.push((key, cell.clone()));
                if kept.len() > INDEXES_KEPT {
                    kept.remove(0);
                }
                cell
            }
        }
    };
    cell.get_or_init(|| Arc::new(Index::build(source))).clone()
}

/// The map of the checkout at `commit` for `question`, from the cache when it was made
/// before.
pub(super) fn cached_map(commit: &str, source: &Source, question: &str, budget: usize) -> Arc<str> {
    let key = (
        (source.key_path().to_path_buf(), commit.to_owned()),
        question.to_owned(),
        budget,
    );
    {
        let kept = MAPS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, map)) = kept.iter().find(|(k, _)| *k == key) {
            return map.clone();
        }
    }
    let map: Arc<str> = index_for(commit, source).render(question, budget).into();
    let mut kept = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    kept.push((key, map.clone()));
    if kept.len() > MAPS_KEPT {
        kept.remove(0);
    }
    map
}
