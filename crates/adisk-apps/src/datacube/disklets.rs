//! The data cube's disklets: `sample` (every k-th fact row, for the size estimates and the key
//! ranges), `pipeline` (one PipeHash pipeline over this disk's share of its root: hash tables
//! in scratch, partials routed to the responsible disks whenever a table fills) and `merge`
//! (folds the partials of this disk's key ranges and writes each group-by's final rows on its
//! own port; a last port carries a per-group-by summary to the host).
use super::kernel::{
    Agg, CubeError, ENTRY_BYTES, GroupTable, Key, KeyRanges, MAX_DIMS, Mask, Pipeline,
    PipelineExec, Row, full_mask, key_values,
};
use crate::disklet_util::{Params, invalid, scratch_exceeded};
use adisk_core::stats::batch_bytes;
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::collections::VecDeque;
use std::sync::Arc;

/// Largest batch a disklet hands out at once, rows.
const MAX_BATCH_ROWS: usize = 8192;

/// Name of dimension `j`'s column (`d0`, `d1`, …).
pub fn dim_name(j: usize) -> String {
    format!("d{j}")
}

/// The fact table of `d` dimensions: `d0..d{d-1}` UInt32, `measure` Int64.
pub fn fact_schema(d: usize) -> SchemaRef {
    let mut fields: Vec<Field> = (0..d)
        .map(|j| Field::new(dim_name(j), DataType::UInt32, false))
        .collect();
    fields.push(Field::new("measure", DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

/// A group-by's result table: its dimensions' columns `d{j}` (increasing `j`), `sum` and
/// `count` (Int64, as SQL's `sum(measure)` cast to BIGINT and `count(*)`).
pub fn result_schema(mask: Mask) -> SchemaRef {
    let mut fields: Vec<Field> = (0..MAX_DIMS)
        .filter(|j| mask >> j & 1 == 1)
        .map(|j| Field::new(dim_name(j), DataType::UInt32, false))
        .collect();
    fields.push(Field::new("sum", DataType::Int64, false));
    fields.push(Field::new("count", DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

/// The partial aggregates shipped disk to disk: `dest` (the responsible disk, routed on),
/// `mask`, the packed key `k0..k{d-1}`, `sum`, `count`.
pub fn partial_schema(d: usize) -> SchemaRef {
    let mut fields = vec![
        Field::new("dest", DataType::UInt32, false),
        Field::new("mask", DataType::UInt32, false),
    ];
    fields.extend((0..d).map(|j| Field::new(format!("k{j}"), DataType::UInt32, false)));
    fields.push(Field::new("sum", DataType::Int64, false));
    fields.push(Field::new("count", DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

/// What each disk's merge tells the host per group-by: groups written, Σ count, Σ sum.
pub fn summary_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("mask", DataType::UInt32, false),
        Field::new("groups", DataType::UInt64, false),
        Field::new("count", DataType::UInt64, false),
        Field::new("sum", DataType::Int64, false),
    ]))
}

fn cube_err(e: CubeError) -> adisk_diskos::DiskOsError {
    invalid(format!("datacube: {e}"))
}

fn arrow_err(e: arrow::error::ArrowError) -> adisk_diskos::DiskOsError {
    invalid(format!("datacube: {e}"))
}

/// Builds the data cube's disklet `name`.
///
/// # Errors
/// Unknown disklet, bad parameters, inputs of another shape, tables larger than the scratch.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    match stage.disklet {
        "sample" => {
            params.shape(1, 1)?;
            Ok(Box::new(Sample {
                gathered: Default::default(),
                every: params.u64("every")?.max(1),
                schema: stage.inputs[0].clone(),
            }))
        }
        "pipeline" => {
            params.shape(1, 1)?;
            Ok(Box::new(PipelineStage::new(&params, stage)?))
        }
        "merge" => Ok(Box::new(MergeStage::new(&params, stage)?)),
        other => Err(invalid(format!("the datacube has no disklet `{other}`"))),
    }
}

fn column<'b, T: 'static>(batch: &'b RecordBatch, name: &str) -> Result<&'b T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            invalid(format!(
                "datacube: input column `{name}` missing or mistyped"
            ))
        })
}

/// Checks that `schema` has `names` with the given types.
fn expect_columns(schema: &Schema, names: &[(String, DataType)]) -> Result<()> {
    for (name, t) in names {
        let ok = schema
            .field_with_name(name)
            .is_ok_and(|f| f.data_type() == t);
        if !ok {
            return Err(invalid(format!(
                "datacube: the input needs a {t} column `{name}`"
            )));
        }
    }
    Ok(())
}

/// Emits every `every`-th row (by position in the stream).
struct Sample {
    every: u64,
    gathered: crate::disklet_util::Gather,
    schema: SchemaRef,
}

impl Disklet for Sample {
    fn name(&self) -> &'static str {
        "datacube_sample"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let picked: Vec<u32> = (0..input.batch.num_rows() as u64)
            .filter(|i| (input.position + i) % self.every == 0)
            .map(|i| i as u32)
            .collect();
        let taken = arrow::compute::take_record_batch(input.batch, &UInt32Array::from(picked))
            .map_err(arrow_err)?;
        self.gathered.add(taken, 0, out)?;
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.gathered.flush(0, out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.gathered.bytes()
    }
}

/// One pipeline at one disk (Acharya §4: a disklet per pipeline, its group-bys' hash tables in
/// scratch in proportion to their estimates). Input buffers are fed in chunks; what the
/// tables drain (full, or at the end) is shipped as partials, routed on `dest`. Output that
/// does not fit a call's allowance is held (counted in scratch) and handed out by
/// `more_output` before more input is taken.
struct PipelineStage {
    exec: PipelineExec,
    d: usize,
    /// Root group-by's dimensions (stored input), `None` for raw rows.
    root_dims: Option<Vec<usize>>,
    schema: SchemaRef,
    granted: u64,
    chunk_rows: usize,
    input: Option<(RecordBatch, usize)>,
    pending: VecDeque<RecordBatch>,
    pending_bytes: u64,
    /// Scratch DiskOS charged at the end of the last process/finish call.
    charged: u64,
    shipped: u64,
}

impl PipelineStage {
    fn new(params: &Params<'_>, stage: &AppStage<'_>) -> Result<Self> {
        let d = params.u64("d")? as usize;
        let pipeline: Pipeline = params.parse("pipeline")?;
        let bounds: Vec<Vec<u32>> = params.parse("bounds")?;
        let disks = params.u64("disks")? as usize;
        let ranges = KeyRanges::from_bounds(bounds, disks).map_err(cube_err)?;
        let exec = PipelineExec::new(&pipeline, d, ENTRY_BYTES, &ranges).map_err(cube_err)?;
        let tables: u64 = pipeline.group_bys.iter().map(|g| g.table_bytes).sum();
        if tables.saturating_mul(4) > stage.scratch_bytes {
            return Err(scratch_exceeded(
                "datacube_pipeline",
                stage.scratch_bytes,
                format!(
                    "hash tables of {tables} bytes need four times that in scratch (raise --memory-kib)"
                ),
            ));
        }
        let input = &stage.inputs[0];
        let root_dims = match pipeline.root {
            None => {
                let mut want: Vec<(String, DataType)> =
                    (0..d).map(|j| (dim_name(j), DataType::UInt32)).collect();
                want.push(("measure".into(), DataType::Int64));
                expect_columns(input, &want)?;
                None
            }
            Some(root) => {
                let dims: Vec<usize> = (0..d).filter(|j| root >> j & 1 == 1).collect();
                let mut want: Vec<(String, DataType)> = dims
                    .iter()
                    .map(|j| (dim_name(*j), DataType::UInt32))
                    .collect();
                want.push(("sum".into(), DataType::Int64));
                want.push(("count".into(), DataType::Int64));
                expect_columns(input, &want)?;
                Some(dims)
            }
        };
        let per_row = (pipeline.group_bys.len().max(1) as u64) * ENTRY_BYTES;
        let chunk_rows = (stage.scratch_bytes / 8 / per_row).clamp(16, 4096) as usize;
        Ok(PipelineStage {
            exec,
            d,
            root_dims,
            schema: partial_schema(d),
            granted: stage.scratch_bytes,
            chunk_rows,
            input: None,
            pending: VecDeque::new(),
            pending_bytes: 0,
            charged: 0,
            shipped: 0,
        })
    }

    /// Feeds rows `start..end` of `batch` to the executor.
    fn feed(&mut self, batch: &RecordBatch, start: usize, end: usize) -> Result<()> {
        match &self.root_dims {
            None => {
                let dims: Vec<&UInt32Array> = (0..self.d)
                    .map(|j| column::<UInt32Array>(batch, &dim_name(j)))
                    .collect::<Result<_>>()?;
                let measure = column::<Int64Array>(batch, "measure")?;
                let rows: Vec<Row> = (start..end)
                    .map(|i| {
                        let mut key: Key = [0; MAX_DIMS];
                        for (k, c) in key.iter_mut().zip(&dims) {
                            *k = c.value(i);
                        }
                        Row {
                            dims: key,
                            measure: measure.value(i),
                        }
                    })
                    .collect();
                self.exec.feed_rows(&rows).map_err(cube_err)
            }
            Some(root) => {
                let dims: Vec<&UInt32Array> = root
                    .iter()
                    .map(|j| column::<UInt32Array>(batch, &dim_name(*j)))
                    .collect::<Result<_>>()?;
                let (sum, count) = (
                    column::<Int64Array>(batch, "sum")?,
                    column::<Int64Array>(batch, "count")?,
                );
                let aggs: Vec<Agg> = (start..end)
                    .map(|i| {
                        let mut key: Key = [0; MAX_DIMS];
                        for (k, c) in key.iter_mut().zip(&dims) {
                            *k = c.value(i);
                        }
                        Agg {
                            key,
                            sum: sum.value(i),
                            count: count.value(i).max(0) as u64,
                        }
                    })
                    .collect();
                self.exec.feed_stored(&aggs).map_err(cube_err)
            }
        }
    }

    /// Moves the executor's outgoing partials into one batch held for emission.
    fn queue_outgoing(&mut self) -> Result<()> {
        let outgoing = self.exec.take_outgoing();
        let n: usize = outgoing.iter().map(Vec::len).sum();
        if n == 0 {
            return Ok(());
        }
        let mut dest = Vec::with_capacity(n);
        let mut masks = Vec::with_capacity(n);
        let mut keys: Vec<Vec<u32>> = vec![Vec::with_capacity(n); self.d];
        let (mut sums, mut counts) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (disk, list) in outgoing.into_iter().enumerate() {
            for (mask, a) in list {
                dest.push(disk as u32);
                masks.push(mask);
                for (col, v) in keys.iter_mut().zip(a.key) {
                    col.push(v);
                }
                sums.push(a.sum);
                counts.push(a.count as i64);
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(dest)),
            Arc::new(UInt32Array::from(masks)),
        ];
        columns.extend(
            keys.into_iter()
                .map(|k| Arc::new(UInt32Array::from(k)) as ArrayRef),
        );
        columns.push(Arc::new(Int64Array::from(sums)));
        columns.push(Arc::new(Int64Array::from(counts)));
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(arrow_err)?;
        self.pending_bytes += batch_bytes(&batch);
        self.shipped += n as u64;
        self.pending.push_back(batch);
        Ok(())
    }

    fn check_scratch(&self) -> Result<()> {
        let now = self.scratch_bytes();
        if now > self.granted {
            return Err(scratch_exceeded(
                "datacube_pipeline",
                self.granted,
                format!("tables and held partials reached {now} bytes (raise --memory-kib)"),
            ));
        }
        Ok(())
    }

    /// Emits held partials while the call's allowance lasts (never more than the grant minus
    /// what scratch holds or was charged for).
    fn emit_pending(&mut self, out: &mut Emitter) {
        while let Some(front) = self.pending.pop_front() {
            let bytes = batch_bytes(&front);
            self.pending_bytes -= bytes;
            let allowed = out
                .room()
                .saturating_sub(self.charged.max(self.scratch_bytes()));
            let rows = front.num_rows();
            let fit = if bytes <= allowed {
                rows
            } else {
                (allowed / bytes.div_ceil(rows as u64).max(1)) as usize
            };
            if fit == 0 {
                self.pending_bytes += bytes;
                self.pending.push_front(front);
                return;
            }
            if fit < rows {
                let rest = front.slice(fit, rows - fit);
                self.pending_bytes += batch_bytes(&rest);
                self.pending.push_front(rest);
            }
            out.emit(0, front.slice(0, fit));
        }
    }

    /// Emits what is held, then feeds input chunk by chunk while everything could be emitted.
    fn pump(&mut self, out: &mut Emitter) -> Result<()> {
        loop {
            self.emit_pending(out);
            if !self.pending.is_empty() {
                return Ok(());
            }
            let Some((batch, next)) = self.input.take() else {
                return Ok(());
            };
            let end = (next + self.chunk_rows).min(batch.num_rows());
            self.feed(&batch, next, end)?;
            if end < batch.num_rows() {
                self.input = Some((batch, end));
            }
            self.queue_outgoing()?;
            self.check_scratch()?;
        }
    }
}

impl Disklet for PipelineStage {
    fn name(&self) -> &'static str {
        "datacube_pipeline"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        self.input = Some((input.batch.clone(), 0));
        self.check_scratch()?;
        self.pump(out)?;
        self.charged = self.scratch_bytes();
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.pump(out)?;
        self.exec.finish();
        self.queue_outgoing()?;
        self.check_scratch()?;
        self.emit_pending(out);
        self.charged = self.scratch_bytes();
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        !self.pending.is_empty() || self.input.is_some()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.pump(out)
    }
    fn scratch_bytes(&self) -> u64 {
        let input = self.input.as_ref().map_or(0, |(b, next)| {
            batch_bytes(&b.slice(*next, b.num_rows() - next))
        });
        self.exec.table_bytes() + self.exec.outgoing_bytes() + self.pending_bytes + input
    }
    fn flushes(&self) -> u64 {
        self.exec.spills()
    }
}

