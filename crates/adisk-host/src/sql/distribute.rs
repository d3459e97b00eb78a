//! The `disks` offload level: whole stages of a query run at the disks, joined by disk-to-disk
//! streams; the host receives only what the last stage makes.
//!
//! After DataFusion's physical optimizer and the offload rule (partial aggregations in the
//! scans), [`DistributeRule`] cuts the plan into *stages* at its exchange points, bottom up:
//!
//! ```text
//! RepartitionExec(Hash k)      → the stage below ends; its rows are hashed on k to every disk
//!                                 (chiu's redistribution); the stage above reads the pipe
//! HashJoinExec(CollectLeft)    → the build side is a stage of its own whose output is
//!                                 broadcast to the disks of the probe side (memik's replication)
//! HashJoinExec(Partitioned)    → both sides arrive hashed on the join key at the same disks,
//!                                 or stay where they are when their tables are co-partitioned
//!                                 on it (`colocate`)
//! DiskScanExec                 → a local input of the stage at each disk holding the table
//! filters, projections, aggregations, sorts, local limits → stay inside their stage
//! anything else (merges, global limits, non-column keys…) → the host, above a DisksExec
//! ```
//!
//! Each stage is one DataFusion plan fragment with one `EmptyExec` leaf per input (depth
//! first), run at each of its disks by the `sql_stage` disklet. A [`DisksExec`] at the host
//! starts every stage's job at every disk at once when it is first executed and streams the
//! top stage's output, one partition per disk. A stage whose fragment a disk could not decode,
//! or whose keys are not plain columns, is not cut: that part of the plan stays at the host.
use super::bundling::{Bundling, PieceInput};
use super::scan::DiskScanExec;
use super::{QueryMetrics, ScanReport, SqlSettings};
use crate::cluster::Cluster;
use crate::jobs;
use crate::{HostError, Result};
use adisk_core::builder::{JobBuilder, fitted_buffer_kib, grant::grant_beyond_scratch};
use adisk_core::protocol::{
    DiskletSpec, ExprBytes, FragmentKind, JobSpec, Port, Route, Sink, Source,
};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::JoinType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::OnceCell;

/// One input of a stage, in leaf order.
#[derive(Debug, Clone)]
enum Input {
    /// The local partition of a table scan (the scan's own bundle of stages runs first).
    Scan(Arc<DiskScanExec>),
    /// Every partition of another stage, routed to this stage's disks.
    Pipe(usize),
}

/// Where a stage's output goes.
#[derive(Debug, Clone, PartialEq)]
enum Route2 {
    /// To the host (the top stage of a [`DisksExec`]).
    Host,
    /// Hashed on these columns of its output to the consuming stage's disks.
    Hash(Vec<String>),
    /// Every row to every disk of the consuming stage.
    Broadcast,
    /// By range of this column to the consuming stage's disks, in key order: target `i`
    /// takes the keys above `bounds[i-1]` up to `bounds[i]` (the disks where a
    /// range-declustered table keeps them).
    Range {
        key: String,
        bounds: Vec<datafusion::common::ScalarValue>,
    },
}

/// A stage of the distributed plan.
#[derive(Debug, Clone)]
struct StagePlan {
    /// The fragment (an `EmptyExec` per input), for EXPLAIN.
    plan: Arc<dyn ExecutionPlan>,
    /// Partition `i` runs at `disks[i]`.
    disks: Vec<u32>,
    inputs: Vec<Input>,
    route: Route2,
    /// The disks of the stage that reads this one (set when it is cut).
    targets: Vec<u32>,
    /// Estimated bytes of its output over all its disks (DataFusion's statistics).
    est_bytes: Option<u64>,
    /// Its fragment as memik's bundles, each a DiskOS stage (one piece: the whole fragment).
    pieces: Vec<StagePiece>,
}

/// One bundle of a stage: an encoded fragment, what its inputs read, its scratch weight and
/// its operators (for EXPLAIN).
#[derive(Debug, Clone)]
struct StagePiece {
    bytes: Vec<u8>,
    inputs: Vec<PieceInput>,
    weight: u64,
    ops: String,
}

/// A stage's fragment cut into pieces under `relation` (one piece without one, or when a
/// piece cannot be encoded).
fn pieces(
    plan: &Arc<dyn ExecutionPlan>,
    bytes: &[u8],
    inputs: usize,
    relation: Option<Bundling>,
) -> Vec<StagePiece> {
    let whole = || {
        vec![StagePiece {
            bytes: bytes.to_vec(),
            inputs: (0..inputs).map(PieceInput::Stage).collect(),
            weight: weight(plan),
            ops: operators(plan),
        }]
    };
    let Some(relation) = relation else {
        return whole();
    };
    let Ok(split) = super::bundling::split(plan, relation) else {
        return whole();
    };
    let encoded: Option<Vec<StagePiece>> = split
        .into_iter()
        .map(|p| {
            let bytes = datafusion_proto::bytes::physical_plan_to_bytes(p.plan.clone()).ok()?;
            Some(StagePiece {
                bytes: bytes.to_vec(),
                inputs: p.inputs,
                weight: weight(&p.plan),
                ops: operators(&p.plan),
            })
        })
        .collect();
    encoded.unwrap_or_else(whole)
}

/// A fragment's operators, top first, its input leaves left out.
fn operators(plan: &Arc<dyn ExecutionPlan>) -> String {
    let ops: Vec<String> = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string()
        .lines()
        .filter(|l| !l.trim_start().starts_with("EmptyExec"))
        .map(|l| l.trim().to_string())
        .collect();
    if ops.is_empty() {
        "pass-through".to_string()
    } else {
        ops.join(" ← ")
    }
}

/// A stage being cut: the plan above its inputs so far.
struct Cut {
    plan: Arc<dyn ExecutionPlan>,
    disks: Vec<u32>,
    inputs: Vec<Input>,
    /// Its rows are where their tables' declustering put them (scans, co-located joins), not
    /// where a hash exchange sent them: a partitioned join may pair it only with a side placed
    /// the same way (see [`Cutter::join`]).
    declustered: bool,
}

impl Cut {
    /// `plan`, a join of `left` and `right` at their (same) disks: it reads both's inputs.
    fn joined(plan: Arc<dyn ExecutionPlan>, left: Cut, right: Cut, declustered: bool) -> Cut {
        let mut inputs = left.inputs;
        inputs.extend(right.inputs);
        Cut {
            plan,
            disks: left.disks,
            inputs,
            declustered,
        }
    }
}

/// The stages of one query, as the rule cuts them.
#[derive(Debug, Default)]
struct Stages {
    list: Vec<StagePlan>,
}

/// The rule; see the module documentation.
#[derive(Debug)]
pub struct DistributeRule {
    settings: Arc<SqlSettings>,
    cluster: Arc<Cluster>,
    metrics: Arc<QueryMetrics>,
}

