//! Locks: the talk's lease (`SET NX PX`, released by a compare-and-delete
//! script) against [`sessionpack::lock::Lock`] (the same, plus a fencing token
//! from a counter beside the lock): bytes per held lock, bytes each lock
//! name leaves behind, and acquire-release cycles per second with the
//! server's CPU per cycle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::info::{MemorySample, server_cpu_secs, settled_sample};
use sessionpack::conn::ConnectOptions;
use sessionpack::error::{Error, Result};
use sessionpack::lock::{self, Lock};

/// What one kind of lock measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockRun {
    /// `lease (the talk's)` or `fenced`.
    pub kind: String,
    /// Locks held at once for the memory sample.
    pub locks: u64,
    /// `used_memory` delta per held lock.
    pub bytes_per_lock: f64,
    /// `used_memory` delta per lock name once every lock is released (the
    /// fence counters stay, so a fence never goes back).
    pub bytes_left_per_name: f64,
    /// Acquire-release cycles in the rate phase.
    pub cycles: u64,
    /// Cycles per second by the callers.
    pub cycles_per_sec: f64,
    /// Server CPU per cycle, µs (`INFO cpu` delta / cycles).
    pub server_cpu_us_per_cycle: f64,
}

/// Held this long: no lock expires during a run.
const TTL: Duration = Duration::from_secs(3600);
/// Locks taken or released at once while loading.
const BATCH: usize = 1000;

/// Holds `locks` locks of one kind in an emptied server, releases them,
/// then runs `cycles` acquire-release cycles on random names with
/// `clients` callers.
pub async fn run(
    url: &str,
    options: &ConnectOptions,
    fenced: bool,
    locks: u64,
    cycles: u64,
    clients: usize,
) -> Result<LockRun> {
    let mut conn = sessionpack::connect_with(url, options).await?;
    let empty = settled_sample(&mut conn).await?;
    let names: Vec<String> = (0..locks).map(|i| format!("job-{i}")).collect();
    let mut held = Vec::with_capacity(names.len());
    for chunk in names.chunks(BATCH) {
        let calls: Vec<_> = chunk
            .iter()
            .map(|name| {
                let conn = conn.clone();
                let name = name.clone();
                tokio::spawn(async move { Held::take(&conn, &name, fenced).await })
            })
            .collect();
        for call in calls {
            let taken = call.await.map_err(|e| Error::Config(e.to_string()))??;
            held.push(taken.ok_or_else(|| Error::Config("a free lock was taken".into()))?);
        }
    }
    let full = settled_sample(&mut conn).await?;
    for held in held {
        if !held.release().await? {
            return Err(Error::Config("a held lock was lost".into()));
        }
    }
    let left = settled_sample(&mut conn).await?;
    let names = Arc::new(names);
    let per_client = cycles / clients.max(1) as u64;
    let cpu_before = server_cpu_secs(&mut conn).await?;
    let started = Instant::now();
    let workers: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let conn = conn.clone();
            let names = names.clone();
            tokio::spawn(async move {
                for _ in 0..per_client {
                    let name = &names[rand::rng().random_range(0..names.len())];
                    // Another caller may hold this name: a refused try is
                    // a cycle too (one call), as it is for the talk's.
                    if let Some(held) = Held::take(&conn, name, fenced).await? {
                        held.release().await?;
                    }
                }
                Ok::<(), Error>(())
            })
        })
        .collect();
    for w in workers {
        w.await.map_err(|e| Error::Config(e.to_string()))??;
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(&mut conn).await? - cpu_before;
    let n = (per_client * clients.max(1) as u64).max(1) as f64;
    let per = |after: &MemorySample, before: &MemorySample| {
        after.used_memory.saturating_sub(before.used_memory) as f64 / locks.max(1) as f64
    };
    Ok(LockRun {
        kind: if fenced {
            "fenced"
        } else {
            "lease (the talk's)"
        }
        .into(),
        locks,
        bytes_per_lock: per(&full, &empty),
        bytes_left_per_name: per(&left, &empty),
        cycles: n as u64,
        cycles_per_sec: n / took.max(1e-9),
        server_cpu_us_per_cycle: cpu * 1e6 / n,
    })
}

/// A held lock of either kind.
enum Held {
    Lease(lock::Lease<redis::aio::ConnectionManager>),
    Fenced(lock::Guard<redis::aio::ConnectionManager>),
}

impl Held {
    async fn take(
        conn: &redis::aio::ConnectionManager,
        name: &str,
        fenced: bool,
    ) -> Result<Option<Self>> {
        Ok(if fenced {
            Lock::new(conn.clone(), name)?
                .try_acquire(TTL)
                .await?
                .map(Held::Fenced)
        } else {
            lock::try_acquire(conn, &format!("lock:{name}"), TTL)
                .await?
                .map(Held::Lease)
        })
    }

    async fn release(self) -> Result<bool> {
        match self {
            Held::Lease(l) => l.release().await,
            Held::Fenced(g) => g.release().await,
        }
    }
}
