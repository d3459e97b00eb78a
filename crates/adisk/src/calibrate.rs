//! `adisk calibrate`: what one core of this machine costs per unit of each operator the engine
//! runs, measured on the engine's own code (the disks' Parquet pages, DataFusion's operators
//! as the disks' fragments and the host run them, Arrow IPC as the streams carry it, the
//! Bloom filters and hash partitioning of `adisk_core`), written as a cost file
//! (`adisk_core::calibration`) that `auto` prices plans with and the simulator's experiments
//! can read (`workload.calibration`).
//!
//! Every figure is the median over repeats of the process's CPU time (all threads), so a busy
//! machine slows a run but hardly moves its figures. The data is TPC-H's lineitem and orders
//! at `--sf` (tpchgen), held in memory.
use crate::common::CliError;
use adisk_core::calibration::{self as cal, Calibration, Cost, Machine};
use arrow::array::RecordBatch;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The cost file's name in a cluster's directory (`adisk up` points `cluster.toml` at it).
pub const COSTS_FILE: &str = "costs.toml";

/// The largest scale factor of the in-memory data (lineitem, orders, and a copy of lineitem's
/// size for the copy benchmark).
const MAX_SF: f64 = 1.0;

/// Options of `adisk calibrate`.
#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Where the cost file goes (default: DIR/costs.toml, and a cluster.toml in DIR is
    /// pointed at it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// TPC-H scale factor of the data the micro-benchmarks run on (lineitem has about
    /// 6 million rows per unit).
    #[arg(long, default_value_t = 0.1)]
    pub sf: f64,
    /// Repeats of each measurement (the median is kept).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
}

/// The data the micro-benchmarks run on.
struct Data {
    lineitem: Vec<RecordBatch>,
    orders: Vec<RecordBatch>,
    repeats: usize,
}

impl Data {
    fn rows(batches: &[RecordBatch]) -> f64 {
        batches.iter().map(|b| b.num_rows()).sum::<usize>() as f64
    }

    fn bytes(batches: &[RecordBatch]) -> f64 {
        batches
            .iter()
            .map(|b| b.get_array_memory_size())
            .sum::<usize>() as f64
    }
}

pub async fn run(dir: &Path, a: CalibrateArgs) -> Result<(), CliError> {
    if !(a.sf > 0.0 && a.sf <= MAX_SF) {
        return Err(CliError::Other(format!(
            "--sf {}: between 0 and {MAX_SF} (the data is held in memory, about 1.5 GB at SF 1)",
            a.sf
        )));
    }
    if a.repeats == 0 || a.repeats > 100 {
        return Err(CliError::Other("--repeats: 1 to 100".into()));
    }
    let out = match &a.out {
        Some(out) => out.clone(),
        None => {
            std::fs::create_dir_all(dir)
                .map_err(|e| CliError::Other(format!("creating {}: {e}", dir.display())))?;
            dir.join(COSTS_FILE)
        }
    };
    println!(
        "adisk calibrate: TPC-H SF {} in memory, median of {} per figure (process CPU time)",
        a.sf, a.repeats
    );
    let data = Data {
        lineitem: generate("lineitem", a.sf)?,
        orders: generate("orders", a.sf)?,
        repeats: a.repeats,
    };
    let clock_ghz = measure_clock_ghz();
    println!("  clock                      {clock_ghz:.2} GHz (a chain of dependent adds)");
    let mut costs = BTreeMap::new();
    let mut put = |name: &str, ns: f64, per: &str, how: String| {
        println!("  {name:<26} {ns:>10.3} ns per {per}");
        costs.insert(
            name.to_string(),
            Cost {
                ns,
                per: per.into(),
                how: format!("{how}, median of {}", a.repeats),
            },
        );
    };
    let scan_ns = scan_costs(&data, &mut put)?;
    ipc_costs(&data, &mut put)?;
    operator_costs(&data, &mut put).await?;
    hash_costs(&data, &mut put)?;
    copy_cost(&data, &mut put);
    if dir.join("cluster.toml").exists() {
        cluster_costs(dir, a.repeats, scan_ns, &mut put).await?;
    } else {
        println!(
            "  (no cluster in {}: the cost of a disk job is not measured; `adisk up` first to measure it)",
            dir.display()
        );
    }
    let calibration = Calibration {
        machine: Machine {
            cpu: cpu_model(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            clock_ghz,
            measured: utc_now(),
            adisk: env!("CARGO_PKG_VERSION").into(),
        },
        sim: sim_costs(&costs, clock_ghz),
        costs,
    };
    calibration.check().map_err(CliError::Other)?;
    calibration
        .save(&out)
        .map_err(|e| CliError::Other(e.to_string()))?;
    println!("wrote {}", out.display());
    if a.out.is_none() {
        point_cluster_at(dir, &out)?;
    }
    Ok(())
}

/// Points DIR/cluster.toml, if there is one, at the cost file.
fn point_cluster_at(dir: &Path, costs: &Path) -> Result<(), CliError> {
    let path = dir.join("cluster.toml");
    if !path.exists() {
        return Ok(());
    }
    let mut config = adisk_core::config::ClusterConfig::load(&path)?;
    config.cluster.costs = Some(costs.to_path_buf());
    config.save(&path)?;
    println!(
        "{} now prices `auto`'s plans with it (takes effect for hosts started from now on)",
        path.display()
    );
    Ok(())
}

fn generate(table: &str, sf: f64) -> Result<Vec<RecordBatch>, CliError> {
    let batches = adisk_storage::tpch::generate(table, sf, 1, 1)
        .map_err(|e| CliError::Other(e.to_string()))?;
    batches
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::Other(format!("generating {table}: {e}")))
}

