//! Buckets split and merge under traffic, and stale shapes still find every session.

use super::*;

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

/// A bucket that holds a session's field may be a mark a split or merge
/// left (record format 11), which a plain create writes into for a moment,
/// so a touch's short script asks for the marker with the value: one
/// `HMGET`, then the write, no `HGET` or `HEXISTS`; a miss asks nothing
/// more.
#[tokio::test]
async fn a_touch_reads_the_marker_with_the_value_in_its_script() {
    let server = server();
    let writer = open(&server).await;
    let ids = insert_all(&writer, 1500).await;
    let mut raw = common::raw(&server).await;
    let count = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let mut n = [0; 3];
            for (i, command) in ["hget", "hmget", "hexists"].into_iter().enumerate() {
                n[i] = common::calls(&mut raw, command).await;
            }
            n
        }
    };
    // Records kept whole, in the short script.
    let whole: Vec<usize> = (0..ids.len()).filter(|i| i % 4 < 2).collect();
    let at = writer.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
    let before = count(&mut raw).await;
    for &i in &whole {
        assert_eq!(writer.touch_until(&ids[i], at).await.unwrap(), Some(at));
    }
    let after = count(&mut raw).await;
    assert_eq!(
        (after[0], after[1] - before[1], after[2]),
        (before[0], whole.len() as u64, before[2]),
        "hget, hmget, hexists: {before:?} {after:?}"
    );
    for &i in &whole {
        let stored = writer
            .load(&ids[i])
            .await
            .unwrap()
            .expect("a session there");
        assert_eq!((stored.record, stored.expires_at), (record_for(i), at));
    }
    let before = count(&mut raw).await;
    let none = writer.new_id().await.unwrap();
    assert_eq!(writer.touch_until(&none, at).await.unwrap(), None);
    let after = count(&mut raw).await;
    assert_eq!(
        (after[0], after[1], after[2]),
        (before[0], before[1] + 1, before[2])
    );
}

/// A bucket one session fills (its pieces over the split limit, the
/// server's entry limit low) is not split: no bit below parts a session's
/// fields, so each split would only move it a level down and reshape the
/// bucket under every call to it, to the deepest level. A second session
/// in the bucket splits it as before.
#[tokio::test]
async fn a_bucket_one_session_fills_is_not_split() {
    let server = common::server();
    common::set_hash_entries(&server, 8);
    let layout = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let shape = layout.shape().unwrap();
    // Seven pieces and the session's own field: above the six fields a
    // bucket splits above with these limits.
    let big = record::encode(&5u64, &format!("{:>400}", "big")).unwrap();
    let id = layout.new_id().await.unwrap();
    layout
        .insert_new(&id, &big, Deadline::In(3600))
        .await
        .unwrap();
    let group = shape.group_of(&id);
    let epoch = || async { layout.fetch_shapes(&[group]).await.unwrap()[0].epoch() };
    assert_eq!(epoch().await, 0, "a bucket of one session split");
    let mut raw = common::raw(&server).await;
    let fields: u64 = raw.hlen(shape.bucket_key(Node::root(group))).await.unwrap();
    assert!(
        fields > 6 + 1,
        "the session's fields do not fill the bucket: {fields}"
    );
    for n in 0..5 {
        let record = record::encode(&5u64, &format!("{n:>400}")).unwrap();
        assert_eq!(
            layout.replace(&id, &record, None).await.unwrap(),
            sessionpack::session::layout::Written::Done
        );
    }
    assert_eq!(epoch().await, 0, "a bucket of one session split");

    // Sessions of the other group leave this one alone; the first of this
    // group splits it.
    loop {
        let other = layout.new_id().await.unwrap();
        layout
            .insert_new(
                &other,
                &record::encode(&6u64, &()).unwrap(),
                Deadline::In(3600),
            )
            .await
            .unwrap();
        if shape.group_of(&other) == group {
            break;
        }
        assert_eq!(epoch().await, 0);
    }
    assert!(epoch().await > 0, "a bucket of two sessions did not split");
    let want = record::encode(&5u64, &format!("{:>400}", 4)).unwrap();
    let reader = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let got = reader.load(&id).await.unwrap().unwrap();
    assert_eq!(got.record, want);
}

