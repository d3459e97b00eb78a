//! Client authentication at the host: users and their argon2 password hashes in a file, and
//! Flight basic authentication exchanged for short-lived bearer tokens.
//!
//! The users file (`users.toml`, mode 0600) holds one `[[user]]` per user:
//!
//! ```toml
//! [[user]]
//! name = "admin"
//! password_hash = "$argon2id$v=19$m=19456,t=2,p=1$…"   # a PHC string, never the password
//! allow_disklet_install = true                          # optional: may install disklets
//! ```
//!
//! A running service reads the file again when it changed (`adisk user add` takes effect at
//! the next login); a file that became unreadable or invalid leaves the last good one in force.
//!
//! A token is 256 random bits, kept only in the server's memory with its user and expiry.
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most users a users file may hold (a declared limit).
pub const MAX_USERS: usize = 10_000;
/// Most tokens alive at once; past it the oldest-expiring are dropped first.
pub const MAX_TOKENS: usize = 100_000;
/// How long a bearer token is valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(3600);

/// An authentication failure or a bad users file.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The users file could not be read or written.
    #[error("users file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The users file is not valid.
    #[error("users file {path}: {why}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Unknown user or wrong password (the same error for both).
    #[error("wrong user name or password")]
    WrongCredentials,
    /// A request without a valid token.
    #[error("{0}")]
    BadToken(String),
}

#[derive(Serialize, Deserialize, Default)]
struct UsersFile {
    #[serde(rename = "user", default)]
    users: Vec<UserEntry>,
}

#[derive(Serialize, Deserialize, Clone)]
struct UserEntry {
    name: String,
    password_hash: String,
    /// May install WebAssembly disklets through the service.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    allow_disklet_install: bool,
}

/// The users a server accepts.
pub struct Users {
    path: PathBuf,
    state: Mutex<UsersState>,
}

struct UsersState {
    modified: Option<std::time::SystemTime>,
    hashes: HashMap<String, String>,
    installers: std::collections::HashSet<String>,
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Users {
    /// Reads a users file.
    ///
    /// # Errors
    /// Unreadable file, bad TOML, a hash that is not a PHC string, too many users, a name twice.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        Ok(Users {
            path: path.to_path_buf(),
            state: Mutex::new(Self::read(path)?),
        })
    }

    fn read(path: &Path) -> Result<UsersState, AuthError> {
        let modified = modified(path);
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |why: String| AuthError::BadFile {
            path: path.to_path_buf(),
            why,
        };
        let file: UsersFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if file.users.len() > MAX_USERS {
            return Err(bad(format!("more than {MAX_USERS} users")));
        }
        let mut hashes = HashMap::new();
        let mut installers = std::collections::HashSet::new();
        for u in file.users {
            if u.allow_disklet_install {
                installers.insert(u.name.clone());
            }
            PasswordHash::new(&u.password_hash)
                .map_err(|e| bad(format!("user `{}`: password_hash: {e}", u.name)))?;
            if hashes.insert(u.name.clone(), u.password_hash).is_some() {
                return Err(bad(format!("user `{}` appears twice", u.name)));
            }
        }
        Ok(UsersState {
            modified,
            hashes,
            installers,
        })
    }

    /// The users as the file says now (read again when it changed since).
    fn current(&self) -> std::sync::MutexGuard<'_, UsersState> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if modified(&self.path) != state.modified {
            match Self::read(&self.path) {
                Ok(fresh) => *state = fresh,
                Err(e) => tracing::warn!("{e}; keeping the users read before"),
            }
        }
        state
    }

    /// Adds (or replaces) `name` with `password` in the users file at `path`, creating it
    /// (mode 0600) when it does not exist; `allow_disklet_install`: the user may install
    /// WebAssembly disklets through the service.
    ///
    /// # Errors
    /// An unreadable or bad existing file; the file cannot be written.
    pub fn add(
        path: &Path,
        name: &str,
        password: &str,
        allow_disklet_install: bool,
    ) -> Result<(), AuthError> {
        let io = |source| AuthError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file: UsersFile = if path.exists() {
            Users::load(path)?;
            toml::from_str(&std::fs::read_to_string(path).map_err(io)?).map_err(|e| {
                AuthError::BadFile {
                    path: path.to_path_buf(),
                    why: e.to_string(),
                }
            })?
        } else {
            UsersFile::default()
        };
        file.users.retain(|u| u.name != name);
        file.users.push(UserEntry {
            name: name.to_string(),
            password_hash: hash_password(password).map_err(|why| AuthError::BadFile {
                path: path.to_path_buf(),
                why,
            })?,
            allow_disklet_install,
        });
        let text = toml::to_string(&file).map_err(|e| AuthError::BadFile {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        write_private(path, text.as_bytes()).map_err(io)
    }

    /// Whether `name` may install WebAssembly disklets through the service.
    pub fn may_install_disklets(&self, name: &str) -> bool {
        self.current().installers.contains(name)
    }

    /// Checks `password` for `name`.
    ///
    /// # Errors
    /// [`AuthError::WrongCredentials`] for an unknown user and a wrong password alike.
    pub fn verify(&self, name: &str, password: &str) -> Result<(), AuthError> {
        let hash = self
            .current()
            .hashes
            .get(name)
            .cloned()
            .ok_or(AuthError::WrongCredentials)?;
        let parsed = PasswordHash::new(&hash).map_err(|_| AuthError::WrongCredentials)?;
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .map_err(|_| AuthError::WrongCredentials)
    }
}

/// An argon2id PHC string of `password` with a fresh random salt.
///
/// # Errors
/// What argon2 refuses (e.g. a password longer than it takes), as text.
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| format!("no random salt: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| format!("salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("hashing the password: {e}"))
}

