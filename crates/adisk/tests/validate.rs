//! `adisk validate`: a small matrix end to end (two disk counts, a throttled host link, a SQL
//! workload and an application), the report it writes, and its refusals of bad options.
mod common;

use common::*;

#[test]
fn validate_measures_and_predicts_every_point_and_both_see_the_throttled_link() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "validate",
        "--sf",
        "0.02",
        "--disks",
        "1,2",
        "--reference-disks",
        "2",
        "--variants",
        "base,link",
        "--link-mbps",
        "8",
        "--workloads",
        "select,sort",
        "--repeats",
        "1",
        "--app-mb",
        "2",
    ];
    let out = ok(d, &args);
    assert!(out.contains("points: |error| median"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("validate.json")).unwrap()).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * 2 * 2, "{out}");
    for p in points {
        let (m, pr) = (
            p["measured_s"].as_f64().unwrap(),
            p["predicted_s"].as_f64().unwrap(),
        );
        assert!(m > 0.0 && pr > 0.0 && pr.is_finite(), "{p}");
    }
    // At 1 MB/s (8 Mbit/s) the selection's rows take longer than on the unthrottled link,
    // measured and predicted alike.
    let at = |disks: u64, variant: &str, what: &str| {
        points
            .iter()
            .find(|p| {
                p["workload"] == "select" && p["disks"] == disks && p["variant"]["name"] == variant
            })
            .unwrap()[what]
            .as_f64()
            .unwrap()
    };
    for what in ["measured_s", "predicted_s"] {
        assert!(at(2, "link", what) > at(2, "base", what), "{what}: {out}");
    }
    let svg = std::fs::read_to_string(d.join("validate.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("circle"), "{svg}");
    // Every cluster it started is stopped: no process runs from its directories.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&d.display().to_string()))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    again_predicts_the_same_points(d, points);
}

/// `--again` on the run just made: the same points, the same predictions (same model, same
/// costs), nothing measured; a missing trace is an error naming it.
fn again_predicts_the_same_points(d: &std::path::Path, points: &[serde_json::Value]) {
    let earlier = d.display().to_string();
    let out = d.join("again");
    let args = ["validate", "--again", &earlier, "--reference-disks", "2"];
    let printed = ok(d, &[&args[..], &["--out", out.to_str().unwrap()]].concat());
    assert!(printed.contains("points: |error| median"), "{printed}");
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("validate.json")).unwrap()).unwrap();
    let again = again["points"].as_array().unwrap();
    assert_eq!(again.len(), points.len());
    for (a, p) in again.iter().zip(points) {
        assert_eq!(a["measured_s"], p["measured_s"], "{a} {p}");
        let (x, y) = (
            a["predicted_s"].as_f64().unwrap(),
            p["predicted_s"].as_f64().unwrap(),
        );
        assert!((x - y).abs() <= 1e-9 * y.max(1.0), "{a} {p}");
    }
    let gone = d.join("validate-traces").join("sort-2-link.json");
    std::fs::remove_file(&gone).unwrap();
    let err = fails(d, &args);
    assert!(err.contains("sort-2-link.json"), "{err}");
}

#[test]
fn validate_refuses_unknown_workloads_variants_and_a_missing_reference() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = fails(d, &["validate", "--workloads", "select,nope"]);
    assert!(err.contains("unknown workload `nope`"), "{err}");
    let err = fails(d, &["validate", "--variants", "base,fast"]);
    assert!(err.contains("unknown variant `fast`"), "{err}");
    let err = fails(d, &["validate", "--disks", "1,2"]);
    assert!(
        err.contains("reference configuration (4 disks, base)"),
        "{err}"
    );
    let err = fails(d, &["validate", "--disks", "0,4"]);
    assert!(err.contains("--disks"), "{err}");
    // Nothing was started.
    assert!(!d.join("validate-4").exists());
}
