//! Slots moved under traffic, mid-split too: nothing lost, revived or orphaned.

use super::*;

/// Moves slots holding some of `tags` (keys whose slots place the
/// layout's buckets) twice while two tasks churn sessions on `store` and
/// its sweeper runs: half the slots of one primary to a second, then as
/// many of the second's to the third (a primary left with no slot would
/// turn into a replica). Then checks that no live session was lost and no
/// ended one came back, and returns the live sessions.
async fn reshard_under_traffic<L>(
    c: &LocalCluster,
    store: Store<L, String>,
    sweeper: sessionpack::session::sweep::SweeperHandle,
    tags: &[String],
) -> Vec<SessionId>
where
    L: sessionpack::session::layout::Layout + Clone + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|w| {
            tokio::spawn(churn(
                store.clone(),
                stop.clone(),
                rounds.clone(),
                w * 1_000_000,
            ))
        })
        .collect();
    rounds_reach(&rounds, 300).await;

    let primaries = c.primaries();
    let (a, b, third) = (primaries[0], primaries[1], primaries[2]);
    let half = c.slots_of(a).unwrap() / 2;
    let held = c.slots_of(b).unwrap();
    let tag_slots: Vec<u16> = tags.iter().map(|t| c.key_slot(t).unwrap()).collect();
    // How many of the tags' slots a node serves.
    let tags_on = |node| {
        let ranges = c.slot_ranges(node).unwrap();
        tag_slots
            .iter()
            .filter(|&&s| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&s)))
            .count()
    };
    let (on_a, on_third) = (tags_on(a), tags_on(third));
    tokio::task::block_in_place(|| c.reshard(a, b, half)).unwrap();
    assert_eq!(c.slots_of(b).unwrap(), held + half);
    tokio::task::block_in_place(|| c.reshard(b, third, half)).unwrap();
    assert!(tags_on(a) < on_a, "buckets moved off the first primary");
    assert!(tags_on(third) > on_third, "buckets moved onto the third");
    let so_far = rounds.load(Ordering::Relaxed);
    rounds_reach(&rounds, so_far + 300).await;
    stop.store(true, Ordering::Relaxed);
    let mut ledgers = Vec::new();
    for w in workers {
        ledgers.push(w.await.unwrap());
    }
    sweeper.shutdown().await;

    let live: Vec<SessionId> = ledgers.iter().flat_map(|l| l.live.clone()).collect();
    let dead: Vec<SessionId> = ledgers.iter().flat_map(|l| l.dead.clone()).collect();
    let lost: Vec<SessionId> = ledgers.iter().flat_map(|l| l.lost.clone()).collect();
    let failed: u64 = ledgers.iter().map(|l| l.failed).sum();
    println!(
        "{} live, {} ended, {} uncertain, {failed} calls failed with a transient error",
        live.len(),
        dead.len(),
        ledgers.iter().map(|l| l.uncertain.len()).sum::<usize>()
    );
    assert!(
        lost.is_empty(),
        "{} live sessions were found gone",
        lost.len()
    );
    assert!(live.len() > 100 && dead.len() > 50, "traffic went on");
    assert_eq!(
        common::found(&store, &live).await,
        live.len(),
        "a live session was lost"
    );
    assert_eq!(
        common::found(&store, &dead).await,
        0,
        "an ended session came back"
    );
    live
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_slots_moved_under_traffic_lose_and_revive_nothing_and_leave_no_orphan() {
    let c = LocalCluster::start(3, 0).expect("a local cluster");
    let conn = cluster::connect(&c.urls()).await.unwrap();
    let layout = Compact::new(conn, CompactConfig::new(13)).await.unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper().with_ttl(TTL);
    let scheme = layout.scheme();
    let tags: Vec<String> = (0..scheme.groups()).map(|g| scheme.index_key(g)).collect();
    let live = reshard_under_traffic(&c, store, sweeping(layout.clone()), &tags).await;
    let held = audit_compact(&c, &layout).await;
    assert!(held >= live.len() as u64);
}

