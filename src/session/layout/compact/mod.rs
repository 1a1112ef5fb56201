//! The compact layout: sessions packed into `2^bits` buckets that are each
//! one listpack HASH, the session's expiry inside its value; a load is one
//! `HGET`.
//!
//! With no expiry ZSET per bucket, a bucket is bounded by
//! `hash-max-listpack-entries` (512 by default) rather than the ZSET's 128,
//! and each session stores its field once. The sweeper finds the buckets
//! that may hold expired sessions through an index: buckets are grouped
//! 128 to a hash tag, and each group has a ZSET of its buckets scored by a
//! lower bound of their earliest expiry (an insert lowers it with `ZADD LT`
//! in the same script; a sweep sets it to the true earliest). So index and
//! buckets share one Redis Cluster slot, and no index key holds more than
//! 128 buckets.
//!
//! Keys, for namespace `sp`, 2^20 buckets (2^13 groups): bucket `0x3fa07`
//! is `sp:{07f4}:7` (group `0x7f4`, bucket 7 of the group), its group's index
//! is `sp:{07f4}:i`, and a record too long for the listpack lives under
//! `sp:{07f4}:7:o:<field hex>` with the session's expiry.
//!
//! A value is either the decimal digits of `identity * 10^10 + expiry`,
//! which Redis keeps as one 8-byte listpack integer (an identity-only
//! session whose identity is at least 2^16 and below 922,337,203: 10 bytes
//! in the listpack, one less than the binary form), or the expiry as four
//! big-endian bytes followed by the record (or by the out-of-line marker).
//!
//! A record too long for one value (over `hash-max-listpack-value` less the
//! expiry's four bytes) and at most [`MAX_PIECED_RECORD`] bytes stays in
//! the bucket in pieces: its value holds the expiry, the byte `0xc3`, the
//! number `n` of pieces and the first `size - 6` bytes of the payload;
//! `n` fields hold the rest, `size` bytes each (the last may be shorter),
//! where `size` is the limit, or 63 where that takes no more pieces (a
//! 63-byte listpack string has a one-byte header, a 64-byte one two:
//! [`piece_size_for`]). They are named the session's field
//! followed by the byte `1..=n`, or from record format
//! [`SHORT_PIECES_FORMAT`] four bytes where the bucket has them free
//! (`piece_field` in `value.rs`: about 12 bytes less a piece). A load
//! reads the value and the pieces it expects in one `HMGET`. From record
//! format [`CHECKED_FORMAT`] the count byte has its high bit set and the payload is a 4-byte check of
//! the record (the low half of its XXH3-64, big-endian) followed by the
//! record, so a piece spliced from another record, a stale one, or one cut
//! short reads as [`Error::CorruptRecord`] (but for one damage in 2^32),
//! where before only a missing piece did. Longer records live under a key
//! of their own.
//!
//! Where each part lives: opening a store (`open`, `config`),
//! key names (`keys`), a record's forms (`value`, `forms`), reads, writes
//! and deletes of one session (`read`, `write`, `delete`), the `Layout`
//! calls (`layout_trait`), plain writes of a session a process read and
//! why they are safe (`plain`, `plain_save`, `plain_create`), how calls reach the server (`calls`), growing
//! buckets (`growth`), the user index (`user_index`, `users`), viewed
//! items (`viewed`), read-and-remove (`take`) and health (`health`).

use std::sync::Arc;

use super::{Layout, Stored};
use crate::clock::ServerClock;
use crate::error::{Error, Result};
use crate::limits::ListpackLimits;
use crate::session::buckets::Buckets;
use crate::session::dictionary::Packer;
use crate::session::id::SessionId;
use crate::session::meta::StoreMeta;
use user_index::UserIndex;
use viewed::ViewedConfig;

mod calls;
mod config;
mod delete;
mod forms;
mod grown;
mod growth;
mod health;
mod keys;
mod layout_trait;
mod open;
mod plain;
mod plain_create;
mod plain_delete;
#[cfg(any(
    feature = "tower-sessions",
    feature = "tower-sessions-014",
    feature = "actix-session"
))]
mod plain_save;
mod read;
mod take;
pub(crate) mod user_index;
mod users;
mod value;
pub(crate) mod viewed;
mod write;

pub use config::{CompactConfig, Expiry};
pub use value::StoredRecord;
pub use value::piece_size_for;
pub(crate) use value::value_expiry;
use value::{Form, Value, parse_value, piece_field, pieces_of_len};

use forms::{OutOfLineWatch, TouchRoute};
pub(crate) use growth::AnyBucket;
use growth::{Growth, REROUTES, Route};
pub use growth::{Reshaping, SPLIT_FIELDS};
pub use health::Health;
pub use keys::GroupedBuckets;
pub(crate) use keys::Keys;
pub(crate) use plain::Kept;
use plain::PlainWrites;
#[cfg(any(
    feature = "tower-sessions",
    feature = "tower-sessions-014",
    feature = "actix-session"
))]
pub(crate) use plain_save::Read;
pub use users::NO_OWNER;

