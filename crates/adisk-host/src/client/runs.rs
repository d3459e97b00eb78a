//! What the queries this host planned at `auto` measured: per query (its text in a context)
//! the wall times of the last runs of each of its two plans. The planner decides with them
//! ([`crate::sql::feedback`]); the cluster connection keeps them, so every engine over it
//! learns from the others' runs.
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// The runs of each plan a query keeps.
pub const RUNS_KEPT: usize = 3;
/// The queries a cluster's host remembers (the least recently planned are forgotten).
pub const MAX_QUERIES: usize = 1024;

/// The two plans `auto` chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Scans, qualification, partial aggregation and Bloom semi-joins at the disks; the rest
    /// at the host.
    HostCentric,
    /// Whole stages at the disks, exchanging among themselves.
    Disks,
}

impl Level {
    /// The level's name, as EXPLAIN prints it.
    pub fn name(self) -> &'static str {
        match self {
            Level::HostCentric => "host-centric",
            Level::Disks => "disks",
        }
    }

    /// The other plan.
    pub fn other(self) -> Level {
        match self {
            Level::HostCentric => Level::Disks,
            Level::Disks => Level::HostCentric,
        }
    }
}

/// A query in its context (see the module).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    query: u64,
    context: u64,
}

impl Key {
    /// The key of `sql` (surrounding white space ignored) in `context`.
    pub fn new(sql: &str, context: &str) -> Key {
        let hash = |s: &str| {
            let mut h = DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        Key {
            query: hash(sql.trim()),
            context: hash(context),
        }
    }
}

/// The wall times, s, of a query's last runs of each plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Walls {
    host_centric: VecDeque<f64>,
    disks: VecDeque<f64>,
    used: u64,
    /// Per plan (host-centric, `disks`): it has run once. The first run of each plan warms
    /// what that plan uses — caches, the disks' memory, the connections of its exchanges —
    /// and is not kept: kept, the plan that ran first would be held back for good (TPC-H Q3
    /// at SF 10), and the plan tried second would be compared cold against one warm (Q9 on
    /// loopback, Q2 at 100 Mbit/s, SF 1).
    warmed: [bool; 2],
}

impl Walls {
    /// Runs of the host-centric plan (`h`) and of the `disks` plan (`d`), oldest first.
    #[cfg(test)]
    pub fn of(h: &[f64], d: &[f64]) -> Walls {
        let mut w = Walls::default();
        h.iter().for_each(|x| w.add(Level::HostCentric, *x));
        d.iter().for_each(|x| w.add(Level::Disks, *x));
        w
    }

    /// The kept runs of `level`, oldest first.
    pub fn runs(&self, level: Level) -> &VecDeque<f64> {
        match level {
            Level::HostCentric => &self.host_centric,
            Level::Disks => &self.disks,
        }
    }

    /// A run of `level` took `wall` seconds.
    pub fn add(&mut self, level: Level, wall: f64) {
        let runs = match level {
            Level::HostCentric => &mut self.host_centric,
            Level::Disks => &mut self.disks,
        };
        if runs.len() == RUNS_KEPT {
            runs.pop_front();
        }
        runs.push_back(wall);
    }

    /// The median of the kept runs of `level` (the lower middle of an even count), if any.
    pub fn median(&self, level: Level) -> Option<f64> {
        let mut v: Vec<f64> = self.runs(level).iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[(v.len() - 1) / 2])
    }

    /// `level`'s median and run count, for EXPLAIN.
    pub fn describe(&self, level: Level) -> String {
        match self.median(level) {
            Some(m) => format!(
                "{} {:.3} s (median of {} run{})",
                level.name(),
                m,
                self.runs(level).len(),
                if self.runs(level).len() == 1 { "" } else { "s" }
            ),
            None => format!("{} not run", level.name()),
        }
    }
}

/// The measured runs of the queries a host planned at `auto` (kept by its cluster, shared by
/// every engine over it).
#[derive(Debug, Default)]
pub struct Feedback {
    queries: Mutex<HashMap<Key, Walls>>,
    clock: std::sync::atomic::AtomicU64,
}

