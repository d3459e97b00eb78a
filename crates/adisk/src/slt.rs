//! `adisk slt`: SQL logic tests in the `sqllogictest` crate's format, with their expected rows
//! checked in, run at every offload level; `adisk slt --complete` writes those rows from DuckDB
//! on the very Parquet files the disks hold (the independent oracle).
//!
//! Both engines' results are Arrow batches, rendered by [`render`] in one way (see
//! `docs/sql.md`): NULL as `NULL`, an empty string as `(empty)`, integers plainly, decimals at
//! their scale, floats in the shortest form that reads back to the same double, dates and
//! timestamps in ISO 8601. [`results_agree`], the runner's validator, compares integers and
//! text exactly and floats and decimals within [`RELATIVE_TOLERANCE`].
use adisk_core::stats::human_bytes;
use adisk_host::HostError;
use adisk_host::cluster::{Catalog, Cluster};
use adisk_host::sql::{Offload, QueryOutput, SqlEngine, SqlOptions, report};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{
    AsyncDB, DBOutput, DefaultColumnType, Normalizer, QueryExpect, Record, RecordOutput, Runner,
    default_normalizer, update_record_with_output,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Floats and decimals agree when they differ by at most this fraction of the larger: partial
/// sums added in another order (another engine, another offload level) move the last digits.
pub const RELATIVE_TOLERANCE: f64 = 1e-9;

/// `adisk slt` arguments.
#[derive(clap::Args, Debug)]
pub struct SltArgs {
    /// `.slt` files in the `sqllogictest` format: `query <types> [rowsort]` + SQL + `----` +
    /// expected rows, `statement error <regex>` + SQL, `hash-threshold N`, `# comments`.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Offload levels, comma-separated, or `all`.
    #[arg(long, default_value = "auto")]
    pub offload: String,
    /// Bloom filter size, KiB.
    #[arg(long, default_value_t = 1024)]
    pub bloom_kib: u64,
    /// Write every query's expected rows (and column types) into the files from DuckDB on the
    /// same Parquet files, instead of running them. Rows that already agree stay as written;
    /// `statement` records are kept as they are.
    #[arg(long, conflicts_with_all = ["offload", "bloom_kib"])]
    pub complete: bool,
}

/// A parsed `.slt` file.
struct SltFile {
    path: PathBuf,
    records: Vec<Record<DefaultColumnType>>,
}

/// How the validator compares a column's cells.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compare {
    /// Integers, text, dates, NULL: the same text.
    Exact,
    /// Floating point: within [`RELATIVE_TOLERANCE`].
    Float,
    /// A decimal of this scale: within [`RELATIVE_TOLERANCE`], or less than one unit of its
    /// last place when the expected value carries more places (the engine cut it at its scale,
    /// as DataFusion does to `avg` and decimal division).
    Decimal(i8),
}

/// How each column of the result the runner received last is compared. The crate's validator
/// is a plain `fn` that sees only text, so the engine adapters leave the columns' types here
/// for [`results_agree`]; `adisk slt` runs one record at a time.
static LAST_COLUMNS: Mutex<Vec<Compare>> = Mutex::new(Vec::new());

fn set_last_columns(columns: &[Compare]) {
    if let Ok(mut last) = LAST_COLUMNS.lock() {
        *last = columns.to_vec();
    }
}

/// One result as the runner sees it.
#[derive(Clone, Debug)]
struct Rendered {
    types: Vec<DefaultColumnType>,
    compare: Vec<Compare>,
    rows: Vec<Vec<String>>,
}

