//! Disks come back: a disk taken as dead (stopped mid-session) is probed again with backoff
//! and, once it answers on its address with a catalog that agrees with the others', used
//! again by the same host without restarting anything; a disk that stays down stays dead.
use adisk_core::config::{ClusterConfig, ClusterSection, DiskConfig};
use adisk_disk::{DiskNode, DiskNodeConfig};
use adisk_diskos::DiskOsConfig;
use adisk_host::Cluster;
use adisk_host::sql::{SqlEngine, SqlOptions};
use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Stop = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), adisk_disk::DiskNodeError>>,
);

/// Serves disk `id` on `dir` at `listen`; its address and how to stop it.
async fn serve(dir: &std::path::Path, id: u32, listen: &str) -> (String, Stop) {
    let mut config = DiskNodeConfig::local(dir, DiskOsConfig::new(id, 16 << 20, 64 << 10, 2));
    config.listen = listen.to_string();
    let node = DiskNode::bind(config).await.unwrap();
    let address = node.address().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(node.serve(async move {
        let _ = rx.await;
    }));
    (address, (tx, handle))
}

fn cluster_config(addresses: &[String]) -> ClusterConfig {
    ClusterConfig {
        cluster: ClusterSection {
            name: "t".into(),
            host_link_mbps: 0,
            exchange: Default::default(),
            key_file: None,
            disk_timeout_ms: 2_000,
            router_mbps: 0,
            costs: None,
            tls: None,
        },
        disks: addresses
            .iter()
            .enumerate()
            .map(|(id, address)| DiskConfig {
                id: id as u32,
                address: address.clone(),
                dir: None,
                memory_mib: 16,
                buffer_kib: 64,
                buffers_per_stream: 2,
                read_mbps: 0,
                compression: Default::default(),
                pid: None,
                group: None,
                metrics_address: None,
                cpus: None,
                cpu_speed: None,
            })
            .collect(),
        serve: None,
    }
}

async fn count(cluster: &Arc<Cluster>) -> adisk_host::Result<i64> {
    let engine = SqlEngine::new(cluster.clone(), SqlOptions::default()).await?;
    let out = engine.query("SELECT count(*) FROM t").await?;
    Ok(out.batches[0]
        .column(0)
        .as_primitive::<Int64Type>()
        .value(0))
}

/// Polls `cluster.catalog()` (what every query and the service's view refresh do) until disk
/// `d` is used again; the time it took.
async fn until_revived(cluster: &Cluster, d: u32, within: Duration) -> Duration {
    let started = Instant::now();
    while cluster.dead_disks().contains(&d) {
        assert!(started.elapsed() < within, "disk {d} not used again");
        let _ = cluster.catalog().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_answers_again_is_used_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = (0..3)
        .map(|d| tmp.path().join(format!("disk-{d}")))
        .collect();
    let mut addresses = Vec::new();
    let mut stops = Vec::new();
    for (d, dir) in dirs.iter().enumerate() {
        let (address, stop) = serve(dir, d as u32, "127.0.0.1:0").await;
        addresses.push(address);
        stops.push(Some(stop));
    }
    let cluster = Arc::new(Cluster::connect(cluster_config(&addresses)).await.unwrap());
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let generators = (0..3i64)
        .map(|d| {
            let schema = schema.clone();
            Box::new(move |_| {
                let rows = Int64Array::from_iter_values(d * 100..d * 100 + 100);
                let batch = RecordBatch::try_new(schema, vec![Arc::new(rows)]).unwrap();
                Box::new(std::iter::once(Ok(batch)))
                    as Box<dyn Iterator<Item = adisk_host::Result<RecordBatch>> + Send>
            }) as adisk_host::load::DiskGenerator
        })
        .collect();
    adisk_host::load::load_generated(&cluster, "t", schema, generators, |_| {})
        .await
        .unwrap();
    assert_eq!(count(&cluster).await.unwrap(), 300);

    for round in 0..2 {
        // Disk 1 stops: taken as dead, its partition lost (one copy).
        let (tx, handle) = stops[1].take().unwrap();
        tx.send(()).unwrap();
        handle.await.unwrap().unwrap();
        let lost = count(&cluster).await;
        assert!(lost.is_err(), "round {round}: {lost:?}");
        // What a failed query does before it reruns: every disk asked, the silent taken as dead.
        let _ = cluster.probe().await;
        assert!(cluster.dead_disks().contains(&1), "round {round}: {lost:?}");
        // While it stays down, probes fail and it stays dead.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let _ = cluster.catalog().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = cluster.catalog().await;
        assert!(cluster.dead_disks().contains(&1), "round {round}");
        // EXPLAIN ANALYZE's `disks` section says which disks are used, and why one is not.
        let usage = cluster.usage();
        assert_eq!(usage[0], "used: disks 0, 2", "round {round}: {usage:?}");
        assert!(
            usage[1].starts_with("disk 1 not used: taken as dead")
                && usage[1].contains("unreachable")
                && usage[1].contains("asked again"),
            "round {round}: {usage:?}"
        );
        // It comes back on its address: used again within 30 s, every row there.
        stops[1] = Some(serve(&dirs[1], 1, &addresses[1]).await.1);
        let took = until_revived(&cluster, 1, Duration::from_secs(30)).await;
        eprintln!("round {round}: disk 1 used again {took:?} after it came back");
        assert_eq!(count(&cluster).await.unwrap(), 300, "round {round}");
        assert_eq!(cluster.usage(), ["used: disks 0, 1, 2"], "round {round}");
    }
    for (tx, handle) in stops.into_iter().flatten() {
        tx.send(()).unwrap();
        handle.await.unwrap().unwrap();
    }
}
