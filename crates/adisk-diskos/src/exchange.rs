//! Inboxes of disk-to-disk pipe streams.
//!
//! The receiving job ([`adisk_core::protocol::Source::Pipe`]) and the senders (`DoPut` calls
//! from other disks) meet at an inbox named by the exchange id; whichever arrives first
//! creates it. The inbox is a bounded channel, so a slow receiver holds back the senders'
//! `DoPut` streams (backpressure across the network).
//!
//! The inbox belongs to the receiving job: senders wait until that job was admitted and claimed
//! it ([`InboxTerms`]), then every buffer they queue is charged to the job's grant and is at most
//! one of its stream buffers (larger messages are cut; far larger ones refused), so an inbox
//! never holds more than its share of the grant: [`ExchangeRegistry::capacity`] buffers queued,
//! plus one message of up to 2 buffers per sender waiting for room.
use crate::memory::{Account, Held};
use crate::stream::{Buffer, cut};
use arrow::array::RecordBatch;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// What senders put into an inbox.
pub enum PipeMessage {
    /// A buffer from a sender, charged to the receiving job.
    Batch(Buffer),
    /// Sender `n` finished cleanly.
    SenderDone(u32),
    /// Sender `n` failed: why, and whether its link did (else the sender said it failed).
    SenderFailed(u32, String, bool),
}

/// What the receiving job grants its inbox.
#[derive(Clone, Debug)]
pub struct InboxTerms {
    /// The receiving job's account: queued buffers are charged to it.
    pub account: Arc<Account>,
    /// The receiving job's stream buffer size.
    pub buffer_bytes: u64,
}

struct Inbox {
    tx: mpsc::Sender<PipeMessage>,
    rx: Option<mpsc::Receiver<PipeMessage>>,
    terms: watch::Sender<Option<InboxTerms>>,
    created: Instant,
}

/// How long a sender waits for the receiving job to claim its inbox.
pub const INBOX_CLAIM_TIMEOUT: Duration = Duration::from_secs(120);

/// Pipe messages larger than this many of the receiver's buffers are refused, not cut.
pub const MAX_MESSAGE_BUFFERS: u64 = 2;

/// A sender's handle on an inbox.
pub struct InboxSender {
    tx: mpsc::Sender<PipeMessage>,
    terms: watch::Receiver<Option<InboxTerms>>,
}

impl InboxSender {
    /// Waits until the receiving job claimed the inbox (at most `timeout`).
    ///
    /// # Errors
    /// No receiver within `timeout`, or the inbox was dropped.
    pub async fn claimed(&mut self, timeout: Duration) -> Result<InboxTerms, String> {
        match tokio::time::timeout(timeout, self.terms.wait_for(Option::is_some)).await {
            Ok(Ok(terms)) => Ok(terms.clone().expect("waited for it")),
            Ok(Err(_)) => Err("the exchange's inbox was closed before its receiver came".into()),
            Err(_) => Err(format!(
                "no receiving job claimed the exchange within {} s",
                timeout.as_secs()
            )),
        }
    }

    /// Queues `batch` under `terms`, cut into the receiver's buffers and charged to it.
    ///
    /// # Errors
    /// The batch is over [`MAX_MESSAGE_BUFFERS`] buffers, a row is over one, or the receiver is gone.
    pub async fn send_batch(&self, batch: RecordBatch, terms: &InboxTerms) -> Result<(), String> {
        let bytes = adisk_core::stats::batch_bytes(&batch);
        let cap = terms.buffer_bytes.saturating_mul(MAX_MESSAGE_BUFFERS);
        if bytes > cap {
            return Err(format!(
                "a pipe message of {bytes} bytes exceeds the receiving job's limit of {cap} bytes ({MAX_MESSAGE_BUFFERS} stream buffers)"
            ));
        }
        let mut held = Held::new(&terms.account, bytes);
        for piece in
            cut(&batch, crate::stream::buffer_cap(terms.buffer_bytes)).map_err(|e| e.to_string())?
        {
            held.release(adisk_core::stats::batch_bytes(&piece));
            let buffer = Buffer::new(piece, 0, &terms.account);
            self.tx
                .send(PipeMessage::Batch(buffer))
                .await
                .map_err(|_| "the receiving job is gone".to_string())?;
        }
        Ok(())
    }

