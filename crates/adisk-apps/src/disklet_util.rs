//! What every application disklet needs: its parameters read with clear errors, its shape
//! checked, and DiskOS's typed errors.
use adisk_diskos::apps::AppStage;
use adisk_diskos::{DiskOsError, Result};

/// An invalid job (bad parameters, inputs or wiring).
pub fn invalid(message: impl Into<String>) -> DiskOsError {
    DiskOsError::InvalidJob(message.into())
}

/// A disklet's state outgrew its scratch grant.
pub fn scratch_exceeded(disklet: &'static str, granted_bytes: u64, detail: String) -> DiskOsError {
    DiskOsError::ScratchExceeded {
        disklet,
        granted_bytes,
        detail,
    }
}

/// The parameters of one application disklet.
pub struct Params<'a> {
    name: String,
    value: &'a serde_json::Value,
    inputs: usize,
    ports: usize,
}

impl<'a> Params<'a> {
    /// The parameters of `stage` (a JSON object, or null for none).
    ///
    /// # Errors
    /// Parameters that are not an object.
    pub fn new(stage: &AppStage<'a>) -> Result<Self> {
        let name = format!("{}.{}", stage.app, stage.disklet);
        if !(stage.params.is_object() || stage.params.is_null()) {
            return Err(invalid(format!("{name}: parameters must be a JSON object")));
        }
        Ok(Params {
            name,
            value: stage.params,
            inputs: stage.inputs.len(),
            ports: stage.ports,
        })
    }

    /// Checks the wiring: `inputs` inputs and `ports` output ports.
    ///
    /// # Errors
    /// Any other count.
    pub fn shape(&self, inputs: usize, ports: usize) -> Result<()> {
        if (self.inputs, self.ports) != (inputs, ports) {
            return Err(invalid(format!(
                "{} takes {inputs} input(s) and writes {ports} port(s); the job wires {} and {}",
                self.name, self.inputs, self.ports
            )));
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Result<&'a serde_json::Value> {
        self.value
            .get(key)
            .ok_or_else(|| invalid(format!("{}: parameter `{key}` is missing", self.name)))
    }

    /// An unsigned integer parameter.
    ///
    /// # Errors
    /// Missing or not an unsigned integer.
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.get(key)?.as_u64().ok_or_else(|| {
            invalid(format!(
                "{}: parameter `{key}` must be an unsigned integer",
                self.name
            ))
        })
    }

    /// A float parameter.
    ///
    /// # Errors
    /// Missing or not a number.
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.get(key)?
            .as_f64()
            .ok_or_else(|| invalid(format!("{}: parameter `{key}` must be a number", self.name)))
    }

    /// A parameter of any serde type.
    ///
    /// # Errors
    /// Missing or of another shape.
    pub fn parse<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<T> {
        serde_json::from_value(self.get(key)?.clone())
            .map_err(|e| invalid(format!("{}: parameter `{key}`: {e}", self.name)))
    }
}

/// Small batches gathered into one before they are emitted: a disklet that keeps a few rows
/// of every buffer (a sample) would otherwise ship one Flight message, with its framing, per
/// input buffer.
#[derive(Default)]
pub struct Gather {
    held: Vec<arrow::array::RecordBatch>,
    bytes: u64,
}

impl Gather {
    /// Bytes gathered before they are emitted together.
    pub const FLUSH_BYTES: u64 = 64 * 1024;

    /// Adds `batch`; emits what is gathered on `port` once it reaches [`Gather::FLUSH_BYTES`].
    ///
    /// # Errors
    /// Batches of different schemas.
    pub fn add(
        &mut self,
        batch: arrow::array::RecordBatch,
        port: usize,
        out: &mut adisk_diskos::disklet::Emitter,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.bytes += adisk_core::stats::batch_bytes(&batch);
        self.held.push(batch);
        if self.bytes >= Self::FLUSH_BYTES {
            self.flush(port, out)?;
        }
        Ok(())
    }

    /// Emits everything gathered on `port`.
    ///
    /// # Errors
    /// Batches of different schemas.
    pub fn flush(&mut self, port: usize, out: &mut adisk_diskos::disklet::Emitter) -> Result<()> {
        if let Some(first) = self.held.first() {
            let all = arrow::compute::concat_batches(&first.schema(), &self.held)
                .map_err(|e| invalid(e.to_string()))?;
            out.emit(port, all);
        }
        self.held.clear();
        self.bytes = 0;
        Ok(())
    }

    /// Bytes held (count them in the disklet's scratch).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
