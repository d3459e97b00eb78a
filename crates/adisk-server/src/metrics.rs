//! `/metrics` in Prometheus' text format: the service's queries (by outcome, latency, rows,
//! bytes read, skipped and moved per link), admission (running, queued), logins, and each
//! disk's state asked at scrape time (up, memory granted, jobs running, waiting, finished,
//! failed, temporary space, exchange inboxes). A disk process serves its own
//! ([`render_disk`]): the same state plus what its jobs moved since it started.
use adisk_core::protocol::DiskStatus;
use adisk_host::Cluster;
use adisk_host::sql::QueryOutput;
use bytes::Bytes;
use http_body_util::Full;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::Arc;
use std::time::Duration;

/// Largest HTTP request head the endpoint reads, bytes.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Connections the endpoint serves at once.
const MAX_CONNECTIONS: usize = 64;

/// The service's metrics.
pub struct Metrics {
    registry: Registry,
    /// Queries by outcome: `ok`, `error`, `busy`.
    pub queries: IntCounterVec,
    /// Errors returned to clients, by gRPC code.
    pub errors: IntCounterVec,
    /// Logins by outcome: `ok`, `refused`.
    pub logins: IntCounterVec,
    latency: Histogram,
    rows: IntCounter,
    bytes_read: IntCounter,
    bytes_skipped: IntCounter,
    bytes_to_host: IntCounter,
    bytes_between_disks: IntCounter,
    /// Queries running.
    pub running: IntGauge,
    /// Queries waiting for a turn.
    pub queued: IntGauge,
    /// Queries answered with one endpoint per disk (read from the disks, not through here).
    pub endpoint_queries: IntCounter,
    disk: DiskGauges,
}

struct DiskGauges {
    up: IntGaugeVec,
    memory_total: IntGaugeVec,
    memory_granted: IntGaugeVec,
    jobs_running: IntGaugeVec,
    jobs_waiting: IntGaugeVec,
    jobs_finished: IntGaugeVec,
    jobs_failed: IntGaugeVec,
    jobs_stalled: IntGaugeVec,
    jobs_abandoned: IntGaugeVec,
    temp_files: IntGaugeVec,
    inboxes: IntGaugeVec,
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("a valid metric");
    r.register(Box::new(c.clone())).expect("registered once");
    c
}

fn counter_vec(r: &Registry, name: &str, help: &str, label: &str) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("a valid metric");
    r.register(Box::new(c.clone())).expect("registered once");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("a valid metric");
    r.register(Box::new(g.clone())).expect("registered once");
    g
}

fn disk_gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["disk"]).expect("a valid metric");
    r.register(Box::new(g.clone())).expect("registered once");
    g
}

impl DiskGauges {
    /// Each disk's gauges, registered in `r`.
    fn registered(r: &Registry) -> Self {
        DiskGauges {
            up: disk_gauge(
                r,
                "adisk_disk_up",
                "1 when the disk answered the scrape's status request",
            ),
            memory_total: disk_gauge(
                r,
                "adisk_disk_memory_bytes",
                "The disk's DiskOS memory budget",
            ),
            memory_granted: disk_gauge(
                r,
                "adisk_disk_memory_granted_bytes",
                "Memory granted to the disk's jobs",
            ),
            jobs_running: disk_gauge(r, "adisk_disk_jobs_running", "Jobs running at the disk"),
            jobs_waiting: disk_gauge(
                r,
                "adisk_disk_jobs_waiting",
                "Jobs waiting for admission at the disk",
            ),
            jobs_finished: disk_gauge(
                r,
                "adisk_disk_jobs_finished",
                "Jobs finished at the disk since it started",
            ),
            jobs_failed: disk_gauge(
                r,
                "adisk_disk_jobs_failed",
                "Jobs failed at the disk since it started",
            ),
            jobs_stalled: disk_gauge(
                r,
                "adisk_disk_jobs_stalled",
                "Jobs stopped at the disk because a disklet made no progress",
            ),
            jobs_abandoned: disk_gauge(
                r,
                "adisk_disk_jobs_abandoned",
                "Jobs cancelled at the disk because their host stopped waiting for them",
            ),
            temp_files: disk_gauge(
                r,
                "adisk_disk_temp_files_bytes",
                "Temporary files of the disk's jobs",
            ),
            inboxes: disk_gauge(
                r,
                "adisk_disk_exchange_inboxes",
                "Exchange inboxes open at the disk",
            ),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new();
        let latency = Histogram::with_opts(
            HistogramOpts::new("adisk_query_seconds", "Query latency at the host, seconds")
                .buckets(prometheus::exponential_buckets(0.005, 2.0, 16).expect("buckets")),
        )
        .expect("a valid metric");
        r.register(Box::new(latency.clone()))
            .expect("registered once");
        let disk = DiskGauges::registered(&r);
        Metrics {
            queries: counter_vec(&r, "adisk_queries_total", "Queries by outcome", "outcome"),
            errors: counter_vec(
                &r,
                "adisk_errors_total",
                "Errors returned to clients by gRPC code",
                "code",
            ),
            logins: counter_vec(&r, "adisk_logins_total", "Logins by outcome", "outcome"),
            latency,
            rows: counter(&r, "adisk_rows_returned_total", "Rows returned to clients"),
            bytes_read: counter(
                &r,
                "adisk_bytes_read_total",
                "Bytes the disks read for queries",
            ),
            bytes_skipped: counter(
                &r,
                "adisk_bytes_skipped_total",
                "Bytes the disks skipped (zone maps, pruning)",
            ),
            bytes_to_host: counter(
                &r,
                "adisk_bytes_disk_to_host_total",
                "Bytes the disks shipped to the host",
            ),
            bytes_between_disks: counter(
                &r,
                "adisk_bytes_disk_to_disk_total",
                "Bytes shipped between disks",
            ),
            running: gauge(&r, "adisk_queries_running", "Queries running"),
            queued: gauge(&r, "adisk_queries_queued", "Queries waiting for a turn"),
            endpoint_queries: counter(
                &r,
                "adisk_endpoint_queries_total",
                "Queries answered with per-disk endpoints, read from the disks",
            ),
            disk,
            registry: r,
        }
    }
}

impl Metrics {
    /// Counts a query that answered.
    pub fn answered(&self, out: &QueryOutput) {
        self.queries.with_label_values(&["ok"]).inc();
        self.latency.observe(out.wall.as_secs_f64());
        self.rows.inc_by(out.rows() as u64);
        for scan in &out.scans {
            self.bytes_to_host.inc_by(scan.bytes_received);
            if let Some(s) = &scan.stats {
                self.bytes_read.inc_by(s.bytes_read);
                self.bytes_skipped.inc_by(s.bytes_skipped);
                self.bytes_between_disks.inc_by(s.bytes_shipped_disks);
            }
        }
    }

