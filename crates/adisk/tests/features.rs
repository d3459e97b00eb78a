//! The README's two commands share one build: every package `cargo run -p adisk` builds is
//! built by `cargo test --workspace` with the same features, so the second command compiles
//! only what the first did not (the test-only crates and the workspace's test targets).
//!
//! A dev-dependency that turns on a feature of a crate the binary also uses (proptest's `rand`
//! turned on getrandom 0.4's `std`, under tempfile and uuid, under DataFusion) makes Cargo
//! build that crate and everything above it twice: once for each feature set.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `package version` → its feature sets, as `cargo tree` resolves them for `args` (a package
/// built both for build scripts and for the target may have one set for each).
fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--offline", "--prefix", "none", "-f", "{p}|{f}"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        // "name v1.2.3 (path)" or "name v1.2.3": the name and version identify it.
        let id: String = package
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let features = features.trim_end_matches(" (*)").trim().to_string();
        map.entry(id).or_default().insert(features);
    }
    map
}

#[test]
fn the_demo_and_the_test_suite_build_dependencies_with_the_same_features() {
    let demo = features(&["-p", "adisk", "-e", "normal,build"]);
    let tests = features(&["--workspace", "-e", "normal,build,dev"]);
    assert!(
        demo.len() > 100,
        "cargo tree listed {} packages",
        demo.len()
    );
    let differ: Vec<String> = demo
        .iter()
        .filter_map(|(id, f)| match tests.get(id) {
            Some(t) if t == f => None,
            Some(t) => Some(format!("{id}: demo {f:?}, tests {t:?}")),
            None => Some(format!("{id}: built by the demo, not by the tests")),
        })
        .collect();
    assert!(
        differ.is_empty(),
        "packages the demo and the tests would build with different features (each is \
         compiled twice; give the workspace dependency the tests' features):\n{}",
        differ.join("\n")
    );
}
