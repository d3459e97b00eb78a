//! User disklets from the host: install a WebAssembly module on every disk, list, remove, and
//! run one on a table, on several tables (ABI v2: table `i` is input `i`), or on plain files
//! (each file is one job on the disk holding it); and the deterministic images the convolution
//! example reads.
use crate::client::cluster::Cluster;
use crate::client::jobs::JobOutput;
use crate::{HostError, Result};
use adisk_core::builder::JobBuilder;
use adisk_core::protocol::{
    DiskletInfo, DiskletSpec, ExprBytes, FileInfo, GenerateImages, InstallDisklet, JobSpec, Sink,
    Source, action,
};
use adisk_core::stats::{DiskJobStats, JobStats};
use arrow::array::RecordBatch;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::time::Instant;

fn parse<T: serde::de::DeserializeOwned>(
    d: u32,
    what: &str,
    replies: Vec<bytes::Bytes>,
) -> Result<T> {
    let first = replies.first().ok_or_else(|| HostError::Disk {
        disk: d,
        code: "Internal".into(),
        message: format!("empty reply to {what}"),
    })?;
    serde_json::from_slice(first).map_err(|e| HostError::Disk {
        disk: d,
        code: "Internal".into(),
        message: format!("malformed reply to {what}: {e}"),
    })
}

/// Installs `module` as `name` on every disk; returns each disk's view of it.
///
/// # Errors
/// The first disk's refusal (malformed module, forbidden import, memory above the grant, …).
pub async fn install(
    cluster: &Cluster,
    name: &str,
    module: Vec<u8>,
    scratch_kib: u64,
) -> Result<Vec<(u32, DiskletInfo)>> {
    let body = serde_json::to_vec(&InstallDisklet {
        name: name.to_string(),
        scratch_kib,
        module: ExprBytes(module),
    })
    .expect("request serializes");
    let replies = futures::future::try_join_all((0..cluster.disk_count()).map(|d| {
        let body = body.clone();
        async move {
            parse::<DiskletInfo>(
                d,
                action::DISKLET_INSTALL,
                cluster.action(d, action::DISKLET_INSTALL, body).await?,
            )
            .map(|i| (d, i))
        }
    }))
    .await?;
    Ok(replies)
}

/// Installed disklets on every disk.
///
/// # Errors
/// Unreachable disks.
pub async fn list(cluster: &Cluster) -> Result<Vec<(u32, Vec<DiskletInfo>)>> {
    futures::future::try_join_all((0..cluster.disk_count()).map(|d| async move {
        parse(
            d,
            action::DISKLET_LIST,
            cluster.action(d, action::DISKLET_LIST, vec![]).await?,
        )
        .map(|v| (d, v))
    }))
    .await
}

/// Removes `name` from every disk; true if any disk had it.
///
/// # Errors
/// Unreachable disks.
pub async fn remove(cluster: &Cluster, name: &str) -> Result<bool> {
    let removed = futures::future::try_join_all((0..cluster.disk_count()).map(|d| async move {
        parse::<bool>(
            d,
            action::DISKLET_REMOVE,
            cluster
                .action(d, action::DISKLET_REMOVE, name.as_bytes().to_vec())
                .await?,
        )
    }))
    .await?;
    Ok(removed.into_iter().any(|r| r))
}

/// A user disklet job.
#[derive(Clone, Debug, Default)]
pub struct WasmRequest {
    /// Installed name.
    pub name: String,
    /// Parameters.
    pub params: BTreeMap<String, String>,
    /// Fuel budget per job (None: the disks' default).
    pub fuel: Option<u64>,
    /// Scratch KiB for the job's other stages (0: the disks' default).
    pub scratch_kib: u64,
}

/// One stage running the disklet over `inputs` (in order), its port 0 to the host.
fn spec(req: &WasmRequest, inputs: Vec<Source>) -> Result<JobSpec> {
    let mut job = JobBuilder::new("wasm").scratch_kib(req.scratch_kib);
    let ports = inputs.into_iter().map(|s| job.input(s)).collect();
    let disklet = DiskletSpec::Wasm {
        name: req.name.clone(),
        params: req.params.clone(),
        fuel: req.fuel,
    };
    let out = job.stage(disklet, ports);
    job.output(out, Sink::Host);
    Ok(job.build()?)
}

