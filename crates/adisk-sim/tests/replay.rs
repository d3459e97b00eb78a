//! `adisk sim replay`: typed trace errors, the recorded configuration predicted closely, the
//! proportional properties the model must keep, determinism, and the command line on the
//! hand-written Q6 trace (`tests/data/q6-trace.json`).

use adisk_sim::SimError;
use adisk_sim::cli::{SimCommand, run};
use adisk_sim::replay::config::{self, ReplayConfig, ReplayFile};
use adisk_sim::replay::report::ReplayReport;
use adisk_sim::replay::{replay, trace};
use clap::Parser;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const MS: u64 = 1_000_000;

/// One disk entry: CPU (split decode 1/4, one stage 3/4), bytes read, shipped to host and
/// to other disks.
fn disk(id: u32, cpu_ns: u64, bytes_read: u64, to_host: u64, to_disks: u64) -> Value {
    json!({
        "disk_id": id, "job_id": "j-1", "bytes_read": bytes_read, "rows_read": bytes_read / 16,
        "bytes_shipped_host": to_host, "bytes_shipped_disks": to_disks, "cpu_ns": cpu_ns,
        "wall_ns": cpu_ns, "row_groups_read": 4,
        "stages": [{ "disklet": "select", "cpu_ns": cpu_ns / 4 * 3, "rows_in": 10, "rows_out": 5 }],
        "error": null, "ended": true
    })
}

/// A trace of one job on `disks` equal disks.
fn trace_json(disks: u32, cpu_ns: u64, bytes_read: u64, to_host: u64, wall_ns: u64) -> Value {
    let entries: Vec<Value> = (0..disks)
        .map(|i| disk(i, cpu_ns, bytes_read, to_host, 0))
        .collect();
    json!({
        "format": "adisk-trace", "version": 1, "what": "sql", "text": "select 1",
        "recorded": { "disks": disks, "host_cpus": 2, "disk_cpus": 1,
                      "host_link_bytes_per_s": 12.5e6, "disk_link_bytes_per_s": null,
                      "disk_read_bytes_per_s": null, "rtt_ns": 200000 },
        "wall_ns": wall_ns, "host_ns": 1_000_000,
        "jobs": [{ "description": "scan", "result_rows": 10, "host_combine_ns": 500_000,
                   "wall_ns": wall_ns.saturating_sub(1_000_000), "notes": {}, "disks": entries }]
    })
}

fn parse(v: &Value) -> trace::Trace {
    trace::parse("t.json", &v.to_string()).unwrap()
}

fn resolve(t: &trace::Trace, file: ReplayFile) -> ReplayConfig {
    file.resolve("test", &t.recorded).unwrap()
}

fn replay_with(t: &trace::Trace, file: ReplayFile) -> ReplayReport {
    let recorded = file == ReplayFile::default();
    replay(t, &resolve(t, file), recorded).unwrap()
}

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b as f64
}

#[test]
fn parse_errors_are_typed() {
    let err = |text: &str| trace::parse("t.json", text).unwrap_err();
    assert!(matches!(err("{not json"), SimError::TraceNotJson { .. }));
    assert!(matches!(err("[1, 2]"), SimError::TraceFormat { .. }));
    let mut v = trace_json(1, MS, 0, 0, 2 * MS);
    v["format"] = json!("other-trace");
    assert!(
        matches!(err(&v.to_string()), SimError::TraceFormat { found, .. } if found.contains("other-trace"))
    );
    v["format"] = json!("adisk-trace");
    v["version"] = json!(2);
    assert!(matches!(err(&v.to_string()), SimError::TraceVersion { found, .. } if found == "2"));
    v["version"] = json!(1);
    v["recorded"]["disks"] = json!(0);
    assert!(matches!(err(&v.to_string()), SimError::TraceNoDisks { .. }));
    v["recorded"]["disks"] = json!(1);
    v["jobs"][0]["disks"] = json!([]);
    let e = err(&v.to_string());
    assert!(matches!(e, SimError::TraceEmptyJob { job: 0, .. }), "{e}");
    assert!(e.to_string().contains("jobs[0].disks"), "{e}");
    v["jobs"][0]["disks"] = json!([{ "cpu_ns": "many" }]);
    assert!(matches!(err(&v.to_string()), SimError::TraceNotJson { .. }));
    v["jobs"][0]["disks"] = json!([{}]);
    v["recorded"]["host_link_bytes_per_s"] = json!(-1.0);
    assert!(
        matches!(err(&v.to_string()), SimError::TraceInvalid { key, .. } if key == "recorded.host_link_bytes_per_s")
    );
}

