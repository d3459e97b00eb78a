//! chiu-… workloads on (distributed) smart-disk groups: TPC-H Q1/Q6/Q12 with parallel
//! primitives, frequent-set counting (count vs hybrid distribution), pMAFIA-style subspace
//! clustering and an out-of-core 2-D FFT.

use super::context::{KeyError, Wctx, pos};
use super::tpc::{Mode, build_query, compile_query, find_bundles, relation};
use crate::config::{Bundling, WorkloadConfig};
use crate::engine::{Amount, Dest, Flow, Input, Phase, Plan};

fn flow(dest: Dest, amount: Amount, recv: f64, write: Option<u32>) -> Flow {
    Flow {
        dest,
        amount,
        recv_cycles_per_byte: recv,
        write,
    }
}

/// The whole plan is sent once; primitives run back to back on the disks; one completion at the end.
fn chiu_protocol(plan: &mut Plan, ctx: &Wctx) {
    if ctx.single_node {
        return;
    }
    let n = plan.phases.len();
    for (i, p) in plan.phases.iter_mut().enumerate() {
        p.command = i == 0;
        p.sync = i + 1 == n;
    }
}

/// TPC-H Q1, Q6, Q12 at a scale factor (chiu-… §4.1, §5).
pub fn tpch(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let qn = cfg.query.clone().ok_or_else(|| {
        (
            "workload.query".to_string(),
            "required for kind tpch_sd (Q1, Q6, Q12)".to_string(),
        )
    })?;
    let sf = pos(cfg.scale_factor, "scale_factor", "tpch_sd")?;
    // TPC-H: lineitem 6,001,215 rows ≈ 725 MB, orders 1,500,000 rows ≈ 164 MB at SF 1.
    // Main-selection selectivities (assumption from the TPC-H predicates): Q1 ≈ 98%,
    // Q6 ≈ 1.9%, Q12 ≈ 0.5% (memik-… §3: one lineitem tuple in 200).
    let (bytes, sel) = match qn.as_str() {
        "Q1" => (725e6 * sf, 0.98),
        "Q6" => (725e6 * sf, 0.019),
        "Q12" => ((725e6 + 164e6) * sf, 0.005),
        _ => {
            return Err((
                "workload.query".into(),
                format!("`{qn}` is not one of Q1, Q6, Q12"),
            ));
        }
    };
    let q = build_query(&qn, 0.1 * sf, bytes, sel).ok_or_else(|| {
        (
            "workload.query".to_string(),
            format!("unknown query `{qn}`"),
        )
    })?;
    let bundles = find_bundles(&q, &relation(Bundling::None));
    let mut plan = compile_query(&q, &bundles, ctx, Mode::Chiu);
    if cfg.tables_in_separate_groups && ctx.groups > 1 {
        // Table i lives in group i mod groups; joins redistribute across groups via the router.
        let files: Vec<u32> = plan.base_files.iter().map(|b| b.0).collect();
        for (i, f) in files.iter().enumerate() {
            plan.placement.push((*f, i % ctx.groups, ctx.groups));
        }
        plan.note("placement", "one table per group");
    }
    chiu_protocol(&mut plan, ctx);
    plan.note(
        "distribution",
        if ctx.via_host {
            "partial (through the client)"
        } else {
            "full (disk to disk)"
        },
    );
    Ok(plan)
}