/// The responsible disk's side of a pipeline: folds the partials of its key ranges into one
/// table per group-by, capped at its scratch grant (past it the job fails with
/// `ScratchExceeded`: the merge does not spill), then writes each group-by's rows, sorted by
/// key, on its port, and the summary on the last port.
struct MergeStage {
    d: usize,
    masks: Vec<Mask>,
    /// Port of each mask (`usize::MAX`: not in this pipeline).
    port_of: Vec<usize>,
    tables: Vec<GroupTable>,
    granted: u64,
    /// After the input ended: every port's sorted rows and how many were handed out.
    results: Vec<(Vec<Agg>, usize)>,
    summary: Option<RecordBatch>,
    charged: u64,
    partials: u64,
}

impl MergeStage {
    fn new(params: &Params<'_>, stage: &AppStage<'_>) -> Result<Self> {
        let d = params.u64("d")? as usize;
        let masks: Vec<Mask> = params.parse("masks")?;
        params.shape(1, masks.len() + 1)?;
        if d == 0 || d > MAX_DIMS {
            return Err(cube_err(CubeError::BadDims(d)));
        }
        let mut port_of = vec![usize::MAX; 1 << d];
        for (p, &m) in masks.iter().enumerate() {
            if m > full_mask(d) {
                return Err(cube_err(CubeError::BadMask { mask: m, d }));
            }
            if port_of[m as usize] != usize::MAX {
                return Err(cube_err(CubeError::DuplicateGroupBy(m)));
            }
            port_of[m as usize] = p;
        }
        let want = partial_schema(d);
        if stage.inputs[0].fields() != want.fields() {
            return Err(invalid(format!(
                "datacube.merge: the input must be the partials of {d} dimensions"
            )));
        }
        Ok(MergeStage {
            d,
            tables: masks.iter().map(|m| GroupTable::unbounded(*m)).collect(),
            masks,
            port_of,
            granted: stage.scratch_bytes,
            results: Vec::new(),
            summary: None,
            charged: 0,
            partials: 0,
        })
    }