/// Renders a result's cells as text, the same way for ActiveDisk's batches and DuckDB's.
fn render(schema: &Schema, batches: &[RecordBatch]) -> Result<Rendered, String> {
    let fields = schema.fields();
    let types = fields.iter().map(|f| type_letter(f.data_type())).collect();
    let compare = fields.iter().map(|f| compare_of(f.data_type())).collect();
    let mut rows = Vec::new();
    for b in batches {
        let columns = b
            .columns()
            .iter()
            .map(|c| render_column(c.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            rows.push(columns.iter().map(|c| c[r].clone()).collect());
        }
    }
    Ok(Rendered {
        types,
        compare,
        rows,
    })
}

/// `I` for integers (and decimals of scale 0: DuckDB sums integers as HUGEINT), `R` for floats
/// and decimals, `T` for the rest.
fn type_letter(t: &DataType) -> DefaultColumnType {
    match compare_of(t) {
        Compare::Decimal(0) => DefaultColumnType::Integer,
        Compare::Float | Compare::Decimal(_) => DefaultColumnType::FloatingPoint,
        Compare::Exact if t.is_integer() => DefaultColumnType::Integer,
        Compare::Exact => DefaultColumnType::Text,
    }
}

fn compare_of(t: &DataType) -> Compare {
    match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Compare::Float,
        DataType::Decimal32(_, s)
        | DataType::Decimal64(_, s)
        | DataType::Decimal128(_, s)
        | DataType::Decimal256(_, s) => Compare::Decimal(*s),
        _ => Compare::Exact,
    }
}

fn render_column(a: &dyn Array) -> Result<Vec<String>, String> {
    let options = FormatOptions::default().with_null("NULL");
    let text = ArrayFormatter::try_new(a, &options).map_err(|e| e.to_string())?;
    Ok((0..a.len())
        .map(|i| match a.data_type() {
            _ if a.is_null(i) => "NULL".to_string(),
            DataType::Float64 => float(a.as_primitive::<Float64Type>().value(i)),
            DataType::Float32 => float32(a.as_primitive::<Float32Type>().value(i)),
            _ => match text.value(i).to_string() {
                s if s.is_empty() => "(empty)".to_string(),
                s => s,
            },
        })
        .collect())
}

/// The shortest decimal text that reads back to `x`, never with an exponent; `0` for ±0.
fn float(x: f64) -> String {
    match x {
        0.0 => "0".to_string(),
        x if x.is_nan() => "NaN".to_string(),
        x if x.is_infinite() => (if x > 0.0 { "Infinity" } else { "-Infinity" }).to_string(),
        x => format!("{x}"),
    }
}

fn float32(x: f32) -> String {
    match x {
        x if x.is_finite() && x != 0.0 => format!("{x}"),
        x => float(f64::from(x)),
    }
}

/// The runner's validator: as many rows as expected, each agreeing token by token with its
/// expected line (cells are split at white space like the line; a cell's tokens are compared
/// as its column says, see [`Compare`]).
fn results_agree(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    let columns = LAST_COLUMNS.lock().map(|c| c.clone()).unwrap_or_default();
    actual.len() == expected.len()
        && actual.iter().zip(expected).all(|(row, line)| {
            // Hashed results and `valuesort` rows are not the result's columns.
            let columns = if row.len() == columns.len() {
                &columns[..]
            } else {
                &[]
            };
            row_agrees(normalizer, row, line, columns)
        })
}

#[allow(clippy::ptr_arg)]
fn row_agrees(normalizer: Normalizer, row: &[String], line: &String, columns: &[Compare]) -> bool {
    let line = normalizer(line);
    let mut want = line.split_ascii_whitespace();
    for (c, cell) in row.iter().enumerate() {
        let compare = columns.get(c).copied();
        for got in normalizer(cell).split_ascii_whitespace() {
            match want.next() {
                Some(w) if token_agrees(got, w, compare) => {}
                _ => return false,
            }
        }
    }
    want.next().is_none()
}

