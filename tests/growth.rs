//! A growing compact store (`CompactConfig::growing`): buckets split as
//! they fill and merge as they empty, under traffic from processes whose
//! copy of the shape is stale, and nothing is lost, revived, or missed by
//! a load on the way. The server runs with a small
//! `hash-max-listpack-entries`, so a few thousand sessions make hundreds
//! of splits.

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
                    _ => out.stale_entries.push(format!("{key} {m}")),
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
        if stray {
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

/// A split below a byte's last bit keeps child 0 in the parent's listpack
/// (renamed) and moves only child 1's fields; a bucket the server has
/// converted (its limits lowered under it) is written anew instead, so
/// both children are listpacks again. Every session reads back whole.
#[tokio::test]
async fn a_bucket_the_server_converted_splits_into_listpacks_again() {
    let server = server();
    let layout = open(&server).await;
    let mut raw = common::raw(&server).await;
    let mut ids = insert_all(&layout, 600).await;
    // Values of one byte at most: each bucket written next converts.
    set_hash_value(&server, 1);
    ids.extend(insert_all(&layout, 300).await);
    set_hash_value(&server, 64);
    let before = survey(&mut raw, &layout).await;
    assert!(before.converted > 0, "no bucket converted");
    let shape = layout.shape().unwrap();
    let mut converted = HashSet::new();
    for node in &before.buckets {
        if common::encoding(&mut raw, &shape.bucket_key(*node)).await != "listpack" {
            converted.insert(*node);
        }
    }
    ids.extend(insert_all(&layout, 3000).await);
    let after = survey(&mut raw, &layout).await;
    let now: HashSet<Node> = after.buckets.iter().copied().collect();
    let split: Vec<&Node> = converted.iter().filter(|n| !now.contains(n)).collect();
    assert!(!split.is_empty(), "no converted bucket split");
    let old: HashSet<Node> = before.buckets.iter().copied().collect();
    for node in &after.buckets {
        if old.contains(node) {
            continue;
        }
        let encoding = common::encoding(&mut raw, &shape.bucket_key(*node)).await;
        assert_eq!(encoding, "listpack", "{node:?}");
    }
    assert!(after.strays.is_empty(), "{:?}", after.strays);
    assert_eq!(after.sessions, ids.len() as u64);
    let loaded = open(&server).await.load_many(&ids).await.unwrap();
    for (i, got) in loaded.iter().enumerate() {
        let want = record_for(if i < 600 {
            i
        } else if i < 900 {
            i - 600
        } else {
            i - 900
        });
        assert_eq!(got.as_ref().map(|s| &s.record), Some(&want), "session {i}");
    }
}

#[tokio::test]
async fn a_store_grows_and_a_process_with_a_stale_shape_finds_every_session() {
    let server = server();
    let writer = open(&server).await;
    // Opened before any split: its copy of every group is one bucket.
    let stale = open(&server).await;
    let ids = insert_all(&writer, 3000).await;

    let mut raw = common::raw(&server).await;
    let survey = survey(&mut raw, &writer).await;
    assert!(
        survey.buckets.len() > 4 * (1 << DEFAULT_GROWING_BITS),
        "only {} buckets for 3000 sessions",
        survey.buckets.len()
    );
    // Some buckets are deep enough that their fields lost a byte.
    let shape = writer.shape().unwrap();
    assert!(survey.buckets.iter().any(|&b| shape.level(b) >= 8));
    assert_eq!(survey.sessions, 3000);
    assert_eq!(survey.converted, 0);
    assert!(
        survey.fullest <= ENTRIES,
        "a bucket holds {}",
        survey.fullest
    );
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);

    for (i, id) in ids.iter().enumerate() {
        let stored = stale
            .load(id)
            .await
            .unwrap()
            .expect("a session the stale process must find");
        assert_eq!(stored.record, record_for(i), "session {i}");
    }
    let batch = writer.load_many(&ids).await.unwrap();
    let fresh_stale = open(&server).await;
    let batch_stale = fresh_stale.load_many(&ids).await.unwrap();
    for (i, (a, b)) in batch.iter().zip(&batch_stale).enumerate() {
        assert_eq!(a.as_ref().map(|s| &s.record), Some(&record_for(i)));
        assert_eq!(b.as_ref().map(|s| &s.record), Some(&record_for(i)));
    }
}

#[tokio::test]
async fn writes_through_a_stale_shape_land_in_the_current_buckets() {
    let server = server();
    let writer = open(&server).await;
    let stale = open(&server).await;
    let ids = insert_all(&writer, 1500).await;
    let (saved, rest) = ids.split_at(500);
    let (deleted, rest) = rest.split_at(300);
    let (removed, touched) = rest.split_at(200);

    for id in saved {
        let written = stale
            .save(id, b"saved by the stale process", u64::from(u32::MAX) - 1)
            .await
            .unwrap();
        assert_eq!(written, sessionpack::session::layout::Written::Done);
    }
    // Half as a process that has not read them deletes, half as one that
    // read them moments before (by the record's length): a plain HDEL,
    // which finds nothing in a bucket split away and then follows.
    for (n, id) in deleted.iter().enumerate() {
        let seen = (n % 2 == 1).then(|| record_for(500 + n).len());
        assert!(stale.delete(id, seen).await.unwrap());
    }
    for id in removed {
        let written = stale.remove(id, None).await.unwrap();
        assert_eq!(written, sessionpack::session::layout::Written::Done);
    }
    for id in touched {
        assert!(stale.touch(id, 7200).await.unwrap().is_some());
    }
    // A second stale process creates sessions of its own among the
    // splits: each lands where the current shape puts it.
    let other = open(&server).await;
    let late = insert_all(&other, 500).await;

    let reader = open(&server).await;
    for id in saved {
        let stored = reader.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, b"saved by the stale process");
    }
    for id in deleted.iter().chain(removed) {
        assert_eq!(
            reader.load(id).await.unwrap(),
            None,
            "a deleted session came back"
        );
    }
    for id in touched.iter().chain(&late) {
        assert!(reader.load(id).await.unwrap().is_some());
    }
    let mut raw = common::raw(&server).await;
    let survey = survey(&mut raw, &reader).await;
    assert_eq!(survey.sessions as usize, 500 + 500 + 500);
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.converted, 0);
}

