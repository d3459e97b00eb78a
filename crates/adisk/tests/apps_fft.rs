//! `adisk app fft` (chiu §4.4, the out-of-core 2-D FFT) on a multi-process cluster, against
//! numpy's `fft2` of the same input (`tests/oracle/numpy_fft2.py`).
mod common;

use common::{Cluster, fails, json, ok, peaks_within_grants};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> String {
    std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// numpy's fft2 of `input` compared with `output`, both read from the disks' Parquet files.
fn numpy_oracle(dir: &Path, input: &str, output: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/numpy_fft2.py");
    let out = Command::new(python())
        .arg(script)
        .arg(dir)
        .args([input, output])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "numpy oracle failed (./x setup installs numpy):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("oracle json")
}

fn check_result(result: &Value, rows: u64, cols: u64) {
    assert_eq!(result["valid"], true, "{result}");
    assert_eq!(
        (result["rows"].as_u64(), result["cols"].as_u64()),
        (Some(rows), Some(cols))
    );
    assert!(
        result["max_relative_error"].as_f64().unwrap() <= 1e-9,
        "{result}"
    );
    let peaks = result["peaks"].as_array().expect("peaks");
    assert_eq!(peaks.len(), 3, "{result}");
    for p in peaks {
        assert!(p["relative_difference"].as_f64().unwrap() < 0.05, "{p}");
    }
}

#[test]
fn fft_active_out_of_core_matches_numpy() {
    let c = Cluster::start(&[
        "--disks",
        "4",
        "--memory-mib",
        "8",
        "--buffer-kib",
        "64",
        "--buffers-per-stream",
        "1",
    ]);
    let (rows, cols) = (2048u64, 1024u64);
    ok(
        c.dir(),
        &[
            "load",
            "fft",
            "--rows",
            &rows.to_string(),
            "--cols",
            &cols.to_string(),
            "--seed",
            "7",
        ],
    );
    let report = json(&ok(
        c.dir(),
        &["app", "fft", "--seed", "7", "--format", "json"],
    ));
    let result = &report["result"];
    check_result(result, rows, cols);
    // Out of core for real: the matrix is at least 4x the sum of the disks' grants, and every
    // disk formed several runs on its own storage.
    let matrix = rows * cols * 16;
    let grants: u64 = peaks_within_grants(&report).values().sum();
    assert!(
        matrix >= 4 * grants,
        "matrix {matrix} bytes, grants {grants}"
    );
    for runs in result["runs_per_disk"].as_array().expect("runs") {
        assert!(runs.as_u64().unwrap() >= 4, "{result}");
    }
    // The transpose went disk to disk (3/4 of every row leaves its disk), not via the host.
    let links = &report["links"];
    assert!(links["disk_to_disk_bytes"].as_u64().unwrap() >= matrix * 3 / 4);
    assert!(
        links["disk_to_host_bytes"].as_u64().unwrap() < 64 * 1024,
        "{links}"
    );
    // numpy's fft2 of the same input; disk d holds the d-th block of output columns.
    let oracle = numpy_oracle(c.dir(), "fft", "fft_out");
    assert!(
        oracle["max_relative_error"].as_f64().unwrap() <= 1e-9,
        "{oracle}"
    );
    for d in 0..4u64 {
        let block = &oracle["column_blocks"][format!("disk-{d}")];
        assert_eq!(
            block,
            &serde_json::json!([d * 256, d * 256 + 255]),
            "{oracle}"
        );
    }
    // The runs are gone, no temporary files are left.
    let status = common::status_json(c.dir());
    assert!(!status.to_string().contains("fft_out_runs"), "{status}");
    for d in status["disks"].as_array().expect("disks") {
        assert_eq!(d["temp_files_bytes"], 0, "{d}");
    }
    // A disk killed mid-run: a typed error, no runs, output or temporary file left.
    common::killed_mid_run_fails_cleanly(
        &c,
        &["fft", "--seed", "7"],
        common::disk_2_busy,
        Some("fft_out"),
    );
}

#[test]
fn fft_both_modes_on_uneven_blocks_match_numpy() {
    // 3 disks, dimensions that are neither powers of two nor multiples of the disks.
    let c = Cluster::start(&["--disks", "3", "--memory-mib", "8", "--buffer-kib", "64"]);
    let (rows, cols) = (100u64, 70u64);
    ok(
        c.dir(),
        &[
            "load",
            "fft",
            "--rows",
            &rows.to_string(),
            "--cols",
            &cols.to_string(),
        ],
    );
    let active = json(&ok(
        c.dir(),
        &["app", "fft", "--cap-kib", "24", "--format", "json"],
    ));
    check_result(&active["result"], rows, cols);
    peaks_within_grants(&active);
    assert!(active["result"]["runs_per_disk"][0].as_u64().unwrap() >= 2);
    let oracle = numpy_oracle(c.dir(), "fft", "fft_out");
    assert!(
        oracle["max_relative_error"].as_f64().unwrap() <= 1e-9,
        "{oracle}"
    );

    let conventional = json(&ok(
        c.dir(),
        &[
            "app",
            "fft",
            "--mode",
            "conventional",
            "--output",
            "fft_conv",
            "--format",
            "json",
        ],
    ));
    check_result(&conventional["result"], rows, cols);
    assert!(
        conventional["links"]["disk_to_host_bytes"]
            .as_u64()
            .unwrap()
            >= rows * cols * 16,
        "{}",
        conventional["links"]
    );
    let oracle = numpy_oracle(c.dir(), "fft", "fft_conv");
    assert!(
        oracle["max_relative_error"].as_f64().unwrap() <= 1e-9,
        "{oracle}"
    );
    assert_eq!(
        oracle["column_blocks"]["disk-2"],
        serde_json::json!([46, 69])
    );
}

#[test]
fn fft_refuses_bad_parameters_clearly() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8"]);
    let err = fails(c.dir(), &["app", "fft"]);
    assert!(err.contains("input table `fft` is missing"), "{err}");
    let err = fails(c.dir(), &["load", "fft", "--rows", "0", "--cols", "8"]);
    assert!(err.contains("rows must be at least 1"), "{err}");
    let err = fails(c.dir(), &["load", "fft", "--rows", "8", "--cols", "0"]);
    assert!(err.contains("cols must be at least 1"), "{err}");
    ok(c.dir(), &["load", "fft", "--rows", "64", "--cols", "32"]);
    let err = fails(c.dir(), &["app", "fft", "--mode", "sideways"]);
    assert!(err.contains("unknown mode `sideways`"), "{err}");
    let err = fails(c.dir(), &["app", "fft", "--output", "fft"]);
    assert!(err.contains("must differ"), "{err}");
    // A run buffer that cannot hold one column: the grant is too small.
    let err = fails(c.dir(), &["app", "fft", "--cap-kib", "1"]);
    assert!(err.contains("too small for one column"), "{err}");
    // One larger than the disk's whole memory: DiskOS refuses the job, typed.
    let err = fails(c.dir(), &["app", "fft", "--cap-kib", "8192"]);
    assert!(err.contains("memory") || err.contains("budget"), "{err}");
    let err = fails(c.dir(), &["app", "fft", "--buffer-kib", "8"]);
    assert!(err.contains("16 to 16384 KiB"), "{err}");
    // A table that is not a matrix, and one whose elements do not fill rows x cols.
    ok(
        c.dir(),
        &["load", "tpch", "--sf", "0.001", "--tables", "nation"],
    );
    let err = fails(c.dir(), &["app", "fft", "--table", "nation"]);
    assert!(err.contains("not a matrix table"), "{err}");
    let file = c.dir().join("holey.parquet");
    let sql = format!(
        "COPY (SELECT (i // 8)::UINTEGER AS row, (i % 8)::UINTEGER AS col, 1.0::DOUBLE AS re, \
         0.0::DOUBLE AS im FROM range(63) t(i)) TO '{}' (FORMAT parquet)",
        file.display()
    );
    let made = Command::new(python())
        .args(["-c", &format!("import duckdb; duckdb.sql({sql:?})")])
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    ok(
        c.dir(),
        &["load", "parquet", "holey", file.to_str().unwrap()],
    );
    let err = fails(c.dir(), &["app", "fft", "--table", "holey"]);
    assert!(err.contains("not a whole 8 x 8 matrix"), "{err}");
    // After all of it, the small FFT still works and no output of a failed run is left.
    let out = json(&ok(c.dir(), &["app", "fft", "--format", "json"]));
    assert_eq!(out["result"]["valid"], true, "{out}");
}

