//! Job graphs (issue 10), in-process disks over real Flight sockets on 127.0.0.1, each result
//! checked against a plain Rust computation over the same rows:
//! * two-input stages — a merge of sorted streams, a hash join's build and probe — on one disk
//!   and across four disks (inputs fed by hash exchanges);
//! * exchange by hash, by range and by broadcast across four disks, direct and via the host;
//! * a stage with several output ports, each written as a named result that the next job and
//!   SQL read;
//! * a temporary stream written and read back in one job, removed when it ends; a job past
//!   its temporary-space grant fails, typed, and leaves no file.
use adisk_core::builder::JobBuilder;
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig, ExchangeMode};
use adisk_core::protocol::{
    DiskletSpec, ExprBytes, JobSpec, Output, Port, Route, Sink, SortKey, Source, Stage,
    StoredStream,
};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::Cluster;
use adisk_storage::store::DiskStore;
use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::prelude::{Expr, col, lit};
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::sync::Arc;

type Server = tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>;

/// `n` disk nodes on 127.0.0.1 over the directories of `dirs`, and a cluster client.
struct Disks {
    cluster: Arc<Cluster>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    servers: Vec<Server>,
}

impl Disks {
    async fn start(dirs: &[std::path::PathBuf]) -> Self {
        let (mut configs, mut stops, mut servers) = (Vec::new(), Vec::new(), Vec::new());
        for (id, dir) in dirs.iter().enumerate() {
            let os = DiskOsConfig::new(id as u32, 64 << 20, 64 << 10, 2);
            let node = DiskNode::bind(DiskNodeConfig::local(dir.clone(), os))
                .await
                .unwrap();
            configs.push(DiskConfig {
                id: id as u32,
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
            });
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            servers.push(tokio::spawn(node.serve(async move {
                let _ = stop_rx.await;
            })));
            stops.push(stop_tx);
        }
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
            disks: configs,
            serve: None,
        };
        Disks {
            cluster: Arc::new(Cluster::connect(config).await.unwrap()),
            stops,
            servers,
        }
    }

    async fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        for s in self.servers {
            s.await.unwrap().unwrap();
        }
    }

    fn address(&self, d: usize) -> String {
        self.cluster.address(d as u32).to_string()
    }

    /// Runs one job per disk at once; every job's output rows, by disk.
    async fn run(
        &self,
        jobs: Vec<(usize, JobSpec)>,
    ) -> Result<BTreeMap<usize, Vec<RecordBatch>>, String> {
        let runs = jobs.into_iter().map(|(d, spec)| {
            let cluster = self.cluster.clone();
            async move {
                let mut stream = cluster
                    .start(d as u32, &spec)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut batches = Vec::new();
                while let Some(b) = stream.next().await {
                    batches.push(b.map_err(|e| e.to_string())?);
                }
                Ok::<_, String>((d, batches))
            }
        });
        let mut out: BTreeMap<usize, Vec<RecordBatch>> = BTreeMap::new();
        for r in futures::future::join_all(runs).await {
            let (d, b) = r?;
            out.entry(d).or_default().extend(b);
        }
        Ok(out)
    }
}

fn e(x: Expr) -> ExprBytes {
    ExprBytes(x.to_bytes().unwrap().to_vec())
}

fn schema(names: &[&str]) -> SchemaRef {
    Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, false))
            .collect::<Vec<_>>(),
    ))
}

/// Writes table `name` (Int64 columns) as partition `partition` of the disk in `dir`.
fn write_table(
    dir: &std::path::Path,
    disk: u32,
    name: &str,
    partition: u32,
    columns: &[(&str, Vec<i64>)],
) {
    let store = DiskStore::open(dir, disk).unwrap();
    let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
    let schema = schema(&names);
    let arrays = columns
        .iter()
        .map(|(_, v)| Arc::new(Int64Array::from(v.clone())) as arrow::array::ArrayRef)
        .collect();
    let mut w = store
        .create_partition(name, partition, schema.clone(), 4096)
        .unwrap();
    w.write(&RecordBatch::try_new(schema, arrays).unwrap())
        .unwrap();
    store.commit_partition(w).unwrap();
}

