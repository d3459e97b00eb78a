//! The papers' applications on a multi-process cluster (`adisk app`), each against its oracle.
mod common;

use common::{Cluster, fails, json, ok, peaks_within_grants};
use std::path::Path;

#[test]
fn sort_out_of_core_in_both_modes_passes_valsort() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    let records = 1_300_000u64;
    ok(
        c.dir(),
        &["load", "sort", "--records", &records.to_string()],
    );
    let active = json(&ok(c.dir(), &["app", "sort", "--format", "json"]));
    let result = &active["result"];
    assert_eq!(result["valid"], true, "{result}");
    assert_eq!(result["records"], records);
    assert_eq!(result["unordered"], 0);
    assert_eq!(result["checksum"], result["input_checksum"]);
    // Out of core for real: the input is at least 4x the sum of the disks' grants.
    let grants: u64 = peaks_within_grants(&active).values().sum();
    assert!(
        records * 100 >= 4 * grants,
        "input {} bytes, grants {grants}",
        records * 100
    );
    // Several runs per disk, shipped disk to disk, almost nothing to the host.
    let runs = &active["phases"][1]["disks"][0]["stages"][0];
    assert_eq!(runs["disklet"], "sort_runs");
    assert!(runs["flushes"].as_u64().unwrap() >= 4, "{runs}");
    let links = &active["links"];
    assert!(links["disk_to_disk_bytes"].as_u64().unwrap() >= records * 100 * 3 / 4 * 9 / 10);
    assert!(links["disk_to_host_bytes"].as_u64().unwrap() < records);

    let conventional = json(&ok(
        c.dir(),
        &["app", "sort", "--mode", "conventional", "--format", "json"],
    ));
    assert_eq!(conventional["result"]["valid"], true);
    assert_eq!(
        conventional["result"]["checksum"],
        active["result"]["checksum"]
    );
    assert!(
        conventional["links"]["disk_to_host_bytes"]
            .as_u64()
            .unwrap()
            >= records * 100
    );
    // The runs are gone, the output stays; no temporary files are left.
    let status = common::status_json(c.dir());
    let text = status.to_string();
    assert!(!text.contains("sort_sorted_runs"), "{text}");
    assert!(text.contains("sort_sorted"), "{text}");
    for d in status["disks"].as_array().expect("disks") {
        assert_eq!(d["temp_files_bytes"], 0, "{d}");
    }
}

