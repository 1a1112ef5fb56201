//! An estimate of the Redis server's clock, taken from its own `TIME`
//! replies, so reads can decide expiry without asking for the time each
//! call.
//!
//! Every expiry decision is still the server's clock. A `TIME` reply was
//! produced somewhere between the moment its request was sent and the
//! moment its reply was taken in, so the server's time now lies between
//! the reply plus the local (monotonic) time since it was taken in, and the
//! reply plus the time since the request was sent. The estimate decides
//! only when an expiry is more than [`MARGIN`] outside that interval;
//! closer calls (a session in its last second) ask the server. A reading
//! whose request and reply lie more than [`MAX_SPREAD`] apart (a stalled
//! client, a paused VM) is too vague and is not used. The estimate is
//! refreshed once it is [`MAX_AGE`] old.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How far an expiry must be outside the interval of possible server
/// times for the estimate to decide. It covers clock drift between the
/// server and this host over [`MAX_AGE`], far below a second.
pub const MARGIN: f64 = 1.0;

/// This process's clock, unix seconds (0 before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
/// Age after which the estimate is refreshed.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Widest gap between sending a `TIME` and taking in its reply for the
/// reading to be used.
pub const MAX_SPREAD: Duration = Duration::from_millis(250);

/// The interval the server's time lies in now, from one `TIME` reply
/// (seconds, microseconds) to a request sent at `sent`: (earliest,
/// latest), however far apart request and reply were.
pub fn interval(secs: u64, micros: u64, sent: Instant) -> (f64, f64) {
    let server = secs as f64 + micros as f64 / 1e6;
    let now = Instant::now();
    (
        server,
        server + now.saturating_duration_since(sent).as_secs_f64(),
    )
}

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

/// One `TIME` reply and the local moments around it.
#[derive(Clone, Copy, Debug)]
struct Reading {
    server: f64,
    sent: Instant,
    received: Instant,
}

/// The last usable server time seen, and when (locally) it was asked for
/// and taken in.
#[derive(Debug, Default)]
pub struct ServerClock {
    seen: Mutex<Option<Reading>>,
}

impl Clone for ServerClock {
    fn clone(&self) -> Self {
        Self {
            seen: Mutex::new(*self.seen.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }
}

impl ServerClock {
    /// Records a `TIME` reply (seconds, microseconds) to a request sent at
    /// `sent`, taken in now. Returns whether the reading is used (it is
    /// not when request and reply lie more than [`MAX_SPREAD`] apart).
    pub fn record(&self, secs: u64, micros: u64, sent: Instant) -> bool {
        let received = Instant::now();
        if received.saturating_duration_since(sent) > MAX_SPREAD {
            return false;
        }
        let server = secs as f64 + micros as f64 / 1e6;
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(Reading {
            server,
            sent,
            received,
        });
        true
    }

    /// The interval the server's time lies in now, if the last reading is
    /// fresh: (earliest, latest).
    pub fn bounds(&self) -> Option<(f64, f64)> {
        let seen = *self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        seen.and_then(|r| {
            let since_sent = now.saturating_duration_since(r.sent);
            let since_received = now.saturating_duration_since(r.received);
            (since_sent < MAX_AGE).then_some((
                r.server + since_received.as_secs_f64(),
                r.server + since_sent.as_secs_f64(),
            ))
        })
    }

    /// Whether the last reading is fresh.
    pub fn is_fresh(&self) -> bool {
        self.bounds().is_some()
    }

    /// Whether a session expiring at `expires_at` (live while now <
    /// expires_at) is live, by the estimate.
    pub fn judge(&self, expires_at: u64) -> Verdict {
        let expires_at = expires_at as f64;
        match self.bounds() {
            Some((_, latest)) if expires_at > latest + MARGIN => Verdict::Live,
            Some((earliest, _)) if expires_at <= earliest - MARGIN => Verdict::Expired,
            _ => Verdict::Ask,
        }
    }
}

/// Sends `pipe` on `conn`, with a `TIME` appended when `clock` is stale
/// (after the reads, so it is never earlier than they are), and records
/// that reading. Returns the replies to `pipe`'s own commands.
pub(crate) async fn query_reads<C>(
    pipe: &mut redis::Pipeline,
    conn: &C,
    clock: &ServerClock,
) -> redis::RedisResult<Vec<redis::Value>>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let stale = !clock.is_fresh();
    if stale {
        pipe.cmd("TIME");
    }
    let sent = Instant::now();
    let mut replies: Vec<redis::Value> = pipe.query_async(&mut conn.clone()).await?;
    if stale {
        let (secs, micros): (u64, u64) =
            redis::from_redis_value(replies.pop().unwrap_or(redis::Value::Nil))?;
        clock.record(secs, micros, sent);
    }
    Ok(replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_only_far_from_the_margin() {
        let clock = ServerClock::default();
        assert_eq!(clock.judge(u64::MAX), Verdict::Ask, "no reading yet");
        assert!(clock.record(1_000, 500_000, Instant::now()));
        assert_eq!(clock.judge(1_002), Verdict::Live);
        assert_eq!(clock.judge(1_001), Verdict::Ask);
        assert_eq!(clock.judge(1_000), Verdict::Ask);
        assert_eq!(clock.judge(999), Verdict::Expired);
    }

    #[test]
    fn a_reading_taken_in_late_is_not_used() {
        let clock = ServerClock::default();
        // The reply was taken in 2 s after its request: the server's time
        // now may be anything up to 2 s past the reply.
        let sent = Instant::now() - Duration::from_secs(2);
        assert!(!clock.record(1_000, 0, sent));
        assert_eq!(clock.judge(1_002), Verdict::Ask);
        assert!(!clock.is_fresh());
    }

    #[test]
    fn a_late_reply_still_bounds_the_server_time() {
        let sent = Instant::now() - Duration::from_secs(2);
        let (earliest, latest) = interval(1_000, 250_000, sent);
        assert_eq!(earliest, 1_000.25);
        assert!((2.0..3.0).contains(&(latest - earliest)));
    }

    #[test]
    fn the_interval_widens_with_the_spread() {
        let clock = ServerClock::default();
        let sent = Instant::now() - Duration::from_millis(200);
        assert!(clock.record(1_000, 0, sent));
        let (earliest, latest) = clock.bounds().unwrap();
        assert!(latest - earliest >= 0.2 && latest - earliest < 0.3);
        assert!(earliest >= 1_000.0);
    }
}
