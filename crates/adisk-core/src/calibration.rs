//! `costs.toml`: what one core of a machine costs per unit of each operator, measured by
//! `adisk calibrate` on the engine's own code. One file, two readers:
//!
//! * `[costs]` in ns per unit on one core: `auto`'s cost model (`adisk-host`'s
//!   `sql::cost`) prices scans, moves and joins with them, scaled by each disk's emulated
//!   speed;
//! * `[sim]` in cycles of the measured clock (ns × `clock_ghz`): the simulator's named costs
//!   (`adisk-sim`'s `costs::COSTS`), read by an experiment's `workload.calibration`, scaled by
//!   each simulated processor's clock.
//!
//! ```toml
//! [machine]
//! cpu = "Intel(R) Xeon(R) …"
//! cores = 2
//! clock_ghz = 2.9                       # measured: a chain of dependent adds
//! measured = "2026-11-29T05:10:00Z"
//! adisk = "0.1.0"
//!
//! [costs.scan_ns_per_byte]
//! ns = 0.61
//! per = "byte of stored lineitem"
//! how = "decode uncompressed pages + one predicate (Select), median of 5"
//!
//! [sim]
//! select_cycles_per_byte = 1.77
//! ```
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Decode a table's stored pages and qualify its rows with one predicate, per stored byte.
pub const SCAN: &str = "scan_ns_per_byte";
/// Arrow IPC encoding (what a stream's sender does), per byte of IPC.
pub const IPC_ENCODE: &str = "ipc_encode_ns_per_byte";
/// Arrow IPC decoding (what a stream's receiver does), per byte of IPC.
pub const IPC_DECODE: &str = "ipc_decode_ns_per_byte";
/// A hash join (DataFusion's, as the disks' fragments and the host run it), per byte of its
/// two inputs.
pub const JOIN: &str = "join_ns_per_byte";
/// Hash-join build, per build row.
pub const HASH_BUILD: &str = "hash_build_ns_per_row";
/// Hash-join probe, per probe row.
pub const HASH_PROBE: &str = "hash_probe_ns_per_row";
/// A hash group-by with a few thousand groups and one sum, per input row.
pub const HASH_GROUP: &str = "hash_group_ns_per_row";
/// A sum over all rows (no groups), per input row.
pub const AGGREGATE: &str = "aggregate_ns_per_row";
/// A sort on one key, per row and per log₂ of the rows.
pub const SORT_COMPARE: &str = "sort_compare_ns";
/// Probing a Bloom filter with one key column, per row.
pub const BLOOM_PROBE: &str = "bloom_probe_ns_per_row";
/// Shipping a Bloom filter in a job spec: encoding it at the host and decoding it at a disk,
/// per byte of filter.
pub const FILTER_SHIP: &str = "filter_ship_ns_per_byte";
/// Hash-partitioning rows on one key column into 4 parts, per row.
pub const PARTITION: &str = "partition_ns_per_row";
/// A memory-to-memory copy, per byte.
pub const COPY: &str = "copy_ns_per_byte";
/// A disk job of one stage that reads nothing: admission, building, the stream's set-up and
/// its end, per job (CPU of the disk's process).
pub const STAGE: &str = "stage_ns";
/// Sending a byte of a stream through the cluster's transport (IPC encoding, Flight, HTTP/2,
/// TLS), at the sender, per byte.
pub const SEND: &str = "send_ns_per_byte";
/// Receiving a byte of a stream through the cluster's transport, at the receiver, per byte.
pub const RECEIVE: &str = "receive_ns_per_byte";
/// A host-centric plan's host, per byte it receives: receiving, joining and aggregating it
/// (measured end to end on a cluster).
pub const HOST_BYTE: &str = "host_ns_per_byte_received";
/// A `disks` plan's disks, per byte exchanged between them: sending, receiving and joining it
/// (measured end to end on a cluster).
pub const EXCHANGE_BYTE: &str = "exchange_ns_per_byte";
/// The host's side of one disk job: planning its share, submitting it, reading its stream
/// and statistics (CPU of the host's process).
pub const JOB_HOST: &str = "job_host_ns";

/// The largest cost file read (they are a few KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The machine a calibration was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// Its processor's model name.
    pub cpu: String,
    /// Its cores.
    pub cores: u32,
    /// Its clock as measured (a chain of dependent adds), GHz.
    pub clock_ghz: f64,
    /// When (RFC 3339).
    pub measured: String,
    /// The `adisk` version that measured it.
    pub adisk: String,
}

