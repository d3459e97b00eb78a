//! Compute slots, shared fairly between host programs.
//!
//! Every buffer a disklet processes and every buffer a scan reads and decodes needs one of the
//! disk's `compute_slots`. Slots are handed out per *program* ([`JobSpec::program`]), not per
//! job or per thread, by start-time fair queuing:
//!
//! * each active program has a virtual time, advanced by the thread CPU time (ns) of every
//!   step it ran under a slot;
//! * when a slot frees, the waiting program with the smallest virtual time gets it; within a
//!   program, waiters are served first come, first served (ties between programs too);
//! * a program that starts asking (new, or with nobody of it waiting) starts no lower than the
//!   system's virtual time — the virtual time of the program last given a slot, which is the
//!   smallest of those competing for one — so it cannot bank credit while idle;
//! * a program holding no slot and with nobody waiting is forgotten.
//!
//! Limits: at most `max_waiters` steps wait at once (past that, a typed error), so the program
//! table holds at most `slots + max_waiters` programs.
//!
//! [`FairQueue`] is the policy as a plain state machine (no threads, no clock: tested directly);
//! [`FairScheduler`] hands its slots to the blocking threads stages and scans run on, and a
//! [`JobCompute`] is one job's handle on it.
//!
//! [`JobSpec::program`]: adisk_core::protocol::JobSpec::program
use crate::{DiskOsError, Result};
use futures::future::{Either, select};
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::sync::{oneshot, watch};

/// How far behind the system's virtual time a program may (re)start asking, ns of CPU.
pub const MAX_LAG_NS: u64 = 10_000_000;

/// Steps that may wait for a compute slot on one disk, by default.
pub const MAX_COMPUTE_WAITERS_DEFAULT: u32 = 1024;

/// A host program's name ([`JobSpec::program`](adisk_core::protocol::JobSpec::program)).
pub type ProgramName = Arc<str>;

/// A place in the queue (increasing: earlier waiters have smaller tickets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

struct Program<W> {
    virtual_ns: u64,
    slots_held: u32,
    waiting: VecDeque<(Ticket, W)>,
}

/// The fair-queuing policy over `slots` compute slots; `W` is what a waiter leaves behind to be
/// woken by (a channel in [`FairScheduler`], a label in tests).
pub struct FairQueue<W> {
    slots: u32,
    slots_free: u32,
    max_waiters: u32,
    waiters: u32,
    ticket_next: u64,
    /// Virtual time of the program last given a slot (never decreases).
    system_virtual_ns: u64,
    programs: HashMap<ProgramName, Program<W>>,
}

impl<W> FairQueue<W> {
    /// A queue over `slots` slots (at least 1) where at most `max_waiters` wait.
    pub fn new(slots: u32, max_waiters: u32) -> Self {
        let slots = slots.max(1);
        FairQueue {
            slots,
            slots_free: slots,
            max_waiters,
            waiters: 0,
            ticket_next: 0,
            system_virtual_ns: 0,
            programs: HashMap::new(),
        }
    }

    /// Takes a slot for `program` if one is free (then nobody waits); false if none is.
    pub fn try_take(&mut self, program: &ProgramName) -> bool {
        if self.slots_free == 0 {
            return false;
        }
        assert_eq!(self.waiters, 0, "a slot is free while steps wait for one");
        self.slots_free -= 1;
        let p = self.activate(program);
        p.slots_held += 1;
        let virtual_ns = p.virtual_ns;
        self.system_virtual_ns = self.system_virtual_ns.max(virtual_ns);
        true
    }

    /// Queues `waiter` of `program` for the next slot its turn allows.
    ///
    /// # Errors
    /// [`DiskOsError::ComputeQueueFull`] when `max_waiters` already wait.
    pub fn enqueue(&mut self, program: &ProgramName, waiter: W) -> Result<Ticket> {
        if self.waiters >= self.max_waiters {
            return Err(DiskOsError::ComputeQueueFull {
                waiting: self.waiters,
            });
        }
        let ticket = Ticket(self.ticket_next);
        self.ticket_next += 1;
        self.activate(program).waiting.push_back((ticket, waiter));
        self.waiters += 1;
        Ok(ticket)
    }

