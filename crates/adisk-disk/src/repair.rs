//! Repair: a disk brings itself to the state its tables' load stamps say it holds, fetching
//! the copies it lacks straight from its peers (disk to disk; the host only asks).
//!
//! ```text
//!   repairing disk d                                   peer e (named in cluster.toml)
//!   ────────────────                                   ──────
//!   listing of every peer  ◄───── DoAction(catalog, listing_only) ─────  (tables, loads,
//!                                                                        partitions)
//!   per table: the latest load stamp; the partitions whose copies name d
//!   each one d lacks (or, with verify, fails its check):
//!                          ───── DoAction(partition_read) ────►  manifest entry, then the
//!   written to a .tmp, size + CRC-32 checked,   ◄── chunks ────   file in chunks (CRC-32
//!   renamed, listed under the load (one manifest replacement)      checked as read)
//! ```
//!
//! A disk runs this when it starts (a disk that comes back empty, or that missed a load,
//! restores itself: `adisk disk --no-auto-repair` turns it off), when the host asks
//! (`adisk repair`), and for the copies `adisk scrub` found corrupt. Memory for the chunks in
//! flight is granted from the DiskOS budget on both sides.
use crate::pipes::FlightPipeConnector;
use crate::status::{json_result, storage_status};
use adisk_core::config::ClusterConfig;
use adisk_core::protocol::{
    DiskCatalog, FailedRepair, LoadStamp, PartitionRead, RepairReport, RepairRequest,
    RepairedPartition, TableInfo, action,
};
use adisk_diskos::DiskOs;
use adisk_storage::replica::Installed;
use arrow_flight::Action;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::Status;

/// Largest chunk of a partition sent in one message.
pub const MAX_CHUNK_BYTES: u64 = 1 << 20;

/// Chunk size: the disk's stream buffer, within 64 KiB..=1 MiB.
fn chunk_bytes(os: &DiskOs) -> u64 {
    os.config().buffer_bytes.clamp(64 * 1024, MAX_CHUNK_BYTES)
}

type ActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;

/// Serves [`action::PARTITION_READ`]: the table's entry with this one partition, then the file.
pub(crate) async fn read_copy(os: Arc<DiskOs>, req: PartitionRead) -> Result<ActionStream, Status> {
    let store = os.store().clone();
    let (table, file) = store
        .open_copy(&req.table, req.partition, &req.load_id)
        .map_err(storage_status)?;
    let chunk = chunk_bytes(&os);
    // The chunk being read and the two queued.
    let grant = os
        .grant_memory(3 * chunk)
        .await
        .map_err(|e| crate::status::status_of(&e))?;
    let info = table.partitions[0].clone();
    let header = json_result(&table);
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let _grant = grant;
        send_file(file, &info, chunk as usize, &tx);
    });
    Ok(stream::once(async move { Ok(header) })
        .chain(tokio_stream::wrappers::ReceiverStream::new(rx))
        .boxed())
}

/// Sends `file` in chunks; ends with `DataLoss` if what was read does not match `info`.
fn send_file(
    mut file: std::fs::File,
    info: &adisk_core::protocol::PartitionInfo,
    chunk: usize,
    tx: &mpsc::Sender<Result<arrow_flight::Result, Status>>,
) {
    let mut crc = crc32fast::Hasher::new();
    let mut total = 0u64;
    loop {
        let mut buf = vec![0u8; chunk];
        let n = match read_full(&mut file, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ =
                    tx.blocking_send(Err(Status::internal(format!("reading {}: {e}", info.file))));
                return;
            }
        };
        if n == 0 {
            break;
        }
        buf.truncate(n);
        crc.update(&buf);
        total += n as u64;
        if tx
            .blocking_send(Ok(arrow_flight::Result {
                body: Bytes::from(buf),
            }))
            .is_err()
        {
            return; // the receiver went away
        }
    }
    let crc = crc.finalize();
    if total != info.bytes || crc != info.crc32 {
        let reason = format!(
            "corrupt partition {}: {total} bytes with CRC-32 {crc:08x}, but the manifest says {} bytes, {:08x}",
            info.file, info.bytes, info.crc32
        );
        let _ = tx.blocking_send(Err(Status::data_loss(reason)));
    }
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The peers' catalogs, and the cluster they were read from.
struct Peers {
    config: ClusterConfig,
    catalogs: BTreeMap<u32, DiskCatalog>,
}