    /// Counts an error returned to a client.
    pub fn failed(&self, status: &tonic::Status) {
        self.errors
            .with_label_values(&[&format!("{:?}", status.code())])
            .inc();
    }

    /// The text exposition, with every disk's state asked now.
    pub async fn render(&self, cluster: &Cluster) -> String {
        let g = &self.disk;
        for (d, s) in cluster.status().await.into_iter().enumerate() {
            let disk = d.to_string();
            let l = [disk.as_str()];
            match s {
                Ok(s) => {
                    g.up.with_label_values(&l).set(1);
                    g.memory_total
                        .with_label_values(&l)
                        .set(s.memory_bytes as i64);
                    g.memory_granted
                        .with_label_values(&l)
                        .set(s.memory_granted_bytes as i64);
                    g.jobs_running
                        .with_label_values(&l)
                        .set(i64::from(s.jobs_running));
                    g.jobs_waiting
                        .with_label_values(&l)
                        .set(i64::from(s.jobs_waiting));
                    g.jobs_finished
                        .with_label_values(&l)
                        .set(s.jobs_finished as i64);
                    g.jobs_failed
                        .with_label_values(&l)
                        .set(s.jobs_failed as i64);
                    g.jobs_stalled
                        .with_label_values(&l)
                        .set(s.jobs_stalled as i64);
                    g.jobs_abandoned
                        .with_label_values(&l)
                        .set(s.jobs_abandoned as i64);
                    g.temp_files
                        .with_label_values(&l)
                        .set(s.temp_files_bytes as i64);
                    g.inboxes
                        .with_label_values(&l)
                        .set(i64::from(s.exchange_inboxes));
                }
                Err(_) => g.up.with_label_values(&l).set(0),
            }
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding into memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// Answers `GET /metrics` on `listener` with the service's metrics and each disk's state
/// ([`Metrics::render`]) until the process ends.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    cluster: Arc<Cluster>,
) {
    serve_text(listener, move || {
        let (metrics, cluster) = (metrics.clone(), cluster.clone());
        async move { metrics.render(&cluster).await }
    })
    .await
}

/// One disk's own metrics in Prometheus' text format, from its status ([`DiskStatus`]): a
/// disk process serves them on its `--metrics-listen`.
pub fn render_disk(s: &DiskStatus) -> String {
    let r = Registry::new();
    let set = |name: &str, help: &str, v: u64| {
        gauge(&r, name, help).set(i64::try_from(v).unwrap_or(i64::MAX));
    };
    let t = &s.totals;
    set(
        "adisk_disk_memory_bytes",
        "The disk's DiskOS memory budget",
        s.memory_bytes,
    );
    set(
        "adisk_disk_memory_granted_bytes",
        "Memory granted to jobs",
        s.memory_granted_bytes,
    );
    set(
        "adisk_disk_temp_granted_bytes",
        "Temporary disk space granted to jobs",
        s.temp_granted_bytes,
    );
    set(
        "adisk_disk_temp_files_bytes",
        "Temporary files of jobs",
        s.temp_files_bytes,
    );
    set(
        "adisk_disk_jobs_running",
        "Jobs running",
        u64::from(s.jobs_running),
    );
    set(
        "adisk_disk_jobs_waiting",
        "Jobs waiting for admission",
        u64::from(s.jobs_waiting),
    );
    set(
        "adisk_disk_exchange_inboxes",
        "Exchange inboxes open",
        u64::from(s.exchange_inboxes),
    );
    let count = |name: &str, help: &str, v: u64| {
        counter(&r, name, help).inc_by(v);
    };
    count(
        "adisk_disk_jobs_finished_total",
        "Jobs finished since the disk started",
        s.jobs_finished,
    );
    count(
        "adisk_disk_jobs_failed_total",
        "Jobs failed since the disk started",
        s.jobs_failed,
    );
    count(
        "adisk_disk_jobs_stalled_total",
        "Jobs stopped because a disklet made no progress",
        s.jobs_stalled,
    );
    count(
        "adisk_disk_jobs_abandoned_total",
        "Jobs cancelled because their host stopped waiting for them (went away, link lapsed)",
        s.jobs_abandoned,
    );
    count(
        "adisk_disk_bytes_read_total",
        "Bytes read from storage by jobs",
        t.bytes_read,
    );
    count(
        "adisk_disk_bytes_skipped_total",
        "Bytes skipped (zone maps, pruning)",
        t.bytes_skipped,
    );
    count(
        "adisk_disk_rows_read_total",
        "Rows read by jobs",
        t.rows_read,
    );
    count(
        "adisk_disk_bytes_to_host_total",
        "Bytes shipped to the host or an endpoint reader",
        t.bytes_shipped_host,
    );
    count(
        "adisk_disk_bytes_to_disks_total",
        "Bytes shipped to other disks",
        t.bytes_shipped_disks,
    );
    count("adisk_disk_cpu_ns_total", "CPU time of jobs, ns", t.cpu_ns);
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&r.gather(), &mut out)
        .expect("text encoding into memory");
    String::from_utf8(out).expect("the text format is UTF-8")
}

/// Answers `GET /metrics` on `listener` with what `render` makes at each request (HTTP/1.1
/// over hyper, one request per connection) until the process ends; anything else is 404. At
/// most [`MAX_CONNECTIONS`] connections are served at once (past the cap a connection is
/// closed at once: a scraper retries next interval); a request head larger than
/// [`MAX_REQUEST_BYTES`] or slower than 5 s, or a connection open longer than 30 s, is dropped.
pub async fn serve_text<F, Fut>(listener: tokio::net::TcpListener, render: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    let render = Arc::new(render);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service =
                hyper::service::service_fn(move |request| answer(request, render.clone()));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .max_buf_size(MAX_REQUEST_BYTES)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(socket), service);
            let _ = tokio::time::timeout(Duration::from_secs(30), connection).await;
        });
    }
}

