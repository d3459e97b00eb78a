//! `adisk app dmine` (frequent itemsets, uysal §5 and chiu §4.2) on a multi-process cluster:
//! every method in both modes equals plain single-node Apriori over the regenerated
//! transactions, itemset by itemset and count by count.
mod common;

use adisk_apps::dmine::generator::{GenParams, Generator};
use adisk_apps::dmine::kernel;
use common::{Cluster, fails, json, ok, peaks_within_grants};
use serde_json::Value;
use std::collections::BTreeMap;

/// The data set of the tests: T8.I4.D3K over 200 items.
const TRANSACTIONS: u64 = 3000;
const SUPPORT: &str = "0.03";

fn load(c: &Cluster) {
    ok(
        c.dir(),
        &[
            "load",
            "dmine",
            "--transactions",
            &TRANSACTIONS.to_string(),
            "--avg-len",
            "8",
            "--pattern-len",
            "4",
            "--patterns",
            "40",
            "--items",
            "200",
            "--seed",
            "5",
        ],
    );
}

/// Apriori over the same transactions, generated here from the same parameters.
fn oracle() -> BTreeMap<Vec<u32>, u64> {
    let g = Generator::new(&GenParams {
        transactions: TRANSACTIONS,
        avg_transaction_len: 8.0,
        avg_pattern_len: 4.0,
        patterns: 40,
        items: 200,
        seed: 5,
    })
    .expect("generator");
    let min = kernel::min_count(0.03, TRANSACTIONS).expect("support");
    kernel::apriori(&g.transactions(0..TRANSACTIONS), min)
}

/// The itemsets a run listed (`--itemsets`).
fn itemsets(report: &Value) -> BTreeMap<Vec<u32>, u64> {
    report["result"]["itemsets"]
        .as_array()
        .expect("itemsets listed")
        .iter()
        .map(|e| {
            let items = e[0]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| i.as_u64().expect("item") as u32)
                .collect();
            (items, e[1].as_u64().expect("count"))
        })
        .collect()
}

/// Runs `adisk app dmine` with `extra` and checks it against `want` exactly.
fn run_and_check(c: &Cluster, want: &BTreeMap<Vec<u32>, u64>, extra: &[&str]) -> Value {
    let mut args = vec![
        "app",
        "dmine",
        "--support",
        SUPPORT,
        "--itemsets",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let report = json(&ok(c.dir(), &args));
    let result = &report["result"];
    assert_eq!(
        result["valid"], true,
        "{extra:?}: {}",
        result["first_mismatch"]
    );
    assert_eq!(result["mismatches"], 0);
    assert_eq!(&itemsets(&report), want, "{extra:?}");
    peaks_within_grants(&report);
    report
}

#[test]
fn dmine_active_every_method_equals_apriori() {
    let want = oracle();
    assert!(
        want.keys().any(|k| k.len() >= 5),
        "support too high to test"
    );
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "16", "--buffer-kib", "64"]);
    load(&c);
    let eclat = run_and_check(&c, &want, &[]);
    assert_eq!(eclat["result"]["method"], "eclat");
    let names: Vec<&str> = eclat["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // Eclat ships tid-lists disk to disk and mines every class at some disk.
    assert!(eclat["links"]["disk_to_disk_bytes"].as_u64().unwrap() > 0);
    let mined: u64 = eclat["phases"][2]["disks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["stages"].as_array().unwrap())
        .filter(|s| s["disklet"] == "dmine_eclat")
        .map(|s| s["flushes"].as_u64().unwrap())
        .sum();
    let classes: std::collections::BTreeSet<u32> =
        want.keys().filter(|k| k.len() == 2).map(|k| k[0]).collect();
    assert_eq!(mined, classes.len() as u64, "classes mined");

    // Count distribution at every pass, with eclat's original triangular pass-2 table.
    let count = run_and_check(
        &c,
        &want,
        &["--method", "count", "--pair-table", "triangular"],
    );
    let longest = want.keys().map(Vec::len).max().unwrap_or(0) as u64;
    let passes = count["result"]["passes"].as_u64().unwrap();
    assert!(
        passes == longest || passes == longest + 1,
        "{}",
        count["result"]
    );
    assert_eq!(count["phases"].as_array().unwrap().len() as u64, passes);
    assert_eq!(count["links"]["disk_to_disk_bytes"], 0);

    // Hybrid distribution on a 2 × 2 grid: rows exchange their transactions.
    let hybrid = run_and_check(&c, &want, &["--method", "hybrid", "--sections", "2"]);
    assert!(
        hybrid["result"]["sections"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s == 2)
    );
    assert!(hybrid["links"]["disk_to_disk_bytes"].as_u64().unwrap() > 0);
    // Eclat's receivers hold the tid-lists of the classes they mine: in a small scratch the
    // classes are mined in rounds (each scans the transactions again), still exact.
    let rounds = run_and_check(&c, &want, &["--scratch-kib", "96"]);
    let n = rounds["result"]["eclat_rounds"].as_u64().unwrap();
    assert!(n > 1, "{}", rounds["result"]);
    assert_eq!(rounds["phases"].as_array().unwrap().len() as u64, 2 + n);
    // A class larger than half the scratch cannot be mined at all: a clear error.
    let err = fails(
        c.dir(),
        &["app", "dmine", "--support", SUPPORT, "--scratch-kib", "48"],
    );
    assert!(err.contains("more than a disk mines at once"), "{err}");
}

#[test]
fn dmine_conventional_every_method_equals_apriori() {
    let want = oracle();
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "16", "--buffer-kib", "64"]);
    load(&c);
    for method in ["eclat", "count", "hybrid"] {
        let report = run_and_check(&c, &want, &["--mode", "conventional", "--method", method]);
        // The raw transactions went to the host; nothing moved between disks.
        let to_host = report["links"]["disk_to_host_bytes"].as_u64().unwrap();
        assert!(to_host > TRANSACTIONS * 8 * 4, "{to_host}");
        assert_eq!(report["links"]["disk_to_disk_bytes"], 0);
    }
}