/// Median over `repeats` of the process CPU time `f` takes, ns.
fn cpu_ns<R>(repeats: usize, mut f: impl FnMut() -> R) -> f64 {
    let mut times: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = adisk_core::stats::process_cpu_ns();
            std::hint::black_box(f());
            adisk_core::stats::process_cpu_ns().saturating_sub(t) as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The clock, from a chain of dependent one-cycle adds (x86-64), else what the kernel says.
pub(crate) fn measure_clock_ghz() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        const ROUNDS: u64 = 2_000_000;
        let ns = cpu_ns(5, || {
            let mut x = 0u64;
            for _ in 0..ROUNDS {
                // SAFETY: 100 register adds; no memory, no flags anyone reads.
                unsafe {
                    std::arch::asm!(".rept 100", "add {x}, 1", ".endr", x = inout(reg) x);
                }
            }
            x
        });
        if ns > 0.0 {
            return (ROUNDS * 100) as f64 / ns;
        }
    }
    cpuinfo_field("cpu MHz")
        .and_then(|m| m.parse::<f64>().ok())
        .map_or(1.0, |mhz| mhz / 1000.0)
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn cpu_model() -> String {
    cpuinfo_field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

type Put<'a> = dyn FnMut(&str, f64, &str, String) + 'a;

/// Decoding the disks' stored pages (uncompressed, their page and row-group sizes) and one
/// predicate over the decoded rows, per stored byte.
fn scan_costs(d: &Data, put: &mut Put) -> Result<f64, CliError> {
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let err = |e: parquet::errors::ParquetError| CliError::Other(format!("calibrate scan: {e}"));
    let props = adisk_storage::writer::writer_properties(
        adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
        adisk_core::config::Compression::None,
    );
    let mut file = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut file, d.lineitem[0].schema(), Some(props)).map_err(err)?;
    for b in &d.lineitem {
        w.write(b).map_err(err)?;
    }
    w.close().map_err(err)?;
    let file = bytes::Bytes::from(file);
    let stored = file.len() as f64;
    let qty = d.lineitem[0]
        .schema()
        .index_of("l_quantity")
        .map_err(|e| CliError::Other(e.to_string()))?;
    let mut failure = None;
    let ns = cpu_ns(d.repeats, || {
        let run = || -> Result<usize, CliError> {
            let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
                .and_then(|b| b.build())
                .map_err(err)?;
            let mut kept = 0;
            for batch in reader {
                let batch = batch.map_err(|e| CliError::Other(e.to_string()))?;
                kept += select_rows(&batch, qty)?.num_rows();
            }
            Ok(kept)
        };
        run().map_err(|e| failure = Some(e)).ok()
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let scan_ns = ns / stored;
    put(
        cal::SCAN,
        scan_ns,
        "byte of stored lineitem",
        format!(
            "decode {} of uncompressed Parquet and keep l_quantity < 24",
            adisk_core::stats::human_bytes(stored as u64)
        ),
    );
    Ok(scan_ns)
}

/// `l_quantity < 24` over `batch` (column `qty`), as arrow's kernels evaluate it.
fn select_rows(batch: &RecordBatch, qty: usize) -> Result<RecordBatch, CliError> {
    use arrow::array::{Datum, Decimal128Array};
    let col = batch.column(qty);
    let bound = Decimal128Array::from(vec![2400i128])
        .with_precision_and_scale(15, 2)
        .map_err(|e| CliError::Other(e.to_string()))?;
    let bound: &dyn Datum = &arrow::array::Scalar::new(bound);
    let mask =
        arrow::compute::kernels::cmp::lt(col, bound).map_err(|e| CliError::Other(e.to_string()))?;
    arrow::compute::filter_record_batch(batch, &mask).map_err(|e| CliError::Other(e.to_string()))
}

/// Arrow IPC as the streams carry it: encoding lineitem's batches, decoding them, per byte.
fn ipc_costs(d: &Data, put: &mut Put) -> Result<(), CliError> {
    use arrow::ipc::reader::StreamReader;
    use arrow::ipc::writer::StreamWriter;
    let err = |e: arrow::error::ArrowError| CliError::Other(format!("calibrate IPC: {e}"));
    let encode = || -> Result<Vec<u8>, CliError> {
        let mut w = StreamWriter::try_new(Vec::new(), &d.lineitem[0].schema()).map_err(err)?;
        for b in &d.lineitem {
            w.write(b).map_err(err)?;
        }
        w.into_inner().map_err(err)
    };
    let encoded = encode()?;
    let bytes = encoded.len() as f64;
    let enc = cpu_ns(d.repeats, encode);
    let dec = cpu_ns(d.repeats, || {
        StreamReader::try_new(std::io::Cursor::new(&encoded), None)
            .map(|r| {
                r.filter_map(Result::ok)
                    .map(|b| b.num_rows())
                    .sum::<usize>()
            })
            .unwrap_or(0)
    });
    let how = |what: &str| {
        format!(
            "{what} {} of lineitem as an Arrow IPC stream",
            adisk_core::stats::human_bytes(bytes as u64)
        )
    };
    put(cal::IPC_ENCODE, enc / bytes, "byte of IPC", how("encode"));
    put(cal::IPC_DECODE, dec / bytes, "byte of IPC", how("decode"));
    Ok(())
}

/// One partition, as a disk's fragment runs on one slot.
fn context(d: &Data) -> Result<SessionContext, CliError> {
    // The left side builds (as the disks' fragments are planned: the smaller side left).
    let mut config = SessionConfig::new().with_target_partitions(1);
    config.options_mut().optimizer.join_reordering = false;
    let ctx = SessionContext::new_with_config(config);
    let df = |e: datafusion::error::DataFusionError| CliError::Other(format!("calibrate: {e}"));
    for (name, batches) in [("lineitem", &d.lineitem), ("orders", &d.orders)] {
        let table =
            datafusion::datasource::MemTable::try_new(batches[0].schema(), vec![batches.clone()])
                .map_err(df)?;
        ctx.register_table(name, Arc::new(table)).map_err(df)?;
    }
    Ok(ctx)
}

/// Median process CPU of running `sql` to the end, ns.
async fn sql_ns(ctx: &SessionContext, sql: &str, repeats: usize) -> Result<f64, CliError> {
    let df = |e: datafusion::error::DataFusionError| CliError::Other(format!("calibrate: {e}"));
    let mut times = Vec::with_capacity(repeats);
    for i in 0..repeats {
        // A plan per run: a hash join keeps its built side for the next run of the same plan.
        let plan = ctx
            .sql(sql)
            .await
            .map_err(df)?
            .create_physical_plan()
            .await
            .map_err(df)?;
        if i == 0 && std::env::var_os("ADISK_CALIBRATE_PLANS").is_some() {
            let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true);
            eprintln!("{sql}\n{shown}");
        }
        let t = adisk_core::stats::process_cpu_ns();
        datafusion::physical_plan::collect(plan, ctx.task_ctx())
            .await
            .map_err(df)?;
        times.push(adisk_core::stats::process_cpu_ns().saturating_sub(t) as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// DataFusion's operators on one partition: the hash join (build, probe, per input byte),
/// group-by, aggregate and sort, each net of the scan of its input (a `count(*)` over it).
async fn operator_costs(d: &Data, put: &mut Put<'_>) -> Result<(), CliError> {
    let ctx = context(d)?;
    let r = d.repeats;
    let (nl, no) = (Data::rows(&d.lineitem), Data::rows(&d.orders));
    let base = sql_ns(&ctx, "SELECT count(*) FROM lineitem", r).await?;
    let join = |probe: &str| {
        format!(
            "SELECT count(*) FROM orders JOIN {probe} ON o_orderkey = l_orderkey WHERE o_orderdate < l_shipdate"
        )
    };
    let full = sql_ns(&ctx, &join("lineitem"), r).await?;
    // The same join with one row to probe: orders' build (a probe side with none may skip it).
    let build_only = sql_ns(&ctx, &join("(SELECT * FROM lineitem LIMIT 1) AS l"), r).await?;
    let build = (build_only / no).max(0.1);
    let probe = ((full - build_only - base) / nl).max(0.1);
    put(
        cal::HASH_BUILD,
        build,
        "build row",
        format!("orders ({no} rows) as the build side"),
    );
    put(
        cal::HASH_PROBE,
        probe,
        "probe row",
        format!("lineitem ({nl} rows) probing, net of the build and of reading lineitem"),
    );
    let join_cols = ["o_orderkey", "o_orderdate", "l_orderkey", "l_shipdate"];
    let input_bytes = column_bytes(&d.orders, &join_cols) + column_bytes(&d.lineitem, &join_cols);
    put(
        cal::JOIN,
        (full - base).max(1.0) / input_bytes,
        "byte of join input",
        "orders ⋈ lineitem on the order key, net of reading lineitem".into(),
    );
    let group = sql_ns(
        &ctx,
        "SELECT l_suppkey, sum(l_extendedprice) FROM lineitem GROUP BY l_suppkey",
        r,
    )
    .await?;
    put(
        cal::HASH_GROUP,
        ((group - base) / nl).max(0.1),
        "row",
        "sum(l_extendedprice) by l_suppkey".into(),
    );
    let agg = sql_ns(
        &ctx,
        "SELECT sum(l_extendedprice), min(l_discount) FROM lineitem",
        r,
    )
    .await?;
    put(
        cal::AGGREGATE,
        ((agg - base) / nl).max(0.1),
        "row",
        "sum and min over lineitem".into(),
    );
    let sort = sql_ns(
        &ctx,
        "SELECT l_orderkey, l_extendedprice FROM lineitem ORDER BY l_extendedprice",
        r,
    )
    .await?;
    put(
        cal::SORT_COMPARE,
        ((sort - base) / (nl * nl.log2())).max(0.01),
        "row × log₂ rows",
        "lineitem's order key and price sorted on the price".into(),
    );
    Ok(())
}

/// What the cluster in `dir` costs beyond its operators: a disk job's fixed share at the disk
/// ([`cal::STAGE`]) and at the host ([`cal::JOB_HOST`]) from a `count(*)` of its smallest
/// table, one job per disk; and moving a byte through the cluster's transport (Arrow IPC in
/// Flight streams over HTTP/2, TLS when the cluster has it) from rows of its largest table
/// shipped whole: the host's CPU per byte received ([`cal::RECEIVE`]) and the disks' per
/// byte sent ([`cal::SEND`], net of scanning at `scan_ns` and of the jobs' fixed share).
async fn cluster_costs(
    dir: &Path,
    repeats: usize,
    scan_ns: f64,
    put: &mut Put<'_>,
) -> Result<(), CliError> {
    use adisk_host::sql::{Offload, SqlEngine, SqlOptions};
    let cluster = Arc::new(crate::common::connect(dir).await?);
    let options = SqlOptions {
        offload: Offload::Semijoin,
        ..Default::default()
    };
    let engine = SqlEngine::new(cluster.clone(), options).await?;
    let Some((smallest, largest)) = tables_by_size(&cluster).await? else {
        println!(
            "  (the cluster holds no table: the costs of its jobs and transport are not measured)"
        );
        return Ok(());
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0).max(1e-3)
    };
    let runs = repeats.max(3);
    let count = format!("SELECT count(*) FROM \"{smallest}\"");
    let (mut disk, mut host) = (Vec::new(), Vec::new());
    for out in runs_of(&engine, &count, runs).await? {
        let jobs = out.scans.len().max(1) as f64;
        disk.extend(
            out.scans
                .iter()
                .filter_map(|s| s.stats.as_ref())
                .map(|s| s.process_cpu_ns as f64),
        );
        host.push(out.host_cpu_ns as f64 / jobs);
    }
    let disks = cluster.disk_count();
    let how = format!("`{count}` at semijoin, one job per disk ({disks} disks)");
    let (stage, job_host) = (median(disk), median(host));
    put(cal::STAGE, stage, "disk job, at the disk", how.clone());
    put(cal::JOB_HOST, job_host, "disk job, at the host", how);

    let ship = format!("SELECT * FROM \"{largest}\" LIMIT {TRANSPORT_ROWS}");
    let (mut send, mut receive) = (Vec::new(), Vec::new());
    for out in runs_of(&engine, &ship, runs).await? {
        let stats: Vec<_> = out.scans.iter().filter_map(|s| s.stats.as_ref()).collect();
        let shipped: u64 = stats.iter().map(|s| s.bytes_shipped_host).sum();
        let received: u64 = out.scans.iter().map(|s| s.bytes_received).sum();
        if shipped == 0 || received == 0 {
            continue;
        }
        let disk_ns: f64 = stats
            .iter()
            .map(|s| s.process_cpu_ns as f64 - s.bytes_scanned as f64 * scan_ns - stage)
            .sum();
        send.push(disk_ns / shipped as f64);
        receive.push((out.host_cpu_ns as f64 - job_host * stats.len() as f64) / received as f64);
    }
    if send.is_empty() {
        println!("  (`{ship}` shipped nothing: the transport's costs are not measured)");
        return Ok(());
    }
    let how = format!(
        "`{ship}` at semijoin ({disks} disks, TLS {})",
        if cluster.config().cluster.tls.is_some() {
            "on"
        } else {
            "off"
        }
    );
    put(
        cal::SEND,
        median(send),
        "byte sent to the host, at the disk",
        how.clone(),
    );
    put(
        cal::RECEIVE,
        median(receive),
        "byte received, at the host",
        how,
    );
    join_costs(
        &cluster,
        &catalog_tables(&cluster).await?,
        runs,
        (stage, job_host),
        put,
    )
    .await
}

/// What a join costs end to end on the cluster, beyond scanning, when it holds TPC-H's
/// `lineitem`, `orders` and `part` (`adisk load tpch`): at the host of a host-centric plan per
/// byte it receives ([`cal::HOST_BYTE`]: receiving, joining, aggregating), and at the disks
/// of a `disks` plan per byte exchanged between them ([`cal::EXCHANGE_BYTE`]: sending,
/// receiving, aggregating what arrives; net of scanning and summing the same columns).
async fn join_costs(
    cluster: &Arc<adisk_host::Cluster>,
    tables: &[String],
    runs: usize,
    (stage, job_host): (f64, f64),
    put: &mut Put<'_>,
) -> Result<(), CliError> {
    use adisk_host::sql::{Offload, SqlEngine, SqlOptions};
    if !["lineitem", "orders", "part"]
        .iter()
        .all(|t| tables.iter().any(|n| n == t))
    {
        println!(
            "  (no TPC-H lineitem, orders and part: the joins' end-to-end costs are not measured)"
        );
        return Ok(());
    }
    let engine = |offload| {
        let options = SqlOptions {
            offload,
            ..Default::default()
        };
        SqlEngine::new(cluster.clone(), options)
    };
    let (semi, disks) = (
        engine(Offload::Semijoin).await?,
        engine(Offload::Disks).await?,
    );
    let stats = |o: &adisk_host::sql::QueryOutput| -> (f64, f64, f64, f64, f64) {
        let st: Vec<_> = o.scans.iter().filter_map(|s| s.stats.as_ref()).collect();
        let cpu = st.iter().map(|s| s.process_cpu_ns as f64).sum::<f64>();
        let d2d = st.iter().map(|s| s.bytes_shipped_disks as f64).sum::<f64>();
        let got = o.scans.iter().map(|s| s.bytes_received as f64).sum::<f64>();
        (cpu, d2d, got, o.host_cpu_ns as f64, st.len() as f64)
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    // The exchange: a group-by whose partial aggregation hardly reduces the rows (each part
    // and supplier pair is a few line items) repartitions them between the disks; net of the
    // same columns scanned and summed where they lie.
    let alone = "SELECT sum(l_partkey), sum(l_suppkey), sum(l_quantity) FROM lineitem";
    let base = median(
        runs_of(&disks, alone, runs)
            .await?
            .iter()
            .map(|o| stats(o).0)
            .collect(),
    );
    let host_join = "SELECT o_orderpriority, count(*), sum(l_extendedprice) FROM lineitem JOIN orders ON l_orderkey = o_orderkey WHERE l_quantity < 25 GROUP BY o_orderpriority";
    let mut host = Vec::new();
    for o in runs_of(&semi, host_join, runs).await? {
        let (_, _, got, hcpu, jobs) = stats(&o);
        if got > 0.0 {
            host.push((hcpu - jobs * job_host) / got);
        }
    }
    let exchanged = "SELECT l_partkey, l_suppkey, count(*), sum(l_quantity) FROM lineitem GROUP BY l_partkey, l_suppkey";
    let mut exchange = Vec::new();
    for o in runs_of(&disks, exchanged, runs).await? {
        let (cpu, d2d, _, _, jobs) = stats(&o);
        if d2d > 0.0 {
            exchange.push((cpu - base - jobs * stage).max(0.0) / d2d);
        }
    }
    if !host.is_empty() {
        let how = format!("`{host_join}` at semijoin, net of the jobs' share");
        put(
            cal::HOST_BYTE,
            median(host).max(1e-3),
            "byte received, at the host",
            how,
        );
    }
    if !exchange.is_empty() {
        let how = format!("`{exchanged}` at disks, net of `{alone}` and the jobs' share");
        put(
            cal::EXCHANGE_BYTE,
            median(exchange).max(1e-3),
            "byte exchanged, at the disks",
            how,
        );
    }
    Ok(())
}

/// The names of the cluster's tables.
async fn catalog_tables(cluster: &adisk_host::Cluster) -> Result<Vec<String>, CliError> {
    Ok(cluster.catalog().await?.tables.keys().cloned().collect())
}

/// Rows of the largest table the transport is measured with.
const TRANSPORT_ROWS: u64 = 500_000;

/// `runs` runs of `sql` after a warm-up.
async fn runs_of(
    engine: &adisk_host::sql::SqlEngine,
    sql: &str,
    runs: usize,
) -> Result<Vec<adisk_host::sql::QueryOutput>, CliError> {
    engine.query(sql).await?;
    let mut outs = Vec::with_capacity(runs);
    for _ in 0..runs {
        outs.push(engine.query(sql).await?);
    }
    Ok(outs)
}

/// The loaded tables with the fewest and the most bytes.
async fn tables_by_size(
    cluster: &adisk_host::Cluster,
) -> Result<Option<(String, String)>, CliError> {
    let catalog = cluster.catalog().await?;
    let by_size = |(_, t): &(&String, &adisk_host::TableEntry)| t.bytes();
    let smallest = catalog.tables.iter().min_by_key(by_size);
    let largest = catalog.tables.iter().max_by_key(by_size);
    Ok(smallest
        .zip(largest)
        .map(|((s, _), (l, _))| (s.clone(), l.clone())))
}

/// Bytes of `names`' columns in `batches` (those it has).
fn column_bytes(batches: &[RecordBatch], names: &[&str]) -> f64 {
    batches
        .iter()
        .flat_map(|b| {
            names
                .iter()
                .filter_map(|n| b.column_by_name(n))
                .map(|c| c.get_array_memory_size())
                .collect::<Vec<_>>()
        })
        .sum::<usize>() as f64
}

/// The disks' Bloom-filter probe and hash partitioning on one key column, per row.
fn hash_costs(d: &Data, put: &mut Put) -> Result<(), CliError> {
    use adisk_core::bloom::BloomFilter;
    use adisk_core::hash::hash_columns;
    let key = |b: &RecordBatch| b.column_by_name("l_orderkey").cloned();
    let keys: Vec<_> = d.lineitem.iter().filter_map(key).collect();
    let rows = Data::rows(&d.lineitem);
    let mut filter = BloomFilter::with_size(64 << 10, 0);
    for o in &d.orders {
        let hashes = hash_columns(&[o.column(0).clone()], o.num_rows())
            .map_err(|e| CliError::Other(e.to_string()))?;
        hashes.iter().step_by(8).for_each(|h| filter.insert(*h));
    }
    // A scan ships a few of its columns: the probe filters those.
    let projected: Vec<RecordBatch> = d
        .lineitem
        .iter()
        .filter_map(|b| {
            let names = ["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"];
            let idx: Vec<usize> = names
                .iter()
                .filter_map(|n| b.schema().index_of(n).ok())
                .collect();
            b.project(&idx).ok()
        })
        .collect();
    let bloom = cpu_ns(d.repeats, || {
        let mut kept = 0;
        for (k, b) in keys.iter().zip(&projected) {
            let Ok(h) = hash_columns(std::slice::from_ref(k), k.len()) else {
                continue;
            };
            let mask = arrow::array::BooleanArray::new(filter.probe(&h), None);
            kept += arrow::compute::filter_record_batch(b, &mask).map_or(0, |r| r.num_rows());
        }
        kept
    });
    put(
        cal::BLOOM_PROBE,
        bloom / rows,
        "row",
        "hash l_orderkey, probe a 64 KiB filter, keep the rows that pass (4 columns)".into(),
    );
    filter_ship_cost(&filter, d.repeats, put)?;
    let part = cpu_ns(d.repeats, || {
        let mut moved = 0;
        for (k, b) in keys.iter().zip(&d.lineitem) {
            let Ok(h) = hash_columns(std::slice::from_ref(k), k.len()) else {
                continue;
            };
            let mut parts: [Vec<u32>; 4] = Default::default();
            for (i, h) in h.iter().enumerate() {
                parts[(h % 4) as usize].push(i as u32);
            }
            for p in parts {
                let idx = arrow::array::UInt32Array::from(p);
                moved += arrow::compute::take_record_batch(b, &idx).map_or(0, |r| r.num_rows());
            }
        }
        moved
    });
    put(
        cal::PARTITION,
        part / rows,
        "row",
        "hash l_orderkey and split lineitem's rows 4 ways".into(),
    );
    Ok(())
}

/// Shipping a 1 MiB Bloom filter (at semijoin's default size) in a job spec: its JSON made at
/// the host, parsed at a disk, per byte of filter.
fn filter_ship_cost(
    filter: &adisk_core::bloom::BloomFilter,
    repeats: usize,
    put: &mut Put,
) -> Result<(), CliError> {
    let mut big = adisk_core::bloom::BloomFilter::with_size(1 << 20, 0);
    for (i, w) in filter.words.iter().enumerate() {
        big.insert(w.wrapping_mul(i as u64 | 1));
    }
    let bytes = big.size_bytes() as f64;
    let err = |e: serde_json::Error| CliError::Other(format!("calibrate filter: {e}"));
    let json = serde_json::to_vec(&big).map_err(err)?;
    let encode = cpu_ns(repeats, || {
        serde_json::to_vec(&big.clone()).map(|v| v.len())
    });
    let decode = cpu_ns(repeats, || {
        serde_json::from_slice::<adisk_core::bloom::BloomFilter>(&json).map(|f| f.words.len())
    });
    put(
        cal::FILTER_SHIP,
        (encode + decode) / bytes,
        "byte of filter shipped",
        "a 1 MiB filter's JSON written and read".into(),
    );
    Ok(())
}

/// A memory-to-memory copy of lineitem's size, per byte.
fn copy_cost(d: &Data, put: &mut Put) {
    let bytes = Data::bytes(&d.lineitem).max(1.0) as usize;
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let ns = cpu_ns(d.repeats, || {
        dst.copy_from_slice(std::hint::black_box(&src));
        dst[bytes / 2]
    });
    put(
        cal::COPY,
        ns / bytes as f64,
        "byte",
        "copy_from_slice of lineitem's size".into(),
    );
}

/// The simulator's named costs this calibration measured the same operation for, in cycles of
/// `clock_ghz`; the rest keep the papers' values.
fn sim_costs(costs: &BTreeMap<String, Cost>, clock_ghz: f64) -> BTreeMap<String, f64> {
    let pairs = [
        (cal::SCAN, "select_cycles_per_byte"),
        (cal::SCAN, "scan_sum_cycles_per_byte"),
        (cal::HASH_BUILD, "hash_build_cycles_per_tuple"),
        (cal::HASH_PROBE, "hash_probe_cycles_per_tuple"),
        (cal::HASH_GROUP, "hash_group_cycles_per_tuple"),
        (cal::AGGREGATE, "agg_cycles_per_tuple"),
        (cal::SORT_COMPARE, "sort_compare_cycles"),
        (cal::PARTITION, "partition_cycles_per_tuple"),
        (cal::COPY, "copy_cycles_per_byte"),
    ];
    pairs
        .iter()
        .filter_map(|(ours, sim)| {
            let c = costs.get(*ours)?;
            debug_assert!(adisk_sim::costs::COSTS.iter().any(|(n, _, _)| n == sim));
            Some((sim.to_string(), c.ns * clock_ghz))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_simulator_cost_named_exists_and_is_scaled_by_the_clock() {
        let mut costs = BTreeMap::new();
        for name in [cal::SCAN, cal::HASH_BUILD, cal::COPY] {
            let how = String::new();
            costs.insert(
                name.to_string(),
                Cost {
                    ns: 2.0,
                    per: String::new(),
                    how,
                },
            );
        }
        let sim = sim_costs(&costs, 3.0);
        assert_eq!(sim.get("select_cycles_per_byte"), Some(&6.0));
        assert_eq!(sim.get("copy_cycles_per_byte"), Some(&6.0));
        assert!(
            !sim.contains_key("hash_probe_cycles_per_tuple"),
            "not measured"
        );
        for name in sim.keys() {
            assert!(
                adisk_sim::costs::COSTS.iter().any(|(n, _, _)| n == name),
                "{name}"
            );
        }
    }
}
