//! Connections to the disks, the merged catalog, and job execution.
use crate::{HostError, Result};
use adisk_core::config::{ClusterConfig, Deadlines, ExchangeMode};
use adisk_core::protocol::{
    DiskCatalog, DiskStatus, JobSpec, LoadStamp, PartitionInfo, TableInfo, action,
};
use adisk_core::stats::DiskJobStats;
use adisk_core::tls::TlsMaterial;
use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightClient, Ticket};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Connect timeout per disk.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The local address this host's packets to `address` leave from, as the kernel's routes
/// choose it (a UDP socket is connected, no packet is sent): where a disk at `address`
/// reaches this host. None when `address` does not resolve or has no route.
pub fn local_address_towards(address: &str) -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let target = address.to_socket_addrs().ok()?.next()?;
    let any = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = std::net::UdpSocket::bind(any).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// Where the host's relays listen: the one local address every disk reaches it by (loopback
/// for a local cluster, the host's address on the disks' network otherwise), or every
/// interface when disks reach it by several (each disk is then told its own,
/// [`Cluster::relay_for`]). Strangers who reach the port are refused: a relay serves only
/// callers holding the cluster's key.
fn relay_listen(addresses: &[String]) -> String {
    let sources: BTreeSet<std::net::IpAddr> = addresses
        .iter()
        .filter_map(|a| local_address_towards(a))
        .collect();
    match (sources.len(), sources.first()) {
        (1, Some(ip)) => std::net::SocketAddr::new(*ip, 0).to_string(),
        _ if sources.iter().all(|ip| ip.is_ipv6()) && !sources.is_empty() => "[::]:0".into(),
        _ => "0.0.0.0:0".into(),
    }
}

fn exchange_code(mode: ExchangeMode) -> u8 {
    match mode {
        ExchangeMode::Direct => 0,
        ExchangeMode::ViaHost => 1,
    }
}

/// A table across the cluster.
#[derive(Clone, Debug)]
pub struct TableEntry {
    /// Name.
    pub name: String,
    /// Schema (identical on every disk).
    pub schema: SchemaRef,
    /// (disk, partition) for every partition, each once: for a replicated table, the first
    /// live disk in the partition's chain that reported it (who reads it is decided per query
    /// by [`TableEntry::assign`]).
    pub placements: Vec<(u32, PartitionInfo)>,
    /// Partition → every disk holding a copy, primary first, from the table's load stamp
    /// (empty for tables written by jobs or earlier versions: each placement is read where it is).
    pub copies: BTreeMap<u32, Vec<u32>>,
    /// Partition → live disks that should hold a copy of it but do not (a disk that returned
    /// empty, or that missed the load): never read there, listed for `adisk repair`.
    pub missing: BTreeMap<u32, BTreeSet<u32>>,
    /// Live disks holding an older load of the table (ignored; `adisk repair` replaces it).
    pub stale: Vec<u32>,
}

/// Which disk reads which partitions of a table in one query.
pub type Assignment = Vec<(u32, Option<Vec<u32>>)>;

impl TableEntry {
    /// Total rows.
    pub fn rows(&self) -> u64 {
        self.placements.iter().map(|(_, p)| p.rows).sum()
    }
    /// Total bytes on storage.
    pub fn bytes(&self) -> u64 {
        self.placements.iter().map(|(_, p)| p.bytes).sum()
    }
    /// Estimated distinct values per column (schema order), merged from the partitions'
    /// sketches; `None` where a partition has no sketch for the column.
    pub fn distinct_values(&self) -> Vec<Option<u64>> {
        (0..self.schema.fields().len())
            .map(|c| {
                let mut merged = adisk_core::sketch::Hll::default();
                for (_, p) in &self.placements {
                    match p.ndv.get(c) {
                        Some(Some(h)) => merged.merge(h),
                        _ => return None,
                    }
                }
                Some((merged.estimate().round() as u64).min(self.rows()))
            })
            .collect()
    }

    /// Copies per partition (1 for tables without a copy list).
    pub fn replicas(&self) -> usize {
        self.copies.values().map(|c| c.len()).max().unwrap_or(1)
    }

    /// Which live disk reads which partitions: each partition exactly once, at its primary if
    /// that disk is live; the partitions of dead primaries go one by one to the live copy with
    /// the fewest partitions so far (ties: the earlier in the chain). Disks in the result are
    /// sorted; `None` (tables without a copy list) means "all its local partitions".
    ///
    /// # Errors
    /// [`HostError::LostPartitions`] naming the partitions with no live copy.
    pub fn assign(&self, dead: &BTreeSet<u32>) -> Result<Assignment> {
        if self.copies.is_empty() {
            let on_dead: Vec<u32> = self
                .disks()
                .into_iter()
                .filter(|d| dead.contains(d))
                .collect();
            if !on_dead.is_empty() {
                let lost: Vec<u32> = self
                    .placements
                    .iter()
                    .filter(|(d, _)| on_dead.contains(d))
                    .map(|(_, p)| p.partition)
                    .collect();
                let copies = self
                    .placements
                    .iter()
                    .filter(|(d, _)| on_dead.contains(d))
                    .map(|(d, p)| format!("{} on disk {d}", p.partition))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(HostError::LostPartitions {
                    table: self.name.clone(),
                    partitions: lost,
                    dead: dead.iter().copied().collect(),
                    copies,
                });
            }
            return Ok(self.disks().into_iter().map(|d| (d, None)).collect());
        }
        let usable: BTreeMap<u32, Vec<u32>> = self
            .copies
            .iter()
            .map(|(p, disks)| {
                (
                    *p,
                    disks
                        .iter()
                        .filter(|d| !self.missing.get(p).is_some_and(|m| m.contains(d)))
                        .copied()
                        .collect(),
                )
            })
            .collect();
        let assigned = assign_copies(&usable, dead).map_err(|lost| {
            let copies = lost
                .iter()
                .map(|p| format!("{p} on disks {:?}", self.copies[p]))
                .collect::<Vec<_>>()
                .join(", ");
            HostError::LostPartitions {
                table: self.name.clone(),
                partitions: lost,
                dead: dead.iter().copied().collect(),
                copies,
            }
        })?;
        Ok(assigned
            .into_iter()
            .map(|(d, parts)| (d, Some(parts)))
            .collect())
    }

    /// Copies missing on live disks, as (disk, partitions) sorted by disk: what `adisk repair`
    /// restores.
    pub fn missing_by_disk(&self) -> Vec<(u32, Vec<u32>)> {
        let mut per_disk: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (p, disks) in &self.missing {
            for d in disks {
                per_disk.entry(*d).or_default().push(*p);
            }
        }
        per_disk.into_iter().collect()
    }

    /// Whether some live disk lacks copies it should hold, or holds an older load.
    pub fn needs_repair(&self) -> bool {
        !self.missing.is_empty() || !self.stale.is_empty()
    }

