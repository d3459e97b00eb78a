//! ABI v2 against the registry and the sandbox, in-process, with WAT modules: install-time
//! validation refuses malformed v2 modules with typed errors; the host hands a v2 guest the
//! input it asks for (`adisk_next_input`) even while another input's buffer is only partly
//! handed over, each input in its own area, and emits on the port the guest names; guest
//! mistakes (bad port, bad input index, overlapping areas, wrong input count) are typed errors.
//! (The C SDK examples run in job graphs in crates/adisk/tests/wasm_graphs.rs.)
use adisk_diskos::disklet::{Emitter, NextInput};
use adisk_wasm::{DiskletRegistry, WasmDisklet, WasmError, WasmLimits, WasmRuntime};
use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

const BUFFER_BYTES: u64 = 64 * 1024;

fn registry() -> (tempfile::TempDir, DiskletRegistry) {
    let dir = tempfile::tempdir().unwrap();
    let r = DiskletRegistry::open(
        dir.path(),
        WasmRuntime::new(WasmLimits::new(BUFFER_BYTES)).unwrap(),
    )
    .unwrap();
    (dir, r)
}

fn area_bytes() -> i64 {
    WasmLimits::new(BUFFER_BYTES).input_area_bytes() as i64
}

/// A v2 module: `shape` section (None: no section), extra imports, memory, and the bodies of
/// the six exports (plug-ins; `$emit` is imported).
struct V2<'a> {
    shape: Option<&'a str>,
    imports: &'a str,
    memory: &'a str,
    area: &'a str,
    next_input: &'a str,
    process: &'a str,
    process_params: &'a str,
}

impl Default for V2<'_> {
    fn default() -> Self {
        V2 {
            shape: Some("inputs=2 outputs=2"),
            imports: "",
            memory: "16 16",
            area: "(i32.add (i32.const 65536) (i32.mul (local.get 0) (local.get 1)))",
            next_input: "(i32.const -1)",
            process: "(i32.const 0)",
            process_params: "i32 i32 i32 i64",
        }
    }
}

impl V2<'_> {
    fn wat(&self) -> Vec<u8> {
        let shape = self
            .shape
            .map(|s| format!(r#"(@custom "adisk_v2" "{s}")"#))
            .unwrap_or_default();
        let V2 {
            imports,
            memory,
            area,
            next_input,
            process,
            process_params,
            ..
        } = self;
        format!(
            r#"(module {shape}
  (import "adisk_v2" "emit" (func $emit (param i32 i32 i32) (result i32)))
  {imports}
  (memory (export "memory") {memory})
  (func (export "adisk_input_area") (param i32 i32) (result i32) {area})
  (func (export "adisk_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "adisk_next_input") (result i32) {next_input})
  (func (export "adisk_process") (param {process_params}) (result i32) {process})
  (func (export "adisk_input_ended") (param i32) (result i32) (i32.const 0))
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#
        )
        .into_bytes()
    }
}

#[test]
fn malformed_v2_modules_are_refused_at_install_with_typed_errors() {
    let (_d, r) = registry();
    let info = r.install("good", &V2::default().wat(), 1024).unwrap();
    assert_eq!((info.abi, info.inputs, info.outputs), (2, 2, 2));
    assert_eq!(
        info.grant_bytes,
        1024 * 1024 + 2 * area_bytes() as u64,
        "scratch + one input area per input"
    );

    let no_next = String::from_utf8(V2::default().wat()).unwrap().replace(
        r#"(func (export "adisk_next_input") (result i32) (i32.const -1))"#,
        "",
    );
    let e = r.install("no_next", no_next.as_bytes(), 1024).unwrap_err();
    assert!(
        matches!(e, WasmError::Abi(_)) && e.to_string().contains("adisk_next_input"),
        "{e}"
    );
    let e = r
        .install(
            "v1_process",
            &V2 {
                process_params: "i32 i32 i64",
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Abi(_)) && e.to_string().contains("adisk_process"),
        "{e}"
    );
    let e = r
        .install(
            "mixed",
            &V2 {
                imports: r#"(import "adisk_v1" "log" (func (param i32 i32)))"#,
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Abi(_)) && e.to_string().contains("mixes ABI versions"),
        "{e}"
    );
    let e = r
        .install(
            "env",
            &V2 {
                imports: r#"(import "env" "memcpy" (func (param i32 i32 i32) (result i32)))"#,
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            WasmError::ForbiddenImport {
                allowed: "adisk_v2",
                ..
            }
        ) && e.to_string().contains("env::memcpy"),
        "{e}"
    );
    let e = r
        .install(
            "bad_skip",
            &V2 {
                imports: r#"(import "adisk_v2" "skip" (func (param i64 i64)))"#,
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Abi(_)) && e.to_string().contains("skip"),
        "{e}"
    );
    let e = r
        .install(
            "no_shape",
            &V2 {
                shape: None,
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Abi(_)) && e.to_string().contains("custom section"),
        "{e}"
    );
    for bad in [
        "inputs=0 outputs=1",
        "inputs=2",
        "inputs=2 outputs=1 colour=red",
        "inputs=two outputs=1",
        "inputs=17 outputs=1",
    ] {
        let e = r
            .install(
                "bad_shape",
                &V2 {
                    shape: Some(bad),
                    ..Default::default()
                }
                .wat(),
                1024,
            )
            .unwrap_err();
        assert!(
            matches!(e, WasmError::Abi(_)) && e.to_string().contains("adisk_v2"),
            "{bad}: {e}"
        );
    }
    // The grant counts one input area per input: 1 MiB + 2 areas = 1408 KiB (22 pages) fits a
    // maximum of 20 pages with two inputs, and refuses it with one.
    r.install(
        "two_areas",
        &V2 {
            memory: "16 20",
            ..Default::default()
        }
        .wat(),
        1024,
    )
    .unwrap();
    let e = r
        .install(
            "one_area",
            &V2 {
                shape: Some("inputs=1 outputs=1"),
                memory: "16 20",
                ..Default::default()
            }
            .wat(),
            1024,
        )
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Memory(_)) && e.to_string().contains("grant"),
        "{e}"
    );
    let names: Vec<String> = r.list().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["good", "two_areas"]);
}

