//! The packed limiter: GCRA, one integer per client in shared buckets.

use super::{Decision, Limit, check_client};
use crate::error::{Error, Result};
use crate::scripts::{RATELIMIT_GCRA, RATELIMIT_SWEEP};

/// GCRA limits packed in `2^bits` listpack HASH buckets, each under a hash
/// tag of its own (`rl:{g3fa}`), a client's field holding when its next
/// request is due (microseconds, one listpack integer). A client whose due
/// time has passed has no state worth keeping: [`Gcra::sweep`] removes it.
#[derive(Clone, Debug)]
pub struct Gcra<C> {
    conn: C,
    prefix: String,
    bits: u8,
    limit: Limit,
}

impl<C> Gcra<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// A limiter of `limit` in `2^bits` buckets (1..=24; about one per 100
    /// to 400 active clients) with keys under `prefix`.
    pub fn new(conn: C, prefix: &str, bits: u8, limit: Limit) -> Result<Self> {
        if !(1..=24).contains(&bits) {
            return Err(Error::Config(format!(
                "rate-limit bucket bits {bits} outside 1..=24"
            )));
        }
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            bits,
            limit,
        })
    }

    /// The bucket key `client` lives in.
    pub fn bucket_key(&self, client: &str) -> String {
        let h = crate::place::place_hash(client.as_bytes());
        self.key((h >> (64 - u32::from(self.bits))) as u32)
    }

    fn key(&self, bucket: u32) -> String {
        let digits = usize::from(self.bits.div_ceil(4));
        format!("{}:{{g{bucket:0digits$x}}}", self.prefix)
    }

    /// Decides one request of `client`.
    pub async fn check(&self, client: &str) -> Result<Decision> {
        check_client(client)?;
        let key = self.bucket_key(client);
        let window_us = self.limit.window().as_micros() as u64;
        let interval = window_us / u64::from(self.limit.requests());
        let reply: (i64, i64, i64) = RATELIMIT_GCRA
            .key(&key)
            .arg(client)
            .arg(interval)
            .arg(window_us - interval)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        Ok(Decision::from_reply(reply))
    }

    /// Removes every client whose state has lapsed, a bucket a script
    /// (buckets are in different cluster slots); the number removed.
    pub async fn sweep(&self) -> Result<u64> {
        let mut removed = 0;
        for b in 0..1u32 << self.bits {
            let key = self.key(b);
            let n: u64 = RATELIMIT_SWEEP
                .key(&key)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| Error::from_redis(e, || key.clone()))?;
            removed += n;
        }
        Ok(removed)
    }
}

impl<C> Gcra<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Sweeps every `every` in a task of its own, so clients that never
    /// come back do not stay; the task stops when the returned handle is
    /// dropped. A failed sweep is logged and tried again next time.
    pub fn spawn_sweeper(&self, every: std::time::Duration) -> GcraSweeper {
        let limiter = self.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = limiter.sweep().await {
                    tracing::warn!(error = %e, prefix = limiter.prefix, "rate-limit sweep failed");
                }
            }
        });
        GcraSweeper { task }
    }
}

/// The task of [`Gcra::spawn_sweeper`]; dropping it stops the task.
#[derive(Debug)]
pub struct GcraSweeper {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GcraSweeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
