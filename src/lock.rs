//! A lease lock in one Redis key, as the talk builds it: `SET key token NX
//! PX ttl` to take it, and a compare-and-delete script to give it back, so
//! a holder whose lease ran out can never release someone else's.
//!
//! A holder that keeps one token ([`holder_token`]) across calls can also
//! [`try_claim`]: take the lock, or renew it if it is already its own.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::scripts::{LOCK_CLAIM, LOCK_EXTEND, LOCK_RELEASE};

/// A fresh random holder token (160 bits, hex).
pub fn holder_token() -> Result<String> {
    Ok(crate::id::SessionId::generate()?.to_hex())
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
    let ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
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
    let ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
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
        let ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
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