/// Notes on compile and instantiate time for the statistics.
pub fn setup_notes(stats: &mut JobStats) {
    let stages: Vec<_> = stats
        .disks
        .iter()
        .flat_map(|d| d.stages.iter())
        .filter(|s| s.disklet == "wasm")
        .collect();
    if stages.is_empty() {
        return;
    }
    let compile = stages.iter().map(|s| s.compile_ns).max().unwrap_or(0);
    let mut inst: Vec<u64> = stages.iter().map(|s| s.instantiate_ns).collect();
    inst.sort_unstable();
    stats.notes.insert(
        "wasm compile ms (max over disks; 0 = cached)".into(),
        format!("{:.3}", compile as f64 / 1e6),
    );
    stats.notes.insert(
        "wasm instantiate+init ms (median)".into(),
        format!("{:.3}", inst[inst.len() / 2] as f64 / 1e6),
    );
}

/// Runs `req` on every disk holding `table` (columns: empty = all) and gathers the rows.
///
/// # Errors
/// Unknown table or column, a disk's refusal or the disklet's failure (typed, per disk).
pub async fn run_table(
    cluster: &Cluster,
    req: &WasmRequest,
    table: &str,
    columns: &[String],
) -> Result<JobOutput> {
    run_tables(cluster, req, &[(table.to_string(), columns.to_vec())]).await
}

/// Runs `req` over several tables at once, `(table, columns)` each (columns: empty = all):
/// table `i` is the disklet's input `i` (an ABI v2 disklet declares how many it takes). One
/// job per disk, over that disk's partitions of every table; the tables must be on the same
/// disks. The output is each disk's rows in the order it emitted them, disk after disk.
///
/// # Errors
/// Unknown table or column, tables on different disks, a disk's refusal (a disklet taking
/// another number of inputs is refused before it runs) or the disklet's failure.
pub async fn run_tables(
    cluster: &Cluster,
    req: &WasmRequest,
    tables: &[(String, Vec<String>)],
) -> Result<JobOutput> {
    let started = Instant::now();
    let catalog = cluster.catalog().await?;
    let (mut sources, mut disks): (BTreeMap<u32, Vec<Source>>, Option<Vec<u32>>) =
        (BTreeMap::new(), None);
    let dead = cluster.dead_disks();
    for (table, columns) in tables {
        let entry = catalog.table(table)?;
        if let Some(c) = columns.iter().find(|c| entry.schema.index_of(c).is_err()) {
            return Err(HostError::Invalid(format!(
                "table `{table}` has no column `{c}`"
            )));
        }
        // Replicas: each disk reads only the partitions assigned to it among the live copies.
        let assigned = entry.assign(&dead)?;
        let held: Vec<u32> = assigned.iter().map(|(d, _)| *d).collect();
        if *disks.get_or_insert_with(|| held.clone()) != held {
            return Err(HostError::Invalid(format!(
                "tables `{}` and `{table}` are not on the same disks (a disklet over several tables runs where all of them are)",
                tables[0].0
            )));
        }
        for (d, partitions) in assigned {
            sources.entry(d).or_default().push(Source::Table {
                table: table.clone(),
                columns: columns.clone(),
                prune: None,
                partitions,
            });
        }
    }
    let specs = sources
        .into_iter()
        .map(|(d, sources)| Ok((d, spec(req, sources)?)))
        .collect::<Result<Vec<(u32, JobSpec)>>>()?;
    let mut per_disk: BTreeMap<u32, Vec<RecordBatch>> = BTreeMap::new();
    let disks = crate::client::jobs::run_phase(cluster, specs, |d, b| {
        per_disk.entry(d).or_default().push(b);
        Ok(())
    })
    .await?;
    let batches: Vec<RecordBatch> = per_disk.into_values().flatten().collect();
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(crate::client::cluster::empty_schema);
    let names: Vec<&str> = tables.iter().map(|(t, _)| t.as_str()).collect();
    let mut stats = JobStats {
        description: format!("wasm disklet `{}` on {}", req.name, names.join(", ")),
        disks,
        ..Default::default()
    };
    setup_notes(&mut stats);
    stats.wall_ns = started.elapsed().as_nanos() as u64;
    let out = JobOutput {
        schema,
        batches,
        stats,
    };
    let mut out = out;
    out.stats.result_rows = out.rows() as u64;
    Ok(out)
}

