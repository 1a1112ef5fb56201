//! What a migration copied: per copied session, a digest of the source key
//! as it was read and one of the session as it was stored, so that a run
//! again can tell a key the old store changed since, from a session the new
//! store changed or deleted since (which it never overwrites or brings
//! back).
//!
//! One HASH per bucket (the bucket's key and `:m`, in its slot), field
//! the session id, value the two 8-byte digests: a listpack of about 36
//! bytes per session. Each expires with the last session it names, and a
//! run that deletes the old keys deletes their entries.

use std::collections::BTreeMap;

use serde_json::Value;

use sessionpack::Result;
use sessionpack::session::id::SessionId;
use sessionpack::session::layout::compact::GroupedBuckets;

/// A journal entry's two digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Of the source key's value and expiry ([`sessionpack::takeover::digest`]).
    pub source: [u8; 8],
    /// Of the data and expiry stored ([`stored_digest`]).
    pub stored: [u8; 8],
}

impl Entry {
    /// The entry's value bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.source);
        out[8..].copy_from_slice(&self.stored);
        out
    }

    /// An entry's value bytes read back; `None` for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let bytes: [u8; 16] = bytes.try_into().ok()?;
        let mut entry = Self {
            source: [0; 8],
            stored: [0; 8],
        };
        entry.source.copy_from_slice(&bytes[..8]);
        entry.stored.copy_from_slice(&bytes[8..]);
        Some(entry)
    }
}

/// The journal key of `id`'s bucket.
pub fn key(buckets: &GroupedBuckets, id: &SessionId) -> String {
    let bucket = buckets.buckets().bucket_of(id);
    format!("{}:m", buckets.bucket_key(bucket))
}

/// Reads `id`'s entry.
pub async fn read<C>(
    conn: &mut C,
    buckets: &GroupedBuckets,
    id: &SessionId,
) -> Result<Option<Entry>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let bytes: Option<Vec<u8>> = redis::cmd("HGET")
        .arg(key(buckets, id))
        .arg(id.as_bytes())
        .query_async(conn)
        .await?;
    Ok(bytes.as_deref().and_then(Entry::from_bytes))
}

/// Adds the commands that write `id`'s entry, lasting at least until
/// `expires_at`, to `pipe`.
pub fn write(
    pipe: &mut redis::Pipeline,
    buckets: &GroupedBuckets,
    id: &SessionId,
    entry: Entry,
    expires_at: u64,
) {
    let key = key(buckets, id);
    pipe.cmd("HSET")
        .arg(&key)
        .arg(id.as_bytes())
        .arg(&entry.to_bytes()[..])
        .ignore();
    // NX gives a new key its expiry; GT moves it later only.
    for flag in ["NX", "GT"] {
        pipe.cmd("EXPIREAT")
            .arg(&key)
            .arg(expires_at)
            .arg(flag)
            .ignore();
    }
}

/// Adds the command that drops `id`'s entry to `pipe`.
pub fn forget(pipe: &mut redis::Pipeline, buckets: &GroupedBuckets, id: &SessionId) {
    pipe.cmd("HDEL")
        .arg(key(buckets, id))
        .arg(id.as_bytes())
        .ignore();
}

/// A digest of a session's data and expiry that does not depend on the
/// order of its maps' keys (the stored record's order is not the
/// source's).
pub fn stored_digest(data: &std::collections::HashMap<String, Value>, expires_at: u64) -> [u8; 8] {
    let sorted: BTreeMap<&String, Value> = data.iter().map(|(k, v)| (k, canonical(v))).collect();
    let bytes = serde_json::to_vec(&sorted).unwrap_or_default();
    sessionpack::takeover::digest(&bytes, expires_at as i64)
}

/// `value` with every object's keys in order.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn entries_round_trip() {
        let entry = Entry {
            source: [1; 8],
            stored: [2; 8],
        };
        assert_eq!(Entry::from_bytes(&entry.to_bytes()), Some(entry));
        assert_eq!(Entry::from_bytes(b"short"), None);
    }

    #[test]
    fn the_stored_digest_ignores_key_order_only() {
        let a: HashMap<String, Value> =
            serde_json::from_str(r#"{"x":{"b":1,"a":2},"y":3}"#).unwrap();
        let b: HashMap<String, Value> =
            serde_json::from_str(r#"{"y":3,"x":{"a":2,"b":1}}"#).unwrap();
        assert_eq!(stored_digest(&a, 10), stored_digest(&b, 10));
        assert_ne!(stored_digest(&a, 10), stored_digest(&a, 11));
        let c: HashMap<String, Value> =
            serde_json::from_str(r#"{"x":{"b":1,"a":3},"y":3}"#).unwrap();
        assert_ne!(stored_digest(&a, 10), stored_digest(&c, 10));
    }
}