/// Records every call on the port named by the input: `kind` (1 process, 2 input ended,
/// 3 finish), input, rows, buffer address, position. It wants the input it did not process
/// last, while that one has not ended.
const TRACER: &str = r#"(module
  (@custom "adisk_v2" "inputs=2 outputs=2")
  (import "adisk_v2" "emit" (func $emit (param i32 i32 i32) (result i32)))
  (memory (export "memory") 16 16)
  (global $last (mut i32) (i32.const 1))
  (global $ended0 (mut i32) (i32.const 0))
  (global $ended1 (mut i32) (i32.const 0))
  (func $ended (param $i i32) (result i32)
    (if (result i32) (local.get $i) (then (global.get $ended1)) (else (global.get $ended0))))
  (func $record (param $kind i32) (param $input i32) (param $rows i32) (param $buf i32) (param $pos i64) (result i32)
    (i32.store (i32.const 1024) (local.get $kind))
    (i32.store (i32.const 1028) (local.get $input))
    (i32.store (i32.const 1032) (local.get $rows))
    (i32.store (i32.const 1036) (local.get $buf))
    (i64.store (i32.const 1040) (local.get $pos))
    (call $emit (local.get $input) (i32.const 1024) (i32.const 24)))
  (func (export "adisk_input_area") (param $i i32) (param $cap i32) (result i32)
    (i32.add (i32.const 65536) (i32.mul (local.get $i) (local.get $cap))))
  (func (export "adisk_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "adisk_next_input") (result i32)
    (local $want i32)
    (local.set $want (i32.sub (i32.const 1) (global.get $last)))
    (if (result i32) (call $ended (local.get $want)) (then (i32.const -1)) (else (local.get $want))))
  (func (export "adisk_process") (param $input i32) (param $buf i32) (param $len i32) (param $pos i64) (result i32)
    (global.set $last (local.get $input))
    (call $record (i32.const 1) (local.get $input) (i32.load offset=4 (local.get $buf)) (local.get $buf) (local.get $pos)))
  (func (export "adisk_input_ended") (param $i i32) (result i32)
    (if (local.get $i) (then (global.set $ended1 (i32.const 1))) (else (global.set $ended0 (i32.const 1))))
    (call $record (i32.const 2) (local.get $i) (i32.const 0) (i32.const 0) (i64.const 0)))
  (func (export "adisk_finish") (result i32)
    (call $record (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0))))"#;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]))
}

fn batch(start: i64, rows: i64) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(
            (start..start + rows).collect::<Vec<_>>(),
        ))],
    )
    .unwrap()
}