impl DistributeRule {
    /// A rule for these settings (it acts only at the `disks` level).
    pub fn new(
        settings: Arc<SqlSettings>,
        cluster: Arc<Cluster>,
        metrics: Arc<QueryMetrics>,
    ) -> Self {
        DistributeRule {
            settings,
            cluster,
            metrics,
        }
    }
}

impl PhysicalOptimizerRule for DistributeRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        if self.settings.offload != super::Offload::Disks {
            return Ok(plan);
        }
        // Exchanges go to the live disks only (a dead disk's partitions are read elsewhere).
        let live = self.cluster.live_disks();
        let stages = Arc::new(Mutex::new(Stages::default()));
        let join_budget = if self.settings.spill_joins {
            0 // nothing is held whole: every partitioned join sorts and merges
        } else {
            self.join_budget(&plan)
        };
        // Large scans feeding exchanges keep only the keys their joins can match.
        let plan = super::reduce::reduced(plan)?;
        // A copy of the build side at every disk must leave room for its hash table.
        let plan = super::broadcast::small_builds(plan, live.len() as u64, join_budget / 2)?;
        let mut cutter = Cutter {
            stages: stages.clone(),
            disk_count: live.len() as u32,
            join_budget,
            live,
            bundling: self.settings.bundling,
        };
        let mut out = self.place(plan, &mut cutter)?;
        if let Some(c) = self.settings.central_unit {
            out = self.centralize(out, c, &mut cutter)?;
        }
        // Joins the stages could not take run at the host over scans: those scans are
        // pruned by Bloom filters as at the host-centric levels (TPC-H Q22's anti join, held
        // at the host by its scalar subquery).
        let out = super::rules::push_blooms(out, &self.settings)?;
        let list = std::mem::take(&mut stages.lock().expect("stages lock").list);
        let graph = Arc::new(list);
        // Give every DisksExec the stages of this query.
        out.transform_up(|node| {
            Ok(match node.downcast_ref::<DisksExec>() {
                Some(d) => Transformed::yes(Arc::new(DisksExec {
                    stages: graph.clone(),
                    ..d.clone()
                }) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }
    fn name(&self) -> &str {
        "adisk_distribute"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

impl DistributeRule {
    /// Replaces each maximal subtree that can run at the disks by a [`DisksExec`].
    fn place(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        cutter: &mut Cutter,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        if let Some(cut) = cutter.cut(&plan)
            && worth_it(&cut)
            && decodable(&cut.plan)
        {
            let partitions = cut.disks.len();
            let root = cutter.finish(cut, Route2::Host, &plan);
            return Ok(Arc::new(self.disks_exec(root, partitions, &plan)));
        }
        let children = plan
            .children()
            .into_iter()
            .map(|c| self.place(c.clone(), cutter))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        if children.is_empty() {
            return Ok(plan);
        }
        super::rules::rewire(plan, children)
    }

    /// What a join stage's build side may take per disk: a join stage's share of the smallest
    /// disk's scratch (see [`DisksExec::sizes`]) when every heavy operator of the plan ran at
    /// the same disk in stages of their own (the most the busiest disk can carry). Never more
    /// than the requested scratch. (Half of it, leaving room for the hash table, sent TPC-H
    /// Q18 at SF 1 with 256 MiB disks to a sort-merge join whose sorts then ran out of memory
    /// beside the stage's other operators; its hash join fits.)
    fn join_budget(&self, plan: &Arc<dyn ExecutionPlan>) -> u64 {
        let mut inputs = 0;
        let _ = plan.apply(|n| {
            let n: &dyn ExecutionPlan = n.as_ref();
            if n.downcast_ref::<DiskScanExec>().is_some()
                || n.downcast_ref::<RepartitionExec>().is_some()
            {
                inputs += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let busiest = (weight(plan) + inputs).max(1);
        let mut share = self.settings.cost.max_scratch_bytes * 2 / 3 / busiest * JOIN_WEIGHT;
        if self.settings.scratch_kib > 0 {
            share = share.min(self.settings.scratch_kib * 1024);
        }
        share
    }

    /// With a central unit: the host's combining work above the stages becomes a stage at
    /// disk `c`, which the top stage sends all its rows to ([`super::central`]).
    fn centralize(
        &self,
        out: Arc<dyn ExecutionPlan>,
        c: u32,
        cutter: &mut Cutter,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        if !cutter.live.contains(&c) {
            return Err(DataFusionError::Plan(format!(
                "central unit disk {c} is not a live disk (live: {:?})",
                cutter.live
            )));
        }
        let Some((fragment, top)) = super::central::gather(&out) else {
            return Ok(out);
        };
        if !decodable(&fragment) {
            return Ok(out);
        }
        {
            let mut stages = cutter.stages.lock().expect("stages lock");
            stages.list[top].route = Route2::Broadcast;
            stages.list[top].targets = vec![c];
        }
        let cut = Cut {
            plan: fragment,
            disks: vec![c],
            inputs: vec![Input::Pipe(top)],
            declustered: false,
        };
        let root = cutter.finish(cut, Route2::Host, &out);
        Ok(Arc::new(self.disks_exec(root, 1, &out)))
    }

    fn disks_exec(
        &self,
        root: usize,
        partitions: usize,
        replaced: &Arc<dyn ExecutionPlan>,
    ) -> DisksExec {
        let properties = Arc::new(PlanProperties::new(
            replaced.equivalence_properties().clone(),
            Partitioning::UnknownPartitioning(partitions),
            datafusion::physical_plan::execution_plan::EmissionType::Incremental,
            datafusion::physical_plan::execution_plan::Boundedness::Bounded,
        ));
        DisksExec {
            stages: Arc::new(Vec::new()),
            root,
            cluster: self.cluster.clone(),
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            properties,
            run: Arc::new(OnceCell::new()),
        }
    }
}

/// A stage that does more than a plain scan (a lone scan is better served as it is).
fn worth_it(cut: &Cut) -> bool {
    cut.plan.downcast_ref::<EmptyExec>().is_none()
}

struct Cutter {
    stages: Arc<Mutex<Stages>>,
    disk_count: u32,
    /// Bytes of build side per disk past which a join runs as a sort-merge join (it spills);
    /// 0: every partitioned join does.
    join_budget: u64,
    /// The disks not taken as dead, in order: hash partition `i` goes to `live[i]`.
    live: Vec<u32>,
    /// memik's relation of bindable operations, when stages run as bundles.
    bundling: Option<Bundling>,
}

impl Cutter {
    /// Ends `cut` as a stage routed `route`; its index. `original` is the part of the query
    /// plan it runs (for the estimate of its output).
    fn finish(&mut self, cut: Cut, route: Route2, original: &Arc<dyn ExecutionPlan>) -> usize {
        let est_bytes = super::sortmerge::estimated_bytes(original);
        let bytes = datafusion_proto::bytes::physical_plan_to_bytes(cut.plan.clone())
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let pieces = pieces(&cut.plan, &bytes, cut.inputs.len(), self.bundling);
        let mut stages = self.stages.lock().expect("stages lock");
        stages.list.push(StagePlan {
            pieces,
            plan: cut.plan,
            disks: cut.disks,
            inputs: cut.inputs,
            route,
            targets: vec![],
            est_bytes,
        });
        stages.list.len() - 1
    }

    fn set_targets(&mut self, stage: usize, targets: &[u32]) {
        self.stages.lock().expect("stages lock").list[stage].targets = targets.to_vec();
    }

    /// The stage `plan` can be at the disks, if it can.
    fn cut(&mut self, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        let node: &dyn ExecutionPlan = plan.as_ref();
        if let Some(scan) = node.downcast_ref::<DiskScanExec>() {
            if scan.plan.bloom.is_some()
                || !scan.plan.extra_blooms.is_empty()
                || scan.disks.is_empty()
            {
                return None;
            }
            let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(scan.schema()));
            let scan = Arc::new(scan.with_plan(scan.plan.clone()));
            return Some(Cut {
                plan: leaf,
                disks: scan.disks.clone(),
                inputs: vec![Input::Scan(scan)],
                declustered: true,
            });
        }
        if node.downcast_ref::<CooperativeExec>().is_some() {
            return self.cut(plan.children().first()?);
        }
        if let Some(r) = node.downcast_ref::<RepartitionExec>() {
            return self.repartition(r, plan);
        }
        if let Some(j) = node.downcast_ref::<HashJoinExec>() {
            return self.join(j, plan);
        }
        let per_partition = node.downcast_ref::<FilterExec>().is_some()
            || node.downcast_ref::<ProjectionExec>().is_some()
            || node.downcast_ref::<LocalLimitExec>().is_some()
            || node.downcast_ref::<AggregateExec>().is_some_and(|a| {
                !matches!(
                    a.mode(),
                    datafusion::physical_plan::aggregates::AggregateMode::Final
                        | datafusion::physical_plan::aggregates::AggregateMode::Single
                )
            })
            || node
                .downcast_ref::<SortExec>()
                .is_some_and(|s| s.preserve_partitioning());
        if !per_partition {
            return None;
        }
        let child = self.cut(plan.children().first()?)?;
        let plan = super::rules::rewire(plan.clone(), vec![child.plan]).ok()?;
        Some(Cut { plan, ..child })
    }

    /// A hash repartition: the stage below ends, hashed on plain columns to every disk.
    fn repartition(&mut self, r: &RepartitionExec, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        let child = plan.children().first().map(|c| (*c).clone())?;
        match r.partitioning() {
            Partitioning::RoundRobinBatch(_) => self.cut(&child),
            // Rows with equal keys already share a disk: nothing to move.
            Partitioning::Hash(_, n)
                if *n as u32 == self.disk_count && super::colocate::elided(plan) =>
            {
                let below = self.cut(&child)?;
                below.declustered.then_some(below)
            }
            _ => self.hash_stage(r, plan),
        }
    }

    /// A hash repartition as an exchange: the stage below ends, hashed on plain columns to
    /// every disk.
    fn hash_stage(&mut self, r: &RepartitionExec, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        let child = plan.children().first().map(|c| (*c).clone())?;
        match r.partitioning() {
            Partitioning::Hash(exprs, n) if *n as u32 == self.disk_count => {
                let schema = child.schema();
                let mut keys = Vec::with_capacity(exprs.len());
                for e in exprs {
                    let c = e.downcast_ref::<Column>()?;
                    // Routing names the column: it must be unambiguous.
                    if schema
                        .fields()
                        .iter()
                        .filter(|f| f.name() == c.name())
                        .count()
                        != 1
                    {
                        return None;
                    }
                    keys.push(c.name().to_string());
                }
                let below = self.cut(&child)?;
                if !decodable(&below.plan) {
                    return None;
                }
                let schema = below.plan.schema();
                let stage = self.finish(below, Route2::Hash(keys), &child);
                let disks: Vec<u32> = self.live.clone();
                self.set_targets(stage, &disks);
                Some(Cut {
                    plan: Arc::new(EmptyExec::new(schema)),
                    disks,
                    inputs: vec![Input::Pipe(stage)],
                    declustered: false,
                })
            }
            _ => None,
        }
    }

    /// A hash join: a broadcast build side, or both sides hashed to the same disks.
    fn join(&mut self, j: &HashJoinExec, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        match j.partition_mode() {
            PartitionMode::CollectLeft => {
                if super::colocate::colocated_build(j)
                    && let Some(cut) = self.colocated_join(j, plan)
                {
                    return Some(cut);
                }
                if let Some(rj) = super::colocate::range_join(j) {
                    return self.range_routed_join(j, plan, &rj);
                }
                let mut build = j.left().clone();
                if build.downcast_ref::<CoalescePartitionsExec>().is_some() {
                    build = build.children().first().map(|c| (*c).clone())?;
                }
                // Rows of the build side that match nowhere are only known once every probe
                // partition ran: such joins hash both sides on the key instead (chiu).
                if !matches!(
                    j.join_type(),
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                ) {
                    return self.repartitioned_join(j, &build);
                }
                let probe = self.cut(j.right())?;
                let build_plan = build;
                let build = self.cut(&build_plan)?;
                if !decodable(&build.plan) {
                    return None;
                }
                let build_schema = build.plan.schema();
                let stage = self.finish(build, Route2::Broadcast, &build_plan);
                self.set_targets(stage, &probe.disks);
                let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(build_schema));
                let joined = super::rules::rewire(plan.clone(), vec![leaf, probe.plan]).ok()?;
                let mut inputs = vec![Input::Pipe(stage)];
                inputs.extend(probe.inputs);
                Some(Cut {
                    plan: joined,
                    disks: probe.disks,
                    inputs,
                    declustered: probe.declustered,
                })
            }
            PartitionMode::Partitioned => {
                // Co-partitioned tables join where they are: the two hash exchanges go.
                let colocated = super::colocate::colocated(j);
                if !colocated && let Some(rj) = super::colocate::range_join(j) {
                    return self.range_routed_join(j, plan, &rj);
                }
                let (left, right) = if colocated {
                    let (l, r) = (
                        super::colocate::below_exchange(j.left())?,
                        super::colocate::below_exchange(j.right())?,
                    );
                    (self.cut(&l)?, self.cut(&r)?)
                } else {
                    (self.cut_hashed(j.left())?, self.cut_hashed(j.right())?)
                };
                // Without the co-location check, both sides must come from hash exchanges: a
                // side DataFusion left unexchanged because a co-located join below it already
                // "partitions on the key" is placed by range, not by the hash the other side
                // was sent with.
                if left.disks != right.disks
                    || (!colocated && (left.declustered || right.declustered))
                {
                    return None;
                }
                let joined =
                    self.partitioned_join(j, plan, left.plan.clone(), right.plan.clone())?;
                Some(Cut::joined(joined, left, right, colocated))
            }
            PartitionMode::Auto => None,
        }
    }
}

impl Cutter {
    /// `plan` cut as one side of a partitioned join whose other side is hashed: a hash
    /// exchange stays one even where its rows already sit by range.
    fn cut_hashed(&mut self, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        let node: &dyn ExecutionPlan = plan.as_ref();
        if node.downcast_ref::<CooperativeExec>().is_some() {
            return self.cut_hashed(plan.children().first()?);
        }
        match node.downcast_ref::<RepartitionExec>() {
            Some(r) if matches!(r.partitioning(), Partitioning::Hash(..)) => {
                self.hash_stage(r, plan)
            }
            _ => self.cut(plan),
        }
    }

    /// A join one of whose inputs is range-declustered on its key ([`RangeJoin`]): that input
    /// stays at its disks, the other is routed there by range. Nothing else is tried when this
    /// fails: the rows' placement the plan above was traced with holds only for this cut.
    ///
    /// [`RangeJoin`]: super::colocate::RangeJoin
    fn range_routed_join(
        &mut self,
        j: &HashJoinExec,
        plan: &Arc<dyn ExecutionPlan>,
        rj: &super::colocate::RangeJoin,
    ) -> Option<Cut> {
        let (left, right) = super::colocate::join_inputs(j)?;
        let (stay_plan, moved_plan) = if rj.stay == 1 {
            (right, left)
        } else {
            (left, right)
        };
        let stay = self.cut(&stay_plan)?;
        let mut have = stay.disks.clone();
        have.sort_unstable();
        let mut placed = rj.placement.disks.clone();
        placed.sort_unstable();
        if !stay.declustered || have != placed {
            return None;
        }
        let moved = self.cut(&moved_plan)?;
        if !decodable(&moved.plan) {
            return None;
        }
        let schema = moved.plan.schema();
        let route = range_route(&schema, rj)?;
        let stage = self.finish(moved, route, &moved_plan);
        self.set_targets(stage, &rj.placement.disks);
        let leaf = Cut {
            plan: Arc::new(EmptyExec::new(schema)),
            disks: stay.disks.clone(),
            inputs: vec![Input::Pipe(stage)],
            declustered: false,
        };
        let (l, r) = if rj.stay == 1 {
            (leaf, stay)
        } else {
            (stay, leaf)
        };
        let joined = match j.partition_mode() {
            PartitionMode::Partitioned => {
                self.partitioned_join(j, plan, l.plan.clone(), r.plan.clone())?
            }
            _ => super::rules::rewire(plan.clone(), vec![l.plan.clone(), r.plan.clone()]).ok()?,
        };
        let disks = if rj.stay == 1 {
            r.disks.clone()
        } else {
            l.disks.clone()
        };
        let mut cut = Cut::joined(joined, l, r, true);
        cut.disks = disks;
        Some(cut)
    }

    /// A collect-left join whose two sides are co-partitioned on its key, run where both are:
    /// each disk joins its own build rows with its own probe rows (nothing moves; a broadcast
    /// would send the whole build side to every disk).
    fn colocated_join(&mut self, j: &HashJoinExec, plan: &Arc<dyn ExecutionPlan>) -> Option<Cut> {
        let build = self.cut(&super::colocate::build_input(j)?)?;
        let probe = self.cut(j.right())?;
        if build.disks != probe.disks || !build.declustered || !probe.declustered {
            return None;
        }
        let children = vec![build.plan.clone(), probe.plan.clone()];
        let joined = super::rules::rewire(plan.clone(), children).ok()?;
        Some(Cut::joined(joined, build, probe, true))
    }

    /// A collect-left join run as a partitioned one: both sides hashed on their keys (plain
    /// columns of equal types on both sides) to every disk.
    fn repartitioned_join(
        &mut self,
        j: &HashJoinExec,
        build: &Arc<dyn ExecutionPlan>,
    ) -> Option<Cut> {
        if j.null_aware {
            // NOT IN: a NULL anywhere in the build side changes every partition's answer.
            return None;
        }
        let (ls, rs) = (build.schema(), j.right().schema());
        let mut keys = (Vec::new(), Vec::new());
        for (l, r) in j.on() {
            let (l, r) = (l.downcast_ref::<Column>()?, r.downcast_ref::<Column>()?);
            let unique = |schema: &SchemaRef, name: &str| {
                schema.fields().iter().filter(|f| f.name() == name).count() == 1
            };
            if !unique(&ls, l.name())
                || !unique(&rs, r.name())
                || ls.field(l.index()).data_type() != rs.field(r.index()).data_type()
            {
                return None;
            }
            keys.0.push(l.name().to_string());
            keys.1.push(r.name().to_string());
        }
        let (left, right) = (self.cut(build)?, self.cut(j.right())?);
        if !decodable(&left.plan) || !decodable(&right.plan) {
            return None;
        }
        let disks: Vec<u32> = self.live.clone();
        let (lschema, rschema) = (left.plan.schema(), right.plan.schema());
        let (l, r) = (
            self.finish(left, Route2::Hash(keys.0), build),
            self.finish(right, Route2::Hash(keys.1), j.right()),
        );
        self.set_targets(l, &disks);
        self.set_targets(r, &disks);
        let leaves: Vec<Arc<dyn ExecutionPlan>> = vec![
            Arc::new(EmptyExec::new(lschema)),
            Arc::new(EmptyExec::new(rschema)),
        ];
        let partitioned = j
            .builder()
            .with_partition_mode(PartitionMode::Partitioned)
            .with_new_children(leaves.clone())
            .ok()?
            .build_exec()
            .ok()?;
        let joined = match self.spills(j.left()) {
            true => super::sortmerge::sort_merge(j, leaves[0].clone(), leaves[1].clone())
                .unwrap_or(partitioned),
            false => partitioned,
        };
        Some(Cut {
            plan: joined,
            disks,
            inputs: vec![Input::Pipe(l), Input::Pipe(r)],
            declustered: false,
        })
    }
}

impl Cutter {
    /// Whether a join with this build side must be able to spill: its estimated rows per disk
    /// are past what a join stage's scratch can hold.
    fn spills(&self, build: &Arc<dyn ExecutionPlan>) -> bool {
        self.join_budget == 0
            || super::sortmerge::estimated_bytes(build)
                .is_some_and(|b| b / u64::from(self.disk_count.max(1)) > self.join_budget)
    }

    /// The partitioned join `plan` over its stage's inputs `left` and `right`: the hash join,
    /// or a sort-merge join when its build side may not fit.
    fn partitioned_join(
        &self,
        j: &HashJoinExec,
        plan: &Arc<dyn ExecutionPlan>,
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        if self.spills(j.left())
            && let Some(merged) = super::sortmerge::sort_merge(j, left.clone(), right.clone())
        {
            return Some(merged);
        }
        super::rules::rewire(plan.clone(), vec![left, right]).ok()
    }
}

/// The range exchange that sends rows of `schema` to the disks of `rj`'s placement by its key.
fn range_route(schema: &SchemaRef, rj: &super::colocate::RangeJoin) -> Option<Route2> {
    let key_type = schema.field_with_name(&rj.moved_key).ok()?.data_type();
    let bounds = rj
        .placement
        .bounds
        .iter()
        .map(|b| super::colocate::bound_literal(*b, key_type))
        .collect::<Option<Vec<_>>>()?;
    Some(Route2::Range {
        key: rj.moved_key.clone(),
        bounds,
    })
}

/// Whether a disk could decode the fragment (see [`super::rules`]).
fn decodable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let Ok(bytes) = datafusion_proto::bytes::physical_plan_to_bytes(plan.clone()) else {
        return false;
    };
    let ctx = datafusion::prelude::SessionContext::new();
    datafusion_proto::bytes::physical_plan_from_bytes(&bytes, &ctx.task_ctx()).is_ok()
}

/// The part of a plan that runs at the disks as stages; its partitions are the top stage's
/// outputs, one per disk.
#[derive(Debug, Clone)]
pub struct DisksExec {
    stages: Arc<Vec<StagePlan>>,
    root: usize,
    cluster: Arc<Cluster>,
    settings: Arc<SqlSettings>,
    metrics: Arc<QueryMetrics>,
    properties: Arc<PlanProperties>,
    run: Arc<OnceCell<std::result::Result<Arc<Run>, String>>>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Run")
    }
}

/// The started jobs of one execution.
struct Run {
    /// The top stage's result streams, taken by the partition that reads each.
    outputs: Mutex<Vec<Option<futures::stream::BoxStream<'static, Result<RecordBatch>>>>>,
    /// The first failure of any other job.
    failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
}

impl DisksExec {
    /// Which disk reads which partitions, per scan of the stages.
    pub fn scan_reads(&self) -> Vec<String> {
        self.stages
            .iter()
            .flat_map(|s| &s.inputs)
            .filter_map(|i| match i {
                Input::Scan(scan) => scan.describe_reads(),
                Input::Pipe(_) => None,
            })
            .collect()
    }

    /// Estimated bytes this node sends to the host and from disk to disk (a broadcast counted
    /// once per receiving disk); None where DataFusion cannot estimate a stage's output.
    pub fn estimated_traffic(&self) -> Option<(u64, u64)> {
        let root = self.stages.get(self.root)?.est_bytes?;
        let mut between = 0u64;
        for i in self.reachable().into_iter().filter(|i| *i != self.root) {
            let s = &self.stages[i];
            let fanout = match s.route {
                Route2::Broadcast => s.targets.len() as u64,
                _ => 1,
            };
            between = between.saturating_add(s.est_bytes?.saturating_mul(fanout));
        }
        Some((root, between))
    }

    /// Index of the stage whose output this node streams.
    pub(super) fn root(&self) -> usize {
        self.root
    }

    /// Number of stages.
    pub fn stage_count(&self) -> usize {
        self.reachable().len()
    }

    /// The stages this node runs (itself last), with where each runs.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.reachable().into_iter().map(|i| (i, &self.stages[i])) {
            let inputs: Vec<String> = s
                .inputs
                .iter()
                .map(|inp| match inp {
                    Input::Scan(scan) => format!("scan {}", scan.table()),
                    Input::Pipe(p) => format!("stage {p}"),
                })
                .collect();
            let route = match &s.route {
                Route2::Host => "→ host".to_string(),
                Route2::Hash(k) => format!("→ hash [{}] to disks {:?}", k.join(", "), s.targets),
                Route2::Broadcast => format!("→ broadcast to disks {:?}", s.targets),
                Route2::Range { key, .. } => {
                    format!("→ range [{key}] to disks {:?}", s.targets)
                }
            };
            let ops = match s.pieces.as_slice() {
                [_] => operators(&s.plan),
                pieces => {
                    let each: Vec<String> = pieces
                        .iter()
                        .enumerate()
                        .map(|(i, p)| format!("bundle {i}: {}", p.ops))
                        .collect();
                    format!("{} bundles: {}", pieces.len(), each.join(" | "))
                }
            };
            out.push(format!(
                "stage {i} at disks {:?} reads [{}] {route}: {ops}",
                s.disks,
                inputs.join(", ")
            ));
        }
        out
    }

    /// The stages the root depends on, inputs before readers.
    fn reachable(&self) -> Vec<usize> {
        fn visit(stages: &[StagePlan], i: usize, out: &mut Vec<usize>) {
            if out.contains(&i) {
                return;
            }
            for inp in &stages[i].inputs {
                if let Input::Pipe(p) = inp {
                    visit(stages, *p, out);
                }
            }
            out.push(i);
        }
        let mut out = Vec::new();
        if self.root < self.stages.len() {
            visit(&self.stages, self.root, &mut out);
        }
        out
    }

    /// Appends stage `s`'s partition `p` to `job` (the query's job at that partition's disk):
    /// its inputs, its scans' stages, its fragment, and its output (to the host for the top
    /// stage, else to the exchange of the stage that reads it).
    fn add_stage(&self, job: &mut DraftJob, s: usize, p: usize, ids: &[String]) -> Result<()> {
        let stage = &self.stages[s];
        let mut ports = Vec::new();
        for inp in &stage.inputs {
            match inp {
                Input::Scan(scan) => {
                    let (source, chain) = scan.disk_stages()?;
                    // Replicas: this disk reads only the partitions assigned to it.
                    let input = job.job.input(super::scan::reading_source(
                        source,
                        scan.partitions_at(stage.disks[p]),
                    ));
                    let mut from = input;
                    for disklet in chain {
                        let w = chain_weight(&disklet);
                        from = job.push(s, disklet, vec![from], w);
                    }
                    ports.push(from);
                }
                Input::Pipe(q) => {
                    let sender = &self.stages[*q];
                    ports.push(job.job.input(Source::Pipe {
                        exchange_id: ids[*q].clone(),
                        senders: sender.disks.len() as u32,
                        schema: sender.plan.schema().as_ref().clone(),
                    }));
                }
            }
        }
        let from = Self::add_pieces(job, s, &stage.pieces, &ports);
        let sink = self.sink(s, p, ids)?;
        if matches!(sink, Sink::Host) {
            job.root_partition = Some(p);
        }
        job.job.output(from, sink);
        Ok(())
    }

    /// Appends the pieces of stage `s` (its bundles) reading the stage's input `ports`; the
    /// last one's output port.
    fn add_pieces(job: &mut DraftJob, s: usize, pieces: &[StagePiece], ports: &[Port]) -> Port {
        let mut outs: Vec<Port> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let inputs = piece
                .inputs
                .iter()
                .map(|i| match *i {
                    PieceInput::Stage(k) => ports[k],
                    PieceInput::Piece(j) => outs[j],
                })
                .collect();
            let fragment = DiskletSpec::Fragment {
                kind: FragmentKind::Stage,
                plan: ExprBytes(piece.bytes.clone()),
            };
            outs.push(job.push(s, fragment, inputs, piece.weight));
        }
        *outs.last().expect("a stage has at least one piece")
    }

    /// Where partition `p` of stage `s` sends its rows.
    fn sink(&self, s: usize, p: usize, ids: &[String]) -> Result<Sink> {
        let stage = &self.stages[s];
        let route = match &stage.route {
            Route2::Host => return Ok(Sink::Host),
            Route2::Hash(keys) => Route::Hash {
                keys: keys
                    .iter()
                    .map(|k| jobs::encode_expr(&datafusion::prelude::col(k.as_str())))
                    .collect::<Result<_>>()?,
            },
            Route2::Broadcast => Route::Broadcast,
            Route2::Range { key, bounds } => Route::Range {
                key: jobs::encode_expr(&datafusion::prelude::col(key.as_str()))?,
                bounds: bounds
                    .iter()
                    .map(|b| jobs::encode_expr(&datafusion::prelude::lit(b.clone())))
                    .collect::<Result<_>>()?,
            },
        };
        Ok(Sink::Exchange {
            exchange_id: ids[s].clone(),
            targets: stage
                .targets
                .iter()
                .map(|d| self.cluster.address(*d).to_string())
                .collect(),
            sender: p as u32,
            route,
            relay: None,
            target_relays: vec![],
        })
    }

    /// The query's jobs, one per disk: every stage partition a disk runs, admitted under one
    /// grant (so a query never holds part of a disk's memory while waiting for the rest) and
    /// sent in one message.
    fn disk_jobs(&self, order: &[usize], ids: &[String]) -> Result<Vec<DiskJob>> {
        let query = adisk_core::builder::new_id("query");
        let mut by_disk = std::collections::BTreeMap::<u32, DraftJob>::new();
        for &s in order {
            for (p, &d) in self.stages[s].disks.iter().enumerate() {
                let job = by_disk
                    .entry(d)
                    .or_insert_with(|| DraftJob::new(d, &query, &self.settings.program));
                self.add_stage(job, s, p, ids)?;
            }
        }
        let cost = &self.settings.cost;
        let kib = fitted_buffer_kib(
            by_disk.values().map(|j| j.job.spec()),
            self.settings
                .buffer_kib
                .min(cost.disk_memory_bytes / BUFFERS_PER_DISK_MEMORY / 1024)
                .max(STAGE_BUFFER_KIB),
            cost.disk_memory_bytes,
            cost.buffers_per_stream,
        );
        let budget = Budget {
            buffer_kib: kib,
            memory_bytes: cost.disk_memory_bytes,
            buffers_per_stream: cost.buffers_per_stream,
            scratch_kib: self.settings.scratch_kib,
            temp_kib: self.settings.temp_kib,
        };
        by_disk
            .into_values()
            .map(|job| job.finish(&budget))
            .collect()
    }

    /// Starts the query's job at every disk, in disk order ([`Cluster::start_together`]).
    async fn start(&self) -> Result<Arc<Run>> {
        let order = self.reachable();
        let ids: Vec<String> = (0..self.stages.len())
            .map(|i| adisk_core::builder::new_id(&format!("stage{i}")))
            .collect();
        let jobs = self.disk_jobs(&order, &ids)?;
        let specs: Vec<(u32, &JobSpec)> = jobs.iter().map(|j| (j.disk, &j.spec)).collect();
        let started = self.cluster.start_together(&specs).await?;
        let (fail_tx, fail_rx) = tokio::sync::watch::channel(None::<Arc<HostError>>);
        let fail_tx = Arc::new(fail_tx);
        let roots = self.stages[self.root].disks.len();
        let others = jobs.iter().filter(|j| j.root_partition.is_none()).count();
        let cancel = Arc::new(Cancel {
            roots,
            stop: tokio::sync::watch::Sender::new(false),
            completed: Default::default(),
            others: Arc::new(tokio::sync::watch::Sender::new(others)),
        });
        let mut outputs: Vec<Option<_>> = (0..roots).map(|_| None).collect();
        for (job, stream) in jobs.into_iter().zip(started) {
            self.metrics.started();
            let root_partition = job.root_partition;
            let reporter = job.reporter(self);
            match root_partition {
                Some(p) => {
                    outputs[p] = Some(watched(
                        stream,
                        fail_rx.clone(),
                        reporter,
                        self.settings.host_link.clone(),
                        cancel.clone(),
                    ))
                }
                None => drain(
                    stream,
                    reporter,
                    (fail_tx.clone(), cancel.others.clone()),
                    cancel.stop.subscribe(),
                ),
            }
        }
        Ok(Arc::new(Run {
            outputs: Mutex::new(outputs),
            failure: fail_rx,
        }))
    }
}

/// Runs a job that sends the host nothing to its end, passing on its failure, or counting it
/// off `others` when it ends well; stops it (its stream dropped, so its disk cancels it) when
/// the query's readers stop.
fn drain(
    mut stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    reporter: Reporter,
    (fail, others): (Arc<Failure>, Arc<tokio::sync::watch::Sender<usize>>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let started = Instant::now();
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = stop.wait_for(|s| *s) => break,
            };
            match item {
                Some(Err(e)) => {
                    fail.send_if_modified(|f| {
                        f.is_none() && {
                            *f = Some(Arc::new(e));
                            true
                        }
                    });
                    break;
                }
                Some(Ok(_)) => {}
                None => {
                    others.send_modify(|n| *n = n.saturating_sub(1));
                    break;
                }
            }
        }
        drop(stream);
        reporter.report(0, 0, started).await;
    });
}

