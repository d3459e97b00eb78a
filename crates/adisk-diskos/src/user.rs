//! User disklets (installed by users, e.g. WebAssembly modules): DiskOS only knows them through
//! [`UserDisklets`], which the disk node provides (`adisk-wasm`'s registry). They run behind
//! the same [`crate::disklet::Disklet`] interface, streams and grants as the built-ins.
pub use crate::error::UserDiskletFailure;

use crate::Result;
use crate::disklet::Disklet;
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;

/// What an installed user disklet declares: its ABI version, inputs and output ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserShape {
    /// ABI version (1 or 2).
    pub abi: u32,
    /// Inputs it reads (ABI v1: one).
    pub inputs: usize,
    /// Output ports it writes (ABI v1: one).
    pub outputs: usize,
}

/// The installed user disklets of a disk.
pub trait UserDisklets: Send + Sync + 'static {
    /// Memory grant of disklet `name` (its whole linear memory), bytes.
    ///
    /// # Errors
    /// Not installed.
    fn grant_bytes(&self, name: &str) -> Result<u64>;
    /// The shape disklet `name` declared when it was installed (no guest code runs).
    ///
    /// # Errors
    /// Not installed.
    fn shape(&self, name: &str) -> Result<UserShape>;
    /// Instantiates `name` for one job over `inputs` (one schema per input, in order) and
    /// runs its init with `params`. Guest code stops soon after `cancel` is set (a job whose
    /// host went away does not run its disklet to the end of its CPU budget).
    ///
    /// # Errors
    /// Not installed, inputs that do not match its shape, invalid input, or a failure of the
    /// disklet's init.
    fn build(
        &self,
        name: &str,
        params: &BTreeMap<String, String>,
        fuel: Option<u64>,
        inputs: &[SchemaRef],
        cancel: crate::cancel::CancelFlag,
    ) -> Result<Box<dyn Disklet>>;
}
