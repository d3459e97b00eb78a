//! In-process: a disk node on 127.0.0.1, a host-resident input stream over DoExchange, checked
//! against a plain Rust filter of the same rows.
use adisk_core::builder::JobBuilder;
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
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A disk node serving `dir` on 127.0.0.1 and a cluster client for it; send on the returned
/// channel (or drop it) to stop the node, then await the handle.
async fn one_disk(
    dir: &std::path::Path,
    os: DiskOsConfig,
) -> (
    Cluster,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>,
) {
    let (memory_mib, buffer_kib, buffers_per_stream) = (
        os.memory_bytes >> 20,
        os.buffer_bytes >> 10,
        os.buffers_per_stream,
    );
    let node = DiskNode::bind(DiskNodeConfig::local(dir.to_path_buf(), os))
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
            memory_mib,
            buffer_kib,
            buffers_per_stream,
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
    (Cluster::connect(config).await.unwrap(), stop_tx, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resident_stream_through_a_disklet() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cluster, stop_tx, server) =
        one_disk(dir.path(), DiskOsConfig::new(0, 16 << 20, 64 << 10, 2)).await;
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batches: Vec<RecordBatch> = (0..20)
        .map(|i| {
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(
                    i * 1000..(i + 1) * 1000,
                ))],
            )
            .unwrap()
        })
        .collect();
    let predicate = ExprBytes(
        ((col("x") % lit(7i64)).eq(lit(3i64)))
            .to_bytes()
            .unwrap()
            .to_vec(),
    );
    let spec = JobBuilder::chain(
        "test",
        Source::Host {
            schema: schema.as_ref().clone(),
        },
        vec![DiskletSpec::Select {
            predicate: Some(predicate),
            projection: vec![],
            limit: None,
        }],
        Sink::Host,
    )
    .id("host-stream-test")
    .program("test")
    .build()
    .unwrap();
    let input = futures::stream::iter(batches.clone()).boxed();
    let mut out = cluster
        .exchange(0, &spec, schema.clone(), input)
        .await
        .unwrap();
    let mut got: Vec<i64> = Vec::new();
    while let Some(b) = out.next().await {
        got.extend(
            b.unwrap()
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .copied(),
        );
    }
    let expected: Vec<i64> = (0..20_000).filter(|x| x % 7 == 3).collect();
    assert_eq!(got, expected);
    let stats = cluster.job_stats(0, "host-stream-test").await.unwrap();
    assert_eq!(stats.rows_read, 20_000);
    assert_eq!(stats.rows_shipped, expected.len() as u64);
    assert!(stats.bytes_shipped_host > 0);
    // A job naming an unknown table is refused with a typed error, and the disk goes on serving.
    let bad = JobBuilder::chain(
        "test",
        Source::Table {
            table: "nosuch".into(),
            columns: vec![],
            prune: None,
            partitions: None,
        },
        vec![],
        Sink::Host,
    )
    .id("bad")
    .program("test")
    .build()
    .unwrap();
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
            let mut w = store
                .create_partition(table, 0, schema.clone(), 65_536)
                .unwrap();
            let mut start = 0;
            while start < rows {
                let end = (start + 65_536).min(rows);
                w.write(
                    &RecordBatch::try_new(
                        schema.clone(),
                        vec![Arc::new(Int64Array::from_iter_values(start..end))],
                    )
                    .unwrap(),
                )
                .unwrap();
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
    let group = adisk_host::jobs::aggregate_stage(
        &schema,
        vec![(col("x") % lit(100_000i64)).alias("g")],
        vec![datafusion::functions_aggregate::expr_fn::sum(col("x") * col("x")).alias("s")],
        true,
    )
    .await
    .unwrap();
    let long = JobBuilder::chain(
        "test",
        Source::Table {
            table: "big".into(),
            columns: vec![],
            prune: None,
            partitions: None,
        },
        vec![group],
        Sink::Host,
    )
    .id("long")
    .program("program-a")
    .scratch_kib(8 * 1024)
    .build()
    .unwrap();
    let short = JobBuilder::chain(
        "test",
        Source::Table {
            table: "small".into(),
            columns: vec![],
            prune: None,
            partitions: None,
        },
        vec![DiskletSpec::Select {
            predicate: Some(e(col("x").lt(lit(10i64)))),
            projection: vec![],
            limit: None,
        }],
        Sink::Host,
    )
    .id("short")
    .program("program-b")
    .build()
    .unwrap();
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
    while !cluster
        .job_stats(0, "long")
        .await
        .is_ok_and(|s| s.rows_read > 0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the long job read no rows within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        !long_task.is_finished(),
        "the long job finished before the short one was submitted: nothing to share"
    );
    let (short_rows, short_done) = drain(cluster.clone(), short).await;
    let (_, long_done) = long_task.await.unwrap();
    assert_eq!(short_rows, 10);
    assert!(
        short_done < long_done,
        "the short job waited for the long one to finish"
    );
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
    let (cluster, stop_tx, server) =
        one_disk(dir.path(), DiskOsConfig::new(0, 16 << 20, 64 << 10, 2)).await;
    let schema = Schema::new(vec![Field::new("x", DataType::Int64, false)]);
    let spec = JobBuilder::chain(
        "test",
        Source::Pipe {
            exchange_id: "nobody-sends".into(),
            senders: 1,
            schema,
        },
        vec![],
        Sink::Host,
    )
    .id("waits-forever")
    .program("test")
    .build()
    .unwrap();
    let stream = cluster.start(0, &spec).await.unwrap();
    let granted = |s: &Vec<adisk_host::Result<adisk_core::protocol::DiskStatus>>| {
        s[0].as_ref().unwrap().memory_granted_bytes
    };
    assert!(
        granted(&cluster.status().await) > 0,
        "the job holds a grant while it waits"
    );
    drop(stream);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while granted(&cluster.status().await) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned job still holds its grant"
        );
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
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Int64, false),
        Field::new("c", DataType::Int64, false),
    ]));
    {
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let mut w = store
            .create_partition("t", 0, schema.clone(), 65_536)
            .unwrap();
        let col = |k: i64| {
            Arc::new(Int64Array::from_iter_values(
                (0..100_000).map(move |i| i * 10 + k),
            )) as Arc<dyn arrow::array::Array>
        };
        w.write(&RecordBatch::try_new(schema.clone(), vec![col(1), col(2), col(3)]).unwrap())
            .unwrap();
        store.commit_partition(w).unwrap();
    }
    let (cluster, stop_tx, server) =
        one_disk(dir.path(), DiskOsConfig::new(0, 64 << 20, 64 << 10, 2)).await;
    let spec = |id: &str, buffer_kib: u64| {
        JobBuilder::chain(
            "test",
            Source::Table {
                table: "t".into(),
                columns: vec!["c".into(), "a".into()],
                prune: None,
                partitions: None,
            },
            vec![],
            Sink::Host,
        )
        .id(id)
        .program("test")
        .buffer_kib(buffer_kib)
        .build()
        .unwrap()
    };
    let mut counts = Vec::new();
    for (id, kib) in [("disk-buffers", 0), ("own-buffers", 1024)] {
        let mut out = cluster.start(0, &spec(id, kib)).await.unwrap();
        let (mut rows, mut batches) = (0usize, 0usize);
        while let Some(b) = out.next().await {
            let b = b.unwrap();
            let names: Vec<String> = b
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            assert_eq!(names, ["c", "a"]);
            let (c, a) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
            );
            assert!((0..b.num_rows()).all(|i| c.value(i) % 10 == 3
                && a.value(i) % 10 == 1
                && c.value(i) - a.value(i) == 2));
            rows += b.num_rows();
            batches += 1;
        }
        assert_eq!(rows, 100_000, "{id}");
        counts.push(batches);
    }
    // Buffers 16× larger: many times fewer batches for the same rows.
    assert!(
        counts[1] * 8 <= counts[0],
        "batches with the disk's 64 KiB buffers and the job's 1 MiB: {counts:?}"
    );
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
        crowd.push(tokio::spawn(drain_groups(
            cluster.clone(),
            group_by_job(&format!("crowd-{i}"), "program-a")
                .await
                .build()
                .unwrap(),
        )));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for i in 0..CROWD_JOBS {
        while !cluster
            .job_stats(0, &format!("crowd-{i}"))
            .await
            .is_ok_and(|s| s.rows_read > 0)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "crowd-{i} read nothing within 120 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    let crowd_rows = |cluster: Arc<Cluster>| async move {
        let mut rows = 0;
        for i in 0..CROWD_JOBS {
            rows += cluster
                .job_stats(0, &format!("crowd-{i}"))
                .await
                .unwrap()
                .rows_read;
        }
        rows
    };
    let before = crowd_rows(cluster.clone()).await;
    drain_groups(
        cluster.clone(),
        group_by_job("single", "program-b").await.build().unwrap(),
    )
    .await;
    let after = crowd_rows(cluster.clone()).await;
    let crowd_running = crowd.iter().filter(|t| !t.is_finished()).count();
    let share = (after - before) as f64 / ROWS as f64;
    eprintln!(
        "while program B's job read {ROWS} rows, program A's {CROWD_JOBS} jobs read {} ({share:.2}×); {crowd_running} still running",
        after - before
    );
    assert!(
        crowd_running > 0,
        "program A's jobs all ended before B's job: nothing was shared"
    );
    assert!(
        after > before,
        "program A's jobs made no progress while B's ran"
    );
    assert!(
        share <= MAX_SHARE,
        "program A got {share:.2}× program B's work (at most {MAX_SHARE}×)"
    );
    assert_eq!(
        cluster.job_stats(0, "single").await.unwrap().rows_read,
        ROWS as u64
    );
    for t in crowd {
        t.abort();
    }
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// Writes table `table` of `rows` rows (`x`, `y`: Int64) as one partition of 64 Ki-row groups.
fn write_wide_table(dir: &std::path::Path, table: &str, rows: i64) {
    use adisk_storage::store::DiskStore;
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("y", DataType::Int64, false),
    ]));
    let store = DiskStore::open(dir, 0).unwrap();
    let mut writer = store
        .create_partition(table, 0, schema.clone(), 65_536)
        .unwrap();
    let mut start = 0;
    while start < rows {
        let end = (start + 65_536).min(rows);
        let x = Int64Array::from_iter_values(
            (start..end).map(|i| i.wrapping_mul(2_654_435_761) % 1_000_003),
        );
        let y = Int64Array::from_iter_values(start..end);
        writer
            .write(&RecordBatch::try_new(schema.clone(), vec![Arc::new(x), Arc::new(y)]).unwrap())
            .unwrap();
        start = end;
    }
    store.commit_partition(writer).unwrap();
}