#[tokio::test]
async fn loads_racing_splits_never_miss_a_session() {
    let server = server();
    let writer = Arc::new(open(&server).await);
    let first = insert_all(&writer, 200).await;
    let known = Arc::new(std::sync::Mutex::new(first));
    let done = Arc::new(AtomicBool::new(false));
    let loads = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let reader = open(&server).await;
        let (known, done, loads) = (known.clone(), done.clone(), loads.clone());
        readers.push(tokio::spawn(async move {
            let mut n = 0usize;
            // At least one load, however fast the writer.
            while !done.load(Ordering::Relaxed) || loads.load(Ordering::Relaxed) == 0 {
                let ids: Vec<SessionId> = known.lock().unwrap().clone();
                let id = ids[n % ids.len()];
                n = n.wrapping_mul(31).wrapping_add(7);
                let found = reader.load(&id).await.unwrap();
                assert!(
                    found.is_some(),
                    "a load missed a live session during a split"
                );
                loads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for i in 0..2500 {
        let id = writer.new_id().await.unwrap();
        writer
            .insert_new(&id, &record_for(i), Deadline::In(3600))
            .await
            .unwrap();
        known.lock().unwrap().push(id);
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
    assert!(loads.load(Ordering::Relaxed) > 0);
}

#[tokio::test]
async fn a_batch_insert_grows_the_store_without_converting_a_bucket() {
    let server = server();
    let layout = open(&server).await;
    let items: Vec<(SessionId, Vec<u8>)> = (0..4000)
        .map(|i| (SessionId::generate().unwrap(), record_for(i)))
        .collect();
    let inserted = layout.insert_many(&items, 3600).await.unwrap();
    assert!(
        inserted
            .iter()
            .all(|i| matches!(i, Inserted::Created { .. }))
    );
    let mut raw = common::raw(&server).await;
    let survey = survey(&mut raw, &layout).await;
    assert_eq!(survey.sessions, 4000);
    assert_eq!(survey.converted, 0);
    assert!(survey.fullest <= ENTRIES);
    let stale = open(&server).await;
    let ids: Vec<SessionId> = items.iter().map(|(id, _)| *id).collect();
    let loaded = stale.load_many(&ids).await.unwrap();
    assert!(
        loaded
            .iter()
            .zip(&items)
            .all(|(l, (_, r))| l.as_ref().map(|s| &s.record) == Some(r))
    );
}

#[tokio::test]
async fn the_sweeper_reclaims_expired_sessions_and_merges_the_buckets_back() {
    let server = server();
    let layout = open(&server).await;
    let mut raw = common::raw(&server).await;
    let short = insert_all(&layout, 2000).await;
    let kept = insert_all(&layout, 40).await;
    let grown = survey(&mut raw, &layout).await.buckets.len();
    assert!(grown > 2 * (1 << DEFAULT_GROWING_BITS));
    // Their lives cut short by saves (a save of an expiry already past,
    // on a slow machine, removes the session itself).
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let expiry = now + 2;
    for (i, id) in short.iter().enumerate() {
        layout.save(id, &record_for(i), expiry).await.unwrap();
    }
    // Wait for the server's clock to pass the expiry (an event, not a
    // guess at how long that takes).
    wait_past(&mut raw, expiry).await;
    // Processes loading the live sessions while the sweeper merges.
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let reader = open(&server).await;
        let (kept, done) = (kept.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut loads = 0u64;
            while !done.load(Ordering::Relaxed) || loads == 0 {
                for id in &kept {
                    let found = reader.load(id).await.unwrap();
                    assert!(
                        found.is_some(),
                        "a load missed a live session during a merge"
                    );
                    loads += 1;
                }
            }
        }));
    }
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let units = sweeper.units();
    assert_eq!(units, 1 << DEFAULT_GROWING_BITS);
    let report = sweeper.sweep_range(0..units).await.unwrap();
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
    assert!(report.reclaimed <= 2000);
    assert!(report.merges > 0);
    let after = survey(&mut raw, &layout).await;
    assert!(
        after.buckets.len() < grown / 2,
        "{} buckets left of {grown}",
        after.buckets.len()
    );
    assert_eq!(after.sessions, 40);
    assert!(after.strays.is_empty(), "{:?}", after.strays);
    assert_eq!(after.unindexed, 0);
    assert!(after.stale_entries.is_empty(), "{:?}", after.stale_entries);
    let stale = open(&server).await;
    for id in &short {
        assert_eq!(stale.load(id).await.unwrap(), None);
    }
    for id in &kept {
        assert!(stale.load(id).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn a_growing_namespace_refuses_what_it_does_not_keep() {
    let server = server();
    let _layout = open(&server).await;
    let conn = common::manager(&server).await;
    let fixed = CompactConfig::new(DEFAULT_GROWING_BITS).fixed();
    let fixed = Compact::new(conn.clone(), fixed).await;
    assert!(matches!(fixed, Err(Error::Config(_))), "{fixed:?}");
    // A count that is not told to stay fixed opens the store as recorded.
    let counted = Compact::new(conn.clone(), CompactConfig::new(DEFAULT_GROWING_BITS)).await;
    assert!(counted.unwrap().shape().is_some());
    let expiring = CompactConfig::growing()
        .with_namespace("other")
        .with_server_expiry();
    let refused = Compact::new(conn.clone(), expiring).await;
    assert!(
        matches!(&refused, Err(Error::Config(m)) if m.contains("growing")),
        "{refused:?}"
    );
    common::set_eviction_policy(&server, "allkeys-lru");
    let evicting = Compact::new(conn, CompactConfig::growing().with_namespace("third")).await;
    assert!(matches!(evicting, Err(Error::Config(_))), "{evicting:?}");
}

/// A store opened with no bucket count grows in a new namespace, and opens
/// a recorded one as it was recorded, with its count; where it cannot grow
/// (an eviction policy that may evict its shape) a new one keeps fixed
/// buckets.
#[tokio::test]
async fn a_store_opened_with_no_count_grows_or_opens_as_recorded() {
    let server = server();
    let conn = common::manager(&server).await;
    let fresh = Compact::new(conn.clone(), CompactConfig::default())
        .await
        .unwrap();
    assert!(fresh.shape().is_some(), "a new namespace grows");
    assert_eq!(fresh.buckets().bits(), DEFAULT_GROWING_BITS);
    let meta = StoreMeta::read(&conn, "sp").await.unwrap().unwrap();
    assert!(meta.growing, "{meta}");
    // It splits as it fills, and another process opened with no count
    // finds every session.
    let ids = insert_all(&fresh, 40 * (1 << DEFAULT_GROWING_BITS)).await;
    let other = Compact::new(conn.clone(), CompactConfig::default())
        .await
        .unwrap();
    let epochs: u64 = other
        .fetch_shapes(&(0..1 << DEFAULT_GROWING_BITS).collect::<Vec<_>>())
        .await
        .unwrap()
        .iter()
        .map(|s| s.epoch())
        .sum();
    assert!(epochs > 0, "no bucket split");
    for id in &ids {
        assert!(other.load(id).await.unwrap().is_some());
    }

    // A namespace recorded with fixed buckets opens fixed, with its count.
    let fixed = CompactConfig::new(9).with_namespace("fixed");
    let first = Compact::new(conn.clone(), fixed).await.unwrap();
    let ids = insert_all(&first, 20).await;
    let opened = CompactConfig::default().with_namespace("fixed");
    let opened = Compact::new(conn.clone(), opened).await.unwrap();
    assert!(opened.shape().is_none());
    assert_eq!(opened.buckets().bits(), 9);
    for id in &ids {
        assert!(opened.load(id).await.unwrap().is_some());
    }
    let growing = CompactConfig::default()
        .with_namespace("fixed")
        .with_growth();
    let refused = Compact::new(conn.clone(), growing).await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");

    // A new namespace keeps fixed buckets where its shape could be
    // evicted, and one told to grow there is refused.
    common::set_eviction_policy(&server, "allkeys-lru");
    let evicting = CompactConfig::default().with_namespace("evicting");
    let evicting = Compact::new(conn.clone(), evicting).await.unwrap();
    assert!(evicting.shape().is_none());
    assert_eq!(evicting.buckets().bits(), DEFAULT_BUCKET_BITS);
    // A growing namespace is refused there, recorded or not.
    let recorded = Compact::new(conn, CompactConfig::default()).await;
    assert!(matches!(recorded, Err(Error::Config(_))), "{recorded:?}");
}

/// Inserts `n` sessions through `layout`, each acknowledged one added to
/// `acked`; a call that fails on a connection lost is sent again (a
/// create sent twice finds its own session and is done).
async fn keep_inserting(
    layout: Compact<Conn>,
    n: usize,
    acked: Arc<std::sync::Mutex<Vec<SessionId>>>,
) {
    for i in 0..n {
        let id = layout.new_id().await.unwrap();
        loop {
            match layout
                .insert_new(&id, &record_for(i), Deadline::In(3600))
                .await
            {
                Ok(Inserted::Created { .. }) => break,
                Ok(other) => panic!("{other:?}"),
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        acked.lock().unwrap().push(id);
    }
}

async fn wait_for_acks(acked: &std::sync::Mutex<Vec<SessionId>>, at_least: usize) {
    while acked.lock().unwrap().len() < at_least {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn check_whole(server: &LocalServer, acked: &[SessionId]) {
    let reader = open(server).await;
    for id in acked {
        assert!(
            reader.load(id).await.unwrap().is_some(),
            "an acknowledged session is gone"
        );
    }
    let mut raw = common::raw(server).await;
    let survey = survey(&mut raw, &reader).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.unindexed, 0);
    assert!(
        survey.stale_entries.is_empty(),
        "{:?}",
        survey.stale_entries
    );
    assert_eq!(survey.converted, 0);
    assert!(survey.fullest <= ENTRIES);
    // Writers stopped mid-call may have stored a session they never
    // acknowledged; none is stored twice, none lost.
    assert!(survey.sessions >= acked.len() as u64);
}

#[tokio::test]
async fn writers_stopped_at_any_point_leave_a_store_the_next_one_grows_on() {
    let server = server();
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    for round in 0..12usize {
        let layout = open(&server).await;
        let before = acked.lock().unwrap().len();
        let task = tokio::spawn(keep_inserting(layout, 10_000, acked.clone()));
        // Stopped after a different number of sessions each round: mid
        // insert, mid split, between the two.
        wait_for_acks(&acked, before + 60 + 37 * round).await;
        task.abort();
        let _ = task.await;
    }
    let acked = acked.lock().unwrap().clone();
    check_whole(&server, &acked).await;
}

#[tokio::test]
async fn a_redis_killed_and_restarted_from_its_aof_mid_growth_keeps_every_session() {
    let server = LocalServer::start_with(&[
        "--hash-max-listpack-entries",
        "32",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])
    .expect("redis-server");
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = tokio::spawn(keep_inserting(open(&server).await, 3000, acked.clone()));
    for at in [800, 1600] {
        wait_for_acks(&acked, at).await;
        // kill -9 of redis-server, then the same server on its AOF.
        server.restart().expect("restart redis-server");
    }
    writer.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), 3000);
    check_whole(&server, &acked).await;
}

#[tokio::test]
async fn index_entries_follow_buckets_across_an_index_band_and_back() {
    // Sessions of one group only, in buckets of 8 entries: the group's
    // trie grows past depth 7, where each bucket starts an index of its
    // own, and folds back.
    let server = common::server();
    common::set_hash_entries(&server, 8);
    let layout = open(&server).await;
    let mut raw = common::raw(&server).await;
    let mut ids = Vec::new();
    for n in 0..1500u64 {
        let mut bytes = SessionId::generate().unwrap().as_bytes().to_vec();
        bytes[0] &= 0x0f;
        let id = SessionId::from_slice(&bytes).unwrap();
        let record = record::encode(&(70_000 + n), &()).unwrap();
        layout
            .insert_new(&id, &record, Deadline::In(3600))
            .await
            .unwrap();
        ids.push((id, record));
    }
    let grown = survey(&mut raw, &layout).await;
    assert!(grown.buckets.iter().any(|b| b.depth() >= 8));
    assert_eq!(grown.unindexed, 0);
    assert!(grown.stale_entries.is_empty(), "{:?}", grown.stale_entries);
    // Splits with no insert after them: a process that reads a lower
    // limit splits every bucket over it, and each child's index entry is
    // the split's alone.
    common::set_hash_entries(&server, 4);
    let splits = open(&server).await.reshape_group(0).await.unwrap().splits;
    common::set_hash_entries(&server, 8);
    assert!(splits > 0);
    let split = survey(&mut raw, &layout).await;
    assert_eq!(split.unindexed, 0);
    assert!(split.stale_entries.is_empty(), "{:?}", split.stale_entries);
    // All but 20 cut short, then swept and merged.
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (id, record) in &ids[20..] {
        layout.save(id, record, now + 2).await.unwrap();
    }
    wait_past(&mut raw, now + 2).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    while sweeper
        .sweep_range(0..sweeper.units())
        .await
        .unwrap()
        .merges
        > 0
    {}
    let after = survey(&mut raw, &layout).await;
    assert_eq!(after.sessions, 20);
    assert!(after.buckets.iter().all(|b| b.depth() < 7));
    assert_eq!(after.unindexed, 0);
    assert!(after.stale_entries.is_empty(), "{:?}", after.stale_entries);
}

/// Two groups, so the user index scenarios' few hundred sessions make
/// splits; revocations and the sweepers' merges fold them back.
fn two_groups() -> CompactConfig {
    CompactConfig::new(1).with_growth()
}

/// Splits and merges so far: the sum of the groups' epochs.
async fn reshapes(server: &LocalServer, namespace: &str) -> u64 {
    let layout =
        common::users::layout(common::manager(server).await, two_groups(), namespace).await;
    let shapes = layout.fetch_shapes(&[0, 1]).await.unwrap();
    shapes.iter().map(|s| s.epoch()).sum()
}

/// The user index on a growing store: listings, labels and revocations;
/// creates in flight refused by tombstones, which splits and merges carry
/// to the bucket their session's field moves to; revoke-all racing
/// creates, touches, rotations and sweepers while buckets split and
/// merge; and rotations racing revocations. Each scenario's own checks
/// hold as on fixed buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_index_and_revocations_hold_through_splits_and_merges() {
    let server = server();
    let conn = common::manager(&server).await;
    common::users::list_label_and_revoke(conn.clone(), two_groups()).await;
    common::users::creates_in_flight_are_blocked_and_leftovers_swept(conn.clone(), two_groups())
        .await;
    common::users::revoke_all_races_traffic(conn.clone(), two_groups(), "race").await;
    let raced = reshapes(&server, "race").await;
    eprintln!("{raced} splits and merges in the race");
    assert!(raced >= 4, "only {raced} splits and merges in the race");
    common::users::rotations_never_outlive_a_revocation(conn, two_groups(), "rot").await;
}

/// Whether `id`'s bucket, by the shape read now, holds the field of `id`
/// followed by `suffix`; and that bucket's depth.
async fn holds_mark(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<Conn>,
    id: &SessionId,
    suffix: u8,
) -> (bool, u8) {
    let shape = layout.shape().unwrap();
    let group = layout.fetch_shape(shape.group_of(id)).await.unwrap();
    let leaf = shape.leaf(&group, id);
    let mut field = shape.field(leaf, id);
    field.push(suffix);
    let held: bool = raw.hexists(shape.bucket_key(leaf), field).await.unwrap();
    (held, leaf.depth())
}

/// A revocation's tombstone (which refuses a create still in flight) and
/// a rotation's forward record (which leads a revocation to the copy) are
/// fields of their session's bucket: splits carry them down to the bucket
/// the session's field moves to, and merges back up, where each still
/// does its work.
#[tokio::test]
async fn tombstones_and_forward_records_move_with_their_bucket() {
    const TOMBSTONE: u8 = 0xc0;
    const FORWARD: u8 = 0xc2;
    let server = server();
    let mut raw = common::raw(&server).await;
    // A grace far longer than the test, so that the late create below is
    // refused by the tombstone, however slow the machine, and never as
    // late.
    let config =
        two_groups()
            .with_namespace("marks")
            .with_user_index(sessionpack::users::UserIndexConfig {
                grace_secs: 600,
                ..common::users::config()
            });
    let layout = Compact::new(common::manager(&server).await, config)
        .await
        .unwrap();
    let user = record::encode(&7u64, &()).unwrap();
    // A create in flight: its entry written, its session not yet, when
    // the user is revoked.
    let late = layout.new_id().await.unwrap();
    layout.ensure_entry(&user, &late).await.unwrap();
    let revoked = layout.revoke_user(&user, None).await.unwrap();
    assert_eq!(revoked.absent, 1, "{revoked:?}");
    // A rotation's copy, recorded beside the session it copies.
    let from = layout.new_id().await.unwrap();
    let to = layout.new_id().await.unwrap();
    let ttl = Deadline::In(3600);
    assert!(matches!(
        layout.insert_new(&from, &user, ttl).await.unwrap(),
        Inserted::Created { .. }
    ));
    assert!(matches!(
        layout
            .insert_successor(&from, None, &to, &user, ttl)
            .await
            .unwrap(),
        Inserted::Created { .. }
    ));
    assert_eq!(
        holds_mark(&mut raw, &layout, &late, TOMBSTONE).await,
        (true, 0)
    );
    assert_eq!(
        holds_mark(&mut raw, &layout, &from, FORWARD).await,
        (true, 0)
    );

    let other = record::encode(&9u64, &()).unwrap();
    let mut fillers = Vec::new();
    for _ in 0..400 {
        let id = layout.new_id().await.unwrap();
        layout.insert_new(&id, &other, ttl).await.unwrap();
        fillers.push(id);
    }
    let (stamp, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (id, suffix) in [(&late, TOMBSTONE), (&from, FORWARD)] {
        let (held, depth) = holds_mark(&mut raw, &layout, id, suffix).await;
        assert!(held && depth >= 2, "split to depth {depth}: held {held}");
    }
    let refused = layout.insert_after_entry(&late, &user, ttl, stamp).await;
    assert_eq!(refused.unwrap(), Inserted::IdTaken);

    for id in &fillers {
        assert!(layout.delete(id, None).await.unwrap());
    }
    for group in 0..2 {
        while layout.reshape_group(group).await.unwrap().merges > 0 {}
    }
    for (id, suffix) in [(&late, TOMBSTONE), (&from, FORWARD)] {
        assert_eq!(holds_mark(&mut raw, &layout, id, suffix).await, (true, 0));
    }
    let refused = layout.insert_after_entry(&late, &user, ttl, stamp).await;
    assert_eq!(refused.unwrap(), Inserted::IdTaken);
    // The forward record still leads a revocation from the old id to the
    // copy: with the copy's own index entry gone, both go.
    let index = layout.user_index().unwrap();
    let entries = index.key(index.place(&user).0);
    let _: i64 = raw.hdel(&entries, to.as_bytes()).await.unwrap();
    let revoked = layout.revoke_user(&user, None).await.unwrap();
    assert_eq!(revoked.removed, 2, "{revoked:?}");
    let loaded = layout.load_many(&[from, to]).await.unwrap();
    assert_eq!(loaded, vec![None, None]);
}

/// A bucket the sweeper empties keeps its marker: a write routed there
/// must not take it for a bucket split away, which in a busy group, whose
/// epoch moves between any two reads, could send it round until it gave
/// up.
#[tokio::test]
async fn a_bucket_the_sweeper_empties_keeps_its_marker() {
    let server = server();
    let mut raw = common::raw(&server).await;
    let layout = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    // Eight sessions that expire together, soon; the margin doubles
    // until every insert came before it (a slow machine).
    let shape = layout.shape().unwrap();
    let mut margin = 2;
    let expiry = loop {
        // Four in each group's bucket.
        let mut ids = Vec::new();
        while ids.len() < 8 {
            let id = layout.new_id().await.unwrap();
            let group = shape.group_of(&id) as usize;
            if ids
                .iter()
                .filter(|i| shape.group_of(i) as usize == group)
                .count()
                < 4
            {
                ids.push(id);
            }
        }
        let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
        let mut created = 0;
        for (i, id) in ids.iter().enumerate() {
            let inserted = layout
                .insert_new(id, &record_for(i), Deadline::At(now + margin))
                .await
                .unwrap();
            created += u32::from(matches!(inserted, Inserted::Created { .. }));
        }
        if created == 8 {
            break now + margin;
        }
        wait_past(&mut raw, now + margin).await;
        let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
        sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
        margin *= 2;
    };
    wait_past(&mut raw, expiry).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
    assert_eq!(report.reclaimed, 8);
    for group in 0..2 {
        let key = shape.bucket_key(Node::root(group));
        let fields: HashMap<Vec<u8>, Vec<u8>> = raw.hgetall(&key).await.unwrap();
        assert_eq!(
            fields.into_keys().collect::<Vec<_>>(),
            vec![Vec::<u8>::new()],
            "{key}"
        );
        let indexed: Option<f64> = raw
            .zscore(shape.index_of(Node::root(group)), 1)
            .await
            .unwrap();
        assert_eq!(indexed, None, "an empty bucket keeps no index entry");
    }
}

/// One-time tokens in a growing namespace: issued one at a time and in
/// batches while three consumers race for each, through splits; each
/// token is consumed exactly once, by one consumer, whichever bucket it
/// had moved to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_in_a_growing_store_are_consumed_exactly_once_through_splits() {
    use sessionpack::tokens::Tokens;
    let server = server();
    let open = || async {
        Tokens::<_, u64>::with_config(
            common::manager(&server).await,
            two_groups().with_namespace("tok"),
        )
        .await
        .unwrap()
    };
    let issuer = open().await;
    let ttl = std::time::Duration::from_secs(600);
    let mut issued = Vec::new();
    for n in 0..300u64 {
        issued.push((issuer.issue(&n, ttl).await.unwrap(), n));
    }
    let batch: Vec<u64> = (300..900).collect();
    let tokens = issuer.issue_many(&batch, ttl).await.unwrap();
    issued.extend(tokens.into_iter().zip(batch));
    let layout = issuer.layout();
    let buckets =
        layout.group_buckets(0).await.unwrap().len() + layout.group_buckets(1).await.unwrap().len();
    assert!(buckets > 16, "only {buckets} buckets");
    let issued = Arc::new(issued);
    // More issued meanwhile: buckets split under the consumers.
    let more = {
        let issuer = open().await;
        tokio::spawn(async move {
            let mut more = Vec::new();
            for n in 900..1500u64 {
                more.push((issuer.issue(&n, ttl).await.unwrap(), n));
            }
            more
        })
    };
    let mut consumers = Vec::new();
    for c in 0..3 {
        // Each consumer its own process, whose copy of the shape (none
        // read yet: one bucket a group) is stale from the start.
        let consumer = open().await;
        let issued = issued.clone();
        consumers.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for i in 0..issued.len() {
                let (token, n) = issued[(i + c * 300) % issued.len()];
                if let Some(got) = consumer.consume(&token).await.unwrap() {
                    assert_eq!(got, n);
                    won.push(n);
                }
            }
            won
        }));
    }
    let mut won = Vec::new();
    for c in consumers {
        won.extend(c.await.unwrap());
    }
    won.sort_unstable();
    assert_eq!(
        won,
        (0..900).collect::<Vec<_>>(),
        "each token consumed once"
    );
    for (token, n) in more.await.unwrap() {
        assert_eq!(issuer.peek(&token).await.unwrap(), Some(n));
    }
}

/// The session cap on a growing store, whose buckets' fields are of
/// several lengths: its cutoff is an (expiry, id) point, placed in each
/// bucket as that bucket orders its fields, so it keeps exactly the latest
/// sessions (every bucket sampled: the cap is exact), three to an expiry
/// second, split between ids; records out of line go with their sessions,
/// and the markers stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cap_keeps_exactly_the_latest_sessions_of_a_growing_store() {
    let server = server();
    let mut raw = common::raw(&server).await;
    let layout = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let mut made = Vec::new();
    for i in 0..1500usize {
        let id = layout.new_id().await.unwrap();
        let expiry = now + 1000 + (i / 3) as u64;
        let inserted = layout
            .insert_new(&id, &record_for(i), Deadline::At(expiry))
            .await
            .unwrap();
        assert!(matches!(inserted, Inserted::Created { .. }));
        made.push((expiry, id, i));
    }
    let grown = survey(&mut raw, &layout).await;
    assert!(grown.buckets.len() > 32, "{} buckets", grown.buckets.len());
    let sweeper = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(500),
    );
    let report = sweeper.enforce_cap().await.unwrap();
    assert_eq!(report.evicted, 1000, "{report:?}");
    made.sort_by(|a, b| (a.0, a.1.as_bytes()).cmp(&(b.0, b.1.as_bytes())));
    let ids: Vec<SessionId> = made.iter().map(|m| m.1).collect();
    let loaded = layout.load_many(&ids).await.unwrap();
    let kept: Vec<bool> = loaded.iter().map(Option::is_some).collect();
    assert_eq!(kept, [vec![false; 1000], vec![true; 500]].concat());
    // Records out of line: those of the kept sessions, no other.
    let records: Vec<String> = raw.keys("sp:{*}:o:*").await.unwrap();
    let out_of_line = made[1000..].iter().filter(|m| m.2 % 4 == 3).count();
    assert_eq!(records.len(), out_of_line);
    // A pass then merges what the cap emptied; every bucket keeps its
    // marker, and its index entry.
    let pass = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    assert!(pass.merges > 0, "{pass:?}");
    let after = survey(&mut raw, &layout).await;
    assert_eq!(after.sessions, 500);
    assert!(after.buckets.len() < grown.buckets.len());
    assert!(after.strays.is_empty(), "{:?}", after.strays);
    assert_eq!(after.unindexed, 0);
    assert!(after.stale_entries.is_empty(), "{:?}", after.stale_entries);
    for node in &after.buckets {
        let marked: bool = raw
            .hexists(layout.shape().unwrap().bucket_key(*node), "")
            .await
            .unwrap();
        assert!(marked, "{node:?} lost its marker");
    }
}

