//! Traceability of experiment files: every key names where its value comes from.
//!
//! # What counts as a key
//!
//! A *key line* is a line that, outside a multi-line array or string value, starts a
//! `key = value` pair: a bare key (`rpm`), a dotted bare key (`a.b`) or a quoted key
//! (`"run.disks"`). Table headers (`[devices.disks.x]`, `[[variants]]`) are not keys; keys
//! inside an inline table (`set = { … }`) belong to the line that holds them.
//!
//! # Where its annotation may sit
//!
//! Either as a trailing comment on the key line itself, or in the block of comment lines
//! directly above it (no blank line, key or header in between). Within that block, a line
//! starting `# source:` or `# assumption:` opens a tag; later lines that open no tag continue
//! it. Lines of the block before the first tag are free text.
//!
//! * `# source: <paper file> <§/Table/Fig. locator> — "<phrase quoted from the paper>"`
//! * `# assumption: <why>; considered: <what else was considered>`
//!
//! A key needs at least one tag. Keys tagged `assumption` are the ones
//! `adisk sim sensitivity` halves and doubles.

use std::path::{Path, PathBuf};

/// The paper files a `source:` tag may name (in `shared/papers/`).
pub const PAPER_FILES: [&str; 5] = [
    "acharya-active-disks-programming-model.txt",
    "uysal-active-disks-clusters-smps.txt",
    "memik-smart-disk-cluster-dss.txt",
    "riedel-active-disk-databases.txt",
    "chiu-distributed-smart-disks.txt",
];

/// One annotation of a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Tag {
    /// `# source: paper locator — "quote"`.
    Source {
        /// Paper file name.
        paper: String,
        /// Section, table or figure.
        locator: String,
        /// The quoted phrase.
        quote: String,
    },
    /// `# assumption: why; considered: alternatives`.
    Assumption {
        /// Why this value.
        why: String,
        /// What else was considered.
        considered: String,
    },
}

/// A key line of an experiment file with its annotations.
#[derive(Clone, Debug)]
pub struct KeyLine {
    /// 1-based line number.
    pub line_number: usize,
    /// Dotted path: table header + key (`[[variants]]` → `variants[i]`).
    pub path: String,
    /// The value text as written (after `=`, without a trailing comment).
    pub value_text: String,
    /// Its tags (empty if it has none).
    pub tags: Vec<Tag>,
}

impl KeyLine {
    /// Whether any tag is an assumption.
    pub fn is_assumption(&self) -> bool {
        self.tags
            .iter()
            .any(|t| matches!(t, Tag::Assumption { .. }))
    }
}

/// A traceability failure.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    /// A key with neither a source nor an assumption.
    #[error(
        "line {line_number}: `{path}` has no `# source:` or `# assumption:` comment on its line or directly above"
    )]
    MissingAnnotation {
        /// Line.
        line_number: usize,
        /// Key path.
        path: String,
    },
    /// A `source:` tag that does not read `<paper file> <locator> — "<quote>"`.
    #[error(
        "line {line_number}: malformed source (want `# source: <paper file> <§/Table/Fig.> — \"quote\"`): {text}"
    )]
    MalformedSource {
        /// Line.
        line_number: usize,
        /// The tag text.
        text: String,
    },
    /// A `source:` tag naming a file that is not one of the five papers.
    #[error("line {line_number}: unknown paper file `{paper}` (expected one of {expected})")]
    UnknownPaper {
        /// Line.
        line_number: usize,
        /// Named file.
        paper: String,
        /// Known files.
        expected: String,
    },
    /// An `assumption:` tag without its reason or its alternatives.
    #[error(
        "line {line_number}: malformed assumption (want `# assumption: why; considered: alternatives`): {text}"
    )]
    MalformedAssumption {
        /// Line.
        line_number: usize,
        /// The tag text.
        text: String,
    },
    /// A quoted phrase that does not occur in its paper.
    #[error("quote not found in {paper}: \"{quote}\"")]
    QuoteNotFound {
        /// Paper file.
        paper: String,
        /// Phrase.
        quote: String,
    },
    /// A paper file that could not be read.
    #[error("{path}: {reason}")]
    PaperUnreadable {
        /// Path.
        path: String,
        /// Cause.
        reason: String,
    },
}

