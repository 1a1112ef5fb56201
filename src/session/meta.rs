//! Store metadata: what a namespace holds, recorded once and checked by
//! every process that opens it.
//!
//! A store is laid out by its layout, bucket bits, id width and record
//! format; two processes that disagree on any of them read and sweep
//! different keys (a sweeper given 17 bucket bits for a 16-bit store would
//! sweep nothing, and say nothing). The first process to open a namespace
//! records them in one small HASH, `<namespace>:meta`; every later one
//! compares and refuses a mismatch with [`Error::Config`]. The key has no
//! expiry: it is the store's own, a few dozen bytes per namespace, and
//! evicting or deleting it only means the next process records it again.

use std::collections::HashMap;
use std::fmt;

use crate::error::{Error, Result};
use crate::scripts::META_CLAIM;

/// The record format this version writes (see [`crate::session::record`]):
/// 2 keeps a compact store's records of up to 512 bytes in their bucket in
/// pieces, which format 1 kept out of line; 3 may hold record data packed
/// with a dictionary ([`crate::session::dictionary`]), which every process
/// that opens such a namespace unpacks; 4 is a growing store's
/// ([`GROWING_FORMAT`]); 5 begins a record in pieces with a check of its
/// bytes ([`crate::session::layout::compact::CHECKED_FORMAT`]); 6 lifts a
/// packed record's random tokens out before packing the rest
/// ([`crate::session::dictionary::LIFTED_FORMAT`]); 7 gives a record's
/// pieces short names where its bucket has them free
/// ([`crate::session::layout::compact::SHORT_PIECES_FORMAT`]); 8 lifts
/// UUIDs out of packed records too
/// ([`crate::session::dictionary::UUID_FORMAT`]); 9 keeps base64 that
/// decodes to text (a JSON Web Token's claims) decoded in packed records
/// ([`crate::session::dictionary::ENCODED_TEXT_FORMAT`]); 10 keeps a
/// session's short piece names its own while it lives, so a session a
/// process read is written back with plain commands
/// ([`crate::session::layout::compact::HELD_NAMES_FORMAT`]); 11 leaves
/// each bucket key a growing store's split or merge replaces as a mark for
/// a while, so its creates are plain commands too
/// ([`crate::session::layout::compact::MOVED_MARKS_FORMAT`]). A growing
/// store records this format too.
pub const FORMAT_VERSION: u32 = 11;
/// The record format of a store whose buckets split and merge
/// ([`crate::session::shape`]): keys named by group and trie node, fields
/// as long as each bucket's level leaves them, out-of-line records named
/// by the whole id. Versions before it refuse such a namespace, whose
/// buckets they would not find.
pub const GROWING_FORMAT: u32 = 4;
/// The oldest recorded format this version opens: a compact store of
/// format 1 is opened as it was recorded, its records out of line where
/// they do not fit one value, as processes of an earlier version beside
/// it expect (they refuse a namespace of format 2).
pub const OLDEST_FORMAT: u32 = 1;

/// What a store is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreMeta {
    /// The layout's name, e.g. `bucketed`.
    pub layout: String,
    /// `log2` of the bucket count.
    pub bucket_bits: u8,
    /// Bits in a session id.
    pub id_bits: u16,
    /// The record format.
    pub format: u32,
    /// `log2` of the user index's bucket count; 0 for a store without one
    /// (and for stores recorded before user indexes existed).
    pub user_bits: u8,
    /// The user index's grace, seconds ([`crate::users::UserIndexConfig`]);
    /// 0 without an index.
    pub user_grace_secs: u64,
    /// The user index's clock skew allowance, seconds; 0 without an index.
    pub user_skew_secs: u64,
    /// Viewed items kept per session ([`crate::viewed`]); 0 for a store
    /// that keeps none.
    pub viewed_keep: u8,
    /// The largest viewed item in bytes; 0 without viewed items.
    pub viewed_item_bytes: u8,
    /// Whether the server expires the store's fields
    /// ([`crate::session::layout::compact::Expiry::Server`]); false for
    /// stores recorded before that existed.
    pub server_expiry: bool,
    /// Whether the store's buckets split and merge
    /// ([`crate::session::shape`]); `bucket_bits` then counts its groups.
    /// False for stores recorded before that existed.
    pub growing: bool,
    /// For a growing store: a bucket holding more fields than this splits
    /// (every process of the namespace splits and merges by the same
    /// count). 0 for stores recorded before it was recorded, which split
    /// at three quarters of `hash-max-listpack-entries`.
    pub split_fields: u64,
}

impl fmt::Display for StoreMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layout {}, {} bucket bits, {}-bit ids, record format {}",
            self.layout, self.bucket_bits, self.id_bits, self.format
        )?;
        match self.user_bits {
            0 => write!(f, ", no user index"),
            bits => write!(
                f,
                ", a user index of 2^{bits} buckets ({} s grace, {} s skew)",
                self.user_grace_secs, self.user_skew_secs
            ),
        }?;
        match self.viewed_keep {
            0 => Ok(()),
            keep => write!(
                f,
                ", the last {keep} viewed items of up to {} bytes",
                self.viewed_item_bytes
            ),
        }?;
        if self.server_expiry {
            write!(f, ", fields expired by the server")?;
        }
        match (self.growing, self.split_fields) {
            (false, _) => {}
            (true, 0) => write!(f, ", buckets that split and merge")?,
            (true, n) => write!(f, ", buckets that split above {n} fields and merge")?,
        }
        Ok(())
    }
}

