//! `adisk bench exchange`: disk-to-disk stream rates (issue 10).
//!
//! A local cluster of `disks` disk processes and `lineitem` at the given scale factor. Measured
//! in one run, each the median of `repeats`:
//!
//! * the loopback Flight `DoPut` rate: the same columns (fetched once from disk 0) sent from
//!   this process to a discarding Flight server in this process over a link set up as the
//!   members' are — the transport's ceiling — in plaintext and, when the cluster's links use
//!   TLS, over TLS with the cluster's material; the exchanges are compared with the one of
//!   their own kind (TLS with TLS) and with plaintext;
//! * a pair: disk 0 sends its partitions to disk 1, which counts them;
//! * all-to-all: every disk hash-routes its partitions to every disk, each counting what came;
//! * each of the two straight between disks and through the host's relay (`via-host`).
//!
//! MB/s is Arrow IPC bytes shipped by the senders ÷ wall time at the host (10^6 bytes).
use crate::common::CliError;
use crate::local::{OnOff, UpArgs, down, up};
use adisk_core::config::ExchangeMode;
use adisk_host::Cluster;
use adisk_host::exchange::{ExchangeRun, Pattern};
use std::path::Path;

/// `adisk bench exchange` arguments.
#[derive(clap::Args, Debug)]
pub struct ExchangeBenchArgs {
    /// Scale factor of `lineitem`.
    #[arg(long, default_value_t = 0.2)]
    pub sf: f64,
    /// Disks (at least 2).
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Repeats per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Columns exchanged.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "l_orderkey,l_partkey,l_suppkey,l_extendedprice,l_shipdate,l_comment"
    )]
    pub columns: Vec<String>,
    /// TLS on the cluster's links (`on`, as `adisk up`), or `off` to measure what it costs.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub tls: OnOff,
    /// Only the pair straight between disks, after the loopback rates (a quick run, or one
    /// to profile): no scan alone, no all-to-all, nothing through the host.
    #[arg(long)]
    pub pair_only: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn exchange_mb_s(
    cluster: &Cluster,
    columns: &[String],
    pattern: Pattern,
    repeats: usize,
) -> Result<(f64, ExchangeRun), CliError> {
    let mut rates = Vec::with_capacity(repeats);
    let mut last = ExchangeRun::default();
    for _ in 0..repeats {
        last = adisk_host::exchange::run(cluster, "lineitem", columns, pattern).await?;
        rates.push(last.mb_per_s());
    }
    Ok((median(rates), last))
}

/// The loopback DoPut rates on the columns of disk 0's partitions, MB/s (medians): in
/// plaintext, and over TLS with the cluster's material if its links use TLS.
async fn loopback_mb_s(
    cluster: &Cluster,
    columns: &[String],
    repeats: usize,
) -> Result<(f64, Option<f64>), CliError> {
    use futures::StreamExt;
    let source = adisk_core::protocol::Source::Table {
        table: "lineitem".into(),
        columns: columns.to_vec(),
        prune: None,
        partitions: None,
    };
    let spec = adisk_core::builder::JobBuilder::chain(
        "bench-exchange-fetch",
        source,
        vec![],
        adisk_core::protocol::Sink::Host,
    )
    .program("bench")
    .build()
    .map_err(adisk_host::HostError::from)?;
    let mut stream = cluster.start(0, &spec).await?;
    let mut batches = Vec::new();
    while let Some(b) = stream.next().await {
        batches.push(b?);
    }
    let schema = batches
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| CliError::Other("disk 0 holds no lineitem rows".into()))?;
    let mut plain = Vec::with_capacity(repeats);
    let mut tls = Vec::with_capacity(repeats);
    // Interleaved, so both see the same noise.
    for _ in 0..repeats {
        let material = cluster.tls();
        for (on, rates) in [(false, &mut plain), (true, &mut tls)] {
            if on && material.is_none() {
                continue;
            }
            let material = if on { material } else { None };
            let (bytes, ns) =
                adisk_host::exchange::loopback_doput(schema.clone(), batches.clone(), 1, material)
                    .await?;
            rates.push(bytes as f64 / 1e6 / (ns.max(1) as f64 / 1e9));
        }
    }
    Ok((median(plain), (!tls.is_empty()).then(|| median(tls))))
}