/// Every chunk field of a growing store's viewed items that no session of
/// its bucket holds: what a split, merge or removal left behind.
async fn viewed_orphans(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<Conn>,
) -> Vec<String> {
    let shape = layout.shape().unwrap();
    let mut out = Vec::new();
    for group in 0..shape.group_count() {
        for node in layout.group_buckets(group).await.unwrap() {
            for c in 0..layout.viewed_chunks() {
                let key = shape.viewed_key(node, c);
                let fields: Vec<Vec<u8>> = raw.hkeys(&key).await.unwrap();
                for field in fields {
                    let held: bool = raw.hexists(shape.bucket_key(node), &field).await.unwrap();
                    if !held {
                        out.push(format!("{key} {}", hex::encode(&field)));
                    }
                }
            }
        }
    }
    out
}

/// Viewed items live in chunks beside each bucket, a field per session:
/// splits and merges move them with their sessions, so each session's
/// list reads whole through splits (from a process whose shape is stale
/// too) and through merges, and no chunk field outlives its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewed_items_move_with_their_sessions_through_splits_and_merges() {
    use sessionpack::viewed::ViewedConfig;
    let server = server();
    let mut raw = common::raw(&server).await;
    let config = two_groups().with_viewed(ViewedConfig::new(25, 4));
    let layout = Compact::new(common::manager(&server).await, config.clone())
        .await
        .unwrap();
    let stale = Compact::new(common::manager(&server).await, config)
        .await
        .unwrap();
    let mut made = Vec::new();
    for n in 0..400usize {
        let id = layout.new_id().await.unwrap();
        let inserted = layout
            .insert_new(&id, &record_for(n), Deadline::In(3600))
            .await
            .unwrap();
        assert!(matches!(inserted, Inserted::Created { .. }));
        // Thirty views, two chunks' worth: the newest 25 stay.
        let items: Vec<Vec<u8>> = (0..30u16).map(|i| vec![(n % 251) as u8, i as u8]).collect();
        assert!(layout.view_many(&id, &items, None).await.unwrap().is_some());
        let newest: Vec<Vec<u8>> = items.iter().rev().take(25).cloned().collect();
        made.push((id, n, newest));
    }
    let grown = survey(&mut raw, &layout).await;
    assert!(grown.buckets.len() > 32, "{} buckets", grown.buckets.len());
    assert!(grown.strays.is_empty(), "{:?}", grown.strays);
    for (id, _, newest) in &made {
        assert_eq!(stale.viewed(id).await.unwrap().as_ref(), Some(newest));
    }
    assert!(viewed_orphans(&mut raw, &layout).await.is_empty());
    // All but 20 cut short, swept, and the buckets merged back.
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (id, n, _) in &made[20..] {
        layout.save(id, &record_for(*n), now + 1).await.unwrap();
    }
    wait_past(&mut raw, now + 1).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let pass = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    // A save that came after its expiry (a slow machine) removed its
    // session itself.
    assert!(pass.reclaimed <= 380, "{pass:?}");
    assert!(pass.merges > 0, "{pass:?}");
    let after = survey(&mut raw, &layout).await;
    assert!(after.strays.is_empty(), "{:?}", after.strays);
    for (id, _, newest) in &made[..20] {
        assert_eq!(stale.viewed(id).await.unwrap().as_ref(), Some(newest));
    }
    for (id, _, _) in &made[20..] {
        assert_eq!(layout.viewed(id).await.unwrap(), None);
    }
    assert_eq!(
        viewed_orphans(&mut raw, &layout).await,
        Vec::<String>::new()
    );
    // Deletes and the session cap take the lists with their sessions.
    for (id, _, _) in &made[..5] {
        assert!(stale.delete(id, None).await.unwrap());
    }
    let capped = Sweeper::new(layout.clone(), SweepConfig::default().with_max_sessions(10));
    assert_eq!(capped.enforce_cap().await.unwrap().evicted, 5);
    let left = layout
        .load_many(&made.iter().map(|m| m.0).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(left.iter().filter(|s| s.is_some()).count(), 10);
    assert_eq!(
        viewed_orphans(&mut raw, &layout).await,
        Vec::<String>::new()
    );
}

