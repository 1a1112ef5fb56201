//! Records of every size through every write, sweep and cap.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_round_trips_through_every_write() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    // Around each boundary: one value (60), a first piece (61, 122), each
    // further piece, where pieces are cut at 64 bytes rather than 63
    // (117, 118; 181, 182), the last size kept in pieces and the first out
    // of line; and records beginning with the markers' bytes.
    let mut sizes: Vec<usize> = vec![
        1, 2, 59, 60, 61, 62, 116, 117, 118, 119, 121, 122, 123, 181, 182, 186, 187, 300,
    ];
    sizes.extend([
        MAX_PIECED_RECORD - 1,
        MAX_PIECED_RECORD,
        MAX_PIECED_RECORD + 1,
        2000,
    ]);
    let mut records: Vec<Vec<u8>> = sizes.iter().map(|&n| record_of(n, n as u8)).collect();
    records.push(vec![0xc3]);
    records.push(vec![0xc3, 0x02, 0x41]);
    records.push(vec![0xc1]);
    records.push([vec![0xc3], vec![7; 200]].concat());
    for (n, record) in records.iter().enumerate() {
        let id = layout.new_id().await.unwrap();
        let created = layout
            .insert(&id, record, sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(
            matches!(
                created,
                sessionpack::session::layout::Inserted::Created { .. }
            ),
            "{n}"
        );
        assert_eq!(&layout.load(&id).await.unwrap().unwrap().record, record);
        // Replaced by every other size in turn, up and down.
        for other in records.iter().cycle().skip(n + 1).take(records.len()) {
            let written = layout.replace(&id, other, None).await.unwrap();
            assert_eq!(written, sessionpack::session::layout::Written::Done);
            let stored = layout.load(&id).await.unwrap().unwrap();
            assert_eq!(&stored.record, other, "{} after {}", other.len(), n);
            assert_eq!(census(&mut raw, &layout).await.orphans, 0);
            // A save, at a later expiry.
            let at = stored.expires_at + 1;
            let saved = layout.save(&id, record, at).await.unwrap();
            assert_eq!(saved, sessionpack::session::layout::Written::Done);
            let stored = layout.load(&id).await.unwrap().unwrap();
            assert_eq!((&stored.record, stored.expires_at), (record, at));
            let written = layout.replace(&id, other, Some(record)).await.unwrap();
            assert_eq!(written, sessionpack::session::layout::Written::Done);
        }
        let stored = layout.load(&id).await.unwrap().unwrap();
        // A conditional remove matches the whole record.
        let wrong = sessionpack::session::layout::Stored {
            record: record_of(stored.record.len() + 1, 1),
            expires_at: stored.expires_at,
        };
        assert_eq!(
            layout.remove(&id, Some(&wrong)).await.unwrap(),
            sessionpack::session::layout::Written::Conflict
        );
        assert_eq!(
            layout.remove(&id, Some(&stored)).await.unwrap(),
            sessionpack::session::layout::Written::Done
        );
        assert!(layout.load(&id).await.unwrap().is_none());
    }
    let left = census(&mut raw, &layout).await;
    assert_eq!(left.but_holds(), Census::default(), "nothing left behind");
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");
}

/// At the default `hash-max-listpack-value` (64) a record's pieces are cut
/// at 63 bytes, whose listpack entries take a one-byte header, unless that
/// takes one piece more than cutting at 64: the value then holds 64 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_are_cut_at_63_bytes_unless_that_takes_one_more() {
    let server = common::server();
    let layout = compact(&server, 1).await;
    let mut raw = common::raw(&server).await;
    // A value holds 6 bytes of head; the payload is the record and its
    // 4-byte check.
    let pieces = |payload: usize, size: usize| payload.saturating_sub(size - 6).div_ceil(size);
    let mut cut = HashSet::new();
    for len in (61..=200).chain(480..=MAX_PIECED_RECORD) {
        let record = record_of(len, len as u8);
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record, sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        let found = damage::pieced_sessions(&mut raw).await;
        let [(key, field, value)] = &found[..] else {
            panic!("{len}: {} sessions in pieces", found.len());
        };
        let payload = len + 4;
        let size = if pieces(payload, 63) == pieces(payload, 64) {
            63
        } else {
            64
        };
        let count = usize::from(value[5] & 0x0f);
        assert_eq!((value.len(), count), (size, pieces(payload, size)), "{len}");
        // No piece is longer than the cut, and the pieces hold the rest.
        let values: HashMap<Vec<u8>, Vec<u8>> = raw.hgetall(key).await.unwrap();
        let rest: Vec<usize> = values
            .iter()
            .filter(|(f, _)| *f != field && !f.is_empty())
            .map(|(_, v)| v.len())
            .collect();
        assert_eq!(rest.len(), count, "{len}");
        assert!(rest.iter().all(|&n| n <= size), "{len}: {rest:?}");
        assert_eq!(rest.iter().sum::<usize>() + size - 6, payload, "{len}");
        assert_eq!(layout.load(&id).await.unwrap().unwrap().record, record);
        assert!(layout.delete(&id, Some(len)).await.unwrap());
        cut.insert(size);
    }
    assert_eq!(cut, HashSet::from([63, 64]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieced_sessions_stay_in_listpacks_and_load_in_one_command() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let mut raw = common::raw(&server).await;
    // 400 sessions of 16 buckets, each record 103 to 114 bytes: 58 in the
    // value, the rest in one piece.
    let mut sessions = Vec::new();
    for i in 0..400u64 {
        let attrs = format!("{i:0>width$}", width = 100 + (i % 10) as usize);
        sessions.push(store.create(i + 1, attrs).await.unwrap());
    }
    let c = census(&mut raw, &layout).await;
    assert_eq!(
        (c.sessions, c.pieces, c.orphans, c.missing, c.converted),
        (400, 400, 0, 0, 0)
    );
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty());

    // Once a pieced record has been read, each load asks for its value
    // and one piece in one HMGET, and nothing else.
    assert!(store.load(&sessions[0].id).await.unwrap().is_some());
    let (hmget, hget) = (
        common::calls(&mut raw, "hmget").await,
        common::calls(&mut raw, "hget").await,
    );
    for s in &sessions[1..101] {
        let loaded = store.load(&s.id).await.unwrap().unwrap();
        assert_eq!(loaded.attrs, s.attrs);
    }
    assert_eq!(common::calls(&mut raw, "hmget").await - hmget, 100);
    assert_eq!(common::calls(&mut raw, "hget").await - hget, 0);
}