/// Output of a run over files: per file, the batches its job produced (in order).
pub struct FilesOutput {
    /// (disk, file, batches).
    pub files: Vec<(u32, String, Vec<RecordBatch>)>,
    /// Statistics (one entry per job).
    pub stats: JobStats,
}

/// Files under `prefix` on every disk.
///
/// # Errors
/// Unreachable disks, a prefix escaping `files/`.
pub async fn list_files(cluster: &Cluster, prefix: &str) -> Result<Vec<(u32, FileInfo)>> {
    let per_disk = futures::future::try_join_all((0..cluster.disk_count()).map(|d| async move {
        parse::<Vec<FileInfo>>(
            d,
            action::LIST_FILES,
            cluster
                .action(d, action::LIST_FILES, prefix.as_bytes().to_vec())
                .await?,
        )
        .map(|v| v.into_iter().map(move |f| (d, f)).collect::<Vec<_>>())
    }))
    .await?;
    Ok(per_disk.into_iter().flatten().collect())
}

/// Runs `req` once per file under `prefix` (a file or a directory under `files/`), on the disk
/// holding it; all jobs run at once (each disk admits them against its memory budget).
///
/// # Errors
/// No such files, a disk's refusal or the disklet's failure.
pub async fn run_files(cluster: &Cluster, req: &WasmRequest, prefix: &str) -> Result<FilesOutput> {
    let started = Instant::now();
    let files = list_files(cluster, prefix).await?;
    if files.is_empty() {
        return Err(HostError::Invalid(format!(
            "no files under `{prefix}` on any disk"
        )));
    }
    let specs = files
        .into_iter()
        .map(|(d, f)| {
            let file = Source::File {
                path: f.path.clone(),
                offset: 0,
                length: None,
            };
            Ok((d, f.path, spec(req, vec![file])?))
        })
        .collect::<Result<Vec<(u32, String, JobSpec)>>>()?;
    let streams =
        futures::future::try_join_all(specs.iter().enumerate().map(|(i, (d, _, s))| async move {
            cluster.start(*d, s).await.map(|st| st.map(move |r| (i, r)))
        }))
        .await?;
    let mut merged = futures::stream::select_all(streams);
    let mut outputs: Vec<Vec<RecordBatch>> = vec![Vec::new(); specs.len()];
    while let Some((i, item)) = merged.next().await {
        outputs[i].push(item?);
    }
    drop(merged);
    let disks: Vec<DiskJobStats> = futures::future::try_join_all(
        specs
            .iter()
            .map(|(d, _, s)| cluster.job_stats(*d, &s.job_id)),
    )
    .await?;
    let mut stats = JobStats {
        description: format!("wasm disklet `{}` on files under {prefix}", req.name),
        disks,
        ..Default::default()
    };
    setup_notes(&mut stats);
    stats.wall_ns = started.elapsed().as_nanos() as u64;
    stats.result_rows = outputs.iter().flatten().map(|b| b.num_rows() as u64).sum();
    Ok(FilesOutput {
        files: specs
            .into_iter()
            .zip(outputs)
            .map(|((d, p, _), o)| (d, p, o))
            .collect(),
        stats,
    })
}

/// Generates `count` images of `side`×`side` pixels at the disks: image `i` on disk `i mod n`,
/// as `files/images/img-NNNNN.gray`.
///
/// # Errors
/// Unreachable disks, a bad side.
pub async fn load_images(cluster: &Cluster, count: u32, side: u32) -> Result<()> {
    let n = cluster.disk_count();
    futures::future::try_join_all((0..n).map(|d| async move {
        let req = GenerateImages {
            indices: (0..count).filter(|i| i % n == d).collect(),
            side,
        };
        cluster
            .action(
                d,
                action::GENERATE_IMAGES,
                serde_json::to_vec(&req).expect("request serializes"),
            )
            .await
    }))
    .await?;
    Ok(())
}