/// A scan of `t` with a partial group-by into 1024 groups (little output, all work at the disk).
async fn group_by_job(job_id: &str, program: &str) -> JobBuilder {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("y", DataType::Int64, false),
    ]));
    let sum = datafusion::functions_aggregate::expr_fn::sum(col("x") * col("y"));
    let aggregate = adisk_host::jobs::aggregate_stage(
        &schema,
        vec![(col("x") % lit(1024i64)).alias("g")],
        vec![sum.alias("s")],
        true,
    )
    .await
    .unwrap();
    JobBuilder::chain(
        "test",
        Source::Table {
            table: "t".into(),
            columns: vec![],
            prune: None,
            partitions: None,
        },
        vec![aggregate],
        Sink::Host,
    )
    .id(job_id)
    .program(program)
    .scratch_kib(4 * 1024)
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
    let expected: Vec<String> = (0..3 * GROUP_ROWS)
        .map(|i| format!("{i:0>w$}", w = width(i / GROUP_ROWS)))
        .collect();
    {
        let store = DiskStore::open(dir.path(), 0).unwrap();
        let mut w = store
            .create_partition("wide", 0, schema.clone(), GROUP_ROWS)
            .unwrap();
        for rows in expected.chunks(GROUP_ROWS) {
            w.write(
                &RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(arrow::array::StringArray::from(rows.to_vec()))],
                )
                .unwrap(),
            )
            .unwrap();
        }
        store.commit_partition(w).unwrap();
    }
    let (cluster, stop_tx, server) =
        one_disk(dir.path(), DiskOsConfig::new(0, 64 << 20, 64 << 10, 2)).await;
    let spec = JobBuilder::chain(
        "test",
        Source::Table {
            table: "wide".into(),
            columns: vec![],
            prune: None,
            partitions: None,
        },
        vec![],
        Sink::Host,
    )
    .id("wide-scan")
    .program("test")
    .build()
    .unwrap();
    let mut out = cluster.start(0, &spec).await.unwrap();
    let mut got = Vec::new();
    while let Some(b) = out.next().await {
        let b = b.unwrap();
        got.extend(
            b.column(0)
                .as_string::<i32>()
                .iter()
                .map(|s| s.unwrap().to_string()),
        );
    }
    assert!(
        got == expected,
        "rows differ ({} got, {} expected)",
        got.len(),
        expected.len()
    );
    let stats = cluster.job_stats(0, "wide-scan").await.unwrap();
    eprintln!(
        "memory peak {} of {} granted",
        stats.memory_peak_bytes, stats.memory_granted_bytes
    );
    assert!(
        stats.memory_peak_bytes <= stats.memory_granted_bytes,
        "peak {} over the grant {}",
        stats.memory_peak_bytes,
        stats.memory_granted_bytes
    );
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}