/// Whether the token `got` agrees with the expected token `want`; `compare`: its column's
/// kind when known (without it: numbers that are not both integers compare as floats).
fn token_agrees(got: &str, want: &str, compare: Option<Compare>) -> bool {
    if got == want {
        return true;
    }
    let cut = match compare {
        Some(Compare::Exact) => return false,
        Some(Compare::Decimal(scale)) if places(want) > i32::from(scale) => {
            10f64.powi(-i32::from(scale))
        }
        Some(_) => 0.0,
        None if is_integer(got) && is_integer(want) => return false,
        None => 0.0,
    };
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(g), Ok(w)) if g.is_finite() && w.is_finite() => {
            (g - w).abs() <= RELATIVE_TOLERANCE * g.abs().max(w.abs()) + cut
        }
        _ => false,
    }
}

fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Decimal places a number is written with: `0.05` → 2, `12` → 0.
fn places(s: &str) -> i32 {
    s.split_once('.').map_or(0, |(_, f)| f.len() as i32)
}

/// What went wrong in `adisk slt`; also a failed query, as the runner reports it.
#[derive(Debug, thiserror::Error)]
pub enum SltError {
    /// The cluster or the SQL engine.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Anything else, with a message (a query's error, a parse error with its file and line,
    /// failed records, the DuckDB oracle).
    #[error("{0}")]
    Other(String),
}

/// ActiveDisk's SQL engine at one offload level, as the runner's database. `summary` holds
/// what the last query moved (or its error's first line) for the `pass` line.
struct ActiveDisk {
    engine: Arc<SqlEngine>,
    summary: Arc<Mutex<String>>,
}

#[async_trait::async_trait]
impl AsyncDB for ActiveDisk {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let result = self.engine.query(sql.trim().trim_end_matches(';')).await;
        let (summary, output) = match result {
            Ok(out) => {
                let r = render(&out.schema, &out.batches).map_err(SltError::Other)?;
                set_last_columns(&r.compare);
                let rows = DBOutput::Rows {
                    types: r.types,
                    rows: r.rows,
                };
                (moved(&out), Ok(rows))
            }
            Err(e) => {
                let e = e.to_string();
                let first = e.lines().next().unwrap_or("").to_string();
                (
                    format!("error as expected: {first}"),
                    Err(SltError::Other(e)),
                )
            }
        };
        if let Ok(mut s) = self.summary.lock() {
            *s = summary;
        }
        output
    }

    async fn shutdown(&mut self) {}

    async fn sleep(duration: std::time::Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// DuckDB's answers to a file's queries, computed beforehand, as the runner's database.
struct DuckDb {
    answers: HashMap<String, Result<Rendered, String>>,
}

#[async_trait::async_trait]
impl AsyncDB for DuckDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        match self.answers.get(sql) {
            Some(Ok(r)) => {
                set_last_columns(&r.compare);
                Ok(DBOutput::Rows {
                    types: r.types.clone(),
                    rows: r.rows.clone(),
                })
            }
            Some(Err(e)) => Err(SltError::Other(e.clone())),
            None => Err(SltError::Other(format!("no DuckDB answer for {sql}"))),
        }
    }

    async fn shutdown(&mut self) {}
}

/// A runner over `db`: its only connection, the tolerant validator.
fn runner<D: AsyncDB>(db: D) -> Runner<D, impl FnMut() -> std::future::Ready<Result<D, D::Error>>>
where
    D::Error: From<SltError>,
{
    let mut db = Some(db);
    let mut r =
        Runner::new(move || {
            std::future::ready(db.take().ok_or_else(|| {
                SltError::Other("`connection` records are not supported".into()).into()
            }))
        });
    r.with_validator(results_agree);
    r
}

/// Offload levels named by a comma-separated list or `all`.
pub fn levels(spec: &str) -> Result<Vec<Offload>, HostError> {
    if spec == "all" {
        return Ok(Offload::ALL.to_vec());
    }
    spec.split(',')
        .map(|s| s.trim().parse::<Offload>())
        .collect()
}

