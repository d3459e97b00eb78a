//! Fuzz targets (issue 12), run as property tests: whatever bytes arrive, nothing panics,
//! nothing is accepted that should not be, and a disk goes on answering.
//!
//! Targets: job tickets and specs (and the graph check), `cluster.toml`, credentials, the ADT1
//! layout and ABI v2 shape sections, WebAssembly modules at install, SQL text at every offload
//! level, Flight messages into a disk (tickets, actions, `DoPut` streams), and CSV and Parquet
//! files given to `load`. Inputs are seeded corpora (valid specs, configs, modules, the 22
//! TPC-H queries, valid files) mutated by flips, deletions, insertions and splices.
//!
//! CI runs each target for `PROPTEST_CASES` cases (default 32) from a fixed seed. By hand:
//! `ADISK_FUZZ_SECS=600 ADISK_FUZZ_SEED=7 cargo test -p adisk --release --test fuzz -- --nocapture`
//! runs each target in rounds until the time is up, printing the cases run; a failing case is
//! printed with its seed, and the same seed reproduces it.
use adisk_core::builder::JobBuilder;
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig};
use adisk_core::protocol::{DiskletSpec, JobSpec, Sink, Source};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::Cluster;
use adisk_host::load::{FileFormat, TpchLoad};
use adisk_host::sql::{Offload, SqlEngine, SqlOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `test` over `strategy` in rounds of `PROPTEST_CASES` cases until `ADISK_FUZZ_SECS`
/// have passed (one round by default), from seed `ADISK_FUZZ_SEED` (default 0).
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (secs, seed, cases) = (
        env("ADISK_FUZZ_SECS", 0),
        env("ADISK_FUZZ_SEED", 0),
        env("PROPTEST_CASES", 32) as u32,
    );
    let started = Instant::now();
    let mut round = 0u64;
    loop {
        let mut seed_bytes = [0u8; 32];
        seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
        seed_bytes[8..16].copy_from_slice(&round.to_le_bytes());
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new_with_rng(
            config,
            TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
        );
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("fuzz target {name} failed (ADISK_FUZZ_SEED={seed}, round {round}): {e}");
        }
        round += 1;
        if started.elapsed() >= Duration::from_secs(secs) {
            break;
        }
    }
    eprintln!(
        "fuzz target {name}: {} cases in {:.1} s, no failure",
        round * cases as u64,
        started.elapsed().as_secs_f64()
    );
}

/// One mutation: (kind, position, byte).
type Edit = (u8, usize, u8);

/// `corpus[pick]` with `edits` applied: flip a bit, delete a byte, insert a byte, duplicate a
/// slice, or cut the rest.
fn mutate(corpus: &[Vec<u8>], pick: usize, edits: &[Edit]) -> Vec<u8> {
    let mut v = corpus[pick % corpus.len()].clone();
    for &(kind, pos, byte) in edits {
        let at = if v.is_empty() { 0 } else { pos % v.len() };
        match kind % 5 {
            0 if !v.is_empty() => v[at] ^= 1 << (byte % 8),
            1 if !v.is_empty() => {
                v.remove(at);
            }
            2 => v.insert(at, byte),
            3 if !v.is_empty() => {
                let end = (at + byte as usize % 64).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
            4 => v.truncate(at.max(1)),
            _ => {}
        }
    }
    v
}

fn mutations() -> impl Strategy<Value = (usize, Vec<Edit>)> {
    (
        any::<usize>(),
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..8),
    )
}

fn spec_corpus() -> Vec<Vec<u8>> {
    let scan = |sink| {
        JobBuilder::chain(
            "test",
            Source::Table {
                table: "lineitem".into(),
                columns: vec!["l_quantity".into()],
                prune: None,
                partitions: None,
            },
            vec![DiskletSpec::Select {
                predicate: None,
                projection: vec![],
                limit: Some(10),
            }],
            sink,
        )
        .id("j")
        .program("p")
        .build()
        .unwrap()
    };
    vec![
        scan(Sink::Host).to_bytes(),
        scan(Sink::Exchange {
            exchange_id: "x".into(),
            targets: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            sender: 0,
            route: Default::default(),
            relay: None,
            target_relays: vec![],
        })
        .to_bytes(),
    ]
}

#[test]
fn job_specs_never_panic() {
    let corpus = spec_corpus();
    fuzz("job specs", mutations(), |(pick, edits)| {
        if let Ok(spec) = JobSpec::from_bytes(&mutate(&corpus, pick, &edits)) {
            let _ = adisk_core::graph::check(&spec);
        }
        Ok(())
    });
    fuzz(
        "job spec bytes",
        prop::collection::vec(any::<u8>(), 0..512),
        |bytes| {
            let _ = JobSpec::from_bytes(&bytes).map(|s| adisk_core::graph::check(&s));
            Ok(())
        },
    );
}