    /// Disks holding at least one partition.
    pub fn disks(&self) -> Vec<u32> {
        let mut d: Vec<u32> = self.placements.iter().map(|(d, _)| *d).collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// Assigns every partition of `copies` (partition → disks holding it, primary first) to one
/// disk not in `dead` (see [`TableEntry::assign`]); returns (disk, partitions) sorted by disk,
/// or the partitions with no live copy.
pub fn assign_copies(
    copies: &BTreeMap<u32, Vec<u32>>,
    dead: &BTreeSet<u32>,
) -> std::result::Result<Vec<(u32, Vec<u32>)>, Vec<u32>> {
    let mut per_disk: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut orphans = Vec::new();
    for (p, disks) in copies {
        match disks.first() {
            Some(primary) if !dead.contains(primary) => {
                per_disk.entry(*primary).or_default().push(*p)
            }
            _ => orphans.push(*p),
        }
    }
    let mut lost = Vec::new();
    for p in orphans {
        let least = copies[&p]
            .iter()
            .filter(|d| !dead.contains(d))
            .min_by_key(|d| per_disk.get(d).map_or(0, |v| v.len()));
        match least {
            Some(d) => per_disk.entry(*d).or_default().push(p),
            None => lost.push(p),
        }
    }
    if !lost.is_empty() {
        return Err(lost);
    }
    for parts in per_disk.values_mut() {
        parts.sort_unstable();
    }
    Ok(per_disk.into_iter().collect())
}

/// The catalog: every table, its schema and placement.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// Tables by name (complete ones only).
    pub tables: BTreeMap<String, TableEntry>,
    /// Tables whose disks hold different loads of them, with why (never queried).
    pub incomplete: BTreeMap<String, Incomplete>,
    /// What the catalog was merged from: every disk's catalog version, the dead disks and the
    /// copies found corrupt. Two catalogs with the same key are the same (None: a disk does
    /// not version its catalog, or one coming back was weighed).
    pub key: Option<String>,
}

/// A dead disk's first probe, after it was taken as dead.
pub const FIRST_PROBE: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest wait between two probes of a dead disk.
pub const MAX_PROBE_BACKOFF: std::time::Duration = std::time::Duration::from_secs(8);

/// The probes of one dead disk.
#[derive(Debug)]
struct Revival {
    /// When it was taken as dead, and why.
    since: std::time::Instant,
    why: String,
    next_probe: std::time::Instant,
    backoff: std::time::Duration,
    /// A probe is under way.
    probing: bool,
    /// The last probe answered: a candidate for the next catalog.
    answered: bool,
}

impl Revival {
    fn new(why: String) -> Self {
        Revival {
            since: std::time::Instant::now(),
            why,
            next_probe: std::time::Instant::now() + FIRST_PROBE,
            backoff: FIRST_PROBE,
            probing: false,
            answered: false,
        }
    }

    /// A probe ended (`answered`: the disk answered it); else the next waits twice as long.
    fn probed(&mut self, answered: bool) {
        self.probing = false;
        self.answered = answered;
        if !answered {
            self.backoff = (self.backoff * 2).min(MAX_PROBE_BACKOFF);
            self.next_probe = std::time::Instant::now() + self.backoff;
        }
    }
}

/// Why a table is incomplete (see [`HostError::IncompleteTable`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Incomplete {
    /// Disks that do not hold the load the table's stamp names.
    pub disks: Vec<u32>,
    /// Which loads are where.
    pub reason: String,
    /// The schema one of its disks holds.
    pub schema: SchemaRef,
}

impl Catalog {
    /// A table, or [`HostError::IncompleteTable`] / [`HostError::UnknownTable`].
    pub fn table(&self, name: &str) -> Result<&TableEntry> {
        if let Some(i) = self.incomplete.get(name) {
            return Err(incomplete_error(name, i));
        }
        self.tables
            .get(name)
            .ok_or_else(|| HostError::UnknownTable(name.to_string()))
    }
}

/// The typed error of an incomplete table.
pub fn incomplete_error(table: &str, i: &Incomplete) -> HostError {
    HostError::IncompleteTable {
        table: table.to_string(),
        disks: i.disks.clone(),
        reason: i.reason.clone(),
    }
}

/// Checks that every disk holding `stamps`' table holds the same load of it, and that those
/// are exactly the disks the load wrote (tables written by jobs carry no stamp: accepted).
fn check_generation(
    stamps: &[(u32, Option<LoadStamp>)],
    dead: &BTreeSet<u32>,
) -> std::result::Result<(), (Vec<u32>, String)> {
    let Some(stamp) = stamps.iter().find_map(|(_, s)| s.clone()) else {
        return Ok(());
    };
    let holding: Vec<u32> = stamps.iter().map(|(d, _)| *d).collect();
    let latest = stamps
        .iter()
        .filter_map(|(_, s)| s.as_ref())
        .max_by(|a, b| a.load_id.cmp(&b.load_id))
        .unwrap_or(&stamp);
    let mut wrong: Vec<u32> = stamps
        .iter()
        .filter(|(_, s)| s.as_ref() != Some(latest))
        .map(|(d, _)| *d)
        .collect();
    // A dead disk's copy is not known to be missing: its partitions count as lost, not stale.
    wrong.extend(
        latest
            .disks
            .iter()
            .filter(|d| !holding.contains(d) && !dead.contains(d)),
    );
    wrong.sort_unstable();
    wrong.dedup();
    if wrong.is_empty() {
        return Ok(());
    }
    let describe = |(d, s): &(u32, Option<LoadStamp>)| {
        format!(
            "disk {d}: {}",
            s.as_ref()
                .map_or("no load id".to_string(), |s| format!("load {}", s.load_id))
        )
    };
    let mut held: Vec<String> = stamps.iter().map(describe).collect();
    held.extend(
        latest
            .disks
            .iter()
            .filter(|d| !holding.contains(d) && !dead.contains(d))
            .map(|d| format!("disk {d}: missing")),
    );
    let reason = format!(
        "load {} spans disks {:?}, but {}",
        latest.load_id,
        latest.disks,
        held.join(", ")
    );
    Err((wrong, reason))
}

/// One table as its live disks reported it: a complete [`TableEntry`] or why it is incomplete.
///
/// A table with a copy list (every load since replicas) is judged partition by partition
/// against its latest load: a copy is usable where a live disk lists it under that load; a
/// live disk that should hold a copy and does not (it came back empty, it missed the load) is
/// recorded in [`TableEntry::missing`] and never read, and the table stays complete as long as
/// every such partition has a usable copy somewhere (or a copy on a dead disk: then it is
/// [`HostError::LostPartitions`] at planning). Tables without a copy list are judged by
/// [`check_generation`].
fn merge_table(
    name: &str,
    reports: Vec<(u32, TableInfo)>,
    dead: &BTreeSet<u32>,
) -> std::result::Result<TableEntry, Incomplete> {
    let schema = Arc::new(reports[0].1.schema.clone());
    let differing: Vec<u32> = reports
        .iter()
        .filter(|(_, t)| t.schema.fields() != schema.fields())
        .map(|(d, _)| *d)
        .collect();
    if !differing.is_empty() {
        return Err(Incomplete {
            disks: differing,
            reason: "its disks hold different schemas".into(),
            schema,
        });
    }
    let latest = reports
        .iter()
        .filter_map(|(_, t)| t.load.as_ref())
        .max_by(|a, b| a.load_id.cmp(&b.load_id))
        .cloned();
    if let Some(latest) = latest.filter(|l| !l.copies.is_empty()) {
        return merge_copies(name, reports, latest, dead, schema);
    }
    let stamps: Vec<(u32, Option<LoadStamp>)> =
        reports.iter().map(|(d, t)| (*d, t.load.clone())).collect();
    check_generation(&stamps, dead).map_err(|(disks, reason)| Incomplete {
        disks,
        reason,
        schema: schema.clone(),
    })?;
    let placements = reports
        .into_iter()
        .flat_map(|(d, t)| t.partitions.into_iter().map(move |p| (d, p)))
        .collect();
    Ok(TableEntry {
        name: name.to_string(),
        schema,
        placements,
        copies: BTreeMap::new(),
        missing: BTreeMap::new(),
        stale: vec![],
    })
}

