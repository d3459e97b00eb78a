//! EXPLAIN and EXPLAIN ANALYZE output.
//!
//! EXPLAIN marks every operator `disk` or `host`, lists each scan's bundle (the stages shipped
//! to the disks) and the expected data reduction. EXPLAIN ANALYZE prints, per scan, per disk
//! and in total, the bytes after every stage in the shape of Riedel et al.'s selectivity
//! table: read from storage, after column elimination, after qualification, after
//! (semi-)join filtering, after aggregation, shipped — then rows, CPU and wall time per stage,
//! the Bloom filter's measured false-positive rate, link utilization, and the host plan with
//! DataFusion's metrics.
use super::scan::DiskScanExec;
use super::{QueryOutput, ScanReport, SqlSettings};
use adisk_core::stats::human_bytes;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// Rough width of a column, for expected reductions.
fn width(dt: &arrow::datatypes::DataType) -> f64 {
    dt.primitive_width().map(|w| w as f64).unwrap_or(24.0)
}

fn walk(plan: &Arc<dyn ExecutionPlan>, depth: usize, out: &mut String, scans: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    if let Some(scan) = plan.downcast_ref::<DiskScanExec>() {
        let _ = writeln!(
            out,
            "disk  {pad}DiskScanExec: {} on {} disks",
            scan.table(),
            scan.disks.len()
        );
        for s in scan.describe_stages() {
            let _ = writeln!(out, "disk  {pad}  ↳ {s}");
        }
        scans.push(expected(scan));
        return;
    }
    if let Some(disks) = plan.downcast_ref::<super::disks_exec::DisksExec>() {
        let _ = writeln!(
            out,
            "disks {pad}DisksExec: {} stages across the disks",
            disks.stage_count()
        );
        for s in disks.describe() {
            let _ = writeln!(out, "disks {pad}  ↳ {s}");
        }
        return;
    }
    let line = displayable(plan.as_ref()).one_line().to_string();
    let _ = writeln!(out, "host  {pad}{}", line.trim_end());
    for c in plan.children() {
        walk(c, depth + 1, out, scans);
    }
}

fn expected(scan: &DiskScanExec) -> String {
    let schema = &scan.entry.schema;
    let all: f64 = schema.fields().iter().map(|f| width(f.data_type())).sum();
    let read: f64 = scan
        .plan
        .read
        .iter()
        .filter_map(|n| schema.field_with_name(n).ok())
        .map(|f| width(f.data_type()))
        .sum();
    let cols = read / all.max(1.0);
    let mut text = format!(
        "{}: stored {} · columns read ≈{:.0}% of row width",
        scan.table(),
        human_bytes(scan.entry.bytes()),
        cols * 100.0
    );
    let mut share = cols;
    if scan.plan.predicate.is_some() {
        let sel = scan.plan.est_rows / (scan.entry.rows().max(1) as f64);
        share *= sel;
        let _ = write!(
            text,
            " · qualification ≈{:.1}% of rows (estimated: distinct values, sampled rows, else a guess)",
            sel * 100.0
        );
    }
    if scan.plan.bloom.is_some() {
        let _ = write!(text, " · semi-join: rows without a build-side key dropped");
    }
    if scan.plan.fragment.is_some() {
        let _ = write!(text, " · partial aggregation: one row per group per disk");
        let _ = write!(
            text,
            " → ships ≤ {:.1}% of the scanned rows' bytes",
            share * 100.0
        );
    } else {
        let _ = write!(
            text,
            " → ships ≈{:.1}% of the table's row bytes",
            share * 100.0
        );
    }
    text
}

/// EXPLAIN text of a physical plan.
pub fn explain(plan: &Arc<dyn ExecutionPlan>, settings: &SqlSettings) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "offload level: {}", settings.offload);
    let _ = writeln!(out, "where operator");
    let mut scans = Vec::new();
    walk(plan, 0, &mut out, &mut scans);
    let _ = writeln!(out, "\nexpected data reduction (estimates before running):");
    for s in scans {
        let _ = writeln!(out, "  {s}");
    }
    out
}