/// Default bucket bits: 2^14 buckets, about 1.6M sessions at ~100 each.
pub const DEFAULT_BUCKET_BITS: u8 = 14;
/// Default bucket bits of a growing store ([`CompactConfig::growing`]):
/// 16 groups, each one bucket at first.
pub const DEFAULT_GROWING_BITS: u8 = 4;
/// `log2` of the buckets that share one hash tag and one index ZSET: 128,
/// the ZSET's listpack entry limit.
pub const GROUP_BITS: u8 = 7;
/// The byte a value holds after its expiry when the record is out of line.
const OUT_OF_LINE: u8 = 0xc1;
/// The field every bucket of a growing store's current shape holds
/// ([`crate::session::shape`]).
const MARKER: &str = "";
/// The byte a value holds after its expiry when the record is in pieces
/// (MessagePack's `true`, which begins no record this crate writes; a
/// record that does is kept in the pieced form with no pieces).
const PIECED: u8 = 0xc3;
/// Records up to this many bytes stay in their bucket, in pieces where
/// they are longer than one value; longer ones go out of line.
pub const MAX_PIECED_RECORD: usize = 512;
/// The most pieces a record is cut into: a piece's field ends in its
/// number, below the bytes a tombstone's or a forward record's ends in.
/// (`compact_split.lua`'s `ONE_SESSION_MOST` counts on a session's fields
/// being few.)
const MAX_PIECES: usize = 15;
/// The record format from which a namespace keeps records in pieces.
const PIECES_FORMAT: u32 = 2;
/// The record format from which a record in pieces begins with a check of
/// its bytes (the module's docs), which earlier versions do not strip:
/// they refuse such a namespace.
pub const CHECKED_FORMAT: u32 = 5;
/// Set in a pieced value's count byte when its payload begins with the
/// record's check.
const CHECKED: u8 = 0x80;
/// The record format from which a record's pieces take short names where
/// the bucket has them free (`piece_field` in `value.rs`): four bytes where
/// they took the session's field and one, about 12 bytes less a piece.
/// Earlier versions do not read them: they refuse such a namespace.
pub const SHORT_PIECES_FORMAT: u32 = 7;
/// Set in a pieced value's count byte when its pieces have short names.
const SHORT: u8 = 0x40;
/// The record format from which no live session gives up its short piece
/// names (they stay as a hold, `compact_pieces.lua`) and no merge gives
/// two sessions the same ones, so a process may write or delete a session
/// it read with plain commands that name its pieces as it read them
/// (`plain.rs`). Earlier versions, which give them up, refuse such a
/// namespace; in a namespace of an earlier format every write is a script.
pub const HELD_NAMES_FORMAT: u32 = 10;
/// The record format from which a growing store's split or merge leaves
/// each bucket key it replaces as a mark for [`MOVED_MARK_SECS`]: a HASH
/// of the one field `0xff`, without the bucket's marker, expiring
/// (`shape_common.lua`). A plain create routed by a shape read a few
/// seconds before may write into a replaced bucket; the mark takes it, the
/// create sees no marker there and takes it back, and what it never takes
/// back goes with the mark (`plain_create.rs`). Reads, writes and deletes
/// take no session from a bucket without its marker. Earlier versions,
/// which read a bucket holding a session's field as current, refuse such
/// a namespace; in one of an earlier format a growing store's creates
/// stay scripts.
pub const MOVED_MARKS_FORMAT: u32 = 11;
/// How long a mark stays, in seconds: four times the oldest a shape may be
/// when a plain create routes by it (15 s).
pub const MOVED_MARK_SECS: u64 = 60;
/// The oldest a process's copy of a group's shape may be when a plain
/// create routes by it: a bucket it names that was replaced since was
/// replaced less than this long ago, so its mark is there.
const PLAIN_ROUTE_AGE: std::time::Duration = std::time::Duration::from_secs(15);
/// Bytes of the check a pieced payload begins with.
pub const CHECK_BYTES: usize = 4;
/// Bytes a pieced value holds before the record: the expiry, the marker
/// and the number of pieces.
const PIECED_HEAD: usize = EXPIRY_BYTES + 2;
/// The layout's name in a namespace's metadata.
const COMPACT_LAYOUT: &str = "compact";
/// Bytes of the expiry at the head of a binary value.
const EXPIRY_BYTES: usize = 4;
/// Integer-form values are `identity * SCALE + expiry`.
const SCALE: u64 = 10_000_000_000;
/// Identities kept in the integer form: below this one binary is as small
/// (MessagePack writes them in 1 to 3 bytes), from the upper one the value
/// would not fit a signed 64-bit integer.
const INTEGER_FORM: std::ops::Range<u64> = 1 << 16..922_337_203;