/// One process per data directory: a second disk node on a served directory is refused,
/// naming the directory and the holder's pid; once the first stops, the directory is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_data_directory_is_refused_to_a_second_disk() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        adisk_disk::DiskNodeConfig::local(
            dir.path().to_path_buf(),
            DiskOsConfig::new(0, 16 << 20, 64 << 10, 2),
        )
    };
    let first = DiskNode::bind(config()).await.unwrap();
    let err = DiskNode::bind(config())
        .await
        .err()
        .expect("a second node on the same directory")
        .to_string();
    assert!(
        err.contains("already served") && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    drop(first);
    DiskNode::bind(config())
        .await
        .expect("the directory is free once the first node is gone");
}

/// Disk nodes serving `dirs` on 127.0.0.1 and a cluster client for them; drop or send on the
/// returned channels to stop them.
async fn disks(dirs: &[&std::path::Path]) -> (Arc<Cluster>, Vec<tokio::sync::oneshot::Sender<()>>) {
    let mut config = ClusterConfig {
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
        disks: vec![],
        serve: None,
    };
    let mut stops = Vec::new();
    for (id, dir) in dirs.iter().enumerate() {
        let node = DiskNode::bind(DiskNodeConfig::local(
            dir.to_path_buf(),
            DiskOsConfig::new(id as u32, 64 << 20, 64 << 10, 2),
        ))
        .await
        .unwrap();
        config.disks.push(DiskConfig {
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
        tokio::spawn(node.serve(async move {
            let _ = stop_rx.await;
        }));
        stops.push(stop_tx);
    }
    (Arc::new(Cluster::connect(config).await.unwrap()), stops)
}

fn staged(store: &adisk_storage::store::DiskStore, load: &str, rows: i64, disks: Vec<u32>) {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    store.begin_staging(load, "t").unwrap();
    let mut w = store
        .create_staged_partition(load, "t", store.disk_id(), schema.clone(), 4096)
        .unwrap();
    w.write(
        &RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap(),
    )
    .unwrap();
    store.finish_staged(load, w).unwrap();
    let commit = adisk_core::protocol::CommitTable {
        table: "t".into(),
        partitions: vec![store.disk_id()],
        disks,
        copies: vec![],
    };
    store.commit_load(load, &[commit]).unwrap();
}

/// A load committed on disk 0 but not yet on disk 1 (the host killed between the two
/// commits): the table is reported incomplete with a typed error naming it and disk 1, in the
/// catalog and in SQL, never queried as partial; other tables stay queryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_committed_load_is_reported_incomplete_never_partial() {
    let _serial = serial();
    use adisk_storage::store::DiskStore;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    {
        let (s0, s1) = (
            DiskStore::open(a.path(), 0).unwrap(),
            DiskStore::open(b.path(), 1).unwrap(),
        );
        staged(&s0, "0001-a", 100, vec![0, 1]);
        staged(&s1, "0001-a", 100, vec![0, 1]);
        staged(&s0, "0002-b", 5, vec![0, 1]); // disk 1 never got this commit
    }
    let (cluster, _stops) = disks(&[a.path(), b.path()]).await;
    let catalog = cluster.catalog().await.unwrap();
    assert!(!catalog.tables.contains_key("t"));
    let err = catalog.table("t").unwrap_err();
    assert!(
        matches!(&err, adisk_host::HostError::IncompleteTable { table, disks, .. } if table == "t" && disks == &vec![1]),
        "{err}"
    );
    assert!(
        err.to_string().contains("load 0002-b") && err.to_string().contains("disk 1: load 0001-a"),
        "{err}"
    );
    let engine =
        adisk_host::sql::SqlEngine::new(cluster.clone(), adisk_host::sql::SqlOptions::default())
            .await
            .unwrap();
    let err = engine.query("SELECT sum(k) FROM t").await.unwrap_err();
    assert!(
        matches!(&err, adisk_host::HostError::IncompleteTable { table, .. } if table == "t"),
        "{err}"
    );
}

/// The same for a first load: disk 0 committed, disk 1 has no table at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_committed_first_load_is_reported_incomplete() {
    let _serial = serial();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    staged(
        &adisk_storage::store::DiskStore::open(a.path(), 0).unwrap(),
        "0001-a",
        100,
        vec![0, 1],
    );
    let (cluster, _stops) = disks(&[a.path(), b.path()]).await;
    let err = cluster.catalog().await.unwrap().table("t").unwrap_err();
    assert!(
        matches!(&err, adisk_host::HostError::IncompleteTable { disks, .. } if disks == &vec![1]),
        "{err}"
    );
    assert!(err.to_string().contains("disk 1: missing"), "{err}");
}

