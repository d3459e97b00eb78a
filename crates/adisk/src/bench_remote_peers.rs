//! The engines of `adisk bench remote` and the files they read: ActiveDisk through ADBC and
//! DuckDB with httpfs, each a Python child answering one query per request
//! (`bench_remote_peers.py`), and DataFusion with its HTTP object store in this process; where
//! the disks' files are and their Snappy copies; result fingerprints compared across engines.
use crate::common::CliError;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const PEERS_PY: &str = include_str!("bench_remote_peers.py");

/// An engine of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// ActiveDisk through its Flight SQL service, with the ADBC Flight SQL driver.
    Adisk,
    /// DuckDB with httpfs on Snappy copies of the disks' files.
    DuckdbSnappy,
    /// DuckDB with httpfs on the disks' own (uncompressed) files.
    DuckdbOwn,
    /// DataFusion with its HTTP object store on the disks' own files.
    DatafusionHttp,
    /// DuckDB on the disks' own files read from the local file system, as if the storage
    /// machines' disks were the host's own: the baseline of a host with no network.
    DuckdbLocal,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Adisk => "adisk",
            Engine::DuckdbSnappy => "duckdb-snappy",
            Engine::DuckdbOwn => "duckdb-own",
            Engine::DatafusionHttp => "datafusion-http",
            Engine::DuckdbLocal => "duckdb-local",
        }
    }
}

/// What a result is checked by: its rows and per column a sum (of numbers, of strings'
/// lengths, of dates' days; none for other types).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Fingerprint {
    pub rows: u64,
    pub sums: Vec<Option<f64>>,
}

impl Fingerprint {
    /// Whether `self` and `other` are the same answer: the same rows and columns, and column
    /// sums equal within rounding (a relative 1e-6, plus 1e-4 per row for averages that one
    /// engine rounds to a decimal scale and another keeps as a float).
    pub fn agrees(&self, other: &Fingerprint) -> Result<(), String> {
        if self.rows != other.rows || self.sums.len() != other.sums.len() {
            return Err(format!(
                "{} rows × {} columns, not {} × {}",
                self.rows,
                self.sums.len(),
                other.rows,
                other.sums.len()
            ));
        }
        for (c, (a, b)) in self.sums.iter().zip(&other.sums).enumerate() {
            if let (Some(a), Some(b)) = (a, b) {
                let slack = 1e-6 * a.abs().max(b.abs()) + 1e-4 * self.rows as f64 + 1e-9;
                if (a - b).abs() > slack {
                    return Err(format!("column {} sums to {a}, not {b}", c + 1));
                }
            }
        }
        Ok(())
    }

    /// The fingerprint of a result of `columns` columns in record batches (an empty result
    /// may come as no batch at all: its columns are summed as nothing, not left out).
    pub fn of(columns: usize, batches: &[RecordBatch]) -> Fingerprint {
        let sums = (0..columns)
            .map(|c| {
                batches
                    .iter()
                    .map(|b| column_sum(b.column(c).as_ref()))
                    .try_fold(0.0, |acc, s| s.map(|s| acc + s))
            })
            .collect();
        Fingerprint {
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            sums,
        }
    }
}

/// A column's sum as [`Fingerprint`] takes it; `None` for a type it does not sum.
fn column_sum(a: &dyn Array) -> Option<f64> {
    use arrow::compute::{cast, kernels::length::length, sum};
    match a.data_type() {
        t if t.is_numeric() => {
            let f = cast(a, &DataType::Float64).ok()?;
            Some(sum(f.as_primitive::<Float64Type>()).unwrap_or(0.0))
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = cast(a, &DataType::LargeUtf8).ok()?;
            let l = length(&s).ok()?;
            Some(sum(l.as_primitive::<Int64Type>()).unwrap_or(0) as f64)
        }
        DataType::Date32 => {
            let d = cast(a, &DataType::Int32).ok()?;
            Some(sum(d.as_primitive::<Int32Type>()).unwrap_or(0) as f64)
        }
        _ => None,
    }
}

/// The disks' Parquet files per table: disk `d`'s partitions, as its manifest lists them.
pub struct Layout {
    /// Table -> (disk, file relative to the disk's directory).
    tables: BTreeMap<String, Vec<(usize, String)>>,
    /// Disk `d`'s file server, `http://ADDRESS:PORT`.
    bases: Vec<String>,
}

impl Layout {
    /// Reads `cdir/disk-N/manifest.json` of each disk; `addresses[d]` is disk `d`'s IP.
    pub fn read(cdir: &Path, addresses: &[String], port: u16) -> Result<Layout, CliError> {
        let mut tables: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
        for d in 0..addresses.len() {
            let path = cdir.join(format!("disk-{d}/manifest.json"));
            let text = std::fs::read_to_string(&path)
                .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
            let manifest: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
            let Some(listed) = manifest["tables"].as_object() else {
                continue;
            };
            for (name, table) in listed {
                let files = table["partitions"].as_array().into_iter().flatten();
                let entry = tables.entry(name.clone()).or_default();
                entry.extend(files.filter_map(|p| Some((d, p["file"].as_str()?.to_string()))));
            }
        }
        let bases = addresses
            .iter()
            .map(|a| format!("http://{a}:{port}"))
            .collect();
        Ok(Layout { tables, bases })
    }

