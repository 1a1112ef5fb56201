//! A compact store's recently viewed items ([`crate::viewed`]): the view
//! script, the read, and the carry-over on rotation.

use super::Compact;
use crate::clock::query_reads;
use crate::error::{Error, Result};
use crate::id::{InvalidIdExt, SessionId};
use crate::layout::check_ttl;
use crate::scripts::VIEWED_ADD;
use crate::viewed::{CHUNK_BYTES, ItemKind, ViewedConfig, entry, parse_chunks};

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
        let mut inv = self.invocation(&VIEWED_ADD, id);
        inv.arg(ttl)
            .arg(config.keep)
            .arg(CHUNK_BYTES)
            .arg(config.item_bytes);
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
        for item in newest.iter().rev() {
            inv.arg(entry(kind, item));
        }
        self.call(id, &inv).await
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
        let k = self.keys(id);
        let mut pipe = redis::pipe();
        pipe.atomic().hget(&k.bucket, &k.field);
        for key in self.viewed_keys(k.bucket_no) {
            pipe.hget(key, &k.field);
        }
        let replies = query_reads(&mut pipe, &self.conn, &self.clock)
            .await
            .map_err(self.error(id))?;
        let mut replies = replies.into_iter();
        let value: Option<Vec<u8>> =
            redis::from_redis_value(replies.next().unwrap_or(redis::Value::Nil))?;
        if self.live(id, value, None).await?.is_none() {
            return Ok(None);
        }
        let chunks = replies
            .map(redis::from_redis_value)
            .collect::<std::result::Result<Vec<Option<Vec<u8>>>, _>>()?;
        parse_chunks(&chunks, config.item_bytes)
            .map(Some)
            .ok_or_else(|| Error::CorruptRecord {
                location: self.buckets().location(id),
                reason: "a viewed chunk is not a list of length-prefixed items".into(),
            })
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