fn write_csv(path: &std::path::Path, rows: u64, bad_row: Option<u64>) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(f, "k,v").unwrap();
    for i in 1..=rows {
        if Some(i) == bad_row {
            writeln!(f, "{i},not-a-number").unwrap()
        } else {
            writeln!(f, "{i},{}", i * 2).unwrap()
        }
    }
}

fn leftovers(dir: &std::path::Path) -> Vec<String> {
    let staging = dir.join("staging");
    std::fs::read_dir(&staging)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect()
}

/// A CSV whose row 50 001 does not parse: the load fails with the file named, the previous
/// version of the table is intact on every disk (a first load leaves no table), and nothing
/// staged is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_csv_row_leaves_the_previous_table_and_nothing_on_disk() {
    let _serial = serial();
    use adisk_host::load::{FileFormat, load_files};
    use adisk_storage::decluster::Decluster;
    let (a, b, files) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (good, bad) = (files.path().join("good.csv"), files.path().join("bad.csv"));
    write_csv(&good, 60_000, None);
    write_csv(&bad, 80_000, Some(50_001));
    let (cluster, _stops) = disks(&[a.path(), b.path()]).await;
    let rule = || "roundrobin".parse::<Decluster>().unwrap();
    let err = load_files(
        &cluster,
        "fresh",
        FileFormat::Csv,
        std::slice::from_ref(&bad),
        rule(),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("bad.csv"), "{err}");
    assert!(matches!(
        cluster.catalog().await.unwrap().table("fresh"),
        Err(adisk_host::HostError::UnknownTable(_))
    ));
    load_files(
        &cluster,
        "t",
        FileFormat::Csv,
        std::slice::from_ref(&good),
        rule(),
        |_| {},
    )
    .await
    .unwrap();
    let err = load_files(
        &cluster,
        "t",
        FileFormat::Csv,
        std::slice::from_ref(&bad),
        rule(),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("bad.csv"), "{err}");
    let catalog = cluster.catalog().await.unwrap();
    assert_eq!(catalog.table("t").unwrap().rows(), 60_000);
    let engine =
        adisk_host::sql::SqlEngine::new(cluster.clone(), adisk_host::sql::SqlOptions::default())
            .await
            .unwrap();
    let out = engine.query("SELECT sum(v) FROM t").await.unwrap();
    assert_eq!(
        out.batches[0]
            .column(0)
            .as_primitive::<Int64Type>()
            .value(0),
        60_000 * 60_001
    );
    // Aborts reach the disks after the failed calls ended: wait for the staged files to go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(leftovers(a.path()).is_empty() && leftovers(b.path()).is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "staged files left: {:?} {:?}",
            leftovers(a.path()),
            leftovers(b.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Flips one byte keeping the file's size and mtime, as bit rot does.
fn flip_keeping_mtime(path: &std::path::Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, offset).unwrap();
    f.write_all_at(&[byte[0] ^ 0x01], offset).unwrap();
    f.set_modified(mtime).unwrap();
}

