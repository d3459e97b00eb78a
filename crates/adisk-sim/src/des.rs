//! The discrete-event core: a deterministic priority queue of events.
//!
//! Events are ordered by `(time, sequence number)`: two events scheduled for the same
//! nanosecond fire in the order they were scheduled, so runs never depend on heap
//! internals. Time never goes backwards (asserted, also in release).

use crate::time::{SimDuration, SimTime};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    /// `time << 64 | sequence`: one integer comparison orders events.
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse so the earliest key pops first.
        other.key.cmp(&self.key)
    }
}

/// A deterministic future-event list.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    now: SimTime,
    sequence: u64,
    processed: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1024),
            now: SimTime::ZERO,
            sequence: 0,
            processed: 0,
        }
    }
    /// The time of the event being processed (or of the last one popped).
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// Number of events popped so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }
    /// Number of events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    /// Schedule `event` at absolute time `at` (must not be in the past).
    pub fn schedule_at(&mut self, at: SimTime, event: E) {
        assert!(
            at >= self.now,
            "event scheduled in the past: {:?} < {:?}",
            at,
            self.now
        );
        let key = ((at.0 as u128) << 64) | self.sequence as u128;
        self.sequence += 1;
        self.heap.push(Entry { key, event });
    }
    /// Schedule `event` after `delay` from now.
    pub fn schedule_in(&mut self, delay: SimDuration, event: E) {
        let at = self.now + delay;
        self.schedule_at(at, event);
    }
    /// Pop the earliest event and advance the clock to its time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let entry = self.heap.pop()?;
        let t = SimTime((entry.key >> 64) as u64);
        debug_assert!(t >= self.now);
        self.now = t;
        self.processed += 1;
        Some((t, entry.event))
    }
}

/// The engine's event queue: events are small integer ids (< 2^24) and each entry is one
/// `u128` — `time << 64 | sequence << 24 | id` — so ordering is by (time, sequence) and the
/// heap holds 16-byte entries. Same semantics as [`EventQueue`].
pub struct IdQueue {
    heap: BinaryHeap<std::cmp::Reverse<u128>>,
    now: SimTime,
    sequence: u64,
    processed: u64,
}

impl Default for IdQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl IdQueue {
    /// Largest id.
    pub const MAX_ID: u32 = (1 << 24) - 1;

    /// An empty queue at time zero.
    pub fn new() -> Self {
        IdQueue {
            heap: BinaryHeap::with_capacity(1024),
            now: SimTime::ZERO,
            sequence: 0,
            processed: 0,
        }
    }
    /// Current time.
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// Events popped so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }
    /// Schedule `id` at `at` (not in the past; `id <= MAX_ID`).
    pub fn schedule_at(&mut self, at: SimTime, id: u32) {
        assert!(
            at >= self.now,
            "event scheduled in the past: {:?} < {:?}",
            at,
            self.now
        );
        assert!(id <= Self::MAX_ID, "event id {id} too large");
        assert!(self.sequence < (1 << 40), "more than 2^40 events");
        let key = ((at.0 as u128) << 64) | ((self.sequence as u128) << 24) | id as u128;
        self.sequence += 1;
        self.heap.push(std::cmp::Reverse(key));
    }
    /// Pop the earliest event.
    pub fn pop(&mut self) -> Option<(SimTime, u32)> {
        let std::cmp::Reverse(key) = self.heap.pop()?;
        let t = SimTime((key >> 64) as u64);
        self.now = t;
        self.processed += 1;
        Some((t, (key & 0xFF_FFFF) as u32))
    }
}

/// Result of [`bench_event_loop`].
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// Events processed.
    pub events: u64,
    /// Final simulated time.
    pub end: SimTime,
    /// A checksum of the event order (so the loop cannot be optimised away and so runs can be compared).
    pub checksum: u64,
}

/// Drive the queue with `events` events: 1024 independent "processes" each reschedule
/// themselves after a pseudo-random delay (exercises ordering and ties). Deterministic.
pub fn bench_event_loop(events: u64) -> BenchResult {
    let mut q = IdQueue::new();
    let mut rng = crate::rng::Rng::new(0xAD15C);
    for p in 0..1024u32 {
        q.schedule_at(SimTime(rng.below(1000)), p);
    }
    let mut checksum = 0u64;
    let mut done = 0u64;
    while let Some((t, p)) = q.pop() {
        checksum = checksum.wrapping_mul(31).wrapping_add(p as u64 ^ t.0);
        done += 1;
        if done >= events {
            break;
        }
        // Delays on a coarse grid so that ties are frequent.
        let delay = (rng.next_u64() % 64) * 16;
        let at = q.now() + SimDuration(delay);
        q.schedule_at(at, p);
    }
    BenchResult {
        events: done,
        end: q.now(),
        checksum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_fire_in_scheduling_order_and_time_is_monotone() {
        let mut q = EventQueue::new();
        q.schedule_at(SimTime(10), "b1");
        q.schedule_at(SimTime(5), "a");
        q.schedule_at(SimTime(10), "b2");
        q.schedule_at(SimTime(10), "b3");
        let order: Vec<&str> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!["a", "b1", "b2", "b3"]);
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_panics() {
        let mut q = EventQueue::new();
        q.schedule_at(SimTime(10), 1);
        q.pop();
        q.schedule_at(SimTime(5), 2);
    }

    #[test]
    fn id_queue_orders_by_time_then_scheduling_order() {
        let mut q = IdQueue::new();
        q.schedule_at(SimTime(10), 7);
        q.schedule_at(SimTime(5), 9);
        q.schedule_at(SimTime(10), 3);
        q.schedule_at(SimTime(10), IdQueue::MAX_ID);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec![9, 7, 3, IdQueue::MAX_ID]);
        assert_eq!(q.now(), SimTime(10));
    }

    #[test]
    fn bench_is_deterministic() {
        let a = bench_event_loop(20_000);
        let b = bench_event_loop(20_000);
        assert_eq!(a.checksum, b.checksum);
        assert_eq!(a.end, b.end);
        assert_eq!(a.events, 20_000);
    }
}