#[test]
fn dmine_refuses_bad_parameters_clearly() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "16"]);
    let err = fails(c.dir(), &["app", "dmine", "--table", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let err = fails(c.dir(), &["load", "dmine", "--transactions", "0"]);
    assert!(err.contains("transactions must be positive"), "{err}");
    let err = fails(
        c.dir(),
        &["load", "dmine", "--transactions", "10", "--items", "0"],
    );
    assert!(err.contains("items must be positive"), "{err}");
    ok(
        c.dir(),
        &[
            "load",
            "dmine",
            "--transactions",
            "2000",
            "--items",
            "200",
            "--patterns",
            "40",
            "--avg-len",
            "6",
        ],
    );
    for support in ["0", "-0.1", "1.5", "NaN"] {
        let err = fails(c.dir(), &["app", "dmine", &format!("--support={support}")]);
        assert!(err.contains("support must be in (0, 1]"), "{err}");
    }
    let err = fails(c.dir(), &["app", "dmine", "--method", "nope"]);
    assert!(err.contains("unknown method `nope`"), "{err}");
    let err = fails(c.dir(), &["app", "dmine", "--mode", "sideways"]);
    assert!(err.contains("unknown mode `sideways`"), "{err}");
    let err = fails(
        c.dir(),
        &["app", "dmine", "--method", "hybrid", "--sections", "3"],
    );
    assert!(err.contains("cannot be split into groups for 3"), "{err}");
    let err = fails(c.dir(), &["app", "dmine", "--scratch-kib", "0"]);
    assert!(err.contains("must be positive"), "{err}");
    // Scratch too small for the pair table: refused before pass 2 (triangular), or by the
    // disk when the sparse table outgrows it.
    let small = ["--support", "0.005", "--scratch-kib", "16"];
    let err = fails(
        c.dir(),
        &[&["app", "dmine", "--pair-table", "triangular"], &small[..]].concat(),
    );
    assert!(
        err.contains("too small for the triangular pair table"),
        "{err}"
    );
    let err = fails(c.dir(), &[&["app", "dmine"], &small[..]].concat());
    assert!(
        err.contains("dmine_pairs") && err.contains("needs more scratch than granted"),
        "{err}"
    );
    // A table that is not transactions.
    ok(
        c.dir(),
        &["load", "tpch", "--sf", "0.001", "--tables", "nation"],
    );
    let err = fails(c.dir(), &["app", "dmine", "--table", "nation"]);
    assert!(err.contains("holds transactions"), "{err}");
    // After all of it, a run still works.
    let out = json(&ok(
        c.dir(),
        &["app", "dmine", "--support", "0.05", "--format", "json"],
    ));
    assert_eq!(out["result"]["valid"], true, "{out}");
}

#[test]
fn dmine_methods_agree_at_40k_transactions_within_grants() {
    // Pass 2 hands out megabytes of counts per disk over many calls here, and eclat needs
    // rounds: every job must still stay within its grant, and every method find the same.
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "16", "--buffer-kib", "64"]);
    ok(c.dir(), &["load", "dmine", "--transactions", "40000"]);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "app",
            "dmine",
            "--support",
            "0.005",
            "--no-oracle",
            "--itemsets",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let report = json(&ok(c.dir(), &args));
        peaks_within_grants(&report);
        report
    };
    let eclat = run(&[]);
    let found = itemsets(&eclat);
    assert!(found.keys().any(|k| k.len() >= 4), "{}", eclat["result"]);
    let to_host = eclat["phases"][1]["disks"][0]["bytes_shipped_host"]
        .as_u64()
        .unwrap();
    assert!(to_host > 1 << 20, "pass 2 sent {to_host} bytes");
    for extra in [
        &["--method", "count"][..],
        &["--method", "hybrid", "--sections", "4"],
        &["--mode", "conventional", "--method", "count"],
    ] {
        assert_eq!(itemsets(&run(extra)), found, "{extra:?}");
    }
    // A disk killed mid-run: a typed error, nothing left held on the live disks.
    common::killed_mid_run_fails_cleanly(
        &c,
        &["dmine", "--support", "0.005", "--no-oracle"],
        common::disk_2_busy,
        None,
    );
}