/// One disk's part of a query, being built.
struct DraftJob {
    job: JobBuilder,
    disk: u32,
    /// The top stage's partition this disk runs, if any (its output goes to the host).
    root_partition: Option<usize>,
    /// The query stage each of the job's stages belongs to.
    stage_of: Vec<usize>,
    /// How much scratch each of the job's stages needs relative to the others (see [`weight`];
    /// 0: it takes none).
    weights: Vec<u64>,
}

/// One disk's part of a query: one job.
struct DiskJob {
    spec: JobSpec,
    disk: u32,
    /// The top stage's partition this disk runs, if any (its output goes to the host).
    root_partition: Option<usize>,
    /// The query stage each of the job's stages belongs to.
    stage_of: Vec<usize>,
}

/// What a query may take of each disk.
struct Budget {
    /// The stream buffer size of the query's jobs, KiB.
    buffer_kib: u64,
    /// The smallest disk's memory budget, bytes.
    memory_bytes: u64,
    buffers_per_stream: u32,
    /// The most scratch a stage may take (`--scratch-kib`; 0: no limit of its own).
    scratch_kib: u64,
    /// The query's temporary space per disk (`--temp-kib`; 0: by its stages).
    temp_kib: u64,
}

impl DraftJob {
    fn new(disk: u32, query: &str, program: &str) -> Self {
        DraftJob {
            job: JobBuilder::new("query")
                .id(format!("{query}-d{disk}"))
                .program(program)
                .scratch_kib(MIN_STAGE_SCRATCH_KIB)
                .buffer_kib(STAGE_BUFFER_KIB),
            disk,
            root_partition: None,
            stage_of: vec![],
            weights: vec![],
        }
    }

