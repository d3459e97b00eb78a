//! The data cube (`adisk app datacube`) on a multi-process cluster, both modes, against
//! DuckDB's `GROUP BY CUBE` over the same Parquet files.
mod common;

use common::{Cluster, fails, json, ok, peaks_within_grants};
use std::collections::BTreeMap;
use std::path::Path;

/// (mask, key values) → (sum, count).
type Cube = BTreeMap<(u32, Vec<i64>), (i64, i64)>;

/// The cube by DuckDB: `GROUP BY CUBE` over the fact table's Parquet files. `GROUPING(d0..)`
/// has d0 as its most significant bit, set when the column is rolled up.
fn duckdb_cube(dir: &Path, d: usize) -> Cube {
    let dims: Vec<String> = (0..d).map(|j| format!("d{j}")).collect();
    let list = dims.join(", ");
    let sql = format!(
        "SELECT {list}, GROUPING({list}), CAST(sum(measure) AS BIGINT), count(*) FROM datacube GROUP BY CUBE ({list})"
    );
    let mut cube = Cube::new();
    for row in common::duckdb(dir, &sql) {
        let g = row[d].as_u64().unwrap();
        let mask = (0..d)
            .filter(|j| g >> (d - 1 - j) & 1 == 0)
            .fold(0u32, |m, j| m | 1 << j);
        let key: Vec<i64> = (0..d)
            .filter(|j| mask >> j & 1 == 1)
            .map(|j| row[j].as_i64().unwrap())
            .collect();
        let v = (row[d + 1].as_i64().unwrap(), row[d + 2].as_i64().unwrap());
        assert!(cube.insert((mask, key), v).is_none());
    }
    cube
}

/// Every group-by's rows as the disks hold them, read back with `adisk sql` (one query over
/// all `cube_g<mask>` tables, rolled-up columns NULL).
fn stored_cube(dir: &Path, d: usize) -> Cube {
    let parts: Vec<String> = (0..1u32 << d)
        .map(|mask| {
            let cols: Vec<String> = (0..d)
                .map(|j| match mask >> j & 1 {
                    1 => format!("CAST(d{j} AS BIGINT) AS d{j}"),
                    _ => format!("CAST(NULL AS BIGINT) AS d{j}"),
                })
                .collect();
            format!(
                "SELECT {mask} AS m, {}, sum AS s, count AS c FROM cube_g{mask}",
                cols.join(", ")
            )
        })
        .collect();
    let sql = parts.join(" UNION ALL ");
    let rows = json(&ok(dir, &["sql", &sql, "--format", "json"]));
    let mut cube = Cube::new();
    for r in rows.as_array().expect("rows") {
        let mask = r["m"].as_u64().unwrap() as u32;
        let key: Vec<i64> = (0..d)
            .filter(|j| mask >> j & 1 == 1)
            .map(|j| r[format!("d{j}")].as_i64().unwrap())
            .collect();
        let v = (r["s"].as_i64().unwrap(), r["c"].as_i64().unwrap());
        assert!(cube.insert((mask, key), v).is_none(), "duplicate group {r}");
    }
    cube
}

fn assert_cubes_equal(got: &Cube, want: &Cube, what: &str) {
    if got != want {
        let missing = want.keys().filter(|k| !got.contains_key(k)).count();
        let extra = got.keys().filter(|k| !want.contains_key(k)).count();
        let wrong = want
            .iter()
            .filter(|(k, v)| got.get(k).is_some_and(|g| g != *v))
            .count();
        panic!(
            "{what}: {} groups vs DuckDB's {}: {missing} missing, {extra} extra, {wrong} wrong",
            got.len(),
            want.len()
        );
    }
}

#[test]
fn datacube_in_both_modes_equals_duckdb_cube() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "64"]);
    ok(
        c.dir(),
        &[
            "load",
            "datacube",
            "--rows",
            "60000",
            "--cards",
            "100,50,20,10",
            "--zipf",
            "1.0",
            "--seed",
            "7",
        ],
    );
    let oracle = duckdb_cube(c.dir(), 4);
    let active = json(&ok(
        c.dir(),
        &[
            "app",
            "datacube",
            "--memory-kib",
            "2048",
            "--format",
            "json",
        ],
    ));
    let result = &active["result"];
    assert_eq!(result["valid"], true, "{result}");
    peaks_within_grants(&active);
    // Several pipelines, later ones rooted at stored group-bys; tables filled and spilled.
    let pipelines = result["pipelines"].as_array().unwrap();
    assert!(pipelines.len() >= 2, "{result}");
    assert!(pipelines.iter().any(|p| !p["root"].is_null()), "{result}");
    assert!(result["table_spills"].as_u64().unwrap() > 0, "{result}");
    assert!(active["links"]["disk_to_disk_bytes"].as_u64().unwrap() > 0);
    assert_cubes_equal(&stored_cube(c.dir(), 4), &oracle, "active");

    let conventional = json(&ok(
        c.dir(),
        &[
            "app",
            "datacube",
            "--mode",
            "conventional",
            "--format",
            "json",
        ],
    ));
    assert_eq!(conventional["result"]["valid"], true);
    assert_eq!(conventional["result"]["groups"], active["result"]["groups"]);
    assert!(
        conventional["links"]["disk_to_host_bytes"]
            .as_u64()
            .unwrap()
            >= 60_000 * 24,
        "the host read every row"
    );
    assert_cubes_equal(&stored_cube(c.dir(), 4), &oracle, "conventional");
}

