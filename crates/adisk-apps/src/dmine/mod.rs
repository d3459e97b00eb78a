//! `dmine`: frequent itemsets over retail transactions (uysal §5 "Datamining"; chiu §4.2
//! "ARM FSC"), on the disks.
//!
//! ```text
//!  pass 1  every disk: scan ─► dmine.items ─► host: Σ counts ─► frequent items F1
//!  pass 2  every disk: scan ─► dmine.pairs(F1) ─► host: Σ counts ─► frequent pairs F2
//!  then, by --method:
//!  eclat   host: F2 ─► equivalence classes (by first item) ─► a disk per class (balanced)
//!          every disk: scan ─► dmine.tid_lists ─► exchange by range of `target` ─┐
//!          every disk: pipe (N senders) ─► dmine.eclat (mines its classes) ◄─────┘ ─► host
//!  count   pass k ≥ 3: host: Ck = apriori-gen(Fk−1) in the job's parameters;
//!          every disk: scan ─► dmine.candidates(Ck) ─► host: Σ counts ─► Fk
//!  hybrid  pass k ≥ 3: Ck split into S sections; disk i counts section i mod S over the
//!          transactions of its row (disks of one row broadcast theirs to each other);
//!          host: Σ counts of each section over its group ─► Fk
//! ```
//!
//! Conventional: the disks ship every transaction to the host, which runs the same passes
//! with the same kernel. The result is checked against plain single-node Apriori over the
//! transactions regenerated from the generator's parameters (stored in `T_gen` by the load).
pub mod disklets;
pub mod generator;
pub mod kernel;
pub mod rows;

use crate::report::Report;
use crate::{AppError, Mode, Result};
use adisk_core::builder::{self, JobBuilder, Sizes, exchange, new_id};
use adisk_core::protocol::{DiskletSpec, JobSpec, Route, Sink, Source};
use adisk_core::stats::DiskJobStats;
use adisk_host::Cluster;
use adisk_host::jobs::{encode_expr, run_phase};
use arrow::array::{Array, Float64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::prelude::{col, lit};
use generator::{GenParams, Generator};
use kernel::{CandidateCounter, HybridGrid, ItemCounter, PairCounter, TidListBuilder};
use std::collections::BTreeMap;
use std::time::Instant;

/// Every frequent itemset (sorted items) with its count.
pub type Found = BTreeMap<Vec<u32>, u64>;

/// How passes after the second are distributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Method {
    /// Count distribution at every pass (chiu's CD).
    Count,
    /// Hybrid distribution at passes ≥ 3 (chiu's HD).
    Hybrid,
    /// Eclat's local third pass after two passes of count distribution (uysal).
    #[default]
    Eclat,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Count => "count",
            Method::Hybrid => "hybrid",
            Method::Eclat => "eclat",
        })
    }
}

impl std::str::FromStr for Method {
    type Err = AppError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "count" => Ok(Method::Count),
            "hybrid" => Ok(Method::Hybrid),
            "eclat" => Ok(Method::Eclat),
            other => Err(AppError::Invalid(format!(
                "unknown method `{other}` (count, hybrid or eclat)"
            ))),
        }
    }
}

/// Parameters of a `dmine` run.
#[derive(Clone, Debug)]
pub struct DmineParams {
    /// Input table of transactions (`adisk load dmine`).
    pub input: String,
    /// Minimum support, a fraction of the transactions in (0, 1].
    pub support: f64,
    /// Distribution of the passes after the second.
    pub method: Method,
    /// Active or conventional.
    pub mode: Mode,
    /// Scratch of each disklet, KiB (`None`: a sixth of the smallest disk's memory).
    pub scratch_kib: Option<u64>,
    /// Hybrid distribution's candidate sections (`None`: the fewest whose largest section
    /// fits the scratch; must divide the disks holding the input).
    pub sections: Option<usize>,
    /// Pass 2's counters: `sparse` (uysal's), `triangular` (eclat's original) or `auto`
    /// (triangular when it fits the scratch, else sparse).
    pub pair_table: String,
    /// List every frequent itemset in the result.
    pub list_itemsets: bool,
    /// Check against Apriori over the regenerated transactions.
    pub oracle: bool,
}

impl Default for DmineParams {
    fn default() -> Self {
        DmineParams {
            input: "dmine".into(),
            support: 0.01,
            method: Method::Eclat,
            mode: Mode::Active,
            scratch_kib: None,
            sections: None,
            pair_table: "auto".into(),
            list_itemsets: false,
            oracle: true,
        }
    }
}

const PROGRAM: &str = "app-dmine";
const BUFFER_KIB: u64 = 64;
/// The largest triangular pair table the conventional host builds for `--pair-table auto`.
const HOST_PAIR_TABLE_BYTES: u64 = 256 << 20;

fn invalid(e: impl std::fmt::Display) -> AppError {
    AppError::Invalid(e.to_string())
}

fn app(disklet: &str, params: serde_json::Value) -> DiskletSpec {
    DiskletSpec::App {
        app: "dmine".into(),
        name: disklet.into(),
        params,
        inputs: 1,
        ports: 1,
    }
}

/// The table `T_gen` holding the generator's parameters of `T`.
fn gen_table(input: &str) -> String {
    format!("{input}_gen")
}

/// What a run works on.
struct Plan<'a> {
    cluster: &'a Cluster,
    params: &'a DmineParams,
    /// Disks holding the input, in order (a disk's position is its place in the grids).
    disks: Vec<u32>,
    /// The input's `tid`, `items` schema (as stored).
    schema: SchemaRef,
    min_count: u64,
    scratch: u64,
    /// The largest job spec the smallest of the disks takes (besides Bloom filters).
    spec_limit: u64,
}