    /// Each table's files as URLs: the disks' own, or their Snappy copies.
    pub fn urls(&self, snappy: bool) -> BTreeMap<String, Vec<String>> {
        let url = |d: usize, f: &str| match snappy {
            true => format!("{}/snappy/disk-{d}/{f}", self.bases[d]),
            false => format!("{}/disk-{d}/{f}", self.bases[d]),
        };
        self.tables
            .iter()
            .map(|(t, files)| (t.clone(), files.iter().map(|(d, f)| url(*d, f)).collect()))
            .collect()
    }

    /// Each table's files as local paths under the cluster directory `cdir`.
    pub fn paths(&self, cdir: &Path) -> BTreeMap<String, Vec<String>> {
        let path = |d: usize, f: &str| cdir.join(format!("disk-{d}/{f}")).display().to_string();
        self.tables
            .iter()
            .map(|(t, files)| (t.clone(), files.iter().map(|(d, f)| path(*d, f)).collect()))
            .collect()
    }

    /// Writes `cdir/snappy/disk-N/FILE`, a Snappy-compressed copy of each file (the same row
    /// groups, statistics and page indexes), unless the copies of exactly these files exist.
    pub fn make_snappy_copies(&self, cdir: &Path) -> Result<(), CliError> {
        let fail = |what: &Path, e: String| CliError::Other(format!("{}: {e}", what.display()));
        let root = cdir.join("snappy");
        let mut listing: Vec<String> = self
            .tables
            .values()
            .flatten()
            .map(|(d, f)| format!("disk-{d}/{f}"))
            .collect();
        listing.sort();
        let signature = root.join("files.txt");
        if std::fs::read_to_string(&signature).is_ok_and(|s| s == listing.join("\n")) {
            return Ok(());
        }
        let _ = std::fs::remove_dir_all(&root);
        eprintln!("writing Snappy copies of {} files …", listing.len());
        for f in &listing {
            let (from, to) = (cdir.join(f), root.join(f));
            snappy_copy(&from, &to).map_err(|e| fail(&from, e))?;
        }
        std::fs::write(&signature, listing.join("\n")).map_err(|e| fail(&signature, e.to_string()))
    }
}

/// Rewrites the Parquet file `from` to `to` with Snappy pages and `from`'s row-group size.
fn snappy_copy(from: &Path, to: &Path) -> Result<(), String> {
    use parquet::arrow::{ArrowWriter, arrow_reader::ParquetRecordBatchReaderBuilder};
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    let input = std::fs::File::open(from).map_err(|e| e.to_string())?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(input).map_err(|e| e.to_string())?;
    let groups = builder.metadata().row_groups();
    let group_rows = groups
        .iter()
        .map(|g| g.num_rows())
        .max()
        .unwrap_or(1)
        .max(1);
    let schema = builder.schema().clone();
    let reader = builder.build().map_err(|e| e.to_string())?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    let tmp = to.with_extension("tmp");
    let out = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(group_rows as usize))
        .build();
    let mut writer = ArrowWriter::try_new(out, schema, Some(props)).map_err(|e| e.to_string())?;
    for batch in reader {
        writer
            .write(&batch.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    writer.close().map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, to).map_err(|e| e.to_string())
}

/// A running engine.
pub struct Peer {
    pub engine: Engine,
    kind: Kind,
}

enum Kind {
    Python(PyChild),
    DataFusion(datafusion::prelude::SessionContext),
}

impl Peer {
    /// Starts `engine`: the Python child (run by `python`), or DataFusion with every table
    /// registered; peers use `peer_threads` threads.
    pub async fn start(
        engine: Engine,
        python: &str,
        peer_threads: u32,
        serve: &adisk_core::config::ServeSection,
        layout: &Layout,
        cdir: &Path,
    ) -> Result<Peer, CliError> {
        let threads = peer_threads.max(1).to_string();
        let kind = match engine {
            Engine::Adisk => {
                let ca = serve
                    .tls_ca
                    .as_ref()
                    .map_or("-".into(), |p| p.display().to_string());
                let pw = serve.admin_password_file.as_ref();
                let pw = pw.map_or("-".into(), |p| p.display().to_string());
                let uri = adisk_server::client::served_url(serve);
                Kind::Python(PyChild::start(python, &["adbc", &uri, &ca, "admin", &pw])?)
            }
            Engine::DuckdbSnappy | Engine::DuckdbOwn | Engine::DuckdbLocal => {
                let files = match engine {
                    Engine::DuckdbLocal => layout.paths(cdir),
                    e => layout.urls(e == Engine::DuckdbSnappy),
                };
                let path = cdir.join(format!("tables-{}.json", engine.name()));
                let urls = serde_json::to_string(&files).unwrap_or_default();
                std::fs::write(&path, urls)
                    .map_err(|e| CliError::Other(format!("{}: {e}", path.display())))?;
                let path = path.display().to_string();
                Kind::Python(PyChild::start(python, &["duckdb", &threads, &path])?)
            }
            Engine::DatafusionHttp => {
                Kind::DataFusion(datafusion_peer(layout, peer_threads).await?)
            }
        };
        Ok(Peer { engine, kind })
    }