    fn fold(&mut self, batch: &RecordBatch) -> Result<()> {
        let masks = column::<UInt32Array>(batch, "mask")?;
        let keys: Vec<&UInt32Array> = (0..self.d)
            .map(|j| column::<UInt32Array>(batch, &format!("k{j}")))
            .collect::<Result<_>>()?;
        let (sum, count) = (
            column::<Int64Array>(batch, "sum")?,
            column::<Int64Array>(batch, "count")?,
        );
        for i in 0..batch.num_rows() {
            let mask = masks.value(i);
            let port = self
                .port_of
                .get(mask as usize)
                .copied()
                .filter(|p| *p != usize::MAX)
                .ok_or_else(|| invalid(format!("datacube.merge: group-by {mask} not expected")))?;
            let mut key: Key = [0; MAX_DIMS];
            for (k, c) in key.iter_mut().zip(&keys) {
                *k = c.value(i);
            }
            let _ = self.tables[port].insert(key, sum.value(i), count.value(i).max(0) as u64);
        }
        self.partials += batch.num_rows() as u64;
        let now = self.scratch_bytes();
        if now > self.granted {
            let largest = self
                .tables
                .iter()
                .max_by_key(|t| t.len())
                .map_or(0, GroupTable::mask);
            return Err(scratch_exceeded(
                "datacube_merge",
                self.granted,
                format!(
                    "this disk's key ranges of the pipeline hold {} groups ({now} bytes; the largest group-by is {largest}): the merge does not spill, give the disks more memory (--memory-kib) or add disks",
                    now / ENTRY_BYTES
                ),
            ));
        }
        Ok(())
    }