fn column(batches: &[RecordBatch], name: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            b.column(b.schema().index_of(name).unwrap())
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

fn table(name: &str) -> Source {
    Source::Table {
        table: name.into(),
        columns: vec![],
        prune: None,
        partitions: None,
    }
}

/// A job of the given inputs, stages and outputs (to be built).
fn graph(id: &str, inputs: Vec<Source>, stages: Vec<Stage>, outputs: Vec<Output>) -> JobBuilder {
    let mut job = JobBuilder::new("graphs")
        .id(id)
        .program("graphs")
        .scratch_kib(8 * 1024);
    for source in inputs {
        job.input(source);
    }
    for s in stages {
        job.stage(s.disklet, s.inputs);
    }
    for o in outputs {
        job.output(o.from, o.sink);
    }
    job
}

fn stage(disklet: DiskletSpec, inputs: &[Port]) -> Stage {
    Stage {
        disklet,
        inputs: inputs.to_vec(),
    }
}

fn output(from: Port, sink: Sink) -> Output {
    Output { from, sink }
}

const S0: Port = Port::Stage { stage: 0, port: 0 };

fn merge(key: &str) -> DiskletSpec {
    DiskletSpec::Merge {
        keys: vec![SortKey {
            expr: e(col(key)),
            descending: false,
            nulls_first: false,
        }],
    }
}

fn join(build: &str, probe: &str) -> DiskletSpec {
    DiskletSpec::HashJoin {
        build_keys: vec![e(col(build))],
        probe_keys: vec![e(col(probe))],
    }
}

/// A deterministic spread of values (no randomness source needed).
fn values(seed: i64, n: usize, modulo: i64) -> Vec<i64> {
    (0..n as i64)
        .map(|i| (i * 7919 + seed * 104_729) % modulo)
        .collect()
}

/// Join reference: every (k, v) pair with dim.k = fact.fk, as a nested loop does it.
fn nested_loop(dim: &[i64], fact: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = dim
        .iter()
        .flat_map(|k| {
            fact.iter()
                .filter(move |(fk, _)| fk == k)
                .map(move |(_, v)| (*k, *v))
        })
        .collect();
    out.sort();
    out
}

fn joined(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = column(batches, "k")
        .into_iter()
        .zip(column(batches, "v"))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_input_stages_on_one_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = values(1, 5000, 100_000);
    let mut b = values(2, 7000, 100_000);
    a.sort();
    b.sort();
    write_table(dir.path(), 0, "a", 0, &[("x", a.clone())]);
    write_table(dir.path(), 0, "b", 1, &[("x", b.clone())]);
    let dim: Vec<i64> = (0..500).collect();
    let fact: Vec<(i64, i64)> = values(3, 20_000, 800).into_iter().zip(0..).collect();
    write_table(dir.path(), 0, "dim", 2, &[("k", dim.clone())]);
    write_table(
        dir.path(),
        0,
        "fact",
        3,
        &[
            ("fk", fact.iter().map(|f| f.0).collect()),
            ("v", fact.iter().map(|f| f.1).collect()),
        ],
    );
    let disks = Disks::start(&[dir.path().to_path_buf()]).await;

    let merged = graph(
        "merge",
        vec![table("a"), table("b")],
        vec![stage(merge("x"), &[Port::Input(0), Port::Input(1)])],
        vec![output(S0, Sink::Host)],
    )
    .build()
    .unwrap();
    let out = disks.run(vec![(0, merged)]).await.unwrap();
    let mut expected = [a, b].concat();
    expected.sort();
    assert_eq!(
        column(&out[&0], "x"),
        expected,
        "merge of two sorted streams = sort of both"
    );

    let joined_job = graph(
        "join",
        vec![table("dim"), table("fact")],
        vec![stage(join("k", "fk"), &[Port::Input(0), Port::Input(1)])],
        vec![output(S0, Sink::Host)],
    )
    .build()
    .unwrap();
    let out = disks.run(vec![(0, joined_job)]).await.unwrap();
    assert_eq!(joined(&out[&0]), nested_loop(&dim, &fact));
    disks.stop().await;
}

/// Four disks; each holds part of `dim` and of `fact`. Senders repartition both by the join
/// key (hash exchange, disk to disk); each disk joins what it received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_join_across_disks_after_hash_exchange() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mut all_dim, mut all_fact) = (Vec::new(), Vec::new());
    for (d, dir) in dirs.iter().enumerate() {
        let dim: Vec<i64> = (0..300).map(|i| i * 4 + d as i64).collect();
        let fact: Vec<(i64, i64)> = values(d as i64, 5000, 1500)
            .into_iter()
            .zip((0..).map(|i| i * 10 + d as i64))
            .collect();
        write_table(dir.path(), d as u32, "dim", d as u32, &[("k", dim.clone())]);
        write_table(
            dir.path(),
            d as u32,
            "fact",
            d as u32,
            &[
                ("fk", fact.iter().map(|f| f.0).collect()),
                ("v", fact.iter().map(|f| f.1).collect()),
            ],
        );
        all_dim.extend(dim);
        all_fact.extend(fact);
    }
    let disks = Disks::start(
        &dirs
            .iter()
            .map(|d| d.path().to_path_buf())
            .collect::<Vec<_>>(),
    )
    .await;
    let targets: Vec<String> = (0..4).map(|d| disks.address(d)).collect();
    let send = |d: usize, name: &str, key: &str, exchange: &str| {
        let sink = Sink::Exchange {
            exchange_id: exchange.into(),
            targets: targets.clone(),
            sender: d as u32,
            route: Route::Hash {
                keys: vec![e(col(key))],
            },
            relay: None,
            target_relays: vec![],
        };
        (
            d,
            graph(
                &format!("send-{name}-{d}"),
                vec![table(name)],
                vec![],
                vec![output(Port::Input(0), sink)],
            )
            .build()
            .unwrap(),
        )
    };
    let pipe = |id: &str, names: &[&str]| Source::Pipe {
        exchange_id: id.into(),
        senders: 4,
        schema: schema(names).as_ref().clone(),
    };
    let mut jobs = Vec::new();
    for d in 0..4 {
        jobs.push(send(d, "dim", "k", "g-dim"));
        jobs.push(send(d, "fact", "fk", "g-fact"));
        let receive = graph(
            &format!("join-{d}"),
            vec![pipe("g-dim", &["k"]), pipe("g-fact", &["fk", "v"])],
            vec![stage(join("k", "fk"), &[Port::Input(0), Port::Input(1)])],
            vec![output(S0, Sink::Host)],
        )
        .build()
        .unwrap();
        jobs.push((d, receive));
    }
    let out = disks.run(jobs).await.unwrap();
    let everything: Vec<RecordBatch> = out.values().flatten().cloned().collect();
    assert_eq!(joined(&everything), nested_loop(&all_dim, &all_fact));
    // Each disk joined only keys that hash to it.
    for (d, batches) in &out {
        for k in column(batches, "k") {
            let h = adisk_core::hash::hash_i128(i128::from(k));
            assert_eq!(h % 4, *d as u64, "key {k} joined at disk {d}");
        }
    }
    disks.stop().await;
}

