//! TPC-H data straight from `tpchgen-arrow`, part `k` of `n` (1-based, as dbgen).
//!
//! Parts of the keyed tables are contiguous ranges of their primary key (part `k` of
//! `orders` holds exactly the orders whose `lineitem`s are in part `k` of `lineitem`), so
//! generating part `k` at the disk that owns it gives range declustering on the primary key
//! with `orders` and `lineitem` co-partitioned by `orderkey`, without moving a byte.
use crate::{Result, StorageError};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// The eight TPC-H tables, small first.
pub const TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// Smallest and largest accepted scale factors.
pub const SF_RANGE: (f64, f64) = (0.001, 1000.0);

/// Rows per generated batch.
pub const GENERATE_BATCH_ROWS: usize = 8192;

/// A stream of generated batches.
pub type BatchIter = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send>;

/// True for tables too small to split (one part, placed on disk 0).
pub fn is_unsplit(table: &str) -> bool {
    matches!(table, "region" | "nation")
}

/// The primary-key column a table's parts are ranges of.
pub fn range_key(table: &str) -> Option<&'static str> {
    Some(match table {
        "region" => "r_regionkey",
        "nation" => "n_nationkey",
        "supplier" => "s_suppkey",
        "customer" => "c_custkey",
        "part" => "p_partkey",
        "partsupp" => "ps_partkey",
        "orders" => "o_orderkey",
        "lineitem" => "l_orderkey",
        _ => return None,
    })
}

/// Approximate total rows of a table at `sf` (for progress bars).
pub fn approx_rows(table: &str, sf: f64) -> u64 {
    let base: f64 = match table {
        "region" => return 5,
        "nation" => return 25,
        "supplier" => 10_000.0,
        "customer" => 150_000.0,
        "part" => 200_000.0,
        "partsupp" => 800_000.0,
        "orders" => 1_500_000.0,
        "lineitem" => 6_001_215.0,
        _ => 0.0,
    };
    (base * sf) as u64
}

/// Checks a scale factor.
pub fn validate_sf(sf: f64) -> Result<()> {
    if !(SF_RANGE.0..=SF_RANGE.1).contains(&sf) || !sf.is_finite() {
        return Err(StorageError::Invalid(format!(
            "scale factor {sf} outside {}..={}",
            SF_RANGE.0, SF_RANGE.1
        )));
    }
    Ok(())
}

/// Arrow schema of a TPC-H table.
pub fn schema(table: &str) -> Result<SchemaRef> {
    Ok(match table {
        "region" => RegionArrow::schema_ref(),
        "nation" => NationArrow::schema_ref(),
        "supplier" => SupplierArrow::schema_ref(),
        "customer" => CustomerArrow::schema_ref(),
        "part" => PartArrow::schema_ref(),
        "partsupp" => PartSuppArrow::schema_ref(),
        "orders" => OrderArrow::schema_ref(),
        "lineitem" => LineItemArrow::schema_ref(),
        other => {
            return Err(StorageError::Invalid(format!(
                "`{other}` is not a TPC-H table ({})",
                TABLES.join(", ")
            )));
        }
    })
}

/// Generator for part `part` (1-based) of `part_count` of `table` at scale factor `sf`.
pub fn generate(table: &str, sf: f64, part: u32, part_count: u32) -> Result<BatchIter> {
    validate_sf(sf)?;
    if part == 0 || part > part_count {
        return Err(StorageError::Invalid(format!(
            "part {part} outside 1..={part_count}"
        )));
    }
    let (p, n) = (part as i32, part_count as i32);
    let b = GENERATE_BATCH_ROWS;
    Ok(match table {
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(sf, p, n)).with_batch_size(b)),
        "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, p, n)).with_batch_size(b)),
        "supplier" => {
            Box::new(SupplierArrow::new(SupplierGenerator::new(sf, p, n)).with_batch_size(b))
        }
        "customer" => {
            Box::new(CustomerArrow::new(CustomerGenerator::new(sf, p, n)).with_batch_size(b))
        }
        "part" => Box::new(PartArrow::new(PartGenerator::new(sf, p, n)).with_batch_size(b)),
        "partsupp" => {
            Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, p, n)).with_batch_size(b))
        }
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, p, n)).with_batch_size(b)),
        "lineitem" => {
            Box::new(LineItemArrow::new(LineItemGenerator::new(sf, p, n)).with_batch_size(b))
        }
        other => {
            return Err(StorageError::Invalid(format!(
                "`{other}` is not a TPC-H table ({})",
                TABLES.join(", ")
            )));
        }
    })
}

/// The program that generates TPC-H partitions in a child process, once set
/// ([`generate_in_children`]).
static CHILD_GENERATOR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// An idle generator child, kept for the next partition of a load.
static IDLE: std::sync::Mutex<Option<Generator>> = std::sync::Mutex::new(None);

/// How long a generator child waits for its next request before it exits (and its text pool
/// with it).
pub const GENERATOR_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// From now on [`generate_isolated`] generates in a child process: `exe tpch-generate`, which
/// reads requests (`TABLE SF PART PARTS`, one per line) and answers each with an Arrow IPC
/// stream on its standard output ([`serve_generator`]). TPC-H's comments are drawn from
/// dbgen's 300 MB text pool, which a generating process keeps for its lifetime; the child
/// serves one load's partitions one after another and exits when idle for
/// [`GENERATOR_IDLE`], so the disk process's own memory stays within its budget. Without it
/// (in-process tests), generation runs in this process.
pub fn generate_in_children(exe: std::path::PathBuf) {
    let _ = CHILD_GENERATOR.set(exe);
}