/// A growing store whose buckets hold 16 entries, so the traffic splits
/// and merges them while their groups' slots move: a split is one script
/// over a group's keys, which a slot half migrated refuses (the write that
/// triggered it is done; the next write or the sweeper splits). Nothing is
/// lost or revived, and every bucket of the shape that holds sessions is
/// indexed at or below its earliest expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_slots_moved_mid_split_lose_and_revive_nothing() {
    let c = LocalCluster::start(3, 0).expect("a local cluster");
    for node in c.nodes() {
        common::set_hash_entries(node, 16);
    }
    let conn = cluster::connect(&c.urls()).await.unwrap();
    let layout = Compact::new(conn, CompactConfig::new(5).with_growth())
        .await
        .unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper().with_ttl(TTL);
    let shape = layout.shape().unwrap().clone();
    let tags: Vec<String> = (0..shape.group_count())
        .map(|g| shape.shape_key(g))
        .collect();
    let live = reshard_under_traffic(&c, store, sweeping(layout.clone()), &tags).await;
    let groups: Vec<u32> = (0..shape.group_count()).collect();
    let reshapes: u64 = layout
        .fetch_shapes(&groups)
        .await
        .unwrap()
        .iter()
        .map(|s| s.epoch())
        .sum();
    // The traffic leaves at least ~480 sessions in 32 groups, whose
    // buckets split above 12.
    println!("{reshapes} splits and merges");
    assert!(reshapes >= 8, "only {reshapes} splits and merges");
    let held = audit_growing(&layout).await;
    assert!(held >= live.len() as u64);
}

/// Every bucket of a growing store's shape that holds sessions has an
/// index entry at or below their earliest expiry. Returns the sessions
/// held.
async fn audit_growing(layout: &Compact<cluster::Cluster>) -> u64 {
    use redis::AsyncCommands;
    let mut conn = layout.connection().clone();
    let shape = layout.shape().unwrap();
    let mut held = 0;
    for group in 0..shape.group_count() {
        for node in layout.group_buckets(group).await.unwrap() {
            let fields: Vec<(Vec<u8>, Vec<u8>)> =
                conn.hgetall(shape.bucket_key(node)).await.unwrap();
            // Sessions' fields: not the marker, pieces of records, or a
            // user index's markers.
            let expiries: Vec<u64> = fields
                .iter()
                .filter(|(f, _)| f.len() == shape.field_len(node))
                .map(|(_, v)| expiry_of(v))
                .collect();
            held += expiries.len() as u64;
            let Some(earliest) = expiries.into_iter().min() else {
                continue;
            };
            let score: Option<f64> = conn
                .zscore(shape.index_of(node), node.index_member())
                .await
                .unwrap();
            let score = score.unwrap_or_else(|| panic!("{node:?} holds sessions, no index entry"));
            assert!(
                score <= earliest as f64,
                "{node:?}: index {score} > {earliest}"
            );
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_slots_moved_under_traffic_lose_and_revive_nothing_and_leave_no_orphan() {
    let c = LocalCluster::start(3, 0).expect("a local cluster");
    let conn = cluster::connect(&c.urls()).await.unwrap();
    let layout = Bucketed::new(conn, BucketedConfig::new(8)).await.unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper().with_ttl(TTL);
    let b = layout.buckets().clone();
    let tags: Vec<String> = (0..b.count()).map(|n| b.hash_key(n)).collect();
    let live = reshard_under_traffic(&c, store, sweeping(layout.clone()), &tags).await;
    let held = audit_bucketed(&c, &layout).await;
    assert!(held >= live.len() as u64);
}

/// Every bucket's HASH fields and ZSET members are the same ids, and every
/// out-of-line record key has its marker. Returns the sessions held.
async fn audit_bucketed(c: &LocalCluster, layout: &Bucketed<cluster::Cluster>) -> u64 {
    use redis::AsyncCommands;
    use std::collections::HashSet;
    let mut conn = layout.connection().clone();
    let b = layout.buckets();
    let mut sessions = 0;
    for bucket in 0..b.count() {
        let fields: HashSet<Vec<u8>> = conn.hkeys(b.hash_key(bucket)).await.unwrap();
        let members: HashSet<Vec<u8>> = conn.zrange(b.zset_key(bucket), 0, -1).await.unwrap();
        assert_eq!(
            fields, members,
            "bucket {bucket}: fields and expiries differ"
        );
        sessions += fields.len() as u64;
    }
    for node in c.primaries() {
        let mut raw = common::raw(node).await;
        let keys: Vec<String> = raw.keys("sp:{*}:o:*").await.unwrap();
        for key in keys {
            let (head, field_hex) = key.rsplit_once(":o:").unwrap();
            let tag = &head[head.find('{').unwrap() + 1..head.find('}').unwrap()];
            let bucket = u32::from_str_radix(tag, 16).unwrap();
            let field = hex::decode(field_hex).unwrap();
            let marker: Option<Vec<u8>> = conn.hget(b.hash_key(bucket), &field).await.unwrap();
            assert_eq!(marker.as_deref(), Some(&[0xc1][..]), "{key} has no marker");
        }
    }
    sessions
}
