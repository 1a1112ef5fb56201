//! Lifetimes: the bounds every expiry is checked against, for sessions,
//! tokens, locks and rate limits alike, and the [`Deadline`] a new session
//! is given.

use crate::error::{Error, Result};

/// Longest lifetime a session may be given: 20 years. Longer ones are an
/// [`Error::InvalidTtl`], never a session that outlives the store.
pub const MAX_TTL_SECS: u64 = 20 * 365 * 24 * 3600;
/// Latest absolute expiry accepted (2106-02-07, the last second that fits
/// in 32 bits, so every expiry is a small listpack integer).
pub const MAX_EXPIRES_AT: u64 = u32::MAX as u64;

/// Checks a lifetime in seconds: 1..=[`MAX_TTL_SECS`].
pub fn check_ttl(secs: u64) -> Result<u64> {
    if (1..=MAX_TTL_SECS).contains(&secs) {
        Ok(secs)
    } else {
        Err(Error::InvalidTtl {
            detail: format!("{secs} s; a session lives 1 to {MAX_TTL_SECS} s"),
        })
    }
}

/// When a new session expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// This many seconds after now, by the server's clock.
    In(u64),
    /// At this unix time in seconds.
    At(u64),
}

impl Deadline {
    /// Checks the expiry is one a layout may write: a lifetime within
    /// [`check_ttl`], or an absolute time no later than [`MAX_EXPIRES_AT`]
    /// (one in the past is answered with [`crate::session::layout::Inserted::AlreadyExpired`]).
    pub fn check(self) -> Result<Self> {
        match self {
            Self::In(secs) => check_ttl(secs).map(Self::In),
            Self::At(at) if at <= MAX_EXPIRES_AT => Ok(self),
            Self::At(at) => Err(Error::InvalidTtl {
                detail: format!("expiry at unix time {at} is past {MAX_EXPIRES_AT}"),
            }),
        }
    }
}
