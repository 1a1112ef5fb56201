//! What the harness reads from a server: its identity and memory figures.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use sessionpack::error::Result;
use sessionpack::limits::ListpackLimits;

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

/// `used_memory` less every client's memory (`CLIENT LIST`'s `tot-mem`:
/// the client itself, its query and output buffers), read in one
/// `MULTI` so both are of the same moment. `INFO`'s `mem_clients_normal`
/// is updated by the server's cron and can lag by a few hundred KB of
/// query buffers, more than a small run's sessions.
pub async fn bytes_less_clients<C>(conn: &mut C) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Send,
{
    let (memory, clients): (String, String) = redis::pipe()
        .atomic()
        .cmd("INFO")
        .arg("memory")
        .cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await?;
    let used = memory
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(used.saturating_sub(clients_memory(&clients)))
}

/// The sum of `tot-mem` over the clients a `CLIENT LIST` reply lists.
fn clients_memory(list: &str) -> u64 {
    list.lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("tot-mem="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// Keys Redis has expired since it started (`INFO stats` `expired_keys`):
/// those its active expiry removed and those a read found expired.
pub async fn expired_keys<C>(conn: &mut C) -> Result<u64>
where
    C: redis::aio::ConnectionLike + Send,
{
    let stats = info(conn, "stats").await?;
    Ok(stats
        .get("expired_keys")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// CPU time the server has used, user and system, in seconds (`INFO cpu`):
/// the difference across a piece of work is what that work cost the server.
pub async fn server_cpu_secs<C>(conn: &mut C) -> Result<f64>
where
    C: redis::aio::ConnectionLike + Send,
{
    let cpu = info(conn, "cpu").await?;
    let secs = |k: &str| {
        cpu.get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(secs("used_cpu_user") + secs("used_cpu_sys"))
}

/// Calls and time per command (`INFO commandstats`). A command a script
/// sends is counted both on its own and in the script's time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandStats(pub HashMap<String, (u64, u64)>);

impl CommandStats {
    /// Reads it.
    pub async fn read<C>(conn: &mut C) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        Ok(Self::parse(
            &redis::cmd("INFO")
                .arg("commandstats")
                .query_async::<String>(conn)
                .await?,
        ))
    }

    /// Parses the section's text: `cmdstat_<name>:calls=N,usec=N,...`.
    pub fn parse(text: &str) -> Self {
        let stats = text
            .lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |key: &str| {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.parse::<u64>().ok())
                };
                Some((name.to_owned(), (field("calls")?, field("usec")?)))
            })
            .collect();
        Self(stats)
    }

    /// What was counted since `before`, leaving out the harness's own
    /// `info` calls: (command, calls, µs), most calls first.
    pub fn since(&self, before: &Self) -> Vec<(String, u64, u64)> {
        let mut out: Vec<_> = self
            .0
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .filter_map(|(name, &(calls, usec))| {
                let (c0, u0) = before.0.get(name).copied().unwrap_or_default();
                let calls = calls.checked_sub(c0)?;
                (calls > 0).then(|| (name.clone(), calls, usec.saturating_sub(u0)))
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

/// The server a run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `redis_version` (Valkey reports the Redis version it is compatible
    /// with here).
    pub redis_version: String,
    /// `valkey_version`, on Valkey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valkey_version: Option<String>,
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
    /// The server's name and version, e.g. `Redis 7.0.15` or `Valkey 8.0.1`.
    pub fn name(&self) -> String {
        match &self.valkey_version {
            Some(v) => format!("Valkey {v}"),
            None => format!("Redis {}", self.redis_version),
        }
    }

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
            valkey_version: server.get("valkey_version").cloned(),
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
    /// `mem_replication_backlog`: a primary's replication backlog, which
    /// grows with writes up to `repl-backlog-size` (1 MiB by default)
    /// whatever they are: the server's, not the sessions'.
    #[serde(default)]
    pub mem_replication_backlog: u64,
    /// `mem_clients_slaves`: output buffers of the replicas' links.
    #[serde(default)]
    pub mem_clients_slaves: u64,
    /// Keys in the database.
    pub keys: u64,
}

impl MemorySample {
    /// What replication holds beyond the data: the backlog and the
    /// replicas' output buffers.
    pub fn replication(&self) -> u64 {
        self.mem_replication_backlog + self.mem_clients_slaves
    }

    /// Several servers' figures as one: sizes and keys added, the ratios
    /// recomputed over the sums (the allocator's weighted by memory).
    pub fn sum(samples: &[Self]) -> Self {
        let used: u64 = samples.iter().map(|s| s.used_memory).sum();
        let rss: u64 = samples.iter().map(|s| s.used_memory_rss).sum();
        let weighted: f64 = samples
            .iter()
            .map(|s| s.allocator_frag_ratio * s.used_memory as f64)
            .sum();
        Self {
            used_memory: used,
            used_memory_rss: rss,
            mem_fragmentation_ratio: rss as f64 / used.max(1) as f64,
            allocator_frag_ratio: weighted / used.max(1) as f64,
            mem_clients_normal: samples.iter().map(|s| s.mem_clients_normal).sum(),
            mem_replication_backlog: samples.iter().map(|s| s.mem_replication_backlog).sum(),
            mem_clients_slaves: samples.iter().map(|s| s.mem_clients_slaves).sum(),
            keys: samples.iter().map(|s| s.keys).sum(),
        }
    }

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
            mem_replication_backlog: num("mem_replication_backlog") as u64,
            mem_clients_slaves: num("mem_clients_slaves") as u64,
            keys,
        })
    }
}

/// Whether the key dicts are being rehashed, from `MEMORY STATS`.
///
/// Redis 7.4 and Valkey 8 keep a dict per slot and report the number being
/// rehashed (`db.dict.rehashing.count`). Redis 7.0 reports each of db 0's
/// dicts' overhead as entries x 24 bytes (+ 16 per key for the main dict's
/// objects) + slots x 8; a dict being rehashed holds two tables, so its slot
/// count is not a power of two. `None` where neither is reported.
async fn rehashing<C>(conn: &mut C) -> Result<Option<bool>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let stats: redis::Value = redis::cmd("MEMORY").arg("STATS").query_async(conn).await?;
    if let Some(count) = lookup(&stats, "db.dict.rehashing.count") {
        let count: u64 = redis::from_redis_value_ref(count).unwrap_or(0);
        return Ok(Some(count > 0));
    }
    Ok(dict_slots(conn, &stats).await?.map(|(main, expires)| {
        let single = |slots: u64| slots == 0 || slots.is_power_of_two();
        !(single(main) && single(expires))
    }))
}

