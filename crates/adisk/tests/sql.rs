//! SQL on the disks, end to end: 4 real disk processes, TPC-H generated at the disks.
//!
//! * `adisk tpch check` at SF 0.01 and 0.1 under every offload level — oracles: DuckDB's
//!   official answers and DuckDB run on the same Parquet files;
//! * the ad-hoc `.slt` queries (tests/sql/adhoc.slt, sqllogictest format, expected rows from
//!   DuckDB checked in) at every offload level; a wrong expected row and a malformed file fail;
//! * EXPLAIN / EXPLAIN ANALYZE on Q1, Q3, Q6, Q12, Q14: where each operator ran, shipped ≤ read;
//! * bad input: syntax, unknown column, type error, a Bloom filter larger than the grant, a
//!   disk killed mid-query — each a clear error, and the cluster serves the next query.
mod common;
use common::{adisk, fails, ok, status_json};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tpch_text(n: u32) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../adisk-host/src/sql/tpch/q{n:02}.sql"));
    std::fs::read_to_string(p).expect("query text")
}

struct Cluster(tempfile::TempDir);

impl Cluster {
    fn start(sf: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        ok(dir.path(), &["up", "--disks", "4"]);
        ok(dir.path(), &["load", "tpch", "--sf", sf]);
        Cluster(dir)
    }
    fn dir(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = adisk(self.0.path(), &["down"]);
    }
}

/// Offload levels `--offload all` runs (none, project, select, aggregate, semijoin, disks, auto).
const LEVELS: usize = 7;

fn check_all_levels(sf: &str) {
    let c = Cluster::start(sf);
    let out = ok(c.dir(), &["tpch", "check", "--sf", sf, "--offload", "all"]);
    assert!(
        out.contains(&format!("{} passed, 0 failed", 22 * LEVELS)),
        "TPC-H SF {sf}:\n{out}"
    );
}

#[test]
fn tpch_sf001_every_offload_level() {
    let c = Cluster::start("0.01");
    let check = |args: &[&str]| {
        let mut all = vec!["tpch", "check", "--sf", "0.01"];
        all.extend_from_slice(args);
        ok(c.dir(), &all)
    };
    let out = check(&["--offload", "all"]);
    assert!(
        out.contains(&format!("{} passed, 0 failed", 22 * LEVELS)),
        "TPC-H SF 0.01:\n{out}"
    );
    // memik's central unit: disk 0 does the host's combining work.
    let out = check(&["--offload", "disks,auto", "--central-unit", "0"]);
    assert!(out.contains("44 passed, 0 failed"), "central unit:\n{out}");
    let v = explain(c.dir(), false, &tpch_text(3), "disks");
    assert!(
        host_ops(&v).contains(&"SortPreservingMergeExec".to_string()),
        "Q3 at disks merges the disks' sorted streams at the host: {v}"
    );
    let central: Value = serde_json::from_str(&ok(
        c.dir(),
        &[
            "explain",
            &tpch_text(3),
            "--format",
            "json",
            "--offload",
            "disks",
            "--central-unit",
            "0",
        ],
    ))
    .unwrap();
    assert!(
        host_ops(&central).is_empty(),
        "Q3 with a central unit: nothing combines at the host: {central}"
    );
    // Tables stored on one disk (nation and region at SF 0.01): their global aggregations
    // and sorts run at that disk; the partition merges above them go. TPC-H's nation table
    // has 25 nations, 5 in each region.
    let sql_csv = |q: &str| {
        ok(
            c.dir(),
            &["sql", q, "--offload", "disks", "--format", "csv"],
        )
    };
    let n = sql_csv("select count(*) as n from nation join region on n_regionkey = r_regionkey");
    assert_eq!(n.trim(), "n\n25", "{n}");
    let per_region = sql_csv(
        "select n_regionkey, count(*) as n from nation group by n_regionkey order by n_regionkey",
    );
    assert_eq!(
        per_region.trim(),
        "n_regionkey,n\n0,5\n1,5\n2,5\n3,5\n4,5",
        "{per_region}"
    );
    auto_learns_from_its_runs(c.dir());
    link_figures_kept_between_queries(c.dir());
    // The plan a `disks` query falls back to when a disk runs out of memory: sort-merge
    // joins, only tiny build sides broadcast; every answer still right.
    let out = check(&["--offload", "disks", "--spill-joins"]);
    assert!(
        out.contains("22 passed, 0 failed"),
        "spilling joins:\n{out}"
    );
    let join = "select count(*) as n from lineitem join partsupp \
                on l_partkey = ps_partkey and l_suppkey = ps_suppkey";
    let spilling = explain_at_disks(c.dir(), join, &["--spill-joins"]);
    let stages = stages_text(&spilling);
    assert!(
        stages.contains("SortMergeJoinExec"),
        "lineitem ⋈ partsupp with --spill-joins:\n{stages}"
    );
    // memik's bundles as the execution unit: every operation its own DiskOS stage, and the
    // paper's relation; the answers stay right.
    for relation in ["none", "paper"] {
        let out = check(&["--offload", "disks", "--bundling", relation]);
        assert!(
            out.contains("22 passed, 0 failed"),
            "bundling {relation}:\n{out}"
        );
    }
    let bundled = explain_at_disks(c.dir(), &tpch_text(5), &["--bundling", "none"]);
    let stages = stages_text(&bundled);
    assert!(
        stages.contains(" bundles: bundle 0: "),
        "Q5's join stage as bundles:\n{stages}"
    );
    let analyzed = explain(c.dir(), true, &tpch_text(5), "disks");
    let per_disk = analyzed["control_messages"].as_u64().unwrap();
    assert_eq!(
        per_disk, 8,
        "one job per disk: a start and a statistics request each: {analyzed}"
    );
    let err = fails(c.dir(), &["sql", "select 1", "--bundling", "most"]);
    assert!(err.contains("unknown bundling `most`"), "{err}");
    // chiu's partially distributed system: every exchange through the host.
    ok(c.dir(), &["down"]);
    let up = ok(c.dir(), &["up", "--disks", "4", "--exchange", "via-host"]);
    first_query_plans_with_the_links_up_measured(c.dir(), &up);
    let out = check(&["--offload", "disks"]);
    assert!(out.contains("22 passed, 0 failed"), "via host:\n{out}");
}

