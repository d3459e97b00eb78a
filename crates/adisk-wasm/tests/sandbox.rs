//! Hostile and well-behaved modules against the registry and the sandbox, in-process
//! (the multi-process versions are in crates/adisk/tests/wasm_disklets.rs).
use adisk_diskos::disklet::Emitter;
use adisk_wasm::{DiskletRegistry, WasmError, WasmLimits, WasmRuntime};
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::collections::BTreeMap;
use std::sync::Arc;

const BUFFER_BYTES: u64 = 64 * 1024;

/// A module with the four required exports; `process`, `init` bodies and extra items plugged in.
fn module(imports: &str, memory: &str, init: &str, process: &str) -> Vec<u8> {
    format!(
        r#"(module
  (import "adisk_v1" "emit" (func $emit (param i32 i32) (result i32)))
  {imports}
  (memory (export "memory") {memory})
  (func (export "adisk_input_area") (param i32) (result i32) (i32.const 65536))
  (func (export "adisk_init") (param i32 i32) (result i32) {init})
  (func (export "adisk_process") (param i32 i32 i64) (result i32) {process})
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#
    )
    .into_bytes()
}

fn ok_module(process: &str) -> Vec<u8> {
    module("", "16 16", "(i32.const 0)", process)
}

fn registry() -> (tempfile::TempDir, DiskletRegistry) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = WasmRuntime::new(WasmLimits::new(BUFFER_BYTES)).unwrap();
    let r = DiskletRegistry::open(dir.path(), runtime).unwrap();
    (dir, r)
}

fn input() -> (SchemaRef, RecordBatch) {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from((0..1000).collect::<Vec<i64>>()))],
    )
    .unwrap();
    (schema, batch)
}

fn run(r: &DiskletRegistry, name: &str, fuel: Option<u64>) -> Result<usize, WasmError> {
    let (schema, batch) = input();
    let mut d = r.instantiate(name, &BTreeMap::new(), fuel, &schema)?;
    let mut e = Emitter::new(1);
    d.process_batch(&batch, 0, &mut e)?;
    d.finish_job(&mut e)?;
    Ok(e.take_outputs()[0].len())
}

/// emits the first 8 bytes of the input once per buffer: the well-behaved control.
const ECHO: &str = "(drop (call $emit (local.get 0) (i32.const 8))) (i32.const 0)";

#[test]
fn good_module_runs_and_is_cached() {
    let (_d, r) = registry();
    let info = r.install("echo", &ok_module(ECHO), 1024).unwrap();
    assert!(info.compiled && info.compile_ns > 0);
    assert_eq!(run(&r, "echo", None).unwrap(), 1);
    let (schema, _) = input();
    let d = r
        .instantiate("echo", &BTreeMap::new(), None, &schema)
        .unwrap();
    assert_eq!(
        d.setup_ns().0,
        0,
        "second instantiation reuses the compiled module"
    );
}

#[test]
fn install_rejections_are_typed() {
    let (_d, r) = registry();
    let malformed = r
        .install("bad", b"\0asm\x01\0\0\0garbage", 1024)
        .unwrap_err();
    assert!(matches!(malformed, WasmError::Malformed(_)), "{malformed}");
    let wasi = module(
        r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
        "16 16",
        "(i32.const 0)",
        "(i32.const 0)",
    );
    let e = r.install("wasi", &wasi, 1024).unwrap_err();
    assert!(
        matches!(e, WasmError::ForbiddenImport { .. })
            && e.to_string().contains("wasi_snapshot_preview1"),
        "{e}"
    );
    let e = r
        .install(
            "huge",
            &module("", "1 65536", "(i32.const 0)", "(i32.const 0)"),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Memory(_)) && e.to_string().contains("grant"),
        "{e}"
    );
    let e = r
        .install(
            "nomax",
            &module("", "16", "(i32.const 0)", "(i32.const 0)"),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Memory(_)) && e.to_string().contains("no maximum"),
        "{e}"
    );
    let e = r
        .install("noexp", b"(module (memory (export \"memory\") 1 1))", 1024)
        .unwrap_err();
    assert!(matches!(e, WasmError::Abi(_)), "{e}");
    let e = r.install("../x", &ok_module(ECHO), 1024).unwrap_err();
    assert!(matches!(e, WasmError::BadName(_)), "{e}");
    assert!(r.list().is_empty(), "nothing was installed");
}

