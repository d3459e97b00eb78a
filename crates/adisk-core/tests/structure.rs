//! The repository's structure stays as docs/architecture.md describes it (issue 35).
//!
//! Two checks, std only (no parser, no network):
//!
//! # The source map
//!
//! docs/architecture.md, section *Source map*: under *Top level* each table row's first cell is
//! a path relative to the repository root; under a crate's heading (`` ### `crates/NAME` ``) it
//! is relative to that crate's `src/`. A path ending in `/` is a folder and covers everything
//! under it. [`source_map_names_every_source_file_and_every_crate`] fails, listing every
//! offender with its crate so the doc can be fixed in one go,
//!
//! - when a `.rs` file under `crates/NAME/src` is neither named by a row of that crate's
//!   subsection nor under a folder one of its rows names;
//! - when a crate directory (`crates/NAME/Cargo.toml`) has no subsection, or a subsection names
//!   a crate that does not exist;
//! - when a row names a path that does not exist (a folder that is a file, a file that is a
//!   folder), or its first cell is not one path in backticks;
//! - when a crate's name is missing from the crate diagram at the top (the text before
//!   "At run time:").
//!
//! # Module cycles
//!
//! Cargo keeps the crates acyclic; [`module_cycles_are_the_known_ones`] looks inside each
//! crate. It builds the graph of the crate's modules from their source text, finds its strongly
//! connected components (Tarjan) and compares those of more than one module with
//! [`KNOWN_CYCLES`]: a cycle not listed there fails the test (a new one, or a listed one that
//! grew), and so does a listed cycle no longer found ("cycle gone: remove it from
//! KNOWN_CYCLES"), so the list only shrinks. `-- --nocapture` prints every cycle with one
//! example `file:line` per edge inside it.
//!
//! The graph:
//!
//! - **A node is a module file**: the crate root (`lib.rs` / `main.rs`), `foo.rs`,
//!   `foo/mod.rs`, `foo/bar.rs`. Inline modules (`mod v2 { … }`) belong to their file. A file
//!   declared only under `#[cfg(test)]` (`#[cfg(test)] mod tests;`) is no node.
//! - **An edge A → B** when A's non-test code names a path inside module B: `crate::b::…`,
//!   `super::…` (relative to A and its inline modules), `self::…`, and `child::…` where
//!   `child` is a module file under A (2018-style paths to a child), in `use` trees —
//!   grouped ones included (`use crate::{a::X, b::{Y, Z}}`) — and anywhere in code
//!   (`crate::b::f()`). A path names the deepest module file among its prefixes:
//!   `crate::sql::scan::Foo` is `sql/scan.rs`, `crate::HostError` the crate root.
//! - **Not edges**: `mod x;` declarations; re-exports (`pub use`, `pub(crate) use`, …: a
//!   parent re-exporting its children is structure, not dependence); comments, doc comments
//!   included; string and character literals; every item under `#[cfg(test)]` (skipped to its
//!   matching `}` or its `;`, braces in literals and comments not counted); paths into other
//!   crates.
//! - **Through a re-export**: a path to a re-exported name (`crate::Item` where lib.rs says
//!   `pub use a::Item`) is an edge to the module the item comes from (`a.rs`), not to the
//!   re-exporting one; code of the re-exporting file that uses the name is an edge from it to
//!   `a.rs` (that is a use, not the re-export).
//!
//! What it may miss: names brought in by a glob `use` and then used bare; macros that build
//! paths. What it may add: an edge from a local name that shadows a child module.