/// What a query moved, for its `pass` line.
fn moved(out: &QueryOutput) -> String {
    let (read, _, shipped) = report::totals(out);
    format!(
        "{} rows · {:.1} ms · {} disk jobs · read {} · shipped {}",
        out.rows(),
        out.wall.as_secs_f64() * 1e3,
        out.scans.len(),
        human_bytes(read),
        human_bytes(shipped)
    )
}

/// Reads and parses `.slt` files; a parse error names the file and line.
fn parse(path: &Path) -> Result<SltFile, SltError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| SltError::Other(format!("reading {name}: {e}")))?;
    let records = sqllogictest::parse_with_name::<DefaultColumnType>(&text, name.as_str())
        .map_err(|e| SltError::Other(e.to_string()))?;
    for r in &records {
        if let Record::Include { loc, .. } = r {
            return Err(SltError::Other(format!(
                "{loc}: `include` is not supported by adisk slt"
            )));
        }
    }
    Ok(SltFile {
        path: path.to_path_buf(),
        records,
    })
}

/// `adisk slt`: runs the files at each level (one line per query and statement, then
/// `N passed, N failed`), or with `--complete` writes their expected rows from DuckDB.
pub async fn slt(cluster: Cluster, a: SltArgs) -> Result<(), SltError> {
    let cluster = Arc::new(cluster);
    let files = a
        .files
        .iter()
        .map(|p| parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    if a.complete {
        return complete(&cluster, files).await;
    }
    let (mut passed, mut failed) = (0, 0);
    for level in levels(&a.offload)? {
        let options = SqlOptions {
            offload: level,
            bloom_kib: a.bloom_kib,
            ..Default::default()
        };
        let engine = Arc::new(SqlEngine::new(cluster.clone(), options).await?);
        for f in &files {
            let (p, n) = run_file(&engine, f, level).await;
            passed += p;
            failed += n;
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        return Err(SltError::Other(format!("{failed} SQL checks failed")));
    }
    Ok(())
}

/// Runs one file's records at one level; prints a line per query and statement and returns
/// how many passed and failed.
async fn run_file(engine: &Arc<SqlEngine>, f: &SltFile, level: Offload) -> (u32, u32) {
    let summary = Arc::new(Mutex::new(String::new()));
    let mut runner = runner(ActiveDisk {
        engine: engine.clone(),
        summary: summary.clone(),
    });
    let (mut passed, mut failed) = (0, 0);
    for record in f.records.iter().cloned() {
        let at = match &record {
            Record::Query { loc, .. } | Record::Statement { loc, .. } => Some(loc.to_string()),
            _ => None,
        };
        let result = runner.run_async(record).await;
        let at = match (at, &result) {
            (_, Ok(RecordOutput::Nothing)) | (None, Ok(_)) => continue,
            (Some(at), _) => at,
            (None, Err(e)) => e.location().to_string(),
        };
        match result {
            Ok(_) => {
                passed += 1;
                let s = summary.lock().map(|s| s.clone()).unwrap_or_default();
                println!("pass  {at}  offload={:<9} {s}", level.to_string());
            }
            Err(e) => {
                failed += 1;
                let text = e.kind().display(false).to_string();
                let mut lines = text.lines();
                println!(
                    "FAIL  {at}  offload={:<9} {}",
                    level.to_string(),
                    lines.next().unwrap_or("")
                );
                for l in lines {
                    println!("      {l}");
                }
            }
        }
    }
    (passed, failed)
}

/// `adisk slt --complete`: each file's query records get DuckDB's rows and column types.
async fn complete(cluster: &Cluster, files: Vec<SltFile>) -> Result<(), SltError> {
    let catalog = cluster.catalog().await?;
    let tables = parquet_files(cluster, &catalog)?;
    for f in files {
        let queries: Vec<(String, String)> = f
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Query {
                    loc,
                    sql,
                    expected: QueryExpect::Results { .. },
                    ..
                } => Some((loc.to_string(), sql.clone())),
                _ => None,
            })
            .collect();
        let texts: Vec<&str> = queries.iter().map(|(_, q)| q.as_str()).collect();
        let answers = duckdb(&tables, &texts)?;
        let failures: Vec<String> = queries
            .iter()
            .zip(&answers)
            .filter_map(|((at, _), a)| a.as_ref().err().map(|e| format!("{at}: DuckDB: {e}")))
            .collect();
        if !failures.is_empty() {
            return Err(SltError::Other(failures.join("\n")));
        }
        let count = queries.len();
        let answers = queries.into_iter().map(|(_, q)| q).zip(answers).collect();
        let text = completed_text(f.records, DuckDb { answers }).await;
        write_atomically(&f.path, &text)?;
        println!(
            "{}: {count} queries completed from DuckDB",
            f.path.display()
        );
    }
    Ok(())
}

