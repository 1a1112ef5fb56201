//! An estimate of the Redis server's clock, taken from its own `TIME`
//! replies, so reads can decide expiry without asking for the time each
//! call.
//!
//! Every expiry decision is still the server's clock: the estimate is the
//! server time last read plus the local monotonic time since, and is used
//! only when an expiry is more than [`MARGIN`] away from it. Closer calls
//! (a session in its last second) ask the server. The estimate is
//! refreshed once it is [`MAX_AGE`] old.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How far an expiry must be from the estimate for the estimate to decide.
/// It covers the round trip of the `TIME` that set the estimate and any
/// drift since: both far below a second.
pub const MARGIN: f64 = 1.0;
/// Age after which the estimate is refreshed.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// What an estimate says of an expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Surely still live.
    Live,
    /// Surely expired.
    Expired,
    /// Too close to call, or no fresh estimate: ask the server.
    Ask,
}

/// The last server time seen, and when (locally) it was seen.
#[derive(Debug, Default)]
pub struct ServerClock {
    seen: Mutex<Option<(f64, Instant)>>,
}

impl Clone for ServerClock {
    fn clone(&self) -> Self {
        Self {
            seen: Mutex::new(*self.seen.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }
}

impl ServerClock {
    /// Records a `TIME` reply (seconds, microseconds).
    pub fn record(&self, secs: u64, micros: u64) {
        let server = secs as f64 + micros as f64 / 1e6;
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some((server, Instant::now()));
    }

    /// The estimated server time, if the last reading is fresh.
    pub fn now(&self) -> Option<f64> {
        let seen = *self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.and_then(|(server, at)| {
            let age = at.elapsed();
            (age < MAX_AGE).then_some(server + age.as_secs_f64())
        })
    }

    /// Whether a session expiring at `expires_at` (live while now <
    /// expires_at) is live, by the estimate.
    pub fn judge(&self, expires_at: u64) -> Verdict {
        match self.now() {
            Some(now) if expires_at as f64 > now + MARGIN => Verdict::Live,
            Some(now) if (expires_at as f64) <= now - MARGIN => Verdict::Expired,
            _ => Verdict::Ask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_only_far_from_the_margin() {
        let clock = ServerClock::default();
        assert_eq!(clock.judge(u64::MAX), Verdict::Ask, "no reading yet");
        clock.record(1_000, 500_000);
        assert_eq!(clock.judge(1_002), Verdict::Live);
        assert_eq!(clock.judge(1_001), Verdict::Ask);
        assert_eq!(clock.judge(1_000), Verdict::Ask);
        assert_eq!(clock.judge(999), Verdict::Expired);
    }
}
