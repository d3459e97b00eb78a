//! The applications of acharya-… §4 and uysal-… §5: select, aggregate, group-by, external
//! sort (two-pass NOW-sort), sort-merge project-join, datacube (PipeHash), frequent itemsets
//! (count distribution then eclat), image convolution, satellite composite.

use super::context::{KeyError, Wctx, frac, pos, req};
use crate::config::{ArchKind, WorkloadConfig};
use crate::engine::{Amount, Dest, Flow, Input, Phase, Plan};
use crate::model::memory::{expected_distinct, hash_aggregate, sort_plan};

fn flow(dest: Dest, amount: Amount, recv_cycles_per_byte: f64, write: Option<u32>) -> Flow {
    Flow {
        dest,
        amount,
        recv_cycles_per_byte,
        write,
    }
}

/// SQL select: filter at the workers, concatenate at the coordinator.
pub fn select(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "select")?;
    let s = frac(cfg.selectivity, "selectivity", "select")?;
    let mut plan = Plan::default();
    let rel = plan.file("relation");
    plan.base_files.push((rel, d));
    let mut ph = Phase::new("select");
    ph.input = Input::File(rel);
    ph.cycles_per_byte = ctx.c("select_cycles_per_byte");
    ph.flows.push(flow(
        Dest::Coordinator,
        Amount::Ratio(s),
        ctx.c("copy_cycles_per_byte"),
        None,
    ));
    plan.phases.push(ctx.protocol(ph));
    plan.note("selected_bytes", format!("{:.0}", d * s));
    Ok(plan)
}

/// SQL aggregate: one value per worker, combined at the coordinator.
pub fn aggregate(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "aggregate")?;
    let mut plan = Plan::default();
    let rel = plan.file("relation");
    plan.base_files.push((rel, d));
    let mut ph = Phase::new("aggregate");
    ph.input = Input::File(rel);
    ph.cycles_per_byte = ctx.c("scan_sum_cycles_per_byte");
    if !ctx.single_node {
        ph.flows.push(flow(
            Dest::Coordinator,
            Amount::Bytes(16.0),
            ctx.c("merge_partial_cycles_per_entry") / 16.0,
            None,
        ));
    }
    plan.phases.push(ctx.protocol(ph));
    Ok(plan)
}

/// SQL group-by with hash tables that fit or flush partial results (acharya-… §4).
pub fn group_by(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "group_by")?;
    let t = pos(cfg.tuple_bytes, "tuple_bytes", "group_by")?;
    let g = pos(cfg.groups, "groups", "group_by")?;
    let e = cfg.entry_bytes.unwrap_or(16.0).max(1.0);
    let mut plan = Plan::default();
    let rel = plan.file("relation");
    plan.base_files.push((rel, d));
    let tuples = d / t;
    let scan = ctx.c("select_cycles_per_byte") + ctx.c("hash_group_cycles_per_tuple") / t;
    let merge = ctx.c("merge_partial_cycles_per_entry") / e;
    if ctx.single_node {
        let o = hash_aggregate(tuples, g, e, ctx.mem_per_worker);
        plan.note("host_table_fits", o.fits);
        if o.fits {
            let mut ph = Phase::new("group-by");
            ph.input = Input::File(rel);
            ph.cycles_per_byte = scan;
            plan.phases.push(ph);
        } else {
            // Hash-partition to disk so each partition's table fits, then aggregate each.
            let parts = ((g * e) / ctx.mem_per_worker).ceil().max(2.0);
            plan.note("partitions", parts);
            let part = plan.file("partitions");
            let mut p1 = Phase::new("group-by: partition");
            p1.input = Input::File(rel);
            p1.cycles_per_byte =
                ctx.c("select_cycles_per_byte") + ctx.c("partition_cycles_per_tuple") / t;
            p1.flows
                .push(flow(Dest::Local, Amount::Ratio(1.0), 0.0, Some(part)));
            p1.write_vol = 1;
            p1.write_estimates.push((part, d));
            plan.phases.push(p1);
            let mut p2 = Phase::new("group-by: aggregate partitions");
            p2.input = Input::File(part);
            p2.read_vol = 1;
            p2.cycles_per_byte = ctx.c("hash_group_cycles_per_tuple") / t;
            plan.phases.push(p2);
        }
        return Ok(plan);
    }
    let n = tuples / ctx.n as f64;
    let o = hash_aggregate(n, g, e, ctx.mem_per_worker);
    let capacity = (ctx.mem_per_worker / e).floor();
    let flushed = o.flushes * capacity * e;
    let final_bytes = (o.output_entries - o.flushes * capacity).max(0.0) * e;
    plan.note("local_table_fits", o.fits);
    plan.note("flushes_per_worker", format!("{:.1}", o.flushes));
    plan.note(
        "partial_bytes_per_worker",
        format!("{:.0}", o.output_entries * e),
    );
    if g * e > ctx.coord_mem && ctx.kind != ArchKind::Smp {
        plan.note(
            "warning",
            "the combined table is larger than the coordinator's memory (spilling not modelled)",
        );
    }
    // uysal-… §5: active disks and clusters ship partials "to the front-end"; "In the SMP
    // algorithm, each processor computes a local version of the `group-by`; results from
    // all processors are merged at the end", by no named processor. The SMP's datacube,
    // which "performs the group-bys in a batched manner – similar to that for group-by",
    // merges each range of values at one processor, so the SMP's group-by does the same
    // (it used to merge everything at board 0, which made 128 processors 1.6 times slower
    // than 64).
    let dest = if ctx.kind == ArchKind::Smp {
        plan.note("merge", "each processor merges one range of groups");
        Dest::Shuffle
    } else {
        Dest::Coordinator
    };
    let mut ph = Phase::new("group-by");
    ph.input = Input::File(rel);
    ph.cycles_per_byte = scan;
    if flushed > 0.0 {
        ph.flows
            .push(flow(dest, Amount::Ratio(flushed / (n * t)), merge, None));
    }
    ph.flows
        .push(flow(dest, Amount::Bytes(final_bytes), merge, None));
    plan.phases.push(ctx.protocol(ph));
    Ok(plan)
}

