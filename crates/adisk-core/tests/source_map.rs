//! The source map of docs/architecture.md (section *Source map*) stays true.
//!
//! The map's convention: under a crate's heading (`` ### `crates/NAME` ``) each table row's
//! first cell is a path relative to that crate's `src/`; under any other heading (*Top level*)
//! it is relative to the repository root. A path ending in `/` is a folder and covers
//! everything in it. This test fails, listing every offender,
//!
//! - when a `.rs` file under `crates/*/src` is neither named by a crate's row nor under a
//!   folder a crate's row names (rows under *Top level*, such as `crates/`, cover nothing);
//! - when a row names a path that does not exist (or a folder that is a file, or a file that
//!   is a folder), or its first cell is not one path in backticks.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const SECTION: &str = "## Source map";

/// What the map names, as paths relative to the repository root.
#[derive(Default)]
struct SourceMap {
    /// Files named by a crate's row (`crates/NAME/src/…`).
    files: BTreeSet<String>,
    /// Folders named by a crate's row, ending in `/`.
    folders: BTreeSet<String>,
    /// Every row's path (top level and crates), as written, with its line number.
    rows: Vec<(usize, String)>,
    /// Rows that are not a path in backticks.
    malformed: Vec<String>,
}

#[test]
fn every_source_file_is_in_the_map_and_every_row_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let doc = fs::read_to_string(&doc_path).expect("read docs/architecture.md");
    let map = parse_map(&doc);
    assert!(
        !map.files.is_empty(),
        "no rows found under `{SECTION}` in docs/architecture.md"
    );

    let mut offenders = map.malformed.clone();
    for (line, path) in &map.rows {
        if let Some(problem) = missing(&root, path) {
            offenders.push(format!("docs/architecture.md:{line}: `{path}` {problem}"));
        }
    }
    for file in source_files(&root) {
        let covered =
            map.files.contains(&file) || map.folders.iter().any(|folder| file.starts_with(folder));
        if !covered {
            offenders.push(format!(
                "{file}: not in the source map (add a row under its crate's heading)"
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "docs/architecture.md, {SECTION}: {} offender(s)\n{}\n",
        offenders.len(),
        offenders.join("\n")
    );
}

/// The rows of the source-map section, resolved against their headings.
fn parse_map(doc: &str) -> SourceMap {
    let mut map = SourceMap::default();
    let mut in_section = false;
    // `Some("crates/NAME/src/")` under a crate's heading, `None` at the top level.
    let mut base: Option<String> = None;
    for (number, line) in doc.lines().enumerate() {
        let line_number = number + 1;
        if line.starts_with("## ") {
            in_section = line.trim_end() == SECTION;
            base = None;
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            base = first_code_span(heading)
                .filter(|span| span.starts_with("crates/"))
                .map(|span| format!("{}/src/", span.trim_end_matches('/')));
            continue;
        }
        let Some(cells) = line.strip_prefix('|') else {
            continue;
        };
        let first = cells.split('|').next().unwrap_or("").trim();
        if first == "path" || first.starts_with("---") {
            continue;
        }
        let path = match first
            .strip_prefix('`')
            .and_then(|rest| rest.strip_suffix('`'))
        {
            Some(path) if !path.is_empty() && !path.contains('`') && valid(path) => path,
            _ => {
                map.malformed.push(format!(
                    "docs/architecture.md:{line_number}: the first cell `{first}` is not one path in backticks"
                ));
                continue;
            }
        };
        let full = format!("{}{path}", base.as_deref().unwrap_or(""));
        map.rows.push((line_number, full.clone()));
        if base.is_some() {
            if full.ends_with('/') {
                map.folders.insert(full);
            } else {
                map.files.insert(full);
            }
        }
    }
    map
}

/// A relative path that stays where it is written: no `..`, no `.`, not absolute.
fn valid(path: &str) -> bool {
    !path.starts_with('/')
        && path
            .trim_end_matches('/')
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

fn first_code_span(text: &str) -> Option<&str> {
    let start = text.find('`')? + 1;
    let length = text[start..].find('`')?;
    Some(&text[start..start + length])
}

/// Why a row's path is wrong, if it is.
fn missing(root: &Path, path: &str) -> Option<&'static str> {
    let on_disk = root.join(path.trim_end_matches('/'));
    if path.ends_with('/') {
        (!on_disk.is_dir()).then_some("is not a folder in the repository")
    } else if on_disk.is_dir() {
        Some("is a folder: end it with `/`")
    } else {
        (!on_disk.is_file()).then_some("does not exist")
    }
}

/// Every `.rs` file under `crates/*/src`, relative to the repository root, `/`-separated.
fn source_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in fs::read_dir(root.join("crates")).expect("read crates/") {
        let src = entry.expect("crates/ entry").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    let mut relative: Vec<String> = files
        .iter()
        .map(|file| {
            let path = file.strip_prefix(root).expect("under the repository");
            let parts: Vec<String> = path
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            parts.join("/")
        })
        .collect();
    relative.sort();
    relative
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("source entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn rows_resolve_against_their_headings() {
    let doc = "\
# Title
## Other
| path | what |
|---|---|
| `crates/ignored.rs` | outside the section |
## Source map
### Top level
| path | what lives there |
|---|---|
| `crates/` | the crates: names, covers nothing |
| `docs/` | documents |
### `crates/adisk-x`
| path | what lives there |
|---|---|
| `lib.rs` | the root |
| `sql/` | a folder |
| not a path | malformed |
## Limits
| `crates/after.rs` | outside the section |
";
    let map = parse_map(doc);
    let files: Vec<&str> = map.files.iter().map(String::as_str).collect();
    let folders: Vec<&str> = map.folders.iter().map(String::as_str).collect();
    assert_eq!(files, ["crates/adisk-x/src/lib.rs"]);
    assert_eq!(folders, ["crates/adisk-x/src/sql/"]);
    let rows: Vec<&str> = map.rows.iter().map(|(_, path)| path.as_str()).collect();
    assert_eq!(
        rows,
        [
            "crates/",
            "docs/",
            "crates/adisk-x/src/lib.rs",
            "crates/adisk-x/src/sql/"
        ]
    );
    assert_eq!(map.malformed.len(), 1);
    assert!(!valid("../escape.rs") && !valid("/abs") && !valid("a//b") && valid("sql/"));
}