/// Frequent-set counting: count distribution or hybrid distribution (chiu-… §4.2, §5.2).
pub fn fsc(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let per_disk = pos(cfg.transactions_per_disk, "transactions_per_disk", "fsc")?;
    let items = pos(cfg.items_per_transaction, "items_per_transaction", "fsc")?;
    let cands = cfg
        .candidates_per_pass
        .clone()
        .unwrap_or_else(|| vec![1000.0, 499_500.0, 100_000.0, 20_000.0]);
    let entry = cfg.entry_bytes.unwrap_or(64.0);
    let dist = cfg.distribution.clone().unwrap_or_else(|| "count".into());
    if dist != "count" && dist != "hybrid" {
        return Err((
            "workload.distribution".into(),
            format!("must be count or hybrid, got `{dist}`"),
        ));
    }
    let n = ctx.n as f64;
    let bpt = items * 4.0 + 8.0;
    let data = per_disk * bpt;
    let mut plan = Plan::default();
    let f = plan.file("transactions");
    plan.base_files.push((f, data * n));
    let data_fits = data <= ctx.mem_per_worker * 0.5;
    let cand_mem =
        (ctx.mem_per_worker - if data_fits { data } else { 0.0 }).max(ctx.mem_per_worker * 0.1);
    let cost = ctx.c("fsc_cycles_per_subset");
    plan.note("data_fits_in_memory", data_fits);
    for (k, &ck) in cands.iter().enumerate() {
        let kf = (k + 1) as f64;
        let subsets = binomial(items, kf).min(ck.max(1.0) * 4.0);
        let cand_bytes = ck * entry;
        let input = if k == 0 || !data_fits {
            Input::File(f)
        } else {
            Input::Memory(data)
        };
        if dist == "count" {
            // Every disk counts all candidates; candidates that do not fit need extra scans.
            let scans = (cand_bytes / cand_mem).ceil().max(1.0) as usize;
            plan.note(format!("pass{}_scans", k + 1), scans);
            for s in 0..scans {
                let mut ph = Phase::new(format!("fsc count pass {} scan {}", k + 1, s + 1));
                ph.input = if s == 0 {
                    input.clone()
                } else if data_fits {
                    Input::Memory(data)
                } else {
                    Input::File(f)
                };
                ph.cycles_per_byte = subsets * cost / scans as f64 / bpt;
                all_reduce_counts(&mut ph, ctx, cand_bytes / scans as f64 / entry * 4.0);
                plan.phases.push(ph);
            }
        } else {
            // Hybrid: candidates partitioned over g disks of a group so each part fits; every
            // transaction is seen by all g parts (data moves inside the group).
            let g = (cand_bytes / cand_mem).ceil().clamp(1.0, n);
            plan.note(format!("pass{}_groups_of", k + 1), g);
            let mut ph = Phase::new(format!("fsc hybrid pass {}", k + 1));
            ph.input = input;
            // Each disk counts its own and its group peers' transactions against 1/g of the candidates.
            ph.cycles_per_byte = subsets * cost / g / bpt;
            if g > 1.0 {
                // Its transactions go to the g − 1 other members of its group (volume exact,
                // destinations spread over all disks).
                ph.flows.push(flow(
                    Dest::Shuffle,
                    Amount::Ratio(g - 1.0),
                    ctx.c("copy_cycles_per_byte") + subsets * cost / g / bpt,
                    None,
                ));
            }
            all_reduce_counts(&mut ph, ctx, cand_bytes / g / entry * 4.0);
            plan.phases.push(ph);
        }
    }
    chiu_protocol(&mut plan, ctx);
    Ok(plan)
}

/// `n` choose `k` (`k` whole), never negative.
fn binomial(n: f64, k: f64) -> f64 {
    let mut r = 1.0;
    let mut i = 0.0;
    while i < k {
        r *= (n - i) / (i + 1.0);
        i += 1.0;
    }
    r.max(0.0)
}

/// All-reduce of the candidates' counts, `count_bytes` per disk: reduce-scatter + all-gather
/// among the disks.
fn all_reduce_counts(ph: &mut Phase, ctx: &Wctx, count_bytes: f64) {
    ph.flows.push(flow(
        Dest::Shuffle,
        Amount::Bytes(count_bytes),
        ctx.c("merge_partial_cycles_per_entry") / 4.0,
        None,
    ));
    ph.flows.push(flow(
        Dest::AllPeers,
        Amount::Bytes(count_bytes / ctx.n as f64),
        0.0,
        None,
    ));
}