impl Peers {
    /// Peers that list partition `p` of `table` under load `load_id`, in `order`.
    fn holding(&self, order: &[u32], table: &str, p: u32, load_id: &str) -> Vec<u32> {
        order
            .iter()
            .filter(|d| {
                self.catalogs.get(d).is_some_and(|c| {
                    c.tables.iter().any(|t| {
                        t.name == table
                            && t.load.as_ref().is_some_and(|s| s.load_id == load_id)
                            && t.partitions.iter().any(|x| x.partition == p)
                    })
                })
            })
            .copied()
            .collect()
    }
}

/// Serves [`action::REPAIR`] (and the repair a disk runs when it starts).
///
/// # Errors
/// `FailedPrecondition` when this disk does not know its cluster (no `--members`).
pub(crate) async fn repair(
    os: Arc<DiskOs>,
    connector: Arc<FlightPipeConnector>,
    req: RepairRequest,
) -> Result<RepairReport, Status> {
    let start = Instant::now();
    let members = connector.members.clone().ok_or_else(|| Status::failed_precondition("this disk does not know its cluster (start it with --members cluster.toml), so it cannot repair from its peers"))?;
    let config = ClusterConfig::load(&members).map_err(|e| {
        Status::failed_precondition(format!("cannot read the cluster's members: {e}"))
    })?;
    let me = os.config().disk_id;
    let mut report = RepairReport {
        disk_id: me,
        ..Default::default()
    };
    let peers = peer_catalogs(&connector, config, me, &mut report).await;
    let mut names: Vec<String> = peers
        .catalogs
        .values()
        .flat_map(|c| c.tables.iter().map(|t| t.name.clone()))
        .chain(os.store().catalog().tables.into_iter().map(|t| t.name))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.retain(|n| req.tables.is_empty() || req.tables.contains(n));
    for name in names {
        repair_table(&os, &connector, &peers, &name, req.verify, &mut report).await;
    }
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}

/// Reads every peer's catalog (those that do not answer within the cluster's disk timeout are
/// listed as unreachable).
async fn peer_catalogs(
    connector: &FlightPipeConnector,
    config: ClusterConfig,
    me: u32,
    report: &mut RepairReport,
) -> Peers {
    let timeout = adisk_core::config::Deadlines::from_ms(config.cluster.disk_timeout_ms).timeout;
    // Which tables, loads and partitions each peer holds, without the planning statistics:
    // with them, each of 8 disks holding TPC-H SF 1 would parse 3.5 MB of its peers' JSON a
    // second after it starts.
    let request = adisk_core::protocol::CatalogRequest {
        listing_only: true,
        ..Default::default()
    };
    let listing = Bytes::from(serde_json::to_vec(&request).expect("a request serializes"));
    let listing = &listing;
    let asks = config
        .disks
        .iter()
        .filter(|d| d.id != me)
        .map(|d| async move {
            let ask = async {
                let mut client = connector
                    .client(&d.address, &format!("disk {}", d.id), false)
                    .await
                    .map_err(|e| e.to_string())?;
                let replies: Vec<Bytes> = client
                    .do_action(Action::new(action::CATALOG, listing.clone()))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect::<Vec<_>>()
                    .await
                    .into_iter()
                    .collect::<Result<_, _>>()?;
                let first = replies.first().ok_or("empty reply to catalog")?;
                serde_json::from_slice::<DiskCatalog>(first).map_err(|e| e.to_string())
            };
            (
                d.id,
                tokio::time::timeout(timeout, ask)
                    .await
                    .unwrap_or_else(|_| Err("no answer".into())),
            )
        });
    let mut catalogs = BTreeMap::new();
    for (d, r) in futures::future::join_all(asks).await {
        match r {
            Ok(c) => {
                catalogs.insert(d, c);
            }
            Err(e) => {
                tracing::warn!(disk = d, "repair: peer did not answer: {e}");
                report.unreachable.push(d);
            }
        }
    }
    Peers { config, catalogs }
}