#[test]
fn unknown_fields_are_ignored_and_missing_numbers_are_zero() {
    let v = json!({
        "format": "adisk-trace", "version": 1, "future_field": [1, 2, 3],
        "recorded": { "disks": 2, "something_new": true },
        "jobs": [{ "disks": [{ "disk_id": 0, "extra": {} }, { "disk_id": 1, "cpu_ns": 5 }] }]
    });
    let t = parse(&v);
    assert_eq!(t.jobs[0].disks[0].cpu_ns, 0);
    assert_eq!(t.jobs[0].disks[1].cpu_ns, 5);
    assert_eq!(t.recorded.rtt_ns, 0);
    assert!(t.recorded.host_link_bytes_per_s.is_none());
}

#[test]
fn the_recorded_configuration_of_a_cpu_bound_trace_is_predicted_within_15_percent() {
    let t = parse(&trace_json(1, 400 * MS, 50_000_000, 4_000, 410 * MS));
    let r = replay_with(&t, ReplayFile::default());
    assert!(r.recorded_configuration);
    let e = r.error_percent.expect("measured beside predicted");
    assert!(e.abs() < 15.0, "error {e} %: {}", r.to_table());
    assert_eq!(r.jobs[0].bottleneck, "disk CPU");
    assert_eq!(r.measured_ns, Some(410 * MS));
    assert_eq!(r.jobs[0].measured_ns, Some(409 * MS));
}

#[test]
fn doubling_disks_halves_a_cpu_bound_job() {
    let t = parse(&trace_json(4, 400 * MS, 10_000_000, 4_000, 410 * MS));
    let base = replay_with(&t, ReplayFile::default());
    let more = replay_with(
        &t,
        ReplayFile {
            disks: Some(8),
            ..Default::default()
        },
    );
    assert!(!more.recorded_configuration && more.measured_ns.is_none());
    assert_eq!(more.jobs[0].replayed_disks, 8);
    let rtt = t.recorded.rtt_ns;
    let r = ratio(
        base.jobs[0].predicted_ns - rtt,
        more.jobs[0].predicted_ns - rtt,
    );
    assert!((r - 2.0).abs() < 0.1, "4 → 8 disks: ×{r}");
}

#[test]
fn halving_disk_cpu_speed_doubles_a_cpu_bound_job() {
    let t = parse(&trace_json(2, 300 * MS, 10_000_000, 4_000, 310 * MS));
    let base = replay_with(&t, ReplayFile::default());
    let slow = replay_with(
        &t,
        ReplayFile {
            disk_cpu_speed: Some(0.5),
            ..Default::default()
        },
    );
    let r = ratio(slow.predicted_ns, base.predicted_ns);
    assert!((r - 2.0).abs() < 0.1, "half speed: ×{r}");
    let cores = replay_with(
        &t,
        ReplayFile {
            disk_cpus: Some(2.0),
            ..Default::default()
        },
    );
    let r = ratio(base.predicted_ns, cores.predicted_ns);
    assert!((r - 2.0).abs() < 0.1, "two cores: ×{r}");
}

#[test]
fn a_link_bound_job_scales_with_the_link_rate() {
    let t = parse(&trace_json(2, 10 * MS, 1_000_000, 100_000_000, 8_100 * MS));
    let base = replay_with(&t, ReplayFile::default());
    assert_eq!(base.jobs[0].bottleneck, "host link");
    let e = base.error_percent.unwrap();
    assert!(e.abs() < 15.0, "recorded link-bound: {e} %");
    let fast = replay_with(
        &t,
        ReplayFile {
            host_link_bytes_per_s: Some(config::RateValue::BytesPerSecond(25e6)),
            ..Default::default()
        },
    );
    let r = ratio(base.predicted_ns, fast.predicted_ns);
    assert!((r - 2.0).abs() < 0.1, "double link rate: ×{r}");
    // A shared host NIC of one link's rate makes the two disks share it: twice as long.
    let nic = replay_with(
        &t,
        ReplayFile {
            host_nic_bytes_per_s: Some(config::RateValue::BytesPerSecond(12.5e6)),
            ..Default::default()
        },
    );
    assert_eq!(nic.jobs[0].bottleneck, "host NIC");
    let r = ratio(nic.predicted_ns, base.predicted_ns);
    assert!((r - 2.0).abs() < 0.1, "shared NIC: ×{r}");
}

