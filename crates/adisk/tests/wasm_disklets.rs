//! User disklets in WebAssembly on a multi-process cluster: the C SDK examples are built from
//! source with clang + lld, installed on every disk and checked against host-side references
//! (DuckDB on the same Parquet files; the Rust convolution on regenerated images); hostile
//! modules are refused or contained, and the disks serve the next job correctly; installed
//! modules survive a restart and the second run reuses the compiled module.
mod common;
use common::{adisk, duckdb, fails, ok};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn json(dir: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend_from_slice(&["--format", "json"]);
    serde_json::from_str(&ok(dir, &a)).expect("json output")
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .or_else(|| v.as_f64().map(|f| f as i64))
        .unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn sdk() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk")
}

/// Builds an SDK example from source (clang --target=wasm32 + wasm-ld).
fn build(example: &str, out_dir: &Path) -> PathBuf {
    let out = out_dir.join(format!("{example}.wasm"));
    let run = Command::new(sdk().join("c/build.sh"))
        .arg(sdk().join(format!("c/examples/{example}.c")))
        .arg(&out)
        .output()
        .expect("sdk/c/build.sh runs");
    assert!(
        run.status.success(),
        "building {example}.c with sdk/c/build.sh failed (it needs clang and wasm-ld: `sudo apt-get install clang lld`, or run `./x setup`):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// A WAT module with the ABI v1 exports and plug-in bodies.
fn wat(dir: &Path, name: &str, imports: &str, memory: &str, init: &str, process: &str) -> PathBuf {
    let text = format!(
        r#"(module
  (import "adisk_v1" "emit" (func $emit (param i32 i32) (result i32)))
  {imports}
  (memory (export "memory") {memory})
  (func (export "adisk_input_area") (param i32) (result i32) (i32.const 65536))
  (func (export "adisk_init") (param i32 i32) (result i32) {init})
  (func (export "adisk_process") (param i32 i32 i64) (result i32) {process})
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#
    );
    let path = dir.join(format!("{name}.wat"));
    std::fs::write(&path, text).unwrap();
    path
}

struct Down<'a>(&'a Path);
impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = adisk(self.0, &["down"]);
    }
}

const WHERE: &str = "l_shipdate >= 1994-01-01; l_shipdate < 1995-01-01; l_discount >= 0.05; l_discount <= 0.07; l_quantity < 24";
const PREDICATE: &str = "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";
const COLUMNS: &str = "l_shipdate,l_discount,l_quantity";

fn wasm_count(dir: &Path) -> i64 {
    let out = json(
        dir,
        &[
            "disklet",
            "run",
            "count_if",
            "--table",
            "lineitem",
            "--columns",
            COLUMNS,
            "--param",
            &format!("where={WHERE}"),
        ],
    );
    out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| int(&r["count"]))
        .sum()
}

