//! Endpoint tickets: how a client of `adisk serve` reads one part of a result straight from the
//! disk that computes it, without ever holding cluster credentials.
//!
//! When a query's result is made entirely at the disks (a filtered projection: one scan job
//! per disk whose rows go to the host unchanged), the service answers `GetFlightInfo` with one
//! endpoint per disk: that disk's address and a ticket the host *sealed* with the cluster key.
//! The ticket carries the job to run, the disk it is for, the query it belongs to, an expiry
//! and a nonce:
//!
//! ```text
//!   ticket = "adisk-ep1" ‖ HMAC-SHA256(key, "adisk1-endpoint." ‖ claim) ‖ claim (JSON)
//! ```
//!
//! A disk runs a sealed job only if the MAC verifies (nothing in it was changed: not the table,
//! not the columns, not the disk), the ticket is for this disk, it has not expired, and its
//! nonce was not used before (a ticket is read once). A client's own bearer token, which some
//! drivers send along to every location, is never accepted by a disk for anything.
use crate::auth::{AuthError, Verifier};
use crate::protocol::JobSpec;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// First bytes of every endpoint ticket (a host's job tickets are JSON and start with `{`).
pub const MAGIC: &[u8] = b"adisk-ep1";

/// How long an endpoint ticket stays valid unless the service is told otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

const MAC_BYTES: usize = 32;

/// What a sealed ticket says.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EndpointClaim {
    /// The query this endpoint is a part of (the service's query id).
    pub query: String,
    /// The disk that may run it.
    pub disk: u32,
    /// Unix milliseconds after which the ticket is refused.
    pub expires_ms: u64,
    /// 128 random bits, hex: a ticket is honoured once.
    pub nonce: String,
    /// The names of the result's columns, in order (the disk's stream is renamed to them).
    pub columns: Vec<String>,
    /// The job.
    pub job: JobSpec,
}

/// Why an endpoint ticket was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EndpointError {
    /// Not an endpoint ticket at all.
    #[error("not an endpoint ticket")]
    NotATicket,
    /// The MAC does not verify: altered, or sealed with another cluster's key.
    #[error(
        "endpoint ticket refused: it was altered or not issued by this cluster's host (bad signature)"
    )]
    BadSignature,
    /// The claim is not readable.
    #[error("endpoint ticket refused: malformed ({0})")]
    Malformed(String),
    /// Issued for another disk.
    #[error("endpoint ticket refused: it is for disk {ticket}, this is disk {this}")]
    WrongDisk {
        /// The disk named in the ticket.
        ticket: u32,
        /// This disk.
        this: u32,
    },
    /// Past its expiry.
    #[error("endpoint ticket refused: expired {late_ms} ms ago; run the query again")]
    Expired {
        /// How long ago it expired.
        late_ms: u64,
    },
    /// Read before.
    #[error("endpoint ticket refused: already used (a ticket is read once)")]
    Replayed,
    /// Too many tickets within one window to remember.
    #[error("endpoint ticket refused: {0}")]
    Busy(String),
}

/// Whether `ticket` is an endpoint ticket (by its first bytes; not yet verified).
pub fn is_endpoint_ticket(ticket: &[u8]) -> bool {
    ticket.starts_with(MAGIC)
}

/// Seals `claim` with the cluster key held by `signer`.
pub fn seal(signer: &Verifier, claim: &EndpointClaim) -> Vec<u8> {
    let body = serde_json::to_vec(claim).expect("an endpoint claim always serializes");
    let mac = signer.key().endpoint_mac(&body);
    let mut out = Vec::with_capacity(MAGIC.len() + MAC_BYTES + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&mac);
    out.extend_from_slice(&body);
    out
}