/// Two-pass NOW-sort: partition + run formation with an all-to-all shuffle, then a local merge.
pub fn sort(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "sort")?;
    let t = pos(cfg.tuple_bytes, "tuple_bytes", "sort")?;
    let mut plan = Plan::default();
    let rel = plan.file("relation");
    plan.base_files.push((rel, d));
    let per = d / ctx.n as f64;
    let sp = sort_plan(per, ctx.mem_per_worker, ctx.request_bytes);
    plan.note("runs_per_worker", sp.runs);
    plan.note("merge_passes", sp.merge_passes);
    plan.note("in_memory", sp.in_memory);
    let mut p1 = Phase::new("sort: partition + runs");
    p1.input = Input::File(rel);
    p1.cycles_per_byte = ctx.c("partition_cycles_per_tuple") / t;
    p1.write_vol = 1;
    p1.requests_in_flight = ctx.sort_phase_one_requests;
    let runs0 = plan.file("runs0");
    let write = if sp.in_memory { None } else { Some(runs0) };
    p1.flows.push(flow(
        Dest::Shuffle,
        Amount::Ratio(1.0),
        ctx.c("radix_sort_cycles_per_tuple") / t,
        write,
    ));
    if write.is_some() {
        p1.write_estimates.push((runs0, d));
    }
    plan.phases.push(ctx.protocol(p1));
    let sorted = plan.file("sorted");
    if sp.in_memory {
        let mut p2 = Phase::new("sort: write sorted");
        p2.input = Input::Memory(per);
        p2.flows
            .push(flow(Dest::Local, Amount::Ratio(1.0), 0.0, Some(sorted)));
        p2.write_vol = 0;
        p2.write_estimates.push((sorted, d));
        plan.phases.push(ctx.protocol(p2));
        return Ok(plan);
    }
    let mut src = runs0;
    let mut vol = 1;
    for pass in 0..sp.merge_passes {
        let last = pass + 1 == sp.merge_passes;
        let dst = if last {
            sorted
        } else {
            plan.file(&format!("runs{}", pass + 1))
        };
        let mut p = Phase::new(if last {
            "sort: merge".to_string()
        } else {
            format!("sort: merge pass {}", pass + 1)
        });
        // acharya-… §4 (NOW-sort): "A reader reads one block from each sorted partition";
        // the active-disk merger reads every partition as its own stream. Blocks of
        // different runs alternate, so every request-sized block is a separate access.
        p.input = merge_input(src, ctx);
        p.read_vol = vol;
        p.write_vol = 1 - vol;
        p.cycles_per_byte = ctx.c("merge_cycles_per_tuple") / t;
        p.flows
            .push(flow(Dest::Local, Amount::Ratio(1.0), 0.0, Some(dst)));
        p.write_estimates.push((dst, d));
        plan.phases.push(ctx.protocol(p));
        src = dst;
        vol = 1 - vol;
    }
    Ok(plan)
}

/// The input of a merge over sorted runs on disk: one request-sized block of one run at a
/// time, the runs interleaved, so each block is a separate access that seeks.
fn merge_input(runs: u32, ctx: &Wctx) -> Input {
    Input::Segmented(runs, (ctx.request_bytes.max(512.0)) as u64)
}

