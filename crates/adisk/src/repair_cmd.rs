//! `adisk repair`, `adisk scrub` and `adisk restart`: bringing disks back to what their
//! tables' load stamps say they hold.
use crate::common::CliError;
use crate::output::Format;
use adisk_core::protocol::{RepairReport, RepairRequest, ScrubReport};
use adisk_host::cluster::Cluster;
use std::collections::BTreeMap;

/// `adisk repair`: the named disks (default: every disk) fetch from their peers the copies
/// they lack; fails if a copy could not be restored or a disk did not answer.
pub async fn repair(
    cluster: &Cluster,
    disks: &[u32],
    verify: bool,
    format: Format,
) -> Result<(), CliError> {
    if let Some(d) = disks.iter().find(|d| **d >= cluster.disk_count()) {
        return Err(CliError::Other(format!(
            "--disk {d}: the cluster has disks 0..{}",
            cluster.disk_count()
        )));
    }
    let targets: Vec<u32> = if disks.is_empty() {
        (0..cluster.disk_count()).collect()
    } else {
        disks.to_vec()
    };
    let t = std::time::Instant::now();
    let spinner = waiting(&format!("repairing disks {targets:?} from their peers"));
    let request = RepairRequest {
        verify,
        tables: vec![],
    };
    let reports = cluster.repair(&targets, &request).await;
    spinner.finish_and_clear();
    let mut problems = Vec::new();
    for (d, r) in &reports {
        match r {
            Ok(r) if format == Format::Json => {
                println!("{}", serde_json::to_string(r).expect("report serializes"))
            }
            Ok(r) => print_report(r),
            Err(e) if format == Format::Json => println!(
                "{}",
                serde_json::json!({ "disk_id": d, "error": e.to_string() })
            ),
            Err(e) => println!("disk {d}: {e}"),
        }
        match r {
            Ok(r) if !r.failed.is_empty() => {
                problems.push(format!("disk {d}: {} copies not restored", r.failed.len()))
            }
            Ok(_) => {}
            Err(_) => problems.push(format!("disk {d} did not answer")),
        }
    }
    let restored: usize = reports
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|r| r.repaired.len())
        .sum();
    let bytes: u64 = reports
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|r| r.bytes_received)
        .sum();
    eprintln!(
        "repair: {restored} copies restored, {bytes} bytes moved disk to disk, in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::Other(format!("repair: {}", problems.join("; "))))
    }
}

/// A spinner with the elapsed time on standard error while the disks work (they report only
/// when done); hidden when standard error is not a terminal.
fn waiting(what: &str) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::new_spinner();
    let style = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})");
    spinner.set_style(style.expect("template"));
    spinner.set_message(what.to_string());
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    spinner
}

fn print_report(r: &RepairReport) {
    let mut sources: Vec<u32> = r.repaired.iter().map(|x| x.from_disk).collect();
    sources.sort_unstable();
    sources.dedup();
    println!(
        "disk {}: {} tables, {} copies held by its loads, {} restored ({} bytes from disks {:?}), {} verified, {} failed, {} ms",
        r.disk_id,
        r.tables,
        r.expected,
        r.repaired.len(),
        r.bytes_received,
        sources,
        r.verified,
        r.failed.len(),
        r.elapsed_ms
    );
    for x in &r.repaired {
        println!(
            "  restored: {} partition {} from disk {} ({} bytes; {})",
            x.table, x.partition, x.from_disk, x.bytes, x.reason
        );
    }
    for t in &r.dropped {
        println!("  dropped: {t} (an older load; this disk holds no copy of the current one)");
    }
    for f in &r.failed {
        println!(
            "  NOT restored: {} partition {}: {}",
            f.table, f.partition, f.reason
        );
    }
    if !r.unreachable.is_empty() {
        println!("  peers that did not answer: {:?}", r.unreachable);
    }
}

