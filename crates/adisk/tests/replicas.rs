//! Replicated placement and failover, end to end: 4 real disk processes, TPC-H SF 0.01 loaded
//! with `--replicas 2` (chained declustering: partition p on disks p and p + 1 mod 4).
//!
//! * the 22 queries answer as without replicas (each partition read once) at `auto` and `disks`;
//! * one disk killed before the queries: all 22 still correct at `auto` and `disks`, and a
//!   `--replicas 1` table on other disks keeps working;
//! * two adjacent disks dead: a typed error naming the lost partitions;
//! * a disk killed at a seeded random point during heavy queries: every answer correct (the
//!   query is rerun without it).
mod common;
use common::{TpchCluster, check_tpch, fails, kill_disk, ok};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// (a) same answers with replicas, (b) one disk dead before the queries, (e) a `--replicas 1`
/// table away from the dead disk keeps working, (d) two adjacent disks dead: a typed error.
#[test]
fn replicas_answer_and_survive_dead_disks() {
    let c = TpchCluster::start("0.01", 2);
    let dir = c.dir();
    let status = common::status_json(dir);
    let lineitem = status["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "lineitem")
        .cloned()
        .unwrap();
    assert_eq!(lineitem["replicas"], 2, "{lineitem}");
    assert_eq!(
        lineitem["rows"], 60175,
        "each partition counted once: {lineitem}"
    );
    let e = fails(dir, &["load", "tpch", "--sf", "0.01", "--replicas", "5"]);
    assert!(
        e.contains("--replicas 5") && e.contains("only 4 disks"),
        "{e}"
    );
    // (a) every partition read exactly once, by its primary.
    for level in ["auto", "disks"] {
        check_tpch(dir, level, "4 disks, 2 replicas");
    }
    let analyzed = ok(dir, &["tpch", "query", "6", "--analyze"]);
    assert!(
        analyzed.contains("lineitem: disk 0 [0], disk 1 [1], disk 2 [2], disk 3 [3]"),
        "{analyzed}"
    );
    // A table with one copy, only on disk 0 (TPC-H's unsplit tables), and one on every disk.
    ok(
        dir,
        &[
            "load",
            "tpch",
            "--sf",
            "0.01",
            "--tables",
            "nation,region",
            "--replicas",
            "1",
        ],
    );
    let csv = dir.join("single.csv");
    std::fs::write(
        &csv,
        format!(
            "k,v\n{}",
            (0..100)
                .map(|i| format!("{i},{}\n", i * 2))
                .collect::<String>()
        ),
    )
    .unwrap();
    ok(
        dir,
        &[
            "load",
            "csv",
            "single",
            csv.to_str().unwrap(),
            "--replicas",
            "1",
        ],
    );
    // (b) disk 2 dead before the queries: its partitions are read from disk 3.
    kill_disk(dir, 2);
    for level in ["auto", "disks"] {
        check_tpch(dir, level, "disk 2 dead");
    }
    let analyzed = ok(dir, &["tpch", "query", "6", "--analyze"]);
    assert!(
        analyzed.contains("lineitem: disk 0 [0], disk 1 [1], disk 3 [2, 3]"),
        "{analyzed}"
    );
    // `adisk run`, host-merged and with a disk-to-disk exchange: each partition counted once.
    let out = ok(
        dir,
        &[
            "run",
            "aggregate",
            "--table",
            "lineitem",
            "--param",
            "aggs=count(*) AS n",
            "--format",
            "json",
        ],
    );
    assert!(out.contains("60175"), "{out}");
    let out = ok(
        dir,
        &[
            "run",
            "groupby",
            "--table",
            "lineitem",
            "--param",
            "group_by=l_returnflag",
            "--param",
            "aggs=count(*) AS n",
            "--param",
            "exchange=true",
            "--format",
            "json",
        ],
    );
    let total: u64 = serde_json::from_str::<serde_json::Value>(&out).unwrap()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["n"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 60175, "{out}");
    // (e) the one-copy tables on disk 0 keep working; the one with a partition on disk 2 fails, typed.
    let out = ok(
        dir,
        &[
            "sql",
            "select count(*) as n from nation join region on n_regionkey = r_regionkey",
            "--format",
            "csv",
        ],
    );
    assert!(out.contains("25"), "{out}");
    let e = fails(dir, &["sql", "select count(*) from single"]);
    assert!(
        e.contains("`single` lost partitions [2]") && e.contains("unreachable: disk 2"),
        "{e}"
    );
    // (d) disks 2 and 3 dead: partition 2 of every split table has no copy left.
    kill_disk(dir, 3);
    for level in ["auto", "disks"] {
        let e = fails(
            dir,
            &[
                "sql",
                "select sum(l_quantity) from lineitem",
                "--offload",
                level,
            ],
        );
        assert!(
            e.contains("`lineitem` lost partitions [2]")
                && e.contains("2 on disks [2, 3]")
                && e.contains("unreachable: disks 2, 3"),
            "{e}"
        );
    }
    let out = ok(
        dir,
        &["sql", "select count(*) from region", "--format", "csv"],
    );
    assert!(out.contains('5'), "{out}");
}

/// Jobs running at disk `d` (0 when it does not answer).
fn disk_jobs_running(dir: &Path, d: usize) -> u64 {
    common::status_json(dir)["disks"][d]["jobs_running"]
        .as_u64()
        .unwrap_or(0)
}

/// A small seeded generator (xorshift64*): the test prints its seed; `ADISK_TEST_SEED`
/// reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    }
}