/// `sum(v - k)` over `t` (reads both columns).
async fn sum(engine: &adisk_host::sql::SqlEngine) -> Result<i64, adisk_host::HostError> {
    engine
        .query("SELECT sum(v - k) FROM t")
        .await
        .map(|o| o.batches[0].column(0).as_primitive::<Int64Type>().value(0))
}

/// Bytes flipped in a data page, then in the footer, after the disk first opened (and
/// verified) the file: the next query fails with a data-loss error naming the file, never a number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_after_the_first_open_fails_the_query_naming_the_file() {
    let _serial = serial();
    let (a, files) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let csv = files.path().join("t.csv");
    write_csv(&csv, 200_000, None);
    let (cluster, _stops) = disks(&[a.path()]).await;
    let rule = "roundrobin"
        .parse::<adisk_storage::decluster::Decluster>()
        .unwrap();
    let infos = adisk_host::load::load_files(
        &cluster,
        "t",
        adisk_host::load::FileFormat::Csv,
        &[csv],
        rule,
        |_| {},
    )
    .await
    .unwrap();
    let engine =
        adisk_host::sql::SqlEngine::new(cluster.clone(), adisk_host::sql::SqlOptions::default())
            .await
            .unwrap();
    assert_eq!(sum(&engine).await.unwrap(), 200_000 * 200_001 / 2);
    let catalog = cluster.catalog().await.unwrap();
    let part = &catalog.table("t").unwrap().placements[0].1;
    let path = a.path().join(&part.file);
    // The host's catalog leaves the checksums out: the disk's manifest has them.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.path().join("manifest.json")).unwrap()).unwrap();
    let tail_offset = manifest["tables"]["t"]["partitions"][0]["checksums"]["tail_offset"]
        .as_u64()
        .unwrap();
    assert!(
        part.checksums.is_none(),
        "the host's catalog carries no checksums"
    );
    let original = std::fs::read(&path).unwrap();
    // Column `v` of row group 1: the middle of its chunk, a data page.
    assert_eq!(infos[0].bytes, part.bytes);
    for (offset, what) in [
        (tail_offset / 2, "column chunk"),
        (part.bytes - 30, "footer"),
    ] {
        flip_keeping_mtime(&path, offset);
        let err = sum(&engine).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, adisk_host::HostError::Disk { code, .. } if code == "DataLoss"),
            "{err}"
        );
        assert!(
            text.contains(&path.display().to_string()) && text.contains(what),
            "{text}"
        );
        std::fs::write(&path, &original).unwrap();
        assert_eq!(
            sum(&engine).await.unwrap(),
            200_000 * 200_001 / 2,
            "restored: the query answers again"
        );
    }
}

