//! A compact store's recently viewed items ([`crate::viewed`] describes
//! them): their configuration, how a list is stored in chunks, the view
//! script, the read, and the carry-over on rotation.

use super::Compact;
use crate::error::{Error, Result};
use crate::scripts::{Reads, VIEWED_ADD};
use crate::session::id::{InvalidIdExt, SessionId};
use crate::session::meta::StoreMeta;
use crate::ttl::check_ttl;

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
    /// The largest item in bytes as stored ([`crate::viewed::Item::encode`]), 1..=63,
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
    /// The viewed items a namespace's metadata records, if any.
    pub fn from_meta(meta: &StoreMeta) -> Option<Self> {
        (meta.viewed_keep > 0).then_some(Self {
            keep: meta.viewed_keep,
            item_bytes: meta.viewed_item_bytes,
        })
    }

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
    pub(crate) fn of_header(header: u8) -> Option<Self> {
        match header >> 6 {
            0 => Some(Self::Bytes),
            1 => Some(Self::Uint),
            2 => Some(Self::Text),
            _ => None,
        }
    }
}

/// An item as a list stores it: a header byte (`kind << 6 | length`), then
/// its bytes. The caller has checked the length (at most 63).
pub(crate) fn entry(kind: ItemKind, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + bytes.len());
    out.push(((kind as u8) << 6) | (bytes.len() as u8 & 63));
    out.extend_from_slice(bytes);
    out
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

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The same layout keeping (or not) each session's viewed items, with
    /// no metadata check; an [`Error::Config`] for a `config` whose items
    /// need too many chunks.
    pub fn with_viewed(mut self, config: Option<ViewedConfig>) -> Result<Self> {
        self.viewed = match config {
            Some(config) => {
                let chunks = config.chunks()?;
                if (CHUNK_BYTES as u64) > self.limits.hash_value {
                    tracing::warn!(
                        limits = ?self.limits,
                        "server's listpack value limit is below a viewed chunk's {CHUNK_BYTES} \
                         bytes: full chunks will convert their keys"
                    );
                }
                Some((config, chunks))
            }
            None => None,
        };
        Ok(self)
    }

    /// The viewed items the store keeps, if it keeps them.
    pub fn viewed_config(&self) -> Option<ViewedConfig> {
        self.viewed.map(|(config, _)| config)
    }

    /// Viewed chunk keys per bucket (0 where the store keeps no viewed
    /// items).
    pub fn viewed_chunks(&self) -> usize {
        self.viewed.map_or(0, |(_, chunks)| chunks)
    }

    fn viewed_or_refuse(&self) -> Result<ViewedConfig> {
        self.viewed_config().ok_or_else(|| {
            Error::Config(
                "this store keeps no viewed items: open it with CompactConfig::with_viewed".into(),
            )
        })
    }

    /// Records that the live session `id` viewed `item` (its stored bytes)
    /// and, with `ttl_secs`, rolls its expiry to that many seconds from
    /// now; one script. Returns the session's expiry, or `None` (nothing
    /// written) if there is no live session.
    pub async fn view(
        &self,
        id: &SessionId,
        item: &[u8],
        ttl_secs: Option<u64>,
    ) -> Result<Option<u64>> {
        self.view_many(id, &[item], ttl_secs).await
    }

    /// [`Compact::view`] of several items at once, oldest first (the last
    /// ends at the front): one script, as for one.
    pub async fn view_many<T: AsRef<[u8]>>(
        &self,
        id: &SessionId,
        items: &[T],
        ttl_secs: Option<u64>,
    ) -> Result<Option<u64>> {
        self.view_kind(id, ItemKind::Bytes, items, ttl_secs).await
    }

    /// [`Compact::view_many`] of items of one kind, stored with it.
    pub(crate) async fn view_kind<T: AsRef<[u8]>>(
        &self,
        id: &SessionId,
        kind: ItemKind,
        items: &[T],
        ttl_secs: Option<u64>,
    ) -> Result<Option<u64>> {
        let config = self.viewed_or_refuse()?;
        id.check_width(self.buckets().id_width())?;
        for item in items {
            config.check_item(item.as_ref())?;
        }
        let ttl = match ttl_secs {
            Some(secs) => check_ttl(secs)?.to_string(),
            None => String::new(),
        };
        // Only the newest `keep` distinct items can stay: the script need
        // not see more (however long a batch a caller passes).
        let mut newest: Vec<&[u8]> = Vec::new();
        for item in items.iter().rev() {
            if newest.len() == usize::from(config.keep) {
                break;
            }
            if !newest.contains(&item.as_ref()) {
                newest.push(item.as_ref());
            }
        }
        self.call_on_session(id, |k| {
            let mut inv = self.invocation(self.script(&VIEWED_ADD), k);
            inv.arg(&ttl)
                .arg(config.keep)
                .arg(CHUNK_BYTES)
                .arg(config.item_bytes);
            for item in newest.iter().rev() {
                inv.arg(entry(kind, item));
            }
            inv
        })
        .await
    }

    /// The items the live session `id` viewed, newest first, as stored;
    /// `None` if there is no live session. One transaction reads the
    /// session and its chunks together.
    pub async fn viewed(&self, id: &SessionId) -> Result<Option<Vec<Vec<u8>>>> {
        Ok(self
            .viewed_entries(id)
            .await?
            .map(|entries| entries.into_iter().map(|e| e[1..].to_vec()).collect()))
    }

    /// [`Compact::viewed`] with each item's header byte
    /// ([`crate::viewed::ItemKind`] and length) before its bytes.
    pub(crate) async fn viewed_entries(&self, id: &SessionId) -> Result<Option<Vec<Vec<u8>>>> {
        let config = self.viewed_or_refuse()?;
        id.check_width(self.buckets().id_width())?;
        for _ in 0..super::REROUTES {
            let k = self.keys(id);
            // One step, so a write between the reads is never half seen.
            let mut reads = Reads::default().hget(&k.bucket, &k.field);
            for key in self.chunk_keys(&k) {
                reads = reads.hget(key, &k.field);
            }
            // A growing store's bucket answers for its marker too: one
            // without it may have been split or merged away.
            if k.route.is_some() {
                reads = reads.hexists(&k.bucket, b"");
            }
            let replies: Vec<redis::Value> = reads
                .invocation()
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?;
            let mut replies = replies.into_iter();
            if k.route.is_some() {
                let marked: bool =
                    redis::from_redis_value(replies.next_back().unwrap_or(redis::Value::Nil))?;
                if !marked {
                    if self.reroute(id, &k, false).await? {
                        continue;
                    }
                    return Ok(None);
                }
            }
            let value: Option<Vec<u8>> =
                redis::from_redis_value(replies.next().unwrap_or(redis::Value::Nil))?;
            if self.live(id, value, None).await?.is_none() {
                return Ok(None);
            }
            let chunks = replies
                .map(redis::from_redis_value)
                .collect::<std::result::Result<Vec<Option<Vec<u8>>>, _>>()?;
            return parse_chunks(&chunks, config.item_bytes)
                .map(Some)
                .ok_or_else(|| Error::CorruptRecord {
                    location: self.buckets().location(id),
                    reason: "a viewed chunk is not a list of length-prefixed items".into(),
                });
        }
        Err(self.reshaped(id))
    }

    /// Gives `to` the viewed items of `from` (a rotation, before `from` is
    /// removed), if `to` is live; one script, as for views. A view of
    /// `from` landing after the read is lost with `from`.
    pub(crate) async fn copy_viewed(&self, from: &SessionId, to: &SessionId) -> Result<()> {
        if self.viewed.is_none() {
            return Ok(());
        }
        let Some(items) = self.viewed(from).await? else {
            return Ok(());
        };
        if items.is_empty() {
            return Ok(());
        }
        let oldest_first: Vec<&Vec<u8>> = items.iter().rev().collect();
        self.view_many(to, &oldest_first, None).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
