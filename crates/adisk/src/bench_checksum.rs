//! `adisk bench checksum`: what verifying every read costs. One lineitem partition is written
//! to a scratch store, then every column of it is decoded with verification (footer + page
//! index and every column chunk checked against the manifest's CRC-32s as they are read) and
//! without, alternating, medians of the repeats; the cost is reported per GB read.
use crate::common::CliError;
use adisk_storage::store::DiskStore;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// `adisk bench checksum` arguments.
#[derive(clap::Args, Debug)]
pub struct ChecksumBenchArgs {
    /// Scale factor of the lineitem partition.
    #[arg(long, default_value_t = 0.2)]
    pub sf: f64,
    /// Repeats of each side (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
}

fn write_lineitem(
    store: &DiskStore,
    sf: f64,
) -> Result<adisk_core::protocol::PartitionInfo, CliError> {
    let schema = adisk_storage::tpch::schema("lineitem")?;
    let mut writer = store.create_partition(
        "lineitem",
        0,
        schema,
        adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS,
    )?;
    for batch in adisk_storage::tpch::generate("lineitem", sf, 1, 1)? {
        writer.write(&batch.map_err(|e| CliError::Other(format!("generating lineitem: {e}")))?)?;
    }
    Ok(store.commit_partition(writer)?)
}

/// One decode of the whole partition: (ms, bytes read).
fn pass(
    store: &DiskStore,
    info: &adisk_core::protocol::PartitionInfo,
    verify: bool,
) -> Result<(f64, u64), CliError> {
    let read = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let reader = if verify {
        store.partition_reader(info, read.clone())?
    } else {
        store.partition_reader_unverified(info, read.clone())?
    };
    adisk_storage::integrity::decode_all(&reader)?;
    Ok((
        start.elapsed().as_secs_f64() * 1e3,
        read.load(Ordering::Relaxed),
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the benchmark in a scratch directory under `dir`.
pub async fn run(dir: &Path, a: ChecksumBenchArgs) -> Result<(), CliError> {
    let scratch = dir.join("bench-checksum");
    let _ = std::fs::remove_dir_all(&scratch);
    let store = DiskStore::open(&scratch, 0)?;
    let info = write_lineitem(&store, a.sf)?;
    pass(&store, &info, true)?; // warm the page cache (and the first-open check)
    let (mut on, mut off, mut bytes) = (Vec::new(), Vec::new(), (0, 0));
    for _ in 0..a.repeats.max(1) {
        let (ms, b) = pass(&store, &info, true)?;
        on.push(ms);
        bytes.0 = b;
        let (ms, b) = pass(&store, &info, false)?;
        off.push(ms);
        bytes.1 = b;
    }
    let (on, off) = (median(on), median(off));
    let gb = bytes.0 as f64 / 1e9;
    println!(
        "lineitem SF {}: {} rows, {:.1} MB file, every column decoded, median of {}",
        a.sf,
        info.rows,
        info.bytes as f64 / 1e6,
        a.repeats.max(1)
    );
    println!(
        "{:<14} {:>10} {:>12} {:>10}",
        "verification", "ms", "MB read", "GB/s"
    );
    println!(
        "{:<14} {:>10.1} {:>12.1} {:>10.2}",
        "on",
        on,
        bytes.0 as f64 / 1e6,
        gb / (on / 1e3)
    );
    println!(
        "{:<14} {:>10.1} {:>12.1} {:>10.2}",
        "off",
        off,
        bytes.1 as f64 / 1e6,
        bytes.1 as f64 / 1e9 / (off / 1e3)
    );
    println!(
        "cost: {:.1} ms per GB read ({:+.1} %)",
        (on - off) / gb,
        (on / off - 1.0) * 100.0
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
