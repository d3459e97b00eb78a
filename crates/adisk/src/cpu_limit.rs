//! CPU emulation for a disk process: `adisk disk --cpus F` moves the process (every thread of
//! it) into a cgroup of its own whose CPU quota is F cores' worth of time per period, so that
//! a disk can stand in for a slower CPU (issue 37's "emulation in the runtime"). cgroup v2
//! (`cpu.max`) where the unified hierarchy has the `cpu` controller, else v1
//! (`cpu.cfs_quota_us` and `cpu.cfs_period_us`).
//!
//! The group is `adisk-disk-PID` under the hierarchy's root. The disk moves itself back to
//! the root and removes the group when it stops; the groups of disks that were killed are
//! removed by the next disk that limits its CPU (a group with no process left in it).
use std::path::{Path, PathBuf};

/// The scheduling period, µs: short enough that a job of a few hundred milliseconds sees
/// many periods, so its time stretches smoothly.
const PERIOD_US: u64 = 10_000;
/// The longer period used when F × 10 ms would be under the kernel's 1 ms minimum quota.
const LONG_PERIOD_US: u64 = 100_000;
/// The kernel's minimum quota, µs.
const MIN_QUOTA_US: u64 = 1_000;
/// The prefix of the groups this module makes.
const GROUP_PREFIX: &str = "adisk-disk-";

/// Why a CPU limit could not be set.
#[derive(Debug, thiserror::Error)]
pub enum CpuLimitError {
    /// The requested number of cores is not a positive number within the machine's cores.
    #[error("--cpus {0}: give a number of cores above 0.01 and at most {1} (this machine's cores)")]
    Cores(f64, usize),
    /// No cgroup hierarchy with the cpu controller.
    #[error(
        "--cpus needs the cgroup cpu controller (v2 `cpu` in /sys/fs/cgroup/cgroup.controllers, or v1 /sys/fs/cgroup/cpu); none is mounted here"
    )]
    NoController,
    /// A cgroup file could not be written (usually: not root).
    #[error(
        "--cpus: {what} {path}: {source} (limiting a disk's CPU needs root, or a delegated cgroup)"
    )]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Which cgroup hierarchy holds the cpu controller.
#[derive(Clone, Debug, PartialEq)]
enum Hierarchy {
    /// cgroup v2: the unified hierarchy's root.
    V2(PathBuf),
    /// cgroup v1: the cpu controller's root.
    V1(PathBuf),
}

impl Hierarchy {
    fn root(&self) -> &Path {
        match self {
            Hierarchy::V2(p) | Hierarchy::V1(p) => p,
        }
    }
}

/// Finds the hierarchy under `fs` (normally `/sys/fs/cgroup`): v2 if its root lists the
/// `cpu` controller, else a v1 `cpu` (or `cpu,cpuacct`) mount.
fn detect(fs: &Path) -> Option<Hierarchy> {
    if let Ok(c) = std::fs::read_to_string(fs.join("cgroup.controllers"))
        && c.split_whitespace().any(|w| w == "cpu")
    {
        return Some(Hierarchy::V2(fs.to_path_buf()));
    }
    ["cpu", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .map(|d| fs.join(d))
        .find(|p| p.join("cpu.cfs_quota_us").exists())
        .map(Hierarchy::V1)
}

/// The quota and period, µs, that give `cores` cores' worth of CPU time.
fn quota(cores: f64) -> (u64, u64) {
    let q = (cores * PERIOD_US as f64).round() as u64;
    if q >= MIN_QUOTA_US {
        return (q, PERIOD_US);
    }
    let q = (cores * LONG_PERIOD_US as f64).round() as u64;
    (q.max(MIN_QUOTA_US), LONG_PERIOD_US)
}

/// A disk process's CPU limit: while it lives the process runs in its own group.
#[derive(Debug)]
pub struct CpuLimit {
    group: PathBuf,
    root: PathBuf,
    cores: f64,
    quota_us: u64,
    period_us: u64,
}

impl CpuLimit {
    /// Limits this process to `cores` cores' worth of CPU time.
    pub fn apply(cores: f64) -> Result<CpuLimit, CpuLimitError> {
        let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
        if !cores.is_finite() || cores < 0.01 || cores > machine as f64 {
            return Err(CpuLimitError::Cores(cores, machine));
        }
        let h = detect(Path::new("/sys/fs/cgroup")).ok_or(CpuLimitError::NoController)?;
        Self::apply_in(&h, cores, std::process::id())
    }

    fn apply_in(h: &Hierarchy, cores: f64, pid: u32) -> Result<CpuLimit, CpuLimitError> {
        let root = h.root().to_path_buf();
        sweep(&root);
        let group = root.join(format!("{GROUP_PREFIX}{pid}"));
        let (quota_us, period_us) = quota(cores);
        if let Hierarchy::V2(_) = h {
            // The root's children get the cpu controller (already on in most systems).
            let control = root.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&control).unwrap_or_default();
            if !on.split_whitespace().any(|w| w == "cpu") {
                write(&control, "+cpu", "enabling the cpu controller in")?;
            }
        }
        match std::fs::create_dir(&group) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(CpuLimitError::Io {
                    what: "creating",
                    path: group,
                    source,
                });
            }
        }
        let limit = CpuLimit {
            group,
            root,
            cores,
            quota_us,
            period_us,
        };
        match h {
            Hierarchy::V2(_) => write(
                &limit.group.join("cpu.max"),
                &format!("{quota_us} {period_us}"),
                "writing",
            )?,
            Hierarchy::V1(_) => {
                // The period first: a quota is checked against the period in force.
                let p = limit.group.join("cpu.cfs_period_us");
                write(&p, &period_us.to_string(), "writing")?;
                let q = limit.group.join("cpu.cfs_quota_us");
                write(&q, &quota_us.to_string(), "writing")?;
            }
        }
        let procs = limit.group.join("cgroup.procs");
        write(&procs, &pid.to_string(), "moving the disk into")?;
        Ok(limit)
    }

    /// The limit, in cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// A line for the disk's log.
    pub fn describe(&self) -> String {
        format!(
            "CPU limited to {} cores' worth ({} µs per {} µs) in cgroup {}",
            self.cores,
            self.quota_us,
            self.period_us,
            self.group.display()
        )
    }
}