/// A process deletes a session it saw short moments after another saved it
/// long: the pieces the delete did not know of are left, and the
/// sweeper's next visit of the bucket removes them. A delete of a session
/// the process has not seen leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_a_stale_delete_left_are_swept() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(30, 1), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        let at = layout.load(&id).await.unwrap().unwrap().expires_at;
        // Another process grows it to four pieces.
        layout.save(&id, &record_of(300, 2), at).await.unwrap();
        // This one deletes it as it saw it: 30 bytes, one value.
        delete_leaving_pieces(&mut raw, &layout, &id, 30, 4).await;
        ids.push(id);
    }
    assert_eq!(census(&mut raw, &layout).await.orphans, 80);
    // Live sessions in pieces beside them (in all four buckets, but by a
    // chance of 1 in 20,000): the sweep sorts the pieces out, rather than
    // dropping a bucket whole.
    let live = insert_each(&layout, 300, 40).await;
    // A full pass visits every bucket (a due one is visited by every pass:
    // the index keeps the deleted sessions' expiries as lower bounds).
    Sweeper::new(layout.clone(), SweepConfig::default())
        .sweep_range_full(0..layout.scheme().groups())
        .await
        .unwrap();
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (40, 0, 0));
    for (n, id) in live.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(300, n as u8));
        assert!(layout.delete(id, Some(300)).await.unwrap());
    }
    // The fields a session takes are gone with it, in each form.
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(300, 4), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    assert!(layout.delete(&id, Some(300)).await.unwrap());
    assert!(!layout.delete(&id, None).await.unwrap());
    // Unseen, by a process that has read no pieced record: the field and
    // every piece go at once, whatever the record's length, with no sweep.
    let fresh = compact(&server, 2).await;
    for len in [100, 300, MAX_PIECED_RECORD] {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(len, 4), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(census(&mut raw, &layout).await.pieces > 0);
        assert!(fresh.delete(&id, None).await.unwrap());
        assert!(layout.load(&id).await.unwrap().is_none());
        let c = census(&mut raw, &layout).await;
        assert_eq!((c.pieces, c.orphans, c.missing), (0, 0, 0), "{len} bytes");
    }
}

