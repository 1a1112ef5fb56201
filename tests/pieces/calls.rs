//! Loads racing saves, old formats, takes, and the scripts each call sends.

use super::*;

/// Loads racing saves that change the record's size (and so its pieces)
/// see one write's record whole, never pieces of two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loads_racing_saves_see_whole_records() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(100, 0), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    let at = layout.load(&id).await.unwrap().unwrap().expires_at;
    // Each write's record: its length and its bytes follow from its seed.
    let written = |seed: u8| record_of(20 + usize::from(seed) * 37 % 480, seed);
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let layout = layout.clone();
            tokio::spawn(async move {
                for round in 0..150u32 {
                    let seed = (round * 2 + w) as u8;
                    layout.save(&id, &written(seed), at).await.unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let layout = layout.clone();
            tokio::spawn(async move {
                let mut seen = 0;
                for _ in 0..300 {
                    let record = layout.load(&id).await.unwrap().unwrap().record;
                    let seed = record.get(1).map_or(0, |&b| b);
                    let whole = record == written(seed) || record == record_of(100, 0);
                    assert!(whole, "a record of {} bytes mixes writes", record.len());
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    for r in readers {
        assert_eq!(r.await.unwrap(), 300);
    }
    let mut raw = common::raw(&server).await;
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (1, 0, 0));
}

/// A namespace recorded by a version that kept long records out of line
/// (record format 1) keeps them so, for the processes of that version
/// still beside this one; a newer format than this version's is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_of_record_format_1_keeps_records_out_of_line() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let config = CompactConfig::new(4).with_namespace("old");
    let mut meta =
        Compact::<Conn>::meta(&sessionpack::session::buckets::Buckets::new("old", 4).unwrap());
    meta.format = 1;
    meta.claim(&conn, "old").await.unwrap();
    let layout = Compact::new(conn.clone(), config).await.unwrap();
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(300, 9), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    assert_eq!(
        layout.load(&id).await.unwrap().unwrap().record,
        record_of(300, 9)
    );
    let mut raw = common::raw(&server).await;
    let side: Vec<String> = raw.keys("old:*:o:*").await.unwrap();
    assert_eq!(side.len(), 1);
    let recorded = StoreMeta::read(&conn, "old").await.unwrap().unwrap();
    assert_eq!(recorded.format, 1, "opening it changed nothing");

    let mut newer =
        Compact::<Conn>::meta(&sessionpack::session::buckets::Buckets::new("new", 4).unwrap());
    newer.format = sessionpack::session::meta::FORMAT_VERSION + 1;
    newer.claim(&conn, "new").await.unwrap();
    let refused = Compact::new(conn, CompactConfig::new(4).with_namespace("new")).await;
    assert!(
        matches!(refused, Err(sessionpack::Error::Config(_))),
        "{refused:?}"
    );
}

/// A one-time token's consume returns a pieced entry whole and leaves no
/// piece behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_returns_a_pieced_entry_whole() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(400, 5), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    let layout = Arc::new(layout);
    let takers: Vec<_> = (0..4)
        .map(|_| {
            let layout = layout.clone();
            tokio::spawn(async move { layout.take(&id).await.unwrap() })
        })
        .collect();
    let mut got = Vec::new();
    for t in takers {
        if let Some(stored) = t.await.unwrap() {
            got.push(stored.record);
        }
    }
    assert_eq!(got, vec![record_of(400, 5)]);
    let mut raw = common::raw(&server).await;
    assert_eq!(census(&mut raw, &layout).await, Census::default());
}

/// A growing store of a namespace whose pieces have long names (record
/// formats before 7) deletes a session it has not read with plain
/// commands, since a bucket holding the session's field is current; only a
/// miss asks for the bucket's marker, in a script. Where pieces may have
/// short names, which another session may take once this one is gone, a
/// delete of a session it has not read (or read in pieces) is one script
/// of two commands that reads the value (`compact_unset.lua`), and a miss
/// is that and the script that also reads the bucket's marker. Pieces go
/// with the session either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unseen_delete_in_a_growing_store_takes_its_pieces_in_one_call() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    for format in [SHORT_PIECES_FORMAT - 1, SHORT_PIECES_FORMAT] {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
        let conn = common::manager(&server).await;
        drop(
            Compact::new(conn.clone(), CompactConfig::growing())
                .await
                .unwrap(),
        );
        let _: () = raw
            .hset(StoreMeta::key("sp"), "format", format)
            .await
            .unwrap();
        let layout = Compact::new(conn, CompactConfig::growing()).await.unwrap();
        assert_eq!(layout.format(), format);
        let ids = insert_each(&layout, 300, 20).await;
        // The scripts loaded (a first call is counted twice): a miss.
        let none = layout.new_id().await.unwrap();
        assert!(!layout.delete(&none, None).await.unwrap());
        let before = common::calls(&mut raw, "evalsha").await;
        for id in &ids {
            assert!(layout.delete(id, None).await.unwrap());
        }
        let scripts = if format < SHORT_PIECES_FORMAT { 0 } else { 20 };
        assert_eq!(common::calls(&mut raw, "evalsha").await - before, scripts);
        assert!(!layout.delete(&none, None).await.unwrap());
        let miss = if format < SHORT_PIECES_FORMAT { 1 } else { 2 };
        assert_eq!(
            common::calls(&mut raw, "evalsha").await - before,
            scripts + miss
        );
        for id in &ids {
            assert!(layout.load(id).await.unwrap().is_none());
        }
        let c = census(&mut raw, &layout).await;
        assert_eq!(
            (c.sessions, c.pieces, c.orphans),
            (0, 0, 0),
            "format {format}"
        );
    }
}