impl Feedback {
    /// The runs measured of `key`, if any (marks it used).
    pub fn walls(&self, key: &Key) -> Option<Walls> {
        let tick = self.tick();
        let mut q = self.queries.lock().unwrap_or_else(|e| e.into_inner());
        let w = q.get_mut(key)?;
        w.used = tick;
        Some(w.clone())
    }

    /// A run of `key`'s plan at `level` took `wall` seconds (the first run of each plan is
    /// not kept: see [`Walls`]).
    pub fn record(&self, key: Key, level: Level, wall: f64) {
        if !wall.is_finite() || wall < 0.0 {
            return;
        }
        let tick = self.tick();
        let mut q = self.queries.lock().unwrap_or_else(|e| e.into_inner());
        if !q.contains_key(&key) && q.len() >= MAX_QUERIES {
            let oldest = q.iter().min_by_key(|(_, w)| w.used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                q.remove(&k);
            }
        }
        let w = q.entry(key).or_default();
        w.used = tick;
        let plan = match level {
            Level::HostCentric => 0,
            Level::Disks => 1,
        };
        if std::mem::replace(&mut w.warmed[plan], true) {
            w.add(level, wall);
        }
    }

    /// Queries remembered.
    pub fn len(&self) -> usize {
        self.queries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no query is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tick(&self) -> u64 {
        self.clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_runs_count() {
        let w = Walls::of(&[9.0, 9.0, 9.0, 0.1, 0.1, 0.1], &[]);
        assert_eq!(w.median(Level::HostCentric), Some(0.1));
        assert_eq!(w.runs(Level::HostCentric).len(), RUNS_KEPT);
    }

    #[test]
    fn keys_tell_queries_and_contexts_apart() {
        assert_eq!(Key::new(" select 1 \n", "c"), Key::new("select 1", "c"));
        assert_ne!(Key::new("select 1", "c"), Key::new("select 2", "c"));
        assert_ne!(Key::new("select 1", "c"), Key::new("select 1", "d"));
    }

    #[test]
    fn the_store_records_forgets_the_least_recently_used_and_ignores_nonsense() {
        let f = Feedback::default();
        assert!(f.is_empty());
        let k = |i: usize| Key::new(&format!("select {i}"), "c");
        f.record(k(0), Level::Disks, 9.0);
        let w = f.walls(&k(0)).expect("the query is known");
        assert!(
            w.runs(Level::Disks).is_empty(),
            "the first run is a warm-up: not kept"
        );
        f.record(k(0), Level::Disks, 0.5);
        f.record(k(0), Level::HostCentric, f64::NAN);
        f.record(k(0), Level::HostCentric, -1.0);
        let w = f.walls(&k(0)).unwrap();
        assert_eq!(w.median(Level::Disks), Some(0.5));
        assert_eq!(w.median(Level::HostCentric), None);
        // The other plan's first run warms it up too; its second is kept.
        f.record(k(0), Level::HostCentric, 7.0);
        assert_eq!(f.walls(&k(0)).unwrap().median(Level::HostCentric), None);
        f.record(k(0), Level::HostCentric, 0.4);
        assert_eq!(
            f.walls(&k(0)).unwrap().median(Level::HostCentric),
            Some(0.4)
        );
        for i in 1..MAX_QUERIES {
            f.record(k(i), Level::Disks, 1.0);
        }
        assert_eq!(f.len(), MAX_QUERIES);
        // Query 1 is now the least recently used; 0 was looked at after it was recorded.
        f.walls(&k(0));
        f.record(k(MAX_QUERIES), Level::Disks, 1.0);
        assert_eq!(f.len(), MAX_QUERIES);
        assert!(f.walls(&k(0)).is_some());
        assert!(f.walls(&k(1)).is_none());
        assert!(f.walls(&k(MAX_QUERIES)).is_some());
    }
}