pub async fn run(dir: &Path, a: ExchangeBenchArgs) -> Result<(), CliError> {
    if a.disks < 2 {
        return Err(CliError::Other("an exchange needs at least 2 disks".into()));
    }
    let cdir = dir.join(format!("bench-exchange-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: 128,
        tls: a.tls,
        ..UpArgs::local(a.disks)
    };
    up(&cdir, &args).await?;
    let result = measure(&cdir, &a).await;
    down(&cdir).await?;
    result
}

async fn measure(cdir: &Path, a: &ExchangeBenchArgs) -> Result<(), CliError> {
    let cluster = crate::common::connect(cdir).await?;
    let rows = cluster
        .catalog()
        .await?
        .tables
        .get("lineitem")
        .map(|t| t.rows())
        .unwrap_or(0);
    if rows < adisk_storage::tpch::approx_rows("lineitem", a.sf) * 99 / 100 {
        let load = adisk_host::load::TpchLoad {
            sf: a.sf,
            partitions_per_disk: 1,
            row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
            tables: vec!["lineitem".into()],
            replicas: 1,
            disks: vec![],
        };
        crate::output::load_tpch(&cluster, &load).await?;
    }
    let repeats = a.repeats.max(1);
    adisk_host::exchange::run(
        &cluster,
        "lineitem",
        &a.columns,
        Pattern::Pair { from: 0, to: 1 },
    )
    .await?; // warm-up
    let (plain, tls) = loopback_mb_s(&cluster, &a.columns, repeats).await?;
    // The exchanges' own kind of link: TLS if the cluster's links use it.
    let raw = tls.unwrap_or(plain);
    println!(
        "adisk bench exchange: TPC-H SF {} lineitem ({}), {} disks, median of {repeats}",
        a.sf,
        a.columns.join(", "),
        a.disks
    );
    println!(
        "{:<28} {:>10} {:>12} {:>10} {:>12} {:>9}",
        "stream", "MB/s", "shipped_MB", "rows", "vs_loopback", "vs_plain"
    );
    let line = |name: &str, rate: f64, shipped: String, rows: String| {
        println!(
            "{name:<28} {rate:>10.1} {shipped:>12} {rows:>10} {:>11.0}% {:>8.0}%",
            100.0 * rate / raw,
            100.0 * rate / plain
        );
    };
    line("loopback DoPut, plaintext", plain, "-".into(), "-".into());
    if let Some(tls) = tls {
        line("loopback DoPut, TLS", tls, "-".into(), "-".into());
    }
    if a.pair_only {
        let pair = Pattern::Pair { from: 0, to: 1 };
        let (rate, run) = exchange_mb_s(&cluster, &a.columns, pair, repeats).await?;
        let shipped = format!("{:.1}", run.bytes as f64 / 1e6);
        line("pair 0->1, direct", rate, shipped, run.rows.to_string());
        return Ok(());
    }
    let mut scans = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let (bytes, ns) =
            adisk_host::exchange::scan_only(&cluster, "lineitem", &a.columns, 0).await?;
        scans.push(bytes as f64 / 1e6 / (ns.max(1) as f64 / 1e9));
    }
    let scan = median(scans);
    line("scan + count at disk 0", scan, "-".into(), "-".into());
    for mode in [ExchangeMode::Direct, ExchangeMode::ViaHost] {
        cluster.set_exchange_mode(mode);
        for (name, pattern) in [
            ("pair 0->1", Pattern::Pair { from: 0, to: 1 }),
            ("all-to-all", Pattern::AllToAll),
        ] {
            let (rate, run) = exchange_mb_s(&cluster, &a.columns, pattern, repeats).await?;
            line(
                &format!("{name}, {mode}"),
                rate,
                format!("{:.1}", run.bytes as f64 / 1e6),
                run.rows.to_string(),
            );
        }
    }
    println!(
        "MB/s: Arrow IPC bytes the senders shipped / wall time at the host, including the senders' scans and the receivers' counts."
    );
    println!(
        "vs_loopback: against one DoPut stream from this process to a discarding server in this process (no disk, no decoding) over the same kind of link as the cluster's (TLS: {}); vs_plain: against the plaintext one.",
        if tls.is_some() { "on" } else { "off" }
    );
    println!("scan + count: the senders' side alone (Arrow bytes scanned / wall), no exchange.");
    Ok(())
}
