//! Tokens, the session cap, viewed items and creates in a growing store.

use super::*;

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
