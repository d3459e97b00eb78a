//! Model tests required by issue 4: conservation of bytes on links, determinism, scaling of
//! an embarrassingly parallel select, no extra passes for in-memory workloads, rejection of
//! bad configurations with file/key/reason, and that every experiment file runs.

use adisk_sim::SimError;
use adisk_sim::config;
use adisk_sim::engine::ResKind;
use adisk_sim::experiment::{self, Loaded};
use adisk_sim::report::RunReport;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

fn load(rel: &str) -> Loaded {
    experiment::load(&root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Apply overrides (dotted key → TOML value text) and run the base point.
fn run_with(
    l: &Loaded,
    overrides: &[(&str, &str)],
    seed: Option<u64>,
) -> Result<RunReport, SimError> {
    let mut raw = l.raw.clone();
    if let Some(t) = raw.as_table_mut() {
        t.remove("sweep");
        t.remove("variants");
    }
    for (k, v) in overrides {
        let val: toml::Value =
            toml::from_str::<toml::Table>(&format!("x = {v}")).unwrap()["x"].clone();
        config::set_dotted(&mut raw, k, val).unwrap();
    }
    let text = toml::to_string(&raw).unwrap();
    let l2 = experiment::load_str(&l.path, &text)?;
    let pts = experiment::points(&l2, false)?;
    experiment::run_point(&l.path, &pts[0], seed)
}

fn run(rel: &str, overrides: &[(&str, &str)]) -> RunReport {
    run_with(&load(rel), overrides, None).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn assert_links_conserve(r: &RunReport) {
    let mut links = 0;
    for res in &r.resources {
        if res.kind == ResKind::Link {
            links += 1;
            assert_eq!(
                res.bytes_in, res.bytes_out,
                "{} {}: link {} sent {} received {}",
                r.experiment, r.system, res.name, res.bytes_in, res.bytes_out
            );
        }
    }
    assert!(links > 0, "{}: no links", r.system);
}

#[test]
fn bytes_sent_equal_bytes_received_on_every_link_of_every_architecture() {
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "acharya/core-sort.toml",
            vec![
                ("run.system", "\"conventional_today\""),
                ("workload.dataset_bytes", "2.0e8"),
            ],
        ),
        (
            "acharya/core-sort.toml",
            vec![
                ("run.system", "\"active_today\""),
                ("workload.dataset_bytes", "2.0e8"),
            ],
        ),
        (
            "uysal/sort.toml",
            vec![
                ("run.system", "\"active_disks\""),
                ("workload.dataset_bytes", "4.0e8"),
            ],
        ),
        (
            "uysal/sort.toml",
            vec![
                ("run.system", "\"cluster\""),
                ("run.disks", "32"),
                ("workload.dataset_bytes", "4.0e8"),
            ],
        ),
        (
            "uysal/sort.toml",
            vec![
                ("run.system", "\"smp\""),
                ("workload.dataset_bytes", "4.0e8"),
            ],
        ),
        (
            "uysal/group_by.toml",
            vec![
                ("run.system", "\"ad_restricted\""),
                ("workload.dataset_bytes", "4.0e8"),
            ],
        ),
        (
            "memik/base.toml",
            vec![
                ("run.system", "\"smart_disks\""),
                ("workload.query", "\"Q12\""),
                ("workload.size_class", "\"small\""),
            ],
        ),
        (
            "memik/base.toml",
            vec![
                ("run.system", "\"cluster4\""),
                ("workload.query", "\"Q16\""),
                ("workload.size_class", "\"small\""),
            ],
        ),
        (
            "chiu/tpch.toml",
            vec![
                ("run.system", "\"sd_partial\""),
                ("workload.query", "\"Q12\""),
                ("workload.scale_factor", "0.1"),
            ],
        ),
        (
            "chiu/tpch-two-groups.toml",
            vec![
                ("run.system", "\"sd_full_2g\""),
                ("workload.scale_factor", "0.1"),
            ],
        ),
        (
            "riedel/join.toml",
            vec![
                ("run.system", "\"active_disks\""),
                ("workload.scale_factor", "0.2"),
            ],
        ),
    ];
    for (file, ov) in cases {
        let r = run(file, &ov);
        assert!(r.total_s > 0.0, "{file}: zero time");
        assert!(r.warnings.is_empty(), "{file}: {:?}", r.warnings);
        assert_links_conserve(&r);
    }
}

#[test]
fn same_seed_gives_byte_identical_output_and_the_seed_matters() {
    let l = load("uysal/sort.toml");
    let ov = [
        ("run.system", "\"active_disks\""),
        ("workload.dataset_bytes", "2.0e8"),
    ];
    let a = serde_json::to_string(&run_with(&l, &ov, Some(7)).unwrap()).unwrap();
    let b = serde_json::to_string(&run_with(&l, &ov, Some(7)).unwrap()).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run_with(&l, &ov, Some(8)).unwrap()).unwrap();
    assert_ne!(
        a, c,
        "the seed (rotational phase, head position) should change a seek-bound run"
    );
}

