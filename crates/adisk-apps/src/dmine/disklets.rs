//! The disklets of `dmine`, each within its scratch grant:
//!
//! - `items` (pass 1): partial item counts of the disk's transactions ([`ItemCounter`]);
//! - `pairs` (pass 2): partial counts of pairs of frequent items ([`PairCounter`], sparse as
//!   in uysal §5 or triangular);
//! - `candidates` (count and hybrid distribution, pass k ≥ 3): partial counts of a candidate
//!   list ([`CandidateCounter`]);
//! - `tid_lists` (eclat, sender): the partial tid-lists of the frequent pairs
//!   ([`TidListBuilder`]), each tagged with the disk owning its equivalence class; flushed
//!   whenever they fill half the scratch (partial lists of one pair are unions, so flushing
//!   early only ships more rows);
//! - `eclat` (eclat, receiver): gathers the tid-lists of its classes and mines each class
//!   ([`eclat_class`]), handing the frequent itemsets out class by class.
//!
//! Output larger than one call's allowance is held back and handed out through
//! `has_more_output` / `more_output`.
use super::kernel::{
    CandidateCounter, ItemCounter, PairCounter, PairCounts, TidListBuilder, eclat_class,
};
use super::rows::{self, TID_CHUNK, Transactions};
use crate::disklet_util::{Params, invalid, scratch_exceeded};
use adisk_core::stats::batch_bytes;
use adisk_diskos::Result;
use adisk_diskos::apps::AppStage;
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use std::collections::{BTreeMap, HashMap};

/// Builds `dmine`'s disklet `name`.
///
/// # Errors
/// Unknown disklet, bad parameters, inputs of another shape, a scratch grant too small for
/// the disklet's fixed tables.
pub fn build(stage: &AppStage<'_>) -> Result<Box<dyn Disklet>> {
    let params = Params::new(stage)?;
    params.shape(1, 1)?;
    let input = &stage.inputs[0];
    let scratch = stage.scratch_bytes;
    if stage.disklet == "eclat" {
        check_columns(input, &rows::tid_lists_schema())?;
        return Ok(Box::new(Eclat::new(params.u64("min_count")?, scratch)));
    }
    check_columns(input, &rows::transactions_schema())?;
    Ok(match stage.disklet {
        "items" => Box::new(Items {
            counter: Some(ItemCounter::new()),
            scratch,
            out: Outbox::new(rows::item_counts_batch, |_| 12),
        }),
        "pairs" => Box::new(pairs(&params, scratch)?),
        "candidates" => Box::new(candidates(&params, scratch)?),
        "tid_lists" => Box::new(tid_lists(&params, scratch)?),
        other => return Err(invalid(format!("dmine has no disklet `{other}`"))),
    })
}

/// Checks that `input` has `want`'s columns (by name and type; others may follow).
fn check_columns(input: &Schema, want: &Schema) -> Result<()> {
    for f in want.fields() {
        let ok = input
            .field_with_name(f.name())
            .is_ok_and(|g| same_type(g.data_type(), f.data_type()));
        if !ok {
            return Err(invalid(format!(
                "dmine: the input needs a column `{}` of type {}",
                f.name(),
                f.data_type()
            )));
        }
    }
    Ok(())
}

/// Equal types, ignoring the names and nullability of list items.
fn same_type(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::List(x), DataType::List(y)) => x.data_type() == y.data_type(),
        _ => a == b,
    }
}

fn transactions<'a>(input: &InputBuffer<'a>) -> Result<Transactions<'a>> {
    Transactions::new(input.batch).map_err(invalid)
}

// ---------------------------------------------------------------------------------------------
// Handing out output within each call's allowance
// ---------------------------------------------------------------------------------------------

/// Rows waiting to be emitted, handed out in batches that fit the emitter's room.
struct Outbox<R> {
    rows: Vec<R>,
    next: usize,
    held: u64,
    build: fn(&[R]) -> RecordBatch,
    size: fn(&R) -> u64,
}

