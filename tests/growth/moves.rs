//! What moves with a bucket: index entries, user-index entries, tombstones, forward records, markers.

use super::*;

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