    /// Appends a stage of query stage `s` reading `inputs`, of scratch weight `w`; its output
    /// port.
    fn push(&mut self, s: usize, disklet: DiskletSpec, inputs: Vec<Port>, w: u64) -> Port {
        self.stage_of.push(s);
        self.weights.push(w);
        self.job.stage(disklet, inputs)
    }

    /// The finished job, sized to fit the disk in one grant. Its stream buffers (their size
    /// chosen for the whole query by [`fitted_buffer_kib`]), inboxes and output
    /// allowances come first (DiskOS's own count, [`grant_beyond_scratch`]); what is
    /// left of the disk's memory, less a sixteenth, is the stages' scratch, divided by weight
    /// (a hash join's build side, a sort or an aggregation needs room, a stage that only
    /// forwards rows hardly any), never more than `--scratch-kib` per stage. A query whose
    /// streams alone do not fit is refused by the disk, typed. Temporary space is the
    /// query's own request (`--temp-kib`, for the whole query at this disk) or
    /// [`STAGE_TEMP_KIB`] per stage that can spill, at most [`MAX_QUERY_TEMP_KIB`].
    fn finish(self, budget: &Budget) -> Result<DiskJob> {
        let disk = self.disk;
        let invalid = |e| HostError::Invalid(format!("the query's job at disk {disk}: {e}"));
        let job = self.job.buffer_kib(budget.buffer_kib);
        let streams = grant_beyond_scratch(
            job.spec(),
            STAGE_BUFFER_KIB * 1024,
            budget.buffers_per_stream,
        )
        .map_err(invalid)?;
        let left = budget.memory_bytes.saturating_sub(streams);
        let left = left - left / 16;
        let unit = left / self.weights.iter().sum::<u64>().max(1);
        let cap = match budget.scratch_kib {
            0 => u64::MAX,
            kib => kib * 1024,
        };
        let scratch = self
            .weights
            .iter()
            .map(|w| ((unit * w).min(cap) / 1024).max(MIN_STAGE_SCRATCH_KIB))
            .collect();
        let spilling = self.weights.iter().filter(|w| **w > 1).count() as u64;
        let temp_kib = match budget.temp_kib {
            0 => (spilling * STAGE_TEMP_KIB).min(MAX_QUERY_TEMP_KIB),
            kib => kib,
        };
        let spec = job
            .stage_scratch_kib(scratch)
            .temp_kib(temp_kib)
            .build()
            .map_err(invalid)?;
        Ok(DiskJob {
            spec,
            disk,
            root_partition: self.root_partition,
            stage_of: self.stage_of,
        })
    }
}