    /// Returns a slot of `program`, charging it `cpu_ns` of processing, and hands the slot to
    /// the next waiter, which is returned (None: the slot is free).
    pub fn release(&mut self, program: &str, cpu_ns: u64) -> Option<(ProgramName, W)> {
        match self.programs.get_mut(program) {
            Some(p) if p.slots_held > 0 => {
                p.slots_held -= 1;
                p.virtual_ns = p.virtual_ns.saturating_add(cpu_ns);
            }
            // A slot the table does not know of: a bug here, but the slot itself must not be lost.
            _ => debug_assert!(
                false,
                "program `{program}` released a slot it does not hold"
            ),
        }
        let next = self.hand_over();
        if next.is_none() {
            self.slots_free += 1;
        }
        self.forget_if_idle(program);
        debug_assert!(self.slots_free <= self.slots);
        next
    }

    /// Removes the waiter `ticket` of `program` (it gave up); false if it is no longer queued
    /// (it was handed a slot, which it must then return).
    pub fn withdraw(&mut self, program: &str, ticket: Ticket) -> bool {
        let Some(p) = self.programs.get_mut(program) else {
            return false;
        };
        let Some(index) = p.waiting.iter().position(|(t, _)| *t == ticket) else {
            return false;
        };
        p.waiting.remove(index);
        self.waiters -= 1;
        self.forget_if_idle(program);
        true
    }

    /// Virtual time of `program` in ns (None: not active).
    pub fn virtual_ns(&self, program: &str) -> Option<u64> {
        self.programs.get(program).map(|p| p.virtual_ns)
    }

    /// Programs holding a slot or waiting for one.
    pub fn programs_active(&self) -> usize {
        self.programs.len()
    }

    /// Steps waiting for a slot.
    pub fn waiters(&self) -> u32 {
        self.waiters
    }

    /// Slots nobody holds.
    pub fn slots_free(&self) -> u32 {
        self.slots_free
    }

    /// The entry of `program`, which starts asking now: if nobody of it waits, its virtual
    /// time is raised to [`MAX_LAG_NS`] behind the system's, so time spent idle is credit of
    /// at most that much: a program whose steps come with gaps (a pipeline handing buffers
    /// between its stages) is served first when it asks, without banking a long idle spell.
    fn activate(&mut self, program: &ProgramName) -> &mut Program<W> {
        let floor_ns = self.system_virtual_ns.saturating_sub(MAX_LAG_NS);
        let p = self
            .programs
            .entry(program.clone())
            .or_insert_with(|| Program {
                virtual_ns: floor_ns,
                slots_held: 0,
                waiting: VecDeque::new(),
            });
        if p.waiting.is_empty() {
            p.virtual_ns = p.virtual_ns.max(floor_ns);
        }
        p
    }

    /// Gives a slot to the head waiter of the waiting program with the smallest virtual time.
    fn hand_over(&mut self) -> Option<(ProgramName, W)> {
        let (name, p) = self
            .programs
            .iter_mut()
            .filter_map(|(name, p)| {
                let ticket = p.waiting.front()?.0;
                Some(((p.virtual_ns, ticket), name, p))
            })
            .min_by_key(|(key, _, _)| *key)
            .map(|(_, name, p)| (name.clone(), p))?;
        let (_, waiter) = p.waiting.pop_front()?;
        p.slots_held += 1;
        self.system_virtual_ns = self.system_virtual_ns.max(p.virtual_ns);
        self.waiters -= 1;
        Some((name, waiter))
    }

    fn forget_if_idle(&mut self, program: &str) {
        if self
            .programs
            .get(program)
            .is_some_and(|p| p.slots_held == 0 && p.waiting.is_empty())
        {
            self.programs.remove(program);
        }
    }
}

/// The compute slots of one disk, handed to blocking threads by a [`FairQueue`].
pub struct FairScheduler {
    queue: Mutex<FairQueue<oneshot::Sender<SlotPermit>>>,
    /// `1/speed − 1`: the pause after a step, per ns of its CPU time (0: none).
    stretch: f64,
}

