//! Inputs that cannot kill a process (issue 12), in-process over real Flight sockets:
//! * a `DoGet` ticket whose select predicate is a flat `+` list of 20 000 operands (decoded
//!   into a left-deep tree 20 000 levels deep) is refused by the disk with a typed error naming
//!   `MAX_EXPR_DEPTH`, and the same disk then answers a normal query;
//! * SQL whose `WHERE` is a 2 000-term `+` chain is refused by the host with a typed error
//!   naming `MAX_SQL_EXPR_DEPTH` before DataFusion plans it.
use adisk_core::builder::JobBuilder;
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig};
use adisk_core::protocol::{DiskletSpec, ExprBytes, Sink, Source};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::sql::{SqlEngine, SqlOptions};
use adisk_host::{Cluster, HostError};
use adisk_storage::store::DiskStore;
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::{Expr, col, lit};
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use std::sync::Arc;

const ROWS: i64 = 1000;

/// One disk serving table `t(x)` with `x` = 0..1000, and a cluster client for it.
async fn one_disk(
    dir: &std::path::Path,
) -> (
    Arc<Cluster>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>,
) {
    {
        let store = DiskStore::open(dir, 0).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut w = store
            .create_partition("t", 0, schema.clone(), 4096)
            .unwrap();
        w.write(
            &RecordBatch::try_new(
                schema,
                vec![Arc::new(Int64Array::from_iter_values(0..ROWS))],
            )
            .unwrap(),
        )
        .unwrap();
        store.commit_partition(w).unwrap();
    }
    let node = DiskNode::bind(DiskNodeConfig::local(
        dir.to_path_buf(),
        DiskOsConfig::new(0, 64 << 20, 64 << 10, 2),
    ))
    .await
    .unwrap();
    let address = node.address().to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
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
        disks: vec![DiskConfig {
            id: 0,
            address,
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
        stop_tx,
        server,
    )
}

/// `x + x + … + x` with `terms` operands, as shipped bytes. datafusion-proto writes a chain
/// of one operator as one flat operand list, so the bytes are small and shallow; the tree
/// they decode into is `terms - 1` levels deep.
fn deep_sum_bytes(terms: usize) -> ExprBytes {
    let predicate = (1..terms)
        .fold(col("x"), |acc, _| acc + col("x"))
        .gt_eq(lit(0i64));
    let bytes = predicate.to_bytes().unwrap().to_vec();
    // Dropping (or cloning) the tree would recurse once per level on this test's thread:
    // leak it instead.
    std::mem::forget(predicate);
    ExprBytes(bytes)
}

async fn run(cluster: &Cluster, predicate: ExprBytes) -> Result<u64, HostError> {
    let spec = JobBuilder::chain(
        "test",
        Source::Table {
            table: "t".into(),
            columns: vec!["x".into()],
            prune: None,
            partitions: None,
        },
        vec![DiskletSpec::Select {
            predicate: Some(predicate),
            projection: vec![],
            limit: None,
        }],
        Sink::Host,
    )
    .id("limits-test")
    .program("test")
    .build()
    .unwrap();
    let mut stream = cluster.start(0, &spec).await?;
    let mut rows = 0;
    while let Some(b) = stream.next().await {
        rows += b?.num_rows() as u64;
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_shipped_expression_is_refused_and_the_disk_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, stop, server) = one_disk(dir.path()).await;
    let err = run(&cluster, deep_sum_bytes(20_000)).await.unwrap_err();
    match &err {
        HostError::Disk {
            disk: 0,
            code,
            message,
        } => {
            assert_eq!(code, "InvalidArgument", "{err}");
            assert!(message.contains("MAX_EXPR_DEPTH"), "{err}");
        }
        other => panic!("expected the disk to refuse the expression, got {other}"),
    }
    // The same disk answers a normal query afterwards.
    let normal: Expr = (col("x") % lit(10i64)).eq(lit(3i64));
    assert_eq!(
        run(&cluster, ExprBytes(normal.to_bytes().unwrap().to_vec()))
            .await
            .unwrap(),
        (ROWS / 10) as u64
    );
    // A chain just within the limit still runs.
    let within = adisk_core::limits::MAX_EXPR_DEPTH - 2;
    assert_eq!(
        run(&cluster, deep_sum_bytes(within)).await.unwrap(),
        ROWS as u64
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_sql_is_refused_before_planning() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, stop, server) = one_disk(dir.path()).await;
    let engine = SqlEngine::new(cluster.clone(), SqlOptions::default())
        .await
        .unwrap();
    let terms = vec!["x"; 2000].join(" + ");
    let err = engine
        .query(&format!("select count(*) from t where {terms} > 0"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HostError::Limit(l) if l.limit == "MAX_SQL_EXPR_DEPTH"),
        "{err}"
    );
    // Long SQL text is refused too, before it is parsed.
    let huge = format!(
        "select count(*) from t where x in ({})",
        vec!["1"; 600_000].join(",")
    );
    let err = engine.query(&huge).await.unwrap_err();
    assert!(
        matches!(&err, HostError::Limit(l) if l.limit == "MAX_SQL_BYTES"),
        "{err}"
    );
    // A chain just within the limit is planned, shipped and evaluated (type coercion and
    // the disks' planning add levels of their own).
    let within = vec!["x"; adisk_core::limits::MAX_SQL_EXPR_DEPTH - 1].join(" + ");
    let out = engine
        .query(&format!("select count(*) from t where {within} >= 0"))
        .await
        .unwrap();
    assert_eq!(out.rows(), 1);
    // Ordinary SQL still runs.
    let out = engine
        .query("select count(*) from t where x + x + x > 2997")
        .await
        .unwrap();
    assert_eq!(out.rows(), 1);
    drop(engine);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
