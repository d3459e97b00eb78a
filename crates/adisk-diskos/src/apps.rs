//! Applications' native disklets (`adisk app`, crate `adisk-apps`): DiskOS stays the OS and
//! knows them only through [`AppDisklets`], which the disk node registers. They run behind
//! the same [`crate::disklet::Disklet`] interface, streams and grants as the built-ins.
use crate::Result;
use crate::disklet::Disklet;
use arrow::datatypes::SchemaRef;

/// What a native application disklet is built from.
pub struct AppStage<'a> {
    /// The application.
    pub app: &'a str,
    /// The disklet within it.
    pub disklet: &'a str,
    /// Its parameters.
    pub params: &'a serde_json::Value,
    /// Schemas of its inputs, in order.
    pub inputs: &'a [SchemaRef],
    /// Output ports the job wired.
    pub ports: usize,
    /// Its scratch grant, bytes.
    pub scratch_bytes: u64,
}

/// The registered application disklets of a disk.
pub trait AppDisklets: Send + Sync + 'static {
    /// Instantiates a disklet ("init") for one job.
    ///
    /// # Errors
    /// Unknown application or disklet, parameters it does not accept, inputs or ports other
    /// than it takes (`DiskOsError::InvalidJob`).
    fn build(&self, stage: AppStage<'_>) -> Result<Box<dyn Disklet>>;
}
