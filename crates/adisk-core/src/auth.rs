//! Cluster authentication: one shared secret per cluster and a fresh token on every request.
//!
//! `adisk up` creates a 256-bit secret in `cluster.key` (mode 0600) beside `cluster.toml`,
//! whose `key_file` names it; every disk is started with it. Every Flight call between
//! cluster members — host to disk, disk to disk, disk to the host's relay — carries an
//! `authorization: Bearer adisk1.<ms>.<nonce>.<mac>` header, where `<mac>` is
//! HMAC-SHA256(secret, `adisk1.<ms>.<nonce>`), `<ms>` the sender's clock in Unix
//! milliseconds and `<nonce>` 128 random bits. A receiver accepts a token only if the MAC
//! verifies (compared in constant time), the stamp is within [`TOKEN_WINDOW`] of its own
//! clock, and the nonce was not seen before within the window ([`Verifier`] keeps them). A
//! process without the secret can do nothing on a disk; a token seen on the wire is worth one
//! request that has already been made.
//!
//! Why a shared secret and not mutual TLS: the members run on one machine or a private
//! network, the threat is a local process that is not a member (the findings of issue 12),
//! and what must hold is *who may ask*, not secrecy of table data on the wire (a process that
//! can read loopback traffic is root and can read the data files too). Tokens cost one
//! HMAC per request (about a microsecond); TLS would encrypt every byte of every exchange on a
//! 2-core machine whose disk-to-disk streams are its bottleneck, and would need certificate
//! creation, rotation and a new dependency tree. The secret never crosses the wire.
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// File name of the secret `adisk up` creates beside `cluster.toml`.
pub const KEY_FILE: &str = "cluster.key";

/// Request header carrying the token (`Bearer <token>`).
pub const HEADER: &str = "authorization";

/// How far a token's stamp may be from the receiver's clock, either way; also how long a
/// receiver remembers a nonce.
pub const TOKEN_WINDOW: Duration = Duration::from_secs(60);

/// Nonces a receiver remembers at most; past this many requests within one window it refuses
/// new ones ([`AuthError::TooManyRequests`]) rather than forget a nonce early. 100 000 nonces
/// are about 5 MB; a query makes a few requests per disk.
pub const MAX_REMEMBERED: usize = 100_000;

const SCHEME: &str = "adisk1";
const KEY_BYTES: usize = 32;
const PROOF_LABEL: &str = "adisk1-proof.";
const ENDPOINT_LABEL: &str = "adisk1-endpoint.";

type HmacSha256 = Hmac<Sha256>;

/// Why a secret could not be read or a request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The key file cannot be read, written or is malformed.
    #[error("cluster key {path}: {message}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// No `authorization` header.
    #[error(
        "no credentials: this disk accepts only requests from members of its cluster (token missing)"
    )]
    Missing,
    /// The header is not a token of this scheme.
    #[error("malformed credentials: {0}")]
    Malformed(String),
    /// The MAC does not verify: made with another secret, or altered.
    #[error("bad credentials: the token was not made with this cluster's key")]
    BadSignature,
    /// The stamp is outside the window.
    #[error(
        "expired credentials: the token is {skew_ms} ms away from this member's clock (window {window_ms} ms)"
    )]
    Expired {
        /// Distance between the stamp and the clock.
        skew_ms: u64,
        /// The window.
        window_ms: u64,
    },
    /// The nonce was used before.
    #[error("replayed credentials: this token was already used")]
    Replayed,
    /// Too many requests within one window to remember them all.
    #[error("too many requests: more than {0} within one token window")]
    TooManyRequests(usize),
}

/// A cluster's shared secret.
pub struct ClusterKey {
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// A new random secret.
    ///
    /// # Panics
    /// If the operating system has no randomness to give (`getrandom` fails).
    pub fn generate() -> Self {
        let mut key = [0u8; KEY_BYTES];
        getrandom::fill(&mut key).expect("the OS random source works");
        ClusterKey { key }
    }