/// Sort-merge project-join of two relations (uysal-… §5): two repartition passes, one local merge-join.
pub fn join(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "join")?;
    let t = pos(cfg.tuple_bytes, "tuple_bytes", "join")?;
    let p = cfg.projected_bytes.unwrap_or(t).clamp(1.0, t);
    let out = req(cfg.output_bytes, "output_bytes", "join")?;
    let mut plan = Plan::default();
    let r = plan.file("R");
    let s = plan.file("S");
    plan.base_files.push((r, d / 2.0));
    plan.base_files.push((s, d / 2.0));
    let per_proj = d / 2.0 * (p / t) / ctx.n as f64;
    let sp = sort_plan(2.0 * per_proj, ctx.mem_per_worker, ctx.request_bytes);
    plan.note("runs_per_worker", sp.runs);
    plan.note("in_memory", sp.in_memory);
    let runs = plan.file("runs");
    for (name, f) in [("join: repartition R", r), ("join: repartition S", s)] {
        let mut ph = Phase::new(name);
        ph.input = Input::File(f);
        ph.cycles_per_byte =
            ctx.c("select_cycles_per_byte") + ctx.c("partition_cycles_per_tuple") / t;
        ph.write_vol = 1;
        let w = if sp.in_memory { None } else { Some(runs) };
        ph.flows.push(flow(
            Dest::Shuffle,
            Amount::Ratio(p / t),
            ctx.c("radix_sort_cycles_per_tuple") / p,
            w,
        ));
        if w.is_some() {
            ph.write_estimates.push((runs, d / 2.0 * p / t));
        }
        plan.phases.push(ctx.protocol(ph));
    }
    let mut m = Phase::new("join: merge-join");
    m.input = if sp.in_memory {
        Input::Memory(2.0 * per_proj)
    } else {
        merge_input(runs, ctx)
    };
    m.read_vol = 1;
    m.cycles_per_byte = ctx.c("join_merge_cycles_per_tuple") / p;
    m.flows.push(flow(
        Dest::Coordinator,
        Amount::Bytes(out / ctx.n as f64),
        ctx.c("copy_cycles_per_byte"),
        None,
    ));
    plan.phases.push(ctx.protocol(m));
    Ok(plan)
}

/// One group-by of the datacube lattice.
#[derive(Clone, Debug)]
pub struct CubeNode {
    /// Attribute bitmask.
    pub mask: u32,
    /// Estimated distinct groups.
    pub groups: f64,
    /// Bytes per result entry (4 bytes per group-by attribute + 4 sums of 4 bytes).
    pub entry_bytes: f64,
    /// Parent in the minimum spanning tree (`None` = the base relation).
    pub parent: Option<u32>,
}

/// How the datacube's group-by attributes are distributed jointly (`workload.attribute_distribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CubeAttributes {
    /// Uniform and independent: a group-by has the expected distinct values of the product
    /// of its attributes' cardinalities over the tuples.
    Independent,
    /// Each attribute determined by the one with more distinct values: a group-by has as
    /// many groups as its largest attribute (the fewest any distribution allows).
    Hierarchical,
}

/// The PipeHash search tree: each group-by is computed from its smallest parent.
pub fn cube_lattice(tuples: f64, cards: &[f64], attributes: CubeAttributes) -> Vec<CubeNode> {
    let k = cards.len() as u32;
    let full = (1u32 << k) - 1;
    let groups = |m: u32| {
        let of_m = (0..k)
            .filter(|i| m & (1 << i) != 0)
            .map(|i| cards[i as usize]);
        match attributes {
            CubeAttributes::Independent => expected_distinct(tuples, of_m.product()).min(tuples),
            CubeAttributes::Hierarchical => of_m.fold(1.0, f64::max).min(tuples),
        }
    };
    let mut nodes = Vec::new();
    for m in (1..=full).rev() {
        let parent = if m == full {
            None
        } else {
            (0..k)
                .filter(|i| m & (1 << i) == 0)
                .map(|i| m | (1 << i))
                .min_by(|a, b| groups(*a).total_cmp(&groups(*b)).then(a.cmp(b)))
        };
        nodes.push(CubeNode {
            mask: m,
            groups: groups(m),
            entry_bytes: 4.0 * m.count_ones() as f64 + 16.0,
            parent,
        });
    }
    nodes
}

