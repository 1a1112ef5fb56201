//! A reconnecting connection tuned for a request path.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::Result;

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one reply may take.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The [`ConnectionManagerConfig`] used by [`connect`]: a couple of quick
/// reconnection attempts, then an error.
///
/// The client's default retries for several seconds with exponential
/// back-off before failing a call; a web request waiting on its session is
/// better served by a prompt [`crate::Error::Unavailable`].
pub fn request_path_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// Opens a [`ConnectionManager`] to `url` with [`request_path_config`]. It
/// reconnects by itself after Redis restarts; calls made while Redis is
/// down fail fast with [`crate::Error::Unavailable`].
pub async fn connect(url: &str) -> Result<ConnectionManager> {
    let client = redis::Client::open(url)?;
    Ok(ConnectionManager::new_with_config(client, request_path_config()).await?)
}