#[test]
fn dmine_min_count_is_exact_when_support_times_transactions_is_whole() {
    // 0.0158 × 5 000 is 79.00000000000001 in floating point, whose ceiling is 80; the minimum
    // count is ceil(79) = 79, and the itemsets counted exactly 79 times are frequent.
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "16", "--buffer-kib", "64"]);
    ok(
        c.dir(),
        &[
            "load",
            "dmine",
            "--transactions",
            "5000",
            "--avg-len",
            "6",
            "--pattern-len",
            "3",
            "--patterns",
            "30",
            "--items",
            "100",
            "--seed",
            "2",
        ],
    );
    let g = Generator::new(&GenParams {
        transactions: 5000,
        avg_transaction_len: 6.0,
        avg_pattern_len: 3.0,
        patterns: 30,
        items: 100,
        seed: 2,
    })
    .expect("generator");
    let want = kernel::apriori(&g.transactions(0..5000), 79);
    assert!(
        want.values().any(|c| *c == 79),
        "no itemset counted 79 times"
    );
    for mode in ["active", "conventional"] {
        let report = json(&ok(
            c.dir(),
            &[
                "app",
                "dmine",
                "--support",
                "0.0158",
                "--mode",
                mode,
                "--itemsets",
                "--format",
                "json",
            ],
        ));
        let result = &report["result"];
        assert_eq!(result["min_count"], 79, "{mode}: {result}");
        // The app's own check (Apriori at the same count) agrees.
        assert_eq!(
            result["valid"], true,
            "{mode}: {}",
            result["first_mismatch"]
        );
        assert_eq!(itemsets(&report), want, "{mode}");
    }
    // A support with more digits than the run keeps exactly is refused, not rounded.
    let err = fails(
        c.dir(),
        &["app", "dmine", "--support", "0.01580000000000000001"],
    );
    assert!(err.contains("--support"), "{err}");
}