/// [`merge_table`] for a table whose latest load recorded every partition's copies.
fn merge_copies(
    name: &str,
    reports: Vec<(u32, TableInfo)>,
    latest: LoadStamp,
    dead: &BTreeSet<u32>,
    schema: SchemaRef,
) -> std::result::Result<TableEntry, Incomplete> {
    let copies: BTreeMap<u32, Vec<u32>> = latest
        .copies
        .iter()
        .map(|c| (c.partition, c.disks.clone()))
        .collect();
    let is_current = |t: &TableInfo| t.load.as_ref().map(|s| &s.load_id) == Some(&latest.load_id);
    let stale: Vec<u32> = reports
        .iter()
        .filter(|(_, t)| !is_current(t))
        .map(|(d, _)| *d)
        .collect();
    let lists = |d: u32, p: u32| {
        reports.iter().any(|(rd, t)| {
            *rd == d && is_current(t) && t.partitions.iter().any(|x| x.partition == p)
        })
    };
    let mut missing: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut unserved = Vec::new();
    for (p, disks) in &copies {
        let lacking: BTreeSet<u32> = disks
            .iter()
            .filter(|d| !dead.contains(d) && !lists(**d, *p))
            .copied()
            .collect();
        // No copy anywhere, and none on a dead disk that may come back: the load is not there.
        if !lacking.is_empty() && !disks.iter().any(|d| lists(*d, *p) || dead.contains(d)) {
            unserved.push(*p);
        }
        if !lacking.is_empty() {
            missing.insert(*p, lacking);
        }
    }
    if !unserved.is_empty() {
        let mut disks: Vec<u32> = unserved
            .iter()
            .flat_map(|p| missing[p].iter().copied())
            .chain(stale.iter().copied())
            .collect();
        disks.sort_unstable();
        disks.dedup();
        let describe = |(d, t): &(u32, TableInfo)| {
            format!(
                "disk {d}: {}",
                t.load
                    .as_ref()
                    .map_or("no load id".to_string(), |s| format!("load {}", s.load_id))
            )
        };
        let mut held: Vec<String> = reports.iter().map(describe).collect();
        held.extend(
            disks
                .iter()
                .filter(|d| !reports.iter().any(|(rd, _)| rd == *d))
                .map(|d| format!("disk {d}: missing")),
        );
        let reason = format!(
            "load {} spans disks {:?}, but {}; partitions {unserved:?} have no copy of it on a live disk",
            latest.load_id,
            latest.disks,
            held.join(", ")
        );
        return Err(Incomplete {
            disks,
            reason,
            schema,
        });
    }
    let placements = reports
        .into_iter()
        .filter(|(_, t)| is_current(t))
        .flat_map(|(d, t)| {
            t.partitions
                .into_iter()
                .filter(|p| copies.contains_key(&p.partition))
                .map(move |p| (d, p))
        })
        .collect();
    let mut entry = TableEntry {
        name: name.to_string(),
        schema,
        placements,
        copies,
        missing,
        stale,
    };
    dedup_copies(&mut entry);
    Ok(entry)
}

/// Keeps one placement per partition of a replicated table: the first disk in its chain that
/// reported it.
fn dedup_copies(entry: &mut TableEntry) {
    let mut kept: BTreeMap<u32, (u32, PartitionInfo)> = BTreeMap::new();
    for (d, p) in std::mem::take(&mut entry.placements) {
        let rank = |disk: u32| {
            entry
                .copies
                .get(&p.partition)
                .and_then(|c| c.iter().position(|x| *x == disk))
                .unwrap_or(usize::MAX)
        };
        match kept.get(&p.partition) {
            Some((held, _)) if rank(*held) <= rank(d) => {}
            _ => {
                kept.insert(p.partition, (d, p));
            }
        }
    }
    entry.placements = kept.into_values().collect();
}

/// A connected cluster.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    /// TLS of the links to the disks and of the relay and router (`[cluster.tls]`).
    tls: Option<TlsMaterial>,
    channels: Vec<tonic::transport::Channel>,
    exchange: std::sync::atomic::AtomicU8,
    host_link: Option<Arc<crate::client::throttle::TokenBucket>>,
    relay: tokio::sync::OnceCell<crate::client::relay::Relay>,
    /// The router between disk groups (chiu): a relay every stream from one group to another
    /// passes through, paying `router_mbps`; started on first use.
    router: tokio::sync::OnceCell<crate::client::relay::Relay>,
    /// The cluster's secret: every request carries a fresh token made with it.
    auth: Option<Arc<adisk_core::auth::Verifier>>,
    /// Disks taken as dead (unreachable at connect, or failed since): never given work again
    /// by this host.
    dead: std::sync::Mutex<BTreeSet<u32>>,
    /// The dead disks' probes: each is asked for its status again, with backoff, in the
    /// background; one that answers is used again once its catalog agrees with the others'
    /// ([`Cluster::catalog`]).
    revival: Arc<std::sync::Mutex<BTreeMap<u32, Revival>>>,
    /// Copies found corrupt by a query, as (table, partition, disk): never read again by this
    /// host (its catalog lists them as missing, for `adisk scrub` / `adisk repair`).
    corrupt: std::sync::Mutex<BTreeSet<(String, u32, u32)>>,
    /// The host link's measured figures (`auto` plans with them).
    links: crate::client::links::Links,
    /// Where the figures are kept between processes ([`crate::client::link_memory`]; None:
    /// not kept).
    link_memory: Option<std::path::PathBuf>,
    /// Each disk's catalog as last fetched, fetched again only when its version changed.
    catalogs: std::sync::Mutex<BTreeMap<u32, Arc<DiskCatalog>>>,
    /// The last merged catalog, whose [`Catalog::key`] is set: merged again only when its key
    /// changes.
    merged: std::sync::Mutex<Option<Catalog>>,
    /// What `auto` measured of the queries this host ran ([`crate::sql::feedback`]).
    feedback: crate::client::runs::Feedback,
}

/// A connection to a disk ([`adisk_core::net::member_endpoint`]): a stream from a stopped
/// disk fails within the deadline, never hangs; TLS when the cluster has it.
fn endpoint(
    address: &str,
    deadlines: Deadlines,
    tls: Option<&TlsMaterial>,
) -> std::result::Result<tonic::transport::Endpoint, tonic::transport::Error> {
    adisk_core::net::member_endpoint(
        address,
        deadlines,
        CONNECT_TIMEOUT.min(deadlines.timeout),
        tls,
    )
}

/// The host's TLS material named by `config` (`[cluster.tls]`), if any.
fn host_tls(config: &ClusterConfig) -> Result<Option<TlsMaterial>> {
    config
        .tls()
        .map_err(|e| HostError::Invalid(format!("{e} (named in [cluster.tls])")))
}

/// How tonic's statuses start when the connection under a call broke (no disk said them).
/// `operation was canceled` is hyper's word for a connection closed under a request, e.g. by
/// a disk refusing the host's certificate once TLS 1.3's handshake had let it send.
const TRANSPORT_FAILURES: [&str; 3] = [
    "h2 protocol error",
    "transport error",
    "operation was canceled",
];

pub(crate) fn flight_err(disk: u32, address: &str, e: FlightError) -> HostError {
    match e {
        FlightError::Tonic(status) => {
            let code = format!("{:?}", status.code());
            // A disk that says a link of its own failed is not unreachable itself; a call
            // whose connection broke (the link to the disk cut) is, whatever its code.
            let message = status.message();
            let link = message.starts_with(adisk_core::protocol::LINK_FAILED);
            let broken = TRANSPORT_FAILURES.iter().any(|t| message.starts_with(t));
            if (status.code() == tonic::Code::Unavailable && !link) || broken {
                HostError::Unreachable {
                    disk,
                    address: address.to_string(),
                    message: status.message().to_string(),
                }
            } else {
                HostError::Disk {
                    disk,
                    code,
                    message: status.message().to_string(),
                }
            }
        }
        other => HostError::Disk {
            disk,
            code: "Internal".into(),
            message: other.to_string(),
        },
    }
}