/// pMAFIA-style subspace clustering (chiu-… §4.3, §5.3).
pub fn clustering(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let records = pos(cfg.records, "records", "clustering")?;
    let dims = pos(cfg.dimensions, "dimensions", "clustering")?;
    let cands = cfg
        .candidates_per_pass
        .clone()
        .unwrap_or_else(|| vec![20.0 * 1000.0, 2000.0, 2000.0, 1000.0, 500.0, 100.0]);
    let n = ctx.n as f64;
    let rec_bytes = dims * 4.0;
    let data = records * rec_bytes / n;
    let mut plan = Plan::default();
    let f = plan.file("records");
    plan.base_files.push((f, records * rec_bytes));
    let fits = data <= ctx.mem_per_worker * 0.8;
    plan.note("partition_fits_in_memory", fits);
    for (k, &ck) in cands.iter().enumerate() {
        let mut ph = Phase::new(if k == 0 {
            "clustering: histograms".to_string()
        } else {
            format!("clustering: dense units of dimension {k}")
        });
        ph.input = if k == 0 || !fits {
            Input::File(f)
        } else {
            Input::Memory(data)
        };
        let level = (k.max(1)) as f64;
        ph.cycles_per_byte = ctx.c("cluster_cycles_per_value") * level / 4.0;
        // Reduction of histograms / candidate counts to everyone.
        ph.flows.push(flow(
            Dest::Shuffle,
            Amount::Bytes(ck * 4.0),
            ctx.c("merge_partial_cycles_per_entry") / 4.0,
            None,
        ));
        ph.flows
            .push(flow(Dest::AllPeers, Amount::Bytes(ck * 4.0 / n), 0.0, None));
        plan.phases.push(ph);
    }
    chiu_protocol(&mut plan, ctx);
    Ok(plan)
}

/// Out-of-core 2-D FFT by rows, transpose, rows (chiu-… §4.4, §5.4).
pub fn fft(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let side = pos(cfg.fft_n, "fft_n", "fft")?;
    let eb = cfg.element_bytes.unwrap_or(16.0).max(1.0);
    let n = ctx.n as f64;
    let total = side * side * eb;
    let per = total / n;
    let mut plan = Plan::default();
    let a = plan.file("matrix");
    let t = plan.file("transposed");
    let out = plan.file("result");
    plan.base_files.push((a, total));
    let in_core = per <= ctx.mem_per_worker * 0.5;
    plan.note("in_core", in_core);
    let fft_cpb = 5.0 * side.log2() / eb * ctx.c("fft_cycles_per_flop");
    let mut p1 = Phase::new("fft: row FFTs + transpose");
    p1.input = Input::File(a);
    p1.cycles_per_byte = fft_cpb;
    p1.flows.push(flow(
        Dest::Shuffle,
        Amount::Ratio(1.0),
        ctx.c("copy_cycles_per_byte"),
        if in_core { None } else { Some(t) },
    ));
    if !in_core {
        p1.write_estimates.push((t, total));
    }
    plan.phases.push(p1);
    let mut p2 = Phase::new("fft: row FFTs of the transpose");
    // Out of core, the transposed rows are gathered from column blocks: square tiles of half
    // the memory, so each request reads one tile row (rounded up to whole pages) and seeks.
    let tile_row = ((ctx.mem_per_worker * 0.5 / eb).sqrt().floor() * eb).max(eb);
    let segment = ((tile_row / ctx.request_bytes).ceil().max(1.0) * ctx.request_bytes) as u64;
    if !in_core {
        plan.note("transpose_segment_bytes", segment);
    }
    p2.input = if in_core {
        Input::Memory(per)
    } else {
        Input::Segmented(t, segment)
    };
    p2.cycles_per_byte = fft_cpb;
    p2.flows
        .push(flow(Dest::Local, Amount::Ratio(1.0), 0.0, Some(out)));
    p2.write_estimates.push((out, total));
    plan.phases.push(p2);
    chiu_protocol(&mut plan, ctx);
    Ok(plan)
}
