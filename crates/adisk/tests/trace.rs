//! Query traces, end to end: 4 real disk processes, TPC-H SF 0.01, `adisk explain analyze
//! --trace --chrome-trace` on Q1 and Q3 at two offload levels. Oracles: the EXPLAIN ANALYZE
//! JSON of the same run (the trace's totals are its totals), the Chrome trace-event format's
//! rules (complete events with times, a named process per disk, one track per job and stage),
//! and `adisk sim replay`, which must read the trace the runtime wrote.
mod common;
use common::{TpchCluster, fails, json, ok};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn tpch_text(n: u32) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../adisk-host/src/sql/tpch/q{n:02}.sql"));
    std::fs::read_to_string(p).expect("query text")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn sum(trace: &Value, field: &str) -> u64 {
    trace["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["disks"].as_array().unwrap())
        .map(|d| d[field].as_u64().unwrap())
        .sum()
}

/// The trace's totals are EXPLAIN ANALYZE's, disk job by disk job.
fn check_totals(q: u32, level: &str, trace: &Value, explain: &Value) {
    let what = format!("Q{q} at {level}");
    assert_eq!(trace["format"], "adisk-trace", "{what}");
    assert_eq!(trace["version"], 1, "{what}");
    assert!(trace["recorded"]["disks"].as_u64().unwrap() >= 1, "{what}");
    assert!(trace["wall_ns"].as_u64().unwrap() > 0, "{what}");
    for (t, e) in [
        ("bytes_read", "bytes_read"),
        ("bytes_scanned", "bytes_scanned"),
        ("bytes_shipped_host", "bytes_shipped"),
        ("bytes_shipped_disks", "bytes_disk_to_disk"),
    ] {
        assert_eq!(
            sum(trace, t),
            explain[e].as_u64().unwrap(),
            "{what}: {t} against EXPLAIN ANALYZE's {e}"
        );
    }
    let reported = explain["scans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["stats"].is_null())
        .count();
    let traced: usize = trace["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["disks"].as_array().unwrap().len())
        .sum();
    assert_eq!(traced, reported, "{what}: disk jobs");
    assert!(reported > 0, "{what}: no disk job");
    // Every disk job ran inside the request: started after it began, ended before it ended.
    let wall = trace["wall_ns"].as_u64().unwrap();
    for d in trace["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["disks"].as_array().unwrap())
    {
        let (start, took) = (
            d["started_ns"].as_u64().unwrap(),
            d["host_wall_ns"].as_u64().unwrap(),
        );
        assert!(
            took > 0 && start + took <= wall,
            "{what}: a disk job from {start} ns for {took} ns in a request of {wall} ns"
        );
    }
}

/// The Chrome export: complete events with times, every pid named, one track per event.
fn check_chrome(q: u32, level: &str, trace: &Value, chrome: &Value) {
    let what = format!("Q{q} at {level}");
    let events = chrome["traceEvents"].as_array().expect("traceEvents");
    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    for e in &complete {
        assert!(e["ts"].as_f64().unwrap() >= 0.0, "{what}: {e}");
        assert!(e["dur"].as_f64().unwrap() >= 0.0, "{what}: {e}");
        assert!(e["name"].is_string(), "{what}: {e}");
    }
    let tracks: BTreeSet<(u64, u64)> = complete
        .iter()
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        tracks.len(),
        complete.len(),
        "{what}: one track per job and stage"
    );
    let disk_jobs: Vec<&Value> = trace["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["disks"].as_array().unwrap())
        .collect();
    let stages: usize = disk_jobs
        .iter()
        .map(|d| d["stages"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        complete.len(),
        1 + disk_jobs.len() + stages,
        "{what}: the request, each disk job and each stage"
    );
    let named: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    let disks: BTreeSet<u64> = disk_jobs
        .iter()
        .map(|d| d["disk_id"].as_u64().unwrap() + 1)
        .collect();
    assert!(
        disks.is_subset(&named),
        "{what}: every disk a named process"
    );
    assert!(named.contains(&0), "{what}: the host");
}

#[test]
fn traces_of_q1_and_q3_total_what_explain_analyze_says_and_open_as_timelines() {
    let cluster = TpchCluster::start("0.01", 1);
    let dir = cluster.dir();
    let out = tempfile::tempdir().unwrap();
    for level in ["semijoin", "disks"] {
        for q in [1, 3] {
            let trace_path = out.path().join(format!("q{q}-{level}.json"));
            let chrome_path = out.path().join(format!("q{q}-{level}.chrome.json"));
            let text = tpch_text(q);
            let explain = json(&ok(
                dir,
                &[
                    "explain",
                    "--format",
                    "json",
                    "--offload",
                    level,
                    "--trace",
                    trace_path.to_str().unwrap(),
                    "--chrome-trace",
                    chrome_path.to_str().unwrap(),
                    "analyze",
                    &text,
                ],
            ));
            let trace = read_json(&trace_path);
            check_totals(q, level, &trace, &explain);
            check_chrome(q, level, &trace, &read_json(&chrome_path));
            // The simulator reads what the runtime wrote.
            let replay = json(&ok(
                dir,
                &[
                    "sim",
                    "replay",
                    trace_path.to_str().unwrap(),
                    "--format",
                    "json",
                ],
            ));
            assert!(replay.is_object(), "Q{q} at {level}: {replay}");
        }
    }
    // `adisk sql --trace` writes the same format.
    let path = out.path().join("q6.json");
    ok(
        dir,
        &["sql", "--trace", path.to_str().unwrap(), &tpch_text(6)],
    );
    assert_eq!(read_json(&path)["format"], "adisk-trace");
    through_the_service(dir, out.path());
    // A trace needs the query to run here, and a place to go.
    let err = fails(dir, &["explain", "--trace", "t.json", "select 1"]);
    assert!(err.contains("only with EXPLAIN ANALYZE"), "{err}");
    let nowhere = out.path().join("missing/dir/t.json");
    let err = fails(
        dir,
        &["sql", "--trace", nowhere.to_str().unwrap(), "select 1"],
    );
    assert!(
        err.contains("writing the trace") && err.contains("missing/dir"),
        "{err}"
    );
}

/// The service keeps the traces of the queries answered through it: `adisk sql --connect
/// --trace` fetches its query's; `adisk traces` lists them and writes one by id. Oracle: the
/// same query's EXPLAIN ANALYZE in this process (what it read and scanned is the plan's, not
/// the run's), the Chrome format's rules, and the simulator reading it.
fn through_the_service(dir: &Path, out: &Path) {
    let (path, chrome) = (
        out.join("served-q6.json"),
        out.join("served-q6.chrome.json"),
    );
    let text = tpch_text(6);
    let args = [
        "sql",
        "--connect",
        "serve",
        "--trace",
        path.to_str().unwrap(),
        "--chrome-trace",
        chrome.to_str().unwrap(),
        &text,
    ];
    ok(dir, &args);
    let trace = read_json(&path);
    assert_eq!(trace["format"], "adisk-trace");
    assert_eq!(trace["text"].as_str().unwrap(), text);
    let explain = json(&ok(dir, &["explain", "--format", "json", "analyze", &text]));
    for (t, e) in [
        ("bytes_read", "bytes_read"),
        ("bytes_scanned", "bytes_scanned"),
    ] {
        assert_eq!(
            sum(&trace, t),
            explain[e].as_u64().unwrap(),
            "served Q6: {t}"
        );
    }
    check_chrome(6, "the service's", &trace, &read_json(&chrome));
    let replay = json(&ok(
        dir,
        &["sim", "replay", path.to_str().unwrap(), "--format", "json"],
    ));
    assert!(replay.is_object(), "{replay}");
    // The list names it; by its id the same trace comes back.
    let list = ok(dir, &["traces"]);
    let line = list
        .lines()
        .rev()
        .find(|l| l.contains("l_extendedprice"))
        .unwrap_or_else(|| panic!("Q6 not listed:\n{list}"));
    let id = line.split_whitespace().next().unwrap();
    let again = ok(dir, &["traces", id]);
    assert_eq!(json(&again), trace, "trace {id} by id");
    let err = fails(dir, &["traces", "999999"]);
    assert!(err.contains("no trace of query 999999"), "{err}");
}