#[test]
fn embarrassingly_parallel_select_on_active_disks_never_gets_slower_with_more_disks() {
    for (file, sys) in [
        ("uysal/select.toml", "active_disks"),
        ("acharya/core-select.toml", "active_today"),
        ("uysal/select.toml", "ad_restricted"),
    ] {
        let mut prev = f64::INFINITY;
        for disks in [1, 2, 4, 8, 16, 32, 64] {
            let d = disks.to_string();
            let r = run(
                file,
                &[
                    ("run.system", &format!("\"{sys}\"")),
                    ("run.disks", &d),
                    ("workload.dataset_bytes", "1.0e9"),
                ],
            );
            assert!(
                r.total_s <= prev * 1.0001,
                "{file} {sys}: {disks} disks took {} s, fewer took {prev} s",
                r.total_s
            );
            prev = r.total_s;
        }
    }
}

/// Issue 15: a result that moves the wrong way when a resource grows is a bug until
/// explained. uysal-…'s SMP merged every processor's group-by partials and dmine counters at
/// board 0, so 128 processors were 1.6 and 1.14 times slower than 64; by the paper's SMP
/// algorithms (shared counters updated in batches, partials merged by range) more
/// processors are never slower (dmine on a tenth of the paper's data, to keep the test short;
/// both fail on the old model).
#[test]
fn the_smp_is_not_slower_with_more_processors_for_group_by_and_dmine() {
    for (file, data) in [
        ("uysal/group_by.toml", "17.18e9"),
        ("uysal/dmine.toml", "1.718e9"),
    ] {
        let time = |disks: &str| {
            run(
                file,
                &[
                    ("run.system", "\"smp\""),
                    ("run.disks", disks),
                    ("workload.dataset_bytes", data),
                ],
            )
            .total_s
        };
        let (t64, t128) = (time("64"), time("128"));
        assert!(
            t128 <= t64 * 1.02,
            "{file}: the SMP took {t128} s with 128 processors, {t64} s with 64"
        );
    }
}

fn link_bytes(r: &RunReport, prefix: &str) -> u64 {
    r.resources
        .iter()
        .filter(|x| x.kind == ResKind::Link && x.name.starts_with(prefix))
        .map(|x| x.bytes_in)
        .sum()
}

#[test]
fn restricting_active_disks_to_the_host_doubles_shuffle_traffic_on_the_loops() {
    let base = [
        ("run.system", "\"active_today\""),
        ("workload.dataset_bytes", "4.0e8"),
        ("run.disks", "8"),
    ];
    let via = run("acharya/core-sort.toml", &base);
    let mut direct_ov = base.to_vec();
    direct_ov.push(("systems.active_today.communication", "\"direct\""));
    let direct = run("acharya/core-sort.toml", &direct_ov);
    let (v, d) = (
        link_bytes(&via, "fc-loop") as f64,
        link_bytes(&direct, "fc-loop") as f64,
    );
    // Pass 1 shuffles 7/8 of the data between disks: direct once, via the host twice.
    let shuffled = 4.0e8 * 7.0 / 8.0;
    assert!(
        (d - shuffled).abs() / shuffled < 0.02,
        "direct loop bytes {d}"
    );
    assert!(
        (v - 2.0 * shuffled).abs() / shuffled < 0.04,
        "via-host loop bytes {v}"
    );
    let host_cpu = |r: &RunReport| {
        r.resources
            .iter()
            .find(|x| x.name == "host.cpu")
            .map(|x| x.busy_s)
            .unwrap_or(0.0)
    };
    assert!(
        host_cpu(&via) > 10.0 * host_cpu(&direct).max(1e-6),
        "the host forwards (copies) in the restricted system"
    );
}

