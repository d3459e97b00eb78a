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
    /// Exchanges whose receiver has ended, with when: a late sender is refused instead of
    /// opening an inbox nobody will read.
    closed: Mutex<HashMap<String, Instant>>,
    capacity: usize,
}

/// Ended exchanges remembered (the oldest are forgotten first).
pub const MAX_CLOSED_EXCHANGES: usize = 4096;

/// Inboxes nobody claimed for this long are dropped.
pub const INBOX_TTL: Duration = Duration::from_secs(600);
/// Upper bound on concurrently open inboxes.
pub const MAX_INBOXES: usize = 4096;

impl ExchangeRegistry {
    /// Inboxes of `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        ExchangeRegistry { inboxes: Mutex::new(HashMap::new()), closed: Mutex::new(HashMap::new()), capacity: capacity.max(1) }
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
    ///
    /// # Errors
    /// The exchange's receiver already ended, or too many inboxes are open.
    pub fn sender(&self, id: &str) -> Result<mpsc::Sender<PipeMessage>, String> {
        if self.closed.lock().expect("closed lock").contains_key(id) {
            return Err(format!("exchange `{id}` has ended at this disk (its receiving job is gone)"));
        }
        let mut map = self.inboxes.lock().expect("exchange lock");
        Ok(self.entry(&mut map, id)?.tx.clone())
    }

    /// The receiving side of exchange `id` (once).
    pub fn receiver(&self, id: &str) -> Result<mpsc::Receiver<PipeMessage>, String> {
        let mut map = self.inboxes.lock().expect("exchange lock");
        self.entry(&mut map, id)?.rx.take().ok_or_else(|| format!("exchange `{id}` already has a receiver"))
    }

    /// Inboxes open now.
    pub fn open(&self) -> usize {
        self.inboxes.lock().expect("exchange lock").len()
    }

    /// Forgets exchange `id` (the receiver ended, however it ended); later senders are refused.
    pub fn remove(&self, id: &str) {
        self.inboxes.lock().expect("exchange lock").remove(id);
        let mut closed = self.closed.lock().expect("closed lock");
        if closed.len() >= MAX_CLOSED_EXCHANGES
            && let Some(oldest) = closed.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone())
        {
            closed.remove(&oldest);
        }
        closed.insert(id.to_string(), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inboxes_open_once_and_late_senders_are_refused() {
        let r = ExchangeRegistry::new(2);
        let tx = r.sender("x").unwrap();
        let _rx = r.receiver("x").unwrap();
        assert!(r.receiver("x").is_err(), "one receiver per exchange");
        assert_eq!(r.open(), 1);
        drop(tx);
        r.remove("x");
        assert_eq!(r.open(), 0);
        let late = r.sender("x").err().unwrap();
        assert!(late.contains("has ended"), "{late}");
        assert_eq!(r.open(), 0, "a late sender opens no inbox");
    }
}