/// Splits and merges at every bit of a byte. Two groups, so 3,000
/// sessions take buckets nine levels and more below the groups' roots:
/// below a byte's last bit a split picks child 1's fields by the range
/// their first byte lies in and a merge moves child 1's back, at it both
/// children are written anew; the sweeper then folds the expired sessions'
/// buckets back. Every session field names an id its bucket holds, and
/// every live session reads back whole, grown and shrunk.
#[tokio::test]
async fn splits_and_merges_at_every_bit_of_a_byte_keep_every_session() {
    let server = server();
    let layout = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let short = insert_all(&layout, 3000).await;
    let kept = insert_all(&layout, 60).await;
    let grown = survey(&mut raw, &layout).await;
    assert_eq!(grown.sessions, 3060);
    assert_eq!(grown.converted, 0);
    assert!(grown.strays.is_empty(), "{:?}", grown.strays);
    let shape = layout.shape().unwrap();
    // The bit each ancestor of a bucket split by: every place of a byte.
    let mut places = HashSet::new();
    for leaf in &grown.buckets {
        for up in 1..=leaf.depth() {
            let parent = Node {
                group: leaf.group,
                node: leaf.node >> up,
            };
            places.insert(shape.split_bit(parent));
        }
    }
    assert_eq!(places, (0..8).collect::<HashSet<u8>>());
    check_fields(&mut raw, &layout, &grown.buckets).await;
    let all: Vec<SessionId> = short.iter().chain(&kept).copied().collect();
    let fresh = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    for (i, got) in fresh.load_many(&all).await.unwrap().iter().enumerate() {
        let want = record_for(if i < 3000 { i } else { i - 3000 });
        assert_eq!(got.as_ref().map(|s| &s.record), Some(&want), "session {i}");
    }

    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (i, id) in short.iter().enumerate() {
        layout.save(id, &record_for(i), now + 2).await.unwrap();
    }
    wait_past(&mut raw, now + 2).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    assert!(report.merges > 0);
    let after = survey(&mut raw, &layout).await;
    assert!(
        after.buckets.len() * 4 < grown.buckets.len(),
        "{} buckets left of {}",
        after.buckets.len(),
        grown.buckets.len()
    );
    assert_eq!(after.sessions, 60);
    assert_eq!(after.converted, 0);
    assert!(after.strays.is_empty(), "{:?}", after.strays);
    assert_eq!(after.unindexed, 0);
    check_fields(&mut raw, &layout, &after.buckets).await;
    let fresh = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    for (i, id) in kept.iter().enumerate() {
        let got = fresh.load(id).await.unwrap();
        assert_eq!(got.map(|s| s.record), Some(record_for(i)), "kept {i}");
    }
    for id in &short {
        assert_eq!(fresh.load(id).await.unwrap(), None);
    }
}

/// Every session field of `buckets` names an id whose route, by the shape
/// read now, is the bucket it lies in.
async fn check_fields(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<Conn>,
    buckets: &[Node],
) {
    let shape = layout.shape().unwrap();
    for node in buckets {
        let group = layout.fetch_shape(node.group).await.unwrap();
        let fields: Vec<Vec<u8>> = raw.hkeys(shape.bucket_key(*node)).await.unwrap();
        for field in fields.iter().filter(|f| f.len() == shape.field_len(*node)) {
            let id = shape
                .id_of(*node, field)
                .unwrap_or_else(|| panic!("{node:?} holds a field of no id: {field:?}"));
            assert_eq!(shape.leaf(&group, &id), *node, "{node:?}");
        }
    }
}
