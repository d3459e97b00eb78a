//! `adisk calibrate`: the cost file it writes, the cluster that then prices `auto`'s plans
//! with it, and the errors of a missing or malformed one.
mod common;

use adisk_core::calibration::{self as cal, Calibration};
use common::*;

const Q3: &str = "SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority FROM customer, orders, lineitem WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15' GROUP BY l_orderkey, o_orderdate, o_shippriority ORDER BY revenue DESC, o_orderdate LIMIT 10";

/// The clock /proc/cpuinfo states, GHz (an independent figure to hold the measured one to).
fn stated_clock_ghz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu MHz"))?;
    line.split_once(':')?
        .1
        .trim()
        .parse::<f64>()
        .ok()
        .map(|m| m / 1000.0)
}

#[test]
fn calibrating_beside_a_cluster_measures_every_cost_and_auto_then_prices_with_them() {
    let cluster = TpchCluster::start("0.01", 1);
    let dir = cluster.dir();
    let out = ok(dir, &["calibrate", "--sf", "0.01", "--repeats", "3"]);
    let costs = Calibration::load(&dir.join("costs.toml")).unwrap();
    for name in [
        cal::SCAN,
        cal::IPC_ENCODE,
        cal::IPC_DECODE,
        cal::JOIN,
        cal::HASH_BUILD,
        cal::HASH_PROBE,
        cal::HASH_GROUP,
        cal::AGGREGATE,
        cal::SORT_COMPARE,
        cal::BLOOM_PROBE,
        cal::FILTER_SHIP,
        cal::PARTITION,
        cal::COPY,
        cal::STAGE,
        cal::JOB_HOST,
        cal::SEND,
        cal::RECEIVE,
    ] {
        let ns = costs
            .ns(name)
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(ns > 0.0 && ns.is_finite(), "{name} = {ns}");
        assert!(out.contains(name), "{name} not printed:\n{out}");
    }
    // A disk job costs far more than a byte or a row of anything.
    assert!(costs.ns(cal::STAGE).unwrap() > 10_000.0, "{out}");
    if let Some(stated) = stated_clock_ghz() {
        let measured = costs.machine.clock_ghz;
        assert!(
            measured > stated / 2.0 && measured < stated * 2.0,
            "measured {measured} GHz, /proc/cpuinfo says {stated}"
        );
    }
    // The simulator's costs are the same figures in cycles of that clock.
    let select = costs.sim["select_cycles_per_byte"];
    let expected = costs.ns(cal::SCAN).unwrap() * costs.machine.clock_ghz;
    assert!(
        (select - expected).abs() < 1e-9 * expected,
        "{select} vs {expected}"
    );

    // cluster.toml now points at it, and a new host's `auto` says it priced with it.
    let config = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(config.contains("costs.toml"), "{config}");
    let explain = ok(dir, &["explain", "--offload", "auto", Q3]);
    assert!(explain.contains("costs measured"), "{explain}");
    // Same answer as without (the choice may differ; the result may not).
    let with = ok(dir, &["sql", "--offload", "auto", Q3]);
    let disks = ok(dir, &["sql", "--offload", "disks", Q3]);
    assert_eq!(with, disks);

    // A cost file broken after the fact: a clear error, not the built-in rates in silence.
    std::fs::write(dir.join("costs.toml"), "[machine]\ncpu = 3\n").unwrap();
    let e = fails(
        dir,
        &["sql", "--offload", "auto", "SELECT count(*) FROM nation"],
    );
    assert!(e.contains("cost file") && e.contains("malformed"), "{e}");
}

#[test]
fn up_refuses_a_cost_file_it_cannot_read_before_starting_any_disk() {
    let dir = tempfile::tempdir().unwrap();
    let e = fails(
        dir.path(),
        &["up", "--disks", "1", "--costs", "/nonexistent/costs.toml"],
    );
    assert!(
        e.contains("--costs") && e.contains("/nonexistent/costs.toml"),
        "{e}"
    );
    assert!(!dir.path().join("cluster.toml").exists(), "nothing started");
    let e = fails(dir.path(), &["calibrate", "--sf", "0", "--repeats", "1"]);
    assert!(e.contains("--sf"), "{e}");
}