thread_local! {
    /// Emulated time the steps of this thread owe and have not yet paused for, ns (negative: a
    /// sleep overshot, and the next pauses are shorter by as much). Each thread pays for its
    /// own steps: a stage that pauses for another's would stall the pipeline between them.
    static OWED_NS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// The shortest pause of an emulated slower processor. A sleep overshoots by tens of µs
/// (30–60 here with the timer slack below), so debts smaller than this add up until they
/// reach it, and each pause's overshoot is taken off the next: the long-run rate is exact.
/// It is kept near one step's length: a pause much longer than a step holds its stream
/// buffer (or the batch not yet sent) across several of the next stage's steps, and with
/// two buffers per stream two stages then take turns instead of overlapping (`dmine` at half
/// speed took 2.9× with pauses of 2 ms).
const MIN_PAUSE_NS: i64 = 250_000;

/// Lowers the calling thread's timer slack to 1 ns, once per thread (Linux's default of
/// 50 µs is added to every sleep, a fifth of a [`MIN_PAUSE_NS`] pause).
fn tighten_timer_slack() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if DONE.replace(true) {
        return;
    }
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread's timer slack;
    // a failure leaves the default, which is still correct, only coarser.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

impl FairScheduler {
    /// A scheduler of `slots` slots (at least 1) for which at most `max_waiters` steps wait.
    pub fn new(slots: u32, max_waiters: u32) -> Arc<Self> {
        Self::with_speed(slots, max_waiters, 1.0)
    }

    /// As [`FairScheduler::new`] on an emulated processor `speed` times as fast as this
    /// machine's cores (0 < speed ≤ 1; anything else is 1): each step owes its CPU time
    /// × (1/speed − 1), paid as a pause before a step returns its slot (in pauses of at least
    /// [`MIN_PAUSE_NS`]), so the slots do `speed` of the work they would, while the real core
    /// is free for other processes (other emulated disks).
    pub fn with_speed(slots: u32, max_waiters: u32, speed: f64) -> Arc<Self> {
        let stretch = if speed.is_finite() && speed > 0.0 && speed < 1.0 {
            1.0 / speed - 1.0
        } else {
            0.0
        };
        Arc::new(FairScheduler {
            queue: Mutex::new(FairQueue::new(slots, max_waiters)),
            stretch,
        })
    }

    /// Adds a step of `cpu_ns` to the emulated time owed, and pauses the calling (blocking)
    /// thread for all of it once it reaches [`MIN_PAUSE_NS`].
    fn stretch_step(&self, cpu_ns: u64) {
        if self.stretch <= 0.0 {
            return;
        }
        let step = (cpu_ns as f64 * self.stretch) as i64;
        let owed = OWED_NS.get() + step;
        if owed < MIN_PAUSE_NS {
            OWED_NS.set(owed);
            return;
        }
        tighten_timer_slack();
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_nanos(owed as u64));
        let slept = t.elapsed().as_nanos().min(i64::MAX as u128) as i64;
        OWED_NS.set(owed - slept);
    }

    /// Slots nobody holds, and steps waiting for one.
    pub fn load(&self) -> (u32, u32) {
        let queue = self.lock();
        (queue.slots_free(), queue.waiters())
    }

    fn lock(&self) -> MutexGuard<'_, FairQueue<oneshot::Sender<SlotPermit>>> {
        // The queue's invariants hold between calls, so a panic elsewhere leaves it usable.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a slot for `program`, blocking the calling thread (not an async worker) while it
    /// waits its turn.
    ///
    /// # Errors
    /// [`DiskOsError::ComputeQueueFull`]; [`DiskOsError::Cancelled`] when `cancel` turns true
    /// (or its job is gone) first — the waiter then leaves the queue, and a slot handed to it
    /// meanwhile goes on to the next.
    pub fn acquire_blocking(
        self: &Arc<Self>,
        program: &ProgramName,
        cancel: &watch::Receiver<bool>,
    ) -> Result<SlotPermit> {
        // A cancelled job gets no slot, also when one is free: every step of every stage
        // asks for one, so a job whose host went away stops at its next step.
        if *cancel.borrow() {
            return Err(DiskOsError::Cancelled);
        }
        let (rx, ticket) = {
            let mut queue = self.lock();
            if queue.try_take(program) {
                return Ok(SlotPermit::new(self.clone(), program.clone()));
            }
            let (tx, rx) = oneshot::channel();
            (rx, queue.enqueue(program, tx)?)
        };
        let mut cancel = cancel.clone();
        let cancelled = std::pin::pin!(cancel.wait_for(|c| *c));
        match futures::executor::block_on(select(rx, cancelled)) {
            Either::Left((Ok(permit), _)) => Ok(permit),
            Either::Left((Err(_), _)) | Either::Right(_) => {
                // Dropping the receiver afterwards returns a slot handed over in between.
                self.lock().withdraw(program, ticket);
                Err(DiskOsError::Cancelled)
            }
        }
    }

    /// Returns a slot of `program` after `cpu_ns` of processing and hands it on.
    fn release(self: &Arc<Self>, program: &str, cpu_ns: u64) {
        let mut next = self.lock().release(program, cpu_ns);
        while let Some((name, tx)) = next.take() {
            if let Err(mut unwanted) = tx.send(SlotPermit::new(self.clone(), name)) {
                // The waiter gave up before it was woken: the slot goes to the one after.
                unwanted.armed = false;
                next = self.lock().release(&unwanted.program, 0);
            }
        }
    }
}