/// One measured cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    /// ns per unit on one core.
    pub ns: f64,
    /// The unit.
    pub per: String,
    /// How it was measured.
    pub how: String,
}

/// A `costs.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Where it was measured.
    pub machine: Machine,
    /// The runtime's costs, by name ([`SCAN`], [`JOIN`], …).
    pub costs: BTreeMap<String, Cost>,
    /// The simulator's named costs in cycles of [`Machine::clock_ghz`].
    #[serde(default)]
    pub sim: BTreeMap<String, f64>,
}

/// Errors reading a `costs.toml`.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The file could not be read or written.
    #[error("cost file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a cost file.
    #[error("cost file {path} is malformed: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Calibration {
    /// Reads and checks `path`: every cost finite and > 0, the clock too.
    ///
    /// # Errors
    /// [`CalibrationError`] naming the file and what is wrong.
    pub fn load(path: &Path) -> Result<Self, CalibrationError> {
        let invalid = |reason: String| CalibrationError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let io = |source| CalibrationError::Io {
            path: path.to_path_buf(),
            source,
        };
        if std::fs::metadata(path).map_err(io)?.len() > MAX_FILE_BYTES {
            return Err(invalid(format!(
                "larger than {MAX_FILE_BYTES} bytes (a cost file is a few KiB)"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        let c: Calibration = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        c.check().map_err(invalid)?;
        Ok(c)
    }

    /// Every figure finite and positive.
    pub fn check(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(self.machine.clock_ghz) {
            return Err(format!(
                "machine.clock_ghz must be > 0, got {}",
                self.machine.clock_ghz
            ));
        }
        for (name, c) in &self.costs {
            if !ok(c.ns) {
                return Err(format!("costs.{name}.ns must be > 0, got {}", c.ns));
            }
        }
        for (name, v) in &self.sim {
            if !(v.is_finite() && *v >= 0.0) {
                return Err(format!("sim.{name} must be >= 0, got {v}"));
            }
        }
        Ok(())
    }

    /// Writes it to `path` (TOML, with a header saying what it is).
    ///
    /// # Errors
    /// [`CalibrationError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), CalibrationError> {
        let body = toml::to_string_pretty(self).map_err(|e| CalibrationError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let text = format!(
            "# ActiveDisk cost file, written by `adisk calibrate`: ns per unit on one core\n# ([costs], read by `auto`) and the simulator's costs in cycles of this clock ([sim]).\n{body}"
        );
        std::fs::write(path, text).map_err(|source| CalibrationError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// ns per unit of a named cost, if measured.
    pub fn ns(&self, name: &str) -> Option<f64> {
        self.costs.get(name).map(|c| c.ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Calibration {
        let mut costs = BTreeMap::new();
        costs.insert(
            SCAN.to_string(),
            Cost {
                ns: 0.6,
                per: "byte".into(),
                how: "test".into(),
            },
        );
        Calibration {
            machine: Machine {
                cpu: "test".into(),
                cores: 2,
                clock_ghz: 3.0,
                measured: "now".into(),
                adisk: "0".into(),
            },
            costs,
            sim: [("select_cycles_per_byte".to_string(), 1.8)].into(),
        }
    }

    #[test]
    fn a_cost_file_round_trips_and_bad_figures_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("costs.toml");
        let c = sample();
        c.save(&path).unwrap();
        assert_eq!(Calibration::load(&path).unwrap(), c);
        assert_eq!(c.ns(SCAN), Some(0.6));
        assert_eq!(c.ns(JOIN), None);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("ns = 0.6", "ns = -1.0")).unwrap();
        let e = Calibration::load(&path).unwrap_err().to_string();
        assert!(e.contains("costs.scan_ns_per_byte.ns must be > 0"), "{e}");
        std::fs::write(&path, "[machine]\ncpu = 1\n").unwrap();
        let e = Calibration::load(&path).unwrap_err().to_string();
        assert!(e.contains("malformed"), "{e}");
        std::fs::write(&path, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = Calibration::load(&path).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        let e = Calibration::load(&dir.path().join("none.toml")).unwrap_err();
        assert!(matches!(e, CalibrationError::Io { .. }), "{e}");
    }
}
