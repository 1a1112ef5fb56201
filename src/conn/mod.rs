//! Connections: to one server ([`connect`]), to a Redis Cluster
//! ([`cluster`], feature `cluster`), either one chosen at run time
//! ([`Endpoint`]), over TLS with `rediss://` URLs ([`tls`], feature
//! `tls`), and a wrapper that waits for replicas after each write
//! ([`wait`]). Every store is generic over the connection, so any of them
//! fits.
//!
//! Within this floor, [`standalone`](connect) and [`wait`] stand alone,
//! [`cluster`] builds on both, and [`Endpoint`] on all three.

#[cfg(feature = "cluster")]
pub mod cluster;
mod endpoint;
mod standalone;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wait;

pub use endpoint::{AnyConnection, Endpoint};
pub use standalone::{
    ConnectOptions, Connection, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_RETRIES,
    connect, connect_with,
};
#[cfg(feature = "tls")]
pub use tls::TlsConfig;