/// Opens a ticket at disk `disk` at time `now_ms`: its claim when it may run here, now.
///
/// # Errors
/// [`EndpointError`], saying why it is refused.
pub fn open(
    verifier: &Verifier,
    ticket: &[u8],
    disk: u32,
    now_ms: u64,
) -> Result<EndpointClaim, EndpointError> {
    let rest = ticket
        .strip_prefix(MAGIC)
        .ok_or(EndpointError::NotATicket)?;
    if rest.len() < MAC_BYTES {
        return Err(EndpointError::Malformed("too short".into()));
    }
    let (mac, body) = rest.split_at(MAC_BYTES);
    if !verifier.key().check_endpoint_mac(body, mac) {
        return Err(EndpointError::BadSignature);
    }
    let claim: EndpointClaim =
        serde_json::from_slice(body).map_err(|e| EndpointError::Malformed(e.to_string()))?;
    if claim.disk != disk {
        return Err(EndpointError::WrongDisk {
            ticket: claim.disk,
            this: disk,
        });
    }
    if now_ms > claim.expires_ms {
        return Err(EndpointError::Expired {
            late_ms: now_ms - claim.expires_ms,
        });
    }
    let nonce = format!("ep.{}", claim.nonce);
    match verifier.remember_until(&nonce, claim.expires_ms, now_ms) {
        Ok(()) => Ok(claim),
        Err(AuthError::Replayed) => Err(EndpointError::Replayed),
        Err(e) => Err(EndpointError::Busy(e.to_string())),
    }
}

/// 128 random bits as hex, for [`EndpointClaim::nonce`].
///
/// # Panics
/// If the operating system has no randomness to give.
pub fn nonce() -> String {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).expect("the OS random source works");
    hex::encode(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ClusterKey;
    use crate::builder::JobBuilder;
    use crate::protocol::{DiskletSpec, Sink};

    fn claim(disk: u32, expires_ms: u64, table: &str) -> EndpointClaim {
        EndpointClaim {
            query: "q1".into(),
            disk,
            expires_ms,
            nonce: nonce(),
            columns: vec!["a".into()],
            job: JobBuilder::chain(
                "j1",
                crate::builder::table(table, vec!["a".into()]),
                vec![DiskletSpec::Select {
                    predicate: None,
                    projection: vec![],
                    limit: None,
                }],
                Sink::Host,
            )
            .id("j1")
            .program("serve")
            .build()
            .unwrap(),
        }
    }

    #[test]
    fn a_ticket_opens_once_at_its_disk_before_it_expires_and_only_unaltered() {
        let v = Verifier::new(ClusterKey::generate());
        let t0 = 1_000_000;
        let c = claim(2, t0 + 1000, "lineitem");
        let ticket = seal(&v, &c);
        assert!(is_endpoint_ticket(&ticket));
        assert_eq!(
            open(&v, &ticket, 1, t0),
            Err(EndpointError::WrongDisk { ticket: 2, this: 1 })
        );
        assert_eq!(open(&v, &ticket, 2, t0), Ok(c.clone()));
        assert_eq!(open(&v, &ticket, 2, t0 + 1), Err(EndpointError::Replayed));
        // Expired.
        let late = seal(&v, &claim(2, t0, "lineitem"));
        assert_eq!(
            open(&v, &late, 2, t0 + 5),
            Err(EndpointError::Expired { late_ms: 5 })
        );
        // The same ticket pointed at another table: the MAC no longer verifies.
        let fresh = seal(&v, &claim(2, t0 + 1000, "lineitem"));
        let text = String::from_utf8_lossy(&fresh).replace("lineitem", "customer");
        assert_eq!(
            open(&v, text.as_bytes(), 2, t0),
            Err(EndpointError::BadSignature)
        );
        // Sealed with another cluster's key.
        let other = Verifier::new(ClusterKey::generate());
        let foreign = seal(&other, &claim(2, t0 + 1000, "lineitem"));
        assert_eq!(open(&v, &foreign, 2, t0), Err(EndpointError::BadSignature));
        assert_eq!(
            open(&v, b"{\"job_id\":1}", 2, t0),
            Err(EndpointError::NotATicket)
        );
        assert!(matches!(
            open(&v, b"adisk-ep1short", 2, t0),
            Err(EndpointError::Malformed(_))
        ));
    }
}