/// A touch of a record in pieces takes the short script, which moves the
/// expiry in its value and keeps every piece: one script a touch, on
/// fixed and growing buckets alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_of_records_in_pieces_take_one_script_each() {
    let server = common::server();
    for config in fixed_and_growing() {
        let layout = Compact::new(common::manager(&server).await, config)
            .await
            .unwrap();
        let mut raw = common::raw(&server).await;
        let ids = insert_each(&layout, 300, 40).await;
        let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
        // The script loaded (a first call is counted twice), on an id of
        // no session: nothing moves.
        let none = layout.new_id().await.unwrap();
        assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
        let before = common::calls(&mut raw, "evalsha").await;
        for id in &ids {
            assert_eq!(layout.touch_until(id, at).await.unwrap(), Some(at));
        }
        let scripts = common::calls(&mut raw, "evalsha").await - before;
        assert_eq!(scripts, ids.len() as u64);
        for (n, id) in ids.iter().enumerate() {
            let stored = layout.load(id).await.unwrap().unwrap();
            assert_eq!(stored.record, record_of(300, n as u8));
            assert_eq!(stored.expires_at, at);
        }
    }
}

/// A save of a record in pieces takes the short script too, whether it
/// keeps its pieces, needs fewer (the rest go in the same step) or none;
/// one needing more pieces than before takes it on fixed buckets, and on
/// growing ones is handed to the full script, which replies with the
/// bucket's field count the store splits by. No piece is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_of_records_in_pieces_take_the_short_script() {
    let server = common::server();
    for (config, growing) in fixed_and_growing().into_iter().zip([false, true]) {
        let layout = Compact::new(common::manager(&server).await, config)
            .await
            .unwrap();
        let mut raw = common::raw(&server).await;
        // (record length, scripts the save costs)
        let steps = [
            (300, 1),
            (301, 1),
            (150, 1),
            (40, 1),
            (150, if growing { 2 } else { 1 }),
            (400, if growing { 2 } else { 1 }),
            (400, 1),
        ];
        // Twice: the first time loads the scripts (a first call is
        // counted twice), the second counts them.
        for pass in 0..2 {
            let id = layout.new_id().await.unwrap();
            layout
                .insert(&id, &record_of(300, 1), sessionpack::ttl::Deadline::In(600))
                .await
                .unwrap();
            let mut at = layout.load(&id).await.unwrap().unwrap().expires_at;
            for (n, (len, cost)) in steps.into_iter().enumerate() {
                at += 1;
                let record = record_of(len, n as u8);
                let before = common::calls(&mut raw, "evalsha").await;
                let saved = layout.save(&id, &record, at).await.unwrap();
                assert_eq!(saved, sessionpack::session::layout::Written::Done);
                let scripts = common::calls(&mut raw, "evalsha").await - before;
                if pass == 1 {
                    assert_eq!(scripts, cost, "a save to {len} bytes (growing: {growing})");
                }
                let stored = layout.load(&id).await.unwrap().unwrap();
                assert_eq!((stored.record, stored.expires_at), (record, at));
                let c = census(&mut raw, &layout).await;
                assert_eq!((c.sessions, c.orphans, c.missing), (1, 0, 0), "{len}");
            }
            assert_eq!(
                layout.remove(&id, None).await.unwrap(),
                sessionpack::session::layout::Written::Done
            );
        }
        assert_eq!(
            census(&mut raw, &layout).await.but_holds(),
            Census::default()
        );
    }
}