/// Scan an experiment file's text: every key line with its tags, plus every problem found.
pub fn scan(text: &str) -> (Vec<KeyLine>, Vec<TraceError>) {
    let mut keys = Vec::new();
    let mut problems = Vec::new();
    let mut table = String::new();
    let mut array_index: Vec<(String, usize)> = Vec::new();
    let mut pending: Vec<(usize, String)> = Vec::new();
    let mut depth = 0i32;
    for (index, raw) in text.lines().enumerate() {
        let line_number = index + 1;
        let line = raw.trim();
        if depth > 0 {
            depth += bracket_balance(strip_comment(line));
            continue;
        }
        if line.is_empty() {
            pending.clear();
        } else if line.starts_with('#') {
            pending.push((line_number, line.to_string()));
        } else if line.starts_with('[') {
            table = header_path(line, &mut array_index);
            pending.clear();
        } else if let Some((key, value)) = split_key(line) {
            let body = strip_comment(value);
            depth = bracket_balance(body);
            let mut block = std::mem::take(&mut pending);
            if let Some(trailing) = value.get(body.len()..).map(str::trim)
                && trailing.starts_with('#')
            {
                block.push((line_number, trailing.to_string()));
            }
            let (tags, mut errs) = parse_tags(&block);
            problems.append(&mut errs);
            let path = if table.is_empty() {
                key.clone()
            } else {
                format!("{table}.{key}")
            };
            if tags.is_empty() {
                problems.push(TraceError::MissingAnnotation {
                    line_number,
                    path: path.clone(),
                });
            }
            keys.push(KeyLine {
                line_number,
                path,
                value_text: body.trim().to_string(),
                tags,
            });
        } else {
            pending.clear();
        }
    }
    (keys, problems)
}

/// `[a.b]` → `a.b`; `[[variants]]` → `variants[i]` counting from 0.
fn header_path(line: &str, array_index: &mut Vec<(String, usize)>) -> String {
    let header = strip_comment(line).trim();
    if let Some(inner) = header.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
        let name = inner.trim().to_string();
        let next = match array_index.iter_mut().find(|(n, _)| *n == name) {
            Some((_, i)) => {
                *i += 1;
                *i
            }
            None => {
                array_index.push((name.clone(), 0));
                0
            }
        };
        return format!("{name}[{next}]");
    }
    header
        .trim_matches(|c| c == '[' || c == ']')
        .trim()
        .to_string()
}

/// Split `key = value` (bare, dotted or quoted key); None if the line is not a key line.
fn split_key(line: &str) -> Option<(String, &str)> {
    let (key, rest) = if let Some(stripped) = line.strip_prefix('"') {
        let end = stripped.find('"')?;
        (stripped[..end].to_string(), &stripped[end + 1..])
    } else {
        let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || "_-.".contains(c)))?;
        if end == 0 {
            return None;
        }
        (line[..end].to_string(), &line[end..])
    };
    let value = rest.trim_start().strip_prefix('=')?;
    Some((key, value))
}

/// The part of a line before a `#` that is outside double-quoted strings.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            '\\' if in_string => escaped = !escaped,
            '"' if !escaped => in_string = !in_string,
            '#' if !in_string => return &line[..i],
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    line
}

/// Net `[` minus `]` outside strings (a value continues on the next lines while > 0).
fn bracket_balance(text: &str) -> i32 {
    let mut in_string = false;
    let mut balance = 0;
    for c in text.chars() {
        match c {
            '"' => in_string = !in_string,
            '[' if !in_string => balance += 1,
            ']' if !in_string => balance -= 1,
            _ => {}
        }
    }
    balance
}

/// Tags of a comment block (lines before the first tag are free text).
fn parse_tags(block: &[(usize, String)]) -> (Vec<Tag>, Vec<TraceError>) {
    let mut opened: Vec<(usize, String)> = Vec::new();
    for (line_number, text) in block {
        let body = text.trim_start_matches('#').trim();
        if body.starts_with("source:") || body.starts_with("assumption:") {
            opened.push((*line_number, body.to_string()));
        } else if let Some(last) = opened.last_mut() {
            last.1.push(' ');
            last.1.push_str(body);
        }
    }
    let mut tags = Vec::new();
    let mut errors = Vec::new();
    for (line_number, body) in opened {
        match parse_tag(line_number, &body) {
            Ok(t) => tags.push(t),
            Err(e) => errors.push(e),
        }
    }
    (tags, errors)
}

fn parse_tag(line_number: usize, body: &str) -> Result<Tag, TraceError> {
    if let Some(rest) = body.strip_prefix("assumption:") {
        let malformed = || TraceError::MalformedAssumption {
            line_number,
            text: body.to_string(),
        };
        let (why, considered) = rest.split_once("; considered:").ok_or_else(malformed)?;
        if why.trim().is_empty() || considered.trim().is_empty() {
            return Err(malformed());
        }
        return Ok(Tag::Assumption {
            why: why.trim().to_string(),
            considered: considered.trim().to_string(),
        });
    }
    let rest = body.strip_prefix("source:").unwrap_or(body).trim();
    parse_source(line_number, rest)
}

fn parse_source(line_number: usize, rest: &str) -> Result<Tag, TraceError> {
    let malformed = || TraceError::MalformedSource {
        line_number,
        text: rest.to_string(),
    };
    let (head, quoted) = rest.split_once(" — ").ok_or_else(malformed)?;
    let quote = quoted
        .trim()
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(malformed)?;
    let (paper, locator) = head.trim().split_once(' ').ok_or_else(malformed)?;
    if locator.trim().is_empty() {
        return Err(malformed());
    }
    if !PAPER_FILES.contains(&paper) {
        return Err(TraceError::UnknownPaper {
            line_number,
            paper: paper.to_string(),
            expected: PAPER_FILES.join(", "),
        });
    }
    Ok(Tag::Source {
        paper: paper.to_string(),
        locator: locator.trim().to_string(),
        quote: quote.to_string(),
    })
}

