//! The crate's one error type.

use std::fmt;

/// Why a session id from a cookie (or anywhere else) was refused.
///
/// The offending input is never echoed back: it may be huge, hostile, or a
/// real id that must not reach a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidId {
    /// The input is not exactly as long as the store's ids (40 bytes for
    /// 160-bit ids, 32 for 128-bit ones).
    Length {
        /// How many bytes an id of the store's width has.
        expected: usize,
        /// How many bytes the input had.
        found: usize,
    },
    /// The byte at this position is not one of `0-9a-f` (upper case is
    /// refused too, so each id has exactly one text form).
    NotLowerHex {
        /// Position of the first offending byte.
        at: usize,
    },
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { expected, found } => {
                write!(f, "expected {expected} hex characters, found {found} bytes")
            }
            Self::NotLowerHex { at } => {
                write!(f, "byte {at} is not a lowercase hex digit")
            }
        }
    }
}

impl std::error::Error for InvalidId {}

/// The message of a write fewer replicas confirmed than asked (see
/// [`Error::NotReplicated`]): the connection that waits writes it, and
/// [`Error`] recognises it.
pub(crate) const NOT_REPLICATED: &str = "WAIT: fewer replicas than asked confirmed the write";

/// Everything that can go wrong in a session store, in variants a caller can
/// act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A session id was malformed; Redis was not contacted.
    #[error("invalid session id: {0}")]
    InvalidId(#[from] InvalidId),

    /// Bytes stored in Redis do not decode as a session record. The record
    /// is left where it is, for inspection.
    #[error("corrupt session record in {location}: {reason}")]
    CorruptRecord {
        /// Where the record lives: key name and a redacted id.
        location: String,
        /// What the decoder said.
        reason: String,
    },

    /// The encoded record is larger than the store accepts.
    #[error("session record of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Encoded size of the record.
        size: usize,
        /// The store's configured maximum.
        limit: usize,
    },

    /// A key the store owns holds a value of another type: something else
    /// wrote there. Nothing was changed.
    #[error("wrong type of key at {location}: {detail}")]
    WrongType {
        /// The key, or the bucket's hash tag, involved.
        location: String,
        /// Redis's message.
        detail: String,
    },

    /// Redis could not be reached, the connection dropped mid-call, or the
    /// server cannot serve yet: it is loading its data after a restart
    /// (`LOADING`), busy with a long script (`BUSY`), a replica lost its
    /// primary (`MASTERDOWN`), a cluster is failing over or moving a slot
    /// (`CLUSTERDOWN`, `TRYAGAIN`, `READONLY`), or it refuses writes for
    /// now (`OOM` at `maxmemory` with `noeviction`, `MISCONF` while it cannot
    /// save). The operation may be retried once Redis is back.
    #[error("redis unavailable: {}", summary(.0))]
    Unavailable(#[source] redis::RedisError),

    /// A write made on the primary that fewer replicas than asked
    /// confirmed in time ([`crate::conn::wait::WaitForReplicas`]): it may or may
    /// not survive a failover.
    #[error("write not confirmed by enough replicas: {0}")]
    NotReplicated(#[source] redis::RedisError),

    /// The server's ACL refused a command or key to this connection's
    /// user (`NOPERM`, or a script's command refused under the caller's
    /// rule; see [`crate::acl`] for each role's rule). Nothing the refused
    /// command would have done was done; a script refused part way keeps
    /// the writes it made before (as a script that fails always does).
    #[error("refused by the server's ACL: {}", summary(.0))]
    NoPermission(#[source] redis::RedisError),

    /// Any other error reported by Redis or the client.
    #[error("redis error: {}", summary(.0))]
    Redis(#[source] redis::RedisError),

    /// An optimistic read-modify-write lost the race this many times in a
    /// row; nothing was written by the last attempt.
    #[error("gave up after {attempts} conflicting concurrent updates")]
    Contended {
        /// How many attempts were made.
        attempts: u32,
    },

    /// A growing store's bucket was split or merged under the call more
    /// times in a row than a call follows
    /// ([`crate::session::shape`]); nothing was written by the last
    /// attempt. Worth retrying.
    #[error(
        "{location}: the store's buckets were reshaped under the call {attempts} times in a row"
    )]
    Reshaped {
        /// Where the session lives.
        location: String,
        /// How many attempts were made.
        attempts: u32,
    },

    /// The application's attributes could not be encoded.
    #[error("cannot encode session attributes: {0}")]
    Encode(#[from] rmp_serde::encode::Error),

    /// Session data given as a JSON map could not be encoded (see
    /// [`crate::json_map`]: nested too deep). Nothing was written.
    #[error("cannot encode session data: {0}")]
    EncodeData(#[from] crate::json_map::CodecError),

    /// The store or its server is configured in a way it cannot work with.
    #[error("configuration: {0}")]
    Config(String),

    /// A lifetime or expiry outside what the store accepts: zero, longer
    /// than [`crate::ttl::MAX_TTL_SECS`], or an absolute expiry past
    /// [`crate::ttl::MAX_EXPIRES_AT`]. Nothing was written.
    #[error("session lifetime out of range: {detail}")]
    InvalidTtl {
        /// What was asked for, and the limit.
        detail: String,
    },

    /// A lock was not free within the time its caller would wait.
    #[error("lock {key} still held by another after waiting {waited:?}")]
    LockTimeout {
        /// The lock's key.
        key: String,
        /// How long the caller waited.
        waited: std::time::Duration,
    },

    /// A session label longer than [`crate::users::MAX_LABEL_BYTES`];
    /// nothing was written.
    #[error("session label of {len} bytes exceeds the limit of {limit} bytes")]
    LabelTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },

    /// An identity that may not be written: a name made directly
    /// ([`crate::identity::Identity::Name`]) that is empty or longer than
    /// [`crate::identity::MAX_NAME_BYTES`]; nothing was written.
    #[error("{0}")]
    InvalidIdentity(#[from] crate::identity::InvalidName),

    /// A lock name empty, with a brace, or longer than
    /// [`crate::lock::MAX_NAME_BYTES`]; nothing was written.
    #[error("lock name of {len} bytes: {reason}")]
    InvalidLockName {
        /// Its length in bytes.
        len: usize,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A viewed item empty or longer than the store keeps
    /// ([`crate::viewed::ViewedConfig::item_bytes`]); nothing was written.
    #[error("viewed item of {len} bytes: items are 1 to {limit} bytes")]
    ItemTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },

    /// The operating system's random number generator failed.
    #[error("operating system random number generator failed: {0}")]
    Rng(String),
}

impl Error {
    /// Whether retrying the same call later may succeed (Redis was
    /// unreachable, a concurrent writer won the race, or replicas did not
    /// confirm a write in time, as during a failover).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_)
                | Self::Contended { .. }
                | Self::Reshaped { .. }
                | Self::NotReplicated(_)
        )
    }

    /// A short, stable name of the variant (`"unavailable"`, `"wrong_type"`,
    /// ...): the `outcome` label of a failed call's metrics
    /// ([`crate::metrics`]), and a key for an app's own counting or logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidId(_) => "invalid_id",
            Self::CorruptRecord { .. } => "corrupt_record",
            Self::TooLarge { .. } => "too_large",
            Self::WrongType { .. } => "wrong_type",
            Self::Unavailable(_) => "unavailable",
            Self::NotReplicated(_) => "not_replicated",
            Self::NoPermission(_) => "no_permission",
            Self::Redis(_) => "redis",
            Self::Contended { .. } => "contended",
            Self::Reshaped { .. } => "reshaped",
            Self::Encode(_) | Self::EncodeData(_) => "encode",
            Self::Config(_) => "config",
            Self::InvalidTtl { .. } => "invalid_ttl",
            Self::LockTimeout { .. } => "lock_timeout",
            Self::LabelTooLong { .. } => "label_too_long",
            Self::InvalidIdentity(_) => "invalid_identity",
            Self::InvalidLockName { .. } => "invalid_lock_name",
            Self::ItemTooLong { .. } => "item_too_long",
            Self::Rng(_) => "rng",
        }
    }

    /// Classifies a Redis error (or a pipeline's) raised while working on
    /// `location`.
    pub fn from_redis(err: redis::RedisError, location: impl FnOnce() -> String) -> Self {
        let wrong_type = err.code() == Some("WRONGTYPE")
            || err
                .clone()
                .into_server_errors()
                .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "WRONGTYPE"));
        if wrong_type {
            return Self::WrongType {
                location: location(),
                detail: err.to_string(),
            };
        }
        if err.code() == Some(CORRUPT) {
            return Self::CorruptRecord {
                location: location(),
                reason: err.detail().unwrap_or_default().to_owned(),
            };
        }
        if err.kind() == redis::ErrorKind::Client && err.to_string().contains(NOT_REPLICATED) {
            return Self::NotReplicated(err);
        }
        if denied_by_acl(&err) {
            return Self::NoPermission(err);
        }
        if let Some(why) = tls_refusal(&err) {
            return Self::Config(why);
        }
        if let Some(why) = no_scripts(&err) {
            return Self::Config(why);
        }
        let transient = |code: &str| TRANSIENT_CODES.contains(&code);
        if err.is_io_error()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || err.is_timeout()
            || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
            || err.code().is_some_and(transient)
            || err
                .clone()
                .into_server_errors()
                .is_some_and(|errors| errors.iter().any(|(_, e)| transient(e.code())))
        {
            return Self::Unavailable(err);
        }
        Self::Redis(err)
    }
}

