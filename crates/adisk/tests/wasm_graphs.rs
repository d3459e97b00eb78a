//! WebAssembly disklets under ABI v2 in job graphs (issue 10), on an in-process disk over real
//! Flight sockets; the C SDK examples are built from source (sdk/c/build.sh: clang + wasm-ld)
//! and every result is checked row for row against a plain Rust computation:
//! * `merge2` merges two sorted tables (two inputs) = a stable sort of both (input 0 first on
//!   equal keys), as a job graph and through `adisk disklet run --table a --table b`'s path;
//! * `split` (two output ports) sends even keys to one port and odd keys to the other; through
//!   two temporary streams and `merge2` they come back as the original table;
//! * an ABI v1 module (`histogram`) runs unchanged next to them;
//! * stages wired with the wrong number of inputs or ports are refused before the disklet is
//!   instantiated, and a malformed v2 module is refused at install, both with typed errors.
use adisk_core::builder::JobBuilder;
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig};
use adisk_core::protocol::{DiskletSpec, JobSpec, Port, Sink, Source, StoredStream};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::disklet::{self, WasmRequest};
use adisk_host::{Cluster, HostError};
use adisk_storage::store::DiskStore;
use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use futures::StreamExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One row of the test tables: key, nullable value, text.
type Row = (i64, Option<i64>, String);

/// One disk node on 127.0.0.1 over `dir`, and a cluster client.
struct Disk {
    cluster: Arc<Cluster>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>,
}

impl Disk {
    async fn start(dir: &Path) -> Self {
        let os = DiskOsConfig::new(0, 64 << 20, 64 << 10, 2);
        let node = DiskNode::bind(DiskNodeConfig::local(dir.to_path_buf(), os))
            .await
            .unwrap();
        let disk = DiskConfig {
            id: 0,
            address: node.address().to_string(),
            dir: None,
            memory_mib: 64,
            buffer_kib: 64,
            buffers_per_stream: 2,
            read_mbps: 0,
            compression: Default::default(),
            pid: None,
            group: None,
            metrics_address: None,
            cpus: None,
            cpu_speed: None,
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(node.serve(async move {
            let _ = stop_rx.await;
        }));
        let config = ClusterConfig {
            cluster: ClusterSection {
                name: "t".into(),
                host_link_mbps: 0,
                exchange: Default::default(),
                key_file: None,
                disk_timeout_ms: adisk_core::config::DEFAULT_DISK_TIMEOUT_MS,
                router_mbps: 0,
                costs: None,
                tls: None,
            },
            disks: vec![disk],
            serve: None,
        };
        Disk {
            cluster: Arc::new(Cluster::connect(config).await.unwrap()),
            stop,
            server,
        }
    }

    async fn shut(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap().unwrap();
    }

    /// Runs one job; its output rows.
    async fn run(&self, spec: &JobSpec) -> Result<Vec<RecordBatch>, HostError> {
        let mut stream = self.cluster.start(0, spec).await?;
        let mut batches = Vec::new();
        while let Some(b) = stream.next().await {
            batches.push(b?);
        }
        Ok(batches)
    }

    /// Jobs that instantiated `name` (ran its init) since the disk started.
    async fn instances(&self, name: &str) -> u64 {
        let listed = disklet::list(&self.cluster).await.unwrap();
        listed[0]
            .1
            .iter()
            .find(|d| d.name == name)
            .map_or(0, |d| d.instances)
    }
}

/// Builds `sdk/c/examples/<example>.c` with sdk/c/build.sh.
fn build(example: &str, out_dir: &Path) -> Vec<u8> {
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk/c");
    let out = out_dir.join(format!("{example}.wasm"));
    let run = std::process::Command::new(sdk.join("build.sh"))
        .arg(sdk.join(format!("examples/{example}.c")))
        .arg(&out)
        .output()
        .expect("sdk/c/build.sh runs");
    assert!(
        run.status.success(),
        "building {example}.c failed (it needs clang and wasm-ld, see ./x setup):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read(out).unwrap()
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, false),
    ]))
}