//! # Function lengths
//!
//! [`no_function_is_over_100_lines`]: no function of the crates' `src/` (items under
//! `#[cfg(test)]` aside) has a body of more than [`MAX_LINES`] lines: the lines from the
//! body's `{` to its `}` that hold code, a line inside a string literal included, blank and
//! comment-only lines not. On the tree of 2026-12-07, with both limits set to 80, clippy's
//! `too_many_lines` named 10 functions with the same or 2 fewer lines than this count, and
//! this count named the same 10 and 16 more in crates clippy had stopped before. It replaced
//! a `cargo clippy` run of `./x test` (7 min 12 s cold on this 2-core machine, its own
//! check build of every dependency, for one lint).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The module cycles found today: per crate, the sorted files (relative to `crates/NAME/src`)
/// of one strongly connected component. Entries only go: when a cycle is cut the test says so
/// (with what is left of it, which replaces it); a new cycle, or a file joining a listed one,
/// is cut, not listed.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The names of the crates: the directories under `crates/` with a `Cargo.toml`, sorted.
fn crate_names(root: &Path) -> Vec<String> {
    let crates = root.join("crates");
    let mut names: Vec<String> = fs::read_dir(&crates)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", crates.display()))
        .map(|entry| entry.expect("an entry of crates/").path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every `.rs` file under `src`, relative to it, `/`-separated, sorted.
fn rust_files(src: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()));
        for entry in entries {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    if src.is_dir() {
        walk(src, &mut files);
    }
    let mut relative: Vec<String> = files
        .iter()
        .map(|file| {
            let path = file.strip_prefix(src).expect("a file under src/");
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

// =============================================================================================
// The source map.

const DOC: &str = "docs/architecture.md";
const SECTION: &str = "## Source map";
const DIAGRAM_END: &str = "At run time:";

/// One row of the map: its line in the doc and its path as written.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    line: usize,
    path: String,
}

/// The rows of the source-map section, by heading.
#[derive(Debug, Default)]
struct SourceMap {
    /// Rows under *Top level* (and any heading that is not a crate's).
    top_level: Vec<Row>,
    /// Crate name → the line of its heading and its rows.
    crates: BTreeMap<String, (usize, Vec<Row>)>,
    /// Rows whose first cell is not one path in backticks, as messages.
    malformed: Vec<String>,
}

#[test]
fn source_map_names_every_source_file_and_every_crate() {
    let root = workspace_root();
    let doc =
        fs::read_to_string(root.join(DOC)).unwrap_or_else(|error| panic!("read {DOC}: {error}"));
    let map = parse_map(&doc);
    let crates = crate_names(&root);
    assert!(
        !crates.is_empty(),
        "no crates under {}",
        root.join("crates").display()
    );

    let mut problems = map.malformed.clone();
    problems.extend(diagram_problems(&doc, &crates));
    for row in &map.top_level {
        if let Some(why) = stale(&root, &row.path) {
            problems.push(format!(
                "top level: `{}` ({DOC}:{}) {why}",
                row.path, row.line
            ));
        }
    }
    for krate in &crates {
        let files = rust_files(&root.join("crates").join(krate).join("src"));
        problems.extend(crate_problems(&root, krate, &files, &map));
    }
    for (krate, (line, _)) in &map.crates {
        if !crates.contains(krate) {
            problems.push(format!(
                "{krate}: a subsection ({DOC}:{line}) for a crate that does not exist \
                 (no crates/{krate}/Cargo.toml)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "\n{DOC}, `{SECTION}`: {} problem(s), fix them in one go:\n  {}\n",
        problems.len(),
        problems.join("\n  ")
    );
}

/// What is wrong with one crate's part of the map: no subsection, files in no row, stale rows.
fn crate_problems(root: &Path, krate: &str, files: &[String], map: &SourceMap) -> Vec<String> {
    let Some((_, rows)) = map.crates.get(krate) else {
        return vec![format!(
            "{krate}: no subsection `### `crates/{krate}`` under `{SECTION}`; its files: {}",
            files.join(", ")
        )];
    };
    let mut problems = Vec::new();
    let src = format!("crates/{krate}/src/");
    for row in rows {
        if let Some(why) = stale(root, &format!("{src}{}", row.path)) {
            problems.push(format!(
                "{krate}: `{}` ({DOC}:{}) {why}",
                row.path, row.line
            ));
        }
    }
    for file in files {
        let named = rows.iter().any(|row| {
            row.path == *file || (row.path.ends_with('/') && file.starts_with(&row.path))
        });
        if !named {
            problems.push(format!(
                "{krate}: `{file}` is in no row \
                 (add `| `{file}` | … |` under `### `crates/{krate}``)"
            ));
        }
    }
    problems
}

/// Why a row's path (relative to the repository root) is stale, if it is.
fn stale(root: &Path, path: &str) -> Option<&'static str> {
    let on_disk = root.join(path.trim_end_matches('/'));
    if path.ends_with('/') {
        (!on_disk.is_dir()).then_some("is not a folder in the repository")
    } else if on_disk.is_dir() {
        Some("is a folder: end it with `/`")
    } else {
        (!on_disk.is_file()).then_some("does not exist")
    }
}

/// Crates the diagram at the top of the doc (the text before "At run time:") does not name.
fn diagram_problems(doc: &str, crates: &[String]) -> Vec<String> {
    let Some(end) = doc.find(DIAGRAM_END) else {
        return vec![format!(
            "{DOC}: no \"{DIAGRAM_END}\" to end the crate diagram"
        )];
    };
    let diagram = &doc[..end];
    crates
        .iter()
        .filter(|krate| !names_word(diagram, krate))
        .map(|krate| {
            format!("{krate}: not named in the crate diagram at the top (before \"{DIAGRAM_END}\")")
        })
        .collect()
}

/// Does `text` contain `name` as a whole crate name (`adisk` is not found in `adisk-sim`)?
fn names_word(text: &str, name: &str) -> bool {
    let part_of_name = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name)
    })
}

/// The rows of the source-map section, each under its heading.
fn parse_map(doc: &str) -> SourceMap {
    let mut map = SourceMap::default();
    let mut in_section = false;
    // The crate whose subsection this is; `None` at the top level.
    let mut krate: Option<String> = None;
    for (number, line) in doc.lines().enumerate() {
        let line_number = number + 1;
        if line.starts_with("## ") {
            in_section = line.trim_end() == SECTION;
            krate = None;
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            krate = first_code_span(heading)
                .and_then(|span| span.strip_prefix("crates/"))
                .map(|name| name.trim_end_matches('/').to_string());
            if let Some(name) = &krate {
                map.crates
                    .entry(name.clone())
                    .or_insert((line_number, Vec::new()));
            }
            continue;
        }
        let Some(path) = row_path(line, line_number, &mut map.malformed) else {
            continue;
        };
        let row = Row {
            line: line_number,
            path,
        };
        match &krate {
            Some(name) => map.crates.get_mut(name).expect("heading seen").1.push(row),
            None => map.top_level.push(row),
        }
    }
    map
}

/// The path in a table row's first cell; `None` for other lines, header and separator rows,
/// and malformed cells (noted in `malformed`).
fn row_path(line: &str, line_number: usize, malformed: &mut Vec<String>) -> Option<String> {
    let cells = line.strip_prefix('|')?;
    let first = cells.split('|').next().unwrap_or("").trim();
    if first == "path" || first.starts_with("---") {
        return None;
    }
    let path = first
        .strip_prefix('`')
        .and_then(|rest| rest.strip_suffix('`'));
    match path {
        Some(path) if !path.contains('`') && relative(path) => Some(path.to_string()),
        _ => {
            malformed.push(format!(
                "{DOC}:{line_number}: the first cell `{first}` is not one relative path \
                 in backticks"
            ));
            None
        }
    }
}

/// A relative path that stays where it is written: no `..`, no `.`, not absolute, not empty.
fn relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
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

// =============================================================================================
// Module cycles: the test.

/// A strongly connected component of more than one module file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cycle {
    krate: String,
    /// Files relative to `crates/NAME/src`, sorted.
    files: Vec<String>,
}

impl Cycle {
    /// Are all of this cycle's files in `other` (same crate)?
    fn is_within(&self, other: &Cycle) -> bool {
        self.krate == other.krate && self.files.iter().all(|file| other.files.contains(file))
    }

    /// This cycle's files that are not in `other`.
    fn without(&self, other: &Cycle) -> Vec<String> {
        let mut rest = self.files.clone();
        rest.retain(|file| !other.files.contains(file));
        rest
    }
}

#[test]
fn module_cycles_are_the_known_ones() {
    let root = workspace_root();
    let mut found = BTreeSet::new();
    let mut details = BTreeMap::new();
    for krate in crate_names(&root) {
        let src = root.join("crates").join(&krate).join("src");
        let files = rust_files(&src)
            .into_iter()
            .map(|file| {
                let text = fs::read_to_string(src.join(&file))
                    .unwrap_or_else(|error| panic!("read crates/{krate}/src/{file}: {error}"));
                (file, text)
            })
            .collect::<Vec<_>>();
        let graph = module_graph(&files);
        for component in cycles(&graph) {
            let cycle = Cycle {
                krate: krate.clone(),
                files: graph.files_of(&component),
            };
            let text = describe_cycle(&graph, &component, &format!("crates/{krate}/src/"));
            println!("cycle in {krate}: {}\n{text}", cycle.files.join(", "));
            details.insert(cycle.clone(), text);
            found.insert(cycle);
        }
    }
    println!("{} module cycle(s)", found.len());
    let problems = compare_cycles(&found, &known_cycles(), &details);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The host's cluster client (`client/`: connections, catalog, jobs, loads, links, relay)
/// depends on none of its planner modules (`sql/`, `run`, `disklet`, `exchange`): the planner
/// makes job specs and hands them to the client, never the other way round.
#[test]
fn host_client_depends_on_no_planner_module() {
    let src = workspace_root().join("crates/adisk-host/src");
    let files: Vec<(String, String)> = rust_files(&src)
        .into_iter()
        .map(|file| {
            let text = fs::read_to_string(src.join(&file))
                .unwrap_or_else(|error| panic!("read crates/adisk-host/src/{file}: {error}"));
            (file, text)
        })
        .collect();
    assert!(
        files.iter().any(|(file, _)| file == "client/cluster.rs"),
        "the host's client tree moved: update this test"
    );
    let planner = |file: &str| {
        file.starts_with("sql/") || ["run.rs", "disklet.rs", "exchange.rs"].contains(&file)
    };
    let graph = module_graph(&files);
    let mut wrong = Vec::new();
    for (from, targets) in graph.edges.iter().enumerate() {
        if !graph.files[from].starts_with("client/") {
            continue;
        }
        for (to, example) in targets {
            if planner(&graph.files[*to]) {
                wrong.push(format!(
                    "{} -> {}: line {}: {}",
                    graph.files[from], graph.files[*to], example.line, example.path
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the client uses the planner:\n{}",
        wrong.join("\n")
    );
}

/// [`KNOWN_CYCLES`] as cycles; each entry's files must be sorted.
fn known_cycles() -> BTreeSet<Cycle> {
    KNOWN_CYCLES
        .iter()
        .map(|(krate, files)| {
            assert!(
                files.windows(2).all(|pair| pair[0] < pair[1]),
                "KNOWN_CYCLES: the files of each entry are sorted and distinct: {krate}: {files:?}"
            );
            Cycle {
                krate: krate.to_string(),
                files: files.iter().map(|file| file.to_string()).collect(),
            }
        })
        .collect()
}

/// The differences between the cycles found and the known ones, each as one message.
fn compare_cycles(
    found: &BTreeSet<Cycle>,
    known: &BTreeSet<Cycle>,
    details: &BTreeMap<Cycle, String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for cycle in found.difference(known) {
        if known.iter().any(|old| cycle.is_within(old)) {
            continue; // What is left of a known cycle: reported with it, below.
        }
        let detail = details.get(cycle).map(String::as_str).unwrap_or("");
        let grown_from = known.iter().find(|old| old.is_within(cycle));
        problems.push(match grown_from {
            Some(old) => format!(
                "new cycle (cut it; do not list it): {}: {:?} joined the known {:?}\n{detail}",
                cycle.krate,
                cycle.without(old),
                old.files
            ),
            None => format!(
                "new cycle (cut it; do not list it): {}: {:?}\n{detail}",
                cycle.krate, cycle.files
            ),
        });
    }
    for cycle in known.difference(found) {
        if found.iter().any(|new| cycle.is_within(new)) {
            continue; // It grew: reported above.
        }
        let left: Vec<String> = found
            .iter()
            .filter(|new| new.is_within(cycle))
            .map(|new| format!("{:?}", new.files))
            .collect();
        let rest = if left.is_empty() {
            String::new()
        } else {
            format!(
                " (what is left of it, to list instead: {})",
                left.join(", ")
            )
        };
        problems.push(format!(
            "cycle gone: remove it from KNOWN_CYCLES: {}: {:?}{rest}",
            cycle.krate, cycle.files
        ));
    }
    problems
}

/// Every edge inside a component, one line each with one place that makes it.
fn describe_cycle(graph: &ModuleGraph, component: &[usize], prefix: &str) -> String {
    let members: BTreeSet<usize> = component.iter().copied().collect();
    let mut lines = Vec::new();
    for &from in component {
        for (to, example) in graph.edges[from].iter() {
            if members.contains(to) {
                lines.push(format!(
                    "    {} -> {}   {prefix}{}:{}: {}",
                    graph.files[from],
                    graph.files[*to],
                    graph.files[from],
                    example.line,
                    example.path
                ));
            }
        }
    }
    lines.sort();
    lines.join("\n")
}

// =============================================================================================
// Module cycles: the graph of one crate.

/// One place that makes an edge: the line and the path as written.
#[derive(Clone, Debug, PartialEq)]
struct Example {
    line: usize,
    path: String,
}

/// One crate's module files and the edges between them.
struct ModuleGraph {
    /// Files relative to `src/`, indexed by node number.
    files: Vec<String>,
    /// `edges[a]`: the modules `a` refers to (never `a` itself), each with its first example.
    edges: Vec<BTreeMap<usize, Example>>,
}

impl ModuleGraph {
    fn files_of(&self, component: &[usize]) -> Vec<String> {
        let mut files: Vec<String> = component.iter().map(|&m| self.files[m].clone()).collect();
        files.sort();
        files
    }
}

/// The strongly connected components of more than one module.
fn cycles(graph: &ModuleGraph) -> Vec<Vec<usize>> {
    let adjacency: Vec<BTreeSet<usize>> = graph
        .edges
        .iter()
        .map(|targets| targets.keys().copied().collect())
        .collect();
    tarjan(&adjacency)
        .into_iter()
        .filter(|component| component.len() > 1)
        .collect()
}

/// The graph of a crate given as its files (relative to `src/`) and their text.
fn module_graph(sources: &[(String, String)]) -> ModuleGraph {
    let stripped: Vec<(String, String)> = sources
        .iter()
        .map(|(file, text)| (file.clone(), strip(text)))
        .collect();
    let test_only = test_only_modules(&stripped);
    let mut kept: Vec<&(String, String)> = stripped
        .iter()
        .filter(|(file, _)| {
            let path = module_path(file);
            !test_only.iter().any(|prefix| path.starts_with(prefix))
        })
        .collect();
    kept.sort();
    let mut index = BTreeMap::new();
    for (node, (file, _)) in kept.iter().enumerate() {
        if let Some(other) = index.insert(module_path(file), node) {
            panic!("two files are one module: {file} and {}", kept[other].0);
        }
    }
    let parsed: Vec<ParsedFile> = kept
        .iter()
        .map(|(file, text)| parse_file(&skip_cfg_test(text), &module_path(file), &index))
        .collect();
    let reexports: Vec<BTreeMap<String, Vec<String>>> =
        parsed.iter().map(|file| file.reexports.clone()).collect();

    let mut edges = vec![BTreeMap::new(); kept.len()];
    for (from, file) in parsed.iter().enumerate() {
        for reference in &file.references {
            if let Some(to) = resolve(&reference.absolute, &index, &reexports, 0)
                && to != from
            {
                edges[from].entry(to).or_insert_with(|| Example {
                    line: reference.line,
                    path: reference.written.clone(),
                });
            }
        }
    }
    let files = kept.iter().map(|(file, _)| file.clone()).collect();
    ModuleGraph { files, edges }
}

/// `lib.rs` / `main.rs` → `[]`, `a.rs` and `a/mod.rs` → `[a]`, `a/b.rs` → `[a, b]`.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.split('/').map(String::from).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    let is_root = parts.is_empty() && (stem == "lib" || stem == "main");
    if !is_root && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// Modules declared only for tests (`#[cfg(test)] mod tests;`), as module paths.
fn test_only_modules(stripped: &[(String, String)]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (file, text) in stripped {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(CFG_TEST) {
            rest = &rest[at + CFG_TEST.len()..];
            let item = &rest[attributes_end(rest)..];
            let words: Vec<&str> = item
                .split(|c: char| c.is_whitespace() || c == ';' || c == '{')
                .filter(|word| !word.is_empty())
                .take(3)
                .collect();
            let name = match words.as_slice() {
                ["mod", name, ..] => name,
                [visibility, "mod", name] if visibility.starts_with("pub") => name,
                _ => continue,
            };
            let declared_in_file = item
                .trim_start()
                .split('{')
                .next()
                .unwrap_or("")
                .contains(';');
            if declared_in_file {
                let mut path = module_path(file);
                path.push(name.to_string());
                out.push(path);
            }
        }
    }
    out
}

/// The module a path names: its deepest existing prefix, followed through re-exports.
fn resolve(
    absolute: &[String],
    index: &BTreeMap<Vec<String>, usize>,
    reexports: &[BTreeMap<String, Vec<String>>],
    depth: usize,
) -> Option<usize> {
    let (length, module) = (0..=absolute.len())
        .rev()
        .find_map(|k| index.get(&absolute[..k]).map(|&m| (k, m)))?;
    if depth < 8
        && let Some(name) = absolute.get(length)
        && let Some(target) = reexports[module].get(name)
    {
        let through: Vec<String> = target
            .iter()
            .chain(&absolute[length + 1..])
            .cloned()
            .collect();
        return resolve(&through, index, reexports, depth + 1);
    }
    Some(module)
}

// =============================================================================================
// Module cycles: reading one file.

/// A path to somewhere in this crate: as written, made absolute (crate root = `[]`), its line.
#[derive(Clone, Debug)]
struct Reference {
    written: String,
    absolute: Vec<String>,
    line: usize,
}

/// What one file refers to, and what it re-exports.
#[derive(Debug, Default)]
struct ParsedFile {
    references: Vec<Reference>,
    /// Names this file re-exports (`pub use …`) → the absolute path they come from.
    reexports: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// A token and its line (1-based).
#[derive(Clone, Debug)]
struct Tok {
    token: Token,
    line: usize,
}

/// Where a file's tokens are: its module and the inline modules open at this point.
struct Scope<'a> {
    module: &'a [String],
    inline: Vec<(String, usize)>,
    index: &'a BTreeMap<Vec<String>, usize>,
}

impl Scope<'_> {
    /// The module path at this point: the file's plus its open inline modules.
    fn path(&self) -> Vec<String> {
        let inline = self.inline.iter().map(|(name, _)| name.clone());
        self.module.iter().cloned().chain(inline).collect()
    }
}

/// A file's references and re-exports, from its text without comments, literals and tests.
fn parse_file(text: &str, module: &[String], index: &BTreeMap<Vec<String>, usize>) -> ParsedFile {
    let tokens = tokenize(text);
    let mut parsed = ParsedFile::default();
    let mut scope = Scope {
        module,
        inline: Vec::new(),
        index,
    };
    // Token ranges of `use` declarations (their names are not uses of a re-exported name).
    let mut in_use = vec![false; tokens.len()];
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let after_path_sep = i > 0 && tokens[i - 1].token == Token::PathSep;
        match &tokens[i].token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                while scope.inline.last().is_some_and(|(_, d)| *d > depth) {
                    scope.inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) = (
                    tokens.get(i + 1).map(|t| &t.token),
                    tokens.get(i + 2).map(|t| &t.token),
                ) {
                    depth += 1;
                    scope.inline.push((name.clone(), depth));
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" && !after_path_sep => {
                let end = (i + 1..tokens.len())
                    .find(|&j| tokens[j].token == Token::Punct(';'))
                    .unwrap_or(tokens.len());
                let public = is_visibility_end(&tokens[..i]);
                read_use(&tokens[i + 1..end], public, &scope, &mut parsed);
                in_use[i..end].iter_mut().for_each(|flag| *flag = true);
                i = end + 1;
                continue;
            }
            Token::Ident(_) if !after_path_sep => {
                if let Some(end) = read_path(&tokens, i, &scope, &mut parsed) {
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    uses_of_reexports(&tokens, &in_use, &mut parsed);
    parsed
}

/// A `use` declaration's paths (the tokens between `use` and `;`): references, or re-exports.
fn read_use(tokens: &[Tok], public: bool, scope: &Scope, parsed: &mut ParsedFile) {
    for (path, alias, line) in use_tree(tokens, &[]) {
        let Some(absolute) = absolute_path(&path, scope) else {
            continue;
        };
        if !public {
            let mut written = path.join("::");
            if let Some(module) = written.strip_suffix("::self") {
                written = module.to_string();
            }
            parsed.references.push(Reference {
                written,
                absolute,
                line,
            });
        } else if let Some(name) = alias.or_else(|| path.last().cloned())
            && name != "*"
            && name != "self"
        {
            parsed.reexports.insert(name, absolute);
        } else if path.last().is_some_and(|last| last == "self") {
            let name = path[path.len() - 2].clone();
            parsed.reexports.insert(name, absolute);
        }
    }
}

/// A path in code starting at token `start` (`crate::a::f`, `super::X`, `child::Y`): its
/// reference, if it is one into this crate, and the index after it; `None` if no path starts.
fn read_path(
    tokens: &[Tok],
    start: usize,
    scope: &Scope,
    parsed: &mut ParsedFile,
) -> Option<usize> {
    if tokens.get(start + 1).map(|t| &t.token) != Some(&Token::PathSep) {
        return None;
    }
    let mut path = Vec::new();
    let mut j = start;
    while let Some(Token::Ident(segment)) = tokens.get(j).map(|t| &t.token) {
        path.push(segment.clone());
        if tokens.get(j + 1).map(|t| &t.token) != Some(&Token::PathSep) {
            break;
        }
        j += 2;
    }
    if let Some(absolute) = absolute_path(&path, scope) {
        let (written, line) = (path.join("::"), tokens[start].line);
        parsed.references.push(Reference {
            written,
            absolute,
            line,
        });
    }
    Some(j + 1)
}

/// A re-exported name used by the re-exporting file's own code (outside `use` declarations,
/// not as a field, method or path segment) is a reference to where it comes from.
fn uses_of_reexports(tokens: &[Tok], in_use: &[bool], parsed: &mut ParsedFile) {
    for (name, absolute) in &parsed.reexports {
        let used = tokens.iter().enumerate().find(|(j, tok)| {
            let before = j.checked_sub(1).map(|b| &tokens[b].token);
            !in_use[*j]
                && tok.token == Token::Ident(name.clone())
                && before != Some(&Token::PathSep)
                && before != Some(&Token::Punct('.'))
                && before != Some(&Token::Ident("mod".into()))
        });
        if let Some((_, tok)) = used {
            let written = format!("{name} (re-exported here from {})", absolute.join("::"));
            let reference = Reference {
                written,
                absolute: absolute.clone(),
                line: tok.line,
            };
            parsed.references.push(reference);
        }
    }
}

/// Do the tokens before a `use` end in a visibility (`pub`, `pub(crate)`, `pub(super)`, …)?
fn is_visibility_end(before: &[Tok]) -> bool {
    match before.last().map(|t| &t.token) {
        Some(Token::Ident(word)) => word == "pub",
        Some(Token::Punct(')')) => {
            let open = before.iter().rposition(|t| t.token == Token::Punct('('));
            open.is_some_and(|o| o > 0 && before[o - 1].token == Token::Ident("pub".into()))
        }
        _ => false,
    }
}

/// A path as written in `scope`, made absolute if it starts in this crate: `crate`, `super`,
/// `self`, or a child module of the file (outside inline modules).
fn absolute_path(path: &[String], scope: &Scope) -> Option<Vec<String>> {
    let first = path.first()?;
    let here = scope.path();
    let mut absolute: Vec<String> = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "self" => here.iter().chain(&path[1..]).cloned().collect(),
        "super" => {
            let mut base = here;
            let mut rest = path;
            while rest.first().is_some_and(|segment| segment == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.into_iter().chain(rest.iter().cloned()).collect()
        }
        _ => {
            let mut child = scope.module.to_vec();
            child.push(first.clone());
            if !scope.inline.is_empty() || !scope.index.contains_key(&child) {
                return None;
            }
            scope.module.iter().chain(path).cloned().collect()
        }
    };
    while absolute
        .last()
        .is_some_and(|segment| segment == "self" || segment == "*")
    {
        absolute.pop();
    }
    Some(absolute)
}

/// The paths of a `use` tree (the tokens between `use` and `;`), each with its alias and line.
fn use_tree(tokens: &[Tok], prefix: &[String]) -> Vec<(Vec<String>, Option<String>, usize)> {
    let mut out = Vec::new();
    let mut path = prefix.to_vec();
    let mut line = tokens.first().map_or(0, |t| t.line);
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::Ident(word) if word == "as" => {
                if let Some(Token::Ident(alias)) = tokens.get(i + 1).map(|t| &t.token) {
                    out.push((path.clone(), Some(alias.clone()), line));
                }
                return out;
            }
            Token::Ident(segment) => {
                path.push(segment.clone());
                line = tokens[i].line;
            }
            Token::Punct('*') => path.push("*".to_string()),
            Token::Punct('{') => {
                let close = matching_close(tokens, i);
                for item in split_top_level(&tokens[i + 1..close]) {
                    out.extend(use_tree(item, &path));
                }
                return out;
            }
            _ => {}
        }
        i += 1;
    }
    if !path.is_empty() {
        out.push((path, None, line));
    }
    out
}

fn matching_close(tokens: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (j, tok) in tokens.iter().enumerate().skip(open) {
        match tok.token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

fn split_top_level(tokens: &[Tok]) -> Vec<&[Tok]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (j, tok) in tokens.iter().enumerate() {
        match tok.token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                parts.push(&tokens[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    parts.into_iter().filter(|part| !part.is_empty()).collect()
}

/// Identifiers (`$crate` read as `crate`), `::`, and every other non-blank character.
fn tokenize(text: &str) -> Vec<Tok> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let push = |tokens: &mut Vec<Tok>, token| tokens.push(Tok { token, line });
        if c.is_alphanumeric() || c == '_' || (c == '$' && chars.get(i + 1) == Some(&'c')) {
            let start = if c == '$' { i + 1 } else { i };
            i = start;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            push(&mut tokens, Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            push(&mut tokens, Token::PathSep);
            i += 2;
            continue;
        }
        if c == '\n' {
            line += 1;
        } else if !c.is_whitespace() {
            push(&mut tokens, Token::Punct(c));
        }
        i += 1;
    }
    tokens
}

// =============================================================================================
// Module cycles: comments and literals out, `#[cfg(test)]` items out; lines kept.

const CFG_TEST: &str = "#[cfg(test)]";

/// The source without comments and with every string and character literal emptied; every
/// newline stays, so lines keep their numbers.
fn strip(src: &str) -> String {
    strip_as(src, false)
}

/// [`strip`], or (`masked`) the source without comments and with every character of a string
/// or character literal but its newlines made an `x`: a line inside a literal keeps its code.
fn strip_as(src: &str, masked: bool) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let skipped_to = if c == '/' && next == Some('/') {
            Some(line_comment_end(&chars, i))
        } else if c == '/' && next == Some('*') {
            Some(block_comment_end(&chars, i))
        } else if let Some(end) = raw_string_end(&chars, i) {
            out.push_str(if masked { "" } else { "\"\"" });
            Some(end)
        } else if c == '"' {
            out.push_str(if masked { "" } else { "\"\"" });
            Some(string_end(&chars, i))
        } else if let Some(end) = char_literal_end(&chars, i) {
            out.push_str(if masked { "" } else { "' '" });
            Some(end)
        } else {
            None
        };
        let comment = c == '/' && matches!(next, Some('/' | '*'));
        let literal = masked && !comment;
        match skipped_to {
            Some(end) if literal => {
                out.extend(
                    chars[i..end]
                        .iter()
                        .map(|&c| if c == '\n' { c } else { 'x' }),
                );
                i = end;
            }
            Some(end) => {
                out.extend(chars[i..end].iter().filter(|&&c| c == '\n'));
                i = end;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The end of a `//` comment: its newline (kept).
fn line_comment_end(chars: &[char], start: usize) -> usize {
    (start..chars.len())
        .find(|&j| chars[j] == '\n')
        .unwrap_or(chars.len())
}

/// The end of a (nested) `/* … */` comment.
fn block_comment_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// The end of a string literal `"…"` (escapes honoured) starting at `start`.
fn string_end(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    (i + 1).min(chars.len())
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `start`, if one does.
fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    if start > 0 && ident(chars[start - 1]) {
        return None;
    }
    let mut j = match (chars[start], chars.get(start + 1)) {
        ('r', _) => start + 1,
        ('b', Some('r')) => start + 2,
        _ => return None,
    };
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

/// The end of a character literal (`'x'`, `'\n'`, `'\''`, `'\u{1F600}'`, `'{'`) starting at
/// `start`; `None` for a lifetime (`'a`).
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    if chars[start] != '\'' {
        return None;
    }
    if chars.get(start + 1) == Some(&'\\') {
        // Past the backslash and the escaped character, to the closing quote.
        let close = (start + 3..chars.len()).find(|&j| chars[j] == '\'')?;
        return Some(close + 1);
    }
    (chars.get(start + 2) == Some(&'\'')).then_some(start + 3)
}

/// The (stripped) source without the items under `#[cfg(test)]`, each skipped to its matching
/// `}` or its `;`; the newlines of a skipped item stay.
fn skip_cfg_test(stripped: &str) -> String {
    let mut out = String::with_capacity(stripped.len());
    let mut rest = stripped;
    while let Some(at) = rest.find(CFG_TEST) {
        out.push_str(&rest[..at]);
        let item = &rest[at + CFG_TEST.len()..];
        let end = item_end(item);
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Past the attributes (`#[…]`) and blanks at the start of `text`.
fn attributes_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'#') || bytes.get(i + 1) != Some(&b'[') {
            return i;
        }
        let mut depth = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'[' => depth += 1,
                b']' => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Where the item at the start of `text` (after its attributes) ends: after its body's
/// matching `}`, or after a `;` outside any bracket.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut braces, mut brackets) = (0i32, 0i32);
    for (i, &byte) in bytes.iter().enumerate().skip(attributes_end(text)) {
        match byte {
            b'(' | b'[' => brackets += 1,
            b')' | b']' => brackets -= 1,
            b';' if braces == 0 && brackets == 0 => return i + 1,
            b'{' => braces += 1,
            b'}' => {
                braces -= 1;
                if braces == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    bytes.len()
}

// =============================================================================================
// Function lengths.

/// The longest a function's body may be, in lines of code (`clippy.toml`'s threshold before).
const MAX_LINES: usize = 100;

#[test]
fn no_function_is_over_100_lines() {
    let root = workspace_root();
    let mut long = Vec::new();
    let mut functions = 0;
    for krate in crate_names(&root) {
        let src = root.join("crates").join(&krate).join("src");
        for file in rust_files(&src) {
            let text = fs::read_to_string(src.join(&file)).expect("a source file");
            for f in function_lengths(&text) {
                functions += 1;
                if f.lines > MAX_LINES {
                    long.push(format!(
                        "crates/{krate}/src/{file}:{} fn {}: {} lines",
                        f.line, f.name, f.lines
                    ));
                }
            }
        }
    }
    assert!(functions > 1000, "only {functions} functions found");
    assert!(
        long.is_empty(),
        "{} function(s) over {MAX_LINES} lines: split them\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// One function with a body: its name, the line of `fn` (1-based) and its body's lines of code.
#[derive(Debug, PartialEq)]
struct FnLength {
    name: String,
    line: usize,
    lines: usize,
}

/// Every function with a body in `src` (items under `#[cfg(test)]` aside), nested ones too.
fn function_lengths(src: &str) -> Vec<FnLength> {
    let code = skip_cfg_test(&strip_as(src, true));
    let bytes = code.as_bytes();
    let line_of = |at: usize| 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("fn") {
        let start = at + found;
        at = start + 2;
        let before = start.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(word) || bytes.get(at).is_some_and(|&b| !b.is_ascii_whitespace()) {
            continue;
        }
        let name_start = at + code[at..].len() - code[at..].trim_start().len();
        let name_end = name_start + code[name_start..].bytes().take_while(|&b| word(b)).count();
        if name_end == name_start {
            continue; // `fn(u32) -> u32`, a pointer type
        }
        let Some(open) = body_open(bytes, name_end) else {
            continue;
        };
        let close = open + item_end(&code[open..]) - 1;
        let lines = code[open..=close]
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        let name = code[name_start..name_end].to_string();
        out.push(FnLength {
            name,
            line: line_of(start),
            lines,
        });
    }
    out
}

/// The `{` opening the body of the function whose signature goes on from `from`; `None` when
/// a `;` comes first (a declaration without a body).
fn body_open(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return None,
            b'{' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

#[test]
fn function_lengths_count_code_lines_of_bodies_only() {
    let src = r##"
/// Doc.
pub fn short(x: u32) -> u32 {
    // a comment line

    let s = "a
multi-line literal { with a brace";
    /* a block
       comment */
    x + 1
}
trait T { fn declared(&self); fn with_default(&self) { } }
fn pointer(f: fn(u32) -> u32) -> impl Fn() { move || { let _ = f; } }
#[cfg(test)]
mod tests { fn hidden() { } }
fn outer() { fn inner() {
} }
"##;
    let got: Vec<(String, usize, usize)> = function_lengths(src)
        .into_iter()
        .map(|f| (f.name, f.line, f.lines))
        .collect();
    let want = [
        ("short", 3, 5),
        ("with_default", 12, 1),
        ("pointer", 13, 1),
        ("outer", 16, 2),
        ("inner", 16, 2),
    ];
    let want: Vec<(String, usize, usize)> = want
        .iter()
        .map(|(n, l, c)| (n.to_string(), *l, *c))
        .collect();
    assert_eq!(got, want);
}

// =============================================================================================
// Tarjan's strongly connected components.

/// The strongly connected components of a graph given as adjacency sets (Tarjan, 1972), each
/// sorted, in the order Tarjan completes them (a component before those that reach it).
fn tarjan(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut state = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            state.visit(v);
        }
    }
    state.components
}

struct Tarjan<'a> {
    edges: &'a [BTreeSet<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in self.edges[v].iter() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(index_w) if self.on_stack[w] => self.low[v] = self.low[v].min(index_w),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            loop {
                let w = self.stack.pop().expect("v is on the stack");
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort_unstable();
            self.components.push(component);
        }
    }
}

// =============================================================================================
// Tests of the checkers themselves.

/// A crate from `(file, text)` pairs, for the checker's tests.
fn tiny_crate(files: &[(&str, &str)]) -> ModuleGraph {
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|(file, text)| (file.to_string(), text.to_string()))
        .collect();
    module_graph(&sources)
}

/// The graph's edges as `from -> to` lines, sorted.
fn edge_list(graph: &ModuleGraph) -> Vec<String> {
    let mut out = Vec::new();
    for (from, targets) in graph.edges.iter().enumerate() {
        for to in targets.keys() {
            out.push(format!("{} -> {}", graph.files[from], graph.files[*to]));
        }
    }
    out.sort();
    out
}

fn cycle_files(graph: &ModuleGraph) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = cycles(graph).iter().map(|c| graph.files_of(c)).collect();
    out.sort();
    out
}

#[test]
fn a_tiny_crate_with_a_cycle_reports_it_with_lines() {
    let graph = tiny_crate(&[
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\npub fn root_helper() {}\n",
        ),
        (
            "a.rs",
            "use crate::b::Thing;\n\npub fn f() -> Thing { todo!() }\n",
        ),
        (
            "b.rs",
            "pub struct Thing;\nfn g() {\n    super::a::f();\n}\n",
        ),
        ("c.rs", "fn h() { crate::a::f(); crate::root_helper(); }\n"),
        ("d/mod.rs", "mod e;\nfn i() { e::j(); }\n"),
        ("d/e.rs", "pub fn j() { super::super::c::k(); }\n"),
    ]);
    assert_eq!(
        cycle_files(&graph),
        [vec!["a.rs".to_string(), "b.rs".to_string()]]
    );
    let a = graph.files.iter().position(|f| f == "a.rs").unwrap();
    let b = graph.files.iter().position(|f| f == "b.rs").unwrap();
    assert_eq!(
        graph.edges[a][&b],
        Example {
            line: 1,
            path: "crate::b::Thing".into()
        }
    );
    assert_eq!(
        graph.edges[b][&a],
        Example {
            line: 3,
            path: "super::a::f".into()
        }
    );
    assert_eq!(
        edge_list(&graph),
        [
            "a.rs -> b.rs",
            "b.rs -> a.rs",
            "c.rs -> a.rs",
            "c.rs -> lib.rs",
            "d/e.rs -> c.rs",
            "d/mod.rs -> d/e.rs",
        ]
    );
    let described = describe_cycle(&graph, &[a, b], "crates/x/src/");
    assert!(
        described.contains("a.rs -> b.rs   crates/x/src/a.rs:1: crate::b::Thing"),
        "{described}"
    );
}

#[test]
fn reexports_are_not_edges_but_paths_through_them_lead_to_the_item() {
    let graph = tiny_crate(&[
        // The root re-exports its children and uses neither: no edge out of it.
        (
            "lib.rs",
            "mod a;\nmod b;\npub use a::Thing;\npub(crate) use b::{Other, self};\n",
        ),
        (
            "a.rs",
            "pub struct Thing;\nfn f() -> crate::Other { todo!() }\n",
        ),
        ("b.rs", "pub struct Other;\n"),
        // `crate::Thing` is `a::Thing`: an edge to a.rs, not to the root.
        ("c.rs", "use crate::Thing;\n"),
        // A parent that re-exports a child's item and uses it depends on it.
        (
            "d/mod.rs",
            "mod e;\npub use e::Used;\nfn g() -> Used { todo!() }\n",
        ),
        ("d/e.rs", "pub struct Used;\n"),
    ]);
    assert_eq!(
        edge_list(&graph),
        ["a.rs -> b.rs", "c.rs -> a.rs", "d/mod.rs -> d/e.rs"]
    );
    assert!(cycle_files(&graph).is_empty());
}

#[test]
fn test_code_comments_and_literals_are_not_edges() {
    let a = r##"
//! [`crate::b::Doc`] in a doc comment
/* crate::b::Block /* nested */ crate::b::StillBlock */
fn f() {
    let s = "crate::b::in_a_string\"";
    let c = '{';
    let q = '\'';
    let r = r#"super::b::raw"#;
    let l: &'static str = "";
}
#[cfg(test)]
#[allow(unused)]
mod tests {
    use crate::b::Nope;
    fn t() { let _ = '}'; let _ = "}"; crate::b::nope(); }
}
#[cfg(test)]
fn helper(x: [u8; 2]) { crate::b::nope(); }
#[cfg(test)]
mod more_tests;
pub fn after_tests() { crate::c::real(); }
"##;
    let graph = tiny_crate(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", a),
        ("a/more_tests.rs", "use crate::b::AlsoTestOnly;\n"),
        ("b.rs", "use crate::a::after_tests;\n"),
        ("c.rs", ""),
    ]);
    assert_eq!(
        graph.files,
        ["a.rs", "b.rs", "c.rs", "lib.rs"],
        "a test-only file is no node"
    );
    assert_eq!(edge_list(&graph), ["a.rs -> c.rs", "b.rs -> a.rs"]);
    let (a, c) = (0, 2);
    assert_eq!(
        graph.edges[a][&c].line, 21,
        "lines survive stripping: {:?}",
        graph.edges[a]
    );
}

#[test]
fn grouped_imports_are_read_path_by_path() {
    let graph = tiny_crate(&[
        ("lib.rs", "mod a;\nmod b;\nmod top;\n"),
        ("a.rs", "pub struct X;\n"),
        ("b/mod.rs", "mod c;\npub struct Y;\n"),
        ("b/c.rs", "pub struct Z;\n"),
        (
            "top.rs",
            "use crate::{\n    a::X,\n    b::{Y, c::Z as Zed, self},\n};\n\
             use std::{fmt, sync::Arc};\n",
        ),
    ]);
    assert_eq!(
        edge_list(&graph),
        ["top.rs -> a.rs", "top.rs -> b/c.rs", "top.rs -> b/mod.rs"]
    );
    let top = graph.files.iter().position(|f| f == "top.rs").unwrap();
    let lines: Vec<usize> = graph.edges[top].values().map(|e| e.line).collect();
    assert_eq!(lines, [2, 3, 3]);
}

#[test]
fn super_and_self_resolve_from_the_file_and_its_inline_modules() {
    let graph = tiny_crate(&[
        ("main.rs", "mod sql;\nmod cli;\npub struct CliError;\n"),
        ("cli.rs", "mod inline { use super::super::CliError; }\n"),
        (
            "sql/mod.rs",
            "mod scan;\npub(crate) fn helper() {}\nuse self::scan::Scan;\n",
        ),
        (
            "sql/scan.rs",
            "pub struct Scan;\nfn f() { super::helper(); }\n",
        ),
    ]);
    assert_eq!(
        edge_list(&graph),
        [
            "cli.rs -> main.rs",
            "sql/mod.rs -> sql/scan.rs",
            "sql/scan.rs -> sql/mod.rs"
        ]
    );
    assert_eq!(
        cycle_files(&graph),
        [vec!["sql/mod.rs".to_string(), "sql/scan.rs".to_string()]]
    );
}

#[test]
fn known_cycles_are_compared_both_ways() {
    let cycle = |files: &[&str]| Cycle {
        krate: "x".into(),
        files: files.iter().map(|f| f.to_string()).collect(),
    };
    let known: BTreeSet<Cycle> =
        [cycle(&["a.rs", "b.rs", "c.rs"]), cycle(&["d.rs", "e.rs"])].into();
    let found: BTreeSet<Cycle> =
        [cycle(&["a.rs", "b.rs"]), cycle(&["d.rs", "e.rs", "f.rs"])].into();
    let problems = compare_cycles(&found, &known, &BTreeMap::new());
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].starts_with("new cycle") && problems[0].contains("[\"f.rs\"] joined"));
    assert!(problems[1].starts_with("cycle gone") && problems[1].contains("[\"a.rs\", \"b.rs\"]"));
    assert!(compare_cycles(&known, &known, &BTreeMap::new()).is_empty());
}

#[test]
fn tarjan_finds_the_components_of_a_tiny_graph() {
    // 0 → 1 → 2 → 0 (a triangle), 2 → 3, 3 ⇄ 4, 4 → 5, 5 alone; 6 with a self-loop.
    let adjacency: &[&[usize]] = &[&[1], &[2], &[0, 3], &[4], &[3, 5], &[], &[6]];
    let edges: Vec<BTreeSet<usize>> = adjacency
        .iter()
        .map(|targets| targets.iter().copied().collect())
        .collect();
    let mut components = tarjan(&edges);
    components.sort();
    assert_eq!(
        components,
        vec![vec![0, 1, 2], vec![3, 4], vec![5], vec![6]]
    );
    // A component is completed after every component it reaches.
    let order = tarjan(&edges);
    let position = |m: usize| order.iter().position(|c| c.contains(&m)).unwrap();
    assert!(position(5) < position(3) && position(3) < position(0));
}

#[test]
fn map_rows_resolve_against_their_headings() {
    let doc = "\
# Title
## Other
| path | what |
|---|---|
| `ignored.rs` | outside the section |
## Source map
### Top level
| path | what lives there |
|---|---|
| `docs/` | documents |
### `crates/adisk-x`
| path | what lives there |
|---|---|
| `lib.rs` | the root |
| `sql/` | a folder |
| not a path | malformed |
| `../up.rs` | malformed |
### `crates/adisk-y`
## Limits
| `after.rs` | outside the section |
";
    let map = parse_map(doc);
    let paths = |rows: &[Row]| rows.iter().map(|row| row.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&map.top_level), ["docs/"]);
    assert_eq!(paths(&map.crates["adisk-x"].1), ["lib.rs", "sql/"]);
    assert_eq!(map.crates["adisk-x"].1[0].line, 14);
    assert!(map.crates["adisk-y"].1.is_empty());
    assert_eq!(map.malformed.len(), 2, "{:?}", map.malformed);
}

#[test]
fn a_crate_is_covered_by_its_own_rows_only() {
    let doc = "## Source map\n### `crates/a`\n| `lib.rs` | x |\n| `sql/` | y |\n\
               ### `crates/b`\n| `other.rs` | z |\n";
    let map = parse_map(doc);
    let files = [
        "lib.rs".to_string(),
        "sql/tpch/q.rs".to_string(),
        "other.rs".to_string(),
    ];
    // Paths are checked on disk from a root where none exists: every row is stale.
    let nowhere = Path::new("/nonexistent-root-of-structure-test");
    let problems = crate_problems(nowhere, "a", &files, &map);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("a: `other.rs` is in no row")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("a: `lib.rs` (docs/architecture.md:3) does not exist"))
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("a: `sql/` (docs/architecture.md:4) is not a folder"))
    );
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("`sql/tpch/q.rs` is in no row"))
    );
    let missing = crate_problems(nowhere, "c", &files, &map);
    assert!(missing[0].starts_with("c: no subsection"), "{missing:?}");
}

#[test]
fn the_diagram_names_crates_as_whole_words() {
    let doc = "  adisk-sim ──► adisk-core\n  (adisk-host)\nAt run time:\n adisk-disk\n";
    let crates: Vec<String> = [
        "adisk",
        "adisk-core",
        "adisk-disk",
        "adisk-host",
        "adisk-sim",
    ]
    .iter()
    .map(|name| name.to_string())
    .collect();
    let problems = diagram_problems(doc, &crates);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("adisk: not named") && problems[1].starts_with("adisk-disk:"));
}
