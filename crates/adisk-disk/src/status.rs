//! What a disk answers when something fails or an action replies: DiskOS and storage errors as
//! Flight statuses with stable codes, JSON replies, and the mark a caller that is not a member
//! of the cluster carries.
use adisk_diskos::DiskOsError;
use adisk_storage::StorageError;
use bytes::Bytes;
use tonic::Status;

/// Maps a DiskOS error to a Flight status with a stable code.
pub fn status_of(e: &DiskOsError) -> Status {
    let msg = e.to_string();
    match e {
        DiskOsError::Storage(StorageError::UnknownTable(_)) => Status::not_found(msg),
        DiskOsError::Storage(StorageError::UnknownColumn { .. })
        | DiskOsError::Storage(StorageError::Invalid(_)) => Status::invalid_argument(msg),
        DiskOsError::Storage(StorageError::Corrupt { .. })
        | DiskOsError::Storage(StorageError::BadManifest { .. }) => Status::data_loss(msg),
        DiskOsError::Storage(StorageError::SchemaMismatch { .. }) => {
            Status::failed_precondition(msg)
        }
        DiskOsError::Storage(_) => Status::internal(msg),
        DiskOsError::InvalidJob(_) | DiskOsError::DataFusion { .. } | DiskOsError::Limit(_) => {
            Status::invalid_argument(msg)
        }
        DiskOsError::GrantTooLarge { .. }
        | DiskOsError::AdmissionQueueFull { .. }
        | DiskOsError::AdmissionTimeout { .. }
        | DiskOsError::ScratchExceeded { .. }
        | DiskOsError::TempSpaceExceeded { .. }
        | DiskOsError::ComputeQueueFull { .. }
        | DiskOsError::BufferExceeded { .. } => Status::resource_exhausted(msg),
        DiskOsError::Decode { .. } => Status::data_loss(msg),
        DiskOsError::Pipe(_) => Status::aborted(msg),
        DiskOsError::Link(_) => Status::unavailable(msg),
        DiskOsError::Cancelled => Status::cancelled(msg),
        DiskOsError::NoProgress { .. } => Status::aborted(msg),
        DiskOsError::UserDisklet { kind, .. } => {
            use adisk_diskos::user::UserDiskletFailure as F;
            match kind {
                F::NotInstalled => Status::not_found(msg),
                F::Invalid => Status::invalid_argument(msg),
                F::BudgetExceeded | F::ResourceExceeded => Status::resource_exhausted(msg),
                F::Trap => Status::aborted(msg),
                F::Failed => Status::internal(msg),
            }
        }
    }
}

/// Maps a storage error to a Flight status ([`status_of`]).
pub fn storage_status(e: StorageError) -> Status {
    status_of(&DiskOsError::Storage(e))
}

/// A JSON reply to an action.
pub fn json_result<T: serde::Serialize>(value: &T) -> arrow_flight::Result {
    arrow_flight::Result {
        body: Bytes::from(serde_json::to_vec(value).expect("serializable reply")),
    }
}

/// A request that carried no valid cluster token (why, in words): only an endpoint ticket may
/// be served to it.
#[derive(Clone, Debug)]
pub struct NotAMember(pub String);