/// Split the search tree into pipelines: chains head → largest child → … (each pipeline is
/// computed in one scan of its head's parent).
pub fn cube_pipelines(nodes: &[CubeNode]) -> Vec<Vec<u32>> {
    let mut assigned: Vec<u32> = Vec::new();
    let mut pipes = Vec::new();
    let mut order: Vec<&CubeNode> = nodes.iter().collect();
    order.sort_by(|a, b| {
        b.mask
            .count_ones()
            .cmp(&a.mask.count_ones())
            .then(b.groups.total_cmp(&a.groups))
            .then(a.mask.cmp(&b.mask))
    });
    for head in order {
        if assigned.contains(&head.mask) {
            continue;
        }
        let mut chain = vec![head.mask];
        assigned.push(head.mask);
        let mut cur = head.mask;
        loop {
            let next = nodes
                .iter()
                .filter(|c| c.parent == Some(cur) && !assigned.contains(&c.mask))
                .max_by(|a, b| a.groups.total_cmp(&b.groups).then(b.mask.cmp(&a.mask)));
            match next {
                Some(c) => {
                    chain.push(c.mask);
                    assigned.push(c.mask);
                    cur = c.mask;
                }
                None => break,
            }
        }
        pipes.push(chain);
    }
    pipes
}

fn mask_name(m: u32) -> String {
    (0..8)
        .filter(|i| m & (1 << i) != 0)
        .map(|i| (b'A' + i as u8) as char)
        .collect()
}

fn cube_attributes(cfg: &WorkloadConfig) -> Result<CubeAttributes, KeyError> {
    match cfg.attribute_distribution.as_deref() {
        None | Some("independent") => Ok(CubeAttributes::Independent),
        Some("hierarchical") => Ok(CubeAttributes::Hierarchical),
        Some(other) => Err((
            "workload.attribute_distribution".into(),
            format!("`{other}` is not one of independent, hierarchical"),
        )),
    }
}

/// Datacube with PipeHash pipelines (acharya-… §4, uysal-… §5).
pub fn datacube(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "datacube")?;
    let t = pos(cfg.tuple_bytes, "tuple_bytes", "datacube")?;
    let cards = cube_cardinalities(cfg)?;
    let tuples = d / t;
    let nodes = cube_lattice(tuples, &cards, cube_attributes(cfg)?);
    let pipes = cube_pipelines(&nodes);
    let mut plan = Plan::default();
    let rel = plan.file("relation");
    plan.base_files.push((rel, d));
    plan.note("group_bys", nodes.len());
    plan.note(
        "pipelines",
        pipes
            .iter()
            .map(|p| chain_name(p.iter().copied()))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    let node_of = |m: u32| nodes.iter().find(|n| n.mask == m).cloned();
    let mut total_flushes = 0.0;
    for (pi, pipe) in pipes.iter().enumerate() {
        let Some(head) = node_of(pipe[0]) else {
            continue;
        };
        let (input, in_tuples, in_bytes_per) = match head.parent.and_then(node_of) {
            None => (rel, tuples, t),
            Some(p) => (
                plan.file(&format!("gb_{}", mask_name(p.mask))),
                p.groups,
                p.entry_bytes,
            ),
        };
        let members: Vec<CubeNode> = pipe.iter().filter_map(|m| node_of(*m)).collect();
        let total_size: f64 = members.iter().map(|m| m.groups * m.entry_bytes).sum();
        let name = format!(
            "datacube: pipeline {} ({})",
            pi + 1,
            chain_name(members.iter().map(|m| m.mask))
        );
        let mut ph = Phase::new(name);
        ph.input = Input::File(input);
        ph.cycles_per_byte = ctx.c("select_cycles_per_byte")
            + ctx.c("hash_group_cycles_per_tuple") * members.len() as f64 / in_bytes_per;
        let pipeline = Pipeline {
            index: pi,
            input,
            in_tuples,
            in_bytes_per,
            members,
            total_size,
        };
        if ctx.single_node {
            single_host_pipeline(&mut plan, ctx, &pipeline, ph);
        } else {
            distributed_pipeline(&mut plan, ctx, &pipeline, ph, &mut total_flushes);
        }
    }
    plan.note("flushes_per_worker_total", format!("{total_flushes:.1}"));
    Ok(plan)
}

/// The datacube's `workload.cardinalities`: 1 to 8 values, each at least 1.
fn cube_cardinalities(cfg: &WorkloadConfig) -> Result<Vec<f64>, KeyError> {
    let cards = cfg.cardinalities.clone().ok_or_else(|| {
        (
            "workload.cardinalities".to_string(),
            "required for kind datacube".to_string(),
        )
    })?;
    if cards.is_empty() || cards.len() > 8 || cards.iter().any(|c| !(c.is_finite() && *c >= 1.0)) {
        return Err((
            "workload.cardinalities".into(),
            "need 1 to 8 values, each >= 1".into(),
        ));
    }
    Ok(cards)
}

/// `AB>A`: the group-bys of a pipeline, joined by `>`.
fn chain_name(masks: impl Iterator<Item = u32>) -> String {
    masks.map(mask_name).collect::<Vec<_>>().join(">")
}