/// A compute slot held for a program; returned to its scheduler when dropped.
pub struct SlotPermit {
    scheduler: Arc<FairScheduler>,
    program: ProgramName,
    cpu_ns: u64,
    armed: bool,
}

impl SlotPermit {
    fn new(scheduler: Arc<FairScheduler>, program: ProgramName) -> Self {
        SlotPermit {
            scheduler,
            program,
            cpu_ns: 0,
            armed: true,
        }
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if self.armed {
            self.scheduler.release(&self.program, self.cpu_ns);
        }
    }
}

/// A compute slot in use on the thread that took it: charges its program the thread CPU time
/// from taking to returning it. Not `Send`: thread CPU time means nothing on another thread.
pub struct Slot {
    permit: SlotPermit,
    cpu_start_ns: u64,
    charged: bool,
    _this_thread: PhantomData<*const ()>,
}

impl Slot {
    fn new(permit: SlotPermit) -> Self {
        Slot {
            permit,
            cpu_start_ns: crate::thread_cpu_ns(),
            charged: false,
            _this_thread: PhantomData,
        }
    }

    /// Returns the slot; the thread CPU time used under it, in ns.
    pub fn release(mut self) -> u64 {
        self.charge()
    }

    fn charge(&mut self) -> u64 {
        self.permit.cpu_ns = crate::thread_cpu_ns().saturating_sub(self.cpu_start_ns);
        self.charged = true;
        // An emulated slower processor: the slot stays taken for the rest of the time the
        // step would have needed (this is a blocking thread).
        self.permit.scheduler.stretch_step(self.permit.cpu_ns);
        self.permit.cpu_ns
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.charged {
            self.charge();
        }
    }
}

/// One job's access to the compute slots: its program, its cancellation, its schedule wait.
#[derive(Clone)]
pub struct JobCompute {
    scheduler: Arc<FairScheduler>,
    program: ProgramName,
    cancel: watch::Receiver<bool>,
    schedule_wait_ns: Arc<AtomicU64>,
}

impl JobCompute {
    /// Slots of `scheduler` for a job of `program`; waits stop when `cancel` turns true and
    /// are added to `schedule_wait_ns`.
    pub fn new(
        scheduler: Arc<FairScheduler>,
        program: &str,
        cancel: watch::Receiver<bool>,
        schedule_wait_ns: Arc<AtomicU64>,
    ) -> Self {
        JobCompute {
            scheduler,
            program: Arc::from(program),
            cancel,
            schedule_wait_ns,
        }
    }

    /// Takes a slot, blocking the (blocking) thread until the program's turn.
    ///
    /// # Errors
    /// See [`FairScheduler::acquire_blocking`].
    pub fn acquire(&self) -> Result<Slot> {
        let wait = Instant::now();
        let permit = self.scheduler.acquire_blocking(&self.program, &self.cancel);
        self.schedule_wait_ns
            .fetch_add(wait.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Slot::new(permit?))
    }