#[test]
fn datacube_out_of_core_on_small_disks() {
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "32"]);
    let rows = 2_800_000u64;
    ok(
        c.dir(),
        &[
            "load",
            "datacube",
            "--rows",
            &rows.to_string(),
            "--cards",
            "20,10,8,5",
            "--seed",
            "3",
        ],
    );
    let active = json(&ok(
        c.dir(),
        &["app", "datacube", "--memory-kib", "256", "--format", "json"],
    ));
    let result = &active["result"];
    assert_eq!(result["valid"], true, "{result}");
    let grants: u64 = peaks_within_grants(&active).values().sum();
    let input = result["input_bytes"].as_u64().unwrap();
    assert!(input >= 4 * grants, "input {input} bytes, grants {grants}");
    assert!(result["table_spills"].as_u64().unwrap() > 100, "{result}");
    let to_host = active["links"]["disk_to_host_bytes"].as_u64().unwrap();
    assert!(
        to_host < input / 100,
        "{to_host} bytes to the host: {}",
        active["phases"]
    );
    assert_cubes_equal(
        &stored_cube(c.dir(), 4),
        &duckdb_cube(c.dir(), 4),
        "out of core",
    );
    // A disk killed mid-run: a typed error, nothing left on the live disks (no grant, job,
    // inbox, temporary file or group-by table).
    common::killed_mid_run_fails_cleanly(
        &c,
        &["datacube", "--memory-kib", "256"],
        common::disk_2_busy,
        Some("cube_"),
    );
}

#[test]
fn datacube_refuses_bad_parameters_clearly() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8"]);
    let err = fails(c.dir(), &["app", "datacube", "--table", "nosuch"]);
    assert!(err.contains("input table `nosuch` is missing"), "{err}");
    let load = |cards: &str| {
        fails(
            c.dir(),
            &["load", "datacube", "--rows", "100", "--cards", cards],
        )
    };
    let err = load("");
    assert!(err.contains("dimension count 0"), "{err}");
    let err = load("2,2,2,2,2,2,2,2,2");
    assert!(err.contains("dimension count 9"), "{err}");
    let err = load("5,0,3");
    assert!(err.contains("cardinality of dimension 1 is 0"), "{err}");
    let err = load("5,x");
    assert!(err.contains("not a cardinality"), "{err}");
    let err = fails(c.dir(), &["load", "datacube", "--rows", "0"]);
    assert!(err.contains("at least 1"), "{err}");
    let err = fails(c.dir(), &["load", "datacube", "--rows", "10", "--zipf=-1"]);
    assert!(err.contains("zipf"), "{err}");
    ok(
        c.dir(),
        &["load", "datacube", "--rows", "5000", "--cards", "30,20,4"],
    );
    let err = fails(c.dir(), &["app", "datacube", "--memory-kib", "1"]);
    assert!(err.contains("too small"), "{err}");
    let err = fails(c.dir(), &["app", "datacube", "--memory-kib", "65536"]);
    assert!(err.contains("ask for less"), "{err}");
    let err = fails(c.dir(), &["app", "datacube", "--output", "datacube"]);
    assert!(err.contains("must differ"), "{err}");
    // A table that is not a fact table: no dimensions.
    ok(
        c.dir(),
        &["load", "tpch", "--sf", "0.001", "--tables", "nation"],
    );
    let err = fails(c.dir(), &["app", "datacube", "--table", "nation"]);
    assert!(err.contains("dimension count 0"), "{err}");
    // After all of it, the small cube still works.
    let out = json(&ok(c.dir(), &["app", "datacube", "--format", "json"]));
    assert_eq!(out["result"]["valid"], true, "{out}");
    assert_cubes_equal(&stored_cube(c.dir(), 3), &duckdb_cube(c.dir(), 3), "small");
}

#[test]
fn datacube_too_small_a_scratch_fails_naming_it_and_leaves_nothing() {
    // 40·25·10·6 = 60 000 groups in the finest group-by: about 12 000 per disk, 780 KB of
    // merge tables against 256 KiB. The merge does not spill: refused before any job runs.
    let c = Cluster::start(&["--disks", "4", "--memory-mib", "8", "--buffer-kib", "32"]);
    ok(
        c.dir(),
        &[
            "load",
            "datacube",
            "--rows",
            "100000",
            "--cards",
            "40,25,10,6",
            "--seed",
            "3",
        ],
    );
    let err = fails(c.dir(), &["app", "datacube", "--memory-kib", "256"]);
    assert!(err.contains("--memory-kib"), "{err}");
    let status = common::status_json(c.dir());
    assert!(!status.to_string().contains("cube_g"), "{status}");
    for d in 0..4 {
        let tables = c.dir().join(format!("disk-{d}")).join("tables");
        let left: Vec<String> = std::fs::read_dir(&tables)
            .expect("tables")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("cube_"))
            .collect();
        assert!(left.is_empty(), "disk {d} keeps {left:?}");
    }
}
