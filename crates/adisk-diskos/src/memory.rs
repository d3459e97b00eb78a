//! The DiskOS memory budget.
//!
//! A disk has a fixed budget (`--memory-mib`). A job asks, at admission, for everything it
//! will use: `buffers_per_stream × buffer_bytes` for each of its streams plus each disklet's
//! scratch. The grant is taken from a FIFO semaphore counted in KiB, so a job either gets all
//! of it or waits; at most `max_waiting` jobs wait, each at most `admission_timeout`; a
//! request larger than the whole budget is refused at once. Buffers in flight are charged to
//! the job's [`Account`] when created and released when dropped, which gives the peak reported
//! in the job statistics.
use crate::{DiskOsError, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Granularity of grants.
const GRANULE_BYTES: u64 = 1024;

/// The budget of one disk.
pub struct MemoryBudget {
    total_bytes: u64,
    semaphore: Arc<Semaphore>,
    waiting: AtomicU32,
    max_waiting: u32,
    admission_timeout: Duration,
}

impl MemoryBudget {
    /// A budget of `total_bytes`; at most `max_waiting` jobs queue, each for at most `admission_timeout`.
    pub fn new(total_bytes: u64, max_waiting: u32, admission_timeout: Duration) -> Self {
        let permits = (total_bytes / GRANULE_BYTES) as usize;
        MemoryBudget {
            total_bytes,
            semaphore: Arc::new(Semaphore::new(permits)),
            waiting: AtomicU32::new(0),
            max_waiting,
            admission_timeout,
        }
    }

    /// Budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes currently granted.
    pub fn granted_bytes(&self) -> u64 {
        self.total_bytes - self.semaphore.available_permits() as u64 * GRANULE_BYTES
    }

    /// Jobs waiting for a grant.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Grants `bytes`, waiting in FIFO order if needed.
    ///
    /// # Errors
    /// [`DiskOsError::GrantTooLarge`], [`DiskOsError::AdmissionQueueFull`], [`DiskOsError::AdmissionTimeout`].
    pub async fn grant(&self, bytes: u64) -> Result<Grant> {
        let permits = bytes.div_ceil(GRANULE_BYTES).max(1);
        if permits * GRANULE_BYTES > self.total_bytes {
            return Err(DiskOsError::GrantTooLarge {
                requested_bytes: bytes,
                budget_bytes: self.total_bytes,
            });
        }
        let permits = u32::try_from(permits).map_err(|_| DiskOsError::GrantTooLarge {
            requested_bytes: bytes,
            budget_bytes: self.total_bytes,
        })?;
        if let Ok(permit) = self.semaphore.clone().try_acquire_many_owned(permits) {
            return Ok(Grant::new(permit, bytes));
        }
        let before = self.waiting.fetch_add(1, Ordering::SeqCst);
        if before >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(DiskOsError::AdmissionQueueFull { waiting: before });
        }
        let acquired = tokio::time::timeout(
            self.admission_timeout,
            self.semaphore.clone().acquire_many_owned(permits),
        )
        .await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match acquired {
            Ok(Ok(permit)) => Ok(Grant::new(permit, bytes)),
            Ok(Err(_closed)) => Err(DiskOsError::Cancelled),
            Err(_elapsed) => Err(DiskOsError::AdmissionTimeout {
                waited_ms: self.admission_timeout.as_millis() as u64,
                requested_bytes: bytes,
                granted_bytes: self.granted_bytes(),
                budget_bytes: self.total_bytes,
            }),
        }
    }
}

/// Memory granted to one job; returned to the budget when dropped.
pub struct Grant {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
    account: Arc<Account>,
}

impl Grant {
    fn new(permit: OwnedSemaphorePermit, bytes: u64) -> Self {
        Grant {
            _permit: permit,
            bytes,
            account: Arc::new(Account::default()),
        }
    }
    /// Bytes granted.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The job's usage account.
    pub fn account(&self) -> &Arc<Account> {
        &self.account
    }
}

/// Memory in use under a grant: stream buffers in flight plus scratch reported by disklets.
#[derive(Default, Debug)]
pub struct Account {
    in_use: AtomicU64,
    peak: AtomicU64,
}

impl Account {
    /// Charges `bytes`.
    pub fn charge(&self, bytes: u64) {
        let now = self.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    /// Releases `bytes`.
    pub fn release(&self, bytes: u64) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }
    /// Replaces a previously charged amount (scratch that grew or shrank).
    pub fn adjust(&self, old: u64, new: u64) {
        if new >= old {
            self.charge(new - old);
        } else {
            self.release(old - new);
        }
    }
    /// Bytes in use now.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }
    /// Peak bytes in use.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// Bytes a producer holds outside any stream buffer (emitted output not yet forwarded, the
/// rest of a decoded batch not yet cut into buffers), charged to its job until released.
pub struct Held {
    account: Arc<Account>,
    bytes: u64,
}

impl Held {
    /// Charges `bytes` to `account` until released or dropped.
    pub fn new(account: &Arc<Account>, bytes: u64) -> Self {
        account.charge(bytes);
        Held {
            account: account.clone(),
            bytes,
        }
    }
    /// Releases `bytes` of the charge (those moved into a buffer, which charges them itself).
    pub fn release(&mut self, bytes: u64) {
        let bytes = bytes.min(self.bytes);
        self.account.release(bytes);
        self.bytes -= bytes;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn grants_queue_and_refuse() {
        let b = Arc::new(MemoryBudget::new(1 << 20, 1, Duration::from_millis(200)));
        assert!(matches!(
            b.grant(2 << 20).await,
            Err(DiskOsError::GrantTooLarge { .. })
        ));
        let g = b.grant(768 * 1024).await.unwrap();
        assert_eq!(b.granted_bytes(), 768 * 1024);
        // Second waits then times out; a third at the same time is refused (queue of 1).
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.grant(512 * 1024).await.map(|g| g.bytes()) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            b.grant(512 * 1024).await,
            Err(DiskOsError::AdmissionQueueFull { .. })
        ));
        drop(g);
        assert_eq!(waiter.await.unwrap().unwrap(), 512 * 1024);
        assert_eq!(b.granted_bytes(), 0);
    }

    #[test]
    fn held_bytes_are_charged_until_released() {
        let account = Arc::new(Account::default());
        let mut held = Held::new(&account, 1000);
        account.charge(300); // a buffer of 300 of them
        held.release(300);
        assert_eq!((account.in_use(), account.peak()), (1000, 1300));
        held.release(5000);
        assert_eq!(account.in_use(), 300, "never releases more than it holds");
        drop(held);
        assert_eq!(account.in_use(), 300);
    }
}