/// Feeds `inputs` as DiskOS does: a buffer of the input the disklet wants (any open one if it
/// wants any, or one that ended), the end of an input once its buffers are gone, then finish.
fn drive(d: &mut WasmDisklet, inputs: Vec<Vec<RecordBatch>>) -> Vec<Vec<RecordBatch>> {
    let mut queues: Vec<VecDeque<RecordBatch>> = inputs.into_iter().map(Into::into).collect();
    let mut open = vec![true; queues.len()];
    let mut positions = vec![0u64; queues.len()];
    let mut out = Emitter::new(d.output_ports());
    let mut emitted = vec![Vec::new(); d.output_ports()];
    loop {
        let i = match d.next_input() {
            NextInput::Input(i) if open[i] => i,
            _ => match open.iter().position(|o| *o) {
                Some(i) => i,
                None => break,
            },
        };
        match queues[i].pop_front() {
            Some(b) => {
                d.process_input(i, &b, positions[i], &mut out).unwrap();
                positions[i] += b.num_rows() as u64;
            }
            None => {
                open[i] = false;
                d.end_input(i, &mut out).unwrap();
            }
        }
        out.take_outputs()
            .into_iter()
            .zip(&mut emitted)
            .for_each(|(o, e)| e.extend(o));
    }
    d.finish_job(&mut out).unwrap();
    out.take_outputs()
        .into_iter()
        .zip(&mut emitted)
        .for_each(|(o, e)| e.extend(o));
    emitted
}

/// (port, kind, input, rows, buffer address, position) of every record, in call order.
type Record = (usize, u32, u32, u32, u32, u64);

fn records(emitted: &[Vec<RecordBatch>]) -> Vec<Record> {
    let mut all: Vec<Record> = Vec::new();
    for (port, batches) in emitted.iter().enumerate() {
        for b in batches {
            for r in b.column(0).as_binary::<i32>().iter().flatten() {
                let u = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
                all.push((
                    port,
                    u(0),
                    u(4),
                    u(8),
                    u(12),
                    u64::from_le_bytes(r[16..24].try_into().unwrap()),
                ));
            }
        }
    }
    all
}

#[test]
fn the_host_hands_over_the_input_the_guest_asks_for_even_mid_buffer() {
    let (_d, r) = registry();
    r.install("tracer", TRACER.as_bytes(), 1024).unwrap();
    let mut d = r
        .instantiate_inputs("tracer", &BTreeMap::new(), None, &[schema(), schema()])
        .unwrap();
    assert_eq!(d.next_input(), NextInput::Input(0), "asked after init");
    // Input 0's first buffer (480 KB) is larger than its input area: it goes over in chunks.
    let inputs = vec![
        vec![batch(0, 60_000), batch(60_000, 10)],
        vec![batch(0, 100), batch(100, 100), batch(200, 100)],
    ];
    let totals = [60_010u64, 300u64];
    let emitted = drive(&mut d, inputs);
    // Records are per port; the guest's calls interleave them: order by a global sequence is
    // lost across ports, so check each port's records and the shape of the whole.
    let all = records(&emitted);
    for (port, kind, input, ..) in &all {
        assert!(
            *kind == 3 || *port == *input as usize,
            "input {input}'s records go to port {input}"
        );
    }
    for input in 0..2u32 {
        let calls: Vec<&Record> = all.iter().filter(|r| r.2 == input && r.1 == 1).collect();
        let mut next = 0u64;
        for (_, _, _, rows, buf, position) in &calls {
            assert_eq!(
                *buf as i64,
                65536 + i64::from(input) * area_bytes(),
                "input {input}'s buffers are in its own area"
            );
            assert_eq!(
                *position, next,
                "input {input}: chunks in order, none lost or repeated"
            );
            next += u64::from(*rows);
        }
        assert_eq!(next, totals[input as usize]);
        assert_eq!(
            all.iter().filter(|r| r.2 == input && r.1 == 2).count(),
            1,
            "input {input} ended once"
        );
    }
    assert!(
        all.iter().filter(|r| r.2 == 0 && r.1 == 1).count() > 2,
        "the large buffer was split"
    );
    assert_eq!(all.iter().filter(|r| r.1 == 3).count(), 1, "finish once");
}