/// A running generator child.
struct Generator {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::sync::Arc<std::sync::Mutex<std::io::BufReader<std::process::ChildStdout>>>,
}

impl Generator {
    fn spawn(exe: &std::path::Path) -> Result<Self> {
        let io = |source| StorageError::Io {
            context: format!("starting the TPC-H generator {}", exe.display()),
            source,
        };
        let mut child = std::process::Command::new(exe)
            .arg("tpch-generate")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(io)?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        Ok(Generator {
            child,
            stdin,
            stdout: std::sync::Arc::new(std::sync::Mutex::new(std::io::BufReader::with_capacity(
                1 << 20,
                stdout,
            ))),
        })
    }

    /// Asks for one partition; the batches follow on the child's output.
    fn request(
        &mut self,
        table: &str,
        sf: f64,
        part: u32,
        part_count: u32,
    ) -> std::io::Result<arrow::ipc::reader::StreamReader<SharedOutput>> {
        use std::io::Write;
        writeln!(self.stdin, "{table} {sf} {part} {part_count}")?;
        self.stdin.flush()?;
        arrow::ipc::reader::StreamReader::try_new(SharedOutput(self.stdout.clone()), None)
            .map_err(std::io::Error::other)
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's output, shared between the generator and the reader of one partition.
struct SharedOutput(
    std::sync::Arc<std::sync::Mutex<std::io::BufReader<std::process::ChildStdout>>>,
);

impl std::io::Read for SharedOutput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).read(buf)
    }
}

/// [`generate`], in a generator child when [`generate_in_children`] was called. An idle child
/// is reused; one that exited since (idle) is replaced once.
pub fn generate_isolated(table: &str, sf: f64, part: u32, part_count: u32) -> Result<BatchIter> {
    let Some(exe) = CHILD_GENERATOR.get() else {
        return generate(table, sf, part, part_count);
    };
    validate_sf(sf)?;
    schema(table)?;
    if part == 0 || part > part_count {
        return Err(StorageError::Invalid(format!(
            "part {part} outside 1..={part_count}"
        )));
    }
    let idle = IDLE.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut generator = match idle {
        Some(g) => g,
        None => Generator::spawn(exe)?,
    };
    let reader = match generator.request(table, sf, part, part_count) {
        Ok(r) => r,
        Err(_) => {
            // The idle child may have exited meanwhile: one fresh child.
            generator = Generator::spawn(exe)?;
            generator
                .request(table, sf, part, part_count)
                .map_err(|e| StorageError::Invalid(format!("the TPC-H generator failed: {e}")))?
        }
    };
    Ok(Box::new(ChildBatches {
        generator: Some(generator),
        reader,
    }))
}

/// Batches of one partition read from a generator child; the child goes back to [`IDLE`]
/// when the partition was read to its end, and is killed otherwise.
struct ChildBatches {
    generator: Option<Generator>,
    reader: arrow::ipc::reader::StreamReader<SharedOutput>,
}

impl Iterator for ChildBatches {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.generator.as_ref()?;
        let next = self.reader.next();
        match &next {
            None if self.reader.is_finished() => {
                let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
                if idle.is_none() {
                    *idle = self.generator.take();
                }
                self.generator = None;
            }
            None => {
                self.generator = None;
                return Some(Err(ArrowError::IpcError(
                    "the TPC-H generator ended before the partition did".into(),
                )));
            }
            Some(Err(_)) => self.generator = None,
            Some(Ok(_)) => {}
        }
        next
    }
}

/// The child's side of [`generate_isolated`]: answers each request line on `input` (`TABLE
/// SF PART PARTS`) with one Arrow IPC stream on `out`; returns at the end of `input`, and exits
/// the process when no request came for [`GENERATOR_IDLE`].
///
/// # Errors
/// A malformed request, a bad table, scale factor or part, or a failed write.
pub fn serve_generator(
    input: impl std::io::BufRead + Send + 'static,
    mut out: impl std::io::Write,
) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<String>>();
    std::thread::spawn(move || {
        for line in input.lines() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    loop {
        let line = match rx.recv_timeout(GENERATOR_IDLE) {
            Ok(line) => line.map_err(|source| StorageError::Io {
                context: "reading a generator request".into(),
                source,
            })?,
            Err(_) => return Ok(()), // idle, or the parent closed our input
        };
        let bad = || {
            StorageError::Invalid(format!(
                "malformed generator request `{line}` (expected TABLE SF PART PARTS)"
            ))
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [table, sf, part, parts] = fields.as_slice() else {
            return Err(bad());
        };
        let (sf, part, parts) = (
            sf.parse().map_err(|_| bad())?,
            part.parse().map_err(|_| bad())?,
            parts.parse().map_err(|_| bad())?,
        );
        write_generated(table, sf, part, parts, &mut out)?;
        out.flush().map_err(|source| StorageError::Io {
            context: "writing generated rows".into(),
            source,
        })?;
    }
}

/// Writes part `part` of `part_count` of `table` as one Arrow IPC stream to `out`.
///
/// # Errors
/// A bad table, scale factor or part, or a failed write.
pub fn write_generated(
    table: &str,
    sf: f64,
    part: u32,
    part_count: u32,
    out: impl std::io::Write,
) -> Result<()> {
    let arrow_err = |source| StorageError::Arrow {
        context: "writing generated TPC-H rows".into(),
        source,
    };
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(out, schema(table)?.as_ref())
        .map_err(arrow_err)?;
    for batch in generate(table, sf, part, part_count)? {
        writer
            .write(&batch.map_err(arrow_err)?)
            .map_err(arrow_err)?;
    }
    writer.finish().map_err(arrow_err)
}