/// `n` rows sorted on `k`, with repeated keys (so merges meet equal keys), some NULL values and
/// texts of varying length that say which table and row they come from.
fn rows(table: &str, seed: i64, n: usize) -> Vec<Row> {
    let mut keys: Vec<i64> = (0..n as i64)
        .map(|i| (i * 7919 + seed * 104_729) % (n as i64 / 3) - 50)
        .collect();
    keys.sort();
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| {
            (
                k,
                (i % 7 != 0).then_some(i as i64 * seed),
                format!("{table}{i}{}", "x".repeat(i % 13)),
            )
        })
        .collect()
}

fn batch(rows: &[Row]) -> RecordBatch {
    let k = Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
    let v = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
    let s = StringArray::from(rows.iter().map(|r| r.2.as_str()).collect::<Vec<_>>());
    RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(v), Arc::new(s)]).unwrap()
}

fn write_table(dir: &Path, name: &str, partition: u32, rows: &[Row]) {
    let store = DiskStore::open(dir, 0).unwrap();
    let mut w = store
        .create_partition(name, partition, schema(), 4096)
        .unwrap();
    w.write(&batch(rows)).unwrap();
    store.commit_partition(w).unwrap();
}

/// The rows of `batches` (columns k, v, s by name).
fn read_rows(batches: &[RecordBatch]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in batches {
        let (k, v, s) = (
            b.column_by_name("k").unwrap(),
            b.column_by_name("v").unwrap(),
            b.column_by_name("s").unwrap(),
        );
        let (k, v, s) = (
            k.as_primitive::<Int64Type>(),
            v.as_primitive::<Int64Type>(),
            s.as_string::<i32>(),
        );
        out.extend((0..b.num_rows()).map(|r| {
            (
                k.value(r),
                v.is_valid(r).then(|| v.value(r)),
                s.value(r).to_string(),
            )
        }));
    }
    out
}

/// The merge reference: a stable sort of `a` then `b` on the key.
fn merged(a: &[Row], b: &[Row]) -> Vec<Row> {
    let mut all = [a, b].concat();
    all.sort_by_key(|r| r.0);
    all
}

fn wasm(name: &str, params: &[(&str, &str)]) -> DiskletSpec {
    DiskletSpec::Wasm {
        name: name.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        fuel: None,
    }
}

fn table(name: &str) -> Source {
    Source::Table {
        table: name.into(),
        columns: vec![],
        prune: None,
        partitions: None,
    }
}

fn port(stage: u32, port: u32) -> Port {
    Port::Stage { stage, port }
}

/// A job of the given inputs, stages and outputs (to be built).
fn graph(
    id: &str,
    inputs: Vec<Source>,
    stages: Vec<(DiskletSpec, Vec<Port>)>,
    outputs: Vec<(Port, Sink)>,
) -> JobBuilder {
    let mut job = JobBuilder::new("wasm-graphs")
        .id(id)
        .program("wasm-graphs")
        .scratch_kib(8 * 1024);
    for source in inputs {
        job.input(source);
    }
    for (disklet, inputs) in stages {
        job.stage(disklet, inputs);
    }
    for (from, sink) in outputs {
        job.output(from, sink);
    }
    job
}

fn temp(name: &str) -> Sink {
    Sink::Store {
        stream: StoredStream::Temp { name: name.into() },
    }
}

