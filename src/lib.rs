#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod advisor;
pub mod buckets;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod connect;
pub mod error;
#[cfg(feature = "cli")]
pub mod harness;
pub mod id;
pub mod identity;
pub mod json_map;
pub mod layout;
pub mod limits;
pub mod lock;
pub mod meta;
pub mod profile;
pub mod ratelimit;
pub mod record;
mod scripts;
pub mod server;
pub mod store;
pub mod sweep;
pub mod tokens;
#[cfg(any(feature = "tower-sessions", feature = "tower-sessions-014"))]
pub mod tower;
pub mod users;
pub mod viewed;
pub mod wait;

pub use buckets::Buckets;
pub use connect::{ConnectOptions, Connection, connect, connect_with};
pub use error::{Error, InvalidId, Result};
pub use id::{IdWidth, SessionId};
pub use layout::{
    Bucketed, BucketedConfig, Compact, CompactConfig, Expiry, Inserted, Layout, Stored, Written,
};
pub use limits::{LimitsSource, ListpackLimits};
pub use store::{Session, Store};

/// The `redis` crate this one is built on, for connections.
pub use redis;
