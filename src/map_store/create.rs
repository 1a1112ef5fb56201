//! Creating sessions: new ones under random (or stamped) ids, and
//! sessions taken over from another store under their own.

use std::collections::HashMap;

use serde_json::Value;

use super::{CREATE_ATTEMPTS, Imported, MapStore, expiry_secs, session_id, tower_id};
use crate::clock::unix_now;
use crate::error::{Error, Result};
use crate::metrics::{self, Op, Outcome};
use crate::session::id::SessionId;
use crate::session::layout::compact::Kept;
use crate::session::layout::{Inserted, Layout};
use crate::ttl::Deadline;

impl<C> MapStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Stores a new session under `id`; a taken id is replaced by one from
    /// `fresh` and tried again. Returns the id used. Both should give ids
    /// drawn at random, as tower-sessions draws a create's: the store
    /// writes a new session in pieces without a script, which is safe for
    /// an id no one else can know yet ([`Layout::insert_new`]). A taken
    /// id is never overwritten either way.
    pub async fn create_data(
        &self,
        id: i128,
        data: &HashMap<String, Value>,
        expires_at: i64,
        mut fresh: impl FnMut() -> i128,
    ) -> Result<i128> {
        let create = self.create_unobserved((id, None), data, expires_at, || (fresh(), None));
        let (id, _) = metrics::call(Op::Create, Outcome::ok, create).await?;
        Ok(id)
    }

    #[cfg(feature = "actix-session")]
    /// [`MapStore::create_data`] of a session whose id may come with a
    /// key it is the hash of (an actix-session key, while a takeover of
    /// actix-session's store is open: old instances load the session under
    /// that key). Returns the id and key used.
    pub(crate) async fn create_data_keyed(
        &self,
        first: (i128, Option<String>),
        data: &HashMap<String, Value>,
        expires_at: i64,
        fresh: impl FnMut() -> (i128, Option<String>),
    ) -> Result<(i128, Option<String>)> {
        let create = self.create_unobserved(first, data, expires_at, fresh);
        metrics::call(Op::Create, Outcome::ok, create).await
    }

    async fn create_unobserved(
        &self,
        (mut id, mut key): (i128, Option<String>),
        data: &HashMap<String, Value>,
        expires_at: i64,
        mut fresh: impl FnMut() -> (i128, Option<String>),
    ) -> Result<(i128, Option<String>)> {
        let (bytes, head) = self.encode(data).await?;
        let asked = expiry_secs(expires_at)?;
        // A store with a user index, or an absolute lifetime, issues its
        // own, stamped, ids; an id that is a key's hash stays that.
        let stamped = key.is_none() && (self.layout.stamps_ids() || self.absolute.is_some());
        if stamped {
            id = tower_id(&self.stamped_id().await?);
        }
        let mut at = self.capped(id, asked);
        let takeover = self.open_takeover().await?;
        for _ in 0..CREATE_ATTEMPTS {
            let old = takeover.and_then(|t| Some((t, t.old_key(&session_id(id), key.as_deref())?)));
            // With a takeover open, the old key first: old instances see
            // the session, and an id taken there draws another.
            let free = match &old {
                Some((t, old)) => self.create_in_takeover(t, old, id, data, at).await?,
                None => true,
            };
            // tower-sessions draws a create's id at random (`Id::default`),
            // as this store draws its stamped ones: no one else knows it.
            let (inserted, kept) = if free {
                self.layout
                    .insert_new_kept(&session_id(id), &bytes, Deadline::At(at))
                    .await?
            } else {
                (Inserted::IdTaken, None)
            };
            let inserted = match (inserted, &old) {
                (Inserted::IdTaken, Some((_, old))) if free => {
                    if self.created_by_copy(old, id, data, at).await? {
                        return Ok((id, key));
                    }
                    Inserted::IdTaken
                }
                (other, _) => other,
            };
            match inserted {
                Inserted::IdTaken | Inserted::Late => {
                    (id, key) = if stamped {
                        (tower_id(&self.stamped_id().await?), None)
                    } else {
                        fresh()
                    };
                    at = self.capped(id, asked);
                }
                Inserted::Created { .. } => {
                    self.created(id, &bytes, head, at, data, kept).await?;
                    return Ok((id, key));
                }
                // Stored and gone at once, as a key set with a past EXAT.
                Inserted::AlreadyExpired => return Ok((id, key)),
            }
        }
        Err(Error::Config(format!(
            "{CREATE_ATTEMPTS} random session ids in a row were taken: the random source is broken"
        )))
    }

    /// Stores a session taken over from another store ([`crate::takeover`])
    /// under exactly `id`, as [`MapStore::create_data`] would store it
    /// (owner, index entry and label included), expiring at `expires_at`
    /// (unix seconds). Never replaces anything: an id the store holds, or
    /// one a revocation or rotation left a mark beside, is
    /// [`Imported::Taken`]. A store with an absolute lifetime refuses
    /// ([`Error::Config`]): it counts from a stamp in its own ids, which
    /// another store's ids lack.
    pub async fn import_data(
        &self,
        id: i128,
        data: &HashMap<String, Value>,
        expires_at: u64,
    ) -> Result<Imported> {
        if self.absolute.is_some() {
            return Err(Error::Config(
                "a store with an absolute lifetime cannot take over another store's sessions: \
                 their ids carry no issue time"
                    .into(),
            ));
        }
        let (bytes, head) = self.encode(data).await?;
        let at = expires_at.min(crate::ttl::MAX_EXPIRES_AT);
        // Late: slower than the user index's grace after its entry was
        // written; the next try writes the entry again.
        let mut inserted = Inserted::Late;
        for _ in 0..CREATE_ATTEMPTS {
            inserted = self
                .layout
                .insert(&session_id(id), &bytes, Deadline::At(at))
                .await?;
            if inserted != Inserted::Late {
                break;
            }
        }
        Ok(match inserted {
            Inserted::Created { .. } => {
                self.created(id, &bytes, head, at, data, None).await?;
                Imported::Created
            }
            Inserted::IdTaken | Inserted::Late => Imported::Taken,
            Inserted::AlreadyExpired => Imported::Expired,
        })
    }

    /// After a session is stored: remembers it (with how its record is
    /// kept, where a plain create wrote it: a plain save or delete of it
    /// then names the same fields), and gives its index entry the label
    /// its data carries.
    async fn created(
        &self,
        id: i128,
        bytes: &[u8],
        head: usize,
        at: u64,
        data: &HashMap<String, Value>,
        kept: Option<Kept>,
    ) -> Result<()> {
        self.memo.put(id, bytes, head, at, kept);
        if let Some(owner) = self.head(bytes, head)
            && let Some(label) = self.label(data)
        {
            self.layout
                .set_label(owner, &session_id(id), Some(&label))
                .await?;
        }
        Ok(())
    }

    /// A new id stamped with its issue time: the layout's (by the server's
    /// clock, with a user index), or a random one stamped by this
    /// process's clock.
    async fn stamped_id(&self) -> Result<SessionId> {
        let id = self.layout.new_id().await?;
        Ok(if self.layout.stamps_ids() {
            id
        } else {
            id.with_stamp(u32::try_from(unix_now()).unwrap_or(u32::MAX))
        })
    }
}