/// A create in a growing store (its short script): sent twice, it is done
/// once; under a taken id, it is refused and changes nothing; with another
/// program's string where the bucket's index goes, it fails with a typed
/// error and leaves no session behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_create_sent_twice_is_done_once_and_a_foreign_index_leaves_nothing() {
    let server = server();
    let layout = open(&server).await;
    let mut raw = common::raw(&server).await;
    let id = layout.new_id().await.unwrap();
    let record = record_for(1);
    for _ in 0..2 {
        let created = layout
            .insert_new(&id, &record, Deadline::In(600))
            .await
            .unwrap();
        assert!(matches!(created, Inserted::Created { .. }), "{created:?}");
    }
    let other = record_for(5);
    let taken = layout
        .insert_new(&id, &other, Deadline::In(600))
        .await
        .unwrap();
    assert_eq!(taken, Inserted::IdTaken);
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, record);

    let shape = layout.shape().expect("a growing store");
    let foreign = layout.new_id().await.unwrap();
    let index = shape.index_of(Node::root(shape.group_of(&foreign)));
    let _: () = raw.del(&index).await.unwrap();
    let _: () = raw.set(&index, "theirs").await.unwrap();
    let failed = layout
        .insert_new(&foreign, &record, Deadline::In(600))
        .await;
    assert!(matches!(failed, Err(Error::WrongType { .. })), "{failed:?}");
    assert!(layout.load(&foreign).await.unwrap().is_none());
    let bucket = shape.bucket_key(Node::root(shape.group_of(&foreign)));
    let fields: Vec<Vec<u8>> = raw.hkeys(&bucket).await.unwrap();
    assert_eq!(
        fields.len(),
        usize::from(shape.group_of(&foreign) == shape.group_of(&id)) + 1,
        "the marker, and the first session where it shares the bucket"
    );
}