/// A batch load reads each value with as many pieces as the last pieced
/// record had, and the records with more in one more round trip: every
/// size comes back whole, gone and expired ones as none, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_load_returns_records_of_every_size_whole() {
    let server = common::server();
    let layout = compact(&server, 3).await;
    let mut raw = common::raw(&server).await;
    let sizes = [10, 100, 400, 61, 250, MAX_PIECED_RECORD, 2000, 130];
    let mut ids = Vec::new();
    let mut records = Vec::new();
    for n in 0..240usize {
        let id = layout.new_id().await.unwrap();
        let record = record_of(sizes[n % sizes.len()], n as u8);
        let created = layout
            .insert_new(&id, &record, sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(matches!(
            created,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
        ids.push(id);
        records.push(Some(record));
    }
    // One deleted, one expired (its value's expiry rewritten to the past).
    assert!(layout.delete(&ids[5], None).await.unwrap());
    records[5] = None;
    let bucket = layout
        .scheme()
        .bucket_key(layout.buckets().bucket_of(&ids[9]));
    let field = layout.buckets().field(&ids[9]);
    let value: Vec<u8> = raw.hget(&bucket, &field).await.unwrap();
    let mut past = value.clone();
    past[..4].copy_from_slice(&1_000_000_000u32.to_be_bytes());
    let _: () = raw.hset(&bucket, &field, past).await.unwrap();
    records[9] = None;
    // From a process that has read nothing, then from one that has.
    for _ in 0..2 {
        let fresh = compact(&server, 3).await;
        let found = fresh.load_many(&ids).await.unwrap();
        let found: Vec<Option<Vec<u8>>> = found.into_iter().map(|s| s.map(|s| s.record)).collect();
        assert_eq!(found, records);
        let again = layout.load_many(&ids).await.unwrap();
        assert_eq!(again.len(), ids.len());
        for (got, want) in again.into_iter().zip(&records) {
            assert_eq!(got.map(|s| s.record).as_ref(), want.as_ref());
        }
    }
}

/// A create writes its value first and its pieces only once the value is
/// in, in one script: under an id a stale delete left pieces under, the
/// new record is read whole, and the stale pieces, under short names no
/// value claims (and which another session's could share), are written
/// over by none: the record takes long names, and the sweeper removes
/// them (`pieces_a_stale_delete_left_are_swept`); under a live
/// session, nothing is written and the id is reported taken. A foreign
/// key where the index goes leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_under_a_drawn_id_never_mixes_with_what_is_there() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let in_600 = sessionpack::ttl::Deadline::In(600);
    // Four pieces a stale delete left under `id` (see above).
    let id = layout.new_id().await.unwrap();
    layout.insert(&id, &record_of(30, 1), in_600).await.unwrap();
    let at = layout.load(&id).await.unwrap().unwrap().expires_at;
    layout.save(&id, &record_of(300, 2), at).await.unwrap();
    delete_leaving_pieces(&mut raw, &layout, &id, 30, 4).await;
    assert_eq!(census(&mut raw, &layout).await.orphans, 4);

    // Six pieces, under long names beside the four stale short ones,
    // whether the id was just drawn or others may know it.
    let long = record_of(400, 3);
    let created = layout.insert_new(&id, &long, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, long);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (1, 6, 4));
    assert!(layout.delete(&id, None).await.unwrap());
    let created = layout.insert(&id, &long, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, long);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (1, 6, 4));

    // Under a live session of one piece: it is left exactly as it was,
    // and nothing of the longer record is written.
    let live = layout.new_id().await.unwrap();
    let short = record_of(100, 4);
    let created = layout.insert_new(&live, &short, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    let created = layout.insert_new(&live, &long, in_600).await.unwrap();
    assert_eq!(created, sessionpack::session::layout::Inserted::IdTaken);
    assert_eq!(layout.load(&live).await.unwrap().unwrap().record, short);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans, c.missing), (2, 7, 4, 0));
    // The same create sent twice (its reply lost) is done.
    let twice = layout.new_id().await.unwrap();
    for _ in 0..2 {
        let created = layout.insert_new(&twice, &long, in_600).await.unwrap();
        assert!(matches!(
            created,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
    }

    // Another program's string where a group's index goes: the create
    // fails with a typed error and takes its value and pieces back out.
    let scheme: &GroupedBuckets = layout.scheme();
    let foreign = layout.new_id().await.unwrap();
    let index = scheme.index_key(scheme.group_of(layout.buckets().bucket_of(&foreign)));
    let before = census(&mut raw, &layout).await;
    let _: () = raw.del(&index).await.unwrap();
    let _: () = raw.set(&index, "theirs").await.unwrap();
    let failed = layout.insert_new(&foreign, &long, in_600).await;
    assert!(
        matches!(failed, Err(sessionpack::Error::WrongType { .. })),
        "{failed:?}"
    );
    assert!(layout.load(&foreign).await.unwrap().is_none());
    assert_eq!(census(&mut raw, &layout).await, before);
}

/// Expired pieced sessions go with their pieces, and the session cap
/// counts sessions, not the fields their pieces take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_and_the_cap_take_pieces_with_their_sessions() {
    let server = common::server();
    // About 22 sessions, under 120 fields, a bucket: none converts.
    let layout = compact(&server, 5).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let mut raw = common::raw(&server).await;
    let batch: Vec<(u64, String)> = (0..600)
        .map(|i| (i, "p".repeat(60 + (i as usize * 7) % 400)))
        .collect();
    store.create_many(&batch).await.unwrap();
    let brief: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let short: Vec<(u64, String)> = (0..100).map(|i| (i, "q".repeat(200))).collect();
    let expiring = brief.create_many(&short).await.unwrap();
    assert_eq!(census(&mut raw, &layout).await.sessions, 700);
    // Wait until the server's clock has passed them all.
    let ids = expiring;
    while common::found(&brief, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = Sweeper::new(layout.clone(), SweepConfig::default())
        .pass()
        .await
        .unwrap();
    assert_eq!(report.reclaimed, 100);
    let c = census(&mut raw, &layout).await;
    assert_eq!(
        (c.sessions, c.orphans, c.missing, c.converted),
        (600, 0, 0, 0)
    );
    assert!(c.pieces > 600, "{c:?}");

    let capped = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(250),
    )
    .pass()
    .await
    .unwrap();
    assert_eq!(capped.evicted, 350);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (250, 0, 0));
}