/// The age and the probe of the link figures a line names: "(measured 1.2 s ago: 127.8 MiB
/// from 4 disks in 90 ms)".
fn figures_named(line: &str) -> (f64, String) {
    let at = line.find("(measured ").unwrap_or_else(|| panic!("{line}"));
    let rest = &line[at + "(measured ".len()..];
    let (age, probe) = rest
        .split_once(" s ago: ")
        .unwrap_or_else(|| panic!("{line}"));
    let probe = probe.split(')').next().unwrap().to_string();
    (age.parse::<f64>().unwrap(), probe)
}

/// The link figures an `auto` query planned with, from its `--stats` line.
fn figures_of_a_query(dir: &Path) -> (f64, String) {
    let out = adisk(
        dir,
        &[
            "sql",
            "--offload",
            "auto",
            "--stats",
            "select count(*) from nation",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("auto: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    figures_named(line)
}

/// `adisk up` measures the links and says so; the first query plans with those figures
/// instead of probing first (a full probe costs it ~0.4 s on loopback).
fn first_query_plans_with_the_links_up_measured(dir: &Path, up: &str) {
    let line = up
        .lines()
        .find(|l| l.trim_start().starts_with("links: host link"))
        .unwrap_or_else(|| panic!("`up` names the links it measured:\n{up}"));
    let (_, measured) = figures_named(line);
    assert!(dir.join("links.json").exists(), "the figures are kept");
    let (_, planned) = figures_of_a_query(dir);
    assert_eq!(planned, measured, "the first query planned with up's probe");
}

/// Two `adisk sql` processes in a row: the second plans with the link figures the first
/// measured (kept in DIR/links.json), not a probe of its own.
fn link_figures_kept_between_queries(dir: &Path) {
    let _ = std::fs::remove_file(dir.join("links.json"));
    let figures = || figures_of_a_query(dir);
    let (first_age, first) = figures();
    assert!(dir.join("links.json").exists(), "the figures are kept");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (second_age, second) = figures();
    assert_eq!(
        first, second,
        "the second process planned with the first's probe"
    );
    assert!(
        second_age >= first_age + 1.0,
        "{first_age} then {second_age}"
    );
}

/// `auto` keeps the wall times of the plans it ran, per connection (here one prompt session):
/// the first two runs of a query are the cost model's choice (the first warms up and is not
/// kept), the third tries the other plan or keeps the measured one; a plan tried runs twice
/// (its first run warms it up), so the fifth is decided by measurements. Every answer equals
/// the conventional plan's.
fn auto_learns_from_its_runs(dir: &Path) {
    use std::io::Write;
    let q = tpch_text(3);
    let q = q.trim().trim_end_matches(';');
    let mut child = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(["sql", "--offload", "auto", "--stats", "--format", "csv"])
        .env_remove("ADISK_HOME")
        .env_remove("ADISK_AUTO_FEEDBACK")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("adisk sql runs");
    let input = format!("{q};\n{q};\n{q};\n{q};\n{q};\n");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(input.as_bytes())
        .expect("statements written");
    drop(stdin);
    let out = child.wait_with_output().expect("adisk sql ends");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let choices: Vec<&str> = stderr.lines().filter(|l| l.starts_with("auto: ")).collect();
    assert_eq!(choices.len(), 5, "one choice per run:\n{stderr}");
    for c in &choices[..2] {
        assert!(
            !c.contains("(measured runs: ") && !c.contains("(trying "),
            "nothing measured before the first two runs (the first warms up, not kept): {c}"
        );
    }
    assert!(
        choices[2].contains("(measured runs: ") || choices[2].contains("(trying "),
        "the third run knows the second: {}",
        choices[2]
    );
    assert!(
        choices[4].contains("(measured runs: "),
        "the fifth run is decided by measurements: {}",
        choices[4]
    );
    let expected = ok(dir, &["sql", q, "--offload", "none", "--format", "csv"]);
    assert_eq!(
        stdout.trim(),
        [expected.trim(); 5].join("\n"),
        "each run's answer is the conventional plan's"
    );
}

#[test]
fn tpch_sf01_every_offload_level() {
    check_all_levels("0.1");
}

/// SF 1 takes minutes in a debug build: `cargo test -p adisk --test sql -- --ignored`.
#[test]
#[ignore]
fn tpch_sf1_every_offload_level() {
    check_all_levels("1");
}

fn explain(dir: &Path, analyze: bool, sql: &str, offload: &str) -> Value {
    let mut args = vec!["explain"];
    if analyze {
        args.push("analyze");
    }
    args.extend_from_slice(&[sql, "--format", "json", "--offload", offload]);
    serde_json::from_str(&ok(dir, &args)).expect("explain json")
}

/// `tpch check` at SF 0.01 of these queries at these levels; its output.
fn tpch_check_sf001(dir: &Path, offload: &str, queries: &str) -> String {
    let args = [
        "tpch",
        "check",
        "--sf",
        "0.01",
        "--offload",
        offload,
        "--queries",
        queries,
    ];
    ok(dir, &args)
}

/// EXPLAIN as JSON at `disks`, with more options.
fn explain_at_disks(dir: &Path, sql: &str, more: &[&str]) -> Value {
    let mut args = vec!["explain", sql, "--format", "json", "--offload", "disks"];
    args.extend_from_slice(more);
    serde_json::from_str(&ok(dir, &args)).expect("explain json")
}

fn disk_stages(v: &Value, table: &str) -> Vec<String> {
    v["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["where"] == "disk" && o["table"] == table)
        .flat_map(|o| {
            o["stages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
        })
        .collect()
}

fn host_ops(v: &Value) -> Vec<String> {
    v["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["where"] == "host")
        .map(|o| o["operator"].as_str().unwrap().to_string())
        .collect()
}

/// The data of `tests/sql/adhoc.slt`: TPC-H SF 0.01 and a small table with NULLs, from CSV.
/// Its expected rows were written by `adisk slt --complete` (DuckDB) on this data.
fn adhoc_cluster() -> Cluster {
    let c = Cluster::start("0.01");
    let csv = c.dir().join("t_nulls.csv");
    std::fs::write(&csv, "id,a,b,s\n1,1,1.5,alpha\n2,,2.5,beta\n3,3,,\n4,,,gamma\n5,2,0.5,alpha\n6,7,3.25,\n7,,4.0,beta\n").unwrap();
    ok(c.dir(), &["load", "csv", "t_nulls", csv.to_str().unwrap()]);
    c
}

fn adhoc_slt() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sql/adhoc.slt")
}

/// The checked-in expected rows are what `adisk slt` checks: one count off by one in a copy of
/// `adhoc.slt` fails that record (named by file and line) and only it; a malformed file is a
/// parse error naming its file and line.
#[test]
fn slt_wrong_expected_row_and_malformed_file_fail() {
    let c = adhoc_cluster();
    let dir = c.dir();
    let text = std::fs::read_to_string(adhoc_slt()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let sql = lines
        .iter()
        .position(|l| l.contains("l_shipdate BETWEEN DATE '1995-01-01'"))
        .expect("the shipdate count in adhoc.slt");
    assert!(lines[sql - 1].starts_with("query") && lines[sql + 1] == "----");
    let count: u64 = lines[sql + 2].parse().expect("a count");
    lines[sql + 2] = (count + 1).to_string();
    let wrong = dir.join("adhoc_wrong.slt");
    std::fs::write(&wrong, lines.join("\n") + "\n").unwrap();
    let out = adisk(dir, &["slt", wrong.to_str().unwrap(), "--offload", "auto"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "a wrong expected row passed:\n{stdout}"
    );
    let at = format!("adhoc_wrong.slt:{sql}  ");
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failed.len() == 1 && failed[0].contains(&at),
        "one failure, at {at}:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("-   {}", count + 1)) && stdout.contains(&format!("+   {count}")),
        "the diff shows the expected and the actual count:\n{stdout}"
    );
    assert!(stdout.contains("67 passed, 1 failed"), "{stdout}");

    let bad = dir.join("malformed.slt");
    std::fs::write(&bad, "query I\nSELECT 1\n----\n1\n\nselect 2\n").unwrap();
    let err = fails(dir, &["slt", bad.to_str().unwrap()]);
    assert!(
        err.contains("parse error") && err.contains("malformed.slt:6"),
        "{err}"
    );
}

#[test]
fn adhoc_sql_explain_and_bad_input() {
    let c = adhoc_cluster();
    let dir = c.dir();
    let slt = adhoc_slt();
    let out = ok(dir, &["slt", slt.to_str().unwrap(), "--offload", "all"]);
    assert!(
        out.contains(&format!("{} passed, 0 failed", 68 * LEVELS)),
        "slt:\n{out}"
    );

    // EXPLAIN: where each operator runs.
    for level in ["aggregate", "semijoin", "auto"] {
        let q1 = explain(dir, false, &tpch_text(1), level);
        let st = disk_stages(&q1, "lineitem");
        assert!(
            st.iter().any(|s| s.starts_with("select"))
                && st.iter().any(|s| s.contains("AggregateExec: mode=Partial")),
            "Q1 {level}: {st:?}"
        );
        assert!(
            host_ops(&q1).contains(&"AggregateExec".to_string()),
            "Q1 {level}: final aggregation at the host"
        );
        let q6 = explain(dir, false, &tpch_text(6), level);
        assert!(
            disk_stages(&q6, "lineitem")
                .iter()
                .any(|s| s.contains("AggregateExec: mode=Partial")),
            "Q6 {level}"
        );
    }
    let none = explain(dir, false, &tpch_text(6), "none");
    let st = disk_stages(&none, "lineitem");
    assert_eq!(st.len(), 1, "none ships whole rows only: {st:?}");
    assert!(host_ops(&none).contains(&"FilterExec".to_string()));
    let sel = explain(dir, false, &tpch_text(12), "select");
    assert!(
        disk_stages(&sel, "lineitem")
            .iter()
            .any(|s| s.starts_with("select")),
        "Q12 select at the disks"
    );
    assert!(
        !disk_stages(&sel, "lineitem")
            .iter()
            .any(|s| s.contains("Aggregate")),
        "no aggregation at the disks at level select"
    );
    let proj = explain(dir, false, &tpch_text(14), "project");
    assert!(
        !disk_stages(&proj, "lineitem")
            .iter()
            .any(|s| s.starts_with("select")),
        "no qualification at level project"
    );
    assert!(
        !disk_stages(&proj, "lineitem")[0].contains("l_comment"),
        "column elimination at level project"
    );
    let q3 = explain(dir, false, &tpch_text(3), "semijoin");
    let all: Vec<String> = ["orders", "lineitem"]
        .iter()
        .flat_map(|t| disk_stages(&q3, t))
        .collect();
    assert!(
        all.iter().any(|s| s.starts_with("bloom_probe")),
        "Q3 semijoin: a Bloom probe at the disks: {all:?}"
    );
    assert!(host_ops(&q3).contains(&"BloomBuildExec".to_string()));

    // Row estimates from the partitions' samples (a pattern, a range, two columns compared)
    // against the counts the query returns: within 2× (guessed, each was 25 %).
    for (table, pred) in [
        ("part", "p_name LIKE 'forest%'"),
        ("lineitem", "l_shipdate <= DATE '1998-09-02'"),
        ("lineitem", "l_commitdate < l_receiptdate"),
    ] {
        let count = |sql: &str| -> f64 {
            let out = ok(dir, &["sql", sql, "--format", "csv"]);
            out.lines().nth(1).unwrap().trim().parse().unwrap()
        };
        let sql = format!("SELECT count(*) AS n FROM {table} WHERE {pred}");
        let truth = count(&sql) / count(&format!("SELECT count(*) AS n FROM {table}"));
        let text = ok(dir, &["explain", &sql, "--offload", "disks"]);
        let est: f64 = text
            .split("qualification ≈")
            .nth(1)
            .and_then(|t| t.split('%').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no estimate for {pred}:\n{text}"));
        let ratio = est / 100.0 / truth;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "{pred}: estimated {est} %, keeps {truth}"
        );
    }

    // EXPLAIN ANALYZE: shipped ≤ scanned (both Arrow bytes) everywhere; shipped ≤ read from
    // storage (compressed Parquet) where the disks aggregate or filter hard. Q3 and Q12 ship the
    // small `customer`/`orders` whole at SF 0.01 (auto), so their shipped Arrow bytes exceed
    // the compressed bytes read.
    for n in [1, 3, 6, 12, 14] {
        let v = explain(dir, true, &tpch_text(n), "auto");
        let read = v["bytes_read"].as_u64().unwrap();
        let scanned = v["bytes_scanned"].as_u64().unwrap();
        let shipped = v["bytes_shipped"].as_u64().unwrap();
        assert!(
            read > 0 && shipped <= scanned,
            "Q{n}: shipped {shipped} > scanned {scanned}"
        );
        if [1, 6, 14].contains(&n) {
            assert!(shipped <= read, "Q{n}: shipped {shipped} > read {read}");
        }
        for s in v["scans"].as_array().unwrap() {
            assert!(
                s["stats"]["bytes_read"].as_u64().is_some(),
                "Q{n}: per-disk statistics"
            );
        }
    }
    let v = explain(dir, true, &tpch_text(3), "semijoin");
    let bloom: Vec<&Value> = v["scans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["bloom_keys"].is_u64())
        .collect();
    assert!(!bloom.is_empty(), "Q3 semijoin reports its filter");
    // The filter drops rows at the disks: most while the scan decodes (late
    // materialization), the rest (rows whose keys it could not test there) at its probe.
    let (at_probe, at_decode): (u64, u64) = bloom
        .iter()
        .map(|s| {
            let probe: u64 = s["stats"]["stages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|st| st["disklet"] == "bloom_probe")
                .map(|st| st["rows_in"].as_u64().unwrap() - st["rows_out"].as_u64().unwrap())
                .sum();
            let decode = s["stats"]["rows_dropped_at_decode"].as_u64().unwrap_or(0);
            (probe, decode)
        })
        .fold((0, 0), |(a, b), (p, d)| (a + p, b + d));
    assert!(
        at_probe + at_decode > 0,
        "the Bloom filter dropped rows at the disks"
    );
    let text = ok(
        dir,
        &["explain", "analyze", &tpch_text(3), "--offload", "semijoin"],
    );
    assert!(text.contains("false-positive rate measured"), "{text}");
    assert!(
        text.contains("qualified") && text.contains("semi-join") && text.contains("shipped"),
        "{text}"
    );

    // Bad input: clear errors, no panic, the cluster keeps serving.
    let e = fails(dir, &["sql", "SELEC l_orderkey FROM lineitem"]);
    assert!(e.contains("SELEC"), "{e}");
    let e = fails(dir, &["sql", "SELECT l_nosuch FROM lineitem"]);
    assert!(e.contains("l_nosuch"), "{e}");
    let e = fails(dir, &["sql", "SELECT l_orderkey + l_comment FROM lineitem"]);
    assert!(
        e.to_lowercase().contains("cannot") || e.contains("coerce") || e.contains("No function"),
        "{e}"
    );
    let e = fails(dir, &["sql", "SELECT 1 FROM nosuch_table"]);
    assert!(e.contains("nosuch_table"), "{e}");
    let e = fails(
        dir,
        &[
            "tpch",
            "query",
            "3",
            "--offload",
            "semijoin",
            "--bloom-kib",
            "1048576",
        ],
    );
    assert!(e.contains("bloom") && e.contains("grant"), "{e}");
    let e = fails(dir, &["sql", "SELECT 1", "--offload", "everything"]);
    assert!(e.contains("offload"), "{e}");
    let out = ok(
        dir,
        &[
            "sql",
            "SELECT count(*) AS n FROM lineitem",
            "--format",
            "csv",
        ],
    );
    assert!(out.contains("60175"), "{out}");

    // A disk dies in the middle of a query. The disks' reads are throttled so that Q21 at
    // the conventional level lasts seconds; the kill lands once disk 2 runs the query's job
    // and while the query is still running, and the query must fail naming the disk.
    ok(dir, &["down"]);
    ok(dir, &["up", "--disks", "4", "--disk-read-mbps", "4"]);
    let pid = common::disk_pids(dir)[2];
    let mut long = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args([
            "tpch",
            "query",
            "21",
            "--offload",
            "none",
            "--format",
            "csv",
        ])
        .env_remove("ADISK_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(
        "disk 2 to run a job of Q21",
        std::time::Duration::from_secs(60),
        || disk_jobs_running(dir, 2) > 0,
    );
    assert!(
        long.try_wait().unwrap().is_none(),
        "Q21 finished before the kill: the read throttle did not hold it"
    );
    // SAFETY: signalling a child disk process of this test's cluster.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let out = long.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !out.status.success(),
        "Q21 succeeded although disk 2 was killed mid-query"
    );
    assert!(
        err.contains("disk 2"),
        "the error names the killed disk: {err}"
    );
    common::wait_refused(dir, 2);
    let e = fails(dir, &["sql", "SELECT count(*) FROM orders"]);
    assert!(e.contains("disk 2") && e.contains("unreachable"), "{e}");
    // The same at `disks`: Q21's stages run at every disk, joined by exchanges. The query
    // fails, typed, and the surviving disks release every grant, inbox and temporary file.
    ok(dir, &["down"]);
    ok(dir, &["up", "--disks", "4", "--disk-read-mbps", "4"]);
    let pid = common::disk_pids(dir)[2];
    let mut long = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args([
            "tpch",
            "query",
            "21",
            "--offload",
            "disks",
            "--format",
            "csv",
        ])
        .env_remove("ADISK_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(
        "disk 2 to run a stage of Q21",
        std::time::Duration::from_secs(60),
        || disk_jobs_running(dir, 2) > 0,
    );
    assert!(
        long.try_wait().unwrap().is_none(),
        "Q21 at disks finished before the kill"
    );
    // SAFETY: signalling a child disk process of this test's cluster.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let started = std::time::Instant::now();
    let out = long.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !out.status.success(),
        "Q21 at disks with disk 2 killed: {err}"
    );
    assert!(err.contains("disk "), "the error names a disk: {err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the failure took {:?}",
        started.elapsed()
    );
    wait_released(dir, &[0, 1, 3], "after the failure", 30);
    // Restart the cluster on the same data: the next query is served.
    ok(dir, &["down"]);
    ok(dir, &["up", "--disks", "4", "--disk-read-mbps", "4"]);
    let out = ok(dir, &["tpch", "query", "6", "--sf", "0.01"]);
    assert!(out.contains("revenue"), "{out}");
    host_killed_mid_query(dir);
}

/// The host killed (SIGKILL) while Q21's stages run at every disk: no disk job outlives it.
/// Its connections close with its process, and each disk cancels the jobs they carried: every
/// grant, job, inbox and temporary file is back to zero within 10 s (`status`), and the disks
/// serve the next query.
fn host_killed_mid_query(dir: &Path) {
    let mut long = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(["tpch", "query", "21", "--offload", "disks"])
        .env_remove("ADISK_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(
        "every disk to run a stage of Q21",
        std::time::Duration::from_secs(60),
        || (0..4).all(|d| disk_jobs_running(dir, d) > 0),
    );
    assert!(long.try_wait().unwrap().is_none(), "Q21 finished first");
    long.kill().unwrap(); // SIGKILL
    long.wait().unwrap();
    wait_released(dir, &[0, 1, 2, 3], "after the host was killed", 10);
    ok(dir, &["down"]);
    ok(dir, &["up", "--disks", "4"]);
    let out = ok(dir, &["tpch", "query", "6", "--sf", "0.01"]);
    assert!(out.contains("revenue"), "{out}");
}

/// Waits until disks `disks` hold no job, grant, inbox or temporary file (`status`), at most
/// `within_s` seconds; panics with what they still hold and their logs.
fn wait_released(dir: &Path, disks: &[usize], when: &str, within_s: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(within_s);
    loop {
        let out = adisk(dir, &["status", "--format", "json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let held: Vec<String> = disks
            .iter()
            .map(|d| &v["disks"][*d])
            .filter(|s| {
                !(s["jobs_running"] == 0
                    && s["jobs_waiting"] == 0
                    && s["memory_granted_bytes"] == 0
                    && s["exchange_inboxes"] == 0
                    && s["temp_files_bytes"] == 0)
            })
            .map(|s| {
                format!(
                    "disk {}: running {} waiting {} memory {} inboxes {} temp {}",
                    s["disk_id"],
                    s["jobs_running"],
                    s["jobs_waiting"],
                    s["memory_granted_bytes"],
                    s["exchange_inboxes"],
                    s["temp_files_bytes"]
                )
            })
            .collect();
        if held.is_empty() {
            return;
        }
        if std::time::Instant::now() >= deadline {
            let logs: Vec<String> = disks
                .iter()
                .map(|d| {
                    std::fs::read_to_string(dir.join(format!("disk-{d}/disk.log")))
                        .unwrap_or_default()
                })
                .map(|l| l.lines().rev().take(30).collect::<Vec<_>>().join("\n"))
                .collect();
            panic!(
                "{within_s} s {when}, disks still hold: {held:?}\nlogs (newest first):\n{}",
                logs.join("\n----\n")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Jobs running at disk `d`, from `adisk status --format json` (0 when the disk does not answer).
fn disk_jobs_running(dir: &Path, d: usize) -> u64 {
    let out = adisk(dir, &["status", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["disks"][d]["jobs_running"].as_u64().unwrap_or(0)
}

/// The host-link and disk-read throttles really limit: what crossed them takes at least
/// bytes ÷ rate (a lower bound, so machine noise cannot break it), and EXPLAIN ANALYZE reports
/// the link's busy time.
#[test]
fn throttled_link_and_disk_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    ok(d, &["up", "--disks", "4"]);
    ok(d, &["load", "tpch", "--sf", "0.01", "--tables", "lineitem"]);
    ok(d, &["down"]);
    ok(
        d,
        &[
            "up",
            "--disks",
            "4",
            "--host-link-mbps",
            "200",
            "--disk-read-mbps",
            "80",
        ],
    );
    let config = std::fs::read_to_string(d.join("cluster.toml")).unwrap();
    assert!(
        config.contains("host_link_mbps = 200") && config.contains("read_mbps = 80"),
        "{config}"
    );
    let q6 = tpch_text(6);
    let none = explain(d, true, &q6, "none");
    let auto = explain(d, true, &q6, "auto");
    let _ = adisk(d, &["down"]);
    let link_rate = 200e6 / 8.0;
    for (name, v) in [("none", &none), ("auto", &auto)] {
        let shipped = v["bytes_shipped"].as_f64().unwrap();
        let wall_s = v["wall_ms"].as_f64().unwrap() / 1e3;
        let busy_s = v["link_busy_ms"]
            .as_f64()
            .expect("link utilization reported")
            / 1e3;
        assert!(busy_s > 0.0, "{name}: link busy time");
        // Received Arrow bytes pay the bucket; shipped IPC bytes are within a few % of them.
        assert!(
            wall_s >= 0.8 * shipped / link_rate,
            "{name}: {shipped} bytes crossed a 200 Mbit/s link in {wall_s} s"
        );
        let read_max = v["scans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stats"]["bytes_read"].as_f64().unwrap())
            .fold(0.0, f64::max);
        // The disk's read bucket starts full: 1/50 s of reads (`ReadLimiter`) come at once.
        let read_rate = 80e6 / 8.0;
        assert!(
            wall_s >= 0.8 * (read_max - read_rate / 50.0) / read_rate,
            "{name}: a disk read {read_max} bytes at 80 Mbit/s in {wall_s} s"
        );
    }
    assert!(
        none["bytes_shipped"].as_u64().unwrap() > 100 * auto["bytes_shipped"].as_u64().unwrap(),
        "conventional ships whole rows"
    );
}

/// Sum of `spilled_bytes` over every stage of every job of an EXPLAIN ANALYZE.
fn spilled(v: &Value) -> u64 {
    v["scans"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["stats"]["stages"].as_array().cloned().unwrap_or_default())
        .map(|st| st["spilled_bytes"].as_u64().unwrap_or(0))
        .sum()
}

fn stages_text(v: &Value) -> String {
    v["operators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["operator"] == "DisksExec")
        .flat_map(|o| o["stages"].as_array().cloned().unwrap_or_default())
        .map(|s| s.as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `disks` level's joins (issue 11): co-partitioned tables (TPC-H's orders and lineitem,
/// generated part by part on the same disks) join where they are, with no exchange; a join
/// whose build side is past a disk's memory (16 MiB disks) runs as a sort-merge join that
/// spills within the disk-space grant and answers exactly (DuckDB on the same files); past
/// the grant it fails with a typed error and leaves no temporary files.
#[test]
fn disks_level_colocated_and_spilling_joins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["up", "--disks", "4", "--memory-mib", "16"]);
    struct Down<'a>(&'a Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = adisk(self.0, &["down"]);
        }
    }
    let _down = Down(dir);
    ok(dir, &["load", "tpch", "--sf", "0.1"]);

    // orders ⋈ lineitem on the order key: 150 000 orders, too many to broadcast.
    let colocated = "select o_orderpriority, count(*) as n, sum(l_quantity) as q \
                     from orders, lineitem where o_orderkey = l_orderkey \
                     group by o_orderpriority order by o_orderpriority";
    let v = explain(dir, false, colocated, "disks");
    let stages = stages_text(&v);
    assert!(
        stages
            .lines()
            .any(|l| l.contains("scan orders") && l.contains("scan lineitem")),
        "orders and lineitem should join in one stage at their disks:\n{stages}"
    );
    assert!(
        !stages.contains("hash [o_orderkey]") && !stages.contains("hash [l_orderkey]"),
        "no exchange on the order key:\n{stages}"
    );

    // TPC-H Q12: DataFusion broadcasts the few qualifying lineitem rows (a collect-left
    // join); they are co-partitioned with orders, so they join where they are instead.
    let v = explain(dir, false, &tpch_text(12), "disks");
    let stages = stages_text(&v);
    assert!(
        stages
            .lines()
            .any(|l| l.contains("scan lineitem") && l.contains("scan orders"))
            && !stages.contains("broadcast"),
        "Q12's lineitem ⋈ orders at their disks, nothing broadcast:\n{stages}"
    );

    // TPC-H Q18: lineitem's aggregate by order key finishes where lineitem is (no exchange),
    // and customer ⋈ orders reaches lineitem's disks without a hash on the order key: routed
    // by range of it, or (customer broadcast) never leaving orders' disks.
    let v = explain(dir, false, &tpch_text(18), "disks");
    let stages = stages_text(&v);
    assert!(
        !stages.contains("hash [l_orderkey]") && !stages.contains("hash [o_orderkey]"),
        "Q18: nothing hashed on the order key:\n{stages}"
    );
    // Outer joins whose preserved side moves by range to lineitem's disks (a collect-left
    // left join, a partitioned full join): exact against DuckDB. (The full join's lineitem
    // side keeps a tenth of its rows: with 2 % (`l_quantity > 49`), now estimated as such
    // from the sampled rows, hashing both small sides costs less and is chosen.)
    let ranged = [
        "select count(*) as n, count(l_orderkey) as m, sum(g.k) as s from \
         (select o_custkey as k, max(o_orderkey) as ok from orders group by o_custkey) g \
         left join lineitem on g.ok = l_orderkey and l_quantity > 45",
        "select count(*) as n, count(l_orderkey) as m, count(g.k) as s from \
         (select o_custkey as k, max(o_orderkey) as ok from orders group by o_custkey) g \
         full join (select * from lineitem where l_quantity > 45) l on g.ok = l.l_orderkey",
    ];
    for q in ranged {
        let stages = stages_text(&explain(dir, false, q, "disks"));
        assert!(stages.contains("range [ok]"), "{q}:\n{stages}");
    }
    // TPC-H Q17's averages per part come from its own rows (`perkey.rs`): lineitem is
    // scanned once, nothing is aggregated by part.
    let q17 = stages_text(&explain(dir, false, &tpch_text(17), "disks"));
    assert!(
        q17.matches("scan lineitem").count() == 1 && !q17.contains("gby=[l_partkey"),
        "Q17 scans lineitem once:\n{q17}"
    );
    // Semi-join reduction: lineitem aggregated by part keeps only the parts the other side
    // can match (their keys broadcast from the part scan) before its exchange — TPC-H Q20,
    // and a left join whose preserved side is the small one.
    let reduced_left = "select count(*) as n, count(g.s) as m, sum(g.s) as q from part \
         left join (select l_partkey, sum(l_quantity) as s from lineitem group by l_partkey) g \
         on p_partkey = g.l_partkey where p_brand = 'Brand#23' and p_container = 'MED BOX'";
    for q in [tpch_text(20), reduced_left.to_string()] {
        let stages = stages_text(&explain(dir, false, &q, "disks"));
        assert!(
            stages.contains("ProjectionExec: expr=[p_partkey@0 as p_partkey]")
                && stages.contains("join_type=RightSemi, on=[(p_partkey@0, l_partkey@"),
            "lineitem reduced by the part keys:\n{stages}"
        );
    }
    // Late materialization: Q20's lineitem scan applies the semi join's part-key filter,
    // pushed down through its qualification, while decoding (the answer: `tpch check`).
    let v = explain(dir, true, &tpch_text(20), "disks");
    let dropped: u64 = v["scans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stats"]["rows_dropped_at_decode"].as_u64().unwrap_or(0))
        .sum();
    assert!(dropped > 0, "Q20: no rows dropped while decoding:\n{v}");
    // TPC-H Q22's scalar subquery runs first and its value is planned in: the customers'
    // filter and the anti join with orders run at the disks (before, the filter waited for
    // the subquery at the host, and the join with it).
    let v = explain(dir, false, &tpch_text(22), "disks");
    let stages = stages_text(&v);
    assert!(
        stages.contains("reads [scan orders] → hash [o_custkey]")
            && stages.contains("Anti")
            && !host_ops(&v).iter().any(|o| o.contains("HashJoinExec")),
        "Q22's anti join at the disks:\n{stages}\nhost: {:?}",
        host_ops(&v)
    );
    let note = v["choice"].as_str().unwrap_or("");
    assert!(
        note.starts_with("scalar subqueries run first, their values planned in"),
        "{note}"
    );
    // Below a top-k, fewer input rows would change which rows come out: not reduced, and exact.
    let top_k = "select count(*) as n, sum(t.s) as q from part p join \
         (select l_partkey, sum(l_quantity) as s from lineitem group by l_partkey \
          order by s desc, l_partkey limit 50) t on p.p_partkey = t.l_partkey \
         where p_brand = 'Brand#23'";
    let slt = dir.join("ranged.slt");
    let text: String = ranged
        .iter()
        .chain(&[reduced_left, top_k])
        .map(|q| format!("query\n{q}\n\n"))
        .collect();
    std::fs::write(&slt, text).unwrap();
    let out = complete_and_run(dir, &slt, "disks");
    assert!(out.contains("4 passed, 0 failed"), "{out}");

    // A self-join of lineitem on its key: the build side (150 000 rows per disk with their
    // comments) is far past a 16 MiB disk's memory.
    let big = "select count(*) as n, sum(length(a.l_comment)) as c, sum(b.l_extendedprice) as p \
               from lineitem a join lineitem b \
               on a.l_orderkey = b.l_orderkey and a.l_linenumber = b.l_linenumber";
    let v = explain(dir, true, big, "disks");
    let stages = stages_text(&v);
    assert!(stages.contains("SortMergeJoinExec"), "{stages}");
    assert!(spilled(&v) > 0, "the sort-merge join spilled nothing:\n{v}");
    let slt = dir.join("big_join.slt");
    std::fs::write(&slt, format!("query\n{big}\n")).unwrap();
    let out = complete_and_run(dir, &slt, "disks");
    assert!(out.contains("1 passed, 0 failed"), "{out}");

    // Past a 256 KiB disk-space grant: a typed error, and nothing left at the disks.
    let err = fails(
        dir,
        &["sql", big, "--offload", "disks", "--temp-kib", "256"],
    );
    assert!(
        err.contains("disk ") && err.contains("temporary space exceeded"),
        "{err}"
    );
    common::wait_until(
        "every disk to release its grants and temporary files",
        std::time::Duration::from_secs(30),
        || {
            let s = common::status_json(dir);
            (0..4).all(|d| {
                let d = &s["disks"][d];
                d["jobs_running"] == 0
                    && d["memory_granted_bytes"] == 0
                    && d["temp_files_bytes"] == 0
                    && d["exchange_inboxes"] == 0
            })
        },
    );
    for d in 0..4 {
        let tmp = dir.join(format!("disk-{d}/tmp"));
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "disk {d} left {left:?}");
    }
}

/// Writes the expected rows of a generated `.slt` file from DuckDB on the cluster's files
/// (`adisk slt --complete`), then runs it at `offload`; its output.
fn complete_and_run(dir: &Path, slt: &Path, offload: &str) -> String {
    let slt = slt.to_str().unwrap();
    ok(dir, &["slt", "--complete", slt]);
    let text = std::fs::read_to_string(slt).unwrap();
    assert!(text.contains("----"), "no expected rows written:\n{text}");
    ok(dir, &["slt", slt, "--offload", offload])
}

/// chiu's disk groups behind a router: 4 disks in 2 groups; at `disks` every stream from one
/// group to the other passes the host's router (throttled here), the answers stay right
/// (DuckDB), and EXPLAIN ANALYZE reports the bytes that crossed between groups.
#[test]
fn disk_groups_behind_a_router() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        dir,
        &[
            "up",
            "--disks",
            "4",
            "--groups",
            "2",
            "--router-mbps",
            "400",
        ],
    );
    struct Down<'a>(&'a Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = adisk(self.0, &["down"]);
        }
    }
    let _down = Down(dir);
    let toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(
        toml.contains("router_mbps = 400") && toml.contains("group = 1"),
        "{toml}"
    );
    ok(dir, &["load", "tpch", "--sf", "0.01"]);
    let out = tpch_check_sf001(dir, "disks", "3,5,9,18");
    assert!(out.contains("4 passed, 0 failed"), "{out}");
    let v = explain(dir, true, &tpch_text(5), "disks");
    let between = v["bytes_inter_group"]
        .as_u64()
        .expect("inter-group bytes reported");
    let d2d = v["bytes_disk_to_disk"].as_u64().unwrap();
    assert!(between > 0, "Q5's exchanges cross the groups: {v}");
    // The router forwards Flight messages as they are: about what the senders shipped to
    // the other group, never more than everything shipped disk to disk (plus headers).
    assert!(
        between <= d2d + d2d / 10 + 4096,
        "{between} B between groups of {d2d} B disk to disk"
    );
    // Tables placed in groups: orders and lineitem in group 0 (disks 0, 1), the others in
    // group 1 (disks 2, 3). Every join of orders with customer then crosses the router.
    for (tables, group) in [
        ("orders,lineitem", "0"),
        ("customer,nation,region,supplier,part,partsupp", "1"),
    ] {
        let load = [
            "load", "tpch", "--sf", "0.01", "--tables", tables, "--group", group,
        ];
        ok(dir, &load);
    }
    let status = status_json(dir);
    let disks_of = |name: &str| {
        let t = status["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {status}"));
        t["disks"].clone()
    };
    assert_eq!(disks_of("orders"), serde_json::json!([0, 1]), "{status}");
    assert_eq!(disks_of("lineitem"), serde_json::json!([0, 1]), "{status}");
    assert_eq!(disks_of("customer"), serde_json::json!([2, 3]), "{status}");
    assert_eq!(disks_of("nation"), serde_json::json!([2]), "{status}");
    let out = tpch_check_sf001(dir, "disks,semijoin", "3,5,10,18");
    assert!(out.contains("8 passed, 0 failed"), "{out}");
    let v = explain(dir, true, &tpch_text(3), "disks");
    assert!(
        v["bytes_inter_group"].as_u64().unwrap() > 0,
        "customer (group 1) joins orders (group 0) across the router: {v}"
    );
    let err = fails(
        dir,
        &[
            "load", "tpch", "--sf", "0.01", "--tables", "nation", "--group", "5",
        ],
    );
    assert!(err.contains("no disk group 5"), "{err}");
    // `--groups` must leave every group a disk.
    let tmp2 = tempfile::tempdir().unwrap();
    let err = fails(tmp2.path(), &["up", "--disks", "2", "--groups", "3"]);
    assert!(err.contains("each group needs at least one disk"), "{err}");
}

/// One disk: a query's global work — an aggregation over all rows, a sort, a limit — runs at
/// the disk with the rest of its stage, so only the result travels (before, a one-disk
/// `disks` plan aggregated at the host and shipped every row). Oracle: DuckDB's answers at
/// every level.
#[test]
fn one_disk_runs_global_work_at_the_disk() {
    let c = Cluster(tempfile::tempdir().expect("tempdir"));
    ok(c.dir(), &["up", "--disks", "1"]);
    ok(c.dir(), &["load", "tpch", "--sf", "0.01"]);
    let out = ok(
        c.dir(),
        &["tpch", "check", "--sf", "0.01", "--offload", "all"],
    );
    assert!(
        out.contains(&format!("{} passed, 0 failed", 22 * LEVELS)),
        "one disk:\n{out}"
    );
    let group_by = "SELECT l_partkey, sum(l_quantity) AS q, count(*) AS n \
                    FROM lineitem GROUP BY l_partkey";
    let v = explain(c.dir(), true, group_by, "disks");
    assert_eq!(
        host_ops(&v),
        Vec::<String>::new(),
        "nothing at the host: {v}"
    );
    let scan = &v["scans"][0]["stats"];
    let (read, shipped) = (&scan["rows_read"], &scan["rows_shipped"]);
    assert_eq!(shipped, &v["rows"], "only the groups travel: {v}");
    assert!(
        read.as_u64().unwrap() > 20 * shipped.as_u64().unwrap(),
        "{read} rows read, {shipped} shipped"
    );
}