#[test]
fn exchange_bytes_cross_the_disk_links() {
    let mut v = trace_json(2, 10 * MS, 1_000_000, 1_000, 1_000 * MS);
    v["recorded"]["disk_link_bytes_per_s"] = json!(10e6);
    for d in v["jobs"][0]["disks"].as_array_mut().unwrap() {
        d["bytes_shipped_disks"] = json!(50_000_000);
    }
    let t = parse(&v);
    let r = replay_with(&t, ReplayFile::default());
    assert_eq!(r.jobs[0].bottleneck, "disk links");
    assert!(
        (ratio(r.predicted_ns, 5_000 * MS) - 1.0).abs() < 0.05,
        "{}",
        r.to_table()
    );
}

#[test]
fn an_hdd_is_slower_than_an_ssd_on_a_read_heavy_trace() {
    let t = parse(&trace_json(2, 20 * MS, 2_000_000_000, 10_000, 100 * MS));
    let storage = |s| {
        replay_with(
            &t,
            ReplayFile {
                storage: Some(s),
                ..Default::default()
            },
        )
    };
    let hdd = storage(config::StorageKind::Hdd);
    let ssd = storage(config::StorageKind::Ssd);
    let recorded = storage(config::StorageKind::Recorded);
    assert!(
        hdd.predicted_ns > ssd.predicted_ns,
        "hdd {} ssd {}",
        hdd.predicted_ns,
        ssd.predicted_ns
    );
    assert!(ssd.predicted_ns > recorded.predicted_ns);
    assert_eq!(hdd.jobs[0].bottleneck, "storage");
    // 2 GB at 130-250 MB/s: 8 to 16 s.
    let secs = hdd.predicted_ns as f64 / 1e9;
    assert!((8.0..16.0).contains(&secs), "hdd {secs} s");
    // A read throttle on recorded storage limits like a device.
    let throttled = replay_with(
        &t,
        ReplayFile {
            disk_read_bytes_per_s: Some(config::RateValue::BytesPerSecond(100e6)),
            ..Default::default()
        },
    );
    assert!((ratio(throttled.predicted_ns, 20_000 * MS) - 1.0).abs() < 0.05);
}

#[test]
fn empty_traces_do_not_divide_by_zero() {
    let t = parse(&trace_json(3, 0, 0, 0, 1));
    for disks in [1, 3, 7] {
        for storage in [
            config::StorageKind::Recorded,
            config::StorageKind::Hdd,
            config::StorageKind::Ssd,
        ] {
            let r = replay_with(
                &t,
                ReplayFile {
                    disks: Some(disks),
                    storage: Some(storage),
                    ..Default::default()
                },
            );
            let json = r.to_json();
            assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
            assert!(r.predicted_ns >= t.recorded.rtt_ns);
        }
    }
    let no_jobs =
        parse(&json!({ "format": "adisk-trace", "version": 1, "recorded": { "disks": 1 } }));
    let r = replay_with(&no_jobs, ReplayFile::default());
    assert_eq!(r.predicted_ns, 0);
    assert!(r.error_percent.is_none());
    assert!(r.to_table().contains("total predicted"));
}

#[test]
fn same_trace_and_config_give_byte_identical_output() {
    let t = parse(&trace_json(3, 123 * MS, 77_777_777, 5_555_555, 200 * MS));
    let file = || ReplayFile {
        disks: Some(7),
        storage: Some(config::StorageKind::Hdd),
        ..Default::default()
    };
    let a = replay_with(&t, file());
    let b = replay_with(&t, file());
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.to_table(), b.to_table());
}

