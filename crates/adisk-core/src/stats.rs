//! Statistics of a job, per stage, per disk and in total.
use arrow::array::RecordBatch;
use serde::{Deserialize, Serialize};

/// One disklet stage of a job on one disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct StageStats {
    /// Disklet name.
    pub disklet: String,
    /// Rows into `process`.
    pub rows_in: u64,
    /// Rows emitted.
    pub rows_out: u64,
    /// Arrow bytes into `process`.
    pub bytes_in: u64,
    /// Arrow bytes emitted.
    pub bytes_out: u64,
    /// CPU time inside `init`/`process`/`finish`.
    pub cpu_ns: u64,
    /// Scratch granted.
    pub scratch_granted_bytes: u64,
    /// Largest scratch use seen.
    pub scratch_peak_bytes: u64,
    /// Times partial results were flushed because scratch filled (group-by) or runs emitted.
    pub flushes: u64,
    /// Bytes spilled to the job's temporary area (a sort or aggregation past its scratch).
    #[serde(default)]
    pub spilled_bytes: u64,
    /// User disklets: time compiling the module for this job (0 when the compiled module was cached).
    #[serde(default)]
    pub compile_ns: u64,
    /// User disklets: time instantiating the module and running its init.
    #[serde(default)]
    pub instantiate_ns: u64,
    /// From the job's start on its disk to the start of the stage's first step, ns (0: it
    /// never ran).
    #[serde(default)]
    pub first_step_ns: u64,
    /// From the job's start on its disk to the end of the stage's last step, ns.
    #[serde(default)]
    pub last_step_ns: u64,
    /// Sorts of a plan fragment the disk dropped because their input arrives in their order
    /// (a scan of partitions stored sorted on the key).
    #[serde(default)]
    pub sorts_dropped: u64,
}

/// A job on one disk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct DiskJobStats {
    /// Disk number.
    pub disk_id: u32,
    /// Job id.
    pub job_id: String,
    /// Bytes actually read from storage (Parquet footers, column chunks / pages, file ranges).
    pub bytes_read: u64,
    /// Bytes of the requested columns not read thanks to zone maps or skip requests.
    pub bytes_skipped: u64,
    /// Partitions (files) opened.
    pub partitions_read: u64,
    /// Partitions skipped whole by their statistics.
    pub partitions_skipped: u64,
    /// Row groups read.
    pub row_groups_read: u64,
    /// Row groups skipped by statistics or skip requests.
    pub row_groups_skipped: u64,
    /// Rows delivered by the input stream.
    pub rows_read: u64,
    /// Rows the scans dropped while decoding, by filters pushed down from the joins and Bloom
    /// probes reading them (their other columns were not decoded; late materialization).
    #[serde(default)]
    pub rows_dropped_at_decode: u64,
    /// Arrow bytes delivered by the input stream (after column elimination).
    pub bytes_scanned: u64,
    /// Rows shipped out of the disk (to the host or other disks).
    pub rows_shipped: u64,
    /// Arrow IPC bytes shipped to the host.
    pub bytes_shipped_host: u64,
    /// Arrow IPC bytes shipped to other disks.
    pub bytes_shipped_disks: u64,
    /// CPU time of the whole job at this disk (reading, decoding, disklets).
    pub cpu_ns: u64,
    /// CPU time of the whole disk process (every thread: the job's work, and what `cpu_ns`
    /// does not see — the transport, TLS, the runtime — and any other job running beside
    /// it) from the job's admission to its end, ns (0: not measured).
    #[serde(default)]
    pub process_cpu_ns: u64,
    /// Wall time from admission to the end.
    pub wall_ns: u64,
    /// Time spent waiting for the memory grant.
    pub admission_wait_ns: u64,
    /// Time stages waited for a compute slot (fair scheduling).
    pub schedule_wait_ns: u64,
    /// Memory granted (stream buffers + scratch).
    pub memory_granted_bytes: u64,
    /// Peak memory in use under the grant (buffers in flight + scratch).
    pub memory_peak_bytes: u64,
    /// Bytes written to the disk's storage: named results (Parquet, as encoded).
    #[serde(default)]
    pub bytes_written: u64,
    /// Temporary disk space granted (spill files, temporary streams).
    #[serde(default)]
    pub temp_granted_bytes: u64,
    /// Temporary disk space written (its peak: temporary files are removed only at the end).
    #[serde(default)]
    pub temp_peak_bytes: u64,
    /// Stages.
    pub stages: Vec<StageStats>,
    /// Error, if the job failed at this disk.
    pub error: Option<String>,
    /// Whether the job had ended (its outputs committed or discarded, its grants and
    /// temporary files returned) when these statistics were taken.
    #[serde(default)]
    pub ended: bool,
}