#[test]
fn sort_refuses_bad_parameters_clearly() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8"]);
    let err = fails(c.dir(), &["app", "sort", "--table", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let err = fails(c.dir(), &["load", "sort", "--records", "0"]);
    assert!(err.contains("at least 1"), "{err}");
    ok(c.dir(), &["load", "sort", "--records", "20000"]);
    let err = fails(c.dir(), &["app", "sort", "--mode", "sideways"]);
    assert!(err.contains("unknown mode `sideways`"), "{err}");
    let err = fails(c.dir(), &["app", "sort", "--run-kib", "8192"]);
    assert!(err.contains("needs twice that"), "{err}");
    let err = fails(c.dir(), &["app", "sort", "--output", "sort"]);
    assert!(err.contains("must differ"), "{err}");
    let err = fails(c.dir(), &["app", "nosuch"]);
    assert!(err.contains("nosuch"), "{err}");
    // A table that is not records.
    ok(
        c.dir(),
        &["load", "tpch", "--sf", "0.001", "--tables", "nation"],
    );
    let err = fails(c.dir(), &["app", "sort", "--table", "nation"]);
    assert!(err.contains("100-byte records"), "{err}");
    // After all of it, the small sort still works.
    let out = json(&ok(c.dir(), &["app", "sort", "--format", "json"]));
    assert_eq!(out["result"]["valid"], true, "{out}");
}

/// Rows of the join computed by DuckDB on the same files that `join_out` lacks, and the
/// other way round (each as a count of rows), and DuckDB's row count.
fn join_against_duckdb(dir: &Path) -> (i64, i64, i64) {
    let f = |p: &str| {
        (1..=7)
            .map(|i| format!("{p}.f{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let theirs = format!(
        "SELECT r.key, {}, s.key, {} FROM join_r r JOIN join_s s ON r.key = s.key",
        f("r"),
        f("s")
    );
    let ours = "SELECT * FROM join_out";
    let count = |sql: String| -> i64 { common::duckdb(dir, &sql)[0][0].as_i64().expect("a count") };
    (
        count(format!("SELECT count(*) FROM ({theirs} EXCEPT ALL {ours})")),
        count(format!("SELECT count(*) FROM ({ours} EXCEPT ALL {theirs})")),
        count(format!("SELECT count(*) FROM ({theirs})")),
    )
}

#[test]
fn join_out_of_core_in_both_modes_equals_duckdb() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    let rows = 900_000u64;
    ok(c.dir(), &["load", "join", "--rows", &rows.to_string()]);
    for mode in ["active", "conventional"] {
        let report = json(&ok(
            c.dir(),
            &["app", "join", "--mode", mode, "--format", "json"],
        ));
        let grants: u64 = peaks_within_grants(&report).values().sum();
        let (missing, extra, expected) = join_against_duckdb(c.dir());
        assert!(expected > 10_000, "{expected}");
        assert_eq!(
            (missing, extra),
            (0, 0),
            "{mode}: join_out differs from DuckDB's join"
        );
        assert_eq!(report["result"]["rows"], expected, "{mode}");
        if mode == "active" {
            // Out of core: both relations are at least 4x the disks' grants.
            assert!(2 * rows * 64 >= 4 * grants, "grants {grants}");
            let links = &report["links"];
            assert!(
                links["disk_to_host_bytes"].as_u64().unwrap() < 200_000,
                "{links}"
            );
        }
    }
    let err = fails(c.dir(), &["app", "join", "--right", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let err = fails(c.dir(), &["app", "join", "--output", "join_r"]);
    assert!(err.contains("must differ"), "{err}");
}

/// One key for every tuple (each key's cross product far larger than a stage's output
/// allowance: it used to spin forever at one disk), then relations with no key in common
/// (the conventional join used to leave no output table), both modes against DuckDB.
#[test]
fn join_of_one_repeated_key_and_join_of_nothing_equal_duckdb() {
    let c = Cluster::start(&["--disks", "3", "--memory-mib", "8", "--buffer-kib", "64"]);
    let load = |rows: &str, keys: &str, seed: &str| {
        ok(
            c.dir(),
            &[
                "load", "join", "--rows", rows, "--keys", keys, "--seed", seed,
            ],
        )
    };
    for (rows, keys, seed, expected) in
        [("450", "1", "5", 450 * 450), ("3000", "4000000000", "3", 0)]
    {
        load(rows, keys, seed);
        for mode in ["active", "conventional"] {
            let report = json(&ok(
                c.dir(),
                &["app", "join", "--mode", mode, "--format", "json"],
            ));
            assert_eq!(report["result"]["rows"], expected, "{mode}: {report}");
            let (missing, extra, theirs) = join_against_duckdb(c.dir());
            assert_eq!((missing, extra, theirs), (0, 0, expected), "{mode}");
            let count = ok(c.dir(), &["sql", "SELECT count(*) AS n FROM join_out"]);
            assert!(count.contains(&expected.to_string()), "{mode}: {count}");
        }
    }
    let status = common::status_json(c.dir());
    for d in status["disks"].as_array().expect("disks") {
        assert_eq!(d["jobs_running"], 0, "{d}");
        assert_eq!(d["jobs_stalled"], 0, "{d}");
        assert_eq!(d["temp_files_bytes"], 0, "{d}");
    }
}

#[test]
fn conv_with_any_square_kernel_matches_the_reference() {
    let c = Cluster::start(&["--disks", "3", "--memory-mib", "16", "--buffer-kib", "64"]);
    ok(
        c.dir(),
        &["load", "images", "--count", "24", "--side", "128"],
    );
    let run = |args: &[&str]| {
        let mut all = vec!["app", "conv", "--side", "128", "--format", "json"];
        all.extend_from_slice(args);
        json(&ok(c.dir(), &all))
    };
    for (args, k) in [
        (vec!["--kernel", "1,2,1,2,4,2,1,2,1"], 3),
        (vec!["--k", "5"], 5),
        (vec!["--k", "16"], 16),
        (
            vec![
                "--mode",
                "conventional",
                "--kernel",
                "0,-1,0,-1,5,-1,0,-1,0",
            ],
            3,
        ),
    ] {
        let report = run(&args);
        let result = &report["result"];
        assert_eq!(result["valid"], true, "{args:?}: {result}");
        assert_eq!(
            (result["images"].as_u64(), result["k"].as_u64()),
            (Some(24), Some(k))
        );
        peaks_within_grants(&report);
        let links = &report["links"];
        if args.contains(&"conventional") {
            assert!(links["disk_to_host_bytes"].as_u64().unwrap() >= 24 * 128 * 128);
        } else {
            assert!(
                links["disk_to_host_bytes"].as_u64().unwrap() < 10_000,
                "{links}"
            );
        }
    }
    let err = fails(
        c.dir(),
        &["app", "conv", "--side", "128", "--kernel", "1,2,3"],
    );
    assert!(err.contains("not square"), "{err}");
    let err = fails(c.dir(), &["app", "conv", "--side", "256"]);
    assert!(err.contains("not 256×256"), "{err}");
    let err = fails(c.dir(), &["app", "conv", "--side", "100"]);
    assert!(err.contains("multiple of 1024"), "{err}");
    let err = fails(
        c.dir(),
        &[
            "app",
            "conv",
            "--side",
            "128",
            "--kernel",
            "1,1,1,1",
            "--divisor",
            "0",
        ],
    );
    assert!(err.contains("divisor"), "{err}");
    // A disk killed mid-run: a typed error, no output or temporary file left.
    common::killed_mid_run_fails_cleanly(
        &c,
        &["conv", "--side", "128", "--k", "16"],
        common::disk_2_busy,
        Some("conv_out"),
    );
}

#[test]
fn earth_composite_equals_the_single_node_composite() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    let load = ["load", "earth", "--records", "400000", "--days", "20"];
    ok(
        c.dir(),
        &[&load[..], &["--width", "256", "--height", "128"]].concat(),
    );
    let run = |args: &[&str]| {
        let mut all = vec![
            "app",
            "earth",
            "--width",
            "256",
            "--height",
            "128",
            "--check",
            "400000,20,1",
            "--format",
            "json",
        ];
        all.extend_from_slice(args);
        json(&ok(c.dir(), &all))
    };
    let conventional = run(&["--mode", "conventional"]);
    let crc = conventional["result"]["crc32"].clone();
    assert_eq!(conventional["result"]["valid"], true, "{conventional}");
    let raw = conventional["links"]["disk_to_host_bytes"]
        .as_u64()
        .unwrap();
    // A window of 16 rows: the bands move and are shipped many times, still exact.
    for window in ["8", "2048"] {
        let active = run(&["--window-kib", window]);
        assert_eq!(active["result"]["valid"], true, "window {window}: {active}");
        assert_eq!(active["result"]["crc32"], crc);
        peaks_within_grants(&active);
        let shipped = active["links"]["disk_to_host_bytes"].as_u64().unwrap();
        let stage = &active["phases"][0]["disks"][0]["stages"][0];
        if window == "8" {
            assert!(stage["flushes"].as_u64().unwrap() > 20, "{stage}");
            assert!(shipped < raw, "{shipped} vs {raw}");
        } else {
            assert!(shipped * 10 < raw, "{shipped} vs {raw}");
        }
    }
    let err = fails(c.dir(), &["app", "earth", "--table", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let err = fails(c.dir(), &["app", "earth", "--window-kib", "8192"]);
    assert!(err.contains("do not fit"), "{err}");
    let err = fails(c.dir(), &["app", "earth", "--width", "0"]);
    assert!(err.contains("zero"), "{err}");
    let err = fails(c.dir(), &["load", "earth", "--records", "0"]);
    assert!(!err.is_empty());
    // A disk killed mid-run (bands moving often): a typed error, nothing left held.
    common::killed_mid_run_fails_cleanly(
        &c,
        &[
            "earth",
            "--width",
            "256",
            "--height",
            "128",
            "--window-kib",
            "8",
        ],
        common::disk_2_busy,
        None,
    );
}

#[test]
fn cluster_recovers_the_planted_clusters_like_a_single_node_run() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    ok(c.dir(), &["load", "cluster", "--points", "40000"]);
    let mut shipped = Vec::new();
    for mode in ["active", "conventional"] {
        let report = json(&ok(
            c.dir(),
            &[
                "app", "cluster", "--check", "--mode", mode, "--format", "json",
            ],
        ));
        let r = &report["result"];
        assert_eq!(r["valid"], true, "{mode}: {r}");
        assert_eq!(r["equals_single_node"], true, "{mode}: {r}");
        assert_eq!(
            (r["planted"].as_u64(), r["recovered"].as_u64()),
            (Some(3), Some(3))
        );
        peaks_within_grants(&report);
        shipped.push(report["links"]["disk_to_host_bytes"].as_u64().unwrap());
    }
    assert!(
        shipped[0] * 20 < shipped[1],
        "active {} vs conventional {}",
        shipped[0],
        shipped[1]
    );
    let err = fails(c.dir(), &["app", "cluster", "--alpha", "0.5"]);
    assert!(err.contains("alpha") || err.contains("α"), "{err}");
    let err = fails(c.dir(), &["app", "cluster", "--max-candidates", "5"]);
    assert!(err.contains("candidate units"), "{err}");
    let err = fails(c.dir(), &["app", "cluster", "--table", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let err = fails(
        c.dir(),
        &["load", "cluster", "--points", "100", "--dims", "1"],
    );
    assert!(!err.is_empty());
    // A disk killed mid-run: a typed error, nothing left held. Ten times the points, so that
    // the passes last long enough for the kill to land inside one.
    ok(c.dir(), &["load", "cluster", "--points", "400000"]);
    common::killed_mid_run_fails_cleanly(&c, &["cluster"], common::disk_2_busy, None);
}

#[test]
fn a_disk_killed_mid_sort_fails_the_run_cleanly() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    ok(c.dir(), &["load", "sort", "--records", "2000000"]);
    common::killed_mid_run_fails_cleanly(&c, &["sort"], common::big_grant, Some("sort_sorted"));
}

#[test]
fn a_disk_killed_mid_join_fails_the_run_cleanly() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "64"]);
    ok(c.dir(), &["load", "join", "--rows", "900000"]);
    common::killed_mid_run_fails_cleanly(&c, &["join"], common::big_grant, Some("join_out"));
}