/// What the cost model expected a scan to ship beside what it shipped (`total`).
fn expected_line(expected: Option<(u64, u64)>, total: &Row) -> Option<String> {
    let (rows, bytes) = expected?;
    let ratio = |m: u64, e: u64| {
        if e == 0 {
            if m == 0 { "=".into() } else { "–".into() }
        } else {
            format!("{:.2}×", m as f64 / e as f64)
        }
    };
    Some(format!(
        "  expected before running: {rows} rows, {} shipped · measured ÷ expected: rows {}, bytes {}",
        human_bytes(bytes),
        ratio(total.rows_shipped, rows),
        ratio(total.shipped, bytes)
    ))
}

/// Bytes after each stage of one disk's job.
#[derive(Default, Clone, Copy)]
struct Row {
    read: u64,
    skipped: u64,
    scanned: u64,
    qualified: Option<u64>,
    semijoined: Option<u64>,
    aggregated: Option<u64>,
    shipped: u64,
    rows_read: u64,
    rows_shipped: u64,
    /// Rows the scans dropped while decoding (late materialization).
    rows_dropped: u64,
    cpu_ns: u64,
    wall_ns: u64,
}

impl Row {
    fn of(r: &ScanReport) -> Row {
        let Some(s) = &r.stats else {
            return Row {
                shipped: r.bytes_received,
                rows_shipped: r.rows_received,
                wall_ns: r.wall_ns,
                ..Default::default()
            };
        };
        let stage = |names: &[&str]| {
            s.stages
                .iter()
                .rev()
                .find(|st| names.contains(&st.disklet.as_str()))
                .map(|st| st.bytes_out)
        };
        Row {
            read: s.bytes_read,
            skipped: s.bytes_skipped,
            scanned: s.bytes_scanned,
            qualified: stage(&["select", "sql_select"]),
            semijoined: stage(&["bloom_probe"]),
            aggregated: stage(&["sql_aggregate"]),
            shipped: s.bytes_shipped_host,
            rows_read: s.rows_read,
            rows_shipped: s.rows_shipped,
            rows_dropped: s.rows_dropped_at_decode,
            cpu_ns: s.cpu_ns,
            wall_ns: s.wall_ns,
        }
    }
    fn add(&mut self, o: &Row) {
        let opt = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.read += o.read;
        self.skipped += o.skipped;
        self.scanned += o.scanned;
        self.qualified = opt(self.qualified, o.qualified);
        self.semijoined = opt(self.semijoined, o.semijoined);
        self.aggregated = opt(self.aggregated, o.aggregated);
        self.shipped += o.shipped;
        self.rows_read += o.rows_read;
        self.rows_shipped += o.rows_shipped;
        self.rows_dropped += o.rows_dropped;
        self.cpu_ns += o.cpu_ns;
        self.wall_ns = self.wall_ns.max(o.wall_ns);
    }
    fn line(&self, label: &str) -> String {
        let o = |v: Option<u64>| v.map(human_bytes).unwrap_or_else(|| "–".into());
        format!(
            "  {label:<6} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>11} {:>12} {:>8.1} {:>8.1}",
            human_bytes(self.read),
            human_bytes(self.skipped),
            human_bytes(self.scanned),
            o(self.qualified),
            o(self.semijoined),
            o(self.aggregated),
            human_bytes(self.shipped),
            self.rows_read,
            self.rows_shipped,
            self.cpu_ns as f64 / 1e6,
            self.wall_ns as f64 / 1e6
        )
    }
}

/// Which disk read which partitions, per scan of `plan` (also the scans inside `disks` stages).
pub fn partition_reads(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(scan) = plan.downcast_ref::<DiskScanExec>() {
        out.extend(scan.describe_reads());
    }
    if let Some(d) = plan.downcast_ref::<super::disks_exec::DisksExec>() {
        out.extend(d.scan_reads());
    }
    for c in plan.children() {
        out.extend(partition_reads(c));
    }
    out
}

/// One stage of a scan's jobs, over its disks.
struct StageTotal {
    name: String,
    rows_in: u64,
    rows_out: u64,
    bytes_in: u64,
    bytes_out: u64,
    cpu_ns: u64,
    sorts_dropped: u64,
    /// Earliest first step and latest last step, ns since each disk's job start (None: the
    /// stage never ran).
    active: Option<(u64, u64)>,
}