/// A record this long is kept out of line, under a key of its own.
const OUT_OF_LINE: usize = 2000;

/// A touch of a record out of line goes to the full script, which moves
/// its expiry and its record key's; after a few the short script (which
/// takes only records kept in their buckets) is no longer tried first, so
/// such a touch costs one script, and one in 32 still tries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_of_records_out_of_line_go_to_the_full_script_first() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    let ids = insert_each(&layout, OUT_OF_LINE, 40).await;
    let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
    // Both scripts loaded (a first call is counted twice, the one the
    // server did not know yet too), on an id of no session: nothing moves.
    let none = layout.new_id().await.unwrap();
    assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
    assert_eq!(layout.touch(&none, 600).await.unwrap(), None);
    let before = common::calls(&mut raw, "evalsha").await;
    for id in &ids {
        assert_eq!(layout.touch_until(id, at).await.unwrap(), Some(at));
    }
    let scripts = common::calls(&mut raw, "evalsha").await - before;
    // Four touches try the short script and then the full one; of the 36
    // after them, the one with 32 handed on before it tries the short one
    // again.
    assert_eq!(scripts, 4 * 2 + 36 + 1);
    for (n, id) in ids.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(OUT_OF_LINE, n as u8));
        assert_eq!(stored.expires_at, at);
    }
}

/// The same with 16 touches in flight at once: the run of touches handed
/// on is counted as replies come, so only those in flight before it reached
/// its length try the short script first, and the probes stay one touch
/// in 32 (they used to be every touch begun while the count stood at a
/// multiple of 32: 1.4 scripts a touch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_in_flight_at_once_cost_about_one_script_each() {
    const IN_FLIGHT: usize = 16;
    const ROUNDS: usize = 40;
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    let ids = insert_each(&layout, OUT_OF_LINE, IN_FLIGHT as u8).await;
    let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
    let none = layout.new_id().await.unwrap();
    assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
    assert_eq!(layout.touch(&none, 600).await.unwrap(), None);
    let before = common::calls(&mut raw, "evalsha").await;
    for round in 0..ROUNDS {
        let mut touches = tokio::task::JoinSet::new();
        for id in &ids {
            let (layout, id) = (layout.clone(), *id);
            touches.spawn(async move { layout.touch_until(&id, at + round as u64).await });
        }
        while let Some(touched) = touches.join_next().await {
            assert!(touched.unwrap().unwrap().is_some());
        }
    }
    let scripts = common::calls(&mut raw, "evalsha").await - before;
    let touches = (IN_FLIGHT * ROUNDS) as u64;
    // One script a touch; twice for at most the first round's and the
    // probes (one in 32).
    let most = touches + IN_FLIGHT as u64 + touches.div_ceil(32);
    assert!(
        scripts <= most,
        "{scripts} scripts for {touches} touches (at most {most})"
    );
    for (n, id) in ids.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(OUT_OF_LINE, n as u8));
        assert_eq!(stored.expires_at, at + ROUNDS as u64 - 1);
    }
}