impl StoreMeta {
    /// The metadata key of `namespace`.
    pub fn key(namespace: &str) -> String {
        format!("{namespace}:meta")
    }

    fn fields(&self) -> [(&'static str, String); 12] {
        [
            ("layout", self.layout.clone()),
            ("bucket_bits", self.bucket_bits.to_string()),
            ("id_bits", self.id_bits.to_string()),
            ("format", self.format.to_string()),
            ("user_bits", self.user_bits.to_string()),
            ("user_grace_secs", self.user_grace_secs.to_string()),
            ("user_skew_secs", self.user_skew_secs.to_string()),
            ("viewed_keep", self.viewed_keep.to_string()),
            ("viewed_item_bytes", self.viewed_item_bytes.to_string()),
            ("server_expiry", u8::from(self.server_expiry).to_string()),
            ("growing", u8::from(self.growing).to_string()),
            ("split_fields", self.split_fields.to_string()),
        ]
    }

    fn from_fields(namespace: &str, map: &HashMap<String, String>) -> Result<Self> {
        let bad = |field: &str| {
            Error::Config(format!(
                "{}: field {field:?} is missing or malformed; delete the key only if no \
                 store lives in namespace {namespace:?}",
                Self::key(namespace)
            ))
        };
        let get = |field: &str| map.get(field).ok_or_else(|| bad(field));
        fn parse_or_zero<T: std::str::FromStr + Default>(v: Option<&String>) -> Option<T> {
            v.map_or(Some(T::default()), |v| v.parse().ok())
        }
        let optional = |field: &str| -> Result<u64> {
            parse_or_zero(map.get(field)).ok_or_else(|| bad(field))
        };
        Ok(Self {
            layout: get("layout")?.clone(),
            bucket_bits: get("bucket_bits")?
                .parse()
                .map_err(|_| bad("bucket_bits"))?,
            id_bits: get("id_bits")?.parse().map_err(|_| bad("id_bits"))?,
            format: get("format")?.parse().map_err(|_| bad("format"))?,
            // Absent from stores recorded before user indexes existed.
            user_bits: u8::try_from(optional("user_bits")?).map_err(|_| bad("user_bits"))?,
            user_grace_secs: optional("user_grace_secs")?,
            user_skew_secs: optional("user_skew_secs")?,
            // Absent from stores recorded before viewed items existed.
            viewed_keep: u8::try_from(optional("viewed_keep")?).map_err(|_| bad("viewed_keep"))?,
            viewed_item_bytes: u8::try_from(optional("viewed_item_bytes")?)
                .map_err(|_| bad("viewed_item_bytes"))?,
            // Absent from stores recorded before the server could expire
            // their fields.
            server_expiry: match optional("server_expiry")? {
                0 => false,
                1 => true,
                _ => return Err(bad("server_expiry")),
            },
            // Absent from stores recorded before buckets could split.
            growing: match optional("growing")? {
                0 => false,
                1 => true,
                _ => return Err(bad("growing")),
            },
            // Absent from stores recorded before it was recorded.
            split_fields: optional("split_fields")?,
        })
    }

    /// Reads what `namespace` holds, if anything has recorded it.
    pub async fn read<C>(conn: &C, namespace: &str) -> Result<Option<Self>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let key = Self::key(namespace);
        let map: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        if map.is_empty() {
            return Ok(None);
        }
        Self::from_fields(namespace, &map).map(Some)
    }

    /// Records `self` for `namespace` unless something is recorded there
    /// already, and checks that what is recorded is `self`: a mismatch is
    /// an [`Error::Config`] naming both, but for an older record format
    /// this version still writes ([`OLDEST_FORMAT`]) and for the split
    /// count, which a store keeps as recorded. Returns what is recorded.
    /// One script call.
    pub async fn claim<C>(&self, conn: &C, namespace: &str) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let key = Self::key(namespace);
        let mut inv = META_CLAIM.prepare_invoke();
        inv.key(&key);
        for (field, value) in self.fields() {
            inv.arg(field).arg(value);
        }
        let map: HashMap<String, String> = inv
            .invoke_async(&mut conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        let stored = Self::from_fields(namespace, &map)?;
        let format_kept = (OLDEST_FORMAT..=self.format).contains(&stored.format);
        let same = Self {
            format: self.format,
            split_fields: self.split_fields,
            ..stored.clone()
        };
        if same != *self || !format_kept {
            return Err(Error::Config(format!(
                "namespace {namespace:?} holds a store with {stored}; this one was opened \
                 with {self}"
            )));
        }
        Ok(stored)
    }
}
