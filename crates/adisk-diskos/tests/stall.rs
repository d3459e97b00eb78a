//! A disklet that asks for more output forever without emitting any (a bug: the join's merge
//! did this with one key's cross product larger than its output allowance) cannot hold a disk:
//! DiskOS stops its job with `NoProgress`, frees its grant and counts it in `jobs_stalled`; a
//! disklet that holds output back but emits some on every call runs to its end.
use adisk_core::builder::JobBuilder;
use adisk_core::protocol::{DiskletSpec, Sink, Source};
use adisk_diskos::apps::{AppDisklets, AppStage};
use adisk_diskos::disklet::{Disklet, Emitter, InputBuffer};
use adisk_diskos::stream::StreamRx;
use adisk_diskos::{DiskOs, DiskOsConfig, DiskOsError};
use adisk_storage::store::DiskStore;
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

struct NoPipes;

impl adisk_diskos::job::PipeConnector for NoPipes {
    fn send(
        &self,
        _: adisk_diskos::job::PipeRoute,
        _: SchemaRef,
        _: StreamRx,
        _: adisk_diskos::job::Intact,
    ) -> Pin<Box<dyn Future<Output = adisk_diskos::Result<(u64, u64)>> + Send>> {
        Box::pin(async { Err(DiskOsError::Pipe("no pipes here".into())) })
    }
}

/// After its first buffer, says it holds `calls` more outputs; emits a row on each call for
/// more if `emits`, nothing otherwise.
struct Holder {
    schema: SchemaRef,
    left: u64,
    emits: bool,
}

impl Disklet for Holder {
    fn name(&self) -> &'static str {
        "holder"
    }
    fn output_schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn process(&mut self, _: &InputBuffer<'_>, _: &mut Emitter) -> adisk_diskos::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &mut Emitter) -> adisk_diskos::Result<()> {
        Ok(())
    }
    fn has_more_output(&self) -> bool {
        self.left > 0
    }
    fn more_output(&mut self, out: &mut Emitter) -> adisk_diskos::Result<()> {
        if self.emits {
            self.left -= 1;
            let row = Int64Array::from(vec![self.left as i64]);
            out.emit(
                0,
                RecordBatch::try_new(self.schema.clone(), vec![Arc::new(row)]).expect("a row"),
            );
        }
        Ok(())
    }
}

struct Apps;

impl AppDisklets for Apps {
    fn build(&self, stage: AppStage<'_>) -> adisk_diskos::Result<Box<dyn Disklet>> {
        Ok(Box::new(Holder {
            schema: stage.inputs[0].clone(),
            left: 20_000,
            emits: stage.disklet == "emits",
        }))
    }
}

fn schema() -> Schema {
    Schema::new(vec![Field::new("x", DataType::Int64, false)])
}

/// Runs the one-stage job of disklet `name` over one buffer: its result and rows out.
async fn run(os: &Arc<DiskOs>, name: &str) -> (adisk_diskos::Result<()>, usize) {
    let stage = DiskletSpec::App {
        app: "test".into(),
        name: name.into(),
        params: serde_json::Value::Null,
        inputs: 1,
        ports: 1,
    };
    let source = Source::Host { schema: schema() };
    let spec = JobBuilder::chain("test", source, vec![stage], Sink::Host)
        .id(format!("job-{name}"))
        .program("test")
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut running = os.start_job(spec, Some(rx)).await.expect("admitted");
    let input = Int64Array::from(vec![1, 2, 3]);
    let batch = RecordBatch::try_new(Arc::new(schema()), vec![Arc::new(input)]).unwrap();
    tx.send(batch).await.unwrap();
    drop(tx);
    let mut rows = 0;
    while let Some(buffer) = running.output.recv().await {
        rows += buffer.batch.num_rows();
    }
    (running.done.await.expect("the job ends"), rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disklet_that_never_emits_what_it_holds_is_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(DiskStore::open(tmp.path(), 0).expect("store"));
    let os = DiskOs::new(
        DiskOsConfig::new(0, 16 << 20, 64 << 10, 2),
        store,
        Arc::new(NoPipes),
    );
    os.set_app_disklets(Arc::new(Apps));

    let started = std::time::Instant::now();
    let (stuck, rows) = run(&os, "stuck").await;
    assert!(
        matches!(&stuck, Err(DiskOsError::NoProgress { disklet, calls })
            if disklet == "holder" && *calls == 10_000),
        "{stuck:?}"
    );
    assert_eq!(rows, 0);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let status = os.status();
    assert_eq!((status.jobs_failed, status.jobs_stalled), (1, 1));
    assert_eq!(status.memory_granted_bytes, 0);
    assert_eq!(status.jobs_running, 0);

    // More calls than the bound, each with output: progress, so it runs to its end.
    let (emits, rows) = run(&os, "emits").await;
    assert!(emits.is_ok(), "{emits:?}");
    assert_eq!(rows, 20_000);
    let status = os.status();
    assert_eq!((status.jobs_finished, status.jobs_stalled), (1, 1));
}