/// The exchange benchmark's path: a pair and an all-to-all exchange of lineitem across 3 disks,
/// each direct and through the host's relay. The receivers' counts add up to the rows the
/// senders read (the run checks this itself) and, for all-to-all, to the table's rows; the
/// scan-only job reports the bytes it scanned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_benchmark_runs_count_every_row() {
    use adisk_core::config::ExchangeMode;
    use adisk_host::exchange::{Pattern, run, scan_only};
    let _serial = serial();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<&std::path::Path> = dirs.iter().map(|d| d.path()).collect();
    let (cluster, _stops) = disks(&paths).await;
    let load = adisk_host::load::TpchLoad {
        sf: 0.002,
        partitions_per_disk: 1,
        row_group_rows: 1 << 12,
        tables: vec!["lineitem".into()],
        replicas: 1,
        disks: vec![],
    };
    adisk_host::load::load_tpch(&cluster, &load, |_, _| {})
        .await
        .unwrap();
    let total = cluster.catalog().await.unwrap().tables["lineitem"].rows();
    let columns: Vec<String> = ["l_orderkey", "l_comment"].map(String::from).into();
    for mode in [ExchangeMode::Direct, ExchangeMode::ViaHost] {
        cluster.set_exchange_mode(mode);
        let pair = run(
            &cluster,
            "lineitem",
            &columns,
            Pattern::Pair { from: 0, to: 1 },
        )
        .await
        .unwrap();
        assert!(pair.rows > 0 && pair.rows < total, "{mode}: {pair:?}");
        assert!(pair.bytes > 0, "{mode}: {pair:?}");
        let all = run(&cluster, "lineitem", &columns, Pattern::AllToAll)
            .await
            .unwrap();
        assert_eq!(all.rows, total, "{mode}");
    }
    let (scanned, _) = scan_only(&cluster, "lineitem", &columns, 2).await.unwrap();
    assert!(scanned > 0);
    let missing = run(
        &cluster,
        "lineitem",
        &["nope".to_string()],
        Pattern::AllToAll,
    )
    .await;
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("unknown column `nope`")
    );
}

