use super::*;
use crate::protocol::{DiskletSpec, Route};

fn select() -> DiskletSpec {
    DiskletSpec::Select {
        predicate: None,
        projection: vec![],
        limit: None,
    }
}

fn partition(n: u32) -> DiskletSpec {
    DiskletSpec::Partition {
        keys: vec![],
        partitions: n,
    }
}

#[test]
fn a_chain_reads_its_source_through_every_stage_to_its_sink() {
    let spec = JobBuilder::chain(
        "scan",
        table("t", vec![]),
        vec![select(), select()],
        Sink::Host,
    )
    .build()
    .unwrap();
    assert!(spec.job_id.starts_with("scan-"));
    assert_eq!(spec.program, program_id());
    assert_eq!(spec.stages[0].inputs, vec![Port::Input(0)]);
    assert_eq!(
        spec.stages[1].inputs,
        vec![Port::Stage { stage: 0, port: 0 }]
    );
    assert_eq!(spec.outputs.len(), 1);
    assert_eq!(spec.outputs[0].from, Port::Stage { stage: 1, port: 0 });
    let bare = JobBuilder::chain("read", table("t", vec![]), vec![], Sink::Host)
        .build()
        .unwrap();
    assert_eq!(
        bare.outputs[0].from,
        Port::Input(0),
        "no stages: the input goes out"
    );
}

#[test]
fn a_chain_ending_in_partition_sends_port_i_to_target_i() {
    let targets: Vec<String> = (0..3).map(|i| format!("d{i}")).collect();
    let mut sink = exchange("x", targets.clone(), 1, Route::Broadcast);
    if let Sink::Exchange { target_relays, .. } = &mut sink {
        *target_relays = vec![None, Some("r".into()), None];
    }
    let spec = JobBuilder::chain("p", table("t", vec![]), vec![partition(3)], sink)
        .build()
        .unwrap();
    assert_eq!(spec.outputs.len(), 3);
    for (i, out) in spec.outputs.iter().enumerate() {
        assert_eq!(
            out.from,
            Port::Stage {
                stage: 0,
                port: i as u32
            }
        );
        let Sink::Exchange {
            targets: t,
            target_relays,
            sender,
            ..
        } = &out.sink
        else {
            panic!("an exchange")
        };
        assert_eq!(t, &vec![targets[i].clone()]);
        assert_eq!(*sender, 1);
        assert_eq!(target_relays.len(), 1);
        assert_eq!(target_relays[0].is_some(), i == 1);
    }
}

#[test]
fn ids_are_fresh_and_sizes_programs_and_partitions_are_set() {
    assert_ne!(new_id("x"), new_id("x"));
    let sizes = Sizes {
        scratch_kib: 64,
        buffer_kib: 32,
        temp_kib: 8,
    };
    let spec = JobBuilder::chain("q", table("t", vec![]), vec![select()], Sink::Host)
        .program("prog")
        .sizes(sizes)
        .stage_scratch_kib(vec![128])
        .reading(Some(vec![2, 5]))
        .id("q-d0")
        .build()
        .unwrap();
    assert_eq!(spec.job_id, "q-d0");
    assert_eq!(spec.program, "prog");
    assert_eq!(
        (spec.scratch_kib, spec.buffer_kib, spec.temp_kib),
        (64, 32, 8)
    );
    assert_eq!(spec.stage_scratch_kib, vec![128]);
    let Source::Table { partitions, .. } = &spec.inputs[0] else {
        panic!("a table")
    };
    assert_eq!(partitions, &Some(vec![2, 5]));
    let again = JobBuilder::from_spec(spec.clone())
        .fresh_id("q")
        .build()
        .unwrap();
    assert_ne!(again.job_id, spec.job_id);
    assert_eq!(again.stages, spec.stages);
}

#[test]
fn a_malformed_graph_is_not_built() {
    let mut job = JobBuilder::new("bad");
    let rows = job.input(table("t", vec![]));
    let selected = job.stage(select(), vec![rows]);
    job.output(selected, Sink::Host);
    job.output(selected, Sink::Host);
    let unchecked = job.clone().build_unchecked();
    assert_eq!(unchecked.outputs.len(), 2);
    assert!(matches!(job.build(), Err(GraphError::PortUse { .. })));
    let nothing = JobBuilder::new("empty");
    assert!(matches!(nothing.build(), Err(GraphError::Wiring(_))));
}

#[test]
fn buffers_shrink_until_the_streams_take_half_a_disk() {
    let spec = JobBuilder::chain("q", table("t", vec![]), vec![select()], Sink::Host)
        .build()
        .unwrap();
    let largest = 1024;
    assert_eq!(
        fitted_buffer_kib(std::iter::once(&spec), largest, 1 << 40, 4),
        largest,
        "a large disk takes the largest"
    );
    let small = 8 << 20;
    let kib = fitted_buffer_kib(std::iter::once(&spec), largest, small, 4);
    assert!(kib < largest && kib >= grant::MIN_JOB_BUFFER_KIB);
    let at = |kib: u64| grant::grant_beyond_scratch_at(&spec, kib * 1024, 4).unwrap();
    assert!(at(kib) <= small / 2, "it fits");
    assert!(at(kib * 2) > small / 2, "the next size up would not");
    assert_eq!(
        fitted_buffer_kib(std::iter::once(&spec), largest, 1, 4),
        grant::MIN_JOB_BUFFER_KIB,
        "at the smallest size the disk decides"
    );
}