/// Whether the server's ACL refused the command, or a command a script
/// ran: `NOPERM`, or a script error worded by Redis 7.0 ("can't run this
/// command"), 7.2+ and Valkey ("ACL failure in script").
fn denied_by_acl(err: &redis::RedisError) -> bool {
    let denied = |code: &str, text: &str| {
        code == "NOPERM"
            || text.contains("ACL failure in script")
            || text.contains("The user executing the script can't run this command")
            || text.contains("The user executing the script can't access")
    };
    let text = err.to_string();
    denied(err.code().unwrap_or_default(), &text)
        || err.clone().into_server_errors().is_some_and(|errors| {
            errors
                .iter()
                .any(|(_, e)| denied(e.code(), e.details().unwrap_or_default()))
        })
}

/// What to fix, where the server runs no Lua script: a Valkey built
/// without Lua (`BUILD_LUA=no`) or started without its Lua module says it
/// has no engine for them; a server whose `EVALSHA` is renamed away does
/// not know the command. No retry can succeed. Every store records its
/// namespace by a script when it opens, so this is the error of opening
/// one.
fn no_scripts(err: &redis::RedisError) -> Option<String> {
    let text = err.to_string();
    let no_engine = text.contains("Could not find scripting engine");
    let unknown = text.contains("unknown command") && text.to_ascii_lowercase().contains("evalsha");
    (no_engine || unknown).then(|| {
        format!(
            "this server runs no Lua scripts ({text}): a Valkey built without Lua \
             (BUILD_LUA=no) or started without its Lua module, or EVALSHA renamed away. \
             sessionpack needs scripts to record a store's namespace when it opens, for \
             the writes plain commands cannot settle (a create whose names are taken, a \
             save or renewal of a session this process did not read), for sweeping, a \
             growing store's splits and merges, the user index, locks and rate limits: \
             load the Lua module (loadmodule .../libvalkeylua.so) or use a server with Lua"
        )
    })
}