/// CPU time of this process, every thread, in ns (0 when the clock cannot be read).
pub fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread, in ns (0 when the clock cannot be read).
pub fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass; the process and thread CPU
    // clocks are always valid on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl DiskJobStats {
    /// All bytes shipped.
    pub fn bytes_shipped(&self) -> u64 {
        self.bytes_shipped_host + self.bytes_shipped_disks
    }
}

/// A job on the whole cluster.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct JobStats {
    /// What ran.
    pub description: String,
    /// Per disk (and per phase for multi-phase jobs such as exchanges).
    pub disks: Vec<DiskJobStats>,
    /// Rows the host produced as the final result.
    pub result_rows: u64,
    /// Host CPU/wall time spent combining partial results.
    pub host_combine_ns: u64,
    /// Wall time seen by the host, from submission to last result.
    pub wall_ns: u64,
    /// Disklet-specific facts (Bloom filter size, measured false-positive rate, runs, …).
    #[serde(default)]
    pub notes: std::collections::BTreeMap<String, String>,
}

/// Totals over the disks of a [`JobStats`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Totals {
    /// Sum of bytes read.
    pub bytes_read: u64,
    /// Sum of bytes skipped.
    pub bytes_skipped: u64,
    /// Sum of rows read.
    pub rows_read: u64,
    /// Sum of rows shipped.
    pub rows_shipped: u64,
    /// Sum of bytes shipped to the host.
    pub bytes_shipped_host: u64,
    /// Sum of bytes shipped disk to disk.
    pub bytes_shipped_disks: u64,
    /// Sum of CPU time.
    pub cpu_ns: u64,
    /// Largest per-disk wall time.
    pub wall_ns_max: u64,
    /// Sum of memory granted.
    pub memory_granted_bytes: u64,
    /// Largest per-disk memory peak.
    pub memory_peak_bytes_max: u64,
    /// bytes read ÷ bytes shipped to the host.
    pub reduction: f64,
}

