//! The shape of a job graph ([`JobSpec`]), checked from the spec alone: before a disk admits a
//! job, and when the host builds one.
//!
//! A valid graph: at least one input; every stage reads existing ports of inputs or of
//! *earlier* stages (so there are no cycles), as many as its disklet takes; every port is read
//! exactly once (by a stage or by an output); at most one output goes to the host; an exchange
//! reaches each of its targets once per job; each temporary stream is written by one output
//! and read by inputs that do not feed that output (which would wait for themselves); named
//! results are written once per (table, partition).
use crate::protocol::{
    JobSpec, MAX_JOB_GRAPH_NODES, MAX_STAGE_PORTS, Port, Sink, Source, StoredStream,
};
use std::collections::{BTreeMap, BTreeSet};

/// Why a job graph is malformed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    /// More nodes than [`MAX_JOB_GRAPH_NODES`], or a stage with more ports than [`MAX_STAGE_PORTS`].
    #[error("job graph too large: {0}")]
    TooLarge(String),
    /// A port that does not exist (yet) where it is read.
    #[error("{reader} reads {port:?}, which {why}")]
    UnknownPort {
        /// Who reads it.
        reader: String,
        /// The port.
        port: Port,
        /// Why it is unknown.
        why: &'static str,
    },
    /// A port read by nobody or by several readers.
    #[error("{port:?} is read {times} times (every port is read exactly once)")]
    PortUse {
        /// The port.
        port: Port,
        /// Times read.
        times: usize,
    },
    /// A stage wired with the wrong number of inputs.
    #[error("stage {stage} (`{disklet}`) has {got} inputs, it takes {wants}")]
    InputCount {
        /// Stage index.
        stage: usize,
        /// Disklet name.
        disklet: &'static str,
        /// Inputs wired.
        got: usize,
        /// Inputs it takes.
        wants: String,
    },
    /// Any other inconsistency between outputs and inputs.
    #[error("{0}")]
    Wiring(String),
}

/// What admission needs to know about a valid graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Output ports of each stage.
    pub stage_ports: Vec<u32>,
    /// Streams of the job: one per input and per stage output port (each has its buffers).
    pub streams: u64,
}

/// Checks `spec`'s graph; see the module docs for the rules.
///
/// # Errors
/// The first rule broken, as a [`GraphError`].
pub fn check(spec: &JobSpec) -> Result<Shape, GraphError> {
    let nodes = spec.inputs.len() + spec.stages.len() + spec.outputs.len();
    if nodes > MAX_JOB_GRAPH_NODES {
        return Err(GraphError::TooLarge(format!(
            "{nodes} inputs, stages and outputs (at most {MAX_JOB_GRAPH_NODES})"
        )));
    }
    if spec.inputs.is_empty() {
        return Err(GraphError::Wiring("a job needs at least one input".into()));
    }
    if spec.stage_scratch_kib.len() > spec.stages.len() {
        return Err(GraphError::Wiring(format!(
            "scratch given for {} stages of a job with {}",
            spec.stage_scratch_kib.len(),
            spec.stages.len()
        )));
    }
    let stage_ports = stage_ports(spec)?;
    let mut reads: BTreeMap<Port, usize> = BTreeMap::new();
    for (i, stage) in spec.stages.iter().enumerate() {
        check_input_count(i, stage)?;
        for port in &stage.inputs {
            check_port(
                port,
                i,
                &stage_ports,
                spec.inputs.len(),
                &format!("stage {i}"),
            )?;
            *reads.entry(*port).or_default() += 1;
        }
    }
    for (o, output) in spec.outputs.iter().enumerate() {
        check_port(
            &output.from,
            spec.stages.len(),
            &stage_ports,
            spec.inputs.len(),
            &format!("output {o}"),
        )?;
        *reads.entry(output.from).or_default() += 1;
    }
    let every_port = (0..spec.inputs.len() as u32).map(Port::Input).chain(
        stage_ports.iter().enumerate().flat_map(|(s, n)| {
            (0..*n).map(move |p| Port::Stage {
                stage: s as u32,
                port: p,
            })
        }),
    );
    for port in every_port {
        let times = reads.get(&port).copied().unwrap_or(0);
        if times != 1 {
            return Err(GraphError::PortUse { port, times });
        }
    }
    check_sinks(spec)?;
    check_temp_streams(spec)?;
    let streams = spec.inputs.len() as u64 + stage_ports.iter().map(|p| u64::from(*p)).sum::<u64>();
    Ok(Shape {
        stage_ports,
        streams,
    })
}