/// A chain (select → partial group-by; select → select with a limit) gives the same rows
/// whether its stages run on threads of their own, fused on one thread, or fused and then
/// moved apart after their first buffers; each stage counts its own rows, and the job stays
/// within its grant. The fused limit stops the scan early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fused_chains_give_the_same_rows_as_threads() {
    let _serial = serial();
    const ROWS: i64 = 300_000;
    let dir = tempfile::tempdir().unwrap();
    write_wide_table(dir.path(), "t", ROWS);
    let keep = (col("y") % lit(3i64)).eq(lit(0i64));
    let select = |limit| DiskletSpec::Select {
        predicate: Some(adisk_host::jobs::encode_expr(&keep).unwrap()),
        projection: vec![],
        limit,
    };
    let mut expected = std::collections::BTreeMap::<i64, i64>::new();
    for y in (0..ROWS).filter(|y| y % 3 == 0) {
        let x = y.wrapping_mul(2_654_435_761) % 1_000_003;
        *expected.entry(x % 1024).or_default() += x * y;
    }
    let grouped = group_by_job("g", "p").await.build().unwrap();
    let mut group_spec = grouped.clone();
    group_spec.stages.insert(
        0,
        adisk_core::protocol::Stage {
            disklet: select(None),
            inputs: vec![adisk_core::protocol::Port::Input(0)],
        },
    );
    group_spec.stages[1].inputs = vec![adisk_core::protocol::Port::Stage { stage: 0, port: 0 }];
    group_spec.outputs[0].from = adisk_core::protocol::Port::Stage { stage: 1, port: 0 };
    group_spec.scratch_kib = 0;
    let mut limit_spec = group_spec.clone();
    limit_spec.stages[1].disklet = select(Some(100));
    for (mode, fuse, apart_cpu_ns) in [
        ("threads", false, 0),
        ("fused", true, u64::MAX / 64),
        ("apart", true, 0),
    ] {
        let mut os = DiskOsConfig::new(0, 64 << 20, 64 << 10, 2);
        os.fuse_stages = fuse;
        os.apart_cpu_ns = apart_cpu_ns;
        let (cluster, stop_tx, server) = one_disk(dir.path(), os).await;
        let job = |spec: &JobSpec, id: &str| {
            JobBuilder::from_spec(spec.clone())
                .id(format!("{id}-{mode}"))
                .build()
                .unwrap()
        };
        let mut got = std::collections::BTreeMap::<i64, i64>::new();
        let spec = job(&group_spec, "group");
        let mut out = cluster.start(0, &spec).await.unwrap();
        while let Some(b) = out.next().await {
            let b = b.unwrap();
            let (g, s) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
            );
            for i in 0..b.num_rows() {
                *got.entry(g.value(i)).or_default() += s.value(i);
            }
        }
        assert_eq!(got, expected, "{mode}");
        let stats = cluster.job_stats(0, &spec.job_id).await.unwrap();
        assert_eq!(stats.stages[0].rows_in, ROWS as u64, "{mode}");
        assert_eq!(stats.stages[1].rows_in, stats.stages[0].rows_out, "{mode}");
        assert!(
            stats.memory_peak_bytes <= stats.memory_granted_bytes,
            "{mode}: {stats:?}"
        );
        let spec = job(&limit_spec, "limit");
        let mut out = cluster.start(0, &spec).await.unwrap();
        let mut rows = 0;
        while let Some(b) = out.next().await {
            rows += b.unwrap().num_rows();
        }
        assert_eq!(rows, 100, "{mode}");
        if fuse {
            let stats = cluster.job_stats(0, &spec.job_id).await.unwrap();
            assert!(
                stats.rows_read < ROWS as u64,
                "{mode}: the limit stops the scan: {stats:?}"
            );
        }
        let _ = stop_tx.send(());
        server.await.unwrap().unwrap();
    }
}

