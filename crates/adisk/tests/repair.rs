//! Repair and scrub, end to end: 4 real disk processes, TPC-H SF 0.01 loaded with
//! `--replicas 2` (chained declustering: lineitem partition p on disks p and p + 1 mod 4).
//!
//! * a disk's directory deleted and the disk restarted: queries answer from the other copies
//!   while `status` names what it lacks; `adisk repair` restores it disk to disk; with the
//!   other copies' disk then killed, every answer comes from the restored copies;
//! * a disk restarted empty repairs itself when it starts;
//! * a query that reads a copy with a flipped byte is rerun reading the other copy;
//! * `adisk scrub` finds a byte flipped in a data page and refetches the partition from its
//!   other copy; a corrupt copy with no other copy is reported and left.
mod common;
use common::{TpchCluster, adisk, check_tpch, kill_disk, ok};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `status`'s entry of `table`.
fn table_status(dir: &Path, table: &str) -> serde_json::Value {
    let status = common::status_json(dir);
    status["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == table).cloned())
        .unwrap_or(serde_json::Value::Null)
}

fn any_needs_repair(dir: &Path) -> bool {
    let status = common::status_json(dir);
    status["tables"]
        .as_array()
        .is_none_or(|t| t.iter().any(|t| t["needs_repair"] != false))
}

/// The Parquet file of `table`'s partition `p` on disk `d`.
fn partition_file(dir: &Path, d: usize, table: &str, p: u32) -> PathBuf {
    let tables = dir.join(format!("disk-{d}/tables/{table}"));
    let generation = std::fs::read_dir(&tables)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    generation.join(format!("part-{p:05}.parquet"))
}

/// Flips one byte a third into `file` (a data page: the footer is at the end), keeping its
/// size and mtime as bit rot does.
fn flip(file: &Path) {
    use std::os::unix::fs::FileExt;
    let mtime = std::fs::metadata(file).unwrap().modified().unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let at = f.metadata().unwrap().len() / 3;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    f.set_modified(mtime).unwrap();
}

/// A disk's directory deleted, the disk restarted without repairing itself: the cluster
/// answers from the other copies and `status` names the missing ones; `adisk repair` restores
/// them from the peers; with the other copies' disk then dead, the restored ones answer.
#[test]
fn a_wiped_disk_is_restored_by_adisk_repair() {
    let c = TpchCluster::start("0.01", 2);
    let dir = c.dir();
    kill_disk(dir, 2);
    std::fs::remove_dir_all(dir.join("disk-2")).unwrap();
    let out = ok(dir, &["restart", "--disk", "2", "--no-auto-repair"]);
    assert!(out.contains("disk 2 restarted"), "{out}");
    let e = common::fails(dir, &["restart", "--disk", "2"]);
    assert!(e.contains("disk 2 is running"), "{e}");
    // Degraded: disk 2 holds nothing; lineitem's partitions 1 (disks 1, 2) and 2 (disks 2, 3)
    // are read from their other copies.
    let lineitem = table_status(dir, "lineitem");
    assert_eq!(lineitem["needs_repair"], true, "{lineitem}");
    assert_eq!(
        lineitem["missing"],
        serde_json::json!({"2": [1, 2]}),
        "{lineitem}"
    );
    assert_eq!(lineitem["rows"], 60175, "{lineitem}");
    let text = ok(dir, &["status"]);
    assert!(
        text.contains("lineitem needs repair: disk 2 lacks partitions [1, 2]"),
        "{text}"
    );
    check_tpch(dir, "auto", "disk 2 empty");
    let analyzed = ok(dir, &["tpch", "query", "6", "--analyze"]);
    assert!(
        analyzed.contains("lineitem: disk 0 [0], disk 1 [1], disk 3 [2, 3]"),
        "{analyzed}"
    );
    // Repair: disk 2 fetches every copy its tables' loads give it, disk to disk.
    let out = ok(dir, &["repair"]);
    assert!(
        out.contains("restored: lineitem partition 1 from disk 1")
            && out.contains("restored: lineitem partition 2 from disk 3"),
        "{out}"
    );
    assert!(
        out.contains("disk 0:") && out.contains(" 0 restored") && !out.contains("NOT restored"),
        "{out}"
    );
    assert!(!any_needs_repair(dir), "{}", ok(dir, &["status"]));
    let again = ok(
        dir,
        &["repair", "--disk", "2", "--verify", "--format", "json"],
    );
    let report: serde_json::Value = serde_json::from_str(again.trim()).unwrap();
    assert_eq!(report["repaired"], serde_json::json!([]), "{report}");
    assert!(
        report["verified"].as_u64().unwrap() >= 2 && report["verified"] == report["expected"],
        "{report}"
    );
    // The restored copies answer: disk 3 (the other copy of partition 2) dead.
    kill_disk(dir, 3);
    check_tpch(dir, "disks", "disk 2 restored, disk 3 dead");
    let analyzed = ok(dir, &["tpch", "query", "6", "--analyze"]);
    assert!(
        analyzed.contains("lineitem: disk 0 [0, 3], disk 1 [1], disk 2 [2]"),
        "{analyzed}"
    );
    // Repair of a dead disk: a clear error.
    let e = common::fails(dir, &["repair", "--disk", "3"]);
    assert!(e.contains("disk 3 did not answer"), "{e}");
    let e = common::fails(dir, &["repair", "--disk", "9"]);
    assert!(e.contains("--disk 9"), "{e}");
}

/// A disk restarted empty repairs itself from its peers; `adisk scrub` refetches a copy with a
/// flipped byte from its other copy, and leaves (and reports) one that has no other copy.
#[test]
fn a_disk_repairs_itself_on_start_and_scrub_repairs_a_flipped_byte() {
    let c = TpchCluster::start("0.01", 2);
    let dir = c.dir();
    ok(
        dir,
        &[
            "load",
            "tpch",
            "--sf",
            "0.01",
            "--tables",
            "nation",
            "--replicas",
            "1",
        ],
    );
    kill_disk(dir, 1);
    std::fs::remove_dir_all(dir.join("disk-1")).unwrap();
    ok(dir, &["restart", "--disk", "1"]);
    common::wait_until("disk 1 to repair itself", Duration::from_secs(60), || {
        !any_needs_repair(dir)
    });
    let log = std::fs::read_to_string(dir.join("disk-1/disk.log")).unwrap();
    assert!(
        log.contains("repair on start") && log.contains("copies restored"),
        "{log}"
    );
    // Disk 0 dead: its partition 0 is now read from the restored disk 1 (nation, with its
    // one copy on disk 0, is lost meanwhile, so disk 0 is restarted before the TPC-H check).
    kill_disk(dir, 0);
    let analyzed = ok(
        dir,
        &["explain", "analyze", "select count(*) from lineitem"],
    );
    assert!(analyzed.contains("lineitem: disk 1 [0, 1]"), "{analyzed}");
    ok(dir, &["restart", "--disk", "0"]);
    check_tpch(dir, "auto", "disk 1 restored by itself");
    // Bit rot in lineitem partition 3 on disk 3 (its primary; the other copy is on disk 0). A
    // query reading every column hits it: the disk refuses the corrupt chunk and the query is
    // rerun reading disk 0's copy instead.
    let file = partition_file(dir, 3, "lineitem", 3);
    flip(&file);
    let every_column = "select count(*) from lineitem where concat(l_orderkey, l_partkey, l_suppkey, l_linenumber, l_quantity, l_extendedprice, l_discount, \
        l_tax, l_returnflag, l_linestatus, l_shipdate, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, l_comment) <> ''";
    let analyzed = ok(dir, &["explain", "analyze", every_column]);
    assert!(
        analyzed.contains("rerun without disk 3's corrupt copy of lineitem partition 3")
            && analyzed.contains("disk 0 [0, 3]"),
        "{analyzed}"
    );
    let answer = ok(dir, &["sql", every_column, "--format", "csv"]);
    assert!(answer.contains("60175"), "{answer}");
    let out = ok(dir, &["scrub"]);
    assert!(
        out.contains("disk 3:")
            && out.contains("1 corrupt, 1 repaired")
            && out.contains("repaired from disk 0"),
        "{out}"
    );
    let clean = ok(dir, &["scrub"]);
    assert_eq!(clean.matches(" 0 corrupt").count(), 4, "{clean}");
    check_tpch(dir, "auto", "after scrub repaired a flipped byte");
    // nation has one copy (disk 0): a flip there cannot be repaired, and says so.
    let nation = partition_file(dir, 0, "nation", 0);
    flip(&nation);
    let out = adisk(dir, &["scrub"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("corrupt: table nation")
            && stdout.contains("NOT repaired: nation partition 0: no live peer holds a copy"),
        "{stdout}"
    );
    assert!(stderr.contains("1 corrupt partitions left"), "{stderr}");
    flip(&nation);
    let out = ok(dir, &["scrub", "--no-repair"]);
    assert_eq!(out.matches(" 0 corrupt").count(), 4, "{out}");
}