fn stage_ports(spec: &JobSpec) -> Result<Vec<u32>, GraphError> {
    spec.stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            match s
                .disklet
                .output_ports()
                .unwrap_or_else(|| wired_ports(spec, i))
            {
                0 => Err(GraphError::Wiring(format!(
                    "stage {i} (`{}`) has no output port",
                    s.disklet.name()
                ))),
                n if n > MAX_STAGE_PORTS => Err(GraphError::TooLarge(format!(
                    "stage {i} has {n} output ports (at most {MAX_STAGE_PORTS})"
                ))),
                n => Ok(n),
            }
        })
        .collect()
}

/// Ports of stage `stage` the job reads: one more than the highest read (at least one; a port
/// below it that nobody reads is then reported as unread).
fn wired_ports(spec: &JobSpec, stage: usize) -> u32 {
    let read = spec
        .stages
        .iter()
        .flat_map(|s| s.inputs.iter())
        .chain(spec.outputs.iter().map(|o| &o.from));
    let highest = read.filter_map(|p| match *p {
        Port::Stage { stage: s, port } if s as usize == stage => Some(port),
        _ => None,
    });
    highest.max().map_or(1, |p| p.saturating_add(1))
}

fn check_input_count(i: usize, stage: &crate::protocol::Stage) -> Result<(), GraphError> {
    let got = stage.inputs.len();
    let ok = match stage.disklet.inputs() {
        Some(n) => got == n,
        None => got >= 1,
    };
    if ok {
        return Ok(());
    }
    let wants = stage
        .disklet
        .inputs()
        .map_or("one or more".to_string(), |n| n.to_string());
    Err(GraphError::InputCount {
        stage: i,
        disklet: stage.disklet.name(),
        got,
        wants,
    })
}

/// A port read by a stage `before` (or an output, `before` = number of stages) must exist.
fn check_port(
    port: &Port,
    before: usize,
    stage_ports: &[u32],
    inputs: usize,
    reader: &str,
) -> Result<(), GraphError> {
    let unknown = |why| {
        Err(GraphError::UnknownPort {
            reader: reader.to_string(),
            port: *port,
            why,
        })
    };
    match *port {
        Port::Input(i) if i as usize >= inputs => unknown("is not an input of the job"),
        Port::Stage { stage, .. } if stage as usize >= before => unknown("is not an earlier stage"),
        Port::Stage { stage, port } if port >= stage_ports[stage as usize] => {
            unknown("is not an output port of that stage")
        }
        _ => Ok(()),
    }
}

fn check_sinks(spec: &JobSpec) -> Result<(), GraphError> {
    let hosts = spec
        .outputs
        .iter()
        .filter(|o| matches!(o.sink, Sink::Host))
        .count();
    if hosts > 1 {
        return Err(GraphError::Wiring(format!(
            "{hosts} outputs go to the host (at most one per job)"
        )));
    }
    let mut exchange_targets = BTreeSet::new();
    let mut stored = BTreeSet::new();
    for o in &spec.outputs {
        match &o.sink {
            Sink::Host => {}
            Sink::Exchange {
                exchange_id,
                targets,
                route,
                ..
            } => {
                if targets.is_empty() {
                    return Err(GraphError::Wiring(format!(
                        "exchange `{exchange_id}` has no target"
                    )));
                }
                if let crate::protocol::Route::Range { bounds, .. } = route
                    && bounds.len() + 1 != targets.len()
                {
                    return Err(GraphError::Wiring(format!(
                        "range exchange `{exchange_id}`: {} bounds for {} targets (needs targets - 1)",
                        bounds.len(),
                        targets.len()
                    )));
                }
                for t in targets {
                    if !exchange_targets.insert((exchange_id.clone(), t.clone())) {
                        return Err(GraphError::Wiring(format!(
                            "exchange `{exchange_id}` reaches {t} twice from one job"
                        )));
                    }
                }
            }
            Sink::Store { stream } => {
                if let StoredStream::Split {
                    first_partition,
                    max_partitions,
                    ..
                } = stream
                    && (*max_partitions == 0
                        || *max_partitions > MAX_SPLIT_PARTITIONS
                        || first_partition.checked_add(*max_partitions).is_none())
                {
                    return Err(GraphError::Wiring(format!(
                        "a split result writes 1 to {MAX_SPLIT_PARTITIONS} partitions from a partition number that does not overflow; got {max_partitions} from {first_partition}"
                    )));
                }
                if !stored.insert(stream.clone()) {
                    return Err(GraphError::Wiring(format!("{stream:?} is written twice")));
                }
            }
        }
    }
    Ok(())
}

