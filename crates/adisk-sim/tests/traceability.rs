//! Traceability of the experiment files (issue 15, point 1): every key of every file names
//! its source in the papers or states an assumption, and every quoted phrase is in its paper.

use adisk_sim::trace::{self, Papers, Tag};
use std::path::{Path, PathBuf};

fn experiments_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

fn experiment_files() -> Vec<(PathBuf, String)> {
    let files = adisk_sim::experiment::sources("all", Some(&experiments_root()))
        .unwrap_or_else(|e| panic!("reading experiments/: {e}"));
    assert!(!files.is_empty(), "no experiment files found");
    files
}

#[test]
fn every_key_of_every_experiment_file_has_a_source_or_an_assumption() {
    let mut failures = Vec::new();
    let mut keys = 0;
    let mut assumptions = 0;
    for (path, text) in experiment_files() {
        let (lines, problems) = trace::scan(&text);
        keys += lines.len();
        assumptions += lines.iter().filter(|k| k.is_assumption()).count();
        for p in problems {
            failures.push(format!("{}: {p}", path.display()));
        }
    }
    println!("traceability: {keys} keys checked, {assumptions} of them rest on an assumption");
    assert!(
        failures.is_empty(),
        "{} untraced or malformed keys (fix experiments/sources.py and run experiments/generate.py):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_quoted_phrase_occurs_in_its_paper() {
    let mut quotes: Vec<(String, String, String)> = Vec::new();
    for (path, text) in experiment_files() {
        for key in trace::scan(&text).0 {
            for tag in key.tags {
                if let Tag::Source { paper, quote, .. } = tag {
                    quotes.push((
                        format!("{}:{}", path.display(), key.line_number),
                        paper,
                        quote,
                    ));
                }
            }
        }
    }
    for c in adisk_sim::conclusions::CONCLUSIONS {
        quotes.push((
            c.id.to_string(),
            c.paper_file.to_string(),
            c.quote.to_string(),
        ));
    }
    let (dir, explicit) = trace::papers_dir();
    if !dir.is_dir() {
        assert!(
            !explicit,
            "ADISK_PAPERS_DIR={} is not a directory",
            dir.display()
        );
        println!(
            "skipped: {} quotes not verified: papers directory {} not found (set ADISK_PAPERS_DIR to check them)",
            quotes.len(),
            dir.display()
        );
        return;
    }
    let papers = Papers::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let missing: Vec<String> = quotes
        .iter()
        .filter_map(|(at, paper, quote)| {
            papers
                .verify(paper, quote)
                .err()
                .map(|e| format!("{at}: {e}"))
        })
        .collect();
    println!("quotes: {} checked against {}", quotes.len(), dir.display());
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
