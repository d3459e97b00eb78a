//! `conv`: image convolution at the disks (acharya §4, Figure 1; uysal §5).
//!
//! ```text
//!  active        every disk, waves of k image files (each input buffer = exactly one image)
//!                ─► conv.convolve (in place, one-image scratch) ─► named result OUT (image, pixels)
//!  conventional  every disk ─► the raw images ─► host convolves ─► load OUT back to the disks
//!  check         every disk: OUT ─► conv.check (regenerated input, plain reference) ─► host
//! ```
//!
//! The input is `adisk load images` (deterministic grayscale images as files at the disks).
pub mod disklets;
pub mod kernel;

use crate::report::{Phase, Report};
use crate::{AppError, Mode, Result};
use adisk_core::builder::{JobBuilder, Sizes, store_result, table};
use adisk_core::protocol::{DiskletSpec, JobSpec, Sink, Source};
use adisk_core::stats::DiskJobStats;
use adisk_host::Cluster;
use adisk_host::jobs::run_phase;
use arrow::array::{Array, BinaryArray, RecordBatch, UInt32Array, UInt64Array};
use kernel::Kernel;
use std::collections::BTreeMap;
use std::time::Instant;

/// Parameters of a convolution run.
#[derive(Clone, Debug)]
pub struct ConvParams {
    /// Directory of the images under the disks' `files/`.
    pub images: String,
    /// Image side, pixels.
    pub side: u32,
    /// The kernel.
    pub kernel: Kernel,
    /// Output table.
    pub output: String,
    /// Active or conventional.
    pub mode: Mode,
}

const PROGRAM: &str = "app-conv";

/// Image files most one job reads.
const MAX_IMAGES_PER_JOB: usize = 64;

fn stage_params(params: &ConvParams, images: &[u32], apply: bool) -> serde_json::Value {
    serde_json::json!({
        "side": params.side,
        "weights": params.kernel.weights,
        "divisor": params.kernel.divisor,
        "images": images,
        "convolve": apply,
    })
}

/// The image files of every disk: (image number, path), by disk.
async fn image_files(
    cluster: &Cluster,
    params: &ConvParams,
) -> Result<BTreeMap<u32, Vec<(u32, String)>>> {
    let files = adisk_host::disklet::list_files(cluster, &params.images).await?;
    if files.is_empty() {
        return Err(AppError::InputMissing {
            table: format!("files/{}", params.images),
            hint: "adisk load images --count N --side S".into(),
        });
    }
    let whole = u64::from(params.side) * u64::from(params.side);
    let mut by_disk: BTreeMap<u32, Vec<(u32, String)>> = BTreeMap::new();
    for (d, f) in files {
        if f.bytes != whole {
            return Err(AppError::Invalid(format!(
                "{} has {} bytes, not {}×{} pixels (--side)",
                f.path, f.bytes, params.side, params.side
            )));
        }
        let number = f
            .path
            .rsplit_once("img-")
            .and_then(|(_, n)| n.strip_suffix(".gray"))
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| {
                AppError::Invalid(format!("{} is not an image file (img-N.gray)", f.path))
            })?;
        by_disk.entry(d).or_default().push((number, f.path));
    }
    Ok(by_disk)
}

/// Waves of jobs: the w-th job of every disk reads its w-th group of at most `per_job` images.
fn waves(
    by_disk: &BTreeMap<u32, Vec<(u32, String)>>,
    per_job: usize,
) -> Vec<Vec<(u32, Vec<(u32, String)>)>> {
    let most = by_disk
        .values()
        .map(|v| v.len().div_ceil(per_job))
        .max()
        .unwrap_or(0);
    (0..most)
        .map(|w| {
            by_disk
                .iter()
                .filter_map(|(d, files)| {
                    let chunk: Vec<_> = files
                        .iter()
                        .skip(w * per_job)
                        .take(per_job)
                        .cloned()
                        .collect();
                    (!chunk.is_empty()).then_some((*d, chunk))
                })
                .collect()
        })
        .collect()
}

/// A job reading `files` (each input buffer one whole image) into `conv.convolve`; its output to `sink`.
fn convolve_job(
    params: &ConvParams,
    files: &[(u32, String)],
    apply: bool,
    sink: Sink,
) -> Result<JobSpec> {
    let images: Vec<u32> = files.iter().map(|(n, _)| *n).collect();
    let image_bytes = u64::from(params.side) * u64::from(params.side);
    let mut job = JobBuilder::new("conv").program(PROGRAM);
    let inputs = files
        .iter()
        .map(|(_, p)| {
            job.input(Source::File {
                path: p.clone(),
                offset: 0,
                length: None,
            })
        })
        .collect();
    let convolve = DiskletSpec::App {
        app: "conv".into(),
        name: "convolve".into(),
        params: stage_params(params, &images, apply),
        inputs: files.len() as u32,
        ports: 1,
    };
    let convolved = job.stage(convolve, inputs);
    job.output(convolved, sink);
    let sizes = Sizes {
        scratch_kib: image_bytes.div_ceil(1024),
        buffer_kib: image_bytes / 1024,
        temp_kib: 0,
    };
    Ok(job.sizes(sizes).build()?)
}

