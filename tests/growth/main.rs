//! A growing compact store (`CompactConfig::growing`): buckets split as
//! they fill and merge as they empty, under traffic from processes whose
//! copy of the shape is stale, and nothing is lost, revived, or missed by
//! a load on the way. The server runs with a small
//! `hash-max-listpack-entries`, so a few thousand sessions make hundreds
//! of splits.

#[path = "../common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::AsyncCommands;
use sessionpack::limits::ListpackLimits;
use sessionpack::session::layout::Inserted;
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::compact::{DEFAULT_BUCKET_BITS, DEFAULT_GROWING_BITS};
use sessionpack::session::meta::StoreMeta;
use sessionpack::session::record;
use sessionpack::session::shape::{Node, Shape};
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::ttl::Deadline;
use sessionpack::{Compact, CompactConfig, Error, SessionId};
use sessionpack_testkit::LocalServer;

type Conn = redis::aio::ConnectionManager;

/// Entries a bucket may hold before Redis converts it, on these servers.
const ENTRIES: u64 = 32;

fn server() -> LocalServer {
    let server = common::server();
    common::set_hash_entries(&server, ENTRIES);
    server
}

/// A process opening the store: its own connection and its own copy of
/// the shape.
async fn open(server: &LocalServer) -> Compact<Conn> {
    Compact::new(common::manager(server).await, CompactConfig::growing())
        .await
        .expect("growing store")
}

/// A record of each form by `n`: identity only (the integer form), a short
/// one, one in pieces, one out of line.
fn record_for(n: usize) -> Vec<u8> {
    match n % 4 {
        0 => record::encode(&(70_000u64 + n as u64), &()).unwrap(),
        1 => record::encode(&5u64, &format!("note {n}")).unwrap(),
        2 => record::encode(&5u64, &format!("{n:>120}")).unwrap(),
        _ => record::encode(&5u64, &format!("{n:>700}")).unwrap(),
    }
}

async fn insert_all(layout: &Compact<Conn>, n: usize) -> Vec<SessionId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = layout.new_id().await.unwrap();
        let inserted = layout
            .insert_new(&id, &record_for(i), Deadline::In(3600))
            .await
            .unwrap();
        assert!(matches!(inserted, Inserted::Created { .. }), "{inserted:?}");
        ids.push(id);
    }
    ids
}

/// Waits until the server's clock has passed `at` (an event, not a guess
/// at how long that takes).
async fn wait_past(raw: &mut redis::aio::MultiplexedConnection, at: u64) {
    loop {
        let (t, _): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
        if t > at {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Every bucket of the current shape, and what the keyspace holds besides:
/// buckets of no shape would be sessions no one finds.
struct Layouted {
    buckets: Vec<Node>,
    sessions: u64,
    converted: u64,
    fullest: u64,
    strays: Vec<String>,
    /// Buckets holding sessions with no index entry: the sweeper's passes
    /// between full ones would miss them.
    unindexed: u64,
    /// Index entries of no current bucket: never swept away.
    stale_entries: Vec<String>,
    /// Of those, the ones naming a mark or no key, which the sweeper
    /// drops when they are due: what a plain create whose `ZADD LT` went
    /// through, routed to a replaced bucket, leaves where the server
    /// stopped before it took its fields back.
    droppable_entries: Vec<String>,
    /// Keys a split or merge replaced, left as marks (record format 11):
    /// the one field 0xff, expiring.
    marks: u64,
}

/// Whether `key` is a mark a split or merge left: the one field 0xff, and
/// an expiry.
async fn is_mark(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    let Ok(pairs) = raw.hgetall::<_, HashMap<Vec<u8>, Vec<u8>>>(key).await else {
        return false;
    };
    let ttl: i64 = raw.ttl(key).await.unwrap();
    pairs.len() == 1 && pairs.contains_key(&[0xffu8][..]) && ttl > 0
}

async fn survey(raw: &mut redis::aio::MultiplexedConnection, layout: &Compact<Conn>) -> Layouted {
    let shape = layout.shape().unwrap();
    let mut buckets = Vec::new();
    for group in 0..shape.group_count() {
        buckets.extend(layout.group_buckets(group).await.unwrap());
    }
    let names: HashSet<String> = buckets.iter().map(|&b| shape.bucket_key(b)).collect();
    let mut out = Layouted {
        buckets,
        sessions: 0,
        converted: 0,
        fullest: 0,
        strays: Vec::new(),
        unindexed: 0,
        stale_entries: Vec::new(),
        droppable_entries: Vec::new(),
        marks: 0,
    };
    for node in &out.buckets {
        let key = shape.bucket_key(*node);
        let pairs: HashMap<Vec<u8>, Vec<u8>> = raw.hgetall(&key).await.unwrap();
        out.fullest = out.fullest.max(pairs.len() as u64);
        out.sessions += pairs
            .keys()
            .filter(|f| f.len() == shape.field_len(*node))
            .count() as u64;
        let indexed: Option<f64> = raw
            .zscore(shape.index_of(*node), node.index_member())
            .await
            .unwrap();
        if pairs.len() > 1 && indexed.is_none() {
            out.unindexed += 1;
        }
        if !pairs.is_empty() && common::encoding(raw, &key).await != "listpack" {
            out.converted += 1;
        }
    }
    let leaves: HashSet<Node> = out.buckets.iter().copied().collect();
    for group in 0..shape.group_count() {
        let prefix = format!("sp:{}:i", shape.tag(group));
        let indexes: Vec<String> = raw.keys(format!("{prefix}*")).await.unwrap();
        for key in indexes {
            let index = u32::from_str_radix(&key[prefix.len()..], 16).unwrap();
            let members: Vec<u32> = raw.zrange(&key, 0, -1).await.unwrap();
            for m in members {
                match Node::of_member(group, index, m) {
                    Some(node) if leaves.contains(&node) => {}
                    node => {
                        let entry = format!("{key} {m}");
                        if let Some(node) = node {
                            let bucket = shape.bucket_key(node);
                            let exists: bool = raw.exists(&bucket).await.unwrap();
                            if !exists || is_mark(raw, &bucket).await {
                                out.droppable_entries.push(entry.clone());
                            }
                        }
                        out.stale_entries.push(entry);
                    }
                }
            }
        }
    }
    let keys: Vec<String> = raw.keys("sp:{*").await.unwrap();
    for key in keys {
        let (owner, kind) = key.rsplit_once(':').unwrap_or_default();
        // Bucket keys are the only ones named by hex digits alone; a
        // viewed chunk's is its bucket's and `:v<chunk>`.
        let chunk = kind
            .strip_prefix('v')
            .is_some_and(|c| c.parse::<u8>().is_ok());
        let stray = if chunk {
            !names.contains(owner)
        } else {
            kind.bytes().all(|b| b.is_ascii_hexdigit())
                && !key.contains(":o:")
                && !names.contains(&key)
        };
        if stray && !chunk && is_mark(raw, &key).await {
            out.marks += 1;
        } else if stray {
            out.strays.push(key);
        }
    }
    out
}

fn set_hash_value(server: &LocalServer, bytes: u64) {
    common::raw_command(
        server,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("hash-max-listpack-value")
            .arg(bytes),
    );
}

/// Two groups, so the user index scenarios' few hundred sessions make
/// splits; revocations and the sweepers' merges fold them back.
fn two_groups() -> CompactConfig {
    CompactConfig::new(1).with_growth()
}

mod faults;
mod features;
mod moves;
mod plain;
mod splits;
