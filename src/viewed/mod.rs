//! Recently viewed items: the last `keep` items each session viewed, newest
//! first, recorded with the session's touch in one step and gone with the
//! session. The book's `viewed:<token>` ZSET per session, packed.
//!
//! The book keeps one ZSET per session (`ZADD viewed:<token> <ts> <item>`,
//! trimmed to 25 with `ZREMRANGEBYRANK`), a top-level key each. Here a
//! compact store opened with [`crate::CompactConfig::with_viewed`] keeps a
//! session's list in its bucket's *viewed chunks*: up to [`MAX_CHUNKS`]
//! listpack HASHes (four for 25 items of up to 8 bytes) beside the bucket (`sp:{07f4}:7:v0`, `sp:{07f4}:7:v1`, ... for bucket `0x3fa07` of 2^20), each holding
//! the session's field again with a value of at most [`CHUNK_BYTES`]
//! bytes: the list, newest first, each item its length in one byte and its
//! bytes (the top two bits of the length byte say what kind of item it is,
//! [`ItemKind`], so a list is never read back as another kind). Chunk `k`
//! holds the items that did not fit chunks `0..k`, so a
//! short list uses only chunk 0, and a chunk with room for one more item
//! is the last; the list also ends at a missing chunk (an evicted chunk
//! key), and a view removes whatever follows one. A chunk key never holds more fields than
//! its bucket holds sessions, and no value exceeds the listpack value
//! limit, so the chunks stay listpacks whenever the bucket does.
//!
//! Every script that removes a session (destroy, expiry found on a touch,
//! the sweeper, the session cap, a revocation, a tower-sessions delete)
//! removes its chunk fields in the same step, and the sweeper deletes the chunk keys of a bucket it
//! empties; so a list never outlives its session, and nothing is left
//! that no sweep removes. A view is one script on the bucket's hash tag: it
//! checks the session is live, rolls its expiry as a touch does, moves the
//! item to the front (a repeat view moves it, as `ZADD` of an existing
//! member does) and keeps the newest `keep`. A rotation carries the list to
//! the new id.
//!
//! The store records `keep` and `item_bytes` in its metadata: a process
//! opening the namespace with others (or without the lists) would drop
//! other chunks than the ones written, and is refused.

mod store;

use crate::error::{Error, Result};

/// Items kept per session by default: the book's 25.
pub const DEFAULT_KEEP: u8 = 25;
/// Largest item by default: 8 bytes, any `u64` item id.
pub const DEFAULT_ITEM_BYTES: u8 = 8;
/// Largest value of one chunk: Redis's default `hash-max-listpack-value`.
pub const CHUNK_BYTES: usize = 64;
/// Most chunks per bucket: each is a key beside the bucket, and every
/// script removing a session names them all.
pub const MAX_CHUNKS: usize = 16;

/// How many items a store keeps per session, and how large one may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ViewedConfig {
    /// Items kept per session, newest first (1..=255), default 25.
    pub keep: u8,
    /// The largest item in bytes as stored ([`Item::encode`]), 1..=63,
    /// default 8. It decides the chunk count: each chunk holds
    /// `64 / (1 + item_bytes)` items at the least.
    pub item_bytes: u8,
}

impl Default for ViewedConfig {
    fn default() -> Self {
        Self {
            keep: DEFAULT_KEEP,
            item_bytes: DEFAULT_ITEM_BYTES,
        }
    }
}

impl ViewedConfig {
    /// Keeps the newest `keep` items of at most `item_bytes` bytes.
    pub fn new(keep: u8, item_bytes: u8) -> Self {
        Self { keep, item_bytes }
    }

    /// The chunk keys per bucket that hold `keep` items of the largest
    /// size; an [`Error::Config`] when that is 0 items or more than
    /// [`MAX_CHUNKS`] chunks.
    pub fn chunks(&self) -> Result<usize> {
        let per_chunk = CHUNK_BYTES / (1 + usize::from(self.item_bytes));
        if self.keep == 0 || self.item_bytes == 0 || per_chunk == 0 {
            return Err(Error::Config(format!(
                "viewed items: keep {} items of up to {} bytes; both must be at least 1 and an \
                 item at most {} bytes",
                self.keep,
                self.item_bytes,
                CHUNK_BYTES - 1
            )));
        }
        let chunks = usize::from(self.keep).div_ceil(per_chunk);
        if chunks > MAX_CHUNKS {
            return Err(Error::Config(format!(
                "viewed items: {} items of up to {} bytes take {chunks} chunks of {CHUNK_BYTES} \
                 bytes; at most {MAX_CHUNKS}: keep fewer or smaller items",
                self.keep, self.item_bytes
            )));
        }
        Ok(chunks)
    }

