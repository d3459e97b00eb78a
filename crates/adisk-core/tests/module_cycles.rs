//! Module cycles inside each workspace crate, checked against an allow-list that only shrinks.
//!
//! Crates by concern and no cycles (docs/architecture.md, *Source map*): Cargo already forbids
//! cycles between crates; this test looks inside each crate. It builds the graph of the crate's
//! modules, finds its strongly connected components (Tarjan) and compares those with more than
//! one module with [`ALLOWED`], the cycles known today (the debt of issue 35):
//!
//! - a cycle not in the list fails the test (a new knot, or a listed one that grew);
//! - a listed cycle no longer found fails it too, with "cycle gone: remove it from the
//!   allow-list", so the list only ever shrinks.
//!
//! `cargo test -p adisk-core --test module_cycles -- --nocapture` prints every cycle found and
//! the edges inside it (which file reaches into which).
//!
//! # The heuristic (std only, no parser)
//!
//! - **A module is a file** under `crates/NAME/src`: `lib.rs` / `main.rs` is the crate root
//!   (written `crate`), `foo.rs` and `foo/mod.rs` are `foo`, `foo/bar.rs` is `foo::bar`. Inline
//!   modules (`mod v2 { … }`) belong to their file.
//! - The source is read without comments (doc comments included), string and character
//!   literals; every item under `#[cfg(test)]` (the `mod tests { … }` blocks, test-only
//!   helpers) is skipped by matching braces up to the item's closing `}` (or its `;`).
//! - **Edges** come from paths: `crate::…`, `super::…` (relative to the file and its inline
//!   modules), `self::…`, and `child::…` where `child` is a module file under the current one
//!   (a parent that calls into its children), in `use` trees (`use crate::{a::X, b::{c, d}}`)
//!   and anywhere in code (`crate::a::f()`). A path names the deepest existing module among its
//!   prefixes: `crate::a::b::Item` is an edge to `a::b` if that file exists, else to `a`, else
//!   to the root.
//! - **Re-exports are not edges**: `pub use child::Item;` only forwards a name. A path through a
//!   re-export (`crate::Item`) is an edge to the module the item comes from, not to the module
//!   that re-exports it. Glob re-exports are not followed (there are none today).
//! - Paths through other crates (`adisk_core::…`) are ignored; Cargo keeps crates acyclic.
//!
//! What it may miss: names brought in by a glob `use` and then used bare, and macros that
//! build paths. What it may add: an edge from a name that shadows a child module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The cycles known today: per crate, the sorted modules of one strongly connected component.
/// Entries only go (when a cycle is cut the test says so, with what is left of it, which
/// replaces it); a new cycle, or a module joining a listed one, is cut, not listed.
const ALLOWED: &[(&str, &[&str])] = &[
    // The binary: main.rs dispatches to every subcommand, and the subcommands use main.rs's
    // `CliError` and helpers (and `output`, `local`). `bench_remote`, `bench_remote_peers` and
    // `files_http` (f568038, written before this check existed) joined it the same way.
    (
        "adisk",
        &[
            "app_cmd",
            "bench",
            "bench_app",
            "bench_checksum",
            "bench_exchange",
            "bench_fair",
            "bench_faults",
            "bench_remote",
            "bench_remote_peers",
            "bench_serve",
            "bench_tpch",
            "cert_cmd",
            "chaos",
            "crate",
            "disklet_cmd",
            "files_http",
            "local",
            "output",
            "py_server",
            "repair_cmd",
            "serve_cmd",
            "sql_cmd",
        ],
    ),
    (
        "adisk-apps",
        &[
            "cluster",
            "conv::disklets",
            "conv::kernel",
            "crate",
            "earth",
            "sort",
        ],
    ),
    (
        "adisk-disk",
        &["crate", "peer_probe", "repair", "service", "user_actions"], // peer_probe: FlightPipeConnector lives in service.rs
    ),
    (
        "adisk-diskos",
        &[
            "apps",
            "crate",
            "disklet",
            "disklets",
            "disklets::bloom_probe",
            "disklets::fragment",
            "disklets::hash_join",
            "disklets::merge",
            "disklets::partition",
            "disklets::select",
            "exchange",
            "expr",
            "fused",
            "job",
            "late",
            "memory",
            "sched",
            "stream",
            "user",
            "wiring",
        ],
    ),
    // Until issue 35 moved `TokenBucket` out of `sql/mod.rs` into `throttle.rs`, these two
    // and `jobs` and `relay` were one knot of 16 modules.
    ("adisk-host", &["cluster", "links"]),
    (
        "adisk-host",
        &[
            "sql",
            "sql::broadcast",
            "sql::bundling",
            "sql::central",
            "sql::colocate",
            "sql::cost",
            "sql::distribute",
            "sql::placeholders",
            "sql::reduce",
            "sql::report",
            "sql::rules",
            "sql::scan",
        ],
    ),
    (
        "adisk-sim",
        &[
            "cli",
            "conclusions",
            "conclusions::acharya",
            "conclusions::chiu",
            "conclusions::memik",
            "conclusions::riedel",
            "conclusions::uysal",
            "sensitivity",
        ],
    ),
    (
        "adisk-sim",
        &[
            "workload",
            "workload::apps",
            "workload::chiu",
            "workload::riedel",
            "workload::tpc",
        ],
    ),
    ("adisk-storage", &["staging", "store"]),
    ("adisk-wasm", &["host", "runtime", "validate"]),
];