/// Rows of a four-disk table routed by hash, range and broadcast, straight between disks and
/// through the host's relay: every row lands where the route says, exactly once (broadcast:
/// once per disk), the two modes deliver the same rows to the same disks, and via the host
/// every byte the senders ship passes the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_by_hash_range_and_broadcast_direct_and_via_host() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut all = Vec::new();
    for (d, dir) in dirs.iter().enumerate() {
        let x = values(d as i64 + 10, 3000, 10_000);
        write_table(dir.path(), d as u32, "t", d as u32, &[("x", x.clone())]);
        all.extend(x);
    }
    all.sort();
    let disks = Disks::start(
        &dirs
            .iter()
            .map(|d| d.path().to_path_buf())
            .collect::<Vec<_>>(),
    )
    .await;
    let routes = [
        (
            "hash",
            Route::Hash {
                keys: vec![e(col("x"))],
            },
        ),
        (
            "range",
            Route::Range {
                key: e(col("x")),
                bounds: vec![e(lit(2500i64)), e(lit(5000i64)), e(lit(7500i64))],
            },
        ),
        ("broadcast", Route::Broadcast),
    ];
    for (name, route) in routes {
        let direct = exchange_rows(
            &disks,
            &format!("{name}-direct"),
            &route,
            ExchangeMode::Direct,
        )
        .await;
        check_routed(name, &direct, &all);
        let via_host = exchange_rows(
            &disks,
            &format!("{name}-via-host"),
            &route,
            ExchangeMode::ViaHost,
        )
        .await;
        assert_eq!(
            via_host, direct,
            "{name}: via the host, each disk receives what it receives directly"
        );
    }
    disks.stop().await;
}