/// A growing store's create of a record in pieces is one short script
/// after the route's check: a piece an earlier session of the id left
/// behind is overwritten before anyone reads it, a create sent twice is
/// done once, and with another program's string where the index goes it
/// fails typed and leaves neither value nor piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_create_in_pieces_overwrites_stale_pieces_and_leaves_nothing_on_failure() {
    let server = server();
    let layout = open(&server).await;
    let mut raw = common::raw(&server).await;
    let shape = layout.shape().expect("a growing store").clone();
    let record = record_for(2);
    let id = layout.new_id().await.unwrap();
    // A first session of the group: its bucket claimed, the script loaded.
    let first = loop {
        let other = layout.new_id().await.unwrap();
        if shape.group_of(&other) == shape.group_of(&id) {
            break other;
        }
    };
    let created = layout
        .insert_new(&first, &record, Deadline::In(600))
        .await
        .unwrap();
    assert!(matches!(created, Inserted::Created { .. }), "{created:?}");
    let group = layout.fetch_shape(shape.group_of(&id)).await.unwrap();
    let leaf = shape.leaf(&group, &id);
    let mut stale = shape.field(leaf, &id);
    stale.push(1);
    let _: () = raw
        .hset(shape.bucket_key(leaf), &stale, vec![0xee; 40])
        .await
        .unwrap();
    let before = common::calls(&mut raw, "evalsha").await;
    for _ in 0..2 {
        let created = layout
            .insert_new(&id, &record, Deadline::In(600))
            .await
            .unwrap();
        assert!(matches!(created, Inserted::Created { .. }), "{created:?}");
    }
    assert_eq!(common::calls(&mut raw, "evalsha").await - before, 2);
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, record);

    let foreign = loop {
        let other = layout.new_id().await.unwrap();
        if shape.group_of(&other) != shape.group_of(&id) {
            break other;
        }
    };
    let index = shape.index_of(Node::root(shape.group_of(&foreign)));
    let _: () = raw.del(&index).await.unwrap();
    let _: () = raw.set(&index, "theirs").await.unwrap();
    let failed = layout
        .insert_new(&foreign, &record, Deadline::In(600))
        .await;
    assert!(matches!(failed, Err(Error::WrongType { .. })), "{failed:?}");
    let bucket = shape.bucket_key(Node::root(shape.group_of(&foreign)));
    let fields: Vec<Vec<u8>> = raw.hkeys(&bucket).await.unwrap();
    assert_eq!(fields, vec![Vec::<u8>::new()], "the marker alone");
}