    /// Runs `sql` once: its wall time (s) and its answer's fingerprint, or the error.
    pub async fn run(&mut self, sql: &str) -> Result<(f64, Fingerprint), String> {
        match &mut self.kind {
            Kind::Python(child) => tokio::task::block_in_place(|| child.run(sql)),
            Kind::DataFusion(ctx) => {
                let start = std::time::Instant::now();
                let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
                let columns = df.schema().fields().len();
                let batches = df.collect().await.map_err(|e| e.to_string())?;
                let print = Fingerprint::of(columns, &batches);
                Ok((start.elapsed().as_secs_f64(), print))
            }
        }
    }
}

/// DataFusion with an HTTP object store per disk and each table over its files' URLs.
async fn datafusion_peer(
    layout: &Layout,
    threads: u32,
) -> Result<datafusion::prelude::SessionContext, CliError> {
    use datafusion::datasource::file_format::parquet::ParquetFormat;
    use datafusion::datasource::listing::{
        ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
    };
    let fail = |e: String| CliError::Other(format!("DataFusion over HTTP: {e}"));
    let config =
        datafusion::prelude::SessionConfig::new().with_target_partitions(threads.max(1) as usize);
    let ctx = datafusion::prelude::SessionContext::new_with_config(config);
    for base in &layout.bases {
        let store = object_store::http::HttpBuilder::new()
            .with_url(base.as_str())
            .with_client_options(object_store::ClientOptions::new().with_allow_http(true))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let url = url::Url::parse(base).map_err(|e| fail(e.to_string()))?;
        ctx.register_object_store(&url, Arc::new(store));
    }
    for (table, urls) in layout.urls(false) {
        let paths = urls
            .iter()
            .map(|u| ListingTableUrl::parse(u).map_err(|e| fail(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let options = ListingOptions::new(Arc::new(ParquetFormat::default()));
        let config = ListingTableConfig::new_with_multi_paths(paths)
            .with_listing_options(options)
            .infer_schema(&ctx.state())
            .await
            .map_err(|e| fail(format!("{table}: {e}")))?;
        let provider = ListingTable::try_new(config).map_err(|e| fail(e.to_string()))?;
        ctx.register_table(table.as_str(), Arc::new(provider))
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok(ctx)
}

/// A Python engine answering one query per line (`bench_remote_peers.py`).
struct PyChild(crate::py_server::PyServer);

impl PyChild {
    fn start(python: &str, args: &[&str]) -> Result<PyChild, CliError> {
        let name = format!("the {} engine", args[0]);
        crate::py_server::PyServer::start(python, PEERS_PY, args, &name).map(PyChild)
    }

    fn run(&mut self, sql: &str) -> Result<(f64, Fingerprint), String> {
        let line = self.0.ask(sql)?;
        let v: serde_json::Value =
            serde_json::from_str(&line).map_err(|_| format!("the engine answered {line:?}"))?;
        if let Some(e) = v["error"].as_str() {
            return Err(e.to_string());
        }
        let secs = v["secs"].as_f64().ok_or("no time in the engine's answer")?;
        let print: Fingerprint = serde_json::from_value(v).map_err(|e| e.to_string())?;
        Ok((secs, print))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date32Array, Decimal128Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn fingerprints_sum_numbers_strings_and_dates_and_agree_within_rounding() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("p", DataType::Decimal128(12, 2), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(5)])),
                Arc::new(StringArray::from(vec!["ab", "", "xyz"])),
                Arc::new(Date32Array::from(vec![10, 20, 30])),
                Arc::new(
                    Decimal128Array::from(vec![150, 250, 1])
                        .with_precision_and_scale(12, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let f = Fingerprint::of(4, &[batch.clone(), batch]);
        assert_eq!(f.rows, 6);
        assert_eq!(
            f.sums,
            vec![Some(12.0), Some(10.0), Some(120.0), Some(8.02)]
        );
        let close = Fingerprint {
            rows: 6,
            sums: vec![Some(12.0), Some(10.0), Some(120.0), Some(8.0201)],
        };
        assert!(f.agrees(&close).is_ok());
        let off = Fingerprint {
            rows: 6,
            sums: vec![Some(13.0), Some(10.0), Some(120.0), Some(8.02)],
        };
        assert!(f.agrees(&off).unwrap_err().contains("column 1"));
        let fewer = Fingerprint {
            rows: 5,
            ..f.clone()
        };
        assert!(f.agrees(&fewer).is_err());
        let untyped = Fingerprint {
            rows: 6,
            sums: vec![None, Some(10.0), Some(120.0), Some(8.02)],
        };
        assert!(f.agrees(&untyped).is_ok());
        // An empty result without batches agrees with an empty one whose sums are null.
        let none = Fingerprint::of(2, &[]);
        assert_eq!(none.rows, 0);
        let python_empty = Fingerprint {
            rows: 0,
            sums: vec![None, None],
        };
        assert!(none.agrees(&python_empty).is_ok());
    }
}