/// One PipeHash pipeline: its index, what it reads and the group-bys it computes.
struct Pipeline {
    index: usize,
    /// The file it reads (the relation or its parent group-by).
    input: u32,
    in_tuples: f64,
    in_bytes_per: f64,
    members: Vec<CubeNode>,
    /// Bytes of all its members' tables.
    total_size: f64,
}

/// A pipeline on a single host: its input partitioned first if its tables do not fit, every
/// group-by written locally.
fn single_host_pipeline(plan: &mut Plan, ctx: &Wctx, p: &Pipeline, mut ph: Phase) {
    let pi = p.index;
    if p.total_size > ctx.mem_per_worker {
        // Partition the input so each partition's tables fit.
        let part = plan.file(&format!("cube_part{pi}"));
        let mut pp = Phase::new(format!("datacube: partition input of pipeline {}", pi + 1));
        pp.input = Input::File(p.input);
        pp.cycles_per_byte = ctx.c("partition_cycles_per_tuple") / p.in_bytes_per;
        pp.flows
            .push(flow(Dest::Local, Amount::Ratio(1.0), 0.0, Some(part)));
        pp.write_estimates
            .push((part, p.in_tuples * p.in_bytes_per));
        plan.phases.push(pp);
        ph.input = Input::File(part);
        plan.note(
            format!("pipeline{}_partitions", pi + 1),
            (p.total_size / ctx.mem_per_worker).ceil(),
        );
    }
    for m in &p.members {
        let f = plan.file(&format!("gb_{}", mask_name(m.mask)));
        ph.flows.push(flow(
            Dest::Local,
            Amount::Bytes(m.groups * m.entry_bytes),
            0.0,
            Some(f),
        ));
        ph.write_estimates.push((f, m.groups * m.entry_bytes));
    }
    plan.phases.push(ph);
}

/// A pipeline over several workers: each member's hash table, sized by its share of memory,
/// flushes partial groups to be merged at the host or at their owning worker, which writes
/// the group-by. Adds the members' flushes per worker to `flushes`.
fn distributed_pipeline(
    plan: &mut Plan,
    ctx: &Wctx,
    p: &Pipeline,
    mut ph: Phase,
    flushes: &mut f64,
) {
    let at_host = ctx.via_host;
    let merge_per_entry = ctx.c("merge_partial_cycles_per_entry");
    let n_local = p.in_tuples / ctx.n as f64;
    let dest = if at_host {
        Dest::Coordinator
    } else {
        Dest::Shuffle
    };
    for m in &p.members {
        let share = if p.total_size > 0.0 {
            m.groups * m.entry_bytes / p.total_size
        } else {
            1.0
        };
        let mem = ctx.mem_per_worker * share;
        let o = hash_aggregate(n_local, m.groups, m.entry_bytes, mem);
        *flushes += o.flushes;
        let cap = (mem / m.entry_bytes).floor();
        let flushed = o.flushes * cap * m.entry_bytes;
        let final_b = (o.output_entries - o.flushes * cap).max(0.0) * m.entry_bytes;
        let recv = merge_per_entry / m.entry_bytes;
        if flushed > 0.0 {
            ph.flows.push(flow(
                dest,
                Amount::Ratio(flushed / (n_local * p.in_bytes_per)),
                recv,
                None,
            ));
        }
        ph.flows
            .push(flow(dest, Amount::Bytes(final_b), recv, None));
        let f = plan.file(&format!("gb_{}", mask_name(m.mask)));
        let result = m.groups * m.entry_bytes;
        if at_host {
            ph.coord_writes.push((f, result));
        } else {
            ph.flows.push(flow(
                Dest::Local,
                Amount::Bytes(result / ctx.n as f64),
                0.0,
                Some(f),
            ));
            ph.write_estimates.push((f, result));
        }
    }
    plan.phases.push(ctx.protocol(ph));
}

