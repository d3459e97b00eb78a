//! riedel-…: a database server with conventional disks vs the same server with Active Disks
//! running scans, qualifications, aggregation and Bloom-filter semi-joins at the drives.
//!
//! Costs are riedel-… Table 7 (cycles/byte of select, aggregation, join on the prototype);
//! the network data reduction of each operation is Table 7's "selectivity factor"; the
//! per-query reductions of the summary are Table 5's factors (scan, qualification, join,
//! semi-join with a 1 MB Bloom filter, aggregation). As Table 5's note says, the factors are
//! not cumulative: the reduction of steps done together at the drives is their product.
//! On the server (a single host) the same cycles per byte are spent by the host processor.

use super::context::{KeyError, Wctx, pos};
use crate::config::WorkloadConfig;
use crate::engine::{Amount, Dest, Flow, Input, Phase, Plan};

/// One row of riedel-… Table 5 (see [`TABLE5`]).
pub type Table5Row = (&'static str, bool, bool, f64, f64, u32, f64, f64, f64);

/// (query, tables accessed by scan: lineitem?, orders?, scan factor, qualification factor,
/// number of joins, join factor, semi-join factor, aggregation factor) — riedel-… Table 5.
/// A table accessed through an index is read by the host in both systems (Active Disk
/// processing is not used for index scans, §5.5); the index is assumed to select the
/// qualifying fraction (1 / qualification factor) of it.
pub const TABLE5: &[Table5Row] = &[
    ("Q1", true, false, 2.3, 1.1, 0, 1.0, 1.0, 6104.0),
    ("Q3", false, true, 3.8, 2.1, 2, 5.7, 1.9, 81.0),
    ("Q4", false, true, 2.9, 30.5, 0, 1.0, 1.0, 41.0),
    ("Q5", true, true, 3.6, 1.0, 5, 490.7, 736.0, 9.0),
    ("Q6", true, false, 3.2, 68.6, 0, 1.0, 1.0, 73.0),
    ("Q9", true, true, 2.8, 1.0, 6, 13.8, 24.9, 75.0),
    ("Q10", true, true, 3.2, 4.6, 3, 1.0, 1.0, 1088.0),
    ("Q13", false, true, 2.9, 1250.0, 1, 1.0, 1.0, 1.0),
    ("Q17", true, false, 3.6, 1.0, 1, 1051.8, 255.5, 5.8),
];

fn flow(dest: Dest, amount: Amount, recv: f64) -> Flow {
    Flow {
        dest,
        amount,
        recv_cycles_per_byte: recv,
        write: None,
    }
}

/// Bytes per lineitem tuple (TPC-D, assumption for the validation data set).
const LINEITEM_TUPLE_BYTES: f64 = 125.0;

/// The tables' sizes, bytes.
struct Tables {
    lineitem: f64,
    orders: f64,
    part: f64,
}

/// Compile a riedel-… workload.
pub fn compile(cfg: &WorkloadConfig, ctx: &Wctx) -> Result<Plan, KeyError> {
    let kind = cfg.kind.as_str();
    // TPC-D scale factor 1 (assumption for the validation data set): lineitem 6 M rows of
    // ~125 bytes, orders 1.5 M rows of ~113 bytes, part 200 K rows of ~155 bytes.
    let sf = cfg.scale_factor.unwrap_or(1.0);
    if !(sf.is_finite() && sf > 0.0) {
        return Err((
            "workload.scale_factor".into(),
            format!("must be > 0, got {sf}"),
        ));
    }
    let tables = Tables {
        lineitem: cfg.dataset_bytes.unwrap_or(750e6 * sf),
        orders: 170e6 * sf,
        part: 31e6 * sf,
    };
    let mut plan = Plan::default();
    let li = plan.file("lineitem");
    match kind {
        "riedel_select" | "riedel_aggregate" => scan(&mut plan, ctx, kind, li, tables.lineitem),
        "riedel_join" => bloom_join(&mut plan, cfg, ctx, li, &tables),
        "riedel_join5" | "riedel_query" => table5_query(&mut plan, cfg, ctx, li, &tables)?,
        other => {
            return Err((
                "workload.kind".into(),
                format!("unknown riedel workload `{other}`"),
            ));
        }
    }
    let _ = pos;
    Ok(plan)
}

/// Select or aggregate over lineitem (Table 7's costs and selectivity factors).
fn scan(plan: &mut Plan, ctx: &Wctx, kind: &str, li: u32, lineitem: f64) {
    // Work done where the data are read: at the drives (Active Disks) or at the server.
    let (cpb, factor) = if kind == "riedel_select" {
        (ctx.cw("select_cycles_per_byte"), 52.0) // Table 7
    } else {
        (ctx.cw("sort_aggregate_cycles_per_byte"), 31.9) // Table 7
    };
    plan.base_files.push((li, lineitem));
    let mut ph = Phase::new(kind.trim_start_matches("riedel_"));
    ph.input = Input::File(li);
    ph.cycles_per_byte = cpb;
    if !ctx.single_node {
        ph.flows.push(flow(
            Dest::Coordinator,
            Amount::Ratio(1.0 / factor),
            ctx.c("copy_cycles_per_byte"),
        ));
    }
    plan.phases.push(ctx.protocol(ph));
}

/// Simplified Q9 (§5.3): part ⋈ lineitem with p_name like '%green%' (10% of parts), a
/// semi-join through a Bloom filter of part's keys.
fn bloom_join(plan: &mut Plan, cfg: &WorkloadConfig, ctx: &Wctx, li: u32, tables: &Tables) {
    let c = |k: &str| ctx.c(k);
    // Work done where the data are read: at the drives (Active Disks) or at the server.
    let w = |k: &str| ctx.cw(k);
    let active = !ctx.single_node;
    let lt = LINEITEM_TUPLE_BYTES;
    let part = tables.part;
    let bloom = cfg.bloom_bytes.unwrap_or(1e6);
    let pf = plan.file("part");
    plan.base_files.push((li, tables.lineitem));
    plan.base_files.push((pf, part));
    let mut p1 = Phase::new("join: scan part, build Bloom filter");
    p1.input = Input::File(pf);
    p1.cycles_per_byte = w("select_cycles_per_byte");
    let keys = part / 155.0 * 0.1 * 4.0;
    if active {
        p1.flows.push(flow(
            Dest::Coordinator,
            Amount::Ratio(keys / part),
            c("hash_build_cycles_per_tuple") / 4.0,
        ));
    } else {
        p1.end_cycles = keys / 4.0 / ctx.n as f64 * c("hash_build_cycles_per_tuple");
    }
    plan.phases.push(ctx.protocol(p1));
    let mut p2 = Phase::new("join: semi-join lineitem with the Bloom filter");
    p2.input = Input::File(li);
    p2.cycles_per_byte = w("bloom_probe_cycles_per_byte");
    if active {
        p2.broadcast_bytes = bloom;
        p2.flows.push(flow(
            Dest::Coordinator,
            Amount::Ratio(1.0 / 4.3),
            c("hash_probe_cycles_per_tuple") / lt,
        ));
    } else {
        p2.cycles_per_byte += c("hash_probe_cycles_per_tuple") / lt / 4.3;
    }
    plan.phases.push(ctx.protocol(p2));
    plan.note("bloom_filter_bytes", bloom);
}

/// What a Table 5 row means for the work: the reduction at the drives, the cycles per byte
/// there, and the host's cycles per byte that reaches it.
struct Reduction {
    /// Reduction at the drives: scan × qualification × (semi-join if joins, else
    /// aggregation).
    at_disk: f64,
    /// Cycles per byte where the data are read.
    disk_cpb: f64,
    /// Host work per byte that reaches it: joins (hash probes per tuple) and aggregation.
    host_per_byte_after: f64,
}

impl Reduction {
    /// The reduction of `row` on the system of `ctx`.
    fn of(row: &Table5Row, ctx: &Wctx) -> Reduction {
        let &(_, _, _, scan_f, qual_f, joins, _join_f, semi_f, agg_f) = row;
        let w = |k: &str| ctx.cw(k);
        let at_disk = scan_f * qual_f * if joins > 0 { semi_f } else { agg_f };
        let disk_cpb = w("select_cycles_per_byte")
            + if joins > 0 {
                w("bloom_probe_cycles_per_byte")
            } else {
                w("sort_aggregate_cycles_per_byte") / (scan_f * qual_f)
            };
        let host_per_byte_after = joins as f64 * ctx.c("hash_probe_cycles_per_tuple")
            / LINEITEM_TUPLE_BYTES
            + if joins > 0 {
                ctx.c("sort_aggregate_cycles_per_byte")
            } else {
                0.0
            };
        Reduction {
            at_disk,
            disk_cpb,
            host_per_byte_after,
        }
    }
}

/// A TPC-D query by its Table 5 row (`riedel_join5`: Q9): the scanned tables streamed
/// through the drives, then the index-accessed part read by the host.
fn table5_query(
    plan: &mut Plan,
    cfg: &WorkloadConfig,
    ctx: &Wctx,
    li: u32,
    tables: &Tables,
) -> Result<(), KeyError> {
    let qn = if cfg.kind == "riedel_join5" {
        "Q9".to_string()
    } else {
        cfg.query.clone().unwrap_or_default()
    };
    let Some(row) = TABLE5.iter().find(|r| r.0 == qn) else {
        return Err((
            "workload.query".into(),
            format!("`{qn}` is not in riedel-… Table 5 (Q1 Q3 Q4 Q5 Q6 Q9 Q10 Q13 Q17)"),
        ));
    };
    let &(_, li_scan, or_scan, _, qual_f, joins, ..) = row;
    let active = !ctx.single_node;
    let (lineitem, orders) = (tables.lineitem, tables.orders);
    let of = plan.file("orders");
    // Tables read by scan stream through the drives; index-accessed tables are read
    // (their qualifying part) by the host in both systems.
    let mut scanned = 0.0;
    if li_scan {
        plan.base_files.push((li, lineitem));
        scanned += lineitem;
    }
    if or_scan {
        plan.base_files.push((of, orders));
        scanned += orders;
    }
    let ix = plan.file("indexed");
    let indexed = if !li_scan { lineitem / qual_f } else { 0.0 };
    let r = Reduction::of(row, ctx);
    for (f, name) in [(li, "lineitem"), (of, "orders")] {
        let is_scanned = (f == li && li_scan) || (f == of && or_scan);
        if !is_scanned {
            continue;
        }
        let mut ph = Phase::new(format!(
            "{qn}: {name} scan at the {}",
            if active { "drives" } else { "host" }
        ));
        ph.input = Input::File(f);
        if active {
            ph.cycles_per_byte = r.disk_cpb;
            if joins > 0 {
                ph.broadcast_bytes = cfg.bloom_bytes.unwrap_or(1e6);
            }
            ph.flows.push(flow(
                Dest::Coordinator,
                Amount::Ratio(1.0 / r.at_disk),
                r.host_per_byte_after + ctx.c("copy_cycles_per_byte"),
            ));
        } else {
            ph.cycles_per_byte = r.disk_cpb + r.host_per_byte_after / r.at_disk;
        }
        plan.phases.push(ctx.protocol(ph));
    }
    if indexed > 0.0 {
        plan.base_files.push((ix, indexed));
        let mut ph = Phase::new(format!("{qn}: index scan of lineitem (host)"));
        ph.input = Input::File(ix);
        let host_cpb = ctx.c("select_cycles_per_byte") + r.host_per_byte_after;
        if active {
            ph.cycles_per_byte = 0.0;
            ph.flows
                .push(flow(Dest::Coordinator, Amount::Ratio(1.0), host_cpb));
        } else {
            ph.cycles_per_byte = host_cpb;
        }
        plan.phases.push(ctx.protocol(ph));
    }
    plan.note("scanned_bytes", format!("{scanned:.0}"));
    plan.note("reduction_at_drives", format!("{:.1}", r.at_disk));
    Ok(())
}
