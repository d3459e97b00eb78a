//! `adisk sim sensitivity` (issue 15, point 3) on a reduced copy of an experiment file.

use std::path::Path;

#[test]
fn sensitivity_scales_assumptions_and_reports_every_key() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/riedel/select.toml");
    let text = std::fs::read_to_string(&src).unwrap();
    let reduced = text.replace(
        "\"run.disks\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
        "\"run.disks\" = [1, 8]",
    );
    assert_ne!(
        reduced, text,
        "the sweep line of riedel/select.toml changed; update this test"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("select.toml");
    std::fs::write(&path, reduced).unwrap();
    let report = adisk_sim::sensitivity::run(&path, 2.0, Some("atm155.bandwidth_mbps")).unwrap();
    println!("{report}");
    assert!(report.contains("1 assumption keys"), "{report}");
    assert!(
        report.contains("devices.links.atm155.bandwidth_mbps"),
        "{report}"
    );
    assert!(report.contains("robust: "), "{report}");
    let err = adisk_sim::sensitivity::run(&path, 1.0, None).unwrap_err();
    assert!(err.to_string().contains("--factor"), "{err}");
}

/// Doubling the Medalist pair's assumed mean seek (10 ms) reaches its full-stroke seek (20 ms):
/// that configuration is invalid, so the scaling is listed as not run and the key, whose other
/// scaling changes nothing, still counts as robust (it used to count as a change).
#[test]
fn an_invalid_scaled_configuration_is_listed_not_counted_as_a_change() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/riedel/select.toml");
    let text = std::fs::read_to_string(&src).unwrap();
    let reduced = text.replace(
        "\"run.disks\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
        "\"run.disks\" = [1, 8]",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("select.toml");
    std::fs::write(&path, reduced).unwrap();
    let report =
        adisk_sim::sensitivity::run(&path, 2.0, Some("medalist_pair.seek_ms_mean")).unwrap();
    println!("{report}");
    assert!(
        report.contains("×2: not run, the scaled configuration is invalid"),
        "{report}"
    );
    assert!(report.contains("robust: 1 of 1 keys"), "{report}");
    assert!(report.contains("1 scalings not run"), "{report}");
}

/// Issue 38: which assumptions a stated conclusion depends on, across the files it reads.
#[test]
fn sensitivity_of_conclusions_reruns_their_runs_with_each_assumption_scaled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let report = adisk_sim::sensitivity::conclusions_run(
        Some(&dir),
        2.0,
        Some("uysal-group-by-more-computation-than-select"),
        Some("hash_group_cycles_per_tuple"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{report}");
    assert!(
        report.contains("1 conclusions, 1 assumption keys"),
        "{report}"
    );
    assert!(
        report.contains("uysal-group-by-more-computation-than-select (holds): rests on no single scaled assumption"),
        "{report}"
    );
    let err = adisk_sim::sensitivity::conclusions_run(Some(&dir), 0.5, None, None).unwrap_err();
    assert!(err.to_string().contains("--factor"), "{err}");
}
