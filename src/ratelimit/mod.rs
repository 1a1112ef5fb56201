//! Rate limits: how many requests a client may make per window, with the
//! `Retry-After` a refusal should carry.
//!
//! Two limiters, one answer type:
//!
//! - [`SlidingLog`], the talk's: an exact log of each client's requests in
//!   a ZSET, and a second ZSET that hands out retry slots. Exact (never
//!   more than the limit in any window of the server's clock), and its
//!   caveats fixed (see `ratelimit_log.lua`), but two keys per client, and
//!   a log entry per request.
//! - [`Gcra`], packed: the generic cell rate algorithm, one integer of
//!   state per client (when its next request is due), in listpack buckets
//!   shared by many clients. A client may spend a whole window's requests
//!   at once and then one every `window / limit`; so in any one window it
//!   may be admitted up to `2 * limit - 1` requests (a burst, then the
//!   steady rate), where the log admits `limit`. `sessionpack bench
//!   ratelimit` measures both against an exact count.
//!
//! Both read the server's clock, so every process agrees, and each
//! decision is one script on one client's keys (one hash tag).

use std::time::Duration;

use crate::error::{Error, Result};

mod gcra;
mod log;

pub use gcra::{Gcra, GcraSweeper};
pub use log::SlidingLog;

/// The longest client id, in bytes: a field in a listpack bucket must stay
/// within `hash-max-listpack-value` (64 by default).
pub const MAX_CLIENT_BYTES: usize = 64;

/// Requests allowed per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    requests: u32,
    window: Duration,
}

impl Limit {
    /// `requests` per `window`: at least one request, a window from 1 ms
    /// to a day.
    pub fn new(requests: u32, window: Duration) -> Result<Self> {
        if requests == 0
            || window < Duration::from_millis(1)
            || window > Duration::from_secs(86_400)
        {
            return Err(Error::Config(format!(
                "a rate limit is 1 or more requests per 1 ms to 1 day, not {requests} per {window:?}"
            )));
        }
        Ok(Self { requests, window })
    }

    /// Requests per window.
    pub fn requests(&self) -> u32 {
        self.requests
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn window_ms(&self) -> u64 {
        self.window.as_millis() as u64
    }
}

/// A limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go ahead.
    pub allowed: bool,
    /// For a refused one, how long the client should wait
    /// (`Retry-After`); zero when allowed.
    pub retry_after: Duration,
    /// The server's time of the decision, unix milliseconds.
    pub at_ms: u64,
}

impl Decision {
    /// `Retry-After` in whole seconds, rounded up (the HTTP header's unit).
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after;
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    }

    fn from_reply(reply: (i64, i64, i64)) -> Self {
        let (allowed, retry_ms, at_ms) = reply;
        Self {
            allowed: allowed == 1,
            retry_after: Duration::from_millis(retry_ms.max(0) as u64),
            at_ms: at_ms.max(0) as u64,
        }
    }
}

/// Checks a client id's length.
fn check_client(client: &str) -> Result<()> {
    if client.is_empty() || client.len() > MAX_CLIENT_BYTES || client.contains(['{', '}']) {
        return Err(Error::Config(format!(
            "a rate-limit client id is 1 to {MAX_CLIENT_BYTES} bytes without braces; this one is {} bytes",
            client.len()
        )));
    }
    Ok(())
}