    /// Queues an end-of-stream or failure notice.
    pub async fn send(&self, message: PipeMessage) -> Result<(), String> {
        self.tx
            .send(message)
            .await
            .map_err(|_| "the receiving job is gone".to_string())
    }
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
        ExchangeRegistry {
            inboxes: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn entry<'a>(
        &self,
        map: &'a mut HashMap<String, Inbox>,
        id: &str,
    ) -> Result<&'a mut Inbox, String> {
        map.retain(|_, inbox| inbox.created.elapsed() < INBOX_TTL || inbox.rx.is_none());
        if !map.contains_key(id) {
            if map.len() >= MAX_INBOXES {
                return Err(format!("too many open exchanges ({MAX_INBOXES})"));
            }
            let (tx, rx) = mpsc::channel(self.capacity);
            map.insert(
                id.to_string(),
                Inbox {
                    tx,
                    rx: Some(rx),
                    terms: watch::Sender::new(None),
                    created: Instant::now(),
                },
            );
        }
        Ok(map.get_mut(id).expect("just inserted"))
    }

    /// The sending side of exchange `id`.
    ///
    /// # Errors
    /// The exchange's receiver already ended, or too many inboxes are open.
    pub fn sender(&self, id: &str) -> Result<InboxSender, String> {
        if self.closed.lock().expect("closed lock").contains_key(id) {
            return Err(format!(
                "exchange `{id}` has ended at this disk (its receiving job is gone)"
            ));
        }
        let mut map = self.inboxes.lock().expect("exchange lock");
        let inbox = self.entry(&mut map, id)?;
        Ok(InboxSender {
            tx: inbox.tx.clone(),
            terms: inbox.terms.subscribe(),
        })
    }

    /// Drops exchange `id`'s inbox if no job claimed it and no sender but the caller's `held`
    /// ones holds it: a sender that gave up (its job was cancelled, its claim timed out)
    /// leaves no inbox behind.
    pub fn forget_unclaimed(&self, id: &str, held: usize) {
        let mut map = self.inboxes.lock().expect("exchange lock");
        if let Some(inbox) = map.get(id)
            && inbox.rx.is_some()
            && inbox.tx.strong_count() <= 1 + held
        {
            map.remove(id);
        }
    }

    /// The receiving side of exchange `id` (once), claimed by a job under `terms`.
    pub fn receiver(
        &self,
        id: &str,
        terms: InboxTerms,
    ) -> Result<mpsc::Receiver<PipeMessage>, String> {
        let mut map = self.inboxes.lock().expect("exchange lock");
        let inbox = self.entry(&mut map, id)?;
        let rx = inbox
            .rx
            .take()
            .ok_or_else(|| format!("exchange `{id}` already has a receiver"))?;
        inbox.terms.send_replace(Some(terms));
        Ok(rx)
    }

    /// Messages an inbox queues.
    pub fn capacity(&self) -> usize {
        self.capacity
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
            && let Some(oldest) = closed
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone())
        {
            closed.remove(&oldest);
        }
        closed.insert(id.to_string(), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(buffer_bytes: u64) -> InboxTerms {
        InboxTerms {
            account: Arc::new(Account::default()),
            buffer_bytes,
        }
    }

    fn ints(n: i64) -> RecordBatch {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("x", arrow::datatypes::DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow::array::Int64Array::from_iter_values(0..n))],
        )
        .unwrap()
    }

    #[test]
    fn inboxes_open_once_and_late_senders_are_refused() {
        let r = ExchangeRegistry::new(2);
        let tx = r.sender("x").unwrap();
        let _rx = r.receiver("x", terms(1024)).unwrap();
        assert!(
            r.receiver("x", terms(1024)).is_err(),
            "one receiver per exchange"
        );
        assert_eq!(r.open(), 1);
        drop(tx);
        r.remove("x");
        assert_eq!(r.open(), 0);
        let late = r.sender("x").err().map(|e| e.to_string()).unwrap();
        assert!(late.contains("has ended"), "{late}");
        assert_eq!(r.open(), 0, "a late sender opens no inbox");
    }

    /// A flood into an inbox stays within the receiver's share: a sender waits for the claim,
    /// messages are cut into buffers and charged, the queue bounds how many wait, and a
    /// message far over a buffer is refused.
    #[tokio::test]
    async fn an_inbox_flood_stays_within_the_receivers_grant() {
        let r = ExchangeRegistry::new(2);
        let mut tx = r.sender("x").unwrap();
        assert!(
            tx.claimed(Duration::from_millis(50))
                .await
                .unwrap_err()
                .contains("no receiving job")
        );
        let buffer_bytes = 8 * 1024; // 1024 Int64 rows
        let t = terms(buffer_bytes);
        let mut rx = r.receiver("x", t.clone()).unwrap();
        let claimed = tx.claimed(Duration::from_secs(1)).await.unwrap();
        assert_eq!(claimed.buffer_bytes, buffer_bytes);
        let flood = tokio::spawn(async move {
            for _ in 0..50 {
                tx.send_batch(ints(1500), &claimed).await.unwrap(); // 1.5 buffers: cut in two
            }
            tx.send_batch(ints(10_000), &claimed).await
        });
        let mut rows = 0;
        while rows < 50 * 1500 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let Some(PipeMessage::Batch(b)) = rx.recv().await else {
                panic!("a batch")
            };
            assert!(b.bytes() <= crate::stream::buffer_cap(buffer_bytes));
            rows += b.batch.num_rows();
        }
        let refused = flood.await.unwrap().unwrap_err();
        assert!(
            refused.contains("exceeds the receiving job's limit"),
            "{refused}"
        );
        let share = (r.capacity() as u64 + 2) * crate::stream::buffer_cap(buffer_bytes);
        assert!(
            t.account.peak() <= share,
            "peak {} of the inbox's share {share}",
            t.account.peak()
        );
        assert_eq!(t.account.in_use(), 0, "every buffer released once received");
    }
}