impl DiskJob {
    fn reporter(&self, exec: &DisksExec) -> Reporter {
        Reporter {
            cluster: exec.cluster.clone(),
            metrics: exec.metrics.clone(),
            disk: self.disk,
            job_id: self.spec.job_id.clone(),
            stage: exec.root,
            describe: "the query's stages (one job per disk)".to_string(),
            spec_bytes: self.spec.to_bytes().len(),
            stage_of: self.stage_of.clone(),
        }
    }
}

/// Scratch weight of a stage of a scan's chain: a partial aggregation or sort holds state
/// (as [`weight`]), a selection none.
fn chain_weight(disklet: &DiskletSpec) -> u64 {
    match disklet {
        DiskletSpec::Fragment {
            kind: FragmentKind::Aggregate | FragmentKind::Sort,
            ..
        } => 5,
        DiskletSpec::Fragment {
            kind: FragmentKind::Stage,
            ..
        }
        | DiskletSpec::Merge { .. }
        | DiskletSpec::HashJoin { .. } => 1,
        _ => 0,
    }
}

/// Most temporary disk space one query's job asks of a disk, KiB (a disk grants 4 GiB to its
/// jobs in all).
const MAX_QUERY_TEMP_KIB: u64 = 1 << 20;

/// Temporary disk space of a stage job that sorts, aggregates or joins, KiB, unless the
/// query asks for its own (`--temp-kib`); a disk grants 4 GiB to its jobs in all.
const STAGE_TEMP_KIB: u64 = 256 << 10;

