//! CPU emulation (issue 37): `adisk up --disk-cpus F` starts every disk in a cgroup of its
//! own whose quota is F cores' worth of CPU time (every thread of the process in it); the
//! disks still answer TPC-H right (against DuckDB's answers); `adisk down` leaves no group
//! behind; a limit out of range is refused before any disk starts.
//!
//! Needs root and a cgroup cpu controller (v1 or v2); elsewhere it says why and passes.
//! How closely the limit slows a CPU-bound disklet is a benchmark: `adisk bench cpu`.
mod common;

use common::{adisk, fails, ok};
use std::path::{Path, PathBuf};

struct Down<'a>(&'a Path);
impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = adisk(self.0, &["down"]);
    }
}

/// The root of the hierarchy with the cpu controller, if this process may make groups in it.
fn cpu_hierarchy() -> Result<(PathBuf, bool), String> {
    let fs = Path::new("/sys/fs/cgroup");
    let v2 = std::fs::read_to_string(fs.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "cpu"));
    let root = if v2 {
        fs.to_path_buf()
    } else if fs.join("cpu/cpu.cfs_quota_us").exists() {
        fs.join("cpu")
    } else {
        return Err("no cgroup cpu controller mounted".into());
    };
    let probe = root.join(format!("adisk-test-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("cannot make a cgroup: {e}"))?;
    let _ = std::fs::remove_dir(&probe);
    Ok((root, v2))
}

/// The cgroup path of the cpu controller in a `/proc/…/cgroup` file.
fn cpu_group(cgroup_file: &str, v2: bool) -> String {
    let text = std::fs::read_to_string(cgroup_file).unwrap();
    text.lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let ours = if v2 {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == "cpu")
            };
            ours.then(|| path.to_string())
        })
        .unwrap_or_else(|| panic!("no cpu controller in {cgroup_file}:\n{text}"))
}

#[test]
fn disks_limited_to_half_a_core_run_in_their_own_groups_answer_right_and_leave_none() {
    let (root, v2) = match cpu_hierarchy() {
        Ok(h) => h,
        Err(why) => {
            eprintln!("skipped: {why} (CPU emulation needs root and a cgroup cpu controller)");
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let e = fails(dir, &["up", "--disks", "1", "--disk-cpus", "0"]);
    assert!(e.contains("--disk-cpus 0"), "{e}");
    assert!(!dir.join("cluster.toml").exists(), "no disk started");
    ok(
        dir,
        &["up", "--disks", "2", "--disk-cpus", "0.5", "--no-serve"],
    );
    let _down = Down(dir);
    let config = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(config.contains("cpus = 0.5"), "{config}");
    let mut groups = Vec::new();
    for pid in common::disk_pids(dir) {
        let group = cpu_group(&format!("/proc/{pid}/cgroup"), v2);
        assert_eq!(group, format!("/adisk-disk-{pid}"));
        let g = root.join(group.trim_start_matches('/'));
        let read = |f: &str| std::fs::read_to_string(g.join(f)).unwrap();
        if v2 {
            assert_eq!(read("cpu.max").trim(), "5000 10000");
        } else {
            assert_eq!(read("cpu.cfs_quota_us").trim(), "5000");
            assert_eq!(read("cpu.cfs_period_us").trim(), "10000");
        }
        // Every thread of the disk is in the group.
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        for t in threads.flatten() {
            let file = t.path().join("cgroup");
            assert_eq!(cpu_group(file.to_str().unwrap(), v2), group);
        }
        groups.push(g);
    }
    ok(dir, &["load", "tpch", "--sf", "0.01"]);
    common::check_tpch(dir, "semijoin", "disks at half a core");
    ok(dir, &["down"]);
    common::wait_until(
        "the disks' groups to go",
        std::time::Duration::from_secs(20),
        || groups.iter().all(|g| !g.exists()),
    );
}

#[test]
fn disks_with_an_emulated_slower_processor_answer_right() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for bad in ["0", "1.5", "nan"] {
        let e = fails(dir, &["up", "--disks", "1", "--disk-cpu-speed", bad]);
        assert!(e.contains("--disk-cpu-speed"), "{e}");
    }
    ok(
        dir,
        &[
            "up",
            "--disks",
            "2",
            "--disk-cpu-speed",
            "0.5",
            "--no-serve",
        ],
    );
    let _down = Down(dir);
    let config = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(config.contains("cpu_speed = 0.5"), "{config}");
    let log = std::fs::read_to_string(dir.join("disk-0/disk.log")).unwrap_or_default();
    assert!(log.contains("emulated processor at 0.5"), "{log}");
    ok(dir, &["load", "tpch", "--sf", "0.01"]);
    common::check_tpch(dir, "disks", "disks at half speed");
}