#[test]
fn config_files_parse_override_and_reject_bad_keys() {
    let text = r#"
disks = 16
disk_cpu_speed = 0.5
disk_cpus = 1
host_cpu_speed = 1.0
host_cpus = 2
host_link_bytes_per_s = 1.25e8
host_nic_bytes_per_s = "unlimited"
disk_link_bytes_per_s = 1e9
storage = "ssd"
rtt_ns = 50000
chunks_per_disk = 16
skew = "mean"
"#;
    let f = config::parse("c.toml", text).unwrap();
    let t = parse(&trace_json(4, MS, 0, 0, 2 * MS));
    let c = resolve(&t, f.clone());
    assert_eq!((c.disks, c.rtt_ns, c.chunks_per_disk), (16, 50_000, 16));
    assert_eq!(c.host_link_bytes_per_s, Some(1.25e8));
    assert!(c.host_nic_bytes_per_s.is_none());
    assert!(c.ssd.is_some() && c.hdd.is_none());
    let o = config::ReplayOverrides {
        disks: Some(8),
        ..Default::default()
    };
    assert_eq!(resolve(&t, f.with_overrides(&o)).disks, 8);
    let e = config::parse("c.toml", "disk = 3").unwrap_err();
    assert!(matches!(e, SimError::Config { .. }), "{e}");
    let bad = config::parse("c.toml", "host_link_bytes_per_s = -5.0").unwrap();
    let e = bad.resolve("c.toml", &t.recorded).unwrap_err();
    assert!(e.to_string().contains("host_link_bytes_per_s"), "{e}");
    let bad = config::parse("c.toml", "disks = 0").unwrap();
    assert!(bad.resolve("c.toml", &t.recorded).is_err());
    // Chunks are bounded per job: the default shrinks for very many disks, an explicit value is refused.
    let many = config::parse("c.toml", "disks = 100000").unwrap();
    assert_eq!(resolve(&t, many).chunks_per_disk, 10);
    let too_many = config::parse("c.toml", "disks = 100000\nchunks_per_disk = 32").unwrap();
    let e = too_many.resolve("c.toml", &t.recorded).unwrap_err();
    assert!(e.to_string().contains("chunks_per_disk"), "{e}");
    // Giving the recorded values explicitly is still the recorded configuration.
    let same = config::parse("c.toml", "disks = 4\nrtt_ns = 200000").unwrap();
    assert_eq!(resolve(&t, same), resolve(&t, ReplayFile::default()));
}

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: SimCommand,
}

fn q6() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/q6-trace.json")
}