/// 256 random bits as 64 hex digits (passwords and tokens).
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS gives random bytes");
    hex::encode(bytes)
}

/// Writes `bytes` to `path` readable by its owner only (through a temporary file and a rename).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Bearer tokens handed out by the handshake.
#[derive(Default)]
pub struct Tokens {
    live: Mutex<HashMap<String, (String, Instant)>>,
}

impl Tokens {
    /// A new token for `user`, valid for [`TOKEN_TTL`].
    pub fn issue(&self, user: &str) -> String {
        let token = random_secret();
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, (_, expires)| *expires > now);
        if live.len() >= MAX_TOKENS {
            // Still full of live tokens: the one expiring first goes.
            if let Some(oldest) = live
                .iter()
                .min_by_key(|(_, (_, e))| *e)
                .map(|(t, _)| t.clone())
            {
                live.remove(&oldest);
            }
        }
        live.insert(token.clone(), (user.to_string(), now + TOKEN_TTL));
        token
    }

    /// The user of `token`.
    ///
    /// # Errors
    /// [`AuthError::BadToken`]: unknown or expired.
    pub fn user(&self, token: &str) -> Result<String, AuthError> {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match live.get(token) {
            Some((user, expires)) if *expires > Instant::now() => Ok(user.clone()),
            Some(_) => Err(AuthError::BadToken(
                "the token has expired: log in again".into(),
            )),
            None => Err(AuthError::BadToken(
                "unknown token (log in with a user name and password first)".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_file_round_trip_and_wrong_passwords() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        Users::add(&path, "admin", "s3cret", true).unwrap();
        Users::add(&path, "ana", "other", false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let users = Users::load(&path).unwrap();
        users.verify("admin", "s3cret").unwrap();
        users.verify("ana", "other").unwrap();
        assert!(matches!(
            users.verify("admin", "other"),
            Err(AuthError::WrongCredentials)
        ));
        assert!(matches!(
            users.verify("nobody", "s3cret"),
            Err(AuthError::WrongCredentials)
        ));
        // Replacing a password.
        // A loaded file is read again when it changes.
        std::thread::sleep(Duration::from_millis(20));
        Users::add(&path, "ana", "new", false).unwrap();
        assert!(users.verify("ana", "other").is_err());
        users.verify("ana", "new").unwrap();
        assert!(users.may_install_disklets("admin"));
        assert!(!users.may_install_disklets("ana"));
        assert!(!users.may_install_disklets("nobody"));
    }

    #[test]
    fn bad_users_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        std::fs::write(&path, "[[user]]\nname = \"a\"\npassword_hash = \"plain\"\n").unwrap();
        let err = Users::load(&path).err().unwrap().to_string();
        assert!(err.contains("password_hash"), "{err}");
        std::fs::write(&path, "not toml [").unwrap();
        assert!(matches!(Users::load(&path), Err(AuthError::BadFile { .. })));
        assert!(matches!(
            Users::load(&dir.path().join("none")),
            Err(AuthError::Io { .. })
        ));
    }

    #[test]
    fn tokens_name_their_user_and_unknown_ones_are_refused() {
        let tokens = Tokens::default();
        let t = tokens.issue("admin");
        assert_eq!(t.len(), 64);
        assert_eq!(tokens.user(&t).unwrap(), "admin");
        assert!(tokens.user("forged").is_err());
        assert_ne!(tokens.issue("admin"), t);
    }
}