    fn summarize(&self) -> Result<RecordBatch> {
        let per: Vec<(u64, u64, i64)> = self
            .results
            .iter()
            .map(|(rows, _)| {
                rows.iter().fold((0, 0, 0i64), |(g, c, s), a| {
                    (g + 1, c + a.count, s.wrapping_add(a.sum))
                })
            })
            .collect();
        RecordBatch::try_new(
            summary_schema(),
            vec![
                Arc::new(UInt32Array::from(self.masks.clone())),
                Arc::new(UInt64Array::from_iter_values(per.iter().map(|p| p.0))),
                Arc::new(UInt64Array::from_iter_values(per.iter().map(|p| p.1))),
                Arc::new(Int64Array::from_iter_values(per.iter().map(|p| p.2))),
            ],
        )
        .map_err(arrow_err)
    }

    fn result_batch(&self, port: usize, start: usize, end: usize) -> Result<RecordBatch> {
        let mask = self.masks[port];
        let rows = &self.results[port].0[start..end];
        let width = mask.count_ones() as usize;
        let mut columns: Vec<ArrayRef> = (0..width)
            .map(|p| {
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|a| key_values(mask, &a.key)[p]),
                )) as ArrayRef
            })
            .collect();
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|a| a.sum),
        )));
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|a| a.count as i64),
        )));
        RecordBatch::try_new(result_schema(mask), columns).map_err(arrow_err)
    }

    /// Hands out result rows while the call's allowance lasts, then the summary.
    fn hand_out(&mut self, out: &mut Emitter) -> Result<()> {
        for port in 0..self.masks.len() {
            let row_bytes = 4 * u64::from(self.masks[port].count_ones()) + 16;
            while self.results[port].1 < self.results[port].0.len() {
                let allowed = out
                    .room()
                    .saturating_sub(self.charged.max(self.scratch_bytes()));
                let (rows, next) = (&self.results[port].0, self.results[port].1);
                let take = ((allowed / row_bytes) as usize)
                    .min(MAX_BATCH_ROWS)
                    .min(rows.len() - next);
                if take == 0 {
                    return Ok(());
                }
                let batch = self.result_batch(port, next, next + take)?;
                if batch_bytes(&batch) > allowed {
                    return Ok(());
                }
                out.emit(port, batch);
                self.results[port].1 += take;
            }
            self.results[port] = (Vec::new(), 0);
        }
        if let Some(summary) = self.summary.take() {
            let allowed = out
                .room()
                .saturating_sub(self.charged.max(self.scratch_bytes()));
            if batch_bytes(&summary) > allowed {
                self.summary = Some(summary);
                return Ok(());
            }
            out.emit(self.masks.len(), summary);
        }
        Ok(())
    }
}

