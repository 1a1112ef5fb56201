//! A lease lock in one Redis key, as the talk builds it: `SET key token NX
//! PX ttl` to take it, and a compare-and-delete script to give it back, so
//! a holder whose lease ran out can never release someone else's. [`Lock`]
//! is the public, named form with fencing tokens, waiting and a guard;
//! [`try_acquire`] and [`try_claim`] the bare leases the sweeper uses.
//!
//! A holder that keeps one token ([`holder_token`]) across calls can also
//! [`try_claim`]: take the lock, or renew it if it is already its own.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::scripts::{LOCK_CLAIM, LOCK_EXTEND, LOCK_FENCED, LOCK_RELEASE};

/// The longest lock name, in bytes: a name is part of two keys, one of
/// which (the fence counter) is kept for good.
pub const MAX_NAME_BYTES: usize = 256;

/// A lease's length in milliseconds: 1 ms to
/// [`crate::ttl::MAX_TTL_SECS`]; anything else is
/// [`Error::InvalidTtl`] (a zero lease would be no lock at all, and Redis
/// refuses one past its own range).
pub fn lease_ms(ttl: Duration) -> Result<u64> {
    let ms = ttl.as_millis();
    let max = u128::from(crate::ttl::MAX_TTL_SECS) * 1000;
    if (1..=max).contains(&ms) {
        Ok(ms as u64)
    } else {
        Err(Error::InvalidTtl {
            detail: format!(
                "a lease of {ttl:?}; a lease lasts 1 ms to {} s",
                crate::ttl::MAX_TTL_SECS
            ),
        })
    }
}

/// A fresh random holder token (160 bits, hex).
pub fn holder_token() -> Result<String> {
    use rand::TryRngCore as _;
    let mut bytes = [0u8; 20];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Error::Rng(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Takes the lock at `key` for `ttl` as the holder of `token`, or renews it
/// if that holder has it already; `None` if another holds it. One script
/// call.
pub async fn try_claim<C>(
    conn: &C,
    key: &str,
    token: &str,
    ttl: Duration,
) -> Result<Option<Lease<C>>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let ms = lease_ms(ttl)?;
    let ours: i64 = LOCK_CLAIM
        .key(key)
        .arg(token)
        .arg(ms)
        .invoke_async(&mut conn.clone())
        .await
        .map_err(|e| Error::from_redis(e, || key.to_owned()))?;
    Ok((ours == 1).then(|| Lease {
        conn: conn.clone(),
        key: key.to_owned(),
        token: token.to_owned(),
    }))
}

/// A held lock. Dropping it does not release it (that needs a round trip):
/// call [`Lease::release`], or let it expire.
#[derive(Debug)]
pub struct Lease<C> {
    conn: C,
    key: String,
    token: String,
}

/// Tries to take the lock at `key` for `ttl`; `None` if someone holds it.
pub async fn try_acquire<C>(conn: &C, key: &str, ttl: Duration) -> Result<Option<Lease<C>>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let token = holder_token()?;
    let ms = lease_ms(ttl)?;
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(ms)
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| Error::from_redis(e, || key.to_owned()))?;
    Ok(taken.map(|_| Lease {
        conn: conn.clone(),
        key: key.to_owned(),
        token,
    }))
}

impl<C> Lease<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Extends the lease to `ttl` from now; `false` if it was already lost.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        let ms = lease_ms(ttl)?;
        let done: i64 = LOCK_EXTEND
            .key(&self.key)
            .arg(&self.token)
            .arg(ms)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || self.key.clone()))?;
        Ok(done == 1)
    }

    /// Gives the lock back if it is still ours; `false` if it had expired
    /// or passed to another holder (whose lock is left alone).
    pub async fn release(self) -> Result<bool> {
        let done: i64 = LOCK_RELEASE
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || self.key.clone()))?;
        Ok(done == 1)
    }
}

/// How [`Lock::acquire`] waits for a lock held by another: tries again
/// after `interval` (doubling up to `max_interval`, with random jitter so
/// waiters spread out) until `wait` has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// The longest time to wait in all.
    pub wait: Duration,
    /// The first pause between tries.
    pub interval: Duration,
    /// The longest pause between tries.
    pub max_interval: Duration,
}

impl Default for Retry {
    /// Up to 10 s, pauses from 10 ms to 500 ms.
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(10),
            interval: Duration::from_millis(10),
            max_interval: Duration::from_millis(500),
        }
    }
}

impl Retry {
    /// Waits up to `wait` with the default pauses.
    pub fn for_up_to(wait: Duration) -> Self {
        Self {
            wait,
            ..Self::default()
        }
    }
}