fn disk_bytes(r: &RunReport) -> u64 {
    r.resources
        .iter()
        .filter(|x| x.kind == ResKind::Disk)
        .map(|x| x.bytes_in)
        .sum()
}

#[test]
fn workloads_whose_data_fit_in_memory_do_no_extra_passes() {
    // Sort: 32 MB per active disk of 32 MB fits… use 8 disks × 2 MB.
    let d = 16.0e6;
    let r = run(
        "uysal/sort.toml",
        &[
            ("run.system", "\"active_disks\""),
            ("run.disks", "8"),
            ("workload.dataset_bytes", &format!("{d:e}")),
        ],
    );
    let note = |k: &str| {
        r.notes
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(note("in_memory"), "true");
    assert_eq!(note("merge_passes"), "0");
    assert_eq!(
        r.phases.len(),
        2,
        "partition + write sorted only: {:?}",
        r.phases
    );
    // The data cross the disks exactly twice: read once, written once.
    let moved = disk_bytes(&r) as f64;
    assert!(
        (moved - 2.0 * d).abs() / d < 0.01,
        "disk bytes {moved} for {d} of input"
    );
    // A larger input on the same system does need run files and a merge.
    let big = run(
        "uysal/sort.toml",
        &[
            ("run.system", "\"active_disks\""),
            ("run.disks", "8"),
            ("workload.dataset_bytes", "2.0e9"),
        ],
    );
    assert!(disk_bytes(&big) as f64 > 3.9 * 2.0e9);
    // Group-by whose table fits: no flush, partials shipped once.
    let g = run(
        "uysal/group_by.toml",
        &[
            ("run.system", "\"active_disks\""),
            ("workload.groups", "1000.0"),
            ("workload.dataset_bytes", "1.0e9"),
        ],
    );
    assert!(
        g.notes
            .iter()
            .any(|(k, v)| k == "flushes_per_worker" && v == "0.0"),
        "{:?}",
        g.notes
    );
    // Out-of-core FFT: with 32 disks the matrix fits and nothing but the result is written.
    let f = run("chiu/fft.toml", &[("run.disks", "32")]);
    assert!(f.notes.iter().any(|(k, v)| k == "in_core" && v == "true"));
    let m = 2048.0 * 2048.0 * 16.0;
    assert!(((disk_bytes(&f) as f64) - 2.0 * m).abs() / m < 0.01);
    // Clustering: partitions that fit are read from disk once, not once per pass.
    let c = run("chiu/clustering.toml", &[("run.disks", "8")]);
    assert!(
        c.notes
            .iter()
            .any(|(k, v)| k == "partition_fits_in_memory" && v == "true")
    );
    let recs = 2234961.0 * 20.0 * 4.0;
    assert!(((disk_bytes(&c) as f64) - recs).abs() / recs < 0.01);
}

fn expect_config_error(text: &str, key_part: &str, reason_part: &str) {
    let path = Path::new("experiments/test/bad.toml");
    let res = experiment::load_str(path, text).and_then(|l| {
        let pts = experiment::points(&l, false)?;
        experiment::run_point(path, &pts[0], None)
    });
    match res {
        Err(SimError::Config { file, key, reason }) => {
            assert_eq!(file, "experiments/test/bad.toml");
            assert!(
                key.contains(key_part),
                "key `{key}` should mention `{key_part}` (reason: {reason})"
            );
            assert!(
                reason.contains(reason_part),
                "reason `{reason}` should mention `{reason_part}`"
            );
            let shown = SimError::Config { file, key, reason }.to_string();
            assert!(shown.starts_with("experiments/test/bad.toml: "));
        }
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(_) => panic!("bad config accepted: {key_part}"),
    }
}

#[test]
fn bad_configs_are_rejected_with_file_key_and_reason() {
    let good = std::fs::read_to_string(root().join("acharya/core-select.toml")).unwrap();
    // Sanity: the good file runs.
    assert!(experiment::load_str(Path::new("x.toml"), &good).is_ok());
    // Missing device.
    expect_config_error(
        &good.replacen("disk = \"today\"", "disk = \"tomorrow\"", 2),
        "disk",
        "no drive `tomorrow`",
    );
    // Negative bandwidth.
    expect_config_error(
        &good.replacen("bandwidth_mbps = 100.0", "bandwidth_mbps = -100.0", 1),
        "devices.links.loop_today",
        "positive",
    );
    // Unknown key.
    expect_config_error(
        &good.replacen("latency_us = 1.0", "latency_us = 1.0\njitter_us = 3.0", 1),
        "jitter_us",
        "unknown field",
    );
    // Unit typo in a key name.
    expect_config_error(
        &good.replacen("host_memory_mb = 1024", "host_memory_gb = 1", 1),
        "host_memory_gb",
        "unknown field",
    );
    expect_config_error(
        &good.replacen("bandwidth_mbps = 100.0", "bandwidth_mbs = 100.0", 1),
        "bandwidth_mbs",
        "unknown field",
    );
    // Missing system.
    expect_config_error(
        &good.replacen(
            "system = \"active_today\"",
            "system = \"active_tomorrow\"",
            1,
        ),
        "run.system",
        "no system",
    );
    // Wrong type.
    expect_config_error(
        &good.replacen("dataset_bytes = 4.0e9", "dataset_bytes = \"four\"", 1),
        "dataset_bytes",
        "invalid type",
    );
    // Negative seek.
    expect_config_error(
        &good.replacen("seek_ms_mean = 9.0", "seek_ms_mean = -9.0", 1),
        "seek_ms_mean",
        "positive",
    );
    // Unknown cost parameter.
    expect_config_error(
        &good.replacen(
            "selectivity = 0.01",
            "selectivity = 0.01\n[workload.cost_overrides]\nselect_cycle_per_byte = 3.0",
            1,
        ),
        "select_cycle_per_byte",
        "unknown cost",
    );
    // Unknown workload.
    expect_config_error(
        &good.replacen("kind = \"select\"", "kind = \"selct\"", 1),
        "workload.kind",
        "unknown workload",
    );
}

#[test]
fn every_experiment_file_parses_expands_and_runs_its_first_point() {
    let sources = adisk_sim::experiment::sources("all", Some(&root())).unwrap();
    assert!(
        sources.len() >= 30,
        "only {} experiment files",
        sources.len()
    );
    for (path, text) in sources {
        let l = experiment::load_str(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        let pts = experiment::points(&l, true).unwrap_or_else(|e| panic!("{e}"));
        assert!(!pts.is_empty());
        let mut p = pts[0].clone();
        p.exp.run.max_chunks_per_phase = 256;
        let r = experiment::run_point(&path, &p, None)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            r.total_s > 0.0 && r.total_s.is_finite(),
            "{}",
            path.display()
        );
        assert!(!l.exp.experiment.recreates.is_empty());
    }
}

#[test]
fn embedded_experiments_match_the_experiments_directory() {
    let on_disk = adisk_sim::experiment::sources("all", Some(&root())).unwrap();
    assert_eq!(
        on_disk.len(),
        adisk_sim::embedded::EXPERIMENTS.len(),
        "run experiments/generate.py"
    );
    for (path, text) in on_disk {
        let rel = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let emb = adisk_sim::embedded::EXPERIMENTS
            .iter()
            .find(|(p, _)| *p == rel)
            .unwrap_or_else(|| panic!("{rel} not embedded"));
        assert_eq!(emb.1, text, "{rel} differs from its embedded copy");
    }
}

#[test]
fn reproduce_riedel_writes_csv_svg_and_tables() {
    let out = tempfile::tempdir().unwrap();
    let t = adisk_sim::cli::reproduce("riedel", out.path(), Some(&root()), false).unwrap();
    assert_eq!(t.files, 5);
    for name in ["select", "aggregate", "join", "join5", "summary"] {
        for ext in ["csv", "svg", "txt", "resources.csv"] {
            let p = out
                .path()
                .join("riedel")
                .join(format!("riedel-{name}.{ext}"));
            let meta = std::fs::metadata(&p).unwrap_or_else(|_| panic!("missing {}", p.display()));
            assert!(meta.len() > 100, "{} is empty", p.display());
        }
    }
    let svg = std::fs::read_to_string(out.path().join("riedel/riedel-select.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    // A second reproduction writes byte-identical files.
    let again = tempfile::tempdir().unwrap();
    adisk_sim::cli::reproduce("riedel", again.path(), Some(&root()), false).unwrap();
    for entry in std::fs::read_dir(out.path().join("riedel")).unwrap() {
        let p = entry.unwrap().path();
        let q = again.path().join("riedel").join(p.file_name().unwrap());
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(&q).unwrap(),
            "{} differs between runs",
            p.display()
        );
    }
}

#[test]
fn unknown_paper_is_a_usage_error() {
    assert!(matches!(
        adisk_sim::experiment::sources("gray", None),
        Err(SimError::Usage(_))
    ));
}

#[test]
fn every_cost_parameter_is_documented() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/simulator.md"),
    )
    .unwrap();
    for (name, _, _) in adisk_sim::costs::COSTS {
        assert!(
            doc.contains(name),
            "docs/simulator.md does not mention {name}"
        );
    }
    for e in adisk_sim::embedded::EXPERIMENTS {
        assert!(doc.contains(e.0), "docs/simulator.md does not list {}", e.0);
    }
}