/// Smallest scratch of a stage job, KiB.
const MIN_STAGE_SCRATCH_KIB: u64 = 64;

/// Weight of a stage holding one hash join (see [`weight`]).
const JOIN_WEIGHT: u64 = 9;

/// How much scratch a stage needs relative to others: 1, plus 8 per hash join (its build side
/// is held whole), 4 per sort, aggregation or merge join that holds its input or a key's rows.
fn weight(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let mut w = 1;
    let _ = plan.apply(|node| {
        let n: &dyn ExecutionPlan = node.as_ref();
        if n.downcast_ref::<HashJoinExec>().is_some() {
            w += JOIN_WEIGHT - 1;
        } else if n.downcast_ref::<SortExec>().is_some()
            || n.downcast_ref::<AggregateExec>().is_some()
            || n.downcast_ref::<datafusion::physical_plan::joins::SortMergeJoinExec>()
                .is_some()
        {
            w += 4;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    w
}

/// The jobs of one execution that feed other stages, stopped (their streams dropped, so their
/// disks cancel them) when the top stage's streams go away before all of them ended: a failure
/// anywhere, or a reader that stopped early.
struct Cancel {
    stop: tokio::sync::watch::Sender<bool>,
    roots: usize,
    completed: std::sync::atomic::AtomicUsize,
    /// The query's jobs that send the host nothing and have not ended yet.
    others: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if self.completed.load(std::sync::atomic::Ordering::SeqCst) < self.roots {
            self.stop.send_replace(true);
        }
    }
}

/// Stream buffer of a query's jobs at the least to start fitting from, KiB: they start from
/// the SQL jobs' size (`--buffer-kib`, 1 MiB), at most 1/[`BUFFERS_PER_DISK_MEMORY`] of the
/// smallest disk's memory, and halve it until their streams take at most half of it
/// ([`fitted_buffer_kib`]).
const STAGE_BUFFER_KIB: u64 = 64;

/// A query's buffers at `disks` start from at most this fraction of a disk's memory (1 MiB on
/// 256 MiB disks, 64 KiB on 16 MiB ones): larger buffers also make larger batches, and on a
/// 16 MiB disk a sort-merge join's sorts then no longer fit their share of a stage's scratch.
const BUFFERS_PER_DISK_MEMORY: u64 = 256;

/// What a stage job reports into the query's metrics when it ends.
struct Reporter {
    cluster: Arc<Cluster>,
    metrics: Arc<QueryMetrics>,
    disk: u32,
    job_id: String,
    stage: usize,
    describe: String,
    spec_bytes: usize,
    /// The query stage of each of the job's stages (their statistics are named after it).
    stage_of: Vec<usize>,
}

impl Reporter {
    async fn report(self, rows: u64, bytes: u64, started: Instant) {
        let mut stats = self.cluster.job_stats(self.disk, &self.job_id).await.ok();
        for (st, q) in stats
            .iter_mut()
            .flat_map(|s| s.stages.iter_mut())
            .zip(&self.stage_of)
        {
            st.disklet = format!("{} @ stage {q}", st.disklet);
        }
        let control_bytes = super::control_bytes(self.spec_bytes, &self.job_id, stats.as_ref());
        self.metrics.record(ScanReport {
            control_bytes,
            scan_id: usize::MAX - self.stage,
            table: self.describe,
            stages: vec![],
            disk: self.disk,
            stats,
            rows_received: rows,
            bytes_received: bytes,
            wall_ns: started.elapsed().as_nanos() as u64,
            bloom_keys: None,
            bloom_bytes: None,
            bloom_true_matches: None,
            expected: None,
        });
    }
}

/// Reports its job when dropped: at the end of the stream, on an error, or when the reader
/// stops early (a LIMIT above).
struct ReportOnDrop {
    reporter: Option<Reporter>,
    rows: u64,
    bytes: u64,
    started: Instant,
}

impl Drop for ReportOnDrop {
    fn drop(&mut self) {
        if let Some(r) = self.reporter.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (rows, bytes, started) = (self.rows, self.bytes, self.started);
            handle.spawn(r.report(rows, bytes, started));
        }
    }
}

/// Resolves with the first failure of another job of the query; never, if there is none.
/// The first failure of a query's jobs that send the host nothing.
type Failure = tokio::sync::watch::Sender<Option<Arc<HostError>>>;

async fn first_failure(
    mut failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
) -> HostError {
    let got = failure
        .wait_for(|f| f.is_some())
        .await
        .ok()
        .and_then(|why| why.clone());
    match got {
        Some(why) => another_job_failed(&why),
        None => std::future::pending().await,
    }
}

/// The error a top stage's stream ends with when another job of the query failed with `e`:
/// the same kind (so failover sees an unreachable disk as one), said to come from there.
fn another_job_failed(e: &HostError) -> HostError {
    match e.retyped() {
        HostError::Invalid(why) => {
            HostError::Invalid(format!("another stage of the query failed: {why}"))
        }
        typed => typed,
    }
}

/// Once a top stage's stream ended: waits for the query's other jobs to end too. Their rows
/// reach the top stage through exchanges, and a job that failed may have cut them short:
/// the query answers only when every one of its jobs ended well.
async fn others_ended(
    others: &tokio::sync::watch::Sender<usize>,
    failure: &mut std::pin::Pin<Box<impl std::future::Future<Output = HostError>>>,
) -> Option<HostError> {
    let mut left = others.subscribe();
    tokio::select! {
        _ = left.wait_for(|n| *n == 0) => None,
        why = failure => Some(why),
    }
}

/// The top stage's stream at one disk: fails when any other job of the query fails, pays the
/// host link, and reports its job when it ends.
fn watched(
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    failure: tokio::sync::watch::Receiver<Option<Arc<HostError>>>,
    reporter: Reporter,
    link: Option<Arc<crate::throttle::TokenBucket>>,
    cancel: Arc<Cancel>,
) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
    let guard = ReportOnDrop {
        reporter: Some(reporter),
        rows: 0,
        bytes: 0,
        started: Instant::now(),
    };
    let failed = Box::pin(first_failure(failure));
    let state = (stream, failed, guard, link, false, cancel);
    futures::stream::unfold(
        state,
        |(mut stream, mut failed, mut guard, link, done, cancel)| async move {
            if done {
                return None;
            }
            let item = tokio::select! {
                item = stream.next() => item,
                why = &mut failed => Some(Err(why)),
            };
            match item {
                Some(Ok(b)) => {
                    let n = adisk_core::stats::batch_bytes(&b);
                    if let Some(l) = &link {
                        l.acquire(n).await;
                    }
                    guard.rows += b.num_rows() as u64;
                    guard.bytes += n;
                    Some((Ok(b), (stream, failed, guard, link, false, cancel)))
                }
                Some(Err(e)) => Some((Err(e), (stream, failed, guard, link, true, cancel))),
                None => match others_ended(&cancel.others, &mut failed).await {
                    Some(why) => Some((Err(why), (stream, failed, guard, link, true, cancel))),
                    None => {
                        cancel
                            .completed
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        None
                    }
                },
            }
        },
    )
    .boxed()
}