/// Whitespace collapsed and markdown emphasis (`*`, `` ` ``) dropped, for quote matching.
pub fn normalize_text(text: &str) -> String {
    text.replace(['*', '`'], "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The directory holding the papers: `ADISK_PAPERS_DIR`, else `shared/papers` next to the
/// repository (`<crate>/../../../shared/papers`). Returns the path and whether it was set
/// explicitly (an explicit directory that is missing is an error, the default is optional).
pub fn papers_dir() -> (PathBuf, bool) {
    match std::env::var_os("ADISK_PAPERS_DIR") {
        Some(d) => (PathBuf::from(d), true),
        None => (
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/papers"),
            false,
        ),
    }
}

/// Papers loaded for quote checks (normalized text per file name).
#[derive(Debug, Default)]
pub struct Papers {
    texts: Vec<(String, String)>,
}

impl Papers {
    /// Load the five papers from `dir`.
    pub fn load(dir: &Path) -> Result<Papers, TraceError> {
        let mut texts = Vec::new();
        for name in PAPER_FILES {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).map_err(|e| TraceError::PaperUnreadable {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            texts.push((name.to_string(), normalize_text(&text)));
        }
        Ok(Papers { texts })
    }

    /// Check that `quote` occurs in `paper`.
    pub fn verify(&self, paper: &str, quote: &str) -> Result<(), TraceError> {
        let found = self
            .texts
            .iter()
            .find(|(n, _)| n == paper)
            .is_some_and(|(_, t)| t.contains(&normalize_text(quote)));
        if found {
            Ok(())
        } else {
            Err(TraceError::QuoteNotFound {
                paper: paper.to_string(),
                quote: quote.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_with_source_above_or_on_its_line_is_traced() {
        let text = "[devices.disks.d]\n# source: uysal-active-disks-clusters-smps.txt §4 — \"10,025 rpm\"\nrpm = 10025\nzones = 8 # assumption: manual; considered: 1 zone\n";
        let (keys, problems) = scan(text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].path, "devices.disks.d.rpm");
        assert!(!keys[0].is_assumption());
        assert!(keys[1].is_assumption());
    }

    #[test]
    fn blank_line_or_other_key_breaks_the_block() {
        let text = "# source: memik-smart-disk-cluster-dss.txt Table 3 — \"8 KB\"\n\npage_kb = 8.0\n# assumption: x; considered: y\na = 1\nb = 2\n";
        let (_, problems) = scan(text);
        let missing: Vec<String> = problems
            .iter()
            .filter_map(|p| match p {
                TraceError::MissingAnnotation { path, .. } => Some(path.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(missing, vec!["page_kb".to_string(), "b".to_string()]);
    }

    #[test]
    fn multi_line_arrays_hold_no_keys_and_variants_are_indexed() {
        let text = "[[variants]]\n# assumption: a; considered: b\nlabel = \"x\"\n# assumption: a; considered: b\nlist = [\n  1,\n  not_a_key = 2,\n]\n[[variants]]\n# assumption: a; considered: b\nlabel = \"y\"\n";
        let (keys, problems) = scan(text);
        assert!(problems.is_empty(), "{problems:?}");
        let paths: Vec<&str> = keys.iter().map(|k| k.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["variants[0].label", "variants[0].list", "variants[1].label"]
        );
    }

    #[test]
    fn malformed_tags_are_reported() {
        let text = "# source: nowhere.txt §1 — \"x\"\na = 1\n# source: memik-smart-disk-cluster-dss.txt — no quote\nb = 2\n# assumption: no alternatives\nc = 3\n\"quoted.key\" = 4 # source: chiu-distributed-smart-disks.txt §5 — \"SDs\"\n";
        let (keys, problems) = scan(text);
        assert_eq!(keys.len(), 4);
        assert!(matches!(problems[0], TraceError::UnknownPaper { .. }));
        assert!(matches!(problems[2], TraceError::MalformedSource { .. }));
        assert!(
            problems
                .iter()
                .any(|p| matches!(p, TraceError::MalformedAssumption { .. }))
        );
        assert_eq!(keys[3].path, "quoted.key");
        assert!(keys[3].tags.len() == 1);
    }

    #[test]
    fn quotes_match_across_line_breaks_and_emphasis() {
        let papers = Papers {
            texts: vec![(
                "p.txt".into(),
                normalize_text("We used *six*\n queries from `TPC-D`"),
            )],
        };
        assert!(papers.verify("p.txt", "six queries from TPC-D").is_ok());
        assert!(papers.verify("p.txt", "seven queries").is_err());
    }
}