impl Drop for CpuLimit {
    /// Moves the process, and any child of it still in the group (an idle TPC-H generator
    /// waiting out its timeout), back to the root group and removes its own.
    fn drop(&mut self) {
        let procs = self.root.join("cgroup.procs");
        let _ = std::fs::write(&procs, std::process::id().to_string());
        let inside = std::fs::read_to_string(self.group.join("cgroup.procs")).unwrap_or_default();
        for pid in inside.split_whitespace() {
            let _ = std::fs::write(&procs, pid);
        }
        let _ = std::fs::remove_dir(&self.group);
    }
}

fn write(path: &Path, value: &str, what: &'static str) -> Result<(), CpuLimitError> {
    std::fs::write(path, value).map_err(|source| CpuLimitError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Removes the groups of disks that are gone: empty ones (the kernel refuses to remove a group
/// that holds a process) whose disk process no longer runs. A disk starting beside this one
/// has made its group but not yet moved into it: removing that one failed its start-up.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(GROUP_PREFIX)) else {
            continue;
        };
        let running = pid
            .parse::<u32>()
            .is_ok_and(|p| Path::new("/proc").join(p.to_string()).exists());
        let empty = std::fs::read_to_string(e.path().join("cgroup.procs"))
            .map_or(true, |p| p.trim().is_empty());
        if empty && !running {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// The cgroup (CPU controller) that process `pid` is in, relative to the hierarchy's root,
/// and its limit in cores (None: unlimited): what `adisk up` and the tests read back.
pub fn limit_of(pid: u32) -> Option<(String, Option<f64>)> {
    let h = detect(Path::new("/sys/fs/cgroup"))?;
    let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = lines.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let ours = match &h {
            Hierarchy::V2(_) => controllers.is_empty(),
            Hierarchy::V1(_) => controllers.split(',').any(|c| c == "cpu"),
        };
        ours.then(|| path.to_string())
    })?;
    let dir = h.root().join(path.trim_start_matches('/'));
    let cores = match &h {
        Hierarchy::V2(_) => {
            let max = std::fs::read_to_string(dir.join("cpu.max")).ok()?;
            let mut it = max.split_whitespace();
            let (q, p) = (it.next()?, it.next()?);
            match (q.parse::<f64>(), p.parse::<f64>()) {
                (Ok(q), Ok(p)) if p > 0.0 => Some(q / p),
                _ => None,
            }
        }
        Hierarchy::V1(_) => {
            let read = |f: &str| -> Option<f64> {
                std::fs::read_to_string(dir.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            let (q, p) = (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?);
            (q > 0.0 && p > 0.0).then(|| q / p)
        }
    };
    Some((path, cores))
}

#[cfg(test)]
mod tests {
    /// The sweep removes a gone disk's empty group, never a running process's (a disk still
    /// setting its group up), nor anything not named as ours.
    #[test]
    fn the_sweep_leaves_the_groups_of_running_processes() {
        let root = tempfile::tempdir().unwrap();
        let mine = root
            .path()
            .join(format!("{}{}", super::GROUP_PREFIX, std::process::id()));
        let gone = root
            .path()
            .join(format!("{}{}", super::GROUP_PREFIX, u32::MAX - 1));
        let other = root.path().join("someone-else");
        for d in [&mine, &gone, &other] {
            std::fs::create_dir(d).unwrap();
        }
        super::sweep(root.path());
        assert!(mine.exists());
        assert!(!gone.exists());
        assert!(other.exists());
    }

    use super::*;

    #[test]
    fn quota_is_cores_times_the_period_with_a_longer_period_for_tiny_limits() {
        assert_eq!(quota(1.0), (10_000, 10_000));
        assert_eq!(quota(0.5), (5_000, 10_000));
        assert_eq!(quota(2.0), (20_000, 10_000));
        assert_eq!(quota(0.1), (1_000, 10_000));
        assert_eq!(quota(0.05), (5_000, 100_000));
        assert_eq!(quota(0.01), (1_000, 100_000));
    }

    #[test]
    fn detects_v2_by_its_controllers_and_v1_by_its_quota_file() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(detect(t.path()), None);
        std::fs::create_dir(t.path().join("cpu,cpuacct")).unwrap();
        std::fs::write(t.path().join("cpu,cpuacct/cpu.cfs_quota_us"), "-1").unwrap();
        let v1 = Hierarchy::V1(t.path().join("cpu,cpuacct"));
        assert_eq!(detect(t.path()), Some(v1));
        std::fs::write(t.path().join("cgroup.controllers"), "cpuset cpu io").unwrap();
        assert_eq!(detect(t.path()), Some(Hierarchy::V2(t.path().into())));
    }

    #[test]
    fn v2_writes_cpu_max_and_the_pid_and_sweeps_empty_groups() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::write(root.join("cgroup.subtree_control"), "memory").unwrap();
        // A killed disk's group (empty) and a live one's (a process in it).
        // (A plain directory with files cannot be removed as a cgroup can: the killed
        // disk's stands empty.)
        // (The killed disk's pid is one no process has: pid 1 runs.)
        std::fs::create_dir(root.join("adisk-disk-4294967294")).unwrap();
        std::fs::create_dir(root.join("adisk-disk-2")).unwrap();
        std::fs::write(root.join("adisk-disk-2/cgroup.procs"), "2\n").unwrap();
        let h = Hierarchy::V2(root.into());
        let limit = CpuLimit::apply_in(&h, 0.5, 77).unwrap();
        let group = root.join("adisk-disk-77");
        let read = |f: &str| std::fs::read_to_string(group.join(f)).unwrap();
        assert_eq!(read("cpu.max"), "5000 10000");
        assert_eq!(read("cgroup.procs"), "77");
        let control = std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap();
        assert_eq!(control, "+cpu");
        assert!(
            root.join("adisk-disk-2").exists(),
            "a live disk's group stays"
        );
        assert!(
            !root.join("adisk-disk-4294967294").exists(),
            "a killed disk's group goes"
        );
        assert!(limit.describe().contains("5000 µs per 10000 µs"));
    }

    #[test]
    fn v1_writes_the_period_and_quota() {
        let t = tempfile::tempdir().unwrap();
        let h = Hierarchy::V1(t.path().into());
        let _limit = CpuLimit::apply_in(&h, 0.25, 5).unwrap();
        let read = |f: &str| std::fs::read_to_string(t.path().join("adisk-disk-5").join(f));
        assert_eq!(read("cpu.cfs_quota_us").unwrap(), "2500");
        assert_eq!(read("cpu.cfs_period_us").unwrap(), "10000");
        assert_eq!(read("cgroup.procs").unwrap(), "5");
    }

    #[test]
    fn a_missing_hierarchy_is_a_clear_error() {
        let h = Hierarchy::V1(PathBuf::from("/nonexistent/cgroup/cpu"));
        let e = CpuLimit::apply_in(&h, 0.5, 1).unwrap_err().to_string();
        assert!(e.contains("needs root"), "{e}");
        assert!(CpuLimit::apply(0.0).is_err());
        assert!(CpuLimit::apply(f64::NAN).is_err());
        assert!(
            CpuLimit::apply(1e9)
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
    }
}