impl DisplayAs for DisksExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DisksExec: stages=[{}]", self.describe().join(" | "))
    }
}

impl ExecutionPlan for DisksExec {
    fn name(&self) -> &str {
        "DisksExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let schema: SchemaRef = self.properties.eq_properties.schema().clone();
        let this = self.clone();
        let stream = futures::stream::once(async move {
            let run = this
                .run
                .get_or_init(|| async { this.start().await.map_err(|e| e.to_string()) })
                .await
                .clone();
            let run =
                run.map_err(|e| DataFusionError::External(Box::new(HostError::Invalid(e))))?;
            let taken = run
                .outputs
                .lock()
                .expect("outputs lock")
                .get_mut(partition)
                .and_then(Option::take);
            let _ = &run.failure;
            taken.ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "disks partition {partition} read twice or missing"
                ))
            })
        })
        .map(|r| match r {
            Ok(s) => s
                .map(|b| b.map_err(|e| DataFusionError::External(Box::new(e))))
                .boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Estimated bytes the operators of `plan`'s stages at the disks take in from their scans (after
/// each scan's selection, before any join): what the `disks` plan processes where a
/// host-centric plan, its probe sides pruned by Bloom filters, processes what it ships. None
/// where DataFusion cannot estimate a scan.
pub(super) fn plan_work(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let mut work = Some(0u64);
    let _ = plan.apply(|node| {
        if let Some(d) = node.downcast_ref::<DisksExec>() {
            for s in d.reachable() {
                for input in &d.stages[s].inputs {
                    if let Input::Scan(scan) = input {
                        let scan: Arc<dyn ExecutionPlan> = scan.clone();
                        let bytes = super::sortmerge::estimated_bytes(&scan);
                        work = work.zip(bytes).map(|(w, b)| w.saturating_add(b));
                    }
                }
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    work
}

/// What `plan` is expected to move: the estimated output of every disk scan and `DisksExec`
/// the host reads, and the exchanges between disks. None where an estimate is missing.
pub(super) fn plan_traffic(plan: &Arc<dyn ExecutionPlan>) -> Option<super::cost::Traffic> {
    let mut t = super::cost::Traffic {
        to_host: 0,
        disk_to_disk: 0,
    };
    let mut known = true;
    let _ = plan.apply(|node| {
        let n: &dyn ExecutionPlan = node.as_ref();
        if let Some(d) = n.downcast_ref::<DisksExec>() {
            match d.estimated_traffic() {
                Some((host, between)) => {
                    t.to_host = t.to_host.saturating_add(host);
                    t.disk_to_disk = t.disk_to_disk.saturating_add(between);
                }
                None => known = false,
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        if n.downcast_ref::<DiskScanExec>().is_some() {
            match super::sortmerge::estimated_bytes(node) {
                Some(b) => t.to_host = t.to_host.saturating_add(b),
                None => known = false,
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    known.then_some(t)
}