/// The answer to one request: the metrics for `GET /metrics`, else 404.
async fn answer<F, Fut>(
    request: hyper::Request<hyper::body::Incoming>,
    render: Arc<F>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let response = if request.method() == hyper::Method::GET && request.uri().path() == "/metrics" {
        hyper::Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(render().await)))
    } else {
        hyper::Response::builder()
            .status(hyper::StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::new()))
    };
    Ok(response.expect("a response of a status, a header and a body"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the endpoint at `address` answers to `request` (the whole response, as text).
    async fn ask(address: std::net::SocketAddr, request: &[u8]) -> String {
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        let _ = socket.write_all(request).await;
        let mut out = Vec::new();
        let _ = socket.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn metrics_are_served_other_paths_are_not_found_and_huge_heads_are_dropped() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve_text(listener, || async {
            "adisk_up 1\n".to_string()
        }));
        let ok = ask(address, b"GET /metrics HTTP/1.1\r\nhost: a\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4") && ok.ends_with("adisk_up 1\n"));
        let scraped = ask(address, b"GET /metrics?x=1 HTTP/1.1\r\nhost: a\r\n\r\n").await;
        assert!(scraped.starts_with("HTTP/1.1 200 OK"), "{scraped}");
        let other = ask(address, b"GET /other HTTP/1.1\r\nhost: a\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = ask(
            address,
            b"POST /metrics HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 404"), "{post}");
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let refused = ask(address, huge.as_bytes()).await;
        assert!(!refused.contains("200 OK"), "{refused}");
        let garbage = ask(address, b"\x00\x01 nonsense\r\n\r\n").await;
        assert!(!garbage.contains("200 OK"), "{garbage}");
    }
}