/// Most partitions one split result ([`StoredStream::Split`]) may write.
pub const MAX_SPLIT_PARTITIONS: u32 = 4096;

/// Each temporary stream read is written by exactly one output that does not itself depend on
/// the reading input.
fn check_temp_streams(spec: &JobSpec) -> Result<(), GraphError> {
    let written: BTreeMap<&str, &Port> = spec
        .outputs
        .iter()
        .filter_map(|o| match &o.sink {
            Sink::Store {
                stream: StoredStream::Temp { name },
            } => Some((name.as_str(), &o.from)),
            _ => None,
        })
        .collect();
    let depends = input_dependencies(spec);
    for (i, input) in spec.inputs.iter().enumerate() {
        let Source::Temp { name } = input else {
            continue;
        };
        let Some(from) = written.get(name.as_str()) else {
            return Err(GraphError::Wiring(format!(
                "input {i} reads temporary stream `{name}`, which no output of the job writes"
            )));
        };
        if depends(from).contains(&i) {
            return Err(GraphError::Wiring(format!(
                "temporary stream `{name}` is written from its own reader (input {i}): it would wait for itself"
            )));
        }
        if let Port::Stage { stage: writer, .. } = from
            && let Some(reader) = spec
                .stages
                .iter()
                .position(|s| s.inputs.contains(&Port::Input(i as u32)))
            && reader <= *writer as usize
        {
            return Err(GraphError::Wiring(format!(
                "temporary stream `{name}` is read by stage {reader}, which must come after its writer, stage {writer}"
            )));
        }
    }
    Ok(())
}