#[test]
fn cli_run_writes_json_and_csv_and_rejects_unknown_formats() {
    use adisk_sim::cli::{SimCommand, run};
    let dir = tempfile::tempdir().unwrap();
    let file = root().join("riedel/select.toml");
    for (format, check) in [
        ("json", "\"total_s\""),
        ("csv", "resource,component,kind"),
        ("table", "bottleneck"),
    ] {
        let out = dir.path().join(format!("r.{format}"));
        run(SimCommand::Run {
            file: file.clone(),
            out: Some(out.clone()),
            format: format.into(),
            seed: Some(3),
        })
        .unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains(check), "{format}: {text:.200}");
    }
    let err = run(SimCommand::Run {
        file: file.clone(),
        out: None,
        format: "xml".into(),
        seed: None,
    })
    .unwrap_err();
    assert!(matches!(err, SimError::Usage(_)));
    let missing = run(SimCommand::Run {
        file: dir.path().join("nope.toml"),
        out: None,
        format: "table".into(),
        seed: None,
    })
    .unwrap_err();
    assert!(matches!(missing, SimError::Io { .. }), "{missing}");
    run(SimCommand::Sweep {
        file,
        out: Some(dir.path().join("sweep")),
        seed: None,
    })
    .unwrap();
    assert!(dir.path().join("sweep/riedel-select.csv").exists());
}

