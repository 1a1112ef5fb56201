#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// The floors, bottom up; a module imports only from its own floor or below.

// 1. Small pieces: errors, lifetimes, the server's clock and limits, session
//    owners, the JSON-map codec, metrics, a placement hash, the Lua scripts.
pub mod acl;
pub mod clock;
pub mod error;
pub mod identity;
pub mod json_map;
pub mod limits;
pub mod metrics;
mod place;
mod scripts;
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

// 6. Framework adapters. The actix-session store keeps its sessions as
//    the tower-sessions one does, through its JSON-map store.
#[cfg(feature = "actix-session")]
pub mod actix;
#[cfg(any(
    feature = "tower-sessions",
    feature = "tower-sessions-014",
    feature = "actix-session"
))]
pub mod tower;

/// The actix-session store: `ActixStore::connect(url)`.
#[cfg(feature = "actix-session")]
pub use actix::ActixStore;
pub use conn::{ConnectOptions, Connection, connect, connect_with};
pub use error::{Error, InvalidId, Result};
pub use limits::{LimitsSource, ListpackLimits};
pub use session::buckets::Buckets;
pub use session::id::{IdWidth, SessionId};
pub use session::layout::{
    Bucketed, BucketedConfig, Compact, CompactConfig, Inserted, Layout, Stored, Written,
};
pub use session::store::{Session, Store};
/// The tower-sessions (axum) store: `TowerStore::connect(url)`.
#[cfg(any(feature = "tower-sessions", feature = "tower-sessions-014"))]
pub use tower::TowerStore;
pub use ttl::Deadline;

/// The `redis` crate this one is built on, for connections.
pub use redis;
