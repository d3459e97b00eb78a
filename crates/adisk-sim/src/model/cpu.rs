//! Processors and operating-system costs.
//!
//! Work is expressed in cycles (cycles per byte or per tuple of each operation, each with
//! its source in `docs/simulator.md`); time `= cycles / (mhz · 10^6)`. As in ADsim and
//! Howsim (acharya-… §5.1, uysal-… §3), a task's time scales with clock rate only.
//! OS costs are fixed times per event: a read/write system call, a context switch when a
//! blocked task is woken, queueing an I/O request in the driver, servicing an interrupt.

use serde::{Deserialize, Serialize};

/// A processor type.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    /// Clock rate, MHz.
    pub mhz: f64,
    /// Processors per node (board).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

impl CpuSpec {
    /// Seconds to execute `cycles` cycles.
    pub fn secs(&self, cycles: f64) -> f64 {
        cycles / (self.mhz * 1e6)
    }
}

/// Fixed OS costs, µs.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OsCosts {
    /// read/write system call, µs.
    pub syscall_us: f64,
    /// Context switch, µs.
    pub context_switch_us: f64,
    /// Queue an I/O request in the device driver, µs.
    pub io_queue_us: f64,
    /// Service an I/O (or network) interrupt, µs.
    pub interrupt_us: f64,
}

impl OsCosts {
    /// Host OS costs from uysal-… §3: 10 µs read/write call and 103 µs context switch
    /// (lmbench, 300 MHz Pentium II, Linux), 16 µs to queue an I/O request. The interrupt
    /// cost is not given in the papers; we assume it equals the system call (10 µs).
    pub fn host_default() -> OsCosts {
        OsCosts {
            syscall_us: 10.0,
            context_switch_us: 103.0,
            io_queue_us: 16.0,
            interrupt_us: 10.0,
        }
    }
    /// DiskOS costs from uysal-… §3: 1 µs system call and context switch, 1 µs to initiate a
    /// disk request and 1 µs to service an interrupt.
    pub fn diskos_default() -> OsCosts {
        OsCosts {
            syscall_us: 1.0,
            context_switch_us: 1.0,
            io_queue_us: 1.0,
            interrupt_us: 1.0,
        }
    }
    /// Cost charged per I/O request issued and completed by a task (syscall + queue + interrupt), µs.
    pub fn per_io_us(&self) -> f64 {
        self.syscall_us + self.io_queue_us + self.interrupt_us
    }
    /// Cost charged per message sent or received (syscall + interrupt), µs.
    pub fn per_message_us(&self) -> f64 {
        self.syscall_us + self.interrupt_us
    }
    /// Reject negative or non-finite costs.
    pub fn validate(&self) -> Result<(), String> {
        for (k, v) in [
            ("syscall_us", self.syscall_us),
            ("context_switch_us", self.context_switch_us),
            ("io_queue_us", self.io_queue_us),
            ("interrupt_us", self.interrupt_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{k}: must be >= 0, got {v}"));
            }
        }
        Ok(())
    }
}
