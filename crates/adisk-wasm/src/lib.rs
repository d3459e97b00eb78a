//! User disklets in WebAssembly: installed once per disk, run many times, sandboxed.
//!
//! ```text
//!  adisk disklet install f.wasm ──► DiskletRegistry::install: size bound, compile (wasmtime),
//!                                   imports ⊆ adisk_v1, exports present, memory max ≤ grant,
//!                                   disklets/<name>.wasm + index.json (tmp + rename), cache
//!  JobSpec stage Wasm{name,params} ─► DiskOS ─► registry.build ─► WasmDisklet (one Store):
//!        input buffer ──ADT1 copy──► guest input area ──adisk_process──► emit ─► Emitter
//!        limits: memory ≤ grant (limiter), fuel per job, output per call/job, traps → typed errors
//! ```
//!
//! * [`abi`]: ABI v1 constants and the ADT1 table layout (`docs/disklet-abi.md`).
//! * [`runtime`]: the engine, install-time validation, [`runtime::WasmDisklet`].
//! * [`registry`]: installed modules on a disk and the compiled-module cache.
#![warn(missing_docs)]

pub mod abi;
pub mod error;
pub mod registry;
pub mod runtime;

pub use error::WasmError;
pub use registry::DiskletRegistry;
pub use runtime::{WasmDisklet, WasmLimits, WasmRuntime};

use adisk_diskos::DiskOsError;
use adisk_diskos::user::UserDiskletFailure as F;

/// Maps a [`WasmError`] to the DiskOS error the disk server turns into a Flight status.
pub fn to_diskos_error(e: WasmError) -> DiskOsError {
    let kind = match &e {
        WasmError::NotInstalled(_) => F::NotInstalled,
        WasmError::BadName(_) | WasmError::InvalidJob(_) | WasmError::Abi(_) | WasmError::Malformed(_) | WasmError::ForbiddenImport { .. } => F::Invalid,
        WasmError::ModuleTooLarge { .. } | WasmError::Memory(_) | WasmError::MemoryExceeded { .. } | WasmError::OutputExceeded { .. } => F::ResourceExceeded,
        WasmError::BudgetExceeded { .. } => F::BudgetExceeded,
        WasmError::Trap { .. } => F::Trap,
        WasmError::Guest { .. } | WasmError::Io { .. } | WasmError::Registry(_) => F::Failed,
    };
    DiskOsError::UserDisklet { kind, message: e.to_string() }
}