    /// Runs `work` under a slot.
    ///
    /// # Errors
    /// See [`FairScheduler::acquire_blocking`].
    pub fn run<T>(&self, work: impl FnOnce() -> T) -> Result<T> {
        let slot = self.acquire()?;
        let out = work();
        slot.release();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn name(s: &str) -> ProgramName {
        Arc::from(s)
    }

    /// Frees one slot of `program` after `cpu_ns`; returns the label of the waiter served.
    fn serve(q: &mut FairQueue<&'static str>, program: &str, cpu_ns: u64) -> Option<&'static str> {
        q.release(program, cpu_ns).map(|(_, label)| label)
    }

    #[test]
    fn a_lone_waiter_is_served_with_the_next_slot() {
        let (a, b) = (name("a"), name("b"));
        let mut q = FairQueue::new(2, 64);
        assert!(q.try_take(&a) && q.try_take(&a));
        for label in ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"] {
            q.enqueue(&a, label).unwrap();
        }
        q.enqueue(&b, "b1").unwrap();
        assert_eq!(
            serve(&mut q, "a", 1_000),
            Some("b1"),
            "b waited behind 8 waiters of a"
        );
        assert_eq!(
            serve(&mut q, "a", 1_000),
            Some("a1"),
            "within a program: first come, first served"
        );
        assert_eq!(q.waiters(), 7);
    }

    #[test]
    fn virtual_time_is_the_cpu_charged() {
        let (a, b) = (name("a"), name("b"));
        let mut q = FairQueue::new(1, 64);
        assert!(q.try_take(&a));
        q.enqueue(&a, "a").unwrap();
        q.enqueue(&b, "b").unwrap();
        assert_eq!(q.virtual_ns("b"), Some(0));
        // a's 300 ns put it behind b, whose 100 ns steps then run until b has used as much.
        assert_eq!(serve(&mut q, "a", 300), Some("b"));
        for _ in 0..2 {
            q.enqueue(&b, "b").unwrap();
            assert_eq!(serve(&mut q, "b", 100), Some("b"));
        }
        assert_eq!(q.virtual_ns("b"), Some(200));
        assert_eq!(
            serve(&mut q, "b", 100),
            Some("a"),
            "b caught up (300 ns each): a's turn"
        );
        assert_eq!(
            (q.virtual_ns("a"), q.virtual_ns("b")),
            (Some(300), None),
            "b holds nothing and waits for nothing"
        );
        assert_eq!(serve(&mut q, "a", 50), None);
        assert_eq!((q.slots_free(), q.programs_active()), (1, 0));
    }

    #[test]
    fn an_idle_program_banks_no_credit() {
        let (a, b) = (name("a"), name("b"));
        let mut q = FairQueue::new(1, 64);
        // b runs a little, then goes idle and is forgotten.
        assert!(q.try_take(&b));
        assert_eq!(serve(&mut q, "b", 10), None);
        assert_eq!(q.virtual_ns("b"), None);
        // a runs alone for a long time.
        assert!(q.try_take(&a));
        for _ in 0..10 {
            q.enqueue(&a, "a").unwrap();
            assert_eq!(serve(&mut q, "a", 1_000_000), Some("a"));
        }
        // b comes back at most MAX_LAG_NS behind a, not at its old 10 ns: it is served first
        // for that much, then the two alternate.
        q.enqueue(&a, "a").unwrap();
        q.enqueue(&b, "b").unwrap();
        assert_eq!(
            q.virtual_ns("b").unwrap(),
            q.virtual_ns("a").unwrap() - MAX_LAG_NS
        );
        let mut order = Vec::new();
        let mut holder = "a";
        for _ in 0..(MAX_LAG_NS / 1_000_000 + 8) {
            let served = serve(&mut q, holder, 1_000_000).unwrap();
            order.push(served);
            q.enqueue(&name(served), served).unwrap();
            holder = served;
        }
        let lead = (MAX_LAG_NS / 1_000_000) as usize;
        assert!(order[..lead].iter().all(|s| *s == "b"), "{order:?}");
        assert!(
            order[lead + 2..].windows(2).all(|w| w[0] != w[1]),
            "then they alternate: {order:?}"
        );
    }

    #[test]
    fn a_holder_that_stops_waiting_loses_its_lag() {
        let (a, b) = (name("a"), name("b"));
        let mut q = FairQueue::new(2, 64);
        assert!(q.try_take(&a) && q.try_take(&b));
        q.enqueue(&a, "a").unwrap();
        for _ in 0..5 {
            assert_eq!(serve(&mut q, "a", 1_000), Some("a"));
            q.enqueue(&a, "a").unwrap();
        }
        // b held its slot all along without asking for more: it asks again at most
        // MAX_LAG_NS behind a.
        q.enqueue(&b, "b").unwrap();
        assert_eq!(
            q.virtual_ns("b").unwrap(),
            q.virtual_ns("a").unwrap().saturating_sub(MAX_LAG_NS)
        );
    }

    #[test]
    fn waiters_are_bounded() {
        let a = name("a");
        let mut q = FairQueue::new(1, 2);
        assert!(q.try_take(&a));
        q.enqueue(&a, "1").unwrap();
        let second = q.enqueue(&name("b"), "2").unwrap();
        assert!(matches!(
            q.enqueue(&a, "3"),
            Err(DiskOsError::ComputeQueueFull { waiting: 2 })
        ));
        assert!(q.withdraw("b", second));
        assert!(!q.withdraw("b", second));
        assert_eq!(q.programs_active(), 1, "b, which gave up, is forgotten");
        q.enqueue(&a, "3").unwrap();
    }

    #[test]
    fn a_cancelled_waiter_leaves_and_its_slot_goes_on() {
        let scheduler = FairScheduler::new(1, 8);
        let (a, b) = (name("a"), name("b"));
        let (cancel_tx, cancel) = watch::channel(false);
        let held = scheduler.acquire_blocking(&a, &cancel).unwrap();
        let waiter = std::thread::spawn({
            let (scheduler, cancel) = (scheduler.clone(), cancel.clone());
            move || scheduler.acquire_blocking(&b, &cancel).map(drop)
        });
        while scheduler.load().1 == 0 {
            std::thread::yield_now();
        }
        cancel_tx.send_replace(true);
        assert!(matches!(
            waiter.join().unwrap(),
            Err(DiskOsError::Cancelled)
        ));
        assert_eq!(scheduler.load(), (0, 0), "the waiter left the queue");
        drop(held);
        assert_eq!(scheduler.load(), (1, 0), "no slot leaked");
    }

    /// A job whose host went away (a stage that loops on free slots included) stops at its
    /// next step: it used to get a free slot without its cancellation being looked at.
    #[test]
    fn a_cancelled_job_gets_no_free_slot() {
        let scheduler = FairScheduler::new(2, 8);
        let (cancel_tx, cancel) = watch::channel(false);
        drop(scheduler.acquire_blocking(&name("a"), &cancel).unwrap());
        cancel_tx.send_replace(true);
        assert!(matches!(
            scheduler.acquire_blocking(&name("a"), &cancel),
            Err(DiskOsError::Cancelled)
        ));
        assert_eq!(scheduler.load(), (2, 0), "no slot taken");
    }

    #[test]
    fn a_slot_handed_to_a_waiter_that_gave_up_goes_to_the_next() {
        let scheduler = FairScheduler::new(1, 8);
        let a = name("a");
        let (_cancel_tx, cancel) = watch::channel(false);
        let held = scheduler.acquire_blocking(&a, &cancel).unwrap();
        let (gone_tx, gone_rx) = oneshot::channel();
        let (next_tx, next_rx) = oneshot::channel();
        {
            let mut queue = scheduler.lock();
            queue.enqueue(&a, gone_tx).unwrap();
            queue.enqueue(&a, next_tx).unwrap();
        }
        drop(gone_rx);
        drop(held);
        let permit = next_rx.blocking_recv().unwrap();
        assert_eq!(scheduler.load(), (0, 0));
        drop(permit);
        assert_eq!(scheduler.load(), (1, 0));
    }

    /// Spins `ms` of thread CPU under a slot of `scheduler`; the step's wall time.
    fn step(scheduler: &Arc<FairScheduler>, ms: u64) -> Duration {
        let (_tx, cancel) = watch::channel(false);
        let compute = JobCompute::new(scheduler.clone(), "a", cancel, Default::default());
        let t = Instant::now();
        compute
            .run(|| {
                let start = crate::thread_cpu_ns();
                let mut x = 1u64;
                while crate::thread_cpu_ns() - start < ms * 1_000_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
            .unwrap();
        t.elapsed()
    }

    #[test]
    fn a_slower_emulated_processor_holds_the_slot_for_the_rest_of_the_step() {
        let half = FairScheduler::with_speed(1, 8, 0.5);
        let took = step(&half, 20);
        // 20 ms of CPU and 20 ms of pause (more if the machine is busy, never less).
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert_eq!(half.load(), (1, 0), "the slot is back");
        for bad in [0.0, -1.0, f64::NAN, 1.0, 2.0] {
            assert_eq!(FairScheduler::with_speed(1, 8, bad).stretch, 0.0, "{bad}");
        }
    }

    #[test]
    fn small_steps_owe_their_pause_until_it_is_worth_a_sleep_and_overshoot_is_paid_back() {
        let half = FairScheduler::with_speed(1, 8, 0.5);
        let t = Instant::now();
        half.stretch_step(100_000);
        assert_eq!(OWED_NS.get(), 100_000, "owed, not slept");
        half.stretch_step(200_000);
        let took = t.elapsed();
        assert!(took >= Duration::from_micros(300), "{took:?}");
        // The sleep never ends early, so what is left is its overshoot, owed back.
        assert!(OWED_NS.get() <= 0);
    }
}