    /// Checks an item's stored bytes against the size limit.
    pub(crate) fn check_item(&self, bytes: &[u8]) -> Result<()> {
        let limit = usize::from(self.item_bytes);
        if bytes.is_empty() || bytes.len() > limit {
            return Err(Error::ItemTooLong {
                len: bytes.len(),
                limit,
            });
        }
        Ok(())
    }
}

/// What kind of item a list entry holds, kept in the top two bits of its
/// length byte: an item viewed as one kind and read as another (a text
/// item read as a number) is an error, never a made-up value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// Bytes of no stated kind (`Vec<u8>`, and every item stored before
    /// items carried their kind): any item type may read them.
    Bytes = 0,
    /// An unsigned integer (`u64`, `u32`).
    Uint = 1,
    /// UTF-8 text (`String`).
    Text = 2,
}

impl ItemKind {
    /// The kind a length byte's top two bits name.
    fn of_header(header: u8) -> Option<Self> {
        match header >> 6 {
            0 => Some(Self::Bytes),
            1 => Some(Self::Uint),
            2 => Some(Self::Text),
            _ => None,
        }
    }
}

/// An item id as a viewed list stores it.
pub trait Item: Sized {
    /// What kind of item it is; [`ItemKind::Bytes`] reads any.
    const KIND: ItemKind = ItemKind::Bytes;
    /// Its bytes as stored: 1 to [`ViewedConfig::item_bytes`] of them.
    fn encode(&self) -> Vec<u8>;
    /// The item back from its stored bytes; `None` if they are not one.
    fn decode(bytes: &[u8]) -> Option<Self>;
}

/// An item as a list stores it: a header byte (`kind << 6 | length`), then
/// its bytes. The caller has checked the length (at most 63).
pub(crate) fn entry(kind: ItemKind, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + bytes.len());
    out.push(((kind as u8) << 6) | (bytes.len() as u8 & 63));
    out.extend_from_slice(bytes);
    out
}

/// Big-endian without leading zero bytes (at least one byte): ids below
/// 2^24 take 3 bytes.
fn encode_uint(n: u64) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(7);
    bytes[skip..].to_vec()
}

fn decode_uint(bytes: &[u8], max: usize) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > max {
        return None;
    }
    Some(bytes.iter().fold(0, |n, &b| (n << 8) | u64::from(b)))
}

impl Item for u64 {
    const KIND: ItemKind = ItemKind::Uint;
    fn encode(&self) -> Vec<u8> {
        encode_uint(*self)
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        decode_uint(bytes, 8)
    }
}

impl Item for u32 {
    const KIND: ItemKind = ItemKind::Uint;
    fn encode(&self) -> Vec<u8> {
        encode_uint(u64::from(*self))
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        decode_uint(bytes, 4).and_then(|n| u32::try_from(n).ok())
    }
}