/// For each port, the job inputs it is computed from.
fn input_dependencies(spec: &JobSpec) -> impl Fn(&Port) -> BTreeSet<usize> + '_ {
    let mut per_stage: Vec<BTreeSet<usize>> = Vec::with_capacity(spec.stages.len());
    for stage in &spec.stages {
        let mut set = BTreeSet::new();
        for port in &stage.inputs {
            match *port {
                Port::Input(i) => {
                    set.insert(i as usize);
                }
                Port::Stage { stage, .. } => set.extend(per_stage[stage as usize].iter().copied()),
            }
        }
        per_stage.push(set);
    }
    move |port: &Port| match *port {
        Port::Input(i) => BTreeSet::from([i as usize]),
        Port::Stage { stage, .. } => per_stage[stage as usize].clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{JobBuilder, exchange};
    use crate::protocol::{DiskletSpec, ExprBytes, Output, Route, Stage};
    use arrow_schema::Schema;

    fn pipe(id: &str) -> Source {
        Source::Pipe {
            exchange_id: id.into(),
            senders: 1,
            schema: Schema::empty(),
        }
    }

    fn select() -> DiskletSpec {
        DiskletSpec::Select {
            predicate: None,
            projection: vec![],
            limit: None,
        }
    }

    fn join() -> DiskletSpec {
        DiskletSpec::HashJoin {
            build_keys: vec![ExprBytes(vec![])],
            probe_keys: vec![ExprBytes(vec![])],
        }
    }

    /// A job wired as given, not checked: the checks are what these tests test.
    fn job(inputs: Vec<Source>, stages: Vec<Stage>, outputs: Vec<Output>) -> JobBuilder {
        let mut job = JobBuilder::new("j");
        for input in inputs {
            job.input(input);
        }
        for s in stages {
            job.stage(s.disklet, s.inputs);
        }
        for o in outputs {
            job.output(o.from, o.sink);
        }
        job
    }

    fn stage(disklet: DiskletSpec, inputs: &[Port]) -> Stage {
        Stage {
            disklet,
            inputs: inputs.to_vec(),
        }
    }

    fn out(from: Port, sink: Sink) -> Output {
        Output { from, sink }
    }

    const S0: Port = Port::Stage { stage: 0, port: 0 };
    const S1: Port = Port::Stage { stage: 1, port: 0 };

    fn temp(name: &str) -> Sink {
        Sink::Store {
            stream: StoredStream::Temp { name: name.into() },
        }
    }

    #[test]
    fn scratch_per_stage_names_only_stages_of_the_job() {
        let mut chain = JobBuilder::chain("j", pipe("a"), vec![select(), select()], Sink::Host)
            .build_unchecked();
        chain.stage_scratch_kib = vec![64, 128];
        assert!(check(&chain).is_ok());
        chain.stage_scratch_kib.push(1);
        assert!(
            matches!(check(&chain), Err(GraphError::Wiring(w)) if w.contains("scratch given for 3 stages of a job with 2")),
        );
    }

    #[test]
    fn chains_and_two_input_graphs_are_valid() {
        let chain = JobBuilder::chain("j", pipe("a"), vec![select(), select()], Sink::Host)
            .build_unchecked();
        assert_eq!(
            check(&chain).unwrap(),
            Shape {
                stage_ports: vec![1, 1],
                streams: 3
            }
        );
        let join = job(
            vec![pipe("a"), pipe("b")],
            vec![stage(join(), &[Port::Input(0), Port::Input(1)])],
            vec![out(S0, Sink::Host)],
        )
        .build_unchecked();
        assert_eq!(check(&join).unwrap().streams, 3);
        // A partition stage's ports go one per target.
        let partition = DiskletSpec::Partition {
            keys: vec![],
            partitions: 3,
        };
        let targets: Vec<String> = (0..3).map(|i| format!("d{i}")).collect();
        let ex = JobBuilder::chain(
            "j",
            pipe("a"),
            vec![partition],
            exchange("x", targets, 0, Route::Broadcast),
        )
        .build_unchecked();
        assert_eq!(ex.outputs.len(), 3);
        assert_eq!(check(&ex).unwrap().streams, 4);
    }

    #[test]
    fn wiring_errors_are_named() {
        let e = check(
            &job(
                vec![pipe("a")],
                vec![stage(select(), &[Port::Input(1)])],
                vec![out(S0, Sink::Host)],
            )
            .build_unchecked(),
        );
        assert!(
            matches!(
                e,
                Err(GraphError::UnknownPort {
                    why: "is not an input of the job",
                    ..
                })
            ),
            "{e:?}"
        );
        let e = check(
            &job(
                vec![pipe("a")],
                vec![stage(select(), &[S0])],
                vec![out(S0, Sink::Host)],
            )
            .build_unchecked(),
        );
        assert!(
            matches!(
                e,
                Err(GraphError::UnknownPort {
                    why: "is not an earlier stage",
                    ..
                })
            ),
            "a stage reading itself: {e:?}"
        );
        let e = check(
            &job(
                vec![pipe("a"), pipe("b")],
                vec![stage(select(), &[Port::Input(0)])],
                vec![out(S0, Sink::Host)],
            )
            .build_unchecked(),
        );
        assert_eq!(
            e,
            Err(GraphError::PortUse {
                port: Port::Input(1),
                times: 0
            })
        );
        let e = check(
            &job(
                vec![pipe("a")],
                vec![stage(select(), &[Port::Input(0)])],
                vec![out(S0, Sink::Host), out(S0, temp("t"))],
            )
            .build_unchecked(),
        );
        assert_eq!(e, Err(GraphError::PortUse { port: S0, times: 2 }));
        let e = check(
            &job(
                vec![pipe("a")],
                vec![stage(join(), &[Port::Input(0)])],
                vec![out(S0, Sink::Host)],
            )
            .build_unchecked(),
        );
        assert!(
            matches!(e, Err(GraphError::InputCount { got: 1, .. })),
            "{e:?}"
        );
        let e = check(&job(vec![], vec![], vec![]).build_unchecked());
        assert!(matches!(e, Err(GraphError::Wiring(_))));
        let two_hosts = job(
            vec![pipe("a"), pipe("b")],
            vec![],
            vec![
                out(Port::Input(0), Sink::Host),
                out(Port::Input(1), Sink::Host),
            ],
        )
        .build_unchecked();
        assert!(matches!(check(&two_hosts), Err(GraphError::Wiring(_))));
        let range = Sink::Exchange {
            exchange_id: "x".into(),
            targets: vec!["a".into(), "b".into()],
            sender: 0,
            route: Route::Range {
                key: ExprBytes(vec![]),
                bounds: vec![],
            },
            relay: None,
            target_relays: vec![],
        };
        assert!(matches!(
            check(
                &job(vec![pipe("a")], vec![], vec![out(Port::Input(0), range)]).build_unchecked()
            ),
            Err(GraphError::Wiring(_))
        ));
    }

    #[test]
    fn user_disklet_shape_comes_from_the_wiring() {
        let wasm = DiskletSpec::Wasm {
            name: "split".into(),
            params: Default::default(),
            fuel: None,
        };
        let port = |p| Port::Stage { stage: 0, port: p };
        let two = job(
            vec![pipe("a"), pipe("b")],
            vec![stage(wasm.clone(), &[Port::Input(0), Port::Input(1)])],
            vec![out(port(0), Sink::Host), out(port(1), temp("t"))],
        )
        .build_unchecked();
        assert_eq!(
            check(&two).unwrap(),
            Shape {
                stage_ports: vec![2],
                streams: 4
            }
        );
        let gap = job(
            vec![pipe("a")],
            vec![stage(wasm.clone(), &[Port::Input(0)])],
            vec![out(port(1), Sink::Host)],
        )
        .build_unchecked();
        assert_eq!(
            check(&gap),
            Err(GraphError::PortUse {
                port: port(0),
                times: 0
            })
        );
        let none = job(
            vec![pipe("a")],
            vec![stage(wasm, &[])],
            vec![out(port(0), Sink::Host)],
        )
        .build_unchecked();
        assert!(
            matches!(check(&none), Err(GraphError::InputCount { got: 0, .. })),
            "a user disklet reads at least one input"
        );
    }

    #[test]
    fn temporary_streams_are_written_before_they_are_read() {
        let spill = Source::Temp {
            name: "runs".into(),
        };
        // input 0 → stage 0 → temp "runs"; input 1 (temp "runs") → stage 1 → host.
        let ok = job(
            vec![pipe("a"), spill.clone()],
            vec![
                stage(select(), &[Port::Input(0)]),
                stage(select(), &[Port::Input(1)]),
            ],
            vec![out(S0, temp("runs")), out(S1, Sink::Host)],
        )
        .build_unchecked();
        assert!(check(&ok).is_ok());
        // The temp's writer depends on its own reader.
        let cycle = job(
            vec![pipe("a"), spill.clone()],
            vec![stage(join(), &[Port::Input(0), Port::Input(1)])],
            vec![out(S0, temp("runs"))],
        )
        .build_unchecked();
        assert!(
            matches!(check(&cycle), Err(GraphError::Wiring(m)) if m.contains("wait for itself"))
        );
        let unwritten =
            job(vec![spill], vec![], vec![out(Port::Input(0), Sink::Host)]).build_unchecked();
        assert!(matches!(check(&unwritten), Err(GraphError::Wiring(m)) if m.contains("no output")));
    }
}
