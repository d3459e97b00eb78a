//! The parameters a load records with its table, for the commands that read it later
//! (`adisk app earth` needs the grid the records were generated for, `adisk app fft` the
//! seed its check regenerates the matrix from).
//!
//! They are the table's Arrow schema metadata, `adisk.<app>.<name>` = a decimal integer:
//! every disk's manifest keeps the schema the load wrote, and the catalog hands it to the
//! host. A table loaded before parameters were recorded has none; its commands then take the
//! flags as given.

use crate::{AppError, Result};
use adisk_host::Cluster;
use arrow::datatypes::{Schema, SchemaRef};
use std::sync::Arc;

fn key(app: &str, name: &str) -> String {
    format!("adisk.{app}.{name}")
}

/// `schema` with `values` recorded for `app`.
pub fn record(schema: &Schema, app: &str, values: &[(&str, u64)]) -> SchemaRef {
    let mut metadata = schema.metadata().clone();
    for (name, value) in values {
        metadata.insert(key(app, name), value.to_string());
    }
    Arc::new(schema.clone().with_metadata(metadata))
}

/// The value `app`'s load recorded for `name` in `schema` (None: not recorded).
///
/// # Errors
/// A recorded value that is not a decimal integer.
pub fn value(schema: &Schema, app: &str, name: &str) -> Result<Option<u64>> {
    let key = key(app, name);
    schema
        .metadata()
        .get(&key)
        .map(|v| {
            v.parse().map_err(|_| {
                AppError::Invalid(format!(
                    "the table's recorded `{key}` is `{v}`, not an integer"
                ))
            })
        })
        .transpose()
}

/// The schema of `table` as the catalog holds it (None: no such table).
///
/// # Errors
/// The catalog cannot be read.
pub async fn schema(cluster: &Cluster, table: &str) -> Result<Option<SchemaRef>> {
    let catalog = cluster.catalog().await?;
    Ok(catalog.tables.get(table).map(|e| e.schema.clone()))
}

/// `given` if it agrees with `recorded`, `recorded` if nothing was given, `default` if
/// neither.
///
/// # Errors
/// [`AppError::LoadedMismatch`] naming `flag`, both values and `table`.
pub fn resolve<T: PartialEq + std::fmt::Display + Copy>(
    flag: &str,
    table: &str,
    given: Option<T>,
    recorded: Option<T>,
    default: T,
) -> Result<T> {
    match (given, recorded) {
        (Some(g), Some(r)) if g != r => Err(AppError::LoadedMismatch {
            flag: flag.into(),
            given: g.to_string(),
            recorded: r.to_string(),
            table: table.into(),
        }),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Ok(default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};

    #[test]
    fn recorded_values_read_back_and_flags_are_checked_against_them() {
        let plain = Schema::new(vec![Field::new("x", DataType::UInt32, false)]);
        let schema = record(&plain, "earth", &[("width", 256), ("height", 128)]);
        assert_eq!(schema.fields(), plain.fields());
        assert_eq!(value(&schema, "earth", "width").unwrap(), Some(256));
        assert_eq!(value(&schema, "fft", "width").unwrap(), None);
        assert_eq!(value(&plain, "earth", "width").unwrap(), None);
        assert_eq!(resolve("--width", "t", None, Some(256), 1024).unwrap(), 256);
        assert_eq!(
            resolve("--width", "t", Some(256), Some(256), 1024).unwrap(),
            256
        );
        assert_eq!(resolve("--width", "t", Some(300), None, 1024).unwrap(), 300);
        assert_eq!(
            resolve::<u32>("--width", "t", None, None, 1024).unwrap(),
            1024
        );
        let err = resolve("--width", "earth", Some(300), Some(256), 1024)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--width 300") && err.contains("--width 256") && err.contains("`earth`"),
            "{err}"
        );
    }
}
