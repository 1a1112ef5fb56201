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

pub use crate::session::layout::compact::viewed::{
    CHUNK_BYTES, DEFAULT_ITEM_BYTES, DEFAULT_KEEP, ItemKind, MAX_CHUNKS, ViewedConfig,
};

use crate::error::{Error, Result};

/// An item id as a viewed list stores it.
pub trait Item: Sized {
    /// What kind of item it is; [`ItemKind::Bytes`] reads any.
    const KIND: ItemKind = ItemKind::Bytes;
    /// Its bytes as stored: 1 to [`ViewedConfig::item_bytes`] of them.
    fn encode(&self) -> Vec<u8>;
    /// The item back from its stored bytes; `None` if they are not one.
    fn decode(bytes: &[u8]) -> Option<Self>;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::layout::compact::viewed::entry;

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
}
