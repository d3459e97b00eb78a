//! Building a job: its sources planned, its stages' disklets instantiated with their
//! scratch, the schema of every port.
use super::DiskOs;
use crate::cancel::CancelFlag;
use crate::disklet::Disklet;
use crate::disklets::fragment::Spill;
use crate::stream::{file_schema, projected_schema};
use crate::wiring::{Router, TempArea};
use crate::{DiskOsError, Result, disklets};
use adisk_core::protocol::{DiskletSpec, FragmentKind, JobSpec, Port, Sink, Source, StoredStream};
use adisk_storage::StorageError;
use arrow::datatypes::SchemaRef;
use datafusion::physical_optimizer::pruning::PruningPredicate;
use std::collections::BTreeMap;
use std::sync::Arc;

impl DiskOs {
    pub(super) fn build_stage(
        &self,
        stage: &DiskletSpec,
        inputs: &[SchemaRef],
        sorted: &[Vec<String>],
        scratch_bytes: u64,
        spill: Option<&Spill>,
        cancel: &CancelFlag,
    ) -> Result<Box<dyn Disklet>> {
        match stage {
            DiskletSpec::Wasm { name, params, fuel } => {
                self.user_disklets_or_refuse()?
                    .build(name, params, *fuel, inputs, cancel.clone())
            }
            DiskletSpec::App {
                app,
                name,
                params,
                ports,
                ..
            } => self
                .apps
                .get()
                .ok_or_else(|| {
                    DiskOsError::InvalidJob("this disk runs no application disklets".into())
                })?
                .build(crate::apps::AppStage {
                    app,
                    disklet: name,
                    params,
                    inputs,
                    ports: *ports as usize,
                    scratch_bytes,
                }),
            _ => disklets::build(stage, inputs, sorted, scratch_bytes, &self.planner, spill),
        }
    }

    pub(super) fn user_disklets_or_refuse(&self) -> Result<&Arc<dyn crate::user::UserDisklets>> {
        self.user
            .get()
            .ok_or_else(|| DiskOsError::InvalidJob("this disk does not run user disklets".into()))
    }

    /// Checks every user disklet stage against the shape its module declared at install: the
    /// inputs it reads and the output ports the job reads (`ports`, per stage, from the graph
    /// check). Runs before admission; no guest code runs.
    pub(super) fn check_user_shapes(&self, spec: &JobSpec, ports: &[u32]) -> Result<()> {
        for (i, stage) in spec.stages.iter().enumerate() {
            let DiskletSpec::Wasm { name, .. } = &stage.disklet else {
                continue;
            };
            let declared = self.user_disklets_or_refuse()?.shape(name)?;
            let wired = (stage.inputs.len(), ports[i] as usize);
            if (declared.inputs, declared.outputs) != wired {
                let message = format!(
                    "stage {i}: user disklet `{name}` (ABI v{}) takes {} input(s) and writes {} output port(s); the job wires {} input(s) and reads {} port(s)",
                    declared.abi, declared.inputs, declared.outputs, wired.0, wired.1
                );
                return Err(DiskOsError::UserDisklet {
                    kind: crate::user::UserDiskletFailure::Invalid,
                    message,
                });
            }
        }
        Ok(())
    }