impl Plan<'_> {
    fn source(&self) -> Source {
        builder::table(
            self.params.input.clone(),
            vec!["tid".into(), "items".into()],
        )
    }

    fn sizes(&self) -> Sizes {
        Sizes {
            scratch_kib: self.scratch.div_ceil(1024),
            buffer_kib: BUFFER_KIB,
            temp_kib: 0,
        }
    }

    /// A job of `kind`: scan ─► `stages` ─► host.
    fn scan_job(&self, kind: &str, stages: Vec<DiskletSpec>) -> Result<JobSpec> {
        Ok(JobBuilder::chain(kind, self.source(), stages, Sink::Host)
            .program(PROGRAM)
            .sizes(self.sizes())
            .build()?)
    }

    /// A job per input disk: scan ─► `disklet` ─► host.
    fn scan_jobs(&self, kind: &str, disklet: &DiskletSpec) -> Result<Vec<(u32, JobSpec)>> {
        self.disks
            .iter()
            .map(|d| Ok((*d, self.scan_job(kind, vec![disklet.clone()])?)))
            .collect()
    }
}

/// Runs the mining, then checks it against the oracle. The report's `result` holds the
/// itemsets found per size and the check.
///
/// # Errors
/// Support outside (0, 1], a missing or malformed input, a scratch grant too small for a
/// pass's tables, any disk failing.
pub async fn run(cluster: &Cluster, params: &DmineParams) -> Result<Report> {
    kernel::min_count(params.support, 1).map_err(invalid)?;
    if !matches!(params.pair_table.as_str(), "sparse" | "triangular" | "auto") {
        return Err(AppError::Invalid(format!(
            "unknown pair table `{}` (sparse, triangular or auto)",
            params.pair_table
        )));
    }
    let plan = plan(cluster, params).await?;
    let mut report = Report {
        app: "dmine".into(),
        mode: params.mode.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let (found, notes) = match params.mode {
        Mode::Active => active(&plan, &mut report).await?,
        Mode::Conventional => conventional(&plan, &mut report).await?,
    };
    report.seconds = started.elapsed().as_secs_f64();
    let rows = cluster.catalog().await?.table(&params.input)?.rows();
    let mut result = summary(&found, params, plan.min_count, rows, notes);
    if params.oracle {
        let t = Instant::now();
        let oracle = oracle(cluster, &params.input, rows, plan.min_count).await?;
        check(&mut result, &found, &oracle);
        result["oracle_seconds"] = serde_json::json!(t.elapsed().as_secs_f64());
    }
    report.result = result;
    Ok(report)
}

/// The input's disks and schema, the minimum count and the scratch grant.
async fn plan<'a>(cluster: &'a Cluster, params: &'a DmineParams) -> Result<Plan<'a>> {
    let catalog = cluster.catalog().await?;
    let entry = catalog
        .tables
        .get(&params.input)
        .ok_or_else(|| AppError::InputMissing {
            table: params.input.clone(),
            hint: "adisk load dmine --transactions N".into(),
        })?;
    let want = rows::transactions_schema();
    let schema = entry
        .schema
        .project(&[
            entry.schema.index_of("tid").map_err(|_| bad_input())?,
            entry.schema.index_of("items").map_err(|_| bad_input())?,
        ])
        .map_err(|_| bad_input())?;
    let types_match = schema.fields().iter().zip(want.fields()).all(|(a, b)| {
        match (a.data_type(), b.data_type()) {
            (arrow::datatypes::DataType::List(x), arrow::datatypes::DataType::List(y)) => {
                x.data_type() == y.data_type()
            }
            (x, y) => x == y,
        }
    });
    if !types_match {
        return Err(bad_input());
    }
    let disks = entry.disks();
    let rows = entry.rows();
    if disks.is_empty() || rows == 0 {
        return Err(AppError::InputMissing {
            table: params.input.clone(),
            hint: "the table holds no transactions".into(),
        });
    }
    if let (Method::Hybrid, Some(sections)) = (params.method, params.sections) {
        HybridGrid::new(disks.len(), sections).map_err(invalid)?;
    }
    let min_count = kernel::min_count(params.support, rows).map_err(invalid)?;
    let (scratch, memory) = scratch_bytes(cluster, &disks, params.scratch_kib).await?;
    Ok(Plan {
        cluster,
        params,
        disks,
        schema: std::sync::Arc::new(schema),
        min_count,
        scratch,
        spec_limit: adisk_core::protocol::max_spec_bytes(memory),
    })
}

fn bad_input() -> AppError {
    AppError::Invalid(
        "dmine's input holds transactions: `tid` UInt64 and `items` List<UInt32> (adisk load dmine)"
            .into(),
    )
}

/// The scratch of each disklet (asked for, or a sixth of the smallest disk's memory) and
/// that smallest memory.
async fn scratch_bytes(
    cluster: &Cluster,
    disks: &[u32],
    asked_kib: Option<u64>,
) -> Result<(u64, u64)> {
    if asked_kib == Some(0) {
        return Err(AppError::Invalid("--scratch-kib must be positive".into()));
    }
    let status = cluster.status().await;
    let mut memory = u64::MAX;
    for d in disks {
        let s = status[*d as usize]
            .as_ref()
            .map_err(|e| AppError::Invalid(format!("disk {d}: {e}")))?;
        memory = memory.min(s.memory_bytes);
    }
    let scratch = asked_kib.map_or((memory / 6).min(64 << 20), |k| k * 1024);
    Ok((scratch, memory))
}

// ---------------------------------------------------------------------------------------------
// Active: the passes at the disks
// ---------------------------------------------------------------------------------------------

async fn active(plan: &Plan<'_>, report: &mut Report) -> Result<(Found, serde_json::Value)> {
    let t = Instant::now();
    let (items, stats) = pass_items(plan).await?;
    report.phase("pass 1: item counts", t.elapsed(), stats);
    let mut found: Found = items.iter().map(|(i, c)| (vec![*i], *c)).collect();
    let frequent_items: Vec<u32> = items.iter().map(|(i, _)| *i).collect();
    let table = pair_table(plan, frequent_items.len())?;
    let t = Instant::now();
    let (pairs, stats) = pass_pairs(plan, &frequent_items, table).await?;
    report.phase("pass 2: pair counts", t.elapsed(), stats);
    found.extend(pairs.iter().map(|((a, b), c)| (vec![*a, *b], *c)));
    if plan.params.method == Method::Eclat {
        let rounds = eclat_rounds(plan, &pairs)?;
        for (r, round) in rounds.iter().enumerate() {
            let t = Instant::now();
            let (mined, stats) = pass_eclat(plan, &pairs, round).await?;
            let name = format!("pass 3: eclat round {}/{}", r + 1, rounds.len());
            report.phase(&name, t.elapsed(), stats);
            found.extend(mined);
        }
        let notes = serde_json::json!({
            "passes": 3, "pair_table": table, "eclat_rounds": rounds.len()
        });
        return Ok((found, notes));
    }
    let level = pairs.iter().map(|((a, b), _)| vec![*a, *b]).collect();
    let mut notes = candidate_passes(plan, level, &mut found, report).await?;
    notes["pair_table"] = table.into();
    Ok((found, notes))
}

/// Passes k ≥ 3 of count or hybrid distribution, until no candidates are left; the passes
/// run and the sections of each hybrid pass.
async fn candidate_passes(
    plan: &Plan<'_>,
    mut level: Vec<Vec<u32>>,
    found: &mut Found,
    report: &mut Report,
) -> Result<serde_json::Value> {
    let mut k = 3;
    let mut sections = Vec::new();
    loop {
        let candidates = kernel::candidates(&level).map_err(invalid)?;
        if candidates.is_empty() {
            break;
        }
        let t = Instant::now();
        let (counts, stats, name) = if plan.params.method == Method::Count {
            let (c, s, scans) = pass_count(plan, k, &candidates).await?;
            match scans {
                1 => (c, s, format!("pass {k}: candidate counts")),
                n => (c, s, format!("pass {k}: candidate counts in {n} scans")),
            }
        } else {
            let (c, s, grid) = pass_hybrid(plan, k, &candidates).await?;
            sections.push(grid);
            (c, s, format!("pass {k}: hybrid, {grid} sections"))
        };
        report.phase(&name, t.elapsed(), stats);
        level = keep_frequent(candidates, counts, plan.min_count, found);
        k += 1;
    }
    Ok(serde_json::json!({ "passes": k - 1, "sections": sections }))
}

/// The candidates reaching `min`, also added to `found`.
fn keep_frequent(
    candidates: Vec<Vec<u32>>,
    counts: Vec<u64>,
    min: u64,
    found: &mut Found,
) -> Vec<Vec<u32>> {
    candidates
        .into_iter()
        .zip(counts)
        .filter(|(_, c)| *c >= min)
        .map(|(s, c)| {
            found.insert(s.clone(), c);
            s
        })
        .collect()
}

/// Pass 2's table for `frequent_items`: the one asked for, or for `auto` the triangular
/// array when it fits the scratch (else sparse); one that cannot fit is refused before pass 2
/// runs (a sparse table that outgrows the scratch fails at the disk).
fn pair_table(plan: &Plan<'_>, frequent_items: usize) -> Result<&'static str> {
    let index = frequent_items as u64 * 32;
    let triangular = index.saturating_add(PairCounter::triangular_bytes(frequent_items));
    let (table, needs) = match plan.params.pair_table.as_str() {
        "triangular" => ("triangular", triangular),
        "auto" if triangular <= plan.scratch => ("triangular", triangular),
        _ => ("sparse", index),
    };
    if needs > plan.scratch {
        return Err(AppError::Invalid(format!(
            "the scratch of {} KiB is too small for the {table} pair table of {frequent_items} frequent items ({needs} bytes); raise --scratch-kib or the support",
            plan.scratch / 1024,
        )));
    }
    Ok(table)
}

/// Runs `specs`, handing every result batch to `read`; the disks' statistics.
async fn collect<T>(
    plan: &Plan<'_>,
    specs: Vec<(u32, JobSpec)>,
    read: fn(&RecordBatch) -> std::result::Result<Vec<T>, String>,
) -> Result<(BTreeMap<u32, Vec<T>>, Vec<DiskJobStats>)> {
    let mut parts: BTreeMap<u32, Vec<T>> = BTreeMap::new();
    let stats = run_phase(plan.cluster, specs, |d, batch| {
        let rows = read(&batch).map_err(adisk_host::HostError::Invalid)?;
        parts.entry(d).or_default().extend(rows);
        Ok(())
    })
    .await?;
    Ok((parts, stats))
}

/// Pass 1: the frequent items.
async fn pass_items(plan: &Plan<'_>) -> Result<(Vec<(u32, u64)>, Vec<DiskJobStats>)> {
    let specs = plan.scan_jobs("dmine-items", &app("items", serde_json::json!({})))?;
    let (parts, stats) = collect(plan, specs, |b| rows::read_keyed_counts(b, "item")).await?;
    let parts: Vec<_> = parts.into_values().collect();
    Ok((
        kernel::frequent(&kernel::reduce(&parts), plan.min_count),
        stats,
    ))
}

/// Pass 2: the frequent pairs of frequent items.
async fn pass_pairs(
    plan: &Plan<'_>,
    items: &[u32],
    table: &str,
) -> Result<(Vec<(kernel::Pair, u64)>, Vec<DiskJobStats>)> {
    if items.len() < 2 {
        return Ok((Vec::new(), Vec::new()));
    }
    let disklet = app(
        "pairs",
        serde_json::json!({ "items": items, "table": table }),
    );
    let specs = plan.scan_jobs("dmine-pairs", &disklet)?;
    let (parts, stats) = collect(plan, specs, rows::read_pair_counts).await?;
    let parts: Vec<_> = parts.into_values().collect();
    Ok((
        kernel::frequent(&kernel::reduce(&parts), plan.min_count),
        stats,
    ))
}

/// Count distribution at pass `k`: every disk counts every candidate over its transactions.
/// The candidates travel in the jobs' parameters; when they take more than a job spec may
/// (see [`spec_shares`]) they are counted in several scans, a share of them each. Returns the
/// counts, the jobs' statistics and the number of scans.
async fn pass_count(
    plan: &Plan<'_>,
    k: usize,
    candidates: &[Vec<u32>],
) -> Result<(Vec<u64>, Vec<DiskJobStats>, usize)> {
    let bytes = CandidateCounter::new(candidates).bytes();
    if bytes > plan.scratch {
        return Err(AppError::Invalid(format!(
            "pass {k}: {} candidates take {bytes} bytes, more than the scratch of {} KiB; raise --scratch-kib or use --method hybrid",
            candidates.len(),
            plan.scratch / 1024
        )));
    }
    let shares = spec_shares(candidates, plan.spec_limit);
    let mut sum = vec![0u64; candidates.len()];
    let mut stats = Vec::new();
    let mut first = 0;
    for share in &shares {
        let disklet = app("candidates", serde_json::json!({ "candidates": share }));
        let specs = plan.scan_jobs("dmine-count", &disklet)?;
        let (parts, s) = collect(plan, specs, |b| rows::read_keyed_counts(b, "index")).await?;
        for (index, count) in parts.into_values().flatten() {
            let slot = (index as usize)
                .checked_add(first)
                .filter(|_| (index as usize) < share.len())
                .and_then(|i| sum.get_mut(i))
                .ok_or_else(|| {
                    AppError::Invalid(format!(
                        "pass {k}: a disk counted candidate {index} of {}",
                        share.len()
                    ))
                })?;
            *slot += count;
        }
        stats.extend(s);
        first += share.len();
    }
    Ok((sum, stats, shares.len()))
}

/// `candidates` in consecutive shares whose JSON takes at most half of `spec_limit` each (the
/// rest of a job spec is a few KiB; the half leaves room for JSON's own overhead), one share
/// when they all fit.
fn spec_shares(candidates: &[Vec<u32>], spec_limit: u64) -> Vec<&[Vec<u32>]> {
    let budget = (spec_limit / 2) as usize;
    let mut shares = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, c) in candidates.iter().enumerate() {
        // `[a,b,c]` and a comma: at most 11 bytes per item (10 digits and a comma) plus 3.
        let size = 3 + c.iter().map(|x| digits(*x) + 1).sum::<usize>();
        if bytes + size > budget && i > start {
            shares.push(&candidates[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < candidates.len() || shares.is_empty() {
        shares.push(&candidates[start..]);
    }
    shares
}

/// Decimal digits of `x`.
fn digits(x: u32) -> usize {
    x.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// The hybrid grid's sections at pass `k`: asked for, or the fewest (dividing the disks)
/// whose largest section fits the scratch.
fn hybrid_sections(
    plan: &Plan<'_>,
    k: usize,
    candidates: &[Vec<u32>],
) -> Result<Vec<Vec<Vec<u32>>>> {
    let n = plan.disks.len();
    // A section fits its disks' scratch and one job spec (hybrid does not split a section
    // over scans: more sections make each smaller).
    let fits = |parts: &Vec<Vec<Vec<u32>>>| {
        parts.iter().all(|s| {
            CandidateCounter::new(s).bytes() <= plan.scratch
                && spec_shares(s, plan.spec_limit).len() == 1
        })
    };
    let choices: Vec<usize> = match plan.params.sections {
        Some(s) => vec![s],
        None => (1..=n).filter(|s| n.is_multiple_of(*s)).collect(),
    };
    for s in choices {
        HybridGrid::new(n, s).map_err(invalid)?;
        let parts = kernel::partition_candidates(candidates, s).map_err(invalid)?;
        if fits(&parts) {
            return Ok(parts);
        }
    }
    Err(AppError::Invalid(format!(
        "pass {k}: a section of the {} candidates does not fit the scratch of {} KiB or a job spec of {} KiB with {} sections; raise --scratch-kib, or use --method count (it splits its candidates over scans)",
        candidates.len(),
        plan.scratch / 1024,
        plan.spec_limit / 2 / 1024,
        plan.params
            .sections
            .map_or_else(|| format!("up to {n}"), |s| s.to_string())
    )))
}

/// Hybrid distribution at pass `k` (chiu §4.2.1): the candidates in S sections; the disks of
/// a row exchange their transactions, so disk i counts section `i mod S` over its row's data;
/// the counts of a section are summed over its group (one disk per row).
async fn pass_hybrid(
    plan: &Plan<'_>,
    k: usize,
    candidates: &[Vec<u32>],
) -> Result<(Vec<u64>, Vec<DiskJobStats>, usize)> {
    let parts = hybrid_sections(plan, k, candidates)?;
    let s = parts.len();
    let grid = HybridGrid::new(plan.disks.len(), s).map_err(invalid)?;
    let exchanges: Vec<String> = (0..grid.rows()).map(|_| new_id("dmine-row")).collect();
    let mut specs = Vec::new();
    for (i, d) in plan.disks.iter().enumerate() {
        let section = grid.section_of(i).map_err(invalid)?;
        let disklet = app(
            "candidates",
            serde_json::json!({ "candidates": parts[section] }),
        );
        let spec = if s == 1 {
            plan.scan_job("dmine-hybrid", vec![disklet])?
        } else {
            let row = i / s;
            let targets = (row * s..row * s + s)
                .map(|p| plan.cluster.address(plan.disks[p]).to_string())
                .collect();
            row_job(plan, disklet, &exchanges[row], targets, (i % s) as u32)?
        };
        specs.push((*d, spec));
    }
    let (counts, stats) = collect(plan, specs, |b| rows::read_keyed_counts(b, "index")).await?;
    let counts = sum_sections(plan, &grid, &parts, &counts, k)?;
    let counts = candidates
        .iter()
        .map(|c| counts.get(c).copied().unwrap_or(0))
        .collect();
    Ok((counts, stats, s))
}

/// The count of every candidate: each disk's counts of its section, summed over the
/// section's group.
fn sum_sections<'c>(
    plan: &Plan<'_>,
    grid: &HybridGrid,
    parts: &'c [Vec<Vec<u32>>],
    counts: &BTreeMap<u32, Vec<(u32, u64)>>,
    k: usize,
) -> Result<BTreeMap<&'c Vec<u32>, u64>> {
    let mut sum = BTreeMap::new();
    for (i, d) in plan.disks.iter().enumerate() {
        let section = &parts[grid.section_of(i).map_err(invalid)?];
        for (index, count) in counts.get(d).into_iter().flatten() {
            let candidate = section.get(*index as usize).ok_or_else(|| {
                AppError::Invalid(format!(
                    "pass {k}: disk {d} counted candidate {index} of {}",
                    section.len()
                ))
            })?;
            *sum.entry(candidate).or_insert(0) += count;
        }
    }
    Ok(sum)
}

/// One disk's hybrid job: its transactions broadcast to its row (`targets`, itself among
/// them), and its section counted over what the row sends it.
fn row_job(
    plan: &Plan<'_>,
    disklet: DiskletSpec,
    exchange_id: &str,
    targets: Vec<String>,
    sender: u32,
) -> Result<JobSpec> {
    let mut job = JobBuilder::new("dmine-hybrid").program(PROGRAM);
    let row = job.input(Source::Pipe {
        exchange_id: exchange_id.into(),
        senders: targets.len() as u32,
        schema: plan.schema.as_ref().clone(),
    });
    let own = job.input(plan.source());
    let counted = job.stage(disklet, vec![row]);
    job.output(counted, Sink::Host);
    job.output(
        own,
        exchange(exchange_id, targets, sender, Route::Broadcast),
    );
    Ok(job.sizes(plan.sizes()).build()?)
}

/// Eclat's third pass in rounds: each round maps some classes (by first item) to the disk
/// that mines them. Classes go to disks by work (greedy balance); then each disk's classes are
/// packed into rounds so that the tid-lists it receives in one round fit half its scratch
/// (their sizes are known from pass 2's counts). One round when everything fits; each further
/// round scans the transactions again.
fn eclat_rounds(plan: &Plan<'_>, pairs: &[(kernel::Pair, u64)]) -> Result<Vec<BTreeMap<u32, u32>>> {
    let list: Vec<kernel::Pair> = pairs.iter().map(|(p, _)| *p).collect();
    let senders = plan.disks.len() as u64;
    let mut bytes: BTreeMap<u32, u64> = BTreeMap::new();
    for ((a, _), count) in pairs {
        // The receiver's estimate: 8 bytes per tid, 32 per shipped piece.
        let pieces = count / rows::TID_CHUNK as u64 + 2 * senders;
        *bytes.entry(*a).or_insert(0) += count * 8 + 32 * pieces;
    }
    let capacity = plan.scratch / 2 / 10 * 9;
    let mut owners = class_owners(&list, plan.cluster.disk_count())?;
    owners.sort_by_key(|(prefix, _)| std::cmp::Reverse(bytes[prefix]));
    let mut rounds: Vec<BTreeMap<u32, u32>> = Vec::new();
    let mut loads: Vec<BTreeMap<u32, u64>> = Vec::new();
    for (prefix, disk) in owners {
        let b = bytes[&prefix];
        if b > capacity {
            return Err(AppError::Invalid(format!(
                "eclat: the tid-lists of the class of item {prefix} take about {b} bytes, more than a disk mines at once (half its scratch of {} KiB); raise --scratch-kib or the support",
                plan.scratch / 1024
            )));
        }
        let fits =
            |load: &BTreeMap<u32, u64>| load.get(&disk).copied().unwrap_or(0) + b <= capacity;
        let r = loads.iter().position(fits).unwrap_or_else(|| {
            loads.push(BTreeMap::new());
            rounds.push(BTreeMap::new());
            loads.len() - 1
        });
        *loads[r].entry(disk).or_insert(0) += b;
        rounds[r].insert(prefix, disk);
    }
    Ok(rounds)
}

/// One round of eclat's third pass: the tid-lists of the frequent pairs of the round's classes
/// built at every disk, shipped to the disk owning their class (`owner`: prefix → disk), mined
/// there; every frequent itemset of size ≥ 2 of those classes.
async fn pass_eclat(
    plan: &Plan<'_>,
    pairs: &[(kernel::Pair, u64)],
    owner: &BTreeMap<u32, u32>,
) -> Result<(Vec<(Vec<u32>, u64)>, Vec<DiskJobStats>)> {
    let pairs: Vec<kernel::Pair> = pairs
        .iter()
        .map(|(p, _)| *p)
        .filter(|(a, _)| owner.contains_key(a))
        .collect();
    let targets: Vec<(u32, u32)> = owner.iter().map(|(p, d)| (*p, *d)).collect();
    let n = plan.cluster.disk_count();
    let wiring = EclatWiring {
        exchange_id: new_id("dmine-x"),
        addresses: (0..n)
            .map(|d| plan.cluster.address(d).to_string())
            .collect(),
        route: Route::Range {
            key: encode_expr(&col("target"))?,
            bounds: (0..n.saturating_sub(1))
                .map(|b| encode_expr(&lit(ScalarValue::UInt32(Some(b)))))
                .collect::<adisk_host::Result<_>>()?,
        },
        sender: app(
            "tid_lists",
            serde_json::json!({ "pairs": pairs, "targets": targets }),
        ),
        receiver: app("eclat", serde_json::json!({ "min_count": plan.min_count })),
    };
    let specs = (0..n)
        .map(|d| Ok((d, eclat_job(plan, d, &wiring)?)))
        .collect::<Result<Vec<_>>>()?;
    let (found, stats) = collect(plan, specs, rows::read_itemsets).await?;
    Ok((found.into_values().flatten().collect(), stats))
}

/// The equivalence classes of `pairs` (by first item), each given to one of `disks` by
/// weight (greedy balance, [`kernel::assign_classes`]): `(prefix, disk)`.
fn class_owners(pairs: &[kernel::Pair], disks: u32) -> Result<Vec<(u32, u32)>> {
    let classes = kernel::equivalence_classes(pairs);
    let weights: Vec<u64> = classes.iter().map(|c| c.weight.max(1)).collect();
    let owner = kernel::assign_classes(&weights, disks as usize).map_err(invalid)?;
    Ok(classes
        .iter()
        .zip(&owner)
        .map(|(c, d)| (c.prefix, *d as u32))
        .collect())
}

/// What every disk's eclat job shares.
struct EclatWiring {
    exchange_id: String,
    addresses: Vec<String>,
    route: Route,
    sender: DiskletSpec,
    receiver: DiskletSpec,
}

/// Disk `d`'s eclat job: its classes' tid-lists from every sender (pipe ─► `eclat` ─► host)
/// and, where it holds transactions, its own tid-lists out (scan ─► `tid_lists` ─► exchange).
fn eclat_job(plan: &Plan<'_>, d: u32, w: &EclatWiring) -> Result<JobSpec> {
    let mut job = JobBuilder::new("dmine-eclat").program(PROGRAM);
    let tid_lists = job.input(Source::Pipe {
        exchange_id: w.exchange_id.clone(),
        senders: plan.disks.len() as u32,
        schema: rows::tid_lists_schema().as_ref().clone(),
    });
    let mined = job.stage(w.receiver.clone(), vec![tid_lists]);
    job.output(mined, Sink::Host);
    if let Some(position) = plan.disks.iter().position(|x| *x == d) {
        let transactions = job.input(plan.source());
        let built = job.stage(w.sender.clone(), vec![transactions]);
        let sink = exchange(
            w.exchange_id.clone(),
            w.addresses.clone(),
            position as u32,
            w.route.clone(),
        );
        job.output(built, sink);
    }
    Ok(job.sizes(plan.sizes()).build()?)
}

// ---------------------------------------------------------------------------------------------
// Conventional: every transaction to the host, the same passes there
// ---------------------------------------------------------------------------------------------

async fn conventional(plan: &Plan<'_>, report: &mut Report) -> Result<(Found, serde_json::Value)> {
    let t = Instant::now();
    let specs = plan
        .disks
        .iter()
        .map(|d| Ok((*d, plan.scan_job("dmine-read", vec![])?)))
        .collect::<Result<Vec<_>>>()?;
    let (parts, stats) = collect(plan, specs, |b| {
        let t = rows::Transactions::new(b)?;
        Ok((0..t.len())
            .map(|i| (t.get(i).0, t.get(i).1.to_vec()))
            .collect())
    })
    .await?;
    report.phase("read transactions at host", t.elapsed(), stats);
    let t = Instant::now();
    let mut all: Vec<(u64, Vec<u32>)> = parts.into_values().flatten().collect();
    all.sort_unstable_by_key(|(tid, _)| *tid);
    let found = mine_at_host(
        &all,
        plan.min_count,
        plan.params.method,
        &plan.params.pair_table,
    );
    report.phase("mine at host", t.elapsed(), Vec::new());
    Ok((found, serde_json::json!({})))
}

/// The same passes on one node: count distribution over all transactions (hybrid
/// distribution on one node is count distribution), or eclat over all tid-lists.
pub fn mine_at_host(
    transactions: &[(u64, Vec<u32>)],
    min: u64,
    method: Method,
    pair_table: &str,
) -> Found {
    let mut items = ItemCounter::new();
    transactions.iter().for_each(|(_, t)| items.feed(t));
    let items = kernel::frequent(&items.finish(), min);
    let ids: Vec<u32> = items.iter().map(|(i, _)| *i).collect();
    let max_table = match pair_table {
        "triangular" => u64::MAX,
        "sparse" => 0,
        _ => HOST_PAIR_TABLE_BYTES,
    };
    let mut pairs = PairCounter::new(&ids, max_table);
    transactions.iter().for_each(|(_, t)| pairs.feed(t));
    let pairs = kernel::frequent(&pairs.finish(), min);
    let mut found: Found = items.iter().map(|(i, c)| (vec![*i], *c)).collect();
    found.extend(pairs.iter().map(|((a, b), c)| (vec![*a, *b], *c)));
    if method == Method::Eclat {
        let list: Vec<kernel::Pair> = pairs.iter().map(|(p, _)| *p).collect();
        let mut builder = TidListBuilder::new(&list);
        transactions
            .iter()
            .for_each(|(tid, t)| builder.feed(*tid, t));
        let mut by_prefix: BTreeMap<u32, Vec<(u32, Vec<u64>)>> = BTreeMap::new();
        for ((a, b), tids) in builder.finish() {
            by_prefix.entry(a).or_default().push((b, tids));
        }
        for (prefix, members) in by_prefix {
            found.extend(kernel::eclat_class(prefix, members, min));
        }
        return found;
    }
    let txs: Vec<Vec<u32>> = transactions.iter().map(|(_, t)| t.clone()).collect();
    let mut level: Vec<Vec<u32>> = pairs.iter().map(|((a, b), _)| vec![*a, *b]).collect();
    loop {
        let candidates = kernel::candidates(&level).unwrap_or_default();
        if candidates.is_empty() {
            return found;
        }
        let counts = kernel::count_candidates(&txs, &candidates);
        level = keep_frequent(candidates, counts, min, &mut found);
    }
}

// ---------------------------------------------------------------------------------------------
// Result and oracle
// ---------------------------------------------------------------------------------------------

fn summary(
    found: &Found,
    p: &DmineParams,
    min: u64,
    rows: u64,
    notes: serde_json::Value,
) -> serde_json::Value {
    let mut by_size: BTreeMap<usize, u64> = BTreeMap::new();
    found
        .keys()
        .for_each(|k| *by_size.entry(k.len()).or_insert(0) += 1);
    let mut v = serde_json::json!({
        "method": p.method.to_string(),
        "support": p.support,
        "min_count": min,
        "transactions": rows,
        "frequent": found.len(),
        "frequent_by_size": by_size.iter().map(|(k, n)| (k.to_string(), *n)).collect::<BTreeMap<_, _>>(),
    });
    if let serde_json::Value::Object(extra) = notes {
        for (k, x) in extra {
            v[k] = x;
        }
    }
    if p.list_itemsets {
        v["itemsets"] = found
            .iter()
            .map(|(k, c)| serde_json::json!([k, c]))
            .collect();
    }
    v
}

/// Records in `result` whether `found` equals the oracle's answer, itemset by itemset.
fn check(result: &mut serde_json::Value, found: &Found, oracle: &Result<Found, String>) {
    match oracle {
        Err(why) => {
            // Nothing to compare with (not a generated table): unknown, not wrong.
            result["valid"] = serde_json::Value::Null;
            result["oracle"] = serde_json::json!(why);
        }
        Ok(want) => {
            let wrong: Vec<&Vec<u32>> = want
                .iter()
                .filter(|(k, c)| found.get(*k) != Some(c))
                .map(|(k, _)| k)
                .chain(found.keys().filter(|k| !want.contains_key(*k)))
                .collect();
            result["valid"] = serde_json::Value::Bool(wrong.is_empty());
            result["oracle"] = serde_json::json!("apriori over the regenerated transactions");
            result["oracle_frequent"] = serde_json::json!(want.len());
            result["mismatches"] = serde_json::json!(wrong.len());
            if let Some(first) = wrong.first() {
                result["first_mismatch"] = serde_json::json!({
                    "itemset": first, "found": found.get(*first), "oracle": want.get(*first)
                });
            }
        }
    }
}

/// Apriori over the transactions regenerated from `T_gen`'s parameters (Err: why there is
/// no oracle answer to compare with).
async fn oracle(
    cluster: &Cluster,
    input: &str,
    rows: u64,
    min: u64,
) -> Result<Result<Found, String>> {
    let Some(generated) = read_gen(cluster, input).await? else {
        return Ok(Err(format!(
            "no generator parameters (`{}`); load the input with adisk load dmine",
            gen_table(input)
        )));
    };
    if generated.transactions != rows {
        return Ok(Err(format!(
            "`{input}` holds {rows} transactions, its generator {}",
            generated.transactions
        )));
    }
    let g = Generator::new(&generated).map_err(invalid)?;
    let txs = g.transactions(0..generated.transactions);
    Ok(Ok(kernel::apriori(&txs, min)))
}

/// The generator parameters stored by the load, read from the first disk holding them.
async fn read_gen(cluster: &Cluster, input: &str) -> Result<Option<GenParams>> {
    let table = gen_table(input);
    let catalog = cluster.catalog().await?;
    let Some(d) = catalog
        .tables
        .get(&table)
        .and_then(|e| e.disks().first().copied())
    else {
        return Ok(None);
    };
    let spec = JobBuilder::chain(
        "dmine-gen",
        builder::table(table, vec![]),
        vec![],
        Sink::Host,
    )
    .program(PROGRAM)
    .build()?;
    let mut got = None;
    run_phase(cluster, vec![(d, spec)], |_, b| {
        if got.is_none() && b.num_rows() > 0 {
            got = Some(gen_from_batch(&b).map_err(adisk_host::HostError::Invalid)?);
        }
        Ok(())
    })
    .await?;
    Ok(got)
}

fn gen_from_batch(b: &RecordBatch) -> std::result::Result<GenParams, String> {
    fn get<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> std::result::Result<&'a T, String> {
        b.column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<T>())
            .ok_or_else(|| format!("dmine: generator parameters without `{name}`"))
    }
    Ok(GenParams {
        transactions: get::<UInt64Array>(b, "transactions")?.value(0),
        avg_transaction_len: get::<Float64Array>(b, "avg_len")?.value(0),
        avg_pattern_len: get::<Float64Array>(b, "pattern_len")?.value(0),
        patterns: get::<UInt64Array>(b, "patterns")?.value(0) as usize,
        items: get::<UInt32Array>(b, "items")?.value(0),
        seed: get::<UInt64Array>(b, "seed")?.value(0),
    })
}

fn gen_batch(g: &GenParams) -> RecordBatch {
    RecordBatch::try_new(
        rows::gen_schema(),
        vec![
            std::sync::Arc::new(UInt64Array::from(vec![g.transactions])),
            std::sync::Arc::new(Float64Array::from(vec![g.avg_transaction_len])),
            std::sync::Arc::new(Float64Array::from(vec![g.avg_pattern_len])),
            std::sync::Arc::new(UInt64Array::from(vec![g.patterns as u64])),
            std::sync::Arc::new(UInt32Array::from(vec![g.items])),
            std::sync::Arc::new(UInt64Array::from(vec![g.seed])),
        ],
    )
    .expect("columns match the schema")
}

// ---------------------------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------------------------

/// Generates the transactions of `generated` into `table` (disk d holds the tid range
/// [`Generator::disk_range`] d, in batches of 4096) and the parameters into `table_gen`.
/// Returns the items stored.
///
/// # Errors
/// Bad generator parameters (typed, [`kernel::DmineError`]), a bad table name, a disk failing
/// the load.
pub async fn load(
    cluster: &Cluster,
    table: &str,
    generated: &GenParams,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<u64> {
    let g = std::sync::Arc::new(Generator::new(generated).map_err(invalid)?);
    adisk_storage::store::validate_table_name(&gen_table(table))
        .map_err(adisk_host::HostError::from)?;
    let n = cluster.disk_count() as usize;
    let items = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut generators: Vec<adisk_host::load::DiskGenerator> = Vec::new();
    for d in 0..n {
        let range = g.disk_range(d, n).map_err(invalid)?;
        let (g, items) = (g.clone(), items.clone());
        generators.push(Box::new(move |_| {
            let chunks = range.clone().step_by(4096).map(move |s| {
                let txs = g.transactions(s..(s + 4096).min(range.end));
                let stored: usize = txs.iter().map(Vec::len).sum();
                items.fetch_add(stored as u64, std::sync::atomic::Ordering::Relaxed);
                Ok(rows::transactions_batch(s, &txs))
            });
            Box::new(chunks) as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
        }));
    }
    adisk_host::load::load_generated(
        cluster,
        table,
        rows::transactions_schema(),
        generators,
        progress,
    )
    .await?;
    let params: Vec<adisk_host::load::DiskGenerator> = (0..n)
        .map(|_| {
            let batch = gen_batch(generated);
            Box::new(move |_| {
                Box::new(std::iter::once(Ok(batch)))
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(
        cluster,
        &gen_table(table),
        rows::gen_schema(),
        params,
        |_| {},
    )
    .await?;
    Ok(items.load(std::sync::atomic::Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_split_into_shares_a_job_spec_takes() {
        let candidates: Vec<Vec<u32>> =
            (0..5000u32).map(|i| vec![i, i + 1, u32::MAX - i]).collect();
        let limit = 64 << 10;
        let shares = spec_shares(&candidates, limit);
        assert!(shares.len() > 1, "{} shares", shares.len());
        assert_eq!(
            shares.concat(),
            candidates,
            "every candidate once, in order"
        );
        for s in &shares {
            let json = serde_json::to_vec(&serde_json::json!({ "candidates": s })).unwrap();
            assert!(json.len() as u64 <= limit / 2, "{} bytes", json.len());
        }
        // All in one when they fit; none, one empty share; one candidate past the budget
        // still goes (alone).
        assert_eq!(spec_shares(&candidates[..10], limit).len(), 1);
        assert_eq!(spec_shares(&[], limit), vec![&[] as &[Vec<u32>]]);
        let wide = vec![vec![7u32; 10_000]];
        assert_eq!(spec_shares(&wide, limit).len(), 1);
        assert_eq!(
            (digits(0), digits(9), digits(10), digits(u32::MAX)),
            (1, 1, 2, 10)
        );
    }
}
