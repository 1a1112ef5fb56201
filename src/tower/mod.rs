//! A [tower-sessions] store that keeps sessions in compact listpack buckets
//! ([`crate::Compact`], 128-bit ids): a drop-in for axum apps, axum-login
//! included.
//!
//! Feature `tower-sessions` implements the traits of tower-sessions-core
//! 0.15 (the current release); feature `tower-sessions-014` those of 0.14,
//! which axum-login 0.18 builds on. The traits are the same in both, and
//! both features may be on at once.
//!
//! ```no_run
//! # async fn run() -> sessionpack::Result<()> {
//! use sessionpack::TowerStore;
//!
//! let store = TowerStore::connect("redis://127.0.0.1:6379").await?;
//! // let app = Router::new()...layer(SessionManagerLayer::new(store));
//! # Ok(()) }
//! ```
//!
//! [`TowerStore`] is the JSON-map store, [`MapStore`], with the traits:
//! its docs say what each call sends and how the user index reads a
//! session's owner ([`axum_login_owner`] by default).
//!
//! `cycle_id` needs nothing of the store: tower-sessions deletes the old id
//! before it creates the new one (at the end of the request), so the two
//! are never live together. The store sees that create as a sign-in: a
//! revocation ([`MapStore::revoke_all`]) removes a cycled session whose
//! create began before it read the user's entries, but not one created
//! after that from what the request had loaded before; where a request
//! that cycles an id may race "log out everywhere", have it check the
//! user's credentials (axum-login's session auth hash) as well.
//!
//! [tower-sessions]: https://docs.rs/tower-sessions

pub use crate::map_store::{
    DEFAULT_LABEL_KEY, DEFAULT_MEMO_CAPACITY, DEFAULT_WRITE_THRESHOLD, MapStore, OwnerOf,
    axum_login_owner, recommended_config, recommended_config_for, session_id, tower_id,
};

mod traits;

/// The tower-sessions store: [`MapStore`], which implements
/// `tower_sessions::SessionStore` and `ExpiredDeletion` with this module's
/// features. `TowerStore::connect(url)` opens it as most apps want it.
pub type TowerStore<C> = MapStore<C>;