/// Restores this disk's copies of `name` under the table's latest load.
async fn repair_table(
    os: &Arc<DiskOs>,
    connector: &FlightPipeConnector,
    peers: &Peers,
    name: &str,
    verify: bool,
    report: &mut RepairReport,
) {
    let me = os.config().disk_id;
    let mine = os.store().table(name).ok();
    let stamps = peers
        .catalogs
        .values()
        .flat_map(|c| c.tables.iter().filter(|t| t.name == name))
        .chain(mine.iter())
        .filter_map(|t| t.load.as_ref());
    // Tables written by jobs, or loaded before copies were recorded, are not repairable.
    let Some(latest) = stamps
        .max_by(|a, b| a.load_id.cmp(&b.load_id))
        .filter(|s| !s.copies.is_empty())
        .cloned()
    else {
        return;
    };
    report.tables += 1;
    let expected: Vec<(u32, Vec<u32>)> = latest
        .copies
        .iter()
        .filter(|c| c.disks.contains(&me))
        .map(|c| (c.partition, c.disks.clone()))
        .collect();
    if expected.is_empty() {
        match os.store().drop_if_older(name, &latest.load_id) {
            Ok(true) => report.dropped.push(name.to_string()),
            Ok(false) => {}
            Err(e) => report.failed.push(FailedRepair {
                table: name.into(),
                partition: u32::MAX,
                reason: format!("dropping an older load: {e}"),
            }),
        }
        return;
    }
    report.expected += expected.len() as u64;
    for (p, copies) in expected {
        let Some(reason) = why_fetch(os, mine.as_ref(), &latest, p, verify, report).await else {
            continue;
        };
        let sources = peers.holding(&copies, name, p, &latest.load_id);
        if sources.is_empty() {
            let reason = format!(
                "no live peer holds a copy of load {} (copies on disks {copies:?}; unreachable: {:?})",
                latest.load_id, report.unreachable
            );
            report.failed.push(FailedRepair {
                table: name.into(),
                partition: p,
                reason,
            });
            continue;
        }
        let mut errors = Vec::new();
        for from in sources {
            match fetch(os, connector, &peers.config, from, name, p, &latest).await {
                Ok(bytes) => {
                    report.bytes_received += bytes;
                    report.repaired.push(RepairedPartition {
                        table: name.into(),
                        partition: p,
                        from_disk: from,
                        bytes,
                        reason: reason.clone(),
                    });
                    errors.clear();
                    break;
                }
                Err(e) => errors.push(format!("from disk {from}: {e}")),
            }
        }
        if !errors.is_empty() {
            report.failed.push(FailedRepair {
                table: name.into(),
                partition: p,
                reason: errors.join("; "),
            });
        }
    }
}

/// Why partition `p` must be fetched (None: this disk holds a good copy).
async fn why_fetch(
    os: &Arc<DiskOs>,
    mine: Option<&TableInfo>,
    latest: &LoadStamp,
    p: u32,
    verify: bool,
    report: &mut RepairReport,
) -> Option<String> {
    let held = mine.and_then(|t| t.load.as_ref());
    let current = mine.filter(|_| held.is_some_and(|s| s.load_id == latest.load_id));
    let Some(info) = current
        .and_then(|t| t.partitions.iter().find(|x| x.partition == p))
        .cloned()
    else {
        return Some(match held {
            Some(s) if s.load_id != latest.load_id => format!("older load {}", s.load_id),
            _ => "missing".to_string(),
        });
    };
    if !verify {
        return None;
    }
    let store = os.store().clone();
    match tokio::task::spawn_blocking(move || store.verify_partition(&info)).await {
        Ok(Ok(())) => {
            report.verified += 1;
            None
        }
        Ok(Err(reason)) => Some(format!("corrupt: {reason}")),
        Err(e) => Some(format!("corrupt: check failed: {e}")),
    }
}

