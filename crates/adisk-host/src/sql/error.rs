//! Errors of planning and running a query: DataFusion's errors, and the host's errors that
//! travel through DataFusion, given back as they were.

use crate::HostError;

/// The table and partition of a disk's `corrupt partition …/tables/<table>/[g-<load>/]part-NNNNN.parquet: …`.
pub(crate) fn corrupt_partition(message: &str) -> Option<(String, u32)> {
    let path = message
        .split("corrupt partition ")
        .nth(1)?
        .split(": ")
        .next()?;
    let mut parts = path.rsplit('/');
    let file = parts.next()?;
    let partition = file
        .strip_prefix("part-")?
        .strip_suffix(".parquet")?
        .parse()
        .ok()?;
    let table = parts.find(|p| !p.starts_with(adisk_storage::staging::GENERATION_PREFIX))?;
    Some((table.to_string(), partition))
}

/// The first [`HostError`] in `e`'s chain of sources.
pub(crate) fn host_error_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a HostError> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<HostError>() {
            return Some(h);
        }
        next = e.source();
    }
    None
}

pub(crate) fn plan_err(
    context: &str,
) -> impl FnOnce(datafusion::error::DataFusionError) -> HostError + '_ {
    move |source| {
        // A disk error travels through DataFusion as an external error, perhaps wrapped again
        // (shared by a repartition, with context, as an Arrow error): give it back as is, so
        // failover sees an unreachable disk as one.
        if let Some(h) = host_error_in(&source) {
            return h.retyped();
        }
        HostError::Plan {
            context: context.to_string(),
            source,
        }
    }
}
