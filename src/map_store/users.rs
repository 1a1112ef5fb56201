//! A tower store's users ("your devices", "log out everywhere") and
//! viewed items.

use super::{MapStore, head, session_id};
use crate::error::Result;
use crate::identity::Identity;
use crate::metrics::{self, Op, Outcome};
use crate::session::layout::Layout;
use crate::users::{Revoked, UserSession};

impl<C> MapStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The live sessions of `owner` ("your devices"); compare each `id`
    /// with the current session's through [`super::tower_id`]. Needs a user index.
    pub async fn sessions_of(&self, owner: &Identity) -> Result<Vec<UserSession>> {
        metrics::call(Op::SessionsOf, Outcome::ok, async move {
            let found = self.layout.user_sessions(&head(owner)).await?;
            Ok(UserSession::listing(found, self.idle.map(|d| d.as_secs())))
        })
        .await
    }

    /// Revokes every session of `owner` ("log out everywhere").
    pub async fn revoke_all(&self, owner: &Identity) -> Result<Revoked> {
        let head = head(owner);
        let revoke = async {
            if let Some(t) = self.open_takeover().await? {
                self.revoke_in_takeover(t, &head, None).await?;
            }
            self.layout.revoke_user(&head, None).await
        };
        metrics::call(Op::RevokeAll, Outcome::ok, revoke).await
    }

    /// Revokes every session of `owner` but `keep` (the current one).
    pub async fn revoke_others(&self, owner: &Identity, keep: i128) -> Result<Revoked> {
        let (head, keep) = (head(owner), session_id(keep));
        let revoke = async {
            if let Some(t) = self.open_takeover().await? {
                self.revoke_in_takeover(t, &head, Some(&keep)).await?;
            }
            self.layout.revoke_user(&head, Some(&keep)).await
        };
        metrics::call(Op::RevokeOthers, Outcome::ok, revoke).await
    }

    /// Records that the live session `id` (tower-sessions' `Id.0`) viewed
    /// `item`, for a store opened with viewed items ([`crate::viewed`]).
    /// tower-sessions keeps the expiry, so a view leaves it. Returns
    /// whether the session is live. A session tower-sessions has not saved
    /// yet has no id, and a `cycle_id` (log-in) starts a new list.
    pub async fn view<T: crate::viewed::Item>(&self, id: i128, item: &T) -> Result<bool> {
        metrics::call(Op::View, Outcome::of_bool, async move {
            let found = self
                .layout
                .view_kind(&session_id(id), T::KIND, &[item.encode()], None)
                .await?;
            Ok(found.is_some())
        })
        .await
    }

    /// The items the live session `id` viewed, newest first; `None` if it
    /// is gone.
    pub async fn viewed<T: crate::viewed::Item>(&self, id: i128) -> Result<Option<Vec<T>>> {
        metrics::call(Op::Viewed, Outcome::of_option, async move {
            let sid = session_id(id);
            let Some(items) = self.layout.viewed_entries(&sid).await? else {
                return Ok(None);
            };
            crate::viewed::decode_items(&items, || self.layout.location(&sid)).map(Some)
        })
        .await
    }
}
