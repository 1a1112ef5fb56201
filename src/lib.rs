//! Web sessions in Redis in half to three quarters of the memory the usual
//! stores take.
//!
//! Sessions are packed into small HASH buckets that Redis keeps in its
//! compact listpack encoding, each record packed with a dictionary learned
//! from the app's own sessions; expired sessions are removed by the store
//! itself. Requires Redis 7.0 or newer, or Valkey 8.0 or newer.
//!
//! # Which store
//!
//! - **axum** (tower-sessions 0.15; `tower-sessions-014` for axum-login
//!   0.18): [`TowerStore::connect`], with feature `tower-sessions`, then
//!   `SessionManagerLayer::new(store)`.
//! - **actix-web** (actix-session 0.11): [`ActixStore::connect`], with
//!   feature `actix-session`, then `SessionMiddleware::new(store, key)`.
//! - **Anything else**: [`Store`], typed sessions over a [`Compact`]
//!   layout, with optimistic updates, rotation and lifetimes.
//!
//! ```no_run
//! use sessionpack::{Compact, CompactConfig, Store};
//!
//! # async fn run() -> sessionpack::Result<()> {
//! let conn = sessionpack::connect("redis://127.0.0.1:6379").await?;
//! let store: Store<_, Vec<u32>> = Store::new(Compact::new(conn, CompactConfig::default()).await?);
//! let session = store.create(42, vec![7]).await?; // user 42 signs in
//! let cookie = session.id.to_hex();
//! assert_eq!(store.load_cookie(&cookie).await?.map(|s| s.attrs), Some(vec![7]));
//! # Ok(()) }
//! ```
//!
//! The repository's README has whole apps for each framework, and its
//! guide (`docs/guide/`) the layouts, packing, growth, sweeping, users,
//! Redis Cluster, TLS and ACL users, metrics, migration from other stores
//! and the benchmarks.
//!
//! # Features
//!
//! | feature | gives |
//! |---|---|
//! | `tower-sessions`, `tower-sessions-014` | [`TowerStore`] for tower-sessions 0.15 or 0.14 |
//! | `actix-session` | [`ActixStore`] for actix-session 0.11 |
//! | `compression` (default) | records packed with a zstd dictionary ([`session::dictionary`]) |
//! | `cluster` | Redis Cluster connections (`conn::cluster`) |
//! | `tls` | `rediss://` over rustls |
//! | `metrics` | calls, latencies and sweeps through the `metrics` facade ([`metrics`]) |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// The floors, bottom up; a module imports only from its own floor or below.

// 1. Small pieces: errors, lifetimes, the server's clock and limits, session
//    owners, the JSON-map codec, metrics, a placement hash, the Lua scripts
//    (public for their names by hash only).
pub mod acl;
pub mod clock;
pub mod error;
pub mod identity;
pub mod json_map;
pub mod limits;
pub mod metrics;
mod place;
pub mod scripts;
pub mod ttl;

// 2. Connections: one server, a cluster, waiting for replicas.
pub mod conn;

// 3. Redis patterns that need no session (the sweeper leases with the lock).
pub mod lock;
pub mod ratelimit;

// 4. Sessions: ids, records, layouts, the store and the sweeper.
pub mod session;

// 5. Built on sessions: the per-user index, one-time tokens, viewed items,
//    other stores' sessions read for a takeover.
pub mod takeover;
pub mod tokens;
pub mod users;
pub mod viewed;

// 6. Framework adapters: the JSON-map store both web stores keep their
//    sessions in, and each framework's store over it.
#[cfg(feature = "actix-session")]
pub mod actix;
#[cfg(any(
    feature = "tower-sessions",
    feature = "tower-sessions-014",
    feature = "actix-session"
))]
pub mod map_store;
#[cfg(any(feature = "tower-sessions", feature = "tower-sessions-014"))]
pub mod tower;

// The names a web developer meets first: the two framework stores, the
// typed store and its layout, connections and errors. The rest is in the
// modules.

/// The actix-session store: `ActixStore::connect(url)`.
#[cfg(feature = "actix-session")]
pub use actix::ActixStore;
pub use conn::{ConnectOptions, Connection, connect, connect_with};
pub use error::{Error, Result};
pub use session::id::{IdWidth, SessionId};
pub use session::layout::{Compact, CompactConfig};
pub use session::store::Store;
/// The tower-sessions (axum) store: `TowerStore::connect(url)`.
#[cfg(any(feature = "tower-sessions", feature = "tower-sessions-014"))]
pub use tower::TowerStore;

/// The `redis` crate this one is built on, for connections.
pub use redis;
