//! The traces of the service's last queries (issue 37): after each statement answered
//! through the service, its trace (the `adisk-trace` document `adisk sql --trace` writes,
//! which `adisk sim replay` reads) is kept in memory — the last `keep` of them, and at most
//! [`MAX_BYTES`] together — and served to the user who ran it by the actions
//! [`LIST_ACTION`] (the kept queries) and [`GET_ACTION`] (one trace, by id or by the
//! statement's handle). `adisk traces` and `adisk sql --connect … --trace` read them.
//!
//! A trace is made after the rows were handed on, on a task of its own, with the link figures
//! the host has (recording never probes a link): a request for it waits until it is there, at
//! most [`WAIT_FOR`].
use adisk_host::sql::metrics::ScanReport;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tonic::Status;

/// The action listing the kept traces of the calling user (JSON: a list of [`TraceEntry`]).
pub const LIST_ACTION: &str = "adisk.traces";
/// The action returning one kept trace (body: a JSON [`TraceRequest`]; result: the trace).
pub const GET_ACTION: &str = "adisk.trace";
/// Traces kept unless `adisk serve --keep-traces` says otherwise.
pub const DEFAULT_KEEP: usize = 32;
/// The most bytes (their JSON) all kept traces may take together; the oldest go first.
pub const MAX_BYTES: usize = 32 << 20;
/// How long a request waits for a trace still being made.
pub const WAIT_FOR: Duration = Duration::from_secs(10);
/// The most characters of a query's text a listing shows.
const TEXT_CHARS: usize = 200;

/// One kept query, as listed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TraceEntry {
    /// The service's number for the query (counting from 1 since it started).
    pub id: u64,
    /// The statement's handle (hex), as in the client's ticket.
    pub handle: String,
    /// Who ran it.
    pub user: String,
    /// When it ended, seconds since the Unix epoch.
    pub ended_unix_s: f64,
    /// Its time at the host, ms (planning included).
    pub wall_ms: f64,
    /// Result rows.
    pub rows: u64,
    /// The query's text (its first 200 characters).
    pub text: String,
    /// The trace's size, bytes (0 while it is being made).
    pub bytes: u64,
}

/// Which trace [`GET_ACTION`] asks for: by `id`, or by the statement's `handle` (hex).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TraceRequest {
    /// The query's number ([`TraceEntry::id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The statement's handle, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
}

struct Kept {
    entry: TraceEntry,
    trace: watch::Receiver<Option<Arc<Vec<u8>>>>,
}

#[derive(Default)]
struct State {
    next: u64,
    kept: VecDeque<Kept>,
    bytes: usize,
}

/// The kept traces.
pub struct TraceStore {
    keep: AtomicUsize,
    max_bytes: usize,
    state: Mutex<State>,
}

/// What a query left for its trace: made into one by [`TraceStore::record`].
pub struct Finished<'a> {
    /// The statement's handle.
    pub handle: &'a [u8],
    /// Who ran it.
    pub user: &'a str,
    /// Its text.
    pub text: &'a str,
    /// Its scans' reports.
    pub scans: Vec<ScanReport>,
    /// Its time at the host.
    pub wall: Duration,
    /// The host's CPU time meanwhile, ns.
    pub host_cpu_ns: u64,
    /// Result rows.
    pub rows: u64,
}

impl TraceStore {
    /// A store keeping the last `keep` traces (0: none), at most `max_bytes` together.
    pub fn new(keep: usize, max_bytes: usize) -> Self {
        TraceStore {
            keep: AtomicUsize::new(keep),
            max_bytes,
            state: Mutex::default(),
        }
    }

    /// Keeps the last `keep` from now on (0: none; those kept past it go at the next query).
    pub fn set_keep(&self, keep: usize) {
        self.keep.store(keep, Ordering::Relaxed);
    }

    fn keep(&self) -> usize {
        self.keep.load(Ordering::Relaxed)
    }