/// A named lock with fencing tokens, the talk's `SET NX PX` with a random
/// value and a compare-and-delete release, on one Redis server.
///
/// Each acquisition gets a fencing token, a number larger than any earlier
/// acquisition of the same lock got. A holder that stalls past its lease
/// (a long GC pause, a stopped VM) may still believe it holds the lock
/// when another has taken it; a resource that remembers the largest token
/// it has seen and refuses smaller ones turns that into a refused write
/// instead of a lost update.
///
/// What it guarantees: while the server keeps its data, at most one holder
/// at a time whose lease has not run out; only the holder can extend or
/// release (a stale holder's release or extend changes nothing and says
/// so). What it does not: a holder is not told when its lease runs out
/// (extend before it does, and check the answer); with replicas, a
/// failover after an acquisition that had not reached the replica loses
/// the lock (two holders at once) and may hand out a fencing token again,
/// since Redis replicates asynchronously; `WAIT` after acquiring
/// ([`crate::conn::wait::WaitForReplicas`]) narrows that window but does not
/// close it. A restart without persistence forgets locks and counters
/// alike. Where correctness must survive failures, fence the resource.
///
/// Keys: `lock:{<name>}` holds the holder's random token with the lease as
/// its expiry; `lock:{<name>}:fence` holds the counter, with no expiry (a
/// few dozen bytes per lock name, kept so tokens never go back).
#[derive(Clone, Debug)]
pub struct Lock<C> {
    conn: C,
    key: String,
    fence_key: String,
}

impl<C> Lock<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The lock called `name`: 1 to [`MAX_NAME_BYTES`] bytes of any text
    /// without `{` or `}` (which would split its keys' hash tag); anything
    /// else is [`Error::InvalidLockName`].
    pub fn new(conn: C, name: &str) -> Result<Self> {
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_NAME_BYTES {
            Some("longer than 256 bytes")
        } else if name.contains(['{', '}']) {
            Some("contains a brace")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidLockName {
                len: name.len(),
                reason,
            });
        }
        Ok(Self {
            conn,
            key: format!("lock:{{{name}}}"),
            fence_key: format!("lock:{{{name}}}:fence"),
        })
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Takes the lock for `ttl` if it is free; `None` if another holds it.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard<C>>> {
        let token = holder_token()?;
        let ms = lease_ms(ttl)?;
        let fence: u64 = LOCK_FENCED
            .key(&self.key)
            .key(&self.fence_key)
            .arg(&token)
            .arg(ms)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || self.key.clone()))?;
        Ok((fence > 0).then(|| Guard {
            lease: Some(Lease {
                conn: self.conn.clone(),
                key: self.key.clone(),
                token,
            }),
            fence,
        }))
    }

    /// Takes the lock for `ttl`, waiting as `retry` says while another
    /// holds it; [`Error::LockTimeout`] when the wait is over.
    pub async fn acquire(&self, ttl: Duration, retry: Retry) -> Result<Guard<C>> {
        use rand::Rng;
        let started = std::time::Instant::now();
        let mut pause = retry.interval.max(Duration::from_millis(1));
        loop {
            if let Some(guard) = self.try_acquire(ttl).await? {
                return Ok(guard);
            }
            let waited = started.elapsed();
            if waited >= retry.wait {
                return Err(Error::LockTimeout {
                    key: self.key.clone(),
                    waited,
                });
            }
            let jittered = pause.mul_f64(rand::rng().random_range(0.5..1.0));
            tokio::time::sleep(jittered.min(retry.wait - waited)).await;
            pause = (pause * 2).min(retry.max_interval.max(pause));
        }
    }
}

/// A held [`Lock`]. Release it with [`Guard::release`], which says whether
/// it was still held; a guard dropped unreleased gives the lock back in a
/// background task on the Tokio runtime it is dropped in (safe: the
/// release only deletes the lock while it holds this guard's token), or,
/// outside a runtime, leaves it to expire.
#[derive(Debug)]
pub struct Guard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    lease: Option<Lease<C>>,
    fence: u64,
}

impl<C> Guard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// This acquisition's fencing token: larger than any earlier
    /// acquisition's of the same lock.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Extends the lease to `ttl` from now; `false` if it was already lost
    /// (expired, or taken by another): stop working on the resource.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        match &self.lease {
            Some(lease) => lease.extend(ttl).await,
            None => Ok(false),
        }
    }

    /// Gives the lock back; `false` if it had already been lost.
    pub async fn release(mut self) -> Result<bool> {
        match self.lease.take() {
            Some(lease) => lease.release().await,
            None => Ok(false),
        }
    }
}

impl<C> Drop for Guard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let (Some(lease), Ok(runtime)) =
            (self.lease.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                let key = lease.key().to_owned();
                if let Err(e) = lease.release().await {
                    tracing::warn!(
                        key,
                        error = %e,
                        "releasing a dropped lock guard failed; the lock expires with its lease"
                    );
                }
            });
        }
    }
}
