//! Admission comes before any stage code runs (issue 10): a job refused for memory never
//! instantiates its user disklet — the guest's `init`, which would have emitted, never runs —
//! while the same job on a disk with room does run it.
use adisk_core::builder::JobBuilder;
use adisk_core::protocol::{DiskletSpec, Sink, Source};
use adisk_diskos::stream::StreamRx;
use adisk_diskos::{DiskOs, DiskOsConfig, DiskOsError};
use adisk_storage::store::DiskStore;
use adisk_wasm::{DiskletRegistry, WasmLimits, WasmRuntime};
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

const BUFFER_BYTES: u64 = 64 * 1024;

/// A module whose `init` emits 8 bytes (an effect that would be visible had it run) and whose
/// `process` emits nothing.
const EMITS_AT_INIT: &str = r#"(module
  (import "adisk_v1" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 16 16)
  (func (export "adisk_input_area") (param i32) (result i32) (i32.const 65536))
  (func (export "adisk_init") (param i32 i32) (result i32) (drop (call $emit (i32.const 0) (i32.const 8))) (i32.const 0))
  (func (export "adisk_process") (param i32 i32 i64) (result i32) (i32.const 0))
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#;

/// Disk-to-disk pipes are not part of these jobs.
struct NoPipes;

impl adisk_diskos::job::PipeConnector for NoPipes {
    fn send(
        &self,
        route: adisk_diskos::job::PipeRoute,
        _: arrow::datatypes::SchemaRef,
        _: StreamRx,
        _: adisk_diskos::job::Intact,
    ) -> Pin<Box<dyn Future<Output = adisk_diskos::Result<(u64, u64)>> + Send>> {
        Box::pin(async move {
            Err(DiskOsError::Pipe(format!(
                "no pipes in this test (asked for {})",
                route.target
            )))
        })
    }
}

fn disk(dir: &std::path::Path, memory_bytes: u64, registry: Arc<DiskletRegistry>) -> Arc<DiskOs> {
    let store = Arc::new(DiskStore::open(dir, 0).expect("store"));
    let os = DiskOs::new(
        DiskOsConfig::new(0, memory_bytes, BUFFER_BYTES, 2),
        store,
        Arc::new(NoPipes),
    );
    os.set_user_disklets(registry);
    os
}

/// A user disklet over a host stream (to be built).
fn job(schema: &Schema) -> JobBuilder {
    let stages = vec![DiskletSpec::Wasm {
        name: "emits_at_init".into(),
        params: Default::default(),
        fuel: None,
    }];
    JobBuilder::chain(
        "test",
        Source::Host {
            schema: schema.clone(),
        },
        stages,
        Sink::Host,
    )
    .id("guest")
    .program("test")
}

fn instances(registry: &DiskletRegistry) -> u64 {
    registry
        .list()
        .iter()
        .find(|d| d.name == "emits_at_init")
        .map_or(0, |d| d.instances)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_job_never_runs_guest_init() {
    let tmp = tempfile::tempdir().unwrap();
    let runtime = WasmRuntime::new(WasmLimits::new(BUFFER_BYTES)).unwrap();
    let registry = Arc::new(DiskletRegistry::open(&tmp.path().join("r"), runtime).unwrap());
    // 8 MiB of scratch: more than the small disk's whole 4 MiB budget.
    registry
        .install("emits_at_init", EMITS_AT_INIT.as_bytes(), 8 * 1024)
        .unwrap();
    let schema = Schema::new(vec![Field::new("x", DataType::Int64, false)]);

    let small = disk(&tmp.path().join("small"), 4 << 20, registry.clone());
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let refused = small
        .start_job(job(&schema).build().unwrap(), Some(rx))
        .await;
    assert!(
        matches!(refused, Err(DiskOsError::GrantTooLarge { .. })),
        "refused for memory: {:?}",
        refused.err()
    );
    assert_eq!(
        instances(&registry),
        0,
        "the refused job instantiated its disklet (ran guest init)"
    );
    assert_eq!(small.status().memory_granted_bytes, 0);

    // The control: on a disk with room, the same job runs the guest's init once and its output
    // carries what init emitted.
    let large = disk(&tmp.path().join("large"), 64 << 20, registry.clone());
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut running = large
        .start_job(job(&schema).build().unwrap(), Some(rx))
        .await
        .expect("admitted");
    assert_eq!(instances(&registry), 1);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    tx.send(batch).await.unwrap();
    drop(tx);
    let mut rows = 0;
    while let Some(buffer) = running.output.recv().await {
        rows += buffer.batch.num_rows();
    }
    running.done.await.unwrap().expect("the job succeeds");
    assert_eq!(rows, 1, "one output row: the 8 bytes init emitted");
}