/// What to fix, where a TLS handshake failed over a certificate: the
/// server's that the client cannot verify (an unknown issuer, a name the
/// certificate does not cover, expired), or the client's that the server
/// asked for and refused. No retry can succeed, so it is a configuration
/// error, not [`Error::Unavailable`]. The client keeps rustls's error
/// behind a shared pointer that hides its type, so it is told by rustls's
/// wording (checked against the linked rustls by this module's tests).
fn tls_refusal(err: &redis::RedisError) -> Option<String> {
    /// The alerts a server sends when it refuses the client's certificate.
    const CLIENT_CERT_ALERTS: &[&str] = &[
        "CertificateRequired",
        "BadCertificate",
        "UnknownCA",
        "CertificateUnknown",
        "CertificateExpired",
        "CertificateRevoked",
        "UnsupportedCertificate",
        "AccessDenied",
    ];
    if !err.is_io_error() {
        return None;
    }
    let text = err.to_string();
    if let Some(at) = text.find("invalid peer certificate") {
        return Some(format!(
            "TLS: the server's certificate was refused ({}): trust the CA that signed it \
             (--tls-ca-cert, TlsConfig) and connect by a name or address it covers",
            &text[at..]
        ));
    }
    if let Some(at) = text.find("received fatal alert: ") {
        let alert = text[at + "received fatal alert: ".len()..].trim();
        if CLIENT_CERT_ALERTS.contains(&alert) {
            return Some(format!(
                "TLS: the server refused this client's certificate ({alert}): give a \
                 certificate and key signed by a CA the server trusts (--tls-cert and \
                 --tls-key, TlsConfig)"
            ));
        }
    }
    if let Some(at) = text.find("peer is incompatible") {
        return Some(format!(
            "TLS: the server and this client share no protocol version or cipher ({}): \
             check the server's tls-protocols and tls-ciphersuites",
            &text[at..]
        ));
    }
    None
}