impl StageTotal {
    /// `from–to` in ms since the jobs' starts, or `–`.
    fn active(&self) -> String {
        match self.active {
            Some((from, to)) => format!("{:.0}–{:.0}", from as f64 / 1e6, to as f64 / 1e6),
            None => "–".into(),
        }
    }
}

/// Each stage's counters summed over the disks (stages named alike are one), in the order
/// they first appear.
fn stage_totals(reports: &[&ScanReport]) -> Vec<StageTotal> {
    let mut stages: Vec<StageTotal> = Vec::new();
    for st in reports
        .iter()
        .filter_map(|r| r.stats.as_ref())
        .flat_map(|s| &s.stages)
    {
        let i = match stages.iter().position(|x| x.name == st.disklet) {
            Some(i) => i,
            None => {
                stages.push(StageTotal {
                    name: st.disklet.clone(),
                    rows_in: 0,
                    rows_out: 0,
                    bytes_in: 0,
                    bytes_out: 0,
                    cpu_ns: 0,
                    sorts_dropped: 0,
                    active: None,
                });
                stages.len() - 1
            }
        };
        let x = &mut stages[i];
        x.rows_in += st.rows_in;
        x.rows_out += st.rows_out;
        x.bytes_in += st.bytes_in;
        x.bytes_out += st.bytes_out;
        x.cpu_ns += st.cpu_ns;
        x.sorts_dropped += st.sorts_dropped;
        if st.last_step_ns > 0 {
            let (from, to) = (st.first_step_ns, st.last_step_ns);
            x.active = Some(match x.active {
                Some((f, t)) => (f.min(from), t.max(to)),
                None => (from, to),
            });
        }
    }
    stages
}

/// EXPLAIN ANALYZE text of a finished query.
pub fn explain_analyze(out: &QueryOutput, settings: &SqlSettings) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "offload level: {} · {} result rows · {:.1} ms (planning {:.1} ms)",
        settings.offload,
        out.rows(),
        out.wall.as_secs_f64() * 1e3,
        out.planning.as_secs_f64() * 1e3
    );
    if let Some(c) = &out.choice {
        let _ = writeln!(text, "{c}");
    }
    if let Some(e) = &out.estimate {
        let l = links(out);
        let _ = writeln!(text, "{}", e.against(l.to_host, l.disk_to_disk, out.wall));
    }
    let mut by_scan: BTreeMap<usize, Vec<&ScanReport>> = BTreeMap::new();
    for r in &out.scans {
        by_scan.entry(r.scan_id).or_default().push(r);
    }
    let mut grand = Row::default();
    for reports in by_scan.values() {
        grand.add(&scan_section(&mut text, reports));
    }
    if by_scan.len() > 1 {
        let _ = writeln!(text, "\nall scans");
        let _ = writeln!(text, "{}", grand.line("total"));
    }
    links_section(&mut text, out);
    text
}

/// One scan's part of EXPLAIN ANALYZE: its stages, a line per disk and the total, what it
/// was expected to move, per stage, its Bloom filter; its total.
fn scan_section(text: &mut String, reports: &[&ScanReport]) -> Row {
    let first = reports[0];
    let _ = writeln!(text, "\nscan of {} on {} disks", first.table, reports.len());
    for s in &first.stages {
        let _ = writeln!(text, "  ↳ {s}");
    }
    let _ = writeln!(
        text,
        "  {:<6} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>11} {:>12} {:>8} {:>8}",
        "disk",
        "read",
        "skipped",
        "col. elim.",
        "qualified",
        "semi-join",
        "aggregated",
        "shipped",
        "rows read",
        "rows shipped",
        "cpu ms",
        "wall ms"
    );
    let mut total = Row::default();
    let mut sorted = reports.to_vec();
    sorted.sort_by_key(|r| r.disk);
    for r in &sorted {
        let row = Row::of(r);
        let _ = writeln!(text, "{}", row.line(&r.disk.to_string()));
        total.add(&row);
    }
    let _ = writeln!(text, "{}", total.line("total"));
    if total.rows_dropped > 0 {
        let _ = writeln!(
            text,
            "  late materialization: {} rows dropped while decoding by the joins' and Bloom \
             filters (their other columns not decoded)",
            total.rows_dropped
        );
    }
    if let Some(line) = expected_line(first.expected, &total) {
        let _ = writeln!(text, "{line}");
    }
    // Per stage, summed over the disks.
    let stages = stage_totals(&sorted);
    stage_lines(text, &stages);
    if let Some(bytes) = first.bloom_bytes {
        bloom_line(text, first, &sorted, &stages, (bytes, total.rows_dropped));
    }
    total
}