#[test]
fn wasm_examples_match_references_and_hostile_disklets_are_contained() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let wasm_dir = tmp.path().join("wasm");
    std::fs::create_dir_all(&wasm_dir).unwrap();
    ok(&dir, &["up", "--disks", "3"]);
    let _down = Down(&dir);
    ok(
        &dir,
        &["load", "tpch", "--sf", "0.01", "--tables", "lineitem"],
    );
    ok(&dir, &["load", "images", "--count", "5", "--side", "512"]);

    // Examples, built from source and installed on every disk.
    for example in ["count_if", "histogram", "convolve"] {
        let path = build(example, &wasm_dir);
        let out = ok(
            &dir,
            &[
                "disklet",
                "install",
                path.to_str().unwrap(),
                "--name",
                example,
            ],
        );
        assert_eq!(out.lines().count(), 4, "installed on 3 disks:\n{out}");
    }
    let listed: Value =
        serde_json::from_str(&ok(&dir, &["disklet", "list", "--format", "json"])).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d[1].as_array().unwrap().len() == 3),
        "{listed}"
    );

    // 1. count-if = DuckDB count, on all disks; select mode returns exactly that many positions.
    let expected = int(&duckdb(
        &dir,
        &format!("SELECT count(*) FROM lineitem WHERE {PREDICATE}"),
    )[0][0]);
    assert!(expected > 0);
    let counted = json(
        &dir,
        &[
            "disklet",
            "run",
            "count_if",
            "--table",
            "lineitem",
            "--columns",
            COLUMNS,
            "--param",
            &format!("where={WHERE}"),
        ],
    );
    assert_eq!(
        counted["stats"]["disks"].as_array().unwrap().len(),
        3,
        "ran on every disk"
    );
    assert_eq!(
        counted["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| int(&r["count"]))
            .sum::<i64>(),
        expected
    );
    let t = &counted["totals"];
    assert!(
        t["bytes_read"].as_u64().unwrap() > 0 && t["bytes_shipped_host"].as_u64().unwrap() > 0,
        "{t}"
    );
    let selected = json(
        &dir,
        &[
            "disklet",
            "run",
            "count_if",
            "--table",
            "lineitem",
            "--columns",
            COLUMNS,
            "--param",
            &format!("where={WHERE}"),
            "--param",
            "mode=select",
        ],
    );
    assert_eq!(selected["rows"].as_array().unwrap().len() as i64, expected);

    // 2. histogram of l_quantity (10 bins over [1, 51)) = DuckDB's, summed over disks.
    histogram_matches_duckdb(&dir, "histogram");

    // 3. the paper's convolution: every image byte-for-byte equal to the host-side reference.
    let conv_out = tmp.path().join("convolved");
    let conv = json(
        &dir,
        &[
            "disklet",
            "run",
            "convolve",
            "--file",
            "images",
            "--out",
            conv_out.to_str().unwrap(),
        ],
    );
    let files = conv["files"].as_array().unwrap();
    assert_eq!(files.len(), 5);
    assert_eq!(
        files
            .iter()
            .map(|f| f["disk"].as_u64().unwrap())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "images on every disk"
    );
    let kernel = [1, 2, 1, 2, 4, 2, 1, 2, 1];
    for i in 0..5u32 {
        let ours = std::fs::read(conv_out.join(adisk_storage::images::path(i))).unwrap();
        let reference = adisk_storage::images::convolve(
            &adisk_storage::images::generate(i, 512),
            512,
            &kernel,
            16,
        );
        assert!(ours == reference, "image {i} differs from the reference");
    }
    let sharpen = json(
        &dir,
        &[
            "disklet",
            "run",
            "convolve",
            "--file",
            "images/img-00001.gray",
            "--param",
            "kernel=0,-1,0,-1,5,-1,0,-1,0",
            "--param",
            "divisor=1",
            "--out",
            conv_out.to_str().unwrap(),
        ],
    );
    assert_eq!(sharpen["files"].as_array().unwrap().len(), 1);
    let ours = std::fs::read(conv_out.join(adisk_storage::images::path(1))).unwrap();
    assert!(
        ours == adisk_storage::images::convolve(
            &adisk_storage::images::generate(1, 512),
            512,
            &[0, -1, 0, -1, 5, -1, 0, -1, 0],
            1
        ),
        "sharpen"
    );

    // Hostile disklets. Refused at install: malformed, forbidden import (WASI), too much memory.
    let junk = wasm_dir.join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0 definitely not a module").unwrap();
    assert!(
        fails(
            &dir,
            &[
                "disklet",
                "install",
                junk.to_str().unwrap(),
                "--name",
                "junk"
            ]
        )
        .contains("malformed module")
    );
    let wasi = wat(
        &wasm_dir,
        "wasi",
        r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
        "16 16",
        "(i32.const 0)",
        "(i32.const 0)",
    );
    assert!(
        fails(
            &dir,
            &[
                "disklet",
                "install",
                wasi.to_str().unwrap(),
                "--name",
                "wasi"
            ]
        )
        .contains("forbidden import `wasi_snapshot_preview1::fd_write`")
    );
    let greedy = wat(
        &wasm_dir,
        "greedy",
        "",
        "1 65536",
        "(i32.const 0)",
        "(i32.const 0)",
    );
    assert!(
        fails(
            &dir,
            &[
                "disklet",
                "install",
                greedy.to_str().unwrap(),
                "--name",
                "greedy"
            ]
        )
        .contains("more than the grant")
    );
    // Contained at run time; after each, the disks answer the next job correctly.
    let hostile: [(&str, PathBuf, &str, &str); 5] = [
        (
            "spin",
            wat(
                &wasm_dir,
                "spin",
                "",
                "16 16",
                "(i32.const 0)",
                "(loop $l (br $l)) (i32.const 0)",
            ),
            "1024",
            "CPU budget exceeded",
        ),
        (
            "oob",
            wat(
                &wasm_dir,
                "oob",
                "",
                "16 16",
                "(i32.const 0)",
                "(drop (i32.load (i32.const 0x7ffffff0))) (i32.const 0)",
            ),
            "1024",
            "out of bounds",
        ),
        // grant = 64 KiB scratch + 576 KiB input area = 10 pages.
        (
            "grow",
            wat(
                &wasm_dir,
                "grow",
                "",
                "10 10",
                "(i32.const 0)",
                "(drop (memory.grow (i32.const 100))) (i32.const 0)",
            ),
            "64",
            "memory grant exceeded",
        ),
        (
            "flood",
            wat(
                &wasm_dir,
                "flood",
                "",
                "16 16",
                "(i32.const 0)",
                "(loop $l (drop (call $emit (i32.const 0) (i32.const 65536))) (br $l)) (i32.const 0)",
            ),
            "1024",
            "output limit exceeded",
        ),
        (
            "initrap",
            wat(
                &wasm_dir,
                "initrap",
                "",
                "16 16",
                "(unreachable)",
                "(i32.const 0)",
            ),
            "1024",
            "trapped during init",
        ),
    ];
    for (name, path, scratch, message) in &hostile {
        ok(
            &dir,
            &[
                "disklet",
                "install",
                path.to_str().unwrap(),
                "--name",
                name,
                "--scratch-kib",
                scratch,
            ],
        );
        let err = fails(
            &dir,
            &[
                "disklet",
                "run",
                name,
                "--table",
                "lineitem",
                "--columns",
                "l_quantity",
                "--fuel",
                "200000000",
            ],
        );
        assert!(err.contains(message), "{name}: {err}");
        assert_eq!(
            wasm_count(&dir),
            expected,
            "the cluster serves the next job after `{name}`"
        );
    }
    host_killed_while_a_disklet_loops(&dir);
    assert!(
        fails(&dir, &["disklet", "run", "nosuch", "--table", "lineitem"])
            .contains("no user disklet `nosuch`")
    );
    assert!(
        fails(
            &dir,
            &[
                "disklet",
                "run",
                "histogram",
                "--table",
                "lineitem",
                "--columns",
                "l_quantity",
                "--param",
                "column=l_nope",
                "--param",
                "bins=3",
                "--param",
                "min=0",
                "--param",
                "max=1"
            ]
        )
        .contains("bad parameter")
    );
    let status: Value = serde_json::from_str(&ok(&dir, &["status", "--format", "json"])).unwrap();
    assert!(
        status["disks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["memory_granted_bytes"].as_u64() == Some(0)),
        "every grant returned: {status}"
    );

    // Install once, run many: persisted across a restart; the first run after it compiles,
    // the second reuses the compiled module.
    ok(&dir, &["down"]);
    ok(&dir, &["up", "--disks", "3"]);
    let listed: Value =
        serde_json::from_str(&ok(&dir, &["disklet", "list", "--format", "json"])).unwrap();
    let count_if = listed[0][1]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "count_if")
        .unwrap()
        .clone();
    assert_eq!(count_if["compiled"], false, "{count_if}");
    let setup = |v: &Value| -> (u64, u64) {
        let stages: Vec<&Value> = v["stats"]["disks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| d["stages"].as_array().unwrap())
            .collect();
        (
            stages
                .iter()
                .map(|s| s["compile_ns"].as_u64().unwrap())
                .max()
                .unwrap(),
            stages
                .iter()
                .map(|s| s["instantiate_ns"].as_u64().unwrap())
                .max()
                .unwrap(),
        )
    };
    let run = |dir: &Path| {
        json(
            dir,
            &[
                "disklet",
                "run",
                "count_if",
                "--table",
                "lineitem",
                "--columns",
                COLUMNS,
                "--param",
                &format!("where={WHERE}"),
            ],
        )
    };
    let first = run(&dir);
    let second = run(&dir);
    let ((c1, i1), (c2, i2)) = (setup(&first), setup(&second));
    assert!(
        c1 > 0 && c2 == 0,
        "first run compiles ({c1} ns), second reuses ({c2} ns)"
    );
    eprintln!(
        "install once, run many: first run after restart compile {:.2} ms + instantiate {:.3} ms; second run compile 0 + instantiate {:.3} ms",
        c1 as f64 / 1e6,
        i1 as f64 / 1e6,
        i2 as f64 / 1e6
    );
    assert_eq!(
        second["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| int(&r["count"]))
            .sum::<i64>(),
        expected
    );
    ok(&dir, &["disklet", "remove", "spin"]);
    assert!(fails(&dir, &["disklet", "remove", "spin"]).contains("no disklet"));
}

/// Builds the Rust SDK's examples (`sdk/rust/build.sh`, cargo for wasm32-unknown-unknown).
fn build_rust(out_dir: &Path, examples: &[&str]) -> Vec<PathBuf> {
    let run = Command::new(sdk().join("rust/build.sh"))
        .arg(out_dir)
        .args(examples)
        .output()
        .expect("sdk/rust/build.sh runs");
    assert!(
        run.status.success(),
        "sdk/rust/build.sh failed (it needs `rustup target add wasm32-unknown-unknown`, or run `./x setup`):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    examples
        .iter()
        .map(|e| out_dir.join(format!("{e}.wasm")))
        .collect()
}

#[test]
fn rust_sdk_examples_match_duckdb() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    ok(&dir, &["up", "--disks", "2"]);
    let _down = Down(&dir);
    ok(
        &dir,
        &["load", "tpch", "--sf", "0.01", "--tables", "lineitem"],
    );
    let built = build_rust(&tmp.path().join("wasm-rust"), &["count_if", "histogram"]);
    for (path, name) in built.iter().zip(["count_if_rs", "histogram_rs"]) {
        ok(
            &dir,
            &["disklet", "install", path.to_str().unwrap(), "--name", name],
        );
    }
    // count_if (Rust) = DuckDB's count.
    let expected = int(&duckdb(
        &dir,
        &format!("SELECT count(*) FROM lineitem WHERE {PREDICATE}"),
    )[0][0]);
    let counted = json(
        &dir,
        &[
            "disklet",
            "run",
            "count_if_rs",
            "--table",
            "lineitem",
            "--columns",
            COLUMNS,
            "--param",
            &format!("where={WHERE}"),
        ],
    );
    let ours: i64 = counted["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| int(&r["count"]))
        .sum();
    assert_eq!(ours, expected);
    // histogram (Rust) of l_quantity = DuckDB's.
    histogram_matches_duckdb(&dir, "histogram_rs");
    // A bad parameter fails the Rust disklet cleanly, as the C one does.
    let err = fails(
        &dir,
        &[
            "disklet",
            "run",
            "count_if_rs",
            "--table",
            "lineitem",
            "--columns",
            COLUMNS,
            "--param",
            "where=no_such_column > 1",
        ],
    );
    assert!(!err.is_empty());
}

/// The histogram example `name` over l_quantity (10 bins over [1, 51)), summed over the
/// disks, equals DuckDB's on the same files.
fn histogram_matches_duckdb(dir: &Path, name: &str) {
    let hist = json(
        dir,
        &[
            "disklet",
            "run",
            name,
            "--table",
            "lineitem",
            "--columns",
            "l_quantity",
            "--param",
            "column=l_quantity",
            "--param",
            "bins=10",
            "--param",
            "min=1",
            "--param",
            "max=51",
        ],
    );
    let mut ours = [0i64; 10];
    for r in hist["rows"].as_array().unwrap() {
        ours[int(&r["bin"]) as usize] += int(&r["count"]);
    }
    let mut theirs = [0i64; 10];
    for r in duckdb(
        dir,
        "SELECT CAST(l_quantity * 100 AS BIGINT), count(*) FROM lineitem GROUP BY 1",
    ) {
        let v = int(&r[0]);
        if (100..5100).contains(&v) {
            theirs[((v - 100) * 10 / 5000) as usize] += int(&r[1]);
        }
    }
    assert_eq!(ours, theirs, "histogram {name}");
}

/// A disklet that loops without output (`spin`, with the largest CPU budget: it would run for
/// many minutes) while its host is killed: every disk stops it, and is back to no job, grant,
/// inbox or temporary file within the jobs' lease plus 10 s, counting the job abandoned.
fn host_killed_while_a_disklet_loops(dir: &Path) {
    let abandoned = |status: &Value| -> u64 {
        status["disks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["jobs_abandoned"].as_u64().unwrap())
            .sum()
    };
    let before = abandoned(&common::status_json(dir));
    let mut host = std::process::Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(["disklet", "run", "spin", "--table", "lineitem"])
        .args(["--columns", "l_quantity", "--fuel", "1000000000000"])
        .env_remove("ADISK_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let running = |s: &Value| -> u64 {
        s["disks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["jobs_running"].as_u64().unwrap_or(0))
            .sum()
    };
    common::wait_until("spin to run at the disks", Duration::from_secs(30), || {
        running(&common::status_json(dir)) > 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(host.try_wait().unwrap().is_none(), "spin ended by itself");
    host.kill().unwrap(); // SIGKILL
    host.wait().unwrap();
    let deadlines = adisk_core::config::Deadlines::default();
    let lease = deadlines.ping_interval() + deadlines.ping_timeout();
    let mut last = Value::Null;
    common::wait_until(
        "every disk to stop spin and free what it held",
        lease + Duration::from_secs(10),
        || {
            last = common::status_json(dir);
            last["disks"].as_array().unwrap().iter().all(|d| {
                d["jobs_running"] == 0
                    && d["jobs_waiting"] == 0
                    && d["memory_granted_bytes"] == 0
                    && d["exchange_inboxes"] == 0
                    && d["temp_files_bytes"] == 0
            })
        },
    );
    assert!(
        abandoned(&last) > before,
        "the stopped jobs are counted abandoned: {last}"
    );
}