impl<R> Outbox<R> {
    fn new(build: fn(&[R]) -> RecordBatch, size: fn(&R) -> u64) -> Self {
        Outbox {
            rows: Vec::new(),
            next: 0,
            held: 0,
            build,
            size,
        }
    }

    /// Queues `rows` (their bytes count as held until handed out).
    fn fill(&mut self, rows: Vec<R>) {
        self.held += rows.iter().map(self.size).sum::<u64>();
        self.rows.extend(rows);
    }

    fn is_empty(&self) -> bool {
        self.next >= self.rows.len()
    }

    /// Emits the next batch: as many rows as fit half the emitter's room (at most 8192). One
    /// batch per call: DiskOS forwards it and calls again while rows remain (many small
    /// batches in one call were measured to hold far more than the call's allowance).
    ///
    /// # Errors
    /// A single row larger than the whole allowance of a call.
    fn hand_out(&mut self, out: &mut Emitter, disklet: &'static str) -> Result<()> {
        if self.is_empty() {
            self.clear();
            return Ok(());
        }
        let budget = out.room() / 2;
        let (mut end, mut bytes) = (self.next, 0);
        while end < self.rows.len() && end - self.next < 8192 {
            let s = (self.size)(&self.rows[end]);
            if end > self.next && bytes + s > budget {
                break;
            }
            bytes += s;
            end += 1;
        }
        let batch = loop {
            let batch = (self.build)(&self.rows[self.next..end]);
            if batch_bytes(&batch) <= out.room() {
                break batch;
            }
            if end - self.next == 1 {
                return Err(invalid(format!(
                    "{disklet}: one output row is larger than a call's output allowance ({} bytes); use larger buffers",
                    out.room()
                )));
            }
            end = self.next + (end - self.next) / 2;
        };
        out.emit(0, batch);
        self.held -= self.rows[self.next..end].iter().map(self.size).sum::<u64>();
        self.next = end;
        if self.is_empty() {
            self.clear();
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.rows = Vec::new();
        self.next = 0;
        self.held = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Pass 1: item counts
// ---------------------------------------------------------------------------------------------

/// Pass 1 at a disk: partial counts of every item of its transactions.
struct Items {
    counter: Option<ItemCounter>,
    scratch: u64,
    out: Outbox<(u32, u64)>,
}

impl Disklet for Items {
    fn name(&self) -> &'static str {
        "dmine_items"
    }
    fn output_schema(&self) -> SchemaRef {
        rows::item_counts_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        let t = transactions(input)?;
        let Some(counter) = &mut self.counter else {
            return Err(invalid("dmine_items: input after the end"));
        };
        (0..t.len()).for_each(|i| counter.feed(t.get(i).1));
        if counter.bytes() > self.scratch {
            return Err(scratch_exceeded(
                "dmine_items",
                self.scratch,
                format!("item counters take {} bytes", counter.bytes()),
            ));
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        if let Some(c) = self.counter.take() {
            self.out.fill(c.finish());
        }
        self.out.hand_out(out, "dmine_items")
    }
    fn has_more_output(&self) -> bool {
        !self.out.is_empty()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.out.hand_out(out, "dmine_items")
    }
    fn scratch_bytes(&self) -> u64 {
        self.counter.as_ref().map_or(0, ItemCounter::bytes) + self.out.held
    }
}

// ---------------------------------------------------------------------------------------------
// Pass 2: pair counts
// ---------------------------------------------------------------------------------------------

/// Pass 2 at a disk: partial counts of the pairs of frequent items. The counts are handed
/// out straight from the table ([`PairCounts`]), never copied whole.
struct Pairs {
    counter: Option<PairCounter>,
    counts: Option<PairCounts>,
    scratch: u64,
}

fn pairs(params: &Params<'_>, scratch: u64) -> Result<Pairs> {
    let items: Vec<u32> = params.parse("items")?;
    let table: String = params.parse("table")?;
    let max_table = match table.as_str() {
        "sparse" => 0,
        "triangular" => u64::MAX,
        other => {
            return Err(invalid(format!(
                "dmine.pairs: table `{other}` (sparse or triangular)"
            )));
        }
    };
    let counter = PairCounter::new(&items, max_table);
    if counter.bytes() > scratch {
        return Err(scratch_exceeded(
            "dmine_pairs",
            scratch,
            format!(
                "the {table} pair table of {} frequent items takes {} bytes",
                items.len(),
                counter.bytes()
            ),
        ));
    }
    Ok(Pairs {
        counter: Some(counter),
        counts: None,
        scratch,
    })
}

impl Pairs {
    /// Emits counts while the emitter has room.
    fn hand_out(&mut self, out: &mut Emitter) -> Result<()> {
        let Some(counts) = &mut self.counts else {
            return Ok(());
        };
        // One batch per call, as the outbox does.
        let rows = (out.room() / 2 / 16).min(8192) as usize;
        if rows == 0 {
            return Err(invalid(
                "dmine_pairs: no room for a single row in a call's output",
            ));
        }
        out.emit(0, rows::pair_counts_batch(&counts.next_chunk(rows)));
        if counts.is_done() {
            self.counts = None;
        }
        Ok(())
    }
}

impl Disklet for Pairs {
    fn name(&self) -> &'static str {
        "dmine_pairs"
    }
    fn output_schema(&self) -> SchemaRef {
        rows::pair_counts_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        let t = transactions(input)?;
        let Some(counter) = &mut self.counter else {
            return Err(invalid("dmine_pairs: input after the end"));
        };
        (0..t.len()).for_each(|i| counter.feed(t.get(i).1));
        if counter.bytes() > self.scratch {
            return Err(scratch_exceeded(
                "dmine_pairs",
                self.scratch,
                format!(
                    "the pass-2 pair table grew to {} bytes; raise --scratch-kib or the support",
                    counter.bytes()
                ),
            ));
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.counts = self.counter.take().map(PairCounter::into_counts);
        self.hand_out(out)
    }
    fn has_more_output(&self) -> bool {
        self.counts.is_some()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.hand_out(out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.counter.as_ref().map_or(0, PairCounter::bytes)
            + self.counts.as_ref().map_or(0, PairCounts::bytes)
    }
}

// ---------------------------------------------------------------------------------------------
// Pass k ≥ 3 of count and hybrid distribution: candidate counts
// ---------------------------------------------------------------------------------------------

/// Pass k ≥ 3 at a disk: partial counts of a fixed candidate list over its input stream
/// (its own transactions, or in hybrid distribution those of its whole row).
struct Candidates {
    counter: Option<CandidateCounter>,
    bytes: u64,
    out: Outbox<(u32, u64)>,
}

fn candidates(params: &Params<'_>, scratch: u64) -> Result<Candidates> {
    let list: Vec<Vec<u32>> = params.parse("candidates")?;
    if list.len() > u32::MAX as usize {
        return Err(invalid("dmine.candidates: too many candidates"));
    }
    let counter = CandidateCounter::new(&list);
    let bytes = counter.bytes();
    if bytes > scratch {
        return Err(scratch_exceeded(
            "dmine_candidates",
            scratch,
            format!("{} candidates take {bytes} bytes", list.len()),
        ));
    }
    Ok(Candidates {
        counter: Some(counter),
        bytes,
        out: Outbox::new(rows::candidate_counts_batch, |_| 12),
    })
}

impl Disklet for Candidates {
    fn name(&self) -> &'static str {
        "dmine_candidates"
    }
    fn output_schema(&self) -> SchemaRef {
        rows::candidate_counts_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        let t = transactions(input)?;
        let Some(counter) = &mut self.counter else {
            return Err(invalid("dmine_candidates: input after the end"));
        };
        (0..t.len()).for_each(|i| counter.feed(t.get(i).1));
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        if let Some(c) = self.counter.take() {
            let nonzero: Vec<(u32, u64)> = c
                .finish()
                .into_iter()
                .enumerate()
                .filter(|(_, n)| *n > 0)
                .map(|(i, n)| (i as u32, n))
                .collect();
            self.bytes = 0;
            self.out.fill(nonzero);
        }
        self.out.hand_out(out, "dmine_candidates")
    }
    fn has_more_output(&self) -> bool {
        !self.out.is_empty()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.out.hand_out(out, "dmine_candidates")
    }
    fn scratch_bytes(&self) -> u64 {
        self.bytes + self.out.held
    }
}

// ---------------------------------------------------------------------------------------------
// Eclat, sender: partial tid-lists of the frequent pairs, tagged with their class's disk
// ---------------------------------------------------------------------------------------------

/// One shipped piece of a tid-list, owned.
type TidPiece = (u32, u32, u32, Vec<u64>);

/// Eclat's transposition at a disk: the tid-lists of the frequent pairs in its
/// transactions, each row tagged with the disk owning the pair's class (`target`).
struct TidLists {
    pairs: Vec<(u32, u32)>,
    target: HashMap<u32, u32>,
    builder: TidListBuilder,
    /// Builder bytes past which the lists are flushed: its empty index plus half of the
    /// rest of the scratch (the other half holds the lists being handed out).
    flush_at: u64,
    flushes: u64,
    out: Outbox<TidPiece>,
}

fn tid_lists(params: &Params<'_>, scratch: u64) -> Result<TidLists> {
    let pairs: Vec<(u32, u32)> = params.parse("pairs")?;
    let targets: Vec<(u32, u32)> = params.parse("targets")?;
    let target: HashMap<u32, u32> = targets.into_iter().collect();
    if let Some((a, _)) = pairs
        .iter()
        .find(|(a, b)| !target.contains_key(&(*a).min(*b)))
    {
        return Err(invalid(format!(
            "dmine.tid_lists: no target disk for the class of item {a}"
        )));
    }
    let builder = TidListBuilder::new(&pairs);
    if builder.bytes() > scratch / 2 {
        return Err(scratch_exceeded(
            "dmine_tid_lists",
            scratch,
            format!(
                "the index of {} frequent pairs takes {} bytes, more than half the scratch",
                pairs.len(),
                builder.bytes()
            ),
        ));
    }
    let index = builder.bytes();
    Ok(TidLists {
        flush_at: index + (scratch - index) / 2,
        builder,
        pairs,
        target,
        flushes: 0,
        out: Outbox::new(
            |r| {
                let rows: Vec<rows::TidRow<'_>> =
                    r.iter().map(|(t, p, i, l)| (*t, *p, *i, &l[..])).collect();
                rows::tid_lists_batch(&rows)
            },
            |r| r.3.len() as u64 * 8 + 20,
        ),
    })
}

impl TidLists {
    /// Moves the lists built so far into the outbox, in chunks of [`TID_CHUNK`] tids.
    fn flush(&mut self) {
        let fresh = TidListBuilder::new(&self.pairs);
        let lists = std::mem::replace(&mut self.builder, fresh).finish();
        let mut pieces = Vec::new();
        for ((a, b), tids) in lists {
            let target = self.target.get(&a).copied().unwrap_or(0);
            pieces.extend(tids.chunks(TID_CHUNK).map(|c| (target, a, b, c.to_vec())));
        }
        if !pieces.is_empty() {
            self.flushes += 1;
        }
        self.out.fill(pieces);
    }
}

impl Disklet for TidLists {
    fn name(&self) -> &'static str {
        "dmine_tid_lists"
    }
    fn output_schema(&self) -> SchemaRef {
        rows::tid_lists_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, out: &mut Emitter) -> Result<()> {
        let t = transactions(input)?;
        for i in 0..t.len() {
            let (tid, items) = t.get(i);
            self.builder.feed(tid, items);
        }
        if self.builder.bytes() > self.flush_at {
            self.flush();
            self.out.hand_out(out, "dmine_tid_lists")?;
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.flush();
        self.out.hand_out(out, "dmine_tid_lists")
    }
    fn has_more_output(&self) -> bool {
        !self.out.is_empty()
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.out.hand_out(out, "dmine_tid_lists")
    }
    fn scratch_bytes(&self) -> u64 {
        self.builder.bytes() + self.out.held
    }
    fn flushes(&self) -> u64 {
        self.flushes
    }
}

// ---------------------------------------------------------------------------------------------
// Eclat, receiver: the local third pass over the classes this disk owns
// ---------------------------------------------------------------------------------------------

/// Eclat's local pass at a disk: the tid-lists of its classes from every disk, each class
/// mined by depth-first intersection when all have arrived.
struct Eclat {
    min_count: u64,
    scratch: u64,
    classes: BTreeMap<u32, Vec<(u32, Vec<u64>)>>,
    held: u64,
    mined: u64,
    /// All input arrived: classes may be mined.
    finished: bool,
    out: Outbox<(Vec<u32>, u64)>,
}

impl Eclat {
    fn new(min_count: u64, scratch: u64) -> Self {
        Eclat {
            min_count,
            scratch,
            classes: BTreeMap::new(),
            held: 0,
            mined: 0,
            finished: false,
            out: Outbox::new(rows::itemsets_batch, |r| r.0.len() as u64 * 4 + 24),
        }
    }

    /// Mines classes until some output waits, then hands out one batch of it.
    fn mine_and_hand_out(&mut self, out: &mut Emitter) -> Result<()> {
        loop {
            if !self.out.is_empty() {
                return self.out.hand_out(out, "dmine_eclat");
            }
            let Some((prefix, members)) = self.classes.pop_first() else {
                return Ok(());
            };
            let bytes: u64 = members.iter().map(|(_, l)| l.len() as u64 * 8 + 32).sum();
            let found = eclat_class(prefix, members, self.min_count);
            self.held -= bytes;
            self.mined += 1;
            self.out.fill(found);
        }
    }
}

impl Disklet for Eclat {
    fn name(&self) -> &'static str {
        "dmine_eclat"
    }
    fn output_schema(&self) -> SchemaRef {
        rows::itemsets_schema()
    }
    fn process(&mut self, input: &InputBuffer<'_>, _out: &mut Emitter) -> Result<()> {
        for (prefix, item, tids) in rows::read_tid_lists(input.batch).map_err(invalid)? {
            self.held += tids.len() as u64 * 8 + 32;
            self.classes.entry(prefix).or_default().push((item, tids));
        }
        if self.held > self.scratch / 2 {
            return Err(scratch_exceeded(
                "dmine_eclat",
                self.scratch,
                format!(
                    "the tid-lists of this disk's classes take {} bytes, more than half the scratch (the other half is for their intersections)",
                    self.held
                ),
            ));
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Emitter) -> Result<()> {
        self.finished = true;
        self.mine_and_hand_out(out)
    }
    fn has_more_output(&self) -> bool {
        !self.out.is_empty() || (self.finished && !self.classes.is_empty())
    }
    fn more_output(&mut self, out: &mut Emitter) -> Result<()> {
        self.mine_and_hand_out(out)
    }
    fn scratch_bytes(&self) -> u64 {
        self.held + self.out.held
    }
    fn flushes(&self) -> u64 {
        self.mined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dmine::generator::{GenParams, Generator};
    use crate::dmine::kernel::{apriori, equivalence_classes};
    use std::sync::Arc;

    fn stage<'a>(
        name: &'a str,
        params: &'a serde_json::Value,
        inputs: &'a [SchemaRef],
        scratch: u64,
    ) -> AppStage<'a> {
        AppStage {
            app: "dmine",
            disklet: name,
            params,
            inputs,
            ports: 1,
            scratch_bytes: scratch,
        }
    }

    /// Runs `d` over `batches` with small emitters; every output batch.
    fn drive(d: &mut dyn Disklet, batches: &[RecordBatch], room: u64) -> Vec<RecordBatch> {
        let account = Arc::new(adisk_diskos::memory::Account::default());
        let mut got = Vec::new();
        let drain = |d: &mut dyn Disklet, out: &mut Emitter, got: &mut Vec<RecordBatch>| {
            got.extend(out.take_outputs().remove(0));
            while d.has_more_output() {
                let mut more = Emitter::capped(1, room, &account);
                d.more_output(&mut more).unwrap();
                got.extend(more.take_outputs().remove(0));
            }
        };
        for (i, b) in batches.iter().enumerate() {
            let mut out = Emitter::capped(1, room, &account);
            let buffer = InputBuffer {
                batch: b,
                position: i as u64,
                input: 0,
            };
            d.process(&buffer, &mut out).unwrap();
            drain(d, &mut out, &mut got);
        }
        let mut out = Emitter::capped(1, room, &account);
        d.finish(&mut out).unwrap();
        drain(d, &mut out, &mut got);
        got
    }

    #[test]
    fn tid_lists_then_eclat_equal_apriori_with_small_scratch_and_room() {
        let g = Generator::new(&GenParams {
            transactions: 400,
            avg_transaction_len: 6.0,
            avg_pattern_len: 3.0,
            patterns: 30,
            items: 100,
            seed: 3,
        })
        .unwrap();
        let txs = g.transactions(0..400);
        let want = apriori(&txs, 12);
        let pairs: Vec<(u32, u32)> = want
            .keys()
            .filter(|k| k.len() == 2)
            .map(|k| (k[0], k[1]))
            .collect();
        let targets: Vec<(u32, u32)> = equivalence_classes(&pairs)
            .iter()
            .map(|c| (c.prefix, 0))
            .collect();
        let batches: Vec<RecordBatch> = (0..400)
            .step_by(50)
            .map(|s| rows::transactions_batch(s as u64, &txs[s..s + 50]))
            .collect();
        let p = serde_json::json!({"pairs": pairs, "targets": targets});
        let inputs = [rows::transactions_schema()];
        let mut sender = build(&stage("tid_lists", &p, &inputs, 40_000)).unwrap();
        let shipped = drive(sender.as_mut(), &batches, 4096);
        assert!(sender.flushes() > 1, "{}", sender.flushes());
        let p = serde_json::json!({"min_count": 12});
        let inputs = [rows::tid_lists_schema()];
        let mut receiver = build(&stage("eclat", &p, &inputs, 1 << 20)).unwrap();
        let found = drive(receiver.as_mut(), &shipped, 4096);
        let got: BTreeMap<Vec<u32>, u64> = found
            .iter()
            .flat_map(|b| rows::read_itemsets(b).unwrap())
            .collect();
        let want_2: BTreeMap<Vec<u32>, u64> =
            want.into_iter().filter(|(k, _)| k.len() >= 2).collect();
        assert_eq!(got, want_2);
    }

    #[test]
    fn bad_parameters_and_small_scratch_are_refused() {
        let inputs = [rows::transactions_schema()];
        let none = serde_json::json!({});
        assert!(build(&stage("nope", &none, &inputs, 1000)).is_err());
        assert!(build(&stage("pairs", &none, &inputs, 1000)).is_err());
        let items: Vec<u32> = (0..1000).collect();
        let tri = serde_json::json!({"items": items, "table": "triangular"});
        let err = build(&stage("pairs", &tri, &inputs, 1 << 20))
            .err()
            .unwrap();
        assert!(err.to_string().contains("pair table"), "{err}");
        let wrong = [rows::item_counts_schema()];
        assert!(build(&stage("items", &none, &wrong, 1000)).is_err());
        let p = serde_json::json!({"pairs": [[1, 2]], "targets": []});
        assert!(build(&stage("tid_lists", &p, &inputs, 1 << 20)).is_err());
    }
}
