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
use super::disks_exec::{
    DisksExec, Input, JOIN_WEIGHT, Route2, StagePiece, StagePlan, operators, weight,
};
use super::scan::DiskScanExec;
use super::{QueryMetrics, SqlSettings};
use crate::client::cluster::Cluster;
use arrow::datatypes::SchemaRef;
use datafusion::common::JoinType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::DataFusionError;
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
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

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
        super::tree::rewire(plan, children)
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

/// What an operator that needs all its input's rows in one place does with a stage that runs
/// at one disk (a one-disk cluster, a table stored on one disk), where it would otherwise
/// leave every row to ship.
enum Gather {
    /// A global aggregation, sort or limit: it runs in that stage.
    Runs,
    /// A merge of partitions (without a limit): one partition has nothing to merge.
    Merges,
}

fn gathers(node: &dyn ExecutionPlan) -> Option<Gather> {
    use datafusion::physical_plan::limit::GlobalLimitExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
    if node.downcast_ref::<AggregateExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
        || node.downcast_ref::<GlobalLimitExec>().is_some()
    {
        return Some(Gather::Runs);
    }
    let merges = node
        .downcast_ref::<CoalescePartitionsExec>()
        .is_some_and(|c| c.fetch().is_none())
        || (node.downcast_ref::<SortPreservingMergeExec>()).is_some_and(|m| m.fetch().is_none());
    merges.then_some(Gather::Merges)
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
        if per_partition {
            let child = self.cut(plan.children().first()?)?;
            let plan = super::tree::rewire(plan.clone(), vec![child.plan]).ok()?;
            return Some(Cut { plan, ..child });
        }
        if let Some(gather) = gathers(node) {
            // All the rows it gathers are at one disk already: it runs there too, or, when it
            // only merges partitions, is not needed (a stage makes one partition per disk).
            let child = self.cut(plan.children().first()?)?;
            if child.disks.len() != 1 || child.plan.output_partitioning().partition_count() != 1 {
                return None;
            }
            let plan = match gather {
                Gather::Runs => super::tree::rewire(plan.clone(), vec![child.plan]).ok()?,
                Gather::Merges => child.plan,
            };
            return Some(Cut {
                plan,
                declustered: false,
                ..child
            });
        }
        None
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
                let joined = super::tree::rewire(plan.clone(), vec![leaf, probe.plan]).ok()?;
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
            _ => super::tree::rewire(plan.clone(), vec![l.plan.clone(), r.plan.clone()]).ok()?,
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
        let joined = super::tree::rewire(plan.clone(), children).ok()?;
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
        super::tree::rewire(plan.clone(), vec![left, right]).ok()
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
    datafusion_proto::bytes::physical_plan_from_bytes(&bytes, &super::rules::decoding_task())
        .is_ok()
}