/// The engine composes resources correctly: a streaming select takes as long as its
/// bottleneck (drives, interconnect or processor) allows, within 3%.
#[test]
fn streaming_select_runs_at_the_speed_of_its_bottleneck() {
    let file = "acharya/core-select.toml";
    let d = 1.0e9;
    let base = |extra: &[(&str, &str)]| {
        let mut ov = vec![
            ("run.system", "\"conventional_today\""),
            ("run.disks", "4"),
            ("workload.dataset_bytes", "1.0e9"),
        ];
        ov.extend_from_slice(extra);
        run(file, &ov)
    };
    // Drive-bound: 4 drives at 15 MB/s (fast host, fast loops).
    let r = base(&[("devices.cpus.host_today.mhz", "100000.0")]);
    let expect = d / (4.0 * 15e6);
    assert!(
        (r.total_s - expect).abs() / expect < 0.03,
        "drive-bound {} vs {expect}",
        r.total_s
    );
    // Interconnect-bound: two 10 MB/s loops.
    let r = base(&[
        ("devices.cpus.host_today.mhz", "100000.0"),
        ("devices.links.loop_today.bandwidth_mbps", "10.0"),
    ]);
    let expect = d / 20e6;
    assert!(
        (r.total_s - expect).abs() / expect < 0.03,
        "loop-bound {} vs {expect}",
        r.total_s
    );
    assert!(r.bottleneck.starts_with("io-loop"), "{}", r.bottleneck);
    // Processor-bound: a 20 MHz host at 6.5 cycles/byte plus 36 µs per 256 KB request.
    let r = base(&[("devices.cpus.host_today.mhz", "20.0")]);
    let expect = d * 6.5 / 20e6 + (d / 262144.0).ceil() * 36e-6;
    assert!(
        (r.total_s - expect).abs() / expect < 0.03,
        "cpu-bound {} vs {expect}",
        r.total_s
    );
    assert_eq!(r.bottleneck, "host.cpu");
}