/// Runs an exchange of table `t` over all four disks in `mode`: the rows each disk received
/// (sorted). Checks the bytes the senders shipped against what the relay forwarded.
async fn exchange_rows(
    disks: &Disks,
    id: &str,
    route: &Route,
    mode: ExchangeMode,
) -> BTreeMap<usize, Vec<i64>> {
    disks.cluster.set_exchange_mode(mode);
    let relayed_before = disks.cluster.relay_stats();
    let targets: Vec<String> = (0..4).map(|d| disks.address(d)).collect();
    let mut jobs = Vec::new();
    for d in 0..4 {
        let sink = Sink::Exchange {
            exchange_id: id.to_string(),
            targets: targets.clone(),
            sender: d as u32,
            route: route.clone(),
            relay: None,
            target_relays: vec![],
        };
        jobs.push((
            d,
            graph(
                &format!("{id}-send-{d}"),
                vec![table("t")],
                vec![],
                vec![output(Port::Input(0), sink)],
            )
            .build()
            .unwrap(),
        ));
        let receive = Source::Pipe {
            exchange_id: id.to_string(),
            senders: 4,
            schema: schema(&["x"]).as_ref().clone(),
        };
        jobs.push((
            d,
            graph(
                &format!("{id}-recv-{d}"),
                vec![receive],
                vec![],
                vec![output(Port::Input(0), Sink::Host)],
            )
            .build()
            .unwrap(),
        ));
    }
    let out = disks.run(jobs).await.unwrap();
    let mut shipped = 0;
    for d in 0..4 {
        shipped += disks
            .cluster
            .job_stats(d, &format!("{id}-send-{d}"))
            .await
            .unwrap()
            .bytes_shipped_disks;
    }
    let relayed = disks.cluster.relay_stats();
    let streams = 4 * 4; // senders × targets
    match mode {
        ExchangeMode::Direct => {
            assert_eq!(relayed, relayed_before, "{id}: nothing passes the relay")
        }
        ExchangeMode::ViaHost => {
            assert_eq!(
                relayed.bytes - relayed_before.bytes,
                shipped,
                "{id}: the relay forwarded every byte shipped"
            );
            assert_eq!(
                (
                    relayed.streams - relayed_before.streams,
                    relayed.streams_failed
                ),
                (streams, 0),
                "{id}: one stream per sender and target"
            );
        }
    }
    out.iter()
        .map(|(d, batches)| {
            let mut x = column(batches, "x");
            x.sort();
            (*d, x)
        })
        .collect()
}

/// Every row of `all` arrived where route `name` sends it, exactly once (broadcast: once per disk).
fn check_routed(name: &str, out: &BTreeMap<usize, Vec<i64>>, all: &[i64]) {
    for (d, got) in out {
        for x in got {
            let expected_disk = match name {
                "hash" => (adisk_core::hash::hash_i128(i128::from(*x)) % 4) as usize,
                "range" => [2500, 5000, 7500].iter().filter(|b| x > b).count(),
                _ => *d,
            };
            assert_eq!(expected_disk, *d, "{name}: {x} arrived at disk {d}");
        }
        if name == "broadcast" {
            assert_eq!(got, all, "broadcast: disk {d} has every row");
        }
    }
    if name != "broadcast" {
        let mut got: Vec<i64> = out.values().flatten().copied().collect();
        got.sort();
        assert_eq!(got, all, "{name}: every row exactly once");
    }
}