    /// The input stream's schema and, for a table, what to read: checks the table, the
    /// columns and the pruning predicate. A temporary stream's schema is that of the port
    /// that writes it (known once that port's stage is built).
    pub(super) fn plan_source(
        &self,
        source: &Source,
    ) -> Result<(Option<SchemaRef>, Option<TablePlan>)> {
        match source {
            Source::Table {
                table,
                columns,
                prune,
                partitions,
            } => {
                let mut info = self.store.table(table)?;
                if let Some(chosen) = partitions {
                    // Replicas: read only the partitions the host assigned to this disk.
                    if let Some(missing) = chosen
                        .iter()
                        .find(|c| !info.partitions.iter().any(|p| p.partition == **c))
                    {
                        return Err(DiskOsError::InvalidJob(format!(
                            "table `{table}` has no partition {missing} on this disk"
                        )));
                    }
                    info.partitions.retain(|p| chosen.contains(&p.partition));
                }
                let projection = column_indices(&info, table, columns)?;
                let schema = projected_schema(&info.schema, &projection);
                let prune = match prune {
                    Some(p) => {
                        let full = Arc::new(info.schema.clone());
                        let expr = self.planner.physical(p, &full)?;
                        #[allow(deprecated)]
                        let predicate = PruningPredicate::try_new(expr, full).ok().map(Arc::new);
                        predicate
                    }
                    None => None,
                };
                Ok((Some(schema), Some((info, projection, prune))))
            }
            Source::File { .. } => Ok((Some(file_schema()), None)),
            Source::Pipe { schema, .. } | Source::Host { schema } => {
                Ok((Some(Arc::new(schema.clone())), None))
            }
            Source::Temp { .. } => Ok((None, None)),
        }
    }