impl JobStats {
    /// Totals over disks.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for d in &self.disks {
            t.bytes_read += d.bytes_read;
            t.bytes_skipped += d.bytes_skipped;
            t.rows_read += d.rows_read;
            t.rows_shipped += d.rows_shipped;
            t.bytes_shipped_host += d.bytes_shipped_host;
            t.bytes_shipped_disks += d.bytes_shipped_disks;
            t.cpu_ns += d.cpu_ns;
            t.wall_ns_max = t.wall_ns_max.max(d.wall_ns);
            t.memory_granted_bytes += d.memory_granted_bytes;
            t.memory_peak_bytes_max = t.memory_peak_bytes_max.max(d.memory_peak_bytes);
        }
        t.reduction = if t.bytes_shipped_host == 0 {
            f64::INFINITY
        } else {
            t.bytes_read as f64 / t.bytes_shipped_host as f64
        };
        t
    }

    /// A fixed-width text table, one row per disk and a total row.
    pub fn render_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>12} {:>9} {:>9} {:>10} {:>10}",
            "disk",
            "read",
            "skipped",
            "rows_in",
            "scanned",
            "rows_out",
            "to_host",
            "to_disks",
            "cpu_ms",
            "wall_ms",
            "granted",
            "peak"
        );
        for d in &self.disks {
            let _ = writeln!(
                s,
                "{:<6} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>12} {:>9.1} {:>9.1} {:>10} {:>10}{}",
                d.disk_id,
                human_bytes(d.bytes_read),
                human_bytes(d.bytes_skipped),
                d.rows_read,
                human_bytes(d.bytes_scanned),
                d.rows_shipped,
                human_bytes(d.bytes_shipped_host),
                human_bytes(d.bytes_shipped_disks),
                d.cpu_ns as f64 / 1e6,
                d.wall_ns as f64 / 1e6,
                human_bytes(d.memory_granted_bytes),
                human_bytes(d.memory_peak_bytes),
                d.error
                    .as_ref()
                    .map(|e| format!("  ERROR {e}"))
                    .unwrap_or_default()
            );
        }
        let t = self.totals();
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>12} {:>9.1} {:>9.1} {:>10} {:>10}",
            "total",
            human_bytes(t.bytes_read),
            human_bytes(t.bytes_skipped),
            t.rows_read,
            human_bytes(self.disks.iter().map(|d| d.bytes_scanned).sum()),
            t.rows_shipped,
            human_bytes(t.bytes_shipped_host),
            human_bytes(t.bytes_shipped_disks),
            t.cpu_ns as f64 / 1e6,
            t.wall_ns_max as f64 / 1e6,
            human_bytes(t.memory_granted_bytes),
            human_bytes(t.memory_peak_bytes_max),
        );
        for (k, v) in &self.notes {
            let _ = writeln!(s, "{k}: {v}");
        }
        let _ = writeln!(
            s,
            "data reduction (read / shipped to host): {}   result rows: {}   host combine: {:.1} ms   wall: {:.1} ms",
            if t.reduction.is_finite() {
                format!("{:.1}x", t.reduction)
            } else {
                "inf".into()
            },
            self.result_rows,
            self.host_combine_ns as f64 / 1e6,
            self.wall_ns as f64 / 1e6
        );
        s
    }
}

/// `1.2 MiB`-style formatting.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Bytes of a batch's rows (slice-aware).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch.columns().iter().map(column_bytes).sum()
}

/// Bytes of the rows a column covers. A fixed-width column is weighed from its length, as
/// arrow's `get_slice_memory_size` would (`len × width`, and a bit per row when it has a
/// null buffer), without building its `ArrayData` (2 % of TPC-H Q1's disk CPU did that).
fn column_bytes(c: &arrow::array::ArrayRef) -> u64 {
    match c.data_type().primitive_width() {
        Some(width) => {
            let nulls = c.nulls().map_or(0, |_| c.len().div_ceil(8));
            (c.len() * width + nulls) as u64
        }
        None => array_bytes(&c.to_data()),
    }
}

/// Bytes of the rows an array covers. Arrow's `get_slice_memory_size` counts the whole child
/// of a sliced list (a one-row slice of a batch of lists weighed as the batch), which made
/// every cut of a batch with a list column fail: lists count only their rows' values here.
fn array_bytes(data: &arrow::array::ArrayData) -> u64 {
    use arrow::datatypes::DataType;
    let (first, last, width) = match data.data_type() {
        DataType::List(_) if data.len() > 0 => {
            let o = &data.buffer::<i32>(0)[data.offset()..=data.offset() + data.len()];
            (o[0] as usize, o[data.len()] as usize, 4)
        }
        DataType::LargeList(_) if data.len() > 0 => {
            let o = &data.buffer::<i64>(0)[data.offset()..=data.offset() + data.len()];
            (o[0] as usize, o[data.len()] as usize, 8)
        }
        DataType::Utf8View | DataType::BinaryView => {
            return data.get_slice_memory_size().unwrap_or(0) as u64 + view_data_bytes(data);
        }
        _ => return data.get_slice_memory_size().unwrap_or(0) as u64,
    };
    let values = data.child_data()[0].slice(first, last.saturating_sub(first));
    let nulls = data.nulls().map_or(0, |_| data.len().div_ceil(8));
    ((data.len() + 1) * width + nulls) as u64 + array_bytes(&values)
}

