//! The cluster's state as one JSON document — each disk's status and every table — for
//! `adisk status` (in process, or through the service with `--connect`: the `adisk.status`
//! action) and anything else that reads it.
use adisk_host::Cluster;
use serde_json::{Value, json};

/// The Flight action of the service that answers [`report`] (JSON in one result).
pub const ACTION: &str = "adisk.status";

/// Each disk's status (or why it did not answer) and every table of the catalog.
pub async fn report(cluster: &Cluster) -> Value {
    let statuses = cluster.status().await;
    let disks: Vec<Value> = statuses
        .iter()
        .enumerate()
        .map(|(d, s)| {
            let address = cluster.address(d as u32);
            match s {
                Ok(s) => {
                    let mut v = serde_json::to_value(s).unwrap_or_else(|_| json!({}));
                    v["address"] = address.into();
                    v
                }
                Err(e) => json!({ "disk_id": d, "address": address, "error": e.to_string() }),
            }
        })
        .collect();
    let (tables, catalog_error) = match cluster.catalog().await {
        Ok(c) => {
            let tables = c
                .tables
                .values()
                .map(|t| {
                    let missing: serde_json::Map<String, Value> = t
                        .missing_by_disk()
                        .into_iter()
                        .map(|(d, p)| (d.to_string(), json!(p)))
                        .collect();
                    json!({"name": t.name, "rows": t.rows(), "bytes": t.bytes(),
                        "partitions": t.placements.len(), "disks": t.disks(),
                        "replicas": t.replicas(), "needs_repair": t.needs_repair(),
                        "missing": missing, "stale": t.stale})
                })
                .chain(c.incomplete.iter().map(|(name, why)| {
                    json!({"name": name, "incomplete": why.reason, "disks": why.disks,
                        "message": adisk_host::cluster::incomplete_error(name, why).to_string()})
                }))
                .collect();
            (tables, None)
        }
        Err(e) => (vec![], Some(e.to_string())),
    };
    let mut v = json!({ "disks": disks, "tables": tables });
    if let Some(e) = catalog_error {
        v["catalog_error"] = e.into();
    }
    v
}
