//! Flight actions for user disklets (install, list, remove) and plain files (generated images,
//! listing).
use crate::status::storage_status;
use adisk_core::protocol::{FileInfo, GenerateImages, InstallDisklet, action};
use adisk_diskos::DiskOs;
use adisk_wasm::{DiskletRegistry, WasmError};
use std::sync::Arc;
use tonic::Status;

/// Most images one `generate_images` request may write.
pub const MAX_IMAGES_PER_REQUEST: usize = 100_000;

fn wasm_status(e: WasmError) -> Status {
    crate::status::status_of(&adisk_wasm::to_diskos_error(e))
}

/// Handles the actions of this module; `None` if `name` is not one of them.
pub async fn handle(
    os: &Arc<DiskOs>,
    registry: Option<&Arc<DiskletRegistry>>,
    name: &str,
    body: &[u8],
) -> Option<Result<serde_json::Value, Status>> {
    let registry = || {
        registry
            .cloned()
            .ok_or_else(|| Status::unimplemented("this disk does not run user disklets"))
    };
    let json =
        |v: serde_json::Result<serde_json::Value>| v.map_err(|e| Status::internal(e.to_string()));
    Some(match name {
        action::DISKLET_INSTALL => {
            let req: InstallDisklet = match serde_json::from_slice(body) {
                Ok(r) => r,
                Err(e) => {
                    return Some(Err(Status::invalid_argument(format!(
                        "malformed install request: {e}"
                    ))));
                }
            };
            match registry() {
                // Compiling can take a while: off the async workers.
                Ok(r) => match tokio::task::spawn_blocking(move || {
                    r.install(&req.name, &req.module.0, req.scratch_kib)
                })
                .await
                {
                    Ok(Ok(info)) => json(serde_json::to_value(info)),
                    Ok(Err(e)) => Err(wasm_status(e)),
                    Err(e) => Err(Status::internal(format!("install panicked: {e}"))),
                },
                Err(s) => Err(s),
            }
        }
        action::DISKLET_LIST => registry().and_then(|r| json(serde_json::to_value(r.list()))),
        action::DISKLET_REMOVE => {
            let name = String::from_utf8_lossy(body).to_string();
            registry()
                .and_then(|r| r.remove(&name).map_err(wasm_status))
                .and_then(|b| json(serde_json::to_value(b)))
        }
        action::GENERATE_IMAGES => {
            let req: GenerateImages = match serde_json::from_slice(body) {
                Ok(r) => r,
                Err(e) => {
                    return Some(Err(Status::invalid_argument(format!(
                        "malformed generate_images request: {e}"
                    ))));
                }
            };
            if req.indices.len() > MAX_IMAGES_PER_REQUEST {
                return Some(Err(Status::invalid_argument(format!(
                    "at most {MAX_IMAGES_PER_REQUEST} images per request"
                ))));
            }
            let store = os.store().clone();
            let written = tokio::task::spawn_blocking(move || {
                req.indices
                    .iter()
                    .map(|i| adisk_storage::images::write(&store, *i, req.side))
                    .sum::<Result<u64, _>>()
            })
            .await;
            match written {
                Ok(Ok(_)) => json(serde_json::to_value(true)),
                Ok(Err(e)) => Err(storage_status(e)),
                Err(e) => Err(Status::internal(format!("image generation panicked: {e}"))),
            }
        }
        action::LIST_FILES => {
            let prefix = String::from_utf8_lossy(body).to_string();
            adisk_storage::images::list(os.store(), &prefix)
                .map_err(storage_status)
                .and_then(|v| {
                    json(serde_json::to_value(
                        v.into_iter()
                            .map(|(path, bytes)| FileInfo { path, bytes })
                            .collect::<Vec<_>>(),
                    ))
                })
        }
        _ => return None,
    })
}