#[test]
fn fft_tiny_matrices_pass_their_check_and_the_seed_comes_from_the_load() {
    // Shapes too small to hold the planted peaks above the noise: the output is checked
    // against fft2_plain and the direct DFT instead, and exact results pass.
    let c = Cluster::start(&["--disks", "3", "--memory-mib", "8", "--buffer-kib", "64"]);
    for (rows, cols) in [(2, 2), (1, 3), (2, 1), (3, 1), (4, 1), (1, 5), (1, 1)] {
        let (r, m) = (rows.to_string(), cols.to_string());
        let table = format!("fft_{rows}x{cols}");
        ok(
            c.dir(),
            &[
                "load", "fft", "--rows", &r, "--cols", &m, "--table", &table, "--seed", "3",
            ],
        );
        let modes: &[&str] = if rows * cols == 4 {
            &["active", "conventional"]
        } else {
            &["active"]
        };
        for mode in modes {
            let report = json(&ok(
                c.dir(),
                &[
                    "app", "fft", "--table", &table, "--mode", mode, "--format", "json",
                ],
            ));
            let result = &report["result"];
            assert_eq!(result["valid"], true, "{rows} x {cols} {mode}: {result}");
            assert_eq!(result["seed"], 3, "{result}");
            assert_eq!(result["peaks_checked"], false, "{result}");
            assert!(
                result["max_relative_error"].as_f64().unwrap() <= 1e-9,
                "{result}"
            );
            assert!(
                result["direct_dft_relative_error"].as_f64().unwrap() <= 1e-9,
                "{result}"
            );
        }
    }
    // A seed other than the recorded one is refused, naming both.
    let err = fails(
        c.dir(),
        &["app", "fft", "--table", "fft_2x2", "--seed", "4"],
    );
    assert!(
        err.contains("--seed 4") && err.contains("--seed 3"),
        "{err}"
    );
    ok(
        c.dir(),
        &["app", "fft", "--table", "fft_2x2", "--seed", "3"],
    );
}
