//! What the harness reads from a server: its identity and memory figures.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::limits::ListpackLimits;

/// Fields of `INFO` as a map.
pub async fn info<C>(conn: &mut C, section: &str) -> Result<HashMap<String, String>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

/// The server a run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `redis_version`.
    pub redis_version: String,
    /// `mem_allocator`, e.g. `jemalloc-5.3.0`.
    pub mem_allocator: String,
    /// `os`.
    pub os: String,
    /// `arch_bits`.
    pub arch_bits: String,
    /// The listpack limits in force.
    pub limits: ListpackLimits,
}

impl ServerInfo {
    /// Reads it.
    pub async fn read<C>(conn: &mut C) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let server = info(conn, "server").await?;
        let memory = info(conn, "memory").await?;
        let get = |m: &HashMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
        Ok(Self {
            redis_version: get(&server, "redis_version"),
            mem_allocator: get(&memory, "mem_allocator"),
            os: get(&server, "os"),
            arch_bits: get(&server, "arch_bits"),
            limits: ListpackLimits::read(conn).await?,
        })
    }
}

/// The memory figures of one moment.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct MemorySample {
    /// `used_memory`: bytes the allocator handed to Redis.
    pub used_memory: u64,
    /// `used_memory_rss`: resident set size of the process.
    pub used_memory_rss: u64,
    /// `mem_fragmentation_ratio`: RSS / used memory.
    pub mem_fragmentation_ratio: f64,
    /// `allocator_frag_ratio`: the allocator's own fragmentation.
    pub allocator_frag_ratio: f64,
    /// `mem_clients_normal`: client buffers (query buffers of pipelines
    /// included), a fixed cost that is not the sessions'.
    #[serde(default)]
    pub mem_clients_normal: u64,
    /// Keys in the database.
    pub keys: u64,
}

impl MemorySample {
    /// Reads it.
    pub async fn read<C>(conn: &mut C) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let m = info(conn, "memory").await?;
        let num = |k: &str| m.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await?;
        Ok(Self {
            used_memory: num("used_memory") as u64,
            used_memory_rss: num("used_memory_rss") as u64,
            mem_fragmentation_ratio: num("mem_fragmentation_ratio"),
            allocator_frag_ratio: num("allocator_frag_ratio"),
            mem_clients_normal: num("mem_clients_normal") as u64,
            keys,
        })
    }
}
