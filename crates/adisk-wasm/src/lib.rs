//! User disklets in WebAssembly: installed once per disk, run many times, sandboxed.
//!
//! ```text
//!  adisk disklet install f.wasm ──► DiskletRegistry::install: size bound, compile (wasmtime),
//!                                   ABI version (v1 / v2), imports ⊆ adisk_v1 or adisk_v2,
//!                                   exports present, v2 shape (inputs, ports), memory max ≤
//!                                   grant, disklets/<name>.wasm + index.json (tmp + rename), cache
//!  JobSpec stage Wasm{name,params} ─► DiskOS (shape checked before admission) ─► registry.build
//!        ─► WasmDisklet (one Store): input buffers ──ADT1 copy──► the input's area in guest
//!        memory ──adisk_process──► emit(port) ─► Emitter; the guest picks its next input
//!        limits: memory ≤ grant (limiter), fuel per job, output per call/job, traps → typed errors
//! ```
//!
//! * [`abi`]: ABI constants (v1, v2), shapes, and the ADT1 table layout (`docs/disklet-abi.md`).
//! * [`limits`]: the limits every user disklet of a disk runs under ([`WasmLimits`]).
//! * [`validate`]: install-time validation of a compiled module.
//! * [`runtime`]: the engine and [`runtime::WasmDisklet`].
//! * [`registry`]: installed modules on a disk and the compiled-module cache.
#![warn(missing_docs)]

pub mod abi;
pub mod error;
mod host;
mod input;
pub mod limits;
pub mod registry;
pub mod runtime;
pub mod validate;

pub use error::WasmError;
pub use registry::DiskletRegistry;
pub use runtime::{WasmDisklet, WasmLimits, WasmRuntime};

use adisk_diskos::DiskOsError;
use adisk_diskos::user::UserDiskletFailure as F;

/// Maps a [`WasmError`] to the DiskOS error the disk server turns into a Flight status.
pub fn to_diskos_error(e: WasmError) -> DiskOsError {
    let kind = match &e {
        WasmError::Cancelled { .. } => return DiskOsError::Cancelled,
        WasmError::NotInstalled(_) => F::NotInstalled,
        WasmError::BadName(_)
        | WasmError::InvalidJob(_)
        | WasmError::Abi(_)
        | WasmError::Malformed(_)
        | WasmError::ForbiddenImport { .. } => F::Invalid,
        WasmError::ModuleTooLarge { .. }
        | WasmError::Memory(_)
        | WasmError::MemoryExceeded { .. }
        | WasmError::OutputExceeded { .. } => F::ResourceExceeded,
        WasmError::BudgetExceeded { .. } => F::BudgetExceeded,
        WasmError::Trap { .. } => F::Trap,
        WasmError::Guest { .. } | WasmError::Io { .. } | WasmError::Registry(_) => F::Failed,
    };
    DiskOsError::UserDisklet {
        kind,
        message: e.to_string(),
    }
}
