//! The sort's disklets: `sample` (every k-th key, for the splitters), `runs` (sorted runs
//! within scratch, pass 1) and `check` (the valsort summary of a stream). The merge of pass 2
//! is DiskOS's built-in `merge`.
use super::records::{KEY_BYTES, Summary};
use crate::disklet_util::{Params, invalid, scratch_exceeded};
use adisk_core::stats::batch_bytes;
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use arrow::array::{RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Builds the sort's disklet `name`.
///
/// # Errors
/// Unknown disklet, bad parameters, inputs without a 10-byte `key`.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    params.shape(1, 1)?;
    let input = &stage.inputs[0];
    let key = match stage.params.get("key") {
        Some(_) => params.parse::<String>("key")?,
        None => "key".to_string(),
    };
    let key = key_column(input, &key)?;
    Ok(match stage.disklet {
        "sample" => Box::new(Sample {
            gathered: Default::default(),
            every: params.u64("every")?.max(1),
            key,
            schema: Arc::new(Schema::new(vec![input.field(key).clone()])),
        }),
        "runs" => Box::new(Runs::new(stage, &params, key)?),
        "check" => {
            record_key(input)?;
            Box::new(Check {
                summary: Summary::default(),
            })
        }
        other => return Err(invalid(format!("the sort has no disklet `{other}`"))),
    })
}

/// The sort key column `key`: an integer or fixed-size binary column.
fn key_column(schema: &Schema, key: &str) -> Result<usize> {
    let i = schema
        .index_of(key)
        .map_err(|_| invalid(format!("the sort's input has no key column `{key}`")))?;
    let t = schema.field(i).data_type();
    if t.is_integer() || matches!(t, DataType::FixedSizeBinary(_)) {
        Ok(i)
    } else {
        Err(invalid(format!(
            "sort key `{key}` is {t}: integer or fixed-size binary keys only"
        )))
    }
}

/// The 10-byte key of sort benchmark records.
fn record_key(schema: &Schema) -> Result<usize> {
    schema
        .index_of("key")
        .ok()
        .filter(|i| schema.field(*i).data_type() == &DataType::FixedSizeBinary(KEY_BYTES as i32))
        .ok_or_else(|| invalid(format!("sort records need a {KEY_BYTES}-byte `key` column")))
}

/// Emits the key of every `every`-th record (by position in the stream).
struct Sample {
    every: u64,
    gathered: crate::disklet_util::Gather,
    key: usize,
    schema: SchemaRef,
}

impl Disklet for Sample {
    fn name(&self) -> &'static str {
        "sort_sample"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let keys = input.batch.column(self.key);
        let picked: Vec<u32> = (0..input.batch.num_rows() as u64)
            .filter(|i| (input.position + i) % self.every == 0)
            .map(|i| i as u32)
            .collect();
        let taken = arrow::compute::take(keys.as_ref(), &UInt32Array::from(picked), None)
            .map_err(|e| invalid(e.to_string()))?;
        let batch = RecordBatch::try_new(self.schema.clone(), vec![taken])
            .map_err(|e| invalid(e.to_string()))?;
        self.gathered.add(batch, 0, out)?;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.gathered.flush(0, out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.gathered.bytes()
    }
}

/// Pass 1 of NOW-sort at a disk: holds records up to `run_bytes` (half its scratch: the
/// sorted copy takes the other half), sorts them by key and hands the run out with its
/// number in column `run`, buffer by buffer (a split result writes each run to its own
/// partition).
struct Runs {
    key: usize,
    run_bytes: u64,
    scratch_granted: u64,
    held: Vec<RecordBatch>,
    held_bytes: u64,
    /// Bytes of the sorted run being handed out.
    sorted_bytes: u64,
    /// The sorted run being handed out, and the next row of it.
    sorted: Option<(RecordBatch, usize)>,
    run: u32,
    schema: SchemaRef,
}

