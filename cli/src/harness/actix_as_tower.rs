//! actix-session stores driven through tower-sessions' `SessionStore`, as
//! actix-session's middleware calls them for the same requests, so that
//! `bench day` replays one day of traffic through either framework:
//! - a `create` is the middleware's `save` of a new session (the store
//!   issues its key);
//! - a `save` of changed data is an `update`; of unchanged data, under
//!   rolling expiry (`PersistentSession` with
//!   `TtlExtensionPolicy::OnEveryRequest`), an `update_ttl`;
//! - a `delete` is a `delete`: a logout's `purge`, or the old key that
//!   `renew` drops at sign-in (then a `save` under a new key).
//!
//! The ids the replay holds stand for the keys the store issued; the
//! state is actix-session's: each value as its JSON text.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use actix_session::storage::SessionKey;
use time::OffsetDateTime;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_core_014::session_store::{Error as StoreError, Result as StoreResult};

/// An actix-session store behind tower-sessions' `SessionStore` (see the
/// module docs).
pub struct ActixAsTower<S> {
    store: S,
    label: &'static str,
    /// The key each id stands for, and a digest of the state last written
    /// or loaded under it (what tells a change from a renewal).
    keys: Mutex<HashMap<Id, (String, u64)>>,
}

impl<S> ActixAsTower<S> {
    /// `store`, named `label` in errors and debug output.
    pub fn new(store: S, label: &'static str) -> Self {
        Self {
            store,
            label,
            keys: Mutex::default(),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<Id, (String, u64)>> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key_of(&self, id: &Id) -> Option<(String, u64)> {
        self.keys().get(id).cloned()
    }

    fn remember(&self, id: Id, key: SessionKey, digest: u64) {
        self.keys().insert(id, (String::from(key), digest));
    }

    fn error(&self, call: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend(format!("{} {call}: {e}", self.label))
    }
}

impl<S> std::fmt::Debug for ActixAsTower<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActixAsTower")
            .field("store", &self.label)
            .finish_non_exhaustive()
    }
}

/// The record's data as actix-session's state (each value's JSON text),
/// and a digest of it.
fn state_of(record: &Record) -> StoreResult<(HashMap<String, String>, u64)> {
    let state = record
        .data
        .iter()
        .map(|(k, v)| Ok((k.clone(), serde_json::to_string(v)?)))
        .collect::<serde_json::Result<HashMap<_, _>>>()
        .map_err(|e| StoreError::Encode(e.to_string()))?;
    let digest = digest(&state);
    Ok((state, digest))
}

/// A digest of `state` that does not depend on the map's order.
fn digest(state: &HashMap<String, String>) -> u64 {
    let mut pairs: Vec<_> = state.iter().collect();
    pairs.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    pairs.hash(&mut hasher);
    hasher.finish()
}

/// How long from now until `at`, as actix-session's TTL.
fn ttl_until(at: OffsetDateTime) -> time::Duration {
    (at - OffsetDateTime::now_utc()).max(time::Duration::SECOND)
}

fn session_key(key: String) -> StoreResult<SessionKey> {
    SessionKey::try_from(key).map_err(|e| StoreError::Backend(format!("session key: {e}")))
}

/// `SessionStore` for [`ActixAsTower`] over one actix-session store type
/// (the trait's futures name no `Send`, so each type is spelt out).
macro_rules! as_tower {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl tower_sessions_core_014::SessionStore for ActixAsTower<$store> {
            async fn create(&self, record: &mut Record) -> StoreResult<()> {
                use actix_session::storage::SessionStore as _;
                let (state, digest) = state_of(record)?;
                let ttl = ttl_until(record.expiry_date);
                let key = self
                    .store
                    .save(state, &ttl)
                    .await
                    .map_err(|e| self.error("save", e))?;
                self.remember(record.id, key, digest);
                Ok(())
            }

            async fn save(&self, record: &Record) -> StoreResult<()> {
                use actix_session::storage::SessionStore as _;
                let Some((key, seen)) = self.key_of(&record.id) else {
                    return Err(self.error("save", "no session under this id"));
                };
                let (state, digest) = state_of(record)?;
                let ttl = ttl_until(record.expiry_date);
                if digest == seen {
                    return self
                        .store
                        .update_ttl(&session_key(key)?, &ttl)
                        .await
                        .map_err(|e| self.error("update_ttl", e));
                }
                let key = self
                    .store
                    .update(session_key(key)?, state, &ttl)
                    .await
                    .map_err(|e| self.error("update", e))?;
                self.remember(record.id, key, digest);
                Ok(())
            }

            async fn load(&self, id: &Id) -> StoreResult<Option<Record>> {
                use actix_session::storage::SessionStore as _;
                let Some((key, _)) = self.key_of(id) else {
                    return Ok(None);
                };
                let key = session_key(key)?;
                let Some(state) = self
                    .store
                    .load(&key)
                    .await
                    .map_err(|e| self.error("load", e))?
                else {
                    return Ok(None);
                };
                let digest = digest(&state);
                let data = state
                    .into_iter()
                    .map(|(k, v)| Ok((k, serde_json::from_str(&v)?)))
                    .collect::<serde_json::Result<HashMap<_, _>>>()
                    .map_err(|e| StoreError::Decode(e.to_string()))?;
                self.remember(*id, key, digest);
                Ok(Some(Record {
                    id: *id,
                    data,
                    // The trait gives no expiry; the replay sets one
                    // before it saves.
                    expiry_date: OffsetDateTime::now_utc(),
                }))
            }

            async fn delete(&self, id: &Id) -> StoreResult<()> {
                use actix_session::storage::SessionStore as _;
                let Some((key, _)) = self.keys().remove(id) else {
                    return Ok(());
                };
                self.store
                    .delete(&session_key(key)?)
                    .await
                    .map_err(|e| self.error("delete", e))
            }
        }
    };
}

as_tower!(sessionpack::actix::ActixStore<sessionpack::Connection>);
#[cfg(feature = "peer-bench")]
as_tower!(actix_session::storage::RedisSessionStore);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_tells_changed_state_from_the_same_state() {
        let record = |cart: &[u32]| Record {
            id: Id::default(),
            data: HashMap::from([
                ("cart".to_owned(), serde_json::json!(cart)),
                ("locale".to_owned(), serde_json::json!("en-GB")),
            ]),
            expiry_date: OffsetDateTime::now_utc(),
        };
        let (state, same) = state_of(&record(&[1, 2])).unwrap();
        assert_eq!(state["cart"], "[1,2]");
        assert_eq!(same, state_of(&record(&[1, 2])).unwrap().1);
        assert_ne!(same, state_of(&record(&[1, 3])).unwrap().1);
    }
}
