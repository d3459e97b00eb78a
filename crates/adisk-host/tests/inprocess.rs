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

/// The tests of this file run one at a time: the fair-share test measures how a disk divides
/// its processing, which the other tests' disks on the same 2 cores would disturb.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A disk node serving `dir` on 127.0.0.1 and a cluster client for it; send on the returned
/// channel (or drop it) to stop the node, then await the handle.
async fn one_disk(dir: &std::path::Path, os: DiskOsConfig) -> (Cluster, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>) {
    let (memory_mib, buffer_kib, buffers_per_stream) = (os.memory_bytes >> 20, os.buffer_bytes >> 10, os.buffers_per_stream);
    let node = DiskNode::bind(DiskNodeConfig { dir: dir.to_path_buf(), listen: "127.0.0.1:0".into(), os, auth: None, members: None }).await.unwrap();
    let address = node.address().to_string();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(node.serve(async move {
        let _ = stop_rx.await;
    }));
    let config = ClusterConfig {
        cluster: ClusterSection { name: "t".into(), host_link_mbps: 0, exchange: Default::default(), key_file: None, disk_timeout_ms: adisk_core::config::DEFAULT_DISK_TIMEOUT_MS },
        disks: vec![DiskConfig { id: 0, address, dir: None, memory_mib, buffer_kib, buffers_per_stream, read_mbps: 0, pid: None }],
    };
    (Cluster::connect(config).await.unwrap(), stop_tx, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resident_stream_through_a_disklet() {
    let _serial = serial();
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
/// (fairly per program) instead of running jobs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_share_the_disk() {
    let _serial = serial();
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
    let group = adisk_host::jobs::aggregate_stage(&schema, vec![(col("x") % lit(100_000i64)).alias("g")], vec![datafusion::functions_aggregate::expr_fn::sum(col("x") * col("x")).alias("s")], true).await.unwrap();
    let long = JobSpec { scratch_kib: 8 * 1024, ..JobSpec::chain("long", "program-a", Source::Table { table: "big".into(), columns: vec![], prune: None }, vec![group], Sink::Host) };
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
    let _serial = serial();
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
    let _serial = serial();
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

/// Fair sharing per host program (issue 10, acceptance 4): program A runs 8 jobs on a disk,
/// program B then runs 1 job of the same shape. While B's job runs, A's eight together read at
/// most 3× the rows B's one reads: the disk's compute slots go to programs, not jobs (first
/// come, first served slots would give A about 8 of every 9 buffers). Work is counted in rows,
/// not timed; measured here 1.2–2.5× (B's pipeline has gaps in which A runs, more so when
/// other processes take the cores), hence 3× and not the ideal 1×. `adisk bench fair`
/// measures the acceptance's 2.5× in wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_job_gets_its_programs_share_against_eight() {
    let _serial = serial();
    const CROWD_JOBS: usize = 8;
    const ROWS: i64 = 4_000_000;
    const MAX_SHARE: f64 = 3.0;
    let dir = tempfile::tempdir().unwrap();
    write_wide_table(dir.path(), "t", ROWS);
    let mut os = DiskOsConfig::new(0, 256 << 20, 64 << 10, 2);
    os.compute_slots = 2;
    let (cluster, stop_tx, server) = one_disk(dir.path(), os).await;
    let cluster = Arc::new(cluster);
    let mut crowd = Vec::new();
    for i in 0..CROWD_JOBS {
        crowd.push(tokio::spawn(drain_groups(cluster.clone(), group_by_job(&format!("crowd-{i}"), "program-a").await)));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for i in 0..CROWD_JOBS {
        while !cluster.job_stats(0, &format!("crowd-{i}")).await.is_ok_and(|s| s.rows_read > 0) {
            assert!(std::time::Instant::now() < deadline, "crowd-{i} read nothing within 120 s");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    let crowd_rows = |cluster: Arc<Cluster>| async move {
        let mut rows = 0;
        for i in 0..CROWD_JOBS {
            rows += cluster.job_stats(0, &format!("crowd-{i}")).await.unwrap().rows_read;
        }
        rows
    };
    let before = crowd_rows(cluster.clone()).await;
    drain_groups(cluster.clone(), group_by_job("single", "program-b").await).await;
    let after = crowd_rows(cluster.clone()).await;
    let crowd_running = crowd.iter().filter(|t| !t.is_finished()).count();
    let share = (after - before) as f64 / ROWS as f64;
    eprintln!("while program B's job read {ROWS} rows, program A's {CROWD_JOBS} jobs read {} ({share:.2}×); {crowd_running} still running", after - before);
    assert!(crowd_running > 0, "program A's jobs all ended before B's job: nothing was shared");
    assert!(after > before, "program A's jobs made no progress while B's ran");
    assert!(share <= MAX_SHARE, "program A got {share:.2}× program B's work (at most {MAX_SHARE}×)");
    assert_eq!(cluster.job_stats(0, "single").await.unwrap().rows_read, ROWS as u64);
    for t in crowd {
        t.abort();
    }
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// Writes table `table` of `rows` rows (`x`, `y`: Int64) as one partition of 64 Ki-row groups.
fn write_wide_table(dir: &std::path::Path, table: &str, rows: i64) {
    use adisk_storage::store::DiskStore;
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false), Field::new("y", DataType::Int64, false)]));
    let store = DiskStore::open(dir, 0).unwrap();
    let mut writer = store.create_partition(table, 0, schema.clone(), 65_536).unwrap();
    let mut start = 0;
    while start < rows {
        let end = (start + 65_536).min(rows);
        let x = Int64Array::from_iter_values((start..end).map(|i| i.wrapping_mul(2_654_435_761) % 1_000_003));
        let y = Int64Array::from_iter_values(start..end);
        writer.write(&RecordBatch::try_new(schema.clone(), vec![Arc::new(x), Arc::new(y)]).unwrap()).unwrap();
        start = end;
    }
    store.commit_partition(writer).unwrap();
}

/// A scan of `t` with a partial group-by into 1024 groups (little output, all work at the disk).
async fn group_by_job(job_id: &str, program: &str) -> JobSpec {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false), Field::new("y", DataType::Int64, false)]));
    let sum = datafusion::functions_aggregate::expr_fn::sum(col("x") * col("y"));
    let aggregate = adisk_host::jobs::aggregate_stage(&schema, vec![(col("x") % lit(1024i64)).alias("g")], vec![sum.alias("s")], true).await.unwrap();
    JobSpec { scratch_kib: 4 * 1024, ..JobSpec::chain(job_id, program, Source::Table { table: "t".into(), columns: vec![], prune: None }, vec![aggregate], Sink::Host) }
}