/// Per stage, summed over the disks: rows and bytes in and out, CPU and active time.
fn stage_lines(text: &mut String, stages: &[StageTotal]) {
    if stages.is_empty() {
        return;
    }
    let _ = writeln!(
        text,
        "  {:<14} {:>12} {:>12} {:>10} {:>10} {:>9} {:>13}",
        "stage", "rows in", "rows out", "bytes in", "bytes out", "cpu ms", "active ms"
    );
    for s in stages {
        let _ = writeln!(
            text,
            "  {:<14} {:>12} {:>12} {:>10} {:>10} {:>9.1} {:>13}",
            s.name,
            s.rows_in,
            s.rows_out,
            human_bytes(s.bytes_in),
            human_bytes(s.bytes_out),
            s.cpu_ns as f64 / 1e6,
            s.active()
        );
    }
    let dropped: u64 = stages.iter().map(|s| s.sorts_dropped).sum();
    if dropped > 0 {
        let _ = writeln!(
            text,
            "  sorts left out at the disks: {dropped} (their input arrives sorted: tables stored in key order)"
        );
    }
}

/// The Bloom filter of a scan of `bytes`: its size and keys, the rows it dropped at the disks
/// — `at_decode` of them while the scan decoded (the scan tests the filter itself, late
/// materialization), the others at its probe — and its false-positive rate measured.
fn bloom_line(
    text: &mut String,
    first: &ScanReport,
    sorted: &[&ScanReport],
    stages: &[StageTotal],
    (bytes, at_decode): (u64, u64),
) {
    let keys = first.bloom_keys.unwrap_or(0);
    let (rows_in, rows_out) = stages
        .iter()
        .find(|s| s.name == "bloom_probe")
        .map(|s| (s.rows_in + at_decode, s.rows_out))
        .unwrap_or((0, 0));
    let truth: Option<u64> = sorted.iter().map(|r| r.bloom_true_matches).sum();
    let fpr = truth.map(|t| {
        let negatives = rows_in.saturating_sub(t);
        if negatives == 0 {
            0.0
        } else {
            rows_out.saturating_sub(t) as f64 / negatives as f64
        }
    });
    let _ = writeln!(
        text,
        "  bloom filter: {} with {keys} build keys · {rows_in} rows probed, {} dropped at the disks · false-positive rate measured {}",
        human_bytes(bytes),
        rows_in.saturating_sub(rows_out),
        fpr.map(|f| format!("{:.2}%", f * 100.0))
            .unwrap_or_else(|| "n/a".into())
    );
}

/// The links, the host link's use, the partitions read, failovers, the disks and the host
/// plan with its metrics.
fn links_section(text: &mut String, out: &QueryOutput) {
    let links = links(out);
    let _ = writeln!(
        text,
        "\nlinks: disk→host {} · disk→disk {} · control: {} disk jobs started ({} messages with their statistics requests, {})",
        human_bytes(links.to_host),
        human_bytes(links.disk_to_disk),
        links.jobs,
        links.jobs * 2,
        human_bytes(links.control_bytes)
    );
    if let Some(b) = out.inter_group_bytes {
        let _ = writeln!(
            text,
            "between disk groups (through the router): {}",
            human_bytes(b)
        );
    }
    if let Some(busy) = out.link_busy {
        let _ = writeln!(
            text,
            "\nhost link: busy {:.1} ms of {:.1} ms ({:.0}% utilization)",
            busy.as_secs_f64() * 1e3,
            out.wall.as_secs_f64() * 1e3,
            100.0 * busy.as_secs_f64() / out.wall.as_secs_f64().max(1e-9)
        );
    }
    let reads = partition_reads(&out.plan);
    if !reads.is_empty() {
        let _ = writeln!(text, "\npartitions read (each once, by one live copy):");
        for r in reads {
            let _ = writeln!(text, "  {r}");
        }
    }
    for f in &out.failover {
        let _ = writeln!(text, "\nfailover: {f}");
    }
    if !out.disks.is_empty() {
        let _ = writeln!(text, "\ndisks {}", out.disks.join("\n  "));
    }
    let _ = writeln!(
        text,
        "\nhost plan with metrics (DiskScanExec rows are what arrived from the disks):"
    );
    let _ = write!(
        text,
        "{}",
        DisplayableExecutionPlan::with_metrics(out.plan.as_ref()).indent(true)
    );
}

