//! A typed store's view of its user index.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Revoked, UserSession};
use crate::error::Result;
use crate::identity::UserId;
use crate::metrics::{self, Op, Outcome};
use crate::session::id::SessionId;
use crate::session::layout::Compact;
use crate::session::layout::compact::user_index::head;
use crate::session::store::{Session, Store};

impl<C, A, I> Store<Compact<C>, A, I>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    A: Serialize + DeserializeOwned + Send + Sync,
    I: UserId,
{
    /// The live sessions of `identity` ("your devices"), oldest sign-in
    /// first. Needs a store with a user index ([`crate::users`]); one
    /// without answers [`crate::Error::Config`].
    pub async fn sessions_of(&self, identity: &I) -> Result<Vec<UserSession>> {
        metrics::call(Op::SessionsOf, Outcome::ok, async move {
            let found = self.layout().user_sessions(&head(identity)).await?;
            let idle = self.idle_timeout().map(|d| d.as_secs());
            Ok(UserSession::listing(found, idle))
        })
        .await
    }

    /// Revokes every session of `identity` ("log out everywhere"). When
    /// this returns, none of them can be loaded, and a create that raced it
    /// either was revoked or made a session that [`Store::sessions_of`]
    /// lists.
    pub async fn revoke_all(&self, identity: &I) -> Result<Revoked> {
        let head = head(identity);
        let revoke = self.layout().revoke_user(&head, None);
        metrics::call(Op::RevokeAll, Outcome::ok, revoke).await
    }

    /// Revokes every session of `identity` but `keep` (after a password
    /// change, say, keeping the session that made it).
    pub async fn revoke_others(&self, identity: &I, keep: &SessionId) -> Result<Revoked> {
        let head = head(identity);
        let revoke = self.layout().revoke_user(&head, Some(keep));
        metrics::call(Op::RevokeOthers, Outcome::ok, revoke).await
    }

    /// Sets the short label a listing shows for `session` (a device name,
    /// at most [`super::MAX_LABEL_BYTES`] bytes), or clears it with `None`.
    /// Returns `false` if the session has no index entry (it is gone).
    pub async fn set_label(&self, session: &Session<A, I>, label: Option<&str>) -> Result<bool> {
        let head = head(&session.identity);
        let set = self.layout().set_label(&head, &session.id, label);
        metrics::call(Op::SetLabel, Outcome::of_bool, set).await
    }
}