/// The full reproduction (1,351 runs). About 30–40 s in release on this machine; too slow for
/// debug test runs, so it is opt-in: `cargo test --release -p adisk-sim -- --ignored`.
#[test]
#[ignore]
fn reproduce_all_completes_in_under_a_minute() {
    let out = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let t = adisk_sim::cli::reproduce("all", out.path(), Some(&root()), false).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(t.files, adisk_sim::embedded::EXPERIMENTS.len());
    assert!(t.runs > 1000);
    assert!(secs < 60.0, "reproduce all took {secs:.1} s");
}

/// An all-to-all shuffle on a switched network runs at the port rate: with fast drives and
/// processors, NOW-sort's first pass on 16 cluster hosts takes (D/n)·(n−1)/n / 12.5 MB/s.
#[test]
fn cluster_shuffle_runs_at_the_port_rate() {
    let d = 1.6e9;
    let r = run(
        "uysal/sort.toml",
        &[
            ("run.system", "\"cluster\""),
            ("run.disks", "16"),
            ("workload.dataset_bytes", "1.6e9"),
            ("devices.cpus.p2_300.mhz", "100000.0"),
            ("devices.disks.cheetah9lp.media_mbps_outer", "2000.0"),
            ("devices.disks.cheetah9lp.media_mbps_inner", "2000.0"),
            ("devices.links.pci.bandwidth_mbps", "10000.0"),
        ],
    );
    let n = 16.0;
    let expect = d / n * (n - 1.0) / n / 12.5e6;
    let p1 = &r.phases[0];
    let took = p1.end_s - p1.start_s;
    assert!(
        (took - expect).abs() / expect < 0.05,
        "shuffle took {took} s, port-rate bound {expect} s"
    );
    assert!(
        r.resources
            .iter()
            .any(|x| x.name.ends_with("port-tx") && x.utilization > 0.3)
    );
}

/// chiu-… varies the page size (§5: "using data page sizes of 4K, 8K, 16K, 32K and 64K
/// bytes"). With two buffers per stream a smart disk keeps the next page queued at the drive,
/// which streams on, so the page size hardly matters; with one buffer it reads a page, filters
/// it and only then asks for the next, paying the controller overhead per page, so small
/// pages are much slower. (The engine used to keep two 256 KB chunks in flight whatever the
/// buffers, which hid this: 4 KB pages were 4% slower than 64 KB ones with one buffer.)
#[test]
fn a_single_buffer_reads_page_by_page_so_small_pages_cost_more() {
    let t = |buffers: &str, page: &str| {
        run(
            "chiu/tpch.toml",
            &[
                ("workload.query", "\"Q6\""),
                ("run.system", "\"sd_full\""),
                ("run.disks", "8"),
                ("systems.sd_full.buffers_per_stream", buffers),
                ("workload.page_kb", page),
            ],
        )
        .total_s
    };
    let (two_small, two_large) = (t("2", "4.0"), t("2", "64.0"));
    assert!(
        (two_small - two_large).abs() / two_large < 0.02,
        "two buffers: 4 KB {two_small} s vs 64 KB {two_large} s"
    );
    let (one_small, one_large) = (t("1", "4.0"), t("1", "64.0"));
    assert!(
        one_small > 1.5 * one_large,
        "one buffer: 4 KB {one_small} s vs 64 KB {one_large} s"
    );
    assert!(one_large >= two_large, "{one_large} vs {two_large}");
}