/// Runs `spec` to its end and checks it made one row per group.
async fn drain_groups(cluster: Arc<Cluster>, spec: JobSpec) {
    let mut out = cluster.start(0, &spec).await.unwrap();
    let mut rows = 0;
    while let Some(b) = out.next().await {
        rows += b.unwrap().num_rows();
    }
    assert_eq!(rows, 1024, "{}: one row per group", spec.job_id);
}

/// A scan over row groups far wider than the first (8-byte strings, then 2000-byte ones)
/// with 64 KiB buffers: every buffer is sized from its own row group and cut to fit, so the
/// job's memory peak stays within its grant, and every row arrives intact and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_over_row_groups_wider_than_the_buffer_stays_within_its_grant() {
    let _serial = serial();
    use adisk_storage::store::DiskStore;
    const GROUP_ROWS: usize = 2048;
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
    let width = |group: usize| if group == 0 { 8 } else { 2000 };
    let expected: Vec<String> = (0..3 * GROUP_ROWS).map(|i| format!("{i:0>w$}", w = width(i / GROUP_ROWS))).collect();
    {
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let mut w = store.create_partition("wide", 0, schema.clone(), GROUP_ROWS).unwrap();
        for rows in expected.chunks(GROUP_ROWS) {
            w.write(&RecordBatch::try_new(schema.clone(), vec![Arc::new(arrow::array::StringArray::from(rows.to_vec()))]).unwrap()).unwrap();
        }
        store.commit_partition(w).unwrap();
    }
    let (cluster, stop_tx, server) = one_disk(dir.path(), DiskOsConfig::new(0, 64 << 20, 64 << 10, 2)).await;
    let spec = JobSpec::chain("wide-scan", "test", Source::Table { table: "wide".into(), columns: vec![], prune: None }, vec![], Sink::Host);
    let mut out = cluster.start(0, &spec).await.unwrap();
    let mut got = Vec::new();
    while let Some(b) = out.next().await {
        let b = b.unwrap();
        got.extend(b.column(0).as_string::<i32>().iter().map(|s| s.unwrap().to_string()));
    }
    assert!(got == expected, "rows differ ({} got, {} expected)", got.len(), expected.len());
    let stats = cluster.job_stats(0, "wide-scan").await.unwrap();
    eprintln!("memory peak {} of {} granted", stats.memory_peak_bytes, stats.memory_granted_bytes);
    assert!(stats.memory_peak_bytes <= stats.memory_granted_bytes, "peak {} over the grant {}", stats.memory_peak_bytes, stats.memory_granted_bytes);
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// One process per data directory: a second disk node on a served directory is refused,
/// naming the directory and the holder's pid; once the first stops, the directory is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_data_directory_is_refused_to_a_second_disk() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let config = || adisk_disk::DiskNodeConfig { dir: dir.path().to_path_buf(), listen: "127.0.0.1:0".into(), os: DiskOsConfig::new(0, 16 << 20, 64 << 10, 2), auth: None, members: None };
    let first = DiskNode::bind(config()).await.unwrap();
    let err = DiskNode::bind(config()).await.err().expect("a second node on the same directory").to_string();
    assert!(err.contains("already served") && err.contains(&format!("pid {}", std::process::id())), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    drop(first);
    DiskNode::bind(config()).await.expect("the directory is free once the first node is gone");
}
