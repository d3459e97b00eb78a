//! In-process: a disk node on 127.0.0.1, a host-resident input stream over DoExchange, checked
//! against a plain Rust filter of the same rows.
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig};
use adisk_core::protocol::{DiskletSpec, ExprBytes, JobSpec, Sink, Source};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::Cluster;
use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::prelude::{col, lit};
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use std::sync::Arc;

/// A disk node serving `dir` on 127.0.0.1 and a cluster client for it; send on the returned
/// channel (or drop it) to stop the node, then await the handle.
async fn one_disk(dir: &std::path::Path, os: DiskOsConfig) -> (Cluster, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>) {
    let (memory_mib, buffer_kib, buffers_per_stream) = (os.memory_bytes >> 20, os.buffer_bytes >> 10, os.buffers_per_stream);
    let node = DiskNode::bind(DiskNodeConfig { dir: dir.to_path_buf(), listen: "127.0.0.1:0".into(), os }).await.unwrap();
    let address = node.address().to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(node.serve(async move {
        let _ = stop_rx.await;
    }));
    let config = ClusterConfig {
        cluster: ClusterSection { name: "t".into(), host_link_mbps: 0 },
        disks: vec![DiskConfig { id: 0, address, dir: None, memory_mib, buffer_kib, buffers_per_stream, read_mbps: 0, pid: None }],
    };
    (Cluster::connect(config).await.unwrap(), stop_tx, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resident_stream_through_a_disklet() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, stop_tx, server) = one_disk(dir.path(), DiskOsConfig::new(0, 16 << 20, 64 << 10, 2)).await;
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batches: Vec<RecordBatch> = (0..20).map(|i| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(i * 1000..(i + 1) * 1000))]).unwrap()).collect();
    let predicate = ExprBytes(((col("x") % lit(7i64)).eq(lit(3i64))).to_bytes().unwrap().to_vec());
    let spec = JobSpec::chain("host-stream-test", "test", Source::Host { schema: schema.as_ref().clone() }, vec![DiskletSpec::Select { predicate: Some(predicate), projection: vec![], limit: None }], Sink::Host);
    let input = futures::stream::iter(batches.clone()).boxed();
    let mut out = cluster.exchange(0, &spec, schema.clone(), input).await.unwrap();
    let mut got: Vec<i64> = Vec::new();
    while let Some(b) = out.next().await {
        got.extend(b.unwrap().column(0).as_primitive::<Int64Type>().values().iter().copied());
    }
    let expected: Vec<i64> = (0..20_000).filter(|x| x % 7 == 3).collect();
    assert_eq!(got, expected);
    let stats = cluster.job_stats(0, "host-stream-test").await.unwrap();
    assert_eq!(stats.rows_read, 20_000);
    assert_eq!(stats.rows_shipped, expected.len() as u64);
    assert!(stats.bytes_shipped_host > 0);
    // A job naming an unknown table is refused with a typed error, and the disk goes on serving.
    let bad = JobSpec::chain("bad", "test", Source::Table { table: "nosuch".into(), columns: vec![], prune: None }, vec![], Sink::Host);
    let err = match cluster.start(0, &bad).await {
        Err(e) => e.to_string(),
        Ok(mut s) => s.next().await.unwrap().unwrap_err().to_string(),
    };
    assert!(err.contains("unknown table"), "{err}");
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// Two host programs at once on a disk with one compute slot: a short job submitted while a
/// long one runs finishes first, because DiskOS hands out compute slots buffer by buffer
/// (first come, first served) instead of running jobs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_share_the_disk() {
    use adisk_core::protocol::{AggregateMode, NamedExpr};
    use adisk_storage::store::DiskStore;
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    {
        let store = DiskStore::open(dir.path(), 0).unwrap();
        for (table, rows) in [("big", 4_000_000i64), ("small", 1000)] {
            let mut w = store.create_partition(table, 0, schema.clone(), 65_536).unwrap();
            let mut start = 0;
            while start < rows {
                let end = (start + 65_536).min(rows);
                w.write(&RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(start..end))]).unwrap()).unwrap();
                start = end;
            }
            store.commit_partition(w).unwrap();
        }
    }
    let mut os = DiskOsConfig::new(0, 64 << 20, 64 << 10, 2);
    os.compute_slots = 1;
    let (cluster, stop_tx, server) = one_disk(dir.path(), os).await;
    let cluster = Arc::new(cluster);
    let e = |x: datafusion::prelude::Expr| ExprBytes(x.to_bytes().unwrap().to_vec());
    let long = JobSpec { scratch_kib: 8 * 1024, ..JobSpec::chain("long", "program-a", Source::Table { table: "big".into(), columns: vec![], prune: None }, vec![DiskletSpec::Aggregate {
            group_by: vec![NamedExpr { name: "g".into(), expr: e(col("x") % lit(100_000i64)) }],
            aggregates: vec![NamedExpr { name: "s".into(), expr: e(datafusion::functions_aggregate::expr_fn::sum(col("x") * col("x"))) }],
            mode: AggregateMode::Partial,
            raw_input: None,
        }], Sink::Host) };
    let short = JobSpec::chain("short", "program-b", Source::Table { table: "small".into(), columns: vec![], prune: None }, vec![DiskletSpec::Select { predicate: Some(e(col("x").lt(lit(10i64)))), projection: vec![], limit: None }], Sink::Host);
    let drain = |cluster: Arc<Cluster>, spec: JobSpec| async move {
        let mut s = cluster.start(0, &spec).await.unwrap();
        let mut rows = 0;
        while let Some(b) = s.next().await {
            rows += b.unwrap().num_rows();
        }
        (rows, std::time::Instant::now())
    };
    let long_task = tokio::spawn(drain(cluster.clone(), long));
    // Let the long job get going, then submit the short one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cluster.job_stats(0, "long").await.is_ok_and(|s| s.rows_read > 0) {
        assert!(std::time::Instant::now() < deadline, "the long job read no rows within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!long_task.is_finished(), "the long job finished before the short one was submitted: nothing to share");
    let (short_rows, short_done) = drain(cluster.clone(), short).await;
    let (_, long_done) = long_task.await.unwrap();
    assert_eq!(short_rows, 10);
    assert!(short_done < long_done, "the short job waited for the long one to finish");
    let long_stats = cluster.job_stats(0, "long").await.unwrap();
    assert_eq!(long_stats.rows_read, 4_000_000);
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// A receiving job whose senders never come is cancelled when the host drops it, and its
/// memory grant returns to the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_pipe_job_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, stop_tx, server) = one_disk(dir.path(), DiskOsConfig::new(0, 16 << 20, 64 << 10, 2)).await;
    let schema = Schema::new(vec![Field::new("x", DataType::Int64, false)]);
    let spec = JobSpec::chain("waits-forever", "test", Source::Pipe { exchange_id: "nobody-sends".into(), senders: 1, schema }, vec![], Sink::Host);
    let stream = cluster.start(0, &spec).await.unwrap();
    let granted = |s: &Vec<adisk_host::Result<adisk_core::protocol::DiskStatus>>| s[0].as_ref().unwrap().memory_granted_bytes;
    assert!(granted(&cluster.status().await) > 0, "the job holds a grant while it waits");
    drop(stream);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while granted(&cluster.status().await) > 0 {
        assert!(std::time::Instant::now() < deadline, "the abandoned job still holds its grant");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let stats = cluster.job_stats(0, "waits-forever").await.unwrap();
    assert!(stats.error.unwrap_or_default().contains("cancelled"));
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// A table source delivers its columns in the order the job names them (not the file's), and
/// a job may ask for its own stream buffer size within the disk's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_columns_in_requested_order_and_job_buffer_size() {
    use adisk_storage::store::DiskStore;
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Int64, false), Field::new("c", DataType::Int64, false)]));
    {
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let mut w = store.create_partition("t", 0, schema.clone(), 65_536).unwrap();
        let col = |k: i64| Arc::new(Int64Array::from_iter_values((0..100_000).map(move |i| i * 10 + k))) as Arc<dyn arrow::array::Array>;
        w.write(&RecordBatch::try_new(schema.clone(), vec![col(1), col(2), col(3)]).unwrap()).unwrap();
        store.commit_partition(w).unwrap();
    }
    let (cluster, stop_tx, server) = one_disk(dir.path(), DiskOsConfig::new(0, 64 << 20, 64 << 10, 2)).await;
    let spec = |id: &str, buffer_kib: u64| JobSpec { buffer_kib, ..JobSpec::chain(id, "test", Source::Table { table: "t".into(), columns: vec!["c".into(), "a".into()], prune: None }, vec![], Sink::Host) };
    let mut counts = Vec::new();
    for (id, kib) in [("disk-buffers", 0), ("own-buffers", 1024)] {
        let mut out = cluster.start(0, &spec(id, kib)).await.unwrap();
        let (mut rows, mut batches) = (0usize, 0usize);
        while let Some(b) = out.next().await {
            let b = b.unwrap();
            let names: Vec<String> = b.schema().fields().iter().map(|f| f.name().clone()).collect();
            assert_eq!(names, ["c", "a"]);
            let (c, a) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_primitive::<Int64Type>());
            assert!((0..b.num_rows()).all(|i| c.value(i) % 10 == 3 && a.value(i) % 10 == 1 && c.value(i) - a.value(i) == 2));
            rows += b.num_rows();
            batches += 1;
        }
        assert_eq!(rows, 100_000, "{id}");
        counts.push(batches);
    }
    // Buffers 16× larger: many times fewer batches for the same rows.
    assert!(counts[1] * 8 <= counts[0], "batches with the disk's 64 KiB buffers and the job's 1 MiB: {counts:?}");
    for bad in [8, 64 * 1024] {
        let err = match cluster.start(0, &spec("bad-buffers", bad)).await {
            Err(e) => e.to_string(),
            Ok(mut s) => s.next().await.unwrap().unwrap_err().to_string(),
        };
        assert!(err.contains("stream buffers of"), "{err}");
    }
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
