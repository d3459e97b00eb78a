//! Disk jobs run: [`run_phase`] starts one job per disk and merges their result streams as
//! they arrive. Jobs are made with [`adisk_core::builder::JobBuilder`] (ids, programs, wiring,
//! sizes, the checked graph); here are what planners need beside it: expressions encoded for
//! the disks ([`encode_expr`]), aggregation stages planned by DataFusion ([`aggregate_stage`]).
use crate::client::cluster::Cluster;
use crate::{HostError, Result};
use adisk_core::protocol::{DiskletSpec, ExprBytes, JobSpec};
use adisk_core::stats::{DiskJobStats, JobStats};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::Expr;
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// What a job produced at the host.
#[derive(Debug)]
pub struct JobOutput {
    /// Result schema.
    pub schema: SchemaRef,
    /// Result rows.
    pub batches: Vec<RecordBatch>,
    /// Statistics.
    pub stats: JobStats,
}

impl JobOutput {
    /// Rows in the result.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Columns without table qualifiers: a disk's stream has plain column names.
fn unqualify(e: Expr) -> Expr {
    e.transform(|e| {
        Ok(match e {
            Expr::Column(c) => Transformed::yes(Expr::Column(Column::new_unqualified(c.name))),
            other => Transformed::no(other),
        })
    })
    .map(|t| t.data)
    .expect("rewriting columns cannot fail")
}

/// A logical expression (alias dropped, columns unqualified) as the `datafusion-proto` bytes a
/// disk decodes.
///
/// # Errors
/// Expressions `datafusion-proto` cannot encode (e.g. some user-defined functions).
pub fn encode_expr(e: &Expr) -> Result<ExprBytes> {
    let bare = match e {
        Expr::Alias(a) => (*a.expr).clone(),
        other => other.clone(),
    };
    let bytes = unqualify(bare)
        .to_bytes()
        .map_err(|source| HostError::Plan {
            context: format!("encoding `{e}`"),
            source,
        })?;
    Ok(ExprBytes(bytes.to_vec()))
}

/// Starts every spec, feeds each result batch (with its disk) to `on_batch` as it arrives
/// (each through the host link's throttle, `host_link_mbps`), and returns every disk's
/// statistics. The first error cancels the rest, and returns only once every other job of the
/// phase has ended ([`settle`]), so that what the caller cleans up next (the phase's outputs)
/// is not committed after it.
///
/// # Errors
/// A disk refusing or failing its job, or `on_batch` failing.
pub async fn run_phase(
    cluster: &Cluster,
    specs: Vec<(u32, JobSpec)>,
    on_batch: impl FnMut(u32, RecordBatch) -> Result<()>,
) -> Result<Vec<DiskJobStats>> {
    if let Err(e) = stream_phase(cluster, &specs, on_batch).await {
        settle(cluster, &specs).await;
        return Err(e);
    }
    futures::future::try_join_all(specs.iter().map(|(d, s)| cluster.job_stats(*d, &s.job_id))).await
}

async fn stream_phase(
    cluster: &Cluster,
    specs: &[(u32, JobSpec)],
    mut on_batch: impl FnMut(u32, RecordBatch) -> Result<()>,
) -> Result<()> {
    let together: Vec<(u32, &JobSpec)> = specs.iter().map(|(d, s)| (*d, s)).collect();
    let starts = cluster.start_together(&together).await?;
    let starts = specs
        .iter()
        .zip(starts)
        .map(|((d, _), st)| st.map(move |r| (*d, r)));
    let mut merged = futures::stream::select_all(starts);
    while let Some((d, item)) = merged.next().await {
        let batch = item?;
        if let Some(link) = cluster.host_link() {
            link.acquire(adisk_core::stats::batch_bytes(&batch)).await;
        }
        on_batch(d, batch)?;
    }
    Ok(())
}

/// After a failed phase whose result streams were dropped (which cancels their jobs), waits
/// until every job of `specs` has ended at its disk — cancelled, its outputs discarded, its
/// grants and temporary files returned — or its disk does not answer or no longer knows it,
/// within the cluster's disk timeout. Polls the jobs' statistics every 20 ms.
pub async fn settle(cluster: &Cluster, specs: &[(u32, JobSpec)]) {
    let timeout = Duration::from_millis(cluster.config().cluster.disk_timeout_ms.max(1000));
    let ended = |d: u32, id: String| async move {
        loop {
            match cluster.job_stats(d, &id).await {
                Ok(s) if !s.ended => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => return,
            }
        }
    };
    let all = futures::future::join_all(specs.iter().map(|(d, s)| ended(*d, s.job_id.clone())));
    if tokio::time::timeout(timeout, all).await.is_err() {
        tracing::warn!("jobs of a failed phase still running after {timeout:?}");
    }
}

/// A disk stage computing `aggs` (grouped by `group_by`) over a stream of `schema`, planned by
/// DataFusion and shipped as a `sql_aggregate` plan fragment: partial states when `partial`
/// (to be finished elsewhere), final values otherwise. Job graphs and benchmarks use it for
/// stages that read exchange pipes or tables directly.
///
/// # Errors
/// Expressions that do not resolve against `schema` or that DataFusion cannot plan.
pub async fn aggregate_stage(
    schema: &SchemaRef,
    group_by: Vec<Expr>,
    aggs: Vec<Expr>,
    partial: bool,
) -> Result<DiskletSpec> {
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    let err = |source| HostError::Plan {
        context: "planning an aggregation stage".into(),
        source,
    };
    // No logical optimizer: it would prune the input to the columns the aggregates read
    // (none for `count(1)`), and the stage reads its input's columns as they come.
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(1))
        .with_default_features()
        .with_optimizer_rules(vec![])
        .build();
    let ctx = datafusion::prelude::SessionContext::new_with_state(state);
    let df = ctx
        .read_batch(RecordBatch::new_empty(schema.clone()))
        .map_err(err)?
        .aggregate(group_by, aggs)
        .map_err(err)?;
    let plan = df.create_physical_plan().await.map_err(err)?;
    let mut node = &plan;
    let first = loop {
        if let Some(a) = node.downcast_ref::<AggregateExec>()
            && matches!(a.mode(), AggregateMode::Partial | AggregateMode::Single)
        {
            break a;
        }
        node = node.children().into_iter().next().ok_or_else(|| {
            HostError::Invalid(format!("no aggregation over the input in {}", plan.name()))
        })?;
    };
    if first.input_schema().as_ref() != schema.as_ref() {
        return Err(HostError::Invalid(
            "the aggregation does not read its input's columns directly".into(),
        ));
    }
    let mode = if partial {
        AggregateMode::Partial
    } else {
        AggregateMode::Single
    };
    let leaf = Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
        schema.clone(),
    ));
    let stage = AggregateExec::try_new(
        mode,
        first.group_expr().clone(),
        first.aggr_expr().to_vec(),
        first.filter_expr().to_vec(),
        leaf,
        schema.clone(),
    )
    .map_err(err)?;
    let bytes = datafusion_proto::bytes::physical_plan_to_bytes(Arc::new(stage)).map_err(err)?;
    Ok(DiskletSpec::Fragment {
        kind: adisk_core::protocol::FragmentKind::Aggregate,
        plan: ExprBytes(bytes.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    #[test]
    fn expressions_lose_aliases_and_qualifiers() {
        let qualified = Expr::Column(Column::new(Some("lineitem"), "l_quantity"));
        let a = encode_expr(&(qualified + lit(1)).alias("q")).unwrap();
        let b = encode_expr(&(col("l_quantity") + lit(1))).unwrap();
        assert_eq!(a, b);
    }
}