impl Item for String {
    const KIND: ItemKind = ItemKind::Text;
    fn encode(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl Item for Vec<u8> {
    fn encode(&self) -> Vec<u8> {
        self.clone()
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

/// Stored entries ([`entry`]) as `T`s; one of another kind, or whose bytes
/// are not a `T`, is an [`Error::CorruptRecord`] at `location`.
pub(crate) fn decode_items<T: Item>(
    entries: &[Vec<u8>],
    location: impl Fn() -> String,
) -> Result<Vec<T>> {
    entries
        .iter()
        .map(|entry| {
            let kind = entry.first().copied().and_then(ItemKind::of_header);
            let bytes = entry.get(1..).unwrap_or_default();
            let readable = match kind {
                Some(ItemKind::Bytes) => true,
                Some(kind) => T::KIND == ItemKind::Bytes || kind == T::KIND,
                None => false,
            };
            readable
                .then(|| T::decode(bytes))
                .flatten()
                .ok_or_else(|| Error::CorruptRecord {
                    location: location(),
                    reason: format!(
                        "a viewed item of {} bytes stored as {kind:?} is not a {}",
                        bytes.len(),
                        std::any::type_name::<T>()
                    ),
                })
        })
        .collect()
}

/// The entries of a session's chunks ([`entry`]: header byte and bytes),
/// in order (newest first); `None` if a chunk is malformed. The list ends at a missing chunk or after one with
/// room for an item of `widest` bytes, as the view script reads it: a
/// chunk past those (left by an evicted chunk key) is not the list's.
pub(crate) fn parse_chunks(chunks: &[Option<Vec<u8>>], widest: u8) -> Option<Vec<Vec<u8>>> {
    let mut items = Vec::new();
    for chunk in chunks {
        let Some(chunk) = chunk else { break };
        let last = chunk.len() + 1 + usize::from(widest) <= CHUNK_BYTES;
        let mut rest = chunk.as_slice();
        while let Some((&header, tail)) = rest.split_first() {
            let len = usize::from(header & 63);
            if len == 0 || tail.len() < len {
                return None;
            }
            items.push(rest[..1 + len].to_vec());
            rest = &tail[len..];
        }
        if last {
            break;
        }
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_their_significant_bytes() {
        for (n, len) in [(0u64, 1), (255, 1), (256, 2), (1 << 23, 3), (u64::MAX, 8)] {
            let bytes = n.encode();
            assert_eq!(bytes.len(), len, "{n}");
            assert_eq!(u64::decode(&bytes), Some(n));
        }
        assert_eq!(u32::decode(&u64::MAX.encode()), None);
        assert_eq!(u64::decode(&[]), None);
    }

    #[test]
    fn an_item_is_read_only_as_its_own_kind() {
        let at = || "here".to_owned();
        let text = entry(ItemKind::Text, b"abc");
        let number = entry(ItemKind::Uint, &7u64.encode());
        let legacy = vec![3, b'a', b'b', b'c'];
        assert!(decode_items::<u64>(std::slice::from_ref(&text), at).is_err());
        assert_eq!(
            decode_items::<String>(&[text.clone(), legacy.clone()], at).unwrap(),
            ["abc", "abc"]
        );
        assert!(decode_items::<String>(std::slice::from_ref(&number), at).is_err());
        assert_eq!(
            decode_items::<u64>(std::slice::from_ref(&number), at).unwrap(),
            [7]
        );
        // Raw bytes read any kind; untyped items read as any type.
        assert_eq!(
            decode_items::<Vec<u8>>(&[text, number], at).unwrap(),
            [b"abc".to_vec(), vec![7]]
        );
        assert_eq!(decode_items::<u64>(&[legacy], at).unwrap(), [0x616263]);
        assert!(decode_items::<u64>(&[vec![0xc1, 1]], at).is_err(), "kind 3");
    }

    #[test]
    fn chunk_counts_follow_the_item_size() {
        assert_eq!(ViewedConfig::default().chunks().unwrap(), 4);
        assert_eq!(ViewedConfig::new(25, 3).chunks().unwrap(), 2);
        assert_eq!(ViewedConfig::new(16, 3).chunks().unwrap(), 1);
        assert!(ViewedConfig::new(0, 8).chunks().is_err());
        assert!(ViewedConfig::new(25, 64).chunks().is_err());
        assert!(ViewedConfig::new(255, 32).chunks().is_err());
    }

    #[test]
    fn chunks_parse_in_order_and_end_where_the_script_ends_them() {
        let read = [Some(vec![1, 7, 2, 1, 0]), None, Some(vec![1, 9])];
        assert_eq!(
            parse_chunks(&read, 8).unwrap(),
            vec![vec![1, 7], vec![2, 1, 0]]
        );
        // The kind bits are not part of the length.
        let read = [Some(vec![0x41, 7, 0x82, b'a', b'b'])];
        assert_eq!(
            parse_chunks(&read, 8).unwrap(),
            vec![vec![0x41, 7], vec![0x82, b'a', b'b']]
        );
        // A full chunk 0 goes on to chunk 1; one with room ends the list.
        let full: Vec<u8> = [2u8, 1, 1].repeat(20);
        let read = [Some(full.clone()), Some(vec![1, 9])];
        assert_eq!(parse_chunks(&read, 4).unwrap().len(), 21);
        assert_eq!(parse_chunks(&read, 3).unwrap().len(), 20);
        assert_eq!(parse_chunks(&[Some(vec![3, 1])], 8), None, "truncated");
        assert_eq!(parse_chunks(&[Some(vec![0])], 8), None, "empty item");
    }
}