/// A new growing namespace records the field count its buckets split
/// above, and every process splits by it; one recorded before the count
/// was recorded keeps splitting at three quarters of the server's entry
/// limit, and is opened, not refused.
#[tokio::test]
async fn a_growing_namespace_records_its_split_count_and_an_older_one_keeps_its_own() {
    // The server's default limits: the count, not three quarters of them.
    let server = common::server();
    let layout = open(&server).await;
    let split = sessionpack::session::layout::compact::SPLIT_FIELDS;
    let mut raw = common::raw(&server).await;
    let entries = ListpackLimits::read(&mut raw).await.unwrap().hash_entries;
    assert!(split < entries * 3 / 4);
    assert_eq!(layout.reshape_thresholds(), Some((split, split * 4 / 5)));
    let recorded = StoreMeta::read(layout.connection(), "sp")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded.split_fields, split);
    assert_eq!(
        open(&server).await.reshape_thresholds(),
        Some((split, split * 4 / 5))
    );

    // The record of an earlier version: no count.
    let _: () = raw
        .hdel(StoreMeta::key("sp"), "split_fields")
        .await
        .unwrap();
    let older = open(&server).await;
    let legacy = entries * 3 / 4;
    assert_eq!(older.reshape_thresholds(), Some((legacy, legacy * 4 / 5)));
}

