//! Inboxes of disk-to-disk pipe streams.
//!
//! The receiving job ([`adisk_core::protocol::Source::Pipe`]) and the senders (`DoPut` calls
//! from other disks) meet at an inbox named by the exchange id; whichever arrives first
//! creates it. The inbox is a bounded channel, so a slow receiver holds back the senders'
//! `DoPut` streams (backpressure across the network).
use arrow::array::RecordBatch;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What senders put into an inbox.
#[derive(Debug)]
pub enum PipeMessage {
    /// A batch from a sender.
    Batch(RecordBatch),
    /// Sender `n` finished cleanly.
    SenderDone(u32),
    /// Sender `n` failed.
    SenderFailed(u32, String),
}

struct Inbox {
    tx: mpsc::Sender<PipeMessage>,
    rx: Option<mpsc::Receiver<PipeMessage>>,
    created: Instant,
}

/// Inboxes of one disk.
pub struct ExchangeRegistry {
    inboxes: Mutex<HashMap<String, Inbox>>,
    capacity: usize,
}

/// Inboxes nobody claimed for this long are dropped.
pub const INBOX_TTL: Duration = Duration::from_secs(600);
/// Upper bound on concurrently open inboxes.
pub const MAX_INBOXES: usize = 4096;

impl ExchangeRegistry {
    /// Inboxes of `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        ExchangeRegistry { inboxes: Mutex::new(HashMap::new()), capacity: capacity.max(1) }
    }

    fn entry<'a>(&self, map: &'a mut HashMap<String, Inbox>, id: &str) -> Result<&'a mut Inbox, String> {
        map.retain(|_, inbox| inbox.created.elapsed() < INBOX_TTL || inbox.rx.is_none());
        if !map.contains_key(id) {
            if map.len() >= MAX_INBOXES {
                return Err(format!("too many open exchanges ({MAX_INBOXES})"));
            }
            let (tx, rx) = mpsc::channel(self.capacity);
            map.insert(id.to_string(), Inbox { tx, rx: Some(rx), created: Instant::now() });
        }
        Ok(map.get_mut(id).expect("just inserted"))
    }

    /// The sending side of exchange `id`.
    pub fn sender(&self, id: &str) -> Result<mpsc::Sender<PipeMessage>, String> {
        let mut map = self.inboxes.lock().expect("exchange lock");
        Ok(self.entry(&mut map, id)?.tx.clone())
    }

    /// The receiving side of exchange `id` (once).
    pub fn receiver(&self, id: &str) -> Result<mpsc::Receiver<PipeMessage>, String> {
        let mut map = self.inboxes.lock().expect("exchange lock");
        self.entry(&mut map, id)?.rx.take().ok_or_else(|| format!("exchange `{id}` already has a receiver"))
    }

    /// Forgets exchange `id` (the receiver finished).
    pub fn remove(&self, id: &str) {
        self.inboxes.lock().expect("exchange lock").remove(id);
    }
}