/// What crossed each link during a query.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Links {
    /// Bytes the disks sent the host.
    pub to_host: u64,
    /// Bytes the disks sent each other (exchanges).
    pub disk_to_disk: u64,
    /// Disk jobs started (each one control message out, one statistics request after).
    pub jobs: u64,
    /// Bytes of those control messages: specs out, statistics requests and answers.
    pub control_bytes: u64,
}

/// Bytes per link and control messages of a run.
pub fn links(out: &QueryOutput) -> Links {
    let mut l = Links {
        jobs: out.scans.len() as u64,
        control_bytes: out.scans.iter().map(|r| r.control_bytes).sum(),
        ..Default::default()
    };
    for s in out.scans.iter().filter_map(|r| r.stats.as_ref()) {
        l.to_host += s.bytes_shipped_host;
        l.disk_to_disk += s.bytes_shipped_disks;
    }
    l
}

/// Bytes read and shipped, summed over every scan (for assertions and benchmarks).
pub fn totals(out: &QueryOutput) -> (u64, u64, u64) {
    let mut read = 0;
    let mut scanned = 0;
    let mut shipped = 0;
    for r in &out.scans {
        if let Some(s) = &r.stats {
            read += s.bytes_read;
            scanned += s.bytes_scanned;
            shipped += s.bytes_shipped_host;
        }
    }
    (read, scanned, shipped)
}

fn operators(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<serde_json::Value>) {
    if let Some(scan) = plan.downcast_ref::<DiskScanExec>() {
        out.push(serde_json::json!({ "where": "disk", "operator": "DiskScanExec", "table": scan.table(), "stages": scan.describe_stages() }));
        return;
    }
    if let Some(disks) = plan.downcast_ref::<super::disks_exec::DisksExec>() {
        out.push(serde_json::json!({ "where": "disks", "operator": "DisksExec", "stages": disks.describe() }));
        return;
    }
    out.push(serde_json::json!({ "where": "host", "operator": plan.name() }));
    for c in plan.children() {
        operators(c, out);
    }
}

/// EXPLAIN as JSON: every operator with where it runs (disk scans carry their stages).
pub fn explain_json(plan: &Arc<dyn ExecutionPlan>, settings: &SqlSettings) -> serde_json::Value {
    let mut ops = Vec::new();
    operators(plan, &mut ops);
    serde_json::json!({ "offload": settings.offload.to_string(), "operators": ops })
}

/// EXPLAIN ANALYZE as JSON: the operators, and per scan and disk the job statistics.
pub fn explain_analyze_json(out: &QueryOutput, settings: &SqlSettings) -> serde_json::Value {
    let mut v = explain_json(&out.plan, settings);
    let (read, scanned, shipped) = totals(out);
    v["rows"] = out.rows().into();
    v["wall_ms"] = (out.wall.as_secs_f64() * 1e3).into();
    v["link_busy_ms"] = out.link_busy.map(|d| d.as_secs_f64() * 1e3).into();
    v["bytes_read"] = read.into();
    v["bytes_scanned"] = scanned.into();
    v["bytes_shipped"] = shipped.into();
    let l = links(out);
    v["bytes_disk_to_disk"] = l.disk_to_disk.into();
    v["control_messages"] = (l.jobs * 2).into();
    v["control_bytes"] = l.control_bytes.into();
    v["bytes_inter_group"] = out.inter_group_bytes.into();
    v["scans"] = serde_json::to_value(&out.scans).unwrap_or_default();
    v["partitions_read"] = partition_reads(&out.plan).into();
    v["failover"] = out.failover.clone().into();
    if let Some(e) = &out.estimate {
        v["estimate"] = serde_json::json!({
            "level": e.level,
            "secs": e.secs,
            "bytes_to_host": e.traffic.to_host,
            "bytes_disk_to_disk": e.traffic.disk_to_disk,
        });
    }
    v["disks"] = out.disks.clone().into();
    v["choice"] = out.choice.clone().into();
    v
}