/// The cost model's estimate of what a host-centric plan ships is near what it shipped, where
/// it used to be off by 10–10 000×: partial aggregation (Q1: a row per group per disk), Bloom
/// semi-joins whose build sides' distinct keys are followed through joins (Q2, Q17) and
/// filters estimated again once the build side got its own (Q11). The oracle is the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_centric_estimates_are_near_what_the_scans_ship() {
    use adisk_host::sql::{Offload, SqlEngine, SqlOptions, report, tpch};
    let _serial = serial();
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<&std::path::Path> = dirs.iter().map(|d| d.path()).collect();
    let (cluster, _stops) = disks(&paths).await;
    let load = adisk_host::load::TpchLoad {
        sf: 0.05,
        partitions_per_disk: 1,
        row_group_rows: 1 << 14,
        tables: vec![],
        replicas: 1,
        disks: vec![],
    };
    adisk_host::load::load_tpch(&cluster, &load, |_, _| {})
        .await
        .unwrap();
    let opts = SqlOptions {
        offload: Offload::Semijoin,
        ..Default::default()
    };
    let engine = SqlEngine::new(cluster.clone(), opts).await.unwrap();
    for q in [1, 2, 11, 17] {
        let out = engine.query(tpch::query(q).unwrap()).await.unwrap();
        let estimate = out.estimate.expect("an estimate at every level");
        assert_eq!(estimate.level, "host-centric");
        let shipped = report::links(&out).to_host as f64;
        let ratio = shipped / estimate.traffic.to_host.max(1) as f64;
        assert!(
            (0.25..=4.0).contains(&ratio),
            "Q{q}: shipped {shipped} bytes, estimated {}",
            estimate.traffic.to_host
        );
    }
}