fn restart(dir: &Path) {
    ok(dir, &["down"]);
    ok(dir, &["up", "--disks", "4", "--disk-read-mbps", "4"]);
}

/// Runs each of `queries` at each level while a seeded random disk is killed at a random
/// point after it started a job of the query; every answer equals the one without failures
/// (and the official one). Returns the number of runs that failed over.
fn kill_during(queries: &[u32], levels: &[&str], seed: u64) -> usize {
    println!("seed {seed} (ADISK_TEST_SEED={seed} reproduces the kills)");
    let mut rng = Rng(seed.max(1));
    let c = TpchCluster::start("0.01", 2);
    let dir = c.dir();
    let mut expected = std::collections::BTreeMap::new();
    for q in queries {
        expected.insert(
            *q,
            ok(dir, &["tpch", "query", &q.to_string(), "--format", "csv"]),
        );
    }
    let mut failovers = 0;
    for level in levels {
        for q in queries {
            restart(dir);
            let (victim, delay_ms) = (rng.next(4) as usize, rng.next(200));
            let pid = common::disk_pids(dir)[victim];
            let mut run = Command::new(env!("CARGO_BIN_EXE_adisk"))
                .arg("--dir")
                .arg(dir)
                .args([
                    "tpch",
                    "query",
                    &q.to_string(),
                    "--sf",
                    "0.01",
                    "--offload",
                    level,
                    "--format",
                    "csv",
                ])
                .env_remove("ADISK_HOME")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // The victim's first job of the query (or the query's end, for short ones).
            common::wait_until(
                &format!("disk {victim} to run a job of Q{q}"),
                Duration::from_secs(60),
                || run.try_wait().unwrap().is_some() || disk_jobs_running(dir, victim) > 0,
            );
            std::thread::sleep(Duration::from_millis(delay_ms));
            // SAFETY: signalling a disk process this test's cluster started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            let out = run.wait_with_output().unwrap();
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(
                out.status.success(),
                "Q{q} at {level}, disk {victim} killed after {delay_ms} ms (seed {seed}) failed:\n{stderr}"
            );
            assert_eq!(
                stdout,
                expected[q].as_str(),
                "Q{q} at {level}, disk {victim} killed after {delay_ms} ms (seed {seed}): a different answer\n{stderr}"
            );
            let rerun = stderr.contains(&format!("rerunning without disk {victim}"));
            println!(
                "Q{q} at {level}: disk {victim} killed {delay_ms} ms into its job; {}",
                if rerun {
                    "rerun without it, same answer"
                } else {
                    "finished before the kill took effect"
                }
            );
            failovers += usize::from(rerun);
        }
    }
    failovers
}

fn seed() -> u64 {
    std::env::var("ADISK_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261124)
}

/// (c) a disk killed during Q3, Q9, Q18 and Q21 at `auto` and `disks`: every answer correct.
#[test]
fn disk_killed_during_queries() {
    let failovers = kill_during(&[3, 9, 18, 21], &["auto", "disks"], seed());
    assert!(
        failovers >= 4,
        "only {failovers} of 8 runs were failed over: the kills came too late"
    );
}

/// By hand: all 22 queries, each with a disk killed during it, at `auto` and `disks`.
#[test]
#[ignore]
fn disk_killed_during_every_query() {
    let all: Vec<u32> = (1..=22).collect();
    let failovers = kill_during(&all, &["auto", "disks"], seed());
    println!("{failovers} of {} runs failed over", all.len() * 2);
}