/// A `partition` stage's two output ports go to two named results; the next job reads one of
/// them like a table, and SQL reads both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_output_ports_to_named_results_read_by_jobs_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let x = values(5, 10_000, 1_000_000);
    write_table(dir.path(), 0, "t", 0, &[("x", x.clone())]);
    let disks = Disks::start(&[dir.path().to_path_buf()]).await;
    let split = DiskletSpec::Partition {
        keys: vec![e(col("x"))],
        partitions: 2,
    };
    let result = |name: &str| Sink::Store {
        stream: StoredStream::Result {
            name: name.into(),
            partition: 0,
        },
    };
    let job = graph(
        "split",
        vec![table("t")],
        vec![stage(split, &[Port::Input(0)])],
        vec![
            output(S0, result("t_even")),
            output(Port::Stage { stage: 0, port: 1 }, result("t_odd")),
        ],
    )
    .build()
    .unwrap();
    let out = disks.run(vec![(0, job)]).await.unwrap();
    assert!(
        out[&0].iter().all(|b| b.num_rows() == 0),
        "nothing goes to the host"
    );
    let read = |name: &str| {
        graph(
            &format!("read-{name}"),
            vec![table(name)],
            vec![],
            vec![output(Port::Input(0), Sink::Host)],
        )
        .build()
        .unwrap()
    };
    let even = column(
        &disks.run(vec![(0, read("t_even"))]).await.unwrap()[&0],
        "x",
    );
    let odd = column(&disks.run(vec![(0, read("t_odd"))]).await.unwrap()[&0], "x");
    assert!(
        even.iter()
            .all(|v| adisk_core::hash::hash_i128(i128::from(*v)) % 2 == 0)
    );
    assert!(
        odd.iter()
            .all(|v| adisk_core::hash::hash_i128(i128::from(*v)) % 2 == 1)
    );
    let mut both = [even.clone(), odd.clone()].concat();
    both.sort();
    let mut expected = x.clone();
    expected.sort();
    assert_eq!(both, expected);
    let engine = adisk_host::sql::SqlEngine::new(
        disks.cluster.clone(),
        adisk_host::sql::SqlOptions::default(),
    )
    .await
    .unwrap();
    let sql = engine
        .query("SELECT (SELECT count(*) FROM t_even) AS e, (SELECT count(*) FROM t_odd) AS o")
        .await
        .unwrap();
    let b = &sql.batches[0];
    assert_eq!(
        (
            b.column(0).as_primitive::<Int64Type>().value(0),
            b.column(1).as_primitive::<Int64Type>().value(0)
        ),
        (even.len() as i64, odd.len() as i64)
    );
    disks.stop().await;
}

fn spill_job(id: &str, temp_kib: u64) -> JobBuilder {
    let keep = DiskletSpec::Select {
        predicate: Some(e(col("x").gt_eq(lit(0i64)))),
        projection: vec![],
        limit: None,
    };
    let stages = vec![
        stage(keep.clone(), &[Port::Input(0)]),
        stage(keep, &[Port::Input(1)]),
    ];
    let outputs = vec![
        output(
            S0,
            Sink::Store {
                stream: StoredStream::Temp {
                    name: "spill".into(),
                },
            },
        ),
        output(Port::Stage { stage: 1, port: 0 }, Sink::Host),
    ];
    graph(
        id,
        vec![
            table("t"),
            Source::Temp {
                name: "spill".into(),
            },
        ],
        stages,
        outputs,
    )
    .temp_kib(temp_kib)
}

/// Every disk's grants and temporary files are released within 10 s (a job whose query
/// failed elsewhere is cancelled when its host stream closes, a moment later).
async fn temp_released(disks: &Disks) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let statuses: Vec<_> = disks
            .cluster
            .status()
            .await
            .into_iter()
            .map(|s| s.unwrap())
            .collect();
        let held: Vec<_> = statuses
            .iter()
            .map(|s| {
                (
                    s.temp_granted_bytes,
                    s.temp_files_bytes,
                    s.memory_granted_bytes,
                )
            })
            .filter(|h| *h != (0, 0, 0))
            .collect();
        if held.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "grants and temporary files released: {statuses:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_stream_written_read_back_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let x = values(9, 50_000, 1_000_000);
    write_table(dir.path(), 0, "t", 0, &[("x", x.clone())]);
    let disks = Disks::start(&[dir.path().to_path_buf()]).await;
    let out = disks
        .run(vec![(0, spill_job("spill", 64 * 1024).build().unwrap())])
        .await
        .unwrap();
    assert_eq!(column(&out[&0], "x"), x, "read back in the order written");
    let stats = disks.cluster.job_stats(0, "spill").await.unwrap();
    assert_eq!(
        stats.rows_read,
        2 * x.len() as u64,
        "the table once, then the temporary stream"
    );
    temp_released(&disks).await;
    // Past its temporary-space grant (16 KiB for 400 KB of rows): a typed error, no file left.
    let err = disks
        .run(vec![(0, spill_job("too-small", 16).build().unwrap())])
        .await
        .unwrap_err();
    assert!(err.contains("temporary space exceeded"), "{err}");
    temp_released(&disks).await;
    assert!(
        !dir.path()
            .join("tmp")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "no file under tmp/"
    );
    disks.stop().await;
}