    /// Whether traces are kept at all.
    pub fn enabled(&self) -> bool {
        self.keep() > 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the trace of `q` (made on a task of its own, over `cluster`); its id (0: traces
    /// are not kept).
    pub fn record(self: &Arc<Self>, q: Finished<'_>, cluster: Arc<adisk_host::Cluster>) -> u64 {
        let Some((id, tx)) = self.reserve(&q) else {
            return 0;
        };
        let (store, text) = (self.clone(), q.text.to_string());
        let (scans, wall, cpu) = (q.scans, q.wall, q.host_cpu_ns);
        tokio::spawn(async move {
            let figures = cluster.known_link_figures();
            let trace =
                adisk_host::sql::trace::trace_of(&scans, wall, cpu, &text, &cluster, figures);
            match serde_json::to_vec(&trace) {
                Ok(bytes) => store.fill(id, &tx, bytes),
                Err(e) => tracing::warn!("query {id}: its trace could not be encoded: {e}"),
            }
        });
        id
    }

    /// A place for `q`'s trace, listed at once; its id and where the trace goes.
    fn reserve(&self, q: &Finished<'_>) -> Option<(u64, watch::Sender<Option<Arc<Vec<u8>>>>)> {
        if !self.enabled() {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        let mut s = self.state();
        s.next += 1;
        let entry = TraceEntry {
            id: s.next,
            handle: hex::encode(q.handle),
            user: q.user.to_string(),
            ended_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            wall_ms: q.wall.as_secs_f64() * 1e3,
            rows: q.rows,
            text: q.text.chars().take(TEXT_CHARS).collect(),
            bytes: 0,
        };
        s.kept.push_back(Kept { entry, trace: rx });
        self.evict(&mut s);
        Some((s.next, tx))
    }

    /// Query `id`'s trace is `bytes`.
    fn fill(&self, id: u64, tx: &watch::Sender<Option<Arc<Vec<u8>>>>, bytes: Vec<u8>) {
        self.filled(id, bytes.len());
        let _ = tx.send(Some(Arc::new(bytes)));
    }

    /// Counts the `size` bytes of query `id`'s trace, and drops the oldest past the bounds.
    fn filled(&self, id: u64, size: usize) {
        let mut s = self.state();
        let Some(k) = s.kept.iter_mut().find(|k| k.entry.id == id) else {
            return; // already dropped
        };
        k.entry.bytes = size as u64;
        s.bytes += size;
        self.evict(&mut s);
    }

    /// Drops the oldest traces while more than `keep` are kept or they take more than
    /// `max_bytes` (the newest stays, whatever its size, until the next one comes).
    fn evict(&self, s: &mut State) {
        while s.kept.len() > self.keep() || (s.bytes > self.max_bytes && s.kept.len() > 1) {
            let Some(old) = s.kept.pop_front() else {
                break;
            };
            s.bytes -= old.entry.bytes as usize;
        }
    }

    /// The kept queries of `user`, oldest first.
    pub fn list(&self, user: &str) -> Vec<TraceEntry> {
        let s = self.state();
        let mine = s.kept.iter().filter(|k| k.entry.user == user);
        mine.map(|k| k.entry.clone()).collect()
    }

    /// The trace `req` names, if `user` ran it and it is still kept (waiting for it to be
    /// made, at most [`WAIT_FOR`]).
    ///
    /// # Errors
    /// `NotFound` for a query not kept (or another user's); `InvalidArgument` for a request
    /// naming none; `DeadlineExceeded` for a trace not made in time.
    pub async fn get(&self, user: &str, req: &TraceRequest) -> Result<Arc<Vec<u8>>, Status> {
        if !self.enabled() {
            return Err(Status::failed_precondition(
                "this service keeps no traces (started with --keep-traces 0)",
            ));
        }
        let what = match (&req.id, &req.handle) {
            (Some(id), _) => format!("query {id}"),
            (None, Some(h)) => format!("the query of statement {h}"),
            (None, None) => {
                return Err(Status::invalid_argument(
                    "adisk.trace: give the query's `id` or its statement's `handle`",
                ));
            }
        };
        let found = {
            let s = self.state();
            s.kept
                .iter()
                .find(|k| {
                    k.entry.user == user
                        && req.id.is_none_or(|id| id == k.entry.id)
                        && req.handle.as_ref().is_none_or(|h| *h == k.entry.handle)
                })
                .map(|k| k.trace.clone())
        };
        let mut rx = found.ok_or_else(|| {
            Status::not_found(format!(
                "no trace of {what} for user {user}: the service keeps the last {} queries' traces (`adisk traces` lists them)",
                self.keep()
            ))
        })?;
        let made = tokio::time::timeout(WAIT_FOR, rx.wait_for(Option::is_some)).await;
        match made {
            Ok(Ok(t)) => Ok(t.clone().unwrap_or_default()),
            Ok(Err(_)) => Err(Status::internal(format!(
                "the trace of {what} could not be made"
            ))),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "the trace of {what} was not made within {} s",
                WAIT_FOR.as_secs()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query<'a>(user: &'a str, text: &'a str) -> Finished<'a> {
        Finished {
            handle: b"h",
            user,
            text,
            scans: vec![],
            wall: Duration::from_millis(5),
            host_cpu_ns: 0,
            rows: 1,
        }
    }

    fn by_id(id: u64) -> TraceRequest {
        TraceRequest {
            id: Some(id),
            handle: None,
        }
    }

    /// The last `keep` are kept, within the byte bound; each user sees only their own; a
    /// request waits for a trace being made.
    #[tokio::test]
    async fn the_last_traces_are_kept_for_their_user_within_bounds() {
        let store = TraceStore::new(2, 100);
        let mut ids = vec![];
        for (user, bytes) in [("ann", 10), ("bob", 20), ("ann", 30)] {
            let (id, tx) = store.reserve(&query(user, "select 1")).unwrap();
            store.fill(id, &tx, vec![b'x'; bytes]);
            ids.push(id);
        }
        assert_eq!(ids, vec![1, 2, 3]);
        let ann: Vec<u64> = store.list("ann").iter().map(|e| e.id).collect();
        assert_eq!(ann, vec![3], "query 1 went: only 2 are kept");
        assert_eq!(store.list("bob")[0].bytes, 20);
        assert_eq!(store.get("ann", &by_id(3)).await.unwrap().len(), 30);
        let e = store.get("ann", &by_id(2)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "bob's is not ann's");
        let e = store
            .get("ann", &TraceRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        // 80 bytes more pass the 100-byte bound: the oldest go until it holds.
        let (id, tx) = store.reserve(&query("bob", "select 2")).unwrap();
        store.fill(id, &tx, vec![b'y'; 80]);
        assert_eq!(store.list("ann").len(), 0);
        let handle = TraceRequest {
            id: None,
            handle: Some(hex::encode(b"h")),
        };
        assert_eq!(store.get("bob", &handle).await.unwrap().len(), 80);
        // A trace still being made is waited for.
        let (id, tx) = store.reserve(&query("ann", "select 3")).unwrap();
        let store = Arc::new(store);
        let s2 = store.clone();
        let waiter = tokio::spawn(async move { s2.get("ann", &by_id(id)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        store.fill(id, &tx, vec![b'z'; 7]);
        assert_eq!(waiter.await.unwrap().unwrap().len(), 7);
    }

    #[tokio::test]
    async fn a_store_keeping_none_says_so() {
        let store = TraceStore::new(0, MAX_BYTES);
        assert!(store.reserve(&query("ann", "x")).is_none());
        let e = store.get("ann", &by_id(1)).await.unwrap_err();
        assert!(e.message().contains("--keep-traces 0"), "{e}");
    }
}