fn cli(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let q6 = q6();
    let mut argv = vec!["sim", "replay", q6.to_str().unwrap()];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--out", out.to_str().unwrap()]);
    run(Args::try_parse_from(argv).unwrap().cmd).unwrap();
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn cli_replays_the_hand_written_q6_trace() {
    // tests/data/q6-trace.json is hand-written (see its `comment` field), not recorded.
    let table = cli(&[]);
    assert!(
        table.contains("the configuration the trace was recorded on"),
        "{table}"
    );
    assert!(table.contains("error"), "{table}");
    let json: Value = serde_json::from_str(&cli(&["--format", "json"])).unwrap();
    let e = json["error_percent"].as_f64().unwrap();
    assert!(e.abs() < 15.0, "q6 error {e} %");
    assert_eq!(json["jobs"][0]["bottleneck"], "disk CPU");
    assert_eq!(json["config"]["disks"], 4);
    // Sixteen disks at half the CPU speed on HDDs, from a config file plus a flag.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "disks = 8\ndisk_cpu_speed = 0.5\nstorage = \"hdd\"\n").unwrap();
    let what_if: Value = serde_json::from_str(&cli(&[
        "--config",
        cfg.to_str().unwrap(),
        "--disks",
        "16",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(what_if["config"]["disks"], 16);
    assert_eq!(what_if["recorded_configuration"], false);
    assert!(what_if["error_percent"].is_null());
    assert_eq!(what_if["jobs"][0]["replayed_disks"], 16);
    // Same inputs, byte-identical output.
    assert_eq!(
        cli(&["--disks", "9", "--storage", "ssd"]),
        cli(&["--disks", "9", "--storage", "ssd"])
    );
}

#[test]
fn cli_rejects_a_bad_format_and_a_missing_trace() {
    let args =
        Args::try_parse_from(["sim", "replay", q6().to_str().unwrap(), "--format", "csv"]).unwrap();
    assert!(matches!(run(args.cmd), Err(SimError::Usage(_))));
    let args = Args::try_parse_from(["sim", "replay", "/nonexistent/trace.json"]).unwrap();
    assert!(matches!(run(args.cmd), Err(SimError::Io { .. })));
    assert!(
        Args::try_parse_from(["sim", "replay", "t.json", "--host-link-bytes-per-s", "fast"])
            .is_err()
    );
    assert!(
        Args::try_parse_from([
            "sim",
            "replay",
            "t.json",
            "--host-link-bytes-per-s",
            "unlimited"
        ])
        .is_ok()
    );
}

/// A timed two-job trace on `disks` disks: each job `cpu_ns` per disk, started at
/// `starts[j]` and seen by the host for `walls[j]`; the request took `wall_ns`.
fn timed_two_jobs(
    disks: u32,
    cpu_ns: u64,
    starts: [u64; 2],
    walls: [u64; 2],
    wall_ns: u64,
) -> Value {
    let job = |j: usize| {
        let entries: Vec<Value> = (0..disks)
            .map(|i| {
                let mut d = disk(i, cpu_ns, 1_000_000, 4_000, 0);
                d["started_ns"] = json!(starts[j]);
                d["host_wall_ns"] = json!(walls[j]);
                d
            })
            .collect();
        json!({ "description": format!("scan {j}"), "disks": entries })
    };
    json!({
        "format": "adisk-trace", "version": 1, "what": "sql", "text": "select 2",
        "recorded": { "disks": disks, "host_cpus": 2, "disk_cpus": 1, "rtt_ns": 0 },
        "wall_ns": wall_ns, "host_ns": 0, "jobs": [job(0), job(1)]
    })
}

#[test]
fn jobs_that_overlapped_replay_side_by_side_and_the_host_gaps_are_kept() {
    // Both jobs from 1 ms, each 100 ms of CPU on its disks' own cores; 5 ms after them.
    let t = parse(&timed_two_jobs(
        2,
        100 * MS,
        [MS, MS],
        [100 * MS, 100 * MS],
        106 * MS,
    ));
    let r = replay_with(&t, ReplayFile::default());
    assert!(r.timed);
    assert!(r.jobs.iter().all(|j| j.after.is_empty()));
    assert_eq!(r.jobs[1].predicted_start_ns, MS);
    // Side by side on one core per disk: the two jobs share it, 200 ms of CPU in all.
    let e = r.error_percent.unwrap();
    assert_eq!(r.host_final_ns, 5 * MS);
    assert!(
        r.predicted_ns > 195 * MS && r.predicted_ns < 210 * MS,
        "{}",
        r.to_table()
    );
    assert!(
        e > 80.0,
        "the recording overlapped less than the model: {e}"
    );
    // The second job started 10 ms after the first ended: it waited for it.
    let t = parse(&timed_two_jobs(
        2,
        100 * MS,
        [MS, 111 * MS],
        [100 * MS, 100 * MS],
        212 * MS,
    ));
    let r = replay_with(&t, ReplayFile::default());
    assert_eq!(r.jobs[1].after, [0]);
    let second = r.jobs[1].predicted_start_ns;
    assert_eq!(
        second,
        r.jobs[0].predicted_start_ns + r.jobs[0].predicted_ns + 10 * MS
    );
    let e = r.error_percent.unwrap();
    assert!(e.abs() < 2.0, "error {e} %: {}", r.to_table());
    // A host twice as fast halves the gaps.
    let fast = replay_with(
        &t,
        ReplayFile {
            host_cpu_speed: Some(2.0),
            ..Default::default()
        },
    );
    assert_eq!(fast.jobs[1].predicted_start_ns, second - 5 * MS - MS / 2);
}

#[test]
fn disks_sharing_a_machine_share_its_cores() {
    // Four disks of 100 ms CPU each, one job.
    let mut v = timed_two_jobs(4, 100 * MS, [0, 0], [0, 0], 0);
    v["jobs"].as_array_mut().unwrap().truncate(1);
    v["recorded"]["shared_cpus"] = json!(4.0);
    let own = replay_with(&parse(&v), ReplayFile::default());
    v["recorded"]["shared_cpus"] = json!(2.0);
    let t = parse(&v);
    let shared = replay_with(&t, ReplayFile::default());
    let r = ratio(shared.predicted_ns, own.predicted_ns);
    assert!((r - 2.0).abs() < 0.05, "4 disks on 2 shared cores: ×{r}");
    // `--shared-cpus 0`: separate machines again.
    let apart = replay_with(
        &t,
        ReplayFile {
            shared_cpus: Some(0.0),
            ..Default::default()
        },
    );
    let r = ratio(apart.predicted_ns, own.predicted_ns);
    assert!((r - 1.0).abs() < 0.01, "separate machines: ×{r}");
    let bad = ReplayFile {
        shared_cpus: Some(-1.0),
        ..Default::default()
    };
    assert!(bad.resolve("t", &t.recorded).is_err());
}

#[test]
fn a_recording_at_an_emulated_speed_replays_its_slower_disks() {
    let mut v = trace_json(2, 200 * MS, 1_000_000, 4_000, 410 * MS);
    let full = replay_with(&parse(&v), ReplayFile::default());
    v["recorded"]["disk_cpu_speed"] = json!(0.5);
    let half = replay_with(&parse(&v), ReplayFile::default());
    let r = ratio(half.jobs[0].predicted_ns, full.jobs[0].predicted_ns);
    assert!((r - 2.0).abs() < 0.1, "disks at half speed: ×{r}");
    v["recorded"]["disk_cpu_speed"] = json!(1.5);
    let e = trace::parse("t.json", &v.to_string()).unwrap_err();
    assert!(e.to_string().contains("disk_cpu_speed"), "{e}");
}

#[test]
fn a_trace_with_too_many_jobs_is_refused() {
    let mut v = trace_json(1, MS, 1_000, 10, 2 * MS);
    let job = v["jobs"][0].clone();
    v["jobs"] = json!(vec![job; trace::MAX_JOBS + 1]);
    let e = trace::parse("t.json", &v.to_string()).unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
}

/// One disk of `cpu_ns` CPU over `wall_ns`, reading `bytes_read`, on a 2-core machine.
fn one_disk(cpu_ns: u64, wall_ns: u64, bytes_read: u64) -> Value {
    let mut v = trace_json(1, cpu_ns, bytes_read, 4_000, wall_ns + MS);
    v["recorded"]["disk_cpus"] = json!(2.0);
    v["jobs"][0]["disks"][0]["wall_ns"] = json!(wall_ns);
    v
}

#[test]
fn a_disk_runs_its_part_of_a_job_on_as_many_cores_as_it_kept_busy() {
    // 100 ms of CPU over 100 ms: one core, though the disk has two.
    let serial = replay_with(
        &parse(&one_disk(100 * MS, 100 * MS, 0)),
        ReplayFile::default(),
    );
    let r = ratio(serial.predicted_ns, 100 * MS);
    assert!((r - 1.0).abs() < 0.1, "one core busy: ×{r}");
    // The same CPU over 50 ms: both cores.
    let parallel = replay_with(
        &parse(&one_disk(100 * MS, 50 * MS, 0)),
        ReplayFile::default(),
    );
    let r = ratio(parallel.predicted_ns, 50 * MS);
    assert!((r - 1.0).abs() < 0.15, "two cores busy: ×{r}");
    // Given twice the cores, the one-core job uses two.
    let more = replay_with(
        &parse(&one_disk(100 * MS, 100 * MS, 0)),
        ReplayFile {
            disk_cpus: Some(4.0),
            ..Default::default()
        },
    );
    let r = ratio(serial.predicted_ns, more.predicted_ns);
    assert!((r - 2.0).abs() < 0.15, "twice the cores: ×{r}");
}

#[test]
fn reads_through_the_throttle_wait_for_decoding_and_its_bucket_passes_a_burst() {
    // 10 MB at 100 MB/s (100 ms) and 100 ms of decoding, one core: one after the other.
    let t = parse(&one_disk(100 * MS, 100 * MS, 10_000_000));
    let throttled = |burst_s: Option<f64>| {
        replay_with(
            &t,
            ReplayFile {
                disk_read_bytes_per_s: Some(config::RateValue::BytesPerSecond(1e8)),
                disk_read_burst_s: burst_s,
                ..Default::default()
            },
        )
    };
    let plain = throttled(None);
    let r = ratio(plain.predicted_ns, 200 * MS);
    assert!((r - 1.0).abs() < 0.1, "read then decode: ×{r}");
    // A bucket of 0.05 s lets 5 MB pass at once, and refills while a chunk decodes.
    let bucket = throttled(Some(0.05));
    assert!(
        bucket.predicted_ns < plain.predicted_ns - 40 * MS,
        "{} against {}",
        bucket.predicted_ns,
        plain.predicted_ns
    );
    let bad = ReplayFile {
        disk_read_burst_s: Some(-1.0),
        ..Default::default()
    };
    assert!(bad.resolve("t", &t.recorded).is_err());
}

#[test]
fn a_host_link_bucket_lets_its_burst_pass_at_once() {
    // 4 MB to the host through a 1 MB/s shared ingress: 4 s, or 3.5 s with half a second's
    // burst.
    let v = trace_json(1, MS, 0, 4_000_000, 5 * MS);
    let t = parse(&v);
    let at = |burst_s| {
        replay_with(
            &t,
            ReplayFile {
                host_link_bytes_per_s: Some(config::RateValue::Word("unlimited".into())),
                host_nic_bytes_per_s: Some(config::RateValue::BytesPerSecond(1e6)),
                host_nic_burst_s: Some(burst_s),
                ..Default::default()
            },
        )
        .predicted_ns as f64
            * 1e-9
    };
    let (plain, bucket) = (at(0.0), at(0.5));
    assert!((plain - 4.0).abs() < 0.1, "{plain} s");
    assert!((plain - bucket - 0.5).abs() < 0.05, "{bucket} s");
}

#[test]
fn an_emulated_slower_cpu_slows_only_the_jobs_steps() {
    // Each disk's process used 300 ms of CPU while its job's steps used 200 ms: 100 ms of
    // transport and runtime the runtime's emulation does not pause.
    let mut v = trace_json(2, 200 * MS, 1_000_000, 4_000, 310 * MS);
    for d in v["jobs"][0]["disks"].as_array_mut().unwrap() {
        d["process_cpu_ns"] = json!(300 * MS);
        d["wall_ns"] = json!(300 * MS);
    }
    let t = parse(&v);
    let base = replay_with(&t, ReplayFile::default());
    let at_half = |slows| {
        replay_with(
            &t,
            ReplayFile {
                disk_cpu_speed: Some(0.5),
                disk_cpu_slows: Some(slows),
                ..Default::default()
            },
        )
    };
    // A slower processor: all 300 ms take twice as long. The emulation: 2 × 200 + 100.
    let cpu = |r: &ReplayReport| r.jobs[0].predicted_ns;
    let processor = ratio(cpu(&at_half(config::CpuSlows::Processor)), cpu(&base));
    assert!(
        (processor - 2.0).abs() < 0.1,
        "processor at half speed: ×{processor}"
    );
    let steps = ratio(cpu(&at_half(config::CpuSlows::Steps)), cpu(&base));
    assert!(
        (steps - 5.0 / 3.0).abs() < 0.1,
        "steps at half speed: ×{steps}"
    );
    // Full speed is full speed either way.
    let same = replay_with(
        &t,
        ReplayFile {
            disk_cpu_slows: Some(config::CpuSlows::Steps),
            ..Default::default()
        },
    );
    assert_eq!(same.predicted_ns, base.predicted_ns);
    let parsed = config::parse("c.toml", "disk_cpu_slows = \"steps\"\n").unwrap();
    assert_eq!(parsed.disk_cpu_slows, Some(config::CpuSlows::Steps));
    assert!(config::parse("c.toml", "disk_cpu_slows = \"cores\"\n").is_err());
}