/// Fetches partition `p` of `table` (load `latest`) from disk `from` and lists it here;
/// returns its size.
async fn fetch(
    os: &Arc<DiskOs>,
    connector: &FlightPipeConnector,
    config: &ClusterConfig,
    from: u32,
    table: &str,
    p: u32,
    latest: &LoadStamp,
) -> Result<u64, String> {
    let address = &config
        .disks
        .iter()
        .find(|d| d.id == from)
        .ok_or("not in cluster.toml")?
        .address;
    let mut client = connector
        .client(address, &format!("disk {from}"), false)
        .await
        .map_err(|e| e.to_string())?;
    let chunk = chunk_bytes(os);
    let _grant = os
        .grant_memory(2 * chunk)
        .await
        .map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(&PartitionRead {
        table: table.into(),
        partition: p,
        load_id: latest.load_id.clone(),
    })
    .expect("request serializes");
    let mut replies = client
        .do_action(Action::new(action::PARTITION_READ, Bytes::from(body)))
        .await
        .map_err(|e| e.to_string())?;
    let first = replies
        .next()
        .await
        .ok_or("empty reply")?
        .map_err(|e| e.to_string())?;
    let header: TableInfo =
        serde_json::from_slice(&first).map_err(|e| format!("malformed reply: {e}"))?;
    let stamp = header
        .load
        .clone()
        .filter(|s| s.load_id == latest.load_id)
        .ok_or("it sent another load")?;
    let info = header
        .partitions
        .first()
        .filter(|i| i.partition == p)
        .ok_or("it sent another partition")?;
    let store = os.store().clone();
    let mut incoming = store
        .begin_copy(table, &stamp, info)
        .map_err(|e| e.to_string())?;
    while let Some(bytes) = replies.next().await {
        incoming
            .write(&bytes.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let bytes = incoming.written();
    let installed =
        tokio::task::spawn_blocking(move || store.install_copy(incoming, &header.schema, &stamp))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    match installed {
        Installed::Listed => Ok(bytes),
        Installed::Superseded { held } => Err(format!("this disk now holds a newer load {held}")),
    }
}

/// The repair a disk runs when it starts: retried (1 s, 2 s, 4 s, … apart, six tries) while
/// peers do not answer or copies could not be restored, since its peers may be starting too.
pub(crate) async fn repair_on_start(os: Arc<DiskOs>, connector: Arc<FlightPipeConnector>) {
    for attempt in 0..6u32 {
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
        match repair(os.clone(), connector.clone(), RepairRequest::default()).await {
            Ok(r) => {
                if !r.repaired.is_empty() || !r.failed.is_empty() || !r.dropped.is_empty() {
                    eprintln!(
                        "disk {}: repair on start: {} copies restored ({} bytes), {} tables dropped, {} failed, peers unreachable: {:?}",
                        r.disk_id,
                        r.repaired.len(),
                        r.bytes_received,
                        r.dropped.len(),
                        r.failed.len(),
                        r.unreachable
                    );
                    for f in &r.failed {
                        eprintln!(
                            "  not restored: {} partition {}: {}",
                            f.table, f.partition, f.reason
                        );
                    }
                }
                if r.failed.is_empty() && r.unreachable.is_empty() {
                    return;
                }
            }
            Err(e) => {
                eprintln!("repair on start: {}", e.message());
                return;
            }
        }
    }
}