impl Runs {
    fn new(stage: &AppStage<'_>, params: &Params<'_>, key: usize) -> Result<Self> {
        let run_bytes = params.u64("run_bytes")?;
        if run_bytes == 0 || run_bytes.saturating_mul(2) > stage.scratch_bytes {
            return Err(invalid(format!(
                "sort.runs: a run of {run_bytes} bytes needs twice that in scratch; {} granted",
                stage.scratch_bytes
            )));
        }
        let mut fields: Vec<Field> = stage.inputs[0]
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("run", DataType::UInt32, false));
        Ok(Runs {
            key,
            run_bytes,
            scratch_granted: stage.scratch_bytes,
            held: Vec::new(),
            held_bytes: 0,
            sorted_bytes: 0,
            sorted: None,
            run: 0,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// Sorts what is held into the next run.
    fn cut_run(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let all = arrow::compute::concat_batches(&self.held[0].schema(), &self.held)
            .map_err(|e| invalid(e.to_string()))?;
        self.held.clear();
        let order = arrow::compute::sort_to_indices(all.column(self.key), None, None)
            .map_err(|e| invalid(e.to_string()))?;
        let sorted =
            arrow::compute::take_record_batch(&all, &order).map_err(|e| invalid(e.to_string()))?;
        let mut columns = sorted.columns().to_vec();
        columns.push(Arc::new(UInt32Array::from(vec![
            self.run;
            sorted.num_rows()
        ])));
        let with_run = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| invalid(e.to_string()))?;
        self.held_bytes = 0;
        self.sorted_bytes = batch_bytes(&with_run);
        self.sorted = Some((with_run, 0));
        self.run += 1;
        Ok(())
    }

    /// Emits as much of the sorted run as the emitter takes.
    fn hand_out(&mut self, out: &mut Emitter) {
        let Some((run, next)) = &mut self.sorted else {
            return;
        };
        let row_bytes = (batch_bytes(run) / run.num_rows().max(1) as u64).max(1);
        while *next < run.num_rows() {
            let rows = ((out.room() / 2 / row_bytes) as usize).clamp(1, 8192);
            if out.room() < row_bytes * rows as u64 {
                return;
            }
            let rows = rows.min(run.num_rows() - *next);
            out.emit(0, run.slice(*next, rows));
            *next += rows;
        }
        self.sorted = None;
        self.sorted_bytes = 0;
    }
}

impl Disklet for Runs {
    fn name(&self) -> &'static str {
        "sort_runs"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let bytes = batch_bytes(input.batch);
        if bytes > self.run_bytes {
            return Err(scratch_exceeded(
                "sort_runs",
                self.scratch_granted,
                format!("one buffer of {bytes} bytes is larger than a run"),
            ));
        }
        if self.held_bytes + bytes > self.run_bytes {
            self.cut_run()?;
            self.hand_out(out);
        }
        // Compact: a buffer may be a slice of a larger one.
        self.held
            .push(adisk_diskos::disklets::compact_views(input.batch.clone()));
        self.held_bytes += bytes;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.cut_run()?;
        self.hand_out(out);
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        self.sorted.is_some()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.hand_out(out);
        Ok(())
    }
    fn scratch_bytes(&self) -> u64 {
        self.held_bytes + self.sorted_bytes
    }
    fn flushes(&self) -> u64 {
        u64::from(self.run)
    }
}

/// The valsort summary of its input stream, one row at the end.
struct Check {
    summary: Summary,
}

impl Disklet for Check {
    fn name(&self) -> &'static str {
        "sort_check"
    }
    fn output_schema(&self) -> SchemaRef {
        Summary::schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        self.summary.add(input.batch).map_err(invalid)
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        out.emit(0, self.summary.to_batch());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sort::records;

    fn stage<'a>(
        name: &'a str,
        params: &'a serde_json::Value,
        inputs: &'a [SchemaRef],
        scratch: u64,
    ) -> AppStage<'a> {
        AppStage {
            app: "sort",
            disklet: name,
            params,
            inputs,
            ports: 1,
            scratch_bytes: scratch,
        }
    }

    #[test]
    fn runs_are_sorted_numbered_and_within_scratch() {
        let inputs = [records::schema()];
        let params = serde_json::json!({"run_bytes": 100_000});
        let mut runs = build(&stage("runs", &params, &inputs, 200_000)).unwrap();
        let data = records::batch(9, 0..5000);
        let mut got = Vec::new();
        for (i, start) in (0..5000).step_by(500).enumerate() {
            let mut out = Emitter::new(1);
            let b = data.slice(start, 500);
            runs.process(
                &InputBuffer {
                    batch: &b,
                    position: start as u64,
                    input: 0,
                },
                &mut out,
            )
            .unwrap();
            assert!(runs.scratch_bytes() <= 200_000, "buffer {i}");
            got.extend(out.take_outputs().remove(0));
            while runs.has_more_output() {
                let mut out = Emitter::new(1);
                runs.more_output(&mut out).unwrap();
                got.extend(out.take_outputs().remove(0));
            }
        }
        let mut out = Emitter::new(1);
        runs.finish(&mut out).unwrap();
        got.extend(out.take_outputs().remove(0));
        let all = arrow::compute::concat_batches(&got[0].schema(), &got).unwrap();
        assert_eq!(all.num_rows(), 5000);
        let run = all
            .column(2)
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap();
        assert!(run.values().windows(2).all(|w| w[0] <= w[1]));
        assert!(
            run.value(4999) >= 4,
            "5000 records of 100 bytes in runs of 100 kB"
        );
        let mut whole = Summary::default();
        whole.add(&data).unwrap();
        let mut total = Summary::default();
        for r in 0..=run.value(4999) {
            let mask = arrow::compute::kernels::cmp::eq(run, &UInt32Array::new_scalar(r)).unwrap();
            let part = arrow::compute::filter_record_batch(&all, &mask).unwrap();
            let part = part.project(&[0, 1]).unwrap();
            let mut s = Summary::default();
            s.add(&part).unwrap();
            assert_eq!(s.unordered, 0, "run {r} sorted");
            total.checksum = total.checksum.wrapping_add(s.checksum);
            total.records += s.records;
        }
        assert_eq!(
            (total.records, total.checksum),
            (whole.records, whole.checksum)
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        let inputs = [records::schema()];
        let big = serde_json::json!({"run_bytes": 1_000_000});
        assert!(build(&stage("runs", &big, &inputs, 1000)).is_err());
        let none = serde_json::json!({});
        assert!(build(&stage("runs", &none, &inputs, 1000)).is_err());
        assert!(build(&stage("nope", &none, &inputs, 1000)).is_err());
        let wrong =
            [Arc::new(Schema::new(vec![Field::new("key", DataType::Int64, false)])) as SchemaRef];
        assert!(build(&stage("check", &none, &wrong, 1000)).is_err());
    }
}
