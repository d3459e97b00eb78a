//! Edges of the applications' command line (issue 32): flags that mean nothing are refused
//! naming the flag, parameters the load recorded are taken from the table, and negative
//! divisors parse. Each test starts one small cluster and runs quick commands on it.
mod common;

use common::{Cluster, fails, json, ok};

#[test]
fn earth_takes_its_grid_from_the_load_and_refuses_a_zero_window() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8", "--buffer-kib", "64"]);
    ok(
        c.dir(),
        &[
            "load",
            "earth",
            "--records",
            "20000",
            "--days",
            "2",
            "--width",
            "64",
            "--height",
            "32",
            "--seed",
            "3",
        ],
    );
    // No grid flags: the loaded 64 × 32, checked against the recorded generator parameters.
    for mode in ["active", "conventional"] {
        let report = json(&ok(
            c.dir(),
            &[
                "app", "earth", "--check", "--mode", mode, "--format", "json",
            ],
        ));
        let result = &report["result"];
        assert_eq!(
            (result["width"].as_u64(), result["height"].as_u64()),
            (Some(64), Some(32))
        );
        assert_eq!(result["valid"], true, "{mode}: {result}");
    }
    // Flags equal to the load's are accepted; others are refused naming both values.
    let report = json(&ok(
        c.dir(),
        &[
            "app",
            "earth",
            "--width",
            "64",
            "--height",
            "32",
            "--check",
            "20000,2,3",
            "--format",
            "json",
        ],
    ));
    assert_eq!(report["result"]["valid"], true, "{report}");
    let err = fails(c.dir(), &["app", "earth", "--width", "128"]);
    assert!(
        err.contains("--width 128") && err.contains("--width 64"),
        "{err}"
    );
    let err = fails(c.dir(), &["app", "earth", "--height", "16"]);
    assert!(
        err.contains("--height 16") && err.contains("--height 32"),
        "{err}"
    );
    let err = fails(c.dir(), &["app", "earth", "--check", "20000,2,4"]);
    assert!(
        err.contains("20000,2,4") && err.contains("20000,2,3"),
        "{err}"
    );
    let err = fails(c.dir(), &["app", "earth", "--check", "20000,2"]);
    assert!(err.contains("RECORDS,DAYS,SEED"), "{err}");
    // A zero dimension is still called that.
    let err = fails(c.dir(), &["app", "earth", "--width", "0"]);
    assert!(err.contains("zero"), "{err}");
    // A zero window would have run with the whole grid as its window.
    for mode in ["active", "conventional"] {
        let err = fails(
            c.dir(),
            &["app", "earth", "--window-kib", "0", "--mode", mode],
        );
        assert!(err.contains("--window-kib"), "{mode}: {err}");
    }
}

#[test]
fn zero_runs_samples_and_scratch_are_refused_naming_their_flag() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8"]);
    ok(c.dir(), &["load", "sort", "--records", "2000"]);
    for mode in ["active", "conventional"] {
        let err = fails(c.dir(), &["app", "sort", "--run-kib", "0", "--mode", mode]);
        assert!(err.contains("--run-kib"), "{mode}: {err}");
    }
    let err = fails(c.dir(), &["app", "sort", "--run-kib", "8192"]);
    assert!(
        err.contains("--run-kib") && err.contains("needs twice that"),
        "{err}"
    );
    let err = fails(c.dir(), &["app", "sort", "--samples-per-disk", "0"]);
    assert!(err.contains("--samples-per-disk"), "{err}");
    let err = fails(c.dir(), &["app", "join", "--run-kib", "0"]);
    assert!(err.contains("--run-kib"), "{err}");
    ok(
        c.dir(),
        &["load", "datacube", "--rows", "2000", "--cards", "10,5,3"],
    );
    let err = fails(c.dir(), &["app", "datacube", "--samples", "0"]);
    assert!(err.contains("--samples"), "{err}");
    for kib in ["0", "1"] {
        let err = fails(c.dir(), &["app", "datacube", "--memory-kib", kib]);
        assert!(err.contains("--memory-kib"), "{kib}: {err}");
    }
    // Nothing of the refused runs is left, and the runs still work.
    let out = json(&ok(c.dir(), &["app", "sort", "--format", "json"]));
    assert_eq!(out["result"]["valid"], true, "{out}");
    let out = json(&ok(c.dir(), &["app", "datacube", "--format", "json"]));
    assert_eq!(out["result"]["valid"], true, "{out}");
}

#[test]
fn conv_takes_a_negative_divisor_as_a_separate_argument() {
    let c = Cluster::start(&["--disks", "2", "--memory-mib", "8"]);
    ok(
        c.dir(),
        &["load", "images", "--count", "4", "--side", "128"],
    );
    // An inverted identity: every inner pixel −p / −1 = p, checked against the reference.
    for divisor in [&["--divisor", "-1"][..], &["--divisor=-2"]] {
        let mut args = vec![
            "app",
            "conv",
            "--side",
            "128",
            "--kernel",
            "0,0,0,0,-1,0,0,0,0",
            "--format",
            "json",
        ];
        args.extend_from_slice(divisor);
        let report = json(&ok(c.dir(), &args));
        assert_eq!(report["result"]["valid"], true, "{divisor:?}: {report}");
    }
    let err = fails(
        c.dir(),
        &[
            "app",
            "conv",
            "--side",
            "128",
            "--kernel",
            "1,1,1,1",
            "--divisor",
            "0",
        ],
    );
    assert!(err.contains("divisor"), "{err}");
}