#[test]
fn cluster_toml_never_panics_and_what_parses_is_valid() {
    let text = "[cluster]\nname = \"c\"\nhost_link_mbps = 100\nexchange = \"via-host\"\ndisk_timeout_ms = 5000\n\n[[disk]]\nid = 0\naddress = \"127.0.0.1:7000\"\nmemory_mib = 64\nbuffer_kib = 256\nbuffers_per_stream = 2\n\n[[disk]]\nid = 1\naddress = \"127.0.0.1:7001\"\n";
    let corpus = vec![text.as_bytes().to_vec()];
    fuzz("cluster.toml", mutations(), |(pick, edits)| {
        let bytes = mutate(&corpus, pick, &edits);
        if let Ok(config) =
            ClusterConfig::parse(&String::from_utf8_lossy(&bytes), Path::new("fuzz.toml"))
        {
            prop_assert!(config.validate(Path::new("fuzz.toml")).is_ok());
        }
        Ok(())
    });
}

#[test]
fn credentials_never_panic_and_forgeries_are_refused() {
    let verifier = adisk_core::auth::Verifier::new(adisk_core::auth::ClusterKey::generate());
    let other = adisk_core::auth::ClusterKey::generate();
    let corpus: Vec<Vec<u8>> = (0..4).map(|_| other.header().into_bytes()).collect();
    fuzz("credentials", mutations(), |(pick, edits)| {
        let header = String::from_utf8_lossy(&mutate(&corpus, pick, &edits)).to_string();
        prop_assert!(
            verifier.verify(Some(&header)).is_err(),
            "accepted a token not made with the key: {header}"
        );
        Ok(())
    });
}

