//! A typed store's view of its sessions' viewed items.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Item;
use crate::error::Result;
use crate::identity::UserId;
use crate::metrics::{self, Op, Outcome};
use crate::session::id::SessionId;
use crate::session::layout::{Compact, Layout};
use crate::session::store::Store;

impl<C, A, I> Store<Compact<C>, A, I>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    A: Serialize + DeserializeOwned + Send + Sync,
    I: UserId,
{
    /// Records that session `id` viewed `item` and touches the session, in
    /// one step: the item goes to the front of its list (moved there if it
    /// was viewed before), the list keeps the newest
    /// [`crate::viewed::ViewedConfig::keep`], and the expiry rolls as
    /// [`Store::touch`] rolls it. Returns the session's expiry, or `None`
    /// (nothing written) if it is gone.
    ///
    /// Needs a store with viewed items ([`crate::viewed`]); one without
    /// answers [`crate::Error::Config`]. An item larger than the store keeps is
    /// [`crate::Error::ItemTooLong`].
    pub async fn view<T: Item>(&self, id: &SessionId, item: &T) -> Result<Option<u64>> {
        self.view_many(id, std::slice::from_ref(item)).await
    }

    /// [`Store::view`] of several items at once, oldest first (the last
    /// ends at the front of the list); one step, as for one.
    pub async fn view_many<T: Item>(&self, id: &SessionId, items: &[T]) -> Result<Option<u64>> {
        metrics::call(Op::View, Outcome::of_option, async move {
            let encoded: Vec<Vec<u8>> = items.iter().map(Item::encode).collect();
            match self.touch_ttl(id) {
                Some(0) => {
                    // Past its absolute deadline: gone, with its items.
                    self.layout().remove(id, None).await?;
                    Ok(None)
                }
                ttl => self.layout().view_kind(id, T::KIND, &encoded, ttl).await,
            }
        })
        .await
    }

    /// The items session `id` viewed, newest first; `None` if it is gone.
    /// Items viewed as another kind than `T` ([`crate::viewed::ItemKind`];
    /// a `Vec<u8>` reads any), or whose bytes are not a `T`, are
    /// [`crate::Error::CorruptRecord`].
    pub async fn viewed<T: Item>(&self, id: &SessionId) -> Result<Option<Vec<T>>> {
        metrics::call(Op::Viewed, Outcome::of_option, async move {
            if self.touch_ttl(id) == Some(0) {
                return Ok(None);
            }
            let Some(items) = self.layout().viewed_entries(id).await? else {
                return Ok(None);
            };
            super::decode_items(&items, || self.layout().location(id)).map(Some)
        })
        .await
    }
}