/// Bytes a string or binary view array's rows keep in its data buffers: Arrow's slice size
/// counts only the 16-byte views, not the values longer than 12 bytes they point at (most of
/// TPC-H's names, addresses and comments), which left DiskOS counting a buffer of such rows at
/// a fraction of what it holds.
fn view_data_bytes(data: &arrow::array::ArrayData) -> u64 {
    let Some(views) = data.buffers().first() else {
        return 0;
    };
    if data.buffers()[1..].iter().all(|b| b.len() <= 12) {
        // A value longer than 12 bytes lies in one data buffer: with none that long, every
        // value is inline (flags and codes, whose dictionary may be the only data buffer).
        return 0;
    }
    let views: &[u128] = views.typed_data();
    let end = (data.offset() + data.len()).min(views.len());
    views[data.offset().min(end)..end]
        .iter()
        .map(|v| match *v as u32 {
            len if len > 12 => u64::from(len),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_view_arrays_rows_count_the_long_values_they_point_at() {
        use arrow::array::{Array, StringViewArray};
        let long = "x".repeat(100);
        let values: Vec<Option<&str>> = vec![Some("short"), Some(&long), None, Some(&long)];
        let array = StringViewArray::from(values);
        let views = 4 * 16 + 1; // and the validity bitmap
        assert_eq!(super::array_bytes(&array.to_data()), views + 200);
        // A slice counts its own rows' values only.
        let slice = array.slice(0, 2).to_data();
        let views = slice.get_slice_memory_size().unwrap() as u64;
        assert!(views <= 2 * 16 + 1);
        assert_eq!(super::array_bytes(&slice), views + 100);
        let short = StringViewArray::from(vec!["a", "bb"]);
        assert_eq!(super::array_bytes(&short.to_data()), 2 * 16);
        // Inline values beside a short data buffer (a dictionary of flags); then one value of
        // 13 bytes, the shortest that is not inline.
        let flags = arrow::buffer::Buffer::from(b"ANR".as_slice());
        let inline =
            StringViewArray::try_new(short.views().clone(), vec![flags.clone()], None).unwrap();
        assert_eq!(super::array_bytes(&inline.to_data()), 2 * 16);
        let mut b = arrow::array::StringViewBuilder::new();
        b.append_value("a");
        b.append_value("x".repeat(13));
        assert_eq!(super::array_bytes(&b.finish().to_data()), 2 * 16 + 13);
    }

    #[test]
    fn fixed_width_columns_weigh_as_arrow_slices_them() {
        use arrow::array::{
            Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int8Array,
            Int64Array,
        };
        use std::sync::Arc;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])),
            Arc::new(Int8Array::from(vec![Some(1), None, Some(3)])),
            Arc::new(Float64Array::from(vec![None, Some(2.5), None, None])),
            Arc::new(Date32Array::from(vec![7; 17])),
            Arc::new(
                Decimal128Array::from(vec![Some(1), None])
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            Arc::new(Int64Array::from(Vec::<i64>::new())),
        ];
        for c in &columns {
            let n = c.len();
            for (offset, len) in [(0, n), (n.min(1), n.saturating_sub(1)), (n, 0)] {
                let slice = c.slice(offset, len);
                let arrow = slice.to_data().get_slice_memory_size().unwrap() as u64;
                assert_eq!(
                    super::column_bytes(&slice),
                    arrow,
                    "{:?} [{offset}, +{len}]",
                    c.data_type()
                );
            }
        }
    }

    #[test]
    fn process_cpu_time_grows_with_work_on_any_thread() {
        let before = super::process_cpu_ns();
        let spin = std::thread::spawn(|| {
            let t = std::time::Instant::now();
            let mut x = 0u64;
            while t.elapsed() < std::time::Duration::from_millis(30) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        });
        let _ = spin.join();
        let grew = super::process_cpu_ns() - before;
        assert!(
            grew >= 10_000_000,
            "30 ms of spinning on another thread counted {grew} ns"
        );
    }
}