impl Cluster {
    /// Connects to every disk of `config`. A disk that does not answer is taken as dead
    /// ([`Cluster::dead_disks`]): queries then read its partitions' other copies.
    ///
    /// # Errors
    /// [`HostError::Unreachable`] naming the first disk when no disk answers.
    pub async fn connect(config: ClusterConfig) -> Result<Self> {
        let deadlines = config.deadlines();
        let tls = host_tls(&config)?;
        let tls_ref = tls.as_ref();
        let attempts = config.disks.iter().map(|d| async move {
            let unreachable = |message: String| HostError::Unreachable {
                disk: d.id,
                address: d.address.clone(),
                message,
            };
            let endpoint =
                endpoint(&d.address, deadlines, tls_ref).map_err(|e| unreachable(e.to_string()))?;
            let connected = tokio::time::timeout(
                deadlines.timeout,
                endpoint
                    .clone()
                    .connect_with_connector(adisk_core::net::connector()),
            )
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no answer within {} ms",
                    deadlines.timeout.as_millis()
                ))
            })
            .and_then(|r| {
                r.map_err(|e| {
                    unreachable(format!(
                        "{e} ({})",
                        std::error::Error::source(&e)
                            .map(|s| s.to_string())
                            .unwrap_or_default()
                    ))
                })
            });
            Ok::<_, HostError>((endpoint, connected))
        });
        let mut channels = Vec::with_capacity(config.disks.len());
        let mut dead = BTreeSet::new();
        let mut first_error = None;
        for (i, attempt) in futures::future::join_all(attempts)
            .await
            .into_iter()
            .enumerate()
        {
            let (endpoint, connected) = attempt?;
            match connected {
                Ok(channel) => channels.push(channel),
                Err(e) => {
                    tracing::warn!("{e}; its partitions are read from other copies");
                    dead.insert((i as u32, e.to_string()));
                    first_error.get_or_insert(e);
                    channels
                        .push(endpoint.connect_with_connector_lazy(adisk_core::net::connector()));
                }
            }
        }
        if let Some(e) = first_error.filter(|_| dead.len() == channels.len()) {
            return Err(e);
        }
        let cluster = Cluster::new(config, channels, tls)?;
        dead.into_iter()
            .for_each(|(d, why)| cluster.mark_dead(d, &why));
        Ok(cluster)
    }

    /// Disks taken as dead by this host.
    pub fn dead_disks(&self) -> BTreeSet<u32> {
        self.dead.lock().expect("dead lock").clone()
    }

    /// Disks not taken as dead.
    pub fn live_disks(&self) -> Vec<u32> {
        let dead = self.dead_disks();
        (0..self.disk_count())
            .filter(|d| !dead.contains(d))
            .collect()
    }

    /// Takes disk `d` as dead: no work goes to it until a probe finds it answering again and
    /// its catalog agrees with the other disks' (probes start after [`FIRST_PROBE`], then back
    /// off to [`MAX_PROBE_BACKOFF`]).
    pub fn mark_dead(&self, d: u32, why: &str) {
        self.dead.lock().expect("dead lock").insert(d);
        self.revival
            .lock()
            .expect("revival lock")
            .entry(d)
            .or_insert_with(|| Revival::new(why.to_string()));
    }

    /// Which disks queries use now, and why each other one is not: `used: disks 0, 2, 3`,
    /// then `disk 1 not used: taken as dead 12 s ago (…); asked again in 4 s` (EXPLAIN
    /// ANALYZE's `disks` section).
    pub fn usage(&self) -> Vec<String> {
        let live = self.live_disks();
        let mut out = vec![format!("used: {}", crate::disks_text(&live))];
        let now = std::time::Instant::now();
        let revival = self.revival.lock().expect("revival lock");
        for d in self.dead_disks() {
            let Some(r) = revival.get(&d) else {
                out.push(format!("disk {d} not used: taken as dead"));
                continue;
            };
            let next = if r.probing {
                "being asked again".to_string()
            } else if r.answered {
                "answers again: used from the next query if its copies are current".to_string()
            } else {
                format!(
                    "asked again in {:.0} s",
                    r.next_probe.saturating_duration_since(now).as_secs_f64()
                )
            };
            out.push(format!(
                "disk {d} not used: taken as dead {:.0} s ago ({}); {next}",
                now.saturating_duration_since(r.since).as_secs_f64(),
                r.why
            ));
        }
        out
    }

    /// Starts a background status probe of every dead disk whose next probe is due (outside
    /// a tokio runtime, none). A probe that answers marks its disk a candidate for
    /// [`Cluster::catalog`]; one that fails backs off.
    fn probe_dead_disks(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let now = std::time::Instant::now();
        let mut revival = self.revival.lock().expect("revival lock");
        for (d, r) in revival.iter_mut() {
            if r.probing || r.answered || r.next_probe > now {
                continue;
            }
            r.probing = true;
            let (d, mut client) = (*d, self.client(*d));
            let (revival, timeout) = (self.revival.clone(), self.config.deadlines().timeout);
            runtime.spawn(async move {
                let asked = tokio::time::timeout(timeout, async {
                    let replies = client
                        .do_action(Action::new(action::STATUS, Vec::new()))
                        .await?;
                    replies.try_collect::<Vec<_>>().await
                })
                .await;
                let answered = matches!(asked, Ok(Ok(_)));
                if let Some(r) = revival.lock().expect("revival lock").get_mut(&d) {
                    r.probed(answered);
                }
            });
        }
    }

    /// Dead disks whose last probe answered: candidates to be used again.
    fn revival_candidates(&self) -> Vec<u32> {
        self.revival
            .lock()
            .expect("revival lock")
            .iter()
            .filter(|(_, r)| r.answered)
            .map(|(d, _)| *d)
            .collect()
    }

    /// Disk `d` answered and its catalog agrees: it is used again.
    fn revive(&self, d: u32) {
        self.dead.lock().expect("dead lock").remove(&d);
        self.revival.lock().expect("revival lock").remove(&d);
        tracing::info!(
            disk = d,
            "answers again and holds current copies: used again"
        );
    }

    /// Disk `d` answered a probe but cannot be used yet (its catalog disagrees, or it failed
    /// again): probed again after its backoff.
    fn not_revived(&self, d: u32) {
        if let Some(r) = self.revival.lock().expect("revival lock").get_mut(&d) {
            r.probed(false);
        }
    }

    /// Takes disk `d`'s copy of `table`'s partition `partition` as corrupt: the catalog lists
    /// it as missing from now on, so queries read another copy.
    pub fn mark_corrupt(&self, table: &str, partition: u32, d: u32) {
        self.corrupt
            .lock()
            .expect("corrupt lock")
            .insert((table.to_string(), partition, d));
    }

    /// Asks every live disk for its status; those that do not answer are taken as dead.
    /// Returns the disks newly taken as dead (after a failed query: the ones to rerun without).
    pub async fn probe(&self) -> Vec<u32> {
        let live = self.live_disks();
        let replies = futures::future::join_all(
            live.iter()
                .map(|d| self.action_json::<DiskStatus>(*d, action::STATUS, vec![])),
        )
        .await;
        let mut newly = Vec::new();
        for (d, r) in live.into_iter().zip(replies) {
            if let Err(e) = r {
                tracing::warn!(disk = d, "taken as dead: {e}");
                self.mark_dead(d, &e.to_string());
                newly.push(d);
            }
        }
        newly
    }

    fn new(
        config: ClusterConfig,
        channels: Vec<tonic::transport::Channel>,
        tls: Option<TlsMaterial>,
    ) -> Result<Self> {
        let auth = config.verifier()?.map(Arc::new);
        let host_link = match config.cluster.host_link_mbps {
            0 => None,
            mbps => Some(Arc::new(crate::client::throttle::TokenBucket::new(mbps))),
        };
        let exchange = std::sync::atomic::AtomicU8::new(exchange_code(config.cluster.exchange));
        Ok(Cluster {
            config,
            channels,
            exchange,
            host_link,
            relay: tokio::sync::OnceCell::new(),
            router: tokio::sync::OnceCell::new(),
            auth,
            tls,
            dead: Default::default(),
            revival: Default::default(),
            corrupt: Default::default(),
            links: Default::default(),
            link_memory: None,
            catalogs: Default::default(),
            merged: Default::default(),
            feedback: Default::default(),
        })
    }

    /// The host link's figures, measured when missing or stale ([`crate::client::links`]).
    pub async fn link_figures(&self) -> crate::client::links::LinkFigures {
        self.links.current(self).await
    }

    /// Measures the host link and the disks' links now and keeps the figures (in the
    /// directory [`Cluster::keep_link_figures_in`] names, if any) with no plan counted.
    pub async fn measure_links(&self) -> crate::client::links::LinkFigures {
        self.links.measure_now(self).await
    }

    /// Keeps the measured link figures in `dir` (`links.json`) for the next process of this
    /// host, and takes young ones from there ([`crate::client::link_memory`]).
    pub fn keep_link_figures_in(mut self, dir: &std::path::Path) -> Self {
        self.link_memory = Some(dir.join(crate::client::link_memory::FILE));
        self
    }

    /// The file link figures are kept in, and the disks' addresses they are of.
    pub(crate) fn link_memory(&self) -> Option<(&std::path::Path, Vec<String>)> {
        let path = self.link_memory.as_deref()?;
        let members = self
            .config
            .disks
            .iter()
            .map(|d| d.address.clone())
            .collect();
        Some((path, members))
    }

    /// The link figures as they stand, measuring nothing (the throttle's, or unmeasured
    /// ones, when none were measured yet): for a record of what ran, not for a plan.
    pub fn known_link_figures(&self) -> crate::client::links::LinkFigures {
        self.links
            .known()
            .unwrap_or_else(|| crate::client::links::LinkFigures::unmeasured(self))
    }

    /// The runs `auto` measured of this host's queries.
    pub fn feedback(&self) -> &crate::client::runs::Feedback {
        &self.feedback
    }

    /// A query received `bytes` from the disks in `elapsed`: a lower bound of the host link's
    /// rate, which raises the measured figure if it is above it ([`crate::client::links`]).
    pub fn observe_transfer(&self, bytes: u64, elapsed: std::time::Duration) {
        self.links.observe(bytes, elapsed);
    }

    /// The host link's token bucket (`host_link_mbps`), shared by every stream to the host and
    /// every stream the host relays; None: unthrottled.
    pub fn host_link(&self) -> Option<&Arc<crate::client::throttle::TokenBucket>> {
        self.host_link.as_ref()
    }

    /// How this host sends disk-to-disk streams from now on (the cluster file's `exchange`
    /// until changed).
    pub fn set_exchange_mode(&self, mode: ExchangeMode) {
        self.exchange
            .store(exchange_code(mode), std::sync::atomic::Ordering::Relaxed);
    }

    /// How disk-to-disk streams travel.
    pub fn exchange_mode(&self) -> ExchangeMode {
        match self.exchange.load(std::sync::atomic::Ordering::Relaxed) {
            0 => ExchangeMode::Direct,
            _ => ExchangeMode::ViaHost,
        }
    }

    /// What the host's exchange relay moved (zero when no stream went via the host).
    pub fn relay_stats(&self) -> crate::client::relay::RelayStats {
        self.relay.get().map(|r| r.stats()).unwrap_or_default()
    }

    /// What the router between disk groups moved (zero when no stream crossed groups).
    pub fn router_stats(&self) -> crate::client::relay::RelayStats {
        self.router.get().map(|r| r.stats()).unwrap_or_default()
    }

    /// The relay's address, starting it on first use.
    async fn relay_address(&self) -> Result<String> {
        self.relay_of(&self.relay, self.host_link.clone(), "exchange relay")
            .await
    }

    /// The router's address, starting it on first use; it pays `router_mbps`.
    async fn router_address(&self) -> Result<String> {
        let limit = match self.config.cluster.router_mbps {
            0 => None,
            mbps => Some(Arc::new(crate::client::throttle::TokenBucket::new(mbps))),
        };
        self.relay_of(&self.router, limit, "router between disk groups")
            .await
    }

    async fn relay_of(
        &self,
        cell: &tokio::sync::OnceCell<crate::client::relay::Relay>,
        limit: Option<Arc<crate::client::throttle::TokenBucket>>,
        what: &str,
    ) -> Result<String> {
        let addresses: Vec<String> = self
            .config
            .disks
            .iter()
            .map(|d| d.address.clone())
            .collect();
        let listen = relay_listen(&addresses);
        let relay = cell
            .get_or_try_init(|| {
                crate::client::relay::Relay::start(
                    &listen,
                    limit,
                    self.auth.clone(),
                    self.tls.clone(),
                    addresses.clone(),
                )
            })
            .await
            .map_err(|e| {
                HostError::Invalid(format!("cannot start the host's {what} on {listen}: {e}"))
            })?;
        Ok(relay.address().to_string())
    }

    /// The address disk `d` reaches a relay bound at `bound` by: `bound` itself, or, for a
    /// relay on every interface, this host's address on the route to disk `d`.
    fn relay_for(&self, d: u32, bound: &str) -> String {
        let Ok(socket) = bound.parse::<std::net::SocketAddr>() else {
            return bound.to_string();
        };
        if !socket.ip().is_unspecified() {
            return bound.to_string();
        }
        local_address_towards(self.address(d)).map_or_else(
            || bound.to_string(),
            |ip| std::net::SocketAddr::new(ip, socket.port()).to_string(),
        )
    }

    /// `spec` as it is sent to disk `d`: in `via-host` mode, its exchange outputs go through
    /// the relay; with disk groups, its streams to disks of another group through the router.
    async fn routed(&self, d: u32, spec: &JobSpec) -> Result<Vec<u8>> {
        let has_exchange = spec.outputs.iter().any(|o| {
            matches!(
                o.sink,
                adisk_core::protocol::Sink::Exchange { relay: None, .. }
            )
        });
        if !has_exchange {
            return Ok(spec.to_bytes());
        }
        let mut spec = spec.clone();
        if self.exchange_mode() == ExchangeMode::ViaHost {
            let relay = self.relay_address().await?;
            spec.relay_exchanges(&self.relay_for(d, &relay));
        } else if self.config.grouped() {
            let group = self.config.group_of(d);
            let crosses = |t: &str| self.config.group_at(t).is_some_and(|g| g != group);
            let any = spec.outputs.iter().any(|o| match &o.sink {
                adisk_core::protocol::Sink::Exchange { targets, .. } => {
                    targets.iter().any(|t| crosses(t))
                }
                _ => false,
            });
            if any {
                let router = self.relay_for(d, &self.router_address().await?);
                spec.relay_targets(|t| crosses(t).then(|| router.clone()));
            }
        }
        Ok(spec.to_bytes())
    }

    /// Like [`Cluster::connect`], but each disk is connected to when first asked: `status`
    /// then reports every disk that answers, and an error for each that does not.
    ///
    /// # Errors
    /// A malformed disk address.
    pub fn connect_lazy(config: ClusterConfig) -> Result<Self> {
        let tls = host_tls(&config)?;
        let channels = config
            .disks
            .iter()
            .map(|d| {
                endpoint(&d.address, config.deadlines(), tls.as_ref())
                    .map(|e| e.connect_with_connector_lazy(adisk_core::net::connector()))
                    .map_err(|e| HostError::Unreachable {
                        disk: d.id,
                        address: d.address.clone(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Cluster::new(config, channels, tls)
    }

    /// The TLS of the links to the disks (`[cluster.tls]`), if any.
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Number of disks.
    pub fn disk_count(&self) -> u32 {
        self.channels.len() as u32
    }

    /// Address of disk `d`.
    pub fn address(&self, d: u32) -> &str {
        &self.config.disks[d as usize].address
    }

    /// A client for one call to disk `d`, carrying a fresh token when the cluster has a key
    /// (a token is good for one request: never reuse the client).
    pub(crate) fn client(&self, d: u32) -> FlightClient {
        let mut client = FlightClient::new(self.channels[d as usize].clone());
        if let Some(auth) = &self.auth {
            // A token is ASCII (scheme, digits, hex): always a valid header value.
            client
                .add_header(adisk_core::auth::HEADER, &auth.key().header())
                .expect("a token is a valid header value");
        }
        client
    }

    /// Runs a Flight action on disk `d` and returns its reply bodies.
    pub async fn action(&self, d: u32, name: &str, body: Vec<u8>) -> Result<Vec<bytes::Bytes>> {
        let mut c = self.client(d);
        let stream = c
            .do_action(Action::new(name, body))
            .await
            .map_err(|e| flight_err(d, self.address(d), e))?;
        stream
            .try_collect()
            .await
            .map_err(|e| flight_err(d, self.address(d), e))
    }

    /// Runs a short control action on disk `d` within the cluster's deadline.
    pub(crate) async fn control(
        &self,
        d: u32,
        name: &str,
        body: Vec<u8>,
    ) -> Result<Vec<bytes::Bytes>> {
        let timeout = self.config.deadlines().timeout;
        tokio::time::timeout(timeout, self.action(d, name, body))
            .await
            .map_err(|_| HostError::Unreachable {
                disk: d,
                address: self.address(d).to_string(),
                message: format!("no answer to `{name}` within {} ms", timeout.as_millis()),
            })?
    }

    async fn action_json<T: serde::de::DeserializeOwned>(
        &self,
        d: u32,
        name: &str,
        body: Vec<u8>,
    ) -> Result<T> {
        let replies = self.control(d, name, body).await?;
        let first = replies.first().ok_or_else(|| HostError::Disk {
            disk: d,
            code: "Internal".into(),
            message: format!("empty reply to {name}"),
        })?;
        serde_json::from_slice(first).map_err(|e| HostError::Disk {
            disk: d,
            code: "Internal".into(),
            message: format!("malformed reply to {name}: {e}"),
        })
    }

    /// Status of every disk (an error per unreachable disk).
    pub async fn status(&self) -> Vec<Result<DiskStatus>> {
        futures::future::join_all(
            (0..self.disk_count())
                .map(|d| self.action_json::<DiskStatus>(d, action::STATUS, vec![])),
        )
        .await
    }

    /// Every disk reads all its partitions and checks them against its manifest (an error per
    /// disk that does not answer). No deadline beyond the connections' keepalive: reading
    /// everything takes as long as it takes.
    pub async fn scrub(&self) -> Vec<Result<adisk_core::protocol::ScrubReport>> {
        futures::future::join_all((0..self.disk_count()).map(|d| async move {
            let replies = self.action(d, action::SCRUB, vec![]).await?;
            let first = replies.first().ok_or_else(|| HostError::Disk {
                disk: d,
                code: "Internal".into(),
                message: "empty reply to scrub".into(),
            })?;
            serde_json::from_slice(first).map_err(|e| HostError::Disk {
                disk: d,
                code: "Internal".into(),
                message: format!("malformed reply to scrub: {e}"),
            })
        }))
        .await
    }

    /// Asks disks `disks` to repair themselves from their peers (see `adisk_disk`'s repair):
    /// each fetches, disk to disk, the copies its tables' latest loads say it holds and it
    /// lacks (with `verify`, also those that fail their check). Runs on all of them at once; an
    /// error per disk that does not answer. No deadline beyond the connections' keepalive.
    pub async fn repair(
        &self,
        disks: &[u32],
        request: &adisk_core::protocol::RepairRequest,
    ) -> Vec<(u32, Result<adisk_core::protocol::RepairReport>)> {
        let body = serde_json::to_vec(request).expect("request serializes");
        let asks = disks.iter().map(|d| {
            let body = body.clone();
            async move {
                let replies = self.action(*d, action::REPAIR, body).await?;
                let first = replies.first().ok_or_else(|| HostError::Disk {
                    disk: *d,
                    code: "Internal".into(),
                    message: "empty reply to repair".into(),
                })?;
                serde_json::from_slice(first).map_err(|e| HostError::Disk {
                    disk: *d,
                    code: "Internal".into(),
                    message: format!("malformed reply to repair: {e}"),
                })
            }
        });
        disks
            .iter()
            .copied()
            .zip(futures::future::join_all(asks).await)
            .collect()
    }

    /// The merged catalog of the live disks (a disk that does not answer is taken as dead). A
    /// table whose disks hold different loads of it is listed in [`Catalog::incomplete`], not
    /// in [`Catalog::tables`]. A replicated table lists each partition once.
    ///
    /// # Errors
    /// A disk failing the request otherwise than by being unreachable; no live disk.
    ///
    /// A dead disk that answers its probes again (see [`Cluster::mark_dead`]) is asked too and
    /// used again when its catalog leaves no table incomplete that was not already.
    pub async fn catalog(&self) -> Result<Catalog> {
        self.probe_dead_disks();
        let candidates = self.revival_candidates();
        let mut asked = self.live_disks();
        asked.extend(&candidates);
        let replies = futures::future::join_all(asked.iter().map(|d| self.disk_catalog(*d))).await;
        let (mut parts, mut returning) = (Vec::new(), Vec::new());
        for (d, r) in asked.into_iter().zip(replies) {
            match r {
                Ok(dc) if candidates.contains(&d) => returning.push((d, dc)),
                Ok(dc) => parts.push((d, dc)),
                Err(_) if candidates.contains(&d) => self.not_revived(d),
                Err(e) if e.is_unreachable() => {
                    tracing::warn!(disk = d, "taken as dead: {e}");
                    self.mark_dead(d, &e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
        if parts.is_empty() && returning.is_empty() {
            return Err(HostError::Unreachable {
                disk: 0,
                address: self.address(0).to_string(),
                message: "no disk of the cluster answers".into(),
            });
        }
        if returning.is_empty() {
            return Ok(self.merged_catalog(&parts));
        }
        let without = self.merge_catalog(&parts, &self.dead_disks());
        let mut dead = self.dead_disks();
        returning.iter().for_each(|(d, _)| {
            dead.remove(d);
        });
        parts.extend(returning.iter().cloned());
        let with = self.merge_catalog(&parts, &dead);
        if with
            .incomplete
            .keys()
            .all(|t| without.incomplete.contains_key(t))
        {
            returning.iter().for_each(|(d, _)| self.revive(*d));
            return Ok(with);
        }
        for (d, _) in &returning {
            tracing::warn!(
                disk = d,
                "answers again but holds other loads than the live disks (`adisk repair --disk {d}`)"
            );
            self.not_revived(*d);
        }
        Ok(without)
    }

    /// Disk `d`'s catalog (without checksums), fetched only when it changed since the copy
    /// this host holds.
    async fn disk_catalog(&self, d: u32) -> Result<Arc<DiskCatalog>> {
        let held = self
            .catalogs
            .lock()
            .expect("catalogs lock")
            .get(&d)
            .cloned();
        let request = adisk_core::protocol::CatalogRequest {
            without_checksums: true,
            known: held
                .as_ref()
                .map(|c| c.version.clone())
                .filter(|v| !v.is_empty()),
            ..Default::default()
        };
        let body = serde_json::to_vec(&request).expect("catalog request serializes");
        let reply: DiskCatalog = self.action_json(d, action::CATALOG, body).await?;
        match (reply.unchanged, held) {
            (true, Some(held)) if held.version == reply.version => Ok(held),
            (true, _) => Err(HostError::Disk {
                disk: d,
                code: "Internal".into(),
                message: format!(
                    "catalog version {} reported unchanged, but this host does not hold it",
                    reply.version
                ),
            }),
            (false, _) => {
                let reply = Arc::new(reply);
                (self.catalogs.lock().expect("catalogs lock")).insert(d, reply.clone());
                Ok(reply)
            }
        }
    }

    /// The catalog the disks' reports `parts` make with the dead disks taken as dead: the last
    /// one merged when made of the same versions, dead disks and corrupt copies.
    fn merged_catalog(&self, parts: &[(u32, Arc<DiskCatalog>)]) -> Catalog {
        let dead = self.dead_disks();
        let key = parts.iter().all(|(_, c)| !c.version.is_empty()).then(|| {
            let versions: Vec<String> = parts
                .iter()
                .map(|(d, c)| format!("{d}:{}", c.version))
                .collect();
            let corrupt = self.corrupt.lock().expect("corrupt lock").clone();
            format!("{} dead {dead:?} corrupt {corrupt:?}", versions.join(","))
        });
        let mut merged = self.merged.lock().expect("merged lock");
        if let Some(held) = merged.as_ref().filter(|c| key.is_some() && c.key == key) {
            return held.clone();
        }
        let catalog = Catalog {
            key: key.clone(),
            ..self.merge_catalog(parts, &dead)
        };
        *merged = key.is_some().then(|| catalog.clone());
        catalog
    }

    /// The catalog the disks' reports `parts` make, with `dead` taken as dead.
    fn merge_catalog(&self, parts: &[(u32, Arc<DiskCatalog>)], dead: &BTreeSet<u32>) -> Catalog {
        let mut reports: BTreeMap<String, Vec<(u32, TableInfo)>> = BTreeMap::new();
        for (d, dc) in parts {
            for t in &dc.tables {
                reports
                    .entry(t.name.clone())
                    .or_default()
                    .push((*d, t.clone()));
            }
        }
        let mut catalog = Catalog::default();
        for (name, reports) in reports {
            match merge_table(&name, reports, dead) {
                Ok(mut entry) => {
                    for (_, p, d) in self
                        .corrupt
                        .lock()
                        .expect("corrupt lock")
                        .iter()
                        .filter(|(t, p, _)| *t == name && entry.copies.contains_key(p))
                    {
                        entry.missing.entry(*p).or_default().insert(*d);
                    }
                    catalog.tables.insert(name, entry);
                }
                Err(why) => {
                    catalog.incomplete.insert(name, why);
                }
            }
        }
        catalog
    }

    /// Statistics of job `job_id` at disk `d`.
    pub async fn job_stats(&self, d: u32, job_id: &str) -> Result<DiskJobStats> {
        self.action_json(d, action::JOB_STATS, job_id.as_bytes().to_vec())
            .await
    }

    /// Seals an endpoint ticket with the cluster key, for a client to read one disk's part of
    /// a result ([`adisk_core::endpoint`]); None when the cluster runs without a key.
    pub fn seal_endpoint(&self, claim: &adisk_core::endpoint::EndpointClaim) -> Option<Vec<u8>> {
        self.auth
            .as_ref()
            .map(|v| adisk_core::endpoint::seal(v, claim))
    }

    /// Starts `spec` on disk `d`; returns its result stream.
    pub async fn start(
        &self,
        d: u32,
        spec: &JobSpec,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let ticket = self.routed(d, spec).await?;
        let mut c = self.client(d);
        let address = self.address(d).to_string();
        let stream = c
            .do_get(Ticket::new(ticket))
            .await
            .map_err(|e| flight_err(d, &address, e))?;
        let stream = adisk_core::ipc::checked(stream);
        Ok(stream.map_err(move |e| flight_err(d, &address, e)).boxed())
    }

    /// Starts jobs that run together (their stages stream to each other), returning their
    /// result streams in the order given. A disk answers a start once it admitted the job (its
    /// grant taken), so the jobs are started one at a time in ascending disk order: every
    /// query takes its disks' grants in the same order, and two queries that each need all
    /// of the disks' memory cannot each hold a disk the other waits for. (Started all at
    /// once, 16 clients at `disks` deadlocked that way until the admission timeout.) Senders
    /// already running wait for their receivers' inboxes meanwhile.
    ///
    /// # Errors
    /// The first job a disk refuses or fails to admit; the streams already started are dropped,
    /// which cancels their jobs.
    pub async fn start_together(
        &self,
        jobs: &[(u32, &JobSpec)],
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|i| jobs[*i].0);
        let mut started: Vec<Option<BoxStream<'static, Result<RecordBatch>>>> =
            (0..jobs.len()).map(|_| None).collect();
        for i in order {
            let (d, spec) = jobs[i];
            started[i] = Some(self.start(d, spec).await?);
        }
        Ok(started.into_iter().flatten().collect())
    }

    /// Runs `spec` (whose source is [`adisk_core::protocol::Source::Host`]) on disk `d`,
    /// streaming `input` to it over Flight `DoExchange`; returns the job's result stream.
    pub async fn exchange(
        &self,
        d: u32,
        spec: &JobSpec,
        schema: SchemaRef,
        input: BoxStream<'static, RecordBatch>,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let command = self.routed(d, spec).await?;
        let mut c = self.client(d);
        let address = self.address(d).to_string();
        let data = arrow_flight::encode::FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_flight_descriptor(Some(arrow_flight::FlightDescriptor::new_cmd(command)))
            .build(input.map(Ok));
        let stream = c
            .do_exchange(data)
            .await
            .map_err(|e| flight_err(d, &address, e))?;
        let stream = adisk_core::ipc::checked(stream);
        Ok(stream.map_err(move |e| flight_err(d, &address, e)).boxed())
    }

    /// Drops a table on every disk.
    pub async fn drop_table(&self, table: &str) -> Result<()> {
        // Every disk is asked, also when one fails (a dead disk must not keep the table on
        // the others); the first error is returned.
        let replies = futures::future::join_all(
            (0..self.disk_count())
                .map(|d| self.control(d, action::DROP_TABLE, table.as_bytes().to_vec())),
        )
        .await;
        replies
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// Asks every disk to shut down (errors ignored: a dead disk is already down).
    pub async fn shutdown(&self) {
        let all: Vec<u32> = (0..self.disk_count()).collect();
        self.shutdown_disks(&all).await;
    }

    /// Asks disks `disks` to shut down (each answers before it stops).
    pub async fn shutdown_disks(&self, disks: &[u32]) {
        futures::future::join_all(
            disks
                .iter()
                .map(|d| self.control(*d, action::SHUTDOWN, vec![])),
        )
        .await;
    }
}

/// An empty schema (for jobs with no output).
pub fn empty_schema() -> SchemaRef {
    Arc::new(Schema::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use adisk_storage::decluster::replica_disks;

    /// `parts` partitions over `disks` disks (`parts / disks` consecutive ones per primary), `r` copies each.
    fn chain(parts: u32, disks: u32, r: u32) -> BTreeMap<u32, Vec<u32>> {
        (0..parts)
            .map(|p| (p, replica_disks(p * disks / parts, r, disks)))
            .collect()
    }

    #[test]
    fn relays_listen_where_the_disks_reach_the_host() {
        let local = |a: &str| local_address_towards(a).map(|ip| ip.to_string());
        assert_eq!(local("127.0.0.1:7000").as_deref(), Some("127.0.0.1"));
        assert_eq!(local("not an address"), None);
        // A local cluster: loopback only, never every interface.
        let loopback = ["127.0.0.1:7000".to_string(), "127.0.0.1:7001".to_string()];
        assert_eq!(relay_listen(&loopback), "127.0.0.1:0");
        // Disks this host reaches by different local addresses (here: loopback and the
        // default route's, when there is one): every interface.
        if let Some(out) = local("192.0.2.1:7000").filter(|ip| ip != "127.0.0.1") {
            let mixed = ["127.0.0.1:7000".to_string(), "192.0.2.1:7000".to_string()];
            assert_eq!(relay_listen(&mixed), "0.0.0.0:0", "{out}");
        }
    }

    fn dead(d: &[u32]) -> BTreeSet<u32> {
        d.iter().copied().collect()
    }

    #[test]
    fn each_partition_is_assigned_once_primary_first() {
        let copies = chain(4, 4, 2);
        assert_eq!(
            assign_copies(&copies, &dead(&[])).unwrap(),
            vec![(0, vec![0]), (1, vec![1]), (2, vec![2]), (3, vec![3])]
        );
        // Disk 2 dead: its partition is read at the next disk of the chain.
        assert_eq!(
            assign_copies(&copies, &dead(&[2])).unwrap(),
            vec![(0, vec![0]), (1, vec![1]), (3, vec![2, 3])]
        );
        // Disk 3 dead: its partition wraps around to disk 0.
        assert_eq!(
            assign_copies(&copies, &dead(&[3])).unwrap(),
            vec![(0, vec![0, 3]), (1, vec![1]), (2, vec![2])]
        );
        // Two adjacent disks dead: partition 1 (disks 1, 2) has no copy left.
        assert_eq!(assign_copies(&copies, &dead(&[1, 2])).unwrap_err(), vec![1]);
        // Two disks apart: every partition still has a copy.
        assert_eq!(
            assign_copies(&copies, &dead(&[0, 2])).unwrap(),
            vec![(1, vec![0, 1]), (3, vec![2, 3])]
        );
    }

    #[test]
    fn a_dead_primarys_partitions_spread_over_its_live_copies() {
        // 8 partitions, 2 per primary, 3 copies: disk 1's two partitions go one to disk 2, one to disk 3.
        let copies = chain(8, 4, 3);
        let assigned = assign_copies(&copies, &dead(&[1])).unwrap();
        assert_eq!(
            assigned,
            vec![(0, vec![0, 1]), (2, vec![2, 4, 5]), (3, vec![3, 6, 7])]
        );
        let mut all: Vec<u32> = assigned.into_iter().flat_map(|(_, p)| p).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..8).collect::<Vec<_>>(),
            "each partition exactly once"
        );
    }

    #[test]
    fn a_table_entry_names_its_lost_partitions() {
        let info = |partition| {
            PartitionInfo { partition, ..serde_json::from_value(serde_json::json!({"partition": 0, "file": "f", "rows": 1, "bytes": 1, "crc32": 0, "row_groups": 1})).unwrap() }
        };
        let entry = TableEntry {
            name: "t".into(),
            schema: empty_schema(),
            placements: (0..4).map(|p| (p, info(p))).collect(),
            copies: chain(4, 4, 2),
            missing: BTreeMap::new(),
            stale: vec![],
        };
        assert_eq!(entry.replicas(), 2);
        assert_eq!(
            entry.assign(&dead(&[2])).unwrap(),
            vec![
                (0, Some(vec![0])),
                (1, Some(vec![1])),
                (3, Some(vec![2, 3]))
            ]
        );
        let e = entry.assign(&dead(&[2, 3])).unwrap_err();
        assert!(
            matches!(&e, HostError::LostPartitions { table, partitions, .. } if table == "t" && partitions == &vec![2]),
            "{e}"
        );
        assert!(
            e.to_string().contains("2 on disks [2, 3]")
                && e.to_string().contains("unreachable: disks 2, 3"),
            "{e}"
        );
        // Without a copy list, a table on a dead disk is lost there.
        let single = TableEntry {
            copies: BTreeMap::new(),
            ..entry
        };
        assert_eq!(
            single.assign(&dead(&[])).unwrap(),
            vec![(0, None), (1, None), (2, None), (3, None)]
        );
        assert!(
            matches!(single.assign(&dead(&[1])), Err(HostError::LostPartitions { partitions, .. }) if partitions == vec![1])
        );
    }

    /// What disks report of a table loaded as `load` with `copies`: each disk in `holding`
    /// lists the partitions whose copies name it.
    fn reports(
        load: &str,
        copies: &BTreeMap<u32, Vec<u32>>,
        holding: &[u32],
    ) -> Vec<(u32, TableInfo)> {
        let info = |partition| {
            PartitionInfo { partition, ..serde_json::from_value(serde_json::json!({"partition": 0, "file": "f", "rows": 10, "bytes": 1, "crc32": 0, "row_groups": 1})).unwrap() }
        };
        let stamp = LoadStamp {
            load_id: load.into(),
            disks: (0..4).collect(),
            copies: copies
                .iter()
                .map(|(p, d)| adisk_core::protocol::PartitionCopies {
                    partition: *p,
                    disks: d.clone(),
                })
                .collect(),
        };
        holding
            .iter()
            .map(|d| {
                let partitions = copies
                    .iter()
                    .filter(|(_, c)| c.contains(d))
                    .map(|(p, _)| info(*p))
                    .collect();
                (
                    *d,
                    TableInfo {
                        name: "t".into(),
                        schema: Schema::empty(),
                        partitions,
                        load: Some(stamp.clone()),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_live_disk_without_its_copies_is_read_around_and_listed_for_repair() {
        let copies = chain(4, 4, 2);
        // Disk 2 came back empty: partitions 1 (disks 1, 2) and 2 (disks 2, 3) are missing there.
        let entry = merge_table("t", reports("b", &copies, &[0, 1, 3]), &dead(&[])).unwrap();
        assert_eq!(entry.missing_by_disk(), vec![(2, vec![1, 2])]);
        assert!(entry.needs_repair());
        assert_eq!(entry.rows(), 40, "each partition once");
        assert_eq!(
            entry.assign(&dead(&[])).unwrap(),
            vec![
                (0, Some(vec![0])),
                (1, Some(vec![1])),
                (3, Some(vec![2, 3]))
            ]
        );
        // Disk 2 holds an older load: ignored, listed as stale.
        let mut r = reports("b", &copies, &[0, 1, 3]);
        r.extend(reports("a", &copies, &[2]));
        let entry = merge_table("t", r, &dead(&[])).unwrap();
        assert_eq!(
            (entry.stale.clone(), entry.missing_by_disk()),
            (vec![2], vec![(2, vec![1, 2])])
        );
        assert_eq!(entry.rows(), 40);
        // Disk 3 dead as well: partition 2 has no usable copy; a typed error names it.
        let entry = merge_table("t", reports("b", &copies, &[0, 1]), &dead(&[3])).unwrap();
        assert!(
            matches!(entry.assign(&dead(&[3])), Err(HostError::LostPartitions { partitions, .. }) if partitions == vec![2])
        );
        // All copies present: nothing to repair.
        assert!(
            !merge_table("t", reports("b", &copies, &[0, 1, 2, 3]), &dead(&[]))
                .unwrap()
                .needs_repair()
        );
    }

    #[test]
    fn a_partition_no_live_disk_holds_makes_the_table_incomplete() {
        // One copy each, disk 2 came back empty: partition 2 exists nowhere.
        let single = chain(4, 4, 1);
        let why = merge_table("t", reports("b", &single, &[0, 1, 3]), &dead(&[])).unwrap_err();
        assert_eq!(why.disks, vec![2]);
        assert!(
            why.reason.contains("disk 2: missing") && why.reason.contains("partitions [2]"),
            "{}",
            why.reason
        );
        // Killed between two disks' commits: disk 0 has the new load, the others the old one.
        let mut r = reports("b", &single, &[0]);
        r.extend(reports("a", &single, &[1, 2, 3]));
        let why = merge_table("t", r, &dead(&[])).unwrap_err();
        assert_eq!(why.disks, vec![1, 2, 3]);
        // A dead disk's partitions are lost, not missing: the table stays complete.
        assert!(merge_table("t", reports("b", &single, &[0, 1, 3]), &dead(&[2])).is_ok());
    }

    #[test]
    fn a_dead_disk_is_not_a_missing_copy() {
        let stamp = LoadStamp {
            load_id: "a".into(),
            disks: vec![0, 1, 2],
            copies: vec![],
        };
        let stamps = vec![(0, Some(stamp.clone())), (1, Some(stamp))];
        assert!(check_generation(&stamps, &dead(&[2])).is_ok());
        assert_eq!(
            check_generation(&stamps, &dead(&[])).unwrap_err().0,
            vec![2]
        );
    }
}