/// Two sorted tables on one disk, and the examples installed there.
async fn setup(tmp: &Path) -> (Disk, Vec<Row>, Vec<Row>) {
    let a = rows("a", 3, 30_000);
    let b = rows("b", 5, 45_000);
    write_table(&tmp.join("disk"), "a", 0, &a);
    write_table(&tmp.join("disk"), "b", 1, &b);
    let disk = Disk::start(&tmp.join("disk")).await;
    for example in ["merge2", "split", "histogram"] {
        let info = disklet::install(&disk.cluster, example, build(example, tmp), 2048)
            .await
            .unwrap();
        let expected_abi = if example == "histogram" { 1 } else { 2 };
        assert_eq!(info[0].1.abi, expected_abi, "{example}");
    }
    (disk, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge2_of_two_sorted_tables_matches_a_sort_of_both() {
    let tmp = tempfile::tempdir().unwrap();
    let (disk, a, b) = setup(tmp.path()).await;
    let listed = disklet::list(&disk.cluster).await.unwrap();
    let info = listed[0].1.iter().find(|d| d.name == "merge2").unwrap();
    assert_eq!((info.abi, info.inputs, info.outputs), (2, 2, 1));
    let expected = merged(&a, &b);

    let job = graph(
        "merge2",
        vec![table("a"), table("b")],
        vec![(
            wasm("merge2", &[("key", "k")]),
            vec![Port::Input(0), Port::Input(1)],
        )],
        vec![(port(0, 0), Sink::Host)],
    )
    .build()
    .unwrap();
    let out = disk.run(&job).await.unwrap();
    assert_eq!(
        out[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>(),
        ["k", "v", "s"]
    );
    let got = read_rows(&out);
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "merge2 differs from the reference at row {:?}",
        got.iter().zip(&expected).position(|(g, e)| g != e)
    );
    let stats = disk.cluster.job_stats(0, "merge2").await.unwrap();
    assert_eq!(stats.stages[0].rows_in, (a.len() + b.len()) as u64);

    // The path of `adisk disklet run merge2 --table b --table a --param key=k`: b is input 0.
    let req = WasmRequest {
        name: "merge2".into(),
        params: [("key".to_string(), "k".to_string())].into_iter().collect(),
        ..Default::default()
    };
    let out = disklet::run_tables(
        &disk.cluster,
        &req,
        &[("b".into(), vec![]), ("a".into(), vec![])],
    )
    .await
    .unwrap();
    assert!(
        read_rows(&out.batches) == merged(&b, &a),
        "merge2 through run_tables differs from the reference"
    );
    disk.shut().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_ports_match_the_reference_and_merge_back_through_temp_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let (disk, a, _) = setup(tmp.path()).await;
    let (even, odd): (Vec<Row>, Vec<Row>) = a.iter().cloned().partition(|r| r.0 % 2 == 0);
    assert!(!even.is_empty() && !odd.is_empty());
    let split = || wasm("split", &[("key", "k")]);

    // Port 0 to the host, port 1 to a named result read by the next job.
    let odd_result = Sink::Store {
        stream: StoredStream::Result {
            name: "a_odd".into(),
            partition: 0,
        },
    };
    let job = graph(
        "split",
        vec![table("a")],
        vec![(split(), vec![Port::Input(0)])],
        vec![(port(0, 0), Sink::Host), (port(0, 1), odd_result)],
    )
    .build()
    .unwrap();
    assert!(
        read_rows(&disk.run(&job).await.unwrap()) == even,
        "port 0 carries the even keys in input order"
    );
    let read = graph(
        "read-odd",
        vec![table("a_odd")],
        vec![],
        vec![(Port::Input(0), Sink::Host)],
    )
    .build()
    .unwrap();
    assert!(
        read_rows(&disk.run(&read).await.unwrap()) == odd,
        "port 1 carries the odd keys in input order"
    );

    // split → two temporary streams → merge2: the table comes back as it was.
    let inputs = vec![
        table("a"),
        Source::Temp {
            name: "even".into(),
        },
        Source::Temp { name: "odd".into() },
    ];
    let stages = vec![
        (split(), vec![Port::Input(0)]),
        (
            wasm("merge2", &[("key", "k")]),
            vec![Port::Input(1), Port::Input(2)],
        ),
    ];
    let outputs = vec![
        (port(0, 0), temp("even")),
        (port(0, 1), temp("odd")),
        (port(1, 0), Sink::Host),
    ];
    let round_trip = graph("round-trip", inputs, stages, outputs)
        .temp_kib(64 * 1024)
        .build()
        .unwrap();
    assert!(
        read_rows(&disk.run(&round_trip).await.unwrap()) == merged(&even, &odd),
        "split then merge2"
    );
    assert_eq!(
        merged(&even, &odd),
        a,
        "the reference itself: a is sorted on k"
    );
    disk.shut().await;
}

/// The v1 histogram's reference: `bins` equal-width bins over [lo, hi).
fn histogram(rows: &[Row], bins: i64, lo: i64, hi: i64) -> Vec<(i64, i64)> {
    let mut counts = vec![0i64; bins as usize];
    for r in rows.iter().filter(|r| (lo..hi).contains(&r.0)) {
        counts[((r.0 - lo) * bins / (hi - lo)) as usize] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(b, c)| (b as i64, c))
        .collect()
}

fn refused(result: Result<Vec<RecordBatch>, HostError>, what: &str) -> String {
    match result {
        Err(HostError::Disk { code, message, .. }) if code == "InvalidArgument" => message,
        other => panic!(
            "{what}: expected an InvalidArgument refusal, got {:?}",
            other.map(|b| b.len())
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_runs_unchanged_and_wrong_shapes_are_refused_before_they_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (disk, a, _) = setup(tmp.path()).await;

    // ABI v1, unchanged, next to the v2 modules.
    let params = [
        ("column", "k"),
        ("bins", "8"),
        ("min", "-50"),
        ("max", "9000"),
    ];
    let job = graph(
        "hist",
        vec![table("a")],
        vec![(wasm("histogram", &params), vec![Port::Input(0)])],
        vec![(port(0, 0), Sink::Host)],
    )
    .build()
    .unwrap();
    let out = disk.run(&job).await.unwrap();
    let got: Vec<(i64, i64)> = out
        .iter()
        .flat_map(|b| {
            let (bin, count) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
            );
            (0..b.num_rows())
                .map(|r| (bin.value(r), count.value(r)))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(got, histogram(&a, 8, -50, 9000));

    // Wrong shapes: refused before admission, the module never instantiated.
    let before = (
        disk.instances("merge2").await,
        disk.instances("split").await,
        disk.instances("histogram").await,
    );
    let one_input = graph(
        "m1",
        vec![table("a")],
        vec![(wasm("merge2", &[("key", "k")]), vec![Port::Input(0)])],
        vec![(port(0, 0), Sink::Host)],
    )
    .build()
    .unwrap();
    let message = refused(disk.run(&one_input).await, "merge2 on one input");
    assert!(
        message.contains("takes 2 input(s)") && message.contains("wires 1 input(s)"),
        "{message}"
    );
    let one_port = graph(
        "s1",
        vec![table("a")],
        vec![(wasm("split", &[("key", "k")]), vec![Port::Input(0)])],
        vec![(port(0, 0), Sink::Host)],
    )
    .build()
    .unwrap();
    let message = refused(disk.run(&one_port).await, "split with one port read");
    assert!(
        message.contains("writes 2 output port(s)") && message.contains("reads 1 port(s)"),
        "{message}"
    );
    let v1_two = graph(
        "h2",
        vec![table("a"), table("b")],
        vec![(
            wasm("histogram", &params),
            vec![Port::Input(0), Port::Input(1)],
        )],
        vec![(port(0, 0), Sink::Host)],
    )
    .build()
    .unwrap();
    let message = refused(disk.run(&v1_two).await, "a v1 module on two inputs");
    assert!(
        message.contains("ABI v1") && message.contains("takes 1 input(s)"),
        "{message}"
    );
    let after = (
        disk.instances("merge2").await,
        disk.instances("split").await,
        disk.instances("histogram").await,
    );
    assert_eq!(
        before, after,
        "a refused stage was instantiated (its init ran)"
    );

    // A malformed v2 module (no adisk_next_input) is refused at install, typed, and not listed.
    let malformed = r#"(module (@custom "adisk_v2" "inputs=2 outputs=1")
      (import "adisk_v2" "emit" (func (param i32 i32 i32) (result i32)))
      (memory (export "memory") 16 16)
      (func (export "adisk_input_area") (param i32 i32) (result i32) (i32.const 65536))
      (func (export "adisk_init") (param i32 i32) (result i32) (i32.const 0))
      (func (export "adisk_process") (param i32 i32 i32 i64) (result i32) (i32.const 0))
      (func (export "adisk_input_ended") (param i32) (result i32) (i32.const 0))
      (func (export "adisk_finish") (result i32) (i32.const 0)))"#;
    match disklet::install(&disk.cluster, "broken", malformed.as_bytes().to_vec(), 1024).await {
        Err(HostError::Disk { code, message, .. }) => assert!(
            code == "InvalidArgument" && message.contains("adisk_next_input"),
            "{code}: {message}"
        ),
        other => panic!("a v2 module without adisk_next_input was installed: {other:?}"),
    }
    assert!(
        disklet::list(&disk.cluster).await.unwrap()[0]
            .1
            .iter()
            .all(|d| d.name != "broken")
    );
    disk.shut().await;
}