/// Frequent itemsets: two count-distribution passes, then eclat's repartition and local pass.
pub fn dmine(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "dmine")?;
    let txns = pos(cfg.transactions, "transactions", "dmine")?;
    let a = pos(cfg.items_per_transaction, "items_per_transaction", "dmine")?;
    let f = frac(cfg.repartition_fraction, "repartition_fraction", "dmine")?;
    let cands = cfg
        .candidates_per_pass
        .clone()
        .unwrap_or_else(|| vec![1e6, 5e5]);
    if cands.len() < 2 {
        return Err((
            "workload.candidates_per_pass".into(),
            "need the counters of passes 1 and 2".into(),
        ));
    }
    let bpt = d / txns;
    let mut plan = Plan::default();
    let rel = plan.file("transactions");
    plan.base_files.push((rel, d));
    let count = ctx.c("dmine_count_cycles_per_item");
    let merge = ctx.c("merge_partial_cycles_per_entry");
    for (pass, work, counters, entry) in [
        (1, a, cands[0], 4.0),
        (2, a * (a - 1.0) / 2.0, cands[1], 8.0),
    ] {
        let mut ph = Phase::new(format!("dmine: count pass {pass}"));
        ph.input = Input::File(rel);
        ph.cycles_per_byte = ctx.c("select_cycles_per_byte") + count * work / bpt;
        if ctx.kind == ArchKind::Smp {
            // uysal-… §5: "The original SMP algorithm performed fine-grained updates; we
            // modified it to batch updates to the counters associated with itemsets." The
            // counters are shared: each processor applies its own batches to them during the
            // scan, so nothing is reduced at one processor (it used to be, like the
            // count distribution of active disks and clusters, which made 128 processors
            // slower than 64).
            ph.cycles_per_byte += merge * counters / (d / ctx.n.max(1) as f64);
            plan.note(format!("pass{pass}_counters"), "shared, updated in batches");
        } else if !ctx.single_node {
            ph.flows.push(flow(
                Dest::Coordinator,
                Amount::Bytes(counters * entry),
                merge / entry,
                None,
            ));
            ph.broadcast_bytes = if pass == 2 { cands[0] * 4.0 } else { 0.0 };
        }
        plan.phases.push(ctx.protocol(ph));
    }
    let ec = plan.file("eclat");
    let mut p3 = Phase::new("dmine: eclat repartition");
    p3.input = Input::File(rel);
    p3.cycles_per_byte = ctx.c("select_cycles_per_byte");
    // Clusters and active disks send the frequent pairs to every worker; an SMP's
    // processors read them from shared memory.
    p3.broadcast_bytes = if ctx.single_node || ctx.kind == ArchKind::Smp {
        0.0
    } else {
        cands[1] * 8.0
    };
    p3.flows.push(flow(
        Dest::Shuffle,
        Amount::Ratio(f),
        ctx.c("copy_cycles_per_byte"),
        Some(ec),
    ));
    p3.write_estimates.push((ec, d * f));
    p3.write_vol = 0;
    plan.phases.push(ctx.protocol(p3));
    let mut p4 = Phase::new("dmine: eclat local pass");
    p4.input = Input::File(ec);
    p4.cycles_per_byte = ctx.c("dmine_eclat_cycles_per_byte");
    if !ctx.single_node {
        p4.flows
            .push(flow(Dest::Coordinator, Amount::Bytes(64e3), 0.0, None));
    }
    plan.phases.push(ctx.protocol(p4));
    Ok(plan)
}

/// Image convolution: compute-intensive, every processed image goes to the front-end.
pub fn conv(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "conv")?;
    let k = pos(cfg.kernel_side, "kernel_side", "conv")?;
    let mut plan = Plan::default();
    let rel = plan.file("images");
    plan.base_files.push((rel, d));
    let mut ph = Phase::new("convolution");
    ph.input = Input::File(rel);
    ph.cycles_per_byte = k * k * ctx.c("mac_cycles");
    if !ctx.single_node {
        ph.flows.push(flow(
            Dest::Coordinator,
            Amount::Ratio(1.0),
            ctx.c("copy_cycles_per_byte"),
            None,
        ));
    }
    plan.phases.push(ctx.protocol(ph));
    Ok(plan)
}