/// Slots in db 0's main and expires dicts, from Redis 7.0's `MEMORY STATS`.
async fn dict_slots<C>(conn: &mut C, stats: &redis::Value) -> Result<Option<(u64, u64)>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let keyspace = info(conn, "keyspace").await?;
    let (mut keys, mut expires) = (0u64, 0u64);
    if let Some(db0) = keyspace.get("db0") {
        for part in db0.split(',') {
            match part.split_once('=') {
                Some(("keys", v)) => keys = v.parse().unwrap_or(0),
                Some(("expires", v)) => expires = v.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let Some(db0) = lookup(stats, "db.0") else {
        return Ok(None);
    };
    let num =
        |name: &str| lookup(db0, name).and_then(|v| redis::from_redis_value_ref::<u64>(v).ok());
    let (Some(main), Some(exp)) = (
        num("overhead.hashtable.main"),
        num("overhead.hashtable.expires"),
    ) else {
        return Ok(None);
    };
    Ok(Some((
        main.saturating_sub(keys * 40) / 8,
        exp.saturating_sub(expires * 24) / 8,
    )))
}

/// A value in a flat `[name, value, ...]` reply (or a map).
fn lookup<'a>(value: &'a redis::Value, name: &str) -> Option<&'a redis::Value> {
    let is = |k: &redis::Value| redis::from_redis_value_ref::<String>(k).is_ok_and(|k| k == name);
    match value {
        redis::Value::Array(items) => items
            .chunks(2)
            .find(|kv| is(&kv[0]))
            .and_then(|kv| kv.get(1)),
        redis::Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        _ => None,
    }
}

/// Waits, up to `max`, until neither of db 0's dicts is being rehashed
/// (during a rehash a dict holds two tables, and its slot count is not a
/// power of two), so a sample shows the steady state. Redis finishes a
/// rehash in its cron while idle. Returns whether it settled.
pub async fn wait_for_rehash<C>(conn: &mut C, max: std::time::Duration) -> Result<bool>
where
    C: redis::aio::ConnectionLike + Send,
{
    let started = std::time::Instant::now();
    loop {
        if rehashing(conn).await? != Some(true) {
            return Ok(true);
        }
        if started.elapsed() > max {
            return Ok(false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A memory sample taken once db 0's dicts have finished rehashing (up
/// to two minutes), for the benches that load one layout per server.
pub async fn settled_sample<C>(conn: &mut C) -> Result<MemorySample>
where
    C: redis::aio::ConnectionLike + Send,
{
    wait_for_rehash(conn, std::time::Duration::from_secs(120)).await?;
    MemorySample::read(conn).await
}

#[cfg(test)]
mod tests {
    use super::CommandStats;

    #[test]
    fn reads_calls_and_time_and_takes_differences() {
        let before = CommandStats::parse(
            "# Commandstats\r\ncmdstat_get:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=3,usec=90,usec_per_call=30.00\r\n",
        );
        let after = CommandStats::parse(
            "# Commandstats\r\ncmdstat_get:calls=15,usec=31,usec_per_call=2.07\r\ncmdstat_hset:calls=4,usec=8,usec_per_call=2.00\r\ncmdstat_info:calls=5,usec=150,usec_per_call=30.00\r\ncmdstat_broken:calls=x\r\n",
        );
        assert_eq!(after.0.len(), 3, "the malformed line is skipped");
        assert_eq!(
            after.since(&before),
            vec![("get".to_owned(), 5, 11), ("hset".to_owned(), 4, 8)]
        );
    }
}