/// A growing store of 400 sessions: their ids, its shape, and the group
/// holding the most of them (split several times over).
async fn busiest_group(server: &LocalServer) -> (Vec<SessionId>, Shape, u32) {
    let layout = open(server).await;
    let ids = insert_all(&layout, 400).await;
    let shape = layout.shape().unwrap().clone();
    let group = (0..shape.group_count())
        .max_by_key(|&g| ids.iter().filter(|id| shape.group_of(id) == g).count())
        .unwrap();
    (ids, shape, group)
}

/// A group's shape damaged by hand (an epoch that is no number): a new
/// process's calls on that group fail typed (`CorruptRecord`, naming the
/// shape's key) rather than read no session or write a bucket of their
/// own; once the shape is put back, every session is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_shape_is_a_typed_error_and_nothing_is_lost() {
    let server = server();
    let (ids, shape, group) = busiest_group(&server).await;
    let key = shape.shape_key(group);
    let mut raw = common::raw(&server).await;
    let epoch: String = raw.hget(&key, "epoch").await.unwrap();
    assert!(epoch.parse::<u64>().unwrap() > 0, "the group never split");
    let () = raw.hset(&key, "epoch", "not a number").await.unwrap();
    let before: Vec<String> = raw.keys("*").await.unwrap();

    let fresh = open(&server).await;
    let theirs: Vec<&SessionId> = ids
        .iter()
        .filter(|id| shape.group_of(id) == group)
        .collect();
    let mut refused = 0;
    for id in &theirs {
        match fresh.load(id).await {
            Err(Error::CorruptRecord { location, .. }) => {
                assert_eq!(location, key);
                refused += 1;
            }
            Ok(Some(_)) => {}
            other => panic!("a session of a damaged group: {other:?}"),
        }
    }
    assert!(refused > 0, "no call on the group read its shape");
    let after: Vec<String> = raw.keys("*").await.unwrap();
    assert_eq!(after.len(), before.len(), "a call wrote a key");

    let () = raw.hset(&key, "epoch", &epoch).await.unwrap();
    let mended = open(&server).await;
    for id in &ids {
        assert!(mended.load(id).await.unwrap().is_some());
    }
}