/// uysal-… §4: the 64/128 MB disks use the added memory for more stream buffers, and §3:
/// group-by's trace does not take the memory as a parameter, so its table of partial
/// aggregates, and so what it ships and when, is the 32 MB configuration's. It used to grow
/// with the memory, hold every partial to the end of the scan and be 1.11x slower.
#[test]
fn group_by_keeps_the_base_table_when_the_disk_memory_grows() {
    let path = root().join("uysal/variations.toml");
    let l = experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let pts = experiment::points(&l, true).unwrap_or_else(|e| panic!("{e}"));
    let note = |system: &str| {
        let mut p = pts
            .iter()
            .find(|p| {
                p.labels.get("variant").map(String::as_str) == Some("group_by")
                    && p.labels.get("run.system").map(String::as_str) == Some(system)
                    && p.labels.get("run.disks").map(String::as_str) == Some("32")
            })
            .unwrap_or_else(|| panic!("no group_by point for {system}"))
            .clone();
        p.exp.run.max_chunks_per_phase = 64;
        let r = experiment::run_point(&path, &p, None).unwrap_or_else(|e| panic!("{e}"));
        let get = |k: &str| {
            r.notes
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{system}: no note {k}"))
        };
        (get("local_table_fits"), get("flushes_per_worker"))
    };
    let base = note("active_disks");
    assert_eq!(base.0, "false", "32 MB: the table does not fit at 32 disks");
    assert_eq!(note("ad_64mb"), base);
    assert_eq!(note("ad_128mb"), base);
}

/// Runs `text` as an experiment file in `dir`.
fn run_in(dir: &Path, text: &str) -> Result<RunReport, SimError> {
    let path = dir.join("exp.toml");
    let l = experiment::load_str(&path, text)?;
    let pts = experiment::points(&l, false)?;
    experiment::run_point(&path, &pts[0], None)
}

#[test]
fn a_calibration_files_sim_costs_replace_the_defaults_and_overrides_still_win() {
    let good = std::fs::read_to_string(root().join("acharya/core-select.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let with = |extra: &str| {
        good.replacen(
            "selectivity = 0.01",
            &format!("selectivity = 0.01\n{extra}"),
            1,
        )
    };
    let base = run_in(dir.path(), &good).unwrap().total_s;
    // A select this much dearer per byte at the disks is CPU-bound and takes far longer.
    std::fs::write(
        dir.path().join("costs.toml"),
        "[machine]\ncpu = \"x\"\n[sim]\nselect_cycles_per_byte = 650.0\n",
    )
    .unwrap();
    let slow = run_in(dir.path(), &with("calibration = \"costs.toml\"")).unwrap();
    assert!(slow.total_s > 5.0 * base, "{} vs {base}", slow.total_s);
    // cost_overrides apply on top of the file.
    let back = with(
        "calibration = \"costs.toml\"\n[workload.cost_overrides]\nselect_cycles_per_byte = 6.5",
    );
    let back = run_in(dir.path(), &back).unwrap().total_s;
    assert!((back - base).abs() <= 1e-9 * base, "{back} vs {base}");

    let bad = |text: &str, reason: &str| match run_in(dir.path(), text) {
        Err(SimError::Config { key, reason: r, .. }) => {
            assert!(key.contains("calibration"), "{key}: {r}");
            assert!(r.contains(reason), "{r}");
        }
        other => panic!(
            "expected a config error, got {:?}",
            other.map(|r| r.total_s)
        ),
    };
    bad(
        &with("calibration = \"none.toml\""),
        "cannot read cost file",
    );
    std::fs::write(dir.path().join("nosim.toml"), "[machine]\n").unwrap();
    bad(&with("calibration = \"nosim.toml\""), "no [sim] table");
    std::fs::write(
        dir.path().join("neg.toml"),
        "[sim]\nselect_cycles_per_byte = -1.0\n",
    )
    .unwrap();
    bad(&with("calibration = \"neg.toml\""), "must be a number >= 0");
}