/// Images per job: as many as a quarter of the smallest disk's memory holds at four buffers
/// of one image each.
async fn images_per_job(cluster: &Cluster, params: &ConvParams, disks: &[u32]) -> Result<usize> {
    let memory = crate::sort::smallest_memory(cluster, disks).await?;
    let image = u64::from(params.side) * u64::from(params.side);
    let per_job = (memory / 4 / (image * 4)) as usize;
    if per_job == 0 {
        return Err(AppError::Invalid(format!(
            "an image of {image} bytes needs 16 times that in a disk's memory of {memory} bytes"
        )));
    }
    Ok(per_job.min(MAX_IMAGES_PER_JOB))
}

/// Runs the convolution, then checks every stored image against the plain reference.
///
/// # Errors
/// Missing images, a side that is not one whole stream buffer (side² a multiple of 1 KiB,
/// at least 16 KiB), a disk failing.
pub async fn run(cluster: &Cluster, params: &ConvParams) -> Result<Report> {
    adisk_storage::store::validate_table_name(&params.output)
        .map_err(adisk_host::HostError::from)?;
    let image = u64::from(params.side) * u64::from(params.side);
    if image % 1024 != 0 || !(16 * 1024..=16 << 20).contains(&image) {
        return Err(AppError::Invalid(format!(
            "an image is one stream buffer: side² must be a multiple of 1024 bytes between 16 KiB and 16 MiB (side {} gives {image})",
            params.side
        )));
    }
    let by_disk = image_files(cluster, params).await?;
    let disks: Vec<u32> = by_disk.keys().copied().collect();
    let per_job = images_per_job(cluster, params, &disks).await?;
    let mut report = Report {
        app: "conv".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let _ = cluster.drop_table(&params.output).await;
    let started = Instant::now();
    let outcome = match params.mode {
        Mode::Active => active(cluster, params, &by_disk, per_job, &mut report).await,
        Mode::Conventional => conventional(cluster, params, &by_disk, per_job, &mut report).await,
    };
    if let Err(e) = outcome {
        let _ = cluster.drop_table(&params.output).await;
        return Err(e);
    }
    report.seconds = started.elapsed().as_secs_f64();
    let expected: usize = by_disk.values().map(Vec::len).sum();
    let (images, mismatched) = check(cluster, params).await?;
    report.result = serde_json::json!({
        "valid": images == expected as u64 && mismatched == 0,
        "images": images,
        "expected_images": expected,
        "mismatched": mismatched,
        "k": params.kernel.k,
        "output": params.output,
    });
    Ok(report)
}

async fn active(
    cluster: &Cluster,
    params: &ConvParams,
    by_disk: &BTreeMap<u32, Vec<(u32, String)>>,
    per_job: usize,
    report: &mut Report,
) -> Result<()> {
    let t = Instant::now();
    let mut stats = Vec::new();
    for (w, wave) in waves(by_disk, per_job).into_iter().enumerate() {
        let specs = wave
            .iter()
            .map(|(d, files)| {
                let sink = store_result(params.output.clone(), d * 65_536 + w as u32);
                Ok((*d, convolve_job(params, files, true, sink)?))
            })
            .collect::<Result<Vec<_>>>()?;
        stats.extend(run_phase(cluster, specs, |_, _| Ok(())).await?);
    }
    report.phase("convolve at the disks", t.elapsed(), merge_by_disk(stats));
    Ok(())
}

/// One statistics entry per disk (the sum of its jobs; grants and peaks: the largest).
fn merge_by_disk(stats: Vec<DiskJobStats>) -> Vec<DiskJobStats> {
    let mut by: BTreeMap<u32, DiskJobStats> = BTreeMap::new();
    for s in stats {
        let t = by.entry(s.disk_id).or_insert_with(|| DiskJobStats {
            disk_id: s.disk_id,
            job_id: s.job_id.clone(),
            ..Default::default()
        });
        t.bytes_read += s.bytes_read;
        t.bytes_skipped += s.bytes_skipped;
        t.rows_read += s.rows_read;
        t.bytes_scanned += s.bytes_scanned;
        t.rows_shipped += s.rows_shipped;
        t.bytes_shipped_host += s.bytes_shipped_host;
        t.bytes_shipped_disks += s.bytes_shipped_disks;
        t.bytes_written += s.bytes_written;
        t.cpu_ns += s.cpu_ns;
        t.process_cpu_ns += s.process_cpu_ns;
        t.wall_ns += s.wall_ns;
        t.memory_granted_bytes = t.memory_granted_bytes.max(s.memory_granted_bytes);
        t.memory_peak_bytes = t.memory_peak_bytes.max(s.memory_peak_bytes);
        t.temp_granted_bytes = t.temp_granted_bytes.max(s.temp_granted_bytes);
        t.temp_peak_bytes = t.temp_peak_bytes.max(s.temp_peak_bytes);
        if t.stages.is_empty() {
            t.stages = s.stages;
        }
    }
    by.into_values().collect()
}

async fn conventional(
    cluster: &Cluster,
    params: &ConvParams,
    by_disk: &BTreeMap<u32, Vec<(u32, String)>>,
    per_job: usize,
    report: &mut Report,
) -> Result<()> {
    let (mut read, mut compute, mut write) = (0.0, 0.0, 0.0);
    let mut stats = Vec::new();
    let side = params.side as usize;
    let mut sent = 0u64;
    let mut per_disk: BTreeMap<u32, Vec<RecordBatch>> = BTreeMap::new();
    for wave in waves(by_disk, per_job) {
        let t = Instant::now();
        let specs = wave
            .iter()
            .map(|(d, files)| Ok((*d, convolve_job(params, files, false, Sink::Host)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut raw: Vec<(u32, RecordBatch)> = Vec::new();
        stats.extend(
            run_phase(cluster, specs, |d, b| {
                raw.push((d, b));
                Ok(())
            })
            .await?,
        );
        read += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut out = Vec::new();
        for (d, b) in raw {
            let images = b
                .column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .ok_or_else(|| AppError::Invalid("conv: raw images".into()))?;
            let pixels = b
                .column(1)
                .as_any()
                .downcast_ref::<BinaryArray>()
                .ok_or_else(|| AppError::Invalid("conv: raw images".into()))?;
            for i in 0..b.num_rows() {
                kernel::convolve_into(pixels.value(i), side, &params.kernel, &mut out);
                let row = RecordBatch::try_new(
                    disklets::image_schema(),
                    vec![
                        std::sync::Arc::new(UInt32Array::from(vec![images.value(i)])),
                        std::sync::Arc::new(BinaryArray::from_vec(vec![out.as_slice()])),
                    ],
                )
                .map_err(|e| AppError::Invalid(e.to_string()))?;
                sent += out.len() as u64;
                per_disk.entry(d).or_default().push(row);
            }
        }
        compute += t.elapsed().as_secs_f64();
    }
    let t = Instant::now();
    write_back(cluster, params, per_disk).await?;
    write += t.elapsed().as_secs_f64();
    report.phase(
        "read images at host",
        std::time::Duration::from_secs_f64(read),
        merge_by_disk(stats),
    );
    report.phases.push(Phase {
        name: "convolve at host".into(),
        seconds: compute,
        ..Default::default()
    });
    report.phases.push(Phase {
        name: "write back".into(),
        seconds: write,
        disks: Vec::new(),
        host_sent_bytes: sent,
    });
    Ok(())
}

/// Writes the host's convolved images back to the disks they came from (one load).
async fn write_back(
    cluster: &Cluster,
    params: &ConvParams,
    mut per_disk: BTreeMap<u32, Vec<RecordBatch>>,
) -> Result<()> {
    let table = params.output.clone();
    let generators = (0..cluster.disk_count())
        .map(|d| {
            let batches = per_disk.remove(&d).unwrap_or_default();
            Box::new(move |_| {
                Box::new(batches.into_iter().map(Ok))
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(
        cluster,
        &table,
        disklets::image_schema(),
        generators,
        |_| {},
    )
    .await?;
    Ok(())
}

/// Every stored image against the plain reference of its regenerated input: (images, mismatched).
async fn check(cluster: &Cluster, params: &ConvParams) -> Result<(u64, u64)> {
    let catalog = cluster.catalog().await?;
    let tables: Vec<&adisk_host::TableEntry> =
        catalog.tables.get(&params.output).into_iter().collect();
    let mut specs = Vec::new();
    for t in tables {
        for d in t.disks() {
            let stage = DiskletSpec::App {
                app: "conv".into(),
                name: "check".into(),
                params: stage_params(params, &[], true),
                inputs: 1,
                ports: 1,
            };
            let source = table(t.name.clone(), vec![]);
            let spec = JobBuilder::chain("conv-check", source, vec![stage], Sink::Host)
                .program(PROGRAM)
                .build()?;
            specs.push((d, spec));
        }
    }
    let (mut images, mut mismatched) = (0u64, 0u64);
    run_phase(cluster, specs, |_, b| {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .map(|a| a.values().iter().sum::<u64>())
                .unwrap_or(0)
        };
        images += col(0);
        mismatched += col(1);
        Ok(())
    })
    .await?;
    Ok((images, mismatched))
}