#[test]
fn adt1_layouts_shapes_and_modules_never_panic() {
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("f", DataType::Float64, true),
    ]));
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])),
            Arc::new(arrow::array::StringArray::from(vec![
                Some("x"),
                None,
                Some("yz"),
            ])),
            Arc::new(arrow::array::Float64Array::from(vec![1.5, f64::NAN, -0.0])),
        ],
    )
    .unwrap();
    let mut encoded = Vec::new();
    adisk_wasm::abi::encode(&batch, 0, 3, &mut encoded).unwrap();
    let layouts = vec![encoded];
    fuzz("ADT1 layout", mutations(), |(pick, edits)| {
        let _ = adisk_wasm::abi::decode(&mutate(&layouts, pick, &edits), &schema);
        Ok(())
    });
    fuzz(
        "ABI v2 shape and output spec",
        prop::collection::vec(any::<u8>(), 0..128),
        |bytes| {
            let _ = adisk_wasm::abi::parse_shape(&bytes);
            let _ = adisk_wasm::abi::parse_output_spec(&String::from_utf8_lossy(&bytes));
            Ok(())
        },
    );
    let module = wat::parse_str(
        r#"(module
  (import "adisk_v1" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 16 16)
  (func (export "adisk_input_area") (param i32) (result i32) (i32.const 65536))
  (func (export "adisk_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "adisk_process") (param i32 i32 i64) (result i32) (drop (call $emit (i32.const 0) (i32.const 8))) (i32.const 0))
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    let runtime = adisk_wasm::WasmRuntime::new(adisk_wasm::WasmLimits::new(64 << 10)).unwrap();
    let modules = vec![module];
    fuzz(
        "WebAssembly modules at install",
        mutations(),
        |(pick, edits)| {
            let _ = runtime.compile(&mutate(&modules, pick, &edits), 256);
            Ok(())
        },
    );
}

/// One in-process disk with the cluster's key (real Flight over a socket), and a client.
async fn one_disk(dir: &Path) -> (Arc<Cluster>, String, tokio::sync::oneshot::Sender<()>) {
    let key_path = dir.join("cluster.key");
    adisk_core::auth::ClusterKey::create(&key_path).unwrap();
    let auth = Arc::new(adisk_core::auth::Verifier::new(
        adisk_core::auth::ClusterKey::load(&key_path).unwrap(),
    ));
    let os = DiskOsConfig::new(0, 64 << 20, 64 << 10, 2);
    let node = DiskNode::bind(DiskNodeConfig {
        dir: dir.join("disk-0"),
        listen: "127.0.0.1:0".into(),
        os,
        auth: Some(auth),
        members: None,
        auto_repair: false,
        compression: Default::default(),
        tls: None,
    })
    .await
    .unwrap();
    let address = node.address().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(node.serve(async move {
        let _ = stopped.await;
    }));
    let config = ClusterConfig {
        cluster: ClusterSection {
            name: "fuzz".into(),
            host_link_mbps: 0,
            exchange: Default::default(),
            key_file: Some(key_path),
            disk_timeout_ms: 10_000,
            router_mbps: 0,
            costs: None,
            tls: None,
        },
        disks: vec![DiskConfig {
            id: 0,
            address: address.clone(),
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
        }],
        serve: None,
    };
    (
        Arc::new(Cluster::connect(config).await.unwrap()),
        address,
        stop,
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sql_text_never_panics_at_any_offload_level() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, _, _stop) = rt.block_on(one_disk(dir.path()));
    rt.block_on(adisk_host::load::load_tpch(
        &cluster,
        &TpchLoad {
            sf: 0.001,
            partitions_per_disk: 1,
            row_group_rows: 1 << 16,
            tables: vec![],
            replicas: 1,
            disks: vec![],
        },
        |_, _| {},
    ))
    .unwrap();
    let engines: Vec<SqlEngine> = Offload::ALL
        .iter()
        .map(|o| {
            rt.block_on(SqlEngine::new(
                cluster.clone(),
                SqlOptions {
                    offload: *o,
                    ..SqlOptions::default()
                },
            ))
            .unwrap()
        })
        .collect();
    let corpus: Vec<Vec<u8>> = (1..=22)
        .map(|q| adisk_host::sql::tpch::query(q).unwrap().as_bytes().to_vec())
        .collect();
    fuzz(
        "SQL text",
        (mutations(), 0..engines.len()),
        |((pick, edits), level)| {
            let sql = String::from_utf8_lossy(&mutate(&corpus, pick, &edits)).to_string();
            let _ = rt.block_on(engines[level].plan(&sql));
            Ok(())
        },
    );
}

#[test]
fn flight_messages_into_a_disk_never_panic_and_it_goes_on() {
    use arrow_flight::{Action, FlightClient, FlightData, FlightDescriptor, Ticket};
    use futures::TryStreamExt;
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, address, _stop) = rt.block_on(one_disk(dir.path()));
    let key = adisk_core::auth::ClusterKey::load(&dir.path().join("cluster.key")).unwrap();
    let client = || {
        let channel = rt
            .block_on(
                tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                    .unwrap()
                    .connect(),
            )
            .unwrap();
        let mut c = FlightClient::new(channel);
        c.add_header(adisk_core::auth::HEADER, &key.header())
            .unwrap();
        c
    };
    let corpus = spec_corpus();
    let actions = [
        "status",
        "catalog",
        "job_stats",
        "generate_tpch",
        "drop_table",
        "disklet_install",
        "disklet_list",
        "disklet_remove",
        "generate_images",
        "list_files",
        "load_commit",
        "load_abort",
        "nonsense",
    ];
    fuzz(
        "Flight messages",
        (
            mutations(),
            0..actions.len(),
            prop::collection::vec(any::<u8>(), 0..256),
        ),
        |((pick, edits), action, body)| {
            let spec = mutate(&corpus, pick, &edits);
            let mut c = client();
            rt.block_on(async {
                if let Ok(s) = c.do_get(Ticket::new(spec.clone())).await {
                    let _ = tokio::time::timeout(Duration::from_secs(5), s.try_collect::<Vec<_>>())
                        .await;
                }
            });
            // Shutdown would end the disk, which is not a fault: every other action, any body.
            let mut c = client();
            rt.block_on(async {
                if let Ok(s) = c
                    .do_action(Action::new(actions[action], body.clone()))
                    .await
                {
                    let _ = tokio::time::timeout(Duration::from_secs(5), s.try_collect::<Vec<_>>())
                        .await;
                }
            });
            let mut c = client();
            let data = FlightData {
                flight_descriptor: Some(FlightDescriptor::new_cmd(spec)),
                data_header: body.clone().into(),
                data_body: body.into(),
                ..Default::default()
            };
            rt.block_on(async {
                if let Ok(s) = c.do_put(futures::stream::iter(vec![Ok(data)])).await {
                    let _ = tokio::time::timeout(Duration::from_secs(5), s.try_collect::<Vec<_>>())
                        .await;
                }
            });
            Ok(())
        },
    );
    let status = rt.block_on(cluster.status());
    assert!(
        status.iter().all(|s| s.is_ok()),
        "the disk stopped answering: {status:?}"
    );
}

#[test]
fn files_given_to_load_never_panic() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, _, _stop) = rt.block_on(one_disk(dir.path()));
    let csv: String = std::iter::once("a,b,c\n".to_string())
        .chain((0..200).map(|i| format!("{i},name {i},{}.5\n", i * 3)))
        .collect();
    let parquet = {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("a", arrow::datatypes::DataType::Int64, false),
        ]));
        let batch = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::Int64Array::from_iter_values(0..500))],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        out
    };
    let corpora = [
        (FileFormat::Csv, vec![csv.into_bytes()], "csv"),
        (FileFormat::Parquet, vec![parquet], "parquet"),
    ];
    for (format, corpus, ext) in corpora {
        fuzz(
            &format!("{ext} files given to load"),
            mutations(),
            |(pick, edits)| {
                let path = dir.path().join(format!("input.{ext}"));
                std::fs::write(&path, mutate(&corpus, pick, &edits)).unwrap();
                let _ = rt.block_on(adisk_host::load::load_files(
                    &cluster,
                    "fuzzed",
                    format,
                    &[path],
                    adisk_storage::decluster::Decluster::RoundRobin,
                    |_| {},
                ));
                Ok(())
            },
        );
    }
    let status = rt.block_on(cluster.status());
    assert!(
        status.iter().all(|s| s.is_ok()),
        "the disk stopped answering: {status:?}"
    );
}