/// A Redis error as text, with a failed pipeline's errors summed up: a
/// bulk call over thousands of sessions would otherwise print one line
/// per command.
fn summary(err: &redis::RedisError) -> String {
    const SHOWN: usize = 3;
    match err.clone().into_server_errors() {
        Some(errors) if errors.len() > SHOWN => {
            let first: Vec<String> = errors
                .iter()
                .take(SHOWN)
                .map(|(i, e)| format!("command {i}: {e}"))
                .collect();
            format!(
                "{} commands failed; {}; ...",
                errors.len(),
                first.join("; ")
            )
        }
        _ => err.to_string(),
    }
}

/// The code of the error a script raises, before writing anything, when
/// the session it acts on has a stored value in neither of the layout's
/// forms (`session_expiry` in `compact_common.lua`).
const CORRUPT: &str = "CORRUPT";

/// Server error codes that mean "not now" rather than "never": the same
/// call succeeds once the server has loaded its data, finished a script,
/// (on a cluster) settled a failover or a slot migration, or (for writes)
/// freed memory under `maxmemory` or saved its snapshot again. A
/// redirection reaches the caller only from inside a transaction the
/// cluster client could not resend in time.
const TRANSIENT_CODES: &[&str] = &[
    "LOADING",
    "MOVED",
    "ASK",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "READONLY",
    "OOM",
    "MISCONF",
];

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Self::from_redis(err, || "unknown key".to_owned())
    }
}

impl From<redis::ParsingError> for Error {
    fn from(err: redis::ParsingError) -> Self {
        Self::Redis(err.into())
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::Error;

    fn tls_failure(e: rustls::Error) -> Error {
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        Error::from(redis::RedisError::from(io))
    }

    #[test]
    fn a_refused_certificate_is_a_configuration_error_not_a_transient_one() {
        use rustls::{AlertDescription, CertificateError};
        for e in [
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
            rustls::Error::InvalidCertificate(CertificateError::Expired),
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            rustls::Error::AlertReceived(AlertDescription::BadCertificate),
        ] {
            let err = tls_failure(e);
            assert!(
                matches!(&err, Error::Config(m) if m.starts_with("TLS: ")),
                "{err:?}"
            );
            assert!(!err.is_transient(), "{err:?}");
        }
        // A connection cut mid-handshake may come back.
        let cut = Error::from(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(cut.is_transient(), "{cut:?}");
    }
}