#[test]
fn run_time_failures_are_contained() {
    let (_d, r) = registry();
    r.install("echo", &ok_module(ECHO), 1024).unwrap();
    r.install("spin", &ok_module("(loop $l (br $l)) (i32.const 0)"), 1024)
        .unwrap();
    r.install(
        "oob",
        &ok_module("(drop (i32.load (i32.const 0x7ffffff0))) (i32.const 0)"),
        1024,
    )
    .unwrap();
    // grant = 64 KiB scratch + 192 KiB input area = 4 pages; declared max 4; asks for 100 more.
    r.install(
        "grow",
        &module(
            "",
            "4 4",
            "(i32.const 0)",
            "(drop (memory.grow (i32.const 100))) (i32.const 0)",
        ),
        64,
    )
    .unwrap();
    r.install(
        "flood",
        &ok_module(
            "(loop $l (drop (call $emit (i32.const 0) (i32.const 65536))) (br $l)) (i32.const 0)",
        ),
        1024,
    )
    .unwrap();
    r.install(
        "initrap",
        &module("", "16 16", "(unreachable)", "(i32.const 0)"),
        1024,
    )
    .unwrap();
    r.install("errcode", &ok_module("(i32.const -4)"), 1024)
        .unwrap();
    let e = run(&r, "spin", Some(10_000_000)).unwrap_err();
    assert!(
        matches!(e, WasmError::BudgetExceeded { .. })
            && e.to_string().contains("CPU budget exceeded"),
        "{e}"
    );
    let e = run(&r, "oob", None).unwrap_err();
    assert!(
        matches!(e, WasmError::Trap { .. }) && e.to_string().contains("out of bounds"),
        "{e}"
    );
    let e = run(&r, "grow", None).unwrap_err();
    assert!(matches!(e, WasmError::MemoryExceeded { .. }), "{e}");
    let e = run(&r, "flood", None).unwrap_err();
    assert!(matches!(e, WasmError::OutputExceeded { .. }), "{e}");
    let e = run(&r, "initrap", None).unwrap_err();
    assert!(matches!(e, WasmError::Trap { phase: "init", .. }), "{e}");
    let e = run(&r, "errcode", None).unwrap_err();
    assert!(
        matches!(e, WasmError::Guest { .. }) && e.to_string().contains("-4"),
        "{e}"
    );
    assert!(matches!(
        run(&r, "nosuch", None).unwrap_err(),
        WasmError::NotInstalled(_)
    ));
    assert_eq!(
        run(&r, "echo", None).unwrap(),
        1,
        "the runtime serves the next job"
    );
}

#[test]
fn registry_persists_and_rechecks_hash() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        DiskletRegistry::open(
            dir.path(),
            WasmRuntime::new(WasmLimits::new(BUFFER_BYTES)).unwrap(),
        )
        .unwrap()
    };
    let r = open();
    r.install("echo", &ok_module(ECHO), 1024).unwrap();
    drop(r);
    let r = open();
    let listed = r.list();
    assert_eq!(listed.len(), 1);
    assert!(
        !listed[0].compiled,
        "a restarted disk compiles on first use"
    );
    let (schema, _) = input();
    let first = r
        .instantiate("echo", &BTreeMap::new(), None, &schema)
        .unwrap();
    assert!(first.setup_ns().0 > 0, "first run after a restart compiles");
    let second = r
        .instantiate("echo", &BTreeMap::new(), None, &schema)
        .unwrap();
    assert_eq!(
        second.setup_ns().0,
        0,
        "second run reuses the compiled module"
    );
    assert!(r.remove("echo").unwrap());
    assert!(!r.remove("echo").unwrap());
    // A tampered module is refused.
    let r2 = open();
    assert!(r2.list().is_empty());
    r2.install("echo", &ok_module(ECHO), 1024).unwrap();
    std::fs::write(
        dir.path().join("disklets/echo.wasm"),
        ok_module("(i32.const 0)"),
    )
    .unwrap();
    let e = open()
        .instantiate("echo", &BTreeMap::new(), None, &schema)
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Registry(_)) && e.to_string().contains("sha256"),
        "{e}"
    );
}

/// A guest that loops is stopped soon after its job is cancelled — in `process` and in
/// `init` — with a typed `Cancelled`, long before its CPU budget would run out.
#[test]
fn cancelling_the_job_stops_a_looping_guest() {
    let (_dir, r) = registry();
    let spin = "(loop $l (br $l)) (i32.const 0)";
    r.install("spin", &ok_module(spin), 1024).unwrap();
    r.install("spin_init", &module("", "16 16", spin, ECHO), 1024)
        .unwrap();
    let (schema, batch) = input();
    let stop_after = |ms: u64| {
        let (tx, flag) = adisk_diskos::job::CancelFlag::new();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            tx.send_replace(true);
        });
        flag
    };
    let started = std::time::Instant::now();
    let max_fuel = Some(r.runtime().limits().fuel_max);
    let flag = stop_after(100);
    let mut d = r
        .instantiate_for_job("spin", &BTreeMap::new(), max_fuel, &[schema.clone()], flag)
        .unwrap();
    let e = d
        .process_batch(&batch, 0, &mut Emitter::new(1))
        .unwrap_err();
    assert!(
        matches!(
            e,
            WasmError::Cancelled {
                phase: "process",
                ..
            }
        ),
        "{e}"
    );
    let e = r
        .instantiate_for_job(
            "spin_init",
            &BTreeMap::new(),
            max_fuel,
            &[schema],
            stop_after(100),
        )
        .err()
        .expect("init stopped");
    assert!(
        matches!(e, WasmError::Cancelled { phase: "init", .. }),
        "{e}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "stopped within an interrupt check of the cancel: {:?}",
        started.elapsed()
    );
    assert!(matches!(
        adisk_wasm::to_diskos_error(e),
        adisk_diskos::DiskOsError::Cancelled
    ));
}