    /// Builds (inits) the disklets in order, each on the schemas of the ports it reads, and
    /// plans the outputs' routers. Runs after admission: building decodes plan fragments and
    /// runs a user disklet's `init`.
    pub(super) async fn build(
        self: &Arc<Self>,
        spec: &JobSpec,
        sources: &[(Option<SchemaRef>, Option<TablePlan>)],
        scratch: &[u64],
        ports: &[u32],
        area: &TempArea,
        cancel: CancelFlag,
    ) -> Result<Built> {
        let spills = spill_shares(spec, area)?;
        let mut schemas: BTreeMap<Port, SchemaRef> = sources
            .iter()
            .enumerate()
            .filter_map(|(i, (s, _))| s.clone().map(|s| (Port::Input(i as u32), s)))
            .collect();
        resolve_temp_schemas(spec, &mut schemas);
        // The columns each port's stream is sorted on: table scans' as stored, stages' as they
        // say ([`crate::order`]).
        let mut sorted: BTreeMap<Port, Vec<String>> = sources
            .iter()
            .enumerate()
            .filter_map(|(i, (_, plan))| {
                let (info, projection, _) = plan.as_ref()?;
                let columns = crate::order::scan_sorted(info, projection);
                Some((Port::Input(i as u32), columns))
            })
            .collect();
        let mut stages: Vec<Box<dyn Disklet>> = Vec::with_capacity(spec.stages.len());
        for (i, (stage, &s)) in spec.stages.iter().zip(scratch).enumerate() {
            let inputs = stage
                .inputs
                .iter()
                .map(|p| {
                    schemas.get(p).cloned().ok_or_else(|| {
                        DiskOsError::InvalidJob(format!(
                            "stage {i} reads {p:?}, a temporary stream written only later"
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let input_sorted: Vec<Vec<String>> = stage
                .inputs
                .iter()
                .map(|p| sorted.get(p).cloned().unwrap_or_default())
                .collect();
            let d = if matches!(stage.disklet, DiskletSpec::Wasm { .. }) {
                // Compiling and a user init run guest code: keep them off the async workers.
                let (os, disklet, cancel) = (self.clone(), stage.disklet.clone(), cancel.clone());
                tokio::task::spawn_blocking(move || {
                    os.build_stage(&disklet, &inputs, &input_sorted, s, None, &cancel)
                })
                .await
                .map_err(|e| {
                    DiskOsError::InvalidJob(format!("user disklet init panicked: {e}"))
                })??
            } else {
                let spill = spills[i].as_ref();
                self.build_stage(&stage.disklet, &inputs, &input_sorted, s, spill, &cancel)?
            };
            if d.output_ports() as u32 != ports[i] {
                return Err(DiskOsError::InvalidJob(format!(
                    "stage {i} has {} outputs, the job reads {}",
                    d.output_ports(),
                    ports[i]
                )));
            }
            for port in 0..d.output_ports() {
                schemas.insert(
                    Port::Stage {
                        stage: i as u32,
                        port: port as u32,
                    },
                    d.port_schema(port),
                );
                let port_id = Port::Stage {
                    stage: i as u32,
                    port: port as u32,
                };
                sorted.insert(port_id, d.sorted_output(port));
            }
            resolve_temp_schemas(spec, &mut schemas);
            stages.push(d);
        }
        if let Some(i) =
            (0..spec.inputs.len()).find(|i| !schemas.contains_key(&Port::Input(*i as u32)))
        {
            return Err(DiskOsError::InvalidJob(format!(
                "input {i}: the temporary stream it reads is never written from a known port"
            )));
        }
        let routers = spec
            .outputs
            .iter()
            .map(|o| match &o.sink {
                Sink::Exchange { route, targets, .. } if targets.len() > 1 => {
                    Ok(Some(Router::new(route, &schemas[&o.from], &self.planner)?))
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Built {
            stages,
            schemas,
            routers,
        })
    }
}

/// What a table source reads: the table, the column indices, the zone-map predicate.
pub(super) type TablePlan = (
    adisk_core::protocol::TableInfo,
    Vec<usize>,
    Option<Arc<PruningPredicate>>,
);

/// A job's stages, built, with the schema of every port and the router of every output that
/// has one.
pub(super) struct Built {
    pub(super) stages: Vec<Box<dyn Disklet>>,
    pub(super) schemas: BTreeMap<Port, SchemaRef>,
    pub(super) routers: Vec<Option<Router>>,
}

/// Where each stage may spill: stages that can (plan fragments that sort or aggregate) share
/// the job's temporary-space grant, as one spill space in the job's area that all of them
/// write to (a stage may take what the others leave; together they never pass the grant). A
/// job that also writes temporary streams gives them the whole grant, and its stages do not
/// spill (a full sort or aggregation then fails at its scratch, typed).
pub(super) fn spill_shares(spec: &JobSpec, area: &TempArea) -> Result<Vec<Option<Spill>>> {
    let spills = |d: &DiskletSpec| {
        matches!(
            d,
            DiskletSpec::Fragment {
                kind: FragmentKind::Sort | FragmentKind::Aggregate | FragmentKind::Stage,
                ..
            }
        )
    };
    let temp_streams = spec.outputs.iter().any(|o| {
        matches!(
            o.sink,
            Sink::Store {
                stream: StoredStream::Temp { .. }
            }
        )
    });
    let count = spec.disklets().filter(|d| spills(d)).count();
    if temp_streams || count == 0 || area.limit_bytes() == 0 {
        return Ok(spec.disklets().map(|_| None).collect());
    }
    let space = Spill::new(area.dir().join("spill"), area.limit_bytes())?;
    Ok(spec
        .disklets()
        .map(|d| spills(d).then(|| space.clone()))
        .collect())
}

/// Gives each temporary input the schema of the port that writes it, once that is known
/// (repeated while it finds more: a temporary stream may be written from another one).
pub(super) fn resolve_temp_schemas(spec: &JobSpec, schemas: &mut BTreeMap<Port, SchemaRef>) {
    loop {
        let mut found = false;
        for (i, source) in spec.inputs.iter().enumerate() {
            let Source::Temp { name } = source else {
                continue;
            };
            let port = Port::Input(i as u32);
            let writer = spec.outputs.iter().find(|o| matches!(&o.sink, Sink::Store { stream: StoredStream::Temp { name: n } } if n == name));
            if !schemas.contains_key(&port)
                && let Some(schema) = writer.and_then(|o| schemas.get(&o.from)).cloned()
            {
                schemas.insert(port, schema);
                found = true;
            }
        }
        if !found {
            return;
        }
    }
}

/// Indices of `columns` in the table (all of them when empty); a typed error names an unknown one.
pub(super) fn column_indices(
    info: &adisk_core::protocol::TableInfo,
    table: &str,
    columns: &[String],
) -> Result<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..info.schema.fields().len()).collect());
    }
    columns
        .iter()
        .map(|c| {
            info.schema.index_of(c).map_err(|_| {
                DiskOsError::Storage(StorageError::UnknownColumn {
                    table: table.to_string(),
                    column: c.clone(),
                    available: info
                        .schema
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            })
        })
        .collect()
}