/// One crate's modules and the edges between them.
struct ModuleGraph {
    /// Module paths (`[]` is the root), indexed by node number.
    modules: Vec<Vec<String>>,
    /// `edges[a]` = the modules `a` refers to, without `a` itself.
    edges: Vec<BTreeSet<usize>>,
}

/// A strongly connected component of more than one module, by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cycle {
    krate: String,
    modules: Vec<String>,
}

impl Cycle {
    /// Are all of this cycle's modules in `other`?
    fn is_within(&self, other: &Cycle) -> bool {
        self.modules.iter().all(|m| other.modules.contains(m))
    }

    /// This cycle's modules that are not in `other`.
    fn without(&self, other: &Cycle) -> Vec<String> {
        let mut rest = self.modules.clone();
        rest.retain(|m| !other.modules.contains(m));
        rest
    }
}

#[test]
fn module_cycles_are_only_the_allowed_ones() {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeSet::new();
    for krate in crate_names(&crates_dir) {
        let graph = module_graph(&crates_dir.join(&krate).join("src"));
        for component in tarjan(&graph.edges) {
            if component.len() < 2 {
                continue;
            }
            let cycle = Cycle {
                krate: krate.clone(),
                modules: sorted_names(&graph, &component),
            };
            print_cycle(&graph, &component, &cycle);
            found.insert(cycle);
        }
    }
    println!("{} module cycles", found.len());

    for (_, modules) in ALLOWED {
        let mut sorted = modules.to_vec();
        sorted.sort_unstable();
        assert_eq!(
            &sorted, modules,
            "allow-list entries are sorted: {modules:?}"
        );
    }
    let allowed: BTreeSet<Cycle> = ALLOWED
        .iter()
        .map(|(krate, modules)| Cycle {
            krate: krate.to_string(),
            modules: modules.iter().map(|m| m.to_string()).collect(),
        })
        .collect();
    let mut problems = Vec::new();
    for cycle in found.difference(&allowed) {
        let grown_from = allowed
            .iter()
            .find(|old| old.krate == cycle.krate && old.is_within(cycle));
        problems.push(match grown_from {
            Some(old) => format!(
                "new cycle (cut it; do not list it): {}: {:?} joined the allowed {:?}",
                cycle.krate,
                cycle.without(old),
                old.modules
            ),
            None => format!(
                "new cycle (cut it; do not list it): {}: {:?}",
                cycle.krate, cycle.modules
            ),
        });
    }
    for cycle in allowed.difference(&found) {
        let left = found
            .iter()
            .filter(|new| new.krate == cycle.krate && new.is_within(cycle))
            .map(|new| format!("{:?}", new.modules))
            .collect::<Vec<_>>();
        let rest = if left.is_empty() {
            String::new()
        } else {
            format!(" (what is left of it: {})", left.join(", "))
        };
        problems.push(format!(
            "cycle gone: remove it from the allow-list: {}: {:?}{rest}",
            cycle.krate, cycle.modules
        ));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

fn crate_names(crates_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(crates_dir)
        .expect("read crates/")
        .map(|entry| entry.expect("crates/ entry").path())
        .filter(|path| path.join("src").is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn sorted_names(graph: &ModuleGraph, component: &[usize]) -> Vec<String> {
    let mut names: Vec<String> = component
        .iter()
        .map(|&m| module_name(&graph.modules[m]))
        .collect();
    names.sort();
    names
}

fn module_name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

fn print_cycle(graph: &ModuleGraph, component: &[usize], cycle: &Cycle) {
    println!("cycle in {}: {}", cycle.krate, cycle.modules.join(", "));
    let members: BTreeSet<usize> = component.iter().copied().collect();
    let mut lines = Vec::new();
    for &from in component {
        for &to in graph.edges[from].intersection(&members) {
            lines.push(format!(
                "    {} -> {}",
                module_name(&graph.modules[from]),
                module_name(&graph.modules[to])
            ));
        }
    }
    lines.sort();
    for line in lines {
        println!("{line}");
    }
}

// ---------------------------------------------------------------------------------------------
// The graph of one crate.

fn module_graph(src: &Path) -> ModuleGraph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: Vec<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    let index: BTreeMap<Vec<String>, usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.clone(), i))
        .collect();

    let parsed: Vec<ParsedFile> = files
        .iter()
        .zip(&modules)
        .map(|(file, module)| {
            let text = fs::read_to_string(file).expect("read source");
            parse_file(&skip_cfg_test(&strip(&text)), module, &index)
        })
        .collect();
    let reexports: BTreeMap<usize, BTreeMap<String, Vec<String>>> = parsed
        .iter()
        .enumerate()
        .map(|(i, p)| (i, p.reexports.clone()))
        .collect();

    let mut edges = vec![BTreeSet::new(); modules.len()];
    for (from, file) in parsed.iter().enumerate() {
        for path in &file.paths {
            if let Some(to) = resolve(path, &index, &reexports, 0)
                && to != from
            {
                edges[from].insert(to);
            }
        }
    }
    ModuleGraph { modules, edges }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read source folder") {
        let path = entry.expect("source entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `lib.rs` / `main.rs` → `[]`, `a.rs` and `a/mod.rs` → `[a]`, `a/b.rs` → `[a, b]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("file name");
    let stem = last.trim_end_matches(".rs");
    let is_root = parts.is_empty() && (stem == "lib" || stem == "main");
    if !is_root && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The module a path names: its deepest existing prefix, followed through re-exports.
fn resolve(
    absolute: &[String],
    index: &BTreeMap<Vec<String>, usize>,
    reexports: &BTreeMap<usize, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Option<usize> {
    let (length, module) = (0..=absolute.len())
        .rev()
        .find_map(|k| index.get(&absolute[..k]).map(|&m| (k, m)))?;
    if depth < 8
        && let Some(name) = absolute.get(length)
        && let Some(target) = reexports[&module].get(name)
    {
        return resolve(target, index, reexports, depth + 1);
    }
    Some(module)
}

/// What one file refers to, as absolute module paths (crate root = `[]`).
struct ParsedFile {
    paths: Vec<Vec<String>>,
    /// Names this file re-exports (`pub use …`) → the absolute path they come from.
    reexports: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn parse_file(text: &str, module: &[String], index: &BTreeMap<Vec<String>, usize>) -> ParsedFile {
    let tokens = tokenize(text);
    let mut parsed = ParsedFile {
        paths: Vec::new(),
        reexports: BTreeMap::new(),
    };
    // Inline modules open here: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let scope: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word) if word == "use" => {
                let end = (i + 1..tokens.len())
                    .find(|&j| tokens[j] == Token::Punct(';'))
                    .unwrap_or(tokens.len());
                let public = i > 0 && is_visibility_end(&tokens[..i]);
                for (path, alias) in use_tree(&tokens[i + 1..end], &[]) {
                    let Some(absolute) = absolute_path(&path, &scope, module, index) else {
                        continue;
                    };
                    if public {
                        if let Some(name) = alias.or_else(|| path.last().cloned())
                            && name != "*"
                        {
                            parsed.reexports.insert(name, absolute);
                        }
                    } else {
                        parsed.paths.push(absolute);
                    }
                }
                i = end + 1;
                continue;
            }
            Token::Ident(_) if i == 0 || tokens[i - 1] != Token::PathSep => {
                if tokens.get(i + 1) == Some(&Token::PathSep) {
                    let mut path = Vec::new();
                    let mut j = i;
                    while let Some(Token::Ident(segment)) = tokens.get(j) {
                        path.push(segment.clone());
                        if tokens.get(j + 1) != Some(&Token::PathSep) {
                            break;
                        }
                        j += 2;
                    }
                    if let Some(absolute) = absolute_path(&path, &scope, module, index) {
                        parsed.paths.push(absolute);
                    }
                    i = j + 1;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    parsed
}

/// Do the tokens before a `use` end in a visibility (`pub`, `pub(crate)`, `pub(super)`, …)?
fn is_visibility_end(before: &[Token]) -> bool {
    match before.last() {
        Some(Token::Ident(word)) => word == "pub",
        Some(Token::Punct(')')) => {
            let open = before.iter().rposition(|t| *t == Token::Punct('('));
            open.is_some_and(|o| o > 0 && before[o - 1] == Token::Ident("pub".into()))
        }
        _ => false,
    }
}

/// A path as written in `scope` (the file's module plus its open inline modules), made absolute
/// if it starts in this crate: `crate`, `super`, `self`, or a child module of the file.
fn absolute_path(
    path: &[String],
    scope: &[String],
    module: &[String],
    index: &BTreeMap<Vec<String>, usize>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut absolute: Vec<String> = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "self" => scope.iter().chain(&path[1..]).cloned().collect(),
        "super" => {
            let mut base = scope.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.into_iter().chain(rest.iter().cloned()).collect()
        }
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if scope.len() != module.len() || !index.contains_key(&child) {
                return None;
            }
            module.iter().chain(path).cloned().collect()
        }
    };
    while absolute.last().is_some_and(|s| s == "self" || s == "*") {
        absolute.pop();
    }
    Some(absolute)
}

/// The paths of a `use` tree (the tokens between `use` and `;`), each with its alias.
fn use_tree(tokens: &[Token], prefix: &[String]) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word) if word == "as" => {
                if let Some(Token::Ident(alias)) = tokens.get(i + 1) {
                    out.push((path.clone(), Some(alias.clone())));
                }
                return out;
            }
            Token::Ident(segment) => path.push(segment.clone()),
            Token::Punct('*') => path.push("*".to_string()),
            Token::PathSep => {}
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
        out.push((path, None));
    }
    out
}

fn matching_close(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (j, token) in tokens.iter().enumerate().skip(open) {
        match token {
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

fn split_top_level(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (j, token) in tokens.iter().enumerate() {
        match token {
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
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' || (c == '$' && chars.get(i + 1) == Some(&'c')) {
            let start = if c == '$' { i + 1 } else { i };
            i = start;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push(Token::Ident(word));
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push(Token::PathSep);
            i += 2;
            continue;
        }
        if !c.is_whitespace() {
            tokens.push(Token::Punct(c));
        }
        i += 1;
    }
    tokens
}

// ---------------------------------------------------------------------------------------------
// Reading the source: comments and literals out, `#[cfg(test)]` items out.

/// The source without comments and with every string and character literal emptied.
fn strip(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            continue;
        }
        // Raw strings: r"…", r#"…"#, br"…" (the `r` not inside an identifier).
        let raw_start = if c == 'r' && (i == 0 || !ident(chars[i - 1])) {
            Some(i + 1)
        } else if c == 'b' && next == Some('r') && (i == 0 || !ident(chars[i - 1])) {
            Some(i + 2)
        } else {
            None
        };
        if let Some(mut j) = raw_start {
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                j += 1;
                loop {
                    if j >= chars.len() {
                        break;
                    }
                    if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
                continue;
            }
        }
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
            continue;
        }
        if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}', '{'), or a lifetime ('a).
            if next == Some('\\') {
                // Past the backslash and the escaped character: '\'', '\\', '\n', '\u{…}'.
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
                continue;
            }
            if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The source without the items under `#[cfg(test)]` (up to the item's matching `}` or `;`).
fn skip_cfg_test(src: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        rest = &item[item_end(item)..];
    }
    out.push_str(rest);
    out
}

/// Where the item starting at `text` ends: after its body's matching `}`, or after its `;`.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    // Further attributes: `#[…]`.
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) == Some(&b'#') && bytes.get(i + 1) == Some(&b'[') {
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
        } else {
            break;
        }
    }
    let mut depth = 0;
    while i < bytes.len() {
        match bytes[i] {
            b';' if depth == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

// ---------------------------------------------------------------------------------------------
// Tarjan's strongly connected components.

/// The strongly connected components of a graph given as adjacency sets (Tarjan, 1972), each
/// sorted, in the order Tarjan completes them (a component before those that reach it).
fn tarjan(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index_w) if s.on_stack[w] => s.low[v] = s.low[v].min(index_w),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().expect("v is on the stack");
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort_unstable();
            s.components.push(component);
        }
    }
    let n = edges.len();
    let mut state = State {
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
            visit(&mut state, v);
        }
    }
    state.components
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
fn tarjan_of_a_chain_has_no_cycle() {
    let edges: Vec<BTreeSet<usize>> = vec![[1].into(), [2].into(), BTreeSet::new()];
    assert!(tarjan(&edges).iter().all(|c| c.len() == 1));
}

#[test]
fn reading_skips_comments_literals_and_test_items() {
    let src = r##"
//! [`crate::doc::Link`] in a doc comment
use crate::{a::X, b::{self, c::Y as Z}};
fn f() { let s = "crate::in_a_string\""; let c = '{'; let q = '\''; let r = r#"super::raw"#; crate::d::g(); }
#[cfg(test)]
#[allow(unused)]
mod tests { use crate::e::Nope; fn t() { let _ = '}'; } }
pub use crate::a::Reexported;
"##;
    let modules = ["", "a", "b", "b::c", "d", "e"];
    let index: BTreeMap<Vec<String>, usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let path = m.split("::").filter(|s| !s.is_empty()).map(String::from);
            (path.collect(), i)
        })
        .collect();
    let parsed = parse_file(&skip_cfg_test(&strip(src)), &[], &index);
    let names: Vec<String> = parsed.paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(names, ["a::X", "b", "b::c::Y", "d::g"]);
    assert_eq!(
        parsed.reexports.get("Reexported"),
        Some(&vec!["a".to_string(), "Reexported".to_string()])
    );
}