/// The same tracer, with one port: the global call order, to check alternation.
#[test]
fn chunks_of_a_large_buffer_wait_while_the_guest_wants_the_other_input() {
    let (_d, r) = registry();
    let one_port = TRACER
        .replace("inputs=2 outputs=2", "inputs=2 outputs=1")
        .replace(
            "(call $emit (local.get $input)",
            "(call $emit (i32.const 0)",
        );
    r.install("tracer1", one_port.as_bytes(), 1024).unwrap();
    let mut d = r
        .instantiate_inputs("tracer1", &BTreeMap::new(), None, &[schema(), schema()])
        .unwrap();
    let inputs = vec![
        vec![batch(0, 60_000), batch(60_000, 10)],
        vec![batch(0, 100), batch(100, 100), batch(200, 100)],
    ];
    let all = records(&drive(&mut d, inputs));
    let order: Vec<(u32, u32)> = all.iter().map(|r| (r.1, r.2)).collect();
    // While both inputs have buffers the guest alternates, so input 0's chunks are interleaved
    // with input 1's buffers: 0 1 0 1 0 1 0 …; then the ends (1 first: it ran out first), finish.
    let processes: Vec<u32> = order
        .iter()
        .filter(|(k, _)| *k == 1)
        .map(|(_, i)| *i)
        .collect();
    let alternating: Vec<u32> = (0..processes.len() as u32).map(|i| i % 2).collect();
    assert_eq!(processes, alternating, "{order:?}");
    assert!(
        processes.len() >= 7,
        "input 0 has at least 4 chunks, input 1 three buffers: {order:?}"
    );
    assert_eq!(
        &order[order.len() - 3..],
        &[(2, 1), (2, 0), (3, 0)],
        "{order:?}"
    );
}

#[test]
fn guest_mistakes_are_typed_errors() {
    let (_d, r) = registry();
    let two = [schema(), schema()];
    // Emitting on a port it does not have: the import answers -6, which the guest returns.
    r.install(
        "bad_port",
        &V2 {
            process: "(call $emit (i32.const 5) (i32.const 0) (i32.const 8))",
            ..Default::default()
        }
        .wat(),
        1024,
    )
    .unwrap();
    let mut d = r
        .instantiate_inputs("bad_port", &BTreeMap::new(), None, &two)
        .unwrap();
    let e = d
        .process_input(0, &batch(0, 10), 0, &mut Emitter::new(2))
        .unwrap_err();
    assert!(
        matches!(
            e,
            WasmError::Guest {
                phase: "process",
                ..
            }
        ) && e.to_string().contains("-6"),
        "{e}"
    );
    // Asking for an input it does not have.
    r.install(
        "bad_next",
        &V2 {
            next_input: "(i32.const 7)",
            ..Default::default()
        }
        .wat(),
        1024,
    )
    .unwrap();
    let e = r
        .instantiate_inputs("bad_next", &BTreeMap::new(), None, &two)
        .unwrap_err();
    assert!(
        matches!(
            e,
            WasmError::Guest {
                phase: "next_input",
                ..
            }
        ) && e.to_string().contains("returned 7"),
        "{e}"
    );
    // Two inputs in one area.
    r.install(
        "overlap",
        &V2 {
            area: "(i32.const 65536)",
            ..Default::default()
        }
        .wat(),
        1024,
    )
    .unwrap();
    let e = r
        .instantiate_inputs("overlap", &BTreeMap::new(), None, &two)
        .unwrap_err();
    assert!(
        matches!(e, WasmError::Guest { phase: "init", .. }) && e.to_string().contains("overlaps"),
        "{e}"
    );
    // As many inputs as it declares.
    let e = r
        .instantiate_inputs("bad_port", &BTreeMap::new(), None, &two[..1])
        .unwrap_err();
    assert!(
        matches!(e, WasmError::InvalidJob(_)) && e.to_string().contains("takes 2 input(s)"),
        "{e}"
    );
    // Fuel applies to v2 calls as to v1: a spinning next_input runs out.
    r.install(
        "spin",
        &V2 {
            next_input: "(loop $l (br $l)) (i32.const -1)",
            ..Default::default()
        }
        .wat(),
        1024,
    )
    .unwrap();
    let e = r
        .instantiate_inputs("spin", &BTreeMap::new(), Some(10_000_000), &two)
        .unwrap_err();
    assert!(
        matches!(
            e,
            WasmError::BudgetExceeded {
                phase: "next_input",
                ..
            }
        ),
        "{e}"
    );
}
