//! Disk-to-disk exchanges of a table's columns, measured (`adisk bench exchange`), and the
//! loopback Flight `DoPut` rate they are compared with.
//!
//! An exchange here is one job per sending disk (its partitions of the table, projected,
//! routed by hash of the first column to the receivers, or to one receiver for a pair) and one
//! job per receiving disk (the pipe, counted at the disk: only the count reaches the host). The
//! rows counted by the receivers must equal the rows read by the senders.
use crate::client::cluster::Cluster;
use crate::{HostError, Result};
use adisk_core::builder::{JobBuilder, exchange, table as table_input};
use adisk_core::protocol::{DiskletSpec, Route, Sink, Source};
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use datafusion::prelude::{col, lit};
use futures::stream::{self, BoxStream, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tonic::{Request, Response, Status, Streaming};

/// Who sends to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Disk `from` sends its partitions to disk `to`.
    Pair {
        /// Sender.
        from: u32,
        /// Receiver.
        to: u32,
    },
    /// Every disk sends to every disk, rows routed by hash.
    AllToAll,
}

/// What one exchange moved.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExchangeRun {
    /// Arrow IPC bytes the senders shipped.
    pub bytes: u64,
    /// Rows the receivers counted.
    pub rows: u64,
    /// Wall time from the first start to the last count.
    pub wall_ns: u64,
}

impl ExchangeRun {
    /// Shipped MB/s (10^6 bytes).
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / (self.wall_ns.max(1) as f64 / 1e9)
    }
}

/// Runs one exchange of `columns` of `table` in `pattern` (in the cluster's exchange mode).
///
/// # Errors
/// Unknown table or columns, a disk failing, or receivers counting other than what was sent.
pub async fn run(
    cluster: &Cluster,
    table: &str,
    columns: &[String],
    pattern: Pattern,
) -> Result<ExchangeRun> {
    let catalog = cluster.catalog().await?;
    let entry = catalog.table(table)?;
    let schema = projected(&entry.schema, columns)?;
    let holders: Vec<u32> = (0..cluster.disk_count())
        .filter(|d| entry.placements.iter().any(|(p, _)| p == d))
        .collect();
    let (senders, receivers): (Vec<u32>, Vec<u32>) = match pattern {
        Pattern::Pair { from, to } => (vec![from], vec![to]),
        Pattern::AllToAll => (holders, (0..cluster.disk_count()).collect()),
    };
    let id = adisk_core::builder::new_id("exchange");
    let targets: Vec<String> = receivers
        .iter()
        .map(|d| cluster.address(*d).to_string())
        .collect();
    let route = Route::Hash {
        keys: vec![crate::client::jobs::encode_expr(&col(schema
            .field(0)
            .name()))?],
    };
    let mut jobs = Vec::new();
    for (i, d) in senders.iter().enumerate() {
        let source = table_input(table, columns.to_vec());
        let sink = exchange(id.clone(), targets.clone(), i as u32, route.clone());
        let spec = JobBuilder::chain("exchange", source, vec![], sink)
            .id(format!("{id}-send-{d}"))
            .build()?;
        jobs.push((*d, spec));
    }
    let count = count_rows(&schema).await?;
    for d in &receivers {
        let source = Source::Pipe {
            exchange_id: id.clone(),
            senders: senders.len() as u32,
            schema: schema.as_ref().clone(),
        };
        let spec = JobBuilder::chain("exchange", source, vec![count.clone()], Sink::Host)
            .id(format!("{id}-recv-{d}"))
            .build()?;
        jobs.push((*d, spec));
    }
    let started = Instant::now();
    let mut rows = 0u64;
    crate::client::jobs::run_phase(cluster, jobs, |_, batch| {
        rows += counted(&batch);
        Ok(())
    })
    .await?;
    let wall_ns = started.elapsed().as_nanos() as u64;
    let mut run = ExchangeRun {
        rows,
        wall_ns,
        ..Default::default()
    };
    let mut read = 0;
    for d in &senders {
        let s = cluster.job_stats(*d, &format!("{id}-send-{d}")).await?;
        run.bytes += s.bytes_shipped_disks;
        read += s.rows_read;
    }
    if read != rows {
        return Err(HostError::Invalid(format!(
            "exchange {id}: the senders read {read} rows, the receivers counted {rows}"
        )));
    }
    Ok(run)
}

/// A stage counting its input rows (one row out).
async fn count_rows(schema: &SchemaRef) -> Result<DiskletSpec> {
    let count = datafusion::functions_aggregate::expr_fn::count(lit(1));
    crate::client::jobs::aggregate_stage(schema, vec![], vec![count.alias("rows")], false).await
}