impl Disklet for MergeStage {
    fn name(&self) -> &'static str {
        "datacube_merge"
    }
    fn output_schema(&self) -> SchemaRef {
        summary_schema()
    }
    fn output_ports(&self) -> usize {
        self.masks.len() + 1
    }
    fn port_schema(&self, port: usize) -> SchemaRef {
        self.masks
            .get(port)
            .map_or_else(summary_schema, |m| result_schema(*m))
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        self.fold(input.batch)?;
        self.charged = self.scratch_bytes();
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.results = self.tables.iter_mut().map(|t| (t.drain(), 0)).collect();
        self.summary = Some(self.summarize()?);
        self.hand_out(out)?;
        self.charged = self.scratch_bytes();
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        self.summary.is_some()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.hand_out(out)
    }
    fn scratch_bytes(&self) -> u64 {
        let tables: u64 = self.tables.iter().map(GroupTable::bytes).sum();
        let held: u64 = self
            .results
            .iter()
            .map(|(rows, next)| (rows.len() - next) as u64 * ENTRY_BYTES)
            .sum();
        tables + held
    }
    fn flushes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::super::generator::{GenParams, Generator};
    use super::super::kernel::{estimate_sizes, naive_cube, plan};
    use super::*;
    use std::collections::BTreeMap;

    fn stage<'a>(
        name: &'a str,
        params: &'a serde_json::Value,
        inputs: &'a [SchemaRef],
        ports: usize,
        scratch: u64,
    ) -> AppStage<'a> {
        AppStage {
            app: "datacube",
            disklet: name,
            params,
            inputs,
            ports,
            scratch_bytes: scratch,
        }
    }

    fn fact_batch(rows: &[Row], d: usize) -> RecordBatch {
        let mut columns: Vec<ArrayRef> = (0..d)
            .map(|j| {
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|r| r.dims[j]),
                )) as _
            })
            .collect();
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r.measure),
        )));
        RecordBatch::try_new(fact_schema(d), columns).unwrap()
    }

    /// Drives a disklet like DiskOS: process each buffer, hand out more output, finish.
    fn drive(
        disklet: &mut dyn Disklet,
        batches: &[RecordBatch],
        cap: u64,
    ) -> Vec<Vec<RecordBatch>> {
        let ports = disklet.output_ports();
        let mut got: Vec<Vec<RecordBatch>> = vec![Vec::new(); ports];
        let mut take = |out: &mut Emitter| {
            assert!(out.overflow().is_none());
            for (p, b) in out.take_outputs().into_iter().enumerate() {
                got[p].extend(b);
            }
        };
        let mut calls = 0;
        for (i, b) in batches.iter().enumerate() {
            let mut out = Emitter::new(ports);
            out = capped(out, cap);
            disklet
                .process(
                    &InputBuffer {
                        batch: b,
                        position: 0,
                        input: 0,
                    },
                    &mut out,
                )
                .unwrap_or_else(|e| panic!("buffer {i}: {e}"));
            take(&mut out);
            while disklet.has_more_output() {
                let mut out = capped(Emitter::new(ports), cap);
                disklet.more_output(&mut out).unwrap();
                take(&mut out);
                calls += 1;
                assert!(calls < 100_000);
            }
        }
        let mut out = capped(Emitter::new(ports), cap);
        disklet.finish(&mut out).unwrap();
        take(&mut out);
        while disklet.has_more_output() {
            let mut out = capped(Emitter::new(ports), cap);
            disklet.more_output(&mut out).unwrap();
            take(&mut out);
        }
        got
    }

    fn capped(e: Emitter, cap: u64) -> Emitter {
        let account = Arc::new(adisk_diskos::memory::Account::default());
        Emitter::capped(e.ports(), cap, &account)
    }

    #[test]
    fn pipeline_and_merge_disklets_compute_the_cube() {
        let cards = [12, 7, 5];
        let g = Generator::new(GenParams {
            rows: 3000,
            cardinalities: cards.to_vec(),
            zipf: 0.5,
            seed: 4,
        })
        .unwrap();
        let rows = g.rows(0, 3000);
        let sizes = estimate_sizes(&g.sample(300), 3000, &cards).unwrap();
        let scratch = 64 * 1024;
        let mut p = plan(&sizes, 3, u64::MAX / 4, ENTRY_BYTES).unwrap();
        assert_eq!(p.pipelines.len(), 1);
        let mut pipe = p.pipelines.remove(0);
        pipe.reshare(4 * 1024, ENTRY_BYTES); // ≤ scratch / 4 // small tables: they spill
        let ranges = KeyRanges::uniform(&cards, 2).unwrap();
        let params = serde_json::json!({
            "d": 3, "pipeline": pipe, "bounds": ranges.bounds(), "disks": 2,
        });
        let inputs = [fact_schema(3)];
        let mut ds = build(&stage("pipeline", &params, &inputs, 1, scratch)).unwrap();
        let batches: Vec<RecordBatch> = rows.chunks(500).map(|c| fact_batch(c, 3)).collect();
        let partials = drive(ds.as_mut(), &batches, scratch + 2 * 8192).remove(0);
        assert!(ds.flushes() > 0, "tables spilled");
        // Merge at each responsible disk.
        let masks: Vec<Mask> = pipe.group_bys.iter().map(|g| g.mask).collect();
        let mparams = serde_json::json!({"d": 3, "masks": masks});
        let minputs = [partial_schema(3)];
        let mut cube = BTreeMap::new();
        for disk in 0..2u32 {
            let mine: Vec<RecordBatch> = partials
                .iter()
                .map(|b| {
                    let dest = b.column(0).as_any().downcast_ref::<UInt32Array>().unwrap();
                    let keep =
                        arrow::compute::kernels::cmp::eq(dest, &UInt32Array::new_scalar(disk))
                            .unwrap();
                    arrow::compute::filter_record_batch(b, &keep).unwrap()
                })
                .collect();
            let mut m = build(&stage(
                "merge",
                &mparams,
                &minputs,
                masks.len() + 1,
                scratch,
            ))
            .unwrap();
            let out = drive(m.as_mut(), &mine, scratch + 8192);
            for (port, &mask) in masks.iter().enumerate() {
                for b in &out[port] {
                    let w = mask.count_ones() as usize;
                    for i in 0..b.num_rows() {
                        let key: Vec<u32> = (0..w)
                            .map(|c| {
                                b.column(c)
                                    .as_any()
                                    .downcast_ref::<UInt32Array>()
                                    .unwrap()
                                    .value(i)
                            })
                            .collect();
                        let col = |c: usize| {
                            b.column(c)
                                .as_any()
                                .downcast_ref::<Int64Array>()
                                .unwrap()
                                .value(i)
                        };
                        let v = (col(w), col(w + 1) as u64);
                        assert!(cube.insert((mask, key), v).is_none());
                    }
                }
            }
            assert_eq!(out[masks.len()][0].num_rows(), masks.len());
        }
        assert_eq!(cube, naive_cube(&rows, 3));
    }

    #[test]
    fn merge_fails_typed_past_its_scratch() {
        let params = serde_json::json!({"d": 1, "masks": [1]});
        let inputs = [partial_schema(1)];
        let mut m = build(&stage("merge", &params, &inputs, 2, 64 * 10)).unwrap();
        let n = 20u32;
        let batch = RecordBatch::try_new(
            partial_schema(1),
            vec![
                Arc::new(UInt32Array::from(vec![0; n as usize])),
                Arc::new(UInt32Array::from(vec![1; n as usize])),
                Arc::new(UInt32Array::from_iter_values(0..n)),
                Arc::new(Int64Array::from(vec![1; n as usize])),
                Arc::new(Int64Array::from(vec![1; n as usize])),
            ],
        )
        .unwrap();
        let err = m
            .process(
                &InputBuffer {
                    batch: &batch,
                    position: 0,
                    input: 0,
                },
                &mut Emitter::new(2),
            )
            .unwrap_err();
        assert!(matches!(
            err,
            adisk_diskos::DiskOsError::ScratchExceeded { .. }
        ));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let inputs = [fact_schema(2)];
        let none = serde_json::json!({});
        assert!(build(&stage("pipeline", &none, &inputs, 1, 1 << 20)).is_err());
        assert!(build(&stage("nope", &none, &inputs, 1, 1 << 20)).is_err());
        let bad_masks = serde_json::json!({"d": 2, "masks": [7]});
        let p = [partial_schema(2)];
        assert!(build(&stage("merge", &bad_masks, &p, 2, 1 << 20)).is_err());
        let wrong_ports = serde_json::json!({"d": 2, "masks": [1, 2]});
        assert!(build(&stage("merge", &wrong_ports, &p, 2, 1 << 20)).is_err());
    }
}
