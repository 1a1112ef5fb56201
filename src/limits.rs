//! The server's listpack thresholds, which decide whether a bucket stays
//! compact.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Where a set of [`ListpackLimits`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitsSource {
    /// Read from the server with `CONFIG GET`.
    Server,
    /// Redis 7's defaults, because `CONFIG GET` was refused or incomplete.
    Defaults,
}

/// The entry-count and value-size limits under which Redis keeps a HASH or
/// ZSET in its compact listpack encoding.
///
/// Past either limit a key converts to a hashtable or skiplist, at several
/// times the memory, and never converts back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListpackLimits {
    /// `hash-max-listpack-entries`.
    pub hash_entries: u64,
    /// `hash-max-listpack-value`: the longest field or value, in bytes.
    pub hash_value: u64,
    /// `zset-max-listpack-entries`.
    pub zset_entries: u64,
    /// `zset-max-listpack-value`: the longest member, in bytes.
    pub zset_value: u64,
    /// Where these figures came from.
    pub source: LimitsSource,
}

impl ListpackLimits {
    /// Redis 7's defaults.
    pub const REDIS7_DEFAULTS: Self = Self {
        hash_entries: 512,
        hash_value: 64,
        zset_entries: 128,
        zset_value: 64,
        source: LimitsSource::Defaults,
    };

    /// Reads the limits from the server, falling back to Redis 7's defaults
    /// (with a warning) where `CONFIG` is disabled or a value is missing.
    /// Connection errors are returned, not papered over.
    pub async fn read<C>(conn: &mut C) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let mut found = HashMap::new();
        // Redis 7 names first; Redis 6.2 knows only the ziplist aliases.
        for pattern in ["*-max-listpack-*", "*-max-ziplist-*"] {
            let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(pattern)
                .query_async(conn)
                .await;
            match reply {
                Ok(map) => {
                    for (name, value) in map {
                        let name = name.replace("ziplist", "listpack");
                        if let Ok(value) = value.parse::<u64>() {
                            found.entry(name).or_insert(value);
                        }
                    }
                }
                Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(error = %e, "CONFIG GET refused; assuming Redis 7 listpack defaults");
                    return Ok(Self::REDIS7_DEFAULTS);
                }
            }
        }
        let get = |name: &str| found.get(name).copied();
        match (
            get("hash-max-listpack-entries"),
            get("hash-max-listpack-value"),
            get("zset-max-listpack-entries"),
            get("zset-max-listpack-value"),
        ) {
            (Some(hash_entries), Some(hash_value), Some(zset_entries), Some(zset_value)) => {
                Ok(Self {
                    hash_entries,
                    hash_value,
                    zset_entries,
                    zset_value,
                    source: LimitsSource::Server,
                })
            }
            _ => {
                tracing::warn!(
                    "server did not report its listpack limits; assuming Redis 7 defaults"
                );
                Ok(Self::REDIS7_DEFAULTS)
            }
        }
    }

    /// The fewest entries at which one bucket (HASH + ZSET) converts.
    pub fn bucket_entries(&self) -> u64 {
        self.hash_entries.min(self.zset_entries)
    }
}

/// The server's `maxmemory-policy`, or `None` where `CONFIG` is refused.
/// Connection errors are returned.
pub async fn eviction_policy<C>(conn: &mut C) -> Result<Option<String>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply {
        Ok(map) => Ok(map.get("maxmemory-policy").cloned()),
        Err(e) if e.is_io_error() || e.is_connection_dropped() => Err(e.into()),
        Err(_) => Ok(None),
    }
}

/// Whether an eviction policy may evict keys that have no expiry, such as
/// a bucket's HASH or ZSET: the `allkeys-*` policies. They evict one key of
/// a bucket and keep the other; `noeviction` and the `volatile-*` policies
/// keep buckets whole.
pub fn evicts_persistent_keys(policy: &str) -> bool {
    policy.starts_with("allkeys-")
}

/// Refuses a user index on a server whose eviction policy may evict keys
/// without expiry: an evicted index bucket would leave its users' sessions
/// live but out of every revocation's reach. The store cannot repair that
/// (no index names them), so it refuses: at open, and at each revocation,
/// as the policy can be changed at run time. `None` (`CONFIG` refused) is
/// let through with a warning: the policy cannot be told.
pub fn check_user_index_policy(policy: Option<&str>) -> crate::Result<()> {
    match policy {
        Some(policy) if evicts_persistent_keys(policy) => Err(crate::Error::Config(format!(
            "maxmemory-policy {policy} may evict the user index, leaving sessions that no \
             revocation can find: a store with a user index needs noeviction or a volatile-* \
             policy"
        ))),
        Some(_) => Ok(()),
        None => {
            tracing::warn!(
                "CONFIG GET is refused: cannot tell whether maxmemory-policy may evict the user \
                 index (it must be noeviction or volatile-*)"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allkeys_policies_evict_buckets() {
        for p in ["allkeys-lru", "allkeys-lfu", "allkeys-random"] {
            assert!(evicts_persistent_keys(p), "{p}");
        }
        for p in [
            "noeviction",
            "volatile-lru",
            "volatile-ttl",
            "volatile-random",
        ] {
            assert!(!evicts_persistent_keys(p), "{p}");
        }
    }
}

/// How the server keeps a small hash once a field has a TTL: what a
/// compact store whose fields the server expires
/// ([`crate::session::layout::compact::Expiry::Server`]) relies on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldTtls {
    /// Still a listpack (`listpackex`, Redis 7.4+): fields expire at little
    /// cost in bytes.
    Listpack,
    /// Converted to this encoding at the first field TTL (Valkey 9.0 and
    /// 9.1 make it a `hashtable`): the hash costs several times its
    /// listpack size.
    Converted(String),
    /// The server has no hash-field expiry (`HEXPIREAT`; before Redis
    /// 7.4, Valkey before 9.0): its error.
    Unsupported(String),
}

/// Finds out how the server keeps a hash with a field TTL, by making one:
/// a two-field hash under `key` (the caller's namespace), a TTL on one
/// field, `OBJECT ENCODING`, then `DEL`. Its fields expire within a
/// minute should this process stop half way, and the key with them.
pub async fn field_ttls<C>(conn: &mut C, key: &str) -> Result<FieldTtls>
where
    C: redis::aio::ConnectionLike + Send,
{
    let wrap = |e| crate::Error::from_redis(e, || key.to_owned());
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query_async(conn)
        .await
        .map_err(wrap)?;
    let expired = |field: &str| {
        let mut cmd = redis::cmd("HEXPIREAT");
        cmd.arg(key).arg(now + 60).arg("FIELDS").arg(1).arg(field);
        cmd
    };
    if let Err(e) = expired("a").query_async::<redis::Value>(conn).await {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query_async(conn).await;
        if e.to_string()
            .to_ascii_lowercase()
            .contains("unknown command")
        {
            return Ok(FieldTtls::Unsupported(e.to_string()));
        }
        return Err(wrap(e));
    }
    let _: redis::Value = expired("b").query_async(conn).await.map_err(wrap)?;
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(wrap)?;
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(wrap)?;
    Ok(if encoding.starts_with("listpack") {
        FieldTtls::Listpack
    } else {
        FieldTtls::Converted(encoding)
    })
}