/// The same columns scanned and counted at disk `d`, nothing exchanged: what the senders'
/// side costs alone. Returns (Arrow bytes scanned, wall ns).
///
/// # Errors
/// Unknown table or columns, the disk failing.
pub async fn scan_only(
    cluster: &Cluster,
    table: &str,
    columns: &[String],
    d: u32,
) -> Result<(u64, u64)> {
    let id = format!("{}-scan-{d}", adisk_core::builder::new_id("exchange"));
    let catalog = cluster.catalog().await?;
    let schema = projected(&catalog.table(table)?.schema, columns)?;
    let source = table_input(table, columns.to_vec());
    let spec = JobBuilder::chain(
        "exchange",
        source,
        vec![count_rows(&schema).await?],
        Sink::Host,
    )
    .id(id.clone())
    .build()?;
    let started = Instant::now();
    crate::client::jobs::run_phase(cluster, vec![(d, spec)], |_, _| Ok(())).await?;
    let wall_ns = started.elapsed().as_nanos() as u64;
    Ok((cluster.job_stats(d, &id).await?.bytes_scanned, wall_ns))
}

fn projected(schema: &SchemaRef, columns: &[String]) -> Result<SchemaRef> {
    let fields = columns
        .iter()
        .map(|c| {
            schema
                .field_with_name(c)
                .cloned()
                .map_err(|_| HostError::Invalid(format!("unknown column `{c}`")))
        })
        .collect::<Result<Vec<_>>>()?;
    if fields.is_empty() {
        return Err(HostError::Invalid(
            "an exchange needs at least one column".into(),
        ));
    }
    Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
}

fn counted(batch: &RecordBatch) -> u64 {
    batch
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .map(|v| *v as u64)
        .sum()
}

/// The loopback Flight `DoPut` rate: `batches` sent `repeats` times from this process to a
/// Flight server in this process that decodes nothing and keeps nothing, over a link set up
/// as the members' are (tuned sockets, pings, and TLS when `tls` is given: the cluster's
/// material on both ends). Returns (bytes, ns).
///
/// # Errors
/// The server cannot be bound or the call fails.
pub async fn loopback_doput(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    repeats: usize,
    tls: Option<&adisk_core::tls::TlsMaterial>,
) -> Result<(u64, u64)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| HostError::Invalid(format!("binding the loopback sink: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| HostError::Invalid(e.to_string()))?;
    let bytes = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(discard_server(
        listener,
        bytes.clone(),
        tls.cloned(),
        stop_rx,
    ));
    let deadlines = adisk_core::config::Deadlines::default();
    let endpoint = adisk_core::net::member_endpoint(
        &address.to_string(),
        deadlines,
        std::time::Duration::from_secs(5),
        tls,
    )
    .map_err(|e| HostError::Invalid(e.to_string()))?;
    let channel = endpoint
        .connect_with_connector(adisk_core::net::connector())
        .await
        .map_err(|e| HostError::Invalid(format!("connecting to the loopback sink: {e}")))?;
    let mut client = arrow_flight::FlightClient::new(channel);
    let started = Instant::now();
    for _ in 0..repeats {
        let data = arrow_flight::encode::FlightDataEncoderBuilder::new()
            .with_schema(schema.clone())
            .with_flight_descriptor(Some(FlightDescriptor::new_cmd(b"discard".to_vec())))
            .build(stream::iter(batches.clone().into_iter().map(Ok)));
        let results = client
            .do_put(data)
            .await
            .map_err(|e| HostError::Invalid(format!("loopback DoPut: {e}")))?;
        results.collect::<Vec<_>>().await;
    }
    let ns = started.elapsed().as_nanos() as u64;
    let _ = stop_tx.send(());
    let _ = server.await;
    Ok((bytes.load(Ordering::Relaxed), ns))
}

/// The discarding Flight server of [`loopback_doput`] on `listener`, its sockets tuned as a
/// disk's are, until `stop`.
async fn discard_server(
    listener: tokio::net::TcpListener,
    bytes: Arc<AtomicU64>,
    tls: Option<adisk_core::tls::TlsMaterial>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let service = FlightServiceServer::new(Discard { bytes }).max_decoding_message_size(64 << 20);
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        s.inspect(|stream| {
            let _ = adisk_core::net::tune(stream);
        })
    });
    let mut builder = adisk_core::net::server_windows(tonic::transport::Server::builder());
    if let Some(t) = &tls {
        builder = builder
            .tls_config(t.server())
            .map_err(|e| HostError::Invalid(format!("TLS of the loopback sink: {e}")))?;
    }
    builder
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.await;
        })
        .await
        .map_err(|e| HostError::Invalid(format!("the loopback sink: {e}")))
}

/// A Flight server that counts what `DoPut` brings and drops it.
struct Discard {
    bytes: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl FlightService for Discard {
    type HandshakeStream = BoxStream<'static, std::result::Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, std::result::Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, std::result::Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, std::result::Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, std::result::Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, std::result::Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, std::result::Result<ActionType, Status>>;

    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn do_get(
        &self,
        _r: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn do_exchange(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn do_action(
        &self,
        _r: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        let mut incoming = request.into_inner();
        while let Some(fd) = incoming.message().await? {
            self.bytes.fetch_add(
                (fd.data_header.len() + fd.data_body.len()) as u64,
                Ordering::Relaxed,
            );
        }
        Ok(Response::new(stream::empty().boxed()))
    }
}