/// `adisk scrub`: every disk reads all its partitions against its manifest; unless
/// `no_repair`, each disk with corrupt copies then refetches them from a good copy on a peer.
/// Fails when a corrupt copy stays corrupt or a disk did not answer.
pub async fn scrub(cluster: &Cluster, format: Format, no_repair: bool) -> Result<(), CliError> {
    let t = std::time::Instant::now();
    let spinner = waiting("scrubbing: every disk reads all its partitions");
    let reports = cluster.scrub().await;
    spinner.finish_and_clear();
    let mut corrupt: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (d, r) in reports.iter().enumerate() {
        if let Ok(r) = r {
            for c in &r.corrupt {
                corrupt.entry(d as u32).or_default().push(c.table.clone());
            }
        }
    }
    let repairs: BTreeMap<u32, adisk_host::Result<RepairReport>> =
        if no_repair || corrupt.is_empty() {
            BTreeMap::new()
        } else {
            let disks: Vec<u32> = corrupt.keys().copied().collect();
            let tables: Vec<String> = corrupt.values().flatten().cloned().collect();
            let spinner = waiting(&format!("refetching corrupt copies on disks {disks:?}"));
            let request = RepairRequest {
                verify: true,
                tables,
            };
            let repairs = cluster.repair(&disks, &request).await.into_iter().collect();
            spinner.finish_and_clear();
            repairs
        };
    let mut left = 0;
    for (d, r) in reports.iter().enumerate() {
        let repair = repairs.get(&(d as u32));
        left += print_scrub(d as u32, r, repair, format);
    }
    eprintln!("scrub took {:.1} s", t.elapsed().as_secs_f64());
    let unanswered = reports.iter().filter(|r| r.is_err()).count();
    if left > 0 || unanswered > 0 {
        let hint = if no_repair {
            ""
        } else {
            " (no good copy on a live peer: load the table again)"
        };
        return Err(CliError::Other(format!(
            "scrub: {left} corrupt partitions left{hint}, {unanswered} disks did not answer"
        )));
    }
    Ok(())
}

/// Prints one disk's scrub (and repair); returns how many corrupt copies are left.
fn print_scrub(
    d: u32,
    r: &adisk_host::Result<ScrubReport>,
    repair: Option<&adisk_host::Result<RepairReport>>,
    format: Format,
) -> usize {
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            match format {
                Format::Json => println!(
                    "{}",
                    serde_json::json!({ "disk_id": d, "error": e.to_string() })
                ),
                Format::Table => println!("disk {d}: {e}"),
            }
            return 0;
        }
    };
    let repaired = |table: &str, p: u32| {
        repair.and_then(|x| x.as_ref().ok()).and_then(|x| {
            x.repaired
                .iter()
                .find(|x| x.table == table && x.partition == p)
        })
    };
    let left = r
        .corrupt
        .iter()
        .filter(|c| repaired(&c.table, c.partition).is_none())
        .count();
    if format == Format::Json {
        let repair = repair.map(|x| match x {
            Ok(x) => serde_json::to_value(x).expect("report serializes"),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        });
        let mut v = serde_json::to_value(r).expect("report serializes");
        v["repair"] = repair.unwrap_or(serde_json::Value::Null);
        v["corrupt_left"] = left.into();
        println!("{v}");
        return left;
    }
    println!(
        "disk {d}: {} partitions, {} bytes read, {} corrupt, {} repaired",
        r.partitions,
        r.bytes,
        r.corrupt.len(),
        r.corrupt.len() - left
    );
    for c in &r.corrupt {
        match repaired(&c.table, c.partition) {
            Some(x) => println!(
                "  corrupt: table {} partition {} ({}): {}\n    repaired from disk {} ({} bytes)",
                c.table, c.partition, c.file, c.reason, x.from_disk, x.bytes
            ),
            None => println!(
                "  corrupt: table {} partition {} ({}): {}",
                c.table, c.partition, c.file, c.reason
            ),
        }
    }
    if let Some(Err(e)) = repair {
        println!("  repair failed: {e}");
    }
    if let Some(Ok(x)) = repair {
        for f in &x.failed {
            println!(
                "  NOT repaired: {} partition {}: {}",
                f.table, f.partition, f.reason
            );
        }
    }
    left
}