/// Satellite composite with local sub-grid accumulation (acharya-… §4 Fig. 3, uysal-… §5).
pub fn earth(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let d = pos(cfg.dataset_bytes, "dataset_bytes", "earth")?;
    let o = pos(cfg.output_bytes, "output_bytes", "earth")?;
    let cov = cfg.coverage.unwrap_or(10.0).max(0.0);
    let mut plan = Plan::default();
    let rel = plan.file("sensor");
    let img = plan.file("image");
    plan.base_files.push((rel, d));
    let mut ph = Phase::new("earth: project + composite");
    ph.input = Input::File(rel);
    ph.cycles_per_byte = ctx.c("earth_cycles_per_byte");
    let comp = ctx.c("composite_cycles_per_byte");
    if ctx.single_node {
        plan.note("image_fits_in_host_memory", o <= ctx.mem_per_worker);
        if o > ctx.mem_per_worker {
            ph.flows
                .push(flow(Dest::Local, Amount::Ratio(o * cov / d), comp, None));
        }
    } else {
        // The sub-image is "a contiguous section of the output grid that fits into the
        // disk-memory" (acharya-… §4; uysal-… §5). A worker's input is striped over all
        // disks in 256 KB chunks (acharya-… §4), so the values it reads map all over the
        // grid: the only contiguous section that holds them all is the whole grid. Unless
        // the whole image fits, the sub-image shifts and ships as the scan goes on; the
        // part of the grid a worker touches (`output × min(1, coverage/n)`) is what it ships.
        let touched = o * (cov / ctx.n as f64).min(1.0);
        if o <= ctx.mem_per_worker {
            plan.note("subgrid", "whole image fits: touched region shipped once");
            ph.flows
                .push(flow(Dest::Coordinator, Amount::Bytes(touched), comp, None));
        } else {
            plan.note(
                "subgrid",
                "sub-grid shifts: each traversal of the grid ships it",
            );
            ph.flows.push(flow(
                Dest::Coordinator,
                Amount::Ratio(o * cov / d),
                comp,
                None,
            ));
        }
    }
    ph.coord_writes.push((img, o));
    plan.phases.push(ctx.protocol(ph));
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costs::Costs;
    use crate::workload::context::test_ctx;

    fn earth_flow(n: usize, mem_per_worker: f64) -> Amount {
        let costs = Costs::new(&Default::default()).expect("default costs");
        let ctx = test_ctx(
            &costs,
            n,
            mem_per_worker,
            crate::config::ArchKind::ActiveDisks,
        );
        let cfg: WorkloadConfig = toml::from_str(
            "kind = \"earth\"\ndataset_bytes = 17.18e9\noutput_bytes = 556.0e6\ncoverage = 10.0",
        )
        .expect("earth config");
        let plan = earth(&cfg, &ctx).expect("earth plan");
        plan.phases[0].flows[0].amount
    }

    /// acharya-… §4: "A reader reads one block from each sorted partition": the merge reads
    /// request-sized blocks of interleaved runs, each a separate access (it used to stream the
    /// runs file sequentially, hiding the seeks between runs).
    #[test]
    fn sort_merge_reads_one_block_of_one_run_at_a_time() {
        let costs = Costs::new(&Default::default()).expect("default costs");
        let ctx = test_ctx(&costs, 4, 15e6, crate::config::ArchKind::ActiveDisks);
        let cfg: WorkloadConfig =
            toml::from_str("kind = \"sort\"\ndataset_bytes = 4.0e9\ntuple_bytes = 100.0")
                .expect("sort config");
        let plan = sort(&cfg, &ctx).expect("sort plan");
        let merges: Vec<&Phase> = plan
            .phases
            .iter()
            .filter(|p| p.name.starts_with("sort: merge"))
            .collect();
        assert!(!merges.is_empty());
        for p in merges {
            match p.input {
                Input::Segmented(_, seg) => assert_eq!(seg, 256 * 1024),
                ref other => panic!("{}: {other:?}, expected request-sized segments", p.name),
            }
        }
    }

    /// uysal-… at 128 disks: the touched region (556 MB × 10/128 = 43 MB) fits a 64 MB disk
    /// but the image does not, and the disk's input is striped over the whole grid, so the
    /// sub-image still shifts and ships while the scan goes on (it used to be held to the
    /// end, which made 64 MB disks 1.5 times slower than 32 MB ones).
    #[test]
    fn earth_sub_image_ships_during_the_scan_unless_the_whole_image_fits() {
        let streamed = 556.0e6 * 10.0 / 17.18e9;
        for mem in [31.0e6, 62.0e6, 126.0e6] {
            match earth_flow(128, mem) {
                Amount::Ratio(r) => assert!((r - streamed).abs() < 1e-12, "{mem}: {r}"),
                a => panic!("{mem} bytes of disk memory: {a:?}, expected a streamed ratio"),
            }
        }
        match earth_flow(128, 1.0e9) {
            Amount::Bytes(b) => assert!((b - 556.0e6 * 10.0 / 128.0).abs() < 1.0),
            a => panic!("whole image fits: {a:?}, expected the touched region once"),
        }
    }

    /// uysal-… §5: the SMP's dmine batches updates to shared counters, so its count passes
    /// reduce nothing at one processor and broadcast nothing (active disks and clusters, by
    /// count distribution, send their counters to the front-end). The SMP used to reduce
    /// every processor's 1.5 M counters at board 0, which made 128 processors 14% slower
    /// than 64.
    #[test]
    fn smp_dmine_updates_shared_counters_at_each_processor() {
        let costs = Costs::new(&Default::default()).expect("default costs");
        let cfg: WorkloadConfig = toml::from_str(
            "kind = \"dmine\"\ndataset_bytes = 17.18e9\ntransactions = 300.0e6\n\
             items_per_transaction = 4.0\nrepartition_fraction = 0.25",
        )
        .expect("dmine config");
        let ad = dmine(
            &cfg,
            &test_ctx(&costs, 128, 30e6, crate::config::ArchKind::ActiveDisks),
        )
        .expect("dmine plan");
        let smp = dmine(
            &cfg,
            &test_ctx(&costs, 128, 30e6, crate::config::ArchKind::Smp),
        )
        .expect("dmine plan");
        for pass in 0..2 {
            let (a, s) = (&ad.phases[pass], &smp.phases[pass]);
            assert!(a.flows.iter().any(|f| matches!(f.dest, Dest::Coordinator)));
            assert!(s.flows.is_empty(), "{}: {:?}", s.name, s.flows);
            assert_eq!(s.broadcast_bytes, 0.0, "{}", s.name);
            // The same merge work, now at each processor during its scan.
            let per_worker = 17.18e9 / 128.0;
            let merge = costs.get("merge_partial_cycles_per_entry");
            let counters = [1e6, 5e5][pass];
            let extra = (s.cycles_per_byte - a.cycles_per_byte) * per_worker;
            assert!((extra - merge * counters).abs() < 1.0, "{extra}");
        }
        assert_eq!(smp.phases[2].broadcast_bytes, 0.0);
        assert!(ad.phases[2].broadcast_bytes > 0.0);
    }

    /// uysal-… §5: on the SMP the partial aggregates are merged by range at every
    /// processor (as its datacube does), not all at board 0; active disks ship them to the
    /// front-end.
    #[test]
    fn smp_group_by_merges_each_range_at_one_processor() {
        let costs = Costs::new(&Default::default()).expect("default costs");
        let cfg: WorkloadConfig = toml::from_str(
            "kind = \"group_by\"\ndataset_bytes = 17.18e9\ntuple_bytes = 64.0\ngroups = 13.5e6",
        )
        .expect("group_by config");
        for (kind, want) in [
            (crate::config::ArchKind::Smp, Dest::Shuffle),
            (crate::config::ArchKind::ActiveDisks, Dest::Coordinator),
            (crate::config::ArchKind::Cluster, Dest::Coordinator),
        ] {
            let plan = group_by(&cfg, &test_ctx(&costs, 128, 50e6, kind)).expect("plan");
            let flows = &plan.phases[0].flows;
            assert!(!flows.is_empty());
            assert!(flows.iter().all(|f| f.dest == want), "{kind:?}: {flows:?}");
        }
    }

    #[test]
    fn lattice_has_all_group_bys_and_pipelines_cover_them_once() {
        let nodes = cube_lattice(
            134e6,
            &[1342177.0, 134217.0, 13421.0, 1342.0],
            CubeAttributes::Independent,
        );
        assert_eq!(nodes.len(), 15);
        let pipes = cube_pipelines(&nodes);
        let mut all: Vec<u32> = pipes.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 15);
        assert_eq!(pipes.iter().map(|p| p.len()).sum::<usize>(), 15);
        // The first pipeline starts from the full group-by read from the relation.
        assert_eq!(pipes[0][0], 0b1111);
        for n in &nodes {
            if let Some(p) = n.parent {
                assert_eq!(p & n.mask, n.mask);
                assert_eq!(p.count_ones(), n.mask.count_ones() + 1);
            }
        }
    }

    /// uysal-… §6 states each cube attribute's distinct values, not their joint
    /// distribution. Hierarchical attributes give every group-by as many groups as its
    /// attribute with the most distinct values: the 15 group-bys' results then total about
    /// 1.17 GB (docs/simulator.md, *Derivations*), while independent ones make the large
    /// group-bys nearly one group per tuple.
    #[test]
    fn hierarchical_cube_attributes_give_the_fewest_groups_any_distribution_allows() {
        let cards = [5.36e6, 536000.0, 53600.0, 5360.0];
        let bytes =
            |nodes: &[CubeNode]| -> f64 { nodes.iter().map(|n| n.groups * n.entry_bytes).sum() };
        let low = cube_lattice(536e6, &cards, CubeAttributes::Hierarchical);
        let high = cube_lattice(536e6, &cards, CubeAttributes::Independent);
        let full = |nodes: &[CubeNode]| nodes.iter().find(|n| n.mask == 0b1111).map(|n| n.groups);
        assert_eq!(full(&low), Some(5.36e6));
        assert!(full(&high).is_some_and(|g| g > 0.99 * 536e6));
        assert!((bytes(&low) / 1e9 - 1.17).abs() < 0.01, "{}", bytes(&low));
        assert!(bytes(&high) > 10.0 * bytes(&low));
        for (l, h) in low.iter().zip(&high) {
            assert_eq!(l.mask, h.mask);
            assert!(l.groups <= h.groups, "{:b}", l.mask);
        }
    }
}