/// A group's shape key deleted by hand: a new process's loads of the
/// group's sessions and its creates there fail typed and write nothing
/// (no root bucket of their own); once the key is restored exactly, every
/// session is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_shape_is_a_typed_error_and_nothing_is_lost() {
    let server = server();
    let (ids, shape, group) = busiest_group(&server).await;
    let key = shape.shape_key(group);
    let mut raw = common::raw(&server).await;
    let saved: Vec<(Vec<u8>, Vec<u8>)> = raw.hgetall(&key).await.unwrap();
    let () = raw.del(&key).await.unwrap();
    let before: Vec<String> = raw.keys("*").await.unwrap();

    let fresh = open(&server).await;
    for id in ids.iter().filter(|id| shape.group_of(id) == group) {
        let loaded = fresh.load(id).await;
        assert!(
            matches!(&loaded, Err(Error::CorruptRecord { location, .. }) if *location == key),
            "{loaded:?}"
        );
    }
    let mut refused = 0;
    while refused < 3 {
        let id = fresh.new_id().await.unwrap();
        if shape.group_of(&id) != group {
            continue;
        }
        let inserted = fresh
            .insert_new(&id, &record_for(1), Deadline::In(600))
            .await;
        assert!(
            matches!(&inserted, Err(Error::CorruptRecord { .. })),
            "{inserted:?}"
        );
        refused += 1;
    }
    let after: Vec<String> = raw.keys("*").await.unwrap();
    assert_eq!(after.len(), before.len(), "a call wrote a key");

    let () = raw.hset_multiple(&key, &saved).await.unwrap();
    let mended = open(&server).await;
    for id in &ids {
        assert!(mended.load(id).await.unwrap().is_some());
    }
}

/// Many first writes at once to a new store, from one process and from
/// several: a call that read a group's shape as never split, while another
/// split it, routes again; none reads the split as a lost shape
/// (`CorruptRecord`), and every session is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_writes_racing_a_groups_first_split_route_again() {
    let server = server();
    for round in 0..12 {
        let namespace = format!("race{round}");
        let config = || {
            CompactConfig::new(1)
                .with_growth()
                .with_namespace(&namespace)
        };
        let shared = Compact::new(common::manager(&server).await, config())
            .await
            .unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..400 {
            // Most share one process's connection and shape; some are
            // processes of their own.
            let layout = if task % 50 != 0 {
                shared.clone()
            } else {
                Compact::new(common::manager(&server).await, config())
                    .await
                    .unwrap()
            };
            tasks.spawn(async move {
                let mut ids = Vec::new();
                for n in 0..2 {
                    let id = layout.new_id().await.unwrap();
                    let inserted = layout
                        .insert(&id, &record_for(task * 2 + n), Deadline::In(3600))
                        .await?;
                    assert!(matches!(inserted, Inserted::Created { .. }), "{inserted:?}");
                    ids.push((id, task * 2 + n));
                }
                sessionpack::Result::Ok(ids)
            });
        }
        let mut stored = Vec::new();
        while let Some(done) = tasks.join_next().await {
            let ids: sessionpack::Result<Vec<(SessionId, usize)>> = done.unwrap();
            stored.extend(ids.unwrap_or_else(|e| panic!("round {round}: {e}")));
        }
        for (id, n) in stored {
            let got = shared.load(&id).await.unwrap();
            assert_eq!(got.map(|s| s.record), Some(record_for(n)), "round {round}");
        }
    }
}