/// What a process last read or wrote for a session: a tower-sessions
/// store remembers it to skip a save that would change too little, and to
/// delete a session it saw inline with one `HDEL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The session's expiry then, unix seconds.
    pub expires_at: u64,
    /// Its record's length then, in bytes.
    pub record_len: usize,
}

impl<C> Compact<C> {
    /// Whether this store's splits and merges leave marks
    /// ([`MOVED_MARKS_FORMAT`]).
    pub(super) fn marks(&self) -> bool {
        self.growth.is_some() && self.format >= MOVED_MARKS_FORMAT
    }

    /// How a short script on `k`'s bucket checks the route: not at all in
    /// a fixed store; by the marker where the field is missing
    /// (`routed`), or always (`marked`, where there are marks).
    pub(super) fn route_mode(&self, k: &Keys) -> &'static str {
        match k.route {
            None => "",
            Some(_) if self.marks() => "marked",
            Some(_) => "routed",
        }
    }
}

/// Whether a growing store's script found its bucket split or merged away
/// (`compact_route.lua`).
fn is_reshaped(e: &redis::RedisError) -> bool {
    e.code() == Some("RESHAPED")
}

/// Sessions packed into listpack HASH buckets, expiry inside each value,
/// with a per-group index of the buckets' earliest expiries.
#[derive(Clone)]
pub struct Compact<C> {
    conn: C,
    scheme: GroupedBuckets,
    limits: ListpackLimits,
    eviction_policy: Option<String>,
    clock: Arc<ServerClock>,
    watch: Arc<OutOfLineWatch>,
    users: Option<UserIndex>,
    /// The viewed items kept, and their chunks per bucket.
    viewed: Option<(ViewedConfig, usize)>,
    /// Whether the server expires fields ([`Expiry::Server`]).
    server_expiry: bool,
    /// Whether records too long for one value are kept in pieces.
    pieces: bool,
    /// The namespace's record format (this version's, where unchecked).
    format: u32,
    /// The pieces a load asks for with the value: as many as the last
    /// pieced value read had.
    piece_guess: Arc<std::sync::atomic::AtomicUsize>,
    /// Which script a touch tries first.
    touches: Arc<TouchRoute>,
    /// Set once the server refused a script naming a user index bucket
    /// beside a session's (`CROSSSLOT`: a cluster): creates then write
    /// the entry with a command of its own first.
    entries_apart: Arc<std::sync::atomic::AtomicBool>,
    /// Packs record data with the store's dictionary, if it has one, and
    /// unpacks what the namespace's processes packed.
    packer: Arc<Packer>,
    /// The shape of a growing store; none for fixed buckets.
    growth: Option<Arc<Growth>>,
    /// The namespace's metadata as recorded when the store opened (none
    /// for a layout made without [`Compact::new`]).
    recorded: Option<Arc<StoreMeta>>,
    /// How a session this process read is written back (`plain.rs`); none
    /// where every write is a script.
    plain: Option<Arc<PlainWrites>>,
}

impl<C> std::fmt::Debug for Compact<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compact")
            .field("buckets", self.scheme.buckets())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The connection the layout uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The bucket scheme (bucket of an id, its field).
    pub fn buckets(&self) -> &Buckets {
        self.scheme.buckets()
    }

    /// The key names: buckets, groups, index keys.
    pub fn scheme(&self) -> &GroupedBuckets {
        &self.scheme
    }

    /// The listpack limits this layout works to.
    pub fn limits(&self) -> ListpackLimits {
        self.limits
    }

    /// The server's `maxmemory-policy` when the layout was opened.
    pub fn eviction_policy(&self) -> Option<&str> {
        self.eviction_policy.as_deref()
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// [`Compact::read_rest`] for a batch: where a growing store's bucket
    /// moved since the value was read, the session is loaded again alone.
    async fn read_rest_or_load(
        &self,
        id: &SessionId,
        k: &Keys,
        need: Assembled,
    ) -> Result<Option<Stored>> {
        match self.read_rest(id, k, need).await {
            Err(Error::Reshaped { .. }) => self.load(id).await,
            done => done,
        }
    }
}

/// A value as read (none if there is no field), and the pieces read with
/// it, in order.
type ValueRead = (Option<Vec<u8>>, Vec<Option<Vec<u8>>>);

/// What a value read back still needs.
enum Assembled {
    /// Nothing: the session, or none, and how its record was kept.
    Done(Option<Stored>, Kept),
    /// Its out-of-line record.
    OutOfLine,
    /// Its pieces, this many, under short names or long.
    Pieces { want: usize, short: bool },
}

#[cfg(test)]
mod tests;