/// The file's text with DuckDB's rows under each query (those already agreeing stay).
async fn completed_text(records: Vec<Record<DefaultColumnType>>, duckdb: DuckDb) -> String {
    let mut runner = runner(duckdb);
    let mut text = String::new();
    for record in records {
        let record = match &record {
            Record::Query {
                expected: QueryExpect::Results { .. },
                ..
            }
            | Record::Control(_)
            | Record::HashThreshold { .. } => {
                let output = runner.apply_record(record.clone()).await;
                update_record_with_output(
                    &record,
                    &output,
                    " ",
                    results_agree,
                    default_normalizer,
                    declared_for_every_column,
                )
                .unwrap_or(record)
            }
            _ => record,
        };
        let _ = writeln!(text, "{record}");
    }
    format!("{}\n", text.trim_end())
}

/// Keeps a query's declared type letters when there is one per column (else DuckDB's).
#[allow(clippy::ptr_arg)]
fn declared_for_every_column(
    actual: &Vec<DefaultColumnType>,
    expected: &Vec<DefaultColumnType>,
) -> bool {
    actual.len() == expected.len()
}

fn write_atomically(path: &Path, text: &str) -> Result<(), SltError> {
    let io = |e: std::io::Error| SltError::Other(format!("writing {}: {e}", path.display()));
    let temporary = path.with_extension("slt.completing");
    std::fs::write(&temporary, text).map_err(io)?;
    std::fs::rename(&temporary, path).map_err(io)
}

/// Each table's Parquet files on the disks of a local cluster.
fn parquet_files(
    cluster: &Cluster,
    catalog: &Catalog,
) -> Result<BTreeMap<String, Vec<String>>, SltError> {
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, t) in &catalog.tables {
        for (d, p) in &t.placements {
            let dir = cluster.config().disks[*d as usize].dir.clone().ok_or_else(|| {
                SltError::Other(format!(
                    "disk {d} has no local directory in cluster.toml; --complete needs a local cluster"
                ))
            })?;
            let file = dir.join(&p.file).display().to_string();
            tables.entry(name.clone()).or_default().push(file);
        }
    }
    Ok(tables)
}