/// `adisk run sort` with `scratch` and `temp` KiB over table `t` on every disk.
async fn run_sort(
    disks: &Disks,
    scratch_kib: u64,
    temp_kib: u64,
) -> adisk_host::Result<adisk_host::JobOutput> {
    let params = [("order_by".to_string(), "x DESC".to_string())]
        .into_iter()
        .collect();
    let req = adisk_host::JobRequest {
        disklet: "sort".into(),
        table: "t".into(),
        params,
        scratch_kib,
        temp_kib,
        ..Default::default()
    };
    adisk_host::run::run(&disks.cluster, &req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_past_its_scratch_spills_runs_within_its_temp_grant_and_merges_them() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut all = Vec::new();
    for (d, dir) in dirs.iter().enumerate() {
        let x = values(d as i64 + 1, 150_000, 1 << 40);
        write_table(dir.path(), d as u32, "t", d as u32, &[("x", x.clone())]);
        all.extend(x);
    }
    let disks = Disks::start(
        &dirs
            .iter()
            .map(|d| d.path().to_path_buf())
            .collect::<Vec<_>>(),
    )
    .await;
    all.sort_unstable_by(|a, b| b.cmp(a));
    // 1.2 MB of keys per disk through 256 KiB of scratch: sorted runs spill and merge back.
    let out = run_sort(&disks, 256, 16 * 1024).await.unwrap();
    assert_eq!(
        column(&out.batches, "x"),
        all,
        "the disks' sorted streams, merged"
    );
    let sorts: Vec<_> = out
        .stats
        .disks
        .iter()
        .flat_map(|d| d.stages.iter())
        .filter(|s| s.disklet == "sql_sort")
        .collect();
    assert_eq!(sorts.len(), 2, "one sort per disk: {:?}", out.stats.disks);
    assert!(
        sorts
            .iter()
            .all(|s| s.spilled_bytes > 0 && s.scratch_peak_bytes <= s.scratch_granted_bytes),
        "spilled within scratch: {sorts:?}"
    );
    temp_released(&disks).await;
    // Too little temporary space, or none: a typed error, and nothing left behind.
    for temp_kib in [64, 0] {
        let err = run_sort(&disks, 256, temp_kib)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("esources exhausted") || err.contains("disk space"),
            "temp {temp_kib} KiB: {err}"
        );
        temp_released(&disks).await;
        for dir in &dirs {
            let left: Vec<_> = walk(&dir.path().join("tmp"));
            assert!(
                left.is_empty(),
                "temp {temp_kib} KiB: left under tmp/: {left:?}"
            );
        }
    }
    disks.stop().await;
}

/// Every path under `dir` (none if it does not exist).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .flatten()
        .flat_map(|e| std::iter::once(e.path()).chain(walk(&e.path())))
        .collect()
}