    /// Writes a new random secret to `path` (hex, mode 0600), refusing to replace a file.
    ///
    /// # Errors
    /// [`AuthError::Key`] when the file exists or cannot be written.
    pub fn create(path: &Path) -> Result<Self, AuthError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let key = Self::generate();
        let err = |e: std::io::Error| AuthError::Key {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        file.write_all(hex::encode(key.key).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(err)?;
        Ok(key)
    }

    /// Reads the secret at `path`, refusing a file that others than its owner may read.
    ///
    /// # Errors
    /// [`AuthError::Key`].
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        use std::os::unix::fs::PermissionsExt;
        let bad = |message: String| AuthError::Key {
            path: path.to_path_buf(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(bad(format!(
                "readable by others (mode {:o}); `chmod 600` it",
                meta.permissions().mode() & 0o777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let bytes = hex::decode(text.trim()).map_err(|e| bad(format!("not hex: {e}")))?;
        let key = <[u8; KEY_BYTES]>::try_from(bytes.as_slice())
            .map_err(|_| bad(format!("{} bytes, expected {KEY_BYTES}", bytes.len())))?;
        Ok(ClusterKey { key })
    }

    /// A fresh token for one request (`adisk1.<ms>.<nonce>.<mac>`).
    pub fn token(&self) -> String {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("the OS random source works");
        self.token_at(now_ms(), &hex::encode(nonce))
    }

    /// The `authorization` header value for one request.
    pub fn header(&self) -> String {
        format!("Bearer {}", self.token())
    }

    /// This member's answer to `challenge`: proof that it holds the secret, without showing
    /// it (HMAC-SHA256 of the challenge under a label of its own, so a proof is never a
    /// token).
    pub fn prove(&self, challenge: &[u8]) -> Vec<u8> {
        let mut mac = self.mac(PROOF_LABEL);
        mac.update(challenge);
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether `proof` answers `challenge` ([`ClusterKey::prove`]), compared in constant time.
    pub fn check_proof(&self, challenge: &[u8], proof: &[u8]) -> bool {
        let mut mac = self.mac(PROOF_LABEL);
        mac.update(challenge);
        mac.verify_slice(proof).is_ok()
    }

    /// The MAC of an endpoint ticket's claim ([`crate::endpoint`]), under a label of its own
    /// so that it is never a token or a proof.
    pub(crate) fn endpoint_mac(&self, claim: &[u8]) -> Vec<u8> {
        let mut mac = self.mac(ENDPOINT_LABEL);
        mac.update(claim);
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether `mac` is the endpoint MAC of `claim`, compared in constant time.
    pub(crate) fn check_endpoint_mac(&self, claim: &[u8], mac: &[u8]) -> bool {
        let mut m = self.mac(ENDPOINT_LABEL);
        m.update(claim);
        m.verify_slice(mac).is_ok()
    }

    fn token_at(&self, ms: u64, nonce: &str) -> String {
        let claim = format!("{SCHEME}.{ms}.{nonce}");
        let mac = hex::encode(self.mac(&claim).finalize().into_bytes());
        format!("{claim}.{mac}")
    }

    fn mac(&self, claim: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(claim.as_bytes());
        mac
    }
}

/// Checks the tokens a member receives and remembers their nonces for one window.
#[derive(Debug)]
pub struct Verifier {
    key: ClusterKey,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    nonces: HashMap<String, u64>,
    order: VecDeque<(u64, String)>,
}

impl Verifier {
    /// A verifier for tokens made with `key`.
    pub fn new(key: ClusterKey) -> Self {
        Verifier {
            key,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The key, to sign this member's own requests with.
    pub fn key(&self) -> &ClusterKey {
        &self.key
    }

    /// Checks an `authorization` header value (None: no header) against this clock.
    ///
    /// # Errors
    /// Why the request is refused.
    pub fn verify(&self, header: Option<&str>) -> Result<(), AuthError> {
        self.verify_at(header, now_ms())
    }

    fn verify_at(&self, header: Option<&str>, now: u64) -> Result<(), AuthError> {
        let token = header
            .ok_or(AuthError::Missing)?
            .strip_prefix("Bearer ")
            .ok_or_else(|| AuthError::Malformed("expected `Bearer <token>`".into()))?;
        let (claim, mac) = token
            .rsplit_once('.')
            .ok_or_else(|| AuthError::Malformed("no MAC".into()))?;
        let mut parts = claim.splitn(3, '.');
        let (scheme, ms, nonce) = (parts.next(), parts.next(), parts.next());
        if scheme != Some(SCHEME) {
            return Err(AuthError::Malformed(format!(
                "unknown scheme (expected `{SCHEME}`)"
            )));
        }
        let ms: u64 = ms
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| AuthError::Malformed("bad stamp".into()))?;
        let nonce = nonce
            .filter(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| AuthError::Malformed("bad nonce".into()))?;
        let mac = hex::decode(mac).map_err(|_| AuthError::Malformed("MAC is not hex".into()))?;
        self.key
            .mac(claim)
            .verify_slice(&mac)
            .map_err(|_| AuthError::BadSignature)?;
        let window = TOKEN_WINDOW.as_millis() as u64;
        let skew_ms = now.abs_diff(ms);
        if skew_ms > window {
            return Err(AuthError::Expired {
                skew_ms,
                window_ms: window,
            });
        }
        self.remember_until(nonce, ms + window, now)
    }

    /// Remembers `nonce` until `expires` (Unix ms); refuses one seen before.
    pub(crate) fn remember_until(
        &self,
        nonce: &str,
        expires: u64,
        now: u64,
    ) -> Result<(), AuthError> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((at, _)) = seen.order.front()
            && *at < now
        {
            let (_, old) = seen.order.pop_front().expect("front exists");
            seen.nonces.remove(&old);
        }
        if seen.nonces.contains_key(nonce) {
            return Err(AuthError::Replayed);
        }
        if seen.nonces.len() >= MAX_REMEMBERED {
            return Err(AuthError::TooManyRequests(MAX_REMEMBERED));
        }
        seen.nonces.insert(nonce.to_string(), expires);
        // Stamps may arrive out of order by up to a window: keep `order` sorted by expiry.
        let at = seen.order.partition_point(|(e, _)| *e <= expires);
        seen.order.insert(at, (expires, nonce.to_string()));
        Ok(())
    }
}

/// 32 random bytes for a peer to answer with [`ClusterKey::prove`] (a disk asks the host's
/// relay before it sends it rows).
///
/// # Panics
/// If the operating system has no randomness to give.
pub fn challenge() -> Vec<u8> {
    let mut c = vec![0u8; 32];
    getrandom::fill(&mut c).expect("the OS random source works");
    c
}

/// This machine's clock in Unix milliseconds (0 before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_verifies_once_within_its_window_and_only_with_its_key() {
        let v = Verifier::new(ClusterKey::generate());
        let t0 = 1_000_000_000;
        let header = |ms: u64, nonce: &str| format!("Bearer {}", v.key().token_at(ms, nonce));
        assert_eq!(v.verify_at(Some(&header(t0, NONCE)), t0 + 10), Ok(()));
        assert_eq!(
            v.verify_at(Some(&header(t0, NONCE)), t0 + 20),
            Err(AuthError::Replayed)
        );
        let late = v.verify_at(Some(&header(t0, &NONCE.replace('0', "1"))), t0 + 61_000);
        assert!(
            matches!(
                late,
                Err(AuthError::Expired {
                    skew_ms: 61_000,
                    ..
                })
            ),
            "{late:?}"
        );
        // After the window the nonce is forgotten, but its token has expired by then.
        assert!(matches!(
            v.verify_at(Some(&header(t0, NONCE)), t0 + 120_000),
            Err(AuthError::Expired { .. })
        ));
        let other = ClusterKey::generate();
        assert_eq!(
            v.verify_at(Some(&format!("Bearer {}", other.token_at(t0, NONCE))), t0),
            Err(AuthError::BadSignature)
        );
        assert_eq!(v.verify_at(None, t0), Err(AuthError::Missing));
        for bad in [
            "Basic abc",
            "Bearer adisk1.x.y.z",
            "Bearer adisk2.1.2.3",
            "Bearer nothing",
        ] {
            assert!(
                matches!(v.verify_at(Some(bad), t0), Err(AuthError::Malformed(_))),
                "{bad}"
            );
        }
        // An altered stamp breaks the MAC.
        let token = header(t0, &NONCE.replace('1', "2"));
        let altered = token.replace(&format!(".{t0}."), &format!(".{}.", t0 + 1));
        assert_eq!(
            v.verify_at(Some(&altered), t0),
            Err(AuthError::BadSignature)
        );
    }

    #[test]
    fn real_tokens_are_fresh_and_the_key_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        let key = ClusterKey::create(&path).unwrap();
        assert!(ClusterKey::create(&path).is_err(), "never replaces a key");
        let v = Verifier::new(ClusterKey::load(&path).unwrap());
        let (a, b) = (key.header(), key.header());
        assert_ne!(a, b);
        assert_eq!(v.verify(Some(&a)), Ok(()));
        assert_eq!(v.verify(Some(&b)), Ok(()));
        let c = challenge();
        assert!(v.key().check_proof(&c, &key.prove(&c)));
        assert!(!v.key().check_proof(&challenge(), &key.prove(&c)));
        assert!(!ClusterKey::generate().check_proof(&c, &key.prove(&c)));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            ClusterKey::load(&path),
            Err(AuthError::Key { .. })
        ));
        std::fs::write(dir.path().join("short"), "abcd").unwrap();
        std::fs::set_permissions(
            dir.path().join("short"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert!(matches!(
            ClusterKey::load(&dir.path().join("short")),
            Err(AuthError::Key { .. })
        ));
    }
}
