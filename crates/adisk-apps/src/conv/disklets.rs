//! The convolution's disklets: `convolve` (k file inputs, each buffer exactly one whole
//! image: convolved in place in the disklet's one-image scratch and emitted as a row
//! `image, pixels`; with `convolve: false` the raw image, for the conventional host) and
//! `check` (each stored image against the plain reference of the regenerated input).
use super::kernel::{Kernel, convolve_into, reference};
use crate::disklet_util::{Params, invalid};
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use arrow::array::{Array, BinaryArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Schema of convolved images: `image` (its number), `pixels` (side² bytes).
pub fn image_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("image", DataType::UInt32, false),
        Field::new("pixels", DataType::Binary, false),
    ]))
}

/// Schema of a check's summary.
pub fn check_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("images", DataType::UInt64, false),
        Field::new("mismatched", DataType::UInt64, false),
    ]))
}

/// The kernel of a stage's parameters (`weights`, `divisor`).
fn kernel(params: &Params<'_>) -> Result<Kernel> {
    Kernel::new(params.parse("weights")?, params.parse("divisor")?)
        .map_err(|e| invalid(e.to_string()))
}

/// Builds the convolution's disklet `name`.
///
/// # Errors
/// Unknown disklet, bad parameters or inputs.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    let side = params.u64("side")? as usize;
    if !(3..=8192).contains(&side) {
        return Err(invalid(format!("conv: side {side} is outside 3..=8192")));
    }
    let kernel = kernel(&params)?;
    match stage.disklet {
        "convolve" => {
            let images: Vec<u32> = params.parse("images")?;
            params.shape(images.len(), 1)?;
            if let Some(s) = stage.inputs.iter().find(|s| s.index_of("bytes").is_err()) {
                return Err(invalid(format!(
                    "conv.convolve reads image files, not {s:?}"
                )));
            }
            if (side * side) as u64 > stage.scratch_bytes {
                return Err(invalid(format!(
                    "conv.convolve: an image of {} bytes does not fit the scratch grant of {} bytes",
                    side * side,
                    stage.scratch_bytes
                )));
            }
            let apply = stage
                .params
                .get("convolve")
                .and_then(|v| v.as_bool())
                .unwrap_or(true);
            Ok(Box::new(Convolve {
                side,
                kernel,
                images,
                apply,
                out: Vec::with_capacity(side * side),
            }))
        }
        "check" => {
            params.shape(1, 1)?;
            Ok(Box::new(Check {
                side,
                kernel,
                images: 0,
                mismatched: 0,
            }))
        }
        other => Err(invalid(format!("conv has no disklet `{other}`"))),
    }
}

/// Convolves whole images, one per input buffer.
struct Convolve {
    side: usize,
    kernel: Kernel,
    /// The image number of each input.
    images: Vec<u32>,
    apply: bool,
    /// The one-image output buffer (scratch).
    out: Vec<u8>,
}

impl Disklet for Convolve {
    fn name(&self) -> &'static str {
        "conv_convolve"
    }
    fn output_schema(&self) -> SchemaRef {
        image_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let image = self.images[input.input];
        let bytes = input
            .batch
            .column_by_name("bytes")
            .and_then(|c| c.as_any().downcast_ref::<BinaryArray>())
            .ok_or_else(|| invalid("conv: not a file stream"))?;
        let whole = self.side * self.side;
        if input.position != 0 || bytes.len() != 1 || bytes.value(0).len() != whole {
            return Err(invalid(format!(
                "conv: image {image} is not one buffer of exactly {whole} bytes ({}×{} pixels)",
                self.side, self.side
            )));
        }
        let pixels = bytes.value(0);
        let result = if self.apply {
            convolve_into(pixels, self.side, &self.kernel, &mut self.out);
            BinaryArray::from_vec(vec![self.out.as_slice()])
        } else {
            BinaryArray::from_vec(vec![pixels])
        };
        let batch = RecordBatch::try_new(
            image_schema(),
            vec![Arc::new(UInt32Array::from(vec![image])), Arc::new(result)],
        )
        .map_err(|e| invalid(e.to_string()))?;
        out.emit(0, batch);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Emitter) -> Result<()> {
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.out.capacity() as u64
    }
}

/// Compares stored images with the plain reference of the regenerated inputs.
struct Check {
    side: usize,
    kernel: Kernel,
    images: u64,
    mismatched: u64,
}

impl Disklet for Check {
    fn name(&self) -> &'static str {
        "conv_check"
    }
    fn output_schema(&self) -> SchemaRef {
        check_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        let b = input.batch;
        let (Some(images), Some(pixels)) = (
            b.column_by_name("image")
                .and_then(|c| c.as_any().downcast_ref::<UInt32Array>()),
            b.column_by_name("pixels")
                .and_then(|c| c.as_any().downcast_ref::<BinaryArray>()),
        ) else {
            return Err(invalid("conv.check reads convolved images (image, pixels)"));
        };
        for i in 0..b.num_rows() {
            let source = adisk_storage::images::generate(images.value(i), self.side as u32);
            self.images += 1;
            if reference(&source, self.side, &self.kernel) != pixels.value(i) {
                self.mismatched += 1;
            }
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        let batch = RecordBatch::try_new(
            check_schema(),
            vec![
                Arc::new(UInt64Array::from(vec![self.images])),
                Arc::new(UInt64Array::from(vec![self.mismatched])),
            ],
        )
        .map_err(|e| invalid(e.to_string()))?;
        out.emit(0, batch);
        Ok(())
    }
}