/// A sender whose stage fails part-way (a division by zero at row 15 000 of 20 000, after
/// three buffers went out) never ends its pipe streams as finished: every receiver fails,
/// naming the sender and its reason, instead of answering with the rows that came before
/// (issue 33's undercount: before, a failed stage closed its pipes as if it had finished). Straight to the disks and through the host's relay, one target routed to
/// itself and one to the other disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_failing_part_way_fails_its_receivers_instead_of_ending_their_streams() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    write_table(dirs[0].path(), 0, "t", 0, &[("x", (0..20_000).collect())]);
    write_table(dirs[1].path(), 1, "t", 1, &[("x", vec![])]);
    let disks = Disks::start(&[dirs[0].path().to_path_buf(), dirs[1].path().to_path_buf()]).await;
    let targets: Vec<String> = (0..2).map(|d| disks.address(d)).collect();
    for (i, mode) in [ExchangeMode::Direct, ExchangeMode::ViaHost]
        .into_iter()
        .enumerate()
    {
        disks.cluster.set_exchange_mode(mode);
        let id = format!("cut-{i}");
        let sink = Sink::Exchange {
            exchange_id: id.clone(),
            targets: targets.clone(),
            sender: 0,
            route: Route::Hash {
                keys: vec![e(col("x"))],
            },
            relay: None,
            target_relays: vec![],
        };
        // x / (x - 15000) divides by zero at x = 15000 only.
        let failing = DiskletSpec::Select {
            predicate: Some(e(
                (col("x") / (col("x") - lit(15_000i64))).gt_eq(lit(-100i64))
            )),
            projection: vec![],
            limit: None,
        };
        let send = graph(
            &format!("{id}-send"),
            vec![table("t")],
            vec![stage(failing, &[Port::Input(0)])],
            vec![output(S0, sink)],
        )
        .build()
        .unwrap();
        let receive = |d: usize| {
            let pipe = Source::Pipe {
                exchange_id: id.clone(),
                senders: 1,
                schema: schema(&["x"]).as_ref().clone(),
            };
            let spec = graph(
                &format!("{id}-recv-{d}"),
                vec![pipe],
                vec![],
                vec![output(Port::Input(0), Sink::Host)],
            )
            .build()
            .unwrap();
            (d, spec)
        };
        let runs = [(0, send), receive(0), receive(1)].map(|(d, spec)| {
            let cluster = disks.cluster.clone();
            async move {
                let mut stream = cluster
                    .start(d as u32, &spec)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut rows = 0;
                while let Some(b) = stream.next().await {
                    rows += b.map_err(|e| e.to_string())?.num_rows();
                }
                Ok::<usize, String>(rows)
            }
        });
        let outcomes = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            futures::future::join_all(runs),
        )
        .await
        .expect("no hang");
        let sender = outcomes[0].as_ref().expect_err("the sender fails");
        assert!(sender.contains("ivide by zero"), "{mode:?}: {sender}");
        for (d, receiver) in outcomes[1..].iter().enumerate() {
            match receiver {
                Ok(rows) => {
                    panic!("{mode:?}: disk {d} took {rows} rows of a failed sender for all of them")
                }
                // Named, with the sender's own reason, not taken for a lost link.
                Err(why) => assert!(
                    why.contains("sender 0 (disk 0) failed")
                        && why.contains("ivide by zero")
                        && !why.contains("link"),
                    "{mode:?}: disk {d}: {why}"
                ),
            }
        }
    }
    disks.stop().await;
}

/// A pipe stream that ends without its end mark (as when a link is cut and the call closed
/// cleanly, or a relay gave up on its sender) is a lost link: the receiving job fails
/// Unavailable-class, naming the sending disk, and never counts the sender as finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_stream_ending_without_its_mark_is_a_lost_link_naming_the_sender() {
    use arrow_flight::encode::FlightDataEncoderBuilder;
    let dir = tempfile::tempdir().unwrap();
    let disks = Disks::start(&[dir.path().to_path_buf()]).await;
    let receive = graph(
        "unmarked-recv",
        vec![Source::Pipe {
            exchange_id: "unmarked".into(),
            senders: 1,
            schema: schema(&["x"]).as_ref().clone(),
        }],
        vec![],
        vec![output(Port::Input(0), Sink::Host)],
    )
    .build()
    .unwrap();
    let receiving = {
        let cluster = disks.cluster.clone();
        tokio::spawn(async move {
            let mut stream = cluster.start(0, &receive).await?;
            let mut rows = 0;
            while let Some(b) = stream.next().await {
                rows += b?.num_rows();
            }
            Ok::<usize, adisk_host::HostError>(rows)
        })
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", disks.address(0)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = arrow_flight::FlightClient::new(channel);
    let command = adisk_core::protocol::PutCommand::Exchange {
        exchange_id: "unmarked".into(),
        sender: 0,
        from: Some(7),
    };
    let batch = RecordBatch::try_new(
        schema(&["x"]),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    let data = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(arrow_flight::FlightDescriptor::new_cmd(
            serde_json::to_vec(&command).unwrap(),
        )))
        .build(futures::stream::iter([Ok(batch)]));
    let refused = match client.do_put(data).await {
        Ok(results) => results.collect::<Vec<_>>().await.iter().any(Result::is_err),
        Err(_) => true,
    };
    assert!(refused, "the disk refuses the stream");
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), receiving)
        .await
        .expect("no hang")
        .unwrap();
    match got {
        Ok(rows) => panic!("{rows} rows of an unfinished stream taken for all of them"),
        Err(adisk_host::HostError::Disk { code, message, .. }) => {
            assert_eq!(code, "Unavailable", "{message}");
            assert!(
                message.starts_with(adisk_core::protocol::LINK_FAILED)
                    && message.contains("sender 0 (disk 7)")
                    && message.contains("end mark"),
                "{message}"
            );
        }
        Err(other) => panic!("not a lost link: {other}"),
    }
    disks.stop().await;
}