/// Runs `queries` in DuckDB over `tables` (one Python process); each answer rendered, or
/// DuckDB's error.
fn duckdb(
    tables: &BTreeMap<String, Vec<String>>,
    queries: &[&str],
) -> Result<Vec<Result<Rendered, String>>, SltError> {
    let python = std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into());
    let json = |e: serde_json::Error| SltError::Other(format!("DuckDB oracle arguments: {e}"));
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(DUCKDB_ARROW_PY)
        .arg(serde_json::to_string(tables).map_err(json)?)
        .arg(serde_json::to_string(queries).map_err(json)?)
        .output()
        .map_err(|e| SltError::Other(format!("running {python} for the DuckDB oracle: {e}")))?;
    if !out.status.success() {
        return Err(SltError::Other(format!(
            "DuckDB oracle: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut answers = Vec::new();
    let mut rest = &out.stdout[..];
    while let [tag, after_tag @ ..] = rest {
        let (len, body) = after_tag.split_at_checked(8).ok_or_else(truncated)?;
        let len = u64::from_le_bytes(len.try_into().map_err(|_| truncated())?) as usize;
        let (body, next) = body.split_at_checked(len).ok_or_else(truncated)?;
        answers.push(match tag {
            b'A' => read_arrow(body),
            _ => Err(String::from_utf8_lossy(body).into_owned()),
        });
        rest = next;
    }
    if answers.len() != queries.len() {
        return Err(truncated());
    }
    Ok(answers)
}

fn truncated() -> SltError {
    SltError::Other("DuckDB oracle: truncated output".into())
}

fn read_arrow(bytes: &[u8]) -> Result<Rendered, String> {
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| e.to_string())?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    render(&schema, &batches)
}

/// The DuckDB side of `--complete`: views over the disks' Parquet files, then per query one
/// byte (`A`: an Arrow IPC stream follows, `E`: an error message), its length in 8 bytes
/// (little-endian) and the bytes. argv[1]: JSON {table: [files]}, argv[2]: JSON [queries].
const DUCKDB_ARROW_PY: &str = r#"
import json, struct, sys
try:
    import duckdb, pyarrow as pa
except ImportError as e:
    sys.exit(f"the DuckDB oracle needs `pip install duckdb==1.5.5 pyarrow` ({e})")
tables, queries = json.loads(sys.argv[1]), json.loads(sys.argv[2])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
con.execute("SET threads TO 2")
for t, files in tables.items():
    con.execute(f'CREATE VIEW "{t}" AS SELECT * FROM read_parquet({json.dumps(files)})')
out = sys.stdout.buffer
for q in queries:
    try:
        table = con.execute(q).to_arrow_table()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        tag, body = b"A", sink.getvalue().to_pybytes()
    except Exception as e:  # reported per query
        tag, body = b"E", str(e).encode()
    out.write(tag + struct.pack("<Q", len(body)) + body)
out.flush()
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_agree_within_the_tolerance_only() {
        let float = Some(Compare::Float);
        assert!(token_agrees("0.3", "0.30000000000000004", float));
        assert!(!token_agrees("2.35", "2.34", float));
        assert!(!token_agrees("2.5", "2.55", float));
        // A decimal cut at 6 places against DuckDB's double.
        let cut = Some(Compare::Decimal(6));
        assert!(token_agrees("-500.123456", "-500.12345678901", cut));
        assert!(!token_agrees("-500.123454", "-500.12345678901", cut));
        // No cut when the expected value fits the scale: exact within 1e-9.
        assert!(!token_agrees("2.500000", "2.49", cut));
        assert!(token_agrees("2.500000", "2.5", cut));
        assert!(!token_agrees("13", "14", Some(Compare::Exact)));
        assert!(!token_agrees("13", "14", None));
        assert!(!token_agrees("alpha", "beta", None));
    }

    #[test]
    fn cells_with_spaces_split_like_the_line() {
        let row = vec!["UNITED STATES".to_string(), "1.5".to_string()];
        let columns = [Compare::Exact, Compare::Float];
        let line = "UNITED STATES 1.5000000001".to_string();
        assert!(row_agrees(default_normalizer, &row, &line, &columns));
        let line = "UNITED KINGDOM 1.5".to_string();
        assert!(!row_agrees(default_normalizer, &row, &line, &columns));
        let line = "UNITED STATES 1.5 7".to_string();
        assert!(!row_agrees(default_normalizer, &row, &line, &columns));
    }

    #[test]
    fn floats_render_shortest_without_exponent() {
        assert_eq!(float(2.35), "2.35");
        assert_eq!(float(1500.0), "1500");
        assert_eq!(float(-0.0), "0");
        assert_eq!(float(1e-7), "0.0000001");
        assert_eq!(float32(0.1), "0.1");
    }
}
